// harness/bench/bench.h — the CUDA half of `invar bench` (harness/bench/bench.c): the GEMM and
// MLA grids or the --shape rows, the decode and tensor-parallel sections; the command line is
// cmd_bench.c.
#ifndef INVAR_HARNESS_BENCH_H
#define INVAR_HARNESS_BENCH_H

#include <stdbool.h>  // bool

#define BENCH_MAX_SHAPES 96  // the GEMM grid's 84 rows fit
#define BENCH_MLA_BLOCK 64   // the MLA rows' cache block: a context is whole blocks

// GEMM rows (N, K, M) or MLA rows (batch, context, heads), in the order they run.
typedef struct {
    int v[BENCH_MAX_SHAPES][3];
    int n;
} bench_shapes;

// Appends a row; more than BENCH_MAX_SHAPES is fatal.
void bench_shapes_add(bench_shapes *s, int a, int b, int c);

// Times the sections (only: "gemm", "mla", "moe", "decode", "tp", or NULL for all) on the CUDA
// device into out_dir, with its meta.csv (the command line argc/argv; "finished" no before the
// first section, yes after the last); shapes->n > 0: those rows instead of the section's grid;
// model ("v2-lite", "v3" or NULL for both): the decode section's models. A run whose decode
// section runs without the GEMM section first times cuBLAS on a few large cells for the FLOP
// ceiling (bench_peak.csv). Returns the exit code (2 when a --shape row does not fit the device,
// before out_dir is made). Call only when a CUDA device is available.
int bench_cuda(const char *out_dir, bool quick, const char *only, const char *model, bool profile,
               const bench_shapes *shapes, int argc, char **argv);

#endif
