// kernels/cuda/pdl.cuh — programmatic dependent launch (sm_90+): a kernel that only consumes its
// predecessor's output starts while the predecessor runs, overlapping its launch with the tail.
// No arithmetic changes: it waits for the whole predecessor grid before touching memory.
#ifndef INVAR_KERNELS_CUDA_PDL_CUH
#define INVAR_KERNELS_CUDA_PDL_CUH

#include <cuda_runtime.h>   // cudaLaunchKernelEx, cudaLaunchConfig_t, cudaLaunchAttribute

#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK

// In the dependent, before its first global access: waits for the predecessor grids' writes.
static __device__ __forceinline__ void pdl_wait_predecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// In the predecessor: this block no longer holds the dependent back. Safe anywhere: the
// dependent still waits for this grid's completion.
static __device__ __forceinline__ void pdl_release_dependent() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// k<<<grid, block, smem, c->stream>>>(args...) as a programmatic dependent where c->pdl.
template <typename... KernelArgs, typename... Args>
static void pdl_launch(cuda_ctx *c, void (*k)(KernelArgs...), dim3 grid, dim3 block, size_t smem, const char *op,
                       Args... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = attr;
    cfg.numAttrs = c->pdl ? 1 : 0;
    CUDA_CHECK(op, cudaLaunchKernelEx(&cfg, k, args...));
}

#endif
