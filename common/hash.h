// common/hash.h — the counter-based hash behind sampling noise, synthetic weights, prompts and
// arrival schedules, and the Gumbel noise of sampling. Header-only so CPU and CUDA code share
// one definition.
#ifndef INVAR_COMMON_HASH_H
#define INVAR_COMMON_HASH_H

#include <math.h>            // logf
#include <stdint.h>          // int32_t, uint32_t, uint64_t

#include "host_device.h"     // INVAR_HD

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
INVAR_HD float invar_gumbel_noise(uint64_t seed, int32_t position, int32_t id) {
    uint64_t h = invar_mix64(seed ^ invar_mix64(((uint64_t)(uint32_t)position << 32) |
                                                (uint32_t)id));
    return -logf(-logf(invar_uniform(h)));
}

#endif
