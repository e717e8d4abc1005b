// engine/kv_cache.c — block pool, LRU free queue and prefix-cache index (engine/kv_cache.h).
#include "kv_cache.h"

#include <stdlib.h>              // free
#include <string.h>              // memset
#include <xxhash.h>              // XXH64

#include "../common/check.h"    // invar_calloc

struct kv_cache {
    int num_blocks, block_size;
    bool prefix_caching;
    int *refcount;               // [num_blocks]
    // Free queue, least recently freed first: a doubly linked list through prev/next.
    int *prev, *next;
    int free_head, free_tail, free_count;
    bool *in_free_queue;
    // Prefix index: chained hash table from key to block.
    bool *has_key;
    uint64_t *key;
    int *bucket;                 // [num_blocks] first block of each chain, -1 empty
    int *chain;                  // [num_blocks] next block in the same chain
    kv_cache_stats stats;
};

// ---------------------------------------------------------------------------------------------
// Free queue
// ---------------------------------------------------------------------------------------------

static void queue_push_tail(kv_cache *c, int b) {
    c->prev[b] = c->free_tail;
    c->next[b] = -1;
    if (c->free_tail >= 0) c->next[c->free_tail] = b;
    else c->free_head = b;
    c->free_tail = b;
    c->in_free_queue[b] = true;
    c->free_count++;
}

static void queue_remove(kv_cache *c, int b) {
    if (c->prev[b] >= 0) c->next[c->prev[b]] = c->next[b];
    else c->free_head = c->next[b];
    if (c->next[b] >= 0) c->prev[c->next[b]] = c->prev[b];
    else c->free_tail = c->prev[b];
    c->in_free_queue[b] = false;
    c->free_count--;
}

// ---------------------------------------------------------------------------------------------
// Prefix index
// ---------------------------------------------------------------------------------------------

static int bucket_of(const kv_cache *c, uint64_t key) { return (int)(key % (uint64_t)c->num_blocks); }

static void index_remove(kv_cache *c, int b) {
    if (!c->has_key[b]) return;
    int *link = &c->bucket[bucket_of(c, c->key[b])];
    while (*link != b) link = &c->chain[*link];
    *link = c->chain[b];
    c->has_key[b] = false;
}

static int index_find(const kv_cache *c, uint64_t key) {
    for (int b = c->bucket[bucket_of(c, key)]; b >= 0; b = c->chain[b])
        if (c->key[b] == key) return b;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Public
// ---------------------------------------------------------------------------------------------

kv_cache *kv_cache_create(int num_blocks, int block_size, bool prefix_caching) {
    kv_cache *c = invar_calloc(1, sizeof *c, "kv cache");
    c->num_blocks = num_blocks;
    c->block_size = block_size;
    c->prefix_caching = prefix_caching;
    size_t n = (size_t)num_blocks;
    c->refcount = invar_calloc(n, sizeof(int), "kv cache refcounts");
    c->prev = invar_calloc(n, sizeof(int), "kv cache free queue");
    c->next = invar_calloc(n, sizeof(int), "kv cache free queue");
    c->in_free_queue = invar_calloc(n, sizeof(bool), "kv cache free queue");
    c->has_key = invar_calloc(n, sizeof(bool), "kv cache prefix index");
    c->key = invar_calloc(n, sizeof(uint64_t), "kv cache prefix index");
    c->bucket = invar_calloc(n, sizeof(int), "kv cache prefix index");
    c->chain = invar_calloc(n, sizeof(int), "kv cache prefix index");
    kv_cache_reset(c, prefix_caching);
    return c;
}

void kv_cache_destroy(kv_cache *c) {
    if (!c) return;
    free(c->refcount);
    free(c->prev);
    free(c->next);
    free(c->in_free_queue);
    free(c->has_key);
    free(c->key);
    free(c->bucket);
    free(c->chain);
    free(c);
}

void kv_cache_reset(kv_cache *c, bool prefix_caching) {
    c->prefix_caching = prefix_caching;
    c->free_head = c->free_tail = -1;
    c->free_count = 0;
    for (int b = 0; b < c->num_blocks; b++) {
        c->refcount[b] = 0;
        c->has_key[b] = false;
        c->bucket[b] = -1;
        c->chain[b] = -1;
        queue_push_tail(c, b);
    }
    memset(&c->stats, 0, sizeof c->stats);
}

int kv_cache_block_size(const kv_cache *c) { return c->block_size; }
int kv_cache_num_free(const kv_cache *c) { return c->free_count; }
int kv_cache_refcount(const kv_cache *c, int block) { return c->refcount[block]; }
const kv_cache_stats *kv_cache_get_stats(const kv_cache *c) { return &c->stats; }

int kv_cache_alloc(kv_cache *c) {
    int b = c->free_head;
    if (b < 0) return -1;
    queue_remove(c, b);
    if (c->has_key[b]) {
        index_remove(c, b);
        c->stats.evictions++;
    }
    c->refcount[b] = 1;
    return b;
}

void kv_cache_release(kv_cache *c, int block) {
    if (--c->refcount[block] == 0) queue_push_tail(c, block);
}

// The parent's key seeds the hash of this block's tokens, chaining every block to its prefix.
uint64_t kv_cache_block_key(uint64_t parent_key, const int32_t *tokens, int n) {
    return XXH64(tokens, (size_t)n * sizeof *tokens, parent_key ^ 0x1a7a5eedull);
}

int kv_cache_lookup(kv_cache *c, uint64_t key) {
    if (!c->prefix_caching) return -1;
    c->stats.queries++;
    int b = index_find(c, key);
    if (b < 0) return -1;
    c->stats.hits++;
    if (c->in_free_queue[b]) queue_remove(c, b);
    c->refcount[b]++;
    return b;
}

int kv_cache_lookup_prefix(kv_cache *c, const int32_t *tokens, int n_blocks, int32_t *blocks,
                           uint64_t *last_key) {
    uint64_t key = 0;
    int found = 0;
    for (int b = 0; b < n_blocks; b++) {
        key = kv_cache_block_key(key, tokens + (long)b * c->block_size, c->block_size);
        int block = kv_cache_lookup(c, key);
        if (block < 0) break;
        blocks[found++] = block;
        *last_key = key;
    }
    return found;
}

void kv_cache_publish(kv_cache *c, int block, uint64_t key) {
    if (!c->prefix_caching || c->has_key[block] || index_find(c, key) >= 0) return;
    c->has_key[block] = true;
    c->key[block] = key;
    int head = bucket_of(c, key);
    c->chain[block] = c->bucket[head];
    c->bucket[head] = block;
}
