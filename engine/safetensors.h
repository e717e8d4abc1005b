// engine/safetensors.h — one memory-mapped .safetensors file: the header validated as the
// format specifies, tensors found by name, and their bytes converted to bf16 / fp32 straight
// into the caller's buffer (so a large checkpoint is never held twice in host memory).
//
// Format: 8-byte little-endian header length N, N bytes of JSON ({"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, ..., optional "__metadata__": {str: str}}), then the data
// region; offsets are relative to the data region, and the tensors cover it exactly.
#ifndef INVAR_ENGINE_SAFETENSORS_H
#define INVAR_ENGINE_SAFETENSORS_H

#include <stdbool.h>          // bool
#include <stddef.h>           // size_t
#include <stdint.h>           // int64_t, uint8_t, uint64_t
#include "../kernels/ops.h"   // bf16

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER_BYTES (100u << 20)  // a header above 100 MB is refused as corrupt

typedef enum {
    ST_BOOL, ST_U8, ST_I8, ST_F8_E4M3, ST_F8_E5M2, ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64,
} st_dtype;

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data;   // inside the mapping
    uint64_t nbytes;
} st_tensor;

typedef struct {
    char *path;
    uint8_t *map;
    size_t map_bytes;
    st_tensor *tensors;    // sorted by name
    int n_tensors;
} st_file;

// Maps and validates `path`. On failure writes a message naming the file into err, leaves
// nothing open and returns false. Never crashes on a corrupt file.
bool st_open(const char *path, st_file *out, char *err, int err_len);
void st_close(st_file *f);

// The tensor called `name`, or NULL.
const st_tensor *st_find(const st_file *f, const char *name);

const char *st_dtype_name(st_dtype d);
int st_dtype_bytes(st_dtype d);

// Whether t's elements can be converted to floats here (BF16, F16, F32, F8_E4M3).
bool st_dtype_is_float(st_dtype d);

// Element conversion to bf16 / fp32 of a BF16, F16 or F32 tensor (F8 needs its scales; other
// dtypes are refused by the caller before it gets here). Exact where the target holds the
// value; otherwise one round-to-nearest-even.
void st_to_bf16(const st_tensor *t, bf16 *dst);
void st_to_f32(const st_tensor *t, float *dst);

// FP8 (E4M3, "fn": no infinities) block-quantized weight [N, K] with its scale_inv
// [ceil(N/block_n), ceil(K/block_k)] (F32 or BF16), as DeepSeek-V3 ships them:
// value = fp8 * scale_inv of its block, computed in fp32, rounded to bf16 (or kept fp32).
// st_fp8_scales_ok checks the pairing; on a problem writes why into err.
bool st_fp8_scales_ok(const st_tensor *w, const st_tensor *scale_inv, int block_n, int block_k,
                      char *err, int err_len);
void st_fp8_dequant_bf16(const st_tensor *w, const st_tensor *scale_inv, int block_n, int block_k,
                         bf16 *dst);
void st_fp8_dequant_f32(const st_tensor *w, const st_tensor *scale_inv, int block_n, int block_k,
                        float *dst);

// One FP8 E4M3 byte as a float (NaN for 0x7f / 0xff).
float st_fp8_e4m3_to_float(uint8_t b);

// Tells the kernel a tensor's pages are no longer needed (the file stays mapped): keeps the
// resident set of a process loading a huge checkpoint near one tensor, not the whole file.
void st_release_pages(const st_file *f, const st_tensor *t);

#endif
