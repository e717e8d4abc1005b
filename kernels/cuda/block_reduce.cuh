// kernels/cuda/block_reduce.cuh — fixed-shape block reductions. For a given blockDim the
// combination order is fixed: each warp folds by xor-shuffle (16, 8, 4, 2, 1), then warp 0
// folds the warps' results the same way. Same blockDim, same bits.
#ifndef INVAR_KERNELS_CUDA_BLOCK_REDUCE_CUH
#define INVAR_KERNELS_CUDA_BLOCK_REDUCE_CUH

#include <math.h>  // fmaxf

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Every thread of the block gets the result. `red` holds 32 floats of shared memory; the
// call ends with a barrier so `red` may be reused at once.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float *red) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? red[lane] : (MAX ? -INFINITY : 0.0f);
        w = MAX ? warp_max(w) : warp_sum(w);
        // Lane 31 read slot 31 (warp 31's partial) above; the shuffles order nothing for
        // racecheck, so the warp meets before lane 0 overwrites that slot with the result.
        __syncwarp();
        if (lane == 0) red[32 - 1] = w;  // slot 31 is read by everyone after the barrier
    }
    __syncthreads();
    float r = red[31];
    __syncthreads();
    return r;
}

#endif
