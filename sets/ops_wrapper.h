// sets/ops_wrapper.h — a kernel set that wraps another to watch its calls (the op tap, the
// profiler): memory moves straight through to the inner set, so a wrapper writes only the
// compute ops it observes.
#ifndef INVAR_SETS_OPS_WRAPPER_H
#define INVAR_SETS_OPS_WRAPPER_H

#include "../kernels/ops.h"  // ops_set

typedef struct {
    ops_set base;     // first: the engine calls through it, and a wrapper's own struct starts here
    ops_set *inner;
} ops_wrapper;

// w->base becomes a copy of *inner (name, device, flags, order log, ctx: what the engine reads
// stays the inner set's) whose memory ops (alloc, release, upload, download, sync, and the host
// memory ops where the inner set has them) and TP-size invariance's steps (add_f32,
// round_to_bf16, sum_slices_f32, all_reduce_f32_tree) call the inner set's.
void ops_wrapper_init(ops_wrapper *w, ops_set *inner);

#endif
