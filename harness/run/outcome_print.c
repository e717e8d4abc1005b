// harness/run/outcome_print.c — the console lines of one config (harness/run/outcome_print.h).
#include "outcome_print.h"

#include <string.h>       // strcmp

#include "arrivals.h"     // arrival_pattern_name
#include "summary_row.h"  // format_batch_sizes, setting_on_off, format_hit_rate

// "prefix_caching=off (requested on)" when resolution changed it.
static int describe_setting(char *buf, size_t len, const char *key, const char *effective,
                            const char *requested) {
    if (strcmp(effective, requested) == 0) return snprintf(buf, len, " %s=%s", key, effective);
    return snprintf(buf, len, " %s=%s (requested %s)", key, effective, requested);
}

void outcome_print(FILE *f, bool quiet, const case_file *c, const run_config *cfg,
                   const resolved_config *rc, const outcome *out, const run_config *merged_into) {
    bool pass = strcmp(out->verdict, "PASS") == 0, skip = strcmp(out->verdict, "SKIP") == 0;
    if (quiet && pass) return;
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
                                      setting_on_off(rc->prefix_caching), setting_on_off(cfg->prefix_caching));
        n += (size_t)describe_setting(settings + n, sizeof settings - n, "max_num_batched_tokens",
                                      budget, budget_req);
        describe_setting(settings + n, sizeof settings - n, "chunked_prefill",
                         setting_on_off(rc->chunked_prefill), setting_on_off(cfg->chunked_prefill));
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
    if (out->first_op[0])
        fprintf(f, "      %s: %s\n", out->first_op_nonfinite ? "first op with a NaN or an infinity"
                                                              : "first differing op", out->first_op);
    if (out->note[0]) fprintf(f, "      %s: %s\n", skip ? "skipped" : "note", out->note);
    fflush(f);
}
