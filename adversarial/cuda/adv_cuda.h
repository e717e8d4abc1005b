// adversarial/cuda/adv_cuda.h — the adversarial CUDA kernel set: the negative control that
// must be caught on every model (adversarial/cuda/adv_cuda.cu says how).
#ifndef INVAR_ADVERSARIAL_CUDA_ADV_CUDA_H
#define INVAR_ADVERSARIAL_CUDA_ADV_CUDA_H

#include "../../kernels/ops.h"  // ops_set

#ifdef __cplusplus
extern "C" {
#endif

ops_set *adv_cuda_create(int threads);  // threads: ignored (a CPU worker count)

#ifdef __cplusplus
}
#endif

#endif
