// kernels/cuda/cuda_timing.h — device-side timing for the benchmark (harness/bench.c): CUDA
// events on a kernel set's own stream, callable from C.
#ifndef INVAR_KERNELS_CUDA_CUDA_TIMING_H
#define INVAR_KERNELS_CUDA_CUDA_TIMING_H

#include <stddef.h>     // size_t
#include "../ops.h"     // ops_set

#ifdef __cplusplus
extern "C" {
#endif

// Runs fn(arg, i) `warmup` times, then `reps` times each between two events on the set's
// stream; returns the median in milliseconds. ops must be a CUDA set.
double cuda_time_median_ms(ops_set *ops, void (*fn)(void *arg, int rep), void *arg, int warmup, int reps);

// Device-to-device copy of `bytes` (median of several): GB/s counting bytes read + written.
double cuda_copy_bandwidth_gbs(ops_set *ops, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
