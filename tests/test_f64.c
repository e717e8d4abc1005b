// tests/test_f64.c — the float64 oracle against values worked out by hand, so that a kernel and
// the oracle cannot agree on a misreading of ops.h (pair layouts of RoPE, HF's gate quirks,
// tie rules, log-sum-exp conventions).
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test
#include <math.h>                   // sqrt, log, exp, INFINITY, isinf

#include "../kernels/bf16.h"        // float_to_bf16
#include "../kernels/cpu/inv_cpu.h" // inv_cpu_create (the route quirk, checked on the kernel too)
#include "../kernels/f64/f64.h"     // f64_*

#define EXACT 1e-12

static void bf16_array(bf16 *out, const float *v, int n) {
    for (int i = 0; i < n; i++) out[i] = float_to_bf16(v[i]);
}

static void test_gemm(void **state) {
    (void)state;
    bf16 x[2], w[4];
    bf16_array(x, (float[]){1, 2}, 2);
    bf16_array(w, (float[]){3, 4, 5, 6}, 4);
    double y[2];
    gemm_args a = {.x = x, .w = w, .M = 1, .N = 2, .K = 2};
    f64_gemm(&a, y);
    assert_true(fabs(y[0] - 11) < EXACT && fabs(y[1] - 17) < EXACT);
}

static void test_rmsnorm(void **state) {
    (void)state;
    bf16 x[2], w[2];
    bf16_array(x, (float[]){3, 4}, 2);
    bf16_array(w, (float[]){1, 2}, 2);
    double out[2], rms = sqrt(12.5);
    f64_rmsnorm(out, x, 0, w, 1, 2, 0.0);
    assert_true(fabs(out[0] - 3 / rms) < EXACT && fabs(out[1] - 8 / rms) < EXACT);
}

static void test_rope_layouts(void **state) {
    (void)state;
    bf16 x[4];
    bf16_array(x, (float[]){1, 2, 3, 4}, 4);
    float c[2] = {0.5f, 0.25f}, s[2] = {0.75f, 0.125f};
    int32_t pos = 0;
    double out[4];
    // Interleaved pairs (x0,x1), (x2,x3), results de-interleaved.
    f64_rope(out, x, 4, 4, 1, 1, 4, &pos, c, s, true);
    double want_i[4] = {1 * .5 - 2 * .75, 3 * .25 - 4 * .125, 2 * .5 + 1 * .75, 4 * .25 + 3 * .125};
    for (int i = 0; i < 4; i++) assert_true(fabs(out[i] - want_i[i]) < EXACT);
    // rotate_half pairs (x0,x2), (x1,x3).
    f64_rope(out, x, 4, 4, 1, 1, 4, &pos, c, s, false);
    double want_h[4] = {1 * .5 - 3 * .75, 2 * .25 - 4 * .125, 3 * .5 + 1 * .75, 4 * .25 + 2 * .125};
    for (int i = 0; i < 4; i++) assert_true(fabs(out[i] - want_h[i]) < EXACT);
}

// DeepSeek-V3's gate as Hugging Face writes it: experts outside the chosen groups get choice
// score 0.0 (masked_fill), so they outrank a chosen-group expert whose biased score is
// negative. All logits are 0 (sigmoid 0.5), the bias sets the choice scores.
static void test_route_v3_masked_zero(void **state) {
    (void)state;
    enum { E = 6, K = 3 };
    bf16 x[1], gate_w[E];
    bf16_array(x, (float[]){1}, 1);
    for (int e = 0; e < E; e++) gate_w[e] = 0;
    float bias[E] = {-0.2f, -0.3f, -0.4f, 0.4f, 0.3f, -0.7f};   // choice .3 .2 .1 | .9 .8 -.2
    int32_t ids[K];
    float w[K];
    moe_route_args a = {.topk_ids = ids, .topk_weights = w, .x = x, .gate_w = gate_w,
                        .correction_bias = bias, .T = 1, .D = 1, .E = E, .k = K,
                        .scoring = MOE_SCORING_SIGMOID, .topk_method = MOE_TOPK_NOAUX_TC,
                        .n_group = 2, .topk_group = 1, .norm_topk_prob = true,
                        .routed_scaling_factor = 2.5f};
    int32_t want_ids[K];
    double want_w[K];
    f64_moe_route(&a, want_ids, want_w);
    // Group scores (top-2 sums): .5 and 1.7 -> group 1; masked choice: 0 0 0 .9 .8 -.2;
    // top 3: 3, 4, then the first masked 0.0 (lower index on ties): 0.
    assert_int_equal(want_ids[0], 3);
    assert_int_equal(want_ids[1], 4);
    assert_int_equal(want_ids[2], 0);
    for (int j = 0; j < K; j++) assert_true(fabs(want_w[j] - 2.5 / 3) < 1e-9);  // 0.5 / 1.5 · 2.5

    ops_set *o = inv_cpu_create(1);
    o->moe_route(o, &a);
    assert_memory_equal(ids, want_ids, sizeof ids);
    o->destroy(o);
}

// DeepSeek-V2's gate: softmax, greedy; not normalized -> multiplied by routed_scaling_factor.
static void test_route_v2(void **state) {
    (void)state;
    enum { E = 3, K = 2 };
    bf16 x[1], gate_w[E];
    bf16_array(x, (float[]){1}, 1);
    bf16_array(gate_w, (float[]){0, 1, 1}, E);                   // tie between 1 and 2
    int32_t ids[K];
    double w[K];
    moe_route_args a = {.x = x, .gate_w = gate_w, .T = 1, .D = 1, .E = E, .k = K,
                        .scoring = MOE_SCORING_SOFTMAX, .topk_method = MOE_TOPK_GREEDY,
                        .n_group = 1, .topk_group = 1, .norm_topk_prob = false,
                        .routed_scaling_factor = 3.0f};
    f64_moe_route(&a, ids, w);
    double p = exp(1) / (1 + 2 * exp(1));
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_true(fabs(w[0] - 3 * p) < 1e-12 && fabs(w[1] - 3 * p) < 1e-12);
}

static void test_logprobs(void **state) {
    (void)state;
    float logits[3] = {0.0f, 1.0f, 1.0f};
    float temp = 0;
    uint64_t seed = 0;
    int32_t pos = 0, token, topk[2];
    double lp[3];
    logprobs_args a = {.logits = logits, .R = 1, .V = 3, .k = 2, .temperature = &temp,
                       .noise_seed = &seed, .position = &pos};
    f64_logprobs(&a, lp, &token, topk);
    double lse = log(1 + 2 * exp(1));
    assert_true(fabs(lp[0] + lse) < EXACT && fabs(lp[1] - (1 - lse)) < EXACT);
    assert_int_equal(token, 1);                                   // tie: the lower id
    assert_int_equal(topk[0], 1);
    assert_int_equal(topk[1], 2);
}

static void test_mla_attention_two_keys(void **state) {
    (void)state;
    // L = 1, R = 1, one block of 2 slots: keys (c, k_pe) = (1, 0) and (2, 1); q = (1, 1).
    bf16 cache[4], q_lat[1], q_pe[1];
    bf16_array(cache, (float[]){1, 0, 2, 1}, 4);
    bf16_array(q_lat, (float[]){1}, 1);
    bf16_array(q_pe, (float[]){1}, 1);
    int32_t table[1] = {0}, seq = 0, p = 1, len = 2;
    mla_attention_args a = {.q_lat = q_lat, .q_pe = q_pe, .kv_cache = cache, .block_table = table,
                            .token_seq = &seq, .token_pos = &p, .seq_lens = &len, .T = 1, .H = 1,
                            .L = 1, .R = 1, .ld_out = 1, .ld_q_lat = 1, .ld_q_pe = 1,
                            .head_stride_q_pe = 1, .block_size = 2, .max_blocks_per_seq = 1,
                            .num_seqs = 1, .max_seq_len = 2, .scale = 0.5f};
    double out;
    f64_mla_attention(&a, &out);
    double s0 = 0.5 * 1, s1 = 0.5 * 3;                            // scores
    double want = (exp(s0) * 1 + exp(s1) * 2) / (exp(s0) + exp(s1));
    assert_true(fabs(out - want) < EXACT);
}

static void test_merge_and_prefill(void **state) {
    (void)state;
    bf16 a_out[1], b_out[1];
    bf16_array(a_out, (float[]){3}, 1);
    bf16_array(b_out, (float[]){5}, 1);
    float lse_a = 0.0f, lse_b = -INFINITY;
    merge_attention_args m = {.a = a_out, .b = b_out, .lse_a = &lse_a, .lse_b = &lse_b, .T = 1, .H = 1, .v = 1, .ld = 1};
    double out;
    f64_merge_attention(&m, &out);
    assert_true(out == 3.0);                                      // an empty side adds nothing
    lse_b = (float)log(3.0);
    f64_merge_attention(&m, &out);
    assert_true(fabs(out - (3 + 3 * 5) / 4.0) < 1e-7);

    // Prefill over an empty key range: 0 and -inf.
    bf16 q[2] = {0}, kv[2] = {0}, k_pe[1] = {0};
    int32_t begin = 0, end = 0;
    double o, lse;
    mha_prefill_args p = {.q = q, .kv = kv, .k_pe = k_pe, .key_begin = &begin, .key_end = &end,
                          .T = 1, .H = 1, .nope = 1, .R = 1, .v = 1, .ld_q = 2, .ld_kv = 2,
                          .ld_k_pe = 1, .scale = 1.0f};
    f64_mha_prefill(&p, &o, &lse);
    assert_true(o == 0.0 && isinf(lse) && lse < 0);
}

static void test_accuracy_helpers(void **state) {
    (void)state;
    bf16 out[2];
    bf16_array(out, (float[]){1, 2}, 2);
    assert_true(f64_rel_l2_bf16(out, (double[]){1, 2}, 2) == 0.0);
    assert_true(fabs(f64_rel_l2_bf16(out, (double[]){1, 2.5}, 2) - 0.5 / sqrt(7.25)) < EXACT);
    float f[2] = {1.0f, NAN};
    assert_true(isinf(f64_rel_l2_f32(f, (double[]){1, 2}, 2)));
    assert_int_equal(f64_count_nan_f32(f, 2), 1);
    out[1] = 0xFFFF;
    assert_int_equal(f64_count_nan_bf16(out, 2), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope_layouts),
        cmocka_unit_test(test_route_v3_masked_zero),
        cmocka_unit_test(test_route_v2),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_mla_attention_two_keys),
        cmocka_unit_test(test_merge_and_prefill),
        cmocka_unit_test(test_accuracy_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
