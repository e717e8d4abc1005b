// reference/cpu/ref_cpu.c — the conventional (not batch-invariant) CPU kernel set: the
// negative control of the harness. It computes what the invariant set computes, but the ops
// that reduce pick their order from the batch's shape (ref_cpu_ops.h); the ops that are
// batch-invariant by nature are the invariant set's own.
#include "ref_cpu.h"

#include <stdlib.h>                          // free

#include "ref_cpu_ops.h"                     // ref_cpu_<op>
#include "../../kernels/check.h"             // invar_calloc
#include "../../kernels/cpu/cpu_ctx.h"       // cpu_ctx
#include "../../kernels/cpu/inv_cpu_ops.h"   // inv_cpu_<op>, reused where order cannot vary
#include "../../kernels/cpu/thread_pool.h"   // thread_pool_create, thread_pool_destroy

static void ref_cpu_destroy(ops_set *ops) {
    if (!ops) return;
    cpu_ctx *ctx = ops->ctx;
    if (ctx) thread_pool_destroy(ctx->pool);
    free(ctx);
    free(ops);
}

ops_set *ref_cpu_create(int threads) {
    cpu_ctx *ctx = invar_calloc(1, sizeof *ctx, "reference cpu set context");
    ctx->pool = thread_pool_create(threads);
    ctx->threads = thread_pool_size(ctx->pool);

    ops_set *ops = invar_calloc(1, sizeof *ops, "reference cpu set");
    ops->name = "reference";
    ops->device = "cpu";
    ops->batch_invariant = false;
    ops->ctx = ctx;
    ops->destroy = ref_cpu_destroy;

    // Memory and element-wise ops: no reduction whose order a batch could change.
    ops->alloc = inv_cpu_alloc;
    ops->release = inv_cpu_release;
    ops->upload = inv_cpu_upload;
    ops->download = inv_cpu_download;
    ops->sync = inv_cpu_sync;
    ops->embedding = inv_cpu_embedding;
    ops->rope = inv_cpu_rope;
    ops->residual_add = inv_cpu_residual_add;
    ops->silu_mul = inv_cpu_silu_mul;
    ops->kv_cache_write = inv_cpu_kv_cache_write;
    // The router's logits are per token, and its top-k is a selection, not a sum.
    ops->moe_route = inv_cpu_moe_route;

    // Reductions in shape-dependent order.
    ops->gemm = ref_cpu_gemm;
    ops->rmsnorm = ref_cpu_rmsnorm;
    ops->mla_attention = ref_cpu_mla_attention;
    ops->mha_prefill = ref_cpu_mha_prefill;
    ops->merge_attention = inv_cpu_merge_attention;  // element-wise: no order to vary
    ops->moe_experts = ref_cpu_moe_experts;
    ops->moe_combine = ref_cpu_moe_combine;
    ops->logprobs = ref_cpu_logprobs;
    return ops;
}
