// kernels/cuda/gemm_sm90.cu — the batch-invariant GEMM on Hopper (sm_90a): warpgroup MMA.
//
// The reduction order of one output element y[m][n] is the chain
//     acc = 0;  for k0 = 0, 16, 32, ... < K:  acc = wgmma_m64n128k16(acc, x[m][k0:k0+16], w[n][k0:k0+16])
// k0 ascending, one instruction shape, no split-K, the K tail zero-filled. A CTA is 1 or 2
// warpgroups (BM = 64 or 128 rows) by 128 or 256 columns (one or two instructions per k16 step
// and warpgroup); which tile the launcher picks, and how the tiles were loaded, only decide
// which warpgroup carries a chain and when its operands arrive, never the chain, so a row has
// the same bits at every M (tests/test_cuda_ops.c checks it bitwise).
//
// Loads, into STAGES shared-memory slots in the 128-byte swizzle layout wgmma reads:
//   TMA      dense products with 16-byte aligned rows: one thread issues two tensor copies per
//            k-tile, completing on the slot's mbarrier, STAGES-1 k-tiles ahead.
//   cp.async everything else (MoE experts gather their rows through x_rows; batched products;
//            unaligned strides): every thread copies 16-byte chunks (or single values),
//            STAGES-2 k-tiles ahead.
#include <cuda.h>           // CUtensorMap, cuTensorMapEncodeTiled's enums (types only)
#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>   // cudaFuncSetAttribute, dim3
#include <stdint.h>         // uint8_t, uint16_t, uint64_t

#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK
#include "gemm.cuh"         // gemm_problem, gemm_view, gemm_load_rows, gemm_store_pair
#include "mma.cuh"          // cp_async_commit, cp_async_wait
#include "wgmma.cuh"        // wgmma_*, mbar_*, tma_load_2d, sw128_offset, fence_proxy_async

#define SM90_BK 64          // k per stage: one 128-byte swizzle row of bf16

enum sm90_load { LOAD_TMA, LOAD_CP_ASYNC, LOAD_SCALAR };

#if INVAR_WGMMA
// One k-tile of the chain: 4 k16 steps, NI instructions of 128 columns each.
template <int NI>
__device__ __forceinline__ void mma_k_tile(float (&acc)[NI][64], const uint8_t *a_tile, const uint8_t *b_tile) {
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < SM90_BK / 16; kk++)  // k ascending: the chain's order
#pragma unroll
        for (int i = 0; i < NI; i++)
            wgmma_m64n128k16_bf16(acc[i], wgmma_desc_sw128(a_tile + kk * 32),
                                  wgmma_desc_sw128(b_tile + i * 128 * 128 + kk * 32));
    wgmma_commit();
}
#endif

// --- the kernel ----------------------------------------------------------------------------

template <int WGS, int NI, int STAGES, int LOAD>
__global__ void __launch_bounds__(WGS * 128, 1)
gemm_sm90_kernel(gemm_problem p, const __grid_constant__ CUtensorMap tmap_x, const __grid_constant__ CUtensorMap tmap_w) {
#if INVAR_WGMMA
    constexpr int BM = 64 * WGS, BN = 128 * NI, THREADS = WGS * 128;
    constexpr int A_BYTES = BM * SM90_BK * 2, STAGE_BYTES = A_BYTES + BN * SM90_BK * 2;
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);  // swizzle atoms
    __shared__ __align__(8) uint64_t full[STAGES];  // TMA: slot s holds its k-tile

    const gemm_view v = gemm_view_of(p, blockIdx.z);
    const int m0 = v.row_begin + blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (m0 >= v.row_end) return;  // grouped: this group has fewer rows than the grid allows

    const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    float acc[NI][64];
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < 64; e++) acc[i][e] = 0.0f;

    const int KT = (p.K + SM90_BK - 1) / SM90_BK;
    if (LOAD == LOAD_TMA) {
        auto issue = [&](int kt) {
            uint8_t *s = smem + (kt % STAGES) * STAGE_BYTES;
            uint64_t *bar = &full[kt % STAGES];
            mbar_expect_tx(bar, STAGE_BYTES);
            tma_load_2d(s, &tmap_x, bar, kt * SM90_BK, m0);
            tma_load_2d(s + A_BYTES, &tmap_w, bar, kt * SM90_BK, n0);
        };
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) mbar_init(&full[s], 1);
            mbar_init_fence();
            for (int kt = 0; kt < STAGES - 1 && kt < KT; kt++) issue(kt);
        }
        __syncthreads();
        for (int kt = 0; kt < KT; kt++) {
            const uint8_t *s = smem + (kt % STAGES) * STAGE_BYTES;
            mbar_wait(&full[kt % STAGES], (uint32_t)(kt / STAGES) & 1u);
            mma_k_tile<NI>(acc, s + wg * 64 * 128, s + A_BYTES);
            wgmma_wait<1>();
            // Every warpgroup has retired k-tile kt-1: its slot takes k-tile kt+STAGES-1.
            __syncthreads();
            if (threadIdx.x == 0 && kt + STAGES - 1 < KT) issue(kt + STAGES - 1);
        }
    } else {
        auto load_stage = [&](int kt) {
            if (kt < KT) {
                uint8_t *s = smem + (kt % STAGES) * STAGE_BYTES;
                // the 128-byte swizzle layout TMA writes and wgmma reads
                gemm_load_rows<BM, SM90_BK, THREADS, LOAD == LOAD_CP_ASYNC>(
                    [=](int r, int c) { return (uint16_t *)(s + sw128_offset(r, c)); }, v.x, p.ldx, m0, v.row_end,
                    p.x_rows, kt * SM90_BK, p.K);
                gemm_load_rows<BN, SM90_BK, THREADS, LOAD == LOAD_CP_ASYNC>(
                    [=](int r, int c) { return (uint16_t *)(s + A_BYTES + sw128_offset(r, c)); }, v.w, p.ldw, n0,
                    p.N, nullptr, kt * SM90_BK, p.K);
            }
            cp_async_commit();  // empty groups keep the wait count uniform
        };
#pragma unroll
        for (int s = 0; s < STAGES - 2; s++) load_stage(s);
        for (int kt = 0; kt < KT; kt++) {
            // Stage kt has landed for every thread; every warpgroup has retired k-tile kt-2
            // (wait<1> below), so its slot may be refilled.
            cp_async_wait<STAGES - 3>();
            fence_proxy_async();
            __syncthreads();
            load_stage(kt + STAGES - 2);
            const uint8_t *s = smem + (kt % STAGES) * STAGE_BYTES;
            mma_k_tile<NI>(acc, s + wg * 64 * 128, s + A_BYTES);
            wgmma_wait<1>();
        }
        cp_async_wait<0>();
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);

    // Epilogue: one rounding to bf16 (or none for fp32 output).
    const int q = lane & 3, r = lane >> 2;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        int m = m0 + wg * 64 + warp * 16 + r + half * 8;
        if (m >= v.row_end) continue;
        long yrow = p.y_rows ? p.y_rows[m] : m;
#pragma unroll
        for (int i = 0; i < NI; i++)
#pragma unroll
            for (int j = 0; j < 16; j++) {
                int n = n0 + i * 128 + j * 8 + 2 * q;
                gemm_store_pair(p, v.y, yrow, n, acc[i][4 * j + 2 * half], acc[i][4 * j + 2 * half + 1]);
            }
    }
#else
    (void)p;  // not an sm_90a pass: never launched (gemm_launch checks cuda_ctx.wgmma)
    (void)tmap_x;
    (void)tmap_w;
#endif
}

// --- launch ----------------------------------------------------------------------------------

// A 2-D row-major bf16 matrix [rows][cols] with row stride ld, read in boxes of 64 x box_rows.
static CUtensorMap tensor_map(cuda_ctx *c, const void *base, long rows, long cols, long ld, int box_rows,
                              const char *op) {
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {SM90_BK, (cuuint32_t)box_rows};
    cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)c->tensor_map_encode)(
        &m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, elem_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        invar_die(INVAR_EXIT_SYSTEM, "cuda: %s: cuTensorMapEncodeTiled (%ld x %ld, ld %ld) failed: error %d", op,
                  rows, cols, ld, (int)r);
    return m;
}

template <int WGS, int NI, int STAGES, int LOAD>
static void launch_sm90(cuda_ctx *c, const gemm_problem *p, int batch, const char *op) {
    constexpr int BM = 64 * WGS, BN = 128 * NI;
    constexpr size_t SMEM = (size_t)STAGES * (BM + BN) * SM90_BK * 2 + 1024;  // + alignment slack
    dim3 grid((unsigned)((p->N + BN - 1) / BN), (unsigned)((p->M + BM - 1) / BM), (unsigned)batch);
    if (grid.y > 65535u || grid.z > 65535u)
        invar_die(INVAR_EXIT_INPUT, "%s: M=%d batch=%d exceed the CUDA grid", op, p->M, batch);
    CUtensorMap tx = {}, tw = {};
    if (LOAD == LOAD_TMA) {
        tx = tensor_map(c, p->x, p->M, p->K, p->ldx, BM, op);
        tw = tensor_map(c, p->w, p->N, p->K, p->ldw, BN, op);
    }
    auto k = gemm_sm90_kernel<WGS, NI, STAGES, LOAD>;
    CUDA_CHECK(op, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
    k<<<grid, WGS * 128, SMEM, c->stream>>>(*p, tx, tw);
    CUDA_CHECK_LAUNCH(op);
}

void gemm_sm90_launch(cuda_ctx *c, const gemm_problem *p, int batch, bool aligned, const char *op) {
    const bool tma = aligned && batch == 1 && !p->group_offsets && !p->x_rows && c->tensor_map_encode;
    // 128 x 256 tiles once they fill the GPU (fewer L2 bytes per FLOP); 64 x 128 before
    // (more CTAs at small M, two per SM).
    long big_tiles = (long)((p->M + 127) / 128) * ((p->N + 255) / 256) * batch;
    const bool big = p->M > 64 && big_tiles >= c->num_sms;
    if (tma) {
        if (big) launch_sm90<2, 2, 4, LOAD_TMA>(c, p, batch, op);
        else launch_sm90<1, 1, 6, LOAD_TMA>(c, p, batch, op);
    } else if (aligned) {
        if (big) launch_sm90<2, 2, 4, LOAD_CP_ASYNC>(c, p, batch, op);
        else launch_sm90<1, 1, 4, LOAD_CP_ASYNC>(c, p, batch, op);
    } else {
        launch_sm90<1, 1, 4, LOAD_SCALAR>(c, p, batch, op);
    }
}
