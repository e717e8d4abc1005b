// reference/cpu/mha_prefill_split_kv.c — non-absorbed prefill attention with flash-decoding's
// split-KV heuristic: when the query tokens are few (the grid of tokens × heads cannot fill
// the machine), each token's key range is cut into several splits, each with its own max,
// sum and accumulator, merged by log-sum-exp. The split count comes from the number of query
// tokens in the call, so a token's bits depend on how many others were prefilled with it.
#include "ref_cpu_ops.h"

#include <math.h>                           // expf, logf, INFINITY
#include <stdlib.h>                         // free

#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../common/check.h"            // invar_die, invar_malloc
#include "../../common/thread_pool.h"  // thread_pool_for
#include "../../kernels/order_log.h"        // order_log_note
#include "ref_cpu_set.h"                    // ref_cpu_policy_of
#include "../../kernels/cpu/inv_cpu.h"        // inv_cpu_pool, inv_cpu_threads

#define MIN_SPLIT_KEYS 16  // a split never shorter than this

int ref_mha_prefill_splits(int T, int keys) {
    int splits = T < 4 ? 4 : T < 32 ? 2 : 1;
    while (splits > 1 && keys / splits < MIN_SPLIT_KEYS) splits /= 2;
    return splits;
}

typedef struct {
    const mha_prefill_args *a;
    long ld_out, ld_q, ld_kv, ld_k_pe;
    int max_keys;
    int (*splits)(int T, int keys);  // the policy's rule
} mha_job;

// Keys [j0, j1) for query q of head h: the split's normalized output into o, its lse returned.
static float split_attend(const mha_job *jb, int h, const float *q, int j0, int j1,
                          float *scores, float *o) {
    const mha_prefill_args *a = jb->a;
    int width = a->nope + a->v;
    float m = -INFINITY;
    for (int j = j0; j < j1; j++) {
        const bf16 *k = a->kv + j * jb->ld_kv + (long)h * width;
        const bf16 *kr = a->k_pe + j * jb->ld_k_pe;
        float nope = 0.0f, pe = 0.0f;
        for (int d = 0; d < a->nope; d++) nope += q[d] * bf16_to_float(k[d]);
        for (int r = 0; r < a->R; r++) pe += q[a->nope + r] * bf16_to_float(kr[r]);
        float s = a->scale * (nope + pe);
        scores[j - j0] = s;
        if (s > m) m = s;
    }
    float sum = 0.0f;
    for (int d = 0; d < a->v; d++) o[d] = 0.0f;
    for (int j = j0; j < j1; j++) {
        const bf16 *val = a->kv + j * jb->ld_kv + (long)h * width + a->nope;
        float p = expf(scores[j - j0] - m);
        sum += p;
        for (int d = 0; d < a->v; d++) o[d] += p * bf16_to_float(val[d]);
    }
    for (int d = 0; d < a->v; d++) o[d] /= sum;
    return m + logf(sum);
}

// Work item i: query token i / H, head i % H.
static void mha_items(void *arg, long begin, long end) {
    const mha_job *jb = arg;
    const mha_prefill_args *a = jb->a;
    int qdim = a->nope + a->R;
    float *q = invar_malloc((size_t)qdim * sizeof(float), "mha query (reference)");
    float *scores = invar_malloc((size_t)(jb->max_keys > 0 ? jb->max_keys : 1) * sizeof(float),
                                 "mha scores (reference)");
    float *o = invar_malloc((size_t)a->v * sizeof(float), "mha split output (reference)");
    float *acc = invar_malloc((size_t)a->v * sizeof(float), "mha merged output (reference)");
    for (long i = begin; i < end; i++) {
        int t = (int)(i / a->H), h = (int)(i % a->H);
        const bf16 *qt = a->q + t * jb->ld_q + (long)h * qdim;
        for (int d = 0; d < qdim; d++) q[d] = bf16_to_float(qt[d]);
        int k0 = a->key_begin[t], k1 = a->key_end[t];
        int splits = jb->splits(a->T, k1 - k0);
        if (splits < 1) splits = 1;
        int len = k1 > k0 ? (k1 - k0 + splits - 1) / splits : 0;

        float e_max = -INFINITY, e_sum = 0.0f;
        for (int d = 0; d < a->v; d++) acc[d] = 0.0f;
        for (int s = 0; s < splits && len > 0; s++) {
            int j0 = k0 + s * len, j1 = j0 + len < k1 ? j0 + len : k1;
            if (j0 >= j1) continue;
            float lse = split_attend(jb, h, q, j0, j1, scores, o);
            float new_max = lse > e_max ? lse : e_max;
            float old_scale = expf(e_max - new_max), w = expf(lse - new_max);
            for (int d = 0; d < a->v; d++) acc[d] = acc[d] * old_scale + w * o[d];
            e_sum = e_sum * old_scale + w;
            e_max = new_max;
        }
        bf16 *out = a->out + t * jb->ld_out + (long)h * a->v;
        if (e_sum > 0.0f) {
            for (int d = 0; d < a->v; d++) out[d] = float_to_bf16(acc[d] / e_sum);
            a->lse[(long)t * a->H + h] = e_max + logf(e_sum);
        } else {  // no keys
            for (int d = 0; d < a->v; d++) out[d] = float_to_bf16(0.0f);
            a->lse[(long)t * a->H + h] = -INFINITY;
        }
    }
    free(q);
    free(scores);
    free(o);
    free(acc);
}

void ref_cpu_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    if (a->T < 0 || a->H <= 0 || a->nope < 0 || a->R < 0 || a->v <= 0)
        invar_die(INVAR_EXIT_INPUT, "mha_prefill (reference cpu): bad shape T=%d H=%d nope=%d "
                  "R=%d v=%d", a->T, a->H, a->nope, a->R, a->v);
    mha_job jb = {
        .a = a,
        .ld_out = a->ld_out ? a->ld_out : (long)a->H * a->v,
        .ld_q = a->ld_q ? a->ld_q : (long)a->H * (a->nope + a->R),
        .ld_kv = a->ld_kv ? a->ld_kv : (long)a->H * (a->nope + a->v),
        .ld_k_pe = a->ld_k_pe ? a->ld_k_pe : a->R,
        .splits = ref_cpu_policy_of(ops)->mha_prefill_splits,
    };
    for (int t = 0; t < a->T; t++) {
        if (a->key_begin[t] < 0 || a->key_end[t] < a->key_begin[t])
            invar_die(INVAR_EXIT_INPUT, "mha_prefill (reference cpu): token %d has key range "
                      "[%d, %d)", t, a->key_begin[t], a->key_end[t]);
        if (a->key_end[t] - a->key_begin[t] > jb.max_keys) jb.max_keys = a->key_end[t] - a->key_begin[t];
    }
    if (a->T == 0) return;
    // The count for keys without end: what the rule takes from the call's token count.
    order_log_note(ops->orders, ORDER_MHA_PREFILL,
                   (uint64_t)a->H << 40 | (uint64_t)a->nope << 20 | (uint64_t)a->v,
                   (uint64_t)jb.splits(a->T, 1 << 30));
    thread_pool_for(inv_cpu_pool(ops), (long)a->T * a->H, mha_items, &jb);
}
