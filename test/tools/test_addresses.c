/*  test_addresses.c — one address syntax (issue 37, item 5), run through the release programs as
    an operator types them: HOST:PORT and tcp://HOST:PORT wherever a node is named, host names
    resolved where a program binds or connects (the node id records the address), --http with a
    name, the kvstore client reaching a node on 127.0.0.2, SHOAL_NODE for shoal-cluster, and
    shoal-cluster pointed at a management endpoint saying so within two seconds instead of timing
    out. --config FILE on every program that starts a node (a good file's setting shows, a broken
    one is refused naming it, exit 1), and seeds a file names by a host name resolved. Every program
   refuses "nonsense:xx" naming the form it expected (cli.h, NODE ADDRESSES). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "http.h"
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

/* A file of `text` in tmp named `name`; its path in path. */
static void write_file(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* `program ARGS --config BROKEN` exits 1 naming the file (args: the rest of its command line). */
static void refuses_broken_config(const char *program, const char *args)
{
    char path[4096], cfg[300];
    prog(program, path, sizeof path);
    write_file("broken.cfg", "shoal\n    cluster\n        no-such-key = 1\n", cfg, sizeof cfg);
    int rc = ttool_runf(path, out, sizeof out, "%s --config %s", args, cfg);
    if (rc != 1 || !strstr(out, "broken.cfg"))
        fail_msg("%s --config BROKEN: exit %d, want 1 naming the file:\n%s", program, rc, out);
}

/* Starts argv (argv[0] the program's name) with stdout and stderr in log, then waits up to
   `wait_ms` for `shoal-cluster --node bind members` to show `want`: false when it never does
   (out holds the last answer). The process is killed either way. */
/* Runs the node and polls `shoal-cluster members` until its table shows `want` and, when given,
   `also` in the same answer (a role appears while its member is still Joining: wait for both) */
static bool members_show2(char **argv, const char *log, const char *bind, const char *want,
                          const char *also, int64_t wait_ms)
{
    char path[4096], sc[4096];
    prog(argv[0], path, sizeof path);
    prog("shoal-cluster", sc, sizeof sc);
    argv[0] = path;
    int pid = ttool_spawn(path, argv, log);
    assert_true(pid > 0);
    bool seen = false;
    for (int64_t end = now_ms() + wait_ms; now_ms() < end && !seen; usleep(100000))
        seen = ttool_runf(sc, out, sizeof out, "--node %s members", bind) == 0 &&
               strstr(out, want) && (!also || strstr(out, also));
    stop(pid);
    return seen;
}

static bool members_show(char **argv, const char *log, const char *bind, const char *want,
                         int64_t wait_ms)
{
    return members_show2(argv, log, bind, want, NULL, wait_ms);
}

static const char *const ROLE_CFG = "shoal\n    cluster\n        roles = \"from-the-file\"\n";

/* payments --node --config FILE: the file's role beside the node's own "pay" */
static void test_payments_config(void **state)
{
    (void)state;
    refuses_broken_config("payments", "--node --bind 127.0.0.1:1 --seed 127.0.0.1:1");
    char cfg[300], bind[64], data[300], log[300];
    write_file("payments.cfg", ROLE_CFG, cfg, sizeof cfg);
    snprintf(bind, sizeof bind, "127.0.0.1:%d", tfree_port());
    snprintf(data, sizeof data, "%s/pay", tmp);
    snprintf(log, sizeof log, "%s/pay.log", tmp);
    char *argv[] = {"payments", "--node", "--bind",   bind, "--seed", bind,
                    "--data",   data,     "--config", cfg,  NULL};
    if (!members_show(argv, log, bind, "from-the-file", 15000))
        fail_msg("payments --config: the file's role not among the members:\n%s", out);
    if (!strstr(out, "pay"))
        fail_msg("payments --config: the node lost its own role:\n%s", out);
}

/* session-judge --node --config FILE (its readers find no Redis on port 1: the node runs on) */
static void test_session_judge_config(void **state)
{
    (void)state;
    refuses_broken_config("session-judge", "--node --bind 127.0.0.1:1 --seed 127.0.0.1:1 --redis "
                                           "1 --index 1 --partitions 2 --dir /tmp");
    char cfg[300], bind[64], log[300];
    write_file("judge.cfg", ROLE_CFG, cfg, sizeof cfg);
    snprintf(bind, sizeof bind, "127.0.0.1:%d", tfree_port());
    snprintf(log, sizeof log, "%s/judge.log", tmp);
    char *argv[] = {"session-judge", "--node", "--bind",   bind, "--seed", bind,
                    "--redis",       "1",      "--index",  "1",  "--dir",  tmp,
                    "--partitions",  "2",      "--config", cfg,  NULL};
    if (!members_show(argv, log, bind, "from-the-file", 15000))
        fail_msg("session-judge --config: the file's role not among the members:\n%s", out);
}

/* chaos-node --config FILE, and the file's seeds when no --seed is given: its own address under
   a host name (localhost), which the node must recognise as itself to form the cluster */
static void test_chaos_node_config(void **state)
{
    (void)state;
    char data[300], lg[300];
    snprintf(data, sizeof data, "%s/chaos0", tmp);
    snprintf(lg, sizeof lg, "%s/chaos0.events", tmp);
    char args[800];
    snprintf(args, sizeof args, "--index 1 --bind 127.0.0.1:1 --data %s --log %s", data, lg);
    refuses_broken_config("chaos-node", args);
    int port = tfree_port();
    char cfg[300], text[300], bind[64], log[300];
    snprintf(text, sizeof text,
             "shoal\n    cluster\n        roles = \"from-the-file\"\n"
             "        seed-nodes = [\"tcp://localhost:%d\"]\n",
             port);
    write_file("chaos.cfg", text, cfg, sizeof cfg);
    snprintf(bind, sizeof bind, "127.0.0.1:%d", port);
    snprintf(data, sizeof data, "%s/chaos1", tmp);
    snprintf(log, sizeof log, "%s/chaos1.log", tmp);
    char *argv[] = {"chaos-node", "--index", "1", "--bind",   bind, "--data",
                    data,         "--log",   lg,  "--config", cfg,  NULL};
    if (!members_show2(argv, log, bind, "from-the-file", " Up ", 15000))
        fail_msg("chaos-node --config: no Up member with the file's role:\n%s", out);
}

/* shoal-member --config FILE whose seed-nodes name this node by a host name: resolved, the node
   knows itself as the first seed and forms the cluster (before: it waited for itself forever) */
static void test_config_seed_by_name(void **state)
{
    (void)state;
    int port = tfree_port();
    char cfg[300], text[300], bind[64], log[300];
    snprintf(text, sizeof text,
             "shoal\n    cluster\n        seed-nodes = [\"tcp://localhost:%d\"]\n", port);
    write_file("seed-by-name.cfg", text, cfg, sizeof cfg);
    snprintf(bind, sizeof bind, "127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/member.log", tmp);
    char *argv[] = {"shoal-member", "--bind", bind, "--config", cfg, "--fast", NULL};
    if (!members_show(argv, log, bind, "Up", 15000))
        fail_msg("seed-nodes = [tcp://localhost:PORT] of the node itself: not Up:\n%s", out);
}

/* counter-service --config FILE: its sharding section (number-of-shards) is taken */
static void test_counter_service_config(void **state)
{
    (void)state;
    refuses_broken_config("counter-service", "node --bind 127.0.0.1:1");
    char cs[4096], cfg[300], bind[64], log[300];
    prog("counter-service", cs, sizeof cs);
    write_file("counter.cfg",
               "shoal\n    cluster\n        sharding\n            number-of-shards = 7\n", cfg,
               sizeof cfg);
    snprintf(bind, sizeof bind, "127.0.0.1:%d", tfree_port());
    snprintf(log, sizeof log, "%s/counter.log", tmp);
    char *argv[] = {cs, "node", "--bind", bind, "--fast", "--config", cfg, NULL};
    int pid = ttool_spawn(cs, argv, log);
    assert_true(pid > 0);
    bool seen = false;
    for (int64_t end = now_ms() + 15000; now_ms() < end && !seen; usleep(100000))
        seen = file_has(log, "7 shards)");
    stop(pid);
    if (!seen)
        fail_msg("counter-service --config: number-of-shards = 7 not taken (see %s)", log);
}

/* replicated-map node NODE --config FILE: its management section (a token for reads) is taken */
static void test_replicated_map_config(void **state)
{
    (void)state;
    refuses_broken_config("replicated-map", "node 127.0.0.1:1");
    char rm[4096], cfg[300], token[300], text[600], node[64], http[64], log[300];
    prog("replicated-map", rm, sizeof rm);
    write_file("token", "secret-token\n", token, sizeof token);
    snprintf(text, sizeof text,
             "shoal\n    management\n        http\n            token-file = \"%s\"\n"
             "            token-for-reads = on\n",
             token);
    write_file("map.cfg", text, cfg, sizeof cfg);
    int hport = tfree_port();
    snprintf(node, sizeof node, "127.0.0.1:%d", tfree_port());
    snprintf(http, sizeof http, "%d", hport);
    snprintf(log, sizeof log, "%s/map.log", tmp);
    char *argv[] = {rm, "node", node, "--http", http, "--config", cfg, NULL};
    int pid = ttool_spawn(rm, argv, log);
    assert_true(pid > 0);
    int status = -1;
    for (int64_t end = now_ms() + 10000; now_ms() < end && status <= 0; usleep(100000))
        status = thttp_status((uint16_t)hport, "/metrics");
    int health = thttp_status((uint16_t)hport, "/health/alive");
    stop(pid);
    if (status != 401)
        fail_msg("replicated-map --config: GET /metrics answered %d, want 401 (token-for-reads "
                 "from the file; /health/alive %d)",
                 status, health);
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
        cmocka_unit_test(test_kvstore_on_127_0_0_2),   cmocka_unit_test(test_bind_localhost),
        cmocka_unit_test(test_nonsense_refused),       cmocka_unit_test(test_kvstore_config),
        cmocka_unit_test(test_payments_config),        cmocka_unit_test(test_session_judge_config),
        cmocka_unit_test(test_chaos_node_config),      cmocka_unit_test(test_config_seed_by_name),
        cmocka_unit_test(test_counter_service_config), cmocka_unit_test(test_replicated_map_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
