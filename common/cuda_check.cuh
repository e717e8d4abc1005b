// common/cuda_check.cuh — checked CUDA and cuBLAS calls for every CUDA file: a failure names the
// op and the call, and exits 3 (common/check.h); and device buffers that grow, never per call.
#ifndef INVAR_COMMON_CUDA_CHECK_CUH
#define INVAR_COMMON_CUDA_CHECK_CUH

#include <cublas_v2.h>       // cublasStatus_t, cublasGetStatusString
#include <cuda_runtime.h>    // cudaError_t, cudaGetErrorString, cudaMalloc, cudaFree
#include <stddef.h>          // size_t
#include <stdlib.h>          // getenv
#include <string.h>          // strcmp

#include "check.h"           // invar_die, INVAR_EXIT_SYSTEM

// A kernel's fault (an illegal address, a trap) is sticky and shows at whichever CUDA call comes
// next, named after that call's op: the message says how to have the faulting kernel's launch
// check (CUDA_CHECK_LAUNCH) report it instead.
static inline const char *invar_cuda_fault_hint(cudaError_t err) {
    switch (err) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction: case cudaErrorInvalidPc: case cudaErrorInvalidAddressSpace:
    case cudaErrorHardwareStackError: case cudaErrorAssert:
        break;
    default:
        return "";
    }
    const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    if (blocking && strcmp(blocking, "1") == 0) return " (CUDA_LAUNCH_BLOCKING=1: this op's kernel)";
    return " (a kernel's fault shows at the next CUDA call, which may be another op's: run again "
           "with CUDA_LAUNCH_BLOCKING=1 to have the faulting kernel's op named)";
}

// Every CUDA runtime call goes through CUDA_CHECK(op, call): a failure names the op.
#define CUDA_CHECK(op, call)                                                              \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess)                                                          \
            invar_die(INVAR_EXIT_SYSTEM, "cuda: %s: %s failed: %s%s", (op), #call,        \
                      cudaGetErrorString(err_), invar_cuda_fault_hint(err_));             \
    } while (0)

// After every kernel launch: launch-configuration errors surface here, named.
#define CUDA_CHECK_LAUNCH(op) CUDA_CHECK(op, cudaGetLastError())

#define CUBLAS_CHECK(op, call)                                                            \
    do {                                                                                  \
        cublasStatus_t st_ = (call);                                                      \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                 \
            invar_die(INVAR_EXIT_SYSTEM, "cublas: %s: %s failed: %s", (op), #call,        \
                      cublasGetStatusString(st_));                                        \
    } while (0)

// A cuBLAS handle whose work goes to `stream` (a set's own), for the sets that call cuBLAS.
static inline cublasHandle_t invar_cublas_on_stream(cudaStream_t stream) {
    cublasHandle_t h;
    CUBLAS_CHECK("create", cublasCreate(&h));
    CUBLAS_CHECK("create", cublasSetStream(h, stream));
    return h;
}

// *buf with at least `bytes` (a quarter more when it grows, so slowly growing shapes do not
// grow it again); waits for `stream` before freeing the old buffer.
static inline void *invar_cuda_reserve(void **buf, size_t *have, size_t bytes, cudaStream_t stream,
                                       const char *what) {
    if (bytes <= *have) return *buf;
    CUDA_CHECK(what, cudaStreamSynchronize(stream));
    if (*buf) CUDA_CHECK(what, cudaFree(*buf));
    *buf = NULL;
    *have = 0;
    size_t grown = bytes + bytes / 4;
    cudaError_t err = cudaMalloc(buf, grown);
    if (err != cudaSuccess)
        invar_die(INVAR_EXIT_SYSTEM, "cuda: out of device memory: %s needs %zu bytes: %s", what, grown,
                  cudaGetErrorString(err));
    *have = grown;
    return *buf;
}

#endif
