// harness/bench/bench.c — the CUDA half of `invar bench` (bench.h; the command line is
// cmd_bench.c): the invariant CUDA kernels against the reference set (cuBLAS, split-count MLA),
// timed with CUDA events.
//
// GEMM over the DeepSeek projection shapes x M, MLA decode over batch x context x heads, the
// routed experts at V2-Lite's shapes and decode batches (bench_moe.csv: share of copy), after
// measuring the device-to-device copy bandwidth that the MLA numbers are compared with (or only
// the --shape rows of one section: a kernel developer's loop on one shape). Every
// timing: warm-up, then the median of many runs, each run on the next of several input copies
// whose total exceeds twice the 60 MB L2. Beside each GEMM (N, K) and MLA row, the floor its
// memory-bound cases are read against: a plain read of its weights or cache, timed the same way
// (read us, the CSVs' floor_read_* columns: a reference read, the start of a launch included,
// not a proven bound). Writes DIR/meta.csv (finished no), DIR/bench_gemm.csv, bench_mla.csv and
// bench_moe.csv (bench_peak.csv where the decode section runs without the GEMM grid: the FLOP
// ceiling from a few cuBLAS cells), then DIR/meta.csv again (finished yes);
// with two GPUs also the tensor-parallel rows (harness/bench/bench_tp.h).
#include <math.h>                // exp, log, sqrt
#include <stdint.h>              // uint16_t, uint64_t, int32_t
#include <stdio.h>               // printf, fprintf, fopen
#include <stdlib.h>              // free
#include <string.h>              // strcmp, strerror, strlen

#include "../../kernels/bf16.h"  // float_to_bf16
#include "../../common/check.h" // invar_die, invar_malloc
#include "../../sets/registry.h" // kernel_set_create, cuda_device_available
#include "bench.h"               // bench_shapes, bench_cuda
#include "bench_decode.h"        // bench_decode
#include "bench_inputs.h"        // bench_gemm_run_at, bench_l2_copies, BENCH_L2_BYTES
#include "bench_meta.h"          // bench_meta_write
#include "bench_tp.h"            // bench_tp
#include "../host.h"             // host_make_dirs
#ifdef INVAR_CUDA
#include "../../kernels/cuda/cuda_timing.h" // cuda_time_median_ms, cuda_copy_bandwidth_gbs, cuda_read_median_ms
#include "../../kernels/cuda/inv_cuda.h"  // inv_cuda_gemm_plan_describe
#include "../../common/hash.h"          // invar_mix64, invar_uniform
#endif

#ifdef INVAR_CUDA

#define FILL_CHUNK (16L << 20)  // bf16 values generated on the host, then tiled on the device

typedef struct {
    int warmup, reps;
} bench_opts;

#endif

// --- shapes: the grids, or the --shape rows -----------------------------------------------------

#define MLA_LATENT 512            // the MLA rows' latent (L) and rope (R) dims: DeepSeek's
#define MLA_ROPE 64
#define MLA_SPLIT 512             // the invariant set's split size, for the partials' scratch

void bench_shapes_add(bench_shapes *s, int a, int b, int c) {
    if (s->n == BENCH_MAX_SHAPES) invar_die(INVAR_EXIT_SYSTEM, "bench: more than %d rows", BENCH_MAX_SHAPES);
    s->v[s->n][0] = a;
    s->v[s->n][1] = b;
    s->v[s->n][2] = c;
    s->n++;
}

#ifdef INVAR_CUDA

static const int gemm_nk[][2] = {
    {1536, 7168}, {576, 7168}, {24576, 1536}, {7168, 16384}, {36864, 7168}, {7168, 18432},
    {129280, 7168}, {3072, 2048}, {4096, 512}, {2048, 2048}, {21888, 2048}, {102400, 2048},
};
static const int gemm_m[] = {1, 16, 64, 256, 1024, 4096, 8192};
static const int mla_batches[] = {1, 32, 128}, mla_contexts[] = {1024, 4096, 16384}, mla_heads[] = {16, 128};

// The committed grids (kernels/cuda/BENCH.md's tables).
static bench_shapes gemm_grid(void) {
    bench_shapes s = {.n = 0};
    for (size_t i = 0; i < sizeof gemm_nk / sizeof gemm_nk[0]; i++)
        for (size_t j = 0; j < sizeof gemm_m / sizeof gemm_m[0]; j++)
            bench_shapes_add(&s, gemm_nk[i][0], gemm_nk[i][1], gemm_m[j]);
    return s;
}
static bench_shapes mla_grid(void) {
    bench_shapes s = {.n = 0};
    for (int bi = 0; bi < 3; bi++)
        for (int ci = 0; ci < 3; ci++)
            for (int hi = 0; hi < 2; hi++) bench_shapes_add(&s, mla_batches[bi], mla_contexts[ci], mla_heads[hi]);
    return s;
}

// Random bf16 in [-1, 1): a host chunk uploaded again and again (never zeros).
static void fill_random(ops_set *ops, uint16_t *dst, long n, uint64_t seed) {
    long chunk = n < FILL_CHUNK ? n : FILL_CHUNK;
    uint16_t *h = invar_malloc((size_t)chunk * 2, "bench random fill");
    for (long i = 0; i < chunk; i++)
        h[i] = float_to_bf16(2.0f * invar_uniform(invar_mix64(seed + (uint64_t)i)) - 1.0f);
    for (long at = 0; at < n; at += chunk) {
        long len = n - at < chunk ? n - at : chunk;
        ops->upload(ops, dst + at, h, (size_t)len * 2);
    }
    free(h);
}

// Device memory an MLA row takes (bench_mla), with room for the partials.
static double mla_row_bytes(int B, int ctx, int H) {
    const double row = (MLA_LATENT + MLA_ROPE) * 2.0, kv = (double)B * ctx * row;
    const double q_out = (double)B * H * (row + MLA_LATENT * 2.0);
    const double partials = (double)B * H * ceil(ctx / (double)MLA_SPLIT) * (MLA_LATENT * 4.0 + 8.0);
    return bench_l2_copies(kv) * (kv + (double)B * (ctx / BENCH_MLA_BLOCK) * 4) + q_out + partials;
}

// Every --shape row fits the device's free memory (with 512 MB to spare), or exit 2 naming the
// first that does not: a shape the device cannot hold is an impossible setting, not a crash.
static bool shapes_fit(ops_set *inv, const bench_shapes *shapes, bool gemm, char *err, size_t err_len) {
    const double free_bytes = (double)inv_cuda_free_bytes(inv), spare = 512.0 * 1024 * 1024;
    for (int r = 0; r < shapes->n; r++) {
        const int *v = shapes->v[r];
        // a GEMM row with the rest of its run
        const double need = gemm ? bench_gemm_run_at(shapes->v, shapes->n, r).device_bytes : mla_row_bytes(v[0], v[1], v[2]);
        if (need + spare > free_bytes) {
            snprintf(err, err_len,
                     "--shape: '%d:%d:%d' needs %.1f GB of device memory%s, %.1f GB are free", v[0], v[1], v[2],
                     need / 1e9, gemm ? " (with the rows of its N x K that follow it, which share its operands)" : "",
                     free_bytes / 1e9);
            return false;
        }
    }
    return true;
}

// --- GEMM --------------------------------------------------------------------------------------

typedef struct {
    ops_set *ops;
    gemm_args base;
    const uint16_t *x, *w;
    long x_elems, w_elems;
    int copies;
} gemm_job;

static void gemm_once(void *arg, int rep) {
    gemm_job *j = arg;
    gemm_args a = j->base;
    int c = rep % j->copies;
    a.x = j->x + (long)c * j->x_elems;
    a.w = j->w + (long)c * j->w_elems;
    j->ops->gemm(j->ops, &a);
}

// Each run of rows with one (N, K) shares its operands: copies of the weights and of the
// activations for the run's largest M, each row's own bytes over twice L2 (bench_inputs.h).
// Returns the geometric mean of the speed ratios; *best_ref_tflops: the fastest cuBLAS cell.
static double bench_gemm(ops_set *inv, ops_set *ref, const bench_opts *o, const bench_shapes *shapes,
                         csv_report *csv, double *best_ref_tflops) {
    double log_sum = 0.0;
    *best_ref_tflops = 0.0;
    int count = 0;
    printf("%-14s %5s %10s %10s %8s %8s %8s %8s %6s %6s %8s  %s\n", "N x K", "M", "inv us", "cuBLAS us", "inv TF/s",
           "ref TF/s", "inv GB/s", "ref GB/s", "ratio", "splits", "read us", "plan");
    for (int r0 = 0, r1, run = 0; r0 < shapes->n; r0 = r1, run++) {
        const int N = shapes->v[r0][0], K = shapes->v[r0][1];
        // The GEMM rotates through `copies` of both operands; the plain read of the weights
        // through w_copies >= copies, so that it too reads from DRAM when the smallest M is large.
        const bench_gemm_run run_rows = bench_gemm_run_at(shapes->v, shapes->n, r0);
        const int max_m = run_rows.max_m, copies = run_rows.copies, w_copies = run_rows.weight_copies;
        const long w_elems = (long)N * K, x_elems = (long)max_m * K;
        r1 = run_rows.end;
        uint16_t *w = inv->alloc(inv, (size_t)w_elems * w_copies * 2, "bench gemm weights");
        uint16_t *x = inv->alloc(inv, (size_t)x_elems * copies * 2, "bench gemm activations");
        uint16_t *y = inv->alloc(inv, (size_t)max_m * N * 2, "bench gemm output");
        fill_random(inv, w, w_elems * w_copies, 0x1234u + (uint64_t)run);
        fill_random(inv, x, x_elems * copies, 0x9876u + (uint64_t)run);
        // The floor the small-M rows are read against: a plain read of the weights, timed the same way.
        const double t_read = cuda_read_median_ms(inv, w, (size_t)w_elems * 2, (size_t)w_elems * 2, w_copies,
                                                  o->warmup, o->reps);
        for (int r = r0; r < r1; r++) {
            const int M = shapes->v[r][2];
            gemm_job j = {inv, {0}, x, w, x_elems, w_elems, copies};
            j.base.y = y;
            j.base.M = M;
            j.base.N = N;
            j.base.K = K;
            double t_inv = cuda_time_median_ms(inv, gemm_once, &j, o->warmup, o->reps);
            j.ops = ref;
            double t_ref = cuda_time_median_ms(ref, gemm_once, &j, o->warmup, o->reps);
            double flop = 2.0 * M * (double)N * K, bytes = 2.0 * ((double)M * K + (double)N * K + (double)M * N);
            double ratio = t_ref / t_inv;
            if (flop / t_ref / 1e9 > *best_ref_tflops) *best_ref_tflops = flop / t_ref / 1e9;
            log_sum += log(ratio);
            count++;
            // The invariant GEMM's split-K count (a function of N and K) and the path it took at
            // this M (tile/split mode and load): what to read the timings against.
            char plan[64];
            j.base.x = x;
            j.base.w = w;
            int splits = inv_cuda_gemm_plan_describe(inv, &j.base, plan, (int)sizeof plan);
            bench_row(csv, "%d,%d,%d,%.2f,%.2f,%.1f,%.1f,%.0f,%.0f,%.3f,%d,%s,%.2f", N, K, M, t_inv * 1e3, t_ref * 1e3,
                      flop / t_inv / 1e9, flop / t_ref / 1e9, bytes / t_inv / 1e6, bytes / t_ref / 1e6, ratio,
                      splits, plan, t_read * 1e3);
            printf("%6d x %-6d %5d %10.1f %10.1f %8.1f %8.1f %8.0f %8.0f %6.3f %6d %8.1f  %s\n", N, K, M, t_inv * 1e3,
                   t_ref * 1e3, flop / t_inv / 1e9, flop / t_ref / 1e9, bytes / t_inv / 1e6, bytes / t_ref / 1e6,
                   ratio, splits, t_read * 1e3, plan);
            fflush(stdout);
        }
        inv->release(inv, w);
        inv->release(inv, x);
        inv->release(inv, y);
    }
    return exp(log_sum / count);
}

// --- the FLOP ceiling without the GEMM section ----------------------------------------------------

// cuBLAS on the grid's large compute-bound cells: where the decode section runs without the GEMM
// grid (--only decode), its prefill rows still get a compute roofline, from the fastest cell.
static const int peak_cells[][3] = {{36864, 7168, 4096}, {7168, 18432, 4096}, {7168, 16384, 4096}};

static double bench_flop_peak(ops_set *ref, const bench_opts *o, csv_report *csv) {
    double best = 0.0;
    printf("FLOP ceiling (the GEMM section did not run): cuBLAS on the grid's large cells\n");
    for (size_t i = 0; i < sizeof peak_cells / sizeof peak_cells[0]; i++) {
        const int N = peak_cells[i][0], K = peak_cells[i][1], M = peak_cells[i][2];
        const long w_elems = (long)N * K, x_elems = (long)M * K;
        uint16_t *w = ref->alloc(ref, (size_t)w_elems * 2, "bench peak weights");
        uint16_t *x = ref->alloc(ref, (size_t)x_elems * 2, "bench peak activations");
        uint16_t *y = ref->alloc(ref, (size_t)M * N * 2, "bench peak output");
        fill_random(ref, w, w_elems, 0x5eedu + (uint64_t)i);
        fill_random(ref, x, x_elems, 0xfeedu + (uint64_t)i);
        gemm_job j = {ref, {0}, x, w, x_elems, w_elems, 1};
        j.base.y = y;
        j.base.M = M;
        j.base.N = N;
        j.base.K = K;
        const double t = cuda_time_median_ms(ref, gemm_once, &j, o->warmup, o->reps);
        const double tflops = 2.0 * M * (double)N * K / t / 1e9;
        if (tflops > best) best = tflops;
        printf("%6d x %-6d %5d %10.1f us %8.1f TF/s\n", N, K, M, t * 1e3, tflops);
        bench_row(csv, "%d,%d,%d,%.2f,%.1f", N, K, M, t * 1e3, tflops);
        ref->release(ref, w);
        ref->release(ref, x);
        ref->release(ref, y);
    }
    printf("FLOP ceiling: %.1f TFLOP/s\n\n", best);
    return best;
}

// --- MLA decode --------------------------------------------------------------------------------

typedef struct {
    ops_set *ops;
    mla_attention_args base;
    const int32_t *tables;  // copies x [B, blocks_per_seq]
    long table_elems;
    int copies;
} mla_job;

static void mla_once(void *arg, int rep) {
    mla_job *j = arg;
    mla_attention_args a = j->base;
    a.block_table = j->tables + (long)(rep % j->copies) * j->table_elems;
    j->ops->mla_attention(j->ops, &a);
}

// The cache's random seed for row r: the grid's rows keep the seeds of the committed tables
// (batch x 9 + context x 3 + heads, by their indices in the grid), other rows follow them.
static int mla_seed_index(int B, int ctx, int H, int r) {
    int bi = 0, ci = 0, hi = 0;
    while (bi < 3 && mla_batches[bi] != B) bi++;
    while (ci < 3 && mla_contexts[ci] != ctx) ci++;
    while (hi < 2 && mla_heads[hi] != H) hi++;
    return bi < 3 && ci < 3 && hi < 2 ? bi * 9 + ci * 3 + hi : 27 + r;
}

// Returns the invariant kernel's lowest share of copy bandwidth over the memory-bound shapes
// (16 heads, a cache larger than twice L2): issue 3's bar for the decode kernel; a negative
// number when no row is one.
static double bench_mla(ops_set *inv, ops_set *ref, const bench_opts *o, const bench_shapes *shapes, double copy_gbs,
                        csv_report *csv) {
    double worst_pct = -1.0;
    const int L = MLA_LATENT, R = MLA_ROPE, BS = BENCH_MLA_BLOCK;
    printf("\n%5s %7s %5s %10s %10s %8s %8s %7s %7s %8s %8s %8s %8s\n", "batch", "context", "heads", "inv us", "ref us",
           "inv GB/s", "ref GB/s", "inv %cp", "ref %cp", "inv TF/s", "ref TF/s", "read us", "read %cp");
    for (int r = 0; r < shapes->n; r++) {
        const int B = shapes->v[r][0], ctx = shapes->v[r][1], H = shapes->v[r][2];
        const long kv_bytes = (long)B * ctx * (L + R) * 2;
        const int copies = bench_l2_copies((double)kv_bytes);
        const int bps = ctx / BS;
        const long slots = (long)copies * B * ctx;
        uint16_t *kv = inv->alloc(inv, (size_t)slots * (L + R) * 2, "bench mla kv cache");
        uint16_t *q = inv->alloc(inv, (size_t)B * H * (L + R) * 2, "bench mla queries");
        uint16_t *out = inv->alloc(inv, (size_t)B * H * L * 2, "bench mla output");
        int32_t *tables = inv->alloc(inv, (size_t)copies * B * bps * 4, "bench mla block tables");
        int32_t *meta = inv->alloc(inv, (size_t)3 * B * 4, "bench mla token metadata");
        fill_random(inv, kv, slots * (L + R), 0x5151u + (uint64_t)mla_seed_index(B, ctx, H, r));
        fill_random(inv, q, (long)B * H * (L + R), 0x7777u);
        int32_t *h_tab = invar_malloc((size_t)copies * B * bps * 4, "bench mla block tables");
        for (long i = 0; i < (long)copies * B * bps; i++) h_tab[i] = (int32_t)i;
        inv->upload(inv, tables, h_tab, (size_t)copies * B * bps * 4);
        free(h_tab);
        int32_t *h_meta = invar_malloc((size_t)3 * B * 4, "bench mla token metadata");
        for (int b = 0; b < B; b++) {
            h_meta[b] = b;               // token_seq
            h_meta[B + b] = ctx - 1;     // token_pos
            h_meta[2 * B + b] = ctx;     // seq_lens
        }
        inv->upload(inv, meta, h_meta, (size_t)3 * B * 4);
        free(h_meta);

        mla_job j = {inv, {0}, tables, (long)B * bps, copies};
        mla_attention_args *a = &j.base;
        a->out = out;
        a->q_lat = q;
        a->q_pe = q + (long)B * H * L;
        a->kv_cache = kv;
        a->token_seq = meta;
        a->token_pos = meta + B;
        a->seq_lens = meta + 2 * B;
        a->T = B;
        a->H = H;
        a->L = L;
        a->R = R;
        a->ld_out = (long)H * L;
        a->ld_q_lat = (long)H * L;
        a->ld_q_pe = (long)H * R;
        a->head_stride_q_pe = R;
        a->block_size = BS;
        a->max_blocks_per_seq = bps;
        a->num_seqs = B;
        a->max_seq_len = ctx;
        a->scale = 1.0f / sqrtf(192.0f);
        double t_inv = cuda_time_median_ms(inv, mla_once, &j, o->warmup, o->reps);
        j.ops = ref;
        double t_ref = cuda_time_median_ms(ref, mla_once, &j, o->warmup, o->reps);
        // The floor: a plain read of the cache this row reads (copy c is the c-th run of
        // B x ctx slots: the tables of copy c point there), timed the same way.
        double t_read = cuda_read_median_ms(inv, kv, (size_t)kv_bytes, (size_t)kv_bytes, copies, o->warmup, o->reps);
        double bytes = (double)kv_bytes + 2.0 * B * H * (L + R) + 2.0 * B * H * L;
        double flop = 2.0 * B * (double)H * ctx * (L + R + L);
        double gi = bytes / t_inv / 1e6, gr = bytes / t_ref / 1e6, read_pct = 100.0 * kv_bytes / t_read / 1e6 / copy_gbs;
        // The shapes the summary judges the kernel by: 16 heads, a cache over twice L2.
        const bool memory_bound = H == 16 && kv_bytes > 2.0 * BENCH_L2_BYTES;
        bench_row(csv, "%d,%d,%d,%.2f,%.2f,%.0f,%.0f,%.1f,%.1f,%.1f,%.1f,%.2f,%.1f,%s", B, ctx, H, t_inv * 1e3,
                  t_ref * 1e3, gi, gr, 100.0 * gi / copy_gbs, 100.0 * gr / copy_gbs, flop / t_inv / 1e9,
                  flop / t_ref / 1e9, t_read * 1e3, read_pct, memory_bound ? "yes" : "no");
        printf("%5d %7d %5d %10.1f %10.1f %8.0f %8.0f %6.1f%% %6.1f%% %8.1f %8.1f %8.1f %7.1f%%\n", B, ctx, H,
               t_inv * 1e3, t_ref * 1e3, gi, gr, 100.0 * gi / copy_gbs, 100.0 * gr / copy_gbs, flop / t_inv / 1e9,
               flop / t_ref / 1e9, t_read * 1e3, read_pct);
        fflush(stdout);
        if (memory_bound && (worst_pct < 0.0 || 100.0 * gi / copy_gbs < worst_pct))
            worst_pct = 100.0 * gi / copy_gbs;
        inv->release(inv, kv);
        inv->release(inv, q);
        inv->release(inv, out);
        inv->release(inv, tables);
        inv->release(inv, meta);
    }
    return worst_pct;
}

// --- MoE routed experts ------------------------------------------------------------------------
// moe_experts at DeepSeek-V2-Lite's expert shapes and its decode batches: most of a decode step's
// bytes at batch 32 and 128 are the experts its tokens touch, read by grouped GEMMs of a few rows
// an expert, so the row says what share of copy bandwidth that reaches.

#define MOE_D 2048
#define MOE_I 1408
#define MOE_E 64
#define MOE_K 6
static const int moe_tokens[] = {1, 32, 128};

typedef struct {
    ops_set *ops;
    moe_experts_args base;
} moe_job;

static void moe_once(void *arg, int rep) {
    (void)rep;  // the weights (over a GB) are far past L2 whichever copy: one set of them
    moe_job *j = arg;
    j->ops->moe_experts(j->ops, &j->base);
}

// Each token's k distinct experts, uniformly drawn (seeded); returns how many experts are touched.
static int moe_route_uniform(int32_t *ids, int T, uint64_t seed) {
    bool touched[MOE_E] = {false};
    int count = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < MOE_K; j++) {
            int e;
            bool taken;
            uint64_t draw = seed + (uint64_t)(t * MOE_K + j) * 1000003u;
            do {
                e = (int)(invar_uniform(invar_mix64(draw++)) * MOE_E) % MOE_E;
                taken = false;
                for (int q = 0; q < j; q++) taken |= ids[t * MOE_K + q] == e;
            } while (taken);
            ids[t * MOE_K + j] = e;
            count += !touched[e];
            touched[e] = true;
        }
    return count;
}

static void bench_moe(ops_set *inv, ops_set *ref, const bench_opts *o, double copy_gbs, csv_report *csv) {
    const long w_gate_up = (long)MOE_E * 2 * MOE_I * MOE_D, w_down = (long)MOE_E * MOE_D * MOE_I;
    const int max_T = moe_tokens[sizeof moe_tokens / sizeof moe_tokens[0] - 1];
    uint16_t *wgu = inv->alloc(inv, (size_t)w_gate_up * 2, "bench moe w_gate_up");
    uint16_t *wdn = inv->alloc(inv, (size_t)w_down * 2, "bench moe w_down");
    uint16_t *x = inv->alloc(inv, (size_t)max_T * MOE_D * 2, "bench moe x");
    uint16_t *out = inv->alloc(inv, (size_t)max_T * MOE_K * MOE_D * 2, "bench moe out");
    int32_t *ids = inv->alloc(inv, (size_t)max_T * MOE_K * 4, "bench moe expert ids");
    fill_random(inv, wgu, w_gate_up, 0x4e4eu);
    fill_random(inv, wdn, w_down, 0x4f4fu);
    fill_random(inv, x, (long)max_T * MOE_D, 0x5050u);
    printf("\n%6s %8s %10s %10s %8s %8s %7s %7s %6s\n", "tokens", "experts", "inv us", "ref us", "inv GB/s",
           "ref GB/s", "inv %cp", "ref %cp", "ratio");
    for (size_t r = 0; r < sizeof moe_tokens / sizeof moe_tokens[0]; r++) {
        const int T = moe_tokens[r];
        int32_t *h_ids = invar_malloc((size_t)T * MOE_K * 4, "bench moe expert ids");
        const int touched = moe_route_uniform(h_ids, T, 0x6000u + (uint64_t)T);
        inv->upload(inv, ids, h_ids, (size_t)T * MOE_K * 4);
        free(h_ids);
        moe_job j = {inv, {.out = out, .x = x, .topk_ids = ids, .w_gate_up = wgu, .w_down = wdn, .T = T,
                           .k = MOE_K, .E = MOE_E, .D = MOE_D, .I = MOE_I}};
        double t_inv = cuda_time_median_ms(inv, moe_once, &j, o->warmup, o->reps);
        j.ops = ref;
        double t_ref = cuda_time_median_ms(ref, moe_once, &j, o->warmup, o->reps);
        // Each touched expert's three matrices once, the tokens' rows in and their k rows out.
        const double bytes = (double)touched * 3.0 * MOE_D * MOE_I * 2.0 + (double)T * MOE_D * 2.0 +
                             (double)T * MOE_K * MOE_D * 2.0;
        const double gi = bytes / t_inv / 1e6, gr = bytes / t_ref / 1e6;
        const double pi = 100.0 * gi / copy_gbs, pr = 100.0 * gr / copy_gbs;
        bench_row(csv, "%d,%d,%d,%d,%d,%d,%.2f,%.2f,%.0f,%.0f,%.1f,%.1f,%.3f", MOE_D, MOE_I, MOE_E, MOE_K, T, touched,
                  t_inv * 1e3, t_ref * 1e3, gi, gr, pi, pr, t_ref / t_inv);
        printf("%6d %8d %10.1f %10.1f %8.0f %8.0f %6.1f%% %6.1f%% %6.3f\n", T, touched, t_inv * 1e3, t_ref * 1e3, gi,
               gr, pi, pr, t_ref / t_inv);
        fflush(stdout);
    }
    inv->release(inv, wgu);
    inv->release(inv, wdn);
    inv->release(inv, x);
    inv->release(inv, out);
    inv->release(inv, ids);
}

int bench_cuda(const char *out_dir, bool quick, const char *only, const char *model, bool profile,
               const bench_shapes *shapes, int argc, char **argv) {
    bench_opts o = quick ? (bench_opts){2, 7} : (bench_opts){5, 31};
    ops_set *inv = kernel_set_create("invariant", "cuda", 0);
    ops_set *ref = kernel_set_create("reference", "cuda", 0);
    if (!inv || !ref) invar_die(INVAR_EXIT_SYSTEM, "bench: the CUDA kernel sets are not registered");

    char err[256];
    if (shapes->n && !shapes_fit(inv, shapes, strcmp(only, "gemm") == 0, err, sizeof err)) {
        inv->destroy(inv);
        ref->destroy(ref);
        fprintf(stderr, "invar bench: %s\n", err);
        return INVAR_EXIT_INPUT;  // before the output directory: a refused run creates nothing
    }
    host_make_dirs(out_dir);
    // meta.csv first, "finished" no: a run cut short (a time limit, a crash) still files with
    // the sections it wrote; yes once every section is written.
    bench_meta_write(out_dir, "cuda", argc, argv, false);
    double copy_gbs = cuda_copy_bandwidth_gbs(inv, (size_t)1 << 30);
    printf("device-to-device copy: %.0f GB/s (1 GiB, read + write)\n\n", copy_gbs);

    char summary[256] = "";
    bench_ceiling ceiling = {.copy_gbs = copy_gbs};
    if (!only || strcmp(only, "gemm") == 0) {
        static const char *const header[] = {"N", "K", "M", "inv_us", "ref_us", "inv_tflops", "ref_tflops",
                                             "inv_gbs", "ref_gbs", "ratio_inv_over_ref", "splits", "plan",
                                             "floor_read_us"};
        csv_report *g = bench_csv_open(out_dir, "bench_gemm.csv", header, 13);
        const bench_shapes grid = gemm_grid();
        double geo = bench_gemm(inv, ref, &o, shapes->n ? shapes : &grid, g, &ceiling.peak_tflops);
        bench_csv_close(g);
        printf("GEMM geometric mean of speed ratio invariant / cuBLAS: %.3f\n", geo);
        snprintf(summary, sizeof summary, "; GEMM geomean invariant/cuBLAS %.3f%s", geo,
                 shapes->n ? " (the --shape rows)" : "");
    }
    if (!only || strcmp(only, "mla") == 0) {
        static const char *const header[] = {"batch", "context", "heads", "inv_us", "ref_us", "inv_gbs",
                                             "ref_gbs", "inv_pct_copy", "ref_pct_copy", "inv_tflops",
                                             "ref_tflops", "floor_read_us", "floor_read_pct_copy",
                                             "memory_bound"};
        csv_report *m = bench_csv_open(out_dir, "bench_mla.csv", header, 14);
        const bench_shapes grid = mla_grid();
        double worst = bench_mla(inv, ref, &o, shapes->n ? shapes : &grid, copy_gbs, m);
        bench_csv_close(m);
        size_t n = strlen(summary);
        if (worst >= 0.0)
            snprintf(summary + n, sizeof summary - n,
                     "; MLA decode lowest share of copy on the memory-bound shapes %.1f%%%s", worst,
                     shapes->n ? " (the --shape rows)" : "");
        else
            snprintf(summary + n, sizeof summary - n, "; MLA decode: no memory-bound 16-head row");
    }
    if (!only || strcmp(only, "moe") == 0) {
        static const char *const header[] = {"D", "I", "E", "k", "tokens", "experts_touched", "inv_us", "ref_us",
                                             "inv_gbs", "ref_gbs", "inv_pct_copy", "ref_pct_copy",
                                             "ratio_inv_over_ref"};
        csv_report *m = bench_csv_open(out_dir, "bench_moe.csv", header, 13);
        bench_moe(inv, ref, &o, copy_gbs, m);
        bench_csv_close(m);
    }
    if (!only || strcmp(only, "decode") == 0) {
        // End to end on DeepSeek-V2-Lite's dimensions (4 of its 27 layers), and on V3's (3 of its
        // 61 layers: 51 GB of weights, so the 128-head MLA kernels and 256 experts run).
        static const int v2_lite_batches[] = {1, 32, 128}, v3_batches[] = {1, 32};
        static const bench_decode_rows rows[] = {{"v2-lite", v2_lite_batches, 3, 4096},
                                                 {"v3", v3_batches, 2, 4096}};
        const bench_decode_rows *chosen = rows;
        int n_chosen = 2;
        if (model) {
            while (chosen < rows + 2 && strcmp(chosen->model, model) != 0) chosen++;
            if (chosen == rows + 2) invar_die(INVAR_EXIT_INPUT, "bench: --model %s: no such decode model", model);
            n_chosen = 1;
        }
        if (ceiling.peak_tflops <= 0.0) {
            static const char *const header[] = {"N", "K", "M", "ref_us", "ref_tflops"};
            csv_report *p = bench_csv_open(out_dir, "bench_peak.csv", header, 5);
            ceiling.peak_tflops = bench_flop_peak(ref, &o, p);
            bench_csv_close(p);
        }
        bench_decode("cuda", chosen, n_chosen, 128, quick ? 16 : 64, profile, &ceiling, out_dir);
    }
    if ((!only || strcmp(only, "tp") == 0) && bench_tp(quick, profile, out_dir)) {
        size_t n = strlen(summary);
        snprintf(summary + n, sizeof summary - n, "; tensor-parallel rows in bench_tp_*.csv");
    }

    printf("\nsummary: copy %.0f GB/s%s; CSVs in %s\n", copy_gbs, summary, out_dir);
    inv->destroy(inv);
    ref->destroy(ref);
    bench_meta_write(out_dir, "cuda", argc, argv, true);
    return 0;
}
#else
int bench_cuda(const char *out_dir, bool quick, const char *only, const char *model, bool profile,
               const bench_shapes *shapes, int argc, char **argv) {
    (void)out_dir;
    (void)model;
    (void)argc;
    (void)argv;
    (void)quick;
    (void)only;
    (void)profile;
    (void)shapes;
    return INVAR_EXIT_INPUT;  // unreachable: without CUDA no device is available
}
#endif
