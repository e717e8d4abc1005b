// kernels/f64/gemm.c — float64 oracle of the GEMM y = x · wᵀ.
#include "../bf16.h"         // bf16_to_float
#include "f64.h"             // f64_gemm

void f64_gemm(const gemm_args *a, double *y) {
    long ldx = a->ldx ? a->ldx : a->K, ldw = a->ldw ? a->ldw : a->K;
    int batch = a->batch > 1 ? a->batch : 1;
    for (long b = 0; b < batch; b++)
        for (long m = 0; m < a->M; m++) {
            const bf16 *x = a->x + b * a->stride_x + m * ldx;
            for (long n = 0; n < a->N; n++) {
                const bf16 *w = a->w + b * a->stride_w + n * ldw;
                double sum = 0.0;
                for (int k = 0; k < a->K; k++)
                    sum += (double)bf16_to_float(x[k]) * bf16_to_float(w[k]);
                y[(b * a->M + m) * a->N + n] = sum;
            }
        }
}
