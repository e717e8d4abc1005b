// harness/run/tp_information.c — TP=1 vs TP=T as information (harness/run/tp_information.h).
#include "tp_information.h"

#include <math.h>     // fabs
#include <stdio.h>    // snprintf
#include <string.h>   // memcmp

tp_delta tp_delta_compare(const engine_result *tp1, const engine_result *tpT, int n) {
    tp_delta d = {0};
    for (int i = 0; i < n; i++) {
        // Both runs were checked complete; the shorter count guards a caller that was not.
        int steps = tp1[i].n_steps < tpT[i].n_steps ? tp1[i].n_steps : tpT[i].n_steps;
        d.steps += steps;
        for (int s = 0; s < steps; s++) {
            const engine_step_record *a = &tp1[i].steps[s], *b = &tpT[i].steps[s];
            if (a->token != b->token) break;  // later steps sample from other contexts
            double delta = fabs((double)a->logprob - (double)b->logprob);
            if (delta > d.max_abs_delta) d.max_abs_delta = delta;
            d.agreed++;
        }
    }
    return d;
}

// One step's record bit for bit, over what the engine wrote (the first top_k entries).
static bool same_record(const engine_step_record *a, const engine_step_record *b, int top_k) {
    return a->token == b->token && memcmp(&a->logprob, &b->logprob, sizeof a->logprob) == 0 &&
           memcmp(a->topk_ids, b->topk_ids, (size_t)top_k * sizeof a->topk_ids[0]) == 0 &&
           memcmp(a->topk_logprobs, b->topk_logprobs, (size_t)top_k * sizeof a->topk_logprobs[0]) == 0;
}

int tp_requests_differing(const engine_result *tp1, const engine_result *tpT, int n, int top_k) {
    int differing = 0;
    for (int i = 0; i < n; i++) {
        bool same = tp1[i].n_steps == tpT[i].n_steps;
        for (int s = 0; same && s < tp1[i].n_steps; s++)
            same = same_record(&tp1[i].steps[s], &tpT[i].steps[s], top_k);
        differing += !same;
    }
    return differing;
}

void tp_delta_note(const tp_delta *d, int T, char *buf, size_t len) {
    // %.3g keeps a zero a zero and a tiny difference visible (1.19e-07, not 0.0000).
    snprintf(buf, len, "information: TP=1 vs TP=%d max |Δ logprob| %.3g over %ld steps (tokens "
             "agreed at %ld; a request is compared up to its first differing token)", T,
             d->max_abs_delta, d->steps, d->agreed);
}
