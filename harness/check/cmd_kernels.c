// harness/check/cmd_kernels.c — `invar kernels` (harness/commands.h): the command line, the
// report (kernels.csv and one printed line per shape) and the loop over sets and ops; each op
// is checked by harness/check/kernel_check.h.
#include <errno.h>                  // errno, EINTR
#include <inttypes.h>               // PRIu64
#include <limits.h>                 // PATH_MAX
#include <spawn.h>                  // posix_spawn
#include <stdio.h>                  // printf, fprintf, FILE
#include <stdlib.h>                 // free
#include <string.h>                 // strcmp, strerror, strsignal
#include <sys/wait.h>               // waitpid, WIFSIGNALED, WTERMSIG
#include <unistd.h>                 // environ, unlink

#include "../commands.h"            // cmd_kernels
#include "../cli_args.h"            // cli_parse, cli_usage_error
#include "../host.h"                // host_seconds, host_make_dirs
#include "kernel_check.h"           // kernel_check_op, kernel_check_must_vary, check_opts, ...
#include "op_table.h"               // op_table, op_table_find
#include "../../common/check.h"    // invar_die, invar_calloc
#include "../../sets/registry.h" // kernel_sets, kernel_set_create, cuda_device_available
#include "../../reports/csv_report.h" // csv_report_open, csv_report_row, csv_report_close, csv_row_write
#include "../../reports/report_schema.h" // kernels_header, kernels_get, KERNELS_*
#include "../../reports/csv_read.h"  // csv_table_read, csv_table_free
#include "../../reports/coverage_merge.h" // coverage_write_set, coverage_write_path
#include "../../reports/row_verdict.h" // kernel_row_state
#include "../../reports/render.h"    // report_render_kernels
#include "../../sets/plugin_set.h" // plugin_probe, plugin_set_is, plugin_set_op_source, plugin_set_take_error

// Its own default directory: `invar run` writes build/report/run, and neither renders the other.
#define DEFAULT_KERNELS_OUT "build/report/kernels"

// --- the command -----------------------------------------------------------------------------

typedef struct {
    csv_report *csv;
    int passed, failed, skipped;
    uint64_t seed;
    double shape_start;
    bool progress;       // a progress line on stderr: only when it is a terminal
    int shapes_done;
    double started;
    FILE *coverage;       // coverage.csv: every declared path of a checked set, reached or not
    const char *coverage_path;
    bool every_shape;     // every op at its default shapes: an unreached path is a failure
} report;

// The progress line is redrawn in place ("\r", erase to the end of the line); every result line
// on stdout clears it first, so a terminal never shows the two run together.
static void progress_clear(const report *rep) {
    if (!rep->progress) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
}

static void progress_show(report *rep, const ops_set *ops, const op_entry *op, const char *shape) {
    rep->shapes_done++;
    if (!rep->progress) return;
    fprintf(stderr, "\r\033[K[%d shapes checked, %.0f s: %d failed] last: %s %s %s %.40s",
            rep->shapes_done, host_seconds() - rep->started, rep->failed, ops->name, ops->device,
            op->name, shape);
    fflush(stderr);
}

// "stable at M=1,2,3,4; varied at M=255,4096": which batch sizes a row varied at.
static void M_lists(const check_result *r, char *buf, int len) {
    int n = snprintf(buf, (size_t)len, "stable at M=");
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && n < len) n += snprintf(buf + n, (size_t)(len - n), "; varied at M=");
        bool first = true;
        for (int i = 0; i < r->n_M && n < len; i++) {
            if (r->M_varied[i] != (pass == 1)) continue;
            n += snprintf(buf + n, (size_t)(len - n), "%s%d", first ? "" : ",", r->M[i]);
            first = false;
        }
        if (first && n < len) n += snprintf(buf + n, (size_t)(len - n), "none");
    }
}

static const char *expectation(const ops_set *ops, const op_entry *op) {
    if (kernel_check_expects_invariant(ops, op)) return "stable";
    return kernel_check_must_vary(op, ops) ? "must vary" : "may be stable";
}

// One kernels.csv row, written as it finishes; a failed write ends the run.
static void put_row(report *rep, const char *const fields[KERNELS_NCOLS]) {
    char why[PATH_MAX + 128];
    if (!csv_report_row(rep->csv, fields, why, sizeof why)) invar_die(INVAR_EXIT_SYSTEM, "kernels: %s", why);
}

static void write_row(report *rep, const ops_set *ops, const op_entry *op, const char *shape,
                      const char *status, const check_result *r, double seconds, const char *note) {
    const char *source = plugin_set_is(ops) ? plugin_set_op_source(ops, (enum invar_plugin_op)kernel_check_plugin_op(op))
                                            : ops->name;
    char vary_M[16], vary_pos[16], vary_vs[16], err[32], tol[32], secs[32], seed[32];
    snprintf(vary_M, sizeof vary_M, "%d", r->first_vary_M);
    snprintf(vary_pos, sizeof vary_pos, "%d", r->first_vary_pos);
    snprintf(vary_vs, sizeof vary_vs, "%d", r->first_vary_vs);
    snprintf(err, sizeof err, "%.3e", r->err);
    snprintf(tol, sizeof tol, "%.1e", r->tol);
    snprintf(secs, sizeof secs, "%.3f", seconds);
    snprintf(seed, sizeof seed, "%" PRIu64, rep->seed);
    const char *const fields[KERNELS_NCOLS] = {
        [KERNELS_SET] = ops->name, [KERNELS_DEVICE] = ops->device, [KERNELS_OP] = op->name,
        [KERNELS_SHAPE] = shape, [KERNELS_STATUS] = status,
        [KERNELS_EXPECT] = expectation(ops, op), [KERNELS_INVARIANT] = r->invariant ? "yes" : "no",
        [KERNELS_FIRST_VARY_M] = r->invariant ? "" : vary_M,
        [KERNELS_FIRST_VARY_ROW] = r->invariant ? "" : vary_pos,
        [KERNELS_FIRST_VARY_VS_M] = r->invariant ? "" : vary_vs, [KERNELS_REL_L2_ERR] = err,
        [KERNELS_TOL] = tol, [KERNELS_WRITTEN] = r->written ? "yes" : "no",
        [KERNELS_SECONDS] = secs, [KERNELS_SEED] = seed, [KERNELS_SOURCE] = source,
        [KERNELS_NOTE] = note,
    };
    put_row(rep, fields);
}

static void print_line(const char *status, const ops_set *ops, const op_entry *op,
                       const char *shape, const check_result *r, const char *note) {
    char inv[48];
    if (r->invariant) snprintf(inv, sizeof inv, "yes");
    else if (r->first_vary_vs == 1)
        snprintf(inv, sizeof inv, "no (M=%d row %d vs alone)", r->first_vary_M, r->first_vary_pos);
    else
        snprintf(inv, sizeof inv, "no (M=%d row %d vs M=%d)", r->first_vary_M, r->first_vary_pos,
                 r->first_vary_vs);
    char Ms[1024] = "";
    if (!r->invariant) {
        Ms[0] = ' ';
        Ms[1] = ' ';
        M_lists(r, Ms + 2, (int)sizeof Ms - 2);
    }
    printf("%-6s %-9s %-4s %-14s %-22s invariant: %-18s err=%.2e (tol %.0e)  written: %s%s%s\n",
           status, ops->name, ops->device, op->name, shape, inv, r->err, r->tol,
           r->written ? "yes" : "NO", note, Ms);
    fflush(stdout);
}

static void on_shape(void *user, ops_set *ops, const op_entry *op, const op_shape *shape,
                     const check_result *r) {
    report *rep = user;
    char error[600];
    progress_clear(rep);
    if (plugin_set_take_error(ops, error, sizeof error)) {  // nothing it wrote can be judged
        printf("ERROR  %-9s %-4s %-14s %-22s %s\n", ops->name, ops->device, op->name, shape->label, error);
        fflush(stdout);
        write_row(rep, ops, op, shape->label, "ERROR", r, host_seconds() - rep->shape_start, error);
        rep->failed++;
        rep->shape_start = host_seconds();
        progress_show(rep, ops, op, shape->label);
        return;
    }
    const char *status = !r->accurate || !r->written ? "FAIL" : r->invariant ? "ok" : "VARIES";
    const char *note = "";
    char order_note[200];
    if (!r->order_stable && kernel_check_expects_invariant(ops, op)) {
        // The invariant path did not run at every M, whatever the bits say.
        const fingerprint_mismatch *d = &r->order_diff;
        snprintf(order_note, sizeof order_note,
                 "  <- %s order fingerprint %016" PRIx64 " at M=%d vs %016" PRIx64 " at M=%d",
                 d->op, d->order_a, d->batch_a, d->order_b, d->batch_b);
        status = "FAIL";
        note = order_note;
    } else if (!r->pass && r->invariant && !kernel_check_expects_invariant(ops, op)) {
        status = "FAIL";
        note = "  <- must vary at this shape";
    } else if (!r->invariant && kernel_check_expects_invariant(ops, op)) note = "  <- must be stable";
    else if (!r->invariant) note = "  (expected of a non-invariant set)";
    print_line(status, ops, op, shape->label, r, note);
    write_row(rep, ops, op, shape->label, status, r, host_seconds() - rep->shape_start,
              note == order_note ? order_note + 5 : "");
    if (r->pass) rep->passed++;
    else rep->failed++;
    rep->shape_start = host_seconds();
    progress_show(rep, ops, op, shape->label);
}

static void on_skip(void *user, ops_set *ops, const op_entry *op, const op_shape *shape,
                    const char *why) {
    report *rep = user;
    check_result none = {.invariant = true, .written = true, .tol = op->tol};
    progress_clear(rep);
    printf("SKIP   %-9s %-4s %-14s %-22s %s\n", ops->name, ops->device, op->name, shape->label,
           why);
    fflush(stdout);
    write_row(rep, ops, op, shape->label, "SKIP", &none, 0.0, "");
    rep->skipped++;
    rep->shape_start = host_seconds();
    progress_show(rep, ops, op, shape->label);
}

// The ops, known only from the table at run time.
static void list_ops(FILE *f) {
    fprintf(f, "\nops:");
    for (const op_entry *op = op_table(); op->name; op++) fprintf(f, " %s", op->name);
    fprintf(f, "\n");
}

static bool matches(const char *filter, const char *value) {
    return strcmp(filter, "all") == 0 || strcmp(filter, value) == 0;
}

// --shape's label in the op's lists of the devices asked for; else exit 2 naming the labels.
static int check_shape_label(const cli_command *cmd, const op_entry *op, const char *device, const char *label) {
    const struct { const char *device; const op_shape *shapes; } lists[] = {
        {"cpu", op->cpu_shapes}, {"cuda", op->cuda_shapes}};
    for (int l = 0; l < 2; l++)
        for (const op_shape *s = lists[l].shapes; matches(device, lists[l].device) && s->label; s++)
            if (strcmp(s->label, label) == 0) return CLI_GO_ON;
    int code = cli_usage_error(cmd, "--shape: %s has no shape '%s' on --device %s", op->name, label, device);
    for (int l = 0; l < 2; l++) {
        if (!matches(device, lists[l].device)) continue;
        fprintf(stderr, "%s shapes on %s:", op->name, lists[l].device);
        for (const op_shape *s = lists[l].shapes; s->label; s++) fprintf(stderr, " '%s'", s->label);
        fprintf(stderr, "\n");
    }
    return code;
}

// The paths a set declares (ops_set.paths) against those its checked calls noted: a line per
// set, one per unreached path, and coverage.csv's rows, for batch-invariant sets. Checked at
// every op's default shapes, such a set must reach each one (a path no shape takes is a path
// nothing checks), except a path the set says this process cannot take (ops_set.path_unreachable:
// another GPU architecture's kernel, a collective needing more GPUs), listed with its reason.
static void report_coverage(report *rep, ops_set *ops, const fingerprint_sink *prints,
                            const op_entry *only) {
    // A set built on the invariant one keeps its list but not all of its kernels: not judged.
    if (!ops->paths || !ops->batch_invariant) return;
    int declared = 0, reached = 0, unreachable = 0;
    while (ops->paths[declared]) declared++;
    // Per path: reached, or why this host cannot take it (NULL: it could and did not).
    bool *hit = invar_calloc((size_t)declared, sizeof *hit, "coverage: paths reached");
    const char **why = invar_calloc((size_t)declared, sizeof *why, "coverage: reasons");
    for (int i = 0; i < declared; i++) {
        const char *p = ops->paths[i];
        hit[i] = fingerprint_sink_reached(prints, p);
        if (!hit[i] && ops->path_unreachable) why[i] = ops->path_unreachable(ops, p);
        reached += hit[i];
        unreachable += why[i] != NULL;
        const char *row[] = {ops->name, ops->device, p, hit[i] ? "yes" : why[i] ? "unreachable" : "no", why[i]};
        if (!csv_row_write(rep->coverage, row, 5))
            invar_die(INVAR_EXIT_SYSTEM, "kernels: writing %s: %s", rep->coverage_path, strerror(errno));
    }
    const char *names[128];
    int noted = fingerprint_sink_paths(prints, names, 128);
    for (int i = 0; i < noted; i++) {  // a path noted but not declared: the list is stale
        bool listed = false;
        for (const char *const *p = ops->paths; *p && !listed; p++) listed = strcmp(*p, names[i]) == 0;
        if (listed) continue;
        printf("FAIL   %-9s %-4s coverage: path %s taken but not in the set's list\n", ops->name, ops->device, names[i]);
        rep->failed++;
    }
    bool must_reach = rep->every_shape && !only;
    bool short_of = reached + unreachable < declared;
    coverage_write_set(stdout, short_of && must_reach, ops->name, ops->device, reached, declared, "", unreachable,
                       must_reach ? "" : " (a partial run: not judged)");
    for (int i = 0; i < declared; i++)
        if (!hit[i]) coverage_write_path(stdout, ops->name, ops->device, ops->paths[i], why[i]);
    if (must_reach && short_of) rep->failed++;
    free(hit);
    free(why);
    fflush(stdout);
}

// Every op of one set (a plugin set: the ops it provides), its rows written as they finish.
static void check_set(report *rep, const char *set, const char *device, int threads, const op_entry *only,
                      const check_opts *o) {
    ops_set *ops = kernel_set_create(set, device, threads);
    if (!ops) invar_die(INVAR_EXIT_SYSTEM, "kernels: cannot create set %s on %s", set, device);
    check_opts with_paths = *o;
    with_paths.fingerprints = fingerprint_sink_create();
    o = &with_paths;
    plugin_set_collect_errors(ops, true);  // a failing op is an ERROR row, the others go on
    for (const op_entry *op = op_table(); op->name; op++) {
        if (only && only != op) continue;
        if (plugin_set_is(ops) && strcmp(plugin_set_op_source(ops, (enum invar_plugin_op)kernel_check_plugin_op(op)), "plugin") != 0)
            continue;  // the invariant set's, reported by the parent
        check_result summary;
        rep->shape_start = host_seconds();
        int n = kernel_check_op(ops, op, o, &summary);
        const bool never_varied = n > 0 && !kernel_check_expects_invariant(ops, op) && kernel_check_must_vary(op, ops) && summary.invariant;
        if (never_varied) progress_clear(rep);
        if (never_varied && o->shape_label) {
            // one shape cannot judge a control meant over the whole list (must_vary shapes
            // still are, in kernel_check_shape)
            printf("NOTE   %-9s %-4s %-14s %-22s never varied at this shape; the negative control over "
                   "every shape is judged without --shape\n", ops->name, ops->device, op->name, o->shape_label);
        } else if (never_varied) {
            // The negative control: a reference reduction nobody caught varying.
            printf("FAIL   %-9s %-4s %-14s %-22s never varied at any shape: the checker "
                   "would miss a non-invariant kernel\n", ops->name, ops->device, op->name,
                   "(all shapes)");
            write_row(rep, ops, op, "(all shapes)", "FAIL", &summary, 0.0, "");
            rep->failed++;
        }
    }
    report_coverage(rep, ops, o->fingerprints, only);
    fingerprint_sink_destroy(with_paths.fingerprints);
    ops->destroy(ops);
}

// --- a plugin's ops, each in a process of its own ---------------------------------------------
// A plugin may crash or leave a sticky CUDA error: each op it provides is checked by a child
// `invar kernels --in-process` started before this process touches CUDA, its rows copied here
// as they are, and a child that dies leaves a CRASH row at the shape it was on.

typedef struct {
    const char *path, *device, *out;
    const plugin_info *info;
    const check_opts *o;
    int threads;
} plugin_run;

// The first shape of op's list the child did not report: the one it was checking.
static const char *shape_in_progress(const plugin_run *p, const op_entry *op, bool claimed,
                                     const csv_table *done) {
    const op_shape *shapes = kernel_check_shape_list(op, p->device, p->o);
    for (int i = 0; shapes[i].label; i++) {
        if (!kernel_check_shape_selected(&shapes[i], p->o) || (shapes[i].invariant_sets_only && !claimed)) continue;
        bool reported = false;
        for (int r = 0; done && r < done->nrows && !reported; r++)
            reported = strcmp(kernels_get(done, r, KERNELS_SHAPE), shapes[i].label) == 0;
        if (!reported) return shapes[i].label;
    }
    return "(after its last shape)";
}

// Copies the child's rows into the report, counting them as the report's readers will.
static void copy_rows(report *rep, const csv_table *t) {
    for (int r = 0; t && r < t->nrows; r++) {
        const char *fields[KERNELS_NCOLS];
        for (int c = 0; c < KERNELS_NCOLS; c++) fields[c] = kernels_get(t, r, (kernels_column)c);
        put_row(rep, fields);
        char why[PATH_MAX + 128];
        switch (kernel_row_state(t, r, why, sizeof why)) {
        case ROW_PASS: rep->passed++; break;
        case ROW_SKIP: rep->skipped++; break;
        default: rep->failed++; break;
        }
    }
}

static void plugin_row(report *rep, const plugin_run *p, const op_entry *op, const char *shape,
                       const char *status, const char *source, const char *note) {
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, rep->seed);
    char set[PATH_MAX + 16];
    snprintf(set, sizeof set, "%s%s", PLUGIN_SET_PREFIX, p->path);
    const char *fields[KERNELS_NCOLS] = {
        [KERNELS_SET] = set, [KERNELS_DEVICE] = p->device, [KERNELS_OP] = op->name,
        [KERNELS_SHAPE] = shape, [KERNELS_STATUS] = status, [KERNELS_EXPECT] = "",
        [KERNELS_INVARIANT] = "", [KERNELS_FIRST_VARY_M] = "", [KERNELS_FIRST_VARY_ROW] = "",
        [KERNELS_FIRST_VARY_VS_M] = "", [KERNELS_REL_L2_ERR] = "", [KERNELS_TOL] = "",
        [KERNELS_WRITTEN] = "", [KERNELS_SECONDS] = "0.000", [KERNELS_SEED] = seed,
        [KERNELS_SOURCE] = source, [KERNELS_NOTE] = note,
    };
    put_row(rep, fields);
}

// Runs the child for one op and copies what it wrote; a CRASH row when it died.
static void check_plugin_op(report *rep, const plugin_run *p, const op_entry *op) {
    char dir[PATH_MAX], seed[32], threads[16];
    if (snprintf(dir, sizeof dir, "%s/ops/%s", p->out, op->name) >= (int)sizeof dir)
        invar_die(INVAR_EXIT_INPUT, "kernels: --out %s: path too long", p->out);
    snprintf(seed, sizeof seed, "%" PRIu64, p->o->seed);
    snprintf(threads, sizeof threads, "%d", p->threads);
    const char *argv[24] = {"invar", "kernels", "--in-process", "--plugin", p->path, "--device", p->device,
                            "--op", op->name, "--out", dir, "--seed", seed, "--threads", threads};
    int argc = 15;
    if (p->o->quick) argv[argc++] = "--quick";
    if (p->o->exhaustive) argv[argc++] = "--exhaustive";
    if (p->o->shape_label) {
        argv[argc++] = "--shape";
        argv[argc++] = p->o->shape_label;
    }
    argv[argc] = NULL;
    char kernels_csv[PATH_MAX + 16];
    snprintf(kernels_csv, sizeof kernels_csv, "%s/kernels.csv", dir);
    (void)unlink(kernels_csv);  // a row left by an earlier run must not read as this one's
    fflush(stdout);
    pid_t pid;
    int err = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, (char *const *)argv, environ);
    if (err) invar_die(INVAR_EXIT_SYSTEM, "kernels: starting the check of %s: posix_spawn: %s", op->name, strerror(err));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) invar_die(INVAR_EXIT_SYSTEM, "kernels: waitpid: %s", strerror(errno));
    char why[PATH_MAX + 128];
    csv_table *t = csv_table_read(kernels_csv, true, why, sizeof why);
    copy_rows(rep, t);
    bool died = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) > 1);
    if (died) {
        char note[256];
        if (WIFSIGNALED(status))
            snprintf(note, sizeof note, "the check died of signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        else
            snprintf(note, sizeof note, "the check exited %d (output above)", WEXITSTATUS(status));
        bool claimed = (p->info->claims & INVAR_OP_BIT(kernel_check_plugin_op(op))) != 0;
        const char *shape = shape_in_progress(p, op, claimed, t);
        progress_clear(rep);
        printf("CRASH  %-9s %-4s %-14s %-22s %s\n", "plugin", p->device, op->name, shape, note);
        fflush(stdout);
        plugin_row(rep, p, op, shape, "CRASH", "plugin", note);
        rep->failed++;
    }
    csv_table_free(t);
}

// Every op of the table a plugin check names: those the plugin provides checked in children,
// the others reported as the invariant set's.
static void check_plugin(report *rep, const plugin_run *p, const op_entry *only) {
    for (const op_entry *op = op_table(); op->name; op++) {
        if (only && only != op) continue;
        int pop = kernel_check_plugin_op(op);
        if (pop < 0 || !(p->info->provided & INVAR_OP_BIT(pop))) {
            progress_clear(rep);
            printf("SKIP   %-9s %-4s %-14s %-22s not provided by the plugin: the invariant set's\n", "plugin",
                   p->device, op->name, "(all shapes)");
            plugin_row(rep, p, op, "(all shapes)", "SKIP", "invariant", "not provided by the plugin");
            rep->skipped++;
            continue;
        }
        check_plugin_op(rep, p, op);
    }
}

int cmd_kernels(int argc, char **argv) {
    // NULL: not given; defaults after parsing.
    const char *device = NULL, *set = NULL, *op_name = NULL, *out = NULL, *shape_label = NULL;
    const char *plugin = NULL;
    bool in_process = false;
    check_opts o = {.seed = 20240611};
    int threads = 0;
    const cli_flag flags[] = {
        {.name = "--device", .choices = "cpu|cuda|all", .to.string = &device,
         .help = "the kernel sets of this device (default all)"},
        {.name = "--op", .metavar = "NAME", .to.string = &op_name,
         .help = "this op only (default every op; the list is below)"},
        {.name = "--shape", .metavar = "LABEL", .to.string = &shape_label,
         .help = "this shape of --op only, by its label in the report (e.g. 18048x512):\n"
                 "one kernel path under a debugger or compute-sanitizer"},
        {.name = "--set", .metavar = "invariant|reference|adversarial|all", .to.string = &set,
         .help = "the kernel sets of this name (default all)"},
        {.name = "--plugin", .metavar = "PATH", .to.string = &plugin,
         .help = "check a plugin's ops (kernels/invar_plugin.h) instead of the sets: each\n"
                 "op it provides in a process of its own, held to its claims (a claimed\n"
                 "op must be stable, an unclaimed one must be caught varying); a crash is\n"
                 "a CRASH row and the other ops are still judged"},
        {.name = "--in-process", .kind = CLI_SWITCH, .to.on = &in_process,
         .help = "with --plugin: check its ops in this process (what each child of a\n"
                 "--plugin check runs; no crash isolation)"},
        {.name = "--out", .metavar = "DIR", .to.string = &out,
         .help = "where kernels.csv goes (default " DEFAULT_KERNELS_OUT ")"},
        {.name = "--quick", .kind = CLI_SWITCH, .to.on = &o.quick,
         .help = "fewer shapes and batch sizes (CI smoke run)"},
        {.name = "--exhaustive", .kind = CLI_SWITCH, .to.on = &o.exhaustive,
         .help = "both sides of every size threshold: more shapes and batch sizes (nightly)"},
        {.name = "--seed", .kind = CLI_U64, .to.u64 = &o.seed, .show_default = true,
         .help = "the seed every input is derived from"},
        {.name = "--threads", .kind = CLI_INT, .to.integer = &threads, .min = 0, .max = 4096,
         .help = "worker threads of the CPU sets (default 0: all cores)"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar kernels",
        .about = "Checks every registered op of every matching kernel set: each probe row alone "
                 "and\ninside batches of M rows, bitwise; accuracy against float64; outputs "
                 "fully written.\nWrites DIR/kernels.csv.",
        .flags = flags,
        .epilogue = "exit: 0 every expectation held; 1 an invariant op varied or was inaccurate, "
                    "or a\nreference op meant to vary never did; 2 bad usage.",
        .more_help = list_ops,
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    if (o.quick && o.exhaustive)
        return cli_usage_error(&cmd, "--quick and --exhaustive: pick one");
    if (plugin && set) return cli_usage_error(&cmd, "--set and --plugin: a plugin check checks the plugin's set");
    if (in_process && !plugin) return cli_usage_error(&cmd, "--in-process: only with --plugin");
    plugin_info info;
    if (plugin) {
        char why[1200];
        const char *asked = device && strcmp(device, "all") != 0 ? device : NULL;
        if (!plugin_probe(plugin, asked, &info, why, sizeof why)) {
            fprintf(stderr, "invar: error: %s\n", why);
            return INVAR_EXIT_INPUT;
        }
        device = info.device;
        in_process |= plugin_is_registered(plugin);  // a table in this process: no child can call it
    }
    if (!device) device = "all";
    if (!set) set = "all";
    if (!out) out = DEFAULT_KERNELS_OUT;
    bool set_known = strcmp(set, "all") == 0;
    for (const kernel_set_entry *e = kernel_sets(); e->set; e++) set_known |= !strcmp(e->set, set);
    if (!set_known)
        return cli_usage_error(&cmd, "--set: unknown kernel set '%s' (invariant, reference, "
                               "adversarial or all)", set);
    const op_entry *only = NULL;
    if (op_name && !(only = op_table_find(op_name))) {
        int code = cli_usage_error(&cmd, "--op: unknown op '%s'", op_name);
        list_ops(stderr);
        return code;
    }
    if (shape_label && !only) return cli_usage_error(&cmd, "--shape: needs --op (a label names a shape of one op)");
    if (shape_label && (rc = check_shape_label(&cmd, only, device, shape_label)) != CLI_GO_ON) return rc;
    o.shape_label = shape_label;

    host_make_dirs(out);
    char csv_path[4200];
    if (snprintf(csv_path, sizeof csv_path, "%s/kernels.csv", out) >= (int)sizeof csv_path)
        invar_die(INVAR_EXIT_INPUT, "kernels: --out %s: path too long", out);
    report rep = {.seed = o.seed, .progress = isatty(2) == 1, .started = host_seconds()};
    char why_csv[PATH_MAX + 128];
    rep.csv = csv_report_open(csv_path, kernels_header(), KERNELS_NCOLS, why_csv, sizeof why_csv);
    if (!rep.csv) invar_die(INVAR_EXIT_SYSTEM, "kernels: %s", why_csv);
    char coverage_path[4200];
    if (snprintf(coverage_path, sizeof coverage_path, "%s/coverage.csv", out) >= (int)sizeof coverage_path)
        invar_die(INVAR_EXIT_INPUT, "kernels: --out %s: path too long", out);
    rep.coverage_path = coverage_path;
    rep.coverage = fopen(coverage_path, "w");
    static const char *const coverage_header[] = {"set", "device", "path", "reached", "why_unreachable"};
    if (!rep.coverage || !csv_row_write(rep.coverage, coverage_header, 5))
        invar_die(INVAR_EXIT_SYSTEM, "kernels: %s: %s", coverage_path, strerror(errno));
    rep.every_shape = !o.quick && !shape_label && !plugin;
    o.on_shape = on_shape;
    o.on_skip = on_skip;
    o.user = &rep;

    printf("invar kernels: seed %" PRIu64 "%s, batch sizes M =", o.seed,
           o.quick ? " (quick)" : o.exhaustive ? " (exhaustive)" : "");
    int n_M;
    const int *Ms;
    kernel_check_default_batch_sizes(&o, &Ms, &n_M);
    for (int i = 0; i < n_M; i++) printf(" %d", Ms[i]);
    printf(" (capped per shape)%s%s\n", shape_label ? ", shape " : "", shape_label ? shape_label : "");

    char why[256] = "";
    bool want_cuda = matches(device, "cuda");
    bool have_cuda = want_cuda && cuda_device_available(why, sizeof why);
    // Skipped CUDA checks: every set name that could be registered for cuda, every shape.
    if (want_cuda && !have_cuda) {
        const char *names[] = {"invariant", "reference"};
        int skipped = 0;
        for (int s = 0; s < 2; s++) {
            if (!matches(set, names[s])) continue;
            for (const op_entry *op = op_table(); op->name; op++)
                if (!only || only == op) skipped += kernel_check_count_shapes(op->cuda_shapes, &o);
        }
        printf("SKIP: cuda kernel checks: %s (%d checks skipped)\n", why, skipped);
        rep.skipped += skipped;
    }

    if (plugin && !in_process) {
        if (strcmp(device, "cpu") == 0 || have_cuda) {
            plugin_run p = {.path = plugin, .device = device, .out = out, .info = &info, .o = &o, .threads = threads};
            check_plugin(&rep, &p, only);
        }
    } else if (plugin) {
        char name[PATH_MAX + 16];
        snprintf(name, sizeof name, "%s%s", PLUGIN_SET_PREFIX, plugin);
        check_set(&rep, name, device, threads, only, &o);
    } else {
        for (const kernel_set_entry *e = kernel_sets(); e->set; e++) {
            if (!matches(set, e->set) || !matches(device, e->device)) continue;
            if (strcmp(e->device, "cuda") == 0 && !have_cuda) continue;
            check_set(&rep, e->set, e->device, threads, only, &o);
        }
    }
    progress_clear(&rep);
    if (!csv_report_close(rep.csv, why_csv, sizeof why_csv))
        invar_die(INVAR_EXIT_SYSTEM, "kernels: %s", why_csv);
    if (fclose(rep.coverage) != 0)
        invar_die(INVAR_EXIT_SYSTEM, "kernels: closing %s: %s", coverage_path, strerror(errno));
    // As `invar run` renders its report, from the CSV alone (`invar report render` redoes it).
    if (!report_render_kernels(out, why_csv, sizeof why_csv))
        invar_die(INVAR_EXIT_SYSTEM, "kernels: rendering the report in %s: %s", out, why_csv);
    printf("reports: %s/{kernels.csv,junit.xml,summary.md,coverage.csv}\n", out);
    printf("%d passed, %d failed, %d skipped\n", rep.passed, rep.failed, rep.skipped);
    return rep.failed ? 1 : 0;
}
