// harness/bench/step_cost.c — a decode step's bytes and FLOPs, and the routing counter
// (harness/bench/step_cost.h).
#include "step_cost.h"

#include <stdbool.h>                 // bool
#include <stdint.h>                  // int32_t
#include <stdlib.h>                  // free

#include "../../common/check.h"      // invar_calloc, invar_die
#include "../../sets/ops_wrapper.h"  // ops_wrapper, ops_wrapper_init

enum { BF16_BYTES = 2, F32_BYTES = 4 };

step_cost engine_step_cost(const model_config *c, const step_rows *r, double experts_touched) {
    const double D = c->hidden_size, H = c->num_attention_heads;
    const double qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    const double latent = c->kv_lora_rank + c->qk_rope_head_dim;
    // Weights one token multiplies by (counted for FLOPs), and those the step reads (bytes).
    double attn = c->q_lora_rank ? D * c->q_lora_rank + c->q_lora_rank * H * qk + c->q_lora_rank
                                 : D * H * qk;
    attn += D * latent + c->kv_lora_rank +                                      // kv_a, its norm
            (double)c->kv_lora_rank * H * (c->qk_nope_head_dim + c->v_head_dim) +  // kv_b
            H * c->v_head_dim * D + 2 * D;                                      // o_proj, 2 norms
    const double expert = 3.0 * D * c->moe_intermediate_size;  // gate, up, down
    double read = 0.0, per_token = 0.0, f32_read = 0.0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        read += attn;
        per_token += attn;
        if (!model_layer_is_moe(c, l)) {
            read += 3.0 * D * c->intermediate_size;
            per_token += 3.0 * D * c->intermediate_size;
            continue;
        }
        double touched = experts_touched < c->n_routed_experts ? experts_touched
                                                               : c->n_routed_experts;
        double router = (double)c->n_routed_experts * D;
        double shared = expert * c->n_shared_experts;
        read += router + shared + touched * expert;
        per_token += router + shared + c->num_experts_per_tok * expert;
        if (c->topk_method == MOE_TOPK_NOAUX_TC) f32_read += c->n_routed_experts;  // its bias
    }
    const double head = D + (double)c->vocab_size * D;  // final norm, lm_head: logit rows only
    read += head;
    step_cost s;
    s.bytes = BF16_BYTES * read + F32_BYTES * f32_read + BF16_BYTES * r->tokens * D  // embedding
              + BF16_BYTES * r->kv_positions * latent * c->num_hidden_layers      // KV cache
              + 2.0 * F32_BYTES * (double)r->logit_rows * c->vocab_size;        // logits out, in
    const double attention = 2.0 * H * r->attended * (latent + c->kv_lora_rank) * c->num_hidden_layers;
    s.flops = 2.0 * r->tokens * per_token + 2.0 * r->logit_rows * head + attention;
    return s;
}

step_cost decode_step_cost(const model_config *c, int B, double context, double experts_touched) {
    const step_rows r = {.tokens = B, .attended = B * context, .kv_positions = B * context,
                         .logit_rows = B};
    return engine_step_cost(c, &r, experts_touched);
}

step_cost prefill_cost(const model_config *c, int P, double experts_touched) {
    const step_rows r = {.tokens = P, .attended = P * (P + 1.0) / 2.0, .kv_positions = P,
                         .logit_rows = 1};
    return engine_step_cost(c, &r, experts_touched);
}

// --- the routing counter -------------------------------------------------------------------------

struct route_count {
    ops_wrapper wrap;  // first: the engine calls through wrap.base
    int tokens;
    long calls;
    double distinct;
    int32_t *ids;
    bool *seen;
};

static void count_moe_route(ops_set *ops, const moe_route_args *a) {
    route_count *r = (route_count *)ops;
    ops_set *inner = r->wrap.inner;
    inner->moe_route(inner, a);
    if (a->T != r->tokens) return;  // a prefill chunk
    long n = (long)a->T * a->k;
    r->ids = invar_realloc(r->ids, (size_t)n * sizeof *r->ids, "routing ids");
    r->seen = invar_realloc(r->seen, (size_t)a->E * sizeof *r->seen, "routing marks");
    inner->download(inner, r->ids, a->topk_ids, (size_t)n * sizeof *r->ids);
    for (int e = 0; e < a->E; e++) r->seen[e] = false;
    int distinct = 0;
    for (long i = 0; i < n; i++) {
        int32_t e = r->ids[i];
        if (e < 0 || e >= a->E)
            invar_die(INVAR_EXIT_SYSTEM, "bench: moe_route wrote expert %d of %d", (int)e, a->E);
        distinct += !r->seen[e];
        r->seen[e] = true;
    }
    r->calls++;
    r->distinct += distinct;
}

// The wrapper only: the inner set stays its owner's.
static void count_destroy(ops_set *ops) { route_count_destroy((route_count *)ops); }

route_count *route_count_wrap(ops_set *inner, int tokens) {
    route_count *r = invar_calloc(1, sizeof *r, "the routing counter");
    ops_wrapper_init(&r->wrap, inner);
    r->wrap.base.moe_route = count_moe_route;
    r->wrap.base.destroy = count_destroy;
    r->wrap.base.open_group = NULL;  // one rank only
    r->tokens = tokens;
    return r;
}

ops_set *route_count_set(route_count *r) { return &r->wrap.base; }

double route_count_mean(const route_count *r) { return r->calls ? r->distinct / r->calls : 0.0; }

void route_count_destroy(route_count *r) {
    free(r->ids);
    free(r->seen);
    free(r);
}
