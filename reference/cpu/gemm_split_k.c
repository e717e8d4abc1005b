// reference/cpu/gemm_split_k.c — GEMM as a BLAS heuristic runs it: the kernel is chosen from
// M, N, K and the thread count. Few rows cannot fill the threads with output tiles, so K is
// split and the parts' fp32 sums added afterwards (split-K); more rows get wider register
// blocking (more interleaved accumulators). Either way a row's sum is reassociated when M
// changes: the same row has other bits alone than inside a batch.
//
// Each output element is still computed by one work item, parts in order, so for a given
// plan the result does not depend on how the pool cut the work.
#include "ref_cpu_ops.h"

#include <stdlib.h>                         // free

#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../common/check.h"            // invar_die, invar_malloc
#include "../../common/thread_pool.h"  // thread_pool_for
#include "../../kernels/order_log.h"        // order_log_note
#include "ref_cpu_set.h"                    // ref_cpu_policy_of
#include "../../kernels/cpu/inv_cpu.h"        // inv_cpu_pool, inv_cpu_threads

#define TILE_M 16  // output tile of the heuristic's "does the grid fill the machine" test
#define TILE_N 64  // also the columns of one work item
#define MIN_PART 16 // a K part never shorter than this

// --- the heuristic ---------------------------------------------------------------------------

ref_gemm_plan ref_gemm_plan_for(int M, int N, int K, int threads) {
    ref_gemm_plan p;
    if (M < 4) {            // GEMV-like: memory bound, split K four ways
        p.splits = 4;
        p.lanes = 1;
    } else if (M < 32) {    // skinny: split K in two, 4-wide accumulators
        p.splits = 2;
        p.lanes = 4;
    } else if (M < 128) {   // medium tiles
        p.splits = 1;
        p.lanes = 8;
    } else {                // large tiles
        p.splits = 1;
        p.lanes = 16;
    }
    // When the output tiles cannot keep every thread busy, split K further.
    long tiles = (long)((M + TILE_M - 1) / TILE_M) * ((N + TILE_N - 1) / TILE_N);
    while (p.splits < 16 && tiles * p.splits < threads) p.splits *= 2;
    while (p.splits > 1 && K / p.splits < MIN_PART) p.splits /= 2;
    return p;
}

// --- dot products ----------------------------------------------------------------------------

// Sum of x[k] * w[k] over [k0, k1) in LANES interleaved accumulators folded pairwise, for ROWS
// (1 or 2) rows of x against one row of w: part[r] for row r. Each row's sum is its own chain
// in the one-row order, so a pair has the bits of two single rows; w is loaded and widened
// once for both. LANES and ROWS are constants at each call site, so the loops unroll.
static inline void part_sums(const float *x0, const float *x1, const bf16 *w, int k0, int k1,
                             int LANES, int ROWS, float part[2]) {
    float a0[REF_GEMM_MAX_LANES] = {0}, a1[REF_GEMM_MAX_LANES] = {0};
    int k = k0;
    for (; k + LANES <= k1; k += LANES)
#pragma GCC unroll 16
        for (int l = 0; l < LANES; l++) {
            float wv = bf16_to_float(w[k + l]);
            a0[l] += x0[k + l] * wv;
            if (ROWS == 2) a1[l] += x1[k + l] * wv;
        }
    for (int l = 0; k < k1; k++, l++) {
        float wv = bf16_to_float(w[k]);
        a0[l] += x0[k] * wv;
        if (ROWS == 2) a1[l] += x1[k] * wv;
    }
#pragma GCC unroll 4
    for (int width = LANES / 2; width >= 1; width /= 2)
#pragma GCC unroll 8
        for (int l = 0; l < width; l++) {
            a0[l] += a0[l + width];
            if (ROWS == 2) a1[l] += a1[l + width];
        }
    part[0] = a0[0];
    if (ROWS == 2) part[1] = a1[0];
}

// Two rows share w only up to 8 lanes: 2 x 16 accumulators spill out of the registers.
static int rows_at_once(ref_gemm_plan p) { return p.lanes <= 8 ? 2 : 1; }

// The plan's split-K dot product of rows (<= rows_at_once) rows of x with one row of w, into
// out[r]: parts in order, their fp32 partials added in part order.
static void dots_split(const float *x0, const float *x1, const bf16 *w, int K, ref_gemm_plan p,
                       int rows, float out[2]) {
    int part = (K + p.splits - 1) / p.splits;
    out[0] = out[1] = 0.0f;
    for (int s = 0; s < p.splits; s++) {
        int k0 = s * part, k1 = k0 + part < K ? k0 + part : K;
        float partial[2] = {0.0f, 0.0f};
#define PART_SUMS(L) rows == 2 ? part_sums(x0, x1, w, k0, k1, L, 2, partial) \
                               : part_sums(x0, x1, w, k0, k1, L, 1, partial)
        if (k0 < k1) switch (p.lanes) {
            case 1: PART_SUMS(1); break;
            case 4: PART_SUMS(4); break;
            case 8: PART_SUMS(8); break;
            default: part_sums(x0, x1, w, k0, k1, 16, 1, partial); break;
        }
#undef PART_SUMS
        out[0] += partial[0];  // the split-K reduction
        out[1] += partial[1];
    }
}

// --- the parallel loop -----------------------------------------------------------------------

typedef struct {
    const gemm_args *a;
    long ldx, ldy, ldw;
    int col_blocks;
    ref_gemm_plan plan;
} gemm_job;

// Work item i: batch entry, group of rows_at_once rows (the last short when M is not a
// multiple) and block of TILE_N columns.
static void gemm_items(void *arg, long begin, long end) {
    const gemm_job *j = arg;
    const gemm_args *a = j->a;
    int K = a->K > 0 ? a->K : 1, step = rows_at_once(j->plan), groups = (a->M + step - 1) / step;
    float *xf = invar_malloc((size_t)2 * K * sizeof(float), "gemm rows (reference)");
    for (long i = begin; i < end; i++) {
        long group_item = i / j->col_blocks;
        int cb = (int)(i % j->col_blocks);
        int b = (int)(group_item / groups), m = step * (int)(group_item % groups);
        int rows = m + step <= a->M ? step : a->M - m;
        const bf16 *w = a->w + b * a->stride_w;
        for (int r = 0; r < rows; r++) {
            const bf16 *x = a->x + b * a->stride_x + (m + r) * j->ldx;
            for (int k = 0; k < a->K; k++) xf[r * K + k] = bf16_to_float(x[k]);
        }
        int n0 = cb * TILE_N, n1 = n0 + TILE_N < a->N ? n0 + TILE_N : a->N;
        for (int n = n0; n < n1; n++) {
            float v[2];
            dots_split(xf, xf + K, w + n * j->ldw, a->K, j->plan, rows, v);
            for (int r = 0; r < rows; r++) {
                long at = b * a->stride_y + (m + r) * j->ldy + n;
                if (a->y_f32) ((float *)a->y)[at] = v[r];
                else ((bf16 *)a->y)[at] = float_to_bf16(v[r]);
            }
        }
    }
    free(xf);
}

void ref_cpu_gemm_planned(ops_set *ops, const gemm_args *a, ref_gemm_plan plan) {
    if (a->M < 0 || a->N < 0 || a->K < 0 || a->batch < 0)
        invar_die(INVAR_EXIT_INPUT, "gemm (reference cpu): negative size M=%d N=%d K=%d batch=%d",
                  a->M, a->N, a->K, a->batch);
    gemm_job j = {
        .a = a,
        .ldx = a->ldx ? a->ldx : a->K,
        .ldy = a->ldy ? a->ldy : a->N,
        .ldw = a->ldw ? a->ldw : a->K,
        .col_blocks = (a->N + TILE_N - 1) / TILE_N,
    };
    if (j.ldx < a->K || j.ldy < a->N || j.ldw < a->K)
        invar_die(INVAR_EXIT_INPUT, "gemm (reference cpu): row stride shorter than a row "
                  "(ldx=%ld K=%d, ldy=%ld N=%d, ldw=%ld K=%d)", j.ldx, a->K, j.ldy, a->N, j.ldw, a->K);
    int batch = a->batch > 1 ? a->batch : 1;
    if (a->M == 0 || a->N == 0) return;
    j.plan = plan;
    int step = rows_at_once(plan);
    thread_pool_for(inv_cpu_pool(ops), (long)batch * ((a->M + step - 1) / step) * j.col_blocks,
                    gemm_items, &j);
}

uint64_t ref_gemm_plan_key(ref_gemm_plan p) { return (uint64_t)p.splits << 8 | (uint64_t)p.lanes; }

void ref_cpu_gemm(ops_set *ops, const gemm_args *a) {
    ref_gemm_plan plan = ref_cpu_policy_of(ops)->gemm_plan(a->M, a->N, a->K, inv_cpu_threads(ops));
    order_log_note(ops->orders, ORDER_GEMM, (uint64_t)a->N << 32 | (uint32_t)a->K,
                   ref_gemm_plan_key(plan));
    ref_cpu_gemm_planned(ops, a, plan);
}
