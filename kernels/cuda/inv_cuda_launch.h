// kernels/cuda/inv_cuda_launch.h — what a CUDA set built on the invariant one (inv_cuda_init)
// may use of kernels/cuda besides its ops: the set's stream and SM count, and the invariant
// kernels with a parameter the invariant set fixes and another set picks from the batch.
#ifndef INVAR_KERNELS_CUDA_INV_CUDA_LAUNCH_H
#define INVAR_KERNELS_CUDA_INV_CUDA_LAUNCH_H

#include <cuda_runtime.h>  // cudaStream_t
#include "../ops.h"        // ops_set, mla_attention_args, logprobs_args

#ifdef __cplusplus
extern "C" {
#endif

// Every kernel of the set runs on this stream (cuBLAS too, where a set uses it).
cudaStream_t inv_cuda_stream(const ops_set *ops);
int inv_cuda_num_sms(const ops_set *ops);

// RMSNorm with `threads` per row's block (the invariant set always uses 256).
void inv_cuda_rmsnorm_with_block(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                                 const bf16 *w, int M, int D, float eps, int threads);
// MLA attention with KV splits of `split_size` positions from position 0 (the invariant set
// passes a constant; the reference set one derived from the batch).
void inv_cuda_mla_attention_with_split(ops_set *ops, const mla_attention_args *a, int split_size);
// Log-softmax, sampling and top-k with `threads` per row (a multiple of 32, <= 1024; the
// invariant set always uses 1024).
void inv_cuda_logprobs_with_block(ops_set *ops, const logprobs_args *a, int threads);

#ifdef __cplusplus
}
#endif

#endif
