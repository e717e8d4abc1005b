// reports/csv_read.h — a whole CSV file read back into memory (libcsv's parser), its cells looked
// up by header name. Report writers read columns BY NAME and tolerate columns they do not know,
// so a report directory written by an older or newer invar still renders.
#ifndef INVAR_REPORTS_CSV_READ_H
#define INVAR_REPORTS_CSV_READ_H

#include <limits.h>   // PATH_MAX
#include <stdbool.h>  // bool

typedef struct {
    char path[PATH_MAX];
    int ncols, nrows;   // header columns; data rows (the header not counted)
    char **header;      // ncols names
    char **cells;       // nrows * ncols values, row-major; a short row is padded with ""
} csv_table;

// Reads `path`. A missing file gives NULL with err[0] == '\0' when `optional`, else NULL with
// "path: cannot open: ..." in err; a file that does not parse, or has no header, gives NULL with
// the reason in err. A last row cut short (a killed run) is kept, padded with "".
csv_table *csv_table_read(const char *path, bool optional, char *err, int err_len);

void csv_table_free(csv_table *t);

// Index of column `name`, or -1.
int csv_col(const csv_table *t, const char *name);

// First of the NULL-terminated names that is a column, or -1.
int csv_col_any(const csv_table *t, const char *const *names);

// The cell at (row, col); "" when col is -1, so a missing column reads as empty.
const char *csv_at(const csv_table *t, int row, int col);

// The cell at (row, column `name`); "" when there is no such column.
const char *csv_get(const csv_table *t, int row, const char *name);

// Parses a cell as a double; false when it is empty or not a number.
bool csv_number(const char *cell, double *out);

#endif
