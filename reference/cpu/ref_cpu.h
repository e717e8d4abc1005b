// reference/cpu/ref_cpu.h — the conventional (not batch-invariant) CPU kernel set, and the
// constructor the adversarial set shares.
#ifndef INVAR_REFERENCE_CPU_REF_CPU_H
#define INVAR_REFERENCE_CPU_REF_CPU_H

#include "../../kernels/ops.h"  // ops_set

// threads <= 0: one per core. Split counts depend on shapes and on `threads`, as BLAS does.
ops_set *ref_cpu_create(int threads);

#endif
