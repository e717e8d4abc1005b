// kernels/cuda/mha_prefill.cu — plain multi-head prefill attention with log-sum-exp, and the
// merge of two partial results (ops.h: mha_prefill_args, merge_attention_args). They serve the
// split-prefill attention backends (vLLM TRITON_MLA's shape).
//
// One warp computes one (token, head): keys in increasing order with an online softmax; each
// score's dot product is split over the 32 lanes in a fixed lane assignment and reduced by one
// fixed xor-shuffle tree, so a row's result depends on its key range alone.
#include <math.h>            // INFINITY

#include "../bf16.h"         // bf16_to_float, float_to_bf16
#include "block_reduce.cuh"  // warp_sum
#include "cuda_ctx.cuh"      // cuda_ctx, CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"    // inv_cuda_mha_prefill, inv_cuda_merge_attention
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order

namespace {

constexpr int WARP = 32;
constexpr int WARPS_PER_BLOCK = 4;
constexpr int MAX_V_PER_LANE = 8;   // v_head_dim <= 256

__device__ __forceinline__ float bf(bf16 x) { return bf16_to_float(x); }
__device__ __forceinline__ bf16 to_bf(float f) { return float_to_bf16(f); }

__global__ void mha_prefill_kernel(mha_prefill_args a) {
    int warp = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (warp >= a.T * a.H) return;
    int t = warp / a.H, h = warp % a.H, qh = a.nope + a.R, kvh = a.nope + a.v;
    const bf16 *q = a.q + t * a.ld_q + (long)h * qh;
    float m = -INFINITY, l = 0.0f, acc[MAX_V_PER_LANE];
#pragma unroll
    for (int i = 0; i < MAX_V_PER_LANE; i++) acc[i] = 0.0f;
    for (int k = a.key_begin[t]; k < a.key_end[t]; k++) {
        const bf16 *kv = a.kv + (long)k * a.ld_kv + (long)h * kvh;
        const bf16 *kpe = a.k_pe + (long)k * a.ld_k_pe;
        float part = 0.0f;
        for (int d = lane; d < a.nope; d += WARP) part += bf(q[d]) * bf(kv[d]);
        for (int d = lane; d < a.R; d += WARP) part += bf(q[a.nope + d]) * bf(kpe[d]);
        float s = a.scale * warp_sum(part);
        float m_new = fmaxf(m, s), alpha = __expf(m - m_new), p = __expf(s - m_new);
        l = l * alpha + p;
#pragma unroll
        for (int i = 0; i < MAX_V_PER_LANE; i++) {
            int d = lane + i * WARP;
            if (d < a.v) acc[i] = acc[i] * alpha + p * bf(kv[a.nope + d]);
        }
        m = m_new;
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    bf16 *out = a.out + t * a.ld_out + (long)h * a.v;
#pragma unroll
    for (int i = 0; i < MAX_V_PER_LANE; i++) {
        int d = lane + i * WARP;
        if (d < a.v) out[d] = to_bf(acc[i] * inv);
    }
    if (lane == 0) a.lse[(long)t * a.H + h] = l > 0.0f ? m + __logf(l) : -INFINITY;
}

__global__ void merge_attention_kernel(merge_attention_args a) {
    long u = blockIdx.x;  // (token, head)
    long t = u / a.H, h = u % a.H;
    float la = a.lse_a[u], lb = a.lse_b[u], m = fmaxf(la, lb);
    float wa = la == -INFINITY ? 0.0f : __expf(la - m);
    float wb = lb == -INFINITY ? 0.0f : __expf(lb - m);
    float inv = wa + wb > 0.0f ? 1.0f / (wa + wb) : 0.0f;  // both empty: zeros, never NaN
    long base = t * a.ld + h * a.v;
    for (int d = threadIdx.x; d < a.v; d += blockDim.x) {
        float sa = wa * bf(a.a[base + d]), sb = wb * bf(a.b[base + d]);
        a.out[base + d] = to_bf((sa + sb) * inv);
    }
}

}  // namespace

void inv_cuda_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    if (a->T == 0) return;
    if (a->v > MAX_V_PER_LANE * WARP)
        invar_die(INVAR_EXIT_INPUT, "mha_prefill: v_head_dim %d above %d", a->v,
                  MAX_V_PER_LANE * WARP);
    long order[] = {1, WARP};  // one key at a time in increasing order, 32-lane dots
    long shape[] = {a->H, a->nope, a->R, a->v};
    fingerprint_note(ops->fingerprints, "mha_prefill", fingerprint_order(shape, 4), fingerprint_order(order, 2),
                     "warp-online-softmax");
    long warps = (long)a->T * a->H;
    unsigned blocks = (unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
    mha_prefill_kernel<<<blocks, WARPS_PER_BLOCK * WARP, 0, cuda_ctx_of(ops)->stream>>>(*a);
    CUDA_CHECK_LAUNCH("mha_prefill");
}

void inv_cuda_merge_attention(ops_set *ops, const merge_attention_args *a) {
    if (a->T == 0) return;
    long order[] = {2};  // a's product, then b's, then the scale: one formula for every row
    long shape[] = {a->H, a->v};
    fingerprint_note(ops->fingerprints, "merge_attention", fingerprint_order(shape, 2), fingerprint_order(order, 1),
                     "row");
    merge_attention_kernel<<<(unsigned)((long)a->T * a->H), 128, 0, cuda_ctx_of(ops)->stream>>>(*a);
    CUDA_CHECK_LAUNCH("merge_attention");
}
