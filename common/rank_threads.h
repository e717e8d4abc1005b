// common/rank_threads.h — the ranks of a tensor-parallel group as threads of one process: one
// call runs fn(arg, rank) for every rank at once and returns when all have returned. The
// calling thread is rank 0, so T = 1 starts no thread at all.
#ifndef INVAR_COMMON_RANK_THREADS_H
#define INVAR_COMMON_RANK_THREADS_H

// C linkage: the CUDA sets (C++) call these too.
#ifdef __cplusplus
extern "C" {
#endif

typedef void (*rank_fn)(void *arg, int rank);

// Ranks that meet at a barrier must all be running: this starts T - 1 threads, never a pool
// smaller than T.
void rank_threads_run(int T, rank_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
