// harness/host.c — monotonic clock and `mkdir -p` (harness/host.h).
#include "host.h"

#include <errno.h>               // errno, EEXIST
#include <stdio.h>               // snprintf
#include <string.h>              // strerror
#include <sys/stat.h>            // mkdir, stat, S_ISDIR
#include <time.h>                // clock_gettime

#include "../common/check.h"    // invar_die

double host_seconds(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "clock_gettime(CLOCK_MONOTONIC) failed: %s", strerror(errno));
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void host_make_dirs(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        invar_die(INVAR_EXIT_INPUT, "output directory path too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            invar_die(INVAR_EXIT_SYSTEM, "mkdir %s failed: %s", path, strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            invar_die(INVAR_EXIT_SYSTEM, "%s is not a directory", path);
        *p = saved;
        if (saved == '\0') return;
    }
}
