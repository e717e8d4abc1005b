// kernels/cuda/gemm_sm90_split_sum.cuh — the sm_90a GEMM's split-K sums and the stream-K hand-off.
#ifndef INVAR_KERNELS_CUDA_GEMM_SM90_SPLIT_SUM_CUH
#define INVAR_KERNELS_CUDA_GEMM_SM90_SPLIT_SUM_CUH

#include <stdint.h>         // uint16_t

#include "gemm.cuh"         // gemm_problem, gemm_round_bf16x2
#include "wgmma.cuh"        // INVAR_WGMMA, wgmma_hold

#if INVAR_WGMMA
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

#endif
