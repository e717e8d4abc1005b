// harness/run/compare.h — the bitwise comparator: two runs of one request agree when every step has
// the same token id, the same bits of the chosen token's logprob, and the same top-k ids and
// logprob bits. Never a tolerance; |Δ| and the ULP distance only describe a difference.
#ifndef INVAR_HARNESS_COMPARE_H
#define INVAR_HARNESS_COMPARE_H

#include <stdbool.h>          // bool
#include <stdint.h>           // int32_t, int64_t

#include "../../engine/engine.h" // engine_result, engine_step_record

// What differs first within a step, in the order checked.
typedef enum {
    DIFF_NONE,
    DIFF_LENGTH,        // one run has fewer steps (the missing step shows token -1)
    DIFF_TOKEN,         // chosen token id
    DIFF_LOGPROB,       // chosen token's logprob bits
    DIFF_TOPK_ID,       // top-k id at topk_index
    DIFF_TOPK_LOGPROB,  // top-k logprob bits at topk_index
} diff_kind;

typedef struct {
    diff_kind kind;
    int step;
    int topk_index;             // DIFF_TOPK_*: which entry; else -1
    // The differing entry (the chosen token for DIFF_TOKEN / DIFF_LOGPROB / DIFF_LENGTH,
    // top-k entry topk_index for DIFF_TOPK_*), base run then other run.
    int32_t base_token, other_token;
    float base_logprob, other_logprob;
    double abs_delta;           // |other - base| of the logprobs, in double
    int64_t ulps;               // float_ulp_distance(base, other)
} divergence;

// Maps a float to an integer whose order is the float's order (-0 and +0 both to 0), so the
// difference of two maps counts the floats between them, across the sign too.
int64_t float_ordered(float f);
int64_t float_ulp_distance(float a, float b);

// Bitwise float equality (NaNs equal when their bits are).
bool float_bits_equal(float a, float b);

// Compares step `step` of two runs over the first top_k entries. False when equal; else fills d.
bool compare_step(const engine_result *base, const engine_result *other, int step, int top_k,
                  divergence *d);

// First differing step of two runs; false when they agree bit for bit.
bool compare_results(const engine_result *base, const engine_result *other, int top_k,
                     divergence *first);

// Receives every differing step of a request: which request, and what differs.
typedef void (*divergence_sink)(void *user, int request, const divergence *d);

// What comparing two runs of the same requests found.
typedef struct {
    int requests;               // requests compared
    int differing;              // of those, requests with some differing step
    long steps;                 // steps compared, over every request (the longer run's length)
    bool has_first;             // some step differed; first_* is the earliest request's first
    int first_request;
    divergence first;
} comparison;

// Compares request i of `other` with request i of `base`, i in [0, count), at every step of
// the longer of the two (so a missing step is a difference), calling sink (may be NULL) once
// per differing step. This is the runner's one verdict path: tests/test_compare.c holds it to
// "every request, every step, the exact first divergence".
comparison compare_request_sets(const engine_result *base, const engine_result *other, int count,
                                int top_k, divergence_sink sink, void *user);

// "token", "logprob", "topk_id[3]", ... into buf.
const char *diff_kind_name(const divergence *d, char *buf, int len);

#endif
