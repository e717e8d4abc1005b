// harness/check/ops/per_token.c — the kernel checker's ops whose row is one token and whose inputs
// are that token's alone (harness/check/ops/op_section.h): rmsnorm, rope, embedding, residual_add,
// silu_mul.
#include <math.h>                   // cos, sin, pow
#include <stdlib.h>                 // free
#include <string.h>                 // memcpy

#include "../../../common/check.h" // invar_malloc
#include "../../../kernels/f64/f64.h" // f64_<op>, f64_rel_l2_bf16
#include "op_section.h"             // op_section, op_buffer_add, op_rng, op_fill_bf16

// --- rmsnorm ---------------------------------------------------------------------------------
// A row is one token's D values; out rows are D + pad apart (the pad must stay untouched).

#define RMS_EPS 1e-6f
enum { RMS_W = 0 };                 // shared
enum { RMS_X = 0, RMS_OUT = 1 };    // buffers

const op_shape rmsnorm_cpu_shapes[] = {
    {.label = "D=512", .rmsnorm = {.D = 512}},                              // kv_a_layernorm
    {.label = "D=2048 ld+8", .rmsnorm = {.D = 2048, .pad = 8}, .quick = true},  // V2-Lite hidden
    {.label = "D=7168", .rmsnorm = {.D = 7168}, .quick = true},             // V3 hidden
    {.label = "D=1030", .rmsnorm = {.D = 1030}},  // the D mod 8 tail
    // --exhaustive: all tail, one lane group, one over; either side of the blocked reference's
    // 32-element chunk and of 8 chunks of 32; a gap of odd width
    {.label = "D=7", .rmsnorm = {.D = 7}, .exhaustive = true},
    {.label = "D=8", .rmsnorm = {.D = 8}, .exhaustive = true},
    {.label = "D=9 ld+3", .rmsnorm = {.D = 9, .pad = 3}, .exhaustive = true},
    {.label = "D=31", .rmsnorm = {.D = 31}, .exhaustive = true},
    {.label = "D=33", .rmsnorm = {.D = 33}, .exhaustive = true},
    {.label = "D=255", .rmsnorm = {.D = 255}, .exhaustive = true},
    {.label = "D=257", .rmsnorm = {.D = 257}, .exhaustive = true},
    {.label = NULL},
};
const op_shape rmsnorm_cuda_shapes[] = {
    {.label = "D=512", .rmsnorm = {.D = 512}, .quick = true},
    {.label = "D=1536", .rmsnorm = {.D = 1536}},                            // q_a_layernorm
    {.label = "D=2048 ld+8", .rmsnorm = {.D = 2048, .pad = 8}, .quick = true},
    {.label = "D=7168", .rmsnorm = {.D = 7168}},
    {.label = NULL},
};

static void rmsnorm_declare(op_case *c) {
    int D = c->s->rmsnorm.D;
    op_shared_bf16(c, RMS_W, D, 0.5f, 1.5f, "rmsnorm w");
    op_buffer_add(c, OP_ROW_IN, "rmsnorm x", sizeof(bf16), 1, D, D);
    op_buffer_add(c, OP_OUT, "rmsnorm out", sizeof(bf16), 1, D, D + c->s->rmsnorm.pad);
}

static void rmsnorm_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 2);
    float scale = op_rng_float(&r, 0.1f, 4.0f);  // rows of other magnitudes
    if (op_rng_int(&r, 2))  // half the rows: a wide range, where the sum's order shows
        op_fill_bf16_wide(in[RMS_X], c->s->rmsnorm.D, &r, scale);
    else
        op_fill_bf16(in[RMS_X], c->s->rmsnorm.D, &r, -scale, scale);
}

static void rmsnorm_call(op_case *c, const op_batch *b) {
    int D = c->s->rmsnorm.D;
    c->ops->rmsnorm(c->ops, b->dev[RMS_OUT], D + c->s->rmsnorm.pad, b->dev[RMS_X], D,
                    c->shared[RMS_W], b->M, D, RMS_EPS);
}

static double rmsnorm_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->rmsnorm.D;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)D * sizeof(double), "rmsnorm oracle");
    f64_rmsnorm(ref, in[RMS_X], D, c->host[RMS_W], 1, D, RMS_EPS);
    double err = f64_rel_l2_bf16(row, ref, D);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section rmsnorm_op = {rmsnorm_declare, rmsnorm_row, NULL, rmsnorm_call, rmsnorm_error};

// --- rope ------------------------------------------------------------------------------------
// A row is one token: H heads of R rope values, heads R + 16 apart (the gap, as q_pe sits
// inside q, must stay untouched), rotated in place, and its position.

#define ROPE_GAP 16
enum { ROPE_COS = 0, ROPE_SIN = 1 };    // shared
enum { ROPE_X = 0, ROPE_POS = 1 };      // buffers

const op_shape rope_cpu_shapes[] = {
    {.label = "H=16 R=64 interleave",
     .rope = {.H = 16, .R = 64, .max_pos = 4096, .interleave = true}, .quick = true},
    {.label = "H=16 R=64 rotate_half", .rope = {.H = 16, .R = 64, .max_pos = 4096}},
    {.label = "H=1 R=64 interleave",  // k_pe: one head
     .rope = {.H = 1, .R = 64, .max_pos = 4096, .interleave = true}},
    // --exhaustive: the smallest rotation; V3's 128 heads
    {.label = "H=3 R=2 rotate_half", .rope = {.H = 3, .R = 2, .max_pos = 4096},
     .exhaustive = true},
    {.label = "H=128 R=64 interleave", .max_M = 256, .exhaustive = true,
     .rope = {.H = 128, .R = 64, .max_pos = 16384, .interleave = true}},
    {.label = NULL},
};
const op_shape rope_cuda_shapes[] = {
    {.label = "H=128 R=64 interleave",
     .rope = {.H = 128, .R = 64, .max_pos = 16384, .interleave = true}, .quick = true},
    {.label = "H=16 R=64 interleave",
     .rope = {.H = 16, .R = 64, .max_pos = 16384, .interleave = true}},
    {.label = "H=16 R=64 rotate_half", .rope = {.H = 16, .R = 64, .max_pos = 16384}},
    {.label = "H=1 R=64 interleave",
     .rope = {.H = 1, .R = 64, .max_pos = 16384, .interleave = true}},
    {.label = NULL},
};

// cos/sin [max_pos, R/2] as plain RoPE (theta 10000) with an mscale of 1.1 folded in.
static void rope_declare(op_case *c) {
    int H = c->s->rope.H, R = c->s->rope.R, P = c->s->rope.max_pos;
    size_t bytes = (size_t)P * (R / 2) * sizeof(float);
    float *cs = invar_malloc(bytes, "rope cos"), *sn = invar_malloc(bytes, "rope sin");
    for (int p = 0; p < P; p++)
        for (int i = 0; i < R / 2; i++) {
            double angle = p * pow(10000.0, -2.0 * i / R);
            cs[(size_t)p * (R / 2) + i] = (float)(1.1 * cos(angle));
            sn[(size_t)p * (R / 2) + i] = (float)(1.1 * sin(angle));
        }
    op_shared_take(c, ROPE_COS, cs, bytes, "rope cos");
    op_shared_take(c, ROPE_SIN, sn, bytes, "rope sin");
    op_buffer_add(c, OP_ROW_INOUT, "rope x", sizeof(bf16), H, R, R + ROPE_GAP);
    op_buffer_add(c, OP_ROW_IN, "rope positions", sizeof(int32_t), 1, 1, 1);
}

static void rope_row(const op_case *c, uint64_t seed, void *const *in) {
    int H = c->s->rope.H, R = c->s->rope.R;
    op_rng r = op_rng_from(seed, 3);
    for (int h = 0; h < H; h++)
        op_fill_bf16((bf16 *)in[ROPE_X] + (size_t)h * (R + ROPE_GAP), R, &r, -2.0f, 2.0f);
    *(int32_t *)in[ROPE_POS] = op_rng_int(&r, c->s->rope.max_pos);
}

static void rope_call(op_case *c, const op_batch *b) {
    int H = c->s->rope.H, R = c->s->rope.R;
    long ld_head = R + ROPE_GAP;
    c->ops->rope(c->ops, b->dev[ROPE_X], H * ld_head, ld_head, b->M, H, R, b->dev[ROPE_POS],
                 c->shared[ROPE_COS], c->shared[ROPE_SIN], c->s->rope.interleave);
}

static double rope_error(op_case *c, uint64_t seed, const void *row) {
    int H = c->s->rope.H, R = c->s->rope.R;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)H * R * sizeof(double), "rope oracle");
    bf16 *got = invar_malloc((size_t)H * R * sizeof(bf16), "rope output row");
    f64_rope(ref, in[ROPE_X], (long)H * (R + ROPE_GAP), R + ROPE_GAP, 1, H, R, in[ROPE_POS],
             c->host[ROPE_COS], c->host[ROPE_SIN], c->s->rope.interleave);
    for (int h = 0; h < H; h++)
        memcpy(got + (size_t)h * R, (const bf16 *)row + (size_t)h * (R + ROPE_GAP),
               (size_t)R * sizeof(bf16));
    double err = f64_rel_l2_bf16(got, ref, (long)H * R);
    op_row_free(c, in);
    free(ref);
    free(got);
    return err;
}

const op_section rope_op = {rope_declare, rope_row, NULL, rope_call, rope_error};

// --- embedding -------------------------------------------------------------------------------
// A row is one token id and its D values.

enum { EMB_TABLE = 0 };             // shared
enum { EMB_ID = 0, EMB_OUT = 1 };   // buffers

const op_shape embedding_cpu_shapes[] = {
    {.label = "V=4096 D=2048", .embedding = {.V = 4096, .D = 2048}, .quick = true},
    {.label = "V=3 D=9", .embedding = {.V = 3, .D = 9}, .exhaustive = true},  // rows repeat ids
    {.label = NULL},
};
const op_shape embedding_cuda_shapes[] = {
    {.label = "V=102400 D=2048", .embedding = {.V = 102400, .D = 2048}, .quick = true},  // V2-Lite
    {.label = "V=32000 D=7168", .embedding = {.V = 32000, .D = 7168}},
    {.label = NULL},
};

static void embedding_declare(op_case *c) {
    int V = c->s->embedding.V, D = c->s->embedding.D;
    op_shared_bf16(c, EMB_TABLE, (long)V * D, -1.0f, 1.0f, "embedding table");
    op_buffer_add(c, OP_ROW_IN, "embedding ids", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_OUT, "embedding out", sizeof(bf16), 1, D, D);
}

static void embedding_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 4);
    *(int32_t *)in[EMB_ID] = op_rng_int(&r, c->s->embedding.V);
}

static void embedding_call(op_case *c, const op_batch *b) {
    c->ops->embedding(c->ops, b->dev[EMB_OUT], c->shared[EMB_TABLE], b->dev[EMB_ID], b->M,
                      c->s->embedding.D);
}

static double embedding_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->embedding.D;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)D * sizeof(double), "embedding oracle");
    f64_embedding(ref, c->host[EMB_TABLE], in[EMB_ID], 1, D);
    double err = f64_rel_l2_bf16(row, ref, D);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section embedding_op = {embedding_declare, embedding_row, NULL, embedding_call,
                                 embedding_error};

// --- residual_add ----------------------------------------------------------------------------
// A row is one token's x and y (D values each); x = x + y in place over M * D values.

enum { RES_X = 0, RES_Y = 1 };      // buffers

const op_shape residual_add_cpu_shapes[] = {
    {.label = "D=2048", .residual_add = {.D = 2048}, .quick = true},
    {.label = "D=9", .residual_add = {.D = 9}, .exhaustive = true},  // off every vector width
    {.label = NULL},
};
const op_shape residual_add_cuda_shapes[] = {
    {.label = "D=2048", .residual_add = {.D = 2048}, .quick = true},
    {.label = "D=7168", .residual_add = {.D = 7168}},
    {.label = NULL},
};

static void residual_add_declare(op_case *c) {
    int D = c->s->residual_add.D;
    op_buffer_add(c, OP_ROW_INOUT, "residual x", sizeof(bf16), 1, D, D);
    op_buffer_add(c, OP_ROW_IN, "residual y", sizeof(bf16), 1, D, D);
}

static void residual_add_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 5);
    op_fill_bf16(in[RES_X], c->s->residual_add.D, &r, -4.0f, 4.0f);
    op_fill_bf16(in[RES_Y], c->s->residual_add.D, &r, -1.0f, 1.0f);
}

static void residual_add_call(op_case *c, const op_batch *b) {
    c->ops->residual_add(c->ops, b->dev[RES_X], b->dev[RES_Y], (long)b->M * c->s->residual_add.D);
}

static double residual_add_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->residual_add.D;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)D * sizeof(double), "residual oracle");
    f64_residual_add(ref, in[RES_X], in[RES_Y], D);
    double err = f64_rel_l2_bf16(row, ref, D);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section residual_add_op = {residual_add_declare, residual_add_row, NULL,
                                    residual_add_call, residual_add_error};

// --- silu_mul --------------------------------------------------------------------------------
// A row is one token's gate and up (2I values) and its I outputs.

enum { SILU_GATE_UP = 0, SILU_OUT = 1 };  // buffers

const op_shape silu_mul_cpu_shapes[] = {
    {.label = "I=1408", .silu_mul = {.I = 1408}, .quick = true},       // V2-Lite expert
    {.label = "I=9", .silu_mul = {.I = 9}, .exhaustive = true},        // off every vector width
    {.label = NULL},
};
const op_shape silu_mul_cuda_shapes[] = {
    {.label = "I=1408", .silu_mul = {.I = 1408}, .quick = true},
    {.label = "I=64", .silu_mul = {.I = 64}},                          // grids of 1 to 1024 blocks
    {.label = "I=10944", .silu_mul = {.I = 10944}},                    // V2-Lite dense MLP
    {.label = "I=18432", .silu_mul = {.I = 18432}, .max_M = 1024},     // V3 dense MLP
    {.label = NULL},
};

static void silu_mul_declare(op_case *c) {
    int I = c->s->silu_mul.I;
    op_buffer_add(c, OP_ROW_IN, "silu_mul gate_up", sizeof(bf16), 1, 2L * I, 2L * I);
    op_buffer_add(c, OP_OUT, "silu_mul out", sizeof(bf16), 1, I, I);
}

static void silu_mul_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 6);
    int I = c->s->silu_mul.I;
    // Gates over every bf16 exponent up to 2^7 (silu is x or 0 beyond): a fast exp shows at
    // a few of them, mostly large ones; ups of one magnitude keep that difference visible.
    op_fill_bf16_patterns(in[SILU_GATE_UP], I, &r, 128.0f);
    op_fill_bf16((bf16 *)in[SILU_GATE_UP] + I, I, &r, 1.0f, 2.0f);
}

static void silu_mul_call(op_case *c, const op_batch *b) {
    c->ops->silu_mul(c->ops, b->dev[SILU_OUT], b->dev[SILU_GATE_UP], b->M, c->s->silu_mul.I);
}

static double silu_mul_error(op_case *c, uint64_t seed, const void *row) {
    int I = c->s->silu_mul.I;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)I * sizeof(double), "silu_mul oracle");
    f64_silu_mul(ref, in[SILU_GATE_UP], 1, I);
    double err = f64_rel_l2_bf16(row, ref, I);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section silu_mul_op = {silu_mul_declare, silu_mul_row, NULL, silu_mul_call,
                                silu_mul_error};
