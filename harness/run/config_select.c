// harness/run/config_select.c — `invar run --only GLOB` (harness/run/config_select.h).
#include "config_select.h"

#include <fnmatch.h>              // fnmatch
#include <stdlib.h>               // free

#include "../../common/check.h"  // invar_malloc

int config_select_only(const char *glob, const run_config *configs, resolved_config *resolved,
                       int n, const bool *in_shard, bool *chosen) {
    int count = 0;
    for (int k = 0; k < n; k++) {
        chosen[k] = (!in_shard || in_shard[k]) && fnmatch(glob, configs[k].name, 0) == 0;
        count += chosen[k];
    }
    // runs_for[t]: the chosen config that runs in place of config t, which is not chosen.
    // Resolution merges into the earliest config of a group, so walking forward meets each
    // group's first chosen member before the others.
    int *runs_for = invar_malloc((size_t)(n > 0 ? n : 1) * sizeof *runs_for, "merge targets");
    for (int k = 0; k < n; k++) runs_for[k] = -1;
    for (int k = 0; k < n; k++) {
        int target = resolved[k].merged_into;
        if (!chosen[k] || target < 0 || chosen[target]) continue;
        if (runs_for[target] < 0) {
            runs_for[target] = k;
            resolved[k].merged_into = -1;
        } else {
            resolved[k].merged_into = runs_for[target];
        }
    }
    free(runs_for);
    return count;
}
