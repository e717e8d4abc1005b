// harness/serve/serve_api.h — the OpenAI-compatible JSON of `invar serve` (harness/serve/cmd_serve.c):
// a /v1/completions request read and checked, its response, /v1/models, and the error body
// OpenAI clients expect ({"error": {"message", "type", "param", "code"}}).
//
// invar has no tokenizer: a prompt is a list of token ids, or a list of such lists (a batch,
// answered as one choice each, index i for prompt i, as vLLM does), and a response names tokens
// as "token_id:N" (vLLM's return_tokens_as_token_ids), in the text
// too (" token_id:N" per token). There is no end-of-sequence token, so every request runs
// max_tokens tokens (ignore_eos is accepted and changes nothing).
#ifndef INVAR_HARNESS_SERVE_API_H
#define INVAR_HARNESS_SERVE_API_H

#include <stdbool.h>            // bool
#include <stddef.h>             // size_t
#include <stdint.h>             // int32_t, uint64_t
#include <stdio.h>              // FILE

#include "../../engine/engine.h" // engine_result, ENGINE_MAX_TOPK

// What a request may ask for on this server.
typedef struct {
    const char *model;           // the served model's name; a request naming another is 404
    int vocab_size;
    int max_model_len;           // prompt + max_tokens
    int max_prompt_len;          // 0: any; else the step budget (chunked prefill off: a prompt
                                 // must fit one step)
} serve_bounds;

// One prompt of a request.
typedef struct {
    int32_t *tokens;             // owned by the serve_completion
    int len;
} serve_prompt;

typedef struct {
    serve_prompt *prompts;       // owned: free with serve_completion_free
    int n_prompts;               // a list of prompts is answered as that many choices
    int longest;                 // the longest prompt's length
    int max_tokens;              // default 16, as OpenAI's
    int logprobs;                // top logprobs per token, 0..ENGINE_MAX_TOPK; -1: none asked
    float temperature;           // default 1, as OpenAI's; 0 is greedy
    uint64_t seed;               // default 0
    bool stream;                 // answer as server-sent events (serve_write_completion_events)
} serve_completion;

// A request that cannot be served: the HTTP status and the error body's fields.
typedef struct {
    int status;                  // 400, 404, 413, ...
    const char *type;            // "invalid_request_error", "not_found_error"
    const char *param;           // the offending field, or NULL
    char message[512];
} serve_error;

// Reads a /v1/completions body. False with `e` filled when it is not one JSON object (trailing
// bytes, a second object or a NUL byte included), a field has the wrong type or is out of range,
// or asks for what this server does not do: every option that would change the output is
// implemented or refused, never ignored (n > 1, echo, best_of > 1, top_p != 1,
// top_k > 0, stop, stop_token_ids, logit_bias, penalties, min_p, suffix, prompt_logprobs,
// a text prompt). max_completion_tokens is max_tokens' other name.
bool serve_completion_parse(const char *body, size_t len, const serve_bounds *b,
                            serve_completion *out, serve_error *e);
void serve_completion_free(serve_completion *c);

// Whether every logprob of r is a log-probability the response can carry: not NaN, not
// +Infinity (an engine fault, answered 500, never written as invalid JSON).
bool serve_result_finite(const engine_result *r, int logprobs);

// The response to `c`, prompt i's records in r[i] (r[i].n_steps of them); id numbers the response,
// created is its time. Logprobs are written with round-trip digits (harness/json_writer.h), so
// they read back to the engine's float32 bits; -Infinity is written -9999.0 as vLLM does (JSON
// has no infinity). top_logprobs holds the top `logprobs` entries and the sampled token when
// it is not among them; text_offset[i] is where tokens[i]'s text starts in text.
void serve_write_completion(FILE *f, const serve_completion *c, const engine_result *r,
                            const char *model, long id, long created);
// The same response as server-sent events (stream: true), as OpenAI and vLLM stream it: one
// event per token per choice, each a text_completion chunk with that token's logprobs, the
// choice's token max_tokens with finish_reason "length", then "data: [DONE]". The whole answer
// at once; invar serve writes each event as its token comes out of the engine, with:
void serve_write_completion_events(FILE *f, const serve_completion *c, const engine_result *r,
                                   const char *model, long id, long created);
// record `step` of choice `choice` (r is that choice's result) as one event; *offset is where
// its text starts in the choice's text, advanced past it;
void serve_write_completion_event(FILE *f, const serve_completion *c, const engine_result *r,
                                  int choice, int step, const char *model, long id,
                                  long created, long *offset);
// an error after the stream began (its status was 200 already): the error body as an event;
void serve_write_stream_error(FILE *f, const serve_error *e);
// and the stream's end.
void serve_write_stream_done(FILE *f);
// The model list (/v1/models), and one model (/v1/models/{id}).
void serve_write_models(FILE *f, const serve_bounds *b, long created);
void serve_write_model(FILE *f, const serve_bounds *b, long created);
void serve_write_error(FILE *f, const serve_error *e);

#endif
