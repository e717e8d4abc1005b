// engine/engine.h — the MLA inference engine: model weights on a kernel set's device, a paged
// latent KV cache, a continuous-batching scheduler, and the forward pass. It knows nothing of
// the harness.
#ifndef INVAR_ENGINE_ENGINE_H
#define INVAR_ENGINE_ENGINE_H

#include <stdbool.h>          // bool
#include <stdint.h>           // int32_t, uint64_t
#include "../kernels/ops.h"   // ops_set
#include "model_config.h"     // model_config
#include "request.h"          // engine_request, engine_sched
#include "weights.h"          // weight_source

#define ENGINE_MAX_TOPK 20
#define ENGINE_MAX_GRAPH_BUCKETS 32

typedef struct engine engine;

// Sizes fixed when the engine is created: every device buffer is allocated then.
typedef struct {
    int max_num_seqs;            // most requests in one step
    int max_num_batched_tokens;  // token budget of one step
    int max_model_len;           // longest prompt + generation of one request
    int max_total_tokens;        // KV cache capacity in tokens, over all live requests
    int block_size;              // tokens per KV block (default 64)
    int kv_cache_blocks;         // > 0: the pool has exactly this many blocks (at least one
                                 // request's worth); 0: sized from max_total_tokens
    bool prompt_logprobs;        // size buffers for requests that ask for prompt logprobs
    // Row-parallel sums over 8 fixed slices in one tree (engine/tp_slices.h): the same bits at
    // T = 1, 2, 4 and 8. Needs a kernel set with the path, T dividing 8, every count >= 8.
    bool tp_size_invariant;
    // With tp_size_invariant: every slice's GEMMs and MoE calls one call a slice and the tree as
    // add_f32 pairs (what a rank makes at T = 8) instead of the one-call forms. The same bits
    // by the kernels' contracts: a check of those forms on one device, which no T > 1 run needs.
    bool tp_slices_each;
    // With tp_size_invariant: the most bytes the routed experts' fp32 rows of one moe_experts
    // call may take (0: 1 GiB). A step's slices go to one call while their rows fit, else in
    // groups that do (a slice's rows are T x k x D floats: V3 at 8,192 tokens, 1.9 GB).
    long tp_slices_fp32_bytes;
    // CUDA graphs (vLLM's and SGLang's decode graphs): a decode step (one sampled token per
    // request, one rank) of at most the largest usable bucket runs padded to the smallest bucket
    // that holds it, and on a set with graphs (ops_set.graph_capture) as one replay of the step
    // captured for that bucket. Padding rows write their KV to a block no request owns and
    // sample nothing. Ascending, each >= 1; a bucket past max_num_seqs or
    // max_num_batched_tokens is never used. 0 buckets: every step runs as scheduled.
    int graph_buckets[ENGINE_MAX_GRAPH_BUCKETS];
    int n_graph_buckets;
} engine_limits;

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
    long graph_steps;            // steps padded to a graph bucket (engine_limits.graph_buckets)
    long graph_replays;          // of which replayed from a captured graph
} engine_stats;

// Uploads the weights from `src` to `ops`'s device. Exits with a clear message when a size
// is impossible (naming the field) or device memory does not fit (naming the buffer).
engine *engine_create(const model_config *cfg, weight_source *src, ops_set *ops,
                      const engine_limits *limits, uint64_t seed);
void engine_destroy(engine *e);

// One rank of a tensor-parallel group of `size` ranks (engine/tp_engine.h runs a group): the
// rank holds its part of the weights (engine/tp_part.h) and completes row-parallel layers with
// ops->all_reduce over comm. Every rank must then be driven through the same engine_generate
// calls at once, each on its own thread.
typedef struct {
    int rank, size;
    tp_comm *comm;
} engine_shard;

// As engine_create; NULL shard is engine_create. Uneven parts are allowed; a count below the
// group's size is refused (exit 2, naming the field).
engine *engine_create_shard(const model_config *cfg, weight_source *src, ops_set *ops,
                            const engine_limits *limits, uint64_t seed,
                            const engine_shard *shard);

// Serving: requests that arrive while others run, one scheduler step at a time, on one thread.
//   engine_begin   starts a session with `sched` and an empty KV cache (prefix cache included);
//   engine_submit  adds a request, which joins the running ones at the next step it fits; its
//                  prompt must stay valid until it finished; `result` (room for max_new_tokens
//                  records, and prompt_len prompt records when asked) fills as steps run;
//   engine_step    runs one step of continuous batching (chunked prefill, prefix-cache hits and
//                  the token budget as `sched` says);
//   engine_recycle once every request finished: ids start from 0 again, so a long-running
//                  server holds no record of requests long gone; the KV cache and its prefix
//                  cache are kept.
// False / -1 with a message in err when the schedule does not fit the limits or a request can
// never be scheduled.
bool engine_begin(engine *e, const engine_sched *sched, char *err, int err_len);
// The request's id (dense from 0 since engine_begin or engine_recycle), or -1.
int engine_submit(engine *e, const engine_request *req, engine_result *result, char *err,
                  int err_len);
// The number of requests in the step (its batch size); 0: nothing to run (no request, or none
// arrived yet); -1: KV blocks ran out, or a request's sampled id fell outside the vocabulary
// (its logits or the logprobs op's output broken; engine_failed_request names it). The
// session is then over: engine_begin starts another.
int engine_step(engine *e, char *err, int err_len);
// The request whose sampled id failed the last step of this session, or -1.
int engine_failed_request(const engine *e);
// false for an id this session never returned (never reads past its requests)
bool engine_finished(const engine *e, int id);
bool engine_all_finished(const engine *e);
// Ends request `id` where it is (its client went away): its blocks go back at once, its result
// keeps the records written so far, and the other requests run on with the bits they would
// have had. False when it had already finished or is no id of this session. Not during a step.
bool engine_abort(engine *e, int id);
// KV blocks a request could take now (free, or cached and unused).
int engine_free_blocks(const engine *e);
bool engine_recycle(engine *e, char *err, int err_len);
// Steps, tokens, prefill chunks and prefix-cache lookups since engine_begin.
engine_stats engine_session_stats(const engine *e);

// Runs `n` requests to completion from an empty KV cache; results[i] receives request i's
// records. Returns false (with a message in err) when the schedule cannot fit the limits.
// (engine_begin, engine_submit of each request in order, engine_step until all finished.)
bool engine_generate(engine *e, const engine_request *reqs, int n, const engine_sched *sched,
                     engine_result *results, engine_stats *stats, char *err, int err_len);

const model_config *engine_config(const engine *e);

// Which request and position each row of the kernel calls that follow holds, for an observer
// of the calls (the harness's op tap wraps the kernel set and hashes rows per request): called
// before each group of calls whose rows are one kind. `layer` is -1 for the embedding, the
// layer index, or num_hidden_layers for the final norm, lm_head and sampling. A call's rows are
// the first M entries of the latest announcement (M the call's own row count; moe_experts'
// row t is its k outputs of token t; residual_add and all_reduce cover all n rows).
typedef enum {
    ENGINE_ROWS_TOKENS,   // the step's token rows (split prefill: its prefill rows)
    ENGINE_ROWS_KEYS,     // split prefill: the context keys gathered from the cache
    ENGINE_ROWS_SAMPLES,  // the rows that produce logits
} engine_rows_kind;
typedef void (*engine_rows_observer)(void *ctx, int layer, engine_rows_kind kind,
                                     const int32_t *request, const int32_t *position, int n);
// NULL fn: none (the default). Requests are engine_submit's ids.
void engine_observe_rows(engine *e, engine_rows_observer fn, void *ctx);

#endif
