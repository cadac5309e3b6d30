/*  test_rotation.c — rotating keys and certificates on a running cluster (docs/operations.md,
    "Rotating keys and certificates"), the way an operator does it, on real processes:

    - three shoal-member processes over CURVE, each with its own allow-list directory, and a
      client writing at MAJORITY through node 0 the whole time. Node 1 gets a new key pair: its
      new certificate is copied into every allow-list and each node is sent SIGHUP; node 1 leaves
      (SIGTERM) and starts again with the new key; the old certificate is taken off every list
      and SIGHUP again. Not one MAJORITY write fails, no member is downed, the old key is refused
      at the end and the new one admitted.
    - one shoal-member with its management endpoint on HTTPS with a bearer token: new token and
      certificate files, SIGHUP, and the endpoint (on the same port) serves the new certificate
      and takes only the new token.
    - the same without a signal (test_http_token_reloaded_by_shoal_cluster_reload): a new token
      file, `shoal-cluster reload` (POST /reload, authorized by the token in force), and only
      the new token is taken; on HTTPS, POST /reload answers 202 and the node serves the new
      certificate right after.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddata.h"
#include "procs.h"
#include "tools.h"

#define OUT_CAP (1u << 20)
#define N       3

static char member[4096], tool[4096], keygen[4096], dir[64];
static char *out;
static int ports[N];
static pid_t pids[N];
static char certs[N][256]; /* the certificate each node runs with */

#define now_ms ttool_now_ms

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0)
        fail_msg("command failed: %s", cmd);
}

static void keypair(const char *sub, int port)
{
    char args[512];
    if (port)
        snprintf(args, sizeof args, "%s/keys/%s --endpoint tcp://127.0.0.1:%d", dir, sub, port);
    else /* a client's key names no endpoint */
        snprintf(args, sizeof args, "%s/keys/%s", dir, sub);
    if (ttool_run(keygen, args, out, OUT_CAP) != 0)
        fail_msg("shoal-keygen %s: %s", args, out);
}

static void start(int i)
{
    char env1[320], env2[160], bind[64], seeds[N][64], log[128];
    snprintf(env1, sizeof env1, "SHOAL_CURVE_CERT=%s", certs[i]);
    snprintf(env2, sizeof env2, "SHOAL_CURVE_ALLOW=%s/allow%d", dir, i);
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", ports[i]);
    snprintf(log, sizeof log, "%s/n%d.log", dir, i);
    for (int k = 0; k < N; k++)
        snprintf(seeds[k], sizeof seeds[k], "tcp://127.0.0.1:%d", ports[k]);
    pids[i] =
        ttool_spawn("/usr/bin/env",
                    (char *const[]){"env", env1, env2, member, "--bind", bind, "--seed", seeds[0],
                                    "--seed", seeds[1], "--seed", seeds[2], "--fast", NULL},
                    log);
    assert_true(pids[i] > 0);
}

/* Waits for the process to exit by itself; false at the deadline. */
static bool wait_exit(pid_t pid, int timeout_ms)
{
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; usleep(50000)) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return true;
    }
    return false;
}

/* Node i, asked with the ops key, sees `up` members Up and a converged view. */
static bool wait_up(int i, int up, int timeout_ms)
{
    char args[4800];
    snprintf(args, sizeof args,
             "SHOAL_CURVE_CERT=%s/keys/ops/node.cert SHOAL_CURVE_ALLOW=%s/allow%d %s --node "
             "tcp://127.0.0.1:%d --json members",
             dir, dir, i, tool, ports[i]);
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; usleep(100000)) {
        int all;
        bool converged;
        if (ttool_run("/usr/bin/env", args, out, OUT_CAP) == 0 &&
            ttool_members_up(out, &all, &converged) == up && all == up && converged)
            return true;
    }
    print_message("node %d, last answer: %.2000s\n", i, out);
    return false;
}

/* The log of node i (or file) holds `text` at least `times` times. */
static int count_in(const char *file, const char *text)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return 0;
    size_t n = fread(out, 1, OUT_CAP - 1, f);
    fclose(f);
    out[n] = 0;
    int k = 0;
    for (const char *p = out; (p = strstr(p, text)); p++)
        k++;
    return k;
}

static bool wait_log(int i, const char *text, int times, int timeout_ms)
{
    char file[128];
    snprintf(file, sizeof file, "%s/n%d.log", dir, i);
    for (int64_t end = now_ms() + timeout_ms; now_ms() < end; usleep(50000))
        if (count_in(file, text) >= times)
            return true;
    return false;
}

static void dump_logs(void)
{
    ttool_tail_logs(dir, "n", N, 25);
}

static int setup(void **state)
{
    (void)state;
    out = calloc(1, OUT_CAP);
    if (!ttool_find("shoal-member", member, sizeof member) ||
        !ttool_find("shoal-cluster", tool, sizeof tool) ||
        !ttool_find("shoal-keygen", keygen, sizeof keygen))
        fail_msg("build/bin/shoal-member, shoal-cluster or shoal-keygen is missing: scons check "
                 "builds them");
    snprintf(dir, sizeof dir, "/tmp/shoal-rotation-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < N; i++)
        ports[i] = tfree_port();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (getenv("SHOAL_TEST_KEEP")) /* the logs, to read */
        print_message("kept %s\n", dir);
    else if (system(cmd) != 0)
        print_message("could not remove %s\n", dir);
    free(out);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The writer: MAJORITY increments through node 0 until told to stop.
 */
typedef struct {
    char endpoint[64], cert[256], allow[128];
    atomic_bool stop;
    atomic_int ok, failed;
    int first_error;
    char first_detail[256];
} writer_t;

static void *writer_run(void *arg)
{
    writer_t *w = arg;
    int err = 0;
    shoal_client_t *c = shoal_client_new_curve(w->endpoint, 5000, w->cert, w->allow, &err);
    if (!c) {
        w->first_error = err ? err : SHOAL_EIO;
        atomic_fetch_add(&w->failed, 1);
        return NULL;
    }
    shoal_consistency_t wc = {.level = SHOAL_MAJORITY, .timeout_ms = 3000};
    shoal_client_op_t op = {.type = "GCounter", .op = "increment", .n = 1};
    while (!atomic_load(&w->stop)) {
        int rc = shoal_client_update(c, "", "rotation-writes", &wc, &op);
        if (rc == 0) {
            atomic_fetch_add(&w->ok, 1);
        } else if (atomic_fetch_add(&w->failed, 1) == 0) {
            w->first_error = rc;
            snprintf(w->first_detail, sizeof w->first_detail, "%s", shoal_client_error(c));
        }
        usleep(20000);
    }
    shoal_client_destroy(&c);
    return NULL;
}

/* A client of node 0 with this certificate: 0 when admitted (and a read works), else the error. */
static int client_with(const char *cert)
{
    char ep[64], allow[128];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ports[0]);
    snprintf(allow, sizeof allow, "%s/allow0", dir);
    int err = 0;
    shoal_client_t *c = shoal_client_new_curve(ep, 3000, cert, allow, &err);
    if (!c)
        return err ? err : SHOAL_EIO;
    shoal_consistency_t rc = {.level = SHOAL_LOCAL};
    shoal_crdt_t *v = NULL;
    err = shoal_client_get(c, "", "rotation-writes", &rc, &v);
    shoal_crdt_destroy(&v);
    shoal_client_destroy(&c);
    return err;
}

static void sighup_all(void)
{
    for (int i = 0; i < N; i++)
        assert_int_equal(kill(pids[i], SIGHUP), 0);
}

static void test_member_key_rotated_under_majority_writes(void **state)
{
    (void)state;
    const char *names[N] = {"n0", "n1", "n2"};
    for (int i = 0; i < N; i++) {
        keypair(names[i], ports[i]);
        snprintf(certs[i], sizeof certs[i], "%s/keys/%s/node.cert", dir, names[i]);
    }
    keypair("ops", 0); /* the tools' and the writer's key */
    for (int i = 0; i < N; i++) {
        sh("mkdir -p %s/allow%d", dir, i);
        for (int k = 0; k < N; k++)
            sh("cp %s/keys/%s/node.cert %s/allow%d/%s.cert", dir, names[k], dir, i, names[k]);
        sh("cp %s/keys/ops/node.cert %s/allow%d/ops.cert", dir, dir, i);
    }
    for (int i = 0; i < N; i++)
        start(i);
    for (int i = 0; i < N; i++)
        if (!wait_up(i, N, 30000)) {
            dump_logs();
            fail_msg("node %d does not see 3 members Up", i);
        }

    writer_t w = {0};
    snprintf(w.endpoint, sizeof w.endpoint, "tcp://127.0.0.1:%d", ports[0]);
    snprintf(w.cert, sizeof w.cert, "%s/keys/ops/node.cert", dir);
    snprintf(w.allow, sizeof w.allow, "%s/allow0", dir);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_run, &w), 0);
    for (int64_t end = now_ms() + 10000; atomic_load(&w.ok) < 10 && now_ms() < end;)
        usleep(20000);
    assert_true(atomic_load(&w.ok) >= 10);

    /* 1. the new key pair of node 1, its certificate on every list (SIGHUP) */
    char old_cert[256];
    snprintf(old_cert, sizeof old_cert, "%s", certs[1]);
    keypair("n1-new", ports[1]);
    snprintf(certs[1], sizeof certs[1], "%s/keys/n1-new/node.cert", dir);
    for (int i = 0; i < N; i++)
        sh("cp %s %s/allow%d/n1-new.cert", certs[1], dir, i);
    sighup_all();
    for (int i = 0; i < N; i++)
        if (!wait_log(i, "reloaded: allow-list 5 keys", 1, 5000)) {
            dump_logs();
            fail_msg("node %d did not reload its allow-list on SIGHUP", i);
        }

    /* 2. node 1 leaves and comes back with the new key (same endpoint) */
    assert_int_equal(kill(pids[1], SIGTERM), 0);
    if (!wait_exit(pids[1], 20000)) {
        dump_logs();
        fail_msg("node 1 did not leave within 20 s");
    }
    pids[1] = 0;
    if (!wait_up(0, 2, 20000)) {
        dump_logs();
        fail_msg("node 1 was not removed after its leave");
    }
    start(1);
    for (int i = 0; i < N; i++)
        if (!wait_up(i, N, 30000)) {
            dump_logs();
            fail_msg("node %d does not see node 1 back with its new key", i);
        }

    /* 3. the old certificate off every list (SIGHUP) */
    for (int i = 0; i < N; i++)
        sh("rm %s/allow%d/n1.cert", dir, i);
    sighup_all();
    for (int i = 0; i < N; i++)
        if (!wait_log(i, "reloaded: allow-list 4 keys", 1, 5000)) {
            dump_logs();
            fail_msg("node %d did not reload its allow-list on SIGHUP", i);
        }
    /* the cluster stays whole on the new key, and writes go on */
    int before = atomic_load(&w.ok);
    for (int64_t end = now_ms() + 10000; atomic_load(&w.ok) < before + 20 && now_ms() < end;)
        usleep(20000);
    for (int i = 0; i < N; i++)
        if (!wait_up(i, N, 10000)) {
            dump_logs();
            fail_msg("node %d lost a member once the old key was taken off", i);
        }
    atomic_store(&w.stop, true);
    pthread_join(t, NULL);
    print_message("MAJORITY writes through the rotation: %d ok, %d failed\n", atomic_load(&w.ok),
                  atomic_load(&w.failed));
    if (atomic_load(&w.failed) != 0) {
        dump_logs();
        fail_msg("%d MAJORITY writes failed, the first with %s (%s)", atomic_load(&w.failed),
                 shoal_strerror(w.first_error), w.first_detail);
    }
    assert_true(atomic_load(&w.ok) >= before + 20);

    /* no member was downed: nodes 0 and 2 saw node 1 leave and join, never go down */
    for (int i = 0; i < N; i += 2) {
        char file[128];
        snprintf(file, sizeof file, "%s/n%d.log", dir, i);
        if (count_in(file, "status=Down") != 0 || count_in(file, "downing") != 0) {
            dump_logs();
            fail_msg("node %d saw a member downed", i);
        }
    }
    /* the old key is refused, the new one admitted */
    assert_int_equal(client_with(old_cert), SHOAL_EREFUSED);
    assert_int_equal(client_with(certs[1]), 0);
}

/* Runs a shell command; its exit code, its output (stdout and stderr) in out. */
static int run_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, OUT_CAP - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The status of GET /cluster/members over HTTPS with this token; the certificate's subject is
   left in out. */
static int https_get(int port, const char *token)
{
    if (run_sh("curl -skv -o /dev/null -w 'status=%%{http_code}\\n' -H 'Authorization: Bearer %s' "
               "https://127.0.0.1:%d/cluster/members",
               token, port) != 0) {
        print_message("curl: %.3000s\n", out);
        return -1;
    }
    const char *p = strstr(out, "status=");
    if (!p)
        print_message("curl: %.3000s\n", out);
    return p ? atoi(p + 7) : -1;
}

/* Member i on HTTPS with token-one and the certificate of CN=shoal-one (a second pair, token-two
   and CN=shoal-two, made beside them for the rotation); its endpoint answers with the first.
   Returns the endpoint's port. */
static int start_https_member(int i)
{
    int http = tfree_port();
    for (int k = 1; k <= 2; k++)
        if (run_sh("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=shoal-%s "
                   "-keyout %s/key%d.pem -out %s/cert%d.pem",
                   k == 1 ? "one" : "two", dir, k, dir, k) != 0)
            fail_msg("openssl: %s", out);
    sh("cp %s/cert1.pem %s/cert.pem && cp %s/key1.pem %s/key.pem && echo token-one > %s/token", dir,
       dir, dir, dir, dir);
    char bind[64], spec[32], token[128], cert[128], key[128], log[128];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", ports[i]);
    snprintf(spec, sizeof spec, "127.0.0.1:%d", http);
    snprintf(token, sizeof token, "%s/token", dir);
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    snprintf(log, sizeof log, "%s/n%d.log", dir, i);
    pids[i] = ttool_spawn(member,
                          (char *const[]){member, "--bind", bind, "--http", spec,
                                          "--http-token-file", token, "--http-token-reads",
                                          "--http-tls-cert", cert, "--http-tls-key", key, NULL},
                          log);
    assert_true(pids[i] > 0);
    if (!wait_log(i, "management endpoint on port", 1, 10000)) {
        dump_logs();
        fail_msg("the HTTPS endpoint did not start");
    }
    assert_int_equal(https_get(http, "token-one"), 200);
    assert_non_null(strstr(out, "CN=shoal-one"));
    return http;
}

static void test_http_token_and_certificate_reloaded_on_sighup(void **state)
{
    (void)state;
    int http = start_https_member(0);
    assert_int_equal(https_get(http, "token-two"), 401);

    /* new files, SIGHUP: the same port serves the new certificate and takes the new token */
    sh("cp %s/cert2.pem %s/cert.pem && cp %s/key2.pem %s/key.pem && echo token-two > %s/token", dir,
       dir, dir, dir, dir);
    assert_int_equal(kill(pids[0], SIGHUP), 0);
    if (!wait_log(0, "reloaded: endpoint ok", 1, 10000)) {
        dump_logs();
        fail_msg("no reload on SIGHUP");
    }
    assert_int_equal(https_get(http, "token-two"), 200);
    assert_non_null(strstr(out, "CN=shoal-two"));
    assert_int_equal(https_get(http, "token-one"), 401);

    /* a broken pair keeps the one in force, on the same port */
    sh("echo not-a-certificate > %s/cert.pem", dir);
    assert_int_equal(kill(pids[0], SIGHUP), 0);
    if (!wait_log(0, "reloaded: endpoint FAILED", 1, 10000)) {
        dump_logs();
        fail_msg("a broken certificate was not reported");
    }
    assert_int_equal(https_get(http, "token-two"), 200);
    assert_non_null(strstr(out, "CN=shoal-two"));
}

/* The status of GET /cluster/members over plain HTTP with this token. */
static int http_get(int port, const char *token)
{
    if (run_sh("curl -s -o /dev/null -w 'status=%%{http_code}\\n' -H 'Authorization: Bearer %s' "
               "http://127.0.0.1:%d/cluster/members",
               token, port) != 0) {
        print_message("curl: %.3000s\n", out);
        return -1;
    }
    const char *p = strstr(out, "status=");
    return p ? atoi(p + 7) : -1;
}

static void test_http_token_reloaded_by_shoal_cluster_reload(void **state)
{
    (void)state;
    int http = tfree_port();
    sh("echo token-one > %s/token && echo token-one > %s/token-old && echo nope > %s/token-bad",
       dir, dir, dir);
    char bind[64], spec[32], token[128], log[128];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", ports[0]);
    snprintf(spec, sizeof spec, "127.0.0.1:%d", http);
    snprintf(token, sizeof token, "%s/token", dir);
    snprintf(log, sizeof log, "%s/n0.log", dir);
    pids[0] = ttool_spawn(member,
                          (char *const[]){member, "--bind", bind, "--http", spec,
                                          "--http-token-file", token, "--http-token-reads", NULL},
                          log);
    assert_true(pids[0] > 0);
    if (!wait_log(0, "management endpoint on port", 1, 10000)) {
        dump_logs();
        fail_msg("the endpoint did not start");
    }
    assert_int_equal(http_get(http, "token-one"), 200);
    assert_int_equal(http_get(http, "token-two"), 401);

    /* the new token in the file; the reload is asked with the token in force */
    sh("echo token-two > %s/token", dir);
    char args[512];
    snprintf(args, sizeof args, "reload %d", http); /* no token: refused, nothing reloaded */
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 1);
    assert_non_null(strstr(out, "401"));
    snprintf(args, sizeof args, "reload %d --token-file %s/token-bad", http, dir);
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 1);
    assert_int_equal(http_get(http, "token-one"), 200);
    snprintf(args, sizeof args, "reload 127.0.0.1:%d --token-file %s/token-old", http, dir);
    int rc = ttool_run(tool, args, out, OUT_CAP);
    if (rc != 0)
        fail_msg("shoal-cluster reload: exit %d: %s", rc, out);
    assert_non_null(strstr(out, "reloaded: endpoint ok"));
    /* at once, without a signal: the old token refused, the new one taken */
    assert_int_equal(http_get(http, "token-one"), 401);
    assert_int_equal(http_get(http, "token-two"), 200);
    /* an unusable file is said (exit 1) and keeps the token in force */
    sh(": > %s/token", dir);
    snprintf(args, sizeof args, "reload %d --token-file %s/token-old", http, dir);
    sh("echo token-two > %s/token-old", dir);
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 1);
    assert_non_null(strstr(out, "FAILED"));
    assert_int_equal(http_get(http, "token-two"), 200);
    kill(pids[0], SIGKILL);
    waitpid(pids[0], NULL, 0);
    pids[0] = 0;

    /* HTTPS: POST /reload is answered 202 and the node takes the new pair right after (the
       request in progress is one the old daemon must finish: never waited for by itself) */
    http = start_https_member(1);
    sh("cp %s/cert2.pem %s/cert.pem && cp %s/key2.pem %s/key.pem && echo token-two > %s/token", dir,
       dir, dir, dir, dir);
    /* shoal-cluster speaks plain HTTP: it says what to run instead */
    snprintf(args, sizeof args, "reload https://127.0.0.1:%d", http);
    assert_int_equal(ttool_run(tool, args, out, OUT_CAP), 2);
    assert_non_null(strstr(out, "curl"));
    rc = run_sh("curl -sk -w 'status=%%{http_code}\\n' -X POST -H 'Content-Type: application/json' "
                "-H 'Authorization: Bearer token-one' -d '{}' https://127.0.0.1:%d/reload",
                http);
    if (rc != 0 || !strstr(out, "status=202"))
        fail_msg("POST /reload over HTTPS: %d %s", rc, out);
    if (!wait_log(1, "reloaded: endpoint ok", 1, 10000)) {
        dump_logs();
        fail_msg("no reload after POST /reload on HTTPS");
    }
    assert_int_equal(https_get(http, "token-two"), 200);
    assert_non_null(strstr(out, "CN=shoal-two"));
    assert_int_equal(https_get(http, "token-one"), 401);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_member_key_rotated_under_majority_writes, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_http_token_and_certificate_reloaded_on_sighup, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_http_token_reloaded_by_shoal_cluster_reload, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
