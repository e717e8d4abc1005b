// reports/csv_report.h — a CSV file written row by row (libcsv quoting). The header is written
// at open and every row is flushed as soon as it is written, so a crash keeps finished rows.
#ifndef INVAR_REPORTS_CSV_REPORT_H
#define INVAR_REPORTS_CSV_REPORT_H

#include <stdbool.h>  // bool
#include <stdio.h>    // FILE

typedef struct csv_report csv_report;

// Creates (truncates) `path` and writes the header. NULL with a message naming the file in err.
csv_report *csv_report_open(const char *path, const char *const *header, int ncols, char *err,
                            int err_len);

// Writes one row of exactly the header's column count (NULL fields are written empty), then
// flushes. False with a message naming the file in err.
bool csv_report_row(csv_report *r, const char *const *fields, char *err, int err_len);

// A row from a printf format whose fields are separated by commas ("%d,%.2f,%s"), for rows of
// numbers and names without commas (the benchmarks'); at most CSV_ROWF_MAX_COLS fields, and
// exactly the header's count. False with a message naming the file in err.
#define CSV_ROWF_MAX_COLS 32
bool csv_report_rowf(csv_report *r, char *err, int err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Closes and frees r (also when it fails). False with a message naming the file in err.
bool csv_report_close(csv_report *r, char *err, int err_len);

const char *csv_report_path(const csv_report *r);

// The one CSV row writer: fields[0 .. ncols) quoted by libcsv (always, so a value never changes
// its shape; NULL is written empty), comma separated, a newline. For a file written whole
// (meta.csv goes through reports/report_file.h); false with errno set when a write failed.
bool csv_row_write(FILE *f, const char *const *fields, int ncols);

#endif
