/*  test_catch_up.c — catching up (CATCHING UP in ddata.h), both sides of it:
    - availability: a 3-node cluster formed by membership, resolver off, the youngest member cut
      off both ways as soon as it is Up; WriteMajority and ReadMajority on the two others must
      keep working (Akka's ReplicatorSpec "support majority quorum write and read with 3 nodes
      with 1 unreachable"; issue 31, part 2: on 672634c every read timed out);
    - safety: a write a majority acknowledged before a replica counted (the first seed Up alone;
      a member since restarted empty as a new incarnation) is never missed by a MAJORITY read
      through a replica that has not caught up.
    The safety cases drive the replicator's gate, peers and ages by hand (what membership feeds
    it), to place the cuts exactly where a wrong rule would answer "not found".
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- availability, with membership ---------------------------------------------------------- */

typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_replicator_t *data;
} mnode_t;

static mnode_t nodes[3];
static char eps[3][64];

static void stop_nodes(void)
{
    for (int i = 0; i < 3; i++) {
        shoal_cluster_destroy(&nodes[i].cl);
        shoal_replicator_destroy(&nodes[i].data);
        shoal_system_destroy(&nodes[i].sys);
    }
    memset(nodes, 0, sizeof nodes);
}

static int teardown(void **state)
{
    (void)state;
    stop_nodes();
    return tcluster_teardown(state);
}

static void start_member(int i, const shoal_cluster_settings_t *s)
{
    int rc = tmember_start_joined(eps[i], s, i ? eps[0] : NULL, &nodes[i].sys, &nodes[i].cl,
                                  &nodes[i].data);
    if (rc != 0)
        fail_msg("node %d cannot start at %s: %s", i, eps[i], shoal_strerror(rc));
}

/* Node i's view has `n` members, every one Up (reachable or not). */
static bool view_has_up(int i, int n)
{
    return tmember_all_up(nodes[i].cl, n);
}

static bool first_seed_up_alone(void *arg)
{
    (void)arg;
    return view_has_up(0, 1);
}

static bool two_see_three_up(void *arg)
{
    (void)arg;
    return view_has_up(0, 3) && view_has_up(1, 3);
}

static int cut_done; /* set on node 0's thread, read by the test thread */

/* THE INJECTION. On node 0 (the leader), the moment it moves node 2 to Up: node 2 is cut off
   both ways before any replica could have synced with it as a counted member. */
static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    (void)arg;
    if (ev->kind != SHOAL_EV_MEMBER_UP || ev->member->node != shoal_system_self(nodes[2].sys) ||
        __atomic_load_n(&cut_done, __ATOMIC_SEQ_CST))
        return;
    /* (no cmocka assertion off the test thread: a failure shows as cut_done = -1) */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    int rc = shoal_system_fault(nodes[0].sys, eps[2], &cut);
    rc = rc ? rc : shoal_system_fault(nodes[1].sys, eps[2], &cut);
    rc = rc ? rc : shoal_system_fault(nodes[2].sys, NULL, &cut);
    __atomic_store_n(&cut_done, rc == 0 ? 1 : -1, __ATOMIC_SEQ_CST);
}

static bool is_cut(void *arg)
{
    (void)arg;
    return __atomic_load_n(&cut_done, __ATOMIC_SEQ_CST) != 0;
}

static uint64_t up_number(int viewer, int i)
{
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(nodes[viewer].cl, &v), 0);
    const shoal_member_t *m = shoal_cluster_view_member(&v, shoal_system_self(nodes[i].sys));
    uint64_t up = m ? m->up_number : 0;
    shoal_cluster_view_free(&v);
    return up;
}

static int cmp_port(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* One run of the scenario. first_alone: the first seed is Up alone before the others join (no
   min-nr-of-members); else min-nr-of-members = 3, so the three are moved Up together. */
static void three_with_the_youngest_cut(bool first_alone, int run)
{
    /* ascending ports (5 digits each): the address order, which orders the up-numbers of
       members moved Up together, is 0, 1, 2, so node 2 is the youngest either way */
    int ports[3];
    for (int i = 0; i < 3; i++)
        ports[i] = tfree_port();
    qsort(ports, 3, sizeof ports[0], cmp_port);
    for (int i = 0; i < 3; i++)
        snprintf(eps[i], sizeof eps[i], "tcp://127.0.0.1:%d", ports[i]);
    shoal_cluster_settings_t s;
    tmember_settings(&s);
    s.sbr_strategy = SHOAL_SBR_OFF; /* the cut node stays a member for as long as it lasts */
    if (!first_alone)
        s.min_nr_of_members = 3;
    __atomic_store_n(&cut_done, 0, __ATOMIC_SEQ_CST);
    start_member(0, &s);
    if (first_alone)
        assert_true(wait_until(first_seed_up_alone, NULL, 15000));
    assert_true(shoal_cluster_subscribe_sync(nodes[0].cl, on_event, NULL) > 0);
    start_member(1, &s);
    start_member(2, &s);
    assert_true(wait_until(is_cut, NULL, 20000));
    assert_int_equal(__atomic_load_n(&cut_done, __ATOMIC_SEQ_CST), 1);
    assert_true(wait_until(two_see_three_up, NULL, 15000));
    uint64_t u0 = up_number(0, 0), u1 = up_number(0, 1), u2 = up_number(0, 2);
    print_message("run %d (%s): up-numbers %llu %llu %llu, node 2 cut\n", run,
                  first_alone ? "first seed Up alone" : "min-nr-of-members 3",
                  (unsigned long long)u0, (unsigned long long)u1, (unsigned long long)u2);
    assert_true(u2 > u1 && u2 > u0); /* the scenario: the youngest is the one cut */

    tcluster_t c = {.n = 2};
    for (int i = 0; i < 2; i++) {
        c.sys[i] = nodes[i].sys;
        c.rep[i] = nodes[i].data;
    }
    shoal_consistency_t maj = c_majority(3000);
    char key[32];
    snprintf(key, sizeof key, "counter-%d", run);
    for (int k = 0; k < 10; k++) {
        int w = k % 2, r = 1 - w;
        int rc = t_incr(&c, w, key, 1, &maj);
        if (rc != 0)
            fail_msg("run %d round %d: WriteMajority on node %d: %s", run, k, w,
                     shoal_strerror(rc));
        uint64_t v = 0;
        rc = t_gcounter(&c, r, key, &maj, &v);
        if (rc != 0)
            fail_msg("run %d round %d: ReadMajority on node %d: %s", run, k, r, shoal_strerror(rc));
        assert_int_equal(v, (uint64_t)k + 1);
    }
    stop_nodes();
}

/* Issue 31, part 2. The cut is injected the moment the leader moves node 2 to Up (earlier than
   the 300 ms, so that no run gets to sync with it by luck): two runs with the three moved
   Up together, one with the first seed Up alone first. */
static void test_majority_with_the_youngest_of_three_cut(void **state)
{
    (void)state;
    three_with_the_youngest_cut(false, 1);
    three_with_the_youngest_cut(false, 2);
    three_with_the_youngest_cut(true, 3);
}

/* --- safety, the replicator driven by hand ------------------------------------------------- */

typedef struct {
    tcluster_t *c;
    int lo, hi; /* nodes lo..hi-1 become peers of the node called */
    bool counted;
} peers_arg_t;

/* Nodes lo..hi-1 are peers (counted or not) of the node it runs on, aged by their index, as
   membership would feed them (up-numbers in the order they became Up). */
static int set_peers(shoal_replicator_t *r, void *arg)
{
    peers_arg_t *a = arg;
    for (int j = a->lo; j < a->hi; j++)
        if (a->c->sys[j]) /* refused on the node itself, which is no peer of its own */
            (void)shoal_replicator_add_peer(r, shoal_system_self(a->c->sys[j]), a->counted,
                                            (uint64_t)j + 1);
    return 0;
}

static int open_gate(shoal_replicator_t *r, void *arg)
{
    (void)arg;
    return shoal_replicator_set_quorum_gate(r, true, "test: a full member");
}

static void cut_pair(tcluster_t *c, int a, int b, bool cut)
{
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = cut};
    assert_int_equal(shoal_system_fault(c->sys[a], shoal_system_endpoint(c->sys[b]), &f), 0);
    assert_int_equal(shoal_system_fault(c->sys[b], shoal_system_endpoint(c->sys[a]), &f), 0);
}

/* A MAJORITY read of "saved" on node i, twice (catching up takes a round trip among the
   reachable nodes: a wrong rule lets them agree on "nothing" well within the first read's
   timeout): never "not found" nor a value without the write of 7. */
static void never_misses(tcluster_t *c, int i, const char *what)
{
    shoal_consistency_t maj = c_majority(400);
    for (int k = 0; k < 2; k++) {
        uint64_t v = 0;
        int rc = t_gcounter(c, i, "saved", &maj, &v);
        if (rc == SHOAL_ENOTFOUND || (rc == 0 && v != 7))
            fail_msg("%s: node %d's ReadMajority missed the acknowledged write (%s, value %llu)",
                     what, i, shoal_strerror(rc), (unsigned long long)v);
        assert_true(rc == SHOAL_ETIMEOUT || rc == 0);
    }
}

static void reads_it(tcluster_t *c, int i)
{
    shoal_consistency_t maj = c_majority(1000);
    int64_t deadline = shoal_now_ms() + 10000 * tscale();
    uint64_t v = 0;
    int rc;
    do
        rc = t_gcounter(c, i, "saved", &maj, &v);
    while (rc != 0 && shoal_now_ms() < deadline);
    if (rc != 0)
        fail_msg("node %d never read the write once healed: %s", i, shoal_strerror(rc));
    assert_int_equal(v, 7);
}

/* The first seed is Up alone for a while and acknowledges a WriteMajority by itself (a majority
   of one); then four members join together, and the first seed is cut off from them before any
   could sync with it. Each newcomer can reach the three others: a rule that lets them count
   once they synced with enough of each other (n - (n/2 + 1) + 1 = 3 of 5 on 672634c) answers
   "not found". Only the first seed held the write: none of them may count before it synced with
   it. */
static void test_first_seed_alone_then_four_join(void **state)
{
    (void)state;
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 5, NULL);
    peers_arg_t none = {&c, 0, 5, false};
    for (int i = 0; i < 5; i++)
        assert_int_equal(on_node(&c, i, set_peers, &none), 0);
    for (int j = 1; j < 5; j++) /* first: no delta nor gossip may carry the write to them */
        cut_pair(&c, 0, j, true);
    shoal_consistency_t maj = c_majority(1000);
    assert_int_equal(t_incr(&c, 0, "saved", 7, &maj), 0); /* node 0 alone: a majority of one */
    peers_arg_t all = {&c, 0, 5, true};
    for (int i = 0; i < 5; i++)
        assert_int_equal(on_node(&c, i, set_peers, &all), 0);
    for (int i = 1; i < 5; i++)
        assert_int_equal(on_node(&c, i, open_gate, NULL), 0);
    never_misses(&c, 1, "the first seed alone then four joined"); /* the oldest newcomer */
    never_misses(&c, 4, "the first seed alone then four joined"); /* the youngest */
    for (int j = 1; j < 5; j++)
        cut_pair(&c, 0, j, false);
    for (int i = 1; i < 5; i++)
        reads_it(&c, i);
    tcluster_stop(&c);
}

/* A member acknowledged a write in an earlier incarnation: nodes 0, 1, 2 counted, node 0 cut off
   from the others all along, so the write of node 1 is acknowledged by nodes 1 and 2; node 2 then
   restarts empty as a new incarnation (node 3, a new uid; node 2 removed) and can reach node 0
   only. Neither node 3 nor node 0 may answer a majority read without the write. Node 3's older
   members are nodes 0 and 1; a majority of each prefix of them without a slot for a member gone
   ({0}: 1, {0, 1}: 1) would let it count once synced with node 0, and read "not found" from
   itself and node 0. Its earlier life may have been in a majority with node 1 that node 0 missed:
   it needs both ({0, 1}: 2). And node 0 must not count node 3's answer meanwhile. */
static void test_earlier_incarnation_acknowledged(void **state)
{
    (void)state;
    static tcluster_t c;
    tcluster_start(&c, 3, NULL);
    peers_arg_t all3 = {&c, 0, 3, true};
    for (int i = 0; i < 3; i++)
        assert_int_equal(on_node(&c, i, set_peers, &all3), 0);
    cut_pair(&c, 0, 1, true);
    cut_pair(&c, 0, 2, true);
    shoal_consistency_t maj = c_majority(1000);
    assert_int_equal(t_incr(&c, 1, "saved", 7, &maj), 0); /* acknowledged by nodes 1 and 2 */
    tcluster_kill(&c, 2, true);
    tcluster_add(&c); /* node 3: node 2 restarted empty */
    cut_pair(&c, 1, 3, true);
    peers_arg_t all4 = {&c, 0, 4, true};
    for (int i = 0; i < 4; i++)
        if (c.sys[i])
            assert_int_equal(on_node(&c, i, set_peers, &all4), 0);
    assert_int_equal(on_node(&c, 3, open_gate, NULL), 0);
    never_misses(&c, 3, "the restarted member");
    never_misses(&c, 0, "the member beside the restarted one");
    cut_pair(&c, 1, 3, false);
    reads_it(&c, 3);
    tcluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_majority_with_the_youngest_of_three_cut, teardown),
        cmocka_unit_test_teardown(test_first_seed_alone_then_four_join, teardown),
        cmocka_unit_test_teardown(test_earlier_incarnation_acknowledged, teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
