// harness/bench/cmd_bench.c — `invar bench` (harness/commands.h): the command line, the CPU
// decode rates, and the CUDA sections through harness/bench/bench.h.
//
//   invar bench [--device cuda] [--out DIR] [--quick] [--only gemm|mla|moe|decode|tp] [--profile]
//               [--shape N:K:M | B:C:H ...] [--model v2-lite|v3]
//
// Without a CUDA device: "SKIP: no CUDA device: <reason>" and exit 0, or exit 2 when
// --device cuda was asked for explicitly (the caller wanted numbers and gets none).
#include <errno.h>               // errno, ERANGE
#include <stdio.h>               // printf, snprintf
#include <stdlib.h>              // strtol
#include <string.h>              // strcmp

#include "bench.h"               // bench_cuda, bench_shapes, BENCH_MLA_BLOCK
#include "bench_decode.h"        // bench_decode
#include "bench_meta.h"          // bench_meta_write
#include "../cli_args.h"         // cli_parse, cli_usage_error
#include "../commands.h"         // cmd_bench
#include "../host.h"             // host_make_dirs, host_copy_bandwidth_gbs
#include "../../common/check.h"  // INVAR_EXIT_INPUT
#include "../../sets/registry.h" // cuda_device_available

#define BENCH_MAX_SHAPE_FLAGS 64  // --shape values

// "A:B:C", three decimal integers, field i in [1, max[i]], into out; false with what is wrong
// in err otherwise. names: the three fields' names for the message.
static bool parse_shape(const char *text, const char *const names[3], const long max[3], int out[3], char *err,
                        size_t err_len) {
    const char *p = text;
    for (int i = 0; i < 3; i++) {
        char *end = NULL;
        errno = 0;
        long v = (*p >= '0' && *p <= '9') ? strtol(p, &end, 10) : -1;
        const bool too_long = errno == ERANGE;  // more digits than a long holds
        if (v < 0 || end == p || (i < 2 ? *end != ':' : *end != '\0')) {
            snprintf(err, err_len, "--shape: '%s' is not %s:%s:%s (three positive integers)", text, names[0],
                     names[1], names[2]);
            return false;
        }
        if (too_long || v < 1 || v > max[i]) {
            if (too_long)
                snprintf(err, err_len, "--shape: '%s': %s is out of range [1, %ld]", text, names[i], max[i]);
            else
                snprintf(err, err_len, "--shape: '%s': %s = %ld is out of range [1, %ld]", text, names[i], v, max[i]);
            return false;
        }
        out[i] = (int)v;
        p = end + 1;
    }
    return true;
}

// The --shape values for section `only` ("gemm" or "mla") into s; false with what is wrong in
// err when one is malformed or the section takes none.
static bool parse_shapes(const cli_list *list, const char *only, bench_shapes *s, char *err, size_t err_len) {
    s->n = 0;
    if (list->n == 0) return true;
    if (!only || (strcmp(only, "gemm") != 0 && strcmp(only, "mla") != 0)) {
        snprintf(err, err_len, "--shape: needs --only gemm (N:K:M) or --only mla (batch:context:heads)");
        return false;
    }
    const bool gemm = strcmp(only, "gemm") == 0;
    static const char *const gemm_names[3] = {"N", "K", "M"}, *const mla_names[3] = {"batch", "context", "heads"};
    static const long gemm_max[3] = {1L << 20, 1L << 20, 1L << 16}, mla_max[3] = {4096, 1L << 20, 1024};
    for (int i = 0; i < list->n; i++) {
        int v[3];
        if (!parse_shape(list->item[i], gemm ? gemm_names : mla_names, gemm ? gemm_max : mla_max, v, err, err_len))
            return false;
        if (!gemm && v[1] % BENCH_MLA_BLOCK != 0) {
            snprintf(err, err_len, "--shape: '%s': context = %d is not a multiple of the %d-position cache block",
                     list->item[i], v[1], BENCH_MLA_BLOCK);
            return false;
        }
        bench_shapes_add(s, v[0], v[1], v[2]);
    }
    return true;
}

int cmd_bench(int argc, char **argv) {
    // NULL: not given; defaults after parsing.
    const char *device = NULL, *out_dir = NULL, *only = NULL, *model = NULL;
    bool quick = false, profile = false;
    const char *shape_items[BENCH_MAX_SHAPE_FLAGS];
    cli_list shape_list = {shape_items, 0, BENCH_MAX_SHAPE_FLAGS};
    const cli_flag flags[] = {
        {.name = "--device", .choices = "cuda|cpu", .to.string = &device,
         .help = "cuda (the default; a SKIP without a device, exit 2 when\n"
                 "asked for) or cpu"},
        {.name = "--out", .metavar = "DIR", .to.string = &out_dir,
         .help = "where bench_gemm.csv, bench_mla.csv, bench_moe.csv,\n"
                 "bench_decode.csv go (default build/bench)"},
        {.name = "--quick", .kind = CLI_SWITCH, .to.on = &quick,
         .help = "fewer repetitions (CI smoke run)"},
        {.name = "--profile", .kind = CLI_SWITCH, .to.on = &profile,
         .help = "after the decode rates, one decode step's time op by op on\n"
                 "each set (bench_decode_ops.csv): where invariance costs time;\n"
                 "in the tp section, TP-size invariance on against off\n"
                 "(bench_tp_size_ops.csv)"},
        {.name = "--only", .choices = "gemm|mla|moe|decode|tp", .to.string = &only,
         .help = "one section (a kernel developer's tuning loop); the copy\n"
                 "ceiling always runs. moe: the routed experts at V2-Lite's\n"
                 "shapes, 1, 32 and 128 tokens (bench_moe.csv). tp: the\n"
                 "all-reduce and decode at T = 1, 2 (needs two GPUs; a SKIP\n"
                 "line otherwise)"},
        {.name = "--shape", .kind = CLI_STRINGS, .to.strings = &shape_list, .metavar = "N:K:M|B:C:H",
         .help = "only this row of the section, repeatable (up to 64, in\n"
                 "order): --only gemm takes N:K:M (e.g. 1536:7168:1), --only\n"
                 "mla batch:context:heads (the context a multiple of 64;\n"
                 "e.g. 32:4096:16); timed as the grid's rows are; a row the\n"
                 "device's memory cannot hold is exit 2"},
        {.name = "--model", .choices = "v2-lite|v3", .to.string = &model,
         .help = "the end-to-end section's one model (its decode, graphs and\n"
                 "prefill rows, --profile's tables): a run that fits a time\n"
                 "limit; with --only decode or no --only"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar bench",
        .about = "cuda: GEMM, MLA decode and the routed experts (moe_experts), invariant CUDA\n"
                 "      kernels vs the reference set (cuBLAS), then end-to-end decode tokens/s\n"
                 "      and the roofline of the v2-lite-shaped model at batch 1, 32, 128 and\n"
                 "      the v3-shaped one at batch 1, 32, each again with CUDA graphs (phase\n"
                 "      decode-graphs: every decode step one graph replay).\n"
                 "cpu:  end-to-end decode tokens/s of the tiny model at batch 1 and 8.",
        .flags = flags,
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    bool explicit_device = device != NULL;
    if (!device) device = "cuda";
    if (!out_dir) out_dir = "build/bench";
    bench_shapes shapes;
    char err[256];
    if (!parse_shapes(&shape_list, only, &shapes, err, sizeof err)) return cli_usage_error(&cmd, "%s", err);
    if (shapes.n && strcmp(device, "cpu") == 0)
        return cli_usage_error(&cmd, "--shape: times the CUDA kernels; --device cpu runs the decode only");
    if (model && only && strcmp(only, "decode") != 0)
        return cli_usage_error(&cmd, "--model: picks the decode section's model; --only %s runs no decode", only);
    if (model && strcmp(device, "cpu") == 0)
        return cli_usage_error(&cmd, "--model: picks the CUDA decode section's model; --device cpu runs the tiny one");
    if (strcmp(device, "cpu") == 0) {
        // Kernel timings are CUDA-event based; on the CPU only the end-to-end number is taken,
        // on the CI-sized model.
        static const int cpu_batches[] = {1, 8};
        host_make_dirs(out_dir);
        const bench_ceiling ceiling = {.copy_gbs = host_copy_bandwidth_gbs((size_t)256 << 20)};
        const bench_decode_rows rows = {"tiny", cpu_batches, 2, 256};
        bench_meta_write(out_dir, "cpu", argc, argv, false);
        bench_decode("cpu", &rows, 1, 64, quick ? 8 : 32, profile, &ceiling, out_dir);
        bench_meta_write(out_dir, "cpu", argc, argv, true);
        return 0;
    }
    char why[256];
    if (!cuda_device_available(why, (int)sizeof why)) {
        printf("SKIP: no CUDA device: %s\n", why);
        return explicit_device ? INVAR_EXIT_INPUT : 0;
    }
    return bench_cuda(out_dir, quick, only, model, profile, &shapes, argc, argv);
}
