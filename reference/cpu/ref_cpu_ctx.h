// reference/cpu/ref_cpu_ctx.h — the state of the CPU sets built from the reference kernels:
// the thread pool the invariant ops they reuse expect, and the shape rules (the policy) that
// pick each reduction's order. The reference set's policy is what libraries do; the
// adversarial set (adversarial/cpu) runs the same kernels under a policy that changes the
// order with the batch at every shape.
#ifndef INVAR_REFERENCE_CPU_REF_CPU_CTX_H
#define INVAR_REFERENCE_CPU_REF_CPU_CTX_H

#include "../../kernels/cpu/cpu_ctx.h"  // cpu_ctx
#include "ref_cpu_ops.h"                // ref_gemm_plan, mla_attention_args

// Each rule sees only what a library sees at the call: the shape, and the thread count.
typedef struct {
    ref_gemm_plan (*gemm_plan)(int M, int N, int K, int threads);
    int (*rmsnorm_chunks)(int M, int D);
    // Positions per KV split when the caller leaves kv_split_size at 0.
    int (*mla_split_len)(const mla_attention_args *a, int threads);
    int (*mha_prefill_splits)(int T, int keys);
    int (*logprobs_chunks)(int R, int V, int threads);
} ref_cpu_policy;

typedef struct {
    cpu_ctx cpu;                  // first: the reused invariant ops read ctx as a cpu_ctx
    const ref_cpu_policy *policy;
} ref_cpu_ctx;

static inline const ref_cpu_policy *ref_cpu_policy_of(const ops_set *ops) {
    return ((const ref_cpu_ctx *)ops->ctx)->policy;
}

static inline int ref_cpu_threads(const ops_set *ops) {
    return ((const ref_cpu_ctx *)ops->ctx)->cpu.threads;
}

// The pool alone needs only a cpu_ctx at the start of ctx, so a kernel run with a plan chosen
// by its caller (ref_cpu_gemm_planned) also runs on another CPU set's context.
static inline thread_pool *ref_cpu_pool(const ops_set *ops) {
    return ((const cpu_ctx *)ops->ctx)->pool;
}

#endif
