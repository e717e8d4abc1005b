// harness/bench/bench_meta.h — DIR/meta.csv of a bench run: the run report's meta writer
// (reports/run_meta.h) with the device the bench timed, so a bench folder says what it measured
// (date, device, driver and CUDA, commit, command line) and can be filed under results/bench/
// (`invar report bench --add`).
#ifndef INVAR_HARNESS_BENCH_META_H
#define INVAR_HARNESS_BENCH_META_H

#include <stdbool.h>  // bool

// Writes out_dir/meta.csv for a bench on `device` ("cuda" or "cpu"); exits 3 naming the file
// when it cannot be written. Called before the first section with `finished` false and again
// once every CSV is written with true (its "finished" row: no / yes), so a run cut short still
// has a meta.csv and files, marked as cut short.
void bench_meta_write(const char *out_dir, const char *device, int argc, char **argv,
                      bool finished);

#endif
