// kernels/cuda/gemm_sm90.cu — the batch-invariant GEMM on Hopper (sm_90a): warpgroup MMA.
//
// The reduction order of one output element is gemm_plan.cuh's: split s of S = f(N, K) is the
// chain  p_s = 0; for k0 ascending in its k-tiles: p_s = wgmma_m64n128k16(p_s, ...)  and the
// result ((p_0 + p_1) + ...) in split order (S = 1: p_0, the chain over all of K). One k16 step
// (128 columns an instruction, or 72, 96, 144 or 192 on the tiles of those widths: the same
// per-element arithmetic), the K tail zero-filled. A tile is 1 or 2 warpgroups' rows (BM = 64 or
// 128) by 72, 96, 128, 144, 192 or 256 columns; its CTA walks every split itself (SPLIT_NONE,
// SPLIT_IN_CTA: a running total in registers, from -0) or computes one split and writes its fp32 partial (SPLIT_GRID, summed
// in split order by the tile's last CTA to finish, or by gemm_split_reduce_kernel). Which of
// these the launcher picks, and how the tiles were loaded, only decide who carries a chain and
// when its operands arrive, never the chain or the order of the sums, so a row has the same
// bits at every M
// (tests/test_cuda_ops.c checks it bitwise).
//
// Two kernels carry the chains, loading into STAGES shared-memory slots in the 128-byte
// swizzle layout wgmma reads:
//   gemm_sm90_ws_kernel  dense products with 16-byte aligned rows (TMA), one or a batch of them
//                        (3-D tensor maps, the product the third coordinate): warp-specialized
//                        and persistent, a producer warpgroup issuing tensor copies on full/empty
//                        mbarriers, consumer warpgroups walking work units (every dense plan
//                        except the 64 x 128 split CTAs below M = 48, which run one unit each
//                        and measured faster as gemm_sm90_kernel CTAs).
//   gemm_sm90_kernel     one tile per CTA; TMA issued by one thread STAGES-1 k-tiles ahead
//                        (the small-M split CTAs), or cp.async for everything else (MoE experts
//                        gather their rows through x_rows; unaligned strides): every thread
//                        copies 16-byte chunks (or single values), STAGES-2 ahead.
#include <cuda.h>           // CUtensorMap
#include <cuda_runtime.h>   // dim3
#include <stdint.h>         // uint8_t, uint16_t, uint64_t

#include "../bf16.h"        // float_to_bf16
#include "cuda_ctx.cuh"     // cuda_ctx, cuda_scratch, cuda_kernel_smem, CUDA_CHECK
#include "pdl.cuh"          // pdl_launch, pdl_wait_predecessor, pdl_release_dependent
#include "gemm.cuh"         // gemm_problem, gemm_view, gemm_load_rows, gemm_store_pair
#include "gemm_plan.cuh"    // gemm_plan, gemm_split_begin, GEMM_BK, the split rule
#include "mma.cuh"          // cp_async_commit, cp_async_wait
#include "tma_map.cuh"      // tma_map_bf16_2d
#include "l2_policy.cuh"    // l2_policy_evict_first
#include "wgmma.cuh"        // wgmma_*, mbar_*, tma_load_2d/3d(_hint), sw128_offset, fence_proxy_async

// The rows of x a TMA k-tile asks for: the tile's BM, or M where M is smaller (one m-tile). The
// copy engine's time goes by a box's rows, read or not: at M = 1 a 64-row box's 63 zero-filled
// rows took 7-18% of the wide shapes' time, at M = 16 0.4-12% (H200, 64 -> M rows, medians of three
// runs, us: 102400 x 2048 M = 1 129.4 -> 106.3, M = 16 125.6 -> 110.2; 129280 x 7168 M = 1 471.7
// -> 428.4; 36864 x 7168 M = 1 145.4 -> 132.2; 21888 x 2048 M = 1 34.0 -> 30.0; at M = 64 none).
// The slot's rows past M keep whatever they held; they feed only output rows past M (row m of a
// product reads row m of x alone), which no epilogue stores, so no bit of a stored row depends
// on them.
__host__ __device__ constexpr int gemm_x_box_rows(int M, int bm) { return M >= 1 && M < bm ? M : bm; }
// What a k-tile's two copies write into its slot (the slot's full barrier expects it): the x box
// and bn rows of W, GEMM_BK elements each.
__host__ __device__ constexpr uint32_t gemm_k_tile_tx_bytes(int M, int bm, int bn) {
    return (uint32_t)(gemm_x_box_rows(M, bm) + bn) * GEMM_BK * 2;
}

// Shared memory per consumer warp for the staged epilogue: 16 rows x WN columns (one wgmma
// instruction's) of bf16 (store_tile_staged), which also holds the 16 x 64 fp32 pieces of
// store_tile_staged_f32; the split CTAs (SPLIT_GRID) write fp32 partials only and take those 4 KB.
#define GEMM_STAGE_F32_BYTES (16 * 64 * 4)
__host__ __device__ constexpr int epilogue_stage_bytes(int split, int wn) {
    return split == SPLIT_GRID ? GEMM_STAGE_F32_BYTES : 16 * wn * 2;
}

// Whether a kernel stages its epilogue (VEC: its vector epilogue is compiled, always on the
// persistent kernel, on gemm_sm90_kernel's two-warpgroup tiles only): with S = 1, where
// the epilogue was about 7 us a 128 x 256 tile (H200: 24576 x 64 at M = 4096, a one-k-tile
// product, 199 -> 99 us), and for the fp32 partials of split CTAs on the persistent kernel (from
// M = 48), which write one tile each after a walk of a few k-tiles.
__host__ __device__ constexpr bool stages_epilogue(int split, bool vec) {
    return vec && (split == SPLIT_NONE || split == SPLIT_GRID);
}

// The persistent kernel's cta path (SPLIT_IN_CTA: 64 x 128 and 128 x 128 tiles; 128 x 192 below)
// stages it too where its tiles are short, at most GEMM_CTA_STAGED_MAX_KTILES k-tiles (a
// threshold of its own: that it equals GEMM_SPLIT_CTA_MAX_KTILES is measurement, not rule).
// There the unstaged epilogue's 1500 instructions a warp were a quarter of a tile's (ncu, 3072 x
// 2048 at M = 4096) and staging took 8-9% off (H200: 99.4 -> 90.9 us; 2048 x 2048 M = 8192 130.2
// -> 120.3).
// Longer tiles ran 1.5-3% slower with the 32 KB reserved (1536 x 7168 M = 4096 138.9 -> 143.2,
// 7168 x 16384 M = 256 97.1 -> 98.7; kernels/cuda/NOTES.md). fp32 outputs reserve it unused.
// The 128 x 192 tile stages on the cta path only in its TMA-store kernel (ws_has_tma_kernel): its
// 192 floats of accumulators and running total leave too few registers for the lanes' staged
// stores (ptxas: 148 bytes of spills at 240 a thread; 108 with the branch-free fold), and the
// TMA stores compiled beside its other epilogues cost its long walks 2% (1536 x 7168 at M = 4096,
// 126.6 -> 129.1 us). In that kernel it stages at every K: its TMA stores beat the vector stores
// on the long walks too (H200, medians of three: 1536 x 7168 M = 4096 / 8192 128.6 / 255.7 ->
// 122.7 / 245.9 us, 576 x 7168 M = 16384 203.0 -> 194.1). The 72-, 96- and 144-column tiles never
// stage: the stages' layouts take 64-column pieces.
// GEMM_CTA_STAGED_MAX_KTILES: gemm_plan.cuh (the tile rule weighs it).
__host__ __device__ constexpr bool ws_can_stage(int split, int wn, bool tma_only) {
    return wn == 128 || split != SPLIT_IN_CTA || (wn == 192 && tma_only);
}
// The 128 x 256 tile on the cta path: its 128 accumulators a thread leave no registers for a
// running total, which waits in L2 scratch instead (gemm_sm90_ws_kernel, fold_split_l2).
__host__ __device__ constexpr bool ws_total_in_l2(int split, int ni, int wn) {
    return split == SPLIT_IN_CTA && ni * wn == 256;
}
// The tiles with a kernel of their own for the TMA-store epilogue (gemm_sm90_ws_kernel's
// TMA_ONLY, which compiles no other epilogue; the launcher takes it wherever the TMA stores are
// taken, round robin, and at S = 1 in stream-K order too): those that defer their stores into the
// next unit, every 128-column instruction's (64 x 128 and 128 x 256, the cta path's 128 x 128),
// and the 128 x 192 tile of the cta path, which can stage only there.
__host__ __device__ constexpr bool ws_has_tma_kernel(int split, int wn) {
    return split != SPLIT_GRID && (wn == 128 || (split == SPLIT_IN_CTA && wn == 192));
}
// The 128 x 256 tile stages as it does with S = 1, whose epilogue it is once the total is in.
static bool ws_stages_epilogue(int split, int ni, int wn, int k_tiles, bool tma_only) {
    return ws_can_stage(split, wn, tma_only) &&
           (stages_epilogue(split, true) || ws_total_in_l2(split, ni, wn) ||
            (split == SPLIT_IN_CTA && (k_tiles <= GEMM_CTA_STAGED_MAX_KTILES || (wn == 192 && tma_only))));
}

#if INVAR_WGMMA
// One k-tile of the chain: 4 k16 steps, NI instructions of WN columns each (acc[i] holds WN / 2
// floats a thread). a_lo, b_lo: the low descriptor words of the tiles (wgmma_desc_sw128_lo); a
// k16 step is 32 bytes on, a block of WN rows WN x 128 bytes.
template <int NI, int WN = 128>
__device__ __forceinline__ void mma_k_tile(float (&acc)[NI][WN / 2], uint32_t a_lo, uint32_t b_lo) {
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < GEMM_BK / 16; kk++)  // k ascending: the chain's order
#pragma unroll
        for (int i = 0; i < NI; i++)
            wgmma_k16_bf16<WN>(acc[i], wgmma_desc_sw128_lo(a_lo + kk * (32 >> 4)),
                               wgmma_desc_sw128_lo(b_lo + ((i * WN * 128 + kk * 32) >> 4)));
    wgmma_commit();
}
template <int NI>
__device__ __forceinline__ void mma_k_tile(float (&acc)[NI][64], const uint8_t *a_tile, const uint8_t *b_tile) {
    mma_k_tile<NI>(acc, (uint32_t)wgmma_desc_sw128(a_tile), (uint32_t)wgmma_desc_sw128(b_tile));
}

// Lane q of each quad ends with out[t] = what lane t of the quad held in v[q]: a 4 x 4
// transpose across the quad. The indices are run-time values, so selects, not array indexing,
// keep everything in registers. Every lane of the warp must call it.
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4]) {
    const int lane = threadIdx.x % 32, q = lane & 3;
    auto pick = [&](int i) { return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3]; };
    uint32_t out[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int from = (q + k) & 3;  // lane `from` sends its v[q] (it computes q as (from - k) & 3)
        const uint32_t got = __shfl_sync(0xffffffffu, pick((q - k) & 3), (lane & ~3) | from);
#pragma unroll
        for (int t = 0; t < 4; t++) out[t] = from == t ? got : out[t];
    }
#pragma unroll
    for (int t = 0; t < 4; t++) v[t] = out[t];
}

// Epilogue of one warp: its 16 rows from row0 (rows at or past row_end skipped) by NI * WN
// columns from n0, in the accumulator layout of wgmma.cuh; one rounding to bf16, or none (fp32
// output, and every SPLIT_GRID partial). With VEC, a quad's four lanes, which hold 2 columns
// each of 8-column blocks j, transpose over 4 blocks so each lane holds one block's 8 columns
// and writes them in one 16-byte store (two for fp32), not 8 separate ones (at large M the
// pair stores cost about as much as the main loop). Tiles that end past N and unaligned outputs
// store pair by pair (except on the persistent kernel's TMA stores, store_tile_tma, which the
// copy engine clips at N). VEC = false compiles the pair stores alone: gemm_sm90_kernel's
// one-warpgroup (64-row) instantiations, the small-M split CTAs and the cp.async and scalar
// loads at any M, where a CTA writes one tile and the longer vector code cost more than it saved
// (kernels/cuda/NOTES.md); the persistent kernel compiles VEC everywhere.
//
// With `stage` (this warp's epilogue_stage_bytes(split, WN) of shared memory, where
// stages_epilogue or, on the persistent kernel, ws_stages_epilogue) the output goes through
// shared memory instead, fp32 by store_tile_staged_f32, bf16 here:
// stmatrix writes the rounded fragments as 16-byte rows, and each lane reads back and stores 16
// bytes, a warp writing two whole 256-byte row pieces an instruction: about 130 instructions a
// lane per 16 x 128 piece, against about 900 with the transposes and the software rounding
// they replaced (the epilogue was instruction-bound). fp32 output keeps the transposes on the cta
// path (F32_STAGE false below) and where no stage is reserved.
// One block of a warp's 16 x WN values (res[i] of the epilogues below) rounded to bf16 pairs:
// pairs[q] holds values 2q and 2q + 1 of the accumulator layout. NAN_FREE: no value of the warp
// is a NaN (gemm_warp_has_nan), so the converter alone rounds.
template <int WN, bool NAN_FREE>
__device__ __forceinline__ void round_pairs(const float (&v)[WN / 2], uint32_t (&pairs)[WN / 4]) {
#pragma unroll
    for (int q = 0; q < WN / 4; q++) pairs[q] = gemm_round_bf16x2<NAN_FREE>(v[2 * q], v[2 * q + 1]);
}
// The pairs into a stage by stmatrix: chunk j (8 columns) of stage row r at at(r, j), the
// stage's own layout.
template <int WN, class At>
__device__ __forceinline__ void stage_pairs(const uint32_t (&pairs)[WN / 4], At at) {
    const int lane = threadIdx.x % 32;
    // matrix (j, h): rows 8h .. 8h + 7 by columns 8j .. 8j + 7 of this warp's 16 x WN
#pragma unroll
    for (int g = 0; g < WN / 16; g++) {
        const int j = 2 * g + (lane >> 4), h = (lane >> 3) & 1;
        // j = 2g: values 8g .. 8g + 3 (pairs 4g, 4g + 1), j = 2g + 1: the next 4
        stmatrix_x4(at(8 * h + (lane & 7), j), pairs[4 * g], pairs[4 * g + 1], pairs[4 * g + 2], pairs[4 * g + 3]);
    }
}

template <int NI, int WN, bool NAN_FREE>
__device__ __forceinline__ void store_tile_staged(const gemm_problem &p, char *y, int row0, int row_end, int n0,
                                                  const float (&res)[NI][WN / 2], uint8_t *stage) {
    const int lane = threadIdx.x % 32;
    constexpr int CHUNKS = WN / 8;  // 16-byte chunks (8 columns) a stage row
    // chunk c of stage row r at r * 2 WN + ((c ^ (r % 8)) * 16): the 8 rows of one stmatrix
    // matrix, and the 32 chunks a warp reads back at once, fall in distinct banks.
    auto at = [&](int r, int c) { return stage + r * (2 * WN) + ((c ^ (r & 7)) << 4); };
#pragma unroll
    for (int i = 0; i < NI; i++) {
        uint32_t pairs[WN / 4];
        round_pairs<WN, NAN_FREE>(res[i], pairs);
        stage_pairs<WN>(pairs, at);
        __syncwarp();
#pragma unroll
        for (int t = 0; t < 16 * CHUNKS / 32; t++) {
            const int r = (32 * t + lane) / CHUNKS, c = (32 * t + lane) % CHUNKS, m = row0 + r;
            const uint4 v = *(const uint4 *)at(r, c);
            if (m < row_end) {
                const long yrow = p.y_rows ? p.y_rows[m] : m;
                *(uint4 *)((uint16_t *)y + yrow * p.ldy + n0 + i * WN + c * 8) = v;
            }
        }
        __syncwarp();  // read back before the next i overwrites the stage
    }
}

// The staged bf16 epilogue written by the copy engine (the persistent kernel, where the output
// has a tensor map: gemm_sm90_ws_kernel's tma_store), one block of 16 rows x WN columns from
// (row0, col0): once the stage's earlier boxes have been read, the warp writes its rounded pairs
// into it in the map's 128-byte swizzle layout, a 16 x 64 box in each 2 KB, and lane 0 issues a
// TMA store a box without waiting for it, so the copy engine writes while the warp goes on.
// The same bf16 values as store_tile_staged's; rows and columns past the tensor are not
// written. H200 (ncu, 4096 x 512 at M = 8192, 128 x 256 tiles): the epilogue of reading the stage
// back and storing from every lane was about 2 us a unit, as much as 3 k-tiles.
template <int WN>
__device__ __forceinline__ void tma_store_block(const CUtensorMap *tmap_y, uint8_t *stage, const uint32_t (&pairs)[WN / 4],
                                                int row0, int col0, int b) {
    static_assert(WN % 64 == 0, "whole 64-column boxes");
    const int lane = threadIdx.x % 32;
    // chunk c (8 columns) of stage row r: box c / 8, its row r, 16-byte position (c % 8) ^ (r % 8)
    auto at = [&](int r, int c) { return stage + (c >> 3) * 2048 + r * 128 + (((c & 7) ^ (r & 7)) << 4); };
    if (lane == 0) bulk_wait_read_all();  // the stage's last boxes have left
    __syncwarp();
    stage_pairs<WN>(pairs, at);
    fence_proxy_async();  // this lane's writes, visible to the copy engine
    __syncwarp();
    if (lane == 0) {
#pragma unroll
        for (int box = 0; box < WN / 64; box++) tma_store_3d(tmap_y, stage + box * 2048, col0 + box * 64, row0, b);
        bulk_commit();
    }
    __syncwarp();  // converged again before the caller's next warp-wide instruction (wgmma_wait)
}
// A warp's NI blocks one after another: with NI = 2 the second waits at once for the first's
// read (a second stage does not fit beside 128 x 256's four slots), which is why the 128 x 256
// tiles defer theirs into the next unit's first k-tiles instead (gemm_sm90_ws_kernel), in
// stream-K order too; every other 128-column tile defers its too (64 x 128 at S = 1 since
// 02d3bd7, in stream-K order as well; the cta path's 64 x 128 and 128 x 128), so the tensor pipe
// and the next unit's copies run through them.
template <int NI, int WN, bool NAN_FREE>
__device__ __forceinline__ void store_tile_tma_rounded(const CUtensorMap *tmap_y, uint8_t *stage, int row0, int n0, int b,
                                                       const float (&res)[NI][WN / 2]) {
#pragma unroll
    for (int i = 0; i < NI; i++) {
        uint32_t pairs[WN / 4];
        round_pairs<WN, NAN_FREE>(res[i], pairs);
        tma_store_block<WN>(tmap_y, stage, pairs, row0, n0 + i * WN, b);
    }
}
// The same, the rounding chosen by whether the warp holds a NaN (gemm_warp_has_nan).
template <int NI, int WN>
__device__ __forceinline__ void store_tile_tma(const CUtensorMap *tmap_y, uint8_t *stage, int row0, int n0, int b,
                                               const float (&res)[NI][WN / 2]) {
    if (gemm_warp_has_nan(res)) store_tile_tma_rounded<NI, WN, false>(tmap_y, stage, row0, n0, b, res);
    else store_tile_tma_rounded<NI, WN, true>(tmap_y, stage, row0, n0, b, res);
}

// fp32 output through the same stage, 16 rows x 64 columns (4 KB) at a time: each lane writes
// its two columns of each 8-column block with one 8-byte store, then reads back 16 bytes and
// stores them, a warp writing two whole 256-byte row pieces an instruction. The transposes this
// replaces cost a split CTA past M = 64 about as much as its walk (1536 x 7168 at M = 256: 132
// tiles of 128 x 256, 10 k-tiles each; ncu: SM throughput 20%, memory 45%).
template <int NI, int WN>
__device__ __forceinline__ void store_tile_staged_f32(const gemm_problem &p, char *y, int row0, int row_end, int n0,
                                                      const float (&res)[NI][WN / 2], uint8_t *stage) {
    static_assert(epilogue_stage_bytes(SPLIT_NONE, WN) >= GEMM_STAGE_F32_BYTES, "a 16 x 64 fp32 piece fits");
    const int lane = threadIdx.x % 32, q = lane & 3, r = lane >> 2;
    // 16-byte chunk c (4 columns) of stage row rr at rr * 256 + ((c ^ 2 (rr % 4)) * 16): a
    // half-warp's 8-byte writes (4 rows, 8 chunks) and a quarter-warp's 16-byte reads (8 chunks
    // of one row) each fall in distinct banks.
    auto at = [&](int rr, int c) { return stage + rr * 256 + ((c ^ ((rr & 3) << 1)) << 4); };
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int piece = 0; piece < WN / 64; piece++) {
#pragma unroll
            for (int jb = 0; jb < 8; jb++)  // block j = 8 piece + jb: columns 8 jb + 2q, + 1 of the piece
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int e = 4 * (8 * piece + jb) + 2 * half;
                    *(float2 *)(at(r + 8 * half, 2 * jb + (q >> 1)) + (q & 1) * 8) = make_float2(res[i][e], res[i][e + 1]);
                }
            __syncwarp();
#pragma unroll
            for (int t = 0; t < 8; t++) {
                const int rr = 2 * t + (lane >> 4), c = lane & 15, m = row0 + rr;
                const float4 v = *(const float4 *)at(rr, c);
                if (m < row_end) {
                    const long yrow = p.y_rows ? p.y_rows[m] : m;
                    *(float4 *)((float *)y + yrow * p.ldy + n0 + i * WN + piece * 64 + c * 4) = v;
                }
            }
            __syncwarp();  // read back before the next piece overwrites the stage
        }
}

// F32_STAGE: store_tile_staged_f32 compiled in (not on the cta path, whose running total it
// made the 64 x 128 kernel spill; its fp32 outputs keep the transposes).
template <int NI, bool VEC, int WN = 128, bool F32_STAGE = true>
__device__ __forceinline__ void store_tile(const gemm_problem &p, char *y, int row0, int row_end, int n0,
                                           const float (&res)[NI][WN / 2], uint8_t *stage = nullptr) {
    const int lane = threadIdx.x % 32, q = lane & 3, r = lane >> 2;
    const bool vec = VEC && n0 + NI * WN <= p.N && ((uintptr_t)y & 15u) == 0 && p.ldy % (p.y_f32 ? 4 : 8) == 0;
    if constexpr (VEC && WN % 64 == 0) {  // the stages' layouts take 64-column pieces
        if (vec && stage) {
            if (!p.y_f32) {
                if (gemm_warp_has_nan(res)) store_tile_staged<NI, WN, false>(p, y, row0, row_end, n0, res, stage);
                else store_tile_staged<NI, WN, true>(p, y, row0, row_end, n0, res, stage);
                return;
            }
            if constexpr (F32_STAGE) {
                store_tile_staged_f32<NI, WN>(p, y, row0, row_end, n0, res, stage);
                return;
            }
        }
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int m = row0 + r + half * 8;
        const bool row_ok = m < row_end;
        const long yrow = row_ok ? (p.y_rows ? p.y_rows[m] : m) : 0;
        if (!vec) {
            if (!row_ok) continue;
#pragma unroll
            for (int i = 0; i < NI; i++)
#pragma unroll
                for (int j = 0; j < WN / 8; j++) {
                    const int n = n0 + i * WN + j * 8 + 2 * q;
                    gemm_store_pair(p, y, yrow, n, res[i][4 * j + 2 * half], res[i][4 * j + 2 * half + 1]);
                }
            continue;
        }
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < NI; i++)
#pragma unroll
                for (int jj = 0; jj < WN / 32; jj++) {  // blocks j = 4 jj + t; this lane ends with j = 4 jj + q
                    const int n = n0 + i * WN + (4 * jj + q) * 8;
                    uint32_t lo[4], hi[4];
#pragma unroll
                    for (int t = 0; t < 4; t++) {
                        const int e = 4 * (4 * jj + t) + 2 * half;
                        const float a = res[i][e], b = res[i][e + 1];
                        if (p.y_f32) {
                            lo[t] = __float_as_uint(a);
                            hi[t] = __float_as_uint(b);
                        } else {
                            lo[t] = gemm_round_bf16x2(a, b);
                        }
                    }
                    quad_transpose(lo);  // lo[t]: columns 2t, 2t + 1 of this lane's block
                    if (p.y_f32) {
                        quad_transpose(hi);
                        if (!row_ok) continue;
                        float4 *dst = (float4 *)((float *)y + yrow * p.ldy + n);
                        dst[0] = make_float4(__uint_as_float(lo[0]), __uint_as_float(hi[0]), __uint_as_float(lo[1]),
                                             __uint_as_float(hi[1]));
                        dst[1] = make_float4(__uint_as_float(lo[2]), __uint_as_float(hi[2]), __uint_as_float(lo[3]),
                                             __uint_as_float(hi[3]));
                    } else if (row_ok) {
                        *(uint4 *)((uint16_t *)y + yrow * p.ldy + n) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
                    }
                }
            // 72 and 144 columns: the last 8 or 16 past the 32-column blocks, pair by pair
            if (!row_ok) continue;
#pragma unroll
            for (int i = 0; i < NI; i++)
#pragma unroll
                for (int j = WN / 32 * 4; j < WN / 8; j++) {
                    const int n = n0 + i * WN + j * 8 + 2 * q;
                    gemm_store_pair(p, y, yrow, n, res[i][4 * j + 2 * half], res[i][4 * j + 2 * half + 1]);
                }
        }
    }
}

// The running total's start: -0, so that folding p_0 into it gives p_0's bits exactly
// (-0 + x = x for every x, +0 and -0 included; +0 would turn an exact -0 into +0), and every
// fold is the same add with no first-split branch (the branch made ptxas spill the cta path's
// second chain: two copies of the total).
#define GEMM_TOTAL_START (-0.0f)

// SPLIT_IN_CTA at the last k-tile of a split: total += acc, acc = 0 for a later split's chain.
// The split's last wgmma must have written acc (retired by a wgmma_wait).
template <int NI, int WN = 128>
__device__ __forceinline__ void fold_split(float (&total)[NI][WN / 2], float (&acc)[NI][WN / 2]) {
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < WN / 2; e++) {
            total[i][e] += acc[i][e];
            acc[i][e] = 0.0f;
        }
    // The zeros are written here, not sunk by the compiler to the chain's next wgmma (inside
    // another chain's wgmma stage, where ptxas would serialize them all: C7515).
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
}

// The same fold with the running total in L2 (ws_total_in_l2): this consumer thread's float4
// piece c of it at totals[(blockIdx.x PIECES + c) threads + threadIdx.x] (a warp's 16-byte
// pieces adjacent), this CTA's alone, so only the thread's own program order is needed between
// its stores and its loads. Split 0 stores p_0 as it is (the -0 start's exact result), every
// later split total + p_s, each restarting acc at 0; after the last, load_total_l2 brings the sum
// back for the epilogue. A fold moves 128 KB a CTA each way, which pays for long splits only
// (gemm_plan.cuh, GEMM_SPLIT_L2_TOTAL_MIN_KTILES). The last sum goes out and back rather than
// staying in acc: adding loaded values into the live accumulators before the epilogue made ptxas
// spill them (12 to 900 bytes, however the loads were grouped), loading into zeroed ones does not.
// A later split's fold loads TOTAL_L2_LOADS_IN_FLIGHT pieces of the total before it stores any:
// __stcg clobbers memory, so written piece by piece (load, add, store), no load issued before
// the previous piece's store: one L2 round trip a piece, 32 a fold (H200, one run, 7168 x 16384
// at M = 1024 / 4096: 362 / 1348 us piece by piece, 349 / 1306 four at a time, 345 / 1290 with
// the loads left out). Eight at a time spill (108 bytes beside the 128 accumulators and the
// deferred stores' 64 pairs). The first batch (`head`, total_l2_head) is loaded before the
// split's last wgmma are drained, so its round trip runs under the drain: 0.6-0.8% at 7168 x
// 16384 / 18432, M = 1024 and 4096 (H200, medians of three: 344.8 -> 342.3 us, 1427.0 -> 1416.7).
#define TOTAL_L2_LOADS_IN_FLIGHT 4
template <int NI, int WN>
__device__ __forceinline__ float4 *total_l2_of(float4 *totals, int threads) {
    return totals + ((long)blockIdx.x * (NI * WN / 8) * threads + threadIdx.x);
}
// fold_split_l2's first batch of loads (pieces 0 .. TOTAL_L2_LOADS_IN_FLIGHT - 1), unused when
// `first` (nothing stored yet: zeros, no load).
template <int NI, int WN>
__device__ __forceinline__ void total_l2_head(float4 *totals, int threads, bool first,
                                              float4 (&head)[TOTAL_L2_LOADS_IN_FLIGHT]) {
    const float4 *const mine = total_l2_of<NI, WN>(totals, threads);
#pragma unroll
    for (int b = 0; b < TOTAL_L2_LOADS_IN_FLIGHT; b++)
        head[b] = first ? make_float4(0.f, 0.f, 0.f, 0.f) : __ldcg(mine + (long)b * threads);
}
template <int NI, int WN>
__device__ __forceinline__ void fold_split_l2(float4 *totals, int threads, float (&acc)[NI][WN / 2], bool first,
                                              const float4 (&head)[TOTAL_L2_LOADS_IN_FLIGHT]) {
    static_assert(WN % 8 == 0, "whole float4 pieces");
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
    float4 *const mine = total_l2_of<NI, WN>(totals, threads);
    constexpr int PER_ROW = WN / 8, PIECES = NI * PER_ROW;
    static_assert(PIECES % TOTAL_L2_LOADS_IN_FLIGHT == 0, "whole batches");
#pragma unroll
    for (int c0 = 0; c0 < PIECES; c0 += TOTAL_L2_LOADS_IN_FLIGHT) {
        float4 u[TOTAL_L2_LOADS_IN_FLIGHT];
        if (!first) {
#pragma unroll
            for (int b = 0; b < TOTAL_L2_LOADS_IN_FLIGHT; b++)
                u[b] = c0 == 0 ? head[b] : __ldcg(mine + (long)(c0 + b) * threads);
        }
#pragma unroll
        for (int b = 0; b < TOTAL_L2_LOADS_IN_FLIGHT; b++) {
            const int i = (c0 + b) / PER_ROW, e = (c0 + b) % PER_ROW * 4;
            float4 t = make_float4(acc[i][e], acc[i][e + 1], acc[i][e + 2], acc[i][e + 3]);
            if (!first) t = make_float4(u[b].x + t.x, u[b].y + t.y, u[b].z + t.z, u[b].w + t.w);
            __stcg(mine + (long)(c0 + b) * threads, t);
        }
    }
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < WN / 2; e++) acc[i][e] = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
}
template <int NI, int WN>
__device__ __forceinline__ void load_total_l2(float4 *totals, int threads, float (&acc)[NI][WN / 2]) {
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
    const float4 *const mine = total_l2_of<NI, WN>(totals, threads);
    constexpr int PER_ROW = WN / 8, PIECES = NI * PER_ROW;  // fold_split_l2's pieces, in its order
#pragma unroll
    for (int c = 0; c < PIECES; c++) {
        const int i = c / PER_ROW, e = c % PER_ROW * 4;
        const float4 u = __ldcg(mine + (long)c * threads);
        acc[i][e] = u.x;
        acc[i][e + 1] = u.y;
        acc[i][e + 2] = u.z;
        acc[i][e + 3] = u.w;
    }
}
#endif

// --- SPLIT_GRID's sum: ((p_0 + p_1) + p_2) + ... in split order, one rounding --------------------

// The partials [splits][per_split] at flat index i .. i + W - 1 (one row of [M][N]: W = 4 needs
// N % 4 == 0), summed in split order and stored to y as bf16 (or fp32). Shared by the last CTA
// of a tile (gemm_sm90_kernel) and gemm_split_reduce_kernel: one order on both. __ldcg: other
// CTAs wrote the partials, so read them from L2, never from a stale L1 line.
// The partials are loaded SPLIT_SUM_LOADS_IN_FLIGHT splits at a time, then added in split order.
// Loaded and added one split after another, the loads sat between the dependent adds in program
// order (__ldcg is a volatile asm, kept in order) and were not hoisted: about one L2 round trip a
// split, in series (H200, medians of three, M = 1 / 16 / 64 / 256: 576 x 7168, S = 18, 12.1 / 13.0
// / 15.4 / 17.8 -> 9.7 / 10.6 / 13.2 / 15.9 us; 1536 x 7168, S = 11, 14.3 / 15.3 / 18.1 / 23.8 ->
// 12.7 / 13.7 / 16.5 / 23.0; 8 or 32 at a time within the runs' spread). The reduce kernel's
// four-column version takes 86 registers for it (32 before): fewer threads, more loads each.
#define SPLIT_SUM_LOADS_IN_FLIGHT 16
template <int W>
__device__ __forceinline__ void split_sum_store(const float *partials, long per_split, int splits, long i, int N,
                                                void *y, long ldy, bool y_f32) {
    float t[W];
    for (int s0 = 0; s0 < splits; s0 += SPLIT_SUM_LOADS_IN_FLIGHT) {
        float ps[SPLIT_SUM_LOADS_IN_FLIGHT][W];
#pragma unroll
        for (int b = 0; b < SPLIT_SUM_LOADS_IN_FLIGHT; b++) {
            if (s0 + b >= splits) break;
            const float *const at = partials + (long)(s0 + b) * per_split + i;
            if constexpr (W == 4) {
                const float4 v = __ldcg((const float4 *)at);
                ps[b][0] = v.x; ps[b][1] = v.y; ps[b][2] = v.z; ps[b][3] = v.w;
            } else {
                ps[b][0] = __ldcg(at);
            }
        }
#pragma unroll
        for (int b = 0; b < SPLIT_SUM_LOADS_IN_FLIGHT; b++) {
            if (s0 + b >= splits) break;
#pragma unroll
            for (int e = 0; e < W; e++) t[e] = (s0 + b == 0) ? ps[b][e] : t[e] + ps[b][e];
        }
    }
    const long m = i / N, n = i % N;
#pragma unroll
    for (int e = 0; e < W; e++) {
        if (y_f32) ((float *)y)[m * ldy + n + e] = t[e];
        else ((uint16_t *)y)[m * ldy + n + e] = (uint16_t)gemm_round_bf16x2(t[e], 0.0f);
    }
}

// Where gemm_sm90_kernel's SPLIT_GRID CTAs put the sum: each CTA writes its split's partial,
// then counts itself in its tile's arrival counter; the one that arrives last adds the
// partials in split order (split_sum_store) and resets the counter, so no second kernel is
// launched (at small M, where these CTAs run, that launch cost about as much as the product).
struct gemm_split_out {
    void *y;
    long ldy;
    bool y_f32;
    unsigned *arrivals;  // [tiles of the launch], 0 before and after every launch; NULL: the
                         // reduce kernel sums instead
};

#if INVAR_WGMMA
// The CTA of tile `tile` (rows m0 .., columns n0 ..) after storing its partial: returns once
// its partial is counted; the last of the tile's `splits` CTAs also writes the tile's sum
// (S x rows x 512 bytes from L2 through one SM: quick for a few rows, which is why
// GEMM_SPLIT_LAST_CTA_MAX_M is small).
template <int BM, int BN, int THREADS>
__device__ __forceinline__ void split_finish_tile(const gemm_problem &p, const gemm_split_out &out, int splits,
                                                  int tile, int m0, int n0) {
    __shared__ bool last;
    __threadfence();  // this CTA's partial is visible device-wide before it is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(&out.arrivals[tile], 1u) == (unsigned)splits - 1;
        if (last) out.arrivals[tile] = 0;  // ready for the next launch (stream order)
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other splits' partials, counted before, are visible to this CTA
    const float *partials = (const float *)p.y;
    const int rows = min(BM, p.M - m0), cols = min(BN, p.N - n0);
    if (p.N % 4 == 0) {
        const int groups = cols / 4;
        for (int g = threadIdx.x; g < rows * groups; g += THREADS)
            split_sum_store<4>(partials, p.stride_y, splits, (long)(m0 + g / groups) * p.N + n0 + 4 * (g % groups),
                               p.N, out.y, out.ldy, out.y_f32);
    } else {
        for (int g = threadIdx.x; g < rows * cols; g += THREADS)
            split_sum_store<1>(partials, p.stride_y, splits, (long)(m0 + g / cols) * p.N + n0 + g % cols, p.N,
                               out.y, out.ldy, out.y_f32);
    }
}
#endif

// --- stream-K order: a chain handed from one CTA to the next (gemm_plan.cuh) ----------------

// Where the persistent kernel's CTAs hand their cut units over: CTA c's consumer thread t keeps
// its state (NS floats: the accumulators, then IN_CTA's running total) at
// state[(c * NS + e) * threads + t] (a warp's lanes adjacent: coalesced), and each consumer warp w raises
// ready[c * warps + w] once its part is stored. Only warp w of CTA c + 1 reads it, and puts the
// flag back to 0 for the next launch. state == NULL: the round-robin walk.
struct gemm_handoff {
    float *state;
    unsigned *ready;
    float4 *totals;  // ws_total_in_l2: each CTA's running total, gridDim.x x (CW 128 threads) x NI WN / 2 floats
    int rr_units;    // stream-K order: the units walked round robin first (whole rounds of gridDim.x)
};

#if INVAR_WGMMA
__device__ __forceinline__ void flag_release(unsigned *flag, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned flag_acquire(const unsigned *flag) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
    return v;
}

// CTA cta's state for this consumer thread (its float e at [e * threads]), and warp_id's flag.
__device__ __forceinline__ float *handoff_state(const gemm_handoff &ho, long cta, int floats, int threads) {
    return ho.state + cta * floats * threads + threadIdx.x;
}
__device__ __forceinline__ unsigned *handoff_flag(const gemm_handoff &ho, long cta, int threads, int warp_id) {
    return &ho.ready[cta * (threads / 32) + warp_id];
}

// This warp's part of the chain state, stored exactly, then announced. Every lane's stores are
// ordered before the flag by its own fence and the warp barrier.
template <int NI, bool TOTAL, int WN, int NT = TOTAL ? NI : 0, int F = WN / 2>
__device__ __forceinline__ void hand_out(const gemm_handoff &ho, const float (&acc)[NI][F],
                                         const float (&total)[TOTAL ? NI : 1][F], int threads, int warp_id) {
    float *const st = handoff_state(ho, blockIdx.x, (NI + NT) * F, threads);
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < F; e++) __stcg(st + (long)(i * F + e) * threads, acc[i][e]);
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < F; e++) __stcg(st + (long)((NI + i) * F + e) * threads, total[i][e]);
    __threadfence();
    __syncwarp();
    if (threadIdx.x % 32 == 0) flag_release(handoff_flag(ho, blockIdx.x, threads, warp_id), 1u);
}

// The state the same warp of CTA blockIdx.x - 1 handed out, once it is there (take: else zeros,
// a fresh chain): the registers continue its chain exactly. Branch-free: with the loads under a
// branch ptxas serialized the wgmma that follow (C7515).
template <int NI, bool TOTAL, int WN, int NT = TOTAL ? NI : 0, int F = WN / 2>
__device__ __forceinline__ void start_chain(const gemm_handoff &ho, bool take, float (&acc)[NI][F],
                                            float (&total)[TOTAL ? NI : 1][F], int threads, int warp_id) {
    const long from = blockIdx.x - 1;
    if (take) {
        unsigned *const flag = handoff_flag(ho, from, threads, warp_id);
        while (flag_acquire(flag) == 0u) __nanosleep(64);
        __syncwarp();  // every lane has seen the flag before lane 0 resets it
        if (threadIdx.x % 32 == 0) *flag = 0u;
    }
    const float *const st = take ? handoff_state(ho, from, (NI + NT) * F, threads) : nullptr;
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < F; e++) acc[i][e] = take ? __ldcg(st + (long)(i * F + e) * threads) : 0.0f;
#pragma unroll
    for (int i = 0; i < (TOTAL ? NI : 1); i++)
#pragma unroll
        for (int e = 0; e < F; e++) total[i][e] = TOTAL && take ? __ldcg(st + (long)((NI + i) * F + e) * threads) : GEMM_TOTAL_START;
}
#endif

// --- the warp-specialized persistent kernel (dense products, TMA) ---------------------------
//
// Warpgroups 0..CW-1 are the consumers, 64 rows each; warpgroup CW is the producer: one of its
// threads issues every TMA copy. A whole warpgroup, because registers are shared per SM
// quadrant: the producer gives its registers back (setmaxnreg 24; 56 with one consumer) so each
// consumer thread may hold 240 (248 with one): the cta path of 128-column tiles carries two
// chains and a running total (64 + 64 + 64 a thread; 72 + 72 + 72 at 144 columns), the 128 x 192
// one 96 + 96, the 128 x 256 one 128 accumulators (its total in L2). A 12-warp CTA (CW = 2)
// launches at 168 registers a thread at most (384 x 168 of the SM's 64 K), so there the budgets
// fill that pool exactly, 128 x 24 + 256 x 240 = 384 x 168, the 168 ptxas gives every thread at
// launch (1 CTA per SM); an 8-warp CTA (CW = 1) launches at 248 (256 x 248 registers hold
// 128 x 56 + 128 x 248: the producer keeps 56 since its weight copies' cache hint, at 40 the
// stream-K kernels spilled). tests/gpu_gemm_check.sh fails if ptxas reports other counts: a
// smaller one would leave setmaxnreg.inc waiting forever.
// STAGES slots, each with a `full` barrier (completed by the copy engine) and an `empty` barrier
// (each consumer warp arrives once its wgmma have read the slot), so the producer runs up to
// STAGES k-tiles ahead of the consumers with no block-wide barrier, and across work units: while
// the consumers store one tile the next tile's operands arrive. At most one CTA per SM; CTA b
// takes work units b, b + gridDim.x, ..., or with `ho` an even share of their k-tiles in
// stream-K order (gemm_plan.cuh). A unit is a BM x BN tile (SPLIT_GRID: a tile and one
// split, split-major so a wave's CTAs read the same k range), tiles in gemm_tile_of's order. Each
// unit's chains, and the order its splits are added, are exactly gemm_sm90_kernel's: the two
// kernels give the same bits. staged (ws_stages_epilogue): the epilogue goes through
// epilogue_stage_bytes(WN) a consumer warp, past the slots.
template <int CW, int NI, int WN, int STAGES, int SPLIT, bool STREAM, bool TMA_ONLY>
__global__ void __launch_bounds__((CW + 1) * 128, 1)
gemm_sm90_ws_kernel(gemm_problem p, int batch, int splits, int m_tiles, int n_tiles, gemm_handoff ho, bool staged,
                    bool tma_store, const __grid_constant__ CUtensorMap tmap_x, const __grid_constant__ CUtensorMap tmap_w,
                    const __grid_constant__ CUtensorMap tmap_y) {
#if INVAR_WGMMA
    constexpr int BM = 64 * CW, BN = WN * NI;
    constexpr int A_BYTES = BM * GEMM_BK * 2, STAGE_BYTES = A_BYTES + BN * GEMM_BK * 2;
    const uint32_t stage_tx = gemm_k_tile_tx_bytes(p.M, BM, BN);
    constexpr int PRODUCER_REGS = CW == 2 ? 24 : 56, CONSUMER_REGS = CW == 2 ? 240 : 248;
    static_assert(CW == 1 || 128 * PRODUCER_REGS + CW * 128 * CONSUMER_REGS == (CW + 1) * 128 * 168,
                  "the budgets fill the launch's 168 registers a thread exactly");
    static_assert(CW == 2 || (PRODUCER_REGS % 8 == 0 && 128 * (PRODUCER_REGS + CONSUMER_REGS) <= 256 * 248),
                  "the one-consumer budgets fit the launch's 248 registers a thread");
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];

    if constexpr (SPLIT == SPLIT_GRID) pdl_release_dependent();  // the reduce may start up now
    const int KT = (p.K + GEMM_BK - 1) / GEMM_BK, tiles = m_tiles * n_tiles;
    // Products one after another (SPLIT_GRID runs one product), each unit of a product a tile,
    // or with SPLIT_GRID a tile and a split.
    const int per_product = SPLIT == SPLIT_GRID ? tiles * splits : tiles, units = batch * per_product;
    // A piece of work: k-tiles [kt_begin, kt_end) of a unit; hand_out: the unit's first k-tiles,
    // whose state goes to the next CTA; take_over: its last ones, from the state of the previous.
    struct unit { int b, m0, n0, split, kt_begin, kt_end; bool hand_out, take_over; };
    auto unit_at = [&](int u) {
        unit work;
        int m_tile, n_tile;
        work.b = batch == 1 ? 0 : u / per_product;  // (a division less before the first copy)
        u -= work.b * per_product;
        work.split = SPLIT == SPLIT_GRID ? u / tiles : 0;
        gemm_tile_of(u - work.split * tiles, m_tiles, n_tiles, &m_tile, &n_tile);
        work.m0 = m_tile * BM;
        work.n0 = n_tile * BN;
        work.kt_begin = SPLIT == SPLIT_GRID ? gemm_split_begin(work.split, splits, KT) : 0;
        work.kt_end = SPLIT == SPLIT_GRID ? gemm_split_begin(work.split + 1, splits, KT) : KT;
        work.hand_out = work.take_over = false;
        return work;
    };
    // This CTA's pieces, in the order it computes them. Round robin: units blockIdx.x,
    // + gridDim.x, ... Stream-K (ho.state, never SPLIT_GRID): first ho.rr_units / gridDim.x
    // rounds of round robin, then (the launcher guarantees more units left than CTAs) the k-tiles
    // [lo, hi) of the remaining units laid end to end, the head of the unit it ends inside first,
    // then its whole units, then the tail of the unit it starts inside.
    constexpr bool stream = STREAM;
    static_assert(!STREAM || SPLIT != SPLIT_GRID, "stream-K order walks whole chains, never GRID splits");
    const int rr_pieces = stream ? ho.rr_units / (int)gridDim.x : 0;
    const long rr_kt = stream ? (long)ho.rr_units * KT : 0, sk_kt = (long)units * KT - rr_kt;
    const long lo = stream ? rr_kt + sk_kt * blockIdx.x / gridDim.x : 0,
               hi = stream ? rr_kt + sk_kt * (blockIdx.x + 1) / gridDim.x : 0;
    const bool head = stream && hi % KT != 0, tail = stream && lo % KT != 0;
    const int first_whole = (int)((lo + KT - 1) / KT);
    const int sk_pieces = (int)head + (int)(hi / KT - first_whole) + (int)tail;
    const int pieces = stream ? rr_pieces + sk_pieces
                              : ((int)blockIdx.x < units ? (units - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0);
    auto piece_at = [&](int j) {
        if (!stream || j < rr_pieces) return unit_at((int)blockIdx.x + j * (int)gridDim.x);
        j -= rr_pieces;
        unit work;
        if (head && j == 0) {
            work = unit_at((int)(hi / KT));
            work.kt_end = (int)(hi % KT);
            work.hand_out = true;
        } else if (tail && j == sk_pieces - 1) {
            work = unit_at((int)(lo / KT));
            work.kt_begin = (int)(lo % KT);
            work.take_over = true;
        } else {
            work = unit_at(first_whole + j - (int)head);
        }
        return work;
    };

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CW * 4);
        }
        mbar_init_fence();
    }
    __syncthreads();  // the last block-wide barrier: the producer's idle threads leave now

    if (threadIdx.x >= CW * 128) {
        setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x != CW * 128) return;
        // The k-tiles this CTA issues go to slot 0, 1, .., STAGES - 1, 0, ..; `slot_round` counts
        // the passes over the slots, whose parity the barriers track (counters rather than a
        // k-tile index divided by STAGES: at STAGES = 6 a division in the loop).
        int slot = 0;
        uint32_t slot_round = 0;
        // One row tile (M <= BM): every weight byte is read once, so its lines are the first L2
        // gives up, and x's stay. Past it the row tiles a wave computes share each weight tile
        // through L2, and the copies carry no hint. H200, dev builds, medians of three, us: M = 64
        // 24576 x 1536 25.6 -> 25.0, 21888 x 2048 28.7 -> 28.2, 102400 x 2048 111.0 -> 109.8,
        // 36864 x 7168 134.7 -> 132.5; M = 1 0-0.9 us; x copies kept in L2 (evict_last) gained nothing.
        for (int j = 0; j < pieces; j++) {
            const unit work = piece_at(j);
            for (int kt = work.kt_begin; kt < work.kt_end; kt++) {
                // the slot's previous use read by every consumer warp
                if (slot_round > 0) mbar_wait(&empty[slot], (slot_round & 1u) ^ 1u);
                uint8_t *s = smem + slot * STAGE_BYTES;
                mbar_expect_tx(&full[slot], stage_tx);
                tma_load_3d(s, &tmap_x, &full[slot], kt * GEMM_BK, work.m0, work.b);
                if (m_tiles == 1)  // (the policy made at each copy: one held across the loop spilled)
                    tma_load_3d_hint(s + A_BYTES, &tmap_w, &full[slot], kt * GEMM_BK, work.n0, work.b,
                                     l2_policy_evict_first());
                else tma_load_3d(s + A_BYTES, &tmap_w, &full[slot], kt * GEMM_BK, work.n0, work.b);
                if (++slot == STAGES) {
                    slot = 0;
                    slot_round++;
                }
            }
        }
        return;
    }

    setmaxnreg_inc<CONSUMER_REGS>();
    const int cw = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    auto release = [&](int freed) {  // this warp's wgmma have read slot `freed`: it may refill
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[freed]);
    };
    // IN_CTA's running total: in registers, or for 128 x 256 tiles in this CTA's L2 scratch
    constexpr bool TOTAL_L2 = ws_total_in_l2(SPLIT, NI, WN), TOTAL = SPLIT == SPLIT_IN_CTA && !TOTAL_L2;
    static_assert(!TOTAL_L2 || !STREAM, "stream-K hands over register chains only");
    // The cta path of tiles up to 144 columns carries two chains a thread (acc, acc2: consecutive
    // splits alternate), so a split's fold into the running total waits only for its own last
    // wgmma, retired by the next split's first wgmma_wait<1>, while the next split's wgmma run;
    // with one chain the fold waited for every wgmma (wgmma_wait<0>) and the tensor pipe idled
    // through the fold and the restart. H200, 128 x 128 tiles: 1536 x 7168 M = 1024 47.9 -> 45.3
    // us, 3072 x 2048 M = 4096 86.8 -> 82.6, 2048 x 2048 M = 8192 113.7 -> 108.6 (64 x 128, 576 x
    // 7168 M = 1024: no change). The 128 x 192 tile's 96 + 96 + 96 values do not fit, and the
    // stream-K order's hand-over code beside two chains spilled: those fold the old way.
    constexpr bool TWO_CHAINS = TOTAL && WN != 192 && !STREAM;
    float acc[NI][WN / 2];
    float acc2[TWO_CHAINS ? NI : 1][WN / 2];
    float total[TOTAL ? NI : 1][WN / 2];
    // Slots in the producer's order; prev_slot is the one whose release waits for the next
    // k-tile's wgmma_wait<1>. The descriptors of slot 0's tiles (this warpgroup's rows of A)
    // are built once and stepped by their low word: cw taken from lane 0 so the compiler knows
    // it is the same across the warp and keeps them in uniform registers.
    int slot = 0, prev_slot = 0;
    uint32_t slot_round = 0;
    const int cw_uniform = __shfl_sync(0xffffffffu, cw, 0);
    const uint32_t a_lo = (uint32_t)wgmma_desc_sw128(smem + cw_uniform * 64 * 128);
    const uint32_t b_lo = (uint32_t)wgmma_desc_sw128(smem + A_BYTES);
    const int row_in_tile = cw * 64 + warp * 16;
    uint8_t *const stage = ws_can_stage(SPLIT, WN, TMA_ONLY) && staged
                               ? smem + STAGES * STAGE_BYTES + (cw * 4 + warp) * epilogue_stage_bytes(SPLIT, WN)
                               : nullptr;
    // The 128-column instructions' TMA-store epilogue, deferred: a unit ends by rounding its sum
    // into bf16 pairs (WN / 4 registers a block a thread: 64 beside the next unit's 128
    // accumulators at 128 x 256), and the next unit stores them a block a k-tile, each after
    // issuing that k-tile's wgmma, so the tensor pipe runs through the stores; with the blocks
    // stored at the unit's end it idled through them, and 128 x 256's second waited for the copy
    // engine to read the first. `pending_next`: the next block of `pending` to store, NI when none
    // is. Blocks a unit had too few k-tiles to store go out at its end, the CTA's last unit's
    // after the loop. Only in the TMA_ONLY kernel (the other epilogues compiled beside the
    // pending pairs spilled 350-730 bytes), which is launched with tma_store and a stage only; the
    // cta path's 128-column tiles store in their first split's k-tiles only (TWO_CHAINS below).
    static_assert(!TMA_ONLY || (ws_has_tma_kernel(SPLIT, WN) && (!STREAM || SPLIT == SPLIT_NONE)), "a TMA-store kernel: stream-K order only at S = 1");
    constexpr bool DEFER = TMA_ONLY && WN == 128;
    uint32_t pending[DEFER ? NI : 1][WN / 4];
    int pending_next = NI, pending_row0 = 0, pending_n0 = 0, pending_b = 0;
    auto store_pending = [&](int i) {  // block i of the pending output (i a constant after unrolling)
        if constexpr (DEFER) tma_store_block<WN>(&tmap_y, stage, pending[i], pending_row0, pending_n0 + i * WN, pending_b);
    };
    // One k-tile of a chain into `chain`: wait for the slot, issue its wgmma, retire the
    // previous k-tile's (wgmma_wait<1>) and free that slot (none before the piece's first).
    // may_store = false (a constant where it is called) keeps the pending pairs out of that loop.
    auto k_tile = [&](float (&chain)[NI][WN / 2], int kt, int kt_begin, bool may_store = true) {
        mbar_wait(&full[slot], slot_round & 1u);
        const uint32_t slot_lo = (uint32_t)slot * (STAGE_BYTES >> 4);  // in descriptor units
        mma_k_tile<NI, WN>(chain, a_lo + slot_lo, b_lo + slot_lo);
        if constexpr (DEFER) {
            if (may_store && pending_next < NI) {
#pragma unroll
                for (int i = 0; i < NI; i++)
                    if (pending_next == i) store_pending(i);
                pending_next++;
            }
        }
        wgmma_wait<1>();  // the previous k-tile's wgmma are done
        if (kt > kt_begin) release(prev_slot);
        prev_slot = slot;
        if (++slot == STAGES) {
            slot = 0;
            slot_round++;
        }
    };
    for (int j = 0; j < pieces; j++) {
        const unit work = piece_at(j);
        if constexpr (stream) {
            start_chain<NI, TOTAL, WN>(ho, work.take_over, acc, total, CW * 128, cw * 4 + warp);
        } else {
#pragma unroll
            for (int i = 0; i < NI; i++)
#pragma unroll
                for (int e = 0; e < WN / 2; e++) {
                    acc[i][e] = 0.0f;
                    if constexpr (TOTAL && !(TWO_CHAINS && DEFER)) total[i][e] = GEMM_TOTAL_START;
                }
        }
        if constexpr (TWO_CHAINS) {
            // A whole unit (round robin): split s into acc (s even) or acc2 (s odd); split s - 1
            // goes into the total once split s's first k-tile has retired its wgmma, which
            // leaves its chain zeroed for split s + 1.
            int kt = 0;
            if constexpr (DEFER) {
                // Split 0 on its own, the last unit's pending pairs stored in its first k-tile,
                // then drained: only there are they live, beside acc alone (stored anywhere in
                // the pair loop below they stayed live through it, beside acc, acc2 and the
                // total: 4 bytes of spills at 128 x 128, 12 at 64 x 128). Drains per unit:
                // 1 + ceil((S - 1) / 2) against ceil(S / 2), the same at odd S (5 on 2048 and
                // 3072 x 2048, where it was measured), one more at even S (2 on 7168 x 2048, 4 on
                // 4096 x 2048: not measured).
#pragma unroll 1
                for (const int end = gemm_split_begin(1, splits, KT); kt < end; kt++) k_tile(acc, kt, 0);
                wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < NI; i++)
#pragma unroll
                    for (int e = 0; e < WN / 2; e++) total[i][e] = GEMM_TOTAL_START;
            }
#pragma unroll
            for (int i = 0; i < NI; i++)
#pragma unroll
                for (int e = 0; e < WN / 2; e++) acc2[i][e] = 0.0f;
            auto run_split = [&](float (&chain)[NI][WN / 2], float (&done)[NI][WN / 2], int s) {
                const int end = gemm_split_begin(s + 1, splits, KT);
                k_tile(chain, kt, 0, false);
                if (s > 0) fold_split<NI, WN>(total, done);
#pragma unroll 1
                for (kt++; kt < end; kt++) k_tile(chain, kt, 0, false);
            };
            // Splits in pairs, each pair drained at the loop's back edge and the odd last split
            // before the paths merge: where ptxas cannot tell on every path which chain a
            // pending wgmma group writes, it serializes every wgmma of the kernel (C7514,
            // C7515). One drain per two splits. With DEFER the pairs start at split 1 (in acc2,
            // split 0 waiting in acc for its fold): the same chain for every split.
            int s = DEFER ? 1 : 0;
            auto &pair_first = *[&] {  // the chain of a pair's first split, and of its second
                if constexpr (DEFER) return &acc2;
                else return &acc;
            }();
            auto &pair_second = *[&] {
                if constexpr (DEFER) return &acc;
                else return &acc2;
            }();
#pragma unroll 1
            for (; s + 2 <= splits; s += 2) {
                run_split(pair_first, pair_second, s);
                run_split(pair_second, pair_first, s + 1);
                wgmma_wait<0>();
            }
            if (s < splits) {
                run_split(pair_first, pair_second, s);
                wgmma_wait<0>();
            }
            release(prev_slot);
#pragma unroll
            for (int i = 0; i < NI; i++) {
                wgmma_hold(acc[i]);
                wgmma_hold(acc2[i]);
            }
            if (splits & 1) fold_split<NI, WN>(total, acc);
            else fold_split<NI, WN>(total, acc2);
        } else if constexpr (TOTAL_L2) {
            // A whole unit (round robin), split after split into acc, each folded into the
            // total in L2 after its last wgmma; then the sum back into acc for the epilogue.
            int kt = 0;
#pragma unroll 1
            for (int s = 0; s < splits; s++) {
                const int end = gemm_split_begin(s + 1, splits, KT);
#pragma unroll 1
                for (; kt < end; kt++) k_tile(acc, kt, 0);
                float4 head[TOTAL_L2_LOADS_IN_FLIGHT];  // issued ahead of the drain
                total_l2_head<NI, WN>(ho.totals, CW * 128, s == 0, head);
                wgmma_wait<0>();
                fold_split_l2<NI, WN>(ho.totals, CW * 128, acc, s == 0, head);
            }
            release(prev_slot);
            load_total_l2<NI, WN>(ho.totals, CW * 128, acc);
        } else {
            // IN_CTA: the split kt_begin lies in (a tail may start inside any), and where it ends
            int split = 0;
            if constexpr (TOTAL && stream)
                while (gemm_split_begin(split + 1, splits, KT) <= work.kt_begin) split++;
            int split_end = TOTAL ? gemm_split_begin(split + 1, splits, KT) : work.kt_end;
            // Not unrolled: a peeled first k-tile copied the accumulators while its wgmma were
            // in flight, and ptxas serialized them (warning C7514 on a 64 x 128 GRID instantiation).
#pragma unroll 1
            for (int kt = work.kt_begin; kt < work.kt_end; kt++) {
                k_tile(acc, kt, work.kt_begin);
                if constexpr (SPLIT == SPLIT_IN_CTA) {
                    if (kt + 1 == split_end) {
                        wgmma_wait<0>();
                        fold_split<NI, WN>(total, acc);
                        split++;
                        split_end = gemm_split_begin(split + 1, splits, KT);
                    }
                }
            }
            wgmma_wait<0>();
            if (work.kt_end > work.kt_begin) release(prev_slot);
#pragma unroll
            for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
            if (stream && work.hand_out) {
                hand_out<NI, TOTAL, WN>(ho, acc, total, CW * 128, cw * 4 + warp);
                continue;
            }
        }
        const int row0 = work.m0 + row_in_tile;
        const auto &res = *[&] {  // the unit's sum
            if constexpr (TOTAL) return &total;
            else return &acc;  // S = 1, or TOTAL_L2 after load_total_l2
        }();
        if constexpr (DEFER) {
            const bool nan = gemm_warp_has_nan(res);
#pragma unroll
            for (int i = 0; i < NI; i++) {
                if (pending_next <= i) store_pending(i);  // the last unit's, where this one had too few k-tiles
                if (nan) round_pairs<WN, false>(res[i], pending[i]);
                else round_pairs<WN, true>(res[i], pending[i]);
            }
            pending_next = 0;
            pending_row0 = row0;
            pending_n0 = work.n0;
            pending_b = work.b;
        } else if constexpr (TMA_ONLY) {  // the 128 x 192 cta tile: its total, at once
            store_tile_tma<NI, WN>(&tmap_y, stage, row0, work.n0, work.b, res);
        } else {
            char *const y = SPLIT == SPLIT_GRID ? (char *)p.y + (long)work.split * p.stride_y * 4
                                                : (char *)p.y + (long)work.b * p.stride_y * (p.y_f32 ? 4 : 2);
            // (the TMA-store kernels take every launch with tma_store but the cta path's in
            // stream-K order and the 64 x 192 tile's, which has no TMA-store kernel)
            if constexpr (WN % 64 == 0 && SPLIT != SPLIT_GRID &&
                          ((STREAM && SPLIT != SPLIT_NONE) || !ws_has_tma_kernel(SPLIT, WN))) {
                if (tma_store && stage) {  // bf16 by the copy engine (store_tile_tma)
                    store_tile_tma<NI, WN>(&tmap_y, stage, row0, work.n0, work.b, res);
                    continue;
                }
            }
            store_tile<NI, /*VEC=*/true, WN, /*F32_STAGE=*/!TOTAL>(p, y, row0, p.M, work.n0, res, stage);
        }
    }
    // The pending output of the CTA's last unit (DEFER).
    if constexpr (DEFER) {
#pragma unroll
        for (int i = 0; i < NI; i++)
            if (pending_next <= i) store_pending(i);
    }
    if (tma_store && lane == 0) bulk_wait_all();  // no TMA store outlives the CTA's shared memory
#else
    (void)staged;
    (void)tma_store;
    (void)tmap_y;
    (void)p;  // not an sm_90a pass: never launched (gemm_launch checks cuda_ctx.wgmma)
    (void)batch;
    (void)splits;
    (void)m_tiles;
    (void)n_tiles;
    (void)ho;
    (void)tmap_x;
    (void)tmap_w;
#endif
}

// --- the one-tile-per-CTA kernel (small-M split CTAs; cp.async and scalar loads) -----------

// splits: gemm_split_count(N, K) (1 with SPLIT_NONE). SPLIT_GRID: p.y is the fp32 partials
// [splits][M][ldy = N], split blockIdx.z's at p.y + blockIdx.z * stride_y floats.
template <int WGS, int NI, int STAGES, int LOAD, int SPLIT>
__global__ void __launch_bounds__(WGS * 128, 1)
gemm_sm90_kernel(gemm_problem p, int splits, gemm_split_out split_out, const __grid_constant__ CUtensorMap tmap_x,
                 const __grid_constant__ CUtensorMap tmap_w) {
#if INVAR_WGMMA
    constexpr int BM = 64 * WGS, BN = 128 * NI, THREADS = WGS * 128;
    constexpr int A_BYTES = BM * GEMM_BK * 2, STAGE_BYTES = A_BYTES + BN * GEMM_BK * 2;
    const uint32_t stage_tx = gemm_k_tile_tx_bytes(p.M, BM, BN);
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms
    __shared__ __align__(8) uint64_t full[STAGES];  // TMA: slot s holds its k-tile

    if constexpr (SPLIT == SPLIT_GRID) pdl_release_dependent();  // a reduce kernel may start up now
    // SPLIT_GRID runs one dense product: grid.z is the split, not the product.
    const gemm_view v = gemm_view_of(p, SPLIT == SPLIT_GRID ? 0 : (int)blockIdx.z);
    int m_tile, n_tile;
    gemm_tile_of((int)(blockIdx.y * gridDim.x + blockIdx.x), (int)gridDim.y, (int)gridDim.x, &m_tile, &n_tile);
    const int m0 = v.row_begin + m_tile * BM, n0 = n_tile * BN;
    if (m0 >= v.row_end) return;  // grouped: this group has fewer rows than the grid allows
    char *const y = SPLIT == SPLIT_GRID ? v.y + (long)blockIdx.z * p.stride_y * 4 : v.y;

    const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32;
    float acc[NI][64];
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < 64; e++) acc[i][e] = 0.0f;

    const int KT = (p.K + GEMM_BK - 1) / GEMM_BK;
    // The k-tiles this CTA computes: all of them, or split blockIdx.z's.
    const int kt_begin = SPLIT == SPLIT_GRID ? gemm_split_begin(blockIdx.z, splits, KT) : 0;
    const int kt_end = SPLIT == SPLIT_GRID ? gemm_split_begin(blockIdx.z + 1, splits, KT) : KT;
    const int n_kt = kt_end - kt_begin;

    // SPLIT_IN_CTA: the split being accumulated, the k-tile it ends before, and the total of
    // the splits before it (-0 + p_0 = p_0, then total + p_s: gemm_plan.cuh's order).
    float total[SPLIT == SPLIT_IN_CTA ? NI : 1][64];
#pragma unroll
    for (int i = 0; i < (SPLIT == SPLIT_IN_CTA ? NI : 1); i++)
#pragma unroll
        for (int e = 0; e < 64; e++) total[i][e] = GEMM_TOTAL_START;
    int split = 0, split_end = SPLIT == SPLIT_IN_CTA ? gemm_split_begin(1, splits, KT) : KT;
    auto after_k_tile = [&](int kt) {
        if constexpr (SPLIT == SPLIT_IN_CTA) {
            if (kt + 1 != split_end) return;
            wgmma_wait<0>();  // the split's last wgmma has written acc
            fold_split<NI>(total, acc);
            split++;
            split_end = gemm_split_begin(split + 1, splits, KT);
        }
    };

    if (LOAD == LOAD_TMA) {
        auto issue = [&](int j) {  // the CTA's j-th k-tile into slot j % STAGES
            uint8_t *s = smem + (j % STAGES) * STAGE_BYTES;
            uint64_t *bar = &full[j % STAGES];
            mbar_expect_tx(bar, stage_tx);
            tma_load_2d(s, &tmap_x, bar, (kt_begin + j) * GEMM_BK, m0);
            tma_load_2d(s + A_BYTES, &tmap_w, bar, (kt_begin + j) * GEMM_BK, n0);
        };
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) mbar_init(&full[s], 1);
            mbar_init_fence();
            for (int j = 0; j < STAGES - 1 && j < n_kt; j++) issue(j);
        }
        __syncthreads();
        for (int j = 0; j < n_kt; j++) {
            const uint8_t *s = smem + (j % STAGES) * STAGE_BYTES;
            mbar_wait(&full[j % STAGES], (uint32_t)(j / STAGES) & 1u);
            mma_k_tile<NI>(acc, s + wg * 64 * 128, s + A_BYTES);
            wgmma_wait<1>();
            // Every warpgroup has retired k-tile j-1: its slot takes k-tile j+STAGES-1.
            __syncthreads();
            if (threadIdx.x == 0 && j + STAGES - 1 < n_kt) issue(j + STAGES - 1);
            after_k_tile(kt_begin + j);
        }
    } else {
        auto load_stage = [&](int j) {
            if (j < n_kt) {
                uint8_t *s = smem + (j % STAGES) * STAGE_BYTES;
                // the 128-byte swizzle layout TMA writes and wgmma reads
                gemm_load_rows<BM, GEMM_BK, THREADS, LOAD == LOAD_CP_ASYNC>(
                    [=](int r, int c) { return (uint16_t *)(s + sw128_offset(r, c)); }, v.x, p.ldx, m0, v.row_end,
                    p.x_rows, (kt_begin + j) * GEMM_BK, p.K);
                gemm_load_rows<BN, GEMM_BK, THREADS, LOAD == LOAD_CP_ASYNC>(
                    [=](int r, int c) { return (uint16_t *)(s + A_BYTES + sw128_offset(r, c)); }, v.w, p.ldw, n0,
                    p.N, nullptr, (kt_begin + j) * GEMM_BK, p.K);
            }
            cp_async_commit();  // empty groups keep the wait count uniform
        };
#pragma unroll
        for (int s = 0; s < STAGES - 2; s++) load_stage(s);
        for (int j = 0; j < n_kt; j++) {
            // Stage j has landed for every thread; every warpgroup has retired k-tile j-2
            // (wait<1> below), so its slot may be refilled.
            cp_async_wait<STAGES - 3>();
            fence_proxy_async();
            __syncthreads();
            load_stage(j + STAGES - 2);
            const uint8_t *s = smem + (j % STAGES) * STAGE_BYTES;
            mma_k_tile<NI>(acc, s + wg * 64 * 128, s + A_BYTES);
            wgmma_wait<1>();
            after_k_tile(kt_begin + j);
        }
        cp_async_wait<0>();
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);

    // vector stores for the two-warpgroup tiles, which the launcher picks at large M only
    uint8_t *const stage =
        stages_epilogue(SPLIT, WGS == 2) ? smem + STAGES * STAGE_BYTES + (threadIdx.x / 32) * epilogue_stage_bytes(SPLIT, 128)
                                         : nullptr;
    if constexpr (SPLIT == SPLIT_IN_CTA) store_tile<NI, WGS == 2, 128, /*F32_STAGE=*/false>(p, y, m0 + wg * 64 + warp * 16, v.row_end, n0, total, stage);
    else store_tile<NI, WGS == 2>(p, y, m0 + wg * 64 + warp * 16, v.row_end, n0, acc, stage);
    if constexpr (SPLIT == SPLIT_GRID) {
        if (split_out.arrivals)  // else gemm_split_reduce_kernel sums
            split_finish_tile<BM, BN, THREADS>(p, split_out, splits, (int)(blockIdx.y * gridDim.x + blockIdx.x), m0,
                                               n0);
    }
#else
    (void)p;  // not an sm_90a pass: never launched (gemm_launch checks cuda_ctx.wgmma)
    (void)splits;
    (void)split_out;
    (void)tmap_x;
    (void)tmap_w;
#endif
}

// SPLIT_GRID's second pass after the split CTAs (past GEMM_SPLIT_LAST_CTA_MAX_M rows, where one
// more launch is cheap against the product): y[m][n] = ((p_0 + p_1) + p_2) + ... over the partials
// [splits][M][N], split order, one rounding to bf16 (or none for fp32 output). 4 consecutive
// columns per thread; the partials' rows are N floats, so VEC4 needs N % 4 == 0.
template <bool VEC4>
__global__ void __launch_bounds__(256)
gemm_split_reduce_kernel(const float *__restrict__ partials, int splits, int M, int N, void *y, long ldy, bool y_f32) {
    pdl_wait_predecessor();  // launched while the split CTAs still run (pdl.cuh)
    const long per_split = (long)M * N, groups = (per_split + 3) / 4;
    for (long g = (long)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += (long)gridDim.x * blockDim.x) {
        if (VEC4) {
            split_sum_store<4>(partials, per_split, splits, g * 4, N, y, ldy, y_f32);
        } else {
            for (long i = g * 4; i < g * 4 + 4 && i < per_split; i++)
                split_sum_store<1>(partials, per_split, splits, i, N, y, ldy, y_f32);
        }
    }
}

// --- launch ----------------------------------------------------------------------------------

// grid.z: the products (or groups), or with SPLIT_GRID the splits of the one product.
// SPLIT_GRID: split_out says where the tiles' last CTAs write the sum.
template <int WGS, int NI, int STAGES, int LOAD, int SPLIT>
static void launch_sm90(cuda_ctx *c, const gemm_problem *p, int batch, int splits, const char *op,
                        gemm_split_out split_out = {}) {
    constexpr int BM = 64 * WGS, BN = 128 * NI;
    constexpr size_t SMEM = (size_t)STAGES * (BM + BN) * GEMM_BK * 2 + 1024 +  // + alignment slack
                            (stages_epilogue(SPLIT, WGS == 2) ? WGS * 4 * epilogue_stage_bytes(SPLIT, 128) : 0);
    const unsigned z = SPLIT == SPLIT_GRID ? (unsigned)splits : (unsigned)batch;
    dim3 grid((unsigned)((p->N + BN - 1) / BN), (unsigned)((p->M + BM - 1) / BM), z);
    if (grid.y > 65535u || grid.z > 65535u)
        invar_die(INVAR_EXIT_INPUT, "%s: M=%d batch=%d exceed the CUDA grid", op, p->M, batch);
    CUtensorMap tx = {}, tw = {};
    if (LOAD == LOAD_TMA) {
        tx = tma_map_bf16_2d(c, p->x, p->M, p->K, p->ldx, GEMM_BK, gemm_x_box_rows(p->M, BM), op, "x");
        tw = tma_map_bf16_2d(c, p->w, p->N, p->K, p->ldw, GEMM_BK, BN, op, "w");
    }
    auto k = gemm_sm90_kernel<WGS, NI, STAGES, LOAD, SPLIT>;
    cuda_kernel_smem(c, (const void *)k, SMEM, op);
    k<<<grid, WGS * 128, SMEM, c->stream>>>(*p, splits, split_out, tx, tw);
    CUDA_CHECK_LAUNCH(op);
}

// The warp-specialized kernel over dense products (TMA; one, or a batch): at most one CTA per
// SM, each walking its share of the work units, round robin or (stream_k, where there are more
// units than CTAs) in stream-K order.
//
// Every tile compiles the vector and staged epilogues (store_tile's VEC; each checks the
// output's alignment at run time). Until 2026-12-02 the 64 x 128 tile at M <= 64 ran a kernel with
// the pair stores alone, which cost more than the wider kernel's code, not less: at M = 64 its
// pair stores went out at each unit's end while the next unit's copies waited, and the 64 x 128
// deferred TMA stores took that off (H200, dev build, medians of three, us: 24576 x 1536 M = 64
// 31.6 -> 25.6, 21888 x 2048 36.3 -> 30.3, 102400 x 2048 120.2 -> 110.6, 36864 x 7168 139.8 -> 134.4;
// M = 16 0-5% faster, M = 1 within 0.3 us).
// pl: the plan (gemm_plan_choose) whose tile and split mode the template arguments are: its
// split count and stream-K order.
template <int CW, int NI, int STAGES, int SPLIT, int WN = 128>
static void launch_ws(cuda_ctx *c, const gemm_problem *p, int batch, const gemm_plan &pl, const char *op) {
    constexpr int BM = 64 * CW, BN = WN * NI;
    const int splits = pl.splits;
    constexpr bool HAS_TMA_KERNEL = ws_has_tma_kernel(SPLIT, WN);
    const int k_tiles = (p->K + GEMM_BK - 1) / GEMM_BK;
    bool staged = ws_stages_epilogue(SPLIT, NI, WN, k_tiles, HAS_TMA_KERNEL);
    constexpr size_t SLOTS_SMEM = (size_t)STAGES * (BM + BN) * GEMM_BK * 2 + 1024;  // + alignment slack
    constexpr size_t STAGE_SMEM = CW * 4 * epilogue_stage_bytes(SPLIT, WN);
    const int m_tiles = (p->M + BM - 1) / BM, n_tiles = (p->N + BN - 1) / BN;
    const long units = (long)batch * m_tiles * n_tiles * (SPLIT == SPLIT_GRID ? splits : 1);
    if (units > 0x7fffffffL)
        invar_die(INVAR_EXIT_INPUT, "%s: M=%d N=%d batch=%d: too many tiles", op, p->M, p->N, batch);
    const unsigned grid = (unsigned)(units < c->num_sms ? units : c->num_sms);
    // Stream-K order walks whole chains (never GRID splits), on 128-column instructions only
    // (gemm_plan_choose never asks it of the 192-column tiles).
    constexpr bool CAN_STREAM = SPLIT != SPLIT_GRID && WN == 128 && !ws_total_in_l2(SPLIT, NI, WN);
    gemm_handoff ho = {};
    if (ws_total_in_l2(SPLIT, NI, WN))
        ho.totals = (float4 *)cuda_scratch(c, SCRATCH_GEMM_TOTALS, (size_t)grid * CW * 128 * NI * WN / 2 * sizeof(float),
                                           "gemm split-K running totals");
    // rounds of round robin first (gemm_plan.stream_k_rounds), so many that more units than CTAs
    // are left for the stream-K order
    const long rr_units = (long)pl.stream_k_rounds * grid;
    if (CAN_STREAM && pl.stream_k && units - rr_units > grid) {
        ho.rr_units = (int)rr_units;
        constexpr int STATE = NI * WN / 2 * (SPLIT == SPLIT_IN_CTA ? 2 : 1);  // floats a consumer thread
        ho.state = (float *)cuda_scratch(c, SCRATCH_GEMM_HANDOFF, (size_t)grid * CW * 128 * STATE * sizeof(float),
                                         "gemm stream-K chain states");
        ho.ready = (unsigned *)cuda_scratch_zeroed(c, SCRATCH_GEMM_HANDOFF_READY, (size_t)grid * CW * 4 * sizeof(unsigned),
                                                   "gemm stream-K ready flags");
    }
    // 3-D maps: a batched product's matrices are the third coordinate (strides multiples of 8:
    // tma_possible).
    const CUtensorMap tx =
        tma_map_bf16_3d(c, p->x, batch, p->M, p->K, p->ldx, p->stride_x, GEMM_BK, gemm_x_box_rows(p->M, BM), op, "x");
    const CUtensorMap tw = tma_map_bf16_3d(c, p->w, batch, p->N, p->K, p->ldw, p->stride_w, GEMM_BK, BN, op, "w");
    // The staged bf16 epilogue by TMA stores (store_tile_tma): rows the map can address (16-byte
    // aligned, strides multiples of 8 elements) and not scattered through y_rows.
    const bool tma_store = WN % 64 == 0 && SPLIT != SPLIT_GRID && staged && !p->y_f32 && !p->y_rows &&
                           ((uintptr_t)p->y & 15u) == 0 && p->ldy % 8 == 0 && (batch == 1 || p->stride_y % 8 == 0);
    const CUtensorMap ty =
        tma_store ? tma_map_bf16_3d(c, p->y, batch, p->M, p->N, p->ldy, p->stride_y, 64, 16, op, "y") : CUtensorMap{};
    // Round robin runs a kernel compiled without the stream-K code: with it in, and unused, the
    // 128 x 128 cta kernel ran 12-15% slower (H200: 3072 x 2048 at M = 4096 107.6 -> 122.8 us).
    // The TMA-store kernels (ws_has_tma_kernel) wherever the TMA stores are taken, round robin, and
    // in stream-K order at S = 1 (SK_TMA: its deferred stores carried over the
    // hand-overs); elsewhere a tile that stages only there (128 x 192 on the cta path) does not.
    const bool tma_only = HAS_TMA_KERNEL && tma_store && !ho.state;
    if (!tma_only) staged = ws_stages_epilogue(SPLIT, NI, WN, k_tiles, false);
    constexpr bool SK_TMA = HAS_TMA_KERNEL && CAN_STREAM && SPLIT == SPLIT_NONE;
    const bool sk_tma = ho.state && tma_store && SK_TMA;
    if ((tma_only || sk_tma) && !staged)  // a TMA-store kernel writes its output through the stage alone
        invar_die(INVAR_EXIT_SYSTEM, "%s: gemm TMA-store kernel launched without its stage", op);
    auto k = sk_tma   ? gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, SK_TMA, SK_TMA>
             : ho.state   ? gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, CAN_STREAM, false>
             : tma_only ? gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, false, HAS_TMA_KERNEL>
                        : gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, false, false>;
    // The attribute allows the most this kernel ever asks for (a launch may ask less): one
    // lowered for an unstaged launch would fail a staged one that another cuda_ctx on the same
    // device believes it has already allowed.
    cuda_kernel_smem(c, (const void *)k, SLOTS_SMEM + (ws_can_stage(SPLIT, WN, tma_only) ? STAGE_SMEM : 0), op);
    const size_t smem = SLOTS_SMEM + (staged ? STAGE_SMEM : 0);
    k<<<grid, (CW + 1) * 128, smem, c->stream>>>(*p, batch, splits, m_tiles, n_tiles, ho, staged, tma_store, tx, tw, ty);
    CUDA_CHECK_LAUNCH(op);
}

// SPLIT_GRID: the splits' fp32 partials into scratch (a BM x BN tile per split and tile), then
// their sum in split order into y; in blocks of rows so the scratch stays under
// GEMM_SPLIT_SCRATCH_BYTES (rows are independent: the blocks change no bits).
#define GEMM_SPLIT_SCRATCH_BYTES (256L << 20)
// WS (pl.grid_persistent): the split CTAs are the warp-specialized kernel's work units, else one
// gemm_sm90_kernel CTA each (64 x 128 below GEMM_SPLIT_GRID_PERSISTENT_MIN_M). pl.sum_last_cta
// (gemm_sm90_kernel only): each tile's last CTA sums, else gemm_split_reduce_kernel does,
// launched as a programmatic dependent.
template <int WGS, int NI, int STAGES, bool WS, int WN = 128>
static void launch_split_grid(cuda_ctx *c, const gemm_problem *p, const gemm_plan &pl, const char *op) {
    constexpr int BM = 64 * WGS, BN = WN * NI;
    const int splits = pl.splits;
    const long row_bytes = (long)splits * p->N * (long)sizeof(float);
    long block_rows = GEMM_SPLIT_SCRATCH_BYTES / row_bytes / BM * BM;
    if (block_rows < BM) block_rows = BM;
    if (block_rows > p->M) block_rows = p->M;
    float *partials = (float *)cuda_scratch(c, SCRATCH_GEMM_PARTIAL, (size_t)(block_rows * row_bytes),
                                            "gemm split-K partials");
    for (long r0 = 0; r0 < p->M; r0 += block_rows) {
        const int rows = (int)(p->M - r0 < block_rows ? p->M - r0 : block_rows);
        const long per_split = (long)rows * p->N;
        gemm_problem part = *p;
        part.x = p->x + r0 * p->ldx;
        part.M = rows;
        part.y = partials;
        part.y_f32 = true;
        part.ldy = p->N;
        part.stride_y = per_split;
        part.y_rows = nullptr;
        void *y = (char *)p->y + r0 * p->ldy * (p->y_f32 ? 4 : 2);
        gemm_split_out sum_in_kernel = {};  // arrivals NULL: the reduce kernel below sums
        if (!WS && pl.sum_last_cta) {
            const long tiles = (long)((rows + BM - 1) / BM) * ((p->N + BN - 1) / BN);
            unsigned *arrivals = (unsigned *)cuda_scratch_zeroed(c, SCRATCH_GEMM_ARRIVALS, (size_t)tiles * sizeof(unsigned),
                                                                 "gemm split-K arrival counts");
            sum_in_kernel = gemm_split_out{y, p->ldy, p->y_f32, arrivals};
        }
        if constexpr (WS) launch_ws<WGS, NI, STAGES, SPLIT_GRID, WN>(c, &part, 1, pl, op);
        else launch_sm90<WGS, NI, STAGES, LOAD_TMA, SPLIT_GRID>(c, &part, 1, splits, op, sum_in_kernel);
        if (sum_in_kernel.arrivals) continue;
        const long groups = (per_split + 3) / 4;
        const unsigned blocks =
            (unsigned)((groups + 255) / 256 < 4L * c->num_sms ? (groups + 255) / 256 : 4L * c->num_sms);
        pdl_launch(c, p->N % 4 == 0 ? gemm_split_reduce_kernel<true> : gemm_split_reduce_kernel<false>, dim3(blocks),
                   dim3(256), 0, op, (const float *)partials, splits, rows, p->N, y, p->ldy, (bool)p->y_f32);
    }
}

// Dense products, one or a batch of them at strides that are multiples of 8 (aligned) and not
// zero (a batch sharing its x or w stays on cp.async: a 3-D map's stride 0 is not a layout the
// driver's documentation promises): grouped products gather their rows, which TMA cannot.
static bool tma_possible(const cuda_ctx *c, const gemm_problem *p, int batch, bool aligned) {
    const bool strided = batch == 1 || (p->stride_x != 0 && p->stride_w != 0);
    return aligned && strided && !p->group_offsets && !p->x_rows && c->tensor_map_encode;
}

gemm_plan gemm_sm90_plan(const cuda_ctx *c, const gemm_problem *p, int batch, bool aligned) {
    return gemm_plan_choose(p->M, p->N, p->K, batch, aligned, tma_possible(c, p, batch, aligned), c->num_sms);
}

void gemm_sm90_launch(cuda_ctx *c, const gemm_problem *p, int batch, bool aligned, const char *op) {
    const gemm_plan pl = gemm_sm90_plan(c, p, batch, aligned);
    const int S = pl.splits;
    if (pl.mode == SPLIT_GRID && batch != 1)
        invar_die(INVAR_EXIT_SYSTEM, "%s: gemm plan %s for a batch of %d products", op, gemm_plan_name(&pl), batch);
    // Every (load, tile, mode) gemm_plan_choose can return; 128 x 256 IN_CTA on TMA only (its
    // running total in L2), 128 x 128 and the 72-, 96- and 144-column tiles only IN_CTA, 128 x 192
    // IN_CTA or GRID on the persistent kernel, 64 x 128 GRID on either kernel, 64 x 192 only on
    // the persistent one at S = 1 (one unit a CTA: its TMA stores at the unit's end, no next unit
    // to defer them into; 6 slots of 32 KB).
#define GEMM_CASE(LOAD, TILE, MODE) (pl.load == (LOAD) && pl.tile == (TILE) && pl.mode == (MODE))
    if (GEMM_CASE(LOAD_TMA, TILE_64x128, SPLIT_GRID) && !pl.grid_persistent) launch_split_grid<1, 1, 6, false>(c, p, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_64x128, SPLIT_GRID)) launch_split_grid<1, 1, 8, true>(c, p, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x256, SPLIT_GRID) && pl.grid_persistent) launch_split_grid<2, 2, 4, true>(c, p, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x192, SPLIT_GRID) && pl.grid_persistent) launch_split_grid<2, 1, 4, true, 192>(c, p, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_64x128, SPLIT_NONE)) launch_ws<1, 1, 8, SPLIT_NONE>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_64x192, SPLIT_NONE)) launch_ws<1, 1, 6, SPLIT_NONE, 192>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_64x128, SPLIT_IN_CTA)) launch_ws<1, 1, 8, SPLIT_IN_CTA>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_64x96, SPLIT_IN_CTA)) launch_ws<1, 1, 8, SPLIT_IN_CTA, 96>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_64x72, SPLIT_IN_CTA)) launch_ws<1, 1, 8, SPLIT_IN_CTA, 72>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x96, SPLIT_IN_CTA)) launch_ws<2, 1, 7, SPLIT_IN_CTA, 96>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x144, SPLIT_IN_CTA)) launch_ws<2, 1, 6, SPLIT_IN_CTA, 144>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x128, SPLIT_IN_CTA)) launch_ws<2, 1, 6, SPLIT_IN_CTA>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x192, SPLIT_IN_CTA)) launch_ws<2, 1, 4, SPLIT_IN_CTA, 192>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x192, SPLIT_NONE)) launch_ws<2, 1, 4, SPLIT_NONE, 192>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x256, SPLIT_NONE)) launch_ws<2, 2, 4, SPLIT_NONE>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_TMA, TILE_128x256, SPLIT_IN_CTA)) launch_ws<2, 2, 4, SPLIT_IN_CTA>(c, p, batch, pl, op);
    else if (GEMM_CASE(LOAD_CP_ASYNC, TILE_64x128, SPLIT_NONE)) launch_sm90<1, 1, 4, LOAD_CP_ASYNC, SPLIT_NONE>(c, p, batch, S, op);
    else if (GEMM_CASE(LOAD_CP_ASYNC, TILE_64x128, SPLIT_IN_CTA)) launch_sm90<1, 1, 4, LOAD_CP_ASYNC, SPLIT_IN_CTA>(c, p, batch, S, op);
    else if (GEMM_CASE(LOAD_CP_ASYNC, TILE_128x128, SPLIT_IN_CTA)) launch_sm90<2, 1, 4, LOAD_CP_ASYNC, SPLIT_IN_CTA>(c, p, batch, S, op);
    else if (GEMM_CASE(LOAD_CP_ASYNC, TILE_128x256, SPLIT_NONE)) launch_sm90<2, 2, 4, LOAD_CP_ASYNC, SPLIT_NONE>(c, p, batch, S, op);
    else if (GEMM_CASE(LOAD_SCALAR, TILE_64x128, SPLIT_NONE)) launch_sm90<1, 1, 4, LOAD_SCALAR, SPLIT_NONE>(c, p, batch, S, op);
    else if (GEMM_CASE(LOAD_SCALAR, TILE_64x128, SPLIT_IN_CTA)) launch_sm90<1, 1, 4, LOAD_SCALAR, SPLIT_IN_CTA>(c, p, batch, S, op);
    else invar_die(INVAR_EXIT_SYSTEM, "%s: gemm plan %s (load %d) has no kernel", op, gemm_plan_name(&pl), (int)pl.load);
#undef GEMM_CASE
}
