// tests/test_cuda_tp.c — tensor parallelism on two GPUs (kernels/cuda/collective.cu): each CUDA
// set's all-reduce over NCCL gives the CPU set's bits for the same inputs (the invariant set's
// rank-order fp32 sum, the adversarial set's size-hashed bf16 ring), the reference set's
// ncclAllReduce is within one bf16 rounding of the exact sum, every rank ends with the same
// bits, and all_gather_columns brings every rank's uneven column range to every rank. Ranks are
// threads, rank r's set on GPU r. With fewer than two GPUs every test is skipped with a visible
// "SKIP:" line.
#include <stdarg.h>                        // cmocka
#include <stddef.h>                        // cmocka
#include <stdint.h>                        // uint16_t, uint64_t
#include <setjmp.h>                        // cmocka
#include <cmocka.h>                        // cmocka_unit_test, skip, assert_*

#include <math.h>                          // fabs
#include <stdio.h>                         // printf
#include <stdlib.h>                        // free
#include <string.h>                        // memcmp

#include "../common/check.h"               // invar_malloc, invar_calloc
#include "../common/rank_threads.h"        // rank_threads_run
#include "../kernels/bf16.h"               // float_to_bf16, bf16_to_float
#include "../kernels/cpu/collective.h"     // tp_comm_group_*
#include "../kernels/ops.h"                // ops_set
#include "../sets/registry.h"              // kernel_set_create, kernel_set_create_for_rank, cuda_device_count
#include "test_util.h"                     // test_rng_make, test_nonzero

enum { T = 2 };

// Rank r's buffer on its device (or the host for the CPU sets), and the set that owns it.
typedef struct {
    ops_set *ops[T];
    tp_comm_group *group;
    void *buf[T];
    long n;             // all_reduce: elements
    int rows;           // all_gather_columns
    long ld, begin[T], end[T];
    bool gather;
} ranks_job;

static void run_rank(void *arg, int rank) {
    ranks_job *j = arg;
    ops_set *ops = j->ops[rank];
    if (ops->bind_thread) ops->bind_thread(ops);
    tp_comm *comm = tp_comm_group_rank(j->group, rank);
    if (j->gather)
        ops->all_gather_columns(ops, comm, j->buf[rank], j->rows, j->ld, j->begin[rank],
                                j->end[rank]);
    else
        ops->all_reduce(ops, comm, j->buf[rank], j->n);
    ops->sync(ops);
}

// Each rank's message of n values (rank r's from seed + r, at its own magnitude).
static uint16_t *messages(long n, uint64_t seed) {
    uint16_t *h = invar_malloc((size_t)T * (size_t)(n > 0 ? n : 1) * 2, "test messages");
    for (int r = 0; r < T; r++) {
        test_rng g = test_rng_make(seed + (uint64_t)r);
        for (long i = 0; i < n; i++) h[r * n + i] = float_to_bf16(test_nonzero(&g, 0.5f + 3.0f * r));
    }
    return h;
}

// The named set's all-reduce of `in` ([T][n]) on `device` ("cpu": T threads over the CPU
// communicator; "cuda": GPU r per rank over NCCL); out receives every rank's result [T][n].
static void all_reduce_on(const char *set, const char *device, const uint16_t *in, long n,
                          uint16_t *out) {
    ranks_job j = {.n = n};
    size_t bytes = (size_t)(n > 0 ? n : 1) * 2;
    for (int r = 0; r < T; r++) {
        j.ops[r] = kernel_set_create_for_rank(set, device, 1, r);
        assert_non_null(j.ops[r]);
        if (j.ops[r]->bind_thread) j.ops[r]->bind_thread(j.ops[r]);
        j.buf[r] = j.ops[r]->alloc(j.ops[r], bytes, "test message");
        j.ops[r]->upload(j.ops[r], j.buf[r], in + r * n, (size_t)n * 2);
    }
    if (j.ops[0]->bind_thread) j.ops[0]->bind_thread(j.ops[0]);
    j.group = tp_comm_group_create(T);
    if (j.ops[0]->open_group) j.ops[0]->open_group(j.ops, T, j.group);
    rank_threads_run(T, run_rank, &j);
    tp_comm_group_destroy(j.group);
    for (int r = T - 1; r >= 0; r--) {  // rank 0 last: this thread ends on GPU 0
        if (j.ops[r]->bind_thread) j.ops[r]->bind_thread(j.ops[r]);
        j.ops[r]->download(j.ops[r], out + r * n, j.buf[r], (size_t)n * 2);
        j.ops[r]->release(j.ops[r], j.buf[r]);
        j.ops[r]->destroy(j.ops[r]);
    }
}

// Message sizes: fewer values than ranks, odd, a V2-Lite row, many rows (NCCL's protocols).
static const long sizes[] = {1, 61, 2048, 61 * 1024 + 7, 2048 * 512};

static bool have_two_gpus(void) { return cuda_device_count() >= T; }

static void test_cuda_sets_match_cpu_bits(void **state) {
    (void)state;
    if (!have_two_gpus()) skip();
    const char *sets[] = {"invariant", "adversarial"};
    for (int s = 0; s < 2; s++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            long n = sizes[k];
            uint16_t *in = messages(n, 1500 + k);
            uint16_t *cpu = invar_malloc((size_t)T * n * 2, "cpu result");
            uint16_t *gpu = invar_malloc((size_t)T * n * 2, "gpu result");
            all_reduce_on(sets[s], "cpu", in, n, cpu);
            all_reduce_on(sets[s], "cuda", in, n, gpu);
            for (int r = 0; r < T; r++) {
                if (memcmp(gpu + r * n, cpu, (size_t)n * 2) != 0) {
                    long i = 0;
                    while (gpu[r * n + i] == cpu[i]) i++;
                    fail_msg("%s all_reduce, n=%ld: rank %d's element %ld is 0x%04x on CUDA, "
                             "0x%04x on the CPU", sets[s], n, r, i, gpu[r * n + i], cpu[i]);
                }
            }
            free(in);
            free(cpu);
            free(gpu);
        }
}

// ncclAllReduce in bf16: within a rounding or two of the exact sum, and the same on both ranks.
static void test_reference_nccl_accurate(void **state) {
    (void)state;
    if (!have_two_gpus()) skip();
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        long n = sizes[k];
        uint16_t *in = messages(n, 2500 + k);
        uint16_t *gpu = invar_malloc((size_t)T * n * 2, "gpu result");
        all_reduce_on("reference", "cuda", in, n, gpu);
        assert_memory_equal(gpu, gpu + n, (size_t)n * 2);
        for (long i = 0; i < n; i++) {
            double exact = (double)bf16_to_float(in[i]) + bf16_to_float(in[n + i]);
            double got = bf16_to_float(gpu[i]);
            if (fabs(got - exact) > fabs(exact) * (1.0 / 128) + 1e-30)
                fail_msg("reference all_reduce, n=%ld, element %ld: %g, exact %g", n, i, got, exact);
        }
        free(in);
        free(gpu);
    }
}

// Uneven column ranges (rank 0 six columns, rank 1 five) in rows with a gap past them.
static void test_all_gather_columns_uneven(void **state) {
    (void)state;
    if (!have_two_gpus()) skip();
    const int rows = 3;
    const long ld = 13, cols = 11;
    ranks_job j = {.gather = true, .rows = rows, .ld = ld, .begin = {0, 6}, .end = {6, cols}};
    float *want = invar_malloc((size_t)rows * ld * sizeof(float), "gather expected");
    for (long i = 0; i < rows * ld; i++) want[i] = (float)i + 0.25f;
    float *host = invar_malloc((size_t)rows * ld * sizeof(float), "gather rank input");
    for (int r = 0; r < T; r++) {
        j.ops[r] = kernel_set_create_for_rank("invariant", "cuda", 1, r);
        assert_non_null(j.ops[r]);
        j.ops[r]->bind_thread(j.ops[r]);
        // A rank holds only its own columns; the others (and the gap) hold -1 until gathered.
        for (long row = 0; row < rows; row++)
            for (long c = 0; c < ld; c++)
                host[row * ld + c] = c >= j.begin[r] && c < j.end[r] ? want[row * ld + c] : -1.0f;
        j.buf[r] = j.ops[r]->alloc(j.ops[r], (size_t)rows * ld * sizeof(float), "gather buffer");
        j.ops[r]->upload(j.ops[r], j.buf[r], host, (size_t)rows * ld * sizeof(float));
    }
    j.ops[0]->bind_thread(j.ops[0]);
    j.group = tp_comm_group_create(T);
    j.ops[0]->open_group(j.ops, T, j.group);
    rank_threads_run(T, run_rank, &j);
    tp_comm_group_destroy(j.group);
    for (int r = T - 1; r >= 0; r--) {  // rank 0 last: this thread ends on GPU 0
        j.ops[r]->bind_thread(j.ops[r]);
        j.ops[r]->download(j.ops[r], host, j.buf[r], (size_t)rows * ld * sizeof(float));
        for (long row = 0; row < rows; row++) {
            assert_memory_equal(host + row * ld, want + row * ld, (size_t)cols * sizeof(float));
            for (long c = cols; c < ld; c++) assert_true(host[row * ld + c] == -1.0f);  // the gap
        }
        j.ops[r]->release(j.ops[r], j.buf[r]);
        j.ops[r]->destroy(j.ops[r]);
    }
    free(host);
    free(want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_sets_match_cpu_bits),
        cmocka_unit_test(test_reference_nccl_accurate),
        cmocka_unit_test(test_all_gather_columns_uneven),
    };
    int gpus = cuda_device_count();
    if (gpus < T) {
        printf("SKIP: %d tensor-parallel CUDA tests: they need %d GPUs, %d visible\n",
               (int)(sizeof tests / sizeof tests[0]), T, gpus);
        fflush(stdout);  // before cmocka's own report, so the reason is never lost in a pipe
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
