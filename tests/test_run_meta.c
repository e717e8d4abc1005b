// tests/test_run_meta.c — meta.csv: every key written, the case file's xxHash64, the command
// line quoted back, CPU and CUDA device strings (reports/run_meta.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // FILE, fopen, fprintf, fclose, snprintf
#include <limits.h>   // PATH_MAX
#include <stdlib.h>   // mkdtemp, system, malloc, free
#include <string.h>   // strlen, strstr, strcmp, memset
#include <time.h>     // time
#include <unistd.h>   // getpid, getcwd
#include <xxhash.h>   // XXH64

#include "../reports/csv_read.h"    // csv_table_read
#include "../reports/run_meta.h"    // run_meta_write, run_meta_get
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

static const char *const keys[] = {
    "invar_commit", "build_defines", "date_utc", "host", "device", "cpu_model", "driver", "cuda_runtime",
    "cublas", "compute_capability", "case_file", "case_xxh64", "command_line", "seed",
    "working_directory",
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

static void remove_dir(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static csv_table *read_meta(const char *dir) {
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/meta.csv", dir);
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(t->ncols, 2);
    assert_string_equal(t->header[0], "key");
    assert_true(t->nrows >= NKEYS);  // the caller's extra rows follow
    for (int k = 0; k < NKEYS; k++) assert_true(run_meta_get(t, keys[k])[0] != '\0');
    return t;
}

// Issue 12: where the run started (for --resume from elsewhere), the caller's extra rows
// (checkpoint identities) and a command line of PATH_MAX-long paths, kept whole.
static void working_directory_extra_rows_and_long_command_lines(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_meta_XXXXXX", err[1024], cwd[PATH_MAX];
    assert_non_null(mkdtemp(dir));
    assert_non_null(getcwd(cwd, sizeof cwd));
    char *long_arg = malloc(PATH_MAX);
    assert_non_null(long_arg);
    memset(long_arg, 'p', PATH_MAX - 1);
    long_arg[PATH_MAX - 1] = '\0';
    char *argv[] = {"run", "--case", long_arg, "--out", long_arg};
    const char *extra_keys[] = {"checkpoint:/m/ckpt"};
    const char *extra_values[] = {"config.json: xxh64=0123456789abcdef"};
    run_meta_input in = {.device = "cpu", .argc = 5, .argv = argv, .n_extra = 1,
                         .extra_keys = extra_keys, .extra_values = extra_values};
    assert_true(run_meta_write(dir, &in, err, sizeof err));
    csv_table *t = read_meta(dir);
    assert_string_equal(run_meta_get(t, "working_directory"), cwd);
    assert_string_equal(run_meta_get(t, "checkpoint:/m/ckpt"), extra_values[0]);
    const char *cmd = run_meta_get(t, "command_line");
    assert_int_equal(strlen(cmd), strlen("run --case ") + 2 * (PATH_MAX - 1) + strlen(" --out "));
    csv_table_free(t);
    free(long_arg);
    remove_dir(dir);
}

static void cpu_run_writes_every_key(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_meta_XXXXXX", case_path[128], err[1024];
    assert_non_null(mkdtemp(dir));
    // A case file with fresh contents, so its hash is new each run.
    uint64_t seed = invar_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16));
    char contents[256];
    snprintf(contents, sizeof contents, "[case]\nname = t%llx\nseed = %llu\n",
             (unsigned long long)seed, (unsigned long long)(seed >> 1));
    snprintf(case_path, sizeof case_path, "%s/case.ini", dir);
    FILE *f = fopen(case_path, "w");
    assert_non_null(f);
    assert_true(fputs(contents, f) >= 0);
    assert_int_equal(fclose(f), 0);

    char *argv[] = {"invar", "run", "--case", case_path, "--note", "it's a test"};
    run_meta_input in = {.device = "cpu", .case_path = case_path, .argc = 6, .argv = argv,
                         .has_seed = true, .seed = seed};
    assert_true(run_meta_write(dir, &in, err, sizeof err));
    csv_table *t = read_meta(dir);

    char hash[32];
    snprintf(hash, sizeof hash, "%016llx",
             (unsigned long long)XXH64(contents, strlen(contents), 0));
    assert_string_equal(run_meta_get(t, "case_xxh64"), hash);
    assert_string_equal(run_meta_get(t, "case_file"), case_path);
    char seed_text[32];
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)seed);
    assert_string_equal(run_meta_get(t, "seed"), seed_text);
    assert_string_equal(run_meta_get(t, "device"), "cpu");
    assert_string_equal(run_meta_get(t, "driver"), "-");
    assert_string_equal(run_meta_get(t, "compute_capability"), "-");
    // The argument with a space and a quote comes back quoted for a shell.
    assert_non_null(strstr(run_meta_get(t, "command_line"), "--note 'it'\\''s a test'"));
    const char *date = run_meta_get(t, "date_utc");  // 2025-01-31T12:34:56Z
    assert_int_equal(strlen(date), 20);
    assert_int_equal(date[10], 'T');
    assert_int_equal(date[19], 'Z');
    csv_table_free(t);
    remove_dir(dir);
}

static void cuda_strings_are_kept(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_meta_XXXXXX", err[1024];
    assert_non_null(mkdtemp(dir));
    char name[64];
    snprintf(name, sizeof name, "NVIDIA H200 #%llx",
             (unsigned long long)invar_mix64((uint64_t)getpid()));
    char *argv[] = {"invar", "bench"};
    run_meta_input in = {.device = name, .driver = "580.65.06", .cuda_runtime = "13.0",
                         .cublas = "13.0.0", .compute_capability = "9.0", .argc = 2,
                         .argv = argv};
    assert_true(run_meta_write(dir, &in, err, sizeof err));
    csv_table *t = read_meta(dir);
    assert_string_equal(run_meta_get(t, "device"), name);
    assert_string_equal(run_meta_get(t, "driver"), "580.65.06");
    assert_string_equal(run_meta_get(t, "cuda_runtime"), "13.0");
    assert_string_equal(run_meta_get(t, "cublas"), "13.0.0");
    assert_string_equal(run_meta_get(t, "compute_capability"), "9.0");
    assert_string_equal(run_meta_get(t, "case_file"), "-");   // none given
    assert_string_equal(run_meta_get(t, "seed"), "-");
    assert_string_equal(run_meta_get(t, "command_line"), "invar bench");
    csv_table_free(t);
    remove_dir(dir);
}

static void unreadable_case_file_is_an_error(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_meta_XXXXXX", err[1024], missing[128];
    assert_non_null(mkdtemp(dir));
    snprintf(missing, sizeof missing, "%s/no-such-case.ini", dir);
    char *argv[] = {"invar"};
    run_meta_input in = {.case_path = missing, .argc = 1, .argv = argv};
    assert_false(run_meta_write(dir, &in, err, sizeof err));
    assert_non_null(strstr(err, missing));
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_run_writes_every_key),
        cmocka_unit_test(working_directory_extra_rows_and_long_command_lines),
        cmocka_unit_test(cuda_strings_are_kept),
        cmocka_unit_test(unreadable_case_file_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
