// tests/fuzz/replay.c — a plain driver for a fuzz target, so `make check` replays the seed
// corpus and every saved reproducer without clang or libFuzzer: each file named, or found
// below a directory named, is read whole and passed to LLVMFuzzerTestOneInput once. A crash or
// sanitizer report ends the process, which fails the suite.
#include <dirent.h>     // opendir, readdir, closedir
#include <errno.h>      // errno
#include <stdio.h>      // fopen, fread, printf, fprintf
#include <stdlib.h>     // malloc, free, qsort
#include <string.h>     // strcmp, strerror
#include <sys/stat.h>   // stat, S_ISDIR, S_ISREG

#include "fuzz_input.h" // LLVMFuzzerTestOneInput, fuzz_require

// Replays one file; false when it cannot be read.
static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: cannot open: %s\n", path, strerror(errno));
        return 0;
    }
    struct stat st;
    fuzz_require(fstat(fileno(f), &st) == 0, "fstat");
    size_t size = (size_t)st.st_size;
    // One byte more than needed, so an empty file still gets a real pointer.
    unsigned char *data = malloc(size + 1);
    fuzz_require(data != NULL, "malloc");
    size_t got = fread(data, 1, size, f);
    int ok = got == size && !ferror(f);
    fuzz_require(fclose(f) == 0, "fclose");
    if (!ok) {
        fprintf(stderr, "replay: %s: read error\n", path);
        free(data);
        return 0;
    }
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 1;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Replays `path` (a file, or every file below a directory, in name order; dot files such as
// .gitkeep skipped). Adds to *count; false on an unreadable file or directory.
static int replay_path(const char *path, int *count) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return 0;
    }
    if (S_ISREG(st.st_mode)) {
        *count += 1;
        return replay_file(path);
    }
    if (!S_ISDIR(st.st_mode)) return 1;
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return 0;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (errno = 0, e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = realloc(names, cap * sizeof *names);
            fuzz_require(names != NULL, "realloc");
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        fuzz_require(names[n] != NULL, "malloc");
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    fuzz_require(errno == 0, "readdir");
    fuzz_require(closedir(d) == 0, "closedir");
    if (n > 0) qsort(names, n, sizeof *names, name_cmp);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        ok = replay_path(names[i], count) && ok;
        free(names[i]);
    }
    free(names);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    int count = 0, ok = 1;
    for (int i = 1; i < argc; i++) ok = replay_path(argv[i], &count) && ok;
    printf("replay: %d inputs through %s%s\n", count, argv[0], ok ? "" : " (some unreadable)");
    return ok ? 0 : 1;
}
