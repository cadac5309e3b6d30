/*  test_replicator.c — the replicator on one node and on 3 and 5 nodes over tcp loopback:
    every reply kind, subscriptions, expiry, storage, convergence by deltas and by anti-entropy,
    majority reads after majority writes, partitions, loss and duplication, causal gaps, pruning,
    a late node catching up, a value larger than the frame limit, tombstone collection.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "ddata.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */
static int get_stats(shoal_replicator_t *r, void *arg)
{
    return shoal_replicator_stats(r, arg);
}

typedef struct {
    const shoal_node_t *self;
    const char *elem;
} add_arg_t;

static int orset_add_modify(shoal_crdt_t *v, void *arg)
{
    add_arg_t *a = arg;
    return shoal_orset_add(v, a->self, a->elem, strlen(a->elem));
}

static int orset_remove_modify(shoal_crdt_t *v, void *arg)
{
    add_arg_t *a = arg;
    int rc = shoal_orset_remove(v, a->self, a->elem, strlen(a->elem));
    return rc == SHOAL_ENOTFOUND ? 0 : rc;
}

static int t_add(tcluster_t *c, int i, const char *key, const char *elem,
                 const shoal_consistency_t *wc)
{
    shoal_crdt_t *init = shoal_orset_new();
    add_arg_t a = {shoal_system_self(c->sys[i]), elem};
    int rc = shoal_replicator_update_sync(c->rep[i], key, init, wc, orset_add_modify, &a);
    shoal_crdt_destroy(&init);
    return rc;
}

static int t_remove(tcluster_t *c, int i, const char *key, const char *elem,
                    const shoal_consistency_t *wc)
{
    shoal_crdt_t *init = shoal_orset_new();
    add_arg_t a = {shoal_system_self(c->sys[i]), elem};
    int rc = shoal_replicator_update_sync(c->rep[i], key, init, wc, orset_remove_modify, &a);
    shoal_crdt_destroy(&init);
    return rc;
}

static int fail_modify(shoal_crdt_t *v, void *arg)
{
    (void)v;
    (void)arg;
    return -100;
}

static int noop_modify(shoal_crdt_t *v, void *arg)
{
    (void)v;
    (void)arg;
    return 0;
}

typedef struct {
    tcluster_t *c;
    const char *key;
    uint64_t want;
} counter_wait_t;

static bool all_have_count(void *arg)
{
    counter_wait_t *w = arg;
    shoal_consistency_t l = c_local();
    for (int i = 0; i < w->c->n; i++) {
        if (!w->c->sys[i])
            continue;
        uint64_t v = 0;
        t_gcounter(w->c, i, w->key, &l, &v);
        if (v != w->want)
            return false;
    }
    return true;
}

typedef struct {
    tcluster_t *c;
    const char *key;
} conv_t;

static bool converged(void *arg)
{
    conv_t *cv = arg;
    return t_converged(cv->c, cv->key);
}


/* ---------------------------------------------------------------------------------------------
 * One node
 */
static void test_single_node_replies(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 1, NULL);
    shoal_consistency_t l = c_local();
    uint64_t v = 0;
    assert_int_equal(t_gcounter(&c, 0, "missing", &l, &v), SHOAL_ENOTFOUND);
    assert_int_equal(t_incr(&c, 0, "hits", 5, &l), 0);
    assert_int_equal(t_incr(&c, 0, "hits", 2, &l), 0);
    assert_int_equal(t_gcounter(&c, 0, "hits", &l, &v), 0);
    assert_int_equal(v, 7);
    /* one key, two types: a clear error */
    assert_int_equal(t_add(&c, 0, "hits", "x", &l), SHOAL_ETYPE);
    shoal_crdt_t *got = NULL;
    assert_int_equal(shoal_replicator_get_sync(c.rep[0], "hits", shoal_type_by_name("ORSet"), &l,
                                               &got), SHOAL_ETYPE);
    assert_null(got);
    /* a failing modify function leaves the value as it was */
    shoal_crdt_t *init = shoal_gcounter_new();
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "hits", init, &l, fail_modify, NULL),
                     SHOAL_EMODIFY);
    assert_int_equal(t_gcounter(&c, 0, "hits", &l, &v), 0);
    assert_int_equal(v, 7);
    /* WriteTo(2) with no other node: times out at once, but the value is applied locally */
    shoal_consistency_t two = c_n(2, 500);
    assert_int_equal(t_incr(&c, 0, "hits", 1, &two), SHOAL_ETIMEOUT);
    assert_int_equal(t_gcounter(&c, 0, "hits", &l, &v), 0);
    assert_int_equal(v, 8);
    shoal_consistency_t maj = c_majority(500);
    assert_int_equal(t_incr(&c, 0, "hits", 1, &maj), 0); /* majority of 1 is 1 */
    /* deleted keys stay deleted */
    assert_int_equal(shoal_replicator_delete_sync(c.rep[0], "hits", &l), 0);
    assert_int_equal(t_gcounter(&c, 0, "hits", &l, &v), SHOAL_EDELETED);
    assert_int_equal(t_incr(&c, 0, "hits", 1, &l), SHOAL_EDELETED);
    assert_int_equal(shoal_replicator_delete_sync(c.rep[0], "hits", &l), SHOAL_EDELETED);
    /* bad arguments */
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "", init, &l, noop_modify, NULL),
                     SHOAL_EINVAL);
    shoal_crdt_destroy(&init);
    tcluster_stop(&c);
}

static int facade_from_node_thread(shoal_replicator_t *r, void *arg)
{
    (void)arg;
    shoal_consistency_t l = c_local();
    shoal_crdt_t *v = NULL;
    return shoal_replicator_get_sync(r, "k", NULL, &l, &v);
}

static void test_facade_refuses_node_thread(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 1, NULL);
    assert_int_equal(on_node(&c, 0, facade_from_node_thread, NULL), SHOAL_EDEADLK);
    /* and the asynchronous API refuses foreign threads */
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_get(c.rep[0], "k", NULL, &l, NULL, NULL), SHOAL_EINVAL);
    tcluster_stop(&c);
}

typedef struct {
    int changed, deleted, expired;
    uint64_t last;
    char last_key[64];
} events_t;

static void on_change(shoal_replicator_t *r, shoal_change_t ch, const char *key,
                      const shoal_crdt_t *value, void *arg)
{
    (void)r;
    events_t *ev = arg;
    snprintf(ev->last_key, sizeof ev->last_key, "%s", key);
    if (ch == SHOAL_CHANGED) {
        ev->changed++;
        ev->last = value ? shoal_gcounter_value(value) : 0;
    } else if (ch == SHOAL_DELETED) {
        ev->deleted++;
    } else {
        ev->expired++;
    }
}

typedef struct {
    const char *pattern;
    events_t *ev;
} sub_arg_t;

static int do_subscribe(shoal_replicator_t *r, void *arg)
{
    sub_arg_t *s = arg;
    return shoal_replicator_subscribe(r, s->pattern, on_change, s->ev);
}

static int do_flush(shoal_replicator_t *r, void *arg)
{
    (void)arg;
    shoal_replicator_flush(r);
    return 0;
}

static void test_subscriptions(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 1, NULL);
    shoal_consistency_t l = c_local();
    events_t ev = {0}, pev = {0};
    assert_int_equal(t_incr(&c, 0, "counter-a", 3, &l), 0);
    sub_arg_t s = {"counter-a", &ev}, p = {"counter-*", &pev};
    assert_true(on_node(&c, 0, do_subscribe, &s) > 0);
    on_node(&c, 0, do_flush, NULL);
    /* a new subscriber is told the current value */
    assert_int_equal(ev.changed, 1);
    assert_int_equal(ev.last, 3);
    assert_true(on_node(&c, 0, do_subscribe, &p) > 0);
    assert_int_equal(t_incr(&c, 0, "counter-a", 1, &l), 0);
    assert_int_equal(t_incr(&c, 0, "counter-b", 1, &l), 0);
    on_node(&c, 0, do_flush, NULL);
    assert_int_equal(ev.changed, 2);
    assert_int_equal(ev.last, 4);
    /* the new prefix subscriber was told each key once, with its current value */
    assert_int_equal(pev.changed, 2);
    /* a third subscriber is told the current values; the others are not told again */
    events_t tev = {0};
    sub_arg_t ts = {"counter-*", &tev};
    assert_true(on_node(&c, 0, do_subscribe, &ts) > 0);
    on_node(&c, 0, do_flush, NULL);
    assert_int_equal(tev.changed, 2);
    assert_int_equal(pev.changed, 2);
    assert_int_equal(ev.changed, 2);
    /* an update that does not change the value notifies nothing */
    shoal_crdt_t *init = shoal_gcounter_new();
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "counter-a", init, &l, noop_modify,
                                                  NULL), 0);
    shoal_crdt_destroy(&init);
    on_node(&c, 0, do_flush, NULL);
    assert_int_equal(ev.changed, 2);
    /* deletion is notified */
    assert_int_equal(shoal_replicator_delete_sync(c.rep[0], "counter-a", &l), 0);
    on_node(&c, 0, do_flush, NULL);
    assert_int_equal(ev.deleted, 1);
    tcluster_stop(&c);
}

typedef struct {
    tcluster_t *c;
    events_t *ev;
} exp_wait_t;

static bool expired_seen(void *arg)
{
    exp_wait_t *w = arg;
    return w->ev->expired >= 1;
}

static void test_expiry(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    shoal_expiry_t exp[] = {{"cache-*", 200}};
    s.expire_keys = exp;
    s.n_expire_keys = 1;
    tcluster_t c;
    tcluster_start(&c, 1, &s);
    shoal_consistency_t l = c_local();
    events_t ev = {0};
    sub_arg_t sa = {"cache-*", &ev};
    on_node(&c, 0, do_subscribe, &sa);
    assert_int_equal(t_incr(&c, 0, "cache-1", 1, &l), 0);
    assert_int_equal(t_incr(&c, 0, "kept", 1, &l), 0);
    exp_wait_t w = {&c, &ev};
    assert_true(wait_until(expired_seen, &w, 5000));
    uint64_t v;
    assert_int_equal(t_gcounter(&c, 0, "cache-1", &l, &v), SHOAL_ENOTFOUND);
    assert_int_equal(t_gcounter(&c, 0, "kept", &l, &v), 0);
    tcluster_stop(&c);
}

static void test_durable_store_and_loading(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    const char *durable[] = {"shard-*"};
    s.durable_keys = durable;
    s.n_durable_keys = 1;
    tcluster_t c;
    tcluster_start(&c, 1, &s);
    shoal_consistency_t l = c_local();
    assert_int_equal(t_incr(&c, 0, "shard-1", 4, &l), 0);
    assert_int_equal(t_incr(&c, 0, "volatile", 4, &l), 0);
    assert_int_equal(shoal_memstore_size(c.store[0]), 1);
    /* a failing store is reported to the writer */
    shoal_memstore_fail(c.store[0], 1);
    assert_int_equal(t_incr(&c, 0, "shard-1", 1, &l), SHOAL_ESTORE);
    /* a new replicator on the same store loads it before it serves */
    shoal_store_t *store = c.store[0];
    c.store[0] = NULL;
    shoal_replicator_destroy(&c.rep[0]);
    s.store = store;
    int err;
    c.rep[0] = shoal_replicator_new(c.sys[0], &s, &err);
    assert_non_null(c.rep[0]);
    uint64_t v = 0;
    assert_int_equal(t_gcounter(&c, 0, "shard-1", &l, &v), 0);
    assert_int_equal(v, 4); /* the failed write was never stored */
    assert_int_equal(t_gcounter(&c, 0, "volatile", &l, &v), SHOAL_ENOTFOUND);
    c.store[0] = store;
    tcluster_stop(&c);
}

/* ---------------------------------------------------------------------------------------------
 * Three and five nodes
 */
static void test_write_local_converges_by_gossip(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 3, NULL);
    shoal_consistency_t l = c_local();
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 10; k++)
            assert_int_equal(t_incr(&c, i, "visits", (uint64_t)(i + 1), &l), 0);
    counter_wait_t w = {&c, "visits", 60};
    assert_true(wait_until(all_have_count, &w, 10000));
    conv_t cv = {&c, "visits"};
    assert_true(t_converged(cv.c, cv.key));
    tcluster_stop(&c);
}

static void test_majority_write_then_majority_read(void **state)
{
    (void)state;
    tcluster_t c;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    /* no background dissemination: only the majority operations can carry the write */
    s.gossip_interval_ms = 600000;
    s.delta_interval_ms = 600000;
    tcluster_start(&c, 3, &s);
    shoal_consistency_t maj = c_majority(3000);
    for (int k = 0; k < 20; k++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", k);
        assert_int_equal(t_incr(&c, k % 3, key, 5, &maj), 0);
        uint64_t v = 0;
        assert_int_equal(t_gcounter(&c, (k + 1) % 3, key, &maj, &v), 0);
        assert_int_equal(v, 5);
    }
    /* ReadAll sees it everywhere too */
    shoal_consistency_t all = c_all(3000);
    uint64_t v = 0;
    assert_int_equal(t_gcounter(&c, 2, "k0", &all, &v), 0);
    assert_int_equal(v, 5);
    tcluster_stop(&c);
}

static void test_concurrent_writers_converge(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 5, NULL);
    shoal_consistency_t l = c_local();
    const char *elems[] = {"a", "b", "c", "d"};
    for (int round = 0; round < 20; round++)
        for (int i = 0; i < 5; i++) {
            const char *e = elems[(round + i) % 4];
            if ((round + i) % 3 == 0)
                t_remove(&c, i, "set", e, &l);
            else
                assert_int_equal(t_add(&c, i, "set", e, &l), 0);
            t_incr(&c, i, "count", 1, &l);
        }
    conv_t cv = {&c, "set"};
    assert_true(wait_until(converged, &cv, 15000));
    counter_wait_t w = {&c, "count", 100};
    assert_true(wait_until(all_have_count, &w, 15000));
    tcluster_stop(&c);
}

static void test_partition_times_out_then_heals(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 3, NULL);
    shoal_consistency_t maj = c_majority(400), l = c_local();
    /* node 2 cut off from both others, both ways */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(c.sys[2], NULL, &cut), 0);
    assert_int_equal(shoal_system_fault(c.sys[0], shoal_system_endpoint(c.sys[2]), &cut), 0);
    assert_int_equal(shoal_system_fault(c.sys[1], shoal_system_endpoint(c.sys[2]), &cut), 0);
    /* the isolated node cannot reach a majority: timeout, value still applied locally */
    assert_int_equal(t_incr(&c, 2, "acked", 1, &maj), SHOAL_ETIMEOUT);
    uint64_t v = 0;
    assert_int_equal(t_gcounter(&c, 2, "acked", &l, &v), 0);
    assert_int_equal(v, 1);
    /* the majority side keeps working */
    for (int k = 0; k < 10; k++)
        assert_int_equal(t_incr(&c, k % 2, "acked", 1, &maj), 0);
    assert_int_equal(shoal_system_heal(c.sys[0]), 0);
    assert_int_equal(shoal_system_heal(c.sys[1]), 0);
    assert_int_equal(shoal_system_heal(c.sys[2]), 0);
    counter_wait_t w = {&c, "acked", 11};
    assert_true(wait_until(all_have_count, &w, 15000));
    tcluster_stop(&c);
}

static void test_loss_and_duplication_converge(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 3, NULL);
    shoal_fault_t lossy = {.dir = SHOAL_FAULT_BOTH, .drop = 0.05, .duplicate = 0.05};
    for (int i = 0; i < 3; i++)
        assert_int_equal(shoal_system_fault(c.sys[i], NULL, &lossy), 0);
    shoal_consistency_t l = c_local();
    char key[32];
    for (int k = 0; k < 200; k++) {
        snprintf(key, sizeof key, "k%d", k % 20);
        assert_int_equal(t_incr(&c, k % 3, key, 1, &l), 0);
        assert_int_equal(t_add(&c, (k + 1) % 3, "set", key, &l), 0);
    }
    for (int k = 0; k < 20; k++) {
        snprintf(key, sizeof key, "k%d", k);
        counter_wait_t w = {&c, key, 10};
        assert_true(wait_until(all_have_count, &w, 20000));
    }
    conv_t cv = {&c, "set"};
    assert_true(wait_until(converged, &cv, 20000));
    tcluster_stop(&c);
}

typedef struct {
    const shoal_node_t *self;
    const char *key;
    const char *value;
} put_arg_t;

static int lww_put_modify(shoal_crdt_t *v, void *arg)
{
    put_arg_t *p = arg;
    return shoal_lwwmap_put(v, p->self, p->key, strlen(p->key), p->value, strlen(p->value), NULL,
                            NULL);
}

typedef struct {
    tcluster_t *c;
    uint64_t want;
} sent_wait_t;

static bool deltas_sent(void *arg)
{
    sent_wait_t *w = arg;
    shoal_replicator_stats_t st;
    on_node(w->c, 0, get_stats, &st);
    return st.deltas_sent >= w->want;
}

static void test_causal_gap_repaired_by_full_state(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    s.gossip_interval_ms = 600000; /* no anti-entropy: only deltas and their repair */
    tcluster_t c;
    tcluster_start(&c, 2, &s);
    shoal_consistency_t l = c_local();
    shoal_crdt_t *init = shoal_lwwmap_new();
    put_arg_t p = {shoal_system_self(c.sys[0]), "a", "1"};
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "map", init, &l, lww_put_modify, &p),
                     0);
    conv_t cv = {&c, "map"};
    assert_true(wait_until(converged, &cv, 5000));
    /* lose the next delta on the way to node 1 */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_OUT, .cut = true};
    shoal_system_fault(c.sys[0], shoal_system_endpoint(c.sys[1]), &cut);
    p.key = "b";
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "map", init, &l, lww_put_modify, &p),
                     0);
    /* wait until that delta round went out (and was dropped) */
    sent_wait_t sw = {&c, 2};
    assert_true(wait_until(deltas_sent, &sw, 5000));
    shoal_system_heal(c.sys[0]);
    /* the next delta arrives with a gap: node 1 must not apply it, and asks for full state */
    p.key = "c";
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "map", init, &l, lww_put_modify, &p),
                     0);
    assert_true(wait_until(converged, &cv, 5000));
    shoal_replicator_stats_t st1;
    on_node(&c, 1, get_stats, &st1);
    if (shoal_type_delta_causal(shoal_type_by_name("LWWMap")))
        assert_true(st1.delta_gaps >= 1);
    shoal_crdt_destroy(&init);
    tcluster_stop(&c);
}

static void test_late_node_catches_up(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 2, NULL);
    shoal_consistency_t l = c_local();
    char key[32];
    for (int k = 0; k < 300; k++) {
        snprintf(key, sizeof key, "key-%03d", k);
        assert_int_equal(t_incr(&c, k % 2, key, (uint64_t)k + 1, &l), 0);
    }
    tcluster_add(&c);
    for (int k = 0; k < 300; k += 37) {
        snprintf(key, sizeof key, "key-%03d", k);
        counter_wait_t w = {&c, key, (uint64_t)k + 1};
        assert_true(wait_until(all_have_count, &w, 20000));
    }
    snprintf(key, sizeof key, "key-%03d", 299);
    counter_wait_t w = {&c, key, 300};
    assert_true(wait_until(all_have_count, &w, 20000));
    tcluster_stop(&c);
}

typedef struct {
    const shoal_node_t *self;
    int from, to;
} bulk_arg_t;

static int bulk_add(shoal_crdt_t *v, void *arg)
{
    bulk_arg_t *b = arg;
    char e[32];
    for (int i = b->from; i < b->to; i++) {
        int n = snprintf(e, sizeof e, "element-%06d", i);
        int rc = shoal_orset_add(v, b->self, e, (size_t)n);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct {
    tcluster_t *c;
    size_t want;
} size_wait_t;

static bool all_have_size(void *arg)
{
    size_wait_t *w = arg;
    shoal_consistency_t l = c_local();
    for (int i = 0; i < w->c->n; i++) {
        shoal_crdt_t *v = NULL;
        shoal_replicator_get_sync(w->c->rep[i], "big", NULL, &l, &v);
        size_t n = v ? shoal_orset_size(v) : 0;
        shoal_crdt_destroy(&v);
        if (n != w->want)
            return false;
    }
    return true;
}

static void test_large_value_replicates_in_chunks(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 3, NULL);
    shoal_consistency_t l = c_local(), maj = c_majority(10000);
    shoal_crdt_t *init = shoal_orset_new();
    bulk_arg_t b = {shoal_system_self(c.sys[0]), 0, 20000};
    /* 20,000 elements: far above the frame limit as full state */
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "big", init, &maj, bulk_add, &b), 0);
    size_wait_t w = {&c, 20000};
    assert_true(wait_until(all_have_size, &w, 30000));
    /* then a one-element update ships a small delta */
    b.from = 20000;
    b.to = 20001;
    assert_int_equal(shoal_replicator_update_sync(c.rep[1], "big", init, &l, bulk_add, &b), 0);
    w.want = 20001;
    assert_true(wait_until(all_have_size, &w, 30000));
    shoal_replicator_stats_t st;
    on_node(&c, 0, get_stats, &st);
    assert_true(st.chunks_sent > 0);
    shoal_crdt_destroy(&init);
    tcluster_stop(&c);
}

typedef struct {
    tcluster_t *c;
    const char *key;
} prune_wait_t;

static bool pruned_everywhere(void *arg)
{
    prune_wait_t *w = arg;

    shoal_consistency_t l = c_local();
    for (int i = 0; i < w->c->n; i++) {
        if (!w->c->sys[i])
            continue;
        shoal_crdt_t *v = NULL;
        shoal_replicator_get_sync(w->c->rep[i], w->key, NULL, &l, &v);
        /* pruned: only the two survivors hold a part of the value */
        bool pruned = v && shoal_crdt_modified_by(v, NULL, 0) == 2;
        shoal_crdt_destroy(&v);
        if (!pruned)
            return false;
    }
    return true;
}

typedef struct {
    uint64_t last;
    int backwards, seen;
} mono_t;

static void on_total(shoal_replicator_t *r, shoal_change_t ch, const char *key,
                     const shoal_crdt_t *value, void *arg)
{
    (void)r;
    (void)key;
    mono_t *m = arg;
    if (ch != SHOAL_CHANGED || !value)
        return;
    uint64_t v = shoal_gcounter_value(value);
    if (v < m->last)
        m->backwards++;
    m->last = v;
    m->seen++;
}

static int flush_now(shoal_replicator_t *r, void *arg)
{
    (void)arg;
    shoal_replicator_flush(r);
    return 0;
}

static int subscribe_total(shoal_replicator_t *r, void *arg)
{
    return shoal_replicator_subscribe(r, "total", on_total, arg);
}

static void test_pruning_keeps_values(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 3, NULL);
    /* subscribers on the survivors watch the value through the whole pruning round */
    mono_t mono[2] = {{0}};
    for (int i = 0; i < 2; i++)
        assert_true(on_node(&c, i, subscribe_total, &mono[i]) > 0);
    shoal_consistency_t all = c_all(3000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t_incr(&c, i, "total", 10, &all), 0);
    counter_wait_t w = {&c, "total", 30};
    assert_true(wait_until(all_have_count, &w, 10000));
    /* node 2 leaves for good: its 10 is folded into a survivor, the total stays 30 */
    tcluster_kill(&c, 2, true);
    prune_wait_t pw = {&c, "total"};
    bool ok = wait_until(pruned_everywhere, &pw, 20000);
    if (!ok)
        for (int i = 0; i < 2; i++) {
            shoal_replicator_stats_t st;
            on_node(&c, i, get_stats, &st);
            shoal_crdt_t *v = NULL;
            shoal_consistency_t l = c_local();
            shoal_replicator_get_sync(c.rep[i], "total", NULL, &l, &v);
            shoal_buf_t b = {0};
            if (v)
                shoal_crdt_render(v, &b);
            print_error("node %d: performed %llu gossip %llu value %s\n", i,
                        (unsigned long long)st.pruning_performed,
                        (unsigned long long)st.gossip_rounds, shoal_buf_cstr(&b));
            shoal_buf_free(&b);
            shoal_crdt_destroy(&v);
        }
    assert_true(ok);
    assert_true(all_have_count(&w));
    for (int i = 0; i < 2; i++) {
        on_node(&c, i, flush_now, NULL);
        assert_true(mono[i].seen > 0);
        assert_int_equal(mono[i].backwards, 0); /* never went backwards while pruning ran */
        assert_int_equal(mono[i].last, 30);
    }
    tcluster_stop(&c);
}

typedef struct {
    tcluster_t *c;
} tomb_wait_t;

static bool tombstone_collected(void *arg)
{
    tomb_wait_t *w = arg;
    for (int i = 0; i < w->c->n; i++) {
        shoal_replicator_stats_t st;
        on_node(w->c, i, get_stats, &st);
        if (st.tombstones_collected < 1)
            return false;
    }
    return true;
}

static void test_tombstones_collected_when_safe(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    s.tombstone_ttl_ms = 1000;
    tcluster_t c;
    tcluster_start(&c, 3, &s);
    shoal_consistency_t all = c_all(3000), l = c_local();
    assert_int_equal(t_incr(&c, 0, "gone", 1, &all), 0);
    /* node 2 does not hear about the deletion: nobody may collect the tombstone */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    shoal_system_fault(c.sys[2], NULL, &cut);
    shoal_system_fault(c.sys[0], shoal_system_endpoint(c.sys[2]), &cut);
    shoal_system_fault(c.sys[1], shoal_system_endpoint(c.sys[2]), &cut);
    shoal_consistency_t maj = c_majority(3000);
    assert_int_equal(shoal_replicator_delete_sync(c.rep[0], "gone", &maj), 0);
    tomb_wait_t tw = {&c};
    /* well past the TTL: still there, because node 2 has not seen it */
    assert_false(wait_until(tombstone_collected, &tw, 1500));
    uint64_t v;
    assert_int_equal(t_gcounter(&c, 1, "gone", &l, &v), SHOAL_EDELETED);
    for (int i = 0; i < 3; i++)
        shoal_system_heal(c.sys[i]);
    /* once everyone holds it, it goes everywhere, and the name is refused for a while */
    assert_true(wait_until(tombstone_collected, &tw, 15000));
    assert_int_equal(t_incr(&c, 2, "gone", 1, &l), SHOAL_EDELETED);
    tcluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_single_node_replies, tcluster_teardown),
        cmocka_unit_test_teardown(test_facade_refuses_node_thread, tcluster_teardown),
        cmocka_unit_test_teardown(test_subscriptions, tcluster_teardown),
        cmocka_unit_test_teardown(test_expiry, tcluster_teardown),
        cmocka_unit_test_teardown(test_durable_store_and_loading, tcluster_teardown),
        cmocka_unit_test_teardown(test_write_local_converges_by_gossip, tcluster_teardown),
        cmocka_unit_test_teardown(test_majority_write_then_majority_read, tcluster_teardown),
        cmocka_unit_test_teardown(test_concurrent_writers_converge, tcluster_teardown),
        cmocka_unit_test_teardown(test_partition_times_out_then_heals, tcluster_teardown),
        cmocka_unit_test_teardown(test_loss_and_duplication_converge, tcluster_teardown),
        cmocka_unit_test_teardown(test_causal_gap_repaired_by_full_state, tcluster_teardown),
        cmocka_unit_test_teardown(test_late_node_catches_up, tcluster_teardown),
        cmocka_unit_test_teardown(test_large_value_replicates_in_chunks, tcluster_teardown),
        cmocka_unit_test_teardown(test_pruning_keeps_values, tcluster_teardown),
        cmocka_unit_test_teardown(test_tombstones_collected_when_safe, tcluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
