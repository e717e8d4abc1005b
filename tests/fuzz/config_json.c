// tests/fuzz/config_json.c — fuzz target: config.json text (engine/config_json.c). An accepted
// config is formatted back (which may refuse it) and its tensor count computed, the two things
// done with a config before any weight is read.
#include <stdlib.h>                    // free

#include "../../engine/checkpoint.h"   // checkpoint_tensor_count
#include "../../engine/config_json.h"  // config_json_parse, config_json_format
#include "fuzz_input.h"                // LLVMFuzzerTestOneInput

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    model_config cfg;
    config_json_info info;
    char err[1024];
    if (!config_json_parse((const char *)data, size, "config.json", &cfg, &info, err, sizeof err))
        return 0;
    (void)checkpoint_tensor_count(&cfg);
    free(config_json_format(&cfg, err, sizeof err));
    return 0;
}
