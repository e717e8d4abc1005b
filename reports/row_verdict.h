// reports/row_verdict.h — what a report row means, read the same way by every writer (JUnit,
// Markdown, baseline diff): the verdict of a summary.csv config row or a kernels.csv check row,
// and its first divergence or failure reason as one line of text.
#ifndef INVAR_REPORTS_ROW_VERDICT_H
#define INVAR_REPORTS_ROW_VERDICT_H

#include <stdbool.h>     // bool

#include "csv_read.h"    // csv_table

typedef enum { ROW_PASS, ROW_FAIL, ROW_SKIP, ROW_ERROR } row_state;

const char *row_state_name(row_state s);  // "PASS", "FAIL", "SKIP", "ERROR"

// summary.csv: the verdict column (PASS, FAIL, SKIP; anything else is an ERROR).
row_state summary_row_state(const csv_table *t, int row);

// "request 3 at batch size 8, step 2, logprob differs: token 17 vs 17, logprob -1.25 vs
// -1.2500001, |Δ logprob| = 1.19e-07 (1 ulp)", then the first differing op where the row names
// one ("; first differing op: gemm (N=1024 K=256) in layer 0, ..."). False (buf "") when the row has no divergence.
bool summary_first_divergence(const csv_table *t, int row, char *buf, int len);

// "expected invariant, observed batch-variant" and the note, for a failed or skipped row.
void summary_reason(const csv_table *t, int row, char *buf, int len);

// kernels.csv: a check row. FAIL when the check failed (status FAIL: inaccurate or an output
// not written) or when an op promised to be stable varied; SKIP when the status says SKIP.
// why gets the reason.
row_state kernel_row_state(const csv_table *t, int row, char *why, int len);

// "set/device/op/shape": a kernels.csv row's stable name.
void kernel_row_name(const csv_table *t, int row, char *buf, int len);

// A reference op that must vary (a negative control) holds when it varied at some shape:
// one group per (set, device, op) whose rows expect "must vary".
typedef struct {
    int first_row;    // the group's first row (for its set/device/op)
    int shapes;       // rows in the group
    bool varied;      // some shape varied: the control triggered
} kernel_control;

// Fills out[0 .. max) and returns the number of groups (at most max).
int kernel_controls(const csv_table *t, kernel_control *out, int max);

#endif
