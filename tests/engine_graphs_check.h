// tests/engine_graphs_check.h — CUDA graphs end to end on one device: an engine whose decode
// steps are padded to graph buckets (and, on a set with graphs, replayed from the step captured
// for the bucket) gives every request the records of an engine that runs each step as
// scheduled, bit for bit. Requests generate 2 to 13 tokens, so the batch shrinks one request a
// step through buckets 16, 8, 4, 2, 1; blocks of 7 tokens put the padding rows' dummy slot off
// any multiple of 4; a shared prompt prefix is found in the prefix cache by requests that
// arrive later; a session whose first prefill is the largest yet grows the set's buffers after
// graphs were captured; a session with another top_k must not replay graphs captured before
// (its records would miss entries).
#ifndef INVAR_TESTS_ENGINE_GRAPHS_CHECK_H
#define INVAR_TESTS_ENGINE_GRAPHS_CHECK_H

#include <string.h>                    // memcmp

#include "../engine/engine.h"          // engine_limits, engine_request, engine_result
#include "../engine/tp_engine.h"       // tp_engine_create, tp_engine_generate
#include "../engine/weights.h"         // weights_synthetic
#include "test_util.h"                 // test_rng, test_alloc, test_poison

// Blocks of 7 and max_model_len 49 give a block table of 7 entries a sequence, 28 bytes: the
// step's packed arrays after it move when a bucket-16 step holds 9 sequences instead of 10-16
// (one 256-byte unit instead of two), so a graph replayed over another step's layout shows.
enum { GRAPHS_REQS = 13, GRAPHS_MAX_NEW = 13, GRAPHS_MAX_PROMPT = 36, GRAPHS_PREFIX = 14 };

enum { GRAPHS_SESSIONS = 3 };

typedef struct {  // of the sessions
    engine_step_record rec[GRAPHS_SESSIONS][GRAPHS_REQS][GRAPHS_MAX_NEW];
    int n_steps[GRAPHS_REQS];
    engine_stats stats[GRAPHS_SESSIONS];
} graphs_records;

// Three sessions of the same GRAPHS_REQS requests on one engine of T ranks (ops[r] rank r's set): top_k 5 with four requests a
// step late; top_k 5 with all at once (a first prefill step larger than any before, so a set's
// buffers grow after the first session's graphs were captured: they must be captured again);
// top_k 3. with_buckets: decode steps padded to buckets 1, 2, 4, 8, 16.
static inline void graphs_generate(ops_set *const *ops, int T, const model_config *cfg, weight_source *src,
                                   bool with_buckets, uint64_t seed, graphs_records *out) {
    // Room for bucket 16 (a bucket past max_num_seqs is never used).
    engine_limits lim = {.max_num_seqs = 16, .max_num_batched_tokens = 512,
                         .max_model_len = GRAPHS_MAX_PROMPT + GRAPHS_MAX_NEW,
                         .max_total_tokens = GRAPHS_REQS * (GRAPHS_MAX_PROMPT + GRAPHS_MAX_NEW),
                         .block_size = 7};
    if (with_buckets) {
        const int buckets[] = {1, 2, 4, 8, 16};
        memcpy(lim.graph_buckets, buckets, sizeof buckets);
        lim.n_graph_buckets = 5;
    }
    tp_engine *e = tp_engine_create(cfg, src, ops, T, &lim, seed);
    test_rng rng = test_rng_make(seed ^ 0x6772617068ull);
    int32_t prompts[GRAPHS_REQS][GRAPHS_MAX_PROMPT];
    engine_request reqs[GRAPHS_REQS];
    for (int i = 0; i < GRAPHS_REQS; i++) {
        int len = GRAPHS_PREFIX + 2 + test_below(&rng, GRAPHS_MAX_PROMPT - GRAPHS_PREFIX - 2 + 1);
        for (int p = 0; p < len; p++)
            prompts[i][p] = i > 0 && i % 3 == 0 && p < GRAPHS_PREFIX ? prompts[0][p]  // a shared prefix
                                                             : (int32_t)test_below(&rng, cfg->vocab_size);
        reqs[i] = (engine_request){.prompt = prompts[i], .prompt_len = len,
                                   .max_new_tokens = 2 + i % (GRAPHS_MAX_NEW - 1), .seed = (uint64_t)i,
                                   .arrival_step = i >= 9 ? 1 : 0};
    }
    test_poison(out, sizeof *out);
    for (int session = 0; session < GRAPHS_SESSIONS; session++) {
        for (int i = 9; i < GRAPHS_REQS; i++) reqs[i].arrival_step = session == 1 ? 0 : 1;
        engine_result res[GRAPHS_REQS];
        for (int i = 0; i < GRAPHS_REQS; i++) res[i] = (engine_result){.steps = out->rec[session][i]};
        engine_sched sched = {.max_num_seqs = GRAPHS_REQS, .max_num_batched_tokens = 512,
                              .chunked_prefill = true, .top_k = session < 2 ? 5 : 3, .prefix_caching = true};
        char err[512] = "";
        if (!tp_engine_generate(e, reqs, GRAPHS_REQS, &sched, res, &out->stats[session], err, sizeof err))
            fail_msg("graphs (%s): %s", with_buckets ? "buckets" : "as scheduled", err);
        for (int i = 0; i < GRAPHS_REQS; i++) {
            out->n_steps[i] = res[i].n_steps;
            assert_int_equal(res[i].n_steps, reqs[i].max_new_tokens);
            for (int s = 0; s < res[i].n_steps; s++) {  // every entry of the session's top_k written
                const engine_step_record *r = &res[i].steps[s];
                assert_true(r->token >= 0 && r->token < cfg->vocab_size);
                for (int j = 0; j < sched.top_k; j++)
                    assert_true(r->topk_ids[j] >= 0 && r->topk_ids[j] < cfg->vocab_size);
            }
        }
    }
    tp_engine_destroy(e);
}

// The records with buckets (on the T sets `graphs`, whose graph ops are used where they have
// them) against those without (on `plain`), every session's records compared bit for bit; and
// the buckets engaged: decode steps padded, and replayed where the sets have graphs.
static inline void check_graphs_equal_as_scheduled(ops_set *const *plain, ops_set *const *graphs, int T,
                                                   const char *model, uint64_t seed) {
    model_config cfg;
    assert_true(model_config_by_name(model, &cfg));
    weight_source *src = weights_synthetic(&cfg, seed);
    graphs_records *want = test_alloc(sizeof *want), *got = test_alloc(sizeof *got);
    graphs_generate(plain, T, &cfg, src, false, seed, want);
    graphs_generate(graphs, T, &cfg, src, true, seed, got);
    for (int s = 0; s < GRAPHS_SESSIONS; s++) {
        if (s != 1 && want->stats[s].prefix_hits == 0)  // session 1's prompts all arrive at once
            fail_msg("session %d: no prefix-cache hit", s);
        assert_int_equal(want->stats[s].graph_steps, 0);
        if (got->stats[s].graph_steps == 0) fail_msg("session %d: no decode step was padded to a bucket", s);
        if (graphs[0]->graph_capture && got->stats[s].graph_replays == 0)
            fail_msg("session %d on %s at T = %d: no step was replayed from a graph", s, graphs[0]->device, T);
    }
    for (int n = 0; n < GRAPHS_SESSIONS; n++)
        for (int i = 0; i < GRAPHS_REQS; i++)
            for (int s = 0; s < want->n_steps[i]; s++) {
                const engine_step_record *g = &got->rec[n][i][s], *w = &want->rec[n][i][s];
                if (memcmp(g, w, sizeof *g) != 0)
                    fail_msg("%s on %s at T = %d: session %d request %d step %d: with buckets token %d "
                             "logprob %a, as scheduled token %d logprob %a", model, graphs[0]->device, T, n, i, s, g->token,
                             (double)g->logprob, w->token, (double)w->logprob);
            }
    free(got);
    free(want);
    src->destroy(src);
}

#endif
