// kernels/f64/f64.h — the float64 oracle: every op of ops.h computed plainly in double on the
// host, to check the accuracy of any kernel set (tests, `invar kernels`).
//
// Each f64_<op> takes the op's own arguments (an args struct of ops.h, or the function
// pointer's parameters without the ops_set), reading host copies of the inputs exactly as the
// op would (the same strides; 0 meaning dense wherever the op allows it), and writes double
// results into caller-provided dense arrays instead of the op's outputs. The oracle is the
// exact function: no intermediate bf16 rounding is modelled, so a kernel's distance to it is
// its whole rounding error (measure it with f64_rel_l2_*).
//
// Ops whose outputs are discrete (moe_route's ids, logprobs' token and top-k ids) get the exact
// expected ids from double scores, with the ops' tie rules (lower index first).
#ifndef INVAR_KERNELS_F64_F64_H
#define INVAR_KERNELS_F64_F64_H

#include <stdbool.h>   // bool
#include <stdint.h>    // int32_t
#include "../ops.h"    // bf16, gemm_args, mla_attention_args, moe_*_args, logprobs_args
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

// --- elementwise ----------------------------------------------------------------------------

// out [T][D] = table[ids[t]]
void f64_embedding(double *out, const bf16 *table, const int32_t *ids, int T, int D);

// out [n] = x + y  (the values residual_add writes into x)
void f64_residual_add(double *out, const bf16 *x, const bf16 *y, long n);

// out [M][I] = silu(gate) * up, gate_up [M][2I]
void f64_silu_mul(double *out, const bf16 *gate_up, int M, int I);

// --- norms, projections, rope ----------------------------------------------------------------

// out [M][D] dense = w * x / sqrt(mean(x²) + eps); ld_x 0 means D.
void f64_rmsnorm(double *out, const bf16 *x, long ld_x, const bf16 *w, int M, int D, double eps);

// y [batch][M][N] dense = x · wᵀ; the y/y_f32/ldy fields of `a` are ignored.
void f64_gemm(const gemm_args *a, double *y);

// out [T][H][R] dense = the rotated slices as rope leaves them (de-interleaved when
// interleave); x is read, not modified.
void f64_rope(double *out, const bf16 *x, long ld_token, long ld_head, int T, int H, int R,
              const int32_t *pos, const float *cos, const float *sin, bool interleave);

// --- attention ------------------------------------------------------------------------------

// cache [num_slots][L + R]: the slots slot[t] receive (c_kv[t], k_pe[t]); others untouched.
// ld_c_kv / ld_k_pe 0 mean L / R.
void f64_kv_cache_write(double *cache, const bf16 *c_kv, long ld_c_kv, const bf16 *k_pe,
                        long ld_k_pe, const int32_t *slot, int T, int L, int R);

// out [T][H][L] dense: the exact softmax-weighted sum over keys [0, token_pos[t]]
// (a->out is ignored).
void f64_mla_attention(const mla_attention_args *a, double *out);

// out [T][H][v], lse [T][H]: plain multi-head attention of each (token, head) over its key
// range, lse = log sum_j e^(s_j) with the scale applied; an empty range gives 0 and -INFINITY.
void f64_mha_prefill(const mha_prefill_args *a, double *out, double *lse);

// out [T][H][v]: the log-sum-exp weighted merge of a and b; a side with lse = -inf contributes
// nothing (both -inf: 0).
void f64_merge_attention(const merge_attention_args *a, double *out);

// --- MoE ------------------------------------------------------------------------------------

// ids [T][k], weights [T][k]: routing from double logits and scores, with ops.h's rules
// (as kernels/cpu/moe.c documents them; a->topk_ids / a->topk_weights are ignored).
void f64_moe_route(const moe_route_args *a, int32_t *ids, double *weights);

// out [T*k][D]: expert topk_ids[t,j] applied to x[t] exactly, silu(gate)·up unrounded.
void f64_moe_experts(const moe_experts_args *a, double *out);

// out [T][D] = sum_j topk_weights[t,j] * expert_out[t*k + j] (expert_out_f32's rows where given)
void f64_moe_combine(const moe_combine_args *a, double *out);

// --- logprobs -------------------------------------------------------------------------------

// logprobs [R][V] = log_softmax(logits) in double; token [R]: the sampled id (greedy or Gumbel,
// the noise from invar_gumbel_noise, logits / temperature in double); topk_ids [R][k]: ids by
// descending logprob, lower id first on ties. The output pointers of `a` are ignored.
void f64_logprobs(const logprobs_args *a, double *logprobs, int32_t *token, int32_t *topk_ids);

// --- collectives ----------------------------------------------------------------------------

// out [n] = ins[0][i] + ... + ins[T-1][i], the value all_reduce leaves on every rank.
void f64_all_reduce(double *out, const bf16 *const *ins, int T, long n);

// --- accuracy -------------------------------------------------------------------------------

// Relative L2 error ‖out − ref‖ / ‖ref‖ over n values (the absolute ‖out − ref‖ when ref is
// all zeros). NaN or infinite outputs give INFINITY.
double f64_rel_l2_bf16(const bf16 *out, const double *ref, long n);
double f64_rel_l2_f32(const float *out, const double *ref, long n);

// Largest |out − ref| over n values.
double f64_max_abs_err_f32(const float *out, const double *ref, long n);

// Number of NaN values among n.
long f64_count_nan_bf16(const bf16 *x, long n);
long f64_count_nan_f32(const float *x, long n);

#endif
