// tests/test_inv_cpu_gemm.c — the invariant CPU GEMM: accuracy against the float64 oracle,
// every output written (and nothing beyond ldy), and bitwise invariance of a row across M, its
// position in the batch, the other rows, the column count and the thread count.
//
// Tolerances (relative L2 against float64):
//   fp32 output: only fp32 accumulation error, ~2^-24·√K relative → < 1e-5;
//   bf16 output: one round-to-nearest-even, ≤ 2^-9 relative per element → < 4e-3.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test

#include <string.h>                 // memcmp

#include "../kernels/bf16.h"        // bf16_to_float
#include "../kernels/f64/f64.h"     // f64_gemm, f64_rel_l2_*
#include "test_util.h"              // test_cpu_set, test_fill_*, test_unwritten_*, test_same_bits

#define TOL_F32 1e-5
#define TOL_BF16 4e-3

// ---------------------------------------------------------------------------------------------
// Accuracy, strides, batch, written check
// ---------------------------------------------------------------------------------------------

static void check_accuracy(bool y_f32, int batch, long pad) {
    int M = 37, N = 203, K = 517;   // K mod 8 = 5 and N mod 4 = 3: every tail path
    long ldx = K + pad, ldw = K + pad, ldy = N + pad;
    int nb = batch > 1 ? batch : 1;
    long stride_x = M * ldx + 11, stride_w = N * ldw + 13, stride_y = M * ldy + 7;
    bf16 *x = test_alloc(sizeof(bf16) * nb * stride_x);
    bf16 *w = test_alloc(sizeof(bf16) * nb * stride_w);
    size_t y_elem = y_f32 ? sizeof(float) : sizeof(bf16);
    void *y = test_alloc(y_elem * nb * stride_y);
    double *ref = test_alloc(sizeof(double) * nb * M * N);
    test_fill_bf16(x, nb * stride_x, 1, 1.0f);
    test_fill_bf16(w, nb * stride_w, 2, 0.05f);
    gemm_args a = {.y = y, .y_f32 = y_f32, .x = x, .w = w, .M = M, .N = N, .K = K,
                   .ldx = pad ? ldx : 0, .ldy = pad ? ldy : 0, .ldw = pad ? ldw : 0,
                   .batch = batch, .stride_x = stride_x, .stride_y = stride_y, .stride_w = stride_w};
    f64_gemm(&a, ref);

    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(y, y_elem * nb * stride_y);
        ops_set *ops = test_cpu_set(s);
        ops->gemm(ops, &a);
        unsigned char *yb = y;
        for (int b = 0; b < nb; b++)
            for (int m = 0; m < M; m++) {
                void *row = yb + y_elem * (b * stride_y + m * ldy);
                assert_int_equal(test_count_poisoned(row, y_elem, N), 0);
                if (pad) assert_int_equal(test_count_poisoned((unsigned char *)row + y_elem * N, y_elem, pad), pad);
                double err = y_f32 ? f64_rel_l2_f32(row, ref + (b * M + m) * N, N)
                                   : f64_rel_l2_bf16(row, ref + (b * M + m) * N, N);
                assert_true(err < (y_f32 ? TOL_F32 : TOL_BF16));
            }
    }
    free(ref);
    free(y);
    free(w);
    free(x);
}

static void test_accuracy_f32_dense(void **state) { (void)state; check_accuracy(true, 0, 0); }
static void test_accuracy_bf16_dense(void **state) { (void)state; check_accuracy(false, 1, 0); }
static void test_accuracy_f32_strided_batched(void **state) { (void)state; check_accuracy(true, 3, 9); }
static void test_accuracy_bf16_strided_batched(void **state) { (void)state; check_accuracy(false, 2, 5); }

// ---------------------------------------------------------------------------------------------
// Invariance
// ---------------------------------------------------------------------------------------------

enum { INV_N = 67, INV_K = 389 };

// Row `pos` of an M-row product with random neighbours, fp32 or bf16 output, on set s.
static void row_in_batch(const bf16 *x_row, const bf16 *w, int M, int pos, int s, uint64_t seed,
                         bool y_f32, void *out_row) {
    size_t y_elem = y_f32 ? sizeof(float) : sizeof(bf16);
    bf16 *x = test_alloc(sizeof(bf16) * M * INV_K);
    void *y = test_alloc(y_elem * M * INV_N);
    test_fill_bf16(x, (long)M * INV_K, seed, 1.0f);
    memcpy(x + (long)pos * INV_K, x_row, sizeof(bf16) * INV_K);
    test_poison(y, y_elem * M * INV_N);
    gemm_args a = {.y = y, .y_f32 = y_f32, .x = x, .w = w, .M = M, .N = INV_N, .K = INV_K};
    ops_set *ops = test_cpu_set(s);
    ops->gemm(ops, &a);
    assert_int_equal(test_count_poisoned(y, y_elem, (long)M * INV_N), 0);
    memcpy(out_row, (unsigned char *)y + y_elem * pos * INV_N, y_elem * INV_N);
    free(y);
    free(x);
}

static void check_row_invariance(bool y_f32) {
    static const int sizes[] = {2, 3, 7, 16, 64, 65, 130};
    size_t y_elem = y_f32 ? sizeof(float) : sizeof(bf16);
    bf16 x_row[INV_K], *w = test_alloc(sizeof(bf16) * INV_N * INV_K);
    test_fill_bf16(x_row, INV_K, 21, 1.0f);
    test_fill_bf16(w, (long)INV_N * INV_K, 22, 0.05f);
    float alone[INV_N], got[INV_N];
    row_in_batch(x_row, w, 1, 0, 0, 23, y_f32, alone);
    int checked = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int M = sizes[i];
        int positions[] = {0, M / 2, M - 1};
        for (int p = 0; p < 3; p++)
            for (int s = 0; s < TEST_N_THREADS; s++) {
                row_in_batch(x_row, w, M, positions[p], s, 100 + 7 * i + p, y_f32, got);
                if (!test_same_bits(alone, got, y_elem, INV_N, "gemm row vs alone")) {
                    fprintf(stderr, "M=%d pos=%d threads=%d\n", M, positions[p], s + 1);
                    fail();
                }
                checked++;
            }
    }
    assert_int_equal(checked, 7 * 3 * TEST_N_THREADS);
    free(w);
}

static void test_row_invariance_f32(void **state) { (void)state; check_row_invariance(true); }
static void test_row_invariance_bf16(void **state) { (void)state; check_row_invariance(false); }

// Column n of y = x · wᵀ is the same whether w has N rows or only row n: the 4-column
// micro-kernel and the 1-column tail compute the same arithmetic.
static void test_column_invariance(void **state) {
    (void)state;
    int M = 5;
    bf16 *x = test_alloc(sizeof(bf16) * M * INV_K), *w = test_alloc(sizeof(bf16) * INV_N * INV_K);
    float *y = test_alloc(sizeof(float) * M * INV_N), y1[5];
    test_fill_bf16(x, (long)M * INV_K, 31, 1.0f);
    test_fill_bf16(w, (long)INV_N * INV_K, 32, 0.05f);
    gemm_args all = {.y = y, .y_f32 = true, .x = x, .w = w, .M = M, .N = INV_N, .K = INV_K};
    ops_set *two_threads = test_cpu_set(1), *one_thread = test_cpu_set(0);
    two_threads->gemm(two_threads, &all);
    for (int n = 0; n < INV_N; n++) {
        gemm_args one = {.y = y1, .y_f32 = true, .x = x, .w = w + (long)n * INV_K, .M = M, .N = 1, .K = INV_K};
        one_thread->gemm(one_thread, &one);
        for (int m = 0; m < M; m++) assert_memory_equal(&y1[m], &y[(long)m * INV_N + n], sizeof(float));
    }
    free(y);
    free(w);
    free(x);
}

// The whole output is bitwise the same for 1, 2, 3 and 4 threads, on a shape with several
// row blocks and column panels.
static void test_thread_invariance(void **state) {
    (void)state;
    int M = 150, N = 301, K = 1000;
    bf16 *x = test_alloc(sizeof(bf16) * M * K), *w = test_alloc(sizeof(bf16) * N * K);
    bf16 *y0 = test_alloc(sizeof(bf16) * M * N), *y = test_alloc(sizeof(bf16) * M * N);
    test_fill_bf16(x, (long)M * K, 41, 1.0f);
    test_fill_bf16(w, (long)N * K, 42, 0.05f);
    gemm_args a = {.y = y0, .x = x, .w = w, .M = M, .N = N, .K = K};
    test_poison(y0, sizeof(bf16) * M * N);
    ops_set *one_thread = test_cpu_set(0);
    one_thread->gemm(one_thread, &a);
    assert_int_equal(test_unwritten_bf16(y0, (long)M * N), 0);
    a.y = y;
    for (int s = 1; s < TEST_N_THREADS; s++) {
        test_poison(y, sizeof(bf16) * M * N);
        ops_set *ops = test_cpu_set(s);
        ops->gemm(ops, &a);
        assert_true(test_same_bits(y0, y, sizeof(bf16), (long)M * N, "gemm threads"));
    }
    free(y);
    free(y0);
    free(w);
    free(x);
}

// ---------------------------------------------------------------------------------------------
// The documented order, bit for bit: every y[m][n] is lanes.h's dot of x's row and w's row (8
// lanes of k mod 8 in increasing k, the fixed tree, then the K mod 8 tail one at a time),
// whichever micro-kernel computes its column. fp32 output shows a sum one ulp off. A column's
// micro-kernel follows its place among N, which a rank's share of a column-parallel GEMM moves.
// ---------------------------------------------------------------------------------------------

// x's row times w's row term by term, summed in lanes.h's order.
static float model_dot(const bf16 *x, const bf16 *w, int K, float *terms) {
    for (int k = 0; k < K; k++) terms[k] = bf16_to_float(x[k]) * bf16_to_float(w[k]);
    return test_lanes_order_sum(terms, K);
}

static void check_documented_order(int M, int N, int K) {
    bf16 *x = test_alloc(sizeof(bf16) * M * K), *w = test_alloc(sizeof(bf16) * N * K);
    float *y = test_alloc(sizeof(float) * M * N), *terms = test_alloc(sizeof(float) * K);
    test_fill_bf16(x, (long)M * K, 51 + K, 1.0f);
    test_fill_bf16(w, (long)N * K, 53 + N, 0.05f);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(y, sizeof(float) * M * N);
        ops_set *ops = test_cpu_set(s);
        gemm_args a = {.y = y, .y_f32 = true, .x = x, .w = w, .M = M, .N = N, .K = K};
        ops->gemm(ops, &a);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float model = model_dot(x + (long)m * K, w + (long)n * K, K, terms);
                if (memcmp(&model, &y[(long)m * N + n], sizeof model) != 0)
                    fail_msg("gemm %d x %d x %d, set %d: y[%d][%d] = %a, lanes.h's order gives %a", M, N, K,
                             s, m, n, (double)y[(long)m * N + n], (double)model);
            }
    }
    free(terms);
    free(y);
    free(w);
    free(x);
}

static void test_documented_order(void **state) {
    (void)state;
    check_documented_order(5, 13, 2048);  // K a multiple of 8; N mod 4 = 1: both micro-kernels
    check_documented_order(5, 14, 1003);  // a K tail of 3
    check_documented_order(3, 7, 8);      // one lane group
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy_f32_dense),
        cmocka_unit_test(test_accuracy_bf16_dense),
        cmocka_unit_test(test_accuracy_f32_strided_batched),
        cmocka_unit_test(test_accuracy_bf16_strided_batched),
        cmocka_unit_test(test_row_invariance_f32),
        cmocka_unit_test(test_row_invariance_bf16),
        cmocka_unit_test(test_column_invariance),
        cmocka_unit_test(test_thread_invariance),
        cmocka_unit_test(test_documented_order),
    };
    return cmocka_run_group_tests(tests, test_cpu_sets_setup, test_cpu_sets_teardown);
}
