// kernels/cuda/cuda_timing.h — device-side timing for the benchmark (harness/bench/bench.c): CUDA
// events on a kernel set's own stream, callable from C.
#ifndef INVAR_KERNELS_CUDA_CUDA_TIMING_H
#define INVAR_KERNELS_CUDA_CUDA_TIMING_H

#include <stddef.h>     // size_t
#include "../ops.h"     // ops_set

#ifdef __cplusplus
extern "C" {
#endif

// Runs fn(arg, i) `warmup` times, then `reps` times each between two events on the set's
// stream, the stream held until all are queued so that the events bracket GPU time, not the
// host's launches; returns the median in milliseconds. ops must be a CUDA set; fn must only
// queue work (a call that waits for the GPU would wait for the hold: it gives up after 2 s
// and the times then include the host's latency, with a warning on stderr).
double cuda_time_median_ms(ops_set *ops, void (*fn)(void *arg, int rep), void *arg, int warmup, int reps);

// Device-to-device copy of `bytes` (median of several): GB/s counting bytes read + written.
double cuda_copy_bandwidth_gbs(ops_set *ops, size_t bytes);

// A plain read of `bytes` at base + (rep % copies) * stride for each repetition, timed as
// cuda_time_median_ms times (median, milliseconds): the floor under a memory-bound kernel that
// reads those bytes once is read against (invar bench's floor_read_us columns).
double cuda_read_median_ms(ops_set *ops, const void *base, size_t bytes, size_t stride, int copies, int warmup,
                           int reps);

// The same read's result: the XOR of the 32-bit little-endian words of p[0, bytes) (a short last
// word zero-padded), for a test that every byte was read. p need not be aligned.
unsigned cuda_read_xor(ops_set *ops, const void *p, size_t bytes);

// Events recorded on a set's stream between its calls, read once the stream is synced: the
// per-op profile of `invar bench --profile` (harness/bench/op_profile.c). Events are reused after
// cuda_event_log_clear; the log grows as needed.
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
