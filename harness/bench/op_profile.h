// harness/bench/op_profile.h — where a kernel set's time goes: a wrapper set that times every op call
// of the set it wraps, keyed by op and shape ("gemm 3072x2048 M=128"), for `invar bench
// --profile`. CUDA sets are timed by events on their stream (device time between the events
// before and after the call, which on a stream the host keeps waiting includes the call's
// launch cost); CPU sets by the host clock around the call (their ops return when done).
// The wrapper forwards every call unchanged: a profiled run computes the same bits.
#ifndef INVAR_HARNESS_OP_PROFILE_H
#define INVAR_HARNESS_OP_PROFILE_H

#include "../../kernels/ops.h" // ops_set

#define OP_PROFILE_KEY 80

typedef struct {
    char key[OP_PROFILE_KEY];  // op name and the shape that decides its kernels
    long calls;
    double seconds;
} op_profile_entry;

typedef struct op_profile op_profile;

// Wraps `inner` (which stays the caller's: op_profile_destroy does not free it). Only for a
// single-rank engine: the wrapper has no open_group.
op_profile *op_profile_wrap(ops_set *inner);
// The set to hand to the engine in place of the inner one.
ops_set *op_profile_set(op_profile *p);
// Syncs the inner set and returns the totals per key since the last reset, in the order keys
// were first seen; *n entries, valid until the next call on p.
const op_profile_entry *op_profile_totals(op_profile *p, int *n);
void op_profile_reset(op_profile *p);
void op_profile_destroy(op_profile *p);

#endif
