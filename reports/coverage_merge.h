// reports/coverage_merge.h — `invar report coverage`: the coverage.csv files of several `invar
// kernels` runs (one op or one set each, run side by side as `make check` does on a GPU) judged
// as one run: a declared path is covered when some run reached it, excused when the runs that
// did not reach it say this host cannot take it (why_unreachable), and unreached otherwise.
#ifndef INVAR_REPORTS_COVERAGE_MERGE_H
#define INVAR_REPORTS_COVERAGE_MERGE_H

#include <stdbool.h>  // bool
#include <stdio.h>    // FILE

// Reads DIR/coverage.csv of each of dirs[0 .. n) and writes, per set and device, the line
// "PATHS|FAIL <set> <device> coverage: R of D paths reached over N runs" and one line per path
// not reached (unreached, or not reachable here with the reason) to out. Returns 0 when every
// declared path is reached or excused, 1 when some path is unreached, 2 for a missing or
// malformed file (err names it, and the line or column).
int coverage_merge(const char *const *dirs, int n, FILE *out, char *err, int err_len);

// The lines both print (invar kernels for one run, coverage_merge over several): a set's
// "PATHS|FAIL <set> <device> coverage: R of D paths reached<runs> (E not reachable here)<tail>"
// (the count of excused paths only when there are some), and a path not reached: why NULL,
// "unreached: <path>"; else "not reachable here: <path> (<why>)".
void coverage_write_set(FILE *out, bool failed, const char *set, const char *device, int reached,
                        int declared, const char *runs, int excused, const char *tail);
void coverage_write_path(FILE *out, const char *set, const char *device, const char *path,
                         const char *why);

#endif
