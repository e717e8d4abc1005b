// harness/shard/shard_plan.c — the split of a matrix into shards (harness/shard/shard_plan.h).
#include "shard_plan.h"

#include <stdio.h>               // snprintf
#include <stdlib.h>              // free, qsort
#include <string.h>              // strcmp

#include "../../common/check.h"  // invar_calloc
#include "../../sets/registry.h" // kernel_set_by_name, kernel_set_invariant_at

// By name, not by (name, device): a CPU-only build registers no cuda entries, and the plan
// must not depend on the build. At the config's tensor_parallel, as resolve_matrix decides.
static bool set_invariant_by_name(const char *set, int tensor_parallel) {
    const kernel_set_entry *e = kernel_set_by_name(set);
    // unknown: resolve_matrix refuses the case before anything runs
    return e && kernel_set_invariant_at(e, tensor_parallel);
}

// Resolution as on a machine with (or without) a CUDA device, merges included.
static void resolve_assuming(const case_file *c, const run_config *configs, int n,
                             bool cuda_present, resolved_config *r) {
    for (int k = 0; k < n; k++) {
        const run_config *cfg = &configs[k];
        const char *device = strcmp(cfg->device, "auto") == 0 ? (cuda_present ? "cuda" : "cpu")
                                                               : cfg->device;
        if (strcmp(device, "cuda") == 0 && !cuda_present)
            resolve_skip_device(device, "assumed absent by the shard plan", &r[k]);
        else
            resolve_config(cfg, device,
                           set_invariant_by_name(cfg->kernel_set, cfg->tensor_parallel),
                           case_max_model_len(c), &r[k]);
    }
    resolve_merge(configs, r, n);
}

static int find_root(int *parent, int k) {
    while (parent[k] != k) k = parent[k] = parent[parent[k]];
    return k;
}

// The lower position becomes the root, so a group is named by its first config.
static void join(int *parent, int a, int b) {
    a = find_root(parent, a);
    b = find_root(parent, b);
    if (a < b) parent[b] = a;
    else if (b < a) parent[a] = b;
}

// group[k] and, when runs is not NULL, whether config k runs itself assuming a CUDA device.
static void plan_groups(const case_file *c, const run_config *configs, int n, int *group,
                        bool *runs) {
    resolved_config *r = invar_calloc((size_t)n, sizeof *r, "shard plan resolution");
    for (int k = 0; k < n; k++) group[k] = k;
    for (int assume = 0; assume < 2; assume++) {
        bool cuda_present = assume == 1;
        resolve_assuming(c, configs, n, cuda_present, r);
        for (int k = 0; k < n; k++) {
            if (r[k].merged_into >= 0) join(group, k, r[k].merged_into);
            if (runs && cuda_present) runs[k] = !r[k].skip && r[k].merged_into < 0;
        }
    }
    for (int k = 0; k < n; k++) group[k] = find_root(group, k);
    free(r);
}

void shard_plan_groups(const case_file *c, const run_config *configs, int n, int *group) {
    plan_groups(c, configs, n, group, NULL);
}

typedef struct {
    int first;       // position of the group's first config (its root)
    int runs, rows;  // configs that run assuming a CUDA device; configs
} group_load;

static int heaviest_first(const void *pa, const void *pb) {
    const group_load *a = pa, *b = pb;
    if (a->runs != b->runs) return b->runs - a->runs;
    if (a->rows != b->rows) return b->rows - a->rows;
    return a->first - b->first;
}

void shard_plan(const case_file *c, const run_config *configs, int n, int count, int *shard_of) {
    int *group = invar_calloc((size_t)n + 1, sizeof *group, "shard plan groups");
    bool *runs = invar_calloc((size_t)n + 1, sizeof *runs, "shard plan runs");
    group_load *loads = invar_calloc((size_t)n + 1, sizeof *loads, "shard plan loads");
    int *slot = invar_calloc((size_t)n + 1, sizeof *slot, "shard plan slots");  // root -> loads[]
    plan_groups(c, configs, n, group, runs);
    int ngroups = 0;
    for (int k = 0; k < n; k++) {
        if (group[k] == k) {
            slot[k] = ngroups;
            loads[ngroups++] = (group_load){.first = k};
        }
        group_load *g = &loads[slot[group[k]]];  // a root precedes its members
        g->runs += runs[k];
        g->rows++;
    }
    qsort(loads, (size_t)ngroups, sizeof *loads, heaviest_first);

    int *shard_runs = invar_calloc((size_t)count, sizeof *shard_runs, "shard runs");
    int *shard_rows = invar_calloc((size_t)count, sizeof *shard_rows, "shard rows");
    int *shard_of_group = invar_calloc((size_t)n + 1, sizeof *shard_of_group, "shard of group");
    for (int g = 0; g < ngroups; g++) {
        int best = 0;
        for (int s = 1; s < count; s++)
            if (shard_runs[s] < shard_runs[best] ||
                (shard_runs[s] == shard_runs[best] && shard_rows[s] < shard_rows[best]))
                best = s;
        shard_runs[best] += loads[g].runs;
        shard_rows[best] += loads[g].rows;
        shard_of_group[loads[g].first] = best + 1;
    }
    for (int k = 0; k < n; k++) shard_of[k] = shard_of_group[group[k]];
    free(shard_runs);
    free(shard_rows);
    free(shard_of_group);
    free(slot);
    free(loads);
    free(runs);
    free(group);
}

bool shard_plan_keeps_merges(const run_config *configs, const resolved_config *r, int n,
                             const int *shard_of, char *err, size_t err_len) {
    for (int k = 0; k < n; k++) {
        int j = r[k].merged_into;
        if (j < 0 || shard_of[j] == shard_of[k]) continue;
        snprintf(err, err_len, "shard plan: config %s (shard %d) was merged into %s (shard %d)",
                 configs[k].name, shard_of[k], configs[j].name, shard_of[j]);
        return false;
    }
    return true;
}
