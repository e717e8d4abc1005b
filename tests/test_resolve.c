// tests/test_resolve.c — config resolution (harness/run/resolve.h): the three selection paths
// (flag, case key, environment) and their precedence, the prefix-caching and chunked-prefill
// auto-disable with its one warning per run, refusals, auto, the forced negative control and
// merging.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // FILE, fdopen, fputs, fclose, open_memstream, snprintf
#include <stdlib.h>   // mkstemp, setenv, unsetenv, free
#include <string.h>   // strstr, strcmp, memset
#include <unistd.h>   // unlink

#include "../harness/run/case_file.h" // case_file_load
#include "../harness/run/matrix.h" // matrix_expand, matrix_count
#include "../harness/run/resolve.h" // resolve_*

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

// A case that asks for prefix caching and chunked prefill with a budget below max_model_len
// (40 + 4 = 44), so a backend invariant with neither has both switched off. `extra` is
// appended to [matrix].
static void load_case(const char *extra, case_file *c) {
    char text[2048], path[64], err[512];
    snprintf(text, sizeof text,
             "[case]\nname = r\nmodel = tiny\n"
             "[prompts]\ncount = 4\nmin_len = 3\nmax_len = 40\nmax_new_tokens = 4\n"
             "[matrix]\nkernel_sets = invariant\nbatch_sizes = 1, 4\n"
             "max_num_batched_tokens = 16\nprefix_caching = on\nchunked_prefill = on\n%s",
             extra);
    snprintf(path, sizeof path, "/tmp/invar_test_resolve_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    memset(c, 0xA5, sizeof *c);
    bool ok = case_file_load(path, c, err, sizeof err);
    unlink(path);
    if (!ok) fail_msg("%s", err);
}

// Sets [matrix] KEY = TEXT in c, as a case file would; fails the test naming KEY on a bad value.
static void set_axis(case_file *c, const char *key, const char *text) {
    char why[256];
    const int axis = matrix_axis_find(key);
    assert_true(axis >= 0);
    if (!matrix_parse_axis(axis, text, &c->axes[axis], why, sizeof why)) fail_msg("%s = %s: %s", key, text, why);
}

// Selects the backend (flag may be NULL), expands the matrix into cfg (room for max) and
// resolves every config on cpu; returns the config count.
static int select_and_resolve(case_file *c, const char *flag, backend_selection *sel,
                              run_config *cfg, resolved_config *r, int max) {
    char err[1024];
    memset(sel, 0x5A, sizeof *sel);
    if (!resolve_select_backend(c, flag, sel, err, sizeof err)) fail_msg("%s", err);
    int n = (int)matrix_count(c->axes);
    assert_true(n <= max);
    assert_int_equal(matrix_expand(c->axes, cfg), n);
    memset(r, 0xA5, sizeof *r * (size_t)n);
    for (int k = 0; k < n; k++)
        resolve_config(&cfg[k], "cpu", strcmp(cfg[k].kernel_set, "invariant") == 0,
                       case_max_model_len(c), &r[k]);
    return n;
}

// What resolve_print_warnings writes for r[0 .. n); the caller frees it.
static char *warnings_of(const resolved_config *r, int n) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    resolve_print_warnings(r, n, f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static int occurrences(const char *haystack, const char *needle) {
    int n = 0;
    for (const char *p = strstr(haystack, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

#define PREFIX_WARNING                                                                        \
    "warning: prefix caching disabled: attention backend mla-split is not batch-invariant "   \
    "with prefix caching\n"

// ---------------------------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------------------------

// The same backend chosen by the flag, the case key or the environment variable resolves to the
// same effective settings, the same warning and the same recorded reason.
static void three_selection_paths_resolve_alike(void **state) {
    (void)state;
    case_file c;
    backend_selection sel[3];
    run_config cfg[3][4];
    resolved_config r[3][4];
    char *warn[3];

    unsetenv(RESOLVE_BACKEND_ENV);
    load_case("", &c);
    assert_int_equal(select_and_resolve(&c, "mla-split", &sel[0], cfg[0], r[0], 4), 1);
    warn[0] = warnings_of(r[0], 1);

    load_case("attention_backends = mla-split\n", &c);
    assert_int_equal(select_and_resolve(&c, NULL, &sel[1], cfg[1], r[1], 4), 1);
    warn[1] = warnings_of(r[1], 1);

    load_case("", &c);
    assert_int_equal(setenv(RESOLVE_BACKEND_ENV, "mla-split", 1), 0);
    assert_int_equal(select_and_resolve(&c, NULL, &sel[2], cfg[2], r[2], 4), 1);
    unsetenv(RESOLVE_BACKEND_ENV);
    warn[2] = warnings_of(r[2], 1);

    assert_int_equal(sel[0].origin, SELECTED_BY_FLAG);
    assert_string_equal(sel[0].where, "--attention-backend");
    assert_int_equal(sel[1].origin, SELECTED_BY_CASE);
    assert_non_null(strstr(sel[1].where, ":15"));  // file:line of the key
    assert_int_equal(sel[2].origin, SELECTED_BY_ENV);
    assert_string_equal(sel[2].where, RESOLVE_BACKEND_ENV);
    for (int p = 0; p < 3; p++) {
        const resolved_config *x = &r[p][0];
        assert_true(sel[p].explicit_single);
        assert_false(x->skip);
        assert_string_equal(x->backend->name, "mla-split");
        assert_true(x->batch_invariant_mode);
        assert_false(x->prefix_caching);
        assert_true(x->prefix_caching_disabled);
        assert_false(x->chunked_prefill);
        assert_true(x->chunked_prefill_disabled);
        assert_int_equal(x->max_num_batched_tokens, 44);  // raised to max_model_len
        assert_true(x->expect_invariant);
        assert_int_equal(x->merged_into, -1);
        // The requested settings stay as asked, for the report.
        assert_true(cfg[p][0].prefix_caching);
        assert_int_equal(cfg[p][0].max_num_batched_tokens, 16);
        assert_string_equal(x->reason, r[0][0].reason);
        assert_string_equal(warn[p], warn[0]);
    }
    assert_string_equal(r[0][0].reason,
                        "prefix caching disabled: attention backend mla-split is not "
                        "batch-invariant with prefix caching; chunked prefill disabled: "
                        "attention backend mla-split is not batch-invariant with chunked "
                        "prefill; max_num_batched_tokens 16 -> 44 (max_model_len), as vLLM does");
    assert_string_equal(warn[0],
                        PREFIX_WARNING
                        "warning: chunked prefill disabled: attention backend mla-split is not "
                        "batch-invariant with chunked prefill; max_num_batched_tokens raised to "
                        "at least max_model_len = 44, as vLLM does\n");
    for (int p = 0; p < 3; p++) free(warn[p]);
}

static void precedence_flag_case_env_auto(void **state) {
    (void)state;
    case_file c;
    backend_selection sel;
    run_config cfg[4];
    resolved_config r[4];
    assert_int_equal(setenv(RESOLVE_BACKEND_ENV, "mla-split", 1), 0);
    // The flag beats the case key and the variable.
    load_case("attention_backends = mla-split, mla-flash\n", &c);
    assert_int_equal(select_and_resolve(&c, "mla-unified", &sel, cfg, r, 4), 1);
    assert_string_equal(r[0].backend->name, "mla-unified");
    // The case key beats the variable; several values are no explicit single selection.
    load_case("attention_backends = mla-unified, auto\n", &c);
    assert_int_equal(select_and_resolve(&c, NULL, &sel, cfg, r, 4), 2);
    assert_int_equal(sel.origin, SELECTED_BY_CASE);
    assert_false(sel.explicit_single);
    assert_string_equal(r[0].backend->name, "mla-unified");
    // An empty variable is unset: auto.
    assert_int_equal(setenv(RESOLVE_BACKEND_ENV, "", 1), 0);
    load_case("", &c);
    assert_int_equal(select_and_resolve(&c, NULL, &sel, cfg, r, 4), 1);
    assert_int_equal(sel.origin, SELECTED_BY_AUTO);
    assert_false(sel.explicit_single);
    unsetenv(RESOLVE_BACKEND_ENV);
}

// An unknown name is an error naming where it came from.
static void unknown_names_say_where(void **state) {
    (void)state;
    case_file c;
    backend_selection sel;
    char err[1024];
    load_case("", &c);
    memset(err, 0x55, sizeof err);
    assert_false(resolve_select_backend(&c, "flashmla", &sel, err, sizeof err));
    assert_non_null(strstr(err, "--attention-backend: unknown attention backend 'flashmla'"));
    assert_non_null(strstr(err, "mla-unified, mla-split, mla-flash, auto"));
    assert_int_equal(setenv(RESOLVE_BACKEND_ENV, "triton", 1), 0);
    assert_false(resolve_select_backend(&c, NULL, &sel, err, sizeof err));
    unsetenv(RESOLVE_BACKEND_ENV);
    assert_non_null(strstr(err, RESOLVE_BACKEND_ENV "=triton: unknown attention backend"));
    assert_false(resolve_select_backend(&c, "mla-split,mla-flash", &sel, err, sizeof err));
    assert_non_null(strstr(err, "expected one attention backend"));
}

// ---------------------------------------------------------------------------------------------
// Capabilities
// ---------------------------------------------------------------------------------------------

static void auto_picks_mla_unified(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    case_file c;
    backend_selection sel;
    run_config cfg[4];
    resolved_config r[4];
    load_case("", &c);
    assert_int_equal(select_and_resolve(&c, NULL, &sel, cfg, r, 4), 1);
    assert_string_equal(cfg[0].attention_backend, "auto");
    assert_string_equal(r[0].backend->name, "mla-unified");
    // Invariant with both: nothing switched off, nothing to warn about.
    assert_true(r[0].prefix_caching);
    assert_true(r[0].chunked_prefill);
    assert_int_equal(r[0].max_num_batched_tokens, 16);
    assert_string_equal(r[0].reason, "");
    assert_true(r[0].expect_invariant);
    char *w = warnings_of(r, 1);
    assert_string_equal(w, "");
    free(w);
}

static void mla_flash_is_refused_in_invariant_mode(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    case_file c;
    backend_selection sel;
    run_config cfg[4];
    resolved_config r[4];
    char err[1024];
    // One explicit selection: an error naming the backend, where it came from and the allowed.
    load_case("", &c);
    assert_int_equal(select_and_resolve(&c, "mla-flash", &sel, cfg, r, 4), 1);
    assert_true(r[0].skip);
    assert_true(r[0].refused);
    assert_non_null(strstr(r[0].skip_reason, "attention backend mla-flash is not "
                                             "batch-invariant"));
    assert_non_null(strstr(r[0].skip_reason, "(allowed on cpu: mla-unified, mla-split)"));
    memset(err, 0x55, sizeof err);
    assert_false(resolve_check_refusals(r, 1, &sel, err, sizeof err));
    assert_non_null(strstr(err, "--attention-backend: attention backend mla-flash"));
    assert_non_null(strstr(err, "mla-unified, mla-split"));
    // Inside a matrix of several backends: a SKIP, not an error.
    load_case("attention_backends = mla-unified, mla-flash\n", &c);
    assert_int_equal(select_and_resolve(&c, NULL, &sel, cfg, r, 4), 2);
    assert_false(r[0].skip);
    assert_true(r[1].refused);
    assert_true(resolve_check_refusals(r, 2, &sel, err, sizeof err));
}

static void reference_set_runs_mla_flash_as_a_negative_control(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    run_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.kernel_set, sizeof cfg.kernel_set, "reference");
    snprintf(cfg.attention_backend, sizeof cfg.attention_backend, "mla-flash");
    cfg.prefix_caching = cfg.chunked_prefill = true;
    cfg.max_num_batched_tokens = 16;
    resolved_config r;
    resolve_config(&cfg, "cpu", false, 44, &r);
    // Not batch-invariant mode: nothing refused, nothing switched off, expected to vary.
    assert_false(r.skip);
    assert_string_equal(r.backend->name, "mla-flash");
    assert_true(r.prefix_caching);
    assert_true(r.chunked_prefill);
    assert_false(r.expect_invariant);
}

static void force_prefix_caching_keeps_it_on(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    case_file c;
    backend_selection sel;
    run_config cfg[4];
    resolved_config r[4];
    load_case("attention_backends = mla-split\nforce_prefix_caching = true\n", &c);
    assert_int_equal(select_and_resolve(&c, NULL, &sel, cfg, r, 4), 1);
    assert_true(r[0].prefix_caching);
    assert_false(r[0].prefix_caching_disabled);
    assert_true(r[0].chunked_prefill_disabled);  // forcing is for prefix caching only
    assert_false(r[0].expect_invariant);         // the negative control: must be caught
    assert_non_null(strstr(r[0].reason, "prefix caching kept on by force_prefix_caching"));
    char *w = warnings_of(r, 1);
    assert_int_equal(occurrences(w, "prefix caching disabled"), 0);
    free(w);
    // On a backend invariant with prefix caching, forcing changes nothing.
    load_case("attention_backends = mla-unified\nforce_prefix_caching = true\n", &c);
    assert_int_equal(select_and_resolve(&c, NULL, &sel, cfg, r, 4), 1);
    assert_true(r[0].expect_invariant);
    assert_string_equal(r[0].reason, "");
}

// ---------------------------------------------------------------------------------------------
// The whole matrix
// ---------------------------------------------------------------------------------------------

static void one_warning_per_run_and_merges(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    case_file c;
    backend_selection sel;
    run_config cfg[16];
    resolved_config r[16];
    load_case("attention_backends = mla-split, mla-unified\nforce_prefix_caching = false, true\n"
              "threads = 1, 2\n", &c);
    int n = select_and_resolve(&c, NULL, &sel, cfg, r, 16);
    assert_int_equal(n, 8);
    char *w = warnings_of(r, n);
    assert_int_equal(occurrences(w, PREFIX_WARNING), 1);
    assert_int_equal(occurrences(w, "warning: chunked prefill disabled"), 1);
    assert_int_equal(occurrences(w, "warning:"), 2);
    free(w);
    // mla-split forced / not forced differ (prefix caching on / off); mla-unified's force is a
    // no-op, so its forced configs merge into the unforced ones.
    assert_int_equal(resolve_merge(cfg, r, n), 2);
    for (int k = 0; k < n; k++) {
        bool unified = strcmp(cfg[k].attention_backend, "mla-unified") == 0;
        if (unified && cfg[k].force_prefix_caching) {
            int j = r[k].merged_into;
            assert_true(j >= 0 && j < k);
            assert_false(cfg[j].force_prefix_caching);
            assert_int_equal(cfg[j].threads, cfg[k].threads);
        } else {
            assert_int_equal(r[k].merged_into, -1);
        }
    }
}

static void settings_that_resolve_alike_merge(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    case_file c;
    backend_selection sel;
    run_config cfg[16];
    resolved_config r[16];
    // With mla-split, prefix caching on/off and chunked prefill on/off all resolve to off/off.
    load_case("attention_backends = mla-split\n", &c);
    set_axis(&c, "prefix_caching", "on, off");
    set_axis(&c, "max_num_batched_tokens", "44");
    set_axis(&c, "chunked_prefill", "on, off");
    int n = select_and_resolve(&c, NULL, &sel, cfg, r, 16);
    assert_int_equal(n, 4);
    assert_int_equal(resolve_merge(cfg, r, n), 3);
    for (int k = 1; k < n; k++) assert_int_equal(r[k].merged_into, 0);
    // Skipped configs never merge.
    resolve_skip_device("cuda", "built without CUDA", &r[1]);
    assert_true(r[1].skip);
    assert_non_null(strstr(r[1].skip_reason, "no CUDA device: built without CUDA"));
    assert_int_equal(resolve_merge(cfg, r, n), 2);
    assert_int_equal(r[1].merged_into, -1);
}

// The KV block size and the cache size change which blocks a batch gets, which a kernel's
// gather reads across: configs apart only in those never merge, even where mla-split resolves
// everything else alike.
static void block_and_cache_sizes_never_merge(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    case_file c;
    backend_selection sel;
    run_config cfg[16];
    resolved_config r[16];
    load_case("attention_backends = mla-split\n", &c);
    set_axis(&c, "block_sizes", "64, 7");
    set_axis(&c, "kv_cache_blocks", "0, 1000");
    set_axis(&c, "max_num_batched_tokens", "44");
    set_axis(&c, "chunked_prefill", "on, off");
    int n = select_and_resolve(&c, NULL, &sel, cfg, r, 16);
    assert_int_equal(n, 8);
    // Only chunked prefill on/off resolves alike: four pairs.
    assert_int_equal(resolve_merge(cfg, r, n), 4);
    for (int k = 0; k < n; k++) {
        int j = r[k].merged_into;
        if (j < 0) continue;
        assert_int_equal(cfg[j].block_size, cfg[k].block_size);
        assert_int_equal(cfg[j].kv_cache_blocks, cfg[k].kv_cache_blocks);
        assert_true(cfg[j].chunked_prefill != cfg[k].chunked_prefill);
    }
}

// Each setting that changes how a config runs keeps it apart: two configs that differ in one of
// them only never merge, though mla-split resolves their prefix caching and chunked prefill alike
// (the control: those two axes alone do merge, settings_that_resolve_alike_merge). The kernel
// set is not in the list: an invariant and a reference config resolve differently anyway.
static void run_settings_never_merge(void **state) {
    (void)state;
    unsetenv(RESOLVE_BACKEND_ENV);
    static const char *const apart[][2] = {
        {"arrivals", "at_once, staggered"}, {"threads", "1, 2"},   {"tp_size_invariance", "off, on"},
        {"cuda_graphs", "off, on"},         {"models", "tiny, tiny-v2"},
    };
    for (size_t a = 0; a < sizeof apart / sizeof apart[0]; a++) {
        case_file c;
        backend_selection sel;
        run_config cfg[16];
        resolved_config r[16];
        load_case("attention_backends = mla-split\n", &c);
        set_axis(&c, apart[a][0], apart[a][1]);
        int n = select_and_resolve(&c, NULL, &sel, cfg, r, 16);
        assert_int_equal(n, 2);
        for (int k = 0; k < n; k++)
            if (r[k].skip)
                fail_msg("%s: config %d skipped (%s): the test would judge nothing", apart[a][0], k,
                         r[k].skip_reason);
        if (resolve_merge(cfg, r, n) != 0) fail_msg("configs apart only in %s merged", apart[a][0]);
        assert_int_equal(r[1].merged_into, -1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(three_selection_paths_resolve_alike),
        cmocka_unit_test(run_settings_never_merge),
        cmocka_unit_test(precedence_flag_case_env_auto),
        cmocka_unit_test(unknown_names_say_where),
        cmocka_unit_test(auto_picks_mla_unified),
        cmocka_unit_test(mla_flash_is_refused_in_invariant_mode),
        cmocka_unit_test(reference_set_runs_mla_flash_as_a_negative_control),
        cmocka_unit_test(force_prefix_caching_keeps_it_on),
        cmocka_unit_test(one_warning_per_run_and_merges),
        cmocka_unit_test(settings_that_resolve_alike_merge),
        cmocka_unit_test(block_and_cache_sizes_never_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
