// harness/check/op_run.h — one op of the table (op_table.h) run at one shape on one set: the
// shape's shared inputs built once (an op_case), then batches of rows built from their seeds,
// run, and checked written; a row's error against the float64 oracle.
#ifndef INVAR_HARNESS_OP_RUN_H
#define INVAR_HARNESS_OP_RUN_H

#include <stdbool.h>           // bool
#include <stddef.h>            // size_t
#include <stdint.h>            // uint64_t
#include "../../kernels/ops.h" // ops_set
#include "op_table.h"          // op_entry, op_shape

typedef struct op_case op_case;  // one op at one shape on one set: shared inputs

// Builds the shape's shared inputs on ops's device (seeded: same seed, same inputs).
op_case *op_case_open(const op_entry *op, ops_set *ops, const op_shape *shape, uint64_t seed);
// Bytes of one row's output as the checker compares it (gaps included, left poisoned).
size_t op_case_row_bytes(const op_case *c);
// Runs the op once on M rows, row j built from row_seeds[j]; outputs are poisoned before
// and downloaded after, out receiving M * row_bytes bytes. Returns false when an output
// element was left unwritten or an element outside the outputs was written.
bool op_case_run(op_case *c, int M, const uint64_t *row_seeds, void *out);
// rel-L2 error of one row's output against the float64 oracle (kernels/f64/f64.h).
double op_case_error(op_case *c, uint64_t row_seed, const void *row_out);
// op_case_error of n rows (errs[i] for rows[i] made from seeds[i]), side by side on the case's
// row pool: the float64 oracle of a long row can take longer than the batch that made it.
void op_case_errors(op_case *c, int n, const uint64_t *seeds, const void *const *rows, double *errs);
void op_case_close(op_case *c);

#endif
