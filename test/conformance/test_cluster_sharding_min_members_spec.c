/*  test_cluster_sharding_min_members_spec.c — conformance: Akka/Pekko's
    ClusterShardingMinMembersSpec (ddata mode), see docs/conformance.md. min-nr-of-members = 3;
    three members Up, but the third has no region yet: a message waits (no shard is allocated
    while fewer regions than that are registered); once the third starts its region, the
    message is delivered and three entities in three shards land one on each region.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "members.h"
#include "shard_conf.h"

#include <stdio.h>
#include <time.h>

/* "use all nodes" */
static void use_all_nodes(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.min_nr_of_members = 3;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 3;
    tsnode_opts_t o0 = {.cluster = &cs, .sharding = &s, .seed = 0, .port = tfree_port()};
    tsnode_opts_t o = {.cluster = &cs, .sharding = &s, .seed = 0};
    tsnode_start(0, &o0);
    tsnode_start(1, &o);
    tsnode_opts_t bare = o;
    bare.no_region = true;
    tsnode_start(2, &bare);
    tsnode_wait_up(0x7, 20000);
    char ids[3][32];
    tshard_pick_ids("e", 3, 3, ids);
    task_t t1;
    assert_int_equal(task_ask(tsn[0].r, ids[0], "whoami", 20000u * (uint32_t)tscale(), &t1), 0);
    /* the spec waits 2 s for no answer: here a sampling of a second (scaled) */
    for (int k = 0; k < 10 * tscale(); k++) {
        assert_int_equal(task_get(&t1).calls, 0);
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
    tsnode_region(2, TSHARD_TYPE, &s, false);
    int64_t end = shoal_now_ms() + 20000 * tscale();
    while (task_get(&t1).calls == 0 && shoal_now_ms() < end) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(task_get(&t1).calls, 1);
    assert_int_equal(task_get(&t1).status, 0);
    for (int k = 1; k < 3; k++) {
        shoal_buf_t b = {0};
        assert_int_equal(
            shoal_region_ask_sync(tsn[0].r, ids[k], "whoami", 6, 5000u * (uint32_t)tscale(), &b),
            0);
        shoal_buf_free(&b);
    }
    /* the cluster-wide stats: three regions, the first hosting one shard */
    shoal_sharding_stats_t st;
    assert_int_equal(shoal_region_cluster_stats(tsn[0].r, 5000u * (uint32_t)tscale(), &st), 0);
    assert_int_equal(st.n_regions, 3);
    for (size_t r = 0; r < st.n_regions; r++)
        if (st.regions[r].region == shoal_system_self(tsn[0].sys))
            assert_int_equal(st.regions[r].n_shards, 1);
    shoal_sharding_stats_free(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(use_all_nodes),
    };
    return cmocka_run_group_tests_name("ClusterShardingMinMembersSpec", tests, NULL,
                                       tsnode_teardown);
}
