// harness/check/op_table.c — the table of ops `invar kernels` checks; how each op's rows are
// built and run is its section's (harness/check/ops/), the run they share is op_run.c's.
#include "op_table.h"

#include <stddef.h>                 // NULL
#include <string.h>                 // strcmp

#include "ops/op_section.h"         // the sections: NAME_op, NAME_cpu_shapes, NAME_cuda_shapes

// --- the table -------------------------------------------------------------------------------
// One line per op: OP_ENTRY(name, what a row is, rel-L2 tolerance, reference expectation,
// adversarial expectation).
// Tolerances: one bf16 rounding of the output is ~2^-9 relative per element (rel-L2 ~1.5e-3);
// ops that round intermediates too (norm, silu, experts, attention) get more; fp32 outputs
// (gemm_f32, router weights, logprobs) are held to fp32 accumulation error; copies are exact.

#define OP_ENTRY(op, row, tol, ref, adv) \
    {#op, row, tol, ref, adv, op##_cpu_shapes, op##_cuda_shapes, &op##_op, false}

static const op_entry table[] = {
    OP_ENTRY(gemm, "a row of x", 1e-2, REF_MUST_VARY, REF_MUST_VARY),
    // The fp32 store of the same products: gemm's shapes, its own section.
    {"gemm_f32", "a row of x (fp32 y)", 1e-4, REF_MUST_VARY, REF_MUST_VARY, gemm_cpu_shapes,
     gemm_cuda_shapes, &gemm_f32_op, false},
    OP_ENTRY(rmsnorm, "a token", 1e-2, REF_MUST_VARY_ON_CPU, REF_MUST_VARY),
    OP_ENTRY(rope, "a token's heads", 1e-2, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(embedding, "a token id", 0.0, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(residual_add, "a token", 1e-2, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(silu_mul, "a token", 1e-2, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(kv_cache_write, "a token's cache slot", 0.0, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(mla_attention, "a sequence's query tokens", 1e-2, REF_MUST_VARY, REF_MUST_VARY),
    OP_ENTRY(mha_prefill, "a sequence's query tokens", 1e-2, REF_MUST_VARY_ON_CPU,
             REF_MUST_VARY_ON_CPU),
    OP_ENTRY(merge_attention, "a token's heads", 1e-2, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(moe_route, "a token", 1e-3, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(moe_experts, "a token's k experts", 2e-2, REF_MUST_VARY_ON_CPU, REF_MUST_VARY_ON_CPU),
    OP_ENTRY(moe_combine, "a token", 1e-2, REF_MUST_VARY, REF_MUST_VARY),
    OP_ENTRY(logprobs, "a row of logits", 1e-4, REF_MUST_VARY_ON_CPU, REF_MUST_VARY),
    OP_ENTRY(all_reduce, "a token's slice on every rank", 1e-2, REF_MUST_VARY_ON_CPU,
             REF_MUST_VARY_ON_CPU),
    // TP-size invariance's fp32 sum over ranks: fp32 in and out, held to fp32 addition's error.
    {"all_reduce_f32_tree", "a token's fp32 slice on every rank", 1e-5, REF_MUST_VARY_ON_CPU, REF_MUST_VARY_ON_CPU,
     all_reduce_f32_tree_cpu_shapes, all_reduce_f32_tree_cuda_shapes, &all_reduce_f32_tree_op, true},
    // Its fp32 forms of the MoE block: the bf16 ops' shapes. The expert rows keep the rounded
    // intermediates (gate_up, the activation); the combine is fp32 alone.
    {"moe_experts_f32", "a token's k experts (fp32 rows)", 2e-2, REF_MUST_VARY_ON_CPU, REF_MUST_VARY_ON_CPU,
     moe_experts_cpu_shapes, moe_experts_cuda_shapes, &moe_experts_f32_op, true},
    {"moe_combine_f32", "a token (fp32 rows in and out)", 1e-5, REF_MUST_VARY_ON_CPU, REF_MUST_VARY_ON_CPU,
     moe_combine_cpu_shapes, moe_combine_cuda_shapes, &moe_combine_f32_op, true},
    {NULL, NULL, 0.0, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE, NULL, NULL, NULL, false},
};

const op_entry *op_table(void) { return table; }

const op_entry *op_table_find(const char *name) {
    for (const op_entry *op = table; op->name; op++)
        if (strcmp(op->name, name) == 0) return op;
    return NULL;
}
