// tests/test_plots.c — the invariance heatmap's data (reports/plots.h): each cell is the share of
// a config's requests that diverged at that batch size, and a config that took another config's
// run (merged_into: the same effective settings) shows that run's cells, as its verdict does,
// never 0%. gnuplot is replaced by a stand-in that draws nothing (the data file is what is
// checked), so the test runs where gnuplot is not installed.
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdbool.h>  // bool
#include <stdio.h>    // FILE, fopen, fgets, fprintf, snprintf, sscanf
#include <stdlib.h>   // mkdtemp, getenv, setenv, system
#include <string.h>   // strcmp
#include <sys/stat.h> // chmod
#include <time.h>     // time
#include <unistd.h>   // getpid

#include "../common/hash.h"             // invar_mix64
#include "../reports/csv_read.h"        // csv_table_read
#include "../reports/csv_report.h"      // csv_report_open, csv_report_row
#include "../reports/plots.h"           // plots_render
#include "../reports/report_schema.h"   // summary_header, divergence_header, *_NCOLS

#define PROMPTS 8
#define ROWS 4   // configs: owner, merged into owner, merged into the merged one, clean

static void put(const char *const *h, int n, const char **f, char store[][64], const char *col,
                const char *v) {
    for (int c = 0; c < n; c++)
        if (strcmp(h[c], col) == 0) {
            snprintf(store[c], 64, "%s", v);
            f[c] = store[c];
            return;
        }
    fail_msg("no column '%s'", col);
}

static void merged_config_shows_its_runs_cells(void **state) {
    (void)state;
    char dir[] = "/tmp/invar_test_plots_XXXXXX", path[256], err[1024];
    assert_non_null(mkdtemp(dir));
    // A gnuplot that draws nothing: only the data file is checked.
    snprintf(path, sizeof path, "%s/gnuplot", dir);
    FILE *g = fopen(path, "w");
    assert_non_null(g);
    fprintf(g, "#!/bin/sh\nexit 0\n");
    assert_int_equal(fclose(g), 0);
    assert_int_equal(chmod(path, 0755), 0);
    char env[4096];
    snprintf(env, sizeof env, "%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    assert_int_equal(setenv("PATH", env, 1), 0);

    const char *names[ROWS] = {"cpu/reference/a", "cpu/reference/a-forced",
                               "cpu/reference/a-forced-again", "cpu/invariant/b"};
    const char *into[ROWS] = {"", names[0], names[1], ""};
    const char *const *sh = summary_header();
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    csv_report *s = csv_report_open(path, sh, SUMMARY_NCOLS, err, sizeof err);
    assert_non_null(s);
    for (int r = 0; r < ROWS; r++) {
        static char store[SUMMARY_NCOLS][64];
        const char *f[SUMMARY_NCOLS];
        for (int c = 0; c < SUMMARY_NCOLS; c++) f[c] = "";
        put(sh, SUMMARY_NCOLS, f, store, "config", names[r]);
        put(sh, SUMMARY_NCOLS, f, store, "merged_into", into[r]);
        put(sh, SUMMARY_NCOLS, f, store, "verdict", "PASS");
        put(sh, SUMMARY_NCOLS, f, store, "prompts", "8");
        put(sh, SUMMARY_NCOLS, f, store, "batch_sizes", "1, 4, 8");
        assert_true(csv_report_row(s, f, err, sizeof err));
    }
    assert_true(csv_report_close(s, err, sizeof err));
    // The owner's divergences: a fresh random set of requests at bs=4 and bs=8.
    uint64_t seed = invar_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16));
    bool differs[2][PROMPTS] = {{false}};
    const char *const *dh = divergence_header();
    snprintf(path, sizeof path, "%s/divergence.csv", dir);
    csv_report *d = csv_report_open(path, dh, DIVERGENCE_NCOLS, err, sizeof err);
    assert_non_null(d);
    int any = 0;
    for (int b = 0; b < 2; b++)
        for (int q = 0; q < PROMPTS; q++) {
            if (invar_mix64(seed + (uint64_t)(b * PROMPTS + q)) % 3 != 0 && !(b == 0 && q == 0))
                continue;
            differs[b][q] = true;
            any++;
            static char store[DIVERGENCE_NCOLS][64];
            const char *f[DIVERGENCE_NCOLS];
            for (int c = 0; c < DIVERGENCE_NCOLS; c++) f[c] = "";
            char num[16];
            put(dh, DIVERGENCE_NCOLS, f, store, "config", names[0]);
            put(dh, DIVERGENCE_NCOLS, f, store, "batch_size", b == 0 ? "4" : "8");
            snprintf(num, sizeof num, "%d", q);
            put(dh, DIVERGENCE_NCOLS, f, store, "request", num);
            put(dh, DIVERGENCE_NCOLS, f, store, "step", "0");
            assert_true(csv_report_row(d, f, err, sizeof err));
        }
    assert_true(any > 0);
    assert_true(csv_report_close(d, err, sizeof err));

    snprintf(path, sizeof path, "%s/summary.csv", dir);
    csv_table *st = csv_table_read(path, false, err, sizeof err);
    snprintf(path, sizeof path, "%s/divergence.csv", dir);
    csv_table *dt = csv_table_read(path, false, err, sizeof err);
    assert_non_null(st);
    assert_non_null(dt);
    plot_inputs in = {.summary = st, .divergence = dt};
    assert_true(plots_render(dir, &in, NULL, err, sizeof err));

    // invariance_matrix.dat: "column row value label" per cell; columns 1, 4, 8, repeat.
    double cell[ROWS][4];
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < 4; c++) cell[r][c] = -1;
    snprintf(path, sizeof path, "%s/plots/invariance_matrix.dat", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256];
    while (fgets(line, sizeof line, f)) {
        int c, r;
        double v;
        if (sscanf(line, "%d %d %lf", &c, &r, &v) != 3) continue;
        assert_true(c >= 0 && c < 4 && r >= 0 && r < ROWS);
        cell[r][c] = v;
    }
    assert_int_equal(fclose(f), 0);
    for (int b = 0; b < 2; b++) {
        int n = 0;
        for (int q = 0; q < PROMPTS; q++) n += differs[b][q];
        double want = (double)n / PROMPTS;
        // The owner, and both configs that took its run (directly and through another).
        for (int r = 0; r < 3; r++)
            if (cell[r][b + 1] < want - 1e-9 || cell[r][b + 1] > want + 1e-9)
                fail_msg("%s at bs=%d: %.4f, expected %.4f (its run's)", names[r], b ? 8 : 4,
                         cell[r][b + 1], want);
        assert_true(cell[3][b + 1] == 0);
    }
    for (int r = 0; r < ROWS; r++) assert_true(cell[r][0] == 0 && cell[r][3] == 0);
    csv_table_free(st);
    csv_table_free(dt);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(merged_config_shows_its_runs_cells),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
