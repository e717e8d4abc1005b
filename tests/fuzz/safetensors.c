// tests/fuzz/safetensors.c — fuzz target: a .safetensors file (engine/safetensors.c): the
// header's validation, and for an accepted file every tensor looked up by name and converted
// (FP8 ones with their scales when the pairing is valid), so the offsets it accepted are read.
#include <stdbool.h>                   // bool
#include <stdlib.h>                    // malloc, free

#include "../../engine/safetensors.h"  // st_open, st_find, st_to_f32, st_fp8_*
#include "fuzz_input.h"                // fuzz_memfd, fuzz_close, fuzz_require

// Bigger tensors are looked up but not converted: a few MB per input keeps the fuzzer fast.
enum { MAX_CONVERTED_ELEMENTS = 1 << 16 };

static void convert(const st_file *f, const st_tensor *t) {
    if (!st_dtype_is_float(t->dtype) || t->numel > MAX_CONVERTED_ELEMENTS) return;
    float *dst = malloc((size_t)t->numel * sizeof *dst + 1);
    bf16 *dst_bf16 = malloc((size_t)t->numel * sizeof *dst_bf16 + 1);
    fuzz_require(dst && dst_bf16, "malloc");
    if (t->dtype == ST_F8_E4M3) {
        char name[4096], err[1024];
        snprintf(name, sizeof name, "%s_scale_inv", t->name);
        const st_tensor *scale = st_find(f, name);
        if (st_fp8_scales_ok(t, scale, 128, 128, err, sizeof err) &&
            scale->numel <= MAX_CONVERTED_ELEMENTS) {
            st_fp8_dequant_f32(t, scale, 128, 128, dst);
            st_fp8_dequant_bf16(t, scale, 128, 128, dst_bf16);
        }
    } else {
        st_to_f32(t, dst);
        st_to_bf16(t, dst_bf16);
    }
    free(dst);
    free(dst_bf16);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[1024];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    st_file f;
    if (st_open(path, &f, err, sizeof err)) {
        for (int i = 0; i < f.n_tensors; i++) {
            fuzz_require(st_find(&f, f.tensors[i].name) == &f.tensors[i], "st_find");
            convert(&f, &f.tensors[i]);
        }
        st_close(&f);
    }
    fuzz_close(fd);
    return 0;
}
