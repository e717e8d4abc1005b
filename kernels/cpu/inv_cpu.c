// kernels/cpu/inv_cpu.c — the batch-invariant CPU kernel set: one ops_set whose ctx is a
// cpu_ctx (thread pool), its ops one file each (inv_cpu_ops.h).
#include "inv_cpu.h"

#include <stdlib.h>          // free

#include "../../common/check.h"        // invar_calloc
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_*

void inv_cpu_fini(ops_set *ops) {
    cpu_ctx *ctx = ops->ctx;
    if (ctx) thread_pool_destroy(ctx->pool);
    free(ctx);
    ops->ctx = NULL;
}

static void inv_cpu_destroy(ops_set *ops) {
    if (!ops) return;
    inv_cpu_fini(ops);
    free(ops);
}

thread_pool *inv_cpu_pool(const ops_set *ops) { return ((const cpu_ctx *)ops->ctx)->pool; }

int inv_cpu_threads(const ops_set *ops) { return ((const cpu_ctx *)ops->ctx)->threads; }

// Every path the kernels above can note (kernels/fingerprint.h): `invar kernels` fails a
// default CPU run that leaves one unreached. The copies (embedding, rope, residual_add,
// silu_mul, kv_cache_write) reduce nothing and note nothing.
static const char *const inv_cpu_paths[] = {
    "gemm:bf16", "gemm:bf16+column-tail", "gemm:f32", "gemm:f32+column-tail",
    "rmsnorm:row-lanes", "rmsnorm:row-lanes+tail",
    "mla_attention:one-split", "mla_attention:split-merge",
    "mha_prefill:online-softmax", "merge_attention:row",
    "moe_route:greedy", "moe_route:group-limited", "moe_route:noaux-tc",
    "moe_experts:per-expert-gemm", "moe_combine:ascending-k", "logprobs:row",
    "all_reduce:rank-order", "all_reduce_f32_tree:rank-tree", NULL,
};

void inv_cpu_init(ops_set *ops, int threads) {
    cpu_ctx *ctx = invar_calloc(1, sizeof *ctx, "invariant cpu context");
    ctx->pool = thread_pool_create(threads);
    ctx->threads = thread_pool_size(ctx->pool);
    *ops = (ops_set){
        .name = "invariant",
        .device = "cpu",
        .batch_invariant = true,
        .ctx = ctx,
        .paths = inv_cpu_paths,
        .destroy = inv_cpu_destroy,
        .alloc = inv_cpu_alloc,
        .release = inv_cpu_release,
        .upload = inv_cpu_upload,
        .download = inv_cpu_download,
        .sync = inv_cpu_sync,
        // Host memory is the device's: the same calls, and an upload is done when it returns.
        .alloc_host = inv_cpu_alloc,
        .release_host = inv_cpu_release,
        .upload_async = inv_cpu_upload,
        .embedding = inv_cpu_embedding,
        .rmsnorm = inv_cpu_rmsnorm,
        .gemm = inv_cpu_gemm,
        .rope = inv_cpu_rope,
        .residual_add = inv_cpu_residual_add,
        .silu_mul = inv_cpu_silu_mul,
        .kv_cache_write = inv_cpu_kv_cache_write,
        .mla_attention = inv_cpu_mla_attention,
        .mha_prefill = inv_cpu_mha_prefill,
        .merge_attention = inv_cpu_merge_attention,
        .moe_route = inv_cpu_moe_route,
        .moe_experts = inv_cpu_moe_experts,
        .moe_combine = inv_cpu_moe_combine,
        .logprobs = inv_cpu_logprobs,
        .add_f32 = inv_cpu_add_f32,
        .round_to_bf16 = inv_cpu_round_to_bf16,
        .sum_slices_f32 = inv_cpu_sum_slices_f32,
        .all_reduce = inv_cpu_all_reduce,
        .all_reduce_f32_tree = inv_cpu_all_reduce_f32_tree,
        .all_gather_columns = inv_cpu_all_gather_columns,
    };
}

ops_set *inv_cpu_create(int threads) {
    ops_set *ops = invar_calloc(1, sizeof *ops, "invariant cpu kernel set");
    inv_cpu_init(ops, threads);
    // Not in inv_cpu_init: a set built on it that replaces moe_experts or moe_combine says for
    // itself whether its kernels know the fp32 forms (reference/ and adversarial/ do).
    ops->tp_size_invariant = true;
    return ops;
}
