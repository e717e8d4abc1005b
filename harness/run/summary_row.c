// harness/run/summary_row.c — one config's summary.csv row (harness/run/summary_row.h).
#include "summary_row.h"

#include <stdio.h>                // snprintf
#include <string.h>               // strcmp

#include "../../common/check.h"  // invar_die
#include "arrivals.h"             // arrival_pattern_name

void report_row_write(csv_report *rep, const char *const *fields) {
    char err[768];
    if (rep && !csv_report_row(rep, fields, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "%s", err);
}

const char *summary_verdict_literal(const char *cell) {
    static const char *const verdicts[] = {"PASS", "FAIL", "SKIP"};
    for (int i = 0; i < 3; i++)
        if (strcmp(cell, verdicts[i]) == 0) return verdicts[i];
    return NULL;
}

void format_batch_sizes(const case_file *c, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n_batch_sizes && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? "," : "", c->batch_sizes[i]);
}

const char *setting_on_off(bool on) { return on ? "on" : "off"; }

void format_hit_rate(long queries, long hits, char *buf, size_t len) {
    if (queries > 0) snprintf(buf, len, "%.3f", (double)hits / (double)queries);
    else snprintf(buf, len, "-");
}

// The numbers of a row as text.
static void format_numbers(const case_file *c, const run_config *cfg, const resolved_config *rc,
                           const outcome *out, summary_text *t) {
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
    snprintf(t->tp, sizeof t->tp, "%d", cfg->tensor_parallel > 0 ? cfg->tensor_parallel : 1);
    format_batch_sizes(c, t->bs, sizeof t->bs);
    snprintf(t->budget_eff, sizeof t->budget_eff, "%d", rc->max_num_batched_tokens);
    snprintf(t->compared, sizeof t->compared, "%d", out->compared);
    snprintf(t->differing, sizeof t->differing, "%d", out->differing);
    snprintf(t->queries, sizeof t->queries, "%ld", out->prefix_queries);
    snprintf(t->hits, sizeof t->hits, "%ld", out->prefix_hits);
    format_hit_rate(out->prefix_queries, out->prefix_hits, t->rate, sizeof t->rate);
    snprintf(t->chunks, sizeof t->chunks, "%ld", out->prefill_chunks);
    snprintf(t->secs, sizeof t->secs, "%.3f", out->seconds);
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
}

void summary_fields(const case_file *c, const run_config *cfg, const resolved_config *rc,
                    const backend_selection *sel, const outcome *out,
                    const run_config *merged_into, summary_text *t,
                    const char *fields[SUMMARY_NCOLS]) {
    format_numbers(c, cfg, rc, out, t);
    bool f = out->has_first, skipped = strcmp(out->verdict, "SKIP") == 0;
    // A skipped config has no effective settings, except the backend a refusal names.
    bool resolved = !skipped || rc->refused;
    const char *const row[SUMMARY_NCOLS] = {
        [SUMMARY_CASE] = c->name,
        [SUMMARY_CONFIG] = cfg->name,
        [SUMMARY_DEVICE] = rc->device,
        [SUMMARY_KERNEL_SET] = cfg->kernel_set,
        [SUMMARY_BATCH_INVARIANT] = skipped ? "" : (rc->batch_invariant_mode ? "yes" : "no"),
        [SUMMARY_MODEL] = cfg->model,
        [SUMMARY_SEED] = t->seed,
        [SUMMARY_PROMPTS] = t->count,
        [SUMMARY_REQUESTS] = t->requests,
        [SUMMARY_MIN_LEN] = t->min_len,
        [SUMMARY_MAX_LEN] = t->max_len,
        [SUMMARY_MAX_NEW_TOKENS] = t->mnt,
        [SUMMARY_TEMPERATURE] = t->temp,
        [SUMMARY_TOP_K] = t->topk,
        [SUMMARY_SHARED_PREFIX_GROUPS] = t->groups,
        [SUMMARY_SHARED_PREFIX_LEN] = t->prefix_len,
        [SUMMARY_WARM_CACHE_REPEATS] = t->warm,
        [SUMMARY_ARRIVALS] = arrival_pattern_name(cfg->arrivals),
        [SUMMARY_MAX_NUM_BATCHED_TOKENS] = t->budget,
        [SUMMARY_CHUNKED_PREFILL] = setting_on_off(cfg->chunked_prefill),
        [SUMMARY_PREFIX_CACHING] = setting_on_off(cfg->prefix_caching),
        [SUMMARY_FORCE_PREFIX_CACHING] = cfg->force_prefix_caching ? "true" : "false",
        [SUMMARY_THREADS] = t->threads, [SUMMARY_TENSOR_PARALLEL] = t->tp,
        [SUMMARY_BATCH_SIZES] = t->bs,
        [SUMMARY_ATTENTION_BACKEND] =
            resolved && rc->backend ? rc->backend->name : cfg->attention_backend,
        [SUMMARY_BACKEND_SELECTED_BY] = sel->where,
        [SUMMARY_PREFIX_CACHING_EFFECTIVE] = skipped ? "" : setting_on_off(rc->prefix_caching),
        [SUMMARY_CHUNKED_PREFILL_EFFECTIVE] = skipped ? "" : setting_on_off(rc->chunked_prefill),
        [SUMMARY_MAX_NUM_BATCHED_TOKENS_EFFECTIVE] = skipped ? "" : t->budget_eff,
        [SUMMARY_RESOLUTION] = rc->reason,
        [SUMMARY_MERGED_INTO] = merged_into ? merged_into->name : "",
        [SUMMARY_EXPECTED] = out->expected,
        [SUMMARY_OBSERVED] = out->observed,
        [SUMMARY_VERDICT] = out->verdict,
        [SUMMARY_REQUESTS_COMPARED] = t->compared,
        [SUMMARY_DIFFERING_REQUESTS] = t->differing,
        [SUMMARY_FIRST_BATCH_SIZE] = f ? out->first_batch : "",
        [SUMMARY_FIRST_REQUEST] = f ? t->req : "",
        [SUMMARY_FIRST_STEP] = f ? t->step : "",
        [SUMMARY_FIRST_FIELD] = f ? t->field : "",
        [SUMMARY_FIRST_BASE_TOKEN] = f ? t->bt : "",
        [SUMMARY_FIRST_BATCH_TOKEN] = f ? t->ot : "",
        [SUMMARY_FIRST_BASE_LOGPROB] = f ? t->blp : "",
        [SUMMARY_FIRST_BATCH_LOGPROB] = f ? t->olp : "",
        [SUMMARY_FIRST_ABS_DELTA] = f ? t->delta : "",
        [SUMMARY_FIRST_ULPS] = f ? t->ulps : "",
        [SUMMARY_FIRST_OP] = out->first_op,
        [SUMMARY_PREFILL_VS_DECODE] = skipped ? "" : out->prefill_vs_decode,
        [SUMMARY_PREFIX_QUERIES] = skipped ? "" : t->queries,
        [SUMMARY_PREFIX_HITS] = skipped ? "" : t->hits,
        [SUMMARY_PREFIX_HIT_RATE] = skipped ? "" : t->rate,
        [SUMMARY_PREFILL_CHUNKS] = skipped ? "" : t->chunks,
        [SUMMARY_SECONDS] = t->secs,
        [SUMMARY_NOTE] = out->note,
    };
    for (int i = 0; i < SUMMARY_NCOLS; i++) fields[i] = row[i];
}

void summary_row_write(const case_file *c, const run_config *cfg, const resolved_config *rc,
                       const backend_selection *sel, const outcome *out,
                       const run_config *merged_into, const char *const *outcome_from,
                       csv_report *rep) {
    if (!rep) return;
    summary_text text;
    const char *fields[SUMMARY_NCOLS];
    summary_fields(c, cfg, rc, sel, out, merged_into, &text, fields);
    if (outcome_from) {
        for (int i = SUMMARY_EXPECTED; i <= SUMMARY_NOTE; i++)
            if (i != SUMMARY_SECONDS) fields[i] = outcome_from[i];
        fields[SUMMARY_THREADS] = outcome_from[SUMMARY_THREADS];
    }
    report_row_write(rep, fields);
}

void divergence_row_write(csv_report *rep, const char *config, const char *batch, int request,
                          const divergence *d) {
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
    const char *const fields[DIVERGENCE_NCOLS] = {
        [DIVERGENCE_CONFIG] = config, [DIVERGENCE_BATCH_SIZE] = batch,
        [DIVERGENCE_REQUEST] = req, [DIVERGENCE_STEP] = step, [DIVERGENCE_FIELD] = field,
        [DIVERGENCE_BASE_TOKEN] = bt, [DIVERGENCE_BATCH_TOKEN] = ot,
        [DIVERGENCE_BASE_LOGPROB] = blp, [DIVERGENCE_BATCH_LOGPROB] = olp,
        [DIVERGENCE_ABS_DELTA] = delta, [DIVERGENCE_ULPS] = ulps,
    };
    report_row_write(rep, fields);
}
