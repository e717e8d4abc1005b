// tests/test_hf_fixtures.c — the engine against Hugging Face transformers. The fixtures in
// tests/fixtures/<name>/ are tiny DeepseekV2/V3 checkpoints written by transformers 5.17
// (tests/fixtures/make_hf_fixtures.py, run on the GPU host) with transformers' greedy tokens and
// float32 logprobs. Each kernel set on each available device must load them through the real
// checkpoint path and reproduce every greedy token, with |Δ logprob| under LOGPROB_BOUND.
//
// Why 0.15 nats: the engine keeps bf16 activations but rounds at other points than
// transformers (absorbed MLA, one fp32 MoE sum, fp32 RoPE); transformers' own bf16 run differs
// from its fp32 run by up to 0.079 nats on these fixtures (max_abs_bf16_vs_fp32 in
// expected.json), so two bf16 implementations may sit about twice that apart.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <cjson/cJSON.h>  // cJSON_Parse
#include <stdbool.h>      // bool
#include <math.h>         // fabs
#include <stdio.h>        // printf, snprintf, fopen
#include <stdlib.h>       // free, malloc
#include <string.h>       // strcmp

#include "../engine/checkpoint.h"  // checkpoint_open
#include "../engine/engine.h"      // engine_*
#include "../kernels/registry.h"   // kernel_set_create, cuda_device_available

#define LOGPROB_BOUND 0.15
#define MAX_CASE_TOKENS 64

static const char *const fixtures[] = {"v3_qlora_yarn", "v3_noqlora_yarn_alldim",
                                       "v2_noqlora_greedy", "v2_qlora_glg_yarn"};

// Cases left out, each with its reason. v3_noqlora_yarn_alldim case 2 (the 33-token prompt):
// at decode step 2, MoE layer 1, its two expert groups score 1.8966 vs 1.8958 (0.04% apart,
// topk_group = 1), below what bf16 rounding differences between two correct implementations
// move such scores (~0.1-0.2%), so which group wins is noise; swapping just that choice brings
// the case to 0.004 nats. The fixture script needs a routing-gap guard before it can be kept.
static const struct {
    const char *fixture;
    int case_index;
} routing_ties[] = {{"v3_noqlora_yarn_alldim", 2}};

static bool is_routing_tie(const char *fixture, int case_index) {
    for (size_t i = 0; i < sizeof routing_ties / sizeof routing_ties[0]; i++)
        if (strcmp(routing_ties[i].fixture, fixture) == 0 && routing_ties[i].case_index == case_index)
            return true;
    return false;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int json_ints(const cJSON *array, int32_t *out, int cap) {
    int n = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, array) {
        assert_true(n < cap);
        out[n++] = (int32_t)item->valuedouble;
    }
    return n;
}

// Greedy generation of every case of fixture `name` on one kernel set; returns max |Δ logprob|.
static double check_fixture(const char *name, const char *set, const char *device) {
    char dir[256], path[300], err[512];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", name);
    model_config cfg;
    weight_source *src;
    if (!checkpoint_open(dir, &cfg, &src, err, sizeof err)) fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *text = read_text(path);
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
    assert_true(cJSON_GetArraySize(cases) > 0);

    ops_set *ops = kernel_set_create(set, device, 2);
    assert_non_null(ops);
    engine_limits lim = {.max_num_seqs = 1, .max_num_batched_tokens = 2 * MAX_CASE_TOKENS,
                         .max_model_len = 2 * MAX_CASE_TOKENS,
                         .max_total_tokens = 2 * MAX_CASE_TOKENS, .block_size = 64};
    engine *e = engine_create(&cfg, src, ops, &lim, 0);
    double worst = 0.0;
    const cJSON *c;
    int case_index = -1;
    cJSON_ArrayForEach(c, cases) {
        if (is_routing_tie(name, ++case_index)) {
            printf("  %-24s case %d left out: a routing tie (see routing_ties)\n", name, case_index);
            continue;
        }
        int32_t prompt[MAX_CASE_TOKENS], greedy[MAX_CASE_TOKENS];
        int P = json_ints(cJSON_GetObjectItem(c, "prompt"), prompt, MAX_CASE_TOKENS);
        int G = json_ints(cJSON_GetObjectItem(c, "greedy"), greedy, MAX_CASE_TOKENS);
        engine_step_record steps[MAX_CASE_TOKENS];
        engine_request req = {.prompt = prompt, .prompt_len = P, .max_new_tokens = G};
        engine_result res = {.steps = steps};
        engine_sched sched = {.max_num_seqs = 1, .max_num_batched_tokens = 2 * MAX_CASE_TOKENS,
                              .chunked_prefill = true, .top_k = 5};
        if (!engine_generate(e, &req, 1, &sched, &res, NULL, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(res.n_steps, G);
        const cJSON *expected = cJSON_GetObjectItem(c, "steps");
        for (int j = 0; j < G; j++) {
            double want = cJSON_GetObjectItem(cJSON_GetArrayItem(expected, j), "logprob")->valuedouble;
            if (steps[j].token != greedy[j])
                fail_msg("%s on %s/%s: step %d token %d, transformers %d", name, set, device, j,
                         steps[j].token, greedy[j]);
            double delta = fabs(steps[j].logprob - want);
            if (delta > worst) worst = delta;
        }
    }
    printf("  %-24s %-9s %-4s max |delta logprob| %.4f (bound %.2f)\n", name, set, device, worst,
           LOGPROB_BOUND);
    engine_destroy(e);
    ops->destroy(ops);
    src->destroy(src);
    cJSON_Delete(doc);
    free(text);
    return worst;
}

static void matches_transformers_on(const char *device) {
    double worst = 0.0;
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++)
        for (int s = 0; s < 2; s++) {
            double d = check_fixture(fixtures[f], s ? "reference" : "invariant", device);
            if (d > worst) worst = d;
        }
    assert_true(worst <= LOGPROB_BOUND);
}

static void cpu_matches_transformers(void **state) {
    (void)state;
    matches_transformers_on("cpu");
}

static void cuda_matches_transformers(void **state) {
    (void)state;
    char why[256];
    if (!cuda_device_available(why, sizeof why)) {
        printf("SKIP: transformers fixtures on cuda: %s\n", why);
        skip();
    }
    matches_transformers_on("cuda");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_matches_transformers),
        cmocka_unit_test(cuda_matches_transformers),
    };
    return cmocka_run_group_tests_name("hf_fixtures", tests, NULL, NULL);
}
