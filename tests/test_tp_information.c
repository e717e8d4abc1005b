// tests/test_tp_information.c — TP=1 vs TP=T as information (harness/run/tp_information.c): the
// max |Δ logprob| over the steps whose tokens agree, a request compared up to its first
// differing token, and the note as the config's row carries it.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <string.h>   // strstr

#include "../harness/run/tp_information.h" // tp_delta_compare, tp_delta_note

// Two requests of three steps each, one run per array.
static engine_step_record one[2][3], tp[2][3];

static void fill(void) {
    for (int i = 0; i < 2; i++)
        for (int s = 0; s < 3; s++) {
            one[i][s] = (engine_step_record){.token = 10 * i + s, .logprob = -1.0f - (float)s};
            tp[i][s] = one[i][s];
        }
}

static void results(engine_result *a, engine_result *b) {
    for (int i = 0; i < 2; i++) {
        a[i] = (engine_result){.steps = one[i], .n_steps = 3};
        b[i] = (engine_result){.steps = tp[i], .n_steps = 3};
    }
}

static void equal_runs_give_zero_over_every_step(void **state) {
    (void)state;
    fill();
    engine_result a[2], b[2];
    results(a, b);
    tp_delta d = tp_delta_compare(a, b, 2);
    assert_true(d.max_abs_delta == 0.0);
    assert_int_equal(d.steps, 6);
    assert_int_equal(d.agreed, 6);
}

// The largest difference wins; a token that differs stops its request's comparison there (its
// later steps, with a larger logprob difference, are not counted), the other request goes on.
static void max_delta_up_to_the_first_differing_token(void **state) {
    (void)state;
    fill();
    tp[0][0].logprob += 0.25f;
    tp[1][0].logprob -= 0.125f;
    tp[1][1].token = 99;
    tp[1][2].logprob += 4.0f;  // after request 1's differing token: not compared
    engine_result a[2], b[2];
    results(a, b);
    tp_delta d = tp_delta_compare(a, b, 2);
    assert_true(d.max_abs_delta == 0.25);
    assert_int_equal(d.steps, 6);
    assert_int_equal(d.agreed, 4);  // request 0: 3; request 1: step 0 only
}

static void note_says_information_and_how_disagreement_counts(void **state) {
    (void)state;
    tp_delta d = {.max_abs_delta = 0.0123, .steps = 96, .agreed = 95};
    char buf[256];
    tp_delta_note(&d, 4, buf, sizeof buf);
    assert_string_equal(buf, "information: TP=1 vs TP=4 max |Δ logprob| 0.0123 over 96 steps "
                             "(tokens agreed at 95; a request is compared up to its first "
                             "differing token)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(equal_runs_give_zero_over_every_step),
        cmocka_unit_test(max_delta_up_to_the_first_differing_token),
        cmocka_unit_test(note_says_information_and_how_disagreement_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
