// reference/cpu/inv_ring_cpu.c — the `invariant-ring` set (ref_cpu.h): every op the invariant
// CPU set's, the all-reduce the reference set's bf16 ring (all_reduce_ring.c). With every other
// reduction in one order, a config that catches this set caught the all-reduce alone: the ring
// cuts the message into T chunks at n·c/T, the message is (tokens of the step) × width, so the
// rank an element's sum starts from moves when batching changes the step's token count.
#include "ref_cpu.h"

#include <stdlib.h>                     // free

#include "ref_cpu_ops.h"                // ref_cpu_all_reduce, ref_all_reduce_ring_first_rank
#include "ref_cpu_set.h"                // ref_cpu_set, ref_cpu_policy
#include "../../common/check.h"         // invar_calloc
#include "../../kernels/cpu/inv_cpu.h"  // inv_cpu_init, inv_cpu_fini

// Only the ring's rule: the other rules belong to reductions this set leaves invariant, and
// are never called (a NULL would crash loudly if one ever were).
static const ref_cpu_policy ring_policy = {
    .all_reduce_first_rank = ref_all_reduce_ring_first_rank,
};

static void inv_ring_cpu_destroy(ops_set *ops) {
    if (!ops) return;
    inv_cpu_fini(ops);
    free(ops);  // the ref_cpu_set that holds it first
}

ops_set *inv_ring_cpu_create(int threads) {
    // A ref_cpu_set, so ref_cpu_all_reduce finds its policy where the reference set keeps it.
    ref_cpu_set *r = invar_calloc(1, sizeof *r, "cpu set (invariant with a ring all-reduce)");
    ops_set *ops = &r->ops;
    inv_cpu_init(ops, threads);
    r->policy = &ring_policy;
    ops->name = "invariant-ring";
    ops->batch_invariant = false;  // at T >= 3; resolution knows T <= 2 is order-free
    ops->destroy = inv_ring_cpu_destroy;
    ops->all_reduce = ref_cpu_all_reduce;
    return ops;
}
