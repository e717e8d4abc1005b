// kernels/check.h — fatal-error helpers shared by every folder: a failing call names the op
// and the cause, and the process exits with the code the caller chose (2 bad input, 3 system).
#ifndef INVAR_KERNELS_CHECK_H
#define INVAR_KERNELS_CHECK_H

#include <stddef.h>  // size_t

#define INVAR_EXIT_INPUT 2   // bad input or usage
#define INVAR_EXIT_SYSTEM 3  // a system, CUDA or library call failed

_Noreturn void invar_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// malloc/calloc that exit naming `what` on failure.
void *invar_malloc(size_t bytes, const char *what);
void *invar_calloc(size_t n, size_t size, const char *what);

#endif
