// harness/run/verdict.h — a config's verdict, from what its runs observed and what its
// resolution expected: an invariant config passes when every request matched bs=1 bit for
// bit; a negative control passes when it was caught, or (a realistic set in a case whose
// adversarial set is the control) when it was order-free at the case's shapes, as
// information. A prefill that differs from decode fails either.
#ifndef INVAR_HARNESS_VERDICT_H
#define INVAR_HARNESS_VERDICT_H

#include <stdbool.h>            // bool

#include "../../kernels/ops.h"  // ops_set
#include "outcome.h"            // outcome
#include "resolve.h"            // resolved_config

// Sets out->observed, out->verdict and, for a control that was not caught, out->note. set is
// the config's kernel set (its order log says what it saw); adversarial_control: the case runs
// the adversarial set on this config's device.
void outcome_judge(const resolved_config *rc, const ops_set *set, bool adversarial_control,
                   outcome *out);

#endif
