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

// GEMM_PDL (an experiment: NVCC_DEFINES=-DGEMM_PDL=1): the GEMMs launch as programmatic
// dependents, and the kernels that feed them release them at their start, so a GEMM's CTAs are
// resident and asking L2 for their weights while the kernel before them runs. Off (the default),
// pdl_release_gemm compiles to nothing. It moves when operands arrive, never a bit.
#ifndef GEMM_PDL
#define GEMM_PDL 0
#endif

// In a kernel a GEMM may follow: that GEMM may start up now (it still waits for this grid's end).
static __device__ __forceinline__ void pdl_release_gemm() {
#if GEMM_PDL
    pdl_release_dependent();
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
