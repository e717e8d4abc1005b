// kernels/f64/mla_attention.c — float64 oracle of the paged latent cache write and of absorbed
// MLA attention: a plain two-pass softmax over every key, in double.
#include <math.h>            // exp
#include <stdlib.h>          // free

#include "../bf16.h"         // bf16_to_float
#include "../../common/check.h"        // invar_malloc
#include "f64.h"             // f64_kv_cache_write, f64_mla_attention

void f64_kv_cache_write(double *cache, const bf16 *c_kv, long ld_c_kv, const bf16 *k_pe,
                        long ld_k_pe, const int32_t *slot, int T, int L, int R) {
    if (ld_c_kv == 0) ld_c_kv = L;
    if (ld_k_pe == 0) ld_k_pe = R;
    for (long t = 0; t < T; t++) {
        double *dst = cache + (long)slot[t] * (L + R);
        for (int i = 0; i < L; i++) dst[i] = bf16_to_float(c_kv[t * ld_c_kv + i]);
        for (int i = 0; i < R; i++) dst[L + i] = bf16_to_float(k_pe[t * ld_k_pe + i]);
    }
}

void f64_mla_attention(const mla_attention_args *a, double *out) {
    int L = a->L, R = a->R;
    int longest = 0;
    for (int t = 0; t < a->T; t++)
        longest = a->token_pos[t] + 1 > longest ? a->token_pos[t] + 1 : longest;
    double *score = invar_malloc((size_t)(longest > 0 ? longest : 1) * sizeof(double),
                                 "f64_mla_attention scores");
    for (long t = 0; t < a->T; t++) {
        int seq = a->token_seq[t], n = a->token_pos[t] + 1;
        for (long h = 0; h < a->H; h++) {
            const bf16 *q_lat = a->q_lat + t * a->ld_q_lat + h * L;
            const bf16 *q_pe = a->q_pe + t * a->ld_q_pe + h * a->head_stride_q_pe;
            double max = -INFINITY;
            for (int j = 0; j < n; j++) {
                int block = a->block_table[(long)seq * a->max_blocks_per_seq + j / a->block_size];
                const bf16 *kv =
                        a->kv_cache + ((long)block * a->block_size + j % a->block_size) * (L + R);
                double dot = 0.0;
                for (int i = 0; i < L; i++)
                    dot += (double)bf16_to_float(q_lat[i]) * bf16_to_float(kv[i]);
                for (int i = 0; i < R; i++)
                    dot += (double)bf16_to_float(q_pe[i]) * bf16_to_float(kv[L + i]);
                score[j] = (double)a->scale * dot;
                max = score[j] > max ? score[j] : max;
            }
            double sum = 0.0;
            for (int j = 0; j < n; j++) {
                score[j] = exp(score[j] - max);
                sum += score[j];
            }
            double *o = out + (t * a->H + h) * L;
            for (int i = 0; i < L; i++) o[i] = 0.0;
            for (int j = 0; j < n; j++) {
                int block = a->block_table[(long)seq * a->max_blocks_per_seq + j / a->block_size];
                const bf16 *kv =
                        a->kv_cache + ((long)block * a->block_size + j % a->block_size) * (L + R);
                double p = score[j] / sum;
                for (int i = 0; i < L; i++) o[i] += p * bf16_to_float(kv[i]);
            }
        }
    }
    free(score);
}
