// kernels/f64/all_reduce.c — the float64 oracle of the all-reduce (kernels/f64/f64.h).
#include "f64.h"             // f64_all_reduce

#include "../bf16.h"         // bf16_to_float

void f64_all_reduce(double *out, const bf16 *const *ins, int T, long n) {
    for (long i = 0; i < n; i++) {
        double sum = 0.0;
        for (int r = 0; r < T; r++) sum += (double)bf16_to_float(ins[r][i]);
        out[i] = sum;
    }
}
