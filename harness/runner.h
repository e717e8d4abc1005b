// harness/runner.h — runs a case's configs: resolves each one (harness/resolve.h), then runs
// every prompt alone (bs=1) as the baseline, then all prompts together at each batch size, then
// the largest batch again; compares every request to its baseline bit for bit, checks prefill
// logprobs against decode logprobs where the backend declares them equal, judges the config
// against the expectation its capabilities give, and reports it.
#ifndef INVAR_HARNESS_RUNNER_H
#define INVAR_HARNESS_RUNNER_H

#include <stdbool.h>                  // bool
#include <stdio.h>                    // FILE

#include "../reports/csv_report.h"    // csv_report
#include "case_file.h"                // case_file
#include "matrix.h"                   // run_config
#include "resolve.h"                  // backend_selection

typedef struct {
    FILE *console;          // one line per config, then the first divergence
    FILE *warnings;         // resolution warnings, once per run (stderr)
    bool quiet;             // print only FAIL and SKIP configs
    csv_report *summary;    // one row per config (runner_summary_header), or NULL
    csv_report *divergence; // one row per differing request/step (runner_divergence_header)
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

// Column names of the two reports.
const char *const *runner_summary_header(int *ncols);
const char *const *runner_divergence_header(int *ncols);

#endif
