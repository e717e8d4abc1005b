// kernels/cpu/elementwise.c — ops without a reduction, invariant by nature: embedding lookup,
// residual add, SiLU-and-multiply. Each output value is one rounding of fp32 arithmetic on
// its own inputs; threads take contiguous ranges of rows (or elements).
#include <math.h>            // expf
#include <string.h>          // memcpy

#include "../bf16.h"         // bf16_to_float, float_to_bf16, bf16_round
#include "../../common/check.h"        // invar_die
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_embedding, inv_cpu_residual_add, inv_cpu_silu_mul
#include "../../common/thread_pool.h"     // thread_pool_for

// ---------------------------------------------------------------------------------------------
// embedding: out[t] = table[ids[t]]
// ---------------------------------------------------------------------------------------------

typedef struct {
    bf16 *out;
    const bf16 *table;
    const int32_t *ids;
    int D;
} embedding_job;

static void embedding_rows(void *arg, long begin, long end) {
    const embedding_job *j = arg;
    for (long t = begin; t < end; t++)
        memcpy(j->out + t * j->D, j->table + (long)j->ids[t] * j->D, (size_t)j->D * sizeof(bf16));
}

void inv_cpu_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T,
                       int D) {
    for (int t = 0; t < T; t++)
        if (ids[t] < 0)
            invar_die(INVAR_EXIT_INPUT, "embedding: token %d has negative id %d", t, ids[t]);
    const cpu_ctx *ctx = ops->ctx;
    embedding_job j = {out, table, ids, D};
    thread_pool_for(ctx->pool, T, embedding_rows, &j);
}

// ---------------------------------------------------------------------------------------------
// residual_add: x = bf16(x + y)
// ---------------------------------------------------------------------------------------------

typedef struct {
    bf16 *x;
    const bf16 *y;
} residual_job;

static void residual_range(void *arg, long begin, long end) {
    const residual_job *j = arg;
    for (long i = begin; i < end; i++)
        j->x[i] = float_to_bf16(bf16_to_float(j->x[i]) + bf16_to_float(j->y[i]));
}

void inv_cpu_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n) {
    const cpu_ctx *ctx = ops->ctx;
    residual_job j = {x, y};
    thread_pool_for(ctx->pool, n, residual_range, &j);
}

// ---------------------------------------------------------------------------------------------
// add_f32: x = x + y; round_to_bf16: out = bf16(x) (TP-size invariance's slice sums)
// ---------------------------------------------------------------------------------------------

typedef struct {
    float *x;
    const float *y;
    bf16 *out;
} f32_job;

static void add_f32_range(void *arg, long begin, long end) {
    const f32_job *j = arg;
    for (long i = begin; i < end; i++) j->x[i] += j->y[i];
}

void inv_cpu_add_f32(ops_set *ops, float *x, const float *y, long n) {
    const cpu_ctx *ctx = ops->ctx;
    f32_job j = {.x = x, .y = y};
    thread_pool_for(ctx->pool, n, add_f32_range, &j);
}

static void round_range(void *arg, long begin, long end) {
    const f32_job *j = arg;
    for (long i = begin; i < end; i++) j->out[i] = float_to_bf16(j->y[i]);
}

// sum_slices_f32: the pairwise tree over n slices, element by element, in add_f32's adds.
typedef struct {
    float *parts;
    int n;
    long len;
} tree_job;

static void tree_range(void *arg, long begin, long end) {
    const tree_job *j = arg;
    for (long i = begin; i < end; i++) {
        float v[8];
        for (int s = 0; s < j->n; s++) v[s] = j->parts[(long)s * j->len + i];
        for (int stride = 1; stride < j->n; stride *= 2)
            for (int s = 0; s + stride < j->n; s += 2 * stride) v[s] += v[s + stride];
        j->parts[i] = v[0];
    }
}

void inv_cpu_sum_slices_f32(ops_set *ops, float *parts, int n, long len) {
    if (n < 1 || n > 8 || (n & (n - 1)) != 0)
        invar_die(INVAR_EXIT_INPUT, "sum_slices_f32: %d slices: the tree needs 1, 2, 4 or 8", n);
    const cpu_ctx *ctx = ops->ctx;
    tree_job j = {.parts = parts, .n = n, .len = len};
    if (n > 1) thread_pool_for(ctx->pool, len, tree_range, &j);
}

void inv_cpu_round_to_bf16(ops_set *ops, bf16 *out, const float *x, long n) {
    const cpu_ctx *ctx = ops->ctx;
    f32_job j = {.y = x, .out = out};
    thread_pool_for(ctx->pool, n, round_range, &j);
}

// ---------------------------------------------------------------------------------------------
// silu_mul: out[m, i] = bf16( bf16(silu(gate)) * up ), silu(g) = g / (1 + e^-g)
// ---------------------------------------------------------------------------------------------

typedef struct {
    bf16 *out;
    const bf16 *gate_up;
    int I;
} silu_job;

static void silu_rows(void *arg, long begin, long end) {
    const silu_job *j = arg;
    for (long m = begin; m < end; m++) {
        const bf16 *gate = j->gate_up + m * 2 * j->I, *up = gate + j->I;
        bf16 *out = j->out + m * j->I;
        for (int i = 0; i < j->I; i++) {
            float g = bf16_to_float(gate[i]);
            float silu = bf16_round(g / (1.0f + expf(-g)));  // torch rounds silu's output
            out[i] = float_to_bf16(silu * bf16_to_float(up[i]));
        }
    }
}

void inv_cpu_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I) {
    const cpu_ctx *ctx = ops->ctx;
    silu_job j = {out, gate_up, I};
    thread_pool_for(ctx->pool, M, silu_rows, &j);
}
