// harness/check/ops/attention.c — the kernel checker's attention ops (harness/check/ops/op_section.h):
// kv_cache_write, mla_attention (absorbed, over the paged latent cache), and the split-prefill
// path's mha_prefill and merge_attention.
#include <math.h>                   // sqrt, INFINITY
#include <stdlib.h>                 // free
#include <string.h>                 // memcpy

#include "../../../common/check.h" // invar_malloc
#include "../../../kernels/f64/f64.h" // f64_<op>, f64_rel_l2_*
#include "op_section.h"             // op_section, op_buffer_add, op_batch_input, op_rng

static float attn_scale(void) { return (float)(1.0 / sqrt(192.0)); }  // qk_nope 128 + rope 64

// --- kv_cache_write --------------------------------------------------------------------------
// A row is one token's (c_kv, k_pe), read from one [L + R] row as kv_a_proj leaves them, and
// the cache slot it lands in. The cache has 2M slots, shuffled per batch; the other M must
// stay poisoned.

enum { KV_SRC = 0, KV_SLOT = 1, KV_CACHE = 2 };  // buffers

const op_shape kv_cache_write_cpu_shapes[] = {
    {.label = "L=512 R=64", .kv_cache_write = {.L = 512, .R = 64}, .quick = true},
    {.label = "L=7 R=1", .kv_cache_write = {.L = 7, .R = 1}, .exhaustive = true},  // odd rows
    {.label = NULL},
};
const op_shape kv_cache_write_cuda_shapes[] = {
    {.label = "L=512 R=64", .kv_cache_write = {.L = 512, .R = 64}, .quick = true},
    {.label = NULL},
};

static void kv_cache_write_declare(op_case *c) {
    int W = c->s->kv_cache_write.L + c->s->kv_cache_write.R;
    op_buffer_add(c, OP_ROW_IN, "kv source", sizeof(bf16), 1, W, W);
    op_buffer_add(c, OP_BATCH_IN, "kv slots", sizeof(int32_t), 1, 1, 1);
    int cache = op_buffer_add(c, OP_OUT, "kv cache", sizeof(bf16), 1, W, W);
    c->buf[cache].slots_per_row = 2;
}

static void kv_cache_write_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 7);
    op_fill_bf16(in[KV_SRC], c->s->kv_cache_write.L + c->s->kv_cache_write.R, &r, -3.0f, 3.0f);
}

// Slots: a shuffle of [0, 2M) seeded by the batch, the first M used.
static void kv_cache_write_batch(op_case *c, op_batch *b) {
    int32_t *slot = op_batch_input(b, c, KV_SLOT, b->M);
    b->row_slot = invar_malloc((size_t)2 * b->M * sizeof(int32_t), "kv slots");
    op_rng r = op_rng_from(b->seeds[0] ^ (uint64_t)b->M, 8);
    op_shuffle(b->row_slot, 2 * b->M, &r);
    memcpy(slot, b->row_slot, (size_t)b->M * sizeof(int32_t));
}

static void kv_cache_write_call(op_case *c, const op_batch *b) {
    int L = c->s->kv_cache_write.L, R = c->s->kv_cache_write.R;
    const bf16 *src = b->dev[KV_SRC];
    c->ops->kv_cache_write(c->ops, b->dev[KV_CACHE], src, L + R, src + L, L + R, b->dev[KV_SLOT],
                           b->M, L, R);
}

static double kv_cache_write_error(op_case *c, uint64_t seed, const void *row) {
    int L = c->s->kv_cache_write.L, R = c->s->kv_cache_write.R, W = L + R;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)W * sizeof(double), "kv oracle");
    const bf16 *src = in[KV_SRC];
    int32_t slot = 0;
    f64_kv_cache_write(ref, src, W, src + L, W, &slot, 1, L, R);
    double err = f64_rel_l2_bf16(row, ref, W);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section kv_cache_write_op = {kv_cache_write_declare, kv_cache_write_row,
                                      kv_cache_write_batch, kv_cache_write_call,
                                      kv_cache_write_error};

// --- mla_attention ---------------------------------------------------------------------------
// A row is one sequence of the step: its cached latents (length len, random in [chunk,
// max_len]) and its `chunk` query tokens at the last positions (chunk 1: decode; more: a
// prefill chunk after len - chunk cached tokens). Other rows are other sequences with other
// lengths, so num_seqs and max_seq_len change with the batch; each batch scatters its
// sequences' blocks over the cache in another order.

enum { MLA_Q_LAT, MLA_Q_PE, MLA_CACHE, MLA_TABLE, MLA_SEQ, MLA_POS, MLA_LENS, MLA_OUT };

const op_shape mla_attention_cpu_shapes[] = {
    {.label = "decode H=4 len<=1024", .max_M = 128, .quick = true, .mla_attention =
     {.H = 4, .L = 512, .R = 64, .max_len = 1024, .chunk = 1, .block_size = 16}},
    {.label = "prefill H=2 c=8 len<=200", .max_M = 128, .mla_attention =
     {.H = 2, .L = 512, .R = 64, .max_len = 200, .chunk = 8, .block_size = 16}},
    // Up to 4 KV splits of 512 (a merge of 3+ partials is not symmetric) and up to 256
    // sequences in one call (paths taken above 128 sequences).
    {.label = "decode H=1 len<=1800 M<=256", .max_M = 256, .invariant_sets_only = true,
     .mla_attention = {.H = 1, .L = 512, .R = 64, .max_len = 1800, .chunk = 1, .block_size = 64}},
    // Contexts past 4,096 positions beside shorter ones (a split rule that follows the call's
    // longest sequence re-splits the short rows; no other shape reaches 4,096)
    {.label = "decode H=1 len<=6000 M<=32", .max_M = 32, .invariant_sets_only = true,
     .mla_attention = {.H = 1, .L = 512, .R = 64, .max_len = 6000, .chunk = 1, .block_size = 64}},
    // --exhaustive: up to 6 splits of 512 and more than 512 sequences in one call; sequences
    // shorter than a tile and than two (both sides of 64, block size 1); a prefill chunk of 33
    // tokens straddling the split boundaries at 512 and 1024
    {.label = "decode H=1 len<=2600 M<=600", .max_M = 600, .invariant_sets_only = true,
     .exhaustive = true,
     .mla_attention = {.H = 1, .L = 512, .R = 64, .max_len = 2600, .chunk = 1, .block_size = 16}},
    {.label = "decode H=2 len<=130 block=1", .max_M = 257, .exhaustive = true,
     .mla_attention = {.H = 2, .L = 512, .R = 64, .max_len = 130, .chunk = 1, .block_size = 1}},
    {.label = "prefill H=1 c=33 len<=1100", .max_M = 65, .invariant_sets_only = true,
     .exhaustive = true,
     .mla_attention = {.H = 1, .L = 512, .R = 64, .max_len = 1100, .chunk = 33, .block_size = 16}},
    {.label = NULL},
};
const op_shape mla_attention_cuda_shapes[] = {
    {.label = "decode H=16 len<=1024", .quick = true, .mla_attention =
     {.H = 16, .L = 512, .R = 64, .max_len = 1024, .chunk = 1, .block_size = 64}},
    {.label = "decode H=128 len<=1024", .max_M = 1024, .mla_attention =
     {.H = 128, .L = 512, .R = 64, .max_len = 1024, .chunk = 1, .block_size = 64}},
    {.label = "prefill H=16 c=64 len<=1024", .max_M = 256, .mla_attention =
     {.H = 16, .L = 512, .R = 64, .max_len = 1024, .chunk = 64, .block_size = 64}},
    // --exhaustive: up to 6 splits of 512 at 16 heads: on sm_90a, batches of more split units
    // than SMs and an even split count take split pairs as units (the wgmma16 kernel folds
    // them), the others have the merge kernel form them; a token of an odd count has a split alone
    {.label = "decode H=16 len<=2600", .max_M = 256, .exhaustive = true, .mla_attention =
     {.H = 16, .L = 512, .R = 64, .max_len = 2600, .chunk = 1, .block_size = 64}},
    // Contexts past 4,096 positions beside shorter ones
    {.label = "decode H=16 len<=6000", .max_M = 64, .invariant_sets_only = true, .mla_attention =
     {.H = 16, .L = 512, .R = 64, .max_len = 6000, .chunk = 1, .block_size = 64}},
    // 32-position blocks: the 16-head mma.sync kernel on every device (64-position blocks take
    // the wgmma16 kernel on sm_90a)
    {.label = "decode H=16 len<=1024 block=32", .mla_attention =
     {.H = 16, .L = 512, .R = 64, .max_len = 1024, .chunk = 1, .block_size = 32}},
    // The HF fixtures' latent shape: the generic kernel (mla_generic_shape), past 4096 (token,
    // head) warps from M = 256 on; the control sets are caught at the shapes above
    {.label = "generic L=32 R=8 H=16 len<=600", .invariant_sets_only = true, .mla_attention =
     {.H = 16, .L = 32, .R = 8, .max_len = 600, .chunk = 1, .block_size = 16}},
    {.label = NULL},
};

// One sequence from its seed: length first, then latents [len, L + R], q_lat, q_pe.
static int mla_row_len(const op_case *c, op_rng *r) {
    int chunk = c->s->mla_attention.chunk;
    return chunk + op_rng_int(r, c->s->mla_attention.max_len - chunk + 1);
}
static void mla_row_fill(const op_case *c, op_rng *r, int len, bf16 *kv, bf16 *q_lat,
                         bf16 *q_pe) {
    int H = c->s->mla_attention.H, L = c->s->mla_attention.L, R = c->s->mla_attention.R;
    int chunk = c->s->mla_attention.chunk;
    // Half the sequences get sharp scores: each split's max differs, so the order in which
    // splits are merged shows in the output.
    float q_range = op_rng_int(r, 2) ? 3.0f : 1.0f;
    op_fill_bf16(kv, (long)len * (L + R), r, -1.0f, 1.0f);
    op_fill_bf16(q_lat, (long)chunk * H * L, r, -q_range, q_range);
    op_fill_bf16(q_pe, (long)chunk * H * R, r, -q_range, q_range);
}

static void mla_attention_declare(op_case *c) {
    int H = c->s->mla_attention.H, L = c->s->mla_attention.L, chunk = c->s->mla_attention.chunk;
    op_buffer_add(c, OP_BATCH_IN, "attention q_lat", sizeof(bf16), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "attention q_pe", sizeof(bf16), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "attention kv cache", sizeof(bf16), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "attention block table", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "attention token_seq", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "attention token_pos", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "attention seq_lens", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_OUT, "attention out", sizeof(bf16), chunk, (long)H * L, (long)H * L);
}

typedef struct {
    const op_case *c;
    const uint64_t *seeds;
    const int32_t *lens, *perm, *first;  // first: the row's first logical block
    int max_blocks;
    bf16 *cache, *q_lat, *q_pe;
    int32_t *table, *seq, *pos;
} mla_fill_job;

// Rows [begin, end): each writes its own queries, block-table row and cache blocks, and
// fills the slots past its end with noise from its own seed (a kernel reading past a
// sequence's end sees garbage, never another row's data in a pattern).
static void mla_fill_rows(void *arg, long begin, long end) {
    const mla_fill_job *j = arg;
    const op_case *c = j->c;
    int H = c->s->mla_attention.H, L = c->s->mla_attention.L, R = c->s->mla_attention.R;
    int chunk = c->s->mla_attention.chunk, bs = c->s->mla_attention.block_size, W = L + R;
    bf16 *kv = invar_malloc((size_t)c->s->mla_attention.max_len * W * sizeof(bf16), "row kv");
    for (long m = begin; m < end; m++) {
        int len = j->lens[m], nb = (len + bs - 1) / bs;
        op_rng rr = op_rng_from(j->seeds[m], 9);
        mla_row_len(c, &rr);
        mla_row_fill(c, &rr, len, kv, j->q_lat + (size_t)m * chunk * H * L,
                     j->q_pe + (size_t)m * chunk * H * R);
        int32_t *row_table = j->table + (size_t)m * j->max_blocks;
        for (int k = 0; k < j->max_blocks; k++) row_table[k] = k < nb ? j->perm[j->first[m] + k] : -1;
        op_rng noise = op_rng_from(j->seeds[m], 11);
        for (int p = 0; p < nb * bs; p++) {
            bf16 *slot = j->cache + ((long)row_table[p / bs] * bs + p % bs) * W;
            if (p < len) memcpy(slot, kv + (size_t)p * W, (size_t)W * sizeof(bf16));
            else op_fill_bf16(slot, W, &noise, -1.0f, 1.0f);
        }
        for (int i = 0; i < chunk; i++) {
            j->seq[m * chunk + i] = (int32_t)m;
            j->pos[m * chunk + i] = len - chunk + i;
        }
    }
    free(kv);
}

static void mla_attention_batch(op_case *c, op_batch *b) {
    int H = c->s->mla_attention.H, L = c->s->mla_attention.L, R = c->s->mla_attention.R;
    int chunk = c->s->mla_attention.chunk, bs = c->s->mla_attention.block_size, W = L + R;
    int M = b->M, T = M * chunk, blocks = 0, max_blocks = 0;
    int32_t *lens = op_batch_input(b, c, MLA_LENS, M);
    for (int m = 0; m < M; m++) {
        op_rng r = op_rng_from(b->seeds[m], 9);
        lens[m] = mla_row_len(c, &r);
        int nb = (lens[m] + bs - 1) / bs;
        blocks += nb;
        max_blocks = nb > max_blocks ? nb : max_blocks;
    }
    // Logical block k of the batch lives in physical block perm[k]: a shuffle per batch.
    int32_t *perm = invar_malloc((size_t)blocks * sizeof(int32_t), "attention block shuffle");
    op_rng r = op_rng_from(b->seeds[0] ^ (uint64_t)M, 10);
    op_shuffle(perm, blocks, &r);
    int32_t *first = invar_malloc((size_t)M * sizeof(int32_t), "attention first blocks");
    for (int m = 0, f = 0; m < M; f += (lens[m] + bs - 1) / bs, m++) first[m] = f;
    mla_fill_job j = {
        .c = c, .seeds = b->seeds, .lens = lens, .perm = perm, .first = first,
        .max_blocks = max_blocks,
        .cache = op_batch_input(b, c, MLA_CACHE, (long)blocks * bs * W),
        .table = op_batch_input(b, c, MLA_TABLE, (long)M * max_blocks),
        .q_lat = op_batch_input(b, c, MLA_Q_LAT, (long)T * H * L),
        .q_pe = op_batch_input(b, c, MLA_Q_PE, (long)T * H * R),
        .seq = op_batch_input(b, c, MLA_SEQ, T),
        .pos = op_batch_input(b, c, MLA_POS, T),
    };
    op_for_rows(c, M, mla_fill_rows, &j);
    free(first);
    free(perm);
}

static void mla_attention_call(op_case *c, const op_batch *b) {
    int H = c->s->mla_attention.H, L = c->s->mla_attention.L, R = c->s->mla_attention.R;
    const int32_t *lens = b->host[MLA_LENS];
    int max_len = 0;
    for (int m = 0; m < b->M; m++) max_len = lens[m] > max_len ? lens[m] : max_len;
    mla_attention_args a = {
        .out = b->dev[MLA_OUT], .q_lat = b->dev[MLA_Q_LAT], .q_pe = b->dev[MLA_Q_PE],
        .kv_cache = b->dev[MLA_CACHE], .block_table = b->dev[MLA_TABLE],
        .token_seq = b->dev[MLA_SEQ], .token_pos = b->dev[MLA_POS], .seq_lens = b->dev[MLA_LENS],
        .T = b->M * c->s->mla_attention.chunk, .H = H, .L = L, .R = R,
        .ld_out = (long)H * L, .ld_q_lat = (long)H * L, .ld_q_pe = (long)H * R,
        .head_stride_q_pe = R, .block_size = c->s->mla_attention.block_size,
        .max_blocks_per_seq = (int)(b->elems[MLA_TABLE] / b->M), .num_seqs = b->M,
        .max_seq_len = max_len, .scale = attn_scale()};
    c->ops->mla_attention(c->ops, &a);
}

// The row alone, its cache in one block as long as the sequence.
static double mla_attention_error(op_case *c, uint64_t seed, const void *row) {
    int H = c->s->mla_attention.H, L = c->s->mla_attention.L, R = c->s->mla_attention.R;
    int chunk = c->s->mla_attention.chunk;
    op_rng r = op_rng_from(seed, 9);
    int32_t len = mla_row_len(c, &r), table = 0;
    bf16 *kv = invar_malloc((size_t)len * (L + R) * sizeof(bf16), "attention row kv");
    bf16 *q_lat = invar_malloc((size_t)chunk * H * L * sizeof(bf16), "attention row q_lat");
    bf16 *q_pe = invar_malloc((size_t)chunk * H * R * sizeof(bf16), "attention row q_pe");
    int32_t *seq = invar_calloc((size_t)chunk, sizeof(int32_t), "attention row token_seq");
    int32_t *pos = invar_malloc((size_t)chunk * sizeof(int32_t), "attention row token_pos");
    double *ref = invar_malloc((size_t)chunk * H * L * sizeof(double), "attention oracle");
    mla_row_fill(c, &r, len, kv, q_lat, q_pe);
    for (int i = 0; i < chunk; i++) pos[i] = len - chunk + i;
    mla_attention_args a = {
        .q_lat = q_lat, .q_pe = q_pe, .kv_cache = kv, .block_table = &table, .token_seq = seq,
        .token_pos = pos, .seq_lens = &len, .T = chunk, .H = H, .L = L, .R = R,
        .ld_out = (long)H * L, .ld_q_lat = (long)H * L, .ld_q_pe = (long)H * R,
        .head_stride_q_pe = R, .block_size = len, .max_blocks_per_seq = 1, .num_seqs = 1,
        .max_seq_len = len, .scale = attn_scale()};
    f64_mla_attention(&a, ref);
    double err = f64_rel_l2_bf16(row, ref, (long)chunk * H * L);
    free(kv);
    free(q_lat);
    free(q_pe);
    free(seq);
    free(pos);
    free(ref);
    return err;
}

const op_section mla_attention_op = {mla_attention_declare, NULL, mla_attention_batch,
                                     mla_attention_call, mla_attention_error};

// --- mha_prefill -----------------------------------------------------------------------------
// The split-prefill path's attention: a row is one sequence's `chunk` query tokens at its last
// positions, each attending causally over the sequence's own decompressed keys (len of them,
// random in [chunk, max_len]). Each batch lays its sequences' keys out in another order, so a
// row's key ranges move; a reference set may split the keys by the call's token count.
// Output row: out [chunk, H, v] then lse [chunk, H].

enum { MHA_Q, MHA_KV, MHA_K_PE, MHA_BEGIN, MHA_END, MHA_OUT, MHA_LSE };

const op_shape mha_prefill_cpu_shapes[] = {
    {.label = "H=4 c=8 len<=256", .max_M = 256, .quick = true,
     .mha_prefill = {.H = 4, .nope = 128, .R = 64, .v = 128, .max_len = 256, .chunk = 8}},
    // --exhaustive: a chunk off every power of two over keys past the 64-key tile and either
    // side of the reference's 16-key minimum split
    {.label = "H=1 c=33 len<=700", .max_M = 65, .exhaustive = true,
     .mha_prefill = {.H = 1, .nope = 128, .R = 64, .v = 128, .max_len = 700, .chunk = 33}},
    {.label = "H=2 c=1 len<=40", .max_M = 257, .exhaustive = true,
     .mha_prefill = {.H = 2, .nope = 128, .R = 64, .v = 128, .max_len = 40, .chunk = 1}},
    {.label = NULL},
};
const op_shape mha_prefill_cuda_shapes[] = {
    {.label = "H=16 c=16 len<=512", .max_M = 256, .quick = true,
     .mha_prefill = {.H = 16, .nope = 128, .R = 64, .v = 128, .max_len = 512, .chunk = 16}},
    {.label = "H=128 c=4 len<=256", .max_M = 64,
     .mha_prefill = {.H = 128, .nope = 128, .R = 64, .v = 128, .max_len = 256, .chunk = 4}},
    {.label = NULL},
};

static long mha_q_width(const op_case *c) {
    return (long)c->s->mha_prefill.H * (c->s->mha_prefill.nope + c->s->mha_prefill.R);
}
static long mha_kv_width(const op_case *c) {
    return (long)c->s->mha_prefill.H * (c->s->mha_prefill.nope + c->s->mha_prefill.v);
}

// One sequence from its seed: length first, then q [chunk, H, nope + R], kv [len, H, nope + v]
// and k_pe [len, R]; only the length when the rest is NULL.
static int mha_row(const op_case *c, uint64_t seed, bf16 *q, bf16 *kv, bf16 *k_pe) {
    int chunk = c->s->mha_prefill.chunk;
    op_rng r = op_rng_from(seed, 16);
    int len = chunk + op_rng_int(&r, c->s->mha_prefill.max_len - chunk + 1);
    if (!q) return len;
    op_fill_bf16(q, chunk * mha_q_width(c), &r, -1.0f, 1.0f);
    op_fill_bf16(kv, len * mha_kv_width(c), &r, -1.0f, 1.0f);
    op_fill_bf16(k_pe, (long)len * c->s->mha_prefill.R, &r, -1.0f, 1.0f);
    return len;
}

static void mha_prefill_declare(op_case *c) {
    int H = c->s->mha_prefill.H, chunk = c->s->mha_prefill.chunk;
    op_buffer_add(c, OP_BATCH_IN, "mha q", sizeof(bf16), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "mha kv", sizeof(bf16), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "mha k_pe", sizeof(bf16), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "mha key_begin", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_BATCH_IN, "mha key_end", sizeof(int32_t), 1, 1, 1);
    long v_width = (long)H * c->s->mha_prefill.v;
    op_buffer_add(c, OP_OUT, "mha out", sizeof(bf16), chunk, v_width, v_width);
    op_buffer_add(c, OP_OUT, "mha lse", sizeof(float), chunk, H, H);
}

typedef struct {
    const op_case *c;
    const uint64_t *seeds;
    const int32_t *begin;  // [T]: a row's keys start at begin[m * chunk]
    bf16 *q, *kv, *k_pe;
} mha_fill_job;

static void mha_fill_rows(void *arg, long lo, long hi) {
    const mha_fill_job *j = arg;
    int chunk = j->c->s->mha_prefill.chunk, R = j->c->s->mha_prefill.R;
    for (long m = lo; m < hi; m++) {
        long first = j->begin[m * chunk];
        mha_row(j->c, j->seeds[m], j->q + (size_t)m * chunk * mha_q_width(j->c),
                j->kv + (size_t)first * mha_kv_width(j->c), j->k_pe + (size_t)first * R);
    }
}

static void mha_prefill_batch(op_case *c, op_batch *b) {
    int M = b->M, chunk = c->s->mha_prefill.chunk, R = c->s->mha_prefill.R, T = M * chunk;
    long keys = 0;
    int32_t *len = invar_malloc((size_t)M * sizeof(int32_t), "mha lengths");
    for (int m = 0; m < M; m++) keys += len[m] = mha_row(c, b->seeds[m], NULL, NULL, NULL);
    bf16 *q = op_batch_input(b, c, MHA_Q, T * mha_q_width(c));
    bf16 *kv = op_batch_input(b, c, MHA_KV, keys * mha_kv_width(c));
    bf16 *k_pe = op_batch_input(b, c, MHA_K_PE, keys * R);
    int32_t *begin = op_batch_input(b, c, MHA_BEGIN, T), *end = op_batch_input(b, c, MHA_END, T);
    // The sequences' keys one after another, in an order shuffled per batch.
    int32_t *order = invar_malloc((size_t)M * sizeof(int32_t), "mha key order");
    op_rng r = op_rng_from(b->seeds[0] ^ (uint64_t)M, 17);
    op_shuffle(order, M, &r);
    for (int i = 0, first = 0; i < M; i++) {
        int m = order[i];
        for (int t = 0; t < chunk; t++) {
            begin[m * chunk + t] = first;
            end[m * chunk + t] = first + len[m] - chunk + t + 1;
        }
        first += len[m];
    }
    mha_fill_job j = {c, b->seeds, begin, q, kv, k_pe};
    op_for_rows(c, M, mha_fill_rows, &j);
    free(len);
    free(order);
}

static mha_prefill_args mha_args(const op_case *c, int T) {
    int H = c->s->mha_prefill.H, nope = c->s->mha_prefill.nope, R = c->s->mha_prefill.R;
    int v = c->s->mha_prefill.v;
    return (mha_prefill_args){.T = T, .H = H, .nope = nope, .R = R, .v = v,
                              .ld_out = (long)H * v, .ld_q = mha_q_width(c),
                              .ld_kv = mha_kv_width(c), .ld_k_pe = R, .scale = attn_scale()};
}

static void mha_prefill_call(op_case *c, const op_batch *b) {
    mha_prefill_args a = mha_args(c, b->M * c->s->mha_prefill.chunk);
    a.out = b->dev[MHA_OUT];
    a.lse = b->dev[MHA_LSE];
    a.q = b->dev[MHA_Q];
    a.kv = b->dev[MHA_KV];
    a.k_pe = b->dev[MHA_K_PE];
    a.key_begin = b->dev[MHA_BEGIN];
    a.key_end = b->dev[MHA_END];
    c->ops->mha_prefill(c->ops, &a);
}

// The worse of the outputs' and the log-sum-exps' errors, the row's keys from 0.
static double mha_prefill_error(op_case *c, uint64_t seed, const void *row) {
    int H = c->s->mha_prefill.H, chunk = c->s->mha_prefill.chunk, R = c->s->mha_prefill.R;
    long n_out = (long)chunk * H * c->s->mha_prefill.v, n_lse = (long)chunk * H;
    int len = mha_row(c, seed, NULL, NULL, NULL);
    bf16 *q = invar_malloc((size_t)chunk * mha_q_width(c) * sizeof(bf16), "mha row q");
    bf16 *kv = invar_malloc((size_t)len * mha_kv_width(c) * sizeof(bf16), "mha row kv");
    bf16 *k_pe = invar_malloc((size_t)len * R * sizeof(bf16), "mha row k_pe");
    int32_t *begin = invar_calloc((size_t)chunk, sizeof(int32_t), "mha row key_begin");
    int32_t *end = invar_malloc((size_t)chunk * sizeof(int32_t), "mha row key_end");
    double *ref = invar_malloc((size_t)(n_out + n_lse) * sizeof(double), "mha oracle");
    mha_row(c, seed, q, kv, k_pe);
    for (int t = 0; t < chunk; t++) end[t] = len - chunk + t + 1;
    mha_prefill_args a = mha_args(c, chunk);
    a.q = q;
    a.kv = kv;
    a.k_pe = k_pe;
    a.key_begin = begin;
    a.key_end = end;
    f64_mha_prefill(&a, ref, ref + n_out);
    float *lse = invar_malloc((size_t)n_lse * sizeof(float), "mha row lse");
    memcpy(lse, (const bf16 *)row + n_out, (size_t)n_lse * sizeof(float));
    double err = f64_rel_l2_bf16(row, ref, n_out);
    double err_lse = f64_rel_l2_f32(lse, ref + n_out, n_lse);
    free(q);
    free(kv);
    free(k_pe);
    free(begin);
    free(end);
    free(ref);
    free(lse);
    return err_lse > err ? err_lse : err;
}

const op_section mha_prefill_op = {mha_prefill_declare, NULL, mha_prefill_batch,
                                   mha_prefill_call, mha_prefill_error};

// --- merge_attention -------------------------------------------------------------------------
// A row is one token's H heads of two partial results a and b (rows H * v + pad apart, the pad
// untouched) and their log-sum-exps; about one head in eight has an empty side (lse = -inf).

enum { MERGE_A, MERGE_B, MERGE_LSE_A, MERGE_LSE_B, MERGE_OUT };

const op_shape merge_attention_cpu_shapes[] = {
    {.label = "H=16 v=128 ld+8", .merge_attention = {.H = 16, .v = 128, .pad = 8}, .quick = true},
    {.label = "H=1 v=7 ld+1", .merge_attention = {.H = 1, .v = 7, .pad = 1}, .exhaustive = true},
    {.label = NULL},
};
const op_shape merge_attention_cuda_shapes[] = {
    {.label = "H=16 v=128", .merge_attention = {.H = 16, .v = 128}, .quick = true},
    {.label = "H=128 v=128 ld+8", .merge_attention = {.H = 128, .v = 128, .pad = 8}},
    {.label = NULL},
};

static void merge_attention_declare(op_case *c) {
    int H = c->s->merge_attention.H;
    long width = (long)H * c->s->merge_attention.v, ld = width + c->s->merge_attention.pad;
    op_buffer_add(c, OP_ROW_IN, "merge a", sizeof(bf16), 1, width, ld);
    op_buffer_add(c, OP_ROW_IN, "merge b", sizeof(bf16), 1, width, ld);
    op_buffer_add(c, OP_ROW_IN, "merge lse_a", sizeof(float), 1, H, H);
    op_buffer_add(c, OP_ROW_IN, "merge lse_b", sizeof(float), 1, H, H);
    op_buffer_add(c, OP_OUT, "merge out", sizeof(bf16), 1, width, ld);
}

static void merge_attention_row(const op_case *c, uint64_t seed, void *const *in) {
    int H = c->s->merge_attention.H;
    long width = (long)H * c->s->merge_attention.v;
    op_rng r = op_rng_from(seed, 18);
    op_fill_bf16(in[MERGE_A], width, &r, -1.0f, 1.0f);
    op_fill_bf16(in[MERGE_B], width, &r, -1.0f, 1.0f);
    float *lse_a = in[MERGE_LSE_A], *lse_b = in[MERGE_LSE_B];
    for (int h = 0; h < H; h++) {
        lse_a[h] = op_rng_int(&r, 8) == 0 ? -INFINITY : op_rng_float(&r, -4.0f, 8.0f);
        lse_b[h] = op_rng_int(&r, 8) == 0 ? -INFINITY : op_rng_float(&r, -4.0f, 8.0f);
    }
}

static merge_attention_args merge_args(const op_case *c, int T, void *const *buf) {
    long ld = (long)c->s->merge_attention.H * c->s->merge_attention.v + c->s->merge_attention.pad;
    return (merge_attention_args){.out = buf[MERGE_OUT], .a = buf[MERGE_A], .b = buf[MERGE_B],
                                  .lse_a = buf[MERGE_LSE_A], .lse_b = buf[MERGE_LSE_B], .T = T,
                                  .H = c->s->merge_attention.H, .v = c->s->merge_attention.v,
                                  .ld = ld};
}

static void merge_attention_call(op_case *c, const op_batch *b) {
    merge_attention_args a = merge_args(c, b->M, b->dev);
    c->ops->merge_attention(c->ops, &a);
}

static double merge_attention_error(op_case *c, uint64_t seed, const void *row) {
    long width = (long)c->s->merge_attention.H * c->s->merge_attention.v;
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)width * sizeof(double), "merge oracle");
    merge_attention_args a = merge_args(c, 1, in);
    f64_merge_attention(&a, ref);
    double err = f64_rel_l2_bf16(row, ref, width);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section merge_attention_op = {merge_attention_declare, merge_attention_row, NULL,
                                       merge_attention_call, merge_attention_error};
