// tests/test_engine_round_trips.c — a step of the engine crosses between host and device once
// each way: its metadata packed into one upload, its sampling results read back in one
// download (on a GPU each copy is a host round trip; the engine once made up to 16 of them a
// step). Counted through a wrapper of the invariant CPU set over a session of requests that
// prefill (in chunks), hit the prefix cache and decode together; and the
// records equal those of a plain generate.
#include <stdarg.h>                   // cmocka
#include <stddef.h>                   // cmocka
#include <stdint.h>                   // cmocka
#include <setjmp.h>                   // cmocka
#include <cmocka.h>                   // assert_*, cmocka_unit_test

#include <stdlib.h>                   // free
#include <string.h>                   // memcmp

#include "../engine/engine.h"         // engine_*
#include "../engine/model_config.h"   // model_config_by_name
#include "../engine/weights.h"        // weights_synthetic
#include "../kernels/cpu/inv_cpu.h"   // inv_cpu_create
#include "../sets/ops_wrapper.h"      // ops_wrapper, ops_wrapper_init
#include "test_util.h"                // test_alloc, test_fill_i32

typedef struct {
    ops_wrapper wrap;                 // first: the engine calls through wrap.base
    long uploads, downloads, async_uploads;
} counting_set;

static void count_upload(ops_set *ops, void *dst, const void *src, size_t bytes) {
    counting_set *c = (counting_set *)ops;
    c->uploads++;
    c->wrap.inner->upload(c->wrap.inner, dst, src, bytes);
}

static void count_upload_async(ops_set *ops, void *dst, const void *src, size_t bytes) {
    counting_set *c = (counting_set *)ops;
    c->uploads++;
    c->async_uploads++;
    c->wrap.inner->upload_async(c->wrap.inner, dst, src, bytes);
}

static void count_download(ops_set *ops, void *dst, const void *src, size_t bytes) {
    counting_set *c = (counting_set *)ops;
    c->downloads++;
    c->wrap.inner->download(c->wrap.inner, dst, src, bytes);
}

enum { N_REQ = 5, NEW = 6, MAX_LEN = 96 };

static void one_copy_each_way_a_step(void **state) {
    (void)state;
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    weight_source *src = weights_synthetic(&cfg, 11);
    ops_set *inner = inv_cpu_create(2);
    counting_set *c = test_alloc(sizeof *c);
    ops_wrapper_init(&c->wrap, inner);
    c->wrap.base.upload = count_upload;
    c->wrap.base.download = count_download;
    c->wrap.base.upload_async = count_upload_async;
    engine_limits lim = {.max_num_seqs = N_REQ, .max_num_batched_tokens = 48,
                         .max_model_len = MAX_LEN, .max_total_tokens = N_REQ * MAX_LEN,
                         .block_size = 16};
    engine *e = engine_create(&cfg, src, &c->wrap.base, &lim, 11);
    engine_sched sched = {.max_num_seqs = N_REQ, .max_num_batched_tokens = 48,
                          .chunked_prefill = true, .top_k = 4, .prefix_caching = true};
    // Prompts of 20-60 tokens sharing a 32-token prefix: chunked prefill, prefix hits, decodes.
    int32_t prompts[N_REQ][64];
    test_fill_i32(&prompts[0][0], (long)N_REQ * 64, 3, 0, cfg.vocab_size);
    for (int i = 1; i < N_REQ; i++) memcpy(prompts[i], prompts[0], 32 * sizeof(int32_t));
    engine_request reqs[N_REQ];
    engine_step_record records[N_REQ][NEW];
    engine_result results[N_REQ];
    char err[256];
    assert_true(engine_begin(e, &sched, err, sizeof err));
    for (int i = 0; i < N_REQ; i++) {
        reqs[i] = (engine_request){.prompt = prompts[i], .prompt_len = 20 + 10 * i,
                                   .max_new_tokens = NEW, .temperature = 0.7f, .seed = (uint64_t)i};
        results[i] = (engine_result){.steps = records[i]};
        assert_true(engine_submit(e, &reqs[i], &results[i], err, sizeof err) == i);
    }
    int steps = 0;
    while (!engine_all_finished(e)) {
        long up = c->uploads, down = c->downloads;
        int n = engine_step(e, err, sizeof err);
        if (n <= 0) fail_msg("engine_step: %d %s", n, err);
        if (c->uploads - up != 1 || c->downloads - down > 1)
            fail_msg("step %d (%d requests): %ld uploads, %ld downloads; one each at most", steps, n,
                     c->uploads - up, c->downloads - down);
        steps++;
    }
    assert_true(steps > NEW);
    // The set has host memory the device copies from directly: every step's upload returned
    // at once (on CUDA, from pinned memory without a wait).
    assert_int_equal(c->async_uploads, steps);
    for (int i = 0; i < N_REQ; i++) assert_int_equal(results[i].n_steps, NEW);
    // The same records as a generate of the same requests on the bare set.
    engine *plain = engine_create(&cfg, src, inner, &lim, 11);
    engine_step_record again[N_REQ][NEW];
    engine_result plain_results[N_REQ];
    for (int i = 0; i < N_REQ; i++) plain_results[i] = (engine_result){.steps = again[i]};
    assert_true(engine_generate(plain, reqs, N_REQ, &sched, plain_results, NULL, err, sizeof err));
    for (int i = 0; i < N_REQ; i++)
        for (int s = 0; s < NEW; s++) {
            assert_int_equal(records[i][s].token, again[i][s].token);
            assert_memory_equal(&records[i][s].logprob, &again[i][s].logprob, sizeof(float));
            assert_memory_equal(records[i][s].topk_logprobs, again[i][s].topk_logprobs, 4 * sizeof(float));
        }
    engine_destroy(plain);
    engine_destroy(e);
    free(c);
    inner->destroy(inner);
    src->destroy(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_copy_each_way_a_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
