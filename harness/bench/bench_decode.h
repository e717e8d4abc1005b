// harness/bench/bench_decode.h — end-to-end decode throughput of the whole engine: a batch of B
// requests with short prompts generating N tokens, invariant kernel set against reference.
#ifndef INVAR_HARNESS_BENCH_DECODE_H
#define INVAR_HARNESS_BENCH_DECODE_H

#include <stdbool.h>                 // bool

#include "../../engine/model_config.h" // model_config
#include "../../engine/weights.h"   // weight_source
#include "../../kernels/ops.h"      // ops_set
#include "../../reports/csv_report.h" // csv_report

// The device's limits measured in the same run: the roofline's bandwidth (GB/s, read + write
// as the copy figure counts them) and its compute peak (the best cuBLAS cell's TFLOP/s; 0 when
// the GEMM section did not run: the roofline is then the memory one alone).
typedef struct {
    double copy_gbs;
    double peak_tflops;
} bench_ceiling;

// A named model config and the batch sizes it is timed at.
typedef struct {
    const char *model;
    const int *batch_sizes;
    int n_batch;
    int prefill_len;             // > 0: also a prefill row, one prompt of this many tokens
} bench_decode_rows;

// Runs on `device`, for each model each of its batch sizes, writing one CSV row per batch (both
// kernel sets' rates, and the roofline: a decode step's bytes and FLOPs as
// harness/bench/step_cost.h counts them, the experts its tokens touched counted in a run of
// its own, and each set's share of the roofline's tokens/s) to OUT_DIR/bench_decode.csv and a
// table to stdout, then, where the invariant set has CUDA graphs, the same decode rows with
// graphs (phase "decode-graphs"), then the model's prefill row (phase "prefill": prompt
// tokens/s). profile: then the prefill row's one step op by op on each set (a table, and
// OUT_DIR/bench_prefill_ops.csv), then, per batch, the time of one decode step op by op on each
// set (a table, and OUT_DIR/bench_decode_ops.csv). Exits 2 on an unknown model name.
void bench_decode(const char *device, const bench_decode_rows *rows, int n_rows, int prompt_len,
                  int new_tokens, bool profile, const bench_ceiling *ceiling, const char *out_dir);

// How the engine runs: its TP-size-invariant mode (engine_limits.tp_size_invariant); CUDA
// graphs (engine_limits.graph_buckets: one bucket, the batch, so no step is padded).
enum { BENCH_TP_SIZE_INVARIANT = 1, BENCH_CUDA_GRAPHS = 2 };

// Decode tokens/s of the engine over T ranks (rank r on ops[r]) at batch B, prompts of
// prompt_len tokens: the median of three differences between a generate of new_tokens and one
// of a single token over the same prompts (both prefill alike, so the difference is the
// new_tokens - 1 decode steps). mode: BENCH_* flags.
double bench_decode_tokens_per_s(ops_set *const *ops, int T, const model_config *c,
                                 weight_source *w, int B, int prompt_len, int new_tokens,
                                 unsigned mode);

// --profile of TP-size invariance's cost: one decode step op by op on `ops` at T = 1 and batch
// B, the engine with tp_size_invariance on against off (a table, and CSV rows: device, model,
// batch, op, calls_per_step, then the times on and off).
void bench_decode_ops_tp_size(ops_set *ops, const model_config *c, weight_source *w,
                              const char *model, int B, int prompt_len, int new_tokens,
                              csv_report *csv);

// The benchmarks' CSVs (DIR/NAME), through the one CSV writer; a failed write exits 3 naming
// the file. bench_row's format separates fields by commas (csv_report_rowf).
csv_report *bench_csv_open(const char *dir, const char *name, const char *const *header, int ncols);
void bench_row(csv_report *csv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bench_csv_close(csv_report *csv);

#endif
