// engine/tp_slices.h — TP-size invariance: every reduction tensor parallelism splits follows
// one order over TP_SLICES = 8 fixed slices, whatever the group's size T.
//
// Slice s is rank s's part at T = 8 (tp_part_make(cfg, s, 8)); at T dividing 8, rank r holds
// slices 8r/T .. 8(r+1)/T - 1, exactly its own part (floor(n·r/T) = floor(n·(8r/T)/8)). A
// row-parallel layer (attention output, dense MLP down, the MoE block) computes one fp32 partial
// per slice — for the MoE block the routed experts' weighted sum plus the shared experts', never
// rounded — then sums the 8 partials in one fixed binary tree, ((P0+P1)+(P2+P3))+((P4+P5)+(P6+P7)):
// a rank sums the levels inside its own slices, the all-reduce (ops.h's all_reduce_f32_tree)
// the levels above, and the result is rounded to bf16 once. Column-parallel GEMMs (q, kv_b,
// gate/up, lm_head) stay whole: they need a kernel whose output reduces over K alike whatever the
// rank's N, as the CPU GEMM's does (one dot over K an output); routing, norms, RoPE and attention
// are per token or per head. Kernel sets declare the path (ops_set.tp_size_invariant).
#ifndef INVAR_ENGINE_TP_SLICES_H
#define INVAR_ENGINE_TP_SLICES_H

#include <stdbool.h>           // bool
#include "../kernels/ops.h"    // ops_set, tp_comm, bf16
#include "model_config.h"      // model_config
#include "tp_part.h"           // tp_part, tp_range

#define TP_SLICES 8

// This rank's slices, each range relative to the rank's own part (its first slice begins at 0).
typedef struct {
    int n;                            // slices this rank holds: 8 / T
    tp_range heads[TP_SLICES];        // of the rank's heads
    tp_range inter[TP_SLICES];        // of the rank's dense intermediate columns
    tp_range moe_inter[TP_SLICES];    // of the rank's expert intermediate columns (the shared
                                      // experts' are n_shared times these)
} tp_slices;

// The slices of rank `part`; false (why in err, naming the field) when T does not divide 8
// or a sharded count is below 8.
bool tp_slices_make(const model_config *cfg, const tp_part *part, tp_slices *out, char *err,
                    int err_len);

// True when the n ranges are one count each, one after another from 0: then the slices' GEMMs
// run as one batched product (a batch entry reduces as its own call would, by the GEMM's
// contract), which saves 8 launches a layer at T = 1.
bool tp_slices_uniform(const tp_range *ranges, int n);

// Slices a one-call MoE form takes at once: n when n slices' fp32 rows (bytes_per_slice each)
// fit `budget` bytes, else the largest power of two that does (at least 1), so that calls of
// that many cover the n slices exactly.
int tp_slices_per_call(int n, double bytes_per_slice, double budget);

// A gated MLP's [2I, D] gate/up weight (gate rows, then up rows) cut into one [2c, D] copy
// per slice of `ranges` (I = the sum of their counts times `mult`, ranges scaled by `mult`),
// out[s] each slice's copy on the set's device; `experts` such matrices one after another
// ([E, 2I, D] in, [E, 2c, D] out per slice). The slices' copies are one allocation, slice
// after slice (out[0] is what to release), so uniform slices are a strided batch.
void tp_slices_gate_up(ops_set *o, bf16 **out, const bf16 *gate_up, const tp_range *ranges,
                       int n, int mult, int I, int D, int experts);
// A down weight [experts, D, I] cut into one [experts, D, c] copy per slice, allocated likewise
// (one allocation, out[0] to release).
void tp_slices_down(ops_set *o, bf16 **out, const bf16 *down, const tp_range *ranges, int n,
                    int I, int D, int experts);

// parts[s] (n slices of len fp32 values, one after another) summed: the tree's levels over this
// rank's slices (in one sum_slices_f32 call where the set has it, unless pairs: as add_f32
// pairs), then all_reduce_f32_tree over the group (comm NULL: one rank), then rounded into out
// (bf16, len values). On return parts[0] holds the fp32 sum.
void tp_slices_finish(ops_set *o, tp_comm *comm, float *parts, int n, long len, bf16 *out,
                      bool pairs);

#endif
