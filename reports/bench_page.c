// reports/bench_page.c — filed bench runs and the page made from them (reports/bench_page.h).
#include "bench_page.h"

#include <ctype.h>             // isalnum, tolower
#include <dirent.h>            // opendir, readdir, closedir
#include <errno.h>             // errno, EEXIST
#include <limits.h>            // PATH_MAX
#include <math.h>              // exp, log
#include <stdbool.h>           // bool
#include <stdint.h>            // uint64_t
#include <stdlib.h>            // free, qsort
#include <string.h>            // strcmp, strlen, strncmp, strerror
#include <sys/stat.h>          // mkdir, stat, S_ISDIR

#include "../common/check.h"   // invar_calloc, invar_realloc
#include "../common/file_hash.h" // invar_file_xxh64
#include "csv_read.h"          // csv_table_read, csv_get, csv_number
#include "report_file.h"       // report_path
#include "run_meta.h"          // run_meta_get

// The bench's files, as harness/bench/ names them.
// The page's sections follow this order.
enum { F_GEMM, F_MLA, F_MOE, F_PEAK, F_DECODE, F_TP_ALL_REDUCE, F_TP_DECODE, F_TP_SIZE, F_DECODE_OPS,
       F_PREFILL_OPS, N_FILES };
static const char *const bench_files[N_FILES] = {
    "bench_gemm.csv", "bench_mla.csv", "bench_moe.csv", "bench_peak.csv", "bench_decode.csv",
    "bench_tp_all_reduce.csv", "bench_tp_decode.csv", "bench_tp_size.csv", "bench_decode_ops.csv",
    "bench_prefill_ops.csv",
};


typedef struct {
    char name[256];
    char path[PATH_MAX];
    csv_table *meta, *t[N_FILES];
} bench_run;

static void run_free(bench_run *r) {
    csv_table_free(r->meta);
    for (int i = 0; i < N_FILES; i++) csv_table_free(r->t[i]);
}

static bool run_load(bench_run *r, const char *dir, const char *name, char *err, int len) {
    snprintf(r->name, sizeof r->name, "%s", name);
    char file[PATH_MAX];
    if (!report_path(r->path, sizeof r->path, dir, name) ||
        !report_path(file, sizeof file, r->path, "meta.csv")) {
        snprintf(err, (size_t)len, "%s/%s: path too long", dir, name);
        return false;
    }
    err[0] = '\0';
    r->meta = csv_table_read(file, true, err, len);
    if (!r->meta) return false;  // err[0] == '\0': not a run folder
    for (int i = 0; i < N_FILES; i++) {
        if (!report_path(file, sizeof file, r->path, bench_files[i])) return false;
        r->t[i] = csv_table_read(file, true, err, len);
        if (!r->t[i] && err[0]) return false;
    }
    return true;
}

// Newest first: meta.csv's date_utc, then the folder's name.
static int newest_first(const void *a, const void *b) {
    const bench_run *x = a, *y = b;
    int c = strcmp(run_meta_get(y->meta, "date_utc"), run_meta_get(x->meta, "date_utc"));
    return c ? c : strcmp(y->name, x->name);
}

// ---------------------------------------------------------------------------------------------
// Filing a run
// ---------------------------------------------------------------------------------------------

static bool copy_file(const char *from, const char *to, char *err, int len) {
    FILE *in = fopen(from, "rb");
    if (!in) {
        snprintf(err, (size_t)len, "%s: cannot open: %s", from, strerror(errno));
        return false;
    }
    FILE *out = fopen(to, "wb");
    if (!out) {
        snprintf(err, (size_t)len, "%s: cannot create: %s", to, strerror(errno));
        fclose(in);
        return false;
    }
    char buf[65536];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    if (fclose(out) != 0) ok = false;
    fclose(in);
    if (!ok) snprintf(err, (size_t)len, "%s: copying %s failed", to, from);
    return ok;
}

// Two files of the same content, by the project's file hash (an unreadable one equals nothing).
static bool same_file(const char *a, const char *b) {
    uint64_t ha, hb;
    char ignored[8];
    return invar_file_xxh64(a, -1, &ha, ignored, (int)sizeof ignored) &&
           invar_file_xxh64(b, -1, &hb, ignored, (int)sizeof ignored) && ha == hb;
}

#define RUNS_A_DAY_MAX 99  // runs filed of one day, device and commit

static bool is_bench_csv(const char *name) {
    size_t n = strlen(name);
    return strncmp(name, "bench_", 6) == 0 && n > 10 && strcmp(name + n - 4, ".csv") == 0;
}

int bench_page_file(const char *run_dir, const char *results_dir, char *made, int made_len,
                    char *err, int len) {
    char path[PATH_MAX];
    if (!report_path(path, sizeof path, run_dir, "meta.csv")) {
        snprintf(err, (size_t)len, "%s: path too long", run_dir);
        return 2;
    }
    csv_table *meta = csv_table_read(path, false, err, len);
    if (!meta) return 2;
    // YYYY-MM-DDThh:mm:ssZ -> YYYY-MM-DD; "NVIDIA H200" -> nvidia-h200; the commit's first 10
    // hex digits, and -dirty when the tree had changes.
    char date[16] = "", slug[64] = "", commit[32] = "";
    snprintf(date, sizeof date, "%.10s", run_meta_get(meta, "date_utc"));
    const char *device = run_meta_get(meta, "device"), *full = run_meta_get(meta, "invar_commit");
    size_t n = 0;
    for (const char *p = device; *p && n + 1 < sizeof slug; p++) {
        if (isalnum((unsigned char)*p)) slug[n++] = (char)tolower((unsigned char)*p);
        else if (n > 0 && slug[n - 1] != '-') slug[n++] = '-';
    }
    while (n > 0 && slug[n - 1] == '-') n--;
    slug[n] = '\0';
    snprintf(commit, sizeof commit, "%.10s%s", full, strstr(full, "-dirty") ? "-dirty" : "");
    bool bad = strlen(date) != 10 || !slug[0] || !commit[0];
    if (bad) snprintf(err, (size_t)len, "%s: no date_utc, device or invar_commit row", path);
    csv_table_free(meta);
    if (bad) return 2;

    char name[128];
    snprintf(name, sizeof name, "%s_%s_%s", date, slug, commit);
    if (!report_path(made, made_len, results_dir, name)) {
        snprintf(err, (size_t)len, "%s/%s: path too long", results_dir, name);
        return 2;
    }
    if (mkdir(results_dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, (size_t)len, "%s: cannot create: %s", results_dir, strerror(errno));
        return 3;
    }
    DIR *d = opendir(run_dir);
    if (!d) {
        snprintf(err, (size_t)len, "%s: cannot open: %s", run_dir, strerror(errno));
        return 2;
    }
    // The CSVs first, so a run without any is refused before a folder exists.
    char names[N_FILES * 4][256];
    int count = 0;
    for (struct dirent *e; (e = readdir(d)) && count < N_FILES * 4;)
        if (is_bench_csv(e->d_name) && strlen(e->d_name) < sizeof names[0])
            snprintf(names[count++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    if (count == 0) {
        snprintf(err, (size_t)len, "%s: no bench_*.csv: not an `invar bench --out` folder", run_dir);
        return 2;
    }
    // Another run of the day, device and commit (another --only section, a rerun) files as
    // NAME-2, NAME-3, ...; the same run (its meta.csv, date to the second and command line,
    // equal to a filed one's) is refused.
    for (int again = 1;; again++) {
        if (again > 1) {
            char next[160];
            snprintf(next, sizeof next, "%s-%d", name, again);
            if (!report_path(made, made_len, results_dir, next)) {
                snprintf(err, (size_t)len, "%s/%s: path too long", results_dir, next);
                return 2;
            }
        }
        if (mkdir(made, 0777) == 0) break;
        if (errno != EEXIST) {
            snprintf(err, (size_t)len, "%s: cannot create: %s", made, strerror(errno));
            return 3;
        }
        char filed_meta[PATH_MAX];
        if (report_path(filed_meta, sizeof filed_meta, made, "meta.csv") && same_file(path, filed_meta)) {
            snprintf(err, (size_t)len, "%s: filed already (this run's meta.csv)", made);
            return 2;
        }
        if (again == RUNS_A_DAY_MAX) {
            snprintf(err, (size_t)len, "%s: %d runs of this day, device and commit filed already", made, again);
            return 2;
        }
    }
    char from[PATH_MAX], to[PATH_MAX];
    for (int i = -1; i < count; i++) {
        const char *file = i < 0 ? "meta.csv" : names[i];
        if (!report_path(from, sizeof from, run_dir, file) ||
            !report_path(to, sizeof to, made, file)) {
            snprintf(err, (size_t)len, "%s/%s: path too long", made, file);
            return 3;
        }
        if (!copy_file(from, to, err, len)) return 3;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The page
// ---------------------------------------------------------------------------------------------

// Markdown table cell text: '|' escaped, newlines as spaces.
static void md(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else fputc(*s == '\n' ? ' ' : *s, f);
    }
}

// The geometric mean of the GEMM rows' cuBLAS-over-invariant ratio; 0 without rows.
static double gemm_geomean(const csv_table *t, int *rows) {
    double log_sum = 0;
    *rows = 0;
    for (int r = 0; t && r < t->nrows; r++) {
        double v;
        if (!csv_number(csv_get(t, r, "ratio_inv_over_ref"), &v) || v <= 0) continue;
        log_sum += log(v);
        (*rows)++;
    }
    return *rows ? exp(log_sum / *rows) : 0;
}

// The rows the bench's summary judges the decode kernel by, as the bench marked them.
static bool mla_memory_bound(const csv_table *t, int r) {
    return strcmp(csv_get(t, r, "memory_bound"), "yes") == 0;
}

// The invariant kernel's lowest share of copy over the memory-bound rows; negative without one.
static double mla_lowest(const csv_table *t) {
    double lowest = -1;
    for (int r = 0; t && r < t->nrows; r++) {
        double v;
        if (mla_memory_bound(t, r) && csv_number(csv_get(t, r, "inv_pct_copy"), &v) &&
            (lowest < 0 || v < lowest))
            lowest = v;
    }
    return lowest;
}

// One run in a line: GEMM geomean, MLA's lowest share, the decode ratios by batch.
static void summary_line(FILE *f, const bench_run *r) {
    int rows;
    const char *sep = "";
    double geo = gemm_geomean(r->t[F_GEMM], &rows);
    if (rows) {
        fprintf(f, "GEMM geomean invariant/cuBLAS %.3f (%d rows)", geo, rows);
        sep = "; ";
    }
    double lowest = mla_lowest(r->t[F_MLA]);
    if (lowest >= 0) {
        fprintf(f, "%sMLA decode lowest share of copy %.1f%%", sep, lowest);
        sep = "; ";
    }
    const csv_table *d = r->t[F_DECODE];
    if (d && d->nrows) {
        // Each ratio named by its row: the model and phase where the file has them (runs from
        // before both had decode rows of one model only).
        fprintf(f, "%send-to-end tokens/s invariant/reference", sep);
        bool named = csv_col(d, "model") >= 0 && csv_col(d, "phase") >= 0;
        for (int i = 0; i < d->nrows; i++) {
            fprintf(f, "%s %s (", i ? "," : "", csv_get(d, i, "ratio"));
            if (named) fprintf(f, "%s %s ", csv_get(d, i, "model"), csv_get(d, i, "phase"));
            fprintf(f, "batch %s)", csv_get(d, i, "batch"));
        }
        sep = "; ";
    }
    if (!sep[0]) fputs("no GEMM, MLA or decode rows", f);
}

// meta.csv's "finished" is no: the run ended early (a time limit, a crash); runs filed before
// the row existed have none and finished.
static bool cut_short(const bench_run *r) { return strcmp(run_meta_get(r->meta, "finished"), "no") == 0; }

static void describe(FILE *f, const bench_run *r) {
    const char *date = run_meta_get(r->meta, "date_utc"), *dev = run_meta_get(r->meta, "device");
    const char *commit = run_meta_get(r->meta, "invar_commit");
    fprintf(f, "%.10s, ", date);
    md(f, dev[0] ? dev : "-");
    fprintf(f, ", invar %.10s%s", commit, strstr(commit, "-dirty") ? "-dirty" : "");
    // An experiment's build (NVCC_DEFINES) times differently from the commit's default build.
    const char *defines = run_meta_get(r->meta, "build_defines");
    if (defines[0] && strcmp(defines, "-") != 0) {
        fputs(" built with ", f);
        md(f, defines);
    }
    if (cut_short(r)) fputs(", cut short", f);
}

// The end-to-end files hold rows of several models, and a run may time one model only (`invar
// bench --model`): a model's rows the newest run lacks come from the newest older run that has
// them. A row_filter keeps the rows of models that none of `newer` (n_newer runs) has.
typedef struct {
    const bench_run *newer;
    int n_newer, file;
} row_filter;

static bool has_rows(const bench_run *r, int file) { return r->t[file] && r->t[file]->nrows > 0; }

static bool keyed_by_model(int file) { return file == F_DECODE || file == F_DECODE_OPS || file == F_PREFILL_OPS; }

static bool has_model(const bench_run *r, int file, const char *model) {
    for (int q = 0; has_rows(r, file) && q < r->t[file]->nrows; q++)
        if (strcmp(csv_get(r->t[file], q, "model"), model) == 0) return true;
    return false;
}

static bool filter_keeps(const row_filter *keep, const csv_table *t, int row) {
    const char *model = csv_get(t, row, "model");
    for (int j = 0; j < keep->n_newer; j++)
        if (has_model(&keep->newer[j], keep->file, model)) return false;
    return true;
}


// A table of the columns of t named in cols (header labels in labels); a column the file lacks
// is left out. mark_row, when not NULL, adds " *" to the first cell of the rows it accepts;
// keep, when not NULL, writes only the rows it keeps.
static void write_table(FILE *f, const csv_table *t, const char *const *cols,
                        const char *const *labels, bool (*mark_row)(const csv_table *, int),
                        const row_filter *keep) {
    int idx[16], n = 0;
    const char *lab[16];
    for (int i = 0; cols[i] && n < 16; i++) {
        int c = csv_col(t, cols[i]);
        if (c < 0) continue;
        idx[n] = c;
        lab[n++] = labels[i];
    }
    if (n == 0) return;
    for (int i = 0; i < n; i++) fprintf(f, "| %s ", lab[i]);
    fputs("|\n", f);
    for (int i = 0; i < n; i++) fputs(i < 1 ? "| --- " : "| ---: ", f);
    fputs("|\n", f);
    for (int r = 0; r < t->nrows; r++) {
        if (keep && !filter_keeps(keep, t, r)) continue;
        for (int i = 0; i < n; i++) {
            fputs("| ", f);
            md(f, csv_at(t, r, idx[i]));
            if (i == 0 && mark_row && mark_row(t, r)) fputs(" *", f);
            fputc(' ', f);
        }
        fputs("|\n", f);
    }
    fputc('\n', f);
}

// GEMM: N x K down, M across, cuBLAS time over the invariant time in each cell.
static void write_gemm(FILE *f, const csv_table *t) {
    int rows;
    double geo = gemm_geomean(t, &rows);
    fprintf(f, "### GEMM: invariant speed over cuBLAS\n\n"
               "cuBLAS time / invariant time per shape (above 1: the invariant GEMM is faster); "
               "geometric mean over the %d rows: **%.3f**. Times, TFLOP/s, split counts and plans: "
               "bench_gemm.csv.\n\n", rows, geo);
    const char *ms[32];
    int nm = 0;
    for (int r = 0; r < t->nrows && nm < 32; r++) {
        const char *m = csv_get(t, r, "M");
        int i = 0;
        while (i < nm && strcmp(ms[i], m) != 0) i++;
        if (i == nm) ms[nm++] = m;
    }
    fputs("| N x K |", f);
    for (int i = 0; i < nm; i++) fprintf(f, " M=%s |", ms[i]);
    fputs("\n| --- |", f);
    for (int i = 0; i < nm; i++) fputs(" ---: |", f);
    fputs("\n", f);
    for (int r = 0; r < t->nrows; r++) {
        const char *N = csv_get(t, r, "N"), *K = csv_get(t, r, "K");
        bool seen = false;
        for (int q = 0; q < r && !seen; q++)
            seen = strcmp(csv_get(t, q, "N"), N) == 0 && strcmp(csv_get(t, q, "K"), K) == 0;
        if (seen) continue;
        fprintf(f, "| %s x %s |", N, K);
        for (int i = 0; i < nm; i++) {
            const char *cell = "–";
            for (int q = r; q < t->nrows; q++)
                if (strcmp(csv_get(t, q, "N"), N) == 0 && strcmp(csv_get(t, q, "K"), K) == 0 &&
                    strcmp(csv_get(t, q, "M"), ms[i]) == 0) {
                    cell = csv_get(t, q, "ratio_inv_over_ref");
                    break;
                }
            fputc(' ', f);
            md(f, cell);
            fputs(" |", f);
        }
        fputs("\n", f);
    }
    fputs("\n", f);
}

// The end-to-end tables' columns (decode and tensor-parallel decode), with their labels.
static const char *const decode_cols[] = {"device", "model", "phase", "T", "batch", "prompt_len",
                                          "new_tokens", "invariant_tok_s", "reference_tok_s",
                                          "ratio", "roofline_step_mb", "roofline_bound",
                                          "roofline_tok_s", "invariant_pct_roofline",
                                          "reference_pct_roofline", NULL};
static const char *const decode_labels[] = {"device", "model", "phase", "ranks", "batch", "prompt",
                                            "new tokens", "invariant tok/s",
                                            "reference tok/s", "ratio", "step MB", "bound",
                                            "roofline tok/s", "invariant % of roofline",
                                            "reference % of roofline", NULL};

// One bench file's table under its heading (keep: NULL, or the rows to write).
static void write_section(FILE *f, int file, const bench_run *r, const row_filter *keep) {
    switch (file) {
    case F_GEMM:
        write_gemm(f, r->t[F_GEMM]);
        break;
    case F_MLA: {
        fprintf(f, "### MLA decode: share of the device-to-device copy bandwidth\n\n"
                   "Bytes moved over time, as a share of the measured copy bandwidth. Rows "
                   "marked * are memory-bound (16 heads, a cache over twice L2): their lowest "
                   "invariant share is **%.1f%%**.\n\n", mla_lowest(r->t[F_MLA]));
        static const char *const cols[] = {"batch", "context", "heads", "inv_pct_copy",
                                           "ref_pct_copy", "inv_us", "ref_us", "inv_tflops",
                                           "floor_read_pct_copy", NULL};
        static const char *const labels[] = {"batch", "context", "heads", "invariant % of copy",
                                             "reference % of copy", "invariant us",
                                             "reference us", "invariant TFLOP/s",
                                             "plain read % of copy", NULL};
        write_table(f, r->t[F_MLA], cols, labels, mla_memory_bound, keep);
        break;
    }
    case F_MOE: {
        fputs("### Routed experts (moe_experts): share of the device-to-device copy bandwidth\n\n"
              "Each touched expert's three matrices read once, and the tokens' rows, over the time, as a "
              "share of the measured copy bandwidth.\n\n", f);
        static const char *const cols[] = {"tokens", "experts_touched", "inv_pct_copy", "ref_pct_copy", "inv_us",
                                           "ref_us", "ratio_inv_over_ref", NULL};
        static const char *const labels[] = {"tokens", "experts touched", "invariant % of copy",
                                             "reference % of copy", "invariant us", "reference us", "ratio", NULL};
        write_table(f, r->t[F_MOE], cols, labels, NULL, keep);
        break;
    }
    case F_DECODE:
        fputs("### End to end: decode and prefill tokens/s\n\n", f);
        if (csv_col(r->t[F_DECODE], "roofline_tok_s") >= 0)
            fputs("The roofline is the fastest a decode step can go on the device: its bytes (every "
                  "weight it reads once, the routed experts its tokens touched, the latent KV cache, "
                  "the fp32 logits) over the copy bandwidth, or its FLOPs over the best cuBLAS "
                  "cell, whichever is slower (harness/bench/step_cost.h).\n\n", f);
        write_table(f, r->t[F_DECODE], decode_cols, decode_labels, NULL, keep);
        break;
    case F_TP_ALL_REDUCE: {
        fputs("### Tensor parallel: all-reduce against NCCL\n\n", f);
        static const char *const cols[] = {"T", "tokens", "elements", "invariant_us", "nccl_us",
                                           "ratio", NULL};
        static const char *const labels[] = {"ranks", "tokens", "elements", "invariant us",
                                             "NCCL us", "ratio", NULL};
        write_table(f, r->t[F_TP_ALL_REDUCE], cols, labels, NULL, keep);
        break;
    }
    case F_TP_DECODE:
        fputs("### Tensor parallel: decode tokens/s\n\n", f);
        write_table(f, r->t[F_TP_DECODE], decode_cols, decode_labels, NULL, keep);
        break;
    case F_TP_SIZE: {
        fputs("### TP-size invariance: decode tokens/s, option on against the rank-order default\n\n", f);
        static const char *const cols[] = {"T", "model", "batch", "new_tokens", "rank_order_tok_s",
                                           "tp_size_tok_s", "ratio", NULL};
        static const char *const labels[] = {"ranks", "model", "batch", "new tokens", "rank order tok/s",
                                             "TP-size tok/s", "ratio", NULL};
        write_table(f, r->t[F_TP_SIZE], cols, labels, NULL, keep);
        break;
    }
    case F_DECODE_OPS: {
        fputs("### One decode step op by op (`--profile`)\n\n", f);
        static const char *const cols[] = {"device", "model", "batch", "op", "calls_per_step",
                                           "invariant_us", "reference_us", NULL};
        static const char *const labels[] = {"device", "model", "batch", "op", "calls a step",
                                             "invariant us", "reference us", NULL};
        write_table(f, r->t[F_DECODE_OPS], cols, labels, NULL, keep);
        break;
    }
    case F_PREFILL_OPS: {
        fputs("### The prefill row's step op by op (`--profile`)\n\n", f);
        static const char *const cols[] = {"device", "model", "prompt_len", "op", "calls",
                                           "invariant_us", "reference_us", NULL};
        static const char *const labels[] = {"device", "model", "prompt", "op", "calls",
                                             "invariant us", "reference us", NULL};
        write_table(f, r->t[F_PREFILL_OPS], cols, labels, NULL, keep);
        break;
    }
    case F_PEAK: {
        fputs("### FLOP ceiling: cuBLAS on large cells (a run without the GEMM grid)\n\n", f);
        static const char *const cols[] = {"N", "K", "M", "ref_us", "ref_tflops", NULL};
        static const char *const labels[] = {"N", "K", "M", "cuBLAS us", "cuBLAS TFLOP/s", NULL};
        write_table(f, r->t[F_PEAK], cols, labels, NULL, keep);
        break;
    }
    }
}

static void write_newest(FILE *f, const char *results_dir, const bench_run *r) {
    fputs("## Newest run: ", f);
    describe(f, r);
    fputs("\n\n", f);
    static const char *const meta_keys[] = {"date_utc", "device", "cpu_model",
                                            "compute_capability", "driver", "cuda_runtime",
                                            "cublas", "collective_library", "gpu_links",
                                            "invar_commit", "build_defines", "host", "command_line",
                                            NULL};
    fprintf(f, "Folder `%s/%s`.\n\n", results_dir, r->name);
    if (cut_short(r))
        fputs("This run was cut short (meta.csv: finished no): the sections it did not reach "
              "come from older runs after its own, and its last section may be partial.\n\n", f);
    fputs("| meta.csv | |\n| --- | --- |\n", f);
    for (int i = 0; meta_keys[i]; i++) {
        const char *v = run_meta_get(r->meta, meta_keys[i]);
        // "-": a field this device has not (a CPU run's driver); the CPU model only for one
        if (!v[0] || strcmp(v, "-") == 0 ||
            (i == 2 && strcmp(run_meta_get(r->meta, "device"), "cpu") != 0))
            continue;
        fprintf(f, "| %s | ", meta_keys[i]);
        md(f, v);
        fputs(" |\n", f);
    }
    fputs("\nSummary: ", f);
    summary_line(f, r);
    fputs(".\n\n", f);
    for (int s = 0; s < N_FILES; s++)
        if (has_rows(r, s)) write_section(f, s, r, NULL);
}

// The sections the newest run lacks (a run cut short, or one with --only), each from the
// newest older run that has it, and in the end-to-end files each model's rows the same way (a
// run with --model): a reader of the page still sees every table's latest numbers, under the
// run they came from.
static void older_heading(FILE *f, bool *heading, const bench_run *r) {
    if (!*heading) {
        fputs("## Sections the newest run lacks, from older runs\n\n", f);
        *heading = true;
    }
    fprintf(f, "From `%s` (", r->name);
    describe(f, r);
}

static void write_older_sections(FILE *f, const bench_run *runs, int n) {
    bool heading = false;
    for (int s = 0; s < N_FILES; s++) {
        if (!keyed_by_model(s)) {
            if (has_rows(&runs[0], s)) continue;
            int i = 1;
            while (i < n && !has_rows(&runs[i], s)) i++;
            if (i == n) continue;
            older_heading(f, &heading, &runs[i]);
            fputs("):\n\n", f);
            write_section(f, s, &runs[i], NULL);
            continue;
        }
        for (int i = 1; i < n; i++) {  // each older run with a model no newer run has
            const row_filter keep = {runs, i, s};
            char models[256] = "";
            for (int q = 0; has_rows(&runs[i], s) && q < runs[i].t[s]->nrows; q++) {
                const char *m = csv_get(runs[i].t[s], q, "model");
                bool listed = false;  // by an earlier row
                for (int p = 0; p < q && !listed; p++) listed = strcmp(csv_get(runs[i].t[s], p, "model"), m) == 0;
                if (listed || !filter_keeps(&keep, runs[i].t[s], q)) continue;
                if (strlen(models) + strlen(m) + 3 < sizeof models)
                    snprintf(models + strlen(models), sizeof models - strlen(models), "%s%s", models[0] ? ", " : "", m);
            }
            if (!models[0]) continue;
            older_heading(f, &heading, &runs[i]);
            fprintf(f, "), model %s:\n\n", models);
            write_section(f, s, &runs[i], &keep);
        }
    }
}

int bench_page_write(const char *results_dir, FILE *f, char *err, int len) {
    DIR *d = opendir(results_dir);
    if (!d) {
        snprintf(err, (size_t)len, "%s: cannot open: %s", results_dir, strerror(errno));
        return 2;
    }
    bench_run *runs = NULL;
    int n = 0, cap = 0, code = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_MAX];
        struct stat st;
        if (!report_path(path, sizeof path, results_dir, e->d_name) || stat(path, &st) != 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            runs = invar_realloc(runs, (size_t)cap * sizeof *runs, "bench runs");
        }
        memset(&runs[n], 0, sizeof runs[n]);
        if (run_load(&runs[n], results_dir, e->d_name, err, len)) {
            n++;
        } else {
            run_free(&runs[n]);
            if (err[0]) {  // a CSV that does not parse; a folder without meta.csv is skipped
                code = 2;
                break;
            }
        }
    }
    closedir(d);
    if (code == 0) {
        qsort(runs, (size_t)n, sizeof *runs, newest_first);
        fprintf(f, "# Bench results\n\n"
                   "Generated by `invar report bench %s` (`make bench-page`) from the bench runs "
                   "filed there; do not edit by hand. A run is filed with `invar bench --out DIR` "
                   "then `invar report bench %s --add DIR`; `invar report diff A B` compares two "
                   "run folders.\n\n", results_dir, results_dir);
        if (n == 0) {
            fputs("No bench results yet: no run folder has been filed.\n", f);
        } else {
            write_newest(f, results_dir, &runs[0]);
            write_older_sections(f, runs, n);
            if (n > 1) fputs("## Older runs\n\n", f);
            for (int i = 1; i < n; i++) {
                fprintf(f, "- `%s`: ", runs[i].name);
                describe(f, &runs[i]);
                fputs(": ", f);
                summary_line(f, &runs[i]);
                fputs("\n", f);
            }
        }
    }
    for (int i = 0; i < n; i++) run_free(&runs[i]);
    free(runs);
    return code;
}
