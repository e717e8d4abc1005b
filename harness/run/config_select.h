// harness/run/config_select.h — `invar run --only GLOB`: the configs whose names match a glob
// (fnmatch), within the shard's configs when there is a shard. A chosen config that resolution
// merged into a config not chosen must still run: the first chosen config of that group runs
// for it and the others, so the run means what the matrix would have given those configs.
#ifndef INVAR_HARNESS_CONFIG_SELECT_H
#define INVAR_HARNESS_CONFIG_SELECT_H

#include <stdbool.h>   // bool

#include "matrix.h"    // run_config
#include "resolve.h"   // resolved_config

// chosen[k] = configs[k].name matches glob and (in_shard NULL or in_shard[k]); merges whose
// target is not chosen are moved onto the group's first chosen config. Returns how many are
// chosen.
int config_select_only(const char *glob, const run_config *configs, resolved_config *resolved,
                       int n, const bool *in_shard, bool *chosen);

#endif
