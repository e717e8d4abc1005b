// engine/engine.c — the MLA inference engine (engine/engine.h): weights on the kernel set's
// device, the paged latent KV cache, and the DeepSeek-V2/V3 forward pass, read top to bottom in
// engine_forward(). Every kernel is called through the ops_set, so the same code runs every
// kernel set on every device.
#include "engine.h"

#include <stdio.h>               // snprintf
#include <stdlib.h>              // free, realloc
#include <string.h>              // memset, memcpy

#include "../common/check.h"    // invar_die, invar_malloc, invar_calloc
#include "kv_cache.h"            // kv_cache_*
#include "scheduler.h"           // scheduler_*, sched_item
#include "tp_part.h"             // tp_part, tp_range, tp_part_make, tp_part_local_config
#include "tp_slices.h"           // tp_slices, tp_slices_make, tp_slices_uniform, tp_slices_gate_up, ...
#include "../common/hash.h"             // invar_mix64

// ---------------------------------------------------------------------------------------------
// Weights, in the layout the forward pass wants (all device pointers)
// ---------------------------------------------------------------------------------------------

typedef struct {
    bf16 *input_norm, *post_attention_norm;
    bf16 *q_proj;                // [H*(nope+rope), D], or NULL with q_lora
    bf16 *q_a_proj, *q_a_norm, *q_b_proj;
    bf16 *kv_a_proj;             // [L+R, D]
    bf16 *kv_a_norm;             // [L]
    bf16 *w_uk_t;                // [H, L, nope]: kv_b_proj's key half, transposed for absorption
    bf16 *kv_b_proj;             // [H*(nope+v), L]: the value half is used in place
    bf16 *o_proj;                // [D, H*v]
    bool moe;
    bf16 *mlp_gate_up, *mlp_down;        // dense: [2I, D], [D, I]
    bf16 *router;                        // [E, D]
    float *router_bias;                  // [E] or NULL
    bf16 *experts_gate_up, *experts_down; // [E, 2Im, D], [E, D, Im]
    bf16 *shared_gate_up, *shared_down;   // [2Is, D], [D, Is] or NULL
} layer_weights;

// Activations for one step of at most max_num_batched_tokens tokens.
typedef struct {
    bf16 *h;                     // [T, D] residual stream
    bf16 *x;                     // [T, D] normed input of a sublayer
    bf16 *q_a;                   // [T, q_lora]
    bf16 *q_a_normed;            // [T, q_lora]
    bf16 *q;                     // [T, H, nope+rope]
    bf16 *kv_a;                  // [T, L+R]
    bf16 *c_kv;                  // [T, L]
    bf16 *q_lat;                 // [T, H, L]
    bf16 *attn_lat;              // [T, H, L]
    bf16 *attn_v;                // [T, H, v]
    bf16 *sublayer_out;          // [T, D]
    bf16 *gate_up;               // [T, 2 * max(I, Is)]
    bf16 *act;                   // [T, max(I, Is)]
    bf16 *shared_out;            // [T, D]
    int32_t *topk_ids;           // [T, k]
    float *topk_weights;         // [T, k]
    bf16 *expert_out;            // [T*k, D]
    bf16 *final_rows;            // [S, D] rows whose logits are needed
    bf16 *final_normed;          // [S, D]
    float *logits;               // [S, V]
    // split prefill: the latent rows of every key a prefill item attends to, decompressed
    bf16 *key_latent;            // [max_keys, L+R]
    bf16 *key_kv;                // [max_keys, H*(nope+v)]
    bf16 *attn_new, *attn_ctx;   // [T, H, v]
    float *lse_new, *lse_ctx;    // [T, H]
} activations;

// A step's metadata and its sampling results on the device: views into two buffers packed anew
// each step (pack_step), so that a step makes one upload and one download, not one an array (on a
// GPU each is a host round trip). Token rows [T], sequences [n] (block_table [n, blocks a
// sequence]), sample rows [S], split prefill keys [keys] and prefill rows' key ranges.
typedef struct {
    int32_t *ids, *pos, *slot, *token_seq, *block_table, *seq_lens, *sample_rows;
    int32_t *local_ids;          // vocabulary-parallel: this rank's row of each token, or its
                                 // zero row (ids itself at T = 1)
    float *temperature;
    uint64_t *noise_seed;
    int32_t *sample_pos;
    int32_t *gather_slots;
    int32_t *new_begin, *new_end, *ctx_begin, *ctx_end;
    // sampling results [S] and [S, top_k]
    int32_t *token, *topk_ids;
    float *token_logprob, *topk_logprobs;
} step_views;

// One packed buffer: its host side, its device side, the bytes a step's arrays took.
typedef struct {
    unsigned char *host;
    void *device;
    size_t used, cap;
} step_pack;

// Host copies of a step's metadata.
typedef struct {
    int32_t *local_ids;
    int32_t *ids, *pos, *slot, *token_seq, *block_table, *seq_lens, *sample_rows;
    float *temperature;
    uint64_t *noise_seed;
    int32_t *sample_pos;
    int *sample_item;            // item index of each sample row
    int32_t *sample_at;          // the position each sample row's record belongs to (host
                                 // bookkeeping, apart from sample_pos, which seeds the noise)
    int32_t *gather_slots;
    int32_t *new_begin, *new_end, *ctx_begin, *ctx_end;
    // for a rows observer: the request of each token row, each key row's request and position,
    // each sample row's request
    int32_t *row_request, *key_request, *key_position, *sample_request;
} host_step;

// What one step computes, beyond the per-token metadata already on the device.
typedef struct {
    int T;                       // tokens
    int T_decode;                // the first T_decode tokens are single-token decodes
    int num_seqs, max_seq_len;
    int S;                       // rows that produce logits
    int keys;                    // split prefill: key rows gathered
    int decode_split_size;       // batch-scheduled decode: KV split size for this step
} step_shape;

// TP-size invariance's per-slice weights of a layer (engine/tp_slices.h): gate/up cut per
// slice (the down weights are read in place, by column offset, except the experts'). Each
// array's slices are one allocation, [0] its start.
typedef struct {
    bf16 *mlp_gate_up[TP_SLICES];
    bf16 *experts_gate_up[TP_SLICES], *experts_down[TP_SLICES];
    bf16 *shared_gate_up[TP_SLICES];
} slice_weights;

struct engine {
    model_config cfg;            // the whole model, as engine_config() reports it
    // Tensor parallelism: this rank's part of the model and its handle on the group. Without
    // it the part is everything, local equals cfg and no collective is ever called.
    tp_part part;
    model_config local;          // cfg with this rank's heads, intermediate sizes, vocabulary
    tp_comm *comm;
    ops_set *ops;
    engine_limits lim;
    uint64_t seed;
    int max_blocks_per_seq, num_blocks;
    int max_rows;                // rows that may produce logits in one step
    long max_keys;               // split prefill key rows in one step
    const attention_backend *backend; // of the current generate call

    bf16 *embed, *final_norm, *lm_head;
    float *rope_cos, *rope_sin;
    layer_weights *layers;
    bf16 **kv;                   // per layer [num_blocks * block_size, L+R]

    activations a;
    host_step hs;
    step_views dev;              // this step's metadata and results on the device
    step_views host_out;         // its results on the host (views into out.host)
    step_pack in, out;
    // The metadata's two host buffers, steps alternating between them (in.host is this step's):
    // a step that samples nothing ends without waiting, and the next one packs into the other
    // buffer while the device still runs it and may still read the first. in_flight[b]: buffer
    // b went up asynchronously and no sync or download followed yet.
    unsigned char *in_hosts[2];
    int in_turn;
    bool in_flight[2];
    kv_cache *cache;
    scheduler *sched;

    // The session (engine_begin .. engine_step): its schedule, its requests by id (copies whose
    // prompts stay the caller's) and where each one's records go.
    engine_sched session;
    bool in_session;
    engine_request *reqs;
    engine_result **results;
    int cap_reqs;
    engine_stats stats;
    int failed_request;          // the request whose sampled id failed a step, -1
    sched_item *items;           // one step's plan, max_num_seqs entries
    int32_t *sampled;            // tokens sampled in one step, per item
    engine_rows_observer observe_rows; // NULL: none
    void *observe_ctx;

    // TP-size invariance (lim.tp_size_invariant): this rank's slices, their weights, and the
    // fp32 partials of one row-parallel layer ([slices, T, D]), the shared experts' partials
    // ([slices, T, D]) and the experts' fp32 rows of the slices one MoE call takes (room for
    // expert_f32_bytes: every slice's rows of a step of up to max_num_batched_tokens, or as many
    // slices' as engine_limits.tp_slices_fp32_bytes allows).
    tp_slices slices;
    slice_weights *slice_w;
    float *partials, *shared_partial, *expert_f32;
    double expert_f32_bytes;

    // CUDA graphs (lim.graph_buckets): each bucket's captured step, NULL until its first step;
    // padding rows' KV goes to block num_blocks, outside the pool the scheduler allocates from.
    // graph_len[b]: the attention's longest sequence bucket b's graph was captured with (its
    // grid's split count), enough for every step it is replayed on.
    ops_graph *graphs[ENGINE_MAX_GRAPH_BUCKETS];
    int graph_len[ENGINE_MAX_GRAPH_BUCKETS];
    int dummy_block;
};

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

typedef struct {
    engine *e;
    weight_source *src;
    bf16 *staging;               // host buffer for the largest tensor
    size_t staging_elems;
} loader;

static size_t count_of(const int64_t *shape, int ndim) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

static bf16 *staging(loader *l, size_t elems) {
    if (elems > l->staging_elems) {
        free(l->staging);
        l->staging = invar_malloc(elems * sizeof(bf16), "weight staging buffer");
        l->staging_elems = elems;
    }
    return l->staging;
}

static bf16 *device_bf16(engine *e, size_t elems, const char *what) {
    return e->ops->alloc(e->ops, elems * sizeof(bf16), what);
}

// Reads tensor `name` of `shape` into device memory at dst.
static void load_into(loader *l, bf16 *dst, const char *name, const int64_t *shape, int ndim) {
    size_t n = count_of(shape, ndim);
    bf16 *host = staging(l, n);
    l->src->read_bf16(l->src, name, shape, ndim, host);
    l->e->ops->upload(l->e->ops, dst, host, n * sizeof(bf16));
}

static bf16 *load(loader *l, const char *name, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    int ndim = cols > 0 ? 2 : 1;
    bf16 *d = device_bf16(l->e, count_of(shape, ndim), name);
    load_into(l, d, name, shape, ndim);
    return d;
}

// Rows `part` of the [rows, cols] tensor `name` into dst: a column-parallel weight's slice
// (its output features), or every row without tensor parallelism.
static void load_rows_into(loader *l, bf16 *dst, const char *name, int64_t rows, int64_t cols,
                           tp_range part) {
    int64_t shape[2] = {rows, cols};
    bf16 *host = staging(l, count_of(shape, 2));
    l->src->read_bf16(l->src, name, shape, 2, host);
    l->e->ops->upload(l->e->ops, dst, host + (size_t)part.begin * cols,
                      (size_t)part.count * cols * sizeof(bf16));
}

static bf16 *load_rows(loader *l, const char *name, int64_t rows, int64_t cols, tp_range part) {
    bf16 *d = device_bf16(l->e, (size_t)part.count * cols, name);
    load_rows_into(l, d, name, rows, cols, part);
    return d;
}

// Columns `part` of the [rows, cols] tensor `name`, packed to [rows, part.count], into dst: a
// row-parallel weight's slice (its input features).
static void load_cols_into(loader *l, bf16 *dst, const char *name, int64_t rows, int64_t cols,
                           tp_range part) {
    int64_t shape[2] = {rows, cols};
    size_t n = count_of(shape, 2);
    bf16 *host = staging(l, n + (size_t)rows * part.count), *packed = host + n;
    l->src->read_bf16(l->src, name, shape, 2, host);
    for (int64_t r = 0; r < rows; r++)
        memcpy(packed + r * part.count, host + r * cols + part.begin,
               (size_t)part.count * sizeof(bf16));
    l->e->ops->upload(l->e->ops, dst, packed, (size_t)rows * part.count * sizeof(bf16));
}

static bf16 *load_cols(loader *l, const char *name, int64_t rows, int64_t cols, tp_range part) {
    bf16 *d = device_bf16(l->e, (size_t)rows * part.count, name);
    load_cols_into(l, d, name, rows, cols, part);
    return d;
}

// gate_proj and up_proj ([I, D] each), rows `part` of each, stacked into one
// [2 * part.count, D] matrix at dst.
static void load_gate_up(loader *l, bf16 *dst, const char *prefix, int64_t I, int64_t D,
                         tp_range part) {
    char name[256];
    snprintf(name, sizeof name, "%s.gate_proj.weight", prefix);
    load_rows_into(l, dst, name, I, D, part);
    snprintf(name, sizeof name, "%s.up_proj.weight", prefix);
    load_rows_into(l, dst + (int64_t)part.count * D, name, I, D, part);
}

// An MLP split on its intermediate dimension: gate/up column-parallel, down row-parallel, so
// each rank's output is a partial sum that the all-reduce completes.
static void load_mlp(loader *l, const char *prefix, int64_t I, int64_t D, tp_range part,
                     bf16 **gate_up, bf16 **down) {
    char name[256];
    *gate_up = device_bf16(l->e, (size_t)(2 * part.count * D), prefix);
    load_gate_up(l, *gate_up, prefix, I, D, part);
    snprintf(name, sizeof name, "%s.down_proj.weight", prefix);
    *down = load_cols(l, name, D, I, part);
}

// kv_b_proj [H*(nope+v), L] is read once and used twice: its value rows in place (W_UV), and
// its key rows of each head h, W_UK[h] = [nope, L], transposed to [L, nope] so that
// q_lat = q_nope · W_UK[h] is an x·wᵀ product like every other.
// Column-parallel by heads: a rank keeps its heads' rows (both halves).
static void load_kv_b_proj(loader *l, const char *name, bf16 **kv_b_proj, bf16 **w_uk_t) {
    const model_config *c = &l->e->cfg;
    tp_range heads = l->e->part.heads;
    int64_t H_all = c->num_attention_heads, H = heads.count, L = c->kv_lora_rank,
            nope = c->qk_nope_head_dim, v = c->v_head_dim;
    int64_t shape[2] = {H_all * (nope + v), L};
    size_t n_all = count_of(shape, 2), n = (size_t)(H * (nope + v) * L),
           n_t = (size_t)(H * L * nope);
    bf16 *all = staging(l, n_all + n_t), *t = all + n_all;
    l->src->read_bf16(l->src, name, shape, 2, all);
    const bf16 *host = all + (size_t)heads.begin * (nope + v) * L;
    for (int64_t h = 0; h < H; h++)
        for (int64_t r = 0; r < nope; r++)
            for (int64_t col = 0; col < L; col++)
                t[(h * L + col) * nope + r] = host[(h * (nope + v) + r) * L + col];
    *kv_b_proj = device_bf16(l->e, n, name);
    *w_uk_t = device_bf16(l->e, n_t, "absorbed W_UK");
    l->e->ops->upload(l->e->ops, *kv_b_proj, host, n * sizeof(bf16));
    l->e->ops->upload(l->e->ops, *w_uk_t, t, n_t * sizeof(bf16));
}

static void load_layer(loader *l, int i, layer_weights *w) {
    const model_config *c = &l->e->cfg;
    int64_t D = c->hidden_size, H = c->num_attention_heads, L = c->kv_lora_rank,
            R = c->qk_rope_head_dim, nope = c->qk_nope_head_dim, v = c->v_head_dim;
    // Tensor parallelism (vLLM's split): q_a_proj, kv_a_proj and their norms are replicated;
    // q_b_proj / q_proj and kv_b_proj are column-parallel by heads, o_proj row-parallel. Every
    // rank writes and holds the whole latent KV cache: the latent is shared by all heads, so
    // splitting heads leaves nothing of it to split.
    const tp_part *part = &l->e->part;
    tp_range head_rows = {part->heads.begin * (int)(nope + R), part->heads.count * (int)(nope + R)};
    tp_range head_values = {part->heads.begin * (int)v, part->heads.count * (int)v};
    char p[128], name[256];
    snprintf(p, sizeof p, "model.layers.%d", i);
#define NAME(fmt) (snprintf(name, sizeof name, "%s." fmt, p), name)
    w->input_norm = load(l, NAME("input_layernorm.weight"), D, 0);
    w->post_attention_norm = load(l, NAME("post_attention_layernorm.weight"), D, 0);
    if (c->q_lora_rank > 0) {
        w->q_a_proj = load(l, NAME("self_attn.q_a_proj.weight"), c->q_lora_rank, D);
        w->q_a_norm = load(l, NAME("self_attn.q_a_layernorm.weight"), c->q_lora_rank, 0);
        w->q_b_proj = load_rows(l, NAME("self_attn.q_b_proj.weight"), H * (nope + R),
                                c->q_lora_rank, head_rows);
    } else {
        w->q_proj = load_rows(l, NAME("self_attn.q_proj.weight"), H * (nope + R), D, head_rows);
    }
    w->kv_a_proj = load(l, NAME("self_attn.kv_a_proj_with_mqa.weight"), L + R, D);
    w->kv_a_norm = load(l, NAME("self_attn.kv_a_layernorm.weight"), L, 0);
    load_kv_b_proj(l, NAME("self_attn.kv_b_proj.weight"), &w->kv_b_proj, &w->w_uk_t);
    w->o_proj = load_cols(l, NAME("self_attn.o_proj.weight"), D, H * v, head_values);
    w->moe = model_layer_is_moe(c, i);
    if (!w->moe) {
        load_mlp(l, NAME("mlp"), c->intermediate_size, D, part->inter, &w->mlp_gate_up,
                 &w->mlp_down);
    } else {
        // Routed experts are split on their intermediate dimension, not by expert: every rank
        // runs every expert on 1/T of it, so the router stays replicated, a rank's work does
        // not depend on where tokens are routed, and the expert outputs are partial sums that
        // the one all-reduce after the layer completes (vLLM's FusedMoE without expert
        // parallelism does the same).
        int64_t E = c->n_routed_experts, Im = c->moe_intermediate_size,
                Im_part = part->moe_inter.count;
        w->router = load(l, NAME("mlp.gate.weight"), E, D);
        if (c->topk_method == MOE_TOPK_NOAUX_TC) {
            int64_t shape[1] = {E};
            float *bias = invar_malloc((size_t)E * sizeof(float), "router bias");
            l->src->read_f32(l->src, NAME("mlp.gate.e_score_correction_bias"), shape, 1, bias);
            w->router_bias = l->e->ops->alloc(l->e->ops, (size_t)E * sizeof(float), "router bias");
            l->e->ops->upload(l->e->ops, w->router_bias, bias, (size_t)E * sizeof(float));
            free(bias);
        }
        w->experts_gate_up = device_bf16(l->e, (size_t)(E * 2 * Im_part * D),
                                         "routed experts gate_up");
        w->experts_down = device_bf16(l->e, (size_t)(E * D * Im_part), "routed experts down");
        for (int64_t e = 0; e < E; e++) {
            // Sized for p and any expert index; the check keeps a future longer prefix from
            // reading a truncated name as another tensor.
            char expert[sizeof p + 48];
            int len = snprintf(expert, sizeof expert, "%s.mlp.experts.%ld", p, (long)e);
            if (len < 0 || (size_t)len >= sizeof expert)
                invar_die(INVAR_EXIT_SYSTEM, "tensor name '%s.mlp.experts.%ld' does not fit", p,
                          (long)e);
            load_gate_up(l, w->experts_gate_up + e * 2 * Im_part * D, expert, Im, D,
                         part->moe_inter);
            snprintf(name, sizeof name, "%s.down_proj.weight", expert);
            load_cols_into(l, w->experts_down + e * D * Im_part, name, D, Im, part->moe_inter);
        }
        if (c->n_shared_experts > 0) {
            int ns = c->n_shared_experts;
            tp_range shared = {part->moe_inter.begin * ns, part->moe_inter.count * ns};
            load_mlp(l, NAME("mlp.shared_experts"), Im * ns, D, shared, &w->shared_gate_up,
                     &w->shared_down);
        }
    }
#undef NAME
}

// Vocabulary-parallel: this rank's rows of the table, then (with T > 1) one zero row that every
// id outside them reads, so the all-reduce after the lookup adds a token's row to zeros, exact
// in any order (vLLM's VocabParallelEmbedding masks the same way).
static bf16 *load_embedding(loader *l) {
    const model_config *c = &l->e->cfg;
    tp_range rows = l->e->part.vocab;
    int zero_rows = l->e->part.size > 1;
    size_t D = (size_t)c->hidden_size;
    bf16 *d = device_bf16(l->e, (rows.count + zero_rows) * D, "model.embed_tokens.weight");
    load_rows_into(l, d, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, rows);
    if (zero_rows) {
        bf16 *zeros = invar_calloc(D, sizeof(bf16), "embedding zero row");
        l->e->ops->upload(l->e->ops, d + rows.count * D, zeros, D * sizeof(bf16));
        free(zeros);
    }
    return d;
}

static void load_weights(engine *e, weight_source *src) {
    const model_config *c = &e->cfg;
    loader l = {.e = e, .src = src};
    e->embed = load_embedding(&l);
    e->layers = invar_calloc((size_t)c->num_hidden_layers, sizeof *e->layers, "layer weights");
    for (int i = 0; i < c->num_hidden_layers; i++) load_layer(&l, i, &e->layers[i]);
    e->final_norm = load(&l, "model.norm.weight", c->hidden_size, 0);
    e->lm_head = c->tie_word_embeddings
                     ? e->embed
                     : load_rows(&l, "lm_head.weight", c->vocab_size, c->hidden_size,
                                 e->part.vocab);
    free(l.staging);
}

// ---------------------------------------------------------------------------------------------
// Buffers
// ---------------------------------------------------------------------------------------------

static void *dalloc(engine *e, size_t count, size_t size, const char *what) {
    return e->ops->alloc(e->ops, count * size, what);
}

enum { STEP_ALIGN = 256 };  // an array of a packed step starts as an allocation would

static size_t step_bytes(size_t count, size_t size) {
    return (count * size + STEP_ALIGN - 1) / STEP_ALIGN * STEP_ALIGN;
}

// The packed step buffers' host side: memory the device copies from directly where the set
// has it (pinned, on CUDA), so that the step's upload needs no wait.
static bool host_async(const engine *e) {
    return e->ops->alloc_host && e->ops->release_host && e->ops->upload_async;
}

static unsigned char *host_alloc(engine *e, size_t bytes, const char *what) {
    return host_async(e) ? e->ops->alloc_host(e->ops, bytes, what) : invar_calloc(bytes, 1, what);
}

static void host_release(engine *e, void *p) {
    if (host_async(e)) e->ops->release_host(e->ops, p);
    else free(p);
}

static void alloc_activations(engine *e) {
    const model_config *c = &e->local;
    size_t T = (size_t)e->lim.max_num_batched_tokens, S = (size_t)e->max_rows;
    size_t D = (size_t)c->hidden_size, H = (size_t)c->num_attention_heads,
           L = (size_t)c->kv_lora_rank, R = (size_t)c->qk_rope_head_dim,
           nope = (size_t)c->qk_nope_head_dim, v = (size_t)c->v_head_dim;
    size_t k = c->n_routed_experts > 0 ? (size_t)c->num_experts_per_tok : 1;
    size_t I = (size_t)c->intermediate_size;
    size_t Is = (size_t)c->moe_intermediate_size * (size_t)c->n_shared_experts;
    size_t Imax = I > Is ? I : Is;
    size_t q_lora = c->q_lora_rank > 0 ? (size_t)c->q_lora_rank : 1;
    activations *a = &e->a;
    a->h = dalloc(e, T * D, sizeof(bf16), "activations h");
    a->x = dalloc(e, T * D, sizeof(bf16), "activations x");
    a->q_a = dalloc(e, T * q_lora, sizeof(bf16), "activations q_a");
    a->q_a_normed = dalloc(e, T * q_lora, sizeof(bf16), "activations q_a_normed");
    a->q = dalloc(e, T * H * (nope + R), sizeof(bf16), "activations q");
    a->kv_a = dalloc(e, T * (L + R), sizeof(bf16), "activations kv_a");
    a->c_kv = dalloc(e, T * L, sizeof(bf16), "activations c_kv");
    a->q_lat = dalloc(e, T * H * L, sizeof(bf16), "activations q_lat");
    a->attn_lat = dalloc(e, T * H * L, sizeof(bf16), "activations attn_lat");
    a->attn_v = dalloc(e, T * H * v, sizeof(bf16), "activations attn_v");
    a->sublayer_out = dalloc(e, T * D, sizeof(bf16), "activations sublayer_out");
    a->gate_up = dalloc(e, T * 2 * Imax, sizeof(bf16), "activations gate_up");
    a->act = dalloc(e, T * Imax, sizeof(bf16), "activations act");
    a->shared_out = dalloc(e, T * D, sizeof(bf16), "activations shared_out");
    a->topk_ids = dalloc(e, T * k, sizeof(int32_t), "moe topk ids");
    a->topk_weights = dalloc(e, T * k, sizeof(float), "moe topk weights");
    a->expert_out = dalloc(e, T * k * D, sizeof(bf16), "moe expert outputs");
    a->final_rows = dalloc(e, S * D, sizeof(bf16), "final rows");
    a->final_normed = dalloc(e, S * D, sizeof(bf16), "final normed rows");
    a->logits = dalloc(e, S * (size_t)e->cfg.vocab_size, sizeof(float), "logits");  // gathered
    size_t B = (size_t)e->max_blocks_per_seq;
    size_t K = (size_t)e->max_keys;
    a->key_latent = dalloc(e, K * (L + R), sizeof(bf16), "split prefill key latents");
    a->key_kv = dalloc(e, K * H * (nope + v), sizeof(bf16), "split prefill keys and values");
    // The packed step buffers: room for every array at its largest, each aligned.
    e->in.cap = 9 * step_bytes(T, 4) + step_bytes(S * B, 4) + 4 * step_bytes(S, 4) +
                step_bytes(S, 8) + step_bytes(K, 4);
    e->out.cap = 2 * step_bytes(S, 4) + 2 * step_bytes(S * ENGINE_MAX_TOPK, 4);
    e->in.device = dalloc(e, e->in.cap, 1, "step metadata");
    e->out.device = dalloc(e, e->out.cap, 1, "sampling results");
    for (int b = 0; b < 2; b++) e->in_hosts[b] = host_alloc(e, e->in.cap, "host step metadata");
    e->in.host = e->in_hosts[0];
    e->out.host = host_alloc(e, e->out.cap, "host sampling results");
    a->attn_new = dalloc(e, T * H * v, sizeof(bf16), "split prefill new-token attention");
    a->attn_ctx = dalloc(e, T * H * v, sizeof(bf16), "split prefill context attention");
    a->lse_new = dalloc(e, T * H, sizeof(float), "split prefill log-sum-exp");
    a->lse_ctx = dalloc(e, T * H, sizeof(float), "split prefill log-sum-exp");

    host_step *hs = &e->hs;
    hs->ids = invar_calloc(T, sizeof(int32_t), "host step ids");
    hs->local_ids = invar_calloc(T, sizeof(int32_t), "host step ids of this rank's vocabulary");
    hs->pos = invar_calloc(T, sizeof(int32_t), "host step positions");
    hs->slot = invar_calloc(T, sizeof(int32_t), "host step slots");
    hs->token_seq = invar_calloc(T, sizeof(int32_t), "host step sequences");
    hs->block_table = invar_calloc(S * B, sizeof(int32_t), "host block table");
    hs->seq_lens = invar_calloc(S, sizeof(int32_t), "host sequence lengths");
    hs->sample_rows = invar_calloc(S, sizeof(int32_t), "host sample rows");
    hs->temperature = invar_calloc(S, sizeof(float), "host temperatures");
    hs->noise_seed = invar_calloc(S, sizeof(uint64_t), "host noise seeds");
    hs->sample_pos = invar_calloc(S, sizeof(int32_t), "host sample positions");
    hs->sample_item = invar_calloc(S, sizeof(int), "host sample items");
    hs->sample_at = invar_calloc(S, sizeof(int32_t), "host sample record positions");
    hs->gather_slots = invar_calloc(K, sizeof(int32_t), "host key slots");
    hs->new_begin = invar_calloc(T, sizeof(int32_t), "host key ranges");
    hs->new_end = invar_calloc(T, sizeof(int32_t), "host key ranges");
    hs->ctx_begin = invar_calloc(T, sizeof(int32_t), "host key ranges");
    hs->ctx_end = invar_calloc(T, sizeof(int32_t), "host key ranges");
    hs->row_request = invar_calloc(T, sizeof(int32_t), "host row requests");
    hs->key_request = invar_calloc(K, sizeof(int32_t), "host key requests");
    hs->key_position = invar_calloc(K, sizeof(int32_t), "host key positions");
    hs->sample_request = invar_calloc(S, sizeof(int32_t), "host sample requests");
}

// ---------------------------------------------------------------------------------------------
// Create / destroy
// ---------------------------------------------------------------------------------------------

// TP-size invariance: this rank's slices, their gate/up (and the experts' down) weights cut per
// slice, and the fp32 partials.
static void slices_setup(engine *e) {
    ops_set *o = e->ops;
    char err[256];
    if (!o->tp_size_invariant)
        invar_die(2, "engine: tp_size_invariance = on: kernel set %s (%s) has no TP-size-"
                  "invariant path (the CPU invariant set has one)", o->name, o->device);
    if (!tp_slices_make(&e->cfg, &e->part, &e->slices, err, sizeof err))
        invar_die(2, "model config: %s", err);
    const model_config *c = &e->local;
    const tp_slices *sl = &e->slices;
    int n = sl->n, D = c->hidden_size, E = c->n_routed_experts, Im = c->moe_intermediate_size,
        ns = c->n_shared_experts;
    size_t T = (size_t)e->lim.max_num_batched_tokens;
    size_t k = c->n_routed_experts > 0 ? (size_t)c->num_experts_per_tok : 1;
    e->partials = dalloc(e, (size_t)n * T * D, sizeof(float), "TP slices: fp32 partials");
    e->shared_partial = dalloc(e, (size_t)n * T * D, sizeof(float), "TP slices: shared-expert partials");
    double budget = e->lim.tp_slices_fp32_bytes > 0 ? (double)e->lim.tp_slices_fp32_bytes : 0x1p30;
    int fit = tp_slices_per_call(n, (double)T * k * D * sizeof(float), budget);
    e->expert_f32_bytes = (double)fit * T * k * D * sizeof(float);
    e->expert_f32 = dalloc(e, (size_t)fit * T * k * D, sizeof(float), "TP slices: fp32 expert rows");
    e->slice_w = invar_calloc((size_t)c->num_hidden_layers, sizeof *e->slice_w, "TP slice weights");
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const layer_weights *w = &e->layers[i];
        slice_weights *sw = &e->slice_w[i];
        if (!w->moe) {
            tp_slices_gate_up(o, sw->mlp_gate_up, w->mlp_gate_up, sl->inter, n, 1,
                              c->intermediate_size, D, 1);
            continue;
        }
        tp_slices_gate_up(o, sw->experts_gate_up, w->experts_gate_up, sl->moe_inter, n, 1, Im, D, E);
        tp_slices_down(o, sw->experts_down, w->experts_down, sl->moe_inter, n, Im, D, E);
        if (ns > 0)
            tp_slices_gate_up(o, sw->shared_gate_up, w->shared_gate_up, sl->moe_inter, n, ns,
                              Im * ns, D, 1);
    }
}

static void check_limits(const model_config *c, const engine_limits *lim) {
    if (lim->max_num_seqs < 1) invar_die(2, "engine: max_num_seqs must be >= 1");
    if (lim->max_num_batched_tokens < 1) invar_die(2, "engine: max_num_batched_tokens must be >= 1");
    if (lim->block_size < 1) invar_die(2, "engine: block_size must be >= 1");
    if (lim->max_model_len < 2) invar_die(2, "engine: max_model_len must be >= 2");
    if (lim->max_model_len > c->max_position_embeddings)
        invar_die(2, "engine: max_model_len %d exceeds the model's max_position_embeddings %d",
                  lim->max_model_len, c->max_position_embeddings);
    int request_blocks = (lim->max_model_len + lim->block_size - 1) / lim->block_size;
    if (lim->kv_cache_blocks < 0 ||
        (lim->kv_cache_blocks > 0 && lim->kv_cache_blocks < request_blocks))
        invar_die(2, "engine: kv_cache_blocks %d holds less than one request of max_model_len %d "
                  "(%d blocks of %d tokens)", lim->kv_cache_blocks, lim->max_model_len,
                  request_blocks, lim->block_size);
    if (lim->n_graph_buckets < 0 || lim->n_graph_buckets > ENGINE_MAX_GRAPH_BUCKETS)
        invar_die(2, "engine: %d graph buckets, outside [0, %d]", lim->n_graph_buckets,
                  ENGINE_MAX_GRAPH_BUCKETS);
    for (int b = 0; b < lim->n_graph_buckets; b++)
        if (lim->graph_buckets[b] < 1 || (b > 0 && lim->graph_buckets[b] <= lim->graph_buckets[b - 1]))
            invar_die(2, "engine: graph bucket %d (%d): buckets must be ascending and >= 1", b + 1,
                      lim->graph_buckets[b]);
    if (lim->max_total_tokens < lim->max_model_len)
        invar_die(2, "engine: max_total_tokens %d is below max_model_len %d",
                  lim->max_total_tokens, lim->max_model_len);
}

engine *engine_create_shard(const model_config *cfg, weight_source *src, ops_set *ops,
                            const engine_limits *limits, uint64_t seed,
                            const engine_shard *shard) {
    char err[256];
    if (!model_config_validate(cfg, err, sizeof err)) invar_die(2, "model config: %s", err);
    check_limits(cfg, limits);
    engine *e = invar_calloc(1, sizeof *e, "engine");
    e->cfg = *cfg;
    if (!tp_part_make(cfg, shard ? shard->rank : 0, shard ? shard->size : 1, &e->part, err,
                      sizeof err))
        invar_die(2, "model config: %s", err);
    e->local = tp_part_local_config(cfg, &e->part);
    e->comm = shard ? shard->comm : NULL;
    e->ops = ops;
    e->lim = *limits;
    e->seed = seed;
    e->failed_request = -1;
    int bs = limits->block_size;
    e->max_blocks_per_seq = (limits->max_model_len + bs - 1) / bs;
    // Every live request may hold one partly filled block beyond its share.
    e->num_blocks = limits->kv_cache_blocks > 0
                        ? limits->kv_cache_blocks
                        : (limits->max_total_tokens + bs - 1) / bs + limits->max_num_seqs;
    e->max_rows = limits->prompt_logprobs ? limits->max_num_batched_tokens : limits->max_num_seqs;
    int prefill_items = limits->max_num_seqs < limits->max_num_batched_tokens
                            ? limits->max_num_seqs : limits->max_num_batched_tokens;
    e->max_keys = (long)prefill_items * limits->max_model_len;

    load_weights(e, src);

    int positions = limits->max_model_len, half = cfg->qk_rope_head_dim / 2;
    float *cos = invar_malloc((size_t)positions * half * sizeof(float), "rope cos table");
    float *sin = invar_malloc((size_t)positions * half * sizeof(float), "rope sin table");
    model_rope_tables(cfg, positions, cos, sin);
    e->rope_cos = dalloc(e, (size_t)positions * half, sizeof(float), "rope cos table");
    e->rope_sin = dalloc(e, (size_t)positions * half, sizeof(float), "rope sin table");
    ops->upload(ops, e->rope_cos, cos, (size_t)positions * half * sizeof(float));
    ops->upload(ops, e->rope_sin, sin, (size_t)positions * half * sizeof(float));
    free(cos);
    free(sin);

    size_t entry = (size_t)(cfg->kv_lora_rank + cfg->qk_rope_head_dim);
    e->kv = invar_calloc((size_t)cfg->num_hidden_layers, sizeof(bf16 *), "kv cache layers");
    // With graph buckets, one block past the pool for the padding rows' writes.
    e->dummy_block = e->num_blocks;
    size_t kv_blocks = (size_t)e->num_blocks + (limits->n_graph_buckets > 0);
    for (int i = 0; i < cfg->num_hidden_layers; i++)
        e->kv[i] = dalloc(e, kv_blocks * bs * entry, sizeof(bf16), "paged KV cache");
    alloc_activations(e);
    if (limits->tp_size_invariant) slices_setup(e);
    e->cache = kv_cache_create(e->num_blocks, bs, false);
    e->sched = scheduler_create(e->cache, limits->max_num_seqs, limits->max_model_len);
    e->items = invar_malloc((size_t)limits->max_num_seqs * sizeof *e->items, "step items");
    e->sampled = invar_malloc((size_t)limits->max_num_seqs * sizeof *e->sampled, "sampled");
    ops->sync(ops);
    return e;
}

engine *engine_create(const model_config *cfg, weight_source *src, ops_set *ops,
                      const engine_limits *limits, uint64_t seed) {
    return engine_create_shard(cfg, src, ops, limits, seed, NULL);
}

static void release_graphs(engine *e) {
    for (int b = 0; b < ENGINE_MAX_GRAPH_BUCKETS; b++) {
        if (e->graphs[b]) e->ops->graph_release(e->ops, e->graphs[b]);
        e->graphs[b] = NULL;
    }
}

// Every field of activations and host_step is one allocation, so both are released as arrays
// of pointers.
static void release_all(engine *e) {
    ops_set *o = e->ops;
    release_graphs(e);
    void **fields = (void **)&e->a;
    for (size_t i = 0; i < sizeof e->a / sizeof(void *); i++) o->release(o, fields[i]);
    void **host = (void **)&e->hs;
    for (size_t i = 0; i < sizeof e->hs / sizeof(void *); i++) free(host[i]);
    o->release(o, e->in.device);
    o->release(o, e->out.device);
    for (int b = 0; b < 2; b++) host_release(e, e->in_hosts[b]);
    host_release(e, e->out.host);
    for (int i = 0; i < e->cfg.num_hidden_layers; i++) {
        layer_weights *w = &e->layers[i];
        void *ptrs[] = {w->input_norm, w->post_attention_norm, w->q_proj, w->q_a_proj,
                        w->q_a_norm, w->q_b_proj, w->kv_a_proj, w->kv_a_norm, w->w_uk_t,
                        w->kv_b_proj, w->o_proj, w->mlp_gate_up, w->mlp_down, w->router,
                        w->router_bias, w->experts_gate_up, w->experts_down, w->shared_gate_up,
                        w->shared_down};
        for (size_t j = 0; j < sizeof ptrs / sizeof ptrs[0]; j++)
            if (ptrs[j]) o->release(o, ptrs[j]);
        o->release(o, e->kv[i]);
    }
    if (e->lm_head != e->embed) o->release(o, e->lm_head);
    o->release(o, e->embed);
    o->release(o, e->final_norm);
    o->release(o, e->rope_cos);
    o->release(o, e->rope_sin);
    if (!e->slice_w) return;
    for (int i = 0; i < e->cfg.num_hidden_layers; i++) {
        const slice_weights *sw = &e->slice_w[i];
        bf16 *firsts[] = {sw->mlp_gate_up[0], sw->experts_gate_up[0], sw->experts_down[0],
                          sw->shared_gate_up[0]};
        for (size_t j = 0; j < sizeof firsts / sizeof firsts[0]; j++)
            if (firsts[j]) o->release(o, firsts[j]);
    }
    o->release(o, e->partials);
    o->release(o, e->shared_partial);
    o->release(o, e->expert_f32);
}

void engine_destroy(engine *e) {
    if (!e) return;
    release_all(e);
    free(e->layers);
    free(e->slice_w);
    free(e->kv);
    kv_cache_destroy(e->cache);
    scheduler_destroy(e->sched);
    free(e->items);
    free(e->sampled);
    free(e->reqs);
    free(e->results);
    free(e);
}

const model_config *engine_config(const engine *e) { return &e->cfg; }

void engine_observe_rows(engine *e, engine_rows_observer fn, void *ctx) {
    e->observe_rows = fn;
    e->observe_ctx = ctx;
}

static void announce_rows(engine *e, int layer, engine_rows_kind kind, const int32_t *request,
                          const int32_t *position, int n) {
    if (e->observe_rows) e->observe_rows(e->observe_ctx, layer, kind, request, position, n);
}

// ---------------------------------------------------------------------------------------------
// The forward pass
// ---------------------------------------------------------------------------------------------

// Completes a row-parallel layer's output: each rank holds a partial sum over its heads or
// intermediate slice, and the kernel set's all-reduce adds them (in its own order).
static void sum_over_ranks(engine *e, bf16 *x, long n) {
    if (e->part.size > 1) e->ops->all_reduce(e->ops, e->comm, x, n);
}

static void linear(ops_set *o, void *y, const bf16 *x, const bf16 *w, int M, int N, int K) {
    gemm_args g = {.y = y, .x = x, .w = w, .M = M, .N = N, .K = K};
    o->gemm(o, &g);
}

// The split_N of a column-parallel GEMM whose whole N is n_whole (gemm_args.split_N): under
// TP-size invariance a rank's columns split K by the whole GEMM's rule, as at T = 1; otherwise 0.
static int column_split_n(const engine *e, int n_whole) { return e->lim.tp_size_invariant ? n_whole : 0; }

// Dense MLP (or shared experts): y = down(bf16(silu(gate)) * up).
static void mlp(engine *e, bf16 *y, const bf16 *x, const bf16 *gate_up, const bf16 *down, int T,
                int I) {
    ops_set *o = e->ops;
    int D = e->cfg.hidden_size;
    linear(o, e->a.gate_up, x, gate_up, T, 2 * I, D);
    o->silu_mul(o, e->a.act, e->a.gate_up, T, I);
    linear(o, y, e->a.act, down, T, D, I);
}

// ---------------------------------------------------------------------------------------------
// TP-size invariance (engine/tp_slices.h): row-parallel layers as 8 fixed slices' fp32 partials
// ---------------------------------------------------------------------------------------------

// Whether a layer's slices of `ranges` go to the kernels in one call (uniform slices, and the
// engine not told to run each slice alone): the one test o_proj, the MLPs and the MoE share.
static bool slices_one_call(const engine *e, const tp_range *ranges) {
    return !e->lim.tp_slices_each && tp_slices_uniform(ranges, e->slices.n);
}

static float *slice_partial(engine *e, int s, int T) {
    return e->partials + (long)s * T * e->local.hidden_size;
}

// The partials summed in the fixed tree, over the ranks, rounded once into sublayer_out.
static void slices_finish(engine *e, int T) {
    tp_slices_finish(e->ops, e->part.size > 1 ? e->comm : NULL, e->partials, e->slices.n,
                     (long)T * e->local.hidden_size, e->a.sublayer_out, e->lim.tp_slices_each);
}

// Slice s's part of the attention output projection: its heads' columns of o_proj. Slices of
// one head count are one batched product (entry s: slice s's columns and partial).
static void o_proj_slices(engine *e, int layer, int T) {
    const model_config *c = &e->local;
    int D = c->hidden_size, H = c->num_attention_heads, v = c->v_head_dim;
    const tp_slices *sl = &e->slices;
    bool batched = slices_one_call(e, sl->heads);
    for (int s = 0; s < (batched ? 1 : sl->n); s++) {
        tp_range h = sl->heads[s];
        gemm_args g = {.y = slice_partial(e, s, T), .y_f32 = true,
                       .x = e->a.attn_v + (long)h.begin * v, .ldx = (long)H * v,
                       .w = e->layers[layer].o_proj + (long)h.begin * v, .ldw = (long)H * v,
                       .M = T, .N = D, .K = h.count * v};
        if (batched) {
            g.batch = sl->n;
            g.stride_x = g.stride_w = (long)h.count * v;
            g.stride_y = (long)T * D;
        }
        e->ops->gemm(e->ops, &g);
    }
    slices_finish(e, T);
}

// mlp_slices for slices of `cols` columns each, one after another: gate/up of every slice as
// one GEMM (column-parallel: split_N, a slice's width, keeps each column's reduction that of a
// slice's own GEMM), silu_mul over every slice's rows ([T, slices] of them), the down
// projections as a batch of GEMMs (entry s: slice s's columns of act and of down, its partial)
// and one add of the shared partials. gate_up: the slices' [2 cols, D] weights, one after another.
static void mlp_slices_batched(engine *e, const bf16 *x, const bf16 *gate_up, const bf16 *down,
                               int I, int cols, int T, bool add) {
    ops_set *o = e->ops;
    int D = e->local.hidden_size, n = e->slices.n;
    gemm_args gu = {.y = e->a.gate_up, .x = x, .w = gate_up, .M = T, .N = n * 2 * cols, .K = D,
                    .split_N = 2 * cols};
    o->gemm(o, &gu);
    o->silu_mul(o, e->a.act, e->a.gate_up, T * n, cols);
    float *y = add ? e->shared_partial : e->partials;
    gemm_args dn = {.y = y, .y_f32 = true, .x = e->a.act, .ldx = (long)n * cols, .w = down,
                    .ldw = I, .M = T, .N = D, .K = cols, .batch = n, .stride_x = cols,
                    .stride_w = cols, .stride_y = (long)T * D};
    o->gemm(o, &dn);
    if (add) o->add_f32(o, e->partials, y, (long)n * T * D);
}

// A gated MLP per slice: gate/up and silu of the slice's columns, its down projection into the
// slice's partial (add: into shared_partial, then added to it). `ranges` scaled by `mult` are
// the slices' columns of down ([D, I]).
static void mlp_slices(engine *e, const bf16 *x, bf16 *const *gate_up, const bf16 *down, int I,
                       const tp_range *ranges, int mult, int T, bool add) {
    if (slices_one_call(e, ranges)) {
        mlp_slices_batched(e, x, gate_up[0], down, I, ranges[0].count * mult, T, add);
        return;
    }
    ops_set *o = e->ops;
    int D = e->local.hidden_size;
    for (int s = 0; s < e->slices.n; s++) {
        int b = ranges[s].begin * mult, cols = ranges[s].count * mult;
        linear(o, e->a.gate_up, x, gate_up[s], T, 2 * cols, D);
        o->silu_mul(o, e->a.act, e->a.gate_up, T, cols);
        float *y = add ? e->shared_partial : slice_partial(e, s, T);
        gemm_args g = {.y = y, .y_f32 = true, .x = e->a.act, .w = down + b, .ldw = I, .M = T,
                       .N = D, .K = cols};
        o->gemm(o, &g);
        if (add) o->add_f32(o, slice_partial(e, s, T), y, (long)T * D);
    }
}

// The MoE block per slice: P_s = sum_j w_j · (a_j,s · w_down_j,sᵀ) + shared_s, all fp32.
// Slices of one width go to moe_experts and moe_combine as one call each (their `slices`), or
// in groups where this step's fp32 rows of every slice would not fit expert_f32.
static void moe_slices(engine *e, int layer, int T, const moe_route_args *route) {
    const model_config *c = &e->local;
    ops_set *o = e->ops;
    const slice_weights *sw = &e->slice_w[layer];
    const tp_range *ranges = e->slices.moe_inter;
    int n = e->slices.n;
    double rows_bytes = (double)T * route->k * route->D * sizeof(float);  // a slice's fp32 rows
    int g = slices_one_call(e, ranges) ? tp_slices_per_call(n, rows_bytes, e->expert_f32_bytes) : 1;
    for (int s = 0; s < n; s += g) {
        moe_experts_args experts = {.out = e->a.expert_out, .out_f32 = e->expert_f32, .x = e->a.x,
                                    .topk_ids = route->topk_ids,
                                    .w_gate_up = sw->experts_gate_up[s],
                                    .w_down = sw->experts_down[s], .T = T, .k = route->k,
                                    .E = route->E, .D = route->D, .I = ranges[s].count,
                                    .slices = g > 1 ? g : 0};
        o->moe_experts(o, &experts);
        moe_combine_args combine = {.out = e->a.sublayer_out, .expert_out = e->a.expert_out,
                                    .expert_out_f32 = e->expert_f32,
                                    .out_f32 = slice_partial(e, s, T),
                                    .topk_weights = route->topk_weights,
                                    .topk_ids = route->topk_ids, .T = T, .k = route->k,
                                    .D = route->D, .E = route->E, .slices = g > 1 ? g : 0};
        o->moe_combine(o, &combine);
    }
    int ns = c->n_shared_experts;
    if (ns > 0)
        mlp_slices(e, e->a.x, sw->shared_gate_up, e->layers[layer].shared_down,
                   c->moe_intermediate_size * ns, ranges, ns, T, true);
    slices_finish(e, T);
}

// q, and the new tokens' latent c_kv and k_pe, written to the cache before attention reads it.
static void attention_inputs(engine *e, int layer, int T) {
    const model_config *c = &e->local;  // this rank's heads and intermediate slices
    ops_set *o = e->ops;
    activations *a = &e->a;
    const layer_weights *w = &e->layers[layer];
    int D = c->hidden_size, H = c->num_attention_heads, L = c->kv_lora_rank,
        R = c->qk_rope_head_dim, nope = c->qk_nope_head_dim, qh = nope + R;
    float eps = (float)c->rms_norm_eps;
    gemm_args q = {.y = a->q, .x = a->x, .w = w->q_proj, .M = T, .N = H * qh, .K = D,
                   .split_N = column_split_n(e, e->cfg.num_attention_heads * qh)};
    if (c->q_lora_rank > 0) {  // q from the normed low-rank projection instead
        linear(o, a->q_a, a->x, w->q_a_proj, T, c->q_lora_rank, D);
        o->rmsnorm(o, a->q_a_normed, c->q_lora_rank, a->q_a, c->q_lora_rank, w->q_a_norm, T,
                   c->q_lora_rank, eps);
        q.x = a->q_a_normed;
        q.w = w->q_b_proj;
        q.K = c->q_lora_rank;
    }
    o->gemm(o, &q);
    linear(o, a->kv_a, a->x, w->kv_a_proj, T, L + R, D);
    o->rmsnorm(o, a->c_kv, L, a->kv_a, L + R, w->kv_a_norm, T, L, eps);
    o->rope(o, a->q + nope, (long)H * qh, qh, T, H, R, e->dev.pos, e->rope_cos, e->rope_sin,
            c->rope_interleave);
    o->rope(o, a->kv_a + L, L + R, 0, T, 1, R, e->dev.pos, e->rope_cos, e->rope_sin,
            c->rope_interleave);
    o->kv_cache_write(o, e->kv[layer], a->c_kv, L, a->kv_a + L, L + R, e->dev.slot, T, L, R);
}

// Absorbed attention of tokens [t0, t0 + T) in latent space, then W_UV into attn_v.
static void attention_absorbed(engine *e, int layer, int t0, int T, const step_shape *st,
                               int kv_split_size) {
    const model_config *c = &e->local;  // this rank's heads and intermediate slices
    ops_set *o = e->ops;
    activations *a = &e->a;
    const layer_weights *w = &e->layers[layer];
    int H = c->num_attention_heads, L = c->kv_lora_rank, R = c->qk_rope_head_dim,
        nope = c->qk_nope_head_dim, v = c->v_head_dim, qh = nope + R;
    long q_row = (long)t0 * H * qh, lat_row = (long)t0 * H * L;

    // q_lat[t,h] = q_nope[t,h] · W_UK[h]
    gemm_args absorb = {.y = a->q_lat + lat_row, .x = a->q + q_row, .w = w->w_uk_t, .M = T,
                        .N = L, .K = nope, .ldx = (long)H * qh, .ldy = (long)H * L, .ldw = nope,
                        .batch = H, .stride_x = qh, .stride_y = L, .stride_w = (long)L * nope};
    o->gemm(o, &absorb);

    mla_attention_args m = {
        .out = a->attn_lat + lat_row, .q_lat = a->q_lat + lat_row, .q_pe = a->q + q_row + nope,
        .kv_cache = e->kv[layer], .block_table = e->dev.block_table, .token_seq = e->dev.token_seq + t0,
        .token_pos = e->dev.pos + t0, .seq_lens = e->dev.seq_lens, .T = T, .H = H, .L = L, .R = R,
        .ld_out = (long)H * L, .ld_q_lat = (long)H * L, .ld_q_pe = (long)H * qh,
        .head_stride_q_pe = qh, .block_size = e->lim.block_size,
        .max_blocks_per_seq = e->max_blocks_per_seq, .num_seqs = st->num_seqs,
        .max_seq_len = st->max_seq_len, .kv_split_size = kv_split_size,
        .scale = (float)model_softmax_scale(c),
        // TP-size invariance: the kernel a rank takes at T = 8 at every T (kernels' bits differ).
        .H_select = e->lim.tp_size_invariant ? e->cfg.num_attention_heads / TP_SLICES : 0};
    o->mla_attention(o, &m);

    // attn_v[t,h] = attn_lat[t,h] · W_UV[h]ᵀ
    gemm_args value = {.y = a->attn_v + (long)t0 * H * v, .x = a->attn_lat + lat_row,
                       .w = w->kv_b_proj + (long)nope * L, .M = T, .N = v, .K = L,
                       .ldx = (long)H * L, .ldy = (long)H * v, .ldw = L, .batch = H,
                       .stride_x = L, .stride_y = v, .stride_w = (long)(nope + v) * L};
    o->gemm(o, &value);
}

// Non-absorbed prefill of tokens [t0, T): every key a prefill item attends to is gathered from
// the cache and decompressed through kv_b_proj; the new tokens attend to themselves (causally)
// and to the cached context separately, and the two are merged by log-sum-exp.
static void attention_split_prefill(engine *e, int layer, int t0, int T, const step_shape *st) {
    const model_config *c = &e->local;  // this rank's heads and intermediate slices
    ops_set *o = e->ops;
    activations *a = &e->a;
    const layer_weights *w = &e->layers[layer];
    int H = c->num_attention_heads, L = c->kv_lora_rank, R = c->qk_rope_head_dim,
        nope = c->qk_nope_head_dim, v = c->v_head_dim, qh = nope + R, n = T - t0;
    if (n == 0) return;
    announce_rows(e, layer, ENGINE_ROWS_KEYS, e->hs.key_request, e->hs.key_position, st->keys);
    o->embedding(o, a->key_latent, e->kv[layer], e->dev.gather_slots, st->keys, L + R);
    gemm_args decompress = {.y = a->key_kv, .x = a->key_latent, .w = w->kv_b_proj,
                            .M = st->keys, .N = H * (nope + v), .K = L, .ldx = L + R,
                            .split_N = column_split_n(e, e->cfg.num_attention_heads * (nope + v))};
    o->gemm(o, &decompress);
    mha_prefill_args p = {.q = a->q + (long)t0 * H * qh, .kv = a->key_kv,
                          .k_pe = a->key_latent + L, .T = n, .H = H, .nope = nope, .R = R,
                          .v = v, .ld_out = (long)H * v, .ld_q = (long)H * qh,
                          .ld_kv = (long)H * (nope + v), .ld_k_pe = L + R,
                          .scale = (float)model_softmax_scale(c)};
    announce_rows(e, layer, ENGINE_ROWS_TOKENS, e->hs.row_request + t0, e->hs.pos + t0, n);
    p.out = a->attn_new;
    p.lse = a->lse_new;
    p.key_begin = e->dev.new_begin;
    p.key_end = e->dev.new_end;
    o->mha_prefill(o, &p);
    p.out = a->attn_ctx;
    p.lse = a->lse_ctx;
    p.key_begin = e->dev.ctx_begin;
    p.key_end = e->dev.ctx_end;
    o->mha_prefill(o, &p);
    merge_attention_args merge = {.out = a->attn_v + (long)t0 * H * v, .a = a->attn_new,
                                  .b = a->attn_ctx, .lse_a = a->lse_new, .lse_b = a->lse_ctx,
                                  .T = n, .H = H, .v = v, .ld = (long)H * v};
    o->merge_attention(o, &merge);
}

static void attention(engine *e, int layer, const step_shape *st) {
    const model_config *c = &e->local;  // this rank's heads and intermediate slices
    attention_inputs(e, layer, st->T);
    switch (e->backend->path) {
    case ATTENTION_UNIFIED:
        attention_absorbed(e, layer, 0, st->T, st, 0);
        break;
    case ATTENTION_SPLIT_PREFILL:
        if (st->T_decode > 0) attention_absorbed(e, layer, 0, st->T_decode, st, 0);
        attention_split_prefill(e, layer, st->T_decode, st->T, st);
        break;
    case ATTENTION_BATCH_SCHEDULED_DECODE:
        if (st->T_decode > 0)
            attention_absorbed(e, layer, 0, st->T_decode, st, st->decode_split_size);
        attention_split_prefill(e, layer, st->T_decode, st->T, st);
        break;
    }
    if (e->backend->path != ATTENTION_UNIFIED)
        announce_rows(e, layer, ENGINE_ROWS_TOKENS, e->hs.row_request, e->hs.pos, st->T);
    if (e->lim.tp_size_invariant) {
        o_proj_slices(e, layer, st->T);
        return;
    }
    linear(e->ops, e->a.sublayer_out, e->a.attn_v, e->layers[layer].o_proj, st->T,
           c->hidden_size, c->num_attention_heads * c->v_head_dim);
    sum_over_ranks(e, e->a.sublayer_out, (long)st->T * c->hidden_size);
}

static void moe(engine *e, int layer, int T) {
    const model_config *c = &e->local;  // this rank's heads and intermediate slices
    ops_set *o = e->ops;
    activations *a = &e->a;
    const layer_weights *w = &e->layers[layer];
    int D = c->hidden_size, E = c->n_routed_experts, k = c->num_experts_per_tok,
        Im = c->moe_intermediate_size;
    moe_route_args route = {
        .topk_ids = a->topk_ids, .topk_weights = a->topk_weights, .x = a->x, .gate_w = w->router,
        .correction_bias = w->router_bias, .T = T, .D = D, .E = E, .k = k,
        .scoring = c->scoring_func, .topk_method = c->topk_method, .n_group = c->n_group,
        .topk_group = c->topk_group, .norm_topk_prob = c->norm_topk_prob,
        .routed_scaling_factor = (float)c->routed_scaling_factor};
    o->moe_route(o, &route);
    if (e->lim.tp_size_invariant) {
        moe_slices(e, layer, T, &route);
        return;
    }
    moe_experts_args experts = {.out = a->expert_out, .x = a->x, .topk_ids = a->topk_ids,
                                .w_gate_up = w->experts_gate_up, .w_down = w->experts_down,
                                .T = T, .k = k, .E = E, .D = D, .I = Im};
    o->moe_experts(o, &experts);
    moe_combine_args combine = {.out = a->sublayer_out, .expert_out = a->expert_out,
                                .topk_weights = a->topk_weights, .topk_ids = a->topk_ids,
                                .T = T, .k = k, .D = D, .E = E};
    o->moe_combine(o, &combine);
    if (c->n_shared_experts > 0) {
        mlp(e, a->shared_out, a->x, w->shared_gate_up, w->shared_down, T,
            Im * c->n_shared_experts);
        o->residual_add(o, a->sublayer_out, a->shared_out, (long)T * D);
    }
    sum_over_ranks(e, a->sublayer_out, (long)T * D);
}

// A dense layer's MLP, summed over the ranks.
static void dense_mlp(engine *e, int layer, int T) {
    const model_config *c = &e->local;
    const layer_weights *w = &e->layers[layer];
    if (e->lim.tp_size_invariant) {
        mlp_slices(e, e->a.x, e->slice_w[layer].mlp_gate_up, w->mlp_down, c->intermediate_size,
                   e->slices.inter, 1, T, false);
        slices_finish(e, T);
        return;
    }
    mlp(e, e->a.sublayer_out, e->a.x, w->mlp_gate_up, w->mlp_down, T, c->intermediate_size);
    sum_over_ranks(e, e->a.sublayer_out, (long)T * c->hidden_size);
}

// One step over the tokens whose metadata is already on the device; logits, log-softmax,
// sampling and top-k for the st->S rows listed in sample_rows.
static void engine_forward(engine *e, const step_shape *st, int top_k) {
    const model_config *c = &e->local;  // this rank's part; e->cfg: the whole model
    ops_set *o = e->ops;
    activations *a = &e->a;
    int D = c->hidden_size, T = st->T;
    float eps = (float)c->rms_norm_eps;
    bool tp = e->part.size > 1;

    announce_rows(e, -1, ENGINE_ROWS_TOKENS, e->hs.row_request, e->hs.pos, T);
    o->embedding(o, a->h, e->embed, e->dev.local_ids, T, D);
    sum_over_ranks(e, a->h, (long)T * D);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const layer_weights *w = &e->layers[i];
        announce_rows(e, i, ENGINE_ROWS_TOKENS, e->hs.row_request, e->hs.pos, T);
        o->rmsnorm(o, a->x, D, a->h, D, w->input_norm, T, D, eps);
        // Each sublayer leaves sublayer_out complete: summed over the ranks.
        attention(e, i, st);
        o->residual_add(o, a->h, a->sublayer_out, (long)T * D);

        o->rmsnorm(o, a->x, D, a->h, D, w->post_attention_norm, T, D, eps);
        if (w->moe) moe(e, i, T);
        else dense_mlp(e, i, T);
        o->residual_add(o, a->h, a->sublayer_out, (long)T * D);
    }
    if (st->S == 0) return;
    announce_rows(e, c->num_hidden_layers, ENGINE_ROWS_SAMPLES, e->hs.sample_request,
                  e->hs.sample_at, st->S);
    // Only the rows that sample need the final norm and the lm_head (a gather is an embedding).
    o->embedding(o, a->final_rows, a->h, e->dev.sample_rows, st->S, D);
    o->rmsnorm(o, a->final_normed, D, a->final_rows, D, e->final_norm, st->S, D, eps);
    // Vocabulary-parallel lm_head: this rank's columns of the logits, gathered in place by
    // position (a copy, no arithmetic), so every rank takes the log-softmax, the sample and
    // the top-k over the whole vocabulary with the same kernel and gets the same bits; the
    // noise depends on (seed, request seed, position, vocab id), never on the rank.
    int V = e->cfg.vocab_size;
    tp_range cols = e->part.vocab;
    gemm_args head = {.y = a->logits + cols.begin, .y_f32 = true, .x = a->final_normed,
                      .w = e->lm_head, .M = st->S, .N = cols.count, .K = D, .ldy = V,
                      .split_N = column_split_n(e, V)};
    o->gemm(o, &head);
    if (tp)
        o->all_gather_columns(o, e->comm, a->logits, st->S, V, cols.begin,
                              cols.begin + cols.count);
    logprobs_args lp = {.logits = a->logits, .R = st->S, .V = V, .k = top_k,
                        .temperature = e->dev.temperature, .noise_seed = e->dev.noise_seed,
                        .position = e->dev.sample_pos, .token = e->dev.token,
                        .token_logprob = e->dev.token_logprob, .topk_ids = e->dev.topk_ids,
                        .topk_logprobs = e->dev.topk_logprobs};
    o->logprobs(o, &lp);
}

// ---------------------------------------------------------------------------------------------
// Steps: metadata in, records out
// ---------------------------------------------------------------------------------------------

static bool is_decode(const sched_item *it) { return it->n_tokens == 1; }

// MLA backends with a separate prefill path put decodes first, as vLLM reorders its batches.
static void decodes_first(sched_item *items, int n) {
    sched_item tmp[n];
    int w = 0;
    for (int i = 0; i < n; i++)
        if (is_decode(&items[i])) tmp[w++] = items[i];
    for (int i = 0; i < n; i++)
        if (!is_decode(&items[i])) tmp[w++] = items[i];
    memcpy(items, tmp, (size_t)n * sizeof *items);
}

// FlashMLA's scheduler spreads the whole batch's KV evenly over a fixed number of workers, so a
// sequence's split points depend on everyone's lengths.
enum { FLASH_WORKERS = 64, KV_TILE = 64 };
static int batch_scheduled_split_size(const int32_t *seq_lens, int n) {
    long total = 0;
    for (int i = 0; i < n; i++) total += seq_lens[i];
    long split = (total + FLASH_WORKERS - 1) / FLASH_WORKERS;
    split = (split + KV_TILE - 1) / KV_TILE * KV_TILE;
    return split < KV_TILE ? KV_TILE : (int)split;
}

// Adds row `row` (position `position` of item i) to the rows that produce logits.
static void add_sample_row(engine *e, const engine_request *r, int row, int position, int item,
                           int *S) {
    host_step *hs = &e->hs;
    hs->sample_rows[*S] = row;
    hs->temperature[*S] = r->temperature;
    hs->noise_seed[*S] = invar_mix64(e->seed ^ invar_mix64(r->seed));
    hs->sample_pos[*S] = position + 1;
    hs->sample_at[*S] = position;
    hs->sample_item[*S] = item;
    (*S)++;
}

// Split prefill: the keys of prefill item i are the positions [0, start + n) of its sequence,
// gathered at key offset k0; its new tokens attend to [k0 + start, k0 + p] and its cached context
// to [k0, k0 + start).
static void add_split_prefill_keys(engine *e, const sched_item *it, sched_view v, int row0,
                                   int t_decode, int *keys) {
    host_step *hs = &e->hs;
    int bs = e->lim.block_size, k0 = *keys, end = it->start + it->n_tokens;
    for (int p = 0; p < end; p++) {
        hs->gather_slots[k0 + p] = v.blocks[p / bs] * bs + p % bs;
        hs->key_request[k0 + p] = it->req;
        hs->key_position[k0 + p] = p;
    }
    for (int j = 0; j < it->n_tokens; j++) {
        int r = row0 + j - t_decode, p = it->start + j;
        hs->new_begin[r] = k0 + it->start;
        hs->new_end[r] = k0 + p + 1;
        hs->ctx_begin[r] = k0;
        hs->ctx_end[r] = k0 + it->start;
    }
    *keys += end;
}

// Places count elements of `size` bytes next in p, copied from src on the host when src is not
// NULL, and returns where they sit on the device.
static void *pack(step_pack *p, const void *src, long count, size_t size) {
    size_t bytes = (size_t)count * size, room = step_bytes((size_t)count, size);
    if (p->used + room > p->cap)
        invar_die(INVAR_EXIT_SYSTEM, "engine: a step's arrays need over %zu bytes", p->cap);
    if (src && bytes) memcpy(p->host + p->used, src, bytes);
    void *at = (char *)p->device + p->used;
    p->used += room;
    return at;
}

// Where a device view of p sits in p's host side (the same offset).
static void *on_host(const step_pack *p, const void *device_view) {
    return p->host + ((const char *)device_view - (const char *)p->device);
}

// The device views and the one upload of a step's metadata; the results' views (top_k a row).
static void pack_step(engine *e, const step_shape *st, int n, int top_k) {
    host_step *hs = &e->hs;
    step_views *d = &e->dev;
    step_pack *in = &e->in, *out = &e->out;
    int prefill_rows = st->T - st->T_decode;
    // This step packs into the buffer the step before last went up from: that upload may still
    // read it when neither step sampled (prefill chunks), since only a download waits for the
    // device. Then wait before packing over it; the last step's buffer is left alone.
    e->in_turn ^= 1;
    in->host = e->in_hosts[e->in_turn];
    if (e->in_flight[e->in_turn]) {
        e->ops->sync(e->ops);
        e->in_flight[0] = e->in_flight[1] = false;
    }
    in->used = 0;
    d->ids = pack(in, hs->ids, st->T, sizeof(int32_t));
    d->pos = pack(in, hs->pos, st->T, sizeof(int32_t));
    d->slot = pack(in, hs->slot, st->T, sizeof(int32_t));
    d->token_seq = pack(in, hs->token_seq, st->T, sizeof(int32_t));
    d->block_table = pack(in, hs->block_table, (long)n * e->max_blocks_per_seq, sizeof(int32_t));
    d->seq_lens = pack(in, hs->seq_lens, n, sizeof(int32_t));
    d->sample_rows = pack(in, hs->sample_rows, st->S, sizeof(int32_t));
    d->temperature = pack(in, hs->temperature, st->S, sizeof(float));
    d->noise_seed = pack(in, hs->noise_seed, st->S, sizeof(uint64_t));
    d->sample_pos = pack(in, hs->sample_pos, st->S, sizeof(int32_t));
    d->gather_slots = pack(in, hs->gather_slots, st->keys, sizeof(int32_t));
    d->new_begin = pack(in, hs->new_begin, prefill_rows, sizeof(int32_t));
    d->new_end = pack(in, hs->new_end, prefill_rows, sizeof(int32_t));
    d->ctx_begin = pack(in, hs->ctx_begin, prefill_rows, sizeof(int32_t));
    d->ctx_end = pack(in, hs->ctx_end, prefill_rows, sizeof(int32_t));
    d->local_ids = d->ids;
    if (e->part.size > 1) {  // vocabulary-parallel lookup
        tp_range v = e->part.vocab;
        for (int t = 0; t < st->T; t++) {
            int32_t id = hs->ids[t];
            hs->local_ids[t] = id >= v.begin && id < v.begin + v.count ? id - v.begin : v.count;
        }
        d->local_ids = pack(in, hs->local_ids, st->T, sizeof(int32_t));
    }
    // Asynchronous where it can be: in->host is rewritten only two steps on, after a download or
    // the sync above, either of which follows the copy on the device. The device buffer is one:
    // the copy is queued after the last step's ops, which read it, so it waits for them there.
    if (in->used && host_async(e)) {
        e->ops->upload_async(e->ops, in->device, in->host, in->used);
        e->in_flight[e->in_turn] = true;
    } else if (in->used) {
        e->ops->upload(e->ops, in->device, in->host, in->used);
    }
    // The results: the same offsets on both sides, so the host reads them in place.
    out->used = 0;
    d->token = pack(out, NULL, st->S, sizeof(int32_t));
    d->token_logprob = pack(out, NULL, st->S, sizeof(float));
    d->topk_ids = pack(out, NULL, (long)st->S * top_k, sizeof(int32_t));
    d->topk_logprobs = pack(out, NULL, (long)st->S * top_k, sizeof(float));
    step_views *r = &e->host_out;
    r->token = on_host(out, d->token);
    r->token_logprob = on_host(out, d->token_logprob);
    r->topk_ids = on_host(out, d->topk_ids);
    r->topk_logprobs = on_host(out, d->topk_logprobs);
}

// Host-side metadata of one step (pack_step uploads it).
static step_shape build_step(engine *e, const engine_request *reqs, const sched_item *items,
                             int n) {
    host_step *hs = &e->hs;
    int bs = e->lim.block_size, B = e->max_blocks_per_seq;
    step_shape st = {.num_seqs = n};
    for (int i = 0; i < n; i++) {
        const engine_request *r = &reqs[items[i].req];
        sched_view v = scheduler_view(e->sched, items[i].req);
        int row0 = st.T;
        if (is_decode(&items[i]) && st.T_decode == st.T) st.T_decode++;
        for (int p = items[i].start; p < items[i].start + items[i].n_tokens; p++, st.T++) {
            hs->ids[st.T] = v.tokens[p];
            hs->pos[st.T] = p;
            hs->slot[st.T] = v.blocks[p / bs] * bs + p % bs;
            hs->token_seq[st.T] = i;
            hs->row_request[st.T] = items[i].req;
            bool last = p == items[i].start + items[i].n_tokens - 1;
            if ((r->prompt_logprobs && p < r->prompt_len) || (last && items[i].sample))
                add_sample_row(e, r, st.T, p, i, &st.S);
        }
        if (e->backend->path != ATTENTION_UNIFIED && row0 >= st.T_decode)
            add_split_prefill_keys(e, &items[i], v, row0, st.T_decode, &st.keys);
        memcpy(hs->block_table + (long)i * B, v.blocks, (size_t)v.n_blocks * sizeof(int32_t));
        int len = items[i].start + items[i].n_tokens;
        hs->seq_lens[i] = len;
        if (len > st.max_seq_len) st.max_seq_len = len;
    }
    st.decode_split_size = batch_scheduled_split_size(hs->seq_lens, n);
    for (int s = 0; s < st.S; s++) hs->sample_request[s] = items[hs->sample_item[s]].req;
    return st;
}

// ---------------------------------------------------------------------------------------------
// CUDA graphs: decode steps padded to a bucket
// ---------------------------------------------------------------------------------------------

// The bucket a step runs in, or -1 (as scheduled): a decode step (every item one token that
// samples), on one rank or on a set whose collectives graphs can hold, in the smallest bucket
// that holds it. A backend whose decode split follows the batch is left out: a graph would
// freeze the split of the step it was captured on.
static int graph_bucket(const engine *e, const step_shape *st, int n) {
    if (e->lim.n_graph_buckets == 0 || (e->part.size > 1 && !e->ops->graph_collectives)) return -1;
    if (e->backend->path == ATTENTION_BATCH_SCHEDULED_DECODE) return -1;
    if (st->T != n || st->T_decode != n || st->S != n || st->keys != 0) return -1;
    int cap = e->lim.max_num_seqs < e->lim.max_num_batched_tokens ? e->lim.max_num_seqs
                                                                  : e->lim.max_num_batched_tokens;
    for (int b = 0; b < e->lim.n_graph_buckets && e->lim.graph_buckets[b] <= cap; b++)
        if (e->lim.graph_buckets[b] >= n) return b;
    return -1;
}

// The attention's longest sequence for a padded step of bucket b whose longest is `need`: the
// bucket graph's own while it holds the step, else the next power of two from 64 (at most
// max_model_len), so a bucket is captured again a few times as its sequences grow, and its grid
// and split partials stay near the lengths it runs (max_model_len for every step would size
// them for the longest request the engine allows).
static int graph_seq_len(const engine *e, int b, int need) {
    if (e->graphs[b] && need <= e->graph_len[b]) return e->graph_len[b];
    int len = 64;
    while (len < need) len *= 2;
    return len < e->lim.max_model_len ? len : e->lim.max_model_len;
}

// Rows [st->T, rows) become padding: token 0 at position 0 of a sequence of its own whose one
// block is the dummy block, a greedy sample nobody reads. Every size the kernels are called with
// then follows the bucket alone, and the attention's longest sequence is `len` (the grid's split
// count; a row's own length still sets its splits).
static void pad_step(engine *e, step_shape *st, int rows, int len) {
    host_step *hs = &e->hs;
    int bs = e->lim.block_size, B = e->max_blocks_per_seq;
    for (int i = st->T; i < rows; i++) {
        hs->ids[i] = 0;
        hs->pos[i] = 0;
        hs->slot[i] = e->dummy_block * bs;
        hs->token_seq[i] = i;
        hs->row_request[i] = -1;
        for (int j = 0; j < B; j++) hs->block_table[(long)i * B + j] = e->dummy_block;
        hs->seq_lens[i] = 1;
        hs->sample_rows[i] = i;
        hs->temperature[i] = 0.0f;
        hs->noise_seed[i] = 0;
        hs->sample_pos[i] = 1;
        hs->sample_at[i] = 0;
        hs->sample_item[i] = -1;
        hs->sample_request[i] = -1;
    }
    st->T = st->T_decode = st->num_seqs = st->S = rows;
    st->max_seq_len = len;
}

typedef struct {
    engine *e;
    const step_shape *st;
    int top_k;
} forward_call;

static void forward_recorded(void *ctx) {
    const forward_call *f = ctx;
    engine_forward(f->e, f->st, f->top_k);
}

// A padded step: bucket b's graph replayed where the set has graphs and its graph is current
// (captured with this step's attention length, over the set's buffers as they are); otherwise
// the step runs call by call, which grows the set's buffers to the bucket's sizes, and (with
// graphs) the bucket's graph is captured after it, to be replayed from the next step.
static void forward_in_bucket(engine *e, const step_shape *st, int b, int top_k) {
    ops_set *o = e->ops;
    bool graphs = o->graph_capture && o->graph_launch && o->graph_release;
    e->stats.graph_steps++;
    if (graphs && e->graphs[b] && e->graph_len[b] == st->max_seq_len && o->graph_launch(o, e->graphs[b])) {
        e->stats.graph_replays++;
        return;
    }
    engine_forward(e, st, top_k);
    if (e->graphs[b]) o->graph_release(o, e->graphs[b]);
    e->graphs[b] = NULL;
    if (!graphs) return;
    forward_call f = {e, st, top_k};
    e->graphs[b] = o->graph_capture(o, forward_recorded, &f);
    e->graph_len[b] = st->max_seq_len;
}

static void copy_record(const step_views *r, int s, int top_k, engine_step_record *rec) {
    memset(rec, 0, sizeof *rec);
    rec->token = r->token[s];
    rec->logprob = r->token_logprob[s];
    memcpy(rec->topk_ids, r->topk_ids + (long)s * top_k, (size_t)top_k * sizeof(int32_t));
    memcpy(rec->topk_logprobs, r->topk_logprobs + (long)s * top_k, (size_t)top_k * sizeof(float));
}

static void record_samples(engine *e, const engine_request *reqs, const sched_item *items,
                           const step_shape *st, int top_k, engine_result *const *results,
                           int32_t *sampled) {
    ops_set *o = e->ops;
    host_step *hs = &e->hs;
    int S = st->S;
    if (e->out.used) o->download(o, e->out.host, e->out.device, e->out.used);
    e->in_flight[0] = e->in_flight[1] = false;  // the download waited for the device
    const step_views *r = &e->host_out;
    for (int s = 0; s < S; s++) {
        if (hs->sample_item[s] < 0) continue;  // a padding row
        int i = hs->sample_item[s], req = items[i].req, position = hs->sample_at[s];
        engine_result *res = results[req];
        if (reqs[req].prompt_logprobs && position < reqs[req].prompt_len) {
            copy_record(r, s, top_k, &res->prompt_steps[position]);
            if (position + 1 > res->n_prompt_steps) res->n_prompt_steps = position + 1;
        }
        if (items[i].sample && position == items[i].start + items[i].n_tokens - 1) {
            copy_record(r, s, top_k, &res->steps[res->n_steps++]);
            sampled[i] = r->token[s];
        }
    }
}

bool engine_begin(engine *e, const engine_sched *sched, char *err, int err_len) {
    if (sched->max_num_seqs > e->lim.max_num_seqs ||
        sched->max_num_batched_tokens > e->lim.max_num_batched_tokens) {
        snprintf(err, (size_t)err_len,
                 "schedule (max_num_seqs %d, max_num_batched_tokens %d) exceeds the engine's "
                 "limits (%d, %d)", sched->max_num_seqs, sched->max_num_batched_tokens,
                 e->lim.max_num_seqs, e->lim.max_num_batched_tokens);
        return false;
    }
    if (sched->top_k < 0 || sched->top_k > ENGINE_MAX_TOPK) {
        snprintf(err, (size_t)err_len, "top_k %d outside [0, %d]", sched->top_k, ENGINE_MAX_TOPK);
        return false;
    }
    e->in_session = false;
    if (!scheduler_start(e->sched, sched, err, err_len)) return false;
    const attention_backend *backend =
        sched->backend ? sched->backend : attention_backend_by_name("mla-unified");
    // A graph holds the backend's calls and the top-k it was captured with.
    if (backend != e->backend || sched->top_k != e->session.top_k) release_graphs(e);
    e->session = *sched;
    e->backend = backend;
    kv_cache_reset(e->cache, sched->prefix_caching);
    e->stats = (engine_stats){0};
    e->failed_request = -1;
    e->in_session = true;
    return true;
}

int engine_submit(engine *e, const engine_request *req, engine_result *result, char *err,
                  int err_len) {
    if (!e->in_session) {
        snprintf(err, (size_t)err_len, "engine_submit before engine_begin");
        return -1;
    }
    if (req->prompt_logprobs && !e->lim.prompt_logprobs) {
        snprintf(err, (size_t)err_len,
                 "request asks for prompt logprobs but the engine was not sized for them");
        return -1;
    }
    // The embedding gathers rows by token id with no bounds check of its own: an id outside the
    // vocabulary would read past the table (invar serve checks its requests; the API must too).
    // A prompt too long to ever run is left to scheduler_add's message, unread.
    for (int p = 0; p < req->prompt_len && req->prompt_len <= e->lim.max_model_len; p++)
        if (req->prompt[p] < 0 || req->prompt[p] >= e->cfg.vocab_size) {
            snprintf(err, (size_t)err_len, "prompt token %d at position %d is outside the "
                     "vocabulary [0, %d)", req->prompt[p], p, e->cfg.vocab_size);
            return -1;
        }
    int id = scheduler_add(e->sched, req, err, err_len);
    if (id < 0) return -1;
    if (id >= e->cap_reqs) {  // scheduler ids are dense from 0: grow alongside
        int cap = e->cap_reqs ? 2 * e->cap_reqs : 16;
        engine_request *reqs = realloc(e->reqs, (size_t)cap * sizeof *reqs);
        engine_result **results = reqs ? realloc(e->results, (size_t)cap * sizeof *results)
                                       : NULL;
        if (!reqs || !results)
            invar_die(INVAR_EXIT_SYSTEM, "out of memory for %d engine requests", cap);
        e->reqs = reqs;
        e->results = results;
        e->cap_reqs = cap;
    }
    e->reqs[id] = *req;
    e->results[id] = result;
    result->n_steps = 0;
    result->n_prompt_steps = 0;
    return id;
}

int engine_step(engine *e, char *err, int err_len) {
    sched_item *items = e->items;
    int n_items = scheduler_schedule(e->sched, items, err, err_len);
    if (n_items <= 0) return n_items;
    if (e->backend->path != ATTENTION_UNIFIED) decodes_first(items, n_items);
    step_shape shape = build_step(e, e->reqs, items, n_items);
    const int tokens = shape.T;  // the scheduled ones: padding to a bucket adds rows
    int bucket = graph_bucket(e, &shape, n_items);
    if (bucket >= 0)
        pad_step(e, &shape, e->lim.graph_buckets[bucket], graph_seq_len(e, bucket, shape.max_seq_len));
    pack_step(e, &shape, shape.num_seqs, e->session.top_k);
    if (bucket >= 0) forward_in_bucket(e, &shape, bucket, e->session.top_k);
    else engine_forward(e, &shape, e->session.top_k);
    for (int i = 0; i < n_items; i++) e->sampled[i] = -1;
    if (shape.S > 0)
        record_samples(e, e->reqs, items, &shape, e->session.top_k, e->results, e->sampled);
    // Every item that samples must have found its record: a token never sampled would feed
    // garbage to the next step's embedding. A kernel under test causes that (NaN logits, a
    // row the logprobs op never wrote): the run fails and the caller goes on. A rank of a
    // tensor-parallel group stops the process instead, as its peers would wait in the next
    // collective for it.
    for (int i = 0; i < n_items; i++)
        if (items[i].sample && (e->sampled[i] < 0 || e->sampled[i] >= e->cfg.vocab_size)) {
            snprintf(err, (size_t)err_len, "step %ld, request %d: sampled token %d outside the "
                     "vocabulary (%d ids): its logits or the logprobs op's output are broken",
                     e->stats.steps + scheduler_steps(e->sched), items[i].req, e->sampled[i],
                     e->cfg.vocab_size);
            if (e->part.size > 1)
                invar_die(INVAR_EXIT_SYSTEM, "engine: rank %d of %d, %s", e->part.rank,
                          e->part.size, err);
            e->failed_request = items[i].req;
            e->in_session = false;
            return -1;
        }
    // Counted before completion: a request that finishes here releases its slot.
    e->stats.tokens += tokens;
    for (int i = 0; i < n_items; i++)
        if (items[i].start < e->reqs[items[i].req].prompt_len) e->stats.prefill_chunks++;
    scheduler_complete(e->sched, items, n_items, e->sampled);
    return n_items;
}

int engine_failed_request(const engine *e) { return e->failed_request; }
bool engine_finished(const engine *e, int id) { return scheduler_finished(e->sched, id); }
bool engine_all_finished(const engine *e) { return scheduler_done(e->sched); }
bool engine_abort(engine *e, int id) { return scheduler_abort(e->sched, id); }
int engine_free_blocks(const engine *e) { return kv_cache_num_free(e->cache); }

bool engine_recycle(engine *e, char *err, int err_len) {
    if (!scheduler_done(e->sched)) {
        snprintf(err, (size_t)err_len, "engine_recycle with requests still running");
        return false;
    }
    long steps = e->stats.steps + scheduler_steps(e->sched);
    if (!scheduler_start(e->sched, &e->session, err, err_len)) return false;
    e->stats.steps = steps;  // the finished requests' steps stay counted
    return true;
}

engine_stats engine_session_stats(const engine *e) {
    engine_stats st = e->stats;
    st.steps += scheduler_steps(e->sched);
    st.prefix_queries = kv_cache_get_stats(e->cache)->queries;
    st.prefix_hits = kv_cache_get_stats(e->cache)->hits;
    return st;
}

bool engine_generate(engine *e, const engine_request *reqs, int n, const engine_sched *sched,
                     engine_result *results, engine_stats *stats, char *err, int err_len) {
    if (!engine_begin(e, sched, err, err_len)) return false;
    for (int i = 0; i < n; i++) {
        char why[384];
        if (engine_submit(e, &reqs[i], &results[i], why, sizeof why) < 0) {
            // The scheduler numbers requests as they join: request i is this call's i.
            snprintf(err, (size_t)err_len, "%s", why);
            e->in_session = false;
            return false;
        }
    }
    bool ok = true;
    while (!engine_all_finished(e))
        if (engine_step(e, err, err_len) < 0) {
            ok = false;
            break;
        }
    if (stats) *stats = engine_session_stats(e);
    e->in_session = false;
    return ok;
}
