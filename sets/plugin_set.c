// sets/plugin_set.c — kernel sets loaded from plugins (sets/plugin_set.h).
#include "plugin_set.h"

#include <dlfcn.h>                          // dlopen, dlsym, dlclose, dlerror
#include <stdarg.h>                         // va_list
#include <stddef.h>                         // offsetof
#include <stdio.h>                          // snprintf, vsnprintf
#include <string.h>                         // strcmp, strncmp

#include "../common/check.h"                // invar_die, invar_calloc
#include "../kernels/cpu/inv_cpu.h"         // inv_cpu_init
#include "../kernels/moe_slices.h"          // moe_experts_by_slice, moe_combine_by_slice
#ifdef INVAR_CUDA
#include "../kernels/cuda/inv_cuda.h"       // inv_cuda_init
#include "../kernels/cuda/inv_cuda_launch.h" // inv_cuda_stream, inv_cuda_device
#endif

static const char *const op_names[INVAR_OP_COUNT] = {
    "embedding",     "rmsnorm",     "gemm",        "rope",       "residual_add",
    "silu_mul",      "kv_cache_write", "mla_attention", "mha_prefill", "merge_attention",
    "moe_route",     "moe_experts", "moe_combine", "logprobs",
};

// The set: ops first (the invariant set's ops read ops.ctx, the trampolines find the rest).
typedef struct {
    ops_set ops;
    void (*base_destroy)(ops_set *ops);  // the invariant set's context teardown
    void *dl;                            // NULL for a registered table
    const invar_plugin *plugin;
    invar_plugin_call call;
    char name[sizeof PLUGIN_SET_PREFIX + 4096];
    bool collect_errors;                 // keep an op's failure for the checker, not exit
    bool failed;
    char error[512];
    const char *failed_op;
} plugin_set;

// Tables registered by code that links invar as a library (invar_plugin_register): the plugin
// registry, looked up by name before any shared object.
#define REGISTERED_MAX 16
static char registered_names[REGISTERED_MAX][256];
static const invar_plugin *registered_tables[REGISTERED_MAX];
static int registered_count;

static const invar_plugin *registered_table(const char *name) {
    for (int i = 0; i < registered_count; i++)
        if (strcmp(registered_names[i], name) == 0) return registered_tables[i];
    return NULL;
}

int plugin_op_by_name(const char *name) {
    for (int i = 0; i < INVAR_OP_COUNT; i++)
        if (strcmp(op_names[i], name) == 0) return i;
    return -1;
}

const char *plugin_set_path(const char *set) {
    return strncmp(set, PLUGIN_SET_PREFIX, sizeof PLUGIN_SET_PREFIX - 1) == 0 ? set + sizeof PLUGIN_SET_PREFIX - 1
                                                                             : NULL;
}

static uint64_t provided_ops(const invar_plugin *p) {
    const void *fns[INVAR_OP_COUNT] = {
        (const void *)p->embedding,     (const void *)p->rmsnorm,
        (const void *)p->gemm,          (const void *)p->rope,
        (const void *)p->residual_add,  (const void *)p->silu_mul,
        (const void *)p->kv_cache_write, (const void *)p->mla_attention,
        (const void *)p->mha_prefill,   (const void *)p->merge_attention,
        (const void *)p->moe_route,     (const void *)p->moe_experts,
        (const void *)p->moe_combine,   (const void *)p->logprobs,
    };
    uint64_t bits = 0;
    for (int i = 0; i < INVAR_OP_COUNT; i++)
        if (fns[i]) bits |= INVAR_OP_BIT(i);
    return bits;
}

static bool fail(char *err, int err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, int err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)err_len, fmt, ap);
    va_end(ap);
    return false;
}

// What is wrong with a table for `device` (NULL: any); "" when nothing.
static void table_problem(const invar_plugin *p, const char *device, char *why, size_t len) {
    why[0] = '\0';
    if (!p) {
        snprintf(why, len, "returned NULL");
    } else if (p->abi_version != INVAR_PLUGIN_ABI_VERSION) {
        snprintf(why, len, "abi_version %u, but this invar speaks version %u (rebuild the "
                 "plugin against this kernels/invar_plugin.h)", p->abi_version, INVAR_PLUGIN_ABI_VERSION);
    } else if (!p->device || (strcmp(p->device, "cpu") != 0 && strcmp(p->device, "cuda") != 0)) {
        snprintf(why, len, "device \"%s\": not cpu or cuda", p->device ? p->device : "(null)");
    } else if (device && strcmp(p->device, device) != 0) {
        snprintf(why, len, "device \"%s\": its ops are for %s, not for --device %s", p->device,
                 p->device, device);
    } else if (!p->name || !p->name[0]) {
        snprintf(why, len, "name: empty");
    } else if (provided_ops(p) == 0) {
        snprintf(why, len, "provides no op (every op pointer is NULL)");
    } else if (p->invariant_claims & ~provided_ops(p)) {
        uint64_t extra = p->invariant_claims & ~provided_ops(p);
        int op = 0;
        while (op < 64 && !(extra >> op & 1)) op++;
        if (op < INVAR_OP_COUNT)
            snprintf(why, len, "invariant_claims: claims %s, which it does not provide", op_names[op]);
        else
            snprintf(why, len, "invariant_claims: bit %d names no op", op);
    }
}

// The table of plugin PATH (a registered name, else a shared object) and its checks; on success
// *dl holds the handle (NULL for a registered table) and *out the table.
static bool plugin_open(const char *path, const char *device, void **dl, const invar_plugin **out,
                        char *err, int err_len) {
    *dl = NULL;
    char why[256];
    const invar_plugin *p = registered_table(path);
    if (p) {
        table_problem(p, device, why, sizeof why);
        if (why[0]) return fail(err, err_len, "plugin %s: %s", path, why);
        *out = p;
        return true;
    }
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *reason = dlerror();
        return fail(err, err_len, "plugin %s: cannot load it as a shared object: %s", path,
                    reason ? reason : "dlopen failed");
    }
    dlerror();
    void *sym = dlsym(h, INVAR_PLUGIN_ENTRY_NAME);
    if (!sym) {
        dlclose(h);
        return fail(err, err_len, "plugin %s: no symbol %s (export it with C linkage)", path,
                    INVAR_PLUGIN_ENTRY_NAME);
    }
    invar_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);  // object to function pointer, as POSIX allows
    p = entry(INVAR_PLUGIN_ABI_VERSION);
    table_problem(p, device, why, sizeof why);
    if (why[0]) {
        dlclose(h);
        return fail(err, err_len, "plugin %s: %s %s", path, INVAR_PLUGIN_ENTRY_NAME, why);
    }
    *dl = h;
    *out = p;
    return true;
}

bool plugin_is_registered(const char *path) { return registered_table(path) != NULL; }

bool invar_plugin_register(const char *name, const invar_plugin *table, char *err, int err_len) {
    char why[256];
    if (!name || !name[0] || strlen(name) >= sizeof registered_names[0])
        return fail(err, err_len, "plugin table: a name of 1 to %zu characters", sizeof registered_names[0] - 1);
    if (registered_table(name)) return fail(err, err_len, "plugin %s: the name is taken", name);
    if (registered_count == REGISTERED_MAX)
        return fail(err, err_len, "plugin %s: more than %d tables registered", name, REGISTERED_MAX);
    table_problem(table, NULL, why, sizeof why);
    if (why[0]) return fail(err, err_len, "plugin %s: table %s", name, why);
    snprintf(registered_names[registered_count], sizeof registered_names[0], "%s", name);
    registered_tables[registered_count++] = table;
    return true;
}

bool plugin_probe(const char *path, const char *device, plugin_info *info, char *err, int err_len) {
    void *dl;
    const invar_plugin *p;
    if (!plugin_open(path, device, &dl, &p, err, err_len)) return false;
    snprintf(info->name, sizeof info->name, "%s", p->name);
    snprintf(info->device, sizeof info->device, "%s", p->device);
    info->provided = provided_ops(p);
    info->claims = p->invariant_claims;
    if (dl) dlclose(dl);
    return true;
}

// --- the trampolines: ops.h's signatures to the plugin's ---------------------------------------

static const invar_plugin_call *call_of(ops_set *ops) { return &((plugin_set *)ops)->call; }
static const invar_plugin *plugin_of(ops_set *ops) { return ((plugin_set *)ops)->plugin; }

// invar_plugin_call.fail: the call is the set's own, so the set is found from it. The first
// message of a call is kept.
static void plugin_fail(const invar_plugin_call *c, const char *message) {
    plugin_set *s = (plugin_set *)((char *)c - offsetof(plugin_set, call));
    if (s->failed) return;
    s->failed = true;
    snprintf(s->error, sizeof s->error, "%s", message ? message : "(no message)");
}

// After an op: a failure ends a run (the engine has no row to put it in), or waits for the
// checker.
static void after(ops_set *ops, const char *op) {
    plugin_set *s = (plugin_set *)ops;
    if (!s->failed) return;
    if (!s->failed_op) s->failed_op = op;
    if (!s->collect_errors)
        invar_die(INVAR_EXIT_SYSTEM, "plugin %s: %s failed: %s", plugin_set_path(s->name), op,
                  s->error);
}

static void tr_embedding(ops_set *ops, bf16 *out, const bf16 *table, const int32_t *ids, int T, int D) {
    plugin_of(ops)->embedding(call_of(ops), out, table, ids, T, D); after(ops, "embedding");
}
static void tr_rmsnorm(ops_set *ops, bf16 *out, long ld_out, const bf16 *x, long ld_x, const bf16 *w,
                       int M, int D, float eps) {
    plugin_of(ops)->rmsnorm(call_of(ops), out, ld_out, x, ld_x, w, M, D, eps); after(ops, "rmsnorm");
}
static void tr_gemm(ops_set *ops, const gemm_args *a) { plugin_of(ops)->gemm(call_of(ops), a); after(ops, "gemm"); }
static void tr_rope(ops_set *ops, bf16 *x, long ld_token, long ld_head, int T, int H, int R,
                    const int32_t *pos, const float *cos, const float *sin, bool interleave) {
    plugin_of(ops)->rope(call_of(ops), x, ld_token, ld_head, T, H, R, pos, cos, sin, interleave); after(ops, "rope");
}
static void tr_residual_add(ops_set *ops, bf16 *x, const bf16 *y, long n) {
    plugin_of(ops)->residual_add(call_of(ops), x, y, n); after(ops, "residual_add");
}
static void tr_silu_mul(ops_set *ops, bf16 *out, const bf16 *gate_up, int M, int I) {
    plugin_of(ops)->silu_mul(call_of(ops), out, gate_up, M, I); after(ops, "silu_mul");
}
static void tr_kv_cache_write(ops_set *ops, bf16 *kv_cache, const bf16 *c_kv, long ld_c_kv,
                              const bf16 *k_pe, long ld_k_pe, const int32_t *slot, int T, int L, int R) {
    plugin_of(ops)->kv_cache_write(call_of(ops), kv_cache, c_kv, ld_c_kv, k_pe, ld_k_pe, slot, T, L, R); after(ops, "kv_cache_write");
}
static void tr_mla_attention(ops_set *ops, const mla_attention_args *a) {
    plugin_of(ops)->mla_attention(call_of(ops), a); after(ops, "mla_attention");
}
static void tr_mha_prefill(ops_set *ops, const mha_prefill_args *a) {
    plugin_of(ops)->mha_prefill(call_of(ops), a); after(ops, "mha_prefill");
}
static void tr_merge_attention(ops_set *ops, const merge_attention_args *a) {
    plugin_of(ops)->merge_attention(call_of(ops), a); after(ops, "merge_attention");
}
static void tr_moe_route(ops_set *ops, const moe_route_args *a) { plugin_of(ops)->moe_route(call_of(ops), a); after(ops, "moe_route"); }
// A plugin gets one slice a call: one built before `slices` existed would read only the first.
static void tr_moe_experts(ops_set *ops, const moe_experts_args *a) {
    if (moe_experts_by_slice(ops, a, tr_moe_experts)) return;
    plugin_of(ops)->moe_experts(call_of(ops), a); after(ops, "moe_experts");
}
static void tr_moe_combine(ops_set *ops, const moe_combine_args *a) {
    if (moe_combine_by_slice(ops, a, tr_moe_combine)) return;
    plugin_of(ops)->moe_combine(call_of(ops), a); after(ops, "moe_combine");
}
static void tr_logprobs(ops_set *ops, const logprobs_args *a) { plugin_of(ops)->logprobs(call_of(ops), a); after(ops, "logprobs"); }

// Each provided op's trampoline in place of the invariant set's.
static void install_ops(ops_set *ops, const invar_plugin *p) {
    if (p->embedding) ops->embedding = tr_embedding;
    if (p->rmsnorm) ops->rmsnorm = tr_rmsnorm;
    if (p->gemm) ops->gemm = tr_gemm;
    if (p->rope) ops->rope = tr_rope;
    if (p->residual_add) ops->residual_add = tr_residual_add;
    if (p->silu_mul) ops->silu_mul = tr_silu_mul;
    if (p->kv_cache_write) ops->kv_cache_write = tr_kv_cache_write;
    if (p->mla_attention) ops->mla_attention = tr_mla_attention;
    if (p->mha_prefill) ops->mha_prefill = tr_mha_prefill;
    if (p->merge_attention) ops->merge_attention = tr_merge_attention;
    if (p->moe_route) ops->moe_route = tr_moe_route;
    if (p->moe_experts) ops->moe_experts = tr_moe_experts;
    if (p->moe_combine) ops->moe_combine = tr_moe_combine;
    if (p->logprobs) ops->logprobs = tr_logprobs;
}

// --- the set ---------------------------------------------------------------------------------

static void plugin_set_destroy(ops_set *ops) {
    if (!ops) return;
    plugin_set *s = (plugin_set *)ops;
    if (s->plugin->destroy) s->plugin->destroy(s->call.state);
    void *dl = s->dl;
    s->base_destroy(ops);  // the invariant set's: its context, and the struct holding ops first
    if (dl) dlclose(dl);
}

bool plugin_set_is(const ops_set *ops) { return ops && ops->destroy == plugin_set_destroy; }

void plugin_set_collect_errors(ops_set *ops, bool collect) {
    if (plugin_set_is(ops)) ((plugin_set *)ops)->collect_errors = collect;
}

bool plugin_set_take_error(ops_set *ops, char *buf, int len) {
    if (!plugin_set_is(ops)) return false;
    plugin_set *s = (plugin_set *)ops;
    if (!s->failed) return false;
    snprintf(buf, (size_t)len, "%s: %s", s->failed_op ? s->failed_op : "an op", s->error);
    s->failed = false;
    s->failed_op = NULL;
    return true;
}

const char *plugin_set_op_source(const ops_set *ops, enum invar_plugin_op op) {
    if (!plugin_set_is(ops) || op < 0 || op >= INVAR_OP_COUNT) return "invariant";
    return provided_ops(((const plugin_set *)ops)->plugin) & INVAR_OP_BIT(op) ? "plugin" : "invariant";
}

bool plugin_set_claims(const ops_set *ops, enum invar_plugin_op op) {
    if (!plugin_set_is(ops) || op < 0 || op >= INVAR_OP_COUNT) return false;
    return (((const plugin_set *)ops)->plugin->invariant_claims & INVAR_OP_BIT(op)) != 0;
}

ops_set *plugin_set_create(const char *path, const char *device, int threads, int rank) {
    char err[1024];
    void *dl;
    const invar_plugin *p;
    if (!plugin_open(path, device, &dl, &p, err, (int)sizeof err)) invar_die(INVAR_EXIT_INPUT, "%s", err);
#ifndef INVAR_CUDA
    if (strcmp(device, "cpu") != 0) {
        if (dl) dlclose(dl);
        invar_die(INVAR_EXIT_INPUT, "plugin %s: its ops are for %s, and invar was built without CUDA", path,
                  device);
    }
#endif
    plugin_set *s = invar_calloc(1, sizeof *s, "a plugin kernel set");
    ops_set *ops = &s->ops;
    if (strcmp(device, "cpu") == 0) {
        inv_cpu_init(ops, threads);
        s->call.device = -1;
    } else {
#ifdef INVAR_CUDA
        inv_cuda_init(ops, "plugin");
        s->call.device = inv_cuda_device(ops);
        s->call.stream = (void *)inv_cuda_stream(ops);
#endif
    }
    // No graphs: the ABI promises a plugin nothing about capture (it may allocate or wait in a
    // call), so its steps run one call at a time, padded to the buckets as graphs would be.
    ops->graph_capture = NULL;
    ops->graph_launch = NULL;
    ops->graph_release = NULL;
    s->base_destroy = ops->destroy;
    s->dl = dl;
    s->plugin = p;
    s->call.rank = rank;
    s->call.fail = plugin_fail;
    snprintf(s->name, sizeof s->name, "%s%s", PLUGIN_SET_PREFIX, path);
    if (p->create) {
        s->call.state = p->create(rank, s->call.device);
        if (!s->call.state) {
            s->base_destroy(ops);
            if (dl) dlclose(dl);
            invar_die(INVAR_EXIT_INPUT, "plugin %s: create(rank %d) returned NULL", path, rank);
        }
    }
    ops->name = s->name;
    ops->destroy = plugin_set_destroy;
    ops->batch_invariant = (p->invariant_claims & provided_ops(p)) == provided_ops(p);
    ops->tp_size_invariant = false;  // the ABI has no fp32 forms of moe_experts and moe_combine
    install_ops(ops, p);
    return ops;
}
