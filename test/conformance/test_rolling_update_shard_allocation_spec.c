/*  test_rolling_update_shard_allocation_spec.c — conformance: Akka/Pekko's
    RollingUpdateShardAllocationSpec, see docs/conformance.md. Two members of app version 1.0.0,
    then two of 1.0.1 join one by one while the old ones leave: while the upgrade is under way
    new shards go to the newest version (shard = entity id, as the spec's extractor), and the old
    members' shards follow them out.
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

static void id_is_shard(const char *entity_id, uint32_t number_of_shards, char *out, void *arg)
{
    (void)number_of_shards;
    (void)arg;
    snprintf(out, SHOAL_SHARD_ID_MAX + 1, "%s", entity_id);
}

static shoal_sharding_settings_t settings(void)
{
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.shard_id = id_is_shard;
    s.allocation.rebalance_absolute_limit = 1; /* the newer least-shard algorithm, as the spec */
    return s;
}

static void start(int i, const char *version)
{
    static shoal_sharding_settings_t s;
    static shoal_cluster_settings_t cs;
    s = settings();
    tmember_settings(&cs);
    cs.phase_timeout_ms = 10000u * (uint32_t)tscale();
    tsnode_opts_t o = {.sharding = &s, .cluster = &cs, .seed = 0, .app_version = version};
    tsnode_start(i, &o);
}

static uint32_t ask_ms(void)
{
    return 5000u * (uint32_t)tscale();
}

typedef struct {
    int via, n;
} regions_t;

static bool regions_are(void *arg)
{
    regions_t *r = arg;
    return sc_regions(r->via) == r->n;
}

static void wait_regions(int via, int n)
{
    regions_t r = {via, n};
    if (!wait_until(regions_are, &r, 30000))
        fail_msg("node %d's coordinator knows %d regions, not %d", via, sc_regions(via), n);
}

/* "form cluster" */
static void form_cluster(void **state)
{
    (void)state;
    start(0, "1.0.0");
    tsnode_wait_up(1u, 15000);
    start(1, "1.0.0");
    tsnode_wait_up(3u, 15000);
}

/* "start cluster sharding on first" */
static void start_sharding_on_first(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        wait_regions(i, 2);
    int a = sc_home(0, TSHARD_TYPE, "id1", ask_ms());
    int b = sc_home(0, TSHARD_TYPE, "id2", ask_ms());
    assert_true(a >= 0 && b >= 0);
    assert_int_not_equal(a, b);
}

/* "start a rolling upgrade" */
static void start_a_rolling_upgrade(void **state)
{
    (void)state;
    start(2, "1.0.1");
    tsnode_wait_up(7u, 15000);
    for (int i = 0; i < 3; i++)
        wait_regions(i, 3);
    for (int i = 0; i < 2; i++)
        assert_true(sc_home(i, TSHARD_TYPE, "id3", ask_ms()) >= 0);
    char id[16];
    for (int n = 3; n <= 5; n++) {
        snprintf(id, sizeof id, "id%d", n);
        assert_int_equal(sc_home(2, TSHARD_TYPE, id, ask_ms()), 2);
    }
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

/* "complete a rolling upgrade" */
static void complete_a_rolling_upgrade(void **state)
{
    (void)state;
    start(3, "1.0.1");
    tsnode_wait_up(0xf, 15000);
    assert_int_equal(shoal_cluster_leave(tsn[0].cl, NULL), 0);
    assert_true(wait_until(terminated, tsn[0].cl, 30000));
    for (int i = 1; i < 4; i++)
        wait_regions(i, 3);
    for (int i = 1; i < 4; i++) {
        assert_true(sc_home(i, TSHARD_TYPE, "id1", ask_ms()) >= 1);
        assert_true(sc_home(i, TSHARD_TYPE, "id2", ask_ms()) >= 1);
    }
    assert_int_equal(shoal_cluster_leave(tsn[1].cl, NULL), 0);
    assert_true(wait_until(terminated, tsn[1].cl, 30000));
    for (int i = 2; i < 4; i++)
        wait_regions(i, 2);
    for (int i = 2; i < 4; i++) {
        assert_true(sc_home(i, TSHARD_TYPE, "id1", ask_ms()) >= 2);
        assert_true(sc_home(i, TSHARD_TYPE, "id2", ask_ms()) >= 2);
    }
    ttotals_t t = trec_totals();
    assert_int_equal(t.double_entity, 0);
    assert_int_equal(t.double_shard, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(form_cluster),
        cmocka_unit_test(start_sharding_on_first),
        cmocka_unit_test(start_a_rolling_upgrade),
        cmocka_unit_test(complete_a_rolling_upgrade),
    };
    return cmocka_run_group_tests_name("RollingUpdateShardAllocationSpec", tests, NULL,
                                       tsnode_teardown);
}
