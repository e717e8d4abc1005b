// sets/ops_wrapper.c — the memory ops (and TP-size invariance's steps) of a wrapping set,
// forwarded to the set it wraps.
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

// TP-size invariance's steps, forwarded too: a set built on another finds its own state from
// the ops pointer it is called with (the reference set's ring order, reference/cpu/ref_cpu_set.h),
// which a copied pointer would read out of the wrapper.
static void wrapper_add_f32(ops_set *ops, float *x, const float *y, long n) {
    inner_of(ops)->add_f32(inner_of(ops), x, y, n);
}
static void wrapper_round_to_bf16(ops_set *ops, bf16 *out, const float *x, long n) {
    inner_of(ops)->round_to_bf16(inner_of(ops), out, x, n);
}
static void wrapper_sum_slices_f32(ops_set *ops, float *parts, int n, long len) {
    inner_of(ops)->sum_slices_f32(inner_of(ops), parts, n, len);
}
static void wrapper_all_reduce_f32_tree(ops_set *ops, tp_comm *comm, float *buf, long n) {
    inner_of(ops)->all_reduce_f32_tree(inner_of(ops), comm, buf, n);
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
    w->base.add_f32 = inner->add_f32 ? wrapper_add_f32 : NULL;
    w->base.round_to_bf16 = inner->round_to_bf16 ? wrapper_round_to_bf16 : NULL;
    w->base.sum_slices_f32 = inner->sum_slices_f32 ? wrapper_sum_slices_f32 : NULL;
    w->base.all_reduce_f32_tree = inner->all_reduce_f32_tree ? wrapper_all_reduce_f32_tree : NULL;
    // No graphs: a replay would run the inner set's kernels past the wrapper's observations.
    w->base.graph_capture = NULL;
    w->base.graph_launch = NULL;
    w->base.graph_release = NULL;
    w->base.graph_collectives = false;
}
