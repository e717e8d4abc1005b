// harness/check/ops/moe.c — the kernel checker's MoE ops (harness/check/ops/op_section.h): moe_route,
// moe_experts, moe_combine. A row is one token; other tokens change the experts' loads.
#include <math.h>                   // INFINITY
#include <stdlib.h>                 // free
#include <string.h>                 // memcpy

#include "../../../common/check.h" // invar_malloc, invar_calloc
#include "../../../kernels/f64/f64.h" // f64_moe_*, f64_rel_l2_*
#include "op_section.h"             // op_section, op_buffer_add, op_rng, op_fill_bf16

// --- moe_route -------------------------------------------------------------------------------
// Output row: k ids then k weights (int32, float).

enum { ROUTE_GATE_W = 0, ROUTE_BIAS = 1 };              // shared
enum { ROUTE_X = 0, ROUTE_IDS = 1, ROUTE_WEIGHTS = 2 }; // buffers

const op_shape moe_route_cpu_shapes[] = {
    {.label = "D=2048 E=64 k=6 softmax", .max_M = 1024, .quick = true,  // V2-Lite
     .moe_route = {.D = 2048, .E = 64, .k = 6, .method = MOE_TOPK_GREEDY,
                   .n_group = 1, .topk_group = 1}},
    {.label = "D=1024 E=256 k=8 noaux_tc", .max_M = 1024,               // V3 routing
     .moe_route = {.D = 1024, .E = 256, .k = 8, .method = MOE_TOPK_NOAUX_TC,
                   .n_group = 8, .topk_group = 4}},
    // V2's group-limited top-k, D in the lane tail: the route path no other shape takes
    {.label = "D=1030 E=64 k=6 group_limited", .max_M = 256,
     .moe_route = {.D = 1030, .E = 64, .k = 6, .method = MOE_TOPK_GROUP_LIMITED_GREEDY,
                   .n_group = 8, .topk_group = 3}},
    // V3's routing with one expert a token: normalized to a weight of 1 before the scaling
    {.label = "D=520 E=64 k=1 noaux_tc", .max_M = 256,
     .moe_route = {.D = 520, .E = 64, .k = 1, .method = MOE_TOPK_NOAUX_TC,
                   .n_group = 8, .topk_group = 4}},
    // --exhaustive: D in the lane tail
    {.label = "D=9 E=8 k=1 softmax", .max_M = 1024, .exhaustive = true,
     .moe_route = {.D = 9, .E = 8, .k = 1, .method = MOE_TOPK_GREEDY,
                   .n_group = 1, .topk_group = 1}},
    {.label = NULL},
};
const op_shape moe_route_cuda_shapes[] = {
    {.label = "D=2048 E=64 k=6 softmax", .quick = true,
     .moe_route = {.D = 2048, .E = 64, .k = 6, .method = MOE_TOPK_GREEDY,
                   .n_group = 1, .topk_group = 1}},
    {.label = "D=5120 E=160 k=6 group_limited",                          // V2
     .moe_route = {.D = 5120, .E = 160, .k = 6, .method = MOE_TOPK_GROUP_LIMITED_GREEDY,
                   .n_group = 8, .topk_group = 3}},
    {.label = "D=7168 E=256 k=8 noaux_tc",                               // V3
     .moe_route = {.D = 7168, .E = 256, .k = 8, .method = MOE_TOPK_NOAUX_TC,
                   .n_group = 8, .topk_group = 4}},
    // D off a multiple of 8: the scalar loads over the same runs, a run cut at D
    {.label = "D=1030 E=64 k=6 group_limited", .max_M = 256,
     .moe_route = {.D = 1030, .E = 64, .k = 6, .method = MOE_TOPK_GROUP_LIMITED_GREEDY,
                   .n_group = 8, .topk_group = 3}},
    {.label = "D=9 E=8 k=1 softmax", .max_M = 1024,
     .moe_route = {.D = 9, .E = 8, .k = 1, .method = MOE_TOPK_GREEDY,
                   .n_group = 1, .topk_group = 1}},
    {.label = "D=520 E=64 k=1 noaux_tc", .max_M = 256,
     .moe_route = {.D = 520, .E = 64, .k = 1, .method = MOE_TOPK_NOAUX_TC,
                   .n_group = 8, .topk_group = 4}},
    {.label = NULL},
};

static bool route_v3(const op_case *c) { return c->s->moe_route.method == MOE_TOPK_NOAUX_TC; }

static void moe_route_declare(op_case *c) {
    int D = c->s->moe_route.D, E = c->s->moe_route.E, k = c->s->moe_route.k;
    // Twin experts: e + E/2 a copy of e for even e < E/2 (bias too), so most tokens' picks hold
    // exact ties, and a kernel must take the lower index first, as the float64 oracle does.
    op_rng g = op_rng_from(c->seed, 1000 + ROUTE_GATE_W);
    bf16 *gate = invar_malloc((size_t)E * D * sizeof(bf16), "router gate_w");
    op_fill_bf16(gate, (long)E * D, &g, -0.1f, 0.1f);
    for (int e = 0; e < E / 2; e += 2) memcpy(gate + (long)(e + E / 2) * D, gate + (long)e * D, (size_t)D * sizeof(bf16));
    op_shared_take(c, ROUTE_GATE_W, gate, (size_t)E * D * sizeof(bf16), "router gate_w");
    if (route_v3(c)) {  // e_score_correction_bias: fp32, small and positive
        op_rng r = op_rng_from(c->seed, 11);
        float *bias = invar_malloc((size_t)E * sizeof(float), "router bias");
        for (int e = 0; e < E; e++) bias[e] = op_rng_float(&r, 0.0f, 0.1f);
        for (int e = 0; e < E / 2; e += 2) bias[e + E / 2] = bias[e];
        op_shared_take(c, ROUTE_BIAS, bias, (size_t)E * sizeof(float), "router bias");
    }
    op_buffer_add(c, OP_ROW_IN, "router x", sizeof(bf16), 1, D, D);
    op_buffer_add(c, OP_OUT, "router ids", sizeof(int32_t), 1, k, k);
    op_buffer_add(c, OP_OUT, "router weights", sizeof(float), 1, k, k);
}

static void moe_route_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 12);
    op_fill_bf16(in[ROUTE_X], c->s->moe_route.D, &r, -1.0f, 1.0f);
}

static moe_route_args moe_route_args_for(const op_case *c, int T, bool device) {
    bool v3 = route_v3(c);
    return (moe_route_args){
        .gate_w = device ? c->shared[ROUTE_GATE_W] : c->host[ROUTE_GATE_W],
        .correction_bias = device ? c->shared[ROUTE_BIAS] : c->host[ROUTE_BIAS],
        .T = T, .D = c->s->moe_route.D, .E = c->s->moe_route.E, .k = c->s->moe_route.k,
        .scoring = v3 ? MOE_SCORING_SIGMOID : MOE_SCORING_SOFTMAX,
        .topk_method = c->s->moe_route.method, .n_group = c->s->moe_route.n_group,
        .topk_group = c->s->moe_route.topk_group, .norm_topk_prob = v3,
        .routed_scaling_factor = v3 ? 2.5f : 1.0f,
    };
}

static void moe_route_call(op_case *c, const op_batch *b) {
    moe_route_args a = moe_route_args_for(c, b->M, true);
    a.x = b->dev[ROUTE_X];
    a.topk_ids = b->dev[ROUTE_IDS];
    a.topk_weights = b->dev[ROUTE_WEIGHTS];
    c->ops->moe_route(c->ops, &a);
}

// The error of the dense routing vector (weight per expert, 0 where not chosen): a wrong
// expert costs its whole weight.
static double moe_route_error(op_case *c, uint64_t seed, const void *row) {
    int E = c->s->moe_route.E, k = c->s->moe_route.k;
    void **in = op_row_alone(c, seed);
    int32_t ref_ids[64];
    double ref_w[64];
    moe_route_args a = moe_route_args_for(c, 1, false);
    a.x = in[ROUTE_X];
    f64_moe_route(&a, ref_ids, ref_w);
    double *ref = invar_calloc((size_t)E, sizeof(double), "router oracle");
    float *got = invar_calloc((size_t)E, sizeof(float), "router output");
    const int32_t *ids = row;
    const float *w = (const float *)(ids + k);
    double err = 0.0;
    for (int j = 0; j < k; j++) {
        ref[ref_ids[j]] = ref_w[j];
        if (ids[j] < 0 || ids[j] >= E) err = INFINITY;
        else got[ids[j]] += w[j];
    }
    if (err == 0.0) err = f64_rel_l2_f32(got, ref, E);
    op_row_free(c, in);
    free(ref);
    free(got);
    return err;
}

const op_section moe_route_op = {moe_route_declare, moe_route_row, NULL, moe_route_call,
                                 moe_route_error};

// --- moe_experts -----------------------------------------------------------------------------
// A row is one token (D values) and its k distinct experts. Output row: k rows of D.

enum { EXP_GATE_UP = 0, EXP_DOWN = 1 };            // shared
enum { EXP_X = 0, EXP_IDS = 1, EXP_OUT = 2 };      // buffers

const op_shape moe_experts_cpu_shapes[] = {
    {.label = "D=256 I=128 E=16 k=4", .moe_experts = {.D = 256, .I = 128, .E = 16, .k = 4},
     .max_M = 1024, .quick = true},
    // --exhaustive: one expert per token, tails in D and I, more tokens than experts by far
    {.label = "D=203 I=67 E=8 k=1", .moe_experts = {.D = 203, .I = 67, .E = 8, .k = 1},
     .max_M = 1024, .exhaustive = true},
    {.label = NULL},
};
const op_shape moe_experts_cuda_shapes[] = {
    {.label = "D=2048 I=1408 E=64 k=6",                                  // V2-Lite
     .moe_experts = {.D = 2048, .I = 1408, .E = 64, .k = 6}, .quick = true},
    {.label = "D=7168 I=2048 E=32 k=8",                                  // V3 expert, fewer experts
     .moe_experts = {.D = 7168, .I = 2048, .E = 32, .k = 8}, .max_M = 1024},
    {.label = NULL},
};

// moe_experts_f32: the fp32 form (out_f32, TP-size invariance): the same rows, the down
// projection's sums unrounded.
static bool experts_f32(const op_case *c) { return c->section == &moe_experts_f32_op; }

static void moe_experts_declare(op_case *c) {
    long D = c->s->moe_experts.D, I = c->s->moe_experts.I, E = c->s->moe_experts.E;
    int k = c->s->moe_experts.k;
    op_shared_bf16(c, EXP_GATE_UP, E * 2 * I * D, -0.05f, 0.05f, "experts w_gate_up");
    op_shared_bf16(c, EXP_DOWN, E * D * I, -0.05f, 0.05f, "experts w_down");
    op_buffer_add(c, OP_ROW_IN, "experts x", sizeof(bf16), 1, D, D);
    op_buffer_add(c, OP_ROW_IN, "experts ids", sizeof(int32_t), 1, k, k);
    op_buffer_add(c, OP_OUT, "experts out", experts_f32(c) ? sizeof(float) : sizeof(bf16), k, D, D);
}

// Routing is skewed as real routers are: three tokens in four choose expert 0 (a hot expert),
// so one expert gets far more rows than the others and its row count grows with the batch.
// Uniform routing never fills any expert past twice its share, which let an expert capacity
// that drops the rows beyond it through (mutant held-moe-experts-capacity-drop).
static void moe_experts_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 13);
    int k = c->s->moe_experts.k;
    int32_t *ids = in[EXP_IDS];
    op_fill_bf16(in[EXP_X], c->s->moe_experts.D, &r, -1.0f, 1.0f);
    op_distinct_ids(ids, k, c->s->moe_experts.E, &r);
    if (op_rng_int(&r, 4) == 0) return;
    bool has_hot = false;
    for (int j = 0; j < k; j++) has_hot |= ids[j] == 0;
    if (!has_hot) ids[op_rng_int(&r, k)] = 0;  // still k distinct experts
}

static moe_experts_args moe_experts_args_for(const op_case *c, int T, bool device) {
    return (moe_experts_args){
        .w_gate_up = device ? c->shared[EXP_GATE_UP] : c->host[EXP_GATE_UP],
        .w_down = device ? c->shared[EXP_DOWN] : c->host[EXP_DOWN],
        .T = T, .k = c->s->moe_experts.k, .E = c->s->moe_experts.E, .D = c->s->moe_experts.D,
        .I = c->s->moe_experts.I};
}

static void moe_experts_call(op_case *c, const op_batch *b) {
    moe_experts_args a = moe_experts_args_for(c, b->M, true);
    a.x = b->dev[EXP_X];
    a.topk_ids = b->dev[EXP_IDS];
    if (experts_f32(c)) a.out_f32 = b->dev[EXP_OUT];
    else a.out = b->dev[EXP_OUT];
    c->ops->moe_experts(c->ops, &a);
}

static double moe_experts_error(op_case *c, uint64_t seed, const void *row) {
    long n = (long)c->s->moe_experts.k * c->s->moe_experts.D;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)n * sizeof(double), "experts oracle");
    moe_experts_args a = moe_experts_args_for(c, 1, false);
    a.x = in[EXP_X];
    a.topk_ids = in[EXP_IDS];
    f64_moe_experts(&a, ref);
    double err = experts_f32(c) ? f64_rel_l2_f32(row, ref, n) : f64_rel_l2_bf16(row, ref, n);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section moe_experts_op = {moe_experts_declare, moe_experts_row, NULL, moe_experts_call,
                                   moe_experts_error};
const op_section moe_experts_f32_op = {moe_experts_declare, moe_experts_row, NULL, moe_experts_call,
                                       moe_experts_error};

// --- moe_combine -----------------------------------------------------------------------------
// A row is one token: its k expert outputs, weights and expert ids (other tokens change the
// experts' loads, by which a reference set may order its sum).

enum { COMB_OUTS = 0, COMB_WEIGHTS = 1, COMB_IDS = 2, COMB_OUT = 3 };  // buffers

const op_shape moe_combine_cpu_shapes[] = {
    {.label = "D=2048 k=6 E=64", .moe_combine = {.D = 2048, .k = 6, .E = 64}, .max_M = 1024,
     .quick = true},
    // --exhaustive: either side of the by-load reference's k <= 2 (order-free) threshold
    {.label = "D=1030 k=2 E=8", .moe_combine = {.D = 1030, .k = 2, .E = 8}, .max_M = 1024,
     .exhaustive = true},
    {.label = "D=1030 k=3 E=8", .moe_combine = {.D = 1030, .k = 3, .E = 8}, .max_M = 1024,
     .exhaustive = true},
    {.label = NULL},
};
const op_shape moe_combine_cuda_shapes[] = {
    {.label = "D=2048 k=6 E=64", .moe_combine = {.D = 2048, .k = 6, .E = 64}, .quick = true},
    {.label = "D=7168 k=8 E=256", .moe_combine = {.D = 7168, .k = 8, .E = 256}},
    {.label = NULL},
};

// moe_combine_f32: the fp32 form (TP-size invariance): fp32 expert rows in, the weighted sum out
// unrounded.
static bool combine_f32(const op_case *c) { return c->section == &moe_combine_f32_op; }

static void moe_combine_declare(op_case *c) {
    int D = c->s->moe_combine.D, k = c->s->moe_combine.k;
    const int elem = combine_f32(c) ? sizeof(float) : sizeof(bf16);
    op_buffer_add(c, OP_ROW_IN, "combine expert_out", elem, k, D, D);
    op_buffer_add(c, OP_ROW_IN, "combine weights", sizeof(float), 1, k, k);
    op_buffer_add(c, OP_ROW_IN, "combine ids", sizeof(int32_t), 1, k, k);
    op_buffer_add(c, OP_OUT, "combine out", elem, 1, D, D);
}

static void moe_combine_row(const op_case *c, uint64_t seed, void *const *in) {
    int D = c->s->moe_combine.D, k = c->s->moe_combine.k;
    op_rng r = op_rng_from(seed, 14);
    if (combine_f32(c)) {
        float *e = in[COMB_OUTS];
        for (long i = 0; i < (long)k * D; i++) e[i] = op_rng_float(&r, -1.0f, 1.0f);
    } else {
        op_fill_bf16(in[COMB_OUTS], (long)k * D, &r, -1.0f, 1.0f);
    }
    float *w = in[COMB_WEIGHTS];
    for (int j = 0; j < k; j++) w[j] = op_rng_float(&r, 0.05f, 1.0f);
    op_distinct_ids(in[COMB_IDS], k, c->s->moe_combine.E, &r);
}

static moe_combine_args moe_combine_args_for(const op_case *c, int T, void *const *buf) {
    moe_combine_args a = {.topk_weights = buf[COMB_WEIGHTS], .topk_ids = buf[COMB_IDS], .T = T,
                          .k = c->s->moe_combine.k, .D = c->s->moe_combine.D, .E = c->s->moe_combine.E};
    if (combine_f32(c)) {
        a.expert_out_f32 = buf[COMB_OUTS];
        a.out_f32 = buf[COMB_OUT];
    } else {
        a.expert_out = buf[COMB_OUTS];
        a.out = buf[COMB_OUT];
    }
    return a;
}

static void moe_combine_call(op_case *c, const op_batch *b) {
    moe_combine_args a = moe_combine_args_for(c, b->M, b->dev);
    c->ops->moe_combine(c->ops, &a);
}

static double moe_combine_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->moe_combine.D;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)D * sizeof(double), "combine oracle");
    moe_combine_args a = moe_combine_args_for(c, 1, in);
    f64_moe_combine(&a, ref);
    double err = combine_f32(c) ? f64_rel_l2_f32(row, ref, D) : f64_rel_l2_bf16(row, ref, D);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section moe_combine_op = {moe_combine_declare, moe_combine_row, NULL, moe_combine_call,
                                   moe_combine_error};
const op_section moe_combine_f32_op = {moe_combine_declare, moe_combine_row, NULL, moe_combine_call,
                                       moe_combine_error};
