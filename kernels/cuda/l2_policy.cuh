// kernels/cuda/l2_policy.cuh — L2 cache policies (createpolicy): a hint about where lines wait
// in L2, never about which bytes arrive. Valid on sm_90a and compute_90 alike.
#ifndef INVAR_KERNELS_CUDA_L2_POLICY_CUH
#define INVAR_KERNELS_CUDA_L2_POLICY_CUH

#include <stdint.h>  // uint64_t

// A policy for data read once: its lines are the first L2 gives up.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

// A policy for data written now and read back by a later kernel: its lines are the last L2
// gives up.
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

#endif
