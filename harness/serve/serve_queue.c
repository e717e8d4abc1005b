// harness/serve/serve_queue.c — one engine thread, jobs handed in by HTTP threads
// (harness/serve/serve_queue.h).
#include "serve_queue.h"

#include <errno.h>               // ETIMEDOUT
#include <pthread.h>             // pthread_*
#include <stdio.h>               // snprintf
#include <stdlib.h>              // free, realloc
#include <string.h>              // strerror
#include <time.h>                // clock_gettime, timespec

#include "../../common/check.h" // invar_die, invar_calloc

struct serve_queue {
    engine *e;
    engine_sched sched;
    serve_batching batching;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;         // a job arrived, or stop
    pthread_cond_t finished;     // some job finished
    bool stop;
    serve_job *head, *tail;      // waiting, in arrival order
    int n_waiting;
    struct timespec first_wait;  // when the oldest waiting job arrived
    serve_job **active;          // by engine id
    int n_ids, cap_ids, n_active;
    // Metrics
    long requests, failed, steps, *steps_at;  // steps_at[b]: steps that ran b requests
    long refused_busy;           // jobs turned away at max_jobs
    long cancelled;              // jobs ended because their client went away
    bool any_cancel;             // some job was marked cancelled since the engine last looked
    int max_batch;
    engine_stats stats;          // the engine's, as of the last step (read without the engine)
};

static void check_pthread(int rc, const char *op) {
    if (rc != 0) invar_die(INVAR_EXIT_SYSTEM, "serve: %s failed: %s", op, strerror(rc));
}

static struct timespec after_ms(struct timespec t, int ms) {
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

// CLOCK_MONOTONIC now + ms: a deadline for the queue's condition variables (both measure that
// clock, immune to the wall clock being set).
static struct timespec deadline_ms(int ms) {
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "serve: clock_gettime failed: %s", strerror(errno));
    return after_ms(now, ms);
}

static void finish_job(serve_queue *q, serve_job *job, const char *error) {
    snprintf(job->error, sizeof job->error, "%s", error ? error : "");
    job->n_ready = job->result.n_steps;
    job->done = true;
    if (error) q->failed++;
}

// Called with the lock held, between steps: jobs whose client went away end where they are
// (a waiting one is dropped, a running one aborted in the engine, its blocks freed).
static void end_cancelled(serve_queue *q) {
    if (!q->any_cancel) return;
    q->any_cancel = false;
    serve_job **link = &q->head;
    q->tail = NULL;
    while (*link) {
        serve_job *job = *link;
        if (job->cancelled) {
            *link = job->next;
            q->n_waiting--;
            snprintf(job->error, sizeof job->error, "the client went away");
            job->done = true;
            q->cancelled++;
        } else {
            q->tail = job;
            link = &job->next;
        }
    }
    for (int id = 0; id < q->n_ids; id++) {
        serve_job *job = q->active[id];
        if (!job || !job->cancelled) continue;
        engine_abort(q->e, id);
        snprintf(job->error, sizeof job->error, "the client went away");
        job->n_ready = job->result.n_steps;
        job->done = true;
        q->cancelled++;
        q->active[id] = NULL;
        q->n_active--;
    }
    check_pthread(pthread_cond_broadcast(&q->finished), "pthread_cond_broadcast");
}

// Called with the lock held: every waiting job joins the engine's session.
static void admit_waiting(serve_queue *q) {
    bool refused = false;
    while (q->head) {
        serve_job *job = q->head;
        q->head = job->next;
        q->n_waiting--;
        char err[512];
        int id = engine_submit(q->e, &job->req, &job->result, err, sizeof err);
        if (id < 0) {
            finish_job(q, job, err);
            refused = true;
            continue;
        }
        if (id >= q->cap_ids) {
            int cap = q->cap_ids ? 2 * q->cap_ids : 64;
            serve_job **grown = realloc(q->active, (size_t)cap * sizeof *grown);
            if (!grown) invar_die(INVAR_EXIT_SYSTEM, "serve: out of memory for %d jobs", cap);
            q->active = grown;
            q->cap_ids = cap;
        }
        q->active[id] = job;
        q->n_ids = id + 1;
        q->n_active++;
    }
    q->tail = NULL;
    if (refused) check_pthread(pthread_cond_broadcast(&q->finished), "pthread_cond_broadcast");
}

// Called with the lock held after a step: finished jobs are handed back.
static void collect(serve_queue *q, int step_batch, const char *step_error) {
    if (step_batch > 0) {
        q->steps++;
        q->steps_at[step_batch]++;
        if (step_batch > q->max_batch) q->max_batch = step_batch;
    }
    for (int id = 0; id < q->n_ids; id++) {
        serve_job *job = q->active[id];
        if (!job) continue;
        job->n_ready = job->result.n_steps;
        if (step_error || engine_finished(q->e, id)) {
            finish_job(q, job, step_error);
            q->active[id] = NULL;
            q->n_active--;
        }
    }
    q->stats = engine_session_stats(q->e);
    check_pthread(pthread_cond_broadcast(&q->finished), "pthread_cond_broadcast");
}

static void *engine_thread(void *arg) {
    serve_queue *q = arg;
    char err[512];
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    for (;;) {
        while (!q->stop && !q->head && q->n_active == 0)
            check_pthread(pthread_cond_wait(&q->wake, &q->mu), "pthread_cond_wait");
        if (q->stop) break;
        if (q->n_active == 0 && q->batching.window_ms > 0) {
            struct timespec until = after_ms(q->first_wait, q->batching.window_ms);
            while (!q->stop && q->n_waiting < q->batching.min_batch) {
                int rc = pthread_cond_timedwait(&q->wake, &q->mu, &until);
                if (rc == ETIMEDOUT) break;
                check_pthread(rc, "pthread_cond_timedwait");
            }
            if (q->stop) break;
        }
        end_cancelled(q);
        admit_waiting(q);
        if (q->n_active == 0) {
            if (q->n_ids > 0 && engine_all_finished(q->e)) {  // every running job was cancelled
                if (!engine_recycle(q->e, err, sizeof err))
                    invar_die(INVAR_EXIT_SYSTEM, "serve: %s", err);
                q->n_ids = 0;
            }
            continue;
        }
        check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
        int n = engine_step(q->e, err, sizeof err);
        check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
        const char *step_error = NULL;
        if (n < 0) step_error = err;
        else if (n == 0) step_error = "the engine scheduled nothing while requests wait";
        collect(q, n, step_error);
        if (!step_error) end_cancelled(q);
        if (step_error) {
            // A failed step leaves requests half run: a new session drops them (and the cache);
            // their clients got the error.
            if (!engine_begin(q->e, &q->sched, err, sizeof err))
                invar_die(INVAR_EXIT_SYSTEM, "serve: restarting the engine: %s", err);
            q->n_ids = 0;
        } else if (q->n_active == 0) {
            if (!engine_recycle(q->e, err, sizeof err))
                invar_die(INVAR_EXIT_SYSTEM, "serve: %s", err);
            q->n_ids = 0;
        }
    }
    for (serve_job *job = q->head; job; job = job->next) finish_job(q, job, "server stopping");
    q->head = q->tail = NULL;
    check_pthread(pthread_cond_broadcast(&q->finished), "pthread_cond_broadcast");
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
    return NULL;
}

serve_queue *serve_queue_start(engine *e, const engine_sched *sched, const serve_batching *b) {
    char err[512];
    if (!engine_begin(e, sched, err, sizeof err)) invar_die(INVAR_EXIT_INPUT, "serve: %s", err);
    serve_queue *q = invar_calloc(1, sizeof *q, "serve queue");
    q->e = e;
    q->sched = *sched;
    q->batching = *b;
    q->steps_at = invar_calloc((size_t)sched->max_num_seqs + 1, sizeof *q->steps_at,
                               "batch size counts");
    check_pthread(pthread_mutex_init(&q->mu, NULL), "pthread_mutex_init");
    pthread_condattr_t attr;
    check_pthread(pthread_condattr_init(&attr), "pthread_condattr_init");
    // Both wait on CLOCK_MONOTONIC deadlines (deadline_ms), immune to the wall clock being set.
    check_pthread(pthread_condattr_setclock(&attr, CLOCK_MONOTONIC), "pthread_condattr_setclock");
    check_pthread(pthread_cond_init(&q->wake, &attr), "pthread_cond_init");
    check_pthread(pthread_cond_init(&q->finished, &attr), "pthread_cond_init");
    check_pthread(pthread_condattr_destroy(&attr), "pthread_condattr_destroy");
    check_pthread(pthread_create(&q->thread, NULL, engine_thread, q), "pthread_create");
    return q;
}

void serve_queue_stop(serve_queue *q) {
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    q->stop = true;
    check_pthread(pthread_cond_signal(&q->wake), "pthread_cond_signal");
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
    check_pthread(pthread_join(q->thread, NULL), "pthread_join");
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->wake);
    pthread_cond_destroy(&q->finished);
    free(q->active);
    free(q->steps_at);
    free(q);
}

bool serve_queue_submit_all(serve_queue *q, serve_job *jobs, int n) {
    for (int i = 0; i < n; i++) {
        jobs[i].n_ready = 0;
        jobs[i].done = false;
        jobs[i].cancelled = false;
        jobs[i].error[0] = '\0';
        jobs[i].next = NULL;
    }
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    if (q->batching.max_jobs > 0 && q->n_waiting + q->n_active + n > q->batching.max_jobs) {
        q->refused_busy += n;
        check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
        return false;
    }
    q->requests += n;
    if (q->stop) {
        for (int i = 0; i < n; i++) finish_job(q, &jobs[i], "server stopping");
        check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
        return true;
    }
    if (!q->head && clock_gettime(CLOCK_MONOTONIC, &q->first_wait) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "serve: clock_gettime failed: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
        if (q->tail) q->tail->next = &jobs[i];
        else q->head = &jobs[i];
        q->tail = &jobs[i];
        q->n_waiting++;
    }
    check_pthread(pthread_cond_signal(&q->wake), "pthread_cond_signal");
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
    return true;
}

// Called with the lock held: marks the jobs not yet done cancelled, for the engine thread to end
// between two steps.
static void cancel_locked(serve_queue *q, serve_job *jobs, int n) {
    for (int k = 0; k < n; k++) jobs[k].cancelled = !jobs[k].done;
    q->any_cancel = true;
    check_pthread(pthread_cond_signal(&q->wake), "pthread_cond_signal");
}

static bool all_done(const serve_job *jobs, int n) {
    for (int i = 0; i < n; i++)
        if (!jobs[i].done) return false;
    return true;
}

// Whether some job has records past seen[i] (seen NULL: never), or every job is done.
static bool progressed(const serve_job *jobs, int n, const int *seen) {
    if (all_done(jobs, n)) return true;
    for (int i = 0; seen && i < n; i++)
        if (jobs[i].n_ready > seen[i]) return true;
    return false;
}

// Called with the lock held: waits until progressed(), checking every 50 ms whether the client
// went away (then the jobs are cancelled and the wait goes on until the engine let them go).
static void wait_locked(serve_queue *q, serve_job *jobs, int n, const int *seen,
                        serve_client_gone gone, void *ctx) {
    bool cancelled = false;
    while (!progressed(jobs, n, cancelled ? NULL : seen)) {
        struct timespec until = deadline_ms(50);
        int rc = pthread_cond_timedwait(&q->finished, &q->mu, &until);
        if (rc != ETIMEDOUT) check_pthread(rc, "pthread_cond_timedwait");
        if (!cancelled && !all_done(jobs, n) && gone && gone(ctx)) {
            cancel_locked(q, jobs, n);
            cancelled = true;
        }
    }
}

bool serve_queue_wait_records(serve_queue *q, serve_job *jobs, int n, const int *seen,
                              int *ready, serve_client_gone gone, void *ctx) {
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    wait_locked(q, jobs, n, seen, gone, ctx);
    for (int i = 0; i < n; i++) ready[i] = jobs[i].n_ready;
    bool done = all_done(jobs, n);
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
    return done;
}

void serve_queue_cancel_all(serve_queue *q, serve_job *jobs, int n) {
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    if (!all_done(jobs, n)) cancel_locked(q, jobs, n);
    wait_locked(q, jobs, n, NULL, NULL, NULL);
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
}

bool serve_queue_run_all(serve_queue *q, serve_job *jobs, int n, serve_client_gone gone,
                         void *ctx) {
    if (!serve_queue_submit_all(q, jobs, n)) return false;
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    wait_locked(q, jobs, n, NULL, gone, ctx);
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
    return true;
}

bool serve_queue_run(serve_queue *q, serve_job *job, serve_client_gone gone, void *ctx) {
    return serve_queue_run_all(q, job, 1, gone, ctx);
}

bool serve_queue_drain(serve_queue *q, double timeout_s) {
    struct timespec until = deadline_ms((int)(timeout_s * 1000));
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    while (q->head || q->n_active > 0) {
        int rc = pthread_cond_timedwait(&q->finished, &q->mu, &until);
        if (rc == ETIMEDOUT) break;
        check_pthread(rc, "pthread_cond_timedwait");
    }
    bool empty = !q->head && q->n_active == 0;
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
    return empty;
}

void serve_queue_write_metrics(serve_queue *q, FILE *f) {
    check_pthread(pthread_mutex_lock(&q->mu), "pthread_mutex_lock");
    engine_stats st = q->stats;
    fprintf(f, "# invar serve: requests handed to the engine, steps run, and the batch size "
            "(requests in one step) of every step\n");
    fprintf(f, "invar_requests_total %ld\ninvar_requests_failed_total %ld\n"
            "invar_requests_refused_busy_total %ld\ninvar_requests_cancelled_total %ld\n"
            "invar_requests_running %d\ninvar_requests_waiting %d\n", q->requests, q->failed,
            q->refused_busy, q->cancelled, q->n_active, q->n_waiting);
    fprintf(f, "invar_steps_total %ld\ninvar_step_batch_size_max %d\n", q->steps, q->max_batch);
    for (int b = 1; b <= q->max_batch; b++)
        if (q->steps_at[b]) fprintf(f, "invar_steps_with_batch_size{size=\"%d\"} %ld\n", b,
                                    q->steps_at[b]);
    fprintf(f, "invar_tokens_total %ld\ninvar_prefill_chunks_total %ld\n"
            "invar_prefix_cache_queries_total %ld\ninvar_prefix_cache_hits_total %ld\n"
            "invar_graph_steps_total %ld\ninvar_graph_replays_total %ld\n",
            st.tokens, st.prefill_chunks, st.prefix_queries, st.prefix_hits, st.graph_steps,
            st.graph_replays);
    check_pthread(pthread_mutex_unlock(&q->mu), "pthread_mutex_unlock");
}
