// harness/run/run_args.h — the options of `invar run`, parsed from the command line or from the
// command line an interrupted run recorded in DIR/meta.csv (`invar run --resume DIR`), by the
// same table (harness/cli_args.h), so a resumed run means what its first start meant.
#ifndef INVAR_HARNESS_RUN_ARGS_H
#define INVAR_HARNESS_RUN_ARGS_H

#include <stdbool.h>  // bool
#include <stddef.h>   // size_t

#include "../../reports/shard_id.h" // shard_id

// Each report kind has its own default directory (`invar kernels`: build/report/kernels), so
// one command never overwrites or renders another's files.
#define RUN_DEFAULT_OUT "build/report/run"
#define RUN_MAX_ARGS 64  // arguments of a command line read back from meta.csv

typedef struct {
    const char *case_path, *out_dir, *backend, *model, *kernel_set, *resume;  // NULL: not given
    const char *cuda_graphs; // --cuda-graphs on|off; NULL: the case's cuda_graphs axis
    const char *shard_text;  // --shard as given; NULL: the whole matrix
    shard_id shard;          // parsed from shard_text; count 0 without --shard
    const char *only;        // --only GLOB: the configs whose names match; NULL: every config
    int request;             // --request N: only request N is compared; -1: every request
    bool quiet, hash_weights;
} run_args;

// The command line of `invar run` (argv[0] is "run"): CLI_GO_ON (harness/cli_args.h) when the
// run goes on, else the exit code after printing the help (0) or the error (2). A --case or a
// --resume is required, and --resume takes nothing else but -q.
int run_args_parse(int argc, char **argv, run_args *a);

// A command line as run_meta writes it (arguments separated by spaces, odd ones in single
// quotes, a quote inside as '\''), split in place into argv (at most RUN_MAX_ARGS) and parsed
// by the same table. It must be an `invar run --case` command line (not a --resume one).
// Returns false with the reason in err.
bool run_args_from_command_line(char *line, char **argv, run_args *a, char *err, size_t err_len);

#endif
