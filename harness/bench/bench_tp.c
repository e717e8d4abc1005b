// harness/bench/bench_tp.c — tensor parallelism on CUDA in `invar bench` (harness/bench/bench_tp.h).
//
// The all-reduce: every rank on its own thread and GPU runs `reps` all-reduces of one message
// back to back after a warm-up, then syncs; the time per all-reduce is the wall time of the
// slowest rank's loop over reps (the ranks wait for each other inside every call, so the loops
// end together). Messages are a row-parallel layer's output: tokens x the V2-Lite hidden size.
//
// Decode: harness/bench/bench_decode.c's method (two generate calls, the difference is the decode
// steps; median of three) on the tensor-parallel engine (engine/tp_engine.h), T = 1 and 2.
//
// TP-size invariance's cost: the same decode rate of the invariant set with tp_size_invariance on
// against the rank-order default, at T = 1 on one GPU and T = 2 where two are.
#include "bench_tp.h"

#include <math.h>                      // log, exp
#include <stdint.h>                    // int32_t, uint16_t, uint64_t
#include <stdio.h>                     // printf
#include <stdlib.h>                    // free

#include "../../common/check.h"        // invar_die, invar_malloc, invar_calloc
#include "../../common/hash.h"         // invar_mix64, invar_uniform
#include "../../common/rank_threads.h" // rank_threads_run
#include "../../engine/model_config.h" // model_config_by_name
#include "../../engine/weights.h"      // weights_synthetic
#include "../../kernels/bf16.h"        // float_to_bf16
#include "../../kernels/cpu/collective.h" // tp_comm_group_*
#include "../../sets/registry.h"       // kernel_set_create(_for_rank), cuda_device_count, tp_devices_describe
#include "bench_decode.h"              // bench_decode_tokens_per_s, bench_decode_ops_tp_size, bench_csv_*
#include "../host.h"                   // host_seconds

enum { TP = 2 };

// --- the all-reduce ----------------------------------------------------------------------------

typedef struct {
    ops_set *ranks[TP];
    tp_comm_group *group;
    bf16 *messages[TP];
    long n;
    int warmup, reps;
    double seconds[TP];   // each rank's timed loop
} reduce_job;

static void reduce_loop(void *arg, int rank) {
    reduce_job *j = arg;
    ops_set *ops = j->ranks[rank];
    ops->bind_thread(ops);
    tp_comm *comm = tp_comm_group_rank(j->group, rank);
    for (int i = 0; i < j->warmup; i++) ops->all_reduce(ops, comm, j->messages[rank], j->n);
    ops->sync(ops);
    double t0 = host_seconds();
    for (int i = 0; i < j->reps; i++) ops->all_reduce(ops, comm, j->messages[rank], j->n);
    ops->sync(ops);
    j->seconds[rank] = host_seconds() - t0;
}

// Microseconds per all-reduce of n bf16 values over TP GPUs with the named set's collective.
// The values are small (in [-1/64, 1/64)) so repeated in-place sums stay finite.
static double all_reduce_us(const char *set, long n, int reps) {
    reduce_job j = {.n = n, .warmup = 5, .reps = reps};
    uint16_t *host = invar_malloc((size_t)n * sizeof *host, "bench all_reduce message");
    for (long i = 0; i < n; i++)
        host[i] = float_to_bf16((invar_uniform(invar_mix64((uint64_t)i)) - 0.5f) / 32.0f);
    for (int r = 0; r < TP; r++) {
        j.ranks[r] = kernel_set_create_for_rank(set, "cuda", 0, r);
        if (!j.ranks[r]) invar_die(INVAR_EXIT_SYSTEM, "bench: no %s set on cuda", set);
        j.ranks[r]->bind_thread(j.ranks[r]);
        j.messages[r] = j.ranks[r]->alloc(j.ranks[r], (size_t)n * sizeof(bf16), "bench all_reduce message");
        j.ranks[r]->upload(j.ranks[r], j.messages[r], host, (size_t)n * sizeof(bf16));
    }
    j.ranks[0]->bind_thread(j.ranks[0]);
    j.group = tp_comm_group_create(TP);
    j.ranks[0]->open_group(j.ranks, TP, j.group);
    rank_threads_run(TP, reduce_loop, &j);
    double slowest = 0;
    for (int r = 0; r < TP; r++) slowest = j.seconds[r] > slowest ? j.seconds[r] : slowest;
    tp_comm_group_destroy(j.group);
    for (int r = TP - 1; r >= 0; r--) {  // rank 0 last: this thread ends on GPU 0
        j.ranks[r]->bind_thread(j.ranks[r]);
        j.ranks[r]->release(j.ranks[r], j.messages[r]);
        j.ranks[r]->destroy(j.ranks[r]);
    }
    free(host);
    return slowest / reps * 1e6;
}

static void bench_all_reduce(bool quick, const char *out_dir) {
    // Tokens of a step: decode batches and prefill chunks, times the hidden size 2048.
    static const int tokens[] = {1, 32, 128, 1024, 8192};
    const int hidden = 2048, reps = quick ? 20 : 100;
    printf("\ntensor-parallel all-reduce, T=%d, bf16 rows of %d (the V2-Lite hidden size)\n", TP, hidden);
    printf("%7s %10s %12s %12s %7s\n", "tokens", "elements", "inv us", "nccl us", "ratio");
    static const char *const header[] = {"T", "tokens", "elements", "invariant_us", "nccl_us", "ratio"};
    csv_report *csv = bench_csv_open(out_dir, "bench_tp_all_reduce.csv", header, 6);
    double log_sum = 0;
    int n_rows = (int)(sizeof tokens / sizeof tokens[0]);
    for (int i = 0; i < n_rows; i++) {
        long n = (long)tokens[i] * hidden;
        double inv = all_reduce_us("invariant", n, reps), ref = all_reduce_us("reference", n, reps);
        printf("%7d %10ld %12.1f %12.1f %7.2f\n", tokens[i], n, inv, ref, inv / ref);
        bench_row(csv, "%d,%d,%ld,%.2f,%.2f,%.4f", TP, tokens[i], n, inv, ref, inv / ref);
        log_sum += log(inv / ref);
    }
    bench_csv_close(csv);
    printf("all-reduce geometric mean of time ratio invariant / ncclAllReduce: %.2f\n",
           exp(log_sum / n_rows));
}

// --- decode at T = 1 and 2 ---------------------------------------------------------------------

// Decode tokens/s of the named set at T ranks (rank r on GPU r) and batch B.
static double tp_decode_tokens_per_s(const char *set, int T, const model_config *c, weight_source *w,
                                     int B, int prompt_len, int new_tokens, bool tp_size_invariant) {
    ops_set *ops[TP] = {0};
    if (T < 1 || T > TP) invar_die(INVAR_EXIT_SYSTEM, "bench: T = %d outside 1..%d", T, TP);
    for (int r = 0; r < T; r++) {
        ops[r] = kernel_set_create_for_rank(set, "cuda", 0, r);
        if (!ops[r]) invar_die(INVAR_EXIT_SYSTEM, "bench: no %s set on cuda", set);
    }
    double rate = bench_decode_tokens_per_s(ops, T, c, w, B, prompt_len, new_tokens,
                                            tp_size_invariant ? BENCH_TP_SIZE_INVARIANT : 0);
    for (int r = 0; r < T; r++) ops[r]->destroy(ops[r]);
    return rate;
}

// One engine variant a decode table times: a kernel set, with or without TP-size invariance.
typedef struct {
    const char *set;
    bool tp_size_invariant;
    const char *column;  // its CSV column
    const char *label;   // its console heading
} decode_variant;

// The model the tensor-parallel decode rows run: V2-Lite's shape, synthetic weights, prompts of
// DECODE_PROMPT tokens and decode_new_tokens(quick) new ones.
static const char *const decode_model = "v2-lite";
enum { DECODE_PROMPT = 128 };
static int decode_new_tokens(bool quick) { return quick ? 16 : 64; }

static weight_source *decode_weights(model_config *c) {
    if (!model_config_by_name(decode_model, c))
        invar_die(INVAR_EXIT_INPUT, "bench: unknown model '%s'", decode_model);
    return weights_synthetic(c, 1);
}

// V2-Lite-shaped decode tokens/s of variants a and b at T = 1 .. Tmax and batches 1, 32, 128:
// a console table under `title` and OUT_DIR/csv_name (T, model, batch, prompt_len, new_tokens,
// a's and b's tok/s, the ratio a / b).
static void decode_table(bool quick, int Tmax, const char *title, const decode_variant *a,
                         const decode_variant *b, const char *csv_name, const char *out_dir) {
    const char *model = decode_model;
    model_config c;
    weight_source *w = decode_weights(&c);
    static const int batches[] = {1, 32, 128};
    const int prompt_len = DECODE_PROMPT, new_tokens = decode_new_tokens(quick);
    printf("\n%s, model %s (%d layers), prompts of %d tokens, %d new tokens\n", title, model,
           c.num_hidden_layers, prompt_len, new_tokens);
    printf("%3s %6s %16s %16s %7s\n", "T", "batch", a->label, b->label, "ratio");
    const char *const header[] = {"T", "model", "batch", "prompt_len", "new_tokens", a->column, b->column, "ratio"};
    csv_report *csv = bench_csv_open(out_dir, csv_name, header, 8);
    for (int T = 1; T <= Tmax; T++)
        for (int i = 0; i < (int)(sizeof batches / sizeof batches[0]); i++) {
            int B = batches[i];
            double ra = tp_decode_tokens_per_s(a->set, T, &c, w, B, prompt_len, new_tokens, a->tp_size_invariant);
            double rb = tp_decode_tokens_per_s(b->set, T, &c, w, B, prompt_len, new_tokens, b->tp_size_invariant);
            printf("%3d %6d %16.1f %16.1f %7.3f\n", T, B, ra, rb, ra / rb);
            bench_row(csv, "%d,%s,%d,%d,%d,%.1f,%.1f,%.4f", T, model, B, prompt_len, new_tokens, ra, rb, ra / rb);
        }
    bench_csv_close(csv);
    w->destroy(w);
}

// Invariant against reference at T = 1 and 2.
static void bench_tp_decode(bool quick, const char *out_dir) {
    const decode_variant inv = {"invariant", false, "invariant_tok_s", "inv tok/s"},
                         ref = {"reference", false, "reference_tok_s", "ref tok/s"};
    decode_table(quick, TP, "tensor-parallel decode", &inv, &ref, "bench_tp_decode.csv", out_dir);
}

// The invariant set's decode with tp_size_invariance on against off (rank order), T = 1 .. Tmax;
// profile: then a decode step op by op, on against off, at T = 1 and batches 1 and 32
// (bench_tp_size_ops.csv), after every rate, since the profile's events slow the host side.
static void bench_tp_size(bool quick, bool profile, int Tmax, const char *out_dir) {
    const decode_variant on = {"invariant", true, "tp_size_tok_s", "tp-size tok/s"},
                         off = {"invariant", false, "rank_order_tok_s", "rank-order tok/s"};
    decode_table(quick, Tmax, "TP-size invariance's cost", &on, &off, "bench_tp_size.csv", out_dir);
    if (!profile) return;
    model_config c;
    weight_source *w = decode_weights(&c);
    ops_set *ops = kernel_set_create("invariant", "cuda", 0);
    if (!ops) invar_die(INVAR_EXIT_SYSTEM, "bench: no invariant set on cuda");
    static const char *const header[] = {"device", "model", "batch", "op", "calls_per_step",
                                         "tp_size_us", "rank_order_us"};
    csv_report *csv = bench_csv_open(out_dir, "bench_tp_size_ops.csv", header, 7);
    printf("\nTP-size invariance op by op at T = 1 (on: tp_size_invariance = on; off: rank order)\n");
    static const int batches[] = {1, 32};
    for (int i = 0; i < 2; i++)
        bench_decode_ops_tp_size(ops, &c, w, decode_model, batches[i], DECODE_PROMPT,
                                 decode_new_tokens(quick), csv);
    bench_csv_close(csv);
    ops->destroy(ops);
    w->destroy(w);
}

bool bench_tp(bool quick, bool profile, const char *out_dir) {
    int gpus = cuda_device_count();
    bench_tp_size(quick, profile, gpus >= TP ? TP : 1, out_dir);
    if (gpus < TP) {
        printf("\nSKIP: tensor-parallel bench at T = %d: needs %d GPUs, %d visible\n", TP, TP, gpus);
        return false;
    }
    char library[64], links[192];
    tp_devices_describe("cuda", TP, library, (int)sizeof library, links, (int)sizeof links);
    printf("\ntensor parallelism over %s, GPU links %s\n", library, links);
    bench_all_reduce(quick, out_dir);
    bench_tp_decode(quick, out_dir);
    return true;
}
