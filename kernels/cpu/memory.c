// kernels/cpu/memory.c — host memory for the CPU sets: a "device" pointer is a host pointer.
#include <stdlib.h>          // free
#include <string.h>          // memcpy

#include "../../common/check.h"        // invar_malloc
#include "inv_cpu_ops.h"     // inv_cpu_alloc, ...

void *inv_cpu_alloc(ops_set *ops, size_t bytes, const char *what) {
    (void)ops;
    return invar_malloc(bytes, what);
}

void inv_cpu_release(ops_set *ops, void *p) {
    (void)ops;
    free(p);
}

void inv_cpu_upload(ops_set *ops, void *dst, const void *src, size_t bytes) {
    (void)ops;
    if (bytes) memcpy(dst, src, bytes);
}

void inv_cpu_download(ops_set *ops, void *dst, const void *src, size_t bytes) {
    (void)ops;
    if (bytes) memcpy(dst, src, bytes);
}

// Every CPU op has finished when it returns.
void inv_cpu_sync(ops_set *ops) { (void)ops; }
