// reports/junit.c — JUnit XML from the report CSVs (reports/junit.h).
#include "junit.h"

#include <stdio.h>          // FILE, fprintf, fputs, fputc, snprintf
#include <stdlib.h>         // free
#include <string.h>         // strcmp

#include "../common/check.h"  // invar_calloc
#include "report_file.h"    // report_file_open, report_file_commit
#include "report_schema.h"  // summary_get, kernels_get, SUMMARY_*, KERNELS_*
#include "row_verdict.h"    // summary_row_state, kernel_row_state, kernel_controls
#include "run_meta.h"       // run_meta_get

// ---------------------------------------------------------------------------------------------
// XML escaping
// ---------------------------------------------------------------------------------------------

// Length of the valid UTF-8 sequence at s (a non-ASCII lead byte), or 0 when it is not one.
static int utf8_sequence(const unsigned char *s) {
    int n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (s[0] >= 0xF5) return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    if (n == 3 && s[0] == 0xE0 && s[1] < 0xA0) return 0;
    if (n == 3 && s[0] == 0xED && s[1] >= 0xA0) return 0;
    if (n == 4 && s[0] == 0xF0 && s[1] < 0x90) return 0;
    if (n == 4 && s[0] == 0xF4 && s[1] >= 0x90) return 0;
    return n;
}

void junit_xml_escape(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        // As references, so attribute-value normalisation keeps them.
        case '\t': fputs("&#9;", f); break;
        case '\n': fputs("&#10;", f); break;
        case '\r': fputs("&#13;", f); break;
        default:
            if (c < 0x20 || c == 0x7F) {
                fputs("\xEF\xBF\xBD", f);  // U+FFFD: XML 1.0 cannot carry these at all
            } else if (c < 0x80) {
                fputc(c, f);
            } else {
                int n = utf8_sequence(p);
                if (n == 0) {
                    fputs("\xEF\xBF\xBD", f);
                } else {
                    fwrite(p, 1, (size_t)n, f);
                    p += n;
                    continue;
                }
            }
        }
        p++;
    }
}

// ---------------------------------------------------------------------------------------------
// Suites: rows grouped by a key, in order of first appearance
// ---------------------------------------------------------------------------------------------

typedef struct {
    char name[256];           // "ci/cpu", "kernels/cuda"
    char classname[272];      // "invar.ci.cpu"
    int tests, failures, errors, skipped;
    double seconds;
} suite;

static double seconds_of(const char *cell) {
    double s;
    return csv_number(cell, &s) && s >= 0 ? s : 0.0;
}

static double summary_seconds(const csv_table *t, int row) {
    return seconds_of(summary_get(t, row, SUMMARY_SECONDS));
}

static double kernel_seconds(const csv_table *t, int row) {
    return seconds_of(kernels_get(t, row, KERNELS_SECONDS));
}

// "ci/cpu" -> "invar.ci.cpu": CI tools show dotted class names as a tree.
static void classname_of(const char *name, char *buf, int len) {
    snprintf(buf, (size_t)len, "invar.%s", name);
    for (char *p = buf + 6; *p; p++) {
        if (*p == '.') *p = '_';
        else if (*p == '/') *p = '.';
    }
}

static void testcase_open(FILE *f, const suite *s, const char *name, double seconds) {
    fputs("    <testcase classname=\"", f);
    junit_xml_escape(f, s->classname);
    fputs("\" name=\"", f);
    junit_xml_escape(f, name);
    fprintf(f, "\" time=\"%.3f\"", seconds);
}

// <failure>/<error>/<skipped> with a one-line message and, for failures, a longer body.
static void outcome_element(FILE *f, row_state st, const char *type, const char *message,
                            const char *body) {
    const char *tag = st == ROW_FAIL ? "failure" : st == ROW_ERROR ? "error" : "skipped";
    fprintf(f, ">\n      <%s message=\"", tag);
    junit_xml_escape(f, message);
    fputc('"', f);
    if (type && type[0]) {
        fputs(" type=\"", f);
        junit_xml_escape(f, type);
        fputc('"', f);
    }
    if (body && body[0]) {
        fputc('>', f);
        junit_xml_escape(f, body);
        fprintf(f, "</%s>\n", tag);
    } else {
        fputs("/>\n", f);
    }
    fputs("    </testcase>\n", f);
}

static void count(suite *s, row_state st, double seconds) {
    s->tests++;
    s->failures += st == ROW_FAIL;
    s->errors += st == ROW_ERROR;
    s->skipped += st == ROW_SKIP;
    s->seconds += seconds;
}

static void suite_open(FILE *f, const suite *s, const csv_table *meta) {
    fputs("  <testsuite name=\"", f);
    junit_xml_escape(f, s->name);
    fprintf(f, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\"",
            s->tests, s->failures, s->errors, s->skipped, s->seconds);
    const char *date = run_meta_get(meta, "date_utc"), *host = run_meta_get(meta, "host");
    if (date[0]) {
        fputs(" timestamp=\"", f);
        junit_xml_escape(f, date);
        fputc('"', f);
    }
    if (host[0]) {
        fputs(" hostname=\"", f);
        junit_xml_escape(f, host);
        fputc('"', f);
    }
    fputs(">\n", f);
    if (!meta || meta->nrows == 0) return;
    fputs("    <properties>\n", f);
    for (int r = 0; r < meta->nrows; r++) {
        fputs("      <property name=\"", f);
        junit_xml_escape(f, csv_get(meta, r, "key"));
        fputs("\" value=\"", f);
        junit_xml_escape(f, csv_get(meta, r, "value"));
        fputs("\"/>\n", f);
    }
    fputs("    </properties>\n", f);
}

// ---------------------------------------------------------------------------------------------
// summary.csv: one suite per (case, device)
// ---------------------------------------------------------------------------------------------

static void summary_suite_name(const csv_table *t, int row, char *buf, int len) {
    const char *c = summary_get(t, row, SUMMARY_CASE), *d = summary_get(t, row, SUMMARY_DEVICE);
    snprintf(buf, (size_t)len, "%s/%s", c[0] ? c : "run", d[0] ? d : "-");
}

static void summary_case(FILE *f, const suite *s, const csv_table *t, int r) {
    row_state st = summary_row_state(t, r);
    testcase_open(f, s, summary_get(t, r, SUMMARY_CONFIG), summary_seconds(t, r));
    if (st == ROW_PASS) {
        fputs("/>\n", f);
        return;
    }
    char reason[1024], first[1024], message[2200], body[4096];
    summary_reason(t, r, reason, sizeof reason);
    bool has_first = summary_first_divergence(t, r, first, sizeof first);
    if (st == ROW_SKIP) {
        outcome_element(f, st, NULL, reason[0] ? reason : "skipped", NULL);
        return;
    }
    if (has_first) snprintf(message, sizeof message, "first divergence: %s", first);
    else snprintf(message, sizeof message, "%s", reason[0] ? reason : "failed");
    snprintf(body, sizeof body,
             "%s\n%s requests compared, %s differing\nfirst divergence: %s\n", reason,
             summary_get(t, r, SUMMARY_REQUESTS_COMPARED),
             summary_get(t, r, SUMMARY_DIFFERING_REQUESTS),
             has_first ? first : "none");
    outcome_element(f, st, summary_get(t, r, SUMMARY_OBSERVED), message, body);
}

static int summary_suites(FILE *f, const csv_table *t, const csv_table *meta, suite *total) {
    int n = 0;
    bool *done = invar_calloc((size_t)t->nrows + 1, sizeof *done, "junit rows");
    for (int first = 0; first < t->nrows; first++) {
        if (done[first]) continue;
        suite s = {0};
        summary_suite_name(t, first, s.name, sizeof s.name);
        classname_of(s.name, s.classname, sizeof s.classname);
        char name[256];
        for (int r = first; r < t->nrows; r++) {
            summary_suite_name(t, r, name, sizeof name);
            if (strcmp(name, s.name) == 0)
                count(&s, summary_row_state(t, r), summary_seconds(t, r));
        }
        suite_open(f, &s, meta);
        for (int r = first; r < t->nrows; r++) {
            summary_suite_name(t, r, name, sizeof name);
            if (strcmp(name, s.name) != 0) continue;
            done[r] = true;
            summary_case(f, &s, t, r);
        }
        fputs("  </testsuite>\n", f);
        total->tests += s.tests;
        total->failures += s.failures;
        total->errors += s.errors;
        total->skipped += s.skipped;
        total->seconds += s.seconds;
        n++;
    }
    free(done);
    return n;
}

// ---------------------------------------------------------------------------------------------
// kernels.csv: one suite per device
// ---------------------------------------------------------------------------------------------

#define MAX_CONTROLS 1024

static void kernel_suite_name(const csv_table *t, int row, char *buf, int len) {
    const char *d = kernels_get(t, row, KERNELS_DEVICE);
    snprintf(buf, (size_t)len, "kernels/%s", d[0] ? d : "-");
}

static void kernel_suites(FILE *f, const csv_table *t, const csv_table *meta, suite *total) {
    kernel_control *controls = invar_calloc(MAX_CONTROLS, sizeof *controls, "kernel controls");
    int nc = kernel_controls(t, controls, MAX_CONTROLS);
    bool *done = invar_calloc((size_t)t->nrows + 1, sizeof *done, "junit rows");
    char name[256], why[1024];
    for (int first = 0; first < t->nrows; first++) {
        if (done[first]) continue;
        suite s = {0};
        kernel_suite_name(t, first, s.name, sizeof s.name);
        classname_of(s.name, s.classname, sizeof s.classname);
        for (int r = first; r < t->nrows; r++) {
            kernel_suite_name(t, r, name, sizeof name);
            if (strcmp(name, s.name) == 0)
                count(&s, kernel_row_state(t, r, why, sizeof why), kernel_seconds(t, r));
        }
        for (int g = 0; g < nc; g++) {
            kernel_suite_name(t, controls[g].first_row, name, sizeof name);
            if (strcmp(name, s.name) == 0) count(&s, controls[g].varied ? ROW_PASS : ROW_FAIL, 0);
        }
        suite_open(f, &s, meta);
        for (int r = first; r < t->nrows; r++) {
            kernel_suite_name(t, r, name, sizeof name);
            if (strcmp(name, s.name) != 0) continue;
            done[r] = true;
            row_state st = kernel_row_state(t, r, why, sizeof why);
            char test[512];
            snprintf(test, sizeof test, "%s/%s/%s", kernels_get(t, r, KERNELS_SET),
                     kernels_get(t, r, KERNELS_OP),
                     kernels_get(t, r, KERNELS_SHAPE));
            testcase_open(f, &s, test, kernel_seconds(t, r));
            if (st == ROW_PASS) fputs("/>\n", f);
            else outcome_element(f, st, kernels_get(t, r, KERNELS_STATUS), why, NULL);
        }
        for (int g = 0; g < nc; g++) {
            int r = controls[g].first_row;
            kernel_suite_name(t, r, name, sizeof name);
            if (strcmp(name, s.name) != 0) continue;
            char test[512];
            snprintf(test, sizeof test, "%s/%s: negative control (must vary at some shape)",
                     kernels_get(t, r, KERNELS_SET), kernels_get(t, r, KERNELS_OP));
            testcase_open(f, &s, test, 0);
            if (controls[g].varied) {
                fputs("/>\n", f);
                continue;
            }
            snprintf(why, sizeof why, "the reference op never varied at any of its %d shapes: "
                     "the check is too weak to show batch variance", controls[g].shapes);
            outcome_element(f, ROW_FAIL, "control did not trigger", why, NULL);
        }
        fputs("  </testsuite>\n", f);
        total->tests += s.tests;
        total->failures += s.failures;
        total->errors += s.errors;
        total->skipped += s.skipped;
        total->seconds += s.seconds;
    }
    free(done);
    free(controls);
}

// ---------------------------------------------------------------------------------------------
// The file. Suites are written to a buffer first: <testsuites> carries the totals.
// ---------------------------------------------------------------------------------------------

bool junit_write(const char *path, const csv_table *summary, const csv_table *kernels,
                 const csv_table *meta, char *err, int len) {
    char *body = NULL;
    size_t body_len = 0;
    FILE *mem = open_memstream(&body, &body_len);
    if (!mem) invar_die(INVAR_EXIT_SYSTEM, "junit: open_memstream failed");
    suite total = {0};
    if (summary) summary_suites(mem, summary, meta, &total);
    if (kernels) kernel_suites(mem, kernels, meta, &total);
    if (fclose(mem) != 0) invar_die(INVAR_EXIT_SYSTEM, "junit: writing to memory failed");

    report_file rf;
    if (!report_file_open(&rf, path, err, len)) {
        free(body);
        return false;
    }
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", rf.f);
    fprintf(rf.f, "<testsuites name=\"invar\" tests=\"%d\" failures=\"%d\" errors=\"%d\" "
            "skipped=\"%d\" time=\"%.3f\">\n", total.tests, total.failures, total.errors,
            total.skipped, total.seconds);
    fwrite(body, 1, body_len, rf.f);
    fputs("</testsuites>\n", rf.f);
    free(body);
    return report_file_commit(&rf, err, len);
}
