// harness/cmd_model.c — `invar model`: write a synthetic checkpoint in Hugging Face layout, or
// check that a checkpoint directory loads.
//
//   invar model write --config NAME --seed S --out DIR [--shards N]
//   invar model check DIR
#include <errno.h>     // errno
#include <inttypes.h>  // PRIu64
#include <math.h>      // isfinite
#include <stdio.h>     // printf, fprintf
#include <stdlib.h>    // strtoull, free
#include <string.h>    // strcmp

#include "cli_args.h"                    // cli_take_once
#include "commands.h"                    // cmd_model
#include "../kernels/bf16.h"             // bf16_to_float
#include "../common/check.h"            // invar_malloc
#include "../engine/checkpoint.h"        // checkpoint_open, checkpoint_tensors
#include "../engine/checkpoint_writer.h" // checkpoint_write
#include "../engine/model_config.h"      // model_config_by_name, model_config_names
#include "../engine/weights.h"           // weights_synthetic

static void usage(FILE *f) {
    fprintf(f,
            "usage: invar model write --config NAME --seed S --out DIR [--shards N]\n"
            "       invar model check DIR\n"
            "\n"
            "write  writes the synthetic weights of named config NAME (seed S) as a Hugging Face\n"
            "       checkpoint: DIR/config.json and DIR/model.safetensors, or with --shards N,\n"
            "       N files model-0000i-of-0000N.safetensors and model.safetensors.index.json\n"
            "check  opens checkpoint DIR as `--model DIR` would, reads every tensor once, prints\n"
            "       its config; exit 1 when a weight is NaN or infinite\n"
            "\nnamed configs:");
    for (const char *const *n = model_config_names(); *n; n++) fprintf(f, " %s", *n);
    fprintf(f, "\n");
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-') return false;
    *out = v;
    return true;
}

static int model_write(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *seed_s = NULL, *shards_s = NULL;
    for (int i = 0; i < argc; i++) {
        const char **dst = strcmp(argv[i], "--config") == 0   ? &config
                           : strcmp(argv[i], "--out") == 0    ? &out
                           : strcmp(argv[i], "--seed") == 0   ? &seed_s
                           : strcmp(argv[i], "--shards") == 0 ? &shards_s
                                                              : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "invar model write: %s '%s'\n", dst ? "missing value for" : "unknown option",
                    argv[i]);
            usage(stderr);
            return 2;
        }
        if (!cli_take_once("invar model write", argv[i], dst, argv[i + 1])) return 2;
        i++;
    }
    if (!config || !out || !seed_s) {
        fprintf(stderr, "invar model write: --config, --seed and --out are required\n");
        usage(stderr);
        return 2;
    }
    model_config cfg;
    if (!model_config_by_name(config, &cfg)) {
        fprintf(stderr, "invar model write: unknown config '%s'\n", config);
        usage(stderr);
        return 2;
    }
    uint64_t seed, shards = 0;
    if (!parse_u64(seed_s, &seed)) {
        fprintf(stderr, "invar model write: --seed must be an unsigned integer, got '%s'\n", seed_s);
        return 2;
    }
    if (shards_s && (!parse_u64(shards_s, &shards) || shards < 1 || shards > 99999)) {
        fprintf(stderr, "invar model write: --shards must be in [1, 99999], got '%s'\n", shards_s);
        return 2;
    }
    weight_source *src = weights_synthetic(&cfg, seed);
    char err[1024];
    bool ok = checkpoint_write(out, &cfg, src, (int)shards, err, sizeof err);
    src->destroy(src);
    if (!ok) {
        fprintf(stderr, "invar: error: %s\n", err);
        return 2;
    }
    printf("wrote %s (config %s, seed %" PRIu64 ", %d tensors%s)\n", out, config, seed,
           checkpoint_tensors(&cfg, NULL, 0), shards ? ", sharded" : "");
    return 0;
}

static int model_check(int argc, char **argv) {
    if (argc != 1) {
        usage(stderr);
        return 2;
    }
    model_config cfg;
    weight_source *src;
    char err[1024];
    if (!checkpoint_open(argv[0], &cfg, &src, err, sizeof err)) {
        fprintf(stderr, "invar: error: %s\n", err);
        return 2;
    }
    // Read every tensor once, as the engine would (progress shows on a terminal), and count
    // values that are not finite: a cheap end-to-end check of a downloaded checkpoint.
    int n = checkpoint_tensors(&cfg, NULL, 0);
    checkpoint_tensor *ts = invar_malloc((size_t)n * sizeof *ts, "tensor list");
    checkpoint_tensors(&cfg, ts, n);
    size_t largest = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)ts[i].shape[0] * (size_t)(ts[i].ndim > 1 ? ts[i].shape[1] : 1) * 4;
        if (bytes > largest) largest = bytes;
    }
    void *buf = invar_malloc(largest, "tensor buffer");
    long long non_finite = 0;
    for (int i = 0; i < n; i++) {
        int64_t count = ts[i].shape[0] * (ts[i].ndim > 1 ? ts[i].shape[1] : 1);
        if (ts[i].f32) {
            src->read_f32(src, ts[i].name, ts[i].shape, ts[i].ndim, buf);
            for (int64_t k = 0; k < count; k++) non_finite += !isfinite(((float *)buf)[k]);
        } else {
            src->read_bf16(src, ts[i].name, ts[i].shape, ts[i].ndim, buf);
            for (int64_t k = 0; k < count; k++) non_finite += !isfinite(bf16_to_float(((bf16 *)buf)[k]));
        }
    }
    free(buf);
    free(ts);
    src->destroy(src);
    static const char *const topk[] = {"greedy", "group_limited_greedy", "noaux_tc"};
    printf("%s: %d layers, hidden %d, %d heads, q_lora_rank %d, kv_lora_rank %d, "
           "%d routed experts (top %d, %s, %s), %d shared, first %d dense, rope %s%s: "
           "%d tensors read, %lld non-finite values\n",
           argv[0], cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
           cfg.q_lora_rank, cfg.kv_lora_rank, cfg.n_routed_experts, cfg.num_experts_per_tok,
           cfg.scoring_func == MOE_SCORING_SIGMOID ? "sigmoid" : "softmax", topk[cfg.topk_method],
           cfg.n_shared_experts, cfg.first_k_dense_replace, cfg.rope_yarn ? "yarn" : "default",
           cfg.tie_word_embeddings ? ", tied embeddings" : "", n, non_finite);
    return non_finite ? 1 : 0;
}

int cmd_model(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "write") == 0) return model_write(argc - 2, argv + 2);
    if (strcmp(argv[1], "check") == 0) return model_check(argc - 2, argv + 2);
    fprintf(stderr, "invar model: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
