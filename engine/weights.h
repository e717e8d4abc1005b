// engine/weights.h — where the engine's weights come from: a source of named tensors with
// Hugging Face checkpoint names and shapes (synthetic from a seed, or a safetensors checkpoint).
#ifndef INVAR_ENGINE_WEIGHTS_H
#define INVAR_ENGINE_WEIGHTS_H

#include <stdbool.h>          // bool
#include <stdint.h>           // int64_t, uint64_t
#include "../kernels/ops.h"   // bf16
#include "model_config.h"     // model_config

typedef struct weight_source weight_source;
struct weight_source {
    void *ctx;
    // Whether tensor `name` exists.
    bool (*has)(weight_source *s, const char *name);
    // Fills dst with tensor `name` converted to bf16. The tensor must have exactly `shape`;
    // a missing tensor or another shape exits 2 naming the file and the tensor.
    void (*read_bf16)(weight_source *s, const char *name, const int64_t *shape, int ndim, bf16 *dst);
    // The same, converted to fp32 (e_score_correction_bias is fp32 in checkpoints).
    void (*read_f32)(weight_source *s, const char *name, const int64_t *shape, int ndim, float *dst);
    void (*destroy)(weight_source *s);
};

// Synthetic weights: each element is a counter-based hash of (seed, tensor name, index), so
// every machine and load order sees the same values. Shapes follow `cfg`.
weight_source *weights_synthetic(const model_config *cfg, uint64_t seed);

// Element i of synthetic tensor `name` as a float before bf16 rounding (for writers and tests).
float weights_synthetic_value(uint64_t seed, const char *name, int64_t i, const int64_t *shape,
                              int ndim);

#endif
