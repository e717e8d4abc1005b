// kernels/moe_slices.h — moe_experts' and moe_combine's slices (ops.h, the `slices` fields) as
// one call a slice: the form a set without a one-call kernel for them takes, and the meaning a
// one-call kernel must match bit for bit.
#ifndef INVAR_KERNELS_MOE_SLICES_H
#define INVAR_KERNELS_MOE_SLICES_H

#include <stdbool.h>            // bool
#include <stddef.h>             // size_t
#include "../common/check.h"    // invar_die, INVAR_EXIT_INPUT
#include "ops.h"                // moe_experts_args, moe_combine_args, ops_set

// Slice s of a's slices as a call of its own (slices 0).
static inline moe_experts_args moe_experts_slice(const moe_experts_args *a, int s) {
    moe_experts_args b = *a;
    b.slices = 0;
    b.w_gate_up += (size_t)s * a->E * 2 * a->I * a->D;
    b.w_down += (size_t)s * a->E * a->D * a->I;
    b.out_f32 += (size_t)s * a->T * a->k * a->D;
    return b;
}

static inline moe_combine_args moe_combine_slice(const moe_combine_args *a, int s) {
    moe_combine_args b = *a;
    b.slices = 0;
    b.expert_out_f32 += (size_t)s * a->T * a->k * a->D;
    b.out_f32 += (size_t)s * a->T * a->D;
    return b;
}

// Exits (input error) when a asks for slices without the fp32 form they are defined for.
static inline void moe_slices_check(int slices, bool f32, const char *op) {
    if (slices > 1 && !f32)
        invar_die(INVAR_EXIT_INPUT, "%s: %d slices need the fp32 form (out_f32)", op, slices);
}

// False when a is one call (the caller computes it); else one(ops, slice) for each slice, true.
static inline bool moe_experts_by_slice(ops_set *ops, const moe_experts_args *a,
                                        void (*one)(ops_set *, const moe_experts_args *)) {
    if (a->slices <= 1) return false;
    moe_slices_check(a->slices, a->out_f32 != NULL, "moe_experts");
    for (int s = 0; s < a->slices; s++) {
        moe_experts_args b = moe_experts_slice(a, s);
        one(ops, &b);
    }
    return true;
}

static inline bool moe_combine_by_slice(ops_set *ops, const moe_combine_args *a,
                                        void (*one)(ops_set *, const moe_combine_args *)) {
    if (a->slices <= 1) return false;
    moe_slices_check(a->slices, a->out_f32 && a->expert_out_f32, "moe_combine");
    for (int s = 0; s < a->slices; s++) {
        moe_combine_args b = moe_combine_slice(a, s);
        one(ops, &b);
    }
    return true;
}

#endif
