// tests/test_model_presets.c — the named model configs (engine/model_config.c) bit for bit: each
// preset's whole struct (padding zeroed by its memset) hashed and compared with the value it had
// when the presets were folded into a base and its variants. A preset is part of every report
// and every synthetic weight drawn from it, so one changed by accident changes them all; change
// a value here only with the preset, on purpose.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test
#include <inttypes.h>               // PRIx64
#include <stdio.h>                  // printf
#include <string.h>                 // strcmp
#include <xxhash.h>                 // XXH64

#include "../engine/model_config.h" // model_config_by_name, model_config_names

static const struct {
    const char *name;
    uint64_t bits;  // XXH64 of the model_config, seed 0
} presets[] = {
    {"tiny", 0xb3ef872d87da54d7},
    {"tiny-v2", 0x553d206b7ff3578f},
    {"tiny-tp", 0x96531145a4b12aa8},
    {"tiny-reach", 0x687314f70fb0f88b},
    {"tiny-long", 0xff460bd68ca4f1f4},
    {"small", 0x155000d6f2a33c89},
    {"v2-lite", 0x49c93c67b251c643},
    {"v3", 0x6ee2fe8dbcc9f1d8},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static void every_preset_keeps_its_bits(void **state) {
    (void)state;
    int failed = 0;
    for (size_t i = 0; i < N_PRESETS; i++) {
        model_config c;
        assert_true(model_config_by_name(presets[i].name, &c));
        const uint64_t h = XXH64(&c, sizeof c, 0);
        if (h != presets[i].bits) {
            printf("preset %s: bits 0x%016" PRIx64 ", expected 0x%016" PRIx64 "\n", presets[i].name, h,
                   presets[i].bits);
            failed++;
        }
    }
    assert_int_equal(failed, 0);
}

// Every name model_config_names lists is in the table above, and no other.
static void every_preset_is_listed(void **state) {
    (void)state;
    size_t n = 0;
    for (const char *const *name = model_config_names(); *name; name++, n++) {
        size_t i = 0;
        while (i < N_PRESETS && strcmp(presets[i].name, *name) != 0) i++;
        if (i == N_PRESETS) fail_msg("preset %s has no expected bits in this test", *name);
    }
    assert_int_equal(n, N_PRESETS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_preset_keeps_its_bits),
        cmocka_unit_test(every_preset_is_listed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
