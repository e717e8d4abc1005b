// reference/cuda/ref_cuda.cu — the conventional CUDA kernel set: what a fast server does.
//   gemm          cuBLAS with its default heuristics (algorithm and split-K chosen per shape)
//   rmsnorm       block size chosen from the number of rows
//   mla_attention split-KV with the split COUNT chosen from the batch's longest sequence
//   moe_combine   atomicAdd into fp32 (order of arrival, different run to run)
// The other ops are batch-invariant by nature and reuse kernels/cuda. Every choice goes to the
// set's order log (kernels/order_log.h), so a run that did not catch the set can say which
// ops never changed order at its shapes.
#include "ref_cuda.h"

#include <cublas_v2.h>                      // cublasCreate, cublasGemmEx, ...
#include <cuda_runtime.h>                   // cudaMemsetAsync
#include <stdlib.h>                         // free

#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../kernels/cuda/cuda_ctx.cuh"  // cuda_ctx, CUDA_CHECK, CUBLAS_CHECK, invar_calloc
#include "../../kernels/cuda/inv_cuda_ops.h"  // inv_cuda_* ops, rmsnorm_launch, mla_attention_launch
#include "../../kernels/order_log.h"        // order_log_note, order_log_create

// --- gemm: cuBLAS ------------------------------------------------------------------------------

// Row-major y = x·wᵀ is column-major yᵀ = w·xᵀ: A = w (K x N col-major, transposed),
// B = x (K x M col-major), C = yᵀ (N x M col-major).
static void ref_cuda_gemm(ops_set *ops, const gemm_args *a) {
    cuda_ctx *c = cuda_ctx_of(ops);
    if (a->M <= 0 || a->N <= 0) return;
    const long ldx = a->ldx ? a->ldx : a->K, ldy = a->ldy ? a->ldy : a->N, ldw = a->ldw ? a->ldw : a->K;
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType_t ty = a->y_f32 ? CUDA_R_32F : CUDA_R_16BF;
    order_log_note_unobservable(ops->orders, ORDER_GEMM, "cuBLAS picks its kernel inside the library");
    if (a->batch > 1)
        CUBLAS_CHECK("gemm", cublasGemmStridedBatchedEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->N, a->M, a->K, &alpha,
                                                        a->w, CUDA_R_16BF, (int)ldw, a->stride_w, a->x, CUDA_R_16BF,
                                                        (int)ldx, a->stride_x, &beta, a->y, ty, (int)ldy, a->stride_y,
                                                        a->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK("gemm", cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->N, a->M, a->K, &alpha, a->w,
                                          CUDA_R_16BF, (int)ldw, a->x, CUDA_R_16BF, (int)ldx, &beta, a->y, ty,
                                          (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// --- rmsnorm: block size from M ------------------------------------------------------------

// Few rows get wide blocks (more threads per row), many rows narrow ones — the usual tuning,
// and each block size partitions a row's sum of squares differently.
static void ref_cuda_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w,
                             int M, int D, float eps) {
    int threads = M <= 32 ? 1024 : M <= 512 ? 256 : 64;
    order_log_note(ops->orders, ORDER_RMSNORM, (uint64_t)D, (uint64_t)threads);
    rmsnorm_launch(cuda_ctx_of(ops), out, ld_out, x, ld_x, w, M, D, eps, threads);
}

// --- mla_attention: split count from the batch ---------------------------------------------

static int next_pow2(int v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

static void ref_cuda_mla_attention(ops_set *ops, const mla_attention_args *a) {
    cuda_ctx *c = cuda_ctx_of(ops);
    int longest = a->max_seq_len > 0 ? a->max_seq_len : 1;
    int splits = next_pow2(longest / 512 > 1 ? longest / 512 : 1);
    if (splits > 2 * c->num_sms) splits = 2 * c->num_sms;
    int split_size = (longest + splits - 1) / splits;  // a request's split points move with the batch
    if (a->kv_split_size > 0) split_size = a->kv_split_size;
    // One split below 1024 positions: the split size is then the sequence's own length, which
    // gives the same partition as any other one-split size.
    order_log_note(ops->orders, ORDER_MLA_ATTENTION, (uint64_t)a->H << 40 | (uint64_t)a->L << 20 | (uint64_t)a->R,
                   splits == 1 && a->kv_split_size <= 0 ? 0 : (uint64_t)split_size);
    mla_attention_launch(c, a, split_size);
}

// --- moe_combine: atomics ------------------------------------------------------------------

__global__ void ref_combine_atomic_kernel(float *acc, const uint16_t *eo, const float *w, int T, int k, int D) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * k * D) return;
    long tj = i / D, d = i % D, t = tj / k;
    atomicAdd(&acc[t * D + d], w[tj] * bf16_to_float(eo[i]));
}

__global__ void ref_combine_round_kernel(uint16_t *out, const float *acc, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float_to_bf16(acc[i]);
}

static void ref_cuda_moe_combine(ops_set *ops, const moe_combine_args *a) {
    cuda_ctx *c = cuda_ctx_of(ops);
    long n = (long)a->T * a->D, nk = n * a->k;
    if (n <= 0) return;
    // Two addends onto an exact zero give one result in any arrival order; three do not.
    if (a->k <= 2) order_log_note(ops->orders, ORDER_MOE_COMBINE, (uint64_t)a->D << 8 | (uint64_t)a->k, 0);
    else order_log_note_unobservable(ops->orders, ORDER_MOE_COMBINE, "atomics add in arrival order");
    float *acc = (float *)cuda_scratch(c, SCRATCH_REF_COMBINE, (size_t)n * 4, "moe_combine accumulator");
    CUDA_CHECK("moe_combine", cudaMemsetAsync(acc, 0, (size_t)n * 4, c->stream));
    ref_combine_atomic_kernel<<<(unsigned)((nk + 255) / 256), 256, 0, c->stream>>>(acc, a->expert_out,
                                                                                 a->topk_weights, a->T, a->k, a->D);
    CUDA_CHECK_LAUNCH("moe_combine");
    ref_combine_round_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c->stream>>>(a->out, acc, n);
    CUDA_CHECK_LAUNCH("moe_combine round");
}

// --- ops reused from the invariant set, recorded as one order each ------------------------------

static void ref_cuda_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    order_log_note(ops->orders, ORDER_MHA_PREFILL, (uint64_t)a->H << 40 | (uint64_t)a->nope << 20 | (uint64_t)a->v, 0);
    inv_cuda_mha_prefill(ops, a);
}

static void ref_cuda_moe_route(ops_set *ops, const moe_route_args *a) {
    order_log_note(ops->orders, ORDER_MOE_ROUTE, (uint64_t)a->D << 32 | (uint64_t)a->E, 0);
    inv_cuda_moe_route(ops, a);
}

static void ref_cuda_moe_experts(ops_set *ops, const moe_experts_args *a) {
    order_log_note(ops->orders, ORDER_MOE_EXPERTS, (uint64_t)a->D << 32 | (uint64_t)a->I, 0);
    inv_cuda_moe_experts(ops, a);
}

static void ref_cuda_logprobs(ops_set *ops, const logprobs_args *a) {
    order_log_note(ops->orders, ORDER_LOGPROBS, (uint64_t)a->V, 0);
    inv_cuda_logprobs(ops, a);
}

// --- the set -------------------------------------------------------------------------------------

static void ref_cuda_destroy(ops_set *ops) {
    cuda_ctx *c = cuda_ctx_of(ops);
    CUBLAS_CHECK("destroy", cublasDestroy(c->cublas));
    cuda_ctx_free(c);
    order_log_destroy(ops->orders);
    free(ops->ctx);
    free(ops);
}

ops_set *ref_cuda_create(int threads) {
    (void)threads;
    cuda_ctx *c = (cuda_ctx *)invar_calloc(1, sizeof *c, "the reference CUDA context");
    cuda_ctx_init(c, "reference");
    CUBLAS_CHECK("create", cublasCreate(&c->cublas));
    CUBLAS_CHECK("create", cublasSetStream(c->cublas, c->stream));
    ops_set *ops = (ops_set *)invar_calloc(1, sizeof *ops, "the reference CUDA ops table");
    ops->name = "reference";
    ops->device = "cuda";
    ops->batch_invariant = false;
    ops->orders = order_log_create();
    ops->ctx = c;
    ops->destroy = ref_cuda_destroy;
    ops->alloc = inv_cuda_alloc;
    ops->release = inv_cuda_release;
    ops->upload = inv_cuda_upload;
    ops->download = inv_cuda_download;
    ops->sync = inv_cuda_sync;
    ops->embedding = inv_cuda_embedding;
    ops->rmsnorm = ref_cuda_rmsnorm;
    ops->gemm = ref_cuda_gemm;
    ops->rope = inv_cuda_rope;
    ops->residual_add = inv_cuda_residual_add;
    ops->silu_mul = inv_cuda_silu_mul;
    ops->kv_cache_write = inv_cuda_kv_cache_write;
    ops->mla_attention = ref_cuda_mla_attention;
    ops->mha_prefill = ref_cuda_mha_prefill;
    ops->merge_attention = inv_cuda_merge_attention;
    ops->moe_route = ref_cuda_moe_route;
    ops->moe_experts = ref_cuda_moe_experts;
    ops->moe_combine = ref_cuda_moe_combine;
    ops->logprobs = ref_cuda_logprobs;
    return ops;
}
