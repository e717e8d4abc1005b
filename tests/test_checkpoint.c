// tests/test_checkpoint.c — checkpoint directories end to end: synthetic weights written with
// checkpoint_write (one file, and shards with an index) load back with the same config and
// every tensor equal to the synthetic source bit for bit, headers padded as safetensors says;
// an FP8 block-quantized checkpoint dequantizes exactly; missing, misshapen, mistyped and
// mislisted tensors are refused naming the file and the tensor.
#include <stdarg.h>                          // cmocka
#include <stddef.h>                          // cmocka
#include <stdint.h>                          // cmocka
#include <setjmp.h>                          // cmocka
#include <cmocka.h>                          // assert_*, cmocka_unit_test
#include <cjson/cJSON.h>                     // cJSON_Parse, cJSON_Print
#include <math.h>                            // ldexp
#include <stdio.h>                           // fopen, snprintf
#include <stdlib.h>                          // mkdtemp, system, free, realloc
#include <string.h>                          // strstr, strlen, memset
#include <sys/stat.h>                        // mkdir
#include <sys/wait.h>                        // waitpid, WEXITSTATUS
#include <time.h>                            // clock_gettime, CLOCK_MONOTONIC
#include <unistd.h>                          // fork, unlink, truncate, access, _exit

#include "../engine/checkpoint.h"            // checkpoint_open, checkpoint_tensors
#include "../engine/checkpoint_writer.h"     // checkpoint_write
#include "../engine/config_json.h"           // config_json_format
#include "../engine/weights.h"               // weights_synthetic
#include "test_util.h"                       // test_rng, test_poison, test_same_bits

static char root[64];

static int setup(void **state) {
    (void)state;
    snprintf(root, sizeof root, "/tmp/invar_test_ck_XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static int64_t numel(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

static void dir_of(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", root, name); }

static void write_model(const char *dir, const model_config *cfg, int shards) {
    weight_source *src = weights_synthetic(cfg, 7);
    char err[512];
    bool ok = checkpoint_write(dir, cfg, src, shards, err, sizeof err);
    if (!ok) fprintf(stderr, "%s\n", err);
    assert_true(ok);
    src->destroy(src);
}

// Every tensor the config needs, read from the checkpoint, equals the source bit for bit.
static void check_all_tensors(weight_source *ck, const model_config *cfg, weight_source *want) {
    int n = checkpoint_tensors(cfg, NULL, 0);
    checkpoint_tensor *ts = test_alloc((size_t)n * sizeof *ts);
    assert_int_equal(checkpoint_tensors(cfg, ts, n), n);
    for (int i = 0; i < n; i++) {
        int64_t count = numel(ts[i].shape, ts[i].ndim);
        size_t bytes = (size_t)count * (ts[i].f32 ? 4 : 2);
        void *got = test_alloc(bytes), *exp = test_alloc(bytes);
        test_poison(got, bytes);
        assert_true(ck->has(ck, ts[i].name));
        if (ts[i].f32) {
            ck->read_f32(ck, ts[i].name, ts[i].shape, ts[i].ndim, got);
            want->read_f32(want, ts[i].name, ts[i].shape, ts[i].ndim, exp);
            assert_int_equal(test_unwritten_f32(got, count), 0);
        } else {
            ck->read_bf16(ck, ts[i].name, ts[i].shape, ts[i].ndim, got);
            want->read_bf16(want, ts[i].name, ts[i].shape, ts[i].ndim, exp);
            assert_int_equal(test_unwritten_bf16(got, count), 0);
        }
        assert_true(test_same_bits(got, exp, ts[i].f32 ? 4 : 2, count, ts[i].name));
        free(got);
        free(exp);
    }
    free(ts);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void write_config(const char *dir, const model_config *cfg, const char *extra_key, const char *extra_json) {
    char err[256], path[256];
    char *text = config_json_format(cfg, err, sizeof err);
    assert_non_null(text);
    if (extra_key) {
        cJSON *t = cJSON_Parse(text);
        // Replaced when present: config.json refuses a key given twice.
        if (cJSON_GetObjectItemCaseSensitive(t, extra_key))
            cJSON_ReplaceItemInObjectCaseSensitive(t, extra_key, cJSON_Parse(extra_json));
        else
            cJSON_AddItemToObject(t, extra_key, cJSON_Parse(extra_json));
        free(text);
        text = cJSON_Print(t);
        cJSON_Delete(t);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, text);
    free(text);
}

static void expect_open_error(const char *dir, const char *needle1, const char *needle2) {
    model_config cfg;
    weight_source *src;
    char err[1024] = "";
    bool ok = checkpoint_open(dir, &cfg, &src, err, sizeof err);
    if (ok) src->destroy(src);
    if (ok || !strstr(err, needle1) || (needle2 && !strstr(err, needle2)))
        fprintf(stderr, "%s: ok=%d err='%s', wanted '%s' and '%s'\n", dir, ok, err, needle1,
                needle2 ? needle2 : "");
    assert_false(ok);
    assert_non_null(strstr(err, needle1));
    if (needle2) assert_non_null(strstr(err, needle2));
}

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

static void round_trip(const char *name, const char *config, bool tie, int shards) {
    char dir[128];
    dir_of(dir, sizeof dir, name);
    model_config want;
    assert_true(model_config_by_name(config, &want));
    want.tie_word_embeddings = tie;
    write_model(dir, &want, shards);

    model_config got;
    weight_source *ck;
    char err[1024];
    bool ok = checkpoint_open(dir, &got, &ck, err, sizeof err);
    if (!ok) fprintf(stderr, "%s\n", err);
    assert_true(ok);
    assert_string_equal(got.name, name);
    char *a = config_json_format(&want, err, sizeof err), *b = config_json_format(&got, err, sizeof err);
    assert_string_equal(a, b);          // the config round-trips field for field
    free(a);
    free(b);
    weight_source *src = weights_synthetic(&want, 7);
    check_all_tensors(ck, &got, src);
    assert_int_equal(ck->has(ck, "lm_head.weight"), !tie);
    assert_false(ck->has(ck, "model.layers.0.mlp.nonexistent.weight"));
    src->destroy(src);
    ck->destroy(ck);
}

static void test_single_file_round_trip(void **state) {
    (void)state;
    round_trip("tiny-single", "tiny", false, 0);
}

static void test_sharded_round_trip(void **state) {
    (void)state;
    round_trip("tiny-v2-sharded", "tiny-v2", true, 3);
    char path[256];
    dir_of(path, sizeof path, "tiny-v2-sharded/model-00003-of-00003.safetensors");
    assert_int_equal(access(path, R_OK), 0);
    dir_of(path, sizeof path, "tiny-v2-sharded/model.safetensors");
    assert_int_not_equal(access(path, R_OK), 0);
}

// Each file's header is its JSON padded with fewer than 8 spaces to a multiple of 8 (the
// safetensors rule; a JSON already a multiple of 8 long gets none), and the directory loads back.
// Written as one file and as 2 to 6 shards, one of the headers' JSON is a multiple of 8 long
// (held below, so the edge stays reached).
static void test_header_padding(void **state) {
    (void)state;
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    const int shard_counts[] = {0, 2, 3, 4, 5, 6};  // 0: one file, model.safetensors
    int unpadded = 0;
    for (size_t c = 0; c < sizeof shard_counts / sizeof shard_counts[0]; c++) {
        const int shards = shard_counts[c];
        char dir[128], path[256], err[1024];
        snprintf(dir, sizeof dir, "%s/pad-%d", root, shards);
        write_model(dir, &cfg, shards);
        for (int k = 1; k <= (shards ? shards : 1); k++) {
            if (shards) snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, k, shards);
            else snprintf(path, sizeof path, "%s/model.safetensors", dir);
            FILE *f = fopen(path, "rb");
            assert_non_null(f);
            uint8_t le[8];
            assert_int_equal(fread(le, 1, 8, f), 8);
            uint64_t n = 0;
            for (int b = 7; b >= 0; b--) n = n << 8 | le[b];
            assert_true(n % 8 == 0 && n < 1 << 20);
            char *h = test_alloc((size_t)n);
            assert_int_equal(fread(h, 1, (size_t)n, f), n);
            fclose(f);
            uint64_t end = n;
            while (end > 0 && h[end - 1] == ' ') end--;
            if (end == 0 || h[end - 1] != '}' || n - end >= 8)
                fail_msg("%s: a header of %llu bytes does not end in the JSON's '}' and fewer than 8 spaces",
                         path, (unsigned long long)n);
            if (end == n) unpadded++;
            free(h);
        }
        model_config got;
        weight_source *ck;
        bool ok = checkpoint_open(dir, &got, &ck, err, sizeof err);
        if (!ok) fail_msg("%s: %s", dir, err);
        ck->destroy(ck);
    }
    if (!unpadded) fail_msg("no header's JSON was a multiple of 8 long: the edge is not reached");
}

// ---------------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------------

static void test_refusals(void **state) {
    (void)state;
    char dir[128], path[256];
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    cfg.tie_word_embeddings = true;
    dir_of(dir, sizeof dir, "bad");
    write_model(dir, &cfg, 0);

    // The config wants lm_head.weight, which a tied checkpoint does not store.
    cfg.tie_word_embeddings = false;
    write_config(dir, &cfg, NULL, NULL);
    expect_open_error(dir, "model.safetensors", "'lm_head.weight' is missing");
    // Another hidden size: the first tensor has the wrong shape.
    cfg.tie_word_embeddings = true;
    cfg.hidden_size = 128;
    write_config(dir, &cfg, NULL, NULL);
    expect_open_error(dir, "model.safetensors", "'model.embed_tokens.weight' has shape [512, 256], expected [512, 128]");
    // A broken config.json names itself.
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"model_type\": \"deepseek_v3\"}");
    expect_open_error(dir, "config.json", "vocab_size");
    unlink(path);
    expect_open_error(dir, "config.json", "cannot open");
    // A truncated safetensors file names itself.
    cfg.hidden_size = 256;
    write_config(dir, &cfg, NULL, NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(truncate(path, 1000), 0);
    expect_open_error(dir, path, NULL);
    unlink(path);
    expect_open_error(dir, "neither model.safetensors nor model.safetensors.index.json", NULL);

    // Shards: a missing shard, and an index that lies about where a tensor lives.
    dir_of(dir, sizeof dir, "bad-sharded");
    write_model(dir, &cfg, 2);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *index = cJSON_Parse(text);
    cJSON *map = cJSON_GetObjectItem(index, "weight_map");
    cJSON_ReplaceItemInObject(map, "model.norm.weight", cJSON_CreateString("model-00001-of-00002.safetensors"));
    char *lie = cJSON_Print(index);
    write_text(path, lie);
    free(lie);
    expect_open_error(dir, "'model.norm.weight'", "model-00001-of-00002.safetensors");
    cJSON_ReplaceItemInObject(map, "model.norm.weight", cJSON_CreateString("../../etc/passwd"));
    lie = cJSON_Print(index);
    write_text(path, lie);
    free(lie);
    expect_open_error(dir, "model.safetensors.index.json", "file name in the same folder");
    cJSON_Delete(index);
    write_model(dir, &cfg, 2);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    unlink(path);
    expect_open_error(dir, path, "cannot open");
}

static double seconds_now(void) {
    struct timespec ts;
    assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Huge counts in config.json (issue 12, defects 1 and 2) are refused within a second, naming
// config.json and the field, before any tensor list is built: past the caps by the caps, below
// them by holding the count against the safetensors headers.
static void test_huge_counts_refused_fast(void **state) {
    (void)state;
    char dir[128];
    dir_of(dir, sizeof dir, "huge");
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    write_model(dir, &cfg, 0);
    static const struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"n_routed_experts", "1073741824", "field 'n_routed_experts' = 1073741824 exceeds the cap"},
        {"num_hidden_layers", "1000000", "field 'num_hidden_layers' = 1000000 exceeds the cap"},
        {"num_hidden_layers", "65536", "'num_hidden_layers' = 65536 and 'n_routed_experts' = 8 need"},
        {"n_routed_experts", "65536", "'n_routed_experts' = 65536 need"},
        {"n_routed_experts", "65536", "'model.layers.1.mlp.gate.weight' has shape [8, 256], expected [65536, 256]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_config(dir, &cfg, cases[i].key, cases[i].value);
        double start = seconds_now();
        expect_open_error(dir, "config.json", cases[i].needle);
        double took = seconds_now() - start;
        if (took >= 1.0) fprintf(stderr, "%s = %s: refused after %.2f s\n", cases[i].key, cases[i].value, took);
        assert_true(took < 1.0);
    }
    // Sharded: held against the shards the index lists.
    dir_of(dir, sizeof dir, "huge-sharded");
    write_model(dir, &cfg, 2);
    write_config(dir, &cfg, "num_hidden_layers", "60000");
    expect_open_error(dir, "model.safetensors.index.json: tensor 'model.layers.4.input_layernorm.weight' is missing",
                      "need 2279977 tensors, the files hold 129");
}

// The tensor count is computed without the list, agrees with it, and reports overflow.
static void test_tensor_count(void **state) {
    (void)state;
    for (const char *const *name = model_config_names(); *name; name++) {
        model_config cfg;
        assert_true(model_config_by_name(*name, &cfg));
        for (int tie = 0; tie < 2; tie++) {
            cfg.tie_word_embeddings = tie;
            assert_int_equal(checkpoint_tensor_count(&cfg), checkpoint_tensors(&cfg, NULL, 0));
            cfg.q_lora_rank = 0;
            cfg.first_k_dense_replace = 2;
            assert_int_equal(checkpoint_tensor_count(&cfg), checkpoint_tensors(&cfg, NULL, 0));
        }
    }
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    cfg.num_hidden_layers = 2147483647;
    cfg.n_routed_experts = 2147483647;
    assert_int_equal(checkpoint_tensor_count(&cfg), -1);   // about 1.4e19: past int64
    cfg.n_routed_experts = 1 << 30;
    cfg.first_k_dense_replace = 0;
    // 2^31-1 layers of 3 * 2^30 experts + 2 router + 3 shared + 9 attention tensors, + 3.
    assert_true(checkpoint_tensor_count(&cfg) == 2147483647LL * (3LL * (1 << 30) + 14) + 3);
}

// read_bf16 with a shape other than the checkpoint's exits 2 naming the file and the tensor.
static void test_wrong_shape_read_exits_2(void **state) {
    (void)state;
    char dir[128];
    dir_of(dir, sizeof dir, "tiny-single");
    model_config cfg;
    weight_source *ck;
    char err[1024];
    assert_true(checkpoint_open(dir, &cfg, &ck, err, sizeof err));
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int64_t shape[2] = {cfg.vocab_size, cfg.hidden_size + 1};
        bf16 *buf = malloc((size_t)shape[0] * (size_t)shape[1] * 2);
        ck->read_bf16(ck, "model.embed_tokens.weight", shape, 2, buf);
        _exit(0);   // not reached: the read must refuse
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 2);
    ck->destroy(ck);
}

// ---------------------------------------------------------------------------------------------
// FP8 block-quantized checkpoints (DeepSeek-V3's layout), written here byte by byte
// ---------------------------------------------------------------------------------------------

typedef struct {
    char name[128];
    const char *dtype;
    int ndim;
    int64_t shape[2];
    unsigned char *data;
    size_t bytes;
} raw_tensor;

static void write_raw_safetensors(const char *path, raw_tensor *ts, int n) {
    cJSON *h = cJSON_CreateObject();
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(h, ts[i].name);
        cJSON_AddStringToObject(e, "dtype", ts[i].dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < ts[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].shape[d]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
        offset += ts[i].bytes;
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
    }
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t len = strlen(json);
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)(len >> (8 * b));
    assert_int_equal(fwrite(le, 1, 8, f), 8);
    assert_int_equal(fwrite(json, 1, len, f), len);
    for (int i = 0; i < n; i++) assert_int_equal(fwrite(ts[i].data, 1, ts[i].bytes, f), ts[i].bytes);
    assert_int_equal(fclose(f), 0);
    free(json);
}

static double ref_e4m3(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return s ? -v : v;
}

// Is `name` a linear layer DeepSeek-V3 quantizes (not the embedding, lm_head or router)?
static bool quantized(const checkpoint_tensor *t) {
    return t->ndim == 2 && !t->f32 && !strstr(t->name, "embed_tokens") && !strstr(t->name, "lm_head") &&
           !strstr(t->name, "mlp.gate.weight");
}

// Blocks of 64 rows by 128 columns: not square, so a dequantization that takes a row's scale
// block by the column size (or the reverse) reads the wrong scales.
#define FP8_BLOCK_N 64
#define FP8_BLOCK_K 128

static void test_fp8_checkpoint(void **state) {
    (void)state;
    char dir[128], path[256];
    dir_of(dir, sizeof dir, "tiny-fp8");
    assert_int_equal(mkdir(dir, 0777), 0);
    model_config cfg;
    assert_true(model_config_by_name("tiny", &cfg));
    write_config(dir, &cfg, "quantization_config",
                 "{\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\","
                 " \"weight_block_size\": [64, 128]}");

    int n = checkpoint_tensors(&cfg, NULL, 0);
    checkpoint_tensor *ts = test_alloc((size_t)n * sizeof *ts);
    checkpoint_tensors(&cfg, ts, n);
    raw_tensor *raw = test_alloc((size_t)(2 * n) * sizeof *raw);
    int n_raw = 0;
    test_rng r = test_rng_make(21);
    for (int i = 0; i < n; i++) {
        raw_tensor *t = &raw[n_raw++];
        snprintf(t->name, sizeof t->name, "%s", ts[i].name);
        t->ndim = ts[i].ndim;
        t->shape[0] = ts[i].shape[0];
        t->shape[1] = ts[i].shape[1];
        int64_t count = numel(ts[i].shape, ts[i].ndim);
        if (quantized(&ts[i])) {
            t->dtype = "F8_E4M3";
            t->bytes = (size_t)count;
            t->data = test_alloc(t->bytes);
            for (size_t k = 0; k < t->bytes; k++) {
                uint8_t b = (uint8_t)test_below(&r, 256);
                t->data[k] = (b & 0x7f) == 0x7f ? 0x41 : b;
            }
            raw_tensor *s = &raw[n_raw++];
            snprintf(s->name, sizeof s->name, "%s_scale_inv", ts[i].name);
            s->dtype = "F32";
            s->ndim = 2;
            s->shape[0] = (ts[i].shape[0] + FP8_BLOCK_N - 1) / FP8_BLOCK_N;
            s->shape[1] = (ts[i].shape[1] + FP8_BLOCK_K - 1) / FP8_BLOCK_K;
            s->bytes = (size_t)(s->shape[0] * s->shape[1]) * 4;
            s->data = test_alloc(s->bytes);
            test_fill_f32((float *)s->data, s->shape[0] * s->shape[1], 100 + (uint64_t)i, 0.01f);
        } else if (ts[i].f32 || ts[i].ndim == 1) {
            t->dtype = "F32";
            t->bytes = (size_t)count * 4;
            t->data = test_alloc(t->bytes);
            test_fill_f32((float *)t->data, count, 200 + (uint64_t)i, 2.0f);
        } else {
            t->dtype = "BF16";
            t->bytes = (size_t)count * 2;
            t->data = test_alloc(t->bytes);
            test_fill_bf16((bf16 *)t->data, count, 300 + (uint64_t)i, 1.0f);
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_raw_safetensors(path, raw, n_raw);

    model_config got;
    weight_source *ck;
    char err[1024];
    bool ok = checkpoint_open(dir, &got, &ck, err, sizeof err);
    if (!ok) fprintf(stderr, "%s\n", err);
    assert_true(ok);
    int j = 0;
    for (int i = 0; i < n; i++, j++) {
        raw_tensor *t = &raw[j];
        int64_t count = numel(ts[i].shape, ts[i].ndim);
        bf16 *got_b = test_alloc((size_t)count * 2);
        test_poison(got_b, (size_t)count * 2);
        if (ts[i].f32) {
            float *got_f = test_alloc((size_t)count * 4);
            test_poison(got_f, (size_t)count * 4);
            ck->read_f32(ck, ts[i].name, ts[i].shape, ts[i].ndim, got_f);
            assert_true(test_same_bits(got_f, t->data, 4, count, ts[i].name));
            free(got_f);
        } else {
            ck->read_bf16(ck, ts[i].name, ts[i].shape, ts[i].ndim, got_b);
            assert_int_equal(test_unwritten_bf16(got_b, count), 0);
        }
        if (strcmp(t->dtype, "F8_E4M3") == 0) {
            const float *scale = (const float *)raw[j + 1].data;
            int64_t K = ts[i].shape[1], SK = raw[j + 1].shape[1];
            for (int64_t k = 0; k < count; k++) {
                float want = (float)ref_e4m3(t->data[k]) * scale[(k / K / FP8_BLOCK_N) * SK + (k % K) / FP8_BLOCK_K];
                assert_int_equal(got_b[k], float_to_bf16(want));
            }
            j++;  // skip the scales
        } else if (!ts[i].f32 && strcmp(t->dtype, "F32") == 0) {
            for (int64_t k = 0; k < count; k++)
                assert_int_equal(got_b[k], float_to_bf16(((const float *)t->data)[k]));
        } else if (!ts[i].f32) {
            assert_true(test_same_bits(got_b, t->data, 2, count, ts[i].name));
        }
        free(got_b);
    }
    ck->destroy(ck);

    // A scale tensor of the wrong shape, and an integer dtype, are refused by name.
    for (int k = 0; k < n_raw; k++) {
        if (strstr(raw[k].name, "q_b_proj.weight_scale_inv") && strstr(raw[k].name, "layers.1.")) {
            raw[k].shape[1] = raw[k].shape[1] * 2;
            raw[k].data = realloc(raw[k].data, raw[k].bytes * 2);
            assert_non_null(raw[k].data);
            // The grown half goes into the file: defined bytes, so valgrind stays quiet.
            memset(raw[k].data + raw[k].bytes, 0, raw[k].bytes);
            raw[k].bytes *= 2;
        }
        if (strcmp(raw[k].name, "model.norm.weight") == 0) raw[k].dtype = "I32";
    }
    write_raw_safetensors(path, raw, n_raw);
    expect_open_error(dir, "model.layers.1.self_attn.q_b_proj.weight_scale_inv", "scales must have shape");
    for (int k = 0; k < n_raw; k++)
        if (strstr(raw[k].name, "q_b_proj.weight_scale_inv") && strstr(raw[k].name, "layers.1.")) {
            raw[k].shape[1] /= 2;
            raw[k].bytes /= 2;
        }
    write_raw_safetensors(path, raw, n_raw);
    expect_open_error(dir, "'model.norm.weight' has dtype I32", NULL);

    for (int k = 0; k < n_raw; k++) free(raw[k].data);
    free(raw);
    free(ts);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_file_round_trip),
        cmocka_unit_test(test_sharded_round_trip),
        cmocka_unit_test(test_header_padding),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_huge_counts_refused_fast),
        cmocka_unit_test(test_tensor_count),
        cmocka_unit_test(test_wrong_shape_read_exits_2),
        cmocka_unit_test(test_fp8_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
