/*  test_update_take.c — shoal_replicator_update_take and _take_sync take the caller's initial
    value and set the caller's pointer to NULL on every path (applied, the key already present, a
    refused call), so a program written for 0.1.0's contract (destroy `initial` after the call)
    destroys nothing instead of freeing it twice (ASan would report either). The deprecated
    shoal_replicator_update_sync keeps 0.1.x-2026-11-28's meaning (it takes `initial`), for
    binaries built against that release. CHANGELOG.md, docs/compatibility.md.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "ddata.h"

static int add_x(shoal_crdt_t *set, void *sys)
{
    return shoal_orset_add(set, shoal_system_self(sys), "x", 1);
}

static void test_take_sync_nulls_the_pointer_on_every_path(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 1, NULL);
    shoal_consistency_t l = c_local();
    shoal_system_t *sys = shoal_replicator_system(c.rep[0]);

    /* a missing key: the value becomes the key's first value */
    shoal_crdt_t *initial = shoal_orset_new();
    assert_int_equal(shoal_replicator_update_take_sync(c.rep[0], "s", &initial, &l, add_x, sys), 0);
    assert_null(initial);
    shoal_crdt_destroy(&initial); /* 0.1.0's contract: harmless now */

    /* the key exists: the value is destroyed by the call */
    initial = shoal_orset_new();
    assert_int_equal(shoal_replicator_update_take_sync(c.rep[0], "s", &initial, &l, add_x, sys), 0);
    assert_null(initial);

    /* refused calls take it too: a bad key, and no consistency */
    initial = shoal_orset_new();
    assert_int_equal(shoal_replicator_update_take_sync(c.rep[0], "", &initial, &l, add_x, sys),
                     SHOAL_EINVAL);
    assert_null(initial);
    initial = shoal_orset_new();
    assert_int_equal(shoal_replicator_update_take_sync(c.rep[0], "s", &initial, NULL, add_x, sys),
                     SHOAL_EINVAL);
    assert_null(initial);

    shoal_crdt_t *got = NULL;
    assert_int_equal(
        shoal_replicator_get_sync(c.rep[0], "s", shoal_type_by_name("ORSet"), &l, &got), 0);
    assert_true(shoal_orset_contains(got, "x", 1));
    shoal_crdt_destroy(&got);
    tcluster_stop(&c);
}

/* update_take on the node thread, from a shoal_system_call */
typedef struct {
    shoal_replicator_t *r;
    shoal_crdt_t *initial;
    int rc;
    int done_status; /* written by take_done on the node thread, read after tcluster_stop */
} take_call_t;

static void take_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    *(int *)arg = status;
}

static int take_on_node(shoal_system_t *sys, void *arg)
{
    take_call_t *t = arg;
    shoal_consistency_t l = c_local();
    t->rc = shoal_replicator_update_take(t->r, "n", &t->initial, &l, add_x, sys, take_done,
                                         &t->done_status);
    return 0;
}

static void test_take_on_the_node_thread(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 1, NULL);
    shoal_system_t *sys = shoal_replicator_system(c.rep[0]);
    take_call_t t = {.r = c.rep[0], .initial = shoal_orset_new(), .rc = -1, .done_status = -1};
    assert_int_equal(shoal_system_call(sys, take_on_node, &t), 0);
    assert_int_equal(t.rc, 0);
    assert_null(t.initial);
    /* from the wrong thread: refused, and still taken */
    shoal_consistency_t l = c_local();
    shoal_crdt_t *initial = shoal_orset_new();
    assert_int_equal(
        shoal_replicator_update_take(c.rep[0], "n", &initial, &l, add_x, sys, take_done, NULL),
        SHOAL_ETHREAD);
    assert_null(initial);
    tcluster_stop(&c);
    assert_int_equal(t.done_status, 0);
}

/* the deprecated name keeps the meaning of the release we upgrade from: it takes `initial` (the
   caller must not destroy it); built with SHOAL_NO_DEPRECATED_WARNINGS as the whole tree is */
static void test_deprecated_update_sync_still_takes_initial(void **state)
{
    (void)state;
    tcluster_t c;
    tcluster_start(&c, 1, NULL);
    shoal_consistency_t l = c_local();
    shoal_system_t *sys = shoal_replicator_system(c.rep[0]);
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "d", shoal_orset_new(), &l, add_x, sys),
                     0);
    assert_int_equal(shoal_replicator_update_sync(c.rep[0], "d", shoal_orset_new(), &l, add_x, sys),
                     0);
    tcluster_stop(&c); /* ASan: nothing leaked */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_take_sync_nulls_the_pointer_on_every_path,
                                  tcluster_teardown),
        cmocka_unit_test_teardown(test_take_on_the_node_thread, tcluster_teardown),
        cmocka_unit_test_teardown(test_deprecated_update_sync_still_takes_initial,
                                  tcluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
