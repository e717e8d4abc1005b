// kernels/cuda/gemm.cu — the batch-invariant GEMM's portable kernel: bf16 in, fp32 accumulate on
// tensor cores (mma.sync, sm_80 and later); on sm_90a gemm_launch hands every product to the
// wgmma kernels (gemm_sm90.cu).
//
// Reduction order of y[m][n]: the chain  acc = 0; for k0 = 0, 16, 32, ... < K: acc =
// mma_m16n8k16(acc, x[m][k0:+16], w[n][k0:+16])  with k0 ascending: one instruction shape, no
// split-K, a zero-filled tail. Tiles, warp layout and pipeline depth decide only which thread
// carries a chain and when its operands arrive, so the three configurations give identical bits at
// any M; the launcher picks one by shape to keep the GPU busy:
//   skinny  (M <= 16, or M <= 64 with L2-sized weights): 16 x 32 tiles, BK 128, 6 stages
//   medium  (tiles of 128 would not fill the GPU): 64 x 64 tiles
//   large   128 x 128 tiles, 8 warps
#include <cuda_runtime.h>   // dim3
#include <stdint.h>         // uint32_t, int32_t
#include <stdio.h>          // snprintf

#include "../bf16.h"        // float_to_bf16
#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK
#include "gemm.cuh"         // gemm_problem, gemm_launch
#include "gemm_plan_choose.cuh"  // gemm_plan_rows
#include "inv_cuda.h"       // inv_cuda_gemm_plan_describe
#include "inv_cuda_ops.h"   // inv_cuda_gemm
#include "mma.cuh"          // cp_async16, ldmatrix_*, mma_bf16_16816
#include "../fingerprint.h" // fingerprint_note, fingerprint_order

#define SMEM_PAD 8  // bf16 per row: row strides of 16B * odd keep ldmatrix conflict-free

// --- the kernel ---

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool ALIGNED>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
gemm_kernel(gemm_problem p) {
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = (BM / WM) * WARPS_N * 32;
    constexpr int MI = WM / 16, NI = WN / 8;
    constexpr int A_STAGE = BM * (BK + SMEM_PAD), B_STAGE = BN * (BK + SMEM_PAD);
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *As = smem, *Bs = smem + STAGES * A_STAGE;

    const gemm_view v = gemm_view_of(p, blockIdx.z);
    const uint16_t *x = v.x, *w = v.w;
    char *y = v.y;
    const int row_end = v.row_end;
    const int m0 = v.row_begin + blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (m0 >= row_end) return;  // grouped: this group has fewer rows than the grid allows

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    const int KT = (p.K + BK - 1) / BK;
    auto load_stage = [&](int kt) {
        if (kt < KT) {
            int s = kt % STAGES;
            // padded rows (stride BK + SMEM_PAD): ldmatrix reads them without bank conflicts
            uint16_t *a_s = As + s * A_STAGE, *b_s = Bs + s * B_STAGE;
            gemm_load_rows<BM, BK, THREADS, ALIGNED>([=](int r, int c) { return a_s + r * (BK + SMEM_PAD) + c * 8; },
                                                     x, p.ldx, m0, row_end, p.x_rows, kt * BK, p.K);
            gemm_load_rows<BN, BK, THREADS, ALIGNED>([=](int r, int c) { return b_s + r * (BK + SMEM_PAD) + c * 8; },
                                                     w, p.ldw, n0, p.N, nullptr, kt * BK, p.K);
        }
        cp_async_commit();  // empty groups keep the wait count uniform
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) load_stage(s);

    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt landed for all threads; stage kt-1 is free to refill
        load_stage(kt + STAGES - 1);
        const uint16_t *a_s = As + (kt % STAGES) * A_STAGE, *b_s = Bs + (kt % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {  // k ascending: the chain's order
            uint32_t af[MI][4], bfr[NI][2];
#pragma unroll
            for (int i = 0; i < MI; i++)
                ldmatrix_x4(af[i], a_s + (wm0 + i * 16 + (lane % 16)) * (BK + SMEM_PAD) + kk + (lane / 16) * 8);
#pragma unroll
            for (int j = 0; j + 1 < NI; j += 2) {
                uint32_t r[4];
                ldmatrix_x4(r, b_s + (wn0 + j * 8 + (lane & 7) + ((lane >> 4) << 3)) * (BK + SMEM_PAD) + kk +
                                   ((lane >> 3) & 1) * 8);
                bfr[j][0] = r[0]; bfr[j][1] = r[1]; bfr[j + 1][0] = r[2]; bfr[j + 1][1] = r[3];
            }
            if (NI % 2) {
                int l = lane & 15;
                ldmatrix_x2(bfr[NI - 1], b_s + (wn0 + (NI - 1) * 8 + (l & 7)) * (BK + SMEM_PAD) + kk + (l >> 3) * 8);
            }
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NI; j++) mma_bf16_16816(acc[i][j], af[i], bfr[j]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: one rounding to bf16 (or none for fp32 output), gemm_store_pair.
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int m = m0 + wm0 + i * 16 + (lane >> 2) + half * 8;
            if (m >= row_end) continue;
            long yrow = p.y_rows ? p.y_rows[m] : m;
#pragma unroll
            for (int j = 0; j < NI; j++) {
                int n = n0 + wn0 + j * 8 + (lane & 3) * 2;
                gemm_store_pair(p, y, yrow, n, acc[i][j][half * 2], acc[i][j][half * 2 + 1]);
            }
        }
}

// --- launch ---

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
static void launch_config(cuda_ctx *c, const gemm_problem *p, int batch, bool aligned, const char *op) {
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr size_t SMEM = (size_t)STAGES * (BM + BN) * (BK + SMEM_PAD) * sizeof(uint16_t);
    dim3 grid((unsigned)((p->N + BN - 1) / BN), (unsigned)((p->M + BM - 1) / BM), (unsigned)batch);
    if (grid.y > 65535u || grid.z > 65535u)
        invar_die(INVAR_EXIT_INPUT, "%s: M=%d batch=%d exceed the CUDA grid", op, p->M, batch);
    if (aligned) {
        auto k = gemm_kernel<BM, BN, BK, WM, WN, STAGES, true>;
        cuda_kernel_smem(c, (const void *)k, SMEM, op);
        k<<<grid, THREADS, SMEM, c->stream>>>(*p);
    } else {
        auto k = gemm_kernel<BM, BN, BK, WM, WN, STAGES, false>;
        cuda_kernel_smem(c, (const void *)k, SMEM, op);
        k<<<grid, THREADS, SMEM, c->stream>>>(*p);
    }
    CUDA_CHECK_LAUNCH(op);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// cp.async needs 16-byte aligned chunks; else the scalar loader fills the same tiles.
static bool loads_aligned(const gemm_problem *p, int batch) {
    return p->K % 8 == 0 && p->ldx % 8 == 0 && p->ldw % 8 == 0 && aligned16(p->x) && aligned16(p->w) &&
           (batch <= 1 || p->group_offsets || (p->stride_x % 8 == 0 && p->stride_w % 8 == 0)) &&
           (!p->group_offsets || p->stride_w % 8 == 0);
}

void gemm_launch(cuda_ctx *c, const gemm_problem *p, int batch, const char *op) {
    if (p->M <= 0 || p->N <= 0 || batch <= 0) return;
    if (p->K <= 0) invar_die(INVAR_EXIT_INPUT, "%s: K=%d must be positive", op, p->K);
    const bool aligned = loads_aligned(p, batch);
    if (c->wgmma) {
        gemm_sm90_launch(c, p, batch, aligned, op);
        return;
    }
    const int rows = gemm_plan_rows(p->M, batch, p->rows_listed);  // tiles only; the grid covers M
    long large_tiles = (long)((rows + 127) / 128) * ((p->N + 127) / 128) * batch;
    // Skinny also for M <= 64 when the weights fit in L2: its 4 row-blocks then re-read them
    // from L2 (the medium tiles give too few CTAs there).
    const bool weights_in_l2 = (double)p->N * p->K * 2.0 * (p->group_offsets ? 1 : batch) <= 48e6;
    if (rows <= 16 || (rows <= 64 && weights_in_l2))
        launch_config<16, 32, 128, 16, 8, 6>(c, p, batch, aligned, op);
    else if (large_tiles >= c->num_sms)
        launch_config<128, 128, 32, 64, 32, 4>(c, p, batch, aligned, op);
    else
        launch_config<64, 64, 64, 32, 32, 4>(c, p, batch, aligned, op);
}

// The launcher's view of an op's arguments (leading dimensions default to dense rows).
static gemm_problem problem_of(const gemm_args *a) {
    gemm_problem p = {};
    p.y = a->y;
    p.y_f32 = a->y_f32;
    p.x = a->x;
    p.w = a->w;
    p.M = a->M;
    p.N = a->N;
    p.K = a->K;
    p.ldx = a->ldx ? a->ldx : a->K;
    p.ldy = a->ldy ? a->ldy : a->N;
    p.ldw = a->ldw ? a->ldw : a->K;
    p.stride_x = a->stride_x;
    p.stride_y = a->stride_y;
    p.stride_w = a->stride_w;
    p.split_N = a->split_N;
    return p;
}

// The order is the split count over the k-tiles and the instruction (gemm_plan.cuh: S chains of
// k16 steps, added in split order); the plan's tile, split mode and load decide only who computes
// a chain and when, so they are the path.
static void note_gemm(ops_set *ops, const gemm_args *a) {
    char path[48];
    const int splits = inv_cuda_gemm_plan_describe(ops, a, path, (int)sizeof path);
    long order[] = {splits, GEMM_BK, cuda_ctx_of(ops)->wgmma ? 1 : 0};
    long shape[] = {a->N, a->K, a->batch > 1 ? a->batch : 1, a->y_f32 ? 1 : 0, a->split_N > 0 ? a->split_N : a->N};
    fingerprint_note(ops->fingerprints, "gemm", fingerprint_order(shape, 5), fingerprint_order(order, 3),
                     path);
}

void inv_cuda_gemm(ops_set *ops, const gemm_args *a) {
    if (ops->fingerprints && a->M > 0 && a->N > 0) note_gemm(ops, a);
    const gemm_problem p = problem_of(a);
    gemm_launch(cuda_ctx_of(ops), &p, a->batch > 1 ? a->batch : 1, "gemm");
}

int inv_cuda_gemm_plan_describe(ops_set *ops, const gemm_args *a, char *path, int path_len) {
    cuda_ctx *c = cuda_ctx_of(ops);
    if (!c->wgmma) {  // the portable kernel: no split-K on any device but sm_90a
        snprintf(path, (size_t)path_len, "mma.sync");
        return 1;
    }
    const gemm_problem p = problem_of(a);
    const int batch = a->batch > 1 ? a->batch : 1;
    const gemm_plan pl = gemm_sm90_plan(c, &p, batch, loads_aligned(&p, batch));
    gemm_plan_path(&pl, path, path_len);
    return pl.splits;
}

int inv_cuda_sm_count(ops_set *ops) { return cuda_ctx_of(ops)->num_sms; }
