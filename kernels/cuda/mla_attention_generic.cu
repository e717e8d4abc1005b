// kernels/cuda/mla_attention_generic.cu — absorbed MLA attention for latent shapes the
// tensor-core kernel (mla_attention.cu) does not tile: L not a multiple of 64 or above its
// maximum, R not a multiple of 16 (tiny test models such as the transformers fixtures).
//
// One warp computes one (query token, head) and walks its positions [0, pos] in increasing
// order with an online softmax; each score's dot product is split over the lanes in a fixed
// assignment and reduced by one fixed xor-shuffle tree. The choice between this kernel and the
// tiled one depends on the model's shape only, never on the batch, and a row's result depends
// on its position and the cache contents alone.
#include <math.h>            // INFINITY

#include "cuda_ctx.cuh"      // cuda_ctx, CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"    // mla_attention_generic_launch

namespace {

constexpr int WARP = 32;
constexpr int WARPS_PER_BLOCK = 4;
constexpr int MAX_L_PER_LANE = 32;  // L <= 1024

__device__ __forceinline__ float bf(bf16 x) { return __uint_as_float(static_cast<unsigned>(x) << 16); }

__device__ __forceinline__ bf16 to_bf(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<bf16>(u >> 16);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__global__ void mla_generic_kernel(mla_attention_args a) {
    int warp = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (warp >= a.T * a.H) return;
    int t = warp / a.H, h = warp % a.H, entry = a.L + a.R;
    const bf16 *q_lat = a.q_lat + t * a.ld_q_lat + (long)h * a.L;
    const bf16 *q_pe = a.q_pe + t * a.ld_q_pe + (long)h * a.head_stride_q_pe;
    const int32_t *blocks = a.block_table + (long)a.token_seq[t] * a.max_blocks_per_seq;
    float m = -INFINITY, l = 0.0f, acc[MAX_L_PER_LANE];
#pragma unroll
    for (int i = 0; i < MAX_L_PER_LANE; i++) acc[i] = 0.0f;
    for (int p = 0; p <= a.token_pos[t]; p++) {
        const bf16 *kv = a.kv_cache + ((long)blocks[p / a.block_size] * a.block_size +
                                       p % a.block_size) * entry;
        float part = 0.0f;
        for (int d = lane; d < a.L; d += WARP) part += bf(q_lat[d]) * bf(kv[d]);
        for (int d = lane; d < a.R; d += WARP) part += bf(q_pe[d]) * bf(kv[a.L + d]);
        float s = a.scale * warp_sum(part);
        float m_new = fmaxf(m, s), alpha = __expf(m - m_new), w = __expf(s - m_new);
        l = l * alpha + w;
#pragma unroll
        for (int i = 0; i < MAX_L_PER_LANE; i++) {
            int d = lane + i * WARP;
            if (d < a.L) acc[i] = acc[i] * alpha + w * bf(kv[d]);
        }
        m = m_new;
    }
    bf16 *out = a.out + t * a.ld_out + (long)h * a.L;
#pragma unroll
    for (int i = 0; i < MAX_L_PER_LANE; i++) {
        int d = lane + i * WARP;
        if (d < a.L) out[d] = to_bf(acc[i] / l);
    }
}

}  // namespace

void mla_attention_generic_launch(cuda_ctx *c, const mla_attention_args *a) {
    if (a->T <= 0 || a->H <= 0) return;
    if (a->L > MAX_L_PER_LANE * WARP)
        invar_die(INVAR_EXIT_INPUT, "mla_attention: kv_lora_rank %d above %d", a->L,
                  MAX_L_PER_LANE * WARP);
    long warps = (long)a->T * a->H;
    unsigned blocks = (unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
    mla_generic_kernel<<<blocks, WARPS_PER_BLOCK * WARP, 0, c->stream>>>(*a);
    CUDA_CHECK_LAUNCH("mla_attention (generic shapes)");
}
