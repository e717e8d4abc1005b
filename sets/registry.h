// sets/registry.h — the table of kernel sets: (set name, device) -> ops_set.
#ifndef INVAR_SETS_REGISTRY_H
#define INVAR_SETS_REGISTRY_H

#include <stdbool.h>  // bool
#include "../kernels/ops.h"      // ops_set

typedef struct {
    const char *set;    // "invariant" | "reference" | "adversarial"
    const char *device; // "cpu" | "cuda"
    ops_set *(*create)(int threads); // threads: CPU worker count (0 = all cores); cuda ignores
    bool adversarial;   // the set built to vary every reduction with the batch (ops_set.adversarial)
    bool batch_invariant; // what the set's ops_set.batch_invariant says, known without building it
    // A set whose one batch-variant op is its all-reduce, which is order-free with at most this
    // many ranks (two addends commute): resolution treats it as batch-invariant at
    // tensor_parallel <= this, and as a negative control that must be caught above it. 0: none.
    int order_free_up_to_tp;
    // The set has the engine's TP-size-invariant path (ops_set.tp_size_invariant).
    bool tp_size_invariant;
} kernel_set_entry;

// The sets `invar kernels` checks op by op, terminated by an entry whose set is NULL.
const kernel_set_entry *kernel_sets(void);

// The first entry of that name on any device, in kernel_sets() or among the engine-level
// negative controls (sets made only of ops kernel_sets() already has, combined so that one op
// alone differs from the invariant set: the kernel checker has nothing new to check in them,
// cases name them like any set); NULL when none. A plugin set ("plugin:PATH",
// sets/plugin_set.h) has an entry once its plugin loads, on its own device.
const kernel_set_entry *kernel_set_by_name(const char *set);
// The entry of (set, device), device NULL for any; NULL with the reason in why (may be NULL):
// an unknown name, a set not on that device, or a plugin's refusal naming its file and the
// symbol or field at fault.
const kernel_set_entry *kernel_set_lookup(const char *set, const char *device, char *why, int why_len);

// Whether configs of e at tensor_parallel T run in batch-invariant mode.
bool kernel_set_invariant_at(const kernel_set_entry *e, int tensor_parallel);

// Whether the set of that name is the adversarial negative control (on any device).
bool kernel_set_is_adversarial(const char *set);

// The entry of (set, device), in either table; NULL when no such set is registered. Resolution reads its flags
// here, so deciding a config's mode never builds a set (nor a CUDA context).
const kernel_set_entry *kernel_set_find(const char *set, const char *device);

// Creates the named set on the named device; NULL when no such set is registered.
ops_set *kernel_set_create(const char *set, const char *device, int threads);
// The set of rank `rank` of a tensor-parallel group: on CUDA on GPU `rank` (one GPU per rank;
// exits 2 when there is no such GPU), the calling thread's device left as it was; on the CPU
// as kernel_set_create.
ops_set *kernel_set_create_for_rank(const char *set, const char *device, int threads, int rank);

// CUDA devices this process sees (0 without CUDA or a device).
int cuda_device_count(void);
// What reports record of a tensor-parallel group on `device` of T ranks: the collective
// library ("NCCL 2.28.3" from ncclGetVersion on cuda; "-" on the cpu) and the links between
// GPUs 0..T-1 (inv_cuda_gpu_links: "0-1:p2p+atomics(nvlink)"; "-" below two GPUs or on cpu).
void tp_devices_describe(const char *device, int T, char *library, int library_len,
                         char *links, int links_len);

// True when a CUDA device can be used (the binary was built with CUDA and a device answers).
// `why` receives a reason when it cannot (may be NULL).
bool cuda_device_available(char *why, int why_len);

// What reports record about the CUDA device; false (fields untouched) without one.
typedef struct {
    char name[128];
    char driver[32];               // CUDA driver API version, e.g. "13.0"
    char runtime[32];              // CUDA runtime version
    char cublas[32];
    char compute_capability[16];   // e.g. "9.0"
} cuda_device_info;
bool cuda_device_describe(cuda_device_info *out);

#endif
