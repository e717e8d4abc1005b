// reports/csv_read.c — CSV files read back by header name (reports/csv_read.h).
#include "csv_read.h"

#include <csv.h>               // csv_init, csv_parse, csv_fini, csv_free, csv_error
#include <errno.h>             // errno, ENOENT
#include <stdio.h>             // FILE, fopen, fread, ferror, fclose, snprintf
#include <stdlib.h>            // free, realloc, strtod
#include <string.h>            // memcpy, strcmp, strerror

#include "../common/check.h"  // invar_calloc, invar_malloc, invar_die

// ---------------------------------------------------------------------------------------------
// Parsing: libcsv calls back once per field and once per row end
// ---------------------------------------------------------------------------------------------

typedef struct {
    csv_table *t;
    char **row;        // fields of the row being parsed
    int row_n, row_cap;
    long cell_cap;     // capacity of t->cells, in cells
} reader;

static void *grow(void *p, size_t bytes) {
    void *q = realloc(p, bytes);
    if (!q) invar_die(INVAR_EXIT_SYSTEM, "csv read: out of memory (%zu bytes)", bytes);
    return q;
}

static void on_field(void *data, size_t len, void *user) {
    reader *r = user;
    if (r->row_n == r->row_cap) {
        r->row_cap = r->row_cap ? 2 * r->row_cap : 64;
        r->row = grow(r->row, (size_t)r->row_cap * sizeof *r->row);
    }
    char *s = invar_malloc(len + 1, "csv cell");
    if (len) memcpy(s, data, len);
    s[len] = '\0';
    r->row[r->row_n++] = s;
}

// The first row is the header; later rows are cut or padded to its width, so every lookup by
// column index is in bounds.
static void on_row(int terminator, void *user) {
    (void)terminator;
    reader *r = user;
    csv_table *t = r->t;
    if (!t->header) {
        t->header = r->row;
        t->ncols = r->row_n;
        r->row = NULL;
        r->row_n = r->row_cap = 0;
        return;
    }
    if ((long)(t->nrows + 1) * t->ncols > r->cell_cap) {
        r->cell_cap = r->cell_cap ? 2 * r->cell_cap : 64L * (t->ncols ? t->ncols : 1);
        t->cells = grow(t->cells, (size_t)r->cell_cap * sizeof *t->cells);
    }
    char **dst = t->cells + (long)t->nrows * t->ncols;
    for (int c = 0; c < t->ncols; c++) {
        if (c < r->row_n) {
            dst[c] = r->row[c];
        } else {
            dst[c] = invar_calloc(1, 1, "csv cell");
        }
    }
    for (int c = t->ncols; c < r->row_n; c++) free(r->row[c]);
    r->row_n = 0;
    t->nrows++;
}

csv_table *csv_table_read(const char *path, bool optional, char *err, int err_len) {
    err[0] = '\0';
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!(optional && errno == ENOENT))
            snprintf(err, (size_t)err_len, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    csv_table *t = invar_calloc(1, sizeof *t, "csv table");
    // fopen took the path, so it is shorter than PATH_MAX and fits.
    snprintf(t->path, sizeof t->path, "%s", path);
    reader r = {.t = t};
    struct csv_parser p;
    if (csv_init(&p, 0) != 0) invar_die(INVAR_EXIT_SYSTEM, "csv_init failed");
    char buf[65536];
    bool ok = true;
    for (;;) {
        size_t n = fread(buf, 1, sizeof buf, f);
        if (n > 0 && csv_parse(&p, buf, n, on_field, on_row, &r) != n) {
            snprintf(err, (size_t)err_len, "%s: does not parse as CSV: %s", path,
                     csv_strerror(csv_error(&p)));
            ok = false;
            break;
        }
        if (n < sizeof buf) break;
    }
    if (ok && ferror(f)) {
        snprintf(err, (size_t)err_len, "%s: read failed: %s", path, strerror(errno));
        ok = false;
    }
    // A row cut short by a killed writer has no line end: csv_fini hands it over.
    if (ok) csv_fini(&p, on_field, on_row, &r);
    csv_free(&p);
    fclose(f);
    for (int i = 0; i < r.row_n; i++) free(r.row[i]);
    free(r.row);
    if (ok && !t->header) {
        snprintf(err, (size_t)err_len, "%s: empty file (no header row)", path);
        ok = false;
    }
    if (!ok) {
        csv_table_free(t);
        return NULL;
    }
    return t;
}

void csv_table_free(csv_table *t) {
    if (!t) return;
    for (long i = 0; i < (long)t->nrows * t->ncols; i++) free(t->cells[i]);
    for (int c = 0; c < t->ncols; c++) free(t->header[c]);
    free(t->cells);
    free(t->header);
    free(t);
}

// ---------------------------------------------------------------------------------------------
// Lookups
// ---------------------------------------------------------------------------------------------

int csv_col(const csv_table *t, const char *name) {
    if (!t) return -1;
    for (int c = 0; c < t->ncols; c++)
        if (strcmp(t->header[c], name) == 0) return c;
    return -1;
}

int csv_col_any(const csv_table *t, const char *const *names) {
    for (; *names; names++) {
        int c = csv_col(t, *names);
        if (c >= 0) return c;
    }
    return -1;
}

const char *csv_at(const csv_table *t, int row, int col) {
    if (!t || col < 0 || col >= t->ncols || row < 0 || row >= t->nrows) return "";
    return t->cells[(long)row * t->ncols + col];
}

const char *csv_get(const csv_table *t, int row, const char *name) {
    return csv_at(t, row, csv_col(t, name));
}

bool csv_number(const char *cell, double *out) {
    if (!cell || !cell[0]) return false;
    char *end;
    errno = 0;
    double v = strtod(cell, &end);
    while (*end == ' ') end++;
    if (end == cell || *end != '\0' || errno == ERANGE) return false;
    *out = v;
    return true;
}
