// tests/test_hf_fixtures.c — the engine against Hugging Face transformers, teacher-forced. The
// fixtures in tests/fixtures/<name>/ are tiny DeepseekV2/V3 checkpoints written by transformers
// 5.17 (tests/fixtures/make_hf_fixtures.py, run on the GPU host). Each case is a random prompt
// followed by transformers' greedy continuation; expected.json holds transformers' fp32
// logprobs (next token, top 5) at every position of that sequence. Every registered kernel set
// on every available device loads the checkpoint through the real checkpoint path, is fed each
// whole sequence as one prompt with prompt logprobs, and must, at EVERY position:
//   - share at least TOPK_MIN_SHARED of transformers' top-5 ids;
//   - give every id of transformers' top 5, and the next token of the sequence where the engine
//     reports it (its top ENGINE_MAX_TOPK), a logprob within bound(logprob) of transformers'.
// The engine records a prompt position's top-k and its greedy token only, not the logprob of
// the prompt's actual next token; a random prompt token is rarely in a top 20, so at prompt
// positions the next-token comparison covers the ones it can and the top-5 comparison carries
// the check. At the generated positions the next token is the top 1, compared everywhere.
// Then it greedy-decodes each prompt and must reproduce transformers' continuation token for
// token, with the same logprob bound (a decode logprob against transformers' prefill logprob).
//
// Why these comparisons cannot be fooled by near-ties: the fixture script keeps a sequence only
// when, at every position, the top-1 probability leads the runner-up by >= 0.02 (>= 0.040 nats)
// and every MoE group and expert choice leads the first one left out by >= 2% of its score (on
// the score the choice is made by, with V3's correction bias); bf16 rounding differences
// between two correct implementations move router scores by ~0.1-0.2%. The margins are
// recorded in expected.json (min_top1_margin, min_group_margin, min_expert_margin; per
// position top1_margin and routing_margin). So no case is left out here.
//
// Why 4 of 5 shared rather than the top-1 id equal at every position: the guard's top-1 floor
// (0.040 nats between the top two) is below the measured noise on the gap between two logprobs
// on v3_noqlora_yarn_alldim (case 1 position 9, a prompt position: transformers 18 at -0.655
// and 195 at -0.798, the engine -0.736 and -0.707 on every set), so top-1 equality there would
// be a coin flip. A swap of ranks 1 and 2 leaves the top-5 set as it is, and each id's logprob
// stays under the bound below, which is what limits how far a swap can go; ranks 5 and 6 are
// not guarded, so one id may leave the top 5 without any error, a second one is a wrong
// distribution. The generated positions are held to the top-1 id by the greedy decode.
//
// Why bound(lp) = LOGPROB_ABS + LOGPROB_REL * |lp|, lp being transformers' logprob: bf16
// rounding (the engine rounds at other points than transformers: absorbed MLA, one fp32 MoE
// sum, fp32 RoPE) perturbs the final hidden state by a relative amount, which moves each logit
// in proportion to its size, so a token's logprob error grows with how far it sits below the
// top. Measured (tree of this commit, every set, CPU and H200 alike): max |Δ| 0.147 on a top-1
// (at lp -0.54), 0.519 on a rank-2 id at lp -3.50 and 0.614 at lp -22.1, all on
// v3_noqlora_yarn_alldim, whose tied embeddings double the logit spread; transformers' own
// bf16 run differs from its fp32 run by up to 0.47 nats there (max_abs_bf16_vs_fp32). The
// worst position uses 0.67 of the bound (1.5x headroom); on the other three fixtures at most
// 0.39 of it. A flipped expert or a kernel bug moves the top-1 logprob by more than 0.3 nats
// and reorders the top 5, which the id checks catch first.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <cjson/cJSON.h>  // cJSON_Parse, cJSON_GetObjectItem
#include <stdbool.h>      // bool
#include <math.h>         // fabs
#include <stdio.h>        // printf, snprintf, fopen
#include <stdlib.h>       // free, malloc
#include <string.h>       // strcmp

#include "../engine/checkpoint.h"  // checkpoint_open
#include "../engine/engine.h"      // engine_*, ENGINE_MAX_TOPK
#include "../sets/registry.h"   // kernel_sets, cuda_device_available

#define LOGPROB_ABS 0.25   // nats, see the header comment
#define LOGPROB_REL 0.15   // per nat of |logprob|
#define TOPK 5              // transformers' top ids recorded per position
#define TOPK_MIN_SHARED 4
#define MAX_CASE_TOKENS 64

static const char *const fixtures[] = {"v3_qlora_yarn", "v3_noqlora_yarn_alldim",
                                       "v2_noqlora_greedy", "v2_qlora_glg_yarn"};

static double bound(double lp) { return LOGPROB_ABS + LOGPROB_REL * fabs(lp); }

// What one fixture on one kernel set measured; `failures` counts checks that did not hold.
typedef struct {
    double max_delta_top;    // max |Δ logprob| over transformers' top-5 ids, all positions
    double max_delta_next;   // max |Δ logprob| of the sequence's next token, where reported
    int next_compared, positions;
    int min_shared;          // fewest of transformers' top-5 ids in the engine's top 5
    double max_delta_decode; // greedy decode: max |Δ logprob| of the greedy tokens
    double max_share;        // max |Δ| / bound(lp) over every logprob compared
    int failures;
} fixture_stats;

// Records |Δ| = |got - want| against bound(want); false when it is outside.
static bool within(fixture_stats *st, double got, double want, double *max_delta) {
    double d = fabs(got - want), share = d / bound(want);
    if (d > *max_delta) *max_delta = d;
    if (share > st->max_share) st->max_share = share;
    return share <= 1.0;
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

static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItem(obj, name);
    if (!v) fail_msg("expected.json: field \"%s\" missing", name);
    return v;
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

// The engine's logprob of `id` at one position, if it is among the k reported; NAN otherwise.
static double engine_logprob(const engine_step_record *r, int k, int32_t id) {
    for (int i = 0; i < k; i++)
        if (r->topk_ids[i] == id) return r->topk_logprobs[i];
    return NAN;
}

static void note_failure(fixture_stats *st, const char *what, const char *name, const char *set,
                         const char *device, int case_index, int pos) {
    if (st->failures++ < 5)
        printf("  FAIL %s %s/%s case %d position %d: %s\n", name, set, device, case_index, pos,
               what);
}

// Position p of the teacher-forced run against transformers' record `want`.
static void compare_position(const engine_step_record *got, const cJSON *want, fixture_stats *st,
                             const char *name, const char *set, const char *device, int ci,
                             int p) {
    int32_t top[TOPK];
    assert_int_equal(json_ints(field(want, "top_ids"), top, TOPK), TOPK);
    const cJSON *top_lp = field(want, "top_logprobs");
    char what[160];
    st->positions++;
    int shared = 0;
    for (int i = 0; i < TOPK; i++) {
        for (int j = 0; j < TOPK; j++) shared += got->topk_ids[j] == top[i];
        double lp = engine_logprob(got, ENGINE_MAX_TOPK, top[i]);
        double want_lp = cJSON_GetArrayItem(top_lp, i)->valuedouble;
        if (isnan(lp)) {
            snprintf(what, sizeof what, "transformers' rank-%d id %d not in the engine's top %d",
                     i + 1, top[i], ENGINE_MAX_TOPK);
            note_failure(st, what, name, set, device, ci, p);
        } else if (!within(st, lp, want_lp, &st->max_delta_top)) {
            snprintf(what, sizeof what, "rank-%d id %d logprob %.4f, transformers %.4f (bound "
                     "%.3f)", i + 1, top[i], lp, want_lp, bound(want_lp));
            note_failure(st, what, name, set, device, ci, p);
        }
    }
    if (shared < st->min_shared) st->min_shared = shared;
    if (shared < TOPK_MIN_SHARED) {
        snprintf(what, sizeof what, "%d of transformers' top-%d ids shared", shared, TOPK);
        note_failure(st, what, name, set, device, ci, p);
    }
    int32_t next = (int32_t)field(want, "next")->valuedouble;
    double lp = engine_logprob(got, ENGINE_MAX_TOPK, next);
    if (!isnan(lp)) {
        double want_lp = field(want, "logprob")->valuedouble;
        st->next_compared++;
        if (!within(st, lp, want_lp, &st->max_delta_next)) {
            snprintf(what, sizeof what, "next token %d logprob %.4f, transformers %.4f (bound "
                     "%.3f)", next, lp, want_lp, bound(want_lp));
            note_failure(st, what, name, set, device, ci, p);
        }
    }
}

// Every case of fixture `name` on one kernel set: teacher-forced, then greedy decode.
static fixture_stats check_fixture(const char *name, const kernel_set_entry *ks) {
    char dir[256], path[300], err[512];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", name);
    model_config cfg;
    weight_source *src;
    if (!checkpoint_open(dir, &cfg, &src, err, sizeof err)) fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    char *text = read_text(path);
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    const cJSON *cases = field(doc, "cases");
    assert_true(cJSON_GetArraySize(cases) > 0);

    ops_set *ops = ks->create(2);
    assert_non_null(ops);
    engine_limits lim = {.max_num_seqs = 1, .max_num_batched_tokens = 2 * MAX_CASE_TOKENS,
                         .max_model_len = 2 * MAX_CASE_TOKENS,
                         .max_total_tokens = 2 * MAX_CASE_TOKENS, .block_size = 64,
                         .prompt_logprobs = true};
    engine *e = engine_create(&cfg, src, ops, &lim, 0);
    // One step per prompt: the whole sequence is one prefill, as transformers ran it.
    engine_sched sched = {.max_num_seqs = 1, .max_num_batched_tokens = 2 * MAX_CASE_TOKENS,
                          .chunked_prefill = false, .top_k = ENGINE_MAX_TOPK};
    fixture_stats st = {.min_shared = TOPK};
    const cJSON *c;
    int ci = 0;
    cJSON_ArrayForEach(c, cases) {
        int32_t prompt[MAX_CASE_TOKENS], greedy[MAX_CASE_TOKENS], seq[MAX_CASE_TOKENS];
        int P = json_ints(field(c, "prompt"), prompt, MAX_CASE_TOKENS);
        int G = json_ints(field(c, "greedy"), greedy, MAX_CASE_TOKENS);
        int L = json_ints(field(c, "sequence"), seq, MAX_CASE_TOKENS);
        const cJSON *positions = field(c, "positions");
        assert_int_equal(L, P + G);
        assert_int_equal(cJSON_GetArraySize(positions), L);

        engine_step_record prompt_steps[MAX_CASE_TOKENS], next;
        engine_request tf = {.prompt = seq, .prompt_len = L, .max_new_tokens = 1,
                             .prompt_logprobs = true};
        engine_result res = {.steps = &next, .prompt_steps = prompt_steps};
        if (!engine_generate(e, &tf, 1, &sched, &res, NULL, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(res.n_prompt_steps, L);
        for (int p = 0; p < L; p++)
            compare_position(&prompt_steps[p], cJSON_GetArrayItem(positions, p), &st, name,
                             ks->set, ks->device, ci, p);

        engine_step_record steps[MAX_CASE_TOKENS];
        engine_request gd = {.prompt = prompt, .prompt_len = P, .max_new_tokens = G};
        engine_result gres = {.steps = steps};
        if (!engine_generate(e, &gd, 1, &sched, &gres, NULL, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(gres.n_steps, G);
        for (int j = 0; j < G; j++) {
            char what[160];
            if (steps[j].token != greedy[j]) {
                snprintf(what, sizeof what, "greedy decode step %d token %d, transformers %d", j,
                         steps[j].token, greedy[j]);
                note_failure(&st, what, name, ks->set, ks->device, ci, P - 1 + j);
                break;   // later steps continue another sequence: nothing left to compare
            }
            double want = field(cJSON_GetArrayItem(positions, P - 1 + j), "logprob")->valuedouble;
            if (!within(&st, steps[j].logprob, want, &st.max_delta_decode)) {
                snprintf(what, sizeof what, "greedy decode step %d logprob %.4f, transformers "
                         "%.4f (bound %.3f)", j, steps[j].logprob, want, bound(want));
                note_failure(&st, what, name, ks->set, ks->device, ci, P - 1 + j);
            }
        }
        ci++;
    }
    printf("  %-22s %-10s %-4s teacher-forced %d positions: max |delta logprob| top-5 %.3f, "
           "next token %.3f (%d positions); top-5 shared >= %d/%d; greedy decode %.3f; "
           "worst %.2f of the bound\n", name, ks->set, ks->device, st.positions,
           st.max_delta_top, st.max_delta_next, st.next_compared, st.min_shared, TOPK,
           st.max_delta_decode, st.max_share);
    engine_destroy(e);
    ops->destroy(ops);
    src->destroy(src);
    cJSON_Delete(doc);
    free(text);
    return st;
}

static void matches_transformers_on(const char *device) {
    int sets = 0, failures = 0;
    for (const kernel_set_entry *ks = kernel_sets(); ks->set; ks++) {
        if (strcmp(ks->device, device) != 0) continue;
        sets++;
        for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++)
            failures += check_fixture(fixtures[f], ks).failures;
    }
    assert_true(sets > 0);
    assert_int_equal(failures, 0);
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
