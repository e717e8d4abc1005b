// kernels/cuda/inv_cuda_launch.h — what a CUDA set built on the invariant one may use besides
// its ops: the stream, and kernels with a parameter the invariant set fixes and another set
// picks from the batch.
#ifndef INVAR_KERNELS_CUDA_INV_CUDA_LAUNCH_H
#define INVAR_KERNELS_CUDA_INV_CUDA_LAUNCH_H

#include <cuda_runtime.h>  // cudaStream_t
#include <stdbool.h>        // bool
#include "../ops.h"        // ops_set, tp_comm, mla_attention_args, logprobs_args

#ifdef __cplusplus
extern "C" {
#endif

// Every kernel of the set runs on this stream (cuBLAS too, where a set uses it).
cudaStream_t inv_cuda_stream(const ops_set *ops);
// *buf with at least `bytes`, for a set's own device buffer (grown as invar_cuda_reserve does);
// a move makes the set's captured graphs be captured again, and inside a capture it exits.
void *inv_cuda_reserve(ops_set *ops, void **buf, size_t *have, size_t bytes, const char *what);
int inv_cuda_num_sms(const ops_set *ops);
// The CUDA device ordinal the set runs on.
int inv_cuda_device(const ops_set *ops);

// RMSNorm with `threads` per row's block (the invariant set always uses 256).
void inv_cuda_rmsnorm_with_block(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                                 const bf16 *w, int M, int D, float eps, int threads);
// MLA attention with KV splits of `split_size` positions from position 0.
void inv_cuda_mla_attention_with_split(ops_set *ops, const mla_attention_args *a, int split_size);
// Log-softmax, sampling and top-k with `threads` per row (the invariant set uses 1024).
void inv_cuda_logprobs_with_block(ops_set *ops, const logprobs_args *a, int threads);

// The all-reduce with the sum's order as a parameter: element i summed from rank `first` up
// (mod T) in fp32, rounded after every hop when round_each_hop, else once (invariant: 0, false).
void inv_cuda_all_reduce_from_rank(ops_set *ops, tp_comm *comm, bf16 *buf, long n, int first,
                                   bool round_each_hop);
// The fp32 all-reduce with its order as a parameter: first < 0, the invariant pairwise tree over
// the ranks (T a power of two); else element i summed from rank `first` up (mod T), a chain.
// Never rounded.
void inv_cuda_all_reduce_f32_from_rank(ops_set *ops, tp_comm *comm, float *buf, long n, int first);
// Rank comm's NCCL communicator (an ncclComm_t), exiting with `op` named when none is attached.
void *inv_cuda_nccl_comm(tp_comm *comm, const char *op);
// A set's device made current for a call from any thread, then the caller's given back.
int inv_cuda_enter(ops_set *ops);
void inv_cuda_leave(int previous);

#ifdef __cplusplus
}
#endif

#endif
