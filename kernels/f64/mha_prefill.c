// kernels/f64/mha_prefill.c — float64 oracle of plain multi-head prefill attention (with its
// log-sum-exp) and of the merge of two partial attention results.
#include <math.h>            // exp, log, INFINITY, isinf
#include <stdlib.h>          // free

#include "../bf16.h"         // bf16_to_float
#include "../../common/check.h"        // invar_malloc
#include "f64.h"             // f64_mha_prefill, f64_merge_attention

void f64_mha_prefill(const mha_prefill_args *a, double *out, double *lse) {
    int qh = a->nope + a->R, kvh = a->nope + a->v, longest = 1;
    for (int t = 0; t < a->T; t++)
        longest = a->key_end[t] - a->key_begin[t] > longest ? a->key_end[t] - a->key_begin[t]
                                                            : longest;
    double *score = invar_malloc((size_t)longest * sizeof(double), "f64_mha_prefill scores");
    for (long t = 0; t < a->T; t++)
        for (long h = 0; h < a->H; h++) {
            const bf16 *q = a->q + t * a->ld_q + h * qh;
            int begin = a->key_begin[t], n = a->key_end[t] - begin;
            double max = -INFINITY, sum = 0.0;
            for (int j = 0; j < n; j++) {
                const bf16 *kv = a->kv + (long)(begin + j) * a->ld_kv + h * kvh;
                const bf16 *k_pe = a->k_pe + (long)(begin + j) * a->ld_k_pe;
                double dot = 0.0;
                for (int i = 0; i < a->nope; i++)
                    dot += (double)bf16_to_float(q[i]) * bf16_to_float(kv[i]);
                for (int i = 0; i < a->R; i++)
                    dot += (double)bf16_to_float(q[a->nope + i]) * bf16_to_float(k_pe[i]);
                score[j] = (double)a->scale * dot;
                max = score[j] > max ? score[j] : max;
            }
            for (int j = 0; j < n; j++) sum += exp(score[j] - max);
            double *o = out + (t * a->H + h) * a->v;
            for (int i = 0; i < a->v; i++) o[i] = 0.0;
            for (int j = 0; j < n; j++) {
                const bf16 *val = a->kv + (long)(begin + j) * a->ld_kv + h * kvh + a->nope;
                double p = exp(score[j] - max) / sum;
                for (int i = 0; i < a->v; i++) o[i] += p * bf16_to_float(val[i]);
            }
            lse[t * a->H + h] = n > 0 ? max + log(sum) : -INFINITY;
        }
    free(score);
}

void f64_merge_attention(const merge_attention_args *a, double *out) {
    for (long t = 0; t < a->T; t++)
        for (long h = 0; h < a->H; h++) {
            double la = a->lse_a[t * a->H + h], lb = a->lse_b[t * a->H + h];
            double m = la > lb ? la : lb;
            double wa = isinf(la) && la < 0 ? 0.0 : exp(la - m);
            double wb = isinf(lb) && lb < 0 ? 0.0 : exp(lb - m);
            const bf16 *x = a->a + t * a->ld + h * a->v, *y = a->b + t * a->ld + h * a->v;
            double *o = out + (t * a->H + h) * a->v;
            for (int i = 0; i < a->v; i++)
                o[i] = wa + wb > 0.0
                        ? (wa * bf16_to_float(x[i]) + wb * bf16_to_float(y[i])) / (wa + wb)
                        : 0.0;
        }
}
