// tests/test_cuda_ops.c — the CUDA kernel sets (kernels/cuda, reference/cuda) on a GPU. Every op
// of the checker's table goes through kernel_check_op (harness/check/kernel_check.h: fresh random
// rows, poisoned outputs checked fully written, each row alone vs inside batches, accuracy
// against kernels/f64): the invariant set must be invariant and accurate, the reference set
// accurate, and the cuBLAS GEMM caught varying. What the checker cannot express stays here,
// against the same float64 oracles: the GEMM's tile and load paths at many M, strides and
// batched products; MLA attention over 16- and 64-position cache blocks and at 128 heads
// (sm_90a's wgmma kernel); padding slots of kv_cache_write; ties in logprobs; the bench's plain
// read (its floor under memory-bound rows) reading every byte. Without a CUDA
// device every test is skipped with a visible "SKIP:" line.
#include <stdarg.h>                      // cmocka
#include <stddef.h>                      // cmocka
#include <stdint.h>                      // uint16_t, int32_t, uint64_t
#include <setjmp.h>                      // cmocka
#include <cmocka.h>                      // cmocka_unit_test, skip, assert_*

#include <math.h>                        // sqrt, ceil, isnan, NAN
#include <stdbool.h>                     // bool
#include <stdio.h>                       // printf
#include <stdlib.h>                      // free, getenv, malloc
#include <string.h>                      // memcpy, memcmp, memset, strstr, strncmp
#include <time.h>                        // time

#include "../harness/host.h"             // host_seconds
#include "../harness/check/kernel_check.h" // kernel_check_op, check_opts, check_result
#include "../harness/check/op_table.h"   // op_table, op_table_find, op_shape
#include "../kernels/bf16.h"             // float_to_bf16, bf16_to_float
#include "../common/check.h"            // invar_malloc
#include "../kernels/f64/f64.h"          // f64_gemm, f64_mla_attention, f64_logprobs, f64_rel_l2_*
#include "../kernels/ops.h"              // ops_set, *_args
#include "../sets/registry.h"         // kernel_set_create, cuda_device_available
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise
#include "engine_slices_check.h"         // check_slices_one_call_equals_each
#include "engine_graphs_check.h"         // check_graphs_equal_as_scheduled
#ifdef INVAR_CUDA
#include "../kernels/cuda/inv_cuda.h"    // inv_cuda_gemm_plan_describe, inv_cuda_sm_count, inv_cuda_l2_bytes
#include "../kernels/cuda/cuda_timing.h" // cuda_read_xor
#include "../kernels/cuda/inv_cuda_launch.h" // inv_cuda_reserve
#endif

#define POISON16 0xFFFFu                 // a NaN bf16: no op may leave it behind
#define BF16_TOL 1.5e-2                  // rel-L2 of bf16 outputs against float64

typedef struct {
    ops_set *inv, *ref;                  // NULL without a device: every test skips
    double started;                      // the running test's start (host_seconds)
} sets;

#define SETS(state) ((sets *)*(state))
#define NEED_GPU(s) do { if (!(s)->inv) skip(); } while (0)

// --- helpers for the tests the checker cannot express ----------------------------------------

static uint16_t *rand_bf16(long n, float scale, uint64_t seed) {
    uint16_t *h = invar_malloc((size_t)n * 2, "test data");
    for (long i = 0; i < n; i++)
        h[i] = float_to_bf16(scale * (2.0f * invar_uniform(invar_mix64(seed + (uint64_t)i)) -
                                      1.0f));
    return h;
}

static void *to_dev(ops_set *o, const void *h, size_t bytes) {
    void *d = o->alloc(o, bytes, "test buffer");
    o->upload(o, d, h, bytes);
    return d;
}

static void poison(ops_set *o, void *d, size_t bytes) {
    unsigned char *h = invar_malloc(bytes, "poison");
    memset(h, 0xFF, bytes);
    o->upload(o, d, h, bytes);
    free(h);
}

static void *from_dev(ops_set *o, const void *d, size_t bytes) {
    void *h = invar_malloc(bytes, "test result");
    o->download(o, h, d, bytes);
    return h;
}

static void assert_written16(const uint16_t *h, long n) {
    for (long i = 0; i < n; i++)
        if (h[i] == POISON16) fail_msg("element %ld was not written", i);
}

static int setup_sets(void **state) {
    sets *s = invar_calloc(1, sizeof *s, "test sets");
    *state = s;
    char why[256];
    if (!cuda_device_available(why, (int)sizeof why)) return 0;
    s->inv = kernel_set_create("invariant", "cuda", 0);
    s->ref = kernel_set_create("reference", "cuda", 0);
    return s->inv && s->ref ? 0 : -1;
}

static int teardown_sets(void **state) {
    sets *s = SETS(state);
    if (s->inv) s->inv->destroy(s->inv);
    if (s->ref) s->ref->destroy(s->ref);
    free(s);
    return 0;
}

// Each test's wall time on a GPU, so a kernel developer (and the suite's split in make check)
// sees where the suite's minutes go.
static int start_clock(void **state) {
    SETS(state)->started = host_seconds();
    return 0;
}
static int print_elapsed(void **state) {
    if (SETS(state)->inv) printf("    (%.1f s)\n", host_seconds() - SETS(state)->started);
    return 0;
}
#define TIMED_TEST(t) cmocka_unit_test_setup_teardown(t, start_clock, print_elapsed)

static void print_result(const ops_set *ops, const op_entry *op, int shapes,
                         const check_result *r) {
    printf("%-9s %-15s %d shape(s): invariant %s (first M %d), err %.2e (tol %.0e), written %s\n",
           ops->name, op->name, shapes, r->invariant ? "yes" : "no", r->first_vary_M, r->err,
           r->tol, r->written ? "yes" : "NO");
}

// --- every op through the checker ------------------------------------------------------------

// Quick shapes of op that this host can run: a tensor-parallel shape needs one GPU per rank
// (the checker skips the others with a line of its own).
static int runnable_quick_shapes(const op_entry *op) {
    int n = 0;
    for (const op_shape *s = op->cuda_shapes; s->label; s++)
        n += s->quick && !s->exhaustive && (s->devices <= 1 || s->devices <= cuda_device_count());
    return n;
}

// The checker's --quick list: its quick shapes, M in {2, 7, 64, 256, 1024}.
static void test_every_op_invariant_set(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    check_opts o = {.quick = true, .seed = 20240611};
    for (const op_entry *op = op_table(); op->name; op++) {
        if (runnable_quick_shapes(op) == 0) {  // all_reduce on one GPU: tests/test_cuda_tp.c
            printf("SKIP      %-15s no quick shape this host can run (%d GPU(s) visible)\n",
                   op->name, cuda_device_count());
            continue;
        }
        check_result r;
        int shapes = kernel_check_op(s->inv, op, &o, &r);
        print_result(s->inv, op, shapes, &r);
        assert_int_equal(shapes, runnable_quick_shapes(op));
        if (!r.pass) fail_msg("%s: invariant %d (M=%d row %d) err %g tol %g written %d", op->name,
                              r.invariant, r.first_vary_M, r.first_vary_pos, r.err, r.tol,
                              r.written);
    }
}

// Accurate and fully written; whether each op varies at these few shapes is printed (the
// negative controls are `invar kernels --device cuda`'s, over every shape).
static void test_every_op_reference_set(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    check_opts o = {.quick = true, .seed = 20240611};
    for (const op_entry *op = op_table(); op->name; op++) {
        check_result r;
        int shapes = kernel_check_op(s->ref, op, &o, &r);
        print_result(s->ref, op, shapes, &r);
        if (!r.accurate || !r.written)
            fail_msg("%s (reference): err %g tol %g written %d", op->name, r.err, r.tol, r.written);
    }
}

// cuBLAS picks algorithms by M: at these shapes (H200) a row gets other bits in a batch.
static void test_gemm_reference_varies(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    static const op_shape shapes[] = {
        {.label = "576x7168", .gemm = {.N = 576, .K = 7168}, .max_M = 1024},
        {.label = "7168x16384", .gemm = {.N = 7168, .K = 16384}, .max_M = 64},
        {.label = "1536x7168", .gemm = {.N = 1536, .K = 7168}, .max_M = 1024},
        {.label = NULL},
    };
    static const int Ms[] = {16, 64, 512, 1024};
    check_opts o = {.batch_sizes = Ms, .n_batch_sizes = 4, .seed = 7, .shapes = shapes};
    check_result r;
    const op_entry *gemm = op_table_find("gemm");
    print_result(s->ref, gemm, kernel_check_op(s->ref, gemm, &o, &r), &r);
    assert_true(r.accurate && r.written);
    if (r.invariant) fail_msg("gemm reference: cuBLAS gave every row the same bits at every M");
}

// Every routing method (the quick list has only V2-Lite's softmax greedy).
static void test_moe_route_every_method(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    const op_entry *route = op_table_find("moe_route");
    static const int Ms[] = {2, 7, 64, 256};
    check_opts o = {.batch_sizes = Ms, .n_batch_sizes = 4, .seed = 11,
                    .shapes = route->cuda_shapes};
    check_result r;
    print_result(s->inv, route, kernel_check_op(s->inv, route, &o, &r), &r);
    assert_true(r.pass);
}

// --- gemm: tile and load paths ---------------------------------------------------------------

static void run_gemm(ops_set *o, void *dy, const void *dx, const void *dw, int M, int N, int K,
                     long ldx, long ldy, bool f32) {
    gemm_args a = {.y = dy, .y_f32 = f32, .x = dx, .w = dw, .M = M, .N = N, .K = K,
                   .ldx = ldx, .ldy = ldy};
    o->gemm(o, &a);
}

// Every tile and load path (sm_90a: 64x128 and 128x256 tiles, TMA, cp.async, scalar; elsewhere
// the mma.sync kernel's three tiles) gives one row the same bits: rows at other M and offsets,
// unaligned strides, the fp32 store, a batched product.
static void test_gemm_tile_paths(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    const int N = 2304, K = 1000, MMAX = 1024;  // K % 16 != 0: exercises the zero-filled tail
    uint16_t *hx = rand_bf16((long)MMAX * K, 1.0f, 1), *hw = rand_bf16((long)N * K, 1.0f, 2);
    void *dx = to_dev(inv, hx, (size_t)MMAX * K * 2), *dw = to_dev(inv, hw, (size_t)N * K * 2);
    void *dy = inv->alloc(inv, (size_t)MMAX * N * 2, "y");
    poison(inv, dy, (size_t)MMAX * N * 2);
    run_gemm(inv, dy, dx, dw, MMAX, N, K, 0, 0, false);
    uint16_t *full = from_dev(inv, dy, (size_t)MMAX * N * 2);
    assert_written16(full, (long)MMAX * N);

    double *ref = invar_malloc((size_t)N * sizeof(double), "gemm oracle"), worst = 0.0;
    for (int m = 0; m < MMAX; m += 61) {  // accuracy on a sample of rows
        gemm_args a = {.x = hx + (long)m * K, .w = hw, .M = 1, .N = N, .K = K};
        f64_gemm(&a, ref);
        double err = f64_rel_l2_bf16(full + (long)m * N, ref, N);
        worst = err > worst ? err : worst;
    }
    printf("gemm invariant: worst rel err vs f64 %.2e\n", worst);
    assert_true(worst < BF16_TOL);

    const int ms[] = {1, 3, 16, 17, 64, 200, 513};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        int M = ms[i], off = (int)((i * 37) % (MMAX - M + 1));
        poison(inv, dy, (size_t)M * N * 2);
        run_gemm(inv, dy, (const uint16_t *)dx + (long)off * K, dw, M, N, K, 0, 0, false);
        uint16_t *part = from_dev(inv, dy, (size_t)M * N * 2);
        assert_written16(part, (long)M * N);
        if (memcmp(part, full + (long)off * N, (size_t)M * N * 2) != 0)
            fail_msg("gemm: rows at M=%d differ from M=%d", M, MMAX);
        free(part);
    }

    // unaligned strides take the scalar loader: same bits; fp32 output; padded ldy
    const int M = 40;
    long ldx = K + 3, ldy = N + 5;
    uint16_t *hx2 = invar_malloc((size_t)M * ldx * 2, "x2");
    for (int m = 0; m < M; m++) memcpy(hx2 + m * ldx, hx + (long)m * K, (size_t)K * 2);
    void *dx2 = to_dev(inv, hx2, (size_t)M * ldx * 2);
    void *dyf = inv->alloc(inv, (size_t)M * ldy * 4, "yf");
    poison(inv, dy, (size_t)M * ldy * 2);
    run_gemm(inv, dy, dx2, dw, M, N, K, ldx, ldy, false);
    uint16_t *un = from_dev(inv, dy, (size_t)M * ldy * 2);
    for (int m = 0; m < M; m++) {
        if (memcmp(un + m * ldy, full + (long)m * N, (size_t)N * 2) != 0)
            fail_msg("gemm: unaligned row %d differs", m);
        for (long g = N; g < ldy; g++)
            if (un[m * ldy + g] != POISON16) fail_msg("gemm: row %d wrote its gap", m);
    }
    poison(inv, dyf, (size_t)M * ldy * 4);
    run_gemm(inv, dyf, dx, dw, M, N, K, 0, ldy, true);
    float *yf = from_dev(inv, dyf, (size_t)M * ldy * 4);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++)
            if (float_to_bf16(yf[m * ldy + n]) != full[(long)m * N + n])
                fail_msg("gemm: f32 output (%d,%d) rounds differently", m, n);

    // batched: two products with strides, each equal to its single product
    gemm_args b = {.y = dy, .x = dx, .w = dw, .M = 8, .N = 1152, .K = K, .ldw = K, .ldy = N,
                   .batch = 2, .stride_x = (long)8 * K, .stride_w = (long)1152 * K,
                   .stride_y = (long)8 * N};
    poison(inv, dy, (size_t)16 * N * 2);
    inv->gemm(inv, &b);
    uint16_t *bt = from_dev(inv, dy, (size_t)16 * N * 2);
    for (int z = 0; z < 2; z++)
        for (int m = 0; m < 8; m++)
            if (memcmp(bt + ((long)z * 8 + m) * N, full + ((long)z * 8 + m) * N + z * 1152,
                       1152 * 2) != 0)
                fail_msg("gemm: batch %d row %d differs", z, m);
    free(bt); free(yf); free(un); free(hx2); free(full); free(hx); free(hw); free(ref);
    inv->release(inv, dx); inv->release(inv, dx2); inv->release(inv, dw);
    inv->release(inv, dy); inv->release(inv, dyf);
}

// --- gemm: split-K (sm_90a: kernels/cuda/gemm_plan.cuh) ------------------------------------

// The split count depends on (N, K) alone, so every M must give a row the same bits whether
// the splits ran on separate CTAs (fp32 partials summed in split order by each tile's last CTA
// up to M = GEMM_SPLIT_LAST_CTA_MAX_M, by a reduce kernel above; from M = 48 the 64 x 128 ones
// as units of the persistent kernel) or one CTA walked them (large M, running total in
// registers, or in L2 on 128 x 256 tiles), on 64 x 128, 64 x 96, 64 x 72, 64 x 192, 128 x 96,
// 128 x 128, 128 x 144, 128 x 192 or 128 x 256 tiles, and whichever epilogue stored them. The
// many M in a row also check that the last-CTA sum leaves its arrival counters at zero for the
// next launch. Split and non-split shapes; fp32 output
// rounding to the bf16 output on both paths; sampled rows against the float64 oracle.
static void test_gemm_split_k_rows(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    static const int shapes[][2] = {
        {1536, 7168}, {576, 7168}, {2048, 1536}, {7168, 2048},  // split on sm_90a
        {7168, 8192},  // 2 long splits: from M = 513 128 x 256 tiles walking both, the total in L2
        {4096, 512},  {24576, 1536},                            // one split (K, N too large)
        {8832, 512},   // 128 x 256 tiles, S = 1, the last half wide (N % 256 = 128): clipped by the TMA stores
        {2048, 40},    // one k-tile: a persistent CTA's units each flip the barriers' parity
        {18048, 512},  // 141 column tiles of 128 (9 for round 2 on 132 SMs): 94 of 64 x 192 at M <= 64,
                       // 128 x 192 at S = 1 at M = 200, 1024 and 4096 (at 200 188 units against 142 of
                       // 128 x 256, both two rounds)
        {20000, 512},  // 105 of 64 x 192 at M <= 64, the last 32 columns wide (clipped by the TMA stores)
        {34944, 512},  // 273 of 128 (182 of 192): stream-K order at M <= 64, 9 units left for round 3
        {576, 1536},   // 160 units of 128 x 128 at M = 4096, walking 4 splits in stream-K order
        {320, 7168},   // 128 x 192 cta tiles at M = 8192 whose second tile is a third empty; 64 x 96 at 513, 1024
        {2048, 2048},  // S = 5, odd: the two-chain 128 x 128 walk ends in its first chain
        {576, 2048},   // S = 5 on 64 x 128 cta tiles at M = 513 and 1024 (32 k-tiles: staged), the last half wide
    };
    static const int ms[] = {1, 2, 3, 7, 16, 17, 48, 63, 64, 65, 200, 513, 1024, 4096};  // 48: the persistent split CTAs
    const int MMAX = 8192, f32_ms[] = {17, 1024, 4096};  // 1024, 4096: the 72-, 96- and 144-column tiles' fp32 stores
#ifdef INVAR_CUDA
    bool seen_split = false, seen_grid = false, seen_cta = false, seen_wide_grid = false;  // paths run
    bool seen_last_cta = false, seen_reduce = false;  // who sums the small-M grid splits
    bool seen_grid_persistent = false;  // 64 x 128 split CTAs as units of the persistent kernel (M >= 48)
    bool seen_stream_k = false, seen_stream_k_cta = false;  // chains handed between CTAs
    bool seen_stream_k_64 = false, seen_one_wave_192 = false;  // M <= 64, S = 1: 64 x 128 in stream-K order, 64 x 192
    bool seen_wide_cta = false, seen_wide_grid_192 = false;  // 128 x 192: wgmma n = 192 against n = 128
    bool seen_narrow_cta = false, seen_narrow_cta_128 = false;  // 64 / 128 x 96: wgmma n = 96 against n = 128
    bool seen_cta_144 = false, seen_cta_72 = false;  // 576 columns: 128 x 144 at M = 4096, 8192, 64 x 72 at 513, 1024
    bool seen_total_l2 = false;  // 128 x 256 walking long splits, the running total in L2
    bool seen_dense_192 = false;  // S = 1 past M = 128: 128 x 192 in place of 128 x 256
#endif
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int N = shapes[si][0], K = shapes[si][1];
        uint16_t *hx = rand_bf16((long)MMAX * K, 1.0f, 100 + si), *hw = rand_bf16((long)N * K, 1.0f, 200 + si);
        void *dx = to_dev(inv, hx, (size_t)MMAX * K * 2), *dw = to_dev(inv, hw, (size_t)N * K * 2);
        void *dy = inv->alloc(inv, (size_t)MMAX * N * 4, "y");  // room for fp32 rows too
        poison(inv, dy, (size_t)MMAX * N * 2);
        run_gemm(inv, dy, dx, dw, MMAX, N, K, 0, 0, false);
        uint16_t *full = from_dev(inv, dy, (size_t)MMAX * N * 2);
        assert_written16(full, (long)MMAX * N);

        double *ref = invar_malloc((size_t)N * sizeof(double), "gemm oracle"), worst = 0.0;
        const int sample[] = {0, 1, 63, 64, 4095, MMAX - 1};
        for (size_t r = 0; r < sizeof sample / sizeof sample[0]; r++) {
            gemm_args a = {.x = hx + (long)sample[r] * K, .w = hw, .M = 1, .N = N, .K = K};
            f64_gemm(&a, ref);
            double err = f64_rel_l2_bf16(full + (long)sample[r] * N, ref, N);
            worst = err > worst ? err : worst;
        }
        printf("gemm split-K %5d x %-5d: worst rel err vs f64 %.2e (tol %.0e)\n", N, K, worst, BF16_TOL);
        assert_true(worst < BF16_TOL);

        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
            const int M = ms[i], off = (int)((i * 997) % (size_t)(MMAX - M + 1));
            const uint16_t *x = (const uint16_t *)dx + (long)off * K;
            char plan[64] = "?";
            int splits = 1;
#ifdef INVAR_CUDA
            gemm_args d = {.x = x, .w = dw, .M = M, .N = N, .K = K};
            splits = inv_cuda_gemm_plan_describe(inv, &d, plan, (int)sizeof plan);
            seen_split |= splits > 1;
            seen_grid |= splits > 1 && strstr(plan, "/grid") != NULL;
            seen_cta |= splits > 1 && strstr(plan, "/cta") != NULL;
            seen_wide_grid |= splits > 1 && strstr(plan, "128x256/grid") != NULL;
            seen_last_cta |= splits > 1 && strstr(plan, "grid+last") != NULL;
            seen_reduce |= splits > 1 && strcmp(plan, "64x128/grid tma") == 0;
            seen_grid_persistent |= splits > 1 && strstr(plan, "64x128/grid+persistent") != NULL;
            seen_stream_k |= splits == 1 && strstr(plan, "/sk") != NULL;
            seen_stream_k_cta |= splits > 1 && strstr(plan, "/cta+sk") != NULL;
            seen_stream_k_64 |= splits == 1 && strstr(plan, "64x128/sk") != NULL;
            seen_one_wave_192 |= splits == 1 && strncmp(plan, "64x192 ", 7) == 0;
            seen_wide_cta |= splits > 1 && strstr(plan, "128x192/cta") != NULL;
            seen_wide_grid_192 |= splits > 1 && strstr(plan, "128x192/grid") != NULL;
            seen_narrow_cta |= splits > 1 && strstr(plan, "64x96/cta") != NULL;
            seen_narrow_cta_128 |= splits > 1 && strstr(plan, "128x96/cta") != NULL;
            seen_cta_144 |= splits > 1 && strstr(plan, "128x144/cta") != NULL;
            seen_cta_72 |= splits > 1 && strstr(plan, "64x72/cta") != NULL;
            seen_total_l2 |= splits > 1 && strstr(plan, "128x256/cta") != NULL;
            seen_dense_192 |= splits == 1 && strncmp(plan, "128x192 ", 8) == 0;
#endif
            printf("    M=%-5d splits %2d  %s\n", M, splits, plan);
            poison(inv, dy, (size_t)M * N * 2);
            run_gemm(inv, dy, x, dw, M, N, K, 0, 0, false);
            uint16_t *part = from_dev(inv, dy, (size_t)M * N * 2);
            assert_written16(part, (long)M * N);
            for (int m = 0; m < M; m++)
                if (memcmp(part + (long)m * N, full + ((long)off + m) * N, (size_t)N * 2) != 0)
                    fail_msg("gemm %dx%d: row %d at M=%d (plan %s) differs from the same row at M=%d", N, K,
                             off + m, M, plan, MMAX);
            free(part);
        }
        for (size_t i = 0; i < sizeof f32_ms / sizeof f32_ms[0]; i++) {
            const int M = f32_ms[i];
            poison(inv, dy, (size_t)M * N * 4);
            run_gemm(inv, dy, dx, dw, M, N, K, 0, 0, true);
            float *yf = from_dev(inv, dy, (size_t)M * N * 4);
            for (long e = 0; e < (long)M * N; e++)
                if (float_to_bf16(yf[e]) != full[e])
                    fail_msg("gemm %dx%d: fp32 output at M=%d, element %ld rounds differently", N, K, M, e);
            free(yf);
        }
        free(ref); free(full); free(hx); free(hw);
        inv->release(inv, dx); inv->release(inv, dw); inv->release(inv, dy);
    }
#ifdef INVAR_CUDA
    char plan[64];
    gemm_args probe = {.M = 1, .N = 1536, .K = 7168};
    inv_cuda_gemm_plan_describe(inv, &probe, plan, (int)sizeof plan);
    // The stream-K plans take the H200's 132 SMs (273 and 160 units leave 9 and 28 for a last
    // round), and so do the 128 x 192, 64 x 96 and 64 x 192 tiles (their waves against the
    // 128-column tiles').
    const bool sms_132 = inv_cuda_sm_count(inv) == 132;
    if (strcmp(plan, "mma.sync") != 0 &&
        !(seen_split && seen_grid && seen_cta && seen_wide_grid && seen_last_cta && seen_reduce && seen_total_l2 &&
          seen_grid_persistent &&
          (!sms_132 || (seen_stream_k && seen_stream_k_cta && seen_wide_cta && seen_wide_grid_192 && seen_narrow_cta &&
                        seen_narrow_cta_128 && seen_cta_144 && seen_cta_72 && seen_stream_k_64 && seen_one_wave_192 &&
                        seen_dense_192))))
        fail_msg("gemm split-K: sm_90a did not run every split path (split %d, grid %d, in-CTA %d, 128x256 grid %d, "
                 "last-CTA sum %d, reduce kernel %d, stream-K %d, stream-K in-CTA %d, 128x192 in-CTA %d, "
                 "128x192 grid %d, 64x96 in-CTA %d, 128x96 in-CTA %d, 128x144 in-CTA %d, 64x72 in-CTA %d, "
                 "128x256 in-CTA with the total in L2 %d, 64x128 stream-K %d, 64x192 %d, 64x128 split CTAs on "
                 "the persistent kernel %d, 128x192 at S = 1 %d)",
                 seen_split, seen_grid, seen_cta, seen_wide_grid, seen_last_cta, seen_reduce, seen_stream_k,
                 seen_stream_k_cta, seen_wide_cta, seen_wide_grid_192, seen_narrow_cta, seen_narrow_cta_128,
                 seen_cta_144, seen_cta_72, seen_total_l2, seen_stream_k_64, seen_one_wave_192, seen_grid_persistent,
                 seen_dense_192);
#endif
}

// NaN and infinities in x: the epilogues that round with the converter alone where a warp holds
// no NaN (gemm_warp_has_nan) and store through TMA (128 x 256 tiles at M = 4096, S = 1) must give
// every value float_to_bf16's bits, in the NaN and infinity rows and in the finite rows of the
// same tiles, and each planted row the bits of the same row at M = 1 (64 x 128 tiles, pair stores
// with the NaN fix-ups). The bf16 output is first filled with a NaN no path writes (0x7fbf).
// The NaNs a product makes are the hardware's canonical one, which the converter alone rounds as
// the fix-ups do: so this checks that both branches give float_to_bf16's bits, not which one ran.
static void test_gemm_nan_rows(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    const int N = 2048, K = 512, M = 4096;
    static const struct { int row, k; uint16_t v; } planted[] = {
        {5, 17, 0x7fc0}, {77, 3, 0x7f80}, {200, 100, 0xff80}, {4095, 511, 0xffc1},  // NaN, +inf, -inf, -NaN
    };
    const int n_planted = (int)(sizeof planted / sizeof planted[0]);
    uint16_t *hx = rand_bf16((long)M * K, 1.0f, 31), *hw = rand_bf16((long)N * K, 1.0f, 32);
    for (int i = 0; i < n_planted; i++) hx[(long)planted[i].row * K + planted[i].k] = planted[i].v;
    uint16_t *fill = invar_malloc((size_t)M * N * 2, "unwritten marks");
    for (long e = 0; e < (long)M * N; e++) fill[e] = 0x7fbf;
    void *dx = to_dev(inv, hx, (size_t)M * K * 2), *dw = to_dev(inv, hw, (size_t)N * K * 2);
    void *dy = to_dev(inv, fill, (size_t)M * N * 2), *dyf = inv->alloc(inv, (size_t)M * N * 4, "fp32 y");
    poison(inv, dyf, (size_t)M * N * 4);
    run_gemm(inv, dy, dx, dw, M, N, K, 0, 0, false);
    run_gemm(inv, dyf, dx, dw, M, N, K, 0, 0, true);
    uint16_t *y = from_dev(inv, dy, (size_t)M * N * 2);
    float *yf = from_dev(inv, dyf, (size_t)M * N * 4);
    long nonfinite = 0;
    for (long e = 0; e < (long)M * N; e++) {
        if (y[e] == 0x7fbf) fail_msg("gemm NaN rows: element %ld (row %ld) was not written", e, e / N);
        if (float_to_bf16(yf[e]) != y[e])
            fail_msg("gemm NaN rows: element %ld (row %ld) is %#06x, its fp32 value rounds to %#06x", e, e / N,
                     (unsigned)y[e], (unsigned)float_to_bf16(yf[e]));
        nonfinite += (y[e] & 0x7f80u) == 0x7f80u;
    }
    // the four planted rows and nothing else: NaN * w and inf * w reach every column
    if (nonfinite != (long)n_planted * N) fail_msg("gemm NaN rows: %ld values not finite, expected %ld", nonfinite, (long)n_planted * N);
    for (int i = 0; i < n_planted; i++) {
        const int r = planted[i].row;
        for (int n = 0; n < N; n++)
            if ((y[(long)r * N + n] & 0x7f80u) != 0x7f80u) fail_msg("gemm NaN rows: row %d column %d is finite", r, n);
        poison(inv, dyf, (size_t)N * 2);
        run_gemm(inv, dyf, (const uint16_t *)dx + (long)r * K, dw, 1, N, K, 0, 0, false);
        uint16_t *one = from_dev(inv, dyf, (size_t)N * 2);
        if (memcmp(one, y + (long)r * N, (size_t)N * 2) != 0)
            fail_msg("gemm NaN rows: row %d at M=1 differs from the same row at M=%d", r, M);
        free(one);
    }
    printf("gemm NaN rows: %d planted rows, %ld values not finite, every value float_to_bf16's\n", n_planted, nonfinite);
    free(y); free(yf); free(fill); free(hx); free(hw);
    inv->release(inv, dx); inv->release(inv, dw); inv->release(inv, dy); inv->release(inv, dyf);
}

// An output whose rows are longer than N (ldy = N + 8, aligned): where the TMA stores write it
// (the tensor map's rows N columns long at pitch ldy), every row must equal the dense output's and
// the 8 columns after each row keep their poison. On sm_90a: 128 x 256 tiles whose stores wait for
// the next unit (288 units for 132 CTAs), the 128 x 192 cta tile's TMA-store kernel (3072 x 2048
// at M = 1024), 128 x 256 tiles walking two splits with the total in L2 (7168 x 8192).
static void test_gemm_padded_output(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    static const int shapes[][3] = {{2304, 512, 4096}, {3072, 2048, 1024}, {7168, 8192, 1024}};  // N, K, M
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int N = shapes[si][0], K = shapes[si][1], M = shapes[si][2];
        const long ldy = N + 8;
        uint16_t *hx = rand_bf16((long)M * K, 1.0f, 40 + si), *hw = rand_bf16((long)N * K, 1.0f, 50 + si);
        void *dx = to_dev(inv, hx, (size_t)M * K * 2), *dw = to_dev(inv, hw, (size_t)N * K * 2);
        void *dy = inv->alloc(inv, (size_t)M * ldy * 2, "y");
        poison(inv, dy, (size_t)M * N * 2);
        run_gemm(inv, dy, dx, dw, M, N, K, 0, 0, false);
        uint16_t *dense = from_dev(inv, dy, (size_t)M * N * 2);
        assert_written16(dense, (long)M * N);
        poison(inv, dy, (size_t)M * ldy * 2);
        run_gemm(inv, dy, dx, dw, M, N, K, 0, ldy, false);
        uint16_t *padded = from_dev(inv, dy, (size_t)M * ldy * 2);
        for (int m = 0; m < M; m++) {
            if (memcmp(padded + m * ldy, dense + (long)m * N, (size_t)N * 2) != 0)
                fail_msg("gemm %dx%d M=%d: row %d at ldy=%ld differs from the dense row", N, K, M, m, ldy);
            for (long g = N; g < ldy; g++)
                if (padded[m * ldy + g] != POISON16) fail_msg("gemm %dx%d M=%d: row %d wrote its gap", N, K, M, m);
        }
        printf("gemm %5d x %-5d M=%-5d ldy %ld: rows equal the dense output's, gaps untouched\n", N, K, M, ldy);
        free(padded); free(dense); free(hx); free(hw);
        inv->release(inv, dx); inv->release(inv, dw); inv->release(inv, dy);
    }
}

// A batch of products laid out as the absorbed MLA lays out its heads: head h's x is columns
// h*K .. of each token's row (stride_x = K < ldx), its output columns h*N .. of y's rows. Each
// head's rows equal the single product of that head's x and w (a dense copy), at several M:
// on sm_90a the batch goes through 3-D tensor maps (the head a coordinate), whose strides are
// not in the usual order; the single products through 2-D ones. Split and non-split shapes
// (K = 128: one split; 512 x 7168: splits walked in one CTA), every element written.
static void test_gemm_batched_heads(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    static const int shapes[][3] = {{512, 128, 16}, {128, 512, 16}, {512, 7168, 3}};  // N, K, heads
    static const int ms[] = {1, 7, 64, 130, 600};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int N = shapes[si][0], K = shapes[si][1], H = shapes[si][2], MMAX = 600;
        const long ldx = (long)H * K, ldy = (long)H * N;
        uint16_t *hx = rand_bf16(MMAX * ldx, 1.0f, 300 + si), *hw = rand_bf16((long)H * N * K, 1.0f, 400 + si);
        void *dx = to_dev(inv, hx, (size_t)MMAX * ldx * 2), *dw = to_dev(inv, hw, (size_t)H * N * K * 2);
        void *dy = inv->alloc(inv, (size_t)MMAX * ldy * 2, "y");
        void *dxh = inv->alloc(inv, (size_t)MMAX * K * 2, "x of one head");
        void *dyh = inv->alloc(inv, (size_t)MMAX * N * 2, "y of one head");
        uint16_t *xh = invar_malloc((size_t)MMAX * K * 2, "x of one head");
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int M = ms[mi];
            gemm_args b = {.y = dy, .x = dx, .w = dw, .M = M, .N = N, .K = K, .ldx = ldx, .ldy = ldy, .ldw = K,
                           .batch = H, .stride_x = K, .stride_y = N, .stride_w = (long)N * K};
            poison(inv, dy, (size_t)M * ldy * 2);
            inv->gemm(inv, &b);
            uint16_t *y = from_dev(inv, dy, (size_t)M * ldy * 2);
            assert_written16(y, (long)M * ldy);
            for (int h = 0; h < H; h++) {
                for (int m = 0; m < M; m++) memcpy(xh + (long)m * K, hx + m * ldx + (long)h * K, (size_t)K * 2);
                inv->upload(inv, dxh, xh, (size_t)M * K * 2);
                poison(inv, dyh, (size_t)M * N * 2);
                run_gemm(inv, dyh, dxh, (const uint16_t *)dw + (long)h * N * K, M, N, K, 0, 0, false);
                uint16_t *one = from_dev(inv, dyh, (size_t)M * N * 2);
                for (int m = 0; m < M; m++)
                    if (memcmp(y + m * ldy + (long)h * N, one + (long)m * N, (size_t)N * 2) != 0)
                        fail_msg("gemm %dx%d batch of %d at M=%d: head %d row %d differs from its single product",
                                 N, K, H, M, h, m);
                free(one);
            }
            free(y);
        }
        free(xh); free(hx); free(hw);
        inv->release(inv, dx); inv->release(inv, dw); inv->release(inv, dy);
        inv->release(inv, dxh); inv->release(inv, dyh);
    }
}

// --- mla attention: block layouts ------------------------------------------------------------

typedef struct {
    int S, T, H, L, R, BS, MB;
    int split;                           // kv_split_size (0: the set's own)
    // Q's layout on the device (0: contiguous, q_pe [T][H][R]): q_pe at element q_pe_off of each
    // head's q_pe_stride elements (the engine's q projection: a head's rope after its other dims),
    // q_lat rows q_lat_pad elements longer than H x L. The host arrays stay contiguous.
    int q_pe_stride, q_pe_off, q_lat_pad;
    int H_select;                        // mla_attention_args.H_select (0: H)
    int32_t *seq_lens, *table, *tseq, *tpos;
    uint16_t *cache, *q_lat, *q_pe;
    long slots;
} mla_case;

static mla_attention_args mla_args(const mla_case *c) {
    int mx = 0;
    for (int t = 0; t < c->T; t++)
        mx = c->seq_lens[c->tseq[t]] > mx ? c->seq_lens[c->tseq[t]] : mx;
    return (mla_attention_args){
        .q_lat = c->q_lat, .q_pe = c->q_pe, .kv_cache = c->cache, .block_table = c->table,
        .token_seq = c->tseq, .token_pos = c->tpos, .seq_lens = c->seq_lens, .T = c->T,
        .H = c->H, .L = c->L, .R = c->R, .ld_out = (long)c->H * c->L,
        .ld_q_lat = (long)c->H * c->L + c->q_lat_pad,
        .ld_q_pe = (long)c->H * (c->q_pe_stride ? c->q_pe_stride : c->R),
        .head_stride_q_pe = c->q_pe_stride ? c->q_pe_stride : c->R,
        .block_size = c->BS, .max_blocks_per_seq = c->MB, .num_seqs = c->S, .max_seq_len = mx,
        .kv_split_size = c->split, .scale = 0.07f, .H_select = c->H_select};
}

// Runs c's tokens on the device; out_host receives [T, H, L].
static void mla_run(ops_set *o, const mla_case *c, uint16_t *out_host) {
    size_t out_bytes = (size_t)c->T * c->H * c->L * 2;
    void *out = o->alloc(o, out_bytes, "out");
    void *cache = to_dev(o, c->cache, (size_t)c->slots * (c->L + c->R) * 2);
    void *table = to_dev(o, c->table, (size_t)c->S * c->MB * 4);
    void *lens = to_dev(o, c->seq_lens, (size_t)c->S * 4);
    void *seq = to_dev(o, c->tseq, (size_t)c->T * 4), *pos = to_dev(o, c->tpos, (size_t)c->T * 4);
    mla_attention_args a = mla_args(c);
    // Q in its device layout; the bytes between the rows and heads hold NaNs.
    const size_t lat_n = (size_t)c->T * a.ld_q_lat, pe_n = (size_t)c->T * a.ld_q_pe;
    uint16_t *lat_h = invar_malloc(lat_n * 2, "q_lat layout"), *pe_h = invar_malloc(pe_n * 2, "q_pe layout");
    for (size_t i = 0; i < lat_n; i++) lat_h[i] = POISON16;
    for (size_t i = 0; i < pe_n; i++) pe_h[i] = POISON16;
    for (int t = 0; t < c->T; t++) {
        memcpy(lat_h + t * a.ld_q_lat, c->q_lat + (long)t * c->H * c->L, (size_t)c->H * c->L * 2);
        for (int h = 0; h < c->H; h++)
            memcpy(pe_h + t * a.ld_q_pe + (long)h * a.head_stride_q_pe + c->q_pe_off,
                   c->q_pe + ((long)t * c->H + h) * c->R, (size_t)c->R * 2);
    }
    void *q_lat = to_dev(o, lat_h, lat_n * 2), *q_pe = to_dev(o, pe_h, pe_n * 2);
    free(lat_h);
    free(pe_h);
    a.out = out;
    a.kv_cache = cache;
    a.block_table = table;
    a.seq_lens = lens;
    a.token_seq = seq;
    a.token_pos = pos;
    a.q_lat = q_lat;
    a.q_pe = (uint16_t *)q_pe + c->q_pe_off;
    poison(o, out, out_bytes);
    o->mla_attention(o, &a);
    o->download(o, out_host, out, out_bytes);
    void *dev[] = {out, cache, table, lens, seq, pos, q_lat, q_pe};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) o->release(o, dev[i]);
}

// The same logical cache in 16-position blocks (tiles copied a row at a time, a block-table read
// per row) and in 32-position blocks (a whole tile copied as one contiguous run, its block read
// a tile ahead): the 16-head mma.sync kernel must give the same bits, on full tiles and on
// sequences' partial last tiles alike, and match the float64 oracle. (64-position blocks take
// the wgmma16 kernel on sm_90a: test_mla_attention_16_heads.)
static void test_mla_attention_block_layouts(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    int32_t lens[2] = {700, 2049};
    int32_t tseq[] = {0, 0, 1, 1, 1};
    int32_t tpos[] = {511, 699, 63, 1535, 2048};
    mla_case c[2] = {{.S = 2, .H = 16, .L = 512, .R = 64, .BS = 16, .MB = 160},
                     {.S = 2, .H = 16, .L = 512, .R = 64, .BS = 32, .MB = 80}};
    const int W = 512 + 64, T = (int)(sizeof tseq / sizeof tseq[0]);
    const long per_tok = 16 * 512;
    uint16_t *rows = rand_bf16((long)2 * 2560 * W, 1.0f, 3);  // [seq][position][W]
    uint16_t *q_lat = rand_bf16((long)T * per_tok, 1.0f, 4);
    uint16_t *q_pe = rand_bf16((long)T * 16 * 64, 1.0f, 5);
    uint16_t *out[2];
    for (int k = 0; k < 2; k++) {
        c[k].seq_lens = lens;
        c[k].T = T;
        c[k].tseq = tseq;
        c[k].tpos = tpos;
        c[k].q_lat = q_lat;
        c[k].q_pe = q_pe;
        c[k].slots = (long)c[k].S * c[k].MB * c[k].BS;
        c[k].table = invar_malloc((size_t)c[k].S * c[k].MB * 4, "table");
        int nb = c[k].S * c[k].MB;
        for (int i = 0; i < nb; i++) c[k].table[i] = (int32_t)((i * 37 + k) % nb);  // 37 prime to nb
        c[k].cache = invar_malloc((size_t)c[k].slots * W * 2, "cache");
        for (int sq = 0; sq < 2; sq++)
            for (int j = 0; j < c[k].MB * c[k].BS; j++) {
                long slot = (long)c[k].table[sq * c[k].MB + j / c[k].BS] * c[k].BS + j % c[k].BS;
                memcpy(c[k].cache + slot * W, rows + ((long)sq * 2560 + j) * W, (size_t)W * 2);
            }
        out[k] = invar_malloc((size_t)T * per_tok * 2, "out");
        mla_run(s->inv, &c[k], out[k]);
        assert_written16(out[k], (long)T * per_tok);
    }
    for (int t = 0; t < T; t++)
        if (memcmp(out[0] + t * per_tok, out[1] + t * per_tok, (size_t)per_tok * 2) != 0)
            fail_msg("mla_attention invariant: token %d (position %d) differs between 16- and "
                     "32-position blocks", t, tpos[t]);
    double *ref = invar_malloc((size_t)T * per_tok * sizeof(double), "attention oracle");
    mla_attention_args a = mla_args(&c[1]);
    f64_mla_attention(&a, ref);
    double err = f64_rel_l2_bf16(out[1], ref, (long)T * per_tok);
    printf("mla_attention block layouts: rel err vs f64 %.2e\n", err);
    assert_true(err < BF16_TOL);
    for (int k = 0; k < 2; k++) {
        free(c[k].table);
        free(c[k].cache);
        free(out[k]);
    }
    free(ref);
    free(rows);
    free(q_lat);
    free(q_pe);
}

// --- mla attention: many heads (sm_90a: mla_absorbed_h64_sm90.cu) ---------------------------

// c's block table (block i of the cache at physical block (37 i + k) mod n: a sequence's
// positions scattered over the cache) and its cache, from rows [seq][position][L + R] of
// `maxlen` positions each.
static void mla_case_fill(mla_case *c, const uint16_t *rows, int maxlen, int k) {
    const int W = c->L + c->R, nb = c->S * c->MB;
    assert_true(c->MB * c->BS <= maxlen && nb % 37 != 0);
    c->slots = (long)nb * c->BS;
    c->table = invar_malloc((size_t)nb * 4, "table");
    for (int i = 0; i < nb; i++) c->table[i] = (int32_t)((i * 37 + k) % nb);
    c->cache = invar_malloc((size_t)c->slots * W * 2, "cache");
    for (int sq = 0; sq < c->S; sq++)
        for (int j = 0; j < c->MB * c->BS; j++) {
            long slot = (long)c->table[sq * c->MB + j / c->BS] * c->BS + j % c->BS;
            memcpy(c->cache + slot * W, rows + ((long)sq * maxlen + j) * W, (size_t)W * 2);
        }
}

// For a failed accuracy check: rel err per token and per block of 16 heads x 64 columns (the
// wgmma kernel's warps hold 16 heads each; columns 0-255 are its warpgroup 0's, 256-511 its
// warpgroup 1's), so a layout mistake shows where it lives.
static void mla_print_error_map(const uint16_t *out, const double *ref, int T, int H, int L,
                                const int32_t *tpos) {
    for (int t = 0; t < T; t++) {
        printf("  token %d (position %d): rel err %.2e; by 16 heads (rows) x 64 columns:\n", t,
               tpos[t], f64_rel_l2_bf16(out + (long)t * H * L, ref + (long)t * H * L, (long)H * L));
        for (int h0 = 0; h0 < H; h0 += 16) {
            printf("   ");
            for (int c0 = 0; c0 < L; c0 += 64) {
                double num = 0.0, den = 0.0;
                for (int h = h0; h < h0 + 16 && h < H; h++)
                    for (int c = c0; c < c0 + 64 && c < L; c++) {
                        long i = ((long)t * H + h) * L + c;
                        double d = bf16_to_float(out[i]) - ref[i];
                        num += d * d;
                        den += ref[i] * ref[i];
                    }
                printf(" %8.1e", den > 0.0 ? sqrt(num / den) : sqrt(num));
            }
            printf("\n");
        }
    }
}

// Tokens [t0, t0 + n) of `all` as a case of their own, with the same cache and block table.
static mla_case mla_sub_case(const mla_case *all, int t0, int n) {
    mla_case c = *all;
    c.T = n;
    c.tseq = all->tseq + t0;
    c.tpos = all->tpos + t0;
    c.q_lat = all->q_lat + (long)t0 * all->H * all->L;
    c.q_pe = all->q_pe + (long)t0 * all->H * all->R;
    return c;
}

// The tokens idx[0 .. n) of `all` (repeats allowed) as a batch of their own; free with
// mla_gathered_free.
static mla_case mla_gather_case(const mla_case *all, const int *idx, int n) {
    mla_case c = *all;
    const long per_tok = (long)all->H * all->L, pe = (long)all->H * all->R;
    c.T = n;
    c.tseq = invar_malloc((size_t)n * 4, "gathered sequences");
    c.tpos = invar_malloc((size_t)n * 4, "gathered positions");
    c.q_lat = invar_malloc((size_t)n * per_tok * 2, "gathered q_lat");
    c.q_pe = invar_malloc((size_t)n * pe * 2, "gathered q_pe");
    for (int k = 0; k < n; k++) {
        c.tseq[k] = all->tseq[idx[k]];
        c.tpos[k] = all->tpos[idx[k]];
        memcpy(c.q_lat + k * per_tok, all->q_lat + idx[k] * per_tok, (size_t)per_tok * 2);
        memcpy(c.q_pe + k * pe, all->q_pe + idx[k] * pe, (size_t)pe * 2);
    }
    return c;
}

static void mla_gathered_free(mla_case *c) {
    free(c->tseq);
    free(c->tpos);
    free(c->q_lat);
    free(c->q_pe);
}

// Runs the tokens idx[0 .. n) of `all` as their own batch and requires each row to equal its
// row in `all_out` (the output of `all`) bit for bit.
static void mla_check_gathered(sets *s, const mla_case *all, const uint16_t *all_out, const int *idx, int n,
                               const char *what) {
    const long per_tok = (long)all->H * all->L;
    mla_case sub = mla_gather_case(all, idx, n);
    uint16_t *part = invar_malloc((size_t)n * per_tok * 2, "gathered out");
    mla_run(s->inv, &sub, part);
    assert_written16(part, (long)n * per_tok);
    for (int k = 0; k < n; k++)
        if (memcmp(part + k * per_tok, all_out + idx[k] * per_tok, (size_t)per_tok * 2) != 0)
            fail_msg("mla_attention H=%d: token %d (position %d) differs among %s", all->H, idx[k],
                     all->tpos[idx[k]], what);
    free(part);
    mla_gathered_free(&sub);
}

// c at its own split size (c->split): every row written and close to the float64 oracle `ref`,
// and token `alone` by itself equal to its row in the batch. out receives c's rows; part is
// room for one token's.
static void mla_check_split_size(sets *s, const mla_case *c, const double *ref, uint16_t *out, uint16_t *part,
                                 int alone) {
    const long per_tok = (long)c->H * c->L;
    mla_run(s->inv, c, out);
    assert_written16(out, (long)c->T * per_tok);
    const double err = f64_rel_l2_bf16(out, ref, (long)c->T * per_tok);
    printf("mla_attention H=%d, %d-position splits: rel err vs f64 %.2e\n", c->H, c->split, err);
    assert_true(err < BF16_TOL);
    mla_case one = mla_sub_case(c, alone, 1);
    mla_run(s->inv, &one, part);
    if (memcmp(part, out + alone * per_tok, (size_t)per_tok * 2) != 0)
        fail_msg("mla_attention H=%d, %d-position splits: token %d alone differs from the batch", c->H, c->split,
                 alone);
}

// An sm_90a device whose driver encodes tensor maps (TMA in the GEMM's plan): what the wgmma MLA
// kernels need.
static bool wgmma_mla_device(sets *s) {
    char plan[64] = "";
#ifdef INVAR_CUDA
    gemm_args g = {.M = 1, .N = 1536, .K = 7168};
    inv_cuda_gemm_plan_describe(s->inv, &g, plan, (int)sizeof plan);
#else
    (void)s;
#endif
    return strstr(plan, "tma") != NULL;
}

// The MLA kernel the invariant set takes for probe's shape ("?" without CUDA); on a device with
// the wgmma kernels it must be `want`.
static const char *mla_kernel_taken(sets *s, const mla_attention_args *probe, const char *want) {
    const char *kernel = "?";
#ifdef INVAR_CUDA
    kernel = inv_cuda_mla_attention_kernel(s->inv, probe);
    if (wgmma_mla_device(s) && strcmp(kernel, want) != 0)
        fail_msg("mla_attention H=%d: an sm_90a device with TMA took the %s kernel, not %s", probe->H, kernel, want);
#else
    (void)s;
    (void)probe;
    (void)want;
#endif
    return kernel;
}

// H heads, L = 512, R = 64, 64-position blocks: on sm_90a a wgmma kernel (`want`: "wgmma", 64
// heads a CTA, or "wgmma16", 16 heads a work unit). Sequences shorter than a tile, of lengths no
// multiple of 64, of more than two 512-position splits; decode tokens and several tokens of one
// sequence at different positions (prefill), at 0, tile edges (63, 64) and split edges (511,
// 512, 1023, 1535), then `extra` tokens at random positions (more work units than SMs: a persistent
// kernel walks several, skipping splits past their token). The cache past each sequence's end
// holds NaNs: a kernel that let 0 * NaN into P·V would show it. Every row: written, equal
// bitwise alone, inside the batch, in a batch in reverse order and with other sequences; close
// to the float64 oracle. Once its split units outnumber the SMs (and their count is even),
// the 16-head kernel takes split pairs as units, folds each pair itself and merges the tokens
// of up to two splits: such pairs and tokens, folded by it (the batch: 4 splits) and by the
// merge kernel (a token alone), must agree; among the named tokens, n = 3 (an odd split alone)
// and 4. Then other split sizes (192: splits off the 512 grid; 64: more splits than the merge
// kernel loads at once; both 9 and 25 in the grid, single splits) and 16-position blocks (the
// mma.sync kernel: other bits, the same tolerance).
static void mla_wgmma_rows_check(sets *s, int H, const char *want, int extra) {
    enum { S = 4, L = 512, R = 64, W = L + R, MAXLEN = 1664, NAMED = 11 };
    const int T = NAMED + extra;
    int32_t lens[S] = {37, 700, 1100, 1600};
    const int32_t named_seq[NAMED] = {0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 1};
    const int32_t named_pos[NAMED] = {0, 36, 511, 699, 63, 64, 1023, 1099, 1535, 1599, 512};
    int32_t *tseq = invar_malloc((size_t)T * 4, "token sequences"), *tpos = invar_malloc((size_t)T * 4, "positions");
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)H;
    for (int t = 0; t < T; t++) {
        if (t < NAMED) {
            tseq[t] = named_seq[t];
            tpos[t] = named_pos[t];
        } else {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tseq[t] = (int32_t)((rng >> 33) % S);
            tpos[t] = (int32_t)((rng >> 13) % (uint64_t)lens[tseq[t]]);
        }
    }
    const long per_tok = (long)H * L;
    uint16_t *rows = rand_bf16((long)S * MAXLEN * W, 1.0f, 21);  // [seq][position][W]
    for (int sq = 0; sq < S; sq++)
        for (long i = (long)sq * MAXLEN * W + (long)lens[sq] * W; i < (long)(sq + 1) * MAXLEN * W; i++)
            rows[i] = POISON16;  // past the sequence's end: NaN
    uint16_t *q_lat = rand_bf16((long)T * per_tok, 1.0f, 22);
    uint16_t *q_pe = rand_bf16((long)T * H * R, 1.0f, 23);
    mla_case c = {.S = S, .T = T, .H = H, .L = L, .R = R, .BS = 64, .MB = MAXLEN / 64,
                  .seq_lens = lens, .tseq = tseq, .tpos = tpos, .q_lat = q_lat, .q_pe = q_pe};
    mla_case_fill(&c, rows, MAXLEN, 1);
    mla_attention_args probe = mla_args(&c);
    const char *kernel = mla_kernel_taken(s, &probe, want);

    uint16_t *out = invar_malloc((size_t)T * per_tok * 2, "out");
    uint16_t *part = invar_malloc((size_t)T * per_tok * 2, "out part");
    mla_run(s->inv, &c, out);
    assert_written16(out, (long)T * per_tok);
    double *ref = invar_malloc((size_t)T * per_tok * sizeof(double), "attention oracle");
    f64_mla_attention(&probe, ref);  // host pointers: the oracle reads the same case
    double err = f64_rel_l2_bf16(out, ref, (long)T * per_tok);
    printf("mla_attention H=%d, %d tokens (%s kernel): rel err vs f64 %.2e (tol %.0e)\n", H, T, kernel, err, BF16_TOL);
    if (!(err < BF16_TOL)) mla_print_error_map(out, ref, NAMED, H, L, tpos);
    assert_true(err < BF16_TOL);

#ifdef INVAR_CUDA
    if (strcmp(kernel, "wgmma16") == 0) {  // the two folds of a split pair this compares do run
        mla_case one = mla_sub_case(&c, 9, 1);  // position 1599: 4 splits
        mla_attention_args po = mla_args(&one);
        if (!inv_cuda_mla_wgmma16_pairs(s->inv, &probe) || inv_cuda_mla_wgmma16_pairs(s->inv, &po))
            fail_msg("mla_attention H=%d: the batch (%d tokens) must take split pairs as units, a token alone not",
                     H, T);
    }
#endif
    for (int t = 0; t < T; t += t < NAMED ? 1 : 17) {  // each named token alone, and a sample of the rest
        mla_case one = mla_sub_case(&c, t, 1);
        mla_run(s->inv, &one, part);
        assert_written16(part, per_tok);
        if (memcmp(part, out + t * per_tok, (size_t)per_tok * 2) != 0)
            fail_msg("mla_attention H=%d: token %d (position %d) alone differs from the batch", H, t, tpos[t]);
    }
    {  // sequence 2's four tokens together (a prefill chunk), without the other sequences
        mla_case chunk = mla_sub_case(&c, 4, 4);
        mla_run(s->inv, &chunk, part);
        if (memcmp(part, out + 4 * per_tok, (size_t)4 * per_tok * 2) != 0)
            fail_msg("mla_attention H=%d: sequence 2's tokens differ without the other sequences", H);
    }
    // The batch in reverse order: every token at another unit and CTA.
    enum { SHORT_REPS = 8 };  // below: the short sequences' tokens, each this many times
    int *idx = invar_malloc((size_t)SHORT_REPS * T * sizeof(int), "token order"), n_short = 0;
    for (int t = 0; t < T; t++) idx[t] = T - 1 - t;
    mla_check_gathered(s, &c, out, idx, T, "the batch in reverse order");

    // The tokens of sequences 0 and 1 (at most 2 splits each) as their own batch, every one
    // eight times: more split units than SMs, so the 16-head kernel takes whole tokens and merges
    // the two-split ones itself (as it does in the full batch's pair units), and at 128 heads
    // units for over half the SMs, so the 64-head kernel's CTAs merge them (two in a cluster),
    // which the merge kernel merged in the full batch (4 splits); the merge kernel merged each
    // token alone (above).
    for (int rep = 0; rep < SHORT_REPS; rep++)
        for (int t = 0; t < T; t++)
            if (tseq[t] <= 1) idx[n_short++] = t;
#ifdef INVAR_CUDA
    if (strcmp(kernel, "wgmma") == 0) {  // the two merges this compares did run
        mla_case short_batch = mla_gather_case(&c, idx, n_short);
        mla_attention_args pa = mla_args(&short_batch);
        if (inv_cuda_mla_wgmma_merges(s->inv, &probe) || !inv_cuda_mla_wgmma_merges(s->inv, &pa))
            fail_msg("mla_attention H=%d: the full batch must take the merge kernel and the short tokens' batch "
                     "(%d tokens) the CTAs' own merge",
                     H, n_short);
        mla_gathered_free(&short_batch);
    }
#endif
    mla_check_gathered(s, &c, out, idx, n_short, "the short sequences' tokens");
    {  // A NaN in one value of head 5's query of named token 3 (sequence 1 at 699, two splits):
       // that head's row comes out NaN, its neighbour's does not, and the short tokens' batch
       // and the token alone match the full batch bit for bit. At 128 heads the full batch is
       // the merge kernel's and the short batch the CTAs' merge, whose threads holding that row
       // round a second time, with the NaN fix-ups; at 16 heads the two batches are the split
       // kernel's whole tokens and the token alone the merge kernel's.
       // The NaNs a product makes are the hardware's canonical one, which the converter alone
       // rounds as the fix-ups do: so this checks the bits of both roundings, not which one ran
       // (the mutant cuda-mla-wgmma-nan-pass-rows-swapped shows that the second one runs).
        const long at = 3 * per_tok + 5L * L + 7;
        const uint16_t kept = q_lat[at];
        q_lat[at] = 0x7fc1;
        uint16_t *out_nan = invar_malloc((size_t)T * per_tok * 2, "out with a NaN query");
        mla_run(s->inv, &c, out_nan);
        assert_written16(out_nan, (long)T * per_tok);
        long nan_5 = 0, nan_4 = 0;
        for (int j = 0; j < L; j++) {
            nan_5 += (out_nan[3 * per_tok + 5L * L + j] & 0x7fffu) > 0x7f80u;
            nan_4 += (out_nan[3 * per_tok + 4L * L + j] & 0x7fffu) > 0x7f80u;
        }
        if (nan_5 != L || nan_4 != 0)
            fail_msg("mla_attention H=%d: a NaN in head 5's query left %ld of its %d outputs NaN and %ld of head 4's",
                     H, nan_5, L, nan_4);
        mla_check_gathered(s, &c, out_nan, idx, n_short, "the short sequences' tokens with a NaN query");
        const int three = 3;
        mla_check_gathered(s, &c, out_nan, &three, 1, "named token 3 alone with a NaN query");
        q_lat[at] = kept;
        free(out_nan);
    }

    // Splits of 192 positions (a backend's kv_split_size): split edges off the 512 grid.
    mla_case c192 = c;
    c192.split = 192;
    mla_check_split_size(s, &c192, ref, out, part, 8);
    {  // whole tokens at 192: the tokens of sequences 0 and 1 before position 384, every one
       // twice, with sequence 1 cut to 384 positions (2 splits at the most)
        int32_t short_lens[S];
        memcpy(short_lens, lens, sizeof short_lens);
        short_lens[1] = 384;
        mla_case c192s = c192;
        c192s.seq_lens = short_lens;
        n_short = 0;
        for (int rep = 0; rep < 2; rep++)
            for (int t = 0; t < T; t++)
                if (tseq[t] <= 1 && tpos[t] < 384) idx[n_short++] = t;
        mla_check_gathered(s, &c192s, out, idx, n_short, "the short sequences' tokens at 192-position splits");
    }

    // Splits of 64 positions: up to 25 a token, more than the merge kernel loads at once.
    mla_case c64 = c;
    c64.split = 64;
    mla_check_split_size(s, &c64, ref, out, part, 9);
    free(idx);

    // 16-position blocks: not a multiple of the wgmma tile, so the 16-head mma.sync kernel (a
    // shape choice); its own bits, the same accuracy.
    mla_case c16 = c;
    c16.BS = 16;
    c16.MB = MAXLEN / 16;
    mla_case_fill(&c16, rows, MAXLEN, 5);
    const char *kernel16 = "?";
#ifdef INVAR_CUDA
    mla_attention_args probe16 = mla_args(&c16);
    kernel16 = inv_cuda_mla_attention_kernel(s->inv, &probe16);
    assert_string_equal(kernel16, "mma.sync");
#endif
    mla_run(s->inv, &c16, out);
    assert_written16(out, (long)T * per_tok);
    err = f64_rel_l2_bf16(out, ref, (long)T * per_tok);
    printf("mla_attention H=%d, 16-position blocks (%s kernel): rel err vs f64 %.2e\n", H, kernel16, err);
    assert_true(err < BF16_TOL);

    free(c.table);
    free(c.cache);
    free(c16.table);
    free(c16.cache);
    free(out);
    free(part);
    free(ref);
    free(rows);
    free(q_lat);
    free(q_pe);
    free(tseq);
    free(tpos);
}

// 128 heads (DeepSeek-V3): mla_absorbed_h64_sm90.cu, 64 heads a CTA.
static void test_mla_attention_many_heads(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    mla_wgmma_rows_check(s, 128, "wgmma", 0);
}

// Q as the engine lays it out (q_pe inside each head's 192 dims of the q projection, after its
// 128 others; q_lat rows 8 elements apart from the next: the tensor maps' strides) and with
// q_lat rows an odd number of elements long (the kernels' value-by-value Q copy): every row
// bit-equal to the contiguous layout's, at 128 heads (mla_absorbed_h64_sm90.cu) and 16
// (mla_absorbed_h16_sm90.cu).
static void test_mla_attention_q_layouts(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    enum { S = 2, L = 512, R = 64, W = L + R, MAXLEN = 1024, T = 6 };
    int32_t lens[S] = {700, 1024};
    int32_t tseq[T] = {0, 0, 1, 1, 1, 1}, tpos[T] = {63, 699, 0, 511, 512, 1023};
    uint16_t *rows = rand_bf16((long)S * MAXLEN * W, 1.0f, 31);
    const int heads[] = {128, 16};
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++) {
        const int H = heads[hi];
        const long per_tok = (long)H * L;
        uint16_t *q_lat = rand_bf16((long)T * per_tok, 1.0f, 32), *q_pe = rand_bf16((long)T * H * R, 1.0f, 33);
        mla_case c = {.S = S, .T = T, .H = H, .L = L, .R = R, .BS = 64, .MB = MAXLEN / 64,
                      .seq_lens = lens, .tseq = tseq, .tpos = tpos, .q_lat = q_lat, .q_pe = q_pe};
        mla_case_fill(&c, rows, MAXLEN, 2);
        mla_attention_args probe = mla_args(&c);
        mla_kernel_taken(s, &probe, H == 128 ? "wgmma" : "wgmma16");
        uint16_t *out = invar_malloc((size_t)T * per_tok * 2, "out");
        uint16_t *other = invar_malloc((size_t)T * per_tok * 2, "out, other Q layout");
        mla_run(s->inv, &c, out);
        assert_written16(out, (long)T * per_tok);
        const struct { int pe_stride, pe_off, lat_pad; const char *what; } layouts[] = {
            {192, 128, 8, "q_pe inside 192-dim heads, q_lat rows padded by 8"},
            {0, 0, 3, "q_lat rows of an odd length"},
        };
        for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
            mla_case v = c;
            v.q_pe_stride = layouts[k].pe_stride;
            v.q_pe_off = layouts[k].pe_off;
            v.q_lat_pad = layouts[k].lat_pad;
            mla_run(s->inv, &v, other);
            assert_written16(other, (long)T * per_tok);
            for (int t = 0; t < T; t++)
                if (memcmp(other + t * per_tok, out + t * per_tok, (size_t)per_tok * 2) != 0)
                    fail_msg("mla_attention H=%d, %s: token %d (position %d) differs from contiguous Q", H,
                             layouts[k].what, t, tpos[t]);
        }
        free(out);
        free(other);
        free(c.table);
        free(c.cache);
        free(q_lat);
        free(q_pe);
    }
    free(rows);
}

// 16 heads (DeepSeek-V2-Lite) with 170 more tokens (800+ work units: every CTA of the persistent
// kernel walks several), 48 (three head groups a token) with 60 more, and fewer heads than a unit
// (2 and 5, padded to 16): mla_absorbed_h16_sm90.cu.
static void test_mla_attention_16_heads(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    mla_wgmma_rows_check(s, 16, "wgmma16", 170);
    mla_wgmma_rows_check(s, 48, "wgmma16", 60);  // 60 more: whole tokens of 3 head groups too
    mla_wgmma_rows_check(s, 2, "wgmma16", 170);  // one unit padded: a rank's heads at T = 8
    mla_wgmma_rows_check(s, 5, "wgmma16", 60);   // padded, a count dividing nothing
}

// 16 heads over more cache than L2 holds, with few partials: one decode token in each of S
// sequences of 1100-1600 positions (3 or 4 splits a token), S enough for 1.2x the device's L2
// and at least 40 (40 on an H200), so that the 16-head kernel loads the KV tiles with L2's evict_first policy,
// which a token alone (its own sequence's cache only) does not. A cache hint changes no bit:
// every row close to the float64 oracle and equal, bit for bit, to the token run alone.
static void test_mla_attention_16_heads_streamed(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    enum { H = 16, L = 512, R = 64, W = L + R, MAXLEN = 1664 };
    const double seq_bytes = (double)MAXLEN * W * 2;
    int S = 40;
#ifdef INVAR_CUDA
    const int for_l2 = (int)ceil(1.2 * (double)inv_cuda_l2_bytes(s->inv) / seq_bytes);
    if (for_l2 > S) S = for_l2;
#endif
    if (S % 37 == 0) S++;  // mla_case_fill permutes the S x 26 blocks with a stride of 37
    int32_t *lens = invar_malloc((size_t)S * 4, "lengths"), *tseq = invar_malloc((size_t)S * 4, "sequences");
    int32_t *tpos = invar_malloc((size_t)S * 4, "positions");
    for (int q = 0; q < S; q++) {
        lens[q] = 1100 + (int32_t)(invar_mix64(0x5eedu + (uint64_t)q) % 501u);
        tseq[q] = q;
        tpos[q] = lens[q] - 1;
    }
    const long per_tok = (long)H * L;
    uint16_t *rows = rand_bf16((long)S * MAXLEN * W, 1.0f, 31);
    uint16_t *q_lat = rand_bf16((long)S * per_tok, 1.0f, 32);
    uint16_t *q_pe = rand_bf16((long)S * H * R, 1.0f, 33);
    mla_case c = {.S = S, .T = S, .H = H, .L = L, .R = R, .BS = 64, .MB = MAXLEN / 64,
                  .seq_lens = lens, .tseq = tseq, .tpos = tpos, .q_lat = q_lat, .q_pe = q_pe};
    mla_case_fill(&c, rows, MAXLEN, 3);
    mla_attention_args probe = mla_args(&c);
    const char *kernel = mla_kernel_taken(s, &probe, "wgmma16");
    uint16_t *out = invar_malloc((size_t)S * per_tok * 2, "out");
    uint16_t *part = invar_malloc((size_t)per_tok * 2, "out alone");
    mla_run(s->inv, &c, out);
    assert_written16(out, (long)S * per_tok);
    double *ref = invar_malloc((size_t)S * per_tok * sizeof(double), "attention oracle");
    f64_mla_attention(&probe, ref);
    const double err = f64_rel_l2_bf16(out, ref, (long)S * per_tok);
    printf("mla_attention H=16, %d sequences of %.0f MB of cache (%s kernel): rel err vs f64 %.2e\n", S,
           S * seq_bytes / 1048576.0, kernel, err);
    assert_true(err < BF16_TOL);
    for (int t = 0; t < S; t += 7) {
        mla_case one = mla_sub_case(&c, t, 1);
        mla_run(s->inv, &one, part);
        if (memcmp(part, out + t * per_tok, (size_t)per_tok * 2) != 0)
            fail_msg("mla_attention H=16: token %d (position %d) alone differs from the streamed batch", t, tpos[t]);
    }
    free(c.table);
    free(c.cache);
    free(out);
    free(part);
    free(ref);
    free(rows);
    free(q_lat);
    free(q_pe);
    free(lens);
    free(tseq);
    free(tpos);
}

// --- kv_cache_write: padding slots and strided sources ---------------------------------------

// Slot -1 is a padding token: nothing written. c_kv and k_pe are read with their own strides.
static void test_kv_cache_write_padding(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    enum { T = 37, L = 64, R = 16, LD_C = 100, LD_K = 30, SLOTS = 2 * T };
    int32_t slots[T];
    for (int t = 0; t < T; t++) slots[t] = t % 5 == 4 ? -1 : 2 * t;
    uint16_t *ckv = rand_bf16((long)T * LD_C, 1.0f, 6);
    uint16_t *kpe = rand_bf16((long)T * LD_K, 1.0f, 7);
    void *dckv = to_dev(inv, ckv, (size_t)T * LD_C * 2);
    void *dkpe = to_dev(inv, kpe, (size_t)T * LD_K * 2);
    void *ds = to_dev(inv, slots, sizeof slots);
    void *dcache = inv->alloc(inv, (size_t)SLOTS * (L + R) * 2, "cache");
    poison(inv, dcache, (size_t)SLOTS * (L + R) * 2);
    inv->kv_cache_write(inv, dcache, dckv, LD_C, dkpe, LD_K, ds, T, L, R);
    uint16_t *cache = from_dev(inv, dcache, (size_t)SLOTS * (L + R) * 2);
    bool used[SLOTS] = {0};
    for (int t = 0; t < T; t++) {
        if (slots[t] < 0) continue;
        used[slots[t]] = true;
        assert_memory_equal(cache + slots[t] * (L + R), ckv + t * LD_C, (size_t)L * 2);
        assert_memory_equal(cache + slots[t] * (L + R) + L, kpe + t * LD_K, (size_t)R * 2);
    }
    for (int sl = 0; sl < SLOTS; sl++)
        for (int i = 0; i < L + R && !used[sl]; i++)
            if (cache[sl * (L + R) + i] != POISON16) fail_msg("slot %d written by no token", sl);
    free(ckv); free(kpe); free(cache);
    inv->release(inv, dckv); inv->release(inv, dkpe); inv->release(inv, ds);
    inv->release(inv, dcache);
}

// --- TP-size invariance's fp32 forms ---------------------------------------------------------

#define POISON32 0xFFFFFFFFu             // a NaN fp32: no op may leave it behind

static float *rand_f32(long n, float scale, uint64_t seed) {
    float *h = invar_malloc((size_t)n * 4, "test data");
    for (long i = 0; i < n; i++) h[i] = scale * (2.0f * invar_uniform(invar_mix64(seed + (uint64_t)i)) - 1.0f);
    return h;
}

static void assert_written32(const float *h, long n, const char *what) {
    for (long i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &h[i], 4);
        if (b == POISON32) fail_msg("%s: element %ld was not written", what, i);
    }
}

// moe_experts' out_f32 holds the sums its bf16 form rounds (bf16(out_f32) == out, bit for bit);
// moe_combine's fp32 form, add_f32 and round_to_bf16 give the CPU invariant set's bits (the same
// order from the first product, no FMA contraction on either side).
static void test_tp_size_fp32_forms(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv, *cpu = kernel_set_create("invariant", "cpu", 1);
    assert_non_null(cpu);
    assert_true(inv->tp_size_invariant && s->ref->tp_size_invariant);
    enum { T = 37, K = 4, E = 8, D = 256, I = 192 };
    const long Tk = (long)T * K;
    int32_t ids[T * K];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) ids[t * K + j] = (int)((t * 3 + j * 5 + (t % 7 == 0 ? 2 : 0)) % E);
    for (int t = 0; t < T; t++)  // a token picks an expert once
        for (int j = 0; j < K; j++)
            for (int i = 0; i < j; i++) assert_int_not_equal(ids[t * K + j], ids[t * K + i]);
    uint16_t *x = rand_bf16((long)T * D, 1.0f, 31), *wgu = rand_bf16((long)E * 2 * I * D, 0.08f, 32),
             *wd = rand_bf16((long)E * D * I, 0.08f, 33);
    void *dx = to_dev(inv, x, (size_t)T * D * 2), *dids = to_dev(inv, ids, sizeof ids),
         *dwgu = to_dev(inv, wgu, (size_t)E * 2 * I * D * 2), *dwd = to_dev(inv, wd, (size_t)E * D * I * 2);
    void *dout = inv->alloc(inv, (size_t)Tk * D * 2, "experts out"), *dout32 = inv->alloc(inv, (size_t)Tk * D * 4, "experts out f32");
    poison(inv, dout, (size_t)Tk * D * 2);
    poison(inv, dout32, (size_t)Tk * D * 4);
    moe_experts_args ea = {.out = dout, .x = dx, .topk_ids = dids, .w_gate_up = dwgu, .w_down = dwd,
                           .T = T, .k = K, .E = E, .D = D, .I = I};
    inv->moe_experts(inv, &ea);
    ea.out = NULL;
    ea.out_f32 = dout32;
    inv->moe_experts(inv, &ea);
    uint16_t *out = from_dev(inv, dout, (size_t)Tk * D * 2);
    float *out32 = from_dev(inv, dout32, (size_t)Tk * D * 4);
    assert_written16(out, Tk * D);
    assert_written32(out32, Tk * D, "moe_experts out_f32");
    for (long i = 0; i < Tk * D; i++)
        if (float_to_bf16(out32[i]) != out[i])
            fail_msg("moe_experts: row %ld col %ld: bf16(out_f32) %04x, the bf16 form %04x", i / D, i % D,
                     float_to_bf16(out32[i]), out[i]);

    // moe_combine's fp32 form over those rows, against the CPU set's.
    float w[T * K];
    for (int i = 0; i < T * K; i++) w[i] = 0.05f + 0.9f * invar_uniform(invar_mix64(77u + (uint64_t)i));
    void *dw = to_dev(inv, w, sizeof w), *dcomb = inv->alloc(inv, (size_t)T * D * 4, "combine f32");
    poison(inv, dcomb, (size_t)T * D * 4);
    moe_combine_args ca = {.topk_weights = dw, .topk_ids = dids, .T = T, .k = K, .D = D, .E = E,
                           .expert_out_f32 = dout32, .out_f32 = dcomb};
    inv->moe_combine(inv, &ca);
    float *comb = from_dev(inv, dcomb, (size_t)T * D * 4), *want = invar_malloc((size_t)T * D * 4, "cpu combine");
    moe_combine_args cc = ca;
    cc.topk_weights = w;
    cc.topk_ids = ids;
    cc.expert_out_f32 = out32;
    cc.out_f32 = want;
    cpu->moe_combine(cpu, &cc);
    assert_written32(comb, (long)T * D, "moe_combine out_f32");
    if (memcmp(comb, want, (size_t)T * D * 4) != 0) fail_msg("moe_combine fp32 form: not the CPU set's bits");

    // add_f32 and round_to_bf16, elementwise, against the CPU set's.
    const long n = 100003;
    float *a = rand_f32(n, 3.0f, 41), *b = rand_f32(n, 1e-3f, 42);
    void *da = to_dev(inv, a, (size_t)n * 4), *db = to_dev(inv, b, (size_t)n * 4);
    void *dr = inv->alloc(inv, (size_t)n * 2, "rounded");
    poison(inv, dr, (size_t)n * 2);
    inv->add_f32(inv, da, db, n);
    inv->round_to_bf16(inv, dr, da, n);
    float *sum = from_dev(inv, da, (size_t)n * 4);
    uint16_t *r16 = from_dev(inv, dr, (size_t)n * 2), *want16 = invar_malloc((size_t)n * 2, "cpu rounded");
    cpu->add_f32(cpu, a, b, n);
    cpu->round_to_bf16(cpu, want16, a, n);
    assert_memory_equal(sum, a, (size_t)n * 4);
    assert_written16(r16, n);
    assert_memory_equal(r16, want16, (size_t)n * 2);

    // sum_slices_f32: the tree over 8 slices of n / 8 values (the sums above), against the CPU set.
    const long len = n / 8;
    void *dp = to_dev(inv, a, (size_t)n * 4);
    inv->sum_slices_f32(inv, dp, 8, len);
    cpu->sum_slices_f32(cpu, a, 8, len);
    float *tree = from_dev(inv, dp, (size_t)len * 4);
    assert_memory_equal(tree, a, (size_t)len * 4);
    free(tree);
    inv->release(inv, dp);

    free(x); free(wgu); free(wd); free(out); free(out32); free(comb); free(want);
    free(a); free(b); free(sum); free(r16); free(want16);
    void *bufs[] = {dx, dids, dwgu, dwd, dout, dout32, dw, dcomb, da, db, dr};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) inv->release(inv, bufs[i]);
    cpu->destroy(cpu);
}

// TP-size invariance's slices in one call: moe_experts and moe_combine with S slices (the
// slices' experts one after another) give each slice's rows the bits of a call of that slice
// alone, every output written; and the slices' outputs differ, so a call that computed one
// slice for all would fail here. ids: T x K expert ids, K distinct a token.
static void moe_slices_one_call(ops_set *inv, int S, int T, int K, int E, int D, const int32_t *ids) {
    enum { I = 64 };
    const long Tk = (long)T * K, gu_n = (long)S * E * 2 * I * D, dn_n = (long)S * E * D * I;
    float *w = malloc((size_t)Tk * sizeof *w);
    for (long i = 0; i < Tk; i++) w[i] = 0.05f + 0.9f * invar_uniform(invar_mix64(91u + (uint64_t)i));
    uint16_t *x = rand_bf16((long)T * D, 1.0f, 61), *wgu = rand_bf16(gu_n, 0.08f, 62),
             *wd = rand_bf16(dn_n, 0.08f, 63);
    void *dx = to_dev(inv, x, (size_t)T * D * 2), *dids = to_dev(inv, ids, (size_t)Tk * 4),
         *dw = to_dev(inv, w, (size_t)Tk * 4), *dwgu = to_dev(inv, wgu, (size_t)gu_n * 2),
         *dwd = to_dev(inv, wd, (size_t)dn_n * 2);
    const size_t rows_b = (size_t)S * Tk * D * 4, sums_b = (size_t)S * T * D * 4;
    void *one = inv->alloc(inv, rows_b, "slices: one call"), *each = inv->alloc(inv, rows_b, "slices: each");
    void *one_sum = inv->alloc(inv, sums_b, "slices: one combine"), *each_sum = inv->alloc(inv, sums_b, "slices: each combine");
    poison(inv, one, rows_b);
    poison(inv, each, rows_b);
    poison(inv, one_sum, sums_b);
    poison(inv, each_sum, sums_b);
    moe_experts_args ea = {.x = dx, .topk_ids = dids, .w_gate_up = dwgu, .w_down = dwd, .T = T, .k = K,
                           .E = E, .D = D, .I = I, .out_f32 = one, .slices = S};
    moe_combine_args ca = {.topk_weights = dw, .topk_ids = dids, .T = T, .k = K, .D = D, .E = E,
                           .expert_out_f32 = one, .out_f32 = one_sum, .slices = S};
    inv->moe_experts(inv, &ea);
    inv->moe_combine(inv, &ca);
    for (int sl = 0; sl < S; sl++) {
        moe_experts_args b = ea;
        b.slices = 0;
        b.w_gate_up = (const uint16_t *)dwgu + (size_t)sl * E * 2 * I * D;
        b.w_down = (const uint16_t *)dwd + (size_t)sl * E * D * I;
        b.out_f32 = (float *)each + (size_t)sl * Tk * D;
        inv->moe_experts(inv, &b);
        moe_combine_args c = ca;
        c.slices = 0;
        c.expert_out_f32 = b.out_f32;
        c.out_f32 = (float *)each_sum + (size_t)sl * T * D;
        inv->moe_combine(inv, &c);
    }
    float *h_one = from_dev(inv, one, rows_b), *h_each = from_dev(inv, each, rows_b);
    float *h_one_sum = from_dev(inv, one_sum, sums_b), *h_each_sum = from_dev(inv, each_sum, sums_b);
    assert_written32(h_one, S * Tk * D, "moe_experts slices out_f32");
    assert_written32(h_each, S * Tk * D, "moe_experts slice alone out_f32");
    assert_written32(h_one_sum, (long)S * T * D, "moe_combine slices out_f32");
    for (long i = 0; i < S * Tk * D; i++)
        if (memcmp(&h_one[i], &h_each[i], 4) != 0)
            fail_msg("moe_experts slices (S=%d T=%d E=%d): slice %ld row %ld col %ld: %a in one call, %a alone", S, T,
                     E, i / (Tk * D), i / D % Tk, i % D, (double)h_one[i], (double)h_each[i]);
    for (long i = 0; i < (long)S * T * D; i++)
        if (memcmp(&h_one_sum[i], &h_each_sum[i], 4) != 0)
            fail_msg("moe_combine slices (S=%d T=%d E=%d): slice %ld token %ld col %ld: %a in one call, %a alone", S, T,
                     E, i / ((long)T * D), i / D % T, i % D, (double)h_one_sum[i], (double)h_each_sum[i]);
    for (int sl = 1; sl < S; sl++)  // the control: every slice's sums its own
        if (memcmp(h_one_sum, h_one_sum + (size_t)sl * T * D, (size_t)T * D * 4) == 0)
            fail_msg("moe slices: slice %d's sums equal slice 0's: the test could not tell slices apart", sl);
    free(w); free(x); free(wgu); free(wd); free(h_one); free(h_each); free(h_one_sum); free(h_each_sum);
    void *bufs[] = {dx, dids, dw, dwgu, dwd, one, each, one_sum, each_sum};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) inv->release(inv, bufs[i]);
}

// Shapes: every expert holding rows (37 tokens over 8 experts); a decode step's few (2 tokens
// over 64 experts, sharing one: 5 experts with rows of 256 groups), where the grouped GEMMs'
// grid runs only the groups holding rows and must still reach every slice's, and at one slice
// its -1 padding past them; and 8 slices at D = 2048, whose down product takes more CTAs than
// one wave.
static void test_moe_slices_one_call(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    enum { T = 37, K = 4, E = 8 };
    int32_t ids[T * K];
    for (int t = 0; t < T; t++)  // K distinct experts a token
        for (int j = 0; j < K; j++) ids[t * K + j] = (int)((t * 3 + j * 2 + (t % 5 == 0)) % E);
    moe_slices_one_call(s->inv, 4, T, K, E, 256, ids);
    const int32_t sparse[] = {41, 3, 17, 17, 60, 9};
    moe_slices_one_call(s->inv, 4, 2, 3, 64, 256, sparse);
    moe_slices_one_call(s->inv, 1, 2, 3, 64, 256, sparse);
    moe_slices_one_call(s->inv, 8, 5, K, E, 2048, ids);  // 8 slices x 8 experts, 16 column tiles
}

// More experts than moe_lists' block has threads (1,100: two chunks, the second's starts and
// places carried from the first): every row equals, bit for bit, the row of a call over only the
// experts routed to, renumbered 0..5 (a grouped row's bits depend on its expert's weights and its
// own input only), on both sides of expert 1,024 and with one expert shared by two tokens.
static void test_moe_lists_past_one_chunk(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    enum { T = 4, K = 3, E = 1100, D = 256, I = 64, USED = 6 };
    const int32_t ids[T * K] = {1099, 3, 1030, 1024, 1099, 500, 1023, 1030, 3, 500, 1024, 1023};
    const int32_t experts[USED] = {3, 500, 1023, 1024, 1030, 1099};  // ascending: renumbered 0..5
    int32_t compact[T * K];
    for (int i = 0; i < T * K; i++)
        for (int u = 0; u < USED; u++)
            if (experts[u] == ids[i]) compact[i] = u;
    const long gu_e = 2L * I * D, dn_e = (long)D * I, Tk = (long)T * K;
    uint16_t *x = rand_bf16((long)T * D, 1.0f, 71), *wgu = rand_bf16(E * gu_e, 0.08f, 72), *wd = rand_bf16(E * dn_e, 0.08f, 73);
    uint16_t *wgu_c = invar_malloc((size_t)USED * gu_e * 2, "compact gate_up"), *wd_c = invar_malloc((size_t)USED * dn_e * 2, "compact down");
    for (int u = 0; u < USED; u++) {
        memcpy(wgu_c + u * gu_e, wgu + experts[u] * gu_e, (size_t)gu_e * 2);
        memcpy(wd_c + u * dn_e, wd + experts[u] * dn_e, (size_t)dn_e * 2);
    }
    void *dx = to_dev(inv, x, (size_t)T * D * 2), *dids = to_dev(inv, ids, sizeof ids), *dcompact = to_dev(inv, compact, sizeof compact),
         *dwgu = to_dev(inv, wgu, (size_t)E * gu_e * 2), *dwd = to_dev(inv, wd, (size_t)E * dn_e * 2),
         *dwgu_c = to_dev(inv, wgu_c, (size_t)USED * gu_e * 2), *dwd_c = to_dev(inv, wd_c, (size_t)USED * dn_e * 2);
    const size_t out_b = (size_t)Tk * D * 2;
    void *dall = inv->alloc(inv, out_b, "experts of 1,100"), *dfew = inv->alloc(inv, out_b, "experts of 6");
    poison(inv, dall, out_b);
    poison(inv, dfew, out_b);
    moe_experts_args ea = {.out = dall, .x = dx, .topk_ids = dids, .w_gate_up = dwgu, .w_down = dwd,
                           .T = T, .k = K, .E = E, .D = D, .I = I};
    inv->moe_experts(inv, &ea);
    moe_experts_args few = ea;
    few.out = dfew;
    few.topk_ids = dcompact;
    few.w_gate_up = dwgu_c;
    few.w_down = dwd_c;
    few.E = USED;
    inv->moe_experts(inv, &few);
    uint16_t *all = from_dev(inv, dall, out_b), *want = from_dev(inv, dfew, out_b);
    assert_written16(all, Tk * D);
    assert_written16(want, Tk * D);
    for (long i = 0; i < Tk * D; i++)
        if (all[i] != want[i])
            fail_msg("moe_experts E=%d: entry %ld (token %ld, expert %d) col %ld: %04x, %04x over the 6 experts alone", E,
                     i / D, i / D / K, ids[i / D], i % D, all[i], want[i]);
    free(x); free(wgu); free(wd); free(wgu_c); free(wd_c); free(all); free(want);
    void *bufs[] = {dx, dids, dcompact, dwgu, dwd, dwgu_c, dwd_c, dall, dfew};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) inv->release(inv, bufs[i]);
}

// The engine's one-call forms of TP-size invariance against one call a slice, end to end on the
// V2-Lite shape (16 heads, 64 experts: slices of 2 heads, 176 expert columns): the only check of
// them that needs no second GPU (tests/engine_slices_check.h).
static void test_engine_tp_slices_one_call(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    check_slices_one_call_equals_each(s->inv, "v2-lite", 20261206u);
}

// CUDA graphs end to end (tests/engine_graphs_check.h): V2-Lite's decode steps padded to buckets
// and replayed from captured graphs give the records of steps run as scheduled, bit for bit.
static void test_engine_cuda_graphs(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    check_graphs_equal_as_scheduled(&s->inv, &s->inv, 1, "v2-lite", 20261206u);
}

#ifdef INVAR_CUDA
typedef struct {
    ops_set *ops;
    uint16_t *x;
    const uint16_t *y;
    long n;
} residual_call;

static void record_residual_add(void *ctx) {
    const residual_call *r = ctx;
    r->ops->residual_add(r->ops, r->x, r->y, r->n);
}
#endif

// A graph replays what it captured (x += y once a launch), and a graph captured before one of
// the set's buffers moved is refused (launch returns false, running nothing): its kernels would
// use the freed address. Captured again, it runs.
static void test_cuda_graph_refused_after_a_buffer_moved(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
#ifdef INVAR_CUDA
    ops_set *inv = s->inv;
    enum { N = 4096 };
    uint16_t *x = rand_bf16(N, 1.0f, 61), *y = rand_bf16(N, 1.0f, 62);
    residual_call r = {inv, to_dev(inv, x, N * 2), to_dev(inv, y, N * 2), N};
    ops_graph *g = inv->graph_capture(inv, record_residual_add, &r);
    uint16_t *unchanged = from_dev(inv, r.x, N * 2);  // a capture runs nothing
    assert_memory_equal(unchanged, x, N * 2);
    assert_true(inv->graph_launch(inv, g));
    uint16_t *once = from_dev(inv, r.x, N * 2);
    uint16_t *want = test_alloc(N * 2);
    for (int i = 0; i < N; i++) want[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
    assert_memory_equal(once, want, N * 2);
    void *buf = NULL;
    size_t have = 0;
    inv_cuda_reserve(inv, &buf, &have, 1 << 20, "a buffer that moves");  // grows: a move
    if (inv->graph_launch(inv, g)) fail_msg("a graph captured before a buffer moved was replayed");
    uint16_t *still = from_dev(inv, r.x, N * 2);
    assert_memory_equal(still, want, N * 2);  // the refused launch ran nothing
    inv->graph_release(inv, g);
    g = inv->graph_capture(inv, record_residual_add, &r);
    assert_true(inv->graph_launch(inv, g));
    inv->graph_release(inv, g);
    inv->release(inv, buf);
    inv->release(inv, r.x);
    inv->release(inv, (void *)r.y);
    free(x), free(y), free(unchanged), free(once), free(want), free(still);
#endif
}

// A rank's columns of a column-parallel GEMM at T = 2, 4, 8, computed with the whole GEMM's N as
// split_N, give the whole GEMM's bits in those columns; without it their split count follows the
// rank's N (N = 1024, K = 7168: 16 splits whole, 18 at N = 512), and some T must differ, or the
// check could not fail.
static void test_gemm_column_slices_split_n(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    enum { M = 5, N = 1024, K = 7168 };
    uint16_t *x = rand_bf16((long)M * K, 1.0f, 51), *w = rand_bf16((long)N * K, 0.05f, 52);
    void *dx = to_dev(inv, x, (size_t)M * K * 2), *dw = to_dev(inv, w, (size_t)N * K * 2);
    void *dy = inv->alloc(inv, (size_t)M * N * 4, "whole y"), *ds = inv->alloc(inv, (size_t)M * N * 4, "sliced y");
    poison(inv, dy, (size_t)M * N * 4);
    gemm_args whole = {.y = dy, .y_f32 = true, .x = dx, .w = dw, .M = M, .N = N, .K = K};
    inv->gemm(inv, &whole);
    float *want = from_dev(inv, dy, (size_t)M * N * 4);
    assert_written32(want, (long)M * N, "whole gemm");
    int differ_without = 0;
    for (int T = 2; T <= 8; T *= 2)
        for (int with = 0; with < 2; with++) {
            poison(inv, ds, (size_t)M * N * 4);
            for (int r = 0; r < T; r++) {
                const int c0 = r * N / T, c1 = (r + 1) * N / T;
                gemm_args g = {.y = (float *)ds + c0, .y_f32 = true, .x = dx, .w = (const uint16_t *)dw + (long)c0 * K,
                               .M = M, .N = c1 - c0, .K = K, .ldy = N, .split_N = with ? N : 0};
                inv->gemm(inv, &g);
            }
            float *got = from_dev(inv, ds, (size_t)M * N * 4);
            assert_written32(got, (long)M * N, "column slices");
            const bool same = memcmp(got, want, (size_t)M * N * 4) == 0;
            if (with && !same) fail_msg("T = %d: a rank's columns with split_N = %d differ from the whole GEMM's", T, N);
            differ_without += !with && !same;
            free(got);
        }
    // The other way (TP-size invariance's gate/up over a rank's slices in one GEMM): the whole N
    // with split_N = a slice's width gives each slice's columns the bits of that slice's GEMM alone.
    for (int n = 2; n <= 8; n *= 2) {
        poison(inv, ds, (size_t)M * N * 4);
        poison(inv, dy, (size_t)M * N * 4);
        gemm_args one = whole;
        one.y = dy;
        one.split_N = N / n;
        inv->gemm(inv, &one);
        for (int sl = 0; sl < n; sl++) {
            gemm_args g = {.y = (float *)ds + (long)sl * N / n, .y_f32 = true, .x = dx,
                           .w = (const uint16_t *)dw + (long)sl * N / n * K, .M = M, .N = N / n, .K = K, .ldy = N};
            inv->gemm(inv, &g);
        }
        float *got_one = from_dev(inv, dy, (size_t)M * N * 4), *got_each = from_dev(inv, ds, (size_t)M * N * 4);
        assert_written32(got_one, (long)M * N, "slices in one gemm");
        if (memcmp(got_one, got_each, (size_t)M * N * 4) != 0)
            fail_msg("%d slices in one GEMM with split_N = %d differ from the slices' own GEMMs", n, N / n);
        free(got_one);
        free(got_each);
    }
    // The premise, where the split-K rule exists (sm_90a; the portable kernel never splits K): the
    // whole GEMM and a half of its columns get different split counts, so the check can fail.
    int split_whole = 1, split_half = 1;
#ifdef INVAR_CUDA
    char path[64];
    gemm_args half = {.y_f32 = true, .M = M, .N = N / 2, .K = K};
    split_whole = inv_cuda_gemm_plan_describe(inv, &whole, path, (int)sizeof path);
    split_half = inv_cuda_gemm_plan_describe(inv, &half, path, (int)sizeof path);
#endif
    printf("gemm column slices: %d splits whole, %d for half the columns alone; %d of 3 T differ without split_N\n",
           split_whole, split_half, differ_without);
    if (split_whole != split_half && differ_without == 0)
        fail_msg("no T gave other bits without split_N: the check cannot fail here");
    free(x); free(w); free(want);
    inv->release(inv, dx); inv->release(inv, dw); inv->release(inv, dy); inv->release(inv, ds);
}

// A rank's heads under TP-size invariance, on one GPU: a call of H heads against calls of each
// slice of `slice` heads (a rank's at T = H / slice), H_select = `select` on both (0: unset).
// The kernels named are checked where an sm_90a device with TMA runs them. Returns how many
// (token, slice) rows differ from the whole call's.
static int mla_head_slices_differ(sets *s, int H, int slice, int select, const char *want_whole, const char *want_slice) {
    enum { S = 2, L = 512, R = 64, W = L + R, MAXLEN = 1024, T = 5 };
    int32_t lens[S] = {700, 1024};
    int32_t tseq[T] = {0, 0, 1, 1, 1}, tpos[T] = {63, 699, 0, 767, 1023};
    uint16_t *rows = rand_bf16((long)S * MAXLEN * W, 1.0f, 61);
    uint16_t *q_lat = rand_bf16((long)T * H * L, 1.0f, 62), *q_pe = rand_bf16((long)T * H * R, 1.0f, 63);
    uint16_t *part_lat = invar_malloc((size_t)T * slice * L * 2, "slice q_lat"),
             *part_pe = invar_malloc((size_t)T * slice * R * 2, "slice q_pe");
    uint16_t *whole = invar_malloc((size_t)T * H * L * 2, "whole out"), *part = invar_malloc((size_t)T * slice * L * 2, "slice out");
    mla_case c = {.S = S, .T = T, .H = H, .L = L, .R = R, .BS = 64, .MB = MAXLEN / 64, .seq_lens = lens,
                  .tseq = tseq, .tpos = tpos, .q_lat = q_lat, .q_pe = q_pe, .H_select = select};
    mla_case_fill(&c, rows, MAXLEN, 3);
    mla_attention_args probe = mla_args(&c);
    mla_kernel_taken(s, &probe, want_whole);
    mla_run(s->inv, &c, whole);
    assert_written16(whole, (long)T * H * L);
    int differ = 0;
    for (int r = 0; r < H / slice; r++) {
        for (int t = 0; t < T; t++) {
            memcpy(part_lat + (long)t * slice * L, q_lat + ((long)t * H + r * slice) * L, (size_t)slice * L * 2);
            memcpy(part_pe + (long)t * slice * R, q_pe + ((long)t * H + r * slice) * R, (size_t)slice * R * 2);
        }
        mla_case h = c;
        h.H = slice;
        h.q_lat = part_lat;
        h.q_pe = part_pe;
        probe = mla_args(&h);
        mla_kernel_taken(s, &probe, want_slice);
        mla_run(s->inv, &h, part);
        assert_written16(part, (long)T * slice * L);
        for (int t = 0; t < T; t++)
            differ += memcmp(part + (long)t * slice * L, whole + ((long)t * H + r * slice) * L, (size_t)slice * L * 2) != 0;
    }
    free(c.table); free(c.cache); free(rows); free(q_lat); free(q_pe); free(part_lat); free(part_pe); free(whole); free(part);
    return differ;
}

// The MLA kernel follows the whole model's heads under TP-size invariance (H_select, the heads a
// rank holds at T = 8), so every T gives a head the same bits. V2-Lite's 16 heads are 8 a rank
// at T = 2 and 2 at T = 8: the 16-head kernel takes them padded to 16, and each slice's rows are
// the whole's, with H_select or without. V3's 128 heads with H_select = 16 take the 16-head kernel
// whole and in slices of 16 (T = 8), the same rows; without it the whole takes the 64-head kernel,
// whose bits differ: some row must (else the check could not fail on this device).
static void test_mla_attention_head_slices_h_select(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    const struct { int H, slice, select; const char *whole, *part; } equal[] = {
        {16, 8, 2, "wgmma16", "wgmma16"}, {16, 2, 2, "wgmma16", "wgmma16"},
        {16, 8, 0, "wgmma16", "wgmma16"}, {128, 16, 16, "wgmma16", "wgmma16"},
    };
    for (size_t i = 0; i < sizeof equal / sizeof equal[0]; i++) {
        const int differ = mla_head_slices_differ(s, equal[i].H, equal[i].slice, equal[i].select, equal[i].whole, equal[i].part);
        if (differ)
            fail_msg("mla_attention H=%d in slices of %d, H_select %d: %d (token, slice) rows differ from the whole call",
                     equal[i].H, equal[i].slice, equal[i].select, differ);
    }
    const int differ_without = mla_head_slices_differ(s, 128, 16, 0, "wgmma", "wgmma16");
    // Only where the whole took another kernel (an sm_90a device with TMA) can they differ.
    if (wgmma_mla_device(s) && differ_without == 0)
        fail_msg("H=128 without H_select: the 64-head kernel and the 16-head one gave the same bits: the check cannot fail here");
    printf("mla_attention head slices: equal in 4 layouts; %d of 40 rows differ at 128 heads without H_select\n", differ_without);
}

// --- logprobs: ties --------------------------------------------------------------------------

// Two equal maxima: greedy takes the lower id, as does the oracle; the top-k lists agree.
static void test_logprobs_ties(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    enum { V = 5000, K = 5 };
    float *logits = invar_malloc((size_t)V * 4, "logits"), temperature = 0.0f;
    for (int i = 0; i < V; i++)
        logits[i] = 8.0f * (2.0f * invar_uniform(invar_mix64(900 + (uint64_t)i)) - 1.0f);
    logits[10] = logits[20] = logits[30] = 100.0f;
    uint64_t noise_seed = 1;
    int32_t position = 0, token, ids[K], ref_token, ref_ids[K];
    float token_lp, top_lp[K];
    logprobs_args a = {.logits = to_dev(inv, logits, (size_t)V * 4), .R = 1, .V = V, .k = K,
                       .temperature = to_dev(inv, &temperature, 4),
                       .noise_seed = to_dev(inv, &noise_seed, 8),
                       .position = to_dev(inv, &position, 4),
                       .token = inv->alloc(inv, 4, "token"),
                       .token_logprob = inv->alloc(inv, 4, "token logprob"),
                       .topk_ids = inv->alloc(inv, K * 4, "top-k ids"),
                       .topk_logprobs = inv->alloc(inv, K * 4, "top-k logprobs")};
    poison(inv, a.token, 4);
    poison(inv, a.topk_ids, K * 4);
    inv->logprobs(inv, &a);
    inv->download(inv, &token, a.token, 4);
    inv->download(inv, &token_lp, a.token_logprob, 4);
    inv->download(inv, ids, a.topk_ids, sizeof ids);
    inv->download(inv, top_lp, a.topk_logprobs, sizeof top_lp);
    double *lp = invar_malloc((size_t)V * sizeof(double), "logprobs oracle");
    logprobs_args h = {.logits = logits, .R = 1, .V = V, .k = K, .temperature = &temperature,
                       .noise_seed = &noise_seed, .position = &position};
    f64_logprobs(&h, lp, &ref_token, ref_ids);
    assert_int_equal(ref_token, 10);
    assert_int_equal(token, ref_token);
    assert_memory_equal(ids, ref_ids, sizeof ids);
    double ref_lp[K];
    for (int j = 0; j < K; j++) ref_lp[j] = lp[ref_ids[j]];
    assert_true(f64_max_abs_err_f32(top_lp, ref_lp, K) < 1e-3);
    assert_true(f64_max_abs_err_f32(&token_lp, &lp[ref_token], 1) < 1e-3);
    free(logits);
    free(lp);
    void *dev[] = {(void *)a.logits, (void *)a.temperature, (void *)a.noise_seed,
                   (void *)a.position, a.token, a.token_logprob, a.topk_ids, a.topk_logprobs};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) inv->release(inv, dev[i]);
}

// A row of NaN logits (a broken kernel upstream) samples no id: token -1 and a NaN logprob, the
// engine's refusal, never a read before the row (row 0's was before the buffer: an illegal
// address that killed the process; row 2's the finite end of row 1); the others are the
// oracle's.
static void test_logprobs_nan_row(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
    ops_set *inv = s->inv;
    enum { R = 4, V = 5000, K = 4 };
    float *logits = invar_malloc((size_t)R * V * 4, "logits"), temperature[R] = {0};
    uint64_t seed = (uint64_t)time(NULL), noise_seed[R] = {1, 2, 3, 4};
    printf("logprobs NaN row: seed %llu\n", (unsigned long long)seed);
    for (int i = 0; i < R * V; i++)
        logits[i] = (i / V) % 2 == 0 ? NAN : 8.0f * (2.0f * invar_uniform(invar_mix64(seed + (uint64_t)i)) - 1.0f);
    int32_t position[R] = {0}, token[R], ids[R * K];
    float token_lp[R], top_lp[R * K];
    logprobs_args a = {.logits = to_dev(inv, logits, (size_t)R * V * 4), .R = R, .V = V, .k = K,
                       .temperature = to_dev(inv, temperature, sizeof temperature),
                       .noise_seed = to_dev(inv, noise_seed, sizeof noise_seed),
                       .position = to_dev(inv, position, sizeof position),
                       .token = inv->alloc(inv, sizeof token, "token"),
                       .token_logprob = inv->alloc(inv, sizeof token_lp, "token logprob"),
                       .topk_ids = inv->alloc(inv, sizeof ids, "top-k ids"),
                       .topk_logprobs = inv->alloc(inv, sizeof top_lp, "top-k logprobs")};
    // Not poison()'s 0xFF bytes, which are the -1 and the NaN expected: 0x5A is neither.
    memset(token, 0x5A, sizeof token);
    memset(token_lp, 0x5A, sizeof token_lp);
    inv->upload(inv, a.token, token, sizeof token);
    inv->upload(inv, a.token_logprob, token_lp, sizeof token_lp);
    inv->logprobs(inv, &a);
    inv->download(inv, token, a.token, sizeof token);
    inv->download(inv, token_lp, a.token_logprob, sizeof token_lp);
    inv->download(inv, ids, a.topk_ids, sizeof ids);
    for (int r = 0; r < R; r += 2) {
        assert_int_equal(token[r], -1);
        if (!isnan(token_lp[r])) fail_msg("row %d of NaN logits: logprob %g, not NaN", r, (double)token_lp[r]);
    }
    for (int r = 1; r < R; r += 2) {
        double *lp = invar_malloc((size_t)V * sizeof(double), "logprobs oracle");
        int32_t ref_token, ref_ids[K];
        logprobs_args h = {.logits = logits + (size_t)r * V, .R = 1, .V = V, .k = K,
                           .temperature = &temperature[r], .noise_seed = &noise_seed[r],
                           .position = &position[r]};
        f64_logprobs(&h, lp, &ref_token, ref_ids);
        assert_int_equal(token[r], ref_token);
        assert_memory_equal(&ids[r * K], ref_ids, sizeof ref_ids);
        assert_true(f64_max_abs_err_f32(&token_lp[r], &lp[ref_token], 1) < 1e-3);
        free(lp);
    }
    free(logits);
    void *dev[] = {(void *)a.logits, (void *)a.temperature, (void *)a.noise_seed,
                   (void *)a.position, a.token, a.token_logprob, a.topk_ids, a.topk_logprobs};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) inv->release(inv, dev[i]);
}

// The bench's plain read (its floor under memory-bound rows) reads every byte: the XOR of the
// words of fresh random bytes, at starts off every 16-byte boundary and lengths with and
// without a tail, equals the host's.
static void test_plain_read_every_byte(void **state) {
    sets *s = SETS(state);
    NEED_GPU(s);
#ifdef INVAR_CUDA
    const size_t cap = (size_t)3 << 20;
    unsigned char *h = invar_malloc(cap + 64, "random bytes");
    for (size_t i = 0; i < cap + 64; i++) h[i] = (unsigned char)(invar_mix64(0x5eadu + i) >> 24);
    unsigned char *d = to_dev(s->inv, h, cap + 64);
    static const size_t lengths[] = {0, 1, 15, 16, 17, 4096, 100003, (size_t)3 << 20};
    static const size_t starts[] = {0, 1, 2, 3, 6, 8, 13};  // every rotation of a word, and aligned
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (size_t si = 0; si < sizeof starts / sizeof starts[0]; si++) {
            const size_t at = starts[si], n = lengths[li];
            unsigned want = 0;
            for (size_t b = 0; b < n; b++) want ^= (unsigned)h[at + b] << (8 * (b & 3));
            unsigned got = cuda_read_xor(s->inv, d + at, n);
            if (got != want) fail_msg("plain read of %zu bytes at +%zu: XOR %08x, the host's %08x", n, at, got, want);
        }
    s->inv->release(s->inv, d);
    free(h);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        TIMED_TEST(test_every_op_invariant_set),
        TIMED_TEST(test_every_op_reference_set),
        TIMED_TEST(test_gemm_reference_varies),
        TIMED_TEST(test_moe_route_every_method),
        TIMED_TEST(test_gemm_tile_paths),
        TIMED_TEST(test_gemm_split_k_rows),
        TIMED_TEST(test_gemm_nan_rows),
        TIMED_TEST(test_gemm_padded_output),
        TIMED_TEST(test_gemm_batched_heads),
        TIMED_TEST(test_mla_attention_block_layouts),
        TIMED_TEST(test_mla_attention_many_heads),
        TIMED_TEST(test_mla_attention_16_heads),
        TIMED_TEST(test_mla_attention_q_layouts),
        TIMED_TEST(test_mla_attention_16_heads_streamed),
        TIMED_TEST(test_kv_cache_write_padding),
        TIMED_TEST(test_logprobs_ties),
        TIMED_TEST(test_logprobs_nan_row),
        TIMED_TEST(test_plain_read_every_byte),
        TIMED_TEST(test_tp_size_fp32_forms),
        TIMED_TEST(test_moe_slices_one_call),
        TIMED_TEST(test_moe_lists_past_one_chunk),
        TIMED_TEST(test_engine_tp_slices_one_call),
        TIMED_TEST(test_engine_cuda_graphs),
        TIMED_TEST(test_cuda_graph_refused_after_a_buffer_moved),
        TIMED_TEST(test_gemm_column_slices_split_n),
        TIMED_TEST(test_mla_attention_head_slices_h_select),
    };
    // INVAR_TEST_FILTER=test_mla_* runs only the matching tests (cmocka's * and ? patterns): one
    // kernel's tests on a GPU host without the minutes the others take.
    const char *filter = getenv("INVAR_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    // INVAR_TEST_SHARD=I/N runs tests I-1, I-1 + N, ... of the list (make check runs the N shards
    // side by side on a GPU): every test in exactly one shard, whatever the tests are called.
    const int count = (int)(sizeof tests / sizeof tests[0]);
    const char *shard = getenv("INVAR_TEST_SHARD");
    int index = 1, shards = 1;
    char tail;
    if (shard && *shard &&
        (sscanf(shard, "%d/%d%c", &index, &shards, &tail) != 2 || shards < 1 || index < 1 || index > shards)) {
        fprintf(stderr, "test_cuda_ops: INVAR_TEST_SHARD=%s: expected I/N with 1 <= I <= N\n", shard);
        return 2;
    }
    struct CMUnitTest mine[sizeof tests / sizeof tests[0]];
    int n = 0;
    for (int i = index - 1; i < count; i += shards) mine[n++] = tests[i];
    if (n == 0) {
        fprintf(stderr, "test_cuda_ops: shard %d/%d holds none of the %d tests\n", index, shards, count);
        return 2;
    }
    if (shards > 1) printf("test_cuda_ops shard %d/%d: %d of %d tests\n", index, shards, n, count);
    char why[256];
    if (!cuda_device_available(why, (int)sizeof why)) {
        printf("SKIP: %d CUDA tests: %s\n", n, why);
        fflush(stdout);  // before cmocka's own report, so the reason is never lost in a pipe
    }
    // cmocka_run_group_tests' own call, with the shard's count (the macro takes an array's size)
    return _cmocka_run_group_tests("test_cuda_ops", mine, (size_t)n, setup_sets, teardown_sets);
}
