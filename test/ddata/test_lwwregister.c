/*  test_lwwregister.c — LWWRegister: the greater timestamp wins, ties go to the lower node id
    (then the greater bytes), the clocks (wall, reverse, the caller's epoch), hostile encodings,
    and the property harness. */
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
#include <time.h>

#define A prop_node(0) /* "127.0.0.1:2551:1" sorts before B */
#define B prop_node(1)
#define C prop_node(2)

#define SET_AT(r, node, lit, ts)                                                                   \
    assert_int_equal(shoal_lwwreg_set_at((r), (node), (lit), sizeof(lit) - 1, (ts)), 0)

/* Asserts the register holds exactly lit. */
#define ASSERT_VALUE(r, lit)                                                                       \
    do {                                                                                           \
        size_t len_;                                                                               \
        const void *v_ = shoal_lwwreg_value((r), &len_);                                           \
        assert_non_null(v_);                                                                       \
        assert_int_equal(len_, sizeof(lit) - 1);                                                   \
        assert_memory_equal(v_, (lit), len_);                                                      \
    } while (0)

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static shoal_crdt_t *merged(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *m = shoal_crdt_clone(a);
    assert_int_equal(shoal_crdt_merge(m, b), 0);
    return m;
}

/* Merges in both orders, asserts both give the same value, and returns one of them. */
static shoal_crdt_t *merged_both_ways(const shoal_crdt_t *a, const shoal_crdt_t *b)
{
    shoal_crdt_t *ab = merged(a, b), *ba = merged(b, a);
    assert_true(shoal_crdt_equal(ab, ba));
    shoal_crdt_destroy(&ba);
    return ab;
}

static int decode_raw(const uint8_t *payload, size_t plen, shoal_crdt_t **out)
{
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = SHOAL_LWWREGISTER;
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

static int decode_msg(const char *node, int64_t ts, const char *value, shoal_crdt_t **out)
{
    Shoal__Ddata__LWWRegister msg = SHOAL__DDATA__LWWREGISTER__INIT;
    if (node)
        msg.node = (char *)node;
    msg.timestamp = ts;
    if (value) {
        msg.value.data = (uint8_t *)value;
        msg.value.len = strlen(value);
    }
    size_t plen = shoal__ddata__lwwregister__get_packed_size(&msg);
    uint8_t *payload = malloc(plen ? plen : 1);
    shoal__ddata__lwwregister__pack(&msg, payload);
    int rc = decode_raw(payload, plen, out);
    free(payload);
    return rc;
}

static const char *render(const shoal_crdt_t *v, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    assert_int_equal(shoal_crdt_render(v, b), 0);
    return shoal_buf_cstr(b);
}

static void test_empty_register(void **state)
{
    (void)state;
    shoal_crdt_t *e = shoal_lwwreg_new(), *w = shoal_lwwreg_new();
    size_t len = 99;
    assert_non_null(shoal_lwwreg_value(e, &len));
    assert_int_equal(len, 0);
    assert_true(shoal_lwwreg_timestamp(e) == INT64_MIN);
    assert_null(shoal_lwwreg_writer(e));
    shoal_buf_t txt = {0};
    assert_string_equal(render(e, &txt), "LWWRegister()");

    /* merging the empty register with anything gives the other, even a written empty value */
    SET_AT(w, B, "", -5);
    shoal_crdt_t *m = merged_both_ways(e, w);
    assert_true(shoal_crdt_equal(m, w));
    assert_ptr_equal(shoal_lwwreg_writer(m), B);
    assert_true(shoal_lwwreg_timestamp(m) == -5);
    assert_false(shoal_crdt_equal(e, w));
    shoal_crdt_t *ee = merged(e, e);
    assert_true(shoal_crdt_equal(ee, e));
    assert_null(shoal_lwwreg_writer(ee));
    shoal_crdt_destroy(&ee);
    shoal_crdt_destroy(&m);

    /* both forms round-trip */
    shoal_crdt_t *r1 = prop_roundtrip(e), *r2 = prop_roundtrip(w);
    assert_true(shoal_crdt_equal(r1, e));
    assert_true(shoal_crdt_equal(r2, w));
    shoal_crdt_destroy(&r1);
    shoal_crdt_destroy(&r2);
    shoal_buf_free(&txt);
    shoal_crdt_destroy(&e);
    shoal_crdt_destroy(&w);
}

static void test_later_timestamp_wins(void **state)
{
    (void)state;
    shoal_crdt_t *x = shoal_lwwreg_new(), *y = shoal_lwwreg_new();
    SET_AT(x, A, "early", 10);
    SET_AT(y, B, "late", 20); /* B's id is higher, but the timestamp decides first */
    shoal_crdt_t *m = merged_both_ways(x, y);
    ASSERT_VALUE(m, "late");
    assert_ptr_equal(shoal_lwwreg_writer(m), B);
    assert_true(shoal_lwwreg_timestamp(m) == 20);
    shoal_buf_t txt = {0};
    assert_string_equal(render(m, &txt), "LWWRegister(\"late\" @20 by 127.0.0.1:2552:2)");
    shoal_buf_free(&txt);
    /* and with negative timestamps too */
    SET_AT(x, A, "neg", -3); /* loses locally: -3 < 10 */
    ASSERT_VALUE(x, "early");
    shoal_crdt_destroy(&m);
    shoal_crdt_destroy(&x);
    shoal_crdt_destroy(&y);
}

static void test_tie_goes_to_lower_node(void **state)
{
    (void)state;
    shoal_crdt_t *x = shoal_lwwreg_new(), *y = shoal_lwwreg_new();
    assert_true(shoal_node_cmp(A, B) < 0);
    SET_AT(x, B, "from-b", 42);
    SET_AT(y, A, "from-a", 42);
    shoal_crdt_t *m = merged_both_ways(x, y);
    ASSERT_VALUE(m, "from-a");
    assert_ptr_equal(shoal_lwwreg_writer(m), A);
    /* a local write at the same timestamp follows the same rule */
    SET_AT(x, A, "a-local", 42);
    ASSERT_VALUE(x, "a-local");
    SET_AT(x, B, "b-again", 42);
    ASSERT_VALUE(x, "a-local");
    shoal_crdt_destroy(&m);
    shoal_crdt_destroy(&x);
    shoal_crdt_destroy(&y);
}

static void test_same_timestamp_same_node_is_deterministic(void **state)
{
    (void)state;
    /* should not happen, but merge must stay a join: the greater bytes win, in any order */
    shoal_crdt_t *x = shoal_lwwreg_new(), *y = shoal_lwwreg_new(), *z = shoal_lwwreg_new();
    SET_AT(x, C, "apple", 7);
    SET_AT(y, C, "banana", 7);
    SET_AT(z, C, "apple\0", 7); /* longer with the same prefix: greater */
    shoal_crdt_t *m = merged_both_ways(x, y);
    ASSERT_VALUE(m, "banana");
    shoal_crdt_t *m2 = merged_both_ways(x, z);
    ASSERT_VALUE(m2, "apple\0");
    shoal_crdt_t *xy = merged(x, y), *xy_z = merged(xy, z), *yz = merged(y, z),
                 *x_yz = merged(x, yz);
    assert_true(shoal_crdt_equal(xy_z, x_yz));
    shoal_crdt_t *objs[] = {x, y, z, m, m2, xy, xy_z, yz, x_yz};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        shoal_crdt_destroy(&objs[i]);
}

static void test_default_clock_never_goes_backwards(void **state)
{
    (void)state;
    shoal_crdt_t *r = shoal_lwwreg_new();
    int64_t before = now_us();
    assert_int_equal(shoal_lwwreg_set(r, A, "v0", 2, NULL, NULL), 0);
    int64_t prev = shoal_lwwreg_timestamp(r);
    assert_true(prev >= before && prev <= now_us());
    /* many writes in a tight loop: several land in one microsecond, each still moves forward */
    for (int i = 1; i < 2000; i++) {
        char v[16];
        int n = snprintf(v, sizeof v, "v%d", i);
        assert_int_equal(shoal_lwwreg_set(r, A, v, (size_t)n, NULL, NULL), 0);
        int64_t ts = shoal_lwwreg_timestamp(r);
        assert_true(ts > prev);
        prev = ts;
        size_t len;
        const void *got = shoal_lwwreg_value(r, &len);
        assert_int_equal(len, (size_t)n);
        assert_memory_equal(got, v, len);
    }
    /* a register ahead of the wall clock (another node's clock was fast): current + 1 */
    int64_t future = now_us() + 3600ll * 1000000;
    SET_AT(r, B, "future", future);
    assert_int_equal(shoal_lwwreg_set(r, C, "next", 4, shoal_lww_clock_default, NULL), 0);
    ASSERT_VALUE(r, "next");
    assert_true(shoal_lwwreg_timestamp(r) == future + 1);
    /* the clock itself: no overflow at the top, the wall clock for an empty register */
    assert_true(shoal_lww_clock_default(INT64_MAX, NULL, 0, NULL) == INT64_MAX);
    int64_t t = shoal_lww_clock_default(INT64_MIN, NULL, 0, NULL);
    assert_true(t >= before && t <= now_us());
    assert_true(shoal_lww_clock_default(future, NULL, 0, NULL) == future + 1);
    shoal_crdt_destroy(&r);
}

static void test_reverse_clock_keeps_first_write(void **state)
{
    (void)state;
    /* locally: the second write gets a lower timestamp, so the first stays */
    shoal_crdt_t *r = shoal_lwwreg_new();
    int64_t before = now_us();
    assert_int_equal(shoal_lwwreg_set(r, B, "first", 5, shoal_lww_clock_reverse, NULL), 0);
    int64_t ts = shoal_lwwreg_timestamp(r);
    assert_true(ts <= -before && ts >= -now_us());
    assert_int_equal(shoal_lwwreg_set(r, A, "second", 6, shoal_lww_clock_reverse, NULL), 0);
    ASSERT_VALUE(r, "first");
    assert_ptr_equal(shoal_lwwreg_writer(r), B);
    assert_true(shoal_lwwreg_timestamp(r) == ts);

    /* across replicas: the earlier of two writes to empty registers wins, in both orders */
    shoal_crdt_t *x = shoal_lwwreg_new(), *y = shoal_lwwreg_new();
    assert_int_equal(shoal_lwwreg_set(x, B, "earlier", 7, shoal_lww_clock_reverse, NULL), 0);
    sleep_us(2000);
    assert_int_equal(shoal_lwwreg_set(y, A, "later", 5, shoal_lww_clock_reverse, NULL), 0);
    assert_true(shoal_lwwreg_timestamp(x) > shoal_lwwreg_timestamp(y));
    shoal_crdt_t *m = merged_both_ways(x, y);
    ASSERT_VALUE(m, "earlier");

    /* the clock itself */
    int64_t e = shoal_lww_clock_reverse(INT64_MIN, NULL, 0, NULL); /* empty: just -now */
    assert_true(e < 0 && e >= -now_us());
    assert_true(shoal_lww_clock_reverse(5, NULL, 0, NULL) < -before);
    assert_true(shoal_lww_clock_reverse(-before - 1000000, NULL, 0, NULL) == -before - 1000001);
    assert_true(shoal_lww_clock_reverse(INT64_MIN + 1, NULL, 0, NULL) == INT64_MIN);
    shoal_crdt_destroy(&m);
    shoal_crdt_destroy(&x);
    shoal_crdt_destroy(&y);
    shoal_crdt_destroy(&r);
}

static void test_epoch_clock(void **state)
{
    (void)state;
    /* the sharding coordinator writes with its epoch: a lower epoch's write is ignored */
    shoal_crdt_t *r = shoal_lwwreg_new();
    SET_AT(r, B, "coordinator@2", 2);
    SET_AT(r, A, "coordinator@1", 1); /* stale: ignored even though A's id is lower */
    ASSERT_VALUE(r, "coordinator@2");
    assert_ptr_equal(shoal_lwwreg_writer(r), B);
    SET_AT(r, C, "coordinator@3", 3);
    ASSERT_VALUE(r, "coordinator@3");
    assert_true(shoal_lwwreg_timestamp(r) == 3);

    /* a replica still at epoch 1 merges in the newer state, and not the other way */
    shoal_crdt_t *old = shoal_lwwreg_new();
    SET_AT(old, A, "coordinator@1", 1);
    shoal_crdt_t *m = merged_both_ways(old, r);
    ASSERT_VALUE(m, "coordinator@3");

    /* INT64_MIN is the never-written register: not a timestamp a write may use */
    assert_int_equal(shoal_lwwreg_set_at(r, A, "x", 1, INT64_MIN), SHOAL_EINVAL);
    ASSERT_VALUE(r, "coordinator@3");
    shoal_crdt_destroy(&m);
    shoal_crdt_destroy(&old);
    shoal_crdt_destroy(&r);
}

/* A caller's clock through shoal_lwwreg_set: a sequence number kept in arg. */
static int64_t seq_clock(int64_t current, const void *value, size_t len, void *arg)
{
    (void)value;
    (void)len;
    int64_t *seq = arg;
    (void)current;
    return (*seq)++;
}

static int64_t min_clock(int64_t current, const void *value, size_t len, void *arg)
{
    (void)current;
    (void)value;
    (void)len;
    (void)arg;
    return INT64_MIN;
}

static void test_custom_clock(void **state)
{
    (void)state;
    shoal_crdt_t *r = shoal_lwwreg_new();
    int64_t seq = 100;
    assert_int_equal(shoal_lwwreg_set(r, A, "one", 3, seq_clock, &seq), 0);
    assert_true(shoal_lwwreg_timestamp(r) == 100);
    assert_int_equal(shoal_lwwreg_set(r, A, "two", 3, seq_clock, &seq), 0);
    assert_true(shoal_lwwreg_timestamp(r) == 101);
    ASSERT_VALUE(r, "two");
    seq = 50; /* the caller's clock went back: the write does not win */
    assert_int_equal(shoal_lwwreg_set(r, A, "three", 5, seq_clock, &seq), 0);
    ASSERT_VALUE(r, "two");
    assert_int_equal(shoal_lwwreg_set(r, A, "x", 1, min_clock, NULL), SHOAL_EINVAL);
    /* a value taken from the register itself can be written back (no use after free) */
    size_t len;
    const void *cur = shoal_lwwreg_value(r, &len);
    assert_int_equal(shoal_lwwreg_set(r, A, cur, len, NULL, NULL), 0);
    ASSERT_VALUE(r, "two");
    assert_true(shoal_lwwreg_timestamp(r) > 101);
    /* an empty value is a value */
    assert_int_equal(shoal_lwwreg_set(r, B, NULL, 0, NULL, NULL), 0);
    ASSERT_VALUE(r, "");
    assert_ptr_equal(shoal_lwwreg_writer(r), B);
    shoal_crdt_destroy(&r);
}

static void test_no_delta_no_pruning(void **state)
{
    (void)state;
    const shoal_type_t *t = shoal_type_by_name("LWWRegister");
    assert_non_null(t);
    assert_false(shoal_type_has_delta(t));
    assert_false(shoal_type_has_pruning(t));
    shoal_crdt_t *r = shoal_crdt_new(t);
    SET_AT(r, A, "v", 1);
    assert_null(shoal_crdt_delta(r));
    assert_null(shoal_crdt_take_delta(r));
    assert_int_equal(shoal_crdt_modified_by(r, NULL, 0), 0);
    assert_false(shoal_crdt_needs_pruning_from(r, A));
    assert_int_equal(shoal_crdt_prune(r, A, B, NULL), 0);
    assert_ptr_equal(shoal_lwwreg_writer(r), A);
    shoal_crdt_destroy(&r);
}

static void test_wrong_type_and_bad_args(void **state)
{
    (void)state;
    shoal_crdt_t *f = shoal_flag_new(), *r = shoal_lwwreg_new();
    size_t len = 7;
    assert_int_equal(shoal_lwwreg_set(f, A, "v", 1, NULL, NULL), SHOAL_ETYPE);
    assert_int_equal(shoal_lwwreg_set_at(f, A, "v", 1, 1), SHOAL_ETYPE);
    assert_int_equal(shoal_lwwreg_set_at(NULL, A, "v", 1, 1), SHOAL_ETYPE);
    assert_null(shoal_lwwreg_value(f, &len));
    assert_int_equal(len, 0);
    assert_null(shoal_lwwreg_value(NULL, NULL));
    assert_true(shoal_lwwreg_timestamp(f) == INT64_MIN);
    assert_null(shoal_lwwreg_writer(f));
    assert_int_equal(shoal_lwwreg_set(r, NULL, "v", 1, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_lwwreg_set(r, A, NULL, 1, NULL, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_lwwreg_set_at(r, NULL, "v", 1, 1), SHOAL_EINVAL);
    assert_int_equal(shoal_crdt_merge(r, f), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(r, f), SHOAL_ETYPE);
    assert_null(shoal_lwwreg_writer(r));
    assert_false(shoal_flag_enabled(r));
    shoal_crdt_destroy(&f);
    shoal_crdt_destroy(&r);
}

static void test_decode_validates(void **state)
{
    (void)state;
    shoal_crdt_t *out = NULL;
    const char *a = shoal_node_id(A);
    /* canonical forms */
    assert_int_equal(decode_msg(NULL, 0, NULL, &out), 0); /* the empty register */
    assert_null(shoal_lwwreg_writer(out));
    assert_true(shoal_lwwreg_timestamp(out) == INT64_MIN);
    shoal_crdt_destroy(&out);
    assert_int_equal(decode_msg(a, 0, NULL, &out), 0); /* timestamp 0, empty value */
    assert_ptr_equal(shoal_lwwreg_writer(out), A);
    assert_true(shoal_lwwreg_timestamp(out) == 0);
    ASSERT_VALUE(out, "");
    shoal_crdt_t *back = prop_roundtrip(out);
    assert_true(shoal_crdt_equal(back, out));
    shoal_crdt_destroy(&back);
    shoal_crdt_destroy(&out);
    assert_int_equal(decode_msg(a, INT64_MAX, "v", &out), 0);
    assert_true(shoal_lwwreg_timestamp(out) == INT64_MAX);
    shoal_crdt_destroy(&out);

    /* no writer but something else: not a form the encoder makes */
    assert_int_equal(decode_msg(NULL, 5, NULL, &out), SHOAL_EDECODE);
    assert_null(out);
    assert_int_equal(decode_msg(NULL, 0, "v", &out), SHOAL_EDECODE);
    assert_int_equal(decode_msg(NULL, INT64_MIN, NULL, &out), SHOAL_EDECODE);
    /* a writer with the reserved timestamp */
    assert_int_equal(decode_msg(a, INT64_MIN, "v", &out), SHOAL_EDECODE);
    /* malformed node ids */
    assert_int_equal(decode_msg("nonsense", 1, "v", &out), SHOAL_ENODE);
    assert_int_equal(decode_msg("host:0:1", 1, "v", &out), SHOAL_ENODE);
    assert_int_equal(decode_msg("host:1:", 1, "v", &out), SHOAL_ENODE);
    assert_null(out);
}

static void test_decode_garbage_and_truncation(void **state)
{
    (void)state;
    shoal_crdt_t *r = shoal_lwwreg_new();
    assert_int_equal(shoal_lwwreg_set(r, B, "some\0value", 10, NULL, NULL), 0);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(r, &b), 0);
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b.len, b.data);
    assert_non_null(env);
    size_t plen = env->payload.len;
    uint8_t *payload = malloc(plen);
    memcpy(payload, env->payload.data, plen);
    shoal__ddata__value__free_unpacked(env, NULL);
    for (size_t n = 0; n < b.len; n++) {
        shoal_crdt_t *out = NULL;
        assert_true(shoal_crdt_decode(b.data, n, &out) <= 0);
        shoal_crdt_destroy(&out);
    }
    for (size_t n = 0; n < plen; n++) {
        shoal_crdt_t *out = NULL;
        assert_true(decode_raw(payload, n, &out) <= 0);
        shoal_crdt_destroy(&out);
    }
    prop_check_corruption(r, 3000);
    free(payload);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&r);
}

/* ---------------------------------------------------------------------------------------------
 * Properties
 */
static void lr_random_op(shoal_crdt_t *v, const shoal_node_t *self, prop_rng_t *rng)
{
    static const char *const values[] = {"", "a", "b", "a\0"};
    static const size_t lens[] = {0, 1, 1, 2};
    size_t i = prop_below(rng, 4);
    switch (prop_below(rng, 12)) { /* the wall clocks rarely: they dwarf the small timestamps */
    case 0:
        assert_int_equal(shoal_lwwreg_set(v, self, values[i], lens[i], NULL, NULL), 0);
        break;
    case 1:
        assert_int_equal(
            shoal_lwwreg_set(v, self, values[i], lens[i], shoal_lww_clock_reverse, NULL), 0);
        break;
    default:
        /* small explicit timestamps: equal timestamps from different (and the same) nodes */
        assert_int_equal(
            shoal_lwwreg_set_at(v, self, values[i], lens[i], (int64_t)prop_below(rng, 4) - 1), 0);
        break;
    }
}

static const prop_type_t lr_prop = {
    .name = "LWWRegister",
    .create = shoal_lwwreg_new,
    .random_op = lr_random_op,
    .deltas_converge = false,
    .strict_assoc = true,
};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&lr_prop, 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_register),
        cmocka_unit_test(test_later_timestamp_wins),
        cmocka_unit_test(test_tie_goes_to_lower_node),
        cmocka_unit_test(test_same_timestamp_same_node_is_deterministic),
        cmocka_unit_test(test_default_clock_never_goes_backwards),
        cmocka_unit_test(test_reverse_clock_keeps_first_write),
        cmocka_unit_test(test_epoch_clock),
        cmocka_unit_test(test_custom_clock),
        cmocka_unit_test(test_no_delta_no_pruning),
        cmocka_unit_test(test_wrong_type_and_bad_args),
        cmocka_unit_test(test_decode_validates),
        cmocka_unit_test(test_decode_garbage_and_truncation),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
