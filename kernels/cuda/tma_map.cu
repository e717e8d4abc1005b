// kernels/cuda/tma_map.cu — tensor maps through the driver's cuTensorMapEncodeTiled (tma_map.cuh).
#include "tma_map.cuh"

#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled

// Out-of-range elements of a box read as zeros: the GEMM's K tail and row tail rely on it.
static CUtensorMap encode(cuda_ctx *c, const void *base, unsigned rank, const cuuint64_t *dims,
                          const cuuint64_t *strides, const cuuint32_t *box, CUtensorMapL2promotion promotion,
                          const char *op, const char *what) {
    CUtensorMap m;
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)c->tensor_map_encode)(
        &m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, (void *)base, dims, strides, box, elem_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        invar_die(INVAR_EXIT_SYSTEM, "cuda: %s: cuTensorMapEncodeTiled (%s, %llu x %llu x %llu, row stride %llu B) failed: error %d",
                  op, what, rank > 2 ? (unsigned long long)dims[2] : 1ull, (unsigned long long)dims[1],
                  (unsigned long long)dims[0], (unsigned long long)strides[0], (int)r);
    return m;
}

static CUtensorMap map_2d(cuda_ctx *c, const void *base, long rows, long cols, long ld, int box_cols, int box_rows,
                          CUtensorMapL2promotion promotion, const char *op, const char *what) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    return encode(c, base, 2, dims, strides, box, promotion, op, what);
}

CUtensorMap tma_map_bf16_2d(cuda_ctx *c, const void *base, long rows, long cols, long ld, int box_cols, int box_rows,
                            const char *op, const char *what) {
    return map_2d(c, base, rows, cols, ld, box_cols, box_rows, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, op, what);
}

CUtensorMap tma_map_bf16_2d_stream(cuda_ctx *c, const void *base, long rows, long cols, long ld, int box_cols,
                                   int box_rows, const char *op, const char *what) {
    return map_2d(c, base, rows, cols, ld, box_cols, box_rows, CU_TENSOR_MAP_L2_PROMOTION_NONE, op, what);
}

CUtensorMap tma_map_bf16_3d(cuda_ctx *c, const void *base, long batch, long rows, long cols, long ld,
                            long batch_stride, int box_cols, int box_rows, const char *op, const char *what) {
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)rows, (cuuint64_t)batch};
    // One matrix: any multiple of 16 bytes will do for the unused stride.
    const cuuint64_t strides[2] = {(cuuint64_t)ld * 2, (cuuint64_t)(batch > 1 ? batch_stride : ld * rows) * 2};
    const cuuint32_t box[3] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1};
    return encode(c, base, 3, dims, strides, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, op, what);
}
