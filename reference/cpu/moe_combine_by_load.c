// reference/cpu/moe_combine_by_load.c — the weighted sum of a token's expert outputs in the
// order a grouped kernel produces them: busiest expert of the batch first (ties by lower id).
// A token's order of summation depends on the other tokens' routing.
//
// With k = 2 the order cannot show: a two-term fp32 sum is commutative. It shows from k = 3.
#include "ref_cpu_ops.h"

#include <stdlib.h>                         // free

#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../kernels/check.h"            // invar_die, invar_calloc, invar_malloc
#include "../../kernels/cpu/cpu_ctx.h"      // cpu_ctx
#include "../../kernels/cpu/thread_pool.h"  // thread_pool_for

typedef struct {
    const moe_combine_args *a;
    const long *load;  // [E] tokens of the batch that chose each expert
} combine_job;

// Whether expert x is summed before expert y.
static int before(const long *load, int x, int y) {
    return load[x] != load[y] ? load[x] > load[y] : x < y;
}

static void combine_tokens(void *arg, long begin, long end) {
    const combine_job *jb = arg;
    const moe_combine_args *a = jb->a;
    int *order = invar_malloc((size_t)a->k * sizeof(int), "moe combine order (reference)");
    for (long t = begin; t < end; t++) {
        const int32_t *ids = a->topk_ids + t * a->k;
        for (int j = 0; j < a->k; j++) {  // insertion sort of the k slots by load
            int i = j;
            for (; i > 0 && before(jb->load, ids[j], ids[order[i - 1]]); i--) order[i] = order[i - 1];
            order[i] = j;
        }
        const float *w = a->topk_weights + t * a->k;
        for (int d = 0; d < a->D; d++) {
            float acc = 0.0f;
            for (int i = 0; i < a->k; i++) {
                int j = order[i];
                acc += w[j] * bf16_to_float(a->expert_out[(t * a->k + j) * a->D + d]);
            }
            a->out[t * a->D + d] = float_to_bf16(acc);
        }
    }
    free(order);
}

void ref_cpu_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (a->T < 0 || a->k <= 0 || a->D <= 0 || a->E <= 0)
        invar_die(INVAR_EXIT_INPUT, "moe_combine (reference cpu): bad shape T=%d k=%d D=%d E=%d",
                  a->T, a->k, a->D, a->E);
    long *load = invar_calloc((size_t)a->E, sizeof(long), "moe expert loads (reference)");
    for (long r = 0; r < (long)a->T * a->k; r++) {
        int e = a->topk_ids[r];
        if (e < 0 || e >= a->E)
            invar_die(INVAR_EXIT_INPUT, "moe_combine (reference cpu): token %ld chose expert %d of %d",
                      r / a->k, e, a->E);
        load[e]++;
    }
    cpu_ctx *ctx = ops->ctx;
    combine_job jb = {a, load};
    thread_pool_for(ctx->pool, a->T, combine_tokens, &jb);
    free(load);
}
