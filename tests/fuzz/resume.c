// tests/fuzz/resume.c — fuzz target: what `invar run --resume DIR` reads back from DIR: meta.csv
// (the run's identity: command line, case file and its hash) and summary.csv (the configs that
// finished), matched against the configs of cases/smoke.ini (run from the repository root).
// One input holds both files: meta.csv, a line "%%", summary.csv. meta.csv's command line goes
// through the parse `invar run --resume` makes of it (harness/run/run_args.h).
#include <stdlib.h>                  // calloc, free
#include <string.h>                  // strdup

#include "../../harness/run/case_file.h" // case_file_load
#include "../../harness/run/matrix.h" // matrix_count, matrix_expand
#include "../../harness/run/resolve.h" // resolve_select_backend, resolve_matrix
#include "../../harness/run/resume_match.h" // resume_match_done
#include "../../harness/run/run_args.h" // run_args_from_command_line, RUN_MAX_ARGS
#include "../../reports/csv_read.h"  // csv_table_read
#include "../../reports/run_meta.h"  // run_meta_get
#include "fuzz_input.h"              // fuzz_memfd, fuzz_split, fuzz_require

#define RESUME_CASE "cases/smoke.ini"

static void read_meta(const uint8_t *data, size_t size) {
    char path[64], err[1024];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    csv_table *meta = csv_table_read(path, false, err, sizeof err);
    if (meta) {
        static const char *const keys[] = {"command_line", "case_file", "case_xxh64", "seed"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) (void)run_meta_get(meta, keys[i]);
        char *line = strdup(run_meta_get(meta, "command_line"));
        fuzz_require(line != NULL, "strdup");
        char *argv[RUN_MAX_ARGS];
        run_args args;
        (void)run_args_from_command_line(line, argv, &args, err, sizeof err);
        free(line);
        csv_table_free(meta);
    }
    fuzz_close(fd);
}

static void match_summary(const uint8_t *data, size_t size) {
    char path[64], err[2048];
    case_file *c = calloc(1, sizeof *c);
    fuzz_require(c != NULL, "calloc");
    backend_selection sel;
    if (!case_file_load(RESUME_CASE, c, err, sizeof err) ||
        !resolve_select_backend(c, NULL, &sel, err, sizeof err)) {
        fprintf(stderr, "fuzz harness: %s (run from the repository root)\n", err);
        abort();
    }
    int n = (int)matrix_count(c->axes);
    run_config *configs = calloc((size_t)n, sizeof *configs);
    int *done_row = calloc((size_t)n, sizeof *done_row);
    fuzz_require(configs && done_row, "calloc");
    matrix_expand(c->axes, configs);
    resolved_config *resolved = resolve_matrix(c, configs, n, &sel);

    int fd = fuzz_memfd(data, size, path, sizeof path);
    csv_table *done = csv_table_read(path, true, err, sizeof err);
    if (done) {
        for (int k = 0; k < n; k++) done_row[k] = -1;
        (void)resume_match_done(c, configs, resolved, n, &sel, done, done->nrows, done_row, err,
                                sizeof err);
        csv_table_free(done);
    }
    fuzz_close(fd);
    free(resolved);
    free(done_row);
    free(configs);
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t meta_len, summary_len;
    const uint8_t *summary;
    fuzz_split(data, size, "\n%%\n", &meta_len, &summary, &summary_len);
    read_meta(data, meta_len);
    match_summary(summary, summary_len);
    return 0;
}
