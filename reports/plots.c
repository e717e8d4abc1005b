// reports/plots.c — gnuplot scripts and data from the report CSVs (reports/plots.h).
#include "plots.h"

#include <errno.h>             // errno, EEXIST
#include <fcntl.h>             // open, O_WRONLY, O_CREAT, O_TRUNC
#include <limits.h>            // PATH_MAX
#include <math.h>              // isnan, NAN
#include <stdio.h>             // FILE, fopen, fprintf, popen, snprintf
#include <stdlib.h>            // getenv, qsort, free, strtol
#include <string.h>            // strcmp, strstr, strerror, strchr, strlen
#include <strings.h>           // strcasecmp, strncasecmp
#include <sys/stat.h>          // mkdir, stat
#include <sys/wait.h>          // waitpid, WIFEXITED, WEXITSTATUS
#include <unistd.h>            // access, fork, chdir, dup2, execlp, _exit, unlink

#include "../common/check.h"  // invar_calloc, invar_die
#include "report_schema.h"     // summary_get, divergence_get, SUMMARY_*, DIVERGENCE_*

// ---------------------------------------------------------------------------------------------
// gnuplot itself
// ---------------------------------------------------------------------------------------------

bool plots_gnuplot_available(void) {
    const char *path = getenv("PATH");
    if (!path) return false;
    while (*path) {
        const char *end = strchr(path, ':');
        int n = end ? (int)(end - path) : (int)strlen(path);
        char exe[4096];
        if (snprintf(exe, sizeof exe, "%.*s/gnuplot", n ? n : 1, n ? path : ".") <
                (int)sizeof exe &&
            access(exe, X_OK) == 0)
            return true;
        path += n + (end != NULL);
    }
    return false;
}

// pngcairo draws anti-aliased text and lines; the libgd "png" terminal is the fallback.
static bool has_pngcairo(void) {
    FILE *p = popen("gnuplot -e 'set terminal' 2>&1", "r");
    if (!p) return false;
    char line[512];
    bool found = false;
    while (fgets(line, sizeof line, p))
        if (strstr(line, "pngcairo")) found = true;
    pclose(p);
    return found;
}

// Runs "gnuplot SCRIPT" inside the plots folder (the scripts name their files relative to it),
// its output appended to gnuplot.log there.
static bool run_gnuplot(const char *plots_dir, const char *script, char *err, int len) {
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, (size_t)len, "fork for gnuplot failed: %s", strerror(errno));
        return false;
    }
    if (pid == 0) {
        if (chdir(plots_dir) != 0) _exit(126);
        int fd = open("gnuplot.log", O_WRONLY | O_CREAT | O_APPEND, 0666);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            snprintf(err, (size_t)len, "waitpid for gnuplot failed: %s", strerror(errno));
            return false;
        }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, (size_t)len, "gnuplot %s/%s failed (exit %d): see %s/gnuplot.log",
                 plots_dir, script, WIFEXITED(status) ? WEXITSTATUS(status) : -1, plots_dir);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Writing scripts and data
// ---------------------------------------------------------------------------------------------

typedef struct {
    char dir[PATH_MAX];  // DIR/plots
    bool cairo;
    int drawn;
} plot_ctx;

static FILE *open_in(const plot_ctx *p, const char *name, char *err, int len) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", p->dir, name) >= (int)sizeof path) {
        snprintf(err, (size_t)len, "%s/%s: path too long", p->dir, name);
        return NULL;
    }
    errno = 0;
    FILE *f = fopen(path, "w");
    if (!f) snprintf(err, (size_t)len, "%s: open failed: %s", path, strerror(errno));
    return f;
}

static bool close_in(const plot_ctx *p, FILE *f, const char *name, char *err, int len) {
    errno = 0;
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, (size_t)len, "%s/%s: write failed: %s", p->dir, name, strerror(errno));
    return ok;
}

static void remove_in(const plot_ctx *p, const char *name) {
    char path[PATH_MAX];
    // A name that does not fit names no file to remove.
    if (snprintf(path, sizeof path, "%s/%s", p->dir, name) < (int)sizeof path) unlink(path);
}

// A gnuplot single-quoted string: only ' needs escaping (doubled). A tic label is also a
// printf format, so its % is doubled too.
static void gp_quoted(FILE *f, const char *s, bool tic) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'' || (tic && *s == '%')) fputc(*s, f);
        if (*s == '\t') fputc(' ', f);
        else if (*s != '\n' && *s != '\r') fputc(*s, f);
    }
    fputc('\'', f);
}

static void gp_string(FILE *f, const char *s) { gp_quoted(f, s, false); }

// A quoted data-file field (labels): double quotes replaced, so the field stays one column.
static void dat_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) fputc(*s == '"' ? '\'' : (*s == '\n' ? ' ' : *s), f);
    fputc('"', f);
}

static void terminal(FILE *f, const plot_ctx *p, int width, int height, const char *png) {
    if (p->cairo)
        fprintf(f, "set terminal pngcairo size %d,%d font 'sans,10' noenhanced\n", width, height);
    else
        fprintf(f, "set terminal png size %d,%d noenhanced\n", width, height);
    fprintf(f, "set output '%s'\nset termoption noenhanced\n", png);
}

static bool draw(plot_ctx *p, const char *script, char *err, int len) {
    if (!run_gnuplot(p->dir, script, err, len)) return false;
    p->drawn++;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Invariance matrix: configs x batch sizes
// ---------------------------------------------------------------------------------------------

typedef struct {
    int config, column, request;
} diverged;

static int diverged_cmp(const void *a, const void *b) {
    const diverged *x = a, *y = b;
    if (x->config != y->config) return x->config < y->config ? -1 : 1;
    if (x->column != y->column) return x->column < y->column ? -1 : 1;
    return (x->request > y->request) - (x->request < y->request);
}

static int int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

#define MAX_BS 64

// The union of every row's batch_sizes list ("1,3,8,16"), sorted.
static int batch_size_columns(const csv_table *s, int *bs) {
    int n = 0;
    for (int r = 0; r < s->nrows; r++) {
        const char *p = summary_get(s, r, SUMMARY_BATCH_SIZES);
        while (*p) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            bool seen = false;
            for (int i = 0; i < n; i++) seen |= bs[i] == v;
            if (!seen && n < MAX_BS) bs[n++] = (int)v;
            p = end;
            while (*p == ',' || *p == ' ') p++;
        }
    }
    qsort(bs, (size_t)n, sizeof *bs, int_cmp);
    return n;
}

static int config_index(const csv_table *s, const char *name) {
    int col = summary_col(s, SUMMARY_CONFIG);
    for (int r = 0; r < s->nrows; r++)
        if (strcmp(csv_at(s, r, col), name) == 0) return r;
    return -1;
}

static bool invariance_matrix(plot_ctx *p, const csv_table *s, const csv_table *d, char *err,
                              int len) {
    remove_in(p, "invariance_matrix.png");
    if (!s || s->nrows == 0) return true;
    int bs[MAX_BS];
    int nbs = batch_size_columns(s, bs);
    int ncols = nbs + 1;  // the last column: the largest batch run again
    int nd = 0;
    diverged *dv = invar_calloc((size_t)(d ? d->nrows : 0) + 1, sizeof *dv, "plot divergences");
    for (int r = 0; d && r < d->nrows; r++) {
        int c = config_index(s, divergence_get(d, r, DIVERGENCE_CONFIG));
        const char *b = divergence_get(d, r, DIVERGENCE_BATCH_SIZE);
        int col = -1;
        if (strcmp(b, "repeat") == 0) col = nbs;
        for (int i = 0; i < nbs && col < 0; i++)
            if (atoi(b) == bs[i]) col = i;
        double req;
        if (c < 0 || col < 0 || !csv_number(divergence_get(d, r, DIVERGENCE_REQUEST), &req))
            continue;
        dv[nd++] = (diverged){c, col, (int)req};
    }
    qsort(dv, (size_t)nd, sizeof *dv, diverged_cmp);
    double *frac = invar_calloc((size_t)s->nrows * (size_t)ncols, sizeof *frac, "plot matrix");
    for (int i = 0; i < nd; i++) {
        if (i > 0 && diverged_cmp(&dv[i], &dv[i - 1]) == 0) continue;  // one request once
        double prompts;
        if (!csv_number(summary_get(s, dv[i].config, SUMMARY_PROMPTS), &prompts) || prompts < 1)
            prompts = 1;
        double *cell = &frac[(size_t)dv[i].config * (size_t)ncols + (size_t)dv[i].column];
        *cell += 1.0 / prompts;
        if (*cell > 1) *cell = 1;
    }

    // A config that took another config's run (the same effective settings: merged_into) has no
    // divergence rows of its own; its cells are that run's, as its verdict is.
    for (int r = 0; r < s->nrows; r++) {
        int from = r;
        for (int hop = 0; hop < s->nrows; hop++) {
            const char *into = summary_get(s, from, SUMMARY_MERGED_INTO);
            int next = into[0] ? config_index(s, into) : -1;
            if (next < 0 || next == from) break;
            from = next;
        }
        if (from != r)
            memcpy(&frac[(size_t)r * (size_t)ncols], &frac[(size_t)from * (size_t)ncols],
                   (size_t)ncols * sizeof *frac);
    }

    FILE *f = open_in(p, "invariance_matrix.dat", err, len);
    bool ok = f != NULL;
    size_t longest = 8;
    for (int r = 0; ok && r < s->nrows; r++) {
        bool skipped = strcasecmp(summary_get(s, r, SUMMARY_VERDICT), "SKIP") == 0;
        size_t l = strlen(summary_get(s, r, SUMMARY_CONFIG));
        if (l > longest) longest = l;
        for (int c = 0; c < ncols; c++) {
            double v = frac[(size_t)r * (size_t)ncols + (size_t)c];
            char label[32];
            if (skipped) snprintf(label, sizeof label, "skipped");
            else if (v == 0) snprintf(label, sizeof label, "0");
            else snprintf(label, sizeof label, "%.0f%%", 100 * v);
            if (skipped) fprintf(f, "%d %d NaN ", c, r);
            else fprintf(f, "%d %d %.6f ", c, r, v);
            dat_string(f, label);
            fputc('\n', f);
        }
        fputc('\n', f);
    }
    if (f) ok = close_in(p, f, "invariance_matrix.dat", err, len) && ok;
    if (ok) f = open_in(p, "invariance_matrix.gp", err, len);
    ok = ok && f;
    if (ok) {
        if (longest > 100) longest = 100;
        int left = 60 + 7 * (int)longest, width = left + 110 * ncols + 190;
        int height = 150 + 30 * s->nrows;
        terminal(f, p, width < 640 ? 640 : width, height < 320 ? 320 : height,
                 "invariance_matrix.png");
        fprintf(f, "set title 'Invariance matrix: share of requests whose logprobs differ from "
                   "their bs=1 run'\n"
                   "set xlabel 'batch size (repeat: the largest batch run again)'\n"
                   "unset ylabel\n"
                   "set lmargin at screen %.4f\n"
                   "set rmargin at screen %.4f\n"
                   "set xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\n"
                   "set cbrange [0:1]\nset cblabel 'fraction of requests diverged'\n"
                   "set cbtics ('0' 0, '25%%%%' 0.25, '50%%%%' 0.5, '75%%%%' 0.75, '100%%%%' 1)\n"
                   "set palette defined (0 '#e8f5e9', 0.0001 '#fff3b0', 0.5 '#f28c28', "
                   "1 '#b2182b')\n"
                   "set tics scale 0\nset key off\nset border 0\n",
                (double)left / (width < 640 ? 640 : width),
                1.0 - 170.0 / (width < 640 ? 640 : width), ncols - 1, s->nrows - 1);
        fputs("set xtics (", f);
        for (int c = 0; c < ncols; c++) {
            char name[16];
            if (c < nbs) snprintf(name, sizeof name, "%d", bs[c]);
            else snprintf(name, sizeof name, "repeat");
            fprintf(f, "%s'%s' %d", c ? ", " : "", name, c);
        }
        fputs(")\nset ytics (", f);
        for (int r = 0; r < s->nrows; r++) {
            // A long name keeps its head (device, kernel set) and its tail, "..." between.
            char name[128];
            const char *cfg = summary_get(s, r, SUMMARY_CONFIG);
            size_t l = strlen(cfg);
            if (l > 100) snprintf(name, sizeof name, "%.45s...%s", cfg, cfg + l - 52);
            else snprintf(name, sizeof name, "%s", cfg);
            fprintf(f, "%s", r ? ", " : "");
            gp_quoted(f, name, true);
            fprintf(f, " %d", r);
        }
        fputs(")\n"
              "set object 1 rectangle from graph 0,0 to graph 1,1 behind fillcolor rgb '#dddddd' "
              "fillstyle solid noborder\n"
              "plot 'invariance_matrix.dat' using 1:2:3 with image, \\\n"
              "     '' using 1:2:4 with labels textcolor rgb '#202020'\n", f);
        ok = close_in(p, f, "invariance_matrix.gp", err, len);
    }
    free(frac);
    free(dv);
    return ok && draw(p, "invariance_matrix.gp", err, len);
}

// ---------------------------------------------------------------------------------------------
// Divergence against decode step
// ---------------------------------------------------------------------------------------------

#define MAX_SERIES 24

#define MAX_STEPS 4096

// The row's series: its config's index among names[0 .. n), or n ("other configs").
static int series_of(const csv_table *d, int row, int col, const char *const *names, int n) {
    const char *c = csv_at(d, row, col);
    int k = 0;
    while (k < n && strcmp(names[k], c) != 0) k++;
    return k;
}

// Per config, every differing step as a faint point and the worst one per step as a line.
static bool divergence_by_step(plot_ctx *p, const csv_table *d, char *err, int len) {
    remove_in(p, "divergence_by_step.png");
    if (!d || d->nrows == 0) return true;
    // Configs with a divergence, in order of first appearance; the rest share one series.
    const char *names[MAX_SERIES];
    int n = 0, col = divergence_col(d, DIVERGENCE_CONFIG);
    bool others = false;
    for (int r = 0; r < d->nrows; r++) {
        int k = series_of(d, r, col, names, n);
        if (k == n && n < MAX_SERIES - 1) names[n++] = csv_at(d, r, col);
        else if (k == n) others = true;
    }
    int series = n + others;
    FILE *f = open_in(p, "divergence_by_step.dat", err, len);
    if (!f) return false;
    // Two blocks per series: the points (step nudged per series so series do not hide each
    // other; |Δ logprob|; ULPs), then the per-step maxima. Zeros cannot go on a log axis.
    double *worst = invar_calloc(2 * MAX_STEPS, sizeof *worst, "plot maxima");
    double max_step = 0;
    for (int i = 0; i < series; i++) {
        memset(worst, 0, 2 * MAX_STEPS * sizeof *worst);
        fputs("# ", f);
        gp_string(f, i < n ? names[i] : "other configs");
        fputc('\n', f);
        double nudge = 0.4 * (((double)i + 0.5) / series - 0.5);
        for (int r = 0; r < d->nrows; r++) {
            if (series_of(d, r, col, names, n) != i) continue;
            double step, delta, ulps;
            if (!csv_number(divergence_get(d, r, DIVERGENCE_STEP), &step) || step < 0) continue;
            bool has_delta =
                csv_number(divergence_get(d, r, DIVERGENCE_ABS_DELTA), &delta) && delta > 0;
            bool has_ulps =
                csv_number(divergence_get(d, r, DIVERGENCE_ULPS), &ulps) && ulps > 0;
            if (!has_delta && !has_ulps) continue;
            if (step > max_step) max_step = step;
            fprintf(f, "%.3f ", step + nudge);
            fprintf(f, has_delta ? "%.9g " : "NaN ", delta);
            fprintf(f, has_ulps ? "%.0f\n" : "NaN\n", ulps);
            int s = step < MAX_STEPS ? (int)step : MAX_STEPS - 1;
            if (has_delta && delta > worst[2 * s]) worst[2 * s] = delta;
            if (has_ulps && ulps > worst[2 * s + 1]) worst[2 * s + 1] = ulps;
        }
        fputs("\n\n", f);
        for (int s = 0; s < MAX_STEPS && s <= (int)max_step; s++) {
            if (worst[2 * s] == 0 && worst[2 * s + 1] == 0) continue;
            fprintf(f, "%.3f ", s + nudge);
            fprintf(f, worst[2 * s] > 0 ? "%.9g " : "NaN ", worst[2 * s]);
            fprintf(f, worst[2 * s + 1] > 0 ? "%.0f\n" : "NaN\n", worst[2 * s + 1]);
        }
        fputs("\n\n", f);
    }
    free(worst);
    if (!close_in(p, f, "divergence_by_step.dat", err, len)) return false;
    if (!(f = open_in(p, "divergence_by_step.gp", err, len))) return false;
    // Two panels of 380 px, the legend below the lower one, one line per series.
    int panel = 380, key = 60 + 18 * series, height = 2 * panel + key + 40;
    terminal(f, p, 1100, height, "divergence_by_step.png");
    fprintf(f, "set multiplot title 'Where batched runs diverge from bs=1 (configs that diverged): "
               "every differing step as a point, the worst per step as a line'\n"
               "set xlabel 'decode step'\nset xrange [-0.5:%.1f]\nset grid\nset logscale y\n"
               "set style data points\nset lmargin 12\nset rmargin 4\n",
            max_step + 0.5);
    for (int panel_i = 0; panel_i < 2; panel_i++) {
        double h = (double)panel / height, y0 = (double)(panel + key) / height;
        if (panel_i == 0)
            fprintf(f, "set origin 0,%.4f\nset size 1,%.4f\nunset key\n", y0, h - 20.0 / height);
        else
            fprintf(f, "set origin 0,0\nset size 1,%.4f\nset key below vertical maxrows %d\n",
                    y0, series);
        fprintf(f, "set title '%s'\nset ylabel '%s'\nset format y '%s'\n",
                panel_i == 0 ? "|Δ logprob| between the batched run and bs=1"
                             : "ULP distance between the two logprobs",
                panel_i == 0 ? "|Δ logprob| (log scale)" : "ULPs (log scale)",
                panel_i == 0 ? "%.0e" : "%.0f");
        fputs("plot ", f);
        for (int i = 0; i < series; i++) {
            int column = panel_i == 0 ? 2 : 3;
            fprintf(f, "%s'divergence_by_step.dat' index %d using 1:%d pointtype %d "
                       "pointsize 0.6 linecolor %d notitle, \\\n"
                       "     '' index %d using 1:%d with linespoints linewidth 2 pointtype %d "
                       "pointsize 1.2 linecolor %d title ",
                    i ? ", \\\n     " : "", 2 * i, column, 5 + 2 * (i % 4), i + 1, 2 * i + 1,
                    column, 5 + 2 * (i % 4), i + 1);
            gp_string(f, i < n ? names[i] : "other configs");
        }
        fputs("\n", f);
    }
    fputs("unset multiplot\n", f);
    if (!close_in(p, f, "divergence_by_step.gp", err, len)) return false;
    return draw(p, "divergence_by_step.gp", err, len);
}

// ---------------------------------------------------------------------------------------------
// Benchmarks: throughput against M, one line per kernel set and shape
// ---------------------------------------------------------------------------------------------

// A column whose name contains `part` (case-insensitive), or -1.
static int col_containing(const csv_table *t, const char *part, int after) {
    for (int c = after + 1; c < t->ncols; c++)
        if (strcasestr(t->header[c], part)) return c;
    return -1;
}

static int col_icase(const csv_table *t, const char *name) {
    for (int c = 0; c < t->ncols; c++)
        if (strcasecmp(t->header[c], name) == 0) return c;
    return -1;
}

#define MAX_Y 8
#define MAX_GROUP_COLS 8

typedef struct {
    int x;                    // the M column
    int y[MAX_Y], ny;         // throughput columns (one per series when wide)
    int median, n_col, k_col; // when throughput must be derived: 2*M*N*K / median
    bool derived, per_ms;
    char ylabel[64];
    int set;                  // the kernel-set column, or -1
    int group[MAX_GROUP_COLS], ngroup;  // other key columns that vary
} bench_columns;

static bool is_number_column(const csv_table *t, int c) {
    double v;
    for (int r = 0; r < t->nrows; r++)
        if (csv_at(t, r, c)[0] && !csv_number(csv_at(t, r, c), &v)) return false;
    return true;
}

static bool varies(const csv_table *t, int c) {
    for (int r = 1; r < t->nrows; r++)
        if (strcmp(csv_at(t, r, c), csv_at(t, 0, c)) != 0) return true;
    return false;
}

// "throughput (TFLOP/s)" for a column found by "tflops", and so on.
static void unit_label(const char *rate, char *buf, int len) {
    static const char *const units[][2] = {
        {"tflop", "TFLOP/s"}, {"gflop", "GFLOP/s"}, {"gb", "GB/s"}, {"tok", "tokens/s"},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strncasecmp(rate, units[i][0], strlen(units[i][0])) == 0) {
            snprintf(buf, (size_t)len, "throughput (%s)", units[i][1]);
            return;
        }
    snprintf(buf, (size_t)len, "%s", rate);
}

static bool bench_find_columns(const csv_table *t, const char *const *rates, bench_columns *b) {
    memset(b, 0, sizeof *b);
    static const char *const xs[] = {"M", "tokens", "num_tokens", "batch_size", "batch", "bs",
                                     "context"};
    b->x = -1;
    for (size_t i = 0; i < sizeof xs / sizeof xs[0] && b->x < 0; i++) b->x = col_icase(t, xs[i]);
    if (b->x < 0) return false;
    for (size_t i = 0; rates[i] && b->ny == 0; i++) {
        for (int c = col_containing(t, rates[i], -1); c >= 0 && b->ny < MAX_Y;
             c = col_containing(t, rates[i], c))
            if (is_number_column(t, c)) b->y[b->ny++] = c;
        if (b->ny) unit_label(rates[i], b->ylabel, sizeof b->ylabel);
    }
    if (b->ny == 0) {
        b->median = col_containing(t, "median", -1);
        b->n_col = col_icase(t, "N");
        b->k_col = col_icase(t, "K");
        if (b->median < 0) return false;
        b->derived = b->n_col >= 0 && b->k_col >= 0;
        b->per_ms = strcasestr(t->header[b->median], "ms") != NULL;
        if (b->derived) snprintf(b->ylabel, sizeof b->ylabel, "TFLOP/s (2·M·N·K / median time)");
        else snprintf(b->ylabel, sizeof b->ylabel, "%s", t->header[b->median]);
    }
    static const char *const sets[] = {"set", "kernel_set", "impl", "kernel", "variant"};
    b->set = -1;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0] && b->set < 0; i++)
        b->set = col_icase(t, sets[i]);
    static const char *const groups[] = {"device", "op", "shape", "N", "K", "context", "heads",
                                         "kv_len", "seq_len", "dtype", "d_latent"};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0] && b->ngroup < MAX_GROUP_COLS; i++) {
        int c = col_icase(t, groups[i]);
        if (c >= 0 && c != b->x && varies(t, c)) b->group[b->ngroup++] = c;
    }
    return true;
}

// "SET\tSHAPE": the kernel set ("invariant", or the set named by a wide column such as
// inv_tflops) and the other key columns that vary ("N=4096 K=7168"). The tab lets the plot give
// both sets of one shape the same colour; it prints as a space.
static void series_label(const csv_table *t, const bench_columns *b, int r, int yi, char *buf,
                         int len) {
    int n = snprintf(buf, (size_t)len, "%s", b->set >= 0 ? csv_at(t, r, b->set) : "");
    if (b->ny > 1 && n < len) {
        const char *h = t->header[b->y[yi]];
        const char *set = strncasecmp(h, "inv_", 4) == 0   ? "invariant"
                          : strncasecmp(h, "ref_", 4) == 0 ? "reference"
                                                           : h;
        n += snprintf(buf + n, (size_t)(len - n), "%s%s", n ? " " : "", set);
    }
    if (n < len) n += snprintf(buf + n, (size_t)(len - n), "\t");
    for (int g = 0; g < b->ngroup && n < len; g++)
        n += snprintf(buf + n, (size_t)(len - n), "%s%s=%s", g ? " " : "",
                      t->header[b->group[g]], csv_at(t, r, b->group[g]));
}

static bool bench_value(const csv_table *t, const bench_columns *b, int r, int yi, double *x,
                        double *y) {
    if (!csv_number(csv_at(t, r, b->x), x) || *x <= 0) return false;
    if (b->ny) return csv_number(csv_at(t, r, b->y[yi]), y) && *y > 0;
    double med, n, k;
    if (!csv_number(csv_at(t, r, b->median), &med) || med <= 0) return false;
    if (!b->derived) {
        *y = med;
        return true;
    }
    if (!csv_number(csv_at(t, r, b->n_col), &n) || !csv_number(csv_at(t, r, b->k_col), &k))
        return false;
    double seconds = med * (b->per_ms ? 1e-3 : 1e-6);
    *y = 2.0 * *x * n * k / seconds / 1e12;
    return true;
}

typedef struct {
    double x, y;
} point;

static int point_cmp(const void *a, const void *b) {
    const point *p = a, *q = b;
    return (p->x > q->x) - (p->x < q->x);
}

static bool bench_plot(plot_ctx *p, const csv_table *t, const char *stem, const char *what,
                       const char *const *rates, char *err, int len) {
    char png[64], dat[64], gp[64];
    snprintf(png, sizeof png, "%s.png", stem);
    snprintf(dat, sizeof dat, "%s.dat", stem);
    snprintf(gp, sizeof gp, "%s.gp", stem);
    remove_in(p, png);
    bench_columns b;
    if (!t || t->nrows == 0 || !bench_find_columns(t, rates, &b)) return true;
    int ycols = b.ny ? b.ny : 1;
    // Series: distinct labels, in order of first appearance.
    int max_series = t->nrows * ycols;
    char (*labels)[256] = invar_calloc((size_t)max_series + 1, sizeof *labels, "bench series");
    int *set_of = invar_calloc((size_t)max_series + 1, sizeof *set_of, "bench series");
    int *colour_of = invar_calloc((size_t)max_series + 1, sizeof *colour_of, "bench series");
    int nseries = 0, colours = 0;
    for (int r = 0; r < t->nrows; r++)
        for (int yi = 0; yi < ycols; yi++) {
            char l[256];
            series_label(t, &b, r, yi, l, sizeof l);
            int i = 0;
            while (i < nseries && strcmp(labels[i], l) != 0) i++;
            if (i == nseries) snprintf(labels[nseries++], sizeof labels[0], "%s", l);
        }
    point *pts = invar_calloc((size_t)t->nrows + 1, sizeof *pts, "bench points");
    FILE *f = open_in(p, dat, err, len);
    bool ok = f != NULL;
    for (int s = 0; ok && s < nseries; s++) {
        int n = 0;
        for (int r = 0; r < t->nrows; r++)
            for (int yi = 0; yi < ycols; yi++) {
                char l[256];
                series_label(t, &b, r, yi, l, sizeof l);
                if (strcmp(l, labels[s]) == 0 && bench_value(t, &b, r, yi, &pts[n].x, &pts[n].y))
                    n++;
            }
        qsort(pts, (size_t)n, sizeof *pts, point_cmp);
        fputs("# ", f);
        gp_string(f, labels[s]);
        fputc('\n', f);
        for (int i = 0; i < n; i++) fprintf(f, "%.9g %.9g\n", pts[i].x, pts[i].y);
        fputs("\n\n", f);
        // The reference set dashed, the invariant one solid: same colour per shape.
        set_of[s] = strncasecmp(labels[s], "ref", 3) == 0;
        // One colour per shape (the label after the set name), shared by both sets.
        const char *shape = strchr(labels[s], '\t');
        colour_of[s] = ++colours;
        for (int q = 0; q < s; q++) {
            const char *other = strchr(labels[q], '\t');
            if (shape && other && strcmp(shape, other) == 0) {
                colour_of[s] = colour_of[q];
                colours--;
                break;
            }
        }
    }
    if (f) ok = close_in(p, f, dat, err, len) && ok;
    if (ok) f = open_in(p, gp, err, len);
    ok = ok && f;
    if (ok) {
        terminal(f, p, 1100, 700, png);
        fprintf(f, "set title '%s: invariant vs reference kernels'\n"
                   "set xlabel '%s (log scale)'\nset ylabel '%s (log scale)'\n"
                   "set logscale xy\nset grid xtics ytics mxtics mytics\n"
                   "set autoscale xfix\nset offsets graph 0.03, graph 0.03, 0, 0\n"
                   "set key outside right top vertical\n",
                what, t->header[b.x], b.ylabel);
        fputs("plot ", f);
        for (int s = 0; s < nseries; s++) {
            fprintf(f, "%s'%s' index %d using 1:2 with linespoints linecolor %d dashtype %d "
                       "linewidth 2 pointtype %d title ",
                    s ? ", \\\n     " : "", dat, s, colour_of[s], set_of[s] ? 2 : 1,
                    set_of[s] ? 6 : 7);
            gp_string(f, labels[s]);
        }
        fputs("\n", f);
        ok = close_in(p, f, gp, err, len);
    }
    free(pts);
    free(labels);
    free(set_of);
    free(colour_of);
    return ok && draw(p, gp, err, len);
}

// ---------------------------------------------------------------------------------------------
// All plots
// ---------------------------------------------------------------------------------------------

bool plots_render(const char *dir, const plot_inputs *in, int *drawn, char *err, int len) {
    if (drawn) *drawn = 0;
    if (!plots_gnuplot_available()) {
        printf("gnuplot not found: plots skipped\n");
        fflush(stdout);
        return true;
    }
    plot_ctx p = {.cairo = has_pngcairo()};
    if (snprintf(p.dir, sizeof p.dir, "%s/plots", dir) >= (int)sizeof p.dir) {
        snprintf(err, (size_t)len, "%s/plots: path too long", dir);
        return false;
    }
    errno = 0;
    if (mkdir(p.dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, (size_t)len, "mkdir %s failed: %s", p.dir, strerror(errno));
        return false;
    }
    remove_in(&p, "gnuplot.log");
    // GEMMs are compute bound (TFLOP/s); MLA decode attention is memory bound (GB/s).
    static const char *const gemm_rates[] = {"tflops", "tflop_s", "gflops", "throughput",
                                             "tokens_per_s", "tok_s", "gbs", "gb_s", NULL};
    static const char *const mla_rates[] = {"gbs", "gb_s", "tflops", "tflop_s", "gflops",
                                            "throughput", "tokens_per_s", "tok_s", NULL};
    bool ok = invariance_matrix(&p, in->summary, in->divergence, err, len) &&
              divergence_by_step(&p, in->divergence, err, len) &&
              (in->bench_foreign ||
               (bench_plot(&p, in->bench_gemm, "bench_gemm", "GEMM throughput", gemm_rates, err,
                           len) &&
                bench_plot(&p, in->bench_mla, "bench_mla", "MLA decode attention throughput",
                           mla_rates, err, len)));
    if (drawn) *drawn = p.drawn;
    return ok;
}
