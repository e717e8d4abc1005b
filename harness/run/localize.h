// harness/run/localize.h — which op diverged first: a request that differs between its bs=1
// run and a batch is run again, alone and inside that batch, with an op tap on rank 0's kernel
// set (sets/op_tap.h), and the first op call in the batch run's forward order whose rows of
// that request differ from the alone run's is named: its layer, op and shape, the call's row
// count and the request's row at bs=1 and at bs=N, and the largest ULP distance in the row.
// A request whose decode differs from its re-prefill (prefill vs decode) is localized the same
// way, the re-prefill in the batch's place.
#ifndef INVAR_HARNESS_LOCALIZE_H
#define INVAR_HARNESS_LOCALIZE_H

#include <stdbool.h>                  // bool
#include <stdint.h>                   // uint64_t

#include "../../engine/engine.h"      // engine_request, engine_sched, engine_limits
#include "../../sets/op_tap.h"        // op_tap_entry, op_tap_row

#define LOCALIZE_TEXT 512

typedef struct {
    bool found;                 // an op's rows differ
    char op[32];                // its name ("gemm"), "" when none
    char text[LOCALIZE_TEXT];   // the summary.csv cell and the console line, or why none
} localization;

// What one run of the engine is asked to do, the request that localization follows in it.
typedef struct {
    const engine_request *reqs;
    int count;
    engine_sched sched;
    int follow;                 // engine request id of the followed request
    const char *label;          // "alone", "at bs=16": follows a row's M in the text
} localize_run;

// Runs `alone` and then `batch` on a fresh engine over rank_ops (rank 0 tapped) and fills *out.
// False with the reason in out->text when the engine refused a run.
bool localize_request(ops_set *const *rank_ops, int ranks, const model_config *mc,
                      weight_source *w, const engine_limits *limits, uint64_t seed,
                      const localize_run *alone, const localize_run *batch, localization *out);

// A request whose run alone failed (a sampled id outside the vocabulary, a broken record) has no
// run to be compared with: `alone` is run again on a fresh tapped engine and the first op call
// whose rows of the request hold a NaN or an infinity is named (found), else out->text says
// that none did. False when the engine refused the rerun and no op was found.
bool localize_nonfinite(ops_set *const *rank_ops, int ranks, const model_config *mc,
                        weight_source *w, const engine_limits *limits, uint64_t seed,
                        const localize_run *alone, localization *out);

// The largest ULP distance between two rows of the same segments (bf16 and f32 elements in
// their own ULPs; int32 elements count in *ids_differing); -1 when the segments do not match.
long long localize_max_ulps(const op_tap_row *a, const op_tap_row *b, long *at,
                            long *ids_differing);

#endif
