// reference/cpu/logprobs_split_vocab.c — log-softmax, sampling and top-k with the
// log-sum-exp split over the vocabulary: few rows cannot fill the threads, so each row's
// vocabulary is cut into chunks (more chunks for fewer rows), each chunk's (max, sum of
// exponentials) merged pairwise. A row's normalizer, hence every logprob, changes with R.
// Sampling and top-k are selections, not sums: they follow ops.h exactly.
#include "ref_cpu_ops.h"

#include <math.h>                           // expf, logf, INFINITY

#include "../../common/check.h"            // invar_die
#include "../../common/thread_pool.h"  // thread_pool_for
#include "../../kernels/order_log.h"        // order_log_note
#include "ref_cpu_set.h"                    // ref_cpu_policy_of
#include "../../kernels/cpu/inv_cpu.h"        // inv_cpu_pool, inv_cpu_threads
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

#define MAX_CHUNKS 64
#define MIN_CHUNK 64  // vocabulary entries; a chunk never shorter than this

int ref_logprobs_chunks(int R, int V, int threads) {
    int chunks = R < 2 ? 8 : R < 8 ? 4 : R < 32 ? 2 : 1;
    while (chunks < MAX_CHUNKS && (long)R * chunks < threads) chunks *= 2;
    while (chunks > 1 && V / chunks < MIN_CHUNK) chunks /= 2;
    return chunks;
}

typedef struct {
    const logprobs_args *a;
    int chunks;
} logprobs_job;

// log(sum_i exp(x_i)) with the vocabulary in `chunks` pieces merged pairwise.
static float split_logsumexp(const float *x, int V, int chunks) {
    float m[MAX_CHUNKS], s[MAX_CHUNKS];
    int len = (V + chunks - 1) / chunks;
    for (int c = 0; c < chunks; c++) {
        int v0 = c * len, v1 = v0 + len < V ? v0 + len : V;
        m[c] = -INFINITY;
        s[c] = 0.0f;
        for (int v = v0; v < v1; v++)
            if (x[v] > m[c]) m[c] = x[v];
        for (int v = v0; v < v1; v++) s[c] += expf(x[v] - m[c]);
    }
    for (int width = chunks / 2; width >= 1; width /= 2)
        for (int c = 0; c < width; c++) {
            float mm = m[c] > m[c + width] ? m[c] : m[c + width];
            if (mm == -INFINITY) continue;  // both chunks empty
            s[c] = s[c] * expf(m[c] - mm) + s[c + width] * expf(m[c + width] - mm);
            m[c] = mm;
        }
    return m[0] + logf(s[0]);
}

static void logprobs_rows(void *arg, long begin, long end) {
    const logprobs_job *jb = arg;
    const logprobs_args *a = jb->a;
    for (long r = begin; r < end; r++) {
        const float *x = a->logits + r * a->V;
        float lse = split_logsumexp(x, a->V, jb->chunks);

        // Sample: greedy argmax, or argmax of tempered logits plus Gumbel noise.
        float temp = a->temperature[r];
        int32_t best = 0;
        float best_score = -INFINITY;
        for (int v = 0; v < a->V; v++) {
            float score = temp == 0.0f
                              ? x[v]
                              : x[v] / temp + invar_gumbel_noise(a->noise_seed[r], a->position[r], v);
            if (v == 0 || score > best_score) {
                best = v;
                best_score = score;
            }
        }
        a->token[r] = best;
        a->token_logprob[r] = x[best] - lse;

        // Top-k by insertion: a later id replaces only a strictly larger logit.
        int32_t *ids = a->topk_ids + r * a->k;
        float *lp = a->topk_logprobs + r * a->k;
        int have = 0;
        for (int v = 0; v < a->V && a->k > 0; v++) {
            if (have == a->k && !(x[v] > x[ids[have - 1]])) continue;
            int i = have < a->k ? have++ : a->k - 1;
            for (; i > 0 && x[v] > x[ids[i - 1]]; i--) ids[i] = ids[i - 1];
            ids[i] = v;
        }
        for (int i = 0; i < a->k; i++) lp[i] = x[ids[i]] - lse;
    }
}

void ref_cpu_logprobs(ops_set *ops, const logprobs_args *a) {
    if (a->R < 0 || a->V <= 0 || a->k < 0 || a->k > a->V)
        invar_die(INVAR_EXIT_INPUT, "logprobs (reference cpu): bad shape R=%d V=%d k=%d",
                  a->R, a->V, a->k);
    int chunks = ref_cpu_policy_of(ops)->logprobs_chunks(a->R, a->V, inv_cpu_threads(ops));
    if (chunks < 1 || chunks > MAX_CHUNKS)
        invar_die(INVAR_EXIT_INPUT, "logprobs (reference cpu): policy chose %d chunks (1..%d)",
                  chunks, MAX_CHUNKS);
    order_log_note(ops->orders, ORDER_LOGPROBS, (uint64_t)a->V, (uint64_t)chunks);
    logprobs_job jb = {a, chunks};
    thread_pool_for(inv_cpu_pool(ops), a->R, logprobs_rows, &jb);
}
