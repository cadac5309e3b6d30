/*  test_kept_membership.c — a majority acknowledged before every node of a cluster is killed and a
    majority read after it intersect (KEPT MEMBERSHIP in membership.h), tried the way the finding
    was made: three kvstore processes (release build/bin/kvstore, LMDB with synced writes), the
    same seed list, SIGSTOP and SIGKILL.

    One node is stopped, a majority write is acknowledged by the other two, all three are killed,
    and the stopped one (the first seed) is restarted alone: it must not form a cluster of one
    (one of three kept identities answered), and its majority read and write must be refused (no
    quorum), not answered "no such key" from its own copy. A second node restarted beside it
    brings a majority of the kept membership: the first seed forms the cluster, the second joins,
    and the majority read finds the value in the second node's store. A node whose data directory was emptied is a new identity and does not make a majority
    of the old one; `shoal-cluster forget` drops an identity for good.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procs.h"
#include "tools.h"

#define OUT_CAP (1u << 20)
#define N 3

static char kv[4096], tool[4096], dir[64];
static char *out;
static int ports[N];
static pid_t pids[N];

#define now_ms ttool_now_ms

static void start(int i)
{
    char bind[64], data[128], seeds[N][64], log[128];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", ports[i]);
    snprintf(data, sizeof data, "%s/kv%d", dir, i);
    snprintf(log, sizeof log, "%s/kv%d.log", dir, i);
    for (int k = 0; k < N; k++)
        snprintf(seeds[k], sizeof seeds[k], "tcp://127.0.0.1:%d", ports[k]);
    pids[i] = ttool_spawn(kv,
                          (char *const[]){kv, "node", "--bind", bind, "--seed", seeds[0], "--seed",
                                          seeds[1], "--seed", seeds[2], "--data", data, "--fast",
                                          NULL},
                          log);
    assert_true(pids[i] > 0);
}

static void kill_node(int i, int sig)
{
    if (pids[i] > 0) {
        kill(pids[i], sig);
        if (sig == SIGKILL) {
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
    }
}

#define kvcmd(...) ttool_runf(kv, out, OUT_CAP, __VA_ARGS__)

/* node i's log has `line` */
static bool log_has(int i, const char *line)
{
    char path[128], cmd[256];
    snprintf(path, sizeof path, "%s/kv%d.log", dir, i);
    snprintf(cmd, sizeof cmd, "grep -qF '%s' '%s'", line, path);
    return system(cmd) == 0;
}

/* Until node i's view counts `up` members Up (its own included), or the deadline. */
static bool wait_up(int i, int up, int timeout_ms)
{
    char args[128];
    snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d --json members", ports[i]);
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; usleep(100000)) {
        bool converged;
        if (ttool_run(tool, args, out, OUT_CAP) == 0 &&
            ttool_members_up(out, NULL, &converged) == up && converged)
            return true;
    }
    return false;
}

static void dump_logs(void)
{
    ttool_tail_logs(dir, "kv", N, 15);
}

static int setup(void **state)
{
    (void)state;
    out = calloc(1, OUT_CAP);
    if (!ttool_find("kvstore", kv, sizeof kv) || !ttool_find("shoal-cluster", tool, sizeof tool))
        fail_msg("build/bin/kvstore or shoal-cluster is missing: scons check builds them");
    snprintf(dir, sizeof dir, "/tmp/shoal-kept-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < N; i++)
        ports[i] = tfree_port();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++) {
        kill_node(i, SIGCONT);
        kill_node(i, SIGKILL);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        print_message("could not remove %s\n", dir);
    free(out);
    return 0;
}

static void test_majorities_intersect_across_a_full_restart(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        start(i);
    if (!wait_up(1, N, 20000)) {
        dump_logs();
        fail_msg("the three kvstore nodes did not come Up");
    }
    /* node 0 paused: the majority write is acknowledged by nodes 1 and 2 */
    kill_node(0, SIGSTOP);
    assert_int_equal(kvcmd("put %d k one majority", ports[1]), 0);
    for (int i = 1; i < N; i++)
        kill_node(i, SIGKILL);
    kill_node(0, SIGKILL);

    /* node 0 alone: the first seed, but its kept membership has three identities and no other
       answers, so it does not form a cluster of one (a seed cut off by a partition would form a
       second cluster so); in no cluster, it has no majority either */
    start(0);
    char args[128];
    snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d members", ports[0]);
    int rc = -1;
    for (int64_t end = now_ms() + 10000; now_ms() < end && rc != 0; usleep(100000))
        rc = ttool_run(tool, args, out, OUT_CAP);
    assert_int_equal(rc, 0);
    /* past seed-node-timeout it decides, and says it waits */
    bool waits = false;
    for (int64_t end = now_ms() + 10000; now_ms() < end && !waits; usleep(100000))
        waits = log_has(0, "the first seed waits to form a cluster");
    if (!waits) {
        dump_logs();
        fail_msg("node 0 did not say that it waits to form a cluster");
    }
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 0);
    if (!strstr(out, " is in no cluster since ")) {
        dump_logs();
        fail_msg("a first seed alone with a kept membership of three formed a cluster: %s", out);
    }
    rc = kvcmd("get %d k majority", ports[0]);
    if (rc != 1 || !strstr(out, "no quorum")) {
        dump_logs();
        fail_msg("a lone restarted node answered a majority read (exit %d): %s", rc, out);
    }
    assert_int_equal(kvcmd("put %d other x majority", ports[0]), 1);
    assert_non_null(strstr(out, "no quorum"));
    assert_int_equal(kvcmd("get %d k local", ports[0]), 1); /* it never had it */
    assert_non_null(strstr(out, "no such key"));
    snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d --json members", ports[0]);
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 0);
    assert_non_null(strstr(out, "\"kept\":[")); /* the view shows what majorities count */

    /* node 1 back: it answers that it is in no cluster either, which makes two of the three
       kept identities: node 0 forms the cluster, node 1 joins, and node 1's store has the
       value */
    start(1);
    if (!wait_up(0, 2, 20000)) {
        dump_logs();
        fail_msg("node 1 did not join node 0's cluster");
    }
    rc = -1;
    for (int64_t end = now_ms() + 10000; now_ms() < end && rc != 0; usleep(100000))
        rc = kvcmd("get %d k majority", ports[0]);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "k = one"));
    assert_int_equal(kvcmd("put %d after x majority", ports[0]), 0);

    /* node 2 never comes back (its disk is lost for good): its identity is kept until an
       operator forgets it, on every member reached */
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 0);
    char orphan[64] = "";
    const char *k = strstr(out, "\"kept\":[");
    assert_non_null(k);
    const char *endk = strchr(k, ']');
    assert_non_null(endk);
    for (const char *q = strchr(k, '"' ) ? k + 8 : NULL; q && q < endk && !*orphan;) {
        const char *b = strchr(q, '"'), *e = b ? strchr(b + 1, '"') : NULL;
        if (!b || !e || b > endk)
            break;
        char id[64], member_id[80];
        snprintf(id, sizeof id, "%.*s", (int)(e - b - 1), b + 1);
        snprintf(member_id, sizeof member_id, "\"id\":\"%s\"", id);
        if (!strstr(out, member_id))
            snprintf(orphan, sizeof orphan, "%s", id);
        q = e + 1;
    }
    assert_true(*orphan);
    snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d forget not-an-identity", ports[0]);
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 1);
    snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d forget %s", ports[0], orphan);
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 0);
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d --json members", ports[i]);
        bool gone = false;
        for (int64_t end = now_ms() + 5000; now_ms() < end && !gone; usleep(100000))
            gone = ttool_run(tool, args, out, OUT_CAP) == 0 && !strstr(out, orphan);
        if (!gone)
            fail_msg("node %d still keeps the forgotten identity %s: %s", i, orphan, out);
    }
    assert_int_equal(kvcmd("put %d after-forget x majority", ports[1]), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_majorities_intersect_across_a_full_restart, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
