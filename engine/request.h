// engine/request.h — what the engine is asked to run: the requests of one generate call and how
// to schedule them (engine/engine.h runs them; engine/scheduler.h admits and chunks them).
#ifndef INVAR_ENGINE_REQUEST_H
#define INVAR_ENGINE_REQUEST_H

#include <stdbool.h>             // bool
#include <stdint.h>              // int32_t, uint64_t
#include "attention_backend.h"   // attention_backend

// Scheduling of one generate call (vLLM V1 semantics).
typedef struct {
    int max_num_seqs;            // <= limits.max_num_seqs
    int max_num_batched_tokens;  // <= limits.max_num_batched_tokens
    bool chunked_prefill;        // off: a prompt is prefilled in one step, whole
    int top_k;                   // logprobs recorded per step, <= ENGINE_MAX_TOPK
    const attention_backend *backend; // NULL: mla-unified
    bool prefix_caching;         // reuse cached full blocks of earlier requests' prompts
} engine_sched;

typedef struct {
    const int32_t *prompt;
    int prompt_len;
    int max_new_tokens;
    float temperature;           // 0: greedy
    uint64_t seed;               // request seed; noise depends on (case seed, seed, position)
    int arrival_step;            // scheduler step at which the request arrives (0: at once)
    bool prompt_logprobs;        // also record every prompt position (needs limits.prompt_logprobs)
} engine_request;

#endif
