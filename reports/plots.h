// reports/plots.h — gnuplot plots of a report directory, drawn from its CSVs alone, so any old
// report can be redrawn. Scripts, data and PNGs go to DIR/plots/:
//   invariance_matrix   configs x batch sizes (and the repeated batch), coloured by the fraction
//                       of requests that diverged from bs=1 (summary.csv + divergence.csv)
//   divergence_by_step  for every config that diverged (a failure, or a negative control that
//                       caught variance): |Δ logprob| and ULP distance against decode step, log y
//   bench_gemm, bench_mla  invariant vs reference throughput against M (bench_*.csv)
// A plot whose data is absent is not drawn (and an old PNG of it is removed). gnuplot is
// optional: without it on PATH, one line "gnuplot not found: plots skipped" and success.
#ifndef INVAR_REPORTS_PLOTS_H
#define INVAR_REPORTS_PLOTS_H

#include <stdbool.h>   // bool

#include "csv_read.h"  // csv_table

typedef struct {
    const csv_table *summary, *divergence, *bench_gemm, *bench_mla;  // any may be NULL
    bool bench_foreign;  // the bench plots belong to another command: neither drawn nor removed
} plot_inputs;

// Draws the plots into DIR/plots. False with the cause in err when a file cannot be written
// or gnuplot fails (its messages are in DIR/plots/gnuplot.log). *drawn (may be NULL) gets the
// number of PNGs drawn.
bool plots_render(const char *dir, const plot_inputs *in, int *drawn, char *err, int len);

// Whether gnuplot is an executable on PATH.
bool plots_gnuplot_available(void);

#endif
