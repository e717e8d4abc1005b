// kernels/cuda/mla_absorbed_mma.cu — the mma.sync split kernel of absorbed MLA attention.
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
//
// Work unit: 16 heads of one token x one fixed-size split. Reduction order of a row: tiles of
// 32 positions (aligned to position 0) ascending, online softmax. S = Q·Kᵀ: warp w takes
// positions 8 (w % 4) .. and dims half w / 4 as two m16n8k16 chains (even, odd k16 steps),
// S = (half0 even + half0 odd) + (half1 even + half1 odd); P = exp(S - m), bf16 for P·V; the
// fp32 P summed in pairs, lanes xor 1, 2, then ((g0 + g1) + g2) + g3 over the position groups.
#include <cuda_runtime.h>   // dim3, cudaStream_t
#include <math.h>           // fmaxf, INFINITY

#include "../bf16.h"        // bf16_to_float, float_to_bf16
#include "cuda_ctx.cuh"     // cuda_ctx, cuda_kernel_smem, CUDA_CHECK_LAUNCH
#include "pdl.cuh"          // pdl_release_dependent
#include "mla_attention.cuh"  // mla_params, MLA_TILE, MLA_MAX_L, mla_mma_split_launch
#include "mma.cuh"          // cp_async16, ldmatrix_*, mma_bf16_16816

#define MLA_HEADS 16         // heads per CTA: the MMA's M
#define MLA_WARPS 8          // 4 position groups x 2 halves of the dims in Q·Kᵀ
#define MLA_FRAGS (MLA_MAX_L / 64)
#define MLA_PSTRIDE (MLA_TILE + 8)
#define MLA_THREADS (MLA_WARPS * 32)
#define MLA_FAST_MAX_D 640   // contiguous tile copies for D <= 640: 10 pieces per thread
#define MLA_PIECES (MLA_TILE * MLA_FAST_MAX_D / 8 / MLA_THREADS)

__global__ void __launch_bounds__(MLA_THREADS, 2) mla_split_kernel(mla_params p) {
    pdl_release_dependent();  // the merge may start up now; it waits for this grid's end
    const mla_attention_args &a = p.a;
    const int L = a.L, R = a.R, D = L + R, DS = D + 8;  // DS: smem row stride (odd 16B units)
    const int hg = blockIdx.x, split = blockIdx.y, t = blockIdx.z;
    const int pos = a.token_pos[t], seq = a.token_seq[t];
    const int start = split * p.split_size;
    if (start > pos) return;
    const int end = min(start + p.split_size, pos + 1);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane >> 2, q = lane & 3;

    extern __shared__ __align__(16) uint16_t sm[];
    uint16_t *Qs = sm;                          // [16][DS]
    uint16_t *KVs = Qs + MLA_HEADS * DS;        // [2][32][DS]
    uint16_t *Ps = KVs + 2 * MLA_TILE * DS;     // [16][MLA_PSTRIDE]
    float *red_max = (float *)(Ps + MLA_HEADS * MLA_PSTRIDE);  // [4 position groups][16]
    float *red_sum = red_max + 4 * MLA_HEADS;                  // [4][16]
    float *s_half1 = red_sum + 4 * MLA_HEADS;                  // [4][32 lanes][4]: S over dims half 1

    // Q: latent then rope values of 16 heads; heads past H are zeros (never written out).
    if (p.q_aligned) {
        const int lc = L / 8, chunks = D / 8;
        for (int i = threadIdx.x; i < MLA_HEADS * chunks; i += blockDim.x) {
            int row = i / chunks, c = i % chunks, h = hg * MLA_HEADS + row;
            const uint16_t *src = a.q_lat;
            if (h < a.H)
                src = c < lc ? a.q_lat + t * a.ld_q_lat + (long)h * L + c * 8
                             : a.q_pe + t * a.ld_q_pe + (long)h * a.head_stride_q_pe + (c - lc) * 8;
            cp_async16(Qs + row * DS + c * 8, src, h < a.H ? 16 : 0);
        }
    } else {
        for (int i = threadIdx.x; i < MLA_HEADS * D; i += blockDim.x) {
            int row = i / D, col = i % D, h = hg * MLA_HEADS + row;
            uint16_t v = 0;
            if (h < a.H)
                v = col < L ? a.q_lat[t * a.ld_q_lat + (long)h * L + col]
                            : a.q_pe[t * a.ld_q_pe + h * a.head_stride_q_pe + (col - L)];
            Qs[row * DS + col] = v;
        }
    }

    // A tile inside one block is one contiguous run of 32*D values: thread i copies 16-byte
    // pieces i, i+256, ..., at shared-memory offsets the same for every tile.
    const bool fast_tiles = p.tile_in_block && D <= MLA_FAST_MAX_D;
    const int cpr = D / 8, tile_pieces = MLA_TILE * cpr;
    int piece_off[MLA_PIECES];
#pragma unroll
    for (int k = 0; k < MLA_PIECES; k++) {
        const int i = threadIdx.x + k * MLA_THREADS;
        piece_off[k] = i < tile_pieces ? (i / cpr) * DS + (i % cpr) * 8 : -1;
    }

    // One tile into buffer `buf` (tile_src: its first cache row, when inside one block); a
    // tile past `end` goes a warp per row, zero-filled there: 0 * garbage could be a NaN in P·V.
    auto load_tile = [&](int tile, int buf, const uint16_t *tile_src) {
        const int p0 = start + tile * MLA_TILE;
        uint16_t *dst = KVs + buf * MLA_TILE * DS;
        if (fast_tiles && p0 + MLA_TILE <= end) {
            const uint16_t *src = tile_src + threadIdx.x * 8;
#pragma unroll
            for (int k = 0; k < MLA_PIECES; k++)
                if (piece_off[k] >= 0) cp_async16(dst + piece_off[k], src + k * MLA_THREADS * 8, 16);
        } else {
            for (int row = warp; row < MLA_TILE; row += MLA_WARPS) {
                int pp = p0 + row;
                const uint16_t *src = a.kv_cache;
                bool ok = pp < end;
                if (ok) {
                    long blk = a.block_table[(long)seq * a.max_blocks_per_seq + pp / a.block_size];
                    src = a.kv_cache + (blk * a.block_size + pp % a.block_size) * D;
                }
                for (int c = lane; c < cpr; c += 32)
                    cp_async16(dst + row * DS + c * 8, ok ? src + c * 8 : src, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };

    // The next tile's cache block, its table entry read a tile ahead to hide the latency.
    const int32_t *seq_blocks = a.block_table + (long)seq * a.max_blocks_per_seq;
    int next_block = start / a.block_size, next_off = start % a.block_size;
    auto tile_source = [&](int blk) {
        return a.kv_cache + ((long)blk * a.block_size + next_off) * D;
    };
    auto advance_block = [&]() {
        next_off += MLA_TILE;
        if (next_off >= a.block_size) {
            next_off -= a.block_size;
            next_block++;
        }
    };

    const int pg = warp & 3, dh = warp >> 2;      // position group, half of the dims
    const int nf = L / 64;                        // n8 fragments per warp in P·V
    const int kh = (D / 32) * 16;                 // dims [0, kh) and [kh, D): k16-aligned halves
    const int k_begin = dh ? kh : 0, k_end = dh ? D : kh;
    float acc[MLA_FRAGS][4];
#pragma unroll
    for (int f = 0; f < MLA_FRAGS; f++) acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

    const int ntiles = (end - start + MLA_TILE - 1) / MLA_TILE;
    load_tile(0, 0, fast_tiles ? tile_source(seq_blocks[next_block]) : nullptr);
    advance_block();
    int block_ahead = fast_tiles && ntiles > 1 ? seq_blocks[next_block] : 0;  // tile 1's block
    for (int tile = 0; tile < ntiles; tile++) {
        const int buf = tile & 1;
        cp_async_wait<0>();
        __syncthreads();  // tile landed; every warp is done with the previous tile's buffers
        if (tile + 1 < ntiles) {
            load_tile(tile + 1, buf ^ 1, fast_tiles ? tile_source(block_ahead) : nullptr);
            advance_block();
            if (fast_tiles && tile + 2 < ntiles) block_ahead = seq_blocks[next_block];
        }
        const uint16_t *kv = KVs + buf * MLA_TILE * DS;

        // This warp's half of S = Q·Kᵀ for its 8 positions, two chains in flight.
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s_odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        {
            const int l = lane & 15;
            const uint16_t *qa = Qs + (lane % 16) * DS + (lane / 16) * 8;
            const uint16_t *kb = kv + (pg * 8 + (l & 7)) * DS + (l >> 3) * 8;
            int kk = k_begin;
#pragma unroll 3
            for (; kk + 32 <= k_end; kk += 32) {
                uint32_t a0[4], b0[2], a1[4], b1[2];
                ldmatrix_x4(a0, qa + kk);
                ldmatrix_x2(b0, kb + kk);
                ldmatrix_x4(a1, qa + kk + 16);
                ldmatrix_x2(b1, kb + kk + 16);
                mma_bf16_16816(s, a0, b0);
                mma_bf16_16816(s_odd, a1, b1);
            }
            if (kk < k_end) {  // an odd number of k16 steps: the last joins the even chain
                uint32_t a0[4], b0[2];
                ldmatrix_x4(a0, qa + kk);
                ldmatrix_x2(b0, kb + kk);
                mma_bf16_16816(s, a0, b0);
            }
        }
#pragma unroll
        for (int e = 0; e < 4; e++) s[e] += s_odd[e];
        if (dh) {
#pragma unroll
            for (int e = 0; e < 4; e++) s_half1[(pg * 32 + lane) * 4 + e] = s[e];
        }
        __syncthreads();

        // Warps of half 0 finish S and the tile's running max per head.
        const int p_base = start + tile * MLA_TILE + pg * 8 + 2 * q;
        if (!dh) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[e] += s_half1[(pg * 32 + lane) * 4 + e];
                s[e] = (p_base + (e & 1) < end) ? s[e] * a.scale : -INFINITY;
            }
            float mx0 = fmaxf(s[0], s[1]), mx1 = fmaxf(s[2], s[3]);
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            if (q == 0) {
                red_max[pg * MLA_HEADS + r] = mx0;
                red_max[pg * MLA_HEADS + r + 8] = mx1;
            }
        }
        __syncthreads();
        float m_new[2], alpha[2];
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            int row = r + 8 * h2;
            float tm = fmaxf(fmaxf(red_max[row], red_max[MLA_HEADS + row]),
                             fmaxf(red_max[2 * MLA_HEADS + row], red_max[3 * MLA_HEADS + row]));
            m_new[h2] = fmaxf(m_run[h2], tm);
            alpha[h2] = __expf(m_run[h2] - m_new[h2]);  // ex2.approx; exp(-inf) = 0 on the first tile
        }
        if (!dh) {
            float pr[4];
#pragma unroll
            for (int e = 0; e < 4; e++) pr[e] = __expf(s[e] - m_new[e >> 1]);
            float sum0 = pr[0] + pr[1], sum1 = pr[2] + pr[3];
            sum0 += __shfl_xor_sync(0xffffffffu, sum0, 1);
            sum0 += __shfl_xor_sync(0xffffffffu, sum0, 2);
            sum1 += __shfl_xor_sync(0xffffffffu, sum1, 1);
            sum1 += __shfl_xor_sync(0xffffffffu, sum1, 2);
            if (q == 0) {
                red_sum[pg * MLA_HEADS + r] = sum0;
                red_sum[pg * MLA_HEADS + r + 8] = sum1;
            }
            uint32_t *prow0 = (uint32_t *)(Ps + r * MLA_PSTRIDE + pg * 8 + 2 * q);
            uint32_t *prow1 = (uint32_t *)(Ps + (r + 8) * MLA_PSTRIDE + pg * 8 + 2 * q);
            *prow0 = (uint32_t)float_to_bf16(pr[0]) | ((uint32_t)float_to_bf16(pr[1]) << 16);
            *prow1 = (uint32_t)float_to_bf16(pr[2]) | ((uint32_t)float_to_bf16(pr[3]) << 16);
        }
        __syncthreads();
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            int row = r + 8 * h2;
            float ts = ((red_sum[row] + red_sum[MLA_HEADS + row]) + red_sum[2 * MLA_HEADS + row]) +
                       red_sum[3 * MLA_HEADS + row];
            l_run[h2] = l_run[h2] * alpha[h2] + ts;
            m_run[h2] = m_new[h2];
        }

        // O = O*alpha + P·V over this warp's L/8 output columns.
        const int l0 = warp * (L / 8);
#pragma unroll
        for (int f = 0; f < MLA_FRAGS; f++) {
            acc[f][0] *= alpha[0]; acc[f][1] *= alpha[0];
            acc[f][2] *= alpha[1]; acc[f][3] *= alpha[1];
        }
#pragma unroll
        for (int kk = 0; kk < MLA_TILE; kk += 16) {
            uint32_t af[4];
            ldmatrix_x4(af, Ps + (lane % 16) * MLA_PSTRIDE + kk + (lane / 16) * 8);
#pragma unroll
            for (int f = 0; f < MLA_FRAGS; f += 2) {
                if (f + 1 < nf) {
                    uint32_t rr[4];
                    ldmatrix_x4_trans(rr, kv + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * DS + l0 + f * 8 +
                                              (lane >> 4) * 8);
                    uint32_t b0[2] = {rr[0], rr[1]}, b1[2] = {rr[2], rr[3]};
                    mma_bf16_16816(acc[f], af, b0);
                    mma_bf16_16816(acc[f + 1], af, b1);
                } else if (f < nf) {  // L/8 = 8 (L = 64): one fragment
                    uint32_t b0[2];
                    ldmatrix_x2_trans(b0, kv + (kk + (lane & 15)) * DS + l0 + f * 8);
                    mma_bf16_16816(acc[f], af, b0);
                }
            }
        }
    }

    // Partials: the unnormalized output and (max, sum) of each real head.
    const long nsp = p.nsplit;
#pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
        int h = hg * MLA_HEADS + r + 8 * h2;
        if (h >= a.H) continue;
        long base = ((long)t * a.H + h) * nsp + split;
        float *o = p.o_part + base * L + warp * (L / 8);
#pragma unroll
        for (int f = 0; f < MLA_FRAGS; f++)
            if (f < nf) {
                o[f * 8 + 2 * q] = acc[f][2 * h2];
                o[f * 8 + 2 * q + 1] = acc[f][2 * h2 + 1];
            }
        if (warp == 0 && q == 0) p.ml_part[base] = make_float2(m_run[h2], l_run[h2]);
    }
}

// The 16-head mma.sync split kernel (any device this build runs on).
void mla_mma_split_launch(cuda_ctx *c, const mla_params *pp) {
    const mla_attention_args *a = &pp->a;
    const int DS = a->L + a->R + 8;
    size_t smem = ((size_t)MLA_HEADS * DS + 2 * MLA_TILE * DS + MLA_HEADS * MLA_PSTRIDE) * 2 +
                  (2 * 4 * MLA_HEADS + 4 * 32 * 4) * sizeof(float);
    cuda_kernel_smem(c, (const void *)mla_split_kernel, smem, "mla_attention");
    dim3 grid((unsigned)((a->H + MLA_HEADS - 1) / MLA_HEADS), (unsigned)pp->nsplit, (unsigned)a->T);
    mla_split_kernel<<<grid, MLA_THREADS, smem, c->stream>>>(*pp);
    CUDA_CHECK_LAUNCH("mla_attention");
}
