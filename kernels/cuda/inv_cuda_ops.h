// kernels/cuda/inv_cuda_ops.h — the batch-invariant CUDA ops one by one, with ops.h's
// signatures, plus the launchers the reference set shares (through inv_cuda_launch.h). Private
// to kernels/cuda; every function relies only on ops->ctx pointing at a cuda_ctx.
#ifndef INVAR_KERNELS_CUDA_INV_CUDA_OPS_H
#define INVAR_KERNELS_CUDA_INV_CUDA_OPS_H

#include <cuda.h>      // CUtensorMap
#include <stddef.h>    // size_t
#include <stdint.h>    // int32_t
#include "../ops.h"    // ops_set, bf16, *_args
#include "cuda_ctx.cuh"  // cuda_ctx

// --- memory (cudaMalloc, cudaMemcpyAsync on the set's stream) ---
void *inv_cuda_alloc(ops_set *ops, size_t bytes, const char *what);
void inv_cuda_release(ops_set *ops, void *p);
void inv_cuda_upload(ops_set *ops, void *dst, const void *src, size_t bytes);
void *inv_cuda_alloc_host(ops_set *ops, size_t bytes, const char *what);
void inv_cuda_release_host(ops_set *ops, void *p);
void inv_cuda_upload_async(ops_set *ops, void *dst, const void *src, size_t bytes);
void inv_cuda_download(ops_set *ops, void *dst, const void *src, size_t bytes);
void inv_cuda_sync(ops_set *ops);

// --- ops (semantics: kernels/ops.h) ---
void inv_cuda_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T,
                        int D);
void inv_cuda_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                      const bf16 *w, int M, int D, float eps);
void inv_cuda_gemm(ops_set *ops, const gemm_args *a);
void inv_cuda_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                   const int32_t *pos, const float *cos, const float *sin, bool interleave);
void inv_cuda_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n);
void inv_cuda_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I);
void inv_cuda_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv,
                             const bf16 *k_pe, long ld_k_pe, const int32_t *slot, int T, int L,
                             int R);
void inv_cuda_mla_attention(ops_set *ops, const mla_attention_args *a);
// Shapes the tiled kernel cannot take (L % 64, L > 512, R % 16): one warp per (token, head).
void mla_attention_generic_launch(cuda_ctx *c, const mla_attention_args *a, int split_size);
// 64 heads a CTA on sm_90a (mla_absorbed_h64_sm90.cu): whether it takes this shape (never
// anything about the batch), and its launch writing the split partials o_part [T][H][nsplit][L]
// and ml_part [T][H][nsplit] in the layout mla_merge.cu's merge reads.
bool mla_wgmma_supported(const cuda_ctx *c, const mla_attention_args *a, int split_size);
// Q's rows in 16-byte pieces (cp.async) rather than value by value (mla_attention.cu).
bool mla_q_aligned(const mla_attention_args *a);
// What both wgmma MLA kernels need: sm_90a with TMA and smem_bytes of shared memory, a multiple
// of `heads` heads (or, with pads, fewer: one padded unit), in H and in H_select, L = 512,
// R = 64, blocks and splits of whole 64-position tiles.
bool mla_wgmma_takes(const cuda_ctx *c, const mla_attention_args *a, int split_size, int heads, bool pads,
                     size_t smem_bytes);
// The latent cache as the wgmma kernels' TMA reads it: [slots][L + R] bf16, boxes of 64 dims by
// box_rows positions; stream: without L2 promotion.
CUtensorMap mla_kv_cache_map(cuda_ctx *c, const mla_attention_args *a, int box_rows, bool stream);
// Whether the 64-head kernel's CTAs merge every token of a grid of nsplit splits themselves.
bool mla_wgmma_merges_tokens(const cuda_ctx *c, const mla_attention_args *a, int nsplit);
// Tokens of at most the returned split count it merges itself (the merge kernel's arithmetic).
int mla_wgmma_split_launch(cuda_ctx *c, const mla_attention_args *a, int split_size, int nsplit,
                           float *o_part, float2 *ml_part);
// 16 heads a work unit on sm_90a (mla_absorbed_h16_sm90.cu), where the 64-head kernel does not
// take the shape; the same partials' layout (a slot a split, or a split pair). It merges tokens
// of at most the returned split count itself; *pairs_stored: it stored split pairs.
bool mla_wgmma16_supported(const cuda_ctx *c, const mla_attention_args *a, int split_size);
// Whether its units are split pairs for a grid of nsplit splits (no bit follows it).
bool mla_wgmma16_pairs(const cuda_ctx *c, const mla_attention_args *a, int nsplit);
int mla_wgmma16_split_launch(cuda_ctx *c, const mla_attention_args *a, int split_size, int nsplit,
                             float *o_part, float2 *ml_part, bool *pairs_stored);
void inv_cuda_mha_prefill(ops_set *ops, const mha_prefill_args *a);
void inv_cuda_merge_attention(ops_set *ops, const merge_attention_args *a);
void inv_cuda_moe_route(ops_set *ops, const moe_route_args *a);
void inv_cuda_moe_experts(ops_set *ops, const moe_experts_args *a);
void inv_cuda_moe_combine(ops_set *ops, const moe_combine_args *a);
void inv_cuda_logprobs(ops_set *ops, const logprobs_args *a);
// TP-size invariance's element-wise fp32 steps (elementwise.cu).
void inv_cuda_add_f32(ops_set *ops, float *x, const float *y, long n);
void inv_cuda_round_to_bf16(ops_set *ops, bf16 *out, const float *x, long n);
void inv_cuda_sum_slices_f32(ops_set *ops, float *parts, int n, long len);
// Collectives (collective.cu): NCCL moves the bytes, the sums are ours.
void inv_cuda_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n);
void inv_cuda_all_reduce_f32_tree(ops_set *ops, tp_comm *comm, float *buf, long n);
void inv_cuda_all_gather_columns(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld,
                                 long col_begin, long col_end);
void inv_cuda_bind_thread(ops_set *ops);
void inv_cuda_open_group(ops_set *const *ranks, int T, tp_comm_group *g);

// --- launchers with the parameter the invariant set fixes (public: inv_cuda_launch.h) ---
// RMSNorm with a chosen block size (the invariant set always passes 256).
void rmsnorm_launch(cuda_ctx *c, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                    const bf16 *w, int M, int D, float eps, int threads);
// MLA attention with KV splits of `split_size` positions from position 0.
void mla_attention_launch(cuda_ctx *c, const mla_attention_args *a, int split_size);
// Log-softmax, sampling and top-k with a chosen block size (the invariant set passes 1024).
void logprobs_launch(cuda_ctx *c, const logprobs_args *a, int threads);

#endif
