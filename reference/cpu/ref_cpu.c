// reference/cpu/ref_cpu.c — the conventional (not batch-invariant) CPU kernel set: what fast
// libraries do. It computes what the invariant set computes, but the ops that reduce pick
// their order from the batch's shape under the policy below (ref_cpu_ops.h has the rules);
// the ops that are batch-invariant by nature are the invariant set's own. Every choice is
// noted in the set's order log, so a run that did not catch the set can say which ops never
// changed order.
#include "ref_cpu.h"

#include <stdlib.h>                          // free

#include "ref_cpu_ctx.h"                     // ref_cpu_ctx, ref_cpu_policy
#include "ref_cpu_ops.h"                     // ref_cpu_<op>, ref_*_for rules
#include "ref_cpu_set.h"                     // ref_cpu_set_create
#include "../../common/check.h"             // invar_calloc
#include "../../kernels/cpu/inv_cpu_ops.h"   // inv_cpu_<op>, reused where order cannot vary
#include "../../common/thread_pool.h"   // thread_pool_create, thread_pool_destroy
#include "../../kernels/order_log.h"         // order_log_create, order_log_note

static int mla_split_len(const mla_attention_args *a, int threads) {
    return ref_mla_split_len(a->max_seq_len, ref_mla_num_kv_splits(a->max_seq_len, threads));
}

// The router reduces each token alone in the invariant order: one order, recorded as such.
static void ref_cpu_moe_route(ops_set *ops, const moe_route_args *a) {
    order_log_note(ops->orders, ORDER_MOE_ROUTE, (uint64_t)a->D << 32 | (uint64_t)a->E, 0);
    inv_cpu_moe_route(ops, a);
}

static const ref_cpu_policy library_policy = {
    .gemm_plan = ref_gemm_plan_for,
    .rmsnorm_chunks = ref_rmsnorm_chunks,
    .mla_split_len = mla_split_len,
    .mha_prefill_splits = ref_mha_prefill_splits,
    .logprobs_chunks = ref_logprobs_chunks,
};

static void ref_cpu_destroy(ops_set *ops) {
    if (!ops) return;
    ref_cpu_ctx *ctx = ops->ctx;
    if (ctx) thread_pool_destroy(ctx->cpu.pool);
    order_log_destroy(ops->orders);
    free(ctx);
    free(ops);
}

ops_set *ref_cpu_set_create(const char *name, const ref_cpu_policy *policy, int threads) {
    ref_cpu_ctx *ctx = invar_calloc(1, sizeof *ctx, "cpu set context (reference kernels)");
    ctx->cpu.pool = thread_pool_create(threads);
    ctx->cpu.threads = thread_pool_size(ctx->cpu.pool);
    ctx->policy = policy;

    ops_set *ops = invar_calloc(1, sizeof *ops, "cpu set (reference kernels)");
    ops->name = name;
    ops->device = "cpu";
    ops->batch_invariant = false;
    ops->orders = order_log_create();
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
    ops->moe_route = ref_cpu_moe_route;

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

ops_set *ref_cpu_create(int threads) { return ref_cpu_set_create("reference", &library_policy, threads); }
