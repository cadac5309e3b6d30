/*  test_singleton_spec.c — conformance: Akka/Pekko's ClusterSingletonManager specs of
    cluster-tools (ClusterSingletonManagerLeaveSpec, ClusterSingletonManagerLeave2Spec,
    ClusterSingletonManagerChaosSpec, ClusterSingletonManagerDownedSpec), see
    docs/conformance.md. A singleton on every member (shoal_singleton_new): it runs on the oldest
    member only, hands over when its host leaves or crashes, and stops when its host is downed.
    Never two at once: every start is checked against the running count.
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
#include <string.h>

static shoal_singleton_t *sg[CM_MAX];
static int running[CM_MAX], starts[CM_MAX], stops[CM_MAX], max_concurrent;

static int count_running(void)
{
    int n = 0;
    for (int i = 0; i < CM_MAX; i++)
        n += __atomic_load_n(&running[i], __ATOMIC_SEQ_CST);
    return n;
}

static void on_start(shoal_singleton_t *s, uint64_t term, void *arg)
{
    (void)s;
    (void)term;
    int i = (int)(intptr_t)arg;
    __atomic_store_n(&running[i], 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&starts[i], 1, __ATOMIC_SEQ_CST);
    int n = count_running();
    if (n > __atomic_load_n(&max_concurrent, __ATOMIC_SEQ_CST))
        __atomic_store_n(&max_concurrent, n, __ATOMIC_SEQ_CST);
}

static void on_stop(shoal_singleton_t *s, void *arg)
{
    (void)s;
    int i = (int)(intptr_t)arg;
    __atomic_store_n(&running[i], 0, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&stops[i], 1, __ATOMIC_SEQ_CST);
}

static void start_member(int i, const shoal_cluster_settings_t *cs)
{
    cm_opts_t o = {.cluster = cs};
    cm_start(i, &o);
    sg[i] = shoal_singleton_new(cm[i].cl, "echo", NULL, on_start, on_stop, (void *)(intptr_t)i);
    assert_non_null(sg[i]);
    cm_join(i, 0);
}

static int teardown(void **state)
{
    for (int i = 0; i < CM_MAX; i++)
        shoal_singleton_destroy(&sg[i]);
    cm_teardown(state);
    memset(running, 0, sizeof running);
    memset(starts, 0, sizeof starts);
    memset(stops, 0, sizeof stops);
    max_concurrent = 0;
    return 0;
}

static bool runs_on(void *arg)
{
    int i = (int)(intptr_t)arg;
    return __atomic_load_n(&running[i], __ATOMIC_SEQ_CST) && count_running() == 1;
}

static bool stopped_on(void *arg)
{
    int i = (int)(intptr_t)arg;
    return !__atomic_load_n(&running[i], __ATOMIC_SEQ_CST) &&
           __atomic_load_n(&stops[i], __ATOMIC_SEQ_CST) > 0;
}

static bool cluster_done(void *arg)
{
    return shoal_cluster_terminated(arg);
}

static void expect_runs_on(int i, int timeout_ms)
{
    if (!wait_until(runs_on, (void *)(intptr_t)i, timeout_ms))
        fail_msg("the singleton does not run on node %d alone (%d running)", i, count_running());
}

/* A member leaves and its singleton stops, then its membership ends (the spec's order: the
   singleton stopped before the member is removed). */
static void leave_and_stop(int asker, int leaver)
{
    assert_int_equal(shoal_cluster_leave(cm[asker].cl, shoal_system_self(cm[leaver].sys)), 0);
    assert_true(wait_until(stopped_on, (void *)(intptr_t)leaver, 15000));
    assert_true(wait_until(cluster_done, cm[leaver].cl, 15000));
}

/* ClusterSingletonManagerLeaveSpec: "hand-over to new instance" */
static void leave_hand_over_to_new_instance(void **state)
{
    (void)state;
    start_member(0, NULL);
    expect_runs_on(0, 5000);
    start_member(1, NULL);
    cm_wait_up(3u, 10000);
    start_member(2, NULL);
    cm_wait_up(7u, 10000);
    leave_and_stop(1, 0);
    expect_runs_on(1, 15000);
    leave_and_stop(1, 1);
    expect_runs_on(2, 15000);
    leave_and_stop(2, 2);
    assert_int_equal(max_concurrent, 1);
}

/* ClusterSingletonManagerLeave2Spec: "hand-over to new instance" when the oldest and two more
   leave at once: the third (the oldest left) takes over, never beside the old one. The spec's
   singleton also delays its own stop (it stops only when told a second time); Shoal's stop
   callback is the stop, so that part has no counterpart here. */
static void leave2_hand_over_with_two_nodes(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++) {
        start_member(i, NULL);
        cm_wait_up((1u << (i + 1)) - 1, 10000);
    }
    expect_runs_on(0, 5000);
    for (int i = 0; i < 5; i++)
        if (i == 0 || i == 1 || i == 3)
            assert_int_equal(shoal_cluster_leave(cm[i].cl, shoal_system_self(cm[i].sys)), 0);
    for (int i = 0; i < 5; i++)
        if (i == 0 || i == 1 || i == 3)
            assert_true(wait_until(cluster_done, cm[i].cl, 20000));
    expect_runs_on(2, 20000);
    assert_int_equal(starts[1], 0);
    assert_int_equal(starts[4], 0);
    assert_int_equal(max_concurrent, 1);
}

/* ClusterSingletonManagerChaosSpec: "startup 6 node cluster" (the spec's controller is the test
   itself). The spec downs unreachable members at once (its test auto-downing); here the
   resolver is off and the test downs the crashed members from a survivor, the same. */
static void chaos_startup_6_node_cluster(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    cm_cluster_settings(&cs);
    for (int i = 0; i < 6; i++) {
        start_member(i, &cs);
        cm_wait_up((1u << (i + 1)) - 1, 10000);
    }
    expect_runs_on(0, 5000);
}

/* "take over when three oldest nodes crash in 6 nodes cluster" */
static void chaos_take_over_when_three_oldest_crash(void **state)
{
    (void)state;
    const shoal_node_t *old[3];
    for (int i = 0; i < 3; i++) {
        old[i] = shoal_system_self(cm[i].sys);
        shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
        assert_int_equal(shoal_system_fault(cm[i].sys, NULL, &cut), 0);
    }
    for (int i = 0; i < 3; i++) {
        shoal_singleton_destroy(&sg[i]);
        cm_stop(i);
        __atomic_store_n(&running[i], 0, __ATOMIC_SEQ_CST); /* crashed: it runs nowhere now */
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(shoal_cluster_down(cm[3].cl, old[i]), 0);
    cm_wait_up(0x38, 30000);
    expect_runs_on(3, 15000);
    assert_int_equal(starts[4], 0);
    assert_int_equal(starts[5], 0);
}

/* ClusterSingletonManagerDownedSpec: "startup 3 node" */
static void downed_startup_3_node(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    cm_cluster_settings(&cs);
    for (int i = 0; i < 3; i++)
        start_member(i, &cs);
    cm_wait_up(7u, 15000);
    expect_runs_on(0, 5000);
}

static bool one_unreachable(void *arg)
{
    (void)arg;
    cm_view_t v;
    return cm_view(0, &v) && v.n_unreachable == 1;
}

/* "stop instance when member is downed": the first downs the second and itself while cut off;
   its singleton stops at once, before any failure detection. */
static void downed_stop_instance_when_member_downed(void **state)
{
    (void)state;
    cm_cut(0, 2);
    cm_cut(1, 2);
    assert_true(wait_until(one_unreachable, NULL, 15000));
    cm_cut(0, 1);
    assert_int_equal(shoal_cluster_down(cm[0].cl, shoal_system_self(cm[1].sys)), 0);
    assert_int_equal(shoal_cluster_down(cm[0].cl, shoal_system_self(cm[0].sys)), 0);
    assert_true(wait_until(stopped_on, (void *)(intptr_t)0, 3000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(leave_hand_over_to_new_instance, teardown),
        cmocka_unit_test_teardown(leave2_hand_over_with_two_nodes, teardown),
        cmocka_unit_test(chaos_startup_6_node_cluster),
        cmocka_unit_test_teardown(chaos_take_over_when_three_oldest_crash, teardown),
        cmocka_unit_test(downed_startup_3_node),
        cmocka_unit_test_teardown(downed_stop_instance_when_member_downed, teardown),
    };
    return cmocka_run_group_tests_name("ClusterSingletonManager specs", tests, NULL, teardown);
}
