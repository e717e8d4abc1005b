// reference/cpu/ref_cpu_ops.h — the reference CPU set's own ops: the ones that pick their
// reduction order from the shape of the batch, as fast libraries do, and the shape rules
// behind those choices (exposed so tests can aim at a shape where the order changes).
//
// Every op computes the function ops.h specifies; only the order of its fp32 sums depends on
// M, the batch's longest sequence, the experts' loads or the thread count. Ops that are
// batch-invariant by nature come from the invariant set (ref_cpu_set.h).
#ifndef INVAR_REFERENCE_CPU_REF_CPU_OPS_H
#define INVAR_REFERENCE_CPU_REF_CPU_OPS_H

#include <stdbool.h>             // bool
#include <stdint.h>              // uint64_t
#include "../../kernels/ops.h"  // ops_set, bf16, *_args

// --- ops (semantics: kernels/ops.h) ----------------------------------------------------------
void ref_cpu_gemm(ops_set *ops, const gemm_args *a);                       // gemm_split_k.c
void ref_cpu_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                     const bf16 *w, int M, int D, float eps);              // rmsnorm_blocked.c
void ref_cpu_mla_attention(ops_set *ops, const mla_attention_args *a);     // mla_split_kv.c
void ref_cpu_mha_prefill(ops_set *ops, const mha_prefill_args *a);         // mha_prefill_split_kv.c
void ref_cpu_moe_experts(ops_set *ops, const moe_experts_args *a);         // moe_experts_grouped.c
void ref_cpu_moe_combine(ops_set *ops, const moe_combine_args *a);         // moe_combine_by_load.c
void ref_cpu_logprobs(ops_set *ops, const logprobs_args *a);               // logprobs_split_vocab.c
void ref_cpu_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n);   // all_reduce_ring.c
void ref_cpu_all_reduce_f32(ops_set *ops, tp_comm *comm, float *buf, long n); // all_reduce_ring.c
// The combine by load, its sums contracted into FMAs where a token's busiest expert has an
// odd load when fuse_by_load (the adversarial set; the reference set passes false).
void ref_cpu_moe_combine_by_load(ops_set *ops, const moe_combine_args *a, bool fuse_by_load);

// --- shape rules -----------------------------------------------------------------------------
// GEMM: K is cut into `splits` parts of ceil(K / splits) elements, each summed over `lanes`
// interleaved accumulators (folded pairwise), the parts' sums added in order.
typedef struct {
    int splits;  // power of two
    int lanes;   // power of two, <= REF_GEMM_MAX_LANES
} ref_gemm_plan;
#define REF_GEMM_MAX_LANES 16
ref_gemm_plan ref_gemm_plan_for(int M, int N, int K, int threads);
// The GEMM with a plan chosen by the caller (moe_experts picks it per expert); and the plan
// as an order-log key.
void ref_cpu_gemm_planned(ops_set *ops, const gemm_args *a, ref_gemm_plan plan);
uint64_t ref_gemm_plan_key(ref_gemm_plan p);

// RMSNorm: a row's sum of squares in this many chunks (power of two), merged pairwise.
int ref_rmsnorm_chunks(int M, int D);

// MLA: the KV splits of every query token of the batch, from the batch's longest sequence
// (the reference policy's rule when the caller leaves mla_attention_args.kv_split_size at 0).
int ref_mla_num_kv_splits(int max_seq_len, int threads);
int ref_mla_split_len(int max_seq_len, int num_splits);  // a multiple of 16

// MHA prefill: a query token's key range in this many splits, from the call's token count.
int ref_mha_prefill_splits(int T, int keys);

// Logprobs: a row's vocabulary in this many chunks (power of two), merged pairwise.
int ref_logprobs_chunks(int R, int V, int threads);

// All-reduce: element i of a message of n elements is summed around the ring from this rank
// on, (x_f + x_{f+1}) + ... cyclically, rounded to bf16 at every hop. A ring reduce-scatter
// cuts the message into T chunks at n * c / T and chunk c's sum starts at rank c, so f moves
// with i and n.
int ref_all_reduce_ring_first_rank(long i, long n, int T);

#endif
