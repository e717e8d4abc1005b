// harness/check/ops/op_section.h — how an op of the kernel checker is written (harness/check/op_table.h).
//
// An op section declares its buffers and gives four functions; harness/check/op_run.c does the
// rest for every op alike: allocates each buffer for M rows, builds row j's inputs from its
// seed, poisons every output byte (0xFF), uploads, calls the op, syncs, downloads, checks that
// every output element was written and that every gap (ld > width) and unused slot was not,
// and hands the checker each row's output bytes.
//   declare  the buffers (op_buffer) and the shape's shared inputs (op_shared_*)
//   row      one row's inputs from its seed, into its slice of every OP_ROW_IN/INOUT buffer
//   batch    inputs of the whole batch (a paged cache, a block table, slots); may be NULL
//   call     the op on the batch's device buffers
//   error    one row's output against the float64 oracle (kernels/f64/f64.h)
// A call may keep state across the shape's batches in c->state, with c->state_free to free it.
// A row's inputs come only from its seed (op_rng_from), so a row is the same alone and in a
// batch.
#ifndef INVAR_HARNESS_OPS_OP_SECTION_H
#define INVAR_HARNESS_OPS_OP_SECTION_H

#include <stdbool.h>           // bool
#include <stdint.h>            // int32_t, uint64_t
#include "../op_run.h"         // op_case, op_entry, op_shape, ops_set, bf16
#include "../../../common/thread_pool.h" // thread_pool, thread_pool_fn

#define OP_POISON 0xFF  // every output byte before a run: bf16 0xFFFF / fp32 NaN / int32 -1
#define OP_MAX_BUFFERS 8
#define OP_MAX_SHARED 4

enum op_buffer_kind {
    OP_ROW_IN,    // each row's slice made by the section's row function
    OP_ROW_INOUT, // in place: made like OP_ROW_IN (gaps poisoned), checked like OP_OUT
    OP_OUT,       // poisoned, then every element of every row must be written
    OP_BATCH_IN,  // made by the section's batch function (op_batch_input), any size
};

typedef struct {
    enum op_buffer_kind kind;
    const char *what;   // names it in allocation errors
    int elem;           // bytes per element
    int per_row;        // sub-rows a row owns: heads, experts, a chunk's tokens
    long width;         // elements of a sub-row the op reads (inputs) or must write (outputs)
    long ld;            // elements between sub-rows (>= width)
    // An output the batch scatters: slots_per_row * M row slots, row m in slot
    // batch->row_slot[m]; unused slots must stay poisoned. 1: row m in slot m.
    int slots_per_row;
} op_buffer;

struct op_case {
    ops_set *ops;
    const op_section *section;
    const op_shape *s;
    uint64_t seed;
    op_buffer buf[OP_MAX_BUFFERS];
    int n_buf;
    void *shared[OP_MAX_SHARED];  // device copies of the shape's shared inputs
    void *host[OP_MAX_SHARED];    // host copies, for the oracle
    // Builds rows in parallel (op_for_rows): making the inputs, not the op, is most of the
    // checker's time at the large shapes. A row depends only on its seed, so the thread
    // count never changes a bit.
    thread_pool *fill;
    // Each buffer's host copy (pinned where the set has it, so an upload needs no wait) and
    // device copy, kept across the shape's batches at the largest size asked so far: a batch
    // of a few rows costs its copies and launches, not allocations and a wait per buffer.
    void *stage[OP_MAX_BUFFERS];
    void *dev[OP_MAX_BUFFERS];
    size_t room[OP_MAX_BUFFERS];
    // What a section's call keeps across the shape's batches (the all-reduce's other ranks on
    // CUDA), and how op_case_close frees it; both NULL when it keeps nothing.
    void *state;
    void (*state_free)(op_case *c);
};

typedef struct {
    int M;
    const uint64_t *seeds;
    void *host[OP_MAX_BUFFERS];   // host copies in batch layout
    void *dev[OP_MAX_BUFFERS];    // device copies, for call
    long elems[OP_MAX_BUFFERS];
    int32_t *row_slot;            // scattered outputs: set by batch (op_batch_input-sized)
} op_batch;

struct op_section {
    void (*declare)(op_case *c);
    void (*row)(const op_case *c, uint64_t seed, void *const *in);  // NULL: batch makes all
    void (*batch)(op_case *c, op_batch *b);
    void (*call)(op_case *c, const op_batch *b);
    double (*error)(op_case *c, uint64_t seed, const void *row_out);
};

// --- declaring buffers (declare) -------------------------------------------------------------

// Buffer number c->n_buf (returned): per_row sub-rows of width elements, ld apart.
int op_buffer_add(op_case *c, enum op_buffer_kind kind, const char *what, int elem,
                  int per_row, long width, long ld);
// Shared input i: n bf16 uniform in [lo, hi), host and device copies.
void op_shared_bf16(op_case *c, int i, long n, float lo, float hi, const char *what);
// Shared input i from a host array the case takes over.
void op_shared_take(op_case *c, int i, void *host, size_t bytes, const char *what);

// --- building batches (batch) and single rows (error) ----------------------------------------

// Host memory of OP_BATCH_IN buffer i: elems elements (the case's, valid until the next batch).
void *op_batch_input(op_batch *b, op_case *c, int i, long elems);
// One row's OP_ROW_IN/INOUT slices, built from seed; free with op_row_free.
void **op_row_alone(const op_case *c, uint64_t seed);
void op_row_free(const op_case *c, void **in);

// --- random inputs ---------------------------------------------------------------------------

typedef struct {
    uint64_t state;
} op_rng;

op_rng op_rng_from(uint64_t seed, uint64_t stream);
uint64_t op_rng_u64(op_rng *r);
float op_rng_float(op_rng *r, float lo, float hi);
int op_rng_int(op_rng *r, int n);
// Uniform in [lo, hi), rounded to bf16. Never zeros: 0 is hit with probability ~2^-24.
void op_fill_bf16(bf16 *p, long n, op_rng *r, float lo, float hi);
// n values of magnitude scale * [2^-7, 2^6], random signs: a reduction's order shows in them.
void op_fill_bf16_wide(bf16 *p, long n, op_rng *r, float scale);
// n finite bf16 values drawn uniformly over the bit patterns of magnitude <= max_abs (every
// exponent, subnormals and zeros included): an elementwise function's fast variant differs
// from the exact one at a few inputs, mostly far from 0, that a uniform draw seldom reaches.
void op_fill_bf16_patterns(bf16 *p, long n, op_rng *r, float max_abs);
// fn(arg, begin, end) over rows [0, n) on the case's fill pool: for a batch function that
// makes its rows' inputs (each range writes only its rows' parts of the buffers).
void op_for_rows(const op_case *c, long n, thread_pool_fn fn, void *arg);
// k distinct values of [0, n) in random order.
void op_distinct_ids(int32_t *ids, int k, int n, op_rng *r);
// A random permutation of [0, n).
void op_shuffle(int32_t *perm, int n, op_rng *r);

// --- the sections (harness/check/ops/*.c), registered by op_table.c --------------------------

extern const op_section gemm_op, gemm_f32_op;   // ops/gemm.c
extern const op_shape gemm_cpu_shapes[], gemm_cuda_shapes[];
extern const op_section rmsnorm_op, rope_op, embedding_op, residual_add_op, silu_mul_op;
extern const op_shape rmsnorm_cpu_shapes[], rmsnorm_cuda_shapes[];         // ops/per_token.c
extern const op_shape rope_cpu_shapes[], rope_cuda_shapes[];
extern const op_shape embedding_cpu_shapes[], embedding_cuda_shapes[];
extern const op_shape residual_add_cpu_shapes[], residual_add_cuda_shapes[];
extern const op_shape silu_mul_cpu_shapes[], silu_mul_cuda_shapes[];
extern const op_section kv_cache_write_op, mla_attention_op, mha_prefill_op, merge_attention_op;
extern const op_shape kv_cache_write_cpu_shapes[], kv_cache_write_cuda_shapes[]; // attention.c
extern const op_shape mla_attention_cpu_shapes[], mla_attention_cuda_shapes[];
extern const op_shape mha_prefill_cpu_shapes[], mha_prefill_cuda_shapes[];
extern const op_shape merge_attention_cpu_shapes[], merge_attention_cuda_shapes[];
extern const op_section moe_route_op, moe_experts_op, moe_combine_op;      // ops/moe.c
extern const op_section moe_experts_f32_op, moe_combine_f32_op;           // ops/moe.c
extern const op_shape moe_route_cpu_shapes[], moe_route_cuda_shapes[];
extern const op_shape moe_experts_cpu_shapes[], moe_experts_cuda_shapes[];
extern const op_shape moe_combine_cpu_shapes[], moe_combine_cuda_shapes[];
extern const op_section logprobs_op;          // ops/logprobs.c
extern const op_shape logprobs_cpu_shapes[], logprobs_cuda_shapes[];
extern const op_section all_reduce_op;        // ops/collective.c
extern const op_shape all_reduce_cpu_shapes[], all_reduce_cuda_shapes[];
extern const op_section all_reduce_f32_tree_op;  // ops/collective.c
extern const op_shape all_reduce_f32_tree_cpu_shapes[], all_reduce_f32_tree_cuda_shapes[];

#endif
