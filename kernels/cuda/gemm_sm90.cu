// kernels/cuda/gemm_sm90.cu — the sm_90a GEMM's launch: a plan (gemm_plan_choose.cuh) to the
// kernel instantiation that runs it (gemm_sm90_kernels.cuh). The reduction order is gemm_plan.cuh's
// on every path; nothing here changes a bit, only who computes a chain and when.
#include <cuda.h>           // CUtensorMap
#include <cuda_runtime.h>   // dim3
#include <stdint.h>         // uintptr_t

#include "../bf16.h"
#include "cuda_ctx.cuh"     // cuda_ctx, cuda_scratch, cuda_kernel_smem, CUDA_CHECK_LAUNCH
#include "pdl.cuh"          // pdl_launch, GEMM_PDL
#include "gemm.cuh"         // gemm_problem, gemm_sm90_plan, gemm_sm90_launch
#include "gemm_plan_choose.cuh"     // gemm_plan_choose, gemm_plan_name
#include "mma.cuh"
#include "tma_map.cuh"      // tma_map_bf16_2d, tma_map_bf16_3d
#include "l2_policy.cuh"
#include "wgmma.cuh"
#include "gemm_sm90_epilogue.cuh"   // epilogue_stage_bytes, stages_epilogue, ws_* staging rules
#include "gemm_sm90_split_sum.cuh"  // gemm_split_out, gemm_handoff
#include "gemm_sm90_kernels.cuh"    // the kernels, gemm_x_box_rows

// --- launch ---

// Pipeline depth of the 64 x 128 cp.async kernel (grouped products: the MoE experts), which
// loads STAGES - 2 k-tiles ahead; at most 9 (24 KB a stage). Compile time only, for experiments
// (NVCC_DEFINES=-DGEMM_CP_ASYNC_STAGES=N): a depth decides when operands arrive, never a bit.
#ifndef GEMM_CP_ASYNC_STAGES
#define GEMM_CP_ASYNC_STAGES 4
#endif
static_assert(GEMM_CP_ASYNC_STAGES >= 3 && GEMM_CP_ASYNC_STAGES <= 9, "GEMM_CP_ASYNC_STAGES: 3 to 9");
// Where one wave of CTAs holds every row (gemm_cp_async_deep: a decode step's few experts), one
// CTA an SM with a deeper pipeline streams the weights faster than two shallow ones.
#ifndef GEMM_CP_ASYNC_DEEP_STAGES
#define GEMM_CP_ASYNC_DEEP_STAGES 8
#endif
static_assert(GEMM_CP_ASYNC_DEEP_STAGES >= 3 && GEMM_CP_ASYNC_DEEP_STAGES <= 9, "GEMM_CP_ASYNC_DEEP_STAGES: 3 to 9");

// Grouped products' weight tiles by TMA (LOAD_GATHER_TMA_W; kernels/cuda/NOTES.md has its
// measurement): NVCC_DEFINES=-DGEMM_GATHER_TMA_W=0 keeps them on cp.async, as before, and
// does not compile those kernels. A load decides when operands arrive, never a bit.
#ifndef GEMM_GATHER_TMA_W
#define GEMM_GATHER_TMA_W 1
#endif

// k<<<grid, block, smem>>>(args...), with GEMM_PDL as a programmatic dependent (pdl.cuh).
template <typename... KernelArgs, typename... Args>
static void gemm_kernel_launch(cuda_ctx *c, void (*k)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                               const char *op, Args... args) {
    if (GEMM_PDL) {
        pdl_launch(c, k, grid, block, smem, op, args...);
        return;
    }
    k<<<grid, block, smem, c->stream>>>(args...);
    CUDA_CHECK_LAUNCH(op);
}

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
    if (LOAD == LOAD_GATHER_TMA_W)  // the groups' weights, one matrix each
        tw = tma_map_bf16_3d(c, p->w, p->groups, p->N, p->K, p->ldw, p->stride_w, GEMM_BK, BN, op, "w");
    auto k = gemm_sm90_kernel<WGS, NI, STAGES, LOAD, SPLIT>;
    cuda_kernel_smem(c, (const void *)k, SMEM, op);
    gemm_kernel_launch(c, k, grid, dim3(WGS * 128), SMEM, op, *p, splits, split_out, tx, tw);
}

// The persistent kernel over dense products (TMA; one, or a batch): at most one CTA per SM,
// walking its share of the work units round robin or in stream-K order. Every tile compiles the
// vector and staged epilogues, each checking the output's alignment at run time. pl: the plan
// whose tile and split mode the template arguments are.
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
    // Stream-K order walks whole register chains on 128-column instructions only.
    constexpr bool CAN_STREAM = SPLIT != SPLIT_GRID && WN == 128 && !ws_total_in_l2(SPLIT, NI, WN);
    gemm_handoff ho = {};
    if (ws_total_in_l2(SPLIT, NI, WN))
        ho.totals = (float4 *)cuda_scratch(c, SCRATCH_GEMM_TOTALS, (size_t)grid * CW * 128 * NI * WN / 2 * sizeof(float),
                                           "gemm split-K running totals");
    // whole rounds of round robin first, so that more units than CTAs are left for stream-K
    const long rr_units = (long)pl.stream_k_rounds * grid;
    if (CAN_STREAM && pl.stream_k && units - rr_units > grid) {
        ho.rr_units = (int)rr_units;
        constexpr int STATE = NI * WN / 2 * (SPLIT == SPLIT_IN_CTA ? 2 : 1);  // floats a consumer thread
        ho.state = (float *)cuda_scratch(c, SCRATCH_GEMM_HANDOFF, (size_t)grid * CW * 128 * STATE * sizeof(float),
                                         "gemm stream-K chain states");
        ho.ready = (unsigned *)cuda_scratch_zeroed(c, SCRATCH_GEMM_HANDOFF_READY, (size_t)grid * CW * 4 * sizeof(unsigned),
                                                   "gemm stream-K ready flags");
    }
    // 3-D maps: a batched product's matrices are the third coordinate.
    const CUtensorMap tx =
        tma_map_bf16_3d(c, p->x, batch, p->M, p->K, p->ldx, p->stride_x, GEMM_BK, gemm_x_box_rows(p->M, BM), op, "x");
    const CUtensorMap tw = tma_map_bf16_3d(c, p->w, batch, p->N, p->K, p->ldw, p->stride_w, GEMM_BK, BN, op, "w");
    // The staged bf16 epilogue by TMA stores: rows the map can address (16-byte aligned, strides
    // multiples of 8 elements), not scattered through y_rows.
    const bool tma_store = WN % 64 == 0 && SPLIT != SPLIT_GRID && staged && !p->y_f32 && !p->y_rows &&
                           ((uintptr_t)p->y & 15u) == 0 && p->ldy % 8 == 0 && (batch == 1 || p->stride_y % 8 == 0);
    const CUtensorMap ty =
        tma_store ? tma_map_bf16_3d(c, p->y, batch, p->M, p->N, p->ldy, p->stride_y, 64, 16, op, "y") : CUtensorMap{};
    // Round robin runs a kernel compiled without the stream-K code (unused, it still slowed the cta
    // kernel). The TMA-store kernels wherever the TMA stores are taken, round robin, and in stream-K
    // order at S = 1 (SK_TMA: the deferred stores carried over the hand-overs).
    const bool tma_only = HAS_TMA_KERNEL && tma_store && !ho.state;
    if (!tma_only) staged = ws_stages_epilogue(SPLIT, NI, WN, k_tiles, false);
    constexpr bool SK_TMA = HAS_TMA_KERNEL && CAN_STREAM && SPLIT == SPLIT_NONE;
    const bool sk_tma = ho.state && tma_store && SK_TMA;
    if ((tma_only || sk_tma) && !staged)  // a TMA-store kernel needs its stage
        invar_die(INVAR_EXIT_SYSTEM, "%s: gemm TMA-store kernel launched without its stage", op);
    auto k = sk_tma   ? gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, SK_TMA, SK_TMA>
             : ho.state   ? gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, CAN_STREAM, false>
             : tma_only ? gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, false, HAS_TMA_KERNEL>
                        : gemm_sm90_ws_kernel<CW, NI, WN, STAGES, SPLIT, false, false>;
    // The attribute allows the most this kernel ever asks for: lowered for an unstaged launch it
    // would fail a staged one that another cuda_ctx believes it has allowed.
    cuda_kernel_smem(c, (const void *)k, SLOTS_SMEM + (ws_can_stage(SPLIT, WN, tma_only) ? STAGE_SMEM : 0), op);
    const size_t smem = SLOTS_SMEM + (staged ? STAGE_SMEM : 0);
    gemm_kernel_launch(c, k, dim3(grid), dim3((CW + 1) * 128), smem, op, *p, batch, splits, m_tiles, n_tiles, ho, staged,
                       tma_store, tx, tw, ty);
}

// SPLIT_GRID: the splits' fp32 partials into scratch, then their sum in split order into y; in
// blocks of rows so the scratch stays under GEMM_SPLIT_SCRATCH_BYTES (rows are independent).
#define GEMM_SPLIT_SCRATCH_BYTES (256L << 20)
// WS (pl.grid_persistent): the split CTAs are the persistent kernel's units, else one
// gemm_sm90_kernel CTA each. pl.sum_last_cta: each tile's last CTA sums, else
// gemm_split_reduce_kernel, launched as a programmatic dependent.
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

// Dense products, one or a batch at strides that are multiples of 8 and not zero (a 3-D map's
// stride 0 is not a layout the driver promises); grouped products gather rows, which TMA cannot,
// and scattered ones (y_rows) would lose their rows on the split-K grid path (its sums store row m).
static bool tma_possible(const cuda_ctx *c, const gemm_problem *p, int batch, bool aligned) {
    const bool strided = batch == 1 || (p->stride_x != 0 && p->stride_w != 0);
    return aligned && strided && !p->group_offsets && !p->x_rows && !p->y_rows && c->tensor_map_encode;
}

#if GEMM_GATHER_TMA_W
// A grouped product's weight tiles by TMA (LOAD_GATHER_TMA_W): its x rows stay gathered by
// cp.async, so only w's layout must suit a 3-D map (16-byte rows and matrix strides).
static bool tma_w_possible(const cuda_ctx *c, const gemm_problem *p) {
    return p->group_offsets && p->groups > 0 && (p->groups == 1 || p->stride_w > 0) && p->ldw % 8 == 0 &&
           p->stride_w % 8 == 0 && ((uintptr_t)p->w & 15u) == 0 && c->tensor_map_encode;
}
#endif

gemm_plan gemm_sm90_plan(const cuda_ctx *c, const gemm_problem *p, int batch, bool aligned) {
    return gemm_plan_choose_split(gemm_plan_rows(p->M, batch, p->rows_listed), p->N,
                                  p->split_N > 0 ? p->split_N : p->N, p->K, batch, aligned,
                                  tma_possible(c, p, batch, aligned), c->num_sms);
}

// The one-tile kernels of the cp.async plans, x's rows by cp.async and w's tiles the LOADER way
// (LOAD_CP_ASYNC, or LOAD_GATHER_TMA_W: a grouped product's by TMA). False for any other plan.
template <int LOADER>
static bool launch_cp_async_plan(cuda_ctx *c, const gemm_problem *p, int batch, const gemm_plan &pl, const char *op) {
    if (pl.load != LOAD_CP_ASYNC) return false;
    const int S = pl.splits;
    const bool deep = gemm_cp_async_deep(p->N, batch, p->rows_listed, c->num_sms);
    const bool none = pl.mode == SPLIT_NONE, in_cta = pl.mode == SPLIT_IN_CTA;
    if (pl.tile == TILE_64x128 && none && deep) launch_sm90<1, 1, GEMM_CP_ASYNC_DEEP_STAGES, LOADER, SPLIT_NONE>(c, p, batch, S, op);
    else if (pl.tile == TILE_64x128 && none) launch_sm90<1, 1, GEMM_CP_ASYNC_STAGES, LOADER, SPLIT_NONE>(c, p, batch, S, op);
    else if (pl.tile == TILE_64x128 && in_cta && deep) launch_sm90<1, 1, GEMM_CP_ASYNC_DEEP_STAGES, LOADER, SPLIT_IN_CTA>(c, p, batch, S, op);
    else if (pl.tile == TILE_64x128 && in_cta) launch_sm90<1, 1, GEMM_CP_ASYNC_STAGES, LOADER, SPLIT_IN_CTA>(c, p, batch, S, op);
    else if (pl.tile == TILE_128x128 && in_cta) launch_sm90<2, 1, 4, LOADER, SPLIT_IN_CTA>(c, p, batch, S, op);
    else if (pl.tile == TILE_128x256 && none) launch_sm90<2, 2, 4, LOADER, SPLIT_NONE>(c, p, batch, S, op);
    else return false;
    return true;
}

void gemm_sm90_launch(cuda_ctx *c, const gemm_problem *p, int batch, bool aligned, const char *op) {
    const gemm_plan pl = gemm_sm90_plan(c, p, batch, aligned);
    const int S = pl.splits;
    if (pl.mode == SPLIT_GRID && batch != 1)
        invar_die(INVAR_EXIT_SYSTEM, "%s: gemm plan %s for a batch of %d products", op, gemm_plan_name(&pl), batch);
    // Every (load, tile, mode) gemm_plan_choose can return (test_gemm_plan checks the list).
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
#if GEMM_GATHER_TMA_W
    else if (tma_w_possible(c, p) && launch_cp_async_plan<LOAD_GATHER_TMA_W>(c, p, batch, pl, op)) {}
#endif
    else if (launch_cp_async_plan<LOAD_CP_ASYNC>(c, p, batch, pl, op)) {}
    else if (GEMM_CASE(LOAD_SCALAR, TILE_64x128, SPLIT_NONE)) launch_sm90<1, 1, 4, LOAD_SCALAR, SPLIT_NONE>(c, p, batch, S, op);
    else if (GEMM_CASE(LOAD_SCALAR, TILE_64x128, SPLIT_IN_CTA)) launch_sm90<1, 1, 4, LOAD_SCALAR, SPLIT_IN_CTA>(c, p, batch, S, op);
    else invar_die(INVAR_EXIT_SYSTEM, "%s: gemm plan %s (load %d) has no kernel", op, gemm_plan_name(&pl), (int)pl.load);
#undef GEMM_CASE
}
