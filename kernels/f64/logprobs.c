// kernels/f64/logprobs.c — float64 oracle of log_softmax, sampling and top-k.
#include <math.h>            // exp, log, INFINITY

#include "f64.h"             // f64_logprobs
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

void f64_logprobs(const logprobs_args *a, double *logprobs, int32_t *token, int32_t *topk_ids) {
    for (long r = 0; r < a->R; r++) {
        const float *x = a->logits + r * a->V;
        double *lp = logprobs + r * a->V;
        double max = -INFINITY, sum = 0.0;
        for (int v = 0; v < a->V; v++) max = x[v] > max ? x[v] : max;
        for (int v = 0; v < a->V; v++) sum += exp((double)x[v] - max);
        double lse = max + log(sum);
        for (int v = 0; v < a->V; v++) lp[v] = (double)x[v] - lse;

        int best = 0;
        double best_key = -INFINITY;
        for (int v = 0; v < a->V; v++) {
            double key = a->temperature[r] == 0.0f
                             ? (double)x[v]
                             : (double)x[v] / a->temperature[r] +
                                   invar_gumbel_noise(a->noise_seed[r], a->position[r], v);
            if (v == 0 || key > best_key) {
                best = v;
                best_key = key;
            }
        }
        token[r] = best;

        // Selection: k passes, each taking the best id not yet taken (lower id on ties).
        int32_t *ids = topk_ids + r * a->k;
        for (int j = 0; j < a->k; j++) {
            int pick = -1;
            for (int v = 0; v < a->V; v++) {
                bool used = false;
                for (int i = 0; i < j; i++) used = used || ids[i] == v;
                if (!used && (pick < 0 || lp[v] > lp[pick])) pick = v;
            }
            ids[j] = pick;
        }
    }
}
