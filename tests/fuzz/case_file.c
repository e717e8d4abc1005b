// tests/fuzz/case_file.c — fuzz target: a case file (harness/run/case_file.c), and for an
// accepted one the matrix it expands to.
#include <stdlib.h>                   // free, calloc

#include "../../harness/run/case_file.h" // case_file_load, case_max_*
#include "../../harness/run/matrix.h" // matrix_count, matrix_expand
#include "fuzz_input.h"               // fuzz_memfd, fuzz_close, fuzz_require

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[2048];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    case_file *c = calloc(1, sizeof *c);
    fuzz_require(c != NULL, "calloc");
    if (case_file_load(path, c, err, sizeof err)) {
        (void)case_max_batch_size(c);
        (void)case_max_budget(c);
        (void)case_request_count(c);
        (void)case_max_model_len(c);
        long n = matrix_count(c->axes);
        // A matrix too large to expand is the runner's to refuse; the parser's job ends here.
        if (n > 0 && n <= 4096) {
            run_config *configs = calloc((size_t)n, sizeof *configs);
            fuzz_require(configs != NULL, "calloc");
            matrix_expand(c->axes, configs);
            free(configs);
        }
    }
    free(c);
    fuzz_close(fd);
    return 0;
}
