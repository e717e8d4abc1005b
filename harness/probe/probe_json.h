// harness/probe/probe_json.h — reading an OpenAI-compatible /v1/completions answer into the records
// invar compares (engine/engine.h: engine_result), for `invar probe`.
//
// Logprobs are compared as float32 bits, so each number is read from its JSON text with strtof,
// not through cJSON's double: strtod then a cast to float rounds twice, and for a decimal close
// to the midpoint between two floats that can give the other float. (Texts a server wrote from
// float32 values, with %.9g or Python's repr of the widened double, are never that close; a
// server that computes in double is.) Before cJSON parses the answer, every number outside a
// string, and Python's json extensions -Infinity, Infinity and NaN, are put in quotes behind a
// marker byte no valid JSON string holds raw (PROBE_NUMBER_MARK), so cJSON keeps the text and a
// number a server sent as a string ("-0.5") is told from a number and refused. A logprob must be
// a JSON number (hex floats, "inf" and the like are not) or -Infinity (a top entry of
// probability 0); NaN and Infinity are no log-probabilities and refuse the answer.
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
    long non_finite;             // -Infinity (NaN and Infinity refuse the answer)
    long text_tokens;            // tokens named by text, not id
    long short_top;              // steps with fewer top_logprobs entries than asked
} probe_notes;

// Put before a number's text when probe_quote_numbers quotes it.
#define PROBE_NUMBER_MARK '\x01'

// The text with every number and NaN/Infinity literal outside strings quoted behind
// PROBE_NUMBER_MARK. NULL with *why set when the text holds a raw control character inside a
// string (not JSON; it could forge the mark) or memory runs out. *out_len receives its length
// (a terminating NUL follows).
char *probe_quote_numbers(const char *json, size_t len, size_t *out_len, const char **why);

// Reads choices[0].logprobs of an answer into res (room for max_steps records; top_k entries
// kept per step, highest logprob first, ties by id; missing entries are token -1, -Infinity).
// False with the reason in err: not JSON (trailing bytes after the value included), no choices,
// no logprobs, lists of unequal lengths, more tokens than max_steps, a logprob that is not a
// JSON number, NaN or Infinity.
bool probe_parse_completion(const char *body, size_t len, int top_k, int max_steps,
                            engine_result *res, probe_notes *notes, char *err, int err_len);

// The "error" message of an OpenAI error body, else the body's first bytes, into buf; either
// printable only (a control byte, a terminal escape, becomes '?'), so a server's text cannot
// garble the console or the report.
void probe_error_message(const char *body, size_t len, char *buf, int buf_len);

#endif
