// harness/cli_args.h — the checks every subcommand makes on a flag that takes one value: given
// at most once (a repeated flag is refused rather than silently keeping one of the two) and
// never empty (`--out ""` is a mistake, not a request for the default).
#ifndef INVAR_HARNESS_CLI_ARGS_H
#define INVAR_HARNESS_CLI_ARGS_H

#include <stdbool.h>  // bool

// Stores `value` into *slot when *slot is NULL (the flag not given yet) and value is not empty.
// Otherwise prints "COMMAND: FLAG given twice ('old', then 'new'): give it once" or
// "COMMAND: FLAG: empty value" on stderr and returns false (the caller exits 2).
bool cli_take_once(const char *command, const char *flag, const char **slot, const char *value);

#endif
