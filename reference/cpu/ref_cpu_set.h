// reference/cpu/ref_cpu_set.h — a CPU set made of the reference kernels under a chosen policy
// (ref_cpu_ctx.h): the reference set's own, or the adversarial set's. The caller may replace
// ops afterwards.
#ifndef INVAR_REFERENCE_CPU_REF_CPU_SET_H
#define INVAR_REFERENCE_CPU_REF_CPU_SET_H

#include "../../kernels/ops.h"  // ops_set
#include "ref_cpu_ctx.h"        // ref_cpu_policy

// `policy` must outlive the set (a static). Not batch-invariant; records its orders.
ops_set *ref_cpu_set_create(const char *name, const ref_cpu_policy *policy, int threads);

#endif
