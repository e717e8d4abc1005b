// reports/coverage_merge.c — several runs' coverage.csv judged as one (reports/coverage_merge.h).
#include "coverage_merge.h"

#include <stdbool.h>  // bool
#include <stdio.h>    // snprintf, fprintf
#include <stdlib.h>   // free
#include <string.h>   // strcmp

#include "../common/check.h"  // invar_realloc
#include "csv_read.h"         // csv_table_read, csv_col, csv_at

enum { PATH_UNREACHED, PATH_EXCUSED, PATH_REACHED };  // ordered: a later run only raises it

typedef struct {
    char set[64], device[16], path[96], why[192];
    int state;
} path_row;

typedef struct {
    path_row *rows;
    int n, cap;
} path_table;

static path_row *find_or_add(path_table *t, const char *set, const char *device, const char *path) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->rows[i].set, set) && !strcmp(t->rows[i].device, device) && !strcmp(t->rows[i].path, path))
            return &t->rows[i];
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->rows = invar_realloc(t->rows, (size_t)t->cap * sizeof *t->rows, "coverage rows");
    }
    path_row *r = &t->rows[t->n++];
    *r = (path_row){.state = PATH_UNREACHED};
    snprintf(r->set, sizeof r->set, "%s", set);
    snprintf(r->device, sizeof r->device, "%s", device);
    snprintf(r->path, sizeof r->path, "%s", path);
    return r;
}

// One run's rows into t; false with err naming the file and the row or column.
static bool read_run(path_table *t, const char *dir, char *err, int err_len) {
    char path[4200];
    snprintf(path, sizeof path, "%s/coverage.csv", dir);
    csv_table *csv = csv_table_read(path, false, err, err_len);
    if (!csv) return false;
    const char *names[] = {"set", "device", "path", "reached"};
    int col[4];
    for (int c = 0; c < 4; c++)
        if ((col[c] = csv_col(csv, names[c])) < 0) {
            snprintf(err, (size_t)err_len, "%s: no column '%s' (an invar kernels coverage.csv has set, device, path, reached)",
                     path, names[c]);
            csv_table_free(csv);
            return false;
        }
    const int why_col = csv_col(csv, "why_unreachable");
    for (int i = 0; i < csv->nrows; i++) {
        const char *reached = csv_at(csv, i, col[3]);
        int state = !strcmp(reached, "yes") ? PATH_REACHED : !strcmp(reached, "unreachable") ? PATH_EXCUSED
                    : !strcmp(reached, "no") ? PATH_UNREACHED : -1;
        if (state < 0 || !*csv_at(csv, i, col[2])) {
            snprintf(err, (size_t)err_len, "%s: line %d: reached is '%s' (yes, no or unreachable) for path '%s'", path,
                     i + 2, reached, csv_at(csv, i, col[2]));
            csv_table_free(csv);
            return false;
        }
        path_row *r = find_or_add(t, csv_at(csv, i, col[0]), csv_at(csv, i, col[1]), csv_at(csv, i, col[2]));
        if (state == PATH_EXCUSED && r->state != PATH_REACHED)
            snprintf(r->why, sizeof r->why, "%s", csv_at(csv, i, why_col));
        if (state > r->state) r->state = state;
    }
    csv_table_free(csv);
    return true;
}

void coverage_write_set(FILE *out, bool failed, const char *set, const char *device, int reached,
                        int declared, const char *runs, int excused, const char *tail) {
    fprintf(out, "%-6s %-9s %-4s coverage: %d of %d paths reached%s", failed ? "FAIL" : "PATHS", set,
            device, reached, declared, runs);
    if (excused) fprintf(out, " (%d not reachable here)", excused);
    fprintf(out, "%s\n", tail);
}

void coverage_write_path(FILE *out, const char *set, const char *device, const char *path,
                         const char *why) {
    if (why) fprintf(out, "       %-9s %-4s not reachable here: %s (%s)\n", set, device, path, why);
    else fprintf(out, "       %-9s %-4s unreached: %s\n", set, device, path);
}

int coverage_merge(const char *const *dirs, int n, FILE *out, char *err, int err_len) {
    path_table t = {0};
    for (int d = 0; d < n; d++)
        if (!read_run(&t, dirs[d], err, err_len)) {
            free(t.rows);
            return 2;
        }
    int code = 0;
    for (int i = 0; i < t.n; i++) {  // a set and device at its first row: its line, then its paths
        bool first = true;
        for (int j = 0; j < i && first; j++)
            first = strcmp(t.rows[j].set, t.rows[i].set) || strcmp(t.rows[j].device, t.rows[i].device);
        if (!first) continue;
        int declared = 0, reached = 0, excused = 0;
        for (int j = i; j < t.n; j++)
            if (!strcmp(t.rows[j].set, t.rows[i].set) && !strcmp(t.rows[j].device, t.rows[i].device)) {
                declared++;
                reached += t.rows[j].state == PATH_REACHED;
                excused += t.rows[j].state == PATH_EXCUSED;
            }
        const bool short_of = reached + excused < declared;
        if (short_of) code = 1;
        char runs[32];
        snprintf(runs, sizeof runs, " over %d runs", n);
        coverage_write_set(out, short_of, t.rows[i].set, t.rows[i].device, reached, declared, runs, excused, "");
        for (int j = i; j < t.n; j++) {
            const path_row *r = &t.rows[j];
            if (strcmp(r->set, t.rows[i].set) || strcmp(r->device, t.rows[i].device) || r->state == PATH_REACHED)
                continue;
            coverage_write_path(out, r->set, r->device, r->path, r->state == PATH_EXCUSED ? r->why : NULL);
        }
    }
    if (t.n == 0) fprintf(out, "coverage: no declared paths in %d runs (no batch-invariant set checked)\n", n);
    free(t.rows);
    return code;
}
