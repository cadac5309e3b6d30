/*  test_ready_majority.c — /health/ready means "this node serves MAJORITY" (docs/operations.md;
    issue 36, item 7): three kvstore processes (release build/bin/kvstore, LMDB) form a cluster and
    keep its membership; all are killed; the first is restarted alone with --new-cluster. It is Up
    in a cluster of one, and refuses every MAJORITY write (one of three kept identities is back):
    its readiness probe must say 503, naming MAJORITY. On 672634c it answered 200 (ready). Once a
    second node is back, a majority of the kept membership is there and the probe says 200.
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

#include "cluster.h"
#include "http.h"
#include "procs.h"
#include "tools.h"

#define OUT_CAP (1u << 20)
#define N       3

static char kv[4096], dir[64];
static char *out;
static int ports[N], http[N];
static pid_t pids[N];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Node i: the first forms a new cluster, the others join it. */
static void start(int i, bool new_cluster)
{
    char bind[64], data[128], seed[64], hp[32], log[128];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", ports[i]);
    snprintf(data, sizeof data, "%s/kv%d", dir, i);
    snprintf(log, sizeof log, "%s/kv%d.log", dir, i);
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", ports[0]);
    snprintf(hp, sizeof hp, "127.0.0.1:%d", http[i]);
    if (new_cluster)
        pids[i] = ttool_spawn(kv,
                              (char *const[]){kv, "node", "--bind", bind, "--new-cluster", "--data",
                                              data, "--fast", "--http", hp, NULL},
                              log);
    else
        pids[i] = ttool_spawn(kv,
                              (char *const[]){kv, "node", "--bind", bind, "--seed", seed, "--data",
                                              data, "--fast", "--http", hp, NULL},
                              log);
    assert_true(pids[i] > 0);
}

static void kill_all(void)
{
    for (int i = 0; i < N; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}

/* GET path on node i until the body has `needle` (status any), or the deadline. */
static bool wait_body(int i, const char *path, const char *needle, int timeout_ms)
{
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; usleep(100000)) {
        thttp_resp_t r;
        bool ok = thttp_get((uint16_t)http[i], path, &r) && r.body && strstr(r.body, needle);
        if (ok)
            snprintf(out, OUT_CAP, "%s", r.body);
        thttp_free(&r);
        if (ok)
            return true;
    }
    return false;
}

/* The number of identities in the "kept" array of node i's /cluster/members (-1: none yet). */
static int kept_count(int i)
{
    thttp_resp_t r;
    int n = -1;
    if (thttp_get((uint16_t)http[i], "/cluster/members", &r) && r.status == 200) {
        const char *k = strstr(r.body, "\"kept\":[");
        if (k) {
            k += 8;
            const char *end = strchr(k, ']');
            n = 0;
            for (const char *p = k; end && p < end; p++)
                n += *p == '"';
            n /= 2;
        }
    }
    thttp_free(&r);
    return n;
}

static int setup(void **state)
{
    (void)state;
    out = calloc(1, OUT_CAP);
    if (!ttool_find("kvstore", kv, sizeof kv))
        fail_msg("build/bin/kvstore is missing: scons check builds it");
    snprintf(dir, sizeof dir, "/tmp/shoal-ready-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < N; i++) {
        ports[i] = tfree_port();
        do
            http[i] = tfree_port();
        while (http[i] == ports[i]);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kill_all();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        print_message("could not remove %s\n", dir);
    free(out);
    return 0;
}

static void ready_means_majority(void **state)
{
    (void)state;
    int wait = 30000 * tscale();
    start(0, true);
    start(1, false);
    start(2, false);
    for (int i = 0; i < N; i++)
        if (!wait_body(i, "/health/ready", "\"ready\":true", wait))
            fail_msg("node %d never ready: %s", i, out);
    for (int64_t end = now_ms() + wait; kept_count(0) < 3 && now_ms() < end;)
        usleep(100000);
    assert_int_equal(kept_count(0), 3);

    kill_all();
    start(0, true);
    /* Up in a cluster of one: the cluster check passes */
    if (!wait_body(0, "/cluster/members", "\"status\":\"Up\"", wait))
        fail_msg("node 0 not Up alone: %s", out);
    /* the premise: it refuses a MAJORITY write */
    int rc = ttool_runf(kv, out, OUT_CAP, "put %d k v majority", ports[0]);
    print_message("alone: kvstore put ... majority exits %d: %s", rc, out);
    assert_int_not_equal(rc, 0);
    thttp_resp_t r;
    assert_true(thttp_get((uint16_t)http[0], "/health/ready", &r));
    print_message("alone with 1 of 3 kept identities: /health/ready %d %s", r.status, r.body);
    int status = r.status;
    bool names = strstr(r.body, "MAJORITY") != NULL;
    thttp_free(&r);
    assert_int_equal(status, 503);
    assert_true(names);

    /* a second identity back: a majority of the kept membership, ready again */
    start(1, false);
    if (!wait_body(0, "/health/ready", "\"ready\":true", wait))
        fail_msg("node 0 not ready with 2 of 3 kept identities: %s", out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ready_means_majority, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
