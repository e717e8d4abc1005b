// kernels/cpu/cpu_ctx.h — the state the invariant CPU set keeps in ops_set.ctx (private to
// kernels/cpu; a set built on this one reaches the pool through inv_cpu.h).
#ifndef INVAR_KERNELS_CPU_CPU_CTX_H
#define INVAR_KERNELS_CPU_CPU_CTX_H

#include "../../common/thread_pool.h"  // thread_pool

typedef struct {
    thread_pool *pool;
    int threads;
} cpu_ctx;

#endif
