// kernels/cuda/elementwise.cu — ops with no reduction, batch-invariant by nature: embedding,
// residual add, SiLU-and-multiply, the KV-cache write, TP-size invariance's fp32 add and rounding.
// One thread per element or per 8-element chunk; each element's arithmetic is the same whatever
// the launch shape.
#include <cuda_runtime.h>   // dim3
#include <math.h>           // expf

#include "../bf16.h"        // bf16_to_float, float_to_bf16
#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK_LAUNCH
#include "pdl.cuh"          // pdl_release_gemm
#include "inv_cuda_ops.h"   // inv_cuda_embedding, ...

static unsigned blocks_for(long n, int threads) { return (unsigned)((n + threads - 1) / threads); }

// --- embedding ---

__global__ void embedding_kernel(uint16_t *out, const uint16_t *table, const int32_t *ids, int T, int D) {
    pdl_release_gemm();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * D) return;
    int t = (int)(i / D), d = (int)(i % D);
    out[i] = table[(long)ids[t] * D + d];
}

void inv_cuda_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T, int D) {
    long n = (long)T * D;
    if (n <= 0) return;
    embedding_kernel<<<blocks_for(n, 256), 256, 0, cuda_ctx_of(ops)->stream>>>(out, table, ids, T, D);
    CUDA_CHECK_LAUNCH("embedding");
}

// --- residual add ---

__global__ void residual_add_kernel(uint16_t *x, const uint16_t *y, long n) {
    pdl_release_gemm();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
}

void inv_cuda_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n) {
    if (n <= 0) return;
    residual_add_kernel<<<blocks_for(n, 256), 256, 0, cuda_ctx_of(ops)->stream>>>(x, y, n);
    CUDA_CHECK_LAUNCH("residual_add");
}

// --- SiLU and multiply ---

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__global__ void silu_mul_kernel(uint16_t *out, const uint16_t *gu, int M, int I) {
    pdl_release_gemm();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)M * I) return;
    long m = i / I, j = i % I;
    float g = bf16_to_float(gu[m * 2 * I + j]), u = bf16_to_float(gu[m * 2 * I + I + j]);
    out[i] = float_to_bf16(bf16_round(silu(g)) * u);
}

void inv_cuda_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I) {
    long n = (long)M * I;
    if (n <= 0) return;
    silu_mul_kernel<<<blocks_for(n, 256), 256, 0, cuda_ctx_of(ops)->stream>>>(out, gate_up, M, I);
    CUDA_CHECK_LAUNCH("silu_mul");
}

// --- KV-cache write ---

// One block per token; a negative slot is a padding token and writes nothing.
__global__ void kv_cache_write_kernel(uint16_t *cache, const uint16_t *c_kv, long ld_c_kv,
                                      const uint16_t *k_pe, long ld_k_pe, const int32_t *slot, int L, int R) {
    pdl_release_gemm();
    int t = blockIdx.x;
    long s = slot[t];
    if (s < 0) return;
    uint16_t *dst = cache + s * (L + R);
    for (int i = threadIdx.x; i < L + R; i += blockDim.x)
        dst[i] = i < L ? c_kv[t * ld_c_kv + i] : k_pe[t * ld_k_pe + (i - L)];
}

void inv_cuda_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv,
                             const bf16 *k_pe, long ld_k_pe, const int32_t *slot, int T, int L, int R) {
    if (T <= 0) return;
    kv_cache_write_kernel<<<(unsigned)T, 128, 0, cuda_ctx_of(ops)->stream>>>(kv_cache, c_kv, ld_c_kv, k_pe,
                                                                             ld_k_pe, slot, L, R);
    CUDA_CHECK_LAUNCH("kv_cache_write");
}

// --- TP-size invariance's fp32 steps: x += y; out = bf16(x) ---

__global__ void add_f32_kernel(float *x, const float *y, long n) {
    pdl_release_gemm();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}

void inv_cuda_add_f32(ops_set *ops, float *x, const float *y, long n) {
    if (n <= 0) return;
    add_f32_kernel<<<blocks_for(n, 256), 256, 0, cuda_ctx_of(ops)->stream>>>(x, y, n);
    CUDA_CHECK_LAUNCH("add_f32");
}

// The pairwise tree over n slices of len values, element by element, in add_f32's adds.
__global__ void sum_slices_f32_kernel(float *parts, int n, long len) {
    pdl_release_gemm();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= len) return;
    float v[8];
    for (int s = 0; s < n; s++) v[s] = parts[s * len + i];
    for (int stride = 1; stride < n; stride *= 2)
        for (int s = 0; s + stride < n; s += 2 * stride) v[s] = __fadd_rn(v[s], v[s + stride]);
    parts[i] = v[0];
}

void inv_cuda_sum_slices_f32(ops_set *ops, float *parts, int n, long len) {
    if (n < 1 || n > 8 || (n & (n - 1)) != 0)
        invar_die(INVAR_EXIT_INPUT, "sum_slices_f32: %d slices: the tree needs 1, 2, 4 or 8", n);
    if (n == 1 || len <= 0) return;
    sum_slices_f32_kernel<<<blocks_for(len, 256), 256, 0, cuda_ctx_of(ops)->stream>>>(parts, n, len);
    CUDA_CHECK_LAUNCH("sum_slices_f32");
}

__global__ void round_to_bf16_kernel(uint16_t *out, const float *x, long n) {
    pdl_release_gemm();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float_to_bf16(x[i]);
}

void inv_cuda_round_to_bf16(ops_set *ops, bf16 *out, const float *x, long n) {
    if (n <= 0) return;
    round_to_bf16_kernel<<<blocks_for(n, 256), 256, 0, cuda_ctx_of(ops)->stream>>>(out, x, n);
    CUDA_CHECK_LAUNCH("round_to_bf16");
}
