// harness/cli_args.c — single-valued flags (harness/cli_args.h).
#include "cli_args.h"

#include <stdio.h>  // fprintf, stderr

bool cli_take_once(const char *command, const char *flag, const char **slot, const char *value) {
    if (*slot) {
        fprintf(stderr, "%s: %s given twice ('%s', then '%s'): give it once\n", command, flag,
                *slot, value);
        return false;
    }
    if (value[0] == '\0') {
        fprintf(stderr, "%s: %s: empty value\n", command, flag);
        return false;
    }
    *slot = value;
    return true;
}
