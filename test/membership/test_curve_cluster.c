/*  test_curve_cluster.c — membership over CURVE: three members whose allow-list names only the
    seed's endpoint join, reach each other with keys learned from the member records (the record
    carries each member's public key), come Up and stay reachable (heartbeats pass the same
    allow-list); a stranger with its own key, pointed at the seed, never becomes a member and is
    counted as refused. A member whose list leaves out another refuses that one's heartbeat
    connection, which ZeroMQ never dials again: once the key is on the list every member is
    reachable, because the heartbeat redials.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "members.h"
#include "membership.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEADLINE_MS 30000
#define N           3

static char root[256];
static uint32_t stable_after_ms; /* 0: the test timings' */
static bool no_indirect_probes;

typedef struct {
    char cert[300];
    uint8_t pub[32];
} keypair_t;

typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
} mnode_t;

static void make_key(keypair_t *k, const char *name)
{
    char dir[280];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    mkdir(dir, 0700);
    snprintf(k->cert, sizeof k->cert, "%s/node.cert", dir);
    zcert_t *c = zcert_new();
    assert_int_equal(zcert_save(c, k->cert), 0);
    memcpy(k->pub, zcert_public_key(c), 32);
    zcert_destroy(&c);
}

/* A public certificate in the allow-list, with `endpoint` metadata when given. */
static void allow(const char *dir, const char *name, const keypair_t *k, const char *endpoint)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s.cert", dir, name);
    uint8_t none[32] = {0};
    zcert_t *c = zcert_new_from(k->pub, none);
    if (endpoint)
        zcert_set_meta(c, "endpoint", "%s", endpoint);
    assert_int_equal(zcert_save_public(c, path), 0);
    zcert_destroy(&c);
}

static void start(mnode_t *m, const keypair_t *k, const char *allow_dir, const char *seed)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    ss.curve_cert = k->cert;
    ss.curve_allow_dir = allow_dir;
    int err = 0;
    m->sys = shoal_system_new(&ss, &err);
    assert_non_null(m->sys);
    shoal_cluster_settings_t s;
    tmember_settings(&s);
    if (stable_after_ms)
        s.stable_after_ms = stable_after_ms;
    if (no_indirect_probes)
        s.indirect_probes = 0;
    m->cl = shoal_cluster_new(m->sys, &s, &err);
    assert_non_null(m->cl);
    if (seed)
        assert_int_equal(shoal_cluster_join(m->cl, &seed, 1), 0);
    else
        assert_int_equal(shoal_cluster_join(m->cl, NULL, 0), 0);
}

static void stop(mnode_t *m)
{
    shoal_cluster_destroy(&m->cl);
    shoal_system_destroy(&m->sys);
}

/* Every node sees N members, all Up and reachable, converged. */
static bool all_up(mnode_t *nodes)
{
    for (int i = 0; i < N; i++) {
        shoal_cluster_view_t v;
        if (shoal_cluster_view(nodes[i].cl, &v) != 0)
            return false;
        size_t up = 0;
        for (size_t k = 0; k < v.n_members; k++)
            up += v.members[k].status == SHOAL_MEMBER_UP && v.members[k].reachable;
        bool ok = up == N && v.n_members == N && v.converged;
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

static void test_members_over_curve(void **state)
{
    (void)state;
    keypair_t k[N], stranger;
    char name[16];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "m%d", i);
        make_key(&k[i], name);
    }
    make_key(&stranger, "stranger");
    char allow_dir[300], stranger_dir[300];
    snprintf(allow_dir, sizeof allow_dir, "%s/allow", root);
    snprintf(stranger_dir, sizeof stranger_dir, "%s/allow-stranger", root);
    mkdir(allow_dir, 0700);
    mkdir(stranger_dir, 0700);
    /* members 1 and 2 are on the list without an endpoint: their keys travel in the records */
    allow(allow_dir, "m1", &k[1], NULL);
    allow(allow_dir, "m2", &k[2], NULL);
    mnode_t nodes[N] = {0};
    allow(allow_dir, "m0", &k[0], NULL);
    start(&nodes[0], &k[0], allow_dir, NULL);
    const char *seed = shoal_system_endpoint(nodes[0].sys);
    allow(allow_dir, "m0", &k[0], seed); /* the seed's certificate names where it listens */
    assert_int_equal(shoal_system_allow_reload(nodes[0].sys), N);
    for (int i = 1; i < N; i++)
        start(&nodes[i], &k[i], allow_dir, seed);

    int64_t deadline = shoal_now_ms() + DEADLINE_MS;
    while (!all_up(nodes) && shoal_now_ms() < deadline)
        zclock_sleep(50);
    assert_true(all_up(nodes));
    /* heartbeats pass: still all reachable after several failure-detector intervals */
    zclock_sleep(3000);
    assert_true(all_up(nodes));

    /* a stranger knows the seed's key but is not on its list */
    allow(stranger_dir, "m0", &k[0], seed);
    allow(stranger_dir, "stranger", &stranger, NULL);
    mnode_t s = {0};
    start(&s, &stranger, stranger_dir, seed);
    shoal_system_stats_t st;
    deadline = shoal_now_ms() + DEADLINE_MS;
    do {
        zclock_sleep(50);
        assert_int_equal(shoal_system_stats(nodes[0].sys, &st), 0);
    } while (st.auth_refused == 0 && shoal_now_ms() < deadline);
    assert_true(st.auth_refused > 0);
    zclock_sleep(2000);
    assert_int_equal(shoal_cluster_self_status(s.cl), 0); /* never a member */
    assert_true(all_up(nodes)); /* and the cluster did not notice it */
    stop(&s);
    for (int i = N - 1; i >= 0; i--)
        stop(&nodes[i]);
}

/* Whether node `of` has `who` in its view, and how. */
static bool sees(mnode_t *of, const shoal_node_t *who, bool *reachable)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(of->cl, &v) != 0)
        return false;
    bool found = false;
    for (size_t k = 0; k < v.n_members; k++)
        if (v.members[k].node == who) { /* nodes are interned */
            found = true;
            *reachable = v.members[k].reachable;
        }
    shoal_cluster_view_free(&v);
    return found;
}

static void test_heartbeat_redials_after_refusal(void **state)
{
    (void)state;
    stable_after_ms = 120000; /* the split-brain resolver must not down the refused member */
    no_indirect_probes = true; /* a probe through node 0 would hide node 1's dead connection */
    keypair_t k[N];
    char name[16];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "r%d", i);
        make_key(&k[i], name);
    }
    char dir_all[300], dir_late[300];
    snprintf(dir_all, sizeof dir_all, "%s/allow-all", root);
    snprintf(dir_late, sizeof dir_late, "%s/allow-late", root);
    mkdir(dir_all, 0700);
    mkdir(dir_late, 0700);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "r%d", i);
        allow(dir_all, name, &k[i], NULL);
    }
    mnode_t nodes[N] = {0};
    start(&nodes[0], &k[0], dir_all, NULL);
    const char *seed = shoal_system_endpoint(nodes[0].sys);
    allow(dir_all, "r0", &k[0], seed);
    assert_int_equal(shoal_system_allow_reload(nodes[0].sys), N);
    start(&nodes[1], &k[1], dir_all, seed);
    /* node 2 knows the seed and itself, not node 1 */
    allow(dir_late, "r0", &k[0], seed);
    allow(dir_late, "r2", &k[2], NULL);
    start(&nodes[2], &k[2], dir_late, seed);
    const shoal_node_t *n2 = shoal_system_self(nodes[2].sys);

    /* node 1 learns of node 2 and finds it unreachable: node 2 refuses its key */
    bool reachable = true;
    int64_t deadline = shoal_now_ms() + DEADLINE_MS;
    while (!(sees(&nodes[1], n2, &reachable) && !reachable) && shoal_now_ms() < deadline)
        zclock_sleep(50);
    assert_false(reachable);
    shoal_system_stats_t st;
    assert_int_equal(shoal_system_stats(nodes[2].sys, &st), 0);
    assert_true(st.auth_refused > 0);

    /* node 1's key goes on node 2's list: every member reachable again, heartbeats included */
    allow(dir_late, "r1", &k[1], NULL);
    assert_int_equal(shoal_system_allow_reload(nodes[2].sys), N);
    deadline = shoal_now_ms() + 2 * DEADLINE_MS;
    while (!all_up(nodes) && shoal_now_ms() < deadline)
        zclock_sleep(50);
    assert_true(all_up(nodes));
    shoal_cluster_stats_t cs;
    assert_int_equal(shoal_cluster_stats(nodes[1].cl, &cs), 0);
    assert_true(cs.heartbeat_redials > 0);
    for (int i = N - 1; i >= 0; i--)
        stop(&nodes[i]);
    stable_after_ms = 0;
    no_indirect_probes = false;
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/shoal-test-curve-cluster-%d", (int)getpid());
    mkdir(root, 0700);
    zsys_handler_set(NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_over_curve),
        cmocka_unit_test(test_heartbeat_redials_after_refusal),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0 && rc == 0)
        rc = 1;
    return rc;
}
