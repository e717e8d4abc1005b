// kernels/cuda/gemm.cuh — the invariant tensor-core GEMM's launcher, shared by the dense GEMM
// op and the MoE expert GEMMs (which gather and scatter rows).
#ifndef INVAR_KERNELS_CUDA_GEMM_CUH
#define INVAR_KERNELS_CUDA_GEMM_CUH

#include <stdint.h>        // int32_t, uint16_t
#include "../ops.h"        // bf16
#include "bf16x2.cuh"      // bf16x2_round
#include "cuda_ctx.cuh"    // cuda_ctx
#include "gemm_plan.cuh"   // gemm_plan
#include "mma.cuh"         // cp_async16

// y[z][m][n] = sum_k x[z][m][k] * w[z][n][k] for z < batch. Grouped (group_offsets): group g is
// an expert owning compact rows group_offsets[g] .., gathered from x_rows[i] and scattered to
// y_rows[i] (NULL: i); only w moves by stride_w per group. The grid's z runs group group_ids[z]
// (-1: none; NULL: g = z), so a decode step's few experts with rows need no CTAs for the rest.
typedef struct {
    void *y;
    bool y_f32;
    const bf16 *x;
    const bf16 *w;
    int M, N, K;                 // grouped: M = the most rows one group can have
    long ldx, ldy, ldw;
    long stride_x, stride_y, stride_w;
    const int32_t *group_offsets;
    const int32_t *group_ids;    // grouped: the group of grid slice z, or -1; NULL: z itself
    const int32_t *x_rows;
    const int32_t *y_rows;
    int split_N;                 // the N of the split-K rule (gemm_args.split_N); 0: N
    long rows_listed;            // grouped: the rows the groups list in all, at most (T k), which
                                 // sizes tiles and pipeline (gemm_plan_rows); 0: M
    int groups;                  // grouped: the groups w holds (its tensor map's extent, for the
                                 // weight tiles by TMA); 0: unknown, every tile by cp.async
} gemm_problem;

// batch: products (dense) or the grid's group slices (grouped: every group, or with group_ids
// as many as can hold rows). On sm_90a the wgmma kernels (gemm_sm90.cu),
// elsewhere gemm.cu's mma.sync one: one reduction order per device, whatever the shape picks.
void gemm_launch(cuda_ctx *c, const gemm_problem *p, int batch, const char *op);

// The Hopper kernel; `aligned`: every 8-element chunk of x and w is 16-byte aligned.
void gemm_sm90_launch(cuda_ctx *c, const gemm_problem *p, int batch, bool aligned, const char *op);
// What gemm_sm90_launch runs for p (gemm_plan.cuh).
gemm_plan gemm_sm90_plan(const cuda_ctx *c, const gemm_problem *p, int batch, bool aligned);

// What one CTA of product (or group) z reads and writes.
typedef struct {
    const uint16_t *x, *w;
    char *y;
    int row_begin, row_end;  // the rows of z: [0, M) dense, the group's compact rows grouped
                             // (empty where grid slice z runs no group)
    int group;               // grouped: the group z runs (w's matrix), -1 for none; dense: z
} gemm_view;

#ifdef __CUDACC__
__device__ __forceinline__ gemm_view gemm_view_of(const gemm_problem &p, int z) {
    gemm_view v;
    v.x = (const uint16_t *)p.x;
    v.w = (const uint16_t *)p.w;
    v.y = (char *)p.y;
    v.row_begin = 0;
    v.row_end = p.M;
    v.group = z;
    if (p.group_offsets) {
        const int g = p.group_ids ? p.group_ids[z] : z;
        v.group = g;
        if (g < 0) {  // grid slice z runs no group: no rows
            v.row_end = 0;
        } else {
            v.w += (long)g * p.stride_w;
            v.row_begin = p.group_offsets[g];
            v.row_end = p.group_offsets[g + 1];
        }
    } else {
        v.w += (long)z * p.stride_w;
        v.x += (long)z * p.stride_x;
        v.y += (long)z * p.stride_y * (p.y_f32 ? 4 : 2);
    }
    return v;
}

// Rows [row0, row0+ROWS) x k [k0, k0+BK) of a row-major bf16 matrix into a shared tile, chunk
// c of row r at dst_of(r, c). Rows from row_end and k from K become zeros, which leave every
// valid chain as it is. ALIGNED: 16-byte cp.async (K % 8 == 0); else element by element.
template <int ROWS, int BK, int THREADS, bool ALIGNED, class DstOf>
__device__ __forceinline__ void gemm_load_rows(DstOf dst_of, const uint16_t *g, long ld, int row0, int row_end,
                                               const int32_t *rows, int k0, int K) {
    constexpr int CHUNKS_PER_ROW = BK / 8;
    for (int ch = threadIdx.x; ch < ROWS * CHUNKS_PER_ROW; ch += THREADS) {
        int r = ch / CHUNKS_PER_ROW, c = ch % CHUNKS_PER_ROW, row = row0 + r, k = k0 + c * 8;
        uint16_t *dst = dst_of(r, c);
        bool row_ok = row < row_end;
        long grow = row_ok ? (rows ? rows[row] : row) : 0;
        if (ALIGNED) {
            bool ok = row_ok && k < K;
            cp_async16(dst, ok ? (const void *)(g + grow * ld + k) : (const void *)g, ok ? 16 : 0);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) dst[i] = (row_ok && k + i < K) ? g[grow * ld + k + i] : (uint16_t)0;
        }
    }
}

// The GEMM's one rounding to bf16, two values at a time (lo in the low half): every output path
// of both GEMM kernels rounds through here, so a row's bits cannot depend on the path.
__device__ __forceinline__ uint32_t gemm_round_bf16x2(float lo, float hi) { return bf16x2_round(lo, hi); }
// The same where the caller has checked that no value is a NaN (gemm_warp_has_nan): same bits.
template <bool NAN_FREE>
__device__ __forceinline__ uint32_t gemm_round_bf16x2(float lo, float hi) {
    return NAN_FREE ? bf16x2_round_no_nan(lo, hi) : bf16x2_round(lo, hi);
}

// Whether any lane of the warp holds a NaN among its NI x F values (x * 0 + p: a NaN for a NaN
// or an infinity, which only costs the NaN-aware rounding). Every lane must call it.
template <int NI, int F>
__device__ __forceinline__ bool gemm_warp_has_nan(const float (&v)[NI][F]) {
    float probe[8] = {};  // eight independent chains, not one of NI F dependent fmas
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < F; e++) probe[e % 8] = fmaf(v[i][e], 0.0f, probe[e % 8]);
    bool nan = false;
#pragma unroll
    for (int c = 0; c < 8; c++) nan |= probe[c] != probe[c];
    return __any_sync(0xffffffffu, nan);
}

// Output columns n and n+1 of row yrow: one rounding to bf16, or none for fp32 output.
__device__ __forceinline__ void gemm_store_pair(const gemm_problem &p, char *y, long yrow, int n, float v0,
                                                float v1) {
    if (p.y_f32) {
        float *yr = (float *)y + yrow * p.ldy;
        if (n < p.N) yr[n] = v0;
        if (n + 1 < p.N) yr[n + 1] = v1;
    } else {
        uint16_t *yr = (uint16_t *)y + yrow * p.ldy;
        const uint32_t both = gemm_round_bf16x2(v0, v1);
        if (n < p.N) yr[n] = (uint16_t)both;
        if (n + 1 < p.N) yr[n + 1] = (uint16_t)(both >> 16);
    }
}
#endif

#endif
