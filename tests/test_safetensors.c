// tests/test_safetensors.c — the safetensors reader: dtype conversions exact against
// independent formulas (BF16, F16, F32, FP8 E4M3 with 128x128 block scales), every element
// written, and corrupt files (truncated at every length, bad header lengths, non-JSON, wrong
// dtypes, shapes and offsets, random byte flips) refused with a message and never a crash.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test
#include <math.h>                   // ldexp, isnan
#include <stdio.h>                  // fopen, fwrite, snprintf
#include <stdlib.h>                 // mkdtemp, free
#include <string.h>                 // strstr, strlen, memcpy
#include <unistd.h>                 // unlink, rmdir

#include "../engine/safetensors.h"  // st_open, st_find, st_to_bf16, st_fp8_dequant_bf16
#include "test_util.h"              // test_fill_*, test_poison, test_unwritten_*, test_alloc

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/invar_test_st_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

// ---------------------------------------------------------------------------------------------
// Writing test files
// ---------------------------------------------------------------------------------------------

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

// A file made of the 8-byte length of `header`, `header` and `data_bytes` bytes of data.
// Returns the whole file in a malloc'd buffer (size in *size) and writes it to `path`.
static unsigned char *make_file(const char *path, const char *header, const void *data,
                                size_t data_bytes, size_t *size) {
    size_t h = strlen(header);
    *size = 8 + h + data_bytes;
    unsigned char *buf = test_alloc(*size);
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)h >> (8 * b));
    memcpy(buf + 8, header, h);
    if (data_bytes) memcpy(buf + 8 + h, data, data_bytes);
    write_bytes(path, buf, *size);
    return buf;
}

static void path_of(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", dir, name); }

// Opening must fail with a message naming the file (and, when given, mentioning `needle`).
static void expect_refused(const char *path, const char *needle) {
    st_file f;
    char err[512] = "";
    bool ok = st_open(path, &f, err, sizeof err);
    if (ok) st_close(&f);
    if (ok || !strstr(err, path) || (needle && !strstr(err, needle)))
        fprintf(stderr, "file %s: ok=%d err='%s' (wanted '%s')\n", path, ok, err, needle ? needle : "");
    assert_false(ok);
    assert_non_null(strstr(err, path));
    if (needle) assert_non_null(strstr(err, needle));
}

// ---------------------------------------------------------------------------------------------
// Reference conversions, written from the format definitions
// ---------------------------------------------------------------------------------------------

static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static double ref_e4m3(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return s ? -v : v;
}

// ---------------------------------------------------------------------------------------------
// Valid files
// ---------------------------------------------------------------------------------------------

enum { FP8_N = 130, FP8_K = 260, SN = 2, SK = 3, NB = 37, NH = 41, NF = 29 };

static void test_conversions(void **state) {
    (void)state;
    // Data region: fp8 weight, its scales, bf16, f16, f32 tensors, back to back.
    size_t fp8_bytes = FP8_N * FP8_K, scale_bytes = SN * SK * 4;
    size_t total = fp8_bytes + scale_bytes + NB * 2 + NH * 2 + NF * 4;
    unsigned char *data = test_alloc(total);
    test_rng r = test_rng_make(11);
    for (size_t i = 0; i < fp8_bytes; i++) {
        uint8_t b = (uint8_t)(test_uniform(&r) * 256);
        data[i] = (b & 0x7f) == 0x7f ? 0x3c : b;                     // no NaN
    }
    float scales[SN * SK];
    test_fill_f32(scales, SN * SK, 12, 0.01f);
    memcpy(data + fp8_bytes, scales, scale_bytes);
    bf16 b_src[NB];
    test_fill_bf16(b_src, NB, 13, 3.0f);
    memcpy(data + fp8_bytes + scale_bytes, b_src, sizeof b_src);
    uint16_t h_src[NH];
    for (int i = 0; i < NH; i++) {
        uint16_t h = (uint16_t)(test_uniform(&r) * 65536);
        h_src[i] = ((h >> 10) & 31) == 31 ? (uint16_t)(h & 0x83ff) : h; // finite; some subnormal
    }
    h_src[0] = 0x0001;                                                 // smallest subnormal
    memcpy(data + fp8_bytes + scale_bytes + NB * 2, h_src, sizeof h_src);
    float f_src[NF];
    test_fill_f32(f_src, NF, 14, 100.0f);
    memcpy(data + fp8_bytes + scale_bytes + NB * 2 + NH * 2, f_src, sizeof f_src);

    char header[1024];
    size_t o1 = fp8_bytes, o2 = o1 + scale_bytes, o3 = o2 + NB * 2, o4 = o3 + NH * 2, o5 = o4 + NF * 4;
    snprintf(header, sizeof header,
             "{\"__metadata__\":{\"format\":\"pt\"},"
             "\"w.bf16\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},"
             "\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]},"
             "\"w.f16\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},"
             "\"w_scale_inv\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}}   ",
             NB, o2, o3, FP8_N, FP8_K, o1, NH, o3, o4, SN, SK, o1, o2, NF, o4, o5);
    char path[128];
    path_of(path, sizeof path, "ok.safetensors");
    size_t size;
    free(make_file(path, header, data, total, &size));

    st_file f;
    char err[512];
    assert_true(st_open(path, &f, err, sizeof err));
    assert_int_equal(f.n_tensors, 5);
    assert_null(st_find(&f, "missing"));
    assert_null(st_find(&f, "__metadata__"));

    // BF16 copies bit for bit; F16 and F32 convert exactly to fp32 and round once to bf16.
    const st_tensor *tb = st_find(&f, "w.bf16"), *th = st_find(&f, "w.f16"), *tf = st_find(&f, "w.f32");
    assert_non_null(tb);
    assert_non_null(th);
    assert_non_null(tf);
    bf16 out_b[NF + NH + NB];
    float out_f[NF + NH + NB];
    test_poison(out_b, sizeof out_b);
    st_to_bf16(tb, out_b);
    assert_int_equal(test_unwritten_bf16(out_b, NB), 0);
    assert_true(test_same_bits(out_b, b_src, 2, NB, "bf16 copy"));
    test_poison(out_f, sizeof out_f);
    st_to_f32(th, out_f);
    assert_int_equal(test_unwritten_f32(out_f, NH), 0);
    for (int i = 0; i < NH; i++) assert_true(out_f[i] == (float)ref_f16(h_src[i]));
    st_to_bf16(th, out_b);
    for (int i = 0; i < NH; i++) assert_int_equal(out_b[i], float_to_bf16((float)ref_f16(h_src[i])));
    test_poison(out_f, sizeof out_f);
    st_to_f32(tf, out_f);
    assert_true(test_same_bits(out_f, f_src, 4, NF, "f32 copy"));
    st_to_bf16(tf, out_b);
    for (int i = 0; i < NF; i++) assert_int_equal(out_b[i], float_to_bf16(f_src[i]));

    // FP8: every byte value decodes as E4M3 "fn" does; dequant multiplies by its block's scale,
    // including the partial last blocks (130 = 128 + 2 rows, 260 = 2*128 + 4 columns).
    for (int b = 0; b < 256; b++) {
        float v = st_fp8_e4m3_to_float((uint8_t)b);
        if ((b & 0x7f) == 0x7f) assert_true(isnan(v));
        else assert_true(v == (float)ref_e4m3((uint8_t)b));
    }
    const st_tensor *w = st_find(&f, "w"), *s = st_find(&f, "w_scale_inv");
    assert_true(st_fp8_scales_ok(w, s, 128, 128, err, sizeof err));
    assert_false(st_fp8_scales_ok(w, s, 64, 128, err, sizeof err));    // wrong scale shape
    assert_non_null(strstr(err, "w_scale_inv"));
    assert_false(st_fp8_scales_ok(w, NULL, 128, 128, err, sizeof err));
    assert_non_null(strstr(err, "w_scale_inv"));
    bf16 *deq = test_alloc(FP8_N * FP8_K * sizeof *deq);
    float *deq32 = test_alloc(FP8_N * FP8_K * sizeof *deq32);
    test_poison(deq, FP8_N * FP8_K * sizeof *deq);
    test_poison(deq32, FP8_N * FP8_K * sizeof *deq32);
    st_fp8_dequant_bf16(w, s, 128, 128, deq);
    st_fp8_dequant_f32(w, s, 128, 128, deq32);
    assert_int_equal(test_unwritten_bf16(deq, FP8_N * FP8_K), 0);
    assert_int_equal(test_unwritten_f32(deq32, FP8_N * FP8_K), 0);
    for (int n = 0; n < FP8_N; n++)
        for (int k = 0; k < FP8_K; k++) {
            float want = (float)ref_e4m3(data[n * FP8_K + k]) * scales[(n / 128) * SK + k / 128];
            assert_true(deq32[n * FP8_K + k] == want);
            assert_int_equal(deq[n * FP8_K + k], float_to_bf16(want));
        }
    st_release_pages(&f, w);   // advisory: the data must still read the same afterwards
    assert_int_equal(w->data[FP8_K + 3], data[FP8_K + 3]);
    free(deq);
    free(deq32);
    st_close(&f);
    free(data);
}

static void test_empty_and_zero_sized(void **state) {
    (void)state;
    char path[128];
    size_t size;
    path_of(path, sizeof path, "empty.safetensors");
    free(make_file(path, "{}", NULL, 0, &size));
    st_file f;
    char err[256];
    assert_true(st_open(path, &f, err, sizeof err));
    assert_int_equal(f.n_tensors, 0);
    assert_null(st_find(&f, "x"));
    st_close(&f);

    path_of(path, sizeof path, "zero.safetensors");
    unsigned char four[4] = {1, 2, 3, 4};
    free(make_file(path, "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[0,0]},"
                         "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                   four, 4, &size));
    assert_true(st_open(path, &f, err, sizeof err));
    assert_int_equal(st_find(&f, "z")->numel, 0);
    assert_int_equal(st_find(&f, "a")->data[3], 4);
    assert_false(st_dtype_is_float(st_find(&f, "a")->dtype));
    st_close(&f);
}

// ---------------------------------------------------------------------------------------------
// Corrupt files
// ---------------------------------------------------------------------------------------------

// A small valid file used as the base of the corruption tests.
#define GOOD_HEADER                                                                    \
    "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"            \
    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}"

static void test_truncated_at_every_length(void **state) {
    (void)state;
    char path[128], cut[128];
    path_of(path, sizeof path, "good.safetensors");
    path_of(cut, sizeof cut, "cut.safetensors");
    unsigned char data[20];
    for (int i = 0; i < 20; i++) data[i] = (unsigned char)(i * 7 + 1);
    size_t size;
    unsigned char *file = make_file(path, GOOD_HEADER, data, 20, &size);
    st_file f;
    char err[256];
    assert_true(st_open(path, &f, err, sizeof err));
    st_close(&f);
    for (size_t len = 0; len < size; len++) {
        write_bytes(cut, file, len);
        expect_refused(cut, NULL);
    }
    // One byte too many is as wrong as one too few.
    unsigned char *longer = test_alloc(size + 1);
    memcpy(longer, file, size);
    longer[size] = 0;
    write_bytes(cut, longer, size + 1);
    expect_refused(cut, "data region");
    free(longer);
    free(file);
}

static void test_bad_headers(void **state) {
    (void)state;
    static const struct {
        const char *header, *needle;
    } cases[] = {
        {"[1, 2, 3]", "'{'"},
        {"{\"a\": ", "JSON"},
        {"{not json}", "JSON"},
        {GOOD_HEADER "xx", "after the header"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "need"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,-3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "shape"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,1.5],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "shape"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "absurd"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[1e300],\"data_offsets\":[0,12]}}", "shape"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[14,22]}}", "gap"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", "overlap"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[12,0]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "data_offsets"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}", "data region"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "data_offsets"},
        {"{\"a\":{\"dtype\":\"BF16\",\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "shape"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12],\"x\":1},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "unexpected"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "twice"},
        {"{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "__metadata__"},
        {"{\"a\":[1,2],\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "not an object"},
        {"{\"\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", "empty name"},
    };
    unsigned char data[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    char path[128];
    path_of(path, sizeof path, "bad.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t size;
        free(make_file(path, cases[i].header, data, 20, &size));
        expect_refused(path, cases[i].needle);
    }
}

static void test_bad_lengths_and_paths(void **state) {
    (void)state;
    char path[128];
    path_of(path, sizeof path, "len.safetensors");
    // Header length absurd (2^60), over the limit (200 MB), and past the end of the file.
    const uint64_t lengths[] = {1ull << 60, 200ull << 20, 1000};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        unsigned char buf[8 + 16] = {0};
        for (int b = 0; b < 8; b++) buf[b] = (unsigned char)(lengths[i] >> (8 * b));
        memcpy(buf + 8, "{}              ", 16);
        write_bytes(path, buf, sizeof buf);
        expect_refused(path, i < 2 ? "limit" : "past the end");
    }
    // A zero-length header is not JSON.
    unsigned char zero[8] = {0};
    write_bytes(path, zero, 8);
    expect_refused(path, "'{'");
    path_of(path, sizeof path, "does-not-exist.safetensors");
    expect_refused(path, "cannot open");
    expect_refused(dir, "not a regular file");
}

// Random byte flips and random header bytes: st_open either accepts (when the damage left a
// valid file) or refuses with a message; it must never crash or read out of bounds.
static void test_random_damage_never_crashes(void **state) {
    (void)state;
    char path[128], bad[128];
    path_of(path, sizeof path, "fuzz-base.safetensors");
    path_of(bad, sizeof bad, "fuzz.safetensors");
    unsigned char data[20];
    for (int i = 0; i < 20; i++) data[i] = (unsigned char)(i + 100);
    size_t size;
    unsigned char *file = make_file(path, GOOD_HEADER, data, 20, &size);
    unsigned char *copy = test_alloc(size);
    test_rng r = test_rng_make(99);
    long refused = 0;
    for (int round = 0; round < 3000; round++) {
        memcpy(copy, file, size);
        int flips = 1 + test_below(&r, 4);
        for (int k = 0; k < flips; k++)
            copy[test_below(&r, (int)(size - 20))] = (unsigned char)test_below(&r, 256);
        write_bytes(bad, copy, size);
        st_file f;
        char err[512] = "";
        if (st_open(bad, &f, err, sizeof err)) {
            // Whatever was accepted must be self-consistent and inside the file.
            for (int t = 0; t < f.n_tensors; t++) {
                const st_tensor *x = &f.tensors[t];
                assert_true(x->data >= f.map && x->data + x->nbytes <= f.map + f.map_bytes);
                assert_true(x->nbytes == (uint64_t)x->numel * (uint64_t)st_dtype_bytes(x->dtype));
            }
            st_close(&f);
        } else {
            assert_non_null(strstr(err, bad));
            refused++;
        }
    }
    assert_true(refused > 1000);  // most random damage must be caught
    free(copy);
    free(file);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_empty_and_zero_sized),
        cmocka_unit_test(test_truncated_at_every_length),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_bad_lengths_and_paths),
        cmocka_unit_test(test_random_damage_never_crashes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
