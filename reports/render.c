// reports/render.c — junit.xml, summary.md and plots of one report directory (reports/render.h).
#include "render.h"

#include <errno.h>         // errno
#include <limits.h>        // PATH_MAX
#include <stdio.h>         // FILE, fprintf, snprintf
#include <string.h>        // strerror
#include <sys/stat.h>      // stat, S_ISDIR

#include "csv_read.h"      // csv_table_read, csv_table_free
#include "junit.h"         // junit_write
#include "markdown.h"      // markdown_write
#include "plots.h"         // plots_render
#include "report_file.h"   // report_path

enum { T_SUMMARY, T_DIVERGENCE, T_KERNELS, T_GEMM, T_MLA, T_META, N_TABLES };
static const char *const table_files[N_TABLES] = {
    "summary.csv", "divergence.csv", "kernels.csv", "bench_gemm.csv", "bench_mla.csv", "meta.csv",
};

static void free_tables(csv_table **t) {
    for (int i = 0; i < N_TABLES; i++) csv_table_free(t[i]);
}

// Which CSVs a render reads. OWN_RUN: summary.csv, divergence.csv and meta.csv only (what
// `invar run` writes), so other CSVs in the directory (an earlier kernels.csv, bench_*.csv) are
// never rendered into the run's junit.xml and summary.md, nor their plots touched. OWN_KERNELS:
// kernels.csv only (what `invar kernels` writes), and no plots.
typedef enum { OWN_ALL, OWN_RUN, OWN_KERNELS } owned;

static bool reads(owned own, int table) {
    if (own == OWN_RUN) return table == T_SUMMARY || table == T_DIVERGENCE || table == T_META;
    if (own == OWN_KERNELS) return table == T_KERNELS;
    return true;
}

static int render(const char *dir, render_what what, owned own, FILE *console, char *err,
                  int len) {
    struct stat st;
    errno = 0;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, (size_t)len, "%s: not a report directory: %s", dir,
                 errno ? strerror(errno) : "not a directory");
        return 2;
    }
    csv_table *t[N_TABLES] = {0};
    bool any = false;
    for (int i = 0; i < N_TABLES; i++) {
        if (!reads(own, i)) continue;
        char path[PATH_MAX];
        if (!report_path(path, sizeof path, dir, table_files[i])) {
            snprintf(err, (size_t)len, "%s: path too long", dir);
            free_tables(t);
            return 2;
        }
        t[i] = csv_table_read(path, true, err, len);
        if (!t[i] && err[0]) {
            free_tables(t);
            return 2;
        }
        any |= t[i] && i != T_META;
    }
    if (!any) {
        snprintf(err, (size_t)len, "%s: no report CSV (summary.csv, divergence.csv, kernels.csv, "
                 "bench_gemm.csv, bench_mla.csv)", dir);
        return 2;
    }

    char path[PATH_MAX], plots_dir[PATH_MAX];
    if (!report_path(plots_dir, sizeof plots_dir, dir, "plots") ||
        !report_path(path, sizeof path, dir, "summary.md")) {
        snprintf(err, (size_t)len, "%s: path too long", dir);
        free_tables(t);
        return 2;
    }
    int drawn = 0;
    plot_inputs in = {t[T_SUMMARY], t[T_DIVERGENCE], t[T_GEMM], t[T_MLA],
                      .bench_foreign = own == OWN_RUN};
    bool ok = own == OWN_KERNELS || plots_render(dir, &in, &drawn, err, len);
    if (ok && console && drawn) fprintf(console, "wrote %d plot%s in %s\n", drawn,
                                        drawn == 1 ? "" : "s", plots_dir);
    if (ok && what == RENDER_ALL && (t[T_SUMMARY] || t[T_KERNELS])) {
        report_path(path, sizeof path, dir, "junit.xml");  // fits: "summary.md" did
        ok = junit_write(path, t[T_SUMMARY], t[T_KERNELS], t[T_META], err, len);
        if (ok && console) fprintf(console, "wrote %s\n", path);
    }
    if (ok && what == RENDER_ALL) {
        report_path(path, sizeof path, dir, "summary.md");
        ok = markdown_write(path, t[T_SUMMARY], t[T_KERNELS], t[T_META], plots_dir, err, len);
        if (ok && console) fprintf(console, "wrote %s\n", path);
    }
    free_tables(t);
    return ok ? 0 : 3;
}

int report_render_dir(const char *dir, render_what what, FILE *console, char *err, int len) {
    return render(dir, what, OWN_ALL, console, err, len);
}

bool report_render_run(const char *dir, char *err, int len) {
    return render(dir, RENDER_ALL, OWN_RUN, NULL, err, len) == 0;
}

bool report_render_kernels(const char *dir, char *err, int len) {
    return render(dir, RENDER_ALL, OWN_KERNELS, NULL, err, len) == 0;
}
