// engine/tp_slices.c — TP-size invariance's slices (engine/tp_slices.h).
#include "tp_slices.h"

#include <stdio.h>                 // snprintf
#include <stdlib.h>                // free
#include <string.h>                // memcpy

#include "../common/check.h"       // invar_malloc

bool tp_slices_make(const model_config *cfg, const tp_part *part, tp_slices *out, char *err,
                    int err_len) {
    int T = part->size;
    if (T < 1 || TP_SLICES % T != 0) {
        snprintf(err, (size_t)err_len, "tensor_parallel %d does not divide %d: TP-size "
                 "invariance sums %d fixed slices", T, TP_SLICES, TP_SLICES);
        return false;
    }
    *out = (tp_slices){.n = TP_SLICES / T};
    for (int i = 0; i < out->n; i++) {
        tp_part s;
        char why[160];
        if (!tp_part_make(cfg, part->rank * out->n + i, TP_SLICES, &s, why, sizeof why)) {
            snprintf(err, (size_t)err_len, "TP-size invariance needs %d slices: %s", TP_SLICES,
                     why);
            return false;
        }
        out->heads[i] = (tp_range){s.heads.begin - part->heads.begin, s.heads.count};
        out->inter[i] = (tp_range){s.inter.begin - part->inter.begin, s.inter.count};
        out->moe_inter[i] = (tp_range){s.moe_inter.begin - part->moe_inter.begin,
                                       s.moe_inter.count};
    }
    return true;
}

bool tp_slices_uniform(const tp_range *ranges, int n) {
    for (int s = 0; s < n; s++)
        if (ranges[s].count != ranges[0].count || ranges[s].begin != s * ranges[0].count)
            return false;
    return true;
}

int tp_slices_per_call(int n, double bytes_per_slice, double budget) {
    int g = n;
    while (g > 1 && g * bytes_per_slice > budget) g /= 2;
    return g;
}

void tp_slices_gate_up(ops_set *o, bf16 **out, const bf16 *gate_up, const tp_range *ranges,
                       int n, int mult, int I, int D, int experts) {
    size_t whole = (size_t)experts * 2 * I * D;
    bf16 *host = invar_malloc(whole * sizeof(bf16), "TP slices: gate/up weights");
    o->download(o, host, gate_up, whole * sizeof(bf16));
    bf16 *cut = invar_malloc(whole * sizeof(bf16), "TP slices: the slices' gate/up");
    bf16 *dev = o->alloc(o, whole * sizeof(bf16), "TP slices: gate/up weights");
    size_t at = 0;  // elements of cut written, the slices one after another
    for (int s = 0; s < n; s++) {
        int b = ranges[s].begin * mult, c = ranges[s].count * mult;
        out[s] = dev + at;
        for (int e = 0; e < experts; e++) {
            const bf16 *src = host + (size_t)e * 2 * I * D;
            bf16 *dst = cut + at + (size_t)e * 2 * c * D;
            memcpy(dst, src + (size_t)b * D, (size_t)c * D * sizeof(bf16));                // gate
            memcpy(dst + (size_t)c * D, src + (size_t)(I + b) * D, (size_t)c * D * sizeof(bf16)); // up
        }
        at += (size_t)experts * 2 * c * D;
    }
    o->upload(o, dev, cut, at * sizeof(bf16));
    free(cut);
    free(host);
}

void tp_slices_down(ops_set *o, bf16 **out, const bf16 *down, const tp_range *ranges, int n,
                    int I, int D, int experts) {
    size_t whole = (size_t)experts * D * I;
    bf16 *host = invar_malloc(whole * sizeof(bf16), "TP slices: down weights");
    o->download(o, host, down, whole * sizeof(bf16));
    bf16 *cut = invar_malloc(whole * sizeof(bf16), "TP slices: the slices' down");
    bf16 *dev = o->alloc(o, whole * sizeof(bf16), "TP slices: down weights");
    size_t at = 0;
    for (int s = 0; s < n; s++) {
        int b = ranges[s].begin, c = ranges[s].count;
        out[s] = dev + at;
        for (long row = 0; row < (long)experts * D; row++)
            memcpy(cut + at + row * c, host + row * I + b, (size_t)c * sizeof(bf16));
        at += (size_t)experts * D * c;
    }
    o->upload(o, dev, cut, at * sizeof(bf16));
    free(cut);
    free(host);
}

void tp_slices_finish(ops_set *o, tp_comm *comm, float *parts, int n, long len, bf16 *out,
                      bool pairs) {
    // The tree's lower levels: slices i and i + stride, strides 1, 2, 4 within this rank (one
    // call where the set sums the tree at once).
    if (o->sum_slices_f32 && !pairs)
        o->sum_slices_f32(o, parts, n, len);
    else
        for (int stride = 1; stride < n; stride *= 2)
            for (int i = 0; i + stride < n; i += 2 * stride)
                o->add_f32(o, parts + (long)i * len, parts + (long)(i + stride) * len, len);
    if (comm) o->all_reduce_f32_tree(o, comm, parts, len);
    o->round_to_bf16(o, out, parts, len);
}
