// engine/weights_synthetic.c — synthetic weights from a seed (engine/weights.h). Element i of
// tensor `name` is a hash of (seed, XXH64(name), i): the same on every machine, whatever order
// tensors are read in, and nothing is stored.
#include "weights.h"

#include <math.h>                // sqrtf
#include <stdlib.h>              // free
#include <string.h>              // strstr, strlen
#include <xxhash.h>              // XXH64

#include "../kernels/bf16.h"     // float_to_bf16
#include "../common/check.h"    // invar_die, invar_calloc
#include "../common/hash.h"             // invar_mix64, invar_uniform

typedef struct {
    model_config cfg;
    uint64_t seed;
} synthetic_ctx;

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

// Values a trained model would roughly have: norms near 1, biases small, projections scaled by
// 1/sqrt(fan-in) so activations keep unit scale through the layers. value = offset + scale * u.
static void tensor_scale(const char *name, const int64_t *shape, int ndim, float *scale,
                         float *offset) {
    *offset = 0.0f;
    if (ends_with(name, "norm.weight")) {
        *scale = 0.1f;
        *offset = 1.0f;
    } else if (ends_with(name, "e_score_correction_bias")) {
        *scale = 0.05f;
    } else if (strstr(name, "embed_tokens")) {
        *scale = 1.0f;
    } else {
        *scale = sqrtf(3.0f / (float)shape[ndim - 1]);
    }
}

static inline float element(uint64_t name_hash, float scale, float offset, int64_t i) {
    float u = 2.0f * invar_uniform(invar_mix64(name_hash ^ invar_mix64((uint64_t)i))) - 1.0f;
    return offset + scale * u;
}

float weights_synthetic_value(uint64_t seed, const char *name, int64_t i, const int64_t *shape,
                              int ndim) {
    float scale, offset;
    tensor_scale(name, shape, ndim, &scale, &offset);
    return element(XXH64(name, strlen(name), seed), scale, offset, i);
}

static int64_t element_count(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static bool synthetic_has(weight_source *s, const char *name) {
    const synthetic_ctx *c = s->ctx;
    if (strcmp(name, "lm_head.weight") == 0) return !c->cfg.tie_word_embeddings;
    if (ends_with(name, "e_score_correction_bias")) return c->cfg.topk_method == MOE_TOPK_NOAUX_TC;
    return true;
}

static void synthetic_read_f32(weight_source *s, const char *name, const int64_t *shape, int ndim,
                               float *dst) {
    const synthetic_ctx *c = s->ctx;
    float scale, offset;
    tensor_scale(name, shape, ndim, &scale, &offset);
    uint64_t name_hash = XXH64(name, strlen(name), c->seed);
    int64_t n = element_count(shape, ndim);
    for (int64_t i = 0; i < n; i++) dst[i] = element(name_hash, scale, offset, i);
}

static void synthetic_read_bf16(weight_source *s, const char *name, const int64_t *shape, int ndim,
                                bf16 *dst) {
    const synthetic_ctx *c = s->ctx;
    float scale, offset;
    tensor_scale(name, shape, ndim, &scale, &offset);
    uint64_t name_hash = XXH64(name, strlen(name), c->seed);
    int64_t n = element_count(shape, ndim);
    for (int64_t i = 0; i < n; i++) dst[i] = float_to_bf16(element(name_hash, scale, offset, i));
}

static void synthetic_destroy(weight_source *s) {
    free(s->ctx);
    free(s);
}

weight_source *weights_synthetic(const model_config *cfg, uint64_t seed) {
    synthetic_ctx *c = invar_calloc(1, sizeof *c, "synthetic weights");
    c->cfg = *cfg;
    c->seed = seed;
    weight_source *s = invar_calloc(1, sizeof *s, "synthetic weights");
    s->ctx = c;
    s->has = synthetic_has;
    s->read_bf16 = synthetic_read_bf16;
    s->read_f32 = synthetic_read_f32;
    s->destroy = synthetic_destroy;
    return s;
}
