// engine/config_json.h — Hugging Face config.json <-> model_config, for DeepSeek-V2
// (model_type deepseek_v2) and DeepSeek-V3 (deepseek_v3) checkpoints.
//
// Reading follows what transformers 5 computes for the file: fields a model class ignores are
// checked for type but take that class's behaviour (e.g. DeepseekV3 always routes with sigmoid
// + noaux_tc), so the engine runs what DeepseekV2/V3ForCausalLM run. Both RoPE spellings are
// read: `rope_scaling` (+ top-level `rope_theta`, hub checkpoints) and `rope_parameters`
// (transformers 5, `rope_type` and possibly `rope_theta` inside).
#ifndef INVAR_ENGINE_CONFIG_JSON_H
#define INVAR_ENGINE_CONFIG_JSON_H

#include <stdbool.h>       // bool
#include <stddef.h>        // size_t
#include "model_config.h"  // model_config

// What config.json says beyond model_config.
typedef struct {
    char model_type[32];         // "deepseek_v2" | "deepseek_v3"
    bool fp8;                    // quantization_config: FP8 E4M3 block-quantized weights
    int fp8_block_n, fp8_block_k;// its weight_block_size (DeepSeek-V3: 128 x 128)
} config_json_info;

// Parses config.json text; `path` only names the file in messages. On a missing, mistyped or
// unsupported field writes "<path>: field '<name>' ..." into err and returns false; the result
// has passed model_config_validate. `info` may be NULL.
bool config_json_parse(const char *text, size_t len, const char *path, model_config *out,
                       config_json_info *info, char *err, int err_len);

// Reads and parses the file at `path`; out->name is the name of the folder holding it.
bool config_json_load(const char *path, model_config *out, config_json_info *info, char *err,
                      int err_len);

// config.json text (malloc'd: free it with free()) that transformers 5 and config_json_parse
// both read back as `c`: deepseek_v3 for sigmoid + noaux_tc routing, deepseek_v2 for softmax.
// NULL, with a message in err, when transformers cannot express `c` (e.g. softmax + noaux_tc).
char *config_json_format(const model_config *c, char *err, int err_len);

#endif
