// kernels/cuda/gemm_sm90_split_sum.cuh — the sm_90a GEMM's split-K sums, all in split order
// ((p_0 + p_1) + p_2) + ...: one CTA's running total (registers or L2), the split CTAs'
// partials, and the stream-K hand-off of a chain's state.
#ifndef INVAR_KERNELS_CUDA_GEMM_SM90_SPLIT_SUM_CUH
#define INVAR_KERNELS_CUDA_GEMM_SM90_SPLIT_SUM_CUH

#include <stdint.h>         // uint16_t

#include "gemm.cuh"         // gemm_problem, gemm_round_bf16x2
#include "wgmma.cuh"        // INVAR_WGMMA, wgmma_hold

#if INVAR_WGMMA
// The running total's start: -0, so folding p_0 into it gives p_0's bits exactly (-0 + x = x; +0
// would turn an exact -0 into +0), with no first-split branch (it made ptxas spill).
#define GEMM_TOTAL_START (-0.0f)

// SPLIT_IN_CTA after a split's last wgmma has retired: total += acc, acc = 0.
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
    // The zeros are written here, not sunk into the next chain's wgmma (ptxas would serialize them:
    // C7515).
#pragma unroll
    for (int i = 0; i < NI; i++) wgmma_hold(acc[i]);
}

// The same fold with the running total in L2 (ws_total_in_l2): this thread's float4 pieces, this
// CTA's alone, so program order orders its stores and loads. Split 0 stores p_0, later splits total
// + p_s; load_total_l2 brings the sum back into zeroed accumulators (adding into live ones
// spilled). Loads are batched ahead of the stores (__stcg clobbers memory), the first batch issued
// before the drain.
#define TOTAL_L2_LOADS_IN_FLIGHT 4
template <int NI, int WN>
__device__ __forceinline__ float4 *total_l2_of(float4 *totals, int threads) {
    return totals + ((long)blockIdx.x * (NI * WN / 8) * threads + threadIdx.x);
}
// fold_split_l2's first batch of loads (zeros when `first`).
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

// --- SPLIT_GRID's sum: ((p_0 + p_1) + p_2) + ... in split order, one rounding ---

// The partials [splits][per_split] at flat index i .. i + W - 1, summed in split order and stored
// as bf16 (or fp32): one function for the tile's last CTA and the reduce kernel, so one order.
// __ldcg: never a stale L1 line. Loads batched ahead of the adds, so they do not run in series.
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

// Where gemm_sm90_kernel's split CTAs put the sum: each counts itself in its tile's arrival counter
// after writing its partial; the last adds the partials and resets the counter (no second launch).
struct gemm_split_out {
    void *y;
    long ldy;
    bool y_f32;
    unsigned *arrivals;  // [tiles of the launch], 0 before and after every launch; NULL: the
                         // reduce kernel sums instead
};

#if INVAR_WGMMA
// After storing its partial: the tile's last CTA also writes the sum (one SM: a few rows only,
// GEMM_SPLIT_LAST_CTA_MAX_M).
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

// --- stream-K order: a chain handed from one CTA to the next (gemm_plan.cuh) ---

// Stream-K hand-off (gemm_plan.cuh): CTA c's consumer thread t keeps its state (the accumulators,
// then IN_CTA's running total) at state[(c * NS + e) * threads + t], and warp w raises ready[c *
// warps + w]; warp w of CTA c + 1 reads it and resets the flag. state == NULL: round robin.
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

// This warp's part of the chain state, stored exactly, then announced after a fence.
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

// The state the same warp of CTA blockIdx.x - 1 handed out (take; else a fresh chain). Branch-free:
// with the loads under a branch ptxas serialized the wgmma (C7515).
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

#endif
