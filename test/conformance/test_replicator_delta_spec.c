/*  test_replicator_delta_spec.c — conformance: Akka/Pekko's ReplicatorDeltaSpec, see
    docs/conformance.md. Four members, each with two replicators fed the same operations: the
    default one with delta propagation (the spec's deltaReplicator) and one of role "full" with
    deltas off (the fullStateReplicator); both must end with the same values.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "members.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 4
#define T 5000

#define DELTA(i) (cm[i].rep)
#define FULL(i)  (cm[i].rep2)

/* "join cluster" */
static void join_cluster(void **state)
{
    (void)state;
    cm_start_delta_and_full(N);
}

/* "propagate delta" */
static void propagate_delta(void **state)
{
    (void)state;
    shoal_consistency_t l = c_local();
    const char *pn[] = {"A", "B", "C"}, *sets[] = {"D", "E", "F"};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(cm_pncounter_add(FULL(0), pn[k], 1, l), 0);
        assert_int_equal(cm_pncounter_add(DELTA(0), pn[k], 1, l), 0);
        assert_int_equal(cm_set_add(FULL(0), sets[k], SHOAL_ORSET, "a", l), 0);
        assert_int_equal(cm_set_add(DELTA(0), sets[k], SHOAL_ORSET, "a", l), 0);
    }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 3; k++) {
            assert_true(cm_wait_pncounter(FULL(i), pn[k], 1, 5000));
            assert_true(cm_wait_set(DELTA(i), sets[k], "a", 5000));
        }
}

/* "work with write consistency" */
typedef struct {
    const char *elem;
    int rc;
} wa_t;

static void *write_all_add(void *arg)
{
    wa_t *w = arg;
    w->rc = cm_set_add(DELTA(0), "D", SHOAL_ORSET, w->elem, c_all(T));
    return NULL;
}

static void work_with_write_consistency(void **state)
{
    (void)state;
    assert_int_equal(cm_set_add(FULL(0), "D", SHOAL_ORSET, "A", c_all(T)), 0);
    assert_int_equal(cm_set_add(DELTA(0), "D", SHOAL_ORSET, "A", c_all(T)), 0);
    /* a successful WriteAll is everywhere when it returns */
    char got[64];
    for (int i = 0; i < N; i++) {
        assert_int_equal(cm_set_get(DELTA(i), "D", c_local(), got, sizeof got), 0);
        assert_string_equal(got, "A,a");
    }
    /* several at the same time (their deltas may arrive out of order; full state sorts it out) */
    pthread_t th[3];
    wa_t w[3] = {{"B", 1}, {"C", 1}, {"D", 1}};
    for (int k = 0; k < 3; k++)
        pthread_create(&th[k], NULL, write_all_add, &w[k]);
    for (int k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(w[k].rc, 0);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(cm_set_get(DELTA(i), "D", c_local(), got, sizeof got), 0);
        assert_string_equal(got, "A,B,C,D,a");
    }
    assert_int_equal(cm_set_add(FULL(0), "D", SHOAL_ORSET, "A,B,C,D", c_all(T)), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(cm_set_get(FULL(i), "D", c_local(), got, sizeof got), 0);
        assert_string_equal(got, "A,B,C,D,a");
    }
}

/* "preserve causal consistency for None delta". The spec's type, a user-defined one here too
   (shoal_type_register): Highest, a number merged by max whose update either carries a delta
   (incr: the delta is the new value, a Highest itself, as the spec's `type D = Highest`) or none
   (incr_no_delta), and which asks for causal delivery of its deltas (the spec's
   RequiresCausalDeliveryOfDeltas; delta_causal here). */
#define HIGHEST_TAG 150

typedef struct highest {
    shoal_crdt_t base;
    int64_t n;
    struct highest *delta; /* of the update in progress (NULL: none) */
} highest_t;

static const shoal_type_t highest_type;

static shoal_crdt_t *hi_make(int64_t n)
{
    highest_t *h = calloc(1, sizeof *h);
    assert_non_null(h);
    h->base.type = &highest_type;
    h->n = n;
    return &h->base;
}

static shoal_crdt_t *hi_create(void)
{
    return hi_make(0);
}

static void hi_destroy(shoal_crdt_t *self)
{
    highest_t *h = (highest_t *)self;
    if (h->delta)
        hi_destroy(&h->delta->base);
    free(h);
}

static shoal_crdt_t *hi_clone(const shoal_crdt_t *self)
{
    return hi_make(((const highest_t *)self)->n);
}

static int hi_merge(shoal_crdt_t *self, const shoal_crdt_t *other)
{
    highest_t *h = (highest_t *)self;
    int64_t n = ((const highest_t *)other)->n;
    if (n > h->n)
        h->n = n;
    return 0;
}

static const shoal_crdt_t *hi_delta(const shoal_crdt_t *self)
{
    const highest_t *h = (const highest_t *)self;
    return h->delta ? &h->delta->base : NULL;
}

static shoal_crdt_t *hi_take_delta(shoal_crdt_t *self)
{
    highest_t *h = (highest_t *)self;
    shoal_crdt_t *d = h->delta ? &h->delta->base : NULL;
    h->delta = NULL;
    return d;
}

static int hi_encode(const shoal_crdt_t *self, shoal_buf_t *out)
{
    uint8_t b[8];
    uint64_t n = (uint64_t)((const highest_t *)self)->n;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(n >> (8 * i));
    shoal_buf_append(out, b, sizeof b);
    return 0;
}

static int hi_decode(const uint8_t *data, size_t len, int depth, shoal_crdt_t **out)
{
    (void)depth;
    if (len != 8)
        return SHOAL_EDECODE;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)data[i] << (8 * i);
    *out = hi_make((int64_t)n);
    return 0;
}

static int hi_render(const shoal_crdt_t *self, shoal_buf_t *out)
{
    shoal_buf_printf(out, "Highest(%lld)", (long long)((const highest_t *)self)->n);
    return 0;
}

static const shoal_type_t highest_type = {
    .name = "ReplicatorDeltaSpec.Highest",
    .tag = HIGHEST_TAG,
    .format_version = 1,
    .delta_type = &highest_type,
    .delta_causal = true,
    .create = hi_create,
    .destroy = hi_destroy,
    .clone = hi_clone,
    .merge = hi_merge,
    .delta = hi_delta,
    .take_delta = hi_take_delta,
    .merge_delta = hi_merge,
    .encode_payload = hi_encode,
    .decode_payload = hi_decode,
    .render = hi_render,
};

typedef struct {
    int64_t by;
    bool with_delta;
} incr_t;

/* incr(i): n += i with the delta Highest(n); incrNoDelta(i): n += i, no delta */
static int hi_incr(shoal_crdt_t *value, void *arg)
{
    const incr_t *in = arg;
    highest_t *h = (highest_t *)value;
    h->n += in->by;
    if (in->with_delta) {
        if (h->delta)
            hi_destroy(&h->delta->base);
        h->delta = (highest_t *)hi_make(h->n);
    }
    return 0;
}

static int hi_update(int i, int64_t by, bool with_delta, shoal_consistency_t c)
{
    incr_t in = {by, with_delta};
    return shoal_replicator_update_typed_sync(DELTA(i), "high", &highest_type, &c, hi_incr, &in);
}

static int64_t hi_get(int i)
{
    shoal_consistency_t l = c_local();
    shoal_crdt_t *v = NULL;
    if (shoal_replicator_get_sync(DELTA(i), "high", &highest_type, &l, &v) != 0 || !v)
        return -1;
    int64_t n = ((highest_t *)v)->n;
    shoal_crdt_destroy(&v);
    return n;
}

typedef struct {
    int i;
    int64_t want;
} hi_want_t;

static bool hi_reads(void *arg)
{
    hi_want_t *w = arg;
    return hi_get(w->i) == w->want;
}

static void hi_wait_all(int64_t want)
{
    for (int i = 0; i < N; i++) {
        hi_want_t w = {i, want};
        if (!wait_until(hi_reads, &w, 5000))
            fail_msg("node %d reads Highest %lld, not %lld", i, (long long)hi_get(i),
                     (long long)want);
    }
}

static void preserve_causal_consistency_for_none_delta(void **state)
{
    (void)state;
    assert_int_equal(shoal_type_register(&highest_type), 0);
    assert_int_equal(hi_update(0, 1, true, c_local()), 0);
    assert_int_equal(hi_get(0), 1);
    hi_wait_all(1);

    assert_int_equal(hi_update(0, 2, true, c_all(T)), 0);
    assert_int_equal(hi_update(0, 5, false, c_local()), 0); /* no delta */
    assert_int_equal(hi_update(0, 10, true, c_local()), 0);
    assert_int_equal(hi_get(0), 18);
    /* the spec's others read 3 here: Akka numbers the update without a delta, so incr(10)'s
       delta comes after a gap and is skipped until full state arrives. Shoal merges a delta that
       is a value of the type itself as state, a join, in any order (replicator.c,
       repl_apply_delta), and an update without a delta takes no delta number: incr(10)'s delta,
       Highest(18), is applied, which is the value full state brings. What they read is a value
       the first node had since the WriteAll: 3, 8 (full-state gossip between the two local
       updates) or 18, nothing else. */
    for (int i = 1; i < N; i++) {
        int64_t n = hi_get(i);
        if (n != 3 && n != 8 && n != 18)
            fail_msg("node %d reads Highest %lld after incr(2), incrNoDelta(5), incr(10)", i,
                     (long long)n);
    }
    hi_wait_all(18);

    /* a WriteAll (full state where a delta cannot be applied), then a delta again */
    assert_int_equal(hi_update(0, 100, true, c_all(T)), 0);
    assert_int_equal(hi_update(0, 4, true, c_local()), 0);
    hi_wait_all(122);
}

/* "be eventually consistent": random operations on every node, each applied to both
   replicators; in the end both hold the same values everywhere. As in the spec, adds to F and
   every remove come from the first node only; removes are limited to F here (the spec also
   removes from D and E, which the other nodes add to: a remove there can observe different adds
   in the two replicators, so the spec's outcome is not deterministic). */
static unsigned seed;

typedef struct {
    int node;
    unsigned rnd;
    int errors;
} ops_t;

static shoal_consistency_t rnd_consistency(unsigned *rnd)
{
    int n = (int)(rand_r(rnd) % 100);
    return n < 90 ? c_local() : n < 95 ? c_n(2, T) : c_majority(T);
}

static void *random_ops(void *arg)
{
    ops_t *o = arg;
    char avail[16] = "";
    for (int k = 0; k < 50; k++) {
        int op = (int)(rand_r(&o->rnd) % 4);
        shoal_consistency_t c = rnd_consistency(&o->rnd);
        if (op == 0) {
            struct timespec ts = {0, (long)(rand_r(&o->rnd) % 20) * 1000000};
            nanosleep(&ts, NULL);
        } else if (op == 1 || op == 2) {
            const char *key = (const char *[]){"A", "B", "C"}[rand_r(&o->rnd) % 3];
            int64_t n = (int64_t)(rand_r(&o->rnd) % 10) * (op == 1 ? 1 : -1);
            int a = cm_pncounter_add(FULL(o->node), key, n, c);
            int b = cm_pncounter_add(DELTA(o->node), key, n, c);
            o->errors += (a != 0 && a != SHOAL_ETIMEOUT) + (b != 0 && b != SHOAL_ETIMEOUT);
        } else {
            int which = (int)(rand_r(&o->rnd) % 3);
            const char *key = (const char *[]){"D", "E", "F"}[which];
            bool remove = o->node == 0 && which == 2 && rand_r(&o->rnd) % 3 == 0 && avail[0];
            if ((which == 2 && o->node != 0) || o->node == 3)
                continue;
            char elem[2] = {0};
            if (remove) {
                elem[0] = avail[rand_r(&o->rnd) % strlen(avail)];
                int a = cm_set_remove(FULL(o->node), key, elem, c);
                int b = cm_set_remove(DELTA(o->node), key, elem, c);
                o->errors += (a != 0 && a != SHOAL_ETIMEOUT) + (b != 0 && b != SHOAL_ETIMEOUT);
            } else {
                elem[0] = (char)('a' + rand_r(&o->rnd) % 10);
                if (which == 2 && !strchr(avail, elem[0]))
                    avail[strlen(avail)] = elem[0];
                int a = cm_set_add(FULL(o->node), key, SHOAL_ORSET, elem, c);
                int b = cm_set_add(DELTA(o->node), key, SHOAL_ORSET, elem, c);
                o->errors += (a != 0 && a != SHOAL_ETIMEOUT) + (b != 0 && b != SHOAL_ETIMEOUT);
            }
        }
    }
    return NULL;
}

typedef struct {
    int i;
    const char *key;
    bool counter;
} same_t;

static bool same_value(void *arg)
{
    same_t *s = arg;
    if (s->counter) {
        int64_t a = 0, b = 0;
        int ra = cm_pncounter(FULL(s->i), s->key, c_local(), &a);
        int rb = cm_pncounter(DELTA(s->i), s->key, c_local(), &b);
        return ra == rb && a == b;
    }
    char a[256], b[256];
    int ra = cm_set_get(FULL(s->i), s->key, c_local(), a, sizeof a);
    int rb = cm_set_get(DELTA(s->i), s->key, c_local(), b, sizeof b);
    return ra == rb && strcmp(a, b) == 0;
}

static void be_eventually_consistent(void **state)
{
    (void)state;
    const char *env = getenv("CONF_SEED");
    seed = env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL);
    print_message("ReplicatorDeltaSpec be_eventually_consistent: seed %u (CONF_SEED=%u to "
                  "repeat)\n",
                  seed, seed);
    pthread_t th[N];
    ops_t o[N];
    for (int i = 0; i < N; i++) {
        o[i] = (ops_t){i, seed + (unsigned)i, 0};
        pthread_create(&th[i], NULL, random_ops, &o[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++)
        assert_int_equal(o[i].errors, 0);
    const char *keys[] = {"A", "B", "C", "D", "E", "F"};
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 6; k++) {
            same_t s = {i, keys[k], k < 3};
            if (!wait_until(same_value, &s, 10000))
                fail_msg("seed %u: node %d key %s differs between the delta and the full-state "
                         "replicator",
                         seed, i, keys[k]);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(join_cluster),
        cmocka_unit_test(propagate_delta),
        cmocka_unit_test(work_with_write_consistency),
        cmocka_unit_test(preserve_causal_consistency_for_none_delta),
        cmocka_unit_test(be_eventually_consistent),
    };
    return cmocka_run_group_tests_name("ReplicatorDeltaSpec", tests, NULL, cm_teardown);
}
