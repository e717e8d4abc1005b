// kernels/cpu/inv_cpu.h — the batch-invariant CPU kernel set: what other folders may use of
// kernels/cpu (its other headers are private).
#ifndef INVAR_KERNELS_CPU_INV_CPU_H
#define INVAR_KERNELS_CPU_INV_CPU_H

#include "../ops.h"                     // ops_set
#include "../../common/thread_pool.h"   // thread_pool

// threads <= 0: one per core. Results are bitwise independent of `threads`.
ops_set *inv_cpu_create(int threads);

// For a set built on this one (reference/, adversarial/): fills a caller-owned ops_set as
// inv_cpu_create does (the caller then swaps the ops it reorders, and keeps the others, which
// read ops->ctx); inv_cpu_fini frees what inv_cpu_init made, not the ops_set itself.
void inv_cpu_init(ops_set *ops, int threads);
void inv_cpu_fini(ops_set *ops);

// The set's workers and their count, for the kernels of a set built on it.
thread_pool *inv_cpu_pool(const ops_set *ops);
int inv_cpu_threads(const ops_set *ops);

#endif
