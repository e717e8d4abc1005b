// reference/cuda/ref_cuda.h — the conventional CUDA kernel set (cuBLAS and friends).
#ifndef INVAR_REFERENCE_CUDA_REF_CUDA_H
#define INVAR_REFERENCE_CUDA_REF_CUDA_H

#include "../../kernels/ops.h"  // ops_set

#ifdef __cplusplus
extern "C" {
#endif

ops_set *ref_cuda_create(int threads);

#ifdef __cplusplus
}
#endif

#endif
