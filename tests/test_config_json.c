// tests/test_config_json.c — config.json parsing: real hub configs (DeepSeek-V3, V2-Lite), the
// transformers 5 rope_parameters spelling, transformers' defaults, every required field
// missing, mistyped and unsupported values refused with the file and field named, and every
// named config surviving format -> parse unchanged.
#include <stdarg.h>                 // cmocka
#include <stddef.h>                 // cmocka
#include <stdint.h>                 // cmocka
#include <setjmp.h>                 // cmocka
#include <cmocka.h>                 // assert_*, cmocka_unit_test
#include <cjson/cJSON.h>            // cJSON_Parse, cJSON_ReplaceItemInObject
#include <math.h>                   // fabs, log, sqrt
#include <stdio.h>                  // fopen, snprintf
#include <stdlib.h>                 // mkdtemp, system, free
#include <string.h>                 // strstr, strlen
#include <sys/stat.h>               // mkdir

#include "../engine/config_json.h"  // config_json_parse, config_json_load, config_json_format

static const char *v3_hub =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"aux_loss_alpha\": 0.001, \"bos_token_id\": 0,"
    " \"eos_token_id\": 1, \"ep_size\": 1, \"first_k_dense_replace\": 3, \"hidden_act\": \"silu\","
    " \"hidden_size\": 7168, \"initializer_range\": 0.02, \"intermediate_size\": 18432,"
    " \"kv_lora_rank\": 512, \"max_position_embeddings\": 163840, \"model_type\": \"deepseek_v3\","
    " \"moe_intermediate_size\": 2048, \"moe_layer_freq\": 1, \"n_group\": 8,"
    " \"n_routed_experts\": 256, \"n_shared_experts\": 1, \"norm_topk_prob\": true,"
    " \"num_attention_heads\": 128, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 61,"
    " \"num_key_value_heads\": 128, \"num_nextn_predict_layers\": 1, \"q_lora_rank\": 1536,"
    " \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"quantization_config\":"
    " {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\","
    " \"weight_block_size\": [128, 128]}, \"rms_norm_eps\": 1e-06, \"rope_scaling\":"
    " {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, \"mscale_all_dim\": 1.0,"
    " \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, \"rope_theta\": 10000,"
    " \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\", \"seq_aux\": true,"
    " \"tie_word_embeddings\": false, \"topk_group\": 4, \"topk_method\": \"noaux_tc\","
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.33.1\", \"use_cache\": true,"
    " \"v_head_dim\": 128, \"vocab_size\": 129280}";

static const char *v2_lite_hub =
    "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"attention_bias\": false,"
    " \"aux_loss_alpha\": 0.001, \"bos_token_id\": 100000, \"eos_token_id\": 100001,"
    " \"first_k_dense_replace\": 1, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
    " \"intermediate_size\": 10944, \"kv_lora_rank\": 512, \"max_position_embeddings\": 163840,"
    " \"model_type\": \"deepseek_v2\", \"moe_intermediate_size\": 1408, \"moe_layer_freq\": 1,"
    " \"n_group\": 1, \"n_routed_experts\": 64, \"n_shared_experts\": 2, \"norm_topk_prob\": false,"
    " \"num_attention_heads\": 16, \"num_experts_per_tok\": 6, \"num_hidden_layers\": 27,"
    " \"num_key_value_heads\": 16, \"pretraining_tp\": 1, \"q_lora_rank\": null,"
    " \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 0.707,"
    " \"mscale_all_dim\": 0.707, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"rope_theta\": 10000, \"routed_scaling_factor\": 1.0, \"scoring_func\": \"softmax\","
    " \"seq_aux\": true, \"tie_word_embeddings\": false, \"topk_group\": 1,"
    " \"topk_method\": \"greedy\", \"torch_dtype\": \"bfloat16\", \"v_head_dim\": 128,"
    " \"vocab_size\": 102400}";

#define PATH "models/x/config.json"

// Parses `root` (consumed) as config.json text.
static bool parse_tree(cJSON *root, model_config *c, config_json_info *info, char *err, int err_len) {
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    assert_non_null(text);
    bool ok = config_json_parse(text, strlen(text), PATH, c, info, err, err_len);
    free(text);
    return ok;
}

// Parsing must fail naming the file and `field` (and containing `needle` when given).
static void expect_error(cJSON *root, const char *field, const char *needle) {
    model_config c;
    char err[512] = "", want[128];
    bool ok = parse_tree(root, &c, NULL, err, sizeof err);
    snprintf(want, sizeof want, "field '%s'", field);
    if (ok || !strstr(err, PATH) || !strstr(err, want) || (needle && !strstr(err, needle)))
        fprintf(stderr, "expected error on %s (%s), got ok=%d '%s'\n", field, needle ? needle : "", ok, err);
    assert_false(ok);
    assert_non_null(strstr(err, PATH));
    assert_non_null(strstr(err, want));
    if (needle) assert_non_null(strstr(err, needle));
}

static cJSON *tree(const char *text) {
    cJSON *t = cJSON_Parse(text);
    assert_non_null(t);
    return t;
}

static void set(cJSON *root, const char *key, cJSON *value) {
    if (cJSON_GetObjectItemCaseSensitive(root, key)) cJSON_ReplaceItemInObjectCaseSensitive(root, key, value);
    else cJSON_AddItemToObject(root, key, value);
}

static double get_mscale(double f, double m) { return f <= 1 ? 1.0 : 0.1 * m * log(f) + 1.0; }

// ---------------------------------------------------------------------------------------------
// Real configs
// ---------------------------------------------------------------------------------------------

static void test_deepseek_v3_hub(void **state) {
    (void)state;
    model_config c;
    config_json_info info;
    char err[512];
    assert_true(parse_tree(tree(v3_hub), &c, &info, err, sizeof err));
    assert_string_equal(info.model_type, "deepseek_v3");
    assert_int_equal(c.vocab_size, 129280);
    assert_int_equal(c.hidden_size, 7168);
    assert_int_equal(c.num_hidden_layers, 61);
    assert_int_equal(c.q_lora_rank, 1536);
    assert_int_equal(c.kv_lora_rank, 512);
    assert_int_equal(c.n_routed_experts, 256);
    assert_int_equal(c.num_experts_per_tok, 8);
    assert_int_equal(c.first_k_dense_replace, 3);
    assert_int_equal(c.n_group, 8);
    assert_int_equal(c.topk_group, 4);
    assert_int_equal(c.topk_method, MOE_TOPK_NOAUX_TC);
    assert_int_equal(c.scoring_func, MOE_SCORING_SIGMOID);
    assert_true(c.norm_topk_prob);
    assert_true(c.routed_scaling_factor == 2.5);
    assert_true(c.rope_yarn);
    assert_true(c.rope_factor == 40 && c.rope_mscale == 1.0 && c.rope_mscale_all_dim == 1.0);
    assert_int_equal(c.rope_original_max_position_embeddings, 4096);
    assert_true(c.rope_interleave);
    assert_false(c.tie_word_embeddings);
    assert_true(info.fp8);
    assert_int_equal(info.fp8_block_n, 128);
    assert_int_equal(info.fp8_block_k, 128);
    // The named config v3 is this model with 3 layers, the first dense (the hub's has 61, the
    // first 3 dense): every other field the same, as config.json writes them.
    model_config named;
    assert_true(model_config_by_name("v3", &named));
    assert_int_equal(named.num_hidden_layers, 3);
    assert_int_equal(named.first_k_dense_replace, 1);
    c.num_hidden_layers = named.num_hidden_layers;
    c.first_k_dense_replace = named.first_k_dense_replace;
    char *hub = config_json_format(&c, err, sizeof err), *ours = config_json_format(&named, err, sizeof err);
    assert_non_null(hub);
    assert_non_null(ours);
    assert_string_equal(ours, hub);
    free(hub);
    free(ours);
}

static void test_deepseek_v2_lite_hub(void **state) {
    (void)state;
    model_config c;
    config_json_info info;
    char err[512];
    assert_true(parse_tree(tree(v2_lite_hub), &c, &info, err, sizeof err));
    assert_string_equal(info.model_type, "deepseek_v2");
    assert_int_equal(c.q_lora_rank, 0);
    assert_int_equal(c.n_shared_experts, 2);
    assert_int_equal(c.num_experts_per_tok, 6);
    assert_int_equal(c.topk_method, MOE_TOPK_GREEDY);
    assert_int_equal(c.scoring_func, MOE_SCORING_SOFTMAX);
    assert_false(c.norm_topk_prob);
    assert_true(c.rope_mscale == 0.707 && c.rope_mscale_all_dim == 0.707);
    assert_false(info.fp8);
    // The named config v2-lite has the same architecture (fewer layers).
    model_config named;
    assert_true(model_config_by_name("v2-lite", &named));
    assert_int_equal(c.moe_intermediate_size, named.moe_intermediate_size);
    assert_true(model_softmax_scale(&c) == model_softmax_scale(&named));
}

// ---------------------------------------------------------------------------------------------
// RoPE spellings
// ---------------------------------------------------------------------------------------------

static void test_rope_parameters_spelling(void **state) {
    (void)state;
    model_config c;
    char err[512];
    // transformers 5: rope_parameters with rope_type, rope_theta inside, no top-level theta.
    cJSON *t = tree(v3_hub);
    cJSON_DeleteItemFromObject(t, "rope_scaling");
    cJSON_DeleteItemFromObject(t, "rope_theta");
    set(t, "rope_parameters", tree("{\"rope_type\": \"yarn\", \"rope_theta\": 50000.0, \"factor\": 40.0,"
                                   " \"original_max_position_embeddings\": 4096, \"beta_fast\": 32.0,"
                                   " \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0}"));
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    assert_true(c.rope_yarn && c.rope_theta == 50000.0 && c.rope_factor == 40.0);

    // rope_theta inside the dict wins over the top-level one.
    t = tree(v3_hub);
    cJSON_DeleteItemFromObject(t, "rope_scaling");
    set(t, "rope_parameters", tree("{\"rope_type\": \"default\", \"rope_theta\": 1000000}"));
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    assert_false(c.rope_yarn);
    assert_true(c.rope_theta == 1e6);

    // rope_scaling (hub) wins over rope_parameters when both are set, as transformers does.
    t = tree(v3_hub);
    set(t, "rope_parameters", tree("{\"rope_type\": \"default\", \"rope_theta\": 1000000}"));
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    assert_true(c.rope_yarn && c.rope_theta == 10000);

    // Both null: plain RoPE.
    t = tree(v3_hub);
    set(t, "rope_scaling", cJSON_CreateNull());
    set(t, "rope_parameters", cJSON_CreateNull());
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    assert_false(c.rope_yarn);

    // yarn without factor: max_position_embeddings / original_max_position_embeddings.
    t = tree(v3_hub);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(t, "rope_scaling"), "factor");
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    assert_true(c.rope_factor == 163840.0 / 4096);
}

// transformers' attention factor: the mscale ratio only when both are non-zero, get_mscale(f)
// otherwise; the softmax scale takes mscale_all_dim whenever it is set.
static void test_yarn_mscale_cases(void **state) {
    (void)state;
    const struct {
        const char *mscale, *mscale_all_dim;  // NULL: absent
        double want_rope, want_softmax;       // factors over the plain values
    } cases[] = {
        {"0.707", "0.707", 1.0, get_mscale(40, 0.707) * get_mscale(40, 0.707)},
        {"1.0", NULL, get_mscale(40, 1), 1.0},
        {"0.707", NULL, get_mscale(40, 1), 1.0},
        {NULL, "0.707", get_mscale(40, 1), get_mscale(40, 0.707) * get_mscale(40, 0.707)},
        {NULL, NULL, get_mscale(40, 1), 1.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *t = tree(v3_hub);
        cJSON *rs = cJSON_GetObjectItem(t, "rope_scaling");
        cJSON_DeleteItemFromObject(rs, "mscale");
        cJSON_DeleteItemFromObject(rs, "mscale_all_dim");
        if (cases[i].mscale) cJSON_AddItemToObject(rs, "mscale", tree(cases[i].mscale));
        if (cases[i].mscale_all_dim) cJSON_AddItemToObject(rs, "mscale_all_dim", tree(cases[i].mscale_all_dim));
        model_config c;
        char err[512];
        assert_true(parse_tree(t, &c, NULL, err, sizeof err));
        double rope = get_mscale(c.rope_factor, c.rope_mscale) / get_mscale(c.rope_factor, c.rope_mscale_all_dim);
        assert_true(fabs(rope - cases[i].want_rope) < 1e-12);
        double plain = 1.0 / sqrt(192.0);
        assert_true(fabs(model_softmax_scale(&c) / plain - cases[i].want_softmax) < 1e-12);
    }
}

// ---------------------------------------------------------------------------------------------
// Defaults and errors
// ---------------------------------------------------------------------------------------------

static const char *optional_fields[] = {
    "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings", "routed_scaling_factor",
    "n_group", "topk_group", "num_experts_per_tok", "norm_topk_prob", "topk_method",
    "scoring_func", "moe_layer_freq", "rope_interleave", "rope_theta", "rope_scaling",
    "hidden_act", "attention_bias", "num_key_value_heads", "quantization_config", NULL,
};

static void test_transformers_defaults(void **state) {
    (void)state;
    model_config c;
    char err[512];
    cJSON *t = tree(v3_hub);
    for (int i = 0; optional_fields[i]; i++) cJSON_DeleteItemFromObject(t, optional_fields[i]);
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    // DeepseekV3Config's defaults.
    assert_int_equal(c.n_group, 8);
    assert_int_equal(c.topk_group, 4);
    assert_int_equal(c.num_experts_per_tok, 8);
    assert_int_equal(c.max_position_embeddings, 4096);
    assert_true(c.routed_scaling_factor == 2.5 && c.norm_topk_prob && c.rms_norm_eps == 1e-6);
    assert_true(c.rope_theta == 10000 && !c.rope_yarn && c.rope_interleave && !c.tie_word_embeddings);
    assert_int_equal(c.topk_method, MOE_TOPK_NOAUX_TC);

    // DeepseekV2Config's: num_experts_per_tok has no usable default for a MoE model.
    t = tree(v2_lite_hub);
    for (int i = 0; optional_fields[i]; i++) cJSON_DeleteItemFromObject(t, optional_fields[i]);
    expect_error(t, "num_experts_per_tok", "missing");
    t = tree(v2_lite_hub);
    for (int i = 0; optional_fields[i]; i++)
        if (strcmp(optional_fields[i], "num_experts_per_tok") != 0)
            cJSON_DeleteItemFromObject(t, optional_fields[i]);
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    assert_int_equal(c.max_position_embeddings, 2048);
    assert_int_equal(c.n_group, 1);
    assert_true(c.routed_scaling_factor == 1.0 && !c.norm_topk_prob);
    assert_int_equal(c.topk_method, MOE_TOPK_GREEDY);
    assert_int_equal(c.scoring_func, MOE_SCORING_SOFTMAX);

    // null n_group / topk_group (DeepseekV2Config's None): one group.
    t = tree(v2_lite_hub);
    set(t, "n_group", cJSON_CreateNull());
    set(t, "topk_group", cJSON_CreateNull());
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
    assert_int_equal(c.n_group, 1);
    assert_int_equal(c.topk_group, 1);
}

static void test_missing_required_fields(void **state) {
    (void)state;
    static const char *required[] = {
        "model_type", "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
        "num_hidden_layers", "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
        "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "first_k_dense_replace",
        "q_lora_rank", "n_shared_experts",
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        cJSON *t = tree(v3_hub);
        cJSON_DeleteItemFromObject(t, required[i]);
        expect_error(t, required[i], "missing");
    }
}

static void test_bad_values(void **state) {
    (void)state;
    static const struct {
        const char *field, *json, *needle;
    } cases[] = {
        {"vocab_size", "\"129280\"", "number"},
        {"hidden_size", "7168.5", "integer"},
        {"n_routed_experts", "1099511627776", "integer"},   // 2^40: valueint would saturate
        {"num_hidden_layers", "-1", "integer"},
        {"num_hidden_layers", "0", "integer"},
        {"tie_word_embeddings", "1", "true or false"},
        {"rms_norm_eps", "\"1e-6\"", "number"},
        {"model_type", "\"llama\"", "unsupported"},
        {"topk_method", "\"random\"", "unsupported"},
        {"scoring_func", "\"relu\"", "unsupported"},
        {"hidden_act", "\"gelu\"", "unsupported"},
        {"attention_bias", "true", "not supported"},
        {"num_key_value_heads", "8", "num_attention_heads"},
        {"rope_scaling", "\"yarn\"", "object"},
        {"rope_scaling", "{\"type\": \"linear\", \"factor\": 2.0}", "unsupported"},
        {"quantization_config", "{\"quant_method\": \"awq\"}", "unsupported"},
        {"quantization_config", "{\"quant_method\": \"fp8\", \"weight_block_size\": [128]}", "rows"},
        {"n_group", "3", "divide"},
        // Caps (README, Checkpoints): far above any real model, so size arithmetic stays in range.
        {"n_routed_experts", "1073741824", "cap 65536"},
        {"num_hidden_layers", "1000000", "cap 65536"},
        {"vocab_size", "2147483647", "cap"},
        {"hidden_size", "2097152", "cap"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *t = tree(v3_hub);
        set(t, cases[i].field, tree(cases[i].json));
        const char *field = cases[i].field;
        if (strcmp(field, "rope_scaling") == 0 && cases[i].json[0] == '{') field = "rope_scaling.type";
        if (strcmp(field, "quantization_config") == 0)
            field = strstr(cases[i].json, "awq") ? "quantization_config.quant_method"
                                                   : "quantization_config.weight_block_size";
        expect_error(t, field, cases[i].needle);
    }
    // YaRN options the engine does not implement.
    cJSON *t = tree(v3_hub);
    cJSON_AddItemToObject(cJSON_GetObjectItem(t, "rope_scaling"), "attention_factor", cJSON_CreateNumber(1.2));
    expect_error(t, "rope_scaling.attention_factor", "not supported");
    t = tree(v3_hub);
    cJSON_AddItemToObject(cJSON_GetObjectItem(t, "rope_scaling"), "truncate", cJSON_CreateFalse());
    expect_error(t, "rope_scaling.truncate", "not supported");
    // noaux_tc is DeepseekV3's; transformers' DeepseekV2 has no such routing.
    t = tree(v2_lite_hub);
    set(t, "topk_method", cJSON_CreateString("noaux_tc"));
    expect_error(t, "topk_method", "deepseek_v3");
    // Not JSON at all, or not an object.
    model_config c;
    char err[256];
    assert_false(config_json_parse("{\"model_type\": ", 15, PATH, &c, NULL, err, sizeof err));
    assert_non_null(strstr(err, PATH));
    assert_false(config_json_parse("[1]", 3, PATH, &c, NULL, err, sizeof err));
    assert_false(config_json_parse("", 0, PATH, &c, NULL, err, sizeof err));
}

// A key given twice is refused naming it: transformers (Python's json) would take the last
// value and cJSON the first, so the two would read different models.
static void test_duplicate_keys(void **state) {
    (void)state;
    model_config c;
    char err[512], text[4096];
    snprintf(text, sizeof text, "{\"num_hidden_layers\": 1000, %s", v3_hub + 1);
    assert_false(config_json_parse(text, strlen(text), PATH, &c, NULL, err, sizeof err));
    assert_non_null(strstr(err, PATH));
    assert_non_null(strstr(err, "field 'num_hidden_layers' appears more than once"));
    // Inside a nested object too, named by its path.
    cJSON *t = tree(v3_hub);
    cJSON_AddItemToObject(cJSON_GetObjectItem(t, "rope_scaling"), "factor", cJSON_CreateNumber(8));
    expect_error(t, "rope_scaling.factor", "more than once");
    // The same key in two different objects is no duplicate.
    t = tree(v3_hub);
    cJSON_AddItemToObject(cJSON_GetObjectItem(t, "rope_scaling"), "rope_theta", cJSON_CreateNumber(10000));
    assert_true(parse_tree(t, &c, NULL, err, sizeof err));
}

// ---------------------------------------------------------------------------------------------
// Round trip and files
// ---------------------------------------------------------------------------------------------

static void assert_same_config(const model_config *a, const model_config *b) {
#define SAME(f) assert_true(a->f == b->f)
    SAME(vocab_size); SAME(hidden_size); SAME(intermediate_size); SAME(moe_intermediate_size);
    SAME(num_hidden_layers); SAME(num_attention_heads); SAME(q_lora_rank); SAME(kv_lora_rank);
    SAME(qk_nope_head_dim); SAME(qk_rope_head_dim); SAME(v_head_dim); SAME(n_routed_experts);
    SAME(n_shared_experts); SAME(num_experts_per_tok); SAME(first_k_dense_replace);
    SAME(moe_layer_freq); SAME(n_group); SAME(topk_group); SAME(topk_method); SAME(scoring_func);
    SAME(norm_topk_prob); SAME(routed_scaling_factor); SAME(rms_norm_eps); SAME(rope_theta);
    SAME(max_position_embeddings); SAME(rope_interleave); SAME(rope_yarn); SAME(tie_word_embeddings);
    if (a->rope_yarn) {
        SAME(rope_factor); SAME(rope_beta_fast); SAME(rope_beta_slow); SAME(rope_mscale);
        SAME(rope_mscale_all_dim); SAME(rope_original_max_position_embeddings);
    }
#undef SAME
}

static void test_named_configs_round_trip(void **state) {
    (void)state;
    for (const char *const *name = model_config_names(); *name; name++) {
        for (int tie = 0; tie < 2; tie++) {
            model_config want, got;
            assert_true(model_config_by_name(*name, &want));
            want.tie_word_embeddings = tie;
            char err[512];
            char *text = config_json_format(&want, err, sizeof err);
            if (!text) fprintf(stderr, "%s: %s\n", *name, err);
            assert_non_null(text);
            assert_true(config_json_parse(text, strlen(text), *name, &got, NULL, err, sizeof err));
            free(text);
            assert_same_config(&want, &got);
        }
    }
}

static void test_format_refuses_what_transformers_cannot_express(void **state) {
    (void)state;
    model_config c;
    char err[512];
    assert_true(model_config_by_name("tiny", &c));
    c.scoring_func = MOE_SCORING_SOFTMAX;               // softmax + noaux_tc
    assert_null(config_json_format(&c, err, sizeof err));
    assert_non_null(strstr(err, "noaux_tc"));
    assert_true(model_config_by_name("tiny", &c));
    c.topk_method = MOE_TOPK_GREEDY;                    // sigmoid + greedy
    assert_null(config_json_format(&c, err, sizeof err));
    assert_true(model_config_by_name("tiny-v2", &c));
    c.norm_topk_prob = true;                            // DeepseekV2 never normalizes
    assert_null(config_json_format(&c, err, sizeof err));
    assert_non_null(strstr(err, "normalizes"));
    assert_true(model_config_by_name("tiny", &c));
    c.moe_layer_freq = 2;
    assert_null(config_json_format(&c, err, sizeof err));
    assert_non_null(strstr(err, "moe_layer_freq"));
    assert_true(model_config_by_name("tiny", &c));
    c.hidden_size = 0;                                  // fails model_config_validate
    assert_null(config_json_format(&c, err, sizeof err));
    assert_non_null(strstr(err, "hidden_size"));
}

static void test_load_file(void **state) {
    (void)state;
    char dir[64], sub[128], path[160], cmd[160];
    snprintf(dir, sizeof dir, "/tmp/invar_test_cj_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof sub, "%s/DeepSeek-V2-Lite", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    snprintf(path, sizeof path, "%s/config.json", sub);
    model_config c;
    char err[512];
    assert_false(config_json_load(path, &c, NULL, err, sizeof err));   // not there yet
    assert_non_null(strstr(err, path));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(v2_lite_hub, f);
    assert_int_equal(fclose(f), 0);
    assert_true(config_json_load(path, &c, NULL, err, sizeof err));
    assert_string_equal(c.name, "DeepSeek-V2-Lite");
    assert_int_equal(c.vocab_size, 102400);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"model_type\": \"deepseek_v2\", \"vocab_size\": 10", f);   // truncated
    assert_int_equal(fclose(f), 0);
    assert_false(config_json_load(path, &c, NULL, err, sizeof err));
    assert_non_null(strstr(err, path));
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepseek_v3_hub),
        cmocka_unit_test(test_deepseek_v2_lite_hub),
        cmocka_unit_test(test_rope_parameters_spelling),
        cmocka_unit_test(test_yarn_mscale_cases),
        cmocka_unit_test(test_transformers_defaults),
        cmocka_unit_test(test_missing_required_fields),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_named_configs_round_trip),
        cmocka_unit_test(test_format_refuses_what_transformers_cannot_express),
        cmocka_unit_test(test_load_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
