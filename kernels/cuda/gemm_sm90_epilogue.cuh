// kernels/cuda/gemm_sm90_epilogue.cuh — the sm_90a GEMM's epilogues: which one a tile takes, and
// its stores.
#ifndef INVAR_KERNELS_CUDA_GEMM_SM90_EPILOGUE_CUH
#define INVAR_KERNELS_CUDA_GEMM_SM90_EPILOGUE_CUH

#include <cuda.h>           // CUtensorMap
#include <stdint.h>         // uint8_t, uint16_t, uint32_t

#include "gemm.cuh"         // gemm_problem, gemm_store_pair, gemm_round_bf16x2
#include "gemm_plan.cuh"    // SPLIT_*, GEMM_CTA_STAGED_MAX_KTILES
#include "wgmma.cuh"        // stmatrix_x4, tma_store_3d, bulk_*

// Shared memory a consumer warp for the staged epilogue: 16 x WN bf16, or a 16 x 64 fp32 piece
// (split CTAs).
#define GEMM_STAGE_F32_BYTES (16 * 64 * 4)
__host__ __device__ constexpr int epilogue_stage_bytes(int split, int wn) {
    return split == SPLIT_GRID ? GEMM_STAGE_F32_BYTES : 16 * wn * 2;
}

// Whether gemm_sm90_kernel stages its epilogue (VEC: two-warpgroup tiles): at S = 1 and for
// split CTAs' fp32 partials, tiles written once after a short walk.
__host__ __device__ constexpr bool stages_epilogue(int split, bool vec) {
    return vec && (split == SPLIT_NONE || split == SPLIT_GRID);
}

// The cta path stages on short walks (GEMM_CTA_STAGED_MAX_KTILES); 128 x 192 only in its TMA-store
// kernel (no registers for the lanes' staged stores); 72, 96 and 144 columns never (the stages take
// 64-column pieces).
__host__ __device__ constexpr bool ws_can_stage(int split, int wn, bool tma_only) {
    return wn == 128 || split != SPLIT_IN_CTA || (wn == 192 && tma_only);
}
// 128 x 256 on the cta path: no registers left for a running total, which waits in L2 instead.
__host__ __device__ constexpr bool ws_total_in_l2(int split, int ni, int wn) {
    return split == SPLIT_IN_CTA && ni * wn == 256;
}
// The tiles with a TMA-store kernel of their own (TMA_ONLY, no other epilogue, so the deferred
// pairs do not spill).
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
// Lane q of each quad ends with out[t] = lane t's v[q]: a 4 x 4 transpose across the quad, by
// selects so everything stays in registers. Every lane must call it.
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

// Epilogue of one warp: 16 rows from row0 (none from row_end on) by NI * WN columns from n0; one
// rounding to bf16 (gemm_round_bf16x2, the same on every path) or none (fp32, partials). The paths
// differ only in how the bits travel: pair stores, VEC's quad transposes (16-byte stores), a
// shared-memory stage (fewer instructions: the epilogue is instruction-bound) or the copy engine.
// round_pairs: values 2q, 2q + 1 into pairs[q]; NAN_FREE: the converter alone rounds.
template <int WN, bool NAN_FREE>
__device__ __forceinline__ void round_pairs(const float (&v)[WN / 2], uint32_t (&pairs)[WN / 4]) {
#pragma unroll
    for (int q = 0; q < WN / 4; q++) pairs[q] = gemm_round_bf16x2<NAN_FREE>(v[2 * q], v[2 * q + 1]);
}
// The pairs into a stage by stmatrix, chunk j of row r at at(r, j).
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
    // chunk c of stage row r at r * 2 WN + ((c ^ (r % 8)) * 16): stmatrix's rows and the read-back
    // fall in distinct banks.
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

// The staged bf16 epilogue by the copy engine: after the stage's last boxes are read, the warp
// writes its pairs in the map's swizzle layout (a 16 x 64 box a 2 KB) and lane 0 issues a TMA store
// a box without waiting; the copy engine clips at the tensor's edge.
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
// NI blocks in turn: the second waits for the first's read (no room for a second stage), hence the
// deferred stores (DEFER).
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

// fp32 output through the same stage, 16 x 64 at a time: 8-byte writes, 16-byte reads and stores.
template <int NI, int WN>
__device__ __forceinline__ void store_tile_staged_f32(const gemm_problem &p, char *y, int row0, int row_end, int n0,
                                                      const float (&res)[NI][WN / 2], uint8_t *stage) {
    static_assert(epilogue_stage_bytes(SPLIT_NONE, WN) >= GEMM_STAGE_F32_BYTES, "a 16 x 64 fp32 piece fits");
    const int lane = threadIdx.x % 32, q = lane & 3, r = lane >> 2;
    // chunk c (4 columns) of row rr at rr * 256 + ((c ^ 2 (rr % 4)) * 16): writes and reads fall in
    // distinct banks.
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

// F32_STAGE: store_tile_staged_f32 compiled in (not on the cta path: beside its running total it
// spilled).
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
