// kernels/f64/accuracy.c — distances between a kernel's output and the float64 oracle.
#include <math.h>            // sqrt, fabs, isnan, isfinite, INFINITY

#include "../bf16.h"         // bf16_to_float
#include "f64.h"             // f64_rel_l2_*, f64_count_nan_*

static double rel_l2(double diff2, double ref2) {
    return ref2 > 0.0 ? sqrt(diff2 / ref2) : sqrt(diff2);
}

double f64_rel_l2_bf16(const bf16 *out, const double *ref, long n) {
    double diff2 = 0.0, ref2 = 0.0;
    for (long i = 0; i < n; i++) {
        double v = bf16_to_float(out[i]);
        if (!isfinite(v)) return INFINITY;
        diff2 += (v - ref[i]) * (v - ref[i]);
        ref2 += ref[i] * ref[i];
    }
    return rel_l2(diff2, ref2);
}

double f64_rel_l2_f32(const float *out, const double *ref, long n) {
    double diff2 = 0.0, ref2 = 0.0;
    for (long i = 0; i < n; i++) {
        double v = out[i];
        if (!isfinite(v)) return INFINITY;
        diff2 += (v - ref[i]) * (v - ref[i]);
        ref2 += ref[i] * ref[i];
    }
    return rel_l2(diff2, ref2);
}

double f64_max_abs_err_f32(const float *out, const double *ref, long n) {
    double worst = 0.0;
    for (long i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        double e = fabs((double)out[i] - ref[i]);
        worst = e > worst ? e : worst;
    }
    return worst;
}

long f64_count_nan_bf16(const bf16 *x, long n) {
    long count = 0;
    for (long i = 0; i < n; i++) count += isnan(bf16_to_float(x[i])) ? 1 : 0;
    return count;
}

long f64_count_nan_f32(const float *x, long n) {
    long count = 0;
    for (long i = 0; i < n; i++) count += isnan(x[i]) ? 1 : 0;
    return count;
}
