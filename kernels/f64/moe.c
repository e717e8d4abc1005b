// kernels/f64/moe.c — float64 oracle of MoE routing, routed experts and combine.
#include <math.h>            // exp, INFINITY
#include <stdlib.h>          // free

#include "../bf16.h"         // bf16_to_float
#include "../../common/check.h"        // invar_malloc
#include "f64.h"             // f64_moe_route, f64_moe_experts, f64_moe_combine

// ---------------------------------------------------------------------------------------------
// Routing (HF DeepseekV2MoEGate / DeepseekV3 router; rules in kernels/cpu/moe.c)
// ---------------------------------------------------------------------------------------------

// Index of the largest v[i] with taken[i] == 0; the lower index on ties.
static int argmax_free(const double *v, const unsigned char *taken, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

void f64_moe_route(const moe_route_args *a, int32_t *ids, double *weights) {
    int D = a->D, E = a->E, k = a->k, group_size = E / a->n_group;
    double *score = invar_malloc((size_t)E * sizeof(double), "f64_moe_route scores");
    double *choice = invar_malloc((size_t)E * sizeof(double), "f64_moe_route choice");
    double *group_score = invar_malloc((size_t)a->n_group * sizeof(double), "f64_moe_route groups");
    unsigned char *taken = invar_malloc((size_t)E + (size_t)a->n_group, "f64_moe_route taken");
    unsigned char *group_taken = taken + E;
    for (long t = 0; t < a->T; t++) {
        for (int e = 0; e < E; e++) {
            double dot = 0.0;
            for (int d = 0; d < D; d++)
                dot += (double)bf16_to_float(a->x[t * D + d]) *
                        bf16_to_float(a->gate_w[(long)e * D + d]);
            score[e] = dot;
        }
        if (a->scoring == MOE_SCORING_SOFTMAX) {
            double max = -INFINITY, sum = 0.0;
            for (int e = 0; e < E; e++) max = score[e] > max ? score[e] : max;
            for (int e = 0; e < E; e++) sum += exp(score[e] - max);
            for (int e = 0; e < E; e++) score[e] = exp(score[e] - max) / sum;
        } else {
            for (int e = 0; e < E; e++) score[e] = 1.0 / (1.0 + exp(-score[e]));
        }
        for (int e = 0; e < E; e++)
            choice[e] = score[e] + (a->correction_bias ? a->correction_bias[e] : 0.0);

        if (a->topk_method != MOE_TOPK_GREEDY) {
            for (int g = 0; g < a->n_group; g++) {
                for (int i = 0; i < group_size; i++) taken[i] = 0;
                const double *c = choice + g * group_size;
                int first = argmax_free(c, taken, group_size);
                taken[first] = 1;
                int second = group_size > 1 ? argmax_free(c, taken, group_size) : -1;
                group_score[g] = a->topk_method == MOE_TOPK_GROUP_LIMITED_GREEDY || second < 0
                                     ? c[first] : c[first] + c[second];
                group_taken[g] = 0;
            }
            for (int i = 0; i < a->topk_group; i++)
                group_taken[argmax_free(group_score, group_taken, a->n_group)] = 1;
            for (int e = 0; e < E; e++)
                if (!group_taken[e / group_size]) choice[e] = 0.0;   // HF's masked_fill(0.0)
        }

        for (int e = 0; e < E; e++) taken[e] = 0;
        double sum = 0.0;
        for (int j = 0; j < k; j++) {
            int e = argmax_free(choice, taken, E);
            taken[e] = 1;
            ids[t * k + j] = e;
            weights[t * k + j] = score[e];
            sum += score[e];
        }
        bool v3 = a->topk_method == MOE_TOPK_NOAUX_TC;
        bool normalize = a->norm_topk_prob && (v3 || k > 1);
        for (int j = 0; j < k; j++) {
            if (normalize) weights[t * k + j] /= sum + 1e-20;
            if (v3 || !normalize) weights[t * k + j] *= a->routed_scaling_factor;
        }
    }
    free(taken);
    free(group_score);
    free(choice);
    free(score);
}

// ---------------------------------------------------------------------------------------------
// Experts and combine
// ---------------------------------------------------------------------------------------------

void f64_moe_experts(const moe_experts_args *a, double *out) {
    int D = a->D, I = a->I;
    double *act = invar_malloc((size_t)I * sizeof(double), "f64_moe_experts activation");
    for (long r = 0; r < (long)a->T * a->k; r++) {
        const bf16 *x = a->x + (r / a->k) * D;
        long e = a->topk_ids[r];
        const bf16 *w_gu = a->w_gate_up + e * 2 * I * D, *w_down = a->w_down + e * D * I;
        for (long i = 0; i < I; i++) {
            double gate = 0.0, up = 0.0;
            for (int d = 0; d < D; d++) {
                double xd = bf16_to_float(x[d]);
                gate += xd * bf16_to_float(w_gu[i * D + d]);
                up += xd * bf16_to_float(w_gu[(I + i) * D + d]);
            }
            act[i] = gate / (1.0 + exp(-gate)) * up;
        }
        for (long d = 0; d < D; d++) {
            double sum = 0.0;
            for (int i = 0; i < I; i++) sum += act[i] * bf16_to_float(w_down[d * I + i]);
            out[r * D + d] = sum;
        }
    }
    free(act);
}

void f64_moe_combine(const moe_combine_args *a, double *out) {
    for (long t = 0; t < a->T; t++)
        for (long d = 0; d < a->D; d++) {
            double sum = 0.0;
            for (int j = 0; j < a->k; j++) {
                const long at = (t * a->k + j) * a->D + d;
                sum += (double)a->topk_weights[t * a->k + j] *
                       (a->expert_out_f32 ? a->expert_out_f32[at] : bf16_to_float(a->expert_out[at]));
            }
            out[t * a->D + d] = sum;
        }
}
