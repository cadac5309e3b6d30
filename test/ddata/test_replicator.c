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

#include "replicator.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    add_arg_t a = {shoal_system_self(c->sys[i]), elem};
    int rc =
        shoal_replicator_update_sync(c->rep[i], key, shoal_orset_new(), wc, orset_add_modify, &a);
    return rc;
}

static int t_remove(tcluster_t *c, int i, const char *key, const char *elem,
                    const shoal_consistency_t *wc)
{
    add_arg_t a = {shoal_system_self(c->sys[i]), elem};
    int rc = shoal_replicator_update_sync(c->rep[i], key, shoal_orset_new(), wc,
                                          orset_remove_modify, &a);
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
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[0], "hits", shoal_gcounter_new(), &l, fail_modify, NULL),
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
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[0], "", shoal_gcounter_new(), &l, noop_modify, NULL),
        SHOAL_EINVAL);
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
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "counter-a", shoal_gcounter_new(), &l,
                                                  noop_modify, NULL),
                     0);
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
    /* (a failing store: test_store_failure_retried_with_backoff) */
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
    assert_int_equal(v, 4);
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

/* Finished reads and writes go back to the replicator's pool with their buffers, and the next
   ones reuse them: keys growing from 1 to 300 bytes (each longer than the room the pooled op
   has), encodings larger than the pool keeps (a set growing by 200 elements) between small
   ones, and majority reads (their per-answer digests) between writes. Every value read back is
   the one written; under ASan a pooled op is poisoned, so a use after it finished fails here. */
static void test_ops_reused_from_pool(void **state)
{
    (void)state;
    tcluster_t c;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    s.gossip_interval_ms = 600000; /* only the majority operations carry the writes */
    s.delta_interval_ms = 600000;
    tcluster_start(&c, 3, &s);
    shoal_consistency_t maj = c_majority(3000);
    char key[320];
    for (int k = 1; k <= 300; k += 7) {
        memset(key, 'k', (size_t)k);
        key[k] = 0;
        assert_int_equal(t_incr(&c, k % 3, key, (uint64_t)k, &maj), 0);
        uint64_t v = 0;
        assert_int_equal(t_gcounter(&c, (k + 1) % 3, key, &maj, &v), 0);
        assert_int_equal(v, (uint64_t)k);
        if (k % 5 == 1) {
            /* a large encoding through a pooled op, then small ones again */
            char elem[32];
            for (int e = 0; e < 200; e++) {
                snprintf(elem, sizeof elem, "element-%03d-%03d", k, e);
                assert_int_equal(t_add(&c, 0, "big", elem, &maj), 0);
            }
        }
    }
    uint64_t v = 0;
    assert_int_equal(t_gcounter(&c, 2, "k", &maj, &v), 0);
    assert_int_equal(v, 1);
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

static int open_gate(shoal_replicator_t *r, void *arg)
{
    (void)arg;
    return shoal_replicator_set_quorum_gate(r, true, "test: a full member");
}

typedef struct {
    tcluster_t *c;
    bool counted;
} count_newcomers_t;

/* Nodes 3 and 4 are peers that count (a majority is of 5), or not yet (of 3). */
static int count_newcomers(shoal_replicator_t *r, void *arg)
{
    count_newcomers_t *a = arg;
    for (int j = 3; j < 5; j++) {
        /* (refused on the node itself, which is no peer of its own) */
        (void)shoal_replicator_add_peer(r, shoal_system_self(a->c->sys[j]), a->counted,
                                        (uint64_t)j);
    }
    return 0;
}

/* A member that starts counting (a new node, or a restarted one) must not make a majority read
   miss what a majority acknowledged before it counted (chaos seed 743854579: an entity save
   acknowledged by 2 of 3 members, two members restarted and counted again, the shard's new home
   read a "majority" of 3 of 5 from itself, the other new member and the one old member the
   save had not reached). Here the write is acknowledged by nodes 0 and 1 of 3; nodes 3 and 4
   then count; node 3, cut off from nodes 0 and 1, must not answer "not found" from itself,
   node 2 and node 4, which all lack the write; once it reaches them it reads the value. */
static void test_new_member_catches_up_before_its_copy_counts(void **state)
{
    (void)state;
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 5, NULL);
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true}, none = {.dir = SHOAL_FAULT_BOTH};
    for (int j = 2; j < 5; j++)
        for (int i = 0; i < 2; i++) {
            assert_int_equal(shoal_system_fault(c.sys[j], shoal_system_endpoint(c.sys[i]), &cut), 0);
            assert_int_equal(shoal_system_fault(c.sys[i], shoal_system_endpoint(c.sys[j]), &cut), 0);
        }
    count_newcomers_t nc = {&c, false};
    for (int i = 0; i < 5; i++)
        assert_int_equal(on_node(&c, i, count_newcomers, &nc), 0);
    shoal_consistency_t maj = c_majority(1000);
    assert_int_equal(t_incr(&c, 0, "saved", 7, &maj), 0); /* acknowledged by nodes 0 and 1 */
    nc.counted = true;
    for (int i = 0; i < 5; i++)
        assert_int_equal(on_node(&c, i, count_newcomers, &nc), 0);
    assert_int_equal(on_node(&c, 3, open_gate, NULL), 0); /* node 3 became a full member */
    uint64_t v = 0;
    int rc = t_gcounter(&c, 3, "saved", &maj, &v);
    print_message("node 3, catching up, cut off from the write: %s\n", shoal_strerror(rc));
    assert_true(rc == SHOAL_ETIMEOUT || rc == SHOAL_ENOQUORUM); /* never "not found" */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(shoal_system_fault(c.sys[3], shoal_system_endpoint(c.sys[i]), &none), 0);
        assert_int_equal(shoal_system_fault(c.sys[i], shoal_system_endpoint(c.sys[3]), &none), 0);
    }
    int64_t deadline = shoal_now_ms() + 10000 * tscale();
    do
        rc = t_gcounter(&c, 3, "saved", &maj, &v);
    while (rc != 0 && shoal_now_ms() < deadline);
    assert_int_equal(rc, 0);
    assert_int_equal(v, 7);
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
    put_arg_t p = {shoal_system_self(c.sys[0]), "a", "1"};
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[0], "map", shoal_lwwmap_new(), &l, lww_put_modify, &p),
        0);
    conv_t cv = {&c, "map"};
    assert_true(wait_until(converged, &cv, 5000));
    /* lose the next delta on the way to node 1 */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_OUT, .cut = true};
    shoal_system_fault(c.sys[0], shoal_system_endpoint(c.sys[1]), &cut);
    p.key = "b";
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[0], "map", shoal_lwwmap_new(), &l, lww_put_modify, &p),
        0);
    /* wait until that delta round went out (and was dropped) */
    sent_wait_t sw = {&c, 2};
    assert_true(wait_until(deltas_sent, &sw, 5000));
    shoal_system_heal(c.sys[0]);
    /* the next delta arrives with a gap: node 1 must not apply it, and asks for full state */
    p.key = "c";
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[0], "map", shoal_lwwmap_new(), &l, lww_put_modify, &p),
        0);
    assert_true(wait_until(converged, &cv, 5000));
    shoal_replicator_stats_t st1;
    on_node(&c, 1, get_stats, &st1);
    if (shoal_type_delta_causal(shoal_type_by_name("LWWMap")))
        assert_true(st1.delta_gaps >= 1);
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
    bulk_arg_t b = {shoal_system_self(c.sys[0]), 0, 20000};
    /* 20,000 elements: far above the frame limit as full state */
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[0], "big", shoal_orset_new(), &maj, bulk_add, &b), 0);
    size_wait_t w = {&c, 20000};
    assert_true(wait_until(all_have_size, &w, 30000));
    /* then a one-element update ships a small delta */
    b.from = 20000;
    b.to = 20001;
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[1], "big", shoal_orset_new(), &l, bulk_add, &b), 0);
    w.want = 20001;
    assert_true(wait_until(all_have_size, &w, 30000));
    shoal_replicator_stats_t st;
    on_node(&c, 0, get_stats, &st);
    assert_true(st.chunks_sent > 0);
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

/* ---------------------------------------------------------------------------------------------
 * Durable keys: a store that fails later, pruning markers in the store, stores older than the
 * durable marker lifetime
 */
#define DAY_MS (24ll * 3600 * 1000)

static void store_done(void *arg, int status)
{
    *(int *)arg = status;
}

/* Writes a DataEnvelope as the replicator stores it: the value, optionally a performed pruning
   marker, and (stored_at_ms != 0) the write time appended as field 6. */
static void put_envelope(shoal_store_t *st, const char *key, const shoal_crdt_t *v,
                         const char *removed, const char *owner, int64_t obsolete_at_ms,
                         int64_t stored_at_ms)
{
    Shoal__Replicator__DataEnvelope env = SHOAL__REPLICATOR__DATA_ENVELOPE__INIT;
    shoal_buf_t vb = {0};
    assert_int_equal(shoal_crdt_encode(v, &vb), 0);
    env.value.data = vb.data;
    env.value.len = vb.len;
    Shoal__Replicator__PruningState ps = SHOAL__REPLICATOR__PRUNING_STATE__INIT;
    Shoal__Replicator__PruningState *pps = &ps;
    if (removed) {
        ps.removed = (char *)removed;
        ps.owner = (char *)owner;
        ps.performed = true;
        ps.obsolete_at_ms = obsolete_at_ms;
        env.n_pruning = 1;
        env.pruning = &pps;
    }
    uint8_t buf[1024];
    size_t n = shoal__replicator__data_envelope__get_packed_size(&env);
    assert_true(n + 12 <= sizeof buf);
    shoal__replicator__data_envelope__pack(&env, buf);
    if (stored_at_ms) {
        buf[n++] = 6 << 3; /* field 6, varint */
        for (uint64_t x = (uint64_t)stored_at_ms;; x >>= 7) {
            buf[n++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
            if (x <= 0x7f)
                break;
        }
    }
    int status = 1;
    st->store(st->ctx, key, strlen(key), buf, n, store_done, &status);
    assert_int_equal(status, 0);
    shoal_buf_free(&vb);
}

/* What the store holds for a key, read on the node thread (the memory store is not locked). */
typedef struct {
    shoal_store_t *store;
    const char *key;
    bool found;
    uint64_t counter; /* the GCounter's value */
    int n_markers;
    bool performed;
    int64_t obsolete_at_ms; /* of the first marker */
    uint64_t plan_base, plan_span; /* of the first marker */
} stored_t;

static void stored_each(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    stored_t *s = arg;
    if (klen != strlen(s->key) || memcmp(key, s->key, klen) != 0)
        return;
    Shoal__Replicator__DataEnvelope *env =
        shoal__replicator__data_envelope__unpack(NULL, len, data);
    assert_non_null(env);
    s->found = true;
    shoal_crdt_t *v = NULL;
    if (!env->deleted && shoal_crdt_decode(env->value.data, env->value.len, &v) == 0)
        s->counter = shoal_gcounter_value(v);
    shoal_crdt_destroy(&v);
    s->n_markers = (int)env->n_pruning;
    if (env->n_pruning) {
        s->performed = env->pruning[0]->performed;
        s->obsolete_at_ms = env->pruning[0]->obsolete_at_ms;
        s->plan_base = env->pruning[0]->plan_base;
        s->plan_span = env->pruning[0]->plan_span;
    }
    shoal__replicator__data_envelope__free_unpacked(env, NULL);
}

static int read_stored(shoal_replicator_t *r, void *arg)
{
    (void)r;
    stored_t *s = arg;
    s->found = false;
    s->counter = 0;
    s->n_markers = 0;
    return s->store->load(s->store->ctx, stored_each, s);
}

static stored_t stored(tcluster_t *c, int i, const char *key)
{
    stored_t s = {c->store[i], key, false, 0, 0, false, 0, 0, 0};
    assert_int_equal(on_node(c, i, read_stored, &s), 0);
    return s;
}

typedef struct {
    tcluster_t *c;
    int i;
    const char *key;
    uint64_t want;
} stored_wait_t;

static bool stored_counter_is(void *arg)
{
    stored_wait_t *w = arg;
    stored_t s = stored(w->c, w->i, w->key);
    return s.found && s.counter == w->want;
}

static bool stored_marker_performed(void *arg)
{
    stored_wait_t *w = arg;
    stored_t s = stored(w->c, w->i, w->key);
    return s.found && s.n_markers == 1 && s.performed;
}

typedef struct {
    shoal_store_t *store;
    int count;
} fail_arg_t;

static int fail_store(shoal_replicator_t *r, void *arg)
{
    (void)r;
    fail_arg_t *f = arg;
    shoal_memstore_fail(f->store, f->count);
    return 0;
}

static shoal_replicator_stats_t stats_of(tcluster_t *c, int i)
{
    shoal_replicator_stats_t st;
    assert_int_equal(on_node(c, i, get_stats, &st), 0);
    return st;
}

/* Node i gets a new replicator of settings s on its (kept) store, peered with the others. */
static int add_all_peers(shoal_replicator_t *r, void *arg)
{
    tcluster_t *c = arg;
    for (int j = 0; j < c->n; j++)
        if (c->rep[j] && c->rep[j] != r)
            shoal_replicator_add_peer(r, shoal_system_self(c->sys[j]), true, (uint64_t)j);
    return 0;
}

static void restart_replicator(tcluster_t *c, int i, const shoal_replicator_settings_t *s)
{
    shoal_replicator_destroy(&c->rep[i]);
    shoal_replicator_settings_t rs = *s;
    rs.store = c->store[i];
    int err = 0;
    c->rep[i] = shoal_replicator_new(c->sys[i], &rs, &err);
    assert_non_null(c->rep[i]);
    assert_int_equal(on_node(c, i, add_all_peers, c), 0);
}

static void durable_settings(shoal_replicator_settings_t *s)
{
    static const char *const durable[] = {"d-*", "total"};
    tcluster_fast_settings(s);
    s->durable_keys = durable;
    s->n_durable_keys = 2;
}

/* A store that fails for a while: the writer hears SHOAL_ESTORE, reads and other keys are served
   meanwhile, and the key is written again after 100, 200, 400, 800 ms until the store takes it. */
static void test_store_failure_retried_with_backoff(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    durable_settings(&s);
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 1, &s);
    shoal_consistency_t l = c_local();
    assert_int_equal(t_incr(&c, 0, "d-1", 4, &l), 0);
    assert_int_equal(stored(&c, 0, "d-1").counter, 4);
    fail_arg_t f = {c.store[0], 4}; /* the write and its first three retries */
    assert_int_equal(on_node(&c, 0, fail_store, &f), 0);
    int64_t t0 = shoal_now_ms();
    assert_int_equal(t_incr(&c, 0, "d-1", 1, &l), SHOAL_ESTORE);
    /* served meanwhile: reads (the change is applied in memory), writes of volatile keys */
    uint64_t v = 0;
    assert_int_equal(t_gcounter(&c, 0, "d-1", &l, &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(t_incr(&c, 0, "volatile", 1, &l), 0);
    assert_int_equal(stored(&c, 0, "d-1").counter, 4);
    stored_wait_t w = {&c, 0, "d-1", 5};
    assert_true(wait_until(stored_counter_is, &w, 10000));
    int64_t took = shoal_now_ms() - t0;
    shoal_replicator_stats_t st = stats_of(&c, 0);
    print_message("stored after %lld ms, %llu retries, %llu failures\n", (long long)took,
                  (unsigned long long)st.store_retries, (unsigned long long)st.store_failures);
    assert_int_equal(st.store_retries, 4);
    assert_int_equal(st.store_failures, 4);
    assert_true(took >= 100 + 200 + 400 + 800 - 20); /* backed off, not a busy loop */
    /* the store works again: nothing more is retried */
    assert_int_equal(t_incr(&c, 0, "d-1", 1, &l), 0);
    assert_int_equal(stored(&c, 0, "d-1").counter, 6);
    assert_int_equal(stats_of(&c, 0).store_retries, 4);
    /* what a restart loads is what the writers were told and what was retried */
    restart_replicator(&c, 0, &s);
    assert_int_equal(t_gcounter(&c, 0, "d-1", &l, &v), 0);
    assert_int_equal(v, 6);
    tcluster_stop(&c);
}

/* A replica whose store fails acknowledges no write (SHOAL_ESTORE to the writer: its write does
   not count toward the level), and values it receives are stored once the store works again. */
static void test_replica_store_failure_retried(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    durable_settings(&s);
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 2, &s);
    shoal_consistency_t all = c_all(1000), l = c_local();
    fail_arg_t f = {c.store[1], 1};
    assert_int_equal(on_node(&c, 1, fail_store, &f), 0);
    assert_int_equal(t_incr(&c, 0, "d-1", 3, &all), SHOAL_ETIMEOUT);
    /* stored later (by a retry, or by the next delivery of the key) */
    stored_wait_t w = {&c, 1, "d-1", 3};
    assert_true(wait_until(stored_counter_is, &w, 5000));
    /* a value that arrives by delta propagation, with no write behind it and no later delivery
       (anti-entropy finds the replicas equal): only the retries store it */
    uint64_t retries = stats_of(&c, 1).store_retries;
    f.count = 2;
    assert_int_equal(on_node(&c, 1, fail_store, &f), 0);
    assert_int_equal(t_incr(&c, 0, "d-2", 2, &l), 0);
    w.key = "d-2";
    w.want = 2;
    assert_true(wait_until(stored_counter_is, &w, 5000));
    assert_int_equal(stats_of(&c, 1).store_retries, retries + 2);
    assert_true(stats_of(&c, 1).store_failures >= 3);
    tcluster_stop(&c);
}

/* Pruning markers of durable keys are stored with the value and live 10 days (Akka's
   durable.pruning-marker-time-to-live), not the 6 hours of other keys. */
static void test_durable_pruning_marker_stored_for_10_days(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    durable_settings(&s);
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 3, &s);
    shoal_consistency_t all = c_all(3000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(t_incr(&c, i, "total", 10, &all), 0);
    counter_wait_t cw = {&c, "total", 30};
    assert_true(wait_until(all_have_count, &cw, 10000));
    tcluster_kill(&c, 2, true);
    prune_wait_t pw = {&c, "total"};
    assert_true(wait_until(pruned_everywhere, &pw, 20000));
    for (int i = 0; i < 2; i++) {
        stored_wait_t w = {&c, i, "total", 0};
        assert_true(wait_until(stored_marker_performed, &w, 10000));
        stored_t st = stored(&c, i, "total");
        int64_t ttl = st.obsolete_at_ms - tcluster_unix_ms();
        print_message("node %d: stored marker expires in %.2f days\n", i, (double)ttl / DAY_MS);
        assert_true(ttl > 10 * DAY_MS - 10 * 60 * 1000 && ttl <= 10 * DAY_MS);
        assert_int_equal(st.counter, 30);
    }
    tcluster_stop(&c);
}

typedef struct {
    tcluster_t *c;
    const char *key;
    const shoal_node_t *gone;
} set_pruned_wait_t;

/* Both survivors hold e1 and e2 and nothing of the removed node. */
static bool set_pruned_everywhere(void *arg)
{
    set_pruned_wait_t *w = arg;
    shoal_consistency_t l = c_local();
    for (int i = 0; i < 2; i++) {
        shoal_crdt_t *v = NULL;
        shoal_replicator_get_sync(w->c->rep[i], w->key, NULL, &l, &v);
        bool ok = v && !shoal_crdt_needs_pruning_from(v, w->gone) &&
                  shoal_orset_contains(v, "e1", 2) && shoal_orset_contains(v, "e2", 2);
        shoal_crdt_destroy(&v);
        if (!ok)
            return false;
    }
    return true;
}

typedef struct {
    tcluster_t *c;
    const char *key;
    const char *want; /* rendering */
} set_wait_t;

static bool both_render(void *arg)
{
    set_wait_t *w = arg;
    shoal_consistency_t l = c_local();
    for (int i = 0; i < 2; i++) {
        shoal_crdt_t *v = NULL;
        shoal_replicator_get_sync(w->c->rep[i], w->key, NULL, &l, &v);
        shoal_buf_t b = {0};
        if (v)
            shoal_crdt_render(v, &b);
        bool ok = v && strcmp(shoal_buf_cstr(&b), w->want) == 0;
        shoal_buf_free(&b);
        shoal_crdt_destroy(&v);
        if (!ok)
            return false;
    }
    return true;
}

/* The pruning of an ORSet re-homes the removed node's dots by a plan that the performed marker
   carries to every replica (and to its store): the non-owner holds the same plan, and a remove
   of an element added through the removed node removes it everywhere. */
static void test_orset_pruning_plan_travels(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    durable_settings(&s);
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 3, &s);
    shoal_consistency_t all = c_all(3000);
    assert_int_equal(t_add(&c, 2, "d-set", "e1", &all), 0);
    assert_int_equal(t_add(&c, 2, "d-set", "e2", &all), 0);
    const shoal_node_t *gone = shoal_system_self(c.sys[2]);
    tcluster_kill(&c, 2, true);
    set_pruned_wait_t pw = {&c, "d-set", gone};
    assert_true(wait_until(set_pruned_everywhere, &pw, 20000));
    for (int i = 0; i < 2; i++) {
        stored_wait_t w = {&c, i, "d-set", 0};
        assert_true(wait_until(stored_marker_performed, &w, 10000));
        stored_t st = stored(&c, i, "d-set");
        print_message("node %d: plan base %llu span %llu\n", i, (unsigned long long)st.plan_base,
                      (unsigned long long)st.plan_span);
        assert_int_equal(st.plan_span, 2); /* the removed node's two adds */
        assert_true(st.plan_base >= 1);
    }
    shoal_consistency_t local = c_local();
    assert_int_equal(t_remove(&c, 1, "d-set", "e1", &local), 0);
    assert_int_equal(t_add(&c, 0, "d-set", "e3", &local), 0);
    set_wait_t sw = {&c, "d-set", "ORSet{\"e2\", \"e3\"}"};
    assert_true(wait_until(both_render, &sw, 10000));
    tcluster_stop(&c);
}


static bool node0_has_count(void *arg)
{
    counter_wait_t *w = arg;
    shoal_consistency_t l = c_local();
    uint64_t v = 0;
    return t_gcounter(w->c, 0, w->key, &l, &v) == 0 && v == w->want;
}

typedef struct {
    tcluster_t *c;
    uint64_t want;
} stale_wait_t;

static bool stale_count_is(void *arg)
{
    stale_wait_t *w = arg;
    shoal_replicator_stats_t st;
    on_node(w->c, 0, get_stats, &st);
    return st.dropped_stale == w->want;
}

/* A push is late by its age beyond the fastest push seen from its sender, not by the receiver's
   clock: a sender whose wall clock is a minute behind still gets its pushes through (chaos seed
   77123, clocks skewed by up to 52 s: every push of the leader was dropped as stale, a join never
   reached it and the cluster did not converge), and a push 10 s later than that sender's usual
   is still dropped. */
static void test_push_ttl_survives_clock_skew(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    s.gossip_ttl_ms = 2000;
    s.gossip_interval_ms = 600000; /* only the forged pushes carry the keys */
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 2, &s);
    assert_int_equal(tcluster_forge_push(&c, 1, "skewed", tcluster_unix_ms() - 60000, false), 0);
    counter_wait_t w = {&c, "skewed", 5};
    w.c = &c;
    assert_true(wait_until(node0_has_count, &w, 5000)); /* a minute behind, yet on time */
    shoal_consistency_t l = c_local();
    uint64_t v = 0;
    assert_int_equal(tcluster_forge_push(&c, 1, "late", tcluster_unix_ms() - 70000, false), 0);
    stale_wait_t sw = {&c, 1};
    assert_true(wait_until(stale_count_is, &sw, 5000));
    assert_int_not_equal(t_gcounter(&c, 0, "late", &l, &v), 0); /* dropped: 10 s late */
    tcluster_stop(&c);
}

static int incr_as(shoal_crdt_t *v, void *arg)
{
    const char **as = arg;
    return shoal_gcounter_increment(v, shoal_node_intern(as[0]), (uint64_t)atoi(as[1]));
}

typedef struct {
    tcluster_t *c;
    uint64_t want;
} full_sent_wait_t;

static bool node0_sent_full(void *arg)
{
    full_sent_wait_t *w = arg;
    return stats_of(w->c, 0).full_state_sent == w->want;
}

/* Push-pull: a push that lacks something the receiver holds is answered with the receiver's
   state, but an answer (pull_reply) is merged and never answered in turn; otherwise two replicas
   whose value keeps changing (membership marks each state it merges as seen) volley whole states
   until both hold still (72% of the full states of a cold start of 50 members). */
static void test_push_answer_is_not_answered(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    s.gossip_interval_ms = 600000; /* only the forged pushes move the key */
    s.delta_enabled = false;
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 2, &s);
    shoal_consistency_t l = c_local();
    const char *own3[] = {shoal_node_id(shoal_system_self(c.sys[0])), "3"};
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "pp", shoal_gcounter_new(), &l,
                                                  incr_as, own3),
                     0);
    uint64_t sent = stats_of(&c, 0).full_state_sent;
    /* an answer that lacks node 0's 3: merged (3 + 5), not answered */
    assert_int_equal(tcluster_forge_push(&c, 1, "pp", tcluster_unix_ms(), true), 0);
    counter_wait_t w = {&c, "pp", 8};
    assert_true(wait_until(node0_has_count, &w, 5000));
    assert_int_equal(stats_of(&c, 0).full_state_sent, sent); /* answered in the same turn */
    /* the same state as a push: answered with node 0's 8 */
    assert_int_equal(tcluster_forge_push(&c, 1, "pp", tcluster_unix_ms(), false), 0);
    full_sent_wait_t sw = {&c, sent + 1};
    assert_true(wait_until(node0_sent_full, &sw, 5000));
    /* node 1 merges the answer when it arrives, after node 0 has sent it */
    counter_wait_t all8 = {&c, "pp", 8};
    assert_true(wait_until(all_have_count, &all8, 5000));
    tcluster_stop(&c);
}

#define GONE   "127.0.0.9:1000:42"
#define KEEPER "127.0.0.9:1001:43"

/* A marker loaded from the store does its work: state still holding the removed node's part is
   cleaned before it merges, so the pruned part cannot come back through a restarted node. */
static void test_loaded_marker_cleans_incoming_state(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    durable_settings(&s);
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 2, &s);
    shoal_consistency_t l = c_local();
    /* node 1 holds the removed node's old part, as a replica that was away would */
    const char *gone3[] = {GONE, "3"};
    assert_int_equal(
        shoal_replicator_update_sync(c.rep[1], "d-x", shoal_gcounter_new(), &l, incr_as, gone3), 0);
    /* node 0 restarts on a store where that part was pruned into KEEPER */
    shoal_crdt_t *pruned = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(pruned, shoal_node_intern(KEEPER), 8), 0);
    shoal_replicator_destroy(&c.rep[0]);
    int64_t now = tcluster_unix_ms();
    put_envelope(c.store[0], "d-x", pruned, GONE, KEEPER, now + DAY_MS, now);
    restart_replicator(&c, 0, &s);
    conv_t cv = {&c, "d-x"};
    assert_true(wait_until(converged, &cv, 10000));
    for (int i = 0; i < 2; i++) {
        uint64_t v = 0;
        assert_int_equal(t_gcounter(&c, i, "d-x", &l, &v), 0);
        assert_int_equal(v, 8); /* not 11: GONE's 3 was cleaned on both sides */
    }
    shoal_crdt_destroy(&pruned);
    tcluster_stop(&c);
}

/* Gossip rounds start only when the test opens the gate (the anti-entropy exchange is what syncs
   a node, so a closed gate holds a node unsynced). */
static int gossip_gate;

static size_t gated_choose(shoal_replicator_t *r, const shoal_node_t *const *peers, size_t n,
                           void *arg)
{
    (void)r;
    (void)peers;
    (void)arg;
    return __atomic_load_n(&gossip_gate, __ATOMIC_SEQ_CST) ? (size_t)rand() % n : n;
}

typedef struct {
    const char *key;
    const shoal_node_t *to;
} push_arg_t;

static int push_key(shoal_replicator_t *r, void *arg)
{
    push_arg_t *p = arg;
    return shoal_replicator_push(r, p->key, p->to);
}

typedef struct {
    tcluster_t *c;
    int i;
    const char *key;
    uint64_t want;
} local_wait_t;

static bool local_counter_is(void *arg)
{
    local_wait_t *w = arg;
    shoal_consistency_t l = c_local();
    uint64_t v = 0;
    return t_gcounter(w->c, w->i, w->key, &l, &v) == 0 && v == w->want;
}

/* A node whose store's newest write is older than the durable marker lifetime sends none of
   its loaded values (read answers, pushes, full state) until it has synced with a peer; a node
   with a recent store shares them at once. */
static void stale_store_case(bool old)
{
    shoal_replicator_settings_t s;
    durable_settings(&s);
    s.gossip_choose = gated_choose;
    __atomic_store_n(&gossip_gate, 0, __ATOMIC_SEQ_CST);
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 2, &s);
    shoal_replicator_destroy(&c.rep[0]);
    shoal_crdt_t *v7 = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(v7, shoal_system_self(c.sys[0]), 7), 0);
    int64_t age = old ? 11 * DAY_MS : 3600 * 1000;
    put_envelope(c.store[0], "d-old", v7, NULL, NULL, 0, tcluster_unix_ms() - age);
    restart_replicator(&c, 0, &s);
    shoal_consistency_t two = c_n(2, 1000), l = c_local();
    uint64_t v = 0;
    int rc = t_gcounter(&c, 1, "d-old", &two, &v);
    push_arg_t p = {"d-old", shoal_system_self(c.sys[1])};
    int prc = on_node(&c, 0, push_key, &p);
    if (!old) {
        assert_int_equal(rc, 0);
        assert_int_equal(v, 7);
        assert_int_equal(prc, 0);
    } else {
        assert_int_equal(rc, SHOAL_ETIMEOUT); /* node 0 did not answer */
        assert_int_equal(prc, SHOAL_EAGAIN);
        assert_int_equal(t_gcounter(&c, 1, "d-old", &l, &v), SHOAL_ENOTFOUND);
        assert_int_equal(stats_of(&c, 0).full_state_sent, 0);
        /* local service goes on: reads and writes */
        assert_int_equal(t_gcounter(&c, 0, "d-old", &l, &v), 0);
        assert_int_equal(v, 7);
        /* anti-entropy syncs it; then its values go out */
        __atomic_store_n(&gossip_gate, 1, __ATOMIC_SEQ_CST);
        local_wait_t w = {&c, 1, "d-old", 7};
        assert_true(wait_until(local_counter_is, &w, 10000));
        assert_int_equal(on_node(&c, 0, push_key, &p), 0);
    }
    shoal_crdt_destroy(&v7);
    tcluster_stop(&c);
}

static void test_old_store_not_shared_until_synced(void **state)
{
    (void)state;
    stale_store_case(true);
}

static void test_recent_store_shared_at_once(void **state)
{
    (void)state;
    stale_store_case(false);
}

/* Every node restarted on an old store (a whole cluster down longer than the marker lifetime):
   each holds back until the other's answer comes, and they still converge. A store whose
   entries carry no write time counts as old. */
static void test_all_old_stores_still_converge(void **state)
{
    (void)state;
    shoal_replicator_settings_t s;
    durable_settings(&s);
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 2, &s);
    for (int i = 0; i < 2; i++)
        shoal_replicator_destroy(&c.rep[i]);
    shoal_crdt_t *a = shoal_gcounter_new(), *b = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(a, shoal_system_self(c.sys[0]), 1), 0);
    assert_int_equal(shoal_gcounter_increment(b, shoal_system_self(c.sys[1]), 2), 0);
    put_envelope(c.store[0], "d-a", a, NULL, NULL, 0, tcluster_unix_ms() - 30 * DAY_MS);
    put_envelope(c.store[1], "d-b", b, NULL, NULL, 0, 0);
    for (int i = 0; i < 2; i++)
        restart_replicator(&c, i, &s);
    local_wait_t w[4] = {
        {&c, 0, "d-a", 1}, {&c, 0, "d-b", 2}, {&c, 1, "d-a", 1}, {&c, 1, "d-b", 2}};
    for (int k = 0; k < 4; k++)
        assert_true(wait_until(local_counter_is, &w[k], 10000));
    shoal_crdt_destroy(&a);
    shoal_crdt_destroy(&b);
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
        cmocka_unit_test_teardown(test_ops_reused_from_pool, tcluster_teardown),
        cmocka_unit_test_teardown(test_concurrent_writers_converge, tcluster_teardown),
        cmocka_unit_test_teardown(test_partition_times_out_then_heals, tcluster_teardown),
        cmocka_unit_test_teardown(test_loss_and_duplication_converge, tcluster_teardown),
        cmocka_unit_test_teardown(test_causal_gap_repaired_by_full_state, tcluster_teardown),
        cmocka_unit_test_teardown(test_late_node_catches_up, tcluster_teardown),
        cmocka_unit_test_teardown(test_large_value_replicates_in_chunks, tcluster_teardown),
        cmocka_unit_test_teardown(test_pruning_keeps_values, tcluster_teardown),
        cmocka_unit_test_teardown(test_tombstones_collected_when_safe, tcluster_teardown),
        cmocka_unit_test_teardown(test_store_failure_retried_with_backoff, tcluster_teardown),
        cmocka_unit_test_teardown(test_replica_store_failure_retried, tcluster_teardown),
        cmocka_unit_test_teardown(test_durable_pruning_marker_stored_for_10_days,
                                  tcluster_teardown),
        cmocka_unit_test_teardown(test_orset_pruning_plan_travels, tcluster_teardown),
        cmocka_unit_test_teardown(test_push_ttl_survives_clock_skew, tcluster_teardown),
        cmocka_unit_test_teardown(test_push_answer_is_not_answered, tcluster_teardown),
        cmocka_unit_test_teardown(test_new_member_catches_up_before_its_copy_counts,
                                  tcluster_teardown),
        cmocka_unit_test_teardown(test_loaded_marker_cleans_incoming_state, tcluster_teardown),
        cmocka_unit_test_teardown(test_old_store_not_shared_until_synced, tcluster_teardown),
        cmocka_unit_test_teardown(test_recent_store_shared_at_once, tcluster_teardown),
        cmocka_unit_test_teardown(test_all_old_stores_still_converge, tcluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
