// harness/run/runner.h — runs a case's resolved configs (harness/run/resolve.h: resolve_matrix): runs
// every prompt alone (bs=1) as the baseline, then all prompts together at each batch size, then
// the largest batch again; compares every request to its baseline bit for bit, checks prefill
// logprobs against decode logprobs where the backend declares them equal, judges the config
// against the expectation its capabilities give, and reports it. A resumed run (invar run
// --resume) hands in the rows of configs an interrupted run finished (harness/run/resume_match.h):
// those are counted, not run again.
#ifndef INVAR_HARNESS_RUNNER_H
#define INVAR_HARNESS_RUNNER_H

#include <stdbool.h>                  // bool
#include <stdio.h>                    // FILE

#include "../../reports/csv_read.h"   // csv_table
#include "../../reports/csv_report.h" // csv_report
#include "case_file.h"                // case_file
#include "matrix.h"                   // run_config
#include "resolve.h"                  // backend_selection

typedef struct {
    FILE *console;          // one line per config, then the first divergence
    FILE *warnings;         // resolution warnings, once per run (stderr)
    bool quiet;             // print only FAIL and SKIP configs
    bool progress;          // a live line on the console (a terminal): config i of N, elapsed,
                            // ETA, phase; redrawn with \r and cleared before each result line
    csv_report *summary;    // one row per config (report_schema.h: summary_header), or NULL
    csv_report *divergence; // one row per differing request/step (divergence_header), or NULL
    // Resuming: summary rows an interrupted run wrote (summary_header's columns), and for each
    // config k its row in `done` or -1 (resume_match_done). NULL: a fresh run.
    const csv_table *done;
    const int *done_row;
    // `invar run --shard I/N` and `--only GLOB`: in_shard[k] says whether config k is this
    // run's; the others are neither run nor reported. NULL: every config. Resolution still covers the whole
    // matrix, so verdicts (an adversarial control elsewhere in the case) and merged_into read
    // as in the unsharded run.
    const bool *in_shard;
    int request;            // `invar run --request N`: only request N is compared; -1: all
} runner_options;

typedef struct {
    int passed, failed, skipped;
    int merged;             // of those, configs that ran as an earlier one (same settings)
} run_totals;

// Prints the resolution warnings once, then runs the resolved configs, printing and reporting
// each as soon as it finishes. A config that cannot be built exits 2 naming it; a report write
// failure exits 3.
run_totals runner_run(const case_file *c, const run_config *configs,
                      const resolved_config *resolved, int n, const backend_selection *sel,
                      const runner_options *o);

#endif
