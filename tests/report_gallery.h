// tests/report_gallery.h — one row of every verdict kind a report writer must render: summary.csv
// rows as the runner writes them (PASS invariant, a negative control caught, FAIL batch-variant,
// FAIL nondeterministic, FAIL error, a control not triggered, SKIP) and kernels.csv rows as the
// checker and the plugin runner write them (ok, VARIES where stable, VARIES where it must,
// FAIL inaccurate, FAIL not written, SKIP, CRASH, ERROR, a control that never varied). Each
// with the outcome every writer must give it, so a writer that files one kind as another fails
// its test. Fields that carry no kind (request, step, logprobs, seconds) are fresh random values.
// Header-only: each writer's test includes it.
#ifndef INVAR_TESTS_REPORT_GALLERY_H
#define INVAR_TESTS_REPORT_GALLERY_H

#include <stdint.h>   // uint64_t
#include <stdio.h>    // snprintf, fprintf
#include <stdlib.h>   // abort
#include <string.h>   // strcmp

#include "../common/hash.h"             // invar_mix64
#include "../reports/csv_report.h"      // csv_report_open, csv_report_row, csv_report_close
#include "../reports/report_schema.h"   // summary_header, kernels_header, *_NCOLS
#include "../reports/row_verdict.h"     // row_state

typedef struct {
    const char *config, *verdict, *expected, *observed, *note;
    const char *first_batch;  // "" (no divergence), "repeat" or a batch size
    row_state want;           // what every writer must make of it
    const char *junit;        // the testcase's child: "" (a pass), "failure", "error", "skipped"
    const char *says;         // text the writers' message must carry ("" none)
} gallery_summary_row;

static const gallery_summary_row gallery_summary[] __attribute__((unused)) = {
    {"cpu/invariant/holds", "PASS", "invariant", "invariant", "", "", ROW_PASS, "", ""},
    {"cpu/reference/control-caught", "PASS", "batch-variant", "batch-variant", "", "8", ROW_PASS,
     "", ""},
    {"cpu/invariant/batch-variant", "FAIL", "invariant", "batch-variant", "", "4", ROW_FAIL,
     "failure", "observed batch-variant"},
    {"cpu/invariant/nondeterministic", "FAIL", "invariant", "nondeterministic",
     "the repeated batch differs from the first", "repeat", ROW_FAIL, "failure",
     "observed nondeterministic"},
    {"cpu/invariant/engine-error", "FAIL", "invariant", "error",
     "engine: KV cache exhausted at request 3", "", ROW_FAIL, "failure",
     "KV cache exhausted at request 3"},
    {"cpu/reference/control-not-triggered", "FAIL", "batch-variant", "invariant",
     "the negative control was not caught", "", ROW_FAIL, "failure",
     "expected batch-variant, observed invariant"},
    {"cuda/invariant/skipped", "SKIP", "invariant", "skipped", "no CUDA device", "", ROW_SKIP,
     "skipped", "no CUDA device"},
};
#define GALLERY_SUMMARY_ROWS ((int)(sizeof gallery_summary / sizeof gallery_summary[0]))

typedef struct {
    const char *set, *op, *shape, *status, *expect, *invariant, *written, *err, *note;
    row_state want;
    const char *junit;
    const char *says;
} gallery_kernel_row;

static const gallery_kernel_row gallery_kernels[] __attribute__((unused)) = {
    {"invariant", "rmsnorm", "D=2048", "ok", "stable", "yes", "yes", "1.0e-03", "", ROW_PASS, "",
     ""},
    {"invariant", "gemm", "576x2048", "VARIES", "stable", "no", "yes", "1.0e-03", "", ROW_FAIL,
     "failure", "must be batch-invariant but varied at M="},
    {"invariant", "rope", "D=64", "FAIL", "stable", "yes", "yes", "5.0e-01", "", ROW_FAIL,
     "failure", "inaccurate: rel-L2 error 5.0e-01"},
    {"invariant", "logprobs", "V=32000", "FAIL", "stable", "yes", "no", "1.0e-06", "", ROW_FAIL,
     "failure", "not written"},
    {"invariant", "moe", "E=8", "SKIP", "stable", "", "", "", "", ROW_SKIP, "skipped", "skipped"},
    // One shape of a passing op skipped (a second GPU): the op's summary line stays a PASS.
    {"invariant", "rmsnorm", "D=7168 2 GPUs", "SKIP", "stable", "", "", "", "needs 2 GPUs", ROW_SKIP,
     "skipped", "skipped"},
    {"plugin:./k.so", "mla_attention", "L=512 R=64", "CRASH", "stable", "", "", "",
     "the check died of signal 11 (Segmentation fault)", ROW_ERROR, "error",
     "CRASH: the check died of signal 11"},
    {"plugin:./k.so", "gemm", "37x203", "ERROR", "stable", "", "", "",
     "ValueError: operands could not be broadcast", ROW_ERROR, "error",
     "ERROR: ValueError: operands could not be broadcast"},
    {"reference", "gemm", "576x2048", "VARIES", "must vary", "no", "yes", "1.0e-03", "", ROW_PASS,
     "", ""},
    {"reference", "rmsnorm", "D=2048", "ok", "must vary", "yes", "yes", "1.0e-03", "", ROW_PASS,
     "", ""},
};
#define GALLERY_KERNEL_ROWS ((int)(sizeof gallery_kernels / sizeof gallery_kernels[0]))

// The negative controls of the kernel rows: reference/gemm varied (passes), reference/rmsnorm
// never did (fails: "never varied").
#define GALLERY_CONTROLS 2
#define GALLERY_CONTROL_FAILED "reference/rmsnorm"

static inline void gallery_set(const char *const *header, int ncols, const char **fields, char *store,
                        int store_len, const char *col, const char *v) {
    for (int c = 0; c < ncols; c++)
        if (strcmp(header[c], col) == 0) {
            snprintf(store + (size_t)c * (size_t)store_len, (size_t)store_len, "%s", v);
            fields[c] = store + (size_t)c * (size_t)store_len;
            return;
        }
    fprintf(stderr, "report_gallery.h: the writer's header has no column '%s'\n", col);
    abort();
}

// Writes path as summary.csv with the gallery's rows, case `case_name`. False with err.
static inline bool gallery_write_summary(const char *path, const char *case_name, uint64_t seed,
                                  char *err, int len) {
    const char *const *h = summary_header();
    csv_report *rep = csv_report_open(path, h, SUMMARY_NCOLS, err, len);
    if (!rep) return false;
    static char store[SUMMARY_NCOLS * 128];  // one flat array: a column's text at c * 128
    bool ok = true;
    for (int i = 0; i < GALLERY_SUMMARY_ROWS && ok; i++) {
        const gallery_summary_row *g = &gallery_summary[i];
        const char *f[SUMMARY_NCOLS];
        for (int c = 0; c < SUMMARY_NCOLS; c++) f[c] = "";
        uint64_t r = invar_mix64(seed + (uint64_t)i);
        char num[32];
#define SET(col, v) gallery_set(h, SUMMARY_NCOLS, f, store, 128, col, v)
        SET("case", case_name);
        SET("config", g->config);
        SET("device", strncmp(g->config, "cuda", 4) == 0 ? "cuda" : "cpu");
        SET("verdict", g->verdict);
        SET("expected", g->expected);
        SET("observed", g->observed);
        SET("note", g->note);
        SET("prompts", "10");
        SET("batch_sizes", "1, 4, 8");
        snprintf(num, sizeof num, "%.3f", (double)(r % 9000) / 1000 + 0.01);
        SET("seconds", num);
        SET("requests_compared", "30");
        if (g->first_batch[0]) {
            SET("first_batch_size", g->first_batch);
            snprintf(num, sizeof num, "%d", (int)(r >> 8) % 10);
            SET("first_request", num);
            snprintf(num, sizeof num, "%d", (int)(r >> 16) % 5);
            SET("first_step", num);
            SET("first_field", "logprob");
            snprintf(num, sizeof num, "%d", (int)(r >> 24) % 1000);
            SET("first_base_token", num);
            SET("first_batch_token", num);
            snprintf(num, sizeof num, "-%.8f", (double)((r >> 32) % 100000) / 10000 + 0.1);
            SET("first_base_logprob", num);
            SET("first_batch_logprob", num);
            SET("first_abs_delta", "1.19e-07");
            snprintf(num, sizeof num, "%d", (int)(r >> 40) % 900 + 1);
            SET("first_ulps", num);
            SET("differing_requests", "3");
        } else {
            SET("differing_requests", "0");
        }
#undef SET
        ok = csv_report_row(rep, f, err, len);
    }
    char close_err[512];
    if (!csv_report_close(rep, close_err, sizeof close_err) && ok) {
        snprintf(err, (size_t)len, "%s", close_err);
        return false;
    }
    return ok;
}

// Writes path as kernels.csv with the gallery's rows. False with err.
static inline bool gallery_write_kernels(const char *path, uint64_t seed, char *err, int len) {
    const char *const *h = kernels_header();
    csv_report *rep = csv_report_open(path, h, KERNELS_NCOLS, err, len);
    if (!rep) return false;
    static char store[KERNELS_NCOLS * 128];  // one flat array: a column's text at c * 128
    bool ok = true;
    for (int i = 0; i < GALLERY_KERNEL_ROWS && ok; i++) {
        const gallery_kernel_row *g = &gallery_kernels[i];
        const char *f[KERNELS_NCOLS];
        for (int c = 0; c < KERNELS_NCOLS; c++) f[c] = "";
        uint64_t r = invar_mix64(seed ^ (0x9e37u + (uint64_t)i));
        char num[32];
#define SET(col, v) gallery_set(h, KERNELS_NCOLS, f, store, 128, col, v)
        SET("set", g->set);
        SET("device", "cpu");
        SET("op", g->op);
        SET("shape", g->shape);
        SET("status", g->status);
        SET("expect", g->expect);
        SET("invariant", g->invariant);
        SET("written", g->written);
        SET("rel_l2_err", g->err);
        SET("tol", g->err[0] ? "1.0e-02" : "");
        SET("note", g->note);
        SET("source", strncmp(g->set, "plugin:", 7) == 0 ? "plugin" : g->set);
        if (strcmp(g->invariant, "no") == 0) {
            snprintf(num, sizeof num, "%d", (int)(r % 500) + 2);
            SET("first_vary_M", num);
            snprintf(num, sizeof num, "%d", (int)(r >> 12) % 2);
            SET("first_vary_row", num);
            SET("first_vary_vs_M", "1");
        }
        snprintf(num, sizeof num, "%.3f", (double)((r >> 20) % 5000) / 1000);
        SET("seconds", num);
        snprintf(num, sizeof num, "%llu", (unsigned long long)(seed % 100000));
        SET("seed", num);
#undef SET
        ok = csv_report_row(rep, f, err, len);
    }
    char close_err[512];
    if (!csv_report_close(rep, close_err, sizeof close_err) && ok) {
        snprintf(err, (size_t)len, "%s", close_err);
        return false;
    }
    return ok;
}

#endif
