// kernels/cpu/mha_prefill.c — plain multi-head prefill attention with log-sum-exp, and the
// merge of two partial results (ops.h, mha_prefill_args / merge_attention_args). These serve
// the split-prefill attention backend (vLLM TRITON_MLA's shape: cached context and new tokens
// attended separately, then merged). Each (token, head) is one unit of work reduced in one
// order over its key range, so the kernels are batch-invariant; what is not invariant is the
// backend's choice of ranges, which depends on the cache and the chunking.
#include <math.h>            // expf, logf, INFINITY
#include <stdlib.h>          // free

#include "../bf16.h"         // float_to_bf16, bf16_to_float
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "../../common/check.h"        // invar_malloc
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_mha_prefill, inv_cpu_merge_attention
#include "lanes.h"           // lanes_dot_f32_bf16, lanes_bf16_to_f32
#include "../../common/thread_pool.h"     // thread_pool_for

// ---------------------------------------------------------------------------------------------
// Prefill attention: keys in increasing order, online softmax one key at a time
// ---------------------------------------------------------------------------------------------

static void prefill_units(void *arg, long begin, long end) {
    const mha_prefill_args *a = arg;
    int qh = a->nope + a->R, kvh = a->nope + a->v;
    // This range's own scratch: q [nope + R], acc [v].
    float *q = invar_malloc((size_t)(qh + a->v) * sizeof(float), "mha_prefill scratch");
    float *acc = q + qh;
    for (long u = begin; u < end; u++) {
        int t = (int)(u / a->H), h = (int)(u % a->H);
        lanes_bf16_to_f32(q, a->q + t * a->ld_q + (long)h * qh, qh);
        float m = -INFINITY, l = 0.0f;
        for (int i = 0; i < a->v; i++) acc[i] = 0.0f;
        for (int k = a->key_begin[t]; k < a->key_end[t]; k++) {
            const bf16 *kv = a->kv + (long)k * a->ld_kv + (long)h * kvh;
            float nope = lanes_dot_f32_bf16(q, kv, a->nope);
            float rope = lanes_dot_f32_bf16(q + a->nope, a->k_pe + (long)k * a->ld_k_pe, a->R);
            float s = a->scale * (nope + rope);
            float m_new = s > m ? s : m;
            float alpha = expf(m - m_new), p = expf(s - m_new);
            l = l * alpha + p;
            for (int i = 0; i < a->v; i++) {
                float term = p * bf16_to_float(kv[a->nope + i]);
                acc[i] = acc[i] * alpha + term;
            }
            m = m_new;
        }
        bf16 *out = a->out + t * a->ld_out + (long)h * a->v;
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int i = 0; i < a->v; i++) out[i] = float_to_bf16(acc[i] * inv);
        a->lse[(long)t * a->H + h] = l > 0.0f ? m + logf(l) : -INFINITY;
    }
    free(q);
}

void inv_cpu_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    long order[] = {1, LANES};  // one key at a time in increasing order, lanes.h dots
    long shape[] = {a->H, a->nope, a->R, a->v};
    fingerprint_note(ops->fingerprints, "mha_prefill", fingerprint_order(shape, 4),
                     fingerprint_order(order, 2), "online-softmax");
    const cpu_ctx *ctx = ops->ctx;
    thread_pool_for(ctx->pool, (long)a->T * a->H, prefill_units, (void *)a);
}

// ---------------------------------------------------------------------------------------------
// Merge of two partial results by their log-sum-exp
// ---------------------------------------------------------------------------------------------

static void merge_rows(void *arg, long begin, long end) {
    const merge_attention_args *a = arg;
    for (long u = begin; u < end; u++) {
        long t = u / a->H, h = u % a->H;
        float la = a->lse_a[u], lb = a->lse_b[u];
        float m = la > lb ? la : lb;
        float wa = la == -INFINITY ? 0.0f : expf(la - m);
        float wb = lb == -INFINITY ? 0.0f : expf(lb - m);
        float inv = wa + wb > 0.0f ? 1.0f / (wa + wb) : 0.0f;  // both empty: zeros, never NaN
        const bf16 *pa = a->a + t * a->ld + h * a->v, *pb = a->b + t * a->ld + h * a->v;
        bf16 *out = a->out + t * a->ld + h * a->v;
        for (int i = 0; i < a->v; i++) {
            float sa = wa * bf16_to_float(pa[i]), sb = wb * bf16_to_float(pb[i]);
            out[i] = float_to_bf16((sa + sb) * inv);
        }
    }
}

void inv_cpu_merge_attention(ops_set *ops, const merge_attention_args *a) {
    long order[] = {2};  // a's product, then b's, then the scale: one formula for every row
    long shape[] = {a->H, a->v};
    fingerprint_note(ops->fingerprints, "merge_attention", fingerprint_order(shape, 2),
                     fingerprint_order(order, 1), "row");
    const cpu_ctx *ctx = ops->ctx;
    thread_pool_for(ctx->pool, (long)a->T * a->H, merge_rows, (void *)a);
}
