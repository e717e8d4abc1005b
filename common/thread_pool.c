// common/thread_pool.c — fixed pthread pool (common/thread_pool.h).
#include "thread_pool.h"

#include <pthread.h>     // pthread_*
#include <stdlib.h>      // free
#include <stdbool.h>     // bool
#include <string.h>      // strerror
#include <unistd.h>      // sysconf

#include "check.h"       // invar_die, invar_calloc

struct thread_pool {
    int size;                 // workers + the calling thread
    pthread_t *workers;       // size - 1 of them
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    long generation;          // bumped for each parallel-for
    int pending;              // workers still running the current job
    bool stopping;
    long n;                   // the current job
    thread_pool_fn fn;
    void *arg;
    void *worker_args;        // one worker_arg per worker, freed at destroy
};

#define PT_CHECK(call)                                                                      \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        if (rc_ != 0) invar_die(INVAR_EXIT_SYSTEM, "%s failed: %s", #call, strerror(rc_));  \
    } while (0)

static void run_share(thread_pool *p, int index) {
    long chunk = (p->n + p->size - 1) / p->size;
    long begin = index * chunk, end = begin + chunk;
    if (end > p->n) end = p->n;
    if (begin < end) p->fn(p->arg, begin, end);
}

typedef struct {
    thread_pool *pool;
    int index;
} worker_arg;

static void *worker_main(void *raw) {
    worker_arg *wa = raw;
    thread_pool *p = wa->pool;
    int index = wa->index;
    long seen = 0;
    for (;;) {
        PT_CHECK(pthread_mutex_lock(&p->lock));
        while (p->generation == seen && !p->stopping) PT_CHECK(pthread_cond_wait(&p->start, &p->lock));
        if (p->stopping) {
            PT_CHECK(pthread_mutex_unlock(&p->lock));
            return NULL;
        }
        seen = p->generation;
        PT_CHECK(pthread_mutex_unlock(&p->lock));
        run_share(p, index);
        PT_CHECK(pthread_mutex_lock(&p->lock));
        if (--p->pending == 0) PT_CHECK(pthread_cond_signal(&p->done));
        PT_CHECK(pthread_mutex_unlock(&p->lock));
    }
}

thread_pool *thread_pool_create(int threads) {
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    thread_pool *p = invar_calloc(1, sizeof *p, "thread pool");
    p->size = threads;
    PT_CHECK(pthread_mutex_init(&p->lock, NULL));
    PT_CHECK(pthread_cond_init(&p->start, NULL));
    PT_CHECK(pthread_cond_init(&p->done, NULL));
    p->workers = invar_calloc((size_t)threads, sizeof(pthread_t), "thread pool workers");
    worker_arg *args = invar_calloc((size_t)threads, sizeof(worker_arg), "thread pool args");
    for (int i = 1; i < threads; i++) {
        args[i].pool = p;
        args[i].index = i;
        PT_CHECK(pthread_create(&p->workers[i - 1], NULL, worker_main, &args[i]));
    }
    p->worker_args = args;
    return p;
}

void thread_pool_destroy(thread_pool *p) {
    if (!p) return;
    PT_CHECK(pthread_mutex_lock(&p->lock));
    p->stopping = true;
    PT_CHECK(pthread_cond_broadcast(&p->start));
    PT_CHECK(pthread_mutex_unlock(&p->lock));
    for (int i = 1; i < p->size; i++) PT_CHECK(pthread_join(p->workers[i - 1], NULL));
    PT_CHECK(pthread_mutex_destroy(&p->lock));
    PT_CHECK(pthread_cond_destroy(&p->start));
    PT_CHECK(pthread_cond_destroy(&p->done));
    free(p->workers);
    free(p->worker_args);
    free(p);
}

int thread_pool_size(const thread_pool *p) { return p->size; }

void thread_pool_for(thread_pool *p, long n, thread_pool_fn fn, void *arg) {
    if (n <= 0) return;
    if (p->size == 1 || n == 1) {
        fn(arg, 0, n);
        return;
    }
    PT_CHECK(pthread_mutex_lock(&p->lock));
    p->n = n;
    p->fn = fn;
    p->arg = arg;
    p->pending = p->size - 1;
    p->generation++;
    PT_CHECK(pthread_cond_broadcast(&p->start));
    PT_CHECK(pthread_mutex_unlock(&p->lock));
    run_share(p, 0);
    PT_CHECK(pthread_mutex_lock(&p->lock));
    while (p->pending > 0) PT_CHECK(pthread_cond_wait(&p->done, &p->lock));
    PT_CHECK(pthread_mutex_unlock(&p->lock));
}
