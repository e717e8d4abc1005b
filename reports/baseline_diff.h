// reports/baseline_diff.h — `invar report diff BASE_DIR NEW_DIR`: what changed since the
// baseline (last night's report directory). Configs (summary.csv) and kernel checks
// (kernels.csv) that passed before and fail now are regressions; fixed, still failing, now
// skipped, new and vanished ones are listed too. Benchmark rows (bench_gemm.csv,
// bench_mla.csv, bench_decode.csv, bench_tp_*.csv) are matched by their key columns (every
// column that is not a measurement: set, op, M, N, K, ...); their medians ("median" columns,
// else the time and rate columns: *_us, *_ms, *_tok_s, ...) are compared, and one more than
// the threshold slower is a regression. Either directory may be a bench folder alone
// (`invar bench --out DIR`, results/bench/).
// Console lines, and NEW_DIR/diff.md (temporary name, then rename).
#ifndef INVAR_REPORTS_BASELINE_DIFF_H
#define INVAR_REPORTS_BASELINE_DIFF_H

#include <stdbool.h>  // bool
#include <stdio.h>    // FILE

#define BASELINE_DIFF_DEFAULT_THRESHOLD 5.0  // percent

typedef struct {
    int regressions;      // checks that passed (or were skipped) before and fail now
    int fixed;            // failed before, pass now
    int still_failing;
    int now_skipped;      // passed before, skipped now: nothing is known about them any more
    int added, vanished;  // configs and checks only in NEW / only in BASE
    int bench_compared;   // benchmark medians compared
    int slower, faster;   // of which slower / faster by more than the threshold
    int bench_unmatched;  // benchmark rows only on one side
} diff_result;

// Compares the two directories. Returns 0 (no regression), 1 (a regression: a check that
// fails now, a check of the baseline missing from the new report unless `partial` (the new
// report covers only part of the matrix) or the new report is a shard's (its meta.csv has a
// shard row: `invar run --shard I/N`), or a benchmark slower than threshold_pct percent),
// 2 (bad input: a directory missing, no report CSV in it, summary.csv on one side only, a CSV
// that does not parse, a summary.csv or kernels.csv without its name or verdict column, with
// no rows or a row without a name) or 3 (diff.md could not be written), with the cause in err
// (naming the file) for 2 and 3. console may be NULL.
int baseline_diff(const char *base_dir, const char *new_dir, double threshold_pct, bool partial,
                  FILE *console, diff_result *out, char *err, int len);

// As baseline_diff, with the Markdown written to md_path (NULL: NEW_DIR/diff.md), so two bench
// folders kept in the repository (results/bench/) are diffed without writing into either.
int baseline_diff_to(const char *base_dir, const char *new_dir, const char *md_path,
                     double threshold_pct, bool partial, FILE *console, diff_result *out,
                     char *err, int len);

// Whether a benchmark column is a key (true) or a measurement (false): a column is a
// measurement when a word of its name (split at '_') is a unit or statistic (median, ms,
// tflops, ...), or it is one of seed, date, host, commit, note. (Columns with the word "floor",
// the bench's reference read, are neither: the diff skips them.)
bool baseline_diff_is_key_column(const char *name);

#endif
