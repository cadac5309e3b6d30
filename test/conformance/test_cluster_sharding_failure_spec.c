/*  test_cluster_sharding_failure_spec.c — conformance: Akka/Pekko's ClusterShardingFailureSpec
    in ddata mode (there is no journal: the "flaky journal" of the persistence mode does not
    apply, the network failure does), see docs/conformance.md. Two members; entities in three
    shards; the link between the members is cut: a message to an entity of a shard not allocated
    yet waits (the coordinator cannot write its state to a majority), and arrives once the link
    is back; a passivated entity starts again on its next message; both members reach every
    entity.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "members.h"
#include "shard_conf.h"

#include <stdio.h>
#include <string.h>

static char ids[4][32]; /* four entities in four shards: the first three started at once */

static void tell(int i, const char *id, const char *msg)
{
    assert_int_equal(shoal_region_tell(tsn[i].r, id, msg, strlen(msg)), 0);
}

static bool got(void *arg)
{
    const char *id = arg;
    return trec_last(TSHARD_TYPE, id, "n0") >= 1;
}

/* "join cluster" */
static void join_cluster(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    cm_cluster_settings(&cs); /* no downing while the link is cut (the spec's cut is short) */
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    tsnode_opts_t o = {.cluster = &cs, .sharding = &s};
    sc_start_nodes(2, &o);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    tshard_pick_ids("f", 10, 4, ids);
    for (int k = 0; k < 3; k++) {
        tell(0, ids[k], "n0:1");
        assert_true(wait_until(got, ids[k], 10000));
    }
}

/* "recover after journal/network failure" */
static void recover_after_network_failure(void **state)
{
    (void)state;
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(tsn[0].sys, shoal_system_endpoint(tsn[1].sys), &cut), 0);
    assert_int_equal(shoal_system_fault(tsn[1].sys, shoal_system_endpoint(tsn[0].sys), &cut), 0);
    task_t t;
    assert_int_equal(task_ask(tsn[0].r, ids[3], "whoami", 1000u * (uint32_t)tscale(), &t), 0);
    int64_t end = shoal_now_ms() + 3000 * tscale();
    while (task_get(&t).calls == 0 && shoal_now_ms() < end && sc_nap())
        ;
    assert_int_equal(task_get(&t).calls, 1);
    assert_int_not_equal(task_get(&t).status, 0); /* no answer while the link is cut */
    tell(0, ids[3], "n0:1");
    shoal_fault_t heal = {.dir = SHOAL_FAULT_BOTH};
    assert_int_equal(shoal_system_fault(tsn[0].sys, shoal_system_endpoint(tsn[1].sys), &heal), 0);
    assert_int_equal(shoal_system_fault(tsn[1].sys, shoal_system_endpoint(tsn[0].sys), &heal), 0);
    assert_true(wait_until(got, ids[3], 20000));
    /* a passivated entity starts again on its next message */
    int starts = trec_get(TSHARD_TYPE, ids[2]).starts;
    tell(0, ids[2], "passivate");
    int64_t until = shoal_now_ms() + 10000 * tscale();
    while (trec_get(TSHARD_TYPE, ids[2]).live && shoal_now_ms() < until && sc_nap())
        ;
    assert_int_equal(trec_get(TSHARD_TYPE, ids[2]).live, 0);
    tell(0, ids[2], "n0:2");
    until = shoal_now_ms() + 10000 * tscale();
    while (trec_last(TSHARD_TYPE, ids[2], "n0") != 2 && shoal_now_ms() < until && sc_nap())
        ;
    assert_int_equal(trec_get(TSHARD_TYPE, ids[2]).starts, starts + 1);
    /* both members reach every entity */
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            assert_true(sc_home(i, TSHARD_TYPE, ids[k], 5000u * (uint32_t)tscale()) >= 0);
    ttotals_t tt = trec_totals();
    assert_int_equal(tt.double_entity, 0);
    assert_int_equal(tt.double_shard, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(join_cluster),
        cmocka_unit_test(recover_after_network_failure),
    };
    return cmocka_run_group_tests_name("ClusterShardingFailureSpec", tests, NULL, tsnode_teardown);
}
