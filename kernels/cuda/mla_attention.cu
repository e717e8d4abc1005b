// kernels/cuda/mla_attention.cu — absorbed MLA attention over the paged latent cache, prefill
// and decode alike, on tensor cores.
//
// Work unit (one CTA): 16 heads of one query token x one KV split. Splits have a FIXED SIZE
// (MLA_SPLIT_SIZE positions, aligned to absolute position 0), so a token's splits depend only
// on its own position; within a split, tiles of 32 positions, also aligned, are folded by the
// online softmax in ascending order. A second kernel merges the token's splits in ascending
// order (the 16-head sm_90a kernel's in split pairs first, and that kernel folds the pairs and
// tokens one of its units holds itself, in the same operations: mla_merge.cuh). Nothing in a
// row's reduction depends on the batch: T, other tokens' lengths and max_seq_len only size the
// grid and the scratch layout. On sm_90a, a multiple of 64 heads with L = 512, R = 64 and
// blocks and splits of multiples of 64 positions take mla_absorbed_h64_sm90.cu's split kernel
// instead (a shape choice: mla_wgmma_supported), and other multiples of 16 heads with that
// latent layout mla_absorbed_h16_sm90.cu's (mla_wgmma16_supported), into the same partials and
// the same merge arithmetic.
//
// Per tile, 8 warps:  S = Q·Kᵀ (16 heads x 32 positions): warp w takes positions 8*(w%4).. and
// one half of the L+R dims (w/4), as two m16n8k16 chains (even and odd k16 steps); S is
// ((half0 even + half0 odd) + (half1 even + half1 odd)), a fixed order. Scale, mask, running
// max; P = exp(S - m) rounded to bf16 for the tensor cores (the fp32 P feeds the running sum,
// as FlashAttention does); O = O*alpha + P·V, warp w owning L/8 output columns.
#include <cuda_runtime.h>   // dim3, cudaStream_t
#include <math.h>           // fmaxf, INFINITY
#include <string.h>         // strcmp

#include "../bf16.h"        // bf16_to_float, float_to_bf16
#include "cuda_ctx.cuh"     // cuda_ctx, cuda_scratch, cuda_kernel_smem, CUDA_CHECK
#include "pdl.cuh"          // pdl_launch, pdl_wait_predecessor, pdl_release_dependent
#include "tma_map.cuh"      // tma_map_bf16_2d(_stream)
#include "inv_cuda.h"       // inv_cuda_mla_attention_kernel
#include "inv_cuda_ops.h"   // inv_cuda_mla_attention, mla_attention_launch, mla_wgmma_*
#include "l2_policy.cuh"    // l2_policy_evict_first
#include "mla_merge.cuh"    // mla_token_splits, mla_merge_*, mla_partial_load4
#include "mma.cuh"          // cp_async16, ldmatrix_*, mma_bf16_16816

// Positions per split: the invariant set's constant. 512 rather than 256 halves the fp32
// partials written and merged (H200, B=128 L=16k H=16: 57% of copy bandwidth vs 52%) at the
// price of fewer CTAs for a lone long sequence (B=1 L=16k: 60 us vs 42 us).
#define MLA_SPLIT_SIZE 512
#define MLA_HEADS 16         // heads per CTA: the MMA's M
#define MLA_TILE 32          // positions per tile: 4 warps x n8
#define MLA_WARPS 8          // 4 position groups x 2 halves of the dims in Q·Kᵀ
#define MLA_MAX_L 512        // output columns per warp L/8 <= 64 = 8 n8 fragments
#define MLA_FRAGS (MLA_MAX_L / 64)
#define MLA_PSTRIDE (MLA_TILE + 8)
#define MLA_THREADS (MLA_WARPS * 32)
#define MLA_FAST_MAX_D 640   // contiguous tile copies for D <= 640: 10 pieces per thread
#define MLA_PIECES (MLA_TILE * MLA_FAST_MAX_D / 8 / MLA_THREADS)

struct mla_params {
    mla_attention_args a;
    int split_size, nsplit;  // nsplit: the grid's split count (scratch layout only)
    bool q_aligned;          // every 8-value piece of q_lat and q_pe is 16-byte aligned
    bool tile_in_block;      // every 32-position tile lies inside one cache block
    float *o_part;           // [T][H][nsplit][L] unnormalized outputs
    float2 *ml_part;         // [T][H][nsplit] (running max, running sum)
    int merged_max_n;        // tokens of at most this many splits: merged by the split kernel
    bool pairs_stored;       // partial k of a token is its split pair k (mla_merge.cuh), not split k
};

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
    // 16-byte cp.async when every row piece is aligned (one batch of loads in flight, not
    // 16*D dependent ones), element by element otherwise.
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

    // A tile inside one cache block is 32 consecutive cache rows, one contiguous run of 32*D
    // values: thread i copies 16-byte pieces i, i+256, ... whose shared-memory offsets (rows are
    // padded to DS) are the same for every tile, so they are worked out once, here.
    const bool fast_tiles = p.tile_in_block && D <= MLA_FAST_MAX_D;
    const int cpr = D / 8, tile_pieces = MLA_TILE * cpr;
    int piece_off[MLA_PIECES];
#pragma unroll
    for (int k = 0; k < MLA_PIECES; k++) {
        const int i = threadIdx.x + k * MLA_THREADS;
        piece_off[k] = i < tile_pieces ? (i / cpr) * DS + (i % cpr) * 8 : -1;
    }

    // One tile of 32 positions into buffer `buf`; `tile_src` is its first cache row when the tile
    // lies inside one block. A tile reaching past `end` (a sequence's last) goes a warp per row:
    // positions at or past `end` are zero-filled (masked below, and zeros keep 0 * garbage from
    // turning into NaN in P·V), as are tiles of caches whose blocks are not multiples of 32.
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

    // The cache block of the next tile to load, walked 32 positions at a time (tiles never straddle
    // a block on the fast path), its table entry read a tile ahead so the read's latency hides
    // behind a tile of work instead of stalling every warp before each load.
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

// One block per (token, head) merges the token's own n splits, n fixed by the token's
// position alone; thread tid owns columns 4 tid .. 4 tid + 3:
//   m = max over s of m_s                                         (exact in any order)
//   for s = 0 .. n - 1 ascending: w = e^(m_s - m), d = fma(l_s, w, d), o = fma(o_s, w, o)
//   out = bf16(o * (1 / d))
// or, for the 16-head kernel's tokens of n > 2 splits, the same over the split pairs of
// mla_merge.cuh's tree: read as that kernel stored them (p.pairs_stored), or formed here from
// its splits (FORM), in the same operations.
// Every thread computes m and d itself from the (m_s, l_s) pairs (broadcast loads): no fold
// across threads and no barrier. The merge runs after the split grid has ended, so its time is
// a chain of load latencies: the partials' loads go out CHUNK at a time, and a token of up to
// CHUNK partials waits for memory once. CHUNK (even: a chunk holds whole pairs) follows the
// grid's partial count (registers, so blocks per SM); the order of the sums does not depend
// on it. Tokens of at most merged_max_n splits were merged by the split kernel, in these
// operations.
#define MERGE_THREADS 128
// HINTED: the partials are a wgmma kernel's, stored with L2's evict_last policy, so read with
// evict_first (mla_merge.cuh); the mma.sync kernel's are read plainly, in their own instantiation
// (a policy chosen at run time on every path took CHUNK = 16 from 128 registers to 141, a block
// fewer an SM, and B=32 L=16k 16 heads from 175.4 to 177.5 us).
template <int CHUNK, bool HINTED, bool FORM>
__global__ void __launch_bounds__(MERGE_THREADS) mla_merge_kernel(mla_params p) {
    static_assert(CHUNK % 2 == 0, "a chunk holds whole split pairs");
    const mla_attention_args &a = p.a;
    // Last tokens first: the split kernels walk tokens in ascending order, so the partials
    // written last are the ones still in L2 (H200: 128 heads 32 x 4k 135.1 -> 133.1 us).
    const int th = (int)(gridDim.x - 1 - blockIdx.x), t = th / a.H, h = th % a.H, L = a.L, tid = threadIdx.x;
    // The position is the split kernel's input, not its output (that kernel was launched
    // plainly, after whatever wrote it), so it is read before waiting for the split grid.
    const int pos = a.token_pos[t];
    pdl_wait_predecessor();  // launched while the split kernel still runs (pdl.cuh)
    const int n = mla_token_splits(pos, p.split_size, p.nsplit);
    if (n <= p.merged_max_n || 4 * tid >= L) return;
    const bool form = FORM && n > 2;                                // pairs of splits made here
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

// The merge kernel for a grid of at most `parts` partials a token: CHUNK from it (registers, so
// blocks per SM).
typedef void (*mla_merge_fn)(mla_params);
template <bool HINTED, bool FORM>
static mla_merge_fn mla_merge_for(int parts) {
    return parts <= 2   ? mla_merge_kernel<2, HINTED, FORM>
           : parts <= 4 ? mla_merge_kernel<4, HINTED, FORM>
           : parts <= 8 ? mla_merge_kernel<8, HINTED, FORM>
                        : mla_merge_kernel<16, HINTED, FORM>;
}

// Every 8-value piece of q_lat and q_pe 16-byte aligned: the tensor-core kernels copy Q by cp.async.
bool mla_q_aligned(const mla_attention_args *a) {
    return ((uintptr_t)a->q_lat & 15u) == 0 && ((uintptr_t)a->q_pe & 15u) == 0 && a->ld_q_lat % 8 == 0 &&
           a->ld_q_pe % 8 == 0 && a->head_stride_q_pe % 8 == 0;
}

bool mla_wgmma_takes(const cuda_ctx *c, const mla_attention_args *a, int split_size, int heads, size_t smem_bytes) {
    return c->wgmma && c->tensor_map_encode && c->smem_optin >= smem_bytes && a->H % heads == 0 && a->L == 512 &&
           a->R == 64 && a->block_size > 0 && a->block_size % 64 == 0 && split_size > 0 && split_size % 64 == 0;
}

CUtensorMap mla_kv_cache_map(cuda_ctx *c, const mla_attention_args *a, int box_rows, bool stream) {
    // Its slot count is not among the arguments; every box lies inside a block the token's
    // sequence owns, so the extent only has to cover the largest slot index a coordinate
    // (int32) can name.
    const int d = a->L + a->R;
    return (stream ? tma_map_bf16_2d_stream : tma_map_bf16_2d)(c, a->kv_cache, 1L << 31, d, d, 64, box_rows,
                                                               "mla_attention", "kv cache");
}

// Shapes the tensor-core kernels do not take (mla_absorbed_generic.cu's instead).
static bool mla_generic_shape(const mla_attention_args *a) {
    return a->L % 64 || a->L > MLA_MAX_L || a->R % 16 || a->R <= 0;
}

// The grid's split count: the batch's longest sequence's (the scratch layout, never a row's order).
static int mla_grid_splits(const mla_attention_args *a, int split_size) {
    return (a->max_seq_len + split_size - 1) / split_size;
}

// The invariant set's split size, or the one a backend schedules itself (kv_split_size).
static int mla_split_size(const mla_attention_args *a) {
    return a->kv_split_size > 0 ? a->kv_split_size : MLA_SPLIT_SIZE;
}

static void mla_mma_split_launch(cuda_ctx *c, const mla_params *p);

void mla_attention_launch(cuda_ctx *c, const mla_attention_args *a, int split_size) {
    if (a->T <= 0 || a->H <= 0) return;
    if (mla_generic_shape(a)) {
        mla_attention_generic_launch(c, a, split_size);  // a shape choice, never a batch choice
        return;
    }
    if (((uintptr_t)a->kv_cache & 15u) != 0)
        invar_die(INVAR_EXIT_INPUT, "mla_attention: kv_cache must be 16-byte aligned");
    if (a->T > 65535) invar_die(INVAR_EXIT_INPUT, "mla_attention: T=%d exceeds 65535 query tokens", a->T);
    if (a->max_seq_len <= 0)
        invar_die(INVAR_EXIT_INPUT, "mla_attention: max_seq_len %d with %d query tokens", a->max_seq_len, a->T);
    mla_params p;
    p.a = *a;
    p.split_size = split_size;
    p.tile_in_block = a->block_size % MLA_TILE == 0 && split_size % MLA_TILE == 0;
    p.q_aligned = mla_q_aligned(a);
    p.nsplit = mla_grid_splits(a, split_size);
    size_t parts = (size_t)a->T * a->H * p.nsplit;
    char *scratch = (char *)cuda_scratch(c, SCRATCH_MLA_PARTIAL, parts * ((size_t)a->L * 4 + 8),
                                         "mla_attention split partials");
    p.o_part = (float *)scratch;
    p.ml_part = (float2 *)(scratch + parts * (size_t)a->L * 4);

    // On sm_90a: 64 heads a CTA for many heads, 16 for the rest (mla_attention_wgmma*.cu), a
    // shape choice too; the same partials and merge arithmetic (both merge some tokens
    // themselves).
    p.merged_max_n = 0;
    p.pairs_stored = false;
    const bool wgmma64 = mla_wgmma_supported(c, a, split_size);
    const bool wgmma16 = !wgmma64 && mla_wgmma16_supported(c, a, split_size);
    if (wgmma64)
        p.merged_max_n = mla_wgmma_split_launch(c, a, split_size, p.nsplit, p.o_part, p.ml_part);
    else if (wgmma16)
        p.merged_max_n =
            mla_wgmma16_split_launch(c, a, split_size, p.nsplit, p.o_part, p.ml_part, &p.pairs_stored);
    else
        mla_mma_split_launch(c, &p);
    if (p.nsplit <= p.merged_max_n) return;  // every token merged by the split kernel
    // The wgmma kernels' partials were stored with evict_last (mla_merge.cuh). The 16-head
    // kernel's tokens of more than two splits merge in split pairs: stored by it, or formed
    // here where it took single splits as units.
    const bool form = wgmma16 && !p.pairs_stored && p.nsplit > 2;
    const int token_parts = p.pairs_stored ? (p.nsplit + 1) / 2 : p.nsplit;
    const mla_merge_fn merge = form                  ? mla_merge_for<true, true>(token_parts)
                               : wgmma64 || wgmma16 ? mla_merge_for<true, false>(token_parts)
                                                    : mla_merge_for<false, false>(token_parts);
    pdl_launch(c, merge, dim3((unsigned)(a->T * a->H)), dim3(MERGE_THREADS), 0, "mla_attention merge", p);
}

// The 16-head mma.sync split kernel (any device this build runs on).
static void mla_mma_split_launch(cuda_ctx *c, const mla_params *pp) {
    const mla_attention_args *a = &pp->a;
    const int DS = a->L + a->R + 8;
    size_t smem = ((size_t)MLA_HEADS * DS + 2 * MLA_TILE * DS + MLA_HEADS * MLA_PSTRIDE) * 2 +
                  (2 * 4 * MLA_HEADS + 4 * 32 * 4) * sizeof(float);
    cuda_kernel_smem(c, (const void *)mla_split_kernel, smem, "mla_attention");
    dim3 grid((unsigned)((a->H + MLA_HEADS - 1) / MLA_HEADS), (unsigned)pp->nsplit, (unsigned)a->T);
    mla_split_kernel<<<grid, MLA_THREADS, smem, c->stream>>>(*pp);
    CUDA_CHECK_LAUNCH("mla_attention");
}

// A backend that schedules its own splits (kv_split_size) gets them: the kernel stays a fixed
// function of (position, split size), and the backend owns whether that size is invariant.
void inv_cuda_mla_attention(ops_set *ops, const mla_attention_args *a) {
    mla_attention_launch(cuda_ctx_of(ops), a, mla_split_size(a));
}

// The same choices as inv_cuda_mla_attention makes through mla_attention_launch.
const char *inv_cuda_mla_attention_kernel(ops_set *ops, const mla_attention_args *a) {
    if (mla_generic_shape(a)) return "generic";
    const cuda_ctx *c = cuda_ctx_of(ops);
    if (mla_wgmma_supported(c, a, mla_split_size(a))) return "wgmma";
    return mla_wgmma16_supported(c, a, mla_split_size(a)) ? "wgmma16" : "mma.sync";
}

bool inv_cuda_mla_wgmma_merges(ops_set *ops, const mla_attention_args *a) {
    const cuda_ctx *c = cuda_ctx_of(ops);
    const int split_size = mla_split_size(a);
    return !mla_generic_shape(a) && a->max_seq_len > 0 && mla_wgmma_supported(c, a, split_size) &&
           mla_wgmma_merges_tokens(c, a, mla_grid_splits(a, split_size));
}

bool inv_cuda_mla_wgmma16_pairs(ops_set *ops, const mla_attention_args *a) {
    return a->max_seq_len > 0 && strcmp(inv_cuda_mla_attention_kernel(ops, a), "wgmma16") == 0 &&
           mla_wgmma16_pairs(cuda_ctx_of(ops), a, mla_grid_splits(a, mla_split_size(a)));
}
