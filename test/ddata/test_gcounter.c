/*  test_gcounter.c — GCounter and VersionVector: semantics, pruning, encoding, properties. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "prop.h"

#include <string.h>

static void test_gcounter_increments_sum_across_nodes(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_gcounter_new(), *b = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(a, prop_node(0), 3), 0);
    assert_int_equal(shoal_gcounter_increment(a, prop_node(0), 2), 0);
    assert_int_equal(shoal_gcounter_increment(b, prop_node(1), 7), 0);
    assert_int_equal(shoal_gcounter_value(a), 5);
    assert_int_equal(shoal_crdt_merge(a, b), 0);
    assert_int_equal(shoal_gcounter_value(a), 12);
    /* merging again, or merging an older state, changes nothing */
    assert_int_equal(shoal_crdt_merge(a, b), 0);
    assert_int_equal(shoal_gcounter_value(a), 12);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
    assert_null(a);
}

static void test_gcounter_delta_holds_only_changed_node(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_gcounter_new(), *b = shoal_gcounter_new();
    shoal_gcounter_increment(a, prop_node(1), 100);
    shoal_crdt_reset_delta(a);
    assert_null(shoal_crdt_delta(a));
    shoal_gcounter_increment(a, prop_node(0), 1);
    shoal_gcounter_increment(a, prop_node(0), 1);
    const shoal_crdt_t *d = shoal_crdt_delta(a);
    assert_non_null(d);
    /* the delta is node 0's running total, not node 1's: it carries only what changed */
    assert_int_equal(shoal_gcounter_value(d), 2);
    assert_int_equal(shoal_crdt_merge_delta(b, d), 0);
    assert_int_equal(shoal_gcounter_value(b), 2);
    /* merging a delta never creates a pending delta at the receiver */
    assert_null(shoal_crdt_delta(b));
    shoal_crdt_t *taken = shoal_crdt_take_delta(a);
    assert_non_null(taken);
    assert_null(shoal_crdt_delta(a));
    shoal_crdt_destroy(&taken);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
}

static void test_gcounter_overflow_is_an_error(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(a, prop_node(0), UINT64_MAX), 0);
    assert_int_equal(shoal_gcounter_increment(a, prop_node(0), 1), SHOAL_EOVERFLOW);
    assert_int_equal(shoal_gcounter_value(a), UINT64_MAX);
    shoal_crdt_destroy(&a);
}

static void test_gcounter_pruning_keeps_value_and_cleanup_prevents_resurrection(void **state)
{
    (void)state;
    const shoal_node_t *gone = prop_node(2), *into = prop_node(0);
    shoal_crdt_t *x = shoal_gcounter_new();
    shoal_gcounter_increment(x, prop_node(0), 5);
    shoal_gcounter_increment(x, gone, 7);
    shoal_crdt_t *old = shoal_crdt_clone(x); /* a replica that has not pruned yet */
    assert_true(shoal_crdt_needs_pruning_from(x, gone));
    const shoal_node_t *nodes[4];
    assert_int_equal(shoal_crdt_modified_by(x, nodes, 4), 2);
    assert_int_equal(shoal_crdt_prune(x, gone, into, NULL), 0);
    assert_false(shoal_crdt_needs_pruning_from(x, gone));
    assert_int_equal(shoal_gcounter_value(x), 12);
    /* merged back without cleanup, the removed node's 7 would count twice */
    shoal_crdt_t *naive = shoal_crdt_clone(x);
    shoal_crdt_merge(naive, old);
    assert_int_equal(shoal_gcounter_value(naive), 19);
    /* the replicator cleans old state first: the value stays */
    assert_int_equal(shoal_crdt_prune_cleanup(old, gone, NULL), 0);
    assert_int_equal(shoal_crdt_merge(x, old), 0);
    assert_int_equal(shoal_gcounter_value(x), 12);
    shoal_crdt_destroy(&naive);
    shoal_crdt_destroy(&old);
    shoal_crdt_destroy(&x);
}

static void test_wrong_type_and_bad_input(void **state)
{
    (void)state;
    shoal_crdt_t *vv = shoal_vv_new(), *gc = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(vv, prop_node(0), 1), SHOAL_ETYPE);
    assert_int_equal(shoal_vv_increment(gc, prop_node(0)), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge(vv, gc), SHOAL_ETYPE);
    assert_int_equal(shoal_gcounter_increment(gc, NULL, 1), SHOAL_EINVAL);
    shoal_crdt_t *out = (shoal_crdt_t *)1;
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0x01, 0x02};
    assert_true(shoal_crdt_decode(garbage, sizeof garbage, &out) < 0);
    assert_null(out);
    /* an envelope with an unknown type tag: a clear error */
    static const uint8_t unknown[] = {0x08, 0x63, 0x10, 0x01};
    assert_int_equal(shoal_crdt_decode(unknown, sizeof unknown, &out), SHOAL_EVERSION);
    /* a newer format version is refused */
    static const uint8_t newer[] = {0x08, 0x02, 0x10, 0x09};
    assert_int_equal(shoal_crdt_decode(newer, sizeof newer, &out), SHOAL_EVERSION);
    /* truncated encodings of a real value are errors, never crashes */
    shoal_gcounter_increment(gc, prop_node(0), 300);
    shoal_gcounter_increment(gc, prop_node(1), 2);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(gc, &b), 0);
    for (size_t n = 0; n < b.len; n++) {
        shoal_crdt_t *v = NULL;
        if (shoal_crdt_decode(b.data, n, &v) == 0) {
            assert_non_null(v); /* a prefix may be a smaller valid value */
            shoal_crdt_destroy(&v);
        }
    }
    shoal_buf_free(&b);
    shoal_crdt_destroy(&vv);
    shoal_crdt_destroy(&gc);
}

static void test_node_ids(void **state)
{
    (void)state;
    const shoal_node_t *a = shoal_node_intern("10.0.0.1:2552:123");
    assert_non_null(a);
    assert_ptr_equal(a, shoal_node_intern("10.0.0.1:2552:123"));
    assert_string_equal(shoal_node_host(a), "10.0.0.1");
    assert_int_equal(shoal_node_port(a), 2552);
    assert_int_equal(shoal_node_uid(a), 123);
    assert_non_null(shoal_node_intern("[::1]:7000:18446744073709551615"));
    assert_string_equal(shoal_node_host(shoal_node_intern("[::1]:7000:5")), "[::1]");
    const char *bad[] = {"", "host", "host:1", "host:0:1", "host:65536:1", "host:01:1",
                         ":1:1", "host:1:", "host:1:01", "host:1:18446744073709551616",
                         "ho st:1:1", "[::1:7000:5", "host:x:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(shoal_node_intern(bad[i]));
    assert_true(shoal_node_cmp(shoal_node_intern("a:1:1"), shoal_node_intern("b:1:1")) < 0);
}

static void test_version_vector_compare(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_vv_new(), *b = shoal_vv_new();
    assert_int_equal(shoal_vv_compare(a, b), SHOAL_VV_SAME);
    shoal_vv_increment(a, prop_node(0));
    assert_int_equal(shoal_vv_compare(a, b), SHOAL_VV_AFTER);
    assert_int_equal(shoal_vv_compare(b, a), SHOAL_VV_BEFORE);
    shoal_vv_increment(b, prop_node(1));
    assert_int_equal(shoal_vv_compare(a, b), SHOAL_VV_CONCURRENT);
    shoal_crdt_t *m = shoal_crdt_clone(a);
    shoal_crdt_merge(m, b);
    assert_int_equal(shoal_vv_compare(a, m), SHOAL_VV_BEFORE);
    assert_int_equal(shoal_vv_compare(m, b), SHOAL_VV_AFTER);
    assert_int_equal(shoal_vv_get(m, prop_node(1)), 1);
    shoal_vv_witness(m, prop_node(1), 9);
    shoal_vv_witness(m, prop_node(1), 4);
    assert_int_equal(shoal_vv_get(m, prop_node(1)), 9);
    /* pruning drops the removed node and moves the survivor forward, so m stays after b */
    assert_int_equal(shoal_crdt_prune(m, prop_node(1), prop_node(0), NULL), 0);
    assert_int_equal(shoal_vv_get(m, prop_node(1)), 0);
    assert_int_equal(shoal_vv_get(m, prop_node(0)), 2);
    assert_int_equal(shoal_vv_size(m), 1);
    shoal_buf_t r = {0};
    shoal_crdt_render(m, &r);
    assert_string_equal(shoal_buf_cstr(&r), "VersionVector{127.0.0.1:2551:1=2}");
    shoal_buf_free(&r);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
    shoal_crdt_destroy(&m);
}

static void gcounter_op(shoal_crdt_t *v, const shoal_node_t *self, prop_rng_t *rng)
{
    assert_int_equal(shoal_gcounter_increment(v, self, 1 + prop_below(rng, 1000)), 0);
}

static void vv_op(shoal_crdt_t *v, const shoal_node_t *self, prop_rng_t *rng)
{
    if (prop_chance(rng, 1, 2))
        assert_int_equal(shoal_vv_increment(v, self), 0);
    else
        assert_int_equal(shoal_vv_witness(v, prop_node((int)prop_below(rng, 5)),
                                          prop_below(rng, 20)), 0);
}

static void test_gcounter_properties(void **state)
{
    (void)state;
    prop_type_t t = {"GCounter", shoal_gcounter_new, gcounter_op, true, true};
    prop_check_all(&t, 2000);
}

static void test_version_vector_properties(void **state)
{
    (void)state;
    prop_type_t t = {"VersionVector", shoal_vv_new, vv_op, false, true};
    prop_check_all(&t, 2000);
}

int main(void)
{
    prop_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gcounter_increments_sum_across_nodes),
        cmocka_unit_test(test_gcounter_delta_holds_only_changed_node),
        cmocka_unit_test(test_gcounter_overflow_is_an_error),
        cmocka_unit_test(test_gcounter_pruning_keeps_value_and_cleanup_prevents_resurrection),
        cmocka_unit_test(test_wrong_type_and_bad_input),
        cmocka_unit_test(test_node_ids),
        cmocka_unit_test(test_version_vector_compare),
        cmocka_unit_test(test_gcounter_properties),
        cmocka_unit_test(test_version_vector_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
