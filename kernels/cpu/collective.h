// kernels/cpu/collective.h — the CPU communicator of a tensor-parallel group: T ranks that are
// T threads of one process, meeting at a blocking barrier (a condition variable: the build
// machine has 2 cores, so a spinning rank would starve the one it waits for) and reading each
// other's buffers through the group's rank slots.
//
// The communicator only moves data and waits; the order in which an all-reduce adds the ranks'
// values is the kernel set's (the `slice` function below), so one communicator serves the
// invariant, reference and adversarial sets alike. Public to other folders: the engine's
// tensor-parallel driver and the kernel checker open groups; the sets built on the invariant
// CPU set reduce through cpu_comm_all_reduce.
#ifndef INVAR_KERNELS_CPU_COLLECTIVE_H
#define INVAR_KERNELS_CPU_COLLECTIVE_H

#include "../ops.h"  // tp_comm, tp_comm_group, bf16

// C linkage: the CUDA sets (C++) call these too.
#ifdef __cplusplus
extern "C" {
#endif

// T >= 1 ranks; rank r's handle is tp_comm_group_rank(g, r), valid until destroy.
tp_comm_group *tp_comm_group_create(int T);
void tp_comm_group_destroy(tp_comm_group *g);
tp_comm *tp_comm_group_rank(tp_comm_group *g, int rank);

int tp_comm_size(const tp_comm *c);
int tp_comm_rank(const tp_comm *c);

// A device communicator attached to the group (the CUDA sets' NCCL communicators: ops.h's
// open_group): handles[r] is rank r's, read back with tp_comm_device; `close` gets them all when
// the group is destroyed. The group keeps its CPU slots too, unused by the device collectives.
typedef void (*tp_device_comms_close)(void *const *handles, int T);
void tp_comm_group_attach_device(tp_comm_group *g, void *const *handles,
                                 tp_device_comms_close close);
// Rank c's device communicator; NULL when none is attached (a CPU group).
void *tp_comm_device(const tp_comm *c);

// How a set adds one stretch of the message: out[i - begin] for i in [begin, end) from ins[r][i],
// r in [0, T). It may read i and n (the message size) to pick its order.
typedef void (*cpu_all_reduce_slice)(const void *order, bf16 *out, const bf16 *const *ins,
                                     int T, long begin, long end, long n);

// The all-reduce of ops.h over buf (n elements, in place), every rank calling it with the same
// n: each rank adds a 1/T stretch with `slice` (which rank adds an element never matters: the
// slice function alone decides its order), then every rank copies every stretch.
void cpu_comm_all_reduce(tp_comm *c, bf16 *buf, long n, cpu_all_reduce_slice slice,
                         const void *order);

// ops.h's all_reduce_f32_tree over fp32 buf: every rank reduces its stretch of the elements,
// out[i - begin] from ins[0..T)[i] (the slice may read i and n to pick its order, as above), then
// every rank copies every stretch.
typedef void (*cpu_all_reduce_f32_slice)(const void *order, float *out, const float *const *ins,
                                         int T, long begin, long end, long n);
void cpu_comm_all_reduce_f32(tp_comm *c, float *buf, long n, cpu_all_reduce_f32_slice slice,
                             const void *order);

// ops.h's all_gather_columns.
void cpu_comm_all_gather_columns(tp_comm *c, float *buf, int rows, long ld, long col_begin,
                                 long col_end);

#ifdef __cplusplus
}
#endif

#endif
