// harness/run/prompts.h — the prompts of a case: seeded and deterministic, so every machine and
// every config runs the same token ids.
//
// Three shapes make batch variance show where a plain random set would hide it:
//   - lengths up to max_len, longer than a small token budget, so a prompt's prefill chunking
//     differs between bs=1 and bs=N;
//   - groups sharing a long prefix, so bs=N finds prefix-cache hits that bs=1 (one request per
//     run, a cold cache every time) never does;
//   - copies of prompt 0 that arrive after it finished: the same prompt prefilled from a cold
//     cache (bs=1) and from a warm one (bs=N).
#ifndef INVAR_HARNESS_PROMPTS_H
#define INVAR_HARNESS_PROMPTS_H

#include <stdint.h>  // int32_t, uint64_t

typedef struct {
    int count;                 // distinct prompts
    int min_len, max_len;      // lengths are drawn in [min_len, max_len]
    int shared_prefix_groups;  // G > 0: prompt i begins with group (i % G)'s prefix
    int shared_prefix_len;     // P tokens of that prefix (< min_len, so each prompt has its own)
    int warm_cache_repeats;    // copies of prompt 0 appended after the distinct prompts
} prompt_spec;

typedef struct {
    int count;         // distinct prompts + warm copies
    int first_warm;    // index of the first copy of prompt 0 (count when there are none)
    int32_t **tokens;  // tokens[i]: lens[i] ids in [0, vocab)
    int *lens;
    uint64_t *seeds;   // per-request sampling seeds (a copy has prompt 0's)
} prompt_set;

// Lengths are drawn uniformly in [min_len, max_len], except that prompt 0 takes max_len and
// prompt 1 takes min_len (when count allows): the longest prompt then exceeds any token budget
// below max_len, so it is prefilled in several chunks, and both ends of the range are run.
// Without shared prefixes or copies, the prompts depend only on (count, lengths, vocab, seed).
prompt_set *prompts_generate(const prompt_spec *spec, int vocab, uint64_t seed);
void prompts_free(prompt_set *p);

#endif
