// harness/run/tp_information.h — TP=1 vs TP=T as information. A config at tensor_parallel T > 1
// also runs its bs=1 baselines at T = 1 (same kernel set, same model); the two need not agree
// bit for bit (the row-parallel layers' partial sums are summed in another tree), so their
// distance is reported in the config's note, never judged; with tp_size_invariance = on they
// must (engine/tp_slices.h), and the requests whose records differ at all fail the config.
#ifndef INVAR_HARNESS_TP_INFORMATION_H
#define INVAR_HARNESS_TP_INFORMATION_H

#include <stddef.h>             // size_t

#include "../../engine/engine.h" // engine_result

typedef struct {
    double max_abs_delta;  // max |logprob(TP=T) - logprob(TP=1)| of the chosen token
    long steps;            // steps of every request (what could have been compared)
    long agreed;           // steps compared: both chose the same token, in the same context
} tp_delta;

// Compares requests [0, n) of tp1 and tpT step by step. A request is compared up to its first
// step whose tokens differ: that step and every later one of the request are not compared
// (not in `agreed`), since from there on the two runs continue from different contexts.
tp_delta tp_delta_compare(const engine_result *tp1, const engine_result *tpT, int n);

// "information: TP=1 vs TP=4 max |Δ logprob| 0.0123 over 96 steps (tokens agreed at 95; a
// request is compared up to its first differing token)".
void tp_delta_note(const tp_delta *d, int T, char *buf, size_t len);

// Requests of [0, n) whose records differ in any bit between tp1 and tpT: the step count, and
// at every step the token, the logprob's bits and the first top_k entries' ids and bits.
int tp_requests_differing(const engine_result *tp1, const engine_result *tpT, int n, int top_k);

#endif
