// tests/test_util.h — helpers shared by the unit tests (header-only: each test binary links
// only its own test_*.c): seeded random fills that never produce zeros, output poisoning, the
// "every element written" check, a bitwise comparison that says where two buffers differ, the
// invariant CPU set at several thread counts, and the row-invariance check.
//
// Poison is the all-ones bit pattern: a NaN as bf16 (0xFFFF) and as fp32 (0xFFFFFFFF), -1 as
// int32. An element still all ones after an op ran was not written.
#ifndef INVAR_TESTS_TEST_UTIL_H
#define INVAR_TESTS_TEST_UTIL_H

#include <stdint.h>                 // uint64_t, int32_t
#include <stdio.h>                  // fprintf
#include <stdlib.h>                 // malloc, abort
#include <string.h>                 // memset, memcmp

#include "../kernels/bf16.h"        // float_to_bf16
#include "../kernels/cpu/inv_cpu.h" // inv_cpu_create
#include "../kernels/ops.h"         // bf16, ops_set
#include "../common/hash.h"             // invar_mix64, invar_uniform

// ---------------------------------------------------------------------------------------------
// Random data
// ---------------------------------------------------------------------------------------------

// A counter-based stream: value i of stream `seed` is a pure function of (seed, i).
typedef struct {
    uint64_t seed, counter;
} test_rng;

static inline test_rng test_rng_make(uint64_t seed) { return (test_rng){invar_mix64(seed), 0}; }

// Uniform in (0, 1), never 0 or 1.
static inline float test_uniform(test_rng *r) {
    return invar_uniform(invar_mix64(r->seed ^ invar_mix64(r->counter++)));
}

// Uniform in [-scale, -scale/16] ∪ [scale/16, scale]: never zero, never tiny.
static inline float test_nonzero(test_rng *r, float scale) {
    float u = test_uniform(r);                          // (0, 1)
    float magnitude = scale * (0.0625f + 0.9375f * test_uniform(r));
    return u < 0.5f ? -magnitude : magnitude;
}

// Random integer in [0, n).
static inline int test_below(test_rng *r, int n) {
    int v = (int)(test_uniform(r) * (float)n);
    return v < n ? v : n - 1;
}

static inline void test_fill_bf16(bf16 *x, long n, uint64_t seed, float scale) {
    test_rng r = test_rng_make(seed);
    for (long i = 0; i < n; i++) x[i] = float_to_bf16(test_nonzero(&r, scale));
}

static inline void test_fill_f32(float *x, long n, uint64_t seed, float scale) {
    test_rng r = test_rng_make(seed);
    for (long i = 0; i < n; i++) x[i] = test_nonzero(&r, scale);
}

// Random int32 in [lo, hi].
static inline void test_fill_i32(int32_t *x, long n, uint64_t seed, int32_t lo, int32_t hi) {
    test_rng r = test_rng_make(seed);
    for (long i = 0; i < n; i++) x[i] = lo + test_below(&r, hi - lo + 1);
}

// ---------------------------------------------------------------------------------------------
// Allocation, poison, written check
// ---------------------------------------------------------------------------------------------

// malloc that aborts the test on failure (test code only; kernels use invar_malloc).
static inline void *test_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_alloc: out of memory for %zu bytes\n", bytes);
        abort();
    }
    return p;
}

static inline void test_poison(void *p, size_t bytes) { memset(p, 0xFF, bytes); }

// Number of elements (of elem_size bytes) that still hold the poison pattern.
static inline long test_count_poisoned(const void *p, size_t elem_size, long n) {
    const unsigned char *b = p;
    long count = 0;
    for (long i = 0; i < n; i++) {
        size_t j = 0;
        while (j < elem_size && b[(size_t)i * elem_size + j] == 0xFF) j++;
        count += j == elem_size;
    }
    return count;
}

static inline long test_unwritten_bf16(const bf16 *x, long n) {
    return test_count_poisoned(x, sizeof *x, n);
}
static inline long test_unwritten_f32(const float *x, long n) {
    return test_count_poisoned(x, sizeof *x, n);
}
static inline long test_unwritten_i32(const int32_t *x, long n) {
    return test_count_poisoned(x, sizeof *x, n);
}

// ---------------------------------------------------------------------------------------------
// Bitwise comparison
// ---------------------------------------------------------------------------------------------

// True when the buffers are bitwise equal; otherwise prints the first differing element
// (elem_size-byte elements) under `what` and returns false.
static inline int test_same_bits(const void *a, const void *b, size_t elem_size, long n,
                                 const char *what) {
    if (memcmp(a, b, elem_size * (size_t)n) == 0) return 1;
    const unsigned char *x = a, *y = b;
    for (long i = 0; i < n; i++)
        if (memcmp(x + (size_t)i * elem_size, y + (size_t)i * elem_size, elem_size) != 0) {
            fprintf(stderr, "%s: element %ld of %ld differs\n", what, i, n);
            break;
        }
    return 0;
}

// The sum of n fp32 terms in the CPU set's one order (kernels/cpu/lanes.h), written plainly: lane
// l holds the terms k ≡ l (mod 8) in increasing k, the lanes meet in lanes.h's fixed tree, then
// the n mod 8 tail is added one term at a time. The order tests hold a kernel's bits to it.
static inline float test_lanes_order_sum(const float *term, int n) {
    float lane[8] = {0};
    int k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) lane[l] += term[k + l];
    float sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    for (; k < n; k++) sum += term[k];
    return sum;
}

// ---------------------------------------------------------------------------------------------
// The invariant CPU set at several thread counts
// ---------------------------------------------------------------------------------------------

// Results must not depend on the thread count either, so the CPU op tests run every op on sets
// with 1 .. TEST_N_THREADS threads. A test binary makes them once: pass test_cpu_sets_setup and
// test_cpu_sets_teardown to cmocka_run_group_tests (or call them from its own fixtures).
enum { TEST_N_THREADS = 4 };

// The sets live here, not in each test, so that one fixture serves every test binary.
static inline ops_set **test_cpu_sets(void) {
    static ops_set *sets[TEST_N_THREADS];
    return sets;
}

// The invariant CPU set with i + 1 threads (0 <= i < TEST_N_THREADS).
static inline ops_set *test_cpu_set(int i) { return test_cpu_sets()[i]; }

static inline int test_cpu_sets_setup(void **state) {
    (void)state;
    for (int i = 0; i < TEST_N_THREADS; i++) test_cpu_sets()[i] = inv_cpu_create(i + 1);
    return 0;
}

static inline int test_cpu_sets_teardown(void **state) {
    (void)state;
    for (int i = 0; i < TEST_N_THREADS; i++) test_cpu_set(i)->destroy(test_cpu_set(i));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Row invariance: one row alone vs the same row inside batches
// ---------------------------------------------------------------------------------------------

// An op on M dense rows: reads M input rows from `in`, writes M output rows to `out` (host
// memory; the callback uploads/downloads if its set needs it), on kernel set number `set`.
typedef void (*test_rows_fn)(void *ctx, int set, const void *in, void *out, int M);
// Fills `bytes` of input rows with random data from `seed`.
typedef void (*test_fill_fn)(void *rows, size_t bytes, uint64_t seed);

static inline void test_fill_bytes_bf16(void *rows, size_t bytes, uint64_t seed) {
    test_fill_bf16(rows, (long)(bytes / sizeof(bf16)), seed, 1.0f);
}

static inline void test_fill_bytes_f32(void *rows, size_t bytes, uint64_t seed) {
    test_fill_f32(rows, (long)(bytes / sizeof(float)), seed, 4.0f);
}

typedef struct {
    const char *what;        // op name for messages
    test_rows_fn run;
    void *ctx;
    test_fill_fn fill;
    size_t in_row_bytes, out_row_bytes, out_elem_bytes;
    int n_sets;              // run() is called with set = 0 .. n_sets-1
    uint64_t seed;
} test_row_check;

// The batch sizes most ops check a row inside: the smallest, odd ones (tails) and ones past a
// lane block.
static const int test_batch_sizes[] = {2, 3, 7, 16, 64};
enum { TEST_N_BATCH_SIZES = (int)(sizeof test_batch_sizes / sizeof test_batch_sizes[0]) };

// Computes a random row alone (M = 1, set 0), then inside batches of each size in `sizes` at
// the first, middle and last position, surrounded by other random rows, on every set, and
// compares the row's output BITWISE. Also checks every output element of every run was
// written. Returns the number of failures (each printed); the caller asserts it is 0.
static inline long test_check_row_invariance(const test_row_check *c, const int *sizes,
                                             int n_sizes) {
    int max_m = 1;
    for (int i = 0; i < n_sizes; i++) max_m = sizes[i] > max_m ? sizes[i] : max_m;
    unsigned char *row = test_alloc(c->in_row_bytes), *alone = test_alloc(c->out_row_bytes);
    unsigned char *in = test_alloc(c->in_row_bytes * (size_t)max_m);
    unsigned char *out = test_alloc(c->out_row_bytes * (size_t)max_m);
    long out_elems_per_row = (long)(c->out_row_bytes / c->out_elem_bytes), failures = 0;
    c->fill(row, c->in_row_bytes, c->seed);
    test_poison(alone, c->out_row_bytes);
    c->run(c->ctx, 0, row, alone, 1);
    if (test_count_poisoned(alone, c->out_elem_bytes, out_elems_per_row) != 0) {
        fprintf(stderr, "%s: output of the row alone not fully written\n", c->what);
        failures++;
    }
    for (int i = 0; i < n_sizes; i++) {
        int M = sizes[i], positions[3] = {0, M / 2, M - 1};
        for (int p = 0; p < 3; p++)
            for (int s = 0; s < c->n_sets; s++) {
                c->fill(in, c->in_row_bytes * (size_t)M,
                        c->seed + 1000 + 37u * (uint64_t)i + 5u * (uint64_t)p + (uint64_t)s);
                memcpy(in + c->in_row_bytes * (size_t)positions[p], row, c->in_row_bytes);
                test_poison(out, c->out_row_bytes * (size_t)M);
                c->run(c->ctx, s, in, out, M);
                if (test_count_poisoned(out, c->out_elem_bytes, out_elems_per_row * M) != 0) {
                    fprintf(stderr, "%s: M=%d set=%d: output not fully written\n", c->what, M, s);
                    failures++;
                }
                if (memcmp(out + c->out_row_bytes * (size_t)positions[p], alone,
                           c->out_row_bytes) != 0) {
                    fprintf(stderr, "%s: row at %d of M=%d on set %d differs from the row alone\n",
                            c->what, positions[p], M, s);
                    failures++;
                }
            }
    }
    free(out);
    free(in);
    free(alone);
    free(row);
    return failures;
}

#endif
