// kernels/cuda/mla_absorbed_h64_sm90.cu — absorbed MLA attention on sm_90a for H a multiple of
// 64 (mla_wgmma_supported), a shape choice, never a batch one. MLA.md: the design.
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
//
// Work unit (one CTA, 2 warpgroups): 64 heads of one token x one fixed-size split, into the
// merge kernel's partials, or merged here by the token's CTAs where the grid has at most two
// splits (mla_merge.cuh's steps). Reduction order of a (token, head) row:
//   for each 64-position tile of the split, ascending (aligned to position 0):
//     s  = 36 k16 steps ascending over the L + R dims, one fp32 chain from 0; s *= scale,
//          positions past the token's own -inf
//     m' = max(m, max of the row's 64 s); alpha = exp(m - m'); p = exp(s - m')
//     l  = l * alpha + sum(p): each thread's 16 p in column order, then lanes xor 1, xor 2
//     O  = O * alpha, then O += bf16(p) · V over 4 k16 steps ascending
// The warpgroup doing a step is fixed by the column (P·V: 0-255 or 256-511) or by the tile's
// parity (S and softmax, the seesaw below), so the arithmetic never depends on the schedule.
// A KV tile is 64 consecutive cache rows of one block, loaded by TMA as 9 boxes of 64 dims
// (128-byte swizzle), each on its own barrier; the same bytes are Q·Kᵀ's K-major B and P·V's
// MN-major B (the latent K doubles as V).
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
#define MLAW_BOXES (MLAW_D / 64)                       // 64-dim boxes (128 bytes a row)
#define MLAW_BOX_BYTES (MLAW_TILE * 128)
#define MLAW_TILE_BYTES (MLAW_BOXES * MLAW_BOX_BYTES)  // 72 KB, Q's size too
#define MLAW_THREADS 256                               // 2 warpgroups
// Dynamic shared memory: Q, two KV stages, P (64 heads x 64 positions bf16), alignment slack.
#define MLAW_P_OFFSET (3 * MLAW_TILE_BYTES)
#define MLAW_SMEM_BYTES (MLAW_P_OFFSET + MLAW_HEADS * 128 + 1024)

// A token's two CTAs swap the halves the other merges through the KV stages, (max, sum) at 128 KB.
#define MLAW_PEER_ML_OFFSET (128 * 1024)
static_assert(MLAW_PEER_ML_OFFSET + MLAW_HEADS * 8 <= 2 * MLAW_TILE_BYTES, "the swap fits the KV stages");
// Merged rows staged in Q's buffer 260 words apart: a warp's 8 rows start 4 banks apart.
#define MLAW_STAGE_ROW_WORDS (MLAW_L / 2 + 4)
static_assert(MLAW_HEADS * MLAW_STAGE_ROW_WORDS * 4 <= MLAW_TILE_BYTES, "the staged rows fit Q's buffer");

// The CTAs' merge, a code path a case: of two splits or one, and the merging CTA's split.
template <bool TWO, int SPLIT>
struct mlaw_merge_case {
    static constexpr bool two = TWO;
    static constexpr int split = SPLIT;
    // Whether this CTA merges float4 e4 of its threads' 32.
    static __device__ __forceinline__ bool keeps(int e4) { return !TWO || (e4 >> 4) == SPLIT; }
};

// Shared memory by 32-bit address (an aligned generic pointer would be accessed as generic).
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
    bool merge_here;         // every token merged by its CTAs (mla_wgmma_merges_tokens)
    bool q_tma;              // Q by TMA (mla_q_aligned) or value by value
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

// S = Q·Kᵀ or S += (FIRST: scale-d 0, no plain instruction zeroing S between fences: C7515).
#define MLAW_M64N64K16_SS WGMMA_SS_BF16(64, MLAW_REGS32, 32, 33, 34)
template <bool FIRST>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    if (FIRST)
        asm volatile(MLAW_M64N64K16_SS : WGMMA_OUT32(d, 0) : "l"(desc_a), "l"(desc_b), "r"(0));
    else
        asm volatile(MLAW_M64N64K16_SS : WGMMA_ACC32(d, 0) : "l"(desc_a), "l"(desc_b), "r"(1));
}

// O += P(64x16, registers, m16n8k16 fragments) · V(16x256, MN-major): an owned tile's P·V.
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

// The same with P in shared memory: the other warpgroup's tiles.
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

// Both CTAs of the cluster: writes before it (either CTA's shared memory) are visible after it.
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

// One warpgroup's 64 x 256 unnormalized outputs into o_part (wgmma.cuh's fragment layout).
__device__ __forceinline__ void store_partial(const mlaw_params &p, const float (&o)[128], int t, int h0, int split,
                                              int col0, int warp, int lane) {
    const int r = lane >> 2, q = lane & 3;
    const uint64_t policy = l2_policy_evict_last();  // mla_merge.cuh
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

    // Tile i's first cache row; its 64 rows lie inside one block.
    __device__ __forceinline__ int tile_row(int i) const {
        const int p0 = start + i * MLAW_TILE;
        return (int)((long)seq_blocks[p0 / a.block_size] * a.block_size + p0 % a.block_size);
    }
    // Boxes [b0, b1) of tile i into stage i % 2, each on its own barrier.
    __device__ __forceinline__ void issue(int i, int row, int b0, int b1) const {
        uint8_t *dst = sKV + (i & 1) * MLAW_TILE_BYTES;
        for (int b = b0; b < b1; b++) {
            mbar_expect_tx(&full[i & 1][b], MLAW_BOX_BYTES);
            tma_load_2d(dst + b * MLAW_BOX_BYTES, &tmap_kv, &full[i & 1][b], b * 64, row);
        }
    }
};

// The split kernel's state its steps share. Members are references to the kernel's locals, as
// a lambda's captures: copies change ptxas's register allocation.
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
    // O *= alpha: row0's by alpha0, row0 + 8's by alpha1.
    __device__ __forceinline__ void scale_o(float alpha0, float alpha1) const {
#pragma unroll
        for (int e = 0; e < 32; e++) {
            o[4 * e] *= alpha0;
            o[4 * e + 1] *= alpha0;
            o[4 * e + 2] *= alpha1;
            o[4 * e + 3] *= alpha1;
        }
    }
    // O *= alpha_j, O += P_j·V_j with the other warpgroup's P_j (issued, not waited for); (m, l)_j.
    __device__ __forceinline__ void pv_shared_issue(int j) const {
        const uint8_t *kv = sKV + (j & 1) * MLAW_TILE_BYTES;
        mbar_wait(&p_full, (uint32_t)j & 1u);
        // Landed already; waited for so that the bytes are visible to this warpgroup.
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
            // The token's last tile: rows past `end` zeroed, as 0 * garbage could be NaN in P·V.
            for (int b = 0; b < MLAW_BOXES; b++) mbar_wait(&full[st][b], parity);
            const int valid = end - p0, chunks = (MLAW_TILE - valid) * 8;  // 16-byte chunks a box
            for (int k = wtid; k < MLAW_BOXES * chunks; k += 128)
                *(uint4 *)(kv + (k / chunks) * MLAW_BOX_BYTES + valid * 128 + (k % chunks) * 16) =
                    make_uint4(0u, 0u, 0u, 0u);
            fence_proxy_async();
            wg_sync(wg);  // every row zeroed before any wgmma reads the tile
        }
        // One chain, ascending; each box (and on a first tile Q's) waited for just before its steps.
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
    // The owner's part of tile i: softmax, P_i published, O = O * alpha_i + P_i·V_i, refill.
    __device__ __forceinline__ void own_tile(int i, float (&s)[32], int row_i2) const {
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
        // P in bf16: S's columns 16k .. 16k + 15 are step k's A fragment.
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
        const int col0 = wg * (MLAW_L / 2);
        float2 *const s_ml = (float2 *)sP;
        constexpr bool two = decltype(merge_case)::two;
        constexpr int split = decltype(merge_case)::split;  // a lone split is split 0
        if (two) {
            cluster_sync();  // both CTAs past their tiles: the stages free to receive
            {  // the half the other CTA merges
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

        // Merged columns staged in Q's buffer, then out in 16-byte pieces (not scattered 4-byte pairs).
        uint32_t *const staged = (uint32_t *)sQ;  // [row][MLAW_STAGE_ROW_WORDS] bf16 pairs
        {
            const uint32_t peer_o = smem_addr(sKV) + tid * 16;
            const float2 *peer_ml = (const float2 *)(sKV + MLAW_PEER_ML_OFFSET);
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
            // Rounded on the converter alone, then again with the fix-ups where a NaN or an
            // infinity came out: mla_merge_out's bits either way.
            const uint32_t staged_pair0 = smem_addr(staged) + (row0 * MLAW_STAGE_ROW_WORDS + col0 / 2 + q) * 4;
            if (merge_rows(merge_case, mlaw_flag<false>(), w, scale, peer_o, staged_pair0))
                merge_rows(merge_case, mlaw_flag<true>(), w, scale, peer_o, staged_pair0);
        }
        __syncthreads();
        // This CTA's 16-byte pieces of every row; the count a constant of the case (shifts, not division).
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

    // This thread's merged columns, bf16, staged (Flag: with the NaN fix-ups); whether a NaN came out.
    template <class Case, class Flag>
    __device__ __forceinline__ bool merge_rows(Case merge_case, Flag checked, const float (&w)[2][2],
                                               const float (&scale)[2], uint32_t peer_o,
                                               uint32_t staged_pair0) const {
        constexpr bool two = decltype(merge_case)::two;
        constexpr int split = decltype(merge_case)::split;
        constexpr bool fixups = decltype(checked)::value;
        uint32_t nan_seen = 0;
#pragma unroll
        for (int e8 = 0; e8 < 32; e8 += 8) {
            if (!decltype(merge_case)::keeps(e8)) continue;
            float4 other[8];
#pragma unroll
            for (int k = 0; k < 8; k++)
                other[k] = two ? lds_f32x4(peer_o + ((e8 + k) & 15) * MLAW_THREADS * 16)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
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
    const int r = lane >> 2, q = lane & 3, row0 = warp * 16 + r;  // rows row0, row0 + 8
    const int h0 = hg * MLAW_HEADS;

    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms
    uint8_t *const sQ = smem, *const sKV = smem + MLAW_TILE_BYTES, *const sP = smem + MLAW_P_OFFSET;
    __shared__ __align__(8) uint64_t full[2][MLAW_BOXES];  // box b of stage s has landed
    __shared__ __align__(8) uint64_t q_full[MLAW_BOXES];   // Q's box b has landed (q_tma)
    __shared__ __align__(8) uint64_t p_full;               // P, alpha, (m, l) published
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
            // Q's box b, then tile 0's: the first Q·Kᵀ's steps over box b need both.
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

    // Q not in 16-byte pieces: value by value into the swizzled layout.
    if (!p.q_tma) mla_load_q_sw128<MLAW_HEADS, MLAW_THREADS>(a, false, t, h0, sQ);
    fence_proxy_async();  // Q copied by threads (generic-proxy writes) becomes visible to wgmma
    __syncthreads();      // ... and the barriers' initialization to every thread

    float o[128];
#pragma unroll
    for (int e = 0; e < 128; e++) o[e] = 0.0f;

    // The seesaw: warpgroup w owns the tiles of parity w (S, softmax, P published); both add
    // every tile's P·V to their own columns in tile order. Every wgmma group is waited for in
    // the iteration that issued it: one in flight across the back edge serializes all (C7515).
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const int box0 = wg == 0 ? 0 : 4, box1 = wg == 0 ? 4 : MLAW_BOXES;
    const int vbox = 4 * wg;
    const mlaw_cta cta{tiles, p, end, ntiles, t, h0, tid, wg, wtid, q, row0, box0, box1, vbox, sQ, sP,
                       q_full, p_full, s_alpha, s_ml_tile, o, m_run, l_run};

    // Where the CTAs merge, tile 1 waits for the last boxes of Q and tile 0, which then come
    // first out of the wave's loads.
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
        // The refills' block-table entries, read early to hide their latency.
        const int row_j2 = i + 1 < ntiles ? tiles.tile_row(i + 1) : 0;
        const int row_i2 = i + 2 < ntiles ? tiles.tile_row(i + 2) : 0;
        float s[32];
        if (QK_EARLY) {  // mla_wgmma_qk_early
            cta.qk_issue(i, s);
            cta.pv_shared_issue(i - 1);
            wgmma_wait<0>();  // S_i and P_{i-1}·V: P's buffer and this stage's boxes free
            wgmma_hold(s);
            wgmma_hold(o);
            cta.refill(i - 1, row_j2);
        } else {
            cta.pv_shared_issue(i - 1);
            cta.qk_issue(i, s);
            wgmma_wait<1>();  // P_{i-1}·V: P's buffer and this stage's boxes free
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

    // The CTAs' merge in mla_merge.cuh's order: two splits, the cluster (rank = split) swapping
    // halves. A case a straight code path: it runs once a CTA, its instructions fetched from L2.
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
    // + 1024: the static shared memory counts against the same limit
    return mla_wgmma_takes(c, a, split_size, MLAW_HEADS, false, (size_t)MLAW_SMEM_BYTES + 1024);
}

// The grid's CTAs (units): a head group x a split x a token, one CTA per SM at a time.
static long mlaw_units(const mla_attention_args *a, int nsplit) { return (long)(a->H / MLAW_HEADS) * nsplit * a->T; }

bool mla_wgmma_merges_tokens(const cuda_ctx *c, const mla_attention_args *a, int nsplit) {
    // Where the CTAs fill half the SMs (else the merge kernel is faster); the same bits.
    const long units = mlaw_units(a, nsplit);
    return nsplit <= 2 && 2 * units >= c->num_sms && ((uintptr_t)a->out & 15u) == 0 && a->ld_out % 8 == 0;
}

// A schedule choice, the same bits either way: in a small grid Q·Kᵀ goes first, beside the
// other's softmax; in a big one the other's P·V does, so that its stage is refilled early.
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
    // Q as [T][H][L] and [T][H][R], boxes of 64 dims x 64 heads.
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
    // Head groups fastest (CTAs reading the same tiles side by side); at two splits a token's
    // CTAs are one cluster.
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
