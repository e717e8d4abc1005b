// harness/run/progress.h — the live line of `invar run` on a terminal: which config of how many,
// time so far and to go, what the running config is doing. Redrawn in place with \r and
// cleared before each result line, so the console's result lines stay as they are.
#ifndef INVAR_HARNESS_PROGRESS_H
#define INVAR_HARNESS_PROGRESS_H

#include <stdbool.h>  // bool
#include <stdio.h>    // FILE

typedef struct {
    bool on;
    FILE *f;
    int index, total;           // the running config (0-based), configs in the matrix
    const char *name;           // the running config's name
    double t0, config_t0;       // start of the run, of the running config
    int ran, to_run;            // configs run so far; configs left to run (the running one too)
    double ran_seconds;         // time of the configs run so far
} progress;

// Redraws the line with the running config's phase ("baseline 3/9", "bs=8"). The ETA is the
// mean time of the configs run so far times the configs left, less what the running one has
// spent. Does nothing when p is NULL or off.
__attribute__((format(printf, 2, 3)))
void progress_phase(progress *p, const char *fmt, ...);

// Erases the line, so that the next output starts on a clean line.
void progress_clear(const progress *p);

#endif
