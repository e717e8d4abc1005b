// kernels/cuda/mla_absorbed_h16_sm90.cu — absorbed MLA attention on sm_90a for 16 heads a work
// unit (DeepSeek-V2-Lite's 16 heads; V3's 128 split over 8 GPUs): the decode shape that is
// bound by memory, not by tensor cores.
//
// Taken by mla_attention_launch for one shape only (mla_wgmma16_supported): H a multiple of 16
// that the 64-head kernel (mla_absorbed_h64_sm90.cu) does not take, L = 512, R = 64, cache blocks
// and KV splits multiples of 64 positions, on an sm_90a device with TMA. Nothing about the batch
// enters the choice, so such a row always comes here and never to mla_attention.cu's mma.sync
// kernel; the kernels' bits differ, by design, never one row's bits between two batches.
//
// The wgmma M is 64, four times the heads. Rather than pad 16 heads to 64 (4x the tensor work,
// which this shape can afford less than the 128-head one), the positions are the M:
//   Sᵀ (64 positions x 16 heads) = K (64 x 576, the KV tile, K-major) · Qᵀ (Q 16 x 576, K-major)
//   Oᵀ (512 dims x 16 heads)    += Vᵀ (512 x 64, the same tile read MN-major) · Pᵀ (P 16 x 64)
// with m64n16k16. Two warpgroups share each tile: warpgroup 0 takes Sᵀ over boxes 0-4 (dims
// 0-319), warpgroup 1 over boxes 5-8; they swap halves through shared memory, both run the same
// softmax on the same s (so both hold the same m and l), and each takes half of Oᵀ (latent dims
// 256 wg ..: 4 row blocks x 4 steps, 32 registers a thread). One warpgroup alone spent ~5000
// cycles a tile issuing one dependent instruction after another (H200, ncu: 1 warp per
// scheduler, 0.24 eligible); two halve each one's chain and give each scheduler a second warp.
//
// Work unit: 16 heads (a head group) of one query token x one KV split of mla_attention.cu (a
// fixed size from absolute position 0), into its partials (o_part, ml_part) for its merge, or
// a split pair (below). The reduction order of one (token, head) row:
//   for each 64-position tile of the split, ascending (tiles aligned to position 0):
//     s_b = 4 k16 steps ascending over dims 64b .. 64b + 63, one fp32 chain from 0, b = 0..8
//           (box 8: the rope dims); s = (((s0 + s1) + (s2 + s3)) + s4) + ((s5 + s6) + (s7 + s8));
//           s = s * scale, positions past the token's own -inf
//     tm  = max of the tile's 64 s (exact in any order)
//     m'  = max(m, tm); alpha = exp(m - m'); p = exp(s - m') (fp32)
//     l_t = l_t * alpha + (p at 16w + r + p at 16w + r + 8), for each thread t of warp w that
//           holds the head (lane 4r + q, r = 0..7; warp w holds positions 16w .. 16w + 15)
//     O   = O * alpha, then O += bf16(p) · V over 4 k16 steps ascending (positions 16k ..)
//   l_w = warp w's 8 l_t summed over lanes xor 4, 8, 16; l = ((l_0 + l_1) + l_2) + l_3
// None of it depends on T, on other tokens or on max_seq_len: those size the grid, the scratch
// and which CTA runs a unit, never a unit's arithmetic.
//
// Split pairs. The splits of a token are merged in a fixed tree (mla_merge.cuh): split pairs
// (2k, 2k + 1) first, then the pairs. When the batch's split units outnumber the SMs and its
// split count is even or at most 2 (mla_wgmma16_pairs), a unit is a split pair instead (pairs:
// split 2k set aside in registers while split 2k + 1 runs): it folds the pair itself into one
// partial, so half the partials are written and read and a CTA meets half the unit boundaries
// (H200, dev timer: B=32 L=4k 47.6 -> 45.9 us, one round of 128 pair units where 256 split
// units took two; B=32 L=16k 168.3 -> 158.7). A unit that holds all of its token's splits (one
// split always; two in a pair unit) merges them and writes the output instead of partials;
// where every token has at most two splits, no merge kernel is launched (B=128, 1k context:
// 59 -> 49 us). Whether the merge kernel or this one folds a pair or a token follows the
// batch; its bits do not, since the operations are the same.
//
// Data movement. A CTA is persistent: it walks units blockIdx.x, + gridDim.x, ... (skipping
// splits past their token's position) as one stream of 64-position tiles, two TMA stages of
// 72 KB (9 boxes of 64 dims x 64 cache rows, 128-byte swizzle; a tile is 64 consecutive rows of
// one block) kept full across unit boundaries. A third warpgroup is the producer: one of its
// threads issues tile g as soon as the 8 computing warps have released tile g - 2's stage
// (an `empty` barrier each warp arrives at after its last wgmma on the tile), so while tile g
// is computed, tile g + 1 is on its way. When thread 0 issued tile g + 1 itself at tile g's Sᵀ
// swap, the stage sat idle from tile g - 1's end until tile g had landed: H200, B=128 L=16k
// 724 -> 648 us (79 -> 88% of copy), B=32 L=4k 56.9 -> 52.6, B=1 L=16k 28.4 -> 26.4. Q (16
// heads x 576, 18 KB) is double-buffered: the next unit's Q is copied (cp.async) while this
// unit's tiles run. Shared memory: 2 x 72 KB + 2 x 18 KB + 2 x P 2 KB (+ 1 KB alignment) =
// 185 KB dynamic, 17 KB static (the Sᵀ halves, double-buffered), one CTA of 384 threads per SM.
#include <cuda.h>           // CUtensorMap
#include <cuda_runtime.h>   // dim3, float2
#include <math.h>           // INFINITY
#include <stdint.h>         // uint8_t, uint16_t, uint32_t, uint64_t

#include "bf16x2.cuh"       // bf16x2_round_no_nan
#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK, CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"   // mla_wgmma16_supported, mla_wgmma16_split_launch, mla_kv_cache_map
#include "l2_policy.cuh"    // l2_policy_evict_first, l2_policy_evict_last
#include "mla_merge.cuh"    // mla_token_splits, mla_merge_weight, mla_merge_scale, mla_merge_out, mla_partial_store1
#include "mma.cuh"          // cp_async16, cp_async_commit, cp_async_wait
#include "pdl.cuh"          // pdl_release_dependent
#include "wgmma.cuh"        // wgmma_*, sw128_offset, stmatrix_x4_trans, mbar_*, tma_load_2d(_hint), setmaxnreg_*

#define MLAN_HEADS 16                                  // heads per unit: the wgmma N
#define MLAN_TILE 64                                   // positions per KV tile: the wgmma M of Sᵀ
#define MLAN_L 512
#define MLAN_R 64
static_assert(MLAN_L == 512 && MLAN_R == 64 && MLAN_TILE == 64, "the shape mla_wgmma_takes checks");
#define MLAN_D (MLAN_L + MLAN_R)
#define MLAN_BOXES (MLAN_D / 64)                       // 64-dim boxes (128 bytes a row) per row
#define MLAN_BOX_BYTES (MLAN_TILE * 128)               // one KV box: 64 rows x 128 bytes
#define MLAN_TILE_BYTES (MLAN_BOXES * MLAN_BOX_BYTES)  // 72 KB
#define MLAN_QBOX_BYTES (MLAN_HEADS * 128)             // one Q box: 16 heads x 64 dims
#define MLAN_Q_BYTES (MLAN_BOXES * MLAN_QBOX_BYTES)    // 18 KB
#define MLAN_THREADS 256                               // the two computing warpgroups
#define MLAN_BLOCK_THREADS (MLAN_THREADS + 128)        // + the producer warpgroup
// Registers a thread: the launch gives each of the 384 threads 168 (1 CTA per SM); the producer
// gives back all but 88, so each computing thread may hold 208 (128 x 88 + 256 x 208 = 384 x
// 168). At 216-232 ptxas spilled a value of the whole-token walk; at 24 the producer's walk
// spilled. A launch at fewer than 168 would leave setmaxnreg.inc waiting forever:
// tests/ptxas_budgets.sh checks the count and that nothing spills.
#define MLAN_PRODUCER_REGS 88
#define MLAN_COMPUTE_REGS 208
static_assert(128 * MLAN_PRODUCER_REGS + MLAN_THREADS * MLAN_COMPUTE_REGS == MLAN_BLOCK_THREADS * 168,
              "the budgets fill the launch's 168 registers a thread");
// Dynamic shared memory, every part on a 1024-byte boundary (swizzle atoms): two KV stages,
// two Q buffers, P, alignment slack.
#define MLAN_Q_OFFSET (2 * MLAN_TILE_BYTES)
#define MLAN_P_OFFSET (MLAN_Q_OFFSET + 2 * MLAN_Q_BYTES)
#define MLAN_SMEM_BYTES (MLAN_P_OFFSET + 2 * MLAN_HEADS * 128 + 1024)

struct mlan_params {
    mla_attention_args a;
    int split_size, nsplit;  // nsplit: the grid's split count (scratch layout only)
    int head_groups;         // H / 16
    int token_units;         // units a token: nsplit, or pairs: its split pairs
    long units;              // T x token_units x head_groups, head group fastest
    bool pairs;              // a unit is a split pair (2k, 2k + 1), folded here
    bool kv_evict_first;     // KV tiles loaded with L2's evict_first policy (mlan_kv_evict_first)
    bool q_aligned;          // q rows in 16-byte pieces (cp.async) or value by value
    float *o_part;           // [T][H][nsplit][L] unnormalized outputs
    float2 *ml_part;         // [T][H][nsplit] (running max, running sum)
};

// One unit's token, first split, head group and positions [start, end); n: the token's split
// count; two: the unit holds splits split and split + 1 (a pair unit); whole: it holds all n of
// them (a token of one split, or of two in a pair unit), so this kernel merges them and writes
// the output, not partials.
struct mlan_unit {
    int t, split, hg, seq, start, end, ntiles, n;
    bool two, whole;
};

// A CTA's walk over its units: the current one and, read ahead, the token position and
// sequence of unit u + gridDim.x (the next one unless that split is past its token's
// position), so that moving on does not wait for a global load.
struct mlan_walk {
    long u;  // p.units: no unit left
    mlan_unit w;
    int ahead_pos, ahead_seq;
};

#if INVAR_WGMMA
// Unit u given its token's position and sequence; false when the split lies past the position.
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

// The cache row (slot) of tile i of unit w: the tile is the 64 rows from there, one block's.
__device__ __forceinline__ int mlan_tile_row(const mla_attention_args &a, const mlan_unit &w, int i) {
    const int p0 = w.start + i * MLAN_TILE;
    return (int)((long)a.block_table[(long)w.seq * a.max_blocks_per_seq + p0 / a.block_size] * a.block_size +
                 p0 % a.block_size);
}

// Barrier 3 among the two computing warpgroups (the producer has left block-wide barriers).
__device__ __forceinline__ void mlan_compute_sync() { asm volatile("bar.sync 3, %0;\n" ::"n"(MLAN_THREADS) : "memory"); }

// A split's sum per head for this thread's 4 heads: each warp's l_w from its threads' l_t
// (lanes xor 4, 8, 16), then l = ((l_0 + l_1) + l_2) + l_3 over the warps (warpgroup 0's copy;
// both hold the same). Summed once a split rather than once a tile: shuffles and adds a
// tile fewer (12 of each). red_sum is written again only a tile or more later, past the tile's
// mlan_compute_sync.
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

// Sᵀ = K(64x16, K-major) · Q(16x16, K-major)ᵀ (FIRST: the chain's first step, scale-d = 0, d
// not read) or Sᵀ += ...: 64 positions x 16 heads.
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
// Oᵀ += V(16x64 dims, MN-major: the KV tile's rows)ᵀ · P(16 heads x 16 positions, K-major)ᵀ.
__device__ __forceinline__ void wgmma_m64n16k16_mk(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(MLAN_M64N16K16("1") : WGMMA_ACC4(d, 0), WGMMA_ACC4(d, 4) : "l"(desc_a), "l"(desc_b), "r"(1));
}

// A tile's Sᵀ half, box by box: the stage's barriers, the stage, its phase, the low words of the
// tile's and Q's descriptors.
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

// Barrier 1 + wg among warpgroup wg's 128 threads only (0 is __syncthreads, 3 both computing
// warpgroups: mlan_compute_sync).
__device__ __forceinline__ void mlan_wg_sync(int wg) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}

// PAIRS = p.pairs (a template argument so that the walk over splits does not hold registers
// for a second split it never has).
template <bool PAIRS>
__global__ void __launch_bounds__(MLAN_BLOCK_THREADS, 1)
mla_wgmma16_split_kernel(mlan_params p, const __grid_constant__ CUtensorMap tmap_kv) {
#if INVAR_WGMMA
    pdl_release_dependent();  // the merge may start up now; it waits for this grid's end
    const mla_attention_args &a = p.a;
    mlan_walk cw = mlan_walk_from(p, blockIdx.x);  // the units this CTA computes
    if (cw.u >= p.units) return;
    const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
    const int r = lane >> 2, q = lane & 3;

    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms
    uint8_t *const sKV = smem, *const sQ2 = smem + MLAN_Q_OFFSET;
    uint8_t *const sP = smem + MLAN_P_OFFSET + wg * MLAN_HEADS * 128;  // this warpgroup's P
    const uint32_t d_p = (uint32_t)wgmma_desc_sw128(sP);                 // its descriptor's low word
    // This lane's row of the warp's P blocks (stmatrix_x4_trans): block lane / 8 = 2j + k
    // holds heads 8j .. 8j + 7 at positions 16 warp + 8k .. + 7; the lane's row is head
    // 8j + lane % 8.
    uint8_t *const p_row = sP + sw128_offset(8 * (lane >> 4) + (lane & 7), 2 * warp + ((lane >> 3) & 1));
    __shared__ __align__(8) uint64_t full[2][MLAN_BOXES];  // box b of stage s has landed
    __shared__ float4 s_half[2][2][MLAN_THREADS / 2][2];   // [tile parity][warpgroup][thread]: its Sᵀ half
    __shared__ float red_max[2][4][MLAN_HEADS];            // a tile's max per warpgroup, warp and head
    __shared__ float red_sum[4][MLAN_HEADS];               // a split's l_w per warp and head
    __shared__ __align__(8) uint64_t empty[2];             // stage s read by the 8 computing warps

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
        // The producer: tile g of the CTA's stream into stage g % 2, 9 boxes, each on its own
        // barrier, as soon as the computing warps are done with tile g - 2 there. Its cursor
        // runs up to two tiles ahead of the computation, across units; the block-table entry of
        // the next tile is read while it waits.
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
        // Q complete for every thread, and the previous unit done with the other Q buffer and
        // with red_sum.
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
                // A pair unit's second split starts: the first is done, its state set aside and
                // the running state started afresh, as for a unit.
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
                // The token's last tile: rows at or past `end` hold other positions (or garbage);
                // p is 0 there, and zeros keep 0 * garbage from making NaN in P·V.
                for (int b = 0; b < MLAN_BOXES; b++) mbar_wait(&full[st][b], parity);
                const int valid = w.end - p0, chunks = (MLAN_TILE - valid) * 8;  // 16-byte chunks a box
                for (int k = tid; k < (MLAN_BOXES - 1) * chunks; k += MLAN_THREADS)
                    *(uint4 *)(kv + (k / chunks) * MLAN_BOX_BYTES + valid * 128 + (k % chunks) * 16) =
                        make_uint4(0u, 0u, 0u, 0u);
                fence_proxy_async();
                mlan_compute_sync();  // every row zeroed before any wgmma reads the tile
            }

            // The low words of this tile's descriptors (wgmma_desc_sw128_lo): each step adds its
            // byte offset / 16 (the address field never carries: shared memory ends below 256 KB).
            const uint32_t d_kv = (uint32_t)wgmma_desc_sw128(kv), d_q = (uint32_t)wgmma_desc_sw128(sQ);
            const uint32_t d_v = (uint32_t)wgmma_desc_sw128_mn(kv + 4 * wg * MLAN_BOX_BYTES, MLAN_BOX_BYTES);

            // This warpgroup's half of Sᵀ = K·Qᵀ: boxes 0-4 (warpgroup 0) or 5-8 (1), a chain per
            // box (4 k16 steps ascending from 0), each box waited for just before its steps.
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

            // Softmax over positions (rows) per head (column). This thread: positions
            // pa = 16 warp + r (s[4j], s[4j+1]) and pa + 8 (s[4j+2], s[4j+3]), heads 8j + 2q (+1).
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
            // bf16(p) as P[head][position], K-major for P·V: the four 8 x 8 blocks of this warp's
            // 16 positions x 16 heads, transposed on the way (a block's row is a head's 8
            // positions, one 16-byte chunk). Rounded on the converter: float_to_bf16's bits but
            // for a NaN p (from a NaN or an infinity in q or k), whose head's outputs are NaN
            // either way.
            stmatrix_x4_trans(p_row, bf16x2_round_no_nan(pv[0], pv[1]), bf16x2_round_no_nan(pv[2], pv[3]),
                              bf16x2_round_no_nan(pv[4], pv[5]), bf16x2_round_no_nan(pv[6], pv[7]));
            fence_proxy_async();  // P becomes visible to wgmma
            mlan_wg_sync(wg);     // ... every thread's part of it

            // This warpgroup's Oᵀ = Oᵀ * alpha + Vᵀ·Pᵀ: row blocks 4 wg .. 4 wg + 3 (latent dims
            // 256 wg .., boxes 4 wg ..), each box's copy seen by this warpgroup.
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
            // After the first tile (the read-ahead has landed by now): the next unit, and its Q
            // into the other buffer while this unit's remaining tiles run.
            if (i == 0) {
                nw = mlan_walk_next(p, cw);
                if (p.q_aligned && nw.u < p.units)
                    mla_load_q_sw128<MLAN_HEADS, MLAN_THREADS>(a, true, nw.w.t, nw.w.hg * MLAN_HEADS, sQ2 + (qb ^ 1) * MLAN_Q_BYTES);
            }
        }

        float l_last[4];
        mlan_split_sums(wg, warp, r, q, l_run, red_sum, l_last);
        if (w.whole) {
            // The token's n splits merged as mla_merge_kernel merges them (mla_merge.cuh: the
            // same operations in the same order, so the same bits as a batch in which that
            // kernel merges): m = max of the splits' maxima, then each split's step ascending.
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = c >> 1, e = c & 1, h = w.hg * MLAN_HEADS + 8 * j + 2 * q + e;
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
            // Partials: Oᵀ as o_part[t][h][slot][dim], (m, l) per head, for the merge kernel, to
            // wait in L2 until it reads them (mla_merge.cuh). The slot is the split, or in a pair
            // unit the pair, folded here (its last split alone, as it is, where n is odd).
            const uint64_t policy = l2_policy_evict_last();
            const int slot = PAIRS ? w.split / 2 : w.split;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = c >> 1, e = c & 1, h = 8 * j + 2 * q + e;
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
    // + 20 KB: the kernel's static shared memory (barriers, the Sᵀ halves, reductions: 17 KB)
    // counts against the same limit
    return mla_wgmma_takes(c, a, split_size, MLAN_HEADS, (size_t)MLAN_SMEM_BYTES + 20480);
}

// Whether the KV tiles should leave L2 first: when the batch streams more cache than L2 holds
// (each 16-head tile is read once) and the partials the merge kernel reads back fit in a
// quarter of it, so that they are still there when it runs. The KV estimate takes the
// sequences once (a prefill chunk's tokens share theirs). A cache hint, not a schedule: no bit
// depends on it. H200, dev timer, us: B=32 L=4k 52.9 -> 49.0 (8 MB of partials); with 34 MB of
// partials 0.5-1% slower (B=32 L=16k) or equal (B=128 L=4k), and slower where the cache stays
// in L2 (B=1 L=16k 26.8 -> 27.6), which the rule leaves alone.
// parts: the partials a token of the grid's longest length stores (0: none).
static bool mlan_kv_evict_first(const cuda_ctx *c, const mla_attention_args *a, int parts) {
    const double seqs = a->T < a->num_seqs ? a->T : a->num_seqs;
    const double kv_bytes = seqs * a->max_seq_len * (a->L + a->R) * 2.0;
    const double partial_bytes = (double)a->T * a->H * parts * (a->L * 4.0 + 8.0);
    return kv_bytes > (double)c->l2_bytes && partial_bytes > 0.0 && partial_bytes <= 0.25 * (double)c->l2_bytes;
}

// Split pairs as units once the split units outnumber the SMs, and half the partials are
// written and merged; where every token has at most two splits, none (whole tokens). A grid of
// tokens of nsplit splits then leaves the busiest CTA at most one split more than split units
// would (none more up to twice the SMs). Not for an odd split count past 2: a CTA walks units
// gridDim.x apart, so where the units a token divide gridDim.x (nsplit 3, 5, 7 on 132 SMs) a
// CTA meets the same pair index in every token, and half the CTAs would walk only pairs while
// the others walk the lone last splits (B=80, nsplit 3: 4 splits for the busiest against 2).
// A schedule choice: a token's bits are the same either way (the kernel folds a pair as the
// merge kernel does).
bool mla_wgmma16_pairs(const cuda_ctx *c, const mla_attention_args *a, int nsplit) {
    return (long)a->T * nsplit * (a->H / MLAN_HEADS) > c->num_sms && (nsplit <= 2 || nsplit % 2 == 0);
}

int mla_wgmma16_split_launch(cuda_ctx *c, const mla_attention_args *a, int split_size, int nsplit, float *o_part,
                             float2 *ml_part, bool *pairs_stored) {
    mlan_params p;
    p.a = *a;
    p.split_size = split_size;
    p.nsplit = nsplit;
    p.head_groups = a->H / MLAN_HEADS;
    p.pairs = mla_wgmma16_pairs(c, a, nsplit);
    p.token_units = p.pairs ? (nsplit + 1) / 2 : nsplit;
    p.units = (long)a->T * p.token_units * p.head_groups;
    const int parts = p.pairs && nsplit <= 2 ? 0 : p.token_units;
    p.kv_evict_first = mlan_kv_evict_first(c, a, parts);
    p.q_aligned = mla_q_aligned(a);
    p.o_part = o_part;
    p.ml_part = ml_part;

    // The cache streams through (a decode token's head group reads each tile once): no L2
    // promotion (H200, dev timer, medians of three, us: B=32 L=4k 49.3 -> 48.7, B=128 L=1k
    // 45.7 -> 44.3, B=32 L=16k 173.6 -> 171.2, B=1 L=16k 24.3 -> 24.5).
    const CUtensorMap tmap = mla_kv_cache_map(c, a, MLAN_TILE, true);
    auto kernel = p.pairs ? mla_wgmma16_split_kernel<true> : mla_wgmma16_split_kernel<false>;
    cuda_kernel_smem(c, (const void *)kernel, MLAN_SMEM_BYTES, "mla_attention");
    // Persistent: one CTA per SM at most (the shared memory allows no second), each walking
    // units blockIdx.x, + gridDim.x, ...: which CTA computes a unit never changes its bits.
    const long grid = p.units < c->num_sms ? p.units : c->num_sms;
    kernel<<<(unsigned)grid, MLAN_BLOCK_THREADS, MLAN_SMEM_BYTES, c->stream>>>(p, tmap);
    CUDA_CHECK_LAUNCH("mla_attention (wgmma16)");
    *pairs_stored = p.pairs;
    return p.pairs ? 2 : 1;
}
