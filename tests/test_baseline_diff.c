// tests/test_baseline_diff.c — `invar report diff`: a planted regression (pass -> fail) and a
// planted 10% benchmark slowdown are flagged and exit 1, a 2% one is not; fixed, new and
// vanished configs are listed; bad input exits 2 (reports/baseline_diff.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // FILE, fopen, fprintf, fclose, snprintf
#include <stdlib.h>   // mkdtemp, system
#include <string.h>   // strstr
#include <sys/stat.h> // mkdir
#include <time.h>     // time
#include <unistd.h>   // getpid

#include "../reports/baseline_diff.h"  // baseline_diff
#include "report_gallery.h"           // gallery_summary, gallery_kernels, gallery_write_*
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

typedef struct {
    char root[64], base[96], now[96];
} dirs;

static void make_dirs(dirs *d) {
    snprintf(d->root, sizeof d->root, "/tmp/invar_test_diff_XXXXXX");
    assert_non_null(mkdtemp(d->root));
    snprintf(d->base, sizeof d->base, "%s/base", d->root);
    snprintf(d->now, sizeof d->now, "%s/new", d->root);
    assert_int_equal(mkdir(d->base, 0777), 0);
    assert_int_equal(mkdir(d->now, 0777), 0);
}

static void remove_dirs(const dirs *d) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->root);
    assert_int_equal(system(cmd), 0);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static char *slurp(const char *dir, const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    assert_int_equal(fclose(f), 0);
    return buf;
}

// summary.csv with configs (name, verdict); extra columns the diff must not care about.
static void write_summary(const char *dir, const char *const *names, const char *const *verdicts,
                          int n, uint64_t seed) {
    char text[4096];
    int used = snprintf(text, sizeof text, "case,config,device,verdict,first_request,"
                        "first_step,first_abs_delta,seconds,unknown_future_column\n");
    for (int i = 0; i < n; i++)
        used += snprintf(text + used, sizeof text - (size_t)used,
                         "nightly,%s,cpu,%s,%s,%s,%s,%.3f,%d\n", names[i], verdicts[i],
                         verdicts[i][0] == 'F' ? "3" : "", verdicts[i][0] == 'F' ? "1" : "",
                         verdicts[i][0] == 'F' ? "0.001" : "",
                         invar_uniform(invar_mix64(seed + (uint64_t)i)) * 10.0, i);
    write_file(dir, "summary.csv", text);
}

// bench_gemm.csv in the bench writer's format; `scale` multiplies row `slow_row`'s inv_us, and
// every row's floor_read_us (the device's plain read, which the diff must not compare) by scale².
static void write_bench(const char *dir, uint64_t seed, int slow_row, double scale) {
    char text[4096];
    int used = snprintf(text, sizeof text,
                        "N,K,M,inv_us,ref_us,inv_tflops,ref_tflops,ratio_inv_over_ref,floor_read_us\n");
    const double floor_us = (5.0 + 10.0 * invar_uniform(invar_mix64(seed ^ 0xf100u))) * scale * scale;
    for (int i = 0; i < 6; i++) {
        // Fresh times each run, identical on both sides unless scaled.
        double us = 10.0 + 100.0 * invar_uniform(invar_mix64(seed ^ (uint64_t)(i + 1)));
        double inv = i == slow_row ? us * scale : us;
        int M = 1 << (2 * i);
        double flop = 2.0 * M * 2048 * 7168;
        used += snprintf(text + used, sizeof text - (size_t)used,
                         "2048,7168,%d,%.4f,%.4f,%.3f,%.3f,%.3f,%.4f\n", M, inv, us * 0.9,
                         flop / inv / 1e6, flop / (us * 0.9) / 1e6, inv / (us * 0.9), floor_us);
    }
    write_file(dir, "bench_gemm.csv", text);
}

static uint64_t fresh_seed(void) {
    return invar_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 24));
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

static void flags_regression_and_slowdown(void **state) {
    (void)state;
    dirs d;
    make_dirs(&d);
    uint64_t seed = fresh_seed();
    const char *base_names[] = {"cpu/a", "cpu/b", "cpu/c", "cpu/gone"};
    const char *base_verdicts[] = {"PASS", "FAIL", "PASS", "PASS"};
    const char *new_names[] = {"cpu/a", "cpu/b", "cpu/c", "cpu/added"};
    const char *new_verdicts[] = {"FAIL", "PASS", "PASS", "PASS"};
    write_summary(d.base, base_names, base_verdicts, 4, seed);
    write_summary(d.now, new_names, new_verdicts, 4, seed + 99);
    int slow = (int)(seed % 6);
    write_bench(d.base, seed, -1, 1.0);
    write_bench(d.now, seed, slow, 1.10);  // 10% slower

    diff_result r;
    char err[1024];
    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    int rc = baseline_diff(d.base, d.now, BASELINE_DIFF_DEFAULT_THRESHOLD, false, devnull, &r, err,
                           sizeof err);
    assert_int_equal(rc, 1);
    assert_int_equal(r.regressions, 1);
    assert_int_equal(r.fixed, 1);
    assert_int_equal(r.added, 1);
    assert_int_equal(r.vanished, 1);
    assert_int_equal(r.slower, 1);
    assert_int_equal(r.faster, 0);
    assert_int_equal(r.bench_unmatched, 0);
    assert_int_equal(r.bench_compared, 12);  // six rows, inv_us and ref_us; never floor_read_us
    const char *md = slurp(d.now, "diff.md");
    assert_non_null(strstr(md, "Regressions"));
    assert_non_null(strstr(md, "`nightly: cpu/a` | PASS | FAIL"));
    assert_non_null(strstr(md, "`nightly: cpu/b` | FAIL | PASS"));
    assert_non_null(strstr(md, "cpu/added"));
    assert_non_null(strstr(md, "cpu/gone"));
    char row[64];
    snprintf(row, sizeof row, "N=2048 K=7168 M=%d | inv_us", 1 << (2 * slow));
    assert_non_null(strstr(md, row));
    assert_non_null(strstr(md, "+10.0%"));

    // With a threshold above the slowdown, only the config regression is left.
    rc = baseline_diff(d.base, d.now, 15.0, false, devnull, &r, err, sizeof err);
    assert_int_equal(rc, 1);
    assert_int_equal(r.slower, 0);
    assert_int_equal(r.regressions, 1);
    assert_int_equal(fclose(devnull), 0);
    remove_dirs(&d);
}

static void small_slowdown_is_not_a_regression(void **state) {
    (void)state;
    dirs d;
    make_dirs(&d);
    uint64_t seed = fresh_seed();
    const char *names[] = {"cpu/a", "cpu/b"};
    const char *verdicts[] = {"PASS", "SKIP"};
    write_summary(d.base, names, verdicts, 2, seed);
    write_summary(d.now, names, verdicts, 2, seed + 1);
    write_bench(d.base, seed, -1, 1.0);
    write_bench(d.now, seed, (int)(seed % 6), 1.02);  // 2% slower: noise
    diff_result r;
    char err[1024];
    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, devnull, &r, err, sizeof err), 0);
    assert_int_equal(r.slower, 0);
    assert_int_equal(r.regressions, 0);
    // A 20% speed-up is reported, not a regression.
    write_bench(d.now, seed, (int)(seed % 6), 0.8);
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, devnull, &r, err, sizeof err), 0);
    assert_int_equal(r.faster, 1);
    assert_non_null(strstr(slurp(d.now, "diff.md"), "faster than 5%"));
    assert_int_equal(fclose(devnull), 0);
    remove_dirs(&d);
}

// A config skipped before (last night's host could not run it) and failing now is a regression:
// the nightly gate must not let a failure through because the baseline never judged it.
static void skipped_then_failing_is_a_regression(void **state) {
    (void)state;
    dirs d;
    make_dirs(&d);
    uint64_t seed = fresh_seed();
    const char *names[] = {"cpu/a", "cpu/b", "cpu/c"};
    const char *before[] = {"SKIP", "PASS", "SKIP"}, *now[] = {"FAIL", "PASS", "SKIP"};
    write_summary(d.base, names, before, 3, seed);
    write_summary(d.now, names, now, 3, seed + 1);
    diff_result r;
    char err[1024];
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, NULL, &r, err, sizeof err), 1);
    assert_int_equal(r.regressions, 1);
    assert_non_null(strstr(slurp(d.now, "diff.md"), "| `nightly: cpu/a` | SKIP | FAIL | "));
    remove_dirs(&d);
}

static void bad_input_exits_2(void **state) {
    (void)state;
    dirs d;
    make_dirs(&d);
    diff_result r;
    char err[1024], missing[128];
    snprintf(missing, sizeof missing, "%s/no-such-dir", d.root);
    assert_int_equal(baseline_diff(missing, d.now, 5.0, false, NULL, &r, err, sizeof err), 2);
    assert_non_null(strstr(err, missing));
    // Empty directories: no report CSV.
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, NULL, &r, err, sizeof err), 2);
    assert_non_null(strstr(err, "no report CSV"));
    // summary.csv on one side only names the missing file.
    const char *names[] = {"cpu/a"}, *verdicts[] = {"PASS"};
    write_summary(d.base, names, verdicts, 1, fresh_seed());
    write_bench(d.now, fresh_seed(), -1, 1.0);
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, NULL, &r, err, sizeof err), 2);
    assert_non_null(strstr(err, "new/summary.csv"));
    remove_dirs(&d);
}

// Issue 12, defect 4: a summary.csv that cannot be read as a report is exit 2 naming it, never
// "every config vanished, no regression"; a vanished config is a regression unless `partial`.
static void unreadable_report_and_vanished_configs(void **state) {
    (void)state;
    dirs d;
    make_dirs(&d);
    const char *names[] = {"cpu/a", "cpu/b"}, *verdicts[] = {"PASS", "PASS"};
    write_summary(d.base, names, verdicts, 2, fresh_seed());
    static const char *const bad[][2] = {
        {"\x01\x9c\xff garbage\x02\n\x17\xfe\n", "no 'config' column"},
        {"case,config,device,verdict\n", "a header and no rows"},
        {"case,device,verdict\nnightly,cpu,PASS\n", "no 'config' column"},
        {"case,config,device,verdict\nnightly,,cpu,PASS\n", "empty 'config'"},
    };
    diff_result r;
    char err[1024], want[256];
    snprintf(want, sizeof want, "%s/summary.csv", d.now);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(d.now, "summary.csv", bad[i][0]);
        assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, NULL, &r, err, sizeof err), 2);
        assert_non_null(strstr(err, want));
        assert_non_null(strstr(err, bad[i][1]));
    }
    const char *part[] = {"cpu/a"};
    write_summary(d.now, part, verdicts, 1, fresh_seed());
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, NULL, &r, err, sizeof err), 1);
    assert_int_equal(r.vanished, 1);
    assert_int_equal(r.regressions, 0);
    assert_non_null(strstr(slurp(d.now, "diff.md"), "1 regression (0 failing now, 1 vanished"));
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, true, NULL, &r, err, sizeof err), 0);
    assert_int_equal(r.vanished, 1);
    remove_dirs(&d);
}

static void key_columns(void **state) {
    (void)state;
    const char *keys[] = {"N", "K", "M", "set", "op", "batch", "context", "heads", "shape"};
    const char *measures[] = {"inv_us", "ref_us", "inv_tflops", "ratio_inv_over_ref",
                              "median_ms", "inv_gbs", "inv_pct_copy", "seed", "seconds"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_true(baseline_diff_is_key_column(keys[i]));
    for (size_t i = 0; i < sizeof measures / sizeof measures[0]; i++)
        assert_false(baseline_diff_is_key_column(measures[i]));
}

// Every verdict kind against a baseline where all passed: each failing kind (FAIL batch-variant,
// nondeterministic, error, a control not triggered; kernel FAIL, VARIES where stable, CRASH,
// ERROR) is a regression shown with its detail, a SKIP is "now skipped"; and a baseline of
// another case is said to be one before the lists.
static void every_verdict_kind_and_other_cases(void **state) {
    (void)state;
    dirs d;
    make_dirs(&d);
    uint64_t seed = fresh_seed();
    char path[256], err[1024];
    snprintf(path, sizeof path, "%s/summary.csv", d.now);
    assert_true(gallery_write_summary(path, "gallery", seed, err, sizeof err));
    snprintf(path, sizeof path, "%s/kernels.csv", d.now);
    assert_true(gallery_write_kernels(path, seed, err, sizeof err));
    // The baseline: the same configs of the same case, all passed.
    char text[4096];
    int used = snprintf(text, sizeof text, "case,config,device,verdict\n");
    for (int i = 0; i < GALLERY_SUMMARY_ROWS; i++)
        used += snprintf(text + used, sizeof text - (size_t)used, "gallery,%s,cpu,PASS\n",
                         gallery_summary[i].config);
    write_file(d.base, "summary.csv", text);
    char kernels[4096];
    used = snprintf(kernels, sizeof kernels, "set,device,op,shape,status,expect,invariant\n");
    int want_regressions = 0, want_skipped = 0;
    for (int i = 0; i < GALLERY_KERNEL_ROWS; i++) {
        const gallery_kernel_row *g = &gallery_kernels[i];
        used += snprintf(kernels + used, sizeof kernels - (size_t)used, "%s,cpu,%s,%s,ok,%s,yes\n",
                         g->set, g->op, g->shape, g->expect);
        want_regressions += g->want == ROW_FAIL || g->want == ROW_ERROR;
        want_skipped += g->want == ROW_SKIP;
    }
    for (int i = 0; i < GALLERY_SUMMARY_ROWS; i++) {
        want_regressions += gallery_summary[i].want == ROW_FAIL;
        want_skipped += gallery_summary[i].want == ROW_SKIP;
    }
    write_file(d.base, "kernels.csv", kernels);
    diff_result r;
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, NULL, &r, err, sizeof err), 1);
    assert_int_equal(r.regressions, want_regressions);
    assert_int_equal(r.now_skipped, want_skipped);
    assert_int_equal(r.vanished, 0);
    assert_int_equal(r.added, 0);
    const char *md = slurp(d.now, "diff.md");
    assert_null(strstr(md, "different cases"));
    for (int i = 0; i < GALLERY_KERNEL_ROWS; i++) {
        const gallery_kernel_row *g = &gallery_kernels[i];
        char line[512];
        snprintf(line, sizeof line, "| `%s/cpu/%s/%s` | PASS | %s | ", g->set, g->op, g->shape,
                 row_state_name(g->want));
        const char *at = strstr(md, line);
        if (g->want == ROW_FAIL || g->want == ROW_ERROR) {
            if (!at) fail_msg("diff.md lacks the regression '%s'", line);
            size_t n = strcspn(at, "\n");
            if (!memmem(at, n, g->says, strlen(g->says)))
                fail_msg("diff.md: the regression %s lacks '%s'", line, g->says);
        }
    }
    for (int i = 0; i < GALLERY_SUMMARY_ROWS; i++) {
        const gallery_summary_row *g = &gallery_summary[i];
        char line[512];
        snprintf(line, sizeof line, "| `gallery: %s` | PASS | %s | ", g->config,
                 row_state_name(g->want));
        const char *at = strstr(md, line);
        if (g->want == ROW_FAIL && !at) fail_msg("diff.md lacks the regression '%s'", line);
        if (g->want == ROW_FAIL && g->says[0] && !memmem(at, strcspn(at, "\n"), g->says,
                                                         strlen(g->says)) &&
            !memmem(at, strcspn(at, "\n"), "first divergence", 16) &&
            !memmem(at, strcspn(at, "\n"), "request ", 8))
            fail_msg("diff.md: the regression %s says neither '%s' nor its divergence", line,
                     g->says);
    }
    // A baseline of another case ("nightly", write_summary): said before the lists.
    const char *names[GALLERY_SUMMARY_ROWS], *verdicts[GALLERY_SUMMARY_ROWS];
    for (int i = 0; i < GALLERY_SUMMARY_ROWS; i++) {
        names[i] = gallery_summary[i].config;
        verdicts[i] = "PASS";
    }
    write_summary(d.base, names, verdicts, GALLERY_SUMMARY_ROWS, seed);
    assert_int_equal(baseline_diff(d.base, d.now, 5.0, false, NULL, &r, err, sizeof err), 1);
    md = slurp(d.now, "diff.md");
    const char *warning = strstr(md, "different cases"), *lists = strstr(md, "### ");
    assert_non_null(warning);
    assert_non_null(lists);
    assert_true(warning < lists);
    assert_non_null(strstr(md, "case 'nightly'"));
    assert_non_null(strstr(md, "case 'gallery'"));
    remove_dirs(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flags_regression_and_slowdown),
        cmocka_unit_test(small_slowdown_is_not_a_regression),
        cmocka_unit_test(skipped_then_failing_is_a_regression),
        cmocka_unit_test(bad_input_exits_2),
        cmocka_unit_test(unreadable_report_and_vanished_configs),
        cmocka_unit_test(key_columns),
        cmocka_unit_test(every_verdict_kind_and_other_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
