// tests/test_kv_cache.c — block allocation and release, reference counts, LRU eviction and the
// prefix-cache index (engine/kv_cache.h).
#include <stdarg.h>   // cmocka needs these four first
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>   // cmocka test API

#include <stdlib.h>   // rand_r

#include "../engine/kv_cache.h"  // kv_cache_*

static void allocates_every_block_once_then_fails(void **state) {
    (void)state;
    kv_cache *c = kv_cache_create(8, 16, false);
    int seen[8] = {0};
    for (int i = 0; i < 8; i++) {
        int b = kv_cache_alloc(c);
        assert_in_range(b, 0, 7);
        assert_int_equal(seen[b]++, 0);
        assert_int_equal(kv_cache_refcount(c, b), 1);
    }
    assert_int_equal(kv_cache_num_free(c), 0);
    assert_int_equal(kv_cache_alloc(c), -1);
    kv_cache_release(c, 3);
    assert_int_equal(kv_cache_num_free(c), 1);
    assert_int_equal(kv_cache_alloc(c), 3);
    kv_cache_destroy(c);
}

static void release_frees_only_at_zero_references(void **state) {
    (void)state;
    kv_cache *c = kv_cache_create(4, 16, true);
    int32_t tokens[16];
    for (int i = 0; i < 16; i++) tokens[i] = 100 + i * 7;
    int b = kv_cache_alloc(c);
    uint64_t key = kv_cache_block_key(0, tokens, 16);
    kv_cache_publish(c, b, key);
    assert_int_equal(kv_cache_lookup(c, key), b);  // a second request shares it
    assert_int_equal(kv_cache_refcount(c, b), 2);
    kv_cache_release(c, b);
    assert_int_equal(kv_cache_num_free(c), 3);
    kv_cache_release(c, b);
    assert_int_equal(kv_cache_num_free(c), 4);
    // Freed but still cached: a lookup revives it with its contents.
    assert_int_equal(kv_cache_lookup(c, key), b);
    assert_int_equal(kv_cache_refcount(c, b), 1);
    assert_int_equal(kv_cache_get_stats(c)->queries, 2);
    assert_int_equal(kv_cache_get_stats(c)->hits, 2);
    kv_cache_destroy(c);
}

static void evicts_least_recently_freed_first(void **state) {
    (void)state;
    kv_cache *c = kv_cache_create(3, 4, true);
    int32_t t[3][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}};
    int blocks[3];
    uint64_t keys[3];
    for (int i = 0; i < 3; i++) {
        blocks[i] = kv_cache_alloc(c);
        keys[i] = kv_cache_block_key(0, t[i], 4);
        kv_cache_publish(c, blocks[i], keys[i]);
    }
    kv_cache_release(c, blocks[1]);
    kv_cache_release(c, blocks[0]);
    kv_cache_release(c, blocks[2]);
    // Free order 1, 0, 2: a new allocation evicts block 1's prefix first.
    assert_int_equal(kv_cache_alloc(c), blocks[1]);
    assert_int_equal(kv_cache_get_stats(c)->evictions, 1);
    assert_int_equal(kv_cache_lookup(c, keys[1]), -1);
    assert_int_equal(kv_cache_lookup(c, keys[0]), blocks[0]);
    kv_cache_destroy(c);
}

static void keys_chain_through_the_parent(void **state) {
    (void)state;
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    uint64_t ka = kv_cache_block_key(0, a, 4), kb = kv_cache_block_key(0, b, 4);
    assert_true(ka != kb);
    // Same tokens under another parent: another key.
    assert_true(kv_cache_block_key(ka, a, 4) != kv_cache_block_key(kb, a, 4));
    assert_true(kv_cache_block_key(0, a, 4) == ka);
}

static void caching_off_never_hits(void **state) {
    (void)state;
    kv_cache *c = kv_cache_create(2, 4, false);
    int32_t t[4] = {1, 2, 3, 4};
    int b = kv_cache_alloc(c);
    uint64_t key = kv_cache_block_key(0, t, 4);
    kv_cache_publish(c, b, key);
    assert_int_equal(kv_cache_lookup(c, key), -1);
    assert_int_equal(kv_cache_get_stats(c)->queries, 0);
    kv_cache_destroy(c);
}

// A prompt of three full blocks, published as one request would, then released; the cache has
// one block more, so the second allocation after that evicts the prompt's first block.
static void prefix_walk_stops_at_an_evicted_first_block(void **state) {
    (void)state;
    kv_cache *c = kv_cache_create(4, 4, true);
    unsigned seed = 0x6060u;
    int32_t tokens[12];
    for (int i = 0; i < 12; i++) tokens[i] = (int32_t)(rand_r(&seed) % 30000) + 1;
    int blocks[3];
    uint64_t keys[3], parent = 0;
    for (int b = 0; b < 3; b++) {
        blocks[b] = kv_cache_alloc(c);
        keys[b] = parent = kv_cache_block_key(parent, tokens + 4 * b, 4);
        kv_cache_publish(c, blocks[b], keys[b]);
    }
    for (int b = 0; b < 3; b++) kv_cache_release(c, blocks[b]);

    // All three cached: the walk finds them in order, one reference each.
    int32_t found[3] = {-7, -7, -7};
    uint64_t last = 0x5eed;
    assert_int_equal(kv_cache_lookup_prefix(c, tokens, 3, found, &last), 3);
    for (int b = 0; b < 3; b++) {
        assert_int_equal(found[b], blocks[b]);
        assert_int_equal(kv_cache_refcount(c, blocks[b]), 1);
    }
    assert_true(last == keys[2]);
    for (int b = 0; b < 3; b++) kv_cache_release(c, blocks[b]);

    // The never-used block goes first, then the least recently freed: the prompt's first block.
    int fresh = kv_cache_alloc(c), evicted = kv_cache_alloc(c);
    assert_int_equal(evicted, blocks[0]);
    assert_int_equal(kv_cache_get_stats(c)->evictions, 1);
    // Blocks 1 and 2 are still indexed, but without block 0 there is no prefix: nothing found,
    // nothing written, no reference taken.
    for (int b = 0; b < 3; b++) found[b] = -7;
    last = 0x5eed;
    assert_int_equal(kv_cache_lookup_prefix(c, tokens, 3, found, &last), 0);
    for (int b = 0; b < 3; b++) assert_int_equal(found[b], -7);
    assert_true(last == 0x5eed);
    assert_int_equal(kv_cache_refcount(c, blocks[1]), 0);
    assert_int_equal(kv_cache_refcount(c, blocks[2]), 0);
    assert_int_equal(kv_cache_num_free(c), 2);
    // The later blocks are still there for a walk that starts at them (their own keys).
    assert_int_equal(kv_cache_lookup(c, keys[1]), blocks[1]);
    kv_cache_release(c, blocks[1]);
    kv_cache_release(c, fresh);
    kv_cache_release(c, evicted);
    kv_cache_destroy(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocates_every_block_once_then_fails),
        cmocka_unit_test(release_frees_only_at_zero_references),
        cmocka_unit_test(evicts_least_recently_freed_first),
        cmocka_unit_test(keys_chain_through_the_parent),
        cmocka_unit_test(caching_off_never_hits),
        cmocka_unit_test(prefix_walk_stops_at_an_evicted_first_block),
    };
    return cmocka_run_group_tests_name("kv_cache", tests, NULL, NULL);
}
