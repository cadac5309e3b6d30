/*  test_convergence_spec.c — conformance: Akka/Pekko's ConvergenceSpec, see docs/conformance.md.
    Three members converge; one stops: the other two see it unreachable, still a member, and no
    convergence; a fourth that joins then stays Joining (weakly-up off, as the spec sets), because
    the leader moves nobody Up without convergence. No downing provider (as the spec).
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

static shoal_cluster_settings_t settings(void)
{
    shoal_cluster_settings_t cs;
    cm_cluster_settings(&cs);
    cs.allow_weakly_up_members = false;
    return cs;
}

/* "reach initial convergence" */
static void reach_initial_convergence(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs = settings();
    cm_opts_t o = {.cluster = &cs};
    for (int i = 0; i < 4; i++)
        cm_start(i, &o);
    for (int i = 0; i < 3; i++)
        cm_join(i, 0);
    cm_wait_up(7u, 15000);
}

static const shoal_node_t *third;

static bool third_unreachable(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2; i++) {
        cm_view_t v;
        if (!cm_view(i, &v) || v.n_unreachable != 1 || v.n_members != 3 || v.converged)
            return false;
        shoal_cluster_view_t full;
        if (shoal_cluster_view(cm[i].cl, &full) != 0)
            return false;
        const shoal_member_t *m = shoal_cluster_view_member(&full, third);
        bool ok = m && !m->reachable;
        shoal_cluster_view_free(&full);
        if (!ok)
            return false;
    }
    return true;
}

/* "not reach convergence while any nodes are unreachable" */
static void no_convergence_while_unreachable(void **state)
{
    (void)state;
    third = shoal_system_self(cm[2].sys);
    cm_stop(2);
    assert_true(wait_until(third_unreachable, NULL, 28000));
}

/* "not move a new joining node to Up while there is no convergence" */
static void joining_node_not_up_without_convergence(void **state)
{
    (void)state;
    cm_join(3, 0);
    const shoal_node_t *n[4];
    for (int i = 0; i < 4; i++)
        n[i] = i == 2 ? third : shoal_system_self(cm[i].sys);
    const int viewers[] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        cm_view_t v;
        int64_t end = shoal_now_ms() + 10000 * tscale();
        while ((!cm_view(viewers[k], &v) || v.n_members != 4) && shoal_now_ms() < end) {
            struct timespec ts = {0, 10 * 1000000};
            nanosleep(&ts, NULL);
        }
        assert_int_equal(v.n_members, 4);
    }
    /* the spec looks five times, a second apart; here five times a gossip round apart of the
       leader's actions (leader-actions-interval of the fast settings) */
    for (int round = 0; round < 5; round++) {
        for (int k = 0; k < 3; k++) {
            int i = viewers[k];
            assert_int_equal(cm_status_of(i, n[0]), SHOAL_MEMBER_UP);
            assert_int_equal(cm_status_of(i, n[1]), SHOAL_MEMBER_UP);
            assert_int_equal(cm_status_of(i, n[3]), SHOAL_MEMBER_JOINING);
        }
        uint32_t ms = shoal_cluster_settings(cm[0].cl)->leader_actions_interval_ms;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reach_initial_convergence),
        cmocka_unit_test(no_convergence_while_unreachable),
        cmocka_unit_test(joining_node_not_up_without_convergence),
    };
    return cmocka_run_group_tests_name("ConvergenceSpec", tests, NULL, cm_teardown);
}
