// kernels/cpu/mla_attention.c — batch-invariant absorbed MLA attention over the paged latent
// cache, and the cache write that precedes it (ops.h, mla_attention_args).
//
// One (query token, head) is one unit of work, and its reduction order depends only on the
// token's absolute position p:
//   - keys [0, p] are walked in tiles of TILE positions aligned to absolute position
//     (tile i = [TILE·i, TILE·i + TILE−1]), with an online softmax (running max m, sum l and an
//     fp32 accumulator of L latent values);
//   - tiles are grouped into splits of a fixed SIZE (a->kv_split_size when the caller sets
//     one, else SPLIT positions; never a fixed count); each split starts from an empty
//     (m, l, acc) and the splits' partials are merged in ascending order, as a split-KV GPU
//     kernel would;
//   - a score is scale · (q_lat·c_kv + q_pe·k_pe), each dot in the lanes.h order.
// Nothing about the other tokens, seq_lens, max_seq_len or num_seqs enters, so prefill and
// decode tokens go through the same code.
#include <math.h>            // expf, INFINITY
#include <stdlib.h>          // free
#include <string.h>          // memcpy

#include "../bf16.h"         // float_to_bf16
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "../../common/check.h"        // invar_die, invar_malloc
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_mla_attention, inv_cpu_kv_cache_write
#include "lanes.h"           // v4f, lanes_dot_f32_bf16, lanes_bf16_to_f32
#include "../../common/thread_pool.h"     // thread_pool_for

enum {
    TILE = 64,               // key positions per online-softmax step
    SPLIT = 512,             // key positions per split (8 tiles) unless the caller chooses
};

// ---------------------------------------------------------------------------------------------
// kv_cache_write: cache[slot[t]] = (c_kv[t], k_pe[t])
// ---------------------------------------------------------------------------------------------

typedef struct {
    bf16 *cache;
    const bf16 *c_kv, *k_pe;
    long ld_c_kv, ld_k_pe;
    const int32_t *slot;
    int L, R;
} kv_write_job;

static void kv_write_rows(void *arg, long begin, long end) {
    const kv_write_job *j = arg;
    for (long t = begin; t < end; t++) {
        bf16 *dst = j->cache + (long)j->slot[t] * (j->L + j->R);
        memcpy(dst, j->c_kv + t * j->ld_c_kv, (size_t)j->L * sizeof(bf16));
        memcpy(dst + j->L, j->k_pe + t * j->ld_k_pe, (size_t)j->R * sizeof(bf16));
    }
}

void inv_cpu_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv,
                            const bf16 *k_pe, long ld_k_pe, const int32_t *slot, int T, int L,
                            int R) {
    for (int t = 0; t < T; t++)
        if (slot[t] < 0)
            invar_die(INVAR_EXIT_INPUT, "kv_cache_write: token %d has negative slot %d", t,
                      slot[t]);
    const cpu_ctx *ctx = ops->ctx;
    kv_write_job j = {kv_cache, c_kv, k_pe, ld_c_kv ? ld_c_kv : L, ld_k_pe ? ld_k_pe : R,
                      slot,     L,    R};
    thread_pool_for(ctx->pool, T, kv_write_rows, &j);
}

// ---------------------------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------------------------

// Online-softmax state of one split, or of the merge of several.
typedef struct {
    float m, l;              // running max of the scores, sum of exp(s − m)
    float *acc;              // [L] sum of exp(s − m) · c_kv
} softmax_state;

// Per-thread scratch.
typedef struct {
    float *q;                // [L + R] the query head in fp32
    float *scores;           // [TILE]
    softmax_state split, total;
} attn_scratch;

// acc = acc·alpha
static void scale_acc(float *acc, float alpha, int L) {
    v4f a = v4f_splat(alpha);
    int i = 0;
    for (; i + 4 <= L; i += 4) v4f_store(acc + i, v4f_load(acc + i) * a);
    for (; i < L; i++) acc[i] *= alpha;
}

// acc += p·c   (c bf16); one product then one add per element.
static void add_scaled_row(float *acc, float p, const bf16 *c, int L) {
    v4f pv = v4f_splat(p);
    int i = 0;
    for (; i + 4 <= L; i += 4) {
        v4f term = pv * v4f_load_bf16(c + i);
        v4f_store(acc + i, v4f_load(acc + i) + term);
    }
    for (; i < L; i++) {
        float term = p * bf16_to_float(c[i]);
        acc[i] += term;
    }
}

// acc += p[0]·c[0]; acc += p[1]·c[1]; ... for 4 rows: add_scaled_row four times, in that order,
// with acc kept in registers in between.
static void add_scaled_rows4(float *acc, const float p[4], const bf16 *const c[4], int L) {
    v4f p0 = v4f_splat(p[0]), p1 = v4f_splat(p[1]), p2 = v4f_splat(p[2]), p3 = v4f_splat(p[3]);
    int i = 0;
    for (; i + 4 <= L; i += 4) {
        v4f a = v4f_load(acc + i), term;
        term = p0 * v4f_load_bf16(c[0] + i); a += term;
        term = p1 * v4f_load_bf16(c[1] + i); a += term;
        term = p2 * v4f_load_bf16(c[2] + i); a += term;
        term = p3 * v4f_load_bf16(c[3] + i); a += term;
        v4f_store(acc + i, a);
    }
    for (; i < L; i++)
        for (int r = 0; r < 4; r++) {
            float term = p[r] * bf16_to_float(c[r][i]);
            acc[i] += term;
        }
}

// out[r] = q · k[r] over n values for 4 keys at once: per key exactly lanes_dot_f32_bf16.
static void dot4_f32_bf16(const float *q, const bf16 *const k[4], int n, float out[4]) {
    v4f lo[4], hi[4];
    for (int r = 0; r < 4; r++) lo[r] = hi[r] = v4f_splat(0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f q_lo = v4f_load(q + i), q_hi = v4f_load(q + i + 4);
        for (int r = 0; r < 4; r++) {
            v4f p_lo = q_lo * v4f_load_bf16(k[r] + i), p_hi = q_hi * v4f_load_bf16(k[r] + i + 4);
            lo[r] += p_lo;
            hi[r] += p_hi;
        }
    }
    for (int r = 0; r < 4; r++) {
        float sum = lanes_combine(lo[r], hi[r]);
        for (int j = i; j < n; j++) {
            float p = q[j] * bf16_to_float(k[r][j]);
            sum += p;
        }
        out[r] = sum;
    }
}

// Address of key position j of sequence row `seq` in the paged cache.
static const bf16 *kv_entry(const mla_attention_args *a, int seq, int j) {
    int block = a->block_table[(long)seq * a->max_blocks_per_seq + j / a->block_size];
    long slot = (long)block * a->block_size + j % a->block_size;
    return a->kv_cache + slot * (a->L + a->R);
}

// One split: keys [begin, end] into s (empty on entry), tile by tile.
static void attend_split(const mla_attention_args *a, int seq, int begin, int end,
                         attn_scratch *w, softmax_state *s) {
    int L = a->L, R = a->R;
    for (int t0 = begin; t0 <= end; t0 += TILE) {
        int t1 = t0 + TILE - 1 < end ? t0 + TILE - 1 : end;
        float tile_max = -INFINITY;
        int j = t0;
        for (; j + 3 <= t1; j += 4) {
            const bf16 *kv[4] = {kv_entry(a, seq, j), kv_entry(a, seq, j + 1),
                                 kv_entry(a, seq, j + 2), kv_entry(a, seq, j + 3)};
            const bf16 *pe[4] = {kv[0] + L, kv[1] + L, kv[2] + L, kv[3] + L};
            float lat[4], rope[4];
            dot4_f32_bf16(w->q, kv, L, lat);
            dot4_f32_bf16(w->q + L, pe, R, rope);
            for (int r = 0; r < 4; r++) {
                float dot = lat[r] + rope[r];
                w->scores[j + r - t0] = dot * a->scale;
            }
        }
        for (; j <= t1; j++) {
            const bf16 *kv = kv_entry(a, seq, j);
            float dot = lanes_dot_f32_bf16(w->q, kv, L) + lanes_dot_f32_bf16(w->q + L, kv + L, R);
            w->scores[j - t0] = dot * a->scale;
        }
        for (j = t0; j <= t1; j++)
            if (w->scores[j - t0] > tile_max) tile_max = w->scores[j - t0];
        float m_new = tile_max > s->m ? tile_max : s->m;
        if (m_new != s->m) {                      // exp(m − m_new) == 1 otherwise
            float alpha = expf(s->m - m_new);     // 0 for the first tile (m = −inf)
            s->l *= alpha;
            scale_acc(s->acc, alpha, L);
            s->m = m_new;
        }
        for (j = t0; j + 3 <= t1; j += 4) {
            float p[4];
            for (int r = 0; r < 4; r++) {
                p[r] = expf(w->scores[j + r - t0] - m_new);
                s->l += p[r];
            }
            const bf16 *c[4] = {kv_entry(a, seq, j), kv_entry(a, seq, j + 1),
                                kv_entry(a, seq, j + 2), kv_entry(a, seq, j + 3)};
            add_scaled_rows4(s->acc, p, c, L);
        }
        for (; j <= t1; j++) {
            float p = expf(w->scores[j - t0] - m_new);
            s->l += p;
            add_scaled_row(s->acc, p, kv_entry(a, seq, j), L);
        }
    }
}

// total = merge(total, split), total first.
static void merge_split(softmax_state *total, const softmax_state *split, int L) {
    float m = split->m > total->m ? split->m : total->m;
    float a_tot = expf(total->m - m), a_split = expf(split->m - m);
    float l_tot = total->l * a_tot, l_split = split->l * a_split;
    total->l = l_tot + l_split;
    total->m = m;
    for (int i = 0; i < L; i++) {
        float x = total->acc[i] * a_tot, y = split->acc[i] * a_split;
        total->acc[i] = x + y;
    }
}

// The call's plan: the split size its fingerprint names is the one its rows are cut by.
typedef struct {
    const mla_attention_args *a;
    int split;
} attention_job;

static void attention_units(void *arg, long begin, long end) {
    const attention_job *job = arg;
    const mla_attention_args *a = job->a;
    int L = a->L, R = a->R, split = job->split;
    attn_scratch w;
    float *mem = invar_malloc(((size_t)3 * L + R + TILE) * sizeof(float), "mla_attention scratch");
    w.q = mem;
    w.scores = mem + L + R;
    w.split.acc = w.scores + TILE;
    w.total.acc = w.split.acc + L;
    for (long u = begin; u < end; u++) {
        int t = (int)(u / a->H), h = (int)(u % a->H);
        int seq = a->token_seq[t], pos = a->token_pos[t];
        lanes_bf16_to_f32(w.q, a->q_lat + (long)t * a->ld_q_lat + (long)h * L, L);
        const bf16 *q_pe = a->q_pe + (long)t * a->ld_q_pe + (long)h * a->head_stride_q_pe;
        lanes_bf16_to_f32(w.q + L, q_pe, R);
        for (int s0 = 0; s0 <= pos; s0 += split) {
            int s1 = s0 + split - 1 < pos ? s0 + split - 1 : pos;
            softmax_state *s = s0 == 0 ? &w.total : &w.split;
            s->m = -INFINITY;
            s->l = 0.0f;
            for (int i = 0; i < L; i++) s->acc[i] = 0.0f;
            attend_split(a, seq, s0, s1, &w, s);
            if (s0 > 0) merge_split(&w.total, &w.split, L);
        }
        bf16 *out = a->out + (long)t * a->ld_out + (long)h * L;
        for (int i = 0; i < L; i++) out[i] = float_to_bf16(w.total.acc[i] / w.total.l);
    }
    free(mem);
}

void inv_cpu_mla_attention(ops_set *ops, const mla_attention_args *a) {
    if (a->kv_split_size < 0 || a->kv_split_size % TILE != 0)
        invar_die(INVAR_EXIT_INPUT, "mla_attention: kv_split_size %d is not a multiple of %d",
                  a->kv_split_size, TILE);
    for (int t = 0; t < a->T; t++) {
        int seq = a->token_seq[t], pos = a->token_pos[t];
        if (seq < 0 || seq >= a->num_seqs)
            invar_die(INVAR_EXIT_INPUT, "mla_attention: token %d has sequence %d (num_seqs %d)", t,
                      seq, a->num_seqs);
        if (pos < 0 || pos / a->block_size >= a->max_blocks_per_seq)
            invar_die(INVAR_EXIT_INPUT,
                      "mla_attention: token %d has position %d beyond %d blocks of %d", t, pos,
                      a->max_blocks_per_seq, a->block_size);
        // The contract the GPU kernels size their grid by (a graph replayed past it drops splits).
        if (pos >= a->max_seq_len)
            invar_die(INVAR_EXIT_INPUT, "mla_attention: token %d at position %d past max_seq_len %d",
                      t, pos, a->max_seq_len);
    }
    // The order: tiles of TILE from position 0, splits of a fixed size merged in split order.
    // Whether any row has more than one split is the path.
    int split = a->kv_split_size > 0 ? a->kv_split_size : SPLIT;
    long order[] = {TILE, split, LANES};
    long shape[] = {a->H, a->L, a->R, a->block_size};
    fingerprint_note(ops->fingerprints, "mla_attention", fingerprint_order(shape, 4),
                     fingerprint_order(order, 3), a->max_seq_len > split ? "split-merge" : "one-split");
    attention_job job = {a, split};
    const cpu_ctx *ctx = ops->ctx;
    thread_pool_for(ctx->pool, (long)a->T * a->H, attention_units, &job);
}
