// harness/check/op_table.h — THE table of ops `invar kernels` checks (harness/check/kernel_check.h).
//
// An op is checked through "rows": the unit of work whose result must not depend on the rest
// of the batch (a row of x for GEMM, a query sequence for attention, a token for MoE, ...).
// Each row's inputs are generated from a 64-bit row seed, so the checker can put the same row
// alone (M=1) and inside a batch of M other random rows, run the op both ways and memcmp the
// row's output bytes. Everything shared by the rows (weights, tables) comes from the shape.
//
// Registering an op is one line in op_table.c's table, OP_ENTRY(name, ...); the op itself (its
// shapes, buffers, row inputs, call and oracle) is a section in harness/check/ops/ (op_section.h),
// run the way every op is (op_run.h).
#ifndef INVAR_HARNESS_OP_TABLE_H
#define INVAR_HARNESS_OP_TABLE_H

#include <stdbool.h>           // bool
#include "../../kernels/ops.h" // ops_set, enum moe_topk_method

// What a non-invariant set (reference, or adversarial) is expected to do with an op.
enum ref_expectation {
    REF_MAY_BE_STABLE,  // the reference set reuses an order-free kernel: stable is fine
    REF_MUST_VARY,      // the negative control: it must be caught varying at some shape
    REF_MUST_VARY_ON_CPU, // must vary on the CPU reference set; the CUDA reference set reuses
                          // an invariant kernel for it (or orders it alike), so stable is fine
};

// One shape of one op: the sizes its section reads, by name (the op's member of the union).
// A pad or gap is the elements between rows that must stay untouched (ld = width + pad).
typedef struct {
    const char *label;  // as printed, e.g. "576x2048" (NULL ends a list)
    union {
        // heads > 1: that many products at once, laid out as the absorbed MLA's heads (a row of
        // x holds every head's K values, a row of y every head's N; w is [heads][N][K], or with
        // one_weight a single [N][K] every head reads: a batch at weight stride 0)
        struct { int N, K, heads; bool one_weight; } gemm;
        struct { int D, pad; } rmsnorm;
        struct { int H, R, max_pos; bool interleave; } rope;
        struct { int V, D; } embedding;
        struct { int D; } residual_add;
        struct { int I; } silu_mul;
        struct { int L, R; } kv_cache_write;
        // chunk query tokens at the last positions of a sequence of up to max_len tokens
        struct { int H, L, R, max_len, chunk, block_size; } mla_attention;
        struct { int H, nope, R, v, max_len, chunk; } mha_prefill;
        struct { int H, v, pad; } merge_attention;
        // method picks the scoring too: noaux_tc is V3's sigmoid, the others V2's softmax
        struct { int D, E, k; enum moe_topk_method method; int n_group, topk_group; } moe_route;
        struct { int D, I, E, k; } moe_experts;
        struct { int D, k, E; } moe_combine;
        // ties: half the rows put their maximum logit at both sides of the first chunk boundary of
        // every power-of-two vocabulary split (2..64 chunks): a merge of chunks that breaks a tie
        // by chunk instead of by the lower id shows
        struct { int V, k; bool ties; } logprobs;
        // T ranks, each holding W values of a row (a token's slice of a row-parallel output)
        struct { int T, W; } all_reduce;
    };
    int max_M;          // largest batch checked at this shape; 0: every M of the list
    // GPUs the shape needs on CUDA (one per tensor-parallel rank); 0 or 1: one. A machine
    // with fewer skips the shape, visibly.
    int devices;
    bool quick;         // kept by --quick
    // A non-invariant set whose op must vary must vary at this very shape, not only at some
    // shape of the list (the all-reduce at T >= 3; at T = 2 every order gives the same bits).
    bool must_vary;
    // Checked on batch-invariant sets only: a path-reaching shape that costs seconds per set,
    // while the negative controls are caught at the op's other shapes.
    bool invariant_sets_only;
    // Checked only by `invar kernels --exhaustive` (nightly): the far side of a size threshold
    // (a lane tail, a tile, a split, a chunking) that the default run's shapes already cross
    // once, added at every threshold so none is left to one random length.
    bool exhaustive;
} op_shape;

typedef struct op_section op_section;  // harness/check/ops/op_section.h

typedef struct {
    const char *name;             // --op NAME
    const char *row;              // what one row is, for people reading the report
    double tol;                   // accuracy: rel-L2 error against the float64 oracle
    enum ref_expectation reference;
    enum ref_expectation adversarial; // the set built to vary every reduction
    const op_shape *cpu_shapes;   // small enough that the CPU run stays around a minute
    const op_shape *cuda_shapes;  // real DeepSeek sizes
    const op_section *section;    // how its rows are built, run and checked
    // A form of TP-size invariance (fp32 partials): checked on sets that have it
    // (ops_set.tp_size_invariant), a SKIP line on the others.
    bool tp_size_form;
} op_entry;

// The table, terminated by an entry whose name is NULL.
const op_entry *op_table(void);
// The entry named `name`; NULL when none.
const op_entry *op_table_find(const char *name);

#endif
