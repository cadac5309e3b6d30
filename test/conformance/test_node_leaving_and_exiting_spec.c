/*  test_node_leaving_and_exiting_spec.c — conformance: Akka/Pekko's NodeLeavingAndExitingSpec,
    see docs/conformance.md. The third tells the cluster that the second leaves; the first and the
    third see the second move to Exiting (the leader's move).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"

static cm_events_t ev[3];

/* "be moved to EXITING by the leader" */
static void moved_to_exiting_by_leader(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        cm_start(i, NULL);
        cm_join(i, 0);
    }
    cm_wait_up(7u, 15000);
    const shoal_node_t *second = shoal_system_self(cm[1].sys);
    cm_events_subscribe(0, second, &ev[0]);
    cm_events_subscribe(2, second, &ev[2]);
    assert_int_equal(shoal_cluster_leave(cm[2].cl, second), 0);
    assert_true(cm_events_wait(&ev[0], SHOAL_EV_MEMBER_EXITED, 15000));
    assert_true(cm_events_wait(&ev[2], SHOAL_EV_MEMBER_EXITED, 15000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(moved_to_exiting_by_leader),
    };
    return cmocka_run_group_tests_name("NodeLeavingAndExitingSpec", tests, NULL, cm_teardown);
}
