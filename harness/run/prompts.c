// harness/run/prompts.c — seeded prompt generation (harness/run/prompts.h).
#include "prompts.h"

#include <stdlib.h>               // free
#include <string.h>               // memcpy

#include "../../common/check.h"  // invar_malloc, invar_calloc
#include "../../common/hash.h"          // invar_mix64, invar_uniform, invar_gumbel_noise

// Counter-based draws: value i of stream `stream` depends on nothing else, so adding a prompt
// never changes the others.
static uint64_t draw(uint64_t seed, uint64_t stream, uint64_t i) {
    return invar_mix64(seed ^ invar_mix64((stream << 32) ^ i));
}

// Uniform in [0, n) (the modulo bias of a 64-bit draw is far below anything a test could see).
static int draw_below(uint64_t seed, uint64_t stream, uint64_t i, int n) {
    return (int)(draw(seed, stream, i) % (uint64_t)n);
}

// Prompt i's own tokens come from stream STREAM_TOKENS + i, group g's prefix from
// STREAM_PREFIX + g: far apart, so no prompt count makes them meet.
enum { STREAM_LENGTH = 1, STREAM_SEED = 2, STREAM_TOKENS = 16, STREAM_PREFIX = 1u << 20 };

prompt_set *prompts_generate(const prompt_spec *spec, int vocab, uint64_t seed) {
    int distinct = spec->count, total = spec->count + spec->warm_cache_repeats;
    int G = spec->shared_prefix_groups, P = G > 0 ? spec->shared_prefix_len : 0;
    prompt_set *p = invar_calloc(1, sizeof *p, "prompt set");
    p->count = total;
    p->first_warm = distinct;
    p->tokens = invar_calloc((size_t)total, sizeof *p->tokens, "prompt pointers");
    p->lens = invar_calloc((size_t)total, sizeof *p->lens, "prompt lengths");
    p->seeds = invar_calloc((size_t)total, sizeof *p->seeds, "request seeds");
    for (int i = 0; i < distinct; i++) {
        int len = spec->min_len +
                  draw_below(seed, STREAM_LENGTH, (uint64_t)i, spec->max_len - spec->min_len + 1);
        if (i == 0) len = spec->max_len;
        if (i == 1) len = spec->min_len;
        p->lens[i] = len;
        p->seeds[i] = draw(seed, STREAM_SEED, (uint64_t)i);
        p->tokens[i] = invar_malloc((size_t)len * sizeof(int32_t), "prompt tokens");
        int shared = P < len ? P : len;
        for (int t = 0; t < shared; t++)
            p->tokens[i][t] = draw_below(seed, STREAM_PREFIX + (uint64_t)(i % G), (uint64_t)t,
                                         vocab);
        for (int t = shared; t < len; t++)
            p->tokens[i][t] = draw_below(seed, STREAM_TOKENS + (uint64_t)i, (uint64_t)t, vocab);
    }
    for (int i = distinct; i < total; i++) {
        p->lens[i] = p->lens[0];
        p->seeds[i] = p->seeds[0];
        p->tokens[i] = invar_malloc((size_t)p->lens[0] * sizeof(int32_t), "prompt tokens");
        memcpy(p->tokens[i], p->tokens[0], (size_t)p->lens[0] * sizeof(int32_t));
    }
    return p;
}

void prompts_free(prompt_set *p) {
    if (!p) return;
    for (int i = 0; i < p->count; i++) free(p->tokens[i]);
    free(p->tokens);
    free(p->lens);
    free(p->seeds);
    free(p);
}
