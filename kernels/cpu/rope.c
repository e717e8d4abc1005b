// kernels/cpu/rope.c — rotary position embedding in place on bf16 rope slices (ops.h, rope).
//
// For pair i of a slice at position p, with c = cos[p][i], s = sin[p][i]:
//   interleave (DeepSeek):  a = x[2i], b = x[2i+1]  ->  x'[i] = a·c − b·s, x'[i + R/2] = b·c + a·s
//   rotate_half:            a = x[i],  b = x[i+R/2] ->  same outputs
// computed in fp32 and rounded to bf16 once per output. One (token, head) slice at a time.
#include "../bf16.h"         // bf16_to_float, float_to_bf16
#include "../../common/check.h"        // invar_die
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_rope
#include "../../common/thread_pool.h"     // thread_pool_for

enum { ROPE_MAX_DIM = 1024 };  // slice copied to the stack before it is overwritten

typedef struct {
    bf16 *x;
    long ld_token, ld_head;
    int H, R;
    const int32_t *pos;
    const float *cos, *sin;
    bool interleave;
} rope_job;

static void rope_slices(void *arg, long begin, long end) {
    const rope_job *j = arg;
    int half = j->R / 2;
    float in[ROPE_MAX_DIM];
    for (long u = begin; u < end; u++) {
        long t = u / j->H, h = u % j->H;
        bf16 *x = j->x + t * j->ld_token + h * j->ld_head;
        const float *c = j->cos + (long)j->pos[t] * half, *s = j->sin + (long)j->pos[t] * half;
        for (int i = 0; i < j->R; i++) in[i] = bf16_to_float(x[i]);
        for (int i = 0; i < half; i++) {
            float a = j->interleave ? in[2 * i] : in[i];
            float b = j->interleave ? in[2 * i + 1] : in[i + half];
            float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
            x[i] = float_to_bf16(ac - bs);
            x[i + half] = float_to_bf16(bc + as);
        }
    }
}

void inv_cpu_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                  const int32_t *pos, const float *cos, const float *sin, bool interleave) {
    if (R % 2 != 0 || R > ROPE_MAX_DIM)
        invar_die(INVAR_EXIT_INPUT, "rope: rope dim %d must be even and at most %d", R,
                  ROPE_MAX_DIM);
    for (int t = 0; t < T; t++)
        if (pos[t] < 0)
            invar_die(INVAR_EXIT_INPUT, "rope: token %d has negative position %d", t, pos[t]);
    const cpu_ctx *ctx = ops->ctx;
    rope_job j = {x, ld_token, ld_head, H, R, pos, cos, sin, interleave};
    thread_pool_for(ctx->pool, (long)T * H, rope_slices, &j);
}
