// harness/run/matrix.h — the config matrix of a case: every [matrix] key is a list (an axis), and
// the cross product of the axes gives the configs. Adding an axis is one entry in the table in
// matrix.c and one field in run_config.
#ifndef INVAR_HARNESS_MATRIX_H
#define INVAR_HARNESS_MATRIX_H

#include <stdbool.h>  // bool

#include "arrivals.h" // arrival_pattern

#define MATRIX_MAX_VALUES 16  // values in one list key
#define MATRIX_VALUE_LEN 32   // longest value, with its terminator
#define MATRIX_MODEL_LEN 256  // longest models or kernel_sets value (a checkpoint directory, a
                              // plugin:PATH set), with its terminator
#define MATRIX_MAX_AXES 16

// One list as written in the case file, each value already checked by its axis.
typedef struct {
    int n;
    char value[MATRIX_MAX_VALUES][MATRIX_MODEL_LEN];  // MATRIX_VALUE_LEN but for paths
    int line;                 // case-file line of the key; 0 when the default was taken
} matrix_list;

// One point of the cross product, with the settings as requested. Resolution
// (harness/run/resolve.h) turns it into the settings that run: device "auto" and backend "auto"
// picked, prefix caching and chunked prefill switched off where the backend needs it.
typedef struct {
    char name[512];                    // stable and unique within the case: "cpu/invariant/..."
    char device[MATRIX_VALUE_LEN];     // cpu | cuda | auto
    char kernel_set[MATRIX_MODEL_LEN]; // a set name of sets/registry.h, or plugin:PATH
    char model[MATRIX_MODEL_LEN];      // a named config of engine/model_config.h, or a checkpoint
                                       // directory (harness/run/case_file.h: case_model_open)
    char attention_backend[MATRIX_VALUE_LEN]; // a name of engine/attention_backend.h, or auto
    bool prefix_caching;
    bool force_prefix_caching;         // keep prefix caching on whatever the backend declares
    int max_num_batched_tokens;
    bool chunked_prefill;
    arrival_pattern arrivals;
    int threads;                       // CPU worker threads; 0: one per core
    int tensor_parallel;               // ranks the model is split across (engine/tp_engine.h)
    int block_size;                    // tokens per paged KV block
    int kv_cache_blocks;               // KV cache size in blocks; 0: every request at once
    bool tp_size_invariance;           // row-parallel sums over 8 fixed slices (engine_limits)
    bool cuda_graphs;                  // decode steps padded to the case's buckets, replayed
                                       // from CUDA graphs where the set has them (engine_limits)
    int axis_index[MATRIX_MAX_AXES];   // which value of each axis this config took
} run_config;

typedef struct {
    const char *key;            // [matrix] key
    const char *label;          // its name in config names ("model=small"); NULL: the key
    const char *allowed;        // the allowed values, for messages; NULL: check names them
    const char *default_value;  // NULL: the key is required
    // Checks one value; on a problem writes why.
    bool (*check)(const char *value, char *why, int why_len);
    // Stores a checked value into the config.
    void (*apply)(run_config *c, const char *value);
} matrix_axis;

// The axes, in expansion order (the first varies slowest).
int matrix_axis_count(void);
const matrix_axis *matrix_axis_at(int i);
int matrix_axis_find(const char *key);  // index, or -1

// Splits "a, b ,c" into trimmed items. False (with why) for an empty item, too many items,
// an item too long (MATRIX_VALUE_LEN with its terminator), or an item given twice.
bool matrix_split_list(const char *text, matrix_list *out, char *why, int why_len);

// Splits and checks one axis's list.
bool matrix_parse_axis(int axis, const char *text, matrix_list *out, char *why, int why_len);

// Number of configs of the cross product of lists[0 .. matrix_axis_count()).
long matrix_count(const matrix_list *lists);

// Fills out[0 .. matrix_count) (the caller sizes it); returns the count.
int matrix_expand(const matrix_list *lists, run_config *out);

#endif
