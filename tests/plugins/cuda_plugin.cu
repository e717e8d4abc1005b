// tests/plugins/cuda_plugin.cu — the CUDA plugins of tests/test_plugin_cuda.sh (kernels/invar_plugin.h):
// an RMSNorm that reduces each row in one thread, in index order (so invariant), launched
//   cuda_rmsnorm_stream          on the stream each call names: must pass
//   cuda_rmsnorm_default_stream  on the default stream: it races with invar's non-blocking stream
//                                (inputs uploaded, outputs read there), and must be caught
// One source, one shared object per variant: the Makefile defines TEST_PLUGIN_<variant>.
#include <cuda_bf16.h>      // __nv_bfloat16 conversions
#include <cuda_runtime.h>   // cudaStream_t, cudaGetLastError

#include "../../kernels/invar_plugin.h"  // invar_plugin, INVAR_PLUGIN_ABI_VERSION

__device__ static float bf16_bits_to_float(bf16 h) { return __uint_as_float((unsigned)h << 16); }

__device__ static bf16 float_to_bf16_bits(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));  // nearest even, as kernels/bf16.h
}

// One thread a row: sum of squares in index order, then Hugging Face's two roundings.
__global__ void rmsnorm_rows(bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w, int M,
                             int D, float eps) {
    int m = blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= M) return;
    const bf16 *xr = x + m * ld_x;
    float sum = 0.0f;
    for (int k = 0; k < D; k++) {
        float v = bf16_bits_to_float(xr[k]);
        sum = __fadd_rn(sum, __fmul_rn(v, v));
    }
    float inv_rms = 1.0f / sqrtf(__fadd_rn(__fdiv_rn(sum, (float)D), eps));
    for (int i = 0; i < D; i++) {
        float normed = bf16_bits_to_float(float_to_bf16_bits(__fmul_rn(bf16_bits_to_float(xr[i]), inv_rms)));
        out[m * ld_out + i] = float_to_bf16_bits(__fmul_rn(bf16_bits_to_float(w[i]), normed));
    }
}

static void rmsnorm(const invar_plugin_call *c, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                    const bf16 *w, int M, int D, float eps) {
#ifdef TEST_PLUGIN_cuda_rmsnorm_default_stream
    cudaStream_t stream = 0;  // the bug under test
#else
    cudaStream_t stream = (cudaStream_t)c->stream;
#endif
    rmsnorm_rows<<<(M + 127) / 128, 128, 0, stream>>>(out, ld_out ? ld_out : D, x, ld_x ? ld_x : D, w, M, D,
                                                      eps);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) c->fail(c, cudaGetErrorString(err));
}

// Filled field by field: C++ has no designated initializers that may leave members out.
static invar_plugin make_table() {
    invar_plugin t = {};
    t.abi_version = INVAR_PLUGIN_ABI_VERSION;
    t.name = "test-cuda-rmsnorm";
    t.device = "cuda";
    t.invariant_claims = INVAR_OP_BIT(INVAR_OP_RMSNORM);
    t.rmsnorm = rmsnorm;
    return t;
}

extern "C" const invar_plugin *invar_plugin_entry(uint32_t host_abi_version) {
    (void)host_abi_version;
    static const invar_plugin table = make_table();
    return &table;
}
