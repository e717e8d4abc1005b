// reference/cpu/ref_cpu.c — the conventional (not batch-invariant) CPU kernel set: what fast
// libraries do. It computes what the invariant set computes, but the ops that reduce pick
// their order from the batch's shape under the policy below (ref_cpu_ops.h has the rules);
// the ops that are batch-invariant by nature are the invariant set's own (ref_cpu_set.h). Every
// choice is noted in the set's order log, so a run that did not catch the set can say which
// ops never changed order.
#include "ref_cpu.h"

#include <stdlib.h>                          // free

#include "ref_cpu_ops.h"                     // ref_cpu_<op>, ref_*_for rules
#include "ref_cpu_set.h"                     // ref_cpu_set, ref_cpu_policy
#include "../../common/check.h"              // invar_calloc
#include "../../kernels/cpu/inv_cpu.h"       // inv_cpu_init, inv_cpu_fini
#include "../../kernels/order_log.h"         // order_log_create, order_log_note

static int mla_split_len(const mla_attention_args *a, int threads) {
    return ref_mla_split_len(a->max_seq_len, ref_mla_num_kv_splits(a->max_seq_len, threads));
}

// The router reduces each token alone in the invariant order: one order, recorded as such.
static void ref_cpu_moe_route(ops_set *ops, const moe_route_args *a) {
    order_log_note(ops->orders, ORDER_MOE_ROUTE, (uint64_t)a->D << 32 | (uint64_t)a->E, 0);
    ((ref_cpu_set *)ops)->invariant_moe_route(ops, a);
}

static const ref_cpu_policy library_policy = {
    .gemm_plan = ref_gemm_plan_for,
    .rmsnorm_chunks = ref_rmsnorm_chunks,
    .mla_split_len = mla_split_len,
    .mha_prefill_splits = ref_mha_prefill_splits,
    .logprobs_chunks = ref_logprobs_chunks,
    .all_reduce_first_rank = ref_all_reduce_ring_first_rank,
};

static void ref_cpu_destroy(ops_set *ops) {
    if (!ops) return;
    order_log_destroy(ops->orders);
    inv_cpu_fini(ops);
    free(ops);  // the ref_cpu_set that holds it first
}

ops_set *ref_cpu_set_create(const char *name, const ref_cpu_policy *policy, int threads) {
    ref_cpu_set *r = invar_calloc(1, sizeof *r, "cpu set (reference kernels)");
    ops_set *ops = &r->ops;
    inv_cpu_init(ops, threads);  // memory and the element-wise ops: no order a batch could change
    r->policy = policy;
    r->invariant_moe_route = ops->moe_route;
    ops->name = name;
    ops->batch_invariant = false;
    // Its moe_experts and moe_combine keep their fp32 forms (in their own orders): the engine's
    // TP-size-invariant mode runs on it as on the invariant set, and is caught where it varies.
    ops->tp_size_invariant = true;
    ops->orders = order_log_create();
    ops->destroy = ref_cpu_destroy;

    // The router's logits are per token, and its top-k is a selection, not a sum: the
    // invariant set's, its one order recorded.
    ops->moe_route = ref_cpu_moe_route;
    // Reductions in shape-dependent order.
    ops->gemm = ref_cpu_gemm;
    ops->rmsnorm = ref_cpu_rmsnorm;
    ops->mla_attention = ref_cpu_mla_attention;
    ops->mha_prefill = ref_cpu_mha_prefill;
    ops->moe_experts = ref_cpu_moe_experts;
    ops->moe_combine = ref_cpu_moe_combine;
    ops->logprobs = ref_cpu_logprobs;
    // The sum across ranks, in a ring's order, bf16 and fp32 (all_gather_columns stays: a copy).
    ops->all_reduce = ref_cpu_all_reduce;
    ops->all_reduce_f32_tree = ref_cpu_all_reduce_f32;
    // merge_attention stays the invariant set's: element-wise, no order to vary.
    return ops;
}

ops_set *ref_cpu_create(int threads) { return ref_cpu_set_create("reference", &library_policy, threads); }
