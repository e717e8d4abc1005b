// kernels/f64/elementwise.c — float64 oracle of embedding, residual_add, silu_mul.
#include <math.h>            // exp

#include "../bf16.h"         // bf16_to_float
#include "f64.h"             // f64_embedding, f64_residual_add, f64_silu_mul

void f64_embedding(double *out, const bf16 *table, const int32_t *ids, int T, int D) {
    for (long t = 0; t < T; t++)
        for (long d = 0; d < D; d++) out[t * D + d] = bf16_to_float(table[(long)ids[t] * D + d]);
}

void f64_residual_add(double *out, const bf16 *x, const bf16 *y, long n) {
    for (long i = 0; i < n; i++) out[i] = (double)bf16_to_float(x[i]) + bf16_to_float(y[i]);
}

void f64_silu_mul(double *out, const bf16 *gate_up, int M, int I) {
    for (long m = 0; m < M; m++)
        for (long i = 0; i < I; i++) {
            double g = bf16_to_float(gate_up[m * 2 * I + i]),
                   up = bf16_to_float(gate_up[m * 2 * I + I + i]);
            out[m * I + i] = g / (1.0 + exp(-g)) * up;
        }
}
