// harness/shard/shard_merge.c — shard reports merged into one (harness/shard/shard_merge.h).
#include "shard_merge.h"

#include <errno.h>                       // errno
#include <limits.h>                      // PATH_MAX
#include <stdarg.h>                      // va_list, va_start, va_end
#include <stdbool.h>                     // bool
#include <stdio.h>                       // snprintf, vsnprintf, fprintf
#include <stdlib.h>                      // free, qsort, realpath, strtol
#include <string.h>                      // strcmp, strncmp, strdup, strerror

#include "../../common/check.h"          // invar_calloc
#include "../../reports/csv_read.h"      // csv_table_read, csv_get, csv_table_free
#include "../../reports/csv_report.h"    // csv_report_open, csv_report_row, csv_row_write
#include "../../reports/render.h"        // report_render_run
#include "../../reports/report_file.h"   // report_file_open, report_file_commit, report_path
#include "../../reports/report_schema.h" // summary_header, summary_get, divergence_*
#include "../../reports/run_meta.h"      // run_meta_get, run_meta_verify, run_meta_seal
#include "../../reports/shard_id.h"      // shard_id, shard_id_parse
#include "../run/run_args.h"             // run_args_from_command_line, RUN_MAX_ARGS

typedef struct {
    const char *dir;
    csv_table *meta, *summary, *divergence;
    shard_id id;
    int *positions, npositions;  // its configs' 0-based positions in the matrix, ascending
    char *command_line;          // owns what options' strings point into
    run_args options;
} shard_report;

typedef struct {
    int position, row;  // the config's position in the matrix; the row's order in its file
} divergence_at;

struct shard_set {
    int n, matrix;          // shards; configs of the matrix
    shard_report *shard;    // n, in the order of I once loaded
    int *owner, *row_of;    // per position: the shard holding it and its summary row
    divergence_at **div;    // per shard: its divergence rows, by position then file order
};

void shard_set_free(shard_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        shard_report *r = &s->shard[i];
        csv_table_free(r->meta);
        csv_table_free(r->summary);
        csv_table_free(r->divergence);
        free(r->positions);
        free(r->command_line);
        if (s->div) free(s->div[i]);
    }
    free(s->div);
    free(s->shard);
    free(s->owner);
    free(s->row_of);
    free(s);
}

__attribute__((format(printf, 4, 5)))
static shard_set *refuse(shard_set *s, char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    shard_set_free(s);
    return NULL;
}

// err already says why.
static shard_set *give_up(shard_set *s) {
    shard_set_free(s);
    return NULL;
}

static csv_table *read_table(const char *dir, const char *file, char *err, size_t len) {
    char path[PATH_MAX];
    if (!report_path(path, sizeof path, dir, file)) {
        snprintf(err, len, "%s/%s: path too long", dir, file);
        return NULL;
    }
    return csv_table_read(path, false, err, (int)len);
}

// "1,4,5" (1-based, ascending, within 1 .. matrix) or "-" (an empty shard) into 0-based
// positions. False with why.
static bool parse_positions(const char *text, int matrix, shard_report *r, char *why,
                            size_t len) {
    r->positions = invar_calloc((size_t)matrix + 1, sizeof *r->positions, "shard positions");
    r->npositions = 0;
    if (strcmp(text, "-") == 0) return true;
    for (const char *p = text;;) {
        char *end;
        errno = 0;
        long v = (*p >= '0' && *p <= '9') ? strtol(p, &end, 10) : 0;
        if (v < 1 || v > matrix || errno) {
            snprintf(why, len, "'%s': not a list of config positions from 1 to %d", text, matrix);
            return false;
        }
        if (r->npositions > 0 && v - 1 <= r->positions[r->npositions - 1]) {
            snprintf(why, len, "'%s': positions not in ascending order", text);
            return false;
        }
        r->positions[r->npositions++] = (int)v - 1;
        if (*end == '\0') return true;
        if (*end != ',') {
            snprintf(why, len, "'%s': not a list of config positions from 1 to %d", text, matrix);
            return false;
        }
        p = end + 1;
    }
}

// One shard's three CSVs and what its meta.csv says of it.
static bool load_one(shard_report *r, const char *dir, char *err, size_t len) {
    r->dir = dir;
    if (!(r->meta = read_table(dir, "meta.csv", err, len)) ||
        !(r->summary = read_table(dir, "summary.csv", err, len)) ||
        !(r->divergence = read_table(dir, "divergence.csv", err, len)))
        return false;
    char why[512];
    const char *shard = run_meta_get(r->meta, "shard");
    if (!shard[0]) {
        snprintf(err, len, "%s/meta.csv: shard: missing: not the report of a shard (invar run "
                 "--shard I/N)", dir);
        return false;
    }
    if (!shard_id_parse(shard, &r->id, why, sizeof why)) {
        snprintf(err, len, "%s/meta.csv: shard: %s", dir, why);
        return false;
    }
    const char *matrix = run_meta_get(r->meta, "matrix_configs");
    char *end;
    long m = strtol(matrix, &end, 10);
    if (!matrix[0] || *end || m < 1 || m > INT_MAX / 2) {
        snprintf(err, len, "%s/meta.csv: matrix_configs: '%s' is not a config count", dir, matrix);
        return false;
    }
    if (!parse_positions(run_meta_get(r->meta, "shard_configs"), (int)m, r, why, sizeof why)) {
        snprintf(err, len, "%s/meta.csv: shard_configs: %s", dir, why);
        return false;
    }
    // Random bytes or another file parse as a CSV of some header: not an unfinished shard.
    const char *const *columns = summary_header();
    const summary_column needed[] = {SUMMARY_CONFIG, SUMMARY_VERDICT};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
        if (summary_col(r->summary, needed[i]) >= 0) continue;
        snprintf(err, len, "%s/summary.csv:1: not a summary.csv (a report of invar run): no '%s' "
                 "column in its header", dir, columns[needed[i]]);
        return false;
    }
    if (r->summary->nrows != r->npositions) {
        snprintf(err, len, "%s/summary.csv: %d config rows where meta.csv's shard_configs lists "
                 "%d: an unfinished shard (invar run --resume %s)", dir, r->summary->nrows,
                 r->npositions, dir);
        return false;
    }
    for (int row = 0; row < r->summary->nrows; row++) {
        if (!summary_get(r->summary, row, SUMMARY_VERDICT)[0]) {
            snprintf(err, len, "%s/summary.csv:%d: verdict: empty: an unfinished shard (invar run "
                     "--resume %s)", dir, row + 2, dir);
            return false;
        }
    }
    // Last: an unfinished shard is told as such above, an edited one here.
    if (!run_meta_verify(dir, r->meta, true, err, (int)len)) return false;
    r->command_line = strdup(run_meta_get(r->meta, "command_line"));
    char *argv[RUN_MAX_ARGS];
    if (!r->command_line ||
        !run_args_from_command_line(r->command_line, argv, &r->options, why, sizeof why)) {
        snprintf(err, len, "%s/meta.csv: command_line: %s", dir,
                 r->command_line ? why : "out of memory");
        return false;
    }
    return true;
}

static bool same_text(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

// What every shard must share with the first one given: the field that differs, or NULL.
static const char *differing_field(const shard_report *a, const shard_report *b, char *what,
                                   size_t len) {
    static const char *const meta_keys[] = {"invar_commit", "build_defines", "case_xxh64", "seed",
                                            "matrix_configs"};
    for (size_t i = 0; i < sizeof meta_keys / sizeof meta_keys[0]; i++) {
        const char *va = run_meta_get(a->meta, meta_keys[i]);
        const char *vb = run_meta_get(b->meta, meta_keys[i]);
        if (strcmp(va, vb) == 0) continue;
        snprintf(what, len, "'%s' where %s has '%s'", vb, a->dir, va);
        return meta_keys[i];
    }
    if (a->id.count != b->id.count) {
        snprintf(what, len, "%d/%d, a split into %d where %s is %d/%d", b->id.index, b->id.count,
                 b->id.count, a->dir, a->id.index, a->id.count);
        return "shard";
    }
    const struct { const char *flag, *va, *vb; } options[] = {
        {"--model", a->options.model, b->options.model},
        {"--attention-backend", a->options.backend, b->options.backend},
        {"--hash-weights", a->options.hash_weights ? "on" : NULL,
         b->options.hash_weights ? "on" : NULL},
    };
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        if (same_text(options[i].va, options[i].vb)) continue;
        snprintf(what, len, "%s %s where %s has %s", options[i].flag,
                 options[i].vb ? options[i].vb : "not given", a->dir,
                 options[i].va ? options[i].va : "not given");
        return "command_line";
    }
    return NULL;
}

static const char *field_meaning(const char *field) {
    if (strcmp(field, "invar_commit") == 0) return "shards of different commits";
    // An experiment define may change bits (MLA_SPLIT_SIZE), so its shards are another build.
    if (strcmp(field, "build_defines") == 0) return "shards of different builds (NVCC_DEFINES)";
    if (strcmp(field, "case_xxh64") == 0) return "shards of different cases";
    if (strcmp(field, "seed") == 0) return "shards of different seeds";
    if (strcmp(field, "command_line") == 0) return "shards of different options";
    return "shards of different matrices";
}

static int by_index(const void *pa, const void *pb) {
    return ((const shard_report *)pa)->id.index - ((const shard_report *)pb)->id.index;
}

static int by_position(const void *pa, const void *pb) {
    const divergence_at *a = pa, *b = pb;
    return a->position != b->position ? a->position - b->position : a->row - b->row;
}

// Each divergence row's config must be one of the shard's own summary rows; ordered by the
// config's position in the matrix, a config's rows in the order they were written.
static bool order_divergence(shard_set *s, int i, char *err, size_t len) {
    const shard_report *r = &s->shard[i];
    const csv_table *d = r->divergence;
    s->div[i] = invar_calloc((size_t)d->nrows + 1, sizeof *s->div[i], "divergence rows");
    for (int row = 0; row < d->nrows; row++) {
        const char *name = divergence_get(d, row, DIVERGENCE_CONFIG);
        int j = 0;
        while (j < r->npositions && strcmp(summary_get(r->summary, j, SUMMARY_CONFIG), name) != 0)
            j++;
        if (j == r->npositions) {
            snprintf(err, len, "%s/divergence.csv:%d: config: '%s' is not in %s/summary.csv",
                     r->dir, row + 2, name, r->dir);
            return false;
        }
        s->div[i][row] = (divergence_at){.position = r->positions[j], .row = row};
    }
    qsort(s->div[i], (size_t)d->nrows, sizeof *s->div[i], by_position);
    return true;
}

// The directory's canonical path into buf; false when it does not exist.
static bool canonical(const char *dir, char *buf) { return realpath(dir, buf) != NULL; }

shard_set *shard_set_load(const char *out_dir, const char *const *dirs, int n, char *err,
                          size_t err_len) {
    shard_set *s = invar_calloc(1, sizeof *s, "shard set");
    s->shard = invar_calloc((size_t)n + 1, sizeof *s->shard, "shard reports");
    char out_real[PATH_MAX], dir_real[PATH_MAX], what[1024];
    bool out_exists = canonical(out_dir, out_real);
    for (int i = 0; i < n; i++) {
        s->n = i + 1;
        if (out_exists && canonical(dirs[i], dir_real) && strcmp(out_real, dir_real) == 0)
            return refuse(s, err, err_len, "%s: OUT is one of the shard directories: the merge "
                          "would overwrite its input", dirs[i]);
        if (!load_one(&s->shard[i], dirs[i], err, err_len)) return give_up(s);
        const char *field = differing_field(&s->shard[0], &s->shard[i], what, sizeof what);
        if (field)
            return refuse(s, err, err_len, "%s/meta.csv: %s: %s: %s", dirs[i], field, what,
                          field_meaning(field));
        for (int j = 0; j < i; j++)
            if (s->shard[j].id.index == s->shard[i].id.index)
                return refuse(s, err, err_len, "%s/meta.csv: shard: %d/%d given twice (also %s)",
                              dirs[i], s->shard[i].id.index, s->shard[i].id.count, dirs[j]);
    }
    int count = s->shard[0].id.count;
    if (n < count) {
        bool *given = invar_calloc((size_t)count + 1, sizeof *given, "shards given");
        for (int i = 0; i < n; i++) given[s->shard[i].id.index] = true;
        int missing = 1;
        while (given[missing]) missing++;
        free(given);
        return refuse(s, err, err_len, "shard %d/%d: missing (meta.csv shard rows of the %d "
                      "directories given: none is %d/%d)", missing, count, n, missing, count);
    }
    qsort(s->shard, (size_t)n, sizeof *s->shard, by_index);

    long m = strtol(run_meta_get(s->shard[0].meta, "matrix_configs"), NULL, 10);
    s->matrix = (int)m;
    s->owner = invar_calloc((size_t)s->matrix + 1, sizeof *s->owner, "config owners");
    s->row_of = invar_calloc((size_t)s->matrix + 1, sizeof *s->row_of, "config rows");
    for (int p = 0; p < s->matrix; p++) s->owner[p] = -1;
    for (int i = 0; i < n; i++) {
        const shard_report *r = &s->shard[i];
        for (int j = 0; j < r->npositions; j++) {
            int p = r->positions[j], o = s->owner[p];
            if (o >= 0)
                return refuse(s, err, err_len, "%s/meta.csv: shard_configs: config %d is also in "
                              "%s (shard %d/%d): overlapping configs", r->dir, p + 1,
                              s->shard[o].dir, s->shard[o].id.index, count);
            s->owner[p] = i;
            s->row_of[p] = j;
        }
    }
    for (int p = 0; p < s->matrix; p++) {
        if (s->owner[p] >= 0) continue;
        return refuse(s, err, err_len, "config %d of %d: in no shard's meta.csv shard_configs: "
                      "the shards were split by different plans", p + 1, s->matrix);
    }
    // The same config reported by two shards: the positions agree, the names tell otherwise.
    for (int p = 0; p < s->matrix; p++) {
        const shard_report *rp = &s->shard[s->owner[p]];
        const char *name = summary_get(rp->summary, s->row_of[p], SUMMARY_CONFIG);
        for (int q = 0; q < p; q++) {
            const shard_report *rq = &s->shard[s->owner[q]];
            if (strcmp(name, summary_get(rq->summary, s->row_of[q], SUMMARY_CONFIG)) == 0)
                return refuse(s, err, err_len, "%s/summary.csv: config: '%s' is also in "
                              "%s/summary.csv: overlapping configs", rp->dir, name, rq->dir);
        }
    }
    s->div = invar_calloc((size_t)n + 1, sizeof *s->div, "divergence orders");
    for (int i = 0; i < n; i++)
        if (!order_divergence(s, i, err, err_len)) return give_up(s);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

static bool write_summary(const shard_set *s, const char *path, char *err, size_t len) {
    csv_report *out = csv_report_open(path, summary_header(), SUMMARY_NCOLS, err, (int)len);
    if (!out) return false;
    bool ok = true;
    for (int p = 0; p < s->matrix && ok; p++) {
        const csv_table *t = s->shard[s->owner[p]].summary;
        const char *fields[SUMMARY_NCOLS];
        for (int c = 0; c < SUMMARY_NCOLS; c++)
            fields[c] = summary_get(t, s->row_of[p], (summary_column)c);
        ok = csv_report_row(out, fields, err, (int)len);
    }
    char close_err[512];
    if (!csv_report_close(out, close_err, sizeof close_err) && ok) {
        snprintf(err, len, "%s", close_err);
        return false;
    }
    return ok;
}

// Rows of all shards merged by position (each shard's list is already in that order).
static bool write_divergence(const shard_set *s, const char *path, char *err, size_t len) {
    csv_report *out = csv_report_open(path, divergence_header(), DIVERGENCE_NCOLS, err, (int)len);
    if (!out) return false;
    int *next = invar_calloc((size_t)s->n + 1, sizeof *next, "divergence cursors");
    bool ok = true;
    for (int p = 0; p < s->matrix && ok; p++) {
        int i = s->owner[p];
        const csv_table *t = s->shard[i].divergence;
        for (; ok && next[i] < t->nrows && s->div[i][next[i]].position == p; next[i]++) {
            int row = s->div[i][next[i]].row;
            const char *fields[DIVERGENCE_NCOLS];
            for (int c = 0; c < DIVERGENCE_NCOLS; c++)
                fields[c] = divergence_get(t, row, (divergence_column)c);
            ok = csv_report_row(out, fields, err, (int)len);
        }
    }
    free(next);
    char close_err[512];
    if (!csv_report_close(out, close_err, sizeof close_err) && ok) {
        snprintf(err, len, "%s", close_err);
        return false;
    }
    return ok;
}

// The shard's own rows: its place in the matrix and the seal of its files (the merge seals its
// own).
static bool is_shard_key(const char *key) {
    return strcmp(key, "shard") == 0 || strcmp(key, "shard_configs") == 0 ||
           strcmp(key, "matrix_configs") == 0 || strncmp(key, "xxh64:", 6) == 0;
}

// Shard 1's rows (commit, case, seed, device, command line, ...) without its shard rows, then
// merged_shards = N and one merged_shard:I/N row per shard: its directory, host, date, device.
// No shard row: the merged report covers the whole matrix (`invar report diff` reads it so).
static bool write_meta(const shard_set *s, const char *path, char *err, size_t len) {
    report_file rf;
    if (!report_file_open(&rf, path, err, (int)len)) return false;
    const csv_table *m = s->shard[0].meta;
    const char *header[2] = {"key", "value"};
    csv_row_write(rf.f, header, 2);
    for (int r = 0; r < m->nrows; r++) {
        const char *row[2] = {csv_get(m, r, "key"), csv_get(m, r, "value")};
        if (!is_shard_key(row[0])) csv_row_write(rf.f, row, 2);
    }
    char count[16];
    snprintf(count, sizeof count, "%d", s->n);
    const char *merged[2] = {"merged_shards", count};
    csv_row_write(rf.f, merged, 2);
    for (int i = 0; i < s->n; i++) {
        const shard_report *r = &s->shard[i];
        char key[64], value[PATH_MAX + 1024];
        snprintf(key, sizeof key, "merged_shard:%d/%d", r->id.index, r->id.count);
        snprintf(value, sizeof value, "%s (host %s, %s, device %s)", r->dir,
                 run_meta_get(r->meta, "host"), run_meta_get(r->meta, "date_utc"),
                 run_meta_get(r->meta, "device"));
        const char *row[2] = {key, value};
        csv_row_write(rf.f, row, 2);
    }
    return report_file_commit(&rf, err, (int)len);
}

int shard_set_write(const shard_set *s, const char *out_dir, FILE *console, char *err,
                    size_t err_len) {
    static const char *const files[] = {"summary.csv", "divergence.csv", "meta.csv"};
    bool (*const writers[])(const shard_set *, const char *, char *, size_t) = {
        write_summary, write_divergence, write_meta};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[PATH_MAX];
        if (!report_path(path, sizeof path, out_dir, files[f])) {
            snprintf(err, err_len, "%s/%s: path too long", out_dir, files[f]);
            return 3;
        }
        if (!writers[f](s, path, err, err_len)) return 3;
    }
    if (!run_meta_seal(out_dir, err, (int)err_len)) return 3;
    if (!report_render_run(out_dir, err, (int)err_len)) return 3;
    if (console)
        fprintf(console, "merged %d shards of %d configs into %s/{summary.csv,divergence.csv,"
                "meta.csv,junit.xml,summary.md}\n", s->n, s->matrix, out_dir);
    return 0;
}
