// tests/test_ops_wrapper.c — a wrapping set (sets/ops_wrapper.h: the op tap, the profiler)
// forwards the memory ops and TP-size invariance's steps to the inner set with the inner set as
// `ops`: a set built on another (the reference sets) finds its own state through that pointer,
// so a copied function pointer called with the wrapper would read the wrapper's memory as its
// own. A recording inner set checks each call's `ops` and that its result came back.
#include <stdarg.h>                   // cmocka
#include <stddef.h>                   // cmocka
#include <stdint.h>                   // cmocka
#include <setjmp.h>                   // cmocka
#include <cmocka.h>                   // assert_*, cmocka_unit_test

#include "../sets/ops_wrapper.h"      // ops_wrapper, ops_wrapper_init

// The inner set: each op notes which set it was called with and which op it was.
typedef struct {
    ops_set base;
    const ops_set *called_with;
    const char *op;
} recording_set;

static void note(ops_set *ops, const char *op) {
    recording_set *r = (recording_set *)ops;
    r->called_with = ops;
    r->op = op;
}
static void rec_add_f32(ops_set *o, float *x, const float *y, long n) { note(o, "add_f32"); x[0] += y[0] + (float)n; }
static void rec_round(ops_set *o, bf16 *out, const float *x, long n) { note(o, "round_to_bf16"); out[0] = (bf16)(x[0] + (float)n); }
static void rec_sum(ops_set *o, float *parts, int n, long len) { note(o, "sum_slices_f32"); parts[0] = (float)(n * 10 + len); }
static void rec_tree(ops_set *o, tp_comm *c, float *buf, long n) { (void)c; note(o, "all_reduce_f32_tree"); buf[0] = (float)n; }
static void rec_sync(ops_set *o) { note(o, "sync"); }

// The last call reached the inner set as `op`, with the inner set itself; then forgotten.
static void expect_call(recording_set *r, const char *op) {
    assert_ptr_equal(r->called_with, &r->base);
    assert_string_equal(r->op, op);
    r->called_with = NULL;
}

static void every_forwarded_op_gets_the_inner_set(void **state) {
    (void)state;
    recording_set inner = {.base = {.name = "recording", .device = "cpu", .add_f32 = rec_add_f32,
                                    .round_to_bf16 = rec_round, .sum_slices_f32 = rec_sum,
                                    .all_reduce_f32_tree = rec_tree, .sync = rec_sync}};
    ops_wrapper w;
    ops_wrapper_init(&w, &inner.base);
    ops_set *o = &w.base;
    assert_string_equal(o->name, "recording");
    float x[2] = {1.0f, 0.0f}, y[2] = {2.0f, 0.0f};
    bf16 out[1] = {0};
    o->add_f32(o, x, y, 3);
    expect_call(&inner, "add_f32");
    assert_true(x[0] == 6.0f);
    o->round_to_bf16(o, out, x, 4);
    expect_call(&inner, "round_to_bf16");
    assert_int_equal(out[0], 10);
    o->sum_slices_f32(o, x, 4, 7);
    expect_call(&inner, "sum_slices_f32");
    assert_true(x[0] == 47.0f);
    o->all_reduce_f32_tree(o, NULL, x, 5);
    expect_call(&inner, "all_reduce_f32_tree");
    assert_true(x[0] == 5.0f);
    o->sync(o);
    expect_call(&inner, "sync");
}

// An op the inner set lacks stays absent, so callers take their fallback (the add_f32 pairs).
static void missing_ops_stay_missing(void **state) {
    (void)state;
    recording_set inner = {.base = {.name = "bare", .device = "cpu", .sync = rec_sync}};
    ops_wrapper w;
    ops_wrapper_init(&w, &inner.base);
    assert_null(w.base.add_f32);
    assert_null(w.base.round_to_bf16);
    assert_null(w.base.sum_slices_f32);
    assert_null(w.base.all_reduce_f32_tree);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_forwarded_op_gets_the_inner_set),
        cmocka_unit_test(missing_ops_stay_missing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
