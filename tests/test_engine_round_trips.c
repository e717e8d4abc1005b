// tests/test_engine_round_trips.c — a step of the engine crosses between host and device once
// each way: its metadata packed into one upload, its sampling results read back in one
// download (on a GPU each copy is a host round trip; the engine once made up to 16 of them a
// step). Counted through a wrapper of the invariant CPU set over a session of requests that
// prefill (in chunks), hit the prefix cache and decode together; and the records equal those of
// a plain generate. The wrapper also holds the engine to upload_async's contract (its source
// unchanged until the next sync or download), which a CPU set's synchronous copies cannot show
// broken: a prefill chunk that samples nothing ends without a download, and the next step
// packs into the other of two host buffers without waiting.
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

enum { PENDING = 4 };  // asynchronous uploads followed by no sync or download yet, at most

typedef struct {
    ops_wrapper wrap;                 // first: the engine calls through wrap.base
    long uploads, downloads, async_uploads, syncs;
    // The asynchronous uploads since the last sync or download: each source and a hash of its
    // bytes then; a rewrite of those bytes before either breaks upload_async's contract.
    struct {
        const unsigned char *src;
        size_t bytes;
        uint64_t hash;
    } pending[PENDING];
    int n_pending;
    long violations;
} counting_set;

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// Whether each pending upload's source still holds what it held when the copy was queued.
static void check_pending(counting_set *c) {
    for (int i = 0; i < c->n_pending; i++)
        if (fnv1a(c->pending[i].src, c->pending[i].bytes) != c->pending[i].hash) c->violations++;
}

static void count_sync(ops_set *ops) {
    counting_set *c = (counting_set *)ops;
    c->syncs++;
    check_pending(c);
    c->n_pending = 0;
    c->wrap.inner->sync(c->wrap.inner);
}

static void count_upload(ops_set *ops, void *dst, const void *src, size_t bytes) {
    counting_set *c = (counting_set *)ops;
    c->uploads++;
    c->wrap.inner->upload(c->wrap.inner, dst, src, bytes);
}

static void count_upload_async(ops_set *ops, void *dst, const void *src, size_t bytes) {
    counting_set *c = (counting_set *)ops;
    c->uploads++;
    c->async_uploads++;
    check_pending(c);
    if (c->n_pending == PENDING) fail_msg("%d asynchronous uploads without a sync or a download", PENDING + 1);
    c->pending[c->n_pending].src = src;
    c->pending[c->n_pending].bytes = bytes;
    c->pending[c->n_pending].hash = fnv1a(src, bytes);
    c->n_pending++;
    c->wrap.inner->upload_async(c->wrap.inner, dst, src, bytes);
}

static void count_download(ops_set *ops, void *dst, const void *src, size_t bytes) {
    counting_set *c = (counting_set *)ops;
    c->downloads++;
    check_pending(c);
    c->n_pending = 0;
    c->wrap.inner->download(c->wrap.inner, dst, src, bytes);
}

enum { N_REQ = 5, NEW = 6, MAX_LEN = 96 };

static counting_set *counting_wrap(ops_set *inner) {
    counting_set *c = test_alloc(sizeof *c);
    memset(c, 0, sizeof *c);
    ops_wrapper_init(&c->wrap, inner);
    c->wrap.base.upload = count_upload;
    c->wrap.base.download = count_download;
    c->wrap.base.upload_async = count_upload_async;
    c->wrap.base.sync = count_sync;
    return c;
}

// The tiny model's synthetic weights, the invariant CPU set and the counting wrapper over it.
typedef struct {
    model_config cfg;
    weight_source *src;
    ops_set *inner;
    counting_set *c;
} rig;

static rig rig_open(uint64_t seed) {
    rig r;
    assert_true(model_config_by_name("tiny", &r.cfg));
    r.src = weights_synthetic(&r.cfg, seed);
    r.inner = inv_cpu_create(2);
    r.c = counting_wrap(r.inner);
    return r;
}

static void rig_close(rig *r) {
    free(r->c);
    r->inner->destroy(r->inner);
    r->src->destroy(r->src);
}

static void one_copy_each_way_a_step(void **state) {
    (void)state;
    rig rg = rig_open(11);
    const model_config cfg = rg.cfg;
    ops_set *inner = rg.inner;
    counting_set *c = rg.c;
    engine_limits lim = {.max_num_seqs = N_REQ, .max_num_batched_tokens = 48,
                         .max_model_len = MAX_LEN, .max_total_tokens = N_REQ * MAX_LEN,
                         .block_size = 16};
    engine *e = engine_create(&cfg, rg.src, &c->wrap.base, &lim, 11);
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
    assert_int_equal(c->violations, 0);
    for (int i = 0; i < N_REQ; i++) assert_int_equal(results[i].n_steps, NEW);
    // The same records as a generate of the same requests on the bare set.
    engine *plain = engine_create(&cfg, rg.src, inner, &lim, 11);
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
    rig_close(&rg);
}

// One prompt of 110 tokens under a 48-token budget: two chunks that sample nothing, so those
// steps end without a download. The second packs into the other host buffer without waiting
// (the host prepares it while the device runs the first); the third packs into the first
// chunk's buffer, whose upload may still be in flight: it waits first, once.
static void a_chunk_that_samples_nothing_is_waited_for(void **state) {
    (void)state;
    rig rg = rig_open(12);
    counting_set *c = rg.c;
    engine_limits lim = {.max_num_seqs = 1, .max_num_batched_tokens = 48, .max_model_len = 128,
                         .max_total_tokens = 128, .block_size = 16};
    engine *e = engine_create(&rg.cfg, rg.src, &c->wrap.base, &lim, 12);
    engine_sched sched = {.max_num_seqs = 1, .max_num_batched_tokens = 48, .chunked_prefill = true,
                          .top_k = 2};
    int32_t prompt[110];
    test_fill_i32(prompt, 110, 5, 0, rg.cfg.vocab_size);
    engine_request req = {.prompt = prompt, .prompt_len = 110, .max_new_tokens = 3};
    engine_step_record records[3];
    engine_result result = {.steps = records};
    char err[256];
    assert_true(engine_begin(e, &sched, err, sizeof err));
    assert_int_equal(engine_submit(e, &req, &result, err, sizeof err), 0);
    int silent = 0;  // steps that ended without a download
    long syncs = c->syncs;  // engine_create's own sync before
    while (!engine_all_finished(e)) {
        long down = c->downloads;
        if (engine_step(e, err, sizeof err) <= 0) fail_msg("engine_step: %s", err);
        silent += c->downloads == down;
    }
    assert_int_equal(silent, 2);
    assert_int_equal(result.n_steps, 3);
    assert_int_equal(c->syncs - syncs, 1);
    if (c->violations) fail_msg("%ld uploads had their source rewritten before a sync", c->violations);
    engine_destroy(e);
    rig_close(&rg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_copy_each_way_a_step),
        cmocka_unit_test(a_chunk_that_samples_nothing_is_waited_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
