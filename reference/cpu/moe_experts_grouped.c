// reference/cpu/moe_experts_grouped.c — routed experts as a grouped MoE kernel runs them:
// each expert's tokens are gathered into one matrix and go through the reference GEMM with
// M = that expert's token count, so the GEMM heuristic (gemm_split_k.c) picks a token's
// reduction order from how many other tokens of the batch chose the same expert.
#include "ref_cpu_ops.h"

#include <stdlib.h>                         // free
#include <string.h>                         // memcpy

#include "../../common/check.h"            // invar_die, invar_malloc
#include "../../kernels/order_log.h"        // order_log_note
#include "ref_cpu_set.h"                    // ref_cpu_policy_of
#include "../../kernels/cpu/inv_cpu.h"        // inv_cpu_pool, inv_cpu_threads
#include "../../kernels/moe_slices.h"       // moe_experts_by_slice

void ref_cpu_moe_experts(ops_set *ops, const moe_experts_args *a) {
    if (moe_experts_by_slice(ops, a, ref_cpu_moe_experts)) return;
    if (a->T < 0 || a->k <= 0 || a->E <= 0 || a->D <= 0 || a->I <= 0)
        invar_die(INVAR_EXIT_INPUT, "moe_experts (reference cpu): bad shape T=%d k=%d E=%d D=%d I=%d",
                  a->T, a->k, a->E, a->D, a->I);
    long rows = (long)a->T * a->k;
    if (rows == 0) return;
    for (long r = 0; r < rows; r++)
        if (a->topk_ids[r] < 0 || a->topk_ids[r] >= a->E)
            invar_die(INVAR_EXIT_INPUT, "moe_experts (reference cpu): token %ld chose expert %d of %d",
                      r / a->k, a->topk_ids[r], a->E);

    const int D = a->D, I = a->I;
    long *group = invar_malloc((size_t)rows * sizeof(long), "moe expert rows (reference)");
    bf16 *xg = invar_malloc((size_t)rows * D * sizeof(bf16), "moe gathered x (reference)");
    bf16 *gu = invar_malloc((size_t)rows * 2 * I * sizeof(bf16), "moe gate_up (reference)");
    bf16 *act = invar_malloc((size_t)rows * I * sizeof(bf16), "moe activation (reference)");
    // The fp32 form (out_f32) keeps the down projection's sums unrounded.
    const size_t down_elem = a->out_f32 ? sizeof(float) : sizeof(bf16);
    char *down = invar_malloc((size_t)rows * D * down_elem, "moe down (reference)");

    for (int e = 0; e < a->E; e++) {
        // Gather the expert's rows (output rows t*k + j), in token order.
        int n = 0;
        for (long r = 0; r < rows; r++)
            if (a->topk_ids[r] == e) {
                group[n] = r;
                memcpy(xg + (long)n * D, a->x + (r / a->k) * D, (size_t)D * sizeof(bf16));
                n++;
            }
        if (n == 0) continue;

        // The plans come from the expert's load: recorded as this op's choice, not the GEMM's.
        const ref_cpu_policy *policy = ref_cpu_policy_of(ops);
        ref_gemm_plan up_plan = policy->gemm_plan(n, 2 * I, D, inv_cpu_threads(ops));
        ref_gemm_plan down_plan = policy->gemm_plan(n, D, I, inv_cpu_threads(ops));
        order_log_note(ops->orders, ORDER_MOE_EXPERTS, (uint64_t)D << 32 | (uint32_t)I,
                       ref_gemm_plan_key(up_plan) << 16 | ref_gemm_plan_key(down_plan));
        gemm_args up = {.y = gu, .x = xg, .w = a->w_gate_up + (long)e * 2 * I * D,
                        .M = n, .N = 2 * I, .K = D};
        ref_cpu_gemm_planned(ops, &up, up_plan);
        ops->silu_mul(ops, act, gu, n, I);  // the invariant set's, by nature invariant
        gemm_args dn = {.y = down, .y_f32 = a->out_f32 != NULL, .x = act, .w = a->w_down + (long)e * D * I,
                        .M = n, .N = D, .K = I};
        ref_cpu_gemm_planned(ops, &dn, down_plan);

        char *to = a->out_f32 ? (char *)a->out_f32 : (char *)a->out;
        for (int i = 0; i < n; i++)
            memcpy(to + group[i] * D * (long)down_elem, down + (long)i * D * (long)down_elem, (size_t)D * down_elem);
    }
    free(group);
    free(xg);
    free(gu);
    free(act);
    free(down);
}
