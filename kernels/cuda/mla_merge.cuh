// kernels/cuda/mla_merge.cuh — the pieces of the split-KV merge that its three executors share:
// mla_attention.cu's merge kernel, the 16-head split kernel for the split pairs and tokens one of
// its units holds (mla_absorbed_h16_sm90.cu), and the 64-head kernel's CTAs for a batch of at most
// two splits (mla_absorbed_h64_sm90.cu). A token's bits must not depend on which of them merged it, so
// the split count and each split's step are written once, here. Beside them, the L2 policy of
// the partials the wgmma kernels pass to the merge kernel (it carries no bits).
#ifndef INVAR_KERNELS_CUDA_MLA_MERGE_CUH
#define INVAR_KERNELS_CUDA_MLA_MERGE_CUH

#include <math.h>           // expf, fmaf
#include <stdint.h>         // uint32_t, uint64_t

#include "bf16x2.cuh"       // bf16x2_round, bf16x2_round_no_nan

// The splits of a token at position pos: ceil((pos + 1) / split_size). max_seq_len covers every
// token_pos (ops.h), so this is at most nsplit; the min keeps a caller's mistake from reading
// another token's partials or walking past its block table.
static __device__ __forceinline__ int mla_token_splits(int pos, int split_size, int nsplit) {
    return min((pos + split_size) / split_size, nsplit);
}

// Split s's step of the merge, s ascending from d = 0: its weight w = e^(m_s - m) against the
// token's max m, folded into the denominator as d = fma(l_s, w, d). The caller folds its
// columns as o = fma(o_s, w, o), then writes mla_merge_out(o, r) with r = mla_merge_scale(d).
static __device__ __forceinline__ float mla_merge_weight(float m_s, float l_s, float m, float &d) {
    const float w = expf(m_s - m);
    d = fmaf(l_s, w, d);
    return w;
}

// The 16-head kernel's order (mla_absorbed_h16_sm90.cu) for a token of more than two splits is
// a fixed tree over the splits' indices instead: splits 2k and 2k + 1 first, into one partial
// (m_k, d_k, o_k) by the steps above from m_k = max(m_2k, m_2k+1) and d_k = 0 (split 2k alone
// where it is the last: its own (m, l, o), untouched), then those partials k ascending by the
// same steps, as if each were a split, from m = their max. So a work unit can hold a split pair
// and fold it in registers. A token of one or two splits keeps the order above (the pair is
// the whole token: out = o_0 * (1 / d_0)).
struct mla_pair {
    float m, d;    // the pair's max and sum: its partial's (m_k, d_k)
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
// One column of the pair's partial o_k from its splits' o_2k, o_2k+1.
static __device__ __forceinline__ float mla_pair_o(float o0, float o1, const mla_pair &q) {
    return fmaf(o1, q.w1, fmaf(o0, q.w0, 0.0f));
}

// 1 / d, once a row: the output is o * (1 / d), not o / d (a division a value is a call to a
// subroutine the compiler schedules nothing across).
static __device__ __forceinline__ float mla_merge_scale(float d) { return 1.0f / d; }

// Two merged columns as bf16 (lo in the low half). NAN_FREE: on the converter alone, the same
// bits wherever neither product is a NaN; a caller that rounds so tracks the results
// (bf16x2_nan_track) and, where a NaN or an infinity came out, rounds them all again without it.
template <bool NAN_FREE = false>
static __device__ __forceinline__ uint32_t mla_merge_out(float o_lo, float o_hi, float r) {
    return NAN_FREE ? bf16x2_round_no_nan(o_lo * r, o_hi * r) : bf16x2_round(o_lo * r, o_hi * r);
}

// Where the partials wait between the two kernels. The wgmma kernels (64 and 16 heads a CTA)
// store them with L2's evict_last policy and the merge kernel reads those with evict_first: at
// 128 heads a split's partials are 256 KB beside its 576 KB of KV, which streams through L2
// between the partials' stores and the merge's reads; the hints keep more of the partials there
// until they are read (H200, dev timer, 128 heads: 32 x 4k 124.2 -> 119.8 us, 128 x 4k 448.8 ->
// 443.7). At 16 heads (32 KB a split beside 576 KB), medians of three: B=32 L=4k 48.4 -> 47.9,
// B=32 L=16k 170.5 -> 168.1, B=128 L=4k 171.1 -> 169.0, B=1 L=16k 24.1 both. Cache policies
// only (l2_policy.cuh): no value changes.

// One partial value stored under `policy`.
static __device__ __forceinline__ void mla_partial_store1(float *dst, float x, uint64_t policy) {
    asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(dst), "f"(x), "l"(policy) : "memory");
}
// Two adjacent partial values (8-byte aligned) stored under `policy`.
static __device__ __forceinline__ void mla_partial_store2(float *dst, float x, float y, uint64_t policy) {
    asm volatile("st.global.L2::cache_hint.v2.f32 [%0], {%1, %2}, %3;\n" ::"l"(dst), "f"(x), "f"(y), "l"(policy)
                 : "memory");
}
// Four partial values (16-byte aligned) loaded under `policy`; volatile keeps the load below the
// merge's wait for the split kernel.
static __device__ __forceinline__ float4 mla_partial_load4(const float4 *src, uint64_t policy) {
    float4 v;
    asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(src), "l"(policy)
                 : "memory");
    return v;
}

#endif
