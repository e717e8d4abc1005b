// kernels/cuda/gemm_plan.cuh — the sm_90a GEMM's reduction order, split-K rule and plan words;
// gemm_plan_choose.cuh picks a product's plan.
// The reduction of y[m][n]: KT = ceil(K / 64) k-tiles cut into S = gemm_split_count(N, K) splits
// (N the product's, or gemm_args.split_N where given: a tensor-parallel rank's columns of a wider GEMM)
// at gemm_split_begin(s, S, KT); split s is the chain
//     p_s = 0;  for k0 ascending in its k-tiles:  p_s = wgmma_m64nNk16(p_s, x[m][k0:+16], w[n][k0:+16])
// and y = ((p_0 + p_1) + p_2) + ... in split order, fp32 (a total from -0 keeps p_0's bits).
// Every width N gives an element the same bits (it reads only its row, column and accumulator).
// S depends on (that N, K) only, never on M (a row's chains must not change with the batch) nor on
// the device. The rest of a plan decides only who computes a chain and when.
#ifndef INVAR_KERNELS_CUDA_GEMM_PLAN_CUH
#define INVAR_KERNELS_CUDA_GEMM_PLAN_CUH

#include <stdbool.h>  // bool
#include <stdio.h>    // snprintf

#define GEMM_BK 64                  // k per k-tile: one 128-byte swizzle row of bf16
#define GEMM_SPLIT_TARGET_CTAS 132  // CTAs the splits fill: a constant, not the device's
#define GEMM_SPLIT_TILE_N 128       // columns a CTA, for the rule
#define GEMM_SPLIT_MIN_KTILES 6     // a split at least as long as the 6-stage pipeline
#define GEMM_SPLIT_MAX 32           // bounds the partials' scratch and the reduce's loop

// The most splits whose column tiles times S fill at most one wave of the target (a second wave,
// mostly empty, costs more than shorter chains save), each at least GEMM_SPLIT_MIN_KTILES long.
static inline int gemm_split_count(int N, int K) {
    const int col_tiles = (N + GEMM_SPLIT_TILE_N - 1) / GEMM_SPLIT_TILE_N;
    const int k_tiles = (K + GEMM_BK - 1) / GEMM_BK;
    int splits = GEMM_SPLIT_TARGET_CTAS / col_tiles;
    int most = k_tiles / GEMM_SPLIT_MIN_KTILES;
    if (most > GEMM_SPLIT_MAX) most = GEMM_SPLIT_MAX;
    if (splits > most) splits = most;
    return splits < 1 ? 1 : splits;
}

// First k-tile of split s (s = splits gives KT): even cuts. 32-bit arithmetic is exact here
// (s <= GEMM_SPLIT_MAX + 1, KT <= 2^25) and cheaper in a kernel.
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int gemm_split_begin(int s, int splits, int k_tiles) {
    return s * k_tiles / splits;
}


// LOAD_GATHER_TMA_W: a grouped product's x rows gathered by cp.async and its expert's weight tile
// by TMA into the same slot; gemm_sm90_launch takes it for LOAD_CP_ASYNC's grouped products where
// tensor maps can be made, unless built with GEMM_GATHER_TMA_W=0 (the plan never returns it: it
// changes no tile and no bit).
enum gemm_load { LOAD_TMA, LOAD_CP_ASYNC, LOAD_SCALAR, LOAD_GATHER_TMA_W };

// NONE: S = 1. IN_CTA: one CTA walks every split into a running total. GRID: each split on its
// own CTAs, fp32 partials added in split order by the tile's last CTA or a reduce kernel.
enum gemm_split_mode { SPLIT_NONE, SPLIT_IN_CTA, SPLIT_GRID };

// Tiles, rows x columns a CTA (a warpgroup owns 64 rows; kernels/cuda/GEMM.md says where each
// is taken).
enum gemm_tile { TILE_64x128, TILE_128x128, TILE_128x192, TILE_128x256, TILE_64x96, TILE_128x96, TILE_128x144, TILE_64x72,
                 TILE_64x192 };

typedef struct {
    int splits;
    enum gemm_tile tile;
    enum gemm_split_mode mode;
    enum gemm_load load;
    bool sum_last_cta;  // GRID: each tile's last CTA adds the partials (no second kernel)
    bool grid_persistent;  // GRID: the split CTAs are units of the persistent kernel
    bool stream_k;      // the CTAs share the units' k-tiles evenly, handing cut chains over
    int stream_k_rounds;  // with stream_k: whole rounds of round robin first
} gemm_plan;

// Tiles down GEMM_TILE_GROUP_M row tiles, then across: a weight tile read once per 8 row tiles.
#define GEMM_TILE_GROUP_M 8
#ifdef __CUDACC__
__host__ __device__
#endif
static inline void gemm_tile_of(int linear, int m_tiles, int n_tiles, int *m_tile, int *n_tile) {
    if (m_tiles == 1) {  // small M: the same answer without the divisions below, which a
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

// Up to this M a tile's last split CTA adds the partials: a second launch costs more than one SM
// summing a few rows.
#define GEMM_SPLIT_LAST_CTA_MAX_M 4

// From this M the 64 x 128 split CTAs run on the persistent kernel: below it its set-up before
// the first copy costs more than its producer warp saves.
#define GEMM_SPLIT_GRID_PERSISTENT_MIN_M 48

// 128 x 256 tiles walk every split from this split length, the total in L2 (no registers left):
// a fold's 128 KB each way is small against 64 k-tiles of 48 KB.
#define GEMM_SPLIT_L2_TOTAL_MIN_KTILES 64

// Past M = 64, split CTAs needing two waves lose to one CTA walking its splits this short.
#define GEMM_SPLIT_CTA_MAX_KTILES 64

// Stream-K order (GEMM.md) where round robin's last round is thin and the weights come from HBM
// once either way (one row tile, or weights within this many bytes).
#define GEMM_STREAM_K_MAX_W_BYTES (16L << 20)
// The 128 x 256 S = 1 tail in stream-K order: where its weights stay in L2 and each unit has
// enough k-tiles to pay for its hand-overs.
#define GEMM_STREAM_K_TAIL_MAX_W_BYTES (32L << 20)
#define GEMM_STREAM_K_TAIL_MIN_KTILES 32
// The weight tiles units [first, units) walk through (a new one at each column tile change).
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
// Round robin's last round thin: some CTAs, but at most a third of them, work in it.
static inline bool gemm_last_round_thin(long units, int num_sms) {
    const long last_round = units % num_sms;
    return last_round != 0 && 3 * last_round <= num_sms;
}
static inline bool gemm_stream_k(long units, int num_sms, int M, int N, int K) {
    const bool weights_once = M <= 64 || 2L * N * K <= GEMM_STREAM_K_MAX_W_BYTES;
    return units > num_sms && gemm_last_round_thin(units, num_sms) && weights_once;
}

// Tiles of bm x bn over a batch of M x N products: a plan's work units.
static inline long gemm_tile_count(int M, int N, int batch, int bm, int bn) {
    return (long)((M + bm - 1) / bm) * ((N + bn - 1) / bn) * batch;
}

// Waves of `units` over num_sms SMs, the last counted whole.
static inline long gemm_waves(long units, int num_sms) { return (units + num_sms - 1) / num_sms; }

// The cta path stages its epilogue up to this many k-tiles (ws_stages_epilogue); longer walks
// run faster with that shared memory left to the slots.
#define GEMM_CTA_STAGED_MAX_KTILES 64
// Past the staged epilogue's reach: only there may tiles that cannot stage replace 128 columns.
static inline bool gemm_cta_long_walk(int K) { return (K + GEMM_BK - 1) / GEMM_BK > GEMM_CTA_STAGED_MAX_KTILES; }

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

// The plan as a dispatch path (kernels/cuda/gemm_paths.h lists them): its name, then its load.
static inline void gemm_plan_path(const gemm_plan *pl, char *out, int len) {
    static const char *const loads[] = {"tma", "cp.async", "scalar", "cp.async+tma"};
    snprintf(out, (size_t)len, "%s %s", gemm_plan_name(pl), loads[pl->load]);
}

#endif
