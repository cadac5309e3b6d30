/*  test_examples.c — the seeds' applications in their short form, run as a user runs them
    (build/bin/<example>, a release build, which `scons check` builds too), their summaries read.

    payments --short: 400 payment flows on three node processes, the one hosting the most ledger
    shards killed with SIGKILL once half of the requests are confirmed; every payment must end
    settled exactly once (each id in one ledger once, totals equal) or failed at its sanctions
    deadline (exactly the ones the simulated sanctions service ignores), none stuck, and the
    killed node's flows must answer again from their stored state. It runs on the ports given with
    --base-port (a free block the test found); a base port whose port is taken fails the start at
    once, saying so, and a base port out of range is a usage error.
    (session-judge has a test of its own: test_session_judge.c.)

    kvstore in no cluster: a node whose seeds never answer refuses majority and all (exit 1,
    "no quorum") and reads nothing at those levels; local writes and reads run; the operator tool
    says the node is in no cluster.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h" /* wait_until, tscale */
#include "procs.h"
#include "tools.h"

#define OUT_CAP (8u << 20)

static char *out;

static void must_contain(const char *text, const char *want)
{
    if (!strstr(text, want)) {
        const char *tail = strlen(text) > 4000 ? text + strlen(text) - 4000 : text;
        print_message("expected \"%s\" in the output, whose end is:\n%s\n", want, tail);
        fail();
    }
}

/* n consecutive ports that were free a moment ago (tfree_port hands out ascending ports). */
static int free_block(int n)
{
    for (int tries = 0; tries < 1000; tries++) {
        int base = tfree_port(), k = 1;
        while (k < n && tfree_port() == base + k)
            k++;
        if (base && k == n)
            return base;
    }
    return 0;
}

static void test_payments(void **state)
{
    (void)state;
    char path[4096], args[64], want[128];
    if (!ttool_find("payments", path, sizeof path))
        fail_msg("build/bin/payments is missing: scons check builds the examples");
    int base = free_block(4); /* the driver and three payment nodes */
    assert_true(base > 0);
    snprintf(args, sizeof args, "--short --base-port %d", base);
    int rc = ttool_run(path, args, out, OUT_CAP);
    snprintf(want, sizeof want, "ports: the driver on 127.0.0.1:%d, payment nodes on %d..%d\n",
             base, base + 1, base + 3);
    must_contain(out, want);
    must_contain(out, "payments: 400 sent from the driver's node (at-least-once), 400 confirmed");
    must_contain(out, "final: 384 settled, 16 failed (sanctions deadline), 0 stuck, 0 unanswered");
    must_contain(out, "ledgers: 384 payments, total 207356 (expected 384, 207356)");
    must_contain(out, ", 0 ids in two ledgers");
    must_contain(out, " killed with SIGKILL; it hosted ");
    must_contain(out, "per payment: 0 settled ones not in the ledgers exactly once, 0 others in a "
                      "ledger, 0 unknown ids");
    must_contain(out, "(40 probed) answered again ");
    must_contain(out, ", 0 without their stored state");
    must_contain(out, "\nOK: every payment settled exactly once");
    assert_int_equal(rc, 0);
}

/* --base-port: a taken port fails the start, saying which; a value out of range is a usage error */
static void test_payments_base_port(void **state)
{
    (void)state;
    char path[4096];
    if (!ttool_find("payments", path, sizeof path))
        fail_msg("build/bin/payments is missing: scons check builds the examples");
    assert_int_equal(ttool_run(path, "--base-port 0", out, OUT_CAP), 2);
    must_contain(out, "payments: --base-port takes a number between 1 and ");
    assert_int_equal(ttool_run(path, "--base-port 65535", out, OUT_CAP), 2);
    /* a port some other program listens on */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int port = 0;
    for (int tries = 0; tries < 100 && !port; tries++) {
        port = tfree_port();
        a.sin_port = htons((uint16_t)port);
        if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 1) != 0)
            port = 0;
    }
    assert_true(port > 0);
    char args[64], want[128];
    snprintf(args, sizeof args, "--short --base-port %d", port);
    assert_int_equal(ttool_run(path, args, out, OUT_CAP), 1);
    snprintf(want, sizeof want, "payments: the driver's node did not start on port %d (in use?",
             port);
    must_contain(out, want);
    close(s);
}

static void test_kvstore_no_quorum_outside_a_cluster(void **state)
{
    (void)state;
    char kv[4096], tool[4096];
    if (!ttool_find("kvstore", kv, sizeof kv) || !ttool_find("shoal-cluster", tool, sizeof tool))
        fail_msg("build/bin/kvstore or shoal-cluster is missing: scons check builds them");
    int port = tfree_port(), dead = tfree_port();
    char bind[64], seed[64], dir[] = "/tmp/shoal-kvnq-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", dead);
    pid_t pid = ttool_spawn(
        kv, (char *const[]){kv, "node", "--bind", bind, "--seed", seed, "--data", dir, "--fast", NULL},
        NULL);
    assert_true(pid > 0);
    int rc = -1;
    /* wait until the node answers a local write (it is serving, still in no cluster) */
    for (int i = 0; i < 100 && (rc = ttool_runf(kv, out, OUT_CAP, "put %d k v local", port)); i++)
        usleep(100000);
    assert_int_equal(rc, 0);
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "put %d k2 v majority", port), 1);
    must_contain(out, "no quorum");
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "put %d k2 v all", port), 1);
    must_contain(out, "no quorum");
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "get %d k majority", port), 1);
    must_contain(out, "no quorum");
    /* the refused write changed nothing */
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "get %d k2 local", port), 1);
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "get %d k local", port), 0);
    must_contain(out, "k = v");
    assert_int_equal(ttool_runf(tool, out, OUT_CAP, "--node %s members", bind), 0);
    must_contain(out, " is in no cluster since ");
    must_contain(out, "joining through its seeds");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static bool log_has(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, what) != NULL;
}

typedef struct {
    const char *path, *what;
} log_cond_t;

static bool log_cond(void *arg)
{
    log_cond_t *c = arg;
    return log_has(c->path, c->what);
}

/* kvstore watch subscribes: a put and a delete through the watched node, back to back (well
   within the 500 ms the old poller slept, so it saw neither), are both printed, in order. */
static void test_kvstore_watch_sees_put_then_delete(void **state)
{
    (void)state;
    char kv[4096];
    if (!ttool_find("kvstore", kv, sizeof kv))
        fail_msg("build/bin/kvstore is missing: scons check builds it");
    int port = tfree_port();
    char bind[64], dir[] = "/tmp/shoal-kvwatch-XXXXXX", log[128], ports[16];
    assert_non_null(mkdtemp(dir));
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/watch.out", dir);
    snprintf(ports, sizeof ports, "%d", port);
    char data[128];
    snprintf(data, sizeof data, "%s/data", dir);
    pid_t node = ttool_spawn(
        kv, (char *const[]){kv, "node", "--bind", bind, "--new-cluster", "--data", data, "--fast",
                            NULL},
        NULL);
    assert_true(node > 0);
    int rc = -1;
    for (int i = 0; i < 100 && (rc = ttool_runf(kv, out, OUT_CAP, "put %d a 1 local", port)); i++)
        usleep(100000);
    assert_int_equal(rc, 0);
    pid_t watcher = ttool_spawn(kv, (char *const[]){kv, "watch", ports, NULL}, log);
    assert_true(watcher > 0);
    log_cond_t c = {log, "+ a = 1"};
    if (!wait_until(log_cond, &c, 10000 * tscale()))
        fail_msg("the watch did not print the map");
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "put %d k v local", port), 0);
    assert_int_equal(ttool_runf(kv, out, OUT_CAP, "del %d k local", port), 0);
    c.what = "- k\n";
    if (!wait_until(log_cond, &c, 10000 * tscale()))
        fail_msg("the watch did not print the delete");
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *put = strstr(buf, "+ k = v\n"), *del = strstr(buf, "- k\n");
    if (!put || !del || put > del)
        fail_msg("expected '+ k = v' then '- k':\n%s", buf);
    kill(watcher, SIGINT);
    int st = 0;
    assert_int_equal(waitpid(watcher, &st, 0), watcher);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    kill(node, SIGKILL);
    waitpid(node, NULL, 0);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    out = calloc(1, OUT_CAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvstore_no_quorum_outside_a_cluster),
        cmocka_unit_test(test_payments_base_port),
        cmocka_unit_test(test_kvstore_watch_sees_put_then_delete),
        cmocka_unit_test(test_payments),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(out);
    return rc;
}
