/*  test_cluster_sharding_graceful_shutdown_spec.c — conformance: Akka/Pekko's
    ClusterShardingGracefulShutdownSpec (ddata mode), see docs/conformance.md. Two members with a
    region each, entities on both; the newest member shuts down (coordinated shutdown: its region
    hands its shards off first) and every entity answers from the oldest; the coordinator then
    knows one region. An empty region shuts down at once.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "shard_conf.h"

#include <stdio.h>

static uint32_t ask_ms(void)
{
    return 3000u * (uint32_t)tscale();
}

/* "start some shards in both regions" */
static void start_some_shards_in_both_regions(void **state)
{
    (void)state;
    sc_start_nodes(2, NULL);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    int seen[2] = {0, 0};
    char id[16];
    for (int n = 1; n <= 100; n++) {
        snprintf(id, sizeof id, "%d", n);
        int home = sc_home(0, TSHARD_TYPE, id, ask_ms());
        assert_true(home == 0 || home == 1);
        seen[home]++;
    }
    assert_true(seen[0] > 0 && seen[1] > 0);
    assert_int_equal(sc_regions(0), 2);
}

static bool all_on_first(void *arg)
{
    (void)arg;
    char id[16];
    for (int n = 1; n <= 200; n++) {
        snprintf(id, sizeof id, "%d", n);
        if (sc_home(0, TSHARD_TYPE, id, ask_ms()) != 0)
            return false;
    }
    return true;
}

static bool one_region(void *arg)
{
    (void)arg;
    return sc_regions(0) == 1;
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

/* "gracefully shutdown the region on the newest node" */
static void gracefully_shutdown_region_on_newest_node(void **state)
{
    (void)state;
    assert_int_equal(shoal_cluster_shutdown(tsn[1].cl), 0);
    assert_true(wait_until(all_on_first, NULL, 30000));
    assert_true(wait_until(one_region, NULL, 30000));
    assert_true(wait_until(terminated, tsn[1].cl, 30000));
    ttotals_t t = trec_totals();
    assert_int_equal(t.double_entity, 0);
    assert_int_equal(t.double_shard, 0);
}

/* "gracefully shutdown empty region" */
static void gracefully_shutdown_empty_region(void **state)
{
    (void)state;
    shoal_region_t *empty = tsnode_region(0, "EntityEmpty", NULL, false);
    assert_non_null(empty);
    int64_t t0 = shoal_now_ms();
    assert_int_equal(shoal_region_shutdown(empty), 0);
    assert_true(shoal_now_ms() - t0 < 5000 * tscale());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(start_some_shards_in_both_regions),
        cmocka_unit_test(gracefully_shutdown_region_on_newest_node),
        cmocka_unit_test(gracefully_shutdown_empty_region),
    };
    return cmocka_run_group_tests_name("ClusterShardingGracefulShutdownSpec", tests, NULL,
                                       tsnode_teardown);
}
