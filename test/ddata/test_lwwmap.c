/*  test_lwwmap.c — LWWMap and PNCounterMap: puts and removals, concurrent writers resolved by
    timestamp then node id, counters from several nodes, a removal racing with an update, small
    deltas for big maps, pruning, wrong types, hostile encodings, and the property harness. */
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

#define A prop_node(0) /* 127.0.0.1:2551:1, the lowest id */
#define B prop_node(1)
#define C prop_node(2)

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */
static shoal_crdt_t *merged(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *m = shoal_crdt_clone(a);
    shoal_crdt_reset_delta(m);
    assert_int_equal(shoal_crdt_merge(m, b), 0);
    assert_null(shoal_crdt_delta(m));
    return m;
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

static size_t encoded_len(const shoal_crdt_t *v)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    size_t n = b.len;
    shoal_buf_free(&b);
    return n;
}

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

/* A clock that returns the timestamp its argument points at. */
static int64_t fixed_clock(int64_t current, const void *value, size_t len, void *arg)
{
    (void)current, (void)value, (void)len;
    return *(const int64_t *)arg;
}

static void put(shoal_crdt_t *m, const shoal_node_t *n, const char *k, const char *v)
{
    assert_int_equal(shoal_lwwmap_put(m, n, k, strlen(k), v, strlen(v), NULL, NULL), 0);
}

static void put_at(shoal_crdt_t *m, const shoal_node_t *n, const char *k, const char *v,
                   int64_t ts)
{
    assert_int_equal(shoal_lwwmap_put(m, n, k, strlen(k), v, strlen(v), fixed_clock, &ts), 0);
}

/* The key's value as a NUL-terminated string in b, or "(absent)". */
static const char *lget(const shoal_crdt_t *m, const char *k, shoal_buf_t *b)
{
    size_t len = 99;
    const void *p = shoal_lwwmap_get(m, k, strlen(k), &len);
    shoal_buf_reset(b);
    if (!p) {
        assert_int_equal(len, 0);
        return "(absent)";
    }
    shoal_buf_append(b, p, len);
    return shoal_buf_cstr(b);
}

static int64_t pget(const shoal_crdt_t *m, const char *k)
{
    int64_t v = 0x5eed;
    int rc = shoal_pncountermap_get(m, k, strlen(k), &v);
    if (rc == SHOAL_ENOTFOUND)
        return INT64_MIN;
    assert_int_equal(rc, 0);
    return v;
}

static void padd(shoal_crdt_t *m, const shoal_node_t *n, const char *k, int64_t x)
{
    assert_int_equal(shoal_pncountermap_add(m, n, k, strlen(k), x), 0);
}

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

/* ---------------------------------------------------------------------------------------------
 * LWWMap
 */
static void test_lwwmap_put_get_remove(void **state)
{
    (void)state;
    shoal_buf_t b = {0}, r = {0};
    shoal_crdt_t *m = shoal_lwwmap_new();
    assert_ptr_equal(shoal_crdt_type(m), shoal_type_by_name("LWWMap"));
    assert_ptr_equal(shoal_ormap_value_type(m), shoal_type_by_name("LWWRegister"));
    assert_string_equal(lget(m, "k", &b), "(absent)");
    put(m, A, "k", "v1");
    put(m, A, "a", "1");
    assert_string_equal(lget(m, "k", &b), "v1");
    put(m, A, "k", "v2"); /* the default clock always moves forward */
    assert_string_equal(lget(m, "k", &b), "v2");
    assert_int_equal(shoal_ormap_size(m), 2);
    assert_string_equal(render(m, &r), "LWWMap{\"a\" -> \"1\", \"k\" -> \"v2\"}");
    /* empty values are values */
    assert_int_equal(shoal_lwwmap_put(m, A, "e", 1, NULL, 0, NULL, NULL), 0);
    assert_string_equal(lget(m, "e", &b), "");
    const shoal_crdt_t *reg = shoal_ormap_get(m, "k", 1);
    assert_non_null(reg);
    assert_ptr_equal(shoal_lwwreg_writer(reg), A);

    assert_int_equal(shoal_ormap_remove(m, A, "k", 1), 0);
    assert_string_equal(lget(m, "k", &b), "(absent)");
    assert_int_equal(shoal_ormap_remove(m, A, "k", 1), SHOAL_ENOTFOUND);
    assert_int_equal(shoal_ormap_size(m), 2);

    shoal_crdt_t *rt = prop_roundtrip(m);
    assert_true(shoal_crdt_equal(rt, m));
    assert_string_equal(lget(rt, "a", &b), "1");
    shoal_crdt_destroy(&rt);
    shoal_crdt_destroy(&m);
    shoal_buf_free(&b);
    shoal_buf_free(&r);
}

static void test_lwwmap_concurrent_puts(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_crdt_t *a = shoal_lwwmap_new(), *bb = shoal_lwwmap_new();

    /* the greater timestamp wins, whoever wrote it */
    put_at(a, A, "k", "from-a", 20);
    put_at(bb, B, "k", "from-b", 10);
    shoal_crdt_t *ab = merged(a, bb), *ba = merged(bb, a);
    assert_string_equal(lget(ab, "k", &b), "from-a");
    assert_string_equal(lget(ba, "k", &b), "from-a");
    assert_true(same_bytes(ab, ba));
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);

    put_at(bb, B, "k", "from-b", 30);
    ab = merged(a, bb);
    ba = merged(bb, a);
    assert_string_equal(lget(ab, "k", &b), "from-b");
    assert_true(same_bytes(ab, ba));
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);

    /* equal timestamps: the lower node id wins, both through states and through deltas */
    shoal_crdt_reset_delta(a);
    shoal_crdt_reset_delta(bb);
    put_at(a, A, "t", "from-a", 50);
    put_at(bb, B, "t", "from-b", 50);
    shoal_crdt_t *a2 = shoal_crdt_clone(a), *b2 = shoal_crdt_clone(bb);
    shoal_crdt_reset_delta(a2);
    shoal_crdt_reset_delta(b2);
    ship_delta(a, b2);
    ship_delta(bb, a2);
    assert_string_equal(lget(a2, "t", &b), "from-a");
    assert_string_equal(lget(b2, "t", &b), "from-a");
    ab = merged(a, bb);
    ba = merged(bb, a);
    assert_string_equal(lget(ab, "t", &b), "from-a");
    assert_true(same_bytes(ab, ba));
    /* with C, too: a later write from the highest id still wins on time */
    shoal_crdt_t *c = shoal_crdt_clone(ab);
    put_at(c, C, "t", "from-c", 51);
    assert_int_equal(shoal_crdt_merge(ab, c), 0);
    assert_string_equal(lget(ab, "t", &b), "from-c");
    /* an older local write loses against what the register holds */
    put_at(ab, A, "t", "stale", 40);
    assert_string_equal(lget(ab, "t", &b), "from-c");

    shoal_crdt_destroy(&c);
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);
    shoal_crdt_destroy(&a2);
    shoal_crdt_destroy(&b2);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&bb);
    shoal_buf_free(&b);
}

static void test_lwwmap_remove_concurrent_with_put(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_crdt_t *a = shoal_lwwmap_new();
    put_at(a, A, "k", "old", 1);
    shoal_crdt_reset_delta(a);
    shoal_crdt_t *bb = shoal_crdt_clone(a);
    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    put_at(bb, B, "k", "new", 2);
    shoal_crdt_t *a2 = shoal_crdt_clone(a), *b2 = shoal_crdt_clone(bb);
    shoal_crdt_reset_delta(a2);
    shoal_crdt_reset_delta(b2);
    /* the put wins, through states in both orders and through deltas (a whole register) */
    shoal_crdt_t *ab = merged(a, bb), *ba = merged(bb, a);
    assert_string_equal(lget(ab, "k", &b), "new");
    assert_true(same_bytes(ab, ba));
    ship_delta(a, b2);
    ship_delta(bb, a2);
    assert_string_equal(lget(a2, "k", &b), "new");
    assert_string_equal(lget(b2, "k", &b), "new");
    assert_true(same_bytes(a2, b2));
    assert_true(same_bytes(a2, ab));
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);
    shoal_crdt_destroy(&a2);
    shoal_crdt_destroy(&b2);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&bb);
    shoal_buf_free(&b);
}

static void test_lwwmap_big_map_small_delta(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_crdt_t *m = shoal_lwwmap_new();
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "key-%04d", i);
        put_at(m, prop_node(i % 4), key, "some value", i + 1);
    }
    shoal_crdt_reset_delta(m);
    shoal_crdt_t *replica = shoal_crdt_clone(m);
    assert_true(encoded_len(m) > 20000);
    put(m, C, "key-0999", "changed");
    assert_true(encoded_len(shoal_crdt_delta(m)) < 200);
    ship_delta(m, replica);
    assert_true(same_bytes(m, replica));
    assert_string_equal(lget(replica, "key-0999", &b), "changed");
    shoal_crdt_destroy(&replica);
    shoal_crdt_destroy(&m);
    shoal_buf_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * PNCounterMap
 */
static void test_pncountermap_several_nodes(void **state)
{
    (void)state;
    shoal_buf_t r = {0};
    shoal_crdt_t *n[3];
    for (int i = 0; i < 3; i++)
        n[i] = shoal_pncountermap_new();
    assert_ptr_equal(shoal_ormap_value_type(n[0]), shoal_type_by_name("PNCounter"));
    padd(n[0], A, "a", 5);
    padd(n[1], B, "a", -2);
    padd(n[1], B, "a", -1);
    padd(n[2], C, "b", 1);
    padd(n[2], C, "a", 1);
    assert_int_equal(pget(n[0], "a"), 5);
    assert_int_equal(pget(n[1], "a"), -3);
    assert_int_equal(pget(n[0], "b"), INT64_MIN);

    /* deltas everywhere */
    shoal_crdt_t *d[3];
    for (int i = 0; i < 3; i++)
        d[i] = shoal_crdt_take_delta(n[i]);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (i != j) {
                shoal_crdt_t *sent = prop_roundtrip(d[j]);
                assert_int_equal(shoal_crdt_merge_delta(n[i], sent), 0);
                shoal_crdt_destroy(&sent);
            }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pget(n[i], "a"), 3);
        assert_int_equal(pget(n[i], "b"), 1);
        assert_true(same_bytes(n[i], n[0]));
        shoal_crdt_destroy(&d[i]);
    }
    assert_string_equal(render(n[0], &r), "PNCounterMap{\"a\" -> 3, \"b\" -> 1}");

    /* full states agree */
    shoal_crdt_t *m = shoal_pncountermap_new();
    padd(m, A, "a", 5);
    shoal_crdt_t *m1 = shoal_pncountermap_new();
    padd(m1, B, "a", -3);
    padd(m1, C, "a", 1);
    padd(m1, C, "b", 1);
    assert_int_equal(shoal_crdt_merge(m, m1), 0);
    assert_int_equal(pget(m, "a"), 3);
    assert_int_equal(pget(m, "b"), 1);

    /* an add of zero still creates the key */
    padd(m, A, "zero", 0);
    assert_int_equal(pget(m, "zero"), 0);
    shoal_crdt_destroy(&m);
    shoal_crdt_destroy(&m1);
    for (int i = 0; i < 3; i++)
        shoal_crdt_destroy(&n[i]);
    shoal_buf_free(&r);
}

/* A removes k while B increments it: the increment wins, with B's value. */
static void test_pncountermap_remove_concurrent_with_add(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_pncountermap_new();
    padd(a, A, "k", 10);
    shoal_crdt_reset_delta(a);
    shoal_crdt_t *b = shoal_crdt_clone(a);
    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    padd(b, B, "k", 1);
    shoal_crdt_t *ab = merged(a, b), *ba = merged(b, a);
    assert_true(same_bytes(ab, ba));
    assert_int_equal(pget(ab, "k"), 11);
    /* a removal that has seen the increment removes the key for good */
    assert_int_equal(shoal_ormap_remove(ab, A, "k", 1), 0);
    shoal_crdt_t *abb = merged(ab, b);
    assert_int_equal(pget(abb, "k"), INT64_MIN);
    /* and re-adding starts from zero */
    padd(abb, C, "k", 2);
    assert_int_equal(pget(abb, "k"), 2);
    shoal_crdt_destroy(&abb);
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
}

static void test_pncountermap_big_map_small_delta(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_pncountermap_new();
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "counter-%04d", i);
        padd(m, prop_node(i % 6), key, i - 500);
    }
    shoal_crdt_reset_delta(m);
    shoal_crdt_t *replica = shoal_crdt_clone(m);
    assert_true(encoded_len(m) > 20000);
    padd(m, A, "counter-0007", -1);
    size_t dlen = encoded_len(shoal_crdt_delta(m));
    assert_true(dlen < 200);
    ship_delta(m, replica);
    assert_true(same_bytes(m, replica));
    assert_int_equal(pget(replica, "counter-0007"), 7 - 500 - 1);
    shoal_crdt_destroy(&replica);
    shoal_crdt_destroy(&m);
}

static void test_pncountermap_pruning(void **state)
{
    (void)state;
    shoal_crdt_t *m = shoal_pncountermap_new();
    padd(m, A, "x", 3);
    padd(m, B, "x", -5);
    padd(m, B, "y", 7);
    shoal_crdt_reset_delta(m);
    assert_true(shoal_crdt_needs_pruning_from(m, B));
    const shoal_node_t *nodes[4];
    assert_int_equal(shoal_crdt_modified_by(m, nodes, 4), 2);
    assert_int_equal(shoal_crdt_prune(m, B, C, NULL), 0);
    assert_false(shoal_crdt_needs_pruning_from(m, B));
    assert_int_equal(pget(m, "x"), -2);
    assert_int_equal(pget(m, "y"), 7);
    assert_int_equal(shoal_crdt_modified_by(m, nodes, 4), 2);
    assert_ptr_equal(nodes[0], A);
    assert_ptr_equal(nodes[1], C);
    assert_int_equal(shoal_crdt_prune_cleanup(m, B, NULL), 0);
    assert_int_equal(pget(m, "x"), -2);
    assert_int_equal(pget(m, "y"), 7);
    assert_null(shoal_crdt_delta(m));
    shoal_crdt_destroy(&m);
}

static void test_wrong_types(void **state)
{
    (void)state;
    shoal_crdt_t *l = shoal_lwwmap_new(), *p = shoal_pncountermap_new();
    shoal_crdt_t *reg = shoal_lwwreg_new();
    int64_t v;
    size_t len = 5;
    assert_int_equal(shoal_lwwmap_put(p, A, "k", 1, "v", 1, NULL, NULL), SHOAL_ETYPE);
    assert_int_equal(shoal_lwwmap_put(reg, A, "k", 1, "v", 1, NULL, NULL), SHOAL_ETYPE);
    assert_int_equal(shoal_lwwmap_put(NULL, A, "k", 1, "v", 1, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_lwwmap_put(l, NULL, "k", 1, "v", 1, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_lwwmap_put(l, A, NULL, 1, "v", 1, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_lwwmap_put(l, A, "k", 1, NULL, 1, NULL, NULL), SHOAL_EINVAL);
    assert_null(shoal_lwwmap_get(p, "k", 1, &len));
    assert_int_equal(len, 0);
    assert_null(shoal_lwwmap_get(NULL, "k", 1, NULL));
    assert_int_equal(shoal_pncountermap_add(l, A, "k", 1, 1), SHOAL_ETYPE);
    assert_int_equal(shoal_pncountermap_add(p, NULL, "k", 1, 1), SHOAL_EINVAL);
    assert_int_equal(shoal_pncountermap_get(l, "k", 1, &v), SHOAL_ETYPE);
    assert_int_equal(shoal_pncountermap_get(p, "k", 1, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_pncountermap_get(p, "k", 1, &v), SHOAL_ENOTFOUND);
    assert_int_equal(shoal_crdt_merge(l, p), SHOAL_ETYPE);
    /* a PNCounterMap's delta does not apply to an LWWMap */
    padd(p, A, "k", 1);
    assert_int_equal(shoal_crdt_merge_delta(l, shoal_crdt_delta(p)), SHOAL_ETYPE);
    assert_int_equal(shoal_ormap_size(l), 0);
    /* an overflowing add fails and changes nothing */
    padd(p, A, "big", INT64_MAX);
    padd(p, A, "big", INT64_MAX);
    shoal_crdt_t *before = shoal_crdt_clone(p);
    assert_int_equal(shoal_pncountermap_add(p, A, "big", 3, INT64_MAX), SHOAL_EOVERFLOW);
    assert_true(same_bytes(before, p));
    assert_int_equal(shoal_pncountermap_get(p, "big", 3, &v), SHOAL_EOVERFLOW);
    shoal_buf_t r = {0};
    assert_int_equal(shoal_crdt_render(p, &r), 0); /* renders what does not fit, too */
    assert_non_null(strstr(shoal_buf_cstr(&r), "18446744073709551614 - 0"));
    shoal_buf_free(&r);
    shoal_crdt_destroy(&before);
    shoal_crdt_destroy(&reg);
    shoal_crdt_destroy(&l);
    shoal_crdt_destroy(&p);
}

static void test_decode_rejects(void **state)
{
    (void)state;
    shoal_crdt_t *l = shoal_lwwmap_new(), *p = shoal_pncountermap_new();
    put(l, A, "k", "v");
    padd(p, A, "k", 1);
    size_t llen, plen;
    uint8_t *lp = payload_of(l, &llen), *pp = payload_of(p, &plen);
    shoal_crdt_t *out = NULL;
    assert_int_equal(decode_raw(SHOAL_LWWMAP, lp, llen, &out), 0);
    assert_true(same_bytes(out, l));
    shoal_crdt_destroy(&out);
    /* each map type insists on its value type */
    assert_int_equal(decode_raw(SHOAL_PNCOUNTERMAP, lp, llen, &out), SHOAL_EDECODE);
    assert_null(out);
    assert_int_equal(decode_raw(SHOAL_LWWMAP, pp, plen, &out), SHOAL_EDECODE);
    assert_int_equal(decode_raw(SHOAL_ORMULTIMAP, pp, plen, &out), SHOAL_EDECODE);
    /* the generic ORMap of the same value type is another type, and decodes as itself */
    assert_int_equal(decode_raw(SHOAL_ORMAP, pp, plen, &out), 0);
    assert_ptr_equal(shoal_crdt_type(out), shoal_type_by_name("ORMap"));
    assert_false(shoal_crdt_equal(out, p));
    shoal_crdt_destroy(&out);
    for (size_t cut = 0; cut < llen; cut++) {
        if (decode_raw(SHOAL_LWWMAP, lp, cut, &out) == 0)
            shoal_crdt_destroy(&out);
        assert_null(out);
    }

    /* a value of the wrong type inside an LWWMap */
    Shoal__Ddata__ORMap *lm = shoal__ddata__ormap__unpack(NULL, llen, lp);
    Shoal__Ddata__ORMap *pm = shoal__ddata__ormap__unpack(NULL, plen, pp);
    assert_non_null(lm);
    assert_non_null(pm);
    assert_int_equal(lm->n_values, 1);
    Shoal__Ddata__Value *saved = lm->values[0];
    lm->values[0] = pm->values[0];
    assert_int_equal(decode_msg(SHOAL_LWWMAP, &lm->base), SHOAL_EDECODE);
    lm->values[0] = saved;
    lm->value_type = SHOAL_PNCOUNTER;
    assert_int_equal(decode_msg(SHOAL_LWWMAP, &lm->base), SHOAL_EDECODE);
    lm->value_type = SHOAL_LWWREGISTER;
    lm->value_deltas = 1;
    assert_int_equal(decode_msg(SHOAL_LWWMAP, &lm->base), SHOAL_EDECODE);
    lm->value_deltas = 0;
    /* no keys but a value */
    Shoal__Ddata__ORSet *keys = lm->keys;
    lm->keys = NULL;
    assert_int_equal(decode_msg(SHOAL_LWWMAP, &lm->base), SHOAL_EDECODE);
    lm->n_values = 0;
    assert_int_equal(decode_msg(SHOAL_LWWMAP, &lm->base), 0); /* an empty map */
    lm->n_values = 1;
    lm->keys = keys;
    assert_int_equal(decode_msg(SHOAL_LWWMAP, &lm->base), 0);
    shoal__ddata__ormap__free_unpacked(lm, NULL);
    shoal__ddata__ormap__free_unpacked(pm, NULL);

    /* PNCounterMap deltas carry PNCounters; an LWWRegister entry is refused */
    padd(p, B, "j", 2);
    const shoal_crdt_t *d = shoal_crdt_delta(p);
    size_t dlen;
    uint8_t *dp = payload_of(d, &dlen);
    Shoal__Ddata__ORMapDelta *dm = shoal__ddata__ormap_delta__unpack(NULL, dlen, dp);
    assert_non_null(dm);
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), 0);
    Shoal__Ddata__Value regv = SHOAL__DDATA__VALUE__INIT;
    size_t rlen;
    const shoal_crdt_t *reg = shoal_ormap_get(l, "k", 1);
    uint8_t *rp = payload_of(reg, &rlen);
    regv.type = SHOAL_LWWREGISTER;
    regv.version = 1;
    regv.payload.data = rp;
    regv.payload.len = rlen;
    saved = dm->value_deltas[0];
    dm->value_deltas[0] = &regv;
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->value_deltas[0] = saved;
    dm->value_type = SHOAL_LWWMAP; /* a map type is no value type */
    assert_int_equal(decode_msg(SHOAL_ORMAP_DELTA, &dm->base), SHOAL_EDECODE);
    dm->value_type = SHOAL_PNCOUNTER;
    shoal__ddata__ormap_delta__free_unpacked(dm, NULL);
    for (size_t cut = 0; cut < dlen; cut++) {
        if (decode_raw(SHOAL_ORMAP_DELTA, dp, cut, &out) == 0)
            shoal_crdt_destroy(&out);
        assert_null(out);
    }
    free(rp);
    free(dp);
    free(lp);
    free(pp);
    shoal_crdt_destroy(&l);
    shoal_crdt_destroy(&p);
}

/* ---------------------------------------------------------------------------------------------
 * Properties
 */
static const char *const keys[] = {"a", "b", "c", "d"};

static void lww_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng)
{
    const char *k = keys[prop_below(rng, 4)];
    if (prop_chance(rng, 3, 4)) {
        /* a small clock, so that writers collide on timestamps and the node id decides */
        int64_t ts = 1 + (int64_t)prop_below(rng, 6);
        char v[2] = {(char)('0' + prop_below(rng, 10)), 0};
        assert_int_equal(shoal_lwwmap_put(m, self, k, 1, v, 1, fixed_clock, &ts), 0);
    } else {
        int rc = shoal_ormap_remove(m, self, k, 1);
        assert_true(rc == 0 || rc == SHOAL_ENOTFOUND);
    }
}

static void pn_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng)
{
    const char *k = keys[prop_below(rng, 4)];
    if (prop_chance(rng, 3, 4)) {
        assert_int_equal(
            shoal_pncountermap_add(m, self, k, 1, (int64_t)prop_below(rng, 7) - 3), 0);
    } else {
        int rc = shoal_ormap_remove(m, self, k, 1);
        assert_true(rc == 0 || rc == SHOAL_ENOTFOUND);
    }
}

static void test_properties_lwwmap(void **state)
{
    (void)state;
    static const prop_type_t t = {
        .name = "LWWMap",
        .create = shoal_lwwmap_new,
        .random_op = lww_op,
        .deltas_converge = false,
        .strict_assoc = false,
    };
    prop_check_all(&t, 2000);
}

static void test_properties_pncountermap(void **state)
{
    (void)state;
    static const prop_type_t t = {
        .name = "PNCounterMap",
        .create = shoal_pncountermap_new,
        .random_op = pn_op,
        .deltas_converge = false,
        .strict_assoc = false,
    };
    prop_check_all(&t, 2000);
}

int main(void)
{
    prop_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lwwmap_put_get_remove),
        cmocka_unit_test(test_lwwmap_concurrent_puts),
        cmocka_unit_test(test_lwwmap_remove_concurrent_with_put),
        cmocka_unit_test(test_lwwmap_big_map_small_delta),
        cmocka_unit_test(test_pncountermap_several_nodes),
        cmocka_unit_test(test_pncountermap_remove_concurrent_with_add),
        cmocka_unit_test(test_pncountermap_big_map_small_delta),
        cmocka_unit_test(test_pncountermap_pruning),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_properties_lwwmap),
        cmocka_unit_test(test_properties_pncountermap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
