// tests/test_serve_api.c — invar serve's JSON (harness/serve/serve_api.c): served logprobs read
// back, through probe's exact reader, to the engine's float32 bits (a 7-digit printer fails);
// the sampled token is in top_logprobs; text_offset points at each token's text; requests that
// are not one JSON object, or ask for what the server does not do, are refused with 400 and a
// body that is JSON whatever bytes the client sent. The gate's head check (serve_gate.h) passes
// random well-formed heads whole and never judges one early, and refuses each malformed head
// with the status the HTTP layer owes it.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <math.h>     // INFINITY, isinf
#include <stdio.h>    // open_memstream, fclose, printf
#include <stdlib.h>   // free, getenv, strtoull
#include <string.h>   // memcpy, strlen, strncmp, strstr
#include <time.h>     // time
#include <unistd.h>   // getpid

#include <cjson/cJSON.h>                 // cJSON_Parse: the response is JSON

#include "../common/hash.h"              // invar_mix64
#include "../harness/probe/probe_json.h" // probe_parse_completion: reads numbers as strtof
#include "../harness/serve/serve_api.h"  // serve_completion_parse, serve_write_*
#include "../harness/serve/serve_gate.h" // serve_head_check, SERVE_GATE_MAX_HEAD
#include "test_util.h"                   // test_alloc, test_poison

static uint64_t seed;

static int setup(void **state) {
    (void)state;
    const char *fixed = getenv("INVAR_TEST_SEED");
    seed = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_serve_api: seed %llu (INVAR_TEST_SEED repeats it)\n", (unsigned long long)seed);
    return 0;
}

static uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

// A random log-probability: any non-positive float32 bit pattern (subnormals, -0 and the most
// negative finite included), -Infinity now and then.
static float random_logprob(uint64_t i) {
    uint64_t r = invar_mix64(seed ^ invar_mix64(i));
    if (r % 61 == 0) return -INFINITY;
    uint32_t b = 0x80000000u | (uint32_t)(r >> 16) % 0x7f800000u;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static char *written(const serve_completion *c, const engine_result *r, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    assert_non_null(f);
    serve_write_completion(f, c, r, "m", 7, 1234);
    assert_int_equal(fclose(f), 0);
    return text;
}

// Every served logprob reads back to its float32 bits (-Infinity as vLLM's -9999.0), and a
// sampled token outside the top k comes as one more top entry with its own logprob.
static void served_logprobs_read_back_bit_for_bit(void **state) {
    (void)state;
    enum { STEPS = 400, K = 4 };
    engine_step_record *steps = test_alloc(STEPS * sizeof *steps);
    test_poison(steps, STEPS * sizeof *steps);
    engine_result r = {.steps = steps, .n_steps = STEPS};
    for (int s = 0; s < STEPS; s++) {
        steps[s].token = s % 3 == 0 ? 900 + s : 10 * s;  // every third one sampled outside
        steps[s].logprob = random_logprob((uint64_t)s * 8);
        for (int k = 0; k < K; k++) {
            steps[s].topk_ids[k] = k == 0 && s % 3 ? 10 * s : 10 * s + k + 1;
            steps[s].topk_logprobs[k] = k == 0 && s % 3 ? steps[s].logprob
                                                        : random_logprob((uint64_t)s * 8 + 1 + k);
        }
    }
    assert_true(serve_result_finite(&r, K));
    serve_prompt prompt = {.len = 3};
    serve_completion c = {.prompts = &prompt, .n_prompts = 1, .max_tokens = STEPS, .logprobs = K};
    size_t len;
    char *text = written(&c, &r, &len);
    cJSON *root = cJSON_Parse(text);  // strict JSON: no bare -Infinity or NaN
    assert_non_null(root);
    cJSON_Delete(root);

    engine_step_record *back = test_alloc(STEPS * sizeof *back);
    test_poison(back, STEPS * sizeof *back);
    engine_result read = {.steps = back};
    probe_notes notes = {0};
    char err[256] = "";
    if (!probe_parse_completion(text, len, K + 1, STEPS, &read, &notes, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(read.n_steps, STEPS);
    for (int s = 0; s < STEPS; s++) {
        float want = isinf(steps[s].logprob) ? -9999.0f : steps[s].logprob;
        assert_int_equal(back[s].token, steps[s].token);
        if (bits_of(back[s].logprob) != bits_of(want))
            fail_msg("step %d: served %a, read back %a", s, (double)want, (double)back[s].logprob);
        // The sampled token is among the K + 1 entries read, with its own bits.
        bool found = false;
        for (int k = 0; k < K + 1; k++)
            if (back[s].topk_ids[k] == steps[s].token) {
                found = true;
                assert_int_equal(bits_of(back[s].topk_logprobs[k]), bits_of(want));
            }
        if (!found) fail_msg("step %d: sampled token %d not in top_logprobs", s, steps[s].token);
        for (int k = 0; k < K; k++) {
            float tw = isinf(steps[s].topk_logprobs[k]) ? -9999.0f : steps[s].topk_logprobs[k];
            bool same = false;
            for (int j = 0; j < K + 1; j++)
                same |= back[s].topk_ids[j] == steps[s].topk_ids[k] &&
                        bits_of(back[s].topk_logprobs[j]) == bits_of(tw);
            if (!same) fail_msg("step %d: top entry %d (%a) not read back", s, k, (double)tw);
        }
    }
    free(text);
    // NaN or +Infinity is an engine fault the response must not carry.
    steps[5].topk_logprobs[2] = NAN;
    assert_false(serve_result_finite(&r, K));
    assert_true(serve_result_finite(&r, 2));  // past the entries asked for: not served
    steps[5].topk_logprobs[2] = -1.0f;
    steps[9].logprob = INFINITY;
    assert_false(serve_result_finite(&r, 0));
    free(steps);
    free(back);
}

// text_offset[i] is where tokens[i] starts in text.
static void text_offsets_point_at_tokens(void **state) {
    (void)state;
    engine_step_record steps[5] = {0};
    int32_t ids[5] = {7, 12345, 0, 99, 100000};
    for (int s = 0; s < 5; s++) steps[s].token = ids[s];
    engine_result r = {.steps = steps, .n_steps = 5};
    serve_prompt prompt = {.len = 2};
    serve_completion c = {.prompts = &prompt, .n_prompts = 1, .max_tokens = 5, .logprobs = 0};
    size_t len;
    char *text = written(&c, &r, &len);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "choices"), 0);
    const char *t = cJSON_GetObjectItem(choice, "text")->valuestring;
    const cJSON *lp = cJSON_GetObjectItem(choice, "logprobs");
    const cJSON *tokens = cJSON_GetObjectItem(lp, "tokens");
    const cJSON *offsets = cJSON_GetObjectItem(lp, "text_offset");
    assert_int_equal(cJSON_GetArraySize(offsets), 5);
    for (int s = 0; s < 5; s++) {
        const char *tok = cJSON_GetArrayItem(tokens, s)->valuestring;
        int at = cJSON_GetArrayItem(offsets, s)->valueint;
        assert_true(at >= 0 && (size_t)at < strlen(t));
        if (strncmp(t + at, tok, strlen(tok)) != 0)
            fail_msg("token %d '%s' at offset %d of '%s'", s, tok, at, t);
    }
    cJSON_Delete(root);
    free(text);
}

static const serve_bounds bounds = {.model = "tiny", .vocab_size = 512, .max_model_len = 64};

static void refused(const char *body, size_t len, const serve_bounds *b, int status,
                    const char *reason) {
    serve_completion c;
    serve_error e = {0};
    if (serve_completion_parse(body, len, b, &c, &e)) fail_msg("accepted: %.*s", (int)len, body);
    assert_int_equal(e.status, status);
    if (!strstr(e.message, reason)) fail_msg("%.*s: '%s', expected '%s'", (int)len, body, e.message, reason);
    // The error body is JSON whatever the request held.
    char *text = NULL;
    size_t n;
    FILE *f = open_memstream(&text, &n);
    serve_write_error(f, &e);
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    if (!root) fail_msg("error body is not JSON: %s", text);
    cJSON_Delete(root);
    free(text);
}

static serve_completion accepted(const char *body, const serve_bounds *b) {
    serve_completion c;
    serve_error e = {0};
    if (!serve_completion_parse(body, strlen(body), b, &c, &e)) fail_msg("%s: %s", body, e.message);
    return c;
}

static void requests_one_object_nothing_ignored(void **state) {
    (void)state;
    const char *ok = "{\"prompt\":[1,2,3],\"max_tokens\":4}";
    serve_completion c = accepted(ok, &bounds);
    assert_int_equal(c.max_tokens, 4);
    serve_completion_free(&c);
    // Not one JSON object.
    char two[128];
    snprintf(two, sizeof two, "%s%s", ok, ok);
    refused(two, strlen(two), &bounds, 400, "not one JSON object");
    snprintf(two, sizeof two, "%s garbage", ok);
    refused(two, strlen(two), &bounds, 400, "bytes follow it");
    memcpy(two, ok, strlen(ok));
    two[strlen(ok) - 1] = '\0';  // a NUL where the closing brace was, then the brace
    two[strlen(ok)] = '}';
    refused(two, strlen(ok) + 1, &bounds, 400, "not one JSON object");
    // Options that change the output: implemented or refused, never ignored.
    const char *options[] = {"\"stop\":[\"x\"]", "\"stop\":\"x\"", "\"stop_token_ids\":[3]",
                             "\"logit_bias\":{\"3\":5}", "\"frequency_penalty\":0.5",
                             "\"presence_penalty\":-1", "\"repetition_penalty\":1.2",
                             "\"min_p\":0.1", "\"suffix\":\"x\"", "\"prompt_logprobs\":2",
                             "\"n\":2", "\"top_p\":0.9"};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":[1,2],%s}", options[i]);
        refused(body, strlen(body), &bounds, 400, "not supported by invar serve");
    }
    const char *neutral[] = {"\"stop\":[]", "\"stop\":null", "\"stop\":\"\"", "\"stop_token_ids\":[]",
                             "\"logit_bias\":{}", "\"frequency_penalty\":0",
                             "\"repetition_penalty\":1", "\"min_p\":0", "\"suffix\":\"\"",
                             "\"min_tokens\":4"};
    for (size_t i = 0; i < sizeof neutral / sizeof neutral[0]; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"prompt\":[1,2],\"max_tokens\":4,%s}", neutral[i]);
        c = accepted(body, &bounds);
        serve_completion_free(&c);
    }
    const char *min_over = "{\"prompt\":[1,2],\"max_tokens\":4,\"min_tokens\":5}";
    refused(min_over, strlen(min_over), &bounds, 400, "min_tokens");
    // max_completion_tokens is max_tokens.
    c = accepted("{\"prompt\":[1,2],\"max_completion_tokens\":1}", &bounds);
    assert_int_equal(c.max_tokens, 1);
    serve_completion_free(&c);
    const char *both = "{\"prompt\":[1,2],\"max_tokens\":3,\"max_completion_tokens\":1}";
    refused(both, strlen(both), &bounds, 400, "differ");
    // A prompt over the step budget with chunked prefill off is the client's error (400).
    serve_bounds one_step = bounds;
    one_step.max_prompt_len = 4;
    const char *long_prompt = "{\"prompt\":[1,2,3,4,5]}";
    refused(long_prompt, strlen(long_prompt), &one_step, 400, "exceeds the step budget");
    c = accepted("{\"prompt\":[1,2,3,4]}", &one_step);
    serve_completion_free(&c);
    // A model name of invalid UTF-8 and control bytes: 404, its error body still JSON.
    const char *bad_model = "{\"prompt\":[1],\"model\":\"\xff\xfe\x1b[2J\"}";
    refused(bad_model, strlen(bad_model), &bounds, 404, "does not exist");
}

// A list of prompts is one choice per prompt, index i for prompt i, usage summed; a list holding
// something other than lists of ids is refused naming the entry.
static void prompt_lists_are_choices(void **state) {
    (void)state;
    serve_completion c = accepted("{\"prompt\":[[1,2,3],[4,5],[6]],\"max_tokens\":2}", &bounds);
    assert_int_equal(c.n_prompts, 3);
    assert_int_equal(c.prompts[0].len, 3);
    assert_int_equal(c.prompts[1].len, 2);
    assert_int_equal(c.prompts[2].tokens[0], 6);
    assert_int_equal(c.longest, 3);
    engine_step_record steps[3][2] = {{{.token = 11}, {.token = 12}}, {{.token = 21}, {.token = 22}},
                                      {{.token = 31}, {.token = 32}}};
    engine_result r[3];
    for (int i = 0; i < 3; i++) r[i] = (engine_result){.steps = steps[i], .n_steps = 2};
    char *text = NULL;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    serve_write_completion(f, &c, r, "tiny", 1, 5);
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *choices = cJSON_GetObjectItem(root, "choices");
    assert_int_equal(cJSON_GetArraySize(choices), 3);
    for (int i = 0; i < 3; i++) {
        const cJSON *ch = cJSON_GetArrayItem(choices, i);
        assert_int_equal(cJSON_GetObjectItem(ch, "index")->valueint, i);
        char want[64];
        snprintf(want, sizeof want, " token_id:%d token_id:%d", 10 * (i + 1) + 1, 10 * (i + 1) + 2);
        assert_string_equal(cJSON_GetObjectItem(ch, "text")->valuestring, want);
    }
    const cJSON *usage = cJSON_GetObjectItem(root, "usage");
    assert_int_equal(cJSON_GetObjectItem(usage, "prompt_tokens")->valueint, 6);
    assert_int_equal(cJSON_GetObjectItem(usage, "completion_tokens")->valueint, 6);
    cJSON_Delete(root);
    free(text);
    serve_completion_free(&c);
    const char *mixed = "{\"prompt\":[[1,2],3]}";
    refused(mixed, strlen(mixed), &bounds, 400, "'prompt[1]' must be a list of token ids");
    const char *empty = "{\"prompt\":[[1,2],[]]}";
    refused(empty, strlen(empty), &bounds, 400, "'prompt[1]' is empty");
}

// stream: true gives server-sent events whose chunks, put back together, are the whole answer:
// the same tokens, the same logprob texts (so bits), offsets into the whole text, one final
// chunk a choice with finish_reason, then [DONE].
static void streamed_events_are_the_answer(void **state) {
    (void)state;
    serve_completion c = accepted("{\"prompt\":[[1,2,3],[4,5]],\"max_tokens\":3,\"logprobs\":2,"
                                  "\"stream\":true}", &bounds);
    assert_true(c.stream);
    engine_step_record steps[2][3];
    engine_result r[2];
    for (int i = 0; i < 2; i++) {
        for (int s = 0; s < 3; s++) {
            steps[i][s] = (engine_step_record){.token = 100 * i + 7 * s + 1,
                                               .logprob = random_logprob((uint64_t)(i * 10 + s))};
            for (int k = 0; k < 2; k++) {
                steps[i][s].topk_ids[k] = 100 * i + 7 * s + 1 + k;
                steps[i][s].topk_logprobs[k] = k ? random_logprob((uint64_t)(i * 10 + s + 50))
                                                 : steps[i][s].logprob;
            }
        }
        r[i] = (engine_result){.steps = steps[i], .n_steps = 3};
    }
    char *whole = NULL, *events = NULL;
    size_t len;
    FILE *f = open_memstream(&whole, &len);
    serve_write_completion(f, &c, r, "tiny", 3, 9);
    fclose(f);
    f = open_memstream(&events, &len);
    serve_write_completion_events(f, &c, r, "tiny", 3, 9);
    fclose(f);
    cJSON *root = cJSON_Parse(whole);
    const cJSON *choices = cJSON_GetObjectItem(root, "choices");
    // The number texts are the same as the whole answer's (bits, not just values); checked
    // before the events are cut into lines below.
    for (int i = 0; i < 2; i++)
        for (int s = 0; s < 3; s++) {
            char text[64];
            snprintf(text, sizeof text, "%.9g", (double)steps[i][s].logprob);
            if (!isinf(steps[i][s].logprob) && !strstr(events, text)) fail_msg("%s not streamed", text);
        }
    int seen[2] = {0, 0}, finals = 0;
    char *line = events, *done = strstr(events, "data: [DONE]\n\n");
    assert_non_null(done);
    assert_true(done[14] == '\0');  // [DONE] ends the stream
    while (line < done) {
        assert_int_equal(strncmp(line, "data: ", 6), 0);
        char *end = strstr(line, "\n\n");
        *end = '\0';
        cJSON *ev = cJSON_Parse(line + 6);
        if (!ev) fail_msg("not a JSON event: %s", line + 6);
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(ev, "choices"), 0);
        int i = cJSON_GetObjectItem(ch, "index")->valueint, s = seen[i]++;
        const cJSON *want = cJSON_GetObjectItem(cJSON_GetArrayItem(choices, i), "logprobs");
        const cJSON *got = cJSON_GetObjectItem(ch, "logprobs");
        const char *lists[] = {"tokens", "token_logprobs", "text_offset"};
        for (int k = 0; k < 3; k++) {
            char *a = cJSON_PrintUnformatted(cJSON_GetArrayItem(cJSON_GetObjectItem(want, lists[k]), s));
            char *b = cJSON_PrintUnformatted(cJSON_GetArrayItem(cJSON_GetObjectItem(got, lists[k]), 0));
            if (strcmp(a, b) != 0) fail_msg("choice %d step %d %s: %s vs %s", i, s, lists[k], a, b);
            free(a);
            free(b);
        }
        const cJSON *fin = cJSON_GetObjectItem(ch, "finish_reason");
        finals += cJSON_IsString(fin);
        assert_true(cJSON_IsString(fin) == (s == 2));
        cJSON_Delete(ev);
        line = end + 2;
    }
    assert_int_equal(seen[0], 3);
    assert_int_equal(seen[1], 3);
    assert_int_equal(finals, 2);
    cJSON_Delete(root);
    free(whole);
    free(events);
    serve_completion_free(&c);
    refused("{\"prompt\":[1],\"stream\":1}", 25, &bounds, 400, "'stream' must be true or false");
}

// A random well-formed head: a token method, a target, HTTP/1.0 or 1.1, headers of token names
// and printable values (tabs and obs-text too), CRLF or bare LF line ends, empty lines first.
static size_t random_head(uint64_t *r, char *out, size_t cap) {
    static const char tchars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                 "!#$%&'*+-.^_`|~";
    size_t n = 0;
#define PUT(c) (n < cap ? (void)(out[n++] = (char)(c)) : (void)0)
#define NEXT() (*r = invar_mix64(*r + 0x9e3779b97f4a7c15ull))
#define EOL() (NEXT() % 2 ? (PUT('\r'), PUT('\n')) : PUT('\n'))
    for (uint64_t k = NEXT() % 3; k > 0; k--) EOL();
    for (uint64_t k = 1 + NEXT() % 7; k > 0; k--) PUT(tchars[NEXT() % (sizeof tchars - 1)]);
    PUT(' ');
    PUT('/');
    for (uint64_t k = NEXT() % 40; k > 0; k--) PUT(33 + NEXT() % 94);  // visible, no spaces
    const char *version = NEXT() % 2 ? " HTTP/1.1" : " HTTP/1.0";
    for (const char *v = version; *v; v++) PUT(*v);
    EOL();
    for (uint64_t h = NEXT() % 12; h > 0; h--) {
        for (uint64_t k = 1 + NEXT() % 20; k > 0; k--) PUT(tchars[NEXT() % (sizeof tchars - 1)]);
        PUT(':');
        for (uint64_t k = NEXT() % 60; k > 0; k--) {
            uint64_t c = NEXT() % 100;
            PUT(c < 4 ? '\t' : c < 8 ? 0x80 + NEXT() % 128 : 32 + NEXT() % 95);
        }
        EOL();
    }
    EOL();
#undef PUT
#undef NEXT
#undef EOL
    return n;
}

static void head_refused(const char *head, size_t len, int status, const char *why) {
    serve_error e;
    serve_head got = serve_head_check(head, len, &e);
    if (got != SERVE_HEAD_REFUSED || e.status != status)
        fail_msg("'%.60s': verdict %d status %d, expected refused with %d", head, (int)got,
                 got == SERVE_HEAD_REFUSED ? e.status : 0, status);
    if (!strstr(e.message, why)) fail_msg("'%.60s': message '%s' lacks '%s'", head, e.message, why);
}

static void heads_judged_as_the_http_layer_would(void **state) {
    (void)state;
    uint64_t r = seed;
    char head[4096];
    for (int t = 0; t < 300; t++) {
        size_t n = random_head(&r, head, sizeof head);
        serve_error e = {.status = -1};
        for (size_t cut = 0; cut < n; cut++)  // never judged before its last byte
            if (serve_head_check(head, cut, &e) != SERVE_HEAD_INCOMPLETE)
                fail_msg("head %d judged %d at %zu of %zu bytes (%s): '%.*s'", t,
                         (int)serve_head_check(head, cut, &e), cut, n, e.message, (int)n, head);
        if (serve_head_check(head, n, &e) != SERVE_HEAD_GOOD)
            fail_msg("head %d refused (%s): '%.*s'", t, e.message, (int)n, head);
        // A body or a pipelined request after the head is not the head's business.
        memcpy(head + n, "\x01garbage", 8);
        assert_int_equal(serve_head_check(head, n + 8, &e), SERVE_HEAD_GOOD);
    }
#define REFUSED(h, status, why) head_refused(h, sizeof h - 1, status, why)
    REFUSED("GARBAGE\r\n", 400, "expected METHOD TARGET");
    REFUSED("GET /x\r\n", 400, "HTTP/0.9");
    REFUSED("GET  HTTP/1.1\r\n", 400, "not METHOD TARGET");
    REFUSED(" GET /x HTTP/1.1\r\n", 400, "expected METHOD TARGET");
    REFUSED("G(T /x HTTP/1.1\r\n", 400, "method is not a token");
    REFUSED("GET /x\x01 HTTP/1.1\r\n", 400, "control character");
    REFUSED("GET /x HTTP/1.1\rHost: y\r\n\r\n", 400, "control character");  // a lone CR
    REFUSED("GET /x HTTP/x.y\r\n", 400, "malformed HTTP version");
    REFUSED("GET /x HTTP/1.10\r\n", 400, "malformed HTTP version");
    REFUSED("GET /x http/1.1\r\n", 400, "malformed HTTP version");
    REFUSED("GET /x HTTP/2.0\r\n", 505, "not supported");
    REFUSED("GET /x HTTP/0.9\r\n", 505, "not supported");
    REFUSED("GET /x HTTP/1.1\r\nno colon\r\n\r\n", 400, "has no colon");
    REFUSED("GET /x HTTP/1.1\r\nHost : y\r\n\r\n", 400, "not a token");
    REFUSED("GET /x HTTP/1.1\r\n: y\r\n\r\n", 400, "empty name");
    REFUSED("GET /x HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400, "folded");
    REFUSED("GET /x HTTP/1.1\r\nA: b\x00c\r\n\r\n", 400, "control character");
    REFUSED("POST /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, "not a number");
    REFUSED("POST /x HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "not a number");
    REFUSED("POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "not a number");
    REFUSED("POST /x HTTP/1.1\r\ncontent-length: 18446744073709551616\r\n\r\n", 413, "64 bits");
    REFUSED("POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400, "disagree");
    REFUSED("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411, "Content-Length");
    REFUSED("POST /x HTTP/1.1\r\nTRANSFER-ENCODING: gzip\r\n\r\n", 411, "Content-Length");
    REFUSED("POST /x HTTP/1.1\r\nContent-Length: 2 \r\n\r\n", 400, "blanks after");
    REFUSED("POST /x HTTP/1.1\r\nContent-Length: 2\t\r\n\r\n", 400, "blanks after");
#undef REFUSED
    serve_error e;
    // The largest number 64 bits hold, the same length twice, blanks around a value (not after
    // a Content-Length, which the HTTP library refuses): good.
    const char *good[] = {
        "POST /x HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n",
        "POST /x HTTP/1.1\r\nContent-Length: 7\r\ncontent-length:7\r\n\r\n",
        "GET /x  HTTP/1.1\r\nHost:\t y \t\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (serve_head_check(good[i], strlen(good[i]), &e) != SERVE_HEAD_GOOD)
            fail_msg("'%s' refused: %s", good[i], e.message);
    // Header fields, query arguments and cookies: SERVE_GATE_MAX_RECORDS in all, one more 431.
    char *many = test_alloc(SERVE_GATE_MAX_HEAD);
    for (int extra = 0; extra <= 1; extra++) {
        // 100 query arguments, a Cookie field of 200 pairs (201 records), then plain fields
        int fields = SERVE_GATE_MAX_RECORDS - 100 - 201 + extra;
        size_t at = (size_t)sprintf(many, "GET /x?a");
        for (int i = 1; i < 100; i++) at += (size_t)sprintf(many + at, "&a");
        at += (size_t)sprintf(many + at, " HTTP/1.1\r\nCookie: c=1");
        for (int i = 1; i < 200; i++) at += (size_t)sprintf(many + at, "; c=1");
        at += (size_t)sprintf(many + at, "\r\n");
        for (int i = 0; i < fields; i++) at += (size_t)sprintf(many + at, "X%d:v\r\n", i);
        at += (size_t)sprintf(many + at, "\r\n");
        serve_head got = serve_head_check(many, at, &e);
        if (got != (extra ? SERVE_HEAD_REFUSED : SERVE_HEAD_GOOD) || (extra && e.status != 431))
            fail_msg("%d records: verdict %d (%s)", SERVE_GATE_MAX_RECORDS + extra, (int)got,
                     got == SERVE_HEAD_REFUSED ? e.message : "");
    }
    free(many);
    // A bad line is refused as soon as it is whole, before the head ends.
    const char *early = "GET /x HTTP/9.9\r\nHost: y\r\n";
    assert_int_equal(serve_head_check(early, 17, &e), SERVE_HEAD_REFUSED);
    assert_int_equal(serve_head_check(early, 16, &e), SERVE_HEAD_INCOMPLETE);
    // Too large: 414 in the request line, 431 after it, at exactly one byte past the limit.
    size_t big = SERVE_GATE_MAX_HEAD + 1;
    char *b = test_alloc(big + 64);
    memset(b, 'a', big + 64);
    memcpy(b, "GET /", 5);
    assert_int_equal(serve_head_check(b, big - 1, &e), SERVE_HEAD_INCOMPLETE);
    head_refused(b, big, 414, "request line is longer");
    size_t at = (size_t)sprintf(b, "GET /x HTTP/1.1\r\nX: ");
    memset(b + at, 'a', big + 64 - at);
    assert_int_equal(serve_head_check(b, big - 1, &e), SERVE_HEAD_INCOMPLETE);
    head_refused(b, big, 431, "request head is longer");
    memcpy(b + big - 5, "\r\n\r\n", 4);  // ends exactly at the limit: good
    assert_int_equal(serve_head_check(b, big - 1, &e), SERVE_HEAD_GOOD);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(served_logprobs_read_back_bit_for_bit),
        cmocka_unit_test(text_offsets_point_at_tokens),
        cmocka_unit_test(requests_one_object_nothing_ignored),
        cmocka_unit_test(prompt_lists_are_choices),
        cmocka_unit_test(streamed_events_are_the_answer),
        cmocka_unit_test(heads_judged_as_the_http_layer_would),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
