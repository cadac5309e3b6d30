/*  test_session_judge.c — examples/session-judge in its short form, run as a user runs it (the
    release build/bin/session-judge, which `scons check` builds too; SHOAL_SESSION_JUDGE=path
    runs another build), its summary read.

    --short: 60 games x 60 events over 8 Redis streams (redis-server, which the example starts in
    a temp directory), three judge nodes; a fourth joins and the first leaves while the events
    flow. The example itself checks its run and exits 0 only when everything held; the test also
    reads the key lines, so that a summary that stopped saying what matters fails here: every
    event judged, 0 gaps, 0 reorders, no two judges of one game at once (from the nodes'
    witness lines, not from the judges' own state), judges, readers and shards that moved. It runs
    on the ports given with --base-port (a free block the test found).
    Bad options: a clear message and exit 2, before anything starts; a --base-port block with a
    port in use: exit 1, saying so, before redis-server starts.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "procs.h"
#include "tools.h"

#define OUT_CAP (8u << 20)

static char *out;
static char judge[4096];

static void must_contain(const char *text, const char *want)
{
    if (!strstr(text, want)) {
        const char *tail = strlen(text) > 4000 ? text + strlen(text) - 4000 : text;
        print_message("expected \"%s\" in the output, whose end is:\n%s\n", want, tail);
        fail();
    }
}

/* The number after `key` in the output, or -1. */
static long number_after(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    char dir[4096];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, p, prog);
        if (n && access(dir, X_OK) == 0)
            return true;
        p += n + (p[n] == ':');
    }
    return false;
}

/* true when port on 127.0.0.1 can be bound now */
static bool port_free(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0)
        close(s);
    return ok;
}

/* B such that B..B+5 (the driver, four judge nodes) and B+20 (redis) were free a moment ago */
static int free_block(void)
{
    for (int tries = 0; tries < 1000; tries++) {
        int b = tfree_port();
        bool ok = b > 0 && b + 20 < 65536 && port_free(b + 20);
        for (int i = 1; i <= 5 && ok; i++)
            ok = port_free(b + i);
        if (ok)
            return b;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    const char *env = getenv("SHOAL_SESSION_JUDGE");
    if (env && *env)
        snprintf(judge, sizeof judge, "%s", env);
    else if (!ttool_find("session-judge", judge, sizeof judge))
        judge[0] = 0;
    return 0;
}

static void test_short_run(void **state)
{
    (void)state;
    if (!judge[0] || access(judge, X_OK) != 0)
        fail_msg("build/bin/session-judge is missing: scons check builds the examples "
                 "(or set SHOAL_SESSION_JUDGE to the binary)");
    if (!on_path("redis-server"))
        fail_msg("redis-server is not on PATH: session-judge keeps its log in Redis Streams; "
                 "install the Debian package redis-server (sh tools/install-deps.sh)");
    int base = free_block();
    assert_true(base > 0);
    char args[64], want[128];
    snprintf(args, sizeof args, "--short --base-port %d", base);
    int rc = ttool_run(judge, args, out, OUT_CAP);
    snprintf(want, sizeof want,
             "ports: the driver on 127.0.0.1:%d, judge nodes on %d..%d, redis-server on %d\n", base,
             base + 1, base + 4, base + 20);
    must_contain(out, want);
    must_contain(out, "judge nodes 1..3 Up; 8 readers (a sharded daemon process)");
    must_contain(out, "judge node 4 starts and joins");
    must_contain(out, "judge node 1 leaves (SIGTERM: graceful shutdown)");
    must_contain(out, "events: 3600 written (0 not acknowledged by Redis), 3600 judged");
    must_contain(out, "order: 0 gaps, 0 reorders, 0 games incomplete");
    must_contain(out, ", 0 overlapping in time (one game judged by two at once)");
    must_contain(out, "witness lines: 0 numbers missing, 0 games incomplete");
    /* node 1 left with judges and readers on it: they moved, and the coordinator said so */
    long judge_moves = number_after(out, "(one game judged by two at once); ");
    long reader_moves = number_after(out, " partition readers, ");
    long shard_moves = number_after(out, "until all was judged): judge ");
    if (judge_moves <= 0 || reader_moves <= 0 || shard_moves <= 0) {
        print_message("expected judges, readers and shards that moved (%ld, %ld, %ld)\n",
                      judge_moves, reader_moves, shard_moves);
        fail();
    }
    must_contain(out, "\nOK: every game judged by one judge at a time");
    assert_int_equal(rc, 0);
}

static void test_bad_options(void **state)
{
    (void)state;
    if (!judge[0] || access(judge, X_OK) != 0)
        fail_msg("build/bin/session-judge is missing: scons check builds the examples");
    static const char *const bad[] = {"--partitions 0", "--nodes 99",     "--games x",
                                      "--events-per-game", "--frobnicate", "--base-port 0",
                                      "--base-port 65530"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = ttool_run(judge, bad[i], out, OUT_CAP);
        if (rc != 2 || !strstr(out, "session-judge: bad option or value")) {
            print_message("session-judge %s: exit %d, output:\n%s\n", bad[i], rc, out);
            fail();
        }
    }
    /* a node without its run's arguments refuses to start */
    int rc = ttool_run(judge, "--node --bind tcp://127.0.0.1:1", out, OUT_CAP);
    assert_int_equal(rc, 2);
    must_contain(out, "--node needs");
    /* a base port block with a port some other program listens on (node 2's) */
    int s = socket(AF_INET, SOCK_STREAM, 0), base = 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int tries = 0; tries < 100 && !base; tries++) {
        base = free_block();
        a.sin_port = htons((uint16_t)(base + 2));
        if (!base || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 1) != 0)
            base = 0;
    }
    assert_true(base > 0);
    char args[64], want[128];
    snprintf(args, sizeof args, "--short --base-port %d", base);
    assert_int_equal(ttool_run(judge, args, out, OUT_CAP), 1);
    snprintf(want, sizeof want, "session-judge: --base-port %d: a port of %d..%d or %d is in use",
             base, base, base + 4, base + 20);
    must_contain(out, want);
    close(s);
}

int main(void)
{
    out = calloc(1, OUT_CAP);
    if (!out)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_short_run),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    free(out);
    return rc;
}
