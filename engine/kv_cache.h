// engine/kv_cache.h — bookkeeping of the paged latent KV cache: a pool of fixed-size blocks with
// reference counts, per-request block tables, and block-level prefix caching (a full block's key
// is the xxHash of its parent's key and its tokens; freed blocks stay cached until evicted in
// LRU order). The cache's contents live on the kernel set's device; this is the host side.
#ifndef INVAR_ENGINE_KV_CACHE_H
#define INVAR_ENGINE_KV_CACHE_H

#include <stdbool.h>  // bool
#include <stdint.h>   // int32_t, uint64_t

typedef struct kv_cache kv_cache;

typedef struct {
    long queries;        // full prompt blocks looked up
    long hits;           // of which found cached
    long evictions;      // cached blocks reused for new content
} kv_cache_stats;

kv_cache *kv_cache_create(int num_blocks, int block_size, bool prefix_caching);
void kv_cache_destroy(kv_cache *c);
// Every block free, the prefix cache emptied, statistics zeroed, prefix caching on or off.
void kv_cache_reset(kv_cache *c, bool prefix_caching);

int kv_cache_block_size(const kv_cache *c);
int kv_cache_num_free(const kv_cache *c);   // allocatable now (free + cached-but-unused)

// A fresh block with reference count 1, evicting the least recently freed cached block when no
// uncached one is left; -1 when every block is in use.
int kv_cache_alloc(kv_cache *c);
// Drops one reference; at zero the block becomes free (kept findable if it holds a prefix).
void kv_cache_release(kv_cache *c, int block);
int kv_cache_refcount(const kv_cache *c, int block);

// Prefix caching. Key of a full block: parent key (0 for the first block) and its tokens.
uint64_t kv_cache_block_key(uint64_t parent_key, const int32_t *tokens, int n);
// The block holding `key`, with one more reference taken; -1 when absent (or caching off).
int kv_cache_lookup(kv_cache *c, uint64_t key);
// The longest cached prefix of `n_blocks` full blocks of `tokens`: its blocks, in order, into
// blocks[] (one more reference each) and the key of its last block into *last_key; returns how
// many. The walk stops at the first block not cached: a later block still indexed after an
// evicted one holds the right tokens at the wrong position in the table.
int kv_cache_lookup_prefix(kv_cache *c, const int32_t *tokens, int n_blocks, int32_t *blocks,
                           uint64_t *last_key);
// `block`, just filled completely, now holds `key` (no-op when caching off or key present).
void kv_cache_publish(kv_cache *c, int block, uint64_t key);

const kv_cache_stats *kv_cache_get_stats(const kv_cache *c);

#endif
