// tests/test_plugin_set.c — kernel sets from plugins (sets/plugin_set.h): every refused plugin
// named with its file and the symbol or field at fault; a loaded plugin's ops in place of the
// invariant set's and only those, its claims, and its RMSNorm run on fresh data through the set.
// The plugins are tests/plugins/test_plugin.c's variants, built into BUILD/plugins/.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test

#include <libgen.h>                 // dirname
#include <limits.h>                 // PATH_MAX
#include <stdio.h>                  // snprintf, fopen
#include <string.h>                 // strstr, strcmp

#include "../kernels/cpu/inv_cpu.h" // inv_cpu_create
#include "../kernels/f64/f64.h"     // f64_rmsnorm, f64_rel_l2_bf16
#include "../sets/plugin_set.h"     // plugin_probe, plugin_set_create, plugin_set_op_source
#include "../sets/registry.h"       // kernel_set_find, kernel_set_entry
#include "test_util.h"              // test_alloc, test_fill_bf16, test_poison, test_unwritten_bf16

#define TOL_BF16 1e-2  // two bf16 roundings, as tests/test_inv_cpu_rmsnorm.c
#define EPS 1e-6f

static char plugin_dir[PATH_MAX];  // BUILD/plugins, from this binary's own path

static const char *plugin_path(const char *variant) {
    static char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.so", plugin_dir, variant);
    return path;
}

// The probe refuses the plugin, naming its file and `fault`.
static void assert_refused(const char *variant, const char *device, const char *fault) {
    char err[1024] = "";
    plugin_info info;
    const char *path = plugin_path(variant);
    assert_false(plugin_probe(path, device, &info, err, (int)sizeof err));
    if (!strstr(err, path) || !strstr(err, fault)) fail_msg("%s: message \"%s\" lacks \"%s\"", variant, err, fault);
}

static void test_refusals(void **state) {
    (void)state;
    assert_refused("bad_abi_version", "cpu", "abi_version 2, but this invar speaks version 1");
    assert_refused("bad_abi_unset", "cpu", "abi_version 0, but this invar speaks version 1");  // older too
    assert_refused("bad_null_table", "cpu", "invar_plugin_entry returned NULL");
    assert_refused("bad_device", "cpu", "its ops are for cuda, not for --device cpu");
    assert_refused("bad_claim", "cpu", "claims gemm, which it does not provide");
    assert_refused("no_entry", "cpu", "no symbol invar_plugin_entry");
    assert_refused("no_such_plugin", "cpu", "cannot load it as a shared object");
    // A file that is not a shared object.
    char text[PATH_MAX + 64];
    snprintf(text, sizeof text, "%s/not_a_plugin.so", plugin_dir);
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    fputs("not an ELF file\n", f);
    fclose(f);
    assert_refused("not_a_plugin", "cpu", "cannot load it as a shared object");
}

static void test_probe_reads_the_table(void **state) {
    (void)state;
    plugin_info info;
    char err[1024];
    assert_true(plugin_probe(plugin_path("rmsnorm_invariant"), "cpu", &info, err, (int)sizeof err));
    assert_string_equal(info.name, "test-rmsnorm");
    assert_string_equal(info.device, "cpu");
    assert_true(info.provided == INVAR_OP_BIT(INVAR_OP_RMSNORM));
    assert_true(info.claims == INVAR_OP_BIT(INVAR_OP_RMSNORM));
    assert_true(plugin_probe(plugin_path("rmsnorm_split_small_honest"), NULL, &info, err, (int)sizeof err));
    assert_true(info.claims == 0);
    assert_int_equal(plugin_op_by_name("rmsnorm"), INVAR_OP_RMSNORM);
    assert_int_equal(plugin_op_by_name("logprobs"), INVAR_OP_LOGPROBS);
    assert_int_equal(plugin_op_by_name("all_reduce"), -1);  // the set's, never a plugin's
}

// The plugin's op replaces the invariant set's; every other op is the invariant set's own.
static void test_only_provided_ops_replaced(void **state) {
    (void)state;
    ops_set *inv = inv_cpu_create(1);
    ops_set *ops = plugin_set_create(plugin_path("rmsnorm_invariant"), "cpu", 1, 0);
    assert_true(plugin_set_is(ops));
    assert_false(plugin_set_is(inv));
    assert_true(ops->batch_invariant);
    assert_string_equal(ops->device, "cpu");
    assert_true(strncmp(ops->name, "plugin:", 7) == 0 && strstr(ops->name, "rmsnorm_invariant.so"));
    assert_true(ops->rmsnorm != inv->rmsnorm);
    assert_true(ops->gemm == inv->gemm);
    assert_true(ops->logprobs == inv->logprobs);
    assert_true(ops->all_reduce == inv->all_reduce);
    assert_true(ops->alloc == inv->alloc);
    assert_string_equal(plugin_set_op_source(ops, INVAR_OP_RMSNORM), "plugin");
    assert_string_equal(plugin_set_op_source(ops, INVAR_OP_GEMM), "invariant");
    assert_string_equal(plugin_set_op_source(inv, INVAR_OP_RMSNORM), "invariant");
    assert_true(plugin_set_claims(ops, INVAR_OP_RMSNORM));
    assert_false(plugin_set_claims(ops, INVAR_OP_GEMM));
    ops->destroy(ops);
    inv->destroy(inv);

    ops = plugin_set_create(plugin_path("rmsnorm_split_small_honest"), "cpu", 1, 3);
    assert_false(ops->batch_invariant);  // an op it provides is not claimed
    assert_false(plugin_set_claims(ops, INVAR_OP_RMSNORM));
    ops->destroy(ops);

    // Some of its ops claimed, not all (mixed: rmsnorm claimed, residual_add not): the set as a
    // whole is not invariant, built or only probed (the registry's flag), its claims op by op.
    ops = plugin_set_create(plugin_path("mixed"), "cpu", 1, 0);
    assert_false(ops->batch_invariant);
    assert_true(plugin_set_claims(ops, INVAR_OP_RMSNORM));
    assert_false(plugin_set_claims(ops, INVAR_OP_RESIDUAL_ADD));
    ops->destroy(ops);
    char set[PATH_MAX + 80];
    snprintf(set, sizeof set, "plugin:%s", plugin_path("mixed"));
    const kernel_set_entry *e = kernel_set_find(set, "cpu");
    assert_non_null(e);
    assert_false(e->batch_invariant);
}

// The plugin's RMSNorm through the set: every element written, padding untouched, accurate; a
// stride of 0 read as dense.
static void test_plugin_op_runs(void **state) {
    (void)state;
    enum { M = 9, D = 1003, PAD = 13 };
    const long ld = D + PAD;
    ops_set *ops = plugin_set_create(plugin_path("rmsnorm_invariant"), "cpu", 2, 0);
    bf16 *x = test_alloc(sizeof(bf16) * M * ld), *w = test_alloc(sizeof(bf16) * D);
    bf16 *out = test_alloc(sizeof(bf16) * M * ld), *dense = test_alloc(sizeof(bf16) * M * D);
    bf16 *x_dense = test_alloc(sizeof(bf16) * M * D);
    double *ref = test_alloc(sizeof(double) * M * D);
    test_fill_bf16(x, M * ld, 41, 2.0f);
    test_fill_bf16(w, D, 42, 1.5f);
    for (int m = 0; m < M; m++) memcpy(x_dense + (long)m * D, x + m * ld, sizeof(bf16) * D);
    f64_rmsnorm(ref, x, ld, w, M, D, EPS);
    test_poison(out, sizeof(bf16) * M * ld);
    ops->rmsnorm(ops, out, ld, x, ld, w, M, D, EPS);
    test_poison(dense, sizeof(bf16) * M * D);
    ops->rmsnorm(ops, dense, 0, x_dense, 0, w, M, D, EPS);
    for (int m = 0; m < M; m++) {
        assert_int_equal(test_unwritten_bf16(out + m * ld, D), 0);
        assert_int_equal(test_unwritten_bf16(out + m * ld + D, PAD), PAD);
        assert_true(f64_rel_l2_bf16(out + m * ld, ref + (long)m * D, D) < TOL_BF16);
        assert_memory_equal(out + m * ld, dense + (long)m * D, sizeof(bf16) * D);
    }
    free(ref);
    free(x_dense);
    free(dense);
    free(out);
    free(w);
    free(x);
    ops->destroy(ops);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[PATH_MAX];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(plugin_dir, sizeof plugin_dir, "%s/../plugins", dirname(self));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_probe_reads_the_table),
        cmocka_unit_test(test_only_provided_ops_replaced),
        cmocka_unit_test(test_plugin_op_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
