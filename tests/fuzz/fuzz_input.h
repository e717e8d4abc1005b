// tests/fuzz/fuzz_input.h — the pieces every fuzz target shares: the input handed to a
// path-taking parser as a file (a memfd, so nothing is left on disk), an input split in two,
// and a hard stop when the harness itself (not the code under test) cannot work.
#ifndef INVAR_TESTS_FUZZ_INPUT_H
#define INVAR_TESTS_FUZZ_INPUT_H

#include <stddef.h>     // size_t
#include <stdint.h>     // uint8_t
#include <stdio.h>      // fprintf, snprintf
#include <stdlib.h>     // abort
#include <string.h>     // memmem, strerror
#include <errno.h>      // errno
#include <sys/mman.h>   // memfd_create, MFD_CLOEXEC
#include <unistd.h>     // write, close

// The one entry point libFuzzer and tests/fuzz/replay.c call.
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// A failure of the harness (a system call), never of the code under test: abort so that it
// cannot pass for a clean run.
static inline void fuzz_require(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz harness: %s: %s\n", what, strerror(errno));
        abort();
    }
}

// Writes `size` bytes to `fd` whole.
static inline void fuzz_write_all(int fd, const uint8_t *data, size_t size) {
    while (size > 0) {
        ssize_t n = write(fd, data, size);
        fuzz_require(n > 0, "write");
        data += n;
        size -= (size_t)n;
    }
}

// The input as an anonymous file named `path` (/proc/self/fd/N); close the returned fd after.
static inline int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t path_len) {
    int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
    fuzz_require(fd >= 0, "memfd_create");
    fuzz_write_all(fd, data, size);
    snprintf(path, path_len, "/proc/self/fd/%d", fd);
    return fd;
}

static inline void fuzz_close(int fd) { fuzz_require(close(fd) == 0, "close"); }

// Splits the input at the first `sep`: [data, *first_len) and [*second, end). Without `sep` the
// whole input is the second part and the first is empty.
static inline void fuzz_split(const uint8_t *data, size_t size, const char *sep,
                              size_t *first_len, const uint8_t **second, size_t *second_len) {
    size_t sep_len = strlen(sep);
    const uint8_t *at = size >= sep_len ? memmem(data, size, sep, sep_len) : NULL;
    if (!at) {
        *first_len = 0;
        *second = data;
        *second_len = size;
        return;
    }
    *first_len = (size_t)(at - data);
    *second = at + sep_len;
    *second_len = size - *first_len - sep_len;
}

#endif
