// reference/cpu/all_reduce_ring.c — the all-reduce as a bf16 ring does it (NCCL's default
// algorithm for large messages): the message is cut into T chunks whose boundaries follow its
// size, chunk c's reduce-scatter starts at rank c and each hop adds the next rank's value to a
// bf16 partial. With T >= 3, where an element's sum starts (and so its bits) depends on its
// offset and the message size: a token's sum changes with the tokens that share its message.
#include "ref_cpu_ops.h"                   // ref_cpu_all_reduce, ref_all_reduce_ring_first_rank

#include "ref_cpu_set.h"                   // ref_cpu_policy_of
#include "../../kernels/bf16.h"            // bf16_to_float, float_to_bf16
#include "../../kernels/cpu/collective.h"  // cpu_comm_all_reduce

int ref_all_reduce_ring_first_rank(long i, long n, int T) {
    // The chunk c with n*c/T <= i < n*(c+1)/T (computed as the communicator cuts stretches).
    int c = (int)((double)i * T / (double)n);
    if (c > T - 1) c = T - 1;
    while (c > 0 && n / T * c + n % T * c / T > i) c--;
    while (c < T - 1 && n / T * (c + 1) + n % T * (c + 1) / T <= i) c++;
    return c;
}

static void ring_order(const void *order, bf16 *out, const bf16 *const *ins, int T, long begin,
                       long end, long n) {
    const ref_cpu_policy *policy = order;
    for (long i = begin; i < end; i++) {
        int first = policy->all_reduce_first_rank(i, n, T);
        float acc = bf16_to_float(ins[first][i]);
        for (int hop = 1; hop < T; hop++)
            acc = bf16_to_float(float_to_bf16(acc + bf16_to_float(ins[(first + hop) % T][i])));
        out[i - begin] = float_to_bf16(acc);
    }
}

void ref_cpu_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    cpu_comm_all_reduce(comm, buf, n, ring_order, ref_cpu_policy_of(ops));
}

// The same ring over fp32 partials (a ring all-reduce of fp32 tensors, as NCCL's on fp32 data):
// no hop rounds to bf16, but where each sum starts still follows the element's chunk, so the
// fp32 bits of a cancelling sum move with the message. The contract's name is the invariant
// set's (a fixed tree); this is what a library gives in its place.
static void ring_order_f32(const void *order, float *out, const float *const *ins, int T,
                           long begin, long end, long n) {
    const ref_cpu_policy *policy = order;
    for (long i = begin; i < end; i++) {
        int first = policy->all_reduce_first_rank(i, n, T);
        float acc = ins[first][i];
        for (int hop = 1; hop < T; hop++) acc += ins[(first + hop) % T][i];
        out[i - begin] = acc;
    }
}

void ref_cpu_all_reduce_f32(ops_set *ops, tp_comm *comm, float *buf, long n) {
    cpu_comm_all_reduce_f32(comm, buf, n, ring_order_f32, ref_cpu_policy_of(ops));
}
