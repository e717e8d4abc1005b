// engine/tp_engine.c — T ranks as threads (engine/tp_engine.h).
#include "tp_engine.h"

#include <stdio.h>                         // snprintf
#include <stdlib.h>                        // free
#include <string.h>                        // memcmp, strcmp

#include "../common/check.h"               // invar_die, invar_calloc, invar_malloc
#include "../common/rank_threads.h"        // rank_threads_run
#include "../kernels/cpu/collective.h"     // tp_comm_group_*

struct tp_engine {
    int size;
    tp_comm_group *group;  // NULL when size is 1
    engine **ranks;
    ops_set **ops;         // each rank's set (the caller's); NULL when size is 1
};

// The calling thread's work goes to the rank's device (ops.h: bind_thread; NULL on the CPU).
static void bind_rank(ops_set *ops) {
    if (ops->bind_thread) ops->bind_thread(ops);
}

tp_engine *tp_engine_create(const model_config *cfg, weight_source *src, ops_set *const *ops,
                            int T, const engine_limits *limits, uint64_t seed) {
    if (T < 1) invar_die(INVAR_EXIT_INPUT, "tensor_parallel %d: must be >= 1", T);
    for (int r = 1; r < T; r++)
        if (strcmp(ops[r]->device, ops[0]->device) != 0)
            invar_die(INVAR_EXIT_INPUT, "tensor_parallel %d: rank %d on %s, rank 0 on %s: one "
                      "group, one device kind", T, r, ops[r]->device, ops[0]->device);
    tp_engine *t = invar_calloc(1, sizeof *t, "tensor-parallel engine");
    t->size = T;
    t->ranks = invar_calloc((size_t)T, sizeof *t->ranks, "tensor-parallel ranks");
    if (T == 1) {
        t->ranks[0] = engine_create(cfg, src, ops[0], limits, seed);
        return t;
    }
    t->group = tp_comm_group_create(T);
    if (ops[0]->open_group) ops[0]->open_group(ops, T, t->group);  // CUDA: the NCCL communicator
    // Sequential: a weight source is read by one thread at a time. Each rank reads the whole
    // tensors and keeps its part (T reads of the model; fine for test models, a checkpoint
    // loader for real ones would read each rank's slice only). On CUDA each rank's memory goes
    // to its own GPU, so this thread takes each rank's device in turn, then rank 0's again.
    for (int r = 0; r < T; r++) {
        bind_rank(ops[r]);
        engine_shard shard = {.rank = r, .size = T, .comm = tp_comm_group_rank(t->group, r)};
        t->ranks[r] = engine_create_shard(cfg, src, ops[r], limits, seed, &shard);
    }
    bind_rank(ops[0]);
    t->ops = invar_calloc((size_t)T, sizeof *t->ops, "tensor-parallel rank sets");
    for (int r = 0; r < T; r++) t->ops[r] = ops[r];
    return t;
}

void tp_engine_destroy(tp_engine *t) {
    if (!t) return;
    for (int r = 0; r < t->size; r++) {
        if (t->ops) bind_rank(t->ops[r]);  // a rank's memory is freed on its own device
        engine_destroy(t->ranks[r]);
    }
    if (t->ops) bind_rank(t->ops[0]);
    tp_comm_group_destroy(t->group);
    free(t->ops);
    free(t->ranks);
    free(t);
}

const model_config *tp_engine_config(const tp_engine *t) { return engine_config(t->ranks[0]); }
int tp_engine_size(const tp_engine *t) { return t->size; }
void tp_engine_observe_rows(tp_engine *t, engine_rows_observer fn, void *ctx) {
    engine_observe_rows(t->ranks[0], fn, ctx);
}

// One generate call on every rank; ranks other than 0 record into their own results.
typedef struct {
    tp_engine *t;
    const engine_request *reqs;
    int n;
    const engine_sched *sched;
    engine_result **results;   // [T], results[0] the caller's
    engine_stats *stats;       // [T]
    bool *ok;                  // [T]
    char (*err)[256];          // [T]
} generate_job;

static void generate_rank(void *arg, int rank) {
    generate_job *j = arg;
    bind_rank(j->t->ops[rank]);  // a fresh thread starts on device 0
    j->ok[rank] = engine_generate(j->t->ranks[rank], j->reqs, j->n, j->sched, j->results[rank],
                                  &j->stats[rank], j->err[rank], (int)sizeof j->err[rank]);
}

static engine_result *shadow_results(const engine_request *reqs, int n) {
    engine_result *res = invar_calloc((size_t)(n > 0 ? n : 1), sizeof *res, "rank results");
    for (int i = 0; i < n; i++) {
        res[i].steps = invar_calloc((size_t)reqs[i].max_new_tokens + 1, sizeof *res[i].steps,
                                    "rank result steps");
        if (reqs[i].prompt_logprobs)
            res[i].prompt_steps = invar_calloc((size_t)reqs[i].prompt_len + 1,
                                               sizeof *res[i].prompt_steps, "rank prompt steps");
    }
    return res;
}

static void free_results(engine_result *res, int n) {
    for (int i = 0; i < n; i++) {
        free(res[i].steps);
        free(res[i].prompt_steps);
    }
    free(res);
}

static bool same_records(const engine_step_record *a, const engine_step_record *b, int n) {
    return n == 0 || memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

bool tp_engine_generate(tp_engine *t, const engine_request *reqs, int n,
                        const engine_sched *sched, engine_result *results, engine_stats *stats,
                        char *err, int err_len) {
    int T = t->size;
    if (T == 1) return engine_generate(t->ranks[0], reqs, n, sched, results, stats, err, err_len);
    generate_job j = {.t = t, .reqs = reqs, .n = n, .sched = sched};
    j.results = invar_calloc((size_t)T, sizeof *j.results, "rank results");
    j.stats = invar_calloc((size_t)T, sizeof *j.stats, "rank stats");
    j.ok = invar_calloc((size_t)T, sizeof *j.ok, "rank verdicts");
    j.err = invar_calloc((size_t)T, sizeof *j.err, "rank messages");
    j.results[0] = results;
    for (int r = 1; r < T; r++) j.results[r] = shadow_results(reqs, n);
    // A refusal comes from the arguments or the schedule, which every rank sees alike, so the
    // ranks refuse together and none waits at a barrier for one that left.
    rank_threads_run(T, generate_rank, &j);
    bool ok = true;
    for (int r = 0; r < T && ok; r++)
        if (!j.ok[r]) {
            snprintf(err, (size_t)err_len, "rank %d of %d: %s", r, T, j.err[r]);
            ok = false;
        }
    for (int r = 1; r < T && ok; r++)
        for (int i = 0; i < n && ok; i++) {
            const engine_result *a = &results[i], *b = &j.results[r][i];
            if (a->n_steps != b->n_steps || a->n_prompt_steps != b->n_prompt_steps ||
                !same_records(a->steps, b->steps, a->n_steps) ||
                !same_records(a->prompt_steps, b->prompt_steps, a->n_prompt_steps)) {
                snprintf(err, (size_t)err_len,
                         "rank %d of %d recorded other tokens or logprobs than rank 0 for "
                         "request %d: the ranks disagree", r, T, i);
                ok = false;
            }
        }
    if (stats) *stats = j.stats[0];
    for (int r = 1; r < T; r++) free_results(j.results[r], n);
    free(j.results);
    free(j.stats);
    free(j.ok);
    free(j.err);
    return ok;
}

int tp_engine_failed_request(const tp_engine *t) { return engine_failed_request(t->ranks[0]); }
