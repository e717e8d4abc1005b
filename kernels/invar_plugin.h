// kernels/invar_plugin.h — the plugin ABI: a shared object that provides some or all of the
// compute ops of kernels/ops.h for one device, so `invar kernels --plugin PATH` can judge
// kernels written outside this repository and `invar run --kernel-set plugin:PATH` can run the
// engine on them.
//
// A plugin exports one C function, INVAR_PLUGIN_ENTRY_NAME, of type invar_plugin_entry_fn. invar
// calls it once per load with its own INVAR_PLUGIN_ABI_VERSION and refuses a table whose
// abi_version differs: the argument structs are ops.h's, so a change to any of them is a new
// version, except a field appended last that an older plugin may ignore (it reads the fields
// before it where they were; moe_experts_args.out_f32, gemm_args.split_N,
// mla_attention_args.H_select and moe_experts_args' and moe_combine_args' slices came so, each
// meaning "as before" when zero, and a plugin always gets slices = 0). Everything below is
// plain C; a CUDA plugin is compiled with nvcc or a C++ compiler and exports the entry with C
// linkage.
//
// What stays invar's: memory (alloc, upload, download, sync), the collectives and rank binding
// are the invariant set's of the same device, and so is every op whose pointer is NULL. Pointers
// an op receives are that set's memory: host memory on the CPU, device memory on CUDA.
//
// Streams: on CUDA every call names the stream invar's other ops run on; a plugin enqueues its
// work there and must not synchronise the device or use the default stream (a kernel on another
// stream races with the ops around it, and the checker catches that as variance).
#ifndef INVAR_KERNELS_INVAR_PLUGIN_H
#define INVAR_KERNELS_INVAR_PLUGIN_H

#include <stdint.h>  // uint32_t, uint64_t
#include "ops.h"     // bf16, gemm_args, mla_attention_args, ... (the ops' arguments)

#ifdef __cplusplus
extern "C" {
#endif

#define INVAR_PLUGIN_ABI_VERSION 1u
#define INVAR_PLUGIN_ENTRY_NAME "invar_plugin_entry"

// The ops a plugin may provide, in ops.h's order; bit INVAR_OP_BIT(op) of invariant_claims says
// the plugin claims that op batch-invariant.
enum invar_plugin_op {
    INVAR_OP_EMBEDDING,
    INVAR_OP_RMSNORM,
    INVAR_OP_GEMM,
    INVAR_OP_ROPE,
    INVAR_OP_RESIDUAL_ADD,
    INVAR_OP_SILU_MUL,
    INVAR_OP_KV_CACHE_WRITE,
    INVAR_OP_MLA_ATTENTION,
    INVAR_OP_MHA_PREFILL,
    INVAR_OP_MERGE_ATTENTION,
    INVAR_OP_MOE_ROUTE,
    INVAR_OP_MOE_EXPERTS,
    INVAR_OP_MOE_COMBINE,
    INVAR_OP_LOGPROBS,
    INVAR_OP_COUNT
};
#define INVAR_OP_BIT(op) ((uint64_t)1 << (op))

// Passed to every op: the plugin's state for this rank and where to run.
typedef struct invar_plugin_call invar_plugin_call;
struct invar_plugin_call {
    void *state;   // what create returned for this rank (NULL without create)
    int rank;      // tensor-parallel rank; 0 outside tensor parallelism
    int device;    // CUDA device ordinal; -1 on the CPU
    void *stream;  // the cudaStream_t to enqueue on; NULL on the CPU
    // An op that cannot do its work says why here and returns: the kernel checker reports an
    // ERROR row for that op and shape and goes on; a run stops with the message.
    void (*fail)(const invar_plugin_call *c, const char *message);
};

typedef struct {
    uint32_t abi_version;       // INVAR_PLUGIN_ABI_VERSION of the header the plugin was built with
    const char *name;           // shown in reports
    const char *device;         // "cpu" or "cuda": the device the ops' pointers live on
    uint64_t invariant_claims;  // INVAR_OP_BIT of each provided op claimed batch-invariant

    // One instance per tensor-parallel rank, made on that rank's thread with its device
    // current; either may be NULL. create returning NULL is a failed load.
    void *(*create)(int rank, int device);
    void (*destroy)(void *state);

    // The ops, as ops.h documents them; NULL: the invariant set's.
    void (*embedding)(const invar_plugin_call *c, bf16 *out, const bf16 *table, const int32_t *ids,
                      int T, int D);
    void (*rmsnorm)(const invar_plugin_call *c, bf16 *out, long ld_out, const bf16 *x, long ld_x,
                    const bf16 *w, int M, int D, float eps);
    void (*gemm)(const invar_plugin_call *c, const gemm_args *a);
    void (*rope)(const invar_plugin_call *c, bf16 *x, long ld_token, long ld_head, int T, int H,
                 int R, const int32_t *pos, const float *cos, const float *sin, bool interleave);
    void (*residual_add)(const invar_plugin_call *c, bf16 *x, const bf16 *y, long n);
    void (*silu_mul)(const invar_plugin_call *c, bf16 *out, const bf16 *gate_up, int M, int I);
    void (*kv_cache_write)(const invar_plugin_call *c, bf16 *kv_cache, const bf16 *c_kv,
                           long ld_c_kv, const bf16 *k_pe, long ld_k_pe, const int32_t *slot,
                           int T, int L, int R);
    void (*mla_attention)(const invar_plugin_call *c, const mla_attention_args *a);
    void (*mha_prefill)(const invar_plugin_call *c, const mha_prefill_args *a);
    void (*merge_attention)(const invar_plugin_call *c, const merge_attention_args *a);
    void (*moe_route)(const invar_plugin_call *c, const moe_route_args *a);
    void (*moe_experts)(const invar_plugin_call *c, const moe_experts_args *a);
    void (*moe_combine)(const invar_plugin_call *c, const moe_combine_args *a);
    void (*logprobs)(const invar_plugin_call *c, const logprobs_args *a);
} invar_plugin;

// host_abi_version: the loading invar's INVAR_PLUGIN_ABI_VERSION (a plugin may serve several).
typedef const invar_plugin *(*invar_plugin_entry_fn)(uint32_t host_abi_version);

// For code that links invar as a library (libinvar.so: the Python bridge): a table built at run
// time, registered under `name`, is the plugin set "plugin:NAME" for invar_cli's commands (as a
// shared object's path would be). False, with the reason in err, for a table invar_plugin_entry
// would refuse, or a name already taken.
// (harness/invar_lib.h: invar_cli runs a command.)
bool invar_plugin_register(const char *name, const invar_plugin *table, char *err, int err_len);

#ifdef __cplusplus
}
#endif

#endif
