// tests/test_engine_long_context.c — the engine at a step of more than 4096 context tokens:
// one long prompt alone, then the same prompt prefilled in one step together with three other
// long prompts, on the invariant CPU set and the unified backend; its prompt logprobs (every
// position) and its decode steps must be bitwise equal.
//
// Why this size: the cases (cases/*.ini) never put more than 4096 context tokens in one step, and
// several batch-dependent choices only move past that — a FlashMLA-style split size taken from
// the step's total length is 64 up to 4096 tokens and 128 above (mutant
// engine-unified-split-from-batch survived every case for that reason). Prompt logprobs make
// every one of the prompt's 1040 positions a compared record, so an fp32 difference in attention
// that the bf16 roundings hide at most positions still shows at some.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // printf
#include <stdlib.h>   // free
#include <string.h>   // memcmp, memset
#include <time.h>     // time

#include "../engine/engine.h"        // engine_*
#include "../engine/model_config.h"  // model_config_by_name
#include "../engine/weights.h"       // weights_synthetic
#include "../kernels/cpu/inv_cpu.h"  // inv_cpu_create
#include "test_util.h"               // test_alloc, test_rng_make, test_below

enum {
    N_PROMPTS = 4,
    PROMPT_LEN = 1040,  // 4 x 1040 = 4160 context tokens in the batched prefill step: > 4096
    NEW_TOKENS = 3,
    TOP_K = 5,
};
_Static_assert(N_PROMPTS * PROMPT_LEN > 4096, "the batched step must pass 4096 context tokens");

// Each record is compared whole (token, logprob bits, top-k ids and logprob bits): the engine
// memsets a record before filling it, so equal results are equal bytes.
static void assert_same_records(const engine_step_record *alone, const engine_step_record *batched,
                                int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (memcmp(&alone[i], &batched[i], sizeof alone[i]) != 0)
            fail_msg("%s: record %d of %d differs alone vs batched: token %d vs %d, logprob %.9g "
                     "vs %.9g", what, i, n, alone[i].token, batched[i].token,
                     (double)alone[i].logprob, (double)batched[i].logprob);
}

static void test_long_prompt_alone_equals_batched(void **state) {
    (void)state;
    uint64_t seed = (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    weight_source *src = weights_synthetic(&cfg, seed);
    ops_set *ops = inv_cpu_create(2);
    engine_limits lim = {.max_num_seqs = N_PROMPTS,
                         .max_num_batched_tokens = N_PROMPTS * PROMPT_LEN,
                         .max_model_len = PROMPT_LEN + NEW_TOKENS,
                         .max_total_tokens = N_PROMPTS * (PROMPT_LEN + NEW_TOKENS),
                         .block_size = 64,
                         .prompt_logprobs = true};
    engine *e = engine_create(&cfg, src, ops, &lim, seed);

    // Fresh random prompts; request 0 is the one compared, and asks for prompt logprobs.
    test_rng rng = test_rng_make(seed ^ 0x6c6f6e67ull);
    int32_t *prompts = test_alloc((size_t)N_PROMPTS * PROMPT_LEN * sizeof(int32_t));
    for (long i = 0; i < (long)N_PROMPTS * PROMPT_LEN; i++)
        prompts[i] = (int32_t)test_below(&rng, cfg.vocab_size);
    engine_request reqs[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++)
        reqs[i] = (engine_request){.prompt = prompts + (long)i * PROMPT_LEN,
                                   .prompt_len = PROMPT_LEN, .max_new_tokens = NEW_TOKENS,
                                   .seed = (uint64_t)i, .prompt_logprobs = i == 0};
    // Whole prompts in one step (no chunking): the batched run's first step holds all four.
    engine_sched sched = {.max_num_seqs = 1, .max_num_batched_tokens = N_PROMPTS * PROMPT_LEN,
                          .chunked_prefill = false, .top_k = TOP_K};

    size_t prompt_bytes = PROMPT_LEN * sizeof(engine_step_record);
    size_t step_bytes = NEW_TOKENS * sizeof(engine_step_record);
    engine_step_record *alone_prompt = test_alloc(prompt_bytes), *alone_steps = test_alloc(step_bytes);
    engine_step_record *batch_prompt = test_alloc(prompt_bytes);
    engine_step_record *batch_steps = test_alloc(N_PROMPTS * step_bytes);
    test_poison(alone_prompt, prompt_bytes);
    test_poison(alone_steps, step_bytes);
    test_poison(batch_prompt, prompt_bytes);
    test_poison(batch_steps, N_PROMPTS * step_bytes);
    char err[512] = "";

    engine_result alone = {.steps = alone_steps, .prompt_steps = alone_prompt};
    if (!engine_generate(e, &reqs[0], 1, &sched, &alone, NULL, err, sizeof err))
        fail_msg("alone: %s", err);

    engine_result batched[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++)
        batched[i] = (engine_result){.steps = batch_steps + (long)i * NEW_TOKENS,
                                     .prompt_steps = i == 0 ? batch_prompt : NULL};
    sched.max_num_seqs = N_PROMPTS;
    engine_stats st = {0};
    if (!engine_generate(e, reqs, N_PROMPTS, &sched, batched, &st, err, sizeof err))
        fail_msg("batched: %s", err);
    // The four prefills shared the first step (else the step never passed 4096 tokens).
    assert_int_equal(st.steps, NEW_TOKENS);

    assert_int_equal(alone.n_prompt_steps, PROMPT_LEN);
    assert_int_equal(batched[0].n_prompt_steps, PROMPT_LEN);
    assert_int_equal(alone.n_steps, NEW_TOKENS);
    for (int i = 0; i < N_PROMPTS; i++) assert_int_equal(batched[i].n_steps, NEW_TOKENS);
    // Every record written: a poisoned token is -1.
    for (int p = 0; p < PROMPT_LEN; p++) assert_true(alone_prompt[p].token >= 0);
    for (int i = 0; i < N_PROMPTS * NEW_TOKENS; i++) assert_true(batch_steps[i].token >= 0);
    assert_same_records(alone_prompt, batch_prompt, PROMPT_LEN, "prompt logprobs");
    assert_same_records(alone_steps, batch_steps, NEW_TOKENS, "decode steps");

    free(batch_steps);
    free(batch_prompt);
    free(alone_steps);
    free(alone_prompt);
    free(prompts);
    engine_destroy(e);
    ops->destroy(ops);
    src->destroy(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_prompt_alone_equals_batched),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
