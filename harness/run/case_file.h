// harness/run/case_file.h — a case file: an INI file naming a model, the prompts to generate and the
// config matrix to run them under.
//
//   [case]     name, model (a named config of engine/model_config.h, or a checkpoint directory
//              holding config.json; or [matrix] models), seed
//   [prompts]  count, min_len, max_len, max_new_tokens, temperature, top_k,
//              shared_prefix_groups, shared_prefix_len, warm_cache_repeats (harness/run/prompts.h)
//   [matrix]   batch_sizes (compared inside every config), and one list per axis of
//              harness/run/matrix.h (devices, kernel_sets, models, attention_backends,
//              prefix_caching, force_prefix_caching, max_num_batched_tokens, chunked_prefill,
//              arrivals, threads, tensor_parallel, block_sizes, kv_cache_blocks,
//              tp_size_invariance, cuda_graphs); the cross product of the axes gives the
//              configs; cuda_graph_buckets, the batch sizes cuda_graphs = on pads decode steps to.
//
// Every error names file:line and the key: an unknown section or key, a key given twice, a bad
// number or list, a missing required key, and settings that cannot run together.
#ifndef INVAR_HARNESS_CASE_FILE_H
#define INVAR_HARNESS_CASE_FILE_H

#include <limits.h>                 // PATH_MAX
#include <stdbool.h>                // bool
#include <stdint.h>                 // uint64_t

#include "../../engine/model_config.h" // model_config
#include "../../engine/weights.h"   // weight_source
#include "matrix.h"                 // matrix_list, MATRIX_MAX_AXES, MATRIX_MAX_VALUES
#include "prompts.h"                // prompt_spec

#define CASE_MAX_KEYS 64  // distinct keys remembered for line numbers

typedef struct {
    char path[PATH_MAX];              // the file, for messages
    // [case]
    char name[64];
    char model[256];                  // [case] model, or the [matrix] models list, for messages
    uint64_t seed;
    // [prompts]
    int count;
    int min_len, max_len;             // prompt lengths are drawn in [min_len, max_len]
    int max_new_tokens;
    float temperature;                // 0: greedy
    int top_k;                        // top-k logprobs compared per step; 0: only the chosen
                                      // token and its logprob
    int shared_prefix_groups;         // 0: no shared prefixes
    int shared_prefix_len;
    int warm_cache_repeats;           // copies of prompt 0 arriving after it finished
    // [matrix]
    int batch_sizes[MATRIX_MAX_VALUES];
    int n_batch_sizes;
    // The batch sizes a cuda_graphs = on config pads its decode steps to (engine_limits'
    // graph_buckets), ascending; the default is case_graph_buckets'.
    int graph_buckets[MATRIX_MAX_VALUES];
    int n_graph_buckets;
    matrix_list axes[MATRIX_MAX_AXES]; // one per matrix_axis_at(i)
    // Where each key was set, for messages about settings that conflict.
    struct {
        char section[16];
        char key[48];
        int line;
    } seen[CASE_MAX_KEYS];
    int n_seen;
} case_file;

// Parses and checks `path`. False with a message "path:line: ..." in err on any problem
// (a missing file is "path: cannot open: ...", a path of PATH_MAX characters or more
// "path: path too long ...").
bool case_file_load(const char *path, case_file *out, char *err, int err_len);

// Line at which [section] key was set; 0 when it took its default.
int case_file_line(const case_file *c, const char *section, const char *key);

// Largest batch size, largest token budget over the matrix.
int case_max_batch_size(const case_file *c);
int case_max_budget(const case_file *c);

// Requests per run: the distinct prompts and the warm copies of prompt 0.
int case_request_count(const case_file *c);
// Longest request: max_len + max_new_tokens.
int case_max_model_len(const case_file *c);
prompt_spec case_prompt_spec(const case_file *c);

// The default buckets (vLLM's capture sizes up to 512, thinned to 15; what a case without
// cuda_graph_buckets and invar serve --cuda-graphs take) into out[0 .. max): their count.
int case_graph_buckets(int *out, int max);

// Opens one model of a case: a named config (engine/model_config.h; synthetic weights from
// `seed`), else a checkpoint directory (engine/checkpoint.h: config.json and safetensors, the
// seed unused). With w NULL only the config is read (a checkpoint is still fully validated).
// False with a message naming the file and field (checkpoint_open's) or the unknown name.
bool case_model_open(const char *model, uint64_t seed, model_config *cfg, weight_source **w,
                     char *err, int err_len);

// `invar run --model NAME|DIR`: replaces the case's models with this one and checks it as the
// case's own model is checked. False (the case unchanged) with the reason in err.
bool case_file_set_model(case_file *c, const char *model, char *err, int err_len);
// Replaces the case's kernel_sets with one set (`invar run --kernel-set`): a registered name or
// plugin:PATH. False with a message when the set is unknown or its plugin cannot be loaded.
bool case_file_set_kernel_set(case_file *c, const char *set, char *err, int err_len);
// `invar run --cuda-graphs on|off`: the case's cuda_graphs axis replaced by that one value
// (every existing case can be run with graphs on).
bool case_file_set_cuda_graphs(case_file *c, const char *on_off, char *err, int err_len);

#endif
