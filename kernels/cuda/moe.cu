// kernels/cuda/moe.cu — MoE on the GPU: routing (one block per token), the routed experts as
// grouped GEMMs with the invariant GEMM's per-element order, and the fixed-order combine.
#include <cuda_runtime.h>    // dim3
#include <math.h>            // expf, INFINITY

#include "../bf16.h"         // bf16_to_float, float_to_bf16
#include "block_reduce.cuh"  // warp_sum
#include "cuda_ctx.cuh"      // cuda_ctx, cuda_scratch, CUDA_CHECK_LAUNCH
#include "gemm.cuh"          // gemm_problem, gemm_launch
#include "gemm_plan.cuh"     // gemm_split_count, GEMM_BK
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "inv_cuda_ops.h"    // inv_cuda_moe_*, inv_cuda_silu_mul
#include "moe_rows.cuh"      // moe_combine_io, moe_row_value, moe_combine_store
#include "../moe_slices.h"     // moe_slices_check

// --- route ---

#define ROUTE_THREADS 1024  // 32 warps: V2-Lite's 64 experts are two chains a warp, not eight
#define ROUTE_MAX_GROUPS 64

// Ties pick the lower index: strictly greater wins, scanning ascending.
__device__ static int argmax_excluding(const float *v, const unsigned char *taken, int begin, int end) {
    int best = -1;
    for (int e = begin; e < end; e++)
        if (!taken[e] && (best < 0 || v[e] > v[best])) best = e;
    return best;
}

// One block per token. The E dot products run one warp each (lanes stride over D, then the
// fixed xor-shuffle tree); scoring and selection run serially in thread 0, in the order
// Hugging Face's DeepseekV2MoEGate / DeepseekV3TopkRouter describe. A lane's loads are issued
// eight ahead of its adds, which stay one chain in d order: the latency of a load no longer
// sits between two adds, and the bits are those of the plain loop.
__global__ void __launch_bounds__(ROUTE_THREADS) moe_route_kernel(moe_route_args a) {
    extern __shared__ float sh[];
    float *logit = sh, *score = sh + a.E, *choice = sh + 2 * a.E;
    unsigned char *taken = (unsigned char *)(sh + 3 * a.E);
    const int t = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint16_t *x = a.x + (long)t * a.D;
    for (int e = warp; e < a.E; e += ROUTE_THREADS / 32) {
        const uint16_t *g = a.gate_w + (long)e * a.D;
        float s = 0.0f;
#pragma unroll 8
        for (int d = lane; d < a.D; d += 32) s = __fadd_rn(s, __fmul_rn(bf16_to_float(x[d]), bf16_to_float(g[d])));
        s = warp_sum(s);
        if (lane == 0) logit[e] = s;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;

    const int E = a.E;
    if (a.scoring == MOE_SCORING_SOFTMAX) {
        float mx = -INFINITY, sum = 0.0f;
        for (int e = 0; e < E; e++) mx = fmaxf(mx, logit[e]);
        for (int e = 0; e < E; e++) sum += expf(logit[e] - mx);
        for (int e = 0; e < E; e++) score[e] = expf(logit[e] - mx) / sum;
    } else {
        for (int e = 0; e < E; e++) score[e] = 1.0f / (1.0f + expf(-logit[e]));
    }
    const bool biased = a.topk_method == MOE_TOPK_NOAUX_TC && a.correction_bias;
    for (int e = 0; e < E; e++) {
        choice[e] = biased ? score[e] + a.correction_bias[e] : score[e];
        taken[e] = 0;
    }
    if (a.topk_method != MOE_TOPK_GREEDY && a.n_group > 1) {
        const int G = a.n_group, per = E / G;  // n_group <= ROUTE_MAX_GROUPS: checked at launch
        float gscore[ROUTE_MAX_GROUPS];
        unsigned char gtaken[ROUTE_MAX_GROUPS];
        for (int g = 0; g < G; g++) {
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
        for (int j = 0; j < a.topk_group && j < G; j++) {
            int best = -1;
            for (int g = 0; g < G; g++) if (!gtaken[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
            gtaken[best] = 1;
        }
        for (int g = 0; g < G; g++)
            if (!gtaken[g]) for (int i = 0; i < per; i++) choice[g * per + i] = 0.0f;  // masked_fill(0.0)
    }
    int32_t *ids = a.topk_ids + (long)t * a.k;
    float *w = a.topk_weights + (long)t * a.k;
    float wsum = 0.0f;
    for (int j = 0; j < a.k; j++) {
        int e = argmax_excluding(choice, taken, 0, E);
        taken[e] = 1;
        ids[j] = e;
        w[j] = score[e];
        wsum += score[e];
    }
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
    long order[] = {32, a->D};  // a logit: 32 lanes striding over D, then the xor tree
    long shape[] = {a->D, a->E, a->k, a->topk_method, a->n_group, a->topk_group};
    fingerprint_note(ops->fingerprints, "moe_route", fingerprint_order(shape, 6), fingerprint_order(order, 2),
                     method_path[a->topk_method]);
    size_t smem = (size_t)a->E * (3 * sizeof(float) + 1);
    moe_route_kernel<<<(unsigned)a->T, ROUTE_THREADS, smem, cuda_ctx_of(ops)->stream>>>(*a);
    CUDA_CHECK_LAUNCH("moe_route");
}

// --- experts ---

// Per-expert row lists, in ascending (token, slot) order: thread e scans every (t, j) entry in
// order, so the lists are the same on every run. offsets[E] = rows listed. With slices > 1 the
// lists repeat for each slice s as expert s*E + e, its compact rows and outputs s*Tk onwards
// (offsets [slices*E + 1]): the slices' experts are one grouped GEMM's groups.
__global__ void moe_lists_kernel(const int32_t *ids, int Tk, int k, int E, int slices, int32_t *offsets,
                                 int32_t *tok_rows, int32_t *entry_rows) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int n = 0;
        for (int i = 0; i < Tk; i++) n += ids[i] == e;
        offsets[e + 1] = n;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        offsets[0] = 0;
        for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int at = offsets[e];
        for (int i = 0; i < Tk; i++)
            if (ids[i] == e) {
                tok_rows[at] = i / k;
                entry_rows[at] = i;
                at++;
            }
    }
    if (slices <= 1) return;
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
    int32_t *lists = (int32_t *)cuda_scratch(c, SCRATCH_MOE_LISTS, (size_t)(groups + 1 + 2 * rows) * 4, "moe_experts row lists");
    int32_t *offsets = lists, *tok_rows = lists + groups + 1, *entry_rows = tok_rows + rows;
    uint16_t *gu = (uint16_t *)cuda_scratch(c, SCRATCH_MOE_GATE_UP, (size_t)rows * 2 * a->I * 2, "moe_experts gate_up");
    uint16_t *act = (uint16_t *)cuda_scratch(c, SCRATCH_MOE_ACT, (size_t)rows * a->I * 2, "moe_experts activations");

    moe_lists_kernel<<<1, 1024, 0, c->stream>>>(a->topk_ids, (int)Tk, a->k, a->E, S, offsets, tok_rows, entry_rows);
    CUDA_CHECK_LAUNCH("moe_experts lists");

    // gate_up: gathered token rows -> compact rows. A token picks an expert at most once, so
    // a group never has more than T rows.
    gemm_problem g = {};
    g.y = gu; g.x = a->x; g.w = a->w_gate_up;
    g.M = a->T; g.N = 2 * a->I; g.K = a->D;
    g.ldx = a->D; g.ldy = 2 * a->I; g.ldw = a->D;
    g.stride_w = (long)2 * a->I * a->D;
    g.group_offsets = offsets; g.x_rows = tok_rows;
    gemm_launch(c, &g, groups, "moe_experts gate_up");

    inv_cuda_silu_mul(ops, act, gu, (int)rows, a->I);

    // down: compact rows -> out[t*k + j], or its fp32 sums unrounded (out_f32: TP-size invariance).
    gemm_problem d = {};
    d.y = a->out_f32 ? (void *)a->out_f32 : (void *)a->out; d.y_f32 = a->out_f32 != NULL;
    d.x = act; d.w = a->w_down;
    d.M = a->T; d.N = a->D; d.K = a->I;
    d.ldx = a->I; d.ldy = a->D; d.ldw = a->I;
    d.stride_w = (long)a->D * a->I;
    d.group_offsets = offsets; d.y_rows = entry_rows;
    gemm_launch(c, &d, groups, "moe_experts down");
}

// --- combine ---

// out[t][d] = bf16( sum_j w[t,j] * e[t*k+j][d] ), j ascending, products and sums rounded
// separately (no FMA contraction), as the CPU sets. F32 (TP-size invariance): fp32 expert rows
// in, the sum stored unrounded; the same order. T rows of out are slices of Tw tokens each
// (slice s's token t at s*Tw + t), every slice weighted by the Tw tokens' weights.
template <bool F32>
__global__ void moe_combine_kernel(void *out, const void *eo, const float *w, int T, int Tw, int k, int D) {
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
