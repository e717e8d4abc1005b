// tests/test_weights_synthetic.c — synthetic weights (engine/weights_synthetic.c): every element
// of a tensor read through the source is weights_synthetic_value's, bf16 and fp32, below and
// above the size from which every core fills it, also when two threads (tensor-parallel ranks)
// read large tensors from one source at once; outputs are poisoned first.
#include <stdarg.h>                   // cmocka
#include <stddef.h>                   // cmocka
#include <stdint.h>                   // cmocka
#include <setjmp.h>                   // cmocka
#include <cmocka.h>                   // assert_*, cmocka_unit_test

#include <stdlib.h>                   // free
#include <string.h>                   // memcpy

#include "../common/rank_threads.h"   // rank_threads_run
#include "../engine/model_config.h"   // model_config_by_name
#include "../engine/weights.h"        // weights_synthetic, weights_synthetic_value
#include "../kernels/bf16.h"          // float_to_bf16
#include "test_util.h"                // test_alloc, test_poison

enum { SEED = 31 };

// Rows x cols of tensor `name` read as bf16 and fp32 match the element function everywhere.
static void check_tensor(weight_source *w, const char *name, int64_t rows, int64_t cols) {
    const int64_t shape[2] = {rows, cols}, n = rows * cols;
    bf16 *b = test_alloc((size_t)n * sizeof *b);
    float *f = test_alloc((size_t)n * sizeof *f);
    test_poison(b, (size_t)n * sizeof *b);
    test_poison(f, (size_t)n * sizeof *f);
    w->read_bf16(w, name, shape, 2, b);
    w->read_f32(w, name, shape, 2, f);
    for (int64_t i = 0; i < n; i++) {
        float v = weights_synthetic_value(SEED, name, i, shape, 2);
        if (memcmp(&f[i], &v, sizeof v) != 0 || b[i] != float_to_bf16(v))
            fail_msg("%s[%lld]: read %a / bf16 0x%04x, element %a", name, (long long)i,
                     (double)f[i], b[i], (double)v);
    }
    free(b);
    free(f);
}

static void every_element_is_the_element_function(void **state) {
    (void)state;
    model_config c;
    assert_true(model_config_by_name("tiny", &c));
    weight_source *w = weights_synthetic(&c, SEED);
    check_tensor(w, "model.layers.0.self_attn.o_proj.weight", 37, 129);          // one thread
    check_tensor(w, "model.layers.1.mlp.experts.3.up_proj.weight", 1031, 2053); // every core
    w->destroy(w);
}

typedef struct {
    weight_source *w;
} shared_source;

static void read_large(void *arg, int rank) {
    shared_source *s = arg;
    check_tensor(s->w, rank ? "model.embed_tokens.weight" : "lm_head.weight", 1500, 1024);
}

static void two_ranks_read_at_once(void **state) {
    (void)state;
    model_config c;
    assert_true(model_config_by_name("tiny", &c));
    shared_source s = {weights_synthetic(&c, SEED)};
    rank_threads_run(2, read_large, &s);
    s.w->destroy(s.w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_element_is_the_element_function),
        cmocka_unit_test(two_ranks_read_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
