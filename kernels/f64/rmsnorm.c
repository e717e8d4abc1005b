// kernels/f64/rmsnorm.c — float64 oracle of RMSNorm.
#include <math.h>            // sqrt

#include "../bf16.h"         // bf16_to_float
#include "f64.h"             // f64_rmsnorm

void f64_rmsnorm(double *out, const bf16 *x, long ld_x, const bf16 *w, int M, int D, double eps) {
    if (ld_x == 0) ld_x = D;
    for (long m = 0; m < M; m++) {
        const bf16 *row = x + m * ld_x;
        double sum2 = 0.0;
        for (int d = 0; d < D; d++) sum2 += (double)bf16_to_float(row[d]) * bf16_to_float(row[d]);
        double inv_rms = 1.0 / sqrt(sum2 / D + eps);
        for (int d = 0; d < D; d++)
            out[m * D + d] = (double)bf16_to_float(w[d]) * bf16_to_float(row[d]) * inv_rms;
    }
}
