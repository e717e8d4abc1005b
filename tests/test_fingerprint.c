// tests/test_fingerprint.c — reduction-order fingerprints (kernels/fingerprint.h): the sink
// reports the first two orders one op and shape noted, with their batches, and names paths
// exactly; and the kernel checker fails a kernel that picks its reduction order by M even where
// its two orders give the same bits, while it passes the real invariant CPU set's every op.
#include <stdarg.h>                              // cmocka
#include <stddef.h>                              // cmocka
#include <stdint.h>                              // cmocka
#include <setjmp.h>                              // cmocka
#include <cmocka.h>                              // cmocka

#include <stdbool.h>                             // bool
#include <string.h>                              // strcmp

#include "../harness/check/kernel_check.h"       // kernel_check_op, check_opts, check_result
#include "../harness/check/op_table.h"           // op_table_find
#include "../kernels/cpu/inv_cpu.h"              // inv_cpu_create
#include "../kernels/fingerprint.h"              // fingerprint_*

static void sink_reports_first_two_orders(void **state) {
    (void)state;
    fingerprint_sink *s = fingerprint_sink_create();
    long a[] = {8, 512}, b[] = {8, 1024};
    uint64_t order_a = fingerprint_order(a, 2), order_b = fingerprint_order(b, 2);
    assert_true(order_a != order_b);
    long swapped[] = {512, 8};  // the parameters' order is part of the fingerprint
    assert_true(fingerprint_order(swapped, 2) != order_a);
    fingerprint_sink_batch(s, 1);
    fingerprint_note(s, "rmsnorm", 512, order_a, "row-lanes");
    fingerprint_note(s, "gemm", 7, order_b, "bf16");  // another op: no conflict
    fingerprint_sink_batch(s, 64);
    fingerprint_note(s, "rmsnorm", 512, order_a, "row-lanes");
    fingerprint_note(s, "rmsnorm", 1024, order_b, "row-lanes");  // another shape: no conflict
    fingerprint_mismatch m = {0};
    assert_false(fingerprint_sink_mismatch(s, &m));
    fingerprint_sink_batch(s, 255);
    fingerprint_note(s, "rmsnorm", 512, order_b, "row-lanes");
    fingerprint_sink_batch(s, 1024);
    fingerprint_note(s, "rmsnorm", 512, order_a ^ 1, "row-lanes");  // not the first: kept out
    assert_true(fingerprint_sink_mismatch(s, &m));
    assert_string_equal(m.op, "rmsnorm");
    assert_true(m.shape == 512);
    assert_true(m.order_a == order_a && m.order_b == order_b);
    assert_int_equal(m.batch_a, 1);
    assert_int_equal(m.batch_b, 255);
    fingerprint_sink_reset_orders(s);  // a new shape: orders forgotten, paths kept
    assert_false(fingerprint_sink_mismatch(s, NULL));
    fingerprint_note(s, "rmsnorm", 512, order_b, "row-lanes+tail");
    assert_false(fingerprint_sink_mismatch(s, NULL));
    assert_true(fingerprint_sink_reached(s, "rmsnorm:row-lanes"));
    assert_true(fingerprint_sink_reached(s, "rmsnorm:row-lanes+tail"));
    assert_true(fingerprint_sink_reached(s, "gemm:bf16"));
    const char *names[8];
    assert_int_equal(fingerprint_sink_paths(s, names, 8), 3);
    assert_string_equal(names[0], "rmsnorm:row-lanes");
    assert_string_equal(names[1], "gemm:bf16");
    assert_string_equal(names[2], "rmsnorm:row-lanes+tail");
    fingerprint_sink_destroy(s);
}

// A path is named exactly: one path's name inside another's does not reach it.
static void sink_names_paths_exactly(void **state) {
    (void)state;
    fingerprint_sink *s = fingerprint_sink_create();
    fingerprint_note(s, "gemm", 1, 2, "bf16+column-tail");
    fingerprint_note(s, "mla_attention", 1, 2, "split-merge");
    assert_true(fingerprint_sink_reached(s, "gemm:bf16+column-tail"));
    assert_false(fingerprint_sink_reached(s, "gemm:bf16"));
    assert_false(fingerprint_sink_reached(s, "gemm:bf16+column-tail+more"));
    assert_false(fingerprint_sink_reached(s, "gemm"));
    assert_false(fingerprint_sink_reached(s, "mla_attention:split"));
    assert_false(fingerprint_sink_reached(s, "rmsnorm:split-merge"));
    fingerprint_sink_destroy(s);
}

// The CPU kernels note the path they ran, not a near one: the GEMM's column tail is the
// N mod 4 columns its 4-column micro-kernel leaves, the norm's tail D mod 8.
static bool gemm_notes(ops_set *set, int N, const char *path) {
    enum { M = 3, K = 24 };
    bf16 x[M * K], w[13 * K], y[M * 13];
    for (int i = 0; i < M * K; i++) x[i] = (bf16)(0x3f80 + (i * 37) % 97);  // 1.0 .. 1.75
    for (int i = 0; i < 13 * K; i++) w[i] = (bf16)(0xbf00 + (i * 11) % 89);
    fingerprint_sink *s = fingerprint_sink_create();
    set->fingerprints = s;
    gemm_args a = {.y = y, .x = x, .w = w, .M = M, .N = N, .K = K};
    set->gemm(set, &a);
    set->fingerprints = NULL;
    const char *names[4];
    bool only = fingerprint_sink_paths(s, names, 4) == 1 && strcmp(names[0], path) == 0;
    fingerprint_sink_destroy(s);
    return only;
}

static void cpu_kernels_note_the_path_taken(void **state) {
    (void)state;
    ops_set *set = inv_cpu_create(2);
    assert_true(gemm_notes(set, 8, "gemm:bf16"));
    assert_true(gemm_notes(set, 12, "gemm:bf16"));  // three full groups of 4, no tail
    assert_true(gemm_notes(set, 13, "gemm:bf16+column-tail"));
    assert_true(gemm_notes(set, 7, "gemm:bf16+column-tail"));
    // every path noted is one the set declares
    bool declared = false;
    for (const char *const *p = set->paths; *p; p++) declared |= strcmp(*p, "gemm:bf16+column-tail") == 0;
    assert_true(declared);
    set->destroy(set);
}

// --- a kernel that picks its order by M but gives the same bits --------------------------------

static void (*real_rmsnorm)(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                            const bf16 *w, int M, int D, float eps);

// Sums a row in splits of 4096 elements from M = 16 on (one split below): the checked rows
// are shorter than a split, so the second split is empty and adds +0.0f to a sum of squares,
// the same bits as one split, which this reproduces by calling the one-split kernel. Its
// fingerprint names the split count it chose, as a kernel's plan does.
static void split_by_batch_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                                   const bf16 *w, int M, int D, float eps) {
    long order[] = {M >= 16 ? 2 : 1, 4096};
    long shape[] = {D};
    fingerprint_note(ops->fingerprints, "rmsnorm", fingerprint_order(shape, 1),
                     fingerprint_order(order, 2), "row-lanes");
    fingerprint_sink *quiet = ops->fingerprints;
    ops->fingerprints = NULL;  // one note a call: this kernel's plan, not the one it calls
    real_rmsnorm(ops, out, ld_out, x, ld_x, w, M, D, eps);
    ops->fingerprints = quiet;
}

static const int batches[] = {2, 7, 64, 256};

static void order_by_batch_fails_with_equal_bits(void **state) {
    (void)state;
    ops_set *set = inv_cpu_create(2);
    real_rmsnorm = set->rmsnorm;
    set->rmsnorm = split_by_batch_rmsnorm;
    static const op_shape shapes[] = {{.label = "D=512", .rmsnorm = {.D = 512}}, {.label = NULL}};
    check_opts o = {.batch_sizes = batches, .n_batch_sizes = 4, .seed = 11, .shapes = shapes};
    check_result r;
    assert_int_equal(kernel_check_op(set, op_table_find("rmsnorm"), &o, &r), 1);
    assert_true(r.invariant);  // every bit agreed ...
    assert_true(r.accurate && r.written);
    assert_false(r.order_stable);  // ... and the order did not
    assert_false(r.pass);
    assert_string_equal(r.order_diff.op, "rmsnorm");
    long one[] = {1, 4096}, two[] = {2, 4096};
    // The largest batch runs after the probes alone: M = 1 first, then M = 256.
    assert_true(r.order_diff.order_a == fingerprint_order(one, 2));
    assert_true(r.order_diff.order_b == fingerprint_order(two, 2));
    assert_int_equal(r.order_diff.batch_a, 1);
    assert_true(r.order_diff.batch_b >= 16);
    set->rmsnorm = real_rmsnorm;
    set->destroy(set);
}

// The real set: every op it notes keeps one order per shape over the default CPU shapes' M
// (the first two batch sizes keep it quick), and the sink left attached is the caller's.
static void invariant_set_keeps_one_order(void **state) {
    (void)state;
    ops_set *set = inv_cpu_create(2);
    fingerprint_sink *prints = fingerprint_sink_create();
    static const int few[] = {2, 64};
    check_opts o = {.batch_sizes = few, .n_batch_sizes = 2, .seed = 5, .fingerprints = prints};
    static const char *const ops[] = {"gemm", "rmsnorm", "mla_attention", "moe_combine", "all_reduce"};
    for (int i = 0; i < 5; i++) {
        check_result r;
        const op_entry *op = op_table_find(ops[i]);
        o.shapes = NULL;
        o.quick = true;
        assert_true(kernel_check_op(set, op, &o, &r) > 0);
        assert_true(r.order_stable);
        assert_true(r.pass);
    }
    assert_null(set->fingerprints);
    assert_true(fingerprint_sink_reached(prints, "gemm:bf16"));
    assert_true(fingerprint_sink_reached(prints, "all_reduce:rank-order"));
    fingerprint_sink_destroy(prints);
    set->destroy(set);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sink_reports_first_two_orders),
        cmocka_unit_test(sink_names_paths_exactly),
        cmocka_unit_test(cpu_kernels_note_the_path_taken),
        cmocka_unit_test(order_by_batch_fails_with_equal_bits),
        cmocka_unit_test(invariant_set_keeps_one_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
