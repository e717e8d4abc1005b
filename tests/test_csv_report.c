// tests/test_csv_report.c — CSV rows parse back with libcsv's parser, are on disk before the
// file is closed, and every failure names the file (reports/csv_report.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <csv.h>      // csv_init, csv_parse, csv_fini, csv_free
#include <stdio.h>    // FILE, fopen, fread, fclose, snprintf
#include <stdlib.h>   // mkdtemp, free
#include <string.h>   // strstr, strcmp, memcpy
#include <unistd.h>   // unlink, rmdir

#include "../reports/csv_report.h"     // csv_report_*
#include "../common/hash.h"             // invar_mix64, invar_uniform, invar_gumbel_noise

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_parse_back_before_close),
        cmocka_unit_test(open_failure_names_the_file),
        cmocka_unit_test(write_failure_names_the_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
