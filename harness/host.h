// harness/host.h — the host-side helpers every subcommand needs: a monotonic clock,
// `mkdir -p` and the memory's copy bandwidth. Both exit on failure, naming the call and the path.
#ifndef INVAR_HARNESS_HOST_H
#define INVAR_HARNESS_HOST_H

#include <stddef.h>  // size_t

// Seconds from an arbitrary origin, monotonic (CLOCK_MONOTONIC).
double host_seconds(void);

// Creates `dir` and its missing parents; exits 2 when the path is too long, 3 when a component
// cannot be created or is not a directory.
void host_make_dirs(const char *dir);

// The host's memcpy bandwidth in GB/s, read + write counted as CUDA's copy figure counts them
// (kernels/cuda/cuda_timing.h), one thread, the best of 3 copies of `bytes`: the CPU bench's
// ceiling (a lower one than all cores together reach).
double host_copy_bandwidth_gbs(size_t bytes);

#endif
