// sets/op_tap.h — an op tap: a wrapper kernel set that forwards every call unchanged and hashes
// (XXH3) the output rows one request holds in each op call, so two runs of that request (alone
// and inside a batch) can be compared op by op and the first op whose rows differ named
// (harness/run/localize.h). Whoever drives the engine says which request and position each
// row of the calls that follow holds (op_tap_rows; the engine's rows observer). Rows are read
// through the inner set's download op, so the tap works on every device. Like the profiler's
// wrapper (harness/bench/op_profile.h) it wraps one rank: on a tensor-parallel group it wraps
// rank 0, whose collectives' results every rank shares.
#ifndef INVAR_SETS_OP_TAP_H
#define INVAR_SETS_OP_TAP_H

#include <stdbool.h>              // bool
#include <stddef.h>               // size_t
#include <stdint.h>               // int32_t, uint64_t
#include "../kernels/ops.h"       // ops_set

// What a row of the calls that follow is (as engine/engine.h's engine_rows_kind).
typedef enum { OP_TAP_TOKENS, OP_TAP_KEYS, OP_TAP_SAMPLES } op_tap_rows_kind;

#define OP_TAP_SHAPE 48

// One row of the followed request in one op call.
typedef struct {
    uint64_t key;               // (layer, kind, position, ordinal) packed: op_tap_key
    int layer;                  // -1 embedding, the layer, or the layer count for the head
    op_tap_rows_kind kind;
    int position;               // the request's position the row holds
    int ordinal;                // this row's call within the layer, from 0
    const char *op;             // "gemm", "rmsnorm", ... (ops.h's member name)
    char shape[OP_TAP_SHAPE];   // what fixes the call besides M: "N=576 K=256"
    int M;                      // rows of the call
    int row;                    // the request's row in it
    uint64_t hash;              // XXH3 of the row's output bytes
    long nonfinite;             // its NaN and infinite bf16 / f32 elements
} op_tap_entry;

typedef enum { OP_TAP_BF16, OP_TAP_F32, OP_TAP_I32 } op_tap_type;

#define OP_TAP_MAX_SEGMENTS 8

// The bytes of one captured row: segments of one element type each, back to back.
typedef struct {
    int n_segments;
    op_tap_type type[OP_TAP_MAX_SEGMENTS];
    long count[OP_TAP_MAX_SEGMENTS];   // elements
    unsigned char *bytes;
    size_t n_bytes;
} op_tap_row;

typedef struct op_tap op_tap;

// Wraps `inner` (which stays the caller's: op_tap_destroy does not free it).
op_tap *op_tap_wrap(ops_set *inner);
// The set to hand to the engine in place of the inner one.
ops_set *op_tap_set(op_tap *t);
void op_tap_destroy(op_tap *t);

// The rows of the calls that follow: request[i] and position[i] for row i, n rows (host
// arrays that stay valid until the next call). A new layer (or layer -1: a new step) starts the
// ordinals again.
void op_tap_rows(op_tap *t, int layer, op_tap_rows_kind kind, const int32_t *request,
                 const int32_t *position, int n);

// Records every row of `request` from now on (the entries so far are dropped); -1 records none.
void op_tap_follow(op_tap *t, int request);
const op_tap_entry *op_tap_entries(const op_tap *t, int *n);
// Op calls whose rows the tap could not place (more rows than announced): not compared.
long op_tap_unplaced(const op_tap *t);

// Compares every row recorded from now on with `expected` (another run's entries, copied):
// the first row whose key is there with another op or hash is kept (its bytes) and its index
// returned by op_tap_first_mismatch (-1 while none). op_tap_follow forgets the expectation.
void op_tap_expect(op_tap *t, const op_tap_entry *expected, int n);
int op_tap_first_mismatch(const op_tap *t);
// The entry of `expected` with this key that a mismatch was compared with (the first recorded).
const op_tap_entry *op_tap_expected(const op_tap *t, uint64_t key);

// Keeps the bytes of the `occurrence`-th (from 0) row of the followed request with this key,
// from now on; op_tap_captured returns it (or the first mismatch's row) once seen, else NULL.
void op_tap_capture(op_tap *t, uint64_t key, int occurrence);
const op_tap_row *op_tap_captured(const op_tap *t);

uint64_t op_tap_key(int layer, op_tap_rows_kind kind, int position, int ordinal);

#endif
