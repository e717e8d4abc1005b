// tests/engine_slices_check.h — TP-size invariance's one-call forms against one call a slice,
// end to end on one device: the engine at T = 1 with tp_size_invariance gives every request
// the same records with its one-call forms (batched slice GEMMs, the slices' gate/up as one
// GEMM, moe_experts and moe_combine over every slice, sum_slices_f32) as with tp_slices_each
// (the calls a rank makes at T = 8, which TP-size invariance compares against). A difference
// there would show as TP = 1 vs TP = 8 differing on a host with eight devices; here it needs one.
#ifndef INVAR_TESTS_ENGINE_SLICES_CHECK_H
#define INVAR_TESTS_ENGINE_SLICES_CHECK_H

#include <string.h>                    // memcmp

#include "../engine/engine.h"          // engine_create, engine_generate, engine_limits
#include "../engine/weights.h"         // weights_synthetic
#include "test_util.h"                 // test_rng, test_alloc, test_poison

enum { SLICES_REQS = 3, SLICES_NEW = 4, SLICES_MAX_PROMPT = 40 };

// Records of SLICES_REQS requests (fresh prompts of 20-40 tokens from seed) batched together.
static inline void slices_generate(ops_set *ops, const model_config *cfg, weight_source *src,
                                   bool each, uint64_t seed, engine_step_record *out) {
    engine_limits lim = {.max_num_seqs = SLICES_REQS, .max_num_batched_tokens = 64,
                         .max_model_len = SLICES_MAX_PROMPT + SLICES_NEW,
                         .max_total_tokens = SLICES_REQS * (SLICES_MAX_PROMPT + SLICES_NEW),
                         .block_size = 16, .tp_size_invariant = true, .tp_slices_each = each};
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
    engine_sched sched = {.max_num_seqs = SLICES_REQS, .max_num_batched_tokens = 64,
                          .chunked_prefill = true, .top_k = 5};
    char err[512] = "";
    if (!engine_generate(e, reqs, SLICES_REQS, &sched, res, NULL, err, sizeof err))
        fail_msg("tp slices (%s): %s", each ? "each" : "one call", err);
    for (int i = 0; i < SLICES_REQS; i++) assert_int_equal(res[i].n_steps, SLICES_NEW);
    engine_destroy(e);
}

static inline void check_slices_one_call_equals_each(ops_set *ops, const char *model, uint64_t seed) {
    model_config cfg;
    assert_true(model_config_by_name(model, &cfg));
    weight_source *src = weights_synthetic(&cfg, seed);
    const long n = SLICES_REQS * SLICES_NEW;
    engine_step_record *one = test_alloc(sizeof *one * n), *each = test_alloc(sizeof *each * n);
    slices_generate(ops, &cfg, src, false, seed, one);
    slices_generate(ops, &cfg, src, true, seed, each);
    for (long i = 0; i < n; i++) {
        assert_true(one[i].token >= 0 && each[i].token >= 0);  // every record written
        if (memcmp(&one[i], &each[i], sizeof one[i]) != 0)
            fail_msg("%s on %s: request %ld step %ld: one-call forms token %d logprob %a, one call a "
                     "slice token %d logprob %a", model, ops->device, i / SLICES_NEW, i % SLICES_NEW,
                     one[i].token, (double)one[i].logprob, each[i].token, (double)each[i].logprob);
    }
    free(each);
    free(one);
    src->destroy(src);
}

#endif
