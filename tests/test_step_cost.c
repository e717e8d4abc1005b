// tests/test_step_cost.c — the bench's roofline (harness/bench/step_cost.c): the weight bytes a
// decode step is charged are those of the tensors the engine really loads (counted through a
// weight source that records every read, on each named model with experts), routed experts
// charged per expert touched; the KV and logit terms grow as B x context and B x vocab; and the
// routing counter counts the distinct experts of exactly the decode-sized calls.
#include <stdarg.h>                       // cmocka
#include <stddef.h>                       // cmocka
#include <stdint.h>                       // cmocka
#include <setjmp.h>                       // cmocka
#include <cmocka.h>                       // assert_*, cmocka_unit_test

#include <stdbool.h>                      // bool
#include <stdlib.h>                       // free
#include <string.h>                       // strstr, strcmp

#include "../engine/engine.h"             // engine_create, engine_destroy, engine_limits
#include "../engine/model_config.h"       // model_config_by_name, model_layer_is_moe
#include "../engine/weights.h"            // weights_synthetic, weight_source
#include "../harness/bench/step_cost.h"   // decode_step_cost, route_count_*
#include "../kernels/cpu/inv_cpu.h"       // inv_cpu_create
#include "test_util.h"                    // test_fill_bf16, test_alloc, test_poison

// A weight source that forwards to the synthetic one and adds up what the engine reads.
typedef struct {
    weight_source base, *inner;
    double routed_bytes, embedding_bytes, other_bytes;
    double other_bf16_elems;  // of other_bytes: the bf16 tensors (fp32 ones are biases)
} counting_source;

static double count_elems(const int64_t *shape, int ndim) {
    double n = 1;
    for (int i = 0; i < ndim; i++) n *= (double)shape[i];
    return n;
}

static void add(counting_source *s, const char *name, double bytes) {
    if (strstr(name, ".mlp.experts.")) s->routed_bytes += bytes;
    else if (strcmp(name, "model.embed_tokens.weight") == 0) s->embedding_bytes += bytes;
    else s->other_bytes += bytes;
}

static bool counting_has(weight_source *w, const char *name) {
    counting_source *s = w->ctx;
    return s->inner->has(s->inner, name);
}
static void counting_bf16(weight_source *w, const char *name, const int64_t *shape, int ndim, bf16 *dst) {
    counting_source *s = w->ctx;
    add(s, name, 2.0 * count_elems(shape, ndim));
    if (!strstr(name, ".mlp.experts.") && strcmp(name, "model.embed_tokens.weight") != 0)
        s->other_bf16_elems += count_elems(shape, ndim);
    s->inner->read_bf16(s->inner, name, shape, ndim, dst);
}
static void counting_f32(weight_source *w, const char *name, const int64_t *shape, int ndim, float *dst) {
    counting_source *s = w->ctx;
    add(s, name, 4.0 * count_elems(shape, ndim));
    s->inner->read_f32(s->inner, name, shape, ndim, dst);
}

// Every tensor the engine loads for `name`, by kind.
static counting_source loaded_bytes(const char *name, model_config *cfg) {
    assert_true(model_config_by_name(name, cfg));
    counting_source s = {.inner = weights_synthetic(cfg, 7)};
    s.base = (weight_source){.ctx = &s, .has = counting_has, .read_bf16 = counting_bf16,
                             .read_f32 = counting_f32};
    ops_set *ops = inv_cpu_create(2);
    engine_limits lim = {.max_num_seqs = 2, .max_num_batched_tokens = 64, .max_model_len = 64,
                         .max_total_tokens = 128, .block_size = 16};
    engine *e = engine_create(cfg, &s.base, ops, &lim, 7);
    engine_destroy(e);
    ops->destroy(ops);
    s.inner->destroy(s.inner);
    return s;
}

static int moe_layers(const model_config *c) {
    int n = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) n += model_layer_is_moe(c, l);
    return n;
}

static void weight_bytes_are_the_loaded_tensors(void **state) {
    (void)state;
    static const char *const models[] = {"tiny", "tiny-v2", "tiny-reach", NULL};
    for (const char *const *m = models; *m; m++) {
        model_config c;
        counting_source s = loaded_bytes(*m, &c);
        assert_true(c.n_routed_experts > 0 && s.routed_bytes > 0);
        const double B = 3, D = c.hidden_size;
        // Context 0: weights, B embedding rows, the logits out and in.
        const double fixed = 2.0 * B * D + 8.0 * B * c.vocab_size;
        const double per_expert = s.routed_bytes / (c.n_routed_experts * (double)moe_layers(&c));
        for (int touched = 1; touched <= c.n_routed_experts; touched++) {
            step_cost cost = decode_step_cost(&c, (int)B, 0.0, touched);
            double expect = s.other_bytes + fixed + touched * per_expert * moe_layers(&c);
            if (c.tie_word_embeddings) expect += s.embedding_bytes;  // the lm_head reads it all
            if (cost.bytes != expect)
                fail_msg("%s: %d experts touched: %.0f bytes charged, the engine loads %.0f", *m,
                         touched, cost.bytes, expect);
        }
        // A prefill of one token is a decode step over a context of one; a prefill of P tokens
        // attends over P (P + 1) / 2 pairs, reads P latent rows and one logit row.
        step_cost p1 = prefill_cost(&c, 1, 2), d1 = decode_step_cost(&c, 1, 1.0, 2);
        assert_true(p1.bytes == d1.bytes && p1.flops == d1.flops);
        step_cost p100 = prefill_cost(&c, 100, 2);
        double latent = c.kv_lora_rank + c.qk_rope_head_dim;
        assert_true(p100.bytes - p1.bytes == 99.0 * (2.0 * D + 2.0 * latent * c.num_hidden_layers));
        step_cost one_tok = decode_step_cost(&c, 1, 0.0, 2);
        double head_flops = 2.0 * (D + (double)c.vocab_size * D);
        assert_true(p100.flops == 100.0 * (one_tok.flops - head_flops) + head_flops +
                                      2.0 * c.num_attention_heads * 5050.0 *
                                          (latent + c.kv_lora_rank) * c.num_hidden_layers);
        // More experts than exist touch them all.
        assert_true(decode_step_cost(&c, (int)B, 0.0, 1e9).bytes ==
                    decode_step_cost(&c, (int)B, 0.0, c.n_routed_experts).bytes);
        // The latent cache: (kv_lora_rank + rope) bf16 a position, a layer, a request.
        double kv = decode_step_cost(&c, (int)B, 100.0, 2).bytes - decode_step_cost(&c, (int)B, 0.0, 2).bytes;
        assert_true(kv == B * 100.0 * 2.0 * (c.kv_lora_rank + c.qk_rope_head_dim) * c.num_hidden_layers);
        // FLOPs: 2 a weight element a token, each token through its k experts, linear in B.
        double k_experts = c.num_experts_per_tok * per_expert / 2.0 * moe_layers(&c);
        double weights = s.other_bf16_elems + k_experts +
                         (c.tie_word_embeddings ? s.embedding_bytes / 2.0 : 0.0);
        step_cost one = decode_step_cost(&c, 1, 0.0, 2), many = decode_step_cost(&c, 5, 0.0, 2);
        if (one.flops != 2.0 * weights)
            fail_msg("%s: %.0f FLOPs a token, the loaded weights give %.0f", *m, one.flops, 2.0 * weights);
        assert_true(many.flops == 5.0 * one.flops);
        // Attention: scores over kv_lora_rank + rope and values over kv_lora_rank, every head.
        double attn = decode_step_cost(&c, 1, 10.0, 2).flops - one.flops;
        assert_true(attn == 2.0 * c.num_attention_heads * 10.0 *
                                (2.0 * c.kv_lora_rank + c.qk_rope_head_dim) * c.num_hidden_layers);
    }
}

// The counter sees the ids the inner set wrote: distinct experts of T = tokens calls only.
static void route_counter_counts_decode_calls(void **state) {
    (void)state;
    enum { T = 6, D = 32, E = 16, K = 3 };
    ops_set *inner = inv_cpu_create(2);
    route_count *r = route_count_wrap(inner, T);
    ops_set *o = route_count_set(r);
    bf16 *x = test_alloc(sizeof(bf16) * 64 * D), *gate = test_alloc(sizeof(bf16) * E * D);
    int32_t *ids = test_alloc(sizeof(int32_t) * 64 * K);
    float *weights = test_alloc(sizeof(float) * 64 * K);
    double expect = 0.0;
    for (int call = 0; call < 4; call++) {
        int tokens = call == 2 ? 40 : T;  // call 2: a prefill chunk, not counted
        test_fill_bf16(x, (long)tokens * D, 100 + (uint64_t)call, 1.0f);
        test_fill_bf16(gate, (long)E * D, 200 + (uint64_t)call, 1.0f);
        test_poison(ids, sizeof(int32_t) * 64 * K);
        moe_route_args a = {.topk_ids = ids, .topk_weights = weights, .x = x, .gate_w = gate,
                            .T = tokens, .D = D, .E = E, .k = K, .scoring = MOE_SCORING_SOFTMAX,
                            .topk_method = MOE_TOPK_GREEDY, .n_group = 1, .topk_group = 1,
                            .routed_scaling_factor = 1.0f};
        o->moe_route(o, &a);
        if (tokens != T) continue;
        bool seen[E] = {false};
        int distinct = 0;
        for (int i = 0; i < T * K; i++) {
            assert_true(ids[i] >= 0 && ids[i] < E);
            distinct += !seen[ids[i]];
            seen[ids[i]] = true;
        }
        expect += distinct / 3.0;  // three counted calls
    }
    double mean = route_count_mean(r);
    if (mean < expect - 1e-9 || mean > expect + 1e-9) fail_msg("mean %.4f, expected %.4f", mean, expect);
    assert_true(mean >= K && mean <= E);
    route_count_destroy(r);
    inner->destroy(inner);
    free(x);
    free(gate);
    free(ids);
    free(weights);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(weight_bytes_are_the_loaded_tensors),
        cmocka_unit_test(route_counter_counts_decode_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
