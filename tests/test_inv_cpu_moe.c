// tests/test_inv_cpu_moe.c — the invariant CPU MoE ops: routing (every HF gate variant),
// routed experts and combine. Accuracy against float64, every output written, and bitwise
// invariance of a token whatever other tokens share the step (for the experts, the others
// change how many rows each expert gets) and whatever the thread count.
//
// Tolerances:
//   moe_route ids: exactly the float64 choice (the data has no near ties at fp32 precision);
//     weights (fp32): fp32 logits, scores and normalization → relative L2 < 1e-5;
//   moe_experts (bf16): four bf16 roundings along the chain (gate_up, silu, product, down),
//     each ≤ 2^-9 relative → relative L2 < 1e-2;
//   moe_combine (bf16): fp32 products and sum, one bf16 rounding → relative L2 < 4e-3;
//   their fp32 forms: rounded, bitwise the bf16 forms' values.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test

#include "../kernels/f64/f64.h"     // f64_moe_*, f64_rel_l2_*
#include "../sets/registry.h"      // kernel_set_create
#include "test_util.h"              // test_cpu_set, test_fill_*, test_check_row_invariance

#define TOL_F32 1e-5
#define TOL_EXPERTS 1e-2
#define TOL_COMBINE 4e-3

// ---------------------------------------------------------------------------------------------
// moe_route
// ---------------------------------------------------------------------------------------------

enum { RD = 203, RE = 16, RK = 4 };   // hidden (tail of 3), experts, top-k

static bf16 gate_w[RE * RD];
static float bias[RE];

typedef struct {
    const char *name;
    enum moe_scoring scoring;
    enum moe_topk_method method;
    int n_group, topk_group, k;
    bool norm, use_bias;
    float rsf;
} gate_variant;

static const gate_variant variants[] = {
    {"v2 softmax greedy", MOE_SCORING_SOFTMAX, MOE_TOPK_GREEDY, 1, 1, RK, false, false, 1.0f},
    {"v2 softmax greedy norm", MOE_SCORING_SOFTMAX, MOE_TOPK_GREEDY, 1, 1, RK, true, false, 16.0f},
    {"v2 softmax greedy k=1 norm", MOE_SCORING_SOFTMAX, MOE_TOPK_GREEDY, 1, 1, 1, true, false, 2.0f},
    {"v2 group_limited_greedy", MOE_SCORING_SOFTMAX, MOE_TOPK_GROUP_LIMITED_GREEDY, 4, 2, RK, false, false, 16.0f},
    {"v3 sigmoid noaux_tc", MOE_SCORING_SIGMOID, MOE_TOPK_NOAUX_TC, 4, 2, RK, true, true, 2.5f},
    {"v3 sigmoid noaux_tc k=1", MOE_SCORING_SIGMOID, MOE_TOPK_NOAUX_TC, 4, 2, 1, true, true, 2.5f},
    {"v3 sigmoid noaux_tc no norm", MOE_SCORING_SIGMOID, MOE_TOPK_NOAUX_TC, 8, 3, RK, false, true, 2.5f},
};
#define N_VARIANTS (int)(sizeof variants / sizeof variants[0])

static moe_route_args route_args(const gate_variant *g, const bf16 *x, int T, int32_t *ids, float *w) {
    return (moe_route_args){.topk_ids = ids, .topk_weights = w, .x = x, .gate_w = gate_w,
                            .correction_bias = g->use_bias ? bias : NULL, .T = T, .D = RD, .E = RE,
                            .k = g->k, .scoring = g->scoring, .topk_method = g->method,
                            .n_group = g->n_group, .topk_group = g->topk_group,
                            .norm_topk_prob = g->norm, .routed_scaling_factor = g->rsf};
}

static void fill_gate(void) {
    test_fill_bf16(gate_w, RE * RD, 1, 0.2f);
    test_fill_f32(bias, RE, 2, 0.3f);   // large enough to change choices, some negative
}

static void test_route_accuracy(void **state) {
    (void)state;
    enum { T = 50 };
    fill_gate();
    bf16 *x = test_alloc(sizeof(bf16) * T * RD);
    test_fill_bf16(x, T * RD, 3, 1.0f);
    int32_t ids[T * RK], want_ids[T * RK];
    float w[T * RK];
    double want_w[T * RK];
    for (int v = 0; v < N_VARIANTS; v++) {
        const gate_variant *g = &variants[v];
        moe_route_args a = route_args(g, x, T, ids, w);
        f64_moe_route(&a, want_ids, want_w);
        for (int s = 0; s < TEST_N_THREADS; s++) {
            test_poison(ids, sizeof ids);
            test_poison(w, sizeof w);
            ops_set *ops = test_cpu_set(s);
            ops->moe_route(ops, &a);
            assert_int_equal(test_unwritten_i32(ids, T * g->k), 0);
            assert_int_equal(test_unwritten_f32(w, T * g->k), 0);
            if (memcmp(ids, want_ids, sizeof(int32_t) * T * g->k) != 0) {
                fprintf(stderr, "moe_route %s: ids differ from float64\n", g->name);
                fail();
            }
            assert_true(f64_rel_l2_f32(w, want_w, T * g->k) < TOL_F32);
        }
    }
    free(x);
}

static const gate_variant *route_variant;

// Output row: k ids then k weights.
static void run_route(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    int k = route_variant->k;
    int32_t *ids = test_alloc(sizeof(int32_t) * M * k);
    float *w = test_alloc(sizeof(float) * M * k);
    test_poison(ids, sizeof(int32_t) * M * k);
    test_poison(w, sizeof(float) * M * k);
    moe_route_args a = route_args(route_variant, in, M, ids, w);
    ops_set *ops = test_cpu_set(set);
    ops->moe_route(ops, &a);
    unsigned char *o = out;
    for (int t = 0; t < M; t++) {
        memcpy(o + (size_t)t * 8 * k, ids + t * k, sizeof(int32_t) * k);
        memcpy(o + (size_t)t * 8 * k + 4 * k, w + t * k, sizeof(float) * k);
    }
    free(w);
    free(ids);
}

static void test_route_invariance(void **state) {
    (void)state;
    fill_gate();
    for (int v = 0; v < N_VARIANTS; v++) {
        route_variant = &variants[v];
        test_row_check c = {variants[v].name, run_route, NULL, test_fill_bytes_bf16, sizeof(bf16) * RD,
                            (size_t)8 * variants[v].k, 4, TEST_N_THREADS, 100 + (uint64_t)v};
        assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// moe_experts
// ---------------------------------------------------------------------------------------------

enum { XD = 100, XI = 52, XE = 8, XK = 3 };   // hidden and expert width with tails, experts, k

static bf16 w_gate_up[XE * 2 * XI * XD], w_down[XE * XD * XI];

static void fill_experts(void) {
    test_fill_bf16(w_gate_up, XE * 2 * XI * XD, 11, 0.25f);
    test_fill_bf16(w_down, XE * XD * XI, 12, 0.25f);
}

static void test_experts_accuracy(void **state) {
    (void)state;
    enum { T = 21 };
    fill_experts();
    bf16 *x = test_alloc(sizeof(bf16) * T * XD), *out = test_alloc(sizeof(bf16) * T * XK * XD);
    int32_t ids[T * XK];
    double *ref = test_alloc(sizeof(double) * T * XK * XD);
    test_fill_bf16(x, T * XD, 13, 1.0f);
    test_fill_i32(ids, T * XK, 14, 0, XE - 1);
    ids[0] = ids[1] = ids[2] = 5;   // a token may even repeat an expert: rows stay separate
    moe_experts_args a = {.out = out, .x = x, .topk_ids = ids, .w_gate_up = w_gate_up,
                          .w_down = w_down, .T = T, .k = XK, .E = XE, .D = XD, .I = XI};
    f64_moe_experts(&a, ref);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(out, sizeof(bf16) * T * XK * XD);
        ops_set *ops = test_cpu_set(s);
        ops->moe_experts(ops, &a);
        assert_int_equal(test_unwritten_bf16(out, (long)T * XK * XD), 0);
        for (int r = 0; r < T * XK; r++)
            assert_true(f64_rel_l2_bf16(out + (long)r * XD, ref + (long)r * XD, XD) < TOL_EXPERTS);
    }
    free(ref);
    free(out);
    free(x);
}

// Input row: XD values of x, then XK expert ids (stored in the bytes of 2·XK bf16 values).
enum { EXPERT_ROW = sizeof(bf16) * XD + sizeof(int32_t) * XK };

static void fill_expert_rows(void *rows, size_t bytes, uint64_t seed) {
    unsigned char *b = rows;
    for (size_t t = 0; t < bytes / EXPERT_ROW; t++) {
        test_fill_bf16((bf16 *)(b + t * EXPERT_ROW), XD, seed * 1000 + t, 1.0f);
        int32_t ids[XK];
        test_fill_i32(ids, XK, seed * 1000 + t + 500, 0, XE - 1);
        memcpy(b + t * EXPERT_ROW + sizeof(bf16) * XD, ids, sizeof ids);
    }
}

static void run_experts(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    bf16 *x = test_alloc(sizeof(bf16) * M * XD);
    int32_t *ids = test_alloc(sizeof(int32_t) * M * XK);
    const unsigned char *b = in;
    for (int t = 0; t < M; t++) {
        memcpy(x + (long)t * XD, b + (size_t)t * EXPERT_ROW, sizeof(bf16) * XD);
        memcpy(ids + t * XK, b + (size_t)t * EXPERT_ROW + sizeof(bf16) * XD, sizeof(int32_t) * XK);
    }
    moe_experts_args a = {.out = out, .x = x, .topk_ids = ids, .w_gate_up = w_gate_up,
                          .w_down = w_down, .T = M, .k = XK, .E = XE, .D = XD, .I = XI};
    ops_set *ops = test_cpu_set(set);
    ops->moe_experts(ops, &a);
    free(ids);
    free(x);
}

static void test_experts_invariance(void **state) {
    (void)state;
    fill_experts();
    test_row_check c = {"moe_experts", run_experts, NULL, fill_expert_rows, EXPERT_ROW,
                        sizeof(bf16) * XK * XD, sizeof(bf16), TEST_N_THREADS, 15};
    assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
}

// ---------------------------------------------------------------------------------------------
// moe_combine
// ---------------------------------------------------------------------------------------------

enum { CD = 203, CK = 6, CE = 64 };

static void test_combine_accuracy(void **state) {
    (void)state;
    enum { T = 17 };
    bf16 *eo = test_alloc(sizeof(bf16) * T * CK * CD), *out = test_alloc(sizeof(bf16) * T * CD);
    float w[T * CK];
    int32_t ids[T * CK];
    double *ref = test_alloc(sizeof(double) * T * CD);
    test_fill_bf16(eo, (long)T * CK * CD, 21, 1.0f);
    test_fill_f32(w, T * CK, 22, 1.0f);
    test_fill_i32(ids, T * CK, 23, 0, CE - 1);
    moe_combine_args a = {.out = out, .expert_out = eo, .topk_weights = w, .topk_ids = ids,
                          .T = T, .k = CK, .D = CD, .E = CE};
    f64_moe_combine(&a, ref);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(out, sizeof(bf16) * T * CD);
        ops_set *ops = test_cpu_set(s);
        ops->moe_combine(ops, &a);
        assert_int_equal(test_unwritten_bf16(out, (long)T * CD), 0);
        assert_true(f64_rel_l2_bf16(out, ref, (long)T * CD) < TOL_COMBINE);
    }
    free(ref);
    free(out);
    free(eo);
}

// Input row: CK·CD expert outputs, CK weights, CK ids.
enum { COMBINE_ROW = sizeof(bf16) * CK * CD + sizeof(float) * CK + sizeof(int32_t) * CK };

static void fill_combine_rows(void *rows, size_t bytes, uint64_t seed) {
    unsigned char *b = rows;
    for (size_t t = 0; t < bytes / COMBINE_ROW; t++) {
        unsigned char *r = b + t * COMBINE_ROW;
        test_fill_bf16((bf16 *)r, CK * CD, seed * 1000 + t, 1.0f);
        float w[CK];
        int32_t ids[CK];
        test_fill_f32(w, CK, seed * 1000 + t + 300, 1.0f);
        test_fill_i32(ids, CK, seed * 1000 + t + 600, 0, CE - 1);
        memcpy(r + sizeof(bf16) * CK * CD, w, sizeof w);
        memcpy(r + sizeof(bf16) * CK * CD + sizeof w, ids, sizeof ids);
    }
}

static void run_combine(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    bf16 *eo = test_alloc(sizeof(bf16) * M * CK * CD);
    float *w = test_alloc(sizeof(float) * M * CK);
    int32_t *ids = test_alloc(sizeof(int32_t) * M * CK);
    const unsigned char *b = in;
    for (int t = 0; t < M; t++) {
        const unsigned char *r = b + (size_t)t * COMBINE_ROW;
        memcpy(eo + (long)t * CK * CD, r, sizeof(bf16) * CK * CD);
        memcpy(w + t * CK, r + sizeof(bf16) * CK * CD, sizeof(float) * CK);
        memcpy(ids + t * CK, r + sizeof(bf16) * CK * CD + sizeof(float) * CK, sizeof(int32_t) * CK);
    }
    moe_combine_args a = {.out = out, .expert_out = eo, .topk_weights = w, .topk_ids = ids,
                          .T = M, .k = CK, .D = CD, .E = CE};
    ops_set *ops = test_cpu_set(set);
    ops->moe_combine(ops, &a);
    free(ids);
    free(w);
    free(eo);
}

static void test_combine_invariance(void **state) {
    (void)state;
    test_row_check c = {"moe_combine", run_combine, NULL, fill_combine_rows, COMBINE_ROW,
                        sizeof(bf16) * CD, sizeof(bf16), TEST_N_THREADS, 25};
    assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
}

// ---------------------------------------------------------------------------------------------
// The fp32 forms (TP-size invariance, engine/tp_slices.h): the down projection's sums and the
// combine's, unrounded. Rounded, each equals the bf16 form's value bit for bit (the same sum,
// rounded once), and some are not bf16 values (nothing rounded them on the way).
// ---------------------------------------------------------------------------------------------

static long not_bf16_values(const float *x, long n) {
    long count = 0;
    for (long i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        count += (bits & 0xFFFFu) != 0;
    }
    return count;
}

static void test_experts_f32_form(void **state) {
    (void)state;
    enum { T = 21, N = T * XK * XD };
    fill_experts();
    bf16 *x = test_alloc(sizeof(bf16) * T * XD), *out = test_alloc(sizeof(bf16) * N),
         *rounded = test_alloc(sizeof(bf16) * N);
    float *out_f32 = test_alloc(sizeof(float) * N);
    int32_t ids[T * XK];
    test_fill_bf16(x, T * XD, 31, 1.0f);
    test_fill_i32(ids, T * XK, 32, 0, XE - 1);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        ops_set *ops = test_cpu_set(s);
        moe_experts_args a = {.out = out, .x = x, .topk_ids = ids, .w_gate_up = w_gate_up,
                              .w_down = w_down, .T = T, .k = XK, .E = XE, .D = XD, .I = XI};
        ops->moe_experts(ops, &a);
        test_poison(out_f32, sizeof(float) * N);
        a.out_f32 = out_f32;
        ops->moe_experts(ops, &a);
        assert_int_equal(test_unwritten_f32(out_f32, N), 0);
        assert_true(not_bf16_values(out_f32, N) > N / 2);
        ops->round_to_bf16(ops, rounded, out_f32, N);
        assert_memory_equal(rounded, out, sizeof(bf16) * N);
    }
    free(out_f32);
    free(rounded);
    free(out);
    free(x);
}

static void test_combine_f32_form(void **state) {
    (void)state;
    enum { T = 17 };
    bf16 *eo = test_alloc(sizeof(bf16) * T * CK * CD), *out = test_alloc(sizeof(bf16) * T * CD),
         *rounded = test_alloc(sizeof(bf16) * T * CD);
    float *eo_f32 = test_alloc(sizeof(float) * T * CK * CD), *out_f32 = test_alloc(sizeof(float) * T * CD);
    float w[T * CK];
    int32_t ids[T * CK];
    test_fill_bf16(eo, (long)T * CK * CD, 41, 1.0f);
    for (long i = 0; i < (long)T * CK * CD; i++) eo_f32[i] = bf16_to_float(eo[i]);
    test_fill_f32(w, T * CK, 42, 1.0f);
    test_fill_i32(ids, T * CK, 43, 0, CE - 1);
    for (int s = 0; s < TEST_N_THREADS; s++) {
        ops_set *ops = test_cpu_set(s);
        moe_combine_args a = {.out = out, .expert_out = eo, .topk_weights = w, .topk_ids = ids,
                              .T = T, .k = CK, .D = CD, .E = CE};
        ops->moe_combine(ops, &a);
        test_poison(out_f32, sizeof(float) * T * CD);
        a.expert_out_f32 = eo_f32;
        a.out_f32 = out_f32;
        ops->moe_combine(ops, &a);
        assert_int_equal(test_unwritten_f32(out_f32, (long)T * CD), 0);
        assert_true(not_bf16_values(out_f32, (long)T * CD) > T * CD / 2);
        ops->round_to_bf16(ops, rounded, out_f32, (long)T * CD);
        assert_memory_equal(rounded, out, sizeof(bf16) * T * CD);
    }
    free(out_f32);
    free(eo_f32);
    free(rounded);
    free(out);
    free(eo);
}

// TP-size invariance's slices in one call (ops.h, `slices`): the 8 experts' weights read as 2
// slices of 4; each slice's rows and sums equal a call of that slice alone, every value
// written, on the invariant set at each thread count and on the reference and adversarial sets.
static void test_slices_one_call(void **state) {
    (void)state;
    enum { T = 13, S = 2, E = XE / S, ROWS = T * XK * XD, SUMS = T * XD };
    fill_experts();
    bf16 *x = test_alloc(sizeof(bf16) * T * XD);
    float *one = test_alloc(sizeof(float) * S * ROWS), *each = test_alloc(sizeof(float) * S * ROWS);
    float *one_sum = test_alloc(sizeof(float) * S * SUMS), *each_sum = test_alloc(sizeof(float) * S * SUMS);
    int32_t ids[T * XK];
    float w[T * XK];
    test_fill_bf16(x, T * XD, 51, 1.0f);
    test_fill_i32(ids, T * XK, 52, 0, E - 1);
    test_fill_f32(w, T * XK, 53, 1.0f);
    ops_set *others[2] = {kernel_set_create("reference", "cpu", 1), kernel_set_create("adversarial", "cpu", 1)};
    for (int v = 0; v < TEST_N_THREADS + 2; v++) {
        ops_set *ops = v < TEST_N_THREADS ? test_cpu_set(v) : others[v - TEST_N_THREADS];
        assert_non_null(ops);
        test_poison(one, sizeof(float) * S * ROWS);
        test_poison(one_sum, sizeof(float) * S * SUMS);
        moe_experts_args a = {.x = x, .topk_ids = ids, .w_gate_up = w_gate_up, .w_down = w_down,
                              .T = T, .k = XK, .E = E, .D = XD, .I = XI, .out_f32 = one, .slices = S};
        moe_combine_args c = {.topk_weights = w, .topk_ids = ids, .T = T, .k = XK, .D = XD, .E = E,
                              .expert_out_f32 = one, .out_f32 = one_sum, .slices = S};
        ops->moe_experts(ops, &a);
        ops->moe_combine(ops, &c);
        for (int sl = 0; sl < S; sl++) {
            moe_experts_args b = a;
            b.slices = 0;
            b.w_gate_up = w_gate_up + (size_t)sl * E * 2 * XI * XD;
            b.w_down = w_down + (size_t)sl * E * XD * XI;
            b.out_f32 = each + (size_t)sl * ROWS;
            ops->moe_experts(ops, &b);
            moe_combine_args d = c;
            d.slices = 0;
            d.expert_out_f32 = b.out_f32;
            d.out_f32 = each_sum + (size_t)sl * SUMS;
            ops->moe_combine(ops, &d);
        }
        assert_int_equal(test_unwritten_f32(one, S * ROWS), 0);
        assert_int_equal(test_unwritten_f32(one_sum, S * SUMS), 0);
        assert_memory_equal(one, each, sizeof(float) * S * ROWS);
        assert_memory_equal(one_sum, each_sum, sizeof(float) * S * SUMS);
        assert_memory_not_equal(one_sum, one_sum + SUMS, sizeof(float) * SUMS);  // slices apart
    }
    others[0]->destroy(others[0]);
    others[1]->destroy(others[1]);
    free(each_sum);
    free(one_sum);
    free(each);
    free(one);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_experts_f32_form),
        cmocka_unit_test(test_combine_f32_form),
        cmocka_unit_test(test_slices_one_call),
        cmocka_unit_test(test_route_accuracy),
        cmocka_unit_test(test_route_invariance),
        cmocka_unit_test(test_experts_accuracy),
        cmocka_unit_test(test_experts_invariance),
        cmocka_unit_test(test_combine_accuracy),
        cmocka_unit_test(test_combine_invariance),
    };
    return cmocka_run_group_tests(tests, test_cpu_sets_setup, test_cpu_sets_teardown);
}
