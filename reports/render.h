// reports/render.h — the final reports of a report directory, from its CSVs alone:
// DIR/junit.xml (reports/junit.h), DIR/summary.md (reports/markdown.h) and DIR/plots/
// (reports/plots.h). Reads DIR/summary.csv, divergence.csv, kernels.csv, bench_gemm.csv,
// bench_mla.csv and meta.csv, each optional; at least one of the first five must be there.
#ifndef INVAR_REPORTS_RENDER_H
#define INVAR_REPORTS_RENDER_H

#include <stdbool.h>  // bool
#include <stdio.h>    // FILE

typedef enum {
    RENDER_ALL,    // junit.xml, summary.md and the plots
    RENDER_PLOTS,  // the plots only
} render_what;

// Renders DIR. Returns 0, or 2 (bad input: no such directory, no report CSV, a CSV that does
// not parse) or 3 (a file could not be written, gnuplot failed) with the cause in err.
// console (may be NULL) gets one line per file written.
int report_render_dir(const char *dir, render_what what, FILE *console, char *err, int len);

// For `invar run` at the end of a run: junit.xml, summary.md and the plots from the files the
// run owns (summary.csv, divergence.csv, meta.csv) only; other CSVs in DIR are left alone and
// not rendered. True when done.
bool report_render_run(const char *dir, char *err, int len);

// For `invar kernels`: junit.xml and summary.md from DIR/kernels.csv alone, as `invar run`
// renders its own. True when done.
bool report_render_kernels(const char *dir, char *err, int len);

#endif
