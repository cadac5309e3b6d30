/*  test_unreachable_node_joins_again_spec.c — conformance: Akka/Pekko's
    UnreachableNodeJoinsAgainSpec, see docs/conformance.md. Four members; the fourth (the victim)
    is blackholed from all: it sees the three unreachable, they see it unreachable (still Up);
    the second (the master) downs it and the three go on alone; the network is plugged back, the
    victim's process ends and a fresh node on the same host:port joins through the master and all
    four are Up. No downing provider (as the spec).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "procs.h"

#include <stdio.h>

#define VICTIM 3
#define MASTER 1

static char victim_ep[64];
static const shoal_node_t *victim;

/* "reach initial convergence" */
static void reach_initial_convergence(void **state)
{
    (void)state;
    snprintf(victim_ep, sizeof victim_ep, "tcp://127.0.0.1:%d", tfree_port());
    for (int i = 0; i < 4; i++) {
        cm_opts_t o = {.endpoint = i == VICTIM ? victim_ep : NULL};
        cm_start(i, &o);
        cm_join(i, 0);
    }
    cm_wait_up(0xf, 20000);
    victim = shoal_system_self(cm[VICTIM].sys);
}

static bool unreachable_both_ways(void *arg)
{
    (void)arg;
    cm_view_t v;
    if (!cm_view(VICTIM, &v) || v.n_unreachable != 3)
        return false;
    for (int i = 0; i < 3; i++) {
        if (!cm_view(i, &v) || v.n_unreachable != 1)
            return false;
        shoal_cluster_view_t full;
        if (shoal_cluster_view(cm[i].cl, &full) != 0)
            return false;
        const shoal_member_t *m = shoal_cluster_view_member(&full, victim);
        bool ok = m && !m->reachable && m->status == SHOAL_MEMBER_UP;
        shoal_cluster_view_free(&full);
        if (!ok)
            return false;
    }
    return true;
}

/* "mark a node as UNREACHABLE when we pull the network" */
static void mark_unreachable_when_network_pulled(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        cm_cut(VICTIM, i);
    assert_true(wait_until(unreachable_both_ways, NULL, 30000));
}

/* "mark the node as DOWN" */
static void mark_the_node_down(void **state)
{
    (void)state;
    assert_int_equal(shoal_cluster_down(cm[MASTER].cl, victim), 0);
    cm_wait_up(0x7, 15000);
}

/* "allow fresh node with same host:port to join again when the network is plugged back in" */
static void fresh_node_same_address_joins_again(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        cm_pass(VICTIM, i);
    cm_stop(VICTIM);
    cm_opts_t o = {.endpoint = victim_ep};
    cm_start(VICTIM, &o);
    cm_join(VICTIM, MASTER);
    cm_wait_up(0xf, 30000);
    /* the fresh node and the master talk: a write from it reaches the master */
    assert_int_equal(cm_incr(cm[VICTIM].rep, "end", 1, c_local()), 0);
    assert_true(cm_wait_gcounter(cm[MASTER].rep, "end", 1, 20000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reach_initial_convergence),
        cmocka_unit_test(mark_unreachable_when_network_pulled),
        cmocka_unit_test(mark_the_node_down),
        cmocka_unit_test(fresh_node_same_address_joins_again),
    };
    return cmocka_run_group_tests_name("UnreachableNodeJoinsAgainSpec", tests, NULL, cm_teardown);
}
