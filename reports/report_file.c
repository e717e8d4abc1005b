// reports/report_file.c — write-to-temporary-then-rename report files (reports/report_file.h).
#include "report_file.h"

#include <errno.h>      // errno
#include <stdio.h>      // fopen, fflush, ferror, fclose, rename, remove, snprintf
#include <string.h>     // strerror, strlen
#include <unistd.h>     // fsync, fileno, getpid

static bool fail(const report_file *rf, const char *what, char *err, int err_len) {
    snprintf(err, (size_t)err_len, "%s: %s failed: %s", rf->path, what,
             errno ? strerror(errno) : "unknown error");
    return false;
}

bool report_path(char *buf, int len, const char *dir, const char *name) {
    return snprintf(buf, (size_t)len, "%s/%s", dir, name) < len;
}

bool report_file_open(report_file *rf, const char *path, char *err, int err_len) {
    rf->f = NULL;
    if (snprintf(rf->path, sizeof rf->path, "%s", path) >= (int)sizeof rf->path ||
        snprintf(rf->tmp, sizeof rf->tmp, "%s.tmp.%ld", path, (long)getpid()) >=
            (int)sizeof rf->tmp) {
        snprintf(err, (size_t)err_len, "%s: path too long (%zu characters, at most %d)", path,
                 strlen(path), PATH_MAX - 1);
        return false;
    }
    errno = 0;
    rf->f = fopen(rf->tmp, "w");
    if (!rf->f) return fail(rf, "open (temporary file)", err, err_len);
    return true;
}

bool report_file_commit(report_file *rf, char *err, int err_len) {
    errno = 0;
    bool ok = fflush(rf->f) == 0 && !ferror(rf->f);
    if (!ok) fail(rf, "write", err, err_len);
    // fsync before rename: after a crash the new name never points at an empty file.
    if (ok && fsync(fileno(rf->f)) != 0) ok = fail(rf, "fsync", err, err_len);
    if (fclose(rf->f) != 0 && ok) ok = fail(rf, "close", err, err_len);
    rf->f = NULL;
    if (ok && rename(rf->tmp, rf->path) != 0) ok = fail(rf, "rename", err, err_len);
    if (!ok) remove(rf->tmp);
    return ok;
}
