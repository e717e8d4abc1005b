// reports/markdown.c — the Markdown summary (reports/markdown.h).
#include "markdown.h"

#include <limits.h>            // PATH_MAX
#include <stdio.h>             // FILE, fprintf, fputs, fputc, snprintf
#include <stdlib.h>            // free
#include <string.h>            // strchr, strcmp, strlen, strncmp, strstr
#include <strings.h>           // strcasecmp
#include <unistd.h>            // access

#include "../common/check.h"  // invar_calloc
#include "report_file.h"       // report_file_open, report_file_commit
#include "report_schema.h"     // summary_get, summary_col, kernels_get, SUMMARY_*, KERNELS_*
#include "row_verdict.h"       // summary_row_state, summary_first_divergence, kernel_row_state
#include "run_meta.h"          // run_meta_get

// ---------------------------------------------------------------------------------------------
// Markdown text
// ---------------------------------------------------------------------------------------------

// A table cell: '|' escaped, line breaks as spaces, so a value never breaks the table.
static void cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else if (*s == '\n' || *s == '\r') fputc(' ', f);
        else fputc(*s, f);
    }
}

// Inline code: a value with a backtick gets a double-backtick fence.
static void code(FILE *f, const char *s) {
    const char *fence = strchr(s, '`') ? "`` " : "`";
    fputs(fence, f);
    cell(f, s);
    fputs(strchr(s, '`') ? " ``" : "`", f);
}

static const char *verdict_badge(row_state s) {
    static const char *const badges[] = {"✅ PASS", "❌ **FAIL**", "⏭️ SKIP", "⚠️ **ERROR**"};
    return badges[s];
}

// ---------------------------------------------------------------------------------------------
// Effective settings: the value a config ran with, the value asked for where resolution may
// change it, and the row's resolution (why they differ). A report without the effective
// column (an older invar) shows the requested value as the one that ran.
// ---------------------------------------------------------------------------------------------

#define NO_COLUMN (-1)

static const struct {
    const char *label;
    int requested;              // a summary_column, or NO_COLUMN: resolution never changes it
    summary_column effective;
} known_settings[] = {
    {"device", NO_COLUMN, SUMMARY_DEVICE},
    {"kernel set", NO_COLUMN, SUMMARY_KERNEL_SET},
    {"backend", NO_COLUMN, SUMMARY_ATTENTION_BACKEND},
    {"prefix caching", SUMMARY_PREFIX_CACHING, SUMMARY_PREFIX_CACHING_EFFECTIVE},
    {"chunked prefill", SUMMARY_CHUNKED_PREFILL, SUMMARY_CHUNKED_PREFILL_EFFECTIVE},
    {"token budget", SUMMARY_MAX_NUM_BATCHED_TOKENS, SUMMARY_MAX_NUM_BATCHED_TOKENS_EFFECTIVE},
    {"arrivals", NO_COLUMN, SUMMARY_ARRIVALS},
    {"threads", NO_COLUMN, SUMMARY_THREADS},
};
#define MAX_SETTINGS ((int)(sizeof known_settings / sizeof known_settings[0]))

typedef struct {
    const char *label;
    int eff, req;   // columns of the table read, -1 when absent
} setting;

// The settings this table has.
static int find_settings(const csv_table *t, setting *out) {
    int n = 0;
    for (int i = 0; i < MAX_SETTINGS; i++) {
        setting s = {.label = known_settings[i].label,
                     .eff = summary_col(t, known_settings[i].effective),
                     .req = known_settings[i].requested == NO_COLUMN
                                ? -1
                                : summary_col(t, (summary_column)known_settings[i].requested)};
        if (s.eff < 0) {
            s.eff = s.req;
            s.req = -1;
        }
        if (s.eff >= 0) out[n++] = s;
    }
    return n;
}

static const char *row_wide_reason(const csv_table *t, int row) {
    return summary_get(t, row, SUMMARY_RESOLUTION);
}

static bool setting_changed(const csv_table *t, int row, const setting *s) {
    const char *req = csv_at(t, row, s->req), *eff = csv_at(t, row, s->eff);
    return s->req >= 0 && req[0] && strcmp(req, eff) != 0;
}

// A setting with neither an effective nor a requested value in this row is left out.
static bool setting_present(const csv_table *t, int row, const setting *s) {
    return csv_at(t, row, s->eff)[0] || csv_at(t, row, s->req)[0];
}

// One setting as text: "prefix caching: ~~on~~ off (why)" when it was changed for the run.
static void setting_text(FILE *f, const csv_table *t, int row, const setting *s,
                         bool *used_row_reason) {
    const char *req = csv_at(t, row, s->req), *eff = csv_at(t, row, s->eff);
    const char *reason = "";
    if (setting_changed(t, row, s) && !*used_row_reason) {
        reason = row_wide_reason(t, row);
        *used_row_reason = reason[0] != '\0';
    }
    fprintf(f, "%s: ", s->label);
    if (s->req >= 0 && req[0] && strcmp(req, eff) != 0) {
        fputs("~~", f);
        cell(f, req);
        fputs("~~ ", f);
    }
    if (setting_changed(t, row, s)) fputs("**", f);
    cell(f, eff[0] ? eff : "-");
    if (setting_changed(t, row, s)) fputs("**", f);
    if (reason[0]) {
        fputs(" (", f);
        cell(f, reason);
        fputc(')', f);
    }
}

// A setting with one value in every row of the case, never changed, is shown once above the
// table instead of in every row.
static bool setting_common(const csv_table *t, const int *rows, int n, const setting *s) {
    for (int i = 0; i < n; i++) {
        if (setting_changed(t, rows[i], s)) return false;
        if (strcmp(csv_at(t, rows[i], s->eff), csv_at(t, rows[0], s->eff)) != 0) return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Prefix-cache hit rate: a rate column, or hits / queries
// ---------------------------------------------------------------------------------------------

static bool hit_rate_text(const csv_table *t, int row, char *buf, int len) {
    int rc = summary_col(t, SUMMARY_PREFIX_HIT_RATE);
    double v, hits, queries;
    bool has_hq = csv_number(summary_get(t, row, SUMMARY_PREFIX_HITS), &hits) &&
                  csv_number(summary_get(t, row, SUMMARY_PREFIX_QUERIES), &queries);
    buf[0] = '\0';
    if (rc >= 0 && csv_number(csv_at(t, row, rc), &v)) {
        snprintf(buf, (size_t)len, "%.0f%%", 100 * v);
    } else if (rc >= 0 && csv_at(t, row, rc)[0]) {
        snprintf(buf, (size_t)len, "%s", csv_at(t, row, rc));
    } else if (has_hq && queries > 0) {
        snprintf(buf, (size_t)len, "%.0f%%", 100 * hits / queries);
    }
    if (has_hq && buf[0] && strcmp(buf, "-") != 0) {
        int n = (int)strlen(buf);
        snprintf(buf + n, (size_t)(len - n), " (%.0f/%.0f)", hits, queries);
    }
    return rc >= 0 || has_hq;
}

// ---------------------------------------------------------------------------------------------
// One case's table
// ---------------------------------------------------------------------------------------------

typedef struct {
    int passed, failed, skipped, errors;
    double seconds;
} totals;

static void case_header(FILE *f, const csv_table *t, int row) {
    const char *model = summary_get(t, row, SUMMARY_MODEL);
    const char *prompts = summary_get(t, row, SUMMARY_PROMPTS);
    const char *bs = summary_get(t, row, SUMMARY_BATCH_SIZES);
    const char *seed = summary_get(t, row, SUMMARY_SEED);
    bool any = false;
    if (model[0]) {
        fputs("model ", f);
        code(f, model);
        any = true;
    }
    if (prompts[0]) {
        fprintf(f, "%s%s prompts", any ? " · " : "", prompts);
        const char *lo = summary_get(t, row, SUMMARY_MIN_LEN);
        const char *hi = summary_get(t, row, SUMMARY_MAX_LEN);
        if (lo[0] && hi[0]) fprintf(f, " of %s..%s tokens", lo, hi);
        any = true;
    }
    const char *mnt = summary_get(t, row, SUMMARY_MAX_NEW_TOKENS);
    if (mnt[0]) {
        fprintf(f, "%s%s new tokens", any ? " · " : "", mnt);
        any = true;
    }
    const char *temp = summary_get(t, row, SUMMARY_TEMPERATURE);
    const char *topk = summary_get(t, row, SUMMARY_TOP_K);
    if (temp[0]) {
        fprintf(f, "%stemperature %s", any ? " · " : "", temp);
        any = true;
    }
    if (topk[0]) {
        fprintf(f, "%stop-%s logprobs", any ? " · " : "", topk);
        any = true;
    }
    if (bs[0]) {
        fprintf(f, "%sbatch sizes %s (each compared with bs=1)", any ? " · " : "", bs);
        any = true;
    }
    if (seed[0]) fprintf(f, "%sseed %s", any ? " · " : "", seed);
    fputs("\n\n", f);
}

static void write_case(FILE *f, const csv_table *t, const int *rows, int n, totals *tot) {
    setting settings[MAX_SETTINGS];
    int ns = find_settings(t, settings);
    bool common[MAX_SETTINGS];
    int varying = 0;
    for (int s = 0; s < ns; s++) {
        common[s] = setting_common(t, rows, n, &settings[s]);
        varying += !common[s];
    }
    const char *name = summary_get(t, rows[0], SUMMARY_CASE);
    fprintf(f, "## Case ");
    code(f, name[0] ? name : "run");
    fputs("\n\n", f);
    case_header(f, t, rows[0]);
    bool any_common = false;
    for (int s = 0; s < ns; s++) {
        if (!common[s] || !setting_present(t, rows[0], &settings[s])) continue;
        fputs(any_common ? ", " : "Settings of every config: ", f);
        bool used = false;
        setting_text(f, t, rows[0], &settings[s], &used);
        any_common = true;
    }
    if (any_common) fputs("\n\n", f);

    bool hit_rate = false;
    char buf[1024];
    for (int i = 0; i < n && !hit_rate; i++) hit_rate = hit_rate_text(t, rows[i], buf, sizeof buf);
    fputs("| verdict | config |", f);
    if (varying) fputs(" effective settings |", f);
    fputs(" expected | observed | first divergence |", f);
    if (hit_rate) fputs(" prefix-cache hits |", f);
    fputs(" time |\n|---|---|", f);
    if (varying) fputs("---|", f);
    fputs("---|---|---|", f);
    if (hit_rate) fputs("---|", f);
    fputs("---:|\n", f);

    for (int i = 0; i < n; i++) {
        int r = rows[i];
        row_state st = summary_row_state(t, r);
        double secs = 0;
        csv_number(summary_get(t, r, SUMMARY_SECONDS), &secs);
        tot->passed += st == ROW_PASS;
        tot->failed += st == ROW_FAIL;
        tot->skipped += st == ROW_SKIP;
        tot->errors += st == ROW_ERROR;
        tot->seconds += secs;
        fprintf(f, "| %s | ", verdict_badge(st));
        code(f, summary_get(t, r, SUMMARY_CONFIG));
        fputs(" |", f);
        if (varying) {
            fputs(" ", f);
            bool first = true, used_row_reason = false;
            for (int s = 0; s < ns; s++) {
                if (common[s] || !setting_present(t, r, &settings[s])) continue;
                if (!first) fputs(", ", f);
                setting_text(f, t, r, &settings[s], &used_row_reason);
                first = false;
            }
            const char *wide = row_wide_reason(t, r);
            if (wide[0] && !used_row_reason) {
                fputs(" ⚠️ ", f);
                cell(f, wide);
            }
            fputs(" |", f);
        }
        fputs(" ", f);
        cell(f, summary_get(t, r, SUMMARY_EXPECTED));
        fputs(" | ", f);
        cell(f, summary_get(t, r, SUMMARY_OBSERVED));
        const char *note = summary_get(t, r, SUMMARY_NOTE);
        if (st != ROW_PASS && note[0]) {
            fputs(" — ", f);
            cell(f, note);
        }
        fputs(" | ", f);
        if (summary_first_divergence(t, r, buf, sizeof buf)) cell(f, buf);
        else fputs("–", f);
        const char *diff = summary_get(t, r, SUMMARY_DIFFERING_REQUESTS);
        const char *cmp = summary_get(t, r, SUMMARY_REQUESTS_COMPARED);
        if (diff[0] && strcmp(diff, "0") != 0) fprintf(f, " (%s of %s comparisons differ)", diff, cmp);
        fputs(" |", f);
        if (hit_rate) {
            fputs(" ", f);
            hit_rate_text(t, r, buf, sizeof buf);
            cell(f, buf[0] ? buf : "–");
            fputs(" |", f);
        }
        fprintf(f, " %.1f s |\n", secs);
    }
    fputs("\n", f);
}

static void write_failures(FILE *f, const csv_table *t) {
    bool any = false;
    char reason[1024], first[1024];
    for (int r = 0; r < t->nrows; r++) {
        row_state st = summary_row_state(t, r);
        if (st != ROW_FAIL && st != ROW_ERROR) continue;
        if (!any) fputs("### Failures\n\n", f);
        any = true;
        summary_reason(t, r, reason, sizeof reason);
        fputs("- ", f);
        code(f, summary_get(t, r, SUMMARY_CONFIG));
        fputs(": ", f);
        cell(f, reason);
        if (summary_first_divergence(t, r, first, sizeof first)) {
            fputs("; first divergence: ", f);
            cell(f, first);
        }
        fputs("\n", f);
    }
    if (any) fputs("\n", f);
}

// ---------------------------------------------------------------------------------------------
// Kernel checks: one row per (set, device, op)
// ---------------------------------------------------------------------------------------------

static void write_kernels(FILE *f, const csv_table *t) {
    fputs("## Kernel checks\n\n", f);
    fputs("| verdict | set | device | op | shapes | varied at | worst rel-L2 error | time |\n"
          "|---|---|---|---|---:|---|---:|---:|\n", f);
    bool *done = invar_calloc((size_t)t->nrows + 1, sizeof *done, "markdown kernel rows");
    int passed = 0, failed = 0, skipped = 0, errored = 0;
    char why[1024];
    for (int first = 0; first < t->nrows; first++) {
        if (done[first]) continue;
        const char *set = kernels_get(t, first, KERNELS_SET);
        const char *dev = kernels_get(t, first, KERNELS_DEVICE);
        const char *op = kernels_get(t, first, KERNELS_OP);
        int shapes = 0, varied = 0, fails = 0, errors = 0, skips = 0;
        double worst = 0, secs = 0;
        for (int r = first; r < t->nrows; r++) {
            if (strcmp(kernels_get(t, r, KERNELS_SET), set) ||
                strcmp(kernels_get(t, r, KERNELS_DEVICE), dev) ||
                strcmp(kernels_get(t, r, KERNELS_OP), op))
                continue;
            done[r] = true;
            shapes++;
            row_state st = kernel_row_state(t, r, why, sizeof why);
            fails += st == ROW_FAIL;
            errors += st == ROW_ERROR;  // a crash or an exception: nothing judged at that shape
            skips += st == ROW_SKIP;
            varied += strcasecmp(kernels_get(t, r, KERNELS_INVARIANT), "no") == 0;
            double v;
            if (csv_number(kernels_get(t, r, KERNELS_REL_L2_ERR), &v) && v > worst) worst = v;
            if (csv_number(kernels_get(t, r, KERNELS_SECONDS), &v)) secs += v;
        }
        bool must_vary = strcasecmp(kernels_get(t, first, KERNELS_EXPECT), "must vary") == 0;
        if (must_vary && varied == 0) fails++;  // the negative control never triggered
        row_state st = fails ? ROW_FAIL : errors ? ROW_ERROR : skips == shapes ? ROW_SKIP : ROW_PASS;
        passed += st == ROW_PASS;
        failed += st == ROW_FAIL;
        errored += st == ROW_ERROR;
        skipped += st == ROW_SKIP;
        fprintf(f, "| %s | ", verdict_badge(st));
        cell(f, set);
        fputs(" | ", f);
        cell(f, dev);
        fputs(" | ", f);
        code(f, op);
        fprintf(f, " | %d | ", shapes);
        if (varied) fprintf(f, "%d of %d shapes%s", varied, shapes, must_vary ? " (expected)" : "");
        else fputs(must_vary ? "never (**must vary**)" : "never", f);
        fprintf(f, " | %.2e | %.1f s |\n", worst, secs);
    }
    fprintf(f, "\n**%d ops: %d passed, %d failed, %d skipped", passed + failed + skipped + errored,
            passed, failed, skipped);
    if (errored) fprintf(f, ", %d crashed or raised (CRASH, ERROR)", errored);
    fputs("**\n\n", f);
    bool any = false;
    for (int r = 0; r < t->nrows; r++) {
        row_state st = kernel_row_state(t, r, why, sizeof why);
        if (st != ROW_FAIL && st != ROW_ERROR) continue;
        if (!any) fputs("### Failing kernel checks\n\n", f);
        any = true;
        char name[512];
        kernel_row_name(t, r, name, sizeof name);
        fputs("- ", f);
        code(f, name);
        fputs(": ", f);
        cell(f, why);
        fputs("\n", f);
    }
    if (any) fputs("\n", f);
    free(done);
}

// ---------------------------------------------------------------------------------------------
// The file
// ---------------------------------------------------------------------------------------------

static void write_meta(FILE *f, const csv_table *meta) {
    const char *commit = run_meta_get(meta, "invar_commit"), *date = run_meta_get(meta, "date_utc");
    const char *host = run_meta_get(meta, "host"), *device = run_meta_get(meta, "device");
    const char *cpu = run_meta_get(meta, "cpu_model"), *cc = run_meta_get(meta, "compute_capability");
    const char *cs = run_meta_get(meta, "case_file"), *hash = run_meta_get(meta, "case_xxh64");
    if (!meta) return;
    fputs("invar ", f);
    code(f, commit[0] ? commit : "unknown");
    fprintf(f, " · %s · host ", date);
    code(f, host);
    fputs(" · ", f);
    cell(f, device);
    if (strcmp(device, "cpu") == 0 && cpu[0]) {
        fputs(" (", f);
        cell(f, cpu);
        fputc(')', f);
    } else if (cc[0] && strcmp(cc, "-") != 0) {
        fprintf(f, " (sm %s, driver %s, CUDA %s, cuBLAS %s)", cc, run_meta_get(meta, "driver"),
                run_meta_get(meta, "cuda_runtime"), run_meta_get(meta, "cublas"));
    }
    if (cs[0] && strcmp(cs, "-") != 0) {
        fputs(" · case ", f);
        code(f, cs);
        fprintf(f, " (xxh64 %s)", hash);
    }
    fputs("\n\n", f);
}

static const char *const plot_files[][2] = {
    {"invariance_matrix.png", "Invariance matrix"},
    {"divergence_by_step.png", "Divergence by decode step"},
    {"bench_gemm.png", "GEMM throughput"},
    {"bench_mla.png", "MLA attention throughput"},
};

static void write_plots(FILE *f, const char *plots_dir) {
    bool any = false;
    for (size_t i = 0; plots_dir && i < sizeof plot_files / sizeof plot_files[0]; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", plots_dir, plot_files[i][0]) >= (int)sizeof path ||
            access(path, R_OK) != 0)
            continue;
        if (!any) fputs("## Plots\n\n", f);
        any = true;
        fprintf(f, "![%s](plots/%s)\n\n", plot_files[i][1], plot_files[i][0]);
    }
}

bool markdown_write(const char *path, const csv_table *summary, const csv_table *kernels,
                    const csv_table *meta, const char *plots_dir, char *err, int len) {
    report_file rf;
    if (!report_file_open(&rf, path, err, len)) return false;
    FILE *f = rf.f;
    fputs("# invar report\n\n", f);
    write_meta(f, meta);
    totals tot = {0};
    if (summary && summary->nrows > 0) {
        int *rows = invar_calloc((size_t)summary->nrows, sizeof *rows, "markdown rows");
        bool *done = invar_calloc((size_t)summary->nrows, sizeof *done, "markdown rows");
        for (int first = 0; first < summary->nrows; first++) {
            if (done[first]) continue;
            int n = 0;
            const char *c = summary_get(summary, first, SUMMARY_CASE);
            for (int r = first; r < summary->nrows; r++)
                if (!done[r] && strcmp(summary_get(summary, r, SUMMARY_CASE), c) == 0) {
                    rows[n++] = r;
                    done[r] = true;
                }
            write_case(f, summary, rows, n, &tot);
        }
        free(rows);
        free(done);
        int all = tot.passed + tot.failed + tot.skipped + tot.errors;
        fprintf(f, "**%d config%s: %d passed, %d failed, %d skipped", all, all == 1 ? "" : "s",
                tot.passed, tot.failed, tot.skipped);
        if (tot.errors) fprintf(f, ", %d errors", tot.errors);
        fprintf(f, "** · %.1f s\n\n", tot.seconds);
        write_failures(f, summary);
    } else if (summary) {
        fputs("No configs finished (summary.csv has no rows).\n\n", f);
    }
    if (kernels) write_kernels(f, kernels);
    write_plots(f, plots_dir);
    return report_file_commit(&rf, err, len);
}
