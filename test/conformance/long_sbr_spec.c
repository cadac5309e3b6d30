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
#include <stdlib.h>
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

/* DownAllUnstable5NodeSpec: "down all when instability continues". Akka's timings (stable-after
   10 s, down-all-when-unstable 7 s, heartbeat pause 3 s) become stable-after 6 s and
   down-all-when-unstable 4 s (scaled) over the fast failure detector (1 s pause). The spec's
   clean partition {1,2,3} | {4,5} is made the same way. Its second fault, the link 2-3 cut for 7
   s, is not unreachability in Shoal (indirect probes, see the top), so the picture is kept
   changing another way: the second node is cut from the first and third (all its links: it is
   unreachable to every observer) and let back, again and again, each phase as long as the
   failure detector takes to see it and well under stable-after. The majority side's picture
   thus never holds still for stable-after, and from the first unreachability on it has been
   unstable for stable-after + down-all-when-unstable: its leader downs every member (and the
   minority {4,5}, whose picture does not change, downs itself by keep-majority). All five end
   terminated, as in the spec. Without down-all-when-unstable (or with it not measured from the
   first change) the flapping would hold every decision off until the test's deadline: the
   majority side would stay Up. */
typedef struct {
    int observer, subject;
    bool reachable;
} seen_t;

static bool sees(void *arg)
{
    seen_t *s = arg;
    if (shoal_cluster_terminated(cm[s->observer].cl))
        return true; /* decided meanwhile: nothing more to see */
    shoal_cluster_view_t v;
    if (shoal_cluster_view(cm[s->observer].cl, &v) != 0)
        return false;
    const shoal_member_t *m = shoal_cluster_view_member(&v, shoal_system_self(cm[s->subject].sys));
    bool ok = m && m->reachable == s->reachable;
    shoal_cluster_view_free(&v);
    return ok;
}

static bool all_terminated(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++)
        if (!shoal_cluster_terminated(cm[i].cl))
            return false;
    return true;
}

static void down_all_unstable_5_node(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    uint32_t k = (uint32_t)tscale();
    cs.stable_after_ms = 6000 * k;
    cs.down_all_when_unstable_ms = 4000 * (int64_t)k;
    start_cluster(5, &cs);
    int64_t t_cut = shoal_now_ms();
    for (int x = 0; x < 3; x++)
        for (int y = 3; y < 5; y++)
            cm_cut(x, y);
    for (int x = 0; x < 3; x++)
        for (int y = 3; y < 5; y++) {
            seen_t a = {x, y, false}, b = {y, x, false};
            if (!wait_until(sees, &a, 10000) || !wait_until(sees, &b, 10000))
                fail_msg("the clean partition was not seen between %d and %d", x, y);
        }
    int64_t t0 = shoal_now_ms();
    /* no decision yet */
    sleep_ms(2000 * (int)k);
    for (int i = 0; i < 5; i++)
        assert_false(shoal_cluster_terminated(cm[i].cl));

    /* the second node out and back until the cluster decides; the deadline is well past
       stable-after + down-all-when-unstable from the first unreachability */
    int64_t deadline =
        t0 + (int64_t)(cs.stable_after_ms + cs.down_all_when_unstable_ms) + 20000 * (int64_t)k;
    int flaps = 0, seen_out = 0;
    /* fixed phases, each longer than the failure detector takes to see it (the partition took
       t0 - t_cut) and both well under stable-after: 2.5 s out, 1.5 s back (scaled) */
    while (!shoal_cluster_terminated(cm[0].cl) && shoal_now_ms() < deadline) {
        cm_cut(1, 0);
        cm_cut(1, 2);
        sleep_ms(2500 * (int)k);
        seen_t out = {0, 1, false};
        seen_out += sees(&out);
        cm_pass(1, 0);
        cm_pass(1, 2);
        sleep_ms(1500 * (int)k);
        flaps++;
    }
    int64_t took = shoal_now_ms() - t_cut;
    print_message("DownAllUnstable5NodeSpec: %d flaps (%d seen by node 0); node 0 %s %lld ms "
                  "after the cut (the partition was seen after %lld ms)\n",
                  flaps, seen_out, shoal_cluster_terminated(cm[0].cl) ? "downed" : "still a member",
                  (long long)took, (long long)(t0 - t_cut));
    if (!wait_until(all_terminated, NULL, 15000)) { /* the minority {4,5} downs itself */
        for (int i = 0; i < 5; i++)
            print_message("node %d: %s\n", i,
                          shoal_cluster_terminated(cm[i].cl) ? "terminated" : "still a member");
        fail_msg("not every member was downed while the unreachability kept changing");
    }
    /* by the unstable rule, not by a picture that held still: not before stable-after +
       down-all-when-unstable from the cut, and by a leader of the first three that downed all
       five at once (nodes 0 and 2 deciding alone, a minority, would have downed two) */
    if (took < (int64_t)(cs.stable_after_ms + cs.down_all_when_unstable_ms))
        fail_msg("node 0 downed %lld ms after the cut: before stable-after + "
                 "down-all-when-unstable",
                 (long long)took);
    uint64_t most = 0;
    for (int i = 0; i < 3; i++) {
        shoal_cluster_stats_t st;
        assert_int_equal(shoal_cluster_stats(cm[i].cl, &st), 0);
        if (st.downed_by_sbr > most)
            most = st.downed_by_sbr;
    }
    if (most != 5)
        fail_msg("the most members one of the first three downed: %llu, not all five",
                 (unsigned long long)most);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(indirectly_connected_3_node, cm_teardown),
        cmocka_unit_test_teardown(indirectly_connected_5_node, cm_teardown),
        cmocka_unit_test_teardown(down_all_indirectly_connected_5_node, cm_teardown),
        cmocka_unit_test_teardown(down_all_unstable_5_node, cm_teardown),
    };
    if (getenv("TEST_FILTER")) /* run one case by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("split-brain resolver specs", tests, NULL, NULL);
}
