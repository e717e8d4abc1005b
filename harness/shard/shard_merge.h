// harness/shard/shard_merge.h — `invar report merge OUT DIR...`: the reports of the shards of one
// matrix (`invar run --shard I/N`) put back together as the unsharded run would have written
// them: summary.csv and divergence.csv in the matrix's config order (each shard's meta.csv
// lists its configs' positions: shard_configs), meta.csv saying which shards were merged, then
// junit.xml, summary.md and the plots rendered from those as `invar run` renders its own.
//
// Refused (exit 2, naming the directory and the field): a directory that is not a finished
// shard's report (no meta.csv shard row, fewer summary rows than its shard_configs), shards of
// different commits (invar_commit), builds (build_defines), cases (case_xxh64), seeds (seed),
// options (command_line: --model, --attention-backend, --hash-weights), shard counts (shard's
// N) or matrices (matrix_configs), a shard given twice, a missing shard, and configs in two
// shards.
#ifndef INVAR_HARNESS_SHARD_MERGE_H
#define INVAR_HARNESS_SHARD_MERGE_H

#include <stddef.h>  // size_t
#include <stdio.h>   // FILE

typedef struct shard_set shard_set;

// Reads and cross-checks the shard reports dirs[0 .. n); NULL with the reason in err. out_dir
// must not be one of them (the merge would overwrite its inputs).
shard_set *shard_set_load(const char *out_dir, const char *const *dirs, int n, char *err,
                          size_t err_len);

// Writes out_dir's summary.csv, divergence.csv and meta.csv, then renders junit.xml,
// summary.md and the plots. The directory must exist. Returns 0, or 3 with the cause in err.
// console (may be NULL) gets a line of what was merged.
int shard_set_write(const shard_set *s, const char *out_dir, FILE *console, char *err,
                    size_t err_len);

void shard_set_free(shard_set *s);

#endif
