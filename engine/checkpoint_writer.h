// engine/checkpoint_writer.h — writes a Hugging Face checkpoint directory from any
// weight_source (e.g. synthetic weights), in the layout engine/checkpoint.h reads and
// transformers loads: config.json plus safetensors, one file or shards with an index.
#ifndef INVAR_ENGINE_CHECKPOINT_WRITER_H
#define INVAR_ENGINE_CHECKPOINT_WRITER_H

#include <stdbool.h>       // bool
#include "model_config.h"  // model_config
#include "weights.h"       // weight_source

// Writes into `dir` (created if missing): config.json, and model.safetensors when shards == 0,
// or model-0000i-of-0000N.safetensors (i = 1..N, N = shards) with model.safetensors.index.json.
// Tensors are those of checkpoint_tensors(cfg), read from `src` one at a time (bf16; fp32 for
// e_score_correction_bias). On failure writes a message naming the file into err and returns
// false.
bool checkpoint_write(const char *dir, const model_config *cfg, weight_source *src, int shards,
                      char *err, int err_len);

#endif
