// harness/commands.h — the invar subcommands. Each returns the process exit code
// (0 all expectations held, 1 an expectation failed, 2 bad input or usage).
#ifndef INVAR_HARNESS_COMMANDS_H
#define INVAR_HARNESS_COMMANDS_H

int cmd_run(int argc, char **argv);      // harness/run/cmd_run.c:      invar run --case FILE
int cmd_kernels(int argc, char **argv);  // harness/check/cmd_kernels.c:  invar kernels
int cmd_bench(int argc, char **argv);    // harness/bench/cmd_bench.c:    invar bench
int cmd_model(int argc, char **argv);    // harness/model/cmd_model.c:    invar model write
int cmd_report(int argc, char **argv);   // harness/report/cmd_report.c:   invar report render|plot|diff
int cmd_serve(int argc, char **argv);    // harness/serve/cmd_serve.c:    invar serve --model M --kernel-set S
int cmd_probe(int argc, char **argv);    // harness/probe/cmd_probe.c:    invar probe --url URL --case FILE

#endif
