// kernels/cuda/inv_cuda.h — the batch-invariant CUDA kernel set, and the device probe.
#ifndef INVAR_KERNELS_CUDA_INV_CUDA_H
#define INVAR_KERNELS_CUDA_INV_CUDA_H

#include <stdbool.h>    // bool
#include "../ops.h"     // ops_set

#ifdef __cplusplus
extern "C" {
#endif

ops_set *inv_cuda_create(int threads);
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
