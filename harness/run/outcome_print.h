// harness/run/outcome_print.h — one config's result on the console: the verdict line with its
// effective settings (and what resolution changed), then the resolution, the first divergence
// and the note, each on an indented line of its own.
#ifndef INVAR_HARNESS_OUTCOME_PRINT_H
#define INVAR_HARNESS_OUTCOME_PRINT_H

#include <stdbool.h>    // bool
#include <stdio.h>      // FILE

#include "case_file.h"  // case_file
#include "matrix.h"     // run_config
#include "outcome.h"    // outcome
#include "resolve.h"    // resolved_config

// Prints config cfg's outcome to f (nothing for a PASS when quiet); a config merged into
// another gets one line naming it.
void outcome_print(FILE *f, bool quiet, const case_file *c, const run_config *cfg,
                   const resolved_config *rc, const outcome *out, const run_config *merged_into);

#endif
