/*  test_replicator_spec.c — conformance: Akka/Pekko's ReplicatorSpec (distributed-data), see
    docs/conformance.md. Three members (first, second, third = nodes 0, 1, 2) join one by one as the
    spec's cases go; the cases run in order on the same cluster, each using what the earlier ones
    left (the spec's keys A..K keep their names). Membership runs without a downing provider, so a
    blackholed node stays a member. Timeouts of the spec's consistency levels: 3 s (scaled).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#define T 3000 /* the spec's consistency timeout */
/* The timeout of operations the spec expects to time out: shorter, to keep the suite fast (what
   is checked is that they time out and still apply locally, not how long they wait). */
#define TT 300

static shoal_consistency_t write_two(void)
{
    return c_n(2, T);
}

static shoal_consistency_t pref_oldest(shoal_consistency_t c)
{
    c.prefer_oldest = true;
    return c;
}

static void start_member(int i, int seed)
{
    /* every member carries role "oldest", whose replicator is the spec's oldestReplicator:
       prefer-oldest, gossip every minute and no deltas, so only the operations move data */
    static const char *roles[] = {"oldest"};
    shoal_cluster_settings_t cs;
    cm_cluster_settings(&cs);
    cs.roles = roles;
    cs.n_roles = 1;
    shoal_replicator_settings_t r2;
    tmember_data_settings(&r2);
    r2.role = "oldest";
    r2.prefer_oldest = true;
    r2.gossip_interval_ms = 60000;
    r2.delta_enabled = false;
    cm_opts_t o = {.cluster = &cs, .rep2 = &r2};
    cm_start(i, &o);
    cm_join(i, seed);
}

static void flush(int i)
{
    assert_int_equal(shoal_replicator_flush_sync(cm[i].rep), 0);
}

static uint64_t gvalue(int i, const char *key, shoal_consistency_t c)
{
    uint64_t v = 0;
    assert_int_equal(cm_gcounter(cm[i].rep, key, c, &v), 0);
    return v;
}

/* The last notification of s is a change of key to GCounter value v. */
static void expect_changed(cm_sub_t *s, int n, const char *key, uint64_t v)
{
    assert_true(cm_sub_wait(s, n, 5000));
    char k[64];
    uint64_t got = 0;
    assert_int_equal(cm_sub_event(s, n - 1, k, sizeof k, &got), SHOAL_CHANGED);
    assert_string_equal(k, key);
    assert_int_equal(got, v);
}

static int count_key(const char *key, const shoal_type_t *type, void *arg)
{
    (void)type;
    char *seen = arg;
    size_t len = strlen(seen);
    snprintf(seen + len, 256 - len, "%s%s", len ? "," : "", key);
    return 0;
}

static cm_sub_t sub1, sub2;

/* ReplicatorSpec: "work in single node cluster". */
static void work_in_single_node_cluster(void **state)
{
    (void)state;
    start_member(0, 0);
    cm_wait_up(1u, 10000);
    cm_wait_replicas(1u, 1, 5000);
    shoal_replicator_t *r = cm[0].rep;
    cm_subscribe(r, "A", &sub1);
    cm_sub_t subx;
    cm_subscribe(r, "X", &subx);

    shoal_crdt_t *v = NULL;
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_get_sync(r, "A", NULL, &l, &v), SHOAL_ENOTFOUND);
    assert_int_equal(cm_incr(r, "A", 3, c_local()), 0);
    assert_int_equal(gvalue(0, "A", c_local()), 3);
    expect_changed(&sub1, 1, "A", 3);
    /* a new subscriber is told the current value */
    cm_subscribe(r, "A", &sub2);
    expect_changed(&sub2, 1, "A", 3);
    /* WriteTo(2) on a cluster of one: times out, yet applies locally */
    assert_int_equal(cm_incr(r, "A", 1, c_n(2, TT)), SHOAL_ETIMEOUT);
    assert_int_equal(gvalue(0, "A", c_local()), 4);
    expect_changed(&sub1, 2, "A", 4);
    /* majority and all of one node are that node */
    assert_int_equal(cm_incr(r, "A", 1, c_majority(T)), 0);
    assert_int_equal(gvalue(0, "A", c_majority(T)), 5);
    expect_changed(&sub1, 3, "A", 5);
    assert_int_equal(cm_incr(r, "A", 1, c_all(T)), 0);
    assert_int_equal(gvalue(0, "A", c_all(T)), 6);
    expect_changed(&sub1, 4, "A", 6);

    assert_int_equal(cm_incr(r, "X", 9, c_local()), 0);
    expect_changed(&subx, 1, "X", 9);
    assert_int_equal(shoal_replicator_delete_sync(r, "X", &l), 0);
    assert_true(cm_sub_wait(&subx, 2, 5000));
    assert_int_equal(cm_sub_event(&subx, 1, NULL, 0, NULL), SHOAL_DELETED);
    assert_int_equal(shoal_replicator_get_sync(r, "X", NULL, &l, &v), SHOAL_EDELETED);
    shoal_consistency_t all = c_all(T);
    assert_int_equal(shoal_replicator_get_sync(r, "X", NULL, &all, &v), SHOAL_EDELETED);
    assert_int_equal(cm_incr(r, "X", 1, c_local()), SHOAL_EDELETED);
    assert_int_equal(shoal_replicator_delete_sync(r, "X", &l), SHOAL_EDELETED);
    assert_null(v);

    char keys[256] = "";
    assert_int_equal(shoal_replicator_keys_sync(r, count_key, keys), 0);
    assert_string_equal(keys, "A");
    cm_unsubscribe(r, &subx);
    cm_sub_free(&subx);
    cm_unsubscribe(r, &sub2);
    cm_sub_free(&sub2);
}

/* "merge the update with existing value": a modify function that builds a fresh value instead of
   changing the one it is given. In Shoal the modify function changes the value it is handed in
   place (there is no value to return), so the spec's misuse cannot be written; what stays is
   that updates of an existing key add to it. */
static void merge_the_update_with_existing_value(void **state)
{
    (void)state;
    shoal_replicator_t *r = cm[0].rep;
    assert_int_equal(cm_set_add(r, "J", SHOAL_GSET, "a,b", c_local()), 0);
    assert_int_equal(cm_set_add(r, "J", SHOAL_GSET, "c", c_local()), 0);
    char got[64];
    assert_int_equal(cm_set_get(r, "J", c_local(), got, sizeof got), 0);
    assert_string_equal(got, "a,b,c");
}

static int throwing_modify(shoal_crdt_t *v, void *arg)
{
    (void)v;
    (void)arg;
    return -1000;
}

/* "reply with ModifyFailure if exception is thrown by modify function" */
static void reply_with_modify_failure(void **state)
{
    (void)state;
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_update_sync(cm[0].rep, "A", shoal_gcounter_new(), &l,
                                                  throwing_modify, NULL),
                     SHOAL_EMODIFY);
    assert_int_equal(gvalue(0, "A", c_local()), 6);
}

/* "replicate values to new node" */
static void replicate_values_to_new_node(void **state)
{
    (void)state;
    start_member(1, 0);
    cm_wait_up(3u, 10000);
    cm_wait_replicas(3u, 2, 10000);
    cm_sub_t s;
    cm_subscribe(cm[1].rep, "A", &s);
    assert_true(cm_wait_gcounter(cm[1].rep, "A", 6, 5000));
    flush(1);
    assert_true(cm_sub_wait(&s, 1, 5000));
    uint64_t v = 0;
    assert_int_equal(cm_sub_event(&s, cm_sub_count(&s) - 1, NULL, 0, &v), SHOAL_CHANGED);
    assert_int_equal(v, 6);
    cm_unsubscribe(cm[1].rep, &s);
    cm_sub_free(&s);
}

/* "work in 2 node cluster" */
static void work_in_2_node_cluster(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        assert_int_equal(cm_incr(cm[i].rep, "B", 20, c_local()), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(cm_incr(cm[i].rep, "B", 1, write_two()), 0);
    for (int i = 0; i < 2; i++)
        assert_true(cm_wait_gcounter(cm[i].rep, "B", 42, 5000));
    assert_int_equal(gvalue(0, "B", c_n(2, T)), 42);
    for (int i = 0; i < 2; i++)
        assert_int_equal(cm_incr(cm[i].rep, "B", 1, c_all(T)), 0);
    for (int i = 0; i < 2; i++)
        assert_true(cm_wait_gcounter(cm[i].rep, "B", 44, 5000));
    assert_int_equal(gvalue(1, "B", c_all(T)), 44);
    for (int i = 0; i < 2; i++)
        assert_int_equal(cm_incr(cm[i].rep, "B", 1, c_majority(T)), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(gvalue(i, "B", c_majority(T)), 46);
}

/* "be replicated after successful update" */
static void be_replicated_after_successful_update(void **state)
{
    (void)state;
    cm_sub_t s0, s1;
    cm_subscribe(cm[0].rep, "C", &s0);
    cm_subscribe(cm[1].rep, "C", &s1);
    assert_int_equal(cm_incr(cm[0].rep, "C", 30, write_two()), 0);
    expect_changed(&s0, 1, "C", 30);
    assert_int_equal(cm_incr(cm[0].rep, "Y", 30, write_two()), 0);
    assert_int_equal(cm_incr(cm[0].rep, "Z", 30, c_majority(T)), 0);
    /* a successful WriteTo(2) is on the second node at once */
    assert_int_equal(gvalue(1, "C", c_local()), 30);
    expect_changed(&s1, 1, "C", 30);
    /* WriteLocal is replicated by gossip */
    assert_int_equal(cm_incr(cm[1].rep, "C", 1, c_local()), 0);
    expect_changed(&s1, 2, "C", 31);
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_delete_sync(cm[1].rep, "Y", &l), 0);
    assert_int_equal(gvalue(1, "Z", c_majority(T)), 30);
    assert_true(cm_wait_gcounter(cm[0].rep, "C", 31, 5000));
    assert_true(cm_wait_deleted(cm[0].rep, "Y", 5000));
    expect_changed(&s0, 2, "C", 31);
    /* concurrent local updates */
    for (int i = 0; i < 2; i++)
        assert_int_equal(cm_incr(cm[i].rep, "C", 1, c_local()), 0);
    for (int i = 0; i < 2; i++)
        assert_true(cm_wait_gcounter(cm[i].rep, "C", 33, 5000));
    cm_unsubscribe(cm[0].rep, &s0);
    cm_unsubscribe(cm[1].rep, &s1);
    cm_sub_free(&s0);
    cm_sub_free(&s1);
}

/* "converge after partition" */
static void converge_after_partition(void **state)
{
    (void)state;
    assert_int_equal(cm_incr(cm[0].rep, "D", 40, write_two()), 0);
    cm_cut(0, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(gvalue(i, "D", c_local()), 40);
        assert_int_equal(cm_incr(cm[i].rep, "D", 1, c_n(2, TT)), SHOAL_ETIMEOUT);
        assert_int_equal(cm_incr(cm[i].rep, "D", 1, c_n(2, TT)), SHOAL_ETIMEOUT);
    }
    char key[16];
    for (int n = 1; n <= 30; n++) {
        snprintf(key, sizeof key, "D%d", n);
        assert_int_equal(cm_incr(cm[0].rep, key, (uint64_t)n, c_local()), 0);
    }
    cm_pass(0, 1);
    /* the spec reads at once with ReadFrom(2); the link just healed may still be reconnecting,
       so the read is retried within the deadline, as the spec's awaitAssert does for the rest */
    for (int i = 0; i < 2; i++) {
        uint64_t v = 0;
        int64_t end = shoal_now_ms() + 10000 * tscale();
        while (cm_gcounter(cm[i].rep, "D", c_n(2, T), &v) != 0 && shoal_now_ms() < end)
            ;
        assert_int_equal(v, 44);
    }
    for (int i = 0; i < 2; i++)
        for (int n = 1; n <= 30; n++) {
            snprintf(key, sizeof key, "D%d", n);
            assert_true(cm_wait_gcounter(cm[i].rep, key, (uint64_t)n, 10000));
        }
}

/* "support majority quorum write and read with 3 nodes with 1 unreachable" */
static void majority_quorum_with_3_nodes_1_unreachable(void **state)
{
    (void)state;
    start_member(2, 0);
    cm_wait_up(7u, 10000);
    cm_wait_replicas(7u, 3, 10000);
    for (int i = 0; i < 3; i++)
        assert_int_equal(cm_incr(cm[i].rep, "E", 50, c_majority(T)), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(gvalue(i, "E", c_majority(T)), 150);
    cm_cut(0, 2);
    cm_cut(1, 2);
    assert_int_equal(cm_incr(cm[1].rep, "E", 1, c_local()), 0);

    /* first: a majority read sees second's local update; a majority write on it; read your own
       write. The spec sends them without waiting (their replies in any order); the facade here
       waits for each, which keeps the same order of operations. */
    int timeouts = 0;
    uint64_t v = 0;
    int rc = cm_gcounter(cm[0].rep, "E", c_majority(T), &v);
    timeouts += rc == SHOAL_ETIMEOUT;
    if (rc == 0)
        assert_int_equal(v, 151);
    assert_int_equal(cm_incr(cm[0].rep, "E", 1, c_majority(T)), 0);
    rc = cm_gcounter(cm[0].rep, "E", c_majority(T), &v);
    timeouts += rc == SHOAL_ETIMEOUT;
    if (rc == 0)
        assert_int_equal(v, 152);
    /* second: a majority read, three majority writes, a read of its own writes */
    rc = cm_gcounter(cm[1].rep, "E", c_majority(T), &v);
    timeouts += rc == SHOAL_ETIMEOUT;
    for (int k = 0; k < 3; k++)
        assert_int_equal(cm_incr(cm[1].rep, "E", 1, c_majority(T)), 0);
    rc = cm_gcounter(cm[1].rep, "E", c_majority(T), &v);
    timeouts += rc == SHOAL_ETIMEOUT;
    if (rc == 0)
        assert_int_equal(v, 155);
    assert_int_equal(timeouts, 0);
    /* ReadAll cannot succeed with one node unreachable, and a failed read creates nothing */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cm_gcounter(cm[i].rep, "E2", c_all(TT), &v), SHOAL_ETIMEOUT);
        assert_int_equal(cm_gcounter(cm[i].rep, "E2", c_local(), &v), SHOAL_ENOTFOUND);
    }
    cm_pass(0, 2);
    cm_pass(1, 2);
    /* third, back: a majority read sees everything */
    int64_t end = shoal_now_ms() + 10000 * tscale();
    while ((cm_gcounter(cm[2].rep, "E", c_majority(T), &v) != 0 || v != 155) &&
           shoal_now_ms() < end)
        ;
    assert_int_equal(v, 155);
}

/* "converge after many concurrent updates": 100 WriteTo(2) increments from each of the three,
   all succeed, and a ReadFrom(2) everywhere reads 300. The facade is synchronous, so each node's
   100 run from a thread of its own, the three at once. */
typedef struct {
    int i;
    int ok;
} conc_t;

static void *conc_updates(void *arg)
{
    conc_t *c = arg;
    for (int k = 0; k < 100; k++)
        c->ok += cm_incr(cm[c->i].rep, "F", 1, write_two()) == 0;
    return NULL;
}

static void converge_after_many_concurrent_updates(void **state)
{
    (void)state;
    pthread_t th[3];
    conc_t c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = (conc_t){i, 0};
        pthread_create(&th[i], NULL, conc_updates, &c[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(c[i].ok, 100);
    for (int i = 0; i < 3; i++) {
        uint64_t v = 0;
        int64_t end = shoal_now_ms() + 10000 * tscale();
        while ((cm_gcounter(cm[i].rep, "F", c_n(2, T), &v) != 0 || v != 300) &&
               shoal_now_ms() < end)
            ;
        assert_int_equal(v, 300);
    }
}

/* "read-repair happens before GetSuccess": after a ReadAll returns, the reader's local copy
   already holds what the read found. */
static void read_repair_happens_before_get_success(void **state)
{
    (void)state;
    assert_int_equal(cm_set_add(cm[0].rep, "G", SHOAL_ORSET, "a,b", write_two()), 0);
    char got[64];
    assert_int_equal(cm_set_get(cm[1].rep, "G", c_all(T), got, sizeof got), 0);
    assert_string_equal(got, "a,b");
    assert_int_equal(cm_set_get(cm[1].rep, "G", c_local(), got, sizeof got), 0);
    assert_string_equal(got, "a,b");
}

/* "check that a remote update and a local update both cause a change event to emit with the
   merged data": an ORMap of Flags. */
typedef struct {
    const shoal_node_t *self;
    const char *key;
    bool on;
} flag_arg_t;

static int flag_modify(shoal_crdt_t *v, void *arg)
{
    flag_arg_t *a = arg;
    return a->on ? shoal_flag_switch_on(v) : 0;
}

static int map_flag_modify(shoal_crdt_t *m, void *arg)
{
    flag_arg_t *a = arg;
    return shoal_ormap_update(m, a->self, a->key, strlen(a->key), flag_modify, a);
}

static int map_put(int i, const char *k, bool on)
{
    flag_arg_t a = {shoal_system_self(cm[i].sys), k, on};
    shoal_consistency_t c = write_two();
    return shoal_replicator_update_sync(
        cm[i].rep, "H", shoal_ormap_new(shoal_type_by_tag(SHOAL_FLAG)), &c, map_flag_modify, &a);
}

/* "a=on,b=off": the flags of notification k, sorted. */
static void map_flags(cm_sub_t *s, int k, char *out, size_t cap)
{
    cm_sub_render(s, k, out, cap);
}

static void remote_and_local_update_both_notify_merged(void **state)
{
    (void)state;
    cm_sub_t s;
    cm_subscribe(cm[1].rep, "H", &s);
    assert_int_equal(map_put(1, "a", false), 0);
    assert_true(cm_sub_wait(&s, 1, 5000));
    char r1[256], r2[256], r3[256];
    map_flags(&s, 0, r1, sizeof r1);
    assert_int_equal(map_put(0, "a", true), 0);
    assert_true(cm_sub_wait(&s, 2, 5000));
    map_flags(&s, 1, r2, sizeof r2);
    assert_int_equal(map_put(1, "b", true), 0);
    assert_true(cm_sub_wait(&s, 3, 5000));
    map_flags(&s, 2, r3, sizeof r3);
    /* the renderings differ at each step and the last holds both keys switched on */
    assert_string_not_equal(r1, r2);
    assert_string_not_equal(r2, r3);
    assert_non_null(strstr(r3, "\"a\""));
    assert_non_null(strstr(r3, "\"b\""));
    cm_unsubscribe(cm[1].rep, &s);
    pthread_mutex_lock(&s.mu);
    const shoal_crdt_t *last = s.ev[2].value;
    const shoal_crdt_t *fa = shoal_ormap_get(last, "a", 1);
    const shoal_crdt_t *fb = shoal_ormap_get(last, "b", 1);
    bool a_on = fa && shoal_flag_enabled(fa), b_on = fb && shoal_flag_enabled(fb);
    const shoal_crdt_t *first = s.ev[0].value;
    const shoal_crdt_t *f0 = shoal_ormap_get(first, "a", 1);
    bool a0 = f0 && shoal_flag_enabled(f0);
    pthread_mutex_unlock(&s.mu);
    assert_true(a_on && b_on);
    assert_false(a0);
    cm_sub_free(&s);
}

/* "avoid duplicate change events for same data": every node subscribes; second adds "a" to a
   GSet with WriteTo(2); everyone is told once; first adding "a" again changes nothing and tells
   nobody. */
static void avoid_duplicate_change_events(void **state)
{
    (void)state;
    static cm_sub_t s[3];
    for (int i = 0; i < 3; i++)
        cm_subscribe(cm[i].rep, "I", &s[i]);
    assert_int_equal(cm_set_add(cm[1].rep, "I", SHOAL_GSET, "a", write_two()), 0);
    for (int i = 0; i < 3; i++)
        assert_true(cm_sub_wait(&s[i], 1, 5000));
    assert_int_equal(cm_set_add(cm[0].rep, "I", SHOAL_GSET, "a", write_two()), 0);
    /* the spec waits a second for nothing: here every node's pending notifications are flushed
       after the write has reached a second node and gossip has had rounds to reach the third */
    assert_true(cm_wait_set(cm[2].rep, "I", "a", 5000));
    uint64_t d0 = 0;
    shoal_replicator_stats_t st;
    assert_int_equal(shoal_replicator_stats(cm[0].rep, &st), 0);
    d0 = st.gossip_rounds;
    for (int64_t end = shoal_now_ms() + 10000 * tscale();;) {
        assert_int_equal(shoal_replicator_stats(cm[0].rep, &st), 0);
        if (st.gossip_rounds >= d0 + 3)
            break;
        assert_true(shoal_now_ms() < end);
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 3; i++) {
        flush(i);
        assert_int_equal(cm_sub_count(&s[i]), 1);
        cm_unsubscribe(cm[i].rep, &s[i]);
        cm_sub_free(&s[i]);
    }
}

/* "support prefer oldest members": the replicator of role "oldest" (prefer-oldest, no gossip in
   the test's time, no deltas). second writes with WriteTo(2): the copy goes to the oldest
   (first), not to third; third reads it with ReadFrom(2) from the oldest. */
typedef struct {
    const shoal_node_t *self;
    const char *v;
} reg_arg_t;

static int reg_modify(shoal_crdt_t *r, void *arg)
{
    reg_arg_t *a = arg;
    return shoal_lwwreg_set(r, a->self, a->v, strlen(a->v), NULL, NULL);
}

static bool rep2_count_3(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        if (shoal_replicator_replica_count_sync(cm[i].rep2) != 3)
            return false;
    return true;
}

static void support_prefer_oldest_members(void **state)
{
    (void)state;
    assert_true(wait_until(rep2_count_3, NULL, 5000));
    shoal_crdt_t *init = shoal_lwwreg_new();
    assert_int_equal(shoal_lwwreg_set(init, shoal_system_self(cm[1].sys), "0", 1, NULL, NULL), 0);
    reg_arg_t a = {shoal_system_self(cm[1].sys), "1"};
    shoal_consistency_t w2 = pref_oldest(write_two());
    assert_int_equal(shoal_replicator_update_sync(cm[1].rep2, "K", init, &w2, reg_modify, &a), 0);
    shoal_crdt_t *v = NULL;
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_get_sync(cm[0].rep2, "K", NULL, &l, &v), 0);
    size_t len = 0;
    const void *val = shoal_lwwreg_value(v, &len);
    assert_int_equal(len, 1);
    assert_memory_equal(val, "1", 1);
    shoal_crdt_destroy(&v);
    assert_int_equal(shoal_replicator_get_sync(cm[2].rep2, "K", NULL, &l, &v), SHOAL_ENOTFOUND);
    shoal_consistency_t r2 = pref_oldest(c_n(2, T));
    assert_int_equal(shoal_replicator_get_sync(cm[2].rep2, "K", NULL, &r2, &v), 0);
    val = shoal_lwwreg_value(v, &len);
    assert_int_equal(len, 1);
    assert_memory_equal(val, "1", 1);
    shoal_crdt_destroy(&v);
}

static int group_teardown(void **state)
{
    if (cm[0].rep)
        cm_unsubscribe(cm[0].rep, &sub1);
    cm_teardown(state);
    cm_sub_free(&sub1);
    cm_sub_free(&sub2);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(work_in_single_node_cluster),
        cmocka_unit_test(merge_the_update_with_existing_value),
        cmocka_unit_test(reply_with_modify_failure),
        cmocka_unit_test(replicate_values_to_new_node),
        cmocka_unit_test(work_in_2_node_cluster),
        cmocka_unit_test(be_replicated_after_successful_update),
        cmocka_unit_test(converge_after_partition),
        cmocka_unit_test(majority_quorum_with_3_nodes_1_unreachable),
        cmocka_unit_test(converge_after_many_concurrent_updates),
        cmocka_unit_test(read_repair_happens_before_get_success),
        cmocka_unit_test(remote_and_local_update_both_notify_merged),
        cmocka_unit_test(avoid_duplicate_change_events),
        cmocka_unit_test(support_prefer_oldest_members),
    };
    return cmocka_run_group_tests_name("ReplicatorSpec", tests, NULL, group_teardown);
}
