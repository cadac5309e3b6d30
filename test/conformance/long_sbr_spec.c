/*  test_sbr_spec.c — conformance: the split-brain resolver specs of Akka/Pekko's cluster module
    (cluster/src/multi-jvm/.../sbr): IndirectlyConnected3NodeSpec, IndirectlyConnected5NodeSpec,
    DownAllIndirectlyConnected5NodeSpec and DownAllUnstable5NodeSpec, see docs/conformance.md.
    keep-majority with the fast settings' stable-after; blackholes between pairs of nodes. Each
    case is a fresh cluster.

    Deliberately different (the three indirectly-connected specs): Shoal's failure detector asks
    indirect-probes other members before it reports a member unreachable (membership.h), so a
    single broken link between two members that a third member still reaches is not
    unreachability in Shoal: nobody is downed for it, where Akka's resolver downs both ends. The
    cases check Shoal's outcome for the same faults: with only that link broken all stay Up;
    combined with a clean partition, keep-majority downs the minority side and the majority side
    (the two ends of the broken link included) stays.
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
#include <time.h>

static void start_cluster(int n, const shoal_cluster_settings_t *cs_in)
{
    /* the resolver on (keep-majority), unlike the ddata specs' members */
    shoal_cluster_settings_t cs;
    if (cs_in)
        cs = *cs_in;
    else
        tmember_settings(&cs);
    cm_opts_t o = {.cluster = &cs};
    for (int i = 0; i < n; i++) {
        cm_start(i, &o);
        cm_join(i, 0);
    }
    cm_wait_up((1u << n) - 1, 20000);
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

static int decide_ms(void)
{
    /* stable-after and the failure detector's pause, scaled, with margin */
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    return (int)(cs.stable_after_ms + cs.acceptable_heartbeat_pause_ms) / tscale() * 3 + 5000;
}

/* Of five, nodes 3 and 4 are downed, and 0, 1, 2 stay Up together. */
static void expect_majority_side(void)
{
    for (int i = 3; i < 5; i++)
        if (!wait_until(terminated, cm[i].cl, decide_ms()))
            fail_msg("node %d was not downed", i);
    cm_wait_up(7u, decide_ms());
    for (int i = 0; i < 3; i++)
        assert_false(shoal_cluster_terminated(cm[i].cl));
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Nodes in `mask` stay Up, members of one another, reachable, for as long as the resolver would
   take to decide (stable-after and the failure detector's pause): sampled every 200 ms. */
static void expect_stay_up(unsigned mask)
{
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    int64_t end = shoal_now_ms() + cs.stable_after_ms + cs.acceptable_heartbeat_pause_ms + 1000;
    while (shoal_now_ms() < end) {
        for (int i = 0; i < CM_MAX; i++)
            if ((mask >> i) & 1)
                assert_false(shoal_cluster_terminated(cm[i].cl));
        sleep_ms(200);
    }
    cm_wait_up(mask, 10000);
}

/* IndirectlyConnected3NodeSpec: "avoid a split brain when two unreachable but can talk via
   third": the link between the second and the third is cut. Akka downs both; in Shoal (see the
   top) neither is unreachable, and all three stay Up. */
static void indirectly_connected_3_node(void **state)
{
    (void)state;
    start_cluster(3, NULL);
    cm_cut(1, 2);
    expect_stay_up(7u);
}

/* IndirectlyConnected5NodeSpec: "avoid a split brain when indirectly connected combined with
   clean partition": {1,2,3} | {4,5}, and the link 2-3 cut. Akka keeps the first alone; in
   Shoal the minority {4,5} is downed and {1,2,3} stay. */
static void indirectly_connected_5_node(void **state)
{
    (void)state;
    start_cluster(5, NULL);
    for (int x = 0; x < 3; x++)
        for (int y = 3; y < 5; y++)
            cm_cut(x, y);
    cm_cut(1, 2);
    expect_majority_side();
}

/* DownAllIndirectlyConnected5NodeSpec: "down all when indirectly connected combined with clean
   partition" (keep-one-indirectly-connected = off): the same faults, the same outcome in the
   spec (the first alone). Shoal has no keep-one-indirectly-connected setting; its resolver
   always downs the members it finds indirectly connected, and (see the top) finds none here:
   the minority {4,5} is downed and {1,2,3} stay. */
static void down_all_indirectly_connected_5_node(void **state)
{
    (void)state;
    start_cluster(5, NULL);
    for (int x = 0; x < 3; x++)
        for (int y = 3; y < 5; y++)
            cm_cut(x, y);
    cm_cut(1, 2);
    expect_majority_side();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(indirectly_connected_3_node, cm_teardown),
        cmocka_unit_test_teardown(indirectly_connected_5_node, cm_teardown),
        cmocka_unit_test_teardown(down_all_indirectly_connected_5_node, cm_teardown),
    };
    return cmocka_run_group_tests_name("split-brain resolver specs", tests, NULL, NULL);
}
