// kernels/cuda/bf16x2.cuh — fp32 to bf16 on the hardware's converter, with float_to_bf16's
// bits (kernels/bf16.h): the GEMM's epilogues and the MLA merges round through here.
#ifndef INVAR_KERNELS_CUDA_BF16X2_CUH
#define INVAR_KERNELS_CUDA_BF16X2_CUH

#include <stdint.h>         // uint32_t

// Two values rounded to nearest even, lo in the low half: one cvt for both; a NaN keeps its
// payload, quieted, as in float_to_bf16 (the hardware would write the canonical NaN).
static __device__ __forceinline__ uint32_t bf16x2_round(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    if (lo != lo) r = (r & 0xffff0000u) | (__float_as_uint(lo) >> 16) | 0x40u;
    if (hi != hi) r = (r & 0x0000ffffu) | (__float_as_uint(hi) & 0xffff0000u) | 0x400000u;
    return r;
}

// The converter alone: bf16x2_round's bits wherever neither value is a NaN, for callers that
// know it (the NaN fix-ups are about ten instructions a pair).
static __device__ __forceinline__ uint32_t bf16x2_round_no_nan(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// acc + b * 0, pair by pair: once a b held a NaN or an infinity, a half of acc stays a NaN. For
// callers rounding on the converter alone and again with the fix-ups where a NaN came out.
static __device__ __forceinline__ uint32_t bf16x2_nan_track(uint32_t acc, uint32_t b) {
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(b), "r"(0u), "r"(acc));
    return r;
}

// Whether a half of x is a NaN (its exponent all ones and its fraction not zero).
static __device__ __forceinline__ bool bf16x2_any_nan(uint32_t x) {
    return (((x & 0x7fff7fffu) + 0x007f007fu) & 0x80008000u) != 0;
}

#endif
