/*  test_cluster_sharding_leaving_spec.c — conformance: Akka/Pekko's ClusterShardingLeavingSpec
    (ddata mode), see docs/conformance.md. Five members; entities 1..10 started; the two oldest
    (the coordinator's node among them) leave at once: their regions stop, the entities they
    hosted answer from new homes, the others stay where they were.
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

static int original[11];

static uint32_t ask_ms(void)
{
    return 1000u * (uint32_t)tscale();
}

/* "join cluster" */
static void join_cluster(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.phase_timeout_ms = 10000u * (uint32_t)tscale(); /* the handoffs must not be cut short */
    tsnode_opts_t o = {.cluster = &cs};
    sc_start_nodes(5, &o);
    tsnode_wait_registered(0x1f, 0, 5, 20000);
}

/* "initialize shards" */
static void initialize_shards(void **state)
{
    (void)state;
    char id[16];
    for (int n = 1; n <= 10; n++) {
        snprintf(id, sizeof id, "%d", n);
        original[n] = sc_home(0, TSHARD_TYPE, id, 3 * ask_ms());
        assert_true(original[n] >= 0);
    }
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

static bool moved_right(void *arg)
{
    (void)arg;
    char id[16];
    for (int via = 2; via < 5; via++)
        for (int n = 1; n <= 10; n++) {
            snprintf(id, sizeof id, "%d", n);
            int home = sc_home(via, TSHARD_TYPE, id, ask_ms());
            if (original[n] < 2 ? (home < 2) : (home != original[n]))
                return false;
        }
    return true;
}

/* "recover after leaving coordinator node" */
static void recover_after_leaving_coordinator_node(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        assert_int_equal(shoal_cluster_leave(tsn[4].cl, shoal_system_self(tsn[i].sys)), 0);
    for (int i = 0; i < 2; i++)
        assert_true(wait_until(terminated, tsn[i].cl, 30000));
    if (!wait_until(moved_right, NULL, 30000)) {
        char id[16];
        for (int n = 1; n <= 10; n++) {
            snprintf(id, sizeof id, "%d", n);
            fprintf(stderr, "entity %d: was on %d, answers from %d\n", n, original[n],
                    sc_home(2, TSHARD_TYPE, id, ask_ms()));
        }
        fail_msg("entities did not recover where they should");
    }
    ttotals_t t = trec_totals();
    assert_int_equal(t.double_entity, 0);
    assert_int_equal(t.double_shard, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(join_cluster),
        cmocka_unit_test(initialize_shards),
        cmocka_unit_test(recover_after_leaving_coordinator_node),
    };
    return cmocka_run_group_tests_name("ClusterShardingLeavingSpec", tests, NULL, tsnode_teardown);
}
