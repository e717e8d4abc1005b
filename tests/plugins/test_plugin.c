// tests/plugins/test_plugin.c — the CPU plugins the plugin ABI's tests load (kernels/invar_plugin.h).
// One source, one shared object per variant: the Makefile defines TEST_PLUGIN_<variant>.
//   rmsnorm_invariant            an invariant RMSNorm, claimed invariant: must pass
//   rmsnorm_unclaimed            the same, not claimed: an unclaimed op is held to vary, so FAILs
//   rmsnorm_split_small          splits each row's sum in two (bf16 partials) when M < 8, claimed
//                                invariant: its claim must FAIL
//   rmsnorm_split_small_honest   the same, not claimed: a negative control that must be caught
//   mixed                        rmsnorm_split_small's RMSNorm claimed, and an unclaimed residual add:
//                                the claim must FAIL though the set as a whole claims nothing
//   crash                        the invariant RMSNorm, but a null write from M = 64 up
//   rmsnorm_fails_d512           the invariant RMSNorm, but a call with D = 512 reports a failure
//                                (invar_plugin_call.fail) and writes nothing: that shape an ERROR
//                                row, every other shape checked as usual
//   rmsnorm_nan_batched          the invariant RMSNorm, but NaN rows from M = 48 up (a broken
//                                wide path), claimed invariant: a batched run samples no id
//   rmsnorm_nan_long_rows        the same from M = 24 up: a long prompt's run alone breaks too
//   logprobs_rank_off            the invariant RMSNorm and a greedy log-softmax claimed invariant,
//                                whose logprobs on ranks > 0 are one ulp off rank 0's: the ranks of
//                                a tensor-parallel group record other logprobs (an error row)
//   bad_abi_version, bad_abi_unset, bad_null_table, bad_device, bad_claim, create_fails, no_entry:
//                                refused loads (bad_abi_unset: abi_version 0, older than any host)
#include <math.h>                      // sqrtf, expf, logf, fmaxf, nextafterf, INFINITY
#include <stdbool.h>                   // bool
#include <stddef.h>                    // NULL
#include <stdlib.h>                    // malloc, free

#include "../../kernels/bf16.h"        // bf16_to_float, float_to_bf16, bf16_round
#include "../../kernels/invar_plugin.h" // invar_plugin, INVAR_PLUGIN_ABI_VERSION

#if defined(TEST_PLUGIN_rmsnorm_split_small) || defined(TEST_PLUGIN_rmsnorm_split_small_honest) || \
    defined(TEST_PLUGIN_mixed)
#define SPLIT_SMALL 1
#else
#define SPLIT_SMALL 0
#endif

// The rank's state: only there to show that each call gets what create returned.
typedef struct {
    int rank;
    int calls;
} plugin_state;

static void *state_create(int rank, int device) {
    (void)device;
#ifdef TEST_PLUGIN_create_fails
    (void)rank;
    return NULL;
#else
    plugin_state *s = malloc(sizeof *s);
    if (s) *s = (plugin_state){.rank = rank};
    return s;
#endif
}

static void state_destroy(void *state) { free(state); }

// sum of x² over [begin, end) in index order.
static float sum_squares(const bf16 *x, int begin, int end) {
    float sum = 0.0f;
    for (int k = begin; k < end; k++) {
        float v = bf16_to_float(x[k]);
        float v2 = v * v;
        sum += v2;
    }
    return sum;
}

// Hugging Face's RMSNorm; a stride of 0 means dense (ops.h).
static void rmsnorm(const invar_plugin_call *c, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                    const bf16 *w, int M, int D, float eps) {
    ((plugin_state *)c->state)->calls++;
    if (ld_out == 0) ld_out = D;
    if (ld_x == 0) ld_x = D;
#ifdef TEST_PLUGIN_crash
    if (M >= 64) *(volatile int *)(size_t)c->stream = 1;  // the stream is NULL on the CPU
#endif
#ifdef TEST_PLUGIN_rmsnorm_fails_d512
    if (D == 512) {
        c->fail(c, "D = 512 is not supported");
        return;
    }
#endif
    for (int m = 0; m < M; m++) {
        const bf16 *xr = x + m * ld_x;
        bf16 *o = out + m * ld_out;
        // A small batch "helped" by splitting each row in two, the halves' sums kept in a bf16
        // workspace: another order and another rounding than at M >= 8.
        float sum = SPLIT_SMALL && M < 8
                        ? bf16_round(sum_squares(xr, 0, D / 2)) + bf16_round(sum_squares(xr, D / 2, D))
                        : sum_squares(xr, 0, D);
        float inv_rms = 1.0f / sqrtf(sum / (float)D + eps);
#ifdef TEST_PLUGIN_rmsnorm_nan_batched
        if (M >= 48) inv_rms = NAN;
#endif
#ifdef TEST_PLUGIN_rmsnorm_nan_long_rows
        if (M >= 24) inv_rms = NAN;
#endif
        for (int i = 0; i < D; i++) {
            float normed = bf16_round(bf16_to_float(xr[i]) * inv_rms);
            o[i] = float_to_bf16(bf16_to_float(w[i]) * normed);
        }
    }
}

#ifdef TEST_PLUGIN_logprobs_rank_off
// Greedy only (the test's cases run at temperature 0): log-softmax in index order, the sampled
// id the lowest of the maxima, the top k by repeated selection. A rank other than 0 moves every
// logprob one ulp towards zero, as a rank-local reduction order would.
static void logprobs(const invar_plugin_call *c, const logprobs_args *a) {
    for (int r = 0; r < a->R; r++) {
        const float *x = a->logits + (long)r * a->V;
        float m = -INFINITY;
        for (int i = 0; i < a->V; i++) m = fmaxf(m, x[i]);
        float s = 0.0f;
        for (int i = 0; i < a->V; i++) s += expf(x[i] - m);
        const float log_z = logf(s);
        float prev_v = INFINITY;
        int prev_i = -1;
        for (int j = 0; j <= a->k; j++) {  // pick 0 is the sampled id, 1..k the top k
            float best_v = -INFINITY;
            int best_i = -1;
            for (int i = 0; i < a->V; i++) {
                bool after = j == 0 || x[i] < prev_v || (x[i] == prev_v && i > prev_i);
                if (after && (best_i < 0 || x[i] > best_v)) {
                    best_v = x[i];
                    best_i = i;
                }
            }
            float lp = best_i >= 0 ? (best_v - m) - log_z : -INFINITY;
            if (c->rank > 0) lp = nextafterf(lp, 0.0f);
            if (j == 0) {
                a->token[r] = best_i;
                a->token_logprob[r] = lp;
                continue;
            }
            a->topk_ids[(long)r * a->k + j - 1] = best_i;
            a->topk_logprobs[(long)r * a->k + j - 1] = lp;
            prev_v = best_v;
            prev_i = best_i;
        }
    }
}
#endif

#ifdef TEST_PLUGIN_mixed
// x = bf16(x + y): order-free, so an unclaimed one may be stable.
static void residual_add(const invar_plugin_call *c, bf16 *x, const bf16 *y, long n) {
    (void)c;
    for (long i = 0; i < n; i++) x[i] = float_to_bf16(bf16_to_float(x[i]) + bf16_to_float(y[i]));
}
#endif

static const invar_plugin table = {
#ifdef TEST_PLUGIN_bad_abi_version
    .abi_version = INVAR_PLUGIN_ABI_VERSION + 1,
#elif defined(TEST_PLUGIN_bad_abi_unset)
    .abi_version = 0,  // a table that never set it: as old as a plugin can be
#else
    .abi_version = INVAR_PLUGIN_ABI_VERSION,
#endif
    .name = "test-rmsnorm",
#ifdef TEST_PLUGIN_bad_device
    .device = "cuda",
#else
    .device = "cpu",
#endif
#if defined(TEST_PLUGIN_rmsnorm_split_small_honest) || defined(TEST_PLUGIN_rmsnorm_unclaimed)
    .invariant_claims = 0,
#elif defined(TEST_PLUGIN_logprobs_rank_off)
    .invariant_claims = INVAR_OP_BIT(INVAR_OP_RMSNORM) | INVAR_OP_BIT(INVAR_OP_LOGPROBS),
#elif defined(TEST_PLUGIN_bad_claim)
    .invariant_claims = INVAR_OP_BIT(INVAR_OP_RMSNORM) | INVAR_OP_BIT(INVAR_OP_GEMM),
#else
    .invariant_claims = INVAR_OP_BIT(INVAR_OP_RMSNORM),
#endif
    .create = state_create,
    .destroy = state_destroy,
    .rmsnorm = rmsnorm,
#ifdef TEST_PLUGIN_mixed
    .residual_add = residual_add,
#endif
#ifdef TEST_PLUGIN_logprobs_rank_off
    .logprobs = logprobs,
#endif
};

#ifndef TEST_PLUGIN_no_entry
const invar_plugin *invar_plugin_entry(uint32_t host_abi_version);
const invar_plugin *invar_plugin_entry(uint32_t host_abi_version) {
    (void)host_abi_version;
#ifdef TEST_PLUGIN_bad_null_table
    return host_abi_version == 0 ? &table : NULL;  // NULL for every version invar speaks
#else
    return &table;
#endif
}
#else
// Exported under another name, as a C++ plugin without extern "C" would be.
const invar_plugin *invar_plugin_entry_v1(void);
const invar_plugin *invar_plugin_entry_v1(void) { return &table; }
#endif
