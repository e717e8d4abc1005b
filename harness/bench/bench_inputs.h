// harness/bench/bench_inputs.h — how many copies of its inputs each timing of `invar bench` rotates
// through (harness/bench/bench.c), so that no timed repetition finds its inputs in L2, and the device
// memory a GEMM run of rows takes. Plain C: a CPU test checks the rule (tests/test_bench_inputs.c).
#ifndef INVAR_HARNESS_BENCH_INPUTS_H
#define INVAR_HARNESS_BENCH_INPUTS_H

#define BENCH_L2_BYTES (60.0 * 1024 * 1024)  // an H200's L2, rounded up

// Copies of a set of set_bytes bytes whose total is at least twice L2 (at least one).
int bench_l2_copies(double set_bytes);

// A GEMM run: the consecutive rows (N, K, M) from r0 with row r0's N and K, which share their
// operands (copies of the weights and of the activations for the run's largest M).
typedef struct {
    int end;              // the row past the run
    int min_m, max_m;
    int copies;           // of both operands, which the GEMM rotates through: every row's own
                          // bytes (the weights and its M rows of activations) over twice L2
    int weight_copies;    // of the weights, >= copies: their plain read alone over twice L2
    double device_bytes;  // the copies, the output at max_m, and 256 MB for the sets' scratch
} bench_gemm_run;

bench_gemm_run bench_gemm_run_at(const int (*rows)[3], int n, int r0);

#endif
