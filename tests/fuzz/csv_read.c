// tests/fuzz/csv_read.c — fuzz target: a report CSV read back (reports/csv_read.c), every
// cell looked up by column name and as a number, as the report writers do.
#include "../../reports/csv_read.h"  // csv_table_read, csv_get, csv_number
#include "fuzz_input.h"              // fuzz_memfd, fuzz_close

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[1024];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    csv_table *t = csv_table_read(path, false, err, sizeof err);
    if (t) {
        for (int r = 0; r < t->nrows; r++) {
            for (int col = 0; col < t->ncols; col++) {
                double v;
                (void)csv_number(csv_get(t, r, t->header[col]), &v);
            }
            (void)csv_at(t, r, -1);
        }
        static const char *const names[] = {"config", "name", NULL};
        (void)csv_col_any(t, names);
        csv_table_free(t);
    }
    fuzz_close(fd);
    return 0;
}
