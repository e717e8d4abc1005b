// harness/serve/serve_queue.h — the engine thread of `invar serve`: HTTP handler threads hand in
// jobs and wait; one thread owns the engine (engine/engine.h's serving API) and runs steps of
// continuous batching, adding the jobs that arrived before each step.
//
// The batching window makes "concurrent requests share a step" deterministic enough to test on
// a loaded 2-core machine: when the engine is idle, the first arrival is held up to window_ms
// for more, and the step starts as soon as min_batch requests are waiting (min_batch 1 with a
// window still waits the window out: requests sent together then start together).
#ifndef INVAR_HARNESS_SERVE_QUEUE_H
#define INVAR_HARNESS_SERVE_QUEUE_H

#include <stdbool.h>            // bool
#include <stdio.h>              // FILE

#include "../../engine/engine.h" // engine, engine_request, engine_result, engine_sched

typedef struct serve_queue serve_queue;

typedef struct serve_job {
    engine_request req;          // the caller's; its prompt must outlive the job
    engine_result result;        // steps: room for req.max_new_tokens records
    int n_ready;                 // records of result written so far (the queue's: read them
                                 // after serve_queue_wait_records says how many)
    bool done;
    bool cancelled;              // its client went away: ended where it is (the queue's)
    char error[512];             // "" when the request ran
    struct serve_job *next;      // queue link (the queue's)
} serve_job;

typedef struct {
    int window_ms;               // hold an idle engine's first arrival this long (0: do not)
    int min_batch;               // start before the window ends once this many are waiting
    int max_jobs;                // most jobs waiting or running at once (0: no bound)
} serve_batching;

// Starts the engine thread; the engine begins a session with `sched`. Exits 2 when the
// schedule does not fit the engine, 3 when the thread cannot start.
serve_queue *serve_queue_start(engine *e, const engine_sched *sched, const serve_batching *b);
// Stops the thread after the current step; jobs still waiting fail with "server stopping".
void serve_queue_stop(serve_queue *q);

// Whether the client of a job went away (checked while it waits, every 50 ms).
typedef bool (*serve_client_gone)(void *ctx);

// Hands in a job and waits until it finished (job->error says whether it ran). False at once,
// the job untouched by the engine, when max_jobs are already waiting or running: the caller
// answers "busy, retry later" instead of queueing without bound. When gone (may be NULL) says
// the client left, the job is ended where it is: aborted in the engine between two steps (its
// KV blocks freed, the other requests' bits unchanged) or dropped before it was admitted.
bool serve_queue_run(serve_queue *q, serve_job *job, serve_client_gone gone, void *ctx);
// The same for n jobs handed in together (one request's prompts): all or none are taken.
bool serve_queue_run_all(serve_queue *q, serve_job *jobs, int n, serve_client_gone gone,
                         void *ctx);

// Streaming: the two halves of serve_queue_run_all. submit hands the jobs in and returns at once
// (false, nothing taken, when max_jobs would be passed); wait_records then blocks until some job
// has more records than seen[i] or every job is done, and writes each job's record count to
// ready[i] (records below it are final: the engine writes only later ones). True when every
// job is done. The client check and cancellation are serve_queue_run_all's.
bool serve_queue_submit_all(serve_queue *q, serve_job *jobs, int n);
bool serve_queue_wait_records(serve_queue *q, serve_job *jobs, int n, const int *seen,
                              int *ready, serve_client_gone gone, void *ctx);
// Ends the jobs not yet done (their client went away) and waits until the engine let them go:
// afterwards the caller may free them.
void serve_queue_cancel_all(serve_queue *q, serve_job *jobs, int n);

// Waits until no job waits or runs, at most timeout_s seconds; false when some still do.
bool serve_queue_drain(serve_queue *q, double timeout_s);

// Prometheus-style text: requests, steps, and how many steps ran at each batch size.
void serve_queue_write_metrics(serve_queue *q, FILE *f);

#endif
