// harness/run/cmd_run.c — `invar run --case FILE [--model NAME|DIR] [--attention-backend NAME]
// [--out DIR] [-q]` and `invar run --resume DIR [-q]`: runs a case file's matrix and writes
// DIR/summary.csv, DIR/divergence.csv and DIR/meta.csv, then renders junit.xml, summary.md and
// the plots from them (harness/commands.h).
//
// Resuming: DIR/meta.csv holds the interrupted run's command line and the case file's xxh64.
// The run is set up again from them (refused when the case file changed), the finished rows
// of summary.csv are kept and matched to the configs (harness/run/resume_match.h: resume_match_done),
// divergence.csv keeps the rows of those configs only, and the other configs run and append.
#include "../commands.h"

#include <errno.h>                   // errno
#include <limits.h>                  // PATH_MAX
#include <stdbool.h>                 // bool
#include <stdio.h>                   // printf, fprintf, snprintf, fopen, fread, fseek, rename
#include <stdlib.h>                  // free, realpath, malloc
#include <string.h>                  // strcmp, strerror, strlen, strdup
#include <unistd.h>                  // isatty, chdir, unlink

#include "../../common/check.h"     // invar_die, invar_calloc
#include "../../common/file_hash.h"  // invar_file_xxh64
#include "../../sets/registry.h"  // cuda_device_describe, cuda_device_count, tp_devices_describe
#include "../../reports/csv_read.h"  // csv_table_read, csv_at, csv_table_free
#include "../../reports/csv_report.h" // csv_report_open, csv_report_row, csv_report_close
#include "../../engine/model_config.h" // model_config_by_name
#include "../../reports/render.h"    // report_render_run
#include "../../reports/report_schema.h" // summary_header, divergence_header, divergence_get
#include "../../reports/run_meta.h"  // run_meta_write, run_meta_get, run_meta_seal
#include "case_file.h"               // case_file_load, case_file_set_model
#include "config_select.h"           // config_select_only
#include "../model/checkpoint_id.h"  // checkpoint_id_compute, checkpoint_id_same
#include "../cli_args.h"             // CLI_GO_ON
#include "../host.h"                 // host_make_dirs
#include "matrix.h"                  // matrix_count, matrix_expand
#include "resolve.h"                 // resolve_select_backend, resolve_matrix
#include "resume_match.h"            // resume_match_done
#include "run_args.h"                // run_args, run_args_parse, run_args_from_command_line
#include "runner.h"                  // runner_run
#include "../shard/shard_plan.h"     // shard_plan, shard_plan_keeps_merges

// ---------------------------------------------------------------------------------------------
// Report files
// ---------------------------------------------------------------------------------------------

static void report_name(char *buf, size_t len, const char *dir, const char *file) {
    if (snprintf(buf, len, "%s/%s", dir, file) >= (int)len)
        invar_die(INVAR_EXIT_INPUT, "report path too long: %s/%s", dir, file);
}

static csv_report *open_report(const char *path, const char *const *header, int ncols) {
    char err[1400];
    csv_report *r = csv_report_open(path, header, ncols, err, sizeof err);
    if (!r) invar_die(INVAR_EXIT_SYSTEM, "%s", err);
    return r;
}

static void write_report_row(csv_report *r, const char *const *fields) {
    char err[1400];
    if (!csv_report_row(r, fields, err, sizeof err)) invar_die(INVAR_EXIT_SYSTEM, "%s", err);
}

static void close_report(csv_report *r) {
    char err[1400];
    if (!csv_report_close(r, err, sizeof err)) invar_die(INVAR_EXIT_SYSTEM, "%s", err);
}

// The identities of the case's checkpoint directories (named configs have none), as meta.csv
// rows "checkpoint:DIR".
typedef struct {
    int n;
    char *key[MATRIX_MAX_VALUES], *value[MATRIX_MAX_VALUES];
} checkpoint_ids;

static void identify_checkpoints(const case_file *c, bool full, checkpoint_ids *ids) {
    const matrix_list *models = &c->axes[matrix_axis_find("models")];
    ids->n = 0;
    for (int m = 0; m < models->n; m++) {
        model_config cfg;
        if (model_config_by_name(models->value[m], &cfg)) continue;
        char err[PATH_MAX + 256];
        size_t key_len = strlen("checkpoint:") + strlen(models->value[m]) + 1;
        char *key = invar_calloc(key_len, 1, "checkpoint key");
        snprintf(key, key_len, "checkpoint:%s", models->value[m]);
        if (!checkpoint_id_compute(models->value[m], full, &ids->value[ids->n], err, sizeof err))
            invar_die(INVAR_EXIT_INPUT, "%s", err);
        ids->key[ids->n++] = key;
    }
}

static void free_checkpoint_ids(checkpoint_ids *ids) {
    for (int i = 0; i < ids->n; i++) {
        free(ids->key[i]);
        free(ids->value[i]);
    }
    ids->n = 0;
}

// ---------------------------------------------------------------------------------------------
// Shards
// ---------------------------------------------------------------------------------------------

// What a shard run records in meta.csv, so `invar report merge` can put its rows back in the
// unsharded run's order and `invar report diff` knows it covers part of the matrix.
typedef struct {
    char shard[32];        // "I/N"
    char *positions;       // "1,4,5": the shard's configs, 1-based positions in the matrix
    char matrix_configs[16];
    bool *in_shard;        // per config of the matrix
    int count;             // configs in the shard
} shard_rows;

static void shard_rows_make(const case_file *c, const run_config *configs,
                            const resolved_config *resolved, int n, shard_id id, shard_rows *s) {
    *s = (shard_rows){0};
    int *shard_of = invar_calloc((size_t)n + 1, sizeof *shard_of, "shard plan");
    shard_plan(c, configs, n, id.count, shard_of);
    char err[1400];
    if (!shard_plan_keeps_merges(configs, resolved, n, shard_of, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "%s", err);
    s->in_shard = invar_calloc((size_t)n + 1, sizeof *s->in_shard, "shard configs");
    size_t len = 0;
    FILE *f = open_memstream(&s->positions, &len);
    if (!f) invar_die(INVAR_EXIT_SYSTEM, "out of memory for the shard's configs");
    for (int k = 0; k < n; k++) {
        if (shard_of[k] != id.index) continue;
        s->in_shard[k] = true;
        fprintf(f, "%s%d", s->count++ ? "," : "", k + 1);
    }
    if (fclose(f) != 0) invar_die(INVAR_EXIT_SYSTEM, "out of memory for the shard's configs");
    snprintf(s->shard, sizeof s->shard, "%d/%d", id.index, id.count);
    snprintf(s->matrix_configs, sizeof s->matrix_configs, "%d", n);
    free(shard_of);
}

static void shard_rows_free(shard_rows *s) {
    free(s->positions);
    free(s->in_shard);
}

// A resumed shard must still be the shard that started: the same configs (a changed invar
// could plan another split, and the report would mix two).
static void shard_unchanged(const char *dir, const csv_table *meta, const shard_rows *s) {
    const char *was = run_meta_get(meta, "shard_configs");
    const char *now = s->positions[0] ? s->positions : "-";
    if (strcmp(run_meta_get(meta, "shard"), s->shard) != 0 || strcmp(was, now) != 0)
        invar_die(INVAR_EXIT_INPUT, "--resume %s: meta.csv's shard %s holds configs %s, this "
                  "invar would give shard %s configs %s; start a new run", dir,
                  run_meta_get(meta, "shard"), was, s->shard, now);
}

// DIR/meta.csv: commit, date, host, device and versions, case file and hash, command line, the
// checkpoints' identities, and for a shard its I/N and configs.
static void write_meta(const char *out_dir, const case_file *c, const checkpoint_ids *ids,
                       const shard_rows *shard, int argc, char **argv) {
    const char *keys[MATRIX_MAX_VALUES + 5], *values[MATRIX_MAX_VALUES + 5];
    int n_extra = 0;
    for (int i = 0; i < ids->n; i++, n_extra++) {
        keys[n_extra] = ids->key[i];
        values[n_extra] = ids->value[i];
    }
    if (shard->shard[0]) {
        const char *shard_keys[] = {"shard", "shard_configs", "matrix_configs"};
        const char *shard_values[] = {shard->shard, shard->positions, shard->matrix_configs};
        for (int i = 0; i < 3; i++, n_extra++) {
            keys[n_extra] = shard_keys[i];
            values[n_extra] = shard_values[i];
        }
    }
    cuda_device_info dev;
    bool cuda = cuda_device_describe(&dev);
    // Tensor parallelism's collective library and GPU links, as this machine has them ("-"
    // without CUDA): NCCL's version is the linked library's, read with ncclGetVersion.
    char nccl[64], links[256];
    tp_devices_describe(cuda ? "cuda" : "cpu", cuda_device_count(), nccl, (int)sizeof nccl,
                        links, (int)sizeof links);
    keys[n_extra] = "collective_library";
    values[n_extra++] = nccl;
    keys[n_extra] = "gpu_links";
    values[n_extra++] = links;
    run_meta_input in = {.device = cuda ? dev.name : "cpu",
                         .driver = cuda ? dev.driver : NULL,
                         .cuda_runtime = cuda ? dev.runtime : NULL,
                         .cublas = cuda ? dev.cublas : NULL,
                         .compute_capability = cuda ? dev.compute_capability : NULL,
                         .case_path = c->path, .argc = argc, .argv = argv,
                         .has_seed = true, .seed = c->seed, .n_extra = n_extra,
                         .extra_keys = keys, .extra_values = values};
    char err[512];
    if (!run_meta_write(out_dir, &in, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "writing %s/meta.csv: %s", out_dir, err);
}

// ---------------------------------------------------------------------------------------------
// Resuming
// ---------------------------------------------------------------------------------------------

static bool case_xxh64(const char *path, char *hex, size_t len) {
    uint64_t h;
    char err[512];
    if (!invar_file_xxh64(path, -1, &h, err, sizeof err)) return false;
    snprintf(hex, len, "%016llx", (unsigned long long)h);
    return true;
}

// The interrupted run's options, from DIR/meta.csv; its --out becomes DIR, made absolute, and
// the process moves to the run's working directory, so the relative paths of its command line
// and case file mean what they meant then. Exits 2 when the directory holds no run, or the
// case file is gone or changed. Returns meta.csv for the checkpoint check (checkpoints_unchanged).
static csv_table *resume_args(const char *dir, run_args *a, char **cmd, char **argv,
                              char *abs_dir) {
    char path[PATH_MAX], err[PATH_MAX + 256];
    report_name(path, sizeof path, dir, "meta.csv");
    csv_table *meta = csv_table_read(path, false, err, sizeof err);
    if (!meta) invar_die(INVAR_EXIT_INPUT, "--resume %s: %s", dir, err);
    if (!realpath(dir, abs_dir))
        invar_die(INVAR_EXIT_INPUT, "--resume %s: %s", dir, strerror(errno));
    if (run_meta_get(meta, "merged_shards")[0])
        invar_die(INVAR_EXIT_INPUT, "--resume %s: %s: merged_shards: a merge of shard reports "
                  "(invar report merge), not a run; resume the shard that was cut short", dir,
                  path);
    *cmd = strdup(run_meta_get(meta, "command_line"));
    if (!*cmd) invar_die(INVAR_EXIT_SYSTEM, "out of memory");
    const char *cwd = run_meta_get(meta, "working_directory");  // "": meta.csv of an older invar
    if (cwd[0] && chdir(cwd) != 0)
        invar_die(INVAR_EXIT_INPUT, "--resume %s: cannot go to the run's working directory %s "
                  "(%s: working_directory): %s", dir, cwd, path, strerror(errno));
    const char *case_path = run_meta_get(meta, "case_file");
    const char *want = run_meta_get(meta, "case_xxh64");

    run_args orig;
    char why[512];
    if (!run_args_from_command_line(*cmd, argv, &orig, why, sizeof why))
        invar_die(INVAR_EXIT_INPUT, "%s: command_line '%s': %s", path,
                  run_meta_get(meta, "command_line"), why);
    if (strcmp(orig.case_path, case_path) != 0)
        invar_die(INVAR_EXIT_INPUT, "%s: case_file '%s' is not the command line's --case '%s'",
                  path, case_path, orig.case_path);
    char have[32];
    if (!case_xxh64(case_path, have, sizeof have))
        invar_die(INVAR_EXIT_INPUT, "--resume %s: case file %s: cannot read: %s", dir, case_path,
                  strerror(errno));
    if (strcmp(want, have) != 0)
        invar_die(INVAR_EXIT_INPUT, "--resume %s: case file %s changed since the run started "
                  "(xxh64 %s, now %s); start a new run", dir, case_path, want, have);
    a->case_path = orig.case_path;
    a->backend = orig.backend;
    a->model = orig.model;
    a->kernel_set = orig.kernel_set;
    a->cuda_graphs = orig.cuda_graphs;
    a->hash_weights = orig.hash_weights;
    a->shard_text = orig.shard_text;
    a->shard = orig.shard;
    a->only = orig.only;
    a->request = orig.request;
    a->out_dir = abs_dir;
    return meta;
}

// Exits 2 when a checkpoint directory of the run is not what meta.csv recorded at its start:
// the finished configs ran on other weights, and one report must not mix the two.
static void checkpoints_unchanged(const char *dir, const csv_table *meta,
                                  const checkpoint_ids *now) {
    for (int i = 0; i < now->n; i++) {
        const char *was = run_meta_get(meta, now->key[i]);
        const char *model = now->key[i] + strlen("checkpoint:");
        if (!was[0])
            invar_die(INVAR_EXIT_INPUT, "--resume %s: meta.csv records no identity of checkpoint "
                      "%s (written by an older invar), so a change cannot be ruled out; start a "
                      "new run", dir, model);
        char what[PATH_MAX + 256];
        if (!checkpoint_id_same(was, now->value[i], what, sizeof what))
            invar_die(INVAR_EXIT_INPUT, "--resume %s: checkpoint %s changed since the run "
                      "started: %s; start a new run", dir, model, what);
    }
}

// Whether the file ends with a newline: a run killed while writing a row leaves it without.
static bool ends_with_newline(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) invar_die(INVAR_EXIT_INPUT, "%s: cannot open: %s", path, strerror(errno));
    bool ok = fseek(f, -1, SEEK_END) == 0 && fgetc(f) == '\n';
    fclose(f);
    return ok;
}

// Rewrites `path` as the header and the rows of `t` that `keep` accepts, under a temporary
// name renamed over it, and leaves it open for the rows to come. A kill at any point leaves
// either the old file or the new one.
static csv_report *reopen_keeping(const char *path, const csv_table *t,
                                  const char *const *header, int ncols,
                                  bool (*keep)(const csv_table *t, int row, const void *ctx),
                                  const void *ctx) {
    char tmp[PATH_MAX + 16];
    if (snprintf(tmp, sizeof tmp, "%s.resume", path) >= (int)sizeof tmp)
        invar_die(INVAR_EXIT_INPUT, "%s.resume: path too long", path);
    csv_report *r = open_report(tmp, header, ncols);
    for (int row = 0; t && row < t->nrows; row++) {
        if (!keep(t, row, ctx)) continue;
        write_report_row(r, (const char *const *)t->cells + (size_t)row * (size_t)t->ncols);
    }
    if (rename(tmp, path) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "rename %s to %s failed: %s", tmp, path, strerror(errno));
    return r;
}

typedef struct {
    const run_config *configs;
    const int *done_row;
    int n;
} done_set;

static bool keep_done_summary(const csv_table *t, int row, const void *ctx) {
    (void)t;
    const done_set *d = ctx;
    for (int k = 0; k < d->n; k++)
        if (d->done_row[k] == row) return true;
    return false;
}

// A divergence row of a finished config; a config that was cut short runs again and writes
// its rows again.
static bool keep_done_divergence(const csv_table *t, int row, const void *ctx) {
    const done_set *d = ctx;
    const char *name = divergence_get(t, row, DIVERGENCE_CONFIG);
    for (int k = 0; k < d->n; k++)
        if (d->done_row[k] >= 0 && strcmp(d->configs[k].name, name) == 0) return true;
    return false;
}

// ---------------------------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------------------------

// junit.xml and summary.md of an earlier run in the directory: until this run renders its own,
// they would describe another run's summary.csv (a kill would leave the pair).
static void remove_stale_renders(const char *out_dir) {
    static const char *const rendered[] = {"junit.xml", "summary.md"};
    for (size_t i = 0; i < sizeof rendered / sizeof rendered[0]; i++) {
        char path[PATH_MAX];
        report_name(path, sizeof path, out_dir, rendered[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            invar_die(INVAR_EXIT_SYSTEM, "removing the earlier %s failed: %s", path,
                      strerror(errno));
    }
}

// Config names identify rows (and resumed rows): they must be unique.
static void check_unique_names(const case_file *c, const run_config *configs, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(configs[i].name, configs[j].name) == 0)
                invar_die(INVAR_EXIT_INPUT, "%s: configs %d and %d have the same name '%s' "
                          "(names are cut at %zu characters: shorten the model paths)",
                          c->path, i + 1, j + 1, configs[i].name, sizeof configs[i].name - 1);
}

int cmd_run(int argc, char **argv) {
    run_args a = {0};
    int rc = run_args_parse(argc, argv, &a);
    if (rc != CLI_GO_ON) return rc;
    char *resume_cmd = NULL, *resume_argv[RUN_MAX_ARGS], resume_dir[PATH_MAX];
    csv_table *resume_meta = NULL;
    if (a.resume) resume_meta = resume_args(a.resume, &a, &resume_cmd, resume_argv, resume_dir);
    if (!a.out_dir) a.out_dir = RUN_DEFAULT_OUT;

    case_file *c = invar_calloc(1, sizeof *c, "case file");
    char err[1400];
    backend_selection sel;
    if (!case_file_load(a.case_path, c, err, sizeof err) ||
        (a.model && !case_file_set_model(c, a.model, err, sizeof err)) ||
        (a.kernel_set && !case_file_set_kernel_set(c, a.kernel_set, err, sizeof err)) ||
        (a.cuda_graphs && !case_file_set_cuda_graphs(c, a.cuda_graphs, err, sizeof err)) ||
        !resolve_select_backend(c, a.backend, &sel, err, sizeof err)) {
        fprintf(stderr, "invar: error: %s\n", err);
        free(c);
        return INVAR_EXIT_INPUT;
    }
    long n = matrix_count(c->axes);
    run_config *configs = invar_calloc((size_t)n, sizeof *configs, "configs");
    matrix_expand(c->axes, configs);
    check_unique_names(c, configs, (int)n);
    resolved_config *resolved = resolve_matrix(c, configs, (int)n, &sel);
    checkpoint_ids ids;
    identify_checkpoints(c, a.hash_weights, &ids);
    if (resume_meta) checkpoints_unchanged(a.resume, resume_meta, &ids);
    shard_rows shard = {0};
    if (a.shard.count) shard_rows_make(c, configs, resolved, (int)n, a.shard, &shard);
    if (resume_meta && (a.shard.count || run_meta_get(resume_meta, "shard")[0]))
        shard_unchanged(a.resume, resume_meta, &shard);
    csv_table_free(resume_meta);
    // --only: chosen before resumed rows are matched, so merges read as the run wrote them.
    bool *chosen = NULL;
    if (a.only) {
        chosen = invar_calloc((size_t)n, sizeof *chosen, "chosen configs");
        if (config_select_only(a.only, configs, resolved, (int)n, shard.in_shard, chosen) == 0)
            invar_die(INVAR_EXIT_INPUT, "--only: '%s' matches none of the %s%ld configs of %s "
                      "(a run of the whole case prints their names)",
                      a.only, shard.in_shard ? "shard's " : "", shard.in_shard ? shard.count : n,
                      c->path);
    }
    const bool *runs = chosen ? chosen : shard.in_shard;  // this run's configs; NULL: all
    int run_count = 0;
    for (int k = 0; k < n; k++) run_count += !runs || runs[k];
    if (a.request >= case_request_count(c))
        invar_die(INVAR_EXIT_INPUT, "--request: %d: %s runs %d requests (0 to %d)",
                  a.request, c->path, case_request_count(c), case_request_count(c) - 1);

    const char *out_dir = a.out_dir;
    char summary_path[PATH_MAX], divergence_path[PATH_MAX];
    report_name(summary_path, sizeof summary_path, out_dir, "summary.csv");
    report_name(divergence_path, sizeof divergence_path, out_dir, "divergence.csv");
    const char *const *summary_columns = summary_header();
    const char *const *divergence_columns = divergence_header();
    runner_options o = {.console = stdout, .warnings = stderr, .quiet = a.quiet,
                        .progress = !a.quiet && isatty(1) == 1,
                        .in_shard = runs, .request = a.request};
    csv_table *done = NULL;
    int *done_row = invar_calloc((size_t)n, sizeof *done_row, "finished rows");
    if (!a.resume) {
        host_make_dirs(out_dir);
        remove_stale_renders(out_dir);
        write_meta(out_dir, c, &ids, &shard, argc, argv);
        o.summary = open_report(summary_path, summary_columns, SUMMARY_NCOLS);
        o.divergence = open_report(divergence_path, divergence_columns, DIVERGENCE_NCOLS);
    } else {
        // No summary.csv yet (killed before it was created): nothing finished.
        done = csv_table_read(summary_path, true, err, sizeof err);
        if (!done && err[0]) invar_die(INVAR_EXIT_INPUT, "--resume %s: %s", out_dir, err);
        for (int k = 0; k < n; k++) done_row[k] = -1;
        int usable = done ? done->nrows - (done->nrows > 0 && !ends_with_newline(summary_path))
                          : 0;
        if (done && !resume_match_done(c, configs, resolved, (int)n, &sel, done, usable,
                                       done_row, err, sizeof err))
            invar_die(INVAR_EXIT_INPUT, "--resume %s: %s", out_dir, err);
        for (int k = 0; k < n && runs; k++)
            if (done_row[k] >= 0 && !runs[k])
                invar_die(INVAR_EXIT_INPUT, "--resume %s: %s:%d: config '%s' is not in %s%s",
                          out_dir, summary_path, done_row[k] + 2, configs[k].name,
                          shard.in_shard && !shard.in_shard[k] ? "shard " : "the configs of --only ",
                          shard.in_shard && !shard.in_shard[k] ? shard.shard : a.only);
        csv_table *div = csv_table_read(divergence_path, true, err, sizeof err);
        if (!div && err[0]) invar_die(INVAR_EXIT_INPUT, "--resume %s: %s", out_dir, err);
        done_set ds = {.configs = configs, .done_row = done_row, .n = (int)n};
        // divergence.csv first: until summary.csv is rewritten, a kill leaves the old pair,
        // which the next --resume filters the same way.
        o.divergence = reopen_keeping(divergence_path, div, divergence_columns, DIVERGENCE_NCOLS,
                                      keep_done_divergence, &ds);
        o.summary = reopen_keeping(summary_path, done, summary_columns, SUMMARY_NCOLS,
                                   keep_done_summary, &ds);
        csv_table_free(div);
        o.done = done;
        o.done_row = done_row;
    }

    if (!a.quiet) {
        const matrix_list *b = &c->axes[matrix_axis_find("attention_backends")];
        printf("case %s (%s): model %s, %d prompts of %d..%d tokens, %d new tokens, %ld configs; "
               "attention backend%s ", c->name, c->path, c->model, case_request_count(c),
               c->min_len, c->max_len, c->max_new_tokens, n, b->n == 1 ? "" : "s");
        for (int i = 0; i < b->n; i++) printf("%s%s", i ? ", " : "", b->value[i]);
        printf(" (from %s)\n", sel.where);
        if (shard.shard[0])
            printf("shard %s: %d of the %ld configs (%s/meta.csv: shard_configs)\n", shard.shard,
                   shard.count, n, out_dir);
    }
    if (a.resume) {
        int finished = 0;
        for (int k = 0; k < n; k++) finished += done_row[k] >= 0;
        long total = run_count;
        printf("resuming %s: %d of %ld configs finished before, %ld to go\n", out_dir, finished,
               total, total - finished);
    }
    run_totals t = runner_run(c, configs, resolved, (int)n, &sel, &o);
    close_report(o.summary);
    close_report(o.divergence);
    if (!run_meta_seal(out_dir, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "sealing the report in %s: %s", out_dir, err);
    // JUnit XML, Markdown and plots are rendered from the CSVs, so any old report can be
    // re-rendered with `invar report render DIR`.
    if (!report_render_run(out_dir, err, sizeof err))
        invar_die(INVAR_EXIT_SYSTEM, "rendering the report in %s: %s", out_dir, err);
    if (!a.quiet)
        printf("reports: %s/{summary.csv,divergence.csv,meta.csv,junit.xml,summary.md}\n", out_dir);
    if (t.merged > 0)
        printf("%d config%s had the effective settings of an earlier one and reused its run\n",
               t.merged, t.merged == 1 ? "" : "s");
    printf("%d passed, %d failed, %d skipped\n", t.passed, t.failed, t.skipped);
    if (fflush(stdout) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "writing stdout failed: %s", strerror(errno));
    csv_table_free(done);
    free_checkpoint_ids(&ids);
    shard_rows_free(&shard);
    free(chosen);
    free(resume_cmd);
    free(done_row);
    free(resolved);
    free(configs);
    free(c);
    return t.failed > 0 ? 1 : 0;
}
