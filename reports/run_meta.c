// reports/run_meta.c — DIR/meta.csv (reports/run_meta.h).
#include "run_meta.h"

#include <errno.h>          // errno
#include <limits.h>         // PATH_MAX
#include <stdlib.h>         // free
#include <stdio.h>          // FILE, popen, pclose, fgets, fopen, fread, snprintf
#include <string.h>         // strlen, strncmp, strchr, strcspn, strspn, strcat, strerror, strcmp
#include <time.h>           // time, gmtime_r, strftime
#include <unistd.h>         // gethostname, getcwd

#include "csv_report.h"     // csv_row_write
#include "report_file.h"    // report_file_open, report_file_commit
#include "../common/file_hash.h"  // invar_file_xxh64

// ---------------------------------------------------------------------------------------------
// What the machine and the checkout say
// ---------------------------------------------------------------------------------------------

// First line a command prints, without its newline; "" when it fails or prints nothing.
static void command_line_output(const char *cmd, char *buf, int len) {
    buf[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (!fgets(buf, len, p)) buf[0] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    char rest[256];
    while (fgets(rest, sizeof rest, p)) {}  // drain, so the child never blocks on a full pipe
    if (pclose(p) != 0) buf[0] = '\0';
}

// HEAD's commit, "-dirty" when tracked files differ from it (the report is then not exactly
// reproducible from the commit), "unknown" outside a git checkout.
static void git_commit(char *buf, int len) {
    command_line_output("git rev-parse HEAD 2>/dev/null", buf, len);
    if (!buf[0]) {
        snprintf(buf, (size_t)len, "unknown");
        return;
    }
    char dirty[64];
    command_line_output("git status --porcelain --untracked-files=no 2>/dev/null | head -1",
                        dirty, sizeof dirty);
    if (dirty[0] && strlen(buf) + 7 < (size_t)len) strcat(buf, "-dirty");
}

static void cpu_model(char *buf, int len) {
    snprintf(buf, (size_t)len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *colon = strchr(line, ':');
        if (!colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, (size_t)len, "%s", colon);
        break;
    }
    fclose(f);
}

static bool file_xxh64(const char *path, char *hex, int len, char *err, int err_len) {
    uint64_t h;
    if (!invar_file_xxh64(path, -1, &h, err, err_len)) return false;
    snprintf(hex, (size_t)len, "%016llx", (unsigned long long)h);
    return true;
}

// The command line as a shell would need it back: arguments with odd characters single-quoted.
// Written whole however long (paths of up to PATH_MAX characters), so --resume can read it back;
// NULL when memory runs out.
static char *join_argv(int argc, char *const *argv) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool plain = a[0] != '\0' && a[strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                                                 "VWXYZ0123456789-_=./:,+@%")] == '\0';
        if (i > 0) fputc(' ', f);
        if (plain) {
            fputs(a, f);
            continue;
        }
        fputc('\'', f);
        for (const char *p = a; *p; p++) {
            if (*p == '\'') fputs("'\\''", f);
            else fputc(*p, f);
        }
        fputc('\'', f);
    }
    bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

// ---------------------------------------------------------------------------------------------
// meta.csv
// ---------------------------------------------------------------------------------------------

// A failed write is caught by report_file_commit (the stream's error flag).
static void put_row(FILE *f, const char *key, const char *value) {
    const char *row[2] = {key, value && value[0] ? value : "-"};
    csv_row_write(f, row, 2);
}

bool run_meta_write(const char *dir, const run_meta_input *in, char *err, int len) {
    char commit[128], date[64], host[256], cpu[256], hash[32] = "-", seed[32] = "-";
    char cwd[PATH_MAX];
    git_commit(commit, sizeof commit);
    time_t now = time(NULL);
    struct tm utc;
    if (now == (time_t)-1 || !gmtime_r(&now, &utc) ||
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc) == 0)
        snprintf(date, sizeof date, "unknown");
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    const char *device = in->device && in->device[0] ? in->device : "cpu";
    bool on_cpu = strcmp(device, "cpu") == 0;
    cpu_model(cpu, sizeof cpu);
    if (in->case_path && !file_xxh64(in->case_path, hash, sizeof hash, err, len)) return false;
    if (in->has_seed) snprintf(seed, sizeof seed, "%llu", (unsigned long long)in->seed);
    // Relative paths of the command line and the case file mean what they meant here.
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(err, (size_t)len, "getcwd failed: %s", strerror(errno));
        return false;
    }

    char path[PATH_MAX];
    if (!report_path(path, sizeof path, dir, "meta.csv")) {
        snprintf(err, (size_t)len, "%s/meta.csv: path too long", dir);
        return false;
    }
    char *cmd = join_argv(in->argc, in->argv);
    if (!cmd) {
        snprintf(err, (size_t)len, "%s: out of memory for the command line", path);
        return false;
    }
    report_file rf;
    if (!report_file_open(&rf, path, err, len)) {
        free(cmd);
        return false;
    }
    put_row(rf.f, "key", "value");
    put_row(rf.f, "invar_commit", commit);
    put_row(rf.f, "date_utc", date);
    put_row(rf.f, "host", host);
    put_row(rf.f, "device", device);
    put_row(rf.f, "cpu_model", cpu);
    put_row(rf.f, "driver", on_cpu ? "-" : in->driver);
    put_row(rf.f, "cuda_runtime", on_cpu ? "-" : in->cuda_runtime);
    put_row(rf.f, "cublas", on_cpu ? "-" : in->cublas);
    put_row(rf.f, "compute_capability", on_cpu ? "-" : in->compute_capability);
    put_row(rf.f, "case_file", in->case_path);
    put_row(rf.f, "case_xxh64", hash);
    put_row(rf.f, "command_line", cmd);
    put_row(rf.f, "seed", seed);
    put_row(rf.f, "working_directory", cwd);
    for (int i = 0; i < in->n_extra; i++) put_row(rf.f, in->extra_keys[i], in->extra_values[i]);
    free(cmd);
    return report_file_commit(&rf, err, len);
}

const char *run_meta_get(const csv_table *meta, const char *key) {
    int k = csv_col(meta, "key"), v = csv_col(meta, "value");
    for (int r = 0; meta && r < meta->nrows; r++)
        if (strcmp(csv_at(meta, r, k), key) == 0) return csv_at(meta, r, v);
    return "";
}
