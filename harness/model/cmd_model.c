// harness/model/cmd_model.c — `invar model`: write a synthetic checkpoint in Hugging Face layout, or
// check that a checkpoint directory loads.
//
//   invar model write --config NAME --seed S --out DIR [--shards N]
//   invar model check DIR
#include <inttypes.h>  // PRIu64, uint64_t
#include <math.h>      // isfinite
#include <stdio.h>     // printf, fprintf
#include <stdlib.h>    // free

#include "../cli_args.h"                 // cli_parse, cli_dispatch, cli_usage_error
#include "../commands.h"                 // cmd_model
#include "../../kernels/bf16.h"          // bf16_to_float
#include "../../common/check.h"         // invar_malloc
#include "../../engine/checkpoint.h"     // checkpoint_open, checkpoint_tensors
#include "../../engine/checkpoint_writer.h" // checkpoint_write
#include "../../engine/model_config.h"   // model_config_by_name, model_config_names
#include "../../engine/weights.h"        // weights_synthetic

// The named configs, known only from engine/model_config at run time.
static void list_configs(FILE *f) {
    fprintf(f, "\nnamed configs:");
    for (const char *const *n = model_config_names(); *n; n++) fprintf(f, " %s", *n);
    fprintf(f, "\n");
}

static int model_write(int argc, char **argv) {
    const char *config = NULL, *out = NULL;
    uint64_t seed = 0;
    int shards = 0;  // 0: one file
    const cli_flag flags[] = {
        {.name = "--config", .metavar = "NAME", .to.string = &config, .required = true,
         .help = "a named config (the list is below)"},
        {.name = "--seed", .metavar = "S", .kind = CLI_U64, .to.u64 = &seed, .required = true,
         .help = "the seed of the synthetic weights"},
        {.name = "--out", .metavar = "DIR", .to.string = &out, .required = true,
         .help = "the checkpoint directory"},
        {.name = "--shards", .kind = CLI_INT, .to.integer = &shards, .min = 1, .max = 99999,
         .help = "N files model-0000i-of-0000N.safetensors and\n"
                 "model.safetensors.index.json (default one model.safetensors)"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar model write",
        .about = "Writes the synthetic weights of named config NAME (seed S) as a Hugging Face\n"
                 "checkpoint: DIR/config.json and DIR/model.safetensors.",
        .flags = flags,
        .more_help = list_configs,
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    model_config cfg;
    if (!model_config_by_name(config, &cfg)) {
        int code = cli_usage_error(&cmd, "--config: unknown config '%s'", config);
        list_configs(stderr);
        return code;
    }
    weight_source *src = weights_synthetic(&cfg, seed);
    char err[1024];
    bool ok = checkpoint_write(out, &cfg, src, shards, err, sizeof err);
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
    const char *dir = NULL;
    const cli_flag flags[] = {
        {.name = "DIR", .to.string = &dir, .required = true, .help = "the checkpoint directory"},
        {0},
    };
    const cli_command cmd = {
        .name = "invar model check",
        .about = "Opens checkpoint DIR as `--model DIR` would, reads every tensor once, prints its\n"
                 "config.",
        .flags = flags,
        .epilogue = "exit: 0 every weight is finite, 1 a weight is NaN or infinite, 2 bad input",
    };
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    model_config cfg;
    weight_source *src;
    char err[1024];
    if (!checkpoint_open(dir, &cfg, &src, err, sizeof err)) {
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
           dir, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
           cfg.q_lora_rank, cfg.kv_lora_rank, cfg.n_routed_experts, cfg.num_experts_per_tok,
           cfg.scoring_func == MOE_SCORING_SIGMOID ? "sigmoid" : "softmax", topk[cfg.topk_method],
           cfg.n_shared_experts, cfg.first_k_dense_replace, cfg.rope_yarn ? "yarn" : "default",
           cfg.tie_word_embeddings ? ", tied embeddings" : "", n, non_finite);
    return non_finite ? 1 : 0;
}

int cmd_model(int argc, char **argv) {
    static const cli_subcommand subs[] = {
        {"write", model_write, "write a synthetic checkpoint in Hugging Face layout"},
        {"check", model_check, "check that a checkpoint directory loads and its weights are finite"},
        {0},
    };
    return cli_dispatch("invar model", subs, argc, argv);
}
