/*  test_estate.c — EntityStateMap (sharding/estate.c): the API (put/get, stale writes refused,
    deletes, key order, prefixes, the pending delta), re-stamping and tombstone collection, the
    admit rule that refuses a stale owner, deterministic ties, canonical encoding, bad input of
    both payload formats (protobuf, and the format-1 layout still read), rendering, 10,000-entry
    maps, and the property harness (merge laws, convergence under duplicated and reordered
    delivery, the delta law, round trips, corruption).
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"
#include "ddata.pb-c.h"
#include "estate.pb-c.h"
#include "prop.h"
#include "../../sharding/estate.h"

static int setup(void **state)
{
    (void)state;
    return estate_register();
}

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */
static void put(shoal_crdt_t *m, const char *k, uint64_t epoch, uint64_t seq, const char *v,
                int expect)
{
    assert_int_equal(estate_put(m, k, strlen(k), epoch, seq, v, strlen(v)), expect);
}

static void drop_delta(shoal_crdt_t *m)
{
    shoal_crdt_t *d = shoal_crdt_take_delta(m);
    shoal_crdt_destroy(&d);
}

static shoal_crdt_t *merged(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *m = shoal_crdt_clone(a);
    assert_int_equal(shoal_crdt_merge(m, b), 0);
    return m;
}

static char *render(const shoal_crdt_t *v)
{
    shoal_buf_t r = {0};
    assert_int_equal(shoal_crdt_render(v, &r), 0);
    char *s = strdup(shoal_buf_cstr(&r));
    shoal_buf_free(&r);
    return s;
}

/* Wraps a payload in a Value envelope of the type at format `version` and decodes it. */
static int decode_payload(const void *payload, size_t len, uint32_t version, shoal_crdt_t **out)
{
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = ESTATE_TAG;
    env.version = version;
    env.payload.data = (uint8_t *)payload;
    env.payload.len = len;
    size_t n = shoal__ddata__value__get_packed_size(&env);
    uint8_t *buf = malloc(n ? n : 1);
    shoal__ddata__value__pack(&env, buf);
    int rc = shoal_crdt_decode(buf, n, out);
    free(buf);
    return rc;
}

/* A protobuf payload of the given entries (whatever their order or validity). */
typedef struct {
    const char *key;
    size_t klen;
    uint64_t epoch, seq;
    bool deleted;
    int64_t dms;
    size_t dlen; /* data: dlen bytes of 'd' */
} raw_t;

static int decode_raw(uint64_t fence, const raw_t *r, size_t n, shoal_crdt_t **out)
{
    Shoal__Sharding__EntityStateMap msg = SHOAL__SHARDING__ENTITY_STATE_MAP__INIT;
    Shoal__Sharding__EntityStateEntry ents[8], *ptrs[8];
    assert_true(n <= 8);
    size_t dmax = 0;
    for (size_t i = 0; i < n; i++)
        dmax = r[i].dlen > dmax ? r[i].dlen : dmax;
    uint8_t *data = malloc(dmax ? dmax : 1);
    memset(data, 'd', dmax);
    msg.fence = fence;
    msg.n_entries = n;
    msg.entries = ptrs;
    for (size_t i = 0; i < n; i++) {
        shoal__sharding__entity_state_entry__init(&ents[i]);
        ents[i].key.data = (uint8_t *)r[i].key;
        ents[i].key.len = r[i].klen;
        ents[i].epoch = r[i].epoch;
        ents[i].seq = r[i].seq;
        ents[i].deleted = r[i].deleted;
        ents[i].deleted_unix_ms = r[i].dms;
        ents[i].data.data = data;
        ents[i].data.len = r[i].dlen;
        ptrs[i] = &ents[i];
    }
    size_t len = shoal__sharding__entity_state_map__get_packed_size(&msg);
    uint8_t *buf = malloc(len ? len : 1);
    shoal__sharding__entity_state_map__pack(&msg, buf);
    int rc = decode_payload(buf, len, 2, out);
    free(buf);
    free(data);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The API
 */
static void test_put_get_order(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    put(m, "b", 1, 1, "one", 0);
    put(m, "a", 1, 1, "x", 0);
    put(m, "b", 1, 2, "two", 0);
    put(m, "b", 1, 2, "again", SHOAL_ESTALE); /* not newer */
    put(m, "b", 1, 1, "older", SHOAL_ESTALE);
    put(m, "b", 0, 99, "older epoch", SHOAL_ESTALE);
    estate_entry_t e;
    assert_int_equal(estate_get(m, "b", 1, &e), 0);
    assert_int_equal(e.epoch, 1);
    assert_int_equal(e.seq, 2);
    assert_false(e.deleted);
    assert_int_equal(e.deleted_unix_ms, 0);
    assert_int_equal(e.len, 3);
    assert_memory_equal(e.data, "two", 3);
    assert_int_equal(estate_get(m, "c", 1, &e), SHOAL_ENOTFOUND);
    assert_int_equal(estate_get(m, "bb", 2, &e), SHOAL_ENOTFOUND);
    put(m, "b", 2, 0, "new owner", 0); /* a newer epoch wins whatever the seq */
    assert_int_equal(estate_delete(m, "a", 1, 2, 1, 1234), 0);
    assert_int_equal(estate_get(m, "a", 1, &e), 0);
    assert_true(e.deleted);
    assert_int_equal(e.deleted_unix_ms, 1234);
    assert_int_equal(e.len, 0);
    /* a delete is a write like any other: not newer, refused; a newer put revives the key */
    assert_int_equal(estate_delete(m, "a", 1, 2, 1, 9999), SHOAL_ESTALE);
    put(m, "a", 2, 2, "back", 0);
    assert_int_equal(estate_get(m, "a", 1, &e), 0);
    assert_false(e.deleted);
    assert_int_equal(e.deleted_unix_ms, 0);
    assert_int_equal(estate_count(m), 2);
    /* an empty state is a state (data NULL with len 0) */
    assert_int_equal(estate_put(m, "empty", 5, 1, 1, NULL, 0), 0);
    assert_int_equal(estate_get(m, "empty", 5, &e), 0);
    assert_int_equal(e.len, 0);
    assert_false(e.deleted);
    assert_int_equal(estate_count(m), 3);
    shoal_crdt_destroy(&m);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    estate_entry_t e;
    assert_int_equal(estate_put(m, "", 0, 3, 1, "x", 1), SHOAL_EINVAL);
    assert_int_equal(estate_put(m, NULL, 1, 3, 1, "x", 1), SHOAL_EINVAL);
    assert_int_equal(estate_put(m, "k", 1, 3, 1, NULL, 1), SHOAL_EINVAL);
    assert_int_equal(estate_put(NULL, "k", 1, 3, 1, "x", 1), SHOAL_EINVAL);
    char big[ESTATE_KEY_MAX + 1];
    memset(big, 'k', sizeof big);
    assert_int_equal(estate_put(m, big, sizeof big, 3, 1, "x", 1), SHOAL_EINVAL);
    assert_int_equal(estate_put(m, big, ESTATE_KEY_MAX, 3, 1, "x", 1), 0); /* the limit itself */
    /* over the data limit: refused before anything is read from data */
    assert_int_equal(estate_put(m, "k", 1, 3, 1, "x", (size_t)ESTATE_DATA_MAX + 1), SHOAL_ETOOBIG);
    assert_int_equal(estate_get(m, NULL, 1, &e), SHOAL_EINVAL);
    assert_int_equal(estate_get(m, "k", 1, NULL), SHOAL_EINVAL);
    assert_int_equal(estate_foreach(m, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(estate_foreach_prefix(m, NULL, 3, NULL, NULL), SHOAL_EINVAL);
    /* another type: refused, not read as an EntityStateMap */
    shoal_crdt_t *g = shoal_gset_new();
    assert_int_equal(estate_put(g, "k", 1, 1, 1, "x", 1), SHOAL_ETYPE);
    assert_int_equal(estate_delete(g, "k", 1, 1, 1, 1), SHOAL_ETYPE);
    assert_int_equal(estate_raise_fence(g, 3), SHOAL_ETYPE);
    assert_int_equal(estate_get(g, "k", 1, &e), SHOAL_EINVAL);
    assert_int_equal(estate_count(g), 0);
    assert_int_equal(estate_fence(g), 0);
    assert_int_equal(estate_restamp(g, 3, 0), 0);
    assert_int_equal(estate_bytes(g), 0);
    assert_int_equal(estate_admit(g, m), 0);
    assert_int_equal(estate_count(NULL), 0);
    shoal_crdt_destroy(&g);
    assert_int_equal(estate_register(), 0); /* idempotent */
    assert_int_equal(estate_count(m), 1);
    shoal_crdt_destroy(&m);
}

typedef struct {
    char keys[16][16];
    size_t klens[16];
    int n;
    int stop_at; /* return 7 at this call (0: never) */
} seen_t;

static int collect(const void *key, size_t klen, const estate_entry_t *e, void *arg)
{
    (void)e;
    seen_t *s = arg;
    assert_true(s->n < 16 && klen < 16);
    memcpy(s->keys[s->n], key, klen);
    s->klens[s->n] = klen;
    s->n++;
    return s->n == s->stop_at ? 7 : 0;
}

static void test_foreach_order_and_prefix(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    /* inserted out of order; key order is memcmp, the shorter first on a common prefix */
    const char *keys[] = {"b",
                          "ab",
                          "a",
                          "\xff",
                          "a\x00z",
                          "\x01"
                          "e1\0r2",
                          "\x01"
                          "e1\0r1",
                          "\x01"
                          "e1",
                          "\x01"
                          "e10\0r1",
                          "\x01"
                          "e2\0r1"};
    const size_t lens[] = {1, 2, 1, 1, 3, 6, 6, 3, 7, 6};
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(estate_put(m, keys[i], lens[i], 1, i + 1, "v", 1), 0);
    seen_t s = {0};
    assert_int_equal(estate_foreach(m, collect, &s), 0);
    assert_int_equal(s.n, 10);
    for (int i = 1; i < s.n; i++) {
        size_t n = s.klens[i - 1] < s.klens[i] ? s.klens[i - 1] : s.klens[i];
        int c = memcmp(s.keys[i - 1], s.keys[i], n);
        assert_true(c < 0 || (c == 0 && s.klens[i - 1] < s.klens[i]));
    }
    assert_memory_equal(s.keys[0],
                        "\x01"
                        "e1",
                        3); /* shorter first */
    assert_int_equal(s.klens[0], 3);
    assert_memory_equal(s.keys[9], "\xff", 1);
    /* one entity's reminders: "\x01e1\0" — not "\x01e1" itself, nor "\x01e10\0r1" */
    memset(&s, 0, sizeof s);
    assert_int_equal(estate_foreach_prefix(m,
                                           "\x01"
                                           "e1\0",
                                           4, collect, &s),
                     0);
    assert_int_equal(s.n, 2);
    assert_memory_equal(s.keys[0],
                        "\x01"
                        "e1\0r1",
                        6);
    assert_memory_equal(s.keys[1],
                        "\x01"
                        "e1\0r2",
                        6);
    /* every reminder */
    memset(&s, 0, sizeof s);
    assert_int_equal(estate_foreach_prefix(m, "\x01", 1, collect, &s), 0);
    assert_int_equal(s.n, 5);
    /* no key with it, and one longer than any key */
    memset(&s, 0, sizeof s);
    assert_int_equal(estate_foreach_prefix(m, "c", 1, collect, &s), 0);
    assert_int_equal(estate_foreach_prefix(m, "abc", 3, collect, &s), 0);
    assert_int_equal(s.n, 0);
    /* the callback stops the walk and its value comes back */
    memset(&s, 0, sizeof s);
    s.stop_at = 3;
    assert_int_equal(estate_foreach(m, collect, &s), 7);
    assert_int_equal(s.n, 3);
    memset(&s, 0, sizeof s);
    s.stop_at = 1;
    assert_int_equal(estate_foreach_prefix(m, "a", 1, collect, &s), 7);
    assert_int_equal(s.n, 1);
    shoal_crdt_destroy(&m);
}

static void test_delta(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    assert_null(shoal_crdt_delta(m));
    assert_null(shoal_crdt_take_delta(m));
    assert_int_equal(estate_raise_fence(m, 4), 0);
    const shoal_crdt_t *d = shoal_crdt_delta(m);
    assert_non_null(d);
    assert_int_equal(estate_fence(d), 4);
    assert_int_equal(estate_count(d), 0);
    drop_delta(m);
    assert_int_equal(estate_raise_fence(m, 3), 0); /* not a raise: no change, no delta */
    assert_null(shoal_crdt_delta(m));
    put(m, "a", 4, 1, "1", 0);
    put(m, "a", 4, 2, "2", 0);
    put(m, "b", 4, 1, "x", 0);
    put(m, "b", 4, 1, "y", SHOAL_ESTALE);
    assert_int_equal(estate_delete(m, "c", 1, 4, 3, 77), 0);
    shoal_crdt_t *taken = shoal_crdt_take_delta(m);
    assert_non_null(taken);
    assert_null(shoal_crdt_delta(m));
    assert_int_equal(estate_count(taken), 3);
    assert_int_equal(estate_fence(taken), 0); /* the fence did not change since the last take */
    estate_entry_t e;
    assert_int_equal(estate_get(taken, "a", 1, &e), 0);
    assert_int_equal(e.seq, 2);
    assert_memory_equal(e.data, "2", 1);
    assert_int_equal(estate_get(taken, "b", 1, &e), 0);
    assert_memory_equal(e.data, "x", 1);
    assert_int_equal(estate_get(taken, "c", 1, &e), 0);
    assert_true(e.deleted);
    /* a merge is not a local change: nothing to ship */
    shoal_crdt_t *other = estate_new();
    put(other, "z", 9, 9, "z", 0);
    estate_raise_fence(other, 9);
    assert_int_equal(shoal_crdt_merge(m, other), 0);
    assert_null(shoal_crdt_delta(m));
    /* the delta brings a replica to the same state */
    shoal_crdt_t *replica = estate_new();
    shoal_crdt_t *sent = prop_roundtrip(taken);
    assert_int_equal(shoal_crdt_merge_delta(replica, sent), 0);
    assert_int_equal(shoal_crdt_merge_delta(replica, other), 0);
    prop_assert_same(m, replica, "delta", 0);
    shoal_crdt_t *all[] = {m, taken, other, replica, sent};
    for (size_t i = 0; i < 5; i++)
        shoal_crdt_destroy(&all[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Re-stamping and admitting
 */
/* A tombstone the new owner collects at its re-stamp does not come back from a replica that
   still holds it (nor does an older live version of the key), in either merge direction. */
static void test_collected_stays_collected(void **state)
{
    (void)state;
    shoal_crdt_t *a = estate_new(), *b = NULL;
    assert_int_equal(estate_put(a, "gone", 4, 1, 1, "old", 3), 0);
    shoal_crdt_t *stale = shoal_crdt_clone(a); /* a replica that saw only the live version */
    assert_int_equal(estate_delete(a, "gone", 4, 1, 2, 1000), 0);
    assert_int_equal(estate_put(a, "kept", 4, 1, 3, "k", 1), 0);
    b = shoal_crdt_clone(a); /* a replica holding the tombstone */
    /* the owner of epoch 2 adopts, collecting tombstones deleted before t = 2000 */
    assert_int_equal(estate_restamp(a, 2, 2000), 1);
    estate_entry_t e;
    assert_int_equal(estate_get(a, "gone", 4, &e), SHOAL_ENOTFOUND);
    shoal_crdt_t *ab = shoal_crdt_clone(a), *ba = shoal_crdt_clone(b);
    assert_int_equal(shoal_crdt_merge(ab, b), 0);
    assert_int_equal(shoal_crdt_merge(ba, a), 0);
    assert_int_equal(shoal_crdt_merge(ab, stale), 0);
    assert_int_equal(shoal_crdt_merge(ba, stale), 0);
    shoal_crdt_t *vs[] = {ab, ba};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(estate_get(vs[i], "gone", 4, &e), SHOAL_ENOTFOUND);
        assert_int_equal(estate_get(vs[i], "kept", 4, &e), 0);
        assert_int_equal(e.epoch, 2);
        assert_int_equal(estate_count(vs[i]), 1);
    }
    assert_true(shoal_crdt_equal(ab, ba));
    /* and a write of an epoch below the floor is refused */
    assert_int_equal(estate_put(ab, "late", 4, 1, 9, "x", 1), SHOAL_ESTALE);
    shoal_crdt_t *all[] = {a, b, stale, ab, ba};
    for (int i = 0; i < 5; i++)
        shoal_crdt_destroy(&all[i]);
}

static void test_restamp(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    /* reminder keys: "\x01<entity>\0<reminder id>" */
    assert_int_equal(estate_put(m,
                                "\x01"
                                "e1\0r1",
                                6, 1, 1, "due", 3),
                     0);
    assert_int_equal(estate_put(m,
                                "\x01"
                                "e1\0r2",
                                6, 1, 2, "d", 1),
                     0);
    put(m, "e1", 1, 3, "state", 0);
    assert_int_equal(estate_delete(m, "gone", 4, 1, 4, 1000), 0);   /* old: collected */
    assert_int_equal(estate_delete(m, "recent", 6, 1, 5, 3000), 0); /* recent: kept */
    seen_t s = {0};
    assert_int_equal(estate_foreach_prefix(m,
                                           "\x01"
                                           "e1",
                                           4, collect, &s),
                     0);
    assert_int_equal(s.n, 2);
    drop_delta(m);
    /* the new owner (epoch 5) adopts: every entry becomes (5, 0); the old tombstone goes */
    size_t k = estate_restamp(m, 5, 2000);
    assert_int_equal(k, 4);
    assert_int_equal(estate_count(m), 4);
    assert_int_equal(estate_fence(m), 5);
    estate_entry_t e;
    assert_int_equal(estate_get(m, "e1", 2, &e), 0);
    assert_int_equal(e.epoch, 5);
    assert_int_equal(e.seq, 0);
    assert_memory_equal(e.data, "state", 5);
    assert_int_equal(estate_get(m, "gone", 4, &e), SHOAL_ENOTFOUND);
    assert_int_equal(estate_get(m, "recent", 6, &e), 0);
    assert_true(e.deleted);
    assert_int_equal(e.epoch, 5);
    assert_int_equal(e.deleted_unix_ms, 3000);
    /* the restamp is in the delta: a replica that merges it sees the same (but the dropped
       tombstone, which a state cannot express: the replica keeps its old copy) */
    shoal_crdt_t *d = shoal_crdt_take_delta(m);
    assert_non_null(d);
    assert_int_equal(estate_fence(d), 5);
    assert_int_equal(estate_count(d), 4);
    shoal_crdt_destroy(&d);
    /* what the owner writes after adopting is at its epoch; a second re-stamp at the same epoch
       leaves it, and the owner's own tombstones, alone */
    put(m, "e1", 5, 1, "after", 0);
    assert_int_equal(estate_delete(m, "e2", 2, 5, 2, 10), 0);
    drop_delta(m);
    assert_int_equal(estate_restamp(m, 5, INT64_MAX), 0);
    assert_null(shoal_crdt_delta(m));
    assert_int_equal(estate_get(m, "e1", 2, &e), 0);
    assert_int_equal(e.seq, 1);
    assert_int_equal(estate_get(m, "e2", 2, &e), 0);
    assert_true(e.deleted);
    /* the next owner again: all of it re-stamped */
    assert_int_equal(estate_restamp(m, 6, 0), estate_count(m));
    shoal_crdt_destroy(&m);
}

/* Clones and deltas share entries rather than copy them (the replicator clones a value for
   every update): a clone never sees what is written to the original afterwards, re-stamped in
   place included, and each outlives the other (ASan: no entry freed while a holder remains). */
static void test_clone_shares_nothing_visible(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof k, "e%03d", i);
        put(m, k, 1, (uint64_t)i + 1, "v1", 0);
    }
    shoal_crdt_t *before = shoal_crdt_clone(m); /* shares the entries, and with m's delta */
    shoal_buf_t enc0 = {0}, enc1 = {0};
    assert_int_equal(shoal_crdt_encode(before, &enc0), 0);
    /* the original changes: a put over a shared entry, a delete, an in-place re-stamp */
    put(m, "e000", 1, 1000, "v2", 0);
    assert_int_equal(estate_delete(m, "e001", 4, 1, 1001, 5), 0);
    assert_int_equal(estate_restamp(m, 7, 0), 100);
    estate_entry_t e;
    assert_int_equal(estate_get(before, "e000", 4, &e), 0);
    assert_int_equal(e.epoch, 1);
    assert_int_equal(e.seq, 1);
    assert_memory_equal(e.data, "v1", 2);
    assert_int_equal(estate_get(before, "e001", 4, &e), 0);
    assert_false(e.deleted);
    assert_int_equal(estate_get(before, "e050", 4, &e), 0);
    assert_int_equal(e.epoch, 1);
    assert_int_equal(estate_fence(before), 0);
    assert_int_equal(shoal_crdt_encode(before, &enc1), 0);
    assert_int_equal(enc0.len, enc1.len);
    assert_memory_equal(enc0.data, enc1.data, enc0.len);
    assert_int_equal(estate_get(m, "e050", 4, &e), 0);
    assert_int_equal(e.epoch, 7);
    /* the clone written to leaves the original alone too */
    shoal_crdt_t *after = shoal_crdt_clone(m);
    assert_int_equal(estate_restamp(after, 9, 0), 100);
    assert_int_equal(estate_get(m, "e050", 4, &e), 0);
    assert_int_equal(e.epoch, 7);
    /* the original goes first, its delta with it; the clones still read their entries */
    shoal_crdt_destroy(&m);
    assert_int_equal(estate_get(before, "e099", 4, &e), 0);
    assert_memory_equal(e.data, "v1", 2);
    assert_int_equal(estate_get(after, "e099", 4, &e), 0);
    assert_int_equal(e.epoch, 9);
    shoal_crdt_destroy(&before);
    shoal_crdt_destroy(&after);
    shoal_buf_free(&enc0);
    shoal_buf_free(&enc1);
}

static void test_admit_refuses_stale_owner(void **state)
{
    (void)state;
    shoal_crdt_t *cur = estate_new();
    put(cur, "e", 1, 7, "v7", 0);
    estate_restamp(cur, 2, 0); /* the owner of epoch 2 took over */
    drop_delta(cur);
    shoal_crdt_t *stale = estate_new();
    put(stale, "e", 1, 8, "v8", 0); /* the old owner writes on */
    assert_int_equal(estate_admit(cur, stale), SHOAL_ESTALE);
    assert_int_equal(estate_admit(NULL, stale), 0); /* nothing there yet: nothing to refuse */
    shoal_crdt_t *other = estate_new();
    put(other, "f", 1, 1, "new key", 0); /* even a key the new owner never saw */
    assert_int_equal(estate_admit(cur, other), SHOAL_ESTALE);
    shoal_crdt_t *tomb = estate_new();
    assert_int_equal(estate_delete(tomb, "e", 1, 1, 9, 5), 0); /* or a delete */
    assert_int_equal(estate_admit(cur, tomb), SHOAL_ESTALE);
    shoal_crdt_t *fresh = estate_new();
    put(fresh, "e", 2, 1, "v", 0); /* the current owner */
    assert_int_equal(estate_admit(cur, fresh), 0);
    shoal_crdt_t *newer = estate_new();
    put(newer, "e", 3, 1, "v", 0); /* a newer owner than this replica knows */
    assert_int_equal(estate_admit(cur, newer), 0);
    shoal_crdt_t *fence_only = estate_new();
    estate_raise_fence(fence_only, 1); /* a lower fence is no entry: nothing to refuse */
    assert_int_equal(estate_admit(cur, fence_only), 0);
    shoal_crdt_t *full = shoal_crdt_clone(cur); /* a full state of what is there already */
    assert_int_equal(estate_admit(cur, full), 0);
    /* between the raise of a fence and the re-stamp, a full state carries the entries it has
       not adopted yet; the replicas hold them already, identical */
    shoal_crdt_t *between = estate_new();
    put(between, "old", 1, 1, "o", 0);
    estate_raise_fence(between, 3);
    shoal_crdt_t *between_full = shoal_crdt_clone(between);
    put(between_full, "new", 3, 1, "n", 0);
    assert_int_equal(estate_admit(between, between_full), 0);
    /* merged anyway (gossip is not refused), the stale write loses to the adopted state */
    shoal_crdt_merge(cur, stale);
    estate_entry_t e;
    assert_int_equal(estate_get(cur, "e", 1, &e), 0);
    assert_int_equal(e.epoch, 2);
    assert_memory_equal(e.data, "v7", 2);
    shoal_crdt_t *ds[] = {stale,      other, tomb,    fresh,        newer,
                          fence_only, full,  between, between_full, cur};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        shoal_crdt_destroy(&ds[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Merge
 */
/* Two writes with one (epoch, seq) — which use never makes — resolve the same either way. */
static void tie(shoal_crdt_t *a, shoal_crdt_t *b, bool a_wins)
{
    shoal_crdt_t *ab = merged(a, b), *ba = merged(b, a);
    prop_assert_same(ab, ba, "tie", 0);
    prop_assert_same(ab, a_wins ? a : b, "tie winner", 0);
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
}

static void test_ties(void **state)
{
    (void)state;
    shoal_crdt_t *a, *b;
    /* deleted over live */
    a = estate_new(), b = estate_new();
    assert_int_equal(estate_delete(a, "k", 1, 1, 1, 5), 0);
    put(b, "k", 1, 1, "live", 0);
    tie(a, b, true);
    /* then the longer data */
    a = estate_new(), b = estate_new();
    put(a, "k", 1, 1, "a", 0);
    put(b, "k", 1, 1, "bb", 0);
    tie(a, b, false);
    /* then memcmp of the data */
    a = estate_new(), b = estate_new();
    put(a, "k", 1, 1, "zz", 0);
    put(b, "k", 1, 1, "za", 0);
    tie(a, b, true);
    /* then the later deletion */
    a = estate_new(), b = estate_new();
    assert_int_equal(estate_delete(a, "k", 1, 1, 1, 5), 0);
    assert_int_equal(estate_delete(b, "k", 1, 1, 1, 6), 0);
    tie(a, b, false);
    /* and (epoch, seq) before all of it, lexicographically */
    a = estate_new(), b = estate_new();
    put(a, "k", 2, 0, "a", 0);
    assert_int_equal(estate_delete(b, "k", 1, 1, 1, 99), 0);
    put(b, "j", 1, 1, "j", 0);
    shoal_crdt_t *ab = merged(a, b);
    estate_entry_t e;
    assert_int_equal(estate_get(ab, "k", 1, &e), 0);
    assert_int_equal(e.epoch, 2);
    assert_false(e.deleted);
    assert_int_equal(estate_count(ab), 2);
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
}

/* A deterministic stream of keys and (epoch, seq) for the big maps. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static void big_put(shoal_crdt_t *m, uint64_t i, uint64_t salt)
{
    char key[32], val[32];
    int kl = snprintf(key, sizeof key, "entity-%" PRIu64, mix(i) % 100000);
    int vl = snprintf(val, sizeof val, "v%" PRIu64, mix(i ^ salt));
    uint64_t h = mix(i * 31 + salt);
    estate_put(m, key, (size_t)kl, 1 + h % 3, h % 1000, val, (size_t)vl);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* Merges one entry of the map walked into the map at arg, as a map of its own (which takes the
   one-lookup-per-entry merge path). */
static int merge_one(const void *key, size_t klen, const estate_entry_t *x, void *arg)
{
    shoal_crdt_t *one = estate_new();
    int rc = x->deleted ? estate_delete(one, key, klen, x->epoch, x->seq, x->deleted_unix_ms)
                        : estate_put(one, key, klen, x->epoch, x->seq, x->data, x->len);
    assert_int_equal(rc, 0);
    assert_int_equal(shoal_crdt_merge(arg, one), 0);
    shoal_crdt_destroy(&one);
    return 0;
}

/* 10,000 entries stay fast (no quadratic insert); both merge paths (a walk of two sorted arrays
   for big inputs, one lookup per entry for small ones) give the same value. */
static void test_big_maps(void **state)
{
    (void)state;
    double t0 = now_s();
    shoal_crdt_t *m = estate_new();
    for (uint64_t i = 0; i < 10000; i++)
        big_put(m, i, 1);
    double t_put = now_s() - t0;
    size_t n = estate_count(m);
    assert_true(n > 9000 && n <= 10000); /* a few keys collide */
    t0 = now_s();
    estate_entry_t e;
    for (uint64_t i = 0; i < 10000; i++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "entity-%" PRIu64, mix(i) % 100000);
        assert_int_equal(estate_get(m, key, (size_t)kl, &e), 0);
    }
    double t_get = now_s() - t0;
    /* generous bounds (a shared machine; tscale for sanitizers and valgrind): ~10 ms in a
       release build, where a structure quadratic in the entries would take seconds */
    assert_true(t_put < 0.5 * tscale() && t_get < 0.25 * tscale());
    assert_true(estate_bytes(m) > n * 20);

    shoal_crdt_t *a = estate_new(), *b = estate_new();
    for (uint64_t i = 0; i < 1000; i++) {
        big_put(a, i, 2);
        big_put(b, i + 500, 3); /* half the keys shared, with other (epoch, seq) */
    }
    assert_int_equal(estate_delete(b, "entity-x", 8, 9, 9, 1), 0);
    estate_raise_fence(b, 2);
    t0 = now_s();
    shoal_crdt_t *ab = merged(a, b);
    double t_merge = now_s() - t0;
    shoal_crdt_t *ba = merged(b, a);
    prop_assert_same(ab, ba, "big merge commutes", 0);
    shoal_crdt_t *slow = shoal_crdt_clone(a);
    assert_int_equal(estate_foreach(b, merge_one, slow), 0);
    estate_raise_fence(slow, estate_fence(b));
    prop_assert_same(ab, slow, "big merge = entry by entry", 0);
    shoal_crdt_t *again = merged(ab, b); /* idempotent on the big path too */
    prop_assert_same(ab, again, "big merge idempotent", 0);
    print_message("10,000 puts %.1f ms, 10,000 gets %.1f ms, merge of 1,000 + 1,000 %.2f ms\n",
                  t_put * 1e3, t_get * 1e3, t_merge * 1e3);
    shoal_crdt_t *all[] = {again, slow, ab, ba, a, b, m};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Encoding, decoding, rendering
 */
static void test_encoding(void **state)
{
    (void)state;
    shoal_crdt_t *a = estate_new(), *b = estate_new();
    put(a, "x", 1, 1, "1", 0);
    put(a, "y", 1, 2, "2", 0);
    assert_int_equal(estate_delete(a, "\x01z\0", 3, 1, 3, 42), 0);
    put(b, "y", 1, 2, "2", 0); /* other order of the same writes */
    assert_int_equal(estate_delete(b, "\x01z\0", 3, 1, 3, 42), 0);
    put(b, "x", 1, 1, "1", 0);
    estate_raise_fence(a, 3);
    estate_raise_fence(b, 3);
    shoal_buf_t ea = {0}, eb = {0};
    assert_int_equal(shoal_crdt_encode(a, &ea), 0);
    assert_int_equal(shoal_crdt_encode(b, &eb), 0);
    assert_int_equal(ea.len, eb.len);
    assert_memory_equal(ea.data, eb.data, ea.len);
    assert_true(shoal_crdt_equal(a, b));
    shoal_crdt_t *c = prop_roundtrip(a);
    assert_true(shoal_crdt_equal(a, c));
    estate_entry_t e;
    assert_int_equal(estate_get(c, "\x01z\0", 3, &e), 0);
    assert_true(e.deleted);
    assert_int_equal(e.deleted_unix_ms, 42);
    assert_int_equal(estate_fence(c), 3);
    put(c, "x", 1, 2, "changed", 0);
    assert_false(shoal_crdt_equal(a, c));
    /* the empty map */
    shoal_crdt_t *empty = estate_new(), *empty2 = prop_roundtrip(empty);
    assert_int_equal(estate_count(empty2), 0);
    assert_int_equal(estate_fence(empty2), 0);
    /* a value of a newer format is refused as such, not misread */
    shoal_buf_t pl = {0};
    assert_int_equal(estate_type.encode_payload(a, &pl), 0);
    shoal_crdt_t *v = NULL;
    assert_int_equal(decode_payload(pl.data, pl.len, 3, &v), SHOAL_EVERSION);
    assert_int_equal(decode_payload(pl.data, pl.len, 0, &v), SHOAL_EVERSION);
    assert_null(v);
    assert_int_equal(decode_payload(pl.data, pl.len, 2, &v), 0);
    prop_assert_same(a, v, "payload", 0);
    shoal_crdt_destroy(&v);
    /* every truncation: an error or a value that round-trips, never a crash */
    for (size_t i = 0; i < pl.len; i++) {
        int rc = decode_payload(pl.data, i, 2, &v);
        if (rc == 0) {
            shoal_crdt_t *w = prop_roundtrip(v);
            prop_assert_same(v, w, "truncated", 0);
            shoal_crdt_destroy(&w);
            shoal_crdt_destroy(&v);
        }
    }
    prop_check_corruption(a, 2000);
    shoal_buf_free(&pl);
    shoal_buf_free(&ea);
    shoal_buf_free(&eb);
    shoal_crdt_t *all[] = {a, b, c, empty, empty2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

static void test_corrupt_refused(void **state)
{
    (void)state;
    char big[ESTATE_KEY_MAX + 1];
    memset(big, 'k', sizeof big);
    shoal_crdt_t *v = NULL;
    /* a valid baseline, then one rule broken at a time */
    raw_t ok[] = {
        {"a", 1, 1, 1, false, 0, 3}, {"ab", 2, 1, 2, true, 5, 0}, {"b", 1, 2, 0, false, 0, 0}};
    assert_int_equal(decode_raw(7, ok, 3, &v), 0);
    assert_int_equal(estate_count(v), 3);
    assert_int_equal(estate_fence(v), 7);
    shoal_crdt_destroy(&v);
    raw_t limits[] = {{big, ESTATE_KEY_MAX, 1, 1, false, 0, ESTATE_DATA_MAX}};
    assert_int_equal(decode_raw(0, limits, 1, &v), 0); /* at the limits */
    shoal_crdt_destroy(&v);
    const struct {
        const char *why;
        raw_t r[2];
        size_t n;
    } bad[] = {
        {"empty key", {{"", 0, 1, 1, false, 0, 1}}, 1},
        {"key over the limit", {{big, ESTATE_KEY_MAX + 1, 1, 1, false, 0, 1}}, 1},
        {"data over the limit", {{"k", 1, 1, 1, false, 0, ESTATE_DATA_MAX + 1}}, 1},
        {"tombstone with data", {{"k", 1, 1, 1, true, 5, 1}}, 1},
        {"live entry with a deletion time", {{"k", 1, 1, 1, false, 5, 1}}, 1},
        {"unsorted", {{"b", 1, 1, 1, false, 0, 1}, {"a", 1, 1, 1, false, 0, 1}}, 2},
        {"repeated key", {{"a", 1, 1, 1, false, 0, 1}, {"a", 1, 1, 2, false, 0, 1}}, 2},
        {"longer before shorter", {{"ab", 2, 1, 1, false, 0, 1}, {"a", 1, 1, 1, false, 0, 1}}, 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = decode_raw(1, bad[i].r, bad[i].n, &v);
        if (rc != SHOAL_EDECODE)
            fail_msg("%s: decoded with %d", bad[i].why, rc);
        assert_null(v);
    }
    /* not protobuf at all */
    const char *junk[] = {"\x08",
                          "\x12\x05"
                          "ab",
                          "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                          "\x12\x02\x0a\x00" /* an entry with an empty key */};
    const size_t jlen[] = {1, 4, 11, 4};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(decode_payload(junk[i], jlen[i], 2, &v), SHOAL_EDECODE);
        assert_null(v);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Format 1: the fixed little-endian layout of earlier versions, still read
 */
static void le(shoal_buf_t *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        uint8_t x = (uint8_t)(v >> (8 * i));
        shoal_buf_append(b, &x, 1);
    }
}

static void legacy_entry(shoal_buf_t *b, const char *key, size_t klen, uint64_t epoch, uint64_t seq,
                         int deleted, int64_t dms, const char *data, size_t len)
{
    le(b, klen, 2);
    shoal_buf_append(b, key, klen);
    le(b, epoch, 8);
    le(b, seq, 8);
    le(b, (uint64_t)deleted, 1);
    le(b, (uint64_t)dms, 8);
    le(b, len, 4);
    shoal_buf_append(b, data, len);
}

static void legacy_head(shoal_buf_t *b, uint64_t fence, uint32_t n)
{
    shoal_buf_reset(b);
    le(b, 1, 1);
    le(b, fence, 8);
    le(b, n, 4);
}

static void test_legacy_format(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    legacy_head(&b, 5, 3);
    legacy_entry(&b,
                 "\x01"
                 "e1\0r1",
                 6, 5, 1, 0, 0, "due", 3);
    legacy_entry(&b, "e1", 2, 5, 2, 0, 0, "state", 5);
    legacy_entry(&b, "gone", 4, 4, 9, 1, 1000, "", 0);
    shoal_crdt_t *v = NULL;
    assert_int_equal(decode_payload(b.data, b.len, 1, &v), 0);
    shoal_crdt_t *want = estate_new();
    estate_raise_fence(want, 5);
    assert_int_equal(estate_put(want,
                                "\x01"
                                "e1\0r1",
                                6, 5, 1, "due", 3),
                     0);
    put(want, "e1", 5, 2, "state", 0);
    assert_int_equal(estate_delete(want, "gone", 4, 4, 9, 1000), 0);
    prop_assert_same(want, v, "format 1", 0); /* same value, now encoded as format 2 */
    shoal_crdt_destroy(&v);
    /* its bad inputs */
    static const char *const cases[] = {"count over what the input holds",
                                        "trailing bytes",
                                        "deleted flag 2",
                                        "tombstone with data",
                                        "unsorted",
                                        "key of 301 bytes",
                                        "short header",
                                        "data past the end"};
    char big[ESTATE_KEY_MAX + 1];
    memset(big, 'k', sizeof big);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        switch (i) {
        case 0:
            legacy_head(&b, 1, 2);
            legacy_entry(&b, "a", 1, 1, 1, 0, 0, "x", 1);
            break;
        case 1:
            legacy_head(&b, 1, 1);
            legacy_entry(&b, "a", 1, 1, 1, 0, 0, "x", 1);
            le(&b, 0, 1);
            break;
        case 2:
            legacy_head(&b, 1, 1);
            legacy_entry(&b, "a", 1, 1, 1, 2, 0, "", 0);
            break;
        case 3:
            legacy_head(&b, 1, 1);
            legacy_entry(&b, "a", 1, 1, 1, 1, 5, "x", 1);
            break;
        case 4:
            legacy_head(&b, 1, 2);
            legacy_entry(&b, "b", 1, 1, 1, 0, 0, "x", 1);
            legacy_entry(&b, "a", 1, 1, 1, 0, 0, "x", 1);
            break;
        case 5:
            legacy_head(&b, 1, 1);
            legacy_entry(&b, big, sizeof big, 1, 1, 0, 0, "x", 1);
            break;
        case 6:
            legacy_head(&b, 1, 0);
            b.len = 12;
            break;
        case 7:
            legacy_head(&b, 1, 1);
            legacy_entry(&b, "a", 1, 1, 1, 0, 0, "xyz", 3);
            b.len -= 1;
            break;
        }
        int rc = decode_payload(b.data, b.len, 1, &v);
        if (rc != SHOAL_EDECODE)
            fail_msg("format 1, %s: decoded with %d", cases[i], rc);
        assert_null(v);
    }
    /* one-byte corruptions of a valid one: an error or a canonical value, never a crash */
    legacy_head(&b, 5, 2);
    legacy_entry(&b, "e1", 2, 5, 2, 0, 0, "state", 5);
    legacy_entry(&b, "gone", 4, 4, 9, 1, 1000, "", 0);
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed());
    for (int round = 0; round < 3000; round++) {
        shoal_buf_t c = {0};
        shoal_buf_append(&c, b.data, b.len);
        size_t at = 1 + (size_t)prop_below(&rng, c.len - 1); /* keep the format byte */
        c.data[at] = (uint8_t)prop_next(&rng);
        if (prop_chance(&rng, 1, 4))
            c.len = (size_t)prop_below(&rng, c.len);
        if (decode_payload(c.data, c.len, 1, &v) == 0) {
            shoal_crdt_t *w = prop_roundtrip(v);
            prop_assert_same(v, w, "format 1 corrupted", prop_seed());
            shoal_crdt_destroy(&w);
            shoal_crdt_destroy(&v);
        }
        shoal_buf_free(&c);
    }
    shoal_buf_free(&b);
    shoal_crdt_destroy(&want);
}

static void test_render(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    char *r = render(m);
    assert_string_equal(r, "EntityStateMap{fence=0, n=0, entries: }");
    free(r);
    estate_raise_fence(m, 21474836484ULL); /* term 5, counter 4 */
    put(m, "e1", 21474836484ULL, 3, "state", 0);
    assert_int_equal(estate_put(m,
                                "\x01"
                                "e1\0\"r\\",
                                7, 1, 2, "12345678", 8),
                     0);
    assert_int_equal(estate_delete(m, "gone", 4, 1, 4, 1000), 0);
    r = render(m);
    assert_string_equal(r, "EntityStateMap{fence=21474836484, n=3, entries: "
                           "\"\\x01e1\\x00\\\"r\\\\\"@1.2(8b), "
                           "\"e1\"@21474836484.3(5b), \"gone\"@1.4(0b)[deleted]}");
    free(r);
    /* the first 50 entries, then "..." */
    for (int i = 0; i < 60; i++) {
        char k[16];
        int kl = snprintf(k, sizeof k, "k%02d", i);
        assert_int_equal(estate_put(m, k, (size_t)kl, 1, 1, "v", 1), 0);
    }
    r = render(m);
    assert_non_null(strstr(r, "n=63, "));
    assert_non_null(strstr(r, "\"k46\"@1.1(1b), ...}"));
    assert_null(strstr(r, "\"k47\""));
    size_t ats = 0;
    for (const char *p = r; (p = strchr(p, '@')); p++)
        ats++;
    assert_int_equal(ats, 50);
    free(r);
    shoal_crdt_destroy(&m);
}

/* ---------------------------------------------------------------------------------------------
 * Properties
 */
/* Random operations over a small key space (prefix-sharing and binary keys included), so that
   replicas collide. */
static void random_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng)
{
    (void)self;
    static const struct {
        const char *k;
        size_t len;
    } keys[] = {{"k0", 2},
                {"k1", 2},
                {"k", 1},
                {"k10", 3},
                {"\x01"
                 "k0\0r1",
                 6},
                {"\xff\x00", 2}};
    size_t ki = (size_t)prop_below(rng, sizeof keys / sizeof keys[0]);
    const char *key = keys[ki].k;
    size_t klen = keys[ki].len;
    uint64_t epoch = 1 + prop_below(rng, 3), seq = prop_below(rng, 40);
    switch (prop_below(rng, 10)) {
    case 0:
        estate_raise_fence(m, 1 + prop_below(rng, 4));
        break;
    case 1:
        estate_delete(m, key, klen, epoch, seq, (int64_t)prop_below(rng, 1000));
        break;
    case 2:
        /* a takeover; no tombstone dropping here (forgetting is local by design: the delta law
           and convergence would not hold) */
        estate_restamp(m, 1 + prop_below(rng, 4), INT64_MIN);
        break;
    case 3: {
        /* a burst over a wider key space: merges of such maps take the linear walk */
        int n = 17 + (int)prop_below(rng, 16);
        for (int i = 0; i < n; i++) {
            char bk[8];
            int bl = snprintf(bk, sizeof bk, "b%02d", (int)prop_below(rng, 48));
            estate_put(m, bk, (size_t)bl, 1 + prop_below(rng, 3), prop_below(rng, 40), "b", 1);
        }
        break;
    }
    default: {
        char v[16];
        int n =
            prop_chance(rng, 1, 8) ? 0 : snprintf(v, sizeof v, "v%d", (int)prop_below(rng, 1000));
        estate_put(m, key, klen, epoch, seq, v, (size_t)n);
    }
    }
}

static const prop_type_t prop = {"EntityStateMap", estate_new, random_op, true, true};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&prop, prop_cases(1000));
}

/* Corruption of richer values than test_encoding's: random maps from the generator. */
static void test_corruption_random(void **state)
{
    (void)state;
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed() ^ 0xe57a7e);
    for (int i = 0; i < prop_cases(10); i++) {
        shoal_crdt_t *m = estate_new();
        for (int j = 0; j < 12; j++)
            random_op(m, prop_node(0), &rng);
        prop_check_corruption(m, 300);
        shoal_crdt_destroy(&m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_order),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_foreach_order_and_prefix),
        cmocka_unit_test(test_delta),
        cmocka_unit_test(test_restamp),
        cmocka_unit_test(test_clone_shares_nothing_visible),
        cmocka_unit_test(test_collected_stays_collected),
        cmocka_unit_test(test_admit_refuses_stale_owner),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_big_maps),
        cmocka_unit_test(test_encoding),
        cmocka_unit_test(test_corrupt_refused),
        cmocka_unit_test(test_legacy_format),
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_corruption_random),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
