// kernels/cuda/mla_merge.cu — the split-KV merge kernel (its steps: mla_merge.cuh).
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
#include <cuda_runtime.h>   // dim3
#include <math.h>           // fmaxf, INFINITY

#include "cuda_ctx.cuh"     // cuda_ctx
#include "pdl.cuh"          // pdl_launch, pdl_wait_predecessor, pdl_release_gemm
#include "l2_policy.cuh"    // l2_policy_evict_first
#include "mla_attention.cuh"  // mla_params, mla_merge_launch
#include "mla_merge.cuh"    // mla_token_splits, mla_merge_*, mla_partial_load4

// A block a (token, head), its n splits (n from its position); reduction order:
//   m = max over s of m_s                                         (exact in any order)
//   for s = 0 .. n - 1 ascending: w = e^(m_s - m), d = fma(l_s, w, d), o = fma(o_s, w, o)
//   out = bf16(o * (1 / d))
// or, for the 16-head kernel past two splits, the same over split pairs, stored by it or
// formed here (FORM). Loads go out CHUNK at a time; the sums' order does not depend on it.
#define MERGE_THREADS 128
// HINTED: a wgmma kernel's partials, read evict_first; a template argument (registers).
template <int CHUNK, bool HINTED, bool FORM>
__global__ void __launch_bounds__(MERGE_THREADS) mla_merge_kernel(mla_params p) {
    pdl_release_gemm();
    static_assert(CHUNK % 2 == 0, "a chunk holds whole split pairs");
    const mla_attention_args &a = p.a;
    // Last tokens first: the partials written last are the ones still in L2.
    const int th = (int)(gridDim.x - 1 - blockIdx.x), t = th / a.H, h = th % a.H, L = a.L, tid = threadIdx.x;
    // The position is the split kernel's input, not its output: read before the wait.
    const int pos = a.token_pos[t];
    pdl_wait_predecessor();  // launched while the split kernel still runs (pdl.cuh)
    const int n = mla_token_splits(pos, p.split_size, p.nsplit);
    if (n <= p.merged_max_n || 4 * tid >= L) return;
    const bool form = FORM && n > 2;
    const int parts = p.pairs_stored && n > 2 ? (n + 1) / 2 : n;  // this token's partials
    const long base = (long)th * p.nsplit;
    const float2 *ml = p.ml_part + base;
    const float4 *o = (const float4 *)(p.o_part + base * L) + tid;
    float2 mls[CHUNK];
    float4 os[CHUNK];
    const uint64_t policy = HINTED ? l2_policy_evict_first() : 0;
    auto load_chunk = [&](int s0) {
#pragma unroll
        for (int k = 0; k < CHUNK; k++)
            if (s0 + k < parts) {
                mls[k] = ml[s0 + k];
                const float4 *src = &o[(long)(s0 + k) * (L / 4)];
                os[k] = HINTED ? mla_partial_load4(src, policy) : *src;
            }
    };
    load_chunk(0);
    float m = -INFINITY;
    for (int s = CHUNK; s < parts; s++) m = fmaxf(m, ml[s].x);
#pragma unroll
    for (int k = 0; k < CHUNK; k++)
        if (k < parts) m = fmaxf(m, mls[k].x);
    float d = 0.0f;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    auto step = [&](float m_s, float l_s, const float4 &o_s) {
        const float w = mla_merge_weight(m_s, l_s, m, d);
        v.x = fmaf(o_s.x, w, v.x);
        v.y = fmaf(o_s.y, w, v.y);
        v.z = fmaf(o_s.z, w, v.z);
        v.w = fmaf(o_s.w, w, v.w);
    };
    for (int s0 = 0; s0 < parts; s0 += CHUNK) {
        if (s0 > 0) load_chunk(s0);
#pragma unroll
        for (int k = 0; k < CHUNK; k++) {
            if (s0 + k >= parts || (form && k % 2 == 1)) continue;  // form: k odd went with k - 1
            if (form && s0 + k + 1 < parts) {  // split pair (s0 + k, s0 + k + 1)
                const mla_pair q = mla_pair_of(mls[k].x, mls[k].y, mls[k + 1].x, mls[k + 1].y);
                step(q.m, q.d,
                     make_float4(mla_pair_o(os[k].x, os[k + 1].x, q), mla_pair_o(os[k].y, os[k + 1].y, q),
                                 mla_pair_o(os[k].z, os[k + 1].z, q), mla_pair_o(os[k].w, os[k + 1].w, q)));
            } else {  // a split, a stored pair, or the last split alone
                step(mls[k].x, mls[k].y, os[k]);
            }
        }
    }
    uint16_t *out = a.out + t * a.ld_out + (long)h * L + 4 * tid;
    const float r = mla_merge_scale(d);
    const uint32_t lo = mla_merge_out(v.x, v.y, r), hi = mla_merge_out(v.z, v.w, r);
    out[0] = (uint16_t)lo;
    out[1] = (uint16_t)(lo >> 16);
    out[2] = (uint16_t)hi;
    out[3] = (uint16_t)(hi >> 16);
}

// CHUNK from the grid's partials a token (registers, so blocks per SM).
typedef void (*mla_merge_fn)(mla_params);
template <bool HINTED, bool FORM>
static mla_merge_fn mla_merge_for(int parts) {
    return parts <= 2   ? mla_merge_kernel<2, HINTED, FORM>
           : parts <= 4 ? mla_merge_kernel<4, HINTED, FORM>
           : parts <= 8 ? mla_merge_kernel<8, HINTED, FORM>
                        : mla_merge_kernel<16, HINTED, FORM>;
}

void mla_merge_launch(cuda_ctx *c, const mla_params *p, bool hinted, bool form, int token_parts) {
    const mla_merge_fn merge = form     ? mla_merge_for<true, true>(token_parts)
                               : hinted ? mla_merge_for<true, false>(token_parts)
                                        : mla_merge_for<false, false>(token_parts);
    pdl_launch(c, merge, dim3((unsigned)(p->a.T * p->a.H)), dim3(MERGE_THREADS), 0, "mla_attention merge", *p);
}
