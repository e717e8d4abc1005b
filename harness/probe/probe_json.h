// harness/probe/probe_json.h — reading an OpenAI-compatible /v1/completions answer into the records
// invar compares (engine/engine.h: engine_result), for `invar probe`.
//
// Logprobs are compared as float32 bits, so each number is read from its JSON text with strtof,
// not through cJSON's double: strtod then a cast to float rounds twice, and for a decimal close
// to the midpoint between two floats that can give the other float. (Texts a server wrote from
// float32 values, with %.9g or Python's repr of the widened double, are never that close; a
// server that computes in double is.) Before cJSON parses the answer, every number outside a
// string, and Python's json extensions -Infinity, Infinity and NaN, are put in quotes, so cJSON
// keeps the text and accepts what Python servers write.
//
// Tokens: "token_id:N" (vLLM's return_tokens_as_token_ids) gives the id N; a bare number gives
// itself. Any other string is a token's text: it is compared by a 31-bit hash of the text, and
// top_logprobs (an object keyed by text) has already merged ids that share a text, so fewer
// entries may remain; the notes count such answers.
#ifndef INVAR_HARNESS_PROBE_JSON_H
#define INVAR_HARNESS_PROBE_JSON_H

#include <stdbool.h>            // bool
#include <stddef.h>             // size_t

#include "../../engine/engine.h" // engine_result

// What reading answers noticed, summed over answers (the summary's note reports it).
typedef struct {
    long values;                 // logprob values read
    long wider_than_float32;     // texts with more precision than a float32 holds (a double
                                 // server): compared as the nearest float32
    long non_finite;             // -Infinity, Infinity, NaN
    long text_tokens;            // tokens named by text, not id
    long short_top;              // steps with fewer top_logprobs entries than asked
} probe_notes;

// The text with every number and NaN/Infinity literal outside strings quoted; NULL when out of
// memory. *out_len receives its length (a terminating NUL follows).
char *probe_quote_numbers(const char *json, size_t len, size_t *out_len);

// Reads choices[0].logprobs of an answer into res (room for max_steps records; top_k entries
// kept per step, highest logprob first, ties by id; missing entries are token -1, -Infinity).
// False with the reason in err: not JSON, no choices, no logprobs, lists of unequal lengths,
// more tokens than max_steps, a number that does not parse.
bool probe_parse_completion(const char *body, size_t len, int top_k, int max_steps,
                            engine_result *res, probe_notes *notes, char *err, int err_len);

// The "error" message of an OpenAI error body, else the body's first bytes, into buf.
void probe_error_message(const char *body, size_t len, char *buf, int buf_len);

#endif
