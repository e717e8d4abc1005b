// kernels/cpu/inv_cpu_ops.h — the batch-invariant CPU ops one by one, with exactly the
// signatures of ops.h's function pointers.
//
// Private to kernels/cpu: inv_cpu.c assembles the set from them. A set built on this one
// (inv_cpu_init) keeps the ones it does not replace through its ops_set. Every function relies
// only on ops->ctx being a cpu_ctx (kernels/cpu/cpu_ctx.h); none reads any other field.
#ifndef INVAR_KERNELS_CPU_INV_CPU_OPS_H
#define INVAR_KERNELS_CPU_INV_CPU_OPS_H

#include <stdbool.h>   // bool
#include <stddef.h>    // size_t
#include <stdint.h>    // int32_t
#include "../ops.h"    // ops_set, bf16, *_args

// --- memory (host memory: malloc, memcpy) ----------------------------------------------------
void *inv_cpu_alloc(ops_set *ops, size_t bytes, const char *what);
void inv_cpu_release(ops_set *ops, void *p);
void inv_cpu_upload(ops_set *ops, void *dst, const void *src, size_t bytes);
void inv_cpu_download(ops_set *ops, void *dst, const void *src, size_t bytes);
void inv_cpu_sync(ops_set *ops);

// --- ops (semantics: kernels/ops.h) ----------------------------------------------------------
void inv_cpu_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T,
                       int D);
void inv_cpu_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                     const bf16 *w, int M, int D, float eps);
void inv_cpu_gemm(ops_set *ops, const gemm_args *a);
void inv_cpu_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                  const int32_t *pos, const float *cos, const float *sin, bool interleave);
void inv_cpu_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n);
void inv_cpu_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I);
void inv_cpu_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv,
                            const bf16 *k_pe, long ld_k_pe, const int32_t *slot, int T, int L,
                            int R);
void inv_cpu_mla_attention(ops_set *ops, const mla_attention_args *a);
void inv_cpu_mha_prefill(ops_set *ops, const mha_prefill_args *a);          // mha_prefill.c
void inv_cpu_merge_attention(ops_set *ops, const merge_attention_args *a);  // mha_prefill.c
void inv_cpu_moe_route(ops_set *ops, const moe_route_args *a);
void inv_cpu_moe_experts(ops_set *ops, const moe_experts_args *a);
void inv_cpu_moe_combine(ops_set *ops, const moe_combine_args *a);
void inv_cpu_logprobs(ops_set *ops, const logprobs_args *a);
void inv_cpu_add_f32(ops_set *ops, float *x, const float *y, long n);           // elementwise.c
void inv_cpu_round_to_bf16(ops_set *ops, bf16 *out, const float *x, long n);    // elementwise.c
void inv_cpu_sum_slices_f32(ops_set *ops, float *parts, int n, long len);       // elementwise.c

// --- collectives (kernels/cpu/all_reduce.c; the communicator: kernels/cpu/collective.h) ----
void inv_cpu_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n);
void inv_cpu_all_reduce_f32_tree(ops_set *ops, tp_comm *comm, float *buf, long n);
void inv_cpu_all_gather_columns(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld,
                                long col_begin, long col_end);

#endif
