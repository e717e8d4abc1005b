// harness/check/ops/gemm.c — the kernel checker's gemm and gemm_f32 (harness/check/ops/op_section.h):
// y = x · wᵀ, a row being a row of x (K values) and its row of y (N values, bf16 or fp32); with
// heads > 1 a batch of products whose rows interleave as the absorbed MLA's heads do (a row:
// heads x K values in, heads x N out).
#include <stdlib.h>                 // free

#include "../../../common/check.h" // invar_malloc
#include "../../../kernels/f64/f64.h" // f64_gemm, f64_rel_l2_*
#include "op_section.h"             // op_section, op_buffer_add, op_rng, op_fill_bf16

enum { GEMM_W = 0 };                // shared
enum { GEMM_X = 0, GEMM_Y = 1 };    // buffers

// gemm_f32 (the lm_head's fp32 logits) checks gemm's shapes through the fp32 store; the
// table names each op's own lists.
const op_shape gemm_cpu_shapes[] = {
    {.label = "128x256", .gemm = {.N = 128, .K = 256}},
    // DeepSeek-V2-Lite kv_a_proj_with_mqa
    {.label = "576x2048", .gemm = {.N = 576, .K = 2048}, .max_M = 256, .quick = true},
    {.label = "100x300", .gemm = {.N = 100, .K = 300}, .max_M = 1024},  // ragged tiles
    // N and K off every multiple of 4 and 8: the 1-column path and the K tails
    {.label = "37x203", .gemm = {.N = 37, .K = 203}, .max_M = 256},
    {.label = "64x32 x4 heads", .gemm = {.N = 64, .K = 32, .heads = 4}, .max_M = 256},
    // --exhaustive: K all tail (7), exactly one lane group (8), one over (9); N below 4 and
    // one over; K past the 128 KiB panel (n_block 32768/K rounds to the floor of 4); a K whose
    // panel is 8 columns wide and an N that leaves a ragged last panel
    {.label = "1x7", .gemm = {.N = 1, .K = 7}, .exhaustive = true},
    {.label = "3x8", .gemm = {.N = 3, .K = 8}, .exhaustive = true},
    {.label = "5x9", .gemm = {.N = 5, .K = 9}, .exhaustive = true},
    {.label = "6x40000", .gemm = {.N = 6, .K = 40000}, .max_M = 129, .exhaustive = true},
    {.label = "260x4100", .gemm = {.N = 260, .K = 4100}, .max_M = 129, .exhaustive = true},
    {.label = NULL},
};
const op_shape gemm_cuda_shapes[] = {
    {.label = "576x2048", .gemm = {.N = 576, .K = 2048}, .quick = true},
    {.label = "2048x512", .gemm = {.N = 2048, .K = 512}, .quick = true},
    // split-K on sm_90a (kernels/cuda/gemm_plan.cuh: 5 splits; 576x2048 above has 5 too, on split
    // CTAs up to M = 256): M <= 64 runs the splits on separate CTAs (M = 2 the tile's last CTA adds
    // the partials, M = 7 a reduce kernel, M = 64 the CTAs units of the persistent kernel), M = 256
    // has one 64 x 128 CTA walk them, M = 1024 one 128 x 192 CTA: the quick M list crosses every switch
    {.label = "3072x2048", .gemm = {.N = 3072, .K = 2048}, .quick = true},
    // 112 k-tiles, a long walk: M = 1024 has one 64 x 96 CTA walk the splits (wgmma n = 96), M = 4096
    // one 128 x 96 CTA, M = 255 and 256 128 x 192 split CTAs
    {.label = "320x7168", .gemm = {.N = 320, .K = 7168}, .quick = true},
    {.label = "1536x7168", .gemm = {.N = 1536, .K = 7168}},
    // 18 splits: M = 4096 has one 128 x 144 CTA walk them (wgmma n = 144, four whole tiles), M = 1024
    // a 64 x 72 one (n = 72, eight), M <= 256 split CTAs (cuBLAS differs at M >= 256 on the H200:
    // quick, so that --quick's negative control has a shape where the reference set varies)
    {.label = "576x7168", .gemm = {.N = 576, .K = 7168}, .quick = true},
    // 2 long splits: 64 x 128 split CTAs up to M = 128 (on the persistent kernel from 48), one
    // 128 x 128 CTA walking both at 129-512, one 128 x 256 from M = 513, its total in L2 (cuBLAS
    // differs at M >= 16 on the H200)
    {.label = "7168x16384", .gemm = {.N = 7168, .K = 16384}, .max_M = 1024},
    // 141 column tiles of 128, 94 of 192: at M <= 64 one wave of 64 x 192 tiles (wgmma n = 192,
    // its TMA stores at the unit's end), 128 x 192 at M = 255, 256, 1024 and 4096 of the default
    // list (gemm_dense_192_cheaper: at M = 256 188 units in two rounds against 142 of 128 x 256
    // in two), 128 x 256 at M = 128
    {.label = "18048x512", .gemm = {.N = 18048, .K = 512}, .quick = true},
    // 273 column tiles of 128, 182 of 192: at M <= 64 the persistent CTAs walk them in stream-K
    // order (132 SMs: a round-robin third round of 9), handing cut chains from CTA to CTA
    {.label = "34944x512", .gemm = {.N = 34944, .K = 512}, .max_M = 256, .quick = true},
    // S = 1 on 37 column tiles of 256: at M = 1024 296 units of 128 x 256 on 132 SMs, one round
    // robin round, then the last 164 units in stream-K order (gemm_plan.cuh, GEMM_STREAM_K_TAIL_*);
    // 12800 x 2048 at M = 1024: 400 units, two rounds first, then 136 (pieces of round robin
    // before a CTA's stream-K share, the deferred stores carried across them). 9472 x 2048 takes
    // 128 x 192 tiles at M = 255 and 256 of the default and quick lists
    {.label = "9472x2048", .gemm = {.N = 9472, .K = 2048}, .quick = true},
    {.label = "12800x2048", .gemm = {.N = 12800, .K = 2048}, .quick = true},
    // V2-Lite's absorbed MLA products: q_nope · W_UK and attn · W_UVᵀ over 16 heads (sm_90a:
    // 3-D tensor maps, the head a coordinate)
    {.label = "512x128 x16 heads", .gemm = {.N = 512, .K = 128, .heads = 16}, .quick = true},
    // a batch on the cta path at every M: 64 x 128 tiles over 5 splits of 32 k-tiles, staged and
    // stored by deferred TMA stores through the 3-D y map, which alone keeps the slot's stale rows
    // past M (the x box of M rows) out of y at M < 64; the last column tile ragged (576 = 4.5 x 128)
    {.label = "576x2048 x2 heads", .gemm = {.N = 576, .K = 2048, .heads = 2}, .quick = true},
    {.label = "128x512 x16 heads", .gemm = {.N = 128, .K = 512, .heads = 16}},
    // The plans no shape above reaches (kernels/cuda/gemm_paths.h; the run's coverage lines say
    // which path each M takes). A batch of 32: one CTA walks 64 x 128 tiles' splits in stream-K
    // order at M <= 64 (576 / 128 = 4.5 column tiles x 32 heads, a thin last round on 132 SMs).
    {.label = "576x1024 x32 heads", .gemm = {.N = 576, .K = 1024, .heads = 32}, .max_M = 256},
    // A batch of 64 at M = 4096: 128 x 256 tiles in stream-K order.
    {.label = "320x512 x64 heads", .gemm = {.N = 320, .K = 512, .heads = 64}},
    // One weight for every head (weight stride 0, which no tensor map takes): cp.async loads,
    // 64 x 128 tiles up to M = 256 and 128 x 256 above; with 16 k-tiles in splits, the cta path's
    // 64 x 128 and 128 x 128 tiles.
    {.label = "64x64 x32 heads one weight", .gemm = {.N = 64, .K = 64, .heads = 32, .one_weight = true}},
    {.label = "64x1024 x32 heads one weight", .gemm = {.N = 64, .K = 1024, .heads = 32, .one_weight = true}},
    // K not a multiple of 8: rows not 16-byte aligned, the scalar loader (S = 1, and split).
    {.label = "64x60", .gemm = {.N = 64, .K = 60}},
    {.label = "64x1020", .gemm = {.N = 64, .K = 1020}},
    {.label = NULL},
};

static bool y_f32(const op_case *c) { return c->section == &gemm_f32_op; }
static int heads_of(const op_case *c) { return c->s->gemm.heads > 1 ? c->s->gemm.heads : 1; }
// Elements between the heads' weights: 0 where every head reads the one weight.
static long weight_stride(const op_case *c) { return c->s->gemm.one_weight ? 0 : (long)c->s->gemm.N * c->s->gemm.K; }

static void gemm_declare(op_case *c) {
    int N = c->s->gemm.N, K = c->s->gemm.K, H = heads_of(c);
    op_shared_bf16(c, GEMM_W, c->s->gemm.one_weight ? (long)N * K : (long)H * N * K, -1.0f, 1.0f, "gemm w");
    op_buffer_add(c, OP_ROW_IN, "gemm x", sizeof(bf16), 1, H * K, H * K);
    int y_elem = y_f32(c) ? sizeof(float) : sizeof(bf16);
    op_buffer_add(c, OP_OUT, "gemm y", y_elem, 1, H * N, H * N);
}

static void gemm_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 1);
    const int width = heads_of(c) * c->s->gemm.K;
    if (op_rng_int(&r, 2))  // half the rows: a wide range that partly cancels
        op_fill_bf16_wide(in[GEMM_X], width, &r, 1.0f);
    else
        op_fill_bf16(in[GEMM_X], width, &r, -1.0f, 1.0f);
}

static void gemm_call(op_case *c, const op_batch *b) {
    const int N = c->s->gemm.N, K = c->s->gemm.K, H = heads_of(c);
    gemm_args a = {.y = b->dev[GEMM_Y], .y_f32 = y_f32(c), .x = b->dev[GEMM_X],
                   .w = c->shared[GEMM_W], .M = b->M, .N = N, .K = K};
    if (H > 1) {
        a.ldx = (long)H * K;
        a.ldy = (long)H * N;
        a.batch = H;
        a.stride_x = K;
        a.stride_y = N;
        a.stride_w = weight_stride(c);
    }
    c->ops->gemm(c->ops, &a);
}

static double gemm_error(op_case *c, uint64_t seed, const void *row) {
    const int N = c->s->gemm.N, K = c->s->gemm.K, H = heads_of(c);
    void **in = op_row_alone(c, seed);
    double *ref = invar_malloc((size_t)H * N * sizeof(double), "gemm oracle");
    for (int h = 0; h < H; h++) {
        gemm_args a = {.x = (const bf16 *)in[GEMM_X] + (long)h * K, .w = (const bf16 *)c->host[GEMM_W] + h * weight_stride(c),
                       .M = 1, .N = N, .K = K};
        f64_gemm(&a, ref + (long)h * N);
    }
    double err = y_f32(c) ? f64_rel_l2_f32(row, ref, H * N) : f64_rel_l2_bf16(row, ref, H * N);
    op_row_free(c, in);
    free(ref);
    return err;
}

const op_section gemm_op = {gemm_declare, gemm_row, NULL, gemm_call, gemm_error};
const op_section gemm_f32_op = {gemm_declare, gemm_row, NULL, gemm_call, gemm_error};
