// kernels/cpu/rmsnorm.c — batch-invariant RMSNorm, as Hugging Face's DeepseekV2RMSNorm:
//   normed = bf16( x * 1/sqrt(mean(x²) + eps) ),  out = bf16( w * normed ).
// One row is one unit of work; its sum of squares is the lanes.h order over D.
#include <math.h>            // sqrtf

#include "../bf16.h"         // bf16_to_float, float_to_bf16, bf16_round
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_rmsnorm
#include "lanes.h"           // v4f, v4f_load_bf16, lanes_combine
#include "../../common/thread_pool.h"     // thread_pool_for

typedef struct {
    bf16 *out;
    long ld_out, ld_x;
    const bf16 *x, *w;
    int D;
    float eps;
} rmsnorm_job;

// sum x², lanes.h order.
static float sum_squares(const bf16 *x, int D) {
    v4f lo = v4f_splat(0.0f), hi = v4f_splat(0.0f);
    int k = 0;
    for (; k + 8 <= D; k += 8) {
        v4f a = v4f_load_bf16(x + k), b = v4f_load_bf16(x + k + 4);
        v4f a2 = a * a, b2 = b * b;
        lo += a2;
        hi += b2;
    }
    float sum = lanes_combine(lo, hi);
    for (; k < D; k++) {
        float v = bf16_to_float(x[k]);
        float v2 = v * v;
        sum += v2;
    }
    return sum;
}

static void rmsnorm_rows(void *arg, long begin, long end) {
    const rmsnorm_job *j = arg;
    for (long m = begin; m < end; m++) {
        const bf16 *x = j->x + m * j->ld_x;
        bf16 *out = j->out + m * j->ld_out;
        float var = sum_squares(x, j->D) / (float)j->D;
        float inv_rms = 1.0f / sqrtf(var + j->eps);
        for (int i = 0; i < j->D; i++) {
            float normed = bf16_round(bf16_to_float(x[i]) * inv_rms);
            out[i] = float_to_bf16(bf16_to_float(j->w[i]) * normed);
        }
    }
}

void inv_cpu_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                     const bf16 *w, int M, int D, float eps) {
    const cpu_ctx *ctx = ops->ctx;
    rmsnorm_job j = {out, ld_out ? ld_out : D, ld_x ? ld_x : D, x, w, D, eps};
    long order[] = {LANES, D};  // one row, one thread, lanes.h's order over D
    long shape[] = {D};
    fingerprint_note(ops->fingerprints, "rmsnorm", fingerprint_order(shape, 1),
                     fingerprint_order(order, 2), D % 8 != 0 ? "row-lanes+tail" : "row-lanes");
    thread_pool_for(ctx->pool, M, rmsnorm_rows, &j);
}
