// tests/fuzz/report_diff.c — fuzz target: `invar report diff BASE NEW` (reports/baseline_diff.c)
// over two report directories made from one input: its first byte picks the report file
// (summary.csv, kernels.csv, bench_gemm.csv, bench_mla.csv), the rest is BASE's copy, a line
// "%%", NEW's copy.
#include <dirent.h>                       // opendir, readdir, closedir
#include <fcntl.h>                        // open, O_WRONLY, O_CREAT
#include <sys/stat.h>                     // mkdir

#include "../../reports/baseline_diff.h"  // baseline_diff
#include "fuzz_input.h"                   // fuzz_split, fuzz_write_all, fuzz_require

static void write_file(const char *dir, const char *name, const uint8_t *data, size_t size) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    fuzz_require(fd >= 0, "open");
    fuzz_write_all(fd, data, size);
    fuzz_close(fd);
}

// Removes `dir` and the files in it (baseline_diff writes only files).
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    fuzz_require(d != NULL, "opendir");
    for (struct dirent *e; (errno = 0, e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        fuzz_require(unlink(path) == 0, "unlink");
    }
    fuzz_require(errno == 0, "readdir");
    fuzz_require(closedir(d) == 0, "closedir");
    fuzz_require(rmdir(dir) == 0, "rmdir");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    static const char *const files[] = {"summary.csv", "kernels.csv", "bench_gemm.csv",
                                        "bench_mla.csv"};
    const char *file = files[data[0] % 4];
    size_t base_len, new_len;
    const uint8_t *new_data;
    fuzz_split(data + 1, size - 1, "\n%%\n", &base_len, &new_data, &new_len);

    const char *tmp = getenv("TMPDIR");
    char root[256], base[300], new_dir[300], err[2048];
    snprintf(root, sizeof root, "%s/invar_fuzz_diff_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    fuzz_require(mkdtemp(root) != NULL, "mkdtemp");
    snprintf(base, sizeof base, "%s/base", root);
    snprintf(new_dir, sizeof new_dir, "%s/new", root);
    fuzz_require(mkdir(base, 0700) == 0 && mkdir(new_dir, 0700) == 0, "mkdir");
    write_file(base, file, data + 1, base_len);
    write_file(new_dir, file, new_data, new_len);

    diff_result r;
    bool partial = (data[0] >> 7) & 1;  // the file choice uses the low bits
    int rc = baseline_diff(base, new_dir, BASELINE_DIFF_DEFAULT_THRESHOLD, partial, NULL, &r, err,
                           sizeof err);
    fuzz_require(rc >= 0 && rc <= 3, "baseline_diff returned an undocumented code");
    remove_dir(base);
    remove_dir(new_dir);
    fuzz_require(rmdir(root) == 0, "rmdir");
    return 0;
}
