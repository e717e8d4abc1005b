// kernels/cpu/gemm.c — batch-invariant GEMM: y = x · wᵀ (ops.h, gemm_args).
//
// Every y[m][n] is one lanes.h dot over K: 8 fp32 lanes, fixed tree, fixed tail. Blocking
// only decides which outputs are computed together and which thread computes them:
//   - a work unit is (batch entry, block of up to M_BLOCK rows, block of n_block columns);
//   - the unit converts its weight rows to an fp32 panel that fits in L2, and its x rows to fp32
//     (kept when the next unit of the thread has the same rows, as in decode);
//   - the micro-kernel computes 1 row × 4 columns at once, each column with its own 8 lanes;
//     the last N mod 4 columns use the 1-column dot, which is the same arithmetic.
// Units are split over threads by thread_pool_for; no sum is ever split.
#include <stdint.h>          // int32_t
#include <stdlib.h>          // free

#include "../bf16.h"         // float_to_bf16
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "../../common/check.h"        // invar_die, invar_malloc
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_gemm
#include "lanes.h"           // v4f, lanes_combine, lanes_dot_f32, lanes_bf16_to_f32
#include "../../common/thread_pool.h"     // thread_pool_for

enum {
    M_BLOCK = 64,            // rows per unit: x block of 64 rows stays in L2
    PANEL_FLOATS = 32768,    // 128 KiB of fp32 weights per unit
    N_BLOCK_MAX = 256,
};

typedef struct {
    const gemm_args *a;
    long ldx, ldy, ldw;      // resolved (0 -> dense)
    int batch;
    int m_blocks, n_blocks, n_block;
} gemm_plan;

// ---------------------------------------------------------------------------------------------
// Micro-kernel: y[0..3] = x · w[j] for 4 fp32 weight rows of a panel (row stride K).
// Per column exactly lanes_dot_f32's arithmetic.
// ---------------------------------------------------------------------------------------------

static void dot_1x4(const float *x, const float *w, int K, float y[4]) {
    const float *w0 = w, *w1 = w + K, *w2 = w + 2 * (long)K, *w3 = w + 3 * (long)K;
    v4f lo0 = v4f_splat(0.0f), hi0 = lo0, lo1 = lo0, hi1 = lo0;
    v4f lo2 = lo0, hi2 = lo0, lo3 = lo0, hi3 = lo0;
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        v4f x_lo = v4f_load(x + k), x_hi = v4f_load(x + k + 4);
        v4f p;
        p = x_lo * v4f_load(w0 + k);     lo0 += p;
        p = x_hi * v4f_load(w0 + k + 4); hi0 += p;
        p = x_lo * v4f_load(w1 + k);     lo1 += p;
        p = x_hi * v4f_load(w1 + k + 4); hi1 += p;
        p = x_lo * v4f_load(w2 + k);     lo2 += p;
        p = x_hi * v4f_load(w2 + k + 4); hi2 += p;
        p = x_lo * v4f_load(w3 + k);     lo3 += p;
        p = x_hi * v4f_load(w3 + k + 4); hi3 += p;
    }
    float s0 = lanes_combine(lo0, hi0), s1 = lanes_combine(lo1, hi1);
    float s2 = lanes_combine(lo2, hi2), s3 = lanes_combine(lo3, hi3);
    for (; k < K; k++) {
        float p0 = x[k] * w0[k], p1 = x[k] * w1[k], p2 = x[k] * w2[k], p3 = x[k] * w3[k];
        s0 += p0;
        s1 += p1;
        s2 += p2;
        s3 += p3;
    }
    y[0] = s0;
    y[1] = s1;
    y[2] = s2;
    y[3] = s3;
}

// ---------------------------------------------------------------------------------------------
// Work units
// ---------------------------------------------------------------------------------------------

static void store(const gemm_plan *p, int b, int m, int n, float v) {
    const gemm_args *a = p->a;
    long i = (long)b * a->stride_y + (long)m * p->ldy + n;
    if (a->y_f32)
        ((float *)a->y)[i] = v;
    else
        ((bf16 *)a->y)[i] = float_to_bf16(v);
}

static void gemm_units(void *arg, long begin, long end) {
    const gemm_plan *p = arg;
    const gemm_args *a = p->a;
    int K = a->K;
    float *panel =
            invar_malloc((size_t)p->n_block * (size_t)K * sizeof(float), "gemm weight panel");
    float *xs = invar_malloc((size_t)M_BLOCK * (size_t)K * sizeof(float), "gemm x block");
    long have_x = -1;                            // (batch, m block) whose rows xs holds
    long per_batch = (long)p->m_blocks * p->n_blocks;
    for (long u = begin; u < end; u++) {
        int b = (int)(u / per_batch);
        long r = u % per_batch;
        int mb = (int)(r / p->n_blocks), nb = (int)(r % p->n_blocks);
        int m0 = mb * M_BLOCK, m1 = m0 + M_BLOCK < a->M ? m0 + M_BLOCK : a->M;
        int n0 = nb * p->n_block, n1 = n0 + p->n_block < a->N ? n0 + p->n_block : a->N;

        long x_key = (long)b * p->m_blocks + mb;
        if (x_key != have_x) {
            for (int m = m0; m < m1; m++)
                lanes_bf16_to_f32(xs + (long)(m - m0) * K,
                                  a->x + (long)b * a->stride_x + (long)m * p->ldx, K);
            have_x = x_key;
        }
        for (int n = n0; n < n1; n++)
            lanes_bf16_to_f32(panel + (long)(n - n0) * K,
                              a->w + (long)b * a->stride_w + (long)n * p->ldw, K);

        int n4_end = n0 + (n1 - n0) / 4 * 4;
        for (int n = n0; n < n4_end; n += 4) {
            const float *w4 = panel + (long)(n - n0) * K;
            for (int m = m0; m < m1; m++) {
                float y[4];
                dot_1x4(xs + (long)(m - m0) * K, w4, K, y);
                for (int j = 0; j < 4; j++) store(p, b, m, n + j, y[j]);
            }
        }
        for (int n = n4_end; n < n1; n++)
            for (int m = m0; m < m1; m++)
                store(p, b, m, n,
                      lanes_dot_f32(xs + (long)(m - m0) * K, panel + (long)(n - n0) * K, K));
    }
    free(xs);
    free(panel);
}

void inv_cpu_gemm(ops_set *ops, const gemm_args *a) {
    if (a->M < 0 || a->N < 0 || a->K < 0 || a->batch < 0)
        invar_die(INVAR_EXIT_INPUT, "gemm: negative size (M=%d N=%d K=%d batch=%d)", a->M, a->N,
                  a->K, a->batch);
    if (a->M == 0 || a->N == 0) return;
    const cpu_ctx *ctx = ops->ctx;
    gemm_plan p = {
        .a = a,
        .ldx = a->ldx ? a->ldx : a->K,
        .ldy = a->ldy ? a->ldy : a->N,
        .ldw = a->ldw ? a->ldw : a->K,
        .batch = a->batch > 1 ? a->batch : 1,
        .m_blocks = (a->M + M_BLOCK - 1) / M_BLOCK,
    };
    // Panel width: fits PANEL_FLOATS, a multiple of 4, and leaves every thread some columns
    // when there are few rows (decode). Only the grouping of outputs depends on it.
    int n_block = a->K > 0 ? PANEL_FLOATS / a->K : N_BLOCK_MAX;
    int per_thread = (a->N + ctx->threads - 1) / ctx->threads;
    if (p.m_blocks * p.batch < ctx->threads && n_block > per_thread) n_block = per_thread;
    n_block = (n_block + 3) / 4 * 4;
    if (n_block < 4) n_block = 4;
    if (n_block > N_BLOCK_MAX) n_block = N_BLOCK_MAX;
    p.n_block = n_block;
    p.n_blocks = (a->N + n_block - 1) / n_block;
    // The order is lanes.h's dot over K: 8 lanes, their tree, the tail. The panel width and
    // the 4-column micro-kernel group outputs (the path), never the terms of one.
    long order[] = {LANES, a->K};
    long shape[] = {a->N, a->K, p.batch};
    bool tail = a->N % 4 != 0;
    fingerprint_note(ops->fingerprints, "gemm", fingerprint_order(shape, 3),
                     fingerprint_order(order, 2),
                     a->y_f32 ? (tail ? "f32+column-tail" : "f32") : (tail ? "bf16+column-tail" : "bf16"));
    thread_pool_for(ctx->pool, (long)p.batch * p.m_blocks * p.n_blocks, gemm_units, &p);
}
