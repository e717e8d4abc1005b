// tests/test_bench_inputs.c — the bench's input copies (harness/bench/bench_inputs.h): on fresh random
// runs of GEMM rows, every row's own bytes over its run's copies exceed twice L2 (no timed
// repetition finds its inputs in L2), the weights' plain read as well, and the device memory
// counted covers what the bench allocates.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API
#include <stdio.h>    // printf
#include <time.h>     // time
#include <unistd.h>   // getpid

#include "../common/hash.h"          // invar_mix64
#include "../harness/bench/bench_inputs.h" // bench_gemm_run_at, bench_l2_copies, BENCH_L2_BYTES

#define MAX_ROWS 96

static const int grid_nk[][2] = {{1536, 7168}, {576, 7168},   {24576, 1536}, {7168, 16384}, {36864, 7168},
                                 {7168, 18432}, {129280, 7168}, {3072, 2048}, {4096, 512},   {2048, 2048},
                                 {21888, 2048}, {102400, 2048}};
static const int grid_ms[] = {1, 16, 64, 256, 1024, 4096, 8192};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

// Every row of the run at r0: its own bytes, and the weights alone, over the copies.
static void check_run(int (*rows)[3], int n, int r0, bench_gemm_run *out) {
    const bench_gemm_run run = bench_gemm_run_at((const int (*)[3])rows, n, r0);
    assert_true(run.end > r0 && run.end <= n);
    const double w = 2.0 * rows[r0][0] * rows[r0][1];
    assert_true(run.copies >= 1 && run.weight_copies >= run.copies);
    assert_true(run.weight_copies * w >= 2.0 * BENCH_L2_BYTES);
    for (int r = r0; r < run.end; r++) {
        assert_int_equal(rows[r][0], rows[r0][0]);
        assert_int_equal(rows[r][1], rows[r0][1]);
        assert_true(run.min_m <= rows[r][2] && rows[r][2] <= run.max_m);
        const double own = w + 2.0 * rows[r][1] * rows[r][2];
        if (run.copies * own < 2.0 * BENCH_L2_BYTES)
            fail_msg("%d x %d M = %d: %d copies of %.1f MB stay under twice L2", rows[r][0], rows[r][1], rows[r][2],
                     run.copies, own / 1e6);
    }
    assert_true(run.end == n || rows[run.end][0] != rows[r0][0] || rows[run.end][1] != rows[r0][1]);
    // what bench_gemm allocates: the weights' copies, the activations' at the largest M, the output
    const double allocated = run.weight_copies * w + run.copies * 2.0 * rows[r0][1] * run.max_m + 2.0 * run.max_m * rows[r0][0];
    assert_true(run.device_bytes >= allocated);
    if (out) *out = run;
}

// The grid's runs: each (N, K) with M = 1 ... 8192 in one run, the narrow shapes' small-M rows
// cold (1536 x 7168: 22 MB of weights beside 117 MB of activations at M = 8192).
static void grid_rows_are_cold(void **state) {
    (void)state;
    int rows[MAX_ROWS][3], n = 0;
    for (int s = 0; s < COUNT(grid_nk); s++)
        for (int m = 0; m < COUNT(grid_ms); m++) {
            rows[n][0] = grid_nk[s][0];
            rows[n][1] = grid_nk[s][1];
            rows[n++][2] = grid_ms[m];
        }
    int runs = 0;
    for (int r0 = 0; r0 < n; runs++) {
        bench_gemm_run run;
        check_run(rows, n, r0, &run);
        assert_int_equal(run.end - r0, COUNT(grid_ms));
        if (rows[r0][0] == 1536 && rows[r0][1] == 7168) assert_true(run.copies >= 6);
        r0 = run.end;
    }
    assert_int_equal(runs, COUNT(grid_nk));
}

// Fresh random --shape lists: runs of random length, an (N, K) coming back later is a new run.
static void random_runs_are_cold(void **state) {
    (void)state;
    const uint64_t seed = invar_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20));
    printf("seed %llu\n", (unsigned long long)seed);
    for (int trial = 0; trial < 200; trial++) {
        int rows[MAX_ROWS][3], n = 0;
        uint64_t h = invar_mix64(seed + (uint64_t)trial);
        while (n < 40) {
            const int N = 8 * (1 + (int)((h = invar_mix64(h)) % 16384)), K = 8 * (1 + (int)((h = invar_mix64(h)) % 2048));
            const int len = 1 + (int)((h = invar_mix64(h)) % 7);
            for (int i = 0; i < len && n < 40; i++) {
                rows[n][0] = N;
                rows[n][1] = K;
                rows[n++][2] = 1 + (int)((h = invar_mix64(h)) % 16384);
            }
        }
        for (int r0 = 0; r0 < n;) {
            bench_gemm_run run;
            check_run(rows, n, r0, &run);
            r0 = run.end;
        }
    }
}

static void copies_cover_twice_l2(void **state) {
    (void)state;
    assert_int_equal(bench_l2_copies(4.0 * BENCH_L2_BYTES), 1);
    assert_int_equal(bench_l2_copies(2.0 * BENCH_L2_BYTES), 1);
    assert_int_equal(bench_l2_copies(BENCH_L2_BYTES), 2);
    assert_int_equal(bench_l2_copies(0.9 * BENCH_L2_BYTES), 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(copies_cover_twice_l2),
        cmocka_unit_test(grid_rows_are_cold),
        cmocka_unit_test(random_runs_are_cold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
