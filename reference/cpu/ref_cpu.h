// reference/cpu/ref_cpu.h — the conventional (not batch-invariant) CPU kernel set, and the
// constructor the adversarial set shares.
#ifndef INVAR_REFERENCE_CPU_REF_CPU_H
#define INVAR_REFERENCE_CPU_REF_CPU_H

#include "../../kernels/ops.h"  // ops_set

// threads <= 0: one per core. Split counts depend on shapes and on `threads`, as BLAS does.
ops_set *ref_cpu_create(int threads);

// The engine-level negative control of the all-reduce alone: the invariant CPU set with this
// set's ring all-reduce and nothing else changed. Its only batch-variant op is the ring, which
// is order-free with two ranks (two addends commute), so the set is batch-invariant at
// tensor_parallel <= 2 and must be caught at T >= 3 (sets/registry.h: order_free_up_to_tp).
ops_set *inv_ring_cpu_create(int threads);

#endif
