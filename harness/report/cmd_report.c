// harness/report/cmd_report.c — `invar report render|plot|diff|merge|bench|coverage`: the final
// reports of a report directory, redrawn from its CSVs, the diff against a baseline, the bench
// results page, and path coverage over several kernel-check runs (harness/commands.h).
#include "../commands.h"

#include <stdbool.h>                    // bool
#include <math.h>                       // INFINITY
#include <stdio.h>                      // printf, fprintf

#include "../../reports/coverage_merge.h" // coverage_merge
#include "../../reports/baseline_diff.h" // baseline_diff_to, BASELINE_DIFF_DEFAULT_THRESHOLD
#include "../../reports/bench_page.h" // bench_page_file, bench_page_write
#include "../../reports/report_file.h" // report_file_open, report_file_commit
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
    const char *base = NULL, *new_dir = NULL, *md_path = NULL;
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
        {.name = "--md", .metavar = "FILE", .to.string = &md_path,
         .help = "write the Markdown to FILE, not NEW_DIR/diff.md (two bench\n"
                 "folders kept in results/bench/ stay as filed)"},
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
                 "config/op or verdict column, no rows) is exit 2. Either directory may be a bench\n"
                 "folder (invar bench --out DIR, results/bench/*): bench_gemm.csv, bench_mla.csv,\n"
                 "bench_moe.csv, bench_decode.csv and bench_tp_*.csv rows matched by shape, their times and\n"
                 "tokens/s compared.",
        .flags = flags,
        .epilogue = "exit: 0 no regression, 1 a regression, 2 bad input or usage, 3 a file could\n"
                    "not be written",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char err[2048];
    int code = baseline_diff_to(base, new_dir, md_path, threshold, partial, stdout, NULL, err,
                                sizeof err);
    if (code >= 2) fprintf(stderr, "invar report diff: error: %s\n", err);
    else if (md_path) printf("wrote %s\n", md_path);
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

static int coverage(int argc, char **argv) {
    const char *dir_items[256];
    cli_list dirs = {.item = dir_items, .max = 256};
    const cli_flag flags[] = {
        {.name = "DIR", .kind = CLI_STRINGS, .to.strings = &dirs, .required = true,
         .help = "the output directory of each invar kernels run (its\n"
                 "coverage.csv), e.g. one per --op"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar report coverage",
        .about = "Path coverage of several invar kernels runs judged as one: a path a\n"
                 "batch-invariant set declares is covered when some run reached it, and\n"
                 "excused when this host cannot take it (another GPU architecture's kernel, a\n"
                 "collective needing more GPUs: coverage.csv's why_unreachable). One line per\n"
                 "set and device, then each path not reached. For runs split by op or set (as\n"
                 "make check splits invar kernels --device cuda), whose own coverage lines are\n"
                 "partial and not judged.",
        .flags = flags,
        .epilogue = "exit: 0 every declared path reached or excused, 1 a path unreached, 2 bad\n"
                    "input or usage (a missing or malformed coverage.csv)",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char err[4400];
    int code = coverage_merge(dirs.item, dirs.n, stdout, err, (int)sizeof err);
    if (code == 2) fprintf(stderr, "invar report coverage: error: %s\n", err);
    return code;
}

static int bench(int argc, char **argv) {
    const char *dir = NULL, *add = NULL, *out = NULL;
    const cli_flag flags[] = {
        {.name = "RESULTS_DIR", .to.string = &dir, .required = true,
         .help = "the folder of filed bench runs (results/bench)"},
        {.name = "--add", .metavar = "RUN_DIR", .to.string = &add,
         .help = "first file the run in RUN_DIR (`invar bench --out RUN_DIR`):\n"
                 "its meta.csv and bench_*.csv copied to\n"
                 "RESULTS_DIR/<date>_<device>_<commit>/"},
        {.name = "--out", .metavar = "FILE", .to.string = &out,
         .help = "write the page to FILE (kernels/cuda/BENCH.md) instead of\n"
                 "standard output"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar report bench",
        .about = "The bench results page from the runs filed in RESULTS_DIR: the newest run's\n"
                 "tables first (GEMM invariant/cuBLAS per cell and geomean, MLA decode share of\n"
                 "copy, end-to-end decode tokens/s, tensor-parallel and op-profile rows), then\n"
                 "one summary line per older run.",
        .flags = flags,
        .epilogue = "exit: 0 done, 2 bad input or usage (a run filed already), 3 a file could\n"
                    "not be written",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char err[2048];
    if (add) {
        char made[4096];
        int code = bench_page_file(add, dir, made, (int)sizeof made, err, (int)sizeof err);
        if (code != 0) {
            fprintf(stderr, "invar report bench: error: %s\n", err);
            return code;
        }
        fprintf(out ? stdout : stderr, "filed %s as %s\n", add, made);
    }
    if (!out) {
        int code = bench_page_write(dir, stdout, err, (int)sizeof err);
        if (code != 0) fprintf(stderr, "invar report bench: error: %s\n", err);
        return code;
    }
    report_file rf;
    if (!report_file_open(&rf, out, err, (int)sizeof err)) {
        fprintf(stderr, "invar report bench: error: %s\n", err);
        return 3;
    }
    int code = bench_page_write(dir, rf.f, err, (int)sizeof err);
    if (code != 0) {
        fclose(rf.f);
        remove(rf.tmp);
        fprintf(stderr, "invar report bench: error: %s\n", err);
        return code;
    }
    if (!report_file_commit(&rf, err, (int)sizeof err)) {
        fprintf(stderr, "invar report bench: error: %s\n", err);
        return 3;
    }
    printf("wrote %s\n", out);
    return 0;
}

int cmd_report(int argc, char **argv) {
    static const cli_subcommand subs[] = {
        {"render", render_all, "junit.xml, summary.md and plots of a report directory"},
        {"plot", render_plots, "the plots of a report directory only"},
        {"diff", diff, "regressions of a report directory against a baseline"},
        {"merge", merge, "the reports of a matrix's shards merged into one"},
        {"bench", bench, "the bench results page from the filed bench runs"},
        {"coverage", coverage, "path coverage of several invar kernels runs as one"},
        {0},
    };
    return cli_dispatch("invar report", subs, argc, argv);
}
