// harness/main.c — the invar CLI: dispatches to a subcommand (harness/commands.h).
#include <stdio.h>     // printf, fprintf
#include <string.h>    // strcmp

#include "commands.h"  // cmd_run, cmd_kernels, cmd_bench, cmd_model, cmd_report

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"run", cmd_run, "run a case file's matrix: bs=1 vs bs=N, bitwise (--case FILE [--out DIR])"},
    {"kernels", cmd_kernels, "check every registered op for batch invariance and accuracy"},
    {"bench", cmd_bench, "benchmark invariant kernels against the reference set"},
    {"model", cmd_model, "model utilities: write a synthetic checkpoint"},
    {"report", cmd_report, "reports: render JUnit/Markdown, redraw plots, diff against a baseline"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: invar COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'invar COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "invar: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
