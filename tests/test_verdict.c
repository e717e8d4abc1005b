// tests/test_verdict.c — a config's verdict (harness/run/verdict.c) from what its runs observed:
// the cases of the CI matrix never produce a nondeterministic run, a prefill that differs
// from decode or an uncaught negative control, so only this test holds those rules.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <string.h>   // strcmp, strstr

#include "../harness/run/verdict.h" // outcome_judge, outcome_judge_orders, resolved_config,
                                    // outcome, ops_set
#include "../kernels/fingerprint.h"  // fingerprint_sink_*, fingerprint_note, fingerprint_order

static ops_set invariant_set = {.name = "invariant", .batch_invariant = true};
static ops_set reference_set = {.name = "reference"};
static ops_set adversarial_set = {.name = "adversarial", .adversarial = true};

static outcome judged(bool expect_invariant, ops_set *set, bool adversarial_control,
                      bool batch_differs, bool repeat_differs, const char *prefill) {
    resolved_config rc = {.batch_invariant_mode = set->batch_invariant,
                          .expect_invariant = expect_invariant};
    outcome out = {.batch_differs = batch_differs, .repeat_differs = repeat_differs,
                   .differing = batch_differs || repeat_differs, .prefill_vs_decode = prefill};
    outcome_judge(&rc, set, adversarial_control, &out);
    return out;
}

static void invariant_config_passes_only_when_nothing_differs(void **state) {
    (void)state;
    outcome o = judged(true, &invariant_set, false, false, false, "equal");
    assert_string_equal(o.verdict, "PASS");
    assert_string_equal(o.observed, "invariant");
    o = judged(true, &invariant_set, false, true, false, "equal");
    assert_string_equal(o.verdict, "FAIL");
    assert_string_equal(o.observed, "batch-variant");
}

// A repeated largest batch that differs from itself is nondeterminism, not batch variance,
// and never a pass for an invariant config.
static void repeat_difference_is_nondeterministic(void **state) {
    (void)state;
    outcome o = judged(true, &invariant_set, false, false, true, "equal");
    assert_string_equal(o.observed, "nondeterministic");
    assert_string_equal(o.verdict, "FAIL");
    o = judged(true, &invariant_set, false, true, true, "equal");
    assert_string_equal(o.observed, "nondeterministic");
}

// On the CPU every set is deterministic: a repeat that differs fails any config, a negative
// control included (it would otherwise count as caught).
static void cpu_repeat_difference_fails_even_a_control(void **state) {
    (void)state;
    ops_set cpu_reference = {.name = "reference", .device = "cpu"};
    outcome o = judged(false, &cpu_reference, false, true, true, "not-checked");
    assert_string_equal(o.observed, "nondeterministic");
    assert_string_equal(o.verdict, "FAIL");
    assert_non_null(strstr(o.note, "nondeterministic on the CPU"));
    ops_set cuda_reference = {.name = "reference", .device = "cuda"};
    o = judged(false, &cuda_reference, false, true, true, "not-checked");
    assert_string_equal(o.verdict, "PASS");  // atomics: a GPU reference set may be
}

static void negative_control_must_be_caught(void **state) {
    (void)state;
    outcome o = judged(false, &reference_set, false, true, false, "not-checked");
    assert_string_equal(o.verdict, "PASS");
    o = judged(false, &reference_set, false, false, false, "not-checked");
    assert_string_equal(o.verdict, "FAIL");
    assert_non_null(strstr(o.note, "negative control not triggered"));
    o = judged(false, &adversarial_set, true, false, false, "not-checked");
    assert_string_equal(o.verdict, "FAIL");  // the control itself is never information
}

static void order_free_reference_is_information_beside_adversarial(void **state) {
    (void)state;
    outcome o = judged(false, &reference_set, true, false, false, "not-checked");
    assert_string_equal(o.verdict, "PASS");
    assert_non_null(strstr(o.note, "information"));
}

// The invariant set with prefix caching forced on (a backend not invariant with it): a control
// whose only variance is the cache, never order-free information, even in a case whose
// adversarial set is the negative control; uncaught, it says why it was expected to vary.
static void forced_prefix_control_is_never_information(void **state) {
    (void)state;
    outcome o = judged(false, &invariant_set, true, false, false, "not-checked");
    assert_string_equal(o.verdict, "FAIL");
    assert_non_null(strstr(o.note, "negative control not triggered"));
    assert_non_null(strstr(o.note, "prefix caching forced on"));
    o = judged(false, &invariant_set, true, true, false, "not-checked");
    assert_string_equal(o.verdict, "PASS");
}

// The all-reduce alone (invariant-ring at T >= 3): an uncaught run is a weak case, never
// order-free information, even beside an adversarial control.
static void all_reduce_control_is_never_information(void **state) {
    (void)state;
    ops_set ring = {.name = "invariant-ring"};
    resolved_config rc = {.expect_invariant = false, .must_be_caught = true};
    outcome out = {.prefill_vs_decode = "not-checked"};
    outcome_judge(&rc, &ring, true, &out);
    assert_string_equal(out.verdict, "FAIL");
    assert_non_null(strstr(out.note, "negative control not triggered"));
}

static void prefill_decode_difference_fails(void **state) {
    (void)state;
    outcome o = judged(true, &invariant_set, false, false, false, "DIFFER");
    assert_string_equal(o.verdict, "FAIL");
}

// An invariant config whose bits all matched still FAILs when one op at one shape noted two
// reduction orders across its batches (the order followed the batch and the bits happened to
// agree), or when its set noted nothing at all (the invariant path never ran); it keeps its
// PASS with one order per op and shape. A negative control and a set that declares no paths
// (a plugin's) are not judged by orders.
static void invariant_config_fails_on_two_orders_or_none(void **state) {
    (void)state;
    static const char *const paths[] = {"rmsnorm:row-lanes", NULL};
    ops_set noting = {.name = "invariant", .batch_invariant = true, .paths = paths};
    resolved_config rc = {.batch_invariant_mode = true, .expect_invariant = true};
    long lanes8[] = {8, 2048}, lanes4[] = {4, 2048};
    fingerprint_sink *s = fingerprint_sink_create();
    outcome o = judged(true, &noting, false, false, false, "equal");
    outcome_judge_orders(&rc, &noting, s, &o);  // nothing noted
    assert_string_equal(o.verdict, "FAIL");
    assert_non_null(strstr(o.note, "never ran"));

    fingerprint_sink_batch(s, 1);
    fingerprint_note(s, "rmsnorm", 2048, fingerprint_order(lanes8, 2), "row-lanes");
    fingerprint_sink_batch(s, 32);
    fingerprint_note(s, "rmsnorm", 2048, fingerprint_order(lanes8, 2), "row-lanes");
    o = judged(true, &noting, false, false, false, "equal");
    outcome_judge_orders(&rc, &noting, s, &o);  // one order: the PASS stands
    assert_string_equal(o.verdict, "PASS");
    assert_string_equal(o.note, "");

    fingerprint_sink_batch(s, 64);
    fingerprint_note(s, "rmsnorm", 2048, fingerprint_order(lanes4, 2), "row-lanes");
    o = judged(true, &noting, false, false, false, "equal");
    outcome_judge_orders(&rc, &noting, s, &o);
    assert_string_equal(o.verdict, "FAIL");
    assert_string_equal(o.observed, "invariant");  // the bits agreed; the order did not
    assert_non_null(strstr(o.note, "rmsnorm"));
    assert_non_null(strstr(o.note, "at bs=1 "));
    assert_non_null(strstr(o.note, "at bs=64"));
    fingerprint_sink_reset_orders(s);  // two orders inside the runs of one batch size
    fingerprint_note(s, "rmsnorm", 2048, fingerprint_order(lanes8, 2), "row-lanes");
    fingerprint_note(s, "rmsnorm", 2048, fingerprint_order(lanes4, 2), "row-lanes");
    o = judged(true, &noting, false, false, false, "equal");
    outcome_judge_orders(&rc, &noting, s, &o);
    assert_string_equal(o.verdict, "FAIL");
    assert_non_null(strstr(o.note, "followed the call"));
    assert_non_null(strstr(o.note, "at bs=64"));

    resolved_config control = {.expect_invariant = false};
    o = judged(false, &reference_set, false, true, false, "not-checked");
    outcome_judge_orders(&control, &noting, s, &o);
    assert_string_equal(o.verdict, "PASS");
    ops_set plugin = {.name = "plugin", .batch_invariant = true};  // declares no paths
    o = judged(true, &plugin, false, false, false, "equal");
    outcome_judge_orders(&rc, &plugin, s, &o);
    assert_string_equal(o.verdict, "PASS");
    fingerprint_sink_destroy(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(invariant_config_passes_only_when_nothing_differs),
        cmocka_unit_test(repeat_difference_is_nondeterministic),
        cmocka_unit_test(cpu_repeat_difference_fails_even_a_control),
        cmocka_unit_test(negative_control_must_be_caught),
        cmocka_unit_test(order_free_reference_is_information_beside_adversarial),
        cmocka_unit_test(forced_prefix_control_is_never_information),
        cmocka_unit_test(all_reduce_control_is_never_information),
        cmocka_unit_test(prefill_decode_difference_fails),
        cmocka_unit_test(invariant_config_fails_on_two_orders_or_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
