// kernels/cuda/tma_map.cu — tensor maps through the driver's cuTensorMapEncodeTiled (tma_map.cuh).
#include "tma_map.cuh"

#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled

CUtensorMap tma_map_bf16_2d(cuda_ctx *c, const void *base, long rows, long cols, long ld, int box_cols, int box_rows,
                            const char *op, const char *what) {
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t elem_strides[2] = {1, 1};
    // Out-of-range elements of a box read as zeros: the GEMM's K tail and row tail rely on it.
    CUresult r = ((PFN_cuTensorMapEncodeTiled_v12000)c->tensor_map_encode)(
        &m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, elem_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        invar_die(INVAR_EXIT_SYSTEM, "cuda: %s: cuTensorMapEncodeTiled (%s, %ld x %ld, ld %ld) failed: error %d", op,
                  what, rows, cols, ld, (int)r);
    return m;
}
