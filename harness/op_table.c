// harness/op_table.c — the ops `invar kernels` checks, one section per op, and the table
// (at the end) that registers them. How a section reads:
//   name_cpu_shapes / name_cuda_shapes   the shapes, d[] as the section's comment says
//   name_setup     the shared inputs of one shape (weights, tables), on the set's device
//   name_run       M rows from their seeds: upload, poison the outputs, run, download, check
//   name_error     one row against the float64 oracle (kernels/f64/f64.h)
// A row's inputs come only from its seed (row_rng), so a row is the same alone and in a batch.
#include "op_table.h"

#include <math.h>                   // cos, sin, pow
#include <stdlib.h>                 // free
#include <string.h>                 // memcpy, memset, strcmp

#include "../kernels/bf16.h"        // float_to_bf16, invar_mix64, invar_uniform
#include "../common/check.h"       // invar_malloc, invar_calloc
#include "../kernels/f64/f64.h"     // f64_<op>, f64_rel_l2_*
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

// --- random inputs ---------------------------------------------------------------------------

typedef struct {
    uint64_t state;
} rng;

static rng rng_from(uint64_t seed, uint64_t stream) {
    return (rng){invar_mix64(seed ^ invar_mix64(stream))};
}
static uint64_t rng_u64(rng *r) { return invar_mix64(r->state++); }
static float rng_float(rng *r, float lo, float hi) {
    return lo + (hi - lo) * invar_uniform(rng_u64(r));
}
static int rng_int(rng *r, int n) { return (int)(rng_u64(r) % (uint64_t)n); }

// Uniform in [lo, hi), rounded to bf16. Never zeros: 0 is hit with probability ~2^-24.
static void fill_bf16(bf16 *p, long n, rng *r, float lo, float hi) {
    for (long i = 0; i < n; i++) p[i] = float_to_bf16(rng_float(r, lo, hi));
}

// k distinct values of [0, n) in random order.
static void distinct_ids(int32_t *ids, int k, int n, rng *r) {
    for (int j = 0; j < k; j++) {
        int id;
        bool seen;
        do {
            id = rng_int(r, n);
            seen = false;
            for (int i = 0; i < j; i++) seen |= ids[i] == id;
        } while (seen);
        ids[j] = id;
    }
}

// --- device buffers --------------------------------------------------------------------------

#define POISON 0xFF  // every output byte before a run: bf16 0xFFFF / fp32 NaN / int32 -1

static void *dev_upload(ops_set *ops, const void *host, size_t bytes, const char *what) {
    void *d = ops->alloc(ops, bytes, what);
    ops->upload(ops, d, host, bytes);
    return d;
}

// A device buffer of `bytes` poisoned bytes.
static void *dev_poisoned(ops_set *ops, size_t bytes, const char *what) {
    void *host = invar_malloc(bytes, what);
    memset(host, POISON, bytes);
    void *d = dev_upload(ops, host, bytes, what);
    free(host);
    return d;
}

// Whether element i (of elem bytes) of host still holds the poison.
static bool poisoned(const void *host, long i, int elem) {
    const unsigned char *b = (const unsigned char *)host + i * elem;
    for (int k = 0; k < elem; k++)
        if (b[k] != POISON) return false;
    return true;
}

// Downloads `bytes` and checks every element of a [rows, width] block with row stride ld
// (elements of elem bytes) was written, and every gap element (ld > width) was not.
static bool download_block(ops_set *ops, void *host, const void *dev, size_t bytes, long rows,
                           long width, long ld, int elem) {
    ops->download(ops, host, dev, bytes);
    bool ok = true;
    for (long r = 0; r < rows; r++)
        for (long c = 0; c < ld; c++) ok &= poisoned(host, r * ld + c, elem) == (c >= width);
    return ok;
}

// --- gemm ------------------------------------------------------------------------------------
// y = x · wᵀ. d = {N, K}; a row is a row of x (K values) and its row of y.

struct op_case {
    ops_set *ops;
    const op_shape *s;
    uint64_t seed;
    bool f32;            // gemm: y_f32
    void *shared[4];     // device copies of the shared inputs
    void *host[4];       // host copies, for the oracle
};

static op_case *case_new(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = invar_calloc(1, sizeof *c, "kernel check case");
    c->ops = ops;
    c->s = s;
    c->seed = seed;
    return c;
}

static void case_free(op_case *c) {
    for (int i = 0; i < 4; i++) {
        if (c->shared[i]) c->ops->release(c->ops, c->shared[i]);
        free(c->host[i]);
    }
    free(c);
}

// Shared input i: n bf16 uniform in [lo, hi), host and device copies.
static void shared_bf16(op_case *c, int i, long n, float lo, float hi, const char *what) {
    rng r = rng_from(c->seed, 1000 + (uint64_t)i);
    c->host[i] = invar_malloc((size_t)n * sizeof(bf16), what);
    fill_bf16(c->host[i], n, &r, lo, hi);
    c->shared[i] = dev_upload(c->ops, c->host[i], (size_t)n * sizeof(bf16), what);
}

static const op_shape gemm_cpu_shapes[] = {
    {"128x256", {128, 256}, 0, false},
    {"576x2048", {576, 2048}, 256, true},      // DeepSeek-V2-Lite kv_a_proj_with_mqa
    {"100x300", {100, 300}, 1024, false},      // ragged tiles
    {NULL, {0}, 0, false},
};
static const op_shape gemm_cuda_shapes[] = {
    {"576x2048", {576, 2048}, 0, true},
    {"2048x512", {2048, 512}, 0, true},
    {"1536x7168", {1536, 7168}, 0, false},
    {"576x7168", {576, 7168}, 0, false},       // cuBLAS differs at M >= 256 (H200)
    {"7168x16384", {7168, 16384}, 1024, false},// cuBLAS differs at M >= 16 (H200)
    {NULL, {0}, 0, false},
};
#define gemm_f32_cpu_shapes gemm_cpu_shapes
#define gemm_f32_cuda_shapes gemm_cuda_shapes

static op_case *gemm_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = case_new(ops, s, seed);
    shared_bf16(c, 0, (long)s->d[0] * s->d[1], -1.0f, 1.0f, "gemm w");
    return c;
}
static op_case *gemm_f32_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = gemm_setup(ops, s, seed);
    c->f32 = true;
    return c;
}

static size_t gemm_row_bytes(const op_case *c) {
    return (size_t)c->s->d[0] * (c->f32 ? sizeof(float) : sizeof(bf16));
}

static void gemm_row(const op_case *c, uint64_t seed, bf16 *x) {
    rng r = rng_from(seed, 1);
    fill_bf16(x, c->s->d[1], &r, -1.0f, 1.0f);
}

static bool gemm_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int N = c->s->d[0], K = c->s->d[1];
    ops_set *ops = c->ops;
    bf16 *x = invar_malloc((size_t)M * K * sizeof(bf16), "gemm x");
    for (int m = 0; m < M; m++) gemm_row(c, seeds[m], x + (size_t)m * K);
    size_t y_bytes = (size_t)M * gemm_row_bytes(c);
    void *dx = dev_upload(ops, x, (size_t)M * K * sizeof(bf16), "gemm x");
    void *dy = dev_poisoned(ops, y_bytes, "gemm y");
    gemm_args a = {.y = dy, .y_f32 = c->f32, .x = dx, .w = c->shared[0], .M = M, .N = N, .K = K};
    ops->gemm(ops, &a);
    ops->sync(ops);
    bool ok = download_block(ops, out, dy, y_bytes, M, N, N, c->f32 ? 4 : 2);
    ops->release(ops, dx);
    ops->release(ops, dy);
    free(x);
    return ok;
}

static double gemm_error(op_case *c, uint64_t seed, const void *row) {
    int N = c->s->d[0], K = c->s->d[1];
    bf16 *x = invar_malloc((size_t)K * sizeof(bf16), "gemm x row");
    double *ref = invar_malloc((size_t)N * sizeof(double), "gemm oracle");
    gemm_row(c, seed, x);
    gemm_args a = {.x = x, .w = c->host[0], .M = 1, .N = N, .K = K};
    f64_gemm(&a, ref);
    double err = c->f32 ? f64_rel_l2_f32(row, ref, N) : f64_rel_l2_bf16(row, ref, N);
    free(x);
    free(ref);
    return err;
}
#define gemm_f32_row_bytes gemm_row_bytes
#define gemm_f32_run gemm_run
#define gemm_f32_error gemm_error
#define gemm_teardown case_free
#define gemm_f32_teardown case_free

// --- rmsnorm ---------------------------------------------------------------------------------
// d = {D, pad}; a row is one token's D values; out rows are D + pad apart (the pad must stay
// untouched).

#define RMS_EPS 1e-6f

static const op_shape rmsnorm_cpu_shapes[] = {
    {"D=512", {512, 0}, 0, false},             // kv_a_layernorm
    {"D=2048 ld+8", {2048, 8}, 0, true},        // V2-Lite hidden
    {"D=7168", {7168, 0}, 0, true},            // V3 hidden
    {NULL, {0}, 0, false},
};
static const op_shape rmsnorm_cuda_shapes[] = {
    {"D=512", {512, 0}, 0, true},
    {"D=1536", {1536, 0}, 0, false},           // q_a_layernorm
    {"D=2048 ld+8", {2048, 8}, 0, true},
    {"D=7168", {7168, 0}, 0, false},
    {NULL, {0}, 0, false},
};

static op_case *rmsnorm_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = case_new(ops, s, seed);
    shared_bf16(c, 0, s->d[0], 0.5f, 1.5f, "rmsnorm w");
    return c;
}
static size_t rmsnorm_row_bytes(const op_case *c) {
    return (size_t)(c->s->d[0] + c->s->d[1]) * sizeof(bf16);
}
static void rmsnorm_row(uint64_t seed, int D, bf16 *x) {
    rng r = rng_from(seed, 2);
    float scale = rng_float(&r, 0.1f, 4.0f);  // rows of other magnitudes
    fill_bf16(x, D, &r, -scale, scale);
}

static bool rmsnorm_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int D = c->s->d[0];
    long ld = D + c->s->d[1];
    ops_set *ops = c->ops;
    bf16 *x = invar_malloc((size_t)M * D * sizeof(bf16), "rmsnorm x");
    for (int m = 0; m < M; m++) rmsnorm_row(seeds[m], D, x + (size_t)m * D);
    bf16 *dx = dev_upload(ops, x, (size_t)M * D * sizeof(bf16), "rmsnorm x");
    bf16 *dout = dev_poisoned(ops, (size_t)M * ld * sizeof(bf16), "rmsnorm out");
    ops->rmsnorm(ops, dout, ld, dx, D, c->shared[0], M, D, RMS_EPS);
    ops->sync(ops);
    bool ok = download_block(ops, out, dout, (size_t)M * ld * sizeof(bf16), M, D, ld, 2);
    ops->release(ops, dx);
    ops->release(ops, dout);
    free(x);
    return ok;
}

static double rmsnorm_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->d[0];
    bf16 *x = invar_malloc((size_t)D * sizeof(bf16), "rmsnorm x row");
    double *ref = invar_malloc((size_t)D * sizeof(double), "rmsnorm oracle");
    rmsnorm_row(seed, D, x);
    f64_rmsnorm(ref, x, D, c->host[0], 1, D, RMS_EPS);
    double err = f64_rel_l2_bf16(row, ref, D);
    free(x);
    free(ref);
    return err;
}
#define rmsnorm_teardown case_free

// --- rope ------------------------------------------------------------------------------------
// d = {H, R, interleave, max_pos}; a row is one token: H heads of R rope values, heads R + 16
// apart (the gap, as q_pe sits inside q, must stay untouched), and its position.

#define ROPE_GAP 16

static const op_shape rope_cpu_shapes[] = {
    {"H=16 R=64 interleave", {16, 64, 1, 4096}, 0, true},
    {"H=16 R=64 rotate_half", {16, 64, 0, 4096}, 0, false},
    {"H=1 R=64 interleave", {1, 64, 1, 4096}, 0, false},   // k_pe: one head
    {NULL, {0}, 0, false},
};
static const op_shape rope_cuda_shapes[] = {
    {"H=128 R=64 interleave", {128, 64, 1, 16384}, 0, true},
    {"H=16 R=64 interleave", {16, 64, 1, 16384}, 0, false},
    {"H=16 R=64 rotate_half", {16, 64, 0, 16384}, 0, false},
    {"H=1 R=64 interleave", {1, 64, 1, 16384}, 0, false},
    {NULL, {0}, 0, false},
};

// cos/sin [max_pos, R/2] as plain RoPE (theta 10000) with an mscale of 1.1 folded in.
static op_case *rope_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = case_new(ops, s, seed);
    int R = s->d[1], P = s->d[3];
    size_t bytes = (size_t)P * (R / 2) * sizeof(float);
    float *cs = invar_malloc(bytes, "rope cos"), *sn = invar_malloc(bytes, "rope sin");
    for (int p = 0; p < P; p++)
        for (int i = 0; i < R / 2; i++) {
            double angle = p * pow(10000.0, -2.0 * i / R);
            cs[(size_t)p * (R / 2) + i] = (float)(1.1 * cos(angle));
            sn[(size_t)p * (R / 2) + i] = (float)(1.1 * sin(angle));
        }
    c->host[0] = cs;
    c->host[1] = sn;
    c->shared[0] = dev_upload(ops, cs, bytes, "rope cos");
    c->shared[1] = dev_upload(ops, sn, bytes, "rope sin");
    return c;
}
static size_t rope_row_bytes(const op_case *c) {
    return (size_t)c->s->d[0] * (c->s->d[1] + ROPE_GAP) * sizeof(bf16);
}
// One token: its heads (gaps poisoned) and its position.
static int32_t rope_row(const op_case *c, uint64_t seed, bf16 *x) {
    int H = c->s->d[0], R = c->s->d[1];
    rng r = rng_from(seed, 3);
    memset(x, POISON, rope_row_bytes(c));
    for (int h = 0; h < H; h++) fill_bf16(x + (size_t)h * (R + ROPE_GAP), R, &r, -2.0f, 2.0f);
    return rng_int(&r, c->s->d[3]);
}

static bool rope_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int H = c->s->d[0], R = c->s->d[1];
    long ld_head = R + ROPE_GAP, ld_token = H * ld_head;
    ops_set *ops = c->ops;
    size_t row = rope_row_bytes(c);
    bf16 *x = invar_malloc((size_t)M * row, "rope x");
    int32_t *pos = invar_malloc((size_t)M * sizeof(int32_t), "rope positions");
    for (int m = 0; m < M; m++) pos[m] = rope_row(c, seeds[m], x + (size_t)m * ld_token);
    bf16 *dx = dev_upload(ops, x, (size_t)M * row, "rope x");
    int32_t *dpos = dev_upload(ops, pos, (size_t)M * sizeof(int32_t), "rope positions");
    ops->rope(ops, dx, ld_token, ld_head, M, H, R, dpos, c->shared[0], c->shared[1],
              c->s->d[2] != 0);
    ops->sync(ops);
    // In place: "written" means the gaps between heads are untouched.
    bool ok = download_block(ops, out, dx, (size_t)M * row, (long)M * H, R, ld_head, 2);
    ops->release(ops, dx);
    ops->release(ops, dpos);
    free(x);
    free(pos);
    return ok;
}

static double rope_error(op_case *c, uint64_t seed, const void *row) {
    int H = c->s->d[0], R = c->s->d[1];
    bf16 *x = invar_malloc(rope_row_bytes(c), "rope x row");
    double *ref = invar_malloc((size_t)H * R * sizeof(double), "rope oracle");
    bf16 *got = invar_malloc((size_t)H * R * sizeof(bf16), "rope output row");
    int32_t pos = rope_row(c, seed, x);
    f64_rope(ref, x, (long)H * (R + ROPE_GAP), R + ROPE_GAP, 1, H, R, &pos, c->host[0],
             c->host[1], c->s->d[2] != 0);
    for (int h = 0; h < H; h++)
        memcpy(got + (size_t)h * R, (const bf16 *)row + (size_t)h * (R + ROPE_GAP),
               (size_t)R * sizeof(bf16));
    double err = f64_rel_l2_bf16(got, ref, (long)H * R);
    free(x);
    free(ref);
    free(got);
    return err;
}
#define rope_teardown case_free

// --- embedding -------------------------------------------------------------------------------
// d = {V, D}; a row is one token id and its D values.

static const op_shape embedding_cpu_shapes[] = {
    {"V=4096 D=2048", {4096, 2048}, 0, true},
    {NULL, {0}, 0, false},
};
static const op_shape embedding_cuda_shapes[] = {
    {"V=102400 D=2048", {102400, 2048}, 0, true},   // V2-Lite
    {"V=32000 D=7168", {32000, 7168}, 0, false},
    {NULL, {0}, 0, false},
};

static op_case *embedding_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = case_new(ops, s, seed);
    shared_bf16(c, 0, (long)s->d[0] * s->d[1], -1.0f, 1.0f, "embedding table");
    return c;
}
static size_t embedding_row_bytes(const op_case *c) { return (size_t)c->s->d[1] * sizeof(bf16); }
static int32_t embedding_id(const op_case *c, uint64_t seed) {
    rng r = rng_from(seed, 4);
    return rng_int(&r, c->s->d[0]);
}

static bool embedding_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int D = c->s->d[1];
    ops_set *ops = c->ops;
    int32_t *ids = invar_malloc((size_t)M * sizeof(int32_t), "embedding ids");
    for (int m = 0; m < M; m++) ids[m] = embedding_id(c, seeds[m]);
    int32_t *dids = dev_upload(ops, ids, (size_t)M * sizeof(int32_t), "embedding ids");
    bf16 *dout = dev_poisoned(ops, (size_t)M * D * sizeof(bf16), "embedding out");
    ops->embedding(ops, dout, c->shared[0], dids, M, D);
    ops->sync(ops);
    bool ok = download_block(ops, out, dout, (size_t)M * D * sizeof(bf16), M, D, D, 2);
    ops->release(ops, dids);
    ops->release(ops, dout);
    free(ids);
    return ok;
}

static double embedding_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->d[1];
    int32_t id = embedding_id(c, seed);
    double *ref = invar_malloc((size_t)D * sizeof(double), "embedding oracle");
    f64_embedding(ref, c->host[0], &id, 1, D);
    double err = f64_rel_l2_bf16(row, ref, D);
    free(ref);
    return err;
}
#define embedding_teardown case_free

// --- residual_add ----------------------------------------------------------------------------
// d = {D}; a row is one token's x and y (D values each); x = x + y in place over M * D values.

static const op_shape residual_add_cpu_shapes[] = {
    {"D=2048", {2048}, 0, true},
    {NULL, {0}, 0, false},
};
static const op_shape residual_add_cuda_shapes[] = {
    {"D=2048", {2048}, 0, true},
    {"D=7168", {7168}, 0, false},
    {NULL, {0}, 0, false},
};

static op_case *residual_add_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    return case_new(ops, s, seed);
}
static size_t residual_add_row_bytes(const op_case *c) {
    return (size_t)c->s->d[0] * sizeof(bf16);
}
static void residual_add_row(uint64_t seed, int D, bf16 *x, bf16 *y) {
    rng r = rng_from(seed, 5);
    fill_bf16(x, D, &r, -4.0f, 4.0f);
    fill_bf16(y, D, &r, -1.0f, 1.0f);
}

static bool residual_add_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int D = c->s->d[0];
    ops_set *ops = c->ops;
    size_t bytes = (size_t)M * D * sizeof(bf16);
    bf16 *x = invar_malloc(bytes, "residual x"), *y = invar_malloc(bytes, "residual y");
    for (int m = 0; m < M; m++) residual_add_row(seeds[m], D, x + (size_t)m * D, y + (size_t)m * D);
    bf16 *dx = dev_upload(ops, x, bytes, "residual x");
    bf16 *dy = dev_upload(ops, y, bytes, "residual y");
    ops->residual_add(ops, dx, dy, (long)M * D);
    ops->sync(ops);
    bool ok = download_block(ops, out, dx, bytes, M, D, D, 2);  // in place: nothing to poison
    ops->release(ops, dx);
    ops->release(ops, dy);
    free(x);
    free(y);
    return ok;
}

static double residual_add_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->d[0];
    bf16 *x = invar_malloc((size_t)D * sizeof(bf16), "residual x row");
    bf16 *y = invar_malloc((size_t)D * sizeof(bf16), "residual y row");
    double *ref = invar_malloc((size_t)D * sizeof(double), "residual oracle");
    residual_add_row(seed, D, x, y);
    f64_residual_add(ref, x, y, D);
    double err = f64_rel_l2_bf16(row, ref, D);
    free(x);
    free(y);
    free(ref);
    return err;
}
#define residual_add_teardown case_free

// --- silu_mul --------------------------------------------------------------------------------
// d = {I}; a row is one token's gate and up (2I values) and its I outputs.

static const op_shape silu_mul_cpu_shapes[] = {
    {"I=1408", {1408}, 0, true},               // V2-Lite expert
    {NULL, {0}, 0, false},
};
static const op_shape silu_mul_cuda_shapes[] = {
    {"I=1408", {1408}, 0, true},
    {"I=10944", {10944}, 0, false},            // V2-Lite dense MLP
    {"I=18432", {18432}, 1024, false},         // V3 dense MLP
    {NULL, {0}, 0, false},
};

static op_case *silu_mul_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    return case_new(ops, s, seed);
}
static size_t silu_mul_row_bytes(const op_case *c) { return (size_t)c->s->d[0] * sizeof(bf16); }
static void silu_mul_row(uint64_t seed, int I, bf16 *gu) {
    rng r = rng_from(seed, 6);
    fill_bf16(gu, 2L * I, &r, -6.0f, 6.0f);
}

static bool silu_mul_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int I = c->s->d[0];
    ops_set *ops = c->ops;
    bf16 *gu = invar_malloc((size_t)M * 2 * I * sizeof(bf16), "silu_mul gate_up");
    for (int m = 0; m < M; m++) silu_mul_row(seeds[m], I, gu + (size_t)m * 2 * I);
    bf16 *dgu = dev_upload(ops, gu, (size_t)M * 2 * I * sizeof(bf16), "silu_mul gate_up");
    bf16 *dout = dev_poisoned(ops, (size_t)M * I * sizeof(bf16), "silu_mul out");
    ops->silu_mul(ops, dout, dgu, M, I);
    ops->sync(ops);
    bool ok = download_block(ops, out, dout, (size_t)M * I * sizeof(bf16), M, I, I, 2);
    ops->release(ops, dgu);
    ops->release(ops, dout);
    free(gu);
    return ok;
}

static double silu_mul_error(op_case *c, uint64_t seed, const void *row) {
    int I = c->s->d[0];
    bf16 *gu = invar_malloc((size_t)2 * I * sizeof(bf16), "silu_mul row");
    double *ref = invar_malloc((size_t)I * sizeof(double), "silu_mul oracle");
    silu_mul_row(seed, I, gu);
    f64_silu_mul(ref, gu, 1, I);
    double err = f64_rel_l2_bf16(row, ref, I);
    free(gu);
    free(ref);
    return err;
}
#define silu_mul_teardown case_free

// --- kv_cache_write --------------------------------------------------------------------------
// d = {L, R}; a row is one token's (c_kv, k_pe), read from one [L + R] row as kv_a_proj leaves
// them, and the cache slot it lands in. The cache has 2M slots; the other M must stay poison.

static const op_shape kv_cache_write_cpu_shapes[] = {
    {"L=512 R=64", {512, 64}, 0, true},
    {NULL, {0}, 0, false},
};
static const op_shape kv_cache_write_cuda_shapes[] = {
    {"L=512 R=64", {512, 64}, 0, true},
    {NULL, {0}, 0, false},
};

static op_case *kv_cache_write_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    return case_new(ops, s, seed);
}
static size_t kv_cache_write_row_bytes(const op_case *c) {
    return (size_t)(c->s->d[0] + c->s->d[1]) * sizeof(bf16);
}
static void kv_row(uint64_t seed, int W, bf16 *v) {
    rng r = rng_from(seed, 7);
    fill_bf16(v, W, &r, -3.0f, 3.0f);
}

static bool kv_cache_write_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int L = c->s->d[0], R = c->s->d[1], W = L + R, slots = 2 * M;
    ops_set *ops = c->ops;
    bf16 *src = invar_malloc((size_t)M * W * sizeof(bf16), "kv source");
    for (int m = 0; m < M; m++) kv_row(seeds[m], W, src + (size_t)m * W);
    // Slots: a shuffle of [0, 2M) seeded by the batch, first M used.
    int32_t *perm = invar_malloc((size_t)slots * sizeof(int32_t), "kv slots");
    rng r = rng_from(seeds[0] ^ (uint64_t)M, 8);
    for (int i = 0; i < slots; i++) perm[i] = i;
    for (int i = slots - 1; i > 0; i--) {
        int j = rng_int(&r, i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    size_t cache_bytes = (size_t)slots * W * sizeof(bf16);
    bf16 *dsrc = dev_upload(ops, src, (size_t)M * W * sizeof(bf16), "kv source");
    int32_t *dslot = dev_upload(ops, perm, (size_t)M * sizeof(int32_t), "kv slots");
    bf16 *dcache = dev_poisoned(ops, cache_bytes, "kv cache");
    ops->kv_cache_write(ops, dcache, dsrc, W, dsrc + L, W, dslot, M, L, R);
    ops->sync(ops);
    bf16 *cache = invar_malloc(cache_bytes, "kv cache");
    ops->download(ops, cache, dcache, cache_bytes);
    bool ok = true;
    for (int s = 0; s < slots; s++) {
        bool used = false;
        for (int m = 0; m < M && !used; m++) used = perm[m] == s;
        for (int i = 0; i < W; i++) ok &= poisoned(cache, (long)s * W + i, 2) != used;
    }
    for (int m = 0; m < M; m++)
        memcpy((bf16 *)out + (size_t)m * W, cache + (size_t)perm[m] * W, (size_t)W * sizeof(bf16));
    ops->release(ops, dsrc);
    ops->release(ops, dslot);
    ops->release(ops, dcache);
    free(src);
    free(perm);
    free(cache);
    return ok;
}

static double kv_cache_write_error(op_case *c, uint64_t seed, const void *row) {
    int L = c->s->d[0], R = c->s->d[1], W = L + R;
    bf16 *src = invar_malloc((size_t)W * sizeof(bf16), "kv row");
    double *ref = invar_malloc((size_t)W * sizeof(double), "kv oracle");
    kv_row(seed, W, src);
    int32_t slot = 0;
    f64_kv_cache_write(ref, src, W, src + L, W, &slot, 1, L, R);
    double err = f64_rel_l2_bf16(row, ref, W);
    free(src);
    free(ref);
    return err;
}
#define kv_cache_write_teardown case_free

// --- mla_attention ---------------------------------------------------------------------------
// d = {H, L, R, max_len, chunk, block_size}. A row is one sequence of the step: its cached
// latents (length len, random in [chunk, max_len]) and its `chunk` query tokens at the last
// positions (chunk 1: decode; more: a prefill chunk after len - chunk cached tokens). Other
// rows are other sequences with other lengths, so num_seqs and max_seq_len change with the
// batch; each batch scatters its sequences' blocks over the cache in another order.

static const op_shape mla_attention_cpu_shapes[] = {
    {"decode H=4 len<=1024", {4, 512, 64, 1024, 1, 16}, 128, true},
    {"prefill H=2 c=8 len<=200", {2, 512, 64, 200, 8, 16}, 128, false},
    {NULL, {0}, 0, false},
};
static const op_shape mla_attention_cuda_shapes[] = {
    {"decode H=16 len<=1024", {16, 512, 64, 1024, 1, 64}, 0, true},
    {"decode H=128 len<=1024", {128, 512, 64, 1024, 1, 64}, 1024, false},
    {"prefill H=16 c=64 len<=1024", {16, 512, 64, 1024, 64, 64}, 256, false},
    {NULL, {0}, 0, false},
};

typedef struct {
    int len;
    bf16 *kv;     // [len, L + R]
    bf16 *q_lat;  // [chunk, H, L]
    bf16 *q_pe;   // [chunk, H, R]
} attn_row;

static attn_row attn_row_make(const op_case *c, uint64_t seed) {
    const int *d = c->s->d;
    int H = d[0], L = d[1], R = d[2], max_len = d[3], chunk = d[4];
    rng r = rng_from(seed, 9);
    attn_row a;
    a.len = chunk + rng_int(&r, max_len - chunk + 1);
    a.kv = invar_malloc((size_t)a.len * (L + R) * sizeof(bf16), "attention row kv");
    a.q_lat = invar_malloc((size_t)chunk * H * L * sizeof(bf16), "attention row q_lat");
    a.q_pe = invar_malloc((size_t)chunk * H * R * sizeof(bf16), "attention row q_pe");
    fill_bf16(a.kv, (long)a.len * (L + R), &r, -1.0f, 1.0f);
    fill_bf16(a.q_lat, (long)chunk * H * L, &r, -1.0f, 1.0f);
    fill_bf16(a.q_pe, (long)chunk * H * R, &r, -1.0f, 1.0f);
    return a;
}
static void attn_row_free(attn_row *a) {
    free(a->kv);
    free(a->q_lat);
    free(a->q_pe);
}

static float attn_scale(void) { return (float)(1.0 / sqrt(192.0)); }  // qk_nope 128 + rope 64

static op_case *mla_attention_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    return case_new(ops, s, seed);
}
static size_t mla_attention_row_bytes(const op_case *c) {
    return (size_t)c->s->d[4] * c->s->d[0] * c->s->d[1] * sizeof(bf16);
}

static bool mla_attention_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    const int *d = c->s->d;
    int H = d[0], L = d[1], R = d[2], chunk = d[4], bs = d[5], W = L + R, T = M * chunk;
    ops_set *ops = c->ops;
    attn_row *rows = invar_malloc((size_t)M * sizeof *rows, "attention rows");
    int *first_block = invar_malloc((size_t)M * sizeof(int), "attention first blocks");
    int max_len = 0, max_blocks = 0, blocks = 0;
    int32_t *seq_lens = invar_malloc((size_t)M * sizeof(int32_t), "attention seq_lens");
    for (int m = 0; m < M; m++) {
        rows[m] = attn_row_make(c, seeds[m]);
        seq_lens[m] = rows[m].len;
        int nb = (rows[m].len + bs - 1) / bs;
        first_block[m] = blocks;
        blocks += nb;
        if (nb > max_blocks) max_blocks = nb;
        if (rows[m].len > max_len) max_len = rows[m].len;
    }
    // Logical block b of the batch lives in physical block perm[b]: a shuffle per batch.
    int32_t *perm = invar_malloc((size_t)blocks * sizeof(int32_t), "attention block shuffle");
    rng r = rng_from(seeds[0] ^ (uint64_t)M, 10);
    for (int i = 0; i < blocks; i++) perm[i] = i;
    for (int i = blocks - 1; i > 0; i--) {
        int j = rng_int(&r, i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    size_t cache_elems = (size_t)blocks * bs * W;
    bf16 *cache = invar_malloc(cache_elems * sizeof(bf16), "attention kv cache");
    fill_bf16(cache, (long)cache_elems, &r, -1.0f, 1.0f);  // past the ends: finite noise
    int32_t *table = invar_malloc((size_t)M * max_blocks * sizeof(int32_t), "block table");
    bf16 *q_lat = invar_malloc((size_t)T * H * L * sizeof(bf16), "attention q_lat");
    bf16 *q_pe = invar_malloc((size_t)T * H * R * sizeof(bf16), "attention q_pe");
    int32_t *token_seq = invar_malloc((size_t)T * sizeof(int32_t), "attention token_seq");
    int32_t *token_pos = invar_malloc((size_t)T * sizeof(int32_t), "attention token_pos");
    for (int m = 0; m < M; m++) {
        int nb = (rows[m].len + bs - 1) / bs;
        for (int b = 0; b < max_blocks; b++)
            table[(size_t)m * max_blocks + b] = b < nb ? perm[first_block[m] + b] : -1;
        for (int j = 0; j < rows[m].len; j++) {
            long slot = (long)table[(size_t)m * max_blocks + j / bs] * bs + j % bs;
            memcpy(cache + slot * W, rows[m].kv + (size_t)j * W, (size_t)W * sizeof(bf16));
        }
        memcpy(q_lat + (size_t)m * chunk * H * L, rows[m].q_lat,
               (size_t)chunk * H * L * sizeof(bf16));
        memcpy(q_pe + (size_t)m * chunk * H * R, rows[m].q_pe,
               (size_t)chunk * H * R * sizeof(bf16));
        for (int i = 0; i < chunk; i++) {
            token_seq[m * chunk + i] = m;
            token_pos[m * chunk + i] = rows[m].len - chunk + i;
        }
        attn_row_free(&rows[m]);
    }
    mla_attention_args a = {
        .q_lat = dev_upload(ops, q_lat, (size_t)T * H * L * sizeof(bf16), "attention q_lat"),
        .q_pe = dev_upload(ops, q_pe, (size_t)T * H * R * sizeof(bf16), "attention q_pe"),
        .kv_cache = dev_upload(ops, cache, cache_elems * sizeof(bf16), "attention kv cache"),
        .block_table = dev_upload(ops, table, (size_t)M * max_blocks * sizeof(int32_t),
                                  "attention block table"),
        .token_seq = dev_upload(ops, token_seq, (size_t)T * sizeof(int32_t), "token_seq"),
        .token_pos = dev_upload(ops, token_pos, (size_t)T * sizeof(int32_t), "token_pos"),
        .seq_lens = dev_upload(ops, seq_lens, (size_t)M * sizeof(int32_t), "seq_lens"),
        .T = T, .H = H, .L = L, .R = R,
        .ld_out = (long)H * L, .ld_q_lat = (long)H * L, .ld_q_pe = (long)H * R,
        .head_stride_q_pe = R,
        .block_size = bs, .max_blocks_per_seq = max_blocks, .num_seqs = M,
        .max_seq_len = max_len, .scale = attn_scale(),
    };
    size_t out_bytes = (size_t)T * H * L * sizeof(bf16);
    a.out = dev_poisoned(ops, out_bytes, "attention out");
    ops->mla_attention(ops, &a);
    ops->sync(ops);
    bool ok = download_block(ops, out, a.out, out_bytes, T, (long)H * L, (long)H * L, 2);
    void *dev[] = {a.out, (void *)a.q_lat, (void *)a.q_pe, (void *)a.kv_cache,
                   (void *)a.block_table, (void *)a.token_seq, (void *)a.token_pos,
                   (void *)a.seq_lens};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ops->release(ops, dev[i]);
    free(rows);
    free(first_block);
    free(seq_lens);
    free(perm);
    free(cache);
    free(table);
    free(q_lat);
    free(q_pe);
    free(token_seq);
    free(token_pos);
    return ok;
}

static double mla_attention_error(op_case *c, uint64_t seed, const void *row) {
    const int *d = c->s->d;
    int H = d[0], L = d[1], R = d[2], chunk = d[4];
    attn_row ar = attn_row_make(c, seed);
    // The row alone, its cache in one block as long as the sequence.
    int32_t table = 0, seq[64], pos[64], len = ar.len;
    double *ref = invar_malloc((size_t)chunk * H * L * sizeof(double), "attention oracle");
    double err = 0.0;
    for (int i0 = 0; i0 < chunk; i0 += 64) {
        int n = chunk - i0 < 64 ? chunk - i0 : 64;
        for (int i = 0; i < n; i++) {
            seq[i] = 0;
            pos[i] = ar.len - chunk + i0 + i;
        }
        mla_attention_args a = {
            .q_lat = ar.q_lat + (size_t)i0 * H * L, .q_pe = ar.q_pe + (size_t)i0 * H * R,
            .kv_cache = ar.kv, .block_table = &table, .token_seq = seq, .token_pos = pos,
            .seq_lens = &len, .T = n, .H = H, .L = L, .R = R, .ld_out = (long)H * L,
            .ld_q_lat = (long)H * L, .ld_q_pe = (long)H * R, .head_stride_q_pe = R,
            .block_size = ar.len, .max_blocks_per_seq = 1, .num_seqs = 1,
            .max_seq_len = ar.len, .scale = attn_scale(),
        };
        f64_mla_attention(&a, ref + (size_t)i0 * H * L);
    }
    err = f64_rel_l2_bf16(row, ref, (long)chunk * H * L);
    attn_row_free(&ar);
    free(ref);
    return err;
}
#define mla_attention_teardown case_free

// --- moe_route -------------------------------------------------------------------------------
// d = {D, E, k, variant, n_group, topk_group}; variant 0: V2 softmax greedy, 1: V2 softmax
// group_limited_greedy, 2: V3 sigmoid noaux_tc with correction bias. A row is one token.
// Output row: k ids then k weights (int32, float).

static const op_shape moe_route_cpu_shapes[] = {
    {"D=2048 E=64 k=6 softmax", {2048, 64, 6, 0, 1, 1}, 1024, true},      // V2-Lite
    {"D=1024 E=256 k=8 noaux_tc", {1024, 256, 8, 2, 8, 4}, 1024, false},  // V3 routing
    {NULL, {0}, 0, false},
};
static const op_shape moe_route_cuda_shapes[] = {
    {"D=2048 E=64 k=6 softmax", {2048, 64, 6, 0, 1, 1}, 0, true},
    {"D=5120 E=160 k=6 group_limited", {5120, 160, 6, 1, 8, 3}, 0, false},  // V2
    {"D=7168 E=256 k=8 noaux_tc", {7168, 256, 8, 2, 8, 4}, 0, false},       // V3
    {NULL, {0}, 0, false},
};

static op_case *moe_route_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = case_new(ops, s, seed);
    shared_bf16(c, 0, (long)s->d[1] * s->d[0], -0.1f, 0.1f, "router gate_w");
    if (s->d[3] == 2) {  // e_score_correction_bias: fp32, small and positive
        rng r = rng_from(seed, 11);
        float *bias = invar_malloc((size_t)s->d[1] * sizeof(float), "router bias");
        for (int e = 0; e < s->d[1]; e++) bias[e] = rng_float(&r, 0.0f, 0.1f);
        c->host[1] = bias;
        c->shared[1] = dev_upload(ops, bias, (size_t)s->d[1] * sizeof(float), "router bias");
    }
    return c;
}
static size_t moe_route_row_bytes(const op_case *c) { return (size_t)c->s->d[2] * 8; }
static void moe_route_row(uint64_t seed, int D, bf16 *x) {
    rng r = rng_from(seed, 12);
    fill_bf16(x, D, &r, -1.0f, 1.0f);
}

static moe_route_args moe_route_args_for(const op_case *c, int T, const bf16 *x, bool device) {
    const int *d = c->s->d;
    int variant = d[3];
    return (moe_route_args){
        .x = x, .gate_w = device ? c->shared[0] : c->host[0],
        .correction_bias = device ? c->shared[1] : c->host[1],
        .T = T, .D = d[0], .E = d[1], .k = d[2],
        .scoring = variant == 2 ? MOE_SCORING_SIGMOID : MOE_SCORING_SOFTMAX,
        .topk_method = variant == 0 ? MOE_TOPK_GREEDY
                       : variant == 1 ? MOE_TOPK_GROUP_LIMITED_GREEDY : MOE_TOPK_NOAUX_TC,
        .n_group = d[4], .topk_group = d[5],
        .norm_topk_prob = variant == 2,
        .routed_scaling_factor = variant == 2 ? 2.5f : 1.0f,
    };
}

static bool moe_route_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int D = c->s->d[0], k = c->s->d[2];
    ops_set *ops = c->ops;
    bf16 *x = invar_malloc((size_t)M * D * sizeof(bf16), "router x");
    for (int m = 0; m < M; m++) moe_route_row(seeds[m], D, x + (size_t)m * D);
    bf16 *dx = dev_upload(ops, x, (size_t)M * D * sizeof(bf16), "router x");
    moe_route_args a = moe_route_args_for(c, M, dx, true);
    size_t bytes = (size_t)M * k * 4;
    a.topk_ids = dev_poisoned(ops, bytes, "router ids");
    a.topk_weights = dev_poisoned(ops, bytes, "router weights");
    ops->moe_route(ops, &a);
    ops->sync(ops);
    int32_t *ids = invar_malloc(bytes, "router ids");
    float *w = invar_malloc(bytes, "router weights");
    bool ok = download_block(ops, ids, a.topk_ids, bytes, M, k, k, 4);
    ok &= download_block(ops, w, a.topk_weights, bytes, M, k, k, 4);
    for (int m = 0; m < M; m++) {
        unsigned char *row = (unsigned char *)out + (size_t)m * k * 8;
        memcpy(row, ids + (size_t)m * k, (size_t)k * 4);
        memcpy(row + (size_t)k * 4, w + (size_t)m * k, (size_t)k * 4);
    }
    ops->release(ops, dx);
    ops->release(ops, a.topk_ids);
    ops->release(ops, a.topk_weights);
    free(x);
    free(ids);
    free(w);
    return ok;
}

// The error of the dense routing vector (weight per expert, 0 where not chosen): a wrong
// expert costs its whole weight.
static double moe_route_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->d[0], E = c->s->d[1], k = c->s->d[2];
    bf16 *x = invar_malloc((size_t)D * sizeof(bf16), "router x row");
    int32_t ref_ids[64];
    double ref_w[64];
    moe_route_row(seed, D, x);
    moe_route_args a = moe_route_args_for(c, 1, x, false);
    f64_moe_route(&a, ref_ids, ref_w);
    double *ref = invar_calloc((size_t)E, sizeof(double), "router oracle");
    float *got = invar_calloc((size_t)E, sizeof(float), "router output");
    int32_t ids[64];
    float w[64];
    memcpy(ids, row, (size_t)k * 4);
    memcpy(w, (const unsigned char *)row + (size_t)k * 4, (size_t)k * 4);
    double err = 0.0;
    for (int j = 0; j < k; j++) {
        ref[ref_ids[j]] = ref_w[j];
        if (ids[j] < 0 || ids[j] >= E) err = INFINITY;
        else got[ids[j]] += w[j];
    }
    if (err == 0.0) err = f64_rel_l2_f32(got, ref, E);
    free(x);
    free(ref);
    free(got);
    return err;
}
#define moe_route_teardown case_free

// --- moe_experts -----------------------------------------------------------------------------
// d = {D, I, E, k}; a row is one token (D values) and its k distinct experts; other tokens
// change how many tokens each expert gets. Output row: k rows of D.

static const op_shape moe_experts_cpu_shapes[] = {
    {"D=256 I=128 E=16 k=4", {256, 128, 16, 4}, 1024, true},
    {NULL, {0}, 0, false},
};
static const op_shape moe_experts_cuda_shapes[] = {
    {"D=2048 I=1408 E=64 k=6", {2048, 1408, 64, 6}, 0, true},   // V2-Lite
    {"D=7168 I=2048 E=32 k=8", {7168, 2048, 32, 8}, 1024, false}, // V3 expert, fewer experts
    {NULL, {0}, 0, false},
};

static op_case *moe_experts_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    op_case *c = case_new(ops, s, seed);
    long D = s->d[0], I = s->d[1], E = s->d[2];
    shared_bf16(c, 0, E * 2 * I * D, -0.05f, 0.05f, "experts w_gate_up");
    shared_bf16(c, 1, E * D * I, -0.05f, 0.05f, "experts w_down");
    return c;
}
static size_t moe_experts_row_bytes(const op_case *c) {
    return (size_t)c->s->d[3] * c->s->d[0] * sizeof(bf16);
}
static void moe_experts_row(const op_case *c, uint64_t seed, bf16 *x, int32_t *ids) {
    rng r = rng_from(seed, 13);
    fill_bf16(x, c->s->d[0], &r, -1.0f, 1.0f);
    distinct_ids(ids, c->s->d[3], c->s->d[2], &r);
}

static moe_experts_args moe_experts_args_for(const op_case *c, int T, bool device) {
    const int *d = c->s->d;
    return (moe_experts_args){
        .w_gate_up = device ? c->shared[0] : c->host[0],
        .w_down = device ? c->shared[1] : c->host[1],
        .T = T, .k = d[3], .E = d[2], .D = d[0], .I = d[1]};
}

static bool moe_experts_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int D = c->s->d[0], k = c->s->d[3];
    ops_set *ops = c->ops;
    bf16 *x = invar_malloc((size_t)M * D * sizeof(bf16), "experts x");
    int32_t *ids = invar_malloc((size_t)M * k * sizeof(int32_t), "experts ids");
    for (int m = 0; m < M; m++) moe_experts_row(c, seeds[m], x + (size_t)m * D, ids + (size_t)m * k);
    moe_experts_args a = moe_experts_args_for(c, M, true);
    a.x = dev_upload(ops, x, (size_t)M * D * sizeof(bf16), "experts x");
    a.topk_ids = dev_upload(ops, ids, (size_t)M * k * sizeof(int32_t), "experts ids");
    size_t out_bytes = (size_t)M * k * D * sizeof(bf16);
    a.out = dev_poisoned(ops, out_bytes, "experts out");
    ops->moe_experts(ops, &a);
    ops->sync(ops);
    bool ok = download_block(ops, out, a.out, out_bytes, (long)M * k, D, D, 2);
    ops->release(ops, a.out);
    ops->release(ops, (void *)a.x);
    ops->release(ops, (void *)a.topk_ids);
    free(x);
    free(ids);
    return ok;
}

static double moe_experts_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->d[0], k = c->s->d[3];
    bf16 *x = invar_malloc((size_t)D * sizeof(bf16), "experts x row");
    int32_t ids[64];
    double *ref = invar_malloc((size_t)k * D * sizeof(double), "experts oracle");
    moe_experts_row(c, seed, x, ids);
    moe_experts_args a = moe_experts_args_for(c, 1, false);
    a.x = x;
    a.topk_ids = ids;
    f64_moe_experts(&a, ref);
    double err = f64_rel_l2_bf16(row, ref, (long)k * D);
    free(x);
    free(ref);
    return err;
}
#define moe_experts_teardown case_free

// --- moe_combine -----------------------------------------------------------------------------
// d = {D, k, E}; a row is one token: its k expert outputs, weights and expert ids (other
// tokens change the experts' loads, by which a reference set may order its sum).

static const op_shape moe_combine_cpu_shapes[] = {
    {"D=2048 k=6 E=64", {2048, 6, 64}, 1024, true},
    {NULL, {0}, 0, false},
};
static const op_shape moe_combine_cuda_shapes[] = {
    {"D=2048 k=6 E=64", {2048, 6, 64}, 0, true},
    {"D=7168 k=8 E=256", {7168, 8, 256}, 0, false},
    {NULL, {0}, 0, false},
};

static op_case *moe_combine_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    return case_new(ops, s, seed);
}
static size_t moe_combine_row_bytes(const op_case *c) { return (size_t)c->s->d[0] * sizeof(bf16); }
static void moe_combine_row(const op_case *c, uint64_t seed, bf16 *eo, float *w, int32_t *ids) {
    int D = c->s->d[0], k = c->s->d[1];
    rng r = rng_from(seed, 14);
    fill_bf16(eo, (long)k * D, &r, -1.0f, 1.0f);
    for (int j = 0; j < k; j++) w[j] = rng_float(&r, 0.05f, 1.0f);
    distinct_ids(ids, k, c->s->d[2], &r);
}

static bool moe_combine_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int D = c->s->d[0], k = c->s->d[1];
    ops_set *ops = c->ops;
    bf16 *eo = invar_malloc((size_t)M * k * D * sizeof(bf16), "combine expert_out");
    float *w = invar_malloc((size_t)M * k * sizeof(float), "combine weights");
    int32_t *ids = invar_malloc((size_t)M * k * sizeof(int32_t), "combine ids");
    for (int m = 0; m < M; m++)
        moe_combine_row(c, seeds[m], eo + (size_t)m * k * D, w + (size_t)m * k, ids + (size_t)m * k);
    moe_combine_args a = {
        .expert_out = dev_upload(ops, eo, (size_t)M * k * D * sizeof(bf16), "combine expert_out"),
        .topk_weights = dev_upload(ops, w, (size_t)M * k * sizeof(float), "combine weights"),
        .topk_ids = dev_upload(ops, ids, (size_t)M * k * sizeof(int32_t), "combine ids"),
        .T = M, .k = k, .D = D, .E = c->s->d[2]};
    size_t out_bytes = (size_t)M * D * sizeof(bf16);
    a.out = dev_poisoned(ops, out_bytes, "combine out");
    ops->moe_combine(ops, &a);
    ops->sync(ops);
    bool ok = download_block(ops, out, a.out, out_bytes, M, D, D, 2);
    ops->release(ops, a.out);
    ops->release(ops, (void *)a.expert_out);
    ops->release(ops, (void *)a.topk_weights);
    ops->release(ops, (void *)a.topk_ids);
    free(eo);
    free(w);
    free(ids);
    return ok;
}

static double moe_combine_error(op_case *c, uint64_t seed, const void *row) {
    int D = c->s->d[0], k = c->s->d[1];
    bf16 *eo = invar_malloc((size_t)k * D * sizeof(bf16), "combine row");
    float w[64];
    int32_t ids[64];
    double *ref = invar_malloc((size_t)D * sizeof(double), "combine oracle");
    moe_combine_row(c, seed, eo, w, ids);
    moe_combine_args a = {.expert_out = eo, .topk_weights = w, .topk_ids = ids, .T = 1, .k = k,
                          .D = D, .E = c->s->d[2]};
    f64_moe_combine(&a, ref);
    double err = f64_rel_l2_bf16(row, ref, D);
    free(eo);
    free(ref);
    return err;
}
#define moe_combine_teardown case_free

// --- logprobs --------------------------------------------------------------------------------
// d = {V, k}; a row is one sequence's logits [V], its temperature (greedy or not), noise seed
// and position. Output row: token, token_logprob, k top ids, k top logprobs (4 bytes each).

static const op_shape logprobs_cpu_shapes[] = {
    {"V=32000 k=5", {32000, 5}, 1024, true},
    {"V=102400 k=20", {102400, 20}, 256, false},  // V2-Lite vocabulary
    {NULL, {0}, 0, false},
};
static const op_shape logprobs_cuda_shapes[] = {
    {"V=102400 k=20", {102400, 20}, 0, true},
    {"V=129280 k=20", {129280, 20}, 0, false},     // V3 vocabulary
    {NULL, {0}, 0, false},
};

typedef struct {
    float temperature;
    uint64_t noise_seed;
    int32_t position;
} lp_row;

static op_case *logprobs_setup(ops_set *ops, const op_shape *s, uint64_t seed) {
    return case_new(ops, s, seed);
}
static size_t logprobs_row_bytes(const op_case *c) { return (size_t)(2 + 2 * c->s->d[1]) * 4; }
static lp_row logprobs_row(uint64_t seed, int V, float *logits) {
    rng r = rng_from(seed, 15);
    for (int v = 0; v < V; v++) logits[v] = rng_float(&r, -12.0f, 12.0f);
    lp_row p;
    p.temperature = rng_int(&r, 2) ? 0.0f : rng_float(&r, 0.5f, 1.5f);
    p.noise_seed = rng_u64(&r);
    p.position = rng_int(&r, 4096);
    return p;
}

static bool logprobs_run(op_case *c, int M, const uint64_t *seeds, void *out) {
    int V = c->s->d[0], k = c->s->d[1];
    ops_set *ops = c->ops;
    float *logits = invar_malloc((size_t)M * V * sizeof(float), "logits");
    float *temp = invar_malloc((size_t)M * sizeof(float), "temperatures");
    uint64_t *noise = invar_malloc((size_t)M * sizeof(uint64_t), "noise seeds");
    int32_t *pos = invar_malloc((size_t)M * sizeof(int32_t), "positions");
    for (int m = 0; m < M; m++) {
        lp_row p = logprobs_row(seeds[m], V, logits + (size_t)m * V);
        temp[m] = p.temperature;
        noise[m] = p.noise_seed;
        pos[m] = p.position;
    }
    logprobs_args a = {
        .logits = dev_upload(ops, logits, (size_t)M * V * sizeof(float), "logits"),
        .R = M, .V = V, .k = k,
        .temperature = dev_upload(ops, temp, (size_t)M * sizeof(float), "temperatures"),
        .noise_seed = dev_upload(ops, noise, (size_t)M * sizeof(uint64_t), "noise seeds"),
        .position = dev_upload(ops, pos, (size_t)M * sizeof(int32_t), "positions"),
        .token = dev_poisoned(ops, (size_t)M * 4, "sampled tokens"),
        .token_logprob = dev_poisoned(ops, (size_t)M * 4, "token logprobs"),
        .topk_ids = dev_poisoned(ops, (size_t)M * k * 4, "top-k ids"),
        .topk_logprobs = dev_poisoned(ops, (size_t)M * k * 4, "top-k logprobs"),
    };
    ops->logprobs(ops, &a);
    ops->sync(ops);
    int32_t *tok = invar_malloc((size_t)M * 4, "tokens"), *ids = invar_malloc((size_t)M * k * 4, "ids");
    float *tlp = invar_malloc((size_t)M * 4, "token lp"), *klp = invar_malloc((size_t)M * k * 4, "top lp");
    bool ok = download_block(ops, tok, a.token, (size_t)M * 4, M, 1, 1, 4);
    ok &= download_block(ops, tlp, a.token_logprob, (size_t)M * 4, M, 1, 1, 4);
    ok &= download_block(ops, ids, a.topk_ids, (size_t)M * k * 4, M, k, k, 4);
    ok &= download_block(ops, klp, a.topk_logprobs, (size_t)M * k * 4, M, k, k, 4);
    for (int m = 0; m < M; m++) {
        unsigned char *row = (unsigned char *)out + (size_t)m * logprobs_row_bytes(c);
        memcpy(row, tok + m, 4);
        memcpy(row + 4, tlp + m, 4);
        memcpy(row + 8, ids + (size_t)m * k, (size_t)k * 4);
        memcpy(row + 8 + (size_t)k * 4, klp + (size_t)m * k, (size_t)k * 4);
    }
    void *dev[] = {(void *)a.logits, (void *)a.temperature, (void *)a.noise_seed,
                   (void *)a.position, a.token, a.token_logprob, a.topk_ids, a.topk_logprobs};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) ops->release(ops, dev[i]);
    free(logits);
    free(temp);
    free(noise);
    free(pos);
    free(tok);
    free(ids);
    free(tlp);
    free(klp);
    return ok;
}

// rel-L2 over (token logprob, top-k logprobs); a wrong sampled or top-k id is an error of 1.
static double logprobs_error(op_case *c, uint64_t seed, const void *row) {
    int V = c->s->d[0], k = c->s->d[1];
    float *logits = invar_malloc((size_t)V * sizeof(float), "logits row");
    double *lp = invar_malloc((size_t)V * sizeof(double), "logprobs oracle");
    int32_t token, ref_ids[64], ids[64];
    lp_row p = logprobs_row(seed, V, logits);
    logprobs_args a = {.logits = logits, .R = 1, .V = V, .k = k, .temperature = &p.temperature,
                       .noise_seed = &p.noise_seed, .position = &p.position};
    f64_logprobs(&a, lp, &token, ref_ids);
    int32_t got_token;
    float got[65];
    double ref[65];
    memcpy(&got_token, row, 4);
    memcpy(&got[0], (const unsigned char *)row + 4, 4);
    memcpy(ids, (const unsigned char *)row + 8, (size_t)k * 4);
    memcpy(&got[1], (const unsigned char *)row + 8 + (size_t)k * 4, (size_t)k * 4);
    double err = 0.0;
    if (got_token != token) err = 1.0;
    for (int j = 0; j < k; j++)
        if (ids[j] != ref_ids[j]) err = 1.0;
    if (err == 0.0) {
        ref[0] = lp[token];
        for (int j = 0; j < k; j++) ref[1 + j] = lp[ref_ids[j]];
        err = f64_rel_l2_f32(got, ref, k + 1);
    }
    free(logits);
    free(lp);
    return err;
}
#define logprobs_teardown case_free

// --- the table -------------------------------------------------------------------------------
// One line per op: OP_ENTRY(name, what a row is, rel-L2 tolerance, reference expectation,
// adversarial expectation).
// Tolerances: one bf16 rounding of the output is ~2^-9 relative per element (rel-L2 ~1.5e-3);
// ops that round intermediates too (norm, silu, experts, attention) get more; fp32 outputs
// (gemm_f32, router weights, logprobs) are held to fp32 accumulation error; copies are exact.

#define OP_ENTRY(op, row, tol, ref, adv)                                               \
    {#op, row, tol, ref, adv, op##_cpu_shapes, op##_cuda_shapes, op##_setup, op##_row_bytes, \
     op##_run, op##_error, op##_teardown}

static const op_entry table[] = {
    OP_ENTRY(gemm, "a row of x", 1e-2, REF_MUST_VARY, REF_MUST_VARY),
    OP_ENTRY(gemm_f32, "a row of x (fp32 y)", 1e-4, REF_MUST_VARY, REF_MUST_VARY),
    OP_ENTRY(rmsnorm, "a token", 1e-2, REF_MUST_VARY_ON_CPU, REF_MUST_VARY),
    OP_ENTRY(rope, "a token's heads", 1e-2, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(embedding, "a token id", 0.0, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(residual_add, "a token", 1e-2, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(silu_mul, "a token", 1e-2, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(kv_cache_write, "a token's cache slot", 0.0, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(mla_attention, "a sequence's query tokens", 1e-2, REF_MUST_VARY, REF_MUST_VARY),
    OP_ENTRY(moe_route, "a token", 1e-3, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE),
    OP_ENTRY(moe_experts, "a token's k experts", 2e-2, REF_MUST_VARY_ON_CPU, REF_MUST_VARY_ON_CPU),
    OP_ENTRY(moe_combine, "a token", 1e-2, REF_MUST_VARY, REF_MUST_VARY),
    OP_ENTRY(logprobs, "a row of logits", 1e-4, REF_MUST_VARY_ON_CPU, REF_MUST_VARY),
    {NULL, NULL, 0.0, REF_MAY_BE_STABLE, REF_MAY_BE_STABLE, NULL, NULL, NULL, NULL, NULL, NULL, NULL},
};

const op_entry *op_table(void) { return table; }

const op_entry *op_table_find(const char *name) {
    for (const op_entry *op = table; op->name; op++)
        if (strcmp(op->name, name) == 0) return op;
    return NULL;
}
