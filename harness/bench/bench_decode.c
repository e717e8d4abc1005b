// harness/bench/bench_decode.c — end-to-end decode tokens/s (harness/bench/bench_decode.h).
//
// Decode time is taken as the difference of two generate calls over the same batch: one
// generating `new_tokens`, one generating a single token. Both prefill the same prompts, so the
// difference is the (new_tokens - 1) decode steps; tokens/s = B * (new_tokens - 1) / that time.
// Wall-clock time: every step ends in a download of the sampled tokens, so the device is idle
// when the clock is read. The median of three pairs is reported. With --profile, the same
// difference over a wrapped set (harness/bench/op_profile.h) says where a step's time goes, op by op,
// and the same wrapper around the prefill row's one step says where a prefill's goes.
#include "bench_decode.h"

#include <limits.h>                  // PATH_MAX
#include <stdarg.h>                  // va_list, va_start, va_end
#include <stdint.h>                  // int32_t, uint64_t
#include <stdio.h>                   // printf, snprintf, vsnprintf
#include <stdlib.h>                  // free, qsort
#include <string.h>                  // memcpy, strcmp

#include "../../engine/engine.h"     // engine_request, engine_result, engine_sched, engine_limits
#include "../../engine/tp_engine.h"  // tp_engine_*: the engine over T ranks (T = 1: one engine)
#include "../../engine/model_config.h" // model_config_by_name
#include "../../engine/weights.h"    // weights_synthetic
#include "../../common/check.h"     // invar_die, invar_malloc
#include "../../sets/registry.h"  // kernel_set_create
#include "../host.h"                  // host_seconds
#include "op_profile.h"               // op_profile_*: --profile's per-op times
#include "step_cost.h"                // decode_step_cost, route_count_*: the roofline
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

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

// An engine over T ranks (rank r on ops[r]) sized for B prompts of prompt_len tokens and
// new_tokens more, warmed up (first-touch scratch growth, caches, NCCL's first connections).
typedef struct {
    tp_engine *e;
    batch b;
    engine_sched s;
    int B;
} bench_engine;

static double generate_seconds(bench_engine *r, int new_tokens) {
    char err[256];
    for (int i = 0; i < r->B; i++) r->b.reqs[i].max_new_tokens = new_tokens;
    double t0 = host_seconds();
    if (!tp_engine_generate(r->e, r->b.reqs, r->B, &r->s, r->b.results, NULL, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "bench: generate failed: %s", err);
    return host_seconds() - t0;
}

static bench_engine bench_engine_open(ops_set *const *ops, int T, const model_config *c, weight_source *w, int B,
                                      int prompt_len, int new_tokens, unsigned mode) {
    int budget = B * prompt_len < 8192 ? B * prompt_len : 8192;
    engine_limits lim = {.max_num_seqs = B, .max_num_batched_tokens = budget,
                         .max_model_len = prompt_len + new_tokens,
                         .max_total_tokens = B * (prompt_len + new_tokens), .block_size = 64,
                         .tp_size_invariant = (mode & BENCH_TP_SIZE_INVARIANT) != 0,
                         .graph_buckets = {B}, .n_graph_buckets = (mode & BENCH_CUDA_GRAPHS) != 0};
    bench_engine r = {
        .e = tp_engine_create(c, w, ops, T, &lim, 1),
        .b = make_batch(c, B, prompt_len, new_tokens),
        .s = {.max_num_seqs = B, .max_num_batched_tokens = budget, .chunked_prefill = true, .top_k = 5},
        .B = B,
    };
    generate_seconds(&r, 2);
    return r;
}

static void bench_engine_close(bench_engine *r) {
    tp_engine_destroy(r->e);
    free_batch(&r->b);
}

double bench_decode_tokens_per_s(ops_set *const *ops, int T, const model_config *c,
                                 weight_source *w, int B, int prompt_len, int new_tokens,
                                 unsigned mode) {
    bench_engine r = bench_engine_open(ops, T, c, w, B, prompt_len, new_tokens, mode);
    double rates[REPEATS];
    for (int i = 0; i < REPEATS; i++) {
        double full = generate_seconds(&r, new_tokens);
        double one = generate_seconds(&r, 1);
        rates[i] = (double)B * (new_tokens - 1) / (full - one > 1e-9 ? full - one : 1e-9);
    }
    qsort(rates, REPEATS, sizeof rates[0], compare_double);
    bench_engine_close(&r);
    return rates[REPEATS / 2];
}

// --- --profile: where a decode step's time goes, op by op ----------------------------------------

// The op totals of one generate of new_tokens on r, copied out of the profile p (its next reset
// reuses them). Returns *n entries; the caller frees them.
static op_profile_entry *generate_ops(op_profile *p, bench_engine *r, int new_tokens, int *n) {
    op_profile_reset(p);
    generate_seconds(r, new_tokens);
    const op_profile_entry *all = op_profile_totals(p, n);
    op_profile_entry *copy = invar_malloc((size_t)(*n ? *n : 1) * sizeof *copy, "bench op profile");
    memcpy(copy, all, (size_t)*n * sizeof *copy);
    return copy;
}

// Per-op time of the decode steps on `ops` at batch B: the op profile of a generate of
// new_tokens minus that of a single token (the same prompts), calls and seconds over the
// new_tokens - 1 decode steps. At large batches the two generates' chunked prefills mix in
// decodes differently, so a few prefill shapes remain with fewer calls than steps. Returns *n
// entries; the caller frees them.
static op_profile_entry *decode_step_ops(ops_set *ops, const model_config *c, weight_source *w, int B,
                                         int prompt_len, int new_tokens, bool tp_size_invariant,
                                         int *n) {
    op_profile *p = op_profile_wrap(ops);
    ops_set *wrapped = op_profile_set(p);
    bench_engine r = bench_engine_open(&wrapped, 1, c, w, B, prompt_len, new_tokens,
                                       tp_size_invariant ? BENCH_TP_SIZE_INVARIANT : 0);
    int n_full = 0;
    op_profile_entry *step = generate_ops(p, &r, new_tokens, &n_full);
    op_profile_reset(p);
    generate_seconds(&r, 1);
    int n_one = 0;
    const op_profile_entry *one = op_profile_totals(p, &n_one);
    int kept = 0;
    for (int i = 0; i < n_full; i++) {
        op_profile_entry e = step[i];
        for (int j = 0; j < n_one; j++)
            if (strcmp(one[j].key, e.key) == 0) {
                e.calls -= one[j].calls;
                e.seconds -= one[j].seconds;
            }
        if (e.calls > 0) step[kept++] = e;  // else the same calls in both: prefill
    }
    bench_engine_close(&r);
    op_profile_destroy(p);
    *n = kept;
    return step;
}

typedef struct {
    const char *key;
    double calls;           // a step
    double inv_us, ref_us;  // a step; < 0: the set made no such call
} op_row;

static int by_invariant_time(const void *a, const void *b) {
    const op_row *x = a, *y = b;
    return (x->inv_us < y->inv_us) - (x->inv_us > y->inv_us);
}

// The op profile of one prompt of P tokens prefilled in one step and its last position sampled
// (a generate of one token), on `ops`. Returns *n entries; the caller frees them.
static op_profile_entry *prefill_ops(ops_set *ops, const model_config *c, weight_source *w, int P, int *n) {
    op_profile *p = op_profile_wrap(ops);
    ops_set *wrapped = op_profile_set(p);
    bench_engine r = bench_engine_open(&wrapped, 1, c, w, 1, P, 2, 0);  // room for its 2-token warm-up
    op_profile_entry *copy = generate_ops(p, &r, 1, n);
    bench_engine_close(&r);
    op_profile_destroy(p);
    return copy;
}

// One table (and CSV rows) of two engines' op profiles over `steps` steps, per step, under the
// heading `title`: "inv" and "ref" are the invariant and reference sets, or the columns `labels`
// names. A CSV row: device, model, `size` (the batch, or a prefill's prompt length), the op, ...
static void print_ops(const char *title, const char *device, const char *model, int size, int steps,
                      const op_profile_entry *inv, int n_inv, const op_profile_entry *ref, int n_ref,
                      const char *const labels[2], csv_report *csv) {
    op_row *rows = invar_malloc((size_t)(n_inv + n_ref + 1) * sizeof *rows, "bench op rows");
    const double us = 1e6 / steps;
    int n = 0;
    for (int i = 0; i < n_inv; i++)
        rows[n++] = (op_row){inv[i].key, (double)inv[i].calls / steps, us * inv[i].seconds, -1.0};
    for (int j = 0; j < n_ref; j++) {
        int i = 0;
        while (i < n_inv && strcmp(rows[i].key, ref[j].key) != 0) i++;
        if (i < n_inv) rows[i].ref_us = us * ref[j].seconds;
        else rows[n++] = (op_row){ref[j].key, (double)ref[j].calls / steps, -1.0, us * ref[j].seconds};
    }
    qsort(rows, (size_t)n, sizeof *rows, by_invariant_time);
    printf("\n%s (us; device time between events around each call,\n"
           "which includes its launches where the device waits on the host)\n", title);
    printf("%-44s %6s %10s %10s %9s\n", "op", "calls", labels[0], labels[1], "a-b");
    double inv_total = 0.0, ref_total = 0.0;
    for (int i = 0; i < n; i++) {
        const op_row *r = &rows[i];
        char inv_s[32] = "-", ref_s[32] = "-", diff_s[32] = "-";
        if (r->inv_us >= 0.0) {
            snprintf(inv_s, sizeof inv_s, "%.1f", r->inv_us);
            inv_total += r->inv_us;
        }
        if (r->ref_us >= 0.0) {
            snprintf(ref_s, sizeof ref_s, "%.1f", r->ref_us);
            ref_total += r->ref_us;
        }
        if (r->inv_us >= 0.0 && r->ref_us >= 0.0) snprintf(diff_s, sizeof diff_s, "%+.1f", r->inv_us - r->ref_us);
        printf("%-44s %6.2f %10s %10s %9s\n", r->key, r->calls, inv_s, ref_s, diff_s);
        bench_row(csv, "%s,%s,%d,%s,%.3f,%.2f,%.2f", device, model, size, r->key, r->calls, r->inv_us, r->ref_us);
    }
    printf("%-44s %6s %10.1f %10.1f %+9.1f\n", "total", "", inv_total, ref_total, inv_total - ref_total);
    free(rows);
}

// print_ops for decode_step_ops at batch B over `steps` decode steps.
static void print_decode_ops(const char *device, const char *model, int B, int steps, const op_profile_entry *a,
                             int n_a, const op_profile_entry *b, int n_b, const char *const labels[2],
                             csv_report *csv) {
    char title[96];
    snprintf(title, sizeof title, "decode step at batch %d, time per step by op", B);
    print_ops(title, device, model, B, steps, a, n_a, b, n_b, labels, csv);
}

// Mean distinct routed experts a MoE layer touches in a step of `tokens` tokens (B for decode,
// the prompt for a one-chunk prefill) at batch B on `ops`: a generate of its own through the
// routing counter (its downloads would slow a timed one).
static double experts_touched(ops_set *ops, const model_config *c, weight_source *w, int B,
                              int prompt_len, int new_tokens, int tokens) {
    if (c->n_routed_experts == 0) return 0.0;
    route_count *r = route_count_wrap(ops, tokens);
    ops_set *counted = route_count_set(r);
    bench_engine e = bench_engine_open(&counted, 1, c, w, B, prompt_len, new_tokens, 0);
    generate_seconds(&e, new_tokens);
    bench_engine_close(&e);
    double mean = route_count_mean(r);
    route_count_destroy(r);
    return mean;
}

// One prompt of P tokens prefilled (and its last position sampled), the median of three.
static double prefill_seconds(ops_set *ops, const model_config *c, weight_source *w, int P) {
    bench_engine r = bench_engine_open(&ops, 1, c, w, 1, P, 2, 0);  // room for its 2-token warm-up
    double t[REPEATS];
    for (int i = 0; i < REPEATS; i++) t[i] = generate_seconds(&r, 1);
    qsort(t, REPEATS, sizeof t[0], compare_double);
    bench_engine_close(&r);
    return t[REPEATS / 2];
}

// A bench_decode.csv row, its roofline from `cost` and the run's ceiling; the rates are tokens/s.
static void row(csv_report *csv, const char *device, const char *model, const char *phase, int B,
                int prompt_len, int new_tokens, double ti, double tr, const step_cost *cost,
                double experts, const bench_ceiling *ceiling) {
    double t_bytes = cost->bytes / (ceiling->copy_gbs * 1e9);
    double t_flops = ceiling->peak_tflops > 0.0 ? cost->flops / (ceiling->peak_tflops * 1e12) : 0.0;
    double tokens = strcmp(phase, "prefill") == 0 ? prompt_len : B;
    double roof = tokens / (t_bytes > t_flops ? t_bytes : t_flops);
    // Without a FLOP peak the roofline is the memory one alone, and says so: a prefill is
    // compute-bound, and its share of a memory roofline means little.
    const char *bound = ceiling->peak_tflops <= 0.0 ? "memory-only"
                        : t_bytes >= t_flops        ? "memory"
                                                    : "compute";
    printf("%6s %14s roofline %.1f tok/s (%s): invariant %.1f%%, reference %.1f%%\n", "", phase,
           roof, bound, 100.0 * ti / roof, 100.0 * tr / roof);
    bench_row(csv, "%s,%s,%s,%d,%d,%d,%.1f,%.1f,%.4f,%.3f,%.3f,%.3f,%s,%.1f,%.2f,%.2f", device,
              model, phase, B, prompt_len, new_tokens, ti, tr, ti / tr, cost->bytes / 1e6,
              cost->flops / 1e9, experts, bound, roof,
              100.0 * ti / roof, 100.0 * tr / roof);
}

// One model's rows: its rates at each batch size on both sets, the roofline, the profile.
static void decode_model(const char *device, const bench_decode_rows *rows, ops_set *inv,
                         ops_set *ref, int prompt_len, int new_tokens, bool profile,
                         const bench_ceiling *ceiling, csv_report *csv, csv_report *op_csv,
                         csv_report *prefill_csv) {
    const char *model = rows->model;
    model_config c;
    if (!model_config_by_name(model, &c)) invar_die(INVAR_EXIT_INPUT, "bench: unknown model '%s'", model);
    weight_source *w = weights_synthetic(&c, 1);
    printf("\nend-to-end decode, model %s (%d layers), prompts of %d tokens, %d new tokens\n", model,
           c.num_hidden_layers, prompt_len, new_tokens);
    if (ceiling->peak_tflops > 0.0)
        printf("roofline: a step's bytes at %.0f GB/s (copy), its FLOPs at %.1f TFLOP/s (the best "
               "cuBLAS cell)\n", ceiling->copy_gbs, ceiling->peak_tflops);
    else
        printf("roofline: a step's bytes at %.0f GB/s (copy); no FLOP peak measured (the GEMM "
               "section did not run): the memory roofline\n", ceiling->copy_gbs);
    printf("%6s %14s %14s %7s %9s %9s\n", "batch", "inv tok/s", "ref tok/s", "ratio", "step MB",
           "experts");
    double experts_at[rows->n_batch];  // routed experts a layer a decode step touches, per batch
    for (int i = 0; i < rows->n_batch; i++) {
        int B = rows->batch_sizes[i];
        double ti = bench_decode_tokens_per_s(&inv, 1, &c, w, B, prompt_len, new_tokens, 0);
        double tr = bench_decode_tokens_per_s(&ref, 1, &c, w, B, prompt_len, new_tokens, 0);
        // A decode step of the timed difference attends over prompt_len + 1 ...
        // prompt_len + new_tokens - 1 positions: new_tokens / 2 more on average.
        double experts = experts_at[i] = experts_touched(inv, &c, w, B, prompt_len, new_tokens, B);
        step_cost cost = decode_step_cost(&c, B, prompt_len + new_tokens / 2.0, experts);
        printf("%6d %14.1f %14.1f %7.3f %9.1f %9.2f\n", B, ti, tr, ti / tr, cost.bytes / 1e6, experts);
        row(csv, device, model, "decode", B, prompt_len, new_tokens, ti, tr, &cost, experts,
            ceiling);
    }
    // With CUDA graphs (where the set has them): the same decode steps, each one graph replay.
    for (int i = 0; inv->graph_capture && i < rows->n_batch; i++) {
        int B = rows->batch_sizes[i];
        double ti = bench_decode_tokens_per_s(&inv, 1, &c, w, B, prompt_len, new_tokens, BENCH_CUDA_GRAPHS);
        double tr = bench_decode_tokens_per_s(&ref, 1, &c, w, B, prompt_len, new_tokens, BENCH_CUDA_GRAPHS);
        step_cost cost = decode_step_cost(&c, B, prompt_len + new_tokens / 2.0, experts_at[i]);
        printf("%6d %14.1f %14.1f %7.3f %9.1f %9.2f  (CUDA graphs)\n", B, ti, tr, ti / tr, cost.bytes / 1e6,
               experts_at[i]);
        row(csv, device, model, "decode-graphs", B, prompt_len, new_tokens, ti, tr, &cost, experts_at[i],
            ceiling);
    }
    if (rows->prefill_len > 0) {
        // One prompt prefilled in one step (the budget is the prompt), its last position
        // sampled: tokens/s of the prompt.
        int P = rows->prefill_len;
        double ti = P / prefill_seconds(inv, &c, w, P), tr = P / prefill_seconds(ref, &c, w, P);
        double experts = experts_touched(inv, &c, w, 1, P, 2, P);
        step_cost cost = prefill_cost(&c, P, experts);
        printf("prefill of %d tokens: invariant %.1f tok/s, reference %.1f tok/s (ratio %.3f), "
               "%.1f MB and %.1f GFLOP, %.2f experts a layer\n", P, ti, tr, ti / tr,
               cost.bytes / 1e6, cost.flops / 1e9, experts);
        row(csv, device, model, "prefill", 1, P, 1, ti, tr, &cost, experts, ceiling);
    }
    // After every rate: the events would slow the engine's host side, which sets the pace at
    // small batches. The prefill first: one step, so it is short.
    if (profile && prefill_csv && rows->prefill_len > 0) {
        int P = rows->prefill_len, n_inv = 0, n_ref = 0;
        op_profile_entry *pi = prefill_ops(inv, &c, w, P, &n_inv);
        op_profile_entry *pr = prefill_ops(ref, &c, w, P, &n_ref);
        static const char *const labels[2] = {"inv us", "ref us"};
        char title[96];
        snprintf(title, sizeof title, "prefill of %d tokens (one step), time by op", P);
        print_ops(title, device, model, P, 1, pi, n_inv, pr, n_ref, labels, prefill_csv);
        free(pi);
        free(pr);
    }
    for (int i = 0; profile && i < rows->n_batch; i++) {
        int B = rows->batch_sizes[i], n_inv = 0, n_ref = 0;
        op_profile_entry *pi = decode_step_ops(inv, &c, w, B, prompt_len, new_tokens, false, &n_inv);
        op_profile_entry *pr = decode_step_ops(ref, &c, w, B, prompt_len, new_tokens, false, &n_ref);
        static const char *const labels[2] = {"inv us", "ref us"};
        print_decode_ops(device, model, B, new_tokens - 1, pi, n_inv, pr, n_ref, labels, op_csv);
        free(pi);
        free(pr);
    }
    w->destroy(w);
}

void bench_decode(const char *device, const bench_decode_rows *rows, int n_rows, int prompt_len,
                  int new_tokens, bool profile, const bench_ceiling *ceiling, const char *out_dir) {
    // The roofline columns describe the device and the model, not the code under test: a
    // report diff neither keys on them nor times them (reports/baseline_diff.c).
    static const char *const header[] = {
        "device", "model", "phase", "batch", "prompt_len", "new_tokens", "invariant_tok_s",
        "reference_tok_s", "ratio", "roofline_step_mb", "roofline_step_gflop",
        "roofline_experts_touched", "roofline_bound", "roofline_tok_s", "invariant_pct_roofline",
        "reference_pct_roofline"};
    csv_report *csv = bench_csv_open(out_dir, "bench_decode.csv", header, 16);
    static const char *const op_header[] = {"device", "model", "batch", "op", "calls_per_step",
                                            "invariant_us", "reference_us"};
    csv_report *op_csv = profile ? bench_csv_open(out_dir, "bench_decode_ops.csv", op_header, 7) : NULL;
    static const char *const prefill_header[] = {"device", "model", "prompt_len", "op", "calls",
                                                 "invariant_us", "reference_us"};
    csv_report *prefill_csv = profile ? bench_csv_open(out_dir, "bench_prefill_ops.csv", prefill_header, 7) : NULL;
    ops_set *inv = kernel_set_create("invariant", device, 0);
    ops_set *ref = kernel_set_create("reference", device, 0);
    if (!inv || !ref) invar_die(INVAR_EXIT_INPUT, "bench: no kernel sets on device '%s'", device);
    for (int m = 0; m < n_rows; m++)
        decode_model(device, &rows[m], inv, ref, prompt_len, new_tokens, profile, ceiling, csv, op_csv,
                     prefill_csv);
    if (prefill_csv) bench_csv_close(prefill_csv);
    if (op_csv) bench_csv_close(op_csv);
    bench_csv_close(csv);
    inv->destroy(inv);
    ref->destroy(ref);
}

void bench_decode_ops_tp_size(ops_set *ops, const model_config *c, weight_source *w,
                              const char *model, int B, int prompt_len, int new_tokens,
                              csv_report *csv) {
    int n_on = 0, n_off = 0;
    op_profile_entry *on = decode_step_ops(ops, c, w, B, prompt_len, new_tokens, true, &n_on);
    op_profile_entry *off = decode_step_ops(ops, c, w, B, prompt_len, new_tokens, false, &n_off);
    static const char *const labels[2] = {"on us", "off us"};
    print_decode_ops(ops->device, model, B, new_tokens - 1, on, n_on, off, n_off, labels, csv);
    free(on);
    free(off);
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
