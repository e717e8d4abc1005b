// reports/report_file.h — a final report file (junit.xml, summary.md, diff.md) written whole or
// not at all: it is written to "PATH.tmp.PID", flushed to disk, then renamed over PATH, so a
// reader (or a killed run) never sees half a file.
#ifndef INVAR_REPORTS_REPORT_FILE_H
#define INVAR_REPORTS_REPORT_FILE_H

#include <limits.h>   // PATH_MAX
#include <stdbool.h>  // bool
#include <stdio.h>    // FILE

typedef struct {
    FILE *f;           // write the contents here
    char path[PATH_MAX];     // the final name
    char tmp[PATH_MAX + 32]; // the temporary name
} report_file;

// Opens the temporary file. False with "PATH: ... failed: cause" in err (a path of PATH_MAX
// characters or more: "PATH: path too long").
bool report_file_open(report_file *rf, const char *path, char *err, int err_len);

// Checks every write went through, closes and renames over the final name. On any failure
// the temporary file is removed and err names the file and the cause.
bool report_file_commit(report_file *rf, char *err, int err_len);

// "DIR/NAME" into buf; false when it does not fit.
bool report_path(char *buf, int len, const char *dir, const char *name);

#endif
