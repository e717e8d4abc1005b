// kernels/cuda/inv_cuda.cu — the batch-invariant CUDA kernel set: context, memory, the device
// probe and the ops table. The ops themselves live one unit per file beside this one.
#include "inv_cuda.h"

#include <cuda_runtime.h>   // cudaMalloc, cudaMemcpyAsync, cudaStreamCreate, ...
#include <stdio.h>          // snprintf, fprintf
#include <stdlib.h>         // free, getenv
#include <string.h>         // strcmp, strncmp

#include "cuda_ctx.cuh"     // cuda_ctx, CUDA_CHECK, invar_cuda_reserve, invar_die, invar_calloc
#include "gemm_paths.h"     // GEMM_SM90_PATHS, GEMM_PORTABLE_PATH
#include "inv_cuda_launch.h" // inv_cuda_stream, inv_cuda_*_with_*
#include "inv_cuda_ops.h"   // inv_cuda_* ops, rmsnorm_launch, mla_attention_launch, logprobs_launch

// --- context ---

// How a host thread waits for the device, from INVAR_CUDA_WAIT (spin, yield, block; unset:
// CUDA's own choice, which for one context on a many-core host is to spin). Blocking frees the
// core for the CPU work beside it (make check runs its GPU suites beside CPU ones).
static void apply_wait_policy(int device) {
    const char *wait = getenv("INVAR_CUDA_WAIT");
    if (!wait || !*wait) return;
    unsigned int flag;
    if (strcmp(wait, "spin") == 0) flag = cudaDeviceScheduleSpin;
    else if (strcmp(wait, "yield") == 0) flag = cudaDeviceScheduleYield;
    else if (strcmp(wait, "block") == 0) flag = cudaDeviceScheduleBlockingSync;
    else invar_die(INVAR_EXIT_INPUT, "INVAR_CUDA_WAIT=%s: not spin, yield or block", wait);
    cudaError_t e = cudaSetDeviceFlags(flag);
    if (e == cudaErrorSetOnActiveProcess) {  // a runtime that keeps an initialized device's flags
        (void)cudaGetLastError();
        fprintf(stderr, "cuda: INVAR_CUDA_WAIT=%s not applied: device %d was initialized before "
                "(%s)\n", wait, device, cudaGetErrorString(e));
        return;
    }
    CUDA_CHECK("set how the host waits (INVAR_CUDA_WAIT)", e);
}

void cuda_ctx_init(cuda_ctx *c, const char *set_name) {
    char why[256];
    if (!inv_cuda_device_available(why, (int)sizeof why))
        invar_die(INVAR_EXIT_SYSTEM, "cuda: creating the %s set: %s", set_name, why);
    CUDA_CHECK("create", cudaGetDevice(&c->device));
    apply_wait_policy(c->device);
    cudaDeviceProp prop;
    CUDA_CHECK("create", cudaGetDeviceProperties(&prop, c->device));
    c->num_sms = prop.multiProcessorCount;
    c->smem_optin = prop.sharedMemPerBlockOptin;
    c->l2_bytes = (size_t)prop.l2CacheSize;
    c->wgmma = prop.major == 9 && prop.minor == 0;
    c->pdl = prop.major >= 9;
    c->smem_set_count = 0;
    c->tensor_map_encode = NULL;
    if (c->wgmma) {  // the driver API entry point, without linking libcuda
        cudaDriverEntryPointQueryResult found;
        CUDA_CHECK("create", cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &c->tensor_map_encode, 12000,
                                                              cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess) c->tensor_map_encode = NULL;
    }
    CUDA_CHECK("create", cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
}

void cuda_ctx_free(cuda_ctx *c) {
    CUDA_CHECK("destroy", cudaStreamSynchronize(c->stream));
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        if (c->scratch[i]) CUDA_CHECK("destroy", cudaFree(c->scratch[i]));
    CUDA_CHECK("destroy", cudaStreamDestroy(c->stream));
}

// A buffer growing inside a capture would free memory the graph is being built over: the step
// run before the capture (the engine's warm-up) must have grown it.
static void no_move_while_capturing(const cuda_ctx *c, const char *what, size_t bytes) {
    if (c->capturing)
        invar_die(INVAR_EXIT_SYSTEM, "cuda: %s needs %zu bytes during a CUDA graph capture, more than "
                  "the step run before the capture took: an engine bug (a graph step's sizes must "
                  "follow its bucket alone)", what, bytes);
}

// Every buffer the kernels use grows here (a quarter of headroom, after a wait), counted as a
// move for the graphs captured before.
static void *cuda_reserve(cuda_ctx *c, void **buf, size_t *have, size_t bytes, const char *what) {
    if (bytes <= *have) return *buf;
    no_move_while_capturing(c, what, bytes);
    c->buffers_moved++;
    return invar_cuda_reserve(buf, have, bytes, c->stream, what);
}

// Rare by design: the engine's first step of each size grows it, steady state never does.
void *cuda_scratch(cuda_ctx *c, int slot, size_t bytes, const char *what) {
    return cuda_reserve(c, &c->scratch[slot], &c->scratch_bytes[slot], bytes, what);
}

void *inv_cuda_reserve(ops_set *ops, void **buf, size_t *have, size_t bytes, const char *what) {
    return cuda_reserve(cuda_ctx_of(ops), buf, have, bytes, what);
}

void *cuda_scratch_zeroed(cuda_ctx *c, int slot, size_t bytes, const char *what) {
    const size_t before = c->scratch_bytes[slot];
    void *p = cuda_scratch(c, slot, bytes, what);
    if (c->scratch_bytes[slot] != before) CUDA_CHECK(what, cudaMemsetAsync(p, 0, c->scratch_bytes[slot], c->stream));
    return p;
}

void cuda_kernel_smem(cuda_ctx *c, const void *kernel, size_t bytes, const char *op) {
    int i = 0;
    while (i < c->smem_set_count && c->smem_set[i].kernel != kernel) i++;
    if (i < c->smem_set_count && c->smem_set[i].bytes >= bytes) return;
    CUDA_CHECK(op, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (i == CUDA_SMEM_KERNELS) return;  // table full: this kernel pays the call each time
    c->smem_set[i].kernel = kernel;
    c->smem_set[i].bytes = bytes;
    if (i == c->smem_set_count) c->smem_set_count++;
}

// --- device probe ---

size_t inv_cuda_l2_bytes(ops_set *ops) { return cuda_ctx_of(ops)->l2_bytes; }

size_t inv_cuda_free_bytes(ops_set *ops) {
    int current = 0;
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK("free memory", cudaGetDevice(&current));
    CUDA_CHECK("free memory", cudaSetDevice(cuda_ctx_of(ops)->device));  // the set's device, not the thread's
    CUDA_CHECK("free memory", cudaMemGetInfo(&free_bytes, &total));
    CUDA_CHECK("free memory", cudaSetDevice(current));
    return free_bytes;
}

bool inv_cuda_device_available(char *why, int why_len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        if (why) snprintf(why, (size_t)why_len, "no CUDA device: %s", cudaGetErrorString(err));
        cudaGetLastError();  // clear the sticky-free error so later probes start clean
        return false;
    }
    if (n == 0) {
        if (why) snprintf(why, (size_t)why_len, "no CUDA device: the driver reports 0 devices");
        return false;
    }
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess) {
        if (why) snprintf(why, (size_t)why_len, "CUDA device 0 does not answer: %s", cudaGetErrorString(err));
        return false;
    }
    if (prop.major < 9) {
        if (why) snprintf(why, (size_t)why_len, "CUDA device 0 (%.64s) is sm_%d%d; invar's kernels are built for sm_90a",
                          prop.name, prop.major, prop.minor);
        return false;
    }
    return true;
}

// --- memory ---

void *inv_cuda_alloc(ops_set *ops, size_t bytes, const char *what) {
    (void)ops;
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 16);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        invar_die(INVAR_EXIT_SYSTEM, "cuda: out of device memory allocating %zu bytes for %s "
                  "(%zu of %zu bytes free): %s", bytes, what, free_b, total_b, cudaGetErrorString(err));
    }
    return p;
}

void inv_cuda_release(ops_set *ops, void *p) {
    if (!p) return;
    CUDA_CHECK("release", cudaStreamSynchronize(cuda_ctx_of(ops)->stream));
    CUDA_CHECK("release", cudaFree(p));
}

void inv_cuda_upload(ops_set *ops, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = cuda_ctx_of(ops);
    CUDA_CHECK("upload", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    // src is pageable host memory the caller may reuse at once: finish before returning.
    CUDA_CHECK("upload", cudaStreamSynchronize(c->stream));
}

void inv_cuda_download(ops_set *ops, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = cuda_ctx_of(ops);
    CUDA_CHECK("download", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK("download", cudaStreamSynchronize(c->stream));
}

void *inv_cuda_alloc_host(ops_set *ops, size_t bytes, const char *what) {
    (void)ops;
    void *p = NULL;
    cudaError_t rc = cudaMallocHost(&p, bytes ? bytes : 1);
    if (rc != cudaSuccess)
        invar_die(INVAR_EXIT_SYSTEM, "cudaMallocHost of %zu bytes for %s failed: %s", bytes, what,
                  cudaGetErrorString(rc));
    return p;
}

void inv_cuda_release_host(ops_set *ops, void *p) {
    (void)ops;
    if (p) CUDA_CHECK("release_host", cudaFreeHost(p));
}

void inv_cuda_upload_async(ops_set *ops, void *dst, const void *src, size_t bytes) {
    // From pinned memory the copy is a DMA on the stream: no staging, no wait.
    CUDA_CHECK("upload_async", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                               cuda_ctx_of(ops)->stream));
}

void inv_cuda_sync(ops_set *ops) {
    CUDA_CHECK("sync", cudaStreamSynchronize(cuda_ctx_of(ops)->stream));
}

// --- graphs ---

// A captured step: the instantiated graph and the buffers' state it was captured over.
struct ops_graph {
    cudaGraphExec_t exec;
    unsigned long buffers_moved;
};

static ops_graph *inv_cuda_graph_capture(ops_set *ops, void (*record)(void *ctx), void *ctx) {
    cuda_ctx *c = cuda_ctx_of(ops);
    // Thread-local: a rank's thread captures its own stream; another thread's calls are its own.
    CUDA_CHECK("graph_capture: begin", cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = true;
    record(ctx);
    c->capturing = false;
    cudaGraph_t graph;
    CUDA_CHECK("graph_capture: end", cudaStreamEndCapture(c->stream, &graph));
    ops_graph *g = (ops_graph *)invar_calloc(1, sizeof *g, "a captured CUDA graph");
    CUDA_CHECK("graph_capture: instantiate", cudaGraphInstantiate(&g->exec, graph, 0));
    CUDA_CHECK("graph_capture: destroy the template", cudaGraphDestroy(graph));
    g->buffers_moved = c->buffers_moved;
    return g;
}

static bool inv_cuda_graph_launch(ops_set *ops, ops_graph *g) {
    cuda_ctx *c = cuda_ctx_of(ops);
    if (g->buffers_moved != c->buffers_moved) return false;
    CUDA_CHECK("graph_launch", cudaGraphLaunch(g->exec, c->stream));
    return true;
}

static void inv_cuda_graph_release(ops_set *ops, ops_graph *g) {
    if (!g) return;
    CUDA_CHECK("graph_release", cudaStreamSynchronize(cuda_ctx_of(ops)->stream));
    CUDA_CHECK("graph_release", cudaGraphExecDestroy(g->exec));
    free(g);
}

// --- the set ---

void inv_cuda_fini(ops_set *ops) {
    if (!ops->ctx) return;
    cuda_ctx_free(cuda_ctx_of(ops));
    free(ops->ctx);
    ops->ctx = NULL;
}

static void inv_cuda_destroy(ops_set *ops) {
    int previous = inv_cuda_enter(ops);  // a rank's set is freed on its own device
    inv_cuda_fini(ops);
    free(ops);
    inv_cuda_leave(previous);
}

ops_set *inv_cuda_create(int threads) {
    (void)threads;  // CPU worker count; meaningless on a GPU
    ops_set *ops = (ops_set *)invar_calloc(1, sizeof *ops, "the invariant CUDA ops table");
    inv_cuda_init(ops, "invariant");
    // Not in inv_cuda_init: a set built on it that replaces moe_experts or moe_combine says for
    // itself whether its kernels know the fp32 forms (reference/ and adversarial/ do).
    ops->tp_size_invariant = true;
    return ops;
}

// The paths the kernels above note (kernels/fingerprint.h), for `invar kernels`' coverage: every
// op that reduces (the element-wise ops and the KV cache write sum nothing).
static const char *const inv_cuda_paths[] = {
    "mla_attention:wgmma", "mla_attention:wgmma16", "mla_attention:mma.sync", "mla_attention:generic",
    GEMM_SM90_PATHS, GEMM_PORTABLE_PATH, "rmsnorm:block-256", "logprobs:chunks-4096",
    "moe_route:greedy", "moe_route:group-limited", "moe_route:noaux-tc", "moe_experts:grouped-gemm",
    "moe_combine:ascending-k", "mha_prefill:warp-online-softmax", "merge_attention:row",
    "all_reduce:one-pass", "all_reduce:grid-stride", "all_reduce_f32_tree:rank-tree", NULL,
};

// A path of another architecture's kernels, or of a collective needing more GPUs than this host has.
static const char *inv_cuda_path_unreachable(ops_set *ops, const char *path) {
    const bool wgmma = cuda_ctx_of(ops)->wgmma;
    const bool sm90_only = (strncmp(path, "gemm:", 5) == 0 && strcmp(path, GEMM_PORTABLE_PATH) != 0) ||
                           strcmp(path, "mla_attention:wgmma") == 0 || strcmp(path, "mla_attention:wgmma16") == 0;
    if (!wgmma && sm90_only) return "an sm_90a (wgmma) kernel: this GPU is not compute capability 9.0";
    if (wgmma && strcmp(path, GEMM_PORTABLE_PATH) == 0)
        return "the portable GEMM runs only where sm_90a's wgmma kernels cannot (compute capability 9.0 here)";
    if (strncmp(path, "all_reduce", 10) == 0 && inv_cuda_device_count() < 2)
        return "a collective of 2 or more ranks on a GPU each: this host has 1 GPU";
    return NULL;
}

void inv_cuda_init(ops_set *ops, const char *set_name) {
    cuda_ctx *c = (cuda_ctx *)invar_calloc(1, sizeof *c, "a CUDA set's context");
    cuda_ctx_init(c, set_name);
    *ops = (ops_set){};
    ops->name = "invariant";
    ops->device = "cuda";
    ops->batch_invariant = true;
    ops->ctx = c;
    ops->paths = inv_cuda_paths;
    ops->path_unreachable = inv_cuda_path_unreachable;
    ops->destroy = inv_cuda_destroy;
    ops->alloc = inv_cuda_alloc;
    ops->release = inv_cuda_release;
    ops->upload = inv_cuda_upload;
    ops->download = inv_cuda_download;
    ops->sync = inv_cuda_sync;
    ops->alloc_host = inv_cuda_alloc_host;
    ops->release_host = inv_cuda_release_host;
    ops->upload_async = inv_cuda_upload_async;
    ops->graph_capture = inv_cuda_graph_capture;
    ops->graph_launch = inv_cuda_graph_launch;
    ops->graph_release = inv_cuda_graph_release;
    ops->embedding = inv_cuda_embedding;
    ops->rmsnorm = inv_cuda_rmsnorm;
    ops->gemm = inv_cuda_gemm;
    ops->rope = inv_cuda_rope;
    ops->residual_add = inv_cuda_residual_add;
    ops->silu_mul = inv_cuda_silu_mul;
    ops->kv_cache_write = inv_cuda_kv_cache_write;
    ops->mla_attention = inv_cuda_mla_attention;
    ops->mha_prefill = inv_cuda_mha_prefill;
    ops->merge_attention = inv_cuda_merge_attention;
    ops->moe_route = inv_cuda_moe_route;
    ops->moe_experts = inv_cuda_moe_experts;
    ops->moe_combine = inv_cuda_moe_combine;
    ops->logprobs = inv_cuda_logprobs;
    ops->add_f32 = inv_cuda_add_f32;
    ops->round_to_bf16 = inv_cuda_round_to_bf16;
    ops->sum_slices_f32 = inv_cuda_sum_slices_f32;
    ops->all_reduce = inv_cuda_all_reduce;
    ops->all_reduce_f32_tree = inv_cuda_all_reduce_f32_tree;
    ops->all_gather_columns = inv_cuda_all_gather_columns;
    ops->bind_thread = inv_cuda_bind_thread;
    ops->open_group = inv_cuda_open_group;
}

// --- for sets built on this one (inv_cuda_launch.h) ---

cudaStream_t inv_cuda_stream(const ops_set *ops) { return ((const cuda_ctx *)ops->ctx)->stream; }

int inv_cuda_num_sms(const ops_set *ops) { return ((const cuda_ctx *)ops->ctx)->num_sms; }

int inv_cuda_device(const ops_set *ops) { return ((const cuda_ctx *)ops->ctx)->device; }

void inv_cuda_rmsnorm_with_block(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                                 const bf16 *w, int M, int D, float eps, int threads) {
    rmsnorm_launch(cuda_ctx_of(ops), out, ld_out, x, ld_x, w, M, D, eps, threads);
}

void inv_cuda_mla_attention_with_split(ops_set *ops, const mla_attention_args *a, int split_size) {
    mla_attention_launch(cuda_ctx_of(ops), a, split_size);
}

void inv_cuda_logprobs_with_block(ops_set *ops, const logprobs_args *a, int threads) {
    logprobs_launch(cuda_ctx_of(ops), a, threads);
}

static void version_text(char *out, int len, int v) {
    snprintf(out, (size_t)len, "%d.%d", v / 1000, (v % 1000) / 10);
}

extern "C" void inv_cuda_device_describe(char *name, int name_len, char *driver, int driver_len,
                                         char *runtime, int runtime_len, char *cublas,
                                         int cublas_len, char *cc, int cc_len) {
    int device = 0, v = 0;
    CUDA_CHECK("describe", cudaGetDevice(&device));
    cudaDeviceProp prop;
    CUDA_CHECK("describe", cudaGetDeviceProperties(&prop, device));
    snprintf(name, (size_t)name_len, "%s", prop.name);
    snprintf(cc, (size_t)cc_len, "%d.%d", prop.major, prop.minor);
    CUDA_CHECK("describe", cudaDriverGetVersion(&v));
    version_text(driver, driver_len, v);
    CUDA_CHECK("describe", cudaRuntimeGetVersion(&v));
    version_text(runtime, runtime_len, v);
    int major = 0, minor = 0, patch = 0;
    CUBLAS_CHECK("describe", cublasGetProperty(MAJOR_VERSION, &major));
    CUBLAS_CHECK("describe", cublasGetProperty(MINOR_VERSION, &minor));
    CUBLAS_CHECK("describe", cublasGetProperty(PATCH_LEVEL, &patch));
    snprintf(cublas, (size_t)cublas_len, "%d.%d.%d", major, minor, patch);
}
