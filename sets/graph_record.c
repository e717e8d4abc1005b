// sets/graph_record.c — recorded op calls as graphs (sets/graph_record.h).
#include "graph_record.h"

#include <stdlib.h>           // free, realloc
#include <string.h>           // memset, strcmp

#include "../common/check.h"  // invar_calloc, invar_die, INVAR_EXIT_SYSTEM
#include "ops_wrapper.h"      // ops_wrapper, ops_wrapper_init

// ---------------------------------------------------------------------------------------------
// One recorded call: which op, and its arguments as they were
// ---------------------------------------------------------------------------------------------

typedef enum {
    CALL_EMBEDDING, CALL_RMSNORM, CALL_GEMM, CALL_ROPE, CALL_RESIDUAL_ADD, CALL_SILU_MUL,
    CALL_KV_CACHE_WRITE, CALL_MLA_ATTENTION, CALL_MHA_PREFILL, CALL_MERGE_ATTENTION,
    CALL_MOE_ROUTE, CALL_MOE_EXPERTS, CALL_MOE_COMBINE, CALL_LOGPROBS, CALL_ADD_F32,
    CALL_ROUND_TO_BF16, CALL_SUM_SLICES_F32, CALL_ALL_REDUCE, CALL_ALL_REDUCE_F32_TREE,
    CALL_ALL_GATHER_COLUMNS,
} call_kind;

// The ops whose arguments are not one struct, as structs.
typedef struct { bf16 *out; const bf16 *table; const int32_t *ids; int T, D; } embedding_call;
typedef struct {
    bf16 *out;
    long ld_out;
    const bf16 *x;
    long ld_x;
    const bf16 *w;
    int M, D;
    float eps;
} rmsnorm_call;
typedef struct {
    bf16 *x;
    long ld_token, ld_head;
    int T, H, R;
    const int32_t *pos;
    const float *cos, *sin;
    bool interleave;
} rope_call;
typedef struct { bf16 *x; const bf16 *y; long n; } residual_add_call;
typedef struct { bf16 *out; const bf16 *gate_up; int M, I; } silu_mul_call;
typedef struct {
    bf16 *cache;
    const bf16 *c_kv, *k_pe;
    long ld_c_kv, ld_k_pe;
    const int32_t *slot;
    int T, L, R;
} kv_write_call;
typedef struct { float *x; const float *y; long n; } add_f32_call;
typedef struct { bf16 *out; const float *x; long n; } round_call;
typedef struct { float *parts; int n; long len; } sum_slices_call;
typedef struct { tp_comm *comm; bf16 *buf; long n; } all_reduce_call;
typedef struct { tp_comm *comm; float *buf; long n; } all_reduce_f32_call;
typedef struct {
    tp_comm *comm;
    float *buf;
    int rows;
    long ld, col_begin, col_end;
} all_gather_call;

typedef struct {
    call_kind kind;
    union {
        gemm_args gemm;
        mla_attention_args mla;
        mha_prefill_args mha;
        merge_attention_args merge;
        moe_route_args route;
        moe_experts_args experts;
        moe_combine_args combine;
        logprobs_args logprobs;
        embedding_call embedding;
        rmsnorm_call rmsnorm;
        rope_call rope;
        residual_add_call residual_add;
        silu_mul_call silu_mul;
        kv_write_call kv_write;
        add_f32_call add_f32;
        round_call round;
        sum_slices_call sum_slices;
        all_reduce_call all_reduce;
        all_reduce_f32_call all_reduce_f32;
        all_gather_call all_gather;
    } a;
} recorded_call;

struct ops_graph {
    recorded_call *calls;
    int n, cap;
};

typedef struct {
    ops_wrapper wrap;         // first: the engine calls through wrap.base
    ops_graph *recording;     // the graph being captured; NULL: calls run
} graph_record;

static graph_record *rec_of(ops_set *ops) { return (graph_record *)ops; }
// The inner set, with the fingerprint sink whoever checks them attached to this one.
static ops_set *inner_of(ops_set *ops) {
    ops_set *in = rec_of(ops)->wrap.inner;
    in->fingerprints = ops->fingerprints;
    return in;
}

// The call slot to fill when capturing (NULL: run the call now).
static recorded_call *record(ops_set *ops, call_kind kind) {
    ops_graph *g = rec_of(ops)->recording;
    if (!g) return NULL;
    if (g->n == g->cap) {  // doubled: a step's few hundred calls, a handful of reallocs
        int cap = g->cap ? 2 * g->cap : 256;
        recorded_call *calls = realloc(g->calls, (size_t)cap * sizeof *calls);
        if (!calls) invar_die(INVAR_EXIT_SYSTEM, "out of memory recording a graph of %d calls", cap);
        g->calls = calls;
        g->cap = cap;
    }
    recorded_call *c = &g->calls[g->n++];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    return c;
}

// ---------------------------------------------------------------------------------------------
// The ops: recorded while capturing, run on the inner set otherwise
// ---------------------------------------------------------------------------------------------

static void rec_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T, int D) {
    recorded_call *c = record(ops, CALL_EMBEDDING);
    if (!c) {
        inner_of(ops)->embedding(inner_of(ops), out, table, ids, T, D);
        return;
    }
    c->a.embedding = (embedding_call){out, table, ids, T, D};
}

static void rec_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w,
                        int M, int D, float eps) {
    recorded_call *c = record(ops, CALL_RMSNORM);
    if (!c) {
        inner_of(ops)->rmsnorm(inner_of(ops), out, ld_out, x, ld_x, w, M, D, eps);
        return;
    }
    c->a.rmsnorm = (rmsnorm_call){out, ld_out, x, ld_x, w, M, D, eps};
}

static void rec_gemm(ops_set *ops, const gemm_args *a) {
    recorded_call *c = record(ops, CALL_GEMM);
    if (!c) {
        inner_of(ops)->gemm(inner_of(ops), a);
        return;
    }
    c->a.gemm = *a;
}

static void rec_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                     const int32_t *pos, const float *cos, const float *sin, bool interleave) {
    recorded_call *c = record(ops, CALL_ROPE);
    if (!c) {
        inner_of(ops)->rope(inner_of(ops), x, ld_token, ld_head, T, H, R, pos, cos, sin, interleave);
        return;
    }
    c->a.rope = (rope_call){x, ld_token, ld_head, T, H, R, pos, cos, sin, interleave};
}

static void rec_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n) {
    recorded_call *c = record(ops, CALL_RESIDUAL_ADD);
    if (!c) {
        inner_of(ops)->residual_add(inner_of(ops), x, y, n);
        return;
    }
    c->a.residual_add = (residual_add_call){x, y, n};
}

static void rec_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I) {
    recorded_call *c = record(ops, CALL_SILU_MUL);
    if (!c) {
        inner_of(ops)->silu_mul(inner_of(ops), out, gate_up, M, I);
        return;
    }
    c->a.silu_mul = (silu_mul_call){out, gate_up, M, I};
}

static void rec_kv_cache_write(ops_set *ops, bf16 *cache, const bf16 *c_kv, long ld_c_kv, const bf16 *k_pe,
                               long ld_k_pe, const int32_t *slot, int T, int L, int R) {
    recorded_call *c = record(ops, CALL_KV_CACHE_WRITE);
    if (!c) {
        inner_of(ops)->kv_cache_write(inner_of(ops), cache, c_kv, ld_c_kv, k_pe, ld_k_pe, slot, T, L, R);
        return;
    }
    c->a.kv_write = (kv_write_call){.cache = cache, .c_kv = c_kv, .ld_c_kv = ld_c_kv, .k_pe = k_pe,
                                    .ld_k_pe = ld_k_pe, .slot = slot, .T = T, .L = L, .R = R};
}

static void rec_mla_attention(ops_set *ops, const mla_attention_args *a) {
    recorded_call *c = record(ops, CALL_MLA_ATTENTION);
    if (!c) {
        inner_of(ops)->mla_attention(inner_of(ops), a);
        return;
    }
    c->a.mla = *a;
}

static void rec_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    recorded_call *c = record(ops, CALL_MHA_PREFILL);
    if (!c) {
        inner_of(ops)->mha_prefill(inner_of(ops), a);
        return;
    }
    c->a.mha = *a;
}

static void rec_merge_attention(ops_set *ops, const merge_attention_args *a) {
    recorded_call *c = record(ops, CALL_MERGE_ATTENTION);
    if (!c) {
        inner_of(ops)->merge_attention(inner_of(ops), a);
        return;
    }
    c->a.merge = *a;
}

static void rec_moe_route(ops_set *ops, const moe_route_args *a) {
    recorded_call *c = record(ops, CALL_MOE_ROUTE);
    if (!c) {
        inner_of(ops)->moe_route(inner_of(ops), a);
        return;
    }
    c->a.route = *a;
}

static void rec_moe_experts(ops_set *ops, const moe_experts_args *a) {
    recorded_call *c = record(ops, CALL_MOE_EXPERTS);
    if (!c) {
        inner_of(ops)->moe_experts(inner_of(ops), a);
        return;
    }
    c->a.experts = *a;
}

static void rec_moe_combine(ops_set *ops, const moe_combine_args *a) {
    recorded_call *c = record(ops, CALL_MOE_COMBINE);
    if (!c) {
        inner_of(ops)->moe_combine(inner_of(ops), a);
        return;
    }
    c->a.combine = *a;
}

static void rec_logprobs(ops_set *ops, const logprobs_args *a) {
    recorded_call *c = record(ops, CALL_LOGPROBS);
    if (!c) {
        inner_of(ops)->logprobs(inner_of(ops), a);
        return;
    }
    c->a.logprobs = *a;
}

static void rec_add_f32(ops_set *ops, float *x, const float *y, long n) {
    recorded_call *c = record(ops, CALL_ADD_F32);
    if (!c) {
        inner_of(ops)->add_f32(inner_of(ops), x, y, n);
        return;
    }
    c->a.add_f32 = (add_f32_call){x, y, n};
}

static void rec_round_to_bf16(ops_set *ops, bf16 *out, const float *x, long n) {
    recorded_call *c = record(ops, CALL_ROUND_TO_BF16);
    if (!c) {
        inner_of(ops)->round_to_bf16(inner_of(ops), out, x, n);
        return;
    }
    c->a.round = (round_call){out, x, n};
}

static void rec_sum_slices_f32(ops_set *ops, float *parts, int n, long len) {
    recorded_call *c = record(ops, CALL_SUM_SLICES_F32);
    if (!c) {
        inner_of(ops)->sum_slices_f32(inner_of(ops), parts, n, len);
        return;
    }
    c->a.sum_slices = (sum_slices_call){parts, n, len};
}

// ---------------------------------------------------------------------------------------------
// What a capture must not do: move data to or from the host, or wait
// ---------------------------------------------------------------------------------------------

static void refuse_in_capture(ops_set *ops, const char *op) {
    if (rec_of(ops)->recording)
        invar_die(INVAR_EXIT_SYSTEM, "%s during a graph capture: a CUDA graph cannot hold it (an "
                  "engine bug: a graph step must stay on the device)", op);
}

static void rec_upload(ops_set *ops, void *dst, const void *src, size_t bytes) {
    refuse_in_capture(ops, "upload");
    inner_of(ops)->upload(inner_of(ops), dst, src, bytes);
}
static void rec_upload_async(ops_set *ops, void *dst, const void *src, size_t bytes) {
    refuse_in_capture(ops, "upload_async");
    inner_of(ops)->upload_async(inner_of(ops), dst, src, bytes);
}
static void rec_download(ops_set *ops, void *dst, const void *src, size_t bytes) {
    refuse_in_capture(ops, "download");
    inner_of(ops)->download(inner_of(ops), dst, src, bytes);
}
static void rec_sync(ops_set *ops) {
    refuse_in_capture(ops, "sync");
    inner_of(ops)->sync(inner_of(ops));
}
// Collectives are recorded like the ops: every rank of a group captures and replays its own
// graph in the same steps, so each replayed collective meets its peers' (a CUDA set would need
// its collectives captured the same way, which its host-reading all-gather prevents).
static void rec_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    recorded_call *c = record(ops, CALL_ALL_REDUCE);
    if (!c) {
        inner_of(ops)->all_reduce(inner_of(ops), comm, buf, n);
        return;
    }
    c->a.all_reduce = (all_reduce_call){comm, buf, n};
}

static void rec_all_reduce_f32_tree(ops_set *ops, tp_comm *comm, float *buf, long n) {
    recorded_call *c = record(ops, CALL_ALL_REDUCE_F32_TREE);
    if (!c) {
        inner_of(ops)->all_reduce_f32_tree(inner_of(ops), comm, buf, n);
        return;
    }
    c->a.all_reduce_f32 = (all_reduce_f32_call){comm, buf, n};
}

static void rec_all_gather_columns(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld, long col_begin,
                                   long col_end) {
    recorded_call *c = record(ops, CALL_ALL_GATHER_COLUMNS);
    if (!c) {
        inner_of(ops)->all_gather_columns(inner_of(ops), comm, buf, rows, ld, col_begin, col_end);
        return;
    }
    c->a.all_gather = (all_gather_call){comm, buf, rows, ld, col_begin, col_end};
}

// ---------------------------------------------------------------------------------------------
// Graphs
// ---------------------------------------------------------------------------------------------

static ops_graph *rec_graph_capture(ops_set *ops, void (*body)(void *ctx), void *ctx) {
    graph_record *r = rec_of(ops);
    if (r->recording) invar_die(INVAR_EXIT_SYSTEM, "graph_capture inside a graph capture");
    r->recording = invar_calloc(1, sizeof *r->recording, "a recorded graph");
    body(ctx);
    ops_graph *g = r->recording;
    r->recording = NULL;
    return g;
}

static void replay(ops_set *in, const recorded_call *c) {
    switch (c->kind) {
    case CALL_EMBEDDING: {
        const embedding_call *e = &c->a.embedding;
        in->embedding(in, e->out, e->table, e->ids, e->T, e->D);
        break;
    }
    case CALL_RMSNORM: {
        const rmsnorm_call *n = &c->a.rmsnorm;
        in->rmsnorm(in, n->out, n->ld_out, n->x, n->ld_x, n->w, n->M, n->D, n->eps);
        break;
    }
    case CALL_GEMM: in->gemm(in, &c->a.gemm); break;
    case CALL_ROPE: {
        const rope_call *r = &c->a.rope;
        in->rope(in, r->x, r->ld_token, r->ld_head, r->T, r->H, r->R, r->pos, r->cos, r->sin, r->interleave);
        break;
    }
    case CALL_RESIDUAL_ADD: {
        const residual_add_call *r = &c->a.residual_add;
        in->residual_add(in, r->x, r->y, r->n);
        break;
    }
    case CALL_SILU_MUL: {
        const silu_mul_call *m = &c->a.silu_mul;
        in->silu_mul(in, m->out, m->gate_up, m->M, m->I);
        break;
    }
    case CALL_KV_CACHE_WRITE: {
        const kv_write_call *w = &c->a.kv_write;
        in->kv_cache_write(in, w->cache, w->c_kv, w->ld_c_kv, w->k_pe, w->ld_k_pe, w->slot, w->T, w->L, w->R);
        break;
    }
    case CALL_MLA_ATTENTION: in->mla_attention(in, &c->a.mla); break;
    case CALL_MHA_PREFILL: in->mha_prefill(in, &c->a.mha); break;
    case CALL_MERGE_ATTENTION: in->merge_attention(in, &c->a.merge); break;
    case CALL_MOE_ROUTE: in->moe_route(in, &c->a.route); break;
    case CALL_MOE_EXPERTS: in->moe_experts(in, &c->a.experts); break;
    case CALL_MOE_COMBINE: in->moe_combine(in, &c->a.combine); break;
    case CALL_LOGPROBS: in->logprobs(in, &c->a.logprobs); break;
    case CALL_ADD_F32: in->add_f32(in, c->a.add_f32.x, c->a.add_f32.y, c->a.add_f32.n); break;
    case CALL_ROUND_TO_BF16: in->round_to_bf16(in, c->a.round.out, c->a.round.x, c->a.round.n); break;
    case CALL_SUM_SLICES_F32: {
        const sum_slices_call *p = &c->a.sum_slices;
        in->sum_slices_f32(in, p->parts, p->n, p->len);
        break;
    }
    case CALL_ALL_REDUCE: in->all_reduce(in, c->a.all_reduce.comm, c->a.all_reduce.buf, c->a.all_reduce.n); break;
    case CALL_ALL_REDUCE_F32_TREE: {
        const all_reduce_f32_call *r = &c->a.all_reduce_f32;
        in->all_reduce_f32_tree(in, r->comm, r->buf, r->n);
        break;
    }
    case CALL_ALL_GATHER_COLUMNS: {
        const all_gather_call *g = &c->a.all_gather;
        in->all_gather_columns(in, g->comm, g->buf, g->rows, g->ld, g->col_begin, g->col_end);
        break;
    }
    }
}

// Never stale: a CPU set's buffers are taken at each call, and the replay makes every call anew.
static bool rec_graph_launch(ops_set *ops, ops_graph *g) {
    for (int i = 0; i < g->n; i++) replay(inner_of(ops), &g->calls[i]);
    return true;
}

static void rec_graph_release(ops_set *ops, ops_graph *g) {
    (void)ops;
    if (!g) return;
    free(g->calls);
    free(g);
}

// ---------------------------------------------------------------------------------------------
// The set
// ---------------------------------------------------------------------------------------------

static void rec_destroy(ops_set *ops) {
    ops_set *inner = inner_of(ops);
    free(rec_of(ops));
    inner->destroy(inner);
}

ops_set *graph_record_on_cpu(ops_set *ops) {
    return strcmp(ops->device, "cpu") == 0 && !ops->graph_capture ? graph_record_wrap(ops) : ops;
}

ops_set *graph_record_wrap(ops_set *inner) {
    graph_record *r = invar_calloc(1, sizeof *r, "a graph-recording kernel set");
    ops_wrapper_init(&r->wrap, inner);
    ops_set *o = &r->wrap.base;
    o->destroy = rec_destroy;
    o->upload = rec_upload;
    o->upload_async = inner->upload_async ? rec_upload_async : NULL;
    o->download = rec_download;
    o->sync = rec_sync;
    o->embedding = rec_embedding;
    o->rmsnorm = rec_rmsnorm;
    o->gemm = rec_gemm;
    o->rope = rec_rope;
    o->residual_add = rec_residual_add;
    o->silu_mul = rec_silu_mul;
    o->kv_cache_write = rec_kv_cache_write;
    o->mla_attention = rec_mla_attention;
    o->mha_prefill = rec_mha_prefill;
    o->merge_attention = rec_merge_attention;
    o->moe_route = rec_moe_route;
    o->moe_experts = rec_moe_experts;
    o->moe_combine = rec_moe_combine;
    o->logprobs = rec_logprobs;
    o->add_f32 = inner->add_f32 ? rec_add_f32 : NULL;
    o->round_to_bf16 = inner->round_to_bf16 ? rec_round_to_bf16 : NULL;
    o->sum_slices_f32 = inner->sum_slices_f32 ? rec_sum_slices_f32 : NULL;
    o->all_reduce = inner->all_reduce ? rec_all_reduce : NULL;
    o->all_reduce_f32_tree = inner->all_reduce_f32_tree ? rec_all_reduce_f32_tree : NULL;
    o->all_gather_columns = inner->all_gather_columns ? rec_all_gather_columns : NULL;
    o->graph_capture = rec_graph_capture;
    o->graph_launch = rec_graph_launch;
    o->graph_release = rec_graph_release;
    o->graph_collectives = true;
    return o;
}
