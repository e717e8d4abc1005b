// tests/test_inv_cpu_rmsnorm.c — the invariant CPU RMSNorm: accuracy against float64, strides,
// every element written, bitwise invariance of a row across batch size, position, neighbours
// and thread count.
//
// Tolerance: two bf16 roundings (normed, then w·normed), each ≤ 2^-9 relative per element,
// fp32 reduction error negligible → relative L2 < 1e-2.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test

#include "../kernels/f64/f64.h"     // f64_rmsnorm, f64_rel_l2_bf16
#include "test_util.h"              // test_cpu_set, test_fill_bf16, test_check_row_invariance

#define TOL_BF16 1e-2
#define EPS 1e-6f

static void check_accuracy(int M, int D, long pad) {
    long ld = D + pad;
    bf16 *x = test_alloc(sizeof(bf16) * M * ld), *w = test_alloc(sizeof(bf16) * D);
    bf16 *out = test_alloc(sizeof(bf16) * M * ld);
    double *ref = test_alloc(sizeof(double) * M * D);
    test_fill_bf16(x, M * ld, 1, 2.0f);
    test_fill_bf16(w, D, 2, 1.5f);
    f64_rmsnorm(ref, x, ld, w, M, D, EPS);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(out, sizeof(bf16) * M * ld);
        ops_set *ops = test_cpu_set(s);
        ops->rmsnorm(ops, out, ld, x, ld, w, M, D, EPS);
        for (int m = 0; m < M; m++) {
            assert_int_equal(test_unwritten_bf16(out + m * ld, D), 0);
            assert_int_equal(test_unwritten_bf16(out + m * ld + D, pad), pad);  // padding untouched
            assert_true(f64_rel_l2_bf16(out + m * ld, ref + (long)m * D, D) < TOL_BF16);
        }
    }
    free(ref);
    free(out);
    free(w);
    free(x);
}

static void test_accuracy(void **state) {
    (void)state;
    check_accuracy(9, 1024, 0);
    check_accuracy(5, 1003, 17);   // D mod 8 = 3: the tail of the lanes
}

// ---------------------------------------------------------------------------------------------

enum { D_INV = 517 };

static bf16 weight[D_INV];

static void run_rows(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    ops_set *ops = test_cpu_set(set);
    ops->rmsnorm(ops, out, D_INV, in, D_INV, weight, M, D_INV, EPS);
}

static void test_row_invariance(void **state) {
    (void)state;
    test_fill_bf16(weight, D_INV, 3, 1.0f);
    test_row_check c = {"rmsnorm", run_rows, NULL, test_fill_bytes_bf16, sizeof(bf16) * D_INV,
                        sizeof(bf16) * D_INV, sizeof(bf16), TEST_N_THREADS, 11};
    assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_row_invariance),
    };
    return cmocka_run_group_tests(tests, test_cpu_sets_setup, test_cpu_sets_teardown);
}
