// tests/test_engine_graphs.c — CUDA graphs' engine side on the CPU (engine/engine.c's graph
// buckets, sets/graph_record.h's recorded calls): decode steps padded to buckets, and replayed
// from recorded calls with their arguments frozen, give the records of steps run as scheduled,
// bit for bit (tests/engine_graphs_check.h), on one rank and on two (collectives recorded too);
// padding leaves a pool whose every block is in use intact; a capture that copies to or from the
// host exits; bad buckets are refused.
#include <stdarg.h>                      // cmocka
#include <stddef.h>                      // cmocka
#include <stdint.h>                      // cmocka
#include <setjmp.h>                      // cmocka
#include <cmocka.h>                      // assert_*, cmocka_unit_test

#include <stdlib.h>                      // free
#include <sys/wait.h>                    // waitpid, WEXITSTATUS
#include <unistd.h>                      // fork, _exit

#include "../kernels/cpu/inv_cpu.h"      // inv_cpu_create
#include "../sets/graph_record.h"        // graph_record_wrap
#include "engine_graphs_check.h"         // check_graphs_equal_as_scheduled

// Recorded graphs: padded, replayed, and the same bits as steps run as scheduled.
static void replayed_steps_equal_steps_as_scheduled(void **state) {
    (void)state;
    ops_set *plain = inv_cpu_create(2), *graphs = graph_record_wrap(inv_cpu_create(2));
    check_graphs_equal_as_scheduled(&plain, &graphs, 1, "tiny", 20261206u);
    graphs->destroy(graphs);
    plain->destroy(plain);
}

// Padding alone (a set without graphs pads and runs each call): the same bits too.
static void padded_steps_equal_steps_as_scheduled(void **state) {
    (void)state;
    ops_set *plain = inv_cpu_create(2), *padded = inv_cpu_create(2);
    check_graphs_equal_as_scheduled(&plain, &padded, 1, "tiny-v2", 20261207u);
    padded->destroy(padded);
    plain->destroy(plain);
}

// Two ranks, each replaying its own recorded graph, collectives included: the same bits as the
// two ranks running every step as scheduled.
static void two_ranks_replay_their_graphs(void **state) {
    (void)state;
    ops_set *plain[2], *graphs[2];
    for (int r = 0; r < 2; r++) {
        plain[r] = inv_cpu_create(1);
        graphs[r] = graph_record_wrap(inv_cpu_create(1));
    }
    check_graphs_equal_as_scheduled(plain, graphs, 2, "tiny-tp", 20261208u);
    for (int r = 0; r < 2; r++) {
        graphs[r]->destroy(graphs[r]);
        plain[r]->destroy(plain[r]);
    }
}

// One request of prompt_len tokens generating 4, alone, on e: its records into rec.
static void generate_one(engine *e, const int32_t *prompt, int prompt_len, engine_step_record *rec) {
    engine_request req = {.prompt = prompt, .prompt_len = prompt_len, .max_new_tokens = 4, .seed = 3};
    engine_result res = {.steps = rec};
    engine_sched sched = {.max_num_seqs = 2, .max_num_batched_tokens = 256, .chunked_prefill = true,
                          .top_k = 5};
    char err[256] = "";
    test_poison(rec, 4 * sizeof *rec);
    if (!engine_generate(e, &req, 1, &sched, &res, NULL, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, 4);
}

// A bucket's graph holds the attention length it was captured with (a power of two from 64,
// not max_model_len): a later session whose sequences grow past it (a prompt of 150 after one
// of 10, the same top_k, so the graph is kept) must capture it again, with the records of an
// engine without buckets. A graph replayed past its length would, on a GPU, drop the KV splits
// beyond it; on the CPU the attention refuses the position.
static void graphs_grow_with_the_sequences(void **state) {
    (void)state;
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    weight_source *src = weights_synthetic(&cfg, 31);
    ops_set *plain = inv_cpu_create(2), *graphs = graph_record_wrap(inv_cpu_create(2));
    engine_limits lim = {.max_num_seqs = 2, .max_num_batched_tokens = 256, .max_model_len = 200,
                         .max_total_tokens = 400, .block_size = 16, .graph_buckets = {1, 2},
                         .n_graph_buckets = 2};
    engine *with = engine_create(&cfg, src, graphs, &lim, 31);
    lim.n_graph_buckets = 0;
    engine *without = engine_create(&cfg, src, plain, &lim, 31);
    int32_t prompt[150];
    test_fill_i32(prompt, 150, 32, 0, cfg.vocab_size - 1);
    engine_step_record want[4], got[4];
    const int lens[] = {10, 150};
    for (int i = 0; i < 2; i++) {
        generate_one(without, prompt, lens[i], want);
        generate_one(with, prompt, lens[i], got);
        engine_stats st = engine_session_stats(with);
        if (st.graph_steps != 3) fail_msg("prompt of %d: %ld decode steps padded, not 3", lens[i], st.graph_steps);
        for (int j = 0; j < 4; j++)
            if (memcmp(&got[j], &want[j], sizeof got[j]) != 0)
                fail_msg("prompt of %d, step %d: with graphs token %d logprob %a, without token %d logprob %a",
                         lens[i], j, got[j].token, (double)got[j].logprob, want[j].token, (double)want[j].logprob);
    }
    engine_destroy(without);
    engine_destroy(with);
    graphs->destroy(graphs);
    plain->destroy(plain);
    src->destroy(src);
}

// Padding rows write their KV to a block past the pool, never to one a request may own: in a pool
// of exactly 12 blocks of 5 tokens, where three requests of up to 4 blocks hold every block and
// the rest wait for blocks to free up, steps padded from 3 rows to bucket 4 give the records of
// steps run as scheduled (a dummy block inside the pool overwrites a live request's first slot).
static void padding_leaves_a_full_pool_intact(void **state) {
    (void)state;
    enum { REQS = 9, MAX_NEW = 6 };
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    weight_source *src = weights_synthetic(&cfg, 41);
    test_rng rng = test_rng_make(0x706f6f6cull);
    int32_t prompts[REQS][14];
    engine_request reqs[REQS];
    for (int i = 0; i < REQS; i++) {
        int len = 8 + test_below(&rng, 7);  // 8 to 14 tokens: at most 20 with the new ones, 4 blocks
        for (int p = 0; p < len; p++) prompts[i][p] = (int32_t)test_below(&rng, cfg.vocab_size);
        reqs[i] = (engine_request){.prompt = prompts[i], .prompt_len = len, .max_new_tokens = MAX_NEW,
                                   .seed = (uint64_t)i};
    }
    engine_step_record rec[2][REQS][MAX_NEW];
    test_poison(rec, sizeof rec);
    engine_stats stats[2];
    for (int padded = 0; padded < 2; padded++) {
        ops_set *ops = inv_cpu_create(2);
        engine_limits lim = {.max_num_seqs = 4, .max_num_batched_tokens = 256, .max_model_len = 20,
                             .max_total_tokens = 60, .block_size = 5, .kv_cache_blocks = 12,
                             .graph_buckets = {1, 2, 4}, .n_graph_buckets = padded ? 3 : 0};
        engine *e = engine_create(&cfg, src, ops, &lim, 41);
        engine_result res[REQS];
        for (int i = 0; i < REQS; i++) res[i] = (engine_result){.steps = rec[padded][i]};
        engine_sched sched = {.max_num_seqs = 3, .max_num_batched_tokens = 256, .chunked_prefill = true,
                              .top_k = 3};
        char err[256] = "";
        if (!engine_generate(e, reqs, REQS, &sched, res, &stats[padded], err, sizeof err)) fail_msg("%s", err);
        for (int i = 0; i < REQS; i++) assert_int_equal(res[i].n_steps, MAX_NEW);
        engine_destroy(e);
        ops->destroy(ops);
    }
    if (stats[1].graph_steps == 0) fail_msg("no decode step was padded to a bucket");
    for (int i = 0; i < REQS; i++)
        for (int s = 0; s < MAX_NEW; s++)
            if (memcmp(&rec[1][i][s], &rec[0][i][s], sizeof rec[0][i][s]) != 0)
                fail_msg("request %d, step %d: padded token %d logprob %a, as scheduled token %d logprob %a", i, s,
                         rec[1][i][s].token, (double)rec[1][i][s].logprob, rec[0][i][s].token,
                         (double)rec[0][i][s].logprob);
    src->destroy(src);
}

// The exit status of body(ops) run in a child process (what a death test needs).
static int exit_status_of(void (*body)(ops_set *ops), ops_set *ops) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        body(ops);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void download_inside(void *ctx) {
    ops_set *ops = ctx;
    float host = 0.0f;
    float *dev = ops->alloc(ops, sizeof host, "one float");
    ops->download(ops, &host, dev, sizeof host);
}

static void capture_a_download(ops_set *ops) { ops->graph_capture(ops, download_inside, ops); }

// A capture may not read the device back (a CUDA graph cannot hold it): it exits, naming it.
static void a_capture_refuses_host_copies(void **state) {
    (void)state;
    ops_set *graphs = graph_record_wrap(inv_cpu_create(1));
    assert_int_not_equal(exit_status_of(capture_a_download, graphs), 0);
    graphs->destroy(graphs);
}

static void create_with_descending_buckets(ops_set *ops) {
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    weight_source *src = weights_synthetic(&cfg, 1);
    engine_limits lim = {.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 32,
                         .max_total_tokens = 128, .block_size = 16,
                         .graph_buckets = {4, 2}, .n_graph_buckets = 2};
    engine_create(&cfg, src, ops, &lim, 1);
}

// Buckets out of order are a bad setting: exit 2 before anything loads.
static void descending_buckets_are_refused(void **state) {
    (void)state;
    ops_set *ops = inv_cpu_create(1);
    assert_int_equal(exit_status_of(create_with_descending_buckets, ops), 2);
    ops->destroy(ops);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(replayed_steps_equal_steps_as_scheduled),
        cmocka_unit_test(padded_steps_equal_steps_as_scheduled),
        cmocka_unit_test(two_ranks_replay_their_graphs),
        cmocka_unit_test(graphs_grow_with_the_sequences),
        cmocka_unit_test(padding_leaves_a_full_pool_intact),
        cmocka_unit_test(a_capture_refuses_host_copies),
        cmocka_unit_test(descending_buckets_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
