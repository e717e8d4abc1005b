// harness/runner.c — resolution of the matrix, bs=1 baselines, batched runs, a repeat, the
// prefill-vs-decode check, bitwise comparison, verdicts, report rows, progress on a terminal,
// and the rows of an interrupted run taken over by a resumed one (harness/runner.h).
#include "runner.h"

#include <stdarg.h>                   // va_list, va_start, va_end
#include <stdint.h>                   // int32_t, uint64_t
#include <stdio.h>                    // fprintf, snprintf, vsnprintf, fileno
#include <stdlib.h>                   // free, strtol
#include <string.h>                   // memset, memcpy, strcmp, strlen
#include <sys/ioctl.h>                // ioctl, TIOCGWINSZ, struct winsize
#include <unistd.h>                   // sysconf

#include "../engine/engine.h"         // engine_create, engine_generate, engine_destroy
#include "../engine/model_config.h"   // model_config
#include "../engine/weights.h"        // weight_source
#include "../common/check.h"         // invar_die, invar_calloc, invar_malloc
#include "../kernels/order_log.h"     // order_log_describe
#include "../kernels/registry.h"      // kernel_set_create, cuda_device_available
#include "arrivals.h"                 // arrivals_schedule, arrival_pattern_name
#include "compare.h"                  // compare_step, compare_results, divergence
#include "host.h"                     // host_seconds
#include "prompts.h"                  // prompts_generate

// ---------------------------------------------------------------------------------------------
// Report columns
// ---------------------------------------------------------------------------------------------

// Requested settings first, then what resolution made of them, then the outcome.
static const char *const summary_header[] = {
    "case", "config", "device", "kernel_set", "batch_invariant", "model", "seed", "prompts",
    "requests", "min_len", "max_len", "max_new_tokens", "temperature", "top_k",
    "shared_prefix_groups", "shared_prefix_len", "warm_cache_repeats", "arrivals",
    "max_num_batched_tokens", "chunked_prefill", "prefix_caching", "force_prefix_caching",
    "threads", "batch_sizes",
    "attention_backend", "backend_selected_by", "prefix_caching_effective",
    "chunked_prefill_effective", "max_num_batched_tokens_effective", "resolution",
    "merged_into",
    "expected", "observed", "verdict", "requests_compared", "differing_requests",
    "first_batch_size", "first_request", "first_step", "first_field", "first_base_token",
    "first_batch_token", "first_base_logprob", "first_batch_logprob", "first_abs_delta",
    "first_ulps", "prefill_vs_decode", "prefix_queries", "prefix_hits", "prefix_hit_rate",
    "prefill_chunks", "seconds", "note",
};
#define SUMMARY_COLS ((int)(sizeof summary_header / sizeof summary_header[0]))

static const char *const divergence_header[] = {
    "config", "batch_size", "request", "step", "field", "base_token", "batch_token",
    "base_logprob", "batch_logprob", "abs_delta", "ulps",
};
#define DIVERGENCE_COLS ((int)(sizeof divergence_header / sizeof divergence_header[0]))

const char *const *runner_summary_header(int *ncols) {
    *ncols = SUMMARY_COLS;
    return summary_header;
}

const char *const *runner_divergence_header(int *ncols) {
    *ncols = DIVERGENCE_COLS;
    return divergence_header;
}

// Index of summary column `name` (one of summary_header).
static int summary_col(const char *name) {
    for (int i = 0; i < SUMMARY_COLS; i++)
        if (strcmp(summary_header[i], name) == 0) return i;
    invar_die(INVAR_EXIT_SYSTEM, "runner: no summary column '%s'", name);
}

// The verdict as the literal the runner uses; NULL for anything else (a row cut short).
static const char *verdict_literal(const char *v) {
    static const char *const verdicts[] = {"PASS", "FAIL", "SKIP"};
    for (int i = 0; i < 3; i++)
        if (strcmp(v, verdicts[i]) == 0) return verdicts[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// One config's outcome
// ---------------------------------------------------------------------------------------------

typedef struct {
    const char *verdict;        // PASS | FAIL | SKIP
    const char *expected;       // invariant | batch-variant (a negative control) | -
    const char *observed;       // invariant | batch-variant | nondeterministic | error | skipped
    int threads;                // effective CPU threads
    int compared, differing;    // request comparisons (batch vs bs=1, repeat vs batch)
    bool batch_differs, repeat_differs;
    bool has_first;
    char first_batch[24];       // the batch size, or "repeat"
    int first_request;
    divergence first;
    const char *prefill_vs_decode; // equal | DIFFER | not-declared | not-checked
    long prefill_chunks;        // over the bs=1 baselines
    long prefix_queries, prefix_hits; // over the batched runs
    double seconds;
    char note[1024];            // why skipped, what failed
} outcome;

// Result buffers for every request of one run.
typedef struct {
    engine_result *res;
    engine_step_record *steps;
} run_buffers;

// ---------------------------------------------------------------------------------------------
// Progress on a terminal
// ---------------------------------------------------------------------------------------------

// The live line: which config of how many, time so far and to go, what the config is doing.
typedef struct {
    bool on;
    FILE *f;
    int index, total;           // the running config (0-based), configs in the matrix
    const char *name;           // the running config's name
    double t0, config_t0;       // start of the run, of the running config
    int ran, to_run;            // configs run so far; configs left to run (the running one too)
    double ran_seconds;         // time of the configs run so far
} progress;

static void format_duration(double seconds, char *buf, size_t len) {
    long t = (long)(seconds + 0.5);
    if (t >= 3600) snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

// A line longer than the terminal wraps, and \r then redraws only its last part.
static int terminal_columns(FILE *f) {
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

// Redraws the live line with the running config's phase. The ETA is the mean time of the
// configs run so far times the configs left, less what the running one has spent.
__attribute__((format(printf, 2, 3)))
static void progress_phase(progress *p, const char *fmt, ...) {
    if (!p || !p->on) return;
    char phase[96], elapsed[32], eta[32] = "-", line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(phase, sizeof phase, fmt, ap);
    va_end(ap);
    double now = host_seconds();
    format_duration(now - p->t0, elapsed, sizeof elapsed);
    if (p->ran > 0) {
        double left = p->ran_seconds / p->ran * p->to_run - (now - p->config_t0);
        format_duration(left > 0.0 ? left : 0.0, eta, sizeof eta);
    }
    int n = snprintf(line, sizeof line, "[%d/%d] %s elapsed, ETA %s  %-17s %s", p->index + 1,
                     p->total, elapsed, eta, phase, p->name);
    int width = terminal_columns(p->f) - 1;
    fprintf(p->f, "\r\033[K%.*s", n < width ? n : width, line);
    fflush(p->f);
}

static void progress_clear(const progress *p) {
    if (!p->on) return;
    fputs("\r\033[K", p->f);
    fflush(p->f);
}

// What one config needs while it runs.
typedef struct {
    const case_file *c;
    const run_config *cfg;
    const resolved_config *rc;
    const runner_options *o;
    int count;                  // requests per run (distinct prompts + warm copies)
    const engine_request *reqs; // arriving as the config's arrival pattern says
    const engine_request *alone; // the same, each arriving at step 0 (bs=1 baselines)
    int vocab;
    engine *eng;
    outcome *out;
    progress *prog;
    // The case runs the adversarial set on this config's device: a realistic non-invariant
    // set that is not caught is then information, not a failure (the adversarial set is the
    // negative control that must be caught).
    bool adversarial_control;
    const ops_set *ops;         // the config's kernel set, for its order log
} config_run;

static run_buffers buffers_alloc(int count, int max_new_tokens) {
    run_buffers b;
    b.res = invar_calloc((size_t)count, sizeof *b.res, "engine results");
    b.steps = invar_malloc((size_t)count * (size_t)max_new_tokens * sizeof *b.steps,
                           "engine step records");
    for (int i = 0; i < count; i++) b.res[i].steps = b.steps + (size_t)i * (size_t)max_new_tokens;
    return b;
}

static void buffers_free(run_buffers *b) {
    free(b->res);
    free(b->steps);
}

// Poison every record, so a record the engine never wrote cannot compare equal to another one
// it never wrote: 0xFF bytes are token -1 and NaN logprobs, both caught by check_records.
static void buffers_poison(run_buffers *b, int count, int max_new_tokens) {
    memset(b->steps, 0xFF, (size_t)count * (size_t)max_new_tokens * sizeof *b->steps);
    for (int i = 0; i < count; i++) b->res[i].n_steps = -1;
}

// ---------------------------------------------------------------------------------------------
// Running the engine
// ---------------------------------------------------------------------------------------------

__attribute__((format(printf, 2, 3)))
static void set_failure(outcome *out, const char *fmt, ...) {
    out->observed = "error";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->note, sizeof out->note, fmt, ap);
    va_end(ap);
}

// Every record must be complete and in range: a generate call that wrote nothing would
// otherwise look perfectly invariant.
static bool check_record(config_run *r, const engine_step_record *rec, int request, int step,
                         const char *label) {
    bool ok = rec->token >= 0 && rec->token < r->vocab && rec->logprob <= 0.0f;
    for (int k = 0; k < r->c->top_k && ok; k++)
        ok = rec->topk_ids[k] >= 0 && rec->topk_ids[k] < r->vocab && rec->topk_logprobs[k] <= 0.0f;
    if (!ok)
        set_failure(r->out, "engine (%s): request %d step %d: token %d logprob %g (unwritten or "
                    "out of range)", label, request, step, rec->token, (double)rec->logprob);
    return ok;
}

static bool check_records(config_run *r, const run_buffers *b, int first, int n,
                          const char *label) {
    for (int i = first; i < first + n; i++) {
        const engine_result *res = &b->res[i];
        if (res->n_steps != r->c->max_new_tokens) {
            set_failure(r->out, "engine (%s): request %d has %d steps, expected %d", label, i,
                        res->n_steps, r->c->max_new_tokens);
            return false;
        }
        for (int s = 0; s < res->n_steps; s++)
            if (!check_record(r, &res->steps[s], i, s, label)) return false;
    }
    return true;
}

static engine_sched config_sched(const config_run *r, int max_num_seqs) {
    return (engine_sched){
        .max_num_seqs = max_num_seqs,
        .max_num_batched_tokens = r->rc->max_num_batched_tokens,
        .chunked_prefill = r->rc->chunked_prefill,
        .top_k = r->c->top_k,
        .backend = r->rc->backend,
        .prefix_caching = r->rc->prefix_caching,
    };
}

static bool generate(config_run *r, const engine_request *reqs, int n, int max_num_seqs,
                     engine_result *res, const char *label, engine_stats *stats) {
    engine_sched sched = config_sched(r, max_num_seqs);
    char err[512] = "";
    if (!engine_generate(r->eng, reqs, n, &sched, res, stats, err, sizeof err)) {
        set_failure(r->out, "engine_generate (%s) refused: %s", label, err);
        return false;
    }
    return true;
}

static bool generate_checked(config_run *r, const engine_request *reqs, int n, int max_num_seqs,
                             run_buffers *b, int first, const char *label, engine_stats *stats) {
    return generate(r, reqs, n, max_num_seqs, b->res + first, label, stats) &&
           check_records(r, b, first, n, label);
}

// ---------------------------------------------------------------------------------------------
// Comparing and reporting differences
// ---------------------------------------------------------------------------------------------

static void write_row(csv_report *rep, const char *const *fields) {
    char err[768];
    if (rep && !csv_report_row(rep, fields, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "%s", err);
}

static void divergence_row(config_run *r, const char *batch, int request, const divergence *d) {
    char req[16], step[16], field[32], bt[16], ot[16], blp[32], olp[32], delta[32], ulps[32];
    snprintf(req, sizeof req, "%d", request);
    snprintf(step, sizeof step, "%d", d->step);
    diff_kind_name(d, field, sizeof field);
    snprintf(bt, sizeof bt, "%d", d->base_token);
    snprintf(ot, sizeof ot, "%d", d->other_token);
    snprintf(blp, sizeof blp, "%.9g", (double)d->base_logprob);
    snprintf(olp, sizeof olp, "%.9g", (double)d->other_logprob);
    snprintf(delta, sizeof delta, "%.9g", d->abs_delta);
    snprintf(ulps, sizeof ulps, "%lld", (long long)d->ulps);
    const char *fields[DIVERGENCE_COLS] = {r->cfg->name, batch, req, step, field, bt, ot,
                                           blp, olp, delta, ulps};
    write_row(r->o->divergence, fields);
}

typedef struct {
    config_run *r;
    const char *batch;
} divergence_rows;

static void write_divergence(void *user, int request, const divergence *d) {
    divergence_rows *rows = user;
    divergence_row(rows->r, rows->batch, request, d);
}

// Compares every request of `other` to `base` at every step; one divergence row per differing
// step. Returns the number of differing requests, or -1 (an engine failure noted) when fewer
// steps were compared than the runs hold: a verdict must never rest on a partial comparison.
static int compare_runs(config_run *r, const run_buffers *base, const run_buffers *other,
                        const char *batch) {
    outcome *out = r->out;
    divergence_rows rows = {r, batch};
    comparison cmp = compare_request_sets(base->res, other->res, r->count, r->c->top_k,
                                          write_divergence, &rows);
    long want = (long)r->count * r->c->max_new_tokens;
    if (cmp.requests != r->count || cmp.steps != want) {
        set_failure(out, "comparison (%s): %d requests and %ld steps compared, expected %d and "
                    "%ld", batch, cmp.requests, cmp.steps, r->count, want);
        return -1;
    }
    if (cmp.has_first && !out->has_first) {
        out->has_first = true;
        snprintf(out->first_batch, sizeof out->first_batch, "%s", batch);
        out->first_request = cmp.first_request;
        out->first = cmp.first;
    }
    out->compared += cmp.requests;
    out->differing += cmp.differing;
    return cmp.differing;
}

static void swap_buffers(run_buffers *a, run_buffers *b) {
    run_buffers t = *a;
    *a = *b;
    *b = t;
}

// ---------------------------------------------------------------------------------------------
// Prefill vs decode
// ---------------------------------------------------------------------------------------------

// Request i once more, alone, as a prompt of its prompt + every generated token but the last,
// with prompt logprobs: record P-1+j of that prefill must be, bit for bit, decode step j of the
// baseline. Returns false on an engine failure; sets out->prefill_vs_decode otherwise.
static bool check_prefill_vs_decode(config_run *r, const run_buffers *base) {
    const case_file *c = r->c;
    int T = c->max_new_tokens, max_len = c->max_len + T - 1;
    int32_t *tokens = invar_malloc((size_t)max_len * sizeof *tokens, "re-prefill prompt");
    engine_step_record *prompt_steps =
        invar_malloc((size_t)max_len * sizeof *prompt_steps, "prompt logprob records");
    engine_step_record next;
    bool ok = true;
    r->out->prefill_vs_decode = "equal";
    for (int i = 0; i < r->count && ok; i++) {
        const engine_request *q = &r->alone[i];
        const engine_result *b = &base->res[i];
        int P = q->prompt_len, len = P + T - 1;
        memcpy(tokens, q->prompt, (size_t)P * sizeof *tokens);
        for (int j = 0; j + 1 < T; j++) tokens[P + j] = b->steps[j].token;
        engine_request again = *q;
        again.prompt = tokens;
        again.prompt_len = len;
        again.max_new_tokens = 1;
        again.prompt_logprobs = true;
        memset(prompt_steps, 0xFF, (size_t)len * sizeof *prompt_steps);
        engine_result res = {.steps = &next, .prompt_steps = prompt_steps};
        engine_stats st;
        if (!(ok = generate(r, &again, 1, 1, &res, "prefill vs decode", &st))) break;
        if (res.n_prompt_steps != len) {
            set_failure(r->out, "engine (prefill vs decode): request %d recorded %d prompt "
                        "positions, expected %d", i, res.n_prompt_steps, len);
            ok = false;
            break;
        }
        // The records the decode steps have a twin of: positions P-1 .. P+T-2.
        engine_result view = {.steps = prompt_steps + P - 1, .n_steps = T};
        for (int j = 0; j < T && ok; j++)
            ok = check_record(r, &view.steps[j], i, j, "prefill vs decode");
        if (!ok) break;
        divergence d;
        if (compare_results(b, &view, c->top_k, &d)) {
            char field[32];
            if (strcmp(r->out->prefill_vs_decode, "DIFFER") != 0) {
                size_t used = strlen(r->out->note);
                snprintf(r->out->note + used, sizeof r->out->note - used,
                         "%sprefill vs decode: request %d step %d: %s differs: decode %.9g vs "
                         "prefill %.9g (%lld ulps)", used ? "; " : "", i, d.step,
                         diff_kind_name(&d, field, sizeof field), (double)d.base_logprob,
                         (double)d.other_logprob, (long long)d.ulps);
            }
            r->out->prefill_vs_decode = "DIFFER";
            divergence_row(r, "prefill", i, &d);
        }
    }
    free(tokens);
    free(prompt_steps);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// The runs of one config
// ---------------------------------------------------------------------------------------------

static bool checks_prefill_vs_decode(const resolved_config *rc) {
    return rc->batch_invariant_mode && rc->backend->prefill_equals_decode;
}

// Baselines, prefill vs decode, each batch size, then the largest batch size again. False on
// an engine failure (out->note says what).
static bool run_comparisons(config_run *r) {
    const case_file *c = r->c;
    int count = r->count, T = c->max_new_tokens, largest = case_max_batch_size(c);
    run_buffers base = buffers_alloc(count, T), cur = buffers_alloc(count, T),
                kept = buffers_alloc(count, T);
    bool ok = true, have_kept = false;

    buffers_poison(&base, count, T);
    for (int i = 0; i < count && ok; i++) {
        engine_stats st = {0};
        progress_phase(r->prog, "baseline %d/%d", i + 1, count);
        ok = generate_checked(r, &r->alone[i], 1, 1, &base, i, "bs=1 baseline", &st);
        r->out->prefill_chunks += st.prefill_chunks;
    }
    if (ok) {
        if (checks_prefill_vs_decode(r->rc)) {
            progress_phase(r->prog, "prefill-vs-decode");
            ok = check_prefill_vs_decode(r, &base);
        } else r->out->prefill_vs_decode = r->rc->backend->prefill_equals_decode ? "not-checked"
                                                                               : "not-declared";
    }
    for (int b = 0; b < c->n_batch_sizes && ok; b++) {
        int bs = c->batch_sizes[b];
        char label[32];
        snprintf(label, sizeof label, "bs=%d", bs);
        progress_phase(r->prog, "%s", label);
        engine_stats st = {0};
        buffers_poison(&cur, count, T);
        if (!(ok = generate_checked(r, r->reqs, count, bs, &cur, 0, label, &st))) break;
        r->out->prefix_queries += st.prefix_queries;
        r->out->prefix_hits += st.prefix_hits;
        snprintf(label, sizeof label, "%d", bs);
        int differing = compare_runs(r, &base, &cur, label);
        if (!(ok = differing >= 0)) break;
        if (differing > 0) r->out->batch_differs = true;
        if (bs == largest && !have_kept) {
            swap_buffers(&cur, &kept);
            have_kept = true;
        }
    }
    // The repeat tells a nondeterministic kernel (same inputs, other bits) from a batch-variant
    // one (other batch, other bits; same batch, same bits).
    if (ok) {
        engine_stats st = {0};
        char label[32];
        snprintf(label, sizeof label, "bs=%d repeat", largest);
        progress_phase(r->prog, "%s", label);
        buffers_poison(&cur, count, T);
        ok = generate_checked(r, r->reqs, count, largest, &cur, 0, label, &st);
        int differing = ok ? compare_runs(r, &kept, &cur, "repeat") : 0;
        if (differing < 0) ok = false;
        else if (differing > 0) r->out->repeat_differs = true;
    }
    buffers_free(&base);
    buffers_free(&cur);
    buffers_free(&kept);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

// The requests of one config: arrivals by its pattern; the warm copies of prompt 0 after
// prompt 0 has surely finished. Prompt 0 arrives at step 0 and is admitted first, so it leads
// the running list and takes the whole budget each step: its prefill needs ceil(len / budget)
// steps (one without chunking), and each of its other tokens one more.
static void make_requests(const case_file *c, const resolved_config *rc,
                          const run_config *cfg, const prompt_set *p, engine_request *reqs,
                          engine_request *alone) {
    int *steps = invar_malloc((size_t)p->count * sizeof *steps, "arrival steps");
    arrivals_schedule(cfg->arrivals, p->first_warm, c->seed, steps);
    int budget = rc->max_num_batched_tokens;
    int prefill_steps = rc->chunked_prefill ? (p->lens[0] + budget - 1) / budget : 1;
    int warm = steps[0] + prefill_steps + c->max_new_tokens;
    if (p->first_warm > 0 && warm < steps[p->first_warm - 1]) warm = steps[p->first_warm - 1];
    for (int i = p->first_warm; i < p->count; i++) steps[i] = warm;
    for (int i = 0; i < p->count; i++) {
        reqs[i] = (engine_request){
            .prompt = p->tokens[i],
            .prompt_len = p->lens[i],
            .max_new_tokens = c->max_new_tokens,
            .temperature = c->temperature,
            .seed = p->seeds[i],
            .arrival_step = steps[i],
        };
        alone[i] = reqs[i];
        alone[i].arrival_step = 0;
    }
    free(steps);
}

// ---------------------------------------------------------------------------------------------
// One config
// ---------------------------------------------------------------------------------------------

// A realistic set (not batch-invariant, not adversarial) that matched bs=1 everywhere, in a
// case whose adversarial set is the negative control: said as information, with what the set's
// order log saw (the ops that kept one order could not have shown anything here; the ones that
// changed order did so without changing a logprob bit).
static bool order_free_information(const config_run *r, outcome *out) {
    if (r->rc->batch_invariant_mode || r->ops->adversarial || !r->adversarial_control)
        return false;
    char ops[512] = "no order recorded";
    if (r->ops->orders) order_log_describe(r->ops->orders, ops, sizeof ops);
    snprintf(out->note, sizeof out->note, "information: the %s set was not caught at this "
             "case's shapes (every request matched bs=1 bit for bit); %s; the adversarial set "
             "is this case's negative control", r->ops->name, ops);
    return true;
}

static void judge(const config_run *r) {
    const resolved_config *rc = r->rc;
    outcome *out = r->out;
    if (out->repeat_differs) out->observed = "nondeterministic";
    else if (out->batch_differs) out->observed = "batch-variant";
    else out->observed = "invariant";
    bool holds = rc->expect_invariant ? strcmp(out->observed, "invariant") == 0
                                      : out->differing > 0;
    if (!holds && !rc->expect_invariant && order_free_information(r, out)) holds = true;
    else if (!holds && !rc->expect_invariant) {
        snprintf(out->note, sizeof out->note, "negative control not triggered: expected "
                 "batch-variant (%s), yet every request matched bs=1 bit for bit, so this case "
                 "is too weak to show batch variance",
                 !rc->batch_invariant_mode ? "a non-invariant kernel set"
                                           : "prefix caching forced on");
    }
    if (strcmp(out->prefill_vs_decode, "DIFFER") == 0) holds = false;
    out->verdict = holds ? "PASS" : "FAIL";
}

// ---------------------------------------------------------------------------------------------
// Models, opened once per run
// ---------------------------------------------------------------------------------------------

// A case has one seed, so a model's weights depend on its name alone: every config of a model
// reads them from one source, and a checkpoint is mapped and validated once per run.
typedef struct {
    const char *name;
    model_config cfg;
    weight_source *w;
} loaded_model;

typedef struct {
    loaded_model m[MATRIX_MAX_VALUES];  // a case has at most that many models
    int n;
} model_cache;

static const loaded_model *model_get(model_cache *mc, const case_file *c, const char *name) {
    for (int i = 0; i < mc->n; i++)
        if (strcmp(mc->m[i].name, name) == 0) return &mc->m[i];
    if (mc->n == MATRIX_MAX_VALUES)
        invar_die(INVAR_EXIT_INPUT, "%s: more than %d models", c->path, MATRIX_MAX_VALUES);
    loaded_model *m = &mc->m[mc->n];
    char err[1024];
    if (!case_model_open(name, c->seed, &m->cfg, &m->w, err, sizeof err))
        invar_die(INVAR_EXIT_INPUT, "%s: model '%s': %s", c->path, name, err);
    m->name = name;
    mc->n++;
    return m;
}

static void model_cache_free(model_cache *mc) {
    for (int i = 0; i < mc->n; i++) mc->m[i].w->destroy(mc->m[i].w);
    mc->n = 0;
}

// ---------------------------------------------------------------------------------------------
// One config, run
// ---------------------------------------------------------------------------------------------

static void run_config_once(const case_file *c, const run_config *cfg,
                            const resolved_config *rc, const runner_options *o,
                            const loaded_model *model, progress *prog, bool adversarial_control,
                            outcome *out) {
    double t0 = host_seconds();
    ops_set *ops = kernel_set_create(cfg->kernel_set, rc->device, out->threads);
    if (!ops)
        invar_die(INVAR_EXIT_INPUT, "%s: config %s: no kernel set '%s' on device %s", c->path,
                  cfg->name, cfg->kernel_set, rc->device);

    const model_config mc = model->cfg;
    prompt_spec spec = case_prompt_spec(c);
    prompt_set *prompts = prompts_generate(&spec, mc.vocab_size, c->seed);
    int count = prompts->count;
    engine_request *reqs = invar_calloc((size_t)count, sizeof *reqs, "engine requests");
    engine_request *alone = invar_calloc((size_t)count, sizeof *alone, "engine requests");
    make_requests(c, rc, cfg, prompts, reqs, alone);

    int model_len = case_max_model_len(c);
    engine_limits limits = {
        .max_num_seqs = case_max_batch_size(c),
        .max_num_batched_tokens = rc->max_num_batched_tokens,
        .max_model_len = model_len,
        .max_total_tokens = count * model_len,
        .block_size = 64,
        .prompt_logprobs = checks_prefill_vs_decode(rc),
    };
    progress_phase(prog, "loading weights");
    engine *eng = engine_create(&mc, model->w, ops, &limits, c->seed);

    config_run r = {.c = c, .cfg = cfg, .rc = rc, .o = o, .count = count, .reqs = reqs,
                    .alone = alone, .vocab = mc.vocab_size, .eng = eng, .out = out,
                    .prog = prog, .adversarial_control = adversarial_control, .ops = ops};
    if (run_comparisons(&r)) judge(&r);
    else out->verdict = "FAIL";

    engine_destroy(eng);
    ops->destroy(ops);
    free(reqs);
    free(alone);
    prompts_free(prompts);
    out->seconds = host_seconds() - t0;
}

// ---------------------------------------------------------------------------------------------
// Console and summary
// ---------------------------------------------------------------------------------------------

static void format_batch_sizes(const case_file *c, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n_batch_sizes && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? "," : "", c->batch_sizes[i]);
}

static const char *on_off(bool on) { return on ? "on" : "off"; }

static void format_hit_rate(long queries, long hits, char *buf, size_t len) {
    if (queries > 0) snprintf(buf, len, "%.3f", (double)hits / (double)queries);
    else snprintf(buf, len, "-");
}

// "prefix_caching=off (requested on)" when resolution changed it.
static int describe_setting(char *buf, size_t len, const char *key, const char *effective,
                            const char *requested) {
    if (strcmp(effective, requested) == 0) return snprintf(buf, len, " %s=%s", key, effective);
    return snprintf(buf, len, " %s=%s (requested %s)", key, effective, requested);
}

static void print_outcome(const case_file *c, const run_config *cfg, const resolved_config *rc,
                          const outcome *out, const run_config *merged_into,
                          const runner_options *o) {
    bool pass = strcmp(out->verdict, "PASS") == 0, skip = strcmp(out->verdict, "SKIP") == 0;
    if (o->quiet && pass) return;
    FILE *f = o->console;
    if (merged_into) {
        fprintf(f, "%s  %s  same effective settings as %s: ran once (%s)\n", out->verdict,
                cfg->name, merged_into->name, out->observed);
        fflush(f);
        return;
    }
    char bs[128], settings[512], budget[16], budget_req[16];
    format_batch_sizes(c, bs, sizeof bs);
    size_t n = 0;
    if (!skip) {
        snprintf(budget, sizeof budget, "%d", rc->max_num_batched_tokens);
        snprintf(budget_req, sizeof budget_req, "%d", cfg->max_num_batched_tokens);
        n += (size_t)snprintf(settings + n, sizeof settings - n, " backend=%s",
                              rc->backend->name);
        n += (size_t)describe_setting(settings + n, sizeof settings - n, "prefix_caching",
                                      on_off(rc->prefix_caching), on_off(cfg->prefix_caching));
        n += (size_t)describe_setting(settings + n, sizeof settings - n, "max_num_batched_tokens",
                                      budget, budget_req);
        describe_setting(settings + n, sizeof settings - n, "chunked_prefill",
                         on_off(rc->chunked_prefill), on_off(cfg->chunked_prefill));
    } else {
        snprintf(settings, sizeof settings, " backend=%s", cfg->attention_backend);
    }
    fprintf(f, "%s  %s  device=%s kernel_set=%s model=%s%s arrivals=%s threads=%d "
            "batch_sizes=%s  expected=%s observed=%s",
            out->verdict, cfg->name, rc->device, cfg->kernel_set, cfg->model, settings,
            arrival_pattern_name(cfg->arrivals), out->threads, bs, out->expected, out->observed);
    if (!skip) {
        char rate[32];
        format_hit_rate(out->prefix_queries, out->prefix_hits, rate, sizeof rate);
        fprintf(f, "  (%d requests compared, %d differing; prefix cache %ld/%ld hits, rate %s; "
                "prefill_vs_decode=%s)", out->compared, out->differing, out->prefix_hits,
                out->prefix_queries, rate, out->prefill_vs_decode);
    }
    fputc('\n', f);
    if (rc->reason[0]) fprintf(f, "      resolved: %s\n", rc->reason);
    if (out->has_first) {
        const divergence *d = &out->first;
        char field[32];
        fprintf(f, "      first divergence: request %d, batch size %s, step %d, %s differs: "
                "%s %d vs %d, logprob %.9g vs %.9g, |Δ logprob| = %.3g (%lld ulp%s)\n",
                out->first_request, out->first_batch, d->step,
                diff_kind_name(d, field, sizeof field), d->topk_index >= 0 ? "top-k id" : "token",
                d->base_token, d->other_token, (double)d->base_logprob, (double)d->other_logprob,
                d->abs_delta, (long long)d->ulps, d->ulps == 1 ? "" : "s");
    }
    if (out->note[0]) fprintf(f, "      %s: %s\n", skip ? "skipped" : "note", out->note);
    fflush(f);
}

// The text of one summary row; fields point into it or at static strings.
typedef struct {
    char seed[32], count[16], requests[16], min_len[16], max_len[16], mnt[16], temp[32],
        topk[16], groups[16], prefix_len[16], warm[16], budget[16], threads[16], bs[128],
        budget_eff[16], compared[16], differing[16], req[16], step[16], field[32], bt[16],
        ot[16], blp[32], olp[32], delta[32], ulps[32], queries[32], hits[32], rate[32],
        chunks[32], secs[32];
} summary_text;

static void summary_fields(const case_file *c, const run_config *cfg, const resolved_config *rc,
                           const backend_selection *sel, const outcome *out,
                           const run_config *merged_into, summary_text *t,
                           const char *fields[SUMMARY_COLS]) {
    snprintf(t->seed, sizeof t->seed, "%llu", (unsigned long long)c->seed);
    snprintf(t->count, sizeof t->count, "%d", c->count);
    snprintf(t->requests, sizeof t->requests, "%d", case_request_count(c));
    snprintf(t->min_len, sizeof t->min_len, "%d", c->min_len);
    snprintf(t->max_len, sizeof t->max_len, "%d", c->max_len);
    snprintf(t->mnt, sizeof t->mnt, "%d", c->max_new_tokens);
    snprintf(t->temp, sizeof t->temp, "%.9g", (double)c->temperature);
    snprintf(t->topk, sizeof t->topk, "%d", c->top_k);
    snprintf(t->groups, sizeof t->groups, "%d", c->shared_prefix_groups);
    snprintf(t->prefix_len, sizeof t->prefix_len, "%d", c->shared_prefix_len);
    snprintf(t->warm, sizeof t->warm, "%d", c->warm_cache_repeats);
    snprintf(t->budget, sizeof t->budget, "%d", cfg->max_num_batched_tokens);
    snprintf(t->threads, sizeof t->threads, "%d", out->threads);
    format_batch_sizes(c, t->bs, sizeof t->bs);
    snprintf(t->budget_eff, sizeof t->budget_eff, "%d", rc->max_num_batched_tokens);
    snprintf(t->compared, sizeof t->compared, "%d", out->compared);
    snprintf(t->differing, sizeof t->differing, "%d", out->differing);
    snprintf(t->queries, sizeof t->queries, "%ld", out->prefix_queries);
    snprintf(t->hits, sizeof t->hits, "%ld", out->prefix_hits);
    format_hit_rate(out->prefix_queries, out->prefix_hits, t->rate, sizeof t->rate);
    snprintf(t->chunks, sizeof t->chunks, "%ld", out->prefill_chunks);
    snprintf(t->secs, sizeof t->secs, "%.3f", out->seconds);
    bool f = out->has_first;
    const divergence *d = &out->first;
    snprintf(t->req, sizeof t->req, "%d", out->first_request);
    snprintf(t->step, sizeof t->step, "%d", d->step);
    diff_kind_name(d, t->field, sizeof t->field);
    snprintf(t->bt, sizeof t->bt, "%d", d->base_token);
    snprintf(t->ot, sizeof t->ot, "%d", d->other_token);
    snprintf(t->blp, sizeof t->blp, "%.9g", (double)d->base_logprob);
    snprintf(t->olp, sizeof t->olp, "%.9g", (double)d->other_logprob);
    snprintf(t->delta, sizeof t->delta, "%.9g", d->abs_delta);
    snprintf(t->ulps, sizeof t->ulps, "%lld", (long long)d->ulps);
    bool skipped = strcmp(out->verdict, "SKIP") == 0;
    // A skipped config has no effective settings, except the backend a refusal names.
    bool resolved = !skipped || rc->refused;
    const char *row[SUMMARY_COLS] = {
        c->name, cfg->name, rc->device, cfg->kernel_set,
        skipped ? "" : (rc->batch_invariant_mode ? "yes" : "no"), cfg->model, t->seed, t->count,
        t->requests, t->min_len, t->max_len, t->mnt, t->temp, t->topk, t->groups, t->prefix_len,
        t->warm, arrival_pattern_name(cfg->arrivals), t->budget, on_off(cfg->chunked_prefill),
        on_off(cfg->prefix_caching), cfg->force_prefix_caching ? "true" : "false", t->threads,
        t->bs, resolved && rc->backend ? rc->backend->name : cfg->attention_backend, sel->where,
        skipped ? "" : on_off(rc->prefix_caching), skipped ? "" : on_off(rc->chunked_prefill),
        skipped ? "" : t->budget_eff, rc->reason, merged_into ? merged_into->name : "",
        out->expected, out->observed, out->verdict, t->compared, t->differing,
        f ? out->first_batch : "", f ? t->req : "", f ? t->step : "", f ? t->field : "",
        f ? t->bt : "", f ? t->ot : "", f ? t->blp : "", f ? t->olp : "", f ? t->delta : "",
        f ? t->ulps : "", skipped ? "" : out->prefill_vs_decode, skipped ? "" : t->queries,
        skipped ? "" : t->hits, skipped ? "" : t->rate, skipped ? "" : t->chunks, t->secs,
        out->note,
    };
    memcpy(fields, row, sizeof row);
}

// One config's row. A config merged into one an interrupted run finished takes that row's
// outcome (`outcome_from`: its cells): the columns from expected to note but the time, and the
// threads it ran with.
static void summary_row(const case_file *c, const run_config *cfg, const resolved_config *rc,
                        const backend_selection *sel, const outcome *out,
                        const run_config *merged_into, const char *const *outcome_from,
                        csv_report *rep) {
    if (!rep) return;
    summary_text text;
    const char *fields[SUMMARY_COLS];
    summary_fields(c, cfg, rc, sel, out, merged_into, &text, fields);
    if (outcome_from) {
        int secs = summary_col("seconds");
        for (int i = summary_col("expected"); i <= summary_col("note"); i++)
            if (i != secs) fields[i] = outcome_from[i];
        fields[summary_col("threads")] = outcome_from[summary_col("threads")];
    }
    write_row(rep, fields);
}

// ---------------------------------------------------------------------------------------------
// Resuming: the rows an interrupted run finished
// ---------------------------------------------------------------------------------------------

// The columns that say what was asked for: a finished row must hold what this run would write
// there, or the case, the command or the machine changed since the run started.
static const char *const requested_columns[] = {
    "case", "config", "device", "kernel_set", "model", "seed", "prompts", "requests",
    "min_len", "max_len", "max_new_tokens", "temperature", "top_k", "shared_prefix_groups",
    "shared_prefix_len", "warm_cache_repeats", "arrivals", "max_num_batched_tokens",
    "chunked_prefill", "prefix_caching", "force_prefix_caching", "batch_sizes",
    "backend_selected_by", "merged_into",
};

bool runner_match_done(const case_file *c, const run_config *configs,
                       const resolved_config *rs, int n, const backend_selection *sel,
                       const csv_table *t, int usable_rows, int *done_row, char *err,
                       int err_len) {
    if (t->ncols != SUMMARY_COLS) {
        snprintf(err, (size_t)err_len, "%s: %d columns where this invar writes %d: written by "
                 "another version of invar; start a new run", t->path, t->ncols, SUMMARY_COLS);
        return false;
    }
    for (int i = 0; i < SUMMARY_COLS; i++) {
        if (strcmp(t->header[i], summary_header[i]) != 0) {
            snprintf(err, (size_t)err_len, "%s: column %d is '%s' where this invar writes '%s': "
                     "written by another version of invar; start a new run", t->path, i + 1,
                     t->header[i], summary_header[i]);
            return false;
        }
    }
    for (int k = 0; k < n; k++) done_row[k] = -1;
    int config_col = summary_col("config"), verdict_col = summary_col("verdict");
    for (int r = 0; r < usable_rows && r < t->nrows; r++) {
        const char *verdict = verdict_literal(csv_at(t, r, verdict_col));
        if (!verdict) continue;  // never judged: the config runs again
        const char *name = csv_at(t, r, config_col);
        int k = 0;
        while (k < n && strcmp(configs[k].name, name) != 0) k++;
        if (k == n) {
            snprintf(err, (size_t)err_len, "%s:%d: config '%s' is not in the case's matrix: the "
                     "case or the command changed since the run started; start a new run",
                     t->path, r + 2, name);
            return false;
        }
        if (done_row[k] >= 0) {
            snprintf(err, (size_t)err_len, "%s:%d: config '%s' reported twice (first at line "
                     "%d)", t->path, r + 2, name, done_row[k] + 2);
            return false;
        }
        // What this run would write for config k; the outcome columns are not compared.
        outcome blank = {.verdict = verdict, .expected = "", .observed = "",
                         .prefill_vs_decode = ""};
        const run_config *merged_into = rs[k].merged_into >= 0 ? &configs[rs[k].merged_into]
                                                               : NULL;
        summary_text text;
        const char *fields[SUMMARY_COLS];
        summary_fields(c, &configs[k], &rs[k], sel, &blank, merged_into, &text, fields);
        for (size_t i = 0; i < sizeof requested_columns / sizeof requested_columns[0]; i++) {
            int col = summary_col(requested_columns[i]);
            const char *was = csv_at(t, r, col), *now = fields[col] ? fields[col] : "";
            if (strcmp(was, now) != 0) {
                snprintf(err, (size_t)err_len, "%s:%d: config '%s': %s was '%s', would now be "
                         "'%s': the case, the command or the machine changed since the run "
                         "started; start a new run", t->path, r + 2, name, requested_columns[i],
                         was, now);
                return false;
            }
        }
        done_row[k] = r;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Resolution of the whole matrix, before anything runs
// ---------------------------------------------------------------------------------------------

// Whether (set, device) is batch-invariant, as the set itself says; remembered per pair.
typedef struct {
    const char *set, *device;
    bool invariant;
} set_mode;

static bool kernel_set_invariant(const case_file *c, const run_config *cfg, const char *device,
                                 set_mode *known, int *n_known) {
    for (int i = 0; i < *n_known; i++)
        if (strcmp(known[i].set, cfg->kernel_set) == 0 && strcmp(known[i].device, device) == 0)
            return known[i].invariant;
    ops_set *ops = kernel_set_create(cfg->kernel_set, device, 1);
    if (!ops)
        invar_die(INVAR_EXIT_INPUT, "%s: config %s: no kernel set '%s' on device %s", c->path,
                  cfg->name, cfg->kernel_set, device);
    known[*n_known] = (set_mode){cfg->kernel_set, device, ops->batch_invariant};
    ops->destroy(ops);
    return known[(*n_known)++].invariant;
}

resolved_config *runner_resolve(const case_file *c, const run_config *configs, int n,
                                const backend_selection *sel) {
    resolved_config *rs = invar_calloc((size_t)n, sizeof *rs, "resolved configs");
    char why[256] = "";
    bool cuda_asked = false, have_cuda = false;
    set_mode *known = invar_calloc((size_t)n, sizeof *known, "kernel set modes");
    int n_known = 0;
    for (int k = 0; k < n; k++) {
        const run_config *cfg = &configs[k];
        if (strcmp(cfg->device, "cpu") != 0 && !cuda_asked) {
            have_cuda = cuda_device_available(why, sizeof why);
            cuda_asked = true;
        }
        const char *device = strcmp(cfg->device, "auto") == 0 ? (have_cuda ? "cuda" : "cpu")
                                                              : cfg->device;
        if (strcmp(device, "cuda") == 0 && !have_cuda) {
            resolve_skip_device(device, why, &rs[k]);
            continue;
        }
        bool invariant = kernel_set_invariant(c, cfg, device, known, &n_known);
        resolve_config(cfg, device, invariant, case_max_model_len(c), &rs[k]);
        if (strcmp(cfg->device, "auto") == 0 && !have_cuda) {
            size_t used = strlen(rs[k].reason);
            snprintf(rs[k].reason + used, sizeof rs[k].reason - used, "%sdevice auto ran on cpu: "
                     "%s", used ? "; " : "", why);
        }
    }
    free(known);
    char err[1024];
    if (!resolve_check_refusals(rs, n, sel, err, sizeof err))
        invar_die(INVAR_EXIT_INPUT, "%s", err);
    resolve_merge(configs, rs, n);
    return rs;
}

// ---------------------------------------------------------------------------------------------
// The case
// ---------------------------------------------------------------------------------------------

// The cells of config k's row in the interrupted run's summary, or NULL when it has none.
static const char *const *done_cells(const runner_options *o, int k) {
    if (!o->done || o->done_row[k] < 0) return NULL;
    return (const char *const *)o->done->cells + (size_t)o->done_row[k] * (size_t)o->done->ncols;
}

// Whether the case runs the adversarial set on `device` (a config that is not skipped).
static bool has_adversarial_control(const run_config *configs, const resolved_config *rs, int n,
                                    const char *device) {
    for (int k = 0; k < n; k++)
        if (!rs[k].skip && strcmp(rs[k].device, device) == 0 &&
            kernel_set_is_adversarial(configs[k].kernel_set))
            return true;
    return false;
}

static void count_verdict(run_totals *t, const char *verdict) {
    if (strcmp(verdict, "PASS") == 0) t->passed++;
    else if (strcmp(verdict, "SKIP") == 0) t->skipped++;
    else t->failed++;
}

run_totals runner_run(const case_file *c, const run_config *configs,
                      const resolved_config *rs, int n, const backend_selection *sel,
                      const runner_options *o) {
    outcome *outs = invar_calloc((size_t)n, sizeof *outs, "config outcomes");
    if (fflush(o->console) != 0) invar_die(INVAR_EXIT_SYSTEM, "writing the console failed");
    resolve_print_warnings(rs, n, o->warnings);

    progress prog = {.on = o->progress, .f = o->console, .total = n, .t0 = host_seconds()};
    for (int k = 0; k < n; k++)
        if (!rs[k].skip && rs[k].merged_into < 0 && !done_cells(o, k)) prog.to_run++;
    model_cache models = {.n = 0};
    run_totals totals = {0};
    for (int k = 0; k < n; k++) {
        const run_config *cfg = &configs[k];
        const resolved_config *rc = &rs[k];
        outcome *out = &outs[k];
        const char *const *done = done_cells(o, k);
        if (done) {  // finished by the interrupted run: counted as it was reported
            count_verdict(&totals, done[summary_col("verdict")]);
            if (done[summary_col("merged_into")][0]) totals.merged++;
            continue;
        }
        const run_config *merged_into = NULL;
        const char *const *outcome_from = NULL;
        if (rc->merged_into >= 0) {
            merged_into = &configs[rc->merged_into];
            outcome_from = done_cells(o, rc->merged_into);
            if (outcome_from) {
                *out = (outcome){.verdict = verdict_literal(outcome_from[summary_col("verdict")]),
                                 .observed = outcome_from[summary_col("observed")],
                                 .expected = "", .prefill_vs_decode = ""};
            } else {
                *out = outs[rc->merged_into];
                out->seconds = 0.0;
            }
            totals.merged++;
        } else {
            out->threads = cfg->threads > 0 ? cfg->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
            out->expected = "-";
            out->prefill_vs_decode = "";
            if (rc->skip) {
                out->verdict = "SKIP";
                out->observed = "skipped";
                snprintf(out->note, sizeof out->note, "%s", rc->skip_reason);
            } else {
                out->expected = rc->expect_invariant ? "invariant" : "batch-variant";
                prog.index = k;
                prog.name = cfg->name;
                prog.config_t0 = host_seconds();
                run_config_once(c, cfg, rc, o, model_get(&models, c, cfg->model), &prog,
                                has_adversarial_control(configs, rs, n, rc->device), out);
                prog.ran++;
                prog.to_run--;
                prog.ran_seconds += out->seconds;
                progress_clear(&prog);
            }
        }
        print_outcome(c, cfg, rc, out, merged_into, o);
        summary_row(c, cfg, rc, sel, out, merged_into, outcome_from, o->summary);
        count_verdict(&totals, out->verdict);
    }
    model_cache_free(&models);
    free(outs);
    return totals;
}
