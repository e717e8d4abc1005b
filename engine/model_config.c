// engine/model_config.c — named DeepSeek configs, YaRN RoPE tables and the softmax scale,
// following Hugging Face's DeepseekV2/V3 modeling code.
#include "model_config.h"

#include <math.h>    // log, pow, floor, ceil, cos, sin, sqrt
#include <stdio.h>   // snprintf
#include <string.h>  // strcmp, memset, snprintf

// ---------------------------------------------------------------------------------------------
// Named configs
// ---------------------------------------------------------------------------------------------

// DeepSeek-V2's routing: softmax scores, greedy top-k over all experts, the chosen weights
// neither normalized nor scaled.
static void v2_routing(model_config *c) {
    c->n_group = 1;
    c->topk_group = 1;
    c->topk_method = MOE_TOPK_GREEDY;
    c->scoring_func = MOE_SCORING_SOFTMAX;
    c->norm_topk_prob = false;
    c->routed_scaling_factor = 1.0;
}

// Every preset starts here: V2 routing, plain RoPE, Hugging Face's defaults.
static void base_config(model_config *c) {
    memset(c, 0, sizeof *c);
    c->moe_layer_freq = 1;
    v2_routing(c);
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 10000.0;
    c->rope_interleave = true;
}

static void yarn(model_config *c, double factor, int original_max) {
    c->rope_yarn = true;
    c->rope_factor = factor;
    c->rope_beta_fast = 32;
    c->rope_beta_slow = 1;
    c->rope_mscale = 0.707;
    c->rope_mscale_all_dim = 0.707;
    c->rope_original_max_position_embeddings = original_max;
}

// DeepSeek-V3's routing: sigmoid scores, group-limited top-k with the bias (noaux_tc), the
// chosen weights normalized and scaled.
static void v3_routing(model_config *c, int n_group, int topk_group, double scaling) {
    c->n_group = n_group;
    c->topk_group = topk_group;
    c->topk_method = MOE_TOPK_NOAUX_TC;
    c->scoring_func = MOE_SCORING_SIGMOID;
    c->norm_topk_prob = true;
    c->routed_scaling_factor = scaling;
}

// The MoE layout: routed experts, shared experts, experts per token, and the dense layers
// before the first MoE layer.
static void moe(model_config *c, int routed, int shared, int per_token, int first_dense) {
    c->n_routed_experts = routed;
    c->n_shared_experts = shared;
    c->num_experts_per_tok = per_token;
    c->first_k_dense_replace = first_dense;
}

// The MLA dimensions: q_lora rank (0: q_proj), the latent (kv_lora) rank, the no-rope and rope
// parts of a query/key head, the value head.
static void mla(model_config *c, int q_lora, int kv_lora, int nope, int rope, int v) {
    c->q_lora_rank = q_lora;
    c->kv_lora_rank = kv_lora;
    c->qk_nope_head_dim = nope;
    c->qk_rope_head_dim = rope;
    c->v_head_dim = v;
}

// The sizes: vocabulary, hidden, dense MLP, one routed expert, layers, attention heads.
static void sizes(model_config *c, int vocab, int hidden, int inter, int moe_inter, int layers, int heads) {
    c->vocab_size = vocab;
    c->hidden_size = hidden;
    c->intermediate_size = inter;
    c->moe_intermediate_size = moe_inter;
    c->num_hidden_layers = layers;
    c->num_attention_heads = heads;
}

// CI-sized, DeepSeek-V3 flavoured: q_lora, sigmoid + group-limited routing with bias, YaRN.
static void config_tiny(model_config *c) {
    base_config(c);
    sizes(c, 512, 256, 512, 128, 4, 4);
    mla(c, 96, 64, 32, 16, 32);
    moe(c, 8, 1, 2, 1);
    v3_routing(c, 4, 2, 2.5);
    c->max_position_embeddings = 4096;
    yarn(c, 4.0, 1024);
}

// CI-sized, DeepSeek-V2 flavoured: tiny with q_proj (no q_lora), V2 routing, plain RoPE.
static void config_tiny_v2(model_config *c) {
    config_tiny(c);
    c->q_lora_rank = 0;
    v2_routing(c);
    c->rope_yarn = false;
}

// The tiny model for tensor parallelism at T = 2, 3, 4, 8 (cases/tp.ini): 8 heads, so every rank
// holds at least one; the intermediate sizes divide by 24 (even parts at every T), the heads and
// the vocabulary split unevenly at T = 3 (3/3/2 heads, 170/171/171 rows), so both kinds of
// part are exercised. Two shared experts, as V2 and V2-Lite have: a slice's shared gate/up rows
// are then twice its range of moe_intermediate, an offset one shared expert cannot get wrong.
static void config_tiny_tp(model_config *c) {
    config_tiny(c);
    c->num_attention_heads = 8;
    c->intermediate_size = 384;
    c->moe_intermediate_size = 96;
    c->n_shared_experts = 2;
}

// The tiny model grown past the CPU kernels' size thresholds that the CI's tiny model stays
// under (cases/reach.ini): a vocabulary over 4,096 (the logprobs' chunked paths), a dense MLP
// whose down projection has K = 1,024 (GEMM K past 512), 16 routed experts with 6 a token (a
// combine of k >= 3 terms has an order to get wrong), V2's softmax routing; still a few
// hundred thousand weights a layer.
static void config_tiny_reach(model_config *c) {
    config_tiny(c);
    sizes(c, 8192, 256, 1024, 128, 4, 4);
    moe(c, 16, 1, 6, 1);
    v2_routing(c);
}

// The tiny model with contexts to 8,192 positions (YaRN factor 8 from 1,024; cases/long-context.ini):
// a sequence past 4,096 keys beside shorter ones, which the tiny model's 4,096 cannot hold. Two
// layers (one dense, one MoE) of two heads: a long prefill's attention is most of a run's time.
static void config_tiny_long(model_config *c) {
    config_tiny(c);
    c->num_hidden_layers = 2;
    c->num_attention_heads = 2;
    c->max_position_embeddings = 8192;
    yarn(c, 8.0, 1024);
}

// Real MLA head dimensions (the 576/512 latent layout), few layers.
static void config_small(model_config *c) {
    base_config(c);
    sizes(c, 8192, 1024, 2816, 384, 3, 16);
    mla(c, 384, 512, 128, 64, 128);
    moe(c, 16, 1, 4, 1);
    v3_routing(c, 4, 2, 2.5);
    c->max_position_embeddings = 16384;
    yarn(c, 40.0, 4096);
}

// DeepSeek-V2-Lite's real dimensions (27 layers in the checkpoint; 4 here to keep runs short),
// V2 routing (the base's).
static void config_v2_lite(model_config *c) {
    base_config(c);
    sizes(c, 102400, 2048, 10944, 1408, 4, 16);
    mla(c, 0, 512, 128, 64, 128);
    moe(c, 64, 2, 6, 1);
    c->max_position_embeddings = 163840;
    yarn(c, 40.0, 4096);
}

// DeepSeek-V3's real dimensions (its config.json: 61 layers, the first 3 dense), with 3 layers
// here, 1 dense and 2 MoE: about 51 GB of bf16 weights, which an 80 GB GPU holds with room for
// the KV cache and activations (a MoE layer's 256 experts alone are 22.5 GB).
static void config_v3(model_config *c) {
    base_config(c);
    sizes(c, 129280, 7168, 18432, 2048, 3, 128);
    mla(c, 1536, 512, 128, 64, 128);
    moe(c, 256, 1, 8, 1);
    v3_routing(c, 8, 4, 2.5);
    c->max_position_embeddings = 163840;
    yarn(c, 40.0, 4096);
    c->rope_mscale = 1.0;
    c->rope_mscale_all_dim = 1.0;
}

static const struct {
    const char *name;
    void (*make)(model_config *);
} named_configs[] = {
    {"tiny", config_tiny},
    {"tiny-v2", config_tiny_v2},
    {"tiny-tp", config_tiny_tp},
    {"tiny-reach", config_tiny_reach},
    {"tiny-long", config_tiny_long},
    {"small", config_small},
    {"v2-lite", config_v2_lite},
    {"v3", config_v3},
};
#define N_NAMED (sizeof named_configs / sizeof named_configs[0])

const char *const *model_config_names(void) {
    static const char *names[N_NAMED + 1];
    for (size_t i = 0; i < N_NAMED; i++) names[i] = named_configs[i].name;
    names[N_NAMED] = NULL;
    return names;
}

bool model_config_by_name(const char *name, model_config *out) {
    for (size_t i = 0; i < N_NAMED; i++) {
        if (strcmp(named_configs[i].name, name) == 0) {
            named_configs[i].make(out);
            snprintf(out->name, sizeof out->name, "%s", name);
            return true;
        }
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Layer kinds, softmax scale, RoPE
// ---------------------------------------------------------------------------------------------

bool model_layer_is_moe(const model_config *c, int layer) {
    return c->n_routed_experts > 0 && layer >= c->first_k_dense_replace &&
           layer % (c->moe_layer_freq > 0 ? c->moe_layer_freq : 1) == 0;
}

static double yarn_get_mscale(double scale, double mscale) {
    if (scale <= 1.0) return 1.0;
    return 0.1 * mscale * log(scale) + 1.0;
}

double model_softmax_scale(const model_config *c) {
    double scale = 1.0 / sqrt((double)(c->qk_nope_head_dim + c->qk_rope_head_dim));
    if (c->rope_yarn && c->rope_mscale_all_dim != 0.0) {
        double m = yarn_get_mscale(c->rope_factor, c->rope_mscale_all_dim);
        scale *= m * m;
    }
    return scale;
}

static double yarn_correction_dim(double rotations, int dim, double base, int max_pos) {
    return (dim * log(max_pos / (rotations * 2.0 * M_PI))) / (2.0 * log(base));
}

// Inverse frequencies as DeepseekV2YarnRotaryEmbedding computes them (in fp32 there).
static void rope_inv_freq(const model_config *c, float *inv_freq) {
    int dim = c->qk_rope_head_dim, half = dim / 2;
    double base = c->rope_theta;
    if (!c->rope_yarn) {
        for (int i = 0; i < half; i++) inv_freq[i] = (float)(1.0 / pow(base, (2.0 * i) / dim));
        return;
    }
    int orig = c->rope_original_max_position_embeddings;
    double low = floor(yarn_correction_dim(c->rope_beta_fast, dim, base, orig));
    double high = ceil(yarn_correction_dim(c->rope_beta_slow, dim, base, orig));
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < half; i++) {
        float extra = (float)(1.0 / pow(base, (2.0 * i) / dim));
        float inter = (float)(1.0 / (c->rope_factor * pow(base, (2.0 * i) / dim)));
        double ramp = (i - low) / (high - low);
        if (ramp < 0) ramp = 0;
        if (ramp > 1) ramp = 1;
        float mask = (float)(1.0 - ramp);
        inv_freq[i] = inter * (1.0f - mask) + extra * mask;
    }
}

void model_rope_tables(const model_config *c, int positions, float *cos_out, float *sin_out) {
    int half = c->qk_rope_head_dim / 2;
    float inv_freq[512];
    rope_inv_freq(c, inv_freq);
    float mscale = 1.0f;
    if (c->rope_yarn)
        mscale = (float)(yarn_get_mscale(c->rope_factor, c->rope_mscale) /
                         yarn_get_mscale(c->rope_factor, c->rope_mscale_all_dim));
    for (int p = 0; p < positions; p++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)p * inv_freq[i];
            cos_out[(long)p * half + i] = cosf(angle) * mscale;
            sin_out[(long)p * half + i] = sinf(angle) * mscale;
        }
    }
}

bool model_config_validate(const model_config *c, char *err, int err_len) {
#define REQUIRE(cond, field, what)                                                       \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            snprintf(err, (size_t)err_len, "field '%s' %s", field, what);                \
            return false;                                                                \
        }                                                                                \
    } while (0)
    REQUIRE(c->vocab_size > 0, "vocab_size", "must be positive");
    REQUIRE(c->hidden_size > 0, "hidden_size", "must be positive");
    REQUIRE(c->num_hidden_layers > 0, "num_hidden_layers", "must be positive");
    REQUIRE(c->num_attention_heads > 0, "num_attention_heads", "must be positive");
    REQUIRE(c->q_lora_rank >= 0, "q_lora_rank", "must be null or positive");
    REQUIRE(c->kv_lora_rank > 0, "kv_lora_rank", "must be positive");
    REQUIRE(c->qk_nope_head_dim > 0, "qk_nope_head_dim", "must be positive");
    REQUIRE(c->qk_rope_head_dim > 0 && c->qk_rope_head_dim % 2 == 0 && c->qk_rope_head_dim <= 1024,
            "qk_rope_head_dim", "must be even and at most 1024");
    REQUIRE(c->v_head_dim > 0, "v_head_dim", "must be positive");
    REQUIRE(c->intermediate_size > 0 || c->first_k_dense_replace == 0 || c->n_routed_experts > 0,
            "intermediate_size", "must be positive");
    REQUIRE(c->rms_norm_eps > 0, "rms_norm_eps", "must be positive");
    REQUIRE(c->rope_theta > 0, "rope_theta", "must be positive");
    REQUIRE(c->max_position_embeddings > 0, "max_position_embeddings", "must be positive");
    if (c->n_routed_experts > 0) {
        REQUIRE(c->moe_intermediate_size > 0, "moe_intermediate_size", "must be positive");
        REQUIRE(c->num_experts_per_tok > 0 && c->num_experts_per_tok <= c->n_routed_experts &&
                    c->num_experts_per_tok <= 64,
                "num_experts_per_tok", "must be in [1, min(n_routed_experts, 64)]");
        REQUIRE(c->n_group > 0 && c->n_routed_experts % c->n_group == 0, "n_group",
                "must divide n_routed_experts");
        REQUIRE(c->topk_group > 0 && c->topk_group <= c->n_group, "topk_group",
                "must be in [1, n_group]");
        REQUIRE(c->moe_layer_freq > 0, "moe_layer_freq", "must be positive");
        REQUIRE(c->n_shared_experts >= 0, "n_shared_experts", "must not be negative");
    }
    // The caps (model_config.h), checked here so that every config the engine sees, named or
    // read from config.json, keeps its size arithmetic in range.
#define CAP(value, cap, field)                                                           \
    do {                                                                                 \
        if ((value) > (cap)) {                                                           \
            snprintf(err, (size_t)err_len, "field '%s' = %d exceeds the cap %d (far above " \
                     "any real model; see README, Checkpoints)", field, (value), (cap));     \
            return false;                                                                \
        }                                                                                \
    } while (0)
    CAP(c->num_hidden_layers, MODEL_MAX_LAYERS, "num_hidden_layers");
    CAP(c->n_routed_experts, MODEL_MAX_EXPERTS, "n_routed_experts");
    CAP(c->n_shared_experts, MODEL_MAX_EXPERTS, "n_shared_experts");
    CAP(c->num_attention_heads, MODEL_MAX_HEADS, "num_attention_heads");
    CAP(c->vocab_size, MODEL_MAX_VOCAB, "vocab_size");
    CAP(c->hidden_size, MODEL_MAX_DIM, "hidden_size");
    CAP(c->intermediate_size, MODEL_MAX_DIM, "intermediate_size");
    CAP(c->moe_intermediate_size, MODEL_MAX_DIM, "moe_intermediate_size");
    CAP(c->q_lora_rank, MODEL_MAX_DIM, "q_lora_rank");
    CAP(c->kv_lora_rank, MODEL_MAX_DIM, "kv_lora_rank");
    CAP(c->qk_nope_head_dim, MODEL_MAX_DIM, "qk_nope_head_dim");
    CAP(c->v_head_dim, MODEL_MAX_DIM, "v_head_dim");
#undef CAP
    if (c->rope_yarn) {
        REQUIRE(c->rope_factor > 0, "rope_scaling.factor", "must be positive");
        REQUIRE(c->rope_original_max_position_embeddings > 0,
                "rope_scaling.original_max_position_embeddings", "must be positive");
    }
    return true;
#undef REQUIRE
}
