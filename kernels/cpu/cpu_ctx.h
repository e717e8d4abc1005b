// kernels/cpu/cpu_ctx.h — the state every CPU kernel set keeps in ops_set.ctx, shared by the
// invariant and reference CPU sets so a reference set can reuse invariant ops that are
// batch-invariant by nature (embedding, residual add, ...).
#ifndef INVAR_KERNELS_CPU_CPU_CTX_H
#define INVAR_KERNELS_CPU_CPU_CTX_H

#include "../../common/thread_pool.h"  // thread_pool

typedef struct {
    thread_pool *pool;
    int threads;
} cpu_ctx;

#endif
