// reference/cpu/mla_split_kv.c — absorbed MLA attention with split-KV decoding, as vLLM's
// TRITON_MLA backend does it: the number of KV splits comes from the batch's LONGEST
// sequence, each split keeps its own max, sum and accumulator, and a second stage merges the
// splits by log-sum-exp. A token's keys are therefore cut at places that depend on which
// other sequences share its batch.
//
// TRITON_MLA's rule alone gives one split below 512 tokens, which would hide the effect on
// CI-sized sequences; so past 64 tokens at least two splits are used, and the split length
// is ceil(max_seq_len / num_splits) rounded up to 16 (a fixed split COUNT, the thing the
// invariant contract forbids). A caller that schedules splits itself passes kv_split_size,
// and then the splits are that long, whatever the batch.
#include "ref_cpu_ops.h"

#include <math.h>                           // expf, logf, INFINITY
#include <stdlib.h>                         // free

#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../common/check.h"            // invar_die, invar_malloc
#include "../../common/thread_pool.h"  // thread_pool_for
#include "../../kernels/order_log.h"        // order_log_note
#include "ref_cpu_set.h"                    // ref_cpu_policy_of
#include "../../kernels/cpu/inv_cpu.h"        // inv_cpu_pool, inv_cpu_threads
#include "../../kernels/cpu/lanes.h"          // v4f, v4f_load_bf16: 4 elements' own arithmetic

#define TOKENS_PER_SPLIT 512  // TRITON_MLA: one split per 512 tokens of the longest sequence
#define MIN_TWO_SPLITS 64     // longer than this: never fewer than two splits
#define SPLIT_ALIGN 16

static int next_pow2(int v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

int ref_mla_num_kv_splits(int max_seq_len, int threads) {
    int per_len = max_seq_len / TOKENS_PER_SPLIT;
    int splits = next_pow2(per_len > 1 ? per_len : 1);
    int cap = 2 * (threads > 0 ? threads : 1);
    if (splits > cap) splits = cap;
    if (max_seq_len > MIN_TWO_SPLITS && splits < 2) splits = 2;
    return splits;
}

int ref_mla_split_len(int max_seq_len, int num_splits) {
    int len = max_seq_len > 0 ? (max_seq_len + num_splits - 1) / num_splits : 1;
    return (len + SPLIT_ALIGN - 1) / SPLIT_ALIGN * SPLIT_ALIGN;
}

typedef struct {
    const mla_attention_args *a;
    int num_splits, split_len;
    int max_keys;  // most keys any query token attends to: the score scratch
} mla_job;

// The cache entry (L latent values, then R rope values) of position j of sequence `seq`.
static const bf16 *cache_entry(const mla_attention_args *a, int seq, int j) {
    int index = j / a->block_size;
    int block = index < a->max_blocks_per_seq
                    ? a->block_table[(long)seq * a->max_blocks_per_seq + index] : -1;
    if (block < 0)
        invar_die(INVAR_EXIT_INPUT, "mla_attention (reference cpu): position %d of sequence %d "
                  "has no cache block", j, seq);
    long slot = (long)block * a->block_size + j % a->block_size;
    return a->kv_cache + slot * (a->L + a->R);
}

// One key's score: the latent dot, then the rope dot, each one chain in increasing index.
static float score_one(const mla_attention_args *a, const bf16 *e, const float *ql, const float *qp) {
    float lat = 0.0f, pe = 0.0f;
    for (int l = 0; l < a->L; l++) lat += ql[l] * bf16_to_float(e[l]);
    for (int r = 0; r < a->R; r++) pe += qp[r] * bf16_to_float(e[a->L + r]);
    return a->scale * (lat + pe);
}

// Four keys' scores at once: four chains side by side, each exactly score_one's (the speed is
// the chains' overlap, make check's reference cases spend most of their time here).
static void score_four(const mla_attention_args *a, const bf16 *const e[4], const float *ql,
                       const float *qp, float s[4]) {
    float lat0 = 0.0f, lat1 = 0.0f, lat2 = 0.0f, lat3 = 0.0f;
    for (int l = 0; l < a->L; l++) {
        float q = ql[l];
        lat0 += q * bf16_to_float(e[0][l]);
        lat1 += q * bf16_to_float(e[1][l]);
        lat2 += q * bf16_to_float(e[2][l]);
        lat3 += q * bf16_to_float(e[3][l]);
    }
    float pe0 = 0.0f, pe1 = 0.0f, pe2 = 0.0f, pe3 = 0.0f;
    for (int r = 0; r < a->R; r++) {
        float q = qp[r];
        pe0 += q * bf16_to_float(e[0][a->L + r]);
        pe1 += q * bf16_to_float(e[1][a->L + r]);
        pe2 += q * bf16_to_float(e[2][a->L + r]);
        pe3 += q * bf16_to_float(e[3][a->L + r]);
    }
    s[0] = a->scale * (lat0 + pe0);
    s[1] = a->scale * (lat1 + pe1);
    s[2] = a->scale * (lat2 + pe2);
    s[3] = a->scale * (lat3 + pe3);
}

// o[l] += p * c_kv[l] for every l, the products and sums rounded one by one (4 lanes of l at a
// time: each lane is its own element's arithmetic).
static void accumulate(float *o, float p, const bf16 *e, int L) {
    int l = 0;
    v4f pv = v4f_splat(p);
    for (; l + 4 <= L; l += 4) {
        v4f prod = pv * v4f_load_bf16(e + l);
        v4f_store(o + l, v4f_load(o + l) + prod);
    }
    for (; l < L; l++) o[l] += p * bf16_to_float(e[l]);
}

// Stage 1 over keys [j0, j1): the split's normalized output into o, its log-sum-exp returned.
static float split_attend(const mla_attention_args *a, int seq, int j0, int j1, const float *ql,
                          const float *qp, float *scores, float *o) {
    float m = -INFINITY;
    int j = j0;
    for (; j + 4 <= j1; j += 4) {
        const bf16 *e[4] = {cache_entry(a, seq, j), cache_entry(a, seq, j + 1),
                            cache_entry(a, seq, j + 2), cache_entry(a, seq, j + 3)};
        score_four(a, e, ql, qp, scores + (j - j0));
    }
    for (; j < j1; j++) scores[j - j0] = score_one(a, cache_entry(a, seq, j), ql, qp);
    for (j = j0; j < j1; j++)
        if (scores[j - j0] > m) m = scores[j - j0];
    float sum = 0.0f;
    for (int l = 0; l < a->L; l++) o[l] = 0.0f;
    for (j = j0; j < j1; j++) {
        float p = expf(scores[j - j0] - m);
        sum += p;
        accumulate(o, p, cache_entry(a, seq, j), a->L);
    }
    for (int l = 0; l < a->L; l++) o[l] /= sum;
    return m + logf(sum);
}

// Work item i: query token i / H, head i % H.
static void mla_items(void *arg, long begin, long end) {
    const mla_job *jb = arg;
    const mla_attention_args *a = jb->a;
    float *ql = invar_malloc((size_t)a->L * sizeof(float), "mla query (reference)");
    float *qp = invar_malloc((size_t)(a->R > 0 ? a->R : 1) * sizeof(float), "mla query rope (reference)");
    float *scores = invar_malloc((size_t)jb->max_keys * sizeof(float), "mla scores (reference)");
    float *o = invar_malloc((size_t)a->L * sizeof(float), "mla split output (reference)");
    float *acc = invar_malloc((size_t)a->L * sizeof(float), "mla merged output (reference)");
    for (long i = begin; i < end; i++) {
        int t = (int)(i / a->H), h = (int)(i % a->H);
        int seq = a->token_seq[t], pos = a->token_pos[t];
        if (seq < 0 || seq >= a->num_seqs || pos < 0)
            invar_die(INVAR_EXIT_INPUT, "mla_attention (reference cpu): token %d has sequence %d "
                      "of %d, position %d", t, seq, a->num_seqs, pos);
        const bf16 *q = a->q_lat + t * a->ld_q_lat + (long)h * a->L;
        const bf16 *qr = a->q_pe + t * a->ld_q_pe + h * a->head_stride_q_pe;
        for (int l = 0; l < a->L; l++) ql[l] = bf16_to_float(q[l]);
        for (int r = 0; r < a->R; r++) qp[r] = bf16_to_float(qr[r]);

        // Stage 2, merged as the splits finish (TRITON_MLA's reduce kernel): running max
        // of the splits' log-sum-exps, rescaled sum and accumulator.
        float e_max = -INFINITY, e_sum = 0.0f;
        for (int l = 0; l < a->L; l++) acc[l] = 0.0f;
        for (int s = 0; s < jb->num_splits; s++) {
            int j0 = s * jb->split_len;
            int j1 = s == jb->num_splits - 1 ? pos + 1 : j0 + jb->split_len;
            if (j1 > pos + 1) j1 = pos + 1;
            if (j0 >= j1) continue;
            float lse = split_attend(a, seq, j0, j1, ql, qp, scores, o);
            float new_max = lse > e_max ? lse : e_max;
            float old_scale = expf(e_max - new_max), w = expf(lse - new_max);
            for (int l = 0; l < a->L; l++) acc[l] = acc[l] * old_scale + w * o[l];
            e_sum = e_sum * old_scale + w;
            e_max = new_max;
        }
        bf16 *out = a->out + t * a->ld_out + (long)h * a->L;
        for (int l = 0; l < a->L; l++) out[l] = float_to_bf16(acc[l] / e_sum);
    }
    free(ql);
    free(qp);
    free(scores);
    free(o);
    free(acc);
}

void ref_cpu_mla_attention(ops_set *ops, const mla_attention_args *a) {
    if (a->T < 0 || a->H <= 0 || a->L <= 0 || a->R < 0 || a->block_size <= 0)
        invar_die(INVAR_EXIT_INPUT, "mla_attention (reference cpu): bad shape T=%d H=%d L=%d "
                  "R=%d block_size=%d", a->T, a->H, a->L, a->R, a->block_size);
    if (a->T == 0) return;
    mla_job jb = {.a = a};
    if (a->kv_split_size > 0) {
        // The backend scheduled the splits itself (FlashMLA-style): its size, as many
        // splits as the longest sequence needs.
        jb.split_len = a->kv_split_size;
        jb.num_splits = (a->max_seq_len + jb.split_len - 1) / jb.split_len;
        if (jb.num_splits < 1) jb.num_splits = 1;
    } else {
        jb.split_len = ref_cpu_policy_of(ops)->mla_split_len(a, inv_cpu_threads(ops));
        if (jb.split_len < 1)
            invar_die(INVAR_EXIT_INPUT, "mla_attention (reference cpu): policy chose a split of "
                      "%d positions", jb.split_len);
        jb.num_splits = (a->max_seq_len + jb.split_len - 1) / jb.split_len;
        if (jb.num_splits < 1) jb.num_splits = 1;
    }
    order_log_note(ops->orders, ORDER_MLA_ATTENTION,
                   (uint64_t)a->H << 40 | (uint64_t)a->L << 20 | (uint64_t)a->R,
                   (uint64_t)jb.split_len);
    jb.max_keys = jb.split_len;
    for (int t = 0; t < a->T; t++)  // a position past max_seq_len lands in the last split
        if (a->token_pos[t] + 1 > jb.max_keys) jb.max_keys = a->token_pos[t] + 1;
    thread_pool_for(inv_cpu_pool(ops), (long)a->T * a->H, mla_items, &jb);
}
