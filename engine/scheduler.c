// engine/scheduler.c — vLLM V1-style continuous batching (engine/scheduler.h).
#include "scheduler.h"

#include <stdio.h>               // snprintf
#include <stdlib.h>              // free, realloc
#include <string.h>              // memcpy, memset

#include "../common/check.h"    // invar_calloc, invar_malloc, invar_die

enum request_state { REQ_WAITING, REQ_RUNNING, REQ_FINISHED };

typedef struct {
    enum request_state state;
    int32_t *tokens;             // prompt_len + max_new_tokens capacity
    int n_tokens;                // known tokens (prompt + generated)
    int prompt_len, max_new_tokens, n_generated;
    int num_computed;            // positions whose K/V are in the cache
    int arrival_step;
    int32_t *blocks;
    int n_blocks;
    int n_published;             // full blocks already offered to the prefix cache
    uint64_t last_key;           // key of block n_published - 1
} request;

struct scheduler {
    kv_cache *kv;
    int max_num_seqs, max_model_len, max_blocks;
    engine_sched opts;
    request *reqs;
    int n_reqs, cap_reqs, n_finished;
    int *running;                // request indices in admission order
    int n_running;
    int next_waiting;            // requests are admitted in index order (arrival order)
    long step;
};

scheduler *scheduler_create(kv_cache *kv, int max_num_seqs, int max_model_len) {
    scheduler *s = invar_calloc(1, sizeof *s, "scheduler");
    s->kv = kv;
    s->max_num_seqs = max_num_seqs;
    s->max_model_len = max_model_len;
    int bs = kv_cache_block_size(kv);
    s->max_blocks = (max_model_len + bs - 1) / bs;
    s->running = invar_calloc((size_t)max_num_seqs, sizeof(int), "scheduler running list");
    return s;
}

static void free_requests(scheduler *s) {
    for (int i = 0; i < s->n_reqs; i++) {
        free(s->reqs[i].tokens);
        free(s->reqs[i].blocks);
    }
    s->n_reqs = 0;  // the array itself is kept for the next requests
}

void scheduler_destroy(scheduler *s) {
    if (!s) return;
    free_requests(s);
    free(s->reqs);
    free(s->running);
    free(s);
}

bool scheduler_start(scheduler *s, const engine_sched *opts, char *err, int err_len) {
    if (opts->max_num_seqs < 1 || opts->max_num_seqs > s->max_num_seqs) {
        snprintf(err, (size_t)err_len, "max_num_seqs %d outside [1, %d]", opts->max_num_seqs,
                 s->max_num_seqs);
        return false;
    }
    if (opts->max_num_batched_tokens < 1) {
        snprintf(err, (size_t)err_len, "max_num_batched_tokens must be positive");
        return false;
    }
    free_requests(s);
    s->opts = *opts;
    s->n_finished = 0;
    s->n_running = 0;
    s->next_waiting = 0;
    s->step = 0;
    return true;
}

int scheduler_add(scheduler *s, const engine_request *r, char *err, int err_len) {
    int i = s->n_reqs;
    if (r->prompt_len < 1 || r->max_new_tokens < 1 ||
        r->prompt_len + r->max_new_tokens > s->max_model_len) {
        snprintf(err, (size_t)err_len,
                 "request %d: prompt %d and max_new_tokens %d must be >= 1 and fit "
                 "max_model_len %d", i, r->prompt_len, r->max_new_tokens, s->max_model_len);
        return -1;
    }
    if (!s->opts.chunked_prefill && r->prompt_len > s->opts.max_num_batched_tokens) {
        snprintf(err, (size_t)err_len,
                 "request %d: prompt of %d tokens exceeds max_num_batched_tokens %d and "
                 "chunked prefill is off", i, r->prompt_len, s->opts.max_num_batched_tokens);
        return -1;
    }
    if (i > 0 && r->arrival_step < s->reqs[i - 1].arrival_step) {
        snprintf(err, (size_t)err_len, "request %d arrives before request %d", i, i - 1);
        return -1;
    }
    if (i == s->cap_reqs) {  // grows by doubling: a server adds requests one at a time
        int cap = s->cap_reqs ? 2 * s->cap_reqs : 16;
        request *grown = realloc(s->reqs, (size_t)cap * sizeof *grown);
        if (!grown) invar_die(INVAR_EXIT_SYSTEM, "out of memory for %d scheduler requests", cap);
        s->reqs = grown;
        s->cap_reqs = cap;
    }
    request *q = &s->reqs[i];
    memset(q, 0, sizeof *q);
    q->state = REQ_WAITING;
    q->tokens = invar_malloc((size_t)(r->prompt_len + r->max_new_tokens) * sizeof(int32_t),
                             "request tokens");
    memcpy(q->tokens, r->prompt, (size_t)r->prompt_len * sizeof(int32_t));
    q->n_tokens = q->prompt_len = r->prompt_len;
    q->max_new_tokens = r->max_new_tokens;
    q->arrival_step = r->arrival_step;
    q->blocks = invar_malloc((size_t)s->max_blocks * sizeof(int32_t), "request block table");
    s->n_reqs++;
    return i;
}

bool scheduler_begin(scheduler *s, const engine_request *reqs, int n, const engine_sched *opts,
                     char *err, int err_len) {
    if (!scheduler_start(s, opts, err, err_len)) return false;
    for (int i = 0; i < n; i++)
        if (scheduler_add(s, &reqs[i], err, err_len) < 0) return false;
    return true;
}

// An id this session never handed out is not a finished request (a caller's stale id must
// not read past the request array).
bool scheduler_finished(const scheduler *s, int req) {
    return req >= 0 && req < s->n_reqs && s->reqs[req].state == REQ_FINISHED;
}

bool scheduler_done(const scheduler *s) { return s->n_finished == s->n_reqs; }
long scheduler_steps(const scheduler *s) { return s->step; }

sched_view scheduler_view(const scheduler *s, int req) {
    const request *q = &s->reqs[req];
    return (sched_view){q->tokens, q->blocks, q->n_blocks};
}

// Blocks so the request can hold `len` positions.
static bool reserve(scheduler *s, request *q, int len) {
    int bs = kv_cache_block_size(s->kv);
    while (q->n_blocks * bs < len) {
        int b = kv_cache_alloc(s->kv);
        if (b < 0) return false;
        q->blocks[q->n_blocks++] = b;
    }
    return true;
}

// A new request takes the cached blocks of its prompt's longest cached prefix. The last prompt
// token is always computed, since its logits give the first output token.
static void admit_cached_prefix(scheduler *s, request *q) {
    int bs = kv_cache_block_size(s->kv);
    int cacheable = (q->prompt_len - 1) / bs;
    int found = kv_cache_lookup_prefix(s->kv, q->tokens, cacheable, q->blocks, &q->last_key);
    q->n_blocks = q->n_published = found;
    q->num_computed = found * bs;
}

// Blocks a request holds once every position it may ever compute is in the cache.
static int blocks_needed(const scheduler *s, const request *q) {
    int bs = kv_cache_block_size(s->kv);
    return (q->prompt_len + q->max_new_tokens + bs - 1) / bs;
}

// A waiting request is admitted only when the free blocks cover what the running requests may
// still take plus its own whole need, counting no prefix hit (a hit on a free cached block
// takes one free block and saves one, a hit on a block in use only saves): a step then never
// runs out of blocks halfway, so a KV cache smaller than a run's requests together delays
// admissions instead of failing the run. With a cache sized for every request at once it
// always holds.
static bool fits(const scheduler *s, const request *q) {
    long outstanding = blocks_needed(s, q);
    for (int i = 0; i < s->n_running; i++) {
        const request *r = &s->reqs[s->running[i]];
        outstanding += blocks_needed(s, r) - r->n_blocks;
    }
    return outstanding <= kv_cache_num_free(s->kv);
}

static int plan(scheduler *s, request *q, int budget) {
    int remaining = q->n_tokens - q->num_computed;
    if (q->num_computed < q->prompt_len && !s->opts.chunked_prefill && remaining > budget) return 0;
    return remaining < budget ? remaining : budget;
}

int scheduler_schedule(scheduler *s, sched_item *items, char *err, int err_len) {
    int budget = s->opts.max_num_batched_tokens, n = 0;
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        int r = s->running[i];
        request *q = &s->reqs[r];
        int take = plan(s, q, budget);
        if (take == 0) continue;
        if (!reserve(s, q, q->num_computed + take)) goto out_of_blocks;
        items[n++] = (sched_item){r, q->num_computed, take, q->num_computed + take == q->n_tokens};
        budget -= take;
    }
    while (s->next_waiting < s->n_reqs && s->n_running < s->opts.max_num_seqs && budget > 0) {
        int r = s->next_waiting;
        request *q = &s->reqs[r];
        if (q->state == REQ_FINISHED) {  // aborted while it waited
            s->next_waiting++;
            continue;
        }
        if (q->arrival_step > s->step) break;
        if (!s->opts.chunked_prefill && q->prompt_len > budget) break;
        if (s->n_running > 0 && !fits(s, q)) break;
        admit_cached_prefix(s, q);
        int take = plan(s, q, budget);
        if (!reserve(s, q, q->num_computed + take)) goto out_of_blocks;
        q->state = REQ_RUNNING;
        s->running[s->n_running++] = r;
        s->next_waiting++;
        items[n++] = (sched_item){r, q->num_computed, take, q->num_computed + take == q->n_tokens};
        budget -= take;
    }
    s->step++;
    return n;

out_of_blocks:
    snprintf(err, (size_t)err_len, "KV cache out of blocks at step %ld (%d running)", s->step,
             s->n_running);
    return -1;
}

static void publish_full_blocks(scheduler *s, request *q) {
    int bs = kv_cache_block_size(s->kv);
    int full = q->num_computed / bs;
    for (; q->n_published < full; q->n_published++) {
        int b = q->n_published;
        q->last_key = kv_cache_block_key(q->last_key, q->tokens + (long)b * bs, bs);
        kv_cache_publish(s->kv, q->blocks[b], q->last_key);
    }
}

static void finish(scheduler *s, int r) {
    request *q = &s->reqs[r];
    for (int b = 0; b < q->n_blocks; b++) kv_cache_release(s->kv, q->blocks[b]);
    q->n_blocks = 0;
    q->state = REQ_FINISHED;
    s->n_finished++;
    int w = 0;
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] != r) s->running[w++] = s->running[i];
    s->n_running = w;
}

bool scheduler_abort(scheduler *s, int req) {
    if (req < 0 || req >= s->n_reqs || s->reqs[req].state == REQ_FINISHED) return false;
    finish(s, req);  // a waiting request holds no block and is not in running: only its state
    return true;
}

void scheduler_complete(scheduler *s, const sched_item *items, int n, const int32_t *sampled) {
    for (int i = 0; i < n; i++) {
        request *q = &s->reqs[items[i].req];
        q->num_computed += items[i].n_tokens;
        publish_full_blocks(s, q);
        if (!items[i].sample) continue;
        q->tokens[q->n_tokens++] = sampled[i];
        if (++q->n_generated == q->max_new_tokens) finish(s, items[i].req);
    }
}
