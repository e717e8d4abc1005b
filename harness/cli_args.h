// harness/cli_args.h — the one argument parser of every invar command. A command declares a
// table of its flags and positional arguments; cli_parse applies the rules they all share and
// prints one error style, "invar COMMAND: FLAG: what is wrong" and a hint to run
// `invar COMMAND --help` (exit 2); --help prints the command's prose around flag lines
// generated from the table, so the two never disagree.
//
// Shared rules: an unknown flag, a flag without its value, a single-valued flag given twice (a
// repeated flag is refused rather than silently keeping one of the two), an empty value
// (`--out ""` is a mistake, not a request for the default), a number that does not parse or is
// out of range, a value outside a flag's choices, a stray or missing positional argument.
// The value of a flag is the next argument whatever it looks like, or follows '=' (--out=DIR);
// after "--" every argument is positional.
#ifndef INVAR_HARNESS_CLI_ARGS_H
#define INVAR_HARNESS_CLI_ARGS_H

#include <stdbool.h>  // bool
#include <stddef.h>   // size_t
#include <stdint.h>   // uint64_t
#include <stdio.h>    // FILE

typedef enum {
    CLI_STRING,   // const char *: at most once, never empty; stays NULL when not given
    CLI_STRINGS,  // cli_list: any number of times up to its max, never empty
    CLI_INT,      // int in [min, max], decimal
    CLI_U64,      // uint64_t, decimal or 0x hex (seeds: the whole range)
    CLI_DOUBLE,   // double in [min, max] (max INFINITY: no upper bound)
    CLI_SWITCH,   // bool set to true; takes no value; repeating it changes nothing
} cli_kind;

// Where a repeatable flag's values go: item[0 .. n), at most max of them.
typedef struct {
    const char **item;
    int n, max;
} cli_list;

typedef struct {
    // "--out"; a name without a leading '-' ("DIR") is a positional argument, filled in the
    // order of the table. NULL ends the table.
    const char *name;
    char short_name;  // 'q' for -q; 0 for none
    cli_kind kind;
    union {  // the member that kind names
        const char **string;
        cli_list *strings;
        int *integer;
        uint64_t *u64;
        double *real;
        bool *on;
    } to;
    const char *metavar;  // the value's name in the help ("DIR"); NULL: the choices, or "N"
    const char *choices;  // "cpu|cuda|all": a CLI_STRING value must be one of them; NULL: any
    double min, max;      // CLI_INT and CLI_DOUBLE: the accepted range, both ends included
    bool required;        // absent is a usage error
    bool show_default;    // the help appends "(default V)" from the value before parsing
    const char *help;     // the help text; '\n' starts another line in the same column
} cli_flag;

typedef struct {
    const char *name;       // "invar report diff": starts every message and the synopsis
    const char *usage;      // synopsis lines after "usage: "; NULL: generated from the table
    const char *about;      // prose between the synopsis and the flag lines; NULL: none
    const cli_flag *flags;  // the table, ended by an entry with a NULL name
    const char *epilogue;   // prose after the flag lines (the exit codes); NULL: none
    void (*more_help)(FILE *f);  // lists known only at run time (ops, named configs), last
} cli_command;

typedef enum {
    CLI_PARSED,     // every value is stored: the command goes on
    CLI_HELP_ASKED, // -h or --help
    CLI_BAD_USAGE,  // err holds "FLAG: what is wrong"
} cli_status;

// Parses argv[1 .. argc) (argv[0] is the command's own word) into the table's destinations,
// printing nothing. The entry point for command lines read back from files (`run --resume`).
cli_status cli_parse_quiet(const cli_command *cmd, int argc, char **argv, char *err,
                           size_t err_len);

// The command line's entry point: returns CLI_GO_ON when the command goes on; otherwise the
// exit code, after printing the help on stdout (0) or the error and the hint on stderr (2).
enum { CLI_GO_ON = -1 };
int cli_parse(const cli_command *cmd, int argc, char **argv);

// A usage error found after parsing (a value that depends on another, a name looked up in a
// registry), in the same style: prints "NAME: <message>" and the hint, returns 2.
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void cli_help(const cli_command *cmd, FILE *f);
void cli_synopsis(const cli_command *cmd, FILE *f);  // the "usage: ..." lines only

// A command made of subcommands (`invar`, `invar report`, `invar model`).
typedef struct {
    const char *name;                    // NULL ends the list
    int (*run)(int argc, char **argv);   // gets argv from the subcommand's word on
    const char *help;                    // one line in the list
} cli_subcommand;

// Runs the subcommand that argv[1] names; --help lists them on stdout (0); none, or an
// unknown one, is a usage error (2).
int cli_dispatch(const char *name, const cli_subcommand *subs, int argc, char **argv);

#endif
