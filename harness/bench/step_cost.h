// harness/bench/step_cost.h — what one decode step of the engine must move and compute: the
// roofline an end-to-end decode rate is held against (bench_decode.csv's roofline columns).
//
// Bytes, counted once each: every weight the step reads in bf16 (attention, dense MLPs, routers
// and their bias, shared experts, the routed experts the step's tokens touched, norms, the
// lm_head; the embedding's B rows), the latent KV cache the batch attends over, and the fp32
// logits, written once and read once by the log-softmax. Activations are left out (a step's are
// a few MB against GBs of weights). FLOPs: 2 a weight element a token (the GEMMs, each token
// through its k routed experts; the norms' few elements too) and the absorbed attention over each token's context (scores over
// kv_lora_rank + qk_rope_head_dim, values over kv_lora_rank, every head). The roofline time is
// max(bytes / bandwidth, FLOPs / peak): a step can go no faster on that device.
#ifndef INVAR_HARNESS_BENCH_STEP_COST_H
#define INVAR_HARNESS_BENCH_STEP_COST_H

#include "../../engine/model_config.h" // model_config
#include "../../kernels/ops.h"        // ops_set

typedef struct {
    double bytes;
    double flops;
} step_cost;

// A step of the engine: `tokens` rows through every layer, whose attention covers `attended`
// (query, key) pairs in all and reads `kv_positions` cached latent rows once each (the absorbed
// form every backend's decode uses, and mla-unified's prefill), with `logit_rows` rows through
// the lm_head.
typedef struct {
    int tokens;
    double attended, kv_positions;
    int logit_rows;
} step_rows;

// The step when each MoE layer touches `experts_touched` distinct routed experts (at most
// n_routed_experts).
step_cost engine_step_cost(const model_config *c, const step_rows *r, double experts_touched);
// A decode step of B requests whose contexts average `context` tokens.
step_cost decode_step_cost(const model_config *c, int B, double context, double experts_touched);
// The prefill of one prompt of P tokens in one step, sampling its last position.
step_cost prefill_cost(const model_config *c, int P, double experts_touched);

// A wrapper set that counts, for every moe_route call of `tokens` tokens (a decode step of that
// batch), the distinct experts the call's tokens were routed to: one download of the routing a
// call, so a counted run is not a timed one. The engine computes the same bits through it.
typedef struct route_count route_count;
route_count *route_count_wrap(ops_set *inner, int tokens);
ops_set *route_count_set(route_count *r);
// Mean distinct experts a counted call; 0 when no call of that many tokens was seen.
double route_count_mean(const route_count *r);
void route_count_destroy(route_count *r);

#endif
