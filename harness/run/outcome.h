// harness/run/outcome.h — what one config's runs came to: the verdict, the counts, the first
// divergence. The runner fills it; the console line and the summary row are written from it.
#ifndef INVAR_HARNESS_OUTCOME_H
#define INVAR_HARNESS_OUTCOME_H

#include <stdbool.h>   // bool

#include "compare.h"   // divergence

typedef struct {
    const char *verdict;        // PASS | FAIL | SKIP
    const char *expected;       // invariant | batch-variant (a negative control) | -
    const char *observed;       // invariant | batch-variant | nondeterministic | error | skipped
    int threads;                // effective CPU threads
    int compared, differing;    // request comparisons (batch vs bs=1, repeat vs batch)
    bool batch_differs, repeat_differs;
    bool has_first;
    char first_batch[24];       // the batch size, or "repeat"
    int first_request;
    divergence first;
    char first_op[512];         // the first differing op of the first request (localize.h), or ""
    bool first_op_nonfinite;    // first_op names the first op holding a NaN or an infinity in a
                                // run alone that failed, not a difference between two runs
    const char *prefill_vs_decode; // equal | DIFFER | not-declared | not-checked
    long prefill_chunks;        // over the bs=1 baselines
    long prefix_queries, prefix_hits; // over the batched runs
    double seconds;
    char note[1024];            // why skipped, what failed
} outcome;

#endif
