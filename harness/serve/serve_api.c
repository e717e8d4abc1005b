// harness/serve/serve_api.c — /v1/completions requests in, responses and errors out
// (harness/serve/serve_api.h). cJSON reads; harness/json_writer.h writes, so floats read back exactly.
#include "serve_api.h"

#include <ctype.h>               // isspace
#include <math.h>                // isfinite, isinf, isnan, floor
#include <stdarg.h>              // va_list
#include <stdlib.h>              // free
#include <string.h>              // strcmp, memchr

#include <cjson/cJSON.h>         // cJSON_ParseWithLength, cJSON_GetObjectItemCaseSensitive, ...

#include "../../common/check.h" // invar_malloc
#include "../json_writer.h"      // json_write_string, json_write_float, json_write_int

__attribute__((format(printf, 4, 5)))
static bool fail(serve_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = status == 404 ? "not_found_error" : "invalid_request_error";
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

// A JSON number that is a whole number in [lo, hi].
static bool whole_in(const cJSON *v, double lo, double hi, double *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi) return false;
    *out = d;
    return true;
}

static const cJSON *field(const cJSON *root, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

enum { SERVE_MAX_PROMPTS = 256 };  // prompts in one request

// One list of token ids into p; `where` names it in messages ("prompt", "prompt[3]").
static bool parse_ids(const cJSON *list, const serve_bounds *b, const char *where,
                      serve_prompt *p, serve_error *e) {
    int n = cJSON_GetArraySize(list);
    if (n < 1) return fail(e, 400, "prompt", "'%s' is empty", where);
    if (n >= b->max_model_len)
        return fail(e, 400, "prompt", "%s of %d tokens leaves no room in max_model_len %d",
                    where, n, b->max_model_len);
    if (b->max_prompt_len > 0 && n > b->max_prompt_len)
        return fail(e, 400, "prompt", "%s of %d tokens exceeds the step budget of %d tokens "
                    "(chunked prefill is off)", where, n, b->max_prompt_len);
    p->tokens = invar_malloc((size_t)n * sizeof *p->tokens, "prompt tokens");
    p->len = n;
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, list) {
        double id;
        if (!whole_in(t, 0, b->vocab_size - 1, &id))
            return fail(e, 400, "prompt", "%s[%d] must be a token id in [0, %d)", where, i,
                        b->vocab_size);
        p->tokens[i++] = (int32_t)id;
    }
    return true;
}

static bool parse_prompt(const cJSON *p, const serve_bounds *b, serve_completion *out,
                         serve_error *e) {
    if (!p) return fail(e, 400, "prompt", "'prompt' is required");
    if (cJSON_IsString(p))
        return fail(e, 400, "prompt", "'prompt' must be a list of token ids: invar serve has no "
                    "tokenizer");
    if (!cJSON_IsArray(p)) return fail(e, 400, "prompt", "'prompt' must be a list of token ids");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    bool batch = first && cJSON_IsArray(first);  // [[ids], [ids], ...]: one choice each
    int n = batch ? cJSON_GetArraySize(p) : 1;
    if (n > SERVE_MAX_PROMPTS)
        return fail(e, 400, "prompt", "'prompt' holds %d prompts; at most %d", n,
                    SERVE_MAX_PROMPTS);
    out->prompts = invar_calloc((size_t)n, sizeof *out->prompts, "prompts");
    out->n_prompts = n;
    if (!batch) return parse_ids(p, b, "prompt", &out->prompts[0], e);
    int i = 0;
    const cJSON *one;
    cJSON_ArrayForEach(one, p) {
        char where[32];
        snprintf(where, sizeof where, "prompt[%d]", i);
        if (!cJSON_IsArray(one))
            return fail(e, 400, "prompt", "'%s' must be a list of token ids", where);
        if (!parse_ids(one, b, where, &out->prompts[i], e)) return false;
        if (out->prompts[i].len > out->longest) out->longest = out->prompts[i].len;
        i++;
    }
    return true;
}

// An option this server does not implement must be absent or neutral, never ignored: null,
// false, a number in [neutral_lo, neutral_hi], or an empty string, list or object.
static bool neutral(const cJSON *root, const char *name, double neutral_lo, double neutral_hi,
                    serve_error *e) {
    const cJSON *v = field(root, name);
    if (!v) return true;
    if (cJSON_IsBool(v) && neutral_lo == 0 && neutral_hi == 0 && cJSON_IsFalse(v)) return true;
    if (cJSON_IsNumber(v) && v->valuedouble >= neutral_lo && v->valuedouble <= neutral_hi)
        return true;
    if (cJSON_IsString(v) && !v->valuestring[0]) return true;
    if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !cJSON_GetArraySize(v)) return true;
    return fail(e, 400, name, "'%s' is not supported by invar serve (absent or neutral only)",
                name);
}

// A client's text, as an error message may quote it: printable ASCII only (invalid UTF-8 or a
// control byte would make the error body no JSON, or garble a terminal).
static const char *quoted(const char *s, char *buf, size_t len) {
    size_t o = 0;
    for (; s && *s && o + 1 < len; s++) buf[o++] = *s >= 0x20 && *s < 0x7f ? *s : '?';
    buf[o] = '\0';
    return buf;
}

bool serve_completion_parse(const char *body, size_t len, const serve_bounds *b,
                            serve_completion *out, serve_error *e) {
    *out = (serve_completion){.max_tokens = 16, .logprobs = -1, .temperature = 1.0f};
    const char *end = NULL;
    // A NUL inside the body would end cJSON's text early: what follows it would be ignored.
    cJSON *root = memchr(body, '\0', len) ? NULL
                                          : cJSON_ParseWithLengthOpts(body, len, &end, false);
    bool ok = false;
    while (root && end < body + len && isspace((unsigned char)*end)) end++;
    if (!root || !cJSON_IsObject(root) || end != body + len) {
        fail(e, 400, NULL, "the request body is not one JSON object%s",
             root && end != body + len ? " (bytes follow it)" : "");
        goto out;
    }
    const cJSON *v = field(root, "model");
    char shown[128];
    if (v && (!cJSON_IsString(v) || strcmp(v->valuestring, b->model) != 0)) {
        fail(e, 404, "model", "The model `%s` does not exist (this server serves `%s`)",
             cJSON_IsString(v) ? quoted(v->valuestring, shown, sizeof shown) : "(not a string)",
             b->model);
        goto out;
    }
    if (!parse_prompt(field(root, "prompt"), b, out, e)) goto out;
    if (out->n_prompts == 1) out->longest = out->prompts[0].len;
    double d;
    const cJSON *other = field(root, "max_completion_tokens");
    v = field(root, "max_tokens");
    if (v && other && !(cJSON_IsNumber(v) && cJSON_IsNumber(other) &&
                        v->valuedouble == other->valuedouble)) {
        fail(e, 400, "max_completion_tokens", "'max_tokens' and 'max_completion_tokens' differ");
        goto out;
    }
    if ((v = v ? v : other)) {
        if (!whole_in(v, 1, b->max_model_len - out->longest, &d)) {
            fail(e, 400, "max_tokens", "'max_tokens' must be a whole number in [1, %d] (prompt "
                 "of %d tokens, max_model_len %d)", b->max_model_len - out->longest,
                 out->longest, b->max_model_len);
            goto out;
        }
        out->max_tokens = (int)d;
    } else if (out->longest + out->max_tokens > b->max_model_len) {
        out->max_tokens = b->max_model_len - out->longest;
    }
    if ((v = field(root, "logprobs"))) {
        if (!whole_in(v, 0, ENGINE_MAX_TOPK, &d)) {
            fail(e, 400, "logprobs", "'logprobs' must be a whole number in [0, %d]",
                 ENGINE_MAX_TOPK);
            goto out;
        }
        out->logprobs = (int)d;
    }
    if ((v = field(root, "temperature"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 100)) {
            fail(e, 400, "temperature", "'temperature' must be a number in [0, 100]");
            goto out;
        }
        out->temperature = (float)v->valuedouble;
    }
    if ((v = field(root, "seed"))) {
        // Up to 2^53: a JSON number read as a double holds every integer below that exactly.
        if (!whole_in(v, -9007199254740992.0, 9007199254740992.0, &d)) {
            fail(e, 400, "seed", "'seed' must be a whole number of magnitude at most 2^53");
            goto out;
        }
        out->seed = (uint64_t)(int64_t)d;
    }
    if (!neutral(root, "n", 1, 1, e) || !neutral(root, "best_of", 1, 1, e) ||
        !neutral(root, "echo", 0, 0, e) ||
        !neutral(root, "top_p", 1, 1, e) || !neutral(root, "top_k", -1, 0, e) ||
        !neutral(root, "stop", 0, 0, e) || !neutral(root, "stop_token_ids", 0, 0, e) ||
        !neutral(root, "logit_bias", 0, 0, e) || !neutral(root, "frequency_penalty", 0, 0, e) ||
        !neutral(root, "presence_penalty", 0, 0, e) ||
        !neutral(root, "repetition_penalty", 1, 1, e) || !neutral(root, "min_p", 0, 0, e) ||
        !neutral(root, "suffix", 0, 0, e) || !neutral(root, "prompt_logprobs", 0, 0, e) ||
        !neutral(root, "logprobs_mode", 0, 0, e))
        goto out;
    if ((v = field(root, "stream"))) {
        if (!cJSON_IsBool(v)) {
            fail(e, 400, "stream", "'stream' must be true or false");
            goto out;
        }
        out->stream = cJSON_IsTrue(v);
    }
    if (!neutral(root, "stream_options", 0, 0, e)) goto out;
    // No end-of-sequence token: every request runs max_tokens, so any min_tokens up to it holds.
    if ((v = field(root, "min_tokens")) && !whole_in(v, 0, out->max_tokens, &d)) {
        fail(e, 400, "min_tokens", "'min_tokens' must be a whole number in [0, max_tokens = %d]",
             out->max_tokens);
        goto out;
    }
    ok = true;
out:
    cJSON_Delete(root);
    if (!ok) serve_completion_free(out);
    return ok;
}

void serve_completion_free(serve_completion *c) {
    for (int i = 0; c->prompts && i < c->n_prompts; i++) free(c->prompts[i].tokens);
    free(c->prompts);
    c->prompts = NULL;
    c->n_prompts = 0;
}

static void write_token(FILE *f, int32_t id) {
    char name[32];
    snprintf(name, sizeof name, "token_id:%d", id);
    json_write_string(f, name);
}

// JSON has no infinity: a log-probability of -Infinity (a token of probability 0) is written as
// vLLM writes it, -9999.0; every finite value with round-trip digits.
static void write_logprob(FILE *f, float v) {
    if (isinf(v) && v < 0) fputs("-9999.0", f);
    else json_write_float(f, v);
}

bool serve_result_finite(const engine_result *r, int logprobs) {
    for (int s = 0; s < r->n_steps; s++) {
        float v = r->steps[s].logprob;
        if (isnan(v) || (isinf(v) && v > 0)) return false;
        for (int k = 0; k < logprobs; k++) {
            v = r->steps[s].topk_logprobs[k];
            if (isnan(v) || (isinf(v) && v > 0)) return false;
        }
    }
    return true;
}

// Steps [from, to) of a result as an OpenAI logprobs object; text_offset counts from `base`.
static void write_logprobs(FILE *f, const serve_completion *c, const engine_result *r, int from,
                           int to, long base) {
    if (c->logprobs < 0) {
        fputs("null", f);
        return;
    }
    fputs("{\"tokens\":[", f);
    for (int s = from; s < to; s++) {
        if (s > from) fputc(',', f);
        write_token(f, r->steps[s].token);
    }
    fputs("],\"token_logprobs\":[", f);
    for (int s = from; s < to; s++) {
        if (s > from) fputc(',', f);
        write_logprob(f, r->steps[s].logprob);
    }
    fputs("],\"top_logprobs\":[", f);
    for (int s = from; s < to; s++) {
        const engine_step_record *rec = &r->steps[s];
        fputs(s > from ? ",{" : "{", f);
        bool sampled_in = false;
        for (int k = 0; k < c->logprobs; k++) {
            if (k) fputc(',', f);
            write_token(f, rec->topk_ids[k]);
            fputc(':', f);
            write_logprob(f, rec->topk_logprobs[k]);
            sampled_in |= rec->topk_ids[k] == rec->token;
        }
        // As vLLM and OpenAI: the sampled token is there even when it ranks lower.
        if (!sampled_in && c->logprobs > 0) {
            fputc(',', f);
            write_token(f, rec->token);
            fputc(':', f);
            write_logprob(f, rec->logprob);
        }
        fputc('}', f);
    }
    // text is " token_id:A token_id:B ...": token s's text starts one past its space.
    fputs("],\"text_offset\":[", f);
    long offset = base;
    for (int s = from; s < to; s++) {
        char piece[32];
        offset += s > from ? snprintf(piece, sizeof piece, " token_id:%d", r->steps[s - 1].token)
                           : 0;
        fprintf(f, "%s%ld", s > from ? "," : "", offset + 1);
    }
    fputs("]}", f);
}

// One choice: prompt `index`'s text and logprobs.
static void write_choice(FILE *f, const serve_completion *c, const engine_result *r, int index) {
    fprintf(f, "{\"index\":%d,\"text\":\"", index);
    for (int s = 0; s < r->n_steps; s++) fprintf(f, " token_id:%d", r->steps[s].token);
    fputs("\",\"logprobs\":", f);
    write_logprobs(f, c, r, 0, r->n_steps, 0);
    fputs(",\"finish_reason\":\"length\"}", f);
}

void serve_write_completion_event(FILE *f, const serve_completion *c, const engine_result *r,
                                  int choice, int step, const char *model, long id,
                                  long created, long *offset) {
    char piece[32];
    int len = snprintf(piece, sizeof piece, " token_id:%d", r->steps[step].token);
    fprintf(f, "data: {\"id\":\"cmpl-invar-%ld\",\"object\":\"text_completion\","
            "\"created\":%ld,\"model\":", id, created);
    json_write_string(f, model);
    fprintf(f, ",\"choices\":[{\"index\":%d,\"text\":\"%s\",\"logprobs\":", choice, piece);
    write_logprobs(f, c, r, step, step + 1, *offset);
    fprintf(f, ",\"finish_reason\":%s}]}\n\n",
            step + 1 == c->max_tokens ? "\"length\"" : "null");
    *offset += len;
}

void serve_write_stream_error(FILE *f, const serve_error *e) {
    fputs("data: ", f);
    serve_write_error(f, e);  // one line, ended by its own newline
    fputc('\n', f);
}

void serve_write_stream_done(FILE *f) { fputs("data: [DONE]\n\n", f); }

void serve_write_completion_events(FILE *f, const serve_completion *c, const engine_result *r,
                                   const char *model, long id, long created) {
    for (int i = 0; i < c->n_prompts; i++) {
        long offset = 0;
        for (int s = 0; s < r[i].n_steps; s++)
            serve_write_completion_event(f, c, &r[i], i, s, model, id, created, &offset);
    }
    serve_write_stream_done(f);
}

void serve_write_completion(FILE *f, const serve_completion *c, const engine_result *r,
                            const char *model, long id, long created) {
    fprintf(f, "{\"id\":\"cmpl-invar-%ld\",\"object\":\"text_completion\",\"created\":%ld,"
            "\"model\":", id, created);
    json_write_string(f, model);
    fputs(",\"choices\":[", f);
    long prompt_tokens = 0, completion_tokens = 0;
    for (int i = 0; i < c->n_prompts; i++) {
        if (i) fputc(',', f);
        write_choice(f, c, &r[i], i);
        prompt_tokens += c->prompts[i].len;
        completion_tokens += r[i].n_steps;
    }
    fprintf(f, "],\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,"
            "\"total_tokens\":%ld}}\n", prompt_tokens, completion_tokens,
            prompt_tokens + completion_tokens);
}

static void write_model(FILE *f, const serve_bounds *b, long created) {
    fputs("{\"id\":", f);
    json_write_string(f, b->model);
    fprintf(f, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"invar\",\"root\":", created);
    json_write_string(f, b->model);
    fprintf(f, ",\"max_model_len\":%d,\"vocab_size\":%d}", b->max_model_len, b->vocab_size);
}

void serve_write_models(FILE *f, const serve_bounds *b, long created) {
    fputs("{\"object\":\"list\",\"data\":[", f);
    write_model(f, b, created);
    fputs("]}\n", f);
}

void serve_write_model(FILE *f, const serve_bounds *b, long created) {
    write_model(f, b, created);
    fputc('\n', f);
}

void serve_write_error(FILE *f, const serve_error *e) {
    // A message may quote the request (a URL, a model name): printable ASCII keeps the body
    // JSON whatever bytes the client sent.
    char message[sizeof e->message];
    fputs("{\"error\":{\"message\":", f);
    json_write_string(f, quoted(e->message, message, sizeof message));
    fputs(",\"type\":", f);
    json_write_string(f, e->type);
    fputs(",\"param\":", f);
    if (e->param) json_write_string(f, e->param);
    else fputs("null", f);
    fprintf(f, ",\"code\":%d}}\n", e->status);
}
