// tests/test_inv_cpu_mla_attention.c — the invariant CPU paged-cache write and MLA attention:
// accuracy against float64, every output written (nothing beyond), and bitwise invariance of
// one query token whatever shares the step: other sequences of other lengths (so another
// max_seq_len and num_seqs), other query tokens (decode or prefill chunks), the token's index,
// its sequence's row in the block table, which physical blocks hold its keys, the block
// table's width, whether later positions of its own sequence are already cached (a prefill
// chunk), and the thread count; and a key's score the same bits whichever path scores it.
//
// Tolerance: fp32 scores, softmax and accumulation, then one bf16 rounding of the output
// (≤ 2^-9 relative per element) → relative L2 < 4e-3.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test

#include <math.h>                   // fabs, fabsf
#include <string.h>                 // memcmp, memcpy

#include "../kernels/bf16.h"        // bf16_to_float, float_to_bf16
#include "../kernels/f64/f64.h"     // f64_mla_attention, f64_kv_cache_write, f64_rel_l2_bf16
#include "test_util.h"              // test_cpu_set, test_fill_*, test_poison, test_unwritten_bf16

#define TOL_BF16 4e-3

enum {
    H = 3, L = 128, R = 32,          // heads, latent and rope widths (L mod 8 = 0, R mod 8 = 0)
    SLOT = L + R,
    Q_PE_HEAD = R + 8,               // q_pe head stride, padded
    BLOCK = 16,                      // tokens per cache block
    MAX_SEQS = 6, MAX_TOKENS = 64,
};

// ---------------------------------------------------------------------------------------------
// A step: sequences (cache contents named by a seed, so two steps can hold the same sequence in
// other blocks) and query tokens (named by a seed too).
// ---------------------------------------------------------------------------------------------

typedef struct {
    int len;                         // tokens cached this step
    uint64_t kv_seed;                // position j holds values from seed kv_seed·100003 + j
} seq_spec;

typedef struct {
    int seq, pos;
    uint64_t q_seed;
} token_spec;

typedef struct {
    int num_seqs, T, max_blocks;     // max_blocks: block table width (≥ what the longest needs)
    seq_spec seqs[MAX_SEQS];
    token_spec tokens[MAX_TOKENS];
    uint64_t layout_seed;            // which physical blocks hold what
    long pad_out;                    // extra elements per output row
    bool cancelling;                 // see cancelling_kv()
    int kv_split;                    // mla_attention_args.kv_split_size (0: the set's choice)
    int block;                       // tokens per cache block (0: BLOCK)
} step_spec;

typedef struct {
    mla_attention_args a;
    bf16 *out, *q_lat, *q_pe, *cache;
    int32_t *block_table, *token_seq, *token_pos, *seq_lens;
} step;

// Cancelling data, to make the invariance checks sensitive: positions 2m and 2m+1 hold opposite
// latent vectors and the same rope part, and q_lat is tiny, so both get almost the same
// probability and their contributions cancel. The output is then a tiny residue of large
// terms, so any change in the order of the fp32 sums shows up in its bf16 bits (with ordinary
// data most such changes would round away).
static void cancelling_kv(bf16 *slot, uint64_t kv_seed, int j) {
    test_fill_bf16(slot, SLOT, kv_seed * 100003 + (uint64_t)(j / 2), 1.0f);
    if (j % 2)
        for (int i = 0; i < L; i++) slot[i] ^= 0x8000;
}

static void step_build(step *s, const step_spec *spec) {
    int num_blocks = spec->num_seqs * spec->max_blocks, bs = spec->block ? spec->block : BLOCK;
    long ld_out = (long)H * L + spec->pad_out;
    s->out = test_alloc(sizeof(bf16) * spec->T * ld_out);
    s->q_lat = test_alloc(sizeof(bf16) * spec->T * H * L);
    s->q_pe = test_alloc(sizeof(bf16) * spec->T * H * Q_PE_HEAD);
    s->cache = test_alloc(sizeof(bf16) * num_blocks * bs * SLOT);
    s->block_table = test_alloc(sizeof(int32_t) * spec->num_seqs * spec->max_blocks);
    s->token_seq = test_alloc(sizeof(int32_t) * spec->T);
    s->token_pos = test_alloc(sizeof(int32_t) * spec->T);
    s->seq_lens = test_alloc(sizeof(int32_t) * spec->num_seqs);
    test_fill_bf16(s->cache, (long)num_blocks * bs * SLOT, spec->layout_seed + 1, 1.0f);

    // Physical blocks: a random permutation, handed out in order.
    int32_t *perm = test_alloc(sizeof(int32_t) * num_blocks);
    for (int i = 0; i < num_blocks; i++) perm[i] = i;
    test_rng rng = test_rng_make(spec->layout_seed);
    for (int i = num_blocks - 1; i > 0; i--) {
        int j = test_below(&rng, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int max_len = 0;
    for (int q = 0; q < spec->num_seqs; q++) {
        const seq_spec *sq = &spec->seqs[q];
        s->seq_lens[q] = sq->len;
        max_len = sq->len > max_len ? sq->len : max_len;
        for (int b = 0; b < spec->max_blocks; b++)
            s->block_table[q * spec->max_blocks + b] = perm[q * spec->max_blocks + b];
        for (int j = 0; j < sq->len; j++) {
            bf16 *slot = s->cache + ((long)s->block_table[q * spec->max_blocks + j / bs] * bs + j % bs) * SLOT;
            if (spec->cancelling)
                cancelling_kv(slot, sq->kv_seed, j);
            else
                test_fill_bf16(slot, SLOT, sq->kv_seed * 100003 + (uint64_t)j, 1.0f);
        }
    }
    free(perm);
    for (int t = 0; t < spec->T; t++) {
        const token_spec *tk = &spec->tokens[t];
        s->token_seq[t] = tk->seq;
        s->token_pos[t] = tk->pos;
        test_fill_bf16(s->q_lat + (long)t * H * L, H * L, tk->q_seed, spec->cancelling ? 1.0f / 4096 : 1.0f);
        test_fill_bf16(s->q_pe + (long)t * H * Q_PE_HEAD, H * Q_PE_HEAD, tk->q_seed + 77, 1.0f);
    }
    s->a = (mla_attention_args){
        .out = s->out, .q_lat = s->q_lat, .q_pe = s->q_pe, .kv_cache = s->cache,
        .block_table = s->block_table, .token_seq = s->token_seq, .token_pos = s->token_pos,
        .seq_lens = s->seq_lens, .T = spec->T, .H = H, .L = L, .R = R,
        .ld_out = ld_out, .ld_q_lat = (long)H * L, .ld_q_pe = (long)H * Q_PE_HEAD,
        .head_stride_q_pe = Q_PE_HEAD, .block_size = bs, .max_blocks_per_seq = spec->max_blocks,
        .num_seqs = spec->num_seqs, .max_seq_len = max_len, .kv_split_size = spec->kv_split,
        .scale = 0.25f,
    };
}

static void step_free(step *s) {
    free(s->seq_lens);
    free(s->token_pos);
    free(s->token_seq);
    free(s->block_table);
    free(s->cache);
    free(s->q_pe);
    free(s->q_lat);
    free(s->out);
}

// Runs the step on set `set` after poisoning the output; checks every value written and the
// padding left alone.
static void step_run(step *s, int set) {
    long n = (long)s->a.T * s->a.ld_out, row = (long)H * L, pad = s->a.ld_out - row;
    test_poison(s->out, sizeof(bf16) * n);
    ops_set *ops = test_cpu_set(set);
    ops->mla_attention(ops, &s->a);
    for (int t = 0; t < s->a.T; t++) {
        assert_int_equal(test_unwritten_bf16(s->out + t * s->a.ld_out, row), 0);
        assert_int_equal(test_unwritten_bf16(s->out + t * s->a.ld_out + row, pad), pad);
    }
}

// ---------------------------------------------------------------------------------------------
// Accuracy
// ---------------------------------------------------------------------------------------------

static void test_accuracy(void **state) {
    (void)state;
    // Three sequences: one token, a long one mid-decode (three splits), one mid-prefill whose
    // chunk queries positions 500..519 (across the split boundary at 512).
    step_spec spec = {.num_seqs = 3, .max_blocks = 80, .layout_seed = 5, .pad_out = 13};
    spec.seqs[0] = (seq_spec){1, 11};
    spec.seqs[1] = (seq_spec){1200, 12};
    spec.seqs[2] = (seq_spec){520, 13};
    spec.tokens[spec.T++] = (token_spec){0, 0, 21};
    spec.tokens[spec.T++] = (token_spec){1, 1199, 22};
    for (int p = 500; p < 520; p++) spec.tokens[spec.T++] = (token_spec){2, p, 30 + (uint64_t)p};
    step s;
    step_build(&s, &spec);
    double *ref = test_alloc(sizeof(double) * spec.T * H * L);
    f64_mla_attention(&s.a, ref);
    for (int set = 0; set < TEST_N_THREADS; set++) {
        step_run(&s, set);
        for (int t = 0; t < spec.T; t++)
            for (int h = 0; h < H; h++)
                assert_true(f64_rel_l2_bf16(s.out + t * s.a.ld_out + h * L, ref + ((long)t * H + h) * L, L) < TOL_BF16);
    }
    free(ref);
    step_free(&s);
}

// ---------------------------------------------------------------------------------------------
// kv_cache_write
// ---------------------------------------------------------------------------------------------

static void test_kv_cache_write(void **state) {
    (void)state;
    enum { T = 29, SLOTS = 100, LD_C = L + 24, LD_K = R + 5 };
    bf16 *c_kv = test_alloc(sizeof(bf16) * T * LD_C), *k_pe = test_alloc(sizeof(bf16) * T * LD_K);
    bf16 *cache = test_alloc(sizeof(bf16) * SLOTS * SLOT);
    double *ref = test_alloc(sizeof(double) * SLOTS * SLOT);
    int32_t slot[T];
    test_fill_bf16(c_kv, T * LD_C, 1, 1.0f);
    test_fill_bf16(k_pe, T * LD_K, 2, 1.0f);
    for (int t = 0; t < T; t++) slot[t] = (t * 37 + 11) % SLOTS;     // distinct, scattered
    f64_kv_cache_write(ref, c_kv, LD_C, k_pe, LD_K, slot, T, L, R);
    for (int set = 0; set < TEST_N_THREADS; set++) {
        test_poison(cache, sizeof(bf16) * SLOTS * SLOT);
        ops_set *ops = test_cpu_set(set);
        ops->kv_cache_write(ops, cache, c_kv, LD_C, k_pe, LD_K, slot, T, L, R);
        long written = 0;
        for (int i = 0; i < SLOTS; i++) {
            bool is_target = false;
            for (int t = 0; t < T; t++) is_target = is_target || slot[t] == i;
            long unwritten = test_unwritten_bf16(cache + (long)i * SLOT, SLOT);
            if (!is_target) {
                assert_int_equal(unwritten, SLOT);                   // other slots untouched
                continue;
            }
            assert_int_equal(unwritten, 0);
            assert_true(f64_rel_l2_bf16(cache + (long)i * SLOT, ref + (long)i * SLOT, SLOT) == 0.0);
            written++;
        }
        assert_int_equal(written, T);
    }
    free(ref);
    free(cache);
    free(k_pe);
    free(c_kv);
}

// ---------------------------------------------------------------------------------------------
// Invariance
// ---------------------------------------------------------------------------------------------

// Output of token `index` of the step on set `set`.
static void token_output(const step_spec *spec, int index, int set, bf16 *out) {
    step s;
    step_build(&s, spec);
    step_run(&s, set);
    memcpy(out, s.out + index * s.a.ld_out, sizeof(bf16) * H * L);
    step_free(&s);
}

static void check_position(int pos, bool cancelling, int kv_split) {
    const uint64_t kv = 1000 + (uint64_t)pos, q = 2000 + (uint64_t)pos;
    bf16 alone[H * L], got[H * L];

    // Alone: one sequence holding exactly [0, pos], one query token, one thread.
    step_spec solo = {.num_seqs = 1, .T = 1, .max_blocks = pos / BLOCK + 1, .layout_seed = 1,
                      .cancelling = cancelling, .kv_split = kv_split};
    solo.seqs[0] = (seq_spec){pos + 1, kv};
    solo.tokens[0] = (token_spec){0, pos, q};
    token_output(&solo, 0, 0, alone);

    // Decode among others: longer and shorter sequences, the token in the middle, its sequence
    // in row 2, other blocks, a wider block table.
    step_spec decode = {.num_seqs = 4, .max_blocks = 100, .layout_seed = 2,
                        .cancelling = cancelling, .kv_split = kv_split};
    decode.seqs[0] = (seq_spec){1500, 7};
    decode.seqs[1] = (seq_spec){3, 8};
    decode.seqs[2] = (seq_spec){pos + 1, kv};
    decode.seqs[3] = (seq_spec){700, 9};
    decode.tokens[decode.T++] = (token_spec){0, 1499, 50};
    decode.tokens[decode.T++] = (token_spec){1, 2, 51};
    int decode_index = decode.T;
    decode.tokens[decode.T++] = (token_spec){2, pos, q};
    decode.tokens[decode.T++] = (token_spec){3, 699, 52};

    // Prefill chunk: the sequence already holds 40 positions beyond pos (causality must hide
    // them), the token sits inside a chunk of its own sequence's tokens, next to another
    // sequence's decode token.
    step_spec prefill = {.num_seqs = 2, .max_blocks = (pos + 41) / BLOCK + 3, .layout_seed = 3,
                         .cancelling = cancelling, .kv_split = kv_split};
    prefill.seqs[0] = (seq_spec){(pos + 41) / BLOCK * BLOCK + 5, 10};
    prefill.seqs[1] = (seq_spec){pos + 41, kv};
    prefill.tokens[prefill.T++] = (token_spec){0, prefill.seqs[0].len - 1, 60};
    int first = pos - 5 > 0 ? pos - 5 : 0, prefill_index = -1;
    for (int p = first; p < pos + 41 && prefill.T < MAX_TOKENS; p++) {
        if (p == pos) prefill_index = prefill.T;
        prefill.tokens[prefill.T++] = (token_spec){1, p, p == pos ? q : 70 + (uint64_t)p};
    }

    for (int set = 0; set < TEST_N_THREADS; set++) {
        token_output(&solo, 0, set, got);
        assert_true(test_same_bits(alone, got, sizeof(bf16), H * L, "attention alone, other thread count"));
        token_output(&decode, decode_index, set, got);
        if (!test_same_bits(alone, got, sizeof(bf16), H * L, "attention in a decode batch")) {
            fprintf(stderr, "pos=%d threads=%d cancelling=%d kv_split=%d\n", pos, set + 1, cancelling, kv_split);
            fail();
        }
        token_output(&prefill, prefill_index, set, got);
        if (!test_same_bits(alone, got, sizeof(bf16), H * L, "attention in a prefill chunk")) {
            fprintf(stderr, "pos=%d threads=%d cancelling=%d kv_split=%d\n", pos, set + 1, cancelling, kv_split);
            fail();
        }
    }
}

static void test_invariance(void **state) {
    (void)state;
    // Tile (64) and split (512) boundaries and either side of them.
    static const int positions[] = {0, 1, 63, 64, 65, 511, 512, 513, 1100};
    for (size_t i = 0; i < sizeof positions / sizeof positions[0]; i++) {
        check_position(positions[i], false, 0);
        check_position(positions[i], true, 0);
    }
}

// A caller-chosen split size is honoured (and is then the only thing that sets the order):
// 0 means 512; 128 gives other bits on cancelling data, invariant all the same.
static void test_split_size(void **state) {
    (void)state;
    enum { POS = 700 };
    bf16 base[H * L], got[H * L];
    step_spec solo = {.num_seqs = 1, .T = 1, .max_blocks = POS / BLOCK + 1, .layout_seed = 1, .cancelling = true};
    solo.seqs[0] = (seq_spec){POS + 1, 5};
    solo.tokens[0] = (token_spec){0, POS, 6};
    token_output(&solo, 0, 0, base);
    solo.kv_split = 512;
    token_output(&solo, 0, 1, got);
    assert_true(test_same_bits(base, got, sizeof(bf16), H * L, "kv_split_size 512 vs 0"));
    solo.kv_split = 128;
    token_output(&solo, 0, 0, got);
    assert_memory_not_equal(base, got, sizeof base);
    check_position(POS, true, 128);
    check_position(200, false, 64);
}

// Blocks of 7, 5 and 1 tokens put block boundaries inside the kernel's groups of four keys, and
// the blocks of a batch are scattered: one token alone over consecutive blocks must match, bit
// for bit, the same token over scattered blocks beside other sequences.
static void test_block_sizes(void **state) {
    (void)state;
    static const int blocks[] = {7, 5, 1};
    enum { POS = 150 };
    bf16 alone[H * L], got[H * L];
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
        int bs = blocks[b];
        step_spec solo = {.num_seqs = 1, .T = 1, .max_blocks = POS / bs + 1, .block = bs,
                          .cancelling = true};
        solo.seqs[0] = (seq_spec){POS + 1, 31};
        solo.tokens[0] = (token_spec){0, POS, 32};
        step s;
        step_build(&s, &solo);
        for (int k = 0; k < solo.max_blocks; k++) s.block_table[k] = k;  // consecutive
        for (int j = 0; j <= POS; j++)  // refill: the contents follow the table
            cancelling_kv(s.cache + (long)j * SLOT, 31, j);
        step_run(&s, 0);
        memcpy(alone, s.out, sizeof alone);
        step_free(&s);

        step_spec batch = {.num_seqs = 3, .max_blocks = 400 / bs + 1, .block = bs,
                           .layout_seed = 40 + (uint64_t)bs, .cancelling = true};
        batch.seqs[0] = (seq_spec){400, 33};
        batch.seqs[1] = (seq_spec){POS + 1, 31};
        batch.seqs[2] = (seq_spec){9, 34};
        batch.tokens[batch.T++] = (token_spec){0, 399, 35};
        batch.tokens[batch.T++] = (token_spec){1, POS, 32};
        batch.tokens[batch.T++] = (token_spec){2, 8, 36};
        for (int set = 0; set < TEST_N_THREADS; set++) {
            token_output(&batch, 1, set, got);
            if (!test_same_bits(alone, got, sizeof(bf16), H * L, "attention over scattered blocks")) {
                fprintf(stderr, "block_size=%d threads=%d\n", bs, set + 1);
                fail();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A key's score is lanes.h's dot wherever it sits: the kernel scores a tile's keys four at a
// time and the last few one by one, and both must give a key the same bits (lanes.h's order).
// At DeepSeek's widths (L 512, R 64): over fewer terms bf16 products sum exactly in fp32 in any
// order, and no order would show. Probe: two keys P and D of nearly equal score, large enough
// (about 2^12) that one ulp of a score moves the output's bf16 bits, beside keys N = -P whose
// weight is exactly 0. Attending [P, D, N, N, N] and [N, D, N, N, P] then gives the same bits
// only if P scores alike as the first of a group of four and as the last key on its own (zero
// terms add nothing exactly).
// ---------------------------------------------------------------------------------------------

enum { PL = 512, PR = 64, PSLOT = PL + PR };

static double dot_f64(const bf16 *q_lat, const bf16 *q_pe, const bf16 *slot) {
    double d = 0;
    for (int i = 0; i < PL; i++) d += (double)bf16_to_float(q_lat[i]) * bf16_to_float(slot[i]);
    for (int i = 0; i < PR; i++) d += (double)bf16_to_float(q_pe[i]) * bf16_to_float(slot[PL + i]);
    return d;
}

// Runs one query at position 4 over the five keys keys[0..4]; out receives its PL values.
static void attend_five(const bf16 *q_lat, const bf16 *q_pe, const bf16 *const keys[5], float scale,
                        bf16 *out) {
    bf16 *cache = test_alloc(sizeof(bf16) * BLOCK * PSLOT);
    test_fill_bf16(cache, (long)BLOCK * PSLOT, 5, 1.0f);  // slots past the keys: never read
    for (int j = 0; j < 5; j++) memcpy(cache + (long)j * PSLOT, keys[j], sizeof(bf16) * PSLOT);
    int32_t block_table[1] = {0}, token_seq[1] = {0}, token_pos[1] = {4}, seq_lens[1] = {5};
    mla_attention_args a = {
        .out = out, .q_lat = q_lat, .q_pe = q_pe, .kv_cache = cache, .block_table = block_table,
        .token_seq = token_seq, .token_pos = token_pos, .seq_lens = seq_lens, .T = 1, .H = 1,
        .L = PL, .R = PR, .ld_out = PL, .ld_q_lat = PL, .ld_q_pe = PR, .head_stride_q_pe = PR,
        .block_size = BLOCK, .max_blocks_per_seq = 1, .num_seqs = 1, .max_seq_len = 5, .scale = scale};
    test_poison(out, sizeof(bf16) * PL);
    ops_set *ops = test_cpu_set(0);
    ops->mla_attention(ops, &a);
    assert_int_equal(test_unwritten_bf16(out, PL), 0);
    free(cache);
}

static void test_score_path(void **state) {
    (void)state;
    bf16 q_lat[PL], q_pe[PR], P[PSLOT], D[PSLOT], N[PSLOT], first[PL], last[PL];
    int probes = 0;
    for (uint64_t trial = 0; probes < 48 && trial < 1000; trial++) {
        test_fill_bf16(q_lat, PL, 9000 + trial, 1.0f);
        test_fill_bf16(q_pe, PR, 19000 + trial, 1.0f);
        test_fill_bf16(P, PSLOT, 29000 + trial, 1.0f);
        test_fill_bf16(D, PSLOT, 39000 + trial, 1.0f);
        double dp = dot_f64(q_lat, q_pe, P);
        if (dp < 0) {
            for (int i = 0; i < PSLOT; i++) P[i] ^= 0x8000;
            dp = -dp;
        }
        if (dp < 1.0) continue;
        // D's largest-weighted rope value set so that D's dot lands next to P's.
        int i_max = 0;
        for (int i = 1; i < PR; i++)
            if (fabsf(bf16_to_float(q_pe[i])) > fabsf(bf16_to_float(q_pe[i_max]))) i_max = i;
        D[PL + i_max] = float_to_bf16(0.0f);
        double rest = dot_f64(q_lat, q_pe, D), qi = bf16_to_float(q_pe[i_max]);
        D[PL + i_max] = float_to_bf16((float)((dp - rest) / qi));
        double gap = dot_f64(q_lat, q_pe, D) - dp;
        float scale = (float)(4096.0 / dp);
        if (fabs(gap * scale) > 4.0) continue;  // one of the two would take all the weight
        for (int i = 0; i < PSLOT; i++) N[i] = P[i] ^ 0x8000;
        const bf16 *as_first[5] = {P, D, N, N, N}, *as_last[5] = {N, D, N, N, P};
        attend_five(q_lat, q_pe, as_first, scale, first);
        attend_five(q_lat, q_pe, as_last, scale, last);
        if (memcmp(first, last, sizeof first) != 0)
            fail_msg("trial %d: a key scored four at a time and the same key scored alone give other "
                     "bits (the output of [P, D, N, N, N] differs from [N, D, N, N, P])", (int)trial);
        probes++;
    }
    assert_int_equal(probes, 48);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_kv_cache_write),
        cmocka_unit_test(test_invariance),
        cmocka_unit_test(test_split_size),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_score_path),
    };
    return cmocka_run_group_tests(tests, test_cpu_sets_setup, test_cpu_sets_teardown);
}
