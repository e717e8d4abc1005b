// kernels/cuda/collective.cu — tensor parallelism on CUDA: one process drives T GPUs, rank r's
// kernel set on GPU r, one thread per rank, the ranks joined by one NCCL communicator group
// (ncclCommInitAll).
//
// Reduction order of the all-reduce: NCCL only moves the bytes (ncclAllGather of every rank's bf16
// message), and our kernel adds each element as x_0 + x_1 + ... + x_{T-1} in fp32, rank order,
// rounded to bf16 once (kernels/cpu/all_reduce.c's rule): a ring or tree adds in an order that
// follows the offset and the message size. Every rank adds the same values in the same order, so
// all hold the same bits. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 unless the user set it).
#include <cuda_runtime.h>                 // cudaSetDevice, cudaGetDevice, cudaDeviceGetP2PAttribute
#include <nccl.h>                         // ncclCommInitAll, ncclAllGather, ncclGetVersion
#include <stdio.h>                        // snprintf
#include <stdlib.h>                       // setenv, free
#include <string.h>                       // strcmp, strerror, strlen
#include <errno.h>                        // errno

#include "../../common/nccl_check.cuh"    // NCCL_CHECK
#include "../../common/rank_threads.h"    // rank_threads_run
#include "../bf16.h"                      // bf16_to_float, float_to_bf16, bf16_round
#include "../fingerprint.h"               // fingerprint_note, fingerprint_order
#include "../cpu/collective.h"            // tp_comm_*, tp_comm_group_attach_device
#include "cuda_ctx.cuh"                   // cuda_ctx, cuda_scratch, CUDA_CHECK, CUDA_CHECK_LAUNCH
#include "inv_cuda.h"                     // inv_cuda_use_device, inv_cuda_device_count, ...
#include "inv_cuda_launch.h"              // inv_cuda_all_reduce_from_rank, inv_cuda_nccl_comm
#include "inv_cuda_ops.h"                 // inv_cuda_all_reduce, inv_cuda_all_gather_columns, ...

// --- devices ---

int inv_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver or no device: zero devices, and a clean error state
        return 0;
    }
    return n;
}

int inv_cuda_use_device(int device) {
    int count = inv_cuda_device_count(), previous = 0;
    if (device < 0 || device >= count)
        invar_die(INVAR_EXIT_INPUT, "cuda: device %d asked for, %d visible (one GPU per "
                  "tensor-parallel rank)", device, count);
    CUDA_CHECK("use device", cudaGetDevice(&previous));
    CUDA_CHECK("use device", cudaSetDevice(device));
    return previous;
}

void inv_cuda_bind_thread(ops_set *ops) {
    CUDA_CHECK("bind thread", cudaSetDevice(cuda_ctx_of(ops)->device));
}

int inv_cuda_enter(ops_set *ops) {
    int previous = 0;
    CUDA_CHECK("enter device", cudaGetDevice(&previous));
    CUDA_CHECK("enter device", cudaSetDevice(cuda_ctx_of(ops)->device));
    return previous;
}

void inv_cuda_leave(int previous) { CUDA_CHECK("leave device", cudaSetDevice(previous)); }

void inv_cuda_nccl_version(char *out, int len) {
    int v = 0;
    NCCL_CHECK("version", ncclGetVersion(&v));
    // NCCL_VERSION(X, Y, Z) is X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
    if (v >= 10000) snprintf(out, (size_t)len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
    else snprintf(out, (size_t)len, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

void inv_cuda_gpu_links(int T, char *out, int len) {
    int n = inv_cuda_device_count();
    if (T > n) T = n;
    out[0] = '\0';
    if (T < 2) {
        snprintf(out, (size_t)len, "-");
        return;
    }
    size_t used = 0;
    for (int a = 0; a < T; a++)
        for (int b = a + 1; b < T; b++) {
            int access = 0, atomics = 0;
            CUDA_CHECK("gpu links", cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, a, b));
            CUDA_CHECK("gpu links", cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a, b));
            // Native atomics between peers is what NVLink gives and PCIe does not.
            int w = snprintf(out + used, (size_t)len - used, "%s%d-%d:%s", used ? " " : "", a, b,
                             !access ? "no-p2p" : atomics ? "p2p+atomics(nvlink)" : "p2p(pcie)");
            if (w < 0 || (size_t)w >= (size_t)len - used) return;  // truncated: keep what fits
            used += (size_t)w;
        }
}

// --- the group ---

// Each rank's thread destroys its own communicator, as T processes would: one thread destroying
// them in turn could wait in the first for the others.
typedef struct {
    void *const *handles;
} close_job;

static void close_rank(void *arg, int rank) {
    const close_job *j = (const close_job *)arg;
    ncclComm_t comm = (ncclComm_t)j->handles[rank];
    int device = 0;
    NCCL_CHECK("close group", ncclCommCuDevice(comm, &device));
    CUDA_CHECK("close group", cudaSetDevice(device));
    NCCL_CHECK("close group", ncclCommDestroy(comm));
}

static void close_comms(void *const *handles, int T) {
    int previous = 0;
    CUDA_CHECK("close group", cudaGetDevice(&previous));
    close_job j = {handles};
    rank_threads_run(T, close_rank, &j);
    CUDA_CHECK("close group", cudaSetDevice(previous));  // rank 0 ran on this thread
}

void inv_cuda_open_group(ops_set *const *ranks, int T, tp_comm_group *g) {
    int *devices = (int *)invar_calloc((size_t)T, sizeof *devices, "NCCL device list");
    for (int r = 0; r < T; r++) {
        if (strcmp(ranks[r]->device, "cuda") != 0)
            invar_die(INVAR_EXIT_INPUT, "tensor parallelism: rank %d runs on %s, rank 0 on cuda: "
                      "one group, one device kind", r, ranks[r]->device);
        devices[r] = cuda_ctx_of(ranks[r])->device;
        for (int s = 0; s < r; s++)
            if (devices[s] == devices[r])
                invar_die(INVAR_EXIT_INPUT, "tensor parallelism: ranks %d and %d are both on GPU "
                          "%d; NCCL needs one GPU per rank", s, r, devices[r]);
    }
    // Without overwriting a value the user set (the GPU hosts set it to 0 already).
    if (setenv("NCCL_NVLS_ENABLE", "0", 0) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "setenv NCCL_NVLS_ENABLE failed: %s", strerror(errno));
    int previous = 0;
    CUDA_CHECK("open group", cudaGetDevice(&previous));
    ncclComm_t *comms = (ncclComm_t *)invar_calloc((size_t)T, sizeof *comms, "NCCL communicators");
    NCCL_CHECK("open group", ncclCommInitAll(comms, T, devices));
    CUDA_CHECK("open group", cudaSetDevice(previous));
    void **handles = (void **)invar_calloc((size_t)T, sizeof *handles, "NCCL handles");
    for (int r = 0; r < T; r++) handles[r] = comms[r];
    tp_comm_group_attach_device(g, handles, close_comms);
    free(handles);
    free(comms);
    free(devices);
}

void *inv_cuda_nccl_comm(tp_comm *comm, const char *op) {
    void *h = tp_comm_device(comm);
    if (!h)
        invar_die(INVAR_EXIT_SYSTEM, "cuda: %s: rank %d of %d has no NCCL communicator (a CPU "
                  "group handed to a CUDA set)", op, tp_comm_rank(comm), tp_comm_size(comm));
    return h;
}

// --- all_reduce ---

// out[i] = the sum over ranks of gathered[r][i], starting at rank `first` and going up (mod T);
// with round_each_hop the partial is rounded to bf16 after every addition, as a bf16 ring does.
// __fadd_rn: plain fp32 additions in the written order, as the CPU sets do.
__global__ void all_reduce_sum_kernel(bf16 *out, const bf16 *gathered, long n, int T, int first,
                                      bool round_each_hop) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float acc = bf16_to_float(gathered[(long)first * n + i]);
        for (int hop = 1; hop < T; hop++) {
            int r = (first + hop) % T;
            acc = __fadd_rn(acc, bf16_to_float(gathered[(long)r * n + i]));
            if (round_each_hop) acc = bf16_round(acc);
        }
        out[i] = float_to_bf16(acc);
    }
}

static unsigned grid_for(long n) {
    long blocks = (n + 255) / 256;
    return (unsigned)(blocks < 8192 ? (blocks > 0 ? blocks : 1) : 8192);  // grid-stride beyond
}

void inv_cuda_all_reduce_from_rank(ops_set *ops, tp_comm *comm, bf16 *buf, long n, int first,
                                   bool round_each_hop) {
    int T = tp_comm_size(comm);
    if (T == 1 || n <= 0) return;
    if (first < 0 || first >= T)
        invar_die(INVAR_EXIT_SYSTEM, "cuda %s set: all_reduce starting at rank %d of %d", ops->name,
                  first, T);
    // The order: ranks from `first`, rounded once or at every hop; past 8192 blocks the grid
    // strides (a path: which thread adds an element, never how).
    long order[] = {T, first, round_each_hop};
    fingerprint_note(ops->fingerprints, "all_reduce", (uint64_t)T, fingerprint_order(order, 3),
                     (n + 255) / 256 > 8192 ? "grid-stride" : "one-pass");
    cuda_ctx *c = cuda_ctx_of(ops);
    ncclComm_t nc = (ncclComm_t)inv_cuda_nccl_comm(comm, "all_reduce");
    bf16 *gathered = (bf16 *)cuda_scratch(c, SCRATCH_ALL_REDUCE, (size_t)T * n * sizeof(bf16),
                                          "all_reduce gathered messages");
    NCCL_CHECK("all_reduce", ncclAllGather(buf, gathered, (size_t)n, ncclBfloat16, nc, c->stream));
    all_reduce_sum_kernel<<<grid_for(n), 256, 0, c->stream>>>(buf, gathered, n, T, first,
                                                              round_each_hop);
    CUDA_CHECK_LAUNCH("all_reduce (rank-order sum)");
}

void inv_cuda_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    inv_cuda_all_reduce_from_rank(ops, comm, buf, n, 0, false);
}

// --- all_reduce_f32_tree ---

// out[i] from gathered[r][i]: first < 0, the pairwise tree ((x_0 + x_1) + (x_2 + x_3)) + ...
// (T a power of two, kernels/cpu/all_reduce.c's rank_tree); else the chain from rank `first` up.
// fp32, never rounded; __fadd_rn as written.
__global__ void all_reduce_f32_sum_kernel(float *out, const float *gathered, long n, int T, int first) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        if (first >= 0) {
            float acc = gathered[(long)first * n + i];
            for (int hop = 1; hop < T; hop++) acc = __fadd_rn(acc, gathered[(long)((first + hop) % T) * n + i]);
            out[i] = acc;
            continue;
        }
        float part[8];
        for (int r = 0; r < T; r++) part[r] = gathered[(long)r * n + i];
        for (int stride = 1; stride < T; stride *= 2)
            for (int r = 0; r + stride < T; r += 2 * stride) part[r] = __fadd_rn(part[r], part[r + stride]);
        out[i] = part[0];
    }
}

void inv_cuda_all_reduce_f32_from_rank(ops_set *ops, tp_comm *comm, float *buf, long n, int first) {
    int T = tp_comm_size(comm);
    if (T == 1 || n <= 0) return;
    if (first < 0 && (T > 8 || (T & (T - 1)) != 0))
        invar_die(INVAR_EXIT_INPUT, "all_reduce_f32_tree: %d ranks: the tree needs a power of two up to 8", T);
    if (first >= T)
        invar_die(INVAR_EXIT_SYSTEM, "cuda %s set: all_reduce_f32 starting at rank %d of %d", ops->name, first, T);
    long order[] = {first < 0 ? 2 : 1, T, first};  // pairs up the tree, or a chain from `first`
    fingerprint_note(ops->fingerprints, "all_reduce_f32_tree", fingerprint_order(order + 1, 1),
                     fingerprint_order(order, first < 0 ? 2 : 3), first < 0 ? "rank-tree" : "rank-chain");
    cuda_ctx *c = cuda_ctx_of(ops);
    ncclComm_t nc = (ncclComm_t)inv_cuda_nccl_comm(comm, "all_reduce_f32_tree");
    float *gathered = (float *)cuda_scratch(c, SCRATCH_ALL_REDUCE, (size_t)T * n * sizeof(float),
                                            "all_reduce_f32_tree gathered messages");
    NCCL_CHECK("all_reduce_f32_tree", ncclAllGather(buf, gathered, (size_t)n, ncclFloat32, nc, c->stream));
    all_reduce_f32_sum_kernel<<<grid_for(n), 256, 0, c->stream>>>(buf, gathered, n, T, first);
    CUDA_CHECK_LAUNCH("all_reduce_f32_tree (fixed-order sum)");
}

void inv_cuda_all_reduce_f32_tree(ops_set *ops, tp_comm *comm, float *buf, long n) {
    inv_cuda_all_reduce_f32_from_rank(ops, comm, buf, n, -1);
}

// --- all_gather_columns ---

__global__ void gather_range_kernel(long long *mine, long begin, long end, int rows) {
    mine[0] = begin;
    mine[1] = end;
    mine[2] = rows;
}

// packed[row][j] = buf[row][begin + j] for j < width; packed rows are `stride` apart.
__global__ void gather_pack_kernel(float *packed, const float *buf, int rows, long ld, long begin,
                                   long width, long stride) {
    long total = (long)rows * width;
    for (long k = blockIdx.x * (long)blockDim.x + threadIdx.x; k < total; k += (long)gridDim.x * blockDim.x) {
        long row = k / width, j = k % width;
        packed[row * stride + j] = buf[row * ld + begin + j];
    }
}

// Every other rank's packed columns into buf, at their columns (ranges[r] = begin, end, rows).
__global__ void gather_unpack_kernel(float *buf, const float *recv, const long long *ranges,
                                     int T, int me, int rows, long ld, long stride) {
    long per_rank = (long)rows * stride, total = (long)T * per_rank;
    for (long k = blockIdx.x * (long)blockDim.x + threadIdx.x; k < total; k += (long)gridDim.x * blockDim.x) {
        int r = (int)(k / per_rank);
        long row = k % per_rank / stride, j = k % stride;
        long begin = ranges[3 * r], width = ranges[3 * r + 1] - begin;
        if (r == me || j >= width) continue;
        buf[row * ld + begin + j] = recv[k];
    }
}

// A copy, with no order to vary. Ranks' column ranges may differ and NCCL moves equal counts:
// the ranges are gathered first, then every rank's columns packed to the widest.
void inv_cuda_all_gather_columns(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld,
                                 long col_begin, long col_end) {
    int T = tp_comm_size(comm), me = tp_comm_rank(comm);
    if (T == 1) return;
    cuda_ctx *c = cuda_ctx_of(ops);
    ncclComm_t nc = (ncclComm_t)inv_cuda_nccl_comm(comm, "all_gather_columns");
    long long *ranges = (long long *)cuda_scratch(c, SCRATCH_GATHER_RANGES,
                                                  (size_t)(T + 1) * 3 * sizeof(long long),
                                                  "all_gather_columns ranges");
    long long *mine = ranges + 3 * T;
    gather_range_kernel<<<1, 1, 0, c->stream>>>(mine, col_begin, col_end, rows);
    CUDA_CHECK_LAUNCH("all_gather_columns (range)");
    NCCL_CHECK("all_gather_columns", ncclAllGather(mine, ranges, 3, ncclInt64, nc, c->stream));
    long long *host = (long long *)invar_calloc((size_t)T * 3, sizeof *host, "all_gather ranges");
    CUDA_CHECK("all_gather_columns", cudaMemcpyAsync(host, ranges, (size_t)T * 3 * sizeof *host,
                                                     cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK("all_gather_columns", cudaStreamSynchronize(c->stream));
    long widest = 0;
    for (int r = 0; r < T; r++) {
        if (host[3 * r + 2] != rows)
            invar_die(INVAR_EXIT_SYSTEM, "all_gather: rank %d sends %d rows, rank %d %lld", me,
                      rows, r, host[3 * r + 2]);
        long width = (long)(host[3 * r + 1] - host[3 * r]);
        if (host[3 * r] < 0 || width < 0 || host[3 * r + 1] > ld)
            invar_die(INVAR_EXIT_SYSTEM, "all_gather: rank %d's columns [%lld, %lld) lie outside "
                      "a row of %ld", r, host[3 * r], host[3 * r + 1], ld);
        if (width > widest) widest = width;
    }
    free(host);
    if (widest == 0 || rows <= 0) return;
    long per_rank = (long)rows * widest;
    float *send = (float *)cuda_scratch(c, SCRATCH_GATHER_SEND, (size_t)per_rank * sizeof(float),
                                        "all_gather_columns send");
    float *recv = (float *)cuda_scratch(c, SCRATCH_GATHER_RECV, (size_t)T * per_rank * sizeof(float),
                                        "all_gather_columns receive");
    gather_pack_kernel<<<grid_for(per_rank), 256, 0, c->stream>>>(send, buf, rows, ld, col_begin,
                                                                  col_end - col_begin, widest);
    CUDA_CHECK_LAUNCH("all_gather_columns (pack)");
    NCCL_CHECK("all_gather_columns", ncclAllGather(send, recv, (size_t)per_rank, ncclFloat32, nc,
                                                   c->stream));
    gather_unpack_kernel<<<grid_for((long)T * per_rank), 256, 0, c->stream>>>(
        buf, recv, ranges, T, me, rows, ld, widest);
    CUDA_CHECK_LAUNCH("all_gather_columns (unpack)");
}
