// tests/test_localize.c — localization (harness/run/localize.h, sets/op_tap.h) on the tiny
// synthetic model and the invariant CPU set, with one op made batch-variant on purpose:
//   - for each op of the forward pass, a planted divergence in that op alone (its output's
//     lowest bit flipped in calls of more rows than the request alone ever gives) is named:
//     that op, with a ULP distance of at least one, and the request's row at both shapes;
//   - in TP-size-invariant mode (tiny-tp), a divergence planted in moe_experts' or
//     moe_combine's fp32 rows is named there;
//   - on the split backend (context keys and prefill rows announced apart) mha_prefill and
//     merge_attention are named the same way;
//   - on the split backend, a request prefilled in a step whose first rows are another
//     request's decode has its mha_prefill and merge_attention rows at its own positions, each
//     once;
//   - a request's decode against its re-prefill with prompt logprobs (prefill vs decode): a
//     logprobs that differs for many rows is named there too;
//   - with nothing planted, no op is named and the text says so; a divergence that only the
//     second batched rerun shows (a race) is named, with the rerun it showed in;
//   - a batch whose sampled ids fall outside the vocabulary fails the run (the engine names the
//     request and runs again), and the op that differed before is still named;
//   - a run alone broken by one op's non-finite rows (NaNs and infinities of either sign) names
//     that op as the first whose rows held one;
//   - the tap forwards every call: a tapped run gives the plain run's bits;
//   - the ULP distance counts bf16 and fp32 elements in their own ULPs, across the sign, and
//     ids apart.
// The seed is printed; INVAR_TEST_SEED=N repeats a run.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // printf
#include <stdlib.h>   // free, getenv, strtoull
#include <limits.h>   // LONG_MAX
#include <string.h>   // memcmp, strcmp, strstr
#include <time.h>     // time

#include "../engine/attention_backend.h" // attention_backend_by_name
#include "../engine/engine.h"            // engine_*
#include "../engine/model_config.h"      // model_config_by_name
#include "../engine/weights.h"           // weights_synthetic
#include "../harness/run/localize.h"     // localize_request, localize_max_ulps
#include "test_util.h"                   // test_alloc, test_rng
#include "../kernels/moe_slices.h"       // moe_experts_by_slice, moe_combine_by_slice

enum { REQS = 4, MAX_NEW = 4, TOP_K = 3, PROMPT_MIN = 6, PROMPT_MAX = 12 };

// A set whose op `planted` flips the lowest bit of element 0 of every output row in calls of
// more than PROMPT_MAX rows (logprobs: more than one row): calls only a batch makes.
typedef struct {
    ops_set base;
    ops_set *inner;
    const char *planted;
    long quiet;  // calls of the planted op that would flip and are left alone first
    long calls;  // such calls so far
    bool bad_ids; // logprobs of more than one row also samples id -1 (its logits "broken")
    bool nan;     // every call of the planted op, whatever its rows, writes a non-finite value
                  // in place of the flip (nan_bf16 / nan_f32's bits): a run alone breaks
    uint16_t nan_bf16;
    uint32_t nan_f32;
} planted_set;

static planted_set *planted_of(ops_set *ops) { return (planted_set *)ops; }
#define INNER(ops) (planted_of(ops)->inner)

static bool plants(ops_set *ops, const char *op, int rows) {
    planted_set *p = planted_of(ops);
    if (strcmp(p->planted, op) != 0) return false;
    if (p->nan) return rows > 0;
    if (rows <= (strcmp(op, "logprobs") == 0 ? 1 : PROMPT_MAX)) return false;
    // Counted (flaky plants): only calls of more rows than a request and its new tokens hold,
    // which no run of the request alone makes, so every batched rerun makes as many.
    if (p->quiet == 0) return true;
    return rows > PROMPT_MAX + MAX_NEW && p->calls++ >= p->quiet;
}

static void flip_bf16_rows(ops_set *ops, bf16 *x, long ld, int rows) {
    planted_set *p = planted_of(ops);
    for (int t = 0; t < rows; t++) x[(long)t * ld] = p->nan ? p->nan_bf16 : x[(long)t * ld] ^ 1;
}

static void flip_f32(ops_set *ops, float *x) {
    uint32_t u;
    memcpy(&u, x, sizeof u);
    u = planted_of(ops)->nan ? planted_of(ops)->nan_f32 : u ^ 1;
    memcpy(x, &u, sizeof u);
}

static void p_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T, int D) {
    INNER(ops)->embedding(INNER(ops), out, table, ids, T, D);
    if (plants(ops, "embedding", T)) flip_bf16_rows(ops, out, D, T);
}
static void p_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w, int M, int D,
                      float eps) {
    INNER(ops)->rmsnorm(INNER(ops), out, ld_out, x, ld_x, w, M, D, eps);
    if (plants(ops, "rmsnorm", M)) flip_bf16_rows(ops, out, ld_out ? ld_out : D, M);
}
static void p_gemm(ops_set *ops, const gemm_args *a) {
    INNER(ops)->gemm(INNER(ops), a);
    if (!plants(ops, "gemm", a->M)) return;
    long ld = a->ldy ? a->ldy : a->N;
    for (int t = 0; t < a->M; t++) {
        if (a->y_f32) flip_f32(ops, (float *)a->y + (long)t * ld);
        else flip_bf16_rows(ops, (bf16 *)a->y + (long)t * ld, ld, 1);
    }
}
static void p_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R, const int32_t *pos,
                   const float *cos, const float *sin, bool interleave) {
    INNER(ops)->rope(INNER(ops), x, ld_token, ld_head, T, H, R, pos, cos, sin, interleave);
    if (plants(ops, "rope", T)) flip_bf16_rows(ops, x, ld_token, T);
}
static void p_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n) {
    INNER(ops)->residual_add(INNER(ops), x, y, n);
    // n = T * D with D the tiny model's hidden size (a multiple of PROMPT_MAX + 1 is not)
    int D = 256;
    if (n % D == 0 && plants(ops, "residual_add", (int)(n / D))) flip_bf16_rows(ops, x, D, (int)(n / D));
}
static void p_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I) {
    INNER(ops)->silu_mul(INNER(ops), out, gate_up, M, I);
    if (plants(ops, "silu_mul", M)) flip_bf16_rows(ops, out, I, M);
}
static void p_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv, const bf16 *k_pe,
                             long ld_k_pe, const int32_t *slot, int T, int L, int R) {
    INNER(ops)->kv_cache_write(INNER(ops), kv_cache, c_kv, ld_c_kv, k_pe, ld_k_pe, slot, T, L, R);
    if (plants(ops, "kv_cache_write", T))
        for (int t = 0; t < T; t++) kv_cache[(long)slot[t] * (L + R)] ^= 1;
}
static void p_mla_attention(ops_set *ops, const mla_attention_args *a) {
    INNER(ops)->mla_attention(INNER(ops), a);
    if (plants(ops, "mla_attention", a->T)) flip_bf16_rows(ops, a->out, a->ld_out, a->T);
}
static void p_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    INNER(ops)->mha_prefill(INNER(ops), a);
    if (plants(ops, "mha_prefill", a->T)) flip_bf16_rows(ops, a->out, a->ld_out, a->T);
}
static void p_merge_attention(ops_set *ops, const merge_attention_args *a) {
    INNER(ops)->merge_attention(INNER(ops), a);
    if (plants(ops, "merge_attention", a->T)) flip_bf16_rows(ops, a->out, a->ld, a->T);
}
static void p_moe_route(ops_set *ops, const moe_route_args *a) {
    INNER(ops)->moe_route(INNER(ops), a);
    if (plants(ops, "moe_route", a->T))
        for (int t = 0; t < a->T; t++) flip_f32(ops, &a->topk_weights[(long)t * a->k]);
}
// With out_f32 (TP-size invariance) the fp32 rows are the output: the flip goes there.
static void p_moe_experts(ops_set *ops, const moe_experts_args *a) {
    if (moe_experts_by_slice(ops, a, p_moe_experts)) return;
    INNER(ops)->moe_experts(INNER(ops), a);
    if (!plants(ops, "moe_experts", a->T)) return;
    if (a->out_f32)
        for (int t = 0; t < a->T; t++) flip_f32(ops, &a->out_f32[(long)t * a->k * a->D]);
    else flip_bf16_rows(ops, a->out, (long)a->k * a->D, a->T);
}
static void p_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, p_moe_combine)) return;
    INNER(ops)->moe_combine(INNER(ops), a);
    if (!plants(ops, "moe_combine", a->T)) return;
    if (a->out_f32)
        for (int t = 0; t < a->T; t++) flip_f32(ops, &a->out_f32[(long)t * a->D]);
    else flip_bf16_rows(ops, a->out, a->D, a->T);
}
static void p_logprobs(ops_set *ops, const logprobs_args *a) {
    INNER(ops)->logprobs(INNER(ops), a);
    if (plants(ops, "logprobs", a->R))
        for (int r = 0; r < a->R; r++) flip_f32(ops, &a->token_logprob[r]);
    if (planted_of(ops)->bad_ids && a->R > 1)
        for (int r = 0; r < a->R; r++) a->token[r] = -1;
}

static planted_set *plant(ops_set *inner, const char *op) {
    planted_set *p = test_alloc(sizeof *p);
    *p = (planted_set){.inner = inner, .planted = op};
    ops_set *b = &p->base;
    *b = *inner;  // the CPU set's ops read only ops->ctx, which the copy keeps
    b->destroy = NULL;
    b->embedding = p_embedding;
    b->rmsnorm = p_rmsnorm;
    b->gemm = p_gemm;
    b->rope = p_rope;
    b->residual_add = p_residual_add;
    b->silu_mul = p_silu_mul;
    b->kv_cache_write = p_kv_cache_write;
    b->mla_attention = p_mla_attention;
    b->mha_prefill = p_mha_prefill;
    b->merge_attention = p_merge_attention;
    b->moe_route = p_moe_route;
    b->moe_experts = p_moe_experts;
    b->moe_combine = p_moe_combine;
    b->logprobs = p_logprobs;
    return p;
}

// --- the fixture ---------------------------------------------------------------------------------

typedef struct {
    uint64_t seed;
    model_config cfg;
    weight_source *src;
    ops_set *ops;
    int32_t prompts[REQS][PROMPT_MAX];
    engine_request reqs[REQS];
    int target;
} fixture;

static int setup(void **state) {
    fixture *f = test_alloc(sizeof *f);
    const char *fixed = getenv("INVAR_TEST_SEED");
    f->seed = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL);
    printf("test_localize: seed %llu (INVAR_TEST_SEED repeats it)\n", (unsigned long long)f->seed);
    assert_true(model_config_by_name("tiny", &f->cfg));
    assert_int_equal(f->cfg.hidden_size, 256);  // p_residual_add's D
    f->src = weights_synthetic(&f->cfg, f->seed);
    f->ops = inv_cpu_create(2);
    test_rng rng = test_rng_make(f->seed);
    for (int i = 0; i < REQS; i++) {
        int len = PROMPT_MIN + (int)test_below(&rng, PROMPT_MAX - PROMPT_MIN + 1);
        for (int p = 0; p < len; p++) f->prompts[i][p] = (int32_t)test_below(&rng, f->cfg.vocab_size);
        f->reqs[i] = (engine_request){.prompt = f->prompts[i], .prompt_len = len,
                                      .max_new_tokens = MAX_NEW, .seed = (uint64_t)i};
    }
    f->target = (int)test_below(&rng, REQS);
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

static engine_limits limits(void) {
    return (engine_limits){.max_num_seqs = REQS, .max_num_batched_tokens = 64,
                           .max_model_len = PROMPT_MAX + MAX_NEW,
                           .max_total_tokens = REQS * (PROMPT_MAX + MAX_NEW), .block_size = 16};
}

// Localizes the target request on `ops`, alone and in a batch of every request.
static localization localize(fixture *f, ops_set *ops, const char *backend) {
    engine_sched sched = {.max_num_seqs = REQS, .max_num_batched_tokens = 64, .chunked_prefill = true,
                          .top_k = TOP_K, .backend = attention_backend_by_name(backend)};
    assert_non_null(sched.backend);
    engine_sched one = sched;
    one.max_num_seqs = 1;
    localize_run alone = {.reqs = &f->reqs[f->target], .count = 1, .sched = one, .follow = 0, .label = "alone"};
    localize_run batch = {.reqs = f->reqs, .count = REQS, .sched = sched, .follow = f->target, .label = "at bs=4"};
    engine_limits lim = limits();
    localization loc;
    memset(&loc, 0x5A, sizeof loc);  // poisoned: every field must be written
    ops_set *ranks[1] = {ops};
    assert_true(localize_request(ranks, 1, &f->cfg, f->src, &lim, f->seed, &alone, &batch, &loc));
    printf("  %s: %s\n", backend, loc.text);
    return loc;
}

static void expect_named(fixture *f, const char *op, const char *backend) {
    planted_set *p = plant(f->ops, op);
    localization loc = localize(f, &p->base, backend);
    if (!loc.found || strcmp(loc.op, op) != 0)
        fail_msg("planted in %s, named '%s' (found %d): %s", op, loc.found ? loc.op : "", loc.found, loc.text);
    // Both shapes and the request's row at each, and a distance of at least one ULP (or ids).
    if (!strstr(loc.text, " alone, M=") || !strstr(loc.text, " at bs=4") || !strstr(loc.text, ": M="))
        fail_msg("%s: no shapes or rows in '%s'", op, loc.text);
    if (!strstr(loc.text, "; max ") || strstr(loc.text, "; max 0 ulps"))
        fail_msg("%s: no ULP distance in '%s'", op, loc.text);
    // Where in the model: the embedding and the head (logprobs runs only there) by name, the
    // rest in a layer the model has.
    const char *place = strcmp(op, "embedding") == 0 ? "at the embedding"
                        : strcmp(op, "logprobs") == 0 ? "in the head" : "in layer ";
    if (!strstr(loc.text, place)) fail_msg("%s: not '%s' in '%s'", op, place, loc.text);
    char beyond[32];
    snprintf(beyond, sizeof beyond, "in layer %d", f->cfg.num_hidden_layers);
    if (strstr(loc.text, beyond)) fail_msg("%s: a layer past the model's last in '%s'", op, loc.text);
    free(p);
}

static void test_each_op_named(void **state) {
    fixture *f = *state;
    static const char *const ops[] = {"embedding", "rmsnorm", "gemm", "rope", "kv_cache_write",
                                      "mla_attention", "residual_add", "silu_mul", "moe_route",
                                      "moe_experts", "moe_combine", "logprobs"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) expect_named(f, ops[i], "mla-unified");
}

// TP-size invariance (tiny-tp, its 8 fixed slices at T = 1): the MoE ops write their fp32
// rows and leave the bf16 ones alone, so a divergence planted there is named there, in fp32
// ULPs (a tap hashing the unwritten bf16 rows named a later op, or none).
static void test_tp_size_f32_ops_named(void **state) {
    fixture *f = *state;
    model_config cfg;
    assert_true(model_config_by_name("tiny-tp", &cfg));
    weight_source *src = weights_synthetic(&cfg, f->seed);
    assert_true(f->ops->tp_size_invariant);
    for (int i = 0; i < REQS; i++)
        for (int p = 0; p < f->reqs[i].prompt_len; p++) f->prompts[i][p] %= cfg.vocab_size;
    static const char *const ops[] = {"moe_experts", "moe_combine"};
    for (int i = 0; i < 2; i++) {
        planted_set *p = plant(f->ops, ops[i]);
        engine_sched sched = {.max_num_seqs = REQS, .max_num_batched_tokens = 64,
                              .chunked_prefill = true, .top_k = TOP_K,
                              .backend = attention_backend_by_name("mla-unified")};
        engine_sched one = sched;
        one.max_num_seqs = 1;
        localize_run alone = {.reqs = &f->reqs[f->target], .count = 1, .sched = one,
                              .follow = 0, .label = "alone"};
        localize_run batch = {.reqs = f->reqs, .count = REQS, .sched = sched,
                              .follow = f->target, .label = "at bs=4"};
        engine_limits lim = limits();
        lim.tp_size_invariant = true;
        localization loc;
        memset(&loc, 0x5A, sizeof loc);
        ops_set *ranks[1] = {&p->base};
        assert_true(localize_request(ranks, 1, &cfg, src, &lim, f->seed, &alone, &batch, &loc));
        printf("  tp-size %s: %s\n", ops[i], loc.text);
        if (!loc.found || strcmp(loc.op, ops[i]) != 0 || !strstr(loc.text, " f32)") ||
            !strstr(loc.text, "; max 1 ulp "))  // the one planted fp32 ULP
            fail_msg("planted in %s's fp32 rows, named '%s' (found %d): %s", ops[i],
                     loc.found ? loc.op : "", loc.found, loc.text);
        free(p);
    }
    src->destroy(src);
}

static void test_split_prefill_ops_named(void **state) {
    fixture *f = *state;
    expect_named(f, "mha_prefill", "mla-split");
    expect_named(f, "merge_attention", "mla-split");
    expect_named(f, "gemm", "mla-split");
}

static void test_prefill_vs_decode_named(void **state) {
    fixture *f = *state;
    planted_set *p = plant(f->ops, "logprobs");
    engine_sched one = {.max_num_seqs = 1, .max_num_batched_tokens = 64, .chunked_prefill = true,
                        .top_k = TOP_K};
    // The re-prefill: the prompt and MAX_NEW - 1 more tokens, every position with its record.
    const engine_request *q = &f->reqs[f->target];
    int32_t tokens[PROMPT_MAX + MAX_NEW];
    memcpy(tokens, q->prompt, (size_t)q->prompt_len * sizeof tokens[0]);
    engine_limits lim = limits();
    lim.prompt_logprobs = true;
    engine *e = engine_create(&f->cfg, f->src, f->ops, &lim, f->seed);
    engine_step_record steps[MAX_NEW];
    memset(steps, 0xFF, sizeof steps);
    engine_result res = {.steps = steps};
    char err[512];
    if (!engine_generate(e, q, 1, &one, &res, NULL, err, sizeof err)) fail_msg("generate: %s", err);
    engine_destroy(e);
    assert_int_equal(res.n_steps, MAX_NEW);
    for (int j = 0; j + 1 < MAX_NEW; j++) tokens[q->prompt_len + j] = steps[j].token;
    engine_request again = *q;
    again.prompt = tokens;
    again.prompt_len = q->prompt_len + MAX_NEW - 1;
    again.max_new_tokens = 1;
    again.prompt_logprobs = true;
    localize_run decode = {.reqs = q, .count = 1, .sched = one, .follow = 0, .label = "decoding"};
    localize_run prefill = {.reqs = &again, .count = 1, .sched = one, .follow = 0, .label = "in the re-prefill"};
    ops_set *ranks[1] = {&p->base};
    localization loc;
    assert_true(localize_request(ranks, 1, &f->cfg, f->src, &lim, f->seed, &decode, &prefill, &loc));
    printf("  prefill vs decode: %s\n", loc.text);
    if (!loc.found || strcmp(loc.op, "logprobs") != 0 || !strstr(loc.text, " in the re-prefill"))
        fail_msg("'%s'", loc.text);
    free(p);
}

static void rows_to_tap(void *ctx, int layer, engine_rows_kind kind, const int32_t *request,
                        const int32_t *position, int n) {
    op_tap_rows(ctx, layer, kind == ENGINE_ROWS_KEYS ? OP_TAP_KEYS : kind == ENGINE_ROWS_SAMPLES ? OP_TAP_SAMPLES
                                                                                         : OP_TAP_TOKENS,
                request, position, n);
}

static void test_split_prefill_rows_placed(void **state) {
    fixture *f = *state;
    // Request 1 arrives while request 0 decodes: its prefill step starts with that decode.
    engine_request reqs[2] = {f->reqs[0], f->reqs[1]};
    reqs[1].arrival_step = 2;
    engine_limits lim = limits();
    engine_sched sched = {.max_num_seqs = 2, .max_num_batched_tokens = 64, .chunked_prefill = true,
                          .top_k = TOP_K, .backend = attention_backend_by_name("mla-split")};
    op_tap *t = op_tap_wrap(f->ops);
    engine *e = engine_create(&f->cfg, f->src, op_tap_set(t), &lim, f->seed);
    engine_observe_rows(e, rows_to_tap, t);
    op_tap_follow(t, 1);
    engine_step_record steps[2][MAX_NEW];
    engine_result res[2] = {{.steps = steps[0]}, {.steps = steps[1]}};
    char err[512];
    if (!engine_generate(e, reqs, 2, &sched, res, NULL, err, sizeof err)) fail_msg("generate: %s", err);
    int n;
    const op_tap_entry *en = op_tap_entries(t, &n);
    int len = reqs[1].prompt_len, mixed = 0;
    static const char *const prefill_ops[] = {"mha_prefill", "merge_attention"};
    for (int layer = 0; layer < f->cfg.num_hidden_layers; layer++)
        for (size_t k = 0; k < 2; k++) {
            int seen[PROMPT_MAX] = {0};
            for (int i = 0; i < n; i++) {
                if (en[i].layer != layer || strcmp(en[i].op, prefill_ops[k]) != 0) continue;
                if (en[i].position < 0 || en[i].position >= len)
                    fail_msg("layer %d %s: a row at position %d of a %d-token prompt", layer, prefill_ops[k],
                             en[i].position, len);
                seen[en[i].position]++;
                if (en[i].row != en[i].position) fail_msg("%s: position %d in row %d", prefill_ops[k], en[i].position, en[i].row);
            }
            for (int p = 0; p < len; p++)
                if (seen[p] != (k == 0 ? 2 : 1))  // mha_prefill twice: new tokens, then context
                    fail_msg("layer %d %s: position %d seen %d times", layer, prefill_ops[k], p, seen[p]);
        }
    // The step was mixed: request 1's embedding row sits after the decode's.
    for (int i = 0; i < n; i++) mixed += strcmp(en[i].op, "embedding") == 0 && en[i].position == 0 && en[i].row == 1;
    assert_int_equal(mixed, 1);
    engine_destroy(e);
    op_tap_destroy(t);
}

static void test_nothing_planted(void **state) {
    fixture *f = *state;
    planted_set *p = plant(f->ops, "none");
    localization loc = localize(f, &p->base, "mla-unified");
    assert_false(loc.found);
    assert_string_equal(loc.op, "");
    if (!strstr(loc.text, "no op differs")) fail_msg("'%s'", loc.text);
    loc = localize(f, f->ops, "mla-split");
    assert_false(loc.found);
    free(p);
}

// A bug that shows only in the second batched rerun (a race that one rerun did not hit): the
// plant counts its batch-sized calls over the three reruns of a clean localization, then lets
// the first rerun's worth pass. Named, with the rerun it showed in; never found: said so.
static void test_flaky_named_in_a_later_rerun(void **state) {
    fixture *f = *state;
    planted_set *p = plant(f->ops, "gemm");
    p->quiet = LONG_MAX;
    localization loc = localize(f, &p->base, "mla-unified");
    assert_false(loc.found);
    if (!strstr(loc.text, "no op differs: in 3 reruns")) fail_msg("'%s'", loc.text);
    assert_true(p->calls > 0 && p->calls % 3 == 0);
    p->quiet = p->calls / 3;
    p->calls = 0;
    loc = localize(f, &p->base, "mla-unified");
    if (!loc.found || strcmp(loc.op, "gemm") != 0) fail_msg("named '%s': %s", loc.op, loc.text);
    if (!strstr(loc.text, "(in batch rerun 2 of 3")) fail_msg("'%s'", loc.text);
    free(p);
}

// A batch whose sampled ids fall outside the vocabulary (NaN logits on a GPU give -1) fails
// the run, not the process: engine_generate says so and names the request, the engine runs
// again from engine_begin, and localization still names the first op that differed before the
// failure.
static void test_failed_batch_localized(void **state) {
    fixture *f = *state;
    planted_set *p = plant(f->ops, "gemm");
    p->bad_ids = true;
    engine_limits lim = limits();
    engine_sched sched = {.max_num_seqs = REQS, .max_num_batched_tokens = 64, .chunked_prefill = true,
                          .top_k = TOP_K};
    engine *e = engine_create(&f->cfg, f->src, &p->base, &lim, f->seed);
    engine_step_record steps[REQS][MAX_NEW];
    engine_result results[REQS];
    for (int i = 0; i < REQS; i++) results[i] = (engine_result){.steps = steps[i]};
    char err[512] = "";
    assert_int_equal(engine_failed_request(e), -1);
    assert_false(engine_generate(e, f->reqs, REQS, &sched, results, NULL, err, sizeof err));
    if (!strstr(err, "sampled token -1 outside the vocabulary")) fail_msg("'%s'", err);
    int failed = engine_failed_request(e);
    assert_true(failed >= 0 && failed < REQS);
    sched.max_num_seqs = 1;  // one row a logprobs call: no id is broken
    assert_true(engine_generate(e, &f->reqs[failed], 1, &sched, results, NULL, err, sizeof err));
    assert_int_equal(engine_failed_request(e), -1);
    engine_destroy(e);
    localization loc = localize(f, &p->base, "mla-unified");
    if (!loc.found || strcmp(loc.op, "gemm") != 0) fail_msg("named '%s': %s", loc.op, loc.text);
    if (!strstr(loc.text, "the batched rerun then failed")) fail_msg("'%s'", loc.text);
    free(p);
}

// A run alone that breaks (non-finite rows from the planted op's first call) has no run to be
// compared with: the first op whose rows of the request hold a NaN or an infinity is named,
// whichever op it is and whichever of the four kinds of non-finite value (quiet and signalling
// NaNs of either sign, infinities) it wrote; with nothing planted none is, and the text says so.
static void test_failed_alone_named_by_its_nan(void **state) {
    fixture *f = *state;
    static const char *const ops[] = {"embedding", "rmsnorm", "gemm", "rope", "mla_attention",
                                      "residual_add", "silu_mul", "moe_route", "moe_experts",
                                      "moe_combine", "logprobs"};
    engine_sched one = {.max_num_seqs = 1, .max_num_batched_tokens = 64, .chunked_prefill = true,
                        .top_k = TOP_K, .backend = attention_backend_by_name("mla-unified")};
    localize_run alone = {.reqs = &f->reqs[f->target], .count = 1, .sched = one, .follow = 0,
                          .label = "alone"};
    engine_limits lim = limits();
    for (size_t i = 0; i <= sizeof ops / sizeof ops[0]; i++) {
        const char *op = i < sizeof ops / sizeof ops[0] ? ops[i] : "none";
        // +inf, a negative quiet NaN, -inf, a signalling NaN (quiet bit clear)
        static const uint16_t bf16_bits[] = {0x7f80, 0xffc0, 0xff80, 0x7f81};
        static const uint32_t f32_bits[] = {0x7f800000u, 0xffc00000u, 0xff800000u, 0x7f800001u};
        planted_set *p = plant(f->ops, op);
        p->nan = true;
        p->nan_bf16 = bf16_bits[i % 4];
        p->nan_f32 = f32_bits[i % 4];
        localization loc;
        memset(&loc, 0x5A, sizeof loc);
        ops_set *ranks[1] = {&p->base};
        assert_true(localize_nonfinite(ranks, 1, &f->cfg, f->src, &lim, f->seed, &alone, &loc));
        printf("  NaN in %s: %s\n", op, loc.text);
        if (strcmp(op, "none") == 0) {
            assert_false(loc.found);
            assert_string_equal(loc.op, "");
            if (!strstr(loc.text, "held a NaN or an infinity (the run alone failed past the ops)"))
                fail_msg("'%s'", loc.text);
        } else if (!loc.found || strcmp(loc.op, op) != 0 ||
                   !strstr(loc.text, " alone: the first output holding a NaN or an infinity (1 "
                                     "element of the row; the run alone failed)")) {
            fail_msg("NaN planted in %s, named '%s' (found %d): %s", op, loc.found ? loc.op : "",
                     loc.found, loc.text);
        }
        free(p);
    }
}

static void generate(fixture *f, ops_set *ops, engine_step_record (*steps)[MAX_NEW]) {
    engine_limits lim = limits();
    engine_sched sched = {.max_num_seqs = REQS, .max_num_batched_tokens = 64, .chunked_prefill = true,
                          .top_k = TOP_K};
    engine *e = engine_create(&f->cfg, f->src, ops, &lim, f->seed);
    engine_result results[REQS];
    memset(steps, 0xFF, sizeof(engine_step_record) * REQS * MAX_NEW);
    for (int i = 0; i < REQS; i++) results[i] = (engine_result){.steps = steps[i]};
    char err[512];
    if (!engine_generate(e, f->reqs, REQS, &sched, results, NULL, err, sizeof err)) fail_msg("generate: %s", err);
    for (int i = 0; i < REQS; i++) assert_int_equal(results[i].n_steps, MAX_NEW);
    engine_destroy(e);
}

static void test_tap_forwards(void **state) {
    fixture *f = *state;
    engine_step_record plain[REQS][MAX_NEW], tapped[REQS][MAX_NEW];
    generate(f, f->ops, plain);
    op_tap *t = op_tap_wrap(f->ops);
    op_tap_follow(t, f->target);  // recording, without rows announced: every call unplaced
    generate(f, op_tap_set(t), tapped);
    assert_memory_equal(plain, tapped, sizeof plain);
    int n = -1;
    op_tap_entries(t, &n);
    assert_int_equal(n, 0);
    assert_true(op_tap_unplaced(t) > 0);
    op_tap_destroy(t);
}

static op_tap_row row_of(unsigned char *bytes, size_t n, int segments, const op_tap_type *type, const long *count) {
    op_tap_row r = {.n_segments = segments, .bytes = bytes, .n_bytes = n};
    for (int s = 0; s < segments; s++) {
        r.type[s] = type[s];
        r.count[s] = count[s];
    }
    return r;
}

static void test_max_ulps(void **state) {
    (void)state;
    // bf16 [1.0, +0, 2.0], fp32 [-1.0], ids [7]
    uint16_t a16[3] = {0x3F80, 0x0000, 0x4000}, b16[3] = {0x3F81, 0x8000, 0x4000};
    float af = -1.0f, bf = -1.0f;
    int32_t aid = 7, bid = 7;
    unsigned char a[6 + 4 + 4], b[6 + 4 + 4];
    op_tap_type types[3] = {OP_TAP_BF16, OP_TAP_F32, OP_TAP_I32};
    long counts[3] = {3, 1, 1};
    long at, ids;
    uint32_t u;
    memcpy(&u, &bf, 4);
    u += 5;  // five floats further from zero
    memcpy(&bf, &u, 4);
    memcpy(a, a16, 6), memcpy(a + 6, &af, 4), memcpy(a + 10, &aid, 4);
    memcpy(b, b16, 6), memcpy(b + 6, &bf, 4), memcpy(b + 10, &bid, 4);
    op_tap_row ra = row_of(a, sizeof a, 3, types, counts), rb = row_of(b, sizeof b, 3, types, counts);
    assert_int_equal(localize_max_ulps(&ra, &rb, &at, &ids), 5);
    assert_int_equal(at, 3);
    assert_int_equal(ids, 0);
    // -0 and +0 are 0 ULPs apart; the bf16 1.0 pair one ULP; another id counts apart.
    bid = 8;
    bf = af;
    memcpy(b + 6, &bf, 4), memcpy(b + 10, &bid, 4);
    assert_int_equal(localize_max_ulps(&ra, &rb, &at, &ids), 1);
    assert_int_equal(at, 0);
    assert_int_equal(ids, 1);
    // Across the sign: bf16 smallest positive denormal vs smallest negative one is 2 ULPs.
    uint16_t pos = 0x0001, neg = 0x8001;
    memcpy(a, &pos, 2), memcpy(b, &neg, 2);
    assert_int_equal(localize_max_ulps(&ra, &rb, &at, &ids), 2);
    // Rows of other segments cannot be compared.
    long other[3] = {2, 2, 1};
    op_tap_row rc = row_of(b, sizeof b, 3, types, other);
    assert_int_equal(localize_max_ulps(&ra, &rc, &at, &ids), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_each_op_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_prefill_ops_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tp_size_f32_ops_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_prefill_rows_placed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefill_vs_decode_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nothing_planted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flaky_named_in_a_later_rerun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_batch_localized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_alone_named_by_its_nan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tap_forwards, setup, teardown),
        cmocka_unit_test(test_max_ulps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
