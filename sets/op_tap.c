// sets/op_tap.c — the op tap (sets/op_tap.h).
//
// Each wrapped op call is forwarded first; then, for every row of the call that the followed
// request holds, the row's output is downloaded segment by segment through the inner set and
// hashed. A row's key is (layer, row kind, position, ordinal), the ordinal counting the calls
// of the layer that held the same position: two runs that take the same path through a layer
// give a row the same key whatever the batch, so their hashes line up.
#include "op_tap.h"

#include <stdarg.h>                  // va_list, va_start, va_end
#include <stdio.h>                   // vsnprintf
#include <stdlib.h>                  // free
#include <string.h>                  // memset, memcpy
#include <xxhash.h>                  // XXH3_*

#include "../common/check.h"         // invar_calloc, invar_realloc, invar_die
#include "ops_wrapper.h"              // ops_wrapper, ops_wrapper_init
#include "../kernels/moe_slices.h"     // moe_experts_by_slice, moe_combine_by_slice

// Where one part of a row's output lies: row t's segment s starts at element
// t * row_stride + s * segment_stride of base (or slots[t] * row_stride with slots).
typedef struct {
    const void *base;
    long row_stride;
    int segments;
    long segment_stride;
    long count;                  // elements per segment
    op_tap_type type;
    const int32_t *slots;        // the set's memory; NULL: rows in order
} tap_group;

struct op_tap {
    ops_wrapper wrap;            // first: the engine calls through wrap.base
    XXH3_state_t *hash;
    // the rows of the calls that follow
    int layer;
    op_tap_rows_kind kind;
    const int32_t *request, *position;
    int n_rows;
    int *ordinals[3];            // per kind, per position: calls of this layer so far
    int cap_ordinals[3];
    int follow;                  // the followed request, -1: none
    op_tap_entry *entries;
    int n_entries, cap_entries;
    long unplaced;
    struct expected_row { op_tap_entry e; int order; } *expected; // by key, then order recorded
    int n_expected;
    int mismatch;                // index into entries, -1: none
    bool capturing;
    uint64_t capture_key;
    int capture_occurrence, capture_seen;
    bool captured;
    op_tap_row row;
    unsigned char *scratch;
    size_t cap_scratch;
};

static op_tap *tap_of(ops_set *ops) { return (op_tap *)ops; }
#define INNER(ops) (tap_of(ops)->wrap.inner)

static int by_key(const void *a, const void *b) {
    const struct expected_row *x = a, *y = b;
    if (x->e.key != y->e.key) return x->e.key < y->e.key ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

// The first recorded expected entry of `key`, or NULL.
static const op_tap_entry *find_expected(const op_tap *p, uint64_t key) {
    int lo = 0, hi = p->n_expected;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (p->expected[mid].e.key < key) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->n_expected && p->expected[lo].e.key == key ? &p->expected[lo].e : NULL;
}

static size_t type_size(op_tap_type t) { return t == OP_TAP_BF16 ? 2 : 4; }

// The NaN and infinite elements among `count` of `type` (ids are never counted).
static long count_nonfinite(op_tap_type type, const unsigned char *bytes, long count) {
    long n = 0;
    for (long i = 0; i < count; i++) {
        if (type == OP_TAP_BF16) {
            uint16_t u;
            memcpy(&u, bytes + 2 * i, 2);
            n += (u & 0x7f80) == 0x7f80;
        } else if (type == OP_TAP_F32) {
            uint32_t u;
            memcpy(&u, bytes + 4 * i, 4);
            n += (u & 0x7f800000u) == 0x7f800000u;
        }
    }
    return n;
}

uint64_t op_tap_key(int layer, op_tap_rows_kind kind, int position, int ordinal) {
    return ((uint64_t)(uint16_t)(layer + 1) << 48) | ((uint64_t)(kind & 0xF) << 44) |
           ((uint64_t)(position & 0xFFFFFF) << 20) | (uint64_t)(ordinal & 0xFFFFF);
}

static int next_ordinal(op_tap *p, int position) {
    int k = (int)p->kind;
    if (position >= p->cap_ordinals[k]) {
        int cap = p->cap_ordinals[k] ? p->cap_ordinals[k] : 256;
        while (cap <= position) cap *= 2;
        p->ordinals[k] = invar_realloc(p->ordinals[k], (size_t)cap * sizeof(int), "tap ordinals");
        memset(p->ordinals[k] + p->cap_ordinals[k], 0,
               (size_t)(cap - p->cap_ordinals[k]) * sizeof(int));
        p->cap_ordinals[k] = cap;
    }
    return p->ordinals[k][position]++;
}

static unsigned char *scratch(op_tap *p, size_t bytes) {
    if (bytes > p->cap_scratch) {
        p->scratch = invar_realloc(p->scratch, bytes, "tap row buffer");
        p->cap_scratch = bytes;
    }
    return p->scratch;
}

// Appends a segment's bytes to the captured row, merged with the last segment of its type.
static void capture_segment(op_tap *p, op_tap_type type, const unsigned char *bytes, long count) {
    op_tap_row *r = &p->row;
    size_t n = (size_t)count * type_size(type);
    r->bytes = invar_realloc(r->bytes, r->n_bytes + n, "tap captured row");
    memcpy(r->bytes + r->n_bytes, bytes, n);
    r->n_bytes += n;
    if (r->n_segments > 0 && r->type[r->n_segments - 1] == type) {
        r->count[r->n_segments - 1] += count;
        return;
    }
    if (r->n_segments == OP_TAP_MAX_SEGMENTS)
        invar_die(INVAR_EXIT_SYSTEM, "op tap: a row of more than %d segments", OP_TAP_MAX_SEGMENTS);
    r->type[r->n_segments] = type;
    r->count[r->n_segments++] = count;
}

// Hashes row t of the call (and captures it when it is the one asked for); *nonfinite: its NaN
// and infinite elements.
static uint64_t hash_row(op_tap *p, const tap_group *g, int n_groups, int t, bool keep,
                         long *nonfinite) {
    *nonfinite = 0;
    if (XXH3_64bits_reset(p->hash) != XXH_OK) invar_die(INVAR_EXIT_SYSTEM, "op tap: XXH3 reset failed");
    for (int i = 0; i < n_groups; i++) {
        long row = t;
        if (g[i].slots) {
            int32_t slot;
            p->wrap.inner->download(p->wrap.inner, &slot, g[i].slots + t, sizeof slot);
            row = slot;
        }
        size_t es = type_size(g[i].type), n = (size_t)g[i].count * es;
        unsigned char *buf = scratch(p, n);
        for (int s = 0; s < g[i].segments; s++) {
            const unsigned char *src = (const unsigned char *)g[i].base +
                                       (size_t)(row * g[i].row_stride + s * g[i].segment_stride) * es;
            p->wrap.inner->download(p->wrap.inner, buf, src, n);
            if (XXH3_64bits_update(p->hash, buf, n) != XXH_OK)
                invar_die(INVAR_EXIT_SYSTEM, "op tap: XXH3 update failed");
            *nonfinite += count_nonfinite(g[i].type, buf, g[i].count);
            if (keep) capture_segment(p, g[i].type, buf, g[i].count);
        }
    }
    return XXH3_64bits_digest(p->hash);
}

// Records the followed request's rows of one call of `M` rows.
static void tap_call(op_tap *p, const char *op, int M, const tap_group *g, int n_groups,
                     const char *shape_fmt, ...) __attribute__((format(printf, 6, 7)));
static void tap_call(op_tap *p, const char *op, int M, const tap_group *g, int n_groups,
                     const char *shape_fmt, ...) {
    if (p->follow < 0 || M <= 0) return;
    if (M > p->n_rows) {
        p->unplaced++;
        return;
    }
    char shape[OP_TAP_SHAPE] = "";
    bool described = false;
    for (int t = 0; t < M; t++) {
        if (p->request[t] != p->follow) continue;
        if (!described) {
            p->wrap.inner->sync(p->wrap.inner);
            va_list ap;
            va_start(ap, shape_fmt);
            vsnprintf(shape, sizeof shape, shape_fmt, ap);
            va_end(ap);
            described = true;
        }
        int position = p->position[t], ordinal = next_ordinal(p, position);
        uint64_t key = op_tap_key(p->layer, p->kind, position, ordinal);
        bool keep = p->capturing && !p->captured && key == p->capture_key &&
                    p->capture_seen++ == p->capture_occurrence;
        long nonfinite;
        uint64_t h = hash_row(p, g, n_groups, t, keep, &nonfinite);
        if (keep) p->captured = true;
        if (p->n_expected > 0 && p->mismatch < 0) {
            const op_tap_entry *x = find_expected(p, key);
            if (x && (x->hash != h || strcmp(x->op, op) != 0)) {
                p->mismatch = p->n_entries;
                p->row.n_segments = 0;
                p->row.n_bytes = 0;
                hash_row(p, g, n_groups, t, true, &nonfinite);
                p->captured = true;
            }
        }
        if (p->n_entries == p->cap_entries) {
            p->cap_entries = p->cap_entries ? 2 * p->cap_entries : 1024;
            p->entries = invar_realloc(p->entries, (size_t)p->cap_entries * sizeof *p->entries,
                                       "tap entries");
        }
        op_tap_entry *e = &p->entries[p->n_entries++];
        *e = (op_tap_entry){.key = key, .layer = p->layer, .kind = p->kind,
                            .position = position, .ordinal = ordinal, .op = op, .M = M, .row = t,
                            .hash = h, .nonfinite = nonfinite};
        memcpy(e->shape, shape, sizeof shape);
    }
}

// An op over `n` elements of the announced rows (residual_add, all_reduce, TP-size invariance's
// fp32 steps): row t is the t-th of n / rows equal parts.
static void tap_flat(op_tap *p, const char *op, const void *x, long n, op_tap_type type) {
    if (p->follow < 0) return;
    if (p->n_rows <= 0 || n % p->n_rows != 0) {
        p->unplaced += n > 0;
        return;
    }
    long D = n / p->n_rows;
    tap_group g = {x, D, 1, 0, D, type, NULL};
    tap_call(p, op, p->n_rows, &g, 1, type == OP_TAP_F32 ? "D=%ld f32" : "D=%ld", D);
}

// --- the wrapped ops -----------------------------------------------------------------------------

static void tap_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T,
                          int D) {
    INNER(ops)->embedding(INNER(ops), out, table, ids, T, D);
    tap_group g = {out, D, 1, 0, D, OP_TAP_BF16, NULL};
    tap_call(tap_of(ops), "embedding", T, &g, 1, "D=%d", D);
}
static void tap_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                        const bf16 *w, int M, int D, float eps) {
    INNER(ops)->rmsnorm(INNER(ops), out, ld_out, x, ld_x, w, M, D, eps);
    tap_group g = {out, ld_out ? ld_out : D, 1, 0, D, OP_TAP_BF16, NULL};
    tap_call(tap_of(ops), "rmsnorm", M, &g, 1, "D=%d", D);
}
static void tap_gemm(ops_set *ops, const gemm_args *a) {
    INNER(ops)->gemm(INNER(ops), a);
    int batch = a->batch > 1 ? a->batch : 1;
    tap_group g = {a->y, a->ldy ? a->ldy : a->N, batch, a->stride_y, a->N,
                   a->y_f32 ? OP_TAP_F32 : OP_TAP_BF16, NULL};
    if (batch > 1)
        tap_call(tap_of(ops), "gemm", a->M, &g, 1, "N=%d K=%d batch=%d%s", a->N, a->K, batch,
                 a->y_f32 ? " f32" : "");
    else
        tap_call(tap_of(ops), "gemm", a->M, &g, 1, "N=%d K=%d%s", a->N, a->K,
                 a->y_f32 ? " f32" : "");
}
static void tap_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                     const int32_t *pos, const float *cos, const float *sin, bool interleave) {
    INNER(ops)->rope(INNER(ops), x, ld_token, ld_head, T, H, R, pos, cos, sin, interleave);
    tap_group g = {x, ld_token, H, ld_head, R, OP_TAP_BF16, NULL};
    tap_call(tap_of(ops), "rope", T, &g, 1, "H=%d R=%d", H, R);
}
static void tap_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n) {
    INNER(ops)->residual_add(INNER(ops), x, y, n);
    tap_flat(tap_of(ops), "residual_add", x, n, OP_TAP_BF16);
}
static void tap_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I) {
    INNER(ops)->silu_mul(INNER(ops), out, gate_up, M, I);
    tap_group g = {out, I, 1, 0, I, OP_TAP_BF16, NULL};
    tap_call(tap_of(ops), "silu_mul", M, &g, 1, "I=%d", I);
}
static void tap_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv,
                               const bf16 *k_pe, long ld_k_pe, const int32_t *slot, int T, int L,
                               int R) {
    INNER(ops)->kv_cache_write(INNER(ops), kv_cache, c_kv, ld_c_kv, k_pe, ld_k_pe, slot, T, L, R);
    tap_group g = {kv_cache, L + R, 1, 0, L + R, OP_TAP_BF16, slot};
    tap_call(tap_of(ops), "kv_cache_write", T, &g, 1, "L=%d R=%d", L, R);
}
static void tap_mla_attention(ops_set *ops, const mla_attention_args *a) {
    INNER(ops)->mla_attention(INNER(ops), a);
    tap_group g = {a->out, a->ld_out, 1, 0, (long)a->H * a->L, OP_TAP_BF16, NULL};
    tap_call(tap_of(ops), "mla_attention", a->T, &g, 1, "H=%d L=%d R=%d", a->H, a->L, a->R);
}
static void tap_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    INNER(ops)->mha_prefill(INNER(ops), a);
    tap_group g[2] = {{a->out, a->ld_out, 1, 0, (long)a->H * a->v, OP_TAP_BF16, NULL},
                      {a->lse, a->H, 1, 0, a->H, OP_TAP_F32, NULL}};
    tap_call(tap_of(ops), "mha_prefill", a->T, g, 2, "H=%d nope=%d R=%d v=%d", a->H, a->nope,
             a->R, a->v);
}
static void tap_merge_attention(ops_set *ops, const merge_attention_args *a) {
    INNER(ops)->merge_attention(INNER(ops), a);
    tap_group g = {a->out, a->ld, 1, 0, (long)a->H * a->v, OP_TAP_BF16, NULL};
    tap_call(tap_of(ops), "merge_attention", a->T, &g, 1, "H=%d v=%d", a->H, a->v);
}
static void tap_moe_route(ops_set *ops, const moe_route_args *a) {
    INNER(ops)->moe_route(INNER(ops), a);
    tap_group g[2] = {{a->topk_ids, a->k, 1, 0, a->k, OP_TAP_I32, NULL},
                      {a->topk_weights, a->k, 1, 0, a->k, OP_TAP_F32, NULL}};
    tap_call(tap_of(ops), "moe_route", a->T, g, 2, "E=%d k=%d D=%d", a->E, a->k, a->D);
}
// With out_f32 (TP-size invariance) the fp32 rows are the output: out is not written, and
// hashing it would compare whatever an earlier op left there.
static void tap_moe_experts(ops_set *ops, const moe_experts_args *a) {
    if (moe_experts_by_slice(ops, a, tap_moe_experts)) return;  // a tap call a slice
    INNER(ops)->moe_experts(INNER(ops), a);
    long row = (long)a->k * a->D;  // token t's k outputs
    tap_group g = {a->out, row, 1, 0, row, OP_TAP_BF16, NULL};
    if (a->out_f32) g = (tap_group){a->out_f32, row, 1, 0, row, OP_TAP_F32, NULL};
    tap_call(tap_of(ops), "moe_experts", a->T, &g, 1, "E=%d k=%d D=%d I=%d%s", a->E, a->k, a->D,
             a->I, a->out_f32 ? " f32" : "");
}
static void tap_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, tap_moe_combine)) return;
    INNER(ops)->moe_combine(INNER(ops), a);
    tap_group g = {a->out, a->D, 1, 0, a->D, OP_TAP_BF16, NULL};
    if (a->out_f32) g = (tap_group){a->out_f32, a->D, 1, 0, a->D, OP_TAP_F32, NULL};
    tap_call(tap_of(ops), "moe_combine", a->T, &g, 1, "k=%d D=%d%s", a->k, a->D,
             a->out_f32 ? " f32" : "");
}
static void tap_logprobs(ops_set *ops, const logprobs_args *a) {
    INNER(ops)->logprobs(INNER(ops), a);
    tap_group g[4] = {{a->token_logprob, 1, 1, 0, 1, OP_TAP_F32, NULL},
                      {a->token, 1, 1, 0, 1, OP_TAP_I32, NULL},
                      {a->topk_logprobs, a->k, 1, 0, a->k, OP_TAP_F32, NULL},
                      {a->topk_ids, a->k, 1, 0, a->k, OP_TAP_I32, NULL}};
    tap_call(tap_of(ops), "logprobs", a->R, g, a->k > 0 ? 4 : 2, "V=%d k=%d", a->V, a->k);
}
static void tap_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    INNER(ops)->all_reduce(INNER(ops), comm, buf, n);
    tap_flat(tap_of(ops), "all_reduce", buf, n, OP_TAP_BF16);
}
static void tap_all_reduce_f32_tree(ops_set *ops, tp_comm *comm, float *buf, long n) {
    INNER(ops)->all_reduce_f32_tree(INNER(ops), comm, buf, n);
    tap_flat(tap_of(ops), "all_reduce_f32_tree", buf, n, OP_TAP_F32);
}
static void tap_add_f32(ops_set *ops, float *x, const float *y, long n) {
    INNER(ops)->add_f32(INNER(ops), x, y, n);
    tap_flat(tap_of(ops), "add_f32", x, n, OP_TAP_F32);
}
static void tap_sum_slices_f32(ops_set *ops, float *parts, int n, long len) {
    INNER(ops)->sum_slices_f32(INNER(ops), parts, n, len);
    tap_flat(tap_of(ops), "sum_slices_f32", parts, len, OP_TAP_F32);
}
static void tap_round_to_bf16(ops_set *ops, bf16 *out, const float *x, long n) {
    INNER(ops)->round_to_bf16(INNER(ops), out, x, n);
    tap_flat(tap_of(ops), "round_to_bf16", out, n, OP_TAP_BF16);
}
static void tap_all_gather_columns(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld,
                                   long col_begin, long col_end) {
    INNER(ops)->all_gather_columns(INNER(ops), comm, buf, rows, ld, col_begin, col_end);
    tap_group g = {buf, ld, 1, 0, ld, OP_TAP_F32, NULL};
    tap_call(tap_of(ops), "all_gather_columns", rows, &g, 1, "columns=%ld", ld);
}
static void tap_bind_thread(ops_set *ops) { INNER(ops)->bind_thread(INNER(ops)); }
static void tap_destroy(ops_set *ops) { op_tap_destroy(tap_of(ops)); }

// The group's ranks as the inner sets see them: a tapped rank is its inner set there.
static void tap_open_group(ops_set *const *ranks, int T, tp_comm_group *g) {
    ops_set **inner = invar_calloc((size_t)T, sizeof *inner, "tap group ranks");
    for (int r = 0; r < T; r++) inner[r] = ranks[r]->destroy == tap_destroy ? INNER(ranks[r]) : ranks[r];
    inner[0]->open_group(inner, T, g);
    free(inner);
}

// --- the tap -------------------------------------------------------------------------------------

op_tap *op_tap_wrap(ops_set *inner) {
    op_tap *p = invar_calloc(1, sizeof *p, "the op tap");
    p->follow = -1;
    p->mismatch = -1;
    p->hash = XXH3_createState();
    if (!p->hash) invar_die(INVAR_EXIT_SYSTEM, "op tap: out of memory for the XXH3 state");
    ops_wrapper_init(&p->wrap, inner);
    ops_set *b = &p->wrap.base;
    b->destroy = tap_destroy;
    b->embedding = tap_embedding;
    b->rmsnorm = tap_rmsnorm;
    b->gemm = tap_gemm;
    b->rope = tap_rope;
    b->residual_add = tap_residual_add;
    b->silu_mul = tap_silu_mul;
    b->kv_cache_write = tap_kv_cache_write;
    b->mla_attention = tap_mla_attention;
    b->mha_prefill = tap_mha_prefill;
    b->merge_attention = tap_merge_attention;
    b->moe_route = tap_moe_route;
    b->moe_experts = tap_moe_experts;
    b->moe_combine = tap_moe_combine;
    b->logprobs = tap_logprobs;
    b->all_reduce = inner->all_reduce ? tap_all_reduce : NULL;
    b->all_reduce_f32_tree = inner->all_reduce_f32_tree ? tap_all_reduce_f32_tree : NULL;
    b->add_f32 = inner->add_f32 ? tap_add_f32 : NULL;
    b->round_to_bf16 = inner->round_to_bf16 ? tap_round_to_bf16 : NULL;
    b->sum_slices_f32 = inner->sum_slices_f32 ? tap_sum_slices_f32 : NULL;
    b->all_gather_columns = inner->all_gather_columns ? tap_all_gather_columns : NULL;
    b->bind_thread = inner->bind_thread ? tap_bind_thread : NULL;
    b->open_group = inner->open_group ? tap_open_group : NULL;
    return p;
}

ops_set *op_tap_set(op_tap *t) { return &t->wrap.base; }

void op_tap_destroy(op_tap *t) {
    if (!t) return;
    XXH3_freeState(t->hash);
    for (int k = 0; k < 3; k++) free(t->ordinals[k]);
    free(t->entries);
    free(t->expected);
    free(t->row.bytes);
    free(t->scratch);
    free(t);
}

void op_tap_rows(op_tap *t, int layer, op_tap_rows_kind kind, const int32_t *request,
                 const int32_t *position, int n) {
    if (layer != t->layer || layer == -1)
        for (int k = 0; k < 3; k++)
            if (t->ordinals[k]) memset(t->ordinals[k], 0, (size_t)t->cap_ordinals[k] * sizeof(int));
    t->layer = layer;
    t->kind = kind;
    t->request = request;
    t->position = position;
    t->n_rows = n;
}

void op_tap_follow(op_tap *t, int request) {
    t->follow = request;
    t->n_entries = 0;
    t->unplaced = 0;
    t->capturing = false;
    t->captured = false;
    t->n_expected = 0;
    t->mismatch = -1;
}

void op_tap_expect(op_tap *t, const op_tap_entry *expected, int n) {
    t->expected = invar_realloc(t->expected, (size_t)(n > 0 ? n : 1) * sizeof *t->expected,
                                "tap expected rows");
    for (int i = 0; i < n; i++) t->expected[i] = (struct expected_row){expected[i], i};
    qsort(t->expected, (size_t)n, sizeof *t->expected, by_key);
    t->n_expected = n;
    t->mismatch = -1;
    t->captured = false;
}

int op_tap_first_mismatch(const op_tap *t) { return t->mismatch; }

const op_tap_entry *op_tap_expected(const op_tap *t, uint64_t key) {
    return find_expected(t, key);
}

const op_tap_entry *op_tap_entries(const op_tap *t, int *n) {
    *n = t->n_entries;
    return t->entries;
}

long op_tap_unplaced(const op_tap *t) { return t->unplaced; }

void op_tap_capture(op_tap *t, uint64_t key, int occurrence) {
    t->capturing = true;
    t->capture_key = key;
    t->capture_occurrence = occurrence;
    t->capture_seen = 0;
    t->captured = false;
    t->row.n_segments = 0;
    t->row.n_bytes = 0;
}

const op_tap_row *op_tap_captured(const op_tap *t) { return t->captured ? &t->row : NULL; }
