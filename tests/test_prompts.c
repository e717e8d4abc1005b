// tests/test_prompts.c — seeded prompt sets (harness/run/prompts.h) and arrival schedules
// (harness/run/arrivals.h): shared prefixes, warm copies of prompt 0, lengths (both ends of the
// range drawn), determinism.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <string.h>   // memcmp, memset

#include "../harness/run/arrivals.h" // arrivals_schedule, arrival_pattern_by_name
#include "../harness/run/prompts.h" // prompts_generate

enum { VOCAB = 1000 };

static void plain_prompts_keep_their_lengths(void **state) {
    (void)state;
    prompt_spec spec = {.count = 20, .min_len = 5, .max_len = 90};
    prompt_set *p = prompts_generate(&spec, VOCAB, 11);
    assert_int_equal(p->count, 20);
    assert_int_equal(p->first_warm, 20);
    assert_int_equal(p->lens[0], 90);
    assert_int_equal(p->lens[1], 5);
    bool distinct_first_tokens = false;
    for (int i = 0; i < p->count; i++) {
        assert_true(p->lens[i] >= 5 && p->lens[i] <= 90);
        for (int t = 0; t < p->lens[i]; t++)
            assert_true(p->tokens[i][t] >= 0 && p->tokens[i][t] < VOCAB);
        if (i > 0 && p->tokens[i][0] != p->tokens[0][0]) distinct_first_tokens = true;
    }
    assert_true(distinct_first_tokens);
    // Same inputs, same prompts.
    prompt_set *q = prompts_generate(&spec, VOCAB, 11);
    for (int i = 0; i < p->count; i++) {
        assert_int_equal(q->lens[i], p->lens[i]);
        assert_memory_equal(q->tokens[i], p->tokens[i], (size_t)p->lens[i] * sizeof(int32_t));
        assert_true(q->seeds[i] == p->seeds[i]);
    }
    prompts_free(p);
    prompts_free(q);
}

// The drawn lengths (prompts 2 on; 0 and 1 are pinned to the ends) reach both ends of
// [min_len, max_len], the bounds included, and a range of one length is that length.
static void drawn_lengths_cover_the_whole_range(void **state) {
    (void)state;
    prompt_spec spec = {.count = 200, .min_len = 3, .max_len = 6};
    prompt_set *p = prompts_generate(&spec, VOCAB, 12);
    int seen[7] = {0};
    for (int i = 2; i < p->count; i++) {
        assert_true(p->lens[i] >= 3 && p->lens[i] <= 6);
        seen[p->lens[i]]++;
    }
    for (int len = 3; len <= 6; len++)
        if (!seen[len]) fail_msg("no drawn prompt of length %d in [3, 6] over 198 draws", len);
    prompts_free(p);
    prompt_spec one = {.count = 5, .min_len = 7, .max_len = 7};
    p = prompts_generate(&one, VOCAB, 12);
    for (int i = 0; i < p->count; i++) assert_int_equal(p->lens[i], 7);
    prompts_free(p);
}

static void groups_share_a_prefix_and_copies_repeat_prompt_0(void **state) {
    (void)state;
    prompt_spec plain = {.count = 9, .min_len = 20, .max_len = 60};
    prompt_spec spec = plain;
    spec.shared_prefix_groups = 3;
    spec.shared_prefix_len = 16;
    spec.warm_cache_repeats = 2;
    prompt_set *p = prompts_generate(&spec, VOCAB, 5);
    prompt_set *base = prompts_generate(&plain, VOCAB, 5);
    assert_int_equal(p->count, 11);
    assert_int_equal(p->first_warm, 9);
    for (int i = 0; i < 9; i++) {
        // The same lengths and own tokens as without groups; the prefix is the group's.
        assert_int_equal(p->lens[i], base->lens[i]);
        assert_memory_equal(p->tokens[i] + 16, base->tokens[i] + 16,
                            (size_t)(p->lens[i] - 16) * sizeof(int32_t));
        for (int j = 0; j < 9; j++) {
            bool same = memcmp(p->tokens[i], p->tokens[j], 16 * sizeof(int32_t)) == 0;
            assert_int_equal(same, i % 3 == j % 3);
        }
        // Own tokens differ between members of one group.
        if (i >= 3)
            assert_true(memcmp(p->tokens[i] + 16, p->tokens[i - 3] + 16,
                               4 * sizeof(int32_t)) != 0);
    }
    for (int i = 9; i < 11; i++) {
        assert_int_equal(p->lens[i], p->lens[0]);
        assert_memory_equal(p->tokens[i], p->tokens[0], (size_t)p->lens[0] * sizeof(int32_t));
        assert_true(p->seeds[i] == p->seeds[0]);
        assert_true(p->tokens[i] != p->tokens[0]);  // a copy, freed on its own
    }
    prompts_free(p);
    prompts_free(base);
}

static void arrival_schedules(void **state) {
    (void)state;
    enum { N = 40 };
    int steps[N + 1], again[N + 1];
    arrival_pattern p;
    assert_true(arrival_pattern_by_name("bursty", &p));
    assert_int_equal(p, ARRIVALS_BURSTY);
    assert_false(arrival_pattern_by_name("poisson", &p));
    assert_string_equal(arrival_pattern_name(ARRIVALS_STAGGERED), "staggered");

    memset(steps, 0xFF, sizeof steps);
    arrivals_schedule(ARRIVALS_AT_ONCE, N, 3, steps);
    for (int i = 0; i < N; i++) assert_int_equal(steps[i], 0);
    assert_int_equal(steps[N], -1);  // nothing written past n

    memset(steps, 0xFF, sizeof steps);
    arrivals_schedule(ARRIVALS_STAGGERED, N, 3, steps);
    int gap = steps[1];
    assert_true(gap >= 1 && gap <= 4);
    for (int i = 0; i < N; i++) assert_int_equal(steps[i], i * gap);
    assert_int_equal(steps[N], -1);

    memset(steps, 0xFF, sizeof steps);
    arrivals_schedule(ARRIVALS_BURSTY, N, 3, steps);
    assert_int_equal(steps[0], 0);
    assert_int_equal(steps[N], -1);
    int bursts = 1, run = 1, longest = 1;
    for (int i = 1; i < N; i++) {
        assert_true(steps[i] >= steps[i - 1]);
        if (steps[i] == steps[i - 1]) {
            run++;
        } else {
            assert_true(steps[i] - steps[i - 1] >= 2 && steps[i] - steps[i - 1] <= 16);
            bursts++;
            run = 1;
        }
        if (run > longest) longest = run;
    }
    assert_true(longest <= 6);
    assert_true(bursts >= N / 6 && bursts < N);  // real bursts, not one request each
    arrivals_schedule(ARRIVALS_BURSTY, N, 3, again);
    assert_memory_equal(again, steps, N * sizeof(int));
    arrivals_schedule(ARRIVALS_BURSTY, N, 4, again);
    assert_true(memcmp(again, steps, N * sizeof(int)) != 0);  // the seed matters
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_prompts_keep_their_lengths),
        cmocka_unit_test(drawn_lengths_cover_the_whole_range),
        cmocka_unit_test(groups_share_a_prefix_and_copies_repeat_prompt_0),
        cmocka_unit_test(arrival_schedules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
