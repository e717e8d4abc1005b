// harness/probe/cmd_probe.c — `invar probe --url URL --case FILE [--model NAME] [--header 'K: V']...`:
// tests a running OpenAI-compatible server (vLLM, SGLang, `invar serve`, ...) for batch
// invariance from outside, through /v1/completions, with a case file's prompts, batch sizes and
// arrival patterns, and writes the reports `invar run` writes (harness/commands.h):
//   - every prompt alone, one request at a time: the bs=1 baselines;
//   - for each batch size N and each arrival pattern of the case: all prompts with N requests in
//     flight at once (harness/probe/probe_http.h), sent on the pattern's schedule (a step is
//     --step-ms milliseconds), then the largest batch again, to tell nondeterminism (same
//     batch, other bits) from batch variance;
//   - every request's logprobs compared to its baseline as float32 bits (harness/run/compare.h;
//     numbers read from their JSON text, harness/probe/probe_json.h).
// The case's [prompts] and its [matrix] batch_sizes and arrivals are used; its other matrix axes
// describe invar's own engine and are ignored (the server is what it is). One summary row per
// arrival pattern. A request that fails (HTTP error, timeout, garbage, a dropped connection, an
// answer too long or holding NaN) is reported with its reason in requests.csv as it finishes;
// every other request is still compared. Each config's verdict is one of (probe_verdict):
//   PASS          every request answered in full and matched its bs=1 run bit for bit, and the
//                 server was seen serving requests together;
//   FAIL          some request differed: batch-variant or nondeterministic (exit 1);
//   ERROR         nothing differed, but requests failed: the server is broken (exit 2);
//   INCONCLUSIVE  nothing differed and nothing failed, yet the run could not show invariance:
//                 answers shorter than asked, one answer for different prompts, or batched
//                 runs the server never served together (exit 4).
#include "../commands.h"

#include <errno.h>                    // errno
#include <stdarg.h>                   // va_list, va_start, va_end
#include <limits.h>                   // PATH_MAX
#include <pthread.h>                  // pthread_create, pthread_join, pthread_mutex_*
#include <stdio.h>                    // printf, fprintf, snprintf, open_memstream
#include <stdlib.h>                   // free, qsort
#include <time.h>                     // nanosleep
#include <string.h>                   // strcmp, strncmp, strlen, strchr, strerror

#include <cjson/cJSON.h>              // cJSON_Parse, cJSON_GetObjectItemCaseSensitive
#include <curl/curl.h>                // curl_global_init, curl_slist_append

#include "../../common/check.h"      // invar_die, invar_calloc, invar_malloc, INVAR_EXIT_*
#include "../../reports/csv_report.h" // csv_report_open, csv_report_close
#include "../../reports/render.h"     // report_render_run
#include "../../reports/report_schema.h" // summary_header, divergence_header, *_NCOLS
#include "../../reports/run_meta.h"   // run_meta_write
#include "../run/arrivals.h"          // arrivals_schedule, arrival_pattern_by_name
#include "../run/case_file.h"         // case_file_load, case_prompt_spec, case_max_batch_size
#include "../run/matrix.h"            // run_config, matrix_axis_find
#include "../run/resolve.h"           // resolved_config, backend_selection
#include "../cli_args.h"              // cli_parse, CLI_GO_ON
#include "../run/compare.h"           // compare_request_sets, diff_kind_name
#include "../host.h"                  // host_make_dirs, host_seconds
#include "../json_writer.h"           // json_write_string, json_write_float
#include "../run/outcome.h"           // outcome
#include "probe_http.h"               // probe_http_run, probe_transfer
#include "probe_json.h"               // probe_parse_completion, probe_error_message
#include "../run/prompts.h"           // prompts_generate
#include "../run/summary_row.h"       // summary_fields, report_row_write, divergence_row_write

enum {
    PROBE_MAX_HEADERS = 32,
    PROBE_NOTE_ERRORS = 3,
    PROBE_GIVE_UP = 2,                 // transport failures in a row, none answered: stop the run
    PROBE_MODELS_MAX_REPLY = 4 << 20,  // a model list longer than this is no model list
    PROBE_EXIT_INCONCLUSIVE = 4,
};

// Below this many requests served at once on average (in the best batched run), the server is
// taken to have served the batch one request after another: a PASS would show nothing.
#define PROBE_MIN_CONCURRENCY 1.5

typedef enum { PROBE_PASS, PROBE_FAIL, PROBE_ERROR, PROBE_INCONCLUSIVE } probe_verdict;

// One run of every prompt: its transfers and what each answer held.
typedef struct {
    probe_transfer *t;
    engine_result *res;
    engine_step_record *steps;
    bool *ok;                    // an answer was read into res[i]
    char (*why)[512];            // else why not
    int answered;                // answers read so far in this run
    int failures_in_a_row;       // transport failures (no HTTP answer) since the last answer
} probe_run;

typedef struct {
    const case_file *c;
    const prompt_set *p;
    char **bodies;
    const char *completions_url, *metrics_url;
    probe_http_options http;
    int step_ms;
    csv_report *summary, *divergence, *requests;
    probe_notes notes;
    size_t max_reply;            // the longest answer a request's tokens and top-k can need
    long short_answers;          // answers with fewer tokens than max_tokens
    long steps_asked, steps_answered;
    bool canned;                 // every distinct prompt got the same answer at bs=1
    int first_lengths[2];        // tokens of both answers at the first divergence
    int distinct_answered;       // distinct prompts answered at bs=1
    // The run under way, for the requests.csv rows written as answers arrive.
    const char *config, *label;
    probe_run *run;
} probe;

static probe_run run_alloc(int count, int max_new_tokens) {
    probe_run r;
    r.t = invar_calloc((size_t)count, sizeof *r.t, "transfers");
    r.res = invar_calloc((size_t)count, sizeof *r.res, "results");
    r.steps = invar_calloc((size_t)count * (size_t)max_new_tokens, sizeof *r.steps, "records");
    r.ok = invar_calloc((size_t)count, sizeof *r.ok, "answer flags");
    r.why = invar_calloc((size_t)count, sizeof *r.why, "answer errors");
    for (int i = 0; i < count; i++) r.res[i].steps = r.steps + (size_t)i * max_new_tokens;
    return r;
}

static void run_free(probe_run *r, int count) {
    for (int i = 0; i < count; i++) free(r->t[i].reply);
    free(r->t);
    free(r->res);
    free(r->steps);
    free(r->ok);
    free(r->why);
}

// One requests.csv row per answer, as it arrives: a run cut short keeps every answer so far.
// The body is read and freed at once, so memory holds at most the transfers in flight. False
// (stop the run) after PROBE_GIVE_UP transport failures in a row with no answer at all: a
// server that never answers must not cost every request its whole --timeout.
static bool on_answer(void *user, int i, probe_transfer *t) {
    probe *pr = user;
    probe_run *r = pr->run;
    char err[512] = "";
    if (t->error[0]) {
        snprintf(err, sizeof err, "%s", t->error);
    } else if (t->status != 200) {
        char msg[400];
        probe_error_message(t->reply, t->reply_len, msg, sizeof msg);
        snprintf(err, sizeof err, "HTTP %ld: %s", t->status, msg);
    } else if (!probe_parse_completion(t->reply, t->reply_len, pr->c->top_k,
                                       pr->c->max_new_tokens, &r->res[i], &pr->notes, err,
                                       sizeof err)) {
    } else if (r->res[i].n_steps == 0) {
        snprintf(err, sizeof err, "the answer holds no tokens");
    }
    free(t->reply);
    t->reply = NULL;
    t->reply_len = 0;
    r->ok[i] = !err[0];
    snprintf(r->why[i], sizeof r->why[i], "%s", err);
    if (r->ok[i]) {
        r->answered++;
        r->failures_in_a_row = 0;
        pr->steps_asked += pr->c->max_new_tokens;
        pr->steps_answered += r->res[i].n_steps;
        if (r->res[i].n_steps < pr->c->max_new_tokens) pr->short_answers++;
    } else if (t->status == 0) {
        r->failures_in_a_row++;
    }
    char req[16], status[16], secs[32], tokens[16];
    snprintf(req, sizeof req, "%d", i);
    snprintf(status, sizeof status, "%ld", t->status);
    snprintf(secs, sizeof secs, "%.3f", t->seconds);
    snprintf(tokens, sizeof tokens, "%d", r->ok[i] ? r->res[i].n_steps : 0);
    const char *row[] = {pr->config, pr->label, req, status, secs, tokens,
                         r->ok[i] ? "ok" : "error", err};
    report_row_write(pr->requests, row);
    return r->answered > 0 || r->failures_in_a_row < PROBE_GIVE_UP;
}

// Sends every prompt: at most `in_flight` at once, prompt i at send_ms[i] (NULL: at once); the
// warm copies of prompt 0 after prompt 0 answered.
static void run_prompts(probe *pr, probe_run *r, const char *config, const char *label,
                        int in_flight, const double *send_s) {
    int n = pr->p->count;
    for (int i = 0; i < n; i++) {
        free(r->t[i].reply);
        r->t[i] = (probe_transfer){.url = pr->completions_url, .body = pr->bodies[i],
                                   .send_at = send_s ? send_s[i] : 0.0,
                                   .after = i >= pr->p->first_warm ? 0 : -1,
                                   .max_reply = pr->max_reply};
        r->ok[i] = false;
        r->why[i][0] = '\0';
        r->res[i].n_steps = 0;
    }
    r->answered = 0;
    r->failures_in_a_row = 0;
    pr->config = config;
    pr->label = label;
    pr->run = r;
    probe_http_run(r->t, n, in_flight, &pr->http, on_answer, pr);
}

// ---------------------------------------------------------------------------------------------
// What a batched run achieved
// ---------------------------------------------------------------------------------------------

// The most requests the probe had in flight at once in a run (from each transfer's send and
// end), and the concurrency the server achieved: the requests' bs=1 times summed, over the time
// some request of the run was in flight. A server that serves one request after another scores
// about 1 whatever the probe had in flight; one that batches N scores near N. It is capped at
// the most in flight: a server slower alone than in company (one that waits for a batch to
// fill) would otherwise claim more requests at once than were ever sent.
typedef struct {
    int in_flight;
    double concurrency;
} achieved;

static int by_time(const void *a, const void *b) {
    const double *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);  // an end (-1) before a start (+1) at one instant
}

static achieved run_achieved(const probe_run *base, const probe_run *run, int n) {
    double (*ev)[2] = invar_calloc(2 * (size_t)n + 1, sizeof *ev, "request windows");
    int m = 0;
    double solo = 0;
    for (int i = 0; i < n; i++) {
        if (!run->ok[i] || !base->ok[i]) continue;
        ev[m][0] = run->t[i].started;
        ev[m++][1] = 1;
        ev[m][0] = run->t[i].ended;
        ev[m++][1] = -1;
        solo += base->t[i].seconds;
    }
    qsort(ev, (size_t)m, sizeof *ev, by_time);
    achieved a = {0, 0.0};
    int open = 0;
    double busy = 0, since = 0;
    for (int k = 0; k < m; k++) {
        if (open > 0) busy += ev[k][0] - since;
        since = ev[k][0];
        open += (int)ev[k][1];
        if (open > a.in_flight) a.in_flight = open;
    }
    free(ev);
    a.concurrency = busy > 0 ? solo / busy : 0.0;
    if (a.concurrency > a.in_flight) a.concurrency = a.in_flight;
    return a;
}

// The server's /metrics text (free it), or NULL when it answers none.
static char *fetch_metrics(const probe *pr) {
    probe_transfer t = {.url = pr->metrics_url, .after = -1, .max_reply = 4 << 20};
    probe_http_run(&t, 1, 1, &pr->http, NULL, NULL);
    if (!t.error[0] && t.status == 200 && t.reply) return t.reply;
    free(t.reply);
    return NULL;
}

// Steps the server ran with two requests or more, and the most requests one step ran, from the
// per-step batch-size counters invar serve exposes at /metrics
// (invar_steps_with_batch_size{size="N"} COUNT). False when the server exposes none: its
// batching is then read from its running-requests gauge (gauge_sampler) or timings
// (run_achieved).
typedef struct {
    long together;
    int largest;
} step_counts;

static bool server_step_counts(const probe *pr, step_counts *out) {
    char *metrics = fetch_metrics(pr);
    bool found = false;
    *out = (step_counts){0, 0};
    if (metrics) {
        const char *key = "invar_steps_with_batch_size{size=\"";
        for (const char *line = metrics; line && *line;) {
            const char *next = strchr(line, '\n');
            int size;
            long count;
            if (strncmp(line, key, strlen(key)) == 0 &&
                sscanf(line + strlen(key), "%d\"} %ld", &size, &count) == 2 && size >= 1 &&
                count >= 0) {
                found = true;
                if (size >= 2) out->together += count;
                if (count > 0 && size > out->largest) out->largest = size;
            }
            line = next ? next + 1 : NULL;
        }
    }
    free(metrics);
    return found;
}

// Requests a server reports running, sampled while a batched run is in flight: vLLM's
// vllm:num_requests_running and SGLang's sglang:num_running_reqs gauges (every label set of one
// scrape summed), the most seen. A server without either leaves `seen` false.
typedef struct {
    const probe *pr;
    pthread_mutex_t mu;
    bool stop, seen;
    double most;
    pthread_t thread;
} gauge_sampler;

static bool scrape_running(const probe *pr, double *running) {
    char *metrics = fetch_metrics(pr);
    static const char *const names[] = {"vllm:num_requests_running", "sglang:num_running_reqs"};
    bool found = false;
    *running = 0;
    for (const char *line = metrics; line && *line;) {
        const char *next = strchr(line, '\n');
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(names[k]);
            if (strncmp(line, names[k], n) != 0 || (line[n] != '{' && line[n] != ' ')) continue;
            const char *value = line[n] == '{' ? strchr(line + n, '}') : line + n;
            double v;
            if (value && sscanf(value + (line[n] == '{'), " %lf", &v) == 1 && v >= 0) {
                *running += v;
                found = true;
            }
        }
        line = next ? next + 1 : NULL;
    }
    free(metrics);
    return found;
}

static void *sample_gauges(void *arg) {
    gauge_sampler *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        bool stop = g->stop;
        pthread_mutex_unlock(&g->mu);
        if (stop) return NULL;
        double running;
        if (scrape_running(g->pr, &running)) {
            pthread_mutex_lock(&g->mu);
            g->seen = true;
            if (running > g->most) g->most = running;
            pthread_mutex_unlock(&g->mu);
        }
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void gauges_start(gauge_sampler *g, const probe *pr) {
    *g = (gauge_sampler){.pr = pr};
    int rc = pthread_mutex_init(&g->mu, NULL);
    if (rc == 0) rc = pthread_create(&g->thread, NULL, sample_gauges, g);
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "probe: starting the metrics sampler: %s",
                           strerror(rc));
}

static void gauges_stop(gauge_sampler *g) {
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_mutex_unlock(&g->mu);
    int rc = pthread_join(g->thread, NULL);
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "probe: pthread_join: %s", strerror(rc));
    pthread_mutex_destroy(&g->mu);
}

// Whether every distinct prompt that was answered alone got one and the same answer (a canned
// or mock server): such a server is invariant by construction and shows nothing.
static bool one_answer_for_all(const probe *pr, const probe_run *base, int *distinct) {
    int first = -1, same = 0;
    *distinct = 0;
    for (int i = 0; i < pr->p->first_warm; i++) {
        if (!base->ok[i]) continue;
        (*distinct)++;
        if (first < 0) {
            first = i;
            continue;
        }
        comparison c = compare_request_sets(&base->res[first], &base->res[i], 1, pr->c->top_k,
                                            NULL, NULL);
        if (c.differing == 0) same++;
    }
    return *distinct >= 2 && same == *distinct - 1;
}

// ---------------------------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------------------------

typedef struct {
    probe *pr;
    const char *config, *batch;
    const int *index;            // compared position -> request
} divergence_rows;

static void divergence_row(void *user, int k, const divergence *d) {
    divergence_rows *rows = user;
    divergence_row_write(rows->pr->divergence, rows->config, rows->batch, rows->index[k], d);
}

static void add_note(outcome *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_note(outcome *out, const char *fmt, ...) {
    size_t used = strlen(out->note);
    if (used + 3 >= sizeof out->note) return;
    if (used) used += (size_t)snprintf(out->note + used, sizeof out->note - used, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->note + used, sizeof out->note - used, fmt, ap);
    va_end(ap);
}

// Failed requests of a run: counted into the outcome, the first few named in its note.
static int note_failures(const probe_run *r, int n, const char *label, outcome *out,
                         int *named) {
    int failed = 0;
    for (int i = 0; i < n; i++) {
        if (r->ok[i]) continue;
        failed++;
        if ((*named)++ < PROBE_NOTE_ERRORS)
            add_note(out, "request %d (%s): %.200s", i, label, r->why[i]);
    }
    return failed;
}

// Compares the requests both runs answered; returns how many differ.
static int compare_runs(probe *pr, const char *config, const probe_run *base,
                        const probe_run *other, const char *batch, outcome *out) {
    int n = pr->p->count, m = 0;
    engine_result *b = invar_calloc((size_t)n + 1, sizeof *b, "compared results");
    engine_result *o = invar_calloc((size_t)n + 1, sizeof *o, "compared results");
    int *index = invar_calloc((size_t)n + 1, sizeof *index, "compared requests");
    for (int i = 0; i < n; i++)
        if (base->ok[i] && other->ok[i]) {
            b[m] = base->res[i];
            o[m] = other->res[i];
            index[m++] = i;
        }
    divergence_rows rows = {pr, config, batch, index};
    comparison cmp = compare_request_sets(b, o, m, pr->c->top_k, divergence_row, &rows);
    if (cmp.has_first && !out->has_first) {
        out->has_first = true;
        snprintf(out->first_batch, sizeof out->first_batch, "%s", batch);
        out->first_request = index[cmp.first_request];
        out->first = cmp.first;
        pr->first_lengths[0] = b[cmp.first_request].n_steps;
        pr->first_lengths[1] = o[cmp.first_request].n_steps;
    }
    out->compared += cmp.requests;
    out->differing += cmp.differing;
    free(b);
    free(o);
    free(index);
    return cmp.differing;
}

// ---------------------------------------------------------------------------------------------
// Setting up: the server's answer to /v1/models, the request bodies
// ---------------------------------------------------------------------------------------------

// GET URL/models. Exits 2 with a clear message when the server cannot be reached or answers
// something that is not a model list.
static char *query_models(const char *url, const probe_http_options *http) {
    probe_transfer t = {.url = url, .after = -1, .max_reply = PROBE_MODELS_MAX_REPLY};
    probe_http_run(&t, 1, 1, http, NULL, NULL);
    if (t.too_long)
        invar_die(INVAR_EXIT_INPUT, "probe: GET %s: the answer is longer than %d bytes: not an "
                  "OpenAI model list", url, PROBE_MODELS_MAX_REPLY);
    if (t.error[0])
        invar_die(INVAR_EXIT_INPUT, "probe: cannot reach the server: GET %s: %s", url,
                  t.error);
    char msg[400];
    if (t.status != 200) {
        probe_error_message(t.reply, t.reply_len, msg, sizeof msg);
        invar_die(INVAR_EXIT_INPUT, "probe: GET %s answered HTTP %ld: %s (is this an "
                  "OpenAI-compatible server?)", url, t.status, msg);
    }
    cJSON *root = cJSON_ParseWithLength(t.reply ? t.reply : "", t.reply_len);
    bool list = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "data"));
    cJSON_Delete(root);
    if (!list) {
        probe_error_message(t.reply, t.reply_len, msg, sizeof msg);
        invar_die(INVAR_EXIT_INPUT, "probe: GET %s: the answer is not an OpenAI model list "
                  "({\"data\": [...]}); it begins: %s", url, msg);
    }
    return t.reply;
}

// The model to ask for, and the vocabulary size if the server reports one (invar serve does);
// a vocab_size that is there but no size (negative, fractional, huge, a string) exits 2 naming
// it, unless --vocab-size was given.
static void served_model(const char *url, const char *models, const char *want, char *name,
                         size_t name_len, int *vocab) {
    cJSON *root = cJSON_Parse(models);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data"), *m;
    const cJSON *chosen = NULL;
    cJSON_ArrayForEach(m, data) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (!cJSON_IsString(id)) continue;
        if (!want ? !chosen : strcmp(id->valuestring, want) == 0) chosen = m;
    }
    if (want) snprintf(name, name_len, "%s", want);
    else if (chosen)
        snprintf(name, name_len, "%s",
                 cJSON_GetObjectItemCaseSensitive(chosen, "id")->valuestring);
    else name[0] = '\0';
    const cJSON *v = chosen ? cJSON_GetObjectItemCaseSensitive(chosen, "vocab_size") : NULL;
    if (*vocab == 0 && v && !cJSON_IsNull(v)) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
        if (!cJSON_IsNumber(v) || d < 1 || d > (double)(1 << 30) || d != (double)(long)d) {
            char *text = cJSON_PrintUnformatted(v);
            char shown[64];
            probe_error_message(text, text ? strlen(text) : 0, shown, sizeof shown);
            free(text);
            cJSON_Delete(root);
            invar_die(INVAR_EXIT_INPUT, "probe: GET %s: vocab_size of %s is %s, not a vocabulary "
                      "size (1 .. 2^30); give --vocab-size", url, name, shown);
        }
        *vocab = (int)d;
    }
    cJSON_Delete(root);
}

static char *request_body(const case_file *c, const char *model, const prompt_set *p, int i) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) invar_die(INVAR_EXIT_SYSTEM, "probe: open_memstream failed: %s",
                      strerror(errno));
    fputs("{\"model\":", f);
    json_write_string(f, model);
    fputs(",\"prompt\":[", f);
    for (int t = 0; t < p->lens[i]; t++) fprintf(f, "%s%d", t ? "," : "", p->tokens[i][t]);
    fprintf(f, "],\"max_tokens\":%d,\"ignore_eos\":true,\"logprobs\":%d,"
            "\"return_tokens_as_token_ids\":true,\"temperature\":", c->max_new_tokens, c->top_k);
    json_write_float(f, c->temperature);
    // Seeds as JSON numbers: below 2^53 so every client and server reads them exactly.
    fprintf(f, ",\"seed\":%llu}", (unsigned long long)(p->seeds[i] & ((1ULL << 53) - 1)));
    if (fclose(f) != 0) invar_die(INVAR_EXIT_SYSTEM, "probe: building a request failed");
    return buf;
}

// ---------------------------------------------------------------------------------------------
// One arrival pattern: a config of the report
// ---------------------------------------------------------------------------------------------

// Runs every batch size of the case on arrival pattern `ap`, then the largest again; writes the
// config's summary row. Returns its verdict.
static probe_verdict probe_config(probe *pr, const probe_run *base, arrival_pattern ap,
                                  const char *url, const char *model,
                                  const backend_selection *sel) {
    const case_file *c = pr->c;
    int n = pr->p->count, largest = case_max_batch_size(c), named = 0;
    double t0 = host_seconds();
    run_config cfg = {.arrivals = ap, .max_num_batched_tokens = 0};
    snprintf(cfg.name, sizeof cfg.name, "server/arrivals=%s", arrival_pattern_name(ap));
    snprintf(cfg.device, sizeof cfg.device, "server");
    snprintf(cfg.kernel_set, sizeof cfg.kernel_set, "-");
    size_t model_len = strlen(model);
    if (model_len >= sizeof cfg.model)
        invar_die(INVAR_EXIT_INPUT, "probe: the model name is %zu characters long (at most %zu)",
                  model_len, sizeof cfg.model - 1);
    memcpy(cfg.model, model, model_len + 1);
    snprintf(cfg.attention_backend, sizeof cfg.attention_backend, "-");
    resolved_config rc = {.device = "server", .merged_into = -1, .expect_invariant = true,
                          .batch_invariant_mode = true};
    outcome out = {.expected = "invariant", .prefill_vs_decode = "not-checked"};

    int failed = note_failures(base, n, "bs=1", &out, &named);
    // Send times: the pattern's steps, --step-ms apart; the warm copies follow prompt 0's answer.
    int *steps = invar_calloc((size_t)n + 1, sizeof *steps, "arrival steps");
    double *send_s = invar_calloc((size_t)n + 1, sizeof *send_s, "send times");
    arrivals_schedule(ap, pr->p->first_warm, c->seed, steps);
    for (int i = 0; i < pr->p->first_warm; i++) send_s[i] = steps[i] * pr->step_ms / 1000.0;
    probe_run cur = run_alloc(n, c->max_new_tokens), kept = run_alloc(n, c->max_new_tokens);
    bool have_kept = false;
    achieved best = {0, 0.0};
    int best_bs = 0;
    // The server's own step counters, where it has them, say whether a run was served together.
    step_counts before, after;
    bool counted = server_step_counts(pr, &before);
    long together = 0;
    int largest_step = 0;
    // Else the running-requests gauges of vLLM or SGLang, sampled during each batched run.
    bool gauged = false;
    double most_running = 0;
    // Nothing answered alone: a batched run would compare nothing and wait out every timeout.
    int batches = base->answered > 0 ? c->n_batch_sizes : 0;
    for (int b = 0; b < batches; b++) {
        int bs = c->batch_sizes[b];
        char label[32];
        snprintf(label, sizeof label, "bs=%d", bs);
        gauge_sampler g;
        if (!counted && bs > 1) gauges_start(&g, pr);
        run_prompts(pr, &cur, cfg.name, label, bs, send_s);
        if (!counted && bs > 1) {
            gauges_stop(&g);
            gauged |= g.seen;
            if (g.most > most_running) most_running = g.most;
        }
        failed += note_failures(&cur, n, label, &out, &named);
        if (counted && (counted = server_step_counts(pr, &after))) {
            if (bs > 1) together += after.together - before.together;
            if (bs > 1 && after.together > before.together && after.largest > largest_step)
                largest_step = after.largest;
            before = after;
        }
        achieved a = run_achieved(base, &cur, n);
        if (bs > 1 && a.concurrency > best.concurrency) {
            best = a;
            best_bs = bs;
        }
        snprintf(label, sizeof label, "%d", bs);
        if (compare_runs(pr, cfg.name, base, &cur, label, &out) > 0) out.batch_differs = true;
        if (bs == largest && !have_kept) {
            probe_run t = cur;
            cur = kept;
            kept = t;
            have_kept = true;
        }
    }
    if (batches > 0) {
        char label[32];
        snprintf(label, sizeof label, "bs=%d repeat", largest);
        run_prompts(pr, &cur, cfg.name, label, largest, send_s);
        failed += note_failures(&cur, n, label, &out, &named);
        if (compare_runs(pr, cfg.name, &kept, &cur, "repeat", &out) > 0)
            out.repeat_differs = true;
    }
    run_free(&cur, n);
    run_free(&kept, n);
    free(steps);
    free(send_s);

    out.observed = out.repeat_differs ? "nondeterministic"
                   : out.batch_differs ? "batch-variant" : "invariant";
    probe_verdict verdict = out.repeat_differs || out.batch_differs ? PROBE_FAIL : PROBE_PASS;
    if (failed > 0) {
        // A difference still shows batch variance; without one, failed requests are a broken
        // server (ERROR), never a batch-variant one.
        if (verdict == PROBE_PASS) {
            verdict = PROBE_ERROR;
            out.observed = "error";
        }
        char first[sizeof out.note];
        snprintf(first, sizeof first, "%s", out.note);
        if (base->answered == 0)
            snprintf(out.note, sizeof out.note, "the server answered none of the bs=1 requests, "
                     "so no batch was sent: %.900s", first);
        else
            snprintf(out.note, sizeof out.note, "%d request%s failed: %.900s", failed,
                     failed == 1 ? "" : "s", first);
    }
    // What a PASS would need besides equal bits: every step asked for, different answers to
    // different prompts, and batches the server served together.
    if (verdict == PROBE_PASS) {
        if (pr->short_answers > 0)
            add_note(&out, "INCONCLUSIVE: %ld answer%s held fewer tokens than the %d asked (%ld of "
                     "%ld steps compared; does the server ignore ignore_eos?)", pr->short_answers,
                     pr->short_answers == 1 ? "" : "s", c->max_new_tokens, pr->steps_answered,
                     pr->steps_asked);
        if (pr->canned)
            add_note(&out, "INCONCLUSIVE: the server gave one answer to all %d different prompts "
                     "(a canned or mock server)", pr->distinct_answered);
        if (best_bs == 0)
            add_note(&out, "INCONCLUSIVE: no batch size above 1, so no batch was served");
        else if (counted && together == 0)
            add_note(&out, "INCONCLUSIVE: the batched runs were never served together: the "
                     "server's /metrics counted no step with two requests or more (a server "
                     "that runs one request at a time cannot show batch variance)");
        else if (!counted && gauged && most_running < 2)
            add_note(&out, "INCONCLUSIVE: the batched runs were never served together: the "
                     "server's running-requests gauge at /metrics never showed more than %.0f "
                     "(a server that runs one request at a time cannot show batch variance)",
                     most_running);
        else if (!counted && !gauged && best.concurrency < PROBE_MIN_CONCURRENCY)
            add_note(&out, "INCONCLUSIVE: the batched runs were never served together: at most "
                     "%.2f requests at once (bs=%d; the requests' bs=1 times over the time the "
                     "batch took, %d in flight), below %.1f: a server that runs one request at "
                     "a time cannot show batch variance", best.concurrency, best_bs,
                     best.in_flight, PROBE_MIN_CONCURRENCY);
        if (strstr(out.note, "INCONCLUSIVE")) {
            verdict = PROBE_INCONCLUSIVE;
            out.observed = "inconclusive";
        }
    }
    if (best_bs > 0 && verdict != PROBE_INCONCLUSIVE && counted)
        add_note(&out, "served together: %ld steps of up to %d requests (the server's /metrics)",
                 together, largest_step);
    else if (best_bs > 0 && verdict != PROBE_INCONCLUSIVE && gauged)
        add_note(&out, "served together: up to %.0f requests running at once (the server's "
                 "/metrics)", most_running);
    else if (best_bs > 0 && verdict != PROBE_INCONCLUSIVE)
        add_note(&out, "served together: %.2f requests at once at bs=%d (from timings)",
                 best.concurrency, best_bs);
    static const char *const csv_verdict[] = {[PROBE_PASS] = "PASS", [PROBE_FAIL] = "FAIL",
                                              [PROBE_ERROR] = "FAIL",
                                              [PROBE_INCONCLUSIVE] = "SKIP"};
    static const char *const shown[] = {[PROBE_PASS] = "PASS", [PROBE_FAIL] = "FAIL",
                                        [PROBE_ERROR] = "ERROR",
                                        [PROBE_INCONCLUSIVE] = "INCONCLUSIVE"};
    out.verdict = csv_verdict[verdict];
    const probe_notes *pn = &pr->notes;
    if (pn->text_tokens)
        add_note(&out, "%ld tokens named by text, not id (no return_tokens_as_token_ids): "
                 "compared by text; ids sharing a text are merged", pn->text_tokens);
    if (pn->wider_than_float32)
        add_note(&out, "%ld of %ld logprobs carry more precision than float32: compared as the "
                 "nearest float32", pn->wider_than_float32, pn->values);
    if (pn->non_finite)
        add_note(&out, "%ld logprobs are -Infinity (compared by their bits)", pn->non_finite);
    if (pn->short_top)
        add_note(&out, "%ld steps returned fewer than %d top_logprobs (missing entries compare "
                 "as token -1)", pn->short_top, c->top_k);
    out.seconds = host_seconds() - t0;

    summary_text text;
    const char *fields[SUMMARY_NCOLS];
    summary_fields(c, &cfg, &rc, sel, &out, NULL, &text, fields);
    // Settings of invar's own engine mean nothing for a server: "-", and the server's URL.
    static const summary_column engine_only[] = {
        SUMMARY_MAX_NUM_BATCHED_TOKENS, SUMMARY_CHUNKED_PREFILL, SUMMARY_PREFIX_CACHING,
        SUMMARY_FORCE_PREFIX_CACHING, SUMMARY_THREADS, SUMMARY_TENSOR_PARALLEL,
        SUMMARY_PREFIX_CACHING_EFFECTIVE, SUMMARY_CHUNKED_PREFILL_EFFECTIVE,
        SUMMARY_MAX_NUM_BATCHED_TOKENS_EFFECTIVE, SUMMARY_BATCH_INVARIANT};
    for (size_t k = 0; k < sizeof engine_only / sizeof engine_only[0]; k++)
        fields[engine_only[k]] = "-";
    fields[SUMMARY_DEVICE] = url;
    fields[SUMMARY_BACKEND_SELECTED_BY] = "-";
    report_row_write(pr->summary, fields);

    printf("%s %s: %s, %d requests compared, %d differing", shown[verdict], cfg.name,
           out.observed, out.compared, out.differing);
    if (out.has_first && out.first.kind == DIFF_LENGTH) {
        printf("; first: batch %s request %d: %d tokens vs %d at bs=1", out.first_batch,
               out.first_request, pr->first_lengths[1], pr->first_lengths[0]);
    } else if (out.has_first) {
        char field[32];
        printf("; first: batch %s request %d step %d %s: %.9g vs %.9g (%lld ulps)",
               out.first_batch, out.first_request, out.first.step,
               diff_kind_name(&out.first, field, sizeof field), (double)out.first.base_logprob,
               (double)out.first.other_logprob, (long long)out.first.ulps);
    }
    printf(" (%.1f s)\n", out.seconds);
    if (out.note[0]) printf("    note: %s\n", out.note);
    if (fflush(stdout) != 0) invar_die(INVAR_EXIT_SYSTEM, "writing stdout failed");
    return verdict;
}

// ---------------------------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------------------------

static csv_report *open_report(const char *dir, const char *file, const char *const *header,
                               int ncols) {
    char path[PATH_MAX], err[1400];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        invar_die(INVAR_EXIT_INPUT, "report path too long: %s/%s", dir, file);
    csv_report *r = csv_report_open(path, header, ncols, err, sizeof err);
    if (!r) invar_die(INVAR_EXIT_SYSTEM, "%s", err);
    return r;
}

static void close_report(csv_report *r) {
    char err[1400];
    if (!csv_report_close(r, err, sizeof err)) invar_die(INVAR_EXIT_SYSTEM, "%s", err);
}

// "http://h:p", "http://h:p/", "http://h:p/v1" all give "http://h:p/v1".
static void api_base(const char *url, char *out, size_t len) {
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/') n--;
    bool has_v1 = n >= 3 && strncmp(url + n - 3, "/v1", 3) == 0;
    if (snprintf(out, len, "%.*s%s", (int)n, url, has_v1 ? "" : "/v1") >= (int)len)
        invar_die(INVAR_EXIT_INPUT, "probe: --url: too long");
}

int cmd_probe(int argc, char **argv) {
    const char *url = NULL, *case_path = NULL, *model = NULL, *out_dir = "build/report/probe";
    const char *header_items[PROBE_MAX_HEADERS];
    cli_list headers = {.item = header_items, .max = PROBE_MAX_HEADERS};
    int vocab = 0, step_ms = 20;
    double timeout_s = 300;
    const cli_flag flags[] = {
        {.name = "--url", .metavar = "URL", .to.string = &url, .required = true,
         .help = "the server: http://HOST:PORT or http://HOST:PORT/v1"},
        {.name = "--case", .metavar = "FILE", .to.string = &case_path, .required = true,
         .help = "a case file: its [prompts], batch_sizes and arrivals are used"},
        {.name = "--model", .metavar = "NAME", .to.string = &model,
         .help = "the model to ask for (default: the first of /v1/models)"},
        {.name = "--header", .kind = CLI_STRINGS, .metavar = "'K: V'", .to.strings = &headers,
         .help = "an HTTP header sent with every request (e.g. Authorization);\nrepeatable"},
        {.name = "--vocab-size", .kind = CLI_INT, .to.integer = &vocab, .min = 1, .max = 1 << 30,
         .help = "token ids are drawn in [0, N) (default: /v1/models' vocab_size)"},
        {.name = "--step-ms", .kind = CLI_INT, .to.integer = &step_ms, .min = 0, .max = 60000,
         .show_default = true, .help = "milliseconds per arrival step (staggered, bursty)"},
        {.name = "--timeout", .kind = CLI_DOUBLE, .to.real = &timeout_s, .min = 0.001,
         .max = 86400, .show_default = true, .help = "seconds one request may take"},
        {.name = "--out", .metavar = "DIR", .to.string = &out_dir, .show_default = true,
         .help = "the report directory"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar probe",
        .about = "Tests a running OpenAI-compatible server for batch invariance through\n"
                 "/v1/completions: every prompt alone (bs=1), then with N requests in flight\n"
                 "at once for each batch size and arrival pattern, the largest batch twice;\n"
                 "logprobs compared as float32 bits. Writes DIR/summary.csv, divergence.csv,\n"
                 "requests.csv (every answer, or why none), meta.csv, junit.xml, summary.md.",
        .flags = flags,
        .epilogue = "Verdicts: PASS (every request answered in full, equal to bs=1 bit for bit,\n"
                    "batches served together), FAIL (some request differed), ERROR (requests\n"
                    "failed, none differed), INCONCLUSIVE (nothing differed or failed, but short\n"
                    "answers, one answer for every prompt, or batches never served together).\n"
                    "Exit: 0 every config PASS, 1 some FAIL (batch-variant or nondeterministic),\n"
                    "2 bad usage or case file, an unreachable server, or an ERROR and no FAIL,\n"
                    "3 a report could not be written, 4 an INCONCLUSIVE and no FAIL or ERROR.",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    for (int i = 0; i < headers.n; i++)
        if (!strchr(headers.item[i], ':'))
            return cli_usage_error(&cmd, "--header: '%s' is not 'Name: value'", headers.item[i]);

    case_file *c = invar_calloc(1, sizeof *c, "case file");
    char err[1400];
    if (!case_file_load(case_path, c, err, sizeof err)) {
        fprintf(stderr, "invar: error: %s\n", err);
        free(c);
        return INVAR_EXIT_INPUT;
    }
    CURLcode crc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (crc != CURLE_OK) invar_die(INVAR_EXIT_SYSTEM, "probe: curl_global_init failed: %s",
                                   curl_easy_strerror(crc));
    probe pr = {.c = c, .step_ms = step_ms,
                .http = {.timeout_ms = (long)(timeout_s * 1000), .connect_timeout_ms = 10000}};
    for (int i = 0; i < headers.n; i++) {
        struct curl_slist *l = curl_slist_append(pr.http.headers, headers.item[i]);
        if (!l) invar_die(INVAR_EXIT_SYSTEM, "probe: curl_slist_append failed");
        pr.http.headers = l;
    }
    char base[2048], models_url[2100], completions_url[2100], metrics_url[2100];
    api_base(url, base, sizeof base);
    snprintf(models_url, sizeof models_url, "%s/models", base);
    snprintf(completions_url, sizeof completions_url, "%s/completions", base);
    // Metrics live beside /v1, at the server's root (as vLLM and invar serve put them).
    snprintf(metrics_url, sizeof metrics_url, "%.*s/metrics", (int)(strlen(base) - 3), base);
    pr.completions_url = completions_url;
    pr.metrics_url = metrics_url;

    char *models = query_models(models_url, &pr.http);
    char name[512];
    served_model(models_url, models, model, name, sizeof name, &vocab);
    if (!name[0])
        invar_die(INVAR_EXIT_INPUT, "probe: GET %s lists no model; give --model", models_url);
    if (vocab == 0)
        invar_die(INVAR_EXIT_INPUT, "probe: GET %s reports no vocab_size for %s; give "
                  "--vocab-size (the tokenizer's vocabulary size)", models_url, name);
    prompt_spec spec = case_prompt_spec(c);
    prompt_set *p = prompts_generate(&spec, vocab, c->seed);
    pr.p = p;
    // An answer's size follows from its tokens and top-k: a far longer one is refused as it
    // arrives, so memory stays bounded by the requests in flight (a 64 KiB floor for the
    // envelope and text, 512 bytes an entry for a token's name, text and number).
    pr.max_reply = (size_t)(64 << 10) +
                   (size_t)c->max_new_tokens * (size_t)(c->top_k + 2) * 512u;
    pr.bodies = invar_calloc((size_t)p->count, sizeof *pr.bodies, "request bodies");
    for (int i = 0; i < p->count; i++) pr.bodies[i] = request_body(c, name, p, i);

    host_make_dirs(out_dir);
    for (char *s = models; *s; s++)  // one line in meta.csv
        if (*s == '\n' || *s == '\r') *s = ' ';
    char vocab_text[16];
    snprintf(vocab_text, sizeof vocab_text, "%d", vocab);
    const char *keys[] = {"server_url", "model", "vocab_size", "v1_models"};
    const char *values[] = {url, name, vocab_text, models};
    run_meta_input in = {.device = "server", .case_path = c->path, .argc = argc, .argv = argv,
                         .has_seed = true, .seed = c->seed, .n_extra = 4, .extra_keys = keys,
                         .extra_values = values};
    if (!run_meta_write(out_dir, &in, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "writing %s/meta.csv: %s", out_dir, err);
    pr.summary = open_report(out_dir, "summary.csv", summary_header(), SUMMARY_NCOLS);
    pr.divergence = open_report(out_dir, "divergence.csv", divergence_header(), DIVERGENCE_NCOLS);
    static const char *const request_columns[] = {"config", "run", "request", "http_status",
                                                  "seconds", "tokens", "status", "error"};
    pr.requests = open_report(out_dir, "requests.csv", request_columns, 8);

    printf("probe %s: model %s (vocab %d), case %s: %d prompts of %d..%d tokens, %d new tokens, "
           "top %d logprobs, temperature %g\n", base, name, vocab, c->path, p->count, c->min_len,
           c->max_len, c->max_new_tokens, c->top_k, (double)c->temperature);
    fflush(stdout);
    probe_run baseline = run_alloc(p->count, c->max_new_tokens);
    run_prompts(&pr, &baseline, "baseline", "bs=1", 1, NULL);
    pr.canned = one_answer_for_all(&pr, &baseline, &pr.distinct_answered);
    backend_selection sel = {.where = "-"};
    const matrix_list *arrivals = &c->axes[matrix_axis_find("arrivals")];
    int counts[4] = {0};
    for (int a = 0; a < arrivals->n; a++) {
        arrival_pattern ap;
        if (!arrival_pattern_by_name(arrivals->value[a], &ap))
            invar_die(INVAR_EXIT_INPUT, "%s: arrivals: unknown pattern '%s'", c->path,
                      arrivals->value[a]);
        counts[probe_config(&pr, &baseline, ap, url, name, &sel)]++;
    }
    run_free(&baseline, p->count);
    close_report(pr.summary);
    close_report(pr.divergence);
    close_report(pr.requests);
    if (!report_render_run(out_dir, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "rendering the report in %s: %s", out_dir, err);
    printf("reports: %s/{summary.csv,divergence.csv,requests.csv,meta.csv,junit.xml,summary.md}\n"
           "%d passed, %d failed, %d error, %d inconclusive\n", out_dir, counts[PROBE_PASS],
           counts[PROBE_FAIL], counts[PROBE_ERROR], counts[PROBE_INCONCLUSIVE]);
    if (fflush(stdout) != 0) invar_die(INVAR_EXIT_SYSTEM, "writing stdout failed");
    for (int i = 0; i < p->count; i++) free(pr.bodies[i]);
    free(pr.bodies);
    free(models);
    prompts_free(p);
    curl_slist_free_all(pr.http.headers);
    curl_global_cleanup();
    free(c);
    // Batch variance shown outranks a broken server, which outranks a run that showed nothing.
    return counts[PROBE_FAIL] ? 1 : counts[PROBE_ERROR] ? INVAR_EXIT_INPUT
           : counts[PROBE_INCONCLUSIVE] ? PROBE_EXIT_INCONCLUSIVE : 0;
}
