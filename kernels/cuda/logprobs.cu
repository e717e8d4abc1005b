// kernels/cuda/logprobs.cu — log-softmax, sampling and top-k over a row of logits, in two kernels:
// the row cut into chunks of LOGPROBS_CHUNK ids (one block each: the chunk's max, its sum of
// exp(x - max), its sampled candidate and its top k), then one block a row merging the chunks in
// chunk order. The chunking depends on V only and every reduction is the fixed block reduction
// (block_reduce.cuh) of a fixed block size, so a row's results never depend on R; a row of V =
// 102,400 is 25 blocks, not one walking the row 3 + k times. logprobs_launch takes another block
// size for sets that choose it from the batch.
#include <cuda_runtime.h>    // dim3, float4
#include <math.h>            // expf, logf, INFINITY

#include "block_reduce.cuh"  // block_reduce
#include "cuda_ctx.cuh"      // cuda_ctx, cuda_scratch, CUDA_CHECK_LAUNCH
#include "inv_cuda_ops.h"    // inv_cuda_logprobs
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

#define LOGPROBS_THREADS 256   // the invariant set's block, chunks and merge alike
#define LOGPROBS_MAX_THREADS 1024
#define LOGPROBS_CHUNK 4096    // ids a chunk: 16 KB of shared memory, 16 a thread

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

// Where the chunks leave their results: per (row, chunk) its max, its sum of exp(x - max), its
// sampled key and id (head), and its k best (value, id) in order (cand_*); id -1 pads a chunk
// shorter than k.
typedef struct {
    float4 *head;     // [R][C] {max, sum, sampled key, sampled id as int bits}
    float *cand_v;    // [R][C][k]
    int *cand_i;      // [R][C][k]
    int chunks;       // C
} logprobs_partials;

// The j-th pick of a top-k walk: the best (value, id) strictly after the previous pick (pv, pi)
// in (value desc, id asc) order, over the ids this thread holds.
__device__ __forceinline__ void next_after(float v, int i, float pv, int pi, float &cv, int &ci) {
    bool after = v < pv || (v == pv && i > pi);
    if (after && beats(v, i, cv, ci)) { cv = v; ci = i; }
}

__global__ void __launch_bounds__(LOGPROBS_MAX_THREADS) logprobs_chunk_kernel(logprobs_args a, logprobs_partials p) {
    __shared__ float xs[LOGPROBS_CHUNK];
    __shared__ float red[32];
    __shared__ float rv[32];
    __shared__ int ri[32];
    const int c = blockIdx.x, r = blockIdx.y, V = a.V;
    const int begin = c * LOGPROBS_CHUNK, n = V - begin < LOGPROBS_CHUNK ? V - begin : LOGPROBS_CHUNK;
    const float *x = a.logits + (long)r * V + begin;

    float mx = -INFINITY;
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = x[i];
        xs[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_reduce<true>(mx, red);  // its barriers also publish xs
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(xs[i] - mx);
    s = block_reduce<false>(s, red);

    // The chunk's sampled candidate: argmax of logits (greedy) or of logits / T + Gumbel noise.
    const float temp = a.temperature ? a.temperature[r] : 0.0f;
    float bv = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int id = begin + i;
        float v = temp == 0.0f ? xs[i] : xs[i] / temp + invar_gumbel_noise(a.noise_seed[r], a.position[r], id);
        if (beats(v, id, bv, bi)) { bv = v; bi = id; }
    }
    block_argmax(bv, bi, rv, ri);
    const long at = (long)r * p.chunks + c;
    if (threadIdx.x == 0) p.head[at] = make_float4(mx, s, bv, __int_as_float(bi));

    // The chunk's top k, each pick the best strictly after the previous one.
    float pv = INFINITY;
    int pi = -1;
    for (int j = 0; j < a.k; j++) {
        float cv = -INFINITY;
        int ci = -1;
        for (int i = threadIdx.x; i < n; i += blockDim.x) next_after(xs[i], begin + i, pv, pi, cv, ci);
        block_argmax(cv, ci, rv, ri);
        if (threadIdx.x == 0) {
            p.cand_v[at * a.k + j] = cv;
            p.cand_i[at * a.k + j] = ci;
        }
        pv = cv;
        pi = ci;
    }
}

// One block a row: the log-sum-exp from the chunks' (max, sum) in chunk order, the sampled token
// among the chunks' candidates, the top k among their C k candidates.
__global__ void __launch_bounds__(LOGPROBS_MAX_THREADS) logprobs_merge_kernel(logprobs_args a, logprobs_partials p) {
    __shared__ float rv[32];
    __shared__ int ri[32];
    __shared__ float row_max, log_z;
    const int r = blockIdx.x, C = p.chunks;
    const float4 *head = p.head + (long)r * C;
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int c = 0; c < C; c++) m = fmaxf(m, head[c].x);
        float s = 0.0f;  // chunk order; a chunk of -inf only adds nothing
        for (int c = 0; c < C; c++)
            if (head[c].x != -INFINITY) s += head[c].y * expf(head[c].x - m);
        float bv = -INFINITY;
        int bi = -1;
        for (int c = 0; c < C; c++)
            if (beats(head[c].z, __float_as_int(head[c].w), bv, bi)) { bv = head[c].z; bi = __float_as_int(head[c].w); }
        row_max = m;
        log_z = logf(s);
        a.token[r] = bi;
        // A row of NaN logits has no candidate (bi = -1): the engine refuses the id; reading
        // logits[bi] would read before the row, on row 0 before the buffer (an illegal address).
        a.token_logprob[r] = bi >= 0 ? (a.logits[(long)r * a.V + bi] - m) - log_z : NAN;
    }
    __syncthreads();
    const float m = row_max, lz = log_z;
    const long n = (long)C * a.k;
    const float *cv_in = p.cand_v + (long)r * n;
    const int *ci_in = p.cand_i + (long)r * n;
    float pv = INFINITY;
    int pi = -1;
    for (int j = 0; j < a.k; j++) {
        float cv = -INFINITY;
        int ci = -1;
        for (long i = threadIdx.x; i < n; i += blockDim.x)
            if (ci_in[i] >= 0) next_after(cv_in[i], ci_in[i], pv, pi, cv, ci);
        block_argmax(cv, ci, rv, ri);
        if (threadIdx.x == 0) {
            a.topk_ids[(long)r * a.k + j] = ci;
            a.topk_logprobs[(long)r * a.k + j] = ci >= 0 ? (cv - m) - lz : -INFINITY;
        }
        pv = cv;
        pi = ci;
    }
}

void logprobs_launch(cuda_ctx *c, const logprobs_args *a, int threads) {
    if (a->R <= 0) return;
    if (threads < 32 || threads > LOGPROBS_MAX_THREADS || threads % 32)
        invar_die(INVAR_EXIT_INPUT, "logprobs: block of %d threads (a multiple of 32, at most %d)", threads,
                  LOGPROBS_MAX_THREADS);
    if (a->V < 1 || a->k < 0 || a->R > 65535)
        invar_die(INVAR_EXIT_INPUT, "logprobs: V=%d k=%d R=%d (V >= 1, k >= 0, R <= 65535)", a->V, a->k, a->R);
    logprobs_partials p;
    p.chunks = (a->V + LOGPROBS_CHUNK - 1) / LOGPROBS_CHUNK;
    const long units = (long)a->R * p.chunks;
    char *scratch = (char *)cuda_scratch(c, SCRATCH_LOGPROBS, (size_t)units * (sizeof(float4) + 8 * (size_t)a->k),
                                         "logprobs chunk results");
    p.head = (float4 *)scratch;
    p.cand_v = (float *)(scratch + units * sizeof(float4));
    p.cand_i = (int *)(p.cand_v + units * a->k);
    logprobs_chunk_kernel<<<dim3((unsigned)p.chunks, (unsigned)a->R), (unsigned)threads, 0, c->stream>>>(*a, p);
    CUDA_CHECK_LAUNCH("logprobs chunks");
    logprobs_merge_kernel<<<(unsigned)a->R, (unsigned)threads, 0, c->stream>>>(*a, p);
    CUDA_CHECK_LAUNCH("logprobs merge");
}

void inv_cuda_logprobs(ops_set *ops, const logprobs_args *a) {
    const int threads = LOGPROBS_THREADS;
    long order[] = {threads, LOGPROBS_CHUNK, a->V};  // a chunk's block over its ids, the chunks in order
    long shape[] = {a->V, a->k};
    fingerprint_note(ops->fingerprints, "logprobs", fingerprint_order(shape, 2), fingerprint_order(order, 3),
                     "chunks-4096");
    logprobs_launch(cuda_ctx_of(ops), a, threads);
}
