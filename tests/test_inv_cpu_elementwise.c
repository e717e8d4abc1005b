// tests/test_inv_cpu_elementwise.c — the invariant CPU set's memory ops and its ops without a
// reduction (embedding, residual_add, silu_mul): accuracy against float64, every element
// written, bitwise invariance of a row across batch size, position, neighbours and threads.
//
// Tolerances (relative L2 against float64):
//   embedding: a copy → exact;
//   residual_add: one bf16 rounding of an fp32 sum → < 4e-3;
//   silu_mul: two bf16 roundings (silu, then the product) → < 1e-2.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test

#include "../kernels/f64/f64.h"     // f64_embedding, f64_residual_add, f64_silu_mul, f64_rel_l2_bf16
#include "test_util.h"              // test_cpu_set, test_fill_*, test_check_row_invariance

#define TOL_ONE_ROUNDING 4e-3
#define TOL_TWO_ROUNDINGS 1e-2

// ---------------------------------------------------------------------------------------------
// Memory and the set's identity
// ---------------------------------------------------------------------------------------------

static void test_set_fields_and_memory(void **state) {
    (void)state;
    ops_set *o = test_cpu_set(2);
    assert_string_equal(o->name, "invariant");
    assert_string_equal(o->device, "cpu");
    assert_true(o->batch_invariant);
    enum { N = 1000 };
    bf16 src[N], back[N];
    test_fill_bf16(src, N, 1, 1.0f);
    test_poison(back, sizeof back);
    bf16 *dev = o->alloc(o, sizeof src, "test buffer");
    o->upload(o, dev, src, sizeof src);
    o->sync(o);
    o->download(o, back, dev, sizeof back);
    assert_memory_equal(src, back, sizeof src);
    o->release(o, dev);
}

// ---------------------------------------------------------------------------------------------
// embedding
// ---------------------------------------------------------------------------------------------

enum { VOCAB = 300, D = 203 };
static bf16 table[VOCAB * D];

static void test_embedding_accuracy(void **state) {
    (void)state;
    enum { T = 40 };
    int32_t ids[T];
    bf16 out[T * D];
    double ref[T * D];
    test_fill_bf16(table, VOCAB * D, 1, 1.0f);
    test_fill_i32(ids, T, 2, 0, VOCAB - 1);
    f64_embedding(ref, table, ids, T, D);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(out, sizeof out);
        ops_set *ops = test_cpu_set(s);
        ops->embedding(ops, out, table, ids, T, D);
        assert_int_equal(test_unwritten_bf16(out, T * D), 0);
        assert_true(f64_rel_l2_bf16(out, ref, T * D) == 0.0);
    }
}

static void fill_ids(void *rows, size_t bytes, uint64_t seed) {
    test_fill_i32(rows, (long)(bytes / sizeof(int32_t)), seed, 0, VOCAB - 1);
}

static void run_embedding(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    ops_set *ops = test_cpu_set(set);
    ops->embedding(ops, out, table, in, M, D);
}

static void test_embedding_invariance(void **state) {
    (void)state;
    test_fill_bf16(table, VOCAB * D, 1, 1.0f);
    test_row_check c = {"embedding", run_embedding, NULL, fill_ids, sizeof(int32_t),
                        sizeof(bf16) * D, sizeof(bf16), TEST_N_THREADS, 3};
    assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
}

// ---------------------------------------------------------------------------------------------
// residual_add
// ---------------------------------------------------------------------------------------------

static void test_residual_add_accuracy(void **state) {
    (void)state;
    enum { N = 5003 };
    bf16 *x0 = test_alloc(sizeof(bf16) * N), *x = test_alloc(sizeof(bf16) * N), *y = test_alloc(sizeof(bf16) * N);
    double *ref = test_alloc(sizeof(double) * N);
    test_fill_bf16(x0, N, 1, 2.0f);
    test_fill_bf16(y, N, 2, 1.0f);
    f64_residual_add(ref, x0, y, N);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        memcpy(x, x0, sizeof(bf16) * N);
        ops_set *ops = test_cpu_set(s);
        ops->residual_add(ops, x, y, N);
        assert_true(f64_rel_l2_bf16(x, ref, N) < TOL_ONE_ROUNDING);
        // In place, so every element written means: each is its sum rounded once.
        for (long i = 0; i < N; i++)
            assert_int_equal(x[i], float_to_bf16(bf16_to_float(x0[i]) + bf16_to_float(y[i])));
    }
    free(ref);
    free(y);
    free(x);
    free(x0);
}

// A row: D values of x then D values of y.
static void run_residual(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    bf16 *x = test_alloc(sizeof(bf16) * M * D), *y = test_alloc(sizeof(bf16) * M * D);
    const bf16 *rows = in;
    for (int m = 0; m < M; m++) {
        memcpy(x + (long)m * D, rows + (long)m * 2 * D, sizeof(bf16) * D);
        memcpy(y + (long)m * D, rows + (long)m * 2 * D + D, sizeof(bf16) * D);
    }
    ops_set *ops = test_cpu_set(set);
    ops->residual_add(ops, x, y, (long)M * D);
    memcpy(out, x, sizeof(bf16) * M * D);
    free(y);
    free(x);
}

static void test_residual_add_invariance(void **state) {
    (void)state;
    test_row_check c = {"residual_add", run_residual, NULL, test_fill_bytes_bf16, sizeof(bf16) * 2 * D,
                        sizeof(bf16) * D, sizeof(bf16), TEST_N_THREADS, 5};
    assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
}

// ---------------------------------------------------------------------------------------------
// silu_mul
// ---------------------------------------------------------------------------------------------

enum { I = 389 };

static void test_silu_mul_accuracy(void **state) {
    (void)state;
    enum { M = 33 };
    bf16 *gu = test_alloc(sizeof(bf16) * M * 2 * I), *out = test_alloc(sizeof(bf16) * M * I);
    double *ref = test_alloc(sizeof(double) * M * I);
    test_fill_bf16(gu, (long)M * 2 * I, 1, 4.0f);
    f64_silu_mul(ref, gu, M, I);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(out, sizeof(bf16) * M * I);
        ops_set *ops = test_cpu_set(s);
        ops->silu_mul(ops, out, gu, M, I);
        assert_int_equal(test_unwritten_bf16(out, (long)M * I), 0);
        assert_true(f64_rel_l2_bf16(out, ref, (long)M * I) < TOL_TWO_ROUNDINGS);
    }
    free(ref);
    free(out);
    free(gu);
}

static void run_silu(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    ops_set *ops = test_cpu_set(set);
    ops->silu_mul(ops, out, in, M, I);
}

static void test_silu_mul_invariance(void **state) {
    (void)state;
    test_row_check c = {"silu_mul", run_silu, NULL, test_fill_bytes_bf16, sizeof(bf16) * 2 * I,
                        sizeof(bf16) * I, sizeof(bf16), TEST_N_THREADS, 9};
    assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_fields_and_memory),
        cmocka_unit_test(test_embedding_accuracy),
        cmocka_unit_test(test_embedding_invariance),
        cmocka_unit_test(test_residual_add_accuracy),
        cmocka_unit_test(test_residual_add_invariance),
        cmocka_unit_test(test_silu_mul_accuracy),
        cmocka_unit_test(test_silu_mul_invariance),
    };
    return cmocka_run_group_tests(tests, test_cpu_sets_setup, test_cpu_sets_teardown);
}
