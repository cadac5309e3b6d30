/*  test_durable_pruning_spec.c — conformance: Akka/Pekko's DurablePruningSpec, see
    docs/conformance.md. Four members keep every key in LMDB; each adds to one GCounter (3, 3, 2,
    2); the third leaves and is pruned (the counter keeps 10 over 3 contributors); then a node
    starts on the third's address and directory, so it loads the removed node's old contribution
    from disk: joining, it must not bring it back (10 over 3 contributors, locally and by ReadAll
    everywhere).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "durable.h"
#include "members.h"
#include "procs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char root[64];
static shoal_durable_t *dur[CM_MAX];
static const char *all_keys[] = {"*"};

static void start(int i, const char *endpoint)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/node%d", root, i);
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = dir;
    ds.nosync = true;
    int err = 0;
    dur[i] = shoal_durable_open(&ds, &err);
    if (!dur[i])
        fail_msg("node %d: %s", i, shoal_last_error_detail());
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    rs.durable_keys = all_keys;
    rs.n_durable_keys = 1;
    cm_opts_t o = {.rep = &rs, .store = shoal_durable_store(dur[i], ""), .endpoint = endpoint};
    cm_start(i, &o);
    cm_join(i, 0 == i ? 0 : 0);
}

static void stop(int i)
{
    cm_stop(i);
    shoal_durable_close(&dur[i]);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < CM_MAX; i++)
        stop(i);
    if (root[0])
        trm_tree(root);
    return 0;
}

static size_t contributors(const shoal_crdt_t *v)
{
    const shoal_node_t *nodes[16];
    return shoal_crdt_modified_by(v, nodes, 16);
}

typedef struct {
    int i;
    shoal_consistency_t c;
    uint64_t value;
    size_t n;
    int reads;
    uint64_t other_values; /* reads that saw a value other than `value` */
} read_t;

static bool value_and_size(void *arg)
{
    read_t *r = arg;
    shoal_crdt_t *v = NULL;
    if (shoal_replicator_get_sync(cm[r->i].rep, "A", NULL, &r->c, &v) != 0)
        return false;
    uint64_t value = shoal_gcounter_value(v);
    size_t n = contributors(v);
    shoal_crdt_destroy(&v);
    r->reads++;
    if (value != r->value)
        r->other_values++;
    return value == r->value && n == r->n;
}

static void expect(int i, shoal_consistency_t c, uint64_t value, size_t n)
{
    read_t r = {i, c, value, n, 0, 0};
    if (!wait_until(value_and_size, &r, 15000))
        fail_msg("node %d: A is not %llu over %zu contributors", i, (unsigned long long)value, n);
    /* as in the spec: no read ever saw another value on the way (pruning changes no value) */
    assert_int_equal(r.other_values, 0);
}

/* "move data from removed node" */
static void move_data_from_removed_node(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/shoal-conf-dprune-XXXXXX");
    assert_non_null(mkdtemp(root));
    char ep2[64];
    snprintf(ep2, sizeof ep2, "tcp://127.0.0.1:%d", tfree_port());
    for (int i = 0; i < 4; i++)
        start(i, i == 2 ? ep2 : NULL);
    cm_wait_up(0xf, 20000);
    cm_wait_replicas(0xf, 4, 10000);
    const uint64_t add[] = {3, 3, 2, 2};
    for (int i = 0; i < 4; i++)
        assert_int_equal(cm_incr(cm[i].rep, "A", add[i], c_local()), 0);
    for (int i = 0; i < 4; i++)
        expect(i, c_all(1000), 10, 4);
    const shoal_node_t *third = shoal_system_self(cm[2].sys);
    assert_int_equal(shoal_cluster_leave(cm[0].cl, third), 0);
    for (int i = 0; i < 4; i++)
        if (i != 2)
            assert_true(cm_wait_member(i, 2, 0, true, 15000));
    cm_wait_replicas(0xb, 3, 15000);
    stop(2);
    for (int i = 0; i < 4; i++)
        if (i != 2)
            expect(i, c_local(), 10, 3);

    /* a new incarnation on the removed node's address and directory: it loads the old part */
    start(2, ep2);
    assert_true(cm_wait_member(0, 2, SHOAL_MEMBER_UP, true, 15000));
    expect(2, c_local(), 10, 3);
    cm_wait_up(0xf, 15000);
    expect(2, c_all(3000), 10, 3);
    for (int i = 0; i < 4; i++)
        expect(i, c_all(3000), 10, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(move_data_from_removed_node),
    };
    return cmocka_run_group_tests_name("DurablePruningSpec", tests, NULL, teardown);
}
