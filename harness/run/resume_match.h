// harness/run/resume_match.h — a resumed run (invar run --resume) takes over the summary rows of
// the configs an interrupted run finished: they are matched to this run's configs here, and
// counted, not run again.
#ifndef INVAR_HARNESS_RESUME_MATCH_H
#define INVAR_HARNESS_RESUME_MATCH_H

#include <stdbool.h>                // bool

#include "../../reports/csv_read.h" // csv_table
#include "case_file.h"              // case_file
#include "matrix.h"                 // run_config
#include "resolve.h"                // resolved_config, backend_selection

// Matches the rows of an interrupted run's summary.csv to configs[0 .. n): done_row[k] gets
// config k's row, or -1 when it has none (it runs again). Only rows [0, usable_rows) count
// (the caller leaves out a last row cut short); of those, a row without a verdict runs again.
// False with the reason in err when the table was not written by this invar (other columns),
// names a config that is not in the matrix or names one twice, or records other requested
// settings than this run would (the case or the command changed).
bool resume_match_done(const case_file *c, const run_config *configs,
                       const resolved_config *resolved, int n, const backend_selection *sel,
                       const csv_table *t, int usable_rows, int *done_row, char *err,
                       int err_len);

// The cells of config k's finished row (done_row from resume_match_done), or NULL when it has
// none or there is no interrupted run (done NULL).
const char *const *resume_done_cells(const csv_table *done, const int *done_row, int k);

#endif
