// kernels/cuda/mla_attention.cuh — what the op, its mma.sync split kernel and its merge kernel
// share: the parameters both kernels take and their launchers.
// The op: mla_attention.cu (kernel choice, split size and count, launches); split kernels:
// mla_absorbed_mma.cu (mma.sync, any device), mla_absorbed_h64_sm90.cu and
// mla_absorbed_h16_sm90.cu (sm_90a), mla_absorbed_generic.cu (odd shapes); the split-KV
// merge: mla_merge.cu (kernel) and mla_merge.cuh (its steps); the design: MLA.md.
#ifndef INVAR_KERNELS_CUDA_MLA_ATTENTION_CUH
#define INVAR_KERNELS_CUDA_MLA_ATTENTION_CUH

#include <cuda_runtime.h>   // float2

#include "cuda_ctx.cuh"     // cuda_ctx
#include "inv_cuda_ops.h"   // mla_attention_args

#define MLA_TILE 32          // positions per tile: 4 warps x n8
#define MLA_MAX_L 512        // output columns per warp L/8 <= 64 = 8 n8 fragments

struct mla_params {
    mla_attention_args a;
    int split_size, nsplit;  // nsplit: the grid's split count (scratch layout only)
    bool q_aligned;          // every 8-value piece of q_lat and q_pe is 16-byte aligned
    bool tile_in_block;      // every 32-position tile lies inside one cache block
    float *o_part;           // [T][H][nsplit][L] unnormalized outputs
    float2 *ml_part;         // [T][H][nsplit] (running max, running sum)
    int merged_max_n;        // tokens of at most this many splits: merged by the split kernel
    bool pairs_stored;       // partial k of a token is its split pair k (mla_merge.cuh), not split k
};

// The 16-head mma.sync split kernel (any device this build runs on).
void mla_mma_split_launch(cuda_ctx *c, const mla_params *p);
// The merge of the tokens the split kernel left: HINTED, partials a wgmma kernel stored with
// evict_last; FORM, split pairs formed here; token_parts, the grid's partials a token.
void mla_merge_launch(cuda_ctx *c, const mla_params *p, bool hinted, bool form, int token_parts);

#endif
