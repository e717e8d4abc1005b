// harness/check/kernel_check.h — `invar kernels`: is every op of a kernel set batch-invariant and
// accurate? For each op of the table (harness/check/op_table.h) and each of its shapes, a few probe
// rows are computed alone (M=1, twice) and then placed first, in the middle, last and at a
// random position of batches of M other random rows; their output bytes are compared with
// memcmp. Every other row of each batch is a "pool" row that sits at the same position in
// every batch, and is compared with the same row of the largest batch: thousands of rows
// compared for the price of one run per M (bf16 outputs hide most fp32 reorderings, so many
// rows are needed to catch one). Accuracy is the worst rel-L2 error of any probe output against the float64 oracle.
#ifndef INVAR_HARNESS_KERNEL_CHECK_H
#define INVAR_HARNESS_KERNEL_CHECK_H

#include <stdbool.h>          // bool
#include <stdint.h>           // uint64_t
#include "../../kernels/ops.h" // ops_set
#include "../../kernels/fingerprint.h" // fingerprint_sink, fingerprint_mismatch
#include "op_table.h"         // op_entry, op_shape

// The batch sizes a row is checked in, and the shorter list of --quick.
extern const int kernel_check_batch_sizes[];
extern const int kernel_check_batch_sizes_count;
extern const int kernel_check_quick_batch_sizes[];
extern const int kernel_check_quick_batch_sizes_count;
// --exhaustive's list: both sides of every power-of-two size a kernel tiles or blocks by.
extern const int kernel_check_exhaustive_batch_sizes[];
extern const int kernel_check_exhaustive_batch_sizes_count;

#define KERNEL_CHECK_MAX_M 72  // the 64 batch sizes a shape takes at most, and 1, 2, 3

typedef struct {
    bool invariant;      // every probe row bitwise equal alone and in every batch
    int first_vary_M;    // first M at which a probe row differed (1: two runs alone); 0: none
    int first_vary_pos;  // its position in that batch
    int first_vary_vs;   // what it differed from: 1 the row alone, else the largest batch's M
    double err;          // worst rel-L2 error against the float64 oracle
    double tol;
    bool accurate;       // err <= tol
    bool written;        // every output element written, nothing outside the outputs
    // Every call of an op at this static shape (alone, in every batch) noted one order
    // fingerprint (kernels/fingerprint.h); a set that notes nothing keeps this true.
    bool order_stable;
    fingerprint_mismatch order_diff;  // the first two fingerprints that differed
    bool pass;           // what the set promises held (see kernel_check_op)
    int batches;         // batches run (for the report)
    // Every batch size a row was compared at, ascending, and whether a row varied there: the
    // VARIES line names the M that were stable and the M that varied.
    int n_M;
    int M[KERNEL_CHECK_MAX_M];
    bool M_varied[KERNEL_CHECK_MAX_M];
} check_result;

struct check_opts;
typedef void (*check_shape_fn)(void *user, ops_set *ops, const op_entry *op,
                               const op_shape *shape, const check_result *r);
// A shape not checked on this machine, and why (it needs more GPUs than are visible).
typedef void (*skip_shape_fn)(void *user, ops_set *ops, const op_entry *op,
                              const op_shape *shape, const char *why);

typedef struct check_opts {
    const int *batch_sizes;    // NULL: kernel_check_batch_sizes (or the quick list)
    int n_batch_sizes;
    bool quick;                // the quick M list, and only the shapes marked quick
    bool exhaustive;           // the exhaustive M list, and the shapes marked exhaustive too
    const char *shape_label;   // non-NULL: only the shape of this label (quick or exhaustive
                               // marks aside; the M list is still --quick's or --exhaustive's)
    uint64_t seed;             // every input derives from it
    const op_shape *shapes;    // NULL: the op's list for ops->device
    // Where every call's path is noted for coverage (NULL: a sink of the shape's own); its
    // orders are forgotten at each shape's start, the paths kept.
    fingerprint_sink *fingerprints;
    check_shape_fn on_shape;   // called after each shape (may be NULL)
    skip_shape_fn on_skip;     // called for each shape skipped (may be NULL)
    void *user;
} check_opts;

// Checks one op at one shape; r->pass tells whether the set's promise held at this shape:
// a batch-invariant set must be invariant, accurate and fully written; a reference set must
// be accurate and fully written (varying is allowed here; see kernel_check_op).
void kernel_check_shape(ops_set *ops, const op_entry *op, const op_shape *shape,
                        int shape_index, const check_opts *o, check_result *r);

// Checks one op at every shape of the list; `summary` receives the worst case over them
// (invariant only when every shape was, first_vary_M of the first shape that varied).
// summary->pass also holds the negative control: a reference set whose op is REF_MUST_VARY
// must have varied at some shape. Returns the number of shapes checked.
int kernel_check_op(ops_set *ops, const op_entry *op, const check_opts *o,
                    check_result *summary);

// Whether the set vouches for op's invariance: a built-in set as a whole, a plugin set op by op.
bool kernel_check_expects_invariant(const ops_set *ops, const op_entry *op);
// Whether a set's op not vouched for is a negative control that must be caught varying.
bool kernel_check_must_vary(const op_entry *op, const ops_set *ops);
// The plugin ABI's op a checker op runs (gemm_f32 is gemm's fp32 store); -1 for ops no plugin
// provides (kernels/invar_plugin.h).
int kernel_check_plugin_op(const op_entry *op);
// The list of M when the caller gave none: --quick's, --exhaustive's or the default.
void kernel_check_default_batch_sizes(const check_opts *o, const int **Ms, int *n);
// The op's shapes on a device: o->shapes when given, else the op's list for that device.
const op_shape *kernel_check_shape_list(const op_entry *op, const char *device, const check_opts *o);
// Whether o selects a shape of a list (--shape, --quick, --exhaustive).
bool kernel_check_shape_selected(const op_shape *s, const check_opts *o);
// The shapes of a list (ended by a NULL label) that o selects (--shape, --quick, --exhaustive).
int kernel_check_count_shapes(const op_shape *shapes, const check_opts *o);

#endif
