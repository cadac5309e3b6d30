/*  test_ormap.c — ORMap (generic) and ORMultiMap: what users rely on (a removal racing with an
    update, re-adding a removed key, failed updates, deltas that stay small, delta groups,
    ORMultiMap bindings in both modes), pruning, wrong types, hostile encodings, and the property
    harness. LWWMap and PNCounterMap are in test_lwwmap.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "ddata.pb-c.h"
#include "prop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A prop_node(0)
#define B prop_node(1)
#define C prop_node(2)

#define GCOUNTER shoal_type_by_name("GCounter")
#define ORSET shoal_type_by_name("ORSet")

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */
static int inc_op(shoal_crdt_t *v, void *arg)
{
    const uint64_t *n = arg;
    return shoal_gcounter_increment(v, A, *n);
}

typedef struct {
    const shoal_node_t *node;
    uint64_t n;
} inc_at_t;

static int inc_at_op(shoal_crdt_t *v, void *arg)
{
    const inc_at_t *a = arg;
    return shoal_gcounter_increment(v, a->node, a->n);
}

/* Increments key's GCounter by n at node. */
static void inc(shoal_crdt_t *m, const shoal_node_t *node, const char *key, uint64_t n)
{
    inc_at_t a = {node, n};
    assert_int_equal(shoal_ormap_update(m, node, key, strlen(key), inc_at_op, &a), 0);
}

/* The GCounter value of key, or -1 when absent. */
static long long gvalue(const shoal_crdt_t *m, const char *key)
{
    const shoal_crdt_t *v = shoal_ormap_get(m, key, strlen(key));
    return v ? (long long)shoal_gcounter_value(v) : -1;
}

static shoal_crdt_t *merged(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *m = shoal_crdt_clone(a);
    shoal_crdt_reset_delta(m);
    assert_int_equal(shoal_crdt_merge(m, b), 0);
    assert_null(shoal_crdt_delta(m));
    return m;
}

static size_t encoded_len(const shoal_crdt_t *v)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    size_t n = b.len;
    shoal_buf_free(&b);
    return n;
}

static bool same_bytes(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_buf_t x = {0}, y = {0};
    assert_int_equal(shoal_crdt_encode(a, &x), 0);
    assert_int_equal(shoal_crdt_encode(b, &y), 0);
    bool same = x.len == y.len && memcmp(x.data, y.data, x.len) == 0;
    shoal_buf_free(&x);
    shoal_buf_free(&y);
    return same;
}

/* Ships v's pending delta through encode/decode into `to`. */
static void ship_delta(shoal_crdt_t *from, shoal_crdt_t *to)
{
    shoal_crdt_t *d = shoal_crdt_take_delta(from);
    assert_non_null(d);
    shoal_crdt_t *sent = prop_roundtrip(d);
    assert_int_equal(shoal_crdt_merge_delta(to, sent), 0);
    assert_null(shoal_crdt_delta(to));
    shoal_crdt_destroy(&sent);
    shoal_crdt_destroy(&d);
}

static const char *render(const shoal_crdt_t *v, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    assert_int_equal(shoal_crdt_render(v, b), 0);
    return shoal_buf_cstr(b);
}

/* The elements of an ORSet joined with commas, for comparisons. */
static int join_cb(const void *e, size_t len, void *arg)
{
    shoal_buf_t *b = arg;
    if (b->len)
        shoal_buf_append(b, ",", 1);
    shoal_buf_append(b, e, len);
    return 0;
}

static const char *elems(const shoal_crdt_t *set, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    if (!set)
        return "(absent)";
    assert_int_equal(shoal_orset_foreach(set, join_cb, b), 0);
    return shoal_buf_cstr(b);
}

static const char *mm_elems(const shoal_crdt_t *m, const char *key, shoal_buf_t *b)
{
    return elems(shoal_ormultimap_get(m, key, strlen(key)), b);
}

static void mm_add(shoal_crdt_t *m, const shoal_node_t *n, const char *key, const char *e)
{
    assert_int_equal(shoal_ormultimap_add(m, n, key, strlen(key), e, strlen(e)), 0);
}

/* The payload of an encoded value (what the type's own decoder sees). */
static uint8_t *payload_of(const shoal_crdt_t *v, size_t *len)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b.len, b.data);
    assert_non_null(env);
    uint8_t *p = malloc(env->payload.len ? env->payload.len : 1);
    if (env->payload.len)
        memcpy(p, env->payload.data, env->payload.len);
    *len = env->payload.len;
    shoal__ddata__value__free_unpacked(env, NULL);
    shoal_buf_free(&b);
    return p;
}

/* Decodes raw payload bytes wrapped in an envelope of type tag. */
static int decode_raw(uint32_t tag, const uint8_t *payload, size_t plen, shoal_crdt_t **out)
{
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = tag;
    env.version = 1;
    env.payload.data = (uint8_t *)payload;
    env.payload.len = plen;
    size_t n = shoal__ddata__value__get_packed_size(&env);
    uint8_t *buf = malloc(n);
    shoal__ddata__value__pack(&env, buf);
    int rc = shoal_crdt_decode(buf, n, out);
    free(buf);
    return rc;
}

/* Packs msg and decodes it as the payload of type tag; a success is destroyed. */
static int decode_msg(uint32_t tag, const ProtobufCMessage *msg)
{
    size_t plen = protobuf_c_message_get_packed_size(msg);
    uint8_t *p = malloc(plen ? plen : 1);
    protobuf_c_message_pack(msg, p);
    shoal_crdt_t *out = NULL;
    int rc = decode_raw(tag, p, plen, &out);
    free(p);
    if (rc == 0)
        assert_non_null(out);
    else
        assert_null(out);
    shoal_crdt_destroy(&out);
    return rc;
}

static Shoal__Ddata__ORMap *unpack_map(const shoal_crdt_t *m)
{
    size_t len;
    uint8_t *p = payload_of(m, &len);
    Shoal__Ddata__ORMap *msg = shoal__ddata__ormap__unpack(NULL, len, p);
    free(p);
    assert_non_null(msg);
    return msg;
}

static Shoal__Ddata__ORMapDelta *unpack_delta(const shoal_crdt_t *d)
{
    size_t len;
    uint8_t *p = payload_of(d, &len);
    Shoal__Ddata__ORMapDelta *msg = shoal__ddata__ormap_delta__unpack(NULL, len, p);
    free(p);
    assert_non_null(msg);
    return msg;
}

/* ---------------------------------------------------------------------------------------------
 * ORMap
 */
static void test_new_and_value_types(void **state)
{
    (void)state;
    assert_null(shoal_ormap_new(NULL));
    assert_null(shoal_ormap_new(shoal_type_by_name("ORMap")));
    assert_null(shoal_ormap_new(shoal_type_by_name("LWWMap")));
    assert_null(shoal_ormap_new(shoal_type_by_name("ORSetDelta")));
    assert_null(shoal_ormap_new(shoal_type_by_name("ORMapDelta")));
    assert_null(shoal_crdt_new(shoal_type_by_name("ORMap")));
    assert_null(shoal_crdt_new(shoal_type_by_name("ORMapDelta")));

    shoal_crdt_t *m = shoal_ormap_new(GCOUNTER);
    assert_non_null(m);
    assert_ptr_equal(shoal_crdt_type(m), shoal_type_by_name("ORMap"));
    assert_ptr_equal(shoal_ormap_value_type(m), GCOUNTER);
    assert_true(shoal_type_has_delta(shoal_crdt_type(m)));
    assert_true(shoal_type_delta_causal(shoal_crdt_type(m)));
    assert_true(shoal_type_has_pruning(shoal_crdt_type(m)));
    assert_int_equal(shoal_ormap_size(m), 0);
    assert_null(shoal_crdt_delta(m));
    shoal_crdt_destroy(&m);

    shoal_crdt_t *mm = shoal_ormultimap_new(false);
    assert_ptr_equal(shoal_ormap_value_type(mm), ORSET);
    shoal_crdt_destroy(&mm);
}

static int collect_entry(const void *key, size_t len, const shoal_crdt_t *v, void *arg)
{
    shoal_buf_t *b = arg;
    shoal_buf_printf(b, "%.*s=%llu;", (int)len, (const char *)key,
                     (unsigned long long)shoal_gcounter_value(v));
    return 0;
}

static int stop_after_one(const void *key, size_t len, const shoal_crdt_t *v, void *arg)
{
    (void)key, (void)len, (void)v;
    ++*(int *)arg;
    return 7;
}

static void test_update_get_remove(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_ormap_new(GCOUNTER);
    inc(m, A, "b", 2);
    inc(m, A, "a", 1);
    inc(m, A, "b", 3);
    assert_int_equal(shoal_ormap_size(m), 2);
    assert_int_equal(gvalue(m, "a"), 1);
    assert_int_equal(gvalue(m, "b"), 5);
    assert_int_equal(gvalue(m, "c"), -1);

    shoal_buf_t b = {0};
    assert_int_equal(shoal_ormap_foreach(m, collect_entry, &b), 0);
    assert_string_equal(shoal_buf_cstr(&b), "a=1;b=5;"); /* key order */
    int calls = 0;
    assert_int_equal(shoal_ormap_foreach(m, stop_after_one, &calls), 7);
    assert_int_equal(calls, 1);

    assert_int_equal(shoal_ormap_remove(m, A, "a", 1), 0);
    assert_int_equal(shoal_ormap_remove(m, A, "a", 1), SHOAL_ENOTFOUND);
    assert_int_equal(shoal_ormap_remove(m, A, "zz", 2), SHOAL_ENOTFOUND);
    assert_int_equal(shoal_ormap_size(m), 1);
    assert_int_equal(gvalue(m, "a"), -1);

    /* the empty key is a key like any other */
    inc(m, B, "", 4);
    assert_int_equal(gvalue(m, ""), 4);
    assert_non_null(shoal_ormap_get(m, NULL, 0));
    assert_string_equal(render(m, &b), "ORMap<GCounter>{\"\" -> GCounter(4){127.0.0.1:2552:2=4}, "
                                       "\"b\" -> GCounter(5){127.0.0.1:2551:1=5}}");
    shoal_crdt_t *r = prop_roundtrip(m);
    assert_true(shoal_crdt_equal(r, m));
    assert_string_equal(render(r, &b), render(m, &b));
    shoal_crdt_destroy(&r);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&m);
}

/* A removes k while B concurrently updates it. The update wins: k stays, with B's updated value
   (which includes what B had seen before). */
static void test_remove_concurrent_with_update(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_ormap_new(GCOUNTER);
    inc(a, A, "k", 1);
    inc(a, A, "other", 1);
    shoal_crdt_reset_delta(a);
    shoal_crdt_t *b = shoal_crdt_clone(a);

    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    inc(b, B, "k", 2);
    assert_int_equal(gvalue(a, "k"), -1);
    assert_int_equal(gvalue(b, "k"), 3);

    /* full states, both orders: the same result, the update wins */
    shoal_crdt_t *ab = merged(a, b), *ba = merged(b, a);
    assert_true(same_bytes(ab, ba));
    assert_int_equal(gvalue(ab, "k"), 3);
    assert_int_equal(gvalue(ab, "other"), 1);
    assert_int_equal(shoal_ormap_size(ab), 2);

    /* deltas alone: B's delta only carries B's own count, so A, having dropped k's value, gets
       k = 2 while B keeps 3 — the case the map types share with Akka. Anti-entropy (full state,
       both ways) completes it: both end with the update's value. */
    shoal_crdt_t *a2 = shoal_crdt_clone(a), *b2 = shoal_crdt_clone(b);
    shoal_crdt_reset_delta(a2);
    shoal_crdt_reset_delta(b2);
    ship_delta(a, b2);
    ship_delta(b, a2);
    assert_int_equal(gvalue(a2, "k"), 2);
    assert_int_equal(gvalue(b2, "k"), 3);
    assert_int_equal(shoal_crdt_merge(a2, b2), 0);
    assert_int_equal(shoal_crdt_merge(b2, a2), 0);
    assert_true(same_bytes(a2, b2));
    assert_true(same_bytes(a2, ab));
    assert_int_equal(gvalue(a2, "k"), 3);

    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
    shoal_crdt_destroy(&a2);
    shoal_crdt_destroy(&b2);
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);
}

/* A removal that has observed the update removes the key everywhere. */
static void test_observed_remove(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_ormap_new(GCOUNTER), *b = shoal_ormap_new(GCOUNTER);
    inc(b, B, "k", 2);
    ship_delta(b, a);
    assert_int_equal(gvalue(a, "k"), 2);
    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    ship_delta(a, b);
    assert_int_equal(gvalue(b, "k"), -1);
    assert_int_equal(shoal_ormap_size(b), 0);
    assert_true(same_bytes(a, b));
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
}

static void test_readd_starts_empty(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_ormap_new(GCOUNTER), *b = shoal_ormap_new(GCOUNTER);
    inc(a, A, "k", 5);
    ship_delta(a, b);
    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    inc(a, A, "k", 1);
    assert_int_equal(gvalue(a, "k"), 1); /* not 6: the removed value is gone */
    ship_delta(a, b);                    /* remove + re-add as one delta group */
    assert_int_equal(gvalue(b, "k"), 1);
    assert_true(same_bytes(a, b));

    /* the same with the removal and the re-add shipped separately, in order */
    shoal_crdt_t *c = shoal_ormap_new(GCOUNTER);
    assert_int_equal(shoal_crdt_merge(c, b), 0);
    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    ship_delta(a, c);
    assert_int_equal(gvalue(c, "k"), -1);
    inc(a, A, "k", 2);
    ship_delta(a, c);
    assert_int_equal(gvalue(c, "k"), 2);
    assert_true(same_bytes(a, c));
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
    shoal_crdt_destroy(&c);
}

static int failing_op(shoal_crdt_t *v, void *arg)
{
    (void)arg;
    assert_int_equal(shoal_gcounter_increment(v, A, 100), 0); /* a change, then a failure */
    return -42;
}

static int positive_op(shoal_crdt_t *v, void *arg)
{
    (void)v, (void)arg;
    return 5;
}

static void test_modify_failure_changes_nothing(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_ormap_new(GCOUNTER);
    /* on an empty map with no pending delta */
    assert_int_equal(shoal_ormap_update(m, A, "k", 1, failing_op, NULL), -42);
    assert_int_equal(shoal_ormap_size(m), 0);
    assert_null(shoal_crdt_delta(m));
    assert_null(shoal_ormap_get(m, "k", 1));

    /* on an existing key, with a pending delta */
    inc(m, A, "k", 1);
    shoal_crdt_t *before = shoal_crdt_clone(m);
    shoal_buf_t d0 = {0}, d1 = {0};
    assert_int_equal(shoal_crdt_encode(shoal_crdt_delta(m), &d0), 0);
    assert_int_equal(shoal_ormap_update(m, A, "k", 1, failing_op, NULL), -42);
    assert_int_equal(shoal_ormap_update(m, A, "new", 3, failing_op, NULL), -42);
    assert_true(same_bytes(before, m));
    assert_int_equal(gvalue(m, "k"), 1);
    assert_int_equal(shoal_crdt_encode(shoal_crdt_delta(m), &d1), 0);
    assert_int_equal(d0.len, d1.len);
    assert_memory_equal(d0.data, d1.data, d0.len);

    /* a positive code is passed back as well, and the counter's own errors */
    assert_int_equal(shoal_ormap_update(m, A, "k", 1, positive_op, NULL), 5);
    uint64_t huge = UINT64_MAX;
    assert_int_equal(shoal_ormap_update(m, A, "k", 1, inc_op, &huge), SHOAL_EOVERFLOW);
    assert_true(same_bytes(before, m));
    shoal_buf_free(&d0);
    shoal_buf_free(&d1);
    shoal_crdt_destroy(&before);
    shoal_crdt_destroy(&m);
}

static void test_big_map_small_delta(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_ormap_new(GCOUNTER);
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "key-%04d", i);
        inc(m, prop_node(i % 5), key, (uint64_t)i + 1);
    }
    shoal_crdt_reset_delta(m);
    shoal_crdt_t *replica = shoal_crdt_clone(m);
    size_t full = encoded_len(m);
    assert_true(full > 20000);

    inc(m, B, "key-0500", 1);
    const shoal_crdt_t *d = shoal_crdt_delta(m);
    assert_non_null(d);
    size_t dlen = encoded_len(d);
    assert_true(dlen < 200);
    ship_delta(m, replica);
    assert_true(same_bytes(m, replica));
    assert_int_equal(gvalue(replica, "key-0500"), 502);

    /* a removal ships small as well */
    assert_int_equal(shoal_ormap_remove(m, A, "key-0001", 8), 0);
    assert_true(encoded_len(shoal_crdt_delta(m)) < 200);
    ship_delta(m, replica);
    assert_true(same_bytes(m, replica));
    assert_int_equal(shoal_ormap_size(replica), 999);
    shoal_crdt_destroy(&replica);
    shoal_crdt_destroy(&m);
}

static void test_delta_groups(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_ormap_new(GCOUNTER);
    inc(a, A, "x", 1);
    shoal_crdt_reset_delta(a);
    shoal_crdt_t *base = shoal_crdt_clone(a);

    inc(a, A, "x", 2);
    inc(a, A, "y", 1);
    shoal_crdt_t *d1 = shoal_crdt_take_delta(a);
    assert_int_equal(shoal_ormap_remove(a, A, "y", 1), 0);
    inc(a, A, "z", 4);
    shoal_crdt_t *d2 = shoal_crdt_take_delta(a);

    /* d1 ⊔ d2 applied at once = d1 then d2 = a */
    shoal_crdt_t *group = shoal_crdt_clone(d1);
    assert_int_equal(shoal_crdt_merge(group, d2), 0);
    shoal_crdt_t *sent = prop_roundtrip(group);
    shoal_crdt_t *r1 = shoal_crdt_clone(base), *r2 = shoal_crdt_clone(base);
    assert_int_equal(shoal_crdt_merge_delta(r1, sent), 0);
    assert_int_equal(shoal_crdt_merge_delta(r2, d1), 0);
    assert_int_equal(shoal_crdt_merge_delta(r2, d2), 0);
    assert_true(same_bytes(r1, a));
    assert_true(same_bytes(r2, a));
    assert_int_equal(gvalue(r1, "x"), 3);
    assert_int_equal(gvalue(r1, "y"), -1);
    assert_int_equal(gvalue(r1, "z"), 4);
    /* x removed and updated again: a group of all three starts x from zero at the receiver */
    assert_int_equal(shoal_ormap_remove(a, A, "x", 1), 0);
    inc(a, A, "x", 7);
    shoal_crdt_t *d3 = shoal_crdt_take_delta(a);
    shoal_crdt_t *group3 = prop_roundtrip(group);
    assert_int_equal(shoal_crdt_merge(group3, d3), 0);
    shoal_crdt_t *r4 = shoal_crdt_clone(base), *r5 = shoal_crdt_clone(r2);
    assert_int_equal(shoal_crdt_merge_delta(r4, group3), 0);
    assert_int_equal(shoal_crdt_merge_delta(r5, d3), 0);
    assert_int_equal(gvalue(r4, "x"), 7);
    assert_int_equal(gvalue(r5, "x"), 7);
    assert_true(same_bytes(r4, a));
    assert_true(same_bytes(r5, a));
    /* the group lists x as removed; a receiver that holds a concurrent incarnation of x (an
       update the removal did not observe) keeps x and merges into it, as full-state merge does */
    shoal_crdt_t *r6 = shoal_crdt_clone(r2);
    inc(r6, C, "x", 100);
    shoal_crdt_reset_delta(r6);
    shoal_crdt_t *r7 = shoal_crdt_clone(r6);
    assert_int_equal(shoal_crdt_merge_delta(r6, d3), 0);
    assert_int_equal(shoal_crdt_merge(r7, a), 0);
    assert_int_equal(gvalue(r6, "x"), 107); /* C's 100, and A's new 7 over its old 3 */
    assert_int_equal(gvalue(r7, "x"), 107);
    shoal_crdt_destroy(&r4);
    shoal_crdt_destroy(&r5);
    shoal_crdt_destroy(&r6);
    shoal_crdt_destroy(&r7);
    shoal_crdt_destroy(&group3);
    shoal_crdt_destroy(&d3);

    /* a full state is accepted where a delta is */
    shoal_crdt_t *r3 = shoal_crdt_clone(base);
    assert_int_equal(shoal_crdt_merge_delta(r3, a), 0);
    assert_true(same_bytes(r3, a));

    /* deltas of maps of another value type do not mix */
    shoal_crdt_t *other = shoal_ormap_new(shoal_type_by_name("PNCounter"));
    shoal_crdt_t *od = NULL;
    {
        shoal_crdt_t *o2 = shoal_ormultimap_new(false);
        mm_add(o2, A, "x", "e");
        od = shoal_crdt_take_delta(o2);
        shoal_crdt_destroy(&o2);
    }
    assert_int_equal(shoal_crdt_merge(group, od), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(r1, od), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(r1, d1), 0);
    assert_int_equal(shoal_crdt_merge(r1, other), SHOAL_ETYPE);
    shoal_crdt_destroy(&od);
    shoal_crdt_destroy(&other);

    shoal_crdt_destroy(&sent);
    shoal_crdt_destroy(&group);
    shoal_crdt_destroy(&d1);
    shoal_crdt_destroy(&d2);
    shoal_crdt_destroy(&r1);
    shoal_crdt_destroy(&r2);
    shoal_crdt_destroy(&r3);
    shoal_crdt_destroy(&base);
    shoal_crdt_destroy(&a);
}

/* The two ORMultiMap modes share the delta type: a delta group mixing a full set and a set delta
   for one key keeps the full set, with the delta folded in, and applies like the two deltas. */
static void test_delta_group_full_and_delta_entries(void **state)
{
    (void)state;
    shoal_crdt_t *full = shoal_ormultimap_new(false); /* entries are whole ORSets */
    mm_add(full, A, "k", "x");
    shoal_crdt_t *df = shoal_crdt_take_delta(full);
    shoal_crdt_t *vd = shoal_ormultimap_new(true); /* entries are ORSet deltas */
    mm_add(vd, B, "k", "y");
    shoal_crdt_t *dd = shoal_crdt_take_delta(vd);

    shoal_buf_t b = {0};
    assert_non_null(strstr(render(dd, &b), "ORMapDelta<ORSet>"));

    shoal_crdt_t *g1 = shoal_crdt_clone(df), *g2 = shoal_crdt_clone(dd);
    assert_int_equal(shoal_crdt_merge(g1, dd), 0); /* full ⊔ delta */
    assert_int_equal(shoal_crdt_merge(g2, df), 0); /* delta ⊔ full */
    assert_true(same_bytes(g1, g2));
    shoal_crdt_t *r1 = prop_roundtrip(g1);
    assert_true(same_bytes(r1, g1));

    shoal_crdt_t *t1 = shoal_ormultimap_new(false), *t2 = shoal_ormultimap_new(false);
    assert_int_equal(shoal_crdt_merge_delta(t1, g1), 0);
    assert_int_equal(shoal_crdt_merge_delta(t2, df), 0);
    assert_int_equal(shoal_crdt_merge_delta(t2, dd), 0);
    assert_true(same_bytes(t1, t2));
    assert_string_equal(mm_elems(t1, "k", &b), "x,y");

    shoal_buf_free(&b);
    shoal_crdt_destroy(&r1);
    shoal_crdt_destroy(&t1);
    shoal_crdt_destroy(&t2);
    shoal_crdt_destroy(&g1);
    shoal_crdt_destroy(&g2);
    shoal_crdt_destroy(&df);
    shoal_crdt_destroy(&dd);
    shoal_crdt_destroy(&full);
    shoal_crdt_destroy(&vd);
}

static void test_pruning_keeps_values(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_ormap_new(GCOUNTER);
    inc(m, A, "x", 1);
    inc(m, B, "x", 2);
    inc(m, B, "y", 3);
    inc(m, C, "z", 4);
    shoal_crdt_reset_delta(m);

    const shoal_node_t *nodes[8];
    assert_int_equal(shoal_crdt_modified_by(m, nodes, 8), 3);
    assert_ptr_equal(nodes[0], A);
    assert_ptr_equal(nodes[1], B);
    assert_ptr_equal(nodes[2], C);
    assert_int_equal(shoal_crdt_modified_by(m, nodes, 1), 3); /* count, even past cap */
    assert_true(shoal_crdt_needs_pruning_from(m, B));

    assert_int_equal(shoal_crdt_prune(m, B, A, NULL), 0);
    assert_null(shoal_crdt_delta(m));
    assert_false(shoal_crdt_needs_pruning_from(m, B));
    assert_int_equal(gvalue(m, "x"), 3);
    assert_int_equal(gvalue(m, "y"), 3);
    assert_int_equal(gvalue(m, "z"), 4);
    assert_int_equal(shoal_ormap_size(m), 3);
    assert_int_equal(shoal_crdt_modified_by(m, nodes, 8), 2);
    assert_ptr_equal(nodes[0], A);
    assert_ptr_equal(nodes[1], C);

    assert_int_equal(shoal_crdt_prune_cleanup(m, B, NULL), 0);
    assert_int_equal(gvalue(m, "x"), 3);
    assert_int_equal(gvalue(m, "y"), 3);
    assert_int_equal(shoal_ormap_size(m), 3);
    shoal_crdt_t *r = prop_roundtrip(m);
    assert_true(shoal_crdt_equal(r, m));
    shoal_crdt_destroy(&r);
    shoal_crdt_destroy(&m);
}

/* A key (and an ORMultiMap binding) added by a node that is then removed and pruned into A,
   removed at B before B heard of the pruning: the remove saw only the removed node's dots. A
   applies the plan to B's delta, B to its own state when it hears, and the key stays removed on
   both (chaos seed 1867285726 found the ORSet case; maps hold their keys in one). */
static void prune_then_remove(shoal_crdt_t *(*make)(void), int (*put)(shoal_crdt_t *, const char *),
                              int (*drop)(shoal_crdt_t *, const char *),
                              bool (*holds)(const shoal_crdt_t *))
{
    shoal_crdt_t *gone = make(); /* the node C, removed later */
    assert_int_equal(put(gone, "k"), 0);
    shoal_crdt_reset_delta(gone);
    shoal_crdt_t *a = make(), *b = make();
    assert_int_equal(shoal_crdt_merge(a, gone), 0);
    assert_int_equal(shoal_crdt_merge(b, gone), 0);
    assert_true(holds(a) && holds(b));
    for (int order = 0; order < 2; order++) {
        shoal_crdt_t *x = shoal_crdt_clone(a), *y = shoal_crdt_clone(b);
        shoal_crdt_reset_delta(x);
        shoal_crdt_reset_delta(y);
        shoal_prune_plan_t plan;
        assert_int_equal(shoal_crdt_prune(x, C, A, &plan), 0);
        assert_true(plan.span > 0);
        assert_false(shoal_crdt_needs_pruning_from(x, C));
        assert_true(holds(x));
        assert_int_equal(drop(y, "k"), 0); /* B has not heard of the pruning */
        shoal_crdt_t *d = shoal_crdt_take_delta(y);
        assert_non_null(d);
        if (order == 0) { /* the delta reaches A, which cleans it by its plan */
            shoal_crdt_t *got = prop_roundtrip(d);
            assert_true(shoal_crdt_needs_pruning_from(got, C));
            assert_int_equal(shoal_crdt_prune_cleanup(got, C, &plan), 0);
            assert_false(shoal_crdt_needs_pruning_from(got, C));
            assert_int_equal(shoal_crdt_merge_delta(x, got), 0);
            assert_false(holds(x));
            shoal_crdt_destroy(&got);
        }
        /* B hears of the pruning with A's state */
        assert_int_equal(shoal_crdt_prune_cleanup(y, C, &plan), 0);
        assert_int_equal(shoal_crdt_merge(y, x), 0);
        assert_false(holds(y));
        assert_int_equal(shoal_crdt_merge(x, y), 0);
        assert_false(holds(x));
        prop_assert_same(x, y, "replicas equal after the pruning", 0);
        /* without the plan, B's cleanup forgets what its remove saw and A's copy comes back */
        if (order == 1) {
            shoal_crdt_t *z = shoal_crdt_clone(b);
            shoal_crdt_reset_delta(z);
            assert_int_equal(drop(z, "k"), 0);
            shoal_crdt_reset_delta(z);
            shoal_crdt_t *x2 = shoal_crdt_clone(a);
            assert_int_equal(shoal_crdt_prune(x2, C, A, NULL), 0);
            assert_int_equal(shoal_crdt_prune_cleanup(z, C, NULL), 0);
            assert_int_equal(shoal_crdt_merge(z, x2), 0);
            assert_true(holds(z)); /* the old behaviour, which plans fix */
            shoal_crdt_destroy(&z);
            shoal_crdt_destroy(&x2);
        }
        shoal_crdt_destroy(&d);
        shoal_crdt_destroy(&x);
        shoal_crdt_destroy(&y);
    }
    shoal_crdt_destroy(&gone);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
}

static shoal_crdt_t *make_mm(void)
{
    return shoal_ormultimap_new(false);
}
static shoal_crdt_t *make_mm_vd(void)
{
    return shoal_ormultimap_new(true);
}
static shoal_crdt_t *make_lww(void)
{
    return shoal_lwwmap_new();
}
/* the writer of each operation: C adds (it is the node removed later), B removes */
static int mm_put(shoal_crdt_t *m, const char *k)
{
    return shoal_ormultimap_add(m, C, k, strlen(k), "v", 1);
}
static int mm_drop_key(shoal_crdt_t *m, const char *k)
{
    return shoal_ormap_remove(m, B, k, strlen(k));
}
static int mm_drop_binding(shoal_crdt_t *m, const char *k)
{
    return shoal_ormultimap_remove_binding(m, B, k, strlen(k), "v", 1);
}
static bool mm_holds(const shoal_crdt_t *m)
{
    const shoal_crdt_t *s = shoal_ormultimap_get(m, "k", 1);
    return s && shoal_orset_contains(s, "v", 1);
}
static int lww_put(shoal_crdt_t *m, const char *k)
{
    return shoal_lwwmap_put(m, C, k, strlen(k), "v", 1, NULL, NULL);
}
static bool lww_holds(const shoal_crdt_t *m)
{
    size_t n;
    return shoal_lwwmap_get(m, "k", 1, &n) != NULL;
}

static void test_pruning_with_concurrent_key_remove(void **state)
{
    (void)state;
    prune_then_remove(make_mm, mm_put, mm_drop_key, mm_holds);
    prune_then_remove(make_mm_vd, mm_put, mm_drop_key, mm_holds);
    prune_then_remove(make_mm, mm_put, mm_drop_binding, mm_holds);
    prune_then_remove(make_mm_vd, mm_put, mm_drop_binding, mm_holds);
    prune_then_remove(make_lww, lww_put, mm_drop_key, lww_holds);
}

static void test_wrong_types_and_arguments(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_ormap_new(GCOUNTER), *g = shoal_gcounter_new();
    uint64_t one = 1;
    assert_int_equal(shoal_ormap_update(g, A, "k", 1, inc_op, &one), SHOAL_ETYPE);
    assert_int_equal(shoal_ormap_update(NULL, A, "k", 1, inc_op, &one), SHOAL_EINVAL);
    assert_int_equal(shoal_ormap_update(m, NULL, "k", 1, inc_op, &one), SHOAL_EINVAL);
    assert_int_equal(shoal_ormap_update(m, A, NULL, 1, inc_op, &one), SHOAL_EINVAL);
    assert_int_equal(shoal_ormap_update(m, A, "k", 1, NULL, &one), SHOAL_EINVAL);
    assert_int_equal(shoal_ormap_remove(g, A, "k", 1), SHOAL_ETYPE);
    assert_int_equal(shoal_ormap_remove(m, NULL, "k", 1), SHOAL_EINVAL);
    assert_null(shoal_ormap_get(g, "k", 1));
    assert_null(shoal_ormap_get(NULL, "k", 1));
    assert_int_equal(shoal_ormap_size(g), 0);
    assert_null(shoal_ormap_value_type(g));
    assert_int_equal(shoal_ormap_foreach(g, collect_entry, NULL), SHOAL_ETYPE);
    assert_int_equal(shoal_ormap_foreach(m, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_crdt_merge(m, g), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(m, g), SHOAL_ETYPE);

    /* the specializations' calls refuse other map types */
    assert_int_equal(shoal_ormultimap_add(m, A, "k", 1, "e", 1), SHOAL_ETYPE);
    assert_int_equal(shoal_ormultimap_remove_binding(m, A, "k", 1, "e", 1), SHOAL_ETYPE);
    assert_null(shoal_ormultimap_get(m, "k", 1));
    assert_int_equal(shoal_lwwmap_put(m, A, "k", 1, "v", 1, NULL, NULL), SHOAL_ETYPE);
    assert_int_equal(shoal_pncountermap_add(m, A, "k", 1, 1), SHOAL_ETYPE);
    int64_t v;
    assert_int_equal(shoal_pncountermap_get(m, "k", 1, &v), SHOAL_ETYPE);

    /* two maps of one type but different value types */
    shoal_crdt_t *m2 = shoal_ormap_new(shoal_type_by_name("PNCounter"));
    assert_int_equal(shoal_crdt_merge(m, m2), SHOAL_ETYPE);
    /* ORMultiMaps of the two modes */
    shoal_crdt_t *mm1 = shoal_ormultimap_new(false), *mm2 = shoal_ormultimap_new(true);
    assert_int_equal(shoal_crdt_merge(mm1, mm2), SHOAL_ETYPE);
    assert_false(shoal_crdt_equal(mm1, mm2));
    /* removing a binding of an absent key updates and removes the key: still absent */
    assert_int_equal(shoal_ormultimap_remove_binding(mm1, A, "k", 1, "e", 1), 0);
    assert_int_equal(shoal_ormap_size(mm1), 0);
    shoal_crdt_destroy(&mm1);
    shoal_crdt_destroy(&mm2);
    shoal_crdt_destroy(&m2);
    shoal_crdt_destroy(&m);
    shoal_crdt_destroy(&g);
}

static void test_decode_rejects(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_ormap_new(GCOUNTER);
    inc(m, A, "a", 1);
    inc(m, B, "b", 2);
    shoal_crdt_t *out = NULL;

    /* garbage and truncations: errors, never crashes */
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x80};
    assert_true(decode_raw(SHOAL_ORMAP, junk, sizeof junk, &out) < 0);
    assert_null(out);
    size_t plen;
    uint8_t *p = payload_of(m, &plen);
    for (size_t cut = 0; cut < plen; cut++) {
        int rc = decode_raw(SHOAL_ORMAP, p, cut, &out);
        if (rc == 0)
            shoal_crdt_destroy(&out);
        assert_null(out);
    }
    assert_int_equal(decode_raw(SHOAL_ORMAP, p, plen, &out), 0);
    assert_true(same_bytes(out, m));
    shoal_crdt_destroy(&out);
    free(p);

    Shoal__Ddata__ORMap *msg = unpack_map(m);
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), 0);
    /* unknown value type, then a map as the value type, then the wrong type for the map */
    msg->value_type = 99;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EVERSION);
    msg->value_type = SHOAL_ORMAP;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EDECODE);
    msg->value_type = SHOAL_ORSET_DELTA;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EDECODE);
    msg->value_type = SHOAL_GCOUNTER;
    assert_int_equal(decode_msg(SHOAL_ORMULTIMAP, &msg->base), SHOAL_EDECODE);
    assert_int_equal(decode_msg(SHOAL_LWWMAP, &msg->base), SHOAL_EDECODE);
    assert_int_equal(decode_msg(SHOAL_PNCOUNTERMAP, &msg->base), SHOAL_EDECODE);
    /* value_deltas belongs to ORMultiMap */
    msg->value_deltas = 1;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EDECODE);
    msg->value_deltas = 0;
    /* one value per present key */
    msg->n_values = 1;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EDECODE);
    msg->n_values = 2;
    /* a value of the wrong type */
    Shoal__Ddata__Value *saved = msg->values[1];
    Shoal__Ddata__Value wrong = SHOAL__DDATA__VALUE__INIT;
    shoal_crdt_t *pn = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(pn, A, 1), 0);
    size_t pnlen;
    uint8_t *pnp = payload_of(pn, &pnlen);
    wrong.type = SHOAL_PNCOUNTER;
    wrong.version = 1;
    wrong.payload.data = pnp;
    wrong.payload.len = pnlen;
    msg->values[1] = &wrong;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EDECODE);
    /* the right type with a newer version, an unknown tag, a corrupt payload */
    wrong.type = SHOAL_GCOUNTER;
    wrong.version = 2;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EVERSION);
    wrong.type = 77;
    wrong.version = 1;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EVERSION);
    static uint8_t bad[] = {0x0a, 0x05, 'x', 'y'};
    wrong.type = SHOAL_GCOUNTER;
    wrong.payload.data = bad;
    wrong.payload.len = sizeof bad;
    assert_true(decode_msg(SHOAL_ORMAP, &msg->base) < 0);
    msg->values[1] = saved;
    /* tombstones belong to ORMultiMap with value deltas */
    ProtobufCBinaryData rk = {1, (uint8_t *)"z"};
    msg->n_removed_keys = 1;
    msg->removed_keys = &rk;
    msg->n_removed_values = 1;
    Shoal__Ddata__Value *rv = saved;
    msg->removed_values = &rv;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), SHOAL_EDECODE);
    msg->n_removed_keys = msg->n_removed_values = 0;
    msg->removed_keys = NULL;
    msg->removed_values = NULL;
    assert_int_equal(decode_msg(SHOAL_ORMAP, &msg->base), 0);
    /* corrupt keys */
    Shoal__Ddata__ORSet *keys = msg->keys;
    Shoal__Ddata__ORSet badkeys = SHOAL__DDATA__ORSET__INIT;
    char *badnode = "not a node id";
    badkeys.n_nodes = 1;
    badkeys.nodes = &badnode;
    msg->keys = &badkeys;
    assert_true(decode_msg(SHOAL_ORMAP, &msg->base) < 0);
    msg->keys = keys;
    shoal__ddata__ormap__free_unpacked(msg, NULL);

    /* deltas */
    shoal_crdt_reset_delta(m);
    inc(m, A, "c", 1);
    inc(m, A, "d", 1);
    const shoal_crdt_t *d = shoal_crdt_delta(m);
    Shoal__Ddata__ORMapDelta *dm = unpack_delta(d);
    assert_int_equal(dm->n_value_keys, 2);
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), 0);
    ProtobufCBinaryData k0 = dm->value_keys[0], k1 = dm->value_keys[1];
    dm->value_keys[0] = k1;
    dm->value_keys[1] = k0; /* not ascending */
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->value_keys[0] = k0;
    dm->value_keys[1] = k0; /* duplicate */
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->value_keys[1] = k1;
    dm->n_value_deltas = 1; /* lengths differ */
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->n_value_deltas = 2;
    saved = dm->value_deltas[0];
    wrong.type = SHOAL_PNCOUNTER;
    wrong.payload.data = pnp;
    wrong.payload.len = pnlen;
    dm->value_deltas[0] = &wrong; /* an entry of neither the value type nor its delta type */
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->value_deltas[0] = saved;
    dm->value_type = SHOAL_ORMULTIMAP;
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->value_type = 0;
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EVERSION);
    dm->value_type = SHOAL_GCOUNTER;
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), 0);
    /* removed keys: ascending, and each one a key of the keys delta */
    ProtobufCBinaryData rks[2] = {{1, (uint8_t *)"c"}, {1, (uint8_t *)"d"}};
    dm->removed_keys = rks;
    dm->n_removed_keys = 2;
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), 0);
    rks[0] = rks[1];
    rks[1] = (ProtobufCBinaryData){1, (uint8_t *)"c"};
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    rks[0] = (ProtobufCBinaryData){1, (uint8_t *)"a"}; /* not in this delta's keys */
    dm->n_removed_keys = 1;
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    Shoal__Ddata__ORSet *dkeys = dm->keys;
    dm->keys = NULL;
    rks[0] = (ProtobufCBinaryData){1, (uint8_t *)"c"};
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->keys = dkeys;
    dm->removed_keys = NULL;
    dm->n_removed_keys = 0;
    shoal__ddata__ormap_delta__free_unpacked(dm, NULL);

    free(pnp);
    shoal_crdt_destroy(&pn);
    shoal_crdt_destroy(&m);
}

/* ---------------------------------------------------------------------------------------------
 * ORMultiMap
 */
static void test_multimap_bindings(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        shoal_crdt_t *m = shoal_ormultimap_new(mode == 1);
        shoal_buf_t b = {0};
        mm_add(m, A, "k", "y");
        mm_add(m, A, "k", "x");
        mm_add(m, A, "j", "x");
        assert_string_equal(mm_elems(m, "k", &b), "x,y");
        assert_string_equal(mm_elems(m, "j", &b), "x");
        assert_string_equal(mm_elems(m, "nope", &b), "(absent)");
        assert_int_equal(shoal_ormap_size(m), 2);
        assert_string_equal(render(m, &b), "ORMultiMap{\"j\" -> {\"x\"}, \"k\" -> {\"x\", \"y\"}}");

        assert_int_equal(shoal_ormultimap_remove_binding(m, A, "k", 1, "y", 1), 0);
        assert_string_equal(mm_elems(m, "k", &b), "x");
        /* as Pekko's removeBinding: an absent binding still updates the key, which stays */
        assert_int_equal(shoal_ormultimap_remove_binding(m, A, "k", 1, "y", 1), 0);
        assert_string_equal(mm_elems(m, "k", &b), "x");
        assert_int_equal(shoal_ormultimap_remove_binding(m, A, "q", 1, "y", 1), 0);
        assert_null(shoal_ormultimap_get(m, "q", 1));
        /* removing the last binding removes the key */
        assert_int_equal(shoal_ormultimap_remove_binding(m, A, "k", 1, "x", 1), 0);
        assert_null(shoal_ormultimap_get(m, "k", 1));
        assert_int_equal(shoal_ormap_size(m), 1);
        /* and a new binding starts a new set */
        mm_add(m, A, "k", "z");
        assert_string_equal(mm_elems(m, "k", &b), "z");

        /* deltas reproduce the state */
        shoal_crdt_t *r = shoal_ormultimap_new(mode == 1);
        ship_delta(m, r);
        assert_true(same_bytes(r, m));
        assert_int_equal(shoal_ormap_remove(m, A, "j", 1), 0);
        assert_int_equal(shoal_ormap_remove(m, A, "j", 1), SHOAL_ENOTFOUND);
        ship_delta(m, r);
        assert_true(same_bytes(r, m));
        assert_null(shoal_ormultimap_get(r, "j", 1));
        shoal_crdt_t *rt = prop_roundtrip(m);
        assert_true(shoal_crdt_equal(rt, m));
        shoal_crdt_destroy(&rt);
        shoal_crdt_destroy(&r);
        shoal_buf_free(&b);
        shoal_crdt_destroy(&m);
    }
}

/* Default mode ships the key's whole set; value_deltas ships set deltas. */
static void test_multimap_delta_sizes(void **state)
{
    (void)state;
    char e[24];
    for (int mode = 0; mode < 2; mode++) {
        shoal_crdt_t *m = shoal_ormultimap_new(mode == 1);
        for (int i = 0; i < 200; i++) {
            snprintf(e, sizeof e, "elem-%03d", i);
            mm_add(m, A, "k", e);
        }
        shoal_crdt_reset_delta(m);
        mm_add(m, B, "k", "one-more");
        size_t dlen = encoded_len(shoal_crdt_delta(m));
        if (mode == 0)
            assert_true(dlen > 200 * 8);
        else
            assert_true(dlen < 200);
        shoal_crdt_destroy(&m);
    }
}

/* A removes key k while B adds an element to k. Add wins for the key; the question is which
   elements come back. */
static void test_multimap_remove_add_race(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    for (int mode = 0; mode < 2; mode++) {
        shoal_crdt_t *a = shoal_ormultimap_new(mode == 1);
        mm_add(a, A, "k", "x");
        mm_add(a, A, "j", "x");
        shoal_crdt_t *bb = shoal_ormultimap_new(mode == 1);
        ship_delta(a, bb);

        assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
        mm_add(bb, B, "k", "y");
        shoal_crdt_t *da = shoal_crdt_take_delta(a), *db = shoal_crdt_take_delta(bb);
        shoal_crdt_t *a_full = shoal_crdt_clone(a), *b_full = shoal_crdt_clone(bb);

        /* deltas alone */
        assert_int_equal(shoal_crdt_merge_delta(a, db), 0);
        assert_int_equal(shoal_crdt_merge_delta(bb, da), 0);
        if (mode == 1) {
            /* value deltas: the removal cleared x, the concurrent add keeps k with y only, and
               the replicas are identical, tombstone contexts included */
            assert_string_equal(mm_elems(a, "k", &b), "y");
            assert_string_equal(mm_elems(bb, "k", &b), "y");
            assert_true(same_bytes(a, bb));
        } else {
            /* full sets (Akka's default): B's whole set {x, y} comes back with k */
            assert_string_equal(mm_elems(a, "k", &b), "x,y");
            assert_string_equal(mm_elems(bb, "k", &b), "x,y");
            assert_true(same_bytes(a, bb));
        }
        /* full states, both orders, agree with the deltas */
        shoal_crdt_t *ab = merged(a_full, b_full), *ba = merged(b_full, a_full);
        assert_true(same_bytes(ab, ba));
        assert_true(same_bytes(ab, a));
        /* a late duplicate of A's original add does not bring x back */
        shoal_crdt_t *c = shoal_ormultimap_new(mode == 1);
        mm_add(c, A, "k", "x");
        assert_int_equal(shoal_crdt_merge(c, a), 0);
        assert_string_equal(mm_elems(c, "k", &b), mode == 1 ? "y" : "x,y");

        shoal_crdt_destroy(&c);
        shoal_crdt_destroy(&ab);
        shoal_crdt_destroy(&ba);
        shoal_crdt_destroy(&a_full);
        shoal_crdt_destroy(&b_full);
        shoal_crdt_destroy(&da);
        shoal_crdt_destroy(&db);
        shoal_crdt_destroy(&a);
        shoal_crdt_destroy(&bb);
    }
    shoal_buf_free(&b);
}

/* With value deltas a removed key leaves a tombstone that travels in the encoding. */
static void test_multimap_tombstones(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_crdt_t *m = shoal_ormultimap_new(true);
    mm_add(m, A, "k", "x");
    assert_int_equal(shoal_ormap_remove(m, A, "k", 1), 0);
    assert_int_equal(shoal_ormap_size(m), 0);
    assert_null(shoal_ormultimap_get(m, "k", 1));
    assert_non_null(strstr(render(m, &b), "removed"));
    Shoal__Ddata__ORMap *msg = unpack_map(m);
    assert_int_equal(msg->n_values, 0);
    assert_int_equal(msg->n_removed_keys, 1);
    assert_true(msg->value_deltas);
    /* a tombstone must be for an absent key, in order, not empty */
    assert_int_equal(decode_msg(SHOAL_ORMULTIMAP, &msg->base), 0);
    ProtobufCBinaryData k2[2] = {msg->removed_keys[0], msg->removed_keys[0]};
    Shoal__Ddata__Value *v2[2] = {msg->removed_values[0], msg->removed_values[0]};
    ProtobufCBinaryData *saved_k = msg->removed_keys;
    Shoal__Ddata__Value **saved_v = msg->removed_values;
    msg->removed_keys = k2;
    msg->removed_values = v2;
    msg->n_removed_keys = msg->n_removed_values = 2;
    assert_int_equal(decode_msg(SHOAL_ORMULTIMAP, &msg->base), SHOAL_EDECODE);
    msg->n_removed_values = 1;
    assert_int_equal(decode_msg(SHOAL_ORMULTIMAP, &msg->base), SHOAL_EDECODE);
    msg->n_removed_keys = 1;
    shoal_crdt_t *empty = shoal_orset_new();
    size_t elen;
    uint8_t *ep = payload_of(empty, &elen);
    Shoal__Ddata__Value ev = SHOAL__DDATA__VALUE__INIT;
    ev.type = SHOAL_ORSET;
    ev.version = 1;
    ev.payload.data = ep;
    ev.payload.len = elen;
    v2[0] = &ev;
    assert_int_equal(decode_msg(SHOAL_ORMULTIMAP, &msg->base), SHOAL_EDECODE);
    v2[0] = saved_v[0];
    msg->value_deltas = 0; /* tombstones without value deltas */
    assert_int_equal(decode_msg(SHOAL_ORMULTIMAP, &msg->base), SHOAL_EDECODE);
    msg->value_deltas = 1;
    msg->removed_keys = saved_k;
    msg->removed_values = saved_v;
    free(ep);
    shoal_crdt_destroy(&empty);
    shoal__ddata__ormap__free_unpacked(msg, NULL);

    /* re-adding starts from the cleared set */
    mm_add(m, B, "k", "y");
    assert_string_equal(mm_elems(m, "k", &b), "y");
    msg = unpack_map(m);
    assert_int_equal(msg->n_values, 1);
    assert_int_equal(msg->n_removed_keys, 0);
    shoal__ddata__ormap__free_unpacked(msg, NULL);
    /* a key updated without a change and removed leaves nothing behind */
    shoal_crdt_t *e = shoal_ormultimap_new(true);
    assert_int_equal(shoal_ormultimap_remove_binding(e, A, "k", 1, "x", 1), 0);
    assert_int_equal(shoal_ormap_size(e), 0);
    mm_add(e, A, "k", "x");
    assert_int_equal(shoal_ormultimap_remove_binding(e, A, "k", 1, "x", 1), 0);
    assert_int_equal(shoal_ormap_size(e), 0);
    shoal_crdt_t *rt = prop_roundtrip(e);
    assert_true(shoal_crdt_equal(rt, e));
    shoal_crdt_destroy(&rt);
    shoal_crdt_destroy(&e);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&m);
}

/* ---------------------------------------------------------------------------------------------
 * Properties
 */
static const char *const keys[] = {"a", "b", "c", "d"};
static const char *const elements[] = {"w", "x", "y", "z"};

static shoal_crdt_t *gc_map_new(void)
{
    return shoal_ormap_new(shoal_type_by_name("GCounter"));
}

static void gc_map_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng)
{
    const char *k = keys[prop_below(rng, 4)];
    if (prop_chance(rng, 2, 3)) {
        inc_at_t a = {self, 1 + prop_below(rng, 3)};
        assert_int_equal(shoal_ormap_update(m, self, k, 1, inc_at_op, &a), 0);
    } else {
        int rc = shoal_ormap_remove(m, self, k, 1);
        assert_true(rc == 0 || rc == SHOAL_ENOTFOUND);
    }
}

static int set_op(shoal_crdt_t *v, void *arg)
{
    const void *const *a = arg;
    const shoal_node_t *self = a[0];
    const char *e = a[1];
    if (a[2]) {
        int rc = shoal_orset_remove(v, self, e, 1);
        return rc == SHOAL_ENOTFOUND ? 0 : rc;
    }
    return shoal_orset_add(v, self, e, 1);
}

static shoal_crdt_t *set_map_new(void)
{
    return shoal_ormap_new(shoal_type_by_name("ORSet"));
}

static void set_map_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng)
{
    const char *k = keys[prop_below(rng, 3)];
    unsigned what = (unsigned)prop_below(rng, 4);
    if (what < 3) {
        const void *a[3] = {self, elements[prop_below(rng, 4)], what == 2 ? "rm" : NULL};
        assert_int_equal(shoal_ormap_update(m, self, k, 1, set_op, (void *)a), 0);
    } else {
        int rc = shoal_ormap_remove(m, self, k, 1);
        assert_true(rc == 0 || rc == SHOAL_ENOTFOUND);
    }
}

static void mm_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng)
{
    const char *k = keys[prop_below(rng, 3)];
    const char *e = elements[prop_below(rng, 4)];
    unsigned what = (unsigned)prop_below(rng, 8);
    int rc;
    if (what < 4)
        rc = shoal_ormultimap_add(m, self, k, 1, e, 1);
    else if (what < 6)
        rc = shoal_ormultimap_remove_binding(m, self, k, 1, e, 1);
    else
        rc = shoal_ormap_remove(m, self, k, 1);
    assert_true(rc == 0 || rc == SHOAL_ENOTFOUND);
}

static shoal_crdt_t *mm_new_full(void)
{
    return shoal_ormultimap_new(false);
}

static shoal_crdt_t *mm_new_deltas(void)
{
    return shoal_ormultimap_new(true);
}

static void test_properties_ormap_gcounter(void **state)
{
    (void)state;
    static const prop_type_t t = {
        .name = "ORMap<GCounter>",
        .create = gc_map_new,
        .random_op = gc_map_op,
        .deltas_converge = false,
        .strict_assoc = false,
    };
    prop_check_all(&t, 1000);
}

static void test_properties_ormap_orset(void **state)
{
    (void)state;
    static const prop_type_t t = {
        .name = "ORMap<ORSet>",
        .create = set_map_new,
        .random_op = set_map_op,
        .deltas_converge = false,
        .strict_assoc = false,
    };
    prop_check_all(&t, 700);
}

static void test_properties_ormultimap(void **state)
{
    (void)state;
    static const prop_type_t t = {
        .name = "ORMultiMap",
        .create = mm_new_full,
        .random_op = mm_op,
        .deltas_converge = false,
        .strict_assoc = false,
    };
    prop_check_all(&t, 1000);
}

/* With value deltas and tombstones the map is a true join: deltas alone converge. */
static void test_properties_ormultimap_value_deltas(void **state)
{
    (void)state;
    static const prop_type_t t = {
        .name = "ORMultiMap(value deltas)",
        .create = mm_new_deltas,
        .random_op = mm_op,
        .deltas_converge = true,
        .strict_assoc = true,
    };
    prop_check_all(&t, 1200);
}

int main(void)
{
    prop_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_and_value_types),
        cmocka_unit_test(test_update_get_remove),
        cmocka_unit_test(test_remove_concurrent_with_update),
        cmocka_unit_test(test_observed_remove),
        cmocka_unit_test(test_readd_starts_empty),
        cmocka_unit_test(test_modify_failure_changes_nothing),
        cmocka_unit_test(test_big_map_small_delta),
        cmocka_unit_test(test_delta_groups),
        cmocka_unit_test(test_delta_group_full_and_delta_entries),
        cmocka_unit_test(test_pruning_keeps_values),
        cmocka_unit_test(test_pruning_with_concurrent_key_remove),
        cmocka_unit_test(test_wrong_types_and_arguments),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_multimap_bindings),
        cmocka_unit_test(test_multimap_delta_sizes),
        cmocka_unit_test(test_multimap_remove_add_race),
        cmocka_unit_test(test_multimap_tombstones),
        cmocka_unit_test(test_properties_ormap_gcounter),
        cmocka_unit_test(test_properties_ormap_orset),
        cmocka_unit_test(test_properties_ormultimap),
        cmocka_unit_test(test_properties_ormultimap_value_deltas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
