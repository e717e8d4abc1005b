// harness/cmd_report.c — `invar report render|plot|diff`: the final reports of a report
// directory, redrawn from its CSVs, and the diff against a baseline (harness/commands.h).
#include "commands.h"

#include <stdbool.h>                    // bool
#include <stdio.h>                      // printf, fprintf
#include <stdlib.h>                     // strtod
#include <string.h>                     // strcmp

#include "../common/check.h"           // INVAR_EXIT_INPUT
#include "../reports/baseline_diff.h"   // baseline_diff, BASELINE_DIFF_DEFAULT_THRESHOLD
#include "../reports/render.h"          // report_render_dir
#include "cli_args.h"                   // cli_take_once

static void usage(FILE *f) {
    fprintf(f,
            "usage: invar report render DIR\n"
            "       invar report plot DIR\n"
            "       invar report diff BASE_DIR NEW_DIR [--threshold PERCENT] [--partial]\n"
            "\n"
            "  render  DIR/junit.xml, DIR/summary.md and DIR/plots/*.png from the CSVs in DIR\n"
            "          (summary.csv, divergence.csv, kernels.csv, bench_*.csv, meta.csv)\n"
            "  plot    DIR/plots/*.png only (gnuplot; skipped with a message without it)\n"
            "  diff    configs and kernel checks that passed in BASE_DIR and fail in NEW_DIR,\n"
            "          fixed, new and vanished ones, and benchmark medians slower than\n"
            "          PERCENT (default %.0f); writes NEW_DIR/diff.md. A config or check of\n"
            "          BASE_DIR missing from NEW_DIR is a regression, unless --partial says\n"
            "          NEW_DIR covers only part of the matrix. An unreadable summary.csv or\n"
            "          kernels.csv (no config/op or verdict column, no rows) is exit 2\n"
            "\n"
            "exit: 0 done (diff: no regression), 1 diff found a regression, 2 bad input or\n"
            "usage, 3 a file could not be written\n",
            BASELINE_DIFF_DEFAULT_THRESHOLD);
}

static int render(const char *dir, render_what what) {
    char err[2048];
    int code = report_render_dir(dir, what, stdout, err, sizeof err);
    if (code != 0) fprintf(stderr, "invar report: error: %s\n", err);
    return code;
}

static int diff(int argc, char **argv) {
    const char *dirs[2] = {NULL, NULL};
    int ndirs = 0;
    double threshold = BASELINE_DIFF_DEFAULT_THRESHOLD;
    const char *threshold_text = NULL;
    bool partial = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--partial") == 0) {
            partial = true;
        } else if (strcmp(argv[i], "--threshold") == 0 && i + 1 < argc) {
            if (!cli_take_once("invar report diff", "--threshold", &threshold_text, argv[i + 1]))
                return INVAR_EXIT_INPUT;
            char *end;
            threshold = strtod(argv[++i], &end);
            if (end == argv[i] || *end != '\0' || !(threshold >= 0)) {
                fprintf(stderr, "invar report diff: --threshold: not a percentage >= 0: '%s'\n",
                        argv[i]);
                return INVAR_EXIT_INPUT;
            }
        } else if (argv[i][0] == '\0') {
            fprintf(stderr, "invar report diff: an empty directory name\n");
            return INVAR_EXIT_INPUT;
        } else if (argv[i][0] != '-' && ndirs < 2) {
            dirs[ndirs++] = argv[i];
        } else {
            fprintf(stderr, "invar report diff: unknown or incomplete argument '%s'\n", argv[i]);
            usage(stderr);
            return INVAR_EXIT_INPUT;
        }
    }
    if (ndirs != 2) {
        fprintf(stderr, "invar report diff: BASE_DIR and NEW_DIR are required\n");
        usage(stderr);
        return INVAR_EXIT_INPUT;
    }
    char err[2048];
    int code = baseline_diff(dirs[0], dirs[1], threshold, partial, stdout, NULL, err, sizeof err);
    if (code >= 2) fprintf(stderr, "invar report diff: error: %s\n", err);
    else printf("wrote %s/diff.md\n", dirs[1]);
    return code;
}

int cmd_report(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return INVAR_EXIT_INPUT;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(sub, "diff") == 0) return diff(argc - 2, argv + 2);
    bool is_render = strcmp(sub, "render") == 0, is_plot = strcmp(sub, "plot") == 0;
    if ((is_render || is_plot) && argc == 3 && argv[2][0] != '-')
        return render(argv[2], is_render ? RENDER_ALL : RENDER_PLOTS);
    if ((is_render || is_plot) && argc == 3) {
        usage(strcmp(argv[2], "--help") == 0 ? stdout : stderr);
        return strcmp(argv[2], "--help") == 0 ? 0 : INVAR_EXIT_INPUT;
    }
    fprintf(stderr, "invar report: unknown or incomplete command '%s'\n", sub);
    usage(stderr);
    return INVAR_EXIT_INPUT;
}
