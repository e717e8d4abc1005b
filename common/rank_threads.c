// common/rank_threads.c — one thread per rank (common/rank_threads.h).
#include "rank_threads.h"

#include <pthread.h>   // pthread_create, pthread_join
#include <stdlib.h>    // free
#include <string.h>    // strerror

#include "check.h"     // invar_die, invar_calloc

typedef struct {
    rank_fn fn;
    void *arg;
    int rank;
} rank_start;

static void *run_rank(void *p) {
    const rank_start *s = p;
    s->fn(s->arg, s->rank);
    return NULL;
}

void rank_threads_run(int T, rank_fn fn, void *arg) {
    if (T < 1) invar_die(INVAR_EXIT_INPUT, "rank threads: %d ranks", T);
    pthread_t *threads = invar_calloc((size_t)T, sizeof *threads, "rank threads");
    rank_start *starts = invar_calloc((size_t)T, sizeof *starts, "rank thread arguments");
    for (int r = 1; r < T; r++) {
        starts[r] = (rank_start){fn, arg, r};
        int rc = pthread_create(&threads[r], NULL, run_rank, &starts[r]);
        if (rc != 0)
            invar_die(INVAR_EXIT_SYSTEM, "pthread_create (rank %d of %d) failed: %s", r, T,
                      strerror(rc));
    }
    fn(arg, 0);
    for (int r = 1; r < T; r++) {
        int rc = pthread_join(threads[r], NULL);
        if (rc != 0)
            invar_die(INVAR_EXIT_SYSTEM, "pthread_join (rank %d of %d) failed: %s", r, T,
                      strerror(rc));
    }
    free(threads);
    free(starts);
}
