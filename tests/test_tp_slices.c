// tests/test_tp_slices.c — TP-size invariance's slices (engine/tp_slices.c): tp_split's balanced
// ranges nest the 8 slices at every T dividing 8 (counts 8 does not divide too), each rank's
// slices are exactly its part, T not dividing 8 and counts under 8 are refused naming the field, and the
// fixed tree gives the same fp32 bits at T = 1, 2, 4 and 8 — the rank's levels (add_f32) and
// the all-reduce's (all_reduce_f32_tree over rank threads) together — on fresh random partials
// and on one element whose chain sum differs from its tree sum (so an order change shows), with
// the rank's levels in one sum_slices_f32 call and as add_f32 pairs alike; and the rank-order
// all-reduce (the option off) rounds its fp32 sum once, at T = 2, 3, 4 and 8.
#include <stdarg.h>                     // cmocka
#include <stddef.h>                     // cmocka
#include <stdint.h>                     // cmocka
#include <setjmp.h>                     // cmocka
#include <cmocka.h>                     // assert_*, cmocka_unit_test

#include <stdio.h>                      // printf
#include <string.h>                     // memcpy, memcmp, strstr
#include <time.h>                       // time

#include "../common/rank_threads.h"     // rank_threads_run
#include "../engine/tp_part.h"          // tp_split, tp_range
#include "../engine/tp_slices.h"        // tp_slices, tp_slices_make, tp_slices_finish
#include "../kernels/cpu/collective.h"  // tp_comm_group_create, tp_comm_group_rank
#include "test_util.h"                  // test_alloc, test_fill_f32, test_poison
#include "engine_slices_check.h"        // check_slices_one_call_equals_each

// tp_split's ranges (engine/tp_part.h): rank r holds [n*r/T, n*(r+1)/T), so the ranks partition
// [0, n) in order with counts that differ by at most one, and at T dividing 8 rank r's range is
// exactly TP_MAX = 8 slices' s = 8r/T ... 8(r+1)/T - 1 (the rule TP-size invariance rests on),
// for counts that 8 and T do not divide as well (12 heads, an odd vocabulary).
static void split_ranges_balanced_and_nested(void **state) {
    (void)state;
    static const int counts[] = {8, 9, 12, 13, 15, 100, 1408, 10946, 102401};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        int n = counts[i];
        for (int T = 1; T <= 8; T++) {
            int next = 0;
            for (int r = 0; r < T; r++) {
                tp_range g = tp_split(n, r, T);
                if (g.begin != next || g.count < n / T || g.count > n / T + 1)
                    fail_msg("n = %d, T = %d, rank %d: [%d, +%d) after %d: not the balanced range",
                             n, T, r, g.begin, g.count, next);
                next = g.begin + g.count;
                if (8 % T != 0) continue;
                tp_range first = tp_split(n, 8 * r / T, 8), last = tp_split(n, 8 * (r + 1) / T - 1, 8);
                if (first.begin != g.begin || last.begin + last.count != g.begin + g.count)
                    fail_msg("n = %d, T = %d, rank %d: [%d, %d) is not its slices' [%d, %d)", n, T,
                             r, g.begin, g.begin + g.count, first.begin, last.begin + last.count);
            }
            if (next != n) fail_msg("n = %d, T = %d: the ranges end at %d", n, T, next);
        }
    }
}

static void every_rank_holds_its_part_in_slices(void **state) {
    (void)state;
    model_config cfg;
    assert_true(model_config_by_name("tiny-tp", &cfg));
    for (int T = 1; T <= 8; T *= 2)
        for (int r = 0; r < T; r++) {
            tp_part part;
            tp_slices sl;
            char err[256];
            assert_true(tp_part_make(&cfg, r, T, &part, err, sizeof err));
            assert_true(tp_slices_make(&cfg, &part, &sl, err, sizeof err));
            assert_int_equal(sl.n, 8 / T);
            // Consecutive slices from 0 that cover the rank's part exactly.
            int heads = 0, inter = 0, moe = 0;
            for (int s = 0; s < sl.n; s++) {
                assert_int_equal(sl.heads[s].begin, heads);
                assert_int_equal(sl.inter[s].begin, inter);
                assert_int_equal(sl.moe_inter[s].begin, moe);
                assert_true(sl.heads[s].count > 0 && sl.inter[s].count > 0 && sl.moe_inter[s].count > 0);
                heads += sl.heads[s].count;
                inter += sl.inter[s].count;
                moe += sl.moe_inter[s].count;
            }
            assert_int_equal(heads, part.heads.count);
            assert_int_equal(inter, part.inter.count);
            assert_int_equal(moe, part.moe_inter.count);
        }
}

static void refused_with_the_reason(void **state) {
    (void)state;
    model_config cfg;
    tp_part part;
    tp_slices sl;
    char err[256];
    assert_true(model_config_by_name("tiny-tp", &cfg));
    assert_true(tp_part_make(&cfg, 0, 3, &part, err, sizeof err));
    assert_false(tp_slices_make(&cfg, &part, &sl, err, sizeof err));
    assert_non_null(strstr(err, "tensor_parallel 3 does not divide 8"));
    assert_true(model_config_by_name("tiny", &cfg));  // 4 heads
    assert_true(tp_part_make(&cfg, 0, 2, &part, err, sizeof err));
    assert_false(tp_slices_make(&cfg, &part, &sl, err, sizeof err));
    assert_non_null(strstr(err, "num_attention_heads 4"));
}

// ---------------------------------------------------------------------------------------------
// The tree at T = 1, 2, 4, 8
// ---------------------------------------------------------------------------------------------

enum { LEN = 1000 };

typedef struct {
    int T;
    const float *slices;        // [8, LEN]: every slice's partial
    tp_comm_group *group;
    float *sum;                 // [LEN] rank 0's fp32 sum
    bf16 *out[8];               // [LEN] each rank's rounded sum
    bool pairs;                 // the rank's levels as add_f32 pairs (no sum_slices_f32)
} tree_run;

static void rank_finish(void *arg, int rank) {
    tree_run *t = arg;
    int n = 8 / t->T;
    ops_set *o = inv_cpu_create(1);
    float *parts = test_alloc(sizeof(float) * n * LEN);
    memcpy(parts, t->slices + (long)rank * n * LEN, sizeof(float) * n * LEN);
    test_poison(t->out[rank], sizeof(bf16) * LEN);
    tp_slices_finish(o, t->T > 1 ? tp_comm_group_rank(t->group, rank) : NULL, parts, n, LEN,
                     t->out[rank], t->pairs);
    if (rank == 0) memcpy(t->sum, parts, sizeof(float) * LEN);
    free(parts);
    o->destroy(o);
}

static void same_bits_at_every_t(void **state) {
    (void)state;
    float *slices = test_alloc(sizeof(float) * 8 * LEN), sums[4][LEN];
    test_fill_f32(slices, 8L * LEN, 91, 4.0f);
    // Element 0: 1 then seven halves of its ulp. A chain rounds each addition back to 1; the
    // tree adds the small ones among themselves first: 1 + 3·2^-23.
    slices[0] = 1.0f;
    for (int s = 1; s < 8; s++) slices[(long)s * LEN] = 0x1p-24f;
    bf16 *outs = test_alloc(sizeof(bf16) * 8 * LEN);
    for (int i = 0, T = 1; T <= 8; i++, T *= 2) {
        tree_run t = {.T = T, .slices = slices, .group = tp_comm_group_create(T), .sum = sums[i],
                      .pairs = i % 2 == 1};  // T = 2 and 8: add_f32 pairs; 1 and 4: one call
        for (int r = 0; r < 8; r++) t.out[r] = outs + (long)r * LEN;
        rank_threads_run(T, rank_finish, &t);
        tp_comm_group_destroy(t.group);
        for (int r = 0; r < T; r++) {
            assert_int_equal(test_unwritten_bf16(t.out[r], LEN), 0);
            assert_memory_equal(t.out[r], t.out[0], sizeof(bf16) * LEN);
        }
        assert_memory_equal(sums[i], sums[0], sizeof(float) * LEN);
    }
    assert_true(sums[0][0] == 1.0f + 3 * 0x1p-23f);
    free(outs);
    free(slices);
}

// The rank-order all-reduce (the default, TP-size invariance off): every rank's element is
// x_0 + x_1 + ... + x_{T-1} in fp32, rounded to bf16 once, at T = 2, 3, 4 and 8. Element 0 is
// 1 on rank 0 and half a bf16 ulp of 1 on the others: a sum kept in bf16 rounds each back to 1.
typedef struct {
    tp_comm_group *group;
    bf16 *bufs[8];
} reduce_run;

static void rank_reduce(void *arg, int rank) {
    reduce_run *t = arg;
    ops_set *o = inv_cpu_create(1);
    o->all_reduce(o, tp_comm_group_rank(t->group, rank), t->bufs[rank], LEN);
    o->destroy(o);
}

static void rank_order_all_reduce_rounds_once(void **state) {
    (void)state;
    static const int Ts[] = {2, 3, 4, 8};
    bf16 *ins = test_alloc(sizeof(bf16) * 8 * LEN), *bufs = test_alloc(sizeof(bf16) * 8 * LEN);
    for (int i = 0; i < (int)(sizeof Ts / sizeof Ts[0]); i++) {
        const int T = Ts[i];
        test_fill_bf16(ins, 8L * LEN, 17 + (uint64_t)T, 2.0f);
        for (int r = 0; r < T; r++) ins[(long)r * LEN] = float_to_bf16(r == 0 ? 1.0f : 0x1p-8f);
        memcpy(bufs, ins, sizeof(bf16) * 8 * LEN);
        reduce_run t = {.group = tp_comm_group_create(T)};
        for (int r = 0; r < T; r++) t.bufs[r] = bufs + (long)r * LEN;
        rank_threads_run(T, rank_reduce, &t);
        tp_comm_group_destroy(t.group);
        for (long e = 0; e < LEN; e++) {
            float acc = bf16_to_float(ins[e]);
            for (int r = 1; r < T; r++) acc += bf16_to_float(ins[(long)r * LEN + e]);
            const bf16 want = float_to_bf16(acc);
            for (int r = 0; r < T; r++)
                if (bufs[(long)r * LEN + e] != want)
                    fail_msg("all_reduce T=%d rank %d element %ld: %g, the fp32 rank-order sum rounds to %g", T, r,
                             e, (double)bf16_to_float(bufs[(long)r * LEN + e]), (double)bf16_to_float(want));
        }
        if (T > 2) assert_true(bf16_to_float(bufs[0]) > 1.0f);  // the halves added up before rounding
    }
    free(bufs);
    free(ins);
}

// sum_slices_f32 over 2, 4 and 8 slices gives add_f32 pairs' bits in parts[0], for the tree
// element 0 holds (1 and seven halves of its ulp: a chain would round each back to 1).
// How many slices a one-call MoE form takes: all while they fit, else the largest power of two
// that does, at least one.
static void slices_per_call_fit_the_budget(void **state) {
    (void)state;
    assert_int_equal(tp_slices_per_call(8, 100.0, 800.0), 8);
    assert_int_equal(tp_slices_per_call(8, 100.0, 799.0), 4);
    assert_int_equal(tp_slices_per_call(8, 100.0, 250.0), 2);
    assert_int_equal(tp_slices_per_call(8, 100.0, 50.0), 1);
    assert_int_equal(tp_slices_per_call(2, 100.0, 150.0), 1);
    assert_int_equal(tp_slices_per_call(1, 1e12, 1.0), 1);
}

static void one_call_tree_is_the_pairs(void **state) {
    (void)state;
    ops_set *o = inv_cpu_create(2);
    float *slices = test_alloc(sizeof(float) * 8 * LEN), *one = test_alloc(sizeof(float) * 8 * LEN),
          *pairs = test_alloc(sizeof(float) * 8 * LEN);
    test_fill_f32(slices, 8L * LEN, 93, 8.0f);
    slices[0] = 1.0f;
    for (int s = 1; s < 8; s++) slices[(long)s * LEN] = 0x1p-24f;
    for (int n = 2; n <= 8; n *= 2) {
        memcpy(one, slices, sizeof(float) * 8 * LEN);
        memcpy(pairs, slices, sizeof(float) * 8 * LEN);
        o->sum_slices_f32(o, one, n, LEN);
        for (int stride = 1; stride < n; stride *= 2)
            for (int i = 0; i + stride < n; i += 2 * stride)
                o->add_f32(o, pairs + (long)i * LEN, pairs + (long)(i + stride) * LEN, LEN);
        assert_memory_equal(one, pairs, sizeof(float) * LEN);
        assert_memory_not_equal(one, slices, sizeof(float) * LEN);
    }
    assert_true(one[0] == 1.0f + 3 * 0x1p-23f);
    free(pairs);
    free(one);
    free(slices);
    o->destroy(o);
}

// The engine's one-call forms against one call a slice, on the CPU invariant set (tiny-tp: 8
// heads, so every slice one head; fresh weights and prompts each run).
static void engine_one_call_forms_equal_each_slice(void **state) {
    (void)state;
    uint64_t seed = (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    ops_set *o = inv_cpu_create(2);
    check_slices_one_call_equals_each(o, "tiny-tp", seed);
    o->destroy(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_ranges_balanced_and_nested),
        cmocka_unit_test(every_rank_holds_its_part_in_slices),
        cmocka_unit_test(refused_with_the_reason),
        cmocka_unit_test(same_bits_at_every_t),
        cmocka_unit_test(rank_order_all_reduce_rounds_once),
        cmocka_unit_test(one_call_tree_is_the_pairs),
        cmocka_unit_test(slices_per_call_fit_the_budget),
        cmocka_unit_test(engine_one_call_forms_equal_each_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
