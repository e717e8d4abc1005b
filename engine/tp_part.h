// engine/tp_part.h — what one rank of a tensor-parallel group of T holds: its attention heads,
// its slices of the dense and expert intermediate dimensions, its rows of the vocabulary.
//
// Every count is split in balanced contiguous ranges (rank r gets [n*r/T, n*(r+1)/T)), so
// uneven shards are allowed (24 heads or 8, T = 3 alike); a count below T would leave a rank
// with nothing to compute and is refused, naming the field.
#ifndef INVAR_ENGINE_TP_PART_H
#define INVAR_ENGINE_TP_PART_H

#include <stdbool.h>         // bool
#include "model_config.h"    // model_config

typedef struct {
    int begin, count;
} tp_range;

typedef struct {
    int rank, size;
    tp_range heads;          // of num_attention_heads
    tp_range inter;          // of intermediate_size (dense MLP layers)
    tp_range moe_inter;      // of moe_intermediate_size, every routed expert alike; the shared
                             // experts' n_shared * moe_intermediate_size rows are split as
                             // n_shared times this range
    tp_range vocab;          // of vocab_size (embedding rows, lm_head rows)
} tp_part;

tp_range tp_split(int n, int rank, int T);

// Rank `rank`'s part of cfg; false (why in err) when T < 1 or a count is below T.
bool tp_part_make(const model_config *cfg, int rank, int T, tp_part *out, char *err, int err_len);

// cfg with this rank's counts: the heads, intermediate sizes and vocabulary the forward pass
// sizes its buffers and GEMMs by.
model_config tp_part_local_config(const model_config *cfg, const tp_part *p);

#endif
