// engine/scheduler.h — continuous batching as in vLLM V1: each step first continues the running
// requests (decodes and unfinished prefill chunks), then admits waiting ones in arrival order,
// while the step stays within max_num_seqs requests and max_num_batched_tokens tokens. With
// chunked prefill a prompt is cut to the budget left; without, it waits for room to go whole.
// KV blocks are reserved here, and prefix-cache hits skip a new request's cached full blocks.
#ifndef INVAR_ENGINE_SCHEDULER_H
#define INVAR_ENGINE_SCHEDULER_H

#include <stdbool.h>    // bool
#include <stdint.h>     // int32_t
#include "request.h"    // engine_request, engine_sched
#include "kv_cache.h"   // kv_cache

typedef struct {
    int req;            // index of the request
    int start;          // first position computed this step
    int n_tokens;       // positions [start, start + n_tokens)
    bool sample;        // the last position's logits give the request's next token
} sched_item;

typedef struct {
    const int32_t *tokens;  // prompt then generated tokens
    const int32_t *blocks;  // block table
    int n_blocks;
} sched_view;

typedef struct scheduler scheduler;

scheduler *scheduler_create(kv_cache *kv, int max_num_seqs, int max_model_len);
void scheduler_destroy(scheduler *s);

// Starts a run with no requests (the KV cache is left as it is: its prefix cache carries over);
// requests join with scheduler_add, also while others run. False with a message when opts do
// not fit the scheduler.
bool scheduler_start(scheduler *s, const engine_sched *opts, char *err, int err_len);
// Adds one request (arriving at its arrival_step, not before the previous request's); returns
// its index, or -1 with a message when it can never be scheduled.
int scheduler_add(scheduler *s, const engine_request *r, char *err, int err_len);
bool scheduler_finished(const scheduler *s, int req);
// Ends request `req` before its last token: a running one gives its KV blocks back at once (its
// full blocks stay in the prefix cache as any finished request's), a waiting one is never
// admitted. False when it had already finished or was never added.
bool scheduler_abort(scheduler *s, int req);

// Starts a run of `n` requests: scheduler_start, then scheduler_add of each. False with a message when a request cannot ever be scheduled
// (longer than max_model_len, or a prompt over the budget with chunked prefill off).
bool scheduler_begin(scheduler *s, const engine_request *reqs, int n, const engine_sched *opts,
                     char *err, int err_len);
bool scheduler_done(const scheduler *s);

// Plans the next step into items (room for max_num_seqs). Returns the item count; 0 means an
// idle step (nothing has arrived yet). Returns -1 when KV blocks ran out (message in err).
int scheduler_schedule(scheduler *s, sched_item *items, char *err, int err_len);

// After the step ran: marks the items' positions computed, publishes newly full blocks to the
// prefix cache, appends each sampled token (sampled[i] for items[i] with sample set) and
// releases finished requests' blocks.
void scheduler_complete(scheduler *s, const sched_item *items, int n, const int32_t *sampled);

sched_view scheduler_view(const scheduler *s, int req);
long scheduler_steps(const scheduler *s);

#endif
