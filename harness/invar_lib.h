// harness/invar_lib.h — what libinvar.so offers a program that links it (the Python bridge,
// python/invar_bridge): the command line in-process, beside kernels/invar_plugin.h's
// invar_plugin_register.
#ifndef INVAR_HARNESS_INVAR_LIB_H
#define INVAR_HARNESS_INVAR_LIB_H

#include "../kernels/invar_plugin.h"  // invar_plugin, invar_plugin_register

// `invar ARGS...` in this process: argv[0] is the program's name, argv[1] the command. Returns
// the command's exit code; a fatal error (bad input, a failed system call) still exits.
int invar_cli(int argc, char **argv);

#endif
