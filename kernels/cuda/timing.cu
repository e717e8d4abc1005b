// kernels/cuda/timing.cu — CUDA-event timing for the benchmark (cuda_timing.h).
#include "cuda_timing.h"

#include <cuda_runtime.h>   // cudaEvent_t, cudaMemcpyAsync
#include <stdio.h>          // fprintf
#include <stdlib.h>         // qsort, free

#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK, invar_malloc

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// The stream holds here until the host has queued every timed repetition (NVBench's "blocking
// kernel"). Without it the host queues an event, then fn's launches a few microseconds later;
// the GPU, idle, stamps the event at once and waits, so a kernel shorter than the host's launch
// path was timed as that path. Held, the repetitions run back to back and the events bracket
// GPU time only, for every set alike. The hold gives up after timeout_ns (fn must not wait
// for the GPU: a synchronizing call would wait for the hold) and says so in *timed_out.
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
    // flag[0]: the host's release; flag[1]: the hold timed out. Mapped host memory, so the
    // held kernel sees the host's write without a copy (which would queue behind the hold).
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

// --- the per-op profile's events ---------------------------------------------------------------

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
