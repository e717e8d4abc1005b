// sets/registry.c — the one table of kernel sets (sets/registry.h).
#include "registry.h"

#include <stdio.h>                          // snprintf
#include <string.h>                         // strcmp

#include "../kernels/cpu/inv_cpu.h"         // inv_cpu_create
#include "../reference/cpu/ref_cpu.h"       // ref_cpu_create
#include "../adversarial/cpu/adv_cpu.h"     // adv_cpu_create
#ifdef INVAR_CUDA
#include "../kernels/cuda/inv_cuda.h"       // inv_cuda_create, inv_cuda_device_available
#include "../reference/cuda/ref_cuda.h"     // ref_cuda_create
#include "../adversarial/cuda/adv_cuda.h"   // adv_cuda_create
#endif

static const kernel_set_entry entries[] = {
    {"invariant", "cpu", inv_cpu_create, false, true},
    {"reference", "cpu", ref_cpu_create, false, false},
    {"adversarial", "cpu", adv_cpu_create, true, false},
#ifdef INVAR_CUDA
    {"invariant", "cuda", inv_cuda_create, false, true},
    {"reference", "cuda", ref_cuda_create, false, false},
    {"adversarial", "cuda", adv_cuda_create, true, false},
#endif
    {NULL, NULL, NULL, false, false},
};

const kernel_set_entry *kernel_sets(void) { return entries; }

bool kernel_set_is_adversarial(const char *set) {
    for (const kernel_set_entry *e = entries; e->set; e++)
        if (strcmp(e->set, set) == 0) return e->adversarial;
    return false;
}

const kernel_set_entry *kernel_set_find(const char *set, const char *device) {
    for (const kernel_set_entry *e = entries; e->set; e++)
        if (strcmp(e->set, set) == 0 && strcmp(e->device, device) == 0) return e;
    return NULL;
}

ops_set *kernel_set_create(const char *set, const char *device, int threads) {
    const kernel_set_entry *e = kernel_set_find(set, device);
    return e ? e->create(threads) : NULL;
}

bool cuda_device_describe(cuda_device_info *out) {
#ifdef INVAR_CUDA
    char why[16];
    if (!inv_cuda_device_available(why, sizeof why)) return false;
    inv_cuda_device_describe(out->name, sizeof out->name, out->driver, sizeof out->driver,
                             out->runtime, sizeof out->runtime, out->cublas, sizeof out->cublas,
                             out->compute_capability, sizeof out->compute_capability);
    return true;
#else
    (void)out;
    return false;
#endif
}

bool cuda_device_available(char *why, int why_len) {
#ifdef INVAR_CUDA
    return inv_cuda_device_available(why, why_len);
#else
    if (why) snprintf(why, (size_t)why_len, "invar was built without CUDA (nvcc not found)");
    return false;
#endif
}
