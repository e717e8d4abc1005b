// tests/test_scheduler.c — continuous batching: the token budget, max_num_seqs, chunked
// prefill, arrivals, and prefix-cache hits at admission (engine/scheduler.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdlib.h>   // rand_r
#include <string.h>   // strstr

#include "../engine/scheduler.h"  // scheduler_*

#define MAX_SEQS 8

typedef struct {
    int32_t prompt[4][300];
    engine_request reqs[4];
} fixture;

static void make_requests(fixture *f, const int *lens, int n, int max_new, unsigned seed) {
    for (int i = 0; i < n; i++) {
        for (int p = 0; p < lens[i]; p++) f->prompt[i][p] = (int32_t)(rand_r(&seed) % 500) + 1;
        f->reqs[i] = (engine_request){.prompt = f->prompt[i], .prompt_len = lens[i],
                                      .max_new_tokens = max_new, .seed = (uint64_t)i};
    }
}

// One test's scheduler over a KV cache of its own (blocks of 16 tokens), begun on the first n
// requests of its fixture; items and err are the last step's.
typedef struct {
    fixture f;
    kv_cache *kv;
    scheduler *s;
    engine_sched o;
    sched_item items[MAX_SEQS];
    char err[200];
} rig;

static void rig_begin(rig *r, int n, int blocks, bool prefix_caching, engine_sched o) {
    r->kv = kv_cache_create(blocks, 16, prefix_caching);
    r->s = scheduler_create(r->kv, MAX_SEQS, 512);
    r->o = o;
    r->err[0] = '\0';
    if (!scheduler_begin(r->s, r->f.reqs, n, &r->o, r->err, sizeof r->err)) fail_msg("scheduler_begin: %s", r->err);
}

static int rig_step(rig *r) { return scheduler_schedule(r->s, r->items, r->err, sizeof r->err); }

static void rig_end(rig *r) {
    scheduler_destroy(r->s);
    kv_cache_destroy(r->kv);
}

// Runs to completion; returns steps and checks every step's budget and sequence count.
static int run_all(rig *r, int *chunks_of_req0) {
    int32_t sampled[MAX_SEQS];
    int steps = 0;
    while (!scheduler_done(r->s)) {
        int n = rig_step(r);
        assert_true(n >= 0);
        int tokens = 0;
        for (int i = 0; i < n; i++) {
            const sched_item *it = &r->items[i];
            assert_true(it->n_tokens > 0);  // an item of no tokens is never a step's work
            tokens += it->n_tokens;
            sampled[i] = 7;
            if (it->req == 0 && chunks_of_req0 && it->start < 100) (*chunks_of_req0)++;
        }
        assert_true(tokens <= r->o.max_num_batched_tokens);
        assert_true(n <= r->o.max_num_seqs);
        scheduler_complete(r->s, r->items, n, sampled);
        assert_true(++steps < 10000);
    }
    return steps;
}

static void budget_chunks_long_prompts(void **state) {
    (void)state;
    rig r;
    int lens[3] = {100, 10, 20};
    make_requests(&r.f, lens, 3, 4, 1);
    rig_begin(&r, 3, 64, false,
              (engine_sched){.max_num_seqs = 3, .max_num_batched_tokens = 32, .chunked_prefill = true});
    int chunks = 0;
    run_all(&r, &chunks);
    assert_int_equal(chunks, 4);  // 100 tokens in chunks of at most 32
    sched_view v = scheduler_view(r.s, 0);
    assert_int_equal(v.tokens[100], 7);  // sampled token appended after the prompt
    assert_int_equal(kv_cache_num_free(r.kv), 64);  // finished requests gave their blocks back
    rig_end(&r);
}

static void first_step_mixes_prefill_within_budget(void **state) {
    (void)state;
    rig r;
    int lens[3] = {10, 10, 10};
    make_requests(&r.f, lens, 3, 2, 2);
    rig_begin(&r, 3, 64, false,
              (engine_sched){.max_num_seqs = 2, .max_num_batched_tokens = 15, .chunked_prefill = true});
    int n = rig_step(&r);
    assert_int_equal(n, 2);  // max_num_seqs = 2
    assert_int_equal(r.items[0].n_tokens, 10);
    assert_true(r.items[0].sample);
    assert_int_equal(r.items[1].n_tokens, 5);  // cut to the budget left
    assert_false(r.items[1].sample);
    rig_end(&r);
}

// A step whose running requests take the budget exactly admits no one: a waiting request
// admitted with an empty chunk would join the running order ahead of its turn (and, with prefix
// caching, take its cached blocks a step early).
static void used_up_budget_admits_no_one(void **state) {
    (void)state;
    rig r;
    int lens[2] = {15, 10};
    make_requests(&r.f, lens, 2, 3, 5);
    rig_begin(&r, 2, 64, false,
              (engine_sched){.max_num_seqs = 4, .max_num_batched_tokens = 15, .chunked_prefill = true});
    int32_t sampled[MAX_SEQS] = {7};
    int n = rig_step(&r);
    assert_int_equal(n, 1);  // request 0's 15 prompt tokens are the whole budget
    assert_int_equal(r.items[0].req, 0);
    assert_int_equal(r.items[0].n_tokens, 15);
    scheduler_complete(r.s, r.items, n, sampled);
    n = rig_step(&r);
    assert_int_equal(n, 2);  // request 0's decode, then request 1 admitted
    assert_int_equal(r.items[1].req, 1);
    assert_int_equal(r.items[1].n_tokens, 10);
    rig_end(&r);
}

static void unchunked_prompt_waits_for_room(void **state) {
    (void)state;
    rig r;
    int lens[2] = {10, 20};
    make_requests(&r.f, lens, 2, 2, 3);
    rig_begin(&r, 2, 64, false,
              (engine_sched){.max_num_seqs = 4, .max_num_batched_tokens = 24, .chunked_prefill = false});
    assert_int_equal(rig_step(&r), 1);  // 20 doesn't fit in 14
    // A prompt over the whole budget is refused up front.
    int big[1] = {30};
    make_requests(&r.f, big, 1, 2, 4);
    assert_false(scheduler_begin(r.s, r.f.reqs, 1, &r.o, r.err, sizeof r.err));
    assert_non_null(strstr(r.err, "chunked prefill is off"));
    rig_end(&r);
}

// The bound itself: with chunked prefill off a prompt of exactly max_num_batched_tokens is one
// step's whole budget and runs in one item; one token more is refused up front.
static void unchunked_prompt_of_the_whole_budget_runs(void **state) {
    (void)state;
    rig r;
    int lens[1] = {24};
    make_requests(&r.f, lens, 1, 2, 6);
    rig_begin(&r, 1, 64, false,
              (engine_sched){.max_num_seqs = 4, .max_num_batched_tokens = 24, .chunked_prefill = false});
    assert_int_equal(rig_step(&r), 1);
    assert_int_equal(r.items[0].n_tokens, 24);
    assert_true(r.items[0].sample);
    int over[1] = {25};
    make_requests(&r.f, over, 1, 2, 7);
    assert_false(scheduler_begin(r.s, r.f.reqs, 1, &r.o, r.err, sizeof r.err));
    assert_non_null(strstr(r.err, "chunked prefill is off"));
    rig_end(&r);
}

static void arrivals_wait_for_their_step(void **state) {
    (void)state;
    rig r;
    int lens[2] = {5, 5};
    make_requests(&r.f, lens, 2, 1, 5);
    r.f.reqs[1].arrival_step = 3;
    rig_begin(&r, 2, 64, false,
              (engine_sched){.max_num_seqs = 4, .max_num_batched_tokens = 64, .chunked_prefill = true});
    int32_t sampled[MAX_SEQS] = {1, 1};
    assert_int_equal(rig_step(&r), 1);
    scheduler_complete(r.s, r.items, 1, sampled);
    assert_int_equal(rig_step(&r), 0);  // idle: not arrived
    assert_int_equal(rig_step(&r), 0);
    assert_int_equal(rig_step(&r), 1);
    assert_int_equal(r.items[0].req, 1);
    rig_end(&r);
}

static void shared_prefix_hits_the_cache(void **state) {
    (void)state;
    rig r;
    int lens[2] = {40, 40};
    make_requests(&r.f, lens, 2, 1, 6);
    for (int p = 0; p < 33; p++) r.f.prompt[1][p] = r.f.prompt[0][p];  // two full blocks shared
    rig_begin(&r, 2, 64, true,
              (engine_sched){.max_num_seqs = 1, .max_num_batched_tokens = 64, .chunked_prefill = true});
    int32_t sampled[MAX_SEQS] = {3};
    assert_int_equal(rig_step(&r), 1);
    assert_int_equal(r.items[0].start, 0);
    scheduler_complete(r.s, r.items, 1, sampled);  // request 0 done (1 new token)
    assert_int_equal(rig_step(&r), 1);
    assert_int_equal(r.items[0].req, 1);
    assert_int_equal(r.items[0].start, 32);  // blocks 0 and 1 came from the cache
    assert_int_equal(kv_cache_get_stats(r.kv)->hits, 2);
    rig_end(&r);
}

// A cache of 14 blocks of 16 tokens holds two of these requests (20 + 80 tokens: 7 blocks each)
// but not three. All three prompts fit the first step's budget and the free blocks, yet their
// decodes could not all grow: the third waits until one finished, no step runs out of blocks,
// and no more than two requests ever hold blocks at once.
static void small_cache_delays_admission(void **state) {
    (void)state;
    rig r;
    int lens[3] = {20, 20, 20};
    make_requests(&r.f, lens, 3, 80, 9);
    rig_begin(&r, 3, 14, false,
              (engine_sched){.max_num_seqs = 3, .max_num_batched_tokens = 64, .chunked_prefill = true});
    int32_t sampled[MAX_SEQS];
    int steps = 0, most_live = 0;
    bool third_waited = false;
    while (!scheduler_done(r.s)) {
        int n = rig_step(&r);
        if (n < 0) fail_msg("step %d: %s", steps, r.err);
        int live = 0;
        for (int q = 0; q < 3; q++) live += scheduler_view(r.s, q).n_blocks > 0;
        if (live > most_live) most_live = live;
        if (live == 2 && scheduler_view(r.s, 2).n_blocks == 0 && !scheduler_finished(r.s, 0))
            third_waited = true;
        for (int i = 0; i < n; i++) sampled[i] = 11 + i;
        scheduler_complete(r.s, r.items, n, sampled);
        assert_true(++steps < 1000);
    }
    assert_int_equal(most_live, 2);
    assert_true(third_waited);
    for (int q = 0; q < 3; q++) assert_true(scheduler_finished(r.s, q));
    assert_int_equal(kv_cache_num_free(r.kv), 14);
    rig_end(&r);
}

// A prompt whose every block is cached still computes its last block: its last token's logits
// are what the first sample needs, and no step may schedule zero tokens for it.
static void whole_cached_prompt_computes_its_last_block(void **state) {
    (void)state;
    rig r;
    int lens[2] = {32, 32};
    make_requests(&r.f, lens, 2, 1, 9);
    for (int p = 0; p < 32; p++) r.f.prompt[1][p] = r.f.prompt[0][p];  // the same two blocks
    rig_begin(&r, 2, 64, true,
              (engine_sched){.max_num_seqs = 1, .max_num_batched_tokens = 64, .chunked_prefill = true});
    int32_t sampled[MAX_SEQS] = {3};
    assert_int_equal(rig_step(&r), 1);
    scheduler_complete(r.s, r.items, 1, sampled);
    assert_int_equal(rig_step(&r), 1);
    assert_int_equal(r.items[0].req, 1);
    assert_int_equal(r.items[0].start, 16);     // block 0 from the cache, block 1 computed
    assert_int_equal(r.items[0].n_tokens, 16);
    assert_true(r.items[0].sample);
    rig_end(&r);
}

// A block goes to the prefix cache only once every one of its tokens is computed: a request
// that hit a half-computed block would read KV nobody wrote yet.
static void only_fully_computed_blocks_are_published(void **state) {
    (void)state;
    rig r;
    int lens[1] = {40};
    make_requests(&r.f, lens, 1, 1, 11);
    rig_begin(&r, 1, 64, true,
              (engine_sched){.max_num_seqs = 1, .max_num_batched_tokens = 24, .chunked_prefill = true});
    int32_t sampled[MAX_SEQS] = {3};
    assert_int_equal(rig_step(&r), 1);
    assert_int_equal(r.items[0].n_tokens, 24);  // block 0 whole, block 1 half computed
    scheduler_complete(r.s, r.items, 1, sampled);
    uint64_t key0 = kv_cache_block_key(0, r.f.prompt[0], 16);
    uint64_t key1 = kv_cache_block_key(key0, r.f.prompt[0] + 16, 16);
    assert_true(kv_cache_lookup(r.kv, key0) >= 0);
    assert_true(kv_cache_lookup(r.kv, key1) < 0);
    rig_end(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(only_fully_computed_blocks_are_published),
        cmocka_unit_test(whole_cached_prompt_computes_its_last_block),
        cmocka_unit_test(budget_chunks_long_prompts),
        cmocka_unit_test(first_step_mixes_prefill_within_budget),
        cmocka_unit_test(used_up_budget_admits_no_one),
        cmocka_unit_test(unchunked_prompt_waits_for_room),
        cmocka_unit_test(unchunked_prompt_of_the_whole_budget_runs),
        cmocka_unit_test(arrivals_wait_for_their_step),
        cmocka_unit_test(shared_prefix_hits_the_cache),
        cmocka_unit_test(small_cache_delays_admission),
    };
    return cmocka_run_group_tests_name("scheduler", tests, NULL, NULL);
}
