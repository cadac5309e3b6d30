/*  test_leader_leaving_spec.c — conformance: Akka/Pekko's LeaderLeavingSpec, see
    docs/conformance.md. The leader of three members leaves: the others see it Exiting, then
    gone; the leaver's membership terminates; the two left elect another leader.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"

#include <stdio.h>

static cm_events_t ev[3];

typedef struct {
    int leaver;
    const shoal_node_t *old;
} gone_t;

static bool leader_gone(void *arg)
{
    gone_t *g = arg;
    for (int i = 0; i < 3; i++) {
        if (i == g->leaver)
            continue;
        cm_view_t v;
        if (!cm_view(i, &v) || v.n_members != 2 || v.n_unreachable || !v.leader ||
            v.leader == g->old || cm_status_of(i, g->old) != 0)
            return false;
    }
    return true;
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

/* "be moved to LEAVING, then to EXITING, then to REMOVED, then be shut down and then a new
   LEADER should be elected" */
static void leader_leaves_and_new_leader_elected(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        cm_start(i, NULL);
        cm_join(i, 0);
    }
    cm_wait_up(7u, 15000);
    cm_view_t v;
    assert_true(cm_view(0, &v));
    assert_non_null(v.leader);
    int leader = -1;
    for (int i = 0; i < 3; i++)
        if (shoal_system_self(cm[i].sys) == v.leader)
            leader = i;
    assert_true(leader >= 0);
    for (int i = 0; i < 3; i++)
        if (i != leader)
            cm_events_subscribe(i, v.leader, &ev[i]);
    assert_int_equal(shoal_cluster_leave(cm[leader].cl, v.leader), 0);
    for (int i = 0; i < 3; i++)
        if (i != leader)
            assert_true(cm_events_wait(&ev[i], SHOAL_EV_MEMBER_EXITED, 30000));
    assert_true(wait_until(terminated, cm[leader].cl, 30000));
    gone_t g = {leader, v.leader};
    assert_true(wait_until(leader_gone, &g, 30000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(leader_leaves_and_new_leader_elected),
    };
    return cmocka_run_group_tests_name("LeaderLeavingSpec", tests, NULL, cm_teardown);
}
