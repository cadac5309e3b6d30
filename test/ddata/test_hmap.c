/*  test_hmap.c — the byte-string hash map the types share: lookups across growth, removal
    holes and compaction, iteration while removing, and the canonical order of the radix sort
    against a plain comparison sort on keys made to hit its edges (shared prefixes longer than a
    chunk and than the depth limit, keys that end inside a chunk, zero bytes, the empty key). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void seed(uint64_t s)
{
    rng_state = s ? s : 1;
    print_message("seed %llu\n", (unsigned long long)s);
}

typedef struct {
    uint8_t *key;
    size_t len;
} key_t_;

static int key_cmp(const void *a, const void *b)
{
    const key_t_ *x = a, *y = b;
    return shoal_bytes_cmp(x->key, x->len, y->key, y->len);
}

/* Checks that shoal_hmap_sorted lists exactly the map's keys, in shoal_bytes_cmp order. */
static void check_sorted(const shoal_hmap_t *h)
{
    shoal_hslot_t **v = shoal_hmap_sorted(h);
    size_t live = 0;
    for (size_t i = 0; i < h->cap; i++)
        live += SHOAL_HSLOT_LIVE(&h->slots[i]);
    assert_int_equal(live, h->n);
    for (size_t i = 0; i < h->n; i++) {
        assert_true(SHOAL_HSLOT_LIVE(v[i]));
        if (i > 0)
            assert_true(shoal_bytes_cmp(v[i - 1]->key, v[i - 1]->klen, v[i]->key, v[i]->klen) < 0);
    }
    free(v);
}

static void fill_and_check(key_t_ *keys, size_t n)
{
    shoal_hmap_t h = {0};
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) {
        bool inserted;
        shoal_hslot_t *s = shoal_hmap_upsert(&h, keys[i].key, keys[i].len, &inserted);
        if (inserted) {
            s->value = &keys[i];
            distinct++;
        }
    }
    assert_int_equal(h.n, distinct);
    /* the reference: the same keys through qsort, duplicates dropped */
    key_t_ *ref = malloc((n ? n : 1) * sizeof *ref);
    memcpy(ref, keys, n * sizeof *ref);
    qsort(ref, n, sizeof *ref, key_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || key_cmp(&ref[m - 1], &ref[i]) != 0)
            ref[m++] = ref[i];
    assert_int_equal(m, distinct);
    shoal_hslot_t **v = shoal_hmap_sorted(&h);
    for (size_t i = 0; i < m; i++) {
        assert_int_equal(v[i]->klen, ref[i].len);
        assert_memory_equal(v[i]->key, ref[i].key, ref[i].len ? ref[i].len : 1 /* "" */ );
    }
    free(v);
    free(ref);
    shoal_hmap_free(&h);
}

/* Random keys over a small alphabet with zero bytes, random lengths 0..80, and long shared
   prefixes, so that ties run through several 16-byte chunks and past the depth limit. */
static void sorted_matches_qsort(void **state)
{
    (void)state;
    seed(0x5eed0001);
    static const size_t sizes[] = {0, 1, 2, 63, 64, 65, 1000, 20000};
    for (size_t t = 0; t < sizeof sizes / sizeof *sizes; t++) {
        size_t n = sizes[t];
        key_t_ *keys = calloc(n ? n : 1, sizeof *keys);
        uint8_t prefix[100];
        for (size_t j = 0; j < sizeof prefix; j++)
            prefix[j] = (uint8_t)(rnd() % 3);
        for (size_t i = 0; i < n; i++) {
            size_t len = (size_t)(rnd() % 81), shared = (size_t)(rnd() % 100);
            keys[i].key = malloc(len ? len : 1);
            keys[i].len = len;
            for (size_t j = 0; j < len; j++)
                keys[i].key[j] = j < shared ? prefix[j] : (uint8_t)(rnd() % 3);
        }
        fill_and_check(keys, n);
        for (size_t i = 0; i < n; i++)
            free(keys[i].key);
        free(keys);
    }
}

/* Entity ids as sharding writes them: one common prefix, the differing digits at the end. */
static void sorted_entity_ids(void **state)
{
    (void)state;
    enum { N = 30000 };
    key_t_ *keys = calloc(N, sizeof *keys);
    char buf[64];
    for (size_t i = 0; i < N; i++) {
        size_t j = (i * 7919) % N; /* inserted out of order */
        int len = snprintf(buf, sizeof buf, i % 2 ? "entity-%08zu" : "entity-%zu", j);
        keys[i].key = (uint8_t *)strdup(buf);
        keys[i].len = (size_t)len;
    }
    fill_and_check(keys, N);
    for (size_t i = 0; i < N; i++)
        free(keys[i].key);
    free(keys);
}

/* Inserts, removes (through both remove calls) and re-inserts across many compactions and
   index rehashes, against a plain array of what should be there. */
static void remove_compact_lookup(void **state)
{
    (void)state;
    seed(0x5eed0002);
    enum { SPACE = 5000, OPS = 200000 };
    static int present[SPACE];
    static int value_of[SPACE];
    memset(present, 0, sizeof present);
    shoal_hmap_t h = {0};
    size_t n = 0;
    char key[32];
    for (size_t op = 0; op < OPS; op++) {
        size_t k = (size_t)(rnd() % SPACE);
        int len = snprintf(key, sizeof key, "k%zu", k);
        switch (rnd() % 4) {
        case 0:
        case 1: {
            bool inserted;
            shoal_hslot_t *s = shoal_hmap_upsert(&h, key, (size_t)len, &inserted);
            assert_int_equal(inserted, !present[k]);
            if (inserted) {
                present[k] = 1;
                n++;
            }
            value_of[k] = (int)op;
            s->value = &value_of[k];
            break;
        }
        case 2: {
            void *v = shoal_hmap_remove(&h, key, (size_t)len);
            assert_ptr_equal(v, present[k] ? &value_of[k] : NULL);
            if (present[k]) {
                present[k] = 0;
                n--;
            }
            break;
        }
        default:
            assert_ptr_equal(shoal_hmap_get(&h, key, (size_t)len), present[k] ? &value_of[k] : NULL);
        }
        assert_int_equal(h.n, n);
        assert_true(h.used * 4 <= h.index_cap * 3);
        assert_true(h.cap <= h.alloc);
    }
    for (size_t k = 0; k < SPACE; k++) {
        int len = snprintf(key, sizeof key, "k%zu", k);
        assert_ptr_equal(shoal_hmap_get(&h, key, (size_t)len), present[k] ? &value_of[k] : NULL);
    }
    check_sorted(&h);
    /* the slots stay dense: holes never outnumber what compaction allows plus one growth */
    assert_true(h.alloc <= 4 * (h.n + 16));
    shoal_hmap_free(&h);
}

/* A map that churns at a steady size (insert one, remove one, as the replicator's pending
   requests do) rebuilds rarely: the rebuilt index and slots leave room for a quarter of their
   size before the next one. */
static void steady_churn_rebuilds_rarely(void **state)
{
    (void)state;
    shoal_hmap_t h = {0};
    char key[32];
    bool inserted;
    enum { LIVE = 255, OPS = 100000 }; /* 255 + 1: a power of two, the worst case */
    static int op;
    for (int i = 0; i < LIVE; i++) {
        int len = snprintf(key, sizeof key, "req-%d", i);
        shoal_hmap_upsert(&h, key, (size_t)len, &inserted)->value = &op;
    }
    size_t rebuilds = 0;
    for (int i = LIVE; i < OPS; i++) {
        size_t used = h.used, cap = h.cap;
        int len = snprintf(key, sizeof key, "req-%d", i);
        shoal_hmap_upsert(&h, key, (size_t)len, &inserted)->value = &op;
        assert_true(inserted);
        /* an insert without a rebuild adds one index position and one slot */
        if (h.used != used + 1 || h.cap != cap + 1)
            rebuilds++;
        len = snprintf(key, sizeof key, "req-%d", i - LIVE);
        assert_ptr_equal(shoal_hmap_remove(&h, key, (size_t)len), &op);
        assert_int_equal(h.n, LIVE);
    }
    /* each rebuild is followed by at least LIVE / 2 inserts before the next */
    assert_true(rebuilds <= 2 * OPS / LIVE + 2);
    shoal_hmap_free(&h);
}

/* Removing entries met by an iteration leaves holes the iteration walks past; what was not
   removed is still found, and the removed keys can come back. */
static void kill_during_iteration(void **state)
{
    (void)state;
    shoal_hmap_t h = {0};
    char key[32];
    static int one = 1;
    for (int i = 0; i < 1000; i++) {
        bool inserted;
        int len = snprintf(key, sizeof key, "e%d", i);
        shoal_hmap_upsert(&h, key, (size_t)len, &inserted)->value = &one;
    }
    size_t seen = 0;
    for (size_t i = 0; i < h.cap; i++) {
        shoal_hslot_t *s = &h.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        seen++;
        if (s->key[s->klen - 1] % 2 == 0)
            shoal_hmap_kill(&h, s);
    }
    assert_int_equal(seen, 1000);
    assert_int_equal(h.n, 500);
    for (int i = 0; i < 1000; i++) {
        int len = snprintf(key, sizeof key, "e%d", i);
        assert_int_equal(shoal_hmap_get(&h, key, (size_t)len) != NULL, i % 2 == 1);
    }
    for (int i = 0; i < 1000; i += 2) {
        bool inserted;
        int len = snprintf(key, sizeof key, "e%d", i);
        shoal_hmap_upsert(&h, key, (size_t)len, &inserted)->value = &one;
        assert_true(inserted);
    }
    assert_int_equal(h.n, 1000);
    check_sorted(&h);
    shoal_hmap_free(&h);
}

/* The remembered order: random batches of inserts, removes and re-inserts (some small enough
   that the next sort merges them into the memo, some large enough to sort everything again, some
   crossing a compaction) between sorts, each sort checked against the map's live keys. */
static void sorted_memo_follows_changes(void **state)
{
    (void)state;
    seed(0x5eed0003);
    enum { SPACE = 20000, ROUNDS = 300 };
    static bool present[SPACE];
    memset(present, 0, sizeof present);
    shoal_hmap_t h = {0};
    char key[32];
    static int one = 1;
    size_t merged = 0, full = 0;
    for (int round = 0; round < ROUNDS; round++) {
        size_t batch = round % 10 == 9 ? (size_t)(rnd() % 8000) : (size_t)(rnd() % 40);
        for (size_t b = 0; b < batch; b++) {
            size_t k = (size_t)(rnd() % SPACE);
            /* keys of varied lengths and a shared prefix, so the merge compares across chunks */
            int len = snprintf(key, sizeof key, k % 3 ? "entity-%zu" : "entity-%08zu-x", k);
            if (rnd() % 3) {
                bool inserted;
                shoal_hmap_upsert(&h, key, (size_t)len, &inserted)->value = &one;
                present[k] = true;
            } else if (shoal_hmap_remove(&h, key, (size_t)len)) {
                present[k] = false;
            }
        }
        bool memo = h.order && h.cap - h.order_mark <= h.n / 4;
        merged += memo;
        full += !memo;
        check_sorted(&h);
        size_t live = 0;
        for (size_t k = 0; k < SPACE; k++)
            live += present[k];
        assert_int_equal(h.n, live);
        if (h.n >= 256)
            assert_non_null(h.order); /* a large map remembers what it sorted */
    }
    print_message("%zu sorts merged into the memo, %zu sorted whole\n", merged, full);
    assert_true(merged > ROUNDS / 2);
    assert_true(full > 10);
    shoal_hmap_free(&h);
}

/* A reserved map takes n entries without moving them. */
static void reserve_keeps_slots(void **state)
{
    (void)state;
    shoal_hmap_t h = {0};
    shoal_hmap_reserve(&h, 4096);
    char key[32];
    bool inserted;
    shoal_hslot_t *first = shoal_hmap_upsert(&h, "first", 5, &inserted);
    for (int i = 0; i < 4095; i++) {
        int len = snprintf(key, sizeof key, "r%d", i);
        shoal_hmap_upsert(&h, key, (size_t)len, &inserted);
    }
    assert_ptr_equal(shoal_hmap_upsert(&h, "first", 5, &inserted), first);
    assert_false(inserted);
    shoal_hmap_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sorted_matches_qsort),
        cmocka_unit_test(sorted_entity_ids),
        cmocka_unit_test(remove_compact_lookup),
        cmocka_unit_test(steady_churn_rebuilds_rarely),
        cmocka_unit_test(kill_during_iteration),
        cmocka_unit_test(reserve_keeps_slots),
        cmocka_unit_test(sorted_memo_follows_changes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
