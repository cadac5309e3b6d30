/*  test_orset.c — ORSet and ORSetDelta: add-wins semantics, deltas (groups, duplicates, out of
    order), pruning, canonical encoding and what decode rejects, and the property harness. */
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

#define X prop_node(0)
#define Y prop_node(1)
#define Z prop_node(2)

static int add(shoal_crdt_t *s, const shoal_node_t *n, const char *e)
{
    return shoal_orset_add(s, n, e, strlen(e));
}

static int rm(shoal_crdt_t *s, const shoal_node_t *n, const char *e)
{
    return shoal_orset_remove(s, n, e, strlen(e));
}

static bool has(const shoal_crdt_t *s, const char *e)
{
    return shoal_orset_contains(s, e, strlen(e));
}

/* The elements, rendered: ORSet{"a", "b"}. The caller frees. */
static char *render(const shoal_crdt_t *v)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_render(v, &b), 0);
    char *s = strdup(shoal_buf_cstr(&b));
    shoal_buf_free(&b);
    return s;
}

static void assert_render(const shoal_crdt_t *v, const char *want)
{
    char *got = render(v);
    if (strcmp(got, want) != 0)
        print_error("rendered %s, want %s\n", got, want);
    assert_string_equal(got, want);
    free(got);
}

/* The pending delta, sent through encode/decode; the caller owns it. */
static shoal_crdt_t *take(shoal_crdt_t *s)
{
    shoal_crdt_t *d = shoal_crdt_take_delta(s);
    assert_non_null(d);
    assert_ptr_equal(shoal_crdt_type(d), shoal_type_by_name("ORSetDelta"));
    shoal_crdt_t *sent = prop_roundtrip(d);
    shoal_crdt_destroy(&d);
    return sent;
}

static shoal_crdt_t *copy_of(const shoal_crdt_t *s)
{
    shoal_crdt_t *c = shoal_crdt_clone(s);
    shoal_crdt_reset_delta(c);
    return c;
}

/* The ORSet message inside an encoded value. */
static Shoal__Ddata__ORSet *unpack_payload(const shoal_crdt_t *v)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b.len, b.data);
    assert_non_null(env);
    Shoal__Ddata__ORSet *m = shoal__ddata__orset__unpack(NULL, env->payload.len, env->payload.data);
    assert_non_null(m);
    shoal__ddata__value__free_unpacked(env, NULL);
    shoal_buf_free(&b);
    return m;
}

/* Decodes an ORSet message wrapped in an envelope of the given type. */
static int decode_msg(const Shoal__Ddata__ORSet *m, uint32_t type, shoal_crdt_t **out)
{
    size_t n = shoal__ddata__orset__get_packed_size(m);
    uint8_t *p = malloc(n ? n : 1);
    shoal__ddata__orset__pack(m, p);
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = type;
    env.version = 1;
    env.payload.data = p;
    env.payload.len = n;
    size_t en = shoal__ddata__value__get_packed_size(&env);
    uint8_t *e = malloc(en);
    shoal__ddata__value__pack(&env, e);
    int rc = shoal_crdt_decode(e, en, out);
    free(p);
    free(e);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 */
static int collect(const void *elem, size_t len, void *arg)
{
    shoal_buf_t *b = arg;
    shoal_buf_append_quoted(b, elem, len);
    shoal_buf_append(b, ";", 1);
    return 0;
}

static int stop_after_one(const void *elem, size_t len, void *arg)
{
    (void)elem;
    (void)len;
    ++*(int *)arg;
    return 42;
}

static void test_add_remove_contains(void **state)
{
    (void)state;
    shoal_crdt_t *s = shoal_orset_new();
    assert_int_equal(shoal_orset_size(s), 0);
    assert_false(has(s, "a"));
    assert_null(shoal_crdt_delta(s));
    assert_int_equal(add(s, X, "b"), 0);
    assert_int_equal(add(s, X, "a"), 0);
    assert_int_equal(add(s, X, "a"), 0); /* again: still one element */
    assert_true(has(s, "a"));
    assert_true(has(s, "b"));
    assert_false(has(s, "c"));
    assert_int_equal(shoal_orset_size(s), 2);
    assert_render(s, "ORSet{\"a\", \"b\"}");
    assert_non_null(shoal_crdt_delta(s));
    assert_render(shoal_crdt_delta(s), "ORSetDelta{+\"a\", +\"b\"}");

    shoal_buf_t b = {0};
    assert_int_equal(shoal_orset_foreach(s, collect, &b), 0);
    assert_string_equal(shoal_buf_cstr(&b), "\"a\";\"b\";");
    shoal_buf_free(&b);
    int calls = 0;
    assert_int_equal(shoal_orset_foreach(s, stop_after_one, &calls), 42);
    assert_int_equal(calls, 1);

    shoal_crdt_reset_delta(s);
    assert_int_equal(rm(s, X, "a"), 0);
    assert_false(has(s, "a"));
    assert_int_equal(shoal_orset_size(s), 1);
    assert_render(shoal_crdt_delta(s), "ORSetDelta{-\"a\"}");
    shoal_crdt_reset_delta(s);
    /* removing an absent element fails and records nothing */
    assert_int_equal(rm(s, X, "a"), SHOAL_ENOTFOUND);
    assert_int_equal(rm(s, X, "zzz"), SHOAL_ENOTFOUND);
    assert_null(shoal_crdt_delta(s));
    /* re-add after remove */
    assert_int_equal(add(s, Y, "a"), 0);
    assert_true(has(s, "a"));
    /* clear */
    assert_int_equal(shoal_orset_clear(s, X), 0);
    assert_int_equal(shoal_orset_size(s), 0);
    assert_render(s, "ORSet{}");
    shoal_crdt_reset_delta(s);
    assert_int_equal(shoal_orset_clear(s, X), 0); /* clearing nothing records nothing */
    assert_null(shoal_crdt_delta(s));
    assert_int_equal(add(s, X, "c"), 0);
    assert_true(has(s, "c"));
    shoal_crdt_destroy(&s);
}

static void test_api_misuse(void **state)
{
    (void)state;
    shoal_crdt_t *g = shoal_gcounter_new();
    shoal_crdt_t *s = shoal_orset_new();
    assert_int_equal(add(g, X, "a"), SHOAL_ETYPE);
    assert_int_equal(rm(g, X, "a"), SHOAL_ETYPE);
    assert_int_equal(shoal_orset_clear(g, X), SHOAL_ETYPE);
    assert_int_equal(shoal_orset_foreach(g, collect, NULL), SHOAL_ETYPE);
    assert_false(has(g, "a"));
    assert_int_equal(shoal_orset_size(g), 0);
    assert_int_equal(shoal_orset_add(NULL, X, "a", 1), SHOAL_ETYPE);
    assert_int_equal(shoal_orset_add(s, NULL, "a", 1), SHOAL_EINVAL);
    assert_int_equal(shoal_orset_add(s, X, NULL, 3), SHOAL_EINVAL);
    assert_int_equal(shoal_orset_remove(s, NULL, "a", 1), SHOAL_EINVAL);
    assert_int_equal(shoal_orset_clear(s, NULL), SHOAL_EINVAL);
    assert_int_equal(shoal_orset_foreach(s, NULL, NULL), SHOAL_EINVAL);
    assert_false(shoal_orset_contains(s, NULL, 3));
    assert_null(shoal_crdt_delta(s));
    /* wrong types for merge and merge_delta */
    assert_int_equal(shoal_crdt_merge(s, g), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(s, g), SHOAL_ETYPE);
    shoal_crdt_t *gs = shoal_gset_new();
    assert_int_equal(shoal_crdt_merge(s, gs), SHOAL_ETYPE);
    assert_int_equal(shoal_crdt_merge_delta(s, gs), SHOAL_ETYPE);
    /* a delta is not a state: merging a state into a delta is refused */
    shoal_crdt_t *t = shoal_orset_new();
    assert_int_equal(add(t, X, "a"), 0);
    const shoal_crdt_t *d = shoal_crdt_delta(t);
    shoal_crdt_t *dc = shoal_crdt_clone(d);
    assert_int_equal(shoal_crdt_merge(dc, s), SHOAL_ETYPE);
    /* a full state is accepted by merge_delta */
    assert_int_equal(shoal_crdt_merge_delta(s, t), 0);
    assert_true(has(s, "a"));
    assert_null(shoal_crdt_delta(s));
    /* the delta type */
    const shoal_type_t *ot = shoal_type_by_name("ORSet");
    assert_true(shoal_type_has_delta(ot));
    assert_false(shoal_type_delta_causal(ot));
    assert_true(shoal_type_has_pruning(ot));
    assert_ptr_equal(shoal_type_by_tag(SHOAL_ORSET_DELTA), shoal_crdt_type(dc));
    assert_null(shoal_crdt_new(shoal_crdt_type(dc)));
    assert_ptr_equal(shoal_crdt_type(s), ot);
    shoal_crdt_destroy(&dc);
    shoal_crdt_destroy(&t);
    shoal_crdt_destroy(&gs);
    shoal_crdt_destroy(&g);
    shoal_crdt_destroy(&s);
}

/* Replica a and b start equal with x; a removes x while b re-adds it concurrently. */
static void test_concurrent_add_remove(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_orset_new();
    assert_int_equal(add(a, X, "x"), 0);
    assert_int_equal(add(a, X, "y"), 0);
    shoal_crdt_t *b = copy_of(a);
    shoal_crdt_reset_delta(a);

    assert_int_equal(rm(a, X, "x"), 0);
    assert_int_equal(add(b, Y, "x"), 0);
    shoal_crdt_t *da = take(a), *db = take(b);

    /* full states, both ways */
    shoal_crdt_t *ab = copy_of(a), *ba = copy_of(b);
    assert_int_equal(shoal_crdt_merge(ab, b), 0);
    assert_int_equal(shoal_crdt_merge(ba, a), 0);
    assert_true(has(ab, "x")); /* add wins over the remove that did not see it */
    assert_true(has(ba, "x"));
    assert_true(shoal_crdt_equal(ab, ba));
    assert_null(shoal_crdt_delta(ab)); /* merging is not a local change */
    /* deltas, both ways */
    assert_int_equal(shoal_crdt_merge_delta(a, db), 0);
    assert_int_equal(shoal_crdt_merge_delta(b, da), 0);
    assert_true(has(a, "x"));
    assert_true(has(b, "x"));
    assert_true(shoal_crdt_equal(a, b));
    assert_true(shoal_crdt_equal(a, ab));
    assert_null(shoal_crdt_delta(a));

    /* a remove that observed b's add removes it */
    assert_int_equal(rm(a, X, "x"), 0);
    shoal_crdt_t *da2 = take(a);
    assert_int_equal(shoal_crdt_merge_delta(b, da2), 0);
    assert_false(has(b, "x"));
    assert_true(has(b, "y"));
    assert_int_equal(shoal_crdt_merge(ab, a), 0);
    assert_false(has(ab, "x"));
    assert_true(shoal_crdt_equal(a, b));
    assert_true(shoal_crdt_equal(a, ab));

    /* concurrent adds of one element at two nodes, then a remove seeing only one of them */
    shoal_crdt_t *c = copy_of(a), *d = copy_of(a);
    assert_int_equal(add(c, X, "z"), 0);
    assert_int_equal(add(d, Y, "z"), 0);
    shoal_crdt_t *c2 = copy_of(c);
    assert_int_equal(rm(c2, X, "z"), 0); /* saw only X's add */
    assert_int_equal(shoal_crdt_merge(c2, d), 0);
    assert_true(has(c2, "z")); /* Y's concurrent add survives */
    assert_int_equal(shoal_crdt_merge(c, d), 0);
    assert_int_equal(rm(c, X, "z"), 0); /* saw both */
    assert_int_equal(shoal_crdt_merge(d, c), 0);
    assert_false(has(d, "z"));

    shoal_crdt_t *all[] = {a, b, ab, ba, da, db, da2, c, d, c2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

static void test_clear_with_concurrent_add(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_orset_new();
    assert_int_equal(add(a, X, "p"), 0);
    assert_int_equal(add(a, X, "q"), 0);
    assert_int_equal(add(a, X, "r"), 0);
    shoal_crdt_t *b = copy_of(a);
    shoal_crdt_reset_delta(a);

    assert_int_equal(shoal_orset_clear(a, X), 0);
    assert_int_equal(add(b, Y, "q"), 0); /* concurrent re-add */
    assert_int_equal(add(b, Y, "s"), 0); /* concurrent new element */
    shoal_crdt_t *da = take(a), *db = take(b);
    assert_render(da, "ORSetDelta{-\"p\", -\"q\", -\"r\"}");

    shoal_crdt_t *a2 = copy_of(a), *b2 = copy_of(b);
    assert_int_equal(shoal_crdt_merge_delta(a, db), 0);
    assert_int_equal(shoal_crdt_merge_delta(b, da), 0);
    assert_render(a, "ORSet{\"q\", \"s\"}");
    assert_true(shoal_crdt_equal(a, b));
    assert_int_equal(shoal_crdt_merge(a2, b2), 0);
    assert_true(shoal_crdt_equal(a, a2));

    shoal_crdt_t *all[] = {a, b, a2, b2, da, db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

/* Several operations make one delta group, equal to the join of their deltas, and applying it
   gives what applying them one by one gives. */
static void test_delta_groups(void **state)
{
    (void)state;
    shoal_crdt_t *base = shoal_orset_new();
    assert_int_equal(add(base, Y, "a"), 0);
    assert_int_equal(add(base, Y, "b"), 0);
    shoal_crdt_reset_delta(base);

    shoal_crdt_t *grouped = copy_of(base), *single = copy_of(base);
    shoal_crdt_t *ds[8];
    size_t nd = 0;
#define OPS(s, each)                                                                               \
    do {                                                                                           \
        assert_int_equal(add(s, X, "c"), 0);                                                       \
        each;                                                                                      \
        assert_int_equal(rm(s, X, "a"), 0);                                                        \
        each;                                                                                      \
        assert_int_equal(add(s, X, "a"), 0);                                                       \
        each;                                                                                      \
        assert_int_equal(add(s, X, "c"), 0);                                                       \
        each;                                                                                      \
        assert_int_equal(rm(s, X, "b"), 0);                                                        \
        each;                                                                                      \
        assert_int_equal(add(s, X, "d"), 0);                                                       \
        each;                                                                                      \
        assert_int_equal(rm(s, X, "d"), 0);                                                        \
        each;                                                                                      \
    } while (0)
    OPS(grouped, (void)0);
    OPS(single, ds[nd++] = take(single));
#undef OPS
    assert_true(shoal_crdt_equal(grouped, single));
    shoal_crdt_t *group = take(grouped);
    assert_render(group, "ORSetDelta{+\"a\", -\"b\", +\"c\", -\"d\"}");

    /* the group equals the join of the single deltas */
    shoal_crdt_t *joined = shoal_crdt_clone(ds[0]);
    for (size_t i = 1; i < nd; i++)
        assert_int_equal(shoal_crdt_merge(joined, ds[i]), 0);
    assert_true(shoal_crdt_equal(joined, group));
    prop_assert_same(joined, group, "group = join of deltas", 0);

    /* applied to the old state: same result either way */
    shoal_crdt_t *r1 = copy_of(base), *r2 = copy_of(base), *r3 = copy_of(base);
    assert_int_equal(shoal_crdt_merge_delta(r1, group), 0);
    for (size_t i = 0; i < nd; i++)
        assert_int_equal(shoal_crdt_merge_delta(r2, ds[i]), 0);
    assert_int_equal(shoal_crdt_merge_delta(r3, joined), 0);
    prop_assert_same(r1, single, "state ⊔ group", 0);
    prop_assert_same(r2, single, "state ⊔ each delta", 0);
    prop_assert_same(r3, single, "state ⊔ joined deltas", 0);
    assert_render(r1, "ORSet{\"a\", \"c\"}");

    /* a group joined in the other order is the same group */
    shoal_crdt_t *rev = shoal_crdt_clone(ds[nd - 1]);
    for (size_t i = nd - 1; i-- > 0;)
        assert_int_equal(shoal_crdt_merge(rev, ds[i]), 0);
    prop_assert_same(rev, group, "delta join commutes", 0);

    for (size_t i = 0; i < nd; i++)
        shoal_crdt_destroy(&ds[i]);
    shoal_crdt_t *all[] = {base, grouped, single, group, joined, r1, r2, r3, rev};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

/* Large delta groups (elements re-added and removed many times, concurrently at two replicas)
   join into one group the same way in any order, and the joined group applies like the two. */
static void test_delta_group_join_laws(void **state)
{
    (void)state;
    static const char *universe[] = {"h", "i", "j"};
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed() ^ 0x5151);
    for (int c = 0; c < prop_cases(300); c++) {
        shoal_crdt_t *base = shoal_orset_new();
        for (int i = 0; i < 3; i++)
            assert_int_equal(add(base, Z, universe[i]), 0);
        shoal_crdt_reset_delta(base);
        shoal_crdt_t *r[2] = {copy_of(base), copy_of(base)};
        for (int k = 0; k < 2; k++) {
            int ops = 5 + (int)prop_below(&rng, 30);
            for (int o = 0; o < ops; o++) {
                const char *e = universe[prop_below(&rng, 3)];
                if (prop_chance(&rng, 2, 3))
                    assert_int_equal(add(r[k], prop_node(k), e), 0);
                else
                    (void)rm(r[k], prop_node(k), e);
                if (k == 1 && o == ops / 2) /* replica 1 sees half of replica 0's work */
                    assert_int_equal(shoal_crdt_merge(r[1], r[0]), 0);
            }
        }
        shoal_crdt_t *g0 = take(r[0]), *g1 = take(r[1]);
        shoal_crdt_t *g01 = shoal_crdt_clone(g0), *g10 = shoal_crdt_clone(g1);
        assert_int_equal(shoal_crdt_merge(g01, g1), 0);
        assert_int_equal(shoal_crdt_merge(g10, g0), 0);
        prop_assert_same(g01, g10, "delta join commutes", (uint64_t)c);
        shoal_crdt_t *again = shoal_crdt_clone(g01);
        assert_int_equal(shoal_crdt_merge(again, g0), 0);
        assert_int_equal(shoal_crdt_merge(again, g1), 0);
        prop_assert_same(again, g01, "delta join is idempotent", (uint64_t)c);
        shoal_crdt_t *a = copy_of(base), *b = copy_of(base);
        assert_int_equal(shoal_crdt_merge_delta(a, g0), 0);
        assert_int_equal(shoal_crdt_merge_delta(a, g1), 0);
        assert_int_equal(shoal_crdt_merge_delta(b, g01), 0);
        prop_assert_same(a, b, "state ⊔ (g0 ⊔ g1) = (state ⊔ g0) ⊔ g1", (uint64_t)c);
        assert_int_equal(shoal_crdt_merge(r[0], r[1]), 0);
        prop_assert_same(a, r[0], "deltas give what full states give", (uint64_t)c);
        shoal_crdt_t *all[] = {base, r[0], r[1], g0, g1, g01, g10, again, a, b};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            shoal_crdt_destroy(&all[i]);
    }
}

static void test_duplicated_deltas(void **state)
{
    (void)state;
    shoal_crdt_t *a = shoal_orset_new(), *b = shoal_orset_new();
    assert_int_equal(add(a, X, "a"), 0);
    shoal_crdt_t *d1 = take(a);
    assert_int_equal(rm(a, X, "a"), 0);
    assert_int_equal(add(a, X, "b"), 0);
    shoal_crdt_t *d2 = take(a);
    for (int k = 0; k < 3; k++)
        assert_int_equal(shoal_crdt_merge_delta(b, d1), 0);
    assert_true(has(b, "a"));
    assert_int_equal(shoal_crdt_merge_delta(b, d2), 0);
    assert_int_equal(shoal_crdt_merge_delta(b, d2), 0);
    assert_int_equal(shoal_crdt_merge_delta(b, d1), 0); /* an old one again: no resurrection */
    assert_false(has(b, "a"));
    assert_true(has(b, "b"));
    prop_assert_same(a, b, "duplicates change nothing", 0);
    /* a delta merged into itself (as a group) is itself */
    shoal_crdt_t *g = shoal_crdt_clone(d2);
    assert_int_equal(shoal_crdt_merge(g, d2), 0);
    prop_assert_same(g, d2, "delta ⊔ delta = delta", 0);
    shoal_crdt_t *all[] = {a, b, d1, d2, g};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

/* The context of an encoded state: vector entries and cloud dots, by node id. */
static size_t ctx_vv(const Shoal__Ddata__ORSet *m, const shoal_node_t *node, uint64_t *counter)
{
    *counter = 0;
    if (!m->context)
        return 0;
    for (size_t i = 0; i < m->context->n_vv_node; i++)
        if (strcmp(m->nodes[m->context->vv_node[i]], shoal_node_id(node)) == 0) {
            *counter = m->context->vv_counter[i];
            return 1;
        }
    return 0;
}

static bool ctx_cloud_has(const Shoal__Ddata__ORSet *m, const shoal_node_t *node, uint64_t c)
{
    if (!m->context)
        return false;
    for (size_t i = 0; i < m->context->n_cloud_node; i++)
        if (strcmp(m->nodes[m->context->cloud_node[i]], shoal_node_id(node)) == 0 &&
            m->context->cloud_counter[i] == c)
            return true;
    return false;
}

/* Origin X makes three deltas: #1 adds a (dot X1), #2 adds b (X2), #3 removes a and adds c
   (X3). Delivered in every order, a replica ends equal to X; mid-way its value is right. */
static void test_out_of_order_delivery_of_deltas(void **state)
{
    (void)state;
    shoal_crdt_t *x = shoal_orset_new();
    shoal_crdt_t *d[3];
    assert_int_equal(add(x, X, "a"), 0);
    d[0] = take(x);
    assert_int_equal(add(x, X, "b"), 0);
    d[1] = take(x);
    assert_int_equal(rm(x, X, "a"), 0);
    assert_int_equal(add(x, X, "c"), 0);
    d[2] = take(x);
    assert_render(x, "ORSet{\"b\", \"c\"}");

    static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                     {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int o = 0; o < 6; o++) {
        shoal_crdt_t *r = shoal_orset_new();
        assert_int_equal(add(r, Y, "y"), 0); /* a replica with its own history */
        shoal_crdt_reset_delta(r);
        for (int k = 0; k < 3; k++)
            assert_int_equal(shoal_crdt_merge_delta(r, d[orders[o][k]]), 0);
        assert_render(r, "ORSet{\"b\", \"c\", \"y\"}");
        assert_null(shoal_crdt_delta(r));
        shoal_crdt_destroy(&r);
    }

    /* #3 first: c is there at once, a is not (#3 saw it removed), and the context holds X1 and
       X3 but not X2: vector X=1, cloud {X3} above the gap */
    shoal_crdt_t *r = shoal_orset_new();
    assert_int_equal(shoal_crdt_merge_delta(r, d[2]), 0);
    assert_render(r, "ORSet{\"c\"}");
    Shoal__Ddata__ORSet *m = unpack_payload(r);
    uint64_t v;
    assert_int_equal(ctx_vv(m, X, &v), 1);
    assert_int_equal(v, 1);
    assert_true(ctx_cloud_has(m, X, 3));
    assert_false(ctx_cloud_has(m, X, 2));
    shoal__ddata__orset__free_unpacked(m, NULL);
    /* #1 late: its add of a was removed by #3, and stays removed */
    assert_int_equal(shoal_crdt_merge_delta(r, d[0]), 0);
    assert_render(r, "ORSet{\"c\"}");
    /* #2 closes the gap: the cloud folds into the vector */
    assert_int_equal(shoal_crdt_merge_delta(r, d[1]), 0);
    assert_render(r, "ORSet{\"b\", \"c\"}");
    m = unpack_payload(r);
    assert_int_equal(ctx_vv(m, X, &v), 1);
    assert_int_equal(v, 3);
    assert_int_equal(m->context->n_cloud_node, 0);
    shoal__ddata__orset__free_unpacked(m, NULL);
    shoal_crdt_t *xr = copy_of(x);
    prop_assert_same(r, xr, "out of order = in order", 0);

    /* and full states that carry a gap merge right too */
    shoal_crdt_t *g = shoal_orset_new();
    assert_int_equal(shoal_crdt_merge_delta(g, d[1]), 0); /* only #2 */
    shoal_crdt_t *g2 = shoal_orset_new();
    assert_int_equal(shoal_crdt_merge_delta(g2, d[0]), 0); /* only #1 */
    assert_int_equal(shoal_crdt_merge(g, g2), 0);
    assert_render(g, "ORSet{\"a\", \"b\"}");

    for (int k = 0; k < 3; k++)
        shoal_crdt_destroy(&d[k]);
    shoal_crdt_t *all[] = {x, r, xr, g, g2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

/* Why a context of a version vector alone could not take deltas out of order: absorbing #2
   would set the vector to X=2 and so claim X1 as seen; #1's add of a would then look like an
   add this replica had seen removed, and be dropped. The exact context does not claim X1. */
static void test_vector_only_context_would_lose_adds(void **state)
{
    (void)state;
    shoal_crdt_t *x = shoal_orset_new();
    assert_int_equal(add(x, X, "a"), 0);
    shoal_crdt_t *d1 = take(x);
    assert_int_equal(add(x, X, "b"), 0);
    shoal_crdt_t *d2 = take(x);

    shoal_crdt_t *r = shoal_orset_new();
    assert_int_equal(shoal_crdt_merge_delta(r, d2), 0);
    Shoal__Ddata__ORSet *m = unpack_payload(r);
    uint64_t v;
    assert_int_equal(ctx_vv(m, X, &v), 0); /* no vector entry for X: X1 not claimed */
    assert_true(ctx_cloud_has(m, X, 2));
    assert_false(ctx_cloud_has(m, X, 1));
    shoal__ddata__orset__free_unpacked(m, NULL);
    /* the encoded state (as it would be shipped) keeps that: decode it and apply #1 there */
    shoal_crdt_t *shipped = prop_roundtrip(r);
    assert_int_equal(shoal_crdt_merge_delta(r, d1), 0);
    assert_int_equal(shoal_crdt_merge_delta(shipped, d1), 0);
    assert_true(has(r, "a"));
    assert_true(has(shipped, "a"));
    assert_true(has(r, "b"));
    prop_assert_same(r, x, "late #1 still applies", 0);
    shoal_crdt_t *all[] = {x, d1, d2, r, shipped};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

static void test_pruning(void **state)
{
    (void)state;
    const shoal_node_t *R = prop_node(3); /* the node that leaves */
    shoal_crdt_t *r = shoal_orset_new();
    assert_int_equal(add(r, R, "r1"), 0);
    assert_int_equal(add(r, R, "r2"), 0);
    assert_int_equal(add(r, R, "both"), 0);
    shoal_crdt_t *x = shoal_orset_new();
    assert_int_equal(add(x, X, "x1"), 0);
    assert_int_equal(add(x, X, "both"), 0); /* concurrent with R's: two dots */
    assert_int_equal(shoal_crdt_merge(x, r), 0);
    shoal_crdt_t *y = copy_of(x);
    assert_int_equal(add(y, Y, "y1"), 0);
    assert_int_equal(shoal_crdt_merge(x, y), 0);
    shoal_crdt_reset_delta(x);
    shoal_crdt_reset_delta(y);
    shoal_crdt_t *y_old = copy_of(y);
    char *before = render(x);
    assert_string_equal(before, "ORSet{\"both\", \"r1\", \"r2\", \"x1\", \"y1\"}");

    const shoal_node_t *nodes[8];
    assert_int_equal(shoal_crdt_modified_by(x, nodes, 8), 3);
    assert_true(shoal_node_cmp(nodes[0], nodes[1]) < 0 && shoal_node_cmp(nodes[1], nodes[2]) < 0);
    assert_true(shoal_crdt_needs_pruning_from(x, R));
    assert_false(shoal_crdt_needs_pruning_from(x, Z));

    /* prune at X: the value stays, R is gone, nothing to ship */
    assert_int_equal(shoal_crdt_prune(x, R, X, NULL), 0);
    assert_render(x, before);
    assert_false(shoal_crdt_needs_pruning_from(x, R));
    assert_null(shoal_crdt_delta(x));
    size_t n = shoal_crdt_modified_by(x, nodes, 8);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        assert_ptr_not_equal(nodes[i], R);
    shoal_crdt_t *x_pruned = prop_roundtrip(x);
    prop_assert_same(x_pruned, x, "pruned state round trips", 0);
    /* a second prune finds nothing */
    assert_int_equal(shoal_crdt_prune(x, R, X, NULL), 0);
    prop_assert_same(x_pruned, x, "prune twice = prune once", 0);

    /* Y's old state, cleaned up, merged into X: X's value is kept */
    shoal_crdt_t *clean = copy_of(y_old);
    assert_int_equal(shoal_crdt_prune_cleanup(clean, R, NULL), 0);
    assert_false(shoal_crdt_needs_pruning_from(clean, R));
    assert_render(clean, "ORSet{\"both\", \"x1\", \"y1\"}"); /* what only R kept is gone */
    assert_int_equal(shoal_crdt_merge(x, clean), 0);
    assert_render(x, before);
    assert_false(shoal_crdt_needs_pruning_from(x, R));
    prop_assert_same(x, x_pruned, "cleaned old state adds nothing", 0);

    /* an element removed at X after pruning does not come back with Y's cleaned old state */
    assert_int_equal(rm(x, X, "r1"), 0);
    assert_int_equal(rm(x, X, "both"), 0);
    shoal_crdt_reset_delta(x);
    assert_int_equal(shoal_crdt_merge(x, clean), 0);
    assert_false(has(x, "r1"));
    assert_false(has(x, "both"));
    assert_true(has(x, "r2"));
    /* (without the cleanup it would: that is what prune_cleanup is for) */
    shoal_crdt_t *raw = copy_of(x);
    assert_int_equal(shoal_crdt_merge(raw, y_old), 0);
    assert_true(has(raw, "r1"));

    /* Y itself: cleans up its own state, takes X's, and ends equal */
    assert_int_equal(shoal_crdt_prune_cleanup(y, R, NULL), 0);
    assert_int_equal(shoal_crdt_merge(y, x), 0);
    prop_assert_same(y, x, "Y converges with pruned X", 0);
    assert_render(y, "ORSet{\"r2\", \"x1\", \"y1\"}");

    free(before);
    shoal_crdt_t *all[] = {r, x, y, y_old, x_pruned, clean, raw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

/* Pruning while other replicas keep removing, randomized (chaos seed 1867285726 found the case:
   an element added via R, R removed and pruned into X, a remove of it at Y that had not yet heard
   of the pruning: without a plan the remove saw only R's dot, which Y's cleanup then forgot, and
   X's re-homed copy of the add came back everywhere). Two worlds run the same operations and the
   same deliveries (deltas in any order, duplicated, late; full states): in one, R is pruned into
   X half-way and every replica applies X's plan when it hears of it (with the state, as the
   replicator's marker travels); in the other nothing is pruned. At the end both hold the same
   elements, and the pruned replicas are equal and hold nothing of R. */
#define PR_REPLICAS 4 /* 0 = R, removed half-way; 1 = X, the owner; 2, 3 */
#define PR_ELEMS 6

typedef struct {
    shoal_crdt_t *p, *u; /* the delta in the pruned world and in the other */
    int to;
} pr_msg_t;

typedef struct {
    shoal_crdt_t *p[PR_REPLICAS], *u[PR_REPLICAS];
    bool knows[PR_REPLICAS]; /* has heard of the pruning (the owner at once) */
    bool pruned;
    shoal_prune_plan_t plan;
    pr_msg_t q[512];
    size_t nq;
    prop_rng_t rng;
} pr_world_t;

static const shoal_node_t *pr_node(int i)
{
    return i == 0 ? prop_node(3) : prop_node(i - 1);
}

static void pr_learn(pr_world_t *w, int i)
{
    if (!w->pruned || w->knows[i])
        return;
    assert_int_equal(shoal_crdt_prune_cleanup(w->p[i], pr_node(0), &w->plan), 0);
    w->knows[i] = true;
}

/* A copy of what replica `from` sends, cleaned as its receiver `to` cleans it. */
static shoal_crdt_t *pr_received(pr_world_t *w, const shoal_crdt_t *v, int to)
{
    shoal_crdt_t *c = prop_roundtrip(v);
    if (w->knows[to] && shoal_crdt_needs_pruning_from(c, pr_node(0)))
        assert_int_equal(shoal_crdt_prune_cleanup(c, pr_node(0), &w->plan), 0);
    return c;
}

static void pr_deliver_one(pr_world_t *w, size_t k)
{
    pr_msg_t m = w->q[k];
    w->q[k] = w->q[--w->nq];
    shoal_crdt_t *d = pr_received(w, m.p, m.to);
    assert_int_equal(shoal_crdt_merge_delta(w->p[m.to], d), 0);
    assert_int_equal(shoal_crdt_merge_delta(w->u[m.to], m.u), 0);
    shoal_crdt_destroy(&d);
    if (prop_chance(&w->rng, 1, 6) && w->nq < 512) { /* delivered again later */
        w->q[w->nq++] = m;
        return;
    }
    shoal_crdt_destroy(&m.p);
    shoal_crdt_destroy(&m.u);
}

static void pr_full_state(pr_world_t *w, int from, int to)
{
    if (w->knows[from])
        pr_learn(w, to); /* the marker travels with the state */
    shoal_crdt_t *s = pr_received(w, w->p[from], to);
    assert_int_equal(shoal_crdt_merge(w->p[to], s), 0);
    shoal_crdt_destroy(&s);
    assert_int_equal(shoal_crdt_merge(w->u[to], w->u[from]), 0);
}

static void pr_step(pr_world_t *w, int first)
{
    int i = first + (int)prop_below(&w->rng, PR_REPLICAS - first);
    uint64_t r = prop_below(&w->rng, 10);
    if (r < 6) {
        char e[2] = {(char)('a' + prop_below(&w->rng, PR_ELEMS)), 0};
        bool adding = r < 3;
        /* a replica that has not heard of the pruning may still show an element that a remove
           of its re-homed copy took away elsewhere: the worlds run the same operations only */
        if (!adding && !(has(w->p[i], e) && has(w->u[i], e)))
            return;
        assert_int_equal(adding ? add(w->p[i], pr_node(i), e) : rm(w->p[i], pr_node(i), e), 0);
        assert_int_equal(adding ? add(w->u[i], pr_node(i), e) : rm(w->u[i], pr_node(i), e), 0);
        shoal_crdt_t *dp = shoal_crdt_take_delta(w->p[i]), *du = shoal_crdt_take_delta(w->u[i]);
        for (int to = first; to < PR_REPLICAS && dp; to++)
            if (to != i && w->nq < 512)
                w->q[w->nq++] = (pr_msg_t){shoal_crdt_clone(dp), shoal_crdt_clone(du), to};
        shoal_crdt_destroy(&dp);
        shoal_crdt_destroy(&du);
    } else if (r < 8 && w->nq) {
        pr_deliver_one(w, prop_below(&w->rng, w->nq));
    } else {
        int from = first + (int)prop_below(&w->rng, PR_REPLICAS - first);
        if (from != i)
            pr_full_state(w, from, i);
    }
}

static void test_pruning_with_concurrent_removes(void **state)
{
    (void)state;
    uint64_t seed = prop_seed();
    int cases = prop_cases(400);
    for (int c = 0; c < cases; c++) {
        pr_world_t *w = calloc(1, sizeof *w);
        prop_rng_init(&w->rng, seed + (uint64_t)c);
        for (int i = 0; i < PR_REPLICAS; i++) {
            w->p[i] = shoal_orset_new();
            w->u[i] = shoal_orset_new();
        }
        for (int s = 0; s < 40; s++)
            pr_step(w, 0);
        /* R is gone; the owner holds all R ever did (the replicator prunes long after removal) */
        pr_full_state(w, 0, 1);
        for (int s = 0; s < 40; s++) {
            if (!w->pruned && prop_chance(&w->rng, 1, 8)) {
                assert_int_equal(shoal_crdt_prune(w->p[1], pr_node(0), pr_node(1), &w->plan), 0);
                w->pruned = w->knows[1] = true;
            }
            if (w->pruned && prop_chance(&w->rng, 1, 10))
                pr_learn(w, 2 + (int)prop_below(&w->rng, 2));
            pr_step(w, 1);
        }
        if (!w->pruned) {
            assert_int_equal(shoal_crdt_prune(w->p[1], pr_node(0), pr_node(1), &w->plan), 0);
            w->pruned = w->knows[1] = true;
        }
        for (int i = 2; i < PR_REPLICAS; i++)
            pr_learn(w, i);
        while (w->nq)
            pr_deliver_one(w, prop_below(&w->rng, w->nq));
        for (int round = 0; round < 2; round++)
            for (int a = 1; a < PR_REPLICAS; a++)
                for (int b = 1; b < PR_REPLICAS; b++)
                    if (a != b)
                        pr_full_state(w, a, b);
        for (int a = 0; a < PR_REPLICAS; a++) /* the other world: R's state too */
            for (int b = 0; b < PR_REPLICAS; b++)
                assert_int_equal(shoal_crdt_merge(w->u[b], w->u[a]), 0);
        for (int i = 1; i < PR_REPLICAS; i++) {
            prop_assert_same(w->p[i], w->p[1], "pruned replicas converge", seed + (uint64_t)c);
            assert_false(shoal_crdt_needs_pruning_from(w->p[i], pr_node(0)));
        }
        for (int k = 0; k < PR_ELEMS; k++) {
            char e[2] = {(char)('a' + k), 0};
            if (has(w->p[1], e) != has(w->u[1], e)) {
                char *a = render(w->p[1]), *b = render(w->u[1]);
                print_error("seed %llu: element %s: pruned %s, unpruned %s\n",
                            (unsigned long long)(seed + (uint64_t)c), e, a, b);
                free(a);
                free(b);
            }
            assert_int_equal(has(w->p[1], e), has(w->u[1], e));
        }
        for (int i = 0; i < PR_REPLICAS; i++) {
            shoal_crdt_destroy(&w->p[i]);
            shoal_crdt_destroy(&w->u[i]);
        }
        free(w);
    }
}

static void test_binary_elements(void **state)
{
    (void)state;
    shoal_crdt_t *s = shoal_orset_new();
    const uint8_t nul[] = {'a', 0, 'b'};
    const uint8_t hi[] = {0xff, 0x00};
    assert_int_equal(shoal_orset_add(s, X, nul, sizeof nul), 0);
    assert_int_equal(shoal_orset_add(s, X, hi, sizeof hi), 0);
    assert_int_equal(shoal_orset_add(s, X, "", 0), 0);   /* the empty element */
    assert_int_equal(shoal_orset_add(s, X, NULL, 0), 0); /* the same one */
    assert_int_equal(shoal_orset_add(s, X, "a", 1), 0);
    assert_int_equal(shoal_orset_size(s), 4);
    assert_true(shoal_orset_contains(s, nul, sizeof nul));
    assert_false(shoal_orset_contains(s, nul, 2)); /* "a\0" is another element */
    assert_true(shoal_orset_contains(s, NULL, 0));
    assert_true(shoal_orset_contains(s, hi, 2));
    assert_render(s, "ORSet{\"\", \"a\", \"a\\x00b\", \"\\xff\\x00\"}");
    shoal_crdt_t *r = prop_roundtrip(s);
    prop_assert_same(r, s, "binary round trip", 0);
    shoal_crdt_t *d = take(s);
    assert_render(d, "ORSetDelta{+\"\", +\"a\", +\"a\\x00b\", +\"\\xff\\x00\"}");
    assert_int_equal(shoal_orset_remove(s, X, NULL, 0), 0);
    assert_false(shoal_orset_contains(s, "", 0));
    assert_int_equal(shoal_orset_size(s), 3);
    shoal_crdt_destroy(&d);
    shoal_crdt_destroy(&r);
    shoal_crdt_destroy(&s);
}

typedef struct {
    uint8_t prev[32];
    size_t prev_len;
    size_t count;
} order_check_t;

static int check_ascending(const void *elem, size_t len, void *arg)
{
    order_check_t *c = arg;
    if (c->count > 0) {
        size_t n = c->prev_len < len ? c->prev_len : len;
        int cmp = n ? memcmp(c->prev, elem, n) : 0;
        assert_true(cmp < 0 || (cmp == 0 && c->prev_len < len));
    }
    assert_true(len <= sizeof c->prev);
    if (len)
        memcpy(c->prev, elem, len);
    c->prev_len = len;
    c->count++;
    return 0;
}

/* Elements that share long prefixes, differ after byte 8, embed and end with zero bytes: the
   canonical order (memcmp, then shorter first) holds in foreach and in the encoding. */
static void test_canonical_order(void **state)
{
    (void)state;
    static const uint8_t alphabet[] = {0x00, 0x01, 'a', 0xff};
    prop_rng_t rng;
    prop_rng_init(&rng, 42);
    shoal_crdt_t *s = shoal_orset_new();
    for (int i = 0; i < 3000; i++) {
        uint8_t e[20];
        size_t len = (size_t)prop_below(&rng, sizeof e + 1);
        for (size_t j = 0; j < len; j++)
            e[j] = j < 6 ? 'a' : alphabet[prop_below(&rng, 4)];
        assert_int_equal(shoal_orset_add(s, prop_node((int)prop_below(&rng, 3)), e, len), 0);
    }
    order_check_t c = {0};
    assert_int_equal(shoal_orset_foreach(s, check_ascending, &c), 0);
    assert_int_equal(c.count, shoal_orset_size(s));
    assert_true(c.count > 1000);
    shoal_crdt_t *r = prop_roundtrip(s); /* decode insists on strictly ascending elements */
    prop_assert_same(r, s, "canonical order round trip", 0);
    shoal_crdt_t *d = shoal_crdt_take_delta(s);
    shoal_crdt_t *rd = prop_roundtrip(d);
    shoal_crdt_destroy(&rd);
    shoal_crdt_destroy(&d);
    shoal_crdt_destroy(&r);
    shoal_crdt_destroy(&s);
}

/* ---------------------------------------------------------------------------------------------
 * Decoding
 */
static char *node_ids[3];

static void set_nodes(Shoal__Ddata__ORSet *m, size_t n)
{
    /* ids in ascending order */
    node_ids[0] = (char *)shoal_node_id(X);
    node_ids[1] = (char *)shoal_node_id(Y);
    node_ids[2] = (char *)shoal_node_id(Z);
    m->n_nodes = n;
    m->nodes = node_ids;
}

static void test_decode_rejects(void **state)
{
    (void)state;
    assert_true(strcmp(shoal_node_id(X), shoal_node_id(Y)) < 0);
    assert_true(strcmp(shoal_node_id(Y), shoal_node_id(Z)) < 0);
    const uint32_t ORSET = SHOAL_ORSET, DELTA = SHOAL_ORSET_DELTA;
    shoal_crdt_t *out = NULL;

    /* garbage */
    const uint8_t junk[] = {0x08, 0x05, 0x10, 0x01, 0x1a, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(shoal_crdt_decode(junk, sizeof junk, &out), SHOAL_EDECODE);
    assert_null(out);

    /* a valid hand-built state: {"a" (X1), "b" (X3, Y1)}, context X=3, Y=1 */
    ProtobufCBinaryData el[2] = {{1, (uint8_t *)"a"}, {1, (uint8_t *)"b"}};
    uint32_t dot_count[2] = {1, 2};
    uint32_t dot_node[3] = {0, 0, 1};
    uint64_t dot_counter[3] = {1, 3, 1};
    uint32_t vv_node[2] = {0, 1};
    uint64_t vv_counter[2] = {3, 1};
    Shoal__Ddata__CausalContext ctx = SHOAL__DDATA__CAUSAL_CONTEXT__INIT;
    ctx.n_vv_node = ctx.n_vv_counter = 2;
    ctx.vv_node = vv_node;
    ctx.vv_counter = vv_counter;
    Shoal__Ddata__ORSet m = SHOAL__DDATA__ORSET__INIT;
    set_nodes(&m, 2);
    m.context = &ctx;
    m.n_elements = m.n_dot_count = 2;
    m.elements = el;
    m.dot_count = dot_count;
    m.n_dot_node = m.n_dot_counter = 3;
    m.dot_node = dot_node;
    m.dot_counter = dot_counter;
    assert_int_equal(decode_msg(&m, ORSET, &out), 0);
    assert_render(out, "ORSet{\"a\", \"b\"}");
    shoal_crdt_t *again = prop_roundtrip(out);
    shoal_crdt_destroy(&again);
    shoal_crdt_destroy(&out);

    /* truncated: every strict prefix of an encoding fails (the payload is length-delimited) */
    {
        shoal_crdt_t *s = shoal_orset_new();
        for (int i = 0; i < 20; i++) {
            char e[16];
            snprintf(e, sizeof e, "e%d", i);
            assert_int_equal(add(s, i % 2 ? X : Y, e), 0);
        }
        shoal_buf_t b = {0};
        assert_int_equal(shoal_crdt_encode(s, &b), 0);
        for (size_t len = 5; len < b.len; len++) {
            assert_int_not_equal(shoal_crdt_decode(b.data, len, &out), 0);
            assert_null(out);
        }
        /* and prefixes of the payload itself never crash; what decodes is another value */
        Shoal__Ddata__ORSet *full = unpack_payload(s);
        size_t pn = shoal__ddata__orset__get_packed_size(full);
        uint8_t *p = malloc(pn);
        shoal__ddata__orset__pack(full, p);
        for (size_t len = 0; len < pn; len++) {
            Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
            env.type = ORSET;
            env.version = 1;
            env.payload.data = p;
            env.payload.len = len;
            shoal_buf_t eb = {0};
            size_t en = shoal__ddata__value__get_packed_size(&env);
            shoal_buf_reserve(&eb, en);
            eb.len = shoal__ddata__value__pack(&env, eb.data);
            if (shoal_crdt_decode(eb.data, eb.len, &out) == 0) {
                assert_false(shoal_crdt_equal(out, s));
                shoal_crdt_destroy(&out);
            }
            shoal_buf_free(&eb);
        }
        free(p);
        shoal__ddata__orset__free_unpacked(full, NULL);
        shoal_buf_free(&b);
        shoal_crdt_destroy(&s);
    }

#define REJECT(type, code)                                                                         \
    do {                                                                                           \
        assert_int_equal(decode_msg(&m, (type), &out), (code));                                    \
        assert_null(out);                                                                          \
    } while (0)

    /* unsorted elements */
    el[0].data = (uint8_t *)"c";
    REJECT(ORSET, SHOAL_EDECODE);
    el[0].data = (uint8_t *)"b"; /* duplicate */
    REJECT(ORSET, SHOAL_EDECODE);
    el[0].data = (uint8_t *)"a";

    /* a dot not covered by the context */
    dot_counter[1] = 4;
    REJECT(ORSET, SHOAL_EDECODE);
    dot_counter[1] = 3;
    m.context = NULL; /* no context at all */
    REJECT(ORSET, SHOAL_EDECODE);
    m.context = &ctx;

    /* bad node ids: malformed, out of the table, unsorted table, unreferenced node */
    char *bad_ids[2] = {(char *)shoal_node_id(X), "not-a-node"};
    m.nodes = bad_ids;
    REJECT(ORSET, SHOAL_ENODE);
    char *rev_ids[2] = {(char *)shoal_node_id(Y), (char *)shoal_node_id(X)};
    m.nodes = rev_ids;
    REJECT(ORSET, SHOAL_EDECODE);
    set_nodes(&m, 2);
    dot_node[2] = 2;
    REJECT(ORSET, SHOAL_EDECODE);
    dot_node[2] = 1;
    set_nodes(&m, 3); /* Z is in the table but nothing refers to it */
    REJECT(ORSET, SHOAL_EDECODE);
    set_nodes(&m, 2);
    vv_node[1] = 7;
    REJECT(ORSET, SHOAL_EDECODE);
    vv_node[1] = 1;

    /* counters: zero, dots not ascending within an element, a dot in two elements */
    dot_counter[0] = 0;
    REJECT(ORSET, SHOAL_EDECODE);
    dot_counter[0] = 1;
    dot_node[1] = 1;
    dot_node[2] = 0; /* (Y1, X3): not ascending */
    REJECT(ORSET, SHOAL_EDECODE);
    dot_node[1] = 0;
    dot_node[2] = 1;
    dot_counter[1] = 1; /* b has X1 too */
    dot_counter[2] = 3;
    dot_node[2] = 0;
    REJECT(ORSET, SHOAL_EDECODE);
    dot_counter[1] = 3;
    dot_counter[2] = 1;
    dot_node[2] = 1;

    /* lengths that do not add up; an element without dots */
    dot_count[1] = 3;
    REJECT(ORSET, SHOAL_EDECODE);
    dot_count[0] = 0;
    REJECT(ORSET, SHOAL_EDECODE);
    dot_count[0] = 1;
    dot_count[1] = 2;
    m.n_dot_counter = 2;
    REJECT(ORSET, SHOAL_EDECODE);
    m.n_dot_counter = 3;
    m.n_dot_count = 1;
    REJECT(ORSET, SHOAL_EDECODE);
    m.n_dot_count = 2;
    ctx.n_vv_counter = 1;
    REJECT(ORSET, SHOAL_EDECODE);
    ctx.n_vv_counter = 2;
    vv_counter[1] = 0;
    REJECT(ORSET, SHOAL_EDECODE);
    vv_counter[1] = 1;

    /* the cloud: above the vector with a gap, ascending */
    uint32_t cloud_node[2] = {1, 1};
    uint64_t cloud_counter[2] = {3, 5};
    ctx.n_cloud_node = ctx.n_cloud_counter = 2;
    ctx.cloud_node = cloud_node;
    ctx.cloud_counter = cloud_counter;
    assert_int_equal(decode_msg(&m, ORSET, &out), 0); /* Y: 1, then 3 and 5 */
    shoal_crdt_destroy(&out);
    cloud_counter[0] = 2; /* would continue the vector */
    REJECT(ORSET, SHOAL_EDECODE);
    cloud_counter[0] = 1; /* under the vector */
    REJECT(ORSET, SHOAL_EDECODE);
    cloud_counter[0] = 5; /* not ascending */
    cloud_counter[1] = 3;
    REJECT(ORSET, SHOAL_EDECODE);
    cloud_counter[0] = 3;
    cloud_counter[1] = 5;
    ctx.n_cloud_counter = 1;
    REJECT(ORSET, SHOAL_EDECODE);
    ctx.n_cloud_node = ctx.n_cloud_counter = 0;

    /* a full state must not carry seen dots */
    uint32_t seen_count[2] = {0, 1};
    uint32_t seen_node[1] = {0};
    uint64_t seen_counter[1] = {2};
    m.n_seen_count = 2;
    m.seen_count = seen_count;
    REJECT(ORSET, SHOAL_EDECODE);
    m.n_seen_node = m.n_seen_counter = 1;
    m.seen_node = seen_node;
    m.seen_counter = seen_counter;
    REJECT(ORSET, SHOAL_EDECODE);

    /* as a delta: valid without a context, refused with one */
    REJECT(DELTA, SHOAL_EDECODE);
    m.context = NULL;
    assert_int_equal(decode_msg(&m, DELTA, &out), 0);
    assert_render(out, "ORSetDelta{+\"a\", +\"b\"}");
    again = prop_roundtrip(out);
    shoal_crdt_destroy(&again);
    shoal_crdt_destroy(&out);
    /* seen must be disjoint from dots, and a dot belongs to one element */
    seen_counter[0] = 3; /* b: dot X3 and seen X3 */
    REJECT(DELTA, SHOAL_EDECODE);
    seen_counter[0] = 1; /* b has seen X1, a's dot */
    REJECT(DELTA, SHOAL_EDECODE);
    seen_counter[0] = 2;
    /* a removal (no dots) needs seen dots; an element with neither is refused */
    dot_count[0] = 0;
    dot_count[1] = 3;
    REJECT(DELTA, SHOAL_EDECODE); /* a says nothing */
    seen_count[0] = 1;
    seen_count[1] = 0;
    assert_int_equal(decode_msg(&m, DELTA, &out), 0);
    assert_render(out, "ORSetDelta{-\"a\", +\"b\"}");
    shoal_crdt_destroy(&out);
    m.n_seen_count = 1; /* one count per element */
    REJECT(DELTA, SHOAL_EDECODE);
    m.n_seen_count = 2;
    seen_counter[0] = 0;
    REJECT(DELTA, SHOAL_EDECODE);
    seen_counter[0] = 2;
#undef REJECT

    /* an unknown newer format version */
    shoal_crdt_t *s = shoal_orset_new();
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(s, &b), 0);
    Shoal__Ddata__Value *env = shoal__ddata__value__unpack(NULL, b.len, b.data);
    env->version = 2;
    uint8_t vb[64];
    size_t vn = shoal__ddata__value__pack(env, vb);
    assert_int_equal(shoal_crdt_decode(vb, vn, &out), SHOAL_EVERSION);
    shoal__ddata__value__free_unpacked(env, NULL);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&s);
}

/* ---------------------------------------------------------------------------------------------
 */
static void test_large_set_round_trip(void **state)
{
    (void)state;
    enum { N = 20000 };
    shoal_crdt_t *s = shoal_orset_new(), *t = shoal_orset_new();
    char e[32];
    for (int i = 0; i < N; i++) {
        snprintf(e, sizeof e, "element-%d", i);
        assert_int_equal(add(s, prop_node(i % 5), e), 0);
        if (i % 3 == 0)
            assert_int_equal(add(t, prop_node(5), e), 0); /* concurrent adds: two dots */
    }
    for (int i = 0; i < N; i += 7) {
        snprintf(e, sizeof e, "element-%d", i);
        assert_int_equal(rm(s, X, e), 0);
    }
    assert_int_equal(shoal_crdt_merge(s, t), 0);
    shoal_crdt_reset_delta(s);
    shoal_crdt_t *r = prop_roundtrip(s);
    prop_assert_same(r, s, "20k round trip", 0);
    size_t want = 0;
    for (int i = 0; i < N; i++)
        want += i % 7 != 0 || i % 3 == 0;
    assert_int_equal(shoal_orset_size(r), want);
    assert_true(has(r, "element-3"));
    assert_true(has(r, "element-21")); /* removed at X, re-added concurrently at node 5 */
    assert_false(has(r, "element-7"));
    shoal_crdt_t *c = shoal_crdt_clone(r);
    assert_true(shoal_crdt_equal(c, s));
    shoal_crdt_destroy(&c);
    shoal_crdt_destroy(&r);
    shoal_crdt_destroy(&s);
    shoal_crdt_destroy(&t);
}

/* Large deltas in any order: a clear of 20,000 elements arriving before the adds it removed
   (its dots come in key order, not counter order, and all lie above a gap) must stay cheap and
   right. */
static void test_large_deltas_any_order(void **state)
{
    (void)state;
    enum { N = 20000 };
    shoal_crdt_t *s = shoal_orset_new();
    char e[32];
    for (int k = 0; k < N; k++) {
        snprintf(e, sizeof e, "element-%d", (int)((unsigned)k * 7919u % N));
        assert_int_equal(add(s, X, e), 0);
    }
    shoal_crdt_t *adds = take(s);
    assert_int_equal(shoal_orset_clear(s, X), 0);
    shoal_crdt_t *clr = take(s);
    assert_int_equal(add(s, X, "element-5"), 0);
    shoal_crdt_t *last = take(s);

    shoal_crdt_t *r1 = shoal_orset_new(), *r2 = shoal_orset_new();
    assert_int_equal(shoal_crdt_merge_delta(r1, adds), 0);
    assert_int_equal(shoal_orset_size(r1), N);
    assert_int_equal(shoal_crdt_merge_delta(r1, clr), 0);
    assert_int_equal(shoal_orset_size(r1), 0);
    assert_int_equal(shoal_crdt_merge_delta(r1, last), 0);
    prop_assert_same(r1, s, "large deltas in order", 0);

    assert_int_equal(shoal_crdt_merge_delta(r2, last), 0);
    assert_int_equal(shoal_crdt_merge_delta(r2, clr), 0);
    assert_int_equal(shoal_orset_size(r2), 1);
    assert_int_equal(shoal_crdt_merge_delta(r2, adds), 0); /* nothing comes back */
    assert_int_equal(shoal_orset_size(r2), 1);
    assert_true(has(r2, "element-5"));
    prop_assert_same(r2, s, "large deltas in reverse order", 0);

    /* the clear and the adds as one group, applied to a replica that has seen neither */
    shoal_crdt_t *group = shoal_crdt_clone(clr);
    assert_int_equal(shoal_crdt_merge(group, adds), 0);
    assert_int_equal(shoal_crdt_merge(group, last), 0);
    shoal_crdt_t *r3 = shoal_orset_new();
    assert_int_equal(shoal_crdt_merge_delta(r3, group), 0);
    prop_assert_same(r3, s, "large group", 0);

    shoal_crdt_t *all[] = {s, adds, clr, last, r1, r2, group, r3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
}

static shoal_crdt_t *prop_create(void)
{
    return shoal_orset_new();
}

static void prop_op(shoal_crdt_t *v, const shoal_node_t *self, prop_rng_t *rng)
{
    static const char *universe[] = {"a", "b", "c", ""};
    const char *e = universe[prop_below(rng, 4)];
    unsigned what = (unsigned)prop_below(rng, 10);
    if (what < 6)
        assert_int_equal(add(v, self, e), 0);
    else if (what < 9) {
        int rc = rm(v, self, e);
        assert_true(rc == 0 || rc == SHOAL_ENOTFOUND);
    } else
        assert_int_equal(shoal_orset_clear(v, self), 0);
}

static const prop_type_t orset_prop = {
    .name = "ORSet",
    .create = prop_create,
    .random_op = prop_op,
    .deltas_converge = true,
    .strict_assoc = true,
};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&orset_prop, 2000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_remove_contains),
        cmocka_unit_test(test_api_misuse),
        cmocka_unit_test(test_concurrent_add_remove),
        cmocka_unit_test(test_clear_with_concurrent_add),
        cmocka_unit_test(test_delta_groups),
        cmocka_unit_test(test_delta_group_join_laws),
        cmocka_unit_test(test_duplicated_deltas),
        cmocka_unit_test(test_out_of_order_delivery_of_deltas),
        cmocka_unit_test(test_vector_only_context_would_lose_adds),
        cmocka_unit_test(test_pruning),
        cmocka_unit_test(test_pruning_with_concurrent_removes),
        cmocka_unit_test(test_binary_elements),
        cmocka_unit_test(test_canonical_order),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_large_set_round_trip),
        cmocka_unit_test(test_large_deltas_any_order),
        cmocka_unit_test(test_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
