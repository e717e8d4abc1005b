// reports/report_schema.c — the column names of summary.csv, divergence.csv and kernels.csv
// (reports/report_schema.h). Designated initialisers tie each name to its index, so the order
// lives in the enums alone.
#include "report_schema.h"

static const char *const summary_names[] = {
    [SUMMARY_CASE] = "case", [SUMMARY_CONFIG] = "config", [SUMMARY_DEVICE] = "device",
    [SUMMARY_KERNEL_SET] = "kernel_set", [SUMMARY_BATCH_INVARIANT] = "batch_invariant",
    [SUMMARY_MODEL] = "model", [SUMMARY_SEED] = "seed", [SUMMARY_PROMPTS] = "prompts",
    [SUMMARY_REQUESTS] = "requests", [SUMMARY_MIN_LEN] = "min_len",
    [SUMMARY_MAX_LEN] = "max_len", [SUMMARY_MAX_NEW_TOKENS] = "max_new_tokens",
    [SUMMARY_TEMPERATURE] = "temperature", [SUMMARY_TOP_K] = "top_k",
    [SUMMARY_SHARED_PREFIX_GROUPS] = "shared_prefix_groups",
    [SUMMARY_SHARED_PREFIX_LEN] = "shared_prefix_len",
    [SUMMARY_WARM_CACHE_REPEATS] = "warm_cache_repeats", [SUMMARY_ARRIVALS] = "arrivals",
    [SUMMARY_MAX_NUM_BATCHED_TOKENS] = "max_num_batched_tokens",
    [SUMMARY_CHUNKED_PREFILL] = "chunked_prefill", [SUMMARY_PREFIX_CACHING] = "prefix_caching",
    [SUMMARY_FORCE_PREFIX_CACHING] = "force_prefix_caching", [SUMMARY_THREADS] = "threads",
    [SUMMARY_TENSOR_PARALLEL] = "tensor_parallel",
    [SUMMARY_BATCH_SIZES] = "batch_sizes", [SUMMARY_ATTENTION_BACKEND] = "attention_backend",
    [SUMMARY_BACKEND_SELECTED_BY] = "backend_selected_by",
    [SUMMARY_PREFIX_CACHING_EFFECTIVE] = "prefix_caching_effective",
    [SUMMARY_CHUNKED_PREFILL_EFFECTIVE] = "chunked_prefill_effective",
    [SUMMARY_MAX_NUM_BATCHED_TOKENS_EFFECTIVE] = "max_num_batched_tokens_effective",
    [SUMMARY_RESOLUTION] = "resolution", [SUMMARY_MERGED_INTO] = "merged_into",
    [SUMMARY_EXPECTED] = "expected", [SUMMARY_OBSERVED] = "observed",
    [SUMMARY_VERDICT] = "verdict", [SUMMARY_REQUESTS_COMPARED] = "requests_compared",
    [SUMMARY_DIFFERING_REQUESTS] = "differing_requests",
    [SUMMARY_FIRST_BATCH_SIZE] = "first_batch_size", [SUMMARY_FIRST_REQUEST] = "first_request",
    [SUMMARY_FIRST_STEP] = "first_step", [SUMMARY_FIRST_FIELD] = "first_field",
    [SUMMARY_FIRST_BASE_TOKEN] = "first_base_token",
    [SUMMARY_FIRST_BATCH_TOKEN] = "first_batch_token",
    [SUMMARY_FIRST_BASE_LOGPROB] = "first_base_logprob",
    [SUMMARY_FIRST_BATCH_LOGPROB] = "first_batch_logprob",
    [SUMMARY_FIRST_ABS_DELTA] = "first_abs_delta", [SUMMARY_FIRST_ULPS] = "first_ulps",
    [SUMMARY_FIRST_OP] = "first_op",
    [SUMMARY_PREFILL_VS_DECODE] = "prefill_vs_decode",
    [SUMMARY_PREFIX_QUERIES] = "prefix_queries", [SUMMARY_PREFIX_HITS] = "prefix_hits",
    [SUMMARY_PREFIX_HIT_RATE] = "prefix_hit_rate", [SUMMARY_PREFILL_CHUNKS] = "prefill_chunks",
    [SUMMARY_SECONDS] = "seconds", [SUMMARY_NOTE] = "note",
};
_Static_assert(sizeof summary_names / sizeof summary_names[0] == SUMMARY_NCOLS,
               "a summary column without a name");

static const char *const divergence_names[] = {
    [DIVERGENCE_CONFIG] = "config", [DIVERGENCE_BATCH_SIZE] = "batch_size",
    [DIVERGENCE_REQUEST] = "request", [DIVERGENCE_STEP] = "step", [DIVERGENCE_FIELD] = "field",
    [DIVERGENCE_BASE_TOKEN] = "base_token", [DIVERGENCE_BATCH_TOKEN] = "batch_token",
    [DIVERGENCE_BASE_LOGPROB] = "base_logprob", [DIVERGENCE_BATCH_LOGPROB] = "batch_logprob",
    [DIVERGENCE_ABS_DELTA] = "abs_delta", [DIVERGENCE_ULPS] = "ulps",
};
_Static_assert(sizeof divergence_names / sizeof divergence_names[0] == DIVERGENCE_NCOLS,
               "a divergence column without a name");

static const char *const kernels_names[] = {
    [KERNELS_SET] = "set", [KERNELS_DEVICE] = "device", [KERNELS_OP] = "op",
    [KERNELS_SHAPE] = "shape", [KERNELS_STATUS] = "status", [KERNELS_EXPECT] = "expect",
    [KERNELS_INVARIANT] = "invariant", [KERNELS_FIRST_VARY_M] = "first_vary_M",
    [KERNELS_FIRST_VARY_ROW] = "first_vary_row", [KERNELS_FIRST_VARY_VS_M] = "first_vary_vs_M",
    [KERNELS_REL_L2_ERR] = "rel_l2_err", [KERNELS_TOL] = "tol", [KERNELS_WRITTEN] = "written",
    [KERNELS_SECONDS] = "seconds", [KERNELS_SEED] = "seed", [KERNELS_SOURCE] = "source",
    [KERNELS_NOTE] = "note",
};
_Static_assert(sizeof kernels_names / sizeof kernels_names[0] == KERNELS_NCOLS,
               "a kernels column without a name");

const char *const *summary_header(void) { return summary_names; }
const char *const *divergence_header(void) { return divergence_names; }
const char *const *kernels_header(void) { return kernels_names; }

int summary_col(const csv_table *t, summary_column c) { return csv_col(t, summary_names[c]); }
int divergence_col(const csv_table *t, divergence_column c) {
    return csv_col(t, divergence_names[c]);
}

const char *summary_get(const csv_table *t, int row, summary_column c) {
    return csv_get(t, row, summary_names[c]);
}
const char *divergence_get(const csv_table *t, int row, divergence_column c) {
    return csv_get(t, row, divergence_names[c]);
}
const char *kernels_get(const csv_table *t, int row, kernels_column c) {
    return csv_get(t, row, kernels_names[c]);
}
