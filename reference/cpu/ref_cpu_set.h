// reference/cpu/ref_cpu_set.h — a CPU set made of the reference kernels under a chosen policy:
// the reference set's own (library heuristics), or the adversarial set's (adversarial/cpu).
//
// The set is built on the invariant CPU set (kernels/cpu/inv_cpu.h): its ops_set is filled by
// inv_cpu_init, so the ops that are batch-invariant by nature stay the invariant set's and
// read ops->ctx as that set does; the reductions are swapped for the reference kernels, which
// find the policy in the ref_cpu_set that holds the ops_set first.
#ifndef INVAR_REFERENCE_CPU_REF_CPU_SET_H
#define INVAR_REFERENCE_CPU_REF_CPU_SET_H

#include "../../kernels/ops.h"  // ops_set
#include "ref_cpu_ops.h"        // ref_gemm_plan, mla_attention_args

// Each rule sees only what a library sees at the call: the shape, and the thread count.
typedef struct {
    ref_gemm_plan (*gemm_plan)(int M, int N, int K, int threads);
    int (*rmsnorm_chunks)(int M, int D);
    // Positions per KV split when the caller leaves kv_split_size at 0.
    int (*mla_split_len)(const mla_attention_args *a, int threads);
    int (*mha_prefill_splits)(int T, int keys);
    int (*logprobs_chunks)(int R, int V, int threads);
    // The rank an all-reduce's sum of element i (of n) starts from (ref_cpu_ops.h).
    int (*all_reduce_first_rank)(long i, long n, int T);
} ref_cpu_policy;

typedef struct {
    ops_set ops;                  // first: a ref_cpu_set * is an ops_set *
    const ref_cpu_policy *policy;
    // The invariant set's router, which the set wraps to record its one order.
    void (*invariant_moe_route)(ops_set *ops, const moe_route_args *a);
} ref_cpu_set;

static inline const ref_cpu_policy *ref_cpu_policy_of(const ops_set *ops) {
    return ((const ref_cpu_set *)ops)->policy;
}

// `policy` must outlive the set (a static). Not batch-invariant; records its orders. The
// caller may replace ops afterwards.
ops_set *ref_cpu_set_create(const char *name, const ref_cpu_policy *policy, int threads);

#endif
