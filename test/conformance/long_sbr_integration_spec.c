/*  long_sbr_integration_spec.c — conformance: Akka/Pekko's SplitBrainResolverIntegrationSpec
    (cluster-sharding's sbr), see docs/conformance.md. Each scenario is a fresh cluster of two
    sides with sharding (the counter type) and a singleton on every member: the oldest of side 1
    hosts the singleton; ten entities answer from every member; then every link between the sides
    is cut, and the resolver's strategy must keep the expected side (its members alone, the
    entities answering there, the singleton there) and down the other, or down both.
    In `scons conformance` only: each scenario waits out stable-after (minutes in all).
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
#include <stdlib.h>
#include <string.h>

typedef enum { KEEP_SIDE1, KEEP_SIDE2, SHUTDOWN_BOTH, KEEP_LEADER } expected_t;

/* The bug three scenarios found (docs/conformance.md), fixed: the side the resolver keeps fenced
   itself first ("no heartbeat reply from the side the split-brain resolver keeps": its fence
   judgement and the resolver's decision disagreed: keep-oldest with the oldest alone against one
   member, static-quorum with nine members, keep-majority 4+4 in 1 of 2 runs), and after the
   fence was lifted its stopped shards did not come back: the entities never answered. 1: the
   scenarios are strict; 0 skips them again when they see exactly that. */
#ifndef CONF_KEPT_SIDE_FENCE_FIXED
#define CONF_KEPT_SIDE_FENCE_FIXED 1
#endif
static const char *known_bug;

static shoal_singleton_t *sg[TS_MAX];
static int sg_running[TS_MAX];

static void on_start(shoal_singleton_t *s, uint64_t term, void *arg)
{
    (void)s;
    (void)term;
    __atomic_store_n(&sg_running[(int)(intptr_t)arg], 1, __ATOMIC_SEQ_CST);
}

static void on_stop(shoal_singleton_t *s, void *arg)
{
    (void)s;
    __atomic_store_n(&sg_running[(int)(intptr_t)arg], 0, __ATOMIC_SEQ_CST);
}

static int teardown(void **state)
{
    for (int i = 0; i < TS_MAX; i++)
        shoal_singleton_destroy(&sg[i]);
    memset(sg_running, 0, sizeof sg_running);
    return tsnode_teardown(state);
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

typedef struct {
    int from, n;
} side_t;

static bool singleton_on(void *arg)
{
    int i = (int)(intptr_t)arg;
    int n = 0;
    for (int k = 0; k < TS_MAX; k++)
        n += __atomic_load_n(&sg_running[k], __ATOMIC_SEQ_CST);
    return n == 1 && __atomic_load_n(&sg_running[i], __ATOMIC_SEQ_CST);
}

static bool entities_answer_within(void *arg)
{
    side_t *s = arg;
    char id[16];
    for (int i = s->from; i < s->from + s->n; i++)
        for (int k = 0; k < 10; k++) {
            snprintf(id, sizeof id, "%d", k);
            int home = sc_home(i, TSHARD_TYPE, id, 2000u * (uint32_t)tscale());
            if (home < s->from || home >= s->from + s->n)
                return false;
        }
    return true;
}

static int decide_ms(void)
{
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    return (int)(cs.stable_after_ms + cs.acceptable_heartbeat_pause_ms) / tscale() * 3 + 10000;
}

static void kept(side_t s)
{
    tsnode_wait_up(((1u << s.n) - 1) << s.from, decide_ms());
    if (!wait_until(entities_answer_within, &s, decide_ms()) && known_bug &&
        !CONF_KEPT_SIDE_FENCE_FIXED) {
        print_message("KNOWN FAILURE, skipped: %s: the kept side's entities do not answer after "
                      "its fence was lifted; see docs/conformance.md, "
                      "SplitBrainResolverIntegrationSpec\n",
                      known_bug);
        skip();
    }
    assert_true(wait_until(entities_answer_within, &s, decide_ms()));
    assert_true(wait_until(singleton_on, (void *)(intptr_t)s.from, decide_ms()));
}

static void downed(side_t s)
{
    for (int i = s.from; i < s.from + s.n; i++)
        if (!wait_until(terminated, tsn[i].cl, decide_ms()))
            fail_msg("node %d was not downed", i);
}

static void scenario(shoal_sbr_strategy_t strategy, int s1, int s2, expected_t expected)
{
    known_bug = (strategy == SHOAL_SBR_STATIC_QUORUM && s1 + s2 == 9 && s1 == 5)
                    ? "static-quorum 5+4"
                : (strategy == SHOAL_SBR_KEEP_OLDEST && s1 == 1 && s2 == 1) ? "keep-oldest 1+1"
                                                                            : NULL;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.sbr_strategy = strategy;
    cs.static_quorum_size = 5;
    tsnode_opts_t o = {.cluster = &cs, .seed = 0};
    int order[TS_MAX], n = 0;
    order[n++] = 0;  /* side 1's head: the oldest */
    order[n++] = s1; /* side 2's head: the next oldest */
    for (int i = 1; i < s1; i++)
        order[n++] = i;
    for (int i = s1 + 1; i < s1 + s2; i++)
        order[n++] = i;
    for (int k = 0; k < n; k++) {
        int i = order[k];
        tsnode_start(i, &o);
        sg[i] = shoal_singleton_new(tsn[i].cl, "registry", NULL, on_start, on_stop,
                                    (void *)(intptr_t)i);
        assert_non_null(sg[i]);
        if (k < 2)
            tsnode_wait_up(i == 0 ? 1u : (1u | (1u << s1)), 15000);
    }
    unsigned all = (1u << (s1 + s2)) - 1;
    tsnode_wait_up(all, 30000);
    tsnode_wait_registered(all, 0, (size_t)(s1 + s2), 20000);
    assert_true(wait_until(singleton_on, (void *)(intptr_t)0, 25000));
    side_t everyone = {0, s1 + s2};
    assert_true(wait_until(entities_answer_within, &everyone, 20000));

    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    for (int a = 0; a < s1; a++)
        for (int b = s1; b < s1 + s2; b++) {
            assert_int_equal(
                shoal_system_fault(tsn[a].sys, shoal_system_endpoint(tsn[b].sys), &cut), 0);
            assert_int_equal(
                shoal_system_fault(tsn[b].sys, shoal_system_endpoint(tsn[a].sys), &cut), 0);
        }
    side_t side1 = {0, s1}, side2 = {s1, s2};
    if (expected == KEEP_LEADER) {
        /* the side of the lowest address */
        int low = 0;
        for (int i = 1; i < s1 + s2; i++)
            if (shoal_node_cmp(shoal_system_self(tsn[i].sys), shoal_system_self(tsn[low].sys)) < 0)
                low = i;
        expected = low < s1 ? KEEP_SIDE1 : KEEP_SIDE2;
    }
    switch (expected) {
    case SHUTDOWN_BOTH:
        downed(side1);
        downed(side2);
        break;
    case KEEP_SIDE1:
        downed(side2);
        kept(side1);
        break;
    default:
        downed(side1);
        kept(side2);
        break;
    }
    ttotals_t t = trec_totals();
    assert_int_equal(t.double_shard, 0);
}

#define SCENARIO(name, strategy, s1, s2, expected)                                                 \
    static void name(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        scenario(strategy, s1, s2, expected);                                                      \
    }

SCENARIO(static_quorum_1_2, SHOAL_SBR_STATIC_QUORUM, 1, 2, SHUTDOWN_BOTH)
SCENARIO(static_quorum_4_4, SHOAL_SBR_STATIC_QUORUM, 4, 4, SHUTDOWN_BOTH)
SCENARIO(static_quorum_5_4, SHOAL_SBR_STATIC_QUORUM, 5, 4, KEEP_SIDE1)
SCENARIO(static_quorum_1_5, SHOAL_SBR_STATIC_QUORUM, 1, 5, KEEP_SIDE2)
SCENARIO(static_quorum_4_5, SHOAL_SBR_STATIC_QUORUM, 4, 5, KEEP_SIDE2)
SCENARIO(keep_majority_2_1, SHOAL_SBR_KEEP_MAJORITY, 2, 1, KEEP_SIDE1)
SCENARIO(keep_majority_1_2, SHOAL_SBR_KEEP_MAJORITY, 1, 2, KEEP_SIDE2)
SCENARIO(keep_majority_4_5, SHOAL_SBR_KEEP_MAJORITY, 4, 5, KEEP_SIDE2)
SCENARIO(keep_majority_4_4, SHOAL_SBR_KEEP_MAJORITY, 4, 4, KEEP_LEADER)
SCENARIO(keep_oldest_3_3, SHOAL_SBR_KEEP_OLDEST, 3, 3, KEEP_SIDE1)
SCENARIO(keep_oldest_1_1, SHOAL_SBR_KEEP_OLDEST, 1, 1, KEEP_SIDE1)
SCENARIO(keep_oldest_1_2_down_if_alone, SHOAL_SBR_KEEP_OLDEST, 1, 2, KEEP_SIDE2)
SCENARIO(down_all_1_2, SHOAL_SBR_DOWN_ALL, 1, 2, SHUTDOWN_BOTH)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(static_quorum_1_2, teardown),
        cmocka_unit_test_teardown(static_quorum_4_4, teardown),
        cmocka_unit_test_teardown(static_quorum_5_4, teardown),
        cmocka_unit_test_teardown(static_quorum_1_5, teardown),
        cmocka_unit_test_teardown(static_quorum_4_5, teardown),
        cmocka_unit_test_teardown(keep_majority_2_1, teardown),
        cmocka_unit_test_teardown(keep_majority_1_2, teardown),
        cmocka_unit_test_teardown(keep_majority_4_5, teardown),
        cmocka_unit_test_teardown(keep_majority_4_4, teardown),
        cmocka_unit_test_teardown(keep_oldest_3_3, teardown),
        cmocka_unit_test_teardown(keep_oldest_1_1, teardown),
        cmocka_unit_test_teardown(keep_oldest_1_2_down_if_alone, teardown),
        cmocka_unit_test_teardown(down_all_1_2, teardown),
    };
    if (getenv("TEST_FILTER")) /* run one scenario by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests_name("SplitBrainResolverIntegrationSpec", tests, NULL, NULL);
}
