// engine/engine.h — the MLA inference engine: model weights on a kernel set's device, a paged
// latent KV cache, a continuous-batching scheduler, and the forward pass. It knows nothing of
// the harness.
#ifndef INVAR_ENGINE_ENGINE_H
#define INVAR_ENGINE_ENGINE_H

#include <stdbool.h>          // bool
#include <stdint.h>           // int32_t, uint64_t
#include "../kernels/ops.h"   // ops_set
#include "attention_backend.h" // attention_backend
#include "model_config.h"     // model_config
#include "weights.h"          // weight_source

#define ENGINE_MAX_TOPK 20

typedef struct engine engine;

// Sizes fixed when the engine is created: every device buffer is allocated then.
typedef struct {
    int max_num_seqs;            // most requests in one step
    int max_num_batched_tokens;  // token budget of one step
    int max_model_len;           // longest prompt + generation of one request
    int max_total_tokens;        // KV cache capacity in tokens, over all live requests
    int block_size;              // tokens per KV block (default 64)
    bool prompt_logprobs;        // size buffers for requests that ask for prompt logprobs
} engine_limits;

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

typedef struct {
    int32_t token;
    float logprob;
    int32_t topk_ids[ENGINE_MAX_TOPK];
    float topk_logprobs[ENGINE_MAX_TOPK];
} engine_step_record;

typedef struct {
    engine_step_record *steps;   // max_new_tokens records, owned by the caller
    int n_steps;
    // With prompt_logprobs: prompt_len records, owned by the caller; record p is computed from
    // position p's logits (it predicts position p + 1), sampled as a decode step there would be.
    engine_step_record *prompt_steps;
    int n_prompt_steps;
} engine_result;

typedef struct {
    long steps;                  // scheduler steps run
    long tokens;                 // tokens computed (prefill + decode)
    long prefill_chunks;         // prefill pieces scheduled
    long prefix_queries;         // full prompt blocks looked up in the prefix cache
    long prefix_hits;            // of which found cached
} engine_stats;

// Uploads the weights from `src` to `ops`'s device. Exits with a clear message when a size
// is impossible (naming the field) or device memory does not fit (naming the buffer).
engine *engine_create(const model_config *cfg, weight_source *src, ops_set *ops,
                      const engine_limits *limits, uint64_t seed);
void engine_destroy(engine *e);

// Runs `n` requests to completion from an empty KV cache; results[i] receives request i's
// records. Returns false (with a message in err) when the schedule cannot fit the limits.
bool engine_generate(engine *e, const engine_request *reqs, int n, const engine_sched *sched,
                     engine_result *results, engine_stats *stats, char *err, int err_len);

const model_config *engine_config(const engine *e);

#endif
