// reports/bench_page.h — bench results kept as data: each `invar bench --out DIR` run filed as
// results/bench/<YYYY-MM-DD>_<device-slug>_<commit>/ (the bench's own CSVs and its meta.csv,
// unchanged), and the page made from them (kernels/cuda/BENCH.md): the newest run's tables
// first (GEMM speed over cuBLAS per cell and its geometric mean, MLA decode's share of the copy
// bandwidth, end-to-end decode tokens/s, the tensor-parallel and op-profile rows where the run
// has them), then each section the newest run lacks from the newest older run that has it (a
// run cut short or made with --only hides no table), then one summary line per older run.
// `invar report bench` (harness/report/).
#ifndef INVAR_REPORTS_BENCH_PAGE_H
#define INVAR_REPORTS_BENCH_PAGE_H

#include <stdio.h>  // FILE

// Copies run_dir's meta.csv and bench_*.csv into results_dir/<date>_<device-slug>_<commit>/,
// named from the meta.csv's date_utc, device and invar_commit (a "-dirty" commit keeps the
// mark: the run is not exactly the commit's); another run of that day, device and commit goes
// to the same name with -2, -3, ... The folder's path goes to made. Returns 0, 2 (no meta.csv or
// no bench CSV in run_dir, or this run filed already: an equal meta.csv) or 3 (a copy failed),
// with the cause in err.
int bench_page_file(const char *run_dir, const char *results_dir, char *made, int made_len,
                    char *err, int len);

// Writes the page for the run folders in results_dir (each a folder with a meta.csv; the
// newest by meta.csv's date_utc, then by name) to f. No run folder gives a page that says so.
// Returns 0, or 2 (results_dir unreadable, a CSV that does not parse) with the cause in err.
int bench_page_write(const char *results_dir, FILE *f, char *err, int len);

#endif
