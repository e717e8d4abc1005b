// sets/registry.c — the one table of kernel sets (sets/registry.h).
#include "registry.h"

#include <stdio.h>                          // snprintf
#include <string.h>                         // strcmp

#include "../kernels/cpu/inv_cpu.h"         // inv_cpu_create
#include "../reference/cpu/ref_cpu.h"       // ref_cpu_create, inv_ring_cpu_create
#include "../adversarial/cpu/adv_cpu.h"     // adv_cpu_create
#include "plugin_set.h"                     // plugin_set_path, plugin_probe, plugin_set_create
#ifdef INVAR_CUDA
#include "../kernels/cuda/inv_cuda.h"       // inv_cuda_create, inv_cuda_device_available, inv_cuda_use_device
#include "../reference/cuda/ref_cuda.h"     // ref_cuda_create
#include "../adversarial/cuda/adv_cuda.h"   // adv_cuda_create
#endif

static const kernel_set_entry entries[] = {
    {"invariant", "cpu", inv_cpu_create, false, true, 0, true},
    {"reference", "cpu", ref_cpu_create, false, false, 0, true},
    {"adversarial", "cpu", adv_cpu_create, true, false, 0, true},
#ifdef INVAR_CUDA
    {"invariant", "cuda", inv_cuda_create, false, true, 0, true},
    {"reference", "cuda", ref_cuda_create, false, false, 0, true},
    {"adversarial", "cuda", adv_cuda_create, true, false, 0, true},
#endif
    {NULL, NULL, NULL, false, false, 0, false},
};

// The invariant CPU set with the reference ring all-reduce: only the all-reduce differs, so
// it is caught by the all-reduce alone, at T >= 3 only (CPU only: on CUDA the reference set's
// ncclAllReduce is the one ring, and T >= 3 GPUs are not available to catch it).
static const kernel_set_entry controls[] = {
    {"invariant-ring", "cpu", inv_ring_cpu_create, false, false, 2, false},
    {NULL, NULL, NULL, false, false, 0, false},
};

// Plugin sets ("plugin:PATH") as cases and commands name them, one entry per (name, device)
// probed: the registry's own table, filled as names are looked up (a probe loads the plugin and
// reads its table; it builds no set).
#define PLUGIN_ENTRIES_MAX 32
static struct {
    kernel_set_entry entry;
    char name[sizeof PLUGIN_SET_PREFIX + 4096];
    char device[8];
} plugins[PLUGIN_ENTRIES_MAX];
static int plugin_count;

static const kernel_set_entry *plugin_entry(const char *set, const char *device, char *why, int why_len) {
    for (int i = 0; i < plugin_count; i++)
        if (strcmp(plugins[i].name, set) == 0 && (!device || strcmp(plugins[i].device, device) == 0))
            return &plugins[i].entry;
    plugin_info info;
    char err[1024];
    if (!plugin_probe(plugin_set_path(set), device, &info, err, (int)sizeof err)) {
        snprintf(why, (size_t)why_len, "%s", err);
        return NULL;
    }
    if (plugin_count == PLUGIN_ENTRIES_MAX) {
        snprintf(why, (size_t)why_len, "more than %d plugin sets", PLUGIN_ENTRIES_MAX);
        return NULL;
    }
    int i = plugin_count++;
    snprintf(plugins[i].name, sizeof plugins[i].name, "%s", set);
    snprintf(plugins[i].device, sizeof plugins[i].device, "%s", info.device);
    plugins[i].entry = (kernel_set_entry){
        .set = plugins[i].name,
        .device = plugins[i].device,
        .create = NULL,  // kernel_set_create builds it from the path
        .batch_invariant = (info.claims & info.provided) == info.provided,
    };
    return &plugins[i].entry;
}

const kernel_set_entry *kernel_sets(void) { return entries; }

const kernel_set_entry *kernel_set_lookup(const char *set, const char *device, char *why, int why_len) {
    char ignored[8];
    if (!why) {
        why = ignored;
        why_len = (int)sizeof ignored;
    }
    if (plugin_set_path(set)) return plugin_entry(set, device, why, why_len);
    bool named = false;
    for (int t = 0; t < 2; t++)
        for (const kernel_set_entry *e = t ? controls : entries; e->set; e++) {
            if (strcmp(e->set, set) != 0) continue;
            if (!device || strcmp(e->device, device) == 0) return e;
            named = true;
        }
    if (named) snprintf(why, (size_t)why_len, "no kernel set '%s' on device %s", set, device);
    else snprintf(why, (size_t)why_len, "unknown kernel set '%s'", set);
    return NULL;
}

const kernel_set_entry *kernel_set_by_name(const char *set) { return kernel_set_lookup(set, NULL, NULL, 0); }

bool kernel_set_is_adversarial(const char *set) {
    const kernel_set_entry *e = kernel_set_by_name(set);
    return e && e->adversarial;
}

bool kernel_set_invariant_at(const kernel_set_entry *e, int tensor_parallel) {
    return e->batch_invariant || tensor_parallel <= e->order_free_up_to_tp;
}

const kernel_set_entry *kernel_set_find(const char *set, const char *device) {
    return kernel_set_lookup(set, device, NULL, 0);
}

static ops_set *set_create(const char *set, const char *device, int threads, int rank) {
    if (plugin_set_path(set)) return plugin_set_create(plugin_set_path(set), device, threads, rank);
    const kernel_set_entry *e = kernel_set_find(set, device);
    return e ? e->create(threads) : NULL;
}

ops_set *kernel_set_create(const char *set, const char *device, int threads) {
    return set_create(set, device, threads, 0);
}

ops_set *kernel_set_create_for_rank(const char *set, const char *device, int threads, int rank) {
    if (strcmp(device, "cuda") != 0) return set_create(set, device, threads, rank);
#ifdef INVAR_CUDA
    int previous = inv_cuda_use_device(rank);
    ops_set *ops = set_create(set, device, threads, rank);
    (void)inv_cuda_use_device(previous);
    return ops;
#else
    (void)rank;
    return NULL;  // no cuda entry is registered
#endif
}

int cuda_device_count(void) {
#ifdef INVAR_CUDA
    return inv_cuda_device_count();
#else
    return 0;
#endif
}

void tp_devices_describe(const char *device, int T, char *library, int library_len,
                         char *links, int links_len) {
    snprintf(library, (size_t)library_len, "-");
    snprintf(links, (size_t)links_len, "-");
#ifdef INVAR_CUDA
    if (strcmp(device, "cuda") != 0 || inv_cuda_device_count() == 0) return;
    char version[32];
    inv_cuda_nccl_version(version, (int)sizeof version);
    snprintf(library, (size_t)library_len, "NCCL %s", version);
    inv_cuda_gpu_links(T, links, links_len);
#else
    (void)device;
    (void)T;
#endif
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
