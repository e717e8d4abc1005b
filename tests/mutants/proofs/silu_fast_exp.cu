// tests/mutants/proofs/silu_fast_exp.cu — the argument behind cuda-silu-fast-exp-large-m's
// `equivalent:` line, as a program: every one of the 65,536 bf16 gate values goes through the
// SiLU of kernels/cuda/elementwise.cu twice, once with expf (the kernel) and once with __expf (the
// mutant), and the bf16-rounded results are compared bit for bit. The output is
// bf16_round(silu(g)) * u rounded to bf16, so equal bf16_round(silu(g)) for every g means equal
// outputs for every (g, u). Built with the project's nvcc flags (no fast math):
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Ikernels \
//        tests/mutants/proofs/silu_fast_exp.cu -o /tmp/silu_fast_exp && /tmp/silu_fast_exp
// Exit 0 and "0 of 65536 differ" when the mutant cannot change a bit; 1 otherwise, 2 on a CUDA error.
#include <cuda_runtime.h>   // cudaMalloc, cudaMemcpy
#include <stdio.h>          // printf, fprintf
#include <stdint.h>         // uint16_t

#include "bf16.h"           // bf16_to_float, float_to_bf16

__global__ void silu_both_ways(uint16_t *exact, uint16_t *fast) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= 65536) return;
    float g = bf16_to_float((uint16_t)h);
    exact[h] = float_to_bf16(g / (1.0f + expf(-g)));
    fast[h] = float_to_bf16(g / (1.0f + __expf(-g)));
}

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "silu_fast_exp: %s: %s\n", #call, cudaGetErrorString(e_)); return 2; } } while (0)

int main(void) {
    static uint16_t exact[65536], fast[65536];
    uint16_t *d_exact, *d_fast;
    CHECK(cudaMalloc(&d_exact, sizeof exact));
    CHECK(cudaMalloc(&d_fast, sizeof fast));
    silu_both_ways<<<256, 256>>>(d_exact, d_fast);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(exact, d_exact, sizeof exact, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(fast, d_fast, sizeof fast, cudaMemcpyDeviceToHost));
    int differ = 0;
    for (int h = 0; h < 65536; h++) {
        if (exact[h] == fast[h]) continue;
        if (differ++ < 10)
            printf("gate 0x%04x (%.9g): expf gives 0x%04x, __expf 0x%04x\n", h, (double)bf16_to_float((uint16_t)h),
                   exact[h], fast[h]);
    }
    printf("%d of 65536 bf16 gates differ after bf16 rounding (expf vs __expf)\n", differ);
    return differ ? 1 : 0;
}
