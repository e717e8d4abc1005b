// harness/run/resolve.h — from the configs a case asks for to the configs that run.
//
// First the attention backend is selected, by precedence: `invar run --attention-backend NAME`,
// the case's [matrix] attention_backends, the environment variable INVAR_ATTENTION_BACKEND,
// then `auto`. Only then is each config resolved, reading the resolved backend's capabilities
// and never its name or the variable, so every selection path behaves alike. With a
// batch-invariant kernel set (batch-invariant mode):
//   - a backend that cannot be batch-invariant is refused: an error when it was one explicit
//     selection, a SKIP inside a matrix of several;
//   - prefix caching is switched off when the backend is not invariant with it (unless the
//     case forces it on, for the negative control);
//   - chunked prefill is switched off when the backend is not invariant with it, and the token
//     budget raised to max_model_len so that long prompts still fit, as vLLM does.
// Each switch prints one warning per run and is recorded in the config's report row. The
// expected outcome follows from the capabilities, and configs whose effective settings
// coincide are run once.
#ifndef INVAR_HARNESS_RESOLVE_H
#define INVAR_HARNESS_RESOLVE_H

#include <stdbool.h>                      // bool
#include <stdio.h>                        // FILE

#include "../../engine/attention_backend.h" // attention_backend
#include "case_file.h"                    // case_file
#include "matrix.h"                       // run_config

#define RESOLVE_BACKEND_ENV "INVAR_ATTENTION_BACKEND"

typedef enum {
    SELECTED_BY_FLAG,  // --attention-backend
    SELECTED_BY_CASE,  // [matrix] attention_backends
    SELECTED_BY_ENV,   // INVAR_ATTENTION_BACKEND
    SELECTED_BY_AUTO,  // none of them: auto
} selection_origin;

typedef struct {
    selection_origin origin;
    char where[600];       // "--attention-backend", "cases/x.ini:12", "INVAR_ATTENTION_BACKEND"
    bool explicit_single;  // one named backend (not auto): refusing it is an error, not a SKIP
} backend_selection;

// Sets c's attention_backends axis by the precedence above (flag may be NULL). False, with a
// message naming where the name came from, when the flag or the variable names no backend.
bool resolve_select_backend(case_file *c, const char *flag, backend_selection *sel, char *err,
                            int err_len);

typedef struct {
    const char *device;             // effective: cpu | cuda
    bool skip;                      // not run: skip_reason says why
    bool refused;                   // skipped because the backend cannot be batch-invariant
    char skip_reason[512];
    const attention_backend *backend; // resolved (auto picked); NULL when skipped before
    bool batch_invariant_mode;      // the kernel set is batch-invariant
    // Effective settings, and whether resolution changed them.
    bool prefix_caching, chunked_prefill;
    int max_num_batched_tokens;
    bool prefix_caching_disabled, chunked_prefill_disabled;
    int max_model_len;              // what the budget was raised to
    char reason[512];               // why the effective settings differ from the requested ones
    bool expect_invariant;          // else batch-variant: a negative control that must be caught
    // A control that must be caught even where an adversarial set is the case's negative control
    // (order-free information does not excuse it): a set whose one batch-variant op is its
    // all-reduce, above the ranks where that is order-free (sets/registry.h).
    bool must_be_caught;
    int merged_into;                // index of the config that runs for this one; -1: itself
} resolved_config;

// Resolves one config on its effective device. kernel_set_invariant is the set's
// batch_invariant flag (sets/registry.h); max_model_len the case's longest request.
void resolve_config(const run_config *cfg, const char *device, bool kernel_set_invariant,
                    int max_model_len, resolved_config *out);

// A device that cannot run the config (no CUDA device): skipped before anything is built.
void resolve_skip_device(const char *device, const char *why, resolved_config *out);

// False, with the message in err, when a refused backend was the one explicit selection.
bool resolve_check_refusals(const resolved_config *r, int n, const backend_selection *sel,
                            char *err, int err_len);

// Prints each distinct warning of r[0 .. n) once ("warning: prefix caching disabled: ...").
void resolve_print_warnings(const resolved_config *r, int n, FILE *f);

// Marks configs whose effective settings equal an earlier config's (merged_into); returns how
// many were merged.
int resolve_merge(const run_config *configs, resolved_config *r, int n);

// Resolves configs[0 .. n) before anything runs: devices (auto: cuda when a device answers),
// kernel set modes (from the registry's flags; no set is built), backends, effective settings,
// merges. Returns n resolved configs (free them). A refused explicit backend selection, or a
// kernel set not registered on a config's device, exits 2 naming it.
resolved_config *resolve_matrix(const case_file *c, const run_config *configs, int n,
                                const backend_selection *sel);

// The two warnings, as printed (without the trailing newline).
void resolve_prefix_warning(const attention_backend *b, char *buf, int len);
void resolve_chunked_warning(const attention_backend *b, int max_model_len, char *buf, int len);

#endif
