// engine/checkpoint.h — a Hugging Face checkpoint directory as a weight_source: config.json,
// and model.safetensors or the shards listed in model.safetensors.index.json, memory-mapped.
// Also the list of tensors (names, shapes) a DeepSeek config needs, shared with the writer.
#ifndef INVAR_ENGINE_CHECKPOINT_H
#define INVAR_ENGINE_CHECKPOINT_H

#include <stdbool.h>       // bool
#include <stdint.h>        // int64_t
#include "model_config.h"  // model_config
#include "weights.h"       // weight_source

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];
    bool f32;              // kept in fp32 (e_score_correction_bias): read with read_f32
} checkpoint_tensor;

// The tensors a model with config `c` reads, with Hugging Face DeepSeek names and shapes, in
// load order (embedding, layers, final norm, lm_head unless tied). Returns how many; fills
// out[0, min(count, cap)) when out is non-NULL. Only for configs whose count fits an int: a
// named config, or one checkpoint_open accepted (never more tensors than its files hold).
int checkpoint_tensors(const model_config *c, checkpoint_tensor *out, int cap);

// How many tensors checkpoint_tensors lists for `c`, computed without listing them, in checked
// 64-bit arithmetic: -1 when the count does not fit int64_t. Cheap for any config, so a config
// can be held against a checkpoint's headers before anything is built from it.
int64_t checkpoint_tensor_count(const model_config *c);

// Opens checkpoint directory `dir`: reads config.json into *cfg, maps the safetensors files and
// checks that every tensor the config needs is there with its shape and a float dtype (BF16,
// F16, F32, or F8_E4M3 with a valid `<name>_scale_inv`). On failure writes a message naming the
// file and the field or tensor into err and returns false.
//
// The source converts each tensor straight from the mapping into the caller's buffer and then
// drops its pages, so a checkpoint of tens of GB is read once and never held twice. When
// stderr is a terminal it shows progress. read_bf16/read_f32 exit 2 naming the file and the
// tensor when asked for a tensor that is missing or has another shape.
bool checkpoint_open(const char *dir, model_config *cfg, weight_source **out, char *err, int err_len);

#endif
