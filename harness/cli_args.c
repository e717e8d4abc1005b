// harness/cli_args.c — the argument parser of every invar command (harness/cli_args.h).
#include "cli_args.h"

#include <ctype.h>     // isdigit, isxdigit
#include <errno.h>     // errno, ERANGE
#include <inttypes.h>  // PRIu64
#include <limits.h>    // INT_MIN, INT_MAX
#include <math.h>      // isinf
#include <stdarg.h>    // va_list, va_start, va_end
#include <stdio.h>     // fprintf, fputs, vfprintf, vsnprintf, snprintf
#include <stdlib.h>    // strtol, strtoull, strtod
#include <string.h>    // strcmp, strncmp, strlen, strchr

#include "../common/check.h"  // invar_die, INVAR_EXIT_INPUT

// Entries of one table: seen-flags are tracked on the stack, so a table has a fixed ceiling.
#define CLI_MAX_ENTRIES 32
#define HELP_WIDTH 80       // the synopsis wraps before this column
#define HELP_MAX_COLUMN 28  // a longer flag column puts its help on the next line

static bool is_positional(const cli_flag *f) { return f->name[0] != '-'; }

static int count_entries(const cli_command *cmd) {
    int n = 0;
    while (cmd->flags[n].name) n++;
    if (n > CLI_MAX_ENTRIES)
        invar_die(INVAR_EXIT_INPUT, "%s: %d flags, more than the parser's %d", cmd->name, n,
                  CLI_MAX_ENTRIES);
    return n;
}

__attribute__((format(printf, 3, 4)))
static cli_status bad(char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return CLI_BAD_USAGE;
}

static const char *metavar(const cli_flag *f) {
    return f->metavar ? f->metavar : f->choices ? f->choices : "N";
}

// Whether `value` is one of the '|'-separated choices.
static bool among(const char *choices, const char *value) {
    size_t len = strlen(value);
    for (const char *c = choices;;) {
        const char *end = strchr(c, '|');
        size_t clen = end ? (size_t)(end - c) : strlen(c);
        if (clen == len && strncmp(c, value, len) == 0) return true;
        if (!end) return false;
        c = end + 1;
    }
}

static bool unbounded(const cli_flag *f) { return f->min == 0 && f->max == 0; }

static cli_status out_of_range(const cli_flag *f, const char *as, const char *value, char *err,
                               size_t len) {
    if (isinf(f->max)) return bad(err, len, "%s: %s is out of range (>= %g)", as, value, f->min);
    return bad(err, len, "%s: %s is out of range [%g, %g]", as, value, f->min, f->max);
}

// Stores one value of entry f, written on the command line as `as` ("-q" or "--quiet"); `first`
// is the value it was given before (NULL: none).
static cli_status store(const cli_flag *f, const char *as, const char *value, const char *first,
                        char *err, size_t len) {
    if (first && f->kind != CLI_STRINGS)
        return bad(err, len, "%s: given twice ('%s', then '%s'): give it once", as, first, value);
    if (value[0] == '\0') return bad(err, len, "%s: empty value", as);
    char *end;
    errno = 0;
    switch (f->kind) {
    case CLI_STRING:
        if (f->choices && !among(f->choices, value))
            return bad(err, len, "%s: '%s' is not one of %s", as, value, f->choices);
        *f->to.string = value;
        break;
    case CLI_STRINGS:
        if (f->to.strings->n >= f->to.strings->max)
            return bad(err, len, "%s: given more than %d times", as, f->to.strings->max);
        f->to.strings->item[f->to.strings->n++] = value;
        break;
    case CLI_INT: {
        long v = strtol(value, &end, 10);
        if (end == value || *end != '\0')
            return bad(err, len, "%s: '%s' is not an integer", as, value);
        if (errno == ERANGE || v < INT_MIN || v > INT_MAX ||
            (!unbounded(f) && (v < f->min || v > f->max)))
            return out_of_range(f, as, value, err, len);
        *f->to.integer = (int)v;
        break;
    }
    case CLI_U64: {
        // Digits first: strtoull would take a sign (and wrap "-1") or leading blanks.
        bool hex = value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
        bool digit_first = hex ? isxdigit((unsigned char)value[2]) : isdigit((unsigned char)value[0]);
        unsigned long long v = digit_first ? strtoull(value, &end, hex ? 16 : 10) : 0;
        if (!digit_first || *end != '\0')
            return bad(err, len, "%s: '%s' is not an unsigned integer (decimal or 0x hex)", as,
                       value);
        if (errno == ERANGE) return bad(err, len, "%s: %s is out of range (64 bits)", as, value);
        *f->to.u64 = (uint64_t)v;
        break;
    }
    case CLI_DOUBLE: {
        double v = strtod(value, &end);
        if (end == value || *end != '\0')
            return bad(err, len, "%s: '%s' is not a number", as, value);
        if (!unbounded(f) && !(v >= f->min && v <= f->max))  // NaN is out of every range
            return out_of_range(f, as, value, err, len);
        *f->to.real = v;
        break;
    }
    case CLI_SWITCH:
        return bad(err, len, "%s: takes no value", as);
    }
    return CLI_PARSED;
}

// The entry for flag `arg` (its first name_len characters: "--out" of "--out=DIR"), or -1.
static int find_flag(const cli_flag *flags, int n, const char *arg, size_t name_len) {
    for (int k = 0; k < n; k++) {
        const cli_flag *f = &flags[k];
        if (is_positional(f)) continue;
        if (name_len == 2 && arg[1] != '-' && f->short_name == arg[1]) return k;
        if (strncmp(f->name, arg, name_len) == 0 && f->name[name_len] == '\0') return k;
    }
    return -1;
}

// The positional entry the next positional argument fills: the first one not given yet, or a
// repeatable one.
static int next_positional(const cli_flag *flags, int n, const char *const *given) {
    for (int k = 0; k < n; k++)
        if (is_positional(&flags[k]) && (!given[k] || flags[k].kind == CLI_STRINGS)) return k;
    return -1;
}

cli_status cli_parse_quiet(const cli_command *cmd, int argc, char **argv, char *err,
                           size_t err_len) {
    int n = count_entries(cmd);
    const char *given[CLI_MAX_ENTRIES] = {0};  // each entry's first value (a switch: its name)
    bool only_positional = false;
    err[0] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!only_positional && strcmp(arg, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (only_positional || arg[0] != '-' || arg[1] == '\0') {  // "-" is a name (stdin)
            int k = next_positional(cmd->flags, n, given);
            if (k < 0) return bad(err, err_len, "'%s': unexpected argument", arg);
            cli_status s = store(&cmd->flags[k], cmd->flags[k].name, arg, NULL, err, err_len);
            if (s != CLI_PARSED) return s;
            given[k] = arg;
            continue;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return CLI_HELP_ASKED;
        const char *eq = arg[1] == '-' ? strchr(arg, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        int k = find_flag(cmd->flags, n, arg, name_len);
        if (k < 0) return bad(err, err_len, "%.*s: unknown flag", (int)name_len, arg);
        const cli_flag *f = &cmd->flags[k];
        char as[64];
        snprintf(as, sizeof as, "%.*s", (int)name_len, arg);
        if (f->kind == CLI_SWITCH) {
            if (eq) return bad(err, err_len, "%s: takes no value", as);
            *f->to.on = true;
            given[k] = arg;
            continue;
        }
        const char *value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!value) return bad(err, err_len, "%s: needs a value (%s)", as, metavar(f));
        cli_status s = store(f, as, value, given[k], err, err_len);
        if (s != CLI_PARSED) return s;
        given[k] = value;
    }
    for (int k = 0; k < n; k++)
        if (cmd->flags[k].required && !given[k])
            return bad(err, err_len, "%s: %s", cmd->flags[k].name,
                       is_positional(&cmd->flags[k]) ? "missing" : "required");
    return CLI_PARSED;
}

static void hint(const char *name) { fprintf(stderr, "run '%s --help' for its usage\n", name); }

int cli_parse(const cli_command *cmd, int argc, char **argv) {
    char err[512];
    switch (cli_parse_quiet(cmd, argc, argv, err, sizeof err)) {
    case CLI_PARSED:
        return CLI_GO_ON;
    case CLI_HELP_ASKED:
        cli_help(cmd, stdout);
        return 0;
    case CLI_BAD_USAGE:
        break;
    }
    fprintf(stderr, "%s: %s\n", cmd->name, err);
    hint(cmd->name);
    return INVAR_EXIT_INPUT;
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    hint(cmd->name);
    return INVAR_EXIT_INPUT;
}

// --- help ------------------------------------------------------------------------------------

// "-q, --quiet", "--out DIR" or "DIR": the flag column of the help.
static int flag_column(const cli_flag *f, char *buf, size_t len) {
    const char *value = f->kind == CLI_SWITCH || is_positional(f) ? "" : metavar(f);
    int n;
    if (f->short_name)
        n = snprintf(buf, len, "-%c, %s%s%s", f->short_name, f->name, value[0] ? " " : "", value);
    else
        n = snprintf(buf, len, "%s%s%s", f->name, value[0] ? " " : "", value);
    return n < (int)len ? n : (int)len - 1;
}

// "[--out DIR]", "--case FILE", "[-q]", "DIR": one item of the generated synopsis.
static int synopsis_item(const cli_flag *f, char *buf, size_t len) {
    char inner[128];
    if (f->kind == CLI_SWITCH && f->short_name) snprintf(inner, sizeof inner, "-%c", f->short_name);
    else if (f->kind == CLI_SWITCH || is_positional(f)) snprintf(inner, sizeof inner, "%s", f->name);
    else snprintf(inner, sizeof inner, "%s %s", f->name, metavar(f));
    int n = snprintf(buf, len, f->required ? "%s%s" : "[%s]%s", inner,
                     f->kind == CLI_STRINGS ? "..." : "");
    return n < (int)len ? n : (int)len - 1;
}

void cli_synopsis(const cli_command *cmd, FILE *f) {
    if (cmd->usage) {
        fprintf(f, "usage: %s\n", cmd->usage);
        return;
    }
    int indent = (int)strlen("usage: ") + (int)strlen(cmd->name);
    int at = fprintf(f, "usage: %s", cmd->name);
    for (const cli_flag *e = cmd->flags; e->name; e++) {
        char item[160];
        int len = synopsis_item(e, item, sizeof item);
        if (at + 1 + len >= HELP_WIDTH) at = fprintf(f, "\n%*s", indent, "") - 1;
        at += fprintf(f, " %s", item);
    }
    fputc('\n', f);
}

static void print_default(const cli_flag *e, FILE *f) {
    switch (e->kind) {
    case CLI_INT: fprintf(f, " (default %d)", *e->to.integer); break;
    case CLI_U64: fprintf(f, " (default %" PRIu64 ")", *e->to.u64); break;
    case CLI_DOUBLE: fprintf(f, " (default %g)", *e->to.real); break;
    case CLI_STRING:
        if (*e->to.string) fprintf(f, " (default %s)", *e->to.string);
        break;
    case CLI_STRINGS:
    case CLI_SWITCH: break;
    }
}

// One flag's lines: the flag column, then its help, each of its lines in the same column.
static void print_flag(const cli_flag *e, int column, FILE *f) {
    char left[160];
    int len = flag_column(e, left, sizeof left);
    fprintf(f, "  %s", left);
    if (len > column) fprintf(f, "\n%*s", column + 2, "");
    else fprintf(f, "%*s", column - len, "");
    const char *text = e->help ? e->help : "";
    for (const char *nl; (nl = strchr(text, '\n')); text = nl + 1)
        fprintf(f, "  %.*s\n%*s", (int)(nl - text), text, column + 2, "");
    fprintf(f, "  %s", text);
    if (e->show_default) print_default(e, f);
    fputc('\n', f);
}

void cli_help(const cli_command *cmd, FILE *f) {
    cli_synopsis(cmd, f);
    if (cmd->about) fprintf(f, "\n%s\n", cmd->about);
    static const cli_flag help = {.name = "--help", .short_name = 'h', .kind = CLI_SWITCH,
                                  .help = "print this help"};
    int column = (int)strlen("-h, --help");
    for (const cli_flag *e = cmd->flags; e->name; e++) {
        char left[160];
        int len = flag_column(e, left, sizeof left);
        if (len > column && len <= HELP_MAX_COLUMN) column = len;
    }
    fputc('\n', f);
    for (const cli_flag *e = cmd->flags; e->name; e++) print_flag(e, column, f);
    print_flag(&help, column, f);
    if (cmd->epilogue) fprintf(f, "\n%s\n", cmd->epilogue);
    if (cmd->more_help) cmd->more_help(f);
}

// --- subcommands -----------------------------------------------------------------------------

static void list_subcommands(const char *name, const cli_subcommand *subs, FILE *f) {
    fprintf(f, "usage: %s COMMAND [options]\n\ncommands:\n", name);
    for (const cli_subcommand *s = subs; s->name; s++) fprintf(f, "  %-8s %s\n", s->name, s->help);
    fprintf(f, "\n'%s COMMAND --help' for a command's options.\n", name);
}

int cli_dispatch(const char *name, const cli_subcommand *subs, int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "%s: COMMAND: missing\n", name);
        list_subcommands(name, subs, stderr);
        return INVAR_EXIT_INPUT;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        list_subcommands(name, subs, stdout);
        return 0;
    }
    for (const cli_subcommand *s = subs; s->name; s++)
        if (strcmp(argv[1], s->name) == 0) return s->run(argc - 1, argv + 1);
    fprintf(stderr, "%s: '%s': unknown command\n", name, argv[1]);
    hint(name);
    return INVAR_EXIT_INPUT;
}
