// reports/run_meta.c — DIR/meta.csv (reports/run_meta.h).
#include "run_meta.h"

#include <errno.h>          // errno
#include <limits.h>         // PATH_MAX
#include <stdlib.h>         // free
#include <stdio.h>          // FILE, fgets, fopen, snprintf
#include <string.h>         // strlen, strncmp, strchr, strcspn, strspn, strcat, strerror, strcmp
#include <time.h>           // time, gmtime_r, strftime
#include <unistd.h>         // gethostname, getcwd

#include "csv_report.h"     // csv_row_write
#include "report_file.h"    // report_file_open, report_file_commit
#include "../common/file_hash.h"  // invar_file_xxh64
#include "../common/source_id.h"  // invar_source_id, invar_build_defines

// ---------------------------------------------------------------------------------------------
// What the machine and the checkout say
// ---------------------------------------------------------------------------------------------

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
    snprintf(commit, sizeof commit, "%s", invar_source_id());
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
    put_row(rf.f, "build_defines", invar_build_defines());
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

// ---------------------------------------------------------------------------------------------
// The seal: the final report files' content hashes
// ---------------------------------------------------------------------------------------------

static const char *const sealed_files[] = {"summary.csv", "divergence.csv"};
#define SEAL_PREFIX "xxh64:"

static bool sealed_file_hash(const char *dir, const char *file, char *hex, int len, char *err,
                             int err_len) {
    char path[PATH_MAX];
    if (!report_path(path, sizeof path, dir, file)) {
        snprintf(err, (size_t)err_len, "%s/%s: path too long", dir, file);
        return false;
    }
    return file_xxh64(path, hex, len, err, err_len);
}

bool run_meta_seal(const char *dir, char *err, int len) {
    char path[PATH_MAX];
    if (!report_path(path, sizeof path, dir, "meta.csv")) {
        snprintf(err, (size_t)len, "%s/meta.csv: path too long", dir);
        return false;
    }
    enum { NSEALED = sizeof sealed_files / sizeof sealed_files[0] };
    char hex[NSEALED][32];
    for (int i = 0; i < NSEALED; i++)
        if (!sealed_file_hash(dir, sealed_files[i], hex[i], sizeof hex[i], err, len)) return false;
    csv_table *meta = csv_table_read(path, false, err, len);
    if (!meta) return false;
    report_file rf;
    if (!report_file_open(&rf, path, err, len)) {
        csv_table_free(meta);
        return false;
    }
    put_row(rf.f, "key", "value");
    for (int r = 0; r < meta->nrows; r++) {
        const char *key = csv_get(meta, r, "key");
        if (strncmp(key, SEAL_PREFIX, strlen(SEAL_PREFIX)) != 0)
            put_row(rf.f, key, csv_get(meta, r, "value"));
    }
    csv_table_free(meta);
    for (int i = 0; i < NSEALED; i++) {
        char key[64];
        snprintf(key, sizeof key, SEAL_PREFIX "%s", sealed_files[i]);
        put_row(rf.f, key, hex[i]);
    }
    return report_file_commit(&rf, err, len);
}

bool run_meta_verify(const char *dir, const csv_table *meta, bool sealed_required, char *err,
                     int len) {
    int k = csv_col(meta, "key");
    for (int r = 0; r < meta->nrows; r++)
        for (int q = 0; q < r; q++)
            if (strcmp(csv_at(meta, r, k), csv_at(meta, q, k)) == 0) {
                snprintf(err, (size_t)len, "%s/meta.csv:%d: %s: given twice (also line %d): "
                         "not a meta.csv invar wrote", dir, r + 2, csv_at(meta, r, k), q + 2);
                return false;
            }
    for (size_t i = 0; i < sizeof sealed_files / sizeof sealed_files[0]; i++) {
        char key[64], hex[32];
        snprintf(key, sizeof key, SEAL_PREFIX "%s", sealed_files[i]);
        const char *want = run_meta_get(meta, key);
        if (!want[0]) {
            if (!sealed_required) continue;
            snprintf(err, (size_t)len, "%s/meta.csv: %s: missing: the run never finished (invar "
                     "run --resume %s), or an invar without sealed reports wrote it", dir, key,
                     dir);
            return false;
        }
        if (!sealed_file_hash(dir, sealed_files[i], hex, sizeof hex, err, len)) return false;
        if (strcmp(hex, want) != 0) {
            snprintf(err, (size_t)len, "%s/%s: content hash %s, meta.csv's %s says %s: the file "
                     "was changed after invar wrote it", dir, sealed_files[i], hex, key, want);
            return false;
        }
    }
    return true;
}
