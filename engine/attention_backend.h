// engine/attention_backend.h — the attention backends the engine can run, each with the
// capabilities it declares. Resolution (harness/run/resolve.c) reads these capabilities, never a
// backend's name or an environment variable.
#ifndef INVAR_ENGINE_ATTENTION_BACKEND_H
#define INVAR_ENGINE_ATTENTION_BACKEND_H

#include <stdbool.h>  // bool

// How the engine's forward pass runs a backend.
enum attention_path {
    // One absorbed kernel over the paged latent cache for prefill and decode alike.
    ATTENTION_UNIFIED,
    // Decodes absorbed; prefill non-absorbed, cached context and new tokens attended
    // separately and merged by log-sum-exp (vLLM TRITON_MLA).
    ATTENTION_SPLIT_PREFILL,
    // As SPLIT_PREFILL, but decode's KV split size comes from a scheduler over the whole
    // batch's lengths (FlashMLA's tile scheduler).
    ATTENTION_BATCH_SCHEDULED_DECODE,
};

typedef struct {
    const char *name;
    const char *plays;                     // the serving-stack backend it stands for
    enum attention_path path;
    bool mla;
    bool on_cpu, on_cuda;
    bool batch_invariant;                  // can be batch-invariant at all (on invariant kernels)
    bool invariant_with_prefix_caching;
    bool invariant_with_chunked_prefill;
    bool prefill_equals_decode;            // prefill logprobs bitwise equal decode logprobs
    int auto_priority;                     // higher wins when `auto` picks among the eligible
} attention_backend;

// The registered backends, terminated by an entry whose name is NULL.
const attention_backend *attention_backends(void);
const attention_backend *attention_backend_by_name(const char *name);
bool attention_backend_on_device(const attention_backend *b, const char *device);

// The comma-separated names of the backends that satisfy `batch_invariant_mode` on `device`,
// for error messages.
void attention_backend_allowed(const char *device, bool batch_invariant_mode, char *out,
                               int out_len);

#endif
