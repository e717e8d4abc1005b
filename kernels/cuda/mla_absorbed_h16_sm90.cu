// kernels/cuda/mla_absorbed_h16_sm90.cu — absorbed MLA attention on sm_90a for H a multiple of
// 16 the 64-head kernel does not take, or under 16 (mla_wgmma16_supported), a shape choice, never
// a batch one. Fewer than 16 heads run as one unit of 16, the rest zeros never stored: a head's
// row is one column of each wgmma, its bits independent of the other columns, so a rank's 2 or 8
// heads of TP-size invariance get the bits of the same heads in a 16-head call.
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
//
// Positions are the wgmma M (Sᵀ = K·Qᵀ, Oᵀ += Vᵀ·Pᵀ), so 16 heads are not padded to 64. Work
// unit: 16 heads of one token x one fixed-size split. Reduction order of a (token, head) row:
//   for each 64-position tile of the split, ascending (aligned to position 0):
//     s_b = 4 k16 steps ascending over dims 64b .. 64b + 63, one fp32 chain from 0, b = 0..8;
//           s = (((s0 + s1) + (s2 + s3)) + s4) + ((s5 + s6) + (s7 + s8)); s *= scale, past the
//           token's position -inf
//     m' = max(m, max of the tile's 64 s); alpha = exp(m - m'); p = exp(s - m')
//     l_t = l_t * alpha + (p at 16w + r + p at 16w + r + 8), thread t = lane 4r + q of warp w
//     O  = O * alpha, then O += bf16(p) · V over 4 k16 steps ascending
//   l_w = warp w's l_t summed over lanes xor 4, 8, 16; l = ((l_0 + l_1) + l_2) + l_3
// A unit may be a split pair (mla_merge.cuh's tree), folded here, or a whole token, merged
// here: the merge kernel's operations, so the same bits.
#include <cuda.h>           // CUtensorMap
#include <cuda_runtime.h>   // dim3, float2
#include <math.h>           // INFINITY
#include <stdint.h>         // uint8_t, uint16_t, uint32_t, uint64_t

#include "bf16x2.cuh"       // bf16x2_round_no_nan
#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK, CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"   // mla_wgmma16_supported, mla_wgmma16_split_launch, mla_kv_cache_map
#include "l2_policy.cuh"    // l2_policy_evict_first, l2_policy_evict_last
#include "mla_merge.cuh"    // mla_token_splits, mla_merge_*, mla_partial_store1
#include "mma.cuh"          // cp_async16, cp_async_commit, cp_async_wait
#include "pdl.cuh"          // pdl_release_dependent
#include "wgmma.cuh"        // wgmma_*, stmatrix_x4_trans, mbar_*, tma_load_2d(_hint), setmaxnreg_*

#define MLAN_HEADS 16                                  // heads per unit: the wgmma N
#define MLAN_TILE 64                                   // positions per KV tile: the wgmma M of Sᵀ
#define MLAN_L 512
#define MLAN_R 64
static_assert(MLAN_L == 512 && MLAN_R == 64 && MLAN_TILE == 64, "the shape mla_wgmma_takes checks");
#define MLAN_D (MLAN_L + MLAN_R)
#define MLAN_BOXES (MLAN_D / 64)                       // 64-dim boxes (128 bytes a row)
#define MLAN_BOX_BYTES (MLAN_TILE * 128)
#define MLAN_TILE_BYTES (MLAN_BOXES * MLAN_BOX_BYTES)  // 72 KB
#define MLAN_QBOX_BYTES (MLAN_HEADS * 128)
#define MLAN_Q_BYTES (MLAN_BOXES * MLAN_QBOX_BYTES)    // 18 KB
#define MLAN_THREADS 256                               // the two computing warpgroups
#define MLAN_BLOCK_THREADS (MLAN_THREADS + 128)        // + the producer warpgroup
// Registers: the launch's 168 a thread, the producer keeping 88 and the computing threads 208;
// a launch at fewer would leave setmaxnreg.inc waiting forever (tests/ptxas_budgets.sh).
#define MLAN_PRODUCER_REGS 88
#define MLAN_COMPUTE_REGS 208
static_assert(128 * MLAN_PRODUCER_REGS + MLAN_THREADS * MLAN_COMPUTE_REGS == MLAN_BLOCK_THREADS * 168,
              "the budgets fill the launch's 168 registers a thread");
// Dynamic shared memory on 1024-byte boundaries (swizzle atoms): KV stages, Q buffers, P.
#define MLAN_Q_OFFSET (2 * MLAN_TILE_BYTES)
#define MLAN_P_OFFSET (MLAN_Q_OFFSET + 2 * MLAN_Q_BYTES)
#define MLAN_SMEM_BYTES (MLAN_P_OFFSET + 2 * MLAN_HEADS * 128 + 1024)

struct mlan_params {
    mla_attention_args a;
    int split_size, nsplit;  // nsplit: the grid's split count (scratch layout only)
    int head_groups;         // ceil(H / 16)
    int token_units;         // units a token: nsplit, or pairs: its split pairs
    long units;              // T x token_units x head_groups, head group fastest
    bool pairs;              // a unit is a split pair (2k, 2k + 1), folded here
    bool kv_evict_first;     // mlan_kv_evict_first
    bool q_aligned;          // Q by cp.async or value by value
    float *o_part;           // [T][H][nsplit][L] unnormalized outputs
    float2 *ml_part;         // [T][H][nsplit] (running max, running sum)
};

// A unit: token, first split, head group, positions [start, end), the token's split count n;
// two: a pair unit; whole: it holds all n splits, so it writes the output, not partials.
struct mlan_unit {
    int t, split, hg, seq, start, end, ntiles, n;
    bool two, whole;
};

// A CTA's walk: the current unit and, read ahead, unit u + gridDim.x's token position and
// sequence, so that moving on does not wait for a global load.
struct mlan_walk {
    long u;  // p.units: no unit left
    mlan_unit w;
    int ahead_pos, ahead_seq;
};

#if INVAR_WGMMA
// Unit u; false when its split lies past the token's position.
__device__ __forceinline__ bool mlan_unit_of(const mlan_params &p, long u, int pos, int seq, mlan_unit &w) {
    w.hg = (int)(u % p.head_groups);
    const long ts = u / p.head_groups;
    const int k = (int)(ts % p.token_units);
    w.t = (int)(ts / p.token_units);
    w.split = p.pairs ? 2 * k : k;
    w.seq = seq;
    w.n = mla_token_splits(pos, p.split_size, p.nsplit);
    w.two = p.pairs && w.split + 1 < w.n;
    w.whole = w.n == 1 || (w.two && w.n == 2);
    w.start = w.split * p.split_size;
    if (w.start > pos) return false;
    w.end = min(w.start + (w.two ? 2 : 1) * p.split_size, pos + 1);
    w.ntiles = (w.end - w.start + MLAN_TILE - 1) / MLAN_TILE;
    return true;
}

__device__ __forceinline__ int mlan_token_of(const mlan_params &p, long u) {
    return (int)(u / ((long)p.head_groups * p.token_units));
}

__device__ __forceinline__ void mlan_read_ahead(const mlan_params &p, mlan_walk &k) {
    const long c = k.u + gridDim.x;
    if (c < p.units) {
        const int t = mlan_token_of(p, c);
        k.ahead_pos = p.a.token_pos[t];
        k.ahead_seq = p.a.token_seq[t];
    }
}

// The first unit at or after u (stepping by gridDim.x) whose split holds positions.
__device__ mlan_walk mlan_walk_from(const mlan_params &p, long u) {
    mlan_walk k;
    for (; u < p.units; u += gridDim.x) {
        const int t = mlan_token_of(p, u);
        if (mlan_unit_of(p, u, p.a.token_pos[t], p.a.token_seq[t], k.w)) break;
    }
    k.u = u;
    mlan_read_ahead(p, k);
    return k;
}

__device__ mlan_walk mlan_walk_next(const mlan_params &p, const mlan_walk &k) {
    const long c = k.u + gridDim.x;
    if (c >= p.units) {
        mlan_walk e = k;
        e.u = p.units;
        return e;
    }
    mlan_walk n;
    if (!mlan_unit_of(p, c, k.ahead_pos, k.ahead_seq, n.w)) return mlan_walk_from(p, c + gridDim.x);
    n.u = c;
    mlan_read_ahead(p, n);
    return n;
}

// Tile i of unit w's first cache row; its 64 rows lie inside one block.
__device__ __forceinline__ int mlan_tile_row(const mla_attention_args &a, const mlan_unit &w, int i) {
    const int p0 = w.start + i * MLAN_TILE;
    return (int)((long)a.block_table[(long)w.seq * a.max_blocks_per_seq + p0 / a.block_size] * a.block_size +
                 p0 % a.block_size);
}

// Barrier 3 among the two computing warpgroups (the producer has left block-wide barriers).
__device__ __forceinline__ void mlan_compute_sync() { asm volatile("bar.sync 3, %0;\n" ::"n"(MLAN_THREADS) : "memory"); }

// A split's l for this thread's 4 heads, once a split: l_w over lanes xor 4, 8, 16, then
// l = ((l_0 + l_1) + l_2) + l_3 over the warps.
__device__ __forceinline__ void mlan_split_sums(int wg, int warp, int r, int q, const float (&l_run)[4],
                                                float (*red_sum)[MLAN_HEADS], float (&l)[4]) {
    float lw[4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
        lw[c] = l_run[c];
#pragma unroll
        for (int o8 = 4; o8 < 32; o8 <<= 1) lw[c] += __shfl_xor_sync(0xffffffffu, lw[c], o8);
    }
    if (wg == 0 && r == 0) {
#pragma unroll
        for (int c = 0; c < 4; c++) red_sum[warp][8 * (c >> 1) + 2 * q + (c & 1)] = lw[c];
    }
    mlan_compute_sync();
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int h = 8 * (c >> 1) + 2 * q + (c & 1);
        l[c] = ((red_sum[0][h] + red_sum[1][h]) + red_sum[2][h]) + red_sum[3][h];
    }
}

// Sᵀ = K·Qᵀ (64 positions x 16 heads), or Sᵀ += (FIRST: the chain's first step).
#define MLAN_M64N16K16(TRANS_A)                                                                          \
    "{\n"                                                                                                 \
    ".reg .pred p;\n"                                                                                     \
    "setp.ne.b32 p, %10, 0;\n"                                                                            \
    "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, " \
    TRANS_A ", 0;\n"                                                                                      \
    "}\n"
#define MLAN_OUT8(d) "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
template <bool FIRST>
__device__ __forceinline__ void wgmma_m64n16k16_kk(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
    if (FIRST)
        asm volatile(MLAN_M64N16K16("0") : MLAN_OUT8(d) : "l"(desc_a), "l"(desc_b), "r"(0));
    else
        asm volatile(MLAN_M64N16K16("0") : WGMMA_ACC4(d, 0), WGMMA_ACC4(d, 4) : "l"(desc_a), "l"(desc_b), "r"(1));
}
// Oᵀ += Vᵀ (the tile's rows, MN-major) · Pᵀ.
__device__ __forceinline__ void wgmma_m64n16k16_mk(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(MLAN_M64N16K16("1") : WGMMA_ACC4(d, 0), WGMMA_ACC4(d, 4) : "l"(desc_a), "l"(desc_b), "r"(1));
}

// A tile's Sᵀ half, box by box; references to the kernel's locals (values change ptxas's
// register allocation).
struct mlan_s_boxes {
    uint64_t (&full)[2][MLAN_BOXES];
    const int &st;
    const uint32_t &parity, &d_kv, &d_q;

    // Box b's chain (4 k16 steps ascending from 0) into d, once the box has landed.
    __device__ __forceinline__ void chain(int b, float (&d)[8]) const {
        mbar_wait(&full[st][b], parity);
        wgmma_fence();  // after the wait's loop (a divergent path), or ptxas serializes (C7520)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const uint64_t da = wgmma_desc_sw128_lo(d_kv + (b * MLAN_BOX_BYTES + kk * 32) / 16);
            const uint64_t db = wgmma_desc_sw128_lo(d_q + (b * MLAN_QBOX_BYTES + kk * 32) / 16);
            if (kk == 0)
                wgmma_m64n16k16_kk<true>(d, da, db);
            else
                wgmma_m64n16k16_kk<false>(d, da, db);
        }
    }
};

#endif

// Barrier 1 + wg among warpgroup wg's 128 threads.
__device__ __forceinline__ void mlan_wg_sync(int wg) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

// PAIRS = p.pairs: a template argument, so that a walk over splits holds no registers for pairs.
template <bool PAIRS>
__global__ void __launch_bounds__(MLAN_BLOCK_THREADS, 1)
mla_wgmma16_split_kernel(mlan_params p, const __grid_constant__ CUtensorMap tmap_kv) {
#if INVAR_WGMMA
    pdl_release_dependent();  // the merge may start up now; it waits for this grid's end
    const mla_attention_args &a = p.a;
    mlan_walk cw = mlan_walk_from(p, blockIdx.x);
    if (cw.u >= p.units) return;
    const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
    const int r = lane >> 2, q = lane & 3;

    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms
    uint8_t *const sKV = smem, *const sQ2 = smem + MLAN_Q_OFFSET;
    uint8_t *const sP = smem + MLAN_P_OFFSET + wg * MLAN_HEADS * 128;  // this warpgroup's P
    const uint32_t d_p = (uint32_t)wgmma_desc_sw128(sP);
    // This lane's row of the warp's P blocks (stmatrix_x4_trans).
    uint8_t *const p_row = sP + sw128_offset(8 * (lane >> 4) + (lane & 7), 2 * warp + ((lane >> 3) & 1));
    __shared__ __align__(8) uint64_t full[2][MLAN_BOXES];  // box b of stage s has landed
    __shared__ float4 s_half[2][2][MLAN_THREADS / 2][2];   // [tile parity][warpgroup][thread]
    __shared__ float red_max[2][4][MLAN_HEADS];
    __shared__ float red_sum[4][MLAN_HEADS];
    __shared__ __align__(8) uint64_t empty[2];             // stage s read by the computing warps

    if (tid == 0) {
        for (int st = 0; st < 2; st++) {
            for (int b = 0; b < MLAN_BOXES; b++) mbar_init(&full[st][b], 1);
            mbar_init(&empty[st], MLAN_THREADS / 32);
        }
        mbar_init_fence();
    }
    __syncthreads();  // the last block-wide barrier: the producer's idle threads leave now

    if (tid >= MLAN_THREADS) {
        setmaxnreg_dec<MLAN_PRODUCER_REGS>();
        // The producer: tile g into stage g % 2 once the computing warps are done with tile
        // g - 2 there, up to two tiles ahead across units.
        if (tid != MLAN_THREADS) return;
        mlan_walk iw = cw;
        int ik = 0, row = mlan_tile_row(a, iw.w, 0);
        const uint64_t policy = l2_policy_evict_first();
        for (int g = 0;; g++) {
            if (g >= 2) mbar_wait(&empty[g & 1], ((uint32_t)(g >> 1) & 1u) ^ 1u);
            uint8_t *dst = sKV + (g & 1) * MLAN_TILE_BYTES;
            for (int b = 0; b < MLAN_BOXES; b++) {
                mbar_expect_tx(&full[g & 1][b], MLAN_BOX_BYTES);
                if (p.kv_evict_first)
                    tma_load_2d_hint(dst + b * MLAN_BOX_BYTES, &tmap_kv, &full[g & 1][b], b * 64, row, policy);
                else
                    tma_load_2d(dst + b * MLAN_BOX_BYTES, &tmap_kv, &full[g & 1][b], b * 64, row);
            }
            if (++ik == iw.w.ntiles) {
                iw = mlan_walk_next(p, iw);
                ik = 0;
                if (iw.u >= p.units) return;
            }
            row = mlan_tile_row(a, iw.w, ik);
        }
    }

    setmaxnreg_inc<MLAN_COMPUTE_REGS>();
    int qb = 0;  // this unit's Q buffer
    mla_load_q_sw128<MLAN_HEADS, MLAN_THREADS>(a, p.q_aligned, cw.w.t, cw.w.hg * MLAN_HEADS, sQ2);
    int g = 0;   // tiles computed by this CTA: stage g % 2, barrier phase (g / 2) % 2
    for (;;) {
        const mlan_unit &w = cw.w;
        const uint8_t *sQ = sQ2 + qb * MLAN_Q_BYTES;
        if (p.q_aligned) cp_async_wait<0>();
        fence_proxy_async();  // Q (generic-proxy writes) becomes visible to wgmma
        // Q complete; the previous unit done with the other Q buffer and red_sum.
        mlan_compute_sync();

        float o[4][8];  // Oᵀ row block 4 wg + mb: dims 64 (4 wg + mb) + 16 warp + r (+8), heads 8j + 2q (+1)
#pragma unroll
        for (int mb = 0; mb < 4; mb++)
#pragma unroll
            for (int e = 0; e < 8; e++) o[mb][e] = 0.0f;
        // This thread's 4 heads: c = 2j + e is head 8j + 2q + e. Both warpgroups hold the same
        // m and the same sums (the same softmax on the same s), each its own columns of O.
        // l_run is this thread's l_t, its own two positions a tile; mlan_split_sums makes the
        // head's l of them when the split closes.
        float m_run[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l_run[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        // A pair unit: its first split's O, max and sum while the second runs.
        float o_first[4][8], m_first[4], l_first[4];
        mlan_walk nw = cw;
        nw.u = p.units;

        for (int i = 0; i < w.ntiles; i++, g++) {
            const int st = g & 1, p0 = w.start + i * MLAN_TILE;
            if (PAIRS && i > 0 && p0 % p.split_size == 0) {
                // A pair unit's second split: the first's state set aside, the running state anew.
                mlan_split_sums(wg, warp, r, q, l_run, red_sum, l_first);
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    m_first[c] = m_run[c];
                    m_run[c] = -INFINITY;
                    l_run[c] = 0.0f;
                }
#pragma unroll
                for (int mb = 0; mb < 4; mb++)
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        o_first[mb][e] = o[mb][e];
                        o[mb][e] = 0.0f;
                    }
            }
            const uint32_t parity = (uint32_t)(g >> 1) & 1u;
            uint8_t *kv = sKV + st * MLAN_TILE_BYTES;
            if (p0 + MLAN_TILE > w.end) {
                // The token's last tile: rows past `end` zeroed, as 0 * garbage could be NaN in P·V.
                for (int b = 0; b < MLAN_BOXES; b++) mbar_wait(&full[st][b], parity);
                const int valid = w.end - p0, chunks = (MLAN_TILE - valid) * 8;  // 16-byte chunks
                for (int k = tid; k < (MLAN_BOXES - 1) * chunks; k += MLAN_THREADS)
                    *(uint4 *)(kv + (k / chunks) * MLAN_BOX_BYTES + valid * 128 + (k % chunks) * 16) =
                        make_uint4(0u, 0u, 0u, 0u);
                fence_proxy_async();
                mlan_compute_sync();  // every row zeroed before any wgmma reads the tile
            }

            // The descriptors' low words; a step adds its byte offset / 16 (never carries).
            const uint32_t d_kv = (uint32_t)wgmma_desc_sw128(kv), d_q = (uint32_t)wgmma_desc_sw128(sQ);
            const uint32_t d_v = (uint32_t)wgmma_desc_sw128_mn(kv + 4 * wg * MLAN_BOX_BYTES, MLAN_BOX_BYTES);

            // This warpgroup's half of Sᵀ: boxes 0-4 or 5-8, a chain a box.
            constexpr int B0 = 5;  // boxes of warpgroup 0
            float sb[B0][8];
            const mlan_s_boxes s_box{full, st, parity, d_kv, d_q};
            float half[8];
            if (wg == 0) {
#pragma unroll
                for (int b = 0; b < B0; b++) s_box.chain(b, sb[b]);
                wgmma_commit();
                wgmma_wait<0>();
#pragma unroll
                for (int b = 0; b < B0; b++) wgmma_hold(sb[b]);
#pragma unroll
                for (int e = 0; e < 8; e++) half[e] = ((sb[0][e] + sb[1][e]) + (sb[2][e] + sb[3][e])) + sb[4][e];
            } else {
#pragma unroll
                for (int b = 0; b < MLAN_BOXES - B0; b++) s_box.chain(B0 + b, sb[b]);
                wgmma_commit();
                wgmma_wait<0>();
#pragma unroll
                for (int b = 0; b < MLAN_BOXES - B0; b++) wgmma_hold(sb[b]);
#pragma unroll
                for (int e = 0; e < 8; e++) half[e] = (sb[0][e] + sb[1][e]) + (sb[2][e] + sb[3][e]);
            }
            // s = (warpgroup 0's half) + (warpgroup 1's half), the same in both warpgroups.
            s_half[st][wg][wtid][0] = make_float4(half[0], half[1], half[2], half[3]);
            s_half[st][wg][wtid][1] = make_float4(half[4], half[5], half[6], half[7]);
            mlan_compute_sync();
            const float4 o0 = s_half[st][wg ^ 1][wtid][0], o1 = s_half[st][wg ^ 1][wtid][1];
            const float other[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
            float s[8];
#pragma unroll
            for (int e = 0; e < 8; e++) s[e] = wg == 0 ? half[e] + other[e] : other[e] + half[e];

            // Softmax over positions (rows) per head (column).
            const int pa = 16 * warp + r;
            const bool ok0 = p0 + pa < w.end, ok1 = p0 + pa + 8 < w.end;
            float mx[4];
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = c >> 1, e = c & 1;
                s[4 * j + e] = ok0 ? s[4 * j + e] * a.scale : -INFINITY;
                s[4 * j + 2 + e] = ok1 ? s[4 * j + 2 + e] * a.scale : -INFINITY;
                mx[c] = fmaxf(s[4 * j + e], s[4 * j + 2 + e]);
#pragma unroll
                for (int o8 = 4; o8 < 32; o8 <<= 1) mx[c] = fmaxf(mx[c], __shfl_xor_sync(0xffffffffu, mx[c], o8));
            }
            if (r == 0) {
#pragma unroll
                for (int c = 0; c < 4; c++) red_max[wg][warp][8 * (c >> 1) + 2 * q + (c & 1)] = mx[c];
            }
            mlan_wg_sync(wg);
            float alpha[4];
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int h = 8 * (c >> 1) + 2 * q + (c & 1);
                const float tm = fmaxf(fmaxf(red_max[wg][0][h], red_max[wg][1][h]),
                                       fmaxf(red_max[wg][2][h], red_max[wg][3][h]));
                const float m_new = fmaxf(m_run[c], tm);  // finite: the tile's first position is the token's
                alpha[c] = __expf(m_run[c] - m_new);      // exp(-inf) = 0 on the unit's first tile
                m_run[c] = m_new;
            }
            float pv[8];  // p in the layout of s
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = c >> 1, e = c & 1;
                const float p_a = __expf(s[4 * j + e] - m_run[c]), p_b = __expf(s[4 * j + 2 + e] - m_run[c]);
                l_run[c] = l_run[c] * alpha[c] + (p_a + p_b);
                pv[4 * j + e] = p_a;
                pv[4 * j + 2 + e] = p_b;
            }
            // bf16(p) as P[head][position], transposed by stmatrix; rounded on the converter:
            // float_to_bf16's bits but for a NaN p, whose head's outputs are NaN either way.
            stmatrix_x4_trans(p_row, bf16x2_round_no_nan(pv[0], pv[1]), bf16x2_round_no_nan(pv[2], pv[3]),
                              bf16x2_round_no_nan(pv[4], pv[5]), bf16x2_round_no_nan(pv[6], pv[7]));
            fence_proxy_async();  // P becomes visible to wgmma
            mlan_wg_sync(wg);     // ... every thread's part of it

            // This warpgroup's Oᵀ = Oᵀ * alpha + Vᵀ·Pᵀ: latent dims 256 wg .. 256 wg + 255.
#pragma unroll
            for (int mb = 0; mb < 4; mb++)
#pragma unroll
                for (int e = 0; e < 8; e++) o[mb][e] *= alpha[2 * (e >> 2) + (e & 1)];
            if (wg == 1) mbar_wait(&full[st][4], parity);
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int mb = 0; mb < 4; mb++)
                    wgmma_m64n16k16_mk(o[mb], wgmma_desc_sw128_lo(d_v + (mb * MLAN_BOX_BYTES + k * 16 * 128) / 16),
                                       wgmma_desc_sw128_lo(d_p + k * 32 / 16));
            wgmma_commit();
            wgmma_wait<0>();
#pragma unroll
            for (int mb = 0; mb < 4; mb++) wgmma_hold(o[mb]);
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with the stage
            // After the first tile: the next unit, its Q into the other buffer.
            if (i == 0) {
                nw = mlan_walk_next(p, cw);
                if (p.q_aligned && nw.u < p.units)
                    mla_load_q_sw128<MLAN_HEADS, MLAN_THREADS>(a, true, nw.w.t, nw.w.hg * MLAN_HEADS, sQ2 + (qb ^ 1) * MLAN_Q_BYTES);
            }
        }

        float l_last[4];
        mlan_split_sums(wg, warp, r, q, l_run, red_sum, l_last);
        if (w.whole) {
            // The token's splits merged in the merge kernel's steps and order (mla_merge.cuh).
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = c >> 1, e = c & 1, h = w.hg * MLAN_HEADS + 8 * j + 2 * q + e;
                if (h >= a.H) continue;  // a padded head
                float m = -INFINITY, w0 = 0.0f, d = 0.0f;
                const bool two = PAIRS && w.two;
                if (two) m = fmaxf(m, m_first[c]);
                m = fmaxf(m, m_run[c]);
                if (two) w0 = mla_merge_weight(m_first[c], l_first[c], m, d);
                const float w1 = mla_merge_weight(m_run[c], l_last[c], m, d), rd = mla_merge_scale(d);
                uint16_t *dst = a.out + w.t * a.ld_out + (long)h * MLAN_L + 256 * wg + 16 * warp + r;
#pragma unroll
                for (int mb = 0; mb < 4; mb++)
#pragma unroll
                    for (int half8 = 0; half8 < 2; half8++) {
                        const int k = 4 * j + 2 * half8 + e;
                        float v = 0.0f;
                        if (two) v = fmaf(o_first[mb][k], w0, v);
                        v = fmaf(o[mb][k], w1, v);
                        dst[64 * mb + 8 * half8] = (uint16_t)mla_merge_out(v, 0.0f, rd);
                    }
            }
        } else {
            // Partials for the merge kernel (evict_last: mla_merge.cuh); slot: the split or the pair.
            const uint64_t policy = l2_policy_evict_last();
            const int slot = PAIRS ? w.split / 2 : w.split;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = c >> 1, e = c & 1, h = 8 * j + 2 * q + e;
                if (w.hg * MLAN_HEADS + h >= a.H) continue;  // a padded head
                const long row = ((long)w.t * a.H + w.hg * MLAN_HEADS + h) * p.nsplit + slot;
                float *dst = p.o_part + row * MLAN_L + 256 * wg + 16 * warp + r;
                const bool pair = PAIRS && w.two;
                const mla_pair pr = pair ? mla_pair_of(m_first[c], l_first[c], m_run[c], l_last[c]) : mla_pair{};
                // Column k of row block mb: the split's, or the pair's fold of both splits'.
                auto part = [&](int mb, int k) { return pair ? mla_pair_o(o_first[mb][k], o[mb][k], pr) : o[mb][k]; };
#pragma unroll
                for (int mb = 0; mb < 4; mb++) {
                    mla_partial_store1(dst + 64 * mb, part(mb, 4 * j + e), policy);
                    mla_partial_store1(dst + 64 * mb + 8, part(mb, 4 * j + 2 + e), policy);
                }
                if (wg == 0 && warp == 0 && r == 0)
                    p.ml_part[row] = pair ? make_float2(pr.m, pr.d) : make_float2(m_run[c], l_last[c]);
            }
        }
        if (nw.u >= p.units) break;
        cw = nw;
        qb ^= 1;
        if (!p.q_aligned) mla_load_q_sw128<MLAN_HEADS, MLAN_THREADS>(a, false, cw.w.t, cw.w.hg * MLAN_HEADS, sQ2 + qb * MLAN_Q_BYTES);
    }
#else
    (void)p;  // not an sm_90a pass: never launched (mla_wgmma16_supported checks cuda_ctx.wgmma)
    (void)tmap_kv;
#endif
}

bool mla_wgmma16_supported(const cuda_ctx *c, const mla_attention_args *a, int split_size) {
    // + 20 KB: the static shared memory counts against the same limit
    return mla_wgmma_takes(c, a, split_size, MLAN_HEADS, true, (size_t)MLAN_SMEM_BYTES + 20480);
}

// Units of 16 heads a token: fewer heads are one unit, padded.
static int mlan_head_groups(const mla_attention_args *a) { return (a->H + MLAN_HEADS - 1) / MLAN_HEADS; }

// KV tiles evict_first when the batch streams more cache than L2 holds and the partials fit in
// a quarter of it, so they are still there for the merge. A cache hint: no bit depends on it.
// parts: the partials a token of the grid's longest length stores (0: none).
static bool mlan_kv_evict_first(const cuda_ctx *c, const mla_attention_args *a, int parts) {
    const double seqs = a->T < a->num_seqs ? a->T : a->num_seqs;
    const double kv_bytes = seqs * a->max_seq_len * (a->L + a->R) * 2.0;
    const double partial_bytes = (double)a->T * a->H * parts * (a->L * 4.0 + 8.0);
    return kv_bytes > (double)c->l2_bytes && partial_bytes > 0.0 && partial_bytes <= 0.25 * (double)c->l2_bytes;
}

// Split pairs as units once split units outnumber the SMs (half the partials). Not for an odd
// count past 2: CTAs gridDim.x apart would meet the same pair index in every token, unbalanced.
// A schedule choice: the bits are the same either way.
bool mla_wgmma16_pairs(const cuda_ctx *c, const mla_attention_args *a, int nsplit) {
    return (long)a->T * nsplit * mlan_head_groups(a) > c->num_sms && (nsplit <= 2 || nsplit % 2 == 0);
}

int mla_wgmma16_split_launch(cuda_ctx *c, const mla_attention_args *a, int split_size, int nsplit, float *o_part,
                             float2 *ml_part, bool *pairs_stored) {
    mlan_params p;
    p.a = *a;
    p.split_size = split_size;
    p.nsplit = nsplit;
    p.head_groups = mlan_head_groups(a);
    p.pairs = mla_wgmma16_pairs(c, a, nsplit);
    p.token_units = p.pairs ? (nsplit + 1) / 2 : nsplit;
    p.units = (long)a->T * p.token_units * p.head_groups;
    const int parts = p.pairs && nsplit <= 2 ? 0 : p.token_units;
    p.kv_evict_first = mlan_kv_evict_first(c, a, parts);
    p.q_aligned = mla_q_aligned(a);
    p.o_part = o_part;
    p.ml_part = ml_part;

    // The cache streams through (each tile read once): no L2 promotion.
    const CUtensorMap tmap = mla_kv_cache_map(c, a, MLAN_TILE, true);
    auto kernel = p.pairs ? mla_wgmma16_split_kernel<true> : mla_wgmma16_split_kernel<false>;
    cuda_kernel_smem(c, (const void *)kernel, MLAN_SMEM_BYTES, "mla_attention");
    // Persistent, one CTA per SM: which CTA computes a unit never changes its bits.
    const long grid = p.units < c->num_sms ? p.units : c->num_sms;
    kernel<<<(unsigned)grid, MLAN_BLOCK_THREADS, MLAN_SMEM_BYTES, c->stream>>>(p, tmap);
    CUDA_CHECK_LAUNCH("mla_attention (wgmma16)");
    *pairs_stored = p.pairs;
    return p.pairs ? 2 : 1;
}
