/*  test_threads.c — the thread rule (ddata.h, THE THREAD RULE) and the blocking shutdown.

    Every node-thread call made from another thread is refused with SHOAL_ETHREAD, logs a warning
    and leaves in shoal_last_error_detail() the same words, which name the way in (its _sync
    twin, or shoal_system_call for the calls only upper layers make). Every _sync twin works from
    main against real nodes on loopback, and refuses the node thread itself (SHOAL_EDEADLK).
    shoal_cluster_shutdown_wait returns within its bound with the node terminated, and the
    members left behind see it Removed.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "members.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * The warnings Shoal logs, captured (the handler runs on the thread that logs: here, main).
 */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_refusal[600];
static int refusals;

static void capture(shoal_log_level_t level, const char *message, void *arg)
{
    (void)arg;
    if (level == SHOAL_LOG_WARNING && strstr(message, "node thread only")) {
        pthread_mutex_lock(&log_mu);
        snprintf(last_refusal, sizeof last_refusal, "%s", message);
        refusals++;
        pthread_mutex_unlock(&log_mu);
    }
}

static void capture_reset(void)
{
    pthread_mutex_lock(&log_mu);
    last_refusal[0] = 0;
    refusals = 0;
    pthread_mutex_unlock(&log_mu);
    shoal_error_detail_clear();
}

/* The refusal just made: the detail is "<call>: node thread only; from other threads use
   <way_in>", and the same line was logged, once. */
static void check_refusal(const char *call, const char *way_in, int line)
{
    char want[400];
    snprintf(want, sizeof want, "%s: node thread only; from other threads use %s", call, way_in);
    const char *detail = shoal_last_error_detail();
    if (strncmp(detail, want, strlen(want)) != 0)
        fail_msg("line %d: detail '%s', expected '%s'", line, detail, want);
    pthread_mutex_lock(&log_mu);
    bool logged = refusals == 1 && strcmp(last_refusal, detail) == 0;
    char seen[700];
    snprintf(seen, sizeof seen, "%s (%d lines)", last_refusal, refusals);
    pthread_mutex_unlock(&log_mu);
    if (!logged)
        fail_msg("line %d: logged '%s', expected '%s' once", line, seen, detail);
}

#define REFUSED(expr, call, way_in)                                                                \
    do {                                                                                           \
        capture_reset();                                                                           \
        int rc_ = (int)(expr);                                                                     \
        if (rc_ != SHOAL_ETHREAD)                                                                  \
            fail_msg("%s from main returned %d, expected SHOAL_ETHREAD", call, rc_);               \
        check_refusal(call, way_in, __LINE__);                                                     \
    } while (0)

/* For calls whose type has no room for a code: the value they give, then the refusal. */
#define REFUSED_QUIET(expr, value, call, way_in)                                                   \
    do {                                                                                           \
        capture_reset();                                                                           \
        assert_true((expr) == (value));                                                            \
        check_refusal(call, way_in, __LINE__);                                                     \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * Nodes
 */
typedef struct {
    shoal_system_t *sys;
    shoal_replicator_t *rep;
    shoal_cluster_t *cl;
} tnode_t;

static tnode_t nodes[3];

static shoal_system_t *new_system(void)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 1;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    assert_non_null(sys);
    assert_int_equal(err, 0);
    return sys;
}

static shoal_replicator_t *new_replicator(shoal_system_t *sys)
{
    shoal_replicator_settings_t rs;
    tcluster_fast_settings(&rs);
    int err = 1;
    shoal_replicator_t *r = shoal_replicator_new(sys, &rs, &err);
    assert_non_null(r);
    assert_int_equal(err, 0);
    return r;
}

static int teardown(void **state)
{
    (void)state;
    shoal_log_set_handler(NULL, NULL);
    for (int i = 0; i < 3; i++) {
        if (nodes[i].cl && nodes[i].rep)
            shoal_cluster_unfollow(nodes[i].cl, nodes[i].rep);
        shoal_cluster_destroy(&nodes[i].cl);
        shoal_replicator_destroy(&nodes[i].rep);
        shoal_system_destroy(&nodes[i].sys);
    }
    memset(nodes, 0, sizeof nodes);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Every node-thread call, from main: refused, naming the way in
 */
static void get_done(shoal_replicator_t *r, int status, const char *key, const shoal_crdt_t *v,
                     void *arg)
{
    (void)r, (void)status, (void)key, (void)v, (void)arg;
    fail_msg("a refused get completed");
}

static void update_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r, (void)status, (void)key, (void)arg;
    fail_msg("a refused update or delete completed");
}

static void changed(shoal_replicator_t *r, shoal_change_t change, const char *key,
                    const shoal_crdt_t *value, void *arg)
{
    (void)r, (void)change, (void)key, (void)value, (void)arg;
}

static int key_fn(const char *key, const shoal_type_t *type, void *arg)
{
    (void)key, (void)type, (void)arg;
    return 0;
}

static int add_tea(shoal_crdt_t *value, void *arg)
{
    return shoal_orset_add(value, arg, "tea", 3);
}

static void on_msg(shoal_system_t *sys, const shoal_node_t *from, uint16_t kind,
                   const uint8_t *data, size_t len, void *arg)
{
    (void)sys, (void)from, (void)kind, (void)data, (void)len, (void)arg;
}

static void on_request(shoal_system_t *sys, const shoal_reply_to_t *reply_to, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    (void)sys, (void)reply_to, (void)kind, (void)data, (void)len, (void)arg;
}

static void on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                    const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)sys, (void)ev, (void)node, (void)old, (void)count, (void)arg;
}

static void on_timer(shoal_system_t *sys, void *arg)
{
    (void)sys, (void)arg;
}

static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg);
static void on_cluster(shoal_cluster_t *c, void *arg)
{
    (void)c, (void)arg;
}

static void test_wrong_thread_refused(void **state)
{
    (void)state;
    shoal_log_set_handler(capture, NULL);
    tnode_t *n = &nodes[0];
    n->sys = new_system();
    n->rep = new_replicator(n->sys);
    const shoal_node_t *other = shoal_node_intern("127.0.0.1:9:1");
    const shoal_node_t *self = shoal_system_self(n->sys);
    shoal_consistency_t l = c_local();

    /* the replicator */
    REFUSED(shoal_replicator_get(n->rep, "k", NULL, &l, get_done, NULL), "shoal_replicator_get",
            "shoal_replicator_get_sync");
    /* refused, and initial is the call's all the same: nothing leaks (ASan checks) */
    REFUSED(shoal_replicator_update(n->rep, "cart", shoal_orset_new(), &l, add_tea, (void *)self,
                                    update_done, NULL),
            "shoal_replicator_update", "shoal_replicator_update_sync");
    REFUSED(shoal_replicator_update_typed(n->rep, "cart", shoal_type_by_name("ORSet"), &l, add_tea,
                                          (void *)self, update_done, NULL),
            "shoal_replicator_update_typed", "shoal_replicator_update_typed_sync");
    REFUSED(shoal_replicator_delete(n->rep, "k", &l, update_done, NULL), "shoal_replicator_delete",
            "shoal_replicator_delete_sync");
    REFUSED(shoal_replicator_subscribe(n->rep, "k", changed, NULL), "shoal_replicator_subscribe",
            "shoal_replicator_subscribe_sync");
    REFUSED(shoal_replicator_unsubscribe(n->rep, 1), "shoal_replicator_unsubscribe",
            "shoal_replicator_unsubscribe_sync");
    REFUSED(shoal_replicator_keys(n->rep, key_fn, NULL), "shoal_replicator_keys",
            "shoal_replicator_keys_sync");
    REFUSED(shoal_replicator_add_peer(n->rep, other, true, 1), "shoal_replicator_add_peer",
            "shoal_replicator_add_peer_sync");
    REFUSED(shoal_replicator_remove_peer(n->rep, other), "shoal_replicator_remove_peer",
            "shoal_replicator_remove_peer_sync");
    REFUSED(shoal_replicator_node_removed(n->rep, other), "shoal_replicator_node_removed",
            "shoal_replicator_node_removed_sync");
    REFUSED(shoal_replicator_push(n->rep, "k", other), "shoal_replicator_push",
            "shoal_system_call");
    REFUSED(shoal_replicator_set_quorum_gate(n->rep, true, "test"),
            "shoal_replicator_set_quorum_gate", "shoal_system_call");
    REFUSED(shoal_replicator_clear_quorum_gate(n->rep), "shoal_replicator_clear_quorum_gate",
            "shoal_system_call");
    REFUSED(shoal_replicator_set_voters(n->rep, 3, true), "shoal_replicator_set_voters",
            "shoal_system_call");
    REFUSED(shoal_replicator_peer_votes(n->rep, other, true), "shoal_replicator_peer_votes",
            "shoal_system_call");
    REFUSED_QUIET(shoal_replicator_replica_count(n->rep), 0, "shoal_replicator_replica_count",
                  "shoal_replicator_replica_count_sync");
    REFUSED_QUIET(shoal_replicator_peek(n->rep, "k"), NULL, "shoal_replicator_peek",
                  "shoal_replicator_get_sync");
    capture_reset();
    shoal_replicator_flush(n->rep);
    check_refusal("shoal_replicator_flush", "shoal_replicator_flush_sync", __LINE__);

    /* the node */
    REFUSED(shoal_system_connect(n->sys, "tcp://127.0.0.1:9"), "shoal_system_connect",
            "shoal_system_connect_sync");
    REFUSED(shoal_system_disconnect(n->sys, "tcp://127.0.0.1:9"), "shoal_system_disconnect",
            "shoal_system_disconnect_sync");
    const char *way = "shoal_system_call or shoal_system_post";
    REFUSED(shoal_system_register(n->sys, 0x7000, on_msg, NULL), "shoal_system_register", way);
    REFUSED(shoal_system_register_request(n->sys, 0xf000, on_request, NULL),
            "shoal_system_register_request", way);
    REFUSED(shoal_system_on_peer(n->sys, on_peer, NULL), "shoal_system_on_peer", way);
    REFUSED(shoal_system_off_peer(n->sys, on_peer, NULL), "shoal_system_off_peer", way);
    REFUSED(shoal_system_send(n->sys, other, 0x7000, "x", 1), "shoal_system_send", way);
    shoal_reply_to_t rt = {{1}, 1, 1};
    REFUSED(shoal_system_reply(n->sys, &rt, 0xf000, "x", 1), "shoal_system_reply", way);
    REFUSED(shoal_system_timer(n->sys, 10, false, on_timer, NULL), "shoal_system_timer", way);
    REFUSED(shoal_system_timer_cancel(n->sys, 1), "shoal_system_timer_cancel", way);
    REFUSED(shoal_system_quarantine(n->sys, other), "shoal_system_quarantine", way);
    shoal_buf_t b = {0};
    REFUSED(shoal_metrics_collect(n->sys, &b), "shoal_metrics_collect", "shoal_system_call");
    shoal_buf_free(&b);

    /* membership */
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    int err = 1;
    n->cl = shoal_cluster_new(n->sys, &cs, &err);
    assert_non_null(n->cl);
    REFUSED(shoal_cluster_subscribe(n->cl, on_event, NULL), "shoal_cluster_subscribe",
            "shoal_cluster_subscribe_sync");
    REFUSED(shoal_cluster_unsubscribe(n->cl, 1), "shoal_cluster_unsubscribe",
            "shoal_cluster_unsubscribe_sync");
    REFUSED(shoal_cluster_on_up(n->cl, on_cluster, NULL), "shoal_cluster_on_up",
            "shoal_cluster_on_up_sync");
    REFUSED(shoal_cluster_on_removed(n->cl, on_cluster, NULL), "shoal_cluster_on_removed",
            "shoal_cluster_on_removed_sync");
    REFUSED_QUIET(shoal_cluster_paused(n->cl), false, "shoal_cluster_paused",
                  "shoal_cluster_may_act");
    capture_reset();
    shoal_cluster_note_event(n->cl, "test", NULL, NULL, 0);
    check_refusal("shoal_cluster_note_event", "shoal_system_call", __LINE__);

    /* what is any-thread is not refused: nothing logged */
    capture_reset();
    shoal_replicator_stats_t st;
    assert_int_equal(shoal_replicator_stats(n->rep, &st), 0);
    shoal_system_stats_t ss;
    assert_int_equal(shoal_system_stats(n->sys, &ss), 0);
    assert_false(shoal_cluster_may_act(n->cl));
    { /* asserted unlocked: a failure jumps out, and the node thread must not block */
        pthread_mutex_lock(&log_mu);
        long long seen_ = (long long)(refusals);
        pthread_mutex_unlock(&log_mu);
        assert_int_equal(seen_, 0);
    }
    shoal_log_set_handler(NULL, NULL);
}

/* The _sync twins refuse the node thread itself: SHOAL_EDEADLK, never a deadlock. */
static int twins_on_node(shoal_system_t *sys, void *arg)
{
    tnode_t *n = arg;
    const shoal_node_t *other = shoal_node_intern("127.0.0.1:9:1");
    shoal_consistency_t l = c_local();
    shoal_crdt_t *v = NULL;
    int fails = 0;
    fails += shoal_replicator_get_sync(n->rep, "k", NULL, &l, &v) != SHOAL_EDEADLK;
    fails += shoal_replicator_update_sync(n->rep, "k", shoal_gcounter_new(), &l, NULL, NULL) !=
             SHOAL_EDEADLK; /* and initial is freed */
    fails += shoal_replicator_update_typed_sync(n->rep, "k", shoal_type_by_name("GCounter"), &l,
                                                NULL, NULL) != SHOAL_EDEADLK;
    fails += shoal_replicator_delete_sync(n->rep, "k", &l) != SHOAL_EDEADLK;
    fails += shoal_replicator_add_peer_sync(n->rep, other, true, 1) != SHOAL_EDEADLK;
    fails += shoal_replicator_remove_peer_sync(n->rep, other) != SHOAL_EDEADLK;
    fails += shoal_replicator_node_removed_sync(n->rep, other) != SHOAL_EDEADLK;
    fails += shoal_replicator_subscribe_sync(n->rep, "k", changed, NULL) != SHOAL_EDEADLK;
    fails += shoal_replicator_unsubscribe_sync(n->rep, 1) != SHOAL_EDEADLK;
    fails += shoal_replicator_flush_sync(n->rep) != SHOAL_EDEADLK;
    fails += shoal_replicator_replica_count_sync(n->rep) != SHOAL_EDEADLK;
    fails += shoal_replicator_keys_sync(n->rep, key_fn, NULL) != SHOAL_EDEADLK;
    fails += shoal_system_connect_sync(sys, "tcp://127.0.0.1:9") != SHOAL_EDEADLK;
    fails += shoal_system_disconnect_sync(sys, "tcp://127.0.0.1:9") != SHOAL_EDEADLK;
    fails += shoal_cluster_subscribe_sync(n->cl, on_event, NULL) != SHOAL_EDEADLK;
    fails += shoal_cluster_unsubscribe_sync(n->cl, 1) != SHOAL_EDEADLK;
    fails += shoal_cluster_on_up_sync(n->cl, on_cluster, NULL) != SHOAL_EDEADLK;
    fails += shoal_cluster_on_removed_sync(n->cl, on_cluster, NULL) != SHOAL_EDEADLK;
    fails += shoal_cluster_shutdown_wait(n->cl, 1000) != SHOAL_EDEADLK;
    return fails;
}

static void test_sync_twins_refuse_the_node_thread(void **state)
{
    (void)state;
    tnode_t *n = &nodes[0];
    n->sys = new_system();
    n->rep = new_replicator(n->sys);
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    int err = 1;
    n->cl = shoal_cluster_new(n->sys, &cs, &err);
    assert_non_null(n->cl);
    assert_int_equal(shoal_system_call(n->sys, twins_on_node, n), 0);
    /* the refused shutdown_wait did not start a shutdown */
    assert_false(shoal_cluster_terminated(n->cl));
}

/* ---------------------------------------------------------------------------------------------
 * Every _sync twin from main, against two real nodes
 */
typedef struct {
    pthread_mutex_t mu;
    int events;        /* notifications received */
    bool saw_tea;      /* a notification of "cart" holding "tea" */
    bool wrong_thread; /* a notification that did not run on the node thread */
    shoal_system_t *sys;
} box_t;

static box_t box = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void cart_changed(shoal_replicator_t *r, shoal_change_t change, const char *key,
                         const shoal_crdt_t *value, void *arg)
{
    (void)r;
    box_t *b = arg;
    pthread_mutex_lock(&b->mu);
    b->events++;
    if (!shoal_system_on_thread(b->sys))
        b->wrong_thread = true;
    if (change == SHOAL_CHANGED && strcmp(key, "cart") == 0 && value &&
        shoal_orset_contains(value, "tea", 3))
        b->saw_tea = true;
    pthread_mutex_unlock(&b->mu);
}

static bool saw_tea(void *arg)
{
    box_t *b = arg;
    pthread_mutex_lock(&b->mu);
    bool yes = b->saw_tea;
    pthread_mutex_unlock(&b->mu);
    return yes;
}

static int box_events(box_t *b)
{
    pthread_mutex_lock(&b->mu);
    int n = b->events;
    pthread_mutex_unlock(&b->mu);
    return n;
}

typedef struct {
    shoal_replicator_t *r;
    int want;
} count_t;

static bool replica_count_is(void *arg)
{
    count_t *c = arg;
    return shoal_replicator_replica_count_sync(c->r) == c->want;
}

typedef struct {
    pthread_t caller;
    int keys;
    bool cart, other_thread;
} keys_seen_t;

static int list_key(const char *key, const shoal_type_t *type, void *arg)
{
    keys_seen_t *k = arg;
    k->keys++;
    if (!pthread_equal(pthread_self(), k->caller))
        k->other_thread = true;
    if (strcmp(key, "cart") == 0 && type == shoal_type_by_name("ORSet"))
        k->cart = true;
    return 0;
}

static int add_coffee(shoal_crdt_t *value, void *arg)
{
    return shoal_orset_add(value, arg, "coffee", 6);
}

static void test_sync_twins_from_main(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) {
        nodes[i].sys = new_system();
        nodes[i].rep = new_replicator(nodes[i].sys);
    }
    shoal_system_t *a = nodes[0].sys, *b = nodes[1].sys;
    shoal_replicator_t *ra = nodes[0].rep, *rb = nodes[1].rep;
    /* the static-peer program: connect and add peers, from main */
    assert_int_equal(shoal_system_connect_sync(a, shoal_system_endpoint(b)), 0);
    assert_int_equal(shoal_system_connect_sync(b, shoal_system_endpoint(a)), 0);
    assert_int_equal(shoal_replicator_add_peer_sync(ra, shoal_system_self(b), true, 2), 0);
    assert_int_equal(shoal_replicator_add_peer_sync(rb, shoal_system_self(a), true, 1), 0);
    count_t two_a = {ra, 2}, two_b = {rb, 2};
    assert_true(wait_until(replica_count_is, &two_a, 5000));
    assert_true(wait_until(replica_count_is, &two_b, 5000));

    box.sys = b;
    int sub = shoal_replicator_subscribe_sync(rb, "cart", cart_changed, &box);
    assert_true(sub > 0);
    /* the natural call: the initial value is the update's (ASan: no leak) */
    shoal_consistency_t all = c_all(3000);
    int rc = SHOAL_ETIMEOUT;
    for (int tries = 0; tries < 10 && rc == SHOAL_ETIMEOUT; tries++) /* until the link is up */
        rc = shoal_replicator_update_sync(ra, "cart", shoal_orset_new(), &all, add_tea,
                                          (void *)shoal_system_self(a));
    assert_int_equal(rc, 0);
    assert_true(wait_until(saw_tea, &box, 5000));
    { /* asserted unlocked: a failure jumps out, and the node thread must not block */
        pthread_mutex_lock(&box.mu);
        long long seen_ = (long long)(box.wrong_thread);
        pthread_mutex_unlock(&box.mu);
        assert_false(seen_); /* notifications run on the node thread */
    }

    shoal_crdt_t *v = NULL;
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_get_sync(rb, "cart", shoal_type_by_name("ORSet"), &l, &v), 0);
    assert_non_null(v);
    assert_true(shoal_orset_contains(v, "tea", 3));
    shoal_crdt_destroy(&v);

    keys_seen_t k = {.caller = pthread_self()};
    assert_int_equal(shoal_replicator_keys_sync(rb, list_key, &k), 0);
    assert_int_equal(k.keys, 1);
    assert_true(k.cart);
    assert_false(k.other_thread); /* keys_sync's fn runs on the caller's thread */

    /* after unsubscribe_sync returns, nothing more is notified: a local write and a flush */
    assert_int_equal(shoal_replicator_flush_sync(rb), 0);
    assert_int_equal(shoal_replicator_unsubscribe_sync(rb, sub), 0);
    assert_int_equal(shoal_replicator_unsubscribe_sync(rb, sub), SHOAL_ENOTFOUND);
    int before = box_events(&box);
    assert_int_equal(shoal_replicator_update_sync(rb, "cart", shoal_orset_new(), &l, add_coffee,
                                                  (void *)shoal_system_self(b)),
                     0);
    assert_int_equal(shoal_replicator_flush_sync(rb), 0);
    assert_int_equal(box_events(&box), before);

    /* update_typed: a missing key starts as the type's empty value, an existing one is modified
       in place of a copy; another type, or a type without an empty value, is refused */
    const shoal_type_t *orset = shoal_type_by_name("ORSet");
    assert_int_equal(shoal_replicator_update_typed_sync(rb, "basket", orset, &l, add_coffee,
                                                        (void *)shoal_system_self(b)),
                     0);
    assert_int_equal(shoal_replicator_update_typed_sync(rb, "basket", orset, &l, add_tea,
                                                        (void *)shoal_system_self(b)),
                     0);
    shoal_crdt_t *basket = NULL;
    assert_int_equal(shoal_replicator_get_sync(rb, "basket", orset, &l, &basket), 0);
    assert_int_equal(shoal_orset_size(basket), 2);
    shoal_crdt_destroy(&basket);
    assert_int_equal(shoal_replicator_update_typed_sync(rb, "basket", shoal_type_by_name("GCounter"),
                                                        &l, NULL, NULL),
                     SHOAL_ETYPE);
    assert_int_equal(shoal_replicator_update_typed_sync(rb, "basket2",
                                                        shoal_type_by_name("ORSetDelta"), &l, NULL,
                                                        NULL),
                     SHOAL_ETYPE);

    assert_int_equal(shoal_replicator_delete_sync(ra, "cart", &l), 0);

    /* peers go the same way they came */
    assert_int_equal(shoal_replicator_remove_peer_sync(ra, shoal_system_self(b)), 0);
    assert_int_equal(shoal_replicator_replica_count_sync(ra), 1);
    assert_int_equal(shoal_replicator_remove_peer_sync(ra, shoal_system_self(b)), SHOAL_ENOTFOUND);
    assert_int_equal(shoal_replicator_node_removed_sync(rb, shoal_system_self(a)), 0);
    assert_int_equal(shoal_replicator_replica_count_sync(rb), 1);
    assert_int_equal(shoal_system_disconnect_sync(a, shoal_system_endpoint(b)), 0);
    assert_int_equal(shoal_system_disconnect_sync(a, shoal_system_endpoint(b)), SHOAL_ENOTFOUND);
}

/* ---------------------------------------------------------------------------------------------
 * A 3-node cluster: one member leaves with shoal_cluster_shutdown_wait
 */
typedef struct {
    pthread_mutex_t mu;
    const shoal_node_t *removed[8];
    int n_removed;
    int ups, removeds; /* on_up / on_removed callbacks */
    bool wrong_thread;
    shoal_system_t *sys; /* the node whose events these are */
} events_t;

static events_t ev0 = {.mu = PTHREAD_MUTEX_INITIALIZER};
static events_t cb[3] = {{.mu = PTHREAD_MUTEX_INITIALIZER},
                         {.mu = PTHREAD_MUTEX_INITIALIZER},
                         {.mu = PTHREAD_MUTEX_INITIALIZER}};

static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    events_t *e = arg;
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    if (!shoal_system_on_thread(e->sys))
        e->wrong_thread = true;
    if (ev->kind == SHOAL_EV_MEMBER_REMOVED && e->n_removed < 8)
        e->removed[e->n_removed++] = ev->member->node;
    pthread_mutex_unlock(&e->mu);
}

static void on_up_cb(shoal_cluster_t *c, void *arg)
{
    (void)c;
    events_t *e = arg;
    pthread_mutex_lock(&e->mu);
    e->ups++;
    if (!shoal_system_on_thread(e->sys))
        e->wrong_thread = true;
    pthread_mutex_unlock(&e->mu);
}

static void on_removed_cb(shoal_cluster_t *c, void *arg)
{
    (void)c;
    events_t *e = arg;
    pthread_mutex_lock(&e->mu);
    e->removeds++;
    pthread_mutex_unlock(&e->mu);
}

static bool all_up(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++) {
        pthread_mutex_lock(&cb[i].mu);
        int ups = cb[i].ups;
        pthread_mutex_unlock(&cb[i].mu);
        if (ups != 1)
            return false;
    }
    for (int i = 0; i < 3; i++) {
        shoal_cluster_view_t v;
        if (shoal_cluster_view(nodes[i].cl, &v) != 0)
            return false;
        bool ok = v.n_members == 3 && v.converged;
        for (size_t k = 0; ok && k < v.n_members; k++)
            ok = v.members[k].status == SHOAL_MEMBER_UP;
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

static bool node0_saw_removed(void *arg)
{
    const shoal_node_t *gone = arg;
    pthread_mutex_lock(&ev0.mu);
    bool seen = false;
    for (int i = 0; i < ev0.n_removed; i++)
        seen |= ev0.removed[i] == gone;
    pthread_mutex_unlock(&ev0.mu);
    return seen;
}

/* node 1's view no longer holds the node (a view leaves Removed members out) */
static bool node1_lost(void *arg)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(nodes[1].cl, &v) != 0)
        return false;
    bool gone = shoal_cluster_view_member(&v, arg) == NULL && v.n_members == 2;
    shoal_cluster_view_free(&v);
    return gone;
}

static void test_shutdown_wait_leaves(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    for (int i = 0; i < 3; i++) {
        nodes[i].sys = new_system();
        int err = 1;
        nodes[i].cl = shoal_cluster_new(nodes[i].sys, &cs, &err);
        assert_non_null(nodes[i].cl);
        nodes[i].rep = new_replicator(nodes[i].sys);
        assert_int_equal(shoal_cluster_follow(nodes[i].cl, nodes[i].rep), 0);
        cb[i].sys = nodes[i].sys;
        cb[i].ups = cb[i].removeds = 0;
        assert_int_equal(shoal_cluster_on_up_sync(nodes[i].cl, on_up_cb, &cb[i]), 0);
        assert_int_equal(shoal_cluster_on_removed_sync(nodes[i].cl, on_removed_cb, &cb[i]), 0);
        const char *seed = shoal_system_endpoint(nodes[0].sys);
        assert_int_equal(shoal_cluster_join(nodes[i].cl, &seed, 1), 0);
    }
    assert_true(wait_until(all_up, NULL, 30000));
    ev0.sys = nodes[0].sys;
    ev0.n_removed = 0;
    int sub = shoal_cluster_subscribe_sync(nodes[0].cl, on_event, &ev0);
    assert_true(sub > 0);
    /* data written with WriteMajority before the leave is there after it */
    shoal_consistency_t maj = c_majority(3000);
    assert_int_equal(shoal_replicator_update_sync(nodes[2].rep, "cart", shoal_orset_new(), &maj,
                                                  add_tea, (void *)shoal_system_self(nodes[2].sys)),
                     0);

    /* a bound too short to finish: back at the bound, the shutdown still running */
    const shoal_node_t *leaving = shoal_system_self(nodes[2].sys);
    int64_t start = shoal_now_ms(), t0 = start;
    int rc = shoal_cluster_shutdown_wait(nodes[2].cl, 1);
    int64_t took = shoal_now_ms() - t0;
    print_message("shutdown_wait(1 ms): %s after %lld ms\n", shoal_strerror(rc), (long long)took);
    assert_true(rc == SHOAL_ETIMEOUT || rc == 0);
    assert_true(took < 1000 * tscale());
    /* then a real bound: returns terminated, well inside it */
    const uint32_t bound = 30000;
    t0 = shoal_now_ms();
    assert_int_equal(shoal_cluster_shutdown_wait(nodes[2].cl, bound * (uint32_t)tscale()), 0);
    took = shoal_now_ms() - t0;
    print_message("shutdown_wait(%u ms): terminated after %lld ms (%lld ms since the leave)\n",
                  bound * (uint32_t)tscale(), (long long)took, (long long)(shoal_now_ms() - start));
    assert_true(took <= (int64_t)bound * tscale());
    assert_true(shoal_cluster_terminated(nodes[2].cl));
    { /* asserted unlocked: a failure jumps out, and the node thread must not block */
        pthread_mutex_lock(&cb[2].mu);
        long long seen_ = (long long)(cb[2].removeds);
        pthread_mutex_unlock(&cb[2].mu);
        assert_int_equal(seen_, 1); /* on_removed ran, once */
    }
    /* waiting again on a terminated node returns at once */
    assert_int_equal(shoal_cluster_shutdown_wait(nodes[2].cl, 1), 0);

    /* the others see it Removed: an event on node 0, and node 1's view */
    assert_true(wait_until(node0_saw_removed, (void *)leaving, 15000));
    assert_true(wait_until(node1_lost, (void *)leaving, 15000));
    { /* asserted unlocked: a failure jumps out, and the node thread must not block */
        pthread_mutex_lock(&ev0.mu);
        long long seen_ = (long long)(ev0.wrong_thread);
        pthread_mutex_unlock(&ev0.mu);
        assert_false(seen_);
    }
    for (int i = 0; i < 3; i++) {
        { /* asserted unlocked: a failure jumps out, and the node thread must not block */
            pthread_mutex_lock(&cb[i].mu);
            long long seen_ = (long long)(cb[i].wrong_thread);
            pthread_mutex_unlock(&cb[i].mu);
            assert_false(seen_);
        }
    }
    assert_int_equal(shoal_cluster_unsubscribe_sync(nodes[0].cl, sub), 0);
    shoal_crdt_t *v = NULL;
    assert_int_equal(shoal_replicator_get_sync(nodes[1].rep, "cart", NULL, &maj, &v), 0);
    assert_true(shoal_orset_contains(v, "tea", 3));
    shoal_crdt_destroy(&v);

    /* the documented order to stop the node that left */
    shoal_cluster_unfollow(nodes[2].cl, nodes[2].rep);
    shoal_cluster_destroy(&nodes[2].cl);
    shoal_replicator_destroy(&nodes[2].rep);
    shoal_system_destroy(&nodes[2].sys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_wrong_thread_refused, teardown),
        cmocka_unit_test_teardown(test_sync_twins_refuse_the_node_thread, teardown),
        cmocka_unit_test_teardown(test_sync_twins_from_main, teardown),
        cmocka_unit_test_teardown(test_shutdown_wait_leaves, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
