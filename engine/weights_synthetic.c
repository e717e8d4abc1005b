// engine/weights_synthetic.c — synthetic weights from a seed (engine/weights.h). Element i of
// tensor `name` is a hash of (seed, XXH64(name), i): the same on every machine, whatever order
// tensors are read in, and nothing is stored.
#include "weights.h"

#include <math.h>                // sqrtf
#include <pthread.h>             // pthread_mutex_*
#include <stdlib.h>              // free
#include <string.h>              // strstr, strlen, strerror
#include <xxhash.h>              // XXH64

#include "../kernels/bf16.h"     // float_to_bf16
#include "../common/check.h"    // invar_die, invar_calloc
#include "../common/hash.h"             // invar_mix64, invar_uniform
#include "../common/thread_pool.h"      // thread_pool_create, thread_pool_for

typedef struct {
    model_config cfg;
    uint64_t seed;
    pthread_mutex_t pool_lock;   // guards pool
    thread_pool *pool;           // made on the first large tensor
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

// Tensors of at least this many elements are filled by every core: DeepSeek-V3's experts are
// 14.7M elements each, 1,536 of them in two MoE layers, a couple of minutes on one core.
enum { PARALLEL_ELEMENTS = 1 << 20 };

typedef struct {
    uint64_t name_hash;
    float scale, offset;
    bf16 *bf16_out;   // one of the two
    float *f32_out;
} fill_job;

static void fill_range(void *arg, long begin, long end) {
    const fill_job *j = arg;
    for (long i = begin; i < end; i++) {
        float v = element(j->name_hash, j->scale, j->offset, i);
        if (j->bf16_out) j->bf16_out[i] = float_to_bf16(v);
        else j->f32_out[i] = v;
    }
}

// Element i is a function of i alone, so any split across threads gives the same tensor. One
// pool a source, its loops one at a time (tensor-parallel ranks may load concurrently).
static void fill(weight_source *s, const char *name, const int64_t *shape, int ndim, bf16 *bf16_out,
                 float *f32_out) {
    synthetic_ctx *c = s->ctx;
    fill_job j = {.name_hash = XXH64(name, strlen(name), c->seed), .bf16_out = bf16_out,
                  .f32_out = f32_out};
    tensor_scale(name, shape, ndim, &j.scale, &j.offset);
    int64_t n = element_count(shape, ndim);
    if (n < PARALLEL_ELEMENTS) {
        fill_range(&j, 0, (long)n);
        return;
    }
    int rc = pthread_mutex_lock(&c->pool_lock);
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "synthetic weights: pthread_mutex_lock failed: %s", strerror(rc));
    if (!c->pool) c->pool = thread_pool_create(0);
    thread_pool_for(c->pool, (long)n, fill_range, &j);
    rc = pthread_mutex_unlock(&c->pool_lock);
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "synthetic weights: pthread_mutex_unlock failed: %s", strerror(rc));
}

static void synthetic_read_f32(weight_source *s, const char *name, const int64_t *shape, int ndim,
                               float *dst) {
    fill(s, name, shape, ndim, NULL, dst);
}

static void synthetic_read_bf16(weight_source *s, const char *name, const int64_t *shape, int ndim,
                                bf16 *dst) {
    fill(s, name, shape, ndim, dst, NULL);
}

static void synthetic_destroy(weight_source *s) {
    synthetic_ctx *c = s->ctx;
    if (c->pool) thread_pool_destroy(c->pool);
    pthread_mutex_destroy(&c->pool_lock);
    free(s->ctx);
    free(s);
}

weight_source *weights_synthetic(const model_config *cfg, uint64_t seed) {
    synthetic_ctx *c = invar_calloc(1, sizeof *c, "synthetic weights");
    c->cfg = *cfg;
    c->seed = seed;
    int rc = pthread_mutex_init(&c->pool_lock, NULL);
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "synthetic weights: pthread_mutex_init failed: %s", strerror(rc));
    weight_source *s = invar_calloc(1, sizeof *s, "synthetic weights");
    s->ctx = c;
    s->has = synthetic_has;
    s->read_bf16 = synthetic_read_bf16;
    s->read_f32 = synthetic_read_f32;
    s->destroy = synthetic_destroy;
    return s;
}
