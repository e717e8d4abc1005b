// kernels/cpu/moe.c — batch-invariant MoE: routing per token, routed experts through the
// invariant GEMM, and the fixed-order combine (ops.h, moe_*_args).
#include <math.h>            // expf, INFINITY
#include <stdlib.h>          // free
#include <string.h>          // memcpy

#include "../bf16.h"         // bf16_to_float, float_to_bf16
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "../../common/check.h"        // invar_die, invar_malloc
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_moe_*, inv_cpu_gemm, inv_cpu_silu_mul
#include "lanes.h"           // lanes_dot_f32_bf16, lanes_bf16_to_f32
#include "../../common/thread_pool.h"     // thread_pool_for
#include "../moe_slices.h"     // moe_experts_by_slice, moe_combine_by_slice

// ---------------------------------------------------------------------------------------------
// moe_route — one token is one unit of work.
//
// As Hugging Face's gates: logits in fp32 (lanes.h dot); scores = softmax or sigmoid; the
// choice is made on scores (+ correction_bias when given); group-limited methods first keep
// the topk_group best groups (group score: max for group_limited_greedy, sum of the top two
// for noaux_tc) and set the other experts' choice scores to 0.0 exactly as HF's masked_fill
// does; then top-k, ties to the lower index, ids in descending choice score. Weights are the
// un-biased scores of the chosen experts, normalized (sum + 1e-20) and/or multiplied by
// routed_scaling_factor per ops.h (V2 rule for greedy methods, V3 rule for noaux_tc).
// ---------------------------------------------------------------------------------------------

// Index of the largest of v[0..n) not yet taken; the lower index on ties.
static int argmax_free(const float *v, const unsigned char *taken, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

typedef struct {
    const moe_route_args *a;
} route_job;

static void route_tokens(void *arg, long begin, long end) {
    const moe_route_args *a = ((const route_job *)arg)->a;
    int D = a->D, E = a->E, k = a->k;
    float *mem = invar_malloc(((size_t)D + 3 * (size_t)E) * sizeof(float) + 2 * (size_t)E,
                              "moe_route scratch");
    float *x = mem, *score = x + D, *choice = score + E, *group_score = choice + E;
    unsigned char *taken = (unsigned char *)(group_score + E), *group_taken = taken + E;
    int group_size = E / a->n_group;
    for (long t = begin; t < end; t++) {
        lanes_bf16_to_f32(x, a->x + t * D, D);
        for (int e = 0; e < E; e++) score[e] = lanes_dot_f32_bf16(x, a->gate_w + (long)e * D, D);

        if (a->scoring == MOE_SCORING_SOFTMAX) {
            float max = -INFINITY, sum = 0.0f;
            for (int e = 0; e < E; e++) max = score[e] > max ? score[e] : max;
            for (int e = 0; e < E; e++) {
                score[e] = expf(score[e] - max);
                sum += score[e];
            }
            for (int e = 0; e < E; e++) score[e] /= sum;
        } else {
            for (int e = 0; e < E; e++) score[e] = 1.0f / (1.0f + expf(-score[e]));
        }
        for (int e = 0; e < E; e++)
            choice[e] = a->correction_bias ? score[e] + a->correction_bias[e] : score[e];

        if (a->topk_method != MOE_TOPK_GREEDY) {
            for (int g = 0; g < a->n_group; g++) {
                const float *c = choice + g * group_size;
                int best = 0;
                for (int i = 1; i < group_size; i++) best = c[i] > c[best] ? i : best;
                if (a->topk_method == MOE_TOPK_GROUP_LIMITED_GREEDY) {
                    group_score[g] = c[best];
                } else {                               // noaux_tc: top-2 sum
                    int second = -1;
                    for (int i = 0; i < group_size; i++)
                        if (i != best && (second < 0 || c[i] > c[second])) second = i;
                    group_score[g] = second < 0 ? c[best] : c[best] + c[second];
                }
                group_taken[g] = 0;
            }
            for (int i = 0; i < a->topk_group; i++)
                group_taken[argmax_free(group_score, group_taken, a->n_group)] = 1;
            for (int e = 0; e < E; e++)
                if (!group_taken[e / group_size]) choice[e] = 0.0f;
        }

        int32_t *ids = a->topk_ids + t * k;
        float *weights = a->topk_weights + t * k;
        for (int e = 0; e < E; e++) taken[e] = 0;
        float sum = 0.0f;
        for (int j = 0; j < k; j++) {
            int e = argmax_free(choice, taken, E);
            taken[e] = 1;
            ids[j] = e;
            weights[j] = score[e];
            sum += score[e];
        }
        bool v3 = a->topk_method == MOE_TOPK_NOAUX_TC;
        bool normalize = a->norm_topk_prob && (v3 || k > 1);
        float denominator = sum + 1e-20f;
        for (int j = 0; j < k; j++) {
            if (normalize) weights[j] /= denominator;
            if (v3 || !normalize) weights[j] *= a->routed_scaling_factor;
        }
    }
    free(mem);
}

void inv_cpu_moe_route(ops_set *ops, const moe_route_args *a) {
    if (a->k < 1 || a->k > a->E || a->n_group < 1 || a->E % a->n_group != 0 ||
        (a->topk_method != MOE_TOPK_GREEDY && (a->topk_group < 1 || a->topk_group > a->n_group ||
                                               a->k > a->topk_group * (a->E / a->n_group))))
        invar_die(INVAR_EXIT_INPUT,
                  "moe_route: bad routing shape (E=%d k=%d n_group=%d topk_group=%d)", a->E, a->k,
                  a->n_group, a->topk_group);
    static const char *const method_path[] = {
        [MOE_TOPK_GREEDY] = "greedy", [MOE_TOPK_GROUP_LIMITED_GREEDY] = "group-limited",
        [MOE_TOPK_NOAUX_TC] = "noaux-tc"};
    long order[] = {LANES, a->D};  // a token's logits: lanes.h dots over D
    long shape[] = {a->D, a->E, a->k, a->topk_method, a->n_group, a->topk_group};
    fingerprint_note(ops->fingerprints, "moe_route", fingerprint_order(shape, 6),
                     fingerprint_order(order, 2), method_path[a->topk_method]);
    const cpu_ctx *ctx = ops->ctx;
    route_job j = {a};
    thread_pool_for(ctx->pool, a->T, route_tokens, &j);
}

// ---------------------------------------------------------------------------------------------
// moe_experts — expert by expert: gather the rows routed to it, then gate_up GEMM, silu_mul and
// down GEMM with the invariant ops (each parallel over outputs), then scatter to rows t·k + j.
// A row's values are those inv_cpu_gemm gives it alone: the GEMM never mixes rows.
// ---------------------------------------------------------------------------------------------

void inv_cpu_moe_experts(ops_set *ops, const moe_experts_args *a) {
    if (moe_experts_by_slice(ops, a, inv_cpu_moe_experts)) return;
    int T = a->T, k = a->k, D = a->D, I = a->I;
    long rows = (long)T * k;
    for (long r = 0; r < rows; r++)
        if (a->topk_ids[r] < 0 || a->topk_ids[r] >= a->E)
            invar_die(INVAR_EXIT_INPUT, "moe_experts: row %ld routed to expert %d of %d", r,
                      a->topk_ids[r], a->E);
    if (rows == 0) return;
    // The order is the invariant GEMM's (it notes its own); the path is the per-expert loop.
    long gemm_order[] = {LANES, D, I};
    long shape[] = {D, I, a->E, k};
    fingerprint_note(ops->fingerprints, "moe_experts", fingerprint_order(shape, 4),
                     fingerprint_order(gemm_order, 3), "per-expert-gemm");

    // Rows grouped by expert, ascending row order within an expert (a counting sort).
    int32_t *count = invar_calloc((size_t)a->E + 1, sizeof(int32_t), "moe_experts counts");
    int32_t *order = invar_malloc((size_t)rows * sizeof(int32_t), "moe_experts row order");
    for (long r = 0; r < rows; r++) count[a->topk_ids[r] + 1]++;
    for (int e = 0; e < a->E; e++) count[e + 1] += count[e];
    int32_t *fill = invar_malloc((size_t)a->E * sizeof(int32_t), "moe_experts fill");
    memcpy(fill, count, (size_t)a->E * sizeof(int32_t));
    for (long r = 0; r < rows; r++) order[fill[a->topk_ids[r]]++] = (int32_t)r;
    int max_rows = 0;
    for (int e = 0; e < a->E; e++)
        max_rows = count[e + 1] - count[e] > max_rows ? count[e + 1] - count[e] : max_rows;

    bf16 *xs = invar_malloc((size_t)max_rows * D * sizeof(bf16), "moe_experts gathered x");
    bf16 *gu = invar_malloc((size_t)max_rows * 2 * I * sizeof(bf16), "moe_experts gate_up");
    bf16 *act = invar_malloc((size_t)max_rows * I * sizeof(bf16), "moe_experts activation");
    size_t y_size = a->out_f32 ? sizeof(float) : sizeof(bf16);
    void *ys = invar_malloc((size_t)max_rows * D * y_size, "moe_experts down");
    for (int e = 0; e < a->E; e++) {
        int n = count[e + 1] - count[e];
        if (n == 0) continue;
        const int32_t *mine = order + count[e];
        for (int i = 0; i < n; i++)
            memcpy(xs + (long)i * D, a->x + (long)(mine[i] / k) * D, (size_t)D * sizeof(bf16));
        const bf16 *w_up = a->w_gate_up + (long)e * 2 * I * D;
        const bf16 *w_down = a->w_down + (long)e * D * I;
        gemm_args up = {.y = gu, .x = xs, .w = w_up, .M = n, .N = 2 * I, .K = D};
        inv_cpu_gemm(ops, &up);
        inv_cpu_silu_mul(ops, act, gu, n, I);
        gemm_args down = {.y = ys, .y_f32 = a->out_f32 != NULL, .x = act, .w = w_down, .M = n,
                          .N = D, .K = I};
        inv_cpu_gemm(ops, &down);
        char *to = a->out_f32 ? (char *)a->out_f32 : (char *)a->out;
        for (int i = 0; i < n; i++)
            memcpy(to + (size_t)mine[i] * D * y_size, (char *)ys + (size_t)i * D * y_size,
                   (size_t)D * y_size);
    }
    free(ys);
    free(act);
    free(gu);
    free(xs);
    free(fill);
    free(order);
    free(count);
}

// ---------------------------------------------------------------------------------------------
// moe_combine — out[t] = bf16( sum_j w[t,j] · expert_out[t·k + j] ), j ascending, fp32.
// ---------------------------------------------------------------------------------------------

typedef struct {
    const moe_combine_args *a;
} combine_job;

static void combine_tokens(void *arg, long begin, long end) {
    const moe_combine_args *a = ((const combine_job *)arg)->a;
    int k = a->k, D = a->D;
    for (long t = begin; t < end; t++) {
        const float *w = a->topk_weights + t * k;
        if (a->out_f32) {  // the same sum over fp32 rows, unrounded
            const float *rows = a->expert_out_f32 + t * k * D;
            for (int d = 0; d < D; d++) {
                float sum = w[0] * rows[d];
                for (int j = 1; j < k; j++) sum += w[j] * rows[(long)j * D + d];
                a->out_f32[t * D + d] = sum;
            }
            continue;
        }
        const bf16 *rows = a->expert_out + t * k * D;
        for (int d = 0; d < D; d++) {
            float sum = w[0] * bf16_to_float(rows[d]);
            for (int j = 1; j < k; j++) {
                float term = w[j] * bf16_to_float(rows[(long)j * D + d]);
                sum += term;
            }
            a->out[t * D + d] = float_to_bf16(sum);
        }
    }
}

void inv_cpu_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, inv_cpu_moe_combine)) return;
    if (a->k < 1) invar_die(INVAR_EXIT_INPUT, "moe_combine: k = %d", a->k);
    long order[] = {a->k};  // j ascending from the first product
    long shape[] = {a->D, a->k};
    fingerprint_note(ops->fingerprints, "moe_combine", fingerprint_order(shape, 2),
                     fingerprint_order(order, 1), "ascending-k");
    const cpu_ctx *ctx = ops->ctx;
    combine_job j = {a};
    thread_pool_for(ctx->pool, a->T, combine_tokens, &j);
}
