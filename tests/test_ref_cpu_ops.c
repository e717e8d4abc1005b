// tests/test_ref_cpu_ops.c — the reference (not batch-invariant) CPU kernel set
// (reference/cpu/): each reimplemented op computes ops.h's function (against the float64
// oracle, kernels/f64/f64.h, with the tolerances below), writes every output, and — the point
// of a negative control — gives some row other bits alone than inside a larger batch.
// The ops it takes from the invariant set are checked to be wired.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <math.h>     // sqrtf, INFINITY
#include <stdio.h>    // printf
#include <stdlib.h>   // free
#include <string.h>   // memcmp, memcpy

#include "../kernels/cpu/inv_cpu.h"          // inv_cpu_create: the ops the set must reuse
#include "../kernels/f64/f64.h"              // f64_<op>, f64_rel_l2_*, f64_max_abs_err_f32
#include "../reference/cpu/ref_cpu.h"        // ref_cpu_create
#include "../reference/cpu/ref_cpu_ops.h"    // ref_cpu_<op>, the shape rules
#include "test_util.h"                       // test_fill_*, test_poison, test_unwritten_*
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

// Accuracy against the float64 oracle, as relative L2 error over the whole output.
// One bf16 rounding of the result costs about 2^-9/sqrt(3) ≈ 1.1e-3 (RMS, relative); fp32
// accumulation in any order adds ~1e-6. Ops that round once or twice must stay under
// TOL_BF16; the MoE expert MLP rounds gate_up, silu and the activation to bf16 on the way
// (the oracle does not), hence its looser bound.
#define TOL_BF16 4e-3
#define TOL_BF16_MLP 1e-2
// Logprobs are fp32: logits of magnitude <= 4 over a vocabulary of 1000 give a log-sum-exp
// within a few fp32 ulps of ~7.
#define TOL_LOGPROB_ABS 5e-5

// Both thread counts the CI machine can run; the shape dependence must show on each.
static const int thread_counts[] = {1, 2};

// Rows of two buffers (rows of row_bytes, stride_bytes apart) whose bits differ.
static int rows_differing_strided(const void *a, const void *b, size_t row_bytes,
                                  size_t stride_bytes, int rows) {
    int n = 0;
    for (int i = 0; i < rows; i++)
        n += memcmp((const char *)a + (size_t)i * stride_bytes,
                    (const char *)b + (size_t)i * stride_bytes, row_bytes) != 0;
    return n;
}

static int rows_differing(const void *a, const void *b, size_t row_bytes, int rows) {
    return rows_differing_strided(a, b, row_bytes, row_bytes, rows);
}

// =============================================================================================
// The set: fields and reused ops
// =============================================================================================

static void set_fields_and_reused_ops_are_wired(void **state) {
    (void)state;
    ops_set *ops = ref_cpu_create(2);
    assert_non_null(ops);
    assert_string_equal(ops->name, "reference");
    assert_string_equal(ops->device, "cpu");
    assert_false(ops->batch_invariant);
    assert_non_null(ops->ctx);

    // Invariant by nature: the invariant set's own functions.
    ops_set *inv = inv_cpu_create(1);
    assert_ptr_equal(ops->alloc, inv->alloc);
    assert_ptr_equal(ops->release, inv->release);
    assert_ptr_equal(ops->upload, inv->upload);
    assert_ptr_equal(ops->download, inv->download);
    assert_ptr_equal(ops->sync, inv->sync);
    assert_ptr_equal(ops->embedding, inv->embedding);
    assert_ptr_equal(ops->rope, inv->rope);
    assert_ptr_equal(ops->residual_add, inv->residual_add);
    assert_ptr_equal(ops->silu_mul, inv->silu_mul);
    assert_ptr_equal(ops->kv_cache_write, inv->kv_cache_write);
    assert_ptr_equal(ops->merge_attention, inv->merge_attention);
    inv->destroy(inv);
    assert_non_null(ops->moe_route);  // the invariant router, its one order noted in the log

    // Reductions: this set's shape-dependent versions.
    assert_ptr_equal(ops->gemm, ref_cpu_gemm);
    assert_ptr_equal(ops->rmsnorm, ref_cpu_rmsnorm);
    assert_ptr_equal(ops->mla_attention, ref_cpu_mla_attention);
    assert_ptr_equal(ops->moe_experts, ref_cpu_moe_experts);
    assert_ptr_equal(ops->moe_combine, ref_cpu_moe_combine);
    assert_ptr_equal(ops->logprobs, ref_cpu_logprobs);

    // The reused ops run on this set's context: memory round trip and an embedding lookup.
    enum { D = 40, ROWS = 5, T = 7 };
    bf16 table[ROWS * D], host[T * D], expect[T * D];
    int32_t ids[T] = {4, 0, 2, 2, 1, 3, 4};
    test_fill_bf16(table, ROWS * D, 11, 1.0f);
    bf16 *dev_table = ops->alloc(ops, sizeof table, "test table");
    bf16 *dev_out = ops->alloc(ops, sizeof host, "test out");
    ops->upload(ops, dev_table, table, sizeof table);
    test_poison(host, sizeof host);
    ops->upload(ops, dev_out, host, sizeof host);
    ops->embedding(ops, dev_out, dev_table, ids, T, D);
    ops->sync(ops);
    ops->download(ops, host, dev_out, sizeof host);
    for (int t = 0; t < T; t++) memcpy(expect + t * D, table + ids[t] * D, D * sizeof(bf16));
    assert_memory_equal(host, expect, sizeof host);
    ops->release(ops, dev_table);
    ops->release(ops, dev_out);
    ops->destroy(ops);
}

// =============================================================================================
// GEMM: split-K from a BLAS-like heuristic
// =============================================================================================

static void gemm_plan_changes_with_M_at_any_thread_count(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        int th = thread_counts[i];
        // The tiny model's reduction lengths: hidden 256, q_lora 96, kv_lora 64, moe 128.
        int Ks[] = {64, 96, 128, 256};
        for (int k = 0; k < 4; k++) {
            ref_gemm_plan one = ref_gemm_plan_for(1, 256, Ks[k], th);
            ref_gemm_plan many = ref_gemm_plan_for(64, 256, Ks[k], th);
            assert_true(one.splits > 1);
            assert_true(one.splits != many.splits || one.lanes != many.lanes);
        }
        ref_gemm_plan large = ref_gemm_plan_for(512, 512, 256, th);
        assert_int_equal(large.splits, 1);
    }
}

// y = x · wᵀ for one dense case, bf16 or fp32 out, against the oracle.
static void check_gemm_dense(ops_set *ops, int M, int N, int K, bool y_f32, uint64_t seed) {
    bf16 *x = test_alloc((size_t)M * K * sizeof(bf16));
    bf16 *w = test_alloc((size_t)N * K * sizeof(bf16));
    void *y = test_alloc((size_t)M * N * sizeof(float));
    double *ref = test_alloc((size_t)M * N * sizeof(double));
    test_fill_bf16(x, (long)M * K, seed, 1.0f);
    test_fill_bf16(w, (long)N * K, seed + 1, 0.1f);
    test_poison(y, (size_t)M * N * sizeof(float));
    gemm_args a = {.y = y, .y_f32 = y_f32, .x = x, .w = w, .M = M, .N = N, .K = K};
    ops->gemm(ops, &a);
    f64_gemm(&a, ref);
    long n = (long)M * N;
    if (y_f32) {
        assert_int_equal(test_unwritten_f32(y, n), 0);
        assert_true(f64_rel_l2_f32(y, ref, n) < 1e-5);
    } else {
        assert_int_equal(test_unwritten_bf16(y, n), 0);
        double err = f64_rel_l2_bf16(y, ref, n);
        if (!(err < TOL_BF16)) printf("gemm M=%d N=%d K=%d: rel L2 %g\n", M, N, K, err);
        assert_true(err < TOL_BF16);
    }
    free(x);
    free(w);
    free(y);
    free(ref);
}

static void gemm_matches_oracle(void **state) {
    (void)state;
    ops_set *ops = ref_cpu_create(2);
    int Ms[] = {1, 3, 17, 64, 200};  // every branch of the heuristic
    int Ks[] = {64, 96, 200};        // 200: parts and lanes with tails
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 3; k++) {
            check_gemm_dense(ops, Ms[i], 96, Ks[k], false, 100 + i * 7 + k);
            check_gemm_dense(ops, Ms[i], 70, Ks[k], true, 200 + i * 7 + k);
        }
    ops->destroy(ops);
}

// Strided and batched: every gemm_args field; the gaps between rows stay untouched.
static void gemm_honours_strides_and_batch(void **state) {
    (void)state;
    ops_set *ops = ref_cpu_create(2);
    enum { B = 3, M = 5, N = 70, K = 72, LDX = K + 5, LDY = N + 3, LDW = K + 7 };
    const long sx = (long)M * LDX + 11, sy = (long)M * LDY + 13, sw = (long)N * LDW + 17;
    for (int f32 = 0; f32 < 2; f32++) {
        size_t ysize = f32 ? sizeof(float) : sizeof(bf16);
        bf16 *x = test_alloc((size_t)B * sx * sizeof(bf16));
        bf16 *w = test_alloc((size_t)B * sw * sizeof(bf16));
        char *y = test_alloc((size_t)B * sy * ysize);
        double *ref = test_alloc((size_t)B * M * N * sizeof(double));
        test_fill_bf16(x, B * sx, 31 + f32, 1.0f);
        test_fill_bf16(w, B * sw, 41 + f32, 0.1f);
        test_poison(y, (size_t)B * sy * ysize);
        gemm_args a = {.y = y, .y_f32 = f32, .x = x, .w = w, .M = M, .N = N, .K = K,
                       .ldx = LDX, .ldy = LDY, .ldw = LDW, .batch = B,
                       .stride_x = sx, .stride_y = sy, .stride_w = sw};
        ops->gemm(ops, &a);
        f64_gemm(&a, ref);

        // Gather the strided rows densely; count gap elements that were written.
        char *dense = test_alloc((size_t)B * M * N * ysize);
        long gaps_written = 0, gaps = 0;
        for (int b = 0; b < B; b++)
            for (int m = 0; m < M; m++) {
                const char *row = y + ((size_t)b * sy + (size_t)m * LDY) * ysize;
                memcpy(dense + ((size_t)b * M + m) * N * ysize, row, (size_t)N * ysize);
                long gap = m + 1 < M ? LDY - N : sy - (long)(M - 1) * LDY - N;
                if (b == B - 1 && m == M - 1) gap = 0;
                gaps += gap;
                gaps_written += gap - test_count_poisoned(row + (size_t)N * ysize, ysize, gap);
            }
        long n = (long)B * M * N;
        assert_true(gaps > 0);
        assert_int_equal(gaps_written, 0);
        if (f32) {
            assert_int_equal(test_unwritten_f32((float *)dense, n), 0);
            assert_true(f64_rel_l2_f32((float *)dense, ref, n) < 1e-5);
        } else {
            assert_int_equal(test_unwritten_bf16((bf16 *)dense, n), 0);
            assert_true(f64_rel_l2_bf16((bf16 *)dense, ref, n) < TOL_BF16);
        }
        free(x);
        free(w);
        free(y);
        free(ref);
        free(dense);
    }
    ops->destroy(ops);
}

// Rows computed alone (M = 1) against the same rows inside one product of M rows: the number
// of rows whose bits differ.
static int gemm_rows_differing(ops_set *ops, int M, int N, int K, bool y_f32, uint64_t seed) {
    size_t ysize = y_f32 ? sizeof(float) : sizeof(bf16);
    bf16 *x = test_alloc((size_t)M * K * sizeof(bf16));
    bf16 *w = test_alloc((size_t)N * K * sizeof(bf16));
    char *batched = test_alloc((size_t)M * N * ysize);
    char *alone = test_alloc((size_t)M * N * ysize);
    test_fill_bf16(x, (long)M * K, seed, 1.0f);
    test_fill_bf16(w, (long)N * K, seed + 1, 0.1f);
    gemm_args a = {.y = batched, .y_f32 = y_f32, .x = x, .w = w, .M = M, .N = N, .K = K};
    ops->gemm(ops, &a);
    for (int m = 0; m < M; m++) {
        gemm_args one = a;
        one.M = 1;
        one.x = x + (long)m * K;
        one.y = alone + (size_t)m * N * ysize;
        ops->gemm(ops, &one);
    }
    int n = rows_differing(alone, batched, (size_t)N * ysize, M);
    free(x);
    free(w);
    free(batched);
    free(alone);
    return n;
}

static void gemm_row_bits_depend_on_M(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        ops_set *ops = ref_cpu_create(thread_counts[i]);
        // fp32 out (the logits GEMM): nearly every row differs.
        int f32_rows = gemm_rows_differing(ops, 16, 512, 64, true, 7);
        // bf16 out: the final rounding hides most fp32 differences; enough elements show some.
        int bf16_rows = gemm_rows_differing(ops, 64, 2048, 256, false, 9);
        printf("gemm, %d thread(s): rows differing alone vs batched: fp32 %d/16, bf16 %d/64\n",
               thread_counts[i], f32_rows, bf16_rows);
        assert_true(f32_rows > 0);
        assert_true(bf16_rows > 0);
        ops->destroy(ops);
    }
}

// =============================================================================================
// RMSNorm: chunk count from M
// =============================================================================================

static void rmsnorm_matches_oracle(void **state) {
    (void)state;
    ops_set *ops = ref_cpu_create(2);
    int Ms[] = {1, 5, 40, 300};
    for (int i = 0; i < 4; i++) {
        int M = Ms[i], D = 256;
        long ld_x = D + 8, ld_out = D + 4;
        bf16 *x = test_alloc((size_t)M * ld_x * sizeof(bf16));
        bf16 *w = test_alloc((size_t)D * sizeof(bf16));
        bf16 *out = test_alloc((size_t)M * ld_out * sizeof(bf16));
        bf16 *dense = test_alloc((size_t)M * D * sizeof(bf16));
        double *ref = test_alloc((size_t)M * D * sizeof(double));
        test_fill_bf16(x, M * ld_x, 50 + i, 2.0f);
        test_fill_bf16(w, D, 60 + i, 1.0f);
        test_poison(out, (size_t)M * ld_out * sizeof(bf16));
        ops->rmsnorm(ops, out, ld_out, x, ld_x, w, M, D, 1e-6f);
        f64_rmsnorm(ref, x, ld_x, w, M, D, 1e-6);
        long gaps_written = 0;
        for (int m = 0; m < M; m++) {
            memcpy(dense + (long)m * D, out + m * ld_out, D * sizeof(bf16));
            gaps_written += (ld_out - D) - test_unwritten_bf16(out + m * ld_out + D, ld_out - D);
        }
        assert_int_equal(gaps_written, 0);
        assert_int_equal(test_unwritten_bf16(dense, (long)M * D), 0);
        assert_true(f64_rel_l2_bf16(dense, ref, (long)M * D) < TOL_BF16);
        free(x);
        free(w);
        free(out);
        free(dense);
        free(ref);
    }
    ops->destroy(ops);
}

static void rmsnorm_row_bits_depend_on_M(void **state) {
    (void)state;
    assert_true(ref_rmsnorm_chunks(1, 2048) != ref_rmsnorm_chunks(512, 2048));
    enum { M = 512, D = 2048 };
    bf16 *x = test_alloc((size_t)M * D * sizeof(bf16));
    bf16 *w = test_alloc(D * sizeof(bf16));
    bf16 *batched = test_alloc((size_t)M * D * sizeof(bf16));
    bf16 *alone = test_alloc((size_t)M * D * sizeof(bf16));
    test_fill_bf16(x, (long)M * D, 70, 2.0f);
    test_fill_bf16(w, D, 71, 1.0f);
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        ops_set *ops = ref_cpu_create(thread_counts[i]);
        ops->rmsnorm(ops, batched, D, x, D, w, M, D, 1e-6f);
        for (int m = 0; m < M; m++)
            ops->rmsnorm(ops, alone + (long)m * D, D, x + (long)m * D, D, w, 1, D, 1e-6f);
        int rows = rows_differing(alone, batched, D * sizeof(bf16), M);
        printf("rmsnorm, %d thread(s): rows differing alone vs batched: %d/%d\n",
               thread_counts[i], rows, M);
        assert_true(rows > 0);
        ops->destroy(ops);
    }
    free(x);
    free(w);
    free(batched);
    free(alone);
}

// =============================================================================================
// MLA attention: split-KV from the batch's longest sequence
// =============================================================================================

// Two sequences (100 and 300 tokens) in a shuffled paged cache; query tokens are all of
// sequence 0's prompt and the last 20 of sequence 1.
enum { MLA_H = 4, MLA_L = 64, MLA_R = 16, MLA_BS = 16, MLA_SEQS = 2, MLA_MAXB = 19,
       MLA_BLOCKS = 26, MLA_T0 = 100, MLA_T1 = 20, MLA_T = MLA_T0 + MLA_T1 };
#define MLA_HEAD_STRIDE_PE (MLA_R + 8)
#define MLA_LD_OUT (MLA_H * MLA_L + 8)

typedef struct {
    bf16 *cache, *q_lat, *q_pe;
    int32_t block_table[MLA_SEQS * MLA_MAXB], token_seq[MLA_T], token_pos[MLA_T];
    int32_t seq_lens[MLA_SEQS];
} mla_fixture;

static void mla_fixture_make(mla_fixture *f, uint64_t seed) {
    f->cache = test_alloc((size_t)MLA_BLOCKS * MLA_BS * (MLA_L + MLA_R) * sizeof(bf16));
    f->q_lat = test_alloc((size_t)MLA_T * MLA_H * MLA_L * sizeof(bf16));
    f->q_pe = test_alloc((size_t)MLA_T * MLA_H * MLA_HEAD_STRIDE_PE * sizeof(bf16));
    test_fill_bf16(f->cache, (long)MLA_BLOCKS * MLA_BS * (MLA_L + MLA_R), seed, 1.0f);
    test_fill_bf16(f->q_lat, (long)MLA_T * MLA_H * MLA_L, seed + 1, 1.0f);
    test_fill_bf16(f->q_pe, (long)MLA_T * MLA_H * MLA_HEAD_STRIDE_PE, seed + 2, 1.0f);
    // Blocks handed out in a scrambled order: 7 for sequence 0, 19 for sequence 1.
    int32_t perm[MLA_BLOCKS];
    for (int i = 0; i < MLA_BLOCKS; i++) perm[i] = (i * 11 + 5) % MLA_BLOCKS;
    for (int i = 0; i < MLA_SEQS * MLA_MAXB; i++) f->block_table[i] = -1;
    for (int b = 0; b < 7; b++) f->block_table[b] = perm[b];
    for (int b = 0; b < 19; b++) f->block_table[MLA_MAXB + b] = perm[7 + b];
    f->seq_lens[0] = MLA_T0;
    f->seq_lens[1] = 300;
    for (int t = 0; t < MLA_T0; t++) f->token_seq[t] = 0, f->token_pos[t] = t;
    for (int t = 0; t < MLA_T1; t++) f->token_seq[MLA_T0 + t] = 1, f->token_pos[MLA_T0 + t] = 280 + t;
}

static void mla_fixture_free(mla_fixture *f) {
    free(f->cache);
    free(f->q_lat);
    free(f->q_pe);
}

// Attention for query tokens [t0, t0 + T) of the fixture; out has row stride MLA_LD_OUT.
static mla_attention_args mla_args(mla_fixture *f, bf16 *out, int t0, int T, int max_seq_len) {
    return (mla_attention_args){
        .out = out, .q_lat = f->q_lat + (long)t0 * MLA_H * MLA_L,
        .q_pe = f->q_pe + (long)t0 * MLA_H * MLA_HEAD_STRIDE_PE, .kv_cache = f->cache,
        .block_table = f->block_table, .token_seq = f->token_seq + t0,
        .token_pos = f->token_pos + t0, .seq_lens = f->seq_lens,
        .T = T, .H = MLA_H, .L = MLA_L, .R = MLA_R,
        .ld_out = MLA_LD_OUT, .ld_q_lat = MLA_H * MLA_L, .ld_q_pe = MLA_H * MLA_HEAD_STRIDE_PE,
        .head_stride_q_pe = MLA_HEAD_STRIDE_PE, .block_size = MLA_BS,
        .max_blocks_per_seq = MLA_MAXB, .num_seqs = MLA_SEQS, .max_seq_len = max_seq_len,
        .scale = 1.0f / sqrtf((float)(MLA_L + MLA_R)),
    };
}

static void mla_split_rule(void **state) {
    (void)state;
    // TRITON_MLA's count: one split per 512 tokens, a power of two, at most 2 per core ...
    assert_int_equal(ref_mla_num_kv_splits(4096, 16), 8);
    assert_int_equal(ref_mla_num_kv_splits(4096, 2), 4);
    assert_int_equal(ref_mla_num_kv_splits(2048, 16), 4);
    // ... never fewer than two past 64 tokens, and the split length follows the longest one.
    assert_int_equal(ref_mla_num_kv_splits(40, 2), 1);
    assert_int_equal(ref_mla_num_kv_splits(100, 1), 2);
    assert_int_equal(ref_mla_split_len(100, 2), 64);
    assert_int_equal(ref_mla_split_len(300, 2), 160);
}

static void mla_attention_matches_oracle(void **state) {
    (void)state;
    mla_fixture f;
    mla_fixture_make(&f, 80);
    ops_set *ops = ref_cpu_create(2);
    bf16 *out = test_alloc((size_t)MLA_T * MLA_LD_OUT * sizeof(bf16));
    bf16 *dense = test_alloc((size_t)MLA_T * MLA_H * MLA_L * sizeof(bf16));
    double *ref = test_alloc((size_t)MLA_T * MLA_H * MLA_L * sizeof(double));
    test_poison(out, (size_t)MLA_T * MLA_LD_OUT * sizeof(bf16));
    mla_attention_args a = mla_args(&f, out, 0, MLA_T, 300);
    ops->mla_attention(ops, &a);
    f64_mla_attention(&a, ref);
    long gaps_written = 0;
    for (int t = 0; t < MLA_T; t++) {
        memcpy(dense + (long)t * MLA_H * MLA_L, out + (long)t * MLA_LD_OUT,
               MLA_H * MLA_L * sizeof(bf16));
        gaps_written += 8 - test_unwritten_bf16(out + (long)t * MLA_LD_OUT + MLA_H * MLA_L, 8);
    }
    long n = (long)MLA_T * MLA_H * MLA_L;
    assert_int_equal(gaps_written, 0);
    assert_int_equal(test_unwritten_bf16(dense, n), 0);
    assert_true(f64_rel_l2_bf16(dense, ref, n) < TOL_BF16);
    free(out);
    free(dense);
    free(ref);
    ops->destroy(ops);
    mla_fixture_free(&f);
}

static void mla_token_bits_depend_on_batch(void **state) {
    (void)state;
    mla_fixture f;
    mla_fixture_make(&f, 90);
    bf16 *batched = test_alloc((size_t)MLA_T * MLA_LD_OUT * sizeof(bf16));
    bf16 *alone = test_alloc((size_t)MLA_T0 * MLA_LD_OUT * sizeof(bf16));
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        ops_set *ops = ref_cpu_create(thread_counts[i]);
        // Sequence 0's prompt next to a 300-token sequence, then by itself.
        mla_attention_args a = mla_args(&f, batched, 0, MLA_T, 300);
        ops->mla_attention(ops, &a);
        a = mla_args(&f, alone, 0, MLA_T0, MLA_T0);
        ops->mla_attention(ops, &a);
        int rows = rows_differing_strided(alone, batched, MLA_H * MLA_L * sizeof(bf16),
                                              MLA_LD_OUT * sizeof(bf16), MLA_T0);
        printf("mla_attention, %d thread(s): tokens differing alone vs batched: %d/%d\n",
               thread_counts[i], rows, MLA_T0);
        assert_true(rows > 0);
        ops->destroy(ops);
    }
    free(batched);
    free(alone);
    mla_fixture_free(&f);
}

// Widths that are not multiples of 4 or 8 (L = 21, R = 6; a custom config.json may have them):
// the kernel's four-wide value sum ends in a scalar tail, which the model shapes above (L = 64,
// R = 16) never reach. One 45-token sequence in blocks of 5, every position
// a query, against the float64 oracle.
static void mla_attention_matches_oracle_at_odd_widths(void **state) {
    (void)state;
    enum { H = 3, L = 21, R = 6, BS = 5, LEN = 45, BLOCKS = LEN / BS };
    bf16 *cache = test_alloc((size_t)BLOCKS * BS * (L + R) * sizeof(bf16));
    bf16 *q_lat = test_alloc((size_t)LEN * H * L * sizeof(bf16));
    bf16 *q_pe = test_alloc((size_t)LEN * H * R * sizeof(bf16));
    bf16 *out = test_alloc((size_t)LEN * H * L * sizeof(bf16));
    double *ref = test_alloc((size_t)LEN * H * L * sizeof(double));
    test_fill_bf16(cache, (long)BLOCKS * BS * (L + R), 71, 1.0f);
    test_fill_bf16(q_lat, (long)LEN * H * L, 72, 1.0f);
    test_fill_bf16(q_pe, (long)LEN * H * R, 73, 1.0f);
    int32_t table[BLOCKS], seq[LEN], pos[LEN], len = LEN;
    for (int b = 0; b < BLOCKS; b++) table[b] = (b * 4 + 1) % BLOCKS;  // scrambled: 4 and 9 coprime
    for (int t = 0; t < LEN; t++) seq[t] = 0, pos[t] = t;
    mla_attention_args a = {
        .out = out, .q_lat = q_lat, .q_pe = q_pe, .kv_cache = cache, .block_table = table,
        .token_seq = seq, .token_pos = pos, .seq_lens = &len, .T = LEN, .H = H, .L = L, .R = R,
        .ld_out = H * L, .ld_q_lat = H * L, .ld_q_pe = H * R, .head_stride_q_pe = R,
        .block_size = BS, .max_blocks_per_seq = BLOCKS, .num_seqs = 1, .max_seq_len = LEN,
        .scale = 1.0f / sqrtf((float)(L + R)),
    };
    for (int given = 0; given < 2; given++) {  // the set's own splits, then a backend's
        a.kv_split_size = given ? 64 : 0;
        ops_set *ops = ref_cpu_create(2);
        test_poison(out, (size_t)LEN * H * L * sizeof(bf16));
        ops->mla_attention(ops, &a);
        f64_mla_attention(&a, ref);
        assert_int_equal(test_unwritten_bf16(out, (long)LEN * H * L), 0);
        assert_true(f64_rel_l2_bf16(out, ref, (long)LEN * H * L) < TOL_BF16);
        ops->destroy(ops);
    }
    free(cache);
    free(q_lat);
    free(q_pe);
    free(out);
    free(ref);
}

// A backend that schedules the splits itself passes their size: then the batch does not matter.
static void mla_honours_a_given_split_size(void **state) {
    (void)state;
    mla_fixture f;
    mla_fixture_make(&f, 95);
    bf16 *batched = test_alloc((size_t)MLA_T * MLA_LD_OUT * sizeof(bf16));
    bf16 *alone = test_alloc((size_t)MLA_T0 * MLA_LD_OUT * sizeof(bf16));
    double *ref = test_alloc((size_t)MLA_T * MLA_H * MLA_L * sizeof(double));
    ops_set *ops = ref_cpu_create(2);
    mla_attention_args a = mla_args(&f, batched, 0, MLA_T, 300);
    a.kv_split_size = 64;
    test_poison(batched, (size_t)MLA_T * MLA_LD_OUT * sizeof(bf16));
    ops->mla_attention(ops, &a);
    f64_mla_attention(&a, ref);
    bf16 *dense = test_alloc((size_t)MLA_T * MLA_H * MLA_L * sizeof(bf16));
    for (int t = 0; t < MLA_T; t++)
        memcpy(dense + (long)t * MLA_H * MLA_L, batched + (long)t * MLA_LD_OUT,
               MLA_H * MLA_L * sizeof(bf16));
    assert_int_equal(test_unwritten_bf16(dense, (long)MLA_T * MLA_H * MLA_L), 0);
    assert_true(f64_rel_l2_bf16(dense, ref, (long)MLA_T * MLA_H * MLA_L) < TOL_BF16);
    a = mla_args(&f, alone, 0, MLA_T0, MLA_T0);
    a.kv_split_size = 64;
    ops->mla_attention(ops, &a);
    assert_int_equal(rows_differing_strided(alone, batched, MLA_H * MLA_L * sizeof(bf16),
                                              MLA_LD_OUT * sizeof(bf16), MLA_T0), 0);
    free(batched);
    free(alone);
    free(ref);
    free(dense);
    ops->destroy(ops);
    mla_fixture_free(&f);
}

// The same at DeepSeek's widths (L = 512, R = 64, 16 heads), where a token's bits are a
// sensitive test of its splits: at L = 64 one split against two rounds to the same bf16 in
// nearly every element, so the check above cannot see where a backend's last split ends. A
// 127-token sequence (split size 64: its tail past 64 is a split of its own) alone and beside a
// 300-token one; the set's own split rule (from the longest sequence) is the control: the same
// two calls must differ there, or the comparison is blind.
static void mla_given_split_size_is_batch_free_at_deepseek_widths(void **state) {
    (void)state;
    enum { H = 16, L = 512, R = 64, BS = 16, LEN0 = 127, LEN1 = 300, MAXB = (LEN1 + BS - 1) / BS,
           BLOCKS = (LEN0 + BS - 1) / BS + MAXB, T = LEN0 + 1, SPLIT = 64 };
    const long row = (long)H * L;
    bf16 *cache = test_alloc((size_t)BLOCKS * BS * (L + R) * sizeof(bf16));
    bf16 *q_lat = test_alloc((size_t)T * row * sizeof(bf16));
    bf16 *q_pe = test_alloc((size_t)T * H * R * sizeof(bf16));
    bf16 *batched = test_alloc((size_t)T * row * sizeof(bf16));
    bf16 *alone = test_alloc((size_t)LEN0 * row * sizeof(bf16));
    test_fill_bf16(cache, (long)BLOCKS * BS * (L + R), 301, 1.0f);
    test_fill_bf16(q_lat, (long)T * row, 302, 1.0f);
    test_fill_bf16(q_pe, (long)T * H * R, 303, 1.0f);
    int32_t table[2 * MAXB], seq[T], pos[T], lens[2] = {LEN0, LEN1};
    for (int b = 0; b < 2 * MAXB; b++) table[b] = -1;
    for (int b = 0; b < BLOCKS; b++) {  // blocks in a scrambled order (7 and 27 coprime)
        const int block = (b * 7 + 3) % BLOCKS, first = (LEN0 + BS - 1) / BS;
        table[b < first ? b : MAXB + b - first] = block;
    }
    for (int t = 0; t < LEN0; t++) seq[t] = 0, pos[t] = t;
    seq[LEN0] = 1, pos[LEN0] = LEN1 - 1;
    mla_attention_args a = {
        .q_lat = q_lat, .q_pe = q_pe, .kv_cache = cache, .block_table = table, .token_seq = seq,
        .token_pos = pos, .seq_lens = lens, .H = H, .L = L, .R = R, .ld_out = row, .ld_q_lat = row,
        .ld_q_pe = H * R, .head_stride_q_pe = R, .block_size = BS, .max_blocks_per_seq = MAXB,
        .num_seqs = 2, .scale = 1.0f / sqrtf((float)(L + R)),
    };
    ops_set *ops = ref_cpu_create(2);
    for (int given = 1; given >= 0; given--) {
        a.kv_split_size = given ? SPLIT : 0;
        test_poison(batched, (size_t)T * row * sizeof(bf16));
        test_poison(alone, (size_t)LEN0 * row * sizeof(bf16));
        a.out = batched, a.T = T, a.max_seq_len = LEN1;
        ops->mla_attention(ops, &a);
        a.out = alone, a.T = LEN0, a.max_seq_len = LEN0;
        ops->mla_attention(ops, &a);
        assert_int_equal(test_unwritten_bf16(batched, (long)T * row), 0);
        assert_int_equal(test_unwritten_bf16(alone, (long)LEN0 * row), 0);
        const int rows = rows_differing(alone, batched, (size_t)row * sizeof(bf16), LEN0);
        printf("mla_attention at L = %d, %s: tokens differing alone vs beside a %d-token sequence: %d/%d\n",
               L, given ? "split size 64 given" : "the set's own splits", LEN1, rows, LEN0);
        if (given) assert_int_equal(rows, 0);
        else assert_true(rows > 0);
    }
    ops->destroy(ops);
    free(cache);
    free(q_lat);
    free(q_pe);
    free(batched);
    free(alone);
}

// =============================================================================================
// MoE: experts through the split-K GEMM at M = expert load; combine in load order
// =============================================================================================

// k distinct experts per token, in random order.
static void fill_topk_ids(int32_t *ids, int T, int k, int E, uint64_t seed) {
    test_rng r = test_rng_make(seed);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = test_below(&r, E);
                dup = 0;
                for (int i = 0; i < j; i++) dup |= ids[t * k + i] == e;
            } while (dup);
            ids[t * k + j] = e;
        }
}

// The tiny model's expert shapes.
enum { MOE_E = 8, MOE_K = 2, MOE_D = 256, MOE_I = 128 };

typedef struct {
    bf16 *x, *w_gate_up, *w_down;
    int32_t *ids;
    int T;
} moe_fixture;

static void moe_fixture_make(moe_fixture *f, int T, uint64_t seed) {
    f->T = T;
    f->x = test_alloc((size_t)T * MOE_D * sizeof(bf16));
    f->w_gate_up = test_alloc((size_t)MOE_E * 2 * MOE_I * MOE_D * sizeof(bf16));
    f->w_down = test_alloc((size_t)MOE_E * MOE_D * MOE_I * sizeof(bf16));
    f->ids = test_alloc((size_t)T * MOE_K * sizeof(int32_t));
    test_fill_bf16(f->x, (long)T * MOE_D, seed, 1.0f);
    test_fill_bf16(f->w_gate_up, (long)MOE_E * 2 * MOE_I * MOE_D, seed + 1, 0.1f);
    test_fill_bf16(f->w_down, (long)MOE_E * MOE_D * MOE_I, seed + 2, 0.1f);
    fill_topk_ids(f->ids, T, MOE_K, MOE_E, seed + 3);
}

static void moe_fixture_free(moe_fixture *f) {
    free(f->x);
    free(f->w_gate_up);
    free(f->w_down);
    free(f->ids);
}

static moe_experts_args moe_experts_for(moe_fixture *f, bf16 *out, int t0, int T) {
    return (moe_experts_args){.out = out, .x = f->x + (long)t0 * MOE_D,
                              .topk_ids = f->ids + t0 * MOE_K, .w_gate_up = f->w_gate_up,
                              .w_down = f->w_down, .T = T, .k = MOE_K, .E = MOE_E,
                              .D = MOE_D, .I = MOE_I};
}

static void moe_experts_matches_oracle(void **state) {
    (void)state;
    moe_fixture f;
    moe_fixture_make(&f, 24, 300);
    ops_set *ops = ref_cpu_create(2);
    long n = (long)f.T * MOE_K * MOE_D;
    bf16 *out = test_alloc((size_t)n * sizeof(bf16));
    double *ref = test_alloc((size_t)n * sizeof(double));
    test_poison(out, (size_t)n * sizeof(bf16));
    moe_experts_args a = moe_experts_for(&f, out, 0, f.T);
    ops->moe_experts(ops, &a);
    f64_moe_experts(&a, ref);
    assert_int_equal(test_unwritten_bf16(out, n), 0);
    double err = f64_rel_l2_bf16(out, ref, n);
    printf("moe_experts: rel L2 %g\n", err);
    assert_true(err < TOL_BF16_MLP);
    free(out);
    free(ref);
    ops->destroy(ops);
    moe_fixture_free(&f);
}

static void moe_experts_token_bits_depend_on_expert_load(void **state) {
    (void)state;
    moe_fixture f;
    moe_fixture_make(&f, 64, 310);  // ~16 tokens per expert when batched, 1 when alone
    long row = (long)MOE_K * MOE_D;
    bf16 *batched = test_alloc((size_t)f.T * row * sizeof(bf16));
    bf16 *alone = test_alloc((size_t)f.T * row * sizeof(bf16));
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        ops_set *ops = ref_cpu_create(thread_counts[i]);
        moe_experts_args a = moe_experts_for(&f, batched, 0, f.T);
        ops->moe_experts(ops, &a);
        for (int t = 0; t < f.T; t++) {
            a = moe_experts_for(&f, alone + t * row, t, 1);
            ops->moe_experts(ops, &a);
        }
        int rows = rows_differing(alone, batched, (size_t)row * sizeof(bf16), f.T);
        printf("moe_experts, %d thread(s): tokens differing alone vs batched: %d/%d\n",
               thread_counts[i], rows, f.T);
        assert_true(rows > 0);
        ops->destroy(ops);
    }
    free(batched);
    free(alone);
    moe_fixture_free(&f);
}

// Combine inputs: k = 4 (order cannot show with k = 2: a two-term sum is commutative).
typedef struct {
    bf16 *expert_out;
    float *weights;
    int32_t *ids;
    int T, k, D, E;
} combine_fixture;

static void combine_fixture_make(combine_fixture *f, int T, int k, int D, int E, uint64_t seed) {
    *f = (combine_fixture){.T = T, .k = k, .D = D, .E = E};
    f->expert_out = test_alloc((size_t)T * k * D * sizeof(bf16));
    f->weights = test_alloc((size_t)T * k * sizeof(float));
    f->ids = test_alloc((size_t)T * k * sizeof(int32_t));
    test_fill_bf16(f->expert_out, (long)T * k * D, seed, 1.0f);
    test_fill_f32(f->weights, (long)T * k, seed + 1, 1.0f);
    // Skewed routing toward the high ids, so that load order (busiest first) is far from
    // the id order a token alone gets (every load 1, ties by id).
    test_rng r = test_rng_make(seed + 2);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = E - 1 - (int)((float)E * test_uniform(&r) * test_uniform(&r));
                if (e < 0) e = 0;
                dup = 0;
                for (int i = 0; i < j; i++) dup |= f->ids[t * k + i] == e;
            } while (dup);
            f->ids[t * k + j] = e;
        }
}

static void combine_fixture_free(combine_fixture *f) {
    free(f->expert_out);
    free(f->weights);
    free(f->ids);
}

static moe_combine_args combine_for(combine_fixture *f, bf16 *out, int t0, int T) {
    return (moe_combine_args){.out = out, .expert_out = f->expert_out + (long)t0 * f->k * f->D,
                              .topk_weights = f->weights + (long)t0 * f->k,
                              .topk_ids = f->ids + (long)t0 * f->k,
                              .T = T, .k = f->k, .D = f->D, .E = f->E};
}

static void moe_combine_matches_oracle(void **state) {
    (void)state;
    ops_set *ops = ref_cpu_create(2);
    int ks[] = {1, 2, 4, 6};
    for (int i = 0; i < 4; i++) {
        combine_fixture f;
        combine_fixture_make(&f, 33, ks[i], 200, 16, 400 + i);
        long n = (long)f.T * f.D;
        bf16 *out = test_alloc((size_t)n * sizeof(bf16));
        double *ref = test_alloc((size_t)n * sizeof(double));
        test_poison(out, (size_t)n * sizeof(bf16));
        moe_combine_args a = combine_for(&f, out, 0, f.T);
        ops->moe_combine(ops, &a);
        f64_moe_combine(&a, ref);
        assert_int_equal(test_unwritten_bf16(out, n), 0);
        assert_true(f64_rel_l2_bf16(out, ref, n) < TOL_BF16);
        free(out);
        free(ref);
        combine_fixture_free(&f);
    }
    ops->destroy(ops);
}

static void moe_combine_token_bits_depend_on_expert_load(void **state) {
    (void)state;
    combine_fixture f;
    combine_fixture_make(&f, 256, 4, 1024, 8, 500);
    long n = (long)f.T * f.D;
    bf16 *batched = test_alloc((size_t)n * sizeof(bf16));
    bf16 *alone = test_alloc((size_t)n * sizeof(bf16));
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        ops_set *ops = ref_cpu_create(thread_counts[i]);
        moe_combine_args a = combine_for(&f, batched, 0, f.T);
        ops->moe_combine(ops, &a);
        for (int t = 0; t < f.T; t++) {
            a = combine_for(&f, alone + (long)t * f.D, t, 1);
            ops->moe_combine(ops, &a);
        }
        int rows = rows_differing(alone, batched, (size_t)f.D * sizeof(bf16), f.T);
        printf("moe_combine, %d thread(s): tokens differing alone vs batched: %d/%d\n",
               thread_counts[i], rows, f.T);
        assert_true(rows > 0);
        ops->destroy(ops);
    }
    free(batched);
    free(alone);
    combine_fixture_free(&f);
}

// =============================================================================================
// Logprobs: vocabulary chunks from R
// =============================================================================================

typedef struct {
    float *logits, *temperature, *token_logprob, *topk_logprobs;
    uint64_t *noise_seed;
    int32_t *position, *token, *topk_ids;
    int R, V, k;
} logprobs_fixture;

static void logprobs_fixture_make(logprobs_fixture *f, int R, int V, int k, uint64_t seed) {
    *f = (logprobs_fixture){.R = R, .V = V, .k = k};
    f->logits = test_alloc((size_t)R * V * sizeof(float));
    f->temperature = test_alloc((size_t)R * sizeof(float));
    f->noise_seed = test_alloc((size_t)R * sizeof(uint64_t));
    f->position = test_alloc((size_t)R * sizeof(int32_t));
    f->token = test_alloc((size_t)R * sizeof(int32_t));
    f->token_logprob = test_alloc((size_t)R * sizeof(float));
    f->topk_ids = test_alloc((size_t)R * k * sizeof(int32_t));
    f->topk_logprobs = test_alloc((size_t)R * k * sizeof(float));
    test_fill_f32(f->logits, (long)R * V, seed, 4.0f);
    test_fill_i32(f->position, R, seed + 1, 0, 4000);
    for (int r = 0; r < R; r++) {
        f->temperature[r] = r % 3 == 0 ? 0.0f : 0.5f + 0.25f * (float)(r % 4);  // greedy and sampled
        f->noise_seed[r] = invar_mix64(seed * 1000 + (uint64_t)r);
    }
    // Ties, to check the lower id wins: a copy of row r's maximum at a higher id.
    for (int r = 0; r < R; r += 2) {
        float *x = f->logits + (long)r * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (x[v] > x[best]) best = v;
        x[V - 1 - (best == V - 1)] = x[best];
    }
}

static void logprobs_fixture_free(logprobs_fixture *f) {
    free(f->logits);
    free(f->temperature);
    free(f->noise_seed);
    free(f->position);
    free(f->token);
    free(f->token_logprob);
    free(f->topk_ids);
    free(f->topk_logprobs);
}

static logprobs_args logprobs_for(logprobs_fixture *f, int r0, int R) {
    return (logprobs_args){
        .logits = f->logits + (long)r0 * f->V, .R = R, .V = f->V, .k = f->k,
        .temperature = f->temperature + r0, .noise_seed = f->noise_seed + r0,
        .position = f->position + r0, .token = f->token + r0,
        .token_logprob = f->token_logprob + r0, .topk_ids = f->topk_ids + (long)r0 * f->k,
        .topk_logprobs = f->topk_logprobs + (long)r0 * f->k};
}

static void logprobs_matches_oracle(void **state) {
    (void)state;
    ops_set *ops = ref_cpu_create(2);
    int Rs[] = {1, 5, 40};
    for (int i = 0; i < 3; i++) {
        logprobs_fixture f;
        logprobs_fixture_make(&f, Rs[i], 1000, 5, 600 + i);
        int R = f.R, V = f.V, k = f.k;
        test_poison(f.token, (size_t)R * sizeof(int32_t));
        test_poison(f.token_logprob, (size_t)R * sizeof(float));
        test_poison(f.topk_ids, (size_t)R * k * sizeof(int32_t));
        test_poison(f.topk_logprobs, (size_t)R * k * sizeof(float));
        logprobs_args a = logprobs_for(&f, 0, R);
        ops->logprobs(ops, &a);
        assert_int_equal(test_unwritten_i32(f.token, R), 0);
        assert_int_equal(test_unwritten_f32(f.token_logprob, R), 0);
        assert_int_equal(test_unwritten_i32(f.topk_ids, (long)R * k), 0);
        assert_int_equal(test_unwritten_f32(f.topk_logprobs, (long)R * k), 0);

        double *lp = test_alloc((size_t)R * V * sizeof(double));
        int32_t *token = test_alloc((size_t)R * sizeof(int32_t));
        int32_t *topk = test_alloc((size_t)R * k * sizeof(int32_t));
        f64_logprobs(&a, lp, token, topk);
        assert_memory_equal(f.token, token, (size_t)R * sizeof(int32_t));
        assert_memory_equal(f.topk_ids, topk, (size_t)R * k * sizeof(int32_t));
        double *ref_token = test_alloc((size_t)R * sizeof(double));
        double *ref_topk = test_alloc((size_t)R * k * sizeof(double));
        for (int r = 0; r < R; r++) {
            ref_token[r] = lp[(long)r * V + token[r]];
            for (int j = 0; j < k; j++) ref_topk[r * k + j] = lp[(long)r * V + topk[r * k + j]];
        }
        assert_true(f64_max_abs_err_f32(f.token_logprob, ref_token, R) < TOL_LOGPROB_ABS);
        assert_true(f64_max_abs_err_f32(f.topk_logprobs, ref_topk, (long)R * k) < TOL_LOGPROB_ABS);
        free(lp);
        free(token);
        free(topk);
        free(ref_token);
        free(ref_topk);
        logprobs_fixture_free(&f);
    }
    ops->destroy(ops);
}

static void logprobs_row_bits_depend_on_R(void **state) {
    (void)state;
    assert_true(ref_logprobs_chunks(1, 512, 1) != ref_logprobs_chunks(64, 512, 1));
    logprobs_fixture f;
    logprobs_fixture_make(&f, 64, 512, 5, 700);  // the tiny model's vocabulary
    float *batched = test_alloc((size_t)f.R * sizeof(float));
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        ops_set *ops = ref_cpu_create(thread_counts[i]);
        logprobs_args a = logprobs_for(&f, 0, f.R);
        ops->logprobs(ops, &a);
        memcpy(batched, f.token_logprob, (size_t)f.R * sizeof(float));
        for (int r = 0; r < f.R; r++) {
            a = logprobs_for(&f, r, 1);
            ops->logprobs(ops, &a);
        }
        int rows = rows_differing(f.token_logprob, batched, sizeof(float), f.R);
        printf("logprobs, %d thread(s): rows differing alone vs batched: %d/%d\n",
               thread_counts[i], rows, f.R);
        assert_true(rows > 0);
        ops->destroy(ops);
    }
    free(batched);
    logprobs_fixture_free(&f);
}

// =============================================================================================
// MHA prefill: split-KV from the call's token count; merge of two partial results
// =============================================================================================

enum { MHA_H = 4, MHA_NOPE = 32, MHA_R = 16, MHA_V = 64, MHA_KEYS = 200 };
#define MHA_QDIM (MHA_NOPE + MHA_R)
#define MHA_KVW (MHA_H * (MHA_NOPE + MHA_V))
#define MHA_LD_K_PE (MHA_R + 4)

typedef struct {
    bf16 *q, *kv, *k_pe;
    int32_t *begin, *end;
    int T;
} mha_fixture;

static void mha_fixture_make(mha_fixture *f, int T, uint64_t seed) {
    f->T = T;
    f->q = test_alloc((size_t)T * MHA_H * MHA_QDIM * sizeof(bf16));
    f->kv = test_alloc((size_t)MHA_KEYS * MHA_KVW * sizeof(bf16));
    f->k_pe = test_alloc((size_t)MHA_KEYS * MHA_LD_K_PE * sizeof(bf16));
    f->begin = test_alloc((size_t)T * sizeof(int32_t));
    f->end = test_alloc((size_t)T * sizeof(int32_t));
    test_fill_bf16(f->q, (long)T * MHA_H * MHA_QDIM, seed, 1.0f);
    test_fill_bf16(f->kv, (long)MHA_KEYS * MHA_KVW, seed + 1, 1.0f);
    test_fill_bf16(f->k_pe, (long)MHA_KEYS * MHA_LD_K_PE, seed + 2, 1.0f);
    test_rng r = test_rng_make(seed + 3);
    for (int t = 0; t < T; t++) {  // causal-like ranges of 40..200 keys
        f->begin[t] = test_below(&r, 20);
        f->end[t] = f->begin[t] + 40 + test_below(&r, MHA_KEYS - 40 - f->begin[t] + 1);
    }
}

static void mha_fixture_free(mha_fixture *f) {
    free(f->q);
    free(f->kv);
    free(f->k_pe);
    free(f->begin);
    free(f->end);
}

static mha_prefill_args mha_for(mha_fixture *f, bf16 *out, float *lse, int t0, int T) {
    return (mha_prefill_args){
        .out = out, .lse = lse, .q = f->q + (long)t0 * MHA_H * MHA_QDIM, .kv = f->kv,
        .k_pe = f->k_pe, .key_begin = f->begin + t0, .key_end = f->end + t0,
        .T = T, .H = MHA_H, .nope = MHA_NOPE, .R = MHA_R, .v = MHA_V,
        .ld_out = MHA_H * MHA_V, .ld_q = MHA_H * MHA_QDIM, .ld_kv = MHA_KVW,
        .ld_k_pe = MHA_LD_K_PE, .scale = 1.0f / sqrtf((float)MHA_QDIM)};
}

static void mha_prefill_matches_oracle(void **state) {
    (void)state;
    ops_set *ops = ref_cpu_create(2);
    int Ts[] = {1, 3, 40};  // 4, 4 and 1 splits
    for (int i = 0; i < 3; i++) {
        mha_fixture f;
        mha_fixture_make(&f, Ts[i], 800 + i);
        f.end[0] = f.begin[0];  // an empty key range: out 0, lse -inf
        long n = (long)f.T * MHA_H * MHA_V, nl = (long)f.T * MHA_H;
        bf16 *out = test_alloc((size_t)n * sizeof(bf16));
        float *lse = test_alloc((size_t)nl * sizeof(float));
        double *ref = test_alloc((size_t)n * sizeof(double));
        double *ref_lse = test_alloc((size_t)nl * sizeof(double));
        test_poison(out, (size_t)n * sizeof(bf16));
        test_poison(lse, (size_t)nl * sizeof(float));
        mha_prefill_args a = mha_for(&f, out, lse, 0, f.T);
        ops->mha_prefill(ops, &a);
        f64_mha_prefill(&a, ref, ref_lse);
        assert_int_equal(test_unwritten_bf16(out, n), 0);
        assert_int_equal(test_unwritten_f32(lse, nl), 0);
        for (int h = 0; h < MHA_H; h++) {
            assert_true(lse[h] == -INFINITY);
            for (int d = 0; d < MHA_V; d++) assert_true(bf16_to_float(out[h * MHA_V + d]) == 0.0f);
        }
        if (f.T > 1) {
            long skip = (long)MHA_H * MHA_V;  // the empty token compared above
            assert_true(f64_rel_l2_bf16(out + skip, ref + skip, n - skip) < TOL_BF16);
            assert_true(f64_max_abs_err_f32(lse + MHA_H, ref_lse + MHA_H, nl - MHA_H) < 1e-4);
        }
        free(out);
        free(lse);
        free(ref);
        free(ref_lse);
        mha_fixture_free(&f);
    }
    ops->destroy(ops);
}

static void mha_prefill_token_bits_depend_on_T(void **state) {
    (void)state;
    assert_true(ref_mha_prefill_splits(1, 200) != ref_mha_prefill_splits(40, 200));
    mha_fixture f;
    mha_fixture_make(&f, 128, 900);
    long row = (long)MHA_H * MHA_V;
    bf16 *batched = test_alloc((size_t)f.T * row * sizeof(bf16));
    bf16 *alone = test_alloc((size_t)f.T * row * sizeof(bf16));
    float *lse_batched = test_alloc((size_t)f.T * MHA_H * sizeof(float));
    float *lse_alone = test_alloc((size_t)f.T * MHA_H * sizeof(float));
    for (size_t i = 0; i < sizeof thread_counts / sizeof *thread_counts; i++) {
        ops_set *ops = ref_cpu_create(thread_counts[i]);
        mha_prefill_args a = mha_for(&f, batched, lse_batched, 0, f.T);
        ops->mha_prefill(ops, &a);
        for (int t = 0; t < f.T; t++) {
            a = mha_for(&f, alone + t * row, lse_alone + t * MHA_H, t, 1);
            ops->mha_prefill(ops, &a);
        }
        int rows = rows_differing(alone, batched, (size_t)row * sizeof(bf16), f.T);
        int lse_rows = rows_differing(lse_alone, lse_batched, MHA_H * sizeof(float), f.T);
        printf("mha_prefill, %d thread(s): tokens differing alone vs batched: out %d/%d, lse %d/%d\n",
               thread_counts[i], rows, f.T, lse_rows, f.T);
        assert_true(rows > 0);
        assert_true(lse_rows > 0);
        ops->destroy(ops);
    }
    free(batched);
    free(alone);
    free(lse_batched);
    free(lse_alone);
    mha_fixture_free(&f);
}

static void merge_attention_matches_oracle(void **state) {
    (void)state;
    enum { T = 9, H = 3, V = 40, LD = H * V + 6 };
    ops_set *ops = ref_cpu_create(2);
    bf16 *pa = test_alloc((size_t)T * LD * sizeof(bf16)), *pb = test_alloc((size_t)T * LD * sizeof(bf16));
    bf16 *out = test_alloc((size_t)T * LD * sizeof(bf16));
    float la[T * H], lb[T * H];
    test_fill_bf16(pa, (long)T * LD, 950, 1.0f);
    test_fill_bf16(pb, (long)T * LD, 951, 1.0f);
    test_fill_f32(la, T * H, 952, 3.0f);
    test_fill_f32(lb, T * H, 953, 3.0f);
    la[0] = -INFINITY;  // one side empty: the other side, exactly
    lb[1] = -INFINITY;
    test_poison(out, (size_t)T * LD * sizeof(bf16));
    merge_attention_args m = {.out = out, .a = pa, .b = pb, .lse_a = la, .lse_b = lb,
                              .T = T, .H = H, .v = V, .ld = LD};
    ops->merge_attention(ops, &m);
    double ref[T * H * V];
    f64_merge_attention(&m, ref);
    bf16 dense[T * H * V];
    long gaps_written = 0;
    for (int t = 0; t < T; t++) {
        memcpy(dense + t * H * V, out + (long)t * LD, (size_t)H * V * sizeof(bf16));
        gaps_written += (LD - H * V) - test_unwritten_bf16(out + (long)t * LD + H * V, LD - H * V);
    }
    assert_int_equal(gaps_written, 0);
    assert_int_equal(test_unwritten_bf16(dense, T * H * V), 0);
    assert_memory_equal(out, pb, V * sizeof(bf16));                 // token 0 head 0: b alone
    assert_memory_equal(out + V, pa + V, V * sizeof(bf16));         // token 0 head 1: a alone
    assert_true(f64_rel_l2_bf16(dense, ref, T * H * V) < TOL_BF16);
    free(pa);
    free(pb);
    free(out);
    ops->destroy(ops);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(set_fields_and_reused_ops_are_wired),
        cmocka_unit_test(gemm_plan_changes_with_M_at_any_thread_count),
        cmocka_unit_test(gemm_matches_oracle),
        cmocka_unit_test(gemm_honours_strides_and_batch),
        cmocka_unit_test(gemm_row_bits_depend_on_M),
        cmocka_unit_test(rmsnorm_matches_oracle),
        cmocka_unit_test(rmsnorm_row_bits_depend_on_M),
        cmocka_unit_test(mla_split_rule),
        cmocka_unit_test(mla_attention_matches_oracle),
        cmocka_unit_test(mla_attention_matches_oracle_at_odd_widths),
        cmocka_unit_test(mla_token_bits_depend_on_batch),
        cmocka_unit_test(mla_honours_a_given_split_size),
        cmocka_unit_test(mla_given_split_size_is_batch_free_at_deepseek_widths),
        cmocka_unit_test(mha_prefill_matches_oracle),
        cmocka_unit_test(mha_prefill_token_bits_depend_on_T),
        cmocka_unit_test(merge_attention_matches_oracle),
        cmocka_unit_test(moe_experts_matches_oracle),
        cmocka_unit_test(moe_experts_token_bits_depend_on_expert_load),
        cmocka_unit_test(moe_combine_matches_oracle),
        cmocka_unit_test(moe_combine_token_bits_depend_on_expert_load),
        cmocka_unit_test(logprobs_matches_oracle),
        cmocka_unit_test(logprobs_row_bits_depend_on_R),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
