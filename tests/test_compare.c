// tests/test_compare.c — the bitwise comparator: the first differing bit wins, in step order and
// within a step token, logprob, then top-k; ULP distances, across the sign too; and the
// runner's verdict path (compare_request_sets), which must find one flipped bit in any field
// of any step of any request, after comparing every step (harness/run/compare.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <math.h>     // nextafterf, INFINITY
#include <stdio.h>    // printf
#include <string.h>   // memcpy, memset
#include <time.h>     // time
#include <unistd.h>   // getpid

#include "../harness/run/compare.h" // compare_*, float_ulp_distance
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

#define STEPS 12
#define TOPK 6

// ---------------------------------------------------------------------------------------------
// Fresh random records
// ---------------------------------------------------------------------------------------------

static uint64_t rng_state;

static uint64_t next_u64(void) { return invar_mix64(rng_state++); }

static void random_run(engine_step_record *steps, engine_result *res) {
    memset(steps, 0xFF, sizeof(engine_step_record) * STEPS);  // unused top-k tail stays poison
    for (int s = 0; s < STEPS; s++) {
        steps[s].token = (int32_t)(next_u64() % 1000);
        steps[s].logprob = -10.0f * invar_uniform(next_u64());
        for (int k = 0; k < TOPK; k++) {
            steps[s].topk_ids[k] = (int32_t)(next_u64() % 1000);
            steps[s].topk_logprobs[k] = -10.0f * invar_uniform(next_u64());
        }
    }
    res->steps = steps;
    res->n_steps = STEPS;
}

typedef struct {
    engine_step_record a_steps[STEPS], b_steps[STEPS];
    engine_result a, b;
} pair;

// Two bitwise-equal runs of fresh random data (b is a copy of a).
static void random_pair(pair *p) {
    random_run(p->a_steps, &p->a);
    memcpy(p->b_steps, p->a_steps, sizeof p->a_steps);
    p->b = p->a;
    p->b.steps = p->b_steps;
}

static int setup(void **state) {
    (void)state;
    rng_state = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_compare: random seed %llu\n", (unsigned long long)rng_state);
    return 0;
}

static float one_ulp_up(float f) { return nextafterf(f, INFINITY); }

// ---------------------------------------------------------------------------------------------
// ULPs
// ---------------------------------------------------------------------------------------------

static void ulp_distance(void **state) {
    (void)state;
    for (int i = 0; i < 1000; i++) {
        float f = -10.0f * invar_uniform(next_u64());
        float g = one_ulp_up(one_ulp_up(one_ulp_up(f)));
        assert_int_equal(float_ulp_distance(f, g), 3);
        assert_int_equal(float_ulp_distance(g, f), 3);
        assert_int_equal(float_ulp_distance(f, f), 0);
    }
    float tiny = nextafterf(0.0f, 1.0f);  // smallest positive denormal
    assert_int_equal(float_ulp_distance(-tiny, tiny), 2);    // crosses the sign: -d, 0, +d
    assert_int_equal(float_ulp_distance(-0.0f, 0.0f), 0);    // same value, other bits
    assert_int_equal(float_ulp_distance(-tiny, 0.0f), 1);
    assert_int_equal(float_ulp_distance(-1.0f, 1.0f), 2LL * 0x3f800000);
    assert_int_equal(float_ulp_distance(-INFINITY, INFINITY), 2LL * 0x7f800000);
    assert_true(float_ordered(-2.0f) < float_ordered(-1.0f));
    assert_true(float_ordered(-tiny) < float_ordered(0.0f));
    assert_false(float_bits_equal(-0.0f, 0.0f));  // bitwise, never by value
    assert_true(float_bits_equal(NAN, NAN));
}

// ---------------------------------------------------------------------------------------------
// First difference
// ---------------------------------------------------------------------------------------------

static void equal_runs_agree(void **state) {
    (void)state;
    pair p;
    random_pair(&p);
    divergence d;
    assert_false(compare_results(&p.a, &p.b, TOPK, &d));
    // Entries past top_k are not part of the record.
    p.b_steps[3].topk_ids[TOPK] = 7;
    p.b_steps[3].topk_logprobs[TOPK] = -1.0f;
    assert_false(compare_results(&p.a, &p.b, TOPK, &d));
}

static void one_ulp_logprob_is_found(void **state) {
    (void)state;
    pair p;
    random_pair(&p);
    int s = 4 + (int)(next_u64() % 4);
    p.b_steps[s].logprob = one_ulp_up(p.a_steps[s].logprob);
    p.b_steps[STEPS - 1].token += 1;  // later differences do not hide the first
    divergence d;
    memset(&d, 0xFF, sizeof d);
    assert_true(compare_results(&p.a, &p.b, TOPK, &d));
    assert_int_equal(d.kind, DIFF_LOGPROB);
    assert_int_equal(d.step, s);
    assert_int_equal(d.topk_index, -1);
    assert_int_equal(d.base_token, p.a_steps[s].token);
    assert_int_equal(d.other_token, p.a_steps[s].token);
    assert_true(float_bits_equal(d.base_logprob, p.a_steps[s].logprob));
    assert_true(float_bits_equal(d.other_logprob, p.b_steps[s].logprob));
    assert_int_equal(d.ulps, 1);
    assert_true(d.abs_delta > 0.0 && d.abs_delta < 1e-5);
    char name[32];
    assert_string_equal(diff_kind_name(&d, name, sizeof name), "logprob");
}

static void token_wins_over_logprob_and_topk(void **state) {
    (void)state;
    pair p;
    random_pair(&p);
    int s = 2;
    p.b_steps[s].topk_logprobs[0] = one_ulp_up(p.a_steps[s].topk_logprobs[0]);
    p.b_steps[s].logprob = one_ulp_up(p.a_steps[s].logprob);
    p.b_steps[s].token = p.a_steps[s].token + 1;
    divergence d;
    assert_true(compare_results(&p.a, &p.b, TOPK, &d));
    assert_int_equal(d.kind, DIFF_TOKEN);
    assert_int_equal(d.step, s);
    assert_int_equal(d.other_token, p.a_steps[s].token + 1);
    // An earlier step's top-k difference comes first, whatever it is.
    p.b_steps[1].topk_ids[TOPK - 1] ^= 1;
    assert_true(compare_results(&p.a, &p.b, TOPK, &d));
    assert_int_equal(d.kind, DIFF_TOPK_ID);
    assert_int_equal(d.step, 1);
    assert_int_equal(d.topk_index, TOPK - 1);
    char name[32];
    assert_string_equal(diff_kind_name(&d, name, sizeof name), "topk_id[5]");
}

static void topk_in_order_id_then_logprob(void **state) {
    (void)state;
    pair p;
    random_pair(&p);
    int s = 6;
    p.b_steps[s].topk_ids[3] += 1;
    p.b_steps[s].topk_logprobs[2] = -p.a_steps[s].topk_logprobs[2];  // sign flip
    divergence d;
    assert_true(compare_step(&p.a, &p.b, s, TOPK, &d));
    assert_int_equal(d.kind, DIFF_TOPK_LOGPROB);
    assert_int_equal(d.topk_index, 2);
    assert_int_equal(d.base_token, p.a_steps[s].topk_ids[2]);
    float v = p.a_steps[s].topk_logprobs[2];
    assert_int_equal(d.ulps, 2 * float_ordered(-v));
    assert_true(d.abs_delta == 2.0 * (double)-v);
    assert_false(compare_step(&p.a, &p.b, s - 1, TOPK, &d));
    // With top_k 2 the only difference left is outside the record.
    assert_false(compare_step(&p.a, &p.b, s, 2, &d));
}

static void negative_zero_differs_by_zero_ulps(void **state) {
    (void)state;
    pair p;
    random_pair(&p);
    p.a_steps[0].logprob = 0.0f;
    p.b_steps[0].logprob = -0.0f;
    divergence d;
    assert_true(compare_results(&p.a, &p.b, TOPK, &d));
    assert_int_equal(d.kind, DIFF_LOGPROB);
    assert_int_equal(d.ulps, 0);
    assert_true(d.abs_delta == 0.0);
}

static void shorter_run_is_a_length_difference(void **state) {
    (void)state;
    pair p;
    random_pair(&p);
    p.b.n_steps = STEPS - 2;
    divergence d;
    assert_true(compare_results(&p.a, &p.b, TOPK, &d));
    assert_int_equal(d.kind, DIFF_LENGTH);
    assert_int_equal(d.step, STEPS - 2);
    assert_int_equal(d.base_token, p.a_steps[STEPS - 2].token);
    assert_int_equal(d.other_token, -1);
    assert_int_equal(d.ulps, 0);  // no logprob on one side: no distance
    assert_true(d.abs_delta == 0.0);
}

// ---------------------------------------------------------------------------------------------
// The runner's verdict path: every request, every step, the exact first divergence
// ---------------------------------------------------------------------------------------------

#define REQUESTS 3

typedef struct {
    engine_step_record base_steps[REQUESTS][STEPS], other_steps[REQUESTS][STEPS];
    engine_result base[REQUESTS], other[REQUESTS];
} request_sets;

static void random_request_sets(request_sets *r) {
    for (int i = 0; i < REQUESTS; i++) {
        random_run(r->base_steps[i], &r->base[i]);
        memcpy(r->other_steps[i], r->base_steps[i], sizeof r->base_steps[i]);
        r->other[i] = r->base[i];
        r->other[i].steps = r->other_steps[i];
    }
}

static void flip_float_bit(float *f, int bit) {
    uint32_t u;
    memcpy(&u, f, sizeof u);
    u ^= 1u << bit;
    memcpy(f, &u, sizeof u);
}

typedef struct {
    int calls, request;
    divergence d;
} sink_record;

static void record_sink(void *user, int request, const divergence *d) {
    sink_record *s = user;
    s->calls++;
    s->request = request;
    s->d = *d;
}

enum field { FIELD_TOKEN, FIELD_LOGPROB, FIELD_TOPK_ID, FIELD_TOPK_LOGPROB, FIELDS };

// One bit of one field of one step of one request differs: the comparison must report exactly
// that request, step, field and top-k slot, and must have compared every step of every request.
static void one_bit_anywhere_is_the_first_divergence(void **state) {
    (void)state;
    static const diff_kind kinds[FIELDS] = {DIFF_TOKEN, DIFF_LOGPROB, DIFF_TOPK_ID,
                                            DIFF_TOPK_LOGPROB};
    const int steps[] = {0, STEPS / 2, STEPS - 1}, slots[] = {0, TOPK / 2, TOPK - 1};
    const int bits[] = {0, 22, 31};  // lowest mantissa bit, highest, the sign
    static request_sets r;
    int cases = 0;
    for (int request = 0; request < REQUESTS; request++)
        for (int si = 0; si < 3; si++)
            for (int field = 0; field < FIELDS; field++)
                for (int k = 0; k < (field >= FIELD_TOPK_ID ? 3 : 1); k++)
                    for (int b = 0; b < (field == FIELD_LOGPROB || field == FIELD_TOPK_LOGPROB ? 3 : 1); b++) {
                        random_request_sets(&r);
                        int step = steps[si], slot = field >= FIELD_TOPK_ID ? slots[k] : -1;
                        engine_step_record *rec = &r.other_steps[request][step];
                        switch (field) {
                        case FIELD_TOKEN: rec->token ^= 1; break;
                        case FIELD_LOGPROB: flip_float_bit(&rec->logprob, bits[b]); break;
                        case FIELD_TOPK_ID: rec->topk_ids[slot] ^= 1; break;
                        default: flip_float_bit(&rec->topk_logprobs[slot], bits[b]); break;
                        }
                        sink_record sink = {0};
                        comparison c = compare_request_sets(r.base, r.other, REQUESTS, TOPK,
                                                            record_sink, &sink);
                        assert_int_equal(c.requests, REQUESTS);
                        assert_int_equal(c.steps, (long)REQUESTS * STEPS);
                        assert_int_equal(c.differing, 1);
                        assert_true(c.has_first);
                        assert_int_equal(c.first_request, request);
                        assert_int_equal(c.first.step, step);
                        assert_int_equal(c.first.kind, kinds[field]);
                        assert_int_equal(c.first.topk_index, slot);
                        assert_int_equal(sink.calls, 1);
                        assert_int_equal(sink.request, request);
                        assert_int_equal(sink.d.step, step);
                        cases++;
                    }
    assert_int_equal(cases, REQUESTS * 3 * (1 + 3 + 3 + 9));
}

// Equal sets: nothing differs, and still every step of every request was looked at.
static void equal_request_sets_compare_every_step(void **state) {
    (void)state;
    static request_sets r;
    random_request_sets(&r);
    sink_record sink = {0};
    comparison c = compare_request_sets(r.base, r.other, REQUESTS, TOPK, record_sink, &sink);
    assert_int_equal(c.requests, REQUESTS);
    assert_int_equal(c.steps, (long)REQUESTS * STEPS);
    assert_int_equal(c.differing, 0);
    assert_false(c.has_first);
    assert_int_equal(sink.calls, 0);
}

// Several differing requests, each at several steps: the first divergence is the lowest
// request's earliest step (what summary.csv reports), not the last request's, and every
// differing step still reaches the sink.
static void first_divergence_is_the_first_requests_first_step(void **state) {
    (void)state;
    static request_sets r;
    random_request_sets(&r);
    r.other_steps[1][STEPS - 1].token ^= 1;
    flip_float_bit(&r.other_steps[1][STEPS - 2].logprob, 0);  // one ulp
    r.other_steps[REQUESTS - 1][0].token ^= 1;
    sink_record sink = {0};
    comparison c = compare_request_sets(r.base, r.other, REQUESTS, TOPK, record_sink, &sink);
    assert_int_equal(c.differing, 2);
    assert_true(c.has_first);
    assert_int_equal(c.first_request, 1);
    assert_int_equal(c.first.step, STEPS - 2);
    assert_int_equal(c.first.kind, DIFF_LOGPROB);
    assert_int_equal(sink.calls, 3);
}

// A request whose other run stopped a step early differs at that missing last step.
static void missing_last_step_differs(void **state) {
    (void)state;
    static request_sets r;
    random_request_sets(&r);
    r.other[REQUESTS - 1].n_steps = STEPS - 1;
    comparison c = compare_request_sets(r.base, r.other, REQUESTS, TOPK, NULL, NULL);
    assert_int_equal(c.steps, (long)REQUESTS * STEPS);
    assert_int_equal(c.differing, 1);
    assert_int_equal(c.first_request, REQUESTS - 1);
    assert_int_equal(c.first.step, STEPS - 1);
    assert_int_equal(c.first.kind, DIFF_LENGTH);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_bit_anywhere_is_the_first_divergence),
        cmocka_unit_test(equal_request_sets_compare_every_step),
        cmocka_unit_test(first_divergence_is_the_first_requests_first_step),
        cmocka_unit_test(missing_last_step_differs),
        cmocka_unit_test(ulp_distance),
        cmocka_unit_test(equal_runs_agree),
        cmocka_unit_test(one_ulp_logprob_is_found),
        cmocka_unit_test(token_wins_over_logprob_and_topk),
        cmocka_unit_test(topk_in_order_id_then_logprob),
        cmocka_unit_test(negative_zero_differs_by_zero_ulps),
        cmocka_unit_test(shorter_run_is_a_length_difference),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
