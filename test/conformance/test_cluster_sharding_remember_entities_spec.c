/*  test_cluster_sharding_remember_entities_spec.c — conformance: Akka/Pekko's
    ClusterShardingRememberEntitiesSpec (ddata mode, remembered entities in durable ddata keys on
    LMDB), see docs/conformance.md. An entity started on the second member is restarted on the
    third when the second crashes (and the coordinator moves with it); then the third leaves and
    a node of a new cluster on its data directory restarts the entity by itself.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "members.h"
#include "procs.h"
#include "shard_conf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char root[64];
static shoal_replicator_t *rep[TS_MAX];
static shoal_durable_t *dur[TS_MAX];

static void node_stop(int i, bool crash)
{
    if (!tsn[i].sys)
        return;
    if (crash) {
        shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
        assert_int_equal(shoal_system_fault(tsn[i].sys, NULL, &cut), 0);
    }
    shoal_sharding_destroy(&tsn[i].sh);
    shoal_cluster_destroy(&tsn[i].cl);
    shoal_replicator_destroy(&rep[i]);
    shoal_durable_close(&dur[i]);
    tsnode_stop(i);
}

static int teardown(void **state)
{
    for (int i = 0; i < TS_MAX; i++)
        node_stop(i, false);
    tsnode_teardown(state);
    if (root[0])
        trm_tree(root);
    return 0;
}

/* Node i with sharding on an LMDB-backed replicator in <root>/<dir>, joining through seed
   (seed == i: forms a cluster); the resolver off (the spec downs the crashed node by its test
   downing; here the test downs it). */
static void start(int i, int seed, const char *dir)
{
    shoal_cluster_settings_t cs;
    cm_cluster_settings(&cs);
    tsnode_opts_t o = {.cluster = &cs, .no_region = true, .seed = seed};
    tsnode_start(i, &o);
    char path[128];
    snprintf(path, sizeof path, "%s/%s", root, dir);
    rep[i] = tsnode_durable_replicator(i, path, &dur[i]);
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.remember_entities = true;
    s.replicator = rep[i];
    tsnode_region(i, TSHARD_TYPE, &s, false);
}

static bool live_on(void *arg)
{
    int node = (int)(intptr_t)arg;
    trec_t r = trec_get(TSHARD_TYPE, "1");
    return r.live && r.node == node;
}

typedef struct {
    char keys[64][64];
    int n;
} keys_t;

static int collect_key(const char *key, const shoal_type_t *type, void *arg)
{
    (void)type;
    keys_t *k = arg;
    if (k->n < 64)
        snprintf(k->keys[k->n++], 64, "%s", key);
    return 0;
}

static bool same_digest(shoal_replicator_t *a, shoal_replicator_t *b, const char *key)
{
    shoal_consistency_t l = c_local();
    shoal_crdt_t *va = NULL, *vb = NULL;
    bool ok = shoal_replicator_get_sync(a, key, NULL, &l, &va) == 0 &&
              shoal_replicator_get_sync(b, key, NULL, &l, &vb) == 0;
    uint8_t da[16], db[16];
    ok = ok && shoal_crdt_digest(va, da) == 0 && shoal_crdt_digest(vb, db) == 0 &&
         memcmp(da, db, 16) == 0;
    shoal_crdt_destroy(&va);
    shoal_crdt_destroy(&vb);
    return ok;
}

static bool third_has_seconds_keys(void *arg)
{
    (void)arg;
    keys_t k = {.n = 0};
    if (shoal_replicator_keys_sync(rep[1], collect_key, &k) != 0 || k.n == 0)
        return false;
    for (int j = 0; j < k.n; j++)
        if (!same_digest(rep[1], rep[2], k.keys[j]))
            return false;
    return true;
}

/* "start remembered entities when coordinator fail over" */
static void start_remembered_entities_on_coordinator_fail_over(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/shoal-conf-remember-XXXXXX");
    assert_non_null(mkdtemp(root));
    start(1, 1, "second");
    tsnode_wait_up(0x2, 15000);
    assert_int_equal(sc_home(1, TSHARD_TYPE, "1", 5000u * (uint32_t)tscale()), 1);
    start(2, 1, "third");
    tsnode_wait_up(0x6, 15000);
    tsnode_wait_registered(0x6, 2, 2, 15000);
    /* the spec gives the remembered entity 5 s to reach the third by gossip; here the test waits
       until the third's replicator holds every key of the second's, with the same value */
    assert_true(wait_until(third_has_seconds_keys, NULL, 15000));
    const shoal_node_t *second = shoal_system_self(tsn[1].sys);
    node_stop(1, true);
    assert_int_equal(shoal_cluster_down(tsn[2].cl, second), 0);
    if (!wait_until(live_on, (void *)(intptr_t)2, 30000))
        fail_msg("entity 1 was not restarted on the third (live %d on node %d)",
                 trec_get(TSHARD_TYPE, "1").live, trec_get(TSHARD_TYPE, "1").node);
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

/* "start remembered entities in new cluster" */
static void start_remembered_entities_in_new_cluster(void **state)
{
    (void)state;
    assert_int_equal(shoal_cluster_leave(tsn[2].cl, NULL), 0);
    assert_true(wait_until(terminated, tsn[2].cl, 30000));
    assert_int_equal(trec_get(TSHARD_TYPE, "1").live, 0);
    node_stop(2, false);
    /* a new node (another address, a new cluster of its own) on the third's directory */
    start(3, 3, "third");
    if (!wait_until(live_on, (void *)(intptr_t)3, 30000))
        fail_msg("entity 1 was not restarted in the new cluster");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(start_remembered_entities_on_coordinator_fail_over),
        cmocka_unit_test(start_remembered_entities_in_new_cluster),
    };
    return cmocka_run_group_tests_name("ClusterShardingRememberEntitiesSpec", tests, NULL,
                                       teardown);
}
