// harness/run/verdict.h — a config's verdict, from what its runs observed and what its
// resolution expected: an invariant config passes when every request matched bs=1 bit for
// bit; a negative control passes when it was caught, or (a realistic set in a case whose
// adversarial set is the control) when it was order-free at the case's shapes, as
// information. A prefill that differs from decode fails either.
#ifndef INVAR_HARNESS_VERDICT_H
#define INVAR_HARNESS_VERDICT_H

#include <stdbool.h>            // bool

#include "../../kernels/fingerprint.h" // fingerprint_sink
#include "../../kernels/ops.h"  // ops_set
#include "outcome.h"            // outcome
#include "resolve.h"            // resolved_config

// Sets out->observed, out->verdict and, for a control that was not caught, out->note. set is
// the config's kernel set (its order log says what it saw); adversarial_control: the case runs
// the adversarial set on this config's device.
void outcome_judge(const resolved_config *rc, const ops_set *set, bool adversarial_control,
                   outcome *out);

// The engine-run side of the order fingerprints (kernels/fingerprint.h), after outcome_judge:
// a config expected invariant, on a set that declares its paths (its kernels note), FAILs when
// one op at one static shape noted two reduction orders in the run (even with equal bits: the
// order followed the batch) or when nothing was noted (the invariant path never ran). `orders`
// is what the run's kernels noted; other configs and sets are left as judged.
void outcome_judge_orders(const resolved_config *rc, const ops_set *set,
                          const fingerprint_sink *orders, outcome *out);

#endif
