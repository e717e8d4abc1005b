// kernels/cuda/gemm_plan.cuh — the sm_90a GEMM's split-K rule and tile shapes, in one place.
//
// The contract (every M gives a row the same bits) fixes each output element's reduction:
//     KT = ceil(K / 64) k-tiles, cut into S = gemm_split_count(N, K) splits at k-tile
//     boundaries gemm_split_begin(s, S, KT); split s is the chain
//         p_s = 0;  for k0 ascending in its k-tiles:  p_s = wgmma_m64n128k16(p_s, x[m][k0:+16], w[n][k0:+16])
//     and the result is ((p_0 + p_1) + p_2) + ... in split order, fp32, starting from p_0
//     itself (never +0 + p_0: that would turn an exact -0 into +0 on one path and not another;
//     a running total that starts at -0 is exact, -0 + x = x for every x).
//     The other widths' instructions (wgmma_m64n192k16, m64n144k16, m64n96k16, m64n72k16)
//     compute each element as the n = 128 instruction does (from its own row, column and
//     accumulator): test_cuda_ops compares their rows with the other tiles' bit for bit.
// S depends on (N, K) only: never on M, never on the SM count queried at run time (the target
// below is the H200's 132 written down as a constant, so the rule is the same on every card).
// Everything else here (tile shape, whether the splits run on separate CTAs or one CTA walks
// them all, the load path) decides only who computes a chain and when, and may use M.
#ifndef INVAR_KERNELS_CUDA_GEMM_PLAN_CUH
#define INVAR_KERNELS_CUDA_GEMM_PLAN_CUH

#include <stdbool.h>  // bool

#define GEMM_BK 64                  // k per k-tile: one 128-byte swizzle row of bf16
#define GEMM_SPLIT_TARGET_CTAS 132  // CTAs the splits aim to fill: the H200's SMs, a constant
#define GEMM_SPLIT_TILE_N 128       // columns per CTA the rule counts (the 64 x 128 tile's)
#define GEMM_SPLIT_MIN_KTILES 6     // a split at least as long as the small tile's 6-stage
                                    // pipeline, so its loads are all in flight at once
#define GEMM_SPLIT_MAX 32           // bounds the partials' scratch and the reduce's loop

// The split count: the most splits whose ceil(N / 128) column tiles times S stay within one
// wave of the target (the 64 x 128 tile holds one CTA per SM: 168 CTAs on 132 SMs would take
// two waves, the second a quarter full), as K allows with splits of at least
// GEMM_SPLIT_MIN_KTILES k-tiles. N of 67 or more column tiles (8576 columns) is never split.
static inline int gemm_split_count(int N, int K) {
    const int col_tiles = (N + GEMM_SPLIT_TILE_N - 1) / GEMM_SPLIT_TILE_N;
    const int k_tiles = (K + GEMM_BK - 1) / GEMM_BK;
    int splits = GEMM_SPLIT_TARGET_CTAS / col_tiles;
    int most = k_tiles / GEMM_SPLIT_MIN_KTILES;
    if (most > GEMM_SPLIT_MAX) most = GEMM_SPLIT_MAX;
    if (splits > most) splits = most;
    return splits < 1 ? 1 : splits;
}

// First k-tile of split s (s = splits gives KT): even cuts, each split floor or ceil of
// KT / splits k-tiles, so every split has at least GEMM_SPLIT_MIN_KTILES. 32-bit arithmetic is
// exact (s <= GEMM_SPLIT_MAX + 1, as the kernels ask one past the last split; KT <= 2^25 for an
// int K: 33 * 2^25 < 2^31) and, in a kernel, a fraction of a 64-bit division's instructions.
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int gemm_split_begin(int s, int splits, int k_tiles) {
    return s * k_tiles / splits;
}

// --- who computes the chains (may depend on M: the bits do not) -----------------------------

enum gemm_load { LOAD_TMA, LOAD_CP_ASYNC, LOAD_SCALAR };

// NONE: S = 1, the accumulator is the result. IN_CTA: one CTA walks every split, each into a
// fresh accumulator added to a running total in registers (128 x 256 tiles: in L2 scratch). GRID: split s on CTAs of
// blockIdx.z = s (or as units of the persistent kernel: gemm_plan.grid_persistent), fp32
// partials to scratch, then each tile's last CTA (small M: no second launch) or
// gemm_split_reduce_kernel adds them in split order.
enum gemm_split_mode { SPLIT_NONE, SPLIT_IN_CTA, SPLIT_GRID };

// Tiles (rows x columns per CTA; a warpgroup owns 64 rows, 72, 96, 128, 144 or 192 columns per
// wgmma):
//   64 x 128   one warpgroup: small M, and GRID splits up to M = 64 (past it where the wide
//              tiles would leave half the SMs idle); from M = 48 on the persistent kernel
//   128 x 128  two warpgroups, one wgmma each: large M when S > 1 in one CTA (two chains of 64
//              accumulators + 64 of running total per thread; 128 x 256 would need 128 + 128
//              for one chain and spill, so it keeps its total in L2, for long splits only)
//   128 x 256  two warpgroups, two wgmma per k16 step: large M when S = 1, GRID splits past
//              M = 64 that still fill half the SMs, and IN_CTA at large M when the splits are
//              long (GEMM_SPLIT_L2_TOTAL_MIN_KTILES; the running total in L2, not registers)
//   128 x 192  two warpgroups, one wgmma of 192 columns: in place of 128 x 128 where it needs
//              enough fewer waves (gemm_cta_wide_tile; 96 + 96 registers a thread, which the
//              persistent kernel's consumers hold at 240), of 128 x 256 for GRID splits
//              where it leaves fewer columns empty, and of 128 x 256 at S = 1 past M = 128
//              where its waves cost less (gemm_dense_192_cheaper)
//   64 x 96    one warpgroup, one wgmma of 96 columns: in place of 64 x 128 on the cta path's
//              long walks where its tiles still fit one wave and leave no more columns empty
//              (gemm_cta_narrow_wins)
//   128 x 96   two warpgroups, one wgmma of 96 columns each: in place of 128 x 128 where its
//              waves take less time (gemm_cta_wide_tile)
//   128 x 144  two warpgroups, one wgmma of 144 columns each: the same, on long walks where N is
//              a multiple of 144 (576 columns: four whole tiles, against three of 192 or six of 96)
//   64 x 72    one warpgroup, one wgmma of 72 columns: in place of 64 x 96 where N is a multiple
//              of 72 and its tiles still fit one wave (576 columns: eight tiles, 128 units at
//              M = 1024 against 96; gemm_plan_tiles, after gemm_cta_narrow_wins)
//   64 x 192   one warpgroup, one wgmma of 192 columns: in place of 64 x 128 at S = 1 and M <= 64
//              where its tiles fit one wave and the 64 x 128 ones do not (gemm_one_wave_192)
enum gemm_tile { TILE_64x128, TILE_128x128, TILE_128x192, TILE_128x256, TILE_64x96, TILE_128x96, TILE_128x144, TILE_64x72,
                 TILE_64x192 };

typedef struct {
    int splits;
    enum gemm_tile tile;
    enum gemm_split_mode mode;
    enum gemm_load load;
    bool sum_last_cta;  // GRID: each tile's last CTA adds the partials (no second kernel)
    bool grid_persistent;  // GRID: the split CTAs are units of the persistent kernel (the
                           // 128-row tiles always; 64 x 128 from GEMM_SPLIT_GRID_PERSISTENT_MIN_M)
    bool stream_k;      // NONE, IN_CTA on the persistent kernel: the CTAs share the units'
                        // k-tiles evenly, a unit cut between two CTAs handing its chain over
    int stream_k_rounds;  // with stream_k: whole rounds of round robin first, the rest shared
} gemm_plan;

// The order CTAs take tiles in: down GEMM_TILE_GROUP_M row tiles, then across, so one wave
// (132 CTAs) covers a block of about 8 x 16 tiles and each weight tile is read from HBM once per
// 8 row tiles, not once per row tile (a 129280-column lm_head at M = 8192 otherwise streams
// 1.85 GB of weights 64 times). Only who computes a tile changes, never a tile's chain.
#define GEMM_TILE_GROUP_M 8
#ifdef __CUDACC__
__host__ __device__
#endif
static inline void gemm_tile_of(int linear, int m_tiles, int n_tiles, int *m_tile, int *n_tile) {
    if (m_tiles == 1) {  // small M: the same answer without the three divisions below, which a
        *m_tile = 0;     // persistent CTA pays before its first copy (test_gemm_plan checks it)
        *n_tile = linear;
        return;
    }
    const int per_group = GEMM_TILE_GROUP_M * n_tiles, group = linear / per_group;
    const int first_m = group * GEMM_TILE_GROUP_M;
    const int rows = m_tiles - first_m < GEMM_TILE_GROUP_M ? m_tiles - first_m : GEMM_TILE_GROUP_M;
    const int in_group = linear - group * per_group;
    *m_tile = first_m + in_group % rows;
    *n_tile = in_group / rows;
}

// Up to this M the last CTA of each tile adds a 64 x 128 tile's split partials itself: a second
// kernel costs a launch (about 4 us of host time a call on the H200 host), more than one CTA's
// sum of a few rows. Its S x rows x 512 bytes go through one SM, so at more rows the reduce
// kernel's whole-GPU sum wins (H200: M = 1 last CTA 0-2.6 us faster, M = 16 1-3 us and M = 64
// 10-35 us slower than the reduce kernel; again with the sum's loads in flight, 2026-12-02: M = 8
// 0.1-1.2 us, M = 16 1.7-3.3 us slower; kernels/cuda/NOTES.md).
#define GEMM_SPLIT_LAST_CTA_MAX_M 4

// From this M the 64 x 128 split CTAs run as units of the persistent kernel (8 slots, the
// producer a warp of its own) rather than as one CTA each of gemm_sm90_kernel (6 slots, every
// warp both loading and computing): the same splits, the same partials and the same reduce
// kernel, so the same bits. At small M the plain CTAs win (1.2-2.3 us at M = 5: the persistent
// CTA's unit set-up, divisions paid before its first copy; NOTES.md); the plain kernel's time
// grows with M, the persistent one's hardly, and from M = 48 the persistent kernel wins on most
// shapes. H200, dev builds, medians of three, 2026-12-02, us (plain -> persistent; NOTES.md,
// "Split CTAs on the persistent kernel"): M = 40 1536 x 7168 11.3 -> 12.1, 2048 x 2048 8.6 ->
// 9.6; M = 48 1536 x 7168 12.4 -> 12.3, 576 x 7168 10.3 -> 10.3, 3072 x 2048 10.8 -> 10.4, 2048 x
// 2048 8.9 -> 9.7 (that shape crosses past M = 56); M = 64 1536 x 7168 14.2 -> 12.7, 576 x 7168
// 11.7 -> 10.7, 3072 x 2048 12.4 -> 10.6, 2048 x 2048 10.6 -> 9.8, 7168 x 16384 67.9 -> 65.7; past
// M = 64 (576 columns) 576 x 7168 M = 128 16.6 -> 14.5, 576 x 2048 M = 200 11.0 -> 10.1. Bits
// equal on every cell.
#define GEMM_SPLIT_GRID_PERSISTENT_MIN_M 48

// 128 x 256 tiles walking every split at large M once each split is at least this many k-tiles,
// the running total kept in L2 scratch (128 accumulators a thread leave no registers for it):
// a fold moves the tile's 128 KB of fp32 out and back in, against a split's 64 or more k-tiles
// of 48 KB. The split CTAs this replaced (SPLIT_GRID, the same tiles) wrote twice those bytes
// and summed them in a second kernel; one CTA walking the splits on 128 x 128 tiles, with the
// total in registers, ran about a quarter slower.
#define GEMM_SPLIT_L2_TOTAL_MIN_KTILES 64

// Past M = 64, split CTAs that would need more than one wave lose to one CTA walking every split
// of its 64 x 128 tile when the walk is short (K of at most this many k-tiles): the grid's second
// wave and its partials (M x N x S fp32 each way) cost more than the shorter parallel walk saves
// (H200, M = 128, K = 2048: 5632 columns 25.0 -> 16.9 us, 3072: 20.3 -> 16.5, 2048: 17.3 -> 15.9;
// at K = 10944 the grid stays: 31.7 against 46.5).
#define GEMM_SPLIT_CTA_MAX_KTILES 64

// Stream-K order on the persistent kernel (SPLIT_NONE, SPLIT_IN_CTA). With U units of KT
// k-tiles on G CTAs and U % G != 0, the round-robin walk ends in a round where only U % G CTAs
// work (36864 columns at M <= 64: 288 tiles of 64 x 128 on 132 SMs, the third round 24 CTAs).
// Instead CTA c computes k-tiles [c U KT / G, (c + 1) U KT / G) of the units laid end to end,
// U > G so each range spans at least one unit and cuts at most two: the unit it starts inside
// (its later k-tiles, the tail) and the unit it ends inside (its earlier ones, the head). A
// chain cannot be cut into pieces that run at once without changing its bits, but it can be
// handed over: a CTA computes its head first and stores the accumulators (and IN_CTA's running
// total) to scratch, fp32, exact; then its whole units; then its tail, continuing from the
// state CTA c - 1 stored first thing (with the 128 x 256 tail below, first after whole rounds of
// round robin, which wait on no one). The reloaded registers continue the same chain, so the
// bits are the round-robin walk's. A CTA waits only on a lower one, and only for what that one
// does first: with one CTA per SM and G <= the SMs all run at once, and were fewer resident, the
// lowest unfinished CTA never waits (the GPU starts CTAs in index order).
// Taken where round robin's last round is thin (at most a third of the CTAs: fewer cannot
// draw the bandwidth or the tensor cores of the rest) and the weights are read from HBM once
// either way: one row tile (M <= 64), or weights that stay in L2 (GEMM_STREAM_K_MAX_W_BYTES).
// Elsewhere the round-robin waves share each weight tile between the row tiles a wave computes
// at the same k, and CTAs working at different k offsets read it again (H200: 36864 x 7168 at
// M = 256, 288 units of 128 x 256, 241 -> 279 us in stream-K order; at M <= 64 153 -> 139 us;
// 576 x 7168 at M = 4096, 160 units of 128 x 128, 119 -> 89 us).
#define GEMM_STREAM_K_MAX_W_BYTES (16L << 20)
// The 128 x 256 S = 1 tiles' thin last round (gemm_plan_choose, below): round robin, then the last
// 1-1.33 rounds in stream-K order, where the tail's weights stay in L2, each unit has enough
// k-tiles to pay for its hand-overs, and the idle share of the last round is at least a tenth of
// the whole. H200, 2026-12-02, against round robin throughout (us): 21888 x 2048 M = 1024 134.3
// -> 128.4, 8576 x 2048 M = 1024 / 2048 69.6 / 113.3 -> 58.5 / 103.5 (the kept kernel, ce204ea);
// a first version without the last two conditions (against 435ac31: 137.2 -> 129.9 on 21888 x
// 2048) lost: 18048 x 512 M = 1024 / 4096 (8 k-tiles a unit) 41.2 / 128.8 -> 47.2 / 143.2, 24576 x
// 1536 M = 4096 (a 3% tail) 413.9 -> 423.2, 102400 x 2048 M = 1024 559.0 -> 565.3.
#define GEMM_STREAM_K_TAIL_MAX_W_BYTES (32L << 20)
#define GEMM_STREAM_K_TAIL_MIN_KTILES 32
// The weight tiles units [first, units) walk through in gemm_tile_of's order, a new one at every
// change of column tile (one met again in the next row group counts again: L2 may have dropped it
// by then): the tail's weights, however many row tiles M leaves in the last group.
static inline long gemm_tail_weight_tiles(long first, long units, int m_tiles, int n_tiles) {
    long tiles = 0;
    int prev = -1;
    for (long u = first; u < units; u++) {
        int m_tile, n_tile;
        gemm_tile_of((int)u, m_tiles, n_tiles, &m_tile, &n_tile);
        if (u == first || n_tile != prev) tiles++;
        prev = n_tile;
    }
    return tiles;
}
// Round robin's last round thin: some CTAs but at most a third of them work in it (both the
// stream-K order throughout and the 128 x 256 tail take it only there).
static inline bool gemm_last_round_thin(long units, int num_sms) {
    const long last_round = units % num_sms;
    return last_round != 0 && 3 * last_round <= num_sms;
}
static inline bool gemm_stream_k(long units, int num_sms, int M, int N, int K) {
    const bool weights_once = M <= 64 || 2L * N * K <= GEMM_STREAM_K_MAX_W_BYTES;
    return units > num_sms && gemm_last_round_thin(units, num_sms) && weights_once;
}

// Tiles of bm x bn over a batch of M x N products: the work units of a plan, whose waves decide.
static inline long gemm_tile_count(int M, int N, int batch, int bm, int bn) {
    return (long)((M + bm - 1) / bm) * ((N + bn - 1) / bn) * batch;
}

// Waves of `units` one-CTA work units over num_sms SMs, the last one counted whole.
static inline long gemm_waves(long units, int num_sms) { return (units + num_sms - 1) / num_sms; }

// The persistent kernel's cta path stages its bf16 epilogue through shared memory where a tile
// walks at most this many k-tiles (kernels/cuda/gemm_sm90.cu, ws_stages_epilogue; 128 x 128 and
// 64 x 128 tiles; the 128 x 192 tile in its TMA-store kernel at every K since 2026-12-02).
#define GEMM_CTA_STAGED_MAX_KTILES 64
// A cta walk past the staged epilogue's reach: only there do the 96-, 72- and 144-column tiles,
// which never stage theirs, replace the 128-column ones (gemm_cta_wide_tile, gemm_cta_narrow_wins).
static inline bool gemm_cta_long_walk(int K) { return (K + GEMM_BK - 1) / GEMM_BK > GEMM_CTA_STAGED_MAX_KTILES; }

// The two-warpgroup tile of the cta path (the persistent kernel, TMA): 128 x 96, 128 x 128,
// 128 x 144 or 128 x 192, whichever its waves times the time one of its k-tiles takes says is fastest. Those
// times, with the CTAs of a wave all busy (H200, 2026-12-01, a wave walking 112 k-tiles, medians
// of three runs): 128 x 96 37.2 us (1536 x 7168 at M = 1024, 128 units), 128 x 128 45.5 (96
// units), 128 x 192 66.9 (576 x 7168 at M = 4096, 96 units); the 128 x 128 tile about 0.9x
// where it stages its epilogue (at most GEMM_CTA_STAGED_MAX_KTILES; the 96- and 144-column tiles
// cannot: layout; 128 x 192 does since e7a1290 on short walks and since 2026-12-02 on every walk,
// through its TMA stores, its cost here still the unstaged one measured before, so the rule leans
// against it: 3072 x 2048 at M = 1024 took it anyway, 27.7 -> 24.1 us with the stores staged, and
// 1536 x 7168 at M = 4096 128.6 -> 122.7; the 128 x 128 tile's staged cost is from before its
// stores were deferred, 4-5% less since, kernels/cuda/NOTES.md). A wider tile reads fewer bytes a FLOP and gives each consumer warp more
// tensor work for the same loop, fold and barrier instructions; a narrower one fills more SMs
// and splits into finer waves. Waves count as a fraction where the stream-K order would share
// them evenly (128-column tiles, activations in L2: 576 x 7168 at M = 4096 with 58.7 MB of them
// ran 1.4x slower than its 1.21 waves predict). 128 x 96 for one dense product only, never in
// stream-K order, and only on walks longer than GEMM_CTA_STAGED_MAX_KTILES k-tiles, where its
// time was measured (it cannot stage its epilogue, which weighs more on short walks; where it
// takes as many waves as the others it always wins). Measured choices
// (us, before -> after): 1536 x 7168 M = 1024 45.5 -> 37.2 (128 x 96), 576 x 7168 M = 2048 47.5 ->
// 36.9 (128 x 96), 1536 x 7168 M = 4096 139.5 -> 130.8 (128 x 192), 3072 x 2048 M = 1024 32.8 ->
// 28.0 (128 x 192); kept 128 x 128 where the others need more waves (2048 x 2048, 7168 x 16384
// at M = 256: 95.5 us against 123.3 on 128 x 192). 128 x 144 (2026-12-01, medians of three runs):
// 52.2 us a wave (576 x 7168 at M = 4096, 128 units), taken where N is a multiple of 144 and
// on long walks, as 128 x 96: 576 x 7168 M = 4096 67.6 -> 52.2 (96 units of 128 x 192, a
// quarter of the SMs idle), M = 8192 107.7 -> 97.4 (384 units of 128 x 96 in 3 waves, 256 in 2),
// 1152 x 7168 M = 2048 65.5 -> 52.1, 2304 x 7168 M = 1024 62.9 -> 51.4.
#define GEMM_CTA_KTILE_COST_96 33
#define GEMM_CTA_KTILE_COST_128 41
#define GEMM_CTA_KTILE_COST_128_STAGED 37
#define GEMM_CTA_KTILE_COST_144 47
#define GEMM_CTA_KTILE_COST_192 60
// Whole waves of 128-row tiles of `cols` columns, in tenths, times the time a k-tile of one takes.
static inline long gemm_cta_wave_cost(int M, int N, int batch, int cols, int num_sms, int ktile_cost) {
    return gemm_waves(gemm_tile_count(M, N, batch, 128, cols), num_sms) * 10 * ktile_cost;
}
static inline enum gemm_tile gemm_cta_wide_tile(int M, int N, int K, int batch, int num_sms) {
    const long units = gemm_tile_count(M, N, batch, 128, 128);
    const bool even_share = gemm_stream_k(units, num_sms, M, N, K) && 2L * M * K * batch <= GEMM_STREAM_K_MAX_W_BYTES;
    const long tenths = even_share ? units * 10 / num_sms : gemm_waves(units, num_sms) * 10;
    enum gemm_tile best = TILE_128x128;
    long best_cost = tenths * (gemm_cta_long_walk(K) ? GEMM_CTA_KTILE_COST_128 : GEMM_CTA_KTILE_COST_128_STAGED);
    // 96 and 144 columns on one dense product's long walks only (where their cost was measured),
    // 144 where N is a multiple of it; each taken where it costs less than the best before it.
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

// One CTA walking every split of a 64 x 96 tile instead of a 64 x 128 one, where the 64 x 128
// tiles leave SMs idle: more CTAs, each reading 11% more bytes a FLOP, which pays while they all
// still run at once and the narrower tiles waste no more columns (576 columns: five tiles of 128,
// the last half empty, or six of 96). H200, medians of three bench runs: 576 x 7168 at M = 1024
// 35.7 -> 26.6 us (80 CTAs of 64 x 128 walking 112 k-tiles each, or 96 of 64 x 96). Narrower
// still, 64 x 72, where N is a multiple of 72 and those tiles fit the wave too: a k-tile takes
// about as long as 64 x 96's (0.23 against 0.24 us: the SM's intake from L2, about 80 GB/s an SM
// with every SM reading, paces both), so more CTAs finish sooner (H200, medians of three,
// 2026-12-01: 576 x 7168 M = 513 26.6 -> 25.1 us, M = 1024 27.0 -> 25.7).
// Long walks only (more than GEMM_CTA_STAGED_MAX_KTILES k-tiles): up to there the 64 x 128 tile
// stages its bf16 epilogue through shared memory and the 96- and 72-column ones cannot
// (ws_can_stage), which costs them more than their CTAs gain. H200, dev builds forcing the tile,
// medians of three, 2026-12-02, us (64 x 128 against 64 x 96 or 64 x 72): at 32 k-tiles 3072 x
// 2048 M = 96 / 128 / 192 / 256 12.0 / 11.9 / 12.1 / 12.2 against 13.0 / 12.9 / 13.2 / 13.4,
// 1536 x 2048 M = 512 12.3 against 13.4, 576 x 2048 M = 512 / 1024 11.9 / 12.3 against 12.2 /
// 12.4; at 112, 1536 x 7168 M = 384 / 512 33.4 / 33.8 against 25.5 / 25.9 and 576 x 7168 M = 512
// / 1024 34.7 / 35.0 against 24.8 / 25.4.
static inline bool gemm_cta_narrow_wins(int M, int N, int K, int batch, int num_sms) {
    const long units = gemm_tile_count(M, N, batch, 64, 128), narrow_units = gemm_tile_count(M, N, batch, 64, 96);
    return gemm_cta_long_walk(K) && units < num_sms && narrow_units > units && narrow_units <= num_sms &&
           (N + 95) / 96 * 96 <= (N + 127) / 128 * 128;
}

// At M <= 64 and S = 1 (one row tile, N of more than 132 column tiles of 128) the product reads
// its weights once and is bound by that: 64 x 192 tiles where they fit one wave and the 64 x 128
// ones do not, so every CTA reads one tile's weights and none waits on a second round or a
// handed-over chain. H200, 2026-12-02, dev builds, medians of three, us (64 x 128 -> 64 x 192):
// 24576 x 1536 (192 units in two rounds -> 128 in one) M = 1 / 16 / 64 25.3 / 24.7 / 25.7 -> 23.8 /
// 24.4 / 25.5; 21888 x 2048 (171 in stream-K order -> 114) 29.4 / 29.6 / 30.3 -> 27.1 / 27.7 /
// 28.7; 18048 x 512 (141 -> 94) M = 1 / 64 11.1 / 11.6 -> 8.2 / 8.7; 17280 x 4096 (135 -> 90) M = 1
// 42.9 -> 39.2; bits equal on every cell. Where the 64 x 192 tiles need more than one wave too
// (36864 x 7168: 288 units in stream-K order, 192 in 1.45 rounds) not measured.
static inline bool gemm_one_wave_192(int M, int N, int batch, int splits, int num_sms) {
    return M <= 64 && batch == 1 && splits == 1 && gemm_tile_count(M, N, 1, 64, 128) > num_sms &&
           gemm_tile_count(M, N, 1, 64, 192) <= num_sms;
}

// The 128 x 256 S = 1 stream-K tail (gemm_plan_choose): the whole rounds of round robin before
// it, or -1 where round robin throughout is kept. A tail needs two rounds or more, a thin last
// round that idles at least a tenth of the whole, a full row group, units of at least
// GEMM_STREAM_K_TAIL_MIN_KTILES k-tiles, and the tail's weights in L2 (GEMM_STREAM_K_TAIL_*).
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

// 128 x 192 tiles at S = 1 past M = 128 (one dense product) where their whole waves cost less
// than the 128 x 256 plan's: a 192-column tile's columns cost 4% more a wave (more bytes read a
// FLOP), and the 256-column plan's stream-K tail 15% more than its fractional waves (the
// hand-overs, the tail's weights re-read from L2); in hundredths of a 256-column tile's wave
// time per column. With two row tiles the 128 x 256 units leave much of a second round idle
// (24576 x 1536 at M = 256: 60 of 132 CTAs busy in it) where the 192-column ones fill more of
// theirs (124). H200, 2026-12-02, dev builds against 3a7bc9b, medians of
// three, us (128 x 256 -> 128 x 192), bits equal on every cell: taken 24576 x 1536 M = 256 40.7
// -> 34.6, 21888 x 2048 M = 256 49.9 -> 41.0, 36864 x 7168 M = 256 / 512 238.5 / 378.5 -> 197.6 /
// 358.3, 4096 x 512 M = 512 11.7 -> 10.5, 18048 x 512 M = 1024 40.6 -> 38.2, 21888 x 2048 M =
// 2048 240.4 -> 235.6; over the tail 21888 x 2048 M = 1024 128.1 -> 119.6, 8576 x 2048 M = 1024
// 57.0 -> 53.6, M = 2048 103.8 -> 104.5 (even); kept 102400 x 2048 M = 256 / 1024 170.1 / 538.0
// (171.0 / 551.6 on 128 x 192: 4% and 1% fewer column-waves), 129280 x 7168 M = 1024 2592 (2600),
// and the tail at 12800 x 2048 M = 1024 78.0 (87.8: 536 units in 5 rounds, the last of 8).
#define GEMM_DENSE_192_COST 104
#define GEMM_STREAM_K_TAIL_COST 115
static inline bool gemm_dense_192_cheaper(int M, int N, bool tail, int num_sms) {
    const long units_256 = gemm_tile_count(M, N, 1, 128, 256), units_192 = gemm_tile_count(M, N, 1, 128, 192);
    const long cost_192 = gemm_waves(units_192, num_sms) * 192 * GEMM_DENSE_192_COST;
    const long cost_256 = tail ? units_256 * 256 * GEMM_STREAM_K_TAIL_COST / num_sms
                               : gemm_waves(units_256, num_sms) * 256 * 100;
    return cost_192 < cost_256;
}

// Tile, split mode and load path (gemm_plan_choose adds the stream-K order).
static inline gemm_plan gemm_plan_tiles(int M, int N, int K, int batch, bool aligned, bool tma, int num_sms) {
    gemm_plan pl;
    pl.stream_k = false;
    pl.splits = gemm_split_count(N, K);
    pl.load = tma ? LOAD_TMA : aligned ? LOAD_CP_ASYNC : LOAD_SCALAR;
    pl.mode = pl.splits > 1 ? SPLIT_IN_CTA : SPLIT_NONE;
    pl.tile = TILE_64x128;
    pl.sum_last_cta = false;
    pl.grid_persistent = false;
    pl.stream_k_rounds = 0;
    const long small_tiles = gemm_tile_count(M, N, batch, 64, 128), wide_tiles = gemm_tile_count(M, N, batch, 128, 256);
    // Separate split CTAs while the 64 x 128 tiles alone leave SMs idle and the partials
    // (M * N * S fp32, written and read once, mostly in L2) stay under the weights' bytes, or
    // under twice them where the one-CTA path would leave three quarters of the SMs idle
    // (576 x 7168 at M = 256: 20 tiles walking 112 k-tiles each, 37 us; on the grid 24 us).
    const long partial_x2 = 2L * M * pl.splits;  // 2 M S <= K: partials <= weights
    const int k_tiles = (K + GEMM_BK - 1) / GEMM_BK;
    const bool walk_short_splits =
        M > 64 && small_tiles * pl.splits > num_sms && k_tiles <= GEMM_SPLIT_CTA_MAX_KTILES;
    if (pl.load == LOAD_TMA && batch == 1 && pl.splits > 1 && small_tiles < num_sms && !walk_short_splits &&
        (partial_x2 <= K || (4 * small_tiles <= num_sms && partial_x2 <= 2L * K))) {
        pl.mode = SPLIT_GRID;
        pl.sum_last_cta = M <= GEMM_SPLIT_LAST_CTA_MAX_M;
        // Past M = 64 the 64 x 128 split CTAs read L2 at 24 KB a 1 MFLOP k-tile: 128 x 256 reads
        // half that per FLOP (1536 x 7168 at M = 256: 40 -> 29 us) where its units still fill
        // half the SMs; 128 x 192 where that leaves fewer columns empty (576 columns: three
        // tiles of 256 the last a quarter full, or three of 192; H200, 576 x 7168 at M = 256:
        // 18.5 -> 16.7 us; 1536 x 7168, no empty columns either way: 24.4 against 29.2).
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
    // Dense products (tma) also take them where they need fewer waves than the 64 x 128 tiles: a
    // tile of twice the work at about twice the rate per SM (4096 x 512 at M = 1024: 128 tiles
    // of 128 x 256 in one wave, 17 us, against 512 of 64 x 128 in four, 25 us). Not grouped
    // products: M is the most rows a group may have, most groups have far fewer, and a
    // 128-row tile computes its empty rows.
    const int big_n = pl.splits > 1 ? 128 : 256;
    const long big_tiles = gemm_tile_count(M, N, batch, 128, big_n);
    const long small_waves = gemm_waves(small_tiles, num_sms), big_waves = gemm_waves(big_tiles, num_sms);
    // Up to M = 128 a product is bound by its weights' bytes, which both tiles read once from
    // HBM: there the tile whose last wave is fuller wins (102400 x 2048 at M = 128: 400 tiles of
    // 128 x 256 in 4 waves, 137 us; 1600 of 64 x 128 in 13, 125 us).
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

static inline int gemm_tile_cols(enum gemm_tile t) {
    return t == TILE_128x256                         ? 256
           : t == TILE_128x192 || t == TILE_64x192   ? 192
           : t == TILE_128x144                       ? 144
           : t == TILE_64x72                         ? 72
           : t == TILE_64x96 || t == TILE_128x96     ? 96
                                                     : 128;
}
static inline int gemm_tile_rows(enum gemm_tile t) {
    return t == TILE_64x128 || t == TILE_64x96 || t == TILE_64x72 || t == TILE_64x192 ? 64 : 128;
}

// tma: dense products whose rows TMA can read (one, or a batch at strides TMA can step; no
// gathered rows, aligned, a driver entry point). num_sms: the device's, for the tile choice and
// the stream-K order only. Splits on separate CTAs (GRID) for one product only: the partials'
// scratch holds one.
static inline gemm_plan gemm_plan_choose(int M, int N, int K, int batch, bool aligned, bool tma, int num_sms) {
    gemm_plan pl = gemm_plan_tiles(M, N, K, batch, aligned, tma, num_sms);
    if (pl.load == LOAD_TMA && pl.mode != SPLIT_GRID) {  // the persistent kernel
        const long units = gemm_tile_count(M, N, batch, gemm_tile_rows(pl.tile), gemm_tile_cols(pl.tile));
        // 128-column instructions only. Not the 128 x 192 tiles: gemm_cta_wide_tile takes them
        // where they need fewer waves, never measured in stream-K order (which at 576 x 7168 and
        // M = 7000 would read 100 MB of activations at staggered k, the case that ran 1.4x slow
        // for 128 x 128). Nor the 72-, 96- and 144-column ones (never measured in that order),
        // nor 64 x 192 (taken where its units fit one wave: no last round to share).
        // Nor the 128 x 256 cta path: its running total is not a register chain to hand over.
        pl.stream_k = gemm_tile_cols(pl.tile) % 128 == 0 && !(pl.tile == TILE_128x256 && pl.mode == SPLIT_IN_CTA) &&
                      gemm_stream_k(units, num_sms, M, N, K);
        // The 128 x 256 tiles' thin last round where the weights are too many for stream-K
        // throughout: all rounds but the last two round robin (the waves share each weight
        // tile), the last 1-1.33 rounds' units in stream-K order (their weights, at most a third
        // more than one round's, re-read from L2 at staggered k). GEMM_STREAM_K_TAIL_* above.
        const int tail_rounds = !pl.stream_k && pl.tile == TILE_128x256 && pl.mode == SPLIT_NONE && batch == 1
                                    ? gemm_stream_k_tail_rounds(M, N, K, num_sms)
                                    : -1;
        if (tail_rounds >= 0) {
            pl.stream_k = true;
            pl.stream_k_rounds = tail_rounds;
        }
        // 128 x 192 in place of the 128 x 256 tiles at S = 1 (round robin or the tail, never
        // stream-K throughout: not measured), gemm_dense_192_cheaper above.
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

static inline const char *gemm_plan_name(const gemm_plan *pl) {
    static const char *const names[2][9][3] = {
        {
            {"64x128", "64x128/cta", "64x128/grid"},
            {"128x128", "128x128/cta", "128x128/grid"},
            {"128x192", "128x192/cta", "128x192/grid"},
            {"128x256", "128x256/cta", "128x256/grid"},
            {"64x96", "64x96/cta", "64x96/grid"},
            {"128x96", "128x96/cta", "128x96/grid"},
            {"128x144", "128x144/cta", "128x144/grid"},
            {"64x72", "64x72/cta", "64x72/grid"},
            {"64x192", "64x192/cta", "64x192/grid"},
        },
        {  // stream-K order (never GRID)
            {"64x128/sk", "64x128/cta+sk", "-"},
            {"128x128/sk", "128x128/cta+sk", "-"},
            {"128x192/sk", "128x192/cta+sk", "-"},
            {"128x256/sk", "128x256/cta+sk", "-"},
            {"64x96/sk", "64x96/cta+sk", "-"},
            {"128x96/sk", "128x96/cta+sk", "-"},
            {"128x144/sk", "128x144/cta+sk", "-"},
            {"64x72/sk", "64x72/cta+sk", "-"},
            {"64x192/sk", "64x192/cta+sk", "-"},
        },
    };
    if (pl->sum_last_cta) return "64x128/grid+last";
    if (pl->mode == SPLIT_GRID && pl->tile == TILE_64x128 && pl->grid_persistent) return "64x128/grid+persistent";
    if (pl->stream_k && pl->stream_k_rounds > 0) return "128x256/sk-tail";  // the only tile that takes it
    return names[pl->stream_k][pl->tile][pl->mode];
}

#endif
