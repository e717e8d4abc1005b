// tests/test_op_profile.c — the per-op profile of `invar bench --profile` (harness/bench/op_profile.h)
// on the tiny synthetic model and the invariant CPU set:
//   - a run through the wrapper gives the bits of a run on the set itself (every record written,
//     bitwise equal), so profiling cannot change what it measures;
//   - every call is counted under its op and shape: one logprobs a step, one mla_attention a
//     layer and step, and every op kind of the forward pass present, with time spent;
//   - totals start again after a reset, and two identical runs count the same calls per key.
// Result buffers are poisoned first. The seed is printed; INVAR_TEST_SEED=N repeats a run.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // printf
#include <stdlib.h>   // free, getenv, strtoull
#include <string.h>   // memcmp, strncmp, strlen
#include <time.h>     // time

#include "../engine/engine.h"        // engine_create, engine_generate, engine_stats
#include "../engine/model_config.h"  // model_config_by_name
#include "../engine/weights.h"       // weights_synthetic
#include "../harness/bench/op_profile.h" // op_profile_*
#include "test_util.h"               // test_alloc, test_poison, test_count_poisoned, test_rng

enum { REQS = 3, MAX_NEW = 6, TOP_K = 4, PROMPT_MAX = 40 };

typedef struct {
    uint64_t seed;
    model_config cfg;
    weight_source *src;
    ops_set *ops;
    int32_t prompts[REQS][PROMPT_MAX];
    engine_request reqs[REQS];
} fixture;

static int setup(void **state) {
    fixture *f = test_alloc(sizeof *f);
    const char *fixed = getenv("INVAR_TEST_SEED");
    f->seed = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL);
    printf("test_op_profile: seed %llu (INVAR_TEST_SEED repeats it)\n", (unsigned long long)f->seed);
    assert_true(model_config_by_name("tiny", &f->cfg));
    f->src = weights_synthetic(&f->cfg, f->seed);
    f->ops = inv_cpu_create(2);
    test_rng rng = test_rng_make(f->seed);
    for (int i = 0; i < REQS; i++) {
        int len = 8 + (int)test_below(&rng, PROMPT_MAX - 8);
        for (int p = 0; p < len; p++) f->prompts[i][p] = (int32_t)test_below(&rng, f->cfg.vocab_size);
        f->reqs[i] = (engine_request){.prompt = f->prompts[i], .prompt_len = len, .max_new_tokens = MAX_NEW,
                                      .temperature = i == 1 ? 0.7f : 0.0f, .seed = (uint64_t)i};
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    f->ops->destroy(f->ops);
    f->src->destroy(f->src);
    free(f);
    return 0;
}

// The requests run together on `ops` from a fresh engine; records into steps (poisoned first).
static engine_stats generate(fixture *f, ops_set *ops, engine_step_record (*steps)[MAX_NEW]) {
    engine_limits lim = {.max_num_seqs = REQS, .max_num_batched_tokens = 64, .max_model_len = PROMPT_MAX + MAX_NEW,
                         .max_total_tokens = REQS * (PROMPT_MAX + MAX_NEW), .block_size = 16};
    engine_sched sched = {.max_num_seqs = REQS, .max_num_batched_tokens = 64, .chunked_prefill = true,
                          .top_k = TOP_K};
    engine *e = engine_create(&f->cfg, f->src, ops, &lim, f->seed);
    engine_result results[REQS];
    test_poison(steps, sizeof(engine_step_record) * REQS * MAX_NEW);
    for (int i = 0; i < REQS; i++) results[i] = (engine_result){.steps = steps[i]};
    char err[512];
    engine_stats st;
    if (!engine_generate(e, f->reqs, REQS, &sched, results, &st, err, sizeof err)) fail_msg("generate: %s", err);
    for (int i = 0; i < REQS; i++) {
        assert_int_equal(results[i].n_steps, MAX_NEW);
        for (int s = 0; s < MAX_NEW; s++)
            if (steps[i][s].token < 0 || test_count_poisoned(&steps[i][s].logprob, sizeof(float), 1) != 0 ||
                test_count_poisoned(steps[i][s].topk_logprobs, sizeof(float), TOP_K) != 0)
                fail_msg("request %d: record %d not written", i, s);
    }
    engine_destroy(e);
    return st;
}

static const op_profile_entry *find(const op_profile_entry *t, int n, const char *prefix) {
    for (int i = 0; i < n; i++)
        if (strncmp(t[i].key, prefix, strlen(prefix)) == 0) return &t[i];
    return NULL;
}

static long calls_of(const op_profile_entry *t, int n, const char *prefix) {
    long calls = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(t[i].key, prefix, strlen(prefix)) == 0) calls += t[i].calls;
    return calls;
}

static void test_profiled_run_same_bits(void **state) {
    fixture *f = *state;
    engine_step_record plain[REQS][MAX_NEW], profiled[REQS][MAX_NEW];
    generate(f, f->ops, plain);
    op_profile *p = op_profile_wrap(f->ops);
    generate(f, op_profile_set(p), profiled);
    for (int i = 0; i < REQS; i++)
        for (int s = 0; s < MAX_NEW; s++)
            if (memcmp(&plain[i][s], &profiled[i][s], sizeof plain[i][s]) != 0)
                fail_msg("request %d step %d: profiled token %d logprob %a, plain %d %a", i, s, profiled[i][s].token,
                         (double)profiled[i][s].logprob, plain[i][s].token, (double)plain[i][s].logprob);
    op_profile_destroy(p);
}

static void test_every_call_counted(void **state) {
    fixture *f = *state;
    engine_step_record steps[REQS][MAX_NEW];
    op_profile *p = op_profile_wrap(f->ops);
    engine_stats st = generate(f, op_profile_set(p), steps);
    int n = 0;
    const op_profile_entry *t = op_profile_totals(p, &n);
    assert_true(n > 0);
    // Every step samples (the prompts fit the budget): one logprobs a step, one MLA a layer.
    assert_int_equal(calls_of(t, n, "logprobs "), st.steps);
    assert_int_equal(calls_of(t, n, "mla_attention "), st.steps * f->cfg.num_hidden_layers);
    static const char *const kinds[] = {"embedding ", "rmsnorm ", "gemm ", "rope ", "residual_add ",
                                        "silu_mul ", "kv_cache_write ", "mla_attention ", "moe_route ",
                                        "moe_experts ", "moe_combine ", "logprobs "};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (!find(t, n, kinds[k])) fail_msg("no %s call in the profile", kinds[k]);
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        if (t[i].calls <= 0 || !(t[i].seconds >= 0.0)) fail_msg("%s: %ld calls, %g s", t[i].key, t[i].calls, t[i].seconds);
        total += t[i].seconds;
    }
    assert_true(total > 0.0);
    // Shapes are part of the key: the decode steps' projections (M = REQS at most) are apart
    // from the prefill's.
    assert_non_null(find(t, n, "gemm "));
    assert_true(calls_of(t, n, "gemm ") > find(t, n, "gemm ")->calls);
    op_profile_destroy(p);
}

static void test_reset_and_repeat(void **state) {
    fixture *f = *state;
    engine_step_record steps[REQS][MAX_NEW];
    op_profile *p = op_profile_wrap(f->ops);
    generate(f, op_profile_set(p), steps);
    int n1 = 0;
    const op_profile_entry *t1 = op_profile_totals(p, &n1);
    op_profile_entry first[256];
    assert_true(n1 > 0 && n1 <= 256);
    memcpy(first, t1, (size_t)n1 * sizeof first[0]);
    op_profile_reset(p);
    int n0 = -1;
    op_profile_totals(p, &n0);
    assert_int_equal(n0, 0);
    generate(f, op_profile_set(p), steps);
    int n2 = 0;
    const op_profile_entry *t2 = op_profile_totals(p, &n2);
    assert_int_equal(n2, n1);
    for (int i = 0; i < n1; i++) {
        assert_string_equal(t2[i].key, first[i].key);
        assert_int_equal(t2[i].calls, first[i].calls);
    }
    // Totals are read once: a second call without running anything adds nothing.
    int n3 = 0;
    const op_profile_entry *t3 = op_profile_totals(p, &n3);
    assert_int_equal(n3, n1);
    for (int i = 0; i < n1; i++) assert_int_equal(t3[i].calls, first[i].calls);
    op_profile_destroy(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_profiled_run_same_bits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_call_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset_and_repeat, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
