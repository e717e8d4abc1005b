// kernels/cuda/mla_absorbed_generic.cu — absorbed MLA attention for the shapes the tiled
// kernels do not take: L not a multiple of 64 or above 512, R not a multiple of 16 (a shape
// choice, never a batch one).
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
//
// Reduction order: one warp a (query token, head) walks positions [0, pos] ascending, split by
// split; each score's dot product over the lanes in a fixed assignment, reduced by one fixed
// xor-shuffle tree; the splits folded ascending.
#include <math.h>            // INFINITY

#include "../bf16.h"         // bf16_to_float, float_to_bf16
#include "block_reduce.cuh"  // warp_sum
#include "cuda_ctx.cuh"      // cuda_ctx, CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"    // mla_attention_generic_launch

namespace {

constexpr int WARP = 32;
constexpr int WARPS_PER_BLOCK = 4;
constexpr int MAX_L_PER_LANE = 16;  // L <= 512

__device__ __forceinline__ float bf(bf16 x) { return bf16_to_float(x); }

// Folds one split's online-softmax state (m_s, l_s, acc_s) into the running total, in order.
__device__ __forceinline__ void fold_split(float &m, float &l, float *acc, float m_s, float l_s,
                                           const float *acc_s) {
    if (l_s == 0.0f) return;
    float m_new = fmaxf(m, m_s), a_old = __expf(m - m_new), a_new = __expf(m_s - m_new);
    l = l * a_old + l_s * a_new;
#pragma unroll
    for (int i = 0; i < MAX_L_PER_LANE; i++) acc[i] = acc[i] * a_old + acc_s[i] * a_new;
    m = m_new;
}

// Positions [0, pos] in splits of split_size aligned to position 0, each split reduced alone
// with an online softmax, the splits folded in ascending order: the tiled kernel's structure,
// so a backend's split size (kv_split_size) means the same here.
__global__ void mla_generic_kernel(mla_attention_args a, int split_size) {
    int warp = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (warp >= a.T * a.H) return;
    int t = warp / a.H, h = warp % a.H, entry = a.L + a.R;
    const bf16 *q_lat = a.q_lat + t * a.ld_q_lat + (long)h * a.L;
    const bf16 *q_pe = a.q_pe + t * a.ld_q_pe + (long)h * a.head_stride_q_pe;
    const int32_t *blocks = a.block_table + (long)a.token_seq[t] * a.max_blocks_per_seq;
    float m = -INFINITY, l = 0.0f, acc[MAX_L_PER_LANE];
    float m_s = -INFINITY, l_s = 0.0f, acc_s[MAX_L_PER_LANE];
#pragma unroll
    for (int i = 0; i < MAX_L_PER_LANE; i++) acc[i] = acc_s[i] = 0.0f;
    for (int p = 0; p <= a.token_pos[t]; p++) {
        if (p > 0 && p % split_size == 0) {
            fold_split(m, l, acc, m_s, l_s, acc_s);
            m_s = -INFINITY;
            l_s = 0.0f;
#pragma unroll
            for (int i = 0; i < MAX_L_PER_LANE; i++) acc_s[i] = 0.0f;
        }
        const bf16 *kv = a.kv_cache + ((long)blocks[p / a.block_size] * a.block_size +
                                       p % a.block_size) * entry;
        float part = 0.0f;
        for (int d = lane; d < a.L; d += WARP) part += bf(q_lat[d]) * bf(kv[d]);
        for (int d = lane; d < a.R; d += WARP) part += bf(q_pe[d]) * bf(kv[a.L + d]);
        float s = a.scale * warp_sum(part);
        float m_new = fmaxf(m_s, s), alpha = __expf(m_s - m_new), w = __expf(s - m_new);
        l_s = l_s * alpha + w;
#pragma unroll
        for (int i = 0; i < MAX_L_PER_LANE; i++) {
            int d = lane + i * WARP;
            if (d < a.L) acc_s[i] = acc_s[i] * alpha + w * bf(kv[d]);
        }
        m_s = m_new;
    }
    fold_split(m, l, acc, m_s, l_s, acc_s);
    bf16 *out = a.out + t * a.ld_out + (long)h * a.L;
#pragma unroll
    for (int i = 0; i < MAX_L_PER_LANE; i++) {
        int d = lane + i * WARP;
        if (d < a.L) out[d] = float_to_bf16(acc[i] / l);
    }
}

}  // namespace

void mla_attention_generic_launch(cuda_ctx *c, const mla_attention_args *a, int split_size) {
    if (a->T <= 0 || a->H <= 0) return;
    if (split_size <= 0) invar_die(INVAR_EXIT_INPUT, "mla_attention: split size %d", split_size);
    if (a->L > MAX_L_PER_LANE * WARP)
        invar_die(INVAR_EXIT_INPUT, "mla_attention: kv_lora_rank %d above %d", a->L,
                  MAX_L_PER_LANE * WARP);
    long warps = (long)a->T * a->H;
    unsigned blocks = (unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
    mla_generic_kernel<<<blocks, WARPS_PER_BLOCK * WARP, 0, c->stream>>>(*a, split_size);
    CUDA_CHECK_LAUNCH("mla_attention (generic shapes)");
}
