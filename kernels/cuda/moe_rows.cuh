// kernels/cuda/moe_rows.cuh — moe_combine's two forms for every set's combine kernel: bf16 expert
// rows in and a rounded sum out, or (TP-size invariance, out_f32 set) fp32 rows in and the sum
// stored unrounded.
#ifndef INVAR_KERNELS_CUDA_MOE_ROWS_CUH
#define INVAR_KERNELS_CUDA_MOE_ROWS_CUH

#include <stdint.h>      // uint16_t
#include "../bf16.h"     // bf16_to_float, float_to_bf16
#include "../ops.h"      // moe_combine_args

// The rows a combine reads and where its sums go, in the form the call asks for.
typedef struct {
    void *out;
    const void *rows;
    bool f32;
} moe_combine_io;

static inline moe_combine_io moe_combine_io_of(const moe_combine_args *a) {
    const bool f32 = a->out_f32 != NULL;
    return {f32 ? (void *)a->out_f32 : (void *)a->out,
            f32 ? (const void *)a->expert_out_f32 : (const void *)a->expert_out, f32};
}

#ifdef __CUDACC__
// Element `at` of the expert rows, as fp32.
template <bool F32>
__device__ __forceinline__ float moe_row_value(const void *rows, long at) {
    return F32 ? ((const float *)rows)[at] : bf16_to_float(((const uint16_t *)rows)[at]);
}

// Sum i of the combine: rounded to bf16 once, or stored as it is.
template <bool F32>
__device__ __forceinline__ void moe_combine_store(void *out, long i, float s) {
    if (F32) ((float *)out)[i] = s;
    else ((uint16_t *)out)[i] = float_to_bf16(s);
}
#endif

#endif
