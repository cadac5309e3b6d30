/*  test_pncounter.c — PNCounter: what users rely on (going below zero, concurrent replicas,
    overflow, deltas, pruning), hostile encodings, and the property harness. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "ddata.pb-c.h"
#include "prop.h"

#include <stdlib.h>
#include <string.h>

#define A prop_node(0)
#define B prop_node(1)
#define C prop_node(2)

static int64_t value_of(const shoal_crdt_t *c)
{
    int64_t v = 0x5eed;
    assert_int_equal(shoal_pncounter_value(c, &v), 0);
    return v;
}

/* A merge of b into a copy of a; the copy has no pending delta. */
static shoal_crdt_t *merged(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *m = shoal_crdt_clone(a);
    assert_int_equal(shoal_crdt_merge(m, b), 0);
    shoal_crdt_reset_delta(m);
    return m;
}

/* Decodes raw payload bytes wrapped in a PNCounter envelope, as the fuzzer does. */
static int decode_raw(const uint8_t *payload, size_t plen, shoal_crdt_t **out)
{
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = SHOAL_PNCOUNTER;
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

/* Packs a PNCounter message and decodes it. */
static int decode_payload(const Shoal__Ddata__PNCounter *msg, shoal_crdt_t **out)
{
    size_t plen = shoal__ddata__pncounter__get_packed_size(msg);
    uint8_t *payload = malloc(plen ? plen : 1);
    shoal__ddata__pncounter__pack(msg, payload);
    int rc = decode_raw(payload, plen, out);
    free(payload);
    return rc;
}

/* The payload of an encoded value (what the type's own decoder sees). */
static uint8_t *payload_of(const shoal_crdt_t *v, size_t *len)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b.len, b.data);
    assert_non_null(env);
    uint8_t *p = malloc(env->payload.len ? env->payload.len : 1);
    memcpy(p, env->payload.data, env->payload.len);
    *len = env->payload.len;
    shoal__ddata__value__free_unpacked(env, NULL);
    shoal_buf_free(&b);
    return p;
}

static void test_decrements_below_zero(void **state)
{
    (void)state;
    shoal_crdt_t *c = shoal_pncounter_new();
    assert_int_equal(value_of(c), 0);
    assert_int_equal(shoal_pncounter_add(c, A, 5), 0);
    assert_int_equal(shoal_pncounter_add(c, A, -8), 0);
    assert_int_equal(value_of(c), -3);
    assert_int_equal(shoal_pncounter_increments(c), 5);
    assert_int_equal(shoal_pncounter_decrements(c), 8);
    assert_int_equal(shoal_pncounter_add(c, B, -1), 0);
    assert_int_equal(value_of(c), -4);
    shoal_buf_t txt = {0};
    assert_int_equal(shoal_crdt_render(c, &txt), 0);
    assert_non_null(strstr(shoal_buf_cstr(&txt), "PNCounter(-4)"));
    shoal_buf_free(&txt);
    shoal_crdt_destroy(&c);
}

static void test_add_zero_is_no_change(void **state)
{
    (void)state;
    shoal_crdt_t *c = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(c, A, 0), 0);
    assert_null(shoal_crdt_delta(c));
    assert_int_equal(shoal_crdt_modified_by(c, NULL, 0), 0);
    shoal_crdt_destroy(&c);
}

static void test_concurrent_three_nodes(void **state)
{
    (void)state;
    shoal_crdt_t *ra = shoal_pncounter_new(), *rb = shoal_pncounter_new(),
                 *rc = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(ra, A, 5), 0);
    assert_int_equal(shoal_pncounter_add(ra, A, -1), 0);
    assert_int_equal(shoal_pncounter_add(rb, B, -3), 0);
    assert_int_equal(shoal_pncounter_add(rc, C, 10), 0);
    assert_int_equal(shoal_pncounter_add(rc, C, -2), 0);
    /* every replica merges the others, in different orders */
    shoal_crdt_t *x = merged(ra, rb), *y = merged(rc, rb), *z = merged(rb, rc);
    assert_int_equal(shoal_crdt_merge(x, rc), 0);
    assert_int_equal(shoal_crdt_merge(y, ra), 0);
    assert_int_equal(shoal_crdt_merge(z, ra), 0);
    assert_int_equal(value_of(x), 9);
    assert_true(shoal_crdt_equal(x, y));
    assert_true(shoal_crdt_equal(y, z));
    /* merging again (duplicates, own old states) changes nothing */
    assert_int_equal(shoal_crdt_merge(x, ra), 0);
    assert_int_equal(shoal_crdt_merge(x, y), 0);
    assert_int_equal(value_of(x), 9);
    assert_int_equal(shoal_pncounter_increments(x), 15);
    assert_int_equal(shoal_pncounter_decrements(x), 6);
    /* merging others' state is not a local change */
    assert_null(shoal_crdt_delta(x));
    /* a later local change on top of merged state */
    assert_int_equal(shoal_pncounter_add(x, B, -9), 0);
    assert_int_equal(value_of(x), 0);
    assert_int_equal(shoal_crdt_merge(y, x), 0);
    assert_int_equal(value_of(y), 0);
    shoal_crdt_t *objs[] = {ra, rb, rc, x, y, z};
    for (size_t i = 0; i < 6; i++)
        shoal_crdt_destroy(&objs[i]);
}

static void test_overflow(void **state)
{
    (void)state;
    shoal_crdt_t *c = shoal_pncounter_new();
    int64_t v;
    /* one node's count is a uint64: two INT64_MAX fit, a third does not */
    assert_int_equal(shoal_pncounter_add(c, A, INT64_MAX), 0);
    assert_int_equal(value_of(c), INT64_MAX);
    assert_int_equal(shoal_pncounter_add(c, A, INT64_MAX), 0);
    assert_int_equal(shoal_pncounter_value(c, &v), SHOAL_EOVERFLOW);
    shoal_crdt_t *before = shoal_crdt_clone(c);
    assert_int_equal(shoal_pncounter_add(c, A, 2), SHOAL_EOVERFLOW);
    assert_true(shoal_crdt_equal(c, before)); /* a failed add changes nothing */
    assert_int_equal(shoal_pncounter_add(c, A, 1), 0);
    assert_int_equal(shoal_pncounter_increments(c), UINT64_MAX);
    /* the sum of the halves overflows: the value and the getters say so */
    assert_int_equal(shoal_pncounter_add(c, B, 1), 0);
    assert_int_equal(shoal_pncounter_increments(c), UINT64_MAX); /* saturated */
    assert_int_equal(shoal_pncounter_value(c, &v), SHOAL_EOVERFLOW);
    shoal_buf_t txt = {0};
    assert_int_equal(shoal_crdt_render(c, &txt), 0);
    assert_non_null(strstr(shoal_buf_cstr(&txt), "overflow"));
    shoal_buf_free(&txt);
    /* one half above INT64_MAX, balanced by the other: the value fits again */
    shoal_crdt_t *d = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(d, A, INT64_MAX), 0);
    assert_int_equal(shoal_pncounter_add(d, A, 6), 0);
    assert_int_equal(shoal_pncounter_value(d, &v), SHOAL_EOVERFLOW);
    assert_int_equal(shoal_pncounter_add(d, B, -10), 0);
    assert_true(value_of(d) == INT64_MAX - 4);
    shoal_crdt_destroy(&d);
    shoal_crdt_destroy(&before);
    shoal_crdt_destroy(&c);
}

static void test_int64_min(void **state)
{
    (void)state;
    shoal_crdt_t *c = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(c, A, INT64_MIN), 0);
    assert_int_equal(shoal_pncounter_decrements(c), (uint64_t)1 << 63);
    assert_true(value_of(c) == INT64_MIN);
    int64_t v;
    assert_int_equal(shoal_pncounter_add(c, B, -1), 0);
    assert_int_equal(shoal_pncounter_value(c, &v), SHOAL_EOVERFLOW);
    assert_int_equal(shoal_pncounter_add(c, B, 1), 0);
    assert_true(value_of(c) == INT64_MIN);
    shoal_crdt_destroy(&c);
}

static void test_delta_holds_only_changes(void **state)
{
    (void)state;
    const shoal_type_t *t = shoal_type_by_name("PNCounter");
    assert_true(shoal_type_has_delta(t));
    assert_false(shoal_type_delta_causal(t));
    assert_true(shoal_type_has_pruning(t));

    shoal_crdt_t *x = shoal_pncounter_new(), *y = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(y, B, 100), 0);
    shoal_crdt_reset_delta(y);
    assert_int_equal(shoal_crdt_merge(x, y), 0);
    assert_null(shoal_crdt_delta(x)); /* merge records nothing */

    assert_int_equal(shoal_pncounter_add(x, A, 4), 0);
    assert_int_equal(shoal_pncounter_add(x, A, -1), 0);
    const shoal_crdt_t *d = shoal_crdt_delta(x);
    assert_non_null(d);
    assert_ptr_equal(shoal_crdt_type(d), t);
    /* the delta holds A's counts only, not B's merged-in state */
    assert_int_equal(shoal_pncounter_increments(d), 4);
    assert_int_equal(shoal_pncounter_decrements(d), 1);
    const shoal_node_t *nodes[4];
    assert_int_equal(shoal_crdt_modified_by(d, nodes, 4), 1);
    assert_ptr_equal(nodes[0], A);

    shoal_crdt_t *taken = shoal_crdt_take_delta(x);
    assert_non_null(taken);
    assert_null(shoal_crdt_delta(x));
    assert_null(shoal_crdt_take_delta(x));

    /* y applies the delta (twice: deltas are idempotent) */
    assert_int_equal(shoal_crdt_merge_delta(y, taken), 0);
    assert_int_equal(shoal_crdt_merge_delta(y, taken), 0);
    assert_int_equal(value_of(y), 103);
    assert_true(shoal_crdt_equal(x, y));
    assert_null(shoal_crdt_delta(y));

    /* the next delta carries the new absolute count, so an older one re-applied is harmless */
    assert_int_equal(shoal_pncounter_add(x, A, 2), 0);
    shoal_crdt_t *d2 = shoal_crdt_take_delta(x);
    assert_int_equal(shoal_pncounter_increments(d2), 6);
    assert_int_equal(shoal_pncounter_decrements(d2), 0);
    assert_int_equal(shoal_crdt_merge_delta(y, d2), 0);
    assert_int_equal(shoal_crdt_merge_delta(y, taken), 0);
    assert_int_equal(value_of(y), 105);

    /* a GCounter is not a PNCounter delta */
    shoal_crdt_t *g = shoal_gcounter_new();
    assert_int_equal(shoal_crdt_merge_delta(y, g), SHOAL_ETYPE);
    shoal_crdt_destroy(&g);
    shoal_crdt_destroy(&d2);
    shoal_crdt_destroy(&taken);
    shoal_crdt_destroy(&x);
    shoal_crdt_destroy(&y);
}

static void test_modified_by_is_sorted_union(void **state)
{
    (void)state;
    shoal_crdt_t *c = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(c, C, 1), 0);
    assert_int_equal(shoal_pncounter_add(c, A, -1), 0);
    assert_int_equal(shoal_pncounter_add(c, B, 1), 0);
    assert_int_equal(shoal_pncounter_add(c, B, -1), 0);
    assert_int_equal(shoal_pncounter_add(c, C, -5), 0);
    const shoal_node_t *nodes[8] = {0};
    assert_int_equal(shoal_crdt_modified_by(c, nodes, 8), 3);
    assert_ptr_equal(nodes[0], A);
    assert_ptr_equal(nodes[1], B);
    assert_ptr_equal(nodes[2], C);
    /* a short array gets the first ones, the count is still the total */
    const shoal_node_t *two[2] = {0};
    assert_int_equal(shoal_crdt_modified_by(c, two, 2), 3);
    assert_ptr_equal(two[0], A);
    assert_ptr_equal(two[1], B);
    assert_true(shoal_crdt_needs_pruning_from(c, A)); /* decrements only */
    assert_true(shoal_crdt_needs_pruning_from(c, C));
    assert_false(shoal_crdt_needs_pruning_from(c, prop_node(5)));
    shoal_crdt_destroy(&c);
}

static void test_pruning_keeps_value_and_cleanup_prevents_double_count(void **state)
{
    (void)state;
    /* A (to be removed) and B contributed; replicas X and Y both saw everything */
    shoal_crdt_t *x = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(x, A, 7), 0);
    assert_int_equal(shoal_pncounter_add(x, A, -2), 0);
    assert_int_equal(shoal_pncounter_add(x, B, 3), 0);
    assert_int_equal(shoal_pncounter_add(x, B, -1), 0);
    shoal_crdt_reset_delta(x);
    shoal_crdt_t *y_old = shoal_crdt_clone(x);
    assert_int_equal(value_of(x), 7);

    /* X folds A into B: same value, A gone */
    assert_int_equal(shoal_crdt_prune(x, A, B, NULL), 0);
    assert_int_equal(value_of(x), 7);
    assert_int_equal(shoal_pncounter_increments(x), 10);
    assert_int_equal(shoal_pncounter_decrements(x), 3);
    assert_false(shoal_crdt_needs_pruning_from(x, A));
    const shoal_node_t *nodes[4];
    assert_int_equal(shoal_crdt_modified_by(x, nodes, 4), 1);
    assert_ptr_equal(nodes[0], B);
    assert_null(shoal_crdt_delta(x)); /* pruning is coordinated, not a delta */

    /* without cleanup, Y's old state would bring A's counts back a second time... */
    shoal_crdt_t *wrong = merged(x, y_old);
    assert_int_equal(value_of(wrong), 12);
    shoal_crdt_destroy(&wrong);

    /* ...so the replicator cleans up first: then the old state merges in harmlessly */
    shoal_crdt_t *y = shoal_crdt_clone(y_old);
    assert_int_equal(shoal_crdt_prune_cleanup(y, A, NULL), 0);
    assert_false(shoal_crdt_needs_pruning_from(y, A));
    assert_int_equal(shoal_crdt_merge(x, y), 0);
    assert_int_equal(value_of(x), 7);
    /* and after Y itself prunes, the replicas are equal */
    assert_int_equal(shoal_crdt_prune(y_old, A, B, NULL), 0);
    assert_true(shoal_crdt_equal(x, y_old));

    /* pruning a node that contributed nothing changes nothing */
    shoal_crdt_t *before = shoal_crdt_clone(x);
    assert_int_equal(shoal_crdt_prune(x, C, B, NULL), 0);
    assert_int_equal(shoal_crdt_prune_cleanup(x, C, NULL), 0);
    assert_true(shoal_crdt_equal(x, before));
    assert_int_equal(shoal_crdt_prune(x, B, B, NULL), SHOAL_EINVAL);

    shoal_crdt_destroy(&before);
    shoal_crdt_destroy(&y);
    shoal_crdt_destroy(&y_old);
    shoal_crdt_destroy(&x);
}

static void test_prune_overflow_leaves_value(void **state)
{
    (void)state;
    shoal_crdt_t *c = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(c, A, -5), 0);
    assert_int_equal(shoal_pncounter_add(c, B, INT64_MAX), 0);
    assert_int_equal(shoal_pncounter_add(c, B, INT64_MAX), 0);
    assert_int_equal(shoal_pncounter_add(c, A, 2), 0);
    shoal_crdt_t *before = shoal_crdt_clone(c);
    /* decrements fold fine, increments do not: nothing at all may change */
    assert_int_equal(shoal_crdt_prune(c, A, B, NULL), SHOAL_EOVERFLOW);
    assert_true(shoal_crdt_equal(c, before));
    shoal_crdt_destroy(&before);
    shoal_crdt_destroy(&c);
}

static void test_wrong_type_and_bad_args(void **state)
{
    (void)state;
    shoal_crdt_t *g = shoal_gcounter_new(), *c = shoal_pncounter_new();
    int64_t v;
    assert_int_equal(shoal_pncounter_add(g, A, 1), SHOAL_ETYPE);
    assert_int_equal(shoal_pncounter_add(NULL, A, 1), SHOAL_ETYPE);
    assert_int_equal(shoal_pncounter_value(g, &v), SHOAL_ETYPE);
    assert_int_equal(shoal_pncounter_increments(g), 0);
    assert_int_equal(shoal_pncounter_decrements(NULL), 0);
    assert_int_equal(shoal_pncounter_add(c, NULL, 1), SHOAL_EINVAL);
    assert_int_equal(shoal_pncounter_value(c, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_crdt_merge(c, g), SHOAL_ETYPE);
    assert_int_equal(shoal_gcounter_increment(c, A, 1), SHOAL_ETYPE);
    assert_ptr_equal(shoal_crdt_type(shoal_crdt_new(NULL)), NULL);
    shoal_crdt_t *n = shoal_crdt_new(shoal_type_by_tag(SHOAL_PNCOUNTER));
    assert_non_null(n);
    assert_int_equal(value_of(n), 0);
    shoal_crdt_destroy(&n);
    shoal_crdt_destroy(&g);
    shoal_crdt_destroy(&c);
}

static void test_canonical_encoding(void **state)
{
    (void)state;
    /* the same value built in different orders encodes to the same bytes */
    shoal_crdt_t *x = shoal_pncounter_new(), *y = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(x, C, 3), 0);
    assert_int_equal(shoal_pncounter_add(x, A, -2), 0);
    assert_int_equal(shoal_pncounter_add(x, B, 1), 0);
    assert_int_equal(shoal_pncounter_add(y, B, 1), 0);
    assert_int_equal(shoal_pncounter_add(y, A, -2), 0);
    assert_int_equal(shoal_pncounter_add(y, C, 3), 0);
    shoal_buf_t bx = {0}, by = {0};
    assert_int_equal(shoal_crdt_encode(x, &bx), 0);
    assert_int_equal(shoal_crdt_encode(y, &by), 0);
    assert_int_equal(bx.len, by.len);
    assert_memory_equal(bx.data, by.data, bx.len);
    shoal_crdt_t *back = prop_roundtrip(x);
    assert_int_equal(value_of(back), 2);
    assert_true(shoal_crdt_equal(back, y));
    shoal_crdt_destroy(&back);
    /* the empty counter round-trips too */
    shoal_crdt_t *e = shoal_pncounter_new(), *e2 = prop_roundtrip(e);
    assert_true(shoal_crdt_equal(e, e2));
    shoal_crdt_destroy(&e);
    shoal_crdt_destroy(&e2);
    shoal_buf_free(&bx);
    shoal_buf_free(&by);
    shoal_crdt_destroy(&x);
    shoal_crdt_destroy(&y);
}

static void test_decode_rejects_bad_payloads(void **state)
{
    (void)state;
    char *nodes[2] = {(char *)shoal_node_id(B), (char *)shoal_node_id(A)}; /* descending */
    uint64_t values[2] = {1, 2};
    Shoal__Ddata__GCounter half = SHOAL__DDATA__GCOUNTER__INIT;
    Shoal__Ddata__PNCounter msg = SHOAL__DDATA__PNCOUNTER__INIT;
    shoal_crdt_t *out = NULL;

    msg.decrements = &half;
    half.n_nodes = half.n_values = 2;
    half.nodes = nodes;
    half.values = values;
    assert_int_equal(decode_payload(&msg, &out), SHOAL_EDECODE); /* unsorted */
    assert_null(out);

    nodes[0] = (char *)shoal_node_id(A);
    assert_int_equal(decode_payload(&msg, &out), SHOAL_EDECODE); /* duplicate */

    nodes[1] = (char *)shoal_node_id(B);
    values[1] = 0;
    assert_int_equal(decode_payload(&msg, &out), SHOAL_EDECODE); /* zero count */

    values[1] = 2;
    half.n_values = 1;
    assert_int_equal(decode_payload(&msg, &out), SHOAL_EDECODE); /* lengths differ */

    half.n_values = 2;
    nodes[1] = "not a node";
    msg.increments = &half;
    msg.decrements = NULL;
    assert_int_equal(decode_payload(&msg, &out), SHOAL_ENODE);

    /* well-formed: both halves */
    nodes[1] = (char *)shoal_node_id(B);
    msg.decrements = &half;
    assert_int_equal(decode_payload(&msg, &out), 0);
    assert_int_equal(value_of(out), 0);
    assert_int_equal(shoal_pncounter_increments(out), 3);
    shoal_crdt_destroy(&out);

    /* an empty half present is the same as an absent one */
    Shoal__Ddata__GCounter empty = SHOAL__DDATA__GCOUNTER__INIT;
    msg.increments = &empty;
    assert_int_equal(decode_payload(&msg, &out), 0);
    assert_int_equal(value_of(out), -3);
    shoal_crdt_t *back = prop_roundtrip(out);
    assert_true(shoal_crdt_equal(back, out));
    shoal_crdt_destroy(&back);
    shoal_crdt_destroy(&out);
}

static void test_decode_garbage_and_truncation(void **state)
{
    (void)state;
    shoal_crdt_t *c = shoal_pncounter_new();
    assert_int_equal(shoal_pncounter_add(c, A, 12345), 0);
    assert_int_equal(shoal_pncounter_add(c, B, -678), 0);
    assert_int_equal(shoal_pncounter_add(c, C, 9), 0);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(c, &b), 0);
    /* every strict prefix: an error (most), or a smaller valid value (the envelope cut before
       its payload holds the empty counter) — never a crash */
    int errors = 0;
    for (size_t n = 0; n < b.len; n++) {
        shoal_crdt_t *out = NULL;
        int rc = shoal_crdt_decode(b.data, n, &out);
        if (n == 0)
            assert_int_equal(rc, SHOAL_EVERSION); /* the empty envelope has type 0: unknown */
        assert_true(rc <= 0);
        if (rc < 0) {
            assert_null(out);
            errors++;
        } else {
            assert_int_equal(value_of(out), 0);
        }
        shoal_crdt_destroy(&out);
    }
    assert_true(errors >= (int)b.len - 1);
    /* the payload cut anywhere, random payloads, and random corruptions of the valid payload:
       errors or values, never a crash (ASan and UBSan watch) */
    size_t plen;
    uint8_t *payload = payload_of(c, &plen);
    for (size_t n = 0; n < plen; n++) {
        shoal_crdt_t *out = NULL;
        int rc = decode_raw(payload, n, &out);
        assert_true(rc <= 0);
        shoal_crdt_destroy(&out);
    }
    prop_check_corruption(c, 3000);
    free(payload);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&c);
}

/* ---------------------------------------------------------------------------------------------
 * Properties
 */
static void pn_random_op(shoal_crdt_t *v, const shoal_node_t *self, prop_rng_t *rng)
{
    int64_t n = (int64_t)prop_below(rng, 11) - 5; /* -5..5, zero included */
    assert_int_equal(shoal_pncounter_add(v, self, n), 0);
}

static const prop_type_t pn_prop = {
    .name = "PNCounter",
    .create = shoal_pncounter_new,
    .random_op = pn_random_op,
    .deltas_converge = true,
    .strict_assoc = true,
};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&pn_prop, 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decrements_below_zero),
        cmocka_unit_test(test_add_zero_is_no_change),
        cmocka_unit_test(test_concurrent_three_nodes),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_int64_min),
        cmocka_unit_test(test_delta_holds_only_changes),
        cmocka_unit_test(test_modified_by_is_sorted_union),
        cmocka_unit_test(test_pruning_keeps_value_and_cleanup_prevents_double_count),
        cmocka_unit_test(test_prune_overflow_leaves_value),
        cmocka_unit_test(test_wrong_type_and_bad_args),
        cmocka_unit_test(test_canonical_encoding),
        cmocka_unit_test(test_decode_rejects_bad_payloads),
        cmocka_unit_test(test_decode_garbage_and_truncation),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
