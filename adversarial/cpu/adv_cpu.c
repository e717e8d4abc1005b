// adversarial/cpu/adv_cpu.c — the adversarial CPU kernel set. The reference set does what
// libraries do, and at small shapes that is often order-free (one split, one block size, a
// two-term sum), so on a small model it can match bs=1 bit for bit and prove nothing. This set
// runs the same reference kernels under a policy that takes every reduction's order from the
// batch at every shape, as a kernel tuned per shape could:
//   gemm, moe_experts  split-K count and accumulator lanes from a hash of M (an expert's M is
//                      its load)
//   rmsnorm            chunks per row from a hash of M
//   mla_attention      KV split count from the number of sequences and a pretend SM count, as
//                      SGLang's and AITER's decode kernels size their grids
//   mha_prefill        KV splits from a hash of the call's token count
//   logprobs           vocabulary chunks from a hash of the row count
//   all_reduce         every element's sum around the ring starts at a rank hashed from the
//                      message size (caught from T = 3 ranks on: two addends commute)
//   moe_combine        experts summed busiest first, contracted into FMAs when the busiest
//                      expert's load is odd (shows with two experts per token too)
// Every choice is deterministic: the same batch gives the same bits, so a run sees it as
// batch-variant, never as nondeterministic. The router, embedding, RoPE and the element-wise
// ops have no reduction a batch could reorder (the router's logits are the one exception left
// invariant here; README, "The kernel sets").
#include "adv_cpu.h"

#include "../../reference/cpu/ref_cpu_ops.h"  // ref_gemm_plan, ref_cpu_moe_combine_by_load
#include "../../reference/cpu/ref_cpu_set.h"  // ref_cpu_set_create
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise
#include "../../kernels/moe_slices.h"       // moe_combine_by_slice

#define PRETEND_SMS 32  // the grid a decode kernel would try to fill

// A well-mixed hash of a row count, so neighbouring batch sizes pick unrelated orders.
static unsigned shape_hash(int n) { return (unsigned)(invar_mix64((uint64_t)n) >> 32); }

static ref_gemm_plan gemm_plan(int M, int N, int K, int threads) {
    (void)N;
    (void)threads;
    static const int lanes[] = {1, 4, 8, 16};
    unsigned h = shape_hash(M);
    ref_gemm_plan p = {.splits = 1 + (int)(h % 4), .lanes = lanes[(h >> 4) % 4]};
    while (p.splits > 1 && K / p.splits < 1) p.splits--;
    return p;
}

static int rmsnorm_chunks(int M, int D) {
    int chunks = 1 << (shape_hash(M) % 4);  // 1, 2, 4 or 8
    while (chunks > 1 && D / chunks < 1) chunks /= 2;
    return chunks;
}

static int mla_split_len(const mla_attention_args *a, int threads) {
    (void)threads;
    int seqs = a->num_seqs > 0 ? a->num_seqs : 1;
    int splits = 2 * PRETEND_SMS / seqs;
    if (splits < 1) splits = 1;
    int len = (a->max_seq_len + splits - 1) / splits;
    len = (len + 15) / 16 * 16;
    return len > 16 ? len : 16;
}

static int mha_prefill_splits(int T, int keys) {
    int splits = 1 + (int)(shape_hash(T) % 4);
    while (splits > 1 && keys / splits < 1) splits--;
    return splits;
}

static int logprobs_chunks(int R, int V, int threads) {
    (void)threads;
    int chunks = 1 << (shape_hash(R) % 5);  // 1 to 16
    while (chunks > 1 && V / chunks < 1) chunks /= 2;
    return chunks;
}

static int all_reduce_first_rank(long i, long n, int T) {
    (void)i;
    return (int)(invar_mix64((uint64_t)n) % (uint64_t)T);
}

static const ref_cpu_policy adversarial_policy = {
    .gemm_plan = gemm_plan,
    .rmsnorm_chunks = rmsnorm_chunks,
    .mla_split_len = mla_split_len,
    .mha_prefill_splits = mha_prefill_splits,
    .logprobs_chunks = logprobs_chunks,
    .all_reduce_first_rank = all_reduce_first_rank,
};

static void adv_cpu_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, adv_cpu_moe_combine)) return;
    ref_cpu_moe_combine_by_load(ops, a, true);
}

ops_set *adv_cpu_create(int threads) {
    ops_set *ops = ref_cpu_set_create("adversarial", &adversarial_policy, threads);
    ops->adversarial = true;
    ops->moe_combine = adv_cpu_moe_combine;
    return ops;
}
