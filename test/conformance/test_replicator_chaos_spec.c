/*  test_replicator_chaos_spec.c — conformance: Akka/Pekko's ReplicatorChaosSpec, see
    docs/conformance.md. Five members write counters and sets at every consistency, then a 2+3
    partition (blackholes between the sides) in which both sides stay available, then one node of
    the larger side stops for good (it stays a member: no downing provider, as in the spec), the
    partition heals and every survivor converges on the same values.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"

#include <stdio.h>
#include <string.h>

#define T 3000

static void assert_values(unsigned mask, uint64_t a, int64_t b, uint64_t c, uint64_t d,
                          const char *e, const char *f, bool x_deleted)
{
    for (int i = 0; i < 5; i++) {
        if (!((mask >> i) & 1))
            continue;
        shoal_replicator_t *r = cm[i].rep;
        if (a)
            assert_true(cm_wait_gcounter(r, "A", a, 10000));
        assert_true(cm_wait_pncounter(r, "B", b, 10000));
        if (c)
            assert_true(cm_wait_gcounter(r, "C", c, 10000));
        assert_true(cm_wait_gcounter(r, "D", d, 10000));
        assert_true(cm_wait_set(r, "E", e, 10000));
        assert_true(cm_wait_set(r, "F", f, 10000));
        if (x_deleted)
            assert_true(cm_wait_deleted(r, "X", 10000));
    }
}

/* "replicate data in initial phase" */
static void replicate_data_in_initial_phase(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++) {
        cm_start(i, NULL);
        cm_join(i, 0);
    }
    cm_wait_up(0x1f, 20000);
    cm_wait_replicas(0x1f, 5, 10000);
    for (int k = 0; k < 5; k++) {
        assert_int_equal(cm_incr(cm[0].rep, "A", 1, c_local()), 0);
        assert_int_equal(cm_pncounter_add(cm[0].rep, "B", -1, c_local()), 0);
        assert_int_equal(cm_incr(cm[0].rep, "C", 1, c_all(T)), 0);
    }
    assert_int_equal(cm_incr(cm[1].rep, "A", 20, c_local()), 0);
    assert_int_equal(cm_pncounter_add(cm[1].rep, "B", 20, c_n(2, T)), 0);
    assert_int_equal(cm_incr(cm[1].rep, "C", 20, c_all(T)), 0);
    assert_int_equal(cm_set_add(cm[1].rep, "E", SHOAL_GSET, "e1,e2", c_local()), 0);
    assert_int_equal(cm_set_add(cm[1].rep, "F", SHOAL_ORSET, "e1,e2", c_local()), 0);
    assert_int_equal(cm_incr(cm[3].rep, "D", 40, c_local()), 0);
    assert_int_equal(cm_set_add(cm[3].rep, "E", SHOAL_GSET, "e2,e3", c_local()), 0);
    assert_int_equal(cm_set_add(cm[3].rep, "F", SHOAL_ORSET, "e2,e3", c_local()), 0);
    assert_int_equal(cm_incr(cm[4].rep, "X", 50, c_n(2, T)), 0);
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_delete_sync(cm[4].rep, "X", &l), 0);
    assert_values(0x1f, 25, 15, 25, 40, "e1,e2,e3", "e1,e2,e3", true);
}

/* "be available during network split" */
static void be_available_during_network_split(void **state)
{
    (void)state;
    for (int a = 0; a < 2; a++)
        for (int b = 2; b < 5; b++)
            cm_cut(a, b);
    assert_int_equal(cm_incr(cm[0].rep, "A", 1, c_n(2, T)), 0);
    assert_int_equal(cm_incr(cm[2].rep, "A", 2, c_n(2, T)), 0);
    assert_int_equal(cm_set_add(cm[2].rep, "E", SHOAL_GSET, "e4", c_n(2, T)), 0);
    assert_int_equal(cm_set_remove(cm[2].rep, "F", "e2", c_n(2, T)), 0);
    assert_int_equal(cm_incr(cm[3].rep, "D", 1, c_n(2, T)), 0);
    assert_values(0x03, 26, 15, 0, 40, "e1,e2,e3", "e1,e2,e3", false);
    assert_values(0x1c, 27, 15, 0, 41, "e1,e2,e3,e4", "e1,e3", false);
    /* the spec's testConductor.exit: the fourth stops for good */
    cm_stop(3);
}

/* "converge after partition" */
static void converge_after_partition(void **state)
{
    (void)state;
    for (int a = 0; a < 2; a++)
        for (int b = 2; b < 5; b++)
            if (b != 3)
                cm_pass(a, b);
    assert_values(0x17, 28, 15, 25, 41, "e1,e2,e3,e4", "e1,e3", true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(replicate_data_in_initial_phase),
        cmocka_unit_test(be_available_during_network_split),
        cmocka_unit_test(converge_after_partition),
    };
    return cmocka_run_group_tests_name("ReplicatorChaosSpec", tests, NULL, cm_teardown);
}
