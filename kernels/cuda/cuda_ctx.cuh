// kernels/cuda/cuda_ctx.cuh — the state the invariant CUDA set keeps in ops_set.ctx (shared by
// every set built on it through inv_cuda_init), and device scratch that grows rarely, never per
// call. Private to kernels/cuda: other folders use inv_cuda.h and inv_cuda_launch.h.
#ifndef INVAR_KERNELS_CUDA_CUDA_CTX_CUH
#define INVAR_KERNELS_CUDA_CUDA_CTX_CUH

#include <cuda_runtime.h>   // cudaStream_t, cudaError_t, cudaGetErrorString
#include <stddef.h>         // size_t

#include "../ops.h"         // ops_set

#include "../../common/check.h"        // invar_die, invar_calloc, INVAR_EXIT_*
#include "../../common/cuda_check.cuh" // CUDA_CHECK, CUDA_CHECK_LAUNCH, CUBLAS_CHECK

// Scratch slots, each grown to the largest size asked for and kept.
enum cuda_scratch_slot {
    SCRATCH_MLA_PARTIAL,    // split-KV partial outputs (fp32) and their max / sum
    SCRATCH_MOE_LISTS,      // per-expert row lists and offsets
    SCRATCH_MOE_GATE_UP,    // compact [rows, 2I] bf16
    SCRATCH_MOE_ACT,        // compact [rows, I] bf16
    SCRATCH_ALL_REDUCE,     // every rank's message, [T][n] bf16, gathered before the sum
    SCRATCH_GATHER_SEND,    // all_gather_columns: this rank's packed columns
    SCRATCH_GATHER_RECV,    // all_gather_columns: every rank's
    SCRATCH_GATHER_RANGES,  // all_gather_columns: every rank's (begin, end, rows)
    SCRATCH_GEMM_PARTIAL,   // split-K partials, fp32
    SCRATCH_GEMM_ARRIVALS,  // split-K arrival counts, zero between launches
    SCRATCH_GEMM_HANDOFF,   // stream-K chain states
    SCRATCH_GEMM_HANDOFF_READY,  // their ready flags, zero between launches
    SCRATCH_GEMM_TOTALS,    // 128 x 256 cta path's running totals
    SCRATCH_LOGPROBS,       // logprobs: each chunk's max, sum, sampled and top-k candidates
    SCRATCH_SLOTS
};

#define CUDA_SMEM_KERNELS 64  // more still work, re-raising every call

typedef struct {
    cudaStream_t stream;    // all work of the set goes here
    int device;
    int num_sms;
    size_t smem_optin;      // most dynamic shared memory a block may opt into
    size_t l2_bytes;        // the L2 cache's size
    bool wgmma;             // compute capability 9.0: the sm_90a code (wgmma) runs here
    bool pdl;               // compute capability >= 9.0: programmatic dependent launch (pdl.cuh)
    void *tensor_map_encode; // cuTensorMapEncodeTiled (NULL: no TMA)
    // kernels whose shared memory limit this context has raised (cuda_kernel_smem)
    struct { const void *kernel; size_t bytes; } smem_set[CUDA_SMEM_KERNELS];
    int smem_set_count;
    void *scratch[SCRATCH_SLOTS];
    size_t scratch_bytes[SCRATCH_SLOTS];
    // Bumped whenever a buffer the kernels use moves (scratch, a set's own buffers): a graph
    // captured before holds the old address and must be captured again (inv_cuda_graph_launch).
    unsigned long buffers_moved;
    bool capturing;         // inside inv_cuda_graph_capture: a buffer may not move now
} cuda_ctx;

static inline cuda_ctx *cuda_ctx_of(ops_set *ops) { return (cuda_ctx *)ops->ctx; }

// Scratch slot `slot` with at least `bytes`; grows (synchronizing first) only past every size
// asked before.
void *cuda_scratch(cuda_ctx *c, int slot, size_t bytes, const char *what);
// The same, zero-filled whenever it grows.
void *cuda_scratch_zeroed(cuda_ctx *c, int slot, size_t bytes, const char *what);

// Lets `kernel` launch with `bytes` of dynamic shared memory, asking the runtime only for more.
void cuda_kernel_smem(cuda_ctx *c, const void *kernel, size_t bytes, const char *op);

// Device probe, stream, properties; exits when no device.
void cuda_ctx_init(cuda_ctx *c, const char *set_name);
void cuda_ctx_free(cuda_ctx *c);

#endif
