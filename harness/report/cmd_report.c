// harness/report/cmd_report.c — `invar report render|plot|diff`: the final reports of a report
// directory, redrawn from its CSVs, and the diff against a baseline (harness/commands.h).
#include "../commands.h"

#include <stdbool.h>                    // bool
#include <math.h>                       // INFINITY
#include <stdio.h>                      // printf, fprintf

#include "../../reports/baseline_diff.h" // baseline_diff, BASELINE_DIFF_DEFAULT_THRESHOLD
#include "../../reports/render.h"       // report_render_dir
#include "../cli_args.h"                // cli_parse, cli_dispatch
#include "../host.h"                    // host_make_dirs
#include "../shard/shard_merge.h"       // shard_set_load, shard_set_write
#include "../../reports/shard_id.h"     // SHARD_MAX_COUNT

static int render(const cli_command *cmd, int argc, char **argv, render_what what) {
    int rc = cli_parse(cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char err[2048];
    int code = report_render_dir(*cmd->flags[0].to.string, what, stdout, err, sizeof err);
    if (code != 0) fprintf(stderr, "invar report: error: %s\n", err);
    return code;
}

static const char render_exit[] = "exit: 0 done, 2 bad input or usage, 3 a file could not be "
                                  "written";

static int render_all(int argc, char **argv) {
    const char *dir = NULL;
    const cli_flag flags[] = {{.name = "DIR", .to.string = &dir, .required = true,
                               .help = "a report directory"}, {0}};
    const cli_command cmd = {
        .name = "invar report render",
        .about = "DIR/junit.xml, DIR/summary.md and DIR/plots/*.png from the CSVs in DIR\n"
                 "(summary.csv, divergence.csv, kernels.csv, bench_*.csv, meta.csv).",
        .flags = flags, .epilogue = render_exit};
    return render(&cmd, argc, argv, RENDER_ALL);
}

static int render_plots(int argc, char **argv) {
    const char *dir = NULL;
    const cli_flag flags[] = {{.name = "DIR", .to.string = &dir, .required = true,
                               .help = "a report directory"}, {0}};
    const cli_command cmd = {
        .name = "invar report plot",
        .about = "DIR/plots/*.png only (gnuplot; skipped with a message without it).",
        .flags = flags, .epilogue = render_exit};
    return render(&cmd, argc, argv, RENDER_PLOTS);
}

static int diff(int argc, char **argv) {
    const char *base = NULL, *new_dir = NULL;
    double threshold = BASELINE_DIFF_DEFAULT_THRESHOLD;
    bool partial = false;
    const cli_flag flags[] = {
        {.name = "BASE_DIR", .to.string = &base, .required = true,
         .help = "the baseline report directory"},
        {.name = "NEW_DIR", .to.string = &new_dir, .required = true,
         .help = "the new report directory; diff.md is written here"},
        {.name = "--threshold", .metavar = "PERCENT", .kind = CLI_DOUBLE, .to.real = &threshold,
         .min = 0, .max = INFINITY, .show_default = true,
         .help = "a benchmark median slower by more than PERCENT is a\n"
                 "regression"},
        {.name = "--partial", .kind = CLI_SWITCH, .to.on = &partial,
         .help = "NEW_DIR covers only part of the matrix: a config or check\n"
                 "of BASE_DIR missing from NEW_DIR is no regression"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar report diff",
        .about = "Configs and kernel checks that passed in BASE_DIR and fail in NEW_DIR, fixed,\n"
                 "new and vanished ones, and benchmark medians slower than PERCENT; writes\n"
                 "NEW_DIR/diff.md. A config or check of BASE_DIR missing from NEW_DIR is a\n"
                 "regression, unless --partial or NEW_DIR is one shard's report (its meta.csv\n"
                 "has a shard row: invar run --shard I/N). An unreadable summary.csv or kernels.csv (no\n"
                 "config/op or verdict column, no rows) is exit 2.",
        .flags = flags,
        .epilogue = "exit: 0 no regression, 1 a regression, 2 bad input or usage, 3 a file could\n"
                    "not be written",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char err[2048];
    int code = baseline_diff(base, new_dir, threshold, partial, stdout, NULL, err, sizeof err);
    if (code >= 2) fprintf(stderr, "invar report diff: error: %s\n", err);
    else printf("wrote %s/diff.md\n", new_dir);
    return code;
}

static int merge(int argc, char **argv) {
    const char *out = NULL, *dir_items[SHARD_MAX_COUNT];
    cli_list dirs = {.item = dir_items, .max = SHARD_MAX_COUNT};
    const cli_flag flags[] = {
        {.name = "OUT", .to.string = &out, .required = true,
         .help = "the merged report directory (created; not one of the DIRs)"},
        {.name = "DIR", .kind = CLI_STRINGS, .to.strings = &dirs, .required = true,
         .help = "the report directory of each shard (invar run --shard I/N\n"
                 "--out DIR), every I of the N once, in any order"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar report merge",
        .about = "Merges the reports of the shards of one matrix into OUT: summary.csv and\n"
                 "divergence.csv in the unsharded run's config order, meta.csv naming the\n"
                 "shards (merged_shards), then junit.xml, summary.md and plots as the unsharded\n"
                 "run renders them. Refuses shards of different commits, cases, seeds or\n"
                 "options, a shard given twice or missing, an unfinished shard, and configs in\n"
                 "two shards, naming the directory and the meta.csv field.",
        .flags = flags,
        .epilogue = "exit: 0 merged, 2 bad input or usage, 3 a file could not be written",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char err[4096];
    shard_set *s = shard_set_load(out, dirs.item, dirs.n, err, sizeof err);
    if (!s) {
        fprintf(stderr, "invar report merge: error: %s\n", err);
        return 2;
    }
    host_make_dirs(out);
    int code = shard_set_write(s, out, stdout, err, sizeof err);
    if (code != 0) fprintf(stderr, "invar report merge: error: %s\n", err);
    shard_set_free(s);
    return code;
}

int cmd_report(int argc, char **argv) {
    static const cli_subcommand subs[] = {
        {"render", render_all, "junit.xml, summary.md and plots of a report directory"},
        {"plot", render_plots, "the plots of a report directory only"},
        {"diff", diff, "regressions of a report directory against a baseline"},
        {"merge", merge, "the reports of a matrix's shards merged into one"},
        {0},
    };
    return cli_dispatch("invar report", subs, argc, argv);
}
