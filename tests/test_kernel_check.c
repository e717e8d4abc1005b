// tests/test_kernel_check.c — the kernel checker (harness/check/kernel_check.h) catches what it must:
// a set that claims invariance with an M-dependent GEMM, an op that leaves outputs unwritten,
// an op that writes into the gaps between strided rows, an inaccurate op, NaN rows that are
// the same in every batch, an all-reduce wrong on one rank only; and it passes the real
// invariant CPU set.
#include <stdarg.h>                              // cmocka
#include <stddef.h>                              // cmocka
#include <stdint.h>                              // cmocka
#include <setjmp.h>                              // cmocka
#include <cmocka.h>                              // cmocka


#include "../harness/check/kernel_check.h"       // kernel_check_op, check_opts, check_result
#include "../harness/check/op_table.h"           // op_table, op_table_find
#include "../kernels/cpu/collective.h"           // tp_comm_rank, tp_comm_size
#include "../kernels/cpu/inv_cpu.h"              // inv_cpu_create
#include "../reference/cpu/ref_cpu_ops.h"        // ref_cpu_gemm_planned, ref_gemm_plan_for
#include "../reference/cpu/ref_cpu.h"            // ref_cpu_create
#include "../adversarial/cpu/adv_cpu.h"          // adv_cpu_create

static const int small_batches[] = {2, 7, 64, 256};

static check_opts small_opts(const op_shape *shapes) {
    return (check_opts){.batch_sizes = small_batches, .n_batch_sizes = 4, .seed = 7,
                        .shapes = shapes};
}

// --- planted faults: the invariant set with one op swapped ----------------------------------

// A planted set: the invariant set's ops_set first (a planted_set * is an ops_set *), and the
// invariant RMSNorm the planted ones call.
typedef void (*rmsnorm_fn)(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                           const bf16 *w, int M, int D, float eps);

typedef struct {
    ops_set ops;
    rmsnorm_fn rmsnorm;
} planted_set;

static planted_set planted_from(const ops_set *real) { return (planted_set){*real, real->rmsnorm}; }

// Forgets the last row of every batch.
static void lazy_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                         const bf16 *w, int M, int D, float eps) {
    ((planted_set *)ops)->rmsnorm(ops, out, ld_out, x, ld_x, w, M > 1 ? M - 1 : M, D, eps);
}

// Writes its rows packed (ld D) whatever ld_out says: into the gaps, and short of the end.
static void packed_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                           const bf16 *w, int M, int D, float eps) {
    (void)ld_out;
    ((planted_set *)ops)->rmsnorm(ops, out, D, x, ld_x, w, M, D, eps);
}

// Invariant but wrong: an epsilon of 1 instead of the caller's.
static void sloppy_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                           const bf16 *w, int M, int D, float eps) {
    (void)eps;
    ((planted_set *)ops)->rmsnorm(ops, out, ld_out, x, ld_x, w, M, D, 1.0f);
}

// Claims invariance, but runs the reference GEMM with the library plan, whose K split
// depends on M.
static void planted_gemm(ops_set *ops, const gemm_args *a) {
    ref_cpu_gemm_planned(ops, a, ref_gemm_plan_for(a->M, a->N, a->K, 1));
}

static void test_planted_gemm_varies(void **state) {
    (void)state;
    ops_set *real = inv_cpu_create(2);
    ops_set planted = *real;
    planted.gemm = planted_gemm;
    static const op_shape shapes[] = {
        {.label = "576x2048", .gemm = {.N = 576, .K = 2048}, .max_M = 256}, {.label = NULL}};
    check_opts o = small_opts(shapes);
    const char *ops[] = {"gemm", "gemm_f32"};
    for (int i = 0; i < 2; i++) {
        check_result r;
        assert_int_equal(kernel_check_op(&planted, op_table_find(ops[i]), &o, &r), 1);
        assert_false(r.invariant);
        assert_false(r.pass);
        assert_true(r.first_vary_M >= 2);
        assert_true(r.accurate);  // the reference GEMM is accurate, only not invariant
        assert_true(r.written);
    }
    real->destroy(real);
}

// The checker's verdict on the invariant CPU set with its RMSNorm replaced by `planted`, at
// D = 512 with `pad` elements between rows.
static check_result check_planted_rmsnorm(rmsnorm_fn planted_rmsnorm, int pad) {
    ops_set *real = inv_cpu_create(2);
    planted_set planted = planted_from(real);
    planted.ops.rmsnorm = planted_rmsnorm;
    const op_shape shapes[] = {{.label = pad ? "D=512 ld+8" : "D=512", .rmsnorm = {.D = 512, .pad = pad}},
                               {.label = NULL}};
    check_opts o = small_opts(shapes);
    check_result r;
    kernel_check_op(&planted.ops, op_table_find("rmsnorm"), &o, &r);
    real->destroy(real);
    return r;
}

static void test_unwritten_row_fails(void **state) {
    (void)state;
    check_result r = check_planted_rmsnorm(lazy_rmsnorm, 0);
    assert_false(r.written);
    assert_false(r.pass);
}

static void test_gap_written_fails(void **state) {
    (void)state;
    check_result r = check_planted_rmsnorm(packed_rmsnorm, 8);
    assert_false(r.written);
    assert_false(r.pass);
}

static void test_inaccurate_op_fails(void **state) {
    (void)state;
    check_result r = check_planted_rmsnorm(sloppy_rmsnorm, 0);
    assert_true(r.invariant);
    assert_false(r.accurate);
    assert_true(r.err > r.tol);
    assert_false(r.pass);
}

// Invariant NaN: every row NaN in every batch (bitwise stable), so only the accuracy check can
// fail it, and a NaN error must not compare its way past the tolerance.
static void nan_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                        const bf16 *w, int M, int D, float eps) {
    ((planted_set *)ops)->rmsnorm(ops, out, ld_out, x, ld_x, w, M, D, eps);
    long ld = ld_out ? ld_out : D;
    for (int m = 0; m < M; m++)
        for (int i = 0; i < D; i++) out[m * ld + i] = 0x7fc0;  // bf16 quiet NaN
}

static void test_nan_rows_fail(void **state) {
    (void)state;
    check_result r = check_planted_rmsnorm(nan_rmsnorm, 0);
    assert_true(r.invariant);
    assert_true(r.written);
    assert_false(r.accurate);
    assert_false(r.pass);
}

// Every op of the table on the real invariant CPU set, its --quick shapes, small batches.
static void test_invariant_cpu_set_passes(void **state) {
    (void)state;
    ops_set *ops = inv_cpu_create(2);
    check_opts o = small_opts(NULL);
    o.quick = true;
    int ops_checked = 0;
    for (const op_entry *op = op_table(); op->name; op++) {
        check_result r;
        int shapes = kernel_check_op(ops, op, &o, &r);
        assert_true(shapes >= 1);
        if (!r.pass) fail_msg("%s: invariant %d (M=%d) err %g tol %g written %d", op->name,
                              r.invariant, r.first_vary_M, r.err, r.tol, r.written);
        assert_true(r.invariant);
        assert_true(r.written);
        assert_true(r.err <= r.tol);
        ops_checked++;
    }
    assert_int_equal(ops_checked, 19);
    ops->destroy(ops);
}

static void test_table_lookup(void **state) {
    (void)state;
    assert_non_null(op_table_find("mla_attention"));
    assert_null(op_table_find("no_such_op"));
    for (const op_entry *op = op_table(); op->name; op++) {
        assert_ptr_equal(op_table_find(op->name), op);
        assert_non_null(op->cpu_shapes[0].label);
        // Every op has CUDA shapes but TP-size invariance's fp32 forms, which the CUDA sets do
        // not have yet.
        if (!op->tp_size_form) assert_non_null(op->cuda_shapes[0].label);
    }
}

// The all-reduce's negative control: the ring (reference) and the size-hashed ring
// (adversarial) are caught at every shape with T >= 3 ranks, and at T = 2, where two addends
// commute, neither can be (nor has to be).
static void test_all_reduce_caught_from_three_ranks(void **state) {
    (void)state;
    const op_entry *op = op_table_find("all_reduce");
    assert_non_null(op);
    ops_set *sets[] = {ref_cpu_create(1), adv_cpu_create(1)};
    for (int s = 0; s < 2; s++) {
        for (int i = 0; op->cpu_shapes[i].label; i++) {
            const op_shape *shape = &op->cpu_shapes[i];
            check_opts o = small_opts(NULL);
            check_result r;
            kernel_check_shape(sets[s], op, shape, i, &o, &r);
            if (shape->all_reduce.T >= 3) {
                assert_true(shape->must_vary);
                if (r.invariant) fail_msg("%s: %s not caught", sets[s]->name, shape->label);
            } else {
                assert_true(r.invariant);
            }
            assert_true(r.pass);
        }
        sets[s]->destroy(sets[s]);
    }
}

// Batch-stable but wrong on its last rank (every value's sign flipped there): the accuracy
// check must read every rank's row, not rank 0's alone.
typedef struct {
    ops_set ops;
    void (*all_reduce)(ops_set *ops, tp_comm *comm, bf16 *buf, long n);
} planted_collective;

static void last_rank_negated_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    ((planted_collective *)ops)->all_reduce(ops, comm, buf, n);
    if (tp_comm_rank(comm) == tp_comm_size(comm) - 1)
        for (long i = 0; i < n; i++) buf[i] ^= 0x8000;
}

static void test_all_reduce_wrong_on_one_rank_fails(void **state) {
    (void)state;
    ops_set *real = inv_cpu_create(1);
    planted_collective planted = {*real, real->all_reduce};
    planted.ops.all_reduce = last_rank_negated_all_reduce;
    const op_entry *op = op_table_find("all_reduce");
    assert_non_null(op);
    for (int i = 0; op->cpu_shapes[i].label; i++) {
        check_opts o = small_opts(NULL);
        check_result r;
        kernel_check_shape(&planted.ops, op, &op->cpu_shapes[i], i, &o, &r);
        if (r.accurate || r.pass)
            fail_msg("%s: the last rank's wrong sums passed (err %g, tol %g)",
                     op->cpu_shapes[i].label, r.err, r.tol);
        assert_true(r.invariant);
    }
    real->destroy(real);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_lookup),
        cmocka_unit_test(test_all_reduce_caught_from_three_ranks),
        cmocka_unit_test(test_all_reduce_wrong_on_one_rank_fails),
        cmocka_unit_test(test_planted_gemm_varies),
        cmocka_unit_test(test_unwritten_row_fails),
        cmocka_unit_test(test_gap_written_fails),
        cmocka_unit_test(test_inaccurate_op_fails),
        cmocka_unit_test(test_nan_rows_fail),
        cmocka_unit_test(test_invariant_cpu_set_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
