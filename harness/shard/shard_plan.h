// harness/shard/shard_plan.h — which configs of a case's matrix `invar run --shard I/N` runs.
//
// The rule, the same on every runner: configs that can share effective settings stay together,
// and the groups are dealt out to balance the runs. A group is a connected component of the
// merges (harness/run/resolve.h: resolve_merge) that resolution would make on either kind of
// machine, computed without probing a device: once assuming a CUDA device (device auto runs on
// cuda) and once assuming none (auto runs on cpu, cuda configs are skipped). Whatever the
// runner has, its own merges then fall inside one group, so a merged config always runs in the
// shard of the config it was merged into. A kernel set's batch-invariant flag is taken by its
// name (sets/registry.h: entries of one name agree on every device), so a CPU-only build plans
// what a CUDA build plans.
//
// Groups are dealt largest first (the runs they hold assuming a CUDA device, then their
// configs, then their first config's position) to the shard with the fewest runs so far (then
// the fewest configs, then the lowest I): a deterministic longest-processing-time split.
#ifndef INVAR_HARNESS_SHARD_PLAN_H
#define INVAR_HARNESS_SHARD_PLAN_H

#include <stdbool.h>   // bool
#include <stddef.h>    // size_t

#include "../run/case_file.h" // case_file
#include "../run/matrix.h" // run_config
#include "../run/resolve.h" // resolved_config

// shard_of[k] in 1 .. count for every config k of configs[0 .. n) (backends already selected:
// resolve_select_backend). count >= 1.
void shard_plan(const case_file *c, const run_config *configs, int n, int count, int *shard_of);

// The group of each config (group[k]: the position of the group's first config), as the plan
// sees it; for tests and messages.
void shard_plan_groups(const case_file *c, const run_config *configs, int n, int *group);

// False, naming the two configs in err, when the machine's own resolution merged a config of
// `shard` into a config of another shard (the plan's promise broken: a bug, not bad input).
bool shard_plan_keeps_merges(const run_config *configs, const resolved_config *r, int n,
                             const int *shard_of, char *err, size_t err_len);

#endif
