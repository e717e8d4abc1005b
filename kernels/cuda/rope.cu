// kernels/cuda/rope.cu — rotary embedding in place, one thread per (token, head, pair).
// Each pair's rotation reads only its own two values, so it is batch-invariant by nature.
// Products and sums use explicit _rn intrinsics: no FMA contraction, the same arithmetic as
// the CPU sets.
#include <cuda_runtime.h>   // __fmul_rn, __fadd_rn

#include "../bf16.h"        // bf16_to_float, float_to_bf16
#include "cuda_ctx.cuh"     // CUDA_CHECK_LAUNCH
#include "pdl.cuh"          // pdl_release_gemm
#include "inv_cuda_ops.h"   // inv_cuda_rope

// rotate_half pairs (x[p], x[p + R/2]): each thread owns one pair, reads then writes it.
__global__ void rope_kernel(uint16_t *x, long ld_token, long ld_head, int T, int H, int R,
                            const int32_t *pos, const float *cos_t, const float *sin_t) {
    pdl_release_gemm();
    int half = R / 2;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * H * half) return;
    int p = (int)(i % half);
    long th = i / half;
    int h = (int)(th % H), t = (int)(th / H);
    uint16_t *v = x + t * ld_token + h * ld_head;
    float c = cos_t[(long)pos[t] * half + p], s = sin_t[(long)pos[t] * half + p];
    float a = bf16_to_float(v[p]), b = bf16_to_float(v[p + half]);
    v[p] = float_to_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    v[p + half] = float_to_bf16(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
}

// Interleaved: out[p] = x[2p] cos - x[2p+1] sin, out[p + R/2] = x[2p+1] cos + x[2p] sin. The
// whole head is read into registers before it is written, one thread per (token, head).
#define ROPE_MAX_R 1024
__global__ void rope_interleave_kernel(uint16_t *x, long ld_token, long ld_head, int T, int H, int R,
                                       const int32_t *pos, const float *cos_t, const float *sin_t) {
    pdl_release_gemm();
    int half = R / 2;
    int th = blockIdx.x;  // one block per (token, head); threads over pairs
    int h = th % H, t = th / H;
    uint16_t *v = x + t * ld_token + h * ld_head;
    __shared__ uint16_t in[ROPE_MAX_R];
    for (int i = threadIdx.x; i < R; i += blockDim.x) in[i] = v[i];
    __syncthreads();
    for (int p = threadIdx.x; p < half; p += blockDim.x) {
        float c = cos_t[(long)pos[t] * half + p], s = sin_t[(long)pos[t] * half + p];
        float a = bf16_to_float(in[2 * p]), b = bf16_to_float(in[2 * p + 1]);
        v[p] = float_to_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        v[p + half] = float_to_bf16(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
    }
}

void inv_cuda_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                   const int32_t *pos, const float *cos, const float *sin, bool interleave) {
    if (T <= 0 || H <= 0 || R <= 0) return;
    if (R % 2 || R > ROPE_MAX_R) invar_die(INVAR_EXIT_INPUT, "rope: R=%d must be even and at most %d", R, ROPE_MAX_R);
    cudaStream_t s = cuda_ctx_of(ops)->stream;
    if (interleave) {
        long blocks = (long)T * H;
        if (blocks > 2147483647L) invar_die(INVAR_EXIT_INPUT, "rope: T*H=%ld too large", blocks);
        rope_interleave_kernel<<<(unsigned)blocks, 64, 0, s>>>(x, ld_token, ld_head, T, H, R, pos, cos, sin);
    } else {
        long n = (long)T * H * (R / 2);
        rope_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, ld_token, ld_head, T, H, R, pos, cos, sin);
    }
    CUDA_CHECK_LAUNCH("rope");
}
