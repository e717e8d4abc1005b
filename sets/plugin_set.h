// sets/plugin_set.h — kernel sets loaded from plugins (kernels/invar_plugin.h), named
// "plugin:PATH": the plugin's ops over the invariant set of its device.
#ifndef INVAR_SETS_PLUGIN_SET_H
#define INVAR_SETS_PLUGIN_SET_H

#include <stdbool.h>                   // bool
#include <stdint.h>                    // uint64_t
#include "../kernels/invar_plugin.h"   // invar_plugin, enum invar_plugin_op
#include "../kernels/ops.h"            // ops_set

#define PLUGIN_SET_PREFIX "plugin:"

// What a plugin declares, read without creating any instance.
typedef struct {
    char name[64];
    char device[8];
    uint64_t provided;  // INVAR_OP_BIT of each op the plugin implements
    uint64_t claims;    // INVAR_OP_BIT of each op it claims batch-invariant
} plugin_info;

// The PATH of a set named "plugin:PATH"; NULL for any other name.
const char *plugin_set_path(const char *set);
// Whether PATH is a table registered in this process (invar_plugin_register), not a file.
bool plugin_is_registered(const char *path);

// PATH is a name registered with invar_plugin_register (kernels/invar_plugin.h), else a shared
// object's path.
// Loads PATH and checks its table for `device` ("cpu" or "cuda"; NULL: any): false, with a
// message naming the file and the symbol or field at fault, when it is not a shared object,
// lacks INVAR_PLUGIN_ENTRY_NAME, returns NULL, was built for another ABI version or device,
// provides no op, or claims an op it does not provide.
bool plugin_probe(const char *path, const char *device, plugin_info *info, char *err, int err_len);

// The set of rank `rank` (tensor parallelism; 0 otherwise) from plugin PATH on `device`; exits 2
// with plugin_probe's message, or when the plugin's create fails. Its batch_invariant is true
// when the plugin claims every op it provides (the others are the invariant set's).
ops_set *plugin_set_create(const char *path, const char *device, int threads, int rank);

// For a set made by plugin_set_create (false / "invariant" for any other set):
bool plugin_set_is(const ops_set *ops);
// An op's failure (invar_plugin_call.fail) ends the process unless collected: the kernel
// checker collects, and takes each failure with its op's name after a shape ("OP: message").
void plugin_set_collect_errors(ops_set *ops, bool collect);
bool plugin_set_take_error(ops_set *ops, char *buf, int len);
// "plugin" when the plugin provides op, else "invariant" (the fallback).
const char *plugin_set_op_source(const ops_set *ops, enum invar_plugin_op op);
bool plugin_set_claims(const ops_set *ops, enum invar_plugin_op op);

// The ABI's op for an ops.h op name ("gemm", "rmsnorm", ...); -1 for names with none.
int plugin_op_by_name(const char *name);

#endif
