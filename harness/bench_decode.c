// harness/bench_decode.c — end-to-end decode tokens/s (harness/bench_decode.h).
//
// Decode time is taken as the difference of two generate calls over the same batch: one
// generating `new_tokens`, one generating a single token. Both prefill the same prompts, so the
// difference is the (new_tokens - 1) decode steps; tokens/s = B * (new_tokens - 1) / that time.
// Wall-clock time: every step ends in a download of the sampled tokens, so the device is idle
// when the clock is read. The median of three pairs is reported.
#include "bench_decode.h"

#include <limits.h>                  // PATH_MAX
#include <stdarg.h>                  // va_list, va_start, va_end
#include <stdint.h>                  // int32_t, uint64_t
#include <stdio.h>                   // printf, snprintf, vsnprintf
#include <stdlib.h>                  // free, qsort

#include "../engine/engine.h"        // engine_request, engine_result, engine_sched, engine_limits
#include "../engine/tp_engine.h"     // tp_engine_*: the engine over T ranks (T = 1: one engine)
#include "../engine/model_config.h"  // model_config_by_name
#include "../engine/weights.h"       // weights_synthetic
#include "../common/check.h"        // invar_die, invar_malloc
#include "../sets/registry.h"     // kernel_set_create
#include "host.h"                     // host_seconds
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

enum { REPEATS = 3 };

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    engine_request *reqs;
    engine_result *results;
    engine_step_record *records;
    int32_t *tokens;
} batch;

// B requests whose prompts are a hash of (request, position) inside the vocabulary.
static batch make_batch(const model_config *c, int B, int prompt_len, int new_tokens) {
    batch b = {
        .reqs = invar_malloc((size_t)B * sizeof *b.reqs, "bench requests"),
        .results = invar_malloc((size_t)B * sizeof *b.results, "bench results"),
        .records = invar_malloc((size_t)B * new_tokens * sizeof *b.records, "bench records"),
        .tokens = invar_malloc((size_t)B * prompt_len * sizeof *b.tokens, "bench prompts"),
    };
    for (int i = 0; i < B; i++) {
        int32_t *p = b.tokens + (long)i * prompt_len;
        for (int j = 0; j < prompt_len; j++)
            p[j] = (int32_t)(invar_mix64(((uint64_t)i << 32) | (uint64_t)j) % (uint64_t)c->vocab_size);
        b.reqs[i] = (engine_request){.prompt = p, .prompt_len = prompt_len,
                                     .max_new_tokens = new_tokens, .seed = (uint64_t)i};
        b.results[i] = (engine_result){.steps = b.records + (long)i * new_tokens};
    }
    return b;
}

static void free_batch(batch *b) {
    free(b->reqs);
    free(b->results);
    free(b->records);
    free(b->tokens);
}

static double generate_seconds(tp_engine *e, batch *b, int B, int new_tokens, const engine_sched *s) {
    char err[256];
    for (int i = 0; i < B; i++) b->reqs[i].max_new_tokens = new_tokens;
    double t0 = host_seconds();
    if (!tp_engine_generate(e, b->reqs, B, s, b->results, NULL, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "bench: generate failed: %s", err);
    return host_seconds() - t0;
}

double bench_decode_tokens_per_s(ops_set *const *ops, int T, const model_config *c,
                                 weight_source *w, int B, int prompt_len, int new_tokens) {
    int budget = B * prompt_len < 8192 ? B * prompt_len : 8192;
    engine_limits lim = {.max_num_seqs = B, .max_num_batched_tokens = budget,
                         .max_model_len = prompt_len + new_tokens,
                         .max_total_tokens = B * (prompt_len + new_tokens), .block_size = 64};
    tp_engine *e = tp_engine_create(c, w, ops, T, &lim, 1);
    batch b = make_batch(c, B, prompt_len, new_tokens);
    engine_sched s = {.max_num_seqs = B, .max_num_batched_tokens = budget,
                      .chunked_prefill = true, .top_k = 5};
    // warm-up: first-touch scratch growth, caches (and NCCL's first connections at T > 1)
    generate_seconds(e, &b, B, 2, &s);
    double rates[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        double full = generate_seconds(e, &b, B, new_tokens, &s);
        double one = generate_seconds(e, &b, B, 1, &s);
        rates[r] = (double)B * (new_tokens - 1) / (full - one > 1e-9 ? full - one : 1e-9);
    }
    qsort(rates, REPEATS, sizeof rates[0], compare_double);
    tp_engine_destroy(e);
    free_batch(&b);
    return rates[REPEATS / 2];
}

void bench_decode(const char *device, const char *model, const int *batch_sizes, int n_batch,
                  int prompt_len, int new_tokens, const char *out_dir) {
    model_config c;
    if (!model_config_by_name(model, &c)) invar_die(INVAR_EXIT_INPUT, "bench: unknown model '%s'", model);
    weight_source *w = weights_synthetic(&c, 1);
    printf("\nend-to-end decode, model %s (%d layers), prompts of %d tokens, %d new tokens\n", model,
           c.num_hidden_layers, prompt_len, new_tokens);
    printf("%6s %14s %14s %7s\n", "batch", "inv tok/s", "ref tok/s", "ratio");
    static const char *const header[] = {"device", "model", "batch", "prompt_len", "new_tokens",
                                         "invariant_tok_s", "reference_tok_s", "ratio"};
    csv_report *csv = bench_csv_open(out_dir, "bench_decode.csv", header, 8);
    ops_set *inv = kernel_set_create("invariant", device, 0);
    ops_set *ref = kernel_set_create("reference", device, 0);
    if (!inv || !ref) invar_die(INVAR_EXIT_INPUT, "bench: no kernel sets on device '%s'", device);
    for (int i = 0; i < n_batch; i++) {
        int B = batch_sizes[i];
        double ti = bench_decode_tokens_per_s(&inv, 1, &c, w, B, prompt_len, new_tokens);
        double tr = bench_decode_tokens_per_s(&ref, 1, &c, w, B, prompt_len, new_tokens);
        printf("%6d %14.1f %14.1f %7.3f\n", B, ti, tr, ti / tr);
        bench_row(csv, "%s,%s,%d,%d,%d,%.1f,%.1f,%.4f", device, model, B, prompt_len, new_tokens, ti,
                  tr, ti / tr);
    }
    bench_csv_close(csv);
    inv->destroy(inv);
    ref->destroy(ref);
    w->destroy(w);
}

csv_report *bench_csv_open(const char *dir, const char *name, const char *const *header, int ncols) {
    char path[PATH_MAX], err[PATH_MAX + 256];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        invar_die(INVAR_EXIT_INPUT, "bench: %s/%s: path too long", dir, name);
    csv_report *r = csv_report_open(path, header, ncols, err, sizeof err);
    if (!r) invar_die(INVAR_EXIT_SYSTEM, "bench: %s", err);
    return r;
}

void bench_row(csv_report *csv, const char *fmt, ...) {
    char line[1024], err[PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!csv_report_rowf(csv, err, sizeof err, "%s", line)) invar_die(INVAR_EXIT_SYSTEM, "bench: %s", err);
}

void bench_csv_close(csv_report *csv) {
    char err[PATH_MAX + 256];
    if (!csv_report_close(csv, err, sizeof err)) invar_die(INVAR_EXIT_SYSTEM, "bench: %s", err);
}
