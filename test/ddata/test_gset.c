/*  test_gset.c — GSet: union, binary-safe elements, deltas of new elements only, canonical
    order, hostile encodings, and the property harness. */
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

#define ADD(s, lit) assert_int_equal(shoal_gset_add((s), (lit), sizeof(lit) - 1), 0)
#define HAS(s, lit) shoal_gset_contains((s), (lit), sizeof(lit) - 1)

static shoal_crdt_t *merged(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *m = shoal_crdt_clone(a);
    assert_int_equal(shoal_crdt_merge(m, b), 0);
    shoal_crdt_reset_delta(m);
    return m;
}

static const char *render(const shoal_crdt_t *v, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    assert_int_equal(shoal_crdt_render(v, b), 0);
    return shoal_buf_cstr(b);
}

static int decode_raw(const uint8_t *payload, size_t plen, shoal_crdt_t **out)
{
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = SHOAL_GSET;
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

/* Decodes a GSet message whose elements are the given NUL-terminated strings. */
static int decode_elements(const char *const *elems, size_t n, shoal_crdt_t **out)
{
    Shoal__Ddata__GSet msg = SHOAL__DDATA__GSET__INIT;
    ProtobufCBinaryData bin[8];
    for (size_t i = 0; i < n; i++) {
        bin[i].data = (uint8_t *)elems[i];
        bin[i].len = strlen(elems[i]);
    }
    msg.n_elements = n;
    msg.elements = bin;
    size_t plen = shoal__ddata__gset__get_packed_size(&msg);
    uint8_t *payload = malloc(plen ? plen : 1);
    shoal__ddata__gset__pack(&msg, payload);
    int rc = decode_raw(payload, plen, out);
    free(payload);
    return rc;
}

static void test_union(void **state)
{
    (void)state;
    shoal_buf_t txt = {0};
    shoal_crdt_t *a = shoal_gset_new(), *b = shoal_gset_new();
    assert_int_equal(shoal_gset_size(a), 0);
    assert_string_equal(render(a, &txt), "GSet{}");
    ADD(a, "x");
    ADD(a, "y");
    ADD(b, "z");
    ADD(b, "y");
    shoal_crdt_t *ab = merged(a, b), *ba = merged(b, a);
    assert_int_equal(shoal_gset_size(ab), 3);
    assert_true(HAS(ab, "x") && HAS(ab, "y") && HAS(ab, "z"));
    assert_false(HAS(ab, "w"));
    assert_true(shoal_crdt_equal(ab, ba));
    assert_string_equal(render(ba, &txt), "GSet{\"x\", \"y\", \"z\"}");
    /* merging again changes nothing and records nothing */
    assert_int_equal(shoal_crdt_merge(ab, a), 0);
    assert_int_equal(shoal_gset_size(ab), 3);
    assert_null(shoal_crdt_delta(ab));
    assert_false(shoal_crdt_equal(a, b));
    shoal_buf_free(&txt);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
    shoal_crdt_destroy(&ab);
    shoal_crdt_destroy(&ba);
}

typedef struct {
    char seen[8][8];
    size_t len[8];
    size_t n;
    size_t stop_after;
} collect_t;

static int collect(const void *elem, size_t len, void *arg)
{
    collect_t *c = arg;
    assert_true(c->n < 8 && len < 8);
    memcpy(c->seen[c->n], elem, len);
    c->len[c->n++] = len;
    return c->n == c->stop_after ? 42 : 0;
}

static void test_binary_elements_in_canonical_order(void **state)
{
    (void)state;
    shoal_crdt_t *s = shoal_gset_new();
    ADD(s, "a\0b");
    ADD(s, "b");
    ADD(s, "a\0");
    ADD(s, "");
    ADD(s, "a");
    ADD(s, "\xff");
    /* each is its own element: NULs count, the empty string is one */
    assert_int_equal(shoal_gset_size(s), 6);
    assert_true(HAS(s, "") && HAS(s, "a") && HAS(s, "a\0") && HAS(s, "a\0b"));
    assert_false(HAS(s, "a\0c"));
    assert_false(HAS(s, "b\0"));
    assert_true(shoal_gset_contains(s, NULL, 0)); /* the empty element, however it is passed */

    collect_t c = {.stop_after = 0};
    assert_int_equal(shoal_gset_foreach(s, collect, &c), 0);
    assert_int_equal(c.n, 6);
    /* memcmp order, shorter first on a tie */
    assert_int_equal(c.len[0], 0);
    assert_int_equal(c.len[1], 1);
    assert_memory_equal(c.seen[1], "a", 1);
    assert_int_equal(c.len[2], 2);
    assert_memory_equal(c.seen[2], "a\0", 2);
    assert_int_equal(c.len[3], 3);
    assert_memory_equal(c.seen[3], "a\0b", 3);
    assert_memory_equal(c.seen[4], "b", 1);
    assert_memory_equal(c.seen[5], "\xff", 1);

    /* a nonzero return stops the walk and is returned */
    collect_t stop = {.stop_after = 2};
    assert_int_equal(shoal_gset_foreach(s, collect, &stop), 42);
    assert_int_equal(stop.n, 2);

    shoal_buf_t txt = {0};
    assert_string_equal(render(s, &txt),
                        "GSet{\"\", \"a\", \"a\\x00\", \"a\\x00b\", \"b\", \"\\xff\"}");
    shoal_crdt_t *back = prop_roundtrip(s);
    assert_true(shoal_crdt_equal(back, s));
    assert_true(HAS(back, "a\0b"));
    shoal_crdt_destroy(&back);
    shoal_buf_free(&txt);
    shoal_crdt_destroy(&s);
}

static void test_delta_contains_only_new_elements(void **state)
{
    (void)state;
    const shoal_type_t *t = shoal_type_by_name("GSet");
    assert_true(shoal_type_has_delta(t));
    assert_false(shoal_type_delta_causal(t));
    assert_false(shoal_type_has_pruning(t));

    shoal_crdt_t *s = shoal_gset_new(), *other = shoal_gset_new();
    ADD(other, "from-other");
    shoal_crdt_reset_delta(other);
    ADD(s, "old");
    shoal_crdt_reset_delta(s);
    assert_int_equal(shoal_crdt_merge(s, other), 0);
    assert_null(shoal_crdt_delta(s));

    ADD(s, "old"); /* already there: no change, no delta */
    ADD(s, "from-other");
    assert_null(shoal_crdt_delta(s));

    ADD(s, "new1");
    ADD(s, "new2");
    ADD(s, "new1");
    const shoal_crdt_t *d = shoal_crdt_delta(s);
    assert_non_null(d);
    assert_ptr_equal(shoal_crdt_type(d), t);
    assert_int_equal(shoal_gset_size(d), 2);
    assert_true(HAS(d, "new1") && HAS(d, "new2"));
    assert_false(HAS(d, "old"));

    shoal_crdt_t *taken = shoal_crdt_take_delta(s);
    assert_null(shoal_crdt_delta(s));
    assert_int_equal(shoal_crdt_merge_delta(other, taken), 0);
    assert_int_equal(shoal_crdt_merge_delta(other, taken), 0);
    assert_int_equal(shoal_gset_size(other), 3);
    assert_true(HAS(other, "new2"));
    assert_null(shoal_crdt_delta(other));
    shoal_crdt_destroy(&taken);

    /* the next delta starts afresh */
    ADD(s, "new3");
    assert_int_equal(shoal_gset_size(shoal_crdt_delta(s)), 1);
    /* a clone carries its pending delta; the value excludes it */
    shoal_crdt_t *c = shoal_crdt_clone(s);
    assert_non_null(shoal_crdt_delta(c));
    assert_true(shoal_crdt_equal(c, s));
    shoal_crdt_destroy(&c);
    shoal_crdt_destroy(&s);
    shoal_crdt_destroy(&other);
}

static void test_no_pruning(void **state)
{
    (void)state;
    shoal_crdt_t *s = shoal_gset_new();
    ADD(s, "a");
    const shoal_node_t *nodes[2];
    assert_int_equal(shoal_crdt_modified_by(s, nodes, 2), 0);
    assert_false(shoal_crdt_needs_pruning_from(s, prop_node(0)));
    assert_int_equal(shoal_crdt_prune(s, prop_node(0), prop_node(1), NULL), 0);
    assert_int_equal(shoal_crdt_prune_cleanup(s, prop_node(0), NULL), 0);
    assert_int_equal(shoal_gset_size(s), 1);
    shoal_crdt_destroy(&s);
}

static int never(const void *elem, size_t len, void *arg)
{
    (void)elem;
    (void)len;
    (void)arg;
    fail();
    return 0;
}

static void test_wrong_type_and_bad_args(void **state)
{
    (void)state;
    shoal_crdt_t *f = shoal_flag_new(), *s = shoal_gset_new();
    assert_int_equal(shoal_gset_add(f, "a", 1), SHOAL_ETYPE);
    assert_int_equal(shoal_gset_add(NULL, "a", 1), SHOAL_ETYPE);
    assert_false(shoal_gset_contains(f, "a", 1));
    assert_int_equal(shoal_gset_size(f), 0);
    assert_int_equal(shoal_gset_foreach(f, never, NULL), SHOAL_ETYPE);
    assert_int_equal(shoal_gset_foreach(s, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_gset_add(s, NULL, 3), SHOAL_EINVAL);
    assert_int_equal(shoal_gset_add(s, NULL, 0), 0); /* the empty element */
    assert_true(shoal_gset_contains(s, "", 0));
    assert_false(shoal_gset_contains(s, NULL, 3));
    assert_int_equal(shoal_crdt_merge(s, f), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(s, f), SHOAL_ETYPE);
    assert_int_equal(shoal_gset_size(s), 1);
    shoal_crdt_destroy(&f);
    shoal_crdt_destroy(&s);
}

static void test_decode_rejects_non_canonical(void **state)
{
    (void)state;
    shoal_crdt_t *out = NULL;
    const char *unsorted[] = {"b", "a"};
    assert_int_equal(decode_elements(unsorted, 2, &out), SHOAL_EDECODE);
    assert_null(out);
    const char *dup[] = {"a", "b", "b"};
    assert_int_equal(decode_elements(dup, 3, &out), SHOAL_EDECODE);
    const char *longer_first[] = {"ab", "a"};
    assert_int_equal(decode_elements(longer_first, 2, &out), SHOAL_EDECODE);
    const char *two_empty[] = {"", ""};
    assert_int_equal(decode_elements(two_empty, 2, &out), SHOAL_EDECODE);
    const char *good[] = {"", "a", "ab", "b"};
    assert_int_equal(decode_elements(good, 4, &out), 0);
    assert_int_equal(shoal_gset_size(out), 4);
    assert_true(HAS(out, "") && HAS(out, "ab"));
    assert_null(shoal_crdt_delta(out));
    shoal_crdt_destroy(&out);
    assert_int_equal(decode_elements(NULL, 0, &out), 0);
    assert_int_equal(shoal_gset_size(out), 0);
    shoal_crdt_destroy(&out);
}

static void test_decode_garbage_and_truncation(void **state)
{
    (void)state;
    shoal_crdt_t *s = shoal_gset_new();
    ADD(s, "alpha");
    ADD(s, "be\0ta");
    ADD(s, "");
    ADD(s, "gamma");
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(s, &b), 0);
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b.len, b.data);
    assert_non_null(env);
    size_t plen = env->payload.len;
    uint8_t *payload = malloc(plen);
    memcpy(payload, env->payload.data, plen);
    shoal__ddata__value__free_unpacked(env, NULL);

    for (size_t n = 0; n < b.len; n++) { /* the envelope cut short */
        shoal_crdt_t *out = NULL;
        int rc = shoal_crdt_decode(b.data, n, &out);
        assert_true(rc <= 0);
        shoal_crdt_destroy(&out);
    }
    for (size_t n = 0; n < plen; n++) { /* the payload cut short */
        shoal_crdt_t *out = NULL;
        int rc = decode_raw(payload, n, &out);
        assert_true(rc <= 0);
        if (rc == 0)
            assert_true(shoal_gset_size(out) < 4);
        shoal_crdt_destroy(&out);
    }
    prop_check_corruption(s, 3000);
    free(payload);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&s);
}

static void test_many_elements(void **state)
{
    (void)state;
    /* enough to make the hash map grow several times; order stays canonical */
    shoal_crdt_t *x = shoal_gset_new(), *y = shoal_gset_new();
    for (unsigned i = 0; i < 1000; i++) {
        unsigned j = 999 - i;
        assert_int_equal(shoal_gset_add(x, &i, sizeof i), 0);
        assert_int_equal(shoal_gset_add(y, &j, sizeof j), 0);
    }
    assert_int_equal(shoal_gset_size(x), 1000);
    assert_true(shoal_crdt_equal(x, y));
    uint8_t d1[16], d2[16];
    assert_int_equal(shoal_crdt_digest(x, d1), 0);
    assert_int_equal(shoal_crdt_digest(y, d2), 0);
    assert_memory_equal(d1, d2, 16);
    shoal_crdt_t *back = prop_roundtrip(x);
    assert_true(shoal_crdt_equal(back, y));
    shoal_crdt_destroy(&back);
    shoal_crdt_destroy(&x);
    shoal_crdt_destroy(&y);
}

/* ---------------------------------------------------------------------------------------------
 * Properties
 */
static void gs_random_op(shoal_crdt_t *v, const shoal_node_t *self, prop_rng_t *rng)
{
    (void)self;
    static const struct {
        const char *s;
        size_t len;
    } universe[] = {{"", 0}, {"a", 1}, {"b", 1}, {"a\0", 2}, {"a\0b", 3}, {"ab", 2}, {"\xff", 1}};
    size_t i = prop_below(rng, sizeof universe / sizeof universe[0]);
    assert_int_equal(shoal_gset_add(v, universe[i].s, universe[i].len), 0);
}

static const prop_type_t gs_prop = {
    .name = "GSet",
    .create = shoal_gset_new,
    .random_op = gs_random_op,
    .deltas_converge = true,
    .strict_assoc = true,
};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&gs_prop, 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_union),
        cmocka_unit_test(test_binary_elements_in_canonical_order),
        cmocka_unit_test(test_delta_contains_only_new_elements),
        cmocka_unit_test(test_no_pruning),
        cmocka_unit_test(test_wrong_type_and_bad_args),
        cmocka_unit_test(test_decode_rejects_non_canonical),
        cmocka_unit_test(test_decode_garbage_and_truncation),
        cmocka_unit_test(test_many_elements),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
