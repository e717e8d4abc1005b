// tests/test_matrix.c — list splitting, axis checks and the cross product of the config matrix
// (harness/run/matrix.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // snprintf
#include <stdlib.h>   // calloc, free
#include <string.h>   // strstr, strcmp, memset

#include "../harness/run/matrix.h" // matrix_*

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static int axis(const char *key) {
    int a = matrix_axis_find(key);
    if (a < 0) fail_msg("no axis %s", key);
    return a;
}

// Every axis at its default (the required ones: the invariant set, the tiny model), then the
// given ones set from text.
static void lists_with(matrix_list *lists, const char *const *keys, const char *const *texts,
                       int n) {
    char why[256];
    memset(lists, 0, sizeof(matrix_list) * MATRIX_MAX_AXES);
    for (int a = 0; a < matrix_axis_count(); a++) {
        const matrix_axis *ax = matrix_axis_at(a);
        const char *required = strcmp(ax->key, "models") == 0 ? "tiny" : "invariant";
        const char *text = ax->default_value ? ax->default_value : required;
        if (!matrix_parse_axis(a, text, &lists[a], why, sizeof why)) fail_msg("%s", why);
    }
    for (int i = 0; i < n; i++)
        if (!matrix_parse_axis(axis(keys[i]), texts[i], &lists[axis(keys[i])], why, sizeof why))
            fail_msg("%s: %s", keys[i], why);
}

// ---------------------------------------------------------------------------------------------
// Lists
// ---------------------------------------------------------------------------------------------

static void splits_and_trims(void **state) {
    (void)state;
    matrix_list l;
    char why[256];
    memset(&l, 0x5A, sizeof l);  // poison
    assert_true(matrix_split_list("  a,b ,\tc c  ", &l, why, sizeof why));
    assert_int_equal(l.n, 3);
    assert_string_equal(l.value[0], "a");
    assert_string_equal(l.value[1], "b");
    assert_string_equal(l.value[2], "c c");
    assert_true(matrix_split_list("only", &l, why, sizeof why));
    assert_int_equal(l.n, 1);
    assert_string_equal(l.value[0], "only");
}

static void rejects_bad_lists(void **state) {
    (void)state;
    matrix_list l;
    char why[256], many[512] = "", longest[64];
    assert_false(matrix_split_list("", &l, why, sizeof why));
    assert_non_null(strstr(why, "empty item"));
    assert_false(matrix_split_list("a,,b", &l, why, sizeof why));
    assert_non_null(strstr(why, "empty item"));
    assert_false(matrix_split_list("a, b,", &l, why, sizeof why));
    assert_false(matrix_split_list("a, b, a", &l, why, sizeof why));
    assert_non_null(strstr(why, "'a' given twice"));
    for (int i = 0; i <= MATRIX_MAX_VALUES; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s%d", i ? "," : "", i);
    assert_false(matrix_split_list(many, &l, why, sizeof why));
    assert_non_null(strstr(why, "more than"));
    memset(longest, 'x', MATRIX_VALUE_LEN);
    longest[MATRIX_VALUE_LEN] = '\0';
    assert_false(matrix_split_list(longest, &l, why, sizeof why));
    assert_non_null(strstr(why, "longer than"));
}

static void axes_check_their_values(void **state) {
    (void)state;
    matrix_list l;
    char why[256];
    assert_true(matrix_parse_axis(axis("devices"), "cpu, cuda, auto", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("devices"), "cpu, tpu", &l, why, sizeof why));
    assert_non_null(strstr(why, "'tpu'"));
    assert_true(
        matrix_parse_axis(axis("kernel_sets"), "reference, invariant", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("kernel_sets"), "invariantt", &l, why, sizeof why));
    assert_true(matrix_parse_axis(axis("max_num_batched_tokens"), "1, 8192", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("max_num_batched_tokens"), "64, -1", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("max_num_batched_tokens"), "6.4", &l, why, sizeof why));
    assert_true(matrix_parse_axis(axis("chunked_prefill"), "on, off", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("chunked_prefill"), "yes", &l, why, sizeof why));
    assert_true(matrix_parse_axis(axis("threads"), "0, 2", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("threads"), "two", &l, why, sizeof why));
    assert_true(matrix_parse_axis(axis("models"), "tiny, v2-lite", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("models"), "tiny, v4", &l, why, sizeof why));
    assert_non_null(strstr(why, "unknown model 'v4'"));
    assert_true(matrix_parse_axis(axis("attention_backends"), "auto, mla-split, mla-flash", &l,
                                  why, sizeof why));
    assert_false(matrix_parse_axis(axis("attention_backends"), "flashmla", &l, why, sizeof why));
    // The allowed names come from the registry.
    assert_non_null(strstr(why, "unknown attention backend 'flashmla' (allowed: mla-unified, "
                                "mla-split, mla-flash, auto)"));
    assert_true(matrix_parse_axis(axis("prefix_caching"), "off, on", &l, why, sizeof why));
    assert_false(matrix_parse_axis(axis("prefix_caching"), "true", &l, why, sizeof why));
    assert_true(matrix_parse_axis(axis("force_prefix_caching"), "true, false", &l, why,
                                  sizeof why));
    assert_false(matrix_parse_axis(axis("force_prefix_caching"), "on", &l, why, sizeof why));
    assert_true(matrix_parse_axis(axis("arrivals"), "at_once, staggered, bursty", &l, why,
                                  sizeof why));
    assert_false(matrix_parse_axis(axis("arrivals"), "poisson", &l, why, sizeof why));
    assert_non_null(strstr(why, "unknown arrival pattern 'poisson'"));
    assert_int_equal(matrix_axis_find("no_such_axis"), -1);
}

static void new_axes_reach_the_config(void **state) {
    (void)state;
    const char *keys[] = {"models", "attention_backends", "prefix_caching",
                          "force_prefix_caching", "arrivals"};
    const char *texts[] = {"tiny, small", "mla-split", "off", "true", "bursty, staggered"};
    matrix_list lists[MATRIX_MAX_AXES];
    lists_with(lists, keys, texts, 5);
    assert_int_equal(matrix_count(lists), 4);
    run_config cfg[4];
    memset(cfg, 0xA5, sizeof cfg);
    assert_int_equal(matrix_expand(lists, cfg), 4);
    // Models vary slower than arrivals; names use the short labels.
    assert_string_equal(cfg[0].model, "tiny");
    assert_string_equal(cfg[3].model, "small");
    assert_int_equal(cfg[0].arrivals, ARRIVALS_BURSTY);
    assert_int_equal(cfg[1].arrivals, ARRIVALS_STAGGERED);
    for (int k = 0; k < 4; k++) {
        assert_string_equal(cfg[k].attention_backend, "mla-split");
        assert_false(cfg[k].prefix_caching);
        assert_true(cfg[k].force_prefix_caching);
    }
    assert_string_equal(cfg[1].name, "cpu/invariant/model=tiny/arrivals=staggered");
}

// ---------------------------------------------------------------------------------------------
// The cross product
// ---------------------------------------------------------------------------------------------

static void expands_every_combination_once(void **state) {
    (void)state;
    const char *keys[] = {"devices", "kernel_sets", "max_num_batched_tokens", "chunked_prefill",
                          "threads"};
    const char *texts[] = {"cpu, cuda", "invariant, reference", "16, 64, 256", "on, off", "2"};
    matrix_list lists[MATRIX_MAX_AXES];
    lists_with(lists, keys, texts, 5);
    long n = matrix_count(lists);
    assert_int_equal(n, 2 * 2 * 3 * 2 * 1);
    run_config *cfg = calloc((size_t)n + 1, sizeof *cfg);
    assert_non_null(cfg);
    memset(cfg, 0xA5, sizeof *cfg * ((size_t)n + 1));  // poison, and a sentinel past the end
    assert_int_equal(matrix_expand(lists, cfg), n);
    unsigned char sentinel[sizeof *cfg];
    memset(sentinel, 0xA5, sizeof sentinel);
    assert_memory_equal(&cfg[n], sentinel, sizeof sentinel);

    int seen[2][2][3][2] = {{{{0}}}};
    const int budgets[] = {16, 64, 256};
    for (long k = 0; k < n; k++) {
        const run_config *c = &cfg[k];
        int d = strcmp(c->device, "cuda") == 0, s = strcmp(c->kernel_set, "reference") == 0;
        int b = c->max_num_batched_tokens == 16 ? 0 : c->max_num_batched_tokens == 64 ? 1 : 2;
        assert_int_equal(c->max_num_batched_tokens, budgets[b]);
        assert_int_equal(c->threads, 2);
        seen[d][s][b][c->chunked_prefill ? 0 : 1]++;
        // The indices name the values the config took.
        int dev = axis("devices");
        assert_string_equal(lists[dev].value[c->axis_index[dev]], c->device);
        // Names are unique and carry the varying axes only.
        for (long j = 0; j < k; j++) assert_string_not_equal(cfg[j].name, c->name);
        char expect[512];
        snprintf(expect, sizeof expect, "%s/%s/max_num_batched_tokens=%d/chunked_prefill=%s",
                 c->device, c->kernel_set, c->max_num_batched_tokens,
                 c->chunked_prefill ? "on" : "off");
        assert_string_equal(c->name, expect);
    }
    for (int i = 0; i < 2 * 2 * 3 * 2; i++) assert_int_equal((&seen[0][0][0][0])[i], 1);
    // The first axis varies slowest, the last fastest.
    assert_string_equal(cfg[0].device, "cpu");
    assert_string_equal(cfg[n - 1].device, "cuda");
    assert_true(cfg[0].chunked_prefill);
    assert_false(cfg[1].chunked_prefill);
    free(cfg);
}

static void single_values_give_one_config(void **state) {
    (void)state;
    matrix_list lists[MATRIX_MAX_AXES];
    lists_with(lists, NULL, NULL, 0);
    assert_int_equal(matrix_count(lists), 1);
    run_config c;
    memset(&c, 0xA5, sizeof c);
    assert_int_equal(matrix_expand(lists, &c), 1);
    assert_string_equal(c.name, "cpu/invariant");
    assert_string_equal(c.device, "cpu");
    assert_true(c.chunked_prefill);
    assert_int_equal(c.threads, 0);
    assert_int_equal(c.max_num_batched_tokens, 2048);
    // Defaults: auto backend, prefix caching on (as in vLLM), not forced, all at once.
    assert_string_equal(c.attention_backend, "auto");
    assert_true(c.prefix_caching);
    assert_false(c.force_prefix_caching);
    assert_int_equal(c.arrivals, ARRIVALS_AT_ONCE);
    assert_string_equal(c.model, "tiny");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(splits_and_trims),
        cmocka_unit_test(rejects_bad_lists),
        cmocka_unit_test(axes_check_their_values),
        cmocka_unit_test(expands_every_combination_once),
        cmocka_unit_test(new_axes_reach_the_config),
        cmocka_unit_test(single_values_give_one_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
