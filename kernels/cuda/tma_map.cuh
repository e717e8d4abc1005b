// kernels/cuda/tma_map.cuh — the tensor maps the Hopper kernels load with (TMA): a 2-D
// row-major bf16 matrix (or a batch of them) read in boxes, in the 128-byte swizzle layout
// wgmma reads.
#ifndef INVAR_KERNELS_CUDA_TMA_MAP_CUH
#define INVAR_KERNELS_CUDA_TMA_MAP_CUH

#include <cuda.h>         // CUtensorMap

#include "cuda_ctx.cuh"   // cuda_ctx

// [rows][cols] bf16 with a row stride of ld elements, boxes of box_cols x box_rows (box_cols *
// 2 bytes <= 128, the swizzle span). Dies naming op and what on a driver error.
CUtensorMap tma_map_bf16_2d(cuda_ctx *c, const void *base, long rows, long cols, long ld, int box_cols, int box_rows,
                            const char *op, const char *what);
// The same for a matrix streamed through: no L2 promotion, so a box's 128-byte row asks L2 for
// those 128 bytes, not the aligned 256 around them.
CUtensorMap tma_map_bf16_2d_stream(cuda_ctx *c, const void *base, long rows, long cols, long ld, int box_cols,
                                   int box_rows, const char *op, const char *what);
// `batch` such matrices, matrix b at base + b * batch_stride elements (a multiple of 8). Boxes
// hold one matrix.
CUtensorMap tma_map_bf16_3d(cuda_ctx *c, const void *base, long batch, long rows, long cols, long ld,
                            long batch_stride, int box_cols, int box_rows, const char *op, const char *what);

#endif
