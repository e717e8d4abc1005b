// tests/test_cli_args.c — the argument parser of every command (harness/cli_args.h) on a table
// of its own: each kind of value lands where the table says, every shared rule is refused
// with the flag named, and the generated --help holds every flag, its value and its help.
#include <stdarg.h>                  // cmocka
#include <stddef.h>                  // cmocka
#include <stdint.h>                  // cmocka, uint64_t
#include <setjmp.h>                  // cmocka
#include <cmocka.h>                  // cmocka

#include <math.h>                    // INFINITY
#include <stdio.h>                   // open_memstream, fclose, FILE
#include <stdlib.h>                  // free
#include <string.h>                  // strstr, strcmp

#include "../harness/cli_args.h"     // cli_parse_quiet, cli_parse, cli_help, cli_dispatch

// Where a parse of the test table puts its values.
typedef struct {
    const char *out, *device, *tags[3], *src, *dst;
    cli_list tag_list;
    int threads;
    uint64_t seed;
    double threshold;
    bool quick;
} values;

#define TEST_FLAGS 10

// The test table: every kind, a short alias, choices, a range, required entries, positionals.
static cli_command test_command(values *v, cli_flag flags[TEST_FLAGS]) {
    *v = (values){.threads = 4, .seed = 7, .threshold = 5.0};
    v->tag_list = (cli_list){.item = v->tags, .max = 3};
    const cli_flag table[TEST_FLAGS] = {
        {.name = "SRC", .to.string = &v->src, .required = true, .help = "the source"},
        {.name = "DST", .to.string = &v->dst, .help = "the destination"},
        {.name = "--out", .metavar = "DIR", .to.string = &v->out, .required = true,
         .help = "where it goes\nsecond line of help"},
        {.name = "--device", .choices = "cpu|cuda", .to.string = &v->device,
         .help = "which device"},
        {.name = "--tag", .metavar = "T", .kind = CLI_STRINGS, .to.strings = &v->tag_list,
         .help = "a tag, again and again"},
        {.name = "--threads", .kind = CLI_INT, .to.integer = &v->threads, .min = 1, .max = 64,
         .show_default = true, .help = "worker threads"},
        {.name = "--seed", .kind = CLI_U64, .to.u64 = &v->seed, .help = "the seed"},
        {.name = "--threshold", .metavar = "PERCENT", .kind = CLI_DOUBLE, .to.real = &v->threshold,
         .min = 0, .max = INFINITY, .show_default = true, .help = "how much slower"},
        {.name = "--quick", .short_name = 'k', .kind = CLI_SWITCH, .to.on = &v->quick,
         .help = "fewer repetitions"},
        {0},
    };
    memcpy(flags, table, sizeof table);
    return (cli_command){.name = "invar test", .about = "ABOUT PROSE", .flags = flags,
                         .epilogue = "EPILOGUE PROSE"};
}

// Parses NULL-terminated arguments after the command word; returns the status, err filled.
static cli_status parse(values *v, char *err, size_t len, ...) {
    char *argv[32] = {"test"};
    int argc = 1;
    va_list ap;
    va_start(ap, len);
    for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
    va_end(ap);
    cli_flag flags[TEST_FLAGS];
    cli_command cmd = test_command(v, flags);
    return cli_parse_quiet(&cmd, argc, argv, err, len);
}

// Expects a usage error whose message is exactly `want`.
#define REFUSED(want, ...)                                                       \
    do {                                                                         \
        values v;                                                                \
        char err[256];                                                           \
        assert_int_equal(parse(&v, err, sizeof err, __VA_ARGS__, (char *)NULL),  \
                         CLI_BAD_USAGE);                                         \
        assert_string_equal(err, want);                                          \
    } while (0)

static void every_kind_lands_in_its_place(void **state) {
    (void)state;
    values v;
    char err[256];
    assert_int_equal(parse(&v, err, sizeof err, "a", "--out", "o", "--device", "cuda", "--tag",
                           "x", "--tag", "y", "--threads", "64", "--seed", "0xfF", "--threshold",
                           "2.5", "-k", "b", (char *)NULL),
                     CLI_PARSED);
    assert_string_equal(v.src, "a");
    assert_string_equal(v.dst, "b");
    assert_string_equal(v.out, "o");
    assert_string_equal(v.device, "cuda");
    assert_int_equal(v.tag_list.n, 2);
    assert_string_equal(v.tags[0], "x");
    assert_string_equal(v.tags[1], "y");
    assert_int_equal(v.threads, 64);
    assert_int_equal(v.seed, 255);
    assert_true(v.threshold == 2.5);
    assert_true(v.quick);
}

static void defaults_stay_when_not_given(void **state) {
    (void)state;
    values v;
    char err[256];
    assert_int_equal(parse(&v, err, sizeof err, "a", "--out", "o", (char *)NULL), CLI_PARSED);
    assert_null(v.dst);
    assert_null(v.device);
    assert_int_equal(v.tag_list.n, 0);
    assert_int_equal(v.threads, 4);
    assert_int_equal(v.seed, 7);
    assert_true(v.threshold == 5.0);
    assert_false(v.quick);
}

static void equals_form_and_double_dash(void **state) {
    (void)state;
    values v;
    char err[256];
    assert_int_equal(parse(&v, err, sizeof err, "--out=o=p", "--seed=18446744073709551615",
                           "--quick", "--quick", "--", "-a", "--b", (char *)NULL),
                     CLI_PARSED);
    assert_string_equal(v.out, "o=p");
    assert_true(v.seed == UINT64_MAX);
    assert_string_equal(v.src, "-a");
    assert_string_equal(v.dst, "--b");
    // The value is the next argument whatever it looks like, and "-" is a name.
    assert_int_equal(parse(&v, err, sizeof err, "-", "--out", "--quick", (char *)NULL),
                     CLI_PARSED);
    assert_string_equal(v.src, "-");
    assert_string_equal(v.out, "--quick");
    assert_false(v.quick);
}

static void help_is_asked_anywhere(void **state) {
    (void)state;
    values v;
    char err[256];
    assert_int_equal(parse(&v, err, sizeof err, "--help", (char *)NULL), CLI_HELP_ASKED);
    assert_int_equal(parse(&v, err, sizeof err, "a", "-h", (char *)NULL), CLI_HELP_ASKED);
}

static void unknown_flags(void **state) {
    (void)state;
    REFUSED("--nope: unknown flag", "a", "--out", "o", "--nope");
    REFUSED("--nope: unknown flag", "--nope=1");
    REFUSED("-x: unknown flag", "-x");
    REFUSED("-kk: unknown flag", "-kk");
}

static void missing_values(void **state) {
    (void)state;
    REFUSED("--out: needs a value (DIR)", "a", "--out");
    REFUSED("--device: needs a value (cpu|cuda)", "--device");
    REFUSED("--threads: needs a value (N)", "--threads");
}

static void single_values_given_twice(void **state) {
    (void)state;
    REFUSED("--out: given twice ('o', then 'p'): give it once", "--out", "o", "--out=p");
    REFUSED("--threads: given twice ('2', then '2'): give it once", "--threads", "2",
            "--threads", "2");
    REFUSED("--tag: given more than 3 times", "--tag", "1", "--tag", "2", "--tag", "3",
            "--tag", "4");
}

static void empty_values(void **state) {
    (void)state;
    REFUSED("--out: empty value", "a", "--out", "");
    REFUSED("--out: empty value", "a", "--out=");
    REFUSED("--tag: empty value", "--tag", "");
    REFUSED("SRC: empty value", "");
    REFUSED("--seed: empty value", "--seed", "");
}

static void numbers_that_do_not_parse(void **state) {
    (void)state;
    REFUSED("--threads: 'x' is not an integer", "--threads", "x");
    REFUSED("--threads: '4.0' is not an integer", "--threads", "4.0");
    REFUSED("--seed: '-1' is not an unsigned integer (decimal or 0x hex)", "--seed", "-1");
    REFUSED("--seed: ' 1' is not an unsigned integer (decimal or 0x hex)", "--seed", " 1");
    REFUSED("--seed: '0x' is not an unsigned integer (decimal or 0x hex)", "--seed", "0x");
    REFUSED("--threshold: '5%' is not a number", "--threshold", "5%");
    REFUSED("--quick: takes no value", "--quick=yes");
}

static void numbers_out_of_range(void **state) {
    (void)state;
    REFUSED("--threads: 0 is out of range [1, 64]", "--threads", "0");
    REFUSED("--threads: 65 is out of range [1, 64]", "--threads", "65");
    REFUSED("--threads: 99999999999 is out of range [1, 64]", "--threads", "99999999999");
    REFUSED("--seed: 18446744073709551616 is out of range (64 bits)", "--seed",
            "18446744073709551616");
    REFUSED("--threshold: -1 is out of range (>= 0)", "--threshold", "-1");
    REFUSED("--threshold: nan is out of range (>= 0)", "--threshold", "nan");
}

static void values_outside_the_choices(void **state) {
    (void)state;
    REFUSED("--device: 'gpu' is not one of cpu|cuda", "--device", "gpu");
    REFUSED("--device: 'cp' is not one of cpu|cuda", "--device", "cp");
    REFUSED("--device: 'cpu|cuda' is not one of cpu|cuda", "--device", "cpu|cuda");
}

static void positionals_stray_and_missing(void **state) {
    (void)state;
    REFUSED("'c': unexpected argument", "a", "b", "c", "--out", "o");
    REFUSED("SRC: missing", "--out", "o");
    REFUSED("--out: required", "a");
}

// The command-line entry point: exit codes, and CLI_GO_ON when the command goes on.
static void parse_returns_exit_codes(void **state) {
    (void)state;
    values v;
    cli_flag flags[TEST_FLAGS];
    cli_command cmd = test_command(&v, flags);
    char *ok[] = {"test", "a", "--out", "o"}, *bad[] = {"test", "--nope"};
    assert_int_equal(cli_parse(&cmd, 4, ok), CLI_GO_ON);
    assert_int_equal(cli_parse(&cmd, 2, bad), 2);
}

static char *help_text(void) {
    values v;
    cli_flag flags[TEST_FLAGS];
    cli_command cmd = test_command(&v, flags);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    cli_help(&cmd, f);
    fclose(f);
    return text;
}

static void help_holds_every_flag(void **state) {
    (void)state;
    char *text = help_text();
    static const char *const want[] = {
        "usage: invar test SRC [DST] --out DIR [--device cpu|cuda] [--tag T]...",
        "ABOUT PROSE", "EPILOGUE PROSE",
        "  SRC ", "the source", "  DST ", "the destination",
        "  --out DIR ", "where it goes\n", "second line of help\n",
        "  --device cpu|cuda ", "which device",
        "  --tag T ", "a tag, again and again",
        "  --threads N ", "worker threads (default 4)",
        "  --seed N ", "the seed",
        "  --threshold PERCENT ", "how much slower (default 5)",
        "  -k, --quick ", "fewer repetitions",
        "  -h, --help ",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(text, want[i])) fail_msg("the help lacks '%s':\n%s", want[i], text);
    // Continuation lines sit in the help column: under "where it goes".
    const char *first = strstr(text, "where it goes\n");
    const char *line = strchr(first, '\n') + 1;
    const char *start = first;
    while (start > text && start[-1] != '\n') start--;
    assert_int_equal(strspn(line, " "), first - start);
    free(text);
}

static int sub_ran(int argc, char **argv) {
    assert_string_equal(argv[0], "sub");
    return argc == 2 && strcmp(argv[1], "x") == 0 ? 7 : 8;
}

static void dispatch_runs_the_named_subcommand(void **state) {
    (void)state;
    static const cli_subcommand subs[] = {{"sub", sub_ran, "a subcommand"}, {0}};
    char *run[] = {"test", "sub", "x"}, *unknown[] = {"test", "nope"}, *none[] = {"test"};
    assert_int_equal(cli_dispatch("invar test", subs, 3, run), 7);
    assert_int_equal(cli_dispatch("invar test", subs, 2, unknown), 2);
    assert_int_equal(cli_dispatch("invar test", subs, 1, none), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kind_lands_in_its_place),
        cmocka_unit_test(defaults_stay_when_not_given),
        cmocka_unit_test(equals_form_and_double_dash),
        cmocka_unit_test(help_is_asked_anywhere),
        cmocka_unit_test(unknown_flags),
        cmocka_unit_test(missing_values),
        cmocka_unit_test(single_values_given_twice),
        cmocka_unit_test(empty_values),
        cmocka_unit_test(numbers_that_do_not_parse),
        cmocka_unit_test(numbers_out_of_range),
        cmocka_unit_test(values_outside_the_choices),
        cmocka_unit_test(positionals_stray_and_missing),
        cmocka_unit_test(parse_returns_exit_codes),
        cmocka_unit_test(help_holds_every_flag),
        cmocka_unit_test(dispatch_runs_the_named_subcommand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
