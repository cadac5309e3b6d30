/*  test_cluster.c — membership end to end, with real nodes over loopback in this process:
    joining through seeds, convergence, graceful leave, downing, partitions and the split-brain
    resolver (from the transport's fault injection, which reaches the heartbeat sockets too),
    min-nr-of-members, role replicators, a busy node loop, a wedged one, a paused node, singletons.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "members.h"
#include "cluster_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXN 8

typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_replicator_t *data;
    shoal_replicator_t *role_rep;
} mnode_t;

static mnode_t nodes[MAXN];
static shoal_singleton_t *singletons[MAXN];

static void settings(shoal_cluster_settings_t *s)
{
    tmember_settings(s);
}

static shoal_system_t *new_system(void)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    assert_non_null(sys);
    return sys;
}

/* Starts node i: joins through node 0 (node 0 forms the cluster). */
static void start_node(int i, const shoal_cluster_settings_t *s_in, const char *role)
{
    shoal_cluster_settings_t s;
    if (s_in)
        s = *s_in;
    else
        settings(&s);
    const char *roles[1] = {role};
    if (role) {
        s.roles = roles;
        s.n_roles = 1;
    }
    nodes[i].sys = new_system();
    int err = 0;
    nodes[i].cl = shoal_cluster_new(nodes[i].sys, &s, &err);
    assert_non_null(nodes[i].cl);
    shoal_replicator_settings_t rs;
    tcluster_fast_settings(&rs);
    nodes[i].data = shoal_replicator_new(nodes[i].sys, &rs, &err);
    assert_non_null(nodes[i].data);
    assert_int_equal(shoal_cluster_follow(nodes[i].cl, nodes[i].data), 0);
    if (i == 0) {
        assert_int_equal(shoal_cluster_join(nodes[i].cl, NULL, 0), 0);
    } else {
        const char *seed = shoal_system_endpoint(nodes[0].sys);
        assert_int_equal(shoal_cluster_join(nodes[i].cl, &seed, 1), 0);
    }
}

static void stop_node(int i)
{
    if (!nodes[i].sys)
        return;
    shoal_cluster_destroy(&nodes[i].cl);
    shoal_replicator_destroy(&nodes[i].role_rep);
    shoal_replicator_destroy(&nodes[i].data);
    shoal_system_destroy(&nodes[i].sys);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < MAXN; i++)
        shoal_singleton_destroy(&singletons[i]);
    for (int i = 0; i < MAXN; i++)
        stop_node(i);
    memset(nodes, 0, sizeof nodes);
    return 0;
}

/* --- conditions -------------------------------------------------------------------------------- */
typedef struct {
    int n;       /* nodes 0..n-1 that must agree (skipping `skip`) */
    int skip;
    int members; /* members expected Up */
    const shoal_node_t *subject;
    shoal_member_status_t status; /* of subject (0 = gone from the view) */
    bool reachable;
} cond_t;

/* True when the view of every node 0..n-1 (but `skip`) satisfies `ok`. */
static bool every_view(const cond_t *c, bool (*ok)(const cond_t *c, const shoal_cluster_view_t *v))
{
    for (int i = 0; i < c->n; i++) {
        if (i == c->skip || !nodes[i].cl)
            continue;
        shoal_cluster_view_t v;
        if (shoal_cluster_view(nodes[i].cl, &v) != 0)
            return false;
        bool good = ok(c, &v);
        shoal_cluster_view_free(&v);
        if (!good)
            return false;
    }
    return true;
}

/* `members` members, all Up and reachable, converged */
static bool view_all_up(const cond_t *c, const shoal_cluster_view_t *v)
{
    size_t up = 0;
    for (size_t k = 0; k < v->n_members; k++)
        if (v->members[k].status == SHOAL_MEMBER_UP && v->members[k].reachable)
            up++;
    return (int)up == c->members && v->n_members == (size_t)c->members && v->converged;
}

/* the subject has `status` (0: it is gone) */
static bool view_subject_status(const cond_t *c, const shoal_cluster_view_t *v)
{
    const shoal_member_t *m = shoal_cluster_view_member(v, c->subject);
    return c->status ? (m && m->status == c->status) : m == NULL;
}

/* the subject is (un)reachable as `reachable` says */
static bool view_subject_reachability(const cond_t *c, const shoal_cluster_view_t *v)
{
    const shoal_member_t *m = shoal_cluster_view_member(v, c->subject);
    return m && m->reachable == c->reachable;
}

static bool all_up(void *arg)
{
    return every_view(arg, view_all_up);
}

static bool subject_status(void *arg)
{
    return every_view(arg, view_subject_status);
}

static bool subject_reachability(void *arg)
{
    return every_view(arg, view_subject_reachability);
}

static bool is_terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

static void wait_all_up(int n, int timeout_ms)
{
    cond_t c = {.n = n, .skip = -1, .members = n};
    if (!wait_until(all_up, &c, timeout_ms)) {
        for (int i = 0; i < n; i++) {
            shoal_cluster_view_t v;
            shoal_cluster_view(nodes[i].cl, &v);
            shoal_buf_t b = {0};
            shoal_cluster_view_json(&v, &b);
            fprintf(stderr, "node %d: %s\n", i, shoal_buf_cstr(&b));
            shoal_buf_free(&b);
            shoal_cluster_view_free(&v);
        }
        fail_msg("the cluster of %d did not converge with everyone Up", n);
    }
}

static void start_cluster(int n)
{
    for (int i = 0; i < n; i++)
        start_node(i, NULL, NULL);
    wait_all_up(n, 15000);
}

static void cut_between(int a, int b)
{
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(nodes[a].sys, shoal_system_endpoint(nodes[b].sys), &f), 0);
    assert_int_equal(shoal_system_fault(nodes[b].sys, shoal_system_endpoint(nodes[a].sys), &f), 0);
}

/* --- tests -------------------------------------------------------------------------------------- */

static bool heartbeats_flow(void *arg)
{
    shoal_cluster_stats_t st;
    return shoal_cluster_stats(arg, &st) == 0 && st.heartbeats_sent > 0 &&
           st.heartbeats_received > 0;
}

/* Five nodes join through the seed and converge; everyone agrees on the leader; a data
   replicator follows the Up members (counted); the seen marks travel as digest-only statuses. */
static void test_five_join_and_converge(void **state)
{
    (void)state;
    start_cluster(5);
    shoal_cluster_view_t v0;
    assert_int_equal(shoal_cluster_view(nodes[0].cl, &v0), 0);
    for (int i = 1; i < 5; i++) {
        shoal_cluster_view_t v;
        assert_int_equal(shoal_cluster_view(nodes[i].cl, &v), 0);
        assert_ptr_equal(v.leader, v0.leader);
        /* up-numbers are unique and every member has one */
        for (size_t k = 0; k < v.n_members; k++) {
            assert_true(v.members[k].up_number > 0);
            for (size_t j = k + 1; j < v.n_members; j++)
                assert_true(v.members[k].up_number != v.members[j].up_number);
        }
        shoal_cluster_view_free(&v);
    }
    /* the leader is the lowest address */
    const shoal_node_t *lowest = v0.members[0].node;
    for (size_t k = 1; k < v0.n_members; k++)
        if (shoal_node_cmp(v0.members[k].node, lowest) < 0)
            lowest = v0.members[k].node;
    assert_ptr_equal(v0.leader, lowest);
    shoal_cluster_view_free(&v0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(shoal_replicator_replica_count_sync(nodes[i].data), 5);
    /* data written with WriteMajority on one node is read with ReadMajority on another */
    assert_int_equal(shoal_replicator_update_sync(
                         nodes[1].data, "k", shoal_gcounter_new(),
                         &(shoal_consistency_t){.level = SHOAL_MAJORITY, .timeout_ms = 3000}, NULL,
                         NULL),
                     0);
    /* the heartbeat ring runs (convergence can come before the first heartbeat round) */
    assert_true(wait_until(heartbeats_flow, nodes[0].cl, 5000));
    /* the seen marks travelled as digest-only statuses (clock digest and seen bits), every one
       of them well formed */
    uint64_t sent = 0, received = 0;
    for (int i = 0; i < 5; i++) {
        shoal_cluster_stats_t st;
        assert_int_equal(shoal_cluster_stats(nodes[i].cl, &st), 0);
        sent += st.seen_status_sent;
        received += st.seen_status_received;
        assert_int_equal(st.seen_status_malformed, 0);
    }
    assert_true(sent > 0);
    assert_true(received > 0);
    /* the members whose marks convergence waits for told the leader when they saw a new clock,
       and the leader announced the converged clock to every other member (an earlier leader, a
       member with a higher address that led before the lowest one was Up, may have too) */
    uint64_t reports = 0, moves = 0;
    for (int i = 0; i < 5; i++) {
        shoal_cluster_stats_t st;
        assert_int_equal(shoal_cluster_stats(nodes[i].cl, &st), 0);
        if (shoal_system_self(nodes[i].sys) == lowest)
            assert_true(st.convergence_announced >= 4);
        reports += st.seen_reports_sent;
        moves += st.moves_pushed_to_all; /* the leaders' Joining -> Up moves, each to everyone */
    }
    assert_true(reports > 0);
    assert_true(moves > 0);
}

/* Leave: Leaving -> Exiting -> Removed everywhere, and the leaver's cluster part shuts down. */
static void test_graceful_leave(void **state)
{
    (void)state;
    start_cluster(4);
    const shoal_node_t *leaver = shoal_system_self(nodes[3].sys);
    assert_int_equal(shoal_cluster_leave(nodes[0].cl, leaver), 0);
    cond_t c = {.n = 3, .skip = -1, .subject = leaver, .status = 0};
    assert_true(wait_until(subject_status, &c, 15000));
    assert_true(wait_until(is_terminated, nodes[3].cl, 15000));
    for (int i = 0; i < 3; i++)
        assert_int_equal(shoal_replicator_replica_count_sync(nodes[i].data), 3);
    cond_t up = {.n = 3, .skip = -1, .members = 3};
    assert_true(wait_until(all_up, &up, 10000));
}

/* A node stopped without leaving (its process gone) becomes unreachable, is downed by
   keep-majority after stable-after, and removed; the rest keeps working. */
static void test_crash_downed_by_keep_majority(void **state)
{
    (void)state;
    start_cluster(4);
    const shoal_node_t *victim = shoal_system_self(nodes[2].sys);
    stop_node(2);
    cond_t c = {.n = 4, .skip = 2, .subject = victim, .reachable = false};
    assert_true(wait_until(subject_reachability, &c, 10000));
    c.status = 0;
    assert_true(wait_until(subject_status, &c, 30000));
    cond_t up = {.n = 4, .skip = 2, .members = 3};
    assert_true(wait_until(all_up, &up, 10000));
    for (int i = 0; i < 4; i++)
        if (i != 2)
            assert_int_equal(shoal_replicator_replica_count_sync(nodes[i].data), 3);
}

/* A 2|3 partition: the minority side is downed (by the majority's leader, and it downs itself),
   the majority keeps working. */
static void test_partition_minority_downed(void **state)
{
    (void)state;
    start_cluster(5);
    const shoal_node_t *ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = shoal_system_self(nodes[i].sys);
    for (int a = 0; a < 3; a++)
        for (int b = 3; b < 5; b++)
            cut_between(a, b);
    /* the majority removes 3 and 4 */
    cond_t c3 = {.n = 3, .skip = -1, .subject = ids[3], .status = 0};
    cond_t c4 = {.n = 3, .skip = -1, .subject = ids[4], .status = 0};
    assert_true(wait_until(subject_status, &c3, 40000));
    assert_true(wait_until(subject_status, &c4, 40000));
    cond_t up = {.n = 3, .skip = -1, .members = 3};
    assert_true(wait_until(all_up, &up, 10000));
    /* the minority stopped itself */
    assert_true(wait_until(is_terminated, nodes[3].cl, 20000));
    assert_true(wait_until(is_terminated, nodes[4].cl, 20000));
    /* and the majority never lost a member of its own */
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(nodes[0].cl, &v), 0);
    for (int i = 0; i < 3; i++) {
        const shoal_member_t *m = shoal_cluster_view_member(&v, ids[i]);
        assert_non_null(m);
        assert_int_equal(m->status, SHOAL_MEMBER_UP);
    }
    shoal_cluster_view_free(&v);
}

/* The surviving side of a partition: every node in `stay` sees exactly the members of `stay`,
   all Up. */
typedef struct {
    int n;
    unsigned stay;
} side_t;

static bool side_alone(void *arg)
{
    side_t *sd = arg;
    int n_stay = __builtin_popcount(sd->stay);
    for (int i = 0; i < sd->n; i++) {
        if (!((sd->stay >> i) & 1))
            continue;
        shoal_cluster_view_t v;
        if (shoal_cluster_view(nodes[i].cl, &v) != 0)
            return false;
        bool ok = (int)v.n_members == n_stay;
        for (size_t k = 0; ok && k < v.n_members; k++) {
            ok = v.members[k].status == SHOAL_MEMBER_UP;
            bool in = false;
            for (int j = 0; j < sd->n; j++)
                in = in || (((sd->stay >> j) & 1) && shoal_system_self(nodes[j].sys) ==
                                                         v.members[k].node);
            ok = ok && in;
        }
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

/* Splits nodes 0..n-1 into `side` (a bit mask) and the rest; the side that should stay (keep:
   `side`, else the rest) ends alone and Up, the other side stops itself. */
static void partition_and_check(int n, unsigned side, bool keep)
{
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (((side >> a) & 1) != ((side >> b) & 1))
                cut_between(a, b);
    side_t sd = {n, keep ? side : ~side & ((1u << n) - 1)};
    assert_true(wait_until(side_alone, &sd, 40000));
    for (int i = 0; i < n; i++) {
        if ((sd.stay >> i) & 1)
            assert_false(shoal_cluster_terminated(nodes[i].cl));
        else
            assert_true(wait_until(is_terminated, nodes[i].cl, 20000));
    }
}

static int oldest_index(int n)
{
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(nodes[0].cl, &v), 0);
    int idx = -1;
    for (size_t k = 0; k < v.n_members; k++)
        if (v.members[k].up_number == 1)
            for (int i = 0; i < n; i++)
                if (shoal_system_self(nodes[i].sys) == v.members[k].node)
                    idx = i;
    shoal_cluster_view_free(&v);
    assert_true(idx >= 0);
    return idx;
}

/* keep-oldest: the side holding the oldest member stays, even when it is the smaller one. */
static void test_partition_keep_oldest(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.sbr_strategy = SHOAL_SBR_KEEP_OLDEST;
    for (int i = 0; i < 5; i++)
        start_node(i, &s, NULL);
    wait_all_up(5, 15000);
    int oldest = oldest_index(5);
    int buddy = (oldest + 1) % 5;
    partition_and_check(5, (1u << oldest) | (1u << buddy), true);
}

/* static-quorum of 3 in 5: the side of 3 stays, the side of 2 goes. */
static void test_partition_static_quorum(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.sbr_strategy = SHOAL_SBR_STATIC_QUORUM;
    s.static_quorum_size = 3;
    for (int i = 0; i < 5; i++)
        start_node(i, &s, NULL);
    wait_all_up(5, 15000);
    partition_and_check(5, 0x3 /* nodes 0, 1 */, false);
}

/* min-nr-of-members: Joining members stay Joining until three exist. */
static void test_min_nr_of_members(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.min_nr_of_members = 3;
    s.allow_weakly_up_members = false;
    start_node(0, &s, NULL);
    start_node(1, &s, NULL);
    /* two members: both Joining, for a while */
    const shoal_node_t *n1 = shoal_system_self(nodes[1].sys);
    cond_t c = {.n = 2, .skip = -1, .subject = n1, .status = SHOAL_MEMBER_JOINING};
    assert_true(wait_until(subject_status, &c, 10000));
    struct timespec ts = {1, 0}; /* a second of leader rounds must not move them */
    nanosleep(&ts, NULL);
    assert_true(subject_status(&c));
    assert_int_equal(shoal_cluster_self_status(nodes[0].cl), SHOAL_MEMBER_JOINING);
    start_node(2, &s, NULL);
    wait_all_up(3, 15000);
}

/* The quorum gate: MAJORITY and ALL, reads and writes, are refused with SHOAL_ENOQUORUM while the
   node is in no cluster or only Joining (a majority of the peers it knows is not a majority of a
   cluster), and leave the local replica untouched; LOCAL runs. Once Up, they run. */
static int gated_write(int i, const char *key, shoal_level_t level)
{
    shoal_consistency_t c = {.level = level, .timeout_ms = 2000, .n = 1};
    int rc = shoal_replicator_update_sync(nodes[i].data, key, shoal_gcounter_new(), &c, NULL, NULL);
    return rc;
}

static int gated_read(int i, const char *key, shoal_level_t level)
{
    shoal_crdt_t *v = NULL;
    shoal_consistency_t c = {.level = level, .timeout_ms = 2000, .n = 1};
    int rc = shoal_replicator_get_sync(nodes[i].data, key, NULL, &c, &v);
    shoal_crdt_destroy(&v);
    return rc;
}

/* A refusal completes on a later loop turn, never inside the call: the sharding coordinator
   retries its writes from their completion, and a refusal inside the call recursed until the
   stack overflowed (the chaos suite's lone restart of the first seed). */
typedef struct {
    shoal_replicator_t *r;
    bool in_call;
    int done_inside, done_calls, retries_left;
    int last_status;
} refusal_probe_t;

static void refusal_done(shoal_replicator_t *r, int status, const char *key, void *arg);

static int refusal_issue(shoal_system_t *sys, void *arg)
{
    (void)sys;
    refusal_probe_t *p = arg;
    shoal_consistency_t c = {.level = SHOAL_MAJORITY, .timeout_ms = 1000};
    p->in_call = true;
    int rc =
        shoal_replicator_update(p->r, "rk", shoal_gcounter_new(), &c, NULL, NULL, refusal_done, p);
    p->in_call = false;
    return rc;
}

static void refusal_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    refusal_probe_t *p = arg;
    p->done_calls++;
    p->done_inside += p->in_call;
    p->last_status = status;
    if (p->retries_left-- > 0)
        refusal_issue(NULL, p); /* retry at once, from the completion, as the coordinator did */
}

static int refusal_read(shoal_system_t *sys, void *arg)
{
    (void)sys;
    refusal_probe_t *p = arg;
    return p->retries_left < 0 ? 1 : 0;
}

static void test_quorum_gate(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.min_nr_of_members = 2;
    s.allow_weakly_up_members = false;
    /* node 0 in no cluster: its only seed is a port where nothing listens */
    nodes[0].sys = new_system();
    int err = 0;
    nodes[0].cl = shoal_cluster_new(nodes[0].sys, &s, &err);
    assert_non_null(nodes[0].cl);
    shoal_replicator_settings_t rs;
    tcluster_fast_settings(&rs);
    nodes[0].data = shoal_replicator_new(nodes[0].sys, &rs, &err);
    assert_non_null(nodes[0].data);
    assert_int_equal(shoal_cluster_follow(nodes[0].cl, nodes[0].data), 0);
    char dead[64];
    snprintf(dead, sizeof dead, "tcp://127.0.0.1:%d", tfree_port());
    const char *seed = dead;
    assert_int_equal(shoal_cluster_join(nodes[0].cl, &seed, 1), 0);
    assert_int_equal(gated_write(0, "gw", SHOAL_MAJORITY), SHOAL_ENOQUORUM);
    assert_int_equal(gated_write(0, "gw", SHOAL_ALL), SHOAL_ENOQUORUM);
    assert_int_equal(gated_read(0, "gw", SHOAL_LOCAL), SHOAL_ENOTFOUND); /* nothing applied */
    assert_int_equal(gated_read(0, "gw", SHOAL_MAJORITY), SHOAL_ENOQUORUM);
    assert_int_equal(gated_read(0, "gw", SHOAL_ALL), SHOAL_ENOQUORUM);
    assert_int_equal(gated_write(0, "gl", SHOAL_LOCAL), 0);
    assert_int_equal(gated_write(0, "gl", SHOAL_FROM_N), 0);
    assert_int_equal(gated_read(0, "gl", SHOAL_LOCAL), 0);
    shoal_replicator_stats_t st;
    assert_int_equal(shoal_replicator_stats(nodes[0].data, &st), 0);
    assert_int_equal(st.no_quorum, 4);
    refusal_probe_t probe = {.r = nodes[0].data, .retries_left = 50};
    assert_int_equal(shoal_system_call(nodes[0].sys, refusal_issue, &probe), 0);
    int64_t end = shoal_now_ms() + 5000;
    while (shoal_system_call(nodes[0].sys, refusal_read, &probe) == 0 && shoal_now_ms() < end)
        ;
    assert_int_equal(probe.done_calls, 51);
    assert_int_equal(probe.done_inside, 0);
    assert_int_equal(probe.last_status, SHOAL_ENOQUORUM);
    stop_node(0);
    memset(nodes, 0, sizeof nodes);

    /* min-nr-of-members 2: node 0 forms the cluster but stays Joining alone: still refused */
    start_node(0, &s, NULL);
    const shoal_node_t *n0 = shoal_system_self(nodes[0].sys);
    cond_t c = {.n = 1, .skip = -1, .subject = n0, .status = SHOAL_MEMBER_JOINING};
    assert_true(wait_until(subject_status, &c, 10000));
    assert_int_equal(gated_write(0, "gw", SHOAL_MAJORITY), SHOAL_ENOQUORUM);
    assert_int_equal(gated_read(0, "gw", SHOAL_ALL), SHOAL_ENOQUORUM);
    /* a second member: both Up, and majority runs */
    start_node(1, &s, NULL);
    wait_all_up(2, 15000);
    assert_int_equal(gated_write(0, "gw", SHOAL_MAJORITY), 0);
    assert_int_equal(gated_read(1, "gw", SHOAL_MAJORITY), 0);
    assert_int_equal(gated_write(1, "gw", SHOAL_ALL), 0);
}

/* Node i bound at `endpoint`, joining through `seeds` (the same list for every node). */
static void start_with_seeds(int i, const char *endpoint, const char *const *seeds, size_t n,
                             const shoal_cluster_settings_t *s_in)
{
    shoal_cluster_settings_t s = *s_in;
    s.seed_nodes = seeds;
    s.n_seed_nodes = n;
    int rc = tmember_start(endpoint, &s, &nodes[i].sys, &nodes[i].cl, &nodes[i].data);
    if (rc != 0)
        fail_msg("node %d cannot start at %s: %s", i, endpoint, shoal_strerror(rc));
}

/* A cold start of three nodes with the same seed list forms one cluster without waiting out
   seed-node-timeout (20 s here): the other seeds answer that they are in no cluster (InitJoinNack)
   and the first seed forms it at once. Then the first seed is stopped and restarted on the same
   address with the same list: it joins the running cluster instead of forming one of its own. */
static void test_seeds_cold_start_and_first_seed_restart(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.seed_node_timeout_ms = 20000;
    char eps[3][64];
    const char *seeds[3];
    for (int i = 0; i < 3; i++) {
        snprintf(eps[i], sizeof eps[i], "tcp://127.0.0.1:%d", tfree_port());
        seeds[i] = eps[i];
    }
    int64_t t0 = shoal_now_ms();
    for (int i = 0; i < 3; i++)
        start_with_seeds(i, eps[i], seeds, 3, &s);
    wait_all_up(3, 8000);
    int64_t formed_ms = shoal_now_ms() - t0;
    print_message("cold start of 3 with the same seed list: all Up in %lld ms\n",
                  (long long)formed_ms);
    assert_true(formed_ms < 8000); /* well below the 20 s seed-node-timeout */
    /* the first seed restarts on its address: it asks the others, which answer that they are in
       a cluster, and joins it (before the fix it formed a cluster of one beside the two) */
    stop_node(0);
    memset(&nodes[0], 0, sizeof nodes[0]);
    start_with_seeds(0, eps[0], seeds, 3, &s);
    wait_all_up(3, 15000);
    assert_int_equal(shoal_replicator_replica_count_sync(nodes[0].data), 3);
}

/* A node whose seeds never answer is in no cluster, and its view says so and since when. */
/* Node 0 alone at a fresh address (written to self), its one seed an address nobody answers:
   a node in no cluster, joining for ever. */
static void start_outside(char *self, size_t cap)
{
    shoal_cluster_settings_t s;
    settings(&s);
    char dead[64];
    snprintf(self, cap, "tcp://127.0.0.1:%d", tfree_port());
    snprintf(dead, sizeof dead, "tcp://127.0.0.1:%d", tfree_port());
    const char *seeds[1] = {dead};
    start_with_seeds(0, self, seeds, 1, &s);
}

static void test_no_cluster_view(void **state)
{
    (void)state;
    char self[64];
    start_outside(self, sizeof self);
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(nodes[0].cl, &v), 0);
    assert_int_equal(v.n_members, 0);
    assert_true(v.joining);
    assert_true(v.outside_since_ms > 0);
    shoal_buf_t b = {0};
    shoal_cluster_view_json(&v, &b);
    assert_non_null(strstr(shoal_buf_cstr(&b), "\"in_cluster\":false,\"joining\":true"));
    shoal_buf_free(&b);
    shoal_cluster_view_free(&v);
}

/* After shoal_cluster_destroy the node goes on without membership: a message of any of
   membership's kinds that arrives then is dropped as unknown, never handed to the freed cluster
   (three kinds were left registered once, and ASan caught a GossipStatus reaching freed memory
   in test_discovery's teardown). */
typedef struct {
    shoal_system_t *from;
    const shoal_node_t *to;
} stray_t;

static int send_strays(shoal_system_t *sys, void *arg)
{
    stray_t *st = arg;
    static const uint8_t junk[] = {0x08, 0x01};
    int fails = 0;
    for (uint16_t kind = K_INIT_JOIN; kind <= K_GOSSIP_STATUS && !fails; kind++)
        fails += shoal_system_send(sys, st->to, kind, junk, sizeof junk) != 0;
    return fails; /* the first fails until the handshake has named the peer */
}

static bool strays_sent(void *arg)
{
    stray_t *st = arg;
    return shoal_system_call(st->from, send_strays, st) == 0;
}

typedef struct {
    shoal_system_t *sys;
    uint64_t want;
} dropped_t;

static bool dropped_reached(void *arg)
{
    dropped_t *d = arg;
    shoal_system_stats_t st;
    return shoal_system_stats(d->sys, &st) == 0 && st.dropped_unknown_kind >= d->want;
}

static void test_destroyed_cluster_gets_no_messages(void **state)
{
    (void)state;
    char self[64];
    start_outside(self, sizeof self);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    shoal_system_t *other = shoal_system_new(&ss, &err);
    assert_non_null(other);
    assert_int_equal(shoal_system_connect_sync(other, self), 0);
    shoal_cluster_destroy(&nodes[0].cl);
    shoal_system_stats_t before;
    assert_int_equal(shoal_system_stats(nodes[0].sys, &before), 0);
    stray_t st = {other, shoal_system_self(nodes[0].sys)};
    int kinds = K_GOSSIP_STATUS - K_INIT_JOIN + 1;
    assert_true(wait_until(strays_sent, &st, 10000));
    dropped_t d = {nodes[0].sys, before.dropped_unknown_kind + (uint64_t)kinds};
    assert_true(wait_until(dropped_reached, &d, 10000));
    shoal_system_destroy(&other);
}

/* A role replicator sees only the members of its role. */
static void test_role_replicator(void **state)
{
    (void)state;
    start_node(0, NULL, "backend");
    start_node(1, NULL, "frontend");
    start_node(2, NULL, "backend");
    wait_all_up(3, 15000);
    for (int i = 0; i < 3; i++) {
        shoal_replicator_settings_t rs;
        tcluster_fast_settings(&rs);
        rs.role = "backend";
        int err;
        nodes[i].role_rep = shoal_replicator_new(nodes[i].sys, &rs, &err);
        assert_non_null(nodes[i].role_rep);
        assert_int_equal(shoal_cluster_follow(nodes[i].cl, nodes[i].role_rep), 0);
    }
    /* backend nodes: 2 replicas; the frontend node itself is a replicator with the others as
       peers only if they have the role: it sees the two backends */
    assert_int_equal(shoal_replicator_replica_count_sync(nodes[0].role_rep), 2);
    assert_int_equal(shoal_replicator_replica_count_sync(nodes[2].role_rep), 2);
    assert_int_equal(shoal_replicator_replica_count_sync(nodes[1].role_rep), 3);
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(nodes[1].cl, &v), 0);
    const shoal_node_t *bl = shoal_cluster_view_role_leader(&v, "backend");
    assert_non_null(bl);
    assert_true(bl == shoal_system_self(nodes[0].sys) || bl == shoal_system_self(nodes[2].sys));
    assert_ptr_equal(shoal_cluster_view_role_leader(&v, "frontend"), shoal_system_self(nodes[1].sys));
    shoal_cluster_view_free(&v);
}

/* A callback that keeps the node loop busy for several acceptable pauses does not make the node
   unreachable (heartbeats are answered by their own actor); a loop wedged past the stall bound
   does. */
static int busy_ms;
static int busy(shoal_system_t *sys, void *arg)
{
    (void)sys;
    (void)arg;
    int64_t end = shoal_now_ms() + busy_ms;
    while (shoal_now_ms() < end) {
    }
    return 0;
}

static bool may_act(void *arg)
{
    return shoal_cluster_may_act(arg);
}

static void test_busy_loop_stays_reachable(void **state)
{
    (void)state;
    start_cluster(3);
    shoal_cluster_settings_t s;
    settings(&s);
    busy_ms = (int)s.acceptable_heartbeat_pause_ms * 3; /* and longer than stable-after */
    assert_true(busy_ms > (int)s.stable_after_ms);
    const shoal_node_t *n2 = shoal_system_self(nodes[2].sys);
    assert_int_equal(shoal_system_post(nodes[2].sys, busy, NULL), 0);
    int64_t end = shoal_now_ms() + busy_ms + 500;
    cond_t c = {.n = 2, .skip = -1, .subject = n2, .reachable = true};
    while (shoal_now_ms() < end) {
        assert_true(subject_reachability(&c));
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    shoal_cluster_stats_t st;
    assert_int_equal(shoal_cluster_stats(nodes[0].cl, &st), 0);
    assert_int_equal(st.unreachable_marked, 0);
    /* the busy node saw a gap in its own loop longer than stable-after: it stopped acting until
       a majority read showed it still a member, and acts again now */
    assert_int_equal(shoal_cluster_stats(nodes[2].cl, &st), 0);
    assert_true(st.clock_gaps >= 1);
    assert_true(wait_until(may_act, nodes[2].cl, 10000));
}

static void test_wedged_loop_detected(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.sbr_strategy = SHOAL_SBR_OFF; /* watch detection only */
    for (int i = 0; i < 3; i++)
        start_node(i, &s, NULL);
    wait_all_up(3, 15000);
    busy_ms = (int)(s.loop_stall_bound_ms + s.acceptable_heartbeat_pause_ms * 3);
    const shoal_node_t *n2 = shoal_system_self(nodes[2].sys);
    assert_int_equal(shoal_system_post(nodes[2].sys, busy, NULL), 0);
    cond_t c = {.n = 2, .skip = -1, .subject = n2, .reachable = false};
    assert_true(wait_until(subject_reachability, &c, busy_ms + 5000));
    /* and it comes back when the loop does */
    c.reachable = true;
    assert_true(wait_until(subject_reachability, &c, busy_ms + 10000));
}

/* One node with 5% packet loss on its links: nobody is downed. */
static void test_lossy_node_not_downed(void **state)
{
    (void)state;
    start_cluster(4);
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .drop = 0.05};
    assert_int_equal(shoal_system_fault(nodes[3].sys, NULL, &f), 0);
    shoal_cluster_settings_t s;
    settings(&s);
    int64_t end = shoal_now_ms() + (int64_t)s.stable_after_ms * 2 + 1000;
    cond_t up = {.n = 4, .skip = -1, .members = 4};
    while (shoal_now_ms() < end) {
        shoal_cluster_view_t v;
        assert_int_equal(shoal_cluster_view(nodes[0].cl, &v), 0);
        for (size_t k = 0; k < v.n_members; k++)
            assert_true(v.members[k].status == SHOAL_MEMBER_UP);
        assert_int_equal(v.n_members, 4);
        shoal_cluster_view_free(&v);
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
    shoal_system_heal(nodes[3].sys);
    assert_true(wait_until(all_up, &up, 10000));
}

/* Flapping links keep unreachability changing past stable-after + down-all-when-unstable, the
   unreachable set never empty: Akka's resolver downs every member then. Both links' ends stay
   connected through the other members (indirectly connected), so the cluster is not split and
   only a cover of the links may go (one end of each): node 0, on no flaky link, stays Up
   throughout and never more than two members are downed. indirect_probes = 0, because an
   indirect probe through a third member answers for a one-link cut and no record is made. */
static void flap(int a, int b, bool cut)
{
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = cut};
    assert_int_equal(shoal_system_fault(nodes[a].sys, shoal_system_endpoint(nodes[b].sys), &f), 0);
    assert_int_equal(shoal_system_fault(nodes[b].sys, shoal_system_endpoint(nodes[a].sys), &f), 0);
}

/* Node 0's view: bit i set when node i is unreachable; *down counts members Down or Removed. */
static unsigned unreachable_bits(size_t *down)
{
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(nodes[0].cl, &v), 0);
    unsigned bits = 0;
    *down = 5 - v.n_members; /* Removed: gone from the view */
    for (size_t k = 0; k < v.n_members; k++) {
        const shoal_member_t *m = &v.members[k];
        if (m->status >= SHOAL_MEMBER_DOWN)
            (*down)++;
        for (int i = 0; i < 5; i++)
            if (shoal_node_cmp(m->node, shoal_system_self(nodes[i].sys)) == 0) {
                if (i == 0)
                    assert_true(m->status == SHOAL_MEMBER_UP); /* never downed itself */
                if (!m->reachable && m->status < SHOAL_MEMBER_DOWN)
                    bits |= 1u << i;
            }
    }
    shoal_cluster_view_free(&v);
    return bits;
}

static void test_flapping_links_never_down_everyone(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.indirect_probes = 0;
    for (int i = 0; i < 5; i++)
        start_node(i, &s, NULL);
    wait_all_up(5, 15000);
    /* The driver keeps node 0's unreachable set changing well within stable-after and never
       empty: both links cut; once both are seen, the one cut longest is healed (seen at once)
       and cut again (seen a failure-detection time later), then the other. */
    static const int ends[2][2] = {{1, 2}, {3, 4}};
    const unsigned seen_bits[2] = {(1u << 1) | (1u << 2), (1u << 3) | (1u << 4)};
    flap(1, 2, true);
    flap(3, 4, true);
    int64_t limit = (int64_t)s.stable_after_ms * 3 / 4 < 4000 ? 4000 : s.stable_after_ms * 3 / 4;
    int64_t end = shoal_now_ms() + (int64_t)s.stable_after_ms * 3 + limit + 3000;
    int next_heal = 0, healed = -1;
    unsigned last = 0;
    int64_t last_change = shoal_now_ms();
    size_t most_down = 0, down = 0;
    while (shoal_now_ms() < end) {
        unsigned u = unreachable_bits(&down);
        if (down > most_down)
            most_down = down;
        assert_true(down <= 2);
        int64_t now = shoal_now_ms();
        if (u != last) {
            last = u;
            last_change = now;
        }
        if (healed >= 0 && !(u & seen_bits[healed])) {
            flap(ends[healed][0], ends[healed][1], true); /* seen healed: cut it again */
            healed = -1;
        } else if (healed < 0 && (u & seen_bits[0]) && (u & seen_bits[1]) &&
                   now - last_change >= (int64_t)s.stable_after_ms / 4) {
            healed = next_heal;
            next_heal ^= 1;
            flap(ends[healed][0], ends[healed][1], false);
        }
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    shoal_cluster_stats_t st;
    assert_int_equal(shoal_cluster_stats(nodes[0].cl, &st), 0);
    fprintf(stderr, "flapping links: at most %zu member(s) downed; node 0's resolver downed %llu\n",
            most_down, (unsigned long long)st.downed_by_sbr);
    for (int i = 1; i < 5; i++)
        shoal_system_heal(nodes[i].sys);
    /* whoever is left (node 0 and at least one end of each link) is one converged cluster */
    cond_t c = {.n = 1, .skip = -1, .members = (int)(5 - most_down)};
    assert_true(wait_until(all_up, &c, 15000));
}

/* Singleton: runs on the oldest member, moves when it leaves, never two at once. */
typedef struct {
    int running[MAXN];
    int max_concurrent;
    uint64_t last_term;
    bool term_grew;
    int starts;
} single_obs_t;
static single_obs_t obs;
static int node_of_arg(void *arg)
{
    return (int)(intptr_t)arg;
}
static int count_running(void)
{
    int n = 0;
    for (int i = 0; i < MAXN; i++)
        n += obs.running[i];
    return n;
}
static void s_start(shoal_singleton_t *s, uint64_t term, void *arg)
{
    (void)s;
    __atomic_store_n(&obs.running[node_of_arg(arg)], 1, __ATOMIC_SEQ_CST);
    int n = count_running();
    if (n > obs.max_concurrent)
        obs.max_concurrent = n;
    obs.term_grew = term > obs.last_term;
    obs.last_term = term;
    obs.starts++;
}
static void s_stop(shoal_singleton_t *s, void *arg)
{
    (void)s;
    __atomic_store_n(&obs.running[node_of_arg(arg)], 0, __ATOMIC_SEQ_CST);
}
static bool running_on(void *arg)
{
    return __atomic_load_n(&obs.running[(int)(intptr_t)arg], __ATOMIC_SEQ_CST) &&
           count_running() == 1;
}

static void test_singleton_moves_on_leave_and_crash(void **state)
{
    (void)state;
    memset(&obs, 0, sizeof obs);
    start_cluster(4);
    shoal_singleton_t **sg = singletons;
    for (int i = 0; i < 4; i++) {
        sg[i] = shoal_singleton_new(nodes[i].cl, "coordinator", NULL, s_start, s_stop,
                                    (void *)(intptr_t)i);
        assert_non_null(sg[i]);
    }
    /* it runs on one node only: the oldest (up-number 1) */
    int first = -1;
    int64_t end = shoal_now_ms() + 5000L * tscale();
    while (first < 0 && shoal_now_ms() < end) {
        for (int i = 0; i < 4; i++)
            if (running_on((void *)(intptr_t)i))
                first = i;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_true(first >= 0);
    uint64_t t0 = obs.last_term;
    assert_int_equal(t0, 1);
    /* it leaves: the singleton moves to the next oldest */
    assert_int_equal(shoal_cluster_leave(nodes[first].cl, NULL), 0);
    int next = -1;
    end = shoal_now_ms() + 20000L * tscale();
    while (next < 0 && shoal_now_ms() < end) {
        for (int i = 0; i < 4; i++)
            if (i != first && running_on((void *)(intptr_t)i))
                next = i;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_true(next >= 0);
    assert_true(obs.last_term > t0);
    assert_int_equal(obs.max_concurrent, 1);
    /* the host crashes: downed, removed, the singleton starts elsewhere */
    uint64_t t1 = obs.last_term;
    shoal_singleton_destroy(&sg[next]);
    obs.running[next] = 0; /* a crash: nothing stops it, the process is gone */
    stop_node(next);
    int third = -1;
    end = shoal_now_ms() + 40000L * tscale();
    while (third < 0 && shoal_now_ms() < end) {
        for (int i = 0; i < 4; i++)
            if (i != next && i != first && running_on((void *)(intptr_t)i))
                third = i;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_true(third >= 0);
    assert_true(obs.last_term > t1);
    assert_int_equal(obs.max_concurrent, 1);
    for (int i = 0; i < 4; i++)
        shoal_singleton_destroy(&sg[i]);
}

/* Events: a subscriber gets a snapshot, then the changes. */
typedef struct {
    int snapshot_begin, snapshot_end, up, removed, leader;
} ev_count_t;
static ev_count_t evc;
static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    (void)arg;
    switch (ev->kind) {
    case SHOAL_EV_SNAPSHOT_BEGIN: evc.snapshot_begin++; break;
    case SHOAL_EV_SNAPSHOT_END: evc.snapshot_end++; break;
    case SHOAL_EV_MEMBER_UP: evc.up++; break;
    case SHOAL_EV_MEMBER_REMOVED: evc.removed++; break;
    case SHOAL_EV_LEADER_CHANGED: evc.leader++; break;
    default: break;
    }
}
static int subscribe(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return shoal_cluster_subscribe(arg, on_event, NULL);
}
static bool removed_seen(void *arg)
{
    (void)arg;
    return __atomic_load_n(&evc.removed, __ATOMIC_SEQ_CST) >= 1;
}

static void test_events_snapshot_then_changes(void **state)
{
    (void)state;
    memset(&evc, 0, sizeof evc);
    start_cluster(3);
    assert_true(shoal_system_call(nodes[0].sys, subscribe, nodes[0].cl) > 0);
    assert_int_equal(evc.snapshot_begin, 1);
    assert_int_equal(evc.snapshot_end, 1);
    assert_int_equal(evc.up, 3);
    assert_int_equal(evc.leader, 1);
    assert_int_equal(shoal_cluster_leave(nodes[2].cl, NULL), 0);
    assert_true(wait_until(removed_seen, NULL, 15000));
    /* misuse is an error, not a crash */
    assert_int_equal(shoal_cluster_subscribe(nodes[0].cl, on_event, NULL), SHOAL_ETHREAD);
    assert_int_equal(shoal_cluster_down(nodes[0].cl, shoal_node_intern("127.0.0.1:1:1")),
                     SHOAL_ENOTMEMBER);
    assert_int_equal(shoal_cluster_join(nodes[0].cl, NULL, 0), SHOAL_ESTATE);
}


/* WeaklyUp: a member cannot converge while another is unreachable; a node that joins then goes
   Joining -> WeaklyUp after weakly-up-after, and Up once the unreachable one is healed. */
static void test_weakly_up_without_convergence(void **state)
{
    (void)state;
    shoal_cluster_settings_t s;
    settings(&s);
    s.sbr_strategy = SHOAL_SBR_OFF; /* keep the unreachable member around */
    for (int i = 0; i < 3; i++)
        start_node(i, &s, NULL);
    wait_all_up(3, 15000);
    /* node 2 cut from everyone, the node that joins later included */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(nodes[2].sys, NULL, &cut), 0);
    const shoal_node_t *n2 = shoal_system_self(nodes[2].sys);
    cond_t c = {.n = 2, .skip = -1, .subject = n2, .reachable = false};
    assert_true(wait_until(subject_reachability, &c, 15000));
    start_node(3, &s, NULL);
    const shoal_node_t *n3 = shoal_system_self(nodes[3].sys);
    cond_t w = {.n = 2, .skip = -1, .subject = n3, .status = SHOAL_MEMBER_WEAKLY_UP};
    assert_true(wait_until(subject_status, &w, 20000));
    /* WeaklyUp members receive data but do not count toward majorities */
    assert_int_equal(shoal_replicator_replica_count_sync(nodes[0].data), 3);
    shoal_system_heal(nodes[0].sys);
    shoal_system_heal(nodes[1].sys);
    shoal_system_heal(nodes[2].sys);
    wait_all_up(4, 20000);
}

/* Shutdown phases: tasks run in their phase with the reason; a task that never finishes is
   abandoned at the phase timeout; on_removed runs at the end. */
typedef struct {
    int ran[SHOAL_PHASE_COUNT];
    int order[8];
    int n_order;
    shoal_shutdown_reason_t why;
    int removed_called;
} phases_t;
static phases_t ph;
static void task_quick(shoal_cluster_t *c, shoal_shutdown_reason_t why, shoal_task_done_fn *done,
                       void *done_arg, void *arg)
{
    (void)c;
    int phase = (int)(intptr_t)arg;
    ph.ran[phase]++;
    if (ph.n_order < 8)
        ph.order[ph.n_order++] = phase;
    ph.why = why;
    done(done_arg);
}
static void task_hangs(shoal_cluster_t *c, shoal_shutdown_reason_t why, shoal_task_done_fn *done,
                       void *done_arg, void *arg)
{
    (void)c;
    (void)why;
    (void)done;
    (void)done_arg;
    int phase = (int)(intptr_t)arg;
    ph.ran[phase]++;
    if (ph.n_order < 8)
        ph.order[ph.n_order++] = phase;
}
static void on_removed_cb(shoal_cluster_t *c, void *arg)
{
    (void)c;
    (void)arg;
    __atomic_add_fetch(&ph.removed_called, 1, __ATOMIC_SEQ_CST);
}
static int add_removed_cb(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return shoal_cluster_on_removed(arg, on_removed_cb, NULL);
}

static void test_shutdown_phases_on_leave(void **state)
{
    (void)state;
    memset(&ph, 0, sizeof ph);
    start_cluster(3);
    shoal_cluster_t *c = nodes[2].cl;
    assert_int_equal(shoal_cluster_add_task(c, SHOAL_PHASE_CLUSTER_EXITING, "late", task_quick,
                                            (void *)(intptr_t)SHOAL_PHASE_CLUSTER_EXITING),
                     0);
    assert_int_equal(shoal_cluster_add_task(c, SHOAL_PHASE_SHARDING, "hand-off", task_hangs,
                                            (void *)(intptr_t)SHOAL_PHASE_SHARDING),
                     0);
    assert_int_equal(shoal_cluster_add_task(c, SHOAL_PHASE_SERVICE_UNBIND, "unbind", task_quick,
                                            (void *)(intptr_t)SHOAL_PHASE_SERVICE_UNBIND),
                     0);
    assert_int_equal(shoal_cluster_add_task(c, SHOAL_PHASE_COUNT, "bad", task_quick, NULL),
                     SHOAL_EINVAL);
    assert_int_equal(shoal_system_call(nodes[2].sys, add_removed_cb, c), 0);
    int64_t t0 = shoal_now_ms();
    assert_int_equal(shoal_cluster_leave(c, NULL), 0);
    assert_true(wait_until(is_terminated, c, 30000));
    shoal_cluster_settings_t s;
    settings(&s);
    /* the hanging hand-off held its phase for the phase timeout, no longer */
    assert_true(shoal_now_ms() - t0 >= (int64_t)s.phase_timeout_ms);
    assert_int_equal(ph.ran[SHOAL_PHASE_SERVICE_UNBIND], 1);
    assert_int_equal(ph.ran[SHOAL_PHASE_SHARDING], 1);
    assert_int_equal(ph.ran[SHOAL_PHASE_CLUSTER_EXITING], 1);
    assert_int_equal(ph.n_order, 3);
    assert_int_equal(ph.order[0], SHOAL_PHASE_SERVICE_UNBIND);
    assert_int_equal(ph.order[1], SHOAL_PHASE_SHARDING);
    assert_int_equal(ph.order[2], SHOAL_PHASE_CLUSTER_EXITING);
    assert_int_equal(ph.why, SHOAL_SHUTDOWN_LEAVE);
    assert_int_equal(ph.removed_called, 1);
    /* and the others removed it */
    cond_t gone = {.n = 2, .skip = -1, .subject = shoal_system_self(nodes[2].sys), .status = 0};
    assert_true(wait_until(subject_status, &gone, 15000));
    /* no tasks once shutting down */
    assert_int_equal(shoal_cluster_add_task(c, SHOAL_PHASE_SHARDING, "x", task_quick, NULL),
                     SHOAL_ESTOPPED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_five_join_and_converge, teardown),
        cmocka_unit_test_teardown(test_events_snapshot_then_changes, teardown),
        cmocka_unit_test_teardown(test_graceful_leave, teardown),
        cmocka_unit_test_teardown(test_crash_downed_by_keep_majority, teardown),
        cmocka_unit_test_teardown(test_partition_minority_downed, teardown),
        cmocka_unit_test_teardown(test_partition_keep_oldest, teardown),
        cmocka_unit_test_teardown(test_partition_static_quorum, teardown),
        cmocka_unit_test_teardown(test_min_nr_of_members, teardown),
        cmocka_unit_test_teardown(test_quorum_gate, teardown),
        cmocka_unit_test_teardown(test_seeds_cold_start_and_first_seed_restart, teardown),
        cmocka_unit_test_teardown(test_no_cluster_view, teardown),
        cmocka_unit_test_teardown(test_destroyed_cluster_gets_no_messages, teardown),
        cmocka_unit_test_teardown(test_role_replicator, teardown),
        cmocka_unit_test_teardown(test_busy_loop_stays_reachable, teardown),
        cmocka_unit_test_teardown(test_wedged_loop_detected, teardown),
        cmocka_unit_test_teardown(test_lossy_node_not_downed, teardown),
        cmocka_unit_test_teardown(test_flapping_links_never_down_everyone, teardown),
        cmocka_unit_test_teardown(test_singleton_moves_on_leave_and_crash, teardown),
        cmocka_unit_test_teardown(test_weakly_up_without_convergence, teardown),
        cmocka_unit_test_teardown(test_shutdown_phases_on_leave, teardown),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
