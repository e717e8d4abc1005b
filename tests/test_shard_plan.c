// tests/test_shard_plan.c — the split of a matrix into shards (harness/shard/shard_plan.h) and the
// spelling of a shard (reports/shard_id.h): every config in exactly one shard, configs that
// merge on either kind of machine in one shard, the same answer every time, runs balanced.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // FILE, fdopen, fputs, fclose, snprintf
#include <stdlib.h>   // mkstemp, free
#include <string.h>   // strcmp, strchr, strstr
#include <unistd.h>   // unlink

#include "../common/check.h"        // invar_calloc
#include "../harness/run/case_file.h" // case_file_load
#include "../harness/run/matrix.h"  // matrix_count, matrix_expand
#include "../harness/run/resolve.h" // resolve_select_backend, resolve_config, resolve_merge
#include "../harness/shard/shard_plan.h" // shard_plan, shard_plan_groups
#include "../reports/shard_id.h"    // shard_id_parse
#include "../sets/registry.h"       // kernel_sets

// 3 devices x 2 sets x 2 backends x 2 force x 2 arrivals = 48 configs, with merges on every
// kind of machine: force_prefix_caching on a backend that needs no forcing, the reference set
// (never in batch-invariant mode), device auto with cpu (no GPU) or with cuda (a GPU).
static const char matrix_case[] =
    "[case]\nname = shard\nmodel = tiny\n"
    "[prompts]\ncount = 4\nmin_len = 70\nmax_len = 96\nmax_new_tokens = 3\n"
    "shared_prefix_groups = 2\nshared_prefix_len = 64\n"
    "[matrix]\ndevices = cpu, cuda, auto\nkernel_sets = invariant, reference\n"
    "attention_backends = mla-unified, mla-split\nforce_prefix_caching = false, true\n"
    "arrivals = at_once, staggered\nmax_num_batched_tokens = 32\nbatch_sizes = 1, 4\n";

typedef struct {
    case_file c;
    run_config cfg[64];
    int n;
} matrix;

static void load_matrix(matrix *m) {
    char path[64] = "/tmp/invar_test_shard_XXXXXX", err[1024];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_true(fputs(matrix_case, f) >= 0);
    assert_int_equal(fclose(f), 0);
    bool ok = case_file_load(path, &m->c, err, sizeof err);
    unlink(path);
    if (!ok) fail_msg("%s", err);
    backend_selection sel;
    if (!resolve_select_backend(&m->c, NULL, &sel, err, sizeof err)) fail_msg("%s", err);
    m->n = (int)matrix_count(m->c.axes);
    assert_int_equal(m->n, 48);
    assert_int_equal(matrix_expand(m->c.axes, m->cfg), m->n);
}

// The merges a machine with (or without) a CUDA device makes, resolved here independently of
// the plan: each must stay inside one shard.
static void merges_assuming(const matrix *m, bool cuda, resolved_config *r) {
    for (int k = 0; k < m->n; k++) {
        const run_config *cfg = &m->cfg[k];
        const char *dev = strcmp(cfg->device, "auto") == 0 ? (cuda ? "cuda" : "cpu") : cfg->device;
        if (strcmp(dev, "cuda") == 0 && !cuda) resolve_skip_device(dev, "none", &r[k]);
        else resolve_config(cfg, dev, strcmp(cfg->kernel_set, "invariant") == 0,
                            case_max_model_len(&m->c), &r[k]);
    }
    resolve_merge(m->cfg, r, m->n);
}

static void every_config_in_one_shard_merges_together_same_every_time(void **state) {
    (void)state;
    matrix *m = invar_calloc(1, sizeof *m, "matrix");
    load_matrix(m);
    resolved_config r[2][64];
    merges_assuming(m, false, r[0]);
    merges_assuming(m, true, r[1]);
    int merged = 0;
    for (int k = 0; k < m->n; k++) merged += (r[0][k].merged_into >= 0) + (r[1][k].merged_into >= 0);
    assert_true(merged > 0);  // else the test would prove nothing about merge groups

    for (int count = 1; count <= 7; count++) {
        int shard_of[64], again[64], per_shard[8] = {0};
        shard_plan(&m->c, m->cfg, m->n, count, shard_of);
        shard_plan(&m->c, m->cfg, m->n, count, again);
        assert_memory_equal(shard_of, again, sizeof shard_of[0] * (size_t)m->n);
        for (int k = 0; k < m->n; k++) {
            assert_in_range(shard_of[k], 1, count);
            per_shard[shard_of[k]]++;
            for (int machine = 0; machine < 2; machine++) {
                int j = r[machine][k].merged_into;
                if (j >= 0) assert_int_equal(shard_of[j], shard_of[k]);
            }
        }
        int total = 0;
        for (int s = 1; s <= count; s++) total += per_shard[s];
        assert_int_equal(total, m->n);
        // Runs (assuming a GPU) balanced to within the largest group's runs.
        int runs[8] = {0}, group[64], group_runs[64] = {0}, largest = 0;
        shard_plan_groups(&m->c, m->cfg, m->n, group);
        for (int k = 0; k < m->n; k++) {
            bool runs_itself = !r[1][k].skip && r[1][k].merged_into < 0;
            runs[shard_of[k]] += runs_itself;
            group_runs[group[k]] += runs_itself;
            if (group_runs[group[k]] > largest) largest = group_runs[group[k]];
        }
        int lo = runs[1], hi = runs[1];
        for (int s = 2; s <= count; s++) {
            if (runs[s] < lo) lo = runs[s];
            if (runs[s] > hi) hi = runs[s];
        }
        assert_true(hi - lo <= largest);
    }
    free(m);
}

// Device auto merges with cpu on a machine without a GPU and with cuda on one with: the three
// configs form one group, whatever machine plans it.
static void device_auto_joins_cpu_and_cuda(void **state) {
    (void)state;
    matrix *m = invar_calloc(1, sizeof *m, "matrix");
    load_matrix(m);
    int group[64];
    shard_plan_groups(&m->c, m->cfg, m->n, group);
    int checked = 0;
    for (int k = 0; k < m->n; k++) {
        if (strcmp(m->cfg[k].device, "auto") != 0) continue;
        const char *rest = strchr(m->cfg[k].name, '/');
        assert_non_null(rest);
        for (int j = 0; j < m->n; j++) {
            const char *other = strchr(m->cfg[j].name, '/');
            if (j == k || strcmp(other, rest) != 0) continue;
            assert_int_equal(group[j], group[k]);
            checked++;
        }
    }
    assert_int_equal(checked, 32);  // 16 auto configs, each with its cpu and cuda twin
    free(m);
}

// The plan reads a set's batch-invariant flag by name: every entry of one name must agree.
static void registry_entries_of_one_name_agree(void **state) {
    (void)state;
    for (const kernel_set_entry *a = kernel_sets(); a->set; a++)
        for (const kernel_set_entry *b = kernel_sets(); b->set; b++)
            if (strcmp(a->set, b->set) == 0) assert_int_equal(a->batch_invariant, b->batch_invariant);
}

static void shard_ids_parse(void **state) {
    (void)state;
    shard_id id;
    char why[256];
    assert_true(shard_id_parse("2/3", &id, why, sizeof why));
    assert_int_equal(id.index, 2);
    assert_int_equal(id.count, 3);
    assert_true(shard_id_parse("1/1", &id, why, sizeof why));
    static const char *const bad[] = {"0/3", "4/3", "1/0", "a/3", "1/3x", "+1/3", " 1/3", "1/",
                                      "/3", "1/2000", "13", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (shard_id_parse(bad[i], &id, why, sizeof why)) fail_msg("'%s' parsed", bad[i]);
        assert_non_null(strstr(why, "'"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_config_in_one_shard_merges_together_same_every_time),
        cmocka_unit_test(device_auto_joins_cpu_and_cuda),
        cmocka_unit_test(registry_entries_of_one_name_agree),
        cmocka_unit_test(shard_ids_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
