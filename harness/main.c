// harness/main.c — the invar program: the commands of harness/invar_cli.c.
#include "invar_lib.h"  // invar_cli

int main(int argc, char **argv) { return invar_cli(argc, argv); }
