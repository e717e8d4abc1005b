// harness/host.c — monotonic clock and `mkdir -p` (harness/host.h).
#include "host.h"

#include <errno.h>               // errno, EEXIST
#include <stdio.h>               // snprintf
#include <stdlib.h>              // free
#include <string.h>              // strerror, memcpy
#include <sys/stat.h>            // mkdir, stat, S_ISDIR
#include <time.h>                // clock_gettime

#include "../common/check.h"    // invar_die, invar_malloc

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

double host_copy_bandwidth_gbs(size_t bytes) {
    char *src = invar_malloc(bytes, "bench copy source"), *dst = invar_malloc(bytes, "bench copy destination");
    for (size_t i = 0; i < bytes; i++) src[i] = (char)(i * 131u);
    memcpy(dst, src, bytes);  // first touch of dst's pages
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = host_seconds();
        memcpy(dst, src, bytes);
        double gbs = 2.0 * (double)bytes / (host_seconds() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    if (dst[bytes - 1] != src[bytes - 1]) invar_die(INVAR_EXIT_SYSTEM, "bench: host copy lost bytes");
    free(src);
    free(dst);
    return best;
}
