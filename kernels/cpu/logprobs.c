// kernels/cpu/logprobs.c — batch-invariant log-softmax, sampling and top-k (ops.h,
// logprobs_args). One row is one unit of work:
//   max over V; sum of exp(x − max) in the lanes.h order (8 lanes by id mod 8, fixed tree,
//   tail); lse = max + log(sum); logprob = x − lse.
//   token: argmax of x (temperature 0) or of x / temperature + invar_gumbel_noise(seed, pos, id);
//   lower id on ties.
//   top-k: ranked by logit (descending, lower id first on ties) — the exact logprob order,
//   which x − lse rounded to fp32 could blur into false ties.
//   A NaN is never a candidate, as on CUDA: a row of NaN logits samples id -1 with a NaN logprob
//   (the engine refuses it as an error row) and top-k slots left empty hold id -1 and -inf.
#include <math.h>            // expf, logf, INFINITY, NAN
#include <stdbool.h>         // bool

#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "../../common/check.h"        // invar_die
#include "cpu_ctx.h"         // cpu_ctx
#include "inv_cpu_ops.h"     // inv_cpu_logprobs
#include "lanes.h"           // lanes_combine8
#include "../../common/thread_pool.h"     // thread_pool_for
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

typedef struct {
    const logprobs_args *a;
} logprobs_job;

static float log_sum_exp(const float *x, int V) {
    float max = -INFINITY;
    for (int v = 0; v < V; v++) max = x[v] > max ? x[v] : max;
    float lane[8] = {0};
    int v = 0;
    for (; v + 8 <= V; v += 8)
        for (int l = 0; l < 8; l++) lane[l] += expf(x[v + l] - max);
    float sum = lanes_combine8(lane);
    for (; v < V; v++) sum += expf(x[v] - max);
    return max + logf(sum);
}

// Ids ascend, so a later id beats the best so far only by a larger key, or by an equal one when
// there is no best yet (a row of -inf still samples its first id); a NaN key never beats.
static bool beats(float key, float best_key, int best) {
    return key > best_key || (key == best_key && best < 0);
}

static int sample(const logprobs_args *a, long r, const float *x) {
    float temperature = a->temperature[r];
    int best = -1;
    float best_key = -INFINITY;
    for (int v = 0; v < a->V; v++) {
        float key = temperature == 0.0f
                        ? x[v]
                        : x[v] / temperature + invar_gumbel_noise(a->noise_seed[r], a->position[r], v);
        if (beats(key, best_key, best)) {
            best = v;
            best_key = key;
        }
    }
    return best;
}

// ids[0..k) = the k largest x, descending, lower id first on ties (insertion into a sorted list);
// NaNs skipped, the slots they leave empty -1.
static void top_k(const float *x, int V, int k, int32_t *ids) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        if (isnan(x[v])) continue;
        if (n == k && !(x[v] > x[ids[k - 1]])) continue;   // not better than the worst kept
        int i = n < k ? n++ : k - 1;
        while (i > 0 && x[v] > x[ids[i - 1]]) {
            ids[i] = ids[i - 1];
            i--;
        }
        ids[i] = v;
    }
    for (; n < k; n++) ids[n] = -1;
}

static void logprobs_rows(void *arg, long begin, long end) {
    const logprobs_args *a = ((const logprobs_job *)arg)->a;
    for (long r = begin; r < end; r++) {
        const float *x = a->logits + r * a->V;
        float lse = log_sum_exp(x, a->V);
        int token = sample(a, r, x);
        a->token[r] = token;
        a->token_logprob[r] = token >= 0 ? x[token] - lse : NAN;
        if (a->k > 0) {
            int32_t *ids = a->topk_ids + r * a->k;
            top_k(x, a->V, a->k, ids);
            for (int j = 0; j < a->k; j++)
                a->topk_logprobs[r * a->k + j] = ids[j] >= 0 ? x[ids[j]] - lse : -INFINITY;
        }
    }
}

void inv_cpu_logprobs(ops_set *ops, const logprobs_args *a) {
    if (a->V < 1 || a->k < 0 || a->k > a->V)
        invar_die(INVAR_EXIT_INPUT, "logprobs: bad shape (V=%d k=%d)", a->V, a->k);
    long order[] = {LANES, a->V};  // a row's log-sum-exp in lanes over V, one thread a row
    long shape[] = {a->V, a->k};
    fingerprint_note(ops->fingerprints, "logprobs", fingerprint_order(shape, 2),
                     fingerprint_order(order, 2), "row");
    const cpu_ctx *ctx = ops->ctx;
    logprobs_job j = {a};
    thread_pool_for(ctx->pool, a->R, logprobs_rows, &j);
}
