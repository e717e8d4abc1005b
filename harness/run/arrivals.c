// harness/run/arrivals.c — seeded arrival schedules (harness/run/arrivals.h).
#include "arrivals.h"

#include <string.h>            // strcmp

#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

static const char *const names[] = {"at_once", "staggered", "bursty"};

bool arrival_pattern_by_name(const char *name, arrival_pattern *out) {
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        if (strcmp(names[i], name) == 0) {
            *out = (arrival_pattern)i;
            return true;
        }
    }
    return false;
}

const char *arrival_pattern_name(arrival_pattern p) { return names[p]; }

// Draw i of stream `stream`, in [lo, hi]: counter-based, so one schedule never shifts another.
static int draw_in(uint64_t seed, uint64_t stream, uint64_t i, int lo, int hi) {
    uint64_t h = invar_mix64(seed ^ invar_mix64((stream << 32) ^ i));
    return lo + (int)(h % (uint64_t)(hi - lo + 1));
}

enum { STREAM_GAP = 0xA1, STREAM_BURST = 0xA2, STREAM_PAUSE = 0xA3 };

void arrivals_schedule(arrival_pattern p, int n, uint64_t seed, int *steps) {
    switch (p) {
    case ARRIVALS_AT_ONCE:
        for (int i = 0; i < n; i++) steps[i] = 0;
        return;
    case ARRIVALS_STAGGERED: {
        int gap = draw_in(seed, STREAM_GAP, 0, 1, 4);
        for (int i = 0; i < n; i++) steps[i] = i * gap;
        return;
    }
    case ARRIVALS_BURSTY: {
        int step = 0, burst = 0;
        for (int i = 0; i < n; burst++) {
            int size = draw_in(seed, STREAM_BURST, (uint64_t)burst, 1, 6);
            for (int j = 0; j < size && i < n; j++) steps[i++] = step;
            step += draw_in(seed, STREAM_PAUSE, (uint64_t)burst, 2, 16);
        }
        return;
    }
    }
}
