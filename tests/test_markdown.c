// tests/test_markdown.c — summary.md from report CSVs: every config row is in the table with its
// verdict, settings changed by resolution are struck through with their reason, first
// divergences and hit rates are shown, cells cannot break the table, unknown columns are
// ignored and missing ones left out; every verdict and observed kind (tests/report_gallery.h)
// gets its badge, and every failing row, CRASH and ERROR included, is listed (reports/markdown.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // FILE, fopen, fread, snprintf
#include <stdlib.h>   // mkdtemp, system
#include <string.h>   // strstr, strchr, strlen
#include <time.h>     // time
#include <unistd.h>   // getpid

#include "../reports/csv_read.h"      // csv_table_read
#include "../reports/csv_report.h"    // csv_report_open, csv_report_row
#include "../reports/markdown.h"      // markdown_write
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise
#include "report_gallery.h"             // gallery_summary, gallery_kernels, gallery_write_*

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 18];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    assert_int_equal(fclose(f), 0);
    return buf;
}

static void remove_dir(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

// The table line of config `name` (from its "| " to the end of the line), into buf.
static const char *table_line(const char *md, const char *name, char *buf, size_t len) {
    char needle[256];
    snprintf(needle, sizeof needle, "`%s` |", name);
    const char *p = strstr(md, needle);
    assert_non_null(p);
    while (p > md && p[-1] != '\n') p--;
    size_t n = strcspn(p, "\n");
    assert_true(n < len);
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

// A summary.csv with the columns a runner with backends and prefix caching writes, plus one
// no writer knows; three configs, one per verdict, with fresh random numbers.
#define NCOLS 24
static const char *const header[NCOLS] = {
    "case", "config", "device", "kernel_set", "attention_backend", "prefix_caching",
    "prefix_caching_effective", "chunked_prefill", "resolution", "expected", "observed",
    "verdict", "requests_compared", "differing_requests", "first_batch_size", "first_request",
    "first_step", "first_field", "first_abs_delta", "first_ulps", "prefix_hits",
    "prefix_queries", "seconds", "mystery_column",
};

static void write_fixture(const char *path, uint64_t seed, char names[3][64], char *ulps) {
    char err[512];
    csv_report *rep = csv_report_open(path, header, NCOLS, err, sizeof err);
    assert_non_null(rep);
    uint64_t h = invar_mix64(seed);
    snprintf(names[0], 64, "cuda/mla-split/prefix=%d", (int)(h % 1000));
    snprintf(names[1], 64, "cpu/reference|pipe%d", (int)(h >> 10) % 1000);
    snprintf(names[2], 64, "cuda/skipme%d", (int)(h >> 20) % 1000);
    snprintf(ulps, 32, "%d", (int)(h >> 30) % 90000 + 2);
    const char *rows[3][NCOLS] = {
        {"nightly", names[0], "cuda", "invariant", "mla-split", "on", "off", "on",
         "mla-split is not batch-invariant with prefix caching", "invariant", "invariant",
         "PASS", "80", "0", "", "", "", "", "", "", "3", "12", "1.5", "x"},
        {"nightly", names[1], "cpu", "reference", "mla-unified", "on", "on", "on", "",
         "invariant", "batch-variant", "FAIL", "80", "47", "8", "5", "2", "logprob",
         "0.00857877731", ulps, "0", "12", "2.5", "y"},
        {"nightly", names[2], "cuda", "invariant", "mla-unified", "on", "on", "off", "",
         "invariant", "skipped", "SKIP", "0", "0", "", "", "", "", "", "", "", "", "0", "z"},
    };
    for (int i = 0; i < 3; i++) assert_true(csv_report_row(rep, rows[i], err, sizeof err));
    assert_true(csv_report_close(rep, err, sizeof err));
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

static void table_shows_rows_marks_and_totals(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_md_XXXXXX", path[128], md_path[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    snprintf(md_path, sizeof md_path, "%s/summary.md", dir);
    char names[3][64], ulps[32];
    write_fixture(path, invar_mix64((uint64_t)time(NULL) ^ (uint64_t)getpid()), names, ulps);
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    assert_non_null(t);
    assert_true(markdown_write(md_path, t, NULL, NULL, NULL, err, sizeof err));
    const char *md = slurp(md_path);
    char line[2048], escaped[128];

    // The auto-disabled setting: struck through, the effective value, the reason.
    table_line(md, names[0], line, sizeof line);
    assert_non_null(strstr(line, "✅ PASS"));
    assert_non_null(strstr(line, "prefix caching: ~~on~~ **off** (mla-split is not "
                                 "batch-invariant with prefix caching)"));
    assert_non_null(strstr(line, "backend: mla-split"));
    assert_non_null(strstr(line, "25% (3/12)"));
    assert_non_null(strstr(line, "| 1.5 s |"));

    // The failing row: its '|' escaped, its first divergence, the differing count.
    const char *bar = strchr(names[1], '|');
    snprintf(escaped, sizeof escaped, "%.*s\\|%s", (int)(bar - names[1]), names[1], bar + 1);
    table_line(md, escaped, line, sizeof line);
    assert_non_null(strstr(line, "❌ **FAIL**"));
    assert_non_null(strstr(line, "request 5 at batch size 8, step 2, logprob differs"));
    assert_non_null(strstr(line, "\\|Δ logprob\\| = 0.00857877731"));
    assert_non_null(strstr(line, ulps));
    assert_non_null(strstr(line, "47 of 80 comparisons differ"));
    assert_null(strstr(line, "~~"));  // nothing was changed for it

    table_line(md, names[2], line, sizeof line);
    assert_non_null(strstr(line, "⏭️ SKIP"));
    assert_non_null(strstr(line, "chunked prefill: off"));

    // Every table line has the header's number of cells: no value broke the table.
    const char *head = strstr(md, "| verdict |");
    assert_non_null(head);
    int cells = 0;
    for (const char *p = head; *p != '\n'; p++) cells += *p == '|';
    for (int i = 0; i < 3; i++) {
        table_line(md, i == 1 ? escaped : names[i], line, sizeof line);
        int n = 0;
        for (const char *p = line; *p; p++) n += *p == '|' && (p == line || p[-1] != '\\');
        assert_int_equal(n, cells);
    }
    assert_non_null(strstr(md, "**3 configs: 1 passed, 1 failed, 1 skipped**"));
    assert_non_null(strstr(md, "### Failures"));
    assert_null(strstr(md, "mystery"));  // an unknown column is not shown
    csv_table_free(t);
    remove_dir(dir);
}

static void minimal_columns_still_render(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_md_XXXXXX", path[128], md_path[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    snprintf(md_path, sizeof md_path, "%s/summary.md", dir);
    const char *h[2] = {"config", "verdict"};
    csv_report *rep = csv_report_open(path, h, 2, err, sizeof err);
    assert_non_null(rep);
    char name[64];
    snprintf(name, sizeof name, "only/%llx", (unsigned long long)invar_mix64((uint64_t)getpid()));
    const char *row[2] = {name, "FAIL"};
    assert_true(csv_report_row(rep, row, err, sizeof err));
    assert_true(csv_report_close(rep, err, sizeof err));
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    assert_non_null(t);
    assert_true(markdown_write(md_path, t, NULL, NULL, NULL, err, sizeof err));
    const char *md = slurp(md_path);
    char line[512];
    table_line(md, name, line, sizeof line);
    assert_non_null(strstr(line, "❌ **FAIL**"));
    assert_null(strstr(md, "effective settings"));   // no settings columns: no such column
    assert_null(strstr(md, "prefix-cache hits"));
    assert_null(strstr(md, "Kernel checks"));       // no kernels.csv
    assert_non_null(strstr(md, "**1 config: 0 passed, 1 failed, 0 skipped**"));
    csv_table_free(t);
    remove_dir(dir);
}

static const char *badge_of(row_state s) {
    static const char *const badges[] = {"| ✅ PASS |", "| ❌ **FAIL** |", "| ⏭️ SKIP |",
                                         "| ⚠️ **ERROR** |"};
    return badges[s];
}

// What the kernel table's line of (set, op) must say, from the gallery's rows of that op: a
// failure or an error wins, SKIP only when every shape was skipped.
static row_state kernel_op_state(const char *set, const char *op) {
    int shapes = 0, skips = 0;
    row_state worst = ROW_PASS;
    for (int i = 0; i < GALLERY_KERNEL_ROWS; i++) {
        const gallery_kernel_row *g = &gallery_kernels[i];
        if (strcmp(g->set, set) != 0 || strcmp(g->op, op) != 0) continue;
        shapes++;
        skips += g->want == ROW_SKIP;
        if (g->want == ROW_FAIL || (g->want == ROW_ERROR && worst != ROW_FAIL)) worst = g->want;
    }
    return worst != ROW_PASS ? worst : skips == shapes ? ROW_SKIP : ROW_PASS;
}

// The kernel table's line of (set, op), into buf.
static const char *kernel_line(const char *md, const char *set, const char *op, char *buf,
                               size_t len) {
    char needle[256];
    snprintf(needle, sizeof needle, "| %s | cpu | `%s` |", set, op);
    const char *p = strstr(md, needle);
    if (!p) fail_msg("summary.md has no kernel table line '%s'", needle);
    while (p > md && p[-1] != '\n') p--;
    size_t n = strcspn(p, "\n");
    assert_true(n < len);
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

static void every_verdict_kind_renders(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_markdown_XXXXXX", sp[128], kp[128], mdp[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(sp, sizeof sp, "%s/summary.csv", dir);
    snprintf(kp, sizeof kp, "%s/kernels.csv", dir);
    snprintf(mdp, sizeof mdp, "%s/summary.md", dir);
    uint64_t seed = invar_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20));
    assert_true(gallery_write_summary(sp, "gallery", seed, err, sizeof err));
    assert_true(gallery_write_kernels(kp, seed, err, sizeof err));
    csv_table *s = csv_table_read(sp, false, err, sizeof err), *k = csv_table_read(kp, false, err,
                                                                                  sizeof err);
    assert_non_null(s);
    assert_non_null(k);
    assert_true(markdown_write(mdp, s, k, NULL, NULL, err, sizeof err));
    const char *md = slurp(mdp);
    const char *failures = strstr(md, "### Failures");
    const char *kernel_failures = strstr(md, "### Failing kernel checks");
    assert_non_null(failures);
    assert_non_null(kernel_failures);
    char line[4096];
    for (int i = 0; i < GALLERY_SUMMARY_ROWS; i++) {
        const gallery_summary_row *g = &gallery_summary[i];
        table_line(md, g->config, line, sizeof line);
        if (strncmp(line, badge_of(g->want), strlen(badge_of(g->want))) != 0)
            fail_msg("config %s (verdict %s, observed %s): '%s', expected %s", g->config,
                     g->verdict, g->observed, line, badge_of(g->want));
        // The observed kind is shown as written.
        char observed[64];
        snprintf(observed, sizeof observed, "| %s", g->observed);
        assert_non_null(strstr(line, observed));
        // Every failure is listed in full, with why; nothing else is.
        char entry[300];
        snprintf(entry, sizeof entry, "- `%s`: ", g->config);
        const char *listed = strstr(failures, entry);
        if (g->want == ROW_FAIL) {
            if (!listed || listed > kernel_failures)
                fail_msg("config %s: not in the Failures list", g->config);
            size_t n = strcspn(listed, "\n");
            if (g->says[0] && !memmem(listed, n, g->says, strlen(g->says)))
                fail_msg("config %s: its Failures entry lacks '%s'", g->config, g->says);
        } else if (listed && listed < kernel_failures) {
            fail_msg("config %s (%s) is in the Failures list", g->config, g->verdict);
        }
    }
    // The kernel table: one line per (set, op); a group with a CRASH or ERROR row is an ERROR,
    // a control that never varied a FAIL.
    for (int i = 0; i < GALLERY_KERNEL_ROWS; i++) {
        const gallery_kernel_row *g = &gallery_kernels[i];
        row_state want = kernel_op_state(g->set, g->op);
        if (strcmp(g->set, "reference") == 0 && strcmp(g->op, "rmsnorm") == 0) want = ROW_FAIL;
        kernel_line(md, g->set, g->op, line, sizeof line);
        if (strncmp(line, badge_of(want), strlen(badge_of(want))) != 0)
            fail_msg("kernel %s/%s (status %s): '%s', expected %s", g->set, g->op, g->status,
                     line, badge_of(want));
        char entry[300];
        snprintf(entry, sizeof entry, "- `%s/cpu/%s/%s`: ", g->set, g->op, g->shape);
        const char *listed = strstr(kernel_failures, entry);
        if (g->want == ROW_FAIL || g->want == ROW_ERROR) {
            if (!listed) fail_msg("kernel row %s: not in the failing kernel checks", entry);
            size_t n = strcspn(listed, "\n");
            if (!memmem(listed, n, g->says, strlen(g->says)))
                fail_msg("kernel row %s: its entry lacks '%s'", entry, g->says);
        } else if (listed) {
            fail_msg("kernel row %s (%s) is listed as failing", entry, g->status);
        }
    }
    assert_non_null(strstr(md, "never (**must vary**)"));
    // 9 ops: rmsnorm, reference gemm pass; 4 fail (gemm, rope, logprobs, reference rmsnorm);
    // moe skipped; the plugin's two crashed or raised.
    assert_non_null(strstr(md, "**9 ops: 2 passed, 4 failed, 1 skipped, 2 crashed or raised"));
    csv_table_free(s);
    csv_table_free(k);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_shows_rows_marks_and_totals),
        cmocka_unit_test(minimal_columns_still_render),
        cmocka_unit_test(every_verdict_kind_renders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
