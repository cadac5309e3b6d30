/*  test_addresses.c — one address syntax (issue 37, item 5), run through the release programs as
    an operator types them: HOST:PORT and tcp://HOST:PORT wherever a node is named, host names
    resolved where a program binds or connects (the node id records the address), --http with a
    name, the kvstore client reaching a node on 127.0.0.2, SHOAL_NODE for shoal-cluster, and
    shoal-cluster pointed at a management endpoint saying so within two seconds instead of timing
    out. Every program refuses "nonsense:xx" naming the form it expected (cli.h, NODE
    ADDRESSES). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "procs.h"
#include "tools.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OUT_CAP 65536

static char out[OUT_CAP];
static char tmp[] = "/tmp/shoal-test-addresses-XXXXXX";

static void prog(const char *name, char *path, size_t cap)
{
    if (!ttool_find(name, path, cap))
        fail_msg("%s is missing: build the release programs", name);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    static char buf[OUT_CAP];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static void stop(int pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* A kvstore node bound on 127.0.0.2 (--bind HOST:PORT, --http localhost:PORT): the client reaches
   it by HOST:PORT and by tcp://HOST:PORT, shoal-cluster by SHOAL_NODE, and shoal-cluster given
   its management endpoint says so at once. */
static void test_kvstore_on_127_0_0_2(void **state)
{
    (void)state;
    char kv[4096], sc[4096], data[300], log[300], bind[64], http[64], args[600];
    prog("kvstore", kv, sizeof kv);
    prog("shoal-cluster", sc, sizeof sc);
    int port = tfree_port(), hport = tfree_port();
    snprintf(data, sizeof data, "%s/kv", tmp);
    snprintf(log, sizeof log, "%s/kv.log", tmp);
    snprintf(bind, sizeof bind, "127.0.0.2:%d", port);
    snprintf(http, sizeof http, "localhost:%d", hport);
    char *argv[] = {kv,   "node",   "--bind", bind, "--new-cluster", "--fast", "--data",
                    data, "--http", http,     NULL};
    int pid = ttool_spawn(kv, argv, log);
    assert_true(pid > 0);
    int rc = -1;
    for (int64_t end = now_ms() + 15000; now_ms() < end; usleep(100000)) {
        rc = ttool_runf(kv, out, sizeof out, "put 127.0.0.2:%d k v local", port);
        if (rc == 0)
            break;
    }
    if (rc != 0)
        fprintf(stderr, "kvstore put: %s\n", out);
    assert_int_equal(rc, 0);
    rc = ttool_runf(kv, out, sizeof out, "get tcp://127.0.0.2:%d k local", port);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "k = v"));

    /* SHOAL_NODE: the default node of shoal-cluster */
    snprintf(args, sizeof args, "127.0.0.2:%d", port);
    setenv("SHOAL_NODE", args, 1);
    rc = ttool_run(sc, "members", out, sizeof out);
    unsetenv("SHOAL_NODE");
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, args));

    /* --http localhost:PORT was accepted and serves on 127.0.0.1; shoal-cluster pointed there
       says it is HTTP, within two seconds, not after its timeout */
    int64_t t0 = now_ms();
    rc = ttool_runf(sc, out, sizeof out, "--node localhost:%d --timeout 10000 members", hport);
    int64_t took = now_ms() - t0;
    fprintf(stderr, "shoal-cluster at the HTTP port: exit %d after %lld ms: %s", rc,
            (long long)took, out);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "answers HTTP"));
    assert_true(took < 2500);
    stop(pid);
}

/* --bind tcp://localhost:PORT binds 127.0.0.1 (libzmq alone said "No such device"), and the node
   id records 127.0.0.1, the address peers dial. */
static void test_bind_localhost(void **state)
{
    (void)state;
    char sm[4096], log[300], bind[64], id[64];
    prog("shoal-member", sm, sizeof sm);
    int port = tfree_port();
    snprintf(log, sizeof log, "%s/member.log", tmp);
    snprintf(bind, sizeof bind, "tcp://localhost:%d", port);
    snprintf(id, sizeof id, "127.0.0.1:%d:", port);
    char *argv[] = {sm, "--bind", bind, "--quiet", NULL};
    int pid = ttool_spawn(sm, argv, log);
    assert_true(pid > 0);
    bool up = false;
    for (int64_t end = now_ms() + 10000; now_ms() < end && !up; usleep(50000))
        up = file_has(log, "listening at");
    stop(pid);
    if (!up || !file_has(log, id)) {
        FILE *f = fopen(log, "r");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        if (f)
            fclose(f);
        out[n] = 0;
        fail_msg("shoal-member --bind %s: no node id %s... in:\n%s", bind, id, out);
    }
}

/* Every program that names a node refuses "nonsense:xx" with exit 2, naming what it expected. */
static void test_nonsense_refused(void **state)
{
    (void)state;
    static const struct {
        const char *prog, *args, *expect;
    } cases[] = {
        {"shoal-member", "--bind nonsense:xx", "expected HOST:PORT or tcp://HOST:PORT"},
        {"shoal-member", "--seed nonsense:xx", "expected HOST:PORT or tcp://HOST:PORT"},
        {"shoal-member", "--http nonsense:xx", "expected [HOST:]PORT"},
        {"shoal-cluster", "--node nonsense:xx members", "expected HOST:PORT or tcp://HOST:PORT"},
        {"shoal-cluster", "join nonsense:xx", "expected HOST:PORT or tcp://HOST:PORT"},
        {"ddata-dump", "--node nonsense:xx", "expected HOST:PORT or tcp://HOST:PORT"},
        {"kvstore", "get nonsense:xx k", "expected HOST:PORT or tcp://HOST:PORT"},
        {"kvstore", "node --bind nonsense:xx --data /nonexistent/x",
         "expected HOST:PORT or tcp://HOST:PORT"},
        {"kvstore", "node --bind 127.0.0.1:1 --http nonsense:xx --data /nonexistent/x",
         "expected [HOST:]PORT"},
        {"counter-service", "node --bind nonsense:xx", "expected HOST:PORT or tcp://HOST:PORT"},
        {"counter-service", "--node nonsense:xx ask counter a get",
         "expected HOST:PORT or tcp://HOST:PORT"},
        {"replicated-map", "get nonsense:xx k", "expected HOST:PORT or tcp://HOST:PORT"},
        {"payments", "--node --bind nonsense:xx --seed 127.0.0.1:1",
         "expected HOST:PORT or tcp://HOST:PORT"},
        {"session-judge", "--node --bind nonsense:xx --seed 127.0.0.1:1",
         "expected HOST:PORT or tcp://HOST:PORT"},
        {"chaos-node", "--bind nonsense:xx --data /nonexistent/x --log /dev/null",
         "expected HOST:PORT or tcp://HOST:PORT"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[4096];
        prog(cases[i].prog, path, sizeof path);
        int rc = ttool_run(path, cases[i].args, out, sizeof out);
        if (rc != 2 || !strstr(out, cases[i].expect) || !strstr(out, "nonsense:xx")) {
            fprintf(stderr, "[FAIL] %s %s: exit %d, want 2 and \"%s\":\n%s\n", cases[i].prog,
                    cases[i].args, rc, cases[i].expect, out);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* --config FILE on kvstore: the file's settings are taken (a role shows in members), and a
   broken file is refused naming it (exit 1), where the flag was refused as unknown before. */
static void test_kvstore_config(void **state)
{
    (void)state;
    char kv[4096], sc[4096], data[300], log[300], cfg[300], bind[64];
    prog("kvstore", kv, sizeof kv);
    prog("shoal-cluster", sc, sizeof sc);
    snprintf(cfg, sizeof cfg, "%s/bad.cfg", tmp);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("shoal\n    cluster\n        no-such-key = 1\n", f);
    fclose(f);
    int rc = ttool_runf(kv, out, sizeof out, "node --bind 127.0.0.1:1 --data %s/d0 --config %s",
                        tmp, cfg);
    if (rc != 1 || !strstr(out, "bad.cfg"))
        fail_msg("kvstore --config BROKEN: exit %d, want 1 naming the file:\n%s", rc, out);

    snprintf(cfg, sizeof cfg, "%s/good.cfg", tmp);
    f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("shoal\n    cluster\n        roles = \"from-the-file\"\n", f);
    fclose(f);
    int port = tfree_port();
    snprintf(data, sizeof data, "%s/kvc", tmp);
    snprintf(log, sizeof log, "%s/kvc.log", tmp);
    snprintf(bind, sizeof bind, "127.0.0.1:%d", port);
    char *argv[] = {kv,   "node",     "--bind", bind, "--new-cluster", "--fast", "--data",
                    data, "--config", cfg,      NULL};
    int pid = ttool_spawn(kv, argv, log);
    assert_true(pid > 0);
    bool seen = false;
    for (int64_t end = now_ms() + 15000; now_ms() < end && !seen; usleep(100000))
        seen = ttool_runf(sc, out, sizeof out, "--node %s members", bind) == 0 &&
               strstr(out, "from-the-file");
    stop(pid);
    if (!seen)
        fail_msg("kvstore --config: the file's role not among the members:\n%s", out);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    trm_tree(tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvstore_on_127_0_0_2),
        cmocka_unit_test(test_bind_localhost),
        cmocka_unit_test(test_nonsense_refused),
        cmocka_unit_test(test_kvstore_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
