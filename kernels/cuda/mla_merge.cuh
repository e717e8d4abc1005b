// kernels/cuda/mla_merge.cuh — the split-KV merge's steps, shared by all that merge a token.
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
#ifndef INVAR_KERNELS_CUDA_MLA_MERGE_CUH
#define INVAR_KERNELS_CUDA_MLA_MERGE_CUH

#include <math.h>           // expf, fmaf
#include <stdint.h>         // uint32_t, uint64_t

#include "bf16x2.cuh"       // bf16x2_round, bf16x2_round_no_nan

// ceil((pos + 1) / split_size); the min guards another token's partials.
static __device__ __forceinline__ int mla_token_splits(int pos, int split_size, int nsplit) {
    return min((pos + split_size) / split_size, nsplit);
}

// Split s's step, s ascending from d = 0: w = e^(m_s - m), d = fma(l_s, w, d); the caller
// folds o = fma(o_s, w, o), then out = mla_merge_out(o, mla_merge_scale(d)).
static __device__ __forceinline__ float mla_merge_weight(float m_s, float l_s, float m, float &d) {
    const float w = expf(m_s - m);
    d = fmaf(l_s, w, d);
    return w;
}

// The 16-head order past two splits: splits 2k, 2k + 1 into one partial (the steps above from
// max(m_2k, m_2k+1), d = 0; a last split alone untouched), then those partials ascending.
struct mla_pair {
    float m, d;    // the pair's partial
    float w0, w1;  // its splits' weights
};
static __device__ __forceinline__ mla_pair mla_pair_of(float m0, float l0, float m1, float l1) {
    mla_pair q;
    q.m = fmaxf(m0, m1);
    q.d = 0.0f;
    q.w0 = mla_merge_weight(m0, l0, q.m, q.d);
    q.w1 = mla_merge_weight(m1, l1, q.m, q.d);
    return q;
}
static __device__ __forceinline__ float mla_pair_o(float o0, float o1, const mla_pair &q) {
    return fmaf(o1, q.w1, fmaf(o0, q.w0, 0.0f));
}

// o * (1 / d), not o / d: a division is a subroutine call the compiler schedules nothing across.
static __device__ __forceinline__ float mla_merge_scale(float d) { return 1.0f / d; }

// Two merged columns as bf16, lo low. NAN_FREE: the converter alone, the same bits unless a
// product is a NaN (the caller then rounds again).
template <bool NAN_FREE = false>
static __device__ __forceinline__ uint32_t mla_merge_out(float o_lo, float o_hi, float r) {
    return NAN_FREE ? bf16x2_round_no_nan(o_lo * r, o_hi * r) : bf16x2_round(o_lo * r, o_hi * r);
}

// Partials stored evict_last and read evict_first: they stay in L2 while the KV streams through.
static __device__ __forceinline__ void mla_partial_store1(float *dst, float x, uint64_t policy) {
    asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(dst), "f"(x), "l"(policy) : "memory");
}
static __device__ __forceinline__ void mla_partial_store2(float *dst, float x, float y, uint64_t policy) {
    asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(dst), "f"(x), "f"(y), "l"(policy)
                 : "memory");
}
// volatile: kept below the merge's wait for the split kernel.
static __device__ __forceinline__ float4 mla_partial_load4(const float4 *src, uint64_t policy) {
    float4 v;
    asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(src), "l"(policy)
                 : "memory");
    return v;
}

#endif
