// kernels/bf16.h — bf16 <-> float conversion and the counter-based hash behind sampling noise
// and synthetic weights. Header-only so CPU and CUDA code share one definition.
#ifndef INVAR_KERNELS_BF16_H
#define INVAR_KERNELS_BF16_H

#include <math.h>    // logf
#include <stdint.h>  // uint16_t, uint32_t, uint64_t
#include <string.h>  // memcpy

#ifdef __CUDACC__
#define INVAR_HD __host__ __device__ __forceinline__
#else
#define INVAR_HD static inline
#endif

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

// splitmix64's finalizer: a bijective mix, good enough to turn counters into noise.
INVAR_HD uint64_t invar_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Uniform in (0, 1) from a 64-bit counter hash: 24 bits, never 0 or 1.
INVAR_HD float invar_uniform(uint64_t h) {
    return ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

// Gumbel noise for vocabulary id `id` at `position` of the request whose noise seed is `seed`
// (the case seed mixed with the request's seed). Depends on nothing else, by construction.
INVAR_HD float ops_gumbel_noise(uint64_t seed, int32_t position, int32_t id) {
    uint64_t h = invar_mix64(seed ^ invar_mix64(((uint64_t)(uint32_t)position << 32) |
                                                (uint32_t)id));
    return -logf(-logf(invar_uniform(h)));
}

#endif
