// tests/engine_slices_check.h — TP-size invariance's one-call forms against one call a slice,
// end to end on one device: the engine at T = 1 with tp_size_invariance gives every request
// the same records with its one-call forms (batched slice GEMMs, the slices' gate/up as one
// GEMM, moe_experts and moe_combine over every slice, sum_slices_f32) as with tp_slices_each
// (the calls a rank makes at T = 8, which TP-size invariance compares against), and as with the
// MoE's slices in groups of 2 (tp_slices_fp32_bytes too small for more). A difference there would
// show as TP = 1 vs TP = 8 differing on a host with eight devices; here it needs one.
#ifndef INVAR_TESTS_ENGINE_SLICES_CHECK_H
#define INVAR_TESTS_ENGINE_SLICES_CHECK_H

#include <string.h>                    // memcmp

#include "../engine/engine.h"          // engine_create, engine_generate, engine_limits
#include "../engine/weights.h"         // weights_synthetic
#include "test_util.h"                 // test_rng, test_alloc, test_poison

enum { SLICES_REQS = 3, SLICES_NEW = 4, SLICES_MAX_PROMPT = 40, SLICES_STEP_TOKENS = 64 };
enum slices_mode { SLICES_ONE_CALL, SLICES_EACH, SLICES_PAIRS };
static const char *const slices_mode_name[] = {"one call", "one call a slice", "MoE slices in pairs"};

// Records of SLICES_REQS requests (fresh prompts of 20-40 tokens from seed) batched together.
static inline void slices_generate(ops_set *ops, const model_config *cfg, weight_source *src,
                                   enum slices_mode mode, uint64_t seed, engine_step_record *out) {
    int k = cfg->n_routed_experts > 0 ? cfg->num_experts_per_tok : 1;
    engine_limits lim = {.max_num_seqs = SLICES_REQS, .max_num_batched_tokens = SLICES_STEP_TOKENS,
                         .max_model_len = SLICES_MAX_PROMPT + SLICES_NEW,
                         .max_total_tokens = SLICES_REQS * (SLICES_MAX_PROMPT + SLICES_NEW),
                         .block_size = 16, .tp_size_invariant = true,
                         .tp_slices_each = mode == SLICES_EACH};
    if (mode == SLICES_PAIRS)  // room for two slices' fp32 expert rows
        lim.tp_slices_fp32_bytes = 2L * SLICES_STEP_TOKENS * k * cfg->hidden_size * (long)sizeof(float);
    engine *e = engine_create(cfg, src, ops, &lim, seed);
    test_rng rng = test_rng_make(seed ^ 0x736c69636573ull);
    int32_t prompts[SLICES_REQS][SLICES_MAX_PROMPT];
    engine_request reqs[SLICES_REQS];
    engine_result res[SLICES_REQS];
    for (int i = 0; i < SLICES_REQS; i++) {
        int len = 20 + test_below(&rng, SLICES_MAX_PROMPT - 20 + 1);
        for (int p = 0; p < len; p++) prompts[i][p] = (int32_t)test_below(&rng, cfg->vocab_size);
        reqs[i] = (engine_request){.prompt = prompts[i], .prompt_len = len,
                                   .max_new_tokens = SLICES_NEW, .seed = (uint64_t)i};
        res[i] = (engine_result){.steps = out + (long)i * SLICES_NEW};
    }
    test_poison(out, sizeof(engine_step_record) * SLICES_REQS * SLICES_NEW);
    engine_sched sched = {.max_num_seqs = SLICES_REQS, .max_num_batched_tokens = SLICES_STEP_TOKENS,
                          .chunked_prefill = true, .top_k = 5};
    char err[512] = "";
    if (!engine_generate(e, reqs, SLICES_REQS, &sched, res, NULL, err, sizeof err))
        fail_msg("tp slices (%s): %s", slices_mode_name[mode], err);
    for (int i = 0; i < SLICES_REQS; i++) assert_int_equal(res[i].n_steps, SLICES_NEW);
    engine_destroy(e);
}

static inline void check_slices_one_call_equals_each(ops_set *ops, const char *model, uint64_t seed) {
    model_config cfg;
    assert_true(model_config_by_name(model, &cfg));
    weight_source *src = weights_synthetic(&cfg, seed);
    const long n = SLICES_REQS * SLICES_NEW;
    engine_step_record *each = test_alloc(sizeof *each * n), *other = test_alloc(sizeof *other * n);
    slices_generate(ops, &cfg, src, SLICES_EACH, seed, each);
    for (long i = 0; i < n; i++) assert_true(each[i].token >= 0);  // every record written
    for (int mode = SLICES_ONE_CALL; mode <= SLICES_PAIRS; mode += 2) {
        slices_generate(ops, &cfg, src, (enum slices_mode)mode, seed, other);
        for (long i = 0; i < n; i++) {
            assert_true(other[i].token >= 0);
            if (memcmp(&other[i], &each[i], sizeof other[i]) != 0)
                fail_msg("%s on %s: request %ld step %ld: %s token %d logprob %a, one call a slice "
                         "token %d logprob %a", model, ops->device, i / SLICES_NEW, i % SLICES_NEW,
                         slices_mode_name[mode], other[i].token, (double)other[i].logprob,
                         each[i].token, (double)each[i].logprob);
        }
    }
    free(other);
    free(each);
    src->destroy(src);
}

#endif
