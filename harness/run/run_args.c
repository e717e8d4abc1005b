// harness/run/run_args.c — the options of `invar run` (harness/run/run_args.h).
#include "run_args.h"

#include <stdio.h>   // snprintf
#include <string.h>  // memcpy, strcmp

#include "../cli_args.h" // cli_command, cli_flag, cli_parse, cli_parse_quiet, cli_usage_error
#include "resolve.h"   // RESOLVE_BACKEND_ENV
#include "../../reports/shard_id.h" // shard_id_parse

#define RUN_FLAGS 13 // the table's entries, its end included

// The table points into `a`, so it is built for each parse.
static cli_command run_command(run_args *a, cli_flag flags[RUN_FLAGS]) {
    const cli_flag table[RUN_FLAGS] = {
        {.name = "--case", .metavar = "FILE", .to.string = &a->case_path,
         .help = "the case (INI; see cases/ci.ini)"},
        {.name = "--model", .metavar = "NAME|DIR", .to.string = &a->model,
         .help = "run every config with this model: a named config or a\n"
                 "checkpoint directory (config.json + safetensors);\n"
                 "overrides the case's model(s)"},
        {.name = "--kernel-set", .metavar = "SET", .to.string = &a->kernel_set,
         .help = "run every config on this kernel set: invariant, reference,\n"
                 "adversarial, or plugin:PATH (a shared object implementing\n"
                 "kernels/invar_plugin.h); overrides the case's kernel_sets"},
        {.name = "--attention-backend", .metavar = "NAME", .to.string = &a->backend,
         .help = "run every config with this backend (or auto); overrides\n"
                 "the case's attention_backends and " RESOLVE_BACKEND_ENV},
        {.name = "--cuda-graphs", .metavar = "on|off", .to.string = &a->cuda_graphs, .choices = "on|off",
         .help = "run every config with CUDA graphs on (decode steps padded\n"
                 "to buckets and replayed) or off; overrides the case's\n"
                 "cuda_graphs"},
        {.name = "--out", .metavar = "DIR", .to.string = &a->out_dir,
         .help = "reports: DIR/summary.csv, DIR/divergence.csv,\n"
                 "DIR/meta.csv, DIR/junit.xml, DIR/summary.md\n"
                 "(default " RUN_DEFAULT_OUT "; a directory of its own: other\n"
                 "files in it are left alone)"},
        {.name = "--shard", .metavar = "I/N", .to.string = &a->shard_text,
         .help = "run shard I of N (I from 1 to N): a deterministic 1/N of\n"
                 "the configs, the same on every runner, configs that can\n"
                 "share effective settings kept together; merge the shards'\n"
                 "reports with `invar report merge`"},
        {.name = "--only", .metavar = "GLOB", .to.string = &a->only,
         .help = "run only the configs whose names match GLOB (fnmatch:\n"
                 "'cpu/ref*'); a chosen config resolution merged into one\n"
                 "not chosen runs itself"},
        {.name = "--request", .metavar = "N", .kind = CLI_INT, .to.integer = &a->request,
         .min = 0, .max = 1000000,
         .help = "compare only request N (from 0; its bs=1 run, and it inside\n"
                 "every batch, which still holds every request)"},
        {.name = "--resume", .metavar = "DIR", .to.string = &a->resume,
         .help = "continue the interrupted run that writes DIR, with its\n"
                 "options (from DIR/meta.csv), started where it was\n"
                 "started: configs it finished are kept, the others run;\n"
                 "refused if the case file or a checkpoint changed"},
        {.name = "--hash-weights", .kind = CLI_SWITCH, .to.on = &a->hash_weights,
         .help = "also record each checkpoint safetensors file's full\n"
                 "content xxh64 in meta.csv (reads every byte), which\n"
                 "--resume then checks too; without it, size, mtime and\n"
                 "header hash"},
        {.name = "--quiet", .short_name = 'q', .kind = CLI_SWITCH, .to.on = &a->quiet,
         .help = "print only failing and skipped configs, and the totals"},
        {0},
    };
    memcpy(flags, table, sizeof table);
    return (cli_command){
        .name = "invar run",
        .usage = "invar run --case FILE [--model NAME|DIR] [--kernel-set SET]\n"
                 "                 [--attention-backend NAME] [--cuda-graphs on|off] [--out DIR]\n"
                 "                 [--shard I/N] [--only GLOB] [--request N] [--hash-weights] [-q]\n"
                 "       invar run --resume DIR [-q]",
        .about = "Runs every config of the case file's matrix: each prompt alone (bs=1), then all\n"
                 "prompts at each batch size and the largest batch twice, compared bit for bit;\n"
                 "where a request differs, it runs again alone and in that batch through an op\n"
                 "tap, which names the first op whose rows differ.",
        .flags = flags,
        .epilogue = "On a terminal a live line shows config i of N, elapsed time, ETA and the "
                    "phase.\n\nexit: 0 every expectation held, 1 one failed, 2 bad input or usage",
    };
}

// What the table cannot say: one of --case and --resume, --resume with nothing but -q, and
// --shard's I/N (parsed into a->shard; `why` holds its message).
static const char *flags_conflict(run_args *a, char *why, size_t why_len) {
    if (a->resume && (a->case_path || a->backend || a->model || a->kernel_set || a->cuda_graphs || a->out_dir ||
                      a->hash_weights ||
                      a->shard_text || a->only || a->request >= 0))
        return "--resume: takes the run's options from DIR/meta.csv; only -q may be added";
    if (!a->resume && !a->case_path) return "--case: required (or --resume DIR)";
    char bad[256];
    if (a->shard_text && !shard_id_parse(a->shard_text, &a->shard, bad, sizeof bad)) {
        snprintf(why, why_len, "--shard: %s", bad);
        return why;
    }
    return NULL;
}

int run_args_parse(int argc, char **argv, run_args *a) {
    a->request = -1;
    cli_flag flags[RUN_FLAGS];
    cli_command cmd = run_command(a, flags);
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char why[320];
    const char *conflict = flags_conflict(a, why, sizeof why);
    return conflict ? cli_usage_error(&cmd, "%s", conflict) : CLI_GO_ON;
}

// Splits `line` in place into argv; returns argc, or -1 (unbalanced quotes, too many).
static int split_command_line(char *line, char **argv, int max) {
    int argc = 0;
    char *r = line, *w = line;
    while (*r) {
        while (*r == ' ') r++;
        if (!*r) break;
        if (argc == max) return -1;
        argv[argc++] = w;
        bool quoted = false;
        for (; *r && (quoted || *r != ' '); r++) {
            if (*r == '\'') quoted = !quoted;
            else if (*r == '\\' && !quoted && r[1]) *w++ = *++r;
            else *w++ = *r;
        }
        if (quoted) return -1;
        if (*r) r++;
        *w++ = '\0';
    }
    return argc;
}

bool run_args_from_command_line(char *line, char **argv, run_args *a, char *err,
                                size_t err_len) {
    *a = (run_args){.request = -1};
    int argc = split_command_line(line, argv, RUN_MAX_ARGS);
    if (argc < 0) {
        snprintf(err, err_len, "unbalanced quotes, or more than %d arguments", RUN_MAX_ARGS);
        return false;
    }
    if (argc < 1 || strcmp(argv[0], "run") != 0) {
        snprintf(err, err_len, "not an `invar run` command line");
        return false;
    }
    cli_flag flags[RUN_FLAGS];
    cli_command cmd = run_command(a, flags);
    cli_status s = cli_parse_quiet(&cmd, argc, argv, err, err_len);
    if (s == CLI_HELP_ASKED) snprintf(err, err_len, "--help: asks for the help, not a run");
    if (s != CLI_PARSED) return false;
    // A resumed run records no command line of its own, so a --resume here is no run's start.
    char why[320];
    const char *conflict = a->resume ? "--resume: not the command line a run started with"
                                     : flags_conflict(a, why, sizeof why);
    if (conflict) snprintf(err, err_len, "%s", conflict);
    return !conflict;
}
