// harness/runner.h — runs a case's configs: resolves each one (harness/resolve.h), then runs
// every prompt alone (bs=1) as the baseline, then all prompts together at each batch size, then
// the largest batch again; compares every request to its baseline bit for bit, checks prefill
// logprobs against decode logprobs where the backend declares them equal, judges the config
// against the expectation its capabilities give, and reports it. A resumed run (invar run
// --resume) hands in the rows of configs an interrupted run finished: those are counted, not
// run again.
#ifndef INVAR_HARNESS_RUNNER_H
#define INVAR_HARNESS_RUNNER_H

#include <stdbool.h>                  // bool
#include <stdio.h>                    // FILE

#include "../reports/csv_read.h"      // csv_table
#include "../reports/csv_report.h"    // csv_report
#include "case_file.h"                // case_file
#include "matrix.h"                   // run_config
#include "resolve.h"                  // backend_selection

typedef struct {
    FILE *console;          // one line per config, then the first divergence
    FILE *warnings;         // resolution warnings, once per run (stderr)
    bool quiet;             // print only FAIL and SKIP configs
    bool progress;          // a live line on the console (a terminal): config i of N, elapsed,
                            // ETA, phase; redrawn with \r and cleared before each result line
    csv_report *summary;    // one row per config (runner_summary_header), or NULL
    csv_report *divergence; // one row per differing request/step (runner_divergence_header)
    // Resuming: summary rows an interrupted run wrote (runner_summary_header's columns), and
    // for each config k its row in `done` or -1 (runner_match_done). NULL: a fresh run.
    const csv_table *done;
    const int *done_row;
} runner_options;

typedef struct {
    int passed, failed, skipped;
    int merged;             // of those, configs that ran as an earlier one (same settings)
} run_totals;

// Resolves configs[0 .. n) (harness/resolve.h) before anything runs: devices, kernel set
// modes, backends, effective settings, merges. Returns n resolved configs (free them). A
// refused explicit backend selection exits 2 naming where it came from.
resolved_config *runner_resolve(const case_file *c, const run_config *configs, int n,
                                const backend_selection *sel);

// Prints the resolution warnings once, then runs the resolved configs, printing and reporting
// each as soon as it finishes. A config that cannot be built exits 2 naming it; a report write
// failure exits 3.
run_totals runner_run(const case_file *c, const run_config *configs,
                      const resolved_config *resolved, int n, const backend_selection *sel,
                      const runner_options *o);

// Matches the rows of an interrupted run's summary.csv to configs[0 .. n): done_row[k] gets
// config k's row, or -1 when it has none (it runs again). Only rows [0, usable_rows) count
// (the caller leaves out a last row cut short); of those, a row without a verdict runs again. False with the reason in err when the table was not written by this
// invar (other columns), names a config that is not in the matrix or names one twice, or
// records other requested settings than this run would (the case or the command changed).
bool runner_match_done(const case_file *c, const run_config *configs,
                       const resolved_config *resolved, int n, const backend_selection *sel,
                       const csv_table *t, int usable_rows, int *done_row, char *err,
                       int err_len);

// Column names of the two reports.
const char *const *runner_summary_header(int *ncols);
const char *const *runner_divergence_header(int *ncols);

#endif
