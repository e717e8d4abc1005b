// kernels/cpu/all_reduce.c — the invariant set's collectives: every element summed as
// x_0 + x_1 + ... + x_{T-1}, rank order, in fp32, rounded to bf16 once. The order reads
// neither the element's offset nor the message size, so a token's sum is the same whatever
// else shares its message (a fixed chunk size alone would not do: a ring's chunk owner, where
// the sum starts, still moves with the offset).
#include "inv_cpu_ops.h"     // inv_cpu_all_reduce, inv_cpu_all_gather_columns

#include "../../common/check.h"  // invar_die
#include "../bf16.h"         // bf16_to_float, float_to_bf16
#include "../fingerprint.h"  // fingerprint_note, fingerprint_order
#include "collective.h"      // cpu_comm_all_reduce, cpu_comm_all_gather_columns

static void rank_order(const void *order, bf16 *out, const bf16 *const *ins, int T, long begin,
                       long end, long n) {
    (void)order;
    (void)n;
    for (long i = begin; i < end; i++) {
        float acc = bf16_to_float(ins[0][i]);
        for (int r = 1; r < T; r++) acc += bf16_to_float(ins[r][i]);
        out[i - begin] = float_to_bf16(acc);
    }
}

void inv_cpu_all_reduce(ops_set *ops, tp_comm *comm, bf16 *buf, long n) {
    // The ranks' own threads add (a rank's pool is its own kernels'); the order is rank order.
    long order[] = {tp_comm_size(comm)};
    fingerprint_note(ops->fingerprints, "all_reduce", fingerprint_order(order, 1),
                     fingerprint_order(order, 1), "rank-order");
    cpu_comm_all_reduce(comm, buf, n, rank_order, NULL);
}

// The pairwise tree over ranks: strides 1, 2, 4, ... (T a power of two), fp32, never rounded.
static void rank_tree(const void *order, float *out, const float *const *ins, int T, long begin,
                      long end, long n) {
    (void)order;
    (void)n;
    float part[64] = {0};
    for (long i = begin; i < end; i++) {
        for (int r = 0; r < T; r++) part[r] = ins[r][i];
        for (int stride = 1; stride < T; stride *= 2)
            for (int r = 0; r + stride < T; r += 2 * stride) part[r] += part[r + stride];
        out[i - begin] = part[0];
    }
}

void inv_cpu_all_reduce_f32_tree(ops_set *ops, tp_comm *comm, float *buf, long n) {
    int T = tp_comm_size(comm);
    if (T > 64 || (T & (T - 1)) != 0)
        invar_die(INVAR_EXIT_INPUT, "all_reduce_f32_tree: %d ranks: the tree needs a power of "
                  "two up to 64", T);
    long order[] = {2, T};  // pairs, up the tree
    fingerprint_note(ops->fingerprints, "all_reduce_f32_tree", fingerprint_order(order + 1, 1),
                     fingerprint_order(order, 2), "rank-tree");
    cpu_comm_all_reduce_f32(comm, buf, n, rank_tree, NULL);
}

void inv_cpu_all_gather_columns(ops_set *ops, tp_comm *comm, float *buf, int rows, long ld,
                                long col_begin, long col_end) {
    (void)ops;
    cpu_comm_all_gather_columns(comm, buf, rows, ld, col_begin, col_end);
}
