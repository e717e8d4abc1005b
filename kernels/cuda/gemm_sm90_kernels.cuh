// kernels/cuda/gemm_sm90_kernels.cuh — the batch-invariant GEMM on Hopper (sm_90a): warpgroup MMA.
//
// Reduction order (gemm_plan.cuh's, in every kernel here): split s of S = gemm_split_count(split N, K) is
// the chain p_s = 0; for k0 ascending in its k-tiles: p_s = wgmma_m64nNk16(p_s, ...), the K tail
// zero-filled; y = ((p_0 + p_1) + ...) in split order (S = 1: p_0). A CTA walks every split of its
// tile (SPLIT_NONE, SPLIT_IN_CTA: a running total from -0) or computes one split's fp32 partial
// (SPLIT_GRID). Kernel, tile and load path decide only who carries a chain and when, so a row has
// the same bits at every M.
//   gemm_sm90_ws_kernel       dense products with aligned rows (TMA): persistent, warp-specialized
//   gemm_sm90_kernel          one tile a CTA: small-M split CTAs (TMA); cp.async or scalar loads
//   gemm_split_reduce_kernel  SPLIT_GRID's sum where no last CTA adds the partials
#ifndef INVAR_KERNELS_CUDA_GEMM_SM90_KERNELS_CUH
#define INVAR_KERNELS_CUDA_GEMM_SM90_KERNELS_CUH

#include <cuda.h>           // CUtensorMap
#include <stdint.h>         // uint8_t, uint16_t, uint32_t

#include "gemm.cuh"         // gemm_problem, gemm_view, gemm_load_rows
#include "gemm_plan.cuh"    // gemm_split_begin, gemm_tile_of, GEMM_BK, SPLIT_*, LOAD_*
#include "gemm_sm90_epilogue.cuh"   // store_tile*, round_pairs, tma_store_block
#include "gemm_sm90_split_sum.cuh"  // fold_split*, split_finish_tile, hand_out, start_chain
#include "l2_policy.cuh"    // l2_policy_evict_first
#include "mma.cuh"          // cp_async_commit, cp_async_wait
#include "pdl.cuh"          // pdl_release_dependent, pdl_release_gemm, pdl_wait_predecessor, GEMM_PDL
#include "wgmma.cuh"        // wgmma_*, mbar_*, tma_load_2d/3d(_hint), sw128_offset, setmaxnreg_*

// The rows of x a TMA k-tile asks for: BM, or M where smaller (the copy engine's time goes by a
// box's rows). The slot's rows past M keep stale values that feed only rows past M, which no
// epilogue stores.
__host__ __device__ constexpr int gemm_x_box_rows(int M, int bm) { return M >= 1 && M < bm ? M : bm; }
// The bytes a k-tile's two copies write into its slot.
__host__ __device__ constexpr uint32_t gemm_k_tile_tx_bytes(int M, int bm, int bn) {
    return (uint32_t)(gemm_x_box_rows(M, bm) + bn) * GEMM_BK * 2;
}

#if INVAR_WGMMA
// One k-tile of the chain: 4 k16 steps, NI instructions of WN columns; a_lo, b_lo: the tiles' low
// descriptor words.
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
#endif

// The persistent kernel. Warpgroups 0..CW-1 are the consumers, 64 rows each; warpgroup CW the
// producer, one thread of which issues every TMA copy, and which gives its registers back
// (setmaxnreg: registers are shared per SM quadrant) so each consumer thread may hold 240 (248 with
// one consumer). The budgets fill exactly what the CTA launched with, else setmaxnreg.inc waits
// forever (tests/ptxas_budgets.sh). STAGES slots with `full` and `empty` barriers let the producer
// run ahead across work units. CTA b takes units b, b + gridDim.x, ..., or with `ho` an even share
// of their k-tiles (stream-K). A unit is a tile (SPLIT_GRID: and one split); its chains and sums
// are gemm_sm90_kernel's, so both kernels give the same bits.
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
    pdl_release_gemm();
    const int KT = (p.K + GEMM_BK - 1) / GEMM_BK, tiles = m_tiles * n_tiles;
    // Each unit of a product a tile, with SPLIT_GRID a tile and a split.
    const int per_product = SPLIT == SPLIT_GRID ? tiles * splits : tiles, units = batch * per_product;
    // k-tiles [kt_begin, kt_end) of a unit; hand_out: its head, handed to the next CTA; take_over:
    // its tail, continued from the previous CTA's state.
    struct unit { int b, m0, n0, split, kt_begin, kt_end; bool hand_out, take_over; };
    auto unit_at = [&](int u) {
        unit work;
        int m_tile, n_tile;
        work.b = batch == 1 ? 0 : u / per_product;
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
    // This CTA's pieces in order: round robin, or rr_units / gridDim.x rounds of it and then
    // k-tiles [lo, hi) of the remaining units laid end to end (head, whole units, tail).
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
        if constexpr (GEMM_PDL != 0) {  // the first piece's weights into L2, then the wait (pdl.cuh)
            if (pieces > 0) {
                const unit first = piece_at(0);
                for (int kt = first.kt_begin; kt < first.kt_end && kt < first.kt_begin + STAGES; kt++)
                    tma_prefetch_l2_3d(&tmap_w, kt * GEMM_BK, first.n0, first.b);
            }
            pdl_wait_predecessor();
        }
        // Slot counters rather than a division of the k-tile index by STAGES.
        int slot = 0;
        uint32_t slot_round = 0;
        // One row tile: each weight byte is read once, so L2 gives its lines up first.
        for (int j = 0; j < pieces; j++) {
            const unit work = piece_at(j);
            for (int kt = work.kt_begin; kt < work.kt_end; kt++) {
                // the slot's previous use read by every consumer warp
                if (slot_round > 0) mbar_wait(&empty[slot], (slot_round & 1u) ^ 1u);
                uint8_t *s = smem + slot * STAGE_BYTES;
                mbar_expect_tx(&full[slot], stage_tx);
                tma_load_3d(s, &tmap_x, &full[slot], kt * GEMM_BK, work.m0, work.b);
                if (m_tiles == 1)  // a policy per copy: one held across the loop spilled
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
    if constexpr (GEMM_PDL != 0) pdl_wait_predecessor();  // before any global access (stream-K's hand-overs)
    const int cw = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    auto release = [&](int freed) {  // this warp's wgmma have read slot `freed`: it may refill
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[freed]);
    };
    // IN_CTA's running total: in registers, or for 128 x 256 tiles in this CTA's L2 scratch
    constexpr bool TOTAL_L2 = ws_total_in_l2(SPLIT, NI, WN), TOTAL = SPLIT == SPLIT_IN_CTA && !TOTAL_L2;
    static_assert(!TOTAL_L2 || !STREAM, "stream-K hands over register chains only");
    // The cta path up to 144 columns carries two chains (acc, acc2: splits alternate), so a split's
    // fold waits only for its own last wgmma while the next split's run. 128 x 192 and stream-K do
    // not fit two.
    constexpr bool TWO_CHAINS = TOTAL && WN != 192 && !STREAM;
    float acc[NI][WN / 2];
    float acc2[TWO_CHAINS ? NI : 1][WN / 2];
    float total[TOTAL ? NI : 1][WN / 2];
    // prev_slot's release waits for the next k-tile's wgmma_wait<1>. Descriptors built once from
    // lane 0's cw stay in uniform registers.
    int slot = 0, prev_slot = 0;
    uint32_t slot_round = 0;
    const int cw_uniform = __shfl_sync(0xffffffffu, cw, 0);
    const uint32_t a_lo = (uint32_t)wgmma_desc_sw128(smem + cw_uniform * 64 * 128);
    const uint32_t b_lo = (uint32_t)wgmma_desc_sw128(smem + A_BYTES);
    const int row_in_tile = cw * 64 + warp * 16;
    uint8_t *const stage = ws_can_stage(SPLIT, WN, TMA_ONLY) && staged
                               ? smem + STAGES * STAGE_BYTES + (cw * 4 + warp) * epilogue_stage_bytes(SPLIT, WN)
                               : nullptr;
    // The 128-column TMA-store epilogue, deferred: a unit ends by rounding its sum into bf16 pairs,
    // and the next unit stores them a block a k-tile after issuing its wgmma, so the tensor pipe
    // runs through the stores. `pending_next`: the next block to store (NI: none). Only in the
    // TMA_ONLY kernel: beside other epilogues the pairs spilled.
    static_assert(!TMA_ONLY || (ws_has_tma_kernel(SPLIT, WN) && (!STREAM || SPLIT == SPLIT_NONE)), "a TMA-store kernel: stream-K order only at S = 1");
    constexpr bool DEFER = TMA_ONLY && WN == 128;
    uint32_t pending[DEFER ? NI : 1][WN / 4];
    int pending_next = NI, pending_row0 = 0, pending_n0 = 0, pending_b = 0;
    auto store_pending = [&](int i) {  // block i of the pending output (i a constant after unrolling)
        if constexpr (DEFER) tma_store_block<WN>(&tmap_y, stage, pending[i], pending_row0, pending_n0 + i * WN, pending_b);
    };
    // One k-tile: wait for the slot, issue its wgmma, retire the previous k-tile's and free its
    // slot.
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
            // A whole unit: split s into acc (s even) or acc2 (s odd), split s - 1 folded once
            // split s's first k-tile has retired it.
            int kt = 0;
            if constexpr (DEFER) {
                // Split 0 alone, storing the last unit's pending pairs, then drained: elsewhere
                // they spilled.
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
            // Splits in pairs, drained at the back edge and before the paths merge: where ptxas
            // cannot tell which chain a pending wgmma writes, it serializes every wgmma (C7514,
            // C7515).
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
            // A whole unit, split after split into acc, each folded into the L2 total; then the sum back.
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
            // Not unrolled: a peeled first k-tile made ptxas serialize the wgmma (C7514).
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
                if (pending_next <= i) store_pending(i);  // the last unit's, if not yet stored
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
            // (cta path in stream-K order, and 64 x 192: no TMA-store kernel)
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
    if (tma_store && lane == 0) bulk_wait_all();  // no TMA store outlives the shared memory
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

// --- the one-tile-per-CTA kernel (small-M split CTAs; cp.async and scalar loads) ---

// GEMM_PDL's head start (pdl.cuh): a dense product's weight rows [n0, n0 + BN), k-tiles [kt, kt +
// tiles), asked of L2 line by line before the CTA waits for its predecessor. Weights are never
// an earlier kernel's output; a grouped product's are not asked (which experts hold rows is).
template <int BN, int THREADS>
__device__ __forceinline__ void gemm_prefetch_w_l2(const uint16_t *w, long ldw, int N, int K, int n0, int kt, int tiles) {
    const int k0 = kt * GEMM_BK, k1 = min(K, (kt + tiles) * GEMM_BK);
    const int lines = (k1 - k0 + GEMM_BK - 1) / GEMM_BK;  // a k-tile's row: GEMM_BK bf16, one 128-byte line
    for (int i = (int)threadIdx.x; i < BN * lines; i += THREADS) {
        const int r = i / lines, l = i % lines;
        if (n0 + r < N) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + (long)(n0 + r) * ldw + k0 + l * GEMM_BK));
    }
}

// Rows [m0, m0 + BM) of x (gathered through x_rows) into a pipeline slot's x part, k from k0, in
// the 128-byte swizzle layout TMA writes and wgmma reads (cp.async or scalar loads: the one-tile
// kernel).
template <int BM, int THREADS, bool ALIGNED>
__device__ __forceinline__ void gemm_load_slot_x(uint8_t *s, const gemm_problem &p, const gemm_view &v, int m0,
                                                 int k0) {
    gemm_load_rows<BM, GEMM_BK, THREADS, ALIGNED>([=](int r, int c) { return (uint16_t *)(s + sw128_offset(r, c)); },
                                                  v.x, p.ldx, m0, v.row_end, p.x_rows, k0, p.K);
}

// The same for x and rows [n0, n0 + BN) of w: one whole slot.
template <int BM, int BN, int THREADS, bool ALIGNED>
__device__ __forceinline__ void gemm_load_slot(uint8_t *s, const gemm_problem &p, const gemm_view &v, int m0, int n0,
                                               int k0) {
    constexpr int A_BYTES = BM * GEMM_BK * 2;
    gemm_load_slot_x<BM, THREADS, ALIGNED>(s, p, v, m0, k0);
    gemm_load_rows<BN, GEMM_BK, THREADS, ALIGNED>(
        [=](int r, int c) { return (uint16_t *)(s + A_BYTES + sw128_offset(r, c)); }, v.w, p.ldw, n0, p.N, nullptr,
        k0, p.K);
}

// SPLIT_GRID: p.y is the fp32 partials [splits][M][N], split blockIdx.z's at p.y + blockIdx.z *
// stride_y.
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
    pdl_release_gemm();
    int m_tile, n_tile;
    gemm_tile_of((int)(blockIdx.y * gridDim.x + blockIdx.x), (int)gridDim.y, (int)gridDim.x, &m_tile, &n_tile);
    const int KT = (p.K + GEMM_BK - 1) / GEMM_BK;
    // The k-tiles this CTA computes: all of them, or split blockIdx.z's.
    const int kt_begin = SPLIT == SPLIT_GRID ? gemm_split_begin(blockIdx.z, splits, KT) : 0;
    const int kt_end = SPLIT == SPLIT_GRID ? gemm_split_begin(blockIdx.z + 1, splits, KT) : KT;
    const int n_kt = kt_end - kt_begin;
    // SPLIT_GRID runs one dense product: grid.z is the split, not the product.
    const int z = SPLIT == SPLIT_GRID ? 0 : (int)blockIdx.z;
    if constexpr (GEMM_PDL != 0) {
        if (!p.group_offsets)  // a dense product's view reads no memory: safe before the wait
            gemm_prefetch_w_l2<BN, THREADS>(gemm_view_of(p, z).w, p.ldw, p.N, p.K, n_tile * BN, kt_begin, STAGES - 1);
        pdl_wait_predecessor();
    }
    const gemm_view v = gemm_view_of(p, z);
    const int m0 = v.row_begin + m_tile * BM, n0 = n_tile * BN;
    if (m0 >= v.row_end) return;  // grouped: a group with fewer rows
    char *const y = SPLIT == SPLIT_GRID ? v.y + (long)blockIdx.z * p.stride_y * 4 : v.y;

    const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32;
    float acc[NI][64];
#pragma unroll
    for (int i = 0; i < NI; i++)
#pragma unroll
        for (int e = 0; e < 64; e++) acc[i][e] = 0.0f;

    // SPLIT_IN_CTA: the current split, where it ends, and the total of the splits before it.
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
        // LOAD_GATHER_TMA_W: thread 0 asks the copy engine for the group's weight tile (slot
        // full[] counts its bytes) while every thread gathers x's rows by cp.async: one thread's
        // TMA request keeps a tile's weights in flight where cp.async's 16-byte requests left a
        // decode step's expert streams far below copy speed (kernels/cuda/NOTES.md).
        constexpr bool TMA_W = LOAD == LOAD_GATHER_TMA_W;
        if constexpr (TMA_W) {
            if (threadIdx.x == 0) {
                for (int s = 0; s < STAGES; s++) mbar_init(&full[s], 1);
                mbar_init_fence();
            }
            __syncthreads();
        }
        auto load_stage = [&](int j) {
            if (j < n_kt) {
                uint8_t *const s = smem + (j % STAGES) * STAGE_BYTES;
                const int k0 = (kt_begin + j) * GEMM_BK;
                if constexpr (TMA_W) {
                    if (threadIdx.x == 0) {
                        mbar_expect_tx(&full[j % STAGES], (uint32_t)BN * GEMM_BK * 2);  // zeros past N, K count
                        tma_load_3d(s + A_BYTES, &tmap_w, &full[j % STAGES], k0, n0, v.group);
                    }
                    gemm_load_slot_x<BM, THREADS, true>(s, p, v, m0, k0);
                } else {
                    gemm_load_slot<BM, BN, THREADS, LOAD == LOAD_CP_ASYNC>(s, p, v, m0, n0, k0);
                }
            }
            cp_async_commit();  // empty groups keep the wait count uniform
        };
#pragma unroll
        for (int s = 0; s < STAGES - 2; s++) load_stage(s);
        for (int j = 0; j < n_kt; j++) {
            // Stage j has landed; k-tile j-2 is retired, so its slot may be refilled.
            cp_async_wait<STAGES - 3>();
            if constexpr (TMA_W) mbar_wait(&full[j % STAGES], (uint32_t)(j / STAGES) & 1u);
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

// SPLIT_GRID's second pass: y = ((p_0 + p_1) + p_2) + ... over the partials, split order, one
// rounding. VEC4 needs N % 4 == 0.
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

#endif
