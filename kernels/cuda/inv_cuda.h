// kernels/cuda/inv_cuda.h — the batch-invariant CUDA kernel set, and the device probe.
#ifndef INVAR_KERNELS_CUDA_INV_CUDA_H
#define INVAR_KERNELS_CUDA_INV_CUDA_H

#include <stdbool.h>    // bool
#include <stddef.h>     // size_t
#include "../ops.h"     // ops_set

#ifdef __cplusplus
extern "C" {
#endif

ops_set *inv_cuda_create(int threads);

// For a set built on this one: fills a caller's ops_set as inv_cuda_create does; inv_cuda_fini
// frees what inv_cuda_init made.
void inv_cuda_init(ops_set *ops, const char *set_name);
void inv_cuda_fini(ops_set *ops);
// True when a CUDA device answers; otherwise a reason in `why`.
bool inv_cuda_device_available(char *why, int why_len);
// Device name, driver, runtime and cuBLAS versions, compute capability.
void inv_cuda_device_describe(char *name, int name_len, char *driver, int driver_len,
                              char *runtime, int runtime_len, char *cublas, int cublas_len,
                              char *cc, int cc_len);

// The GEMM's plan for a: returns the split-K count (a function of N and K) and writes the tile,
// split mode and load path to `path`, e.g. "64x128/grid tma".
int inv_cuda_gemm_plan_describe(ops_set *ops, const gemm_args *a, char *path, int path_len);
// The device's SM count (the GEMM's plan, never its bits, depends on it).
int inv_cuda_sm_count(ops_set *ops);
// The device's L2 size and free memory, in bytes.
size_t inv_cuda_l2_bytes(ops_set *ops);
size_t inv_cuda_free_bytes(ops_set *ops);

// The kernel mla_attention takes for a's shape ("wgmma", "wgmma16", "mma.sync", "generic").
const char *inv_cuda_mla_attention_kernel(ops_set *ops, const mla_attention_args *a);
// Whether the 64-head kernel merges this batch itself rather than in the merge kernel (a batch
// choice that changes no bit; for tests).
bool inv_cuda_mla_wgmma_merges(ops_set *ops, const mla_attention_args *a);
// Whether the 16-head kernel takes split pairs as units in this batch (no bit changes; tests).
bool inv_cuda_mla_wgmma16_pairs(ops_set *ops, const mla_attention_args *a);

// --- tensor parallelism: one GPU per rank (collective.cu) ---
// CUDA devices visible to this process (0 without a driver or device).
int inv_cuda_device_count(void);
// Makes `device` the calling thread's current device, returning the one it replaced.
int inv_cuda_use_device(int device);
// The linked NCCL's version from ncclGetVersion(), e.g. "2.28.3".
void inv_cuda_nccl_version(char *out, int len);
// How GPUs 0..T-1 are linked, pair by pair: "0-1:p2p+atomics(nvlink)", "p2p(pcie)", "no-p2p";
// "-" for fewer than two GPUs.
void inv_cuda_gpu_links(int T, char *out, int len);

#ifdef __cplusplus
}
#endif

#endif
