/*  test_restart_node_spec.c — conformance: Akka/Pekko's RestartNodeSpec, see
    docs/conformance.md. Three members join through the same seed list (the three addresses);
    the second shuts down (an orderly shutdown, as the spec's actor system termination) and a new
    incarnation starts on the same address, joins through the seed list again and is Up with the
    others, who know it by its new uid.
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

static char ep[3][64];
static const char *seeds[3];

static void start_with_seeds(int i)
{
    cm_opts_t o = {.endpoint = ep[i]};
    cm_start(i, &o);
    assert_int_equal(shoal_cluster_join(cm[i].cl, seeds, 3), 0);
}

typedef struct {
    uint64_t old_uid;
} re_t;

static bool restarted_seen(void *arg)
{
    re_t *r = arg;
    for (int i = 0; i < 3; i++) {
        cm_view_t v;
        if (!cm_view(i, &v) || v.n_members != 3 || !v.converged)
            return false;
        shoal_cluster_view_t full;
        if (shoal_cluster_view(cm[i].cl, &full) != 0)
            return false;
        bool ok = true;
        for (size_t k = 0; k < full.n_members; k++) {
            const shoal_member_t *m = &full.members[k];
            ok &= m->status == SHOAL_MEMBER_UP;
            if (shoal_node_port(m->node) == shoal_node_port(shoal_system_self(cm[1].sys)))
                ok &= shoal_node_uid(m->node) != r->old_uid;
        }
        shoal_cluster_view_free(&full);
        if (!ok)
            return false;
    }
    return true;
}

/* "be able to restart and join again" */
static void restart_and_join_again(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        snprintf(ep[i], sizeof ep[i], "tcp://127.0.0.1:%d", tfree_port());
        seeds[i] = ep[i];
    }
    for (int i = 0; i < 3; i++)
        start_with_seeds(i);
    cm_wait_up(7u, 20000);
    uint64_t old_uid = shoal_node_uid(shoal_system_self(cm[1].sys));
    assert_int_equal(shoal_cluster_shutdown_wait(cm[1].cl, 30000), 0);
    cm_stop(1);
    start_with_seeds(1);
    re_t r = {old_uid};
    assert_true(wait_until(restarted_seen, &r, 30000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(restart_and_join_again),
    };
    return cmocka_run_group_tests_name("RestartNodeSpec", tests, NULL, cm_teardown);
}
