// tests/test_case_file.c — case file parsing: values and defaults, and every error naming
// file:line and the key (harness/run/case_file.h); `invar run` exits 2 on bad input.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // FILE, fdopen, fputs, fclose, snprintf
#include <limits.h>   // PATH_MAX
#include <stdlib.h>   // mkstemp, calloc, malloc, free
#include <string.h>   // strstr, strncmp, strchr, strlen, memcpy, memset
#include <unistd.h>   // unlink

#include "../harness/run/case_file.h" // case_file_load, case_file_line
#include "../harness/commands.h"   // cmd_run
#include "../harness/run/matrix.h" // matrix_axis_find, matrix_count

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static const char *valid_case =
    "; a comment\n"                                    // 1
    "[case]\n"                                         // 2
    "name = t\n"                                       // 3
    "model = tiny\n"                                   // 4
    "seed = 99\n"                                      // 5
    "[prompts]\n"                                      // 6
    "count = 6\n"                                      // 7
    "min_len = 3\n"                                    // 8
    "max_len = 40\n"                                   // 9
    "max_new_tokens = 4     ; inline comment\n"        // 10
    "temperature = 0.5\n"                              // 11
    "[matrix]\n"                                       // 12
    "kernel_sets = invariant, reference\n"             // 13
    "batch_sizes = 1,3 , 6\n"                          // 14
    "max_num_batched_tokens = 16, 64\n";               // 15

// Writes text to a fresh temporary file; path receives its name.
static void write_case(const char *text, char *path, size_t len) {
    snprintf(path, len, "/tmp/invar_test_case_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

// Loads text from a fresh temporary file (its name into path, the file gone after) into c; err
// is poisoned first, so a message must be written and terminated.
static bool load_text(const char *text, case_file *c, char *path, size_t path_len, char *err, size_t err_len) {
    write_case(text, path, path_len);
    memset(err, 0x55, err_len);
    err[err_len - 1] = '\0';
    bool ok = case_file_load(path, c, err, err_len);
    unlink(path);
    return ok;
}

// Loads text (the valid case with `line` replaced by `replacement`, or appended when line is 0)
// and expects failure with a message containing "path:expect_line:" and `needle`.
static void expect_error(const char *text, int expect_line, const char *needle) {
    char path[64], err[1024], prefix[96];
    case_file c;
    if (load_text(text, &c, path, sizeof path, err, sizeof err)) fail_msg("expected an error containing '%s'", needle);
    if (expect_line > 0) snprintf(prefix, sizeof prefix, "%s:%d: ", path, expect_line);
    else snprintf(prefix, sizeof prefix, "%s: ", path);
    if (strncmp(err, prefix, strlen(prefix)) != 0)
        fail_msg("'%s' does not start with '%s'", err, prefix);
    if (!strstr(err, needle)) fail_msg("'%s' does not contain '%s'", err, needle);
}

// The valid case with line `n` (1-based) replaced by `line` (which ends with '\n').
static void replace_line(char *out, size_t len, int n, const char *line) {
    const char *p = valid_case;
    size_t used = 0;
    for (int i = 1; *p; i++) {
        const char *nl = strchr(p, '\n');
        size_t l = (size_t)(nl - p) + 1;
        const char *src = i == n ? line : p;
        size_t sl = i == n ? strlen(line) : l;
        assert_true(used + sl < len);
        memcpy(out + used, src, sl);
        used += sl;
        p += l;
    }
    out[used] = '\0';
}

static void expect_error_replacing(int n, const char *line, const char *needle) {
    char text[2048];
    replace_line(text, sizeof text, n, line);
    expect_error(text, n, needle);
}

// ---------------------------------------------------------------------------------------------
// Valid input
// ---------------------------------------------------------------------------------------------

static void parses_values_lists_and_defaults(void **state) {
    (void)state;
    char path[64], err[512];
    write_case(valid_case, path, sizeof path);
    case_file c;
    memset(&c, 0xA5, sizeof c);  // poison: every field the parser owns must be written
    assert_true(case_file_load(path, &c, err, sizeof err));
    unlink(path);
    assert_string_equal(c.name, "t");
    assert_string_equal(c.model, "tiny");
    assert_int_equal(c.seed, 99);
    assert_int_equal(c.count, 6);
    assert_int_equal(c.min_len, 3);
    assert_int_equal(c.max_len, 40);
    assert_int_equal(c.max_new_tokens, 4);
    assert_true(c.temperature == 0.5f);
    assert_int_equal(c.top_k, 5);  // default
    assert_int_equal(c.n_batch_sizes, 3);
    assert_int_equal(c.batch_sizes[0], 1);
    assert_int_equal(c.batch_sizes[1], 3);
    assert_int_equal(c.batch_sizes[2], 6);
    assert_int_equal(case_max_batch_size(&c), 6);
    assert_int_equal(case_max_budget(&c), 64);
    const matrix_list *sets = &c.axes[matrix_axis_find("kernel_sets")];
    assert_int_equal(sets->n, 2);
    assert_string_equal(sets->value[0], "invariant");
    assert_string_equal(sets->value[1], "reference");
    assert_int_equal(sets->line, 13);
    const matrix_list *dev = &c.axes[matrix_axis_find("devices")];
    assert_int_equal(dev->n, 1);  // default
    assert_int_equal(c.n_graph_buckets, 15);  // the default, case_graph_buckets'
    assert_int_equal(c.graph_buckets[0], 1);
    assert_int_equal(c.graph_buckets[14], 512);
    int buckets[16];
    assert_int_equal(case_graph_buckets(buckets, 16), 15);  // invar serve --cuda-graphs's
    assert_memory_equal(buckets, c.graph_buckets, 15 * sizeof(int));
    assert_string_equal(dev->value[0], "cpu");
    assert_int_equal(dev->line, 0);
    assert_int_equal(matrix_count(c.axes), 4);  // 2 sets x 2 budgets
    assert_int_equal(case_file_line(&c, "prompts", "max_new_tokens"), 10);
    assert_int_equal(case_file_line(&c, "prompts", "top_k"), 0);
}

static void shipped_cases_parse(void **state) {
    (void)state;
    const char *files[] = {"cases/ci.ini", "cases/smoke.ini", "cases/backends.ini",
                           "cases/gpu.ini", "cases/nightly.ini", "cases/configs.ini",
                           "cases/eviction.ini"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        case_file c;
        char err[512];
        if (!case_file_load(files[i], &c, err, sizeof err)) fail_msg("%s", err);
        assert_true(matrix_count(c.axes) >= 2);
    }
}

// ---------------------------------------------------------------------------------------------
// Errors: each names file:line and the key
// ---------------------------------------------------------------------------------------------

static void unknown_key(void **state) {
    (void)state;
    expect_error_replacing(11, "temprature = 0.5\n", "unknown key 'temprature' in [prompts]");
    expect_error_replacing(15, "attention_backend = flashmla\n", "'attention_backend'");
    expect_error_replacing(15, "attention_backends = flashmla\n",
                           "[matrix] attention_backends: bad list: unknown attention backend "
                           "'flashmla' (allowed: mla-unified, mla-split, mla-flash, auto)");
}

// The keys of issue 4: models, backends, prefix caching, arrivals, prompt shapes.
static void backend_and_prompt_keys(void **state) {
    (void)state;
    static const char *const keys =
        "models = small, v2-lite\n"                                   // 16
        "attention_backends = mla-split, auto\n"                      // 17
        "prefix_caching = on, off\n"                                  // 18
        "force_prefix_caching = true\n"                               // 19
        "arrivals = staggered, bursty\n"                              // 20
        "[prompts]\nshared_prefix_groups = 2\nshared_prefix_len = 2\n"
        "warm_cache_repeats = 3\n";
    char path[64], err[512], text[2048], more[4096];
    // [case] model and [matrix] models together: one of them.
    snprintf(more, sizeof more, "%s%s", valid_case, keys);
    expect_error(more, 16, "[matrix] models: [case] model is set too (line 4)");
    replace_line(text, sizeof text, 4, "; no model\n");
    snprintf(more, sizeof more, "%s%s", text, keys);
    write_case(more, path, sizeof path);
    case_file c;
    memset(&c, 0xA5, sizeof c);
    bool ok = case_file_load(path, &c, err, sizeof err);
    unlink(path);
    if (!ok) fail_msg("%s", err);
    assert_string_equal(c.model, "small, v2-lite");
    assert_int_equal(c.shared_prefix_groups, 2);
    assert_int_equal(c.shared_prefix_len, 2);
    assert_int_equal(c.warm_cache_repeats, 3);
    assert_int_equal(case_request_count(&c), 9);
    assert_int_equal(case_max_model_len(&c), 44);
    // 2 sets x 2 budgets x 2 models x 2 backends x 2 prefix caching x 2 arrivals
    assert_int_equal(matrix_count(c.axes), 64);
    assert_int_equal(c.axes[matrix_axis_find("models")].line, 16);
    assert_int_equal(c.axes[matrix_axis_find("attention_backends")].line, 17);
    // Without [matrix] models, the [case] model is the one model.
    write_case(valid_case, path, sizeof path);
    ok = case_file_load(path, &c, err, sizeof err);
    unlink(path);
    assert_true(ok);
    const matrix_list *models = &c.axes[matrix_axis_find("models")];
    assert_int_equal(models->n, 1);
    assert_string_equal(models->value[0], "tiny");
    // Neither: required.
    replace_line(text, sizeof text, 4, "; no model\n");
    expect_error(text, 0, "missing required key [case] model (or [matrix] models)");
}

static void bad_prompt_shapes(void **state) {
    (void)state;
    char text[2048];
    snprintf(text, sizeof text, "%s[prompts]\nshared_prefix_groups = 2\n", valid_case);
    expect_error(text, 17, "shared_prefix_groups = 2 with shared_prefix_len = 0: set both");
    snprintf(text, sizeof text, "%s[prompts]\nshared_prefix_groups = 7\nshared_prefix_len = 2\n",
             valid_case);
    expect_error(text, 17, "shared_prefix_groups = 7 exceeds count = 6");
    snprintf(text, sizeof text, "%s[prompts]\nshared_prefix_groups = 2\nshared_prefix_len = 3\n",
             valid_case);
    expect_error(text, 18, "shared_prefix_len = 3 must be below min_len = 3 (line 8)");
    snprintf(text, sizeof text, "%s[prompts]\nwarm_cache_repeats = 65\n", valid_case);
    expect_error(text, 17, "warm_cache_repeats: bad number '65'");
    snprintf(text, sizeof text, "%smodels = tiny, huge\n", valid_case);
    expect_error(text, 16, "unknown model 'huge'");
    snprintf(text, sizeof text, "%sarrivals = at_once, poisson\n", valid_case);
    expect_error(text, 16, "unknown arrival pattern 'poisson'");
    snprintf(text, sizeof text, "%sforce_prefix_caching = yes\n", valid_case);
    expect_error(text, 16, "'yes' is neither true nor false");
}

static void unknown_section_even_when_empty(void **state) {
    (void)state;
    char text[2048];
    snprintf(text, sizeof text, "%s[extra]\n", valid_case);
    expect_error(text, 16, "unknown section [extra]");
}

static void bad_numbers(void **state) {
    (void)state;
    expect_error_replacing(7, "count = 6x\n", "[prompts] count: bad number '6x'");
    expect_error_replacing(7, "count = 0\n", "count: bad number '0'");
    expect_error_replacing(9, "max_len = 99999999999999999999\n", "max_len: bad number");
    expect_error_replacing(11, "temperature = -1\n", "temperature: bad number '-1'");
    expect_error_replacing(11, "temperature = nan\n", "temperature: bad number 'nan'");
    expect_error_replacing(5, "seed = -3\n", "seed: bad number '-3'");
    expect_error_replacing(10, "max_new_tokens =\n", "max_new_tokens: bad number ''");
}

static void bad_lists(void **state) {
    (void)state;
    expect_error_replacing(13, "kernel_sets = invariant,,reference\n",
                           "kernel_sets: bad list: empty item");
    expect_error_replacing(13, "kernel_sets = invariant, fast\n", "unknown kernel set 'fast'");
    expect_error_replacing(13, "kernel_sets = invariant, invariant\n", "given twice");
    expect_error_replacing(14, "batch_sizes = 1, two\n", "batch_sizes: bad number 'two'");
    expect_error_replacing(14, "batch_sizes = 1, 3,\n", "batch_sizes: bad list: empty item");
    expect_error_replacing(15, "max_num_batched_tokens = 0\n", "max_num_batched_tokens: bad list");
    expect_error_replacing(15, "devices = gpu\n", "unknown device 'gpu'");
    expect_error_replacing(15, "chunked_prefill = maybe\n", "neither on nor off");
    expect_error_replacing(15, "block_sizes = 64, 0\n", "'0' is not a KV block size in [1, 4096]");
    expect_error_replacing(15, "kv_cache_blocks = -1\n", "'-1' is not a KV cache size");
    expect_error_replacing(15, "cuda_graph_buckets = 1, 4, 2\n",
                           "cuda_graph_buckets: 2 after 4: the sizes must be ascending");
    expect_error_replacing(15, "cuda_graph_buckets = 1, 0\n", "cuda_graph_buckets: bad number '0'");
    expect_error_replacing(15, "cuda_graphs = yes\n", "neither on nor off");
    // 40 + 4 tokens take 11 blocks of 4: a cache of 10 could never run the longest request.
    char text[2048];
    replace_line(text, sizeof text, 15, "block_sizes = 64, 4\nkv_cache_blocks = 0, 10\n");
    expect_error(text, 16, "[matrix] kv_cache_blocks = 10 holds less than the longest request: "
                 "[prompts] max_len + max_new_tokens = 44 (line 9) takes 11 blocks of block_size 4");
    // At a block size that does not divide 44 the last block is partly used and still taken:
    // 15 blocks of 3. A cache of 14 is refused here, at its line, not later by the engine;
    // 15 loads.
    replace_line(text, sizeof text, 15, "block_sizes = 3\nkv_cache_blocks = 14\n");
    expect_error(text, 16, "[matrix] kv_cache_blocks = 14 holds less than the longest request: "
                 "[prompts] max_len + max_new_tokens = 44 (line 9) takes 15 blocks of block_size 3");
    replace_line(text, sizeof text, 15, "block_sizes = 3\nkv_cache_blocks = 15\n");
    char path[64], err[1024];
    write_case(text, path, sizeof path);
    case_file c;
    bool ok = case_file_load(path, &c, err, sizeof err);
    unlink(path);
    if (!ok) fail_msg("a cache of exactly 15 blocks of 3 for 44 tokens: %s", err);
}

static void duplicate_key(void **state) {
    (void)state;
    expect_error_replacing(15, "count = 7\n", "unknown key 'count' in [matrix]");
    char text[2048];
    snprintf(text, sizeof text, "%s[case]\nseed = 1\n", valid_case);
    expect_error(text, 17, "[case] seed given twice (first at line 5)");
}

static void syntax_error(void **state) {
    (void)state;
    expect_error_replacing(8, "min_len 3\n", "syntax error");
    expect_error_replacing(6, "[prompts\n", "syntax error");
}

// top_k = 0 is valid: only the chosen token and its logprob are compared (README, case files).
static void top_k_zero_compares_the_chosen_token_only(void **state) {
    (void)state;
    char text[2048], path[64], err[512];
    replace_line(text, sizeof text, 11, "top_k = 0\n");
    write_case(text, path, sizeof path);
    case_file *c = calloc(1, sizeof *c);
    assert_non_null(c);
    bool ok = case_file_load(path, c, err, sizeof err);
    if (!ok) fail_msg("%s", err);
    assert_int_equal(c->top_k, 0);
    free(c);
    unlink(path);
    expect_error_replacing(11, "top_k = -1\n", "[prompts] top_k: bad number '-1'");
}

// A path of PATH_MAX characters or more is refused by name, never cut (issue 12, defect 7).
static void path_too_long(void **state) {
    (void)state;
    char *path = malloc(PATH_MAX + 16), err[1024];
    assert_non_null(path);
    memset(path, 'a', PATH_MAX + 15);
    path[0] = '/';
    path[PATH_MAX + 15] = '\0';
    case_file *c = calloc(1, sizeof *c);
    assert_non_null(c);
    assert_false(case_file_load(path, c, err, sizeof err));
    assert_non_null(strstr(err, "path too long"));
    assert_int_equal(strncmp(err, "/aaaa", 5), 0);
    free(c);
    free(path);
}

static void missing_file(void **state) {
    (void)state;
    case_file c;
    char err[512];
    assert_false(case_file_load("/nonexistent/dir/case.ini", &c, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/dir/case.ini: cannot open"));
}

static void missing_required_key(void **state) {
    (void)state;
    // About the file as a whole: no line.
    char text[2048];
    replace_line(text, sizeof text, 7, "; no count\n");
    expect_error(text, 0, "missing required key [prompts] count");
    replace_line(text, sizeof text, 13, "; no sets\n");
    expect_error(text, 0, "missing required key [matrix] kernel_sets");
}

static void conflicting_settings(void **state) {
    (void)state;
    char text[2048];
    // Chunked prefill off needs every budget to hold max_len + max_new_tokens = 44.
    snprintf(text, sizeof text, "%schunked_prefill = on, off\n", valid_case);
    expect_error(text, 16, "chunked_prefill = off with max_num_batched_tokens = 16 (line 15)");
    // The bound itself: 44 holds the longest request and is accepted, 43 is one short.
    char path[64], err[512];
    replace_line(text, sizeof text, 15, "max_num_batched_tokens = 44\n");
    snprintf(text + strlen(text), sizeof text - strlen(text), "chunked_prefill = off\n");
    case_file c;
    if (!load_text(text, &c, path, sizeof path, err, sizeof err))
        fail_msg("a budget of exactly max_len + max_new_tokens was refused: %s", err);
    assert_int_equal(case_max_budget(&c), 44);
    replace_line(text, sizeof text, 15, "max_num_batched_tokens = 43\n");
    snprintf(text + strlen(text), sizeof text - strlen(text), "chunked_prefill = off\n");
    expect_error(text, 16, "chunked_prefill = off with max_num_batched_tokens = 43 (line 15)");
    expect_error_replacing(8, "min_len = 41\n", "min_len = 41 exceeds max_len = 40");
    expect_error_replacing(4, "model = huge\n", "unknown model 'huge'");
    expect_error_replacing(9, "max_len = 4095\n", "max_position_embeddings");
    expect_error_replacing(11, "top_k = 21\n", "top_k: bad number '21'");
}

// ---------------------------------------------------------------------------------------------
// invar run's exit codes for bad input
// ---------------------------------------------------------------------------------------------

static void run_exits_2_on_bad_input(void **state) {
    (void)state;
    char path[64], text[2048];
    replace_line(text, sizeof text, 7, "count = many\n");
    write_case(text, path, sizeof path);
    char *bad_case[] = {"run", "--case", path, "--out", "/tmp", NULL};
    assert_int_equal(cmd_run(5, bad_case), 2);
    unlink(path);
    char *no_case[] = {"run", "-q", NULL};
    assert_int_equal(cmd_run(2, no_case), 2);
    char *bad_option[] = {"run", "--case", "cases/ci.ini", "--fast", NULL};
    assert_int_equal(cmd_run(4, bad_option), 2);
    char *missing[] = {"run", "--case", "/nonexistent.ini", NULL};
    assert_int_equal(cmd_run(3, missing), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_values_lists_and_defaults),
        cmocka_unit_test(shipped_cases_parse),
        cmocka_unit_test(unknown_key),
        cmocka_unit_test(backend_and_prompt_keys),
        cmocka_unit_test(bad_prompt_shapes),
        cmocka_unit_test(unknown_section_even_when_empty),
        cmocka_unit_test(bad_numbers),
        cmocka_unit_test(bad_lists),
        cmocka_unit_test(duplicate_key),
        cmocka_unit_test(syntax_error),
        cmocka_unit_test(missing_file),
        cmocka_unit_test(top_k_zero_compares_the_chosen_token_only),
        cmocka_unit_test(path_too_long),
        cmocka_unit_test(missing_required_key),
        cmocka_unit_test(conflicting_settings),
        cmocka_unit_test(run_exits_2_on_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
