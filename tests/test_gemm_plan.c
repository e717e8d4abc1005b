// tests/test_gemm_plan.c — the sm_90a GEMM's split rule and plan choice
// (kernels/cuda/gemm_plan.cuh, gemm_plan_choose.cuh) on the host, over a grid of shapes, batches, load paths and SM
// counts: the split count never depends on M or the SM count, the splits cut K the same way
// every time, and every plan is one gemm_sm90_launch has a kernel for. The GPU tests can only
// run the shapes they run on the GPU they have; these run on every `make check`.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdbool.h>  // bool
#include <stdio.h>    // printf
#include <string.h>   // strcmp, memset

#include "../kernels/cuda/gemm_plan_choose.cuh"  // gemm_split_count, gemm_split_begin, gemm_plan_choose
#include "../kernels/cuda/gemm_paths.h"          // GEMM_SM90_PATHS

// N and K of the benchmark grid, of V2-Lite and V3 layers, and edges (one k-tile, a K tail,
// N past the 67 column tiles no split reaches).
static const int plan_ns[] = {40, 128, 576, 1536, 2048, 2816, 3072, 4096, 7168, 8576, 8832, 21888, 24576, 129280};
static const int plan_ks[] = {40, 64, 512, 520, 1408, 1536, 2048, 7168, 8192, 16384, 18432};
static const int plan_ms[] = {1, 2, 4, 5, 16, 47, 48, 63, 64, 65, 128, 200, 256, 513, 1024, 4096, 8192};
static const int plan_sms[] = {132, 114, 78, 16};  // H200 / H100 SXM, H100 PCIe, smaller parts
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

// The split count depends on (N, K) alone, and its splits are the contract's: consecutive, the
// first at k-tile 0, the last ending at KT, each at least GEMM_SPLIT_MIN_KTILES long when K is
// split at all, and one wave of 64 x 128 split CTAs on the written-down 132 SMs.
static void split_rule_cuts_k_the_same_way(void **state) {
    (void)state;
    for (int ni = 0; ni < COUNT(plan_ns); ni++)
        for (int ki = 0; ki < COUNT(plan_ks); ki++) {
            const int N = plan_ns[ni], K = plan_ks[ki], KT = (K + GEMM_BK - 1) / GEMM_BK;
            const int S = gemm_split_count(N, K);
            assert_true(S >= 1 && S <= GEMM_SPLIT_MAX);
            if (S == 1) continue;
            assert_true((long)S * ((N + GEMM_SPLIT_TILE_N - 1) / GEMM_SPLIT_TILE_N) <= GEMM_SPLIT_TARGET_CTAS);
            assert_int_equal(gemm_split_begin(0, S, KT), 0);
            assert_int_equal(gemm_split_begin(S, S, KT), KT);
            for (int s = 0; s < S; s++) {
                const int len = gemm_split_begin(s + 1, S, KT) - gemm_split_begin(s, S, KT);
                if (len < GEMM_SPLIT_MIN_KTILES)
                    fail_msg("N=%d K=%d: split %d of %d is %d k-tiles (at least %d)", N, K, s, S, len,
                             GEMM_SPLIT_MIN_KTILES);
            }
        }
}

// The (load, tile, mode) triples gemm_sm90_launch (kernels/cuda/gemm_sm90.cu) has a kernel for,
// and its split CTAs' kernel (grid_persistent: 64 x 128 on either, the 128-row tiles on the
// persistent one only); anything else dies there at run time, on a GPU only.
static bool launchable(const gemm_plan *p) {
    if (p->grid_persistent && p->mode != SPLIT_GRID) return false;
    if (p->mode == SPLIT_GRID && p->tile != TILE_64x128 && !p->grid_persistent) return false;
    static const struct { enum gemm_load load; enum gemm_tile tile; enum gemm_split_mode mode; } kernels[] = {
        {LOAD_TMA, TILE_64x128, SPLIT_GRID},         {LOAD_TMA, TILE_128x256, SPLIT_GRID},
        {LOAD_TMA, TILE_64x128, SPLIT_NONE},         {LOAD_TMA, TILE_64x128, SPLIT_IN_CTA},
        {LOAD_TMA, TILE_128x128, SPLIT_IN_CTA},      {LOAD_TMA, TILE_128x192, SPLIT_IN_CTA},
        {LOAD_TMA, TILE_128x192, SPLIT_GRID},       {LOAD_TMA, TILE_64x96, SPLIT_IN_CTA},
        {LOAD_TMA, TILE_128x96, SPLIT_IN_CTA},      {LOAD_TMA, TILE_128x144, SPLIT_IN_CTA},
        {LOAD_TMA, TILE_64x72, SPLIT_IN_CTA},        {LOAD_TMA, TILE_64x192, SPLIT_NONE},
        {LOAD_TMA, TILE_128x192, SPLIT_NONE},
        {LOAD_TMA, TILE_128x256, SPLIT_NONE},        {LOAD_TMA, TILE_128x256, SPLIT_IN_CTA},
        {LOAD_CP_ASYNC, TILE_64x128, SPLIT_NONE},    {LOAD_CP_ASYNC, TILE_64x128, SPLIT_IN_CTA},
        {LOAD_CP_ASYNC, TILE_128x128, SPLIT_IN_CTA}, {LOAD_CP_ASYNC, TILE_128x256, SPLIT_NONE},
        {LOAD_SCALAR, TILE_64x128, SPLIT_NONE},      {LOAD_SCALAR, TILE_64x128, SPLIT_IN_CTA},
    };
    for (int i = 0; i < COUNT(kernels); i++)
        if (kernels[i].load == p->load && kernels[i].tile == p->tile && kernels[i].mode == p->mode) return true;
    return false;
}

// Every plan: the split count of (N, K) whatever M, batch and SM count; a launchable kernel; the
// load path asked for; separate split CTAs only for one dense TMA product (their scratch holds
// one product's partials; batched TMA products walk their splits in one CTA); the last-CTA sum
// only on 64 x 128 split CTAs at M <= GEMM_SPLIT_LAST_CTA_MAX_M.
static void every_plan_has_a_kernel_and_the_rules_splits(void **state) {
    (void)state;
    static const int batches[] = {1, 4, 64};
    long plans = 0;
    for (int ni = 0; ni < COUNT(plan_ns); ni++)
        for (int ki = 0; ki < COUNT(plan_ks); ki++)
            for (int mi = 0; mi < COUNT(plan_ms); mi++)
                for (int bi = 0; bi < COUNT(batches); bi++)
                    for (int si = 0; si < COUNT(plan_sms); si++)
                        for (int path = 0; path < 3; path++) {  // tma, cp.async, scalar
                            const int N = plan_ns[ni], K = plan_ks[ki], M = plan_ms[mi], batch = batches[bi];
                            const bool aligned = path < 2, tma = path == 0;
                            const gemm_plan p = gemm_plan_choose(M, N, K, batch, aligned, tma, plan_sms[si]);
                            plans++;
                            if (p.splits != gemm_split_count(N, K))
                                fail_msg("M=%d N=%d K=%d batch=%d sms=%d: %d splits, the rule says %d", M, N, K,
                                         batch, plan_sms[si], p.splits, gemm_split_count(N, K));
                            if (!launchable(&p))
                                fail_msg("M=%d N=%d K=%d batch=%d sms=%d path=%d: plan %s (load %d) has no kernel", M,
                                         N, K, batch, plan_sms[si], path, gemm_plan_name(&p), (int)p.load);
                            assert_int_equal(p.load, tma ? LOAD_TMA : aligned ? LOAD_CP_ASYNC : LOAD_SCALAR);
                            assert_true((p.mode == SPLIT_NONE) == (p.splits == 1));
                            if (p.mode == SPLIT_GRID) {
                                assert_int_equal(p.load, LOAD_TMA);
                                assert_int_equal(batch, 1);
                            }
                            if (p.sum_last_cta)
                                assert_true(p.mode == SPLIT_GRID && p.tile == TILE_64x128 &&
                                            M <= GEMM_SPLIT_LAST_CTA_MAX_M);
                            // split CTAs on the persistent kernel: the 128-row tiles always, 64 x 128
                            // from GEMM_SPLIT_GRID_PERSISTENT_MIN_M (gemm_sm90_launch has no other)
                            assert_true(p.grid_persistent ==
                                        (p.mode == SPLIT_GRID &&
                                         (p.tile != TILE_64x128 || M >= GEMM_SPLIT_GRID_PERSISTENT_MIN_M)));
                            assert_false(p.grid_persistent && p.sum_last_cta);
                            if (p.stream_k)  // the persistent kernel only, on 128-column instructions
                                assert_true(p.load == LOAD_TMA && p.mode != SPLIT_GRID && p.tile != TILE_128x192 &&
                                            p.tile != TILE_64x96 && p.tile != TILE_128x96 && p.tile != TILE_128x144 &&
                                            p.tile != TILE_64x72 && p.tile != TILE_64x192);
                            if (p.tile == TILE_128x256 && p.mode == SPLIT_IN_CTA)  // the total in L2: long splits
                                assert_true(p.load == LOAD_TMA && batch == 1 && !p.stream_k && M > 64 &&
                                            gemm_tile_count(M, N, 1, 128, 256) >= plan_sms[si] &&
                                            (K + 63) / 64 / p.splits >= GEMM_SPLIT_L2_TOTAL_MIN_KTILES);
                            if (p.tile == TILE_64x96)  // one dense product's long walks, its narrow tiles in one wave
                                assert_true(batch == 1 && M > 64 && gemm_cta_long_walk(K) &&
                                            gemm_tile_count(M, N, 1, 64, 96) <= plan_sms[si]);
                            if (p.tile == TILE_64x72)  // the same, whole tiles of 72 columns
                                assert_true(batch == 1 && M > 64 && gemm_cta_long_walk(K) &&
                                            gemm_tile_count(M, N, 1, 64, 72) <= plan_sms[si] && N % 72 == 0);
                            if (p.tile == TILE_64x192)  // S = 1, M <= 64: one wave of them, not of 64 x 128
                                assert_true(p.load == LOAD_TMA && batch == 1 && M <= 64 && p.splits == 1 &&
                                            gemm_tile_count(M, N, 1, 64, 192) <= plan_sms[si] &&
                                            gemm_tile_count(M, N, 1, 64, 128) > plan_sms[si]);
                            if (p.tile == TILE_128x192 && p.mode == SPLIT_NONE)  // S = 1 past M = 128, round robin
                                assert_true(p.load == LOAD_TMA && batch == 1 && M > 128 && !p.stream_k &&
                                            gemm_dense_192_cheaper(M, N, gemm_stream_k_tail_rounds(M, N, K, plan_sms[si]) >= 0,
                                                                   plan_sms[si]));
                            if (p.tile == TILE_128x96)  // one dense product, long walks
                                assert_true(batch == 1 && M > 64 && gemm_cta_long_walk(K));
                            if (p.tile == TILE_128x144)  // the same, whole tiles of 144 columns
                                assert_true(batch == 1 && M > 64 && gemm_cta_long_walk(K) &&
                                            N % 144 == 0);
                        }
    printf("gemm plans checked: %ld\n", plans);
}

// The invariant CUDA set declares as GEMM paths (kernels/cuda/gemm_paths.h) exactly the plans
// gemm_plan_choose returns on 132 SMs (H100 SXM, H200) over shapes, batches and loads that reach
// every rule: a path missing from the list fails a GPU's coverage as taken but undeclared, a path
// no plan returns could never be reached.
static void declared_gemm_paths_are_the_plans(void **state) {
    (void)state;
    static const char *const declared[] = {GEMM_SM90_PATHS};
    static const int ns[] = {40, 72, 128, 144, 320, 576, 1536, 2048, 3072, 4096, 7168, 8832, 9472, 18048, 34944};
    static const int ks[] = {40, 512, 1408, 2048, 7168, 16384};
    static const int batches[] = {1, 16, 64};
    bool produced[COUNT(declared)] = {false};
    for (int ni = 0; ni < COUNT(ns); ni++)
        for (int ki = 0; ki < COUNT(ks); ki++)
            for (int M = 1; M <= 8192; M += M < 300 ? 1 : M < 2100 ? 7 : 97)
                for (int bi = 0; bi < COUNT(batches); bi++)
                    for (int load = 0; load < 3; load++) {  // tma, cp.async, scalar
                        const gemm_plan p = gemm_plan_choose(M, ns[ni], ks[ki], batches[bi], load < 2, load == 0, 132);
                        char path[64] = "gemm:";
                        gemm_plan_path(&p, path + 5, (int)sizeof path - 5);
                        int i = 0;
                        while (i < COUNT(declared) && strcmp(declared[i], path) != 0) i++;
                        if (i == COUNT(declared))
                            fail_msg("M=%d N=%d K=%d batch=%d: plan %s is not in GEMM_SM90_PATHS", M, ns[ni], ks[ki],
                                     batches[bi], path);
                        produced[i] = true;
                    }
    for (int i = 0; i < COUNT(declared); i++)
        if (!produced[i]) fail_msg("GEMM_SM90_PATHS lists %s, which no plan takes", declared[i]);
}

// The plan one dense TMA product of M x N x K gets on `sms` SMs, failing unless its name is `name`.
static gemm_plan expect_plan(int M, int N, int K, int sms, const char *name) {
    const gemm_plan p = gemm_plan_choose(M, N, K, 1, true, true, sms);
    if (strcmp(gemm_plan_name(&p), name) != 0)
        fail_msg("M=%d N=%d K=%d sms=%d: plan %s, expected %s", M, N, K, sms, gemm_plan_name(&p), name);
    return p;
}

// Stream-K order where round robin's last round would be thin and the weights are read once
// either way (H200, 132 SMs; the shapes the rule was measured on), round robin elsewhere.
static void stream_k_where_the_last_round_is_thin(void **state) {
    (void)state;
    static const struct { int M, N, K; bool stream_k; const char *name; } cases[] = {
        {1, 36864, 7168, true, "64x128/sk"},          // 288 units: 24 in round 3 (192 of 64 x 192)
        {64, 34944, 512, true, "64x128/sk"},          // 273 units: 9 in round 3 (182 of 64 x 192)
        {64, 18048, 512, false, "64x192"},            // 141 units: 9 in round 2, or 94 of 64 x 192
        {1, 25600, 1536, false, "64x128"},            // 200 units: 68 in round 2 draw the bandwidth
                                                      // (134 of 64 x 192: two rounds too)
        {1, 129280, 7168, false, "64x128"},           // 1010 units: 86 in round 8
        {256, 36864, 7168, false, "128x192"},         // two row tiles share each weight tile
        {4096, 576, 2048, true, "128x128/cta+sk"},    // 160 units, weights 2.4 MB (in L2)
        {8192, 576, 2048, false, "128x128/cta"},      // 320 units: 56 in round 3
        {1, 4096, 512, false, "64x128"},              // 32 units: one round
    };
    for (int i = 0; i < COUNT(cases); i++) {
        const gemm_plan p = expect_plan(cases[i].M, cases[i].N, cases[i].K, 132, cases[i].name);
        if (p.stream_k != cases[i].stream_k)
            fail_msg("M=%d N=%d K=%d: plan %s, stream-K %d", cases[i].M, cases[i].N, cases[i].K, gemm_plan_name(&p),
                     p.stream_k);
    }
    // never for the cp.async and scalar kernels, which walk their tiles one a CTA
    assert_false(gemm_plan_choose(1, 36864, 7168, 1, true, false, 132).stream_k);
}

// The 128 x 256 S = 1 tiles: round robin, then the last 1-1.33 rounds in stream-K order, where
// the tail's weights stay in L2, a unit has >= 32 k-tiles and the last round idles >= a tenth of
// the whole (GEMM_STREAM_K_TAIL_*, tuned on the H200's 132 SMs). The plan
// takes the tail where the 128 x 192 tiles would not cost less (dense_192_where_its_waves_cost_less).
static void stream_k_tail_after_round_robin(void **state) {
    (void)state;
    static const struct { int M, N, K, rounds; const char *plan; } cases[] = {
        {1024, 21888, 2048, 4, "128x192"},  // 688 units: 28 in round 6 (912 of 128 x 192 in 7)
        {1024, 8576, 2048, 1, "128x192"},   // 272 units: 8 in round 3 (360 of 128 x 192 in 3)
        {2048, 8576, 2048, 3, "128x192"},   // 544 units: 16 in round 5
        {1024, 9472, 2048, 1, "128x256/sk-tail"},   // 296 units: 32 in round 3 (the checker's shape)
        {1024, 12800, 2048, 2, "128x256/sk-tail"},  // 400 units: 4 in round 4 (the checker's second)
        {1281, 21888, 2048, -1, "128x192"},  // 11 row tiles: the tail's 154 units walk 52 column tiles, 52 MB
        {1024, 18048, 512, -1, "128x192"},   // 8 k-tiles a unit: the hand-overs cost more than the round
        {4096, 18048, 512, -1, "128x192"},
        {4096, 24576, 1536, -1, "128x256"},  // 3072 units: a 3% tail
        {1024, 102400, 2048, -1, "128x256"}, // 3200 units: a 3% tail
        {4096, 21888, 2048, -1, "128x256"},  // 2752 units: 112 of 132 in round 21 (more than a third)
    };
    for (int i = 0; i < COUNT(cases); i++) {
        const int rounds = gemm_stream_k_tail_rounds(cases[i].M, cases[i].N, cases[i].K, 132);
        if (rounds != cases[i].rounds)
            fail_msg("M=%d N=%d K=%d: stream-K tail after %d rounds, expected %d (-1: round robin throughout)",
                     cases[i].M, cases[i].N, cases[i].K, rounds, cases[i].rounds);
        const gemm_plan p = expect_plan(cases[i].M, cases[i].N, cases[i].K, 132, cases[i].plan);
        if (p.stream_k && p.stream_k_rounds > 0) {
            assert_int_equal(p.stream_k_rounds, rounds);
            // the stream-K share is more than a round of units, so each CTA has a whole unit's worth
            assert_true(gemm_tile_count(cases[i].M, cases[i].N, 1, 128, 256) - (long)p.stream_k_rounds * 132 > 132);
        }
    }
}

// S = 1 past M = 128: 128 x 192 tiles in place of 128 x 256 where their whole waves, each column
// 4% dearer, cost less than the 128 x 256 plan's (its stream-K tail counted as its fractional
// waves, 15% dearer): the cells measured on the H200 (gemm_plan_choose.cuh, gemm_dense_192_cheaper).
static void dense_192_where_its_waves_cost_less(void **state) {
    (void)state;
    static const struct { int M, N, K; const char *name; } cases[] = {
        {256, 24576, 1536, "128x192"},    // 192 units in 2 rounds, the second 60 of 132; 256 in 2
        {256, 21888, 2048, "128x192"},
        {256, 36864, 7168, "128x192"},
        {512, 36864, 7168, "128x192"},
        {512, 4096, 512, "128x192"},      // one wave either way: 88 CTAs against 64
        {1024, 18048, 512, "128x192"},
        {2048, 21888, 2048, "128x192"},   // 14 rounds against 11: 4.5% fewer column-waves
        {256, 102400, 2048, "128x256"},   // 9 rounds against 7: 3.6% fewer, less than the 4%
        {1024, 102400, 2048, "128x256"},
        {1024, 129280, 7168, "128x256"},
        {512, 24576, 1536, "128x256"},    // 4 rounds against 3
        {128, 24576, 1536, "128x256"},    // one row tile: the weights' bytes bound it (not this rule)
        {1024, 12800, 2048, "128x256/sk-tail"},  // 536 units in 5 rounds, the last 8 of 132
    };
    for (int i = 0; i < COUNT(cases); i++) expect_plan(cases[i].M, cases[i].N, cases[i].K, 132, cases[i].name);
    // one dense product only: not a batch, not the cp.async kernels
    assert_int_equal(gemm_plan_choose(256, 21888, 2048, 2, true, true, 132).tile, TILE_128x256);
    assert_int_equal(gemm_plan_choose(256, 21888, 2048, 1, true, false, 132).tile, TILE_128x256);
}

// M <= 64 at S = 1: 64 x 192 tiles where they fit one wave and 64 x 128 ones do not
// (gemm_one_wave_192), on 132 SMs and on 114.
static void one_wave_of_64x192_at_small_m(void **state) {
    (void)state;
    static const struct { int M, N, K, sms; const char *name; } cases[] = {
        {1, 24576, 1536, 132, "64x192"},      // 128 units, against 192 of 64 x 128 in two rounds
        {64, 21888, 2048, 132, "64x192"},     // 114, against 171 in stream-K order
        {16, 17280, 4096, 132, "64x192"},     // 90, against 135
        {1, 16896, 2048, 132, "64x128"},      // 132 units of 64 x 128: one wave already
        {1, 16897, 2048, 132, "64x192"},      // 133 of them: 89 of 64 x 192, the rule's first N
        {1, 25344, 2048, 132, "64x192"},      // 132 of 64 x 192 exactly: its last
        {1, 25472, 2048, 132, "64x128"},      // 133 of 64 x 192: two waves either way
        {65, 24576, 1536, 132, "128x256"},    // two row tiles of 64: not this rule
        {1, 21888, 2048, 114, "64x192"},      // H100 SXM: 114 units of 64 x 192 in its one wave
        {1, 24576, 1536, 114, "64x128"},      // 128 > 114
    };
    for (int i = 0; i < COUNT(cases); i++) expect_plan(cases[i].M, cases[i].N, cases[i].K, cases[i].sms, cases[i].name);
    // a batch keeps 64 x 128 (the rule measured one product), and so do cp.async loads
    assert_int_equal(gemm_plan_choose(1, 24576, 1536, 2, true, true, 132).tile, TILE_64x128);
    assert_int_equal(gemm_plan_choose(1, 24576, 1536, 1, true, false, 132).tile, TILE_64x128);
}

// Grouped products (the MoE experts) size tiles by a group's mean rows, not by M (the batch's
// tokens): V2-Lite's experts at a decode step of 128 tokens (768 rows over 64 experts, 12 a
// group) keep 64-row tiles, a 4,096-token prefill (384 a group) takes 128-row ones; the deep
// pipeline only where the CTAs with rows fit one wave (a token alone: 6 experts).
static void grouped_tiles_sized_by_a_groups_rows(void **state) {
    (void)state;
    assert_int_equal(gemm_plan_rows(128, 64, 768), 12);
    assert_int_equal(gemm_plan_rows(4096, 64, 4096L * 6), 384);
    assert_int_equal(gemm_plan_rows(128, 64, 1), 1);          // one row among 64 groups
    assert_int_equal(gemm_plan_rows(100, 2, 10000), 100);     // never past M
    assert_int_equal(gemm_plan_rows(128, 64, 0), 128);        // dense: M
    assert_int_equal(gemm_plan_rows(128, 1, 768), 128);       // one product: M
    static const struct { int T, N, K; enum gemm_tile tile; } cases[] = {
        {1, 2816, 2048, TILE_64x128},    {32, 2816, 2048, TILE_64x128},
        {128, 2816, 2048, TILE_64x128},  {128, 2048, 1408, TILE_64x128},  // were 128 x 128
        {4096, 2816, 2048, TILE_128x128}, {4096, 2048, 1408, TILE_128x128},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        const int rows = gemm_plan_rows(cases[i].T, 64, (long)cases[i].T * 6);
        const gemm_plan pl = gemm_plan_choose(rows, cases[i].N, cases[i].K, 64, true, false, 132);
        if (pl.tile != cases[i].tile || pl.load != LOAD_CP_ASYNC)
            fail_msg("experts N=%d K=%d at %d tokens: plan %s", cases[i].N, cases[i].K, cases[i].T, gemm_plan_name(&pl));
    }
    assert_true(gemm_cp_async_deep(2816, 64, 6, 132));    // 6 experts x 22 column tiles = 132
    assert_true(gemm_cp_async_deep(2048, 64, 6, 132));    // 6 x 16
    assert_false(gemm_cp_async_deep(2816, 64, 12, 132));  // two tokens: 12 x 22
    assert_false(gemm_cp_async_deep(2816, 64, 6, 114));   // 132 > 114 SMs
    assert_false(gemm_cp_async_deep(2816, 64, 0, 132));   // dense
    assert_true(gemm_cp_async_deep(2048, 4, 64, 132));    // 4 groups hold the 64 rows: 4 x 16
    // a partial column tile is a CTA too: 6 x ceil(2000 / 128) = 96 CTAs
    assert_true(gemm_cp_async_deep(2000, 64, 6, 96));
    assert_false(gemm_cp_async_deep(2000, 64, 6, 95));
    assert_false(gemm_cp_async_deep(64, 256, 256, 132));  // 256 groups of one partial tile
}

// The 64 x 128 split CTAs: the last CTA sums up to M = 4, plain CTAs below M = 48, units of the
// persistent kernel from there, before and past M = 64 (H200, the shapes the rule was measured
// on).
static void split_ctas_on_the_persistent_kernel_from_m_48(void **state) {
    (void)state;
    static const struct { int M, N, K; const char *name; } cases[] = {
        {4, 1536, 7168, "64x128/grid+last"},
        {5, 1536, 7168, "64x128/grid"},
        {47, 3072, 2048, "64x128/grid"},
        {48, 3072, 2048, "64x128/grid+persistent"},
        {64, 1536, 7168, "64x128/grid+persistent"},
        {65, 1536, 7168, "128x256/grid"},            // wide split CTAs: always persistent
        {128, 576, 7168, "64x128/grid+persistent"},  // 3 x 18 units of 128 x 256 would fill 41% of the SMs
        {200, 576, 2048, "64x128/grid+persistent"},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        const gemm_plan p = expect_plan(cases[i].M, cases[i].N, cases[i].K, 132, cases[i].name);
        assert_int_equal(p.splits, gemm_split_count(cases[i].N, cases[i].K));  // the same chains on each kernel
    }
}

// gemm_tile_of, the order CTAs take tiles in: every tile once, in groups of GEMM_TILE_GROUP_M row
// tiles (the last group shorter), one row tile by the shortcut that skips its divisions.
static void tile_order_covers_every_tile_once(void **state) {
    (void)state;
    static const int m_counts[] = {1, 2, 7, 8, 9, 17, 64}, n_counts[] = {1, 3, 12, 141};
    for (int mi = 0; mi < COUNT(m_counts); mi++)
        for (int ni = 0; ni < COUNT(n_counts); ni++) {
            const int m_tiles = m_counts[mi], n_tiles = n_counts[ni], tiles = m_tiles * n_tiles;
            static unsigned char seen[64 * 141];
            memset(seen, 0, sizeof seen);
            for (int linear = 0; linear < tiles; linear++) {
                int m, n;
                gemm_tile_of(linear, m_tiles, n_tiles, &m, &n);
                if (m < 0 || m >= m_tiles || n < 0 || n >= n_tiles || seen[m * n_tiles + n]++)
                    fail_msg("%d x %d tiles: unit %d -> tile (%d, %d), out of range or twice", m_tiles,
                             n_tiles, linear, m, n);
                const int group = linear / (GEMM_TILE_GROUP_M * n_tiles);  // the grouped order
                const int rows = m_tiles - group * GEMM_TILE_GROUP_M < GEMM_TILE_GROUP_M
                                     ? m_tiles - group * GEMM_TILE_GROUP_M : GEMM_TILE_GROUP_M;
                const int in_group = linear - group * GEMM_TILE_GROUP_M * n_tiles;
                assert_int_equal(m, group * GEMM_TILE_GROUP_M + in_group % rows);
                assert_int_equal(n, in_group / rows);
            }
        }
}

// The cta path's tile by its waves and the time a k-tile of it takes (gemm_cta_wide_tile: 128 x
// 96, 128 x 128, 128 x 144 or 128 x 192; gemm_cta_narrow_wins: 64 x 96 for 64 x 128, 64 x 72 where
// N allows; tuned on the H200's 132 SMs), the 128 x 192 split CTAs
// where 128 x 256 would leave more columns empty, and the 128 x 256 cta path (its running total
// in L2) where the splits are long.
static void wide_cta_tile_where_it_saves_waves(void **state) {
    (void)state;
    static const struct { int M, N, K; const char *name; } cases[] = {
        {4096, 1536, 7168, "128x192/cta"},    // 256 units in 2 waves against 384 in 3 and 512 in 4
        {1024, 1536, 7168, "128x96/cta"},     // 64 units of 128 x 192, 96 of 128 x 128, 128 of 128 x 96
        {4096, 576, 7168, "128x144/cta"},     // 128 units in one wave against 96 of 128 x 192 and
                                              // 160 in stream-K order whose 58.7 MB of
                                              // activations do not stay in L2
        {4096, 576, 2048, "128x128/cta+sk"},  // the same with 16 MB of activations: 1.21 waves
        {1024, 3072, 2048, "128x192/cta"},    // 128 units in one wave against 192 in two
        {4096, 3072, 2048, "128x128/cta"},    // 4 waves against 6 staged ones
        {1024, 2048, 2048, "128x128/cta"},    // 2048 columns: 11 tiles of 192, the last a third empty
        {256, 7168, 16384, "128x128/cta"},    // one wave either way
        {1024, 7168, 16384, "128x256/cta"},   // two splits of 128 k-tiles, the total in L2
        {8192, 7168, 18432, "128x256/cta"},
        {4096, 4096, 16384, "128x256/cta"},   // four splits of 64
        {4096, 4096, 8192, "128x128/cta"},    // four of 32: too short to fold through L2
        {256, 576, 7168, "128x192/grid"},     // split CTAs: 3 tiles of 192, not 3 of 256 (768 columns)
        {256, 1536, 7168, "128x256/grid"},    // 6 tiles of 256 cover it exactly
        {7000, 576, 7168, "128x144/cta"},     // 220 units in 2 waves against 330 of 128 x 96 in 3
        {8192, 576, 7168, "128x144/cta"},     // 256 in 2 against 384 of 128 x 96 in 3, 192 of 128 x 192 in 2
        {16384, 576, 7168, "128x192/cta"},    // 384 in 3 against 512 of 128 x 144 in 4
        {2048, 1152, 7168, "128x144/cta"},    // 128 in one wave against 96 of 128 x 192 (the same wave)
        {12800, 432, 7168, "128x96/cta"},     // 400 units in 4 waves against 300 of 128 x 144 in 3
        {3072, 700, 7168, "128x192/cta"},     // 700 is no multiple of 144: 120 units of 128 x 144
                                              // in one wave would cost least
        {3072, 720, 7168, "128x144/cta"},     // 720 is (5 tiles)
        {8192, 1536, 7168, "128x192/cta"},    // 512 in 4 against 1024 in 8
        {1024, 576, 7168, "64x72/cta"},       // 128 units of 64 x 72 against 96 of 64 x 96, 80 of 64 x 128
        {513, 576, 7168, "64x72/cta"},        // 72 against 54 and 45
        {1056, 576, 7168, "64x96/cta"},       // 17 row tiles: 136 units of 64 x 72 would take two waves,
                                              // 102 of 64 x 96 one
        {1024, 640, 7168, "64x128/cta"},      // 640 columns: 7 tiles of 96 would leave 32 empty
        {256, 3072, 2048, "64x128/cta"},      // 32 k-tiles: 64 x 128 stages its epilogue, 64 x 96
                                              // cannot, and staging wins on short walks
        {1024, 576, 2048, "64x128/cta"},      // the same against 64 x 72
        {1024, 320, 4096, "64x128/cta"},      // 64 k-tiles, the last staged walk
        {1024, 320, 4160, "64x96/cta"},       // 65: 36 units of 64 x 96 against 27 of 64 x 128
        {2048, 576, 7168, "128x96/cta"},      // 96 units of 128 x 96 against 80 of 128 x 128
    };
    for (int i = 0; i < COUNT(cases); i++) expect_plan(cases[i].M, cases[i].N, cases[i].K, 132, cases[i].name);
    // the persistent kernel only: the cp.async kernels have no 128 x 192 tile
    assert_int_equal(gemm_plan_choose(4096, 1536, 7168, 1, true, false, 132).tile, TILE_128x128);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_rule_cuts_k_the_same_way),
        cmocka_unit_test(wide_cta_tile_where_it_saves_waves),
        cmocka_unit_test(one_wave_of_64x192_at_small_m),
        cmocka_unit_test(grouped_tiles_sized_by_a_groups_rows),
        cmocka_unit_test(split_ctas_on_the_persistent_kernel_from_m_48),
        cmocka_unit_test(tile_order_covers_every_tile_once),
        cmocka_unit_test(every_plan_has_a_kernel_and_the_rules_splits),
        cmocka_unit_test(declared_gemm_paths_are_the_plans),
        cmocka_unit_test(stream_k_where_the_last_round_is_thin),
        cmocka_unit_test(stream_k_tail_after_round_robin),
        cmocka_unit_test(dense_192_where_its_waves_cost_less),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
