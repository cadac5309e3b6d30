/*  test_entity_state.c — entities that keep their state in the replicator: state across a
    SIGKILL-like crash of the hosting node, a stale owner's write refused by the replicas, state
    handed over on rebalance with messages in flight (state and order kept), reminders after
    passivation and after a crash, at-least-once delivery through a crash with nothing processed
    twice.

    The "acct" type keeps "<balance> <last seq> <fired>" as its stored state:
      "add:<n>"          balance += n, saved, answered "ok" once the save is in (save_reply);
      "add:<n>:<seq>"    the same for a numbered sender: seq <= last is a repeat (answered, not
                         applied), seq > last + 1 is an order error (counted);
      "get"              answers "<balance> <last> <fired> <origin>";
      "remind:<id>:<ms>" schedules a reminder "fired", answers once it is written;
      "timer:<id>:<ms>"  starts an in-memory timer;
      "delete"           deletes its state for good and passivates;
      "passivate"        shoal_entity_passivate.
    Every node's entities note in a table where they run and what they processed.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "members.h"
#include "shards.h"
#include "../../sharding/estate.h"

#define A "acct"
#define MAX_IDS 64

/* --- the table -------------------------------------------------------------------------------- */
typedef struct {
    char id[32];
    int node;          /* of the live (or last) incarnation */
    int starts;
    int origin;        /* state origin at the last start */
    int processed;     /* adds applied */
    int order_errors;
    int fired;         /* reminders received */
    int fired_node;
} arec_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static arec_t recs[MAX_IDS];
static int n_recs;

static arec_t *rec(const char *id)
{
    for (int i = 0; i < n_recs; i++)
        if (strcmp(recs[i].id, id) == 0)
            return &recs[i];
    if (n_recs == MAX_IDS)
        return &recs[0];
    arec_t *r = &recs[n_recs++];
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    return r;
}

static arec_t rec_get(const char *id)
{
    pthread_mutex_lock(&mu);
    arec_t r = *rec(id);
    pthread_mutex_unlock(&mu);
    return r;
}

/* --- the acct type ---------------------------------------------------------------------------- */
typedef struct {
    long balance, last;
    int fired;
    int node;
} acct_t;

static void acct_store(shoal_entity_t *e, acct_t *a, char *buf, size_t cap, size_t *len)
{
    (void)e;
    *len = (size_t)snprintf(buf, cap, "%ld %ld %d", a->balance, a->last, a->fired);
}

static void *acct_start(shoal_entity_t *e, void *type_arg)
{
    acct_t *a = calloc(1, sizeof *a);
    a->node = ((tcounter_arg_t *)type_arg)->node;
    size_t len = 0;
    const char *s = shoal_entity_stored(e, &len);
    if (s && len < 128) {
        char b[128];
        memcpy(b, s, len);
        b[len] = 0;
        sscanf(b, "%ld %ld %d", &a->balance, &a->last, &a->fired);
    }
    pthread_mutex_lock(&mu);
    arec_t *r = rec(shoal_entity_id(e));
    r->node = a->node;
    r->starts++;
    r->origin = shoal_entity_state_origin(e);
    pthread_mutex_unlock(&mu);
    return a;
}

typedef struct {
    shoal_region_t *r;
    shoal_sender_t to;
} kept_t;

static void remind_written(shoal_entity_t *e, void *state, int status, void *arg)
{
    (void)state;
    kept_t *k = arg;
    const char *msg = status == 0 ? "ok" : "failed";
    shoal_region_reply(shoal_entity_region(e), &k->to, msg, strlen(msg));
    free(k);
}

static void acct_receive(shoal_entity_t *e, void *state, const void *msg, size_t len,
                         void *type_arg)
{
    (void)type_arg;
    acct_t *a = state;
    char m[128], out[128];
    size_t n = len < sizeof m - 1 ? len : sizeof m - 1;
    memcpy(m, msg, n);
    m[n] = 0;
    size_t olen;
    if (shoal_entity_reminder(e)) {
        a->fired++;
        pthread_mutex_lock(&mu);
        arec_t *r = rec(shoal_entity_id(e));
        r->fired++;
        r->fired_node = a->node;
        pthread_mutex_unlock(&mu);
        acct_store(e, a, out, sizeof out, &olen);
        shoal_entity_save(e, out, olen, NULL, NULL);
        return;
    }
    long v, seq;
    int k = 0;
    if (sscanf(m, "add:%ld:%ld", &v, &seq) == 2) {
        if (seq <= a->last) {
            shoal_entity_reply(e, "ok", 2); /* a repeat */
            return;
        }
        if (seq != a->last + 1) {
            pthread_mutex_lock(&mu);
            rec(shoal_entity_id(e))->order_errors++;
            pthread_mutex_unlock(&mu);
        }
        a->last = seq;
        k = 1;
    } else if (sscanf(m, "add:%ld", &v) == 1) {
        k = 1;
    }
    if (k) {
        a->balance += v;
        pthread_mutex_lock(&mu);
        rec(shoal_entity_id(e))->processed++;
        pthread_mutex_unlock(&mu);
        acct_store(e, a, out, sizeof out, &olen);
        if (shoal_entity_sender(e).ask_id) {
            shoal_entity_save_reply(e, out, olen, "ok", 2);
        } else {
            shoal_entity_save(e, out, olen, NULL, NULL);
            /* a tell has no one to answer, but a producer's message does: its confirmation
               carries this, given after the save */
            shoal_entity_reply(e, "applied", 7);
        }
        return;
    }
    if (strcmp(m, "get") == 0) {
        int len2 = snprintf(out, sizeof out, "%ld %ld %d %d", a->balance, a->last, a->fired,
                            shoal_entity_state_origin(e));
        shoal_entity_reply(e, out, (size_t)len2);
        return;
    }
    char id[32];
    unsigned ms;
    if (sscanf(m, "remind:%31[^:]:%u", id, &ms) == 2) {
        kept_t *kp = calloc(1, sizeof *kp);
        kp->to = shoal_entity_sender(e);
        if (shoal_entity_remind(e, id, ms, "fired", 5, remind_written, kp) != 0) {
            free(kp);
            shoal_entity_reply(e, "failed", 6);
        }
        return;
    }
    if (sscanf(m, "timer:%31[^:]:%u", id, &ms) == 2) {
        int rc = shoal_entity_start_timer(e, id, ms, "tick", 4);
        shoal_entity_reply(e, rc == 0 ? "ok" : "failed", rc == 0 ? 2 : 6);
        return;
    }
    if (strcmp(m, "passivate") == 0) {
        shoal_entity_passivate(e);
        return;
    }
    if (strcmp(m, "delete") == 0) {
        /* forget the state for good, then go: the next message starts afresh */
        kept_t *kp = calloc(1, sizeof *kp);
        kp->to = shoal_entity_sender(e);
        if (shoal_entity_delete_state(e, remind_written, kp) != 0) {
            free(kp);
            shoal_entity_reply(e, "failed", 6);
        }
        shoal_entity_passivate(e);
        return;
    }
}

static void acct_stop(shoal_entity_t *e, void *state, void *type_arg)
{
    (void)e;
    (void)type_arg;
    free(state);
}

static void acct_hand_over(shoal_entity_t *e, void *state, shoal_buf_t *out, void *type_arg)
{
    (void)type_arg;
    char b[128];
    size_t len;
    acct_store(e, state, b, sizeof b, &len);
    shoal_buf_append(out, b, len);
}

static const shoal_entity_fns_t acct_fns = {acct_start, acct_receive, acct_stop, acct_hand_over};

static void acct_settings(shoal_sharding_settings_t *s)
{
    tshard_settings(s);
    s->stop_message = NULL;
    s->stop_message_len = 0;
    s->entity_state = true;
    s->state_write_timeout_ms = 2000 * (uint32_t)tscale();
    s->number_of_shards = 20;
}

/* --- nodes ------------------------------------------------------------------------------------ */
static shoal_region_t *ar[TS_MAX];

static void node_start(int i, int seed)
{
    tsnode_opts_t o = {.no_region = true, .seed = seed};
    tsnode_start(i, &o);
    tsn[i].arg.node = i;
}

static void region_on(int i)
{
    shoal_sharding_settings_t s;
    acct_settings(&s);
    int err = 0;
    ar[i] = shoal_region_start(tsn[i].sh, A, &s, &acct_fns, &tsn[i].arg, &err);
    if (!ar[i])
        fail_msg("node %d: region: %s", i, shoal_strerror(err));
}

static int n_regs;

static bool registered(void *arg)
{
    (void)arg;
    for (int i = 0; i < n_regs; i++) {
        const char *t = A;
        if (!shoal_sharding_healthy(tsn[i].sh, &t, 1))
            return false;
    }
    const shoal_node_t **nodes = NULL;
    size_t n = 0;
    if (shoal_region_current_regions(ar[0], 2000, &nodes, &n) != 0)
        return false;
    free(nodes);
    return (int)n == n_regs;
}

/* Every region of the first n nodes has registered with the coordinator, which knows them all
   (so allocation spreads shards over all of them). */
static void wait_registered(int n)
{
    n_regs = n;
    if (!wait_until(registered, NULL, 20000))
        fail_msg("the %d regions did not register", n);
}

static void cluster_of(int n)
{
    node_start(0, 0);
    tsnode_wait_up(1u, 15000);
    for (int i = 1; i < n; i++)
        node_start(i, 0);
    tsnode_wait_up((1u << n) - 1, 20000);
    for (int i = 0; i < n; i++)
        region_on(i);
    wait_registered(n);
}

/* Nodes whose regions keep their keys in LMDB (test_state_after_full_restart). */
static shoal_replicator_t *drep[TS_MAX];
static shoal_durable_t *ddur[TS_MAX];
static char droot[64];

static void dnode_start(int i, int seed)
{
    node_start(i, seed);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/node%d", droot, i);
    drep[i] = tsnode_durable_replicator(i, dir, &ddur[i]);
    if (seed != i)
        return;
    tsnode_wait_up(1u << i, 15000);
}

static void dregion_on(int i)
{
    shoal_sharding_settings_t s;
    acct_settings(&s);
    s.replicator = drep[i];
    int err = 0;
    ar[i] = shoal_region_start(tsn[i].sh, A, &s, &acct_fns, &tsn[i].arg, &err);
    if (!ar[i])
        fail_msg("node %d: region: %s", i, shoal_strerror(err));
}

/* Three nodes on LMDB (under droot) with a region each, registered. */
static void dcluster_of3(void)
{
    for (int i = 0; i < 3; i++)
        dnode_start(i, 0);
    tsnode_wait_up(0x7, 20000);
    for (int i = 0; i < 3; i++)
        dregion_on(i);
    wait_registered(3);
}

/* Sharding and membership first, then the replicator and its store, then the system. */
static void dnode_stop(int i)
{
    shoal_sharding_destroy(&tsn[i].sh);
    shoal_cluster_destroy(&tsn[i].cl);
    shoal_replicator_destroy(&drep[i]);
    shoal_durable_close(&ddur[i]);
    tsnode_stop(i);
    ar[i] = NULL;
}


static int teardown(void **state)
{
    for (int i = 0; i < TS_MAX; i++)
        if (drep[i])
            dnode_stop(i);
    if (droot[0])
        trm_tree(droot);
    droot[0] = 0;
    memset(ar, 0, sizeof ar);
    pthread_mutex_lock(&mu);
    n_recs = 0;
    pthread_mutex_unlock(&mu);
    return tsnode_teardown(state);
}

/* An ask from this thread, retried until it is answered "ok"-like or the deadline passes. */
static int ask(int node, const char *id, const char *msg, char *reply, size_t cap, int timeout_ms)
{
    int64_t until = shoal_now_ms() + (int64_t)timeout_ms * tscale();
    int rc = SHOAL_ETIMEOUT;
    while (shoal_now_ms() < until) {
        shoal_buf_t b = {0};
        rc = shoal_region_ask_sync(ar[node], id, msg, strlen(msg), 1000 * (uint32_t)tscale(), &b);
        if (rc == 0) {
            size_t n = b.len < cap - 1 ? b.len : cap - 1;
            memcpy(reply, b.data, n);
            reply[n] = 0;
            shoal_buf_free(&b);
            return 0;
        }
        shoal_buf_free(&b);
        usleep(50 * 1000); /* between retries of a failed ask (the shard is moving) */
    }
    return rc;
}

static long balance_of(int node, const char *id, int *origin)
{
    char r[128];
    if (ask(node, id, "get", r, sizeof r, 30000) != 0)
        return -1;
    long b = -1, last;
    int fired, o = -1;
    sscanf(r, "%ld %ld %d %d", &b, &last, &fired, &o);
    if (origin)
        *origin = o;
    return b;
}

/* --- tests ------------------------------------------------------------------------------------ */

/* Every acknowledged save survives the crash of the node that hosted the entity. */
static void test_state_survives_crash(void **state)
{
    (void)state;
    cluster_of(3);
    char ids[12][32];
    for (int k = 0; k < 12; k++)
        snprintf(ids[k], sizeof ids[k], "acct-%d", k);
    char r[64];
    for (int round = 0; round < 10; round++)
        for (int k = 0; k < 12; k++)
            assert_int_equal(ask(0, ids[k], "add:1", r, sizeof r, 20000), 0);
    int on2 = 0;
    for (int k = 0; k < 12; k++)
        on2 += rec_get(ids[k]).node == 2;
    assert_true(on2 > 0); /* 20 shards over 3 nodes: some of these live on node 2 */
    tsnode_crash(2);
    for (int k = 0; k < 12; k++) {
        int origin = -1;
        long b = balance_of(0, ids[k], &origin);
        if (b != 10)
            fail_msg("%s: balance %ld after the crash, 10 acknowledged", ids[k], b);
        arec_t a = rec_get(ids[k]);
        assert_true(a.node != 2);
        assert_int_equal(a.order_errors, 0);
    }
}

/* Every node is stopped at once and started again on the same LMDB directories: the
   coordinator's state is gone (it is not durable), so allocation epochs begin again at term 1,
   while the stored entity states keep the fences of the allocations before. The shards touched
   last before the stop are touched first after it, so their new epochs are below their fences:
   the coordinator must allocate them again past the fence (fences_passed), and every
   acknowledged add is in the state the entities start from. */
typedef struct {
    const char (*ids)[32];
    int n;
    long balance;
} stored_arg_t;

static bool stored_everywhere(void *arg)
{
    stored_arg_t *x = arg;
    shoal_consistency_t local = c_local();
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < x->n; k++) {
            char shard[SHOAL_SHARD_ID_MAX + 1], key[300];
            shoal_region_shard_of(ar[i], x->ids[k], shard);
            snprintf(key, sizeof key, "shard-%s-estate:%s", A, shard);
            shoal_crdt_t *v = NULL;
            bool ok = false;
            if (shoal_replicator_get_sync(drep[i], key, &estate_type, &local, &v) == 0 && v) {
                /* the entity's own bytes ("<balance> <last> <fired>") end the stored entry */
                char want[64];
                size_t n = (size_t)snprintf(want, sizeof want, "%ld 0 0", x->balance);
                estate_entry_t en;
                ok = estate_get(v, x->ids[k], strlen(x->ids[k]), &en) == 0 && !en.deleted &&
                     en.len >= n && memcmp(en.data + en.len - n, want, n) == 0;
            }
            shoal_crdt_destroy(&v);
            if (!ok)
                return false;
        }
    return true;
}

static void test_state_after_full_restart(void **state)
{
    (void)state;
    snprintf(droot, sizeof droot, "/tmp/shoal-estate-XXXXXX");
    if (!mkdtemp(droot))
        fail_msg("mkdtemp failed");
    dcluster_of3();

    char ids[12][32];
    for (int k = 0; k < 12; k++)
        snprintf(ids[k], sizeof ids[k], "acct-%d", k);
    char r[64];
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 12; k++)
            assert_int_equal(ask(k % 3, ids[k], "add:1", r, sizeof r, 20000), 0);
    /* every node's own copy holds every balance before the stop (saves are WriteMajority: the
       third copy arrives by gossip) */
    stored_arg_t st = {(const char(*)[32])ids, 12, 3};
    if (!wait_until(stored_everywhere, &st, 20000))
        fail_msg("the saved states did not reach every node's store");

    for (int i = 2; i >= 0; i--)
        dnode_stop(i);
    pthread_mutex_lock(&mu);
    n_recs = 0;
    pthread_mutex_unlock(&mu);

    dcluster_of3();
    /* in reverse: the shards allocated last before the stop are allocated first now */
    for (int k = 11; k >= 0; k--) {
        int origin = -1;
        long b = balance_of(k % 3, ids[k], &origin);
        if (b != 3)
            fail_msg("%s: balance %ld after a restart of every node, 3 acknowledged", ids[k], b);
        assert_int_equal(ask(k % 3, ids[k], "add:1", r, sizeof r, 20000), 0);
        assert_int_equal(balance_of(k % 3, ids[k], NULL), 4);
    }
    uint64_t passed = 0;
    for (int i = 0; i < 3; i++) {
        shoal_region_stats_t rs;
        assert_int_equal(shoal_region_stats(ar[i], &rs), 0);
        passed += rs.fences_passed;
    }
    assert_true(passed > 0); /* the case this test is for did happen */
}

/* A replica that has seen a newer owner's fence refuses an older owner's write (the writer's
   update fails with SHOAL_ESTALE), and an older owner's entry that still spreads by gossip loses
   to the new owner's adopted state. */
typedef struct {
    uint64_t epoch, seq;
    const char *data;
    bool fence;
} put_t;

static int put_fn(shoal_crdt_t *v, void *arg)
{
    put_t *p = arg;
    if (p->fence)
        return estate_raise_fence(v, p->epoch);
    if (estate_fence(v) > p->epoch)
        return SHOAL_ESTALE;
    return estate_put(v, "e1", 2, p->epoch, p->seq, p->data, strlen(p->data));
}

static void test_stale_owner_refused(void **state)
{
    (void)state;
    assert_int_equal(estate_register(), 0);
    static tcluster_t c; /* the teardown finds it after a failed assertion */
    tcluster_start(&c, 3, NULL);
    shoal_consistency_t wall = c_all(3000);
    /* owner of epoch 1 writes its state everywhere */
    put_t a = {1, 1, "old-owner-v1", false};
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "k", estate_new(), &wall, put_fn, &a),
                     0);
    /* node 0 is cut off; the new owner (epoch 2) fences and adopts on nodes 1 and 2 */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(c.sys[0], NULL, &cut), 0);
    shoal_consistency_t two = c_n(2, 3000);
    put_t f = {2, 0, "", true};
    assert_int_equal(shoal_replicator_update_sync(c.rep[1], "k", estate_new(), &two, put_fn, &f),
                     0);
    put_t b = {2, 1, "new-owner-v1", false};
    assert_int_equal(shoal_replicator_update_sync(c.rep[1], "k", estate_new(), &two, put_fn, &b),
                     0);
    /* the old owner, healed, writes: every replica that has the fence refuses */
    shoal_fault_t heal = {.dir = SHOAL_FAULT_BOTH};
    assert_int_equal(shoal_system_fault(c.sys[0], NULL, &heal), 0);
    put_t stale = {1, 2, "old-owner-v2", false};
    shoal_consistency_t maj = c_majority(3000);
    int rc = shoal_replicator_update_sync(c.rep[0], "k", estate_new(), &maj, put_fn, &stale);
    if (rc != SHOAL_ESTALE && rc != SHOAL_EMODIFY)
        fail_msg("a stale owner's write returned %d (%s), not refused", rc, shoal_strerror(rc));
    /* after gossip every replica holds the new owner's state */
    int64_t until = shoal_now_ms() + 10000 * tscale();
    bool ok = false;
    while (!ok && shoal_now_ms() < until) {
        ok = t_converged(&c, "k");
        if (!ok)
            usleep(20 * 1000);
    }
    assert_true(ok);
    shoal_crdt_t *v = NULL;
    shoal_consistency_t local = c_local();
    assert_int_equal(shoal_replicator_get_sync(c.rep[2], "k", NULL, &local, &v), 0);
    estate_entry_t en;
    assert_int_equal(estate_get(v, "e1", 2, &en), 0);
    assert_int_equal(en.epoch, 2);
    assert_memory_equal(en.data, "new-owner-v1", en.len);
    shoal_crdt_destroy(&v);
    tcluster_stop(&c);
}

/* A sender keeps adding (numbered, each acknowledged before the next) while a new node joins
   and shards move to it: every acknowledged add is in the state, none twice, in order, and the
   moved entities started from their hand-over snapshot. */
typedef struct {
    char ids[8][32];
    long acked[8];
    volatile int stop;
    int errors;
} adder_t;

static void *adder(void *arg)
{
    adder_t *x = arg;
    long seq[8] = {0};
    while (!x->stop) {
        for (int k = 0; k < 8 && !x->stop; k++) {
            char m[64], r[64];
            snprintf(m, sizeof m, "add:1:%ld", seq[k] + 1);
            shoal_buf_t b = {0};
            int rc = shoal_region_ask_sync(ar[0], x->ids[k], m, strlen(m),
                                           1000 * (uint32_t)tscale(), &b);
            size_t n = b.len < sizeof r - 1 ? b.len : sizeof r - 1;
            memcpy(r, b.data ? (char *)b.data : "", n);
            r[n] = 0;
            shoal_buf_free(&b);
            if (rc == 0 && strcmp(r, "ok") == 0) {
                seq[k]++;
                x->acked[k] = seq[k];
            } else {
                x->errors++; /* the same number goes again */
            }
        }
    }
    return NULL;
}

static void test_handoff_keeps_state_and_order(void **state)
{
    (void)state;
    cluster_of(1);
    adder_t *x = calloc(1, sizeof *x);
    for (int k = 0; k < 8; k++)
        snprintf(x->ids[k], sizeof x->ids[k], "h-%d", k);
    pthread_t th;
    pthread_create(&th, NULL, adder, x);
    /* wait until each has some state */
    int64_t until = shoal_now_ms() + 20000 * tscale();
    for (int k = 0; k < 8; k++)
        while (__atomic_load_n(&x->acked[k], __ATOMIC_SEQ_CST) < 3 && shoal_now_ms() < until)
            usleep(10 * 1000);
    node_start(1, 0);
    tsnode_wait_up(3u, 20000);
    region_on(1);
    wait_registered(2);
    /* rebalance moves shards to node 1 while the adds go on */
    until = shoal_now_ms() + 30000 * tscale();
    int moved = 0;
    while (shoal_now_ms() < until) {
        moved = 0;
        for (int k = 0; k < 8; k++)
            moved += rec_get(x->ids[k]).node == 1;
        shoal_region_state_t rs;
        size_t on1 = 0;
        if (shoal_region_state(ar[1], false, &rs) == 0) {
            on1 = rs.n_shards;
            shoal_region_state_free(&rs);
        }
        if (moved > 0 && on1 >= 3)
            break;
        usleep(50 * 1000);
    }
    /* a little more traffic after the moves: a few more adds acknowledged for every entity */
    long after[8];
    for (int k = 0; k < 8; k++)
        after[k] = __atomic_load_n(&x->acked[k], __ATOMIC_SEQ_CST);
    until = shoal_now_ms() + 20000 * tscale();
    for (int k = 0; k < 8; k++)
        while (__atomic_load_n(&x->acked[k], __ATOMIC_SEQ_CST) < after[k] + 3 &&
               shoal_now_ms() < until)
            usleep(10 * 1000);
    x->stop = 1;
    pthread_join(th, NULL);
    assert_true(moved > 0);
    int from_snapshot = 0;
    for (int k = 0; k < 8; k++) {
        char r[128];
        assert_int_equal(ask(0, x->ids[k], "get", r, sizeof r, 20000), 0);
        long b = -1, last = -1;
        int fired, origin;
        sscanf(r, "%ld %ld %d %d", &b, &last, &fired, &origin);
        /* the last add may have been applied without its answer arriving */
        if (b < x->acked[k] || b > x->acked[k] + 1 || b != last)
            fail_msg("%s: balance %ld, last %ld, acknowledged %ld", x->ids[k], b, last,
                     x->acked[k]);
        arec_t a = rec_get(x->ids[k]);
        assert_int_equal(a.order_errors, 0);
        if (a.starts > 1 && a.origin == 2)
            from_snapshot++;
    }
    assert_true(from_snapshot > 0);
    free(x);
}

/* A reminder fires after its entity passivated, and after the crash of its node (on another
   node, where its shard went). */
static bool fired_once(void *arg)
{
    return rec_get(arg).fired >= 1;
}

static void test_reminders(void **state)
{
    (void)state;
    cluster_of(3);
    char r[64];
    assert_int_equal(ask(0, "rem-a", "remind:t1:300", r, sizeof r, 20000), 0);
    assert_string_equal(r, "ok");
    assert_int_equal(shoal_region_tell(ar[0], "rem-a", "passivate", 9), 0);
    assert_true(wait_until(fired_once, "rem-a", 15000));
    /* an entity on node 2, its reminder, then node 2 crashes */
    char id[32] = "";
    for (int k = 0; k < 40 && !id[0]; k++) {
        char cand[32];
        snprintf(cand, sizeof cand, "rem-%d", k);
        assert_int_equal(ask(0, cand, "get", r, sizeof r, 20000), 0);
        if (rec_get(cand).node == 2)
            snprintf(id, sizeof id, "%s", cand);
    }
    assert_true(id[0]);
    assert_int_equal(ask(0, id, "remind:t2:1500", r, sizeof r, 20000), 0);
    assert_string_equal(r, "ok");
    tsnode_crash(2);
    assert_true(wait_until(fired_once, id, 40000));
    arec_t a = rec_get(id);
    assert_true(a.fired_node != 2);

    /* in-memory timers: one fires while its entity runs; one whose entity passivated does not */
    assert_int_equal(ask(0, "tim-1", "timer:t:200", r, sizeof r, 20000), 0);
    assert_string_equal(r, "ok");
    assert_true(wait_until(fired_once, "tim-1", 10000));
    assert_int_equal(ask(0, "tim-2", "timer:t:1500", r, sizeof r, 20000), 0);
    assert_int_equal(shoal_region_tell(ar[0], "tim-2", "passivate", 9), 0);
    assert_int_equal(ask(0, "tim-3", "timer:t:2500", r, sizeof r, 20000), 0);
    assert_true(wait_until(fired_once, "tim-3", 15000)); /* a later one, on the same nodes */
    assert_int_equal(rec_get("tim-2").fired, 0);

    /* a deleted state is gone for good: the next incarnation starts with nothing */
    assert_int_equal(ask(0, "del-1", "add:5", r, sizeof r, 20000), 0);
    int origin = -1;
    assert_int_equal(balance_of(0, "del-1", &origin), 5);
    assert_int_equal(ask(0, "del-1", "delete", r, sizeof r, 20000), 0);
    assert_string_equal(r, "ok");
    int64_t until = shoal_now_ms() + 20000 * tscale();
    while (rec_get("del-1").starts < 2 && shoal_now_ms() < until) {
        balance_of(0, "del-1", NULL); /* starts it again once the passivation is done */
        usleep(50 * 1000);
    }
    assert_int_equal(balance_of(0, "del-1", &origin), 0);
    assert_int_equal(origin, 0);
}

/* At-least-once delivery through a crash: every message confirmed, none processed twice. */
typedef struct {
    int confirmed, failed, replies, bad_replies;
} pstat_t;

static pstat_t pst;

static void delivered(shoal_producer_t *p, const char *eid, uint64_t seq, int status,
                      const void *reply, size_t len, void *arg)
{
    (void)p;
    (void)eid;
    (void)seq;
    (void)arg;
    if (status == 0 && reply && len)
        __atomic_add_fetch(len == 7 && !memcmp(reply, "applied", 7) ? &pst.replies
                                                                   : &pst.bad_replies,
                           1, __ATOMIC_SEQ_CST);
    if (status == 0)
        __atomic_add_fetch(&pst.confirmed, 1, __ATOMIC_SEQ_CST);
    else
        __atomic_add_fetch(&pst.failed, 1, __ATOMIC_SEQ_CST);
}

static void test_at_least_once_through_crash(void **state)
{
    (void)state;
    cluster_of(3);
    memset(&pst, 0, sizeof pst);
    shoal_producer_settings_t ps;
    shoal_producer_settings_default(&ps);
    ps.window = 5;
    ps.resend_ms = 500 * (uint32_t)tscale();
    int err = 0;
    shoal_producer_t *p = shoal_producer_new(ar[0], "test-producer-1", &ps, delivered, NULL, &err);
    assert_non_null(p);
    enum { IDS = 16, EACH = 15 };
    char ids[IDS][32];
    for (int k = 0; k < IDS; k++)
        snprintf(ids[k], sizeof ids[k], "alo-%d", k);
    int sent = 0;
    int64_t until = shoal_now_ms() + 90000 * tscale();
    for (int round = 0; round < EACH; round++) {
        if (round == EACH / 2)
            tsnode_crash(2);
        for (int k = 0; k < IDS; k++) {
            int rc;
            while ((rc = shoal_producer_send(p, ids[k], "add:1", 5, NULL)) == SHOAL_EBUFFER &&
                   shoal_now_ms() < until)
                usleep(5 * 1000);
            assert_int_equal(rc, 0);
            sent++;
        }
    }
    while (shoal_producer_pending(p) > 0 && shoal_now_ms() < until)
        usleep(20 * 1000);
    assert_int_equal(shoal_producer_pending(p), 0);
    assert_int_equal(__atomic_load_n(&pst.confirmed, __ATOMIC_SEQ_CST), sent);
    /* the entity's reply (given after its save) came back with confirmations */
    assert_true(__atomic_load_n(&pst.replies, __ATOMIC_SEQ_CST) > 0);
    assert_int_equal(__atomic_load_n(&pst.bad_replies, __ATOMIC_SEQ_CST), 0);
    for (int k = 0; k < IDS; k++) {
        long b = balance_of(0, ids[k], NULL);
        if (b != EACH)
            fail_msg("%s: balance %ld, %d sent and confirmed (a message lost or processed twice)",
                     ids[k], b, EACH);
    }
    shoal_producer_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_stale_owner_refused, tcluster_teardown),
        cmocka_unit_test_teardown(test_state_survives_crash, teardown),
        cmocka_unit_test_teardown(test_handoff_keeps_state_and_order, teardown),
        cmocka_unit_test_teardown(test_reminders, teardown),
        cmocka_unit_test_teardown(test_at_least_once_through_crash, teardown),
        cmocka_unit_test_teardown(test_state_after_full_restart, teardown),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
