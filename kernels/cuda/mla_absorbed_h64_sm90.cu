// kernels/cuda/mla_absorbed_h64_sm90.cu — absorbed MLA attention for many heads on Hopper
// (sm_90a): warpgroup MMA over 64 heads of one query token at a time.
//
// Taken by mla_attention_launch for one shape only (mla_wgmma_supported): H a multiple of 64,
// L = 512, R = 64, cache blocks and KV splits multiples of 64 positions, on an sm_90a device
// with TMA. Nothing about the batch enters that choice, so a row of such a shape always comes
// here (H = 128, DeepSeek-V3, on an H200) and never to mla_attention.cu's 16-head kernel; the
// two kernels' bits differ, by design, never one row's bits between two batches.
//
// Work unit (one CTA, 2 warpgroups): 64 heads of one query token x one KV split. The splits are
// mla_attention.cu's: a fixed size from absolute position 0, partials o_part / ml_part in its
// format, merged by its mla_merge_kernel; or, where the grid has at most two splits and its
// units fill half the SMs, merged here by the token's CTAs (a cluster of two at two splits,
// swapping halves through distributed shared memory) in the merge kernel's operations and order
// (mla_merge.cuh). The reduction order of one (token, head) row:
//   for each 64-position tile of the split, ascending (tiles aligned to position 0):
//     s   = 36 k16 steps ascending of wgmma m64n64k16 over the L + R dims (latent then rope),
//           one fp32 chain from 0; s = s * scale, positions past the token's own masked to -inf
//     tm  = max of the row's 64 s (max is exact: any order gives the same bits)
//     m'  = max(m, tm);  alpha = exp(m - m');  p = exp(s - m')  (fp32)
//     l   = l * alpha + sum(p): each thread's 16 p of the row in column order, then lanes
//           xor 1, xor 2 (a fixed tree)
//     O   = O * alpha, then O += bf16(p) · V over 4 k16 steps ascending (wgmma m64n256k16,
//           positions 16k .. 16k+15 in step k), one chain per output column
// None of it depends on T, on other tokens or on max_seq_len: those only size the grid and
// the scratch. Which warpgroup computes a column (warpgroup 0: columns 0-255; warpgroup 1:
// 256-511) is fixed per column, which one computes a tile's S fixed by the tile's parity, and
// the hardware reduces an element from its own row of A, column of B and accumulator only.
// Whether a column's P·V of a tile reads P from registers or from shared memory (the same bf16
// values) is fixed by the tile's parity too.
//
// Data movement. The KV tile (64 positions x 576 dims, 72 KB) is 64 consecutive cache rows of
// one block (block_size and the split size are multiples of 64), loaded by TMA as 9 boxes of
// 64 dims x 64 rows in the 128-byte swizzle layout. The same bytes serve as the K-major B
// operand of Q·Kᵀ (N = positions, K = dims) and the MN-major ("transposed") B operand of P·V
// (K = positions, N = latent dims): the latent K tile doubles as V, as in FlashMLA. Q (64 heads
// x 576 dims) is loaded once per CTA into the same layout, by TMA as 9 boxes on their own
// barriers, box b issued just before tile 0's box b: a warpgroup's first Q·Kᵀ waits for Q's
// box b where it waits for the tile's, so the first products start once the first boxes land
// (Q rows not in 16-byte pieces: copied value by value, all of it before the first tile).
// Tile 1 follows at once, or, where the CTAs merge, once the last boxes of Q and of tile 0
// have landed. Shared memory: Q 72 KB + 2 KV stages 144 KB + P 8 KB (+ 1 KB
// alignment slack) = 225 KB, one CTA per SM.
//
// Schedule: a seesaw (FlashMLA's idea, our order). Tile i of a split is owned by warpgroup
// i % 2 (counted from the split's start: a function of the position and the split size, never
// of the batch): it computes S_i = Q·Kᵀ and the softmax, from the (m, l) the other warpgroup
// left after tile i - 1, and publishes P_i, alpha_i and (m, l)_i in shared memory (p_full). Each
// warpgroup adds every tile's P·V to its own 256 output columns in tile order: its own tiles
// with P in registers, the other's with P from shared memory. Per iteration a warpgroup
// issues P_{i-1}·V (the other's tile), then Q·Kᵀ of its tile i behind it, and does the
// softmax once S_i lands; so one warpgroup's Q·Kᵀ runs beside the other's P·V of tile i - 1.
// In a small grid the two issues swap (QK_EARLY): Q·Kᵀ of tile i goes out before the wait for
// P_{i-1}, beside the other's softmax (mla_wgmma_qk_early; the same operations).
// Stage i % 2, every box on its own TMA barrier; boxes 0..3 are refilled (tile i + 2) by
// warpgroup 0 after its P·V of tile i, boxes 4..8 by warpgroup 1 after its own; the last tile's
// owner first zeroes its rows past the token's end, so 0 * garbage cannot make a NaN in P·V.
// The arithmetic of a row is the list above, step for step, whichever warpgroup does a step.
#include <cuda.h>           // CUtensorMap
#include <cuda_runtime.h>   // dim3, float2
#include <math.h>           // INFINITY
#include <stdint.h>         // uint8_t, uint16_t, uint32_t, uint64_t

#include "bf16x2.cuh"       // bf16x2_nan_track, bf16x2_any_nan
#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK, CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"   // mla_wgmma_supported, mla_wgmma_split_launch, mla_kv_cache_map
#include "l2_policy.cuh"    // l2_policy_evict_last
#include "mla_merge.cuh"    // mla_token_splits, mla_merge_*, mla_partial_store2
#include "mma.cuh"          // smem_addr
#include "pdl.cuh"          // pdl_release_dependent
#include "tma_map.cuh"      // tma_map_bf16_3d
#include "wgmma.cuh"        // wgmma_fence/commit/wait/hold, wgmma_desc_sw128, mbar_*, tma_load_2d/3d

#define MLAW_HEADS 64                                  // heads per CTA: the wgmma M
#define MLAW_TILE 64                                   // positions per KV tile
#define MLAW_L 512
#define MLAW_R 64
static_assert(MLAW_L == 512 && MLAW_R == 64 && MLAW_TILE == 64, "the shape mla_wgmma_takes checks");
#define MLAW_D (MLAW_L + MLAW_R)
#define MLAW_BOXES (MLAW_D / 64)                       // 64-dim boxes (128 bytes a row) per row
#define MLAW_BOX_BYTES (MLAW_TILE * 128)               // one box: 64 rows x 128 bytes
#define MLAW_TILE_BYTES (MLAW_BOXES * MLAW_BOX_BYTES)  // 72 KB, Q's size too
#define MLAW_THREADS 256                               // 2 warpgroups
// Dynamic shared memory: Q, two KV stages, P (64 heads x 64 positions bf16), alignment slack.
#define MLAW_P_OFFSET (3 * MLAW_TILE_BYTES)
#define MLAW_SMEM_BYTES (MLAW_P_OFFSET + MLAW_HEADS * 128 + 1024)

// A token's two CTAs swap the halves the other one merges through the KV stages (the other
// split's 64 rows x 256 columns, [e4 % 16][thread] as float4: 64 KB) and the (max, sum) of
// every row at 128 KB.
#define MLAW_PEER_ML_OFFSET (128 * 1024)
static_assert(MLAW_PEER_ML_OFFSET + MLAW_HEADS * 8 <= 2 * MLAW_TILE_BYTES, "the swap fits the KV stages");
// The merged rows staged in Q's buffer as bf16 pairs, a row 260 words apart: the 8 rows a warp
// writes at once then start 4 banks apart (256 would put them on the same 4 banks).
#define MLAW_STAGE_ROW_WORDS (MLAW_L / 2 + 4)
static_assert(MLAW_HEADS * MLAW_STAGE_ROW_WORDS * 4 <= MLAW_TILE_BYTES, "the staged rows fit Q's buffer");

// The CTAs' merge, a case a code path: of two splits or one, and the merging CTA's split.
template <bool TWO, int SPLIT>
struct mlaw_merge_case {
    static constexpr bool two = TWO;
    static constexpr int split = SPLIT;
    // Whether this CTA merges float4 e4 of its threads' 32.
    static __device__ __forceinline__ bool keeps(int e4) { return !TWO || (e4 >> 4) == SPLIT; }
};

// Shared memory by its 32-bit address: the kernel's buffers come from an aligned generic
// pointer, which the compiler would otherwise access as generic memory.
__device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 lds_u32x4(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
__device__ __forceinline__ float4 lds_f32x4(uint32_t addr) {
    const uint4 v = lds_u32x4(addr);
    return make_float4(__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z), __uint_as_float(v.w));
}

// The CTAs' merge's rounding: on the converter alone first, or with the NaN fix-ups.
template <bool B>
struct mlaw_flag {
    static constexpr bool value = B;
};

struct mlaw_params {
    mla_attention_args a;
    int split_size, nsplit;  // nsplit: the grid's split count (scratch layout only)
    bool merge_here;         // every token merged by its CTAs (a cluster of two at 2 splits): nsplit <= 2,
                             // units for half the SMs, out in 16-byte pieces (mla_wgmma_split_launch)
    bool q_tma;              // Q by TMA (rows in 16-byte pieces, mla_q_aligned) or value by value
    float *o_part;           // [T][H][nsplit][L] unnormalized outputs
    float2 *ml_part;         // [T][H][nsplit] (running max, running sum)
};

#if INVAR_WGMMA
#define MLAW_REGS32                                                            \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                  \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define MLAW_REGS128                                                           \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                  \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"         \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"         \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"         \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"         \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"         \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
    "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"

// S = Q(64x16, K-major) · K(64x16, K-major)ᵀ (FIRST: the chain's first step, scale-d = 0, S
// not read) or S += ...: 64 heads x 64 positions. The first step starting the chain from 0
// itself spares 32 register moves per tile and keeps plain instructions off the accumulators
// between wgmma fences (ptxas serializes wgmma when it sees them there: C7515).
// %34: scale-d (0: d = A·B, 1: d += A·B); the two calls differ only in whether d is read.
#define MLAW_M64N64K16_SS WGMMA_SS_BF16(64, MLAW_REGS32, 32, 33, 34)
template <bool FIRST>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    if (FIRST)
        asm volatile(MLAW_M64N64K16_SS : WGMMA_OUT32(d, 0) : "l"(desc_a), "l"(desc_b), "r"(0));
    else
        asm volatile(MLAW_M64N64K16_SS : WGMMA_ACC32(d, 0) : "l"(desc_a), "l"(desc_b), "r"(1));
}

// O += P(64x16, registers) · V(16x256, MN-major): a warpgroup's half of the output columns,
// for the tiles it owns.
// The A fragment is the m16n8k16 one per warp (mma.cuh), warp w holding rows 16w..16w+15.
__device__ __forceinline__ void wgmma_m64n256k16_rs_mn(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " MLAW_REGS128
        ", {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n"
        "}\n"
        : WGMMA_ACC32(d, 0), WGMMA_ACC32(d, 32), WGMMA_ACC32(d, 64), WGMMA_ACC32(d, 96)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// O += P(64x16, K-major in shared memory) · V(16x256, MN-major): the same, for the other
// warpgroup's tiles.
__device__ __forceinline__ void wgmma_m64n256k16_ss_mn(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " MLAW_REGS128 ", %128, %129, p, 1, 1, 0, 1;\n"
        "}\n"
        : WGMMA_ACC32(d, 0), WGMMA_ACC32(d, 32), WGMMA_ACC32(d, 64), WGMMA_ACC32(d, 96)
        : "l"(desc_a), "l"(desc_b), "r"(1));
}

// The two CTAs of a cluster: every thread of both arrives, then waits for all of them; writes
// before it (to either CTA's shared memory) are visible after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The address of this CTA's shared `p` in the shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t cluster_peer_addr(const void *p, int rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
    return r;
}
__device__ __forceinline__ void st_cluster_f32x4(uint32_t addr, float x, float y, float z, float w) {
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(x), "f"(y), "f"(z), "f"(w)
                 : "memory");
}
__device__ __forceinline__ void st_cluster_f32x2(uint32_t addr, float x, float y) {
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// Barrier 1 + wg among warpgroup wg's 128 threads only (0 is __syncthreads).
__device__ __forceinline__ void wg_sync(int wg) {
    if (wg == 0)
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else
        asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

// Two fp32 values as bf16 (round to nearest even), lo in the low half: a wgmma A register.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// One warpgroup's 64 x 256 block of unnormalized outputs into o_part: thread (warp w, lane
// 4r + q) holds rows 16w + r and 16w + r + 8, columns 8j + 2q, 8j + 2q + 1 (wgmma.cuh).
__device__ __forceinline__ void store_partial(const mlaw_params &p, const float (&o)[128], int t, int h0, int split,
                                              int col0, int warp, int lane) {
    const int r = lane >> 2, q = lane & 3;
    const uint64_t policy = l2_policy_evict_last();  // until the merge kernel reads them (mla_merge.cuh)
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const long base = ((long)t * p.a.H + h0 + warp * 16 + r + 8 * half) * p.nsplit + split;
        float *dst = p.o_part + base * MLAW_L + col0 + 2 * q;
#pragma unroll
        for (int j = 0; j < 32; j++)
            mla_partial_store2(dst + 8 * j, o[4 * j + 2 * half], o[4 * j + 2 * half + 1], policy);
    }
}

// One (token, split)'s KV tiles: the cache row of each and its loads into the two stages.
struct mlaw_tiles {
    const mla_attention_args &a;
    const CUtensorMap &tmap_kv;
    const int32_t *const &seq_blocks;  // the block table of the token's sequence
    const int &start;                  // the split's first position
    uint8_t *const &sKV;               // the two stages
    uint64_t (&full)[2][MLAW_BOXES];

    // The cache row (slot) of tile i's first position: the tile is the 64 rows from there, all
    // inside one cache block.
    __device__ __forceinline__ int tile_row(int i) const {
        const int p0 = start + i * MLAW_TILE;
        return (int)((long)seq_blocks[p0 / a.block_size] * a.block_size + p0 % a.block_size);
    }
    // Boxes [b0, b1) of tile i (first cache row `row`) into stage i % 2, 64 dims each, every box
    // on its own barrier.
    __device__ __forceinline__ void issue(int i, int row, int b0, int b1) const {
        uint8_t *dst = sKV + (i & 1) * MLAW_TILE_BYTES;
        for (int b = b0; b < b1; b++) {
            mbar_expect_tx(&full[i & 1][b], MLAW_BOX_BYTES);
            tma_load_2d(dst + b * MLAW_BOX_BYTES, &tmap_kv, &full[i & 1][b], b * 64, row);
        }
    }
};

// The split kernel's state its steps share: the token's tiles, this thread's place, the CTA's
// shared buffers, and the thread's running O and (m, l).
struct mlaw_cta : mlaw_tiles {
    const mlaw_params &p;
    const int &end, &ntiles, &t, &h0;
    const int &tid, &wg, &wtid, &q, &row0;
    const int &box0, &box1, &vbox;  // the boxes this warpgroup refills, its V boxes
    uint8_t *const &sQ, *const &sP;
    uint64_t (&q_full)[MLAW_BOXES];
    uint64_t &p_full;
    float (&s_alpha)[MLAW_HEADS];
    float2 (&s_ml_tile)[MLAW_HEADS];
    float (&o)[128];
    float (&m_run)[2], (&l_run)[2];

    // This warpgroup's boxes of tile t's stage take tile t + 2 (row: its first cache row).
    __device__ __forceinline__ void refill(int t, int row) const {
        if (wtid == 0 && t + 2 < ntiles) issue(t + 2, row, box0, box1);
        __syncwarp();
    }
    // O *= alpha, row0's by alpha0 and row0 + 8's by alpha1 (a tile's rescale, before its P·V).
    __device__ __forceinline__ void scale_o(float alpha0, float alpha1) const {
#pragma unroll
        for (int e = 0; e < 32; e++) {
            o[4 * e] *= alpha0;
            o[4 * e + 1] *= alpha0;
            o[4 * e + 2] *= alpha1;
            o[4 * e + 3] *= alpha1;
        }
    }
    // O *= alpha_j, then O += P_j·V_j with P_j from shared memory, once the other warpgroup has
    // published it; issued and committed, not waited for. Loads (m, l)_j.
    __device__ __forceinline__ void pv_shared_issue(int j) const {
        const uint8_t *kv = sKV + (j & 1) * MLAW_TILE_BYTES;
        mbar_wait(&p_full, (uint32_t)j & 1u);
        // Complete already (the owner waited for every box before its P); waited for here so
        // that the boxes' bytes are visible to this warpgroup too.
        for (int b = vbox; b < vbox + 4; b++) mbar_wait(&full[j & 1][b], (uint32_t)(j >> 1) & 1u);
        const float alpha0 = s_alpha[row0], alpha1 = s_alpha[row0 + 8];
        const float2 ml0 = s_ml_tile[row0], ml1 = s_ml_tile[row0 + 8];
        m_run[0] = ml0.x, l_run[0] = ml0.y, m_run[1] = ml1.x, l_run[1] = ml1.y;
        scale_o(alpha0, alpha1);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; k++)
            wgmma_m64n256k16_ss_mn(o, wgmma_desc_sw128(sP + k * 32),
                                   wgmma_desc_sw128_mn(kv + vbox * MLAW_BOX_BYTES + k * 16 * 128, MLAW_BOX_BYTES));
        wgmma_commit();
    }
    // S_i = Q·Kᵀ, issued and committed, not waited for.
    __device__ __forceinline__ void qk_issue(int i, float (&s)[32]) const {
        const int st = i & 1, p0 = start + i * MLAW_TILE;
        const uint32_t parity = (uint32_t)(i >> 1) & 1u;
        uint8_t *kv = sKV + st * MLAW_TILE_BYTES;
        if (p0 + MLAW_TILE > end) {
            // The token's last tile: rows at or past `end` hold other positions (or garbage);
            // P is 0 there, and zeros keep 0 * garbage from making NaN in P·V. Both
            // warpgroups' boxes: the other one reads its V boxes only after P_i.
            for (int b = 0; b < MLAW_BOXES; b++) mbar_wait(&full[st][b], parity);
            const int valid = end - p0, chunks = (MLAW_TILE - valid) * 8;  // 16-byte chunks a box
            for (int k = wtid; k < MLAW_BOXES * chunks; k += 128)
                *(uint4 *)(kv + (k / chunks) * MLAW_BOX_BYTES + valid * 128 + (k % chunks) * 16) =
                    make_uint4(0u, 0u, 0u, 0u);
            fence_proxy_async();
            wg_sync(wg);  // every row zeroed before any wgmma reads the tile
        }
        // One chain over the 36 k16 steps, ascending; each box waited for just before its 4
        // steps, so the later boxes' copies overlap the first boxes' products. A warpgroup's
        // first tile (0 or 1) waits for Q's box too.
        const bool q_first = p.q_tma && i < 2;
#pragma unroll
        for (int b = 0; b < MLAW_BOXES; b++) {
            mbar_wait(&full[st][b], parity);
            if (q_first) mbar_wait(&q_full[b], 0u);
            wgmma_fence();  // after the wait's loop (a divergent path), or ptxas serializes (C7520)
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const int off = b * MLAW_BOX_BYTES + kk * 32;
                if (b == 0 && kk == 0)
                    wgmma_m64n64k16_ss<true>(s, wgmma_desc_sw128(sQ), wgmma_desc_sw128(kv));
                else
                    wgmma_m64n64k16_ss<false>(s, wgmma_desc_sw128(sQ + off), wgmma_desc_sw128(kv + off));
            }
        }
        wgmma_commit();
    }
    // The owner's part of tile i once S_i is in registers (and (m, l) holds the tile before
    // it): softmax; P_i, alpha_i and (m, l)_i published (p_full); O = O * alpha_i + P_i·V_i
    // with P in registers, waited for; this warpgroup's boxes of stage i refilled.
    __device__ __forceinline__ void own_tile(int i, float (&s)[32], int row_i2) const {
        // Rows row0 (s[4c], s[4c+1]) and row0 + 8 (s[4c+2], s[4c+3]), columns 8c + 2q, 8c + 2q + 1.
        const int p0 = start + i * MLAW_TILE;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool ok = p0 + 8 * c + 2 * q + e < end;
                s[4 * c + e] = ok ? s[4 * c + e] * a.scale : -INFINITY;
                s[4 * c + 2 + e] = ok ? s[4 * c + 2 + e] * a.scale : -INFINITY;
                mx[0] = fmaxf(mx[0], s[4 * c + e]);
                mx[1] = fmaxf(mx[1], s[4 * c + 2 + e]);
            }
        float alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 1));
            mx[h2] = fmaxf(mx[h2], __shfl_xor_sync(0xffffffffu, mx[h2], 2));
            const float m_new = fmaxf(m_run[h2], mx[h2]);  // finite: the tile's first position is the token's
            alpha[h2] = __expf(m_run[h2] - m_new);         // exp(-inf) = 0 on the first tile
            m_run[h2] = m_new;
        }
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[4 * c + e] = __expf(s[4 * c + e] - m_run[0]);
                s[4 * c + 2 + e] = __expf(s[4 * c + 2 + e] - m_run[1]);
                sum[0] += s[4 * c + e];
                sum[1] += s[4 * c + 2 + e];
            }
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            sum[h2] += __shfl_xor_sync(0xffffffffu, sum[h2], 1);
            sum[h2] += __shfl_xor_sync(0xffffffffu, sum[h2], 2);
            l_run[h2] = l_run[h2] * alpha[h2] + sum[h2];
        }
        // P in bf16: the accumulator layout of columns 16k..16k+15 is the A fragment of k16
        // step k (row0 cols 2q.., row0+8 cols 2q.., row0 cols 8+2q.., row0+8 cols 8+2q..).
        uint32_t pk[8][2], pa[4][4];
#pragma unroll
        for (int c = 0; c < 8; c++) {
            pk[c][0] = pack_bf16x2(s[4 * c], s[4 * c + 1]);
            pk[c][1] = pack_bf16x2(s[4 * c + 2], s[4 * c + 3]);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            pa[k][0] = pk[2 * k][0];
            pa[k][1] = pk[2 * k][1];
            pa[k][2] = pk[2 * k + 1][0];
            pa[k][3] = pk[2 * k + 1][1];
        }
#pragma unroll
        for (int c = 0; c < 8; c++) {
            *(uint32_t *)(sP + sw128_offset(row0, c) + 4 * q) = pk[c][0];
            *(uint32_t *)(sP + sw128_offset(row0 + 8, c) + 4 * q) = pk[c][1];
        }
        if (q == 0) {
            s_alpha[row0] = alpha[0];
            s_alpha[row0 + 8] = alpha[1];
            s_ml_tile[row0] = make_float2(m_run[0], l_run[0]);
            s_ml_tile[row0 + 8] = make_float2(m_run[1], l_run[1]);
        }
        fence_proxy_async();  // P becomes visible to the other warpgroup's wgmma
        mbar_arrive(&p_full);
        scale_o(alpha[0], alpha[1]);
        const uint8_t *kv = sKV + (i & 1) * MLAW_TILE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; k++)
            wgmma_m64n256k16_rs_mn(o, pa[k], wgmma_desc_sw128_mn(kv + vbox * MLAW_BOX_BYTES + k * 16 * 128, MLAW_BOX_BYTES));
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold(o);
#pragma unroll
        for (int k = 0; k < 4; k++) wgmma_hold(pa[k]);  // P, read by the wgmma until its wait
        refill(i, row_i2);
    }

    // The CTAs' merge of one case (chosen in the kernel): this CTA's merged columns to `out`.
    template <class Case>
    __device__ __forceinline__ void merge_out(Case merge_case) const {
        const int col0 = wg * (MLAW_L / 2);  // this warpgroup's output columns
        float2 *const s_ml = (float2 *)sP;
        constexpr bool two = decltype(merge_case)::two;
        constexpr int split = decltype(merge_case)::split;  // a lone split is split 0
        if (two) {
            cluster_sync();  // both CTAs past their tiles: the stages free to receive, P read
            {  // the half the other CTA merges: this split's values of it, [e4 % 16][thread] there
                const uint32_t dst = cluster_peer_addr(sKV, split ^ 1) + tid * 16;
#pragma unroll
                for (int e4 = 0; e4 < 32; e4++)
                    if (!decltype(merge_case)::keeps(e4))
                        st_cluster_f32x4(dst + (e4 & 15) * MLAW_THREADS * 16, o[4 * e4], o[4 * e4 + 1], o[4 * e4 + 2],
                                         o[4 * e4 + 3]);
            }
            if (wg == 0 && q == 0) {
                const uint32_t dst = cluster_peer_addr(sKV + MLAW_PEER_ML_OFFSET, split ^ 1);
#pragma unroll
                for (int h2 = 0; h2 < 2; h2++) st_cluster_f32x2(dst + (row0 + 8 * h2) * 8, m_run[h2], l_run[h2]);
            }
        } else {
            __syncthreads();  // both warpgroups' last P·V have read P
        }
        if (wg == 0 && q == 0) {
            s_ml[row0] = make_float2(m_run[0], l_run[0]);
            s_ml[row0 + 8] = make_float2(m_run[1], l_run[1]);
        }
        if (two)
            cluster_sync();  // the other split's half and (max, sum) have landed; s_ml written
        else
            __syncthreads();

        // This CTA's merged columns of each row, bf16, into Q's buffer (idle now) at their places in
        // [row][512], then to `out` in 16-byte pieces: the fragments' 4-byte pairs straight to global
        // memory scatter over 8 rows a store (H200, 128 heads, 1 x 512: 6 us more than the merge
        // kernel; dev timer).
        uint32_t *const staged = (uint32_t *)sQ;  // [row][MLAW_STAGE_ROW_WORDS] bf16 pairs
        {
            const uint32_t peer_o = smem_addr(sKV) + tid * 16;                     // [e4 % 16][thread] float4
            const float2 *peer_ml = (const float2 *)(sKV + MLAW_PEER_ML_OFFSET);   // [row]
            float w[2][2], scale[2];
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                const int row = row0 + 8 * h2;
                const float2 mine = s_ml[row], theirs = two ? peer_ml[row] : mine;  // a lone split is split 0
                const float2 ml0 = split == 0 ? mine : theirs, ml1 = split == 0 ? theirs : mine;
                float m = fmaxf(-INFINITY, ml0.x), d = 0.0f;
                if (two) m = fmaxf(m, ml1.x);
                w[h2][0] = mla_merge_weight(ml0.x, ml0.y, m, d);
                w[h2][1] = two ? mla_merge_weight(ml1.x, ml1.y, m, d) : 0.0f;
                scale[h2] = mla_merge_scale(d);
            }
            // The other split's values 8 float4 at a time, loaded together: a load waited for before
            // each next one held the merge at ~170 cycles a float4 (H200, dev clock stamps). Rounded
            // on the converter alone first, noting whether a NaN or an infinity came out; where one
            // did, all of this thread's pairs again with the fix-ups: mla_merge_out's bits either way.
            // This thread's bf16 pair of e4 = 0 in its first staged row (e4's is 4 e4 pairs on).
            const uint32_t staged_pair0 = smem_addr(staged) + (row0 * MLAW_STAGE_ROW_WORDS + col0 / 2 + q) * 4;
            if (merge_rows(merge_case, mlaw_flag<false>(), w, scale, peer_o, staged_pair0))
                merge_rows(merge_case, mlaw_flag<true>(), w, scale, peer_o, staged_pair0);
        }
        __syncthreads();
        // This CTA's columns of every row, in 16-byte pieces (8 columns): all 64 pieces of a row for
        // a lone split; of two, pieces 16 split .. + 15 of each warpgroup's 32. The count is the
        // case's constant, so the index arithmetic is shifts and masks (a division by a count known
        // only at run time cost the two-split loop 0.2-1.4 us at 32-128 x 1k; H200).
        constexpr unsigned pieces = two ? MLAW_L / 16 : MLAW_L / 8;  // a row's, this CTA's
        static_assert(MLAW_HEADS * MLAW_L / 16 % MLAW_THREADS == 0, "whole rounds of pieces in both cases");
        bf16 *const out = a.out + t * a.ld_out + (long)h0 * MLAW_L;
        const uint32_t staged_row0 = smem_addr(staged);
#pragma unroll
        for (unsigned k = tid; k < MLAW_HEADS * pieces; k += MLAW_THREADS) {
            const unsigned row = k / pieces, pc = k % pieces;
            const unsigned piece = two ? (pc / 16) * 32 + 16 * split + pc % 16 : pc;
            *(uint4 *)(out + row * MLAW_L + 8 * piece) =
                lds_u32x4(staged_row0 + (row * MLAW_STAGE_ROW_WORDS + 4 * piece) * 4);
        }
    }

    // This thread's merged columns, bf16, staged; with the NaN fix-ups (Flag) or without them,
    // then saying whether a NaN or an infinity came out.
    template <class Case, class Flag>
    __device__ __forceinline__ bool merge_rows(Case merge_case, Flag checked, const float (&w)[2][2],
                                               const float (&scale)[2], uint32_t peer_o,
                                               uint32_t staged_pair0) const {
        constexpr bool two = decltype(merge_case)::two;
        constexpr int split = decltype(merge_case)::split;
        constexpr bool fixups = decltype(checked)::value;
        uint32_t nan_seen = 0;  // bf16x2_nan_track of every pair rounded
#pragma unroll
        for (int e8 = 0; e8 < 32; e8 += 8) {
            if (!decltype(merge_case)::keeps(e8)) continue;
            float4 other[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                other[k] = two ? lds_f32x4(peer_o + ((e8 + k) & 15) * MLAW_THREADS * 16)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            // columns 8 e4 + 2q, + 1 of rows row0 (values 0, 1) and row0 + 8 (2, 3)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int e4 = e8 + k;
                const float theirs[4] = {other[k].x, other[k].y, other[k].z, other[k].w};
                float v[4];
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const float mine = o[4 * e4 + c];
                    v[c] = fmaf(split == 0 ? mine : theirs[c], w[c >> 1][0], 0.0f);  // split 0, then split 1
                    if (two) v[c] = fmaf(split == 0 ? theirs[c] : mine, w[c >> 1][1], v[c]);
                }
                const uint32_t b0 = mla_merge_out<!fixups>(v[0], v[1], scale[0]);
                const uint32_t b1 = mla_merge_out<!fixups>(v[2], v[3], scale[1]);
                if (!fixups) {
                    nan_seen = bf16x2_nan_track(nan_seen, b0);
                    nan_seen = bf16x2_nan_track(nan_seen, b1);
                }
                sts_u32(staged_pair0 + 16 * e4, b0);
                sts_u32(staged_pair0 + 8 * MLAW_STAGE_ROW_WORDS * 4 + 16 * e4, b1);
            }
        }
        return bf16x2_any_nan(nan_seen);
    }
};

#endif

template <bool QK_EARLY>
__global__ void __launch_bounds__(MLAW_THREADS, 1)
mla_wgmma_split_kernel(mlaw_params p, const __grid_constant__ CUtensorMap tmap_kv,
                       const __grid_constant__ CUtensorMap tmap_q_lat, const __grid_constant__ CUtensorMap tmap_q_pe) {
#if INVAR_WGMMA
    pdl_release_dependent();  // the merge may start up now; it waits for this grid's end
    const mla_attention_args &a = p.a;
    const int hg = blockIdx.x, split = blockIdx.y, t = blockIdx.z;
    const int pos = a.token_pos[t], seq = a.token_seq[t];
    const int start = split * p.split_size;
    if (start > pos) return;  // past the token's position: the merge never reads this split
    const int end = min(start + p.split_size, pos + 1);
    const int ntiles = (end - start + MLAW_TILE - 1) / MLAW_TILE;
    const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
    const int r = lane >> 2, q = lane & 3, row0 = warp * 16 + r;  // this thread's rows: row0, row0 + 8
    const int h0 = hg * MLAW_HEADS;

    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms
    uint8_t *const sQ = smem, *const sKV = smem + MLAW_TILE_BYTES, *const sP = smem + MLAW_P_OFFSET;
    __shared__ __align__(8) uint64_t full[2][MLAW_BOXES];  // box b of stage s has landed
    __shared__ __align__(8) uint64_t q_full[MLAW_BOXES];   // Q's box b has landed (q_tma)
    __shared__ __align__(8) uint64_t p_full;               // a tile's owner wrote P, alpha and (m, l)
    __shared__ float s_alpha[MLAW_HEADS];
    __shared__ float2 s_ml_tile[MLAW_HEADS];                // (m, l) after the owner's tile

    const int32_t *seq_blocks = a.block_table + (long)seq * a.max_blocks_per_seq;
    const mlaw_tiles tiles{a, tmap_kv, seq_blocks, start, sKV, full};
    if (tid == 0) {
        for (int b = 0; b < MLAW_BOXES; b++) {
            mbar_init(&full[0][b], 1);
            mbar_init(&full[1][b], 1);
            mbar_init(&q_full[b], 1);
        }
        mbar_init(&p_full, 128);
        mbar_init_fence();
        const int row0_tile = tiles.tile_row(0);
        for (int b = 0; b < MLAW_BOXES; b++) {
            // Q's box b (dims 64b .. 64b + 63 of heads h0 .. h0 + 63: latent, then rope), then
            // tile 0's: the first Q·Kᵀ's steps over box b need both.
            if (p.q_tma) {
                mbar_expect_tx(&q_full[b], MLAW_BOX_BYTES);
                if (b < MLAW_L / 64)
                    tma_load_3d(sQ + b * MLAW_BOX_BYTES, &tmap_q_lat, &q_full[b], b * 64, h0, t);
                else
                    tma_load_3d(sQ + b * MLAW_BOX_BYTES, &tmap_q_pe, &q_full[b], 0, h0, t);
            }
            tiles.issue(0, row0_tile, b, b + 1);
        }
        if (ntiles > 1 && !p.merge_here) tiles.issue(1, tiles.tile_row(1), 0, MLAW_BOXES);
    }

    // Q not in 16-byte pieces: 64 heads x (L latent, R rope) into the swizzled layout, box
    // d / 64, value by value while the first tiles are in flight.
    if (!p.q_tma) mla_load_q_sw128<MLAW_HEADS, MLAW_THREADS>(a, false, t, h0, sQ);
    fence_proxy_async();  // Q copied by threads (generic-proxy writes) becomes visible to wgmma
    __syncthreads();      // ... and the barriers' initialization to every thread

    float o[128];
#pragma unroll
    for (int e = 0; e < 128; e++) o[e] = 0.0f;

    // The seesaw: warpgroup w computes S and the softmax of the tiles of parity w (tile i's
    // owner), both warpgroups the P·V of every tile for their own columns, in tile order. Per
    // iteration, w's tile i and the other's tile j = i - 1 before it:
    //   wait for P_j; O *= alpha_j; issue P_j·V_j (P from shared memory) ... then Q·Kᵀ of
    //   tile i behind it; wait for P·V (this warpgroup's boxes of stage j refill with tile
    //   j + 2); wait for S_i; softmax from (m, l)_j; P_i, alpha_i and (m, l)_i to shared
    //   memory (p_full); O *= alpha_i; O += P_i·V_i (P in registers); its boxes of stage i
    //   refill with tile i + 2.
    // With QK_EARLY, Q·Kᵀ of tile i is issued first, then the wait for P_j and P_j·V_j, and one
    // wait covers both before the refill and the softmax.
    // One P buffer is enough: the warpgroup that writes P_i has just read P_j, and the other
    // reads P_i before it writes P_{i+1}. A stage's boxes 0..3 are read by Q·Kᵀ and warpgroup
    // 0's P·V, boxes 4..8 by Q·Kᵀ and warpgroup 1's P·V; P·V comes after Q·Kᵀ (P needs S), so
    // warpgroup 0 refills 0..3 and warpgroup 1 4..8, each after its own P·V of the tile.
    // Every wgmma group is waited for in the iteration that issued it: one left in flight
    // across the loop's back edge makes ptxas serialize all of them (C7515; FlashMLA notes the
    // same).
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // (m, l) after the last tile seen
    const int box0 = wg == 0 ? 0 : 4, box1 = wg == 0 ? 4 : MLAW_BOXES;  // the boxes this warpgroup refills
    const int vbox = 4 * wg;  // its V boxes: latent dims 256 wg .. 256 wg + 255
    const mlaw_cta cta{tiles, p, end, ntiles, t, h0, tid, wg, wtid, q, row0, box0, box1, vbox, sQ, sP,
                       q_full, p_full, s_alpha, s_ml_tile, o, m_run, l_run};

    // Where the CTAs merge (tokens of at most two splits: every CTA of a wave at the same
    // point of its 8 tiles), tile 1 goes out once the last boxes of Q and of tile 0 (issued
    // last) have landed, so that those come first out of the wave's first loads; elsewhere at
    // once, with them (H200, dev timer, us, with the out loop below: 32 x 1k 31.4 -> 30.9,
    // 64 x 1k 59.5 -> 57.3; taken in every grid it cost 128 x 4k 444.5 -> 448.2).
    if (p.merge_here && wg == 1 && wtid == 0 && ntiles > 1) {
        mbar_wait(&full[0][MLAW_BOXES - 1], 0u);
        if (p.q_tma) mbar_wait(&q_full[MLAW_BOXES - 1], 0u);
        tiles.issue(1, tiles.tile_row(1), 0, MLAW_BOXES);
    }
    __syncwarp();
    if (wg == 0) {  // tile 0: nothing before it
        const int row2 = ntiles > 2 ? tiles.tile_row(2) : 0;
        float s[32];
        cta.qk_issue(0, s);
        wgmma_wait<0>();
        wgmma_hold(s);
        cta.own_tile(0, s, row2);
    }
    for (int i = wg == 0 ? 2 : 1; i < ntiles; i += 2) {  // the other's tile i - 1, then its own tile i
        // Block-table entries of the tiles this iteration's refills load, read now so that
        // their latency hides behind the products.
        const int row_j2 = i + 1 < ntiles ? tiles.tile_row(i + 1) : 0;
        const int row_i2 = i + 2 < ntiles ? tiles.tile_row(i + 2) : 0;
        float s[32];
        if (QK_EARLY) {  // Q·Kᵀ of tile i while the other still computes P_{i-1} (mla_wgmma_qk_early)
            cta.qk_issue(i, s);
            cta.pv_shared_issue(i - 1);
            wgmma_wait<0>();  // S_i, then P_{i-1}·V: P's buffer is free, and this warpgroup's boxes of its stage
            wgmma_hold(s);
            wgmma_hold(o);
            cta.refill(i - 1, row_j2);
        } else {
            cta.pv_shared_issue(i - 1);
            cta.qk_issue(i, s);
            wgmma_wait<1>();  // P_{i-1}·V done: P's buffer is free, and this warpgroup's boxes of its stage
            wgmma_hold(o);
            cta.refill(i - 1, row_j2);
            wgmma_wait<0>();
            wgmma_hold(s);
        }
        cta.own_tile(i, s, row_i2);
    }
    if ((ntiles - 1) % 2 != wg) {  // the last tile is the other's
        cta.pv_shared_issue(ntiles - 1);
        wgmma_wait<0>();
        wgmma_hold(o);
    }
    const int col0 = wg * (MLAW_L / 2);  // this warpgroup's output columns
    if (!p.merge_here) {
        store_partial(p, o, t, h0, split, col0, warp, lane);
        if (wg == 0 && q == 0) {
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++)
                p.ml_part[((long)t * a.H + h0 + row0 + 8 * h2) * p.nsplit + split] = make_float2(m_run[h2], l_run[h2]);
        }
        return;
    }

    // Every token of at most two splits (the grid's nsplit <= 2): merged here with the merge
    // kernel's operations in its order (mla_merge.cuh), so a token's bits do not depend on which
    // of the two merged it. One split: this CTA alone. Two: the cluster of the token's two CTAs
    // (rank = split) swaps halves through distributed shared memory, rank k merging of every
    // row the columns of its threads' float4 16k .. 16k + 15 (columns 128k .. 128k + 127 of each
    // warpgroup's 256) of both splits: every thread sends 16 float4 and merges 16. P's buffer,
    // idle now, holds this CTA's (max, sum) of each row, read by both warpgroups' threads.
    // This code runs once a CTA, so its instructions come from L2 and it waits on their fetch:
    // at 128 heads 32 x 1k three quarters of the merge's stall samples were no-instruction ones
    // (ncu), at branch targets and every 48 instructions of straight code. So each case is
    // straight code of its own, chosen once, and the fewer instructions the better: the NaN
    // fix-ups only where a thread's pairs held a NaN or an infinity, shared memory by 32-bit
    // address (H200, dev timer: 32 x 1k 30.7 -> 29.9 us, 64 x 1k 57.4 -> 55.8, 128 x 1k 109.2 ->
    // 106.5).
    const int n = mla_token_splits(pos, p.split_size, p.nsplit);
    if (n != 2)
        cta.merge_out(mlaw_merge_case<false, 0>());
    else if (split == 0)
        cta.merge_out(mlaw_merge_case<true, 0>());
    else
        cta.merge_out(mlaw_merge_case<true, 1>());
#else
    (void)p;  // not an sm_90a pass: never launched (mla_wgmma_supported checks cuda_ctx.wgmma)
    (void)tmap_kv;
    (void)tmap_q_lat;
    (void)tmap_q_pe;
#endif
}

bool mla_wgmma_supported(const cuda_ctx *c, const mla_attention_args *a, int split_size) {
    // + 1024: the kernel's static shared memory (barriers, alpha, (m, l): 992 bytes, ptxas -v)
    // counts against the same limit
    return mla_wgmma_takes(c, a, split_size, MLAW_HEADS, (size_t)MLAW_SMEM_BYTES + 1024);
}

// The grid's CTAs (units): a head group x a split x a token, one CTA per SM at a time.
static long mlaw_units(const mla_attention_args *a, int nsplit) { return (long)(a->H / MLAW_HEADS) * nsplit * a->T; }

bool mla_wgmma_merges_tokens(const cuda_ctx *c, const mla_attention_args *a, int nsplit) {
    // Tokens of at most two splits merged by their CTAs where those fill at least half the SMs
    // (no partials written and read back, no merge launch); at fewer units the merge kernel, its
    // blocks spread over the idle SMs, beats each CTA's own merge at the end of its split. H200,
    // 128 heads, dev timer, medians of three, us (merge kernel -> CTAs): 32 x 1k (128 units) 38.1
    // -> 35.0, 128 x 1k 139.0 -> 125.9; 4 x 1k (16 units) 30.4 -> 31.7, 1 x 1k 29.1 -> 31.5. The
    // bits are the same either way. The merged rows go out in 16-byte pieces: an output that
    // allows them.
    const long units = mlaw_units(a, nsplit);
    return nsplit <= 2 && 2 * units >= c->num_sms && ((uintptr_t)a->out & 15u) == 0 && a->ld_out % 8 == 0;
}

// The schedule (the same arithmetic, so the same bits either way): in a grid of at most half
// as many CTAs as SMs each warpgroup issues Q·Kᵀ of its next tile before it waits for the
// other's P, so the product runs beside the other's softmax; in bigger grids the other's P·V
// goes first, so that the stage it frees is refilled early. H200, 128 heads, dev timer, medians
// of three, us (other's P·V first -> Q·Kᵀ first; dev/run127, kernels/cuda/NOTES.md): 1 x 1k
// (4 CTAs) 27.8 -> 26.4, 4 x 1k (16) 29.3 -> 27.1, 1 x 4k (16) 29.7 -> 27.3, 1 x 16k (64) 31.6
// -> 30.5; 2 x 16k (128) 36.3 / 36.3, 32 x 1k (128) 31.9 / 32.0; in every grid of several waves
// (dev/run125) 0.3-1.3% slower: with many CTAs loading at once a tile's boxes land late, and
// Q·Kᵀ first holds the other's P·V, and so the refill, until they have.
static bool mla_wgmma_qk_early(const cuda_ctx *c, long units) { return 2 * units <= c->num_sms; }

int mla_wgmma_split_launch(cuda_ctx *c, const mla_attention_args *a, int split_size, int nsplit, float *o_part,
                           float2 *ml_part) {
    mlaw_params p;
    p.a = *a;
    p.split_size = split_size;
    p.nsplit = nsplit;
    p.merge_here = mla_wgmma_merges_tokens(c, a, nsplit);
    p.q_tma = mla_q_aligned(a);
    p.o_part = o_part;
    p.ml_part = ml_part;

    const CUtensorMap tmap = mla_kv_cache_map(c, a, MLAW_TILE, false);
    // Q as [T][H][L] and [T][H][R], boxes of 64 dims x 64 heads (never read without q_tma).
    CUtensorMap tmap_q_lat = {}, tmap_q_pe = {};
    if (p.q_tma) {
        tmap_q_lat = tma_map_bf16_3d(c, a->q_lat, a->T, a->H, MLAW_L, MLAW_L, a->ld_q_lat, 64, MLAW_HEADS,
                                     "mla_attention", "q latent");
        tmap_q_pe = tma_map_bf16_3d(c, a->q_pe, a->T, a->H, MLAW_R, a->head_stride_q_pe, a->ld_q_pe, 64,
                                    MLAW_HEADS, "mla_attention", "q rope");
    }
    const bool qk_early = mla_wgmma_qk_early(c, mlaw_units(a, nsplit));
    void (*kernel)(mlaw_params, CUtensorMap, CUtensorMap, CUtensorMap) =
        qk_early ? mla_wgmma_split_kernel<true> : mla_wgmma_split_kernel<false>;
    cuda_kernel_smem(c, (const void *)kernel, MLAW_SMEM_BYTES, "mla_attention");
    // Head groups fastest: the CTAs that read the same KV tiles run side by side (L2 reuse).
    // At two splits a token's CTAs are one cluster, side by side in the split dimension.
    dim3 grid((unsigned)(a->H / MLAW_HEADS), (unsigned)nsplit, (unsigned)a->T);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 2;
    attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(MLAW_THREADS);
    cfg.dynamicSmemBytes = MLAW_SMEM_BYTES;
    cfg.stream = c->stream;
    cfg.attrs = attr;
    cfg.numAttrs = p.merge_here && nsplit == 2 ? 1 : 0;
    CUDA_CHECK("mla_attention (wgmma)",
               cudaLaunchKernelEx(&cfg, kernel, p, tmap, tmap_q_lat, tmap_q_pe));
    return p.merge_here ? 2 : 0;
}
