// kernels/cuda/timing.cu — CUDA-event timing for the benchmark (cuda_timing.h).
#include "cuda_timing.h"

#include <cuda_runtime.h>   // cudaEvent_t, cudaMemcpyAsync
#include <stdio.h>          // fprintf
#include <stdint.h>         // uint32_t, uintptr_t
#include <stdlib.h>         // qsort, free

#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK, invar_malloc

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// The stream holds here until the host has queued every timed repetition: otherwise the idle GPU
// stamps the first event at once and a kernel shorter than the host's launch path is timed as that
// path. Held, the events bracket GPU time only. The hold gives up after timeout_ns (fn must not
// wait for the GPU) and says so in *timed_out.
#define TIMING_HOLD_NS 2000000000LL  // 2 s: far above the host's queueing of any repetitions here
__global__ void timing_hold_kernel(const volatile int *release, int *timed_out, long long timeout_ns) {
    long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*release == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > timeout_ns) {
            *timed_out = 1;
            return;
        }
        __nanosleep(1000);
    }
}

double cuda_time_median_ms(ops_set *ops, void (*fn)(void *arg, int rep), void *arg, int warmup, int reps) {
    cuda_ctx *c = cuda_ctx_of(ops);
    if (reps < 1) reps = 1;
    for (int i = 0; i < warmup; i++) fn(arg, i);
    cudaEvent_t *ev = (cudaEvent_t *)invar_malloc(sizeof(cudaEvent_t) * 2 * (size_t)reps, "timing events");
    for (int i = 0; i < 2 * reps; i++) CUDA_CHECK("bench", cudaEventCreate(&ev[i]));
    // flag[0]: the host's release; flag[1]: timed out. Mapped host memory: a copy would queue
    // behind the hold.
    int *flag = NULL, *flag_dev = NULL;
    CUDA_CHECK("bench: timing flag", cudaHostAlloc((void **)&flag, 2 * sizeof(int), cudaHostAllocMapped));
    CUDA_CHECK("bench: timing flag", cudaHostGetDevicePointer((void **)&flag_dev, flag, 0));
    flag[0] = flag[1] = 0;
    timing_hold_kernel<<<1, 1, 0, c->stream>>>(flag_dev, flag_dev + 1, TIMING_HOLD_NS);
    CUDA_CHECK_LAUNCH("bench: timing hold");
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK("bench", cudaEventRecord(ev[2 * i], c->stream));
        fn(arg, warmup + i);
        CUDA_CHECK("bench", cudaEventRecord(ev[2 * i + 1], c->stream));
    }
    __atomic_store_n((volatile int *)&flag[0], 1, __ATOMIC_SEQ_CST);
    CUDA_CHECK("bench", cudaStreamSynchronize(c->stream));
    if (__atomic_load_n((volatile int *)&flag[1], __ATOMIC_SEQ_CST))
        fprintf(stderr, "bench: warning: the timing hold gave up after %.0f s (the host queued %d repetitions "
                        "slower than that, or a timed call waited for the GPU); these times include the "
                        "host's launch latency\n", TIMING_HOLD_NS * 1e-9, reps);
    CUDA_CHECK("bench: timing flag", cudaFreeHost(flag));
    float *ms = (float *)invar_malloc(sizeof(float) * (size_t)reps, "timing samples");
    for (int i = 0; i < reps; i++) CUDA_CHECK("bench", cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (int i = 0; i < 2 * reps; i++) CUDA_CHECK("bench", cudaEventDestroy(ev[i]));
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    free(ms);
    free(ev);
    return med;
}

typedef struct {
    cuda_ctx *c;
    void *src, *dst;
    size_t bytes;
} copy_job;

static void copy_once(void *arg, int rep) {
    (void)rep;
    copy_job *j = (copy_job *)arg;
    CUDA_CHECK("bench copy", cudaMemcpyAsync(j->dst, j->src, j->bytes, cudaMemcpyDeviceToDevice, j->c->stream));
}

double cuda_copy_bandwidth_gbs(ops_set *ops, size_t bytes) {
    copy_job j = {cuda_ctx_of(ops), NULL, NULL, bytes};
    j.src = ops->alloc(ops, bytes, "bench copy source");
    j.dst = ops->alloc(ops, bytes, "bench copy destination");
    CUDA_CHECK("bench copy", cudaMemsetAsync(j.src, 0x5a, bytes, j.c->stream));
    double ms = cuda_time_median_ms(ops, copy_once, &j, 3, 20);
    ops->release(ops, j.src);
    ops->release(ops, j.dst);
    return 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
}

// --- a plain read: the floor under a memory-bound kernel ---

// How fast this device reads `bytes` once, timed like the kernels: what a GEMM at small M or an MLA
// decode could reach if it did nothing but read its weights or cache. Grid-stride 16-byte loads,
// READ_UNROLL in flight a thread (faster than bulk copies into shared memory), feeding a XOR of
// every 32-bit word so no load can be dropped and a test can check all were read.
#define READ_UNROLL 4
#define READ_THREADS 256
#define READ_BLOCKS_PER_SM 8

__device__ __forceinline__ uint32_t read_rotl(uint32_t w, int bytes) {
    return bytes ? (w << (8 * bytes)) | (w >> (32 - 8 * bytes)) : w;
}

// The XOR of the 32-bit little-endian words of p[0, bytes), word j holding bytes 4j .. 4j + 3,
// a short last word zero-padded, into *xor_out (atomicXor: one per block).
__global__ void read_xor_kernel(const unsigned char *p, size_t bytes, unsigned *xor_out) {
    const size_t to_boundary = (16 - ((uintptr_t)p & 15)) & 15;  // bytes before the first 16-byte boundary
    const size_t head = to_boundary < bytes ? to_boundary : bytes;
    const size_t body = (bytes - head) / 16, tail_at = head + body * 16;
    const int rot = (int)(head & 3);  // the body's words start `rot` bytes into a word
    const int4 *v = (const int4 *)(p + head);
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x * READ_UNROLL;
    for (size_t i = (size_t)blockIdx.x * blockDim.x * READ_UNROLL + threadIdx.x; i < body; i += stride) {
        int4 x[READ_UNROLL];
#pragma unroll
        for (int u = 0; u < READ_UNROLL; u++) {
            const size_t j = i + (size_t)u * blockDim.x;
            x[u] = j < body ? __ldcs(v + j) : make_int4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < READ_UNROLL; u++)
            acc ^= (uint32_t)x[u].x ^ (uint32_t)x[u].y ^ (uint32_t)x[u].z ^ (uint32_t)x[u].w;
    }
    acc = read_rotl(acc, rot);
    if (blockIdx.x == 0 && threadIdx.x < 32) {  // the unaligned ends, a byte a lane
        for (size_t b = threadIdx.x; b < head; b += 32) acc ^= (uint32_t)p[b] << (8 * (b & 3));
        for (size_t b = tail_at + threadIdx.x; b < bytes; b += 32) acc ^= (uint32_t)p[b] << (8 * (b & 3));
    }
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    __shared__ uint32_t warp_xor[READ_THREADS / 32];
    if ((threadIdx.x & 31) == 0) warp_xor[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / 32); w++) acc ^= warp_xor[w];
        atomicXor(xor_out, acc);
    }
}

typedef struct {
    cuda_ctx *c;
    const unsigned char *base;
    size_t bytes, stride;
    int copies;
    unsigned *xor_out;
} read_job;

static void read_launch(cuda_ctx *c, const void *p, size_t bytes, unsigned *xor_out) {
    read_xor_kernel<<<c->num_sms * READ_BLOCKS_PER_SM, READ_THREADS, 0, c->stream>>>((const unsigned char *)p, bytes,
                                                                                     xor_out);
    CUDA_CHECK_LAUNCH("bench: plain read");
}

static void read_once(void *arg, int rep) {
    read_job *j = (read_job *)arg;
    read_launch(j->c, j->base + (size_t)(rep % j->copies) * j->stride, j->bytes, j->xor_out);
}

double cuda_read_median_ms(ops_set *ops, const void *base, size_t bytes, size_t stride, int copies, int warmup,
                           int reps) {
    read_job j = {cuda_ctx_of(ops), (const unsigned char *)base, bytes, stride, copies < 1 ? 1 : copies, NULL};
    j.xor_out = (unsigned *)ops->alloc(ops, sizeof(unsigned), "bench plain read's XOR");
    double ms = cuda_time_median_ms(ops, read_once, &j, warmup, reps);
    ops->release(ops, j.xor_out);
    return ms;
}

unsigned cuda_read_xor(ops_set *ops, const void *p, size_t bytes) {
    cuda_ctx *c = cuda_ctx_of(ops);
    unsigned *d = (unsigned *)ops->alloc(ops, sizeof(unsigned), "plain read's XOR");
    CUDA_CHECK("plain read", cudaMemsetAsync(d, 0, sizeof(unsigned), c->stream));
    read_launch(c, p, bytes, d);
    unsigned x = 0;
    ops->download(ops, &x, d, sizeof x);
    ops->release(ops, d);
    return x;
}

// --- the per-op profile's events ---

struct cuda_event_log {
    cuda_ctx *c;
    cudaEvent_t *events;
    int used, created, cap;
};

cuda_event_log *cuda_event_log_create(ops_set *ops) {
    cuda_event_log *l = (cuda_event_log *)invar_calloc(1, sizeof *l, "the profile's event log");
    l->c = cuda_ctx_of(ops);
    return l;
}

int cuda_event_log_record(cuda_event_log *l) {
    if (l->used == l->cap) {
        int cap = l->cap ? 2 * l->cap : 1024;
        l->events = (cudaEvent_t *)invar_realloc(l->events, sizeof(cudaEvent_t) * (size_t)cap, "the profile's events");
        l->cap = cap;
    }
    if (l->used == l->created) CUDA_CHECK("profile", cudaEventCreate(&l->events[l->created++]));
    CUDA_CHECK("profile", cudaEventRecord(l->events[l->used], l->c->stream));
    return l->used++;
}

double cuda_event_log_seconds(cuda_event_log *l, int a, int b) {
    float ms = 0.0f;
    CUDA_CHECK("profile", cudaEventElapsedTime(&ms, l->events[a], l->events[b]));
    return 1e-3 * (double)ms;
}

void cuda_event_log_clear(cuda_event_log *l) { l->used = 0; }

void cuda_event_log_destroy(cuda_event_log *l) {
    if (!l) return;
    for (int i = 0; i < l->created; i++) CUDA_CHECK("profile", cudaEventDestroy(l->events[i]));
    free(l->events);
    free(l);
}
