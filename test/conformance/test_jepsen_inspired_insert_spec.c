/*  test_jepsen_inspired_insert_spec.c — conformance: Akka/Pekko's JepsenInspiredInsertSpec, see
    docs/conformance.md. Five members insert 200 numbers (node k the numbers n with n % 5 == k)
    into ORSets, all at once: locally, then with WriteMajority, then locally and with
    WriteMajority while a 3+2 partition ({1,4,5} | {2,3}, nodes 0,3,4 | 1,2 here) comes and goes.
    Every write on the majority side succeeds; afterwards every node has all 200, and on the
    minority side a ReadMajority after the partition already returns all of them.

    The spec's writes go out one after another, each waiting for its reply; here each node hands
    its 40 writes to its node thread at once and waits for the 40 completions (with the spec's
    delay of 0 between writes the two are the same race against the partition), which bounds
    the case by one write timeout instead of 40. The partition lasts 2 s (the spec's: 5 s).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define NODES 5
#define TOTAL 200
#define T     3000

typedef struct {
    int node;
    const char *key;
    shoal_consistency_t c;
    atomic_int ok, failed, done;
    char elems[TOTAL / NODES][12];
} batch_t;

static void write_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    batch_t *b = arg;
    if (status == 0)
        atomic_fetch_add(&b->ok, 1);
    else
        atomic_fetch_add(&b->failed, 1);
    atomic_fetch_add(&b->done, 1);
}

typedef struct {
    batch_t *b;
    int k;
} one_t;

static int add_one(shoal_crdt_t *v, void *arg)
{
    one_t *o = arg;
    const char *e = o->b->elems[o->k];
    return shoal_orset_add(v, shoal_system_self(cm[o->b->node].sys), e, strlen(e));
}

static int issue_all(shoal_system_t *sys, void *arg)
{
    (void)sys;
    batch_t *b = arg;
    static one_t ones[NODES][TOTAL / NODES];
    for (int k = 0; k < TOTAL / NODES; k++) {
        ones[b->node][k] = (one_t){b, k};
        int rc = shoal_replicator_update(cm[b->node].rep, b->key, shoal_orset_new(), &b->c, add_one,
                                         &ones[b->node][k], write_done, b);
        if (rc != 0) {
            atomic_fetch_add(&b->failed, 1);
            atomic_fetch_add(&b->done, 1);
        }
    }
    return 0;
}

static bool batches_done(void *arg)
{
    batch_t *b = arg;
    for (int i = 0; i < NODES; i++)
        if (atomic_load(&b[i].done) < TOTAL / NODES)
            return false;
    return true;
}

static batch_t batches[NODES];

/* Every node inserts its numbers into key with c; returns when all completed. */
static void insert_all(const char *key, shoal_consistency_t c)
{
    for (int i = 0; i < NODES; i++) {
        batch_t *b = &batches[i];
        memset(b, 0, sizeof *b);
        b->node = i;
        b->key = key;
        b->c = c;
        for (int k = 0; k < TOTAL / NODES; k++)
            snprintf(b->elems[k], sizeof b->elems[k], "%d", k * NODES + i);
    }
    for (int i = 0; i < NODES; i++)
        assert_int_equal(shoal_system_call(cm[i].sys, issue_all, &batches[i]), 0);
    assert_true(wait_until(batches_done, batches, 30000));
}

static bool has_all(int i, const char *key, shoal_consistency_t c)
{
    shoal_crdt_t *v = NULL;
    if (shoal_replicator_get_sync(cm[i].rep, key, NULL, &c, &v) != 0)
        return false;
    bool ok = shoal_orset_size(v) == TOTAL;
    for (int n = 0; n < TOTAL && ok; n++) {
        char e[12];
        snprintf(e, sizeof e, "%d", n);
        ok = shoal_orset_contains(v, e, strlen(e));
    }
    shoal_crdt_destroy(&v);
    return ok;
}

typedef struct {
    const char *key;
} all_t;

static bool everyone_has_all(void *arg)
{
    all_t *a = arg;
    for (int i = 0; i < NODES; i++)
        if (!has_all(i, a->key, c_local()))
            return false;
    return true;
}

static const int side_a[] = {0, 3, 4}, side_b[] = {1, 2};

static void partition(bool cut)
{
    for (int x = 0; x < 3; x++)
        for (int y = 0; y < 2; y++)
            cut ? cm_cut(side_a[x], side_b[y]) : cm_pass(side_a[x], side_b[y]);
}

/* The partition of the spec's controller: starts now, lasts 2 s, runs beside the inserts. */
static void *controller(void *arg)
{
    (void)arg;
    partition(true);
    struct timespec ts = {2, 0};
    nanosleep(&ts, NULL);
    partition(false);
    return NULL;
}

/* "setup cluster" */
static void setup_cluster(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++) {
        cm_start(i, NULL);
        cm_join(i, 0);
    }
    cm_wait_up(0x1f, 20000);
    cm_wait_replicas(0x1f, NODES, 10000);
}

/* "replicate values when all nodes connected" */
static void replicate_values_when_all_nodes_connected(void **state)
{
    (void)state;
    insert_all("A", c_local());
    for (int i = 0; i < NODES; i++) {
        assert_int_equal(atomic_load(&batches[i].ok), TOTAL / NODES);
        assert_int_equal(atomic_load(&batches[i].failed), 0);
    }
    all_t a = {"A"};
    assert_true(wait_until(everyone_has_all, &a, 15000));
}

/* "write/read to majority when all nodes connected" */
static void write_read_majority_when_all_connected(void **state)
{
    (void)state;
    insert_all("B", c_majority(T));
    for (int i = 0; i < NODES; i++) {
        assert_int_equal(atomic_load(&batches[i].ok), TOTAL / NODES);
        assert_int_equal(atomic_load(&batches[i].failed), 0);
    }
    /* every node has finished writing: a majority read anywhere sees every write */
    for (int i = 0; i < NODES; i++)
        assert_true(has_all(i, "B", c_majority(T)));
}

/* "replicate values after partition" */
static void replicate_values_after_partition(void **state)
{
    (void)state;
    pthread_t th;
    pthread_create(&th, NULL, controller, NULL);
    insert_all("C", c_local());
    pthread_join(th, NULL);
    for (int i = 0; i < NODES; i++) {
        assert_int_equal(atomic_load(&batches[i].ok), TOTAL / NODES);
        assert_int_equal(atomic_load(&batches[i].failed), 0);
    }
    all_t a = {"C"};
    assert_true(wait_until(everyone_has_all, &a, 15000));
}

/* "write to majority during 3+2 partition and read from majority after partition" */
static void majority_during_3_2_partition(void **state)
{
    (void)state;
    pthread_t th;
    pthread_create(&th, NULL, controller, NULL);
    insert_all("D", c_majority(T));
    pthread_join(th, NULL);
    for (int x = 0; x < 3; x++) {
        assert_int_equal(atomic_load(&batches[side_a[x]].ok), TOTAL / NODES);
        assert_int_equal(atomic_load(&batches[side_a[x]].failed), 0);
    }
    /* on the minority side, a majority read after the partition sees every write (theirs that
       timed out were still applied locally, and the majority side's reached a majority) */
    for (int y = 0; y < 2; y++) {
        bool ok = false;
        for (int64_t end = shoal_now_ms() + 15000 * tscale(); !ok && shoal_now_ms() < end;)
            ok = has_all(side_b[y], "D", c_majority(T));
        assert_true(ok);
    }
    all_t a = {"D"};
    assert_true(wait_until(everyone_has_all, &a, 15000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(setup_cluster),
        cmocka_unit_test(replicate_values_when_all_nodes_connected),
        cmocka_unit_test(write_read_majority_when_all_connected),
        cmocka_unit_test(replicate_values_after_partition),
        cmocka_unit_test(majority_during_3_2_partition),
    };
    return cmocka_run_group_tests_name("JepsenInspiredInsertSpec", tests, NULL, cm_teardown);
}
