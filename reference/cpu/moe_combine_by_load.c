// reference/cpu/moe_combine_by_load.c — the weighted sum of a token's expert outputs in the
// order a grouped kernel produces them: busiest expert of the batch first (ties by lower id).
// A token's order of summation depends on the other tokens' routing.
//
// With k = 2 the order cannot show: a two-term fp32 sum is commutative. It shows from k = 3.
// The adversarial set also contracts the sum into fused multiply-adds when the token's
// busiest expert has an odd load (a kernel specialised per load shape), which shows at k = 2.
#include "ref_cpu_ops.h"

#include <math.h>                           // fmaf
#include <stdlib.h>                         // free

#include "../../kernels/bf16.h"             // bf16_to_float, float_to_bf16
#include "../../common/check.h"            // invar_die, invar_calloc, invar_malloc
#include "../../common/thread_pool.h"  // thread_pool_for
#include "../../kernels/order_log.h"        // order_log_note
#include "ref_cpu_set.h"                    // ref_cpu_policy_of
#include "../../kernels/cpu/inv_cpu.h"        // inv_cpu_pool, inv_cpu_threads
#include "../../kernels/moe_slices.h"       // moe_combine_by_slice

typedef struct {
    const moe_combine_args *a;
    const long *load;  // [E] tokens of the batch that chose each expert
    bool fuse_by_load;
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
        bool fuse = jb->fuse_by_load && jb->load[ids[order[0]]] % 2 == 1;
        for (int d = 0; d < a->D; d++) {
            float acc = 0.0f;
            for (int i = 0; i < a->k; i++) {
                int j = order[i];
                long at = (t * a->k + j) * a->D + d;
                float e = a->out_f32 ? a->expert_out_f32[at] : bf16_to_float(a->expert_out[at]);
                if (fuse) acc = fmaf(w[j], e, acc);
                else acc += w[j] * e;
            }
            if (a->out_f32) a->out_f32[t * a->D + d] = acc;  // the fp32 form: the same order, unrounded
            else a->out[t * a->D + d] = float_to_bf16(acc);
        }
    }
    free(order);
}

// The order-log key: the experts ranked by load, and with fusing the loads' parities. A plain
// sum of two terms has one result in any order, so it is one order whatever the loads.
static uint64_t combine_order_key(const moe_combine_args *a, const long *load, bool fuse) {
    if (!fuse && a->k <= 2) return 0;
    uint64_t key = fuse;
    for (int e = 0; e < a->E; e++) {
        int rank = 0;  // experts summed before e
        for (int q = 0; q < a->E; q++) rank += before(load, q, e);
        key = key * 1000003u + (uint64_t)rank * 2u + (uint64_t)(fuse && load[e] % 2);
    }
    return key;
}

void ref_cpu_moe_combine_by_load(ops_set *ops, const moe_combine_args *a, bool fuse_by_load) {
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
    order_log_note(ops->orders, ORDER_MOE_COMBINE, (uint64_t)a->D << 8 | (uint64_t)a->k,
                   combine_order_key(a, load, fuse_by_load));
    combine_job jb = {a, load, fuse_by_load};
    thread_pool_for(inv_cpu_pool(ops), a->T, combine_tokens, &jb);
    free(load);
}

void ref_cpu_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, ref_cpu_moe_combine)) return;
    ref_cpu_moe_combine_by_load(ops, a, false);
}
