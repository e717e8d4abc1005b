// sets/ops_wrapper.c — the memory ops of a wrapping set, forwarded to the set it wraps.
#include "ops_wrapper.h"

static ops_set *inner_of(ops_set *ops) { return ((ops_wrapper *)ops)->inner; }

static void *wrapper_alloc(ops_set *ops, size_t bytes, const char *what) {
    return inner_of(ops)->alloc(inner_of(ops), bytes, what);
}
static void wrapper_release(ops_set *ops, void *q) { inner_of(ops)->release(inner_of(ops), q); }
static void wrapper_upload(ops_set *ops, void *dst, const void *src, size_t bytes) {
    inner_of(ops)->upload(inner_of(ops), dst, src, bytes);
}
static void wrapper_download(ops_set *ops, void *dst, const void *src, size_t bytes) {
    inner_of(ops)->download(inner_of(ops), dst, src, bytes);
}
static void wrapper_sync(ops_set *ops) { inner_of(ops)->sync(inner_of(ops)); }
static void *wrapper_alloc_host(ops_set *ops, size_t bytes, const char *what) {
    return inner_of(ops)->alloc_host(inner_of(ops), bytes, what);
}
static void wrapper_release_host(ops_set *ops, void *q) {
    inner_of(ops)->release_host(inner_of(ops), q);
}
static void wrapper_upload_async(ops_set *ops, void *dst, const void *src, size_t bytes) {
    inner_of(ops)->upload_async(inner_of(ops), dst, src, bytes);
}

void ops_wrapper_init(ops_wrapper *w, ops_set *inner) {
    w->inner = inner;
    w->base = *inner;
    w->base.alloc = wrapper_alloc;
    w->base.release = wrapper_release;
    w->base.upload = wrapper_upload;
    w->base.download = wrapper_download;
    w->base.sync = wrapper_sync;
    // The inner set's host memory and asynchronous upload, where it has them.
    w->base.alloc_host = inner->alloc_host ? wrapper_alloc_host : NULL;
    w->base.release_host = inner->release_host ? wrapper_release_host : NULL;
    w->base.upload_async = inner->upload_async ? wrapper_upload_async : NULL;
}
