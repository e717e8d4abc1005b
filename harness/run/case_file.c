// harness/run/case_file.c — case file parsing and checks (harness/run/case_file.h).
//
// libinih does the INI syntax. Debian's libinih is built without INI_HANDLER_LINENO, so the
// handler is not told the line: we call ini_parse_stream with an fgets reader that counts lines
// (inih reads exactly one line per call), and the handler reads the count. The same reader
// stops the parse at the first error (returns end-of-file), rejects lines longer than inih's
// buffer instead of letting them be split, and rejects unknown sections even when empty (inih
// only reports key = value pairs to the handler).
#include "case_file.h"

#include <errno.h>                   // errno, ERANGE
#include <limits.h>                  // PATH_MAX
#include <ini.h>                     // ini_parse_stream
#include <math.h>                    // isfinite
#include <stdarg.h>                  // va_list, va_start, va_end
#include <stddef.h>                  // offsetof
#include <stdio.h>                   // FILE, fopen, fgets, snprintf
#include <stdlib.h>                  // strtol, strtoull, strtof
#include <string.h>                  // strcmp, strncmp, strchr, strlen, strerror, memset
#include <sys/stat.h>                // stat, S_ISDIR

#include "../../engine/checkpoint.h" // checkpoint_open
#include "../../engine/engine.h"     // ENGINE_MAX_TOPK
#include "../../engine/model_config.h" // model_config_by_name, model_config_names

// ---------------------------------------------------------------------------------------------
// The scalar keys
// ---------------------------------------------------------------------------------------------

enum key_kind { KEY_TEXT, KEY_INT, KEY_U64, KEY_FLOAT };

typedef struct {
    const char *section, *key;
    enum key_kind kind;
    size_t offset;              // into case_file
    size_t text_size;           // KEY_TEXT: size of the char array
    long lo, hi;                // KEY_INT: allowed range
    const char *default_value;  // NULL: required
} case_key;

#define TEXT(sec, k, field, def)                                                            \
    {sec, #k, KEY_TEXT, offsetof(case_file, field), sizeof(((case_file *)0)->field), 0, 0, def}
#define INT(sec, k, lo, hi, def) {sec, #k, KEY_INT, offsetof(case_file, k), 0, lo, hi, def}

// Upper bounds keep count * (max_len + max_new_tokens), the KV cache size, inside an int.
static const case_key keys[] = {
    TEXT("case", name, name, NULL),
    TEXT("case", model, model, ""),   // "": optional, but one of it and [matrix] models
    {"case", "seed", KEY_U64, offsetof(case_file, seed), 0, 0, 0, "0"},
    INT("prompts", count, 1, 4096, NULL),
    INT("prompts", min_len, 1, 65536, NULL),
    INT("prompts", max_len, 1, 65536, NULL),
    INT("prompts", max_new_tokens, 1, 4096, NULL),
    {"prompts", "temperature", KEY_FLOAT, offsetof(case_file, temperature), 0, 0, 0, "0"},
    // 0 is allowed: only the chosen token and its logprob are compared at each step.
    INT("prompts", top_k, 0, ENGINE_MAX_TOPK, "5"),
    INT("prompts", shared_prefix_groups, 0, 4096, "0"),
    INT("prompts", shared_prefix_len, 0, 65536, "0"),
    INT("prompts", warm_cache_repeats, 0, 64, "0"),
};
#define N_KEYS (sizeof keys / sizeof keys[0])
#define MAX_BATCH_SIZE 4096

static const char *const sections[] = {"case", "prompts", "matrix"};

// ---------------------------------------------------------------------------------------------
// Parse state
// ---------------------------------------------------------------------------------------------

typedef struct {
    case_file *c;
    FILE *f;
    int line;          // of the line inih is looking at
    bool failed;
    int error_line;    // of the first error
    char *err;
    int err_len;
} parse_state;

__attribute__((format(printf, 3, 4)))
static void fail_at(parse_state *s, int line, const char *fmt, ...) {
    if (s->failed) return;  // the first error is the one reported
    s->failed = true;
    s->error_line = line;
    // Line 0: about the file as a whole (a missing key, a default).
    int n = line > 0 ? snprintf(s->err, (size_t)s->err_len, "%s:%d: ", s->c->path, line)
                     : snprintf(s->err, (size_t)s->err_len, "%s: ", s->c->path);
    if (n < 0 || n >= s->err_len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err + n, (size_t)(s->err_len - n), fmt, ap);
    va_end(ap);
}

static bool known_section(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        if (strlen(sections[i]) == len && strncmp(sections[i], name, len) == 0) return true;
    return false;
}

// fgets for inih: counts lines, stops after the first error, checks section names.
static char *read_line(char *buf, int size, void *stream) {
    parse_state *s = stream;
    if (s->failed || !fgets(buf, size, s->f)) return NULL;
    s->line++;
    size_t len = strlen(buf);
    if (len > 0 && buf[len - 1] != '\n' && !feof(s->f)) {
        fail_at(s, s->line, "line longer than %d characters", size - 3);
        return NULL;
    }
    const char *p = buf;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (close && !known_section(p + 1, (size_t)(close - p - 1))) {
            fail_at(s, s->line, "unknown section [%.*s] (sections: [case], [prompts], [matrix])",
                    (int)(close - p - 1), p + 1);
            return NULL;
        }
    }
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

static bool parse_long(const char *text, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno == ERANGE || end == text || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

// Stores `value` of scalar key k into the case; false (with the error set) when it is bad.
static bool set_scalar(parse_state *s, const case_key *k, const char *value, int line) {
    char *field = (char *)s->c + k->offset;
    switch (k->kind) {
    case KEY_TEXT:
        if (value[0] == '\0' || strlen(value) >= k->text_size) {
            fail_at(s, line, "[%s] %s: bad value '%s' (expected 1 to %zu characters)", k->section,
                    k->key, value, k->text_size - 1);
            return false;
        }
        snprintf(field, k->text_size, "%s", value);
        return true;
    case KEY_INT: {
        long v;
        if (!parse_long(value, k->lo, k->hi, &v)) {
            fail_at(s, line, "[%s] %s: bad number '%s' (expected an integer in [%ld, %ld])",
                    k->section, k->key, value, k->lo, k->hi);
            return false;
        }
        *(int *)field = (int)v;
        return true;
    }
    case KEY_U64: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(value, &end, 0);
        if (errno == ERANGE || end == value || *end != '\0' || value[0] == '-') {
            fail_at(s, line, "[%s] %s: bad number '%s' (expected an unsigned 64-bit integer)",
                    k->section, k->key, value);
            return false;
        }
        *(uint64_t *)field = (uint64_t)v;
        return true;
    }
    case KEY_FLOAT: {
        char *end;
        errno = 0;
        float v = strtof(value, &end);
        if (errno == ERANGE || end == value || *end != '\0' || !isfinite(v) || v < 0.0f) {
            fail_at(s, line, "[%s] %s: bad number '%s' (expected a finite number >= 0)",
                    k->section, k->key, value);
            return false;
        }
        *(float *)field = v;
        return true;
    }
    }
    return false;
}

// A [matrix] list of batch sizes into out[0 .. *n); ascending: each above the one before.
static bool set_sizes(parse_state *s, const char *key, const char *value, int line, bool ascending,
                      int *out, int *n) {
    matrix_list list;
    char why[256];
    if (!matrix_split_list(value, &list, why, sizeof why)) {
        fail_at(s, line, "[matrix] %s: bad list: %s", key, why);
        return false;
    }
    for (int i = 0; i < list.n; i++) {
        long v;
        if (!parse_long(list.value[i], 1, MAX_BATCH_SIZE, &v)) {
            fail_at(s, line, "[matrix] %s: bad number '%s' (expected an integer in [1, %d])", key,
                    list.value[i], MAX_BATCH_SIZE);
            return false;
        }
        if (ascending && i > 0 && v <= out[i - 1]) {
            fail_at(s, line, "[matrix] %s: %ld after %d: the sizes must be ascending", key, v,
                    out[i - 1]);
            return false;
        }
        out[i] = (int)v;
    }
    *n = list.n;
    return true;
}

// ---------------------------------------------------------------------------------------------
// The handler
// ---------------------------------------------------------------------------------------------

static bool remember(parse_state *s, const char *section, const char *key) {
    case_file *c = s->c;
    for (int i = 0; i < c->n_seen; i++) {
        if (strcmp(c->seen[i].section, section) == 0 && strcmp(c->seen[i].key, key) == 0) {
            fail_at(s, s->line, "[%s] %s given twice (first at line %d)", section, key,
                    c->seen[i].line);
            return false;
        }
    }
    if (c->n_seen == CASE_MAX_KEYS) {
        fail_at(s, s->line, "more than %d keys", CASE_MAX_KEYS);
        return false;
    }
    snprintf(c->seen[c->n_seen].section, sizeof c->seen[0].section, "%s", section);
    snprintf(c->seen[c->n_seen].key, sizeof c->seen[0].key, "%s", key);
    c->seen[c->n_seen].line = s->line;
    c->n_seen++;
    return true;
}

static int on_key(void *user, const char *section, const char *key, const char *value) {
    parse_state *s = user;
    if (s->failed) return 0;
    if (section[0] == '\0') {
        fail_at(s, s->line, "key '%s' outside a section", key);
        return 0;
    }
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0)
            return remember(s, section, key) && set_scalar(s, &keys[i], value, s->line);
    }
    if (strcmp(section, "matrix") == 0) {
        if (strcmp(key, "batch_sizes") == 0)
            return remember(s, section, key) &&
                   set_sizes(s, key, value, s->line, false, s->c->batch_sizes, &s->c->n_batch_sizes);
        if (strcmp(key, "cuda_graph_buckets") == 0)
            return remember(s, section, key) && set_sizes(s, key, value, s->line, true, s->c->graph_buckets,
                                                          &s->c->n_graph_buckets);
        int axis = matrix_axis_find(key);
        if (axis >= 0) {
            if (!remember(s, section, key)) return 0;
            char why[1200];
            if (!matrix_parse_axis(axis, value, &s->c->axes[axis], why, sizeof why)) {
                fail_at(s, s->line, "[matrix] %s: bad list: %s", key, why);
                return 0;
            }
            s->c->axes[axis].line = s->line;
            return 1;
        }
    }
    fail_at(s, s->line, "unknown key '%s' in [%s]", key, section);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Defaults and checks across keys
// ---------------------------------------------------------------------------------------------

static bool set_defaults(parse_state *s) {
    for (size_t i = 0; i < N_KEYS; i++) {
        const char *d = keys[i].default_value;
        if (d && d[0] != '\0' && !set_scalar(s, &keys[i], d, 0)) return false;
    }
    for (int a = 0; a < matrix_axis_count(); a++) {
        const matrix_axis *ax = matrix_axis_at(a);
        char why[256];
        if (ax->default_value &&
            !matrix_parse_axis(a, ax->default_value, &s->c->axes[a], why, sizeof why)) {
            fail_at(s, 0, "default of [matrix] %s: %s", ax->key, why);
            return false;
        }
    }
    s->c->n_graph_buckets = case_graph_buckets(s->c->graph_buckets, MATRIX_MAX_VALUES);
    return true;
}

int case_graph_buckets(int *out, int max) {
    static const int buckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
    int n = 0;
    for (; n < (int)(sizeof buckets / sizeof buckets[0]) && n < max; n++) out[n] = buckets[n];
    return n;
}

int case_file_line(const case_file *c, const char *section, const char *key) {
    for (int i = 0; i < c->n_seen; i++)
        if (strcmp(c->seen[i].section, section) == 0 && strcmp(c->seen[i].key, key) == 0)
            return c->seen[i].line;
    return 0;
}

// The models axis: [matrix] models, or the one [case] model; never both.
static bool models_from_case(parse_state *s) {
    case_file *c = s->c;
    int models = matrix_axis_find("models");
    matrix_list *l = &c->axes[models];
    int case_line = case_file_line(c, "case", "model");
    if (case_line && l->line) {
        fail_at(s, l->line, "[matrix] models: [case] model is set too (line %d); give one of "
                "them", case_line);
        return false;
    }
    if (!case_line && !l->line) {
        fail_at(s, 0, "missing required key [case] model (or [matrix] models)");
        return false;
    }
    if (case_line) {
        char why[256];
        if (!matrix_parse_axis(models, c->model, l, why, sizeof why)) {
            fail_at(s, case_line, "[case] model: %s", why);
            return false;
        }
        return true;
    }
    int len = 0;
    c->model[0] = '\0';
    for (int i = 0; i < l->n && len < (int)sizeof c->model; i++)
        len += snprintf(c->model + len, sizeof c->model - (size_t)len, "%s%s", i ? ", " : "",
                        l->value[i]);
    return true;
}

static bool check_required(parse_state *s) {
    for (size_t i = 0; i < N_KEYS; i++) {
        if (!keys[i].default_value && !case_file_line(s->c, keys[i].section, keys[i].key)) {
            fail_at(s, 0, "missing required key [%s] %s", keys[i].section, keys[i].key);
            return false;
        }
    }
    if (!models_from_case(s)) return false;
    if (!case_file_line(s->c, "matrix", "batch_sizes")) {
        fail_at(s, 0, "missing required key [matrix] batch_sizes");
        return false;
    }
    for (int a = 0; a < matrix_axis_count(); a++) {
        if (!matrix_axis_at(a)->default_value && s->c->axes[a].n == 0) {
            fail_at(s, 0, "missing required key [matrix] %s", matrix_axis_at(a)->key);
            return false;
        }
    }
    return true;
}

// The models axis's values: each a named config or a valid checkpoint directory, long enough
// for the longest request, with a vocabulary that holds top_k.
static bool check_model(parse_state *s) {
    case_file *c = s->c;
    const matrix_list *models = &c->axes[matrix_axis_find("models")];
    int line = models->line ? models->line : case_file_line(c, "case", "model");
    const char *key = models->line ? "[matrix] models" : "[case] model";
    for (int m = 0; m < models->n; m++) {
        model_config cfg;
        const char *name = models->value[m];
        char why[1024];
        if (!case_model_open(name, c->seed, &cfg, NULL, why, sizeof why)) {
            fail_at(s, line, "%s: %s", key, why);
            return false;
        }
        int model_len = case_max_model_len(c);
        if (model_len > cfg.max_position_embeddings) {
            fail_at(s, case_file_line(c, "prompts", "max_len"),
                    "[prompts] max_len + max_new_tokens = %d exceeds model '%s' "
                    "max_position_embeddings = %d",
                    model_len, name, cfg.max_position_embeddings);
            return false;
        }
        if (c->top_k > cfg.vocab_size) {
            fail_at(s, case_file_line(c, "prompts", "top_k"), "[prompts] top_k = %d exceeds "
                    "model '%s' vocab_size = %d", c->top_k, name, cfg.vocab_size);
            return false;
        }
    }
    return true;
}

// A shared prefix shorter than every prompt, so each prompt still has tokens of its own (and
// the prefix cache can never serve a whole prompt); groups of at least one prompt.
static bool check_prompt_shapes(parse_state *s) {
    case_file *c = s->c;
    int G = c->shared_prefix_groups, P = c->shared_prefix_len;
    int g_line = case_file_line(c, "prompts", "shared_prefix_groups");
    int p_line = case_file_line(c, "prompts", "shared_prefix_len");
    if ((G > 0) != (P > 0)) {
        fail_at(s, G > 0 ? g_line : p_line, "[prompts] shared_prefix_groups = %d with "
                "shared_prefix_len = %d: set both (or neither)", G, P);
        return false;
    }
    if (G > c->count) {
        fail_at(s, g_line, "[prompts] shared_prefix_groups = %d exceeds count = %d", G, c->count);
        return false;
    }
    if (P > 0 && P >= c->min_len) {
        fail_at(s, p_line, "[prompts] shared_prefix_len = %d must be below min_len = %d (line "
                "%d), so every prompt has tokens of its own", P, c->min_len,
                case_file_line(c, "prompts", "min_len"));
        return false;
    }
    if (case_request_count(c) > 4096) {
        fail_at(s, case_file_line(c, "prompts", "warm_cache_repeats"),
                "[prompts] count + warm_cache_repeats = %d exceeds 4096", case_request_count(c));
        return false;
    }
    return true;
}

// Without chunked prefill a prompt is prefilled whole in one step, so every budget must hold
// the longest request. We follow vLLM, which refuses max_num_batched_tokens < max_model_len
// when chunked prefill is off, and treat the combination as bad input: the case asked for a
// config that cannot run, and skipping it would hide that.
static bool check_chunked_prefill(parse_state *s) {
    case_file *c = s->c;
    int ax_chunk = matrix_axis_find("chunked_prefill");
    int ax_budget = matrix_axis_find("max_num_batched_tokens");
    const matrix_list *chunk = &c->axes[ax_chunk], *budget = &c->axes[ax_budget];
    int model_len = case_max_model_len(c);
    for (int i = 0; i < chunk->n; i++) {
        if (strcmp(chunk->value[i], "off") != 0) continue;
        for (int j = 0; j < budget->n; j++) {
            int b = (int)strtol(budget->value[j], NULL, 10);
            if (b >= model_len) continue;
            fail_at(s, chunk->line ? chunk->line : budget->line,
                    "[matrix] chunked_prefill = off with max_num_batched_tokens = %d (line %d): "
                    "a prompt is prefilled whole, so the budget must be at least "
                    "[prompts] max_len + max_new_tokens = %d (line %d); raise the budget, lower "
                    "max_len or keep chunked_prefill on",
                    b, budget->line, model_len, case_file_line(c, "prompts", "max_len"));
            return false;
        }
    }
    return true;
}

// A KV cache of kv_cache_blocks blocks must hold the longest request at every block size: the
// engine admits a request only once its whole need is free (engine/scheduler.c), so a smaller
// cache could never run it.
static bool check_kv_cache_blocks(parse_state *s) {
    case_file *c = s->c;
    const matrix_list *blocks = &c->axes[matrix_axis_find("kv_cache_blocks")];
    const matrix_list *sizes = &c->axes[matrix_axis_find("block_sizes")];
    int model_len = case_max_model_len(c);
    for (int i = 0; i < blocks->n; i++) {
        int n = (int)strtol(blocks->value[i], NULL, 10);
        for (int j = 0; j < sizes->n && n > 0; j++) {
            int bs = (int)strtol(sizes->value[j], NULL, 10), need = (model_len + bs - 1) / bs;
            if (n >= need) continue;
            fail_at(s, blocks->line, "[matrix] kv_cache_blocks = %d holds less than the longest "
                    "request: [prompts] max_len + max_new_tokens = %d (line %d) takes %d blocks "
                    "of block_size %d", n, model_len, case_file_line(c, "prompts", "max_len"),
                    need, bs);
            return false;
        }
    }
    return true;
}

static bool check_case(parse_state *s) {
    case_file *c = s->c;
    if (c->min_len > c->max_len) {
        fail_at(s, case_file_line(c, "prompts", "min_len"),
                "[prompts] min_len = %d exceeds max_len = %d", c->min_len, c->max_len);
        return false;
    }
    long configs = matrix_count(c->axes);
    if (configs > 4096) {
        fail_at(s, 0, "[matrix] expands to %ld configs (at most 4096)", configs);
        return false;
    }
    return check_model(s) && check_prompt_shapes(s) && check_chunked_prefill(s) &&
           check_kv_cache_blocks(s);
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

bool case_file_load(const char *path, case_file *out, char *err, int err_len) {
    memset(out, 0, sizeof *out);
    if (snprintf(out->path, sizeof out->path, "%s", path) >= (int)sizeof out->path) {
        snprintf(err, (size_t)err_len, "%.200s...: path too long (%zu characters; at most %d)",
                 path, strlen(path), PATH_MAX - 1);
        return false;
    }
    parse_state s = {.c = out, .err = err, .err_len = err_len};
    if (err_len > 0) err[0] = '\0';
    s.f = fopen(path, "r");
    if (!s.f) {
        snprintf(err, (size_t)err_len, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    bool ok = set_defaults(&s);
    int rc = ok ? ini_parse_stream(read_line, &s, on_key, &s) : 0;
    bool read_error = ferror(s.f);
    if (fclose(s.f) != 0 && !s.failed) {
        snprintf(err, (size_t)err_len, "%s: close failed: %s", path, strerror(errno));
        return false;
    }
    if (read_error && !s.failed) {
        snprintf(err, (size_t)err_len, "%s:%d: read failed", path, s.line);
        return false;
    }
    // inih's own syntax errors (no '=', no ']') come back as the line number, and are earlier
    // than anything the handler saw, since the reader stops at the handler's first error.
    if (rc > 0 && !(s.failed)) {
        fail_at(&s, rc, "syntax error: expected '[section]' or 'key = value'");
    } else if (rc > 0 && s.failed && rc < s.error_line) {
        s.failed = false;
        fail_at(&s, rc, "syntax error: expected '[section]' or 'key = value'");
    } else if (rc < 0 && !s.failed) {
        fail_at(&s, 0, "libinih failed (%d)", rc);
    }
    if (s.failed) return false;
    return check_required(&s) && check_case(&s);
}

int case_max_batch_size(const case_file *c) {
    int m = 0;
    for (int i = 0; i < c->n_batch_sizes; i++)
        if (c->batch_sizes[i] > m) m = c->batch_sizes[i];
    return m;
}

int case_max_budget(const case_file *c) {
    const matrix_list *l = &c->axes[matrix_axis_find("max_num_batched_tokens")];
    int m = 0;
    for (int i = 0; i < l->n; i++) {
        int b = (int)strtol(l->value[i], NULL, 10);
        if (b > m) m = b;
    }
    return m;
}

int case_request_count(const case_file *c) { return c->count + c->warm_cache_repeats; }

int case_max_model_len(const case_file *c) { return c->max_len + c->max_new_tokens; }

prompt_spec case_prompt_spec(const case_file *c) {
    return (prompt_spec){
        .count = c->count,
        .min_len = c->min_len,
        .max_len = c->max_len,
        .shared_prefix_groups = c->shared_prefix_groups,
        .shared_prefix_len = c->shared_prefix_len,
        .warm_cache_repeats = c->warm_cache_repeats,
    };
}

// ---------------------------------------------------------------------------------------------
// Models: named configs and checkpoint directories
// ---------------------------------------------------------------------------------------------

// A named config wins over a directory of the same name; anything else is taken for a
// checkpoint directory, so a bad one gets checkpoint_open's message (which names the file).
bool case_model_open(const char *model, uint64_t seed, model_config *cfg, weight_source **w,
                     char *err, int err_len) {
    if (model_config_by_name(model, cfg)) {
        if (w) *w = weights_synthetic(cfg, seed);
        return true;
    }
    struct stat st;
    if (stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char names[256] = "";
        int len = 0;
        for (const char *const *n = model_config_names(); *n && len < (int)sizeof names; n++)
            len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", len ? ", " : "", *n);
        snprintf(err, (size_t)err_len, "unknown model '%s' (named configs: %s; or a checkpoint "
                 "directory holding config.json)", model, names);
        return false;
    }
    weight_source *src = NULL;
    if (!checkpoint_open(model, cfg, &src, err, err_len)) return false;
    if (w) *w = src;
    else src->destroy(src);
    return true;
}

// One value for an axis from a command-line flag, checked as the case file's list would be.
static bool flag_value(const char *key, const char *value, const char *flag, const char *one,
                       matrix_list *list, char *err, int err_len) {
    char why[1024];
    if (!matrix_parse_axis(matrix_axis_find(key), value, list, why, sizeof why) || list->n != 1) {
        snprintf(err, (size_t)err_len, "%s: %s", flag, list->n != 1 ? one : why);
        return false;
    }
    list->line = 0;
    return true;
}

bool case_file_set_kernel_set(case_file *c, const char *set, char *err, int err_len) {
    matrix_list list;
    if (!flag_value("kernel_sets", set, "--kernel-set", "one kernel set only", &list, err, err_len)) return false;
    c->axes[matrix_axis_find("kernel_sets")] = list;
    return true;
}

bool case_file_set_cuda_graphs(case_file *c, const char *on_off, char *err, int err_len) {
    matrix_list list;
    if (!flag_value("cuda_graphs", on_off, "--cuda-graphs", "on or off, one value", &list, err, err_len))
        return false;
    c->axes[matrix_axis_find("cuda_graphs")] = list;
    return true;
}

bool case_file_set_model(case_file *c, const char *model, char *err, int err_len) {
    int axis = matrix_axis_find("models");
    matrix_list list;
    char why[1024];
    if (!flag_value("models", model, "--model", "one model only", &list, err, err_len)) return false;
    model_config cfg;
    if (!case_model_open(model, c->seed, &cfg, NULL, why, sizeof why)) {
        snprintf(err, (size_t)err_len, "--model: %s", why);
        return false;
    }
    matrix_list saved = c->axes[axis];
    char saved_model[sizeof c->model];
    snprintf(saved_model, sizeof saved_model, "%s", c->model);
    list.line = 0;
    c->axes[axis] = list;
    snprintf(c->model, sizeof c->model, "%s", model);
    parse_state s = {.c = c, .err = err, .err_len = err_len};
    if (err_len > 0) err[0] = '\0';
    if (check_model(&s) && check_prompt_shapes(&s) && check_chunked_prefill(&s)) return true;
    c->axes[axis] = saved;
    snprintf(c->model, sizeof c->model, "%s", saved_model);
    return false;
}
