// harness/run/resolve.c — backend selection, capability checks, expectations and merging
// (harness/run/resolve.h).
#include "resolve.h"

#include <stdarg.h>   // va_list, va_start, va_end
#include <stdio.h>    // snprintf, vsnprintf, fprintf, fflush
#include <stdlib.h>   // getenv
#include <string.h>   // strcmp, strncmp, strlen, memset

#include "../../common/check.h"  // invar_die, invar_calloc
#include "../../sets/plugin_set.h" // PLUGIN_SET_PREFIX
#include "../../sets/registry.h" // kernel_set_lookup, kernel_set_invariant_at, cuda_device_available

// ---------------------------------------------------------------------------------------------
// Selection: flag > case file > environment > auto
// ---------------------------------------------------------------------------------------------

// Replaces the backends axis by one value that came from outside the case file.
static bool select_one(case_file *c, const char *value, const char *where, char *err,
                       int err_len) {
    int axis = matrix_axis_find("attention_backends");
    matrix_list list;
    char why[400];
    if (!matrix_parse_axis(axis, value, &list, why, sizeof why) || list.n != 1) {
        if (list.n != 1)
            snprintf(why, sizeof why, "expected one attention backend, got '%s'", value);
        snprintf(err, (size_t)err_len, "%s: %s", where, why);
        return false;
    }
    c->axes[axis] = list;
    return true;
}

bool resolve_select_backend(case_file *c, const char *flag, backend_selection *sel, char *err,
                            int err_len) {
    memset(sel, 0, sizeof *sel);
    const matrix_list *in_case = &c->axes[matrix_axis_find("attention_backends")];
    const char *env = getenv(RESOLVE_BACKEND_ENV);
    const char *single = NULL;
    if (flag) {
        sel->origin = SELECTED_BY_FLAG;
        snprintf(sel->where, sizeof sel->where, "--attention-backend");
        if (!select_one(c, flag, sel->where, err, err_len)) return false;
    } else if (in_case->line > 0) {
        sel->origin = SELECTED_BY_CASE;
        // A case path may be up to PATH_MAX long; where (a message) keeps its first 560.
        snprintf(sel->where, sizeof sel->where, "%.560s:%d", c->path, in_case->line);
    } else if (env && env[0] != '\0') {
        sel->origin = SELECTED_BY_ENV;
        snprintf(sel->where, sizeof sel->where, "%s", RESOLVE_BACKEND_ENV);
        char where[64];
        snprintf(where, sizeof where, "%s=%.30s", RESOLVE_BACKEND_ENV, env);
        if (!select_one(c, env, where, err, err_len)) return false;
    } else {
        sel->origin = SELECTED_BY_AUTO;
        snprintf(sel->where, sizeof sel->where, "auto");
        if (!select_one(c, "auto", sel->where, err, err_len)) return false;
    }
    const matrix_list *l = &c->axes[matrix_axis_find("attention_backends")];
    if (l->n == 1) single = l->value[0];
    sel->explicit_single = single && strcmp(single, "auto") != 0;
    return true;
}

// ---------------------------------------------------------------------------------------------
// One config
// ---------------------------------------------------------------------------------------------

// `auto`: the highest-priority backend that runs on the device and is allowed in the mode.
static const attention_backend *pick_auto(const char *device, bool invariant_mode) {
    const attention_backend *best = NULL;
    for (const attention_backend *b = attention_backends(); b->name; b++) {
        if (!b->mla || !attention_backend_on_device(b, device)) continue;
        if (invariant_mode && !b->batch_invariant) continue;
        if (!best || b->auto_priority > best->auto_priority) best = b;
    }
    return best;
}

void resolve_prefix_warning(const attention_backend *b, char *buf, int len) {
    snprintf(buf, (size_t)len, "warning: prefix caching disabled: attention backend %s is not "
             "batch-invariant with prefix caching", b->name);
}

void resolve_chunked_warning(const attention_backend *b, int max_model_len, char *buf, int len) {
    snprintf(buf, (size_t)len, "warning: chunked prefill disabled: attention backend %s is not "
             "batch-invariant with chunked prefill; max_num_batched_tokens raised to at least "
             "max_model_len = %d, as vLLM does", b->name, max_model_len);
}

__attribute__((format(printf, 2, 3)))
static void add_reason(resolved_config *out, const char *fmt, ...) {
    size_t used = strlen(out->reason);
    if (used >= sizeof out->reason - 1) return;
    if (used > 0) used += (size_t)snprintf(out->reason + used, sizeof out->reason - used, "; ");
    if (used >= sizeof out->reason - 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->reason + used, sizeof out->reason - used, fmt, ap);
    va_end(ap);
}

static void skip(resolved_config *out, bool refused, const char *why) {
    out->skip = true;
    out->refused = refused;
    snprintf(out->skip_reason, sizeof out->skip_reason, "%s", why);
}

void resolve_skip_device(const char *device, const char *why, resolved_config *out) {
    memset(out, 0, sizeof *out);
    out->device = device;
    out->merged_into = -1;
    char msg[512];
    snprintf(msg, sizeof msg, "no CUDA device: %s", why);
    skip(out, false, msg);
}

void resolve_config(const run_config *cfg, const char *device, bool kernel_set_invariant,
                    int max_model_len, resolved_config *out) {
    memset(out, 0, sizeof *out);
    out->device = device;
    out->merged_into = -1;
    out->batch_invariant_mode = kernel_set_invariant;
    out->prefix_caching = cfg->prefix_caching;
    out->chunked_prefill = cfg->chunked_prefill;
    out->max_num_batched_tokens = cfg->max_num_batched_tokens;
    out->max_model_len = max_model_len;
    char why[512];

    // Selection first: auto, or the named backend.
    const attention_backend *b;
    if (strcmp(cfg->attention_backend, "auto") == 0) {
        b = pick_auto(device, kernel_set_invariant);
        if (!b) {
            snprintf(why, sizeof why, "auto: no attention backend runs on %s%s", device,
                     kernel_set_invariant ? " in batch-invariant mode" : "");
            skip(out, false, why);
            return;
        }
    } else {
        b = attention_backend_by_name(cfg->attention_backend);
    }
    out->backend = b;
    if (!b->mla || !attention_backend_on_device(b, device)) {
        snprintf(why, sizeof why, "attention backend %s %s", b->name,
                 b->mla ? "does not run on this device" : "is not an MLA backend");
        skip(out, false, why);
        return;
    }

    // Then its capabilities, in batch-invariant mode.
    if (kernel_set_invariant && !b->batch_invariant) {
        char allowed[256];
        attention_backend_allowed(device, true, allowed, sizeof allowed);
        snprintf(why, sizeof why, "attention backend %s is not batch-invariant: refused with "
                 "the batch-invariant kernel set %.100s (allowed on %s: %.200s)", b->name,
                 cfg->kernel_set, device, allowed);
        skip(out, true, why);
        return;
    }
    if (kernel_set_invariant && out->prefix_caching && !b->invariant_with_prefix_caching) {
        if (cfg->force_prefix_caching) {
            add_reason(out, "prefix caching kept on by force_prefix_caching: attention backend "
                       "%s is not batch-invariant with prefix caching (negative control)",
                       b->name);
        } else {
            out->prefix_caching = false;
            out->prefix_caching_disabled = true;
            add_reason(out, "prefix caching disabled: attention backend %s is not "
                       "batch-invariant with prefix caching", b->name);
        }
    }
    if (kernel_set_invariant && out->chunked_prefill && !b->invariant_with_chunked_prefill) {
        out->chunked_prefill = false;
        out->chunked_prefill_disabled = true;
        int before = out->max_num_batched_tokens;
        if (out->max_num_batched_tokens < max_model_len)
            out->max_num_batched_tokens = max_model_len;
        add_reason(out, "chunked prefill disabled: attention backend %s is not batch-invariant "
                   "with chunked prefill; max_num_batched_tokens %d -> %d (max_model_len), as "
                   "vLLM does", b->name, before, out->max_num_batched_tokens);
    }

    // The expectation follows from the effective settings and the capabilities alone.
    out->expect_invariant = kernel_set_invariant && b->batch_invariant &&
                            (!out->prefix_caching || b->invariant_with_prefix_caching) &&
                            (!out->chunked_prefill || b->invariant_with_chunked_prefill);
}

// ---------------------------------------------------------------------------------------------
// The whole run
// ---------------------------------------------------------------------------------------------

bool resolve_check_refusals(const resolved_config *r, int n, const backend_selection *sel,
                            char *err, int err_len) {
    if (!sel->explicit_single) return true;
    for (int k = 0; k < n; k++) {
        if (!r[k].refused) continue;
        snprintf(err, (size_t)err_len, "%s: %s", sel->where, r[k].skip_reason);
        return false;
    }
    return true;
}

void resolve_print_warnings(const resolved_config *r, int n, FILE *f) {
    for (int k = 0; k < n; k++) {
        if (r[k].skip || !r[k].backend) continue;
        bool prefix_first = r[k].prefix_caching_disabled;
        bool chunked_first = r[k].chunked_prefill_disabled;
        // Printed by the first config that raises it.
        for (int j = 0; j < k && (prefix_first || chunked_first); j++) {
            if (r[j].skip || r[j].backend != r[k].backend) continue;
            if (r[j].prefix_caching_disabled) prefix_first = false;
            if (r[j].chunked_prefill_disabled) chunked_first = false;
        }
        char line[512];
        if (prefix_first) {
            resolve_prefix_warning(r[k].backend, line, sizeof line);
            fprintf(f, "%s\n", line);
        }
        if (chunked_first) {
            resolve_chunked_warning(r[k].backend, r[k].max_model_len, line, sizeof line);
            fprintf(f, "%s\n", line);
        }
    }
    fflush(f);
}

static bool same_effective(const run_config *ca, const resolved_config *a, const run_config *cb,
                           const resolved_config *b) {
    return strcmp(a->device, b->device) == 0 && strcmp(ca->kernel_set, cb->kernel_set) == 0 &&
           strcmp(ca->model, cb->model) == 0 && a->backend == b->backend &&
           a->prefix_caching == b->prefix_caching && a->chunked_prefill == b->chunked_prefill &&
           a->max_num_batched_tokens == b->max_num_batched_tokens &&
           ca->arrivals == cb->arrivals && ca->threads == cb->threads &&
           ca->tensor_parallel == cb->tensor_parallel && ca->block_size == cb->block_size &&
           ca->kv_cache_blocks == cb->kv_cache_blocks &&
           ca->tp_size_invariance == cb->tp_size_invariance && ca->cuda_graphs == cb->cuda_graphs;
}

int resolve_merge(const run_config *configs, resolved_config *r, int n) {
    int merged = 0;
    for (int k = 0; k < n; k++) {
        r[k].merged_into = -1;
        if (r[k].skip) continue;
        for (int j = 0; j < k; j++) {
            if (r[j].skip || r[j].merged_into >= 0) continue;
            if (!same_effective(&configs[j], &r[j], &configs[k], &r[k])) continue;
            r[k].merged_into = j;
            merged++;
            break;
        }
    }
    return merged;
}

// ---------------------------------------------------------------------------------------------
// The whole matrix, before anything runs
// ---------------------------------------------------------------------------------------------

// The registry's entry of (set, device): no set is built to decide a config's mode.
static const kernel_set_entry *kernel_set_entry_of(const case_file *c, const run_config *cfg,
                                                   const char *device) {
    char why[1100];
    const kernel_set_entry *e = kernel_set_lookup(cfg->kernel_set, device, why, sizeof why);
    if (!e) invar_die(INVAR_EXIT_INPUT, "%s: config %s: %s", c->path, cfg->name, why);
    return e;
}

// A set whose one batch-variant op is its all-reduce: why it is (or is not) batch-invariant at
// this T, in the resolution column, and whether it must be caught.
static void resolve_all_reduce_control(const kernel_set_entry *e, const run_config *cfg,
                                       resolved_config *out) {
    if (e->batch_invariant || e->order_free_up_to_tp <= 0 || out->skip) return;
    int T = cfg->tensor_parallel > 0 ? cfg->tensor_parallel : 1;
    if (T <= e->order_free_up_to_tp) {
        add_reason(out, "kernel set %s batch-invariant at tensor_parallel %d: its one "
                   "batch-variant op, the all-reduce, is order-free with at most %d ranks (two "
                   "addends commute)", e->set, T, e->order_free_up_to_tp);
    } else {
        out->must_be_caught = true;
        add_reason(out, "kernel set %s batch-variant at tensor_parallel %d: its all-reduce's "
                   "order follows the message size, so the batch (negative control of the "
                   "all-reduce alone: must be caught)", e->set, T);
    }
}

// TP-size invariance runs on a set with the path, at a T dividing its 8 slices; elsewhere the
// config is skipped with the reason (the model's counts are checked when its engine is built).
static void resolve_tp_size_invariance(const kernel_set_entry *e, const char *device,
                                       const run_config *cfg, resolved_config *out) {
    if (!cfg->tp_size_invariance || out->skip) return;
    int T = cfg->tensor_parallel > 0 ? cfg->tensor_parallel : 1;
    char why[256];
    if (!e->tp_size_invariant) {
        snprintf(why, sizeof why, "tp_size_invariance = on: kernel set %s on %s has no TP-size-"
                 "invariant path (the CPU sets have one)", e->set, device);
        skip(out, false, why);
    } else if (8 % T != 0) {
        snprintf(why, sizeof why, "tp_size_invariance = on: tensor_parallel %d does not divide "
                 "the 8 fixed slices", T);
        skip(out, false, why);
    }
}

// CUDA graphs: decode steps padded to the buckets everywhere, replayed from graphs on a CUDA
// set that has them and from recorded calls on the CPU; at T > 1 on CUDA not yet (the logits'
// all-gather reads on the host mid-step).
static void resolve_cuda_graphs(const run_config *cfg, const char *device, resolved_config *out) {
    if (!cfg->cuda_graphs || out->skip) return;
    char why[200];
    if (cfg->tensor_parallel > 1 && strcmp(device, "cuda") == 0) {
        snprintf(why, sizeof why, "cuda_graphs = on: tensor_parallel %d on CUDA: graphs run on one "
                 "rank only (the logits' all-gather reads on the host)", cfg->tensor_parallel);
        skip(out, false, why);
    } else if (out->backend && out->backend->path == ATTENTION_BATCH_SCHEDULED_DECODE) {
        snprintf(why, sizeof why, "cuda_graphs = on: backend %s takes its decode split from the "
                 "whole batch, which a graph would freeze (its steps run as scheduled)",
                 out->backend->name);
        skip(out, false, why);
    } else if (strcmp(device, "cuda") != 0) {
        add_reason(out, "cuda_graphs = on on %s: decode steps padded to the buckets and replayed "
                   "from recorded calls (no CUDA graphs there; a replay freezes what one would)",
                   device);
    } else if (strncmp(cfg->kernel_set, PLUGIN_SET_PREFIX, strlen(PLUGIN_SET_PREFIX)) == 0) {
        add_reason(out, "cuda_graphs = on: a plugin set's steps are padded to the buckets and run "
                   "call by call (the plugin ABI promises nothing about capture)");
    }
}

resolved_config *resolve_matrix(const case_file *c, const run_config *configs, int n,
                                const backend_selection *sel) {
    resolved_config *rs = invar_calloc((size_t)n, sizeof *rs, "resolved configs");
    char why[256] = "";
    bool cuda_asked = false, have_cuda = false;
    for (int k = 0; k < n; k++) {
        const run_config *cfg = &configs[k];
        if (strcmp(cfg->device, "cpu") != 0 && !cuda_asked) {
            have_cuda = cuda_device_available(why, sizeof why);
            cuda_asked = true;
        }
        const char *device = strcmp(cfg->device, "auto") == 0 ? (have_cuda ? "cuda" : "cpu")
                                                              : cfg->device;
        if (strcmp(device, "cuda") == 0 && !have_cuda) {
            resolve_skip_device(device, why, &rs[k]);
            continue;
        }
        const kernel_set_entry *e = kernel_set_entry_of(c, cfg, device);
        resolve_config(cfg, device, kernel_set_invariant_at(e, cfg->tensor_parallel),
                       case_max_model_len(c), &rs[k]);
        resolve_all_reduce_control(e, cfg, &rs[k]);
        resolve_tp_size_invariance(e, device, cfg, &rs[k]);
        resolve_cuda_graphs(cfg, device, &rs[k]);
        // One GPU per rank. Here, not in resolve_config: the shard plan resolves as on any
        // machine, and only this run knows how many GPUs it sees.
        int gpus = strcmp(device, "cuda") == 0 && cfg->tensor_parallel > 1 && !rs[k].skip
                       ? cuda_device_count() : 0;
        if (gpus > 0 && cfg->tensor_parallel > gpus) {
            snprintf(why, sizeof why, "tensor_parallel %d needs %d CUDA devices (one GPU per "
                     "rank); %d visible", cfg->tensor_parallel, cfg->tensor_parallel, gpus);
            skip(&rs[k], false, why);
        }
        if (strcmp(cfg->device, "auto") == 0 && !have_cuda) {
            size_t used = strlen(rs[k].reason);
            snprintf(rs[k].reason + used, sizeof rs[k].reason - used, "%sdevice auto ran on cpu: "
                     "%s", used ? "; " : "", why);
        }
    }
    char err[sizeof sel->where + sizeof rs->skip_reason + 2];  // "where: reason"
    if (!resolve_check_refusals(rs, n, sel, err, sizeof err))
        invar_die(INVAR_EXIT_INPUT, "%s", err);
    resolve_merge(configs, rs, n);
    return rs;
}
