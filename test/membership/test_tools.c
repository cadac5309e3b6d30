/*  test_tools.c — the operator tool against real nodes: three members run in this process
    (fast timings, loopback), and the RELEASE build/bin/shoal-cluster is run as a separate program
    against them: the members table, the JSON view, the error exit codes (unknown member: 1, usage:
    2, no node at the endpoint: 3), a CURVE node refusing the tool's handshake said as refused (a
    plain client: "not a CURVE client"; a key off the allow-list: "key not on the allow-list"; exit
    1 at once, from shoal-cluster and ddata-dump --node alike, not a timeout with exit 3) and a
    graceful leave that others see to its end (Removed). The
    tool is a release program (`scons check` builds it); without it the tests are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "tools.h"
#include "membership.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NODES 3

static shoal_system_t *sys[NODES];
static shoal_cluster_t *cl[NODES];
static char tool[4200];

/* build/check/bin/test_tools -> build/bin/shoal-cluster (the check run starts tests from the
   repository root, but the path of this binary does not depend on that). */
static bool find_tool(void)
{
    return ttool_find("shoal-cluster", tool, sizeof tool);
}

#define NEED_TOOL()                                                                               \
    do {                                                                                          \
        if (!*tool) {                                                                             \
            fail_msg("build/bin/shoal-cluster is missing: the target that runs this test must "   \
                     "build it");                                                                 \
        }                                                                                         \
    } while (0)

/* Runs the tool with `args`, returns its exit code and its output (stdout and stderr). */
static int run_tool(const char *args, char *out, size_t cap)
{
    int rc = ttool_run(tool, args, out, cap);
    assert_true(rc >= 0); /* the shell exits; the tool must not have crashed it */
    return rc;
}

static const char *ep(int i)
{
    return shoal_system_endpoint(sys[i]);
}

/* "host:port" of node i, as the tool's MEMBER argument and the table's address column. */
static void address(int i, char *out, size_t cap)
{
    const shoal_node_t *n = shoal_system_self(sys[i]);
    snprintf(out, cap, "%s:%u", shoal_node_host(n), (unsigned)shoal_node_port(n));
}

/* ---------------------------------------------------------------------------------------------
 * The cluster
 */
typedef struct {
    int observers; /* nodes 0..observers-1 look */
    int expect;    /* members they must see, every one Up, and converged */
} up_arg_t;

static bool all_up(void *arg)
{
    up_arg_t *a = arg;
    for (int i = 0; i < a->observers; i++) {
        shoal_cluster_view_t v;
        if (shoal_cluster_view(cl[i], &v) != 0)
            return false;
        bool ok = v.converged && v.n_members == (size_t)a->expect;
        for (size_t m = 0; ok && m < v.n_members; m++)
            ok = v.members[m].status == SHOAL_MEMBER_UP;
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

static int group_setup(void **state)
{
    (void)state;
    if (!find_tool())
        *tool = 0;
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_fast(&cs);
    for (int i = 0; i < NODES; i++) {
        shoal_system_settings_t ss;
        shoal_system_settings_default(&ss);
        ss.endpoint = "tcp://127.0.0.1:0";
        int err = 0;
        sys[i] = shoal_system_new(&ss, &err);
        if (!sys[i])
            return -1;
        const char *seed = i ? ep(0) : NULL;
        cs.seed_nodes = i ? &seed : NULL;
        cs.n_seed_nodes = i ? 1 : 0;
        cl[i] = shoal_cluster_new(sys[i], &cs, &err);
        if (!cl[i])
            return -1;
        if (i == 0 && shoal_cluster_join(cl[0], NULL, 0) != 0)
            return -1;
    }
    up_arg_t a = {NODES, NODES};
    return wait_until(all_up, &a, 15000) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        shoal_cluster_destroy(&cl[i]);
    for (int i = 0; i < NODES; i++)
        shoal_system_destroy(&sys[i]);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Tests
 */

/* The table lists every member by address, Up, and names the leader and convergence. */
static void test_members_table(void **state)
{
    (void)state;
    NEED_TOOL();
    char args[512], out[16384];
    snprintf(args, sizeof args, "--node %s members", ep(1));
    int rc = run_tool(args, out, sizeof out);
    assert_int_equal(rc, 0);
    for (int i = 0; i < NODES; i++) {
        char addr[300];
        address(i, addr, sizeof addr);
        if (!strstr(out, addr))
            fail_msg("address %s missing from:\n%s", addr, out);
    }
    /* one "Up" per member row; the header names the leader (the lowest address) and convergence */
    int ups = 0;
    for (const char *p = out; (p = strstr(p, " Up ")) != NULL; p++)
        ups++;
    assert_int_equal(ups, NODES);
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(cl[1], &v), 0);
    assert_non_null(v.leader);
    char head[600];
    snprintf(head, sizeof head, "leader %s  converged yes", shoal_node_id(v.leader));
    shoal_cluster_view_free(&v);
    if (!strstr(out, head))
        fail_msg("header '%s' missing from:\n%s", head, out);
    assert_non_null(strstr(out, "* ")); /* the leader's row is marked */
}

/* --json prints the node's JSON view: the members array with every node id. */
static void test_members_json(void **state)
{
    (void)state;
    NEED_TOOL();
    char args[512], out[16384];
    snprintf(args, sizeof args, "--node %s --json members", ep(2));
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    assert_true(out[0] == '{');
    assert_non_null(strstr(out, "\"members\":["));
    assert_non_null(strstr(out, "\"converged\":true"));
    for (int i = 0; i < NODES; i++) {
        char quoted[300];
        snprintf(quoted, sizeof quoted, "\"%s\"", shoal_node_id(shoal_system_self(sys[i])));
        if (!strstr(out, quoted))
            fail_msg("node %s missing from:\n%s", quoted, out);
    }
    char self[300];
    snprintf(self, sizeof self, "\"self\":\"%s\"", shoal_node_id(shoal_system_self(sys[2])));
    assert_non_null(strstr(out, self));
}

/* Downing a member the node does not know is the node's error: exit 1 with a message; nobody is
   downed. */
static void test_down_unknown_member(void **state)
{
    (void)state;
    NEED_TOOL();
    char args[512], out[4096];
    snprintf(args, sizeof args, "--node %s down 127.0.0.1:1:42", ep(0));
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    if (!strstr(out, "no such member '127.0.0.1:1:42'"))
        fail_msg("unexpected message: %s", out);
    snprintf(args, sizeof args, "--node %s down 10.9.9.9:7", ep(0));
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    assert_non_null(strstr(out, "no such member"));
    up_arg_t a = {NODES, NODES};
    assert_true(all_up(&a));
}

/* Usage errors exit 2 without asking any node. */
static void test_usage_errors(void **state)
{
    (void)state;
    NEED_TOOL();
    char out[4096];
    assert_int_equal(run_tool("", out, sizeof out), 2);
    assert_int_equal(run_tool("frobnicate", out, sizeof out), 2);
    assert_non_null(strstr(out, "unknown command"));
    assert_int_equal(run_tool("down", out, sizeof out), 2);
    assert_int_equal(run_tool("members extra", out, sizeof out), 2);
    assert_int_equal(run_tool("--timeout soon members", out, sizeof out), 2);
    /* (HOST:PORT is a seed's address too since the address syntax was unified: a bad port is
       the usage error now) */
    assert_int_equal(run_tool("join 127.0.0.1:notaport", out, sizeof out), 2);
}

/* No node at the endpoint: exit 3 and "cannot reach node at ...", within the timeout. */
static void test_dead_endpoint(void **state)
{
    (void)state;
    NEED_TOOL();
    /* a port that was free a moment ago and that nobody listens on */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &len), 0);
    close(s);
    char args[512], out[4096], endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    snprintf(args, sizeof args, "--node %s --timeout %d members", endpoint, 300 * tscale());
    assert_int_equal(run_tool(args, out, sizeof out), 3);
    char msg[128];
    snprintf(msg, sizeof msg, "cannot reach node at %s", endpoint);
    if (!strstr(out, msg))
        fail_msg("expected '%s' in: %s", msg, out);
}

static shoal_system_t *curve_node; /* stopped by the teardown, so a failure cannot hang the exit */

static int curve_teardown(void **state)
{
    (void)state;
    shoal_system_destroy(&curve_node);
    unsetenv("SHOAL_CURVE_CERT");
    unsetenv("SHOAL_CURVE_ALLOW");
    return 0;
}

/* A node that runs CURVE with an allow-list that names nobody: the tool, plain or with a key of
   its own, is refused in the ZeroMQ handshake and says so at once. */
static void test_curve_refused(void **state)
{
    (void)state;
    NEED_TOOL();
    char dump[4200];
    assert_true(ttool_find("ddata-dump", dump, sizeof dump));
    char root[] = "/tmp/shoal-tools-curve-XXXXXX";
    assert_non_null(mkdtemp(root));
    char node_cert[300], stranger_cert[300], node_allow[300], client_allow[300];
    snprintf(node_cert, sizeof node_cert, "%s/node.cert", root);
    snprintf(stranger_cert, sizeof stranger_cert, "%s/stranger.cert", root);
    snprintf(node_allow, sizeof node_allow, "%s/node-allow", root);
    snprintf(client_allow, sizeof client_allow, "%s/client-allow", root);
    assert_int_equal(mkdir(node_allow, 0700), 0);
    assert_int_equal(mkdir(client_allow, 0700), 0);
    int port = tfree_port();
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    zcert_t *nc = zcert_new();
    assert_int_equal(zcert_save(nc, node_cert), 0);
    /* the client knows the node's public key, by its endpoint */
    uint8_t none[32] = {0};
    zcert_t *pub = zcert_new_from(zcert_public_key(nc), none);
    zcert_set_meta(pub, "endpoint", "%s", endpoint);
    char pub_path[400];
    snprintf(pub_path, sizeof pub_path, "%s/node.cert", client_allow);
    assert_int_equal(zcert_save_public(pub, pub_path), 0);
    zcert_destroy(&pub);
    zcert_destroy(&nc);
    zcert_t *sc = zcert_new();
    assert_int_equal(zcert_save(sc, stranger_cert), 0);
    zcert_destroy(&sc);

    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = endpoint;
    ss.curve_cert = node_cert;
    ss.curve_allow_dir = node_allow;
    int err = 0;
    curve_node = shoal_system_new(&ss, &err);
    assert_non_null(curve_node);

    char args[512], out[4096];
    int timeout = 5000 * tscale();
    for (int keyed = 0; keyed < 2; keyed++) {
        if (keyed) {
            setenv("SHOAL_CURVE_CERT", stranger_cert, 1);
            setenv("SHOAL_CURVE_ALLOW", client_allow, 1);
        } else {
            unsetenv("SHOAL_CURVE_CERT");
            unsetenv("SHOAL_CURVE_ALLOW");
        }
        const char *why = keyed ? "key not on the allow-list" : "not a CURVE client";
        int64_t t0 = shoal_now_ms();
        snprintf(args, sizeof args, "--node %s --timeout %d members", endpoint, timeout);
        int rc = run_tool(args, out, sizeof out);
        if (rc != 1 || !strstr(out, why) || !strstr(out, "refused"))
            fail_msg("shoal-cluster (%s): exit %d, expected 1 and '%s':\n%s",
                     keyed ? "a key off the list" : "plain", rc, why, out);
        /* said at once, not at the timeout */
        assert_true(shoal_now_ms() - t0 < timeout);
        snprintf(args, sizeof args, "--node %s", endpoint);
        rc = ttool_run(dump, args, out, sizeof out);
        if (rc != 1 || !strstr(out, why))
            fail_msg("ddata-dump --node (%s): exit %d, expected 1 and '%s':\n%s",
                     keyed ? "a key off the list" : "plain", rc, why, out);
    }
    curve_teardown(NULL);
    char rm[400];
    snprintf(rm, sizeof rm, "rm -rf %s", root);
    assert_int_equal(system(rm), 0);
}

typedef struct {
    const shoal_node_t *gone;
} gone_arg_t;

/* Nodes 0 and 1 no longer list the node (views leave Removed members out), and converged. */
static bool removed_everywhere(void *arg)
{
    gone_arg_t *a = arg;
    for (int i = 0; i < 2; i++) {
        shoal_cluster_view_t v;
        if (shoal_cluster_view(cl[i], &v) != 0)
            return false;
        bool ok = !shoal_cluster_view_member(&v, a->gone) && v.n_members == NODES - 1;
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

/* `leave host:port` asked of node 0 makes node 2 leave: the others see it go to Removed, and
   node 2 runs its shutdown to the end. Runs last: it changes the cluster. */
static void test_leave_member(void **state)
{
    (void)state;
    NEED_TOOL();
    char args[512], out[4096], addr[300];
    address(2, addr, sizeof addr);
    snprintf(args, sizeof args, "--node %s leave %s", ep(0), addr);
    if (run_tool(args, out, sizeof out) != 0)
        fail_msg("leave failed: %s", out);
    gone_arg_t a = {shoal_system_self(sys[2])};
    assert_true(wait_until(removed_everywhere, &a, 10000));
    assert_true(wait_until(terminated, cl[2], 10000));
    up_arg_t up = {2, NODES - 1};
    assert_true(wait_until(all_up, &up, 10000));
    /* the table of a survivor no longer shows it */
    snprintf(args, sizeof args, "--node %s members", ep(1));
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    assert_null(strstr(out, addr));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_table),
        cmocka_unit_test(test_members_json),
        cmocka_unit_test(test_down_unknown_member),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_dead_endpoint),
        cmocka_unit_test_teardown(test_curve_refused, curve_teardown),
        cmocka_unit_test(test_leave_member),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
