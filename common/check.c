// common/check.c — fatal-error helpers (common/check.h).
#include "check.h"

#include <stdarg.h>  // va_list
#include <stdio.h>   // vfprintf, fputc, vsnprintf
#include <stdlib.h>  // exit, malloc, calloc

void invar_die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("invar: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

bool invar_fail(char *err, size_t err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return false;
}

void *invar_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) invar_die(INVAR_EXIT_SYSTEM, "out of host memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *invar_calloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) invar_die(INVAR_EXIT_SYSTEM, "out of host memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

void *invar_realloc(void *p, size_t bytes, const char *what) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) invar_die(INVAR_EXIT_SYSTEM, "out of host memory growing %s to %zu bytes", what, bytes);
    return q;
}
