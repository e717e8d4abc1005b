// tests/test_inv_cpu_logprobs.c — the invariant CPU log-softmax, sampling and top-k: accuracy
// against float64, tie rules, NaN rows, every output written, and bitwise invariance of a row across
// batch size, position, neighbours and thread count.
//
// Tolerances: token and top-k ids exactly the float64 ones; logprobs (fp32) are x − lse with
// lse from an fp32 sum of exponentials → relative L2 < 1e-5.
#include <math.h>                   // isnan, expf, logf, INFINITY, NAN
#include <stdarg.h>                 // cmocka
#include <string.h>                 // memcmp
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test

#include "../kernels/f64/f64.h"     // f64_logprobs, f64_rel_l2_f32
#include "test_util.h"              // test_cpu_set, test_fill_*, test_check_row_invariance

#define TOL_F32 1e-5

enum { V = 1003, K = 5 };           // V mod 8 = 3: the tail of the lanes

// Outputs of one call.
typedef struct {
    int32_t token[16], topk_ids[16 * K];
    float token_logprob[16], topk_logprobs[16 * K];
} results;

static logprobs_args args_for(const float *logits, int R, const float *temp, const uint64_t *seed,
                              const int32_t *pos, results *r) {
    return (logprobs_args){.logits = logits, .R = R, .V = V, .k = K, .temperature = temp,
                           .noise_seed = seed, .position = pos, .token = r->token,
                           .token_logprob = r->token_logprob, .topk_ids = r->topk_ids,
                           .topk_logprobs = r->topk_logprobs};
}

static void test_accuracy(void **state) {
    (void)state;
    enum { R = 9 };
    float *logits = test_alloc(sizeof(float) * R * V);
    double *lp = test_alloc(sizeof(double) * R * V);
    float temp[R] = {0, 0.7f, 1.3f, 0, 1.0f, 0.2f, 2.0f, 0, 1.0f};
    uint64_t seed[R];
    int32_t pos[R], want_token[R], want_topk[R * K];
    test_fill_f32(logits, R * V, 1, 4.0f);
    for (int r = 0; r < R; r++) {
        seed[r] = 1000 + (uint64_t)r;
        pos[r] = 17 * r;
    }
    results got;
    logprobs_args a = args_for(logits, R, temp, seed, pos, &got);
    f64_logprobs(&a, lp, want_token, want_topk);
    double want_token_lp[R], want_topk_lp[R * K];
    for (int r = 0; r < R; r++) {
        want_token_lp[r] = lp[(long)r * V + want_token[r]];
        for (int j = 0; j < K; j++) want_topk_lp[r * K + j] = lp[(long)r * V + want_topk[r * K + j]];
    }
    for (int s = 0; s < TEST_N_THREADS; s++) {
        test_poison(&got, sizeof got);
        ops_set *ops = test_cpu_set(s);
        ops->logprobs(ops, &a);
        assert_int_equal(test_unwritten_i32(got.token, R), 0);
        assert_int_equal(test_unwritten_f32(got.token_logprob, R), 0);
        assert_int_equal(test_unwritten_i32(got.topk_ids, R * K), 0);
        assert_int_equal(test_unwritten_f32(got.topk_logprobs, R * K), 0);
        assert_memory_equal(got.token, want_token, sizeof want_token);
        assert_memory_equal(got.topk_ids, want_topk, sizeof want_topk);
        assert_true(f64_rel_l2_f32(got.token_logprob, want_token_lp, R) < TOL_F32);
        assert_true(f64_rel_l2_f32(got.topk_logprobs, want_topk_lp, R * K) < TOL_F32);
    }
    // Sampling with a temperature must not always be the argmax (the noise is there).
    int differs = 0;
    for (int r = 0; r < R; r++) differs += temp[r] != 0 && got.token[r] != got.topk_ids[r * K];
    assert_true(differs > 0);
    free(lp);
    free(logits);
}

// Ties: greedy takes the lower id, top-k lists equal logits lower id first.
static void test_ties(void **state) {
    (void)state;
    float *logits = test_alloc(sizeof(float) * V);
    test_fill_f32(logits, V, 2, 1.0f);
    logits[700] = logits[300] = logits[900] = 9.0f;   // three-way tie for the top
    logits[5] = logits[6] = 8.0f;                     // and a tie just below
    float temp = 0;
    uint64_t seed = 1;
    int32_t pos = 0;
    results got;
    logprobs_args a = args_for(logits, 1, &temp, &seed, &pos, &got);
    ops_set *ops = test_cpu_set(1);
    ops->logprobs(ops, &a);
    assert_int_equal(got.token[0], 300);
    int32_t want[K] = {300, 700, 900, 5, 6};
    assert_memory_equal(got.topk_ids, want, sizeof want);
    assert_memory_equal(&got.topk_logprobs[0], &got.topk_logprobs[1], sizeof(float));
    assert_memory_equal(&got.token_logprob[0], &got.topk_logprobs[0], sizeof(float));
    free(logits);
}

// Runs R rows (R <= 16) and holds every logprob to the log-sum-exp in the documented order
// (test_lanes_order_sum: lanes.h's 8 lanes by id mod 8, its fixed tree, then the tail).
static void check_documented_order(const float *logits, int R) {
    float temp[16] = {0}, term[V];
    uint64_t seed[16] = {0};
    int32_t pos[16] = {0};
    results got;
    test_poison(&got, sizeof got);
    logprobs_args a = args_for(logits, R, temp, seed, pos, &got);
    ops_set *ops = test_cpu_set(1);
    ops->logprobs(ops, &a);
    for (int r = 0; r < R; r++) {
        const float *x = logits + (long)r * V;
        float max = -INFINITY;
        for (int v = 0; v < V; v++) max = x[v] > max ? x[v] : max;
        for (int v = 0; v < V; v++) term[v] = expf(x[v] - max);
        const float lse = max + logf(test_lanes_order_sum(term, V));
        const float want = x[got.token[r]] - lse;
        if (memcmp(&want, &got.token_logprob[r], sizeof want) != 0)
            fail_msg("row %d: logprob %.9g, the documented order gives %.9g", r, (double)got.token_logprob[r],
                     (double)want);
        for (int j = 0; j < K; j++) {
            const float want_j = x[got.topk_ids[r * K + j]] - lse;
            assert_memory_equal(&want_j, &got.topk_logprobs[r * K + j], sizeof want_j);
        }
    }
}

// The log-sum-exp in the documented order, bit for bit; a tolerance against float64 cannot see
// another order, nor can invariance (a wrong order is the same wrong order at every batch size).
// Plain rows, and rows whose largest logit is 0 with the rest in [-12, -4]: there the sum is
// about 3 and the lse about 1.2, so a sum one ulp off moves the lse by about half an ulp and
// shows in a row's bits often (on plain rows the lse is larger and hides most such sums).
static void test_documented_order(void **state) {
    (void)state;
    enum { R = 12, PEAKED = 16, ROUNDS = 4 };
    float *logits = test_alloc(sizeof(float) * PEAKED * V);
    test_fill_f32(logits, R * V, 11, 3.0f);
    for (int r = 0; r < R; r++) logits[(long)r * V + V - 1 - r % 3] = 4.0f;  // a large tail term
    check_documented_order(logits, R);
    for (int round = 0; round < ROUNDS; round++) {
        test_fill_f32(logits, PEAKED * V, 40 + (uint64_t)round, 4.0f);
        for (long i = 0; i < (long)PEAKED * V; i++) logits[i] = -8.0f + logits[i];
        for (int r = 0; r < PEAKED; r++) logits[(long)r * V + (r * 61 + round * 7) % V] = 0.0f;
        check_documented_order(logits, PEAKED);
    }
    free(logits);
}

// NaN logits are never a candidate, as on CUDA: a row of NaNs samples id -1 with a NaN logprob
// (greedy and sampled) and its top-k slots are -1 / -inf; a row whose id 0 alone is NaN samples
// the argmax of the rest; a row of -inf samples id 0.
static void test_nan_rows(void **state) {
    (void)state;
    enum { R = 4 };
    float *logits = test_alloc(sizeof(float) * R * V);
    test_fill_f32(logits, R * V, 7, 4.0f);
    for (int v = 0; v < V; v++) logits[v] = logits[V + v] = NAN;   // rows 0 (greedy), 1 (sampled)
    logits[2 * V] = NAN;                                             // row 2: id 0 alone
    for (int v = 0; v < V; v++) logits[3 * V + v] = -INFINITY;       // row 3
    float temp[R] = {0, 0.8f, 0, 0};
    uint64_t seed[R] = {1, 2, 3, 4};
    int32_t pos[R] = {0, 5, 9, 11};
    results got;
    test_poison(&got, sizeof got);
    logprobs_args a = args_for(logits, R, temp, seed, pos, &got);
    ops_set *ops = test_cpu_set(1);
    ops->logprobs(ops, &a);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(got.token[r], -1);
        if (!isnan(got.token_logprob[r])) fail_msg("row %d of NaNs: logprob %g", r, (double)got.token_logprob[r]);
        for (int j = 0; j < K; j++) {
            assert_int_equal(got.topk_ids[r * K + j], -1);
            assert_true(got.topk_logprobs[r * K + j] == -INFINITY);
        }
    }
    int best = 1;
    for (int v = 2; v < V; v++) best = logits[2 * V + v] > logits[2 * V + best] ? v : best;
    assert_int_equal(got.token[2], best);
    assert_int_equal(got.topk_ids[2 * K], best);
    for (int j = 0; j < K; j++) assert_int_not_equal(got.topk_ids[2 * K + j], 0);
    assert_int_equal(got.token[3], 0);
    free(logits);
}

// ---------------------------------------------------------------------------------------------
// Invariance. Input row: V logits, temperature, noise seed, position.
// Output row: token, token logprob, K ids, K logprobs.
// ---------------------------------------------------------------------------------------------

enum {
    IN_ROW = sizeof(float) * V + sizeof(float) + sizeof(uint64_t) + sizeof(int32_t),
    OUT_ROW = 4 * (2 + 2 * K),
};

static void fill_rows(void *rows, size_t bytes, uint64_t seed) {
    unsigned char *b = rows;
    for (size_t t = 0; t < bytes / IN_ROW; t++) {
        unsigned char *r = b + t * IN_ROW;
        test_fill_f32((float *)r, V, seed * 1000 + t, 4.0f);
        float temp = (seed + t) % 2 ? 0.0f : 0.8f;
        uint64_t noise = seed * 31 + t;
        int32_t pos = (int32_t)(seed % 1000 + t);
        memcpy(r + sizeof(float) * V, &temp, sizeof temp);
        memcpy(r + sizeof(float) * (V + 1), &noise, sizeof noise);
        memcpy(r + sizeof(float) * (V + 1) + sizeof noise, &pos, sizeof pos);
    }
}

static void run_rows(void *ctx, int set, const void *in, void *out, int M) {
    (void)ctx;
    float *logits = test_alloc(sizeof(float) * M * V), *temp = test_alloc(sizeof(float) * M);
    uint64_t *seed = test_alloc(sizeof(uint64_t) * M);
    int32_t *pos = test_alloc(sizeof(int32_t) * M);
    int32_t *token = test_alloc(sizeof(int32_t) * M), *ids = test_alloc(sizeof(int32_t) * M * K);
    float *token_lp = test_alloc(sizeof(float) * M), *topk_lp = test_alloc(sizeof(float) * M * K);
    const unsigned char *b = in;
    for (int t = 0; t < M; t++) {
        const unsigned char *r = b + (size_t)t * IN_ROW;
        memcpy(logits + (long)t * V, r, sizeof(float) * V);
        memcpy(&temp[t], r + sizeof(float) * V, sizeof(float));
        memcpy(&seed[t], r + sizeof(float) * (V + 1), sizeof(uint64_t));
        memcpy(&pos[t], r + sizeof(float) * (V + 1) + sizeof(uint64_t), sizeof(int32_t));
    }
    test_poison(token, sizeof(int32_t) * M);
    test_poison(ids, sizeof(int32_t) * M * K);
    test_poison(token_lp, sizeof(float) * M);
    test_poison(topk_lp, sizeof(float) * M * K);
    logprobs_args a = {.logits = logits, .R = M, .V = V, .k = K, .temperature = temp,
                       .noise_seed = seed, .position = pos, .token = token,
                       .token_logprob = token_lp, .topk_ids = ids, .topk_logprobs = topk_lp};
    ops_set *ops = test_cpu_set(set);
    ops->logprobs(ops, &a);
    unsigned char *o = out;
    for (int t = 0; t < M; t++) {
        unsigned char *r = o + (size_t)t * OUT_ROW;
        memcpy(r, &token[t], 4);
        memcpy(r + 4, &token_lp[t], 4);
        memcpy(r + 8, ids + t * K, 4 * K);
        memcpy(r + 8 + 4 * K, topk_lp + t * K, 4 * K);
    }
    free(topk_lp);
    free(token_lp);
    free(ids);
    free(token);
    free(pos);
    free(seed);
    free(temp);
    free(logits);
}

static void test_row_invariance(void **state) {
    (void)state;
    for (uint64_t seed = 41; seed <= 42; seed++) {   // one greedy row, one sampled row
        test_row_check c = {"logprobs", run_rows, NULL, fill_rows, IN_ROW, OUT_ROW, 4,
                            TEST_N_THREADS, seed};
        assert_int_equal(test_check_row_invariance(&c, test_batch_sizes, TEST_N_BATCH_SIZES), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_nan_rows),
        cmocka_unit_test(test_documented_order),
        cmocka_unit_test(test_row_invariance),
    };
    return cmocka_run_group_tests(tests, test_cpu_sets_setup, test_cpu_sets_teardown);
}
