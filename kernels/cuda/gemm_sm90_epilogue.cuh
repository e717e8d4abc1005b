// kernels/cuda/gemm_sm90_epilogue.cuh — the sm_90a GEMM's epilogues: which one a tile takes, and its stores.
#ifndef INVAR_KERNELS_CUDA_GEMM_SM90_EPILOGUE_CUH
#define INVAR_KERNELS_CUDA_GEMM_SM90_EPILOGUE_CUH

#include <cuda.h>           // CUtensorMap
#include <stdint.h>         // uint8_t, uint16_t, uint32_t

#include "gemm.cuh"         // gemm_problem, gemm_store_pair, gemm_round_bf16x2, gemm_warp_has_nan
#include "gemm_plan.cuh"    // SPLIT_*, GEMM_CTA_STAGED_MAX_KTILES
#include "wgmma.cuh"        // INVAR_WGMMA, stmatrix_x4, tma_store_3d, bulk_*, fence_proxy_async

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
#endif

#endif
