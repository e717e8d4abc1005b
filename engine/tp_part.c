// engine/tp_part.c — a rank's part of the model (engine/tp_part.h).
#include "tp_part.h"

#include <stdio.h>   // snprintf

tp_range tp_split(int n, int rank, int T) {
    long begin = (long)n * rank / T, end = (long)n * (rank + 1) / T;
    return (tp_range){(int)begin, (int)(end - begin)};
}

static bool has_dense_layer(const model_config *cfg) {
    for (int i = 0; i < cfg->num_hidden_layers; i++)
        if (!model_layer_is_moe(cfg, i)) return true;
    return false;
}

bool tp_part_make(const model_config *cfg, int rank, int T, tp_part *out, char *err,
                  int err_len) {
    if (T < 1 || rank < 0 || rank >= T) {
        snprintf(err, (size_t)err_len, "tensor_parallel %d (rank %d): must be >= 1", T, rank);
        return false;
    }
    const struct { const char *field; int n; bool used; } counts[] = {
        {"num_attention_heads", cfg->num_attention_heads, true},
        {"intermediate_size", cfg->intermediate_size, has_dense_layer(cfg)},
        {"moe_intermediate_size", cfg->moe_intermediate_size, cfg->n_routed_experts > 0},
        {"vocab_size", cfg->vocab_size, true},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].used && counts[i].n < T) {
            snprintf(err, (size_t)err_len,
                     "%s %d is below tensor_parallel %d: a rank would hold none of it",
                     counts[i].field, counts[i].n, T);
            return false;
        }
    *out = (tp_part){
        .rank = rank,
        .size = T,
        .heads = tp_split(cfg->num_attention_heads, rank, T),
        .inter = tp_split(cfg->intermediate_size, rank, T),
        .moe_inter = tp_split(cfg->moe_intermediate_size, rank, T),
        .vocab = tp_split(cfg->vocab_size, rank, T),
    };
    return true;
}

model_config tp_part_local_config(const model_config *cfg, const tp_part *p) {
    model_config c = *cfg;
    c.num_attention_heads = p->heads.count;
    c.intermediate_size = p->inter.count;
    c.moe_intermediate_size = p->moe_inter.count;
    c.vocab_size = p->vocab.count;
    return c;
}
