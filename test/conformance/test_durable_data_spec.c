/*  test_durable_data_spec.c — conformance: Akka/Pekko's DurableDataSpec, see docs/conformance.md.
    Keys "durable*" are kept in LMDB (durable/): a replicator stopped and started again on the
    same directory has them back; values that arrived by gossip are kept too; an update sent while
    the store loads waits for the load; a store that fails is reported. As in the spec, each case
    starts its replicators on fresh directories (the spec's store directory carries the
    replicator's name, new in each case), and a restart within a case reuses the directory.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "durable.h"
#include "members.h"
#include "procs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T 3000

static char root[64];
static shoal_durable_t *dur[CM_MAX];
static int case_no;

static const char *durable_keys[] = {"durable*"};

static shoal_replicator_settings_t rep_settings(shoal_store_t *store)
{
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    rs.gossip_interval_ms = 1000 / 5; /* the spec's 1 s, scaled to the suite's fast gossip */
    rs.durable_keys = durable_keys;
    rs.n_durable_keys = 1;
    rs.store = store;
    return rs;
}

static shoal_store_t *open_dir(int i, int case_n)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/node%d-case%d", root, i, case_n);
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = dir;
    ds.nosync = true;
    int err = 0;
    dur[i] = shoal_durable_open(&ds, &err);
    if (!dur[i])
        fail_msg("node %d: %s", i, shoal_last_error_detail());
    return shoal_durable_store(dur[i], "");
}

static void stop_replicator(int i)
{
    if (cm[i].rep) {
        assert_int_equal(shoal_cluster_unfollow(cm[i].cl, cm[i].rep), 0);
        shoal_replicator_destroy(&cm[i].rep);
    }
    shoal_durable_close(&dur[i]);
}

/* A new replicator on node i (the old one stopped), on the directory of case `case_n`. */
static void new_replicator(int i, int case_n)
{
    stop_replicator(i);
    shoal_replicator_settings_t rs = rep_settings(open_dir(i, case_n));
    int err = 0;
    cm[i].rep = shoal_replicator_new(cm[i].sys, &rs, &err);
    assert_non_null(cm[i].rep);
    assert_int_equal(shoal_cluster_follow(cm[i].cl, cm[i].rep), 0);
}

static void start_node(int i, int seed, const char *endpoint)
{
    cm_opts_t o = {.endpoint = endpoint};
    cm_start(i, &o);
    /* cm_start gave it a memory-store replicator: the cases replace it with a durable one */
    assert_int_equal(shoal_cluster_unfollow(cm[i].cl, cm[i].rep), 0);
    shoal_replicator_destroy(&cm[i].rep);
    cm_join(i, seed);
}

static int teardown(void **state)
{
    for (int i = 0; i < CM_MAX; i++) {
        if (cm[i].rep && cm[i].cl)
            shoal_cluster_unfollow(cm[i].cl, cm[i].rep);
        shoal_replicator_destroy(&cm[i].rep);
    }
    cm_teardown(state);
    for (int i = 0; i < CM_MAX; i++)
        shoal_durable_close(&dur[i]);
    if (root[0])
        trm_tree(root);
    return 0;
}

typedef struct {
    shoal_replicator_t *r;
    int n;
} count_t;

static bool count_is(void *arg)
{
    count_t *c = arg;
    return shoal_replicator_replica_count_sync(c->r) == c->n;
}

static void wait_count(int i, int n)
{
    count_t c = {cm[i].rep, n};
    assert_true(wait_until(count_is, &c, 10000));
}

static int one_key(const char *key, const shoal_type_t *type, void *arg)
{
    (void)key;
    (void)type;
    (*(int *)arg)++;
    return 0;
}

static bool has_keys(void *arg)
{
    int n = 0;
    shoal_replicator_keys_sync(arg, one_key, &n);
    return n > 0;
}

/* "work in single node cluster" */
static void work_in_single_node_cluster(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/shoal-conf-durable-XXXXXX");
    assert_non_null(mkdtemp(root));
    start_node(0, 0, NULL);
    case_no = 1;
    new_replicator(0, case_no);
    cm_wait_up(1u, 10000);
    wait_count(0, 1);
    uint64_t v = 0;
    assert_int_equal(cm_gcounter(cm[0].rep, "durable-A", c_local(), &v), SHOAL_ENOTFOUND);
    for (int k = 0; k < 3; k++)
        assert_int_equal(cm_incr(cm[0].rep, "durable-A", 1, c_local()), 0);
    new_replicator(0, case_no);
    /* asked at once: the read waits for the load */
    assert_int_equal(cm_gcounter(cm[0].rep, "durable-A", c_local(), &v), 0);
    assert_int_equal(v, 3);
}

/* "work in multi node cluster" */
static void work_in_multi_node_cluster(void **state)
{
    (void)state;
    start_node(1, 0, NULL);
    case_no = 2;
    /* the spec's replicators of a new case are a data space of their own: stop both old ones
       before starting the new ones, so no old value gossips over */
    for (int i = 0; i < 2; i++)
        stop_replicator(i);
    for (int i = 0; i < 2; i++)
        new_replicator(i, case_no);
    cm_wait_up(3u, 10000);
    for (int i = 0; i < 2; i++)
        wait_count(i, 2);
    const char *names[] = {"first", "second"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cm_incr(cm[i].rep, "durable-A", 1, c_n(2, T)), 0);
        assert_int_equal(cm_set_add(cm[i].rep, "durable-C", SHOAL_ORSET, names[i], c_n(2, T)), 0);
    }
    char got[64];
    for (int i = 0; i < 2; i++) {
        uint64_t v = 0;
        assert_int_equal(cm_gcounter(cm[i].rep, "durable-A", c_n(2, T), &v), 0);
        assert_int_equal(v, 2);
        assert_int_equal(cm_set_get(cm[i].rep, "durable-C", c_n(2, T), got, sizeof got), 0);
        assert_string_equal(got, "first,second");
    }
    for (int i = 0; i < 2; i++) {
        new_replicator(i, case_no);
        assert_true(wait_until(has_keys, cm[i].rep, 10000));
        uint64_t v = 0;
        assert_int_equal(cm_gcounter(cm[i].rep, "durable-A", c_local(), &v), 0);
        assert_int_equal(v, 2);
        assert_int_equal(cm_set_get(cm[i].rep, "durable-C", c_local(), got, sizeof got), 0);
        assert_string_equal(got, "first,second");
    }
}

/* "be durable after gossip update" */
static void be_durable_after_gossip_update(void **state)
{
    (void)state;
    case_no = 3;
    for (int i = 0; i < 2; i++)
        stop_replicator(i);
    for (int i = 0; i < 2; i++)
        new_replicator(i, case_no);
    for (int i = 0; i < 2; i++)
        wait_count(i, 2);
    assert_int_equal(cm_set_add(cm[0].rep, "durable-C", SHOAL_ORSET, "first", c_local()), 0);
    static cm_sub_t s;
    cm_subscribe(cm[1].rep, "durable-C", &s);
    assert_true(cm_sub_wait(&s, 1, 10000));
    cm_unsubscribe(cm[1].rep, &s);
    cm_sub_free(&s);
    /* one more round trip through the replicator, so the gossiped value is stored (the spec's
       own reason: the notification may come before the store has it) */
    assert_int_equal(cm_incr(cm[1].rep, "durable-A", 1, c_local()), 0);
    new_replicator(1, case_no);
    assert_true(wait_until(has_keys, cm[1].rep, 10000));
    char got[64];
    assert_int_equal(cm_set_get(cm[1].rep, "durable-C", c_local(), got, sizeof got), 0);
    assert_string_equal(got, "first");
}

/* "handle Update before load": a node of its own (a one-node cluster), restarted on the same
   address and directory; an update sent while its replicator loads waits for the load. */
static void handle_update_before_load(void **state)
{
    (void)state;
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", tfree_port());
    case_no = 4;
    start_node(5, 5, ep);
    new_replicator(5, case_no);
    count_t c1 = {cm[5].rep, 1};
    assert_true(wait_until(count_is, &c1, 10000));
    uint64_t v = 0;
    assert_int_equal(cm_gcounter(cm[5].rep, "durable-A", c_local(), &v), SHOAL_ENOTFOUND);
    for (int k = 0; k < 3; k++)
        assert_int_equal(cm_incr(cm[5].rep, "durable-A", 1, c_local()), 0);
    assert_int_equal(cm_incr(cm[5].rep, "durable-B", 1, c_local()), 0);
    assert_int_equal(shoal_cluster_unfollow(cm[5].cl, cm[5].rep), 0);
    shoal_replicator_destroy(&cm[5].rep);
    shoal_durable_close(&dur[5]);
    cm_stop(5);

    start_node(5, 5, ep);
    new_replicator(5, case_no);
    assert_int_equal(cm_incr(cm[5].rep, "durable-B", 1, c_local()), 0);
    int n = 0;
    assert_int_equal(shoal_replicator_keys_sync(cm[5].rep, one_key, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(cm_gcounter(cm[5].rep, "durable-A", c_local(), &v), 0);
    assert_int_equal(v, 3);
    assert_int_equal(cm_gcounter(cm[5].rep, "durable-B", c_local(), &v), 0);
    assert_int_equal(v, 2);
    assert_int_equal(shoal_cluster_unfollow(cm[5].cl, cm[5].rep), 0);
    shoal_replicator_destroy(&cm[5].rep);
    cm_stop(5);
}

/* A store that fails to load, or to store. */
static int failing_load(void *ctx, shoal_store_each_fn *each, void *each_arg)
{
    (void)ctx;
    (void)each;
    (void)each_arg;
    return SHOAL_ESTORE;
}

static void failing_store(void *ctx, const char *key, size_t klen, const void *data, size_t len,
                          shoal_store_done_fn *done, void *done_arg)
{
    (void)ctx;
    (void)key;
    (void)klen;
    (void)data;
    (void)len;
    done(done_arg, SHOAL_ESTORE);
}

static int empty_load(void *ctx, shoal_store_each_fn *each, void *each_arg)
{
    (void)ctx;
    (void)each;
    (void)each_arg;
    return 0;
}

static void ok_store(void *ctx, const char *key, size_t klen, const void *data, size_t len,
                     shoal_store_done_fn *done, void *done_arg)
{
    failing_store(ctx, key, klen, data, len, done, done_arg);
}

static void no_close(void *ctx)
{
    (void)ctx;
}

/* "stop Replicator if Load fails": a node must not serve as if it had no durable data when it
   could not read the data it has. Akka stops the replicator; Shoal keeps it, stopped: every
   operation fails with SHOAL_ESTORE (counted as a store failure), and it answers no peer. (Before
   the fix a local read here answered not-found: the node served as if its store were empty.) */
static void stop_replicator_if_load_fails(void **state)
{
    (void)state;
    static shoal_store_t bad = {failing_load, ok_store, no_close, NULL};
    shoal_replicator_settings_t rs = rep_settings(&bad);
    rs.role = "load-fails";
    int err = 0;
    shoal_replicator_t *r = shoal_replicator_new(cm[0].sys, &rs, &err);
    assert_non_null(r);
    uint64_t v = 0;
    /* a read and a write: the first ones may be queued behind the load, the later ones come
       after it; all are refused */
    for (int round = 0; round < 2; round++) {
        assert_int_equal(cm_gcounter(r, "durable-A", c_local(), &v), SHOAL_ESTORE);
        assert_int_equal(cm_incr(r, "durable-A", 1, c_local()), SHOAL_ESTORE);
        assert_int_equal(cm_gcounter(r, "not-durable", c_local(), &v), SHOAL_ESTORE);
        assert_int_equal(cm_incr(r, "not-durable", 1, c_local()), SHOAL_ESTORE);
    }
    int n = 0;
    assert_int_equal(shoal_replicator_keys_sync(r, one_key, &n), SHOAL_ESTORE);
    assert_int_equal(n, 0);
    assert_int_equal(shoal_replicator_replica_count_sync(r), 0);
    shoal_replicator_stats_t st;
    assert_int_equal(shoal_replicator_stats(r, &st), 0);
    /* the load itself, 8 refused operations and the key listing */
    assert_true(st.store_failures >= 10);
    shoal_replicator_destroy(&r);
}

/* "reply with StoreFailure if store fails" */
static void reply_with_store_failure(void **state)
{
    (void)state;
    static shoal_store_t bad = {empty_load, failing_store, no_close, NULL};
    shoal_replicator_settings_t rs = rep_settings(&bad);
    rs.role = "store-fails";
    int err = 0;
    shoal_replicator_t *r = shoal_replicator_new(cm[0].sys, &rs, &err);
    assert_non_null(r);
    int rc = cm_incr(r, "durable-A", 1, c_local());
    shoal_replicator_destroy(&r);
    assert_int_equal(rc, SHOAL_ESTORE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(work_in_single_node_cluster),
        cmocka_unit_test(work_in_multi_node_cluster),
        cmocka_unit_test(be_durable_after_gossip_update),
        cmocka_unit_test(handle_update_before_load),
        cmocka_unit_test(stop_replicator_if_load_fails),
        cmocka_unit_test(reply_with_store_failure),
    };
    return cmocka_run_group_tests_name("DurableDataSpec", tests, NULL, teardown);
}
