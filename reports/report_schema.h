// reports/report_schema.h — the columns of the CSV reports, named once: summary.csv (a row per
// config of `invar run`), divergence.csv (a row per differing request and step) and kernels.csv
// (a row per checked shape of `invar kernels`). Writers build their header and rows by these
// indices; readers look a column up by its name here, so renaming a column is one edit of
// report_schema.c. Readers still find columns by name in the file, not by position, so a
// report written by another invar (other or fewer columns) still renders.
#ifndef INVAR_REPORTS_REPORT_SCHEMA_H
#define INVAR_REPORTS_REPORT_SCHEMA_H

#include "csv_read.h"  // csv_table

// summary.csv: the requested settings, then what resolution made of them, then the outcome.
typedef enum {
    SUMMARY_CASE, SUMMARY_CONFIG, SUMMARY_DEVICE, SUMMARY_KERNEL_SET, SUMMARY_BATCH_INVARIANT,
    SUMMARY_MODEL, SUMMARY_SEED, SUMMARY_PROMPTS, SUMMARY_REQUESTS, SUMMARY_MIN_LEN,
    SUMMARY_MAX_LEN, SUMMARY_MAX_NEW_TOKENS, SUMMARY_TEMPERATURE, SUMMARY_TOP_K,
    SUMMARY_SHARED_PREFIX_GROUPS, SUMMARY_SHARED_PREFIX_LEN, SUMMARY_WARM_CACHE_REPEATS,
    SUMMARY_ARRIVALS, SUMMARY_MAX_NUM_BATCHED_TOKENS, SUMMARY_CHUNKED_PREFILL,
    SUMMARY_PREFIX_CACHING, SUMMARY_FORCE_PREFIX_CACHING, SUMMARY_THREADS,
    SUMMARY_TENSOR_PARALLEL, SUMMARY_BATCH_SIZES,
    // resolution
    SUMMARY_ATTENTION_BACKEND, SUMMARY_BACKEND_SELECTED_BY, SUMMARY_PREFIX_CACHING_EFFECTIVE,
    SUMMARY_CHUNKED_PREFILL_EFFECTIVE, SUMMARY_MAX_NUM_BATCHED_TOKENS_EFFECTIVE,
    SUMMARY_RESOLUTION, SUMMARY_MERGED_INTO,
    // outcome
    SUMMARY_EXPECTED, SUMMARY_OBSERVED, SUMMARY_VERDICT, SUMMARY_REQUESTS_COMPARED,
    SUMMARY_DIFFERING_REQUESTS, SUMMARY_FIRST_BATCH_SIZE, SUMMARY_FIRST_REQUEST,
    SUMMARY_FIRST_STEP, SUMMARY_FIRST_FIELD, SUMMARY_FIRST_BASE_TOKEN, SUMMARY_FIRST_BATCH_TOKEN,
    SUMMARY_FIRST_BASE_LOGPROB, SUMMARY_FIRST_BATCH_LOGPROB, SUMMARY_FIRST_ABS_DELTA,
    SUMMARY_FIRST_ULPS, SUMMARY_FIRST_OP, SUMMARY_PREFILL_VS_DECODE, SUMMARY_PREFIX_QUERIES, SUMMARY_PREFIX_HITS,
    SUMMARY_PREFIX_HIT_RATE, SUMMARY_PREFILL_CHUNKS, SUMMARY_SECONDS, SUMMARY_NOTE,
    SUMMARY_NCOLS
} summary_column;

typedef enum {
    DIVERGENCE_CONFIG, DIVERGENCE_BATCH_SIZE, DIVERGENCE_REQUEST, DIVERGENCE_STEP,
    DIVERGENCE_FIELD, DIVERGENCE_BASE_TOKEN, DIVERGENCE_BATCH_TOKEN, DIVERGENCE_BASE_LOGPROB,
    DIVERGENCE_BATCH_LOGPROB, DIVERGENCE_ABS_DELTA, DIVERGENCE_ULPS,
    DIVERGENCE_NCOLS
} divergence_column;

typedef enum {
    KERNELS_SET, KERNELS_DEVICE, KERNELS_OP, KERNELS_SHAPE, KERNELS_STATUS, KERNELS_EXPECT,
    KERNELS_INVARIANT, KERNELS_FIRST_VARY_M, KERNELS_FIRST_VARY_ROW, KERNELS_FIRST_VARY_VS_M,
    KERNELS_REL_L2_ERR, KERNELS_TOL, KERNELS_WRITTEN, KERNELS_SECONDS, KERNELS_SEED,
    KERNELS_SOURCE,  // where the op's code came from: plugin, or a built-in set's name
    KERNELS_NOTE,    // a CRASH or ERROR row's cause
    KERNELS_NCOLS
} kernels_column;

// The headers, in column order (SUMMARY_NCOLS, DIVERGENCE_NCOLS, KERNELS_NCOLS names).
const char *const *summary_header(void);
const char *const *divergence_header(void);
const char *const *kernels_header(void);

// A cell of a table read back, by the column's name; "" when the table has no such column.
const char *summary_get(const csv_table *t, int row, summary_column c);
const char *divergence_get(const csv_table *t, int row, divergence_column c);
const char *kernels_get(const csv_table *t, int row, kernels_column c);

// The index of the column in a table read back, or -1.
int summary_col(const csv_table *t, summary_column c);
int divergence_col(const csv_table *t, divergence_column c);

#endif
