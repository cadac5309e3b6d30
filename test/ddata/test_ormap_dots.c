/*  test_ormap_dots.c — dots in maps of sets (issue 31, part 4): an ORSet under a map key that is
    removed and re-created must never issue a dot its dropped predecessor carries on another
    replica (the merge would drop both elements); the traces of the issue and Pekko's ORMapSpec
    case "be able to update ORSet entry with remove+put"; a property test with key removals and
    re-adds over random, duplicated and reordered delivery of full states and deltas whose oracle
    is "an element added by the last operation on its key is there in the end"; removeBinding as
    Pekko's; and values written by 672634c (which reused dots) still decoding and merging. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "prop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A prop_node(0)
#define B prop_node(1)
#define C prop_node(2)

#define ORSET shoal_type_by_name("ORSet")

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */
static int join_cb(const void *e, size_t len, void *arg)
{
    shoal_buf_t *b = arg;
    if (b->len)
        shoal_buf_append(b, ",", 1);
    shoal_buf_append(b, e, len);
    return 0;
}

/* The elements of key's set joined with commas, or "(absent)". */
static const char *elems(const shoal_crdt_t *m, const char *key, shoal_buf_t *b)
{
    shoal_buf_reset(b);
    const shoal_crdt_t *set = shoal_ormap_get(m, key, strlen(key));
    if (!set)
        return "(absent)";
    assert_int_equal(shoal_orset_foreach(set, join_cb, b), 0);
    return shoal_buf_cstr(b);
}

typedef struct {
    const shoal_node_t *node;
    const char *elem;
    bool remove;
} set_arg_t;

static int set_op(shoal_crdt_t *v, void *arg)
{
    const set_arg_t *a = arg;
    if (a->remove) {
        int rc = shoal_orset_remove(v, a->node, a->elem, strlen(a->elem));
        return rc == SHOAL_ENOTFOUND ? 0 : rc;
    }
    return shoal_orset_add(v, a->node, a->elem, strlen(a->elem));
}

/* Adds elem to key's set, for both map kinds (ORMultiMap or ORMap<ORSet>). */
static void add(shoal_crdt_t *m, const shoal_node_t *n, const char *key, const char *elem)
{
    set_arg_t a = {n, elem, false};
    assert_int_equal(shoal_ormap_update(m, n, key, strlen(key), set_op, &a), 0);
}

static shoal_crdt_t *copy(const shoal_crdt_t *v)
{
    shoal_crdt_t *c = prop_roundtrip(v);
    shoal_crdt_reset_delta(c);
    return c;
}

/* Ships from's pending delta through encode/decode into `to`. */
static void ship_delta(shoal_crdt_t *from, shoal_crdt_t *to)
{
    shoal_crdt_t *d = shoal_crdt_take_delta(from);
    assert_non_null(d);
    shoal_crdt_t *sent = prop_roundtrip(d);
    assert_int_equal(shoal_crdt_merge_delta(to, sent), 0);
    shoal_crdt_destroy(&sent);
    shoal_crdt_destroy(&d);
}

static void merge_in(shoal_crdt_t *to, const shoal_crdt_t *from)
{
    shoal_crdt_t *sent = prop_roundtrip(from);
    assert_int_equal(shoal_crdt_merge(to, sent), 0);
    shoal_crdt_destroy(&sent);
}

static shoal_crdt_t *new_multimap(void)
{
    return shoal_ormultimap_new(false);
}

static shoal_crdt_t *new_multimap_deltas(void)
{
    return shoal_ormultimap_new(true);
}

static shoal_crdt_t *new_map_of_sets(void)
{
    return shoal_ormap_new(ORSET);
}

/* ---------------------------------------------------------------------------------------------
 * The issue's trace: A adds k -> x; B merges A; A removes k; A adds k -> y; A merges B, B merges
 * A. k = {y} on both (Pekko's answer); 672634c gave k = {} (y's dot (A, 1) was x's).
 */
static void issue_trace(shoal_crdt_t *(*create)(void), bool deltas)
{
    shoal_buf_t b = {0};
    shoal_crdt_t *a = create(), *bb = create();
    add(a, A, "k", "x");
    if (deltas)
        ship_delta(a, bb);
    else
        merge_in(bb, a);
    assert_string_equal(elems(bb, "k", &b), "x");
    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    add(a, A, "k", "y");
    assert_string_equal(elems(a, "k", &b), "y");
    shoal_crdt_reset_delta(a);
    merge_in(a, bb);
    merge_in(bb, a);
    assert_string_equal(elems(a, "k", &b), "y");
    assert_string_equal(elems(bb, "k", &b), "y");
    prop_assert_same(a, bb, "A and B after the exchange", 0);
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&bb);
    shoal_buf_free(&b);
}

static void test_issue_trace_multimap(void **state)
{
    (void)state;
    issue_trace(new_multimap, false);
    issue_trace(new_multimap, true);
}

static void test_issue_trace_map_of_sets(void **state)
{
    (void)state;
    issue_trace(new_map_of_sets, false);
    issue_trace(new_map_of_sets, true);
}

/* The same with the removal and re-add shipped as deltas to B, which still holds x's set when
   the full states meet at a third replica. */
static void test_issue_trace_relayed(void **state)
{
    (void)state;
    shoal_crdt_t *(*kinds[])(void) = {new_multimap, new_map_of_sets, new_multimap_deltas};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        shoal_buf_t b = {0};
        shoal_crdt_t *a = kinds[i](), *bb = kinds[i](), *c = kinds[i]();
        add(a, A, "k", "x");
        ship_delta(a, bb);
        merge_in(c, bb); /* C holds x's set, seen through B */
        assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
        ship_delta(a, bb);
        add(a, A, "k", "y");
        ship_delta(a, bb);
        assert_string_equal(elems(bb, "k", &b), "y");
        merge_in(c, bb);
        merge_in(bb, c);
        merge_in(a, c);
        assert_string_equal(elems(a, "k", &b), "y");
        assert_string_equal(elems(bb, "k", &b), "y");
        assert_string_equal(elems(c, "k", &b), "y");
        prop_assert_same(a, c, "A and C", 0);
        prop_assert_same(bb, c, "B and C", 0);
        shoal_crdt_destroy(&a);
        shoal_crdt_destroy(&bb);
        shoal_crdt_destroy(&c);
        shoal_buf_free(&b);
    }
}

/* Pekko's ORMapSpec "be able to update ORSet entry with remove+put" (its `put` of a new ORSet
   is, here, an update of the key's value, which starts empty after the removal). */
static void test_pekko_update_orset_entry_with_remove_put(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_crdt_t *m1 = shoal_ormap_new(ORSET);
    add(m1, A, "a", "A01");
    add(m1, A, "a", "A02");
    add(m1, A, "a", "A03");
    add(m1, A, "b", "B01");
    add(m1, A, "b", "B02");
    add(m1, A, "b", "B03");
    shoal_crdt_t *m2 = shoal_ormap_new(ORSET);
    add(m2, B, "c", "C");

    shoal_crdt_t *merged1 = copy(m1);
    merge_in(merged1, m2);

    shoal_crdt_t *m3 = copy(merged1);
    assert_int_equal(shoal_ormap_remove(m3, A, "b", 1), 0);
    add(m3, A, "b", "B2");

    shoal_crdt_t *merged2 = copy(merged1);
    merge_in(merged2, m3);
    assert_string_equal(elems(merged2, "a", &b), "A01,A02,A03");
    assert_string_equal(elems(merged2, "b", &b), "B2"); /* 672634c: B02,B03 */
    assert_string_equal(elems(merged2, "c", &b), "C");

    shoal_crdt_t *m4 = copy(merged1);
    add(m4, B, "b", "B3");
    shoal_crdt_t *merged3 = copy(m3);
    merge_in(merged3, m4);
    assert_string_equal(elems(merged3, "a", &b), "A01,A02,A03");
    assert_string_equal(elems(merged3, "b", &b), "B2,B3");
    assert_string_equal(elems(merged3, "c", &b), "C");

    shoal_crdt_t *all[] = {m1, m2, merged1, m3, merged2, m4, merged3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        shoal_crdt_destroy(&all[i]);
    shoal_buf_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * removeBinding as Pekko's: the key is always updated, and goes when its set is left empty.
 */
static void test_remove_binding_absent_element_updates_key(void **state)
{
    (void)state;
    bool modes[] = {false, true};
    for (size_t i = 0; i < 2; i++) {
        shoal_buf_t b = {0};
        shoal_crdt_t *a = shoal_ormultimap_new(modes[i]);
        add(a, A, "k", "x");
        shoal_crdt_t *bb = copy(a);
        /* B removes a binding k does not have while A removes k: B's update of the key is
           concurrent with the removal, so the key stays, with its set (672634c: k absent) */
        assert_int_equal(shoal_ormultimap_remove_binding(bb, B, "k", 1, "nope", 4), 0);
        assert_string_equal(elems(bb, "k", &b), "x");
        assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
        merge_in(a, bb);
        merge_in(bb, a);
        /* with value deltas the removal cleared the set first, and that clear observed x */
        const char *want = modes[i] ? "" : "x";
        assert_string_equal(elems(a, "k", &b), want);
        assert_string_equal(elems(bb, "k", &b), want);
        prop_assert_same(a, bb, "A and B", 0);
        shoal_crdt_destroy(&a);
        shoal_crdt_destroy(&bb);
        shoal_buf_free(&b);
    }
}

static void test_remove_binding_removes_key_left_empty(void **state)
{
    (void)state;
    bool modes[] = {false, true};
    for (size_t i = 0; i < 2; i++) {
        shoal_buf_t b = {0};
        shoal_crdt_t *a = shoal_ormultimap_new(modes[i]);
        add(a, A, "k", "x");
        add(a, A, "k", "y");
        shoal_crdt_t *bb = copy(a);
        /* each side removes the other binding: after the merge k holds an empty set */
        assert_int_equal(shoal_ormultimap_remove_binding(a, A, "k", 1, "x", 1), 0);
        assert_int_equal(shoal_ormultimap_remove_binding(bb, B, "k", 1, "y", 1), 0);
        merge_in(a, bb);
        assert_string_equal(elems(a, "k", &b), "");
        /* removing any binding, held or not, removes the emptied key (672634c: SHOAL_ENOTFOUND
           and the empty set stayed) */
        assert_int_equal(shoal_ormultimap_remove_binding(a, A, "k", 1, "x", 1), 0);
        assert_null(shoal_ormultimap_get(a, "k", 1));
        assert_int_equal(shoal_ormap_size(a), 0);
        merge_in(bb, a);
        assert_null(shoal_ormultimap_get(bb, "k", 1));
        prop_assert_same(a, bb, "A and B", 0);
        shoal_crdt_destroy(&a);
        shoal_crdt_destroy(&bb);
        shoal_buf_free(&b);
    }
}

/* With value deltas, a removal relayed through a third replica holds: B keeps A's tombstone (the
   cleared set and its context) where Pekko garbage-collects it at the merge, so C, which still
   holds k -> {x}, learns that x was removed and a later add does not bring x back. */
static void test_value_deltas_relayed_removal(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_crdt_t *a = shoal_ormultimap_new(true);
    add(a, A, "k", "x");
    shoal_crdt_t *bb = copy(a), *c = copy(a);
    assert_int_equal(shoal_ormap_remove(a, A, "k", 1), 0);
    merge_in(bb, a);
    merge_in(c, bb); /* the removal reaches C through B only */
    assert_null(shoal_ormultimap_get(c, "k", 1));
    add(c, C, "k", "z");
    assert_string_equal(elems(c, "k", &b), "z");
    merge_in(a, c);
    assert_string_equal(elems(a, "k", &b), "z");
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&bb);
    shoal_crdt_destroy(&c);
    shoal_buf_free(&b);
}

/* ---------------------------------------------------------------------------------------------
 * Values written by 672634c, which reused dots: the issue's trace as that build encoded it, A's
 * state (k -> {y}, y's dot (A, 1)) and B's (k -> {x}, x's dot (A, 1) too), for an ORMultiMap and
 * an ORMap<ORSet>. A is prop_node(0). They decode and merge as they did (the shared dot drops
 * both elements where the copies meet: nothing can tell which add it named), and an add made by
 * this build on top of them is kept.
 */
static const uint8_t old_mm_a[] =
    "\x08\x07\x10\x01\x1a\x58\x08\x05\x12\x26\x0a\x10\x31\x32\x37\x2e\x30\x2e\x30\x2e\x31\x3a"
    "\x32\x35\x35\x31\x3a\x31\x12\x06\x0a\x01\x00\x12\x01\x02\x1a\x01\x6b\x22\x01\x01\x2a\x01"
    "\x00\x32\x01\x02\x1a\x2c\x08\x05\x10\x01\x1a\x26\x0a\x10\x31\x32\x37\x2e\x30\x2e\x30\x2e"
    "\x31\x3a\x32\x35\x35\x31\x3a\x31\x12\x06\x0a\x01\x00\x12\x01\x01\x1a\x01\x79\x22\x01\x01"
    "\x2a\x01\x00\x32\x01\x01";
static const uint8_t old_mm_b[] =
    "\x08\x07\x10\x01\x1a\x58\x08\x05\x12\x26\x0a\x10\x31\x32\x37\x2e\x30\x2e\x30\x2e\x31\x3a"
    "\x32\x35\x35\x31\x3a\x31\x12\x06\x0a\x01\x00\x12\x01\x01\x1a\x01\x6b\x22\x01\x01\x2a\x01"
    "\x00\x32\x01\x01\x1a\x2c\x08\x05\x10\x01\x1a\x26\x0a\x10\x31\x32\x37\x2e\x30\x2e\x30\x2e"
    "\x31\x3a\x32\x35\x35\x31\x3a\x31\x12\x06\x0a\x01\x00\x12\x01\x01\x1a\x01\x78\x22\x01\x01"
    "\x2a\x01\x00\x32\x01\x01";
/* ORMap<ORSet>: the same bytes but the type tag (6 for ORMap, 7 for ORMultiMap). */

static shoal_crdt_t *decode_old(const uint8_t *bytes, size_t len, uint8_t tag)
{
    uint8_t *b = malloc(len);
    assert_non_null(b);
    memcpy(b, bytes, len);
    b[1] = tag; /* Value.type */
    shoal_crdt_t *v = NULL;
    assert_int_equal(shoal_crdt_decode(b, len, &v), 0);
    free(b);
    return v;
}

static void test_old_values_with_reused_dots(void **state)
{
    (void)state;
    const uint8_t tags[] = {7, 6};
    for (size_t i = 0; i < 2; i++) {
        shoal_buf_t b = {0};
        shoal_crdt_t *a = decode_old(old_mm_a, sizeof old_mm_a - 1, tags[i]);
        shoal_crdt_t *bb = decode_old(old_mm_b, sizeof old_mm_b - 1, tags[i]);
        assert_string_equal(elems(a, "k", &b), "y");
        assert_string_equal(elems(bb, "k", &b), "x");
        /* as on 672634c: both elements of the shared dot go, in either order */
        shoal_crdt_t *ab = copy(a), *ba = copy(bb);
        merge_in(ab, bb);
        merge_in(ba, a);
        assert_string_equal(elems(ab, "k", &b), "");
        prop_assert_same(ab, ba, "old states merged both ways", 0);
        /* A, now on this build, adds to the key it holds and removes and re-adds another: the
           new elements survive the old states */
        add(a, A, "k", "z");
        add(a, A, "j", "v");
        merge_in(bb, a); /* B keeps j -> {v} */
        assert_int_equal(shoal_ormap_remove(a, A, "j", 1), 0);
        add(a, A, "j", "w");
        shoal_crdt_reset_delta(a);
        merge_in(a, bb);
        merge_in(a, ab);
        merge_in(bb, a);
        assert_string_equal(elems(a, "k", &b), "z");
        assert_string_equal(elems(a, "j", &b), "w");
        prop_assert_same(a, bb, "after the new adds", 0);
        shoal_crdt_t *all[] = {a, bb, ab, ba};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            shoal_crdt_destroy(&all[k]);
        shoal_buf_free(&b);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Property: random operations with key removals and re-adds on 3-4 replicas, delivered as full
 * states (any order, duplicated) and deltas (each origin's in its order as the replicator keeps
 * it for maps, interleaved across origins and with full states, duplicated, old ones again).
 * Oracle: when the last operation on a key (in the order the trace made them) added element e,
 * e is in that key's set on every replica once all deltas are in, and after anti-entropy; and
 * the replicas converge.
 */
#define NREP   4
#define NKEYS  2
#define NELEMS 3

static const char *const pkeys[NKEYS] = {"k", "j"};
static const char *const pelems[NELEMS] = {"x", "y", "z"};

typedef struct {
    shoal_crdt_t **d;
    size_t n, cap;
} dlog_t;

static void dlog_push(dlog_t *l, shoal_crdt_t *d)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->d = realloc(l->d, l->cap * sizeof *l->d);
        assert_non_null(l->d);
    }
    l->d[l->n++] = d;
}

/* The last operation on each key: the element it added, or -1 (a removal of some kind). */
typedef struct {
    int last_add[NKEYS];
} oracle_t;

static void random_op(shoal_crdt_t *m, const shoal_node_t *self, prop_rng_t *rng, oracle_t *o)
{
    int k = (int)prop_below(rng, NKEYS), e = (int)prop_below(rng, NELEMS);
    unsigned what = (unsigned)prop_below(rng, 10);
    bool multimap = shoal_crdt_type(m) == shoal_type_by_name("ORMultiMap");
    int rc;
    if (what < 5) {
        if (multimap)
            rc = shoal_ormultimap_add(m, self, pkeys[k], 1, pelems[e], 1);
        else {
            set_arg_t a = {self, pelems[e], false};
            rc = shoal_ormap_update(m, self, pkeys[k], 1, set_op, &a);
        }
        o->last_add[k] = e;
    } else if (what < 7) {
        if (multimap)
            rc = shoal_ormultimap_remove_binding(m, self, pkeys[k], 1, pelems[e], 1);
        else {
            set_arg_t a = {self, pelems[e], true};
            rc = shoal_ormap_update(m, self, pkeys[k], 1, set_op, &a);
        }
        o->last_add[k] = -1;
    } else {
        rc = shoal_ormap_remove(m, self, pkeys[k], 1);
        o->last_add[k] = -1;
    }
    assert_true(rc == 0 || rc == SHOAL_ENOTFOUND);
}

/* The first violation of the oracle, or NULL. */
static const char *oracle_violation(const oracle_t *o, shoal_crdt_t *const *r, int n)
{
    for (int k = 0; k < NKEYS; k++) {
        if (o->last_add[k] < 0)
            continue;
        const char *e = pelems[o->last_add[k]];
        for (int i = 0; i < n; i++) {
            const shoal_crdt_t *set = shoal_ormap_get(r[i], pkeys[k], 1);
            if (!set || !shoal_orset_contains(set, e, strlen(e)))
                return pkeys[k];
        }
    }
    return NULL;
}

typedef struct {
    int cases, lost, diverged;
    uint64_t first_lost_seed;
} tally_t;

/* One case; mode 0: full states only, 1: deltas only, 2: both. */
static void run_case(shoal_crdt_t *(*create)(void), uint64_t seed, int mode, tally_t *t)
{
    prop_rng_t rng;
    prop_rng_init(&rng, seed);
    int n = 3 + (int)prop_below(&rng, NREP - 2);
    shoal_crdt_t *r[NREP];
    dlog_t log[NREP] = {{0}};
    size_t next[NREP][NREP] = {{0}};
    oracle_t o = {{-1, -1}};
    for (int i = 0; i < n; i++)
        r[i] = create();
    int steps = 10 + (int)prop_below(&rng, 50);
    for (int s = 0; s < steps; s++) {
        int i = (int)prop_below(&rng, (uint64_t)n), j = (int)prop_below(&rng, (uint64_t)n);
        unsigned what = (unsigned)prop_below(&rng, 10);
        if (what < 5) {
            random_op(r[i], prop_node(i), &rng, &o);
            shoal_crdt_t *d = shoal_crdt_take_delta(r[i]);
            if (d && mode != 0)
                dlog_push(&log[i], d);
            else
                shoal_crdt_destroy(&d);
        } else if (i != j && (mode == 1 || (mode == 2 && what < 8))) {
            size_t k = 1 + prop_below(&rng, 3);
            while (k-- && next[i][j] < log[j].n) {
                shoal_crdt_t *sent = prop_roundtrip(log[j].d[next[i][j]]);
                assert_int_equal(shoal_crdt_merge_delta(r[i], sent), 0);
                if (prop_chance(&rng, 1, 5)) /* duplicated */
                    assert_int_equal(shoal_crdt_merge_delta(r[i], sent), 0);
                shoal_crdt_destroy(&sent);
                next[i][j]++;
            }
            if (next[i][j] > 0 && prop_chance(&rng, 1, 5)) /* an old one, again */
                assert_int_equal(
                    shoal_crdt_merge_delta(r[i], log[j].d[prop_below(&rng, next[i][j])]), 0);
        } else if (i != j) {
            merge_in(r[i], r[j]);
            if (prop_chance(&rng, 1, 5))
                merge_in(r[i], r[j]);
        }
    }
    /* every remaining delta, then (for full states) a round of full states */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j)
                for (; next[i][j] < log[j].n; next[i][j]++)
                    assert_int_equal(shoal_crdt_merge_delta(r[i], log[j].d[next[i][j]]), 0);
    const char *lost = mode == 0 ? NULL : oracle_violation(&o, r, n);
    for (int round = 0; round < 2 * n; round++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (i != j)
                    assert_int_equal(shoal_crdt_merge(r[i], r[j]), 0);
    if (!lost)
        lost = oracle_violation(&o, r, n);
    bool same = true;
    for (int i = 1; i < n; i++)
        same = same && shoal_crdt_equal(r[0], r[i]);
    t->cases++;
    if (lost) {
        if (t->lost++ == 0) {
            t->first_lost_seed = seed;
            shoal_buf_t b = {0};
            shoal_crdt_render(r[0], &b);
            printf("  lost the last add of key \"%s\" (case seed %llu, mode %d): %s\n", lost,
                   (unsigned long long)seed, mode, shoal_buf_cstr(&b));
            shoal_buf_free(&b);
        }
    }
    t->diverged += !same;
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < log[i].n; k++)
            shoal_crdt_destroy(&log[i].d[k]);
        free(log[i].d);
        shoal_crdt_destroy(&r[i]);
    }
}

static void property(const char *name, shoal_crdt_t *(*create)(void), int cases)
{
    uint64_t base = prop_seed() ^ 0x3131;
    tally_t t = {0};
    for (int c = 0; c < prop_cases(cases); c++)
        run_case(create, base + (uint64_t)c, c % 3, &t);
    printf("%s: %d of %d cases lost an element, %d diverged (base seed %llu)\n", name, t.lost,
           t.cases, t.diverged, (unsigned long long)prop_seed());
    if (t.lost || t.diverged) {
        print_error("%s: first lost element in case seed %llu; replay with SHOAL_SEED=%llu\n", name,
                    (unsigned long long)t.first_lost_seed, (unsigned long long)prop_seed());
        fail();
    }
}

static void test_property_multimap(void **state)
{
    (void)state;
    property("ORMultiMap", new_multimap, 600);
}

static void test_property_multimap_value_deltas(void **state)
{
    (void)state;
    property("ORMultiMap with value deltas", new_multimap_deltas, 600);
}

static void test_property_map_of_sets(void **state)
{
    (void)state;
    property("ORMap<ORSet>", new_map_of_sets, 600);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_issue_trace_multimap),
        cmocka_unit_test(test_issue_trace_map_of_sets),
        cmocka_unit_test(test_issue_trace_relayed),
        cmocka_unit_test(test_pekko_update_orset_entry_with_remove_put),
        cmocka_unit_test(test_remove_binding_absent_element_updates_key),
        cmocka_unit_test(test_remove_binding_removes_key_left_empty),
        cmocka_unit_test(test_value_deltas_relayed_removal),
        cmocka_unit_test(test_old_values_with_reused_dots),
        cmocka_unit_test(test_property_multimap),
        cmocka_unit_test(test_property_multimap_value_deltas),
        cmocka_unit_test(test_property_map_of_sets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
