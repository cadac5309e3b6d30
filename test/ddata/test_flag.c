/*  test_flag.c — Flag: false, then true for ever; merge is OR; no delta, no pruning. */
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

static int decode_raw(const uint8_t *payload, size_t plen, shoal_crdt_t **out)
{
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = SHOAL_FLAG;
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

static const char *render(const shoal_crdt_t *v, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    assert_int_equal(shoal_crdt_render(v, b), 0);
    return shoal_buf_cstr(b);
}

static void test_switch_on_for_ever(void **state)
{
    (void)state;
    shoal_buf_t txt = {0};
    shoal_crdt_t *f = shoal_flag_new();
    assert_false(shoal_flag_enabled(f));
    assert_string_equal(render(f, &txt), "Flag(false)");
    assert_int_equal(shoal_flag_switch_on(f), 0);
    assert_true(shoal_flag_enabled(f));
    assert_int_equal(shoal_flag_switch_on(f), 0); /* again: still on */
    assert_true(shoal_flag_enabled(f));
    assert_string_equal(render(f, &txt), "Flag(true)");
    /* a replica that never saw it switched on cannot switch it off */
    shoal_crdt_t *off = shoal_flag_new();
    assert_int_equal(shoal_crdt_merge(f, off), 0);
    assert_true(shoal_flag_enabled(f));
    shoal_buf_free(&txt);
    shoal_crdt_destroy(&f);
    shoal_crdt_destroy(&off);
}

static void test_merge_is_or(void **state)
{
    (void)state;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            shoal_crdt_t *x = shoal_flag_new(), *y = shoal_flag_new();
            if (a)
                assert_int_equal(shoal_flag_switch_on(x), 0);
            if (b)
                assert_int_equal(shoal_flag_switch_on(y), 0);
            shoal_crdt_t *xy = shoal_crdt_clone(x), *yx = shoal_crdt_clone(y);
            assert_int_equal(shoal_crdt_merge(xy, y), 0);
            assert_int_equal(shoal_crdt_merge(yx, x), 0);
            assert_int_equal(shoal_flag_enabled(xy), a || b);
            assert_true(shoal_crdt_equal(xy, yx));
            assert_int_equal(shoal_crdt_equal(x, y), a == b);
            shoal_crdt_destroy(&x);
            shoal_crdt_destroy(&y);
            shoal_crdt_destroy(&xy);
            shoal_crdt_destroy(&yx);
        }
}

static void test_no_delta_no_pruning(void **state)
{
    (void)state;
    const shoal_type_t *t = shoal_type_by_name("Flag");
    assert_non_null(t);
    assert_int_equal(shoal_type_tag(t), SHOAL_FLAG);
    assert_false(shoal_type_has_delta(t));
    assert_false(shoal_type_has_pruning(t));
    shoal_crdt_t *f = shoal_crdt_new(t);
    assert_int_equal(shoal_flag_switch_on(f), 0);
    assert_null(shoal_crdt_delta(f));
    assert_null(shoal_crdt_take_delta(f));
    shoal_crdt_reset_delta(f);
    assert_int_equal(shoal_crdt_modified_by(f, NULL, 0), 0);
    assert_int_equal(shoal_crdt_prune(f, prop_node(0), prop_node(1), NULL), 0);
    assert_true(shoal_flag_enabled(f));
    /* a full state can still go through merge_delta */
    shoal_crdt_t *g = shoal_flag_new();
    assert_int_equal(shoal_crdt_merge_delta(g, f), 0);
    assert_true(shoal_flag_enabled(g));
    shoal_crdt_destroy(&f);
    shoal_crdt_destroy(&g);
}

static void test_wrong_type(void **state)
{
    (void)state;
    shoal_crdt_t *g = shoal_gset_new(), *f = shoal_flag_new();
    assert_int_equal(shoal_flag_switch_on(g), SHOAL_ETYPE);
    assert_int_equal(shoal_flag_switch_on(NULL), SHOAL_ETYPE);
    assert_false(shoal_flag_enabled(g));
    assert_false(shoal_flag_enabled(NULL));
    assert_int_equal(shoal_crdt_merge(f, g), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(f, g), SHOAL_ETYPE);
    assert_int_equal(shoal_gset_size(g), 0);
    assert_false(shoal_flag_enabled(f));
    shoal_crdt_destroy(&g);
    shoal_crdt_destroy(&f);
}

static void test_encoding(void **state)
{
    (void)state;
    shoal_crdt_t *off = shoal_flag_new(), *on = shoal_flag_new();
    assert_int_equal(shoal_flag_switch_on(on), 0);
    shoal_crdt_t *r1 = prop_roundtrip(off), *r2 = prop_roundtrip(on);
    assert_false(shoal_flag_enabled(r1));
    assert_true(shoal_flag_enabled(r2));
    uint8_t d1[16], d2[16];
    assert_int_equal(shoal_crdt_digest(off, d1), 0);
    assert_int_equal(shoal_crdt_digest(on, d2), 0);
    assert_memory_not_equal(d1, d2, 16);

    /* the empty payload is false; any nonzero varint is true; both re-encode canonically */
    shoal_crdt_t *out = NULL;
    assert_int_equal(decode_raw(NULL, 0, &out), 0);
    assert_false(shoal_flag_enabled(out));
    shoal_crdt_destroy(&out);
    const uint8_t two[] = {0x08, 0x02};
    assert_int_equal(decode_raw(two, sizeof two, &out), 0);
    assert_true(shoal_flag_enabled(out));
    shoal_crdt_t *back = prop_roundtrip(out);
    assert_true(shoal_crdt_equal(back, on));
    shoal_crdt_destroy(&back);
    shoal_crdt_destroy(&out);
    const uint8_t explicit_false[] = {0x08, 0x00};
    assert_int_equal(decode_raw(explicit_false, sizeof explicit_false, &out), 0);
    assert_false(shoal_flag_enabled(out));
    shoal_crdt_destroy(&out);

    /* malformed: a truncated varint, a wrong wire type, junk */
    const uint8_t cut[] = {0x08};
    assert_true(decode_raw(cut, sizeof cut, &out) < 0);
    assert_null(out);
    const uint8_t cut2[] = {0x08, 0x80};
    assert_true(decode_raw(cut2, sizeof cut2, &out) < 0);
    /* field 1 with the wrong wire type: protobuf-c decides; it must not crash */
    const uint8_t wiretype[] = {0x0a, 0x01, 0x01};
    int wrc = decode_raw(wiretype, sizeof wiretype, &out);
    assert_true(wrc <= 0);
    shoal_crdt_destroy(&out);
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed());
    uint8_t junk[32];
    for (int i = 0; i < 3000; i++) {
        size_t n = prop_below(&rng, sizeof junk);
        for (size_t k = 0; k < n; k++)
            junk[k] = (uint8_t)prop_next(&rng);
        int rc = decode_raw(junk, n, &out);
        assert_true(rc <= 0);
        if (rc == 0) {
            shoal_crdt_t *again = prop_roundtrip(out);
            shoal_crdt_destroy(&again);
        }
        shoal_crdt_destroy(&out);
    }
    /* an envelope cut short */
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(on, &b), 0);
    for (size_t n = 0; n < b.len; n++) {
        int rc = shoal_crdt_decode(b.data, n, &out);
        assert_true(rc <= 0);
        shoal_crdt_destroy(&out);
    }
    shoal_buf_free(&b);
    shoal_crdt_destroy(&r1);
    shoal_crdt_destroy(&r2);
    shoal_crdt_destroy(&off);
    shoal_crdt_destroy(&on);
}

/* ---------------------------------------------------------------------------------------------
 * Properties
 */
static void fl_random_op(shoal_crdt_t *v, const shoal_node_t *self, prop_rng_t *rng)
{
    (void)self;
    /* rarely: most values stay false long enough for false/true pairs to meet */
    if (prop_chance(rng, 1, 8))
        assert_int_equal(shoal_flag_switch_on(v), 0);
}

static const prop_type_t fl_prop = {
    .name = "Flag",
    .create = shoal_flag_new,
    .random_op = fl_random_op,
    .deltas_converge = false,
    .strict_assoc = true,
};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&fl_prop, 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_switch_on_for_ever),
        cmocka_unit_test(test_merge_is_or),
        cmocka_unit_test(test_no_delta_no_pruning),
        cmocka_unit_test(test_wrong_type),
        cmocka_unit_test(test_encoding),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
