// adversarial/cuda/adv_cuda.cu — the adversarial CUDA kernel set. The reference set (cuBLAS,
// split-KV by the longest sequence, atomics) is realistic, and at small shapes realistic is
// often order-free: cuBLAS keeps one kernel, one KV split below 1024 positions, two atomic
// addends. This set takes every reduction's order from the batch at every shape:
//   gemm          split-K in two cuBLAS products at a K boundary chosen from a hash of M, the
//                 fp32 partials added by a kernel
//   rmsnorm       block size from a hash of M
//   mla_attention KV split count from the number of sequences and the SM count, as SGLang's
//                 and AITER's decode kernels size their grids
//   moe_combine   experts summed busiest first, contracted into FMAs when the busiest expert's
//                 load is odd (shows with two experts per token)
//   logprobs      block size from a hash of R
//   all_reduce    NCCL all-gather, then every element summed around the ring from a rank
//                 hashed from the message size, bf16 at every hop (caught from T = 3 on); the
//                 fp32 one of TP-size invariance the same chain, unrounded
// The routed experts, the router and prefill attention keep the invariant kernels (README,
// "The kernel sets"); their inputs come from the ops above. Every choice is deterministic, so a
// repeated batch gives the same bits: caught as batch-variant, never as nondeterministic.
#include "adv_cuda.h"

#include <cublas_v2.h>                         // cublasGemmStridedBatchedEx
#include <cuda_runtime.h>                      // cudaMalloc, cudaFree
#include <stdlib.h>                            // free

#include "../../common/check.h"                // invar_calloc, invar_die
#include "../../common/cuda_check.cuh"         // CUDA_CHECK, CUBLAS_CHECK, invar_cublas_on_stream
#include "../../kernels/bf16.h"                // bf16_to_float, float_to_bf16
#include "../../kernels/cuda/inv_cuda.h"       // inv_cuda_init, inv_cuda_fini
#include "../../kernels/cuda/inv_cuda_launch.h"  // inv_cuda_stream, inv_cuda_reserve, inv_cuda_*_with_*, inv_cuda_all_reduce_from_rank
#include "../../kernels/cpu/collective.h"      // tp_comm_size
#include "../../kernels/cuda/moe_rows.cuh"     // moe_combine_io, moe_row_value, moe_combine_store
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise
#include "../../kernels/moe_slices.h"       // moe_combine_by_slice

// The set: the invariant set's ops_set first (its ctx is the invariant set's, which the reused
// ops read), then what the adversarial kernels keep.
typedef struct {
    ops_set ops;
    cublasHandle_t cublas;  // on the set's stream
    float *partials;        // two [batch, M, N] fp32 products
    size_t partial_bytes;
    int *loads;             // tokens per expert, for moe_combine
    size_t load_bytes;
} adv_cuda_set;

static adv_cuda_set *adv_set(ops_set *ops) { return (adv_cuda_set *)ops; }

// A well-mixed hash of a row count, so neighbouring batch sizes pick unrelated orders.
static unsigned shape_hash(int n) { return (unsigned)(invar_mix64((uint64_t)n) >> 32); }

// --- gemm: split-K at an M-dependent boundary ----------------------------------------------

// The boundary is a multiple of 16 elements (keeps the second product's operands 32-byte
// aligned); 0 when K is too short to split.
static int split_point(int M, int K) {
    int pieces = K / 16;
    if (pieces < 2) return 0;
    return 16 * (1 + (int)(shape_hash(M) % (unsigned)(pieces - 1)));
}

__global__ void adv_add_partials_kernel(void *y, bool y_f32, const float *p0, const float *p1, int M, int N,
                                        long batch, long ldy, long stride_y) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= batch * M * N) return;
    long b = i / ((long)M * N), m = i / N % M, n = i % N;
    float v = __fadd_rn(p0[i], p1[i]);
    long o = b * stride_y + m * ldy + n;
    if (y_f32) ((float *)y)[o] = v;
    else ((uint16_t *)y)[o] = float_to_bf16(v);
}

static void products(cublasHandle_t cublas, const gemm_args *a, int k0, int k1, float *out, long ldx, long ldw,
                     int batch) {
    const float alpha = 1.0f, beta = 0.0f;
    long per = (long)a->M * a->N;
    CUBLAS_CHECK("gemm (adversarial)",
                 cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->N, a->M, k1 - k0, &alpha,
                                            a->w + k0, CUDA_R_16BF, (int)ldw, a->stride_w, a->x + k0, CUDA_R_16BF,
                                            (int)ldx, a->stride_x, &beta, out, CUDA_R_32F, a->N, per, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void adv_cuda_gemm(ops_set *ops, const gemm_args *a) {
    adv_cuda_set *s = adv_set(ops);
    cudaStream_t stream = inv_cuda_stream(ops);
    if (a->M <= 0 || a->N <= 0) return;
    const long ldx = a->ldx ? a->ldx : a->K, ldy = a->ldy ? a->ldy : a->N, ldw = a->ldw ? a->ldw : a->K;
    const int batch = a->batch > 1 ? a->batch : 1;
    const long per = (long)a->M * a->N, n = per * batch;
    float *p0 = (float *)inv_cuda_reserve(ops, (void **)&s->partials, &s->partial_bytes, (size_t)n * 2 * sizeof(float),
                                          "gemm (adversarial) partials");
    float *p1 = p0 + n;
    int k1 = split_point(a->M, a->K);
    if (k1 == 0) {  // K < 32: one product, and a zero second partial
        products(s->cublas, a, 0, a->K, p0, ldx, ldw, batch);
        CUDA_CHECK("gemm (adversarial)", cudaMemsetAsync(p1, 0, (size_t)n * sizeof(float), stream));
    } else {
        products(s->cublas, a, 0, k1, p0, ldx, ldw, batch);
        products(s->cublas, a, k1, a->K, p1, ldx, ldw, batch);
    }
    adv_add_partials_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
        a->y, a->y_f32, p0, p1, a->M, a->N, batch, ldy, batch > 1 ? a->stride_y : per);
    CUDA_CHECK_LAUNCH("gemm (adversarial) partial sum");
}

// --- rmsnorm, logprobs: block size from the row count ---------------------------------------

static void adv_cuda_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w,
                             int M, int D, float eps) {
    static const int threads[] = {32, 64, 128, 256, 512, 1024};
    inv_cuda_rmsnorm_with_block(ops, out, ld_out, x, ld_x, w, M, D, eps, threads[shape_hash(M) % 6]);
}

static void adv_cuda_logprobs(ops_set *ops, const logprobs_args *a) {
    static const int threads[] = {128, 256, 512, 1024};
    inv_cuda_logprobs_with_block(ops, a, threads[shape_hash(a->R) % 4]);
}

// --- mla_attention: split count from the sequences and the SMs ------------------------------

static void adv_cuda_mla_attention(ops_set *ops, const mla_attention_args *a) {
    int seqs = a->num_seqs > 0 ? a->num_seqs : 1, head_groups = (a->H + 15) / 16;
    int splits = 2 * inv_cuda_num_sms(ops) / (seqs * head_groups);
    if (splits < 1) splits = 1;
    int longest = a->max_seq_len > 0 ? a->max_seq_len : 1;
    int split_size = ((longest + splits - 1) / splits + 15) / 16 * 16;
    inv_cuda_mla_attention_with_split(ops, a, split_size > 16 ? split_size : 16);
}

// --- moe_combine: busiest expert first, fused by load ---------------------------------------

__global__ void adv_expert_load_kernel(int *load, const int32_t *ids, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&load[ids[i]], 1);  // integer counts: exact in any order
}

#define ADV_MAX_K 64

// F32 (TP-size invariance): fp32 expert rows in, the sum stored unrounded; the same order.
template <bool F32>
__global__ void adv_combine_kernel(void *out, const void *eo, const float *w, const int32_t *ids,
                                   const int *load, int T, int k, int D) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * D) return;
    long t = i / D, d = i % D;
    int order[ADV_MAX_K];
    for (int j = 0; j < k; j++) {  // insertion sort of the token's experts: busiest first
        int p = j;
        for (; p > 0; p--) {
            int e = ids[t * k + j], f = ids[t * k + order[p - 1]];
            if (!(load[e] > load[f] || (load[e] == load[f] && e < f))) break;
            order[p] = order[p - 1];
        }
        order[p] = j;
    }
    bool fuse = load[ids[t * k + order[0]]] % 2 == 1;
    float s = 0.0f;
    for (int p = 0; p < k; p++) {
        int j = order[p];
        float e = moe_row_value<F32>(eo, (t * k + j) * D + d);
        s = fuse ? __fmaf_rn(w[t * k + j], e, s) : __fadd_rn(s, __fmul_rn(w[t * k + j], e));
    }
    moe_combine_store<F32>(out, i, s);
}

static void adv_cuda_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, adv_cuda_moe_combine)) return;
    adv_cuda_set *s = adv_set(ops);
    cudaStream_t stream = inv_cuda_stream(ops);
    long n = (long)a->T * a->D, tk = (long)a->T * a->k;
    if (n <= 0) return;
    if (a->k > ADV_MAX_K) invar_die(INVAR_EXIT_INPUT, "moe_combine (adversarial): k = %d > %d", a->k, ADV_MAX_K);
    int *load = (int *)inv_cuda_reserve(ops, (void **)&s->loads, &s->load_bytes, (size_t)a->E * sizeof(int),
                                          "moe_combine expert loads");
    CUDA_CHECK("moe_combine (adversarial)", cudaMemsetAsync(load, 0, (size_t)a->E * sizeof(int), stream));
    adv_expert_load_kernel<<<(unsigned)((tk + 255) / 256), 256, 0, stream>>>(load, a->topk_ids, tk);
    CUDA_CHECK_LAUNCH("moe_combine (adversarial) loads");
    const moe_combine_io io = moe_combine_io_of(a);
    (io.f32 ? adv_combine_kernel<true> : adv_combine_kernel<false>)<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
        io.out, io.rows, a->topk_weights, a->topk_ids, load, a->T, a->k, a->D);
    CUDA_CHECK_LAUNCH("moe_combine (adversarial)");
}

// --- all_reduce: the ring starts at a rank hashed from the message size ------------------------

// As the adversarial CPU set (adversarial/cpu/adv_cpu.c): every element's sum starts at rank
// mix64(n) mod T and rounds to bf16 at every hop, so the message size (the batch's token
// count) picks the order. Caught from T = 3 on; at T = 2 two addends commute.
static int first_rank_of(long n, int T) { return (int)(invar_mix64((uint64_t)n) % (uint64_t)T); }

static void adv_cuda_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    inv_cuda_all_reduce_from_rank(ops, comm, buf, n, first_rank_of(n, tp_comm_size(comm)), true);
}

// TP-size invariance's fp32 sum, by the same rule: a chain from the hashed rank, never rounded
// (caught from T = 3 on, as the bf16 one).
static void adv_cuda_all_reduce_f32(ops_set *ops, tp_comm *comm, float *buf, long n) {
    inv_cuda_all_reduce_f32_from_rank(ops, comm, buf, n, first_rank_of(n, tp_comm_size(comm)));
}

// --- the set -------------------------------------------------------------------------------------

static void adv_cuda_destroy(ops_set *ops) {
    adv_cuda_set *s = adv_set(ops);
    int previous = inv_cuda_enter(ops);  // a rank's set is freed on its own device
    CUDA_CHECK("destroy", cudaStreamSynchronize(inv_cuda_stream(ops)));
    CUBLAS_CHECK("destroy", cublasDestroy(s->cublas));
    if (s->partials) CUDA_CHECK("destroy", cudaFree(s->partials));
    if (s->loads) CUDA_CHECK("destroy", cudaFree(s->loads));
    inv_cuda_fini(ops);
    free(s);
    inv_cuda_leave(previous);
}

ops_set *adv_cuda_create(int threads) {
    (void)threads;
    adv_cuda_set *s = (adv_cuda_set *)invar_calloc(1, sizeof *s, "the adversarial CUDA set");
    ops_set *ops = &s->ops;
    inv_cuda_init(ops, "adversarial");  // memory, and the ops left invariant (header comment)
    s->cublas = invar_cublas_on_stream(inv_cuda_stream(ops));
    ops->name = "adversarial";
    ops->batch_invariant = false;
    ops->adversarial = true;
    ops->destroy = adv_cuda_destroy;
    ops->rmsnorm = adv_cuda_rmsnorm;
    ops->gemm = adv_cuda_gemm;
    ops->mla_attention = adv_cuda_mla_attention;
    ops->moe_combine = adv_cuda_moe_combine;
    ops->logprobs = adv_cuda_logprobs;
    ops->all_reduce = adv_cuda_all_reduce;
    ops->all_reduce_f32_tree = adv_cuda_all_reduce_f32;
    // Its moe_combine keeps the fp32 form (in its own order): the engine's TP-size-invariant mode
    // runs on it and is caught.
    ops->tp_size_invariant = true;
    return ops;
}
