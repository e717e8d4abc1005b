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
// The routed experts, the router and prefill attention keep the invariant kernels (README,
// "The kernel sets"); their inputs come from the ops above. Every choice is deterministic, so a
// repeated batch gives the same bits: caught as batch-variant, never as nondeterministic.
#include "adv_cuda.h"

#include <cublas_v2.h>                         // cublasGemmStridedBatchedEx
#include <cuda_runtime.h>                      // cudaMalloc, cudaFree
#include <stdlib.h>                            // free

#include "../../kernels/bf16.h"                // bf16_to_float, float_to_bf16, invar_mix64
#include "../../kernels/cuda/cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK, CUBLAS_CHECK
#include "../../kernels/cuda/inv_cuda_ops.h"   // inv_cuda_*, rmsnorm_launch, mla_attention_launch, logprobs_launch
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

// The set's own state: the shared CUDA context first (the reused invariant ops read ctx as a
// cuda_ctx), then its split-K partials.
typedef struct {
    cuda_ctx base;
    float *partials;       // two [batch, M, N] fp32 products
    size_t partial_bytes;
} adv_cuda_ctx;

static adv_cuda_ctx *adv_ctx(ops_set *ops) { return (adv_cuda_ctx *)ops->ctx; }

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

static void products(cuda_ctx *c, const gemm_args *a, int k0, int k1, float *out, long ldx, long ldw, int batch) {
    const float alpha = 1.0f, beta = 0.0f;
    long per = (long)a->M * a->N;
    CUBLAS_CHECK("gemm (adversarial)",
                 cublasGemmStridedBatchedEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->N, a->M, k1 - k0, &alpha,
                                            a->w + k0, CUDA_R_16BF, (int)ldw, a->stride_w, a->x + k0, CUDA_R_16BF,
                                            (int)ldx, a->stride_x, &beta, out, CUDA_R_32F, a->N, per, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void adv_cuda_gemm(ops_set *ops, const gemm_args *a) {
    adv_cuda_ctx *ac = adv_ctx(ops);
    cuda_ctx *c = &ac->base;
    if (a->M <= 0 || a->N <= 0) return;
    const long ldx = a->ldx ? a->ldx : a->K, ldy = a->ldy ? a->ldy : a->N, ldw = a->ldw ? a->ldw : a->K;
    const int batch = a->batch > 1 ? a->batch : 1;
    const long per = (long)a->M * a->N, n = per * batch;
    size_t need = (size_t)n * 2 * sizeof(float);
    if (need > ac->partial_bytes) {  // grows to the largest product, never per call
        CUDA_CHECK("gemm (adversarial)", cudaStreamSynchronize(c->stream));
        if (ac->partials) CUDA_CHECK("gemm (adversarial)", cudaFree(ac->partials));
        ac->partials = NULL;
        CUDA_CHECK("gemm (adversarial) partials", cudaMalloc((void **)&ac->partials, need + need / 4));
        ac->partial_bytes = need + need / 4;
    }
    float *p0 = ac->partials, *p1 = ac->partials + n;
    int k1 = split_point(a->M, a->K);
    if (k1 == 0) {  // K < 32: one product, and a zero second partial
        products(c, a, 0, a->K, p0, ldx, ldw, batch);
        CUDA_CHECK("gemm (adversarial)", cudaMemsetAsync(p1, 0, (size_t)n * sizeof(float), c->stream));
    } else {
        products(c, a, 0, k1, p0, ldx, ldw, batch);
        products(c, a, k1, a->K, p1, ldx, ldw, batch);
    }
    adv_add_partials_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c->stream>>>(
        a->y, a->y_f32, p0, p1, a->M, a->N, batch, ldy, batch > 1 ? a->stride_y : per);
    CUDA_CHECK_LAUNCH("gemm (adversarial) partial sum");
}

// --- rmsnorm, logprobs: block size from the row count ---------------------------------------

static void adv_cuda_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w,
                             int M, int D, float eps) {
    static const int threads[] = {32, 64, 128, 256, 512, 1024};
    rmsnorm_launch(cuda_ctx_of(ops), out, ld_out, x, ld_x, w, M, D, eps, threads[shape_hash(M) % 6]);
}

static void adv_cuda_logprobs(ops_set *ops, const logprobs_args *a) {
    static const int threads[] = {128, 256, 512, 1024};
    logprobs_launch(cuda_ctx_of(ops), a, threads[shape_hash(a->R) % 4]);
}

// --- mla_attention: split count from the sequences and the SMs ------------------------------

static void adv_cuda_mla_attention(ops_set *ops, const mla_attention_args *a) {
    cuda_ctx *c = cuda_ctx_of(ops);
    int seqs = a->num_seqs > 0 ? a->num_seqs : 1, head_groups = (a->H + 15) / 16;
    int splits = 2 * c->num_sms / (seqs * head_groups);
    if (splits < 1) splits = 1;
    int longest = a->max_seq_len > 0 ? a->max_seq_len : 1;
    int split_size = ((longest + splits - 1) / splits + 15) / 16 * 16;
    mla_attention_launch(c, a, split_size > 16 ? split_size : 16);
}

// --- moe_combine: busiest expert first, fused by load ---------------------------------------

__global__ void adv_expert_load_kernel(int *load, const int32_t *ids, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&load[ids[i]], 1);  // integer counts: exact in any order
}

#define ADV_MAX_K 64

__global__ void adv_combine_kernel(uint16_t *out, const uint16_t *eo, const float *w, const int32_t *ids,
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
        float e = bf16_to_float(eo[(t * k + j) * D + d]);
        s = fuse ? __fmaf_rn(w[t * k + j], e, s) : __fadd_rn(s, __fmul_rn(w[t * k + j], e));
    }
    out[i] = float_to_bf16(s);
}

static void adv_cuda_moe_combine(ops_set *ops, const moe_combine_args *a) {
    cuda_ctx *c = cuda_ctx_of(ops);
    long n = (long)a->T * a->D, tk = (long)a->T * a->k;
    if (n <= 0) return;
    if (a->k > ADV_MAX_K) invar_die(INVAR_EXIT_INPUT, "moe_combine (adversarial): k = %d > %d", a->k, ADV_MAX_K);
    int *load = (int *)cuda_scratch(c, SCRATCH_REF_COMBINE, (size_t)a->E * sizeof(int), "moe_combine expert loads");
    CUDA_CHECK("moe_combine (adversarial)", cudaMemsetAsync(load, 0, (size_t)a->E * sizeof(int), c->stream));
    adv_expert_load_kernel<<<(unsigned)((tk + 255) / 256), 256, 0, c->stream>>>(load, a->topk_ids, tk);
    CUDA_CHECK_LAUNCH("moe_combine (adversarial) loads");
    adv_combine_kernel<<<(unsigned)((n + 255) / 256), 256, 0, c->stream>>>(a->out, a->expert_out, a->topk_weights,
                                                                          a->topk_ids, load, a->T, a->k, a->D);
    CUDA_CHECK_LAUNCH("moe_combine (adversarial)");
}

// --- the set -------------------------------------------------------------------------------------

static void adv_cuda_destroy(ops_set *ops) {
    adv_cuda_ctx *ac = adv_ctx(ops);
    CUBLAS_CHECK("destroy", cublasDestroy(ac->base.cublas));
    cuda_ctx_free(&ac->base);
    if (ac->partials) CUDA_CHECK("destroy", cudaFree(ac->partials));
    free(ac);
    free(ops);
}

ops_set *adv_cuda_create(int threads) {
    (void)threads;
    adv_cuda_ctx *ac = (adv_cuda_ctx *)invar_calloc(1, sizeof *ac, "the adversarial CUDA context");
    cuda_ctx *c = &ac->base;
    cuda_ctx_init(c, "adversarial");
    CUBLAS_CHECK("create", cublasCreate(&c->cublas));
    CUBLAS_CHECK("create", cublasSetStream(c->cublas, c->stream));
    ops_set *ops = (ops_set *)invar_calloc(1, sizeof *ops, "the adversarial CUDA ops table");
    ops->name = "adversarial";
    ops->device = "cuda";
    ops->batch_invariant = false;
    ops->adversarial = true;
    ops->ctx = ac;
    ops->destroy = adv_cuda_destroy;
    ops->alloc = inv_cuda_alloc;
    ops->release = inv_cuda_release;
    ops->upload = inv_cuda_upload;
    ops->download = inv_cuda_download;
    ops->sync = inv_cuda_sync;
    ops->embedding = inv_cuda_embedding;
    ops->rmsnorm = adv_cuda_rmsnorm;
    ops->gemm = adv_cuda_gemm;
    ops->rope = inv_cuda_rope;
    ops->residual_add = inv_cuda_residual_add;
    ops->silu_mul = inv_cuda_silu_mul;
    ops->kv_cache_write = inv_cuda_kv_cache_write;
    ops->mla_attention = adv_cuda_mla_attention;
    ops->mha_prefill = inv_cuda_mha_prefill;
    ops->merge_attention = inv_cuda_merge_attention;
    ops->moe_route = inv_cuda_moe_route;
    ops->moe_experts = inv_cuda_moe_experts;
    ops->moe_combine = adv_cuda_moe_combine;
    ops->logprobs = adv_cuda_logprobs;
    return ops;
}
