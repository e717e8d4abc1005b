// reports/baseline_diff.c — the nightly diff against a baseline report (reports/baseline_diff.h).
#include "baseline_diff.h"

#include <ctype.h>             // tolower
#include <errno.h>             // errno
#include <limits.h>            // PATH_MAX
#include <stdlib.h>            // free
#include <string.h>            // strcmp, strlen, strerror, strcspn, strrchr
#include <strings.h>           // strcasecmp, strcasestr
#include <sys/stat.h>          // stat, S_ISDIR

#include "../common/check.h"  // invar_calloc
#include "csv_read.h"          // csv_table_read, csv_number
#include "report_file.h"       // report_file_open, report_file_commit, report_path
#include "report_schema.h"     // summary_header, kernels_header, summary_get
#include "row_verdict.h"       // summary_row_state, kernel_row_state, summary_first_divergence
#include "run_meta.h"          // run_meta_get, run_meta_verify
#include "shard_id.h"          // shard_id_parse

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

// The bench's tables compared, T_GEMM to T_TP_SIZE (a folder of `invar bench --out`, as
// results/bench/ keeps them, has those and meta.csv only). bench_decode_ops.csv is left out: a
// profile of one step, its small ops' times too noisy to hold a threshold.
enum { T_SUMMARY, T_KERNELS, T_GEMM, T_MLA, T_MOE, T_DECODE, T_TP_ALL_REDUCE, T_TP_DECODE, T_TP_SIZE,
       T_META, N_TABLES };
static const char *const table_files[N_TABLES] = {
    "summary.csv", "kernels.csv", "bench_gemm.csv", "bench_mla.csv", "bench_moe.csv", "bench_decode.csv",
    "bench_tp_all_reduce.csv", "bench_tp_decode.csv", "bench_tp_size.csv", "meta.csv",
};

typedef struct {
    const char *dir;
    csv_table *t[N_TABLES];
} report_dir;

static void report_dir_free(report_dir *d) {
    for (int i = 0; i < N_TABLES; i++) csv_table_free(d->t[i]);
}

// A summary.csv or kernels.csv the diff can read: the column that names its checks, at least
// one row, and a name in every row. Anything else (random bytes, a header alone, another
// file's columns) would make every baseline check "vanished" and hide a regression.
static bool verdict_table_usable(const csv_table *t, const char *name_col,
                                 const char *verdict_col, const char *writer, char *err,
                                 int len) {
    if (!t) return true;
    int col = csv_col(t, name_col);
    if (col < 0 || csv_col(t, verdict_col) < 0) {
        // The header's text is not quoted: random bytes would go to the terminal.
        snprintf(err, (size_t)len, "%s:1: not a %s (a report of %s): no '%s' column in its "
                 "header (%d column%s)", t->path, strrchr(t->path, '/') ? strrchr(t->path, '/') + 1
                 : t->path, writer, col < 0 ? name_col : verdict_col, t->ncols,
                 t->ncols == 1 ? "" : "s");
        return false;
    }
    if (t->nrows == 0) {
        snprintf(err, (size_t)len, "%s: a header and no rows: the run wrote nothing to compare",
                 t->path);
        return false;
    }
    for (int r = 0; r < t->nrows; r++) {
        if (csv_at(t, r, col)[0] == '\0') {
            snprintf(err, (size_t)len, "%s: row %d (line %d at the earliest): empty '%s'", t->path,
                     r + 1, r + 2, name_col);
            return false;
        }
    }
    return true;
}

static bool report_dir_load(report_dir *d, const char *dir, char *err, int len) {
    d->dir = dir;
    struct stat st;
    errno = 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, (size_t)len, "%s: not a report directory: %s", dir,
                 errno ? strerror(errno) : "not a directory");
        return false;
    }
    bool any = false;
    for (int i = 0; i < N_TABLES; i++) {
        char path[PATH_MAX];
        if (!report_path(path, sizeof path, dir, table_files[i])) {
            snprintf(err, (size_t)len, "%s: path too long", dir);
            return false;
        }
        d->t[i] = csv_table_read(path, true, err, len);
        if (!d->t[i] && err[0]) return false;
        any |= d->t[i] && i != T_META;
    }
    if (!any) {
        snprintf(err, (size_t)len, "%s: no report CSV (summary.csv, kernels.csv, bench_gemm.csv, "
                 "bench_mla.csv, bench_moe.csv, bench_decode.csv, bench_tp_*.csv)", dir);
        return false;
    }
    // A sealed report (a finished run, a merge) must still be what invar wrote; a shard's or a
    // merge's must be sealed.
    const csv_table *meta = d->t[T_META];
    bool must_be_sealed = meta && (run_meta_get(meta, "shard")[0] ||
                                   run_meta_get(meta, "merged_shards")[0]);
    if (meta && !run_meta_verify(dir, meta, must_be_sealed, err, len)) return false;
    const char *const *summary = summary_header(), *const *kernels = kernels_header();
    return verdict_table_usable(d->t[T_SUMMARY], summary[SUMMARY_CONFIG],
                                summary[SUMMARY_VERDICT], "invar run", err, len) &&
           verdict_table_usable(d->t[T_KERNELS], kernels[KERNELS_OP], kernels[KERNELS_STATUS],
                                "invar kernels", err, len);
}

// ---------------------------------------------------------------------------------------------
// Verdict rows: configs and kernel checks, matched by name
// ---------------------------------------------------------------------------------------------

typedef struct {
    char name[512];
    row_state state;
    char detail[1024];   // first divergence or failure reason
} check;

static int summary_checks(const csv_table *t, check **out) {
    *out = invar_calloc((size_t)t->nrows + 1, sizeof **out, "diff checks");
    for (int r = 0; r < t->nrows; r++) {
        check *c = &(*out)[r];
        const char *cs = summary_get(t, r, SUMMARY_CASE);
        snprintf(c->name, sizeof c->name, "%s%s%s", cs, cs[0] ? ": " : "",
                 summary_get(t, r, SUMMARY_CONFIG));
        c->state = summary_row_state(t, r);
        if (!summary_first_divergence(t, r, c->detail, sizeof c->detail))
            summary_reason(t, r, c->detail, sizeof c->detail);
    }
    return t->nrows;
}

static int kernel_checks(const csv_table *t, check **out) {
    *out = invar_calloc((size_t)t->nrows + 1, sizeof **out, "diff checks");
    for (int r = 0; r < t->nrows; r++) {
        check *c = &(*out)[r];
        kernel_row_name(t, r, c->name, sizeof c->name);
        c->state = kernel_row_state(t, r, c->detail, sizeof c->detail);
    }
    return t->nrows;
}

static const check *find_check(const check *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].name, name) == 0) return &list[i];
    return NULL;
}

static bool failing(row_state s) { return s == ROW_FAIL || s == ROW_ERROR; }

// Markdown table cell text: '|' escaped, newlines as spaces.
static void md(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else fputc(*s == '\n' ? ' ' : *s, f);
    }
}

typedef enum { L_REGRESSION, L_FIXED, L_STILL, L_SKIPPED, L_ADDED, L_VANISHED, N_LISTS } list_kind;
static const char *const list_titles[N_LISTS] = {
    "Regressions: passed or skipped before, fail now", "Fixed: failed before, pass now", "Still failing",
    "Now skipped: passed before, skipped now", "New", "Vanished: in the baseline only",
};

// One list of one kind of check ("configs", "kernel checks"), in Markdown and on the console.
static int write_list(FILE *md_f, FILE *console, list_kind kind, const char *what,
                      const check *base, int nb, const check *now, int nn) {
    int count = 0;
    const check *from = kind == L_VANISHED ? base : now;
    int n = kind == L_VANISHED ? nb : nn;
    for (int i = 0; i < n; i++) {
        const check *c = &from[i];
        const check *other = find_check(kind == L_VANISHED ? now : base,
                                        kind == L_VANISHED ? nn : nb, c->name);
        bool in = false;
        switch (kind) {
        case L_REGRESSION: in = other && !failing(other->state) && failing(c->state); break;
        case L_FIXED: in = other && failing(other->state) && c->state == ROW_PASS; break;
        case L_STILL: in = other && failing(other->state) && failing(c->state); break;
        case L_SKIPPED: in = other && other->state == ROW_PASS && c->state == ROW_SKIP; break;
        case L_ADDED: in = !other; break;
        case L_VANISHED: in = !other; break;
        default: break;
        }
        if (!in) continue;
        if (count++ == 0) {
            fprintf(md_f, "### %s (%s)\n\n| name | before | now | details |\n"
                          "|---|---|---|---|\n", list_titles[kind], what);
            if (console) fprintf(console, "%s (%s):\n", list_titles[kind], what);
        }
        const char *before = kind == L_ADDED ? "–" : row_state_name(kind == L_VANISHED
                                                                        ? c->state
                                                                        : other->state);
        const char *after = kind == L_VANISHED ? "–" : row_state_name(c->state);
        fputs("| `", md_f);
        md(md_f, c->name);
        fprintf(md_f, "` | %s | %s | ", before, after);
        md(md_f, c->state == ROW_PASS ? "" : c->detail);
        fputs(" |\n", md_f);
        if (console) {
            fprintf(console, "  %-5s -> %-5s  %s", before, after, c->name);
            if (c->state != ROW_PASS && c->detail[0] && kind != L_VANISHED)
                fprintf(console, "\n                  %s", c->detail);
            fputc('\n', console);
        }
    }
    if (count) fputs("\n", md_f);
    return count;
}

static void diff_checks(FILE *md_f, FILE *console, const char *what, const check *base, int nb,
                        const check *now, int nn, diff_result *r) {
    int *counts[N_LISTS] = {&r->regressions, &r->fixed, &r->still_failing, &r->now_skipped,
                            &r->added, &r->vanished};
    for (int k = 0; k < N_LISTS; k++)
        *counts[k] += write_list(md_f, console, (list_kind)k, what, base, nb, now, nn);
}

// ---------------------------------------------------------------------------------------------
// Benchmarks: rows matched by their key columns, medians compared
// ---------------------------------------------------------------------------------------------

static const char *const measurement_words[] = {
    "median", "mean", "avg", "average", "min", "max", "p10", "p50", "p90", "p95", "p99", "std",
    "stddev", "sd", "cv", "ms", "us", "ns", "s", "sec", "secs", "seconds", "time", "tflops",
    "gflops", "tflop", "gflop", "flops", "gbs", "gb", "bandwidth", "bw", "throughput", "tps",
    "per", "speedup", "ratio", "pct", "percent", "reps", "iters", "iterations", "warmup", "runs",
    "err", "error", "util", "utilization", "frac", "fraction", "sol", "peak", "samples", NULL,
};
// The GEMM rows' split count and plan describe the code under test: a changed plan is what a
// diff should time against the old one, not a new row.
static const char *const non_key_names[] = {"seed", "date", "host", "commit", "note", "notes",
                                            "splits", "plan", NULL};
// A column with one of these words describes the device, not the code under test (invar bench's
// floor_read_*: a plain read of the same bytes; roofline_*: a decode step's bytes over the
// measured copy bandwidth): neither a key nor compared, so a noisy floor repeated down a run's
// rows never counts as slower rows.
static const char *const device_words[] = {"floor", "roofline", NULL};

// True when one of the words of `name` (split at '_', '-', '/', ' ' and '.'; compared without
// case) is in the NULL-terminated list `words`. Words of 64 characters or more match nothing.
static bool has_word(const char *name, const char *const *words) {
    char word[64];
    for (const char *p = name; *p;) {
        size_t n = strcspn(p, "_-/ .");
        if (n > 0 && n < sizeof word) {
            for (size_t i = 0; i < n; i++) word[i] = (char)tolower((unsigned char)p[i]);
            word[n] = '\0';
            for (const char *const *w = words; *w; w++)
                if (strcmp(word, *w) == 0) return true;
        }
        p += n;
        if (*p) p++;
    }
    return false;
}

bool baseline_diff_is_key_column(const char *name) {
    for (const char *const *n = non_key_names; *n; n++)
        if (strcasecmp(name, *n) == 0) return false;
    return !has_word(name, measurement_words);
}

// A rate (bigger is faster) rather than a time: its name says so.
static bool is_rate(const char *name) {
    static const char *const rates[] = {"tflop", "gflop", "flops", "throughput", "per_s", "tok_s",
                                        "gb_s", "gbs", "tps", NULL};
    for (const char *const *r = rates; *r; r++)
        if (strcasestr(name, *r)) return true;
    return false;
}

// The columns compared: those named "median" when there are any, else the times (a word "us",
// "ms", "ns", "s" or "seconds": a benchmark's time column is its median unless it says otherwise).
static bool is_timing(const char *name, bool has_median) {
    if (has_median) return strcasestr(name, "median") != NULL;
    static const char *const units[] = {"us", "ms", "ns", "s", "seconds", NULL};
    return has_word(name, units);
}

#define MAX_BENCH_COLS 64

typedef struct {
    int key_new[MAX_BENCH_COLS], key_base[MAX_BENCH_COLS], nkey;
    int med_new[MAX_BENCH_COLS], med_base[MAX_BENCH_COLS], nmed;
} bench_match;

static bool same_key(const bench_match *m, const csv_table *b, int rb, const csv_table *n,
                     int rn) {
    for (int k = 0; k < m->nkey; k++)
        if (strcmp(csv_at(b, rb, m->key_base[k]), csv_at(n, rn, m->key_new[k])) != 0) return false;
    return true;
}

static void key_text(const bench_match *m, const csv_table *n, int rn, char *buf, int len) {
    int used = 0;
    buf[0] = '\0';
    for (int k = 0; k < m->nkey && used < len; k++)
        used += snprintf(buf + used, (size_t)(len - used), "%s%s=%s", k ? " " : "",
                         n->header[m->key_new[k]], csv_at(n, rn, m->key_new[k]));
}

static void diff_bench(FILE *md_f, FILE *console, const char *file, const csv_table *base,
                       const csv_table *now, double threshold, diff_result *r) {
    bench_match m = {0};
    bool has_median = false;
    for (int c = 0; c < now->ncols; c++) has_median |= strcasestr(now->header[c], "median") != 0;
    for (int c = 0; c < now->ncols; c++) {
        int cb = csv_col(base, now->header[c]);
        if (cb < 0 || has_word(now->header[c], device_words)) continue;
        if (is_timing(now->header[c], has_median) && m.nmed < MAX_BENCH_COLS) {
            m.med_new[m.nmed] = c;
            m.med_base[m.nmed++] = cb;
        } else if (baseline_diff_is_key_column(now->header[c]) && m.nkey < MAX_BENCH_COLS) {
            m.key_new[m.nkey] = c;
            m.key_base[m.nkey++] = cb;
        }
    }
    if (m.nmed == 0) {
        fprintf(md_f, "%s: no median or time column in both files; not compared.\n\n", file);
        if (console)
            fprintf(console, "%s: no median or time column in both files; not compared\n", file);
        return;
    }
    // The row's own ratio against the reference set (bench_gemm.csv's ratio_inv_over_ref,
    // bench_decode.csv's ratio), shown beside a flagged time: whether the reference moved too.
    int ratio_new = -1, ratio_base = -1;
    for (int c = 0; c < now->ncols && ratio_new < 0; c++) {
        static const char *const ratio_word[] = {"ratio", NULL};
        if (has_word(now->header[c], ratio_word) && csv_col(base, now->header[c]) >= 0) {
            ratio_new = c;
            ratio_base = csv_col(base, now->header[c]);
        }
    }
    bool *matched = invar_calloc((size_t)base->nrows + 1, sizeof *matched, "diff bench rows");
    int slower = 0, faster = 0, unmatched = 0;
    char key[1024];
    for (int pass = 0; pass < 2; pass++) {  // slower rows first, then faster ones
        for (int rn = 0; rn < now->nrows; rn++) {
            int rb = 0;
            while (rb < base->nrows && !same_key(&m, base, rb, now, rn)) rb++;
            if (rb == base->nrows) {
                unmatched += pass == 0;
                continue;
            }
            matched[rb] = true;
            for (int k = 0; k < m.nmed; k++) {
                double vb, vn;
                if (!csv_number(csv_at(base, rb, m.med_base[k]), &vb) ||
                    !csv_number(csv_at(now, rn, m.med_new[k]), &vn) || vb <= 0 || vn <= 0)
                    continue;
                const char *col = now->header[m.med_new[k]];
                // As the change in time: +10% means it takes 10% longer.
                double pct = is_rate(col) ? (vb / vn - 1) * 100 : (vn / vb - 1) * 100;
                if (pass == 0) r->bench_compared++;
                bool is_slower = pct > threshold, is_faster = pct < -threshold;
                if (!(pass == 0 ? is_slower : is_faster)) continue;
                int *count = pass == 0 ? &slower : &faster;
                if ((*count)++ == 0) {
                    fprintf(md_f, "### %s: %s than %.3g%% (median)\n\n"
                                  "| row | median | before | now | change in time | %s |\n"
                                  "|---|---|---:|---:|---:|---:|\n",
                            file, pass == 0 ? "slower" : "faster", threshold,
                            ratio_new < 0 ? "" : now->header[ratio_new]);
                    if (console)
                        fprintf(console, "%s: %s than %.3g%%:\n", file,
                                pass == 0 ? "slower" : "faster", threshold);
                }
                key_text(&m, now, rn, key, sizeof key);
                fputs("| ", md_f);
                md(md_f, key);
                fprintf(md_f, " | %s | %.4g | %.4g | %+.1f%% | ", col, vb, vn, pct);
                char ratio[160] = "";
                if (ratio_new >= 0)
                    snprintf(ratio, sizeof ratio, "%s -> %s", csv_at(base, rb, ratio_base),
                             csv_at(now, rn, ratio_new));
                md(md_f, ratio);
                fputs(" |\n", md_f);
                if (console)
                    fprintf(console, "  %+6.1f%%  %s  %s: %.4g -> %.4g%s%s%s\n", pct, key, col, vb,
                            vn, ratio[0] ? " (" : "", ratio, ratio[0] ? ")" : "");
            }
        }
        if ((pass == 0 ? slower : faster) > 0) fputs("\n", md_f);
    }
    for (int rb = 0; rb < base->nrows; rb++) unmatched += !matched[rb];
    if (unmatched) {
        fprintf(md_f, "%s: %d row%s on one side only (new or vanished shapes), not compared.\n\n",
                file, unmatched, unmatched == 1 ? "" : "s");
        if (console)
            fprintf(console, "%s: %d row%s on one side only, not compared\n", file, unmatched,
                    unmatched == 1 ? "" : "s");
    }
    r->slower += slower;
    r->faster += faster;
    r->bench_unmatched += unmatched;
    free(matched);
}

// ---------------------------------------------------------------------------------------------
// The diff
// ---------------------------------------------------------------------------------------------

static void describe(FILE *f, const char *label, const report_dir *d) {
    fprintf(f, "- %s: `", label);
    md(f, d->dir);
    fputc('`', f);
    const char *commit = run_meta_get(d->t[T_META], "invar_commit");
    const char *date = run_meta_get(d->t[T_META], "date_utc");
    const char *device = run_meta_get(d->t[T_META], "device");
    if (commit[0]) fprintf(f, " · invar `%s`", commit);
    if (date[0]) fprintf(f, " · %s", date);
    if (device[0]) {
        fputs(" · ", f);
        md(f, device);
    }
    fputs("\n", f);
}

// The case each report ran: its summary.csv's case column (first row) and meta.csv's case
// hash. Regressions across two different cases say nothing of a change to invar, so the diff
// says first that the cases differ. False (why "") when both name the same case or one is not
// known.
static bool cases_differ(const report_dir *b, const report_dir *n, char *why, int len) {
    why[0] = '\0';
    const char *bc = b->t[T_SUMMARY] ? summary_get(b->t[T_SUMMARY], 0, SUMMARY_CASE) : "";
    const char *nc = n->t[T_SUMMARY] ? summary_get(n->t[T_SUMMARY], 0, SUMMARY_CASE) : "";
    const char *bh = run_meta_get(b->t[T_META], "case_xxh64");
    const char *nh = run_meta_get(n->t[T_META], "case_xxh64");
    bool hashes = bh[0] && nh[0] && strcmp(bh, "-") != 0 && strcmp(nh, "-") != 0;
    bool names = bc[0] && nc[0];
    if (!(hashes && strcmp(bh, nh) != 0) && !(names && strcmp(bc, nc) != 0)) return false;
    snprintf(why, (size_t)len, "the reports are of different cases: the baseline ran case '%s' "
             "(case_xxh64 %s), the new report case '%s' (case_xxh64 %s); the lists below compare "
             "configs of different cases", bc[0] ? bc : "?", bh[0] ? bh : "-", nc[0] ? nc : "?",
             nh[0] ? nh : "-");
    return true;
}

static void checks_of(const report_dir *b, const report_dir *n, int table, FILE *md_f,
                      FILE *console, diff_result *r) {
    if (!b->t[table] || !n->t[table]) return;
    check *cb, *cn;
    int (*read)(const csv_table *, check **) = table == T_SUMMARY ? summary_checks : kernel_checks;
    int nb = read(b->t[table], &cb), nn = read(n->t[table], &cn);
    diff_checks(md_f, console, table == T_SUMMARY ? "configs" : "kernel checks", cb, nb, cn, nn,
                r);
    free(cb);
    free(cn);
}

int baseline_diff(const char *base_dir, const char *new_dir, double threshold_pct, bool partial,
                  FILE *console, diff_result *out, char *err, int len) {
    return baseline_diff_to(base_dir, new_dir, NULL, threshold_pct, partial, console, out, err,
                            len);
}

int baseline_diff_to(const char *base_dir, const char *new_dir, const char *md_path,
                     double threshold_pct, bool partial, FILE *console, diff_result *out,
                     char *err, int len) {
    diff_result r = {0};
    if (out) *out = r;
    report_dir b = {0}, n = {0};
    if (!report_dir_load(&b, base_dir, err, len) || !report_dir_load(&n, new_dir, err, len)) {
        report_dir_free(&b);
        report_dir_free(&n);
        return 2;
    }
    if (!b.t[T_SUMMARY] != !n.t[T_SUMMARY]) {
        snprintf(err, (size_t)len, "%s/summary.csv: cannot open: No such file or directory "
                 "(the other directory has one)", b.t[T_SUMMARY] ? new_dir : base_dir);
        report_dir_free(&b);
        report_dir_free(&n);
        return 2;
    }

    // The body first (it decides the totals line), then the file around it.
    char *body = NULL;
    size_t body_len = 0;
    FILE *md_f = open_memstream(&body, &body_len);
    if (!md_f) invar_die(INVAR_EXIT_SYSTEM, "diff: open_memstream failed");
    char case_note[1024];
    if (cases_differ(&b, &n, case_note, sizeof case_note)) {
        fprintf(md_f, "⚠ %s.\n\n", case_note);
        if (console) fprintf(console, "warning: %s\n", case_note);
    }
    checks_of(&b, &n, T_SUMMARY, md_f, console, &r);
    checks_of(&b, &n, T_KERNELS, md_f, console, &r);
    for (int t = T_GEMM; t <= T_TP_SIZE; t++) {
        if (b.t[t] && n.t[t]) {
            diff_bench(md_f, console, table_files[t], b.t[t], n.t[t], threshold_pct, &r);
        } else if (b.t[t] || n.t[t]) {
            fprintf(md_f, "%s only in %s: not compared.\n\n", table_files[t],
                    b.t[t] ? "the baseline" : "the new report");
            if (console)
                fprintf(console, "%s only in %s: not compared\n", table_files[t],
                        b.t[t] ? base_dir : new_dir);
        }
    }
    if (fclose(md_f) != 0) invar_die(INVAR_EXIT_SYSTEM, "diff: writing to memory failed");

    // A check that vanished is no longer known to pass: a regression, unless the new report
    // covers only part of the matrix on purpose: --partial, or a shard's report (its meta.csv
    // has a shard row, `invar run --shard I/N`; a merged report has none).
    shard_id shard = {0};
    char why[256];
    const char *shard_text = run_meta_get(n.t[T_META], "shard");
    bool is_shard = shard_text[0] && shard_id_parse(shard_text, &shard, why, sizeof why);
    char partial_note[128] = "";
    if (is_shard)
        snprintf(partial_note, sizeof partial_note, " (the new report is shard %d/%d, meta.csv's "
                 "shard row: not regressions)", shard.index, shard.count);
    else if (partial)
        snprintf(partial_note, sizeof partial_note, " (--partial: not regressions)");
    partial = partial || is_shard;
    int vanished_regressions = partial ? 0 : r.vanished;
    int regressions = r.regressions + r.slower + vanished_regressions;
    char totals[512];
    snprintf(totals, sizeof totals,
             "%d regression%s (%d failing now, %d vanished, %d benchmark median%s slower than "
             "%.3g%%), %d fixed, %d still failing, %d now skipped, %d new, %d vanished%s; "
             "%d benchmark medians compared, %d faster",
             regressions, regressions == 1 ? "" : "s", r.regressions, vanished_regressions,
             r.slower, r.slower == 1 ? "" : "s", threshold_pct, r.fixed, r.still_failing,
             r.now_skipped, r.added, r.vanished, partial_note,
             r.bench_compared, r.faster);
    if (console) {
        fprintf(console, "diff %s -> %s: %s\n", base_dir, new_dir, totals);
        fflush(console);
    }

    char path[PATH_MAX];
    report_file rf;
    bool ok = md_path ? snprintf(path, sizeof path, "%s", md_path) < (int)sizeof path
                      : report_path(path, sizeof path, new_dir, "diff.md");
    if (!ok) snprintf(err, (size_t)len, "%s: path too long", md_path ? md_path : new_dir);
    ok = ok && report_file_open(&rf, path, err, len);
    if (ok) {
        fprintf(rf.f, "# invar: changes since the baseline\n\n");
        describe(rf.f, "baseline", &b);
        describe(rf.f, "new", &n);
        fprintf(rf.f, "\n%s**%s**\n\n", regressions ? "❌ " : "✅ ", totals);
        fwrite(body, 1, body_len, rf.f);
        ok = report_file_commit(&rf, err, len);
    }
    free(body);
    report_dir_free(&b);
    report_dir_free(&n);
    if (out) *out = r;
    if (!ok) return 3;
    return regressions ? 1 : 0;
}
