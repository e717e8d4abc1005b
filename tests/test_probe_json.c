// tests/test_probe_json.c — reading /v1/completions answers into records (harness/probe/probe_json.h)
// and invar's own JSON writer (harness/json_writer.h), which `invar serve` answers with.
//
// probe compares logprobs as float32 bits, so what matters is that each number's bits are
// exactly strtof() of its JSON text. Reading through a double and then casting to float rounds
// twice, and for a decimal just past the midpoint between two floats the double lands on the
// midpoint and the cast rounds it to the even neighbour: the wrong float. Such texts are built
// here on purpose (thousands, from a seeded RNG), so a reader that goes through double fails.
// The seed is printed; INVAR_TEST_SEED=N repeats a run.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <ctype.h>    // isdigit
#include <float.h>    // FLT_MAX, FLT_MIN, FLT_TRUE_MIN
#include <inttypes.h> // PRId64
#include <math.h>     // isnan, isinf, nextafterf, INFINITY
#include <stdio.h>    // open_memstream, snprintf, fprintf
#include <stdlib.h>   // strtof, strtod, strtoll, getenv, free
#include <string.h>   // memcpy, memset, strlen, strstr
#include <time.h>     // time
#include <unistd.h>   // getpid

#include <cjson/cJSON.h>             // cJSON_Parse, to read back json_write_string's output

#include "../common/hash.h"          // invar_mix64
#include "../harness/json_writer.h"  // json_write_string, json_write_float, json_write_int
#include "../harness/probe/probe_json.h" // probe_parse_completion, probe_quote_numbers, ...
#include "test_util.h"               // test_alloc, test_poison

static uint64_t seed_base;

static int setup(void **state) {
    (void)state;
    const char *fixed = getenv("INVAR_TEST_SEED");
    seed_base = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_probe_json: seed %llu (INVAR_TEST_SEED repeats it)\n",
           (unsigned long long)seed_base);
    return 0;
}

// Random 64-bit value number `i` of stream `stream`.
static uint64_t random_u64(uint64_t stream, uint64_t i) {
    return invar_mix64(seed_base ^ invar_mix64(stream * 0x100000001b3ull + i));
}

static uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float float_of(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

// ---------------------------------------------------------------------------------------------
// Building answers
// ---------------------------------------------------------------------------------------------

// One step of an answer, as JSON texts: the token (a JSON value: "\"token_id:5\"", "7"), its
// logprob, and its top_logprobs object members (keys are token names, values JSON texts).
typedef struct {
    const char *token;
    const char *logprob;
    int n_top;
    const char *top_keys[4];
    const char *top_values[4];
} answer_step;

// An OpenAI /v1/completions answer with the steps' texts put in as they are (a malloc'd string).
static char *completion_body(const answer_step *steps, int n, bool with_top) {
    char *body;
    size_t len;
    FILE *f = open_memstream(&body, &len);
    assert_non_null(f);
    fputs("{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,"
          "\"text\":\"x 1.5 -2 \\\"NaN\\\"\",\"logprobs\":{\"tokens\":[", f);
    for (int s = 0; s < n; s++) fprintf(f, "%s%s", s ? "," : "", steps[s].token);
    fputs("],\"token_logprobs\":[", f);
    for (int s = 0; s < n; s++) fprintf(f, "%s%s", s ? "," : "", steps[s].logprob);
    if (with_top) {
        fputs("],\"top_logprobs\":[", f);
        for (int s = 0; s < n; s++) {
            fputs(s ? ",{" : "{", f);
            for (int k = 0; k < steps[s].n_top; k++) {
                fputs(k ? "," : "", f);
                json_write_string(f, steps[s].top_keys[k]);
                fprintf(f, ":%s", steps[s].top_values[k]);
            }
            fputc('}', f);
        }
    }
    fputs("],\"text_offset\":[0]},\"finish_reason\":\"length\"}],"
          "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}", f);
    fclose(f);
    return body;
}

// Room for n records, poisoned: a record the parser did not write stays all ones.
static engine_result poisoned_result(int n) {
    engine_step_record *steps = test_alloc((size_t)n * sizeof *steps);
    test_poison(steps, (size_t)n * sizeof *steps);
    return (engine_result){.steps = steps};
}

static bool parse(const char *body, int top_k, int max_steps, engine_result *res,
                  probe_notes *notes, char *err, int err_len) {
    memset(notes, 0, sizeof *notes);
    err[0] = '\0';
    return probe_parse_completion(body, strlen(body), top_k, max_steps, res, notes, err, err_len);
}

// The float strtof reads from the text: what every logprob must be, bit for bit.
static uint32_t strtof_bits(const char *text) { return bits_of(strtof(text, NULL)); }

// ---------------------------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------------------------

// A decimal just past the midpoint between float f (even significand) and its neighbour away
// from zero: strtof gives the neighbour; strtod gives the midpoint exactly and the cast to float
// rounds that tie to even, to f. Written in `out` (room for 128 bytes).
static void past_midpoint_text(float f, char *out) {
    double mid = ((double)f + (double)nextafterf(f, f < 0 ? -INFINITY : INFINITY)) / 2;
    // 80 significant digits: the midpoint is a dyadic rational with at most ~75 of them here,
    // so glibc prints it exactly and the tail is zeros; the last one becomes a 1.
    snprintf(out, 128, "%.79e", mid);
    char *e = strchr(out, 'e');
    assert_non_null(e);
    assert_true(e[-1] == '0' && e[-2] == '0' && e[-3] == '0');  // exact: zeros to spare
    e[-1] = '1';
}

static void double_rounding_texts_read_as_strtof(void **state) {
    (void)state;
    enum { N = 3000 };
    char (*texts)[128] = test_alloc(N * sizeof *texts);
    char (*names)[32] = test_alloc(N * sizeof *names);
    answer_step *steps = test_alloc(N * sizeof *steps);
    int told_apart = 0;
    for (int i = 0; i < N; i++) {
        uint64_t r = random_u64(1, (uint64_t)i);
        // Logprob-like: negative mostly, binary exponents -30 .. 30, significand even.
        int exponent = (int)(r % 61) - 30;
        uint32_t bits = (uint32_t)(exponent + 127) << 23 | ((uint32_t)(r >> 8) & 0x7ffffeu) |
                        (r & 0x10000000000ull ? 0u : 0x80000000u);
        float f = float_of(bits);
        past_midpoint_text(f, texts[i]);
        // The text really tells the two readings apart (else the test proves nothing).
        float through_double = (float)strtod(texts[i], NULL);
        if (bits_of(through_double) != strtof_bits(texts[i])) told_apart++;
        snprintf(names[i], sizeof names[i], "token_id:%d", i);
        steps[i] = (answer_step){.token = "\"token_id:1\"", .logprob = texts[i], .n_top = 1,
                                 .top_keys = {names[i]}, .top_values = {texts[i]}};
    }
    assert_int_equal(told_apart, N);
    char *body = completion_body(steps, N, true);
    engine_result res = poisoned_result(N);
    probe_notes notes;
    char err[256];
    if (!parse(body, 1, N, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, N);
    for (int i = 0; i < N; i++) {
        if (bits_of(res.steps[i].logprob) != strtof_bits(texts[i]))
            fail_msg("token_logprobs[%d] = %s read as %a, strtof gives %a", i, texts[i],
                     (double)res.steps[i].logprob, (double)strtof(texts[i], NULL));
        if (bits_of(res.steps[i].topk_logprobs[0]) != strtof_bits(texts[i]))
            fail_msg("top_logprobs[%d] = %s read as %a, strtof gives %a", i, texts[i],
                     (double)res.steps[i].topk_logprobs[0], (double)strtof(texts[i], NULL));
        assert_int_equal(res.steps[i].topk_ids[0], i);
    }
    // 80 digits is more than a float32 carries: every value is noted (logprob and top entry).
    assert_int_equal(notes.values, 2 * N);
    assert_int_equal(notes.wider_than_float32, 2 * N);
    assert_int_equal(notes.non_finite, 0);
    free(body);
    free(res.steps);
    free(steps);
    free(names);
    free(texts);
}

// A random finite float32: any bit pattern, every tenth a subnormal, and the extremes.
static float random_finite_float(uint64_t stream, int i) {
    static const float extremes[] = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                                     FLT_TRUE_MIN, -FLT_TRUE_MIN, 1.0f, -1.0f};
    enum { N_EXTREMES = sizeof extremes / sizeof extremes[0] };
    if (i < N_EXTREMES) return extremes[i];
    for (uint64_t k = 0;; k++) {
        uint32_t bits = (uint32_t)random_u64(stream, (uint64_t)i * 64 + k);
        if (i % 10 == 0) bits &= 0x807fffffu;  // exponent 0: subnormal (or zero)
        float f = float_of(bits);
        if (isfinite(f)) return f;
    }
}

// What servers write of float32 values: %.9g (invar serve) and %.17g of the value widened to
// double (Python's json of a float32 turned into a float). Both are exactly the float: bit-exact
// and not noted as wider than a float32.
static void float32_texts_read_back_exact(void **state) {
    (void)state;
    enum { N = 4000 };
    char (*texts)[2][40] = test_alloc(N * sizeof *texts);
    float *values = test_alloc(N * sizeof *values);
    answer_step *steps = test_alloc(N * sizeof *steps);
    for (int i = 0; i < N; i++) {
        values[i] = random_finite_float(2, i);
        snprintf(texts[i][0], sizeof texts[i][0], "%.9g", (double)values[i]);
        snprintf(texts[i][1], sizeof texts[i][1], "%.17g", (double)values[i]);
        steps[i] = (answer_step){.token = "\"token_id:3\"", .logprob = texts[i][0], .n_top = 2,
                                 .top_keys = {"token_id:1", "token_id:2"},
                                 .top_values = {texts[i][1], texts[i][1]}};
    }
    char *body = completion_body(steps, N, true);
    engine_result res = poisoned_result(N);
    probe_notes notes;
    char err[256];
    if (!parse(body, 2, N, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, N);
    for (int i = 0; i < N; i++) {
        const engine_step_record *rec = &res.steps[i];
        if (bits_of(rec->logprob) != bits_of(values[i]))
            fail_msg("%s read as %a, written from %a", texts[i][0], (double)rec->logprob,
                     (double)values[i]);
        // Equal logprobs: ordered by id.
        assert_int_equal(rec->token, 3);
        assert_int_equal(rec->topk_ids[0], 1);
        assert_int_equal(rec->topk_ids[1], 2);
        for (int k = 0; k < 2; k++)
            if (bits_of(rec->topk_logprobs[k]) != bits_of(values[i]))
                fail_msg("%s read as %a, written from %a", texts[i][1],
                         (double)rec->topk_logprobs[k], (double)values[i]);
    }
    assert_int_equal(notes.values, 3 * N);
    assert_int_equal(notes.wider_than_float32, 0);
    assert_int_equal(notes.non_finite, 0);
    assert_int_equal(notes.text_tokens, 0);
    assert_int_equal(notes.short_top, 0);
    free(body);
    free(res.steps);
    free(steps);
    free(values);
    free(texts);
}

// A server computing in double writes values no float32 holds: each is read as strtof's nearest
// float and noted. A short decimal that is not exactly a float ("-0.1") carries no more than a
// float32 does and is not noted.
// Digits of a decimal's significand, leading and trailing zeros left out.
static int significant_digits(const char *text) {
    int digits = 0, trailing_zeros = 0;
    for (const char *p = text; *p && *p != 'e' && *p != 'E'; p++) {
        if (!isdigit((unsigned char)*p) || (digits == 0 && *p == '0')) continue;
        digits++;
        trailing_zeros = *p == '0' ? trailing_zeros + 1 : 0;
    }
    return digits - trailing_zeros;
}

static void double_values_noted_as_wider(void **state) {
    (void)state;
    enum { N = 2000 };
    char (*texts)[40] = test_alloc(N * sizeof *texts);
    answer_step *steps = test_alloc(N * sizeof *steps);
    for (int i = 0; i < N; i++) {
        // A random negative double in (-32, 0) with a full 53-bit significand: never a float.
        double d;
        do {
            uint64_t r = random_u64(3, (uint64_t)i);
            d = -32.0 * (double)((r >> 11) | 1) / 9007199254740992.0;
        } while ((double)(float)d == d);
        snprintf(texts[i], sizeof texts[i], "%.17g", d);
        steps[i] = (answer_step){.token = "\"token_id:0\"", .logprob = texts[i]};
    }
    // Short decimals that are no float, last: not noted.
    const char *short_texts[] = {"-0.1", "-2.3", "-1e-3", "-0.333333333"};
    enum { N_SHORT = sizeof short_texts / sizeof short_texts[0] };
    for (int i = 0; i < N_SHORT; i++)
        steps[N - N_SHORT + i] = (answer_step){.token = "\"token_id:0\"", .logprob = short_texts[i]};
    char *body = completion_body(steps, N, false);
    engine_result res = poisoned_result(N);
    probe_notes notes;
    char err[256];
    if (!parse(body, 0, N, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, N);
    long expected_wider = 0;
    for (int i = 0; i < N; i++) {
        const char *text = steps[i].logprob;
        if (bits_of(res.steps[i].logprob) != strtof_bits(text))
            fail_msg("%s read as %a, strtof gives %a", text, (double)res.steps[i].logprob,
                     (double)strtof(text, NULL));
        expected_wider += significant_digits(text) > 9;
    }
    assert_true(expected_wider > N - N_SHORT - 20);  // %.17g rarely drops to <= 10 digits
    assert_int_equal(notes.values, N);
    assert_int_equal(notes.wider_than_float32, expected_wider);
    free(body);
    free(res.steps);
    free(steps);
    free(texts);
}

// Python's json writes -Infinity, Infinity and NaN outside strings. -Infinity is read (a top
// entry of probability 0) and counted as non-finite; NaN and Infinity are no log-probabilities
// and refuse the answer, naming the value. Inside strings the same texts are token texts.
static void python_non_finite_literals(void **state) {
    (void)state;
    answer_step steps[] = {
        {.token = "\"token_id:4\"", .logprob = "-Infinity", .n_top = 2,
         .top_keys = {"token_id:9", "token_id:4"}, .top_values = {"-0.5", "-Infinity"}},
        {.token = "\"NaN\"", .logprob = "-1.25", .n_top = 2,
         .top_keys = {"-Infinity", "token_id:2"}, .top_values = {"-1.25", "-2"}},
    };
    char *body = completion_body(steps, 2, true);
    engine_result res = poisoned_result(2);
    probe_notes notes;
    char err[256];
    if (!parse(body, 3, 2, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, 2);
    const engine_step_record *r = res.steps;
    assert_true(isinf(r[0].logprob) && r[0].logprob < 0);
    assert_int_equal(r[0].token, 4);
    assert_int_equal(r[0].topk_ids[0], 9);  // -0.5 before -Infinity
    assert_true(r[0].topk_logprobs[0] == -0.5f);
    assert_int_equal(r[0].topk_ids[1], 4);
    assert_true(isinf(r[0].topk_logprobs[1]) && r[0].topk_logprobs[1] < 0);
    assert_int_equal(r[0].topk_ids[2], -1);  // asked for 3, got 2: the missing one
    assert_true(isinf(r[0].topk_logprobs[2]) && r[0].topk_logprobs[2] < 0);
    // The texts "NaN" (token) and "-Infinity" (top key) are token texts, hashed, never numbers.
    assert_true(r[1].token >= 0);
    assert_true(r[1].logprob == -1.25f);
    assert_true(r[1].topk_ids[0] >= 0 && r[1].topk_ids[0] != 2);
    assert_int_equal(r[1].topk_ids[1], 2);
    assert_int_equal(notes.values, 6);
    assert_int_equal(notes.non_finite, 2);  // -Inf, -Inf
    assert_int_equal(notes.wider_than_float32, 0);
    assert_int_equal(notes.text_tokens, 2);
    assert_int_equal(notes.short_top, 2);
    free(body);
    free(res.steps);

    const char *refused[][2] = {{"NaN", "is NaN"}, {"Infinity", "is Infinity"}};
    for (int k = 0; k < 2; k++) {
        answer_step one[] = {{.token = "\"token_id:4\"", .logprob = refused[k][0], .n_top = 1,
                              .top_keys = {"token_id:4"}, .top_values = {"-1"}}};
        body = completion_body(one, 1, true);
        res = poisoned_result(1);
        assert_false(parse(body, 1, 1, &res, &notes, err, sizeof err));
        if (!strstr(err, refused[k][1])) fail_msg("%s: %s", refused[k][0], err);
        assert_int_equal(res.n_steps, 0);
        free(body);
        free(res.steps);
        one[0].logprob = "-1";  // the same value in the top entry
        one[0].top_values[0] = refused[k][0];
        body = completion_body(one, 1, true);
        res = poisoned_result(1);
        assert_false(parse(body, 1, 1, &res, &notes, err, sizeof err));
        if (!strstr(err, refused[k][1])) fail_msg("top %s: %s", refused[k][0], err);
        free(body);
        free(res.steps);
    }
}

// ---------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------

// "token_id:N" is N; a bare number is itself; any other text is a 31-bit hash of the text, the
// same for the same text, counted in the notes. Top entries come out by logprob, then id.
static void token_names(void **state) {
    (void)state;
    enum { N = 200 };
    char (*names)[3][40] = test_alloc(N * sizeof *names);
    char (*tokens)[40] = test_alloc(N * sizeof *tokens);
    int32_t *ids = test_alloc(N * sizeof *ids);
    answer_step *steps = test_alloc(N * sizeof *steps);
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)(random_u64(4, (uint64_t)i) & 0x7fffffff);
        // Alternate "token_id:N" and bare numbers for the sampled token.
        if (i % 2) snprintf(tokens[i], sizeof tokens[i], "\"token_id:%d\"", ids[i]);
        else snprintf(tokens[i], sizeof tokens[i], "%d", ids[i]);
        snprintf(names[i][0], sizeof names[i][0], "token_id:%d", ids[i]);
        snprintf(names[i][1], sizeof names[i][1], "token_id:%d", i);
        snprintf(names[i][2], sizeof names[i][2], " text%d", i);  // a token's text
        steps[i] = (answer_step){.token = tokens[i], .logprob = "-0.25", .n_top = 3,
                                 .top_keys = {names[i][1], names[i][2], names[i][0]},
                                 .top_values = {"-3", "-2", "-0.25"}};
    }
    char *body = completion_body(steps, N, true);
    engine_result res = poisoned_result(N);
    probe_notes notes;
    char err[256];
    if (!parse(body, 3, N, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, N);
    int32_t text_id_of_step0 = res.steps[0].topk_ids[1];
    for (int i = 0; i < N; i++) {
        const engine_step_record *rec = &res.steps[i];
        assert_int_equal(rec->token, ids[i]);
        assert_int_equal(rec->topk_ids[0], ids[i]);      // -0.25
        assert_true(rec->topk_ids[1] >= 0);               // -2: the text's hash
        if (i > 0) assert_true(rec->topk_ids[1] != text_id_of_step0);  // other texts
        assert_int_equal(rec->topk_ids[2], i);            // -3
    }
    assert_int_equal(notes.text_tokens, N);
    // The same text hashes the same way in another answer.
    answer_step again = {.token = "\" text0\"", .logprob = "-1"};
    char *body2 = completion_body(&again, 1, false);
    engine_result res2 = poisoned_result(1);
    if (!parse(body2, 0, 1, &res2, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res2.steps[0].token, text_id_of_step0);
    assert_int_equal(notes.text_tokens, 1);
    // With top_k = 0 the record is still written whole (zeros where no top entry was asked).
    assert_int_equal(test_count_poisoned(res2.steps[0].topk_ids, sizeof(int32_t), ENGINE_MAX_TOPK), 0);
    free(body2);
    free(res2.steps);
    // A token whose text is a number ("42") is read the same way in the tokens array and as a
    // top_logprobs key: the sampled token and its top-1 entry agree.
    answer_step digits = {.token = "\"42\"", .logprob = "-0.5", .n_top = 1,
                          .top_keys = {"42"}, .top_values = {"-0.5"}};
    char *body3 = completion_body(&digits, 1, true);
    engine_result res3 = poisoned_result(1);
    if (!parse(body3, 1, 1, &res3, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res3.steps[0].token, res3.steps[0].topk_ids[0]);
    free(body3);
    free(res3.steps);
    free(body);
    free(res.steps);
    free(steps);
    free(ids);
    free(tokens);
    free(names);
}

// Without token ids, top_logprobs is keyed by text: two ids with one text are one entry, so
// fewer than top_k remain; the missing ones are token -1 with -Infinity, and noted.
static void text_keyed_top_logprobs_come_up_short(void **state) {
    (void)state;
    answer_step steps[] = {
        {.token = "\"a\"", .logprob = "-0.5", .n_top = 2, .top_keys = {"a", "b"},
         .top_values = {"-0.5", "-1.5"}},
        {.token = "\"b\"", .logprob = "-0.75", .n_top = 4, .top_keys = {"a", "b", "c", "d"},
         .top_values = {"-1", "-0.75", "-3", "-2"}},
    };
    char *body = completion_body(steps, 2, true);
    engine_result res = poisoned_result(2);
    probe_notes notes;
    char err[256];
    if (!parse(body, 4, 2, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    const engine_step_record *r = res.steps;
    assert_int_equal(r[0].topk_ids[0], r[0].token);  // "a" is the top and the sampled token
    assert_int_equal(r[1].topk_ids[0], r[1].token);  // "b"
    assert_int_equal(r[0].topk_ids[1], r[1].token);  // "b" in step 0 is "b" in step 1
    for (int k = 2; k < 4; k++) {
        assert_int_equal(r[0].topk_ids[k], -1);
        assert_true(isinf(r[0].topk_logprobs[k]) && r[0].topk_logprobs[k] < 0);
    }
    float want[4] = {-0.75f, -1.0f, -2.0f, -3.0f};
    for (int k = 0; k < 4; k++) assert_true(r[1].topk_logprobs[k] == want[k]);
    assert_int_equal(notes.short_top, 1);
    assert_int_equal(notes.text_tokens, 2 + 6);
    free(body);
    free(res.steps);
}

// ---------------------------------------------------------------------------------------------
// Bad answers: an error with a reason, never a crash
// ---------------------------------------------------------------------------------------------

static const char valid_body[] =
    "{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\",\"token_id:2\"],"
    "\"token_logprobs\":[-0.5,-1.25],\"top_logprobs\":[{\"token_id:1\":-0.5},"
    "{\"token_id:2\":-1.25,\"token_id:3\":-2}]}}]}";

static void expect_refused(const char *body, int top_k, int max_steps, const char *reason) {
    engine_result res = poisoned_result(4);
    probe_notes notes;
    char err[256];
    if (parse(body, top_k, max_steps, &res, &notes, err, sizeof err))
        fail_msg("accepted: %s", body);
    if (!strstr(err, reason)) fail_msg("%s: reason '%s', expected one with '%s'", body, err, reason);
    assert_int_equal(res.n_steps, 0);
    free(res.steps);
}

static void bad_answers_give_reasons(void **state) {
    (void)state;
    // The valid answer itself is read (the cases below differ from it in one thing).
    engine_result res = poisoned_result(2);
    probe_notes notes;
    char err[256];
    if (!parse(valid_body, 2, 2, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, 2);
    assert_int_equal(res.steps[1].topk_ids[1], 3);
    free(res.steps);

    expect_refused("", 2, 2, "malformed or truncated JSON");
    expect_refused("Internal Server Error", 2, 2, "malformed or truncated JSON");
    expect_refused("<html>502</html>", 2, 2, "malformed or truncated JSON");
    expect_refused("{}", 2, 2, "no choices[0]");
    expect_refused("[]", 2, 2, "no choices[0]");
    expect_refused("{\"choices\":[]}", 2, 2, "no choices[0]");
    expect_refused("{\"choices\":{\"a\":{}}}", 2, 2, "no choices[0]");
    expect_refused("{\"choices\":[3]}", 2, 2, "no choices[0]");
    expect_refused("{\"choices\":\"x\"}", 2, 2, "no choices[0]");
    expect_refused("{\"choices\":[{\"text\":\"x\"}]}", 2, 2, "logprobs is missing or null");
    expect_refused("{\"choices\":[{\"logprobs\":null}]}", 2, 2, "logprobs is missing or null");
    expect_refused("{\"choices\":[{\"logprobs\":[]}]}", 2, 2, "logprobs is missing or null");
    expect_refused("{\"choices\":[{\"logprobs\":{}}]}", 2, 2, "lacks the tokens");
    expect_refused("{\"choices\":[{\"logprobs\":{\"tokens\":[],\"token_logprobs\":{}}}]}", 0, 2,
                   "lacks the tokens");
    expect_refused("{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                   "\"token_logprobs\":[]}}]}", 0, 2, "differ in length");
    expect_refused("{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                   "\"token_logprobs\":[-1]}}]}", 1, 2, "differ in length");  // no top_logprobs
    expect_refused("{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                   "\"token_logprobs\":[-1],\"top_logprobs\":[]}}]}", 1, 2, "differ in length");
    expect_refused(valid_body, 2, 1, "2 tokens returned, max_tokens was 1");
    // Wrong types and texts that are no numbers or tokens, where the values go.
    // Numbers sent as strings, hex floats, C's spellings and JSON's forbidden forms included.
    const char *bad_logprobs[] = {"null", "true", "[1]", "{}", "\"abc\"", "\"\"", "-0.5x",
                                  "--1", "1.2.3", "-", "1e", "\"-0.5\"", "\"-1e-3\"",
                                  "0x1p-1", "-0x1.8p1", "-01", "-1.", "1e+", "-infinity",
                                  "-nan", "-0.5e", "\"NaN\"", "\"-Infinity\""};
    for (size_t i = 0; i < sizeof bad_logprobs / sizeof bad_logprobs[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                 "\"token_logprobs\":[%s]}}]}", bad_logprobs[i]);
        expect_refused(body, 0, 2, "token_logprobs[0] is not a number");
        snprintf(body, sizeof body, "{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                 "\"token_logprobs\":[-1],\"top_logprobs\":[{\"token_id:1\":%s}]}}]}",
                 bad_logprobs[i]);
        expect_refused(body, 1, 2, "top_logprobs[0]: entry 'token_id:1' is not a token and a number");
    }
    expect_refused("{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                   "\"token_logprobs\":[-1e99]}}]}", 0, 2, "token_logprobs[0] overflows float32");
    // One JSON value and nothing after it: trailing bytes, a second object, a NUL inside the
    // given length, a raw control byte inside a string.
    char two[512];
    snprintf(two, sizeof two, "%s%s", valid_body, valid_body);
    expect_refused(two, 2, 2, "bytes follow the answer's value");
    snprintf(two, sizeof two, "%s  x", valid_body);
    expect_refused(two, 2, 2, "bytes follow the answer's value");
    snprintf(two, sizeof two, "%s \n", valid_body);  // white space after it is fine
    engine_result ws = poisoned_result(2);
    if (!parse(two, 2, 2, &ws, &notes, err, sizeof err)) fail_msg("%s", err);
    free(ws.steps);
    size_t vlen = strlen(valid_body);
    memcpy(two, valid_body, vlen);
    two[vlen] = '\0';
    two[vlen + 1] = '{';
    ws = poisoned_result(2);
    assert_false(probe_parse_completion(two, vlen + 2, 2, 2, &ws, &notes, err, sizeof err));
    free(ws.steps);
    expect_refused("{\"choices\":[{\"text\":\"a\x01-1\",\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                   "\"token_logprobs\":[-1]}}]}", 0, 2, "raw control character");
    const char *bad_tokens[] = {"null", "true", "[]", "{}", "-3", "\"token_id:\"",
                                "\"token_id:x\"", "\"token_id:-3\"", "\"token_id:12x\"",
                                "\"token_id:99999999999\"", "99999999999"};
    for (size_t i = 0; i < sizeof bad_tokens / sizeof bad_tokens[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"choices\":[{\"logprobs\":{\"tokens\":[%s],"
                 "\"token_logprobs\":[-1]}}]}", bad_tokens[i]);
        expect_refused(body, 0, 2, "tokens[0] is not a token");
    }
    expect_refused("{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                   "\"token_logprobs\":[-1],\"top_logprobs\":[{\"token_id:x\":-1}]}}]}", 1, 2,
                   "top_logprobs[0]: entry 'token_id:x'");
    expect_refused("{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:1\"],"
                   "\"token_logprobs\":[-1],\"top_logprobs\":[null]}}]}", 1, 2,
                   "top_logprobs[0] is not an object");
}

// Every truncation of a valid answer (a dropped connection) is refused with a reason; so is
// every single-byte corruption that breaks it, and none crashes or writes past the records.
static void truncated_and_corrupted_answers(void **state) {
    (void)state;
    size_t len = strlen(valid_body);
    char *copy = test_alloc(len + 1);
    for (size_t cut = 0; cut < len; cut++) {
        engine_result res = poisoned_result(2);
        probe_notes notes;
        char err[256] = "";
        memcpy(copy, valid_body, cut);
        copy[cut] = '\0';
        if (probe_parse_completion(copy, cut, 2, 2, &res, &notes, err, sizeof err))
            fail_msg("truncated at %zu accepted: %s", cut, copy);
        assert_true(err[0] != '\0');
        assert_int_equal(res.n_steps, 0);
        free(res.steps);
    }
    // Random corruptions (the length passed is honoured: no NUL needed, none read past it).
    enum { N = 3000 };
    for (int i = 0; i < N; i++) {
        uint64_t r = random_u64(5, (uint64_t)i);
        memcpy(copy, valid_body, len);
        size_t at = (size_t)(r % len);
        copy[at] = (char)(r >> 32);
        copy[len] = (char)0xFF;  // past the given length: must not matter
        engine_result res = poisoned_result(3);
        probe_notes notes = {0};
        char err[256] = "";
        bool ok = probe_parse_completion(copy, len, 2, 2, &res, &notes, err, sizeof err);
        if (ok) {
            assert_true(res.n_steps >= 0 && res.n_steps <= 2);
            // Past max_steps records, nothing was written.
            assert_int_equal(test_count_poisoned(&res.steps[2], sizeof res.steps[2], 1), 1);
        } else {
            assert_true(err[0] != '\0');
            assert_int_equal(res.n_steps, 0);
        }
        free(res.steps);
    }
    free(copy);
}

// Numbers are quoted outside strings only; escaped quotes inside strings do not end them.
static void quote_numbers_outside_strings(void **state) {
    (void)state;
    const char *in = "{\"a\\\"1\":[-1.5e-3,NaN,-Infinity,Infinity,2],\"b\":\"-2 NaN\\\\\",\"c\":null}";
    const char *want =
        "{\"a\\\"1\":[\"\x01-1.5e-3\",\"\x01NaN\",\"\x01-Infinity\",\"\x01Infinity\",\"\x01\x32\"],"
        "\"b\":\"-2 NaN\\\\\",\"c\":null}";
    size_t out_len = 0;
    const char *why = NULL;
    char *out = probe_quote_numbers(in, strlen(in), &out_len, &why);
    assert_non_null(out);
    assert_string_equal(out, want);
    assert_int_equal(out_len, strlen(want));
    free(out);
    // The worst case for the size: nothing but one-character numbers.
    out = probe_quote_numbers("-,-,-,1", 7, &out_len, &why);
    assert_string_equal(out, "\"\x01-\",\"\x01-\",\"\x01-\",\"\x01\x31\"");
    free(out);
    // A raw control byte inside a string could forge the mark: not JSON, refused.
    assert_null(probe_quote_numbers("[\"\x01-1\"]", 6, &out_len, &why));
    assert_non_null(strstr(why, "control character"));
}

static void error_messages(void **state) {
    (void)state;
    char buf[64];
    const char *openai = "{\"error\":{\"message\":\"max_tokens is too large\",\"type\":"
                         "\"invalid_request_error\",\"code\":400}}";
    probe_error_message(openai, strlen(openai), buf, sizeof buf);
    assert_string_equal(buf, "max_tokens is too large");
    probe_error_message("Bad\x01Gateway\n", 12, buf, sizeof buf);
    assert_string_equal(buf, "Bad?Gateway?");
    probe_error_message("", 0, buf, sizeof buf);
    assert_string_equal(buf, "(empty body)");
    probe_error_message(NULL, 0, buf, sizeof buf);
    assert_string_equal(buf, "(empty body)");
    // A server's message with a terminal escape and a newline: printable only.
    const char *escaped = "{\"error\":{\"message\":\"\\u001b[2Jcleared\\nscreen\"}}";
    probe_error_message(escaped, strlen(escaped), buf, sizeof buf);
    assert_string_equal(buf, "?[2Jcleared?screen");
    char long_body[300];
    memset(long_body, 'x', sizeof long_body);
    probe_error_message(long_body, sizeof long_body, buf, sizeof buf);
    assert_int_equal(strlen(buf), sizeof buf - 1);  // cut to the buffer, terminated
}

// ---------------------------------------------------------------------------------------------
// invar's own writer
// ---------------------------------------------------------------------------------------------

// A random float32 of any kind: finite (subnormals, ±0, extremes included), ±Infinity, NaN.
static float random_any_float(int i) {
    if (i % 97 == 1) return -INFINITY;
    if (i % 97 == 2) return INFINITY;
    if (i % 97 == 3) return NAN;
    return random_finite_float(6, i);
}

static char *write_float(float v) {
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    json_write_float(f, v);
    fclose(f);
    return text;
}

static bool same_float(float a, float b) {
    return isnan(a) ? isnan(b) : bits_of(a) == bits_of(b);
}

// Every float32 the writer writes reads back to the same bits: through strtof, through strtod
// then a cast (the header's claim: %.9g is never near a midpoint), and through probe's reader
// in an answer written whole by the writer (tokens as json_write_string of "token_id:N").
static void writer_round_trip(void **state) {
    (void)state;
    enum { N = 6000, TOP = 2 };
    float *values = test_alloc(N * sizeof *values);
    char *body;
    size_t len;
    FILE *f = open_memstream(&body, &len);
    assert_non_null(f);
    fputs("{\"choices\":[{\"logprobs\":{\"tokens\":[", f);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "token_id:%d", i);
        fputs(i ? "," : "", f);
        json_write_string(f, name);
    }
    fputs("],\"token_logprobs\":[", f);
    long non_finite = 0;
    for (int i = 0; i < N; i++) {
        float v = random_any_float(i);
        char *text = write_float(v);
        if (!same_float(strtof(text, NULL), v))
            fail_msg("%a written as %s, strtof reads %a", (double)v, text,
                     (double)strtof(text, NULL));
        if (!same_float((float)strtod(text, NULL), v))
            fail_msg("%a written as %s, strtod then float reads %a", (double)v, text,
                     (double)(float)strtod(text, NULL));
        free(text);
        // NaN and Infinity are no log-probabilities (probe refuses them): -Infinity instead.
        values[i] = isnan(v) || v == INFINITY ? -INFINITY : v;
        non_finite += !isfinite(values[i]);
        text = write_float(values[i]);
        fprintf(f, "%s%s", i ? "," : "", text);
        free(text);
    }
    // Each step's top: the value itself under id 0 and a lower one under id 1 (-Infinity sorts
    // last; NaN entries are not ordered, so they get no partner).
    fputs("],\"top_logprobs\":[", f);
    for (int i = 0; i < N; i++) {
        fputs(i ? ",{" : "{", f);
        json_write_string(f, "token_id:0");
        fputc(':', f);
        json_write_float(f, values[i]);
        if (!isnan(values[i])) {
            fputc(',', f);
            json_write_string(f, "token_id:1");
            fputc(':', f);
            json_write_float(f, -INFINITY);
        }
        fputc('}', f);
    }
    fputs("]}}]}", f);
    fclose(f);

    engine_result res = poisoned_result(N);
    probe_notes notes;
    char err[256];
    if (!parse(body, TOP, N, &res, &notes, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(res.n_steps, N);
    for (int i = 0; i < N; i++) {
        const engine_step_record *rec = &res.steps[i];
        assert_int_equal(rec->token, i);
        if (!same_float(rec->logprob, values[i]))
            fail_msg("step %d: %a read back as %a", i, (double)values[i], (double)rec->logprob);
        if (isnan(values[i])) continue;
        // The value is never below its -Infinity partner; at a tie, id 0 comes first.
        assert_int_equal(rec->topk_ids[0], 0);
        assert_true(same_float(rec->topk_logprobs[0], values[i]));
        assert_int_equal(rec->topk_ids[1], 1);
        assert_true(isinf(rec->topk_logprobs[1]) && rec->topk_logprobs[1] < 0);
    }
    assert_true(non_finite > 0);
    long n_nan = 0;
    for (int i = 0; i < N; i++) n_nan += isnan(values[i]);
    assert_int_equal(notes.values, 2 * N + (N - n_nan));
    assert_int_equal(notes.wider_than_float32, 0);
    // Non-finite: each value twice (logprob, top) and every partner -Infinity.
    assert_int_equal(notes.non_finite, 2 * non_finite + (N - n_nan));
    free(res.steps);
    free(body);
    free(values);
}

// Strings: what the writer escapes reads back as the same bytes (random bytes, no NUL);
// integers: the extremes read back.
static void writer_strings_and_ints(void **state) {
    (void)state;
    enum { N = 500, MAX_LEN = 64 };
    for (int i = 0; i < N; i++) {
        char s[MAX_LEN + 1];
        int n = (int)(random_u64(7, (uint64_t)i * 100) % MAX_LEN);
        for (int k = 0; k < n; k++) {
            // Mostly the characters that need escaping, some plain and some high bytes.
            static const char special[] = "\"\\\n\r\t\x01\x1f/ a";
            uint64_t r = random_u64(7, (uint64_t)i * 100 + 1 + (uint64_t)k);
            s[k] = r & 1 ? special[(r >> 1) % (sizeof special - 1)] : (char)(1 + (r >> 8) % 255);
        }
        s[n] = '\0';
        char *text;
        size_t len;
        FILE *f = open_memstream(&text, &len);
        assert_non_null(f);
        json_write_string(f, s);
        fclose(f);
        cJSON *v = cJSON_Parse(text);
        if (!cJSON_IsString(v)) fail_msg("not a JSON string: %s", text);
        assert_string_equal(v->valuestring, s);
        cJSON_Delete(v);
        free(text);
    }
    const int64_t ints[] = {0, -1, 1, INT64_MAX, INT64_MIN, 2147483647, -2147483648LL};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        char *text;
        size_t len;
        FILE *f = open_memstream(&text, &len);
        assert_non_null(f);
        json_write_int(f, ints[i]);
        fclose(f);
        char want[32];
        snprintf(want, sizeof want, "%" PRId64, ints[i]);
        assert_string_equal(text, want);
        assert_true(strtoll(text, NULL, 10) == ints[i]);
        free(text);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(double_rounding_texts_read_as_strtof),
        cmocka_unit_test(float32_texts_read_back_exact),
        cmocka_unit_test(double_values_noted_as_wider),
        cmocka_unit_test(python_non_finite_literals),
        cmocka_unit_test(token_names),
        cmocka_unit_test(text_keyed_top_logprobs_come_up_short),
        cmocka_unit_test(bad_answers_give_reasons),
        cmocka_unit_test(truncated_and_corrupted_answers),
        cmocka_unit_test(quote_numbers_outside_strings),
        cmocka_unit_test(error_messages),
        cmocka_unit_test(writer_round_trip),
        cmocka_unit_test(writer_strings_and_ints),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
