// kernels/cuda/moe.cu — MoE on the GPU: routing (one block per token), the routed experts as
// grouped GEMMs with the invariant GEMM's per-element order, and the fixed-order combine.
#include <cuda_runtime.h>    // dim3
#include <cub/block/block_scan.cuh>  // cub::BlockScan
#include <math.h>            // expf, INFINITY

#include "../bf16.h"         // bf16_to_float, float_to_bf16
#include "block_reduce.cuh"  // warp_sum, warp_max
#include "cuda_ctx.cuh"      // cuda_ctx, cuda_scratch, CUDA_CHECK_LAUNCH
#include "pdl.cuh"          // pdl_release_gemm
#include "gemm.cuh"          // gemm_problem, gemm_launch
#include "gemm_plan.cuh"     // gemm_split_count, GEMM_BK
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "inv_cuda_ops.h"    // inv_cuda_moe_*, inv_cuda_silu_mul
#include "moe_rows.cuh"      // moe_combine_io, moe_row_value, moe_combine_store
#include "../moe_slices.h"     // moe_slices_check

// --- route ---

#define ROUTE_THREADS 1024  // 32 warps: V2-Lite's 64 experts are two dot products a warp, not eight
#define ROUTE_MAX_GROUPS 64
#define ROUTE_RUN 8         // d's a lane adds in a run: one 16-byte load of x and of a gate row

// (v, i) beats (v2, i2): larger value, then lower index; i2 < 0 is no candidate yet. Over a
// warp's lanes it picks what a scan in ascending index with "strictly greater wins" picks.
__device__ __forceinline__ bool route_beats(float v, int i, float v2, int i2) {
    return i >= 0 && (i2 < 0 || v > v2 || (v == v2 && i < i2));
}

__device__ __forceinline__ int warp_argmax(float v, int i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (route_beats(ov, oi, v, i)) { v = ov; i = oi; }
    }
    return i;
}

// The best index of v[0 .. n) not yet taken, over the warp (every lane gets it).
__device__ __forceinline__ int warp_argmax_untaken(const float *v, const unsigned char *taken, int n) {
    float bv = -INFINITY;
    int bi = -1;
    for (int e = threadIdx.x % 32; e < n; e += 32)
        if (!taken[e] && route_beats(v[e], e, bv, bi)) { bv = v[e]; bi = e; }
    return warp_argmax(bv, bi);
}

// A logit x . g: lane L adds, in one chain, the runs of ROUTE_RUN d's starting at d = 8 L,
// 8 L + 256, ... (the tail run cut at D), then the fixed xor-shuffle tree adds the lanes. The
// order depends on D only; 16-byte loads where the rows allow them, scalar ones else (same order).
__device__ __forceinline__ float route_logit(const uint16_t *x, const uint16_t *g, int D, int lane) {
    float s = 0.0f;
    const bool wide = D % ROUTE_RUN == 0 && ((uintptr_t)x | (uintptr_t)g) % 16 == 0;
    if (wide) {
#pragma unroll 4
        for (int d0 = ROUTE_RUN * lane; d0 < D; d0 += 32 * ROUTE_RUN) {
            const uint4 xv = *(const uint4 *)(x + d0), gv = *(const uint4 *)(g + d0);
            const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s = __fadd_rn(s, __fmul_rn(__uint_as_float(xw[j] << 16), __uint_as_float(gw[j] << 16)));
                s = __fadd_rn(s, __fmul_rn(__uint_as_float(xw[j] & 0xffff0000u), __uint_as_float(gw[j] & 0xffff0000u)));
            }
        }
    } else {
        for (int d0 = ROUTE_RUN * lane; d0 < D; d0 += 32 * ROUTE_RUN)
            for (int d = d0; d < d0 + ROUTE_RUN && d < D; d++)
                s = __fadd_rn(s, __fmul_rn(bf16_to_float(x[d]), bf16_to_float(g[d])));
    }
    return warp_sum(s);
}

// One block per token. The E logits run one warp each (route_logit); scoring and selection run
// in warp 0 in the order Hugging Face's DeepseekV2MoEGate / DeepseekV3TopkRouter describe:
// maxima and arg-maxima over the lanes (exact, whatever the tree), the softmax's sum and the
// weights' sum serially in lane 0 (index order).
__global__ void __launch_bounds__(ROUTE_THREADS) moe_route_kernel(moe_route_args a) {
    pdl_release_gemm();
    extern __shared__ float sh[];
    __shared__ float gscore[ROUTE_MAX_GROUPS];
    __shared__ unsigned char gtaken[ROUTE_MAX_GROUPS];
    float *logit = sh, *score = sh + a.E, *choice = sh + 2 * a.E;
    unsigned char *taken = (unsigned char *)(sh + 3 * a.E);
    const int t = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, E = a.E;
    const uint16_t *x = a.x + (long)t * a.D;
    for (int e = warp; e < E; e += ROUTE_THREADS / 32) {
        const float s = route_logit(x, a.gate_w + (long)e * a.D, a.D, lane);
        if (lane == 0) logit[e] = s;
    }
    __syncthreads();
    if (warp != 0) return;

    if (a.scoring == MOE_SCORING_SOFTMAX) {
        float mx = -INFINITY;
        for (int e = lane; e < E; e += 32) mx = fmaxf(mx, logit[e]);
        mx = warp_max(mx);
        for (int e = lane; e < E; e += 32) score[e] = expf(logit[e] - mx);
        __syncwarp();
        float sum = 0.0f;
        if (lane == 0)
            for (int e = 0; e < E; e++) sum += score[e];
        sum = __shfl_sync(0xffffffffu, sum, 0);
        for (int e = lane; e < E; e += 32) score[e] = score[e] / sum;
    } else {
        for (int e = lane; e < E; e += 32) score[e] = 1.0f / (1.0f + expf(-logit[e]));
    }
    const bool biased = a.topk_method == MOE_TOPK_NOAUX_TC && a.correction_bias;
    for (int e = lane; e < E; e += 32) {
        choice[e] = biased ? score[e] + a.correction_bias[e] : score[e];
        taken[e] = 0;
    }
    __syncwarp();
    if (a.topk_method != MOE_TOPK_GREEDY && a.n_group > 1) {
        const int G = a.n_group, per = E / G;  // n_group <= ROUTE_MAX_GROUPS: checked at launch
        for (int g = lane; g < G; g += 32) {
            gtaken[g] = 0;
            const float *c = choice + g * per;
            if (a.topk_method == MOE_TOPK_GROUP_LIMITED_GREEDY) {
                float m = -INFINITY;
                for (int i = 0; i < per; i++) m = fmaxf(m, c[i]);
                gscore[g] = m;
            } else {  // noaux_tc: sum of the group's top two
                int b1 = 0;
                for (int i = 1; i < per; i++) if (c[i] > c[b1]) b1 = i;
                int b2 = -1;
                for (int i = 0; i < per; i++) if (i != b1 && (b2 < 0 || c[i] > c[b2])) b2 = i;
                gscore[g] = c[b1] + (b2 >= 0 ? c[b2] : 0.0f);
            }
        }
        __syncwarp();
        for (int j = 0; j < a.topk_group && j < G; j++) {
            const int best = warp_argmax_untaken(gscore, gtaken, G);
            if (lane == 0) gtaken[best] = 1;
            __syncwarp();
        }
        for (int e = lane; e < E; e += 32)
            if (!gtaken[e / per]) choice[e] = 0.0f;  // masked_fill(0.0)
        __syncwarp();
    }
    int32_t *ids = a.topk_ids + (long)t * a.k;
    float *w = a.topk_weights + (long)t * a.k;
    float wsum = 0.0f;
    for (int j = 0; j < a.k; j++) {
        const int e = warp_argmax_untaken(choice, taken, E);
        if (lane == 0) {
            taken[e] = 1;
            ids[j] = e;
            w[j] = score[e];
            wsum += score[e];
        }
        __syncwarp();
    }
    if (lane != 0) return;
    bool normalize = a.norm_topk_prob && (a.topk_method == MOE_TOPK_NOAUX_TC || a.k > 1);
    for (int j = 0; j < a.k; j++) {
        if (normalize) w[j] = w[j] / (wsum + 1e-20f);
        if (a.topk_method == MOE_TOPK_NOAUX_TC || !normalize) w[j] = w[j] * a.routed_scaling_factor;
    }
}

void inv_cuda_moe_route(ops_set *ops, const moe_route_args *a) {
    if (a->k < 1 || a->k > a->E || a->n_group < 1 || a->n_group > ROUTE_MAX_GROUPS ||
        a->E % a->n_group != 0 ||
        (a->topk_method != MOE_TOPK_GREEDY &&
         (a->topk_group < 1 || a->topk_group > a->n_group || a->k > a->topk_group * (a->E / a->n_group))))
        invar_die(INVAR_EXIT_INPUT, "moe_route: impossible routing shape (E=%d k=%d n_group=%d topk_group=%d; "
                  "n_group at most %d)", a->E, a->k, a->n_group, a->topk_group, ROUTE_MAX_GROUPS);
    if (a->T <= 0) return;
    static const char *const method_path[] = {
        [MOE_TOPK_GREEDY] = "greedy", [MOE_TOPK_GROUP_LIMITED_GREEDY] = "group-limited", [MOE_TOPK_NOAUX_TC] = "noaux-tc"};
    long order[] = {32, ROUTE_RUN, a->D};  // a logit: 32 lanes over runs of 8 d's, then the xor tree
    long shape[] = {a->D, a->E, a->k, a->topk_method, a->n_group, a->topk_group};
    fingerprint_note(ops->fingerprints, "moe_route", fingerprint_order(shape, 6), fingerprint_order(order, 3),
                     method_path[a->topk_method]);
    size_t smem = (size_t)a->E * (3 * sizeof(float) + 1);
    moe_route_kernel<<<(unsigned)a->T, ROUTE_THREADS, smem, cuda_ctx_of(ops)->stream>>>(*a);
    CUDA_CHECK_LAUNCH("moe_route");
}

// --- experts ---

#define MOE_LISTS_SHARED_IDS 4096  // 16 KB: the routed ids of up to 682 tokens at V2-Lite's k = 6
#define MOE_LISTS_THREADS 1024     // an expert a thread, E in chunks of this many

// Per-expert row lists, in ascending (token, slot) order: thread e scans every (t, j) entry in
// order, so the lists are the same on every run. offsets[E] = rows listed. With slices > 1 the
// lists repeat for each slice s as expert s*E + e, its compact rows and outputs s*Tk onwards
// (offsets [slices*E + 1]): the slices' experts are one grouped GEMM's groups. group_ids[z] for
// z < slots: the groups holding rows, ascending, then -1 (the grouped GEMMs' grid runs slots
// slices of z, not one a group: at decode most experts hold no row).
// A list's start and an expert's place among those with rows are block-wide scans over a chunk
// of experts, carried to the next chunk; a serial pass over E through global memory cost a
// decode step's call several microseconds.
__global__ void __launch_bounds__(MOE_LISTS_THREADS)
moe_lists_kernel(const int32_t *ids_global, int Tk, int k, int E, int slices, int slots, int32_t *offsets,
                 int32_t *tok_rows, int32_t *entry_rows, int32_t *group_ids) {
    pdl_release_gemm();
    typedef cub::BlockScan<int, MOE_LISTS_THREADS> block_scan;
    __shared__ typename block_scan::TempStorage scan_space;
    __shared__ int rows_before, used_before;  // the chunks before this one: rows listed, experts with rows
    // Each expert's thread scans every id twice: from shared memory where they fit, one
    // coalesced read, not Tk dependent global loads a thread (a 128-token step has 768 ids).
    __shared__ int32_t ids_shared[MOE_LISTS_SHARED_IDS];
    const int32_t *ids = ids_global;
    if (Tk <= MOE_LISTS_SHARED_IDS) {
        for (int i = threadIdx.x; i < Tk; i += blockDim.x) ids_shared[i] = ids_global[i];
        ids = ids_shared;
    }
    if (threadIdx.x == 0) {
        rows_before = used_before = 0;
        offsets[0] = 0;
    }
    __syncthreads();
    for (int chunk = 0; chunk < E; chunk += MOE_LISTS_THREADS) {
        const int e = chunk + (int)threadIdx.x;
        int n = 0;
        if (e < E)
            for (int i = 0; i < Tk; i++) n += ids[i] == e;
        int start, place, rows, used;
        block_scan(scan_space).ExclusiveSum(n, start, rows);
        __syncthreads();  // the scan's storage is reused
        block_scan(scan_space).ExclusiveSum(n > 0 ? 1 : 0, place, used);
        start += rows_before;
        place += used_before;
        if (e < E) {
            offsets[e + 1] = start + n;
            if (n > 0) group_ids[place] = e;
            for (int i = 0, at = start; i < Tk; i++)
                if (ids[i] == e) {
                    tok_rows[at] = i / k;
                    entry_rows[at] = i;
                    at++;
                }
        }
        __syncthreads();  // every thread has read the carries (and the lists are written)
        if (threadIdx.x == 0) {
            rows_before += rows;
            used_before += used;
        }
        __syncthreads();
    }
    const int used = used_before;
    for (int z = slices * used + threadIdx.x; z < slots; z += blockDim.x) group_ids[z] = -1;
    if (slices <= 1) return;
    for (int z = used + threadIdx.x; z < slices * used; z += blockDim.x)  // used >= 1 here (z < slices*used)
        group_ids[z] = (z / used) * E + group_ids[z % used];
    __syncthreads();
    for (int s = 1; s < slices; s++) {
        for (int e = threadIdx.x; e < E; e += blockDim.x) offsets[s * E + e] = s * Tk + offsets[e];
        for (int i = threadIdx.x; i < Tk; i += blockDim.x) {
            tok_rows[s * Tk + i] = tok_rows[i];
            entry_rows[s * Tk + i] = s * Tk + entry_rows[i];
        }
    }
    if (threadIdx.x == 0) offsets[slices * E] = slices * Tk;
}

void inv_cuda_moe_experts(ops_set *ops, const moe_experts_args *a) {
    cuda_ctx *c = cuda_ctx_of(ops);
    const long Tk = (long)a->T * a->k;
    if (Tk <= 0) return;
    moe_slices_check(a->slices, a->out_f32 != NULL, "moe_experts");
    const int S = a->slices > 1 ? a->slices : 1, groups = S * a->E;  // S slices of E experts
    // The order is the two grouped GEMMs' (split-K from (N, K) on sm_90a, none elsewhere).
    const bool wgmma = c->wgmma;
    long order[] = {wgmma ? gemm_split_count(2 * a->I, a->D) : 1, wgmma ? gemm_split_count(a->D, a->I) : 1, GEMM_BK,
                    wgmma};
    long shape[] = {a->D, a->I, a->E, a->k};
    fingerprint_note(ops->fingerprints, "moe_experts", fingerprint_order(shape, 4), fingerprint_order(order, 4),
                     "grouped-gemm");
    const long rows = S * Tk;  // compact rows, the slices' one after another
    // Grid slices: at most min(groups, rows) groups hold a row (moe_lists_kernel names them).
    const int slots = rows < groups ? (int)rows : groups;
    int32_t *lists = (int32_t *)cuda_scratch(c, SCRATCH_MOE_LISTS, (size_t)(groups + 1 + 2 * rows + slots) * 4,
                                             "moe_experts row lists");
    int32_t *offsets = lists, *tok_rows = lists + groups + 1, *entry_rows = tok_rows + rows;
    int32_t *group_ids = entry_rows + rows;
    uint16_t *gu = (uint16_t *)cuda_scratch(c, SCRATCH_MOE_GATE_UP, (size_t)rows * 2 * a->I * 2, "moe_experts gate_up");
    uint16_t *act = (uint16_t *)cuda_scratch(c, SCRATCH_MOE_ACT, (size_t)rows * a->I * 2, "moe_experts activations");

    moe_lists_kernel<<<1, MOE_LISTS_THREADS, 0, c->stream>>>(a->topk_ids, (int)Tk, a->k, a->E, S, slots, offsets, tok_rows,
                                                entry_rows, group_ids);
    CUDA_CHECK_LAUNCH("moe_experts lists");

    // gate_up: gathered token rows -> compact rows. A token picks an expert at most once, so
    // a group never has more than T rows.
    gemm_problem g = {};
    g.y = gu; g.x = a->x; g.w = a->w_gate_up;
    g.M = a->T; g.N = 2 * a->I; g.K = a->D;
    g.ldx = a->D; g.ldy = 2 * a->I; g.ldw = a->D;
    g.stride_w = (long)2 * a->I * a->D;
    g.group_offsets = offsets; g.group_ids = group_ids; g.x_rows = tok_rows; g.rows_listed = rows; g.groups = groups;
    gemm_launch(c, &g, slots, "moe_experts gate_up");

    inv_cuda_silu_mul(ops, act, gu, (int)rows, a->I);

    // down: compact rows -> out[t*k + j], or its fp32 sums unrounded (out_f32: TP-size invariance).
    gemm_problem d = {};
    d.y = a->out_f32 ? (void *)a->out_f32 : (void *)a->out; d.y_f32 = a->out_f32 != NULL;
    d.x = act; d.w = a->w_down;
    d.M = a->T; d.N = a->D; d.K = a->I;
    d.ldx = a->I; d.ldy = a->D; d.ldw = a->I;
    d.stride_w = (long)a->D * a->I;
    d.group_offsets = offsets; d.group_ids = group_ids; d.y_rows = entry_rows; d.rows_listed = rows; d.groups = groups;
    gemm_launch(c, &d, slots, "moe_experts down");
}

// --- combine ---

// out[t][d] = bf16( sum_j w[t,j] * e[t*k+j][d] ), j ascending, products and sums rounded
// separately (no FMA contraction), as the CPU sets. F32 (TP-size invariance): fp32 expert rows
// in, the sum stored unrounded; the same order. T rows of out are slices of Tw tokens each
// (slice s's token t at s*Tw + t), every slice weighted by the Tw tokens' weights.
template <bool F32>
__global__ void moe_combine_kernel(void *out, const void *eo, const float *w, int T, int Tw, int k, int D) {
    pdl_release_gemm();
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * D) return;
    long t = i / D, d = i % D;
    const float *wt = w + (t % Tw) * k;
    float s = -0.0f;  // -0 + p_0 is p_0 exactly, as the CPU sets' sum from the first product
    for (int j = 0; j < k; j++) {
        const long at = (t * k + j) * D + d;
        s = __fadd_rn(s, __fmul_rn(wt[j], moe_row_value<F32>(eo, at)));
    }
    moe_combine_store<F32>(out, i, s);
}

void inv_cuda_moe_combine(ops_set *ops, const moe_combine_args *a) {
    moe_slices_check(a->slices, a->out_f32 && a->expert_out_f32, "moe_combine");
    const int S = a->slices > 1 ? a->slices : 1;
    long n = (long)S * a->T * a->D;
    if (n <= 0) return;
    long order[] = {a->k};  // j ascending from the first product
    long shape[] = {a->D, a->k};
    fingerprint_note(ops->fingerprints, "moe_combine", fingerprint_order(shape, 2), fingerprint_order(order, 1),
                     "ascending-k");
    const moe_combine_io io = moe_combine_io_of(a);
    (io.f32 ? moe_combine_kernel<true> : moe_combine_kernel<false>)<<<(unsigned)((n + 255) / 256), 256, 0,
                                                                      cuda_ctx_of(ops)->stream>>>(
        io.out, io.rows, a->topk_weights, S * a->T, a->T, a->k, a->D);
    CUDA_CHECK_LAUNCH("moe_combine");
}
