// kernels/ops.h — the kernel-set interface.
//
// One struct of function pointers. Each kernel set (invariant, reference, adversarial) on each
// device (cpu or cuda) provides one instance through sets/registry.h. The engine calls kernels
// only through it, so a config's kernel set is a pointer.
//
// Conventions, for every op:
// - Pointers are device pointers of the set's device (host memory for cpu). Memory comes from
//   the set's own alloc/upload/download.
// - bf16 tensors are uint16_t holding the top half of an IEEE float (kernels/bf16.h);
//   accumulation is fp32; results round to bf16 once, round-to-nearest-even.
// - Matrices are row-major; "ld" arguments are row strides in elements. gemm, rmsnorm and
//   kv_cache_write read a stride of 0 as dense (the row's own length); rope, the attention
//   ops and merge_attention take every stride as given.
// - Ops are asynchronous with respect to the host where the device is; `sync` waits, and
//   `download` is synchronous.
// - An invariant set computes every output element in one order that depends neither on the
//   row count, the row's position, other rows' contents nor the thread/CTA count
//   (README.md, "The invariance contract"). A reference set computes the same
//   function in whatever order is fastest for the shape, as libraries do.
#ifndef INVAR_KERNELS_OPS_H
#define INVAR_KERNELS_OPS_H

#include <stdbool.h>  // bool
#include <stddef.h>   // size_t
#include <stdint.h>   // uint16_t, int32_t, uint64_t
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

typedef uint16_t bf16;

// y[b][m][n] = sum_k x[b][m][k] * w[b][n][k]   (x · wᵀ, the nn.Linear convention)
typedef struct {
    void *y;            // bf16, or float when y_f32
    bool y_f32;
    const bf16 *x;
    const bf16 *w;      // [N, K] per batch entry
    int M, N, K;
    long ldx, ldy, ldw; // row strides; 0 means dense (K, N, K)
    int batch;          // 0 or 1 means one product
    long stride_x, stride_y, stride_w; // between batch entries, in elements (0: one shared)
    // The N whose rule fixes how K is split, where a set's order reads N at all (0: N). TP-size
    // invariance passes a rank's columns of a column-parallel GEMM the whole GEMM's N, so they
    // reduce as at T = 1. Last, as the plugin ABI passes this struct (moe_experts_args.out_f32).
    int split_N;
} gemm_args;

// Absorbed MLA attention over the paged latent cache. For query token t and head h:
//   s_j = scale * (q_lat[t,h] · c_kv[j] + q_pe[t,h] · k_pe[j])   for j in [0, token_pos[t]]
//   out[t,h] = sum_j softmax(s)_j * c_kv[j]
// c_kv[j], k_pe[j] live in kv_cache at slot block_table[seq][j / block_size] * block_size
// + j % block_size, each slot holding L latent values then R rope values.
// The new tokens' entries are already in the cache when this runs.
typedef struct {
    bf16 *out;                  // [T, H, L], row stride ld_out per token
    const bf16 *q_lat;          // [T, H, L], row stride ld_q_lat per token
    const bf16 *q_pe;           // R values per head, strides ld_q_pe (token), head_stride_q_pe
    const bf16 *kv_cache;       // this layer: [num_blocks * block_size, L + R]
    const int32_t *block_table; // [num_seqs, max_blocks_per_seq]
    const int32_t *token_seq;   // [T] row of block_table for each query token
    const int32_t *token_pos;   // [T] absolute position; attends to [0, token_pos]
    const int32_t *seq_lens;    // [num_seqs] tokens in the cache for each sequence this step
    int T, H, L, R;
    long ld_out, ld_q_lat, ld_q_pe, head_stride_q_pe;
    int block_size, max_blocks_per_seq, num_seqs;
    int max_seq_len;            // host copy of max(seq_lens), as schedulers know it; covers
                                // every token_pos + 1
    int kv_split_size;          // positions per KV split, a multiple of 64; 0: the set's own
                                // choice. An attention backend that schedules splits itself
                                // (FlashMLA-style) passes one; an invariant set honours it.
    float scale;
    // The head count that selects the kernel, where a set has several whose bits differ (0: H).
    // TP-size invariance passes the heads a rank holds at T = 8, so every T takes one kernel.
    // Last, as the plugin ABI passes this struct (moe_experts_args.out_f32).
    int H_select;
} mla_attention_args;

// Plain (non-absorbed) multi-head attention for prefill, with the log-sum-exp of each row so
// partial results can be merged. For query token t, head h, over key rows j in
// [key_begin[t], key_end[t]) of kv / k_pe:
//   s_j = scale * (q[t,h,:nope] · kv[j, h*(nope+v) : +nope] + q[t,h,nope:] · k_pe[j])
//   out[t,h] = bf16( sum_j softmax(s)_j * kv[j, h*(nope+v)+nope : +v] ),  lse[t,h] = log sum e^s
// An empty key range gives out = 0 and lse = -inf.
typedef struct {
    bf16 *out;                  // [T, H, v], row stride ld_out
    float *lse;                 // [T, H]
    const bf16 *q;              // [T, H, nope + R], row stride ld_q
    const bf16 *kv;             // [keys, H * (nope + v)] (kv_b_proj applied to c_kv)
    const bf16 *k_pe;           // [keys, R], row stride ld_k_pe
    const int32_t *key_begin, *key_end; // [T]
    int T, H, nope, R, v;
    long ld_out, ld_q, ld_kv, ld_k_pe;
    float scale;
} mha_prefill_args;

// Merges two partial attention results of the same queries over disjoint key sets, as vLLM's
// merge_attn_states: out = bf16((e^(lse_a-m) * a + e^(lse_b-m) * b) / (e^(lse_a-m) + e^(lse_b-m)))
// with m = max(lse_a, lse_b), in fp32. A side with lse = -inf contributes nothing.
typedef struct {
    bf16 *out;                  // [T, H, v], row stride ld
    const bf16 *a, *b;          // [T, H, v], row stride ld
    const float *lse_a, *lse_b; // [T, H]
    int T, H, v;
    long ld;
} merge_attention_args;

enum moe_scoring { MOE_SCORING_SOFTMAX, MOE_SCORING_SIGMOID };
enum moe_topk_method { MOE_TOPK_GREEDY, MOE_TOPK_GROUP_LIMITED_GREEDY, MOE_TOPK_NOAUX_TC };

// Router: logits = fp32(x) · fp32(gate_w)ᵀ, then scoring and top-k as Hugging Face's
// DeepseekV2MoEGate (softmax; greedy or group_limited_greedy; weights normalized when
// k > 1 and norm_topk_prob, else multiplied by routed_scaling_factor) or DeepseekV3's
// (sigmoid; noaux_tc: choose on score + correction_bias, group score = sum of a group's top 2,
// weights are the un-biased scores, normalized when norm_topk_prob, always multiplied by
// routed_scaling_factor). Ties pick the lower index. Ids of one token are stored in
// descending order of the score they were chosen by.
typedef struct {
    int32_t *topk_ids;          // [T, k]
    float *topk_weights;        // [T, k]
    const bf16 *x;              // [T, D]
    const bf16 *gate_w;         // [E, D]
    const float *correction_bias; // [E], or NULL
    int T, D, E, k;
    enum moe_scoring scoring;
    enum moe_topk_method topk_method;
    int n_group, topk_group;
    bool norm_topk_prob;
    float routed_scaling_factor;
} moe_route_args;

// Routed experts, not yet weighted: out[t*k + j] = expert e = topk_ids[t,j] applied to x[t]:
//   gu = bf16(x · w_gate_up[e]ᵀ)  ([2I]: gate then up), a = bf16(bf16(silu(gate)) * up),
//   out = bf16(a · w_down[e]ᵀ).
// An invariant set reduces each row in the invariant GEMM's order however many tokens
// an expert got.
typedef struct {
    bf16 *out;                  // [T * k, D]
    const bf16 *x;              // [T, D]
    const int32_t *topk_ids;    // [T, k]
    const bf16 *w_gate_up;      // [E, 2I, D]
    const bf16 *w_down;         // [E, D, I]
    int T, k, E, D, I;
    // Non-NULL: the down projection's fp32 sums go here ([T * k, D]) and out is not written
    // (TP-size invariance: an expert's part of a slice is summed with the others unrounded).
    // Last, as the plugin ABI (kernels/invar_plugin.h) passes this struct: a plugin built
    // before it reads the fields above where they were, and never gets a non-NULL one.
    float *out_f32;
    // 0 or 1: one set of experts. n > 1 (out_f32 only; TP-size invariance's 8 slices in one
    // call): w_gate_up and w_down hold n slices' experts one after another ([n, E, 2I, D],
    // [n, E, D, I]) and out_f32 is [n, T * k, D], slice s's rows by slice s's experts, each
    // bit for bit what a call of that slice alone gives (kernels/moe_slices.h). Last, likewise.
    int slices;
} moe_experts_args;

// out[t] = bf16( sum_j topk_weights[t,j] * expert_out[t*k + j] ), fp32 products and sum.
// With expert_out_f32 and out_f32 (TP-size invariance): the same sum over fp32 expert rows,
// written unrounded to out_f32; out and expert_out are not used.
typedef struct {
    bf16 *out;                  // [T, D]
    const bf16 *expert_out;     // [T * k, D]
    const float *topk_weights;  // [T, k]
    const int32_t *topk_ids;    // [T, k] (a reference set may order its sum by expert load)
    int T, k, D, E;
    const float *expert_out_f32; // [T * k, D] or NULL (last: see moe_experts_args.out_f32)
    float *out_f32;             // [T, D] or NULL
    // 0 or 1: one. n > 1 (the fp32 form only): expert_out_f32 is [n, T * k, D] and out_f32
    // [n, T, D], slice s's sum of its own rows with the same weights, as moe_experts' slices.
    int slices;
} moe_combine_args;

// Per row r of logits [R, V]: log_softmax, the sampled token and the top-k.
// temperature[r] == 0: greedy (argmax, lower id on ties). Otherwise the Gumbel-max trick:
// argmax(logits / temperature + gumbel(noise_seed[r], position[r], vocab id)), noise from
// invar_gumbel_noise() so it depends on nothing but (seed, position, id).
// Logprobs are of the untempered distribution. Top-k ids in descending logprob, lower id first
// on ties. A NaN logit is never a candidate: a row of NaNs samples id -1 with a NaN logprob (the
// engine refuses it), and top-k slots left empty hold id -1 and -inf.
typedef struct {
    const float *logits;        // [R, V]
    int R, V, k;
    const float *temperature;   // [R]
    const uint64_t *noise_seed; // [R]
    const int32_t *position;    // [R]
    int32_t *token;             // [R]
    float *token_logprob;       // [R]
    int32_t *topk_ids;          // [R, k]
    float *topk_logprobs;       // [R, k]
} logprobs_args;

typedef struct order_log order_log;  // kernels/order_log.h
typedef struct fingerprint_sink fingerprint_sink;  // kernels/fingerprint.h

// One rank's handle on the communicator of a tensor-parallel group of T ranks, and the group.
// The ranks are threads of one process (kernels/cpu/collective.h); on CUDA each rank's thread
// drives its own GPU and the handle carries that rank's NCCL communicator.
typedef struct tp_comm tp_comm;
typedef struct tp_comm_group tp_comm_group;

typedef struct ops_set ops_set;
typedef struct ops_graph ops_graph;  // a set's recorded calls (graph_capture)
struct ops_set {
    const char *name;           // "invariant" | "reference" | "adversarial"
    const char *device;         // "cpu" | "cuda"
    bool batch_invariant;
    // The set computes moe_experts' out_f32 and moe_combine's fp32 form and has add_f32,
    // round_to_bf16 and all_reduce_f32_tree: the engine's TP-size-invariant mode may run on it.
    bool tp_size_invariant;
    // Every reduction takes its order from the batch at every shape (the negative control
    // that must be caught on any model); false for realistic sets.
    bool adversarial;
    // The reduction orders a non-invariant set chose (kernels/order_log.h); NULL when the set
    // does not record them. Reset by whoever reads it.
    order_log *orders;
    // Where the invariant kernels note each call's order fingerprint and path
    // (kernels/fingerprint.h); NULL: nothing is noted. Attached by whoever checks them.
    fingerprint_sink *fingerprints;
    // The "op:path" names the set's kernels can note, NULL-terminated (NULL: none declared):
    // what path coverage counts against.
    const char *const *paths;
    // Why a declared path cannot be taken in this process (another GPU architecture, fewer GPUs
    // than its ranks), or NULL where it can; NULL function: every path can. Coverage lists such
    // a path with the reason instead of failing it.
    const char *(*path_unreachable)(ops_set *ops, const char *path);
    // The kernels' state (thread pool; stream and scratch). A set built on another (reference/
    // and adversarial/ on the invariant sets, through inv_cpu_init / inv_cuda_init) keeps that
    // set's ctx, which the reused ops read, and holds this ops_set first in a struct of its own
    // for its own kernels' state (policy, cuBLAS handle, buffers).
    void *ctx;

    void (*destroy)(ops_set *ops);

    // --- memory -----------------------------------------------------------------------
    void *(*alloc)(ops_set *ops, size_t bytes, const char *what); // exits naming `what`
    void (*release)(ops_set *ops, void *p);
    void (*upload)(ops_set *ops, void *dst, const void *src, size_t bytes);
    void (*download)(ops_set *ops, void *dst, const void *src, size_t bytes);
    void (*sync)(ops_set *ops);
    // Host memory the device copies from directly (CUDA: pinned, no staging copy), and an upload
    // from it that returns at once, ordered before the ops that follow it: src must stay as it
    // is until the next download or sync. NULL in a set without them (callers use upload).
    void *(*alloc_host)(ops_set *ops, size_t bytes, const char *what); // exits naming `what`
    void (*release_host)(ops_set *ops, void *p);
    void (*upload_async)(ops_set *ops, void *dst, const void *src, size_t bytes);
    // CUDA graphs: graph_capture calls record(ctx) with the ops it makes recorded, not run, and
    // returns a graph that graph_launch replays with the same arguments (pointers and sizes as
    // they were); graph_launch returns false, running nothing, when the set's own buffers moved
    // since the capture (a larger call grew them): the caller runs the ops and captures again.
    // NULL in a set without graphs, and in a wrapper (a replay would skip what it observes).
    // graph_collectives: the set's collectives can be captured too, so a tensor-parallel rank
    // may run its steps as graphs (the CPU sets through sets/graph_record.h; not the CUDA set,
    // whose all_gather_columns reads the ranks' column ranges on the host).
    ops_graph *(*graph_capture)(ops_set *ops, void (*record)(void *ctx), void *ctx);
    bool (*graph_launch)(ops_set *ops, ops_graph *g);
    void (*graph_release)(ops_set *ops, ops_graph *g);
    bool graph_collectives;

    // --- ops ----------------------------------------------------------------------------
    // out[t] = table[ids[t]]   (D values)
    void (*embedding)(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids,
                      int T, int D);
    // out = bf16( w * bf16( x * rsqrt(mean(x²) + eps) ) ), as Hugging Face's RMSNorm
    void (*rmsnorm)(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                    const bf16 *w, int M, int D, float eps);
    void (*gemm)(ops_set *ops, const gemm_args *a);
    // In place on R rope values at x + t*ld_token + h*ld_head, position pos[t].
    // interleave: pairs (x[2i], x[2i+1]) rotated by frequency i and written out de-interleaved
    // (evens' results first), as DeepSeek's apply_rotary_pos_emb; otherwise rotate_half pairs
    // (x[i], x[i+R/2]). cos/sin: [max_pos, R/2] fp32, YaRN mscale already folded in.
    void (*rope)(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                 const int32_t *pos, const float *cos, const float *sin, bool interleave);
    // x = bf16(x + y), n elements
    void (*residual_add)(ops_set *ops, bf16 *x, const bf16 *y, long n);
    // out[m, i] = bf16( bf16(silu(gu[m, i])) * gu[m, I + i] ); gu is [M, 2I], out [M, I]
    void (*silu_mul)(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I);
    // cache[slot[t]] = (c_kv[t] (L values), k_pe[t] (R values))
    void (*kv_cache_write)(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv,
                           const bf16 *k_pe, long ld_k_pe, const int32_t *slot, int T,
                           int L, int R);
    void (*mla_attention)(ops_set *ops, const mla_attention_args *a);
    void (*mha_prefill)(ops_set *ops, const mha_prefill_args *a);
    void (*merge_attention)(ops_set *ops, const merge_attention_args *a);
    void (*moe_route)(ops_set *ops, const moe_route_args *a);
    void (*moe_experts)(ops_set *ops, const moe_experts_args *a);
    void (*moe_combine)(ops_set *ops, const moe_combine_args *a);
    void (*logprobs)(ops_set *ops, const logprobs_args *a);
    // TP-size invariance's element-wise steps: x[i] = x[i] + y[i] in fp32; out[i] = bf16(x[i]).
    // NULL where the set has no TP-size-invariant path.
    void (*add_f32)(ops_set *ops, float *x, const float *y, long n);
    void (*round_to_bf16)(ops_set *ops, bf16 *out, const float *x, long n);
    // TP-size invariance's lower tree levels in one call: parts holds n (1, 2, 4 or 8) fp32
    // vectors of len values one after another; on return parts[0 .. len) is the pairwise tree
    // ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)), every add rounded to fp32: bit for bit
    // what add_f32 over the pairs gives (engine/tp_slices.c), in one launch instead of n - 1.
    // The other vectors are left unspecified. NULL: the engine adds the pairs with add_f32.
    void (*sum_slices_f32)(ops_set *ops, float *parts, int n, long len);

    // --- collectives over a tensor-parallel group ------------------------------------------
    // Every rank of comm calls them with the same sizes; each returns when its buffer holds
    // the result.
    // buf[i] = bf16( x_0[i] + x_1[i] + ... + x_{T-1}[i] ) on every rank, x_r being rank r's
    // buf (n elements, in place). The one reduction across ranks, so it belongs to the set:
    // an invariant set sums element i in rank order, in fp32, rounded once, whatever i and n
    // (two addends commute, so only T >= 3 can tell orders apart); a reference set sums as a
    // ring all-reduce does, from the rank that owns i's chunk, the chunk boundaries following
    // n, rounding to bf16 at every hop as a bf16 ring does.
    void (*all_reduce)(ops_set *ops, tp_comm *comm, bf16 *buf, long n);
    // TP-size invariance (T a power of two): buf fp32 summed as a pairwise tree over the ranks,
    // ((x_0 + x_1) + (x_2 + x_3)) + ..., never rounded: the top levels of the fixed tree over
    // the 8 slices whose lower levels each rank summed over its own. NULL: no such path.
    void (*all_reduce_f32_tree)(ops_set *ops, tp_comm *comm, float *buf, long n);
    // buf [rows, ld] fp32: rank r holds columns [col_begin_r, col_end_r) of every row; on
    // return every rank holds every rank's columns. A copy, with no order to vary.
    void (*all_gather_columns)(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld,
                               long col_begin, long col_end);

    // --- the devices of a tensor-parallel group (NULL on the CPU: every rank uses the host) --
    // Makes the calling thread's work go to the set's device: a rank's thread calls it before
    // any other op of its set (on CUDA the current device is per thread).
    void (*bind_thread)(ops_set *ops);
    // Opens the device communicators of group g, whose rank r runs ranks[r] (sets of this
    // device, each on its own device), and attaches them to g's rank handles; the group closes
    // them when destroyed (kernels/cpu/collective.h).
    void (*open_group)(ops_set *const *ranks, int T, tp_comm_group *g);
};

#endif
