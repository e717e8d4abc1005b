// engine/safetensors.c — memory-mapped safetensors files: header validation and dtype
// conversion (engine/safetensors.h).
#include "safetensors.h"

#include <cjson/cJSON.h>   // cJSON_ParseWithLengthOpts, cJSON_GetObjectItemCaseSensitive
#include <errno.h>         // errno
#include <fcntl.h>         // open, O_RDONLY
#include <math.h>          // floor, ldexpf, NAN
#include <stdlib.h>        // qsort, bsearch, free
#include <string.h>        // strcmp, strerror, memcpy, strdup
#include <sys/mman.h>      // mmap, munmap, madvise
#include <sys/stat.h>      // fstat
#include <unistd.h>        // close, sysconf

#include "../kernels/bf16.h"   // float_to_bf16, bf16_to_float
#include "../common/check.h"  // invar_die, invar_calloc, invar_fail, INVAR_EXIT_SYSTEM

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader assumes a little-endian host"
#endif

#define MAX_EXACT_INT 9007199254740992.0  // 2^53: larger JSON numbers are not exact doubles

// ---------------------------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------------------------

static const struct {
    const char *name;
    int bytes;
} dtype_info[] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_I16] = {"I16", 2},         [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},         [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};
#define N_DTYPES ((int)(sizeof dtype_info / sizeof dtype_info[0]))

const char *st_dtype_name(st_dtype d) { return dtype_info[d].name; }
int st_dtype_bytes(st_dtype d) { return dtype_info[d].bytes; }

bool st_dtype_is_float(st_dtype d) {
    return d == ST_BF16 || d == ST_F16 || d == ST_F32 || d == ST_F8_E4M3;
}

static bool dtype_from_name(const char *s, st_dtype *out) {
    for (int i = 0; i < N_DTYPES; i++) {
        if (strcmp(dtype_info[i].name, s) == 0) {
            *out = (st_dtype)i;
            return true;
        }
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Header validation
// ---------------------------------------------------------------------------------------------

// A JSON number that is an integer in [0, 2^53].
static bool json_count(const cJSON *item, int64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0 && v <= MAX_EXACT_INT) || v != floor(v)) return false;
    *out = (int64_t)v;
    return true;
}

static bool parse_tensor_entry(const char *path, const cJSON *entry, st_tensor *t, uint64_t *begin,
                               uint64_t *end, char *err, int err_len) {
    if (!cJSON_IsObject(entry))
        return invar_fail(err, (size_t)err_len, "%s: header entry '%s' is not an object", path, t->name);
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *k = entry->child; k; k = k->next) {
        if (strcmp(k->string, "dtype") == 0 && !dtype) dtype = k;
        else if (strcmp(k->string, "shape") == 0 && !shape) shape = k;
        else if (strcmp(k->string, "data_offsets") == 0 && !offsets) offsets = k;
        else
            return invar_fail(err, (size_t)err_len, "%s: tensor '%s': unexpected or repeated key '%s'", path,
                        t->name, k->string);
    }
    if (!cJSON_IsString(dtype) || !dtype_from_name(dtype->valuestring, &t->dtype))
        return invar_fail(err, (size_t)err_len, "%s: tensor '%s': missing or unknown dtype%s%s", path, t->name,
                    cJSON_IsString(dtype) ? " " : "", cJSON_IsString(dtype) ? dtype->valuestring : "");
    if (!cJSON_IsArray(shape))
        return invar_fail(err, (size_t)err_len, "%s: tensor '%s': missing shape", path, t->name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return invar_fail(err, (size_t)err_len, "%s: tensor '%s': %d dimensions (at most %d)", path, t->name, ndim,
                    ST_MAX_DIMS);
    t->ndim = ndim;
    int64_t numel = 1;
    int d = 0;
    for (const cJSON *s = shape->child; s; s = s->next, d++) {
        if (!json_count(s, &t->shape[d]))
            return invar_fail(err, (size_t)err_len, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                        path, t->name, d);
        if (t->shape[d] != 0 && numel > INT64_MAX / 16 / t->shape[d])
            return invar_fail(err, (size_t)err_len, "%s: tensor '%s': absurd shape (element count overflows)",
                        path, t->name);
        numel *= t->shape[d];
    }
    t->numel = numel;
    t->nbytes = (uint64_t)numel * (uint64_t)st_dtype_bytes(t->dtype);
    int64_t b, e;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_count(offsets->child, &b) || !json_count(offsets->child->next, &e) || e < b)
        return invar_fail(err, (size_t)err_len, "%s: tensor '%s': data_offsets must be [begin, end] with "
                    "0 <= begin <= end", path, t->name);
    if ((uint64_t)(e - b) != t->nbytes)
        return invar_fail(err, (size_t)err_len, "%s: tensor '%s': data_offsets span %lld bytes, but %s x %lld "
                    "elements need %llu", path, t->name, (long long)(e - b),
                    st_dtype_name(t->dtype), (long long)numel, (unsigned long long)t->nbytes);
    *begin = (uint64_t)b;
    *end = (uint64_t)e;
    return true;
}

typedef struct {
    uint64_t begin, end;
    int index;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int tensor_name_cmp(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

// Parses the JSON header and fills f->tensors; data_bytes is the size of the data region.
static bool parse_header(st_file *f, const char *json, size_t json_len, uint64_t data_bytes,
                         char *err, int err_len) {
    const char *path = f->path;
    if (json_len == 0 || json[0] != '{')
        return invar_fail(err, (size_t)err_len, "%s: header does not start with '{' (not a safetensors file?)", path);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, json_len, &end, false);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return invar_fail(err, (size_t)err_len, "%s: header is not a JSON object", path);
    }
    // The format allows trailing spaces as padding; anything else is corruption.
    for (const char *p = end; p < json + json_len; p++) {
        if (*p != ' ') {
            cJSON_Delete(root);
            return invar_fail(err, (size_t)err_len, "%s: unexpected bytes after the header's JSON object", path);
        }
    }

    int n = 0;
    for (const cJSON *k = root->child; k; k = k->next)
        if (strcmp(k->string, "__metadata__") != 0) n++;
    f->tensors = invar_calloc((size_t)n, sizeof *f->tensors, "safetensors tensor table");
    span *spans = invar_calloc((size_t)n, sizeof *spans, "safetensors offsets");
    bool ok = true;
    int i = 0;
    for (const cJSON *k = root->child; k && ok; k = k->next) {
        if (strcmp(k->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(k)) {
                ok = invar_fail(err, (size_t)err_len, "%s: __metadata__ is not an object", path);
                break;
            }
            for (const cJSON *m = k->child; m && ok; m = m->next)
                if (!cJSON_IsString(m))
                    ok = invar_fail(err, (size_t)err_len, "%s: __metadata__ value '%s' is not a string", path,
                              m->string);
            continue;
        }
        if (k->string[0] == '\0') {
            ok = invar_fail(err, (size_t)err_len, "%s: a tensor has an empty name", path);
            break;
        }
        st_tensor *t = &f->tensors[i];
        t->name = strdup(k->string);
        if (!t->name) invar_die(INVAR_EXIT_SYSTEM, "out of host memory reading %s", path);
        f->n_tensors = ++i;
        spans[i - 1].index = i - 1;
        ok = parse_tensor_entry(path, k, t, &spans[i - 1].begin, &spans[i - 1].end, err, err_len);
    }
    cJSON_Delete(root);

    // The tensors must tile the data region exactly: sorted by offset, each starts where the
    // previous ended, and the last ends at the end of the file.
    if (ok) {
        qsort(spans, (size_t)n, sizeof *spans, span_cmp);
        uint64_t expect = 0;
        for (int s = 0; s < n && ok; s++) {
            if (spans[s].begin != expect)
                ok = invar_fail(err, (size_t)err_len, "%s: tensor '%s' starts at data offset %llu, expected %llu "
                          "(offsets leave a gap or overlap)", path, f->tensors[spans[s].index].name,
                          (unsigned long long)spans[s].begin, (unsigned long long)expect);
            expect = spans[s].end;
        }
        if (ok && expect != data_bytes)
            ok = invar_fail(err, (size_t)err_len, "%s: tensors cover %llu bytes but the data region holds %llu "
                      "(truncated or padded file)", path, (unsigned long long)expect,
                      (unsigned long long)data_bytes);
    }
    if (ok) {
        const uint8_t *data = f->map + (f->map_bytes - data_bytes);
        for (int s = 0; s < n; s++) f->tensors[spans[s].index].data = data + spans[s].begin;
        qsort(f->tensors, (size_t)n, sizeof *f->tensors, tensor_name_cmp);
        for (int s = 1; s < n && ok; s++)
            if (strcmp(f->tensors[s - 1].name, f->tensors[s].name) == 0)
                ok = invar_fail(err, (size_t)err_len, "%s: tensor '%s' appears twice", path, f->tensors[s].name);
    }
    free(spans);
    return ok;
}

// ---------------------------------------------------------------------------------------------
// Open / close / find
// ---------------------------------------------------------------------------------------------

static void st_reset(st_file *f) {
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    if (f->map) munmap(f->map, f->map_bytes);
    free(f->path);
    memset(f, 0, sizeof *f);
}

bool st_open(const char *path, st_file *out, char *err, int err_len) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return invar_fail(err, (size_t)err_len, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return invar_fail(err, (size_t)err_len, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return invar_fail(err, (size_t)err_len, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        close(fd);
        return invar_fail(err, (size_t)err_len, "%s: %llu bytes, shorter than the 8-byte header length "
                    "(truncated file)", path, (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    if (close(fd) != 0 && map != MAP_FAILED) {
        munmap(map, (size_t)size);
        return invar_fail(err, (size_t)err_len, "%s: close: %s", path, strerror(errno));
    }
    if (map == MAP_FAILED) return invar_fail(err, (size_t)err_len, "%s: mmap: %s", path, strerror(map_errno));
    out->map = map;
    out->map_bytes = (size_t)size;
    out->path = strdup(path);
    if (!out->path) invar_die(INVAR_EXIT_SYSTEM, "out of host memory opening %s", path);

    uint64_t header_len = 0;
    for (int b = 7; b >= 0; b--) header_len = header_len << 8 | out->map[b];
    bool ok = true;
    if (header_len > ST_MAX_HEADER_BYTES)
        ok = invar_fail(err, (size_t)err_len, "%s: header length %llu exceeds the %u-byte limit (corrupt file)",
                  path, (unsigned long long)header_len, ST_MAX_HEADER_BYTES);
    else if (header_len > size - 8)
        ok = invar_fail(err, (size_t)err_len, "%s: header length %llu runs past the end of the %llu-byte file "
                  "(truncated file)", path, (unsigned long long)header_len,
                  (unsigned long long)size);
    else
        ok = parse_header(out, (const char *)out->map + 8, (size_t)header_len,
                          size - 8 - header_len, err, err_len);
    if (!ok) st_reset(out);
    return ok;
}

void st_close(st_file *f) { st_reset(f); }

static int find_cmp(const void *key, const void *elem) {
    return strcmp((const char *)key, ((const st_tensor *)elem)->name);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    if (f->n_tensors == 0) return NULL;
    return bsearch(name, f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, find_cmp);
}

void st_release_pages(const st_file *f, const st_tensor *t) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)t->data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->nbytes) & ~(page - 1);
    if (hi <= lo) return;
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "madvise(MADV_DONTNEED) on %s, tensor '%s': %s", f->path,
                  t->name, strerror(errno));
}

// ---------------------------------------------------------------------------------------------
// Conversion. Data may sit at any byte offset, so elements are read with memcpy.
// ---------------------------------------------------------------------------------------------

static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);           // inf / NaN
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13);   // normal: rebias 15 -> 127
    } else {
        float v = ldexpf((float)man, -24);              // subnormal (or zero): exact
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float st_fp8_e4m3_to_float(uint8_t b) {
    int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
    float v;
    if (exp == 0xf && man == 7) v = NAN;                  // the "fn" variant's only NaN
    else if (exp == 0) v = ldexpf((float)man, -9);        // subnormal: man/8 * 2^-6
    else v = ldexpf((float)(8 + man), exp - 10);          // (1 + man/8) * 2^(exp-7)
    return sign ? -v : v;
}

static float element_f32(const st_tensor *t, int64_t i) {
    switch (t->dtype) {
    case ST_BF16: {
        uint16_t h;
        memcpy(&h, t->data + 2 * i, 2);
        return bf16_to_float(h);
    }
    case ST_F16: {
        uint16_t h;
        memcpy(&h, t->data + 2 * i, 2);
        return f16_to_float(h);
    }
    case ST_F32: {
        float f;
        memcpy(&f, t->data + 4 * i, 4);
        return f;
    }
    default:
        invar_die(INVAR_EXIT_INPUT, "tensor '%s': dtype %s cannot be converted without its scales",
                  t->name, st_dtype_name(t->dtype));
    }
}

void st_to_bf16(const st_tensor *t, bf16 *dst) {
    if (t->dtype == ST_BF16) {
        memcpy(dst, t->data, (size_t)t->nbytes);
        return;
    }
    for (int64_t i = 0; i < t->numel; i++) dst[i] = float_to_bf16(element_f32(t, i));
}

void st_to_f32(const st_tensor *t, float *dst) {
    if (t->dtype == ST_F32) {
        memcpy(dst, t->data, (size_t)t->nbytes);
        return;
    }
    for (int64_t i = 0; i < t->numel; i++) dst[i] = element_f32(t, i);
}

// ---------------------------------------------------------------------------------------------
// FP8 block dequantization
// ---------------------------------------------------------------------------------------------

bool st_fp8_scales_ok(const st_tensor *w, const st_tensor *s, int block_n, int block_k, char *err,
                      int err_len) {
    if (w->ndim != 2)
        return invar_fail(err, (size_t)err_len, "tensor '%s': F8_E4M3 weights must be 2-D", w->name);
    if (!s)
        return invar_fail(err, (size_t)err_len, "tensor '%s' is F8_E4M3 but '%s_scale_inv' is missing", w->name,
                    w->name);
    if (s->dtype != ST_F32 && s->dtype != ST_BF16)
        return invar_fail(err, (size_t)err_len, "tensor '%s': dtype %s, expected F32 block scales", s->name,
                    st_dtype_name(s->dtype));
    int64_t sn = (w->shape[0] + block_n - 1) / block_n, sk = (w->shape[1] + block_k - 1) / block_k;
    if (s->ndim != 2 || s->shape[0] != sn || s->shape[1] != sk)
        return invar_fail(err, (size_t)err_len, "tensor '%s': scales must have shape [%lld, %lld] for a "
                    "[%lld, %lld] weight in %dx%d blocks", s->name, (long long)sn, (long long)sk,
                    (long long)w->shape[0], (long long)w->shape[1], block_n, block_k);
    return true;
}

// Calls emit(dst, i, value) for every element, value = fp8 * scale_inv of its block in fp32.
#define FP8_DEQUANT(w, s, block_n, block_k, STORE)                                            \
    do {                                                                                      \
        float lut[256];                                                                       \
        for (int b = 0; b < 256; b++) lut[b] = st_fp8_e4m3_to_float((uint8_t)b);              \
        int64_t N = (w)->shape[0], K = (w)->shape[1], SK = (s)->shape[1];                     \
        for (int64_t r = 0; r < N; r++) {                                                     \
            const uint8_t *row = (w)->data + r * K;                                           \
            int64_t srow = (r / (block_n)) * SK;                                              \
            for (int64_t c = 0; c < K; c++) {                                                 \
                float v = lut[row[c]] * element_f32((s), srow + c / (block_k));               \
                STORE(r * K + c, v);                                                          \
            }                                                                                 \
        }                                                                                     \
    } while (0)

void st_fp8_dequant_bf16(const st_tensor *w, const st_tensor *s, int block_n, int block_k,
                         bf16 *dst) {
#define STORE_BF16(i, v) dst[i] = float_to_bf16(v)
    FP8_DEQUANT(w, s, block_n, block_k, STORE_BF16);
#undef STORE_BF16
}

void st_fp8_dequant_f32(const st_tensor *w, const st_tensor *s, int block_n, int block_k,
                        float *dst) {
#define STORE_F32(i, v) dst[i] = (v)
    FP8_DEQUANT(w, s, block_n, block_k, STORE_F32);
#undef STORE_F32
}
