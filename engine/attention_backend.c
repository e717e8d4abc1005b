// engine/attention_backend.c — the table of attention backends (engine/attention_backend.h).
#include "attention_backend.h"

#include <stdio.h>    // snprintf
#include <string.h>   // strcmp, strlen

static const attention_backend backends[] = {
    {
        .name = "mla-unified",
        .plays = "no public server: one kernel for prefill and decode over the paged cache",
        .path = ATTENTION_UNIFIED,
        .mla = true, .on_cpu = true, .on_cuda = true,
        .batch_invariant = true,
        .invariant_with_prefix_caching = true,
        .invariant_with_chunked_prefill = true,
        .prefill_equals_decode = true,
        .auto_priority = 30,
    },
    {
        .name = "mla-split",
        .plays = "vLLM TRITON_MLA",
        .path = ATTENTION_SPLIT_PREFILL,
        .mla = true, .on_cpu = true, .on_cuda = true,
        .batch_invariant = true,
        .invariant_with_prefix_caching = false,
        .invariant_with_chunked_prefill = false,
        .prefill_equals_decode = false,
        .auto_priority = 20,
    },
    {
        .name = "mla-flash",
        .plays = "vLLM FLASHMLA",
        .path = ATTENTION_BATCH_SCHEDULED_DECODE,
        .mla = true, .on_cpu = true, .on_cuda = true,
        .batch_invariant = false,
        .invariant_with_prefix_caching = false,
        .invariant_with_chunked_prefill = false,
        .prefill_equals_decode = false,
        .auto_priority = 10,
    },
    {0},
};

const attention_backend *attention_backends(void) { return backends; }

const attention_backend *attention_backend_by_name(const char *name) {
    for (const attention_backend *b = backends; b->name; b++)
        if (strcmp(b->name, name) == 0) return b;
    return NULL;
}

bool attention_backend_on_device(const attention_backend *b, const char *device) {
    return strcmp(device, "cpu") == 0 ? b->on_cpu : strcmp(device, "cuda") == 0 && b->on_cuda;
}

void attention_backend_allowed(const char *device, bool batch_invariant_mode, char *out,
                               int out_len) {
    out[0] = '\0';
    for (const attention_backend *b = backends; b->name; b++) {
        if (!attention_backend_on_device(b, device)) continue;
        if (batch_invariant_mode && !b->batch_invariant) continue;
        size_t used = strlen(out);
        snprintf(out + used, (size_t)out_len - used, "%s%s", used ? ", " : "", b->name);
    }
}
