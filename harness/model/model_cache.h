// harness/model/model_cache.h — the models of one run, each opened once. A case has one seed, so a
// model's weights depend on its name alone: every config of a model reads them from one
// source, and a checkpoint is mapped and validated once per run.
#ifndef INVAR_HARNESS_MODEL_CACHE_H
#define INVAR_HARNESS_MODEL_CACHE_H

#include "../../engine/model_config.h" // model_config
#include "../../engine/weights.h"     // weight_source
#include "../run/case_file.h"         // case_file
#include "../run/matrix.h"            // MATRIX_MAX_VALUES

typedef struct {
    const char *name;
    model_config cfg;
    weight_source *w;
} loaded_model;

typedef struct {
    loaded_model m[MATRIX_MAX_VALUES];  // a case has at most that many models
    int n;
} model_cache;

// The model `name` of case c, opened on first use. A model that cannot be opened exits 2,
// naming the case and the model.
const loaded_model *model_cache_get(model_cache *mc, const case_file *c, const char *name);

// Closes every model opened.
void model_cache_free(model_cache *mc);

#endif
