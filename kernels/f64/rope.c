// kernels/f64/rope.c — float64 oracle of RoPE (interleaved DeepSeek pairs or rotate_half).
#include "../bf16.h"         // bf16_to_float
#include "f64.h"             // f64_rope

void f64_rope(double *out, const bf16 *x, long ld_token, long ld_head, int T, int H, int R,
              const int32_t *pos, const float *cos, const float *sin, bool interleave) {
    int half = R / 2;
    for (long t = 0; t < T; t++)
        for (long h = 0; h < H; h++) {
            const bf16 *in = x + t * ld_token + h * ld_head;
            double *o = out + (t * H + h) * R;
            for (int i = 0; i < half; i++) {
                double c = cos[(long)pos[t] * half + i], s = sin[(long)pos[t] * half + i];
                double a = bf16_to_float(interleave ? in[2 * i] : in[i]);
                double b = bf16_to_float(interleave ? in[2 * i + 1] : in[i + half]);
                o[i] = a * c - b * s;
                o[i + half] = b * c + a * s;
            }
        }
}
