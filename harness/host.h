// harness/host.h — the host-side helpers every subcommand needs: a monotonic clock and
// `mkdir -p`. Both exit on failure, naming the call and the path.
#ifndef INVAR_HARNESS_HOST_H
#define INVAR_HARNESS_HOST_H

// Seconds from an arbitrary origin, monotonic (CLOCK_MONOTONIC).
double host_seconds(void);

// Creates `dir` and its missing parents; exits 2 when the path is too long, 3 when a component
// cannot be created or is not a directory.
void host_make_dirs(const char *dir);

#endif
