// reports/run_meta.h — DIR/meta.csv: what a report was made from, so two reports can always be
// told apart and reproduced. key,value rows:
//   invar_commit, build_defines (the build's NVCC_DEFINES, "-" for none), date_utc, host,
//   device, cpu_model, driver, cuda_runtime, cublas, compute_capability, case_file,
//   case_xxh64, command_line, seed, working_directory (where the run started: relative paths of
//   the command line and the case file are relative to it),
//   then the caller's extra rows (`invar run`: "checkpoint:DIR" per checkpoint directory,
//   harness/model/checkpoint_id.h)
// Written at the start of a run (harness/run/cmd_run.c) and read back by the report writers.
// At the run's end (and a merge's) it is sealed: "xxh64:summary.csv" and "xxh64:divergence.csv"
// rows record the final files' content, so a report edited afterwards is refused by
// `invar report merge` and `invar report diff` instead of rendered as if invar had written it.
#ifndef INVAR_REPORTS_RUN_META_H
#define INVAR_REPORTS_RUN_META_H

#include <stdbool.h>   // bool
#include <stdint.h>    // uint64_t

#include "csv_read.h"  // csv_table

typedef struct {
    // The device, as the caller knows it (the CUDA strings come from the CUDA code, which this
    // file does not link against). NULL or "" is written as "-". device NULL means "cpu"; on
    // "cpu" the CPU model is read from /proc/cpuinfo.
    const char *device;              // "cpu" or the CUDA device name
    const char *driver;              // e.g. "580.65.06"
    const char *cuda_runtime;        // e.g. "13.0"
    const char *cublas;              // e.g. "13.0.0"
    const char *compute_capability;  // e.g. "9.0"
    const char *case_path;           // the case file (hashed with xxHash64); NULL: none
    int argc;                        // the command line, as main() got it
    char *const *argv;
    bool has_seed;
    uint64_t seed;
    int n_extra;                     // rows after the fixed ones
    const char *const *extra_keys;
    const char *const *extra_values;
} run_meta_input;

// Writes DIR/meta.csv (temporary name, then rename). False with the file and cause in err;
// a case file that cannot be read is an error too.
bool run_meta_write(const char *dir, const run_meta_input *in, char *err, int len);

// Records the xxHash64 of DIR/summary.csv and DIR/divergence.csv in DIR/meta.csv (the
// xxh64:FILE rows, replacing earlier ones: a resumed run seals again). False with the file and
// the cause in err.
bool run_meta_seal(const char *dir, char *err, int len);

// What DIR/meta.csv (read as `meta`) says holds: no key twice, and each sealed file's content
// still has its recorded hash. `sealed_required`: a missing xxh64:FILE row is refused too (a
// shard merged must have finished). False with the file, the field and why in err.
bool run_meta_verify(const char *dir, const csv_table *meta, bool sealed_required, char *err,
                     int len);

// The value of `key` in a meta.csv table (read with csv_table_read); "" when absent.
const char *run_meta_get(const csv_table *meta, const char *key);

#endif
