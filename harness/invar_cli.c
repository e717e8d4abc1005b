// harness/invar_cli.c — the invar commands, one table (harness/invar_lib.h): main.c's program,
// and libinvar.so's invar_cli for programs that link it.
#include "invar_lib.h"

#include <stdio.h>     // printf
#include <string.h>    // strcmp

#include "../common/source_id.h"  // invar_source_id, invar_build_defines
#include "cli_args.h"  // cli_dispatch, cli_subcommand
#include "commands.h"  // cmd_run, cmd_kernels, cmd_bench, cmd_model, cmd_report,
                       // cmd_serve, cmd_probe

int invar_cli(int argc, char **argv) {
    static const cli_subcommand commands[] = {
        {"run", cmd_run, "run a case file's matrix: bs=1 vs bs=N, bitwise (--case FILE [--out DIR])"},
        {"kernels", cmd_kernels, "check every registered op for batch invariance and accuracy"},
        {"bench", cmd_bench, "benchmark invariant kernels against the reference set"},
        {"model", cmd_model, "model utilities: write a synthetic checkpoint, check a checkpoint"},
        {"report", cmd_report, "reports: render JUnit/Markdown, redraw plots, diff against a baseline"},
        {"serve", cmd_serve, "an OpenAI-compatible server over invar's engine (--model M --kernel-set S)"},
        {"probe", cmd_probe, "test a running OpenAI-compatible server: bs=1 vs bs=N, bitwise (--url URL --case FILE)"},
        {0},
    };
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        const char *defines = invar_build_defines();
        if (strcmp(defines, "-") == 0) printf("invar %s\n", invar_source_id());
        else printf("invar %s built with %s\n", invar_source_id(), defines);
        return 0;
    }
    return cli_dispatch("invar", commands, argc, argv);
}
