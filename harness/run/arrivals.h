// harness/run/arrivals.h — when requests arrive: all at once, or over time on a seeded schedule, as
// a server under load sees them. A schedule is a list of scheduler steps (engine_request's
// arrival_step), non-decreasing in request order.
#ifndef INVAR_HARNESS_ARRIVALS_H
#define INVAR_HARNESS_ARRIVALS_H

#include <stdbool.h>  // bool
#include <stdint.h>   // uint64_t

typedef enum {
    ARRIVALS_AT_ONCE,    // every request at step 0
    ARRIVALS_STAGGERED,  // request i at step i * gap, one seeded gap in [1, 4]
    ARRIVALS_BURSTY,     // seeded bursts of 1..6 requests, seeded pauses of 2..16 steps between
} arrival_pattern;

// The names of the [matrix] arrivals key: at_once, staggered, bursty.
bool arrival_pattern_by_name(const char *name, arrival_pattern *out);
const char *arrival_pattern_name(arrival_pattern p);

// steps[0 .. n): the arrival step of each request; steps[0] is 0.
void arrivals_schedule(arrival_pattern p, int n, uint64_t seed, int *steps);

#endif
