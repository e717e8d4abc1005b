// harness/cmd_run.c — `invar run --case FILE [--attention-backend NAME] [--out DIR] [-q]`: runs
// a case file's matrix and writes DIR/summary.csv and DIR/divergence.csv (harness/commands.h).
#include "commands.h"

#include <errno.h>                   // errno, EEXIST
#include <stdbool.h>                 // bool
#include <stdio.h>                   // printf, fprintf, snprintf
#include <stdlib.h>                  // free
#include <string.h>                  // strcmp, strerror, strlen
#include <sys/stat.h>                // mkdir, stat, S_ISDIR

#include "../kernels/check.h"        // invar_die, invar_calloc
#include "../kernels/registry.h"     // cuda_device_describe
#include "../reports/csv_report.h"   // csv_report_open, csv_report_close
#include "../reports/render.h"       // report_render
#include "../reports/run_meta.h"     // run_meta_write
#include "case_file.h"               // case_file_load
#include "matrix.h"                  // matrix_count, matrix_expand
#include "resolve.h"                 // resolve_select_backend, RESOLVE_BACKEND_ENV
#include "runner.h"                  // runner_run

#define DEFAULT_OUT "build/report"

static void usage(FILE *f) {
    fprintf(f,
            "usage: invar run --case FILE [--attention-backend NAME] [--out DIR] [-q]\n"
            "\n"
            "Runs every config of the case file's matrix: each prompt alone (bs=1), then all\n"
            "prompts at each batch size and the largest batch twice, compared bit for bit.\n"
            "\n"
            "  --case FILE               the case (INI; see cases/ci.ini)\n"
            "  --attention-backend NAME  run every config with this backend (or auto); overrides\n"
            "                            the case's attention_backends and %s\n"
            "  --out DIR                 reports: DIR/summary.csv, DIR/divergence.csv\n"
            "                            (default %s)\n"
            "  -q                        print only failing and skipped configs, and the totals\n"
            "\n"
            "exit: 0 every expectation held, 1 one failed, 2 bad input or usage\n",
            RESOLVE_BACKEND_ENV, DEFAULT_OUT);
}

// mkdir -p; exits 3 naming the directory on failure.
static void make_dirs(const char *dir) {
    char path[1024];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        invar_die(INVAR_EXIT_INPUT, "--out: path too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            invar_die(INVAR_EXIT_SYSTEM, "mkdir %s failed: %s", path, strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            invar_die(INVAR_EXIT_SYSTEM, "%s is not a directory", path);
        *p = saved;
        if (saved == '\0') return;
    }
}

static csv_report *open_report(const char *dir, const char *file, const char *const *header,
                               int ncols) {
    char path[1100], err[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    csv_report *r = csv_report_open(path, header, ncols, err, sizeof err);
    if (!r) invar_die(INVAR_EXIT_SYSTEM, "%s", err);
    return r;
}

static void close_report(csv_report *r) {
    char err[1400];
    if (!csv_report_close(r, err, sizeof err)) invar_die(INVAR_EXIT_SYSTEM, "%s", err);
}

// DIR/meta.csv: commit, date, host, device and versions, case file and hash, command line.
static void write_meta(const char *out_dir, const case_file *c, int argc, char **argv) {
    cuda_device_info dev;
    bool cuda = cuda_device_describe(&dev);
    run_meta_input in = {.device = cuda ? dev.name : "cpu",
                         .driver = cuda ? dev.driver : NULL,
                         .cuda_runtime = cuda ? dev.runtime : NULL,
                         .cublas = cuda ? dev.cublas : NULL,
                         .compute_capability = cuda ? dev.compute_capability : NULL,
                         .case_path = c->path, .argc = argc, .argv = argv,
                         .has_seed = true, .seed = c->seed};
    char err[512];
    if (!run_meta_write(out_dir, &in, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "writing %s/meta.csv: %s", out_dir, err);
}

int cmd_run(int argc, char **argv) {
    const char *case_path = NULL, *out_dir = DEFAULT_OUT, *backend = NULL;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "-q") == 0) {
            quiet = true;
        } else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
            case_path = argv[++i];
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out_dir = argv[++i];
        } else if (strcmp(argv[i], "--attention-backend") == 0 && i + 1 < argc) {
            backend = argv[++i];
        } else {
            fprintf(stderr, "invar run: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return INVAR_EXIT_INPUT;
        }
    }
    if (!case_path || out_dir[0] == '\0') {
        fprintf(stderr, "invar run: --case FILE is required\n");
        usage(stderr);
        return INVAR_EXIT_INPUT;
    }

    case_file *c = invar_calloc(1, sizeof *c, "case file");
    char err[1024];
    backend_selection sel;
    if (!case_file_load(case_path, c, err, sizeof err) ||
        !resolve_select_backend(c, backend, &sel, err, sizeof err)) {
        fprintf(stderr, "invar: error: %s\n", err);
        free(c);
        return INVAR_EXIT_INPUT;
    }
    long n = matrix_count(c->axes);
    run_config *configs = invar_calloc((size_t)n, sizeof *configs, "configs");
    matrix_expand(c->axes, configs);

    resolved_config *resolved = runner_resolve(c, configs, (int)n, &sel);
    make_dirs(out_dir);
    write_meta(out_dir, c, argc, argv);
    int ncols;
    const char *const *header = runner_summary_header(&ncols);
    runner_options o = {.console = stdout, .warnings = stderr, .quiet = quiet};
    o.summary = open_report(out_dir, "summary.csv", header, ncols);
    header = runner_divergence_header(&ncols);
    o.divergence = open_report(out_dir, "divergence.csv", header, ncols);

    if (!quiet) {
        const matrix_list *b = &c->axes[matrix_axis_find("attention_backends")];
        printf("case %s (%s): model %s, %d prompts of %d..%d tokens, %d new tokens, %ld configs; "
               "attention backend%s ", c->name, c->path, c->model, case_request_count(c),
               c->min_len, c->max_len, c->max_new_tokens, n, b->n == 1 ? "" : "s");
        for (int i = 0; i < b->n; i++) printf("%s%s", i ? ", " : "", b->value[i]);
        printf(" (from %s)\n", sel.where);
    }
    run_totals t = runner_run(c, configs, resolved, (int)n, &sel, &o);
    close_report(o.summary);
    close_report(o.divergence);
    // JUnit XML, Markdown and plots are rendered from the CSVs, so any old report can be
    // re-rendered with `invar report render DIR`.
    if (!report_render(out_dir, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "rendering the report in %s: %s", out_dir, err);
    if (!quiet)
        printf("reports: %s/{summary.csv,divergence.csv,meta.csv,junit.xml,summary.md}\n", out_dir);
    if (t.merged > 0)
        printf("%d config%s had the effective settings of an earlier one and reused its run\n",
               t.merged, t.merged == 1 ? "" : "s");
    printf("%d passed, %d failed, %d skipped\n", t.passed, t.failed, t.skipped);
    if (fflush(stdout) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "writing stdout failed: %s", strerror(errno));
    free(resolved);
    free(configs);
    free(c);
    return t.failed > 0 ? 1 : 0;
}
