// engine/config_json.c — config.json <-> model_config (engine/config_json.h).
//
// Which fields may be absent: those that fix tensor shapes are required (a default there only
// turns into a confusing shape error later, and transformers always writes them); the others
// take the defaults of transformers' DeepseekV2Config / DeepseekV3Config (5.x), noted below.
#include "config_json.h"

#include <cjson/cJSON.h>   // cJSON_ParseWithLength, cJSON_GetObjectItemCaseSensitive, cJSON_Print
#include <errno.h>         // errno
#include <limits.h>        // INT_MAX
#include <math.h>          // floor, log, isfinite
#include <stdarg.h>        // va_list
#include <stdio.h>         // fopen, fread, snprintf, vsnprintf
#include <stdlib.h>        // free, qsort
#include <string.h>        // strcmp, strrchr, strerror, memset

#include "../common/check.h"  // invar_malloc, invar_calloc

typedef struct {
    const char *path;
    char *err;
    int err_len;
} reader;

static bool bad(reader *r, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool bad(reader *r, const char *field, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, (size_t)r->err_len, "%s: field '%s' %s", r->path, field, msg);
    return false;
}

// ---------------------------------------------------------------------------------------------
// Typed field readers. JSON null counts as absent. Numbers are read as doubles: cJSON's
// valueint saturates at 2^31, so integers are checked for being integral and in range here.
// ---------------------------------------------------------------------------------------------

enum presence { REQUIRED, OPTIONAL };

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *item = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return item && !cJSON_IsNull(item) ? item : NULL;
}

static bool is_null(const cJSON *obj, const char *key) {
    return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(obj, key));
}

static bool read_int(reader *r, const cJSON *obj, const char *label, const char *key,
                     enum presence p, int dflt, long lo, long hi, int *out) {
    const cJSON *item = field(obj, key);
    if (!item) {
        if (p == REQUIRED) return bad(r, label, "is missing");
        *out = dflt;
        return true;
    }
    if (!cJSON_IsNumber(item)) return bad(r, label, "must be a number");
    double v = item->valuedouble;
    if (v != floor(v) || v < (double)lo || v > (double)hi)
        return bad(r, label, "must be an integer in [%ld, %ld], got %.17g", lo, hi, v);
    *out = (int)v;
    return true;
}

static bool read_double(reader *r, const cJSON *obj, const char *label, const char *key,
                        enum presence p, double dflt, double *out) {
    const cJSON *item = field(obj, key);
    if (!item) {
        if (p == REQUIRED) return bad(r, label, "is missing");
        *out = dflt;
        return true;
    }
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return bad(r, label, "must be a finite number");
    *out = item->valuedouble;
    return true;
}

static bool read_bool(reader *r, const cJSON *obj, const char *key, bool dflt, bool *out) {
    const cJSON *item = field(obj, key);
    if (!item) {
        *out = dflt;
        return true;
    }
    if (!cJSON_IsBool(item)) return bad(r, key, "must be true or false");
    *out = cJSON_IsTrue(item);
    return true;
}

// A string field whose value must be one of `allowed` (NULL-terminated); *out is its index,
// or dflt when absent.
static bool read_choice(reader *r, const cJSON *obj, const char *label, const char *key,
                        const char *const *allowed, int dflt, int *out) {
    const cJSON *item = field(obj, key);
    if (!item) {
        if (dflt < 0) return bad(r, label, "is missing");
        *out = dflt;
        return true;
    }
    if (!cJSON_IsString(item)) return bad(r, label, "must be a string");
    char list[256] = "";
    for (int i = 0; allowed[i]; i++) {
        if (strcmp(item->valuestring, allowed[i]) == 0) {
            *out = i;
            return true;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", allowed[i]);
    }
    return bad(r, label, "has unsupported value '%s' (supported: %s)", item->valuestring, list);
}

// ---------------------------------------------------------------------------------------------
// RoPE: rope_scaling (hub) or rope_parameters (transformers 5), as transformers standardizes
// them: rope_scaling wins when both are set; rope_theta inside the dict wins over top level.
// ---------------------------------------------------------------------------------------------

static double yarn_get_mscale(double factor, double mscale) {
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

static bool parse_rope(reader *r, const cJSON *root, model_config *c) {
    const char *name = "rope_scaling";
    const cJSON *rs = field(root, name);
    if (!rs) {
        name = "rope_parameters";
        rs = field(root, name);
    }
    if (rs && !cJSON_IsObject(rs)) return bad(r, name, "must be an object or null");
    char label[96];
#define LABEL(key) (snprintf(label, sizeof label, "%s.%s", name, key), label)

    // Default 10000: transformers' default_theta.
    if (field(rs, "rope_theta")) {
        if (!read_double(r, rs, LABEL("rope_theta"), "rope_theta", REQUIRED, 0, &c->rope_theta))
            return false;
    } else if (!read_double(r, root, "rope_theta", "rope_theta", OPTIONAL, 10000.0, &c->rope_theta)) {
        return false;
    }

    static const char *const types[] = {"default", "yarn", NULL};
    int type = 0;
    if (rs) {
        const char *key = field(rs, "rope_type") ? "rope_type" : "type";
        if (!read_choice(r, rs, LABEL(key), key, types, 0, &type)) return false;
    }
    c->rope_yarn = type == 1;
    if (!c->rope_yarn) return true;

    // The engine implements transformers' yarn with its defaults; what it cannot express is
    // refused rather than approximated.
    if (field(rs, "attention_factor"))
        return bad(r, LABEL("attention_factor"), "is not supported (the attention factor is "
                   "derived from factor, mscale and mscale_all_dim)");
    bool truncate = true;
    if (!read_bool(r, rs, "truncate", true, &truncate)) return false;
    if (!truncate) return bad(r, LABEL("truncate"), "false is not supported");
    // original_max_position_embeddings: transformers infers max_position_embeddings when absent.
    if (!read_int(r, rs, LABEL("original_max_position_embeddings"), "original_max_position_embeddings",
                  OPTIONAL, c->max_position_embeddings, 1, INT_MAX,
                  &c->rope_original_max_position_embeddings))
        return false;
    // factor: when absent, transformers uses max_position_embeddings / original.
    double implicit = (double)c->max_position_embeddings / c->rope_original_max_position_embeddings;
    if (!read_double(r, rs, LABEL("factor"), "factor", OPTIONAL, implicit, &c->rope_factor))
        return false;
    if (!(c->rope_factor > 0)) return bad(r, LABEL("factor"), "must be positive");
    // beta_fast / beta_slow: `or 32` / `or 1` in transformers, so 0 also means the default.
    if (!read_double(r, rs, LABEL("beta_fast"), "beta_fast", OPTIONAL, 0, &c->rope_beta_fast) ||
        !read_double(r, rs, LABEL("beta_slow"), "beta_slow", OPTIONAL, 0, &c->rope_beta_slow))
        return false;
    if (c->rope_beta_fast == 0) c->rope_beta_fast = 32;
    if (c->rope_beta_slow == 0) c->rope_beta_slow = 1;
    double mscale, mscale_all_dim;
    if (!read_double(r, rs, LABEL("mscale"), "mscale", OPTIONAL, 0, &mscale) ||
        !read_double(r, rs, LABEL("mscale_all_dim"), "mscale_all_dim", OPTIONAL, 0, &mscale_all_dim))
        return false;
#undef LABEL
    // transformers scales cos/sin by get_mscale(f, mscale) / get_mscale(f, mscale_all_dim) only
    // when both are non-zero, and by get_mscale(f) (mscale 1) otherwise; the softmax scale takes
    // get_mscale(f, mscale_all_dim)^2 whenever mscale_all_dim is non-zero. The engine always
    // uses the ratio, so the "otherwise" case is mapped onto a ratio with the same value.
    c->rope_mscale_all_dim = mscale_all_dim;
    if (mscale != 0 && mscale_all_dim != 0) {
        c->rope_mscale = mscale;
    } else if (mscale_all_dim == 0 || c->rope_factor <= 1.0) {
        c->rope_mscale = 1.0;
    } else {
        double want = yarn_get_mscale(c->rope_factor, 1.0) *
                      yarn_get_mscale(c->rope_factor, mscale_all_dim);
        c->rope_mscale = (want - 1.0) / (0.1 * log(c->rope_factor));
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Checks for features the engine does not have (refused, never ignored)
// ---------------------------------------------------------------------------------------------

static bool parse_unsupported(reader *r, const cJSON *root, const model_config *c,
                              config_json_info *info) {
    static const char *const silu[] = {"silu", NULL};
    int unused;
    if (!read_choice(r, root, "hidden_act", "hidden_act", silu, 0, &unused)) return false;
    bool bias;
    if (!read_bool(r, root, "attention_bias", false, &bias)) return false;
    if (bias) return bad(r, "attention_bias", "true is not supported");
    if (!read_bool(r, root, "mlp_bias", false, &bias)) return false;
    if (bias) return bad(r, "mlp_bias", "true is not supported");
    int kv_heads;
    if (!read_int(r, root, "num_key_value_heads", "num_key_value_heads", OPTIONAL,
                  c->num_attention_heads, 1, INT_MAX, &kv_heads))
        return false;
    if (kv_heads != c->num_attention_heads)
        return bad(r, "num_key_value_heads", "must equal num_attention_heads (%d) for MLA, got %d",
                   c->num_attention_heads, kv_heads);

    const cJSON *q = field(root, "quantization_config");
    info->fp8_block_n = info->fp8_block_k = 128;
    if (!q) return true;
    if (!cJSON_IsObject(q)) return bad(r, "quantization_config", "must be an object");
    static const char *const fp8[] = {"fp8", NULL};
    static const char *const e4m3[] = {"e4m3", NULL};
    if (!read_choice(r, q, "quantization_config.quant_method", "quant_method", fp8, -1, &unused) ||
        !read_choice(r, q, "quantization_config.fmt", "fmt", e4m3, 0, &unused))
        return false;
    const cJSON *block = field(q, "weight_block_size");
    if (block) {
        if (!cJSON_IsArray(block) || cJSON_GetArraySize(block) != 2)
            return bad(r, "quantization_config.weight_block_size", "must be [rows, cols]");
        const cJSON *b0 = block->child, *b1 = b0->next;
        if (!cJSON_IsNumber(b0) || !cJSON_IsNumber(b1) || b0->valuedouble != floor(b0->valuedouble) ||
            b1->valuedouble != floor(b1->valuedouble) || b0->valuedouble < 1 ||
            b1->valuedouble < 1 || b0->valuedouble > 65536 || b1->valuedouble > 65536)
            return bad(r, "quantization_config.weight_block_size", "must be two integers in [1, 65536]");
        info->fp8_block_n = (int)b0->valuedouble;
        info->fp8_block_k = (int)b1->valuedouble;
    }
    info->fp8 = true;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Duplicate keys. cJSON keeps every copy and finds the first; Python's json (so transformers)
// keeps the last. A file the two would read as different models is refused.
// ---------------------------------------------------------------------------------------------

static int key_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// The first key (in sorted order) that `node` or an object inside it holds twice, written as
// its dotted path into `where`; false when there is none. Sorting keeps a hostile file of
// many keys linear-logarithmic.
static bool find_duplicate_key(const cJSON *node, const char *prefix, char *where, size_t len) {
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return false;
    if (cJSON_IsObject(node)) {
        int n = cJSON_GetArraySize(node);
        if (n > 1) {
            const char **keys = invar_calloc((size_t)n, sizeof *keys, "config.json keys");
            int i = 0;
            for (const cJSON *k = node->child; k; k = k->next) keys[i++] = k->string;
            qsort(keys, (size_t)n, sizeof *keys, key_ptr_cmp);
            for (i = 1; i < n && strcmp(keys[i - 1], keys[i]) != 0; i++) {}
            if (i < n) snprintf(where, len, "%s%s%s", prefix, prefix[0] ? "." : "", keys[i]);
            free(keys);
            if (i < n) return true;
        }
    }
    int index = 0;
    for (const cJSON *k = node->child; k; k = k->next, index++) {
        char inner[256];
        if (cJSON_IsObject(node)) snprintf(inner, sizeof inner, "%s%s%s", prefix, prefix[0] ? "." : "", k->string);
        else snprintf(inner, sizeof inner, "%s[%d]", prefix, index);
        if (find_duplicate_key(k, inner, where, len)) return true;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Parse
// ---------------------------------------------------------------------------------------------

static const char *const topk_names[] = {"greedy", "group_limited_greedy", "noaux_tc", NULL};
static const char *const scoring_names[] = {"softmax", "sigmoid", NULL};

static bool parse_root(reader *r, const cJSON *root, model_config *c, config_json_info *info) {
    static const char *const types[] = {"deepseek_v2", "deepseek_v3", NULL};
    int type;
    if (!read_choice(r, root, "model_type", "model_type", types, -1, &type)) return false;
    bool v3 = type == 1;
    snprintf(info->model_type, sizeof info->model_type, "%s", types[type]);

    // Tensor shapes: required.
    const struct {
        const char *key;
        int *dst;
        long lo;
    } shape_fields[] = {
        {"vocab_size", &c->vocab_size, 1},
        {"hidden_size", &c->hidden_size, 1},
        {"intermediate_size", &c->intermediate_size, 1},
        {"moe_intermediate_size", &c->moe_intermediate_size, 1},
        {"num_hidden_layers", &c->num_hidden_layers, 1},
        {"num_attention_heads", &c->num_attention_heads, 1},
        {"kv_lora_rank", &c->kv_lora_rank, 1},
        {"qk_nope_head_dim", &c->qk_nope_head_dim, 1},
        {"qk_rope_head_dim", &c->qk_rope_head_dim, 1},
        {"v_head_dim", &c->v_head_dim, 1},
        {"n_routed_experts", &c->n_routed_experts, 0},
        {"first_k_dense_replace", &c->first_k_dense_replace, 0},
    };
    for (size_t i = 0; i < sizeof shape_fields / sizeof shape_fields[0]; i++)
        if (!read_int(r, root, shape_fields[i].key, shape_fields[i].key, REQUIRED, 0,
                      shape_fields[i].lo, INT_MAX, shape_fields[i].dst))
            return false;
    // q_lora_rank and n_shared_experts must be present but may be null (no q LoRA: q_proj;
    // no shared experts).
    if (!cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank")) return bad(r, "q_lora_rank", "is missing");
    if (!cJSON_GetObjectItemCaseSensitive(root, "n_shared_experts"))
        return bad(r, "n_shared_experts", "is missing");
    if (!read_int(r, root, "q_lora_rank", "q_lora_rank", OPTIONAL, 0, 1, INT_MAX, &c->q_lora_rank) ||
        !read_int(r, root, "n_shared_experts", "n_shared_experts", OPTIONAL, 0, 0, INT_MAX,
                  &c->n_shared_experts))
        return false;

    // Behaviour: transformers' class defaults (V2 | V3). n_group / topk_group are None in
    // DeepseekV2Config, 8 / 4 in DeepseekV3Config; null means one group.
    if (!read_double(r, root, "rms_norm_eps", "rms_norm_eps", OPTIONAL, 1e-6, &c->rms_norm_eps) ||
        !read_int(r, root, "max_position_embeddings", "max_position_embeddings", OPTIONAL,
                  v3 ? 4096 : 2048, 1, INT_MAX, &c->max_position_embeddings) ||
        !read_bool(r, root, "tie_word_embeddings", false, &c->tie_word_embeddings) ||
        !read_double(r, root, "routed_scaling_factor", "routed_scaling_factor", OPTIONAL,
                     v3 ? 2.5 : 1.0, &c->routed_scaling_factor) ||
        !read_int(r, root, "n_group", "n_group", OPTIONAL,
                  v3 && !is_null(root, "n_group") ? 8 : 1, 1, INT_MAX, &c->n_group) ||
        !read_int(r, root, "topk_group", "topk_group", OPTIONAL,
                  v3 && !is_null(root, "topk_group") ? 4 : 1, 1, INT_MAX, &c->topk_group))
        return false;

    bool has_moe_layer = c->n_routed_experts > 0 && c->first_k_dense_replace < c->num_hidden_layers;
    // num_experts_per_tok: 8 in DeepseekV3Config, None (no usable default) in DeepseekV2Config.
    if (!read_int(r, root, "num_experts_per_tok", "num_experts_per_tok",
                  v3 || !has_moe_layer ? OPTIONAL : REQUIRED, v3 ? 8 : 1, 1, INT_MAX,
                  &c->num_experts_per_tok))
        return false;

    // Routing. Fields the class ignores are type-checked, then the class's behaviour is used:
    // DeepseekV3: sigmoid scores, noaux_tc, norm_topk_prob honoured (default true);
    // DeepseekV2: softmax scores, greedy or group_limited_greedy, never normalized.
    int topk, scoring;
    bool norm;
    if (!read_choice(r, root, "topk_method", "topk_method", topk_names, v3 ? 2 : 0, &topk) ||
        !read_choice(r, root, "scoring_func", "scoring_func", scoring_names, v3 ? 1 : 0, &scoring) ||
        !read_bool(r, root, "norm_topk_prob", v3, &norm))
        return false;
    if (v3) {
        c->topk_method = MOE_TOPK_NOAUX_TC;
        c->scoring_func = MOE_SCORING_SIGMOID;
        c->norm_topk_prob = norm;
    } else {
        if (topk == 2)
            return bad(r, "topk_method", "'noaux_tc' is not implemented by transformers' "
                       "DeepseekV2 (use model_type deepseek_v3)");
        c->topk_method = topk == 0 ? MOE_TOPK_GREEDY : MOE_TOPK_GROUP_LIMITED_GREEDY;
        c->scoring_func = MOE_SCORING_SOFTMAX;
        c->norm_topk_prob = false;
    }
    // moe_layer_freq: both classes make every layer from first_k_dense_replace on MoE.
    int freq;
    if (!read_int(r, root, "moe_layer_freq", "moe_layer_freq", OPTIONAL, 1, 1, INT_MAX, &freq))
        return false;
    c->moe_layer_freq = 1;
    // rope_interleave: honoured by DeepseekV3 (default true); DeepseekV2 always rotates
    // interleaved pairs (complex multiplication).
    if (!read_bool(r, root, "rope_interleave", true, &c->rope_interleave)) return false;
    if (!v3) c->rope_interleave = true;

    return parse_rope(r, root, c) && parse_unsupported(r, root, c, info);
}

bool config_json_parse(const char *text, size_t len, const char *path, model_config *out,
                       config_json_info *info, char *err, int err_len) {
    reader r = {path, err, err_len};
    config_json_info local;
    if (!info) info = &local;
    memset(out, 0, sizeof *out);
    memset(info, 0, sizeof *info);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        snprintf(err, (size_t)err_len, "%s: not a JSON object", path);
        return false;
    }
    char duplicate[256];
    bool ok = !find_duplicate_key(root, "", duplicate, sizeof duplicate) ||
              bad(&r, duplicate, "appears more than once (transformers would take the last "
                  "value, invar the first: refused)");
    ok = ok && parse_root(&r, root, out, info);
    cJSON_Delete(root);
    if (!ok) return false;
    char why[256];
    if (!model_config_validate(out, why, sizeof why)) {
        snprintf(err, (size_t)err_len, "%s: %s", path, why);
        return false;
    }
    return true;
}

bool config_json_load(const char *path, model_config *out, config_json_info *info, char *err,
                      int err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    // A config.json is a few KB; 16 MB is far beyond any real one and keeps a wrong path cheap.
    enum { MAX_CONFIG_BYTES = 16 << 20 };
    char *text = invar_malloc(MAX_CONFIG_BYTES + 1, "config.json");
    size_t n = fread(text, 1, MAX_CONFIG_BYTES + 1, f);
    bool read_error = ferror(f) != 0;
    fclose(f);
    bool ok = false;
    if (read_error) snprintf(err, (size_t)err_len, "%s: read error", path);
    else if (n > MAX_CONFIG_BYTES) snprintf(err, (size_t)err_len, "%s: larger than 16 MB", path);
    else ok = config_json_parse(text, n, path, out, info, err, err_len);
    free(text);
    if (!ok) return false;

    // The model's name: the folder holding config.json.
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    while (strlen(dir) > 1 && dir[strlen(dir) - 1] == '/') dir[strlen(dir) - 1] = '\0';
    const char *base = strrchr(dir, '/');
    const char *name = base && base[1] ? base + 1 : dir;
    size_t n_name = strnlen(name, sizeof out->name - 1);  // long folder names are cut
    memcpy(out->name, name, n_name);
    out->name[n_name] = '\0';
    return true;
}

// ---------------------------------------------------------------------------------------------
// Format
// ---------------------------------------------------------------------------------------------

char *config_json_format(const model_config *c, char *err, int err_len) {
    char why[256];
    if (!model_config_validate(c, why, sizeof why)) {
        snprintf(err, (size_t)err_len, "config '%s': %s", c->name, why);
        return NULL;
    }
    bool has_moe = c->n_routed_experts > 0;
    bool v3 = c->scoring_func == MOE_SCORING_SIGMOID;
    const char *problem = NULL;
    if (v3 && c->topk_method != MOE_TOPK_NOAUX_TC)
        problem = "sigmoid scoring exists only with noaux_tc routing (DeepseekV3)";
    else if (!v3 && c->topk_method == MOE_TOPK_NOAUX_TC)
        problem = "noaux_tc routing exists only with sigmoid scoring (DeepseekV3)";
    else if (!v3 && c->norm_topk_prob && c->num_experts_per_tok > 1 && has_moe)
        problem = "DeepseekV2 (softmax routing) never normalizes top-k weights";
    else if (!v3 && !c->rope_interleave)
        problem = "DeepseekV2 (softmax routing) always uses interleaved RoPE";
    else if (has_moe && c->moe_layer_freq != 1)
        problem = "transformers makes every layer from first_k_dense_replace on MoE (moe_layer_freq 1)";
    else if (c->rope_yarn && c->rope_factor > 1.0 &&
             !((c->rope_mscale != 0 && c->rope_mscale_all_dim != 0) ||
               (c->rope_mscale == 1.0 && c->rope_mscale_all_dim == 0)))
        problem = "YaRN mscale must be set with mscale_all_dim, or be 1 without it";
    if (problem) {
        snprintf(err, (size_t)err_len, "config '%s' cannot be written as a transformers config: %s",
                 c->name, problem);
        return NULL;
    }

    cJSON *o = cJSON_CreateObject();
    if (!o) invar_die(INVAR_EXIT_SYSTEM, "out of host memory formatting config.json");
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"));
    cJSON_AddStringToObject(o, "model_type", v3 ? "deepseek_v3" : "deepseek_v2");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", c->moe_intermediate_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", c->num_attention_heads);
    if (c->q_lora_rank > 0) cJSON_AddNumberToObject(o, "q_lora_rank", c->q_lora_rank);
    else cJSON_AddNullToObject(o, "q_lora_rank");
    cJSON_AddNumberToObject(o, "kv_lora_rank", c->kv_lora_rank);
    cJSON_AddNumberToObject(o, "qk_nope_head_dim", c->qk_nope_head_dim);
    cJSON_AddNumberToObject(o, "qk_rope_head_dim", c->qk_rope_head_dim);
    cJSON_AddNumberToObject(o, "v_head_dim", c->v_head_dim);
    cJSON_AddNumberToObject(o, "n_routed_experts", c->n_routed_experts);
    cJSON_AddNumberToObject(o, "n_shared_experts", c->n_shared_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", has_moe ? c->num_experts_per_tok : 1);
    // Without routed experts transformers must still see no MoE layer.
    cJSON_AddNumberToObject(o, "first_k_dense_replace",
                            has_moe ? c->first_k_dense_replace : c->num_hidden_layers);
    cJSON_AddNumberToObject(o, "moe_layer_freq", 1);
    cJSON_AddNumberToObject(o, "n_group", c->n_group);
    cJSON_AddNumberToObject(o, "topk_group", c->topk_group);
    cJSON_AddStringToObject(o, "topk_method", topk_names[c->topk_method]);
    cJSON_AddStringToObject(o, "scoring_func", scoring_names[c->scoring_func]);
    cJSON_AddBoolToObject(o, "norm_topk_prob", v3 ? c->norm_topk_prob : false);
    cJSON_AddNumberToObject(o, "routed_scaling_factor", c->routed_scaling_factor);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddBoolToObject(o, "rope_interleave", c->rope_interleave);
    if (c->rope_yarn) {
        cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
        cJSON_AddStringToObject(rs, "type", "yarn");
        cJSON_AddNumberToObject(rs, "factor", c->rope_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                c->rope_original_max_position_embeddings);
        cJSON_AddNumberToObject(rs, "beta_fast", c->rope_beta_fast);
        cJSON_AddNumberToObject(rs, "beta_slow", c->rope_beta_slow);
        cJSON_AddNumberToObject(rs, "mscale", c->rope_mscale);
        cJSON_AddNumberToObject(rs, "mscale_all_dim", c->rope_mscale_all_dim);
    } else {
        cJSON_AddNullToObject(o, "rope_scaling");
    }
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddBoolToObject(o, "attention_bias", false);
    cJSON_AddStringToObject(o, "torch_dtype", "bfloat16");
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) invar_die(INVAR_EXIT_SYSTEM, "out of host memory formatting config.json");
    return text;
}
