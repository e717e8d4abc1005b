// kernels/cuda/mla_attention.cuh — the op's parameters for its mma.sync and merge kernels.
// Launcher mla_attention.cu, mma.sync mla_absorbed_mma.cu, merge mla_merge.cu, generic mla_absorbed_generic.cu.
#ifndef INVAR_KERNELS_CUDA_MLA_ATTENTION_CUH
#define INVAR_KERNELS_CUDA_MLA_ATTENTION_CUH

#include <cuda_runtime.h>   // float2

#include "cuda_ctx.cuh"     // cuda_ctx
#include "inv_cuda_ops.h"   // mla_attention_args

#define MLA_TILE 32          // the mma.sync kernel's positions a tile
#define MLA_MAX_L 512        // and its largest L

struct mla_params {
    mla_attention_args a;
    int split_size, nsplit;  // nsplit: the grid's (scratch layout only)
    bool q_aligned;
    bool tile_in_block;      // every tile inside one cache block
    float *o_part;           // [T][H][nsplit][L]
    float2 *ml_part;         // [T][H][nsplit] (max, sum)
    int merged_max_n;        // tokens of at most this many splits: merged by the split kernel
    bool pairs_stored;       // partial k is split pair k
};

void mla_mma_split_launch(cuda_ctx *c, const mla_params *p);
// form: split pairs formed by the merge.
void mla_merge_launch(cuda_ctx *c, const mla_params *p, bool hinted, bool form, int token_parts);

#endif
