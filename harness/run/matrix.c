// harness/run/matrix.c — the axes of the config matrix and their cross product (harness/run/matrix.h).
#include "matrix.h"

#include <errno.h>                       // errno, ERANGE
#include <stdio.h>                       // snprintf
#include <stdlib.h>                      // strtol
#include <string.h>                      // strcmp, strlen, memcpy
#include <sys/stat.h>                    // stat, S_ISDIR

#include "../../engine/attention_backend.h" // attention_backend_by_name, attention_backends
#include "../../engine/model_config.h"   // model_config_by_name
#include "../../sets/registry.h"      // kernel_set_lookup

// ---------------------------------------------------------------------------------------------
// Value checks and setters, one pair per axis
// ---------------------------------------------------------------------------------------------

static bool parse_int(const char *text, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno == ERANGE || end == text || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static void copy_value(char *dst, const char *value) {
    snprintf(dst, MATRIX_VALUE_LEN, "%s", value);
}

static bool check_device(const char *v, char *why, int why_len) {
    if (strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0 || strcmp(v, "auto") == 0) return true;
    snprintf(why, (size_t)why_len, "unknown device '%s'", v);
    return false;
}
static void apply_device(run_config *c, const char *v) { copy_value(c->device, v); }

// Any set name the registry knows, on any device (a cuda-only set is still a valid name on a
// CPU-only build; the runner skips its configs there).
static bool check_kernel_set(const char *v, char *why, int why_len) {
    return kernel_set_lookup(v, NULL, why, why_len) != NULL;
}
static void apply_kernel_set(run_config *c, const char *v) {
    snprintf(c->kernel_set, sizeof c->kernel_set, "%s", v);
}

static bool check_budget(const char *v, char *why, int why_len) {
    long n;
    if (parse_int(v, 1, 1 << 20, &n)) return true;
    snprintf(why, (size_t)why_len, "'%s' is not a token budget in [1, %d]", v, 1 << 20);
    return false;
}
static void apply_budget(run_config *c, const char *v) {
    c->max_num_batched_tokens = (int)strtol(v, NULL, 10);
}

static bool check_on_off(const char *v, char *why, int why_len) {
    if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0) return true;
    snprintf(why, (size_t)why_len, "'%s' is neither on nor off", v);
    return false;
}
static void apply_chunked_prefill(run_config *c, const char *v) {
    c->chunked_prefill = strcmp(v, "on") == 0;
}

// A named config, or a directory: whether that directory is a valid checkpoint is checked
// when the case is loaded (harness/run/case_file.c), where the message can name its file.
static bool check_model(const char *v, char *why, int why_len) {
    model_config cfg;
    struct stat st;
    if (model_config_by_name(v, &cfg) || (stat(v, &st) == 0 && S_ISDIR(st.st_mode))) return true;
    snprintf(why, (size_t)why_len, "unknown model '%s' (not a named config, and no such "
             "directory)", v);
    return false;
}
static void apply_model(run_config *c, const char *v) { snprintf(c->model, sizeof c->model, "%s", v); }

static bool check_backend(const char *v, char *why, int why_len) {
    if (strcmp(v, "auto") == 0 || attention_backend_by_name(v)) return true;
    int len = snprintf(why, (size_t)why_len, "unknown attention backend '%s' (allowed:", v);
    for (const attention_backend *b = attention_backends(); b->name && len < why_len; b++)
        len += snprintf(why + len, (size_t)(why_len - len), " %s,", b->name);
    if (len < why_len) snprintf(why + len, (size_t)(why_len - len), " auto)");
    return false;
}
static void apply_backend(run_config *c, const char *v) { copy_value(c->attention_backend, v); }

static void apply_prefix_caching(run_config *c, const char *v) {
    c->prefix_caching = strcmp(v, "on") == 0;
}

static bool check_true_false(const char *v, char *why, int why_len) {
    if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0) return true;
    snprintf(why, (size_t)why_len, "'%s' is neither true nor false", v);
    return false;
}
static void apply_force_prefix_caching(run_config *c, const char *v) {
    c->force_prefix_caching = strcmp(v, "true") == 0;
}

static bool check_arrivals(const char *v, char *why, int why_len) {
    arrival_pattern p;
    if (arrival_pattern_by_name(v, &p)) return true;
    snprintf(why, (size_t)why_len, "unknown arrival pattern '%s'", v);
    return false;
}
static void apply_arrivals(run_config *c, const char *v) {
    arrival_pattern_by_name(v, &c->arrivals);
}

static bool check_threads(const char *v, char *why, int why_len) {
    long n;
    if (parse_int(v, 0, 1024, &n)) return true;
    snprintf(why, (size_t)why_len, "'%s' is not a thread count in [0, 1024]", v);
    return false;
}
static void apply_threads(run_config *c, const char *v) { c->threads = (int)strtol(v, NULL, 10); }

// On the CPU a rank is a thread: 64 is far past what a test model splits into.
static bool check_tensor_parallel(const char *v, char *why, int why_len) {
    long n;
    if (parse_int(v, 1, 64, &n)) return true;
    snprintf(why, (size_t)why_len, "'%s' is not a tensor-parallel degree in [1, 64]", v);
    return false;
}
static void apply_tensor_parallel(run_config *c, const char *v) {
    c->tensor_parallel = (int)strtol(v, NULL, 10);
}

// Any size the paged cache takes: 1 and sizes not a multiple of 4 reach the kernels' gathers
// across block boundaries, which the engine's default of 64 never does.
static bool check_block_size(const char *v, char *why, int why_len) {
    long n;
    if (parse_int(v, 1, 4096, &n)) return true;
    snprintf(why, (size_t)why_len, "'%s' is not a KV block size in [1, 4096] tokens", v);
    return false;
}
static void apply_block_size(run_config *c, const char *v) {
    c->block_size = (int)strtol(v, NULL, 10);
}

// 0 sizes the cache for every request at once; a smaller count makes a batched run evict
// (whether it holds one request is checked with the prompts, harness/run/case_file.c).
static bool check_kv_cache_blocks(const char *v, char *why, int why_len) {
    long n;
    if (parse_int(v, 0, 1 << 24, &n)) return true;
    snprintf(why, (size_t)why_len, "'%s' is not a KV cache size in [0, %d] blocks", v, 1 << 24);
    return false;
}
static void apply_tp_size_invariance(run_config *c, const char *v) {
    c->tp_size_invariance = strcmp(v, "on") == 0;
}

static void apply_cuda_graphs(run_config *c, const char *v) { c->cuda_graphs = strcmp(v, "on") == 0; }

static void apply_kv_cache_blocks(run_config *c, const char *v) {
    c->kv_cache_blocks = (int)strtol(v, NULL, 10);
}

// ---------------------------------------------------------------------------------------------
// The axis table
// ---------------------------------------------------------------------------------------------

// device and kernel_sets come first: every config name starts with them. The models default
// is NULL: case_file.c fills the axis from [case] model when the list is not given.
static const matrix_axis axes[] = {
    {"devices", NULL, "cpu, cuda, auto", "cpu", check_device, apply_device},
    {"kernel_sets", NULL, "a registered kernel set (invariant, reference, adversarial) or plugin:PATH", NULL,
     check_kernel_set, apply_kernel_set},
    {"models", "model", "named model configs (tiny, tiny-v2, tiny-tp, tiny-reach, tiny-long, small, v2-lite, v3) or checkpoint "
     "directories", NULL, check_model, apply_model},
    // The allowed names are the registry's: check_backend lists them.
    {"attention_backends", "backend", NULL, "auto",
     check_backend, apply_backend},
    {"prefix_caching", NULL, "on, off", "on", check_on_off, apply_prefix_caching},
    {"force_prefix_caching", NULL, "true, false", "false", check_true_false,
     apply_force_prefix_caching},
    {"max_num_batched_tokens", NULL, "positive integers", "2048", check_budget, apply_budget},
    {"chunked_prefill", NULL, "on, off", "on", check_on_off, apply_chunked_prefill},
    {"arrivals", NULL, "at_once, staggered, bursty", "at_once", check_arrivals, apply_arrivals},
    {"threads", NULL, "integers >= 0 (0: one per core)", "0", check_threads, apply_threads},
    {"tensor_parallel", NULL, "integers in [1, 64] (ranks)", "1", check_tensor_parallel,
     apply_tensor_parallel},
    {"block_sizes", "block_size", "integers in [1, 4096] (tokens per KV block)", "64",
     check_block_size, apply_block_size},
    {"kv_cache_blocks", NULL, "integers >= 0 (0: every request at once)", "0",
     check_kv_cache_blocks, apply_kv_cache_blocks},
    {"tp_size_invariance", NULL, "on, off", "off", check_on_off, apply_tp_size_invariance},
    {"cuda_graphs", NULL, "on, off", "off", check_on_off, apply_cuda_graphs},
};
#define N_AXES ((int)(sizeof axes / sizeof axes[0]))
_Static_assert(N_AXES <= MATRIX_MAX_AXES, "raise MATRIX_MAX_AXES");

int matrix_axis_count(void) { return N_AXES; }

const matrix_axis *matrix_axis_at(int i) { return i >= 0 && i < N_AXES ? &axes[i] : NULL; }

int matrix_axis_find(const char *key) {
    for (int i = 0; i < N_AXES; i++)
        if (strcmp(axes[i].key, key) == 0) return i;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Lists
// ---------------------------------------------------------------------------------------------

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Items of at most max_len - 1 characters.
static bool split_list(const char *text, int max_len, matrix_list *out, char *why, int why_len) {
    out->n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *b = p, *e = end;
        while (b < e && is_space(*b)) b++;
        while (e > b && is_space(e[-1])) e--;
        size_t len = (size_t)(e - b);
        if (len == 0) {
            snprintf(why, (size_t)why_len, "empty item in list '%s'", text);
            return false;
        }
        if (out->n == MATRIX_MAX_VALUES) {
            snprintf(why, (size_t)why_len, "more than %d items in list '%s'", MATRIX_MAX_VALUES,
                     text);
            return false;
        }
        if (len >= (size_t)max_len) {
            snprintf(why, (size_t)why_len, "item '%.*s' longer than %d characters", (int)len, b,
                     max_len - 1);
            return false;
        }
        memcpy(out->value[out->n], b, len);
        out->value[out->n][len] = '\0';
        for (int i = 0; i < out->n; i++) {
            if (strcmp(out->value[i], out->value[out->n]) == 0) {
                snprintf(why, (size_t)why_len, "'%s' given twice in list '%s'", out->value[i],
                         text);
                return false;
            }
        }
        out->n++;
        if (!comma) return true;
        p = comma + 1;
    }
}

bool matrix_split_list(const char *text, matrix_list *out, char *why, int why_len) {
    return split_list(text, MATRIX_VALUE_LEN, out, why, why_len);
}

bool matrix_parse_axis(int axis, const char *text, matrix_list *out, char *why, int why_len) {
    const matrix_axis *a = matrix_axis_at(axis);
    if (!a) {
        snprintf(why, (size_t)why_len, "no matrix axis %d", axis);
        return false;
    }
    // A model may be a checkpoint directory's path; every other value is a short name.
    bool paths = strcmp(a->key, "models") == 0 || strcmp(a->key, "kernel_sets") == 0;
    int max_len = paths ? MATRIX_MODEL_LEN : MATRIX_VALUE_LEN;
    if (!split_list(text, max_len, out, why, why_len)) return false;
    for (int i = 0; i < out->n; i++) {
        char reason[1024];  // a plugin's refusal names its path
        if (!a->check(out->value[i], reason, sizeof reason)) {
            if (a->allowed) snprintf(why, (size_t)why_len, "%s (allowed: %s)", reason, a->allowed);
            else snprintf(why, (size_t)why_len, "%s", reason);
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Cross product
// ---------------------------------------------------------------------------------------------

long matrix_count(const matrix_list *lists) {
    long n = 1;
    for (int i = 0; i < N_AXES; i++) n *= lists[i].n;
    return n;
}

// "cpu/invariant", then key=value for every other axis that takes more than one value.
static void name_config(run_config *c, const matrix_list *lists) {
    int len = snprintf(c->name, sizeof c->name, "%s/%s", c->device, c->kernel_set);
    for (int a = 2; a < N_AXES; a++) {
        if (lists[a].n < 2 || len >= (int)sizeof c->name) continue;
        const char *label = axes[a].label ? axes[a].label : axes[a].key;
        len += snprintf(c->name + len, sizeof c->name - (size_t)len, "/%s=%s", label,
                        lists[a].value[c->axis_index[a]]);
    }
}

int matrix_expand(const matrix_list *lists, run_config *out) {
    long total = matrix_count(lists);
    int index[MATRIX_MAX_AXES] = {0};
    for (long k = 0; k < total; k++) {
        run_config *c = &out[k];
        memset(c, 0, sizeof *c);
        for (int a = 0; a < N_AXES; a++) {
            c->axis_index[a] = index[a];
            axes[a].apply(c, lists[a].value[index[a]]);
        }
        name_config(c, lists);
        // Odometer: the last axis turns fastest.
        for (int a = N_AXES - 1; a >= 0; a--) {
            if (++index[a] < lists[a].n) break;
            index[a] = 0;
        }
    }
    return (int)total;
}
