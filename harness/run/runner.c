// harness/run/runner.c — the runs of each config: bs=1 baselines, batched runs, a repeat, the
// prefill-vs-decode check, bitwise comparison and verdicts (harness/run/runner.h).
#include "runner.h"

#include <stdarg.h>                     // va_list, va_start, va_end
#include <stdint.h>                     // int32_t
#include <stdio.h>                      // snprintf, vsnprintf, fflush
#include <stdlib.h>                     // free, atoi
#include <string.h>                     // memset, memcpy, strcmp, strlen
#include <unistd.h>                     // sysconf

#include "../../engine/engine.h"        // engine_create, engine_generate, engine_config
#include "../../engine/tp_engine.h"     // tp_engine_*: the engine at tensor-parallel degree T
#include "../../common/check.h"        // invar_die, invar_calloc, invar_malloc
#include "../../kernels/fingerprint.h"  // fingerprint_sink_*
#include "../../sets/graph_record.h" // graph_record_on_cpu
#include "../../sets/registry.h"     // kernel_set_create*, kernel_set_is_adversarial, tp_devices_describe
#include "../../reports/report_schema.h" // DIVERGENCE_*, SUMMARY_*
#include "compare.h"                    // compare_request_sets, compare_results, divergence
#include "localize.h"                   // localize_request
#include "../host.h"                    // host_seconds
#include "../model/model_cache.h"       // model_cache_get, model_cache_free, loaded_model
#include "outcome.h"                    // outcome
#include "outcome_print.h"              // outcome_print
#include "progress.h"                   // progress_phase, progress_clear
#include "prompts.h"                    // prompts_generate
#include "requests.h"                   // config_requests
#include "resume_match.h"               // resume_done_cells
#include "summary_row.h"                // summary_row_write, report_row_write, divergence_row_write,
                                        // summary_verdict_literal
#include "tp_information.h"             // tp_delta_compare, tp_delta_note
#include "verdict.h"                    // outcome_judge, outcome_judge_orders

// Result buffers for every request of one run.
typedef struct {
    engine_result *res;
    engine_step_record *steps;
} run_buffers;

// What one config needs while it runs.
typedef struct {
    const case_file *c;
    const run_config *cfg;
    const resolved_config *rc;
    const runner_options *o;
    int count;                  // requests per run (distinct prompts + warm copies)
    int first, compared;        // the requests compared, [first, first + compared): every one,
                                // or --request's alone (every batch still holds them all)
    int prefill_differs;        // the first request whose re-prefill differs from its decode; -1
    int error_request, error_batch; // the first request whose run failed (a sampled id outside
                                    // the vocabulary, a broken record), and that run's batch
                                    // size (1: its run alone); -1 while none failed
    const engine_request *reqs; // arriving as the config's arrival pattern says
    const engine_request *alone; // the same, each arriving at step 0 (bs=1 baselines)
    int vocab;
    tp_engine *eng;
    fingerprint_sink *orders;   // the ranks' order fingerprints (NULL: not judged)
    outcome *out;
    progress *prog;
    long graph_steps, graph_replays; // over every generate of the config (cuda_graphs = on)
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

// -1 when every record of requests [first, first + n) is whole; else the first request that
// is not (its failure set).
static int check_records(config_run *r, const run_buffers *b, int first, int n,
                         const char *label) {
    for (int i = first; i < first + n; i++) {
        const engine_result *res = &b->res[i];
        if (res->n_steps != r->c->max_new_tokens) {
            set_failure(r->out, "engine (%s): request %d has %d steps, expected %d", label, i,
                        res->n_steps, r->c->max_new_tokens);
            return i;
        }
        for (int s = 0; s < res->n_steps; s++)
            if (!check_record(r, &res->steps[s], i, s, label)) return i;
    }
    return -1;
}

// A run that failed at `request` (a sampled id outside the vocabulary, a broken record) is
// localized: a batched run of every request like a divergence (that request alone against that
// batch), a bs=1 baseline by the first op whose rows of it held a NaN or an infinity.
static void note_run_error(config_run *r, int n, int max_num_seqs, int request) {
    if (r->error_request >= 0 || request < 0) return;
    if ((n == r->count && max_num_seqs > 1) || (n == 1 && max_num_seqs == 1)) {
        r->error_request = request;
        r->error_batch = max_num_seqs;
    }
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
    if (!tp_engine_generate(r->eng, reqs, n, &sched, res, stats, err, sizeof err)) {
        set_failure(r->out, "engine_generate (%s) refused: %s", label, err);
        return false;
    }
    r->graph_steps += stats->graph_steps;
    r->graph_replays += stats->graph_replays;
    return true;
}

static bool generate_checked(config_run *r, const engine_request *reqs, int n, int max_num_seqs,
                             run_buffers *b, int first, const char *label, engine_stats *stats) {
    int bad;  // -1: every record whole; else the request at fault, -2 when the engine named none
    if (generate(r, reqs, n, max_num_seqs, b->res + first, label, stats)) {
        bad = check_records(r, b, first, n, label);
    } else {
        int failed = tp_engine_failed_request(r->eng);
        bad = failed >= 0 ? first + failed : -2;
    }
    note_run_error(r, n, max_num_seqs, bad);
    return bad == -1;
}

// ---------------------------------------------------------------------------------------------
// Comparing and reporting differences
// ---------------------------------------------------------------------------------------------

static void divergence_row(config_run *r, const char *batch, int request, const divergence *d) {
    divergence_row_write(r->o->divergence, r->cfg->name, batch, request, d);
}

typedef struct {
    config_run *r;
    const char *batch;
    int first;                  // the request the comparison's request 0 is
} divergence_rows;

static void write_divergence(void *user, int request, const divergence *d) {
    divergence_rows *rows = user;
    divergence_row(rows->r, rows->batch, rows->first + request, d);
}

// Compares every request of `other` to `base` at every step; one divergence row per differing
// step. Returns the number of differing requests, or -1 (an engine failure noted) when fewer
// steps were compared than the runs hold: a verdict must never rest on a partial comparison.
static int compare_runs(config_run *r, const run_buffers *base, const run_buffers *other,
                        const char *batch) {
    outcome *out = r->out;
    divergence_rows rows = {r, batch, r->first};
    comparison cmp = compare_request_sets(base->res + r->first, other->res + r->first,
                                          r->compared, r->c->top_k, write_divergence, &rows);
    long want = (long)r->compared * r->c->max_new_tokens;
    if (cmp.requests != r->compared || cmp.steps != want) {
        set_failure(out, "comparison (%s): %d requests and %ld steps compared, expected %d and "
                    "%ld", batch, cmp.requests, cmp.steps, r->compared, want);
        return -1;
    }
    if (cmp.has_first && !out->has_first) {
        out->has_first = true;
        snprintf(out->first_batch, sizeof out->first_batch, "%s", batch);
        out->first_request = r->first + cmp.first_request;
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

// Request i's re-prefill: its prompt and every generated token of the baseline but the last, one
// new token, with prompt logprobs. tokens: room for max_len + max_new_tokens - 1.
static engine_request re_prefill(const config_run *r, const run_buffers *base, int i,
                                 int32_t *tokens) {
    const engine_request *q = &r->alone[i];
    int P = q->prompt_len, T = r->c->max_new_tokens;
    memcpy(tokens, q->prompt, (size_t)P * sizeof *tokens);
    for (int j = 0; j + 1 < T; j++) tokens[P + j] = base->res[i].steps[j].token;
    engine_request again = *q;
    again.prompt = tokens;
    again.prompt_len = P + T - 1;
    again.max_new_tokens = 1;
    again.prompt_logprobs = true;
    return again;
}

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
    for (int i = r->first; i < r->first + r->compared && ok; i++) {
        const engine_request *q = &r->alone[i];
        const engine_result *b = &base->res[i];
        int P = q->prompt_len, len = P + T - 1;
        engine_request again = re_prefill(r, base, i, tokens);
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
            if (r->prefill_differs < 0) r->prefill_differs = i;
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

// The bs=1 baselines into `base`, one request at a time. False on an engine failure.
static bool run_baselines(config_run *r, run_buffers *base, const char *label) {
    bool ok = true;
    buffers_poison(base, r->count, r->c->max_new_tokens);
    fingerprint_sink_batch(r->orders, 1);
    for (int i = r->first; i < r->first + r->compared && ok; i++) {
        engine_stats st = {0};
        progress_phase(r->prog, "%s %d/%d", label, i - r->first + 1, r->compared);
        ok = generate_checked(r, &r->alone[i], 1, 1, base, i, label, &st);
        r->out->prefill_chunks += st.prefill_chunks;
    }
    return ok;
}

// Baselines (into the caller's `base`, kept for TP=1 vs TP=T), prefill vs decode, each batch
// size, then the largest batch size again. False on an engine failure (out->note says what).
static bool run_comparisons(config_run *r, run_buffers *base_out) {
    const case_file *c = r->c;
    int count = r->count, T = c->max_new_tokens, largest = case_max_batch_size(c);
    run_buffers base = *base_out, cur = buffers_alloc(count, T), kept = buffers_alloc(count, T);
    bool ok = true, have_kept = false;

    ok = run_baselines(r, &base, "bs=1 baseline");
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
        fingerprint_sink_batch(r->orders, bs);
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
        fingerprint_sink_batch(r->orders, largest);
        buffers_poison(&cur, count, T);
        ok = generate_checked(r, r->reqs, count, largest, &cur, 0, label, &st);
        int differing = ok ? compare_runs(r, &kept, &cur, "repeat") : 0;
        if (differing < 0) ok = false;
        else if (differing > 0) r->out->repeat_differs = true;
    }
    buffers_free(&cur);
    buffers_free(&kept);
    return ok;
}

// TP=1 vs TP=T, as information: the bs=1 baselines once more on one rank (same kernel set,
// model and effective settings), their chosen tokens' logprobs against `base` (TP=T's),
// appended to the note. Only baselines: a batched run would add cost and no information the
// batch comparison does not already give. False on an engine failure.
static bool tp1_information(config_run *r, const model_config *mc, weight_source *w,
                            const engine_limits *limits, const run_buffers *base) {
    int T = tp_engine_size(r->eng);
    ops_set *one = kernel_set_create(r->cfg->kernel_set, r->rc->device, r->out->threads);
    tp_engine *eng1 = tp_engine_create(mc, w, &one, 1, limits, r->c->seed);
    config_run r1 = *r;
    r1.eng = eng1;
    r1.vocab = tp_engine_config(eng1)->vocab_size;
    run_buffers b1 = buffers_alloc(r->count, r->c->max_new_tokens);
    long chunks = r->out->prefill_chunks;  // the column counts the config's own baselines
    bool ok = run_baselines(&r1, &b1, "TP=1 baseline");
    r->out->prefill_chunks = chunks;
    if (ok) {
        tp_delta d = tp_delta_compare(b1.res + r->first, base->res + r->first, r->compared);
        char note[256];
        if (!r->cfg->tp_size_invariance) {
            tp_delta_note(&d, T, note, sizeof note);
        } else {  // judged where the set promises invariance: the same bits at every T
            int differing = tp_requests_differing(b1.res + r->first, base->res + r->first,
                                                  r->compared, r->c->top_k);
            // A negative control's own orders (a ring all-reduce) may differ across T too: noted,
            // not judged, as its batch variance is what it is there to show.
            bool judged = r->rc->expect_invariant;
            if (differing > 0 && judged) r->out->verdict = "FAIL";
            snprintf(note, sizeof note, "tp_size_invariance: TP=1 vs TP=%d %s (%d of %d requests "
                     "differ; max |Δ logprob| %.3g)", T,
                     !differing ? "bitwise equal"
                     : judged   ? "DIFFER: TP-size invariance broken"
                                : "differ (not judged: a negative control)",
                     differing, r->compared, d.max_abs_delta);
        }
        size_t used = strlen(r->out->note);
        snprintf(r->out->note + used, sizeof r->out->note - used, "%s%s", used ? "; " : "",
                 note);
        // Which collective library and links this T ran over, read at run time (CUDA only).
        char library[64], links[192];
        tp_devices_describe(r->rc->device, T, library, (int)sizeof library, links,
                            (int)sizeof links);
        used = strlen(r->out->note);
        if (strcmp(library, "-") != 0)
            snprintf(r->out->note + used, sizeof r->out->note - used, "; ranks on GPUs 0-%d "
                     "over %s, links %s", T - 1, library, links);
    }
    buffers_free(&b1);
    tp_engine_destroy(eng1);
    one->destroy(one);
    return ok;
}

// cuda_graphs = on must have run what it claims: decode steps padded to buckets, and on a set
// with graphs some of them replayed; a config where none was (buckets that hold no batch, a
// set that lost its graphs) FAILs rather than pass on steps run as without graphs.
static void graphs_engaged(config_run *r, const ops_set *ops) {
    outcome *out = r->out;
    bool can_replay = ops->graph_capture != NULL;
    size_t used = strlen(out->note);
    snprintf(out->note + used, sizeof out->note - used, "%scuda_graphs: %ld decode steps padded "
             "to a bucket, %ld replayed from a graph", used ? "; " : "", r->graph_steps,
             r->graph_replays);
    if (r->graph_steps == 0 || (can_replay && r->graph_replays == 0)) {
        used = strlen(out->note);
        snprintf(out->note + used, sizeof out->note - used, " (NOT ENGAGED: %s)",
                 r->graph_steps == 0 ? "no decode step fit a bucket" : "no step was replayed");
        out->verdict = "FAIL";
    }
}

// The first differing request of a batch size once more, alone and in that batch, on a tapped
// engine: the first op whose rows differ goes into out->first_op. Without a batch divergence,
// a request whose sampled id failed a batched run is localized against its run alone, a request
// whose run alone failed by its first non-finite op output, and a request whose re-prefill
// differed from its decode between the two. A difference only the repeat showed
// (nondeterminism) has no batch to localize in.
static void localize_first(config_run *r, const run_buffers *base, ops_set *const *rank_ops,
                           int ranks, const model_config *mc, weight_source *w,
                           const engine_limits *limits) {
    outcome *out = r->out;
    localization loc;
    if (!out->has_first && r->error_request < 0 && r->prefill_differs >= 0) {
        int i = r->prefill_differs;
        int32_t *tokens = invar_malloc((size_t)(r->c->max_len + r->c->max_new_tokens) *
                                       sizeof *tokens, "re-prefill prompt");
        engine_request again = re_prefill(r, base, i, tokens);
        progress_phase(r->prog, "localizing request %d: prefill vs decode", i);
        localize_run decode = {.reqs = &r->alone[i], .count = 1, .sched = config_sched(r, 1),
                               .follow = 0, .label = "decoding"};
        localize_run prefill = {.reqs = &again, .count = 1, .sched = config_sched(r, 1),
                                .follow = 0, .label = "in the re-prefill"};
        localize_request(rank_ops, ranks, mc, w, limits, r->c->seed, &decode, &prefill, &loc);
        snprintf(out->first_op, sizeof out->first_op, "%s", loc.text);
        free(tokens);
        return;
    }
    if (!out->has_first && r->error_request >= 0 && r->error_batch == 1) {
        int i = r->error_request;
        progress_phase(r->prog, "localizing request %d: its run alone failed", i);
        localize_run alone = {.reqs = &r->alone[i], .count = 1, .sched = config_sched(r, 1),
                              .follow = 0, .label = "alone"};
        localize_nonfinite(rank_ops, ranks, mc, w, limits, r->c->seed, &alone, &loc);
        snprintf(out->first_op, sizeof out->first_op, "%s", loc.text);
        out->first_op_nonfinite = true;
        return;
    }
    // The request alone against the batch it differed (or failed) in.
    int request, bs;
    const char *failed = "";
    if (out->has_first && strcmp(out->first_batch, "repeat") != 0) {
        request = out->first_request;
        bs = atoi(out->first_batch);
    } else if (!out->has_first && r->error_request >= 0) {
        request = r->error_request;
        bs = r->error_batch;
        failed = " (the run that failed)";
    } else {
        return;
    }
    char batch_label[48];
    snprintf(batch_label, sizeof batch_label, "at bs=%d%s", bs, failed);
    progress_phase(r->prog, "localizing request %d %s", request, batch_label);
    localize_run alone = {.reqs = &r->alone[request], .count = 1, .sched = config_sched(r, 1),
                          .follow = 0, .label = "alone"};
    localize_run batch = {.reqs = r->reqs, .count = r->count, .sched = config_sched(r, bs),
                          .follow = request, .label = batch_label};
    localize_request(rank_ops, ranks, mc, w, limits, r->c->seed, &alone, &batch, &loc);
    snprintf(out->first_op, sizeof out->first_op, "%s", loc.text);
}

// ---------------------------------------------------------------------------------------------
// One config, run
// ---------------------------------------------------------------------------------------------

static void run_config_once(const case_file *c, const run_config *cfg,
                            const resolved_config *rc, const runner_options *o,
                            const loaded_model *model, progress *prog, bool adversarial_control,
                            outcome *out) {
    double t0 = host_seconds();
    // One kernel set per rank: on the CPU each has its own thread pool of `threads` workers,
    // on CUDA its own GPU (rank k on GPU k).
    int ranks = cfg->tensor_parallel > 0 ? cfg->tensor_parallel : 1;
    ops_set **rank_ops = invar_calloc((size_t)ranks, sizeof *rank_ops, "rank kernel sets");
    for (int k = 0; k < ranks; k++) {
        rank_ops[k] = kernel_set_create_for_rank(cfg->kernel_set, rc->device, out->threads, k);
        if (!rank_ops[k])
            invar_die(INVAR_EXIT_INPUT, "%s: config %s: no kernel set '%s' on device %s",
                      c->path, cfg->name, cfg->kernel_set, rc->device);
        if (cfg->cuda_graphs) rank_ops[k] = graph_record_on_cpu(rank_ops[k]);
    }
    ops_set *ops = rank_ops[0];  // its order log speaks for every rank (they run alike)
    // Every rank notes into one sink (thread-safe): an invariant config must keep one order per
    // op and shape through all its batches (verdict.h, outcome_judge_orders).
    fingerprint_sink *orders = rc->expect_invariant && ops->paths ? fingerprint_sink_create()
                                                                  : NULL;
    for (int k = 0; k < ranks; k++) rank_ops[k]->fingerprints = orders;

    const model_config mc = model->cfg;
    prompt_spec spec = case_prompt_spec(c);
    prompt_set *prompts = prompts_generate(&spec, mc.vocab_size, c->seed);
    int count = prompts->count;
    engine_request *reqs = invar_calloc((size_t)count, sizeof *reqs, "engine requests");
    engine_request *alone = invar_calloc((size_t)count, sizeof *alone, "engine requests");
    config_requests(c, rc, cfg, prompts, reqs, alone);

    int model_len = case_max_model_len(c);
    engine_limits limits = {
        .max_num_seqs = case_max_batch_size(c),
        .max_num_batched_tokens = rc->max_num_batched_tokens,
        .max_model_len = model_len,
        .max_total_tokens = count * model_len,
        .block_size = cfg->block_size,
        .kv_cache_blocks = cfg->kv_cache_blocks,
        .prompt_logprobs = checks_prefill_vs_decode(rc),
        .tp_size_invariant = cfg->tp_size_invariance,
    };
    if (cfg->cuda_graphs) {
        memcpy(limits.graph_buckets, c->graph_buckets, (size_t)c->n_graph_buckets * sizeof(int));
        limits.n_graph_buckets = c->n_graph_buckets;
    }
    progress_phase(prog, "loading weights");
    tp_engine *eng = tp_engine_create(&mc, model->w, rank_ops, ranks, &limits, c->seed);

    // Records are checked against the vocabulary of the engine that drew them.
    config_run r = {.c = c, .cfg = cfg, .rc = rc, .o = o, .count = count, .reqs = reqs,
                    .alone = alone, .vocab = tp_engine_config(eng)->vocab_size, .eng = eng,
                    .orders = orders, .out = out, .prog = prog, .first = 0, .compared = count,
                    .prefill_differs = -1, .error_request = -1, .error_batch = -1};
    if (o->request >= 0) {
        r.first = o->request;
        r.compared = 1;
        snprintf(out->note, sizeof out->note, "--request %d: only request %d compared, alone "
                 "and in every batch", o->request, o->request);
    }
    run_buffers base = buffers_alloc(count, c->max_new_tokens);
    if (run_comparisons(&r, &base)) {
        outcome_judge(rc, ops, adversarial_control, out);
        outcome_judge_orders(rc, ops, orders, out);
        if (ranks > 1 && !tp1_information(&r, &mc, model->w, &limits, &base)) out->verdict = "FAIL";
        if (cfg->cuda_graphs) graphs_engaged(&r, ops);
    } else out->verdict = "FAIL";

    tp_engine_destroy(eng);
    for (int k = 0; k < ranks; k++) rank_ops[k]->fingerprints = NULL;  // localization's runs
    fingerprint_sink_destroy(orders);                                   // are not judged
    localize_first(&r, &base, rank_ops, ranks, &mc, model->w, &limits);
    buffers_free(&base);
    for (int k = 0; k < ranks; k++) rank_ops[k]->destroy(rank_ops[k]);
    free(rank_ops);
    free(reqs);
    free(alone);
    prompts_free(prompts);
    out->seconds = host_seconds() - t0;
}

// ---------------------------------------------------------------------------------------------
// The case
// ---------------------------------------------------------------------------------------------

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

    progress prog = {.on = o->progress, .f = o->console, .t0 = host_seconds()};
    for (int k = 0; k < n; k++) {
        if (o->in_shard && !o->in_shard[k]) continue;
        prog.total++;
        if (!rs[k].skip && rs[k].merged_into < 0 && !resume_done_cells(o->done, o->done_row, k)) prog.to_run++;
    }
    model_cache models = {.n = 0};
    run_totals totals = {0};
    int position = -1;  // among the configs this run reports: the progress line's "i of N"
    for (int k = 0; k < n; k++) {
        if (o->in_shard && !o->in_shard[k]) continue;
        position++;
        const run_config *cfg = &configs[k];
        const resolved_config *rc = &rs[k];
        outcome *out = &outs[k];
        const char *const *done = resume_done_cells(o->done, o->done_row, k);
        if (done) {  // finished by the interrupted run: counted as it was reported
            count_verdict(&totals, done[SUMMARY_VERDICT]);
            if (done[SUMMARY_MERGED_INTO][0]) totals.merged++;
            continue;
        }
        const run_config *merged_into = NULL;
        const char *const *outcome_from = NULL;
        if (rc->merged_into >= 0) {
            merged_into = &configs[rc->merged_into];
            outcome_from = resume_done_cells(o->done, o->done_row, rc->merged_into);
            if (outcome_from) {
                *out = (outcome){.verdict = summary_verdict_literal(outcome_from[SUMMARY_VERDICT]),
                                 .observed = outcome_from[SUMMARY_OBSERVED],
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
                prog.index = position;
                prog.name = cfg->name;
                prog.config_t0 = host_seconds();
                run_config_once(c, cfg, rc, o, model_cache_get(&models, c, cfg->model), &prog,
                                has_adversarial_control(configs, rs, n, rc->device), out);
                prog.ran++;
                prog.to_run--;
                prog.ran_seconds += out->seconds;
                progress_clear(&prog);
            }
        }
        outcome_print(o->console, o->quiet, c, cfg, rc, out, merged_into);
        summary_row_write(c, cfg, rc, sel, out, merged_into, outcome_from, o->summary);
        count_verdict(&totals, out->verdict);
    }
    model_cache_free(&models);
    free(outs);
    return totals;
}
