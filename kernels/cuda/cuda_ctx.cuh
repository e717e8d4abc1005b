// kernels/cuda/cuda_ctx.cuh — the state both CUDA kernel sets keep in ops_set.ctx, the error
// macros every CUDA file uses, and device scratch that grows rarely and never per call.
//
// The invariant and the reference set share this struct so the reference set can reuse the
// invariant ops that are batch-invariant by nature, and so the benchmark's timer can record
// events on either set's stream.
#ifndef INVAR_KERNELS_CUDA_CUDA_CTX_CUH
#define INVAR_KERNELS_CUDA_CUDA_CTX_CUH

#include <cuda_runtime.h>   // cudaStream_t, cudaError_t, cudaGetErrorString
#include <cublas_v2.h>      // cublasHandle_t, cublasStatus_t
#include <stddef.h>         // size_t

#include "../ops.h"         // ops_set

#include "../../common/check.h"  // invar_die, invar_calloc, INVAR_EXIT_*

// Every CUDA runtime call goes through CUDA_CHECK(op, call): a failure names the op.
#define CUDA_CHECK(op, call)                                                              \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess)                                                          \
            invar_die(INVAR_EXIT_SYSTEM, "cuda: %s: %s failed: %s", (op), #call,          \
                      cudaGetErrorString(err_));                                          \
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

// Named scratch slots. Each grows to the largest size asked for and is kept.
enum cuda_scratch_slot {
    SCRATCH_MLA_PARTIAL,    // split-KV partial outputs (fp32) and their max / sum
    SCRATCH_MOE_LISTS,      // per-expert row lists and offsets
    SCRATCH_MOE_GATE_UP,    // compact [rows, 2I] bf16
    SCRATCH_MOE_ACT,        // compact [rows, I] bf16
    SCRATCH_REF_COMBINE,    // the reference combine's fp32 atomic accumulator
    SCRATCH_SLOTS
};

typedef struct {
    cudaStream_t stream;    // all work of the set goes here
    int device;
    int num_sms;
    size_t smem_optin;      // most dynamic shared memory one block may opt into
    bool wgmma;             // compute capability 9.0: the sm_90a code (wgmma) runs here
    void *tensor_map_encode; // the driver's cuTensorMapEncodeTiled (NULL: no TMA loads)
    void *scratch[SCRATCH_SLOTS];
    size_t scratch_bytes[SCRATCH_SLOTS];
    cublasHandle_t cublas;  // reference set only; NULL in the invariant set
} cuda_ctx;

static inline cuda_ctx *cuda_ctx_of(ops_set *ops) { return (cuda_ctx *)ops->ctx; }

// Returns scratch slot `slot` with at least `bytes`; grows (synchronizing first) only when a
// call needs more than any call before it.
void *cuda_scratch(cuda_ctx *c, int slot, size_t bytes, const char *what);

// Context setup shared by both sets: device probe, stream, properties. Exits when no device.
void cuda_ctx_init(cuda_ctx *c, const char *set_name);
void cuda_ctx_free(cuda_ctx *c);

#endif
