// harness/check/ops/logprobs.c — the kernel checker's logprobs (harness/check/ops/op_section.h): a row is
// one sequence's logits [V], its temperature (greedy or not), noise seed and position.
// Output row: token, token_logprob, k top ids, k top logprobs (4 bytes each).
#include <stdlib.h>                 // free

#include "../../../common/hash.h"   // invar_gumbel_noise

#include "../../../common/check.h" // invar_malloc
#include "../../../kernels/f64/f64.h" // f64_logprobs, f64_rel_l2_f32
#include "op_section.h"             // op_section, op_buffer_add, op_rng

enum { LP_LOGITS, LP_TEMPERATURE, LP_NOISE_SEED, LP_POSITION,   // inputs
       LP_TOKEN, LP_TOKEN_LOGPROB, LP_TOPK_IDS, LP_TOPK_LOGPROBS }; // outputs

const op_shape logprobs_cpu_shapes[] = {
    {.label = "V=32000 k=5", .logprobs = {.V = 32000, .k = 5}, .max_M = 1024, .quick = true},
    {.label = "V=102400 k=20", .logprobs = {.V = 102400, .k = 20}, .max_M = 256},  // V2-Lite
    // V off every multiple of 8 and of the 2..64-chunk split, with the maximum tied across
    // the chunk boundaries (top-k and argmax must keep the lower id whatever the chunking)
    {.label = "V=1003 k=8 ties", .logprobs = {.V = 1003, .k = 8, .ties = true}, .max_M = 1024},
    // --exhaustive: one id; all in the tail; either side of the 64-entry minimum chunk and of
    // 8 chunks of 64; k at its limit (64)
    {.label = "V=1 k=1", .logprobs = {.V = 1, .k = 1}, .exhaustive = true},
    {.label = "V=7 k=7", .logprobs = {.V = 7, .k = 7}, .exhaustive = true},
    {.label = "V=63 k=3 ties", .logprobs = {.V = 63, .k = 3, .ties = true}, .exhaustive = true},
    {.label = "V=65 k=3 ties", .logprobs = {.V = 65, .k = 3, .ties = true}, .exhaustive = true},
    {.label = "V=511 k=20 ties", .logprobs = {.V = 511, .k = 20, .ties = true},
     .exhaustive = true},
    {.label = "V=513 k=20 ties", .logprobs = {.V = 513, .k = 20, .ties = true},
     .exhaustive = true},
    {.label = "V=4097 k=64 ties", .logprobs = {.V = 4097, .k = 64, .ties = true},
     .max_M = 1024, .exhaustive = true},
    {.label = NULL},
};
const op_shape logprobs_cuda_shapes[] = {
    {.label = "V=102400 k=20", .logprobs = {.V = 102400, .k = 20}, .quick = true},
    {.label = "V=129280 k=20", .logprobs = {.V = 129280, .k = 20}},                 // V3
    // Chunks of 4,096 ids: a one-id last chunk, the maximum tied across every chunk boundary,
    // k past the ids of the last chunk; one chunk, shorter than the block; one id
    {.label = "V=12289 k=64 ties", .logprobs = {.V = 12289, .k = 64, .ties = true}, .quick = true},
    {.label = "V=4095 k=8 ties", .logprobs = {.V = 4095, .k = 8, .ties = true}, .max_M = 1024},
    {.label = "V=1 k=1", .logprobs = {.V = 1, .k = 1}, .max_M = 1024},
    {.label = NULL},
};

static void logprobs_declare(op_case *c) {
    int V = c->s->logprobs.V, k = c->s->logprobs.k;
    op_buffer_add(c, OP_ROW_IN, "logits", sizeof(float), 1, V, V);
    op_buffer_add(c, OP_ROW_IN, "temperatures", sizeof(float), 1, 1, 1);
    op_buffer_add(c, OP_ROW_IN, "noise seeds", sizeof(uint64_t), 1, 1, 1);
    op_buffer_add(c, OP_ROW_IN, "positions", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_OUT, "sampled tokens", sizeof(int32_t), 1, 1, 1);
    op_buffer_add(c, OP_OUT, "token logprobs", sizeof(float), 1, 1, 1);
    op_buffer_add(c, OP_OUT, "top-k ids", sizeof(int32_t), 1, k, k);
    op_buffer_add(c, OP_OUT, "top-k logprobs", sizeof(float), 1, k, k);
}

// Besides uniform logits in [-12, 12], a row (stream 17) may be
//   peaked     one logit near 16, the rest in [-1, 1]: the top-k sit binades below the maximum,
//              where x - lse and (x - max) - (lse - max) round differently (near the maximum,
//              Sterbenz makes both exact)
//   near-tie   sampled, with TIED_IDS logits t * (40 - gumbel(id)): their keys x / t + gumbel
//              all round to within a few ulps of 40, so how x / t is rounded picks the token
enum row_kind { ROW_UNIFORM, ROW_PEAKED, ROW_NEAR_TIE };
#define TIED_IDS 64
#define CUDA_LOGPROBS_CHUNK 4096  // kernels/cuda/logprobs.cu's LOGPROBS_CHUNK

static enum row_kind row_kind_of(uint64_t seed) {
    op_rng k = op_rng_from(seed, 17);
    int d = op_rng_int(&k, 4);
    return d == 0 ? ROW_PEAKED : d == 1 ? ROW_NEAR_TIE : ROW_UNIFORM;
}

static void logprobs_row(const op_case *c, uint64_t seed, void *const *in) {
    op_rng r = op_rng_from(seed, 15);
    float *logits = in[LP_LOGITS];
    int V = c->s->logprobs.V;
    enum row_kind kind = row_kind_of(seed);
    for (int v = 0; v < V; v++)
        logits[v] = kind == ROW_PEAKED ? op_rng_float(&r, -1.0f, 1.0f) : op_rng_float(&r, -12.0f, 12.0f);
    float temperature = op_rng_int(&r, 2) ? 0.0f : op_rng_float(&r, 0.5f, 1.5f);
    uint64_t noise_seed = op_rng_u64(&r);
    int32_t position = op_rng_int(&r, 4096);
    if (kind == ROW_PEAKED) logits[op_rng_int(&r, V)] = op_rng_float(&r, 16.0f, 17.0f);
    if (kind == ROW_NEAR_TIE) {
        if (temperature == 0.0f) temperature = op_rng_float(&r, 0.5f, 1.5f);
        for (int v = 0; v < V && v < TIED_IDS; v++)
            logits[v] = temperature * (40.0f - invar_gumbel_noise(noise_seed, position, v));
    }
    *(float *)in[LP_TEMPERATURE] = temperature;
    *(uint64_t *)in[LP_NOISE_SEED] = noise_seed;
    *(int32_t *)in[LP_POSITION] = position;
    // Ties across chunk boundaries: the row's maximum, at the last id of the first chunk and
    // the first id of the second for every split into 2..64 chunks (the reference set's
    // chunking), at both sides of the 8-lane tail and of every CUDA chunk. Every uniform row
    // has them and is greedy (its token is the tie's lowest id, the rule a merge of chunks
    // can break); half the other rows have them (stream 16, so the other inputs stay as they were).
    op_rng t = op_rng_from(seed, 16);
    const bool tied = c->s->logprobs.ties && (op_rng_int(&t, 2) || kind == ROW_UNIFORM);
    if (tied && kind == ROW_UNIFORM) *(float *)in[LP_TEMPERATURE] = 0.0f;
    if (tied) {
        for (int chunks = 2; chunks <= 64; chunks *= 2) {
            int len = (V + chunks - 1) / chunks;
            if (len < V) logits[len - 1] = logits[len] = 12.5f;
        }
        if (V % 8 && V > 8) logits[V / 8 * 8 - 1] = logits[V / 8 * 8] = 12.5f;
        for (int b = CUDA_LOGPROBS_CHUNK; b < V; b += CUDA_LOGPROBS_CHUNK)  // the CUDA set's chunks
            logits[b - 1] = logits[b] = 12.5f;
    }
}

static logprobs_args logprobs_args_for(const op_case *c, int R, void *const *buf) {
    return (logprobs_args){
        .logits = buf[LP_LOGITS], .R = R, .V = c->s->logprobs.V, .k = c->s->logprobs.k,
        .temperature = buf[LP_TEMPERATURE], .noise_seed = buf[LP_NOISE_SEED],
        .position = buf[LP_POSITION], .token = buf[LP_TOKEN],
        .token_logprob = buf[LP_TOKEN_LOGPROB], .topk_ids = buf[LP_TOPK_IDS],
        .topk_logprobs = buf[LP_TOPK_LOGPROBS]};
}

static void logprobs_call(op_case *c, const op_batch *b) {
    logprobs_args a = logprobs_args_for(c, b->M, b->dev);
    c->ops->logprobs(c->ops, &a);
}

// rel-L2 over (token logprob, top-k logprobs); a wrong sampled or top-k id is an error of 1.
// A near-tie row's token is whichever key rounding put first: its logprob is checked, not
// its id.
static double logprobs_error(op_case *c, uint64_t seed, const void *row) {
    int V = c->s->logprobs.V, k = c->s->logprobs.k;
    void **in = op_row_alone(c, seed);
    double *lp = invar_malloc((size_t)V * sizeof(double), "logprobs oracle");
    int32_t token, ref_ids[64];
    logprobs_args a = logprobs_args_for(c, 1, in);
    f64_logprobs(&a, lp, &token, ref_ids);
    const int32_t *got_token = row, *ids = got_token + 2;
    const float *got = (const float *)row + 1;  // token logprob, then (after ids) top-k's
    bool near_tie = row_kind_of(seed) == ROW_NEAR_TIE;
    double err = *got_token != token && !near_tie ? 1.0 : 0.0, ref[65];
    float got_lp[65];
    got_lp[0] = got[0];
    ref[0] = lp[near_tie && *got_token >= 0 && *got_token < V ? *got_token : token];
    for (int j = 0; j < k; j++) {
        if (ids[j] != ref_ids[j]) err = 1.0;
        got_lp[1 + j] = ((const float *)(ids + k))[j];
        ref[1 + j] = lp[ref_ids[j]];
    }
    if (err == 0.0) err = f64_rel_l2_f32(got_lp, ref, k + 1);
    op_row_free(c, in);
    free(lp);
    return err;
}

const op_section logprobs_op = {logprobs_declare, logprobs_row, NULL, logprobs_call,
                                logprobs_error};
