// engine/model_config.h — DeepSeek-V2/V3 model configuration, with Hugging Face config.json
// field names, and the named configs shipped with invar (tiny, tiny-v2, tiny-tp, tiny-reach,
// tiny-long, small, v2-lite, v3).
#ifndef INVAR_ENGINE_MODEL_CONFIG_H
#define INVAR_ENGINE_MODEL_CONFIG_H

#include <stdbool.h>       // bool
#include "../kernels/ops.h" // enum moe_scoring, enum moe_topk_method

typedef struct {
    char name[64];
    int vocab_size;
    int hidden_size;
    int intermediate_size;        // dense MLP
    int moe_intermediate_size;    // one routed expert; shared experts use n_shared_experts times it
    int num_hidden_layers;
    int num_attention_heads;
    int q_lora_rank;              // 0: q_proj (config.json's null)
    int kv_lora_rank;
    int qk_nope_head_dim;
    int qk_rope_head_dim;
    int v_head_dim;
    int n_routed_experts;         // 0: every layer dense
    int n_shared_experts;
    int num_experts_per_tok;
    int first_k_dense_replace;
    int moe_layer_freq;
    int n_group, topk_group;
    enum moe_topk_method topk_method;
    enum moe_scoring scoring_func;
    bool norm_topk_prob;
    double routed_scaling_factor;
    double rms_norm_eps;
    double rope_theta;
    int max_position_embeddings;
    bool rope_interleave;         // DeepSeek's interleaved rope pairs (true in every checkpoint)
    // rope_scaling / rope_parameters (YaRN); rope_yarn false: plain RoPE
    bool rope_yarn;
    double rope_factor, rope_beta_fast, rope_beta_slow, rope_mscale, rope_mscale_all_dim;
    int rope_original_max_position_embeddings;
    bool tie_word_embeddings;
} model_config;

// Named configs: NULL terminated list of names, and lookup (false when unknown).
const char *const *model_config_names(void);
bool model_config_by_name(const char *name, model_config *out);

// Whether layer `layer` is MoE (else dense MLP), as Hugging Face decides it.
bool model_layer_is_moe(const model_config *c, int layer);

// softmax_scale of the attention, with YaRN's mscale² when rope scaling sets mscale_all_dim.
double model_softmax_scale(const model_config *c);

// cos/sin tables [positions, rope_dim/2] for RoPE with YaRN (frequency blend and mscale).
void model_rope_tables(const model_config *c, int positions, float *cos_out, float *sin_out);

// Caps on a config's sizes, far above any published model (DeepSeek-V3: 61 layers, 256 routed
// experts, vocab 129280, hidden 7168), so only a corrupt or hostile config meets them. They keep
// every tensor's element count and the tensor count well inside 64-bit arithmetic. README
// ("Checkpoints") lists them.
#define MODEL_MAX_LAYERS 65536       // num_hidden_layers
#define MODEL_MAX_EXPERTS 65536      // n_routed_experts, n_shared_experts
#define MODEL_MAX_HEADS 65536        // num_attention_heads
#define MODEL_MAX_VOCAB (1 << 24)    // vocab_size
#define MODEL_MAX_DIM (1 << 20)      // hidden and intermediate sizes, LoRA ranks, head dims

// Checks the config for values the engine cannot run; on a problem writes a message naming
// the field into `err` and returns false.
bool model_config_validate(const model_config *c, char *err, int err_len);

#endif
