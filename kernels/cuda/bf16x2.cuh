// kernels/cuda/bf16x2.cuh — fp32 to bf16 on the hardware's converter, with float_to_bf16's
// bits (kernels/bf16.h): the GEMM's epilogues and the MLA merges round through here.
#ifndef INVAR_KERNELS_CUDA_BF16X2_CUH
#define INVAR_KERNELS_CUDA_BF16X2_CUH

#include <stdint.h>         // uint32_t

// Two values rounded to nearest even, lo in the low half: one cvt for both, where float_to_bf16
// takes about eight instructions a value; a NaN keeps its payload, quieted, as float_to_bf16
// keeps it (the hardware would write the canonical NaN).
static __device__ __forceinline__ uint32_t bf16x2_round(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    if (lo != lo) r = (r & 0xffff0000u) | (__float_as_uint(lo) >> 16) | 0x40u;
    if (hi != hi) r = (r & 0x0000ffffu) | (__float_as_uint(hi) & 0xffff0000u) | 0x400000u;
    return r;
}

// The converter alone: bf16x2_round's bits wherever neither value is a NaN (the converter and
// float_to_bf16 agree on every other value, infinities and overflow included). For callers that
// know their values are NaN-free: the NaN fix-ups above are about ten instructions a pair, which
// were most of the GEMM's epilogue.
static __device__ __forceinline__ uint32_t bf16x2_round_no_nan(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#endif
