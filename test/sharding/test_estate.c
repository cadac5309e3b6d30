/*  test_estate.c — EntityStateMap (sharding/estate.c): the API, the admit rule that refuses a
    stale owner, re-stamping, canonical encoding and bad input, and the property harness (merge
    laws, convergence under duplicated and reordered delivery, the delta law, round trips).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prop.h"
#include "../../sharding/estate.h"

static int setup(void **state)
{
    (void)state;
    return estate_register();
}

static void put(shoal_crdt_t *m, const char *k, uint64_t epoch, uint64_t seq, const char *v,
                int expect)
{
    assert_int_equal(estate_put(m, k, strlen(k), epoch, seq, v, strlen(v)), expect);
}

static void test_put_get_order(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    put(m, "b", 1, 1, "one", 0);
    put(m, "a", 1, 1, "x", 0);
    put(m, "b", 1, 2, "two", 0);
    put(m, "b", 1, 2, "again", SHOAL_ESTALE); /* not newer */
    put(m, "b", 1, 1, "older", SHOAL_ESTALE);
    estate_entry_t e;
    assert_int_equal(estate_get(m, "b", 1, &e), 0);
    assert_int_equal(e.seq, 2);
    assert_memory_equal(e.data, "two", 3);
    assert_int_equal(estate_get(m, "c", 1, &e), SHOAL_ENOTFOUND);
    put(m, "b", 2, 0, "new owner", 0); /* a newer epoch wins whatever the seq */
    assert_int_equal(estate_delete(m, "a", 1, 2, 1, 1234), 0);
    assert_int_equal(estate_get(m, "a", 1, &e), 0);
    assert_true(e.deleted);
    assert_int_equal(e.len, 0);
    assert_int_equal(estate_count(m), 2);
    assert_int_equal(estate_put(m, "", 0, 3, 1, "x", 1), SHOAL_EINVAL);
    char big[ESTATE_KEY_MAX + 1];
    memset(big, 'k', sizeof big);
    assert_int_equal(estate_put(m, big, sizeof big, 3, 1, "x", 1), SHOAL_EINVAL);
    shoal_crdt_destroy(&m);
}

static int count_fn(const void *key, size_t klen, const estate_entry_t *e, void *arg)
{
    (void)key;
    (void)klen;
    (void)e;
    (*(int *)arg)++;
    return 0;
}

static void test_prefix_and_restamp(void **state)
{
    (void)state;
    shoal_crdt_t *m = estate_new();
    /* reminder keys: "\x01<entity>\0<reminder id>" */
    assert_int_equal(estate_put(m, "\x01" "e1\0r1", 6, 1, 1, "due", 3), 0);
    assert_int_equal(estate_put(m, "\x01" "e1\0r2", 6, 1, 2, "d", 1), 0);
    put(m, "e1", 1, 3, "state", 0);
    assert_int_equal(estate_delete(m, "gone", 4, 1, 4, 1000), 0);
    int n = 0;
    assert_int_equal(estate_foreach_prefix(m, "\x01" "e1", 4, count_fn, &n), 0);
    assert_int_equal(n, 2);
    shoal_crdt_destroy(&(shoal_crdt_t *){shoal_crdt_take_delta(m)});
    /* the new owner (epoch 5) adopts: every entry becomes (5, 0); the old tombstone goes */
    size_t k = estate_restamp(m, 5, 2000);
    assert_int_equal(k, 3);
    assert_int_equal(estate_count(m), 3);
    assert_int_equal(estate_fence(m), 5);
    estate_entry_t e;
    assert_int_equal(estate_get(m, "e1", 2, &e), 0);
    assert_int_equal(e.epoch, 5);
    assert_int_equal(e.seq, 0);
    assert_memory_equal(e.data, "state", 5);
    /* the restamp is in the delta: a replica that merges it sees the same */
    shoal_crdt_t *d = shoal_crdt_take_delta(m);
    assert_non_null(d);
    assert_int_equal(estate_fence(d), 5);
    assert_int_equal(estate_count(d), 3);
    shoal_crdt_destroy(&d);
    shoal_crdt_destroy(&m);
}

static void test_admit_refuses_stale_owner(void **state)
{
    (void)state;
    shoal_crdt_t *cur = estate_new();
    put(cur, "e", 1, 7, "v7", 0);
    estate_restamp(cur, 2, 0);           /* the owner of epoch 2 took over */
    shoal_crdt_destroy(&(shoal_crdt_t *){shoal_crdt_take_delta(cur)});
    shoal_crdt_t *stale = estate_new();
    put(stale, "e", 1, 8, "v8", 0);      /* the old owner writes on */
    assert_int_equal(estate_admit(cur, stale), SHOAL_ESTALE);
    shoal_crdt_t *other = estate_new();
    put(other, "f", 1, 1, "new key", 0); /* even a key the new owner never saw */
    assert_int_equal(estate_admit(cur, other), SHOAL_ESTALE);
    shoal_crdt_t *fresh = estate_new();
    put(fresh, "e", 2, 1, "v", 0);       /* the current owner */
    assert_int_equal(estate_admit(cur, fresh), 0);
    shoal_crdt_t *full = shoal_crdt_clone(cur); /* a full state of what is there already */
    assert_int_equal(estate_admit(cur, full), 0);
    /* merged anyway (gossip is not refused), the stale write loses to the adopted state */
    shoal_crdt_merge(cur, stale);
    estate_entry_t e;
    assert_int_equal(estate_get(cur, "e", 1, &e), 0);
    assert_int_equal(e.epoch, 2);
    assert_memory_equal(e.data, "v7", 2);
    shoal_crdt_t *ds[] = {stale, other, fresh, full, cur};
    for (size_t i = 0; i < 5; i++)
        shoal_crdt_destroy(&ds[i]);
}

static void test_encoding(void **state)
{
    (void)state;
    shoal_crdt_t *a = estate_new(), *b = estate_new();
    put(a, "x", 1, 1, "1", 0);
    put(a, "y", 1, 2, "2", 0);
    put(b, "y", 1, 2, "2", 0); /* other order of the same writes */
    put(b, "x", 1, 1, "1", 0);
    estate_raise_fence(a, 3);
    estate_raise_fence(b, 3);
    shoal_buf_t ea = {0}, eb = {0};
    assert_int_equal(shoal_crdt_encode(a, &ea), 0);
    assert_int_equal(shoal_crdt_encode(b, &eb), 0);
    assert_int_equal(ea.len, eb.len);
    assert_memory_equal(ea.data, eb.data, ea.len);
    shoal_crdt_t *c = prop_roundtrip(a);
    assert_true(shoal_crdt_equal(a, c));
    shoal_buf_t r = {0};
    shoal_crdt_render(c, &r);
    shoal_buf_append(&r, "", 1);
    assert_non_null(strstr((char *)r.data, "EntityStateMap{fence=3"));
    prop_check_corruption(a, 2000);
    shoal_buf_free(&r);
    shoal_buf_free(&ea);
    shoal_buf_free(&eb);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
    shoal_crdt_destroy(&c);
}

/* Random operations over a small key space, so that replicas collide. */
static void random_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng)
{
    (void)self;
    char key[8];
    snprintf(key, sizeof key, "k%d", (int)prop_below(rng, 5));
    uint64_t epoch = 1 + prop_below(rng, 3), seq = prop_below(rng, 40);
    switch (prop_below(rng, 10)) {
    case 0:
        estate_raise_fence(m, 1 + prop_below(rng, 4));
        break;
    case 1:
        estate_delete(m, key, strlen(key), epoch, seq, (int64_t)prop_below(rng, 1000));
        break;
    case 2:
        /* a takeover; no tombstone dropping here (that forgets, by design) */
        estate_restamp(m, 1 + prop_below(rng, 4), INT64_MIN);
        break;
    default: {
        char v[16];
        int n = snprintf(v, sizeof v, "v%d", (int)prop_below(rng, 1000));
        estate_put(m, key, strlen(key), epoch, seq, v, (size_t)n);
    }
    }
}

static const prop_type_t prop = {"EntityStateMap", estate_new, random_op, true, true};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&prop, prop_cases(1000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_order),
        cmocka_unit_test(test_prefix_and_restamp),
        cmocka_unit_test(test_admit_refuses_stale_owner),
        cmocka_unit_test(test_encoding),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
