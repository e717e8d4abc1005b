// adversarial/cpu/adv_cpu.h — the adversarial CPU kernel set: the negative control that must
// be caught on every model (adversarial/cpu/adv_cpu.c says how).
#ifndef INVAR_ADVERSARIAL_CPU_ADV_CPU_H
#define INVAR_ADVERSARIAL_CPU_ADV_CPU_H

#include "../../kernels/ops.h"  // ops_set

// threads <= 0: one per core.
ops_set *adv_cpu_create(int threads);

#endif
