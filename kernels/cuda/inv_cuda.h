// kernels/cuda/inv_cuda.h — the batch-invariant CUDA kernel set, and the device probe.
#ifndef INVAR_KERNELS_CUDA_INV_CUDA_H
#define INVAR_KERNELS_CUDA_INV_CUDA_H

#include <stdbool.h>    // bool
#include "../ops.h"     // ops_set

#ifdef __cplusplus
extern "C" {
#endif

ops_set *inv_cuda_create(int threads);

// For a set built on this one (reference/, adversarial/): fills a caller-owned ops_set as
// inv_cuda_create does, named `set_name` in messages (the caller then swaps the ops it
// reorders; the others read ops->ctx); inv_cuda_fini frees what inv_cuda_init made, not the
// ops_set itself.
void inv_cuda_init(ops_set *ops, const char *set_name);
void inv_cuda_fini(ops_set *ops);
// True when a CUDA device answers; otherwise a reason in `why`.
bool inv_cuda_device_available(char *why, int why_len);
// Device name, driver / runtime / cuBLAS versions and compute capability, as text.
void inv_cuda_device_describe(char *name, int name_len, char *driver, int driver_len,
                              char *runtime, int runtime_len, char *cublas, int cublas_len,
                              char *cc, int cc_len);

#ifdef __cplusplus
}
#endif

#endif
