// kernels/bf16.h — bf16 <-> float conversion, as every op stores bf16 tensors (kernels/ops.h).
// Header-only so CPU and CUDA code share one definition.
#ifndef INVAR_KERNELS_BF16_H
#define INVAR_KERNELS_BF16_H

#include <stdint.h>  // uint16_t, uint32_t, uint64_t
#include <string.h>  // memcpy

#include "../common/host_device.h"  // INVAR_HD

INVAR_HD float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// Round to nearest even; NaN stays a quiet NaN.
INVAR_HD uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// Value of f after one bf16 rounding.
INVAR_HD float bf16_round(float f) { return bf16_to_float(float_to_bf16(f)); }

#endif
