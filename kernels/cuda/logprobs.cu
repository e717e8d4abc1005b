// kernels/cuda/logprobs.cu — log-softmax, sampling and top-k: one row per block of a fixed
// 1024 threads in the invariant set; every reduction is the fixed block reduction
// (block_reduce.cuh), so a row's results never depend on R. logprobs_launch takes another
// block size for sets that choose it from the batch.
#include <cuda_runtime.h>    // dim3
#include <math.h>            // expf, logf, INFINITY

#include "block_reduce.cuh"  // block_reduce
#include "cuda_ctx.cuh"      // CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"    // inv_cuda_logprobs
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

#define LOGPROBS_THREADS 1024

// (v, id) beats (v2, id2): larger value, then lower id.
__device__ __forceinline__ bool beats(float v, int id, float v2, int id2) {
    return v > v2 || (v == v2 && id >= 0 && (id2 < 0 || id < id2));
}

__device__ void block_argmax(float &v, int &id, float *rv, int *ri) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, id, o);
        if (beats(ov, oi, v, id)) { v = ov; id = oi; }
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { rv[warp] = v; ri[warp] = id; }
    __syncthreads();
    if (warp == 0) {
        int warps = (blockDim.x + 31) / 32;
        v = lane < warps ? rv[lane] : -INFINITY;
        id = lane < warps ? ri[lane] : -1;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, v, o);
            int oi = __shfl_xor_sync(0xffffffffu, id, o);
            if (beats(ov, oi, v, id)) { v = ov; id = oi; }
        }
        if (lane == 0) { rv[0] = v; ri[0] = id; }
    }
    __syncthreads();
    v = rv[0]; id = ri[0];
    __syncthreads();
}

__global__ void __launch_bounds__(LOGPROBS_THREADS) logprobs_kernel(logprobs_args a) {
    __shared__ float red[32];
    __shared__ float rv[32];
    __shared__ int ri[32];
    const int r = blockIdx.x, V = a.V;
    const float *x = a.logits + (long)r * V;

    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = block_reduce<true>(mx, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - mx);
    s = block_reduce<false>(s, red);
    const float log_z = logf(s);

    // Sampled token: argmax of logits (greedy) or of logits / T + Gumbel noise.
    const float temp = a.temperature ? a.temperature[r] : 0.0f;
    float bv = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = temp == 0.0f ? x[i] : x[i] / temp + invar_gumbel_noise(a.noise_seed[r], a.position[r], i);
        if (beats(v, i, bv, bi)) { bv = v; bi = i; }
    }
    block_argmax(bv, bi, rv, ri);
    if (threadIdx.x == 0) {
        a.token[r] = bi;
        a.token_logprob[r] = (x[bi] - mx) - log_z;
    }

    // Top-k: k passes, each the best element strictly after the previous pick in
    // (value desc, id asc) order.
    float pv = INFINITY;
    int pi = -1;
    for (int j = 0; j < a.k; j++) {
        float cv = -INFINITY;
        int ci = -1;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float v = x[i];
            bool after = v < pv || (v == pv && i > pi);
            if (after && beats(v, i, cv, ci)) { cv = v; ci = i; }
        }
        block_argmax(cv, ci, rv, ri);
        if (threadIdx.x == 0) {
            a.topk_ids[(long)r * a.k + j] = ci;
            a.topk_logprobs[(long)r * a.k + j] = ci >= 0 ? (cv - mx) - log_z : -INFINITY;
        }
        pv = cv;
        pi = ci;
    }
}

void logprobs_launch(cuda_ctx *c, const logprobs_args *a, int threads) {
    if (a->R <= 0) return;
    if (threads < 32 || threads > LOGPROBS_THREADS || threads % 32)
        invar_die(INVAR_EXIT_INPUT, "logprobs: block of %d threads (a multiple of 32, at most %d)", threads,
                  LOGPROBS_THREADS);
    logprobs_kernel<<<(unsigned)a->R, (unsigned)threads, 0, c->stream>>>(*a);
    CUDA_CHECK_LAUNCH("logprobs");
}

void inv_cuda_logprobs(ops_set *ops, const logprobs_args *a) {
    const int threads = LOGPROBS_THREADS;  // noted as launched: a row's block over V
    long order[] = {threads, a->V};
    long shape[] = {a->V, a->k};
    fingerprint_note(ops->fingerprints, "logprobs", fingerprint_order(shape, 2), fingerprint_order(order, 2),
                     "block-1024");
    logprobs_launch(cuda_ctx_of(ops), a, threads);
}
