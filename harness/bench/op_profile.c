// harness/bench/op_profile.c — per-op timing of a kernel set (harness/bench/op_profile.h).
//
// Each timed call takes a mark before and after it: a CUDA event on the set's stream, or the
// host clock on the CPU. Marks are resolved into seconds only in op_profile_totals, after one
// sync, so timing a CUDA set adds two event records a call and no waits.
#include "op_profile.h"

#include <stdarg.h>                  // va_list, va_start, va_end
#include <stdio.h>                   // vsnprintf
#include <stdlib.h>                  // free
#include <string.h>                  // strcmp, memcpy

#include "../../common/check.h"      // invar_calloc, invar_realloc
#include "../host.h"                 // host_seconds
#include "../../sets/ops_wrapper.h"  // ops_wrapper, ops_wrapper_init
#ifdef INVAR_CUDA
#include "../../kernels/cuda/cuda_timing.h" // cuda_event_log_*
#endif

typedef struct {
    int key;          // index into entries
    int begin, end;   // marks
} timed_call;

struct op_profile {
    ops_wrapper wrap; // first: the engine calls through wrap.base
#ifdef INVAR_CUDA
    cuda_event_log *events;  // NULL: a host-clock set
#endif
    double *host_marks;
    int n_marks, cap_marks;
    timed_call *calls;
    int n_calls, cap_calls;
    op_profile_entry *entries;
    int n_entries, cap_entries;
};

static op_profile *profile_of(ops_set *ops) { return (op_profile *)ops; }

// --- marks and keys ------------------------------------------------------------------------------

static int mark(op_profile *p) {
#ifdef INVAR_CUDA
    if (p->events) return cuda_event_log_record(p->events);
#endif
    if (p->n_marks == p->cap_marks) {
        p->cap_marks = p->cap_marks ? 2 * p->cap_marks : 1024;
        p->host_marks = invar_realloc(p->host_marks, (size_t)p->cap_marks * sizeof *p->host_marks, "profile marks");
    }
    p->host_marks[p->n_marks] = host_seconds();
    return p->n_marks++;
}

static double seconds_between(op_profile *p, int a, int b) {
#ifdef INVAR_CUDA
    if (p->events) return cuda_event_log_seconds(p->events, a, b);
#endif
    return p->host_marks[b] - p->host_marks[a];
}

// The entry of a key (added on first sight; a handful of keys a model, so a linear search).
static int key_index(op_profile *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int key_index(op_profile *p, const char *fmt, ...) {
    char key[OP_PROFILE_KEY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    for (int i = 0; i < p->n_entries; i++)
        if (strcmp(p->entries[i].key, key) == 0) return i;
    if (p->n_entries == p->cap_entries) {
        p->cap_entries = p->cap_entries ? 2 * p->cap_entries : 64;
        p->entries = invar_realloc(p->entries, (size_t)p->cap_entries * sizeof *p->entries, "profile entries");
    }
    op_profile_entry *e = &p->entries[p->n_entries];
    memcpy(e->key, key, sizeof key);
    e->calls = 0;
    e->seconds = 0.0;
    return p->n_entries++;
}

static void record(op_profile *p, int key, int begin, int end) {
    if (p->n_calls == p->cap_calls) {
        p->cap_calls = p->cap_calls ? 2 * p->cap_calls : 1024;
        p->calls = invar_realloc(p->calls, (size_t)p->cap_calls * sizeof *p->calls, "profile calls");
    }
    p->calls[p->n_calls++] = (timed_call){key, begin, end};
}

// Times one call of the inner set's `op` with call_args; the rest are key_index's format and values.
#define TIMED(ops, op, call_args, ...)                          \
    do {                                                        \
        op_profile *p_ = profile_of(ops);                       \
        int key_ = key_index(p_, __VA_ARGS__);                  \
        int begin_ = mark(p_);                                  \
        p_->wrap.inner->op call_args;                           \
        record(p_, key_, begin_, mark(p_));                     \
    } while (0)
#define INNER(ops) (profile_of(ops)->wrap.inner)

// --- the wrapped ops -----------------------------------------------------------------------------

static void prof_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T, int D) {
    TIMED(ops, embedding, (INNER(ops), out, table, ids, T, D), "embedding T=%d D=%d", T, D);
}
static void prof_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w, int M,
                         int D, float eps) {
    TIMED(ops, rmsnorm, (INNER(ops), out, ld_out, x, ld_x, w, M, D, eps), "rmsnorm M=%d D=%d", M, D);
}
static void prof_gemm(ops_set *ops, const gemm_args *a) {
    if (a->batch > 1)
        TIMED(ops, gemm, (INNER(ops), a), "gemm %dx%d M=%d batch=%d%s", a->N, a->K, a->M, a->batch,
              a->y_f32 ? " f32" : "");
    else
        TIMED(ops, gemm, (INNER(ops), a), "gemm %dx%d M=%d%s", a->N, a->K, a->M, a->y_f32 ? " f32" : "");
}
static void prof_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R, const int32_t *pos,
                      const float *cos, const float *sin, bool interleave) {
    TIMED(ops, rope, (INNER(ops), x, ld_token, ld_head, T, H, R, pos, cos, sin, interleave), "rope T=%d H=%d", T, H);
}
static void prof_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n) {
    TIMED(ops, residual_add, (INNER(ops), x, y, n), "residual_add n=%ld", n);
}
static void prof_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I) {
    TIMED(ops, silu_mul, (INNER(ops), out, gate_up, M, I), "silu_mul M=%d I=%d", M, I);
}
static void prof_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv, const bf16 *k_pe,
                                long ld_k_pe, const int32_t *slot, int T, int L, int R) {
    TIMED(ops, kv_cache_write, (INNER(ops), kv_cache, c_kv, ld_c_kv, k_pe, ld_k_pe, slot, T, L, R),
          "kv_cache_write T=%d", T);
}
static void prof_mla_attention(ops_set *ops, const mla_attention_args *a) {
    TIMED(ops, mla_attention, (INNER(ops), a), "mla_attention T=%d H=%d seqs=%d", a->T, a->H, a->num_seqs);
}
static void prof_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    TIMED(ops, mha_prefill, (INNER(ops), a), "mha_prefill T=%d H=%d", a->T, a->H);
}
static void prof_merge_attention(ops_set *ops, const merge_attention_args *a) {
    TIMED(ops, merge_attention, (INNER(ops), a), "merge_attention T=%d H=%d", a->T, a->H);
}
static void prof_moe_route(ops_set *ops, const moe_route_args *a) {
    TIMED(ops, moe_route, (INNER(ops), a), "moe_route T=%d E=%d", a->T, a->E);
}
static void prof_moe_experts(ops_set *ops, const moe_experts_args *a) {
    TIMED(ops, moe_experts, (INNER(ops), a), "moe_experts T=%d k=%d E=%d I=%d", a->T, a->k, a->E, a->I);
}
static void prof_moe_combine(ops_set *ops, const moe_combine_args *a) {
    TIMED(ops, moe_combine, (INNER(ops), a), "moe_combine T=%d k=%d", a->T, a->k);
}
static void prof_logprobs(ops_set *ops, const logprobs_args *a) {
    TIMED(ops, logprobs, (INNER(ops), a), "logprobs R=%d V=%d", a->R, a->V);
}
static void prof_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    TIMED(ops, all_reduce, (INNER(ops), comm, buf, n), "all_reduce n=%ld", n);
}
static void prof_all_gather_columns(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld, long col_begin,
                                    long col_end) {
    TIMED(ops, all_gather_columns, (INNER(ops), comm, buf, rows, ld, col_begin, col_end),
          "all_gather_columns rows=%d", rows);
}
static void prof_bind_thread(ops_set *ops) { INNER(ops)->bind_thread(INNER(ops)); }
// The wrapper only: the inner set stays its owner's.
static void prof_destroy(ops_set *ops) { op_profile_destroy(profile_of(ops)); }

// --- the wrapper ---------------------------------------------------------------------------------

op_profile *op_profile_wrap(ops_set *inner) {
    op_profile *p = invar_calloc(1, sizeof *p, "the op profile");
#ifdef INVAR_CUDA
    if (strcmp(inner->device, "cuda") == 0) p->events = cuda_event_log_create(inner);
#endif
    ops_wrapper_init(&p->wrap, inner);
    ops_set *b = &p->wrap.base;
    b->destroy = prof_destroy;
    b->embedding = prof_embedding;
    b->rmsnorm = prof_rmsnorm;
    b->gemm = prof_gemm;
    b->rope = prof_rope;
    b->residual_add = prof_residual_add;
    b->silu_mul = prof_silu_mul;
    b->kv_cache_write = prof_kv_cache_write;
    b->mla_attention = prof_mla_attention;
    b->mha_prefill = prof_mha_prefill;
    b->merge_attention = prof_merge_attention;
    b->moe_route = prof_moe_route;
    b->moe_experts = prof_moe_experts;
    b->moe_combine = prof_moe_combine;
    b->logprobs = prof_logprobs;
    b->all_reduce = inner->all_reduce ? prof_all_reduce : NULL;
    b->all_gather_columns = inner->all_gather_columns ? prof_all_gather_columns : NULL;
    b->bind_thread = inner->bind_thread ? prof_bind_thread : NULL;
    b->open_group = NULL;  // one rank only
    return p;
}

ops_set *op_profile_set(op_profile *p) { return &p->wrap.base; }

// Forgets the calls not yet added to the totals (their marks and events are reused).
static void drop_pending(op_profile *p) {
    p->n_calls = 0;
    p->n_marks = 0;
#ifdef INVAR_CUDA
    if (p->events) cuda_event_log_clear(p->events);
#endif
}

const op_profile_entry *op_profile_totals(op_profile *p, int *n) {
    p->wrap.inner->sync(p->wrap.inner);
    for (int i = 0; i < p->n_calls; i++) {
        const timed_call *c = &p->calls[i];
        p->entries[c->key].calls++;
        p->entries[c->key].seconds += seconds_between(p, c->begin, c->end);
    }
    drop_pending(p);
    *n = p->n_entries;
    return p->entries;
}

void op_profile_reset(op_profile *p) {
    p->wrap.inner->sync(p->wrap.inner);
    drop_pending(p);
    p->n_entries = 0;
}

void op_profile_destroy(op_profile *p) {
    if (!p) return;
#ifdef INVAR_CUDA
    cuda_event_log_destroy(p->events);
#endif
    free(p->host_marks);
    free(p->calls);
    free(p->entries);
    free(p);
}
