// kernels/cpu/lanes.h — the one fp32 reduction order of the invariant CPU set: 8 lanes.
//
// A sum over k is split into 8 fp32 accumulators, lane l holding the terms with k ≡ l (mod 8)
// in increasing k. The lanes are combined by one fixed tree,
//     ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)),
// and the K mod 8 tail terms are then added one at a time in increasing k. Every reducing op of
// the set (gemm, rmsnorm, attention scores, router logits, log-sum-exp) uses this order, so a
// result depends on K alone: never on M, on tiling, on which thread computes it.
//
// The lanes are GCC/Clang vector extensions of 4 floats (one SSE register on any x86-64), two
// per 8 lanes: the vectorization is part of the arithmetic's definition rather than a
// compiler's choice, so nothing needs -ffast-math and nothing is reassociated. A product and
// its accumulation are always separate statements, so no compiler contracts them into an FMA
// (C allows contraction only within one expression).
#ifndef INVAR_KERNELS_CPU_LANES_H
#define INVAR_KERNELS_CPU_LANES_H

#include <stdint.h>      // uint16_t, uint32_t
#include <string.h>      // memcpy
#include "../bf16.h"     // bf16_to_float
#include "../ops.h"      // bf16

typedef float v4f __attribute__((vector_size(16)));
enum { LANES = 8 };  // fp32 lanes of every dot and sum here, as order fingerprints name it
typedef uint16_t v4u16 __attribute__((vector_size(8)));
typedef uint32_t v4u32 __attribute__((vector_size(16)));

// Unaligned loads and stores (memcpy compiles to one movups).
static inline v4f v4f_load(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void v4f_store(float *p, v4f v) { memcpy(p, &v, sizeof v); }

// 4 bf16 -> 4 fp32, exactly: widen and shift into the top half.
static inline v4f v4f_load_bf16(const bf16 *p) {
    v4u16 h;
    memcpy(&h, p, sizeof h);
    v4u32 u = __builtin_convertvector(h, v4u32) << 16;
    v4f f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline v4f v4f_splat(float x) { return (v4f){x, x, x, x}; }

// The fixed tree over lanes 0-3 (lo) and 4-7 (hi).
static inline float lanes_combine(v4f lo, v4f hi) {
    v4f s = lo + hi;                      // a0+a4, a1+a5, a2+a6, a3+a7
    return (s[0] + s[2]) + (s[1] + s[3]);
}

// The same tree over 8 scalar lanes, for sums whose terms are not vectorizable (expf).
static inline float lanes_combine8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// sum_k x[k] * y[k], fp32 x and fp32 y.
static inline float lanes_dot_f32(const float *x, const float *y, int K) {
    v4f lo = v4f_splat(0.0f), hi = v4f_splat(0.0f);
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        v4f p_lo = v4f_load(x + k) * v4f_load(y + k);
        v4f p_hi = v4f_load(x + k + 4) * v4f_load(y + k + 4);
        lo += p_lo;
        hi += p_hi;
    }
    float sum = lanes_combine(lo, hi);
    for (; k < K; k++) {
        float p = x[k] * y[k];
        sum += p;
    }
    return sum;
}

// sum_k x[k] * w[k], fp32 x and bf16 w; bitwise equal to lanes_dot_f32 on w's fp32 values.
static inline float lanes_dot_f32_bf16(const float *x, const bf16 *w, int K) {
    v4f lo = v4f_splat(0.0f), hi = v4f_splat(0.0f);
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        v4f p_lo = v4f_load(x + k) * v4f_load_bf16(w + k);
        v4f p_hi = v4f_load(x + k + 4) * v4f_load_bf16(w + k + 4);
        lo += p_lo;
        hi += p_hi;
    }
    float sum = lanes_combine(lo, hi);
    for (; k < K; k++) {
        float p = x[k] * bf16_to_float(w[k]);
        sum += p;
    }
    return sum;
}

// x[k] -> fp32, n values.
static inline void lanes_bf16_to_f32(float *dst, const bf16 *src, long n) {
    long i = 0;
    for (; i + 4 <= n; i += 4) v4f_store(dst + i, v4f_load_bf16(src + i));
    for (; i < n; i++) dst[i] = bf16_to_float(src[i]);
}

#endif
