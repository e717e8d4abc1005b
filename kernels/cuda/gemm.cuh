// kernels/cuda/gemm.cuh — the invariant tensor-core GEMM's launcher, shared by the dense GEMM
// op and the MoE expert GEMMs (which gather and scatter rows).
#ifndef INVAR_KERNELS_CUDA_GEMM_CUH
#define INVAR_KERNELS_CUDA_GEMM_CUH

#include <stdint.h>        // int32_t
#include "../ops.h"        // bf16
#include "cuda_ctx.cuh"    // cuda_ctx

// y[z][m][n] = sum_k x[z][m][k] * w[z][n][k] for z < batch. In grouped mode
// (group_offsets != NULL) z is a group (an expert): its rows are the compact indices
// group_offsets[z] .. group_offsets[z+1] (device memory), x's row for compact row i is
// x_rows[i] (or i), y's row y_rows[i] (or i), and only w moves by stride_w per group.
typedef struct {
    void *y;
    bool y_f32;
    const bf16 *x;
    const bf16 *w;
    int M, N, K;                 // grouped: M = the most rows one group can have
    long ldx, ldy, ldw;
    long stride_x, stride_y, stride_w;
    const int32_t *group_offsets;
    const int32_t *x_rows;
    const int32_t *y_rows;
} gemm_problem;

// batch: products (dense) or groups (grouped). Every configuration the launcher may pick
// reduces each element in the same order (see gemm.cu), so the choice may depend on shape.
void gemm_launch(cuda_ctx *c, const gemm_problem *p, int batch, const char *op);

#endif
