// kernels/cuda/cuda_timing.h — device-side timing for the benchmark: CUDA events on a set's
// stream, callable from C.
#ifndef INVAR_KERNELS_CUDA_CUDA_TIMING_H
#define INVAR_KERNELS_CUDA_CUDA_TIMING_H

#include <stddef.h>     // size_t
#include "../ops.h"     // ops_set

#ifdef __cplusplus
extern "C" {
#endif

// Runs fn(arg, i) `warmup` times, then `reps` times each between two events on the set's
// stream, held until all are queued so the events bracket GPU time, not the host's launches;
// returns the median in ms. fn must only queue work (the hold gives up after 2 s, warning).
double cuda_time_median_ms(ops_set *ops, void (*fn)(void *arg, int rep), void *arg, int warmup, int reps);

// Device-to-device copy of `bytes`: GB/s, bytes read + written.
double cuda_copy_bandwidth_gbs(ops_set *ops, size_t bytes);

// A plain read of `bytes` at base + (rep % copies) * stride a repetition, timed likewise: the
// floor a memory-bound kernel reading those bytes once is held against.
double cuda_read_median_ms(ops_set *ops, const void *base, size_t bytes, size_t stride, int copies, int warmup,
                           int reps);

// The same read's result, the XOR of p's 32-bit little-endian words (the last zero-padded): a
// test that every byte was read.
unsigned cuda_read_xor(ops_set *ops, const void *p, size_t bytes);

// Events recorded on a set's stream between its calls, read once it is synced (`invar bench
// --profile`); reused after cuda_event_log_clear.
typedef struct cuda_event_log cuda_event_log;
cuda_event_log *cuda_event_log_create(ops_set *ops);
// Records the next event on the set's stream; returns its index.
int cuda_event_log_record(cuda_event_log *l);
// Seconds from event a to event b; both recorded, the stream synced since.
double cuda_event_log_seconds(cuda_event_log *l, int a, int b);
void cuda_event_log_clear(cuda_event_log *l);
void cuda_event_log_destroy(cuda_event_log *l);

#ifdef __cplusplus
}
#endif

#endif
