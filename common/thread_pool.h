// common/thread_pool.h — a fixed pool of pthreads that runs parallel-for loops over
// outputs. Work is split into contiguous ranges of output indices; a reduction is never split,
// so results do not depend on the thread count.
#ifndef INVAR_COMMON_THREAD_POOL_H
#define INVAR_COMMON_THREAD_POOL_H

typedef struct thread_pool thread_pool;

// threads <= 0: one per online core.
thread_pool *thread_pool_create(int threads);
void thread_pool_destroy(thread_pool *p);
int thread_pool_size(const thread_pool *p);

// Calls fn(arg, begin, end) over [0, n) split into at most size() contiguous ranges, and
// returns when all are done. Not reentrant: fn must not call thread_pool_for on the same pool.
typedef void (*thread_pool_fn)(void *arg, long begin, long end);
void thread_pool_for(thread_pool *p, long n, thread_pool_fn fn, void *arg);

#endif
