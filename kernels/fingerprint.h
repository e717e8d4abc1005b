// kernels/fingerprint.h — what an invariant kernel records of each call, so the harness can
// show the invariant path actually ran: the choices that fix its reduction order (hashed into
// one 64-bit order fingerprint) and, apart from them, the dispatch path it took (for coverage).
//
// Per call a kernel notes its op, a static shape key (what fixes the function whatever the
// batch: N and K for a GEMM, D for a norm, heads and widths for attention, T for an
// all-reduce), the order fingerprint (split size and count rule, tile, lane width, merge
// tree; never M) and a path name from the set's declared list (a block shape, a tail loop:
// it may change with M). The record is host-side, once per call, out of the hot loops; with
// no sink attached (ops_set.fingerprints NULL) it costs a few hash rounds and one branch.
#ifndef INVAR_KERNELS_FINGERPRINT_H
#define INVAR_KERNELS_FINGERPRINT_H

#include <stdbool.h>  // bool
#include <stdint.h>   // uint64_t

typedef struct fingerprint_sink fingerprint_sink;

// Two calls of one op at one shape whose order fingerprints differ: the first of each.
typedef struct {
    const char *op;
    uint64_t shape;
    uint64_t order_a, order_b;
    int batch_a, batch_b;     // the batch (fingerprint_sink_batch) each was noted in
} fingerprint_mismatch;

#ifdef __cplusplus
extern "C" {
#endif

// The order fingerprint of n order-determining parameters, in the order given.
uint64_t fingerprint_order(const long *params, int n);

// Notes one call. NULL sink: nothing. Thread-safe (a CPU tensor-parallel group's ranks are
// threads of one process sharing one set).
void fingerprint_note(fingerprint_sink *s, const char *op, uint64_t shape, uint64_t order,
                      const char *path);

fingerprint_sink *fingerprint_sink_create(void);
void fingerprint_sink_destroy(fingerprint_sink *s);
// The batch (M) the next calls belong to, as a mismatch names it.
void fingerprint_sink_batch(fingerprint_sink *s, int batch);
// Forgets the orders (not the paths): a new static shape starts from nothing.
void fingerprint_sink_reset_orders(fingerprint_sink *s);
// Whether two calls of one op and shape had different order fingerprints (the first such).
bool fingerprint_sink_mismatch(const fingerprint_sink *s, fingerprint_mismatch *out);
// Whether a path "op:path" (as a set declares it in ops_set.paths) was noted, by exact name.
bool fingerprint_sink_reached(const fingerprint_sink *s, const char *op_path);
// The distinct "op:path" names noted, in first-seen order; returns how many (at most max).
int fingerprint_sink_paths(const fingerprint_sink *s, const char **names, int max);

#ifdef __cplusplus
}
#endif

#endif
