// harness/probe/probe_json.c — completion answers read with their numbers' own texts
// (harness/probe/probe_json.h).
#include "probe_json.h"

#include <ctype.h>               // isdigit, isalpha, isprint, isspace
#include <errno.h>               // errno, ERANGE
#include <math.h>                // isfinite, INFINITY
#include <stdint.h>              // int32_t, uint32_t
#include <stdio.h>               // snprintf
#include <stdlib.h>              // malloc, free, strtof, strtod, strtol, qsort
#include <string.h>              // strcmp, strncmp, strlen

#include <xxhash.h>              // XXH3_64bits
#include <cjson/cJSON.h>         // cJSON_ParseWithLength, cJSON_GetObjectItemCaseSensitive, ...

#include "../../common/check.h"  // invar_fail
#include "../run/compare.h"      // float_ordered

char *probe_quote_numbers(const char *json, size_t len, size_t *out_len, const char **why) {
    // A number becomes at most three characters longer (mark and quotes), and numbers are
    // separated by at least one character: 3 * len + 3 always suffices.
    char *out = malloc(3 * len + 4);
    if (!out) {
        *why = "out of memory";
        return NULL;
    }
    size_t o = 0;
    bool in_string = false;
    for (size_t i = 0; i < len;) {
        char ch = json[i];
        if (in_string) {
            if ((unsigned char)ch < 0x20) {
                free(out);
                *why = "a raw control character inside a string (not JSON)";
                return NULL;
            }
            out[o++] = ch;
            if (ch == '\\' && i + 1 < len) out[o++] = json[++i];
            else if (ch == '"') in_string = false;
            i++;
        } else if (ch == '"') {
            in_string = true;
            out[o++] = json[i++];
        } else if (ch == '-' || isdigit((unsigned char)ch) ||
                   (len - i >= 3 && strncmp(json + i, "NaN", 3) == 0) ||
                   (len - i >= 8 && strncmp(json + i, "Infinity", 8) == 0)) {
            out[o++] = '"';
            out[o++] = PROBE_NUMBER_MARK;
            while (i < len && (isdigit((unsigned char)json[i]) || isalpha((unsigned char)json[i]) ||
                               json[i] == '-' || json[i] == '+' || json[i] == '.'))
                out[o++] = json[i++];
            out[o++] = '"';
        } else {
            out[o++] = json[i++];
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

// Whether t is a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? and nothing else.
static bool json_number_text(const char *t) {
    if (*t == '-') t++;
    if (*t == '0') t++;
    else if (*t >= '1' && *t <= '9') while (isdigit((unsigned char)*t)) t++;
    else return false;
    if (*t == '.') {
        if (!isdigit((unsigned char)*++t)) return false;
        while (isdigit((unsigned char)*t)) t++;
    }
    if (*t == 'e' || *t == 'E') {
        t++;
        if (*t == '+' || *t == '-') t++;
        if (!isdigit((unsigned char)*t)) return false;
        while (isdigit((unsigned char)*t)) t++;
    }
    return *t == '\0';
}

// The number text probe_quote_numbers marked, or NULL for any other value (a string a server
// sent, null, an object).
static const char *marked_number(const cJSON *v) {
    if (!cJSON_IsString(v) || v->valuestring[0] != PROBE_NUMBER_MARK) return NULL;
    return v->valuestring + 1;
}

// A logprob from its marked text: a JSON number or -Infinity. False with the reason in why.
static bool read_logprob(const cJSON *v, float *out, probe_notes *notes, const char **why) {
    const char *t = marked_number(v);
    *why = "is not a number";
    if (!t) return false;
    if (strcmp(t, "NaN") == 0) {
        *why = "is NaN, not a log-probability";
        return false;
    }
    if (strcmp(t, "Infinity") == 0) {
        *why = "is Infinity, not a log-probability (at most 0)";
        return false;
    }
    if (strcmp(t, "-Infinity") == 0) {
        notes->values++;
        notes->non_finite++;
        *out = -INFINITY;
        return true;
    }
    if (!json_number_text(t)) return false;
    // ERANGE on underflow still gives the nearest float (a denormal or zero): keep it.
    float f = strtof(t, NULL);
    if (!isfinite(f)) {
        *why = "overflows float32";
        return false;
    }
    double d = strtod(t, NULL);
    notes->values++;
    if ((double)f != d) {
        int digits = 0;
        for (const char *p = t; *p && *p != 'e' && *p != 'E'; p++)
            if (isdigit((unsigned char)*p) && (digits || *p != '0')) digits++;
        if (digits > 9) notes->wider_than_float32++;
    }
    *out = f;
    return true;
}

// A hash of the text, in 31 bits so it can never read as the missing-token -1.
static int32_t text_token(const char *s) {
    return (int32_t)(XXH3_64bits(s, strlen(s)) & 0x7fffffff);
}

// A token's name, as the tokens array and top_logprobs' keys give it: "token_id:N" or a bare
// decimal (a number probe_quote_numbers quoted, or a text that is one) is the id N, any other
// text its hash. Both places read names this one way, so a sampled token and its top-1 entry
// always get the same id.
static bool read_token_name(const char *s, int32_t *id, probe_notes *notes) {
    if (*s == PROBE_NUMBER_MARK) s++;  // a bare number: an id like a decimal text
    char *number_end;
    errno = 0;
    long n = strtol(s, &number_end, 10);
    if (number_end != s && !*number_end && *s != '+' && *s != ' ') {  // "-3": a bad id
        if (errno || n < 0 || n > INT32_MAX) return false;
        *id = (int32_t)n;
        return true;
    }
    if (strncmp(s, "token_id:", 9) == 0) {
        char *end;
        errno = 0;
        long v = strtol(s + 9, &end, 10);
        if (end == s + 9 || *end || errno || v < 0 || v > INT32_MAX) return false;
        *id = (int32_t)v;
        return true;
    }
    notes->text_tokens++;
    *id = text_token(s);
    return true;
}

// A token of the tokens array: a string (numbers were quoted by probe_quote_numbers).
static bool read_token(const cJSON *v, int32_t *id, probe_notes *notes) {
    if (!cJSON_IsString(v)) return false;
    return read_token_name(v->valuestring, id, notes);
}

typedef struct {
    int32_t id;
    float logprob;
} top_entry;

static int by_logprob_then_id(const void *a, const void *b) {
    const top_entry *x = a, *y = b;
    int64_t fx = float_ordered(x->logprob), fy = float_ordered(y->logprob);
    if (fx != fy) return fx > fy ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool read_top(const cJSON *obj, int step, int top_k, engine_step_record *rec,
                     probe_notes *notes, char *err, int err_len) {
    if (!cJSON_IsObject(obj))
        return invar_fail(err, (size_t)err_len, "top_logprobs[%d] is not an object", step);
    int n = cJSON_GetArraySize(obj);
    top_entry *e = calloc((size_t)n + 1, sizeof *e);
    if (!e) return invar_fail(err, (size_t)err_len, "out of memory");
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, obj) {
        const char *why = "";
        if (!read_token_name(v->string, &e[i].id, notes) ||
            !read_logprob(v, &e[i].logprob, notes, &why)) {
            free(e);
            return invar_fail(err, (size_t)err_len, "top_logprobs[%d]: entry '%.60s' is not a token and a "
                        "number%s%s", step, v->string, why[0] ? ": its value " : "", why);
        }
        i++;
    }
    qsort(e, (size_t)n, sizeof *e, by_logprob_then_id);
    if (n < top_k) notes->short_top++;
    for (int k = 0; k < top_k; k++) {
        rec->topk_ids[k] = k < n ? e[k].id : -1;
        rec->topk_logprobs[k] = k < n ? e[k].logprob : -INFINITY;
    }
    free(e);
    return true;
}

bool probe_parse_completion(const char *body, size_t len, int top_k, int max_steps,
                            engine_result *res, probe_notes *notes, char *err, int err_len) {
    size_t qlen;
    const char *why = "";
    res->n_steps = 0;
    char *quoted = probe_quote_numbers(body, len, &qlen, &why);
    if (!quoted) return invar_fail(err, (size_t)err_len, "malformed JSON: %s", why);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(quoted, qlen, &end, false);
    bool ok = false;
    if (!root) {
        size_t at = (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - quoted : 0);
        invar_fail(err, (size_t)err_len, "malformed or truncated JSON (%zu bytes; cJSON stops near byte %zu "
             "of the quoted text)", len, at);
        goto out;
    }
    // One value and only white space after it: a second object or trailing bytes are no answer.
    while (end && end < quoted + qlen && isspace((unsigned char)*end)) end++;
    if (end && end < quoted + qlen) {
        invar_fail(err, (size_t)err_len, "malformed JSON: %zu bytes follow the answer's value",
                   (size_t)(quoted + qlen - end));
        goto out;
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *choice = cJSON_GetArrayItem(choices, 0);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(choice, "logprobs");
    if (!cJSON_IsArray(choices) || !cJSON_IsObject(choice)) {
        invar_fail(err, (size_t)err_len, "the answer has no choices[0]");
        goto out;
    }
    if (!cJSON_IsObject(lp)) {
        invar_fail(err, (size_t)err_len, "choices[0].logprobs is missing or null (does the server support "
             "logprobs?)");
        goto out;
    }
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(lp, "tokens");
    const cJSON *lps = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs");
    const cJSON *tops = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs");
    if (!cJSON_IsArray(tokens) || !cJSON_IsArray(lps)) {
        invar_fail(err, (size_t)err_len, "choices[0].logprobs lacks the tokens or token_logprobs list");
        goto out;
    }
    int n = cJSON_GetArraySize(tokens);
    if (cJSON_GetArraySize(lps) != n || (top_k > 0 && (!cJSON_IsArray(tops) ||
                                                       cJSON_GetArraySize(tops) != n))) {
        invar_fail(err, (size_t)err_len, "choices[0].logprobs: tokens (%d), token_logprobs (%d) and "
             "top_logprobs (%d) differ in length", n, cJSON_GetArraySize(lps),
             cJSON_GetArraySize(tops));
        goto out;
    }
    if (n > max_steps) {
        invar_fail(err, (size_t)err_len, "%d tokens returned, max_tokens was %d", n, max_steps);
        goto out;
    }
    for (int s = 0; s < n; s++) {
        engine_step_record *rec = &res->steps[s];
        memset(rec, 0, sizeof *rec);
        if (!read_token(cJSON_GetArrayItem(tokens, s), &rec->token, notes)) {
            invar_fail(err, (size_t)err_len, "tokens[%d] is not a token", s);
            goto out;
        }
        if (!read_logprob(cJSON_GetArrayItem(lps, s), &rec->logprob, notes, &why)) {
            invar_fail(err, (size_t)err_len, "token_logprobs[%d] %s", s, why);
            goto out;
        }
        if (top_k > 0 &&
            !read_top(cJSON_GetArrayItem(tops, s), s, top_k, rec, notes, err, err_len))
            goto out;
    }
    res->n_steps = n;
    ok = true;
out:
    cJSON_Delete(root);
    free(quoted);
    return ok;
}

void probe_error_message(const char *body, size_t len, char *buf, int buf_len) {
    cJSON *root = body ? cJSON_ParseWithLength(body, len) : NULL;
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "error"), "message");
    // Printable only: a garbage answer or an escape sequence must not garble the report.
    const char *text = cJSON_IsString(msg) ? msg->valuestring : body;
    size_t text_len = cJSON_IsString(msg) ? strlen(msg->valuestring) : len;
    size_t most = cJSON_IsString(msg) ? 300 : 120;
    int o = 0;
    for (size_t i = 0; text && i < text_len && i < most && o + 1 < buf_len; i++)
        buf[o++] = isprint((unsigned char)text[i]) ? text[i] : '?';
    buf[o] = '\0';
    if (!o) snprintf(buf, (size_t)buf_len, "(empty body)");
    cJSON_Delete(root);
}
