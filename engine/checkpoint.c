// engine/checkpoint.c — checkpoint directories as weight sources (engine/checkpoint.h).
#include "checkpoint.h"

#include <cjson/cJSON.h>   // cJSON_ParseWithLength, cJSON_IsObject
#include <errno.h>         // errno, ENOENT
#include <stdarg.h>        // va_list
#include <stdio.h>         // snprintf, fprintf, fopen
#include <stdlib.h>        // qsort, bsearch, free
#include <string.h>        // strcmp, strchr, strerror
#include <sys/stat.h>      // stat
#include <unistd.h>        // isatty

#include "../common/check.h"  // invar_die, invar_malloc, invar_calloc
#include "config_json.h"       // config_json_load, config_json_info
#include "safetensors.h"       // st_file, st_open, st_find, conversions

// ---------------------------------------------------------------------------------------------
// The tensors a config needs
// ---------------------------------------------------------------------------------------------

typedef struct {
    checkpoint_tensor *out;
    int cap, n;
} tensor_list;

static void add(tensor_list *l, int ndim, int64_t d0, int64_t d1, bool f32, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void add(tensor_list *l, int ndim, int64_t d0, int64_t d1, bool f32, const char *fmt, ...) {
    if (l->n < l->cap) {
        checkpoint_tensor *t = &l->out[l->n];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->name, sizeof t->name, fmt, ap);
        va_end(ap);
        t->ndim = ndim;
        t->shape[0] = d0;
        t->shape[1] = ndim > 1 ? d1 : 0;
        t->f32 = f32;
    }
    l->n++;
}

int checkpoint_tensors(const model_config *c, checkpoint_tensor *out, int cap) {
    // The count comes from arithmetic; the loops below stop once `cap` names are written, so a
    // short prefix of a huge config's list is cheap.
    int count = (int)checkpoint_tensor_count(c);
    if (!out || cap <= 0) return count;
    tensor_list l = {out, cap, 0};
#define FULL() (l.n >= l.cap)
    int64_t V = c->vocab_size, D = c->hidden_size, H = c->num_attention_heads;
    int64_t nope = c->qk_nope_head_dim, rope = c->qk_rope_head_dim, vdim = c->v_head_dim;
    int64_t ql = c->q_lora_rank, kvl = c->kv_lora_rank;
    int64_t E = c->n_routed_experts, Im = c->moe_intermediate_size, Is = Im * c->n_shared_experts;
    int64_t I = c->intermediate_size;

    add(&l, 2, V, D, false, "model.embed_tokens.weight");
    for (int i = 0; i < c->num_hidden_layers && !FULL(); i++) {
        add(&l, 1, D, 0, false, "model.layers.%d.input_layernorm.weight", i);
        if (ql > 0) {
            add(&l, 2, ql, D, false, "model.layers.%d.self_attn.q_a_proj.weight", i);
            add(&l, 1, ql, 0, false, "model.layers.%d.self_attn.q_a_layernorm.weight", i);
            add(&l, 2, H * (nope + rope), ql, false, "model.layers.%d.self_attn.q_b_proj.weight", i);
        } else {
            add(&l, 2, H * (nope + rope), D, false, "model.layers.%d.self_attn.q_proj.weight", i);
        }
        add(&l, 2, kvl + rope, D, false, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
        add(&l, 1, kvl, 0, false, "model.layers.%d.self_attn.kv_a_layernorm.weight", i);
        add(&l, 2, H * (nope + vdim), kvl, false, "model.layers.%d.self_attn.kv_b_proj.weight", i);
        add(&l, 2, D, H * vdim, false, "model.layers.%d.self_attn.o_proj.weight", i);
        add(&l, 1, D, 0, false, "model.layers.%d.post_attention_layernorm.weight", i);
        if (model_layer_is_moe(c, i)) {
            add(&l, 2, E, D, false, "model.layers.%d.mlp.gate.weight", i);
            if (c->topk_method == MOE_TOPK_NOAUX_TC)
                add(&l, 1, E, 0, true, "model.layers.%d.mlp.gate.e_score_correction_bias", i);
            for (int e = 0; e < E && !FULL(); e++) {
                add(&l, 2, Im, D, false, "model.layers.%d.mlp.experts.%d.gate_proj.weight", i, e);
                add(&l, 2, Im, D, false, "model.layers.%d.mlp.experts.%d.up_proj.weight", i, e);
                add(&l, 2, D, Im, false, "model.layers.%d.mlp.experts.%d.down_proj.weight", i, e);
            }
            if (Is > 0) {
                add(&l, 2, Is, D, false, "model.layers.%d.mlp.shared_experts.gate_proj.weight", i);
                add(&l, 2, Is, D, false, "model.layers.%d.mlp.shared_experts.up_proj.weight", i);
                add(&l, 2, D, Is, false, "model.layers.%d.mlp.shared_experts.down_proj.weight", i);
            }
        } else {
            add(&l, 2, I, D, false, "model.layers.%d.mlp.gate_proj.weight", i);
            add(&l, 2, I, D, false, "model.layers.%d.mlp.up_proj.weight", i);
            add(&l, 2, D, I, false, "model.layers.%d.mlp.down_proj.weight", i);
        }
    }
    add(&l, 1, D, 0, false, "model.norm.weight");
    if (!c->tie_word_embeddings) add(&l, 2, V, D, false, "lm_head.weight");
#undef FULL
    return count;
}

int64_t checkpoint_tensor_count(const model_config *c) {
    // Per layer: input/post norms, q (3 with q LoRA, else 1), kv_a, kv_a norm, kv_b, o_proj;
    // then the MLP: 3 dense, or router (+ bias) + 3 per routed expert (+ 3 shared).
    int64_t attention = 2 + (c->q_lora_rank > 0 ? 3 : 1) + 4;
    // MoE layers, as model_layer_is_moe decides them, counted without a loop over the layers:
    // the multiples of moe_layer_freq in [first_k_dense_replace, num_hidden_layers).
    int64_t n_layers = c->num_hidden_layers > 0 ? c->num_hidden_layers : 0;
    int64_t first = c->first_k_dense_replace < 0 ? 0 : c->first_k_dense_replace;
    int64_t freq = c->moe_layer_freq > 0 ? c->moe_layer_freq : 1;
    if (first > n_layers) first = n_layers;
    int64_t moe_layers = c->n_routed_experts > 0
                             ? (n_layers + freq - 1) / freq - (first + freq - 1) / freq : 0;
    int64_t dense_layers = n_layers - moe_layers;
    int64_t moe_mlp = 1 + (c->topk_method == MOE_TOPK_NOAUX_TC) +
                      (c->moe_intermediate_size * (int64_t)c->n_shared_experts > 0 ? 3 : 0);
    int64_t experts, moe_total, dense_total, layers, total;
    if (__builtin_mul_overflow((int64_t)c->n_routed_experts, (int64_t)3, &experts) ||
        __builtin_add_overflow(moe_mlp, experts, &moe_mlp) ||
        __builtin_add_overflow(moe_mlp, attention, &moe_mlp) ||
        __builtin_mul_overflow(moe_layers, moe_mlp, &moe_total) ||
        __builtin_mul_overflow(dense_layers, attention + 3, &dense_total) ||
        __builtin_add_overflow(moe_total, dense_total, &layers) ||
        __builtin_add_overflow(layers, (int64_t)(2 + !c->tie_word_embeddings), &total))
        return -1;
    return total;
}

// ---------------------------------------------------------------------------------------------
// The source: every tensor of every shard in one table sorted by name
// ---------------------------------------------------------------------------------------------

typedef struct {
    const st_tensor *t;
    const st_file *file;
    bool counted;              // already in the progress count (a tensor may be read twice)
} entry;

typedef struct {
    char dir[4096];
    char listing[4400];        // the file that lists the tensors, for "missing" messages
    st_file *files;
    int n_files;
    entry *entries;            // sorted by tensor name
    int n_entries;
    int fp8_block_n, fp8_block_k;
    // Progress on a terminal: bytes of the tensors the config needs, and how many were read.
    bool progress;
    uint64_t bytes_total, bytes_done, bytes_next_report;
} checkpoint;

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const entry *)a)->t->name, ((const entry *)b)->t->name);
}

static int entry_find_cmp(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const entry *)elem)->t->name);
}

static const entry *find(const checkpoint *ck, const char *name) {
    if (ck->n_entries == 0) return NULL;
    return bsearch(name, ck->entries, (size_t)ck->n_entries, sizeof *ck->entries, entry_find_cmp);
}

static void checkpoint_free(checkpoint *ck) {
    for (int i = 0; i < ck->n_files; i++) st_close(&ck->files[i]);
    free(ck->files);
    free(ck->entries);
    free(ck);
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

static bool same_shape(const st_tensor *t, const int64_t *shape, int ndim) {
    if (t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

static const st_tensor *scale_of(const checkpoint *ck, const st_tensor *t) {
    char name[512];
    snprintf(name, sizeof name, "%s_scale_inv", t->name);
    const entry *e = find(ck, name);
    return e ? e->t : NULL;
}

// Whether tensor `name` can be read with `shape`; else a message naming file and tensor.
static bool check_tensor(const checkpoint *ck, const char *name, const int64_t *shape, int ndim,
                         char *err, int err_len) {
    const entry *e = find(ck, name);
    if (!e) {
        snprintf(err, (size_t)err_len, "%s: tensor '%s' is missing", ck->listing, name);
        return false;
    }
    char want[128], have[128];
    if (!same_shape(e->t, shape, ndim)) {
        shape_str(shape, ndim, want, sizeof want);
        shape_str(e->t->shape, e->t->ndim, have, sizeof have);
        snprintf(err, (size_t)err_len, "%s: tensor '%s' has shape %s, expected %s", e->file->path,
                 name, have, want);
        return false;
    }
    if (!st_dtype_is_float(e->t->dtype)) {
        snprintf(err, (size_t)err_len, "%s: tensor '%s' has dtype %s (supported: BF16, F16, F32, "
                 "F8_E4M3)", e->file->path, name, st_dtype_name(e->t->dtype));
        return false;
    }
    if (e->t->dtype == ST_F8_E4M3) {
        char why[512];
        if (!st_fp8_scales_ok(e->t, scale_of(ck, e->t), ck->fp8_block_n, ck->fp8_block_k, why,
                              sizeof why)) {
            snprintf(err, (size_t)err_len, "%s: %s", e->file->path, why);
            return false;
        }
    }
    return true;
}

// Finds the tensor for a read or exits 2 naming the file and the tensor.
static const entry *entry_for_read(checkpoint *ck, const char *name, const int64_t *shape, int ndim) {
    char err[1024];
    if (!check_tensor(ck, name, shape, ndim, err, sizeof err)) invar_die(INVAR_EXIT_INPUT, "%s", err);
    return find(ck, name);
}

static void report_progress(checkpoint *ck, const entry *read) {
    entry *e = (entry *)read;  // the table is the checkpoint's own; only `counted` changes
    if (e->counted) return;
    e->counted = true;
    ck->bytes_done += e->t->nbytes;
    if (!ck->progress) return;
    bool done = ck->bytes_done >= ck->bytes_total;
    if (!done && ck->bytes_done < ck->bytes_next_report) return;
    ck->bytes_next_report = ck->bytes_done + (256ull << 20);
    fprintf(stderr, "\rinvar: loading %s: %.2f / %.2f GB%s", ck->dir, ck->bytes_done / 1e9,
            ck->bytes_total / 1e9, done ? "\n" : "");
    if (done) ck->progress = false;
}

static bool ck_has(weight_source *s, const char *name) { return find(s->ctx, name) != NULL; }

static void ck_read_bf16(weight_source *s, const char *name, const int64_t *shape, int ndim, bf16 *dst) {
    checkpoint *ck = s->ctx;
    const entry *e = entry_for_read(ck, name, shape, ndim);
    if (e->t->dtype == ST_F8_E4M3) {
        const st_tensor *scale = scale_of(ck, e->t);
        st_fp8_dequant_bf16(e->t, scale, ck->fp8_block_n, ck->fp8_block_k, dst);
        st_release_pages(e->file, scale);
    } else {
        st_to_bf16(e->t, dst);
    }
    st_release_pages(e->file, e->t);
    report_progress(ck, e);
}

static void ck_read_f32(weight_source *s, const char *name, const int64_t *shape, int ndim, float *dst) {
    checkpoint *ck = s->ctx;
    const entry *e = entry_for_read(ck, name, shape, ndim);
    if (e->t->dtype == ST_F8_E4M3) {
        const st_tensor *scale = scale_of(ck, e->t);
        st_fp8_dequant_f32(e->t, scale, ck->fp8_block_n, ck->fp8_block_k, dst);
        st_release_pages(e->file, scale);
    } else {
        st_to_f32(e->t, dst);
    }
    st_release_pages(e->file, e->t);
    report_progress(ck, e);
}

static void ck_destroy(weight_source *s) {
    checkpoint_free(s->ctx);
    free(s);
}

// ---------------------------------------------------------------------------------------------
// Opening
// ---------------------------------------------------------------------------------------------

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// Parses model.safetensors.index.json; its weight_map maps tensor names to shard file names.
static cJSON *read_index(const char *path, char *err, int err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, (size_t)err_len, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    // DeepSeek-V3's index is about 10 MB; 256 MB is far beyond any real one.
    enum { MAX_INDEX_BYTES = 256 << 20 };
    char *text = invar_malloc(MAX_INDEX_BYTES + 1, "safetensors index");
    size_t n = fread(text, 1, MAX_INDEX_BYTES + 1, f);
    bool read_error = ferror(f) != 0;
    fclose(f);
    cJSON *root = NULL;
    if (read_error) snprintf(err, (size_t)err_len, "%s: read error", path);
    else if (n > MAX_INDEX_BYTES) snprintf(err, (size_t)err_len, "%s: larger than 256 MB", path);
    else if (!(root = cJSON_ParseWithLength(text, n)) || !cJSON_IsObject(root))
        snprintf(err, (size_t)err_len, "%s: not a JSON object", path);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map) || !map->child) {
        snprintf(err, (size_t)err_len, "%s: field 'weight_map' is missing or empty", path);
        cJSON_Delete(root);
        return NULL;
    }
    for (const cJSON *m = map->child; m; m = m->next) {
        // A shard is a plain file name next to the index, never a path out of the folder.
        if (!cJSON_IsString(m) || !m->valuestring[0] || strchr(m->valuestring, '/') ||
            strcmp(m->valuestring, "..") == 0 || strcmp(m->valuestring, ".") == 0) {
            snprintf(err, (size_t)err_len, "%s: weight_map['%s'] must be a file name in the same "
                     "folder", path, m->string);
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

static int str_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// Maps the files (one, or the index's shards) and builds the sorted tensor table.
static bool open_files(checkpoint *ck, char *err, int err_len) {
    char path[4400];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", ck->dir);
    cJSON *index = NULL;
    const char **names;
    int n_names = 1;
    if (file_exists(path)) {
        if (!(index = read_index(path, err, err_len))) return false;
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
        n_names = cJSON_GetArraySize(map);
        names = invar_calloc((size_t)n_names, sizeof *names, "shard names");
        int i = 0;
        for (const cJSON *m = map->child; m; m = m->next) names[i++] = m->valuestring;
        qsort(names, (size_t)n_names, sizeof *names, str_ptr_cmp);
        int u = 0;
        for (i = 0; i < n_names; i++)
            if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
        n_names = u;
    } else {
        names = invar_calloc(1, sizeof *names, "shard names");
        names[0] = "model.safetensors";
        snprintf(path, sizeof path, "%s/model.safetensors", ck->dir);
        if (!file_exists(path)) {
            snprintf(err, (size_t)err_len, "%s: neither model.safetensors nor "
                     "model.safetensors.index.json found", ck->dir);
            free(names);
            return false;
        }
    }
    snprintf(ck->listing, sizeof ck->listing, "%s", path);

    bool ok = true;
    ck->files = invar_calloc((size_t)n_names, sizeof *ck->files, "safetensors files");
    int total = 0;
    for (int i = 0; i < n_names && ok; i++) {
        char file[4400];
        snprintf(file, sizeof file, "%s/%s", ck->dir, names[i]);
        ok = st_open(file, &ck->files[i], err, err_len);
        if (ok) {
            ck->n_files++;
            total += ck->files[i].n_tensors;
        }
    }
    free(names);
    if (ok) {
        ck->entries = invar_calloc((size_t)total, sizeof *ck->entries, "tensor table");
        for (int i = 0; i < ck->n_files; i++)
            for (int j = 0; j < ck->files[i].n_tensors; j++)
                ck->entries[ck->n_entries++] = (entry){&ck->files[i].tensors[j], &ck->files[i], false};
        qsort(ck->entries, (size_t)ck->n_entries, sizeof *ck->entries, entry_cmp);
        for (int i = 1; i < ck->n_entries && ok; i++) {
            if (strcmp(ck->entries[i - 1].t->name, ck->entries[i].t->name) == 0) {
                snprintf(err, (size_t)err_len, "tensor '%s' is stored twice: in %s and in %s",
                         ck->entries[i].t->name, ck->entries[i - 1].file->path,
                         ck->entries[i].file->path);
                ok = false;
            }
        }
    }
    // The index must tell the truth about where each tensor lives.
    if (ok && index) {
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
        for (const cJSON *m = map->child; m && ok; m = m->next) {
            const entry *e = find(ck, m->string);
            const char *base = e ? strrchr(e->file->path, '/') + 1 : NULL;
            if (!e || strcmp(base, m->valuestring) != 0) {
                snprintf(err, (size_t)err_len, "%s: weight_map puts tensor '%s' in %s, which does "
                         "not hold it", ck->listing, m->string, m->valuestring);
                ok = false;
            }
        }
    }
    cJSON_Delete(index);
    return ok;
}

bool checkpoint_open(const char *dir, model_config *cfg, weight_source **out, char *err, int err_len) {
    *out = NULL;
    checkpoint *ck = invar_calloc(1, sizeof *ck, "checkpoint");
    snprintf(ck->dir, sizeof ck->dir, "%s", dir);
    size_t len = strlen(ck->dir);
    while (len > 1 && ck->dir[len - 1] == '/') ck->dir[--len] = '\0';

    char path[4400];
    snprintf(path, sizeof path, "%s/config.json", ck->dir);
    config_json_info info;
    if (!config_json_load(path, cfg, &info, err, err_len) || !open_files(ck, err, err_len)) {
        checkpoint_free(ck);
        return false;
    }
    ck->fp8_block_n = info.fp8_block_n;
    ck->fp8_block_k = info.fp8_block_k;

    // The config against the headers before any list is built from it. A config asking for
    // more tensors than the files hold (num_hidden_layers = 10^6) cannot match: only the first
    // n_entries + 1 names are listed, one of which is missing, so the message names the first
    // missing tensor and the fields, at once and in memory bounded by the files.
    int64_t want = checkpoint_tensor_count(cfg);
    if (want < 0) {
        snprintf(err, (size_t)err_len, "%s: fields 'num_hidden_layers' = %d and "
                 "'n_routed_experts' = %d need more than 2^63 tensors", path,
                 cfg->num_hidden_layers, cfg->n_routed_experts);
        checkpoint_free(ck);
        return false;
    }
    bool too_many = want > ck->n_entries;
    int n = too_many ? ck->n_entries + 1 : (int)want;
    checkpoint_tensor *need = invar_malloc((size_t)n * sizeof *need, "tensor list");
    checkpoint_tensors(cfg, need, n);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = check_tensor(ck, need[i].name, need[i].shape, need[i].ndim, err, err_len);
        if (ok) ck->bytes_total += find(ck, need[i].name)->t->nbytes;
    }
    free(need);
    if (ok && too_many)
        invar_die(INVAR_EXIT_SYSTEM, "%s: %d distinct tensor names all found among %d", dir, n,
                  ck->n_entries);
    if (!ok && too_many) {
        size_t used = strnlen(err, (size_t)err_len);
        snprintf(err + used, (size_t)err_len - used, "; %s: fields 'num_hidden_layers' = %d and "
                 "'n_routed_experts' = %d need %lld tensors, the files hold %d", path,
                 cfg->num_hidden_layers, cfg->n_routed_experts, (long long)want, ck->n_entries);
    }
    if (!ok) {
        checkpoint_free(ck);
        return false;
    }
    ck->progress = isatty(2) == 1;
    ck->bytes_next_report = 256ull << 20;

    weight_source *s = invar_calloc(1, sizeof *s, "weight source");
    s->ctx = ck;
    s->has = ck_has;
    s->read_bf16 = ck_read_bf16;
    s->read_f32 = ck_read_f32;
    s->destroy = ck_destroy;
    *out = s;
    return true;
}
