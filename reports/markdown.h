// reports/markdown.h — DIR/summary.md, for a person reading a PR comment or a nightly page: per
// case one table row per config (verdict, config, effective settings with the auto-disabled
// ones struck through and their reason, expected, observed, first divergence, prefix-cache
// hit rate where the CSV has it, time), a totals line, the failures in full, and a per-op
// table of the kernel checks. Columns are read by name; the ones a CSV lacks are left out.
#ifndef INVAR_REPORTS_MARKDOWN_H
#define INVAR_REPORTS_MARKDOWN_H

#include <stdbool.h>   // bool

#include "csv_read.h"  // csv_table

// Writes `path` (temporary name, then rename); any table may be NULL. plots_dir, when not
// NULL, is searched for the PNGs to link (relative links "plots/NAME.png").
bool markdown_write(const char *path, const csv_table *summary, const csv_table *kernels,
                    const csv_table *meta, const char *plots_dir, char *err, int len);

#endif
