// harness/bench_decode.h — end-to-end decode throughput of the whole engine: a batch of B
// requests with short prompts generating N tokens, invariant kernel set against reference.
#ifndef INVAR_HARNESS_BENCH_DECODE_H
#define INVAR_HARNESS_BENCH_DECODE_H

#include <stdio.h>   // FILE

// Runs on `device` with the named model config for each batch size, writing one CSV row per
// (batch, kernel set) to csv (header included) and a table to stdout. Exits 2 on an unknown
// model name.
void bench_decode(const char *device, const char *model, const int *batch_sizes, int n_batch,
                  int prompt_len, int new_tokens, FILE *csv);

#endif
