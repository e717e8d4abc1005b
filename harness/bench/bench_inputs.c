// harness/bench/bench_inputs.c — the bench's input copies (bench_inputs.h).
#include "bench_inputs.h"

#include <math.h>  // ceil

int bench_l2_copies(double set_bytes) {
    int copies = (int)ceil(2.0 * BENCH_L2_BYTES / set_bytes);
    return copies < 1 ? 1 : copies;
}

// The copies are counted at the run's smallest M: its rows read the fewest bytes. (Counted at
// the largest, 1536 x 7168, 22 MB of weights beside 117 MB of activations at M = 8192, had one
// copy, and its M <= 64 rows read their weights from L2 at every repetition.)
bench_gemm_run bench_gemm_run_at(const int (*rows)[3], int n, int r0) {
    const int N = rows[r0][0], K = rows[r0][1];
    bench_gemm_run run = {.end = r0, .min_m = rows[r0][2], .max_m = rows[r0][2]};
    for (; run.end < n && rows[run.end][0] == N && rows[run.end][1] == K; run.end++) {
        if (rows[run.end][2] < run.min_m) run.min_m = rows[run.end][2];
        if (rows[run.end][2] > run.max_m) run.max_m = rows[run.end][2];
    }
    const double w = 2.0 * N * K, x_row = 2.0 * K;
    run.copies = bench_l2_copies(w + run.min_m * x_row);
    run.weight_copies = bench_l2_copies(w);
    run.device_bytes = run.weight_copies * w + run.copies * run.max_m * x_row + 2.0 * run.max_m * N +
                       256.0 * 1024 * 1024;
    return run;
}
