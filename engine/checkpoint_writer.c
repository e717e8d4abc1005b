// engine/checkpoint_writer.c — checkpoint directories from weight sources
// (engine/checkpoint_writer.h).
#include "checkpoint_writer.h"

#include <cjson/cJSON.h>   // cJSON_CreateObject, cJSON_PrintUnformatted
#include <errno.h>         // errno, EEXIST
#include <stdint.h>        // uint64_t, uint8_t
#include <stdio.h>         // fopen, fwrite, fclose, snprintf
#include <stdlib.h>        // free
#include <string.h>        // strlen, strerror
#include <sys/stat.h>      // mkdir

#include "../common/check.h"  // invar_malloc, invar_die
#include "checkpoint.h"        // checkpoint_tensors, checkpoint_tensor
#include "config_json.h"       // config_json_format

#define PATH_BYTES 4400

static bool sys_fail(char *err, int err_len, const char *what, const char *path) {
    snprintf(err, (size_t)err_len, "%s: %s: %s", path, what, strerror(errno));
    return false;
}

static bool write_all(FILE *f, const void *data, size_t bytes, const char *path, char *err, int err_len) {
    if (bytes && fwrite(data, 1, bytes, f) != bytes) return sys_fail(err, err_len, "write", path);
    return true;
}

static bool finish_file(FILE *f, bool ok, const char *path, char *err, int err_len) {
    if (fclose(f) != 0 && ok) return sys_fail(err, err_len, "close", path);
    return ok;
}

static bool write_text(const char *path, const char *text, char *err, int err_len) {
    FILE *f = fopen(path, "wb");
    if (!f) return sys_fail(err, err_len, "cannot create", path);
    bool ok = write_all(f, text, strlen(text), path, err, err_len) &&
              write_all(f, "\n", 1, path, err, err_len);
    return finish_file(f, ok, path, err, err_len);
}

static uint64_t tensor_bytes(const checkpoint_tensor *t) {
    uint64_t n = (uint64_t)t->shape[0] * (uint64_t)(t->ndim > 1 ? t->shape[1] : 1);
    return n * (t->f32 ? 4u : 2u);
}

// One safetensors file: header (padded with spaces to 8 bytes, as the reference writer does),
// then each tensor read from `src` into `buf` and written out.
static bool write_shard(const char *path, const checkpoint_tensor *ts, int n, weight_source *src,
                        void *buf, char *err, int err_len) {
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, ts[i].name);
        cJSON_AddStringToObject(e, "dtype", ts[i].f32 ? "F32" : "BF16");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < ts[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].shape[d]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
        offset += tensor_bytes(&ts[i]);
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
    }
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!json) invar_die(INVAR_EXIT_SYSTEM, "out of host memory formatting %s", path);
    size_t len = strlen(json), padded = (len + 7) / 8 * 8;
    uint8_t len_le[8];
    for (int b = 0; b < 8; b++) len_le[b] = (uint8_t)((uint64_t)padded >> (8 * b));

    FILE *f = fopen(path, "wb");
    if (!f) {
        free(json);
        return sys_fail(err, err_len, "cannot create", path);
    }
    bool ok = write_all(f, len_le, 8, path, err, err_len) &&
              write_all(f, json, len, path, err, err_len) &&
              write_all(f, "       ", padded - len, path, err, err_len);
    free(json);
    for (int i = 0; i < n && ok; i++) {
        const checkpoint_tensor *t = &ts[i];
        if (t->f32) src->read_f32(src, t->name, t->shape, t->ndim, buf);
        else src->read_bf16(src, t->name, t->shape, t->ndim, buf);
        ok = write_all(f, buf, (size_t)tensor_bytes(t), path, err, err_len);
    }
    return finish_file(f, ok, path, err, err_len);
}

bool checkpoint_write(const char *dir, const model_config *cfg, weight_source *src, int shards,
                      char *err, int err_len) {
    if (shards < 0 || shards > 99999) {
        snprintf(err, (size_t)err_len, "shards must be in [0, 99999], got %d", shards);
        return false;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return sys_fail(err, err_len, "mkdir", dir);
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *config = config_json_format(cfg, err, err_len);
    if (!config) return false;
    bool ok = write_text(path, config, err, err_len);
    free(config);
    if (!ok) return false;

    int n = checkpoint_tensors(cfg, NULL, 0);
    checkpoint_tensor *ts = invar_malloc((size_t)n * sizeof *ts, "tensor list");
    checkpoint_tensors(cfg, ts, n);
    uint64_t total = 0, largest = 0;
    for (int i = 0; i < n; i++) {
        total += tensor_bytes(&ts[i]);
        if (tensor_bytes(&ts[i]) > largest) largest = tensor_bytes(&ts[i]);
    }
    int files = shards == 0 ? 1 : shards;
    if (files > n) {
        snprintf(err, (size_t)err_len, "%d shards for %d tensors: at most one shard per tensor",
                 files, n);
        free(ts);
        return false;
    }
    void *buf = invar_malloc((size_t)largest, "tensor write buffer");
    cJSON *index = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON *map = cJSON_AddObjectToObject(index, "weight_map");

    // Shards of about equal size, in load order, each holding at least one tensor.
    int begin = 0;
    uint64_t written = 0;
    for (int s = 0; s < files && ok; s++) {
        int left = files - s;
        uint64_t target = (total - written) / (uint64_t)left, bytes = 0;
        int end = begin;
        while (end < n - (left - 1) && (end == begin || bytes + tensor_bytes(&ts[end]) / 2 < target))
            bytes += tensor_bytes(&ts[end++]);
        if (s == files - 1) end = n;
        char name[64];
        if (shards == 0) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, files);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        ok = write_shard(path, ts + begin, end - begin, src, buf, err, err_len);
        for (int i = begin; i < end; i++) {
            written += tensor_bytes(&ts[i]);
            cJSON_AddStringToObject(map, ts[i].name, name);
        }
        begin = end;
    }
    if (ok && shards > 0) {
        char *json = cJSON_Print(index);
        if (!json) invar_die(INVAR_EXIT_SYSTEM, "out of host memory formatting the index");
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        ok = write_text(path, json, err, err_len);
        free(json);
    }
    cJSON_Delete(index);
    free(buf);
    free(ts);
    return ok;
}
