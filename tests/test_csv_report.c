// tests/test_csv_report.c — CSV rows parse back with libcsv's parser, are on disk before the
// file is closed, and every failure names the file (reports/csv_report.h); every verdict and
// observed kind (tests/report_gallery.h) written as CSV reads back as the same verdict
// (reports/row_verdict.h), which every writer renders from; divergence.csv rows and summary.csv's
// first divergence read back as the divergences written (harness/run/summary_row.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <csv.h>      // csv_init, csv_parse, csv_fini, csv_free
#include <math.h>     // fabs
#include <stdio.h>    // FILE, fopen, fread, fclose, snprintf
#include <stdlib.h>   // mkdtemp, free
#include <string.h>   // strstr, strcmp, memcpy
#include <unistd.h>   // unlink, rmdir

#include "../reports/csv_report.h"     // csv_report_*
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise
#include "../reports/csv_read.h"       // csv_table_read
#include "../reports/row_verdict.h"    // summary_row_state, kernel_row_state, kernel_controls
#include "report_gallery.h"            // gallery_summary, gallery_kernels, gallery_write_*
#include "../harness/run/summary_row.h" // format_hit_rate, divergence_row_write
#include "../harness/run/compare.h"     // divergence, float_ulp_distance

#define MAX_FIELDS 256
#define COLS 5

// ---------------------------------------------------------------------------------------------
// Reading a file back with libcsv
// ---------------------------------------------------------------------------------------------

typedef struct {
    char *field[MAX_FIELDS];
    int row_of[MAX_FIELDS];
    int n, rows;
} parsed;

static void on_field(void *data, size_t len, void *user) {
    parsed *p = user;
    assert_true(p->n < MAX_FIELDS);
    p->field[p->n] = calloc(1, len + 1);
    assert_non_null(p->field[p->n]);
    if (len) memcpy(p->field[p->n], data, len);
    p->row_of[p->n++] = p->rows;
}

static void on_row(int c, void *user) {
    (void)c;
    ((parsed *)user)->rows++;
}

static void parse_file(const char *path, parsed *p) {
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    assert_int_equal(fclose(f), 0);
    struct csv_parser cp;
    assert_int_equal(csv_init(&cp, CSV_STRICT), 0);
    assert_int_equal(csv_parse(&cp, buf, n, on_field, on_row, p), n);
    assert_int_equal(csv_fini(&cp, on_field, on_row, p), 0);
    csv_free(&cp);
}

static void parsed_free(parsed *p) {
    for (int i = 0; i < p->n; i++) free(p->field[i]);
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

static void rows_parse_back_before_close(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_csv_XXXXXX", path[64], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/out.csv", dir);
    const char *header[COLS] = {"config", "request", "note", "empty", "logprob"};
    csv_report *r = csv_report_open(path, header, COLS, err, sizeof err);
    assert_non_null(r);
    assert_string_equal(csv_report_path(r), path);

    // Fresh values each run, and fields that need quoting.
    char num[3][32];
    uint64_t seed = invar_mix64((uint64_t)(uintptr_t)&seed ^ (uint64_t)getpid());
    for (int i = 0; i < 3; i++)
        snprintf(num[i], sizeof num[i], "%.9g",
                 -(double)(invar_mix64(seed + (uint64_t)i) >> 40) / 1e6);
    const char *rows[3][COLS] = {
        {"cpu/invariant", "0", "plain", "", num[0]},
        {"cpu/reference/max_num_batched_tokens=64", "17", "a, comma", NULL, num[1]},
        {"quote\"d", "3", "line\nbreak", "", num[2]},
    };
    for (int k = 0; k < 3; k++) {
        assert_true(csv_report_row(r, rows[k], err, sizeof err));
        // Flushed: the file already holds the header and rows 0..k, while r is still open.
        parsed p;
        parse_file(path, &p);
        assert_int_equal(p.rows, k + 2);
        assert_int_equal(p.n, COLS * (k + 2));
        for (int c = 0; c < COLS; c++) assert_string_equal(p.field[c], header[c]);
        for (int j = 0; j <= k; j++) {
            for (int c = 0; c < COLS; c++) {
                const char *want = rows[j][c] ? rows[j][c] : "";
                assert_string_equal(p.field[COLS * (j + 1) + c], want);
                assert_int_equal(p.row_of[COLS * (j + 1) + c], j + 1);
            }
        }
        parsed_free(&p);
    }
    assert_true(csv_report_close(r, err, sizeof err));
    parsed p;
    parse_file(path, &p);
    assert_int_equal(p.rows, 4);
    parsed_free(&p);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void open_failure_names_the_file(void **state) {
    (void)state;
    char err[512];
    memset(err, 0, sizeof err);
    const char *header[1] = {"a"};
    csv_report *r = csv_report_open("/nonexistent/dir/summary.csv", header, 1, err, sizeof err);
    assert_null(r);
    assert_non_null(strstr(err, "/nonexistent/dir/summary.csv"));
    assert_non_null(strstr(err, "open failed"));
}

// /dev/full accepts the open and refuses the first flush: the header write must fail there.
static void write_failure_names_the_file(void **state) {
    (void)state;
    if (access("/dev/full", W_OK) != 0) skip();
    char err[512];
    memset(err, 0, sizeof err);
    const char *header[2] = {"a", "b"};
    csv_report *r = csv_report_open("/dev/full", header, 2, err, sizeof err);
    assert_null(r);
    assert_non_null(strstr(err, "/dev/full"));
    assert_non_null(strstr(err, "flush failed"));
}

static void every_verdict_kind_reads_back(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_csv_XXXXXX", sp[128], kp[128], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(sp, sizeof sp, "%s/summary.csv", dir);
    snprintf(kp, sizeof kp, "%s/kernels.csv", dir);
    uint64_t seed = invar_mix64((uint64_t)(uintptr_t)dir ^ (uint64_t)getpid());
    assert_true(gallery_write_summary(sp, "gallery", seed, err, sizeof err));
    assert_true(gallery_write_kernels(kp, seed, err, sizeof err));
    csv_table *s = csv_table_read(sp, false, err, sizeof err), *k = csv_table_read(kp, false, err,
                                                                                  sizeof err);
    assert_non_null(s);
    assert_non_null(k);
    assert_int_equal(s->nrows, GALLERY_SUMMARY_ROWS);
    assert_int_equal(k->nrows, GALLERY_KERNEL_ROWS);
    char why[1024];
    for (int i = 0; i < GALLERY_SUMMARY_ROWS; i++) {
        const gallery_summary_row *g = &gallery_summary[i];
        assert_string_equal(csv_get(s, i, "config"), g->config);
        assert_string_equal(csv_get(s, i, "verdict"), g->verdict);
        assert_string_equal(csv_get(s, i, "observed"), g->observed);
        assert_string_equal(csv_get(s, i, "note"), g->note);
        if (summary_row_state(s, i) != g->want)
            fail_msg("summary row %s reads back as %s, expected %s", g->config,
                     row_state_name(summary_row_state(s, i)), row_state_name(g->want));
        summary_reason(s, i, why, sizeof why);
        if (g->want != ROW_PASS && g->says[0] && !strstr(why, g->says) &&
            !strstr(g->says, "first divergence"))
            fail_msg("summary row %s: reason '%s' lacks '%s'", g->config, why, g->says);
        assert_int_equal(summary_first_divergence(s, i, why, sizeof why), g->first_batch[0] != 0);
    }
    for (int i = 0; i < GALLERY_KERNEL_ROWS; i++) {
        const gallery_kernel_row *g = &gallery_kernels[i];
        assert_string_equal(csv_get(k, i, "status"), g->status);
        assert_string_equal(csv_get(k, i, "note"), g->note);
        row_state st = kernel_row_state(k, i, why, sizeof why);
        if (st != g->want)
            fail_msg("kernel row %s/%s/%s (%s) reads back as %s, expected %s", g->set, g->op,
                     g->shape, g->status, row_state_name(st), row_state_name(g->want));
        if (g->says[0] && !strstr(why, g->says))
            fail_msg("kernel row %s/%s: '%s' lacks '%s'", g->set, g->op, why, g->says);
    }
    kernel_control controls[8];
    assert_int_equal(kernel_controls(k, controls, 8), GALLERY_CONTROLS);
    for (int c = 0; c < GALLERY_CONTROLS; c++) {
        char name[128];
        snprintf(name, sizeof name, "%s/%s", csv_get(k, controls[c].first_row, "set"),
                 csv_get(k, controls[c].first_row, "op"));
        assert_int_equal(controls[c].varied, strcmp(name, GALLERY_CONTROL_FAILED) != 0);
    }
    csv_table_free(s);
    csv_table_free(k);
    assert_int_equal(unlink(sp), 0);
    assert_int_equal(unlink(kp), 0);
    assert_int_equal(rmdir(dir), 0);
}

// The prefix-cache hit rate of summary.csv and the console: hits over queries to three places,
// "-" when nothing was looked up (a partial rate is the case a report reader needs).
static void hit_rate_is_hits_over_queries(void **state) {
    (void)state;
    static const struct { long queries, hits; const char *want; } cases[] = {
        {3, 2, "0.667"}, {8, 1, "0.125"}, {7, 7, "1.000"}, {5, 0, "0.000"}, {0, 0, "-"}, {1000, 999, "0.999"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        memset(buf, 'x', sizeof buf);
        format_hit_rate(cases[i].queries, cases[i].hits, buf, sizeof buf);
        if (strcmp(buf, cases[i].want) != 0)
            fail_msg("%ld hits of %ld queries: '%s', expected '%s'", cases[i].hits, cases[i].queries, buf,
                     cases[i].want);
    }
}

// divergence.csv's rows read back as the divergences they were written from: each logprob cell
// to its float's own bits (base and batch each from its own value), the tokens, the field's
// name, |Δ| and the ulps between the two (a reader triages from these cells alone).
static void divergence_rows_read_back(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_div_XXXXXX", path[64], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/divergence.csv", dir);
    csv_report *r = csv_report_open(path, divergence_header(), DIVERGENCE_NCOLS, err, sizeof err);
    assert_non_null(r);
    uint64_t seed = invar_mix64((uint64_t)(uintptr_t)&seed ^ (uint64_t)getpid());
    static const diff_kind kinds[] = {DIFF_TOKEN, DIFF_LOGPROB, DIFF_TOPK_ID, DIFF_TOPK_LOGPROB};
    static const char *const names[] = {"token", "logprob", "topk_id[3]", "topk_logprob[1]"};
    enum { ROWS = 4 };
    divergence d[ROWS];
    for (int i = 0; i < ROWS; i++) {
        d[i] = (divergence){.kind = kinds[i], .step = 1 + (int)(invar_mix64(seed + 10u * i) % 200),
                            .topk_index = i == 2 ? 3 : i == 3 ? 1 : -1,
                            .base_token = (int32_t)(invar_mix64(seed + 10u * i + 1) % 102400),
                            .other_token = (int32_t)(invar_mix64(seed + 10u * i + 2) % 102400)};
        d[i].base_logprob = -(float)(8.0 * invar_uniform(invar_mix64(seed + 10u * i + 3)));
        // a few ulps away for the logprob rows, anywhere for the token rows
        d[i].other_logprob = kinds[i] == DIFF_LOGPROB || kinds[i] == DIFF_TOPK_LOGPROB
                                 ? nextafterf(nextafterf(d[i].base_logprob, 0.0f), 0.0f)
                                 : -(float)(8.0 * invar_uniform(invar_mix64(seed + 10u * i + 4)));
        d[i].abs_delta = fabs((double)d[i].other_logprob - (double)d[i].base_logprob);
        d[i].ulps = float_ulp_distance(d[i].base_logprob, d[i].other_logprob);
        divergence_row_write(r, "cpu/invariant", "1,3,8", 7 + i, &d[i]);
    }
    assert_true(csv_report_close(r, err, sizeof err));
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    assert_non_null(t);
    assert_int_equal(t->nrows, ROWS);
    for (int i = 0; i < ROWS; i++) {
        char want[32];
        assert_string_equal(csv_get(t, i, "config"), "cpu/invariant");
        assert_string_equal(csv_get(t, i, "batch_size"), "1,3,8");
        snprintf(want, sizeof want, "%d", 7 + i);
        assert_string_equal(csv_get(t, i, "request"), want);
        snprintf(want, sizeof want, "%d", d[i].step);
        assert_string_equal(csv_get(t, i, "step"), want);
        assert_string_equal(csv_get(t, i, "field"), names[i]);
        snprintf(want, sizeof want, "%d", d[i].base_token);
        assert_string_equal(csv_get(t, i, "base_token"), want);
        snprintf(want, sizeof want, "%d", d[i].other_token);
        assert_string_equal(csv_get(t, i, "batch_token"), want);
        float base = strtof(csv_get(t, i, "base_logprob"), NULL);
        float batch = strtof(csv_get(t, i, "batch_logprob"), NULL);
        if (!float_bits_equal(base, d[i].base_logprob) || !float_bits_equal(batch, d[i].other_logprob))
            fail_msg("row %d: logprobs read back %.9g, %.9g; written %.9g, %.9g", i, (double)base,
                     (double)batch, (double)d[i].base_logprob, (double)d[i].other_logprob);
        double delta = strtod(csv_get(t, i, "abs_delta"), NULL);
        assert_true(fabs(delta - d[i].abs_delta) <= 1e-8 * d[i].abs_delta);
        snprintf(want, sizeof want, "%lld", (long long)d[i].ulps);
        assert_string_equal(csv_get(t, i, "ulps"), want);
    }
    assert_string_equal(csv_get(t, 1, "ulps"), "2");
    csv_table_free(t);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

// summary.csv's first divergence read back as the divergence it was written from: the two
// logprob cells to their floats' own bits (a nightly reader compares a FAIL's first logprobs across
// runs from this row alone: two floats a few ulps apart must not print alike), the tokens, the
// step and the ulps between them.
static void summary_first_divergence_reads_back(void **state) {
    (void)state;
    uint64_t seed = invar_mix64((uint64_t)(uintptr_t)&seed ^ (uint64_t)getpid() ^ 0x5eedu);
    for (int i = 0; i < 16; i++) {
        case_file c = {0};
        run_config cfg = {0};
        resolved_config rc = {0};
        backend_selection sel = {0};
        outcome out = {.verdict = "FAIL", .expected = "invariant", .observed = "batch-variant", .has_first = true,
                       .first_request = 3 + i, .prefill_vs_decode = "equal"};
        snprintf(out.first_batch, sizeof out.first_batch, "8");
        divergence *d = &out.first;
        d->kind = DIFF_LOGPROB;
        d->step = 1 + (int)(invar_mix64(seed + 7u * i) % 100);
        d->base_token = d->other_token = (int32_t)(invar_mix64(seed + 7u * i + 1) % 102400);
        d->base_logprob = -(float)(12.0 * invar_uniform(invar_mix64(seed + 7u * i + 2)));
        d->other_logprob = nextafterf(d->base_logprob, i % 2 ? 0.0f : -INFINITY);  // one ulp away
        d->abs_delta = fabs((double)d->other_logprob - (double)d->base_logprob);
        d->ulps = float_ulp_distance(d->base_logprob, d->other_logprob);
        summary_text t;
        const char *fields[SUMMARY_NCOLS];
        summary_fields(&c, &cfg, &rc, &sel, &out, NULL, &t, fields);
        const float base = strtof(fields[SUMMARY_FIRST_BASE_LOGPROB], NULL);
        const float batch = strtof(fields[SUMMARY_FIRST_BATCH_LOGPROB], NULL);
        if (!float_bits_equal(base, d->base_logprob) || !float_bits_equal(batch, d->other_logprob))
            fail_msg("first logprobs written as '%s', '%s' read back %.9g, %.9g; were %.9g, %.9g",
                     fields[SUMMARY_FIRST_BASE_LOGPROB], fields[SUMMARY_FIRST_BATCH_LOGPROB], (double)base,
                     (double)batch, (double)d->base_logprob, (double)d->other_logprob);
        assert_string_equal(fields[SUMMARY_FIRST_ULPS], "1");
        char want[32];
        snprintf(want, sizeof want, "%d", d->step);
        assert_string_equal(fields[SUMMARY_FIRST_STEP], want);
        snprintf(want, sizeof want, "%d", d->base_token);
        assert_string_equal(fields[SUMMARY_FIRST_BASE_TOKEN], want);
        snprintf(want, sizeof want, "%d", 3 + i);
        assert_string_equal(fields[SUMMARY_FIRST_REQUEST], want);
        assert_string_equal(fields[SUMMARY_FIRST_BATCH_SIZE], "8");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_parse_back_before_close),
        cmocka_unit_test(open_failure_names_the_file),
        cmocka_unit_test(write_failure_names_the_file),
        cmocka_unit_test(every_verdict_kind_reads_back),
        cmocka_unit_test(hit_rate_is_hits_over_queries),
        cmocka_unit_test(divergence_rows_read_back),
        cmocka_unit_test(summary_first_divergence_reads_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
