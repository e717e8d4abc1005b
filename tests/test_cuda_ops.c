// tests/test_cuda_ops.c — the CUDA kernel sets (kernels/cuda, reference/cuda) on a GPU: every
// op against a float64 computation on the host (bf16 tolerances), outputs poisoned before each
// run and checked fully written, the invariant set bitwise equal between one row alone and the
// same row inside batches, and the cuBLAS reference caught varying. Without a CUDA device every
// test is skipped with a visible "SKIP:" line.
#include <stdarg.h>              // cmocka
#include <stddef.h>              // cmocka
#include <stdint.h>              // uint16_t, int32_t, uint64_t
#include <setjmp.h>              // cmocka
#include <cmocka.h>              // cmocka_unit_test, skip, assert_*

#include <math.h>                // exp, log, sqrt, fabs, cos, sin
#include <stdbool.h>             // bool
#include <stdio.h>               // printf
#include <stdlib.h>              // free
#include <string.h>              // memcpy, memcmp, memset

#include "../kernels/bf16.h"     // bf16_to_float, float_to_bf16, invar_mix64, invar_uniform
#include "../common/check.h"    // invar_malloc
#include "../kernels/ops.h"      // ops_set, *_args
#include "../sets/registry.h" // kernel_set_create, cuda_device_available
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

#define POISON16 0xFFFFu         // a NaN bf16: no op may leave it behind
#define BF16_TOL 1.5e-2          // relative error of bf16 outputs vs float64 (norm-wise)

static ops_set *inv, *ref;
static uint64_t rng_state = 0x1234567u;

// --- helpers -------------------------------------------------------------------------------

static float rnd(void) { return 2.0f * invar_uniform(invar_mix64(rng_state++)) - 1.0f; }

static uint16_t *rand_bf16(long n, float scale) {
    uint16_t *h = invar_malloc((size_t)n * 2, "test data");
    for (long i = 0; i < n; i++) h[i] = float_to_bf16(scale * rnd());
    return h;
}

static void *to_dev(ops_set *o, const void *h, size_t bytes) {
    void *d = o->alloc(o, bytes, "test buffer");
    o->upload(o, d, h, bytes);
    return d;
}

static void poison(ops_set *o, void *d, size_t bytes) {
    unsigned char *h = invar_malloc(bytes, "poison");
    memset(h, 0xFF, bytes);
    o->upload(o, d, h, bytes);
    free(h);
}

static void *from_dev(ops_set *o, const void *d, size_t bytes) {
    void *h = invar_malloc(bytes, "test result");
    o->download(o, h, d, bytes);
    return h;
}

static void assert_written16(const uint16_t *h, long n) {
    for (long i = 0; i < n; i++)
        if (h[i] == POISON16) fail_msg("element %ld was not written", i);
}

// Norm-wise relative error ||got - want|| / ||want||.
typedef struct { double num, den; } err_acc;
static void err_add(err_acc *e, double got, double want) {
    e->num += (got - want) * (got - want);
    e->den += want * want;
}
static double err_rel(const err_acc *e) { return sqrt(e->num / (e->den > 0 ? e->den : 1.0)); }

static int setup_sets(void **state) {
    (void)state;
    char why[256];
    if (!cuda_device_available(why, (int)sizeof why)) return 0;
    inv = kernel_set_create("invariant", "cuda", 0);
    ref = kernel_set_create("reference", "cuda", 0);
    return inv && ref ? 0 : -1;
}

static int teardown_sets(void **state) {
    (void)state;
    if (inv) inv->destroy(inv);
    if (ref) ref->destroy(ref);
    return 0;
}

#define NEED_GPU() do { if (!inv) skip(); } while (0)

// --- gemm ----------------------------------------------------------------------------------

static void run_gemm(ops_set *o, void *dy, const void *dx, const void *dw, int M, int N, int K, long ldx, long ldy,
                     bool f32) {
    gemm_args a = {0};
    a.y = dy; a.y_f32 = f32; a.x = dx; a.w = dw;
    a.M = M; a.N = N; a.K = K; a.ldx = ldx; a.ldy = ldy;
    o->gemm(o, &a);
}

// Every tile and load path (sm_90a: 64x128 and 128x256 tiles, TMA, cp.async, scalar; elsewhere the
// mma.sync kernel's three tiles) gives one row the same bits.
static void test_gemm_invariant(void **state) {
    (void)state;
    NEED_GPU();
    const int N = 2304, K = 1000, MMAX = 1024;  // K % 16 != 0: exercises the zero-filled tail
    uint16_t *hx = rand_bf16((long)MMAX * K, 1.0f), *hw = rand_bf16((long)N * K, 1.0f);
    void *dx = to_dev(inv, hx, (size_t)MMAX * K * 2), *dw = to_dev(inv, hw, (size_t)N * K * 2);
    void *dy = inv->alloc(inv, (size_t)MMAX * N * 2, "y");
    poison(inv, dy, (size_t)MMAX * N * 2);
    run_gemm(inv, dy, dx, dw, MMAX, N, K, 0, 0, false);
    uint16_t *full = from_dev(inv, dy, (size_t)MMAX * N * 2);
    assert_written16(full, (long)MMAX * N);

    // accuracy on a sample of rows
    err_acc e = {0};
    for (int m = 0; m < MMAX; m += 61)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)bf16_to_float(hx[(long)m * K + k]) * bf16_to_float(hw[(long)n * K + k]);
            err_add(&e, bf16_to_float(full[(long)m * N + n]), s);
        }
    printf("gemm invariant: rel err vs f64 %.2e\n", err_rel(&e));
    assert_true(err_rel(&e) < BF16_TOL);

    // the same rows at other M (other tile configurations), at other offsets, bitwise
    const int ms[] = {1, 3, 16, 17, 64, 200, 513};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        int M = ms[i], off = (int)((i * 37) % (MMAX - M + 1));
        poison(inv, dy, (size_t)M * N * 2);
        run_gemm(inv, dy, (const uint16_t *)dx + (long)off * K, dw, M, N, K, 0, 0, false);
        uint16_t *part = from_dev(inv, dy, (size_t)M * N * 2);
        assert_written16(part, (long)M * N);
        if (memcmp(part, full + (long)off * N, (size_t)M * N * 2) != 0) fail_msg("gemm: rows at M=%d differ from M=%d", M, MMAX);
        free(part);
    }

    // unaligned strides take the scalar loader: same bits; fp32 output; padded ldy
    const int M = 40;
    long ldx = K + 3, ldy = N + 5;
    uint16_t *hx2 = invar_malloc((size_t)M * ldx * 2, "x2");
    for (int m = 0; m < M; m++) memcpy(hx2 + m * ldx, hx + (long)m * K, (size_t)K * 2);
    void *dx2 = to_dev(inv, hx2, (size_t)M * ldx * 2);
    void *dyf = inv->alloc(inv, (size_t)M * ldy * 4, "yf");
    poison(inv, dy, (size_t)M * ldy * 2);
    run_gemm(inv, dy, dx2, dw, M, N, K, ldx, ldy, false);
    uint16_t *un = from_dev(inv, dy, (size_t)M * ldy * 2);
    for (int m = 0; m < M; m++)
        if (memcmp(un + m * ldy, full + (long)m * N, (size_t)N * 2) != 0) fail_msg("gemm: unaligned row %d differs", m);
    poison(inv, dyf, (size_t)M * ldy * 4);
    run_gemm(inv, dyf, dx, dw, M, N, K, 0, ldy, true);
    float *yf = from_dev(inv, dyf, (size_t)M * ldy * 4);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++)
            if (float_to_bf16(yf[m * ldy + n]) != full[(long)m * N + n]) fail_msg("gemm: f32 output (%d,%d) rounds differently", m, n);

    // batched: two products with strides, each equal to its single product
    gemm_args b = {0};
    b.y = dy; b.x = dx; b.w = dw; b.M = 8; b.N = 1152; b.K = K; b.ldw = K; b.ldy = N;
    b.batch = 2; b.stride_x = (long)8 * K; b.stride_w = (long)1152 * K; b.stride_y = (long)8 * N;
    poison(inv, dy, (size_t)16 * N * 2);
    inv->gemm(inv, &b);
    uint16_t *bt = from_dev(inv, dy, (size_t)16 * N * 2);
    for (int z = 0; z < 2; z++)
        for (int m = 0; m < 8; m++)
            if (memcmp(bt + ((long)z * 8 + m) * N, full + ((long)z * 8 + m) * N + z * 1152, 1152 * 2) != 0)
                fail_msg("gemm: batch %d row %d differs", z, m);
    free(bt); free(yf); free(un); free(hx2); free(full); free(hx); free(hw);
    inv->release(inv, dx); inv->release(inv, dx2); inv->release(inv, dw); inv->release(inv, dy); inv->release(inv, dyf);
}

// cuBLAS picks algorithms by M: the same row gets other bits in a batch at some shape.
static void test_gemm_reference_varies(void **state) {
    (void)state;
    NEED_GPU();
    const int shapes[][3] = {{576, 7168, 512}, {7168, 16384, 64}, {1536, 7168, 1024}};
    bool varied = false;
    for (int s = 0; s < 3 && !varied; s++) {
        int N = shapes[s][0], K = shapes[s][1], M = shapes[s][2];
        uint16_t *hx = rand_bf16((long)M * K, 1.0f), *hw = rand_bf16((long)N * K, 1.0f);
        void *dx = to_dev(ref, hx, (size_t)M * K * 2), *dw = to_dev(ref, hw, (size_t)N * K * 2);
        void *dy = ref->alloc(ref, (size_t)M * N * 2, "y"), *d1 = ref->alloc(ref, (size_t)N * 2, "y1");
        poison(ref, dy, (size_t)M * N * 2);
        run_gemm(ref, dy, dx, dw, M, N, K, 0, 0, false);
        uint16_t *full = from_dev(ref, dy, (size_t)M * N * 2);
        assert_written16(full, (long)M * N);
        err_acc e = {0};
        for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)bf16_to_float(hx[k]) * bf16_to_float(hw[(long)n * K + k]);
            err_add(&e, bf16_to_float(full[n]), acc);
        }
        assert_true(err_rel(&e) < BF16_TOL);
        for (int m = 0; m < M && !varied; m += 7) {
            run_gemm(ref, d1, (const uint16_t *)dx + (long)m * K, dw, 1, N, K, 0, 0, false);
            uint16_t *one = from_dev(ref, d1, (size_t)N * 2);
            if (memcmp(one, full + (long)m * N, (size_t)N * 2) != 0) {
                printf("gemm reference: row %d of N=%d K=%d differs between M=1 and M=%d (expected)\n", m, N, K, M);
                varied = true;
            }
            free(one);
        }
        free(full); free(hx); free(hw);
        ref->release(ref, dx); ref->release(ref, dw); ref->release(ref, dy); ref->release(ref, d1);
    }
    if (!varied) fail_msg("gemm reference: cuBLAS gave every row the same bits at every M tried");
}

// --- rmsnorm ---------------------------------------------------------------------------------

static void test_rmsnorm(void **state) {
    (void)state;
    NEED_GPU();
    const int M = 300, D = 2048;
    const float eps = 1e-6f;
    uint16_t *hx = rand_bf16((long)M * D, 3.0f), *hw = rand_bf16(D, 1.0f);
    void *dx = to_dev(inv, hx, (size_t)M * D * 2), *dw = to_dev(inv, hw, (size_t)D * 2);
    void *dy = inv->alloc(inv, (size_t)M * D * 2, "y");
    ops_set *sets[2] = {inv, ref};
    uint16_t *res[2];
    for (int s = 0; s < 2; s++) {
        poison(inv, dy, (size_t)M * D * 2);
        sets[s]->rmsnorm(sets[s], dy, 0, dx, 0, dw, M, D, eps);
        res[s] = from_dev(sets[s], dy, (size_t)M * D * 2);
        assert_written16(res[s], (long)M * D);
        err_acc e = {0};
        for (int m = 0; m < M; m++) {
            double ss = 0;
            for (int i = 0; i < D; i++) ss += (double)bf16_to_float(hx[m * D + i]) * bf16_to_float(hx[m * D + i]);
            double inv_rms = 1.0 / sqrt(ss / D + eps);
            for (int i = 0; i < D; i++)
                err_add(&e, bf16_to_float(res[s][m * D + i]), bf16_to_float(hw[i]) * bf16_to_float(hx[m * D + i]) * inv_rms);
        }
        assert_true(err_rel(&e) < BF16_TOL);
    }
    int ref_diff = 0;
    for (int m = 0; m < M; m += 13) {
        for (int s = 0; s < 2; s++) {
            sets[s]->rmsnorm(sets[s], dy, 0, (const uint16_t *)dx + (long)m * D, 0, dw, 1, D, eps);
            uint16_t *one = from_dev(sets[s], dy, (size_t)D * 2);
            bool same = memcmp(one, res[s] + (long)m * D, (size_t)D * 2) == 0;
            if (s == 0 && !same) fail_msg("rmsnorm invariant: row %d differs between M=1 and M=%d", m, M);
            if (s == 1 && !same) ref_diff++;
            free(one);
        }
    }
    printf("rmsnorm reference: %d sampled rows differ between M=1 and M=%d\n", ref_diff, M);
    free(res[0]); free(res[1]); free(hx); free(hw);
    inv->release(inv, dx); inv->release(inv, dw); inv->release(inv, dy);
}

// --- rope and the elementwise ops ------------------------------------------------------------

static void test_rope(void **state) {
    (void)state;
    NEED_GPU();
    const int T = 5, H = 3, R = 64, half = R / 2, P = 100;
    const long ld_head = 80, ld_token = H * ld_head;
    float *hc = invar_malloc((size_t)P * half * 4, "cos"), *hs = invar_malloc((size_t)P * half * 4, "sin");
    for (int p = 0; p < P; p++)
        for (int i = 0; i < half; i++) {
            double f = p * pow(10000.0, -2.0 * i / R);
            hc[p * half + i] = (float)cos(f);
            hs[p * half + i] = (float)sin(f);
        }
    int32_t hpos[5] = {0, 7, 99, 42, 42};
    uint16_t *hx = rand_bf16((long)T * ld_token, 2.0f);
    void *dc = to_dev(inv, hc, (size_t)P * half * 4), *ds = to_dev(inv, hs, (size_t)P * half * 4);
    void *dp = to_dev(inv, hpos, sizeof hpos);
    for (int il = 0; il < 2; il++) {
        void *dx = to_dev(inv, hx, (size_t)T * ld_token * 2);
        inv->rope(inv, dx, ld_token, ld_head, T, H, R, dp, dc, ds, il);
        uint16_t *got = from_dev(inv, dx, (size_t)T * ld_token * 2);
        err_acc e = {0};
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const uint16_t *x = hx + t * ld_token + h * ld_head, *g = got + t * ld_token + h * ld_head;
                for (int i = 0; i < half; i++) {
                    double a = bf16_to_float(il ? x[2 * i] : x[i]), b = bf16_to_float(il ? x[2 * i + 1] : x[i + half]);
                    double c = hc[hpos[t] * half + i], s = hs[hpos[t] * half + i];
                    err_add(&e, bf16_to_float(g[i]), a * c - b * s);
                    err_add(&e, bf16_to_float(g[i + half]), b * c + a * s);
                }
                for (int i = R; i < ld_head; i++)
                    if (g[i] != x[i]) fail_msg("rope wrote outside its R values");
            }
        printf("rope (interleave=%d): rel err %.2e\n", il, err_rel(&e));
        assert_true(err_rel(&e) < 1e-2);
        if (memcmp(got + 3 * ld_token, got + 4 * ld_token, (size_t)ld_token * 2) != 0 &&
            memcmp(hx + 3 * ld_token, hx + 4 * ld_token, (size_t)ld_token * 2) == 0)
            fail_msg("rope: equal inputs gave different outputs");
        free(got);
        inv->release(inv, dx);
    }
    free(hc); free(hs); free(hx);
    inv->release(inv, dc); inv->release(inv, ds); inv->release(inv, dp);
}

static void test_elementwise(void **state) {
    (void)state;
    NEED_GPU();
    const int T = 37, D = 384, V = 50, I = 200, L = 64, R = 16;
    uint16_t *table = rand_bf16((long)V * D, 1.0f), *y = rand_bf16((long)T * D, 1.0f), *gu = rand_bf16((long)T * 2 * I, 4.0f);
    int32_t ids[37], slots[37];
    for (int t = 0; t < T; t++) {
        ids[t] = (t * 7) % V;
        slots[t] = t % 5 == 4 ? -1 : 2 * t;  // -1: a padding token writes nothing
    }
    void *dt = to_dev(inv, table, (size_t)V * D * 2), *di = to_dev(inv, ids, sizeof ids), *dy = to_dev(inv, y, (size_t)T * D * 2);
    void *dout = inv->alloc(inv, (size_t)T * D * 2, "out");
    poison(inv, dout, (size_t)T * D * 2);
    inv->embedding(inv, dout, dt, di, T, D);
    uint16_t *emb = from_dev(inv, dout, (size_t)T * D * 2);
    for (int t = 0; t < T; t++) assert_memory_equal(emb + t * D, table + ids[t] * D, (size_t)D * 2);

    inv->residual_add(inv, dout, dy, (long)T * D);
    uint16_t *sum = from_dev(inv, dout, (size_t)T * D * 2);
    for (long i = 0; i < (long)T * D; i++)
        assert_int_equal(sum[i], float_to_bf16(bf16_to_float(emb[i]) + bf16_to_float(y[i])));

    void *dgu = to_dev(inv, gu, (size_t)T * 2 * I * 2), *dact = inv->alloc(inv, (size_t)T * I * 2, "act");
    poison(inv, dact, (size_t)T * I * 2);
    inv->silu_mul(inv, dact, dgu, T, I);
    uint16_t *act = from_dev(inv, dact, (size_t)T * I * 2);
    assert_written16(act, (long)T * I);
    err_acc e = {0};
    for (int t = 0; t < T; t++)
        for (int i = 0; i < I; i++) {
            double g = bf16_to_float(gu[t * 2 * I + i]), u = bf16_to_float(gu[t * 2 * I + I + i]);
            err_add(&e, bf16_to_float(act[t * I + i]), g / (1 + exp(-g)) * u);
        }
    assert_true(err_rel(&e) < BF16_TOL);

    const long cache_slots = 2 * T;
    uint16_t *ckv = rand_bf16((long)T * 100, 1.0f), *kpe = rand_bf16((long)T * 30, 1.0f);
    void *dckv = to_dev(inv, ckv, (size_t)T * 100 * 2), *dkpe = to_dev(inv, kpe, (size_t)T * 30 * 2);
    void *dcache = inv->alloc(inv, (size_t)cache_slots * (L + R) * 2, "cache"), *ds = to_dev(inv, slots, sizeof slots);
    poison(inv, dcache, (size_t)cache_slots * (L + R) * 2);
    inv->kv_cache_write(inv, dcache, dckv, 100, dkpe, 30, ds, T, L, R);
    uint16_t *cache = from_dev(inv, dcache, (size_t)cache_slots * (L + R) * 2);
    for (int t = 0; t < T; t++) {
        if (slots[t] < 0) continue;
        assert_memory_equal(cache + slots[t] * (L + R), ckv + t * 100, (size_t)L * 2);
        assert_memory_equal(cache + slots[t] * (L + R) + L, kpe + t * 30, (size_t)R * 2);
    }
    free(table); free(y); free(gu); free(emb); free(sum); free(act); free(ckv); free(kpe); free(cache);
    inv->release(inv, dt); inv->release(inv, di); inv->release(inv, dy); inv->release(inv, dout);
    inv->release(inv, dgu); inv->release(inv, dact); inv->release(inv, dckv); inv->release(inv, dkpe);
    inv->release(inv, dcache); inv->release(inv, ds);
}

// --- mla attention ---------------------------------------------------------------------------

typedef struct {
    int S, T, H, L, R, BS, MB;
    int32_t *seq_lens, *table, *tseq, *tpos;
    uint16_t *cache, *q_lat, *q_pe;
    long slots;
} mla_case;

static void mla_run(ops_set *o, const mla_case *c, int t0, int nt, uint16_t *out_host) {
    void *dcache = to_dev(o, c->cache, (size_t)c->slots * (c->L + c->R) * 2);
    void *dtab = to_dev(o, c->table, (size_t)c->S * c->MB * 4), *dlens = to_dev(o, c->seq_lens, (size_t)c->S * 4);
    void *dseq = to_dev(o, c->tseq + t0, (size_t)nt * 4), *dpos = to_dev(o, c->tpos + t0, (size_t)nt * 4);
    void *dql = to_dev(o, c->q_lat + (long)t0 * c->H * c->L, (size_t)nt * c->H * c->L * 2);
    void *dqp = to_dev(o, c->q_pe + (long)t0 * c->H * c->R, (size_t)nt * c->H * c->R * 2);
    void *dout = o->alloc(o, (size_t)nt * c->H * c->L * 2, "out");
    poison(o, dout, (size_t)nt * c->H * c->L * 2);
    int mx = 0;
    for (int t = t0; t < t0 + nt; t++) mx = c->seq_lens[c->tseq[t]] > mx ? c->seq_lens[c->tseq[t]] : mx;
    mla_attention_args a = {0};
    a.out = dout; a.q_lat = dql; a.q_pe = dqp; a.kv_cache = dcache; a.block_table = dtab;
    a.token_seq = dseq; a.token_pos = dpos; a.seq_lens = dlens;
    a.T = nt; a.H = c->H; a.L = c->L; a.R = c->R;
    a.ld_out = (long)c->H * c->L; a.ld_q_lat = (long)c->H * c->L; a.ld_q_pe = (long)c->H * c->R; a.head_stride_q_pe = c->R;
    a.block_size = c->BS; a.max_blocks_per_seq = c->MB; a.num_seqs = c->S; a.max_seq_len = mx;
    a.scale = 0.07f;
    o->mla_attention(o, &a);
    o->download(o, out_host, dout, (size_t)nt * c->H * c->L * 2);
    o->release(o, dcache); o->release(o, dtab); o->release(o, dlens); o->release(o, dseq); o->release(o, dpos);
    o->release(o, dql); o->release(o, dqp); o->release(o, dout);
}

static void test_mla_attention(void **state) {
    (void)state;
    NEED_GPU();
    mla_case c = {.S = 3, .H = 20, .L = 512, .R = 64, .BS = 16, .MB = 192};
    int lens[3] = {5, 1100, 2600};  // alone, seq 1's split size differs from the batch's
    c.seq_lens = lens;
    c.slots = (long)c.S * c.MB * c.BS;
    c.table = invar_malloc((size_t)c.S * c.MB * 4, "table");
    for (int i = 0; i < c.S * c.MB; i++) c.table[i] = (i * 53) % (c.S * c.MB);  // scattered blocks
    c.cache = rand_bf16(c.slots * (c.L + c.R), 1.0f);
    // tokens: a few prefill positions of each sequence, and each sequence's last (decode) position
    int32_t tseq[] = {0, 0, 1, 1, 1, 2, 2, 2, 2, 2};
    int32_t tpos[] = {0, 4, 0, 255, 1099, 31, 256, 511, 1024, 2599};
    c.T = (int)(sizeof tseq / sizeof tseq[0]);
    c.tseq = tseq;
    c.tpos = tpos;
    c.q_lat = rand_bf16((long)c.T * c.H * c.L, 1.0f);
    c.q_pe = rand_bf16((long)c.T * c.H * c.R, 1.0f);
    const long per_tok = (long)c.H * c.L;
    uint16_t *all = invar_malloc((size_t)c.T * per_tok * 2, "all"), *one = invar_malloc((size_t)per_tok * 2, "one");
    ops_set *sets[2] = {inv, ref};
    for (int s = 0; s < 2; s++) {
        mla_run(sets[s], &c, 0, c.T, all);
        assert_written16(all, c.T * per_tok);
        err_acc e = {0};
        double *p = invar_malloc(4096 * sizeof(double), "p");
        for (int t = 0; t < c.T; t++)
            for (int h = 0; h < c.H; h++) {
                int n = tpos[t] + 1;
                double mx = -1e300, z = 0;
                for (int j = 0; j < n; j++) {
                    long slot = (long)c.table[tseq[t] * c.MB + j / c.BS] * c.BS + j % c.BS;
                    const uint16_t *kv = c.cache + slot * (c.L + c.R);
                    double d = 0;
                    for (int i = 0; i < c.L; i++) d += (double)bf16_to_float(c.q_lat[(t * c.H + h) * c.L + i]) * bf16_to_float(kv[i]);
                    for (int i = 0; i < c.R; i++) d += (double)bf16_to_float(c.q_pe[(t * c.H + h) * c.R + i]) * bf16_to_float(kv[c.L + i]);
                    p[j] = d * (double)0.07f;
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j < n; j++) z += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < c.L; i += 3) {
                    double o = 0;
                    for (int j = 0; j < n; j++) {
                        long slot = (long)c.table[tseq[t] * c.MB + j / c.BS] * c.BS + j % c.BS;
                        o += p[j] * bf16_to_float(c.cache[slot * (c.L + c.R) + i]);
                    }
                    err_add(&e, bf16_to_float(all[t * per_tok + h * c.L + i]), o / z);
                }
            }
        free(p);
        printf("mla_attention %s: rel err vs f64 %.2e\n", sets[s]->name, err_rel(&e));
        assert_true(err_rel(&e) < BF16_TOL);
        // each token alone (max_seq_len its own sequence's) vs inside the batch
        int diff = 0;
        for (int t = 0; t < c.T; t++) {
            mla_run(sets[s], &c, t, 1, one);
            if (memcmp(one, all + t * per_tok, (size_t)per_tok * 2) != 0) {
                if (s == 0) fail_msg("mla_attention invariant: token %d differs alone vs in the batch", t);
                diff++;
            }
        }
        if (s == 1) printf("mla_attention reference: %d of %d tokens differ alone vs batched\n", diff, c.T);
    }
    free(all); free(one); free(c.table); free(c.cache); free(c.q_lat); free(c.q_pe);
}

// The same logical cache in 16-position blocks (tiles copied a row at a time, a block-table read
// per row) and in 64-position blocks (a whole tile copied as one contiguous run, its block read
// a tile ahead): the invariant kernel must give the same bits, on full tiles and on sequences'
// partial last tiles alike.
static void test_mla_attention_block_layouts(void **state) {
    (void)state;
    NEED_GPU();
    int lens[2] = {700, 2049};
    int32_t tseq[] = {0, 0, 1, 1, 1};
    int32_t tpos[] = {511, 699, 63, 1535, 2048};
    mla_case c[2] = {{.S = 2, .H = 16, .L = 512, .R = 64, .BS = 16, .MB = 160},
                     {.S = 2, .H = 16, .L = 512, .R = 64, .BS = 64, .MB = 40}};
    const int W = 512 + 64, T = (int)(sizeof tseq / sizeof tseq[0]);
    uint16_t *rows = rand_bf16((long)2 * 2560 * W, 1.0f);  // [seq][position][W]
    uint16_t *q_lat = rand_bf16((long)T * 16 * 512, 1.0f), *q_pe = rand_bf16((long)T * 16 * 64, 1.0f);
    uint16_t *out[2];
    for (int k = 0; k < 2; k++) {
        c[k].seq_lens = lens;
        c[k].T = T;
        c[k].tseq = tseq;
        c[k].tpos = tpos;
        c[k].q_lat = q_lat;
        c[k].q_pe = q_pe;
        c[k].slots = (long)c[k].S * c[k].MB * c[k].BS;
        c[k].table = invar_malloc((size_t)c[k].S * c[k].MB * 4, "table");
        int nb = c[k].S * c[k].MB;
        for (int i = 0; i < nb; i++) c[k].table[i] = (int32_t)((i * 37 + k) % nb);  // 37 is prime to nb
        c[k].cache = invar_malloc((size_t)c[k].slots * W * 2, "cache");
        for (int sq = 0; sq < 2; sq++)
            for (int j = 0; j < c[k].MB * c[k].BS; j++) {
                long slot = (long)c[k].table[sq * c[k].MB + j / c[k].BS] * c[k].BS + j % c[k].BS;
                memcpy(c[k].cache + slot * W, rows + ((long)sq * 2560 + j) * W, (size_t)W * 2);
            }
        out[k] = invar_malloc((size_t)T * 16 * 512 * 2, "out");
        mla_run(inv, &c[k], 0, T, out[k]);
        assert_written16(out[k], (long)T * 16 * 512);
    }
    for (int t = 0; t < T; t++)
        if (memcmp(out[0] + (long)t * 16 * 512, out[1] + (long)t * 16 * 512, 16 * 512 * 2) != 0)
            fail_msg("mla_attention invariant: token %d (position %d) differs between 16- and 64-position blocks",
                     t, tpos[t]);
    for (int k = 0; k < 2; k++) {
        free(c[k].table);
        free(c[k].cache);
        free(out[k]);
    }
    free(rows);
    free(q_lat);
    free(q_pe);
}

// --- moe -------------------------------------------------------------------------------------

static void test_moe(void **state) {
    (void)state;
    NEED_GPU();
    const int T = 40, D = 256, E = 16, k = 4, I = 96;
    uint16_t *hx = rand_bf16((long)T * D, 1.0f), *hg = rand_bf16((long)E * D, 0.2f);
    uint16_t *hwgu = rand_bf16((long)E * 2 * I * D, 0.1f), *hwd = rand_bf16((long)E * D * I, 0.1f);
    float bias[16];
    for (int e = 0; e < E; e++) bias[e] = 0.05f * rnd();
    void *dx = to_dev(inv, hx, (size_t)T * D * 2), *dg = to_dev(inv, hg, (size_t)E * D * 2), *db = to_dev(inv, bias, sizeof bias);
    void *dwgu = to_dev(inv, hwgu, (size_t)E * 2 * I * D * 2), *dwd = to_dev(inv, hwd, (size_t)E * D * I * 2);
    int32_t *dids = inv->alloc(inv, (size_t)T * k * 4, "ids");
    float *dw = inv->alloc(inv, (size_t)T * k * 4, "w");
    int32_t ids[40 * 4];
    float w[40 * 4];

    // route: noaux_tc (sigmoid, bias, groups) checked against a float64 host computation
    moe_route_args r = {.topk_ids = dids, .topk_weights = dw, .x = dx, .gate_w = dg, .correction_bias = db,
                        .T = T, .D = D, .E = E, .k = k, .scoring = MOE_SCORING_SIGMOID,
                        .topk_method = MOE_TOPK_NOAUX_TC, .n_group = 4, .topk_group = 2,
                        .norm_topk_prob = true, .routed_scaling_factor = 2.5f};
    inv->moe_route(inv, &r);
    inv->download(inv, ids, dids, sizeof ids);
    inv->download(inv, w, dw, sizeof w);
    for (int t = 0; t < T; t++) {
        double sc[16], ch[16], gs[4];
        for (int e = 0; e < E; e++) {
            double l = 0;
            for (int d = 0; d < D; d++) l += (double)bf16_to_float(hx[t * D + d]) * bf16_to_float(hg[e * D + d]);
            sc[e] = 1 / (1 + exp(-l));
            ch[e] = sc[e] + bias[e];
        }
        for (int g = 0; g < 4; g++) {
            double a = -1e9, b = -1e9;
            for (int i = 0; i < 4; i++) {
                double v = ch[g * 4 + i];
                if (v > a) { b = a; a = v; } else if (v > b) b = v;
            }
            gs[g] = a + b;
        }
        bool keep[4] = {0};
        for (int j = 0; j < 2; j++) {
            int best = -1;
            for (int g = 0; g < 4; g++) if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
            keep[best] = true;
        }
        bool taken[16] = {0};
        double wsum = 0, want_w[4];
        int want[4];
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                double v = keep[e / 4] ? ch[e] : 0.0;
                double bv = best < 0 ? 0 : (keep[best / 4] ? ch[best] : 0.0);
                if (!taken[e] && (best < 0 || v > bv)) best = e;
            }
            taken[best] = true;
            want[j] = best;
            want_w[j] = sc[best];
            wsum += sc[best];
        }
        for (int j = 0; j < k; j++) {
            assert_int_equal(ids[t * k + j], want[j]);
            assert_true(fabs(w[t * k + j] - want_w[j] / wsum * 2.5) < 1e-4);
        }
    }

    // experts + combine vs float64 (with the spec's bf16 roundings), then invariance
    uint16_t *dout = inv->alloc(inv, (size_t)T * k * D * 2, "expert out"), *dcomb = inv->alloc(inv, (size_t)T * D * 2, "comb");
    moe_experts_args x = {.out = dout, .x = dx, .topk_ids = dids, .w_gate_up = dwgu, .w_down = dwd, .T = T, .k = k, .E = E, .D = D, .I = I};
    poison(inv, dout, (size_t)T * k * D * 2);
    inv->moe_experts(inv, &x);
    uint16_t *eo = from_dev(inv, dout, (size_t)T * k * D * 2);
    assert_written16(eo, (long)T * k * D);
    err_acc e = {0};
    float *act = invar_malloc((size_t)I * 4, "act");
    for (int tj = 0; tj < T * k; tj += 3) {
        int t = tj / k, ex = ids[tj];
        for (int i = 0; i < I; i++) {
            double g = 0, u = 0;
            for (int d = 0; d < D; d++) {
                g += (double)bf16_to_float(hx[t * D + d]) * bf16_to_float(hwgu[((long)ex * 2 * I + i) * D + d]);
                u += (double)bf16_to_float(hx[t * D + d]) * bf16_to_float(hwgu[((long)ex * 2 * I + I + i) * D + d]);
            }
            float gb = bf16_round((float)g), ub = bf16_round((float)u);
            act[i] = bf16_round(bf16_round(gb / (1.0f + expf(-gb))) * ub);
        }
        for (int d = 0; d < D; d++) {
            double o = 0;
            for (int i = 0; i < I; i++) o += (double)act[i] * bf16_to_float(hwd[((long)ex * D + d) * I + i]);
            err_add(&e, bf16_to_float(eo[(long)tj * D + d]), o);
        }
    }
    printf("moe_experts: rel err vs f64 %.2e\n", err_rel(&e));
    assert_true(err_rel(&e) < BF16_TOL);

    moe_combine_args cb = {.out = dcomb, .expert_out = dout, .topk_weights = dw, .topk_ids = dids, .T = T, .k = k, .D = D, .E = E};
    ops_set *sets[2] = {inv, ref};
    for (int s = 0; s < 2; s++) {
        poison(inv, dcomb, (size_t)T * D * 2);
        sets[s]->moe_combine(sets[s], &cb);
        uint16_t *comb = from_dev(sets[s], dcomb, (size_t)T * D * 2);
        assert_written16(comb, (long)T * D);
        err_acc ec = {0};
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                double o = 0;
                for (int j = 0; j < k; j++) o += (double)w[t * k + j] * bf16_to_float(eo[(long)(t * k + j) * D + d]);
                err_add(&ec, bf16_to_float(comb[t * D + d]), o);
            }
        assert_true(err_rel(&ec) < 1e-2);
        free(comb);
    }

    // one token alone through route + experts: bitwise its rows of the batch
    for (int t = 0; t < T; t += 9) {
        moe_route_args r1 = r;
        r1.x = (const uint16_t *)dx + (long)t * D;
        r1.T = 1;
        inv->moe_route(inv, &r1);
        int32_t id1[4];
        inv->download(inv, id1, dids, sizeof id1);
        assert_memory_equal(id1, ids + t * k, sizeof id1);
        moe_experts_args x1 = x;
        x1.x = r1.x;
        x1.T = 1;
        inv->moe_experts(inv, &x1);
        uint16_t *o1 = from_dev(inv, dout, (size_t)k * D * 2);
        if (memcmp(o1, eo + (long)t * k * D, (size_t)k * D * 2) != 0) fail_msg("moe_experts: token %d alone differs from batch", t);
        free(o1);
    }
    free(hx); free(hg); free(hwgu); free(hwd); free(eo); free(act);
    inv->release(inv, dx); inv->release(inv, dg); inv->release(inv, db); inv->release(inv, dwgu); inv->release(inv, dwd);
    inv->release(inv, dids); inv->release(inv, dw); inv->release(inv, dout); inv->release(inv, dcomb);
}

// --- logprobs --------------------------------------------------------------------------------

static void test_logprobs(void **state) {
    (void)state;
    NEED_GPU();
    const int R = 6, V = 5000, K = 5;
    float *hl = invar_malloc((size_t)R * V * 4, "logits"), temp[6] = {0, 0.7f, 0, 1.0f, 0, 0};
    for (long i = 0; i < (long)R * V; i++) hl[i] = 8.0f * rnd();
    hl[2 * V + 10] = hl[2 * V + 20] = 100.0f;  // a tie: lower id wins
    uint64_t seeds[6] = {1, 2, 3, 4, 5, 6};
    int32_t pos[6] = {0, 1, 2, 3, 4, 5}, tok[6], tk[30];
    float tlp[6], tkl[30];
    void *dl = to_dev(inv, hl, (size_t)R * V * 4), *dt = to_dev(inv, temp, sizeof temp), *ds = to_dev(inv, seeds, sizeof seeds);
    void *dp = to_dev(inv, pos, sizeof pos);
    void *dtok = inv->alloc(inv, sizeof tok, "tok"), *dtlp = inv->alloc(inv, sizeof tlp, "tlp");
    void *dtk = inv->alloc(inv, sizeof tk, "tk"), *dtkl = inv->alloc(inv, sizeof tkl, "tkl");
    logprobs_args a = {.logits = dl, .R = R, .V = V, .k = K, .temperature = dt, .noise_seed = ds, .position = dp,
                       .token = dtok, .token_logprob = dtlp, .topk_ids = dtk, .topk_logprobs = dtkl};
    poison(inv, dtok, sizeof tok); poison(inv, dtk, sizeof tk);
    inv->logprobs(inv, &a);
    inv->download(inv, tok, dtok, sizeof tok); inv->download(inv, tlp, dtlp, sizeof tlp);
    inv->download(inv, tk, dtk, sizeof tk); inv->download(inv, tkl, dtkl, sizeof tkl);
    for (int r = 0; r < R; r++) {
        const float *x = hl + (long)r * V;
        double mx = -1e300, z = 0;
        for (int i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < V; i++) z += exp(x[i] - mx);
        double lz = mx + log(z);
        int want = 0;
        for (int i = 1; i < V; i++) {
            double v = temp[r] == 0 ? x[i] : x[i] / temp[r] + invar_gumbel_noise(seeds[r], pos[r], i);
            double bv = temp[r] == 0 ? x[want] : x[want] / temp[r] + invar_gumbel_noise(seeds[r], pos[r], want);
            if (v > bv) want = i;
        }
        assert_int_equal(tok[r], want);
        assert_true(fabs(tlp[r] - (x[want] - lz)) < 1e-3);
        bool used[5000] = {0};
        for (int j = 0; j < K; j++) {
            int b = -1;
            for (int i = 0; i < V; i++) if (!used[i] && (b < 0 || x[i] > x[b])) b = i;
            used[b] = true;
            assert_int_equal(tk[r * K + j], b);
            assert_true(fabs(tkl[r * K + j] - (x[b] - lz)) < 1e-3);
        }
    }
    assert_int_equal(tok[2], 10);
    // row 3 alone: bitwise the batch's row 3
    logprobs_args a1 = a;
    a1.logits = (const float *)dl + 3L * V; a1.R = 1; a1.temperature = (const float *)dt + 3;
    a1.noise_seed = (const uint64_t *)ds + 3; a1.position = (const int32_t *)dp + 3;
    inv->logprobs(inv, &a1);
    float tkl1[5];
    inv->download(inv, tkl1, dtkl, sizeof tkl1);
    assert_memory_equal(tkl1, tkl + 3 * K, sizeof tkl1);
    free(hl);
    inv->release(inv, dl); inv->release(inv, dt); inv->release(inv, ds); inv->release(inv, dp);
    inv->release(inv, dtok); inv->release(inv, dtlp); inv->release(inv, dtk); inv->release(inv, dtkl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_invariant),
        cmocka_unit_test(test_gemm_reference_varies),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_mla_attention),
        cmocka_unit_test(test_mla_attention_block_layouts),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_logprobs),
    };
    char why[256];
    if (!cuda_device_available(why, (int)sizeof why))
        printf("SKIP: %d CUDA tests: %s\n", (int)(sizeof tests / sizeof tests[0]), why);
    return cmocka_run_group_tests(tests, setup_sets, teardown_sets);
}
