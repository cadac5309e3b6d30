/*  test_replicator_pruning_spec.c — conformance: Akka/Pekko's ReplicatorPruningSpec, see
    docs/conformance.md. Three members write a GCounter, an ORSet, a PNCounterMap, an ORMultiMap
    and an ORMap of GSets with WriteAll; the third leaves; the two left fold its contribution into
    their own (pruning) without any value changing, and after pruning an update that tries to bring
    back the removed node's old contribution (merging a copy taken before pruning) does not: the
    counter grows only by the increment, before and after the pruning markers' dissemination time.
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
#include <time.h>

#define T 3000


typedef struct {
    const shoal_node_t *self;
    const shoal_crdt_t *old;
} op_t;

static int pnmap_xy(shoal_crdt_t *m, void *arg)
{
    op_t *a = arg;
    int rc = shoal_pncountermap_add(m, a->self, "x", 1, 1);
    return rc ? rc : shoal_pncountermap_add(m, a->self, "y", 1, 1);
}

static int multimap_a(shoal_crdt_t *m, void *arg)
{
    op_t *a = arg;
    return shoal_ormultimap_add(m, a->self, "a", 1, "A", 1);
}

static int gset_add_a(shoal_crdt_t *v, void *arg)
{
    (void)arg;
    return shoal_gset_add(v, "A", 1);
}

static int ormap_a(shoal_crdt_t *m, void *arg)
{
    op_t *a = arg;
    return shoal_ormap_update(m, a->self, "a", 1, gset_add_a, NULL);
}

static int ormap_remove_a(shoal_crdt_t *m, void *arg)
{
    op_t *a = arg;
    return shoal_ormap_remove(m, a->self, "a", 1);
}

/* Merges the old value (with the removed node's part) and adds 1: the spec's "bad data". */
static int merge_old_and_incr(shoal_crdt_t *v, void *arg)
{
    op_t *a = arg;
    int rc = shoal_crdt_merge(v, a->old);
    return rc ? rc : shoal_gcounter_increment(v, a->self, 1);
}

static shoal_crdt_t *local(int i, const char *key)
{
    shoal_crdt_t *v = NULL;
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_get_sync(cm[i].rep, key, NULL, &l, &v), 0);
    return v;
}

static const shoal_node_t *third;

typedef struct {
    int i;
    const char *key;
} pr_t;

static bool pruned(void *arg)
{
    pr_t *p = arg;
    shoal_crdt_t *v = NULL;
    shoal_consistency_t l = c_local();
    if (shoal_replicator_get_sync(cm[p->i].rep, p->key, NULL, &l, &v) != 0)
        return false;
    bool ok = !shoal_crdt_needs_pruning_from(v, third);
    shoal_crdt_destroy(&v);
    return ok;
}

static shoal_crdt_t *old_counter;

static void update_after_pruning(int i, const shoal_crdt_t *old, uint64_t expect)
{
    op_t a = {shoal_system_self(cm[i].sys), old};
    shoal_consistency_t all = c_all(T);
    assert_int_equal(shoal_replicator_update_sync(cm[i].rep, "A", shoal_gcounter_new(), &all,
                                                  merge_old_and_incr, &a),
                     0);
    uint64_t v = 0;
    assert_int_equal(cm_gcounter(cm[i].rep, "A", c_local(), &v), 0);
    assert_int_equal(v, expect);
}

/* "move data from removed node" */
static void move_data_from_removed_node(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        cm_start(i, NULL);
        cm_join(i, 0);
    }
    cm_wait_up(7u, 15000);
    cm_wait_replicas(7u, 3, 10000);
    third = shoal_system_self(cm[2].sys);
    shoal_consistency_t all = c_all(T);
    for (int i = 0; i < 3; i++) {
        op_t a = {shoal_system_self(cm[i].sys), NULL};
        shoal_replicator_t *r = cm[i].rep;
        assert_int_equal(cm_incr(r, "A", 3, all), 0);
        assert_int_equal(cm_set_add(r, "B", SHOAL_ORSET, "a,b,c", all), 0);
        assert_int_equal(
            shoal_replicator_update_sync(r, "C", shoal_pncountermap_new(), &all, pnmap_xy, &a), 0);
        assert_int_equal(
            shoal_replicator_update_sync(r, "D", shoal_ormultimap_new(false), &all, multimap_a, &a),
            0);
        assert_int_equal(
            shoal_replicator_update_sync(r, "E", shoal_ormap_new(shoal_type_by_tag(SHOAL_GSET)),
                                         &all, ormap_a, &a),
            0);
    }
    /* every WriteAll of the three is everywhere once the last one has returned */
    for (int i = 0; i < 3; i++)
        assert_true(cm_wait_gcounter(cm[i].rep, "A", 9, 5000));
    old_counter = local(0, "A");
    assert_int_equal(shoal_gcounter_value(old_counter), 9);
    char s[64];
    assert_int_equal(cm_set_get(cm[0].rep, "B", c_local(), s, sizeof s), 0);
    assert_string_equal(s, "a,b,c");
    shoal_crdt_t *m = local(0, "C");
    int64_t x = 0, y = 0;
    assert_int_equal(shoal_pncountermap_get(m, "x", 1, &x), 0);
    assert_int_equal(shoal_pncountermap_get(m, "y", 1, &y), 0);
    assert_int_equal(x, 3);
    assert_int_equal(y, 3);
    shoal_crdt_destroy(&m);
    m = local(0, "D");
    assert_non_null(shoal_ormultimap_get(m, "a", 1));
    assert_true(shoal_orset_contains(shoal_ormultimap_get(m, "a", 1), "A", 1));
    shoal_crdt_destroy(&m);
    m = local(0, "E");
    assert_non_null(shoal_ormap_get(m, "a", 1));
    assert_true(shoal_gset_contains(shoal_ormap_get(m, "a", 1), "A", 1));
    shoal_crdt_destroy(&m);

    /* the third removes "a" from the ORMap locally, then leaves */
    op_t a2 = {third, NULL};
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_update_sync(cm[2].rep, "E",
                                                  shoal_ormap_new(shoal_type_by_tag(SHOAL_GSET)),
                                                  &l, ormap_remove_a, &a2),
                     0);
    assert_int_equal(shoal_cluster_leave(cm[0].cl, third), 0);
    cm_wait_replicas(3u, 2, 15000);
    assert_true(cm_wait_member(0, 2, 0, true, 15000));

    const char *keys[] = {"A", "B", "C", "D", "E"};
    for (int i = 0; i < 2; i++) {
        for (size_t k = 0; k < 5; k++) {
            pr_t p = {i, keys[k]};
            if (!wait_until(pruned, &p, 15000))
                fail_msg("node %d: key %s still needs pruning from the removed node", i, keys[k]);
        }
        assert_true(cm_wait_gcounter(cm[i].rep, "A", 9, 1000));
        assert_true(cm_wait_set(cm[i].rep, "B", "a,b,c", 1000));
        m = local(i, "C");
        assert_int_equal(shoal_pncountermap_get(m, "x", 1, &x), 0);
        assert_int_equal(shoal_pncountermap_get(m, "y", 1, &y), 0);
        assert_int_equal(x, 3);
        assert_int_equal(y, 3);
        shoal_crdt_destroy(&m);
        m = local(i, "D");
        assert_true(shoal_orset_contains(shoal_ormultimap_get(m, "a", 1), "A", 1));
        shoal_crdt_destroy(&m);
    }
    cm_stop(2);

    update_after_pruning(0, old_counter, 10);
    assert_true(cm_wait_gcounter(cm[1].rep, "A", 10, 5000));
    update_after_pruning(1, old_counter, 11);
    /* after the pruning markers' dissemination time (max_pruning_dissemination_ms, 1 s in
       tmember_data_settings) and some more, the old data still does not come back */
    struct timespec ts = {0, 0};
    int wait_ms = 1000 * tscale() + 1500;
    ts.tv_sec = wait_ms / 1000;
    ts.tv_nsec = (long)(wait_ms % 1000) * 1000000;
    nanosleep(&ts, NULL);
    update_after_pruning(0, old_counter, 12);
    assert_true(cm_wait_gcounter(cm[1].rep, "A", 12, 5000));
    update_after_pruning(1, old_counter, 13);
    shoal_crdt_destroy(&old_counter);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(move_data_from_removed_node),
    };
    return cmocka_run_group_tests_name("ReplicatorPruningSpec", tests, NULL, cm_teardown);
}
