// tests/test_junit.c — junit.xml from report CSVs: it parses (xmllint), its counts match the
// summary.csv and kernels.csv rows, failures carry the first divergence, and names and messages
// are XML-escaped (reports/junit.h); every verdict and observed kind (tests/report_gallery.h)
// gets its own element.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <dirent.h>   // opendir, readdir, closedir
#include <stdio.h>    // FILE, fopen, fread, snprintf, open_memstream
#include <stdlib.h>   // mkdtemp, free, system
#include <string.h>   // strstr, strcmp, strlen
#include <time.h>     // time
#include <unistd.h>   // getpid

#include "../reports/report_schema.h" // summary_header, SUMMARY_NCOLS
#include "../reports/csv_read.h"      // csv_table_read
#include "../reports/csv_report.h"    // csv_report_open, csv_report_row
#include "../reports/junit.h"         // junit_write, junit_xml_escape
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise
#include "report_gallery.h"             // gallery_summary, gallery_kernels, gallery_write_*

// ---------------------------------------------------------------------------------------------
// Fixtures: CSV files written with the runner's own header, fields set by column name
// ---------------------------------------------------------------------------------------------

#define MAX_COLS 128

typedef struct {
    const char *const *header;
    int ncols;
    char value[MAX_COLS][256];
} row;

static void row_clear(row *r) { memset(r->value, 0, sizeof r->value); }

static void row_set(row *r, const char *col, const char *v) {
    for (int c = 0; c < r->ncols; c++)
        if (strcmp(r->header[c], col) == 0) {
            snprintf(r->value[c], sizeof r->value[c], "%s", v);
            return;
        }
    fail_msg("the runner's summary header has no column '%s'", col);
}

static void row_write(csv_report *rep, const row *r) {
    const char *fields[MAX_COLS];
    for (int c = 0; c < r->ncols; c++) fields[c] = r->value[c];
    char err[512];
    assert_true(csv_report_row(rep, fields, err, sizeof err));
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    assert_int_equal(fclose(f), 0);
    return buf;
}

static int occurrences(const char *text, const char *what) {
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

static int attr_int(const char *text, const char *element, const char *attr) {
    const char *e = strstr(text, element);
    assert_non_null(e);
    char key[64];
    snprintf(key, sizeof key, " %s=\"", attr);
    const char *a = strstr(e, key);
    assert_non_null(a);
    return atoi(a + strlen(key));
}

// Validates with a real XML parser; skipped, visibly, where no xmllint starts (not installed,
// or one unpacked from a DEPS_PREFIX tree without its libraries).
static void assert_xml_parses(const char *path) {
    if (system("xmllint --version >/dev/null 2>&1") != 0) {
        printf("SKIP xmllint check: xmllint not installed or does not start (apt-get install libxml2-utils)\n");
        return;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "xmllint --noout '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void assert_no_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) assert_null(strstr(e->d_name, ".tmp."));
    closedir(d);
}

static void remove_dir(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static uint64_t fresh_seed(void) {
    return invar_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20));
}

// summary.csv with n rows of random verdicts; counts what it wrote.
static void write_summary(const char *path, int n, uint64_t seed, int *fails, int *skips,
                          const char *nasty) {
    row r;
    r.header = summary_header();
    r.ncols = SUMMARY_NCOLS;
    assert_true(r.ncols <= MAX_COLS);
    char err[512];
    csv_report *rep = csv_report_open(path, r.header, r.ncols, err, sizeof err);
    assert_non_null(rep);
    *fails = *skips = 0;
    for (int i = 0; i < n; i++) {
        uint64_t h = invar_mix64(seed + (uint64_t)i);
        int kind = (int)(h % 3);  // 0 PASS, 1 FAIL, 2 SKIP
        char name[128], secs[32], num[32];
        snprintf(name, sizeof name, "cpu/set%d/budget=%d", i, (int)(h >> 8) % 512 + 1);
        row_clear(&r);
        row_set(&r, "case", "ci");
        row_set(&r, "config", i == 0 && nasty ? nasty : name);
        row_set(&r, "device", i % 2 ? "cpu" : "cuda");
        snprintf(secs, sizeof secs, "%.3f", (double)((h >> 16) % 10000) / 1000.0 + 0.001);
        row_set(&r, "seconds", secs);
        row_set(&r, "expected", "invariant");
        if (kind == 0) {
            row_set(&r, "verdict", "PASS");
            row_set(&r, "observed", "invariant");
        } else if (kind == 1) {
            (*fails)++;
            row_set(&r, "verdict", "FAIL");
            row_set(&r, "observed", "batch-variant");
            snprintf(num, sizeof num, "%d", (int)(h >> 24) % 16);
            row_set(&r, "first_request", num);
            row_set(&r, "first_batch_size", "8");
            snprintf(num, sizeof num, "%d", (int)(h >> 32) % 8);
            row_set(&r, "first_step", num);
            row_set(&r, "first_field", "logprob");
            row_set(&r, "first_base_token", "54");
            row_set(&r, "first_batch_token", "54");
            row_set(&r, "first_base_logprob", "-3.92481256");
            row_set(&r, "first_batch_logprob", "-3.91623378");
            row_set(&r, "first_abs_delta", "0.00857877731");
            snprintf(num, sizeof num, "%d", (int)(h >> 40) % 90000 + 2);
            row_set(&r, "first_ulps", num);
            if (i == 0 && nasty) row_set(&r, "note", nasty);
        } else {
            (*skips)++;
            row_set(&r, "verdict", "SKIP");
            row_set(&r, "observed", "skipped");
            row_set(&r, "note", i == 0 && nasty ? nasty : "no CUDA device");
        }
        row_write(rep, &r);
    }
    assert_true(csv_report_close(rep, err, sizeof err));
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

static void counts_match_summary_rows(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_junit_XXXXXX", path[128], xml[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    snprintf(xml, sizeof xml, "%s/junit.xml", dir);
    uint64_t seed = fresh_seed();
    int n = 9 + (int)(seed % 20), fails, skips;
    write_summary(path, n, seed, &fails, &skips, NULL);
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(t->nrows, n);

    assert_true(junit_write(xml, t, NULL, NULL, err, sizeof err));
    assert_xml_parses(xml);
    assert_no_temporaries(dir);
    const char *x = slurp(xml);
    assert_int_equal(attr_int(x, "<testsuites", "tests"), n);
    assert_int_equal(attr_int(x, "<testsuites", "failures"), fails);
    assert_int_equal(attr_int(x, "<testsuites", "skipped"), skips);
    assert_int_equal(attr_int(x, "<testsuites", "errors"), 0);
    assert_int_equal(occurrences(x, "<testcase "), n);
    assert_int_equal(occurrences(x, "<failure "), fails);
    assert_int_equal(occurrences(x, "<skipped "), skips);
    // One suite per (case, device): ci/cpu and ci/cuda, their counts adding up.
    assert_int_equal(occurrences(x, "<testsuite "), 2);
    assert_int_equal(attr_int(x, "<testsuite name=\"ci/cuda\"", "tests") +
                         attr_int(x, "<testsuite name=\"ci/cpu\"", "tests"),
                     n);
    // CI tools draw dotted class names as a tree: invar, then the case, then the device.
    assert_int_equal(occurrences(x, "classname=\"invar.ci.cpu\"") +
                         occurrences(x, "classname=\"invar.ci.cuda\""),
                     n);
    // Every config is a testcase; a failure names its first divergence.
    for (int r = 0; r < n; r++) {
        char needle[300];
        snprintf(needle, sizeof needle, "name=\"%s\"", csv_get(t, r, "config"));
        assert_non_null(strstr(x, needle));
    }
    if (fails) {
        assert_non_null(strstr(x, "first divergence: request "));
        assert_non_null(strstr(x, "|Δ logprob| = 0.00857877731"));
        assert_non_null(strstr(x, "ulps)"));
    }
    if (skips) assert_non_null(strstr(x, "no CUDA device"));
    csv_table_free(t);
    remove_dir(dir);
}

static void kernel_rows_are_testcases(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_junit_XXXXXX", path[128], xml[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/kernels.csv", dir);
    snprintf(xml, sizeof xml, "%s/junit.xml", dir);
    const char *header[] = {"set", "device", "op", "shape", "status", "expect", "invariant",
                            "first_vary_M", "first_vary_row", "first_vary_vs_M", "rel_l2_err",
                            "tol", "written", "seconds", "seed"};
    csv_report *rep = csv_report_open(path, header, 15, err, sizeof err);
    assert_non_null(rep);
    const char *rows[][15] = {
        // An invariant op that holds; one that varied (a failure); an inaccurate one.
        {"invariant", "cpu", "gemm", "576x2048", "ok", "stable", "yes", "", "", "", "1e-3",
         "1e-2", "yes", "0.1", "7"},
        {"invariant", "cpu", "rmsnorm", "D=2048", "VARIES", "stable", "no", "64", "3", "1",
         "1e-3", "1e-2", "yes", "0.2", "7"},
        {"invariant", "cpu", "rope", "D=64", "FAIL", "stable", "yes", "", "", "", "0.5", "1e-2",
         "yes", "0.3", "7"},
        // A negative control that triggered (at its first shape, not at its last: the control
        // is caught when any shape varied), and one that never did.
        {"reference", "cpu", "gemm", "576x2048", "VARIES", "must vary", "no", "7", "2", "1",
         "1e-3", "1e-2", "yes", "0.1", "7"},
        {"reference", "cpu", "gemm", "37x203", "ok", "must vary", "yes", "", "", "", "1e-3",
         "1e-2", "yes", "0.1", "7"},
        {"reference", "cpu", "logprobs", "V=32000", "ok", "must vary", "yes", "", "", "", "1e-6",
         "1e-4", "yes", "0.1", "7"},
    };
    for (int i = 0; i < 6; i++) assert_true(csv_report_row(rep, rows[i], err, sizeof err));
    assert_true(csv_report_close(rep, err, sizeof err));
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    assert_non_null(t);
    assert_true(junit_write(xml, NULL, t, NULL, err, sizeof err));
    assert_xml_parses(xml);
    const char *x = slurp(xml);
    // Six check rows and two negative-control cases; rmsnorm varied, rope inaccurate, the
    // logprobs control never triggered (the gemm control did, at one of its two shapes).
    assert_int_equal(attr_int(x, "<testsuites", "tests"), 8);
    assert_int_equal(attr_int(x, "<testsuites", "failures"), 3);
    // The checker's "ok" is a pass, not an unreadable status (an error).
    assert_int_equal(attr_int(x, "<testsuites", "errors"), 0);
    assert_int_equal(occurrences(x, "<testcase "), 8);
    assert_int_equal(occurrences(x, "never varied"), 1);
    assert_non_null(strstr(x, "name=\"kernels/cpu\""));
    assert_non_null(strstr(x, "must be batch-invariant but varied at M=64"));
    assert_non_null(strstr(x, "inaccurate: rel-L2 error 0.5"));
    assert_non_null(strstr(x, "never varied"));
    csv_table_free(t);
    remove_dir(dir);
}

static void escapes_nasty_names(void **state) {
    (void)state;
    // Each special character, a control character, a bad UTF-8 byte and valid UTF-8.
    const char *in = "a&b<c>d\"e'f\tg\nh\x01i\xffj Δ";
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    junit_xml_escape(f, in);
    assert_int_equal(fclose(f), 0);
    assert_string_equal(buf, "a&amp;b&lt;c&gt;d&quot;e&apos;f&#9;g&#10;h\xEF\xBF\xBDi\xEF\xBF\xBDj Δ");
    free(buf);

    // A whole file with such a config name and note still parses and keeps the name.
    char dir[] = "/tmp/invar_test_junit_XXXXXX", path[128], xml[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    snprintf(xml, sizeof xml, "%s/junit.xml", dir);
    uint64_t seed = fresh_seed();
    int fails, skips;
    const char *nasty = "cpu/<inv&\"ref\">/'q'\x02\x7f\xc3(]]>";
    write_summary(path, 6, seed, &fails, &skips, nasty);
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    assert_non_null(t);
    assert_true(junit_write(xml, t, NULL, NULL, err, sizeof err));
    assert_xml_parses(xml);
    const char *x = slurp(xml);
    assert_non_null(strstr(x, "name=\"cpu/&lt;inv&amp;&quot;ref&quot;&gt;/&apos;q&apos;"));
    assert_null(strstr(x, "\x02"));
    assert_null(strstr(x, "]]>"));
    csv_table_free(t);
    remove_dir(dir);
}

static void missing_tables_give_an_empty_report(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_junit_XXXXXX", xml[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(xml, sizeof xml, "%s/junit.xml", dir);
    assert_true(junit_write(xml, NULL, NULL, NULL, err, sizeof err));
    assert_xml_parses(xml);
    assert_int_equal(attr_int(slurp(xml), "<testsuites", "tests"), 0);
    // An unwritable place is an error naming the file.
    assert_false(junit_write("/nonexistent-dir/junit.xml", NULL, NULL, NULL, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent-dir/junit.xml"));
    remove_dir(dir);
}

// The child element of the testcase named `name`: "" (a pass), "failure",
// "error" or "skipped"; its text (up to the testcase's end) into body.
static const char *testcase_child(const char *x, const char *name, char *body, size_t len) {
    char needle[600];
    snprintf(needle, sizeof needle, " name=\"%s\" time=", name);
    const char *t = strstr(x, needle);
    if (!t) fail_msg("junit.xml has no testcase named '%s'", name);
    assert_null(strstr(t + 1, needle));  // one testcase per row
    // A pass closes the testcase itself: <testcase ... time="0.123"/>.
    const char *gt = strchr(t, '>');
    assert_non_null(gt);
    if (gt[-1] == '/') {
        body[0] = '\0';
        return "";
    }
    const char *end = strstr(gt, "</testcase>");
    assert_non_null(end);
    snprintf(body, len, "%.*s", (int)(end - gt), gt);
    static const char *const kinds[] = {"failure", "error", "skipped"};
    for (int k = 0; k < 3; k++) {
        char tag[32];
        snprintf(tag, sizeof tag, "<%s ", kinds[k]);
        if (strstr(body, tag)) return kinds[k];
    }
    fail_msg("testcase '%s': neither a pass nor failure/error/skipped", name);
    return NULL;
}

// Every verdict kind of summary.csv and kernels.csv: each row's testcase has the right child
// (a FAIL row observed nondeterministic or error, or a control not triggered, is a <failure>,
// never <skipped>; CRASH and ERROR rows are <error>), and the counts agree.
static void every_verdict_kind_renders(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_junit_XXXXXX", sp[128], kp[128], xml[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(sp, sizeof sp, "%s/summary.csv", dir);
    snprintf(kp, sizeof kp, "%s/kernels.csv", dir);
    snprintf(xml, sizeof xml, "%s/junit.xml", dir);
    uint64_t seed = fresh_seed();
    assert_true(gallery_write_summary(sp, "gallery", seed, err, sizeof err));
    assert_true(gallery_write_kernels(kp, seed, err, sizeof err));
    csv_table *s = csv_table_read(sp, false, err, sizeof err), *k = csv_table_read(kp, false, err,
                                                                                  sizeof err);
    assert_non_null(s);
    assert_non_null(k);
    assert_true(junit_write(xml, s, k, NULL, err, sizeof err));
    assert_xml_parses(xml);
    const char *x = slurp(xml);
    static char body[8192];
    int want[4] = {0};  // pass, failure, error, skipped
    for (int i = 0; i < GALLERY_SUMMARY_ROWS; i++) {
        const gallery_summary_row *g = &gallery_summary[i];
        const char *child = testcase_child(x, g->config, body, sizeof body);
        if (strcmp(child, g->junit) != 0)
            fail_msg("summary row %s (verdict %s, observed %s): <%s>, expected <%s>", g->config,
                     g->verdict, g->observed, child[0] ? child : "pass", g->junit[0] ? g->junit
                                                                                     : "pass");
        if (g->says[0] && !strstr(body, g->says))
            fail_msg("summary row %s: the message lacks '%s': %s", g->config, g->says, body);
        if (g->first_batch[0] && g->want != ROW_PASS)
            assert_non_null(strstr(body, "first divergence: request "));
        want[g->want == ROW_PASS ? 0 : g->want == ROW_FAIL ? 1 : g->want == ROW_ERROR ? 2 : 3]++;
    }
    for (int i = 0; i < GALLERY_KERNEL_ROWS; i++) {
        const gallery_kernel_row *g = &gallery_kernels[i];
        char name[256];
        snprintf(name, sizeof name, "%s/%s/%s", g->set, g->op, g->shape);
        const char *child = testcase_child(x, name, body, sizeof body);
        if (strcmp(child, g->junit) != 0)
            fail_msg("kernel row %s (status %s): <%s>, expected <%s>", name, g->status,
                     child[0] ? child : "pass", g->junit[0] ? g->junit : "pass");
        if (g->says[0] && !strstr(body, g->says))
            fail_msg("kernel row %s: the message lacks '%s': %s", name, g->says, body);
        want[g->want == ROW_PASS ? 0 : g->want == ROW_FAIL ? 1 : g->want == ROW_ERROR ? 2 : 3]++;
    }
    // The controls: reference/gemm varied (a pass), reference/rmsnorm never did (a failure).
    const char *child = testcase_child(x, "reference/gemm: negative control (must vary at some "
                                          "shape)", body, sizeof body);
    assert_string_equal(child, "");
    child = testcase_child(x, GALLERY_CONTROL_FAILED ": negative control (must vary at some "
                              "shape)", body, sizeof body);
    assert_string_equal(child, "failure");
    assert_non_null(strstr(body, "never varied"));
    want[0]++;
    want[1]++;
    int tests = GALLERY_SUMMARY_ROWS + GALLERY_KERNEL_ROWS + GALLERY_CONTROLS;
    assert_int_equal(attr_int(x, "<testsuites", "tests"), tests);
    assert_int_equal(attr_int(x, "<testsuites", "failures"), want[1]);
    assert_int_equal(attr_int(x, "<testsuites", "errors"), want[2]);
    assert_int_equal(attr_int(x, "<testsuites", "skipped"), want[3]);
    assert_int_equal(occurrences(x, "<failure "), want[1]);
    assert_int_equal(occurrences(x, "<error "), want[2]);
    assert_int_equal(occurrences(x, "<skipped "), want[3]);
    assert_int_equal(occurrences(x, "<testcase "), tests);
    csv_table_free(s);
    csv_table_free(k);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts_match_summary_rows),
        cmocka_unit_test(kernel_rows_are_testcases),
        cmocka_unit_test(escapes_nasty_names),
        cmocka_unit_test(missing_tables_give_an_empty_report),
        cmocka_unit_test(every_verdict_kind_renders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
