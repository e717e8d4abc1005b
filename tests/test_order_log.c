// tests/test_order_log.c — the record of reduction-order choices (kernels/order_log.h): an op
// that reduced one shape in two orders has varied; one that kept one order per shape, over
// many shapes, has not; a choice the set cannot see is reported as such; and the CPU
// reference set records what its policy chose (one KV split size for a batch whose longest
// sequence does not change, another once it does).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdio.h>    // printf
#include <string.h>   // strstr
#include <time.h>     // time

#include "../kernels/order_log.h"  // order_log_*
#include "../sets/registry.h"   // kernel_set_create
#include "../common/hash.h"             // invar_mix64

static uint64_t seed;

static void one_order_per_shape_is_fixed(void **state) {
    (void)state;
    order_log *log = order_log_create();
    for (int op = 0; op < ORDER_OPS; op++)
        assert_int_equal(order_log_status(log, (order_op)op), ORDER_NOT_CALLED);
    // Many shapes, each with its own (random) order, each seen several times.
    for (int rep = 0; rep < 3; rep++)
        for (uint64_t shape = 0; shape < 200; shape++)
            order_log_note(log, ORDER_GEMM, invar_mix64(seed + shape), invar_mix64(seed ^ shape));
    assert_int_equal(order_log_status(log, ORDER_GEMM), ORDER_FIXED);
    // One shape in a second order: varied, for good.
    order_log_note(log, ORDER_GEMM, invar_mix64(seed + 7), invar_mix64(seed ^ 7) + 1);
    assert_int_equal(order_log_status(log, ORDER_GEMM), ORDER_VARIED);
    order_log_note(log, ORDER_GEMM, invar_mix64(seed + 7), invar_mix64(seed ^ 7));
    assert_int_equal(order_log_status(log, ORDER_GEMM), ORDER_VARIED);
    // Another op's shapes with the same keys are another op's.
    order_log_note(log, ORDER_RMSNORM, invar_mix64(seed + 7), 1);
    assert_int_equal(order_log_status(log, ORDER_RMSNORM), ORDER_FIXED);
    order_log_reset(log);
    assert_int_equal(order_log_status(log, ORDER_GEMM), ORDER_NOT_CALLED);
    order_log_destroy(log);
    order_log_note(NULL, ORDER_GEMM, 1, 2);  // sets that record nothing pass NULL
}

static void description_groups_ops_by_what_was_seen(void **state) {
    (void)state;
    order_log *log = order_log_create();
    order_log_note(log, ORDER_RMSNORM, 256, 1024);
    order_log_note(log, ORDER_MLA_ATTENTION, 1, 0);
    order_log_note(log, ORDER_LOGPROBS, 512, 2);
    order_log_note(log, ORDER_LOGPROBS, 512, 4);  // varied: not named
    order_log_note_unobservable(log, ORDER_GEMM, "cuBLAS picks its kernel inside the library");
    char text[512];
    order_log_describe(log, text, sizeof text);
    printf("  %s\n", text);
    assert_string_equal(text, "one order only: rmsnorm, mla_attention; changed order: logprobs; "
                              "not observable: gemm (cuBLAS picks its kernel inside the library)");
    order_log_destroy(log);
}

// The CPU reference set notes its choices: one batch size is one order; a batch size past the
// policy's threshold (ref_rmsnorm_chunks: 2 chunks of a 64-wide row at M = 4, 1 past M = 256)
// is another.
#define ROWS 300
#define WIDTH 64
static void reference_cpu_set_records_its_choices(void **state) {
    (void)state;
    ops_set *ops = kernel_set_create("reference", "cpu", 1);
    assert_non_null(ops);
    assert_non_null(ops->orders);
    assert_false(ops->adversarial);
    static bf16 x[ROWS * WIDTH], out[ROWS * WIDTH];
    bf16 w[WIDTH];
    for (int i = 0; i < ROWS * WIDTH; i++)  // values in [1, 2): fresh bits each run
        x[i] = (bf16)(0x3f80 + invar_mix64(seed + (uint64_t)i) % 128);
    for (int i = 0; i < WIDTH; i++) w[i] = (bf16)(0x3f80 + invar_mix64(~seed + (uint64_t)i) % 128);
    ops->rmsnorm(ops, out, 0, x, 0, w, 4, WIDTH, 1e-6f);
    ops->rmsnorm(ops, out, 0, x, 0, w, 4, WIDTH, 1e-6f);
    assert_int_equal(order_log_status(ops->orders, ORDER_RMSNORM), ORDER_FIXED);
    assert_int_equal(order_log_status(ops->orders, ORDER_GEMM), ORDER_NOT_CALLED);
    ops->rmsnorm(ops, out, 0, x, 0, w, ROWS, WIDTH, 1e-6f);
    assert_int_equal(order_log_status(ops->orders, ORDER_RMSNORM), ORDER_VARIED);
    ops->destroy(ops);

    ops_set *adv = kernel_set_create("adversarial", "cpu", 1);
    assert_non_null(adv);
    assert_true(adv->adversarial);
    assert_false(adv->batch_invariant);
    assert_true(kernel_set_is_adversarial("adversarial"));
    assert_false(kernel_set_is_adversarial("reference"));
    adv->destroy(adv);
}

static int setup(void **state) {
    (void)state;
    seed = (uint64_t)time(NULL);
    printf("test_order_log: random seed %llu\n", (unsigned long long)seed);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_order_per_shape_is_fixed),
        cmocka_unit_test(description_groups_ops_by_what_was_seen),
        cmocka_unit_test(reference_cpu_set_records_its_choices),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
