// harness/run/summary_row.h — one config's row of summary.csv (reports/report_schema.h's columns),
// from its case, its config, its resolution and its outcome. The runner writes it; a resumed
// run builds it too, to tell whether a finished row still says what this run would ask for.
#ifndef INVAR_HARNESS_SUMMARY_ROW_H
#define INVAR_HARNESS_SUMMARY_ROW_H

#include <stdbool.h>                    // bool
#include <stddef.h>                     // size_t

#include "../../reports/csv_report.h"   // csv_report
#include "../../reports/report_schema.h" // SUMMARY_NCOLS
#include "case_file.h"                  // case_file
#include "compare.h"                    // divergence
#include "matrix.h"                     // run_config
#include "outcome.h"                    // outcome
#include "resolve.h"                    // resolved_config, backend_selection

// The text of one summary row; fields point into it or at strings that outlive it.
typedef struct {
    char seed[32], count[16], requests[16], min_len[16], max_len[16], mnt[16], temp[32],
        topk[16], groups[16], prefix_len[16], warm[16], budget[16], threads[16], tp[16], bs[128],
        budget_eff[16], compared[16], differing[16], req[16], step[16], field[32], bt[16],
        ot[16], blp[32], olp[32], delta[32], ulps[32], queries[32], hits[32], rate[32],
        chunks[32], secs[32];
} summary_text;

// Fills fields[0 .. SUMMARY_NCOLS) for one config; merged_into is the config it ran as, or NULL.
void summary_fields(const case_file *c, const run_config *cfg, const resolved_config *rc,
                    const backend_selection *sel, const outcome *out,
                    const run_config *merged_into, summary_text *t,
                    const char *fields[SUMMARY_NCOLS]);

// Writes one config's row (nothing when rep is NULL). A config merged into one an interrupted
// run finished takes that row's outcome (`outcome_from`: its cells): the columns from expected
// to note but the time, and the threads it ran with. A write failure exits 3.
void summary_row_write(const case_file *c, const run_config *cfg, const resolved_config *rc,
                       const backend_selection *sel, const outcome *out,
                       const run_config *merged_into, const char *const *outcome_from,
                       csv_report *rep);

// Writes one row of divergence.csv: config, batch label, request, and what differed where
// (nothing when rep is NULL); `invar run` and `invar probe` write the same rows.
void divergence_row_write(csv_report *rep, const char *config, const char *batch, int request,
                          const divergence *d);

// Writes one row of any report (nothing when rep is NULL); a write failure exits 3.
void report_row_write(csv_report *rep, const char *const *fields);

// The verdict cell as the literal the runner writes ("PASS", "FAIL", "SKIP"); NULL for
// anything else (a row cut short).
const char *summary_verdict_literal(const char *cell);

// Cell texts the console line shares with the row: "1,3,8"; "on"/"off"; "0.250" or "-".
void format_batch_sizes(const case_file *c, char *buf, size_t len);
const char *setting_on_off(bool on);
void format_hit_rate(long queries, long hits, char *buf, size_t len);

#endif
