// harness/bench/bench_tp.h — tensor parallelism on CUDA in `invar bench`: the invariant all-reduce
// (NCCL all-gather, then our rank-order sum) against ncclAllReduce at T = 2 over the message
// sizes of V2-Lite steps, and decode tokens/s of the V2-Lite-shaped model at T = 1 and 2,
// invariant vs reference. Writes DIR/bench_tp_all_reduce.csv and DIR/bench_tp_decode.csv; and
// on any GPU count DIR/bench_tp_size.csv: the invariant set's decode with TP-size invariance on
// against the rank-order default, at T = 1 (and 2 with two GPUs); with --profile also
// DIR/bench_tp_size_ops.csv, a decode step op by op with the option on and off.
#ifndef INVAR_HARNESS_BENCH_TP_H
#define INVAR_HARNESS_BENCH_TP_H

#include <stdbool.h>  // bool

// False (after a visible SKIP line) when fewer than two GPUs are visible (bench_tp_size.csv
// is written either way).
bool bench_tp(bool quick, bool profile, const char *out_dir);

#endif
