// tests/test_inv_cpu_rope.c — the invariant CPU RoPE: accuracy against float64 in both pair
// layouts, only the rope slices touched, and bitwise invariance of a token across batch size,
// position, neighbours and thread count.
//
// Tolerance: fp32 rotation then one bf16 rounding (≤ 2^-9 relative per element) → relative
// L2 < 4e-3.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test
#include <math.h>                   // cos, sin, pow, fabs

#include "../kernels/f64/f64.h"     // f64_rope, f64_rel_l2_bf16
#include "test_util.h"              // test_cpu_set, test_fill_*, test_check_row_invariance

#define TOL_BF16 4e-3

enum {
    H = 4,                          // heads
    NOPE = 48, R = 32,              // one head: NOPE values, then R rope values
    HEAD = NOPE + R,
    MAX_POS = 4096,
};

static float cos_table[MAX_POS * R / 2], sin_table[MAX_POS * R / 2];

static int setup(void **state) {
    if (test_cpu_sets_setup(state) != 0) return -1;
    for (int p = 0; p < MAX_POS; p++)
        for (int i = 0; i < R / 2; i++) {
            double angle = p * pow(10000.0, -2.0 * i / R);
            cos_table[p * R / 2 + i] = (float)(1.1 * cos(angle));   // an mscale folded in
            sin_table[p * R / 2 + i] = (float)(1.1 * sin(angle));
        }
    return 0;
}

static void check_accuracy(bool interleave) {
    int T = 23;
    long n = (long)T * H * HEAD;
    bf16 *x0 = test_alloc(sizeof(bf16) * n), *x = test_alloc(sizeof(bf16) * n);
    int32_t pos[23];
    double *ref = test_alloc(sizeof(double) * T * H * R);
    test_fill_bf16(x0, n, 1, 1.0f);
    test_fill_i32(pos, T, 2, 0, MAX_POS - 1);
    f64_rope(ref, x0 + NOPE, H * HEAD, HEAD, T, H, R, pos, cos_table, sin_table, interleave);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        memcpy(x, x0, sizeof(bf16) * n);
        ops_set *ops = test_cpu_set(s);
        ops->rope(ops, x + NOPE, H * HEAD, HEAD, T, H, R, pos, cos_table, sin_table, interleave);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const bf16 *head = x + ((long)t * H + h) * HEAD, *head0 = x0 + ((long)t * H + h) * HEAD;
                assert_memory_equal(head, head0, sizeof(bf16) * NOPE);     // nope part untouched
                const double *want = ref + ((long)t * H + h) * R;
                assert_true(f64_rel_l2_bf16(head + NOPE, want, R) < TOL_BF16);
                // Every value written: rope works in place, so an output cannot be poisoned;
                // instead each value must be its own oracle value to bf16 precision (an
                // unwritten one keeps its input, off by far more: the tables carry mscale 1.1).
                for (int i = 0; i < R; i++)
                    assert_true(fabs(bf16_to_float(head[NOPE + i]) - want[i]) <= 0.004 * fabs(want[i]) + 1e-6);
            }
    }
    free(ref);
    free(x);
    free(x0);
}

static void test_accuracy_interleave(void **state) { (void)state; check_accuracy(true); }
static void test_accuracy_rotate_half(void **state) { (void)state; check_accuracy(false); }

// Invariance. A "row" is one token: H heads of HEAD values, then its position (int32).
enum { ROW_BYTES = sizeof(bf16) * H * HEAD + sizeof(int32_t) };

static void fill_rows(void *rows, size_t bytes, uint64_t seed) {
    size_t n = bytes / ROW_BYTES;
    unsigned char *b = rows;
    for (size_t t = 0; t < n; t++) {
        test_fill_bf16((bf16 *)(b + t * ROW_BYTES), H * HEAD, seed * 1000 + t, 1.0f);
        int32_t p;
        test_fill_i32(&p, 1, seed * 1000 + t + 500, 0, MAX_POS - 1);
        memcpy(b + t * ROW_BYTES + sizeof(bf16) * H * HEAD, &p, sizeof p);
    }
}

static bool interleave_mode;

static void run_rows(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    bf16 *x = test_alloc(sizeof(bf16) * M * H * HEAD);
    int32_t *pos = test_alloc(sizeof(int32_t) * M);
    const unsigned char *b = in;
    for (int t = 0; t < M; t++) {
        memcpy(x + (long)t * H * HEAD, b + (size_t)t * ROW_BYTES, sizeof(bf16) * H * HEAD);
        memcpy(&pos[t], b + (size_t)t * ROW_BYTES + sizeof(bf16) * H * HEAD, sizeof(int32_t));
    }
    ops_set *ops = test_cpu_set(set);
    ops->rope(ops, x + NOPE, H * HEAD, HEAD, M, H, R, pos, cos_table, sin_table, interleave_mode);
    memcpy(out, x, sizeof(bf16) * M * H * HEAD);
    free(pos);
    free(x);
}

static void check_row_invariance(bool interleave) {
    interleave_mode = interleave;
    test_row_check c = {"rope", run_rows, NULL, fill_rows, ROW_BYTES, sizeof(bf16) * H * HEAD,
                        sizeof(bf16), TEST_N_THREADS, 7};
    assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
}

static void test_row_invariance_interleave(void **state) { (void)state; check_row_invariance(true); }
static void test_row_invariance_rotate_half(void **state) { (void)state; check_row_invariance(false); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy_interleave),
        cmocka_unit_test(test_accuracy_rotate_half),
        cmocka_unit_test(test_row_invariance_interleave),
        cmocka_unit_test(test_row_invariance_rotate_half),
    };
    return cmocka_run_group_tests(tests, setup, test_cpu_sets_teardown);
}
