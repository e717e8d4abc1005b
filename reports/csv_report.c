// reports/csv_report.c — row-by-row CSV files (reports/csv_report.h).
#include "csv_report.h"

#include <csv.h>                // csv_fwrite
#include <stdarg.h>             // va_list, va_start, va_end
#include <errno.h>              // errno
#include <limits.h>             // PATH_MAX
#include <stdio.h>              // FILE, fopen, fputc, fflush, fclose, snprintf
#include <stdlib.h>             // free
#include <string.h>             // strlen, strerror

#include "../common/check.h"   // invar_calloc

struct csv_report {
    FILE *f;
    char path[PATH_MAX];
    int ncols;
};

// Every failure names the file and the libc cause.
static bool fail(const csv_report *r, const char *what, char *err, int err_len) {
    snprintf(err, (size_t)err_len, "%s: %s failed: %s", r->path, what,
             errno ? strerror(errno) : "unknown error");
    return false;
}

bool csv_row_write(FILE *f, const char *const *fields, int ncols) {
    errno = 0;
    for (int i = 0; i < ncols; i++) {
        const char *v = fields[i] ? fields[i] : "";
        if (i > 0 && fputc(',', f) == EOF) return false;
        if (csv_fwrite(f, v, strlen(v)) != 0) return false;
    }
    return fputc('\n', f) != EOF;
}

// One line, then flushed to the OS, so a crash keeps it.
static bool write_line(csv_report *r, const char *const *fields, char *err, int err_len) {
    if (!csv_row_write(r->f, fields, r->ncols)) return fail(r, "write", err, err_len);
    errno = 0;
    if (fflush(r->f) != 0) return fail(r, "flush", err, err_len);
    return true;
}

csv_report *csv_report_open(const char *path, const char *const *header, int ncols, char *err,
                            int err_len) {
    csv_report *r = invar_calloc(1, sizeof *r, "csv report");
    if (snprintf(r->path, sizeof r->path, "%s", path) >= (int)sizeof r->path) {
        snprintf(err, (size_t)err_len, "%s: path too long (at most %d characters)", path,
                 PATH_MAX - 1);
        free(r);
        return NULL;
    }
    r->ncols = ncols;
    errno = 0;
    r->f = fopen(path, "w");
    if (!r->f) {
        fail(r, "open", err, err_len);
        free(r);
        return NULL;
    }
    if (!write_line(r, header, err, err_len)) {
        fclose(r->f);
        free(r);
        return NULL;
    }
    return r;
}

bool csv_report_row(csv_report *r, const char *const *fields, char *err, int err_len) {
    return write_line(r, fields, err, err_len);
}

bool csv_report_rowf(csv_report *r, char *err, int err_len, const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line) {
        snprintf(err, (size_t)err_len, "%s: a row longer than %zu bytes", r->path, sizeof line);
        return false;
    }
    const char *fields[CSV_ROWF_MAX_COLS];
    int count = 0;
    for (char *p = line; count < CSV_ROWF_MAX_COLS;) {
        fields[count++] = p;
        char *comma = strchr(p, ',');
        if (!comma) break;
        *comma = '\0';
        p = comma + 1;
    }
    if (count != r->ncols) {
        snprintf(err, (size_t)err_len, "%s: a row of %d fields where the header has %d", r->path,
                 count, r->ncols);
        return false;
    }
    return write_line(r, fields, err, err_len);
}

bool csv_report_close(csv_report *r, char *err, int err_len) {
    if (!r) return true;
    errno = 0;
    bool ok = fclose(r->f) == 0 || fail(r, "close", err, err_len);
    free(r);
    return ok;
}

const char *csv_report_path(const csv_report *r) { return r->path; }
