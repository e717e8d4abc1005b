// harness/model/model_cache.c — models opened once per run (harness/model/model_cache.h).
#include "model_cache.h"

#include <string.h>             // strcmp

#include "../../common/check.h" // invar_die

const loaded_model *model_cache_get(model_cache *mc, const case_file *c, const char *name) {
    for (int i = 0; i < mc->n; i++)
        if (strcmp(mc->m[i].name, name) == 0) return &mc->m[i];
    if (mc->n == MATRIX_MAX_VALUES)
        invar_die(INVAR_EXIT_INPUT, "%s: more than %d models", c->path, MATRIX_MAX_VALUES);
    loaded_model *m = &mc->m[mc->n];
    char err[1024];
    if (!case_model_open(name, c->seed, &m->cfg, &m->w, err, sizeof err))
        invar_die(INVAR_EXIT_INPUT, "%s: model '%s': %s", c->path, name, err);
    m->name = name;
    mc->n++;
    return m;
}

void model_cache_free(model_cache *mc) {
    for (int i = 0; i < mc->n; i++) mc->m[i].w->destroy(mc->m[i].w);
    mc->n = 0;
}
