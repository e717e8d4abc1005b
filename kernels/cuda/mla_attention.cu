// kernels/cuda/mla_attention.cu — the MLA op: kernel choice, split size and count, launches.
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
#include <stdint.h>         // uintptr_t
#include <string.h>         // strcmp

#include "../fingerprint.h" // fingerprint_note, fingerprint_order
#include "cuda_ctx.cuh"     // cuda_ctx, cuda_scratch, CUDA_CHECK
#include "tma_map.cuh"      // tma_map_bf16_2d(_stream)
#include "inv_cuda.h"       // inv_cuda_mla_attention_kernel
#include "inv_cuda_ops.h"   // inv_cuda_mla_attention, mla_attention_launch, mla_wgmma_*
#include "mla_attention.cuh"  // mla_params, mla_mma_split_launch, mla_merge_launch

// Positions per split, fixed so that a token's splits follow from its own position alone; 512
// rather than 256 halves the partials written and merged, at the price of fewer CTAs for a
// lone long sequence. An experiment may build another size (NVCC_DEFINES=-DMLA_SPLIT_SIZE=256):
// unlike the other experiments it changes bits, the tree every row follows, never invariance.
#ifndef MLA_SPLIT_SIZE
#define MLA_SPLIT_SIZE 512
#endif
static_assert(MLA_SPLIT_SIZE >= 64 && MLA_SPLIT_SIZE % 64 == 0, "splits of whole 64-position tiles");

// Every 8-value piece of q_lat and q_pe 16-byte aligned: the tensor-core kernels copy Q by cp.async.
bool mla_q_aligned(const mla_attention_args *a) {
    return ((uintptr_t)a->q_lat & 15u) == 0 && ((uintptr_t)a->q_pe & 15u) == 0 && a->ld_q_lat % 8 == 0 &&
           a->ld_q_pe % 8 == 0 && a->head_stride_q_pe % 8 == 0;
}

// heads: a unit's; pads: the kernel takes fewer than that too (one unit, padded).
bool mla_wgmma_takes(const cuda_ctx *c, const mla_attention_args *a, int split_size, int heads, bool pads,
                     size_t smem_bytes) {
    const int select = a->H_select > 0 ? a->H_select : a->H;  // divides H where set (ops.h)
    const bool h_ok = a->H % heads == 0 || (pads && a->H < heads);
    const bool select_ok = select % heads == 0 || (pads && select < heads);
    return c->wgmma && c->tensor_map_encode && c->smem_optin >= smem_bytes && h_ok && select_ok && a->L == 512 &&
           a->R == 64 && a->block_size > 0 && a->block_size % 64 == 0 && split_size > 0 && split_size % 64 == 0;
}

CUtensorMap mla_kv_cache_map(cuda_ctx *c, const mla_attention_args *a, int box_rows, bool stream) {
    // Every box lies inside a block the sequence owns: the extent covers any int32 slot.
    const int d = a->L + a->R;
    return (stream ? tma_map_bf16_2d_stream : tma_map_bf16_2d)(c, a->kv_cache, 1L << 31, d, d, 64, box_rows,
                                                               "mla_attention", "kv cache");
}

// Shapes the tensor-core kernels do not take (mla_absorbed_generic.cu's instead).
static bool mla_generic_shape(const mla_attention_args *a) {
    return a->L % 64 || a->L > MLA_MAX_L || a->R % 16 || a->R <= 0;
}

// The grid's split count: the batch's longest sequence's (the scratch layout, never a row's order).
static int mla_grid_splits(const mla_attention_args *a, int split_size) {
    return (a->max_seq_len + split_size - 1) / split_size;
}

// The invariant set's split size, or the one a backend schedules itself (kv_split_size).
static int mla_split_size(const mla_attention_args *a) {
    return a->kv_split_size > 0 ? a->kv_split_size : MLA_SPLIT_SIZE;
}

void mla_attention_launch(cuda_ctx *c, const mla_attention_args *a, int split_size) {
    if (a->T <= 0 || a->H <= 0) return;
    if (mla_generic_shape(a)) {
        mla_attention_generic_launch(c, a, split_size);  // a shape choice, never a batch choice
        return;
    }
    if (((uintptr_t)a->kv_cache & 15u) != 0)
        invar_die(INVAR_EXIT_INPUT, "mla_attention: kv_cache must be 16-byte aligned");
    if (a->T > 65535) invar_die(INVAR_EXIT_INPUT, "mla_attention: T=%d exceeds 65535 query tokens", a->T);
    if (a->max_seq_len <= 0)
        invar_die(INVAR_EXIT_INPUT, "mla_attention: max_seq_len %d with %d query tokens", a->max_seq_len, a->T);
    mla_params p;
    p.a = *a;
    p.split_size = split_size;
    p.tile_in_block = a->block_size % MLA_TILE == 0 && split_size % MLA_TILE == 0;
    p.q_aligned = mla_q_aligned(a);
    p.nsplit = mla_grid_splits(a, split_size);
    size_t parts = (size_t)a->T * a->H * p.nsplit;
    char *scratch = (char *)cuda_scratch(c, SCRATCH_MLA_PARTIAL, parts * ((size_t)a->L * 4 + 8),
                                         "mla_attention split partials");
    p.o_part = (float *)scratch;
    p.ml_part = (float2 *)(scratch + parts * (size_t)a->L * 4);

    // On sm_90a: 64 heads a CTA or 16 (mla_absorbed_h64/h16_sm90.cu), a shape choice too.
    p.merged_max_n = 0;
    p.pairs_stored = false;
    const bool wgmma64 = mla_wgmma_supported(c, a, split_size);
    const bool wgmma16 = !wgmma64 && mla_wgmma16_supported(c, a, split_size);
    if (wgmma64)
        p.merged_max_n = mla_wgmma_split_launch(c, a, split_size, p.nsplit, p.o_part, p.ml_part);
    else if (wgmma16)
        p.merged_max_n =
            mla_wgmma16_split_launch(c, a, split_size, p.nsplit, p.o_part, p.ml_part, &p.pairs_stored);
    else
        mla_mma_split_launch(c, &p);
    if (p.nsplit <= p.merged_max_n) return;  // every token merged by the split kernel
    // The 16-head kernel's tokens of more than two splits merge in split pairs (MLA.md).
    const bool form = wgmma16 && !p.pairs_stored && p.nsplit > 2;
    const int token_parts = p.pairs_stored ? (p.nsplit + 1) / 2 : p.nsplit;
    mla_merge_launch(c, &p, wgmma64 || wgmma16, form, token_parts);
}

// A backend's own split size (kv_split_size) is taken: the backend owns its invariance.
// The order is the split size and the kernel that reduces a split (a shape choice: each has its
// tile and merge tree, MLA.md); noted on the host from the plan, before any launch.
void inv_cuda_mla_attention(ops_set *ops, const mla_attention_args *a) {
    if (ops->fingerprints && a->T > 0 && a->H > 0) {
        static const char *const kernels[] = {"generic", "wgmma", "wgmma16", "mma.sync"};
        const char *kernel = inv_cuda_mla_attention_kernel(ops, a);
        long which = 0;
        while (which < 3 && strcmp(kernels[which], kernel) != 0) which++;
        long order[] = {mla_split_size(a), which};
        long shape[] = {a->H, a->L, a->R, a->block_size};
        fingerprint_note(ops->fingerprints, "mla_attention", fingerprint_order(shape, 4),
                         fingerprint_order(order, 2), kernel);
    }
    mla_attention_launch(cuda_ctx_of(ops), a, mla_split_size(a));
}

// The same choices as inv_cuda_mla_attention makes through mla_attention_launch.
const char *inv_cuda_mla_attention_kernel(ops_set *ops, const mla_attention_args *a) {
    if (mla_generic_shape(a)) return "generic";
    const cuda_ctx *c = cuda_ctx_of(ops);
    if (mla_wgmma_supported(c, a, mla_split_size(a))) return "wgmma";
    return mla_wgmma16_supported(c, a, mla_split_size(a)) ? "wgmma16" : "mma.sync";
}

bool inv_cuda_mla_wgmma_merges(ops_set *ops, const mla_attention_args *a) {
    const cuda_ctx *c = cuda_ctx_of(ops);
    const int split_size = mla_split_size(a);
    return !mla_generic_shape(a) && a->max_seq_len > 0 && mla_wgmma_supported(c, a, split_size) &&
           mla_wgmma_merges_tokens(c, a, mla_grid_splits(a, split_size));
}

bool inv_cuda_mla_wgmma16_pairs(ops_set *ops, const mla_attention_args *a) {
    return a->max_seq_len > 0 && strcmp(inv_cuda_mla_attention_kernel(ops, a), "wgmma16") == 0 &&
           mla_wgmma16_pairs(cuda_ctx_of(ops), a, mla_grid_splits(a, mla_split_size(a)));
}
