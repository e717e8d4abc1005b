// kernels/cpu/inv_cpu.h — the batch-invariant CPU kernel set.
#ifndef INVAR_KERNELS_CPU_INV_CPU_H
#define INVAR_KERNELS_CPU_INV_CPU_H

#include "../ops.h"  // ops_set

// threads <= 0: one per core. Results are bitwise independent of `threads`.
ops_set *inv_cpu_create(int threads);

#endif
