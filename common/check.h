// common/check.h — fatal-error helpers shared by every folder, from C and from CUDA: a failing
// call names the op and the cause, and the process exits with the code the caller chose (2 bad
// input, 3 system).
#ifndef INVAR_COMMON_CHECK_H
#define INVAR_COMMON_CHECK_H

#include <stdbool.h>  // bool
#include <stddef.h>   // size_t

#define INVAR_EXIT_INPUT 2   // bad input or usage
#define INVAR_EXIT_SYSTEM 3  // a system, CUDA or library call failed

#ifdef __cplusplus
extern "C" {
#define INVAR_NORETURN [[noreturn]]
#else
#define INVAR_NORETURN _Noreturn
#endif

INVAR_NORETURN void invar_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// For readers that report bad input to their caller instead of exiting: writes the message
// into err (err_len bytes, truncated to fit) and returns false.
bool invar_fail(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// malloc/calloc/realloc that exit naming `what` on failure.
void *invar_malloc(size_t bytes, const char *what);
void *invar_calloc(size_t n, size_t size, const char *what);
void *invar_realloc(void *p, size_t bytes, const char *what);

#ifdef __cplusplus
}
#endif

#endif
