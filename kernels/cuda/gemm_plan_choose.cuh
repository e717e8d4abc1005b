// kernels/cuda/gemm_plan_choose.cuh — which plan a product runs: tile, split mode, load path and
// stream-K order, from its shape and the SM count. Each choice decides only who computes a chain
// and when; the chains and the order of their sums are gemm_plan.cuh's, so none changes a bit.
// Costs and thresholds tuned by measurement (kernels/cuda/GEMM.md).
#ifndef INVAR_KERNELS_CUDA_GEMM_PLAN_CHOOSE_CUH
#define INVAR_KERNELS_CUDA_GEMM_PLAN_CHOOSE_CUH

#include "gemm_plan.cuh"  // gemm_plan, gemm_split_count, gemm_tile_count, gemm_waves, GEMM_*

// The cta path's two-warpgroup tile (128 x 96, 128, 144 or 192): the least waves times a
// k-tile's time. Wider reads fewer bytes a FLOP; narrower fills more SMs in finer waves. Waves
// count as a fraction where the stream-K order would share them evenly.
#define GEMM_CTA_KTILE_COST_96 33
#define GEMM_CTA_KTILE_COST_128 41
#define GEMM_CTA_KTILE_COST_128_STAGED 37
#define GEMM_CTA_KTILE_COST_144 47
#define GEMM_CTA_KTILE_COST_192 60
// Whole waves of 128-row tiles of `cols` columns, in tenths, times a k-tile's time.
static inline long gemm_cta_wave_cost(int M, int N, int batch, int cols, int num_sms, int ktile_cost) {
    return gemm_waves(gemm_tile_count(M, N, batch, 128, cols), num_sms) * 10 * ktile_cost;
}
static inline enum gemm_tile gemm_cta_wide_tile(int M, int N, int K, int batch, int num_sms) {
    const long units = gemm_tile_count(M, N, batch, 128, 128);
    const bool even_share = gemm_stream_k(units, num_sms, M, N, K) && 2L * M * K * batch <= GEMM_STREAM_K_MAX_W_BYTES;
    const long tenths = even_share ? units * 10 / num_sms : gemm_waves(units, num_sms) * 10;
    enum gemm_tile best = TILE_128x128;
    long best_cost = tenths * (gemm_cta_long_walk(K) ? GEMM_CTA_KTILE_COST_128 : GEMM_CTA_KTILE_COST_128_STAGED);
    // 96 and 144 columns on one product's long walks only (where measured), 144 where N allows.
    const bool long_walk = batch == 1 && gemm_cta_long_walk(K);
    const struct { enum gemm_tile tile; int cols, ktile_cost; bool allowed; } others[] = {
        {TILE_128x192, 192, GEMM_CTA_KTILE_COST_192, true},
        {TILE_128x96, 96, GEMM_CTA_KTILE_COST_96, long_walk},
        {TILE_128x144, 144, GEMM_CTA_KTILE_COST_144, long_walk && N % 144 == 0},
    };
    for (int i = 0; i < (int)(sizeof others / sizeof others[0]); i++) {
        if (!others[i].allowed) continue;
        const long cost = gemm_cta_wave_cost(M, N, batch, others[i].cols, num_sms, others[i].ktile_cost);
        if (cost < best_cost) {
            best = others[i].tile;
            best_cost = cost;
        }
    }
    return best;
}

// 64 x 96 (or 64 x 72) cta tiles where 64 x 128 leaves SMs idle: more CTAs, each reading more
// bytes a FLOP, pays while they fit one wave and waste no more columns; long walks only.
static inline bool gemm_cta_narrow_wins(int M, int N, int K, int batch, int num_sms) {
    const long units = gemm_tile_count(M, N, batch, 64, 128), narrow_units = gemm_tile_count(M, N, batch, 64, 96);
    return gemm_cta_long_walk(K) && units < num_sms && narrow_units > units && narrow_units <= num_sms &&
           (N + 95) / 96 * 96 <= (N + 127) / 128 * 128;
}

// At M <= 64 and S = 1, bound by reading the weights once: 64 x 192 tiles where they fit one wave
// and 64 x 128's do not, so no CTA waits on a second round.
static inline bool gemm_one_wave_192(int M, int N, int batch, int splits, int num_sms) {
    return M <= 64 && batch == 1 && splits == 1 && gemm_tile_count(M, N, 1, 64, 128) > num_sms &&
           gemm_tile_count(M, N, 1, 64, 192) <= num_sms;
}

// The 128 x 256 S = 1 stream-K tail: the rounds of round robin before it, or -1 for none. It
// needs two rounds, a thin last one idling a tenth of the whole, a full row group, long units
// and the tail's weights in L2.
static inline int gemm_stream_k_tail_rounds(int M, int N, int K, int num_sms) {
    const long units = gemm_tile_count(M, N, 1, 128, 256);
    const long last_round = units % num_sms, m_tiles = (M + 127) / 128, rounds = units / num_sms + 1;
    const long rr_units = (rounds - 2) * num_sms;  // the whole rounds walked round robin first
    const int k_tiles = (K + GEMM_BK - 1) / GEMM_BK;
    if (units >= 2L * num_sms && gemm_last_round_thin(units, num_sms) && m_tiles >= GEMM_TILE_GROUP_M &&
        k_tiles >= GEMM_STREAM_K_TAIL_MIN_KTILES && 10 * (num_sms - last_round) >= rounds * num_sms &&
        gemm_tail_weight_tiles(rr_units, units, (int)m_tiles, (N + 255) / 256) * 256 * K * 2L <=
            GEMM_STREAM_K_TAIL_MAX_W_BYTES)
        return (int)(rr_units / num_sms);
    return -1;
}

// 128 x 192 at S = 1 past M = 128 where its whole waves cost less than the 128 x 256 plan's:
// costs in hundredths of a 256-column wave per column (192 columns read more bytes a FLOP; the
// stream-K tail pays its hand-overs).
#define GEMM_DENSE_192_COST 104
#define GEMM_STREAM_K_TAIL_COST 115
static inline bool gemm_dense_192_cheaper(int M, int N, bool tail, int num_sms) {
    const long units_256 = gemm_tile_count(M, N, 1, 128, 256), units_192 = gemm_tile_count(M, N, 1, 128, 192);
    const long cost_192 = gemm_waves(units_192, num_sms) * 192 * GEMM_DENSE_192_COST;
    const long cost_256 = tail ? units_256 * 256 * GEMM_STREAM_K_TAIL_COST / num_sms
                               : gemm_waves(units_256, num_sms) * 256 * 100;
    return cost_192 < cost_256;
}

// Tile, split mode and load path (gemm_plan_choose adds the stream-K order); the split count
// from (split_N, K).
static inline gemm_plan gemm_plan_tiles(int M, int N, int split_N, int K, int batch, bool aligned, bool tma,
                                        int num_sms) {
    gemm_plan pl;
    pl.stream_k = false;
    pl.splits = gemm_split_count(split_N, K);
    pl.load = tma ? LOAD_TMA : aligned ? LOAD_CP_ASYNC : LOAD_SCALAR;
    pl.mode = pl.splits > 1 ? SPLIT_IN_CTA : SPLIT_NONE;
    pl.tile = TILE_64x128;
    pl.sum_last_cta = false;
    pl.grid_persistent = false;
    pl.stream_k_rounds = 0;
    const long small_tiles = gemm_tile_count(M, N, batch, 64, 128), wide_tiles = gemm_tile_count(M, N, batch, 128, 256);
    // Split CTAs while 64 x 128 tiles leave SMs idle and the partials (M N S fp32) stay under
    // the weights' bytes (twice them where one CTA a tile would idle three quarters of the SMs).
    const long partial_x2 = 2L * M * pl.splits;  // 2 M S <= K: partials <= weights
    const int k_tiles = (K + GEMM_BK - 1) / GEMM_BK;
    const bool walk_short_splits =
        M > 64 && small_tiles * pl.splits > num_sms && k_tiles <= GEMM_SPLIT_CTA_MAX_KTILES;
    if (pl.load == LOAD_TMA && batch == 1 && pl.splits > 1 && small_tiles < num_sms && !walk_short_splits &&
        (partial_x2 <= K || (4 * small_tiles <= num_sms && partial_x2 <= 2L * K))) {
        pl.mode = SPLIT_GRID;
        pl.sum_last_cta = M <= GEMM_SPLIT_LAST_CTA_MAX_M;
        // Past M = 64 wider tiles read half the L2 bytes a FLOP while they fill half the SMs.
        if (M > 64 && wide_tiles * pl.splits * 2 >= num_sms)
            pl.tile = (N + 191) / 192 * 192 < (N + 255) / 256 * 256 ? TILE_128x192 : TILE_128x256;
        pl.grid_persistent = pl.tile != TILE_64x128 || M >= GEMM_SPLIT_GRID_PERSISTENT_MIN_M;
        return pl;
    }
    if (pl.load == LOAD_TMA && gemm_one_wave_192(M, N, batch, pl.splits, num_sms)) pl.tile = TILE_64x192;
    if (pl.load == LOAD_SCALAR || M <= 64) return pl;
    // Two-warpgroup tiles once they alone fill the SMs (fewer L2 bytes per FLOP).
    if (pl.load == LOAD_TMA && batch == 1 && pl.splits > 1 && wide_tiles >= num_sms &&
        k_tiles / pl.splits >= GEMM_SPLIT_L2_TOTAL_MIN_KTILES) {
        pl.mode = SPLIT_IN_CTA;
        pl.tile = TILE_128x256;
        return pl;
    }
    // Dense products also take them where they need fewer waves (not grouped products, whose
    // groups mostly have far fewer than M rows).
    const int big_n = pl.splits > 1 ? 128 : 256;
    const long big_tiles = gemm_tile_count(M, N, batch, 128, big_n);
    const long small_waves = gemm_waves(small_tiles, num_sms), big_waves = gemm_waves(big_tiles, num_sms);
    // Up to M = 128, bound by the weights' bytes: the tile whose last wave is fuller wins.
    const bool fuller_waves = M > 128 || big_tiles * small_waves >= small_tiles * big_waves;
    if ((big_tiles >= num_sms && fuller_waves) || (tma && big_waves < small_waves))
        pl.tile = pl.splits > 1 ? TILE_128x128 : TILE_128x256;
    if (pl.tile == TILE_128x128 && pl.load == LOAD_TMA) pl.tile = gemm_cta_wide_tile(M, N, K, batch, num_sms);
    if (pl.tile == TILE_64x128 && pl.mode == SPLIT_IN_CTA && pl.load == LOAD_TMA && batch == 1 &&
        gemm_cta_narrow_wins(M, N, K, batch, num_sms)) {
        pl.tile = TILE_64x96;
        if (N % 72 == 0 && gemm_tile_count(M, N, batch, 64, 72) <= num_sms) pl.tile = TILE_64x72;
    }
    return pl;
}

// tma: dense products whose rows TMA can read. num_sms: the device's (tiles and order only).
// GRID splits for one product only: the partials' scratch holds one. split_N: the N whose rule
// fixes the split count (a tensor-parallel rank's columns of a wider GEMM: the whole GEMM's N,
// so that its columns reduce as at T = 1); the tiles follow the product's own N.
static inline gemm_plan gemm_plan_choose_split(int M, int N, int split_N, int K, int batch, bool aligned, bool tma,
                                               int num_sms) {
    gemm_plan pl = gemm_plan_tiles(M, N, split_N, K, batch, aligned, tma, num_sms);
    if (pl.load == LOAD_TMA && pl.mode != SPLIT_GRID) {  // the persistent kernel
        const long units = gemm_tile_count(M, N, batch, gemm_tile_rows(pl.tile), gemm_tile_cols(pl.tile));
        // 128-column instructions only (the others were not measured in that order), and not
        // the 128 x 256 cta path: its running total in L2 is not a register chain to hand over.
        pl.stream_k = gemm_tile_cols(pl.tile) % 128 == 0 && !(pl.tile == TILE_128x256 && pl.mode == SPLIT_IN_CTA) &&
                      gemm_stream_k(units, num_sms, M, N, K);
        // 128 x 256: too many weights for stream-K throughout, so only the tail shares k-tiles.
        const int tail_rounds = !pl.stream_k && pl.tile == TILE_128x256 && pl.mode == SPLIT_NONE && batch == 1
                                    ? gemm_stream_k_tail_rounds(M, N, K, num_sms)
                                    : -1;
        if (tail_rounds >= 0) {
            pl.stream_k = true;
            pl.stream_k_rounds = tail_rounds;
        }
        // 128 x 192 for 128 x 256 at S = 1 (not after stream-K throughout: not measured).
        if (pl.tile == TILE_128x256 && pl.mode == SPLIT_NONE && batch == 1 && M > 128 &&
            !(pl.stream_k && pl.stream_k_rounds == 0) &&
            gemm_dense_192_cheaper(M, N, pl.stream_k, num_sms)) {
            pl.tile = TILE_128x192;
            pl.stream_k = false;
            pl.stream_k_rounds = 0;
        }
    }
    return pl;
}

// The rows a product's tiles are sized for: M, or for a grouped product (rows_listed > 0, the
// rows its groups list in all) the mean rows of a group. A decode step's experts hold a few rows
// each while M is the batch's tokens: 128-row tiles there idled most of their MMA and halved the
// CTAs an SM holds. Rows past the mean still run (the grid is sized by M); only speed changes.
static inline int gemm_plan_rows(int M, int batch, long rows_listed) {
    if (rows_listed <= 0 || batch <= 1) return M;
    const long mean = (rows_listed + batch - 1) / batch;  // at least 1
    return mean > M ? M : (int)mean;
}

// The 64 x 128 cp.async kernel's deep pipeline (GEMM_CP_ASYNC_DEEP_STAGES): where the CTAs with
// rows fit one wave (at most min(groups, rows) groups hold rows), each streams its weights alone
// and latency, not occupancy, bounds it; past one wave the shallow one's two CTAs an SM win.
static inline bool gemm_cp_async_deep(int N, int batch, long rows_listed, int num_sms) {
    if (rows_listed <= 0) return false;
    const int groups_with_rows = rows_listed < batch ? (int)rows_listed : batch;
    return gemm_tile_count(1, N, groups_with_rows, 64, 128) <= num_sms;  // one row tile a group
}

static inline gemm_plan gemm_plan_choose(int M, int N, int K, int batch, bool aligned, bool tma, int num_sms) {
    return gemm_plan_choose_split(M, N, N, K, batch, aligned, tma, num_sms);
}

#endif
