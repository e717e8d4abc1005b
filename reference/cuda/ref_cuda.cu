// reference/cuda/ref_cuda.cu — the conventional CUDA kernel set: what a fast server does.
//   gemm          cuBLAS with its default heuristics (algorithm and split-K chosen per shape)
//   rmsnorm       block size chosen from the number of rows
//   mla_attention split-KV with the split COUNT chosen from the batch's longest sequence
//   moe_combine   atomicAdd into fp32 (order of arrival, different run to run)
//   all_reduce    ncclAllReduce as configured by default (bf16, ncclSum; fp32 for TP-size
//                 invariance's sum): NCCL picks the algorithm (ring, tree, NVLS off) and
//                 protocol from the message size
// The other ops are batch-invariant by nature and reuse kernels/cuda. Every choice goes to the
// set's order log (kernels/order_log.h), so a run that did not catch the set can say which
// ops never changed order at its shapes.
#include "ref_cuda.h"

#include <cublas_v2.h>                      // cublasCreate, cublasGemmEx, ...
#include <cuda_runtime.h>                   // cudaMemsetAsync
#include <nccl.h>                           // ncclAllReduce, ncclComm_t
#include <stdlib.h>                         // free

#include "../../common/check.h"             // invar_calloc
#include "../../common/cuda_check.cuh"      // CUDA_CHECK, CUBLAS_CHECK, invar_cublas_on_stream
#include "../../common/nccl_check.cuh"      // NCCL_CHECK
#include "../../kernels/cpu/collective.h"   // tp_comm_size
#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../kernels/cuda/moe_rows.cuh"  // moe_combine_io, moe_row_value
#include "../../kernels/cuda/inv_cuda.h"    // inv_cuda_init, inv_cuda_fini
#include "../../kernels/cuda/inv_cuda_launch.h"  // inv_cuda_stream, inv_cuda_reserve, inv_cuda_*_with_*
#include "../../kernels/order_log.h"        // order_log_note, order_log_create
#include "../../kernels/moe_slices.h"       // moe_combine_by_slice

// The set: the invariant set's ops_set first (its ctx is the invariant set's, which the reused
// ops read), then what the reference kernels keep.
typedef struct {
    ops_set ops;
    ops_set invariant;        // the invariant set's ops, which the recording wrappers call
    cublasHandle_t cublas;    // on the set's stream
    float *combine_acc;       // moe_combine's fp32 accumulator
    size_t combine_bytes;
} ref_cuda_set;

static ref_cuda_set *ref_set(ops_set *ops) { return (ref_cuda_set *)ops; }

// --- gemm: cuBLAS ------------------------------------------------------------------------------

// Row-major y = x·wᵀ is column-major yᵀ = w·xᵀ: A = w (K x N col-major, transposed),
// B = x (K x M col-major), C = yᵀ (N x M col-major).
static void ref_cuda_gemm(ops_set *ops, const gemm_args *a) {
    cublasHandle_t cublas = ref_set(ops)->cublas;
    if (a->M <= 0 || a->N <= 0) return;
    const long ldx = a->ldx ? a->ldx : a->K, ldy = a->ldy ? a->ldy : a->N, ldw = a->ldw ? a->ldw : a->K;
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType_t ty = a->y_f32 ? CUDA_R_32F : CUDA_R_16BF;
    order_log_note_unobservable(ops->orders, ORDER_GEMM, "cuBLAS picks its kernel inside the library");
    if (a->batch > 1)
        CUBLAS_CHECK("gemm", cublasGemmStridedBatchedEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->N, a->M, a->K, &alpha,
                                                        a->w, CUDA_R_16BF, (int)ldw, a->stride_w, a->x, CUDA_R_16BF,
                                                        (int)ldx, a->stride_x, &beta, a->y, ty, (int)ldy, a->stride_y,
                                                        a->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        CUBLAS_CHECK("gemm", cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, a->N, a->M, a->K, &alpha, a->w,
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
    inv_cuda_rmsnorm_with_block(ops, out, ld_out, x, ld_x, w, M, D, eps, threads);
}

// --- mla_attention: split count from the batch ---------------------------------------------

static int next_pow2(int v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

static void ref_cuda_mla_attention(ops_set *ops, const mla_attention_args *a) {
    int longest = a->max_seq_len > 0 ? a->max_seq_len : 1;
    int splits = next_pow2(longest / 512 > 1 ? longest / 512 : 1);
    if (splits > 2 * inv_cuda_num_sms(ops)) splits = 2 * inv_cuda_num_sms(ops);
    int split_size = (longest + splits - 1) / splits;  // a request's split points move with the batch
    if (a->kv_split_size > 0) split_size = a->kv_split_size;
    // One split below 1024 positions: the split size is then the sequence's own length, which
    // gives the same partition as any other one-split size.
    order_log_note(ops->orders, ORDER_MLA_ATTENTION, (uint64_t)a->H << 40 | (uint64_t)a->L << 20 | (uint64_t)a->R,
                   splits == 1 && a->kv_split_size <= 0 ? 0 : (uint64_t)split_size);
    inv_cuda_mla_attention_with_split(ops, a, split_size);
}

// --- moe_combine: atomics ------------------------------------------------------------------

// F32 (TP-size invariance): fp32 expert rows in, and the accumulator is the output.
template <bool F32>
__global__ void ref_combine_atomic_kernel(float *acc, const void *eo, const float *w, int T, int k, int D) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * k * D) return;
    long tj = i / D, d = i % D, t = tj / k;
    atomicAdd(&acc[t * D + d], w[tj] * moe_row_value<F32>(eo, i));
}

__global__ void ref_combine_round_kernel(uint16_t *out, const float *acc, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float_to_bf16(acc[i]);
}

static void ref_cuda_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, ref_cuda_moe_combine)) return;
    ref_cuda_set *r = ref_set(ops);
    cudaStream_t stream = inv_cuda_stream(ops);
    long n = (long)a->T * a->D, nk = n * a->k;
    if (n <= 0) return;
    // Two addends onto an exact zero give one result in any arrival order; three do not.
    if (a->k <= 2) order_log_note(ops->orders, ORDER_MOE_COMBINE, (uint64_t)a->D << 8 | (uint64_t)a->k, 0);
    else order_log_note_unobservable(ops->orders, ORDER_MOE_COMBINE, "atomics add in arrival order");
    const moe_combine_io io = moe_combine_io_of(a);
    float *acc = io.f32 ? (float *)io.out
                        : (float *)inv_cuda_reserve(ops, (void **)&r->combine_acc, &r->combine_bytes, (size_t)n * 4,
                                          "moe_combine accumulator");
    CUDA_CHECK("moe_combine", cudaMemsetAsync(acc, 0, (size_t)n * 4, stream));
    (io.f32 ? ref_combine_atomic_kernel<true> : ref_combine_atomic_kernel<false>)<<<(unsigned)((nk + 255) / 256), 256,
                                                                                    0, stream>>>(
        acc, io.rows, a->topk_weights, a->T, a->k, a->D);
    CUDA_CHECK_LAUNCH("moe_combine");
    if (io.f32) return;
    ref_combine_round_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(a->out, acc, n);
    CUDA_CHECK_LAUNCH("moe_combine round");
}

// --- ops reused from the invariant set, recorded as one order each ------------------------------

static void ref_cuda_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    order_log_note(ops->orders, ORDER_MHA_PREFILL, (uint64_t)a->H << 40 | (uint64_t)a->nope << 20 | (uint64_t)a->v, 0);
    ref_set(ops)->invariant.mha_prefill(ops, a);
}

static void ref_cuda_moe_route(ops_set *ops, const moe_route_args *a) {
    order_log_note(ops->orders, ORDER_MOE_ROUTE, (uint64_t)a->D << 32 | (uint64_t)a->E, 0);
    ref_set(ops)->invariant.moe_route(ops, a);
}

static void ref_cuda_moe_experts(ops_set *ops, const moe_experts_args *a) {
    order_log_note(ops->orders, ORDER_MOE_EXPERTS, (uint64_t)a->D << 32 | (uint64_t)a->I, 0);
    ref_set(ops)->invariant.moe_experts(ops, a);
}

static void ref_cuda_logprobs(ops_set *ops, const logprobs_args *a) {
    order_log_note(ops->orders, ORDER_LOGPROBS, (uint64_t)a->V, 0);
    ref_set(ops)->invariant.logprobs(ops, a);
}

// --- all_reduce: NCCL's own sum --------------------------------------------------------------

// In place, bf16, ncclSum, on the set's stream; with three or more ranks an element's order
// follows its offset and the message size (README, "Tensor parallelism").
static void ref_cuda_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    if (tp_comm_size(comm) == 1 || n <= 0) return;
    ncclComm_t nc = (ncclComm_t)inv_cuda_nccl_comm(comm, "all_reduce (reference)");
    NCCL_CHECK("all_reduce (reference)", ncclAllReduce(buf, buf, (size_t)n, ncclBfloat16, ncclSum,
                                                       nc, inv_cuda_stream(ops)));
}

// TP-size invariance's fp32 sum as a library does it: ncclAllReduce in fp32, NCCL's ring or tree.
static void ref_cuda_all_reduce_f32(ops_set *ops, tp_comm *comm, float *buf, long n) {
    if (tp_comm_size(comm) == 1 || n <= 0) return;
    ncclComm_t nc = (ncclComm_t)inv_cuda_nccl_comm(comm, "all_reduce_f32_tree (reference)");
    NCCL_CHECK("all_reduce_f32_tree (reference)", ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, nc,
                                                                inv_cuda_stream(ops)));
}

// --- the set -------------------------------------------------------------------------------------

static void ref_cuda_destroy(ops_set *ops) {
    ref_cuda_set *r = ref_set(ops);
    int previous = inv_cuda_enter(ops);  // a rank's set is freed on its own device
    CUDA_CHECK("destroy", cudaStreamSynchronize(inv_cuda_stream(ops)));
    CUBLAS_CHECK("destroy", cublasDestroy(r->cublas));
    if (r->combine_acc) CUDA_CHECK("destroy", cudaFree(r->combine_acc));
    order_log_destroy(ops->orders);
    inv_cuda_fini(ops);
    free(r);
    inv_cuda_leave(previous);
}

ops_set *ref_cuda_create(int threads) {
    (void)threads;
    ref_cuda_set *r = (ref_cuda_set *)invar_calloc(1, sizeof *r, "the reference CUDA set");
    ops_set *ops = &r->ops;
    inv_cuda_init(ops, "reference");  // memory and the ops that are invariant by nature
    r->invariant = *ops;
    r->cublas = invar_cublas_on_stream(inv_cuda_stream(ops));
    ops->name = "reference";
    ops->batch_invariant = false;
    ops->orders = order_log_create();
    ops->destroy = ref_cuda_destroy;
    ops->rmsnorm = ref_cuda_rmsnorm;
    ops->gemm = ref_cuda_gemm;
    ops->mla_attention = ref_cuda_mla_attention;
    ops->moe_combine = ref_cuda_moe_combine;
    ops->all_reduce = ref_cuda_all_reduce;
    ops->all_reduce_f32_tree = ref_cuda_all_reduce_f32;
    // Its moe_combine keeps the fp32 form (atomics): the engine's TP-size-invariant mode runs on it.
    ops->tp_size_invariant = true;
    // Invariant kernels, wrapped to record their one order.
    ops->mha_prefill = ref_cuda_mha_prefill;
    ops->moe_route = ref_cuda_moe_route;
    ops->moe_experts = ref_cuda_moe_experts;
    ops->logprobs = ref_cuda_logprobs;
    return ops;
}
