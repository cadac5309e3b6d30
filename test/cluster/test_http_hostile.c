/*  test_http_hostile.c — the management endpoint against a stranger (issue 36, items 1, 3, 4):
    real nodes, real sockets on loopback, a real browser.

    cross_site_browser: a page served from another origin (127.0.0.2) in headless Chromium
      (test/cluster/cross_site_check.py) POSTs "down" for one member with fetch() and for another
      with a self-submitting form aimed at evil.example (resolved to 127.0.0.1: the DNS-rebinding
      shape). Neither member may be downed. On 672634c both were (202).
    foreign_host: what a rebound page or a cross-site form sends, by hand: a GET with a foreign
      Host, a POST with a form content type, a POST with a foreign Origin: each refused, while
      what a probe, Prometheus and curl send is answered.
    slowloris: 70 connections sending one byte a second (reconnecting when cut, as an attacker
      would); six /health/alive probes with a 1 s timeout must all answer, and one slow request
      must be cut within the whole-request deadline. On 672634c: 6 of 6 probes failed.
    descriptor_flood: more than FD_SETSIZE (1024) descriptors open in the process; /health/alive
      must still answer every probe. On 672634c (select()): 5 of 5 failed.
    token_names_tls: the options: a bearer token (POSTs, and GETs but the probes with
      --http-token-reads), an extra Host name, the refusals counted, HTTPS with a certificate.
    wildcard_bind: on 0.0.0.0 a request for the address it came in on is answered (a kubelet or
      Prometheus dialling the pod's address), a foreign Host is not.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "http.h"
#include "tools.h"
#include "members.h"
#include "shards.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_MS 20000

static shoal_metrics_t *endpoint;

static int teardown(void **state)
{
    shoal_metrics_stop(&endpoint);
    return tsnode_teardown(state);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One node, not joined, with an endpoint on an ephemeral loopback port. */
static uint16_t lone_endpoint(void)
{
    tsnode_opts_t o = {.no_join = true, .no_region = true};
    tsnode_start(0, &o);
    int err = 0;
    endpoint = shoal_http_start(tsn[0].sys, "127.0.0.1:0", &err);
    assert_non_null(endpoint);
    return shoal_metrics_port(endpoint);
}

/* A connected socket to 127.0.0.1:port with a receive timeout, or -1. */
static int dial(uint16_t port, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A kubelet's liveness probe: GET /health/alive with Host = the address it dials, answered 200
   within timeout_ms, or it failed. */
static bool probe(uint16_t port, int timeout_ms)
{
    int64_t until = now_ms() + timeout_ms;
    int fd = dial(port, timeout_ms);
    if (fd < 0)
        return false;
    char req[128];
    int n =
        snprintf(req, sizeof req,
                 "GET /health/alive HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n",
                 (unsigned)port);
    bool ok = send(fd, req, (size_t)n, MSG_NOSIGNAL) == n;
    char buf[512];
    size_t got = 0;
    while (ok && got < sizeof buf - 1 && now_ms() < until) {
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
        buf[got] = 0;
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    buf[got] = 0;
    close(fd);
    return ok && now_ms() <= until && strncmp(buf, "HTTP/1.1 200", 12) == 0;
}

/* ---------------------------------------------------------------------------------------------
 * cross_site_browser
 */

/* The victim's status in node 0's view (SHOAL_MEMBER_REMOVED when it is gone from it). */
static shoal_member_status_t status_of(int victim)
{
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(tsn[0].cl, &v), 0);
    const shoal_member_t *m = shoal_cluster_view_member(&v, shoal_system_self(tsn[victim].sys));
    shoal_member_status_t s = m ? m->status : SHOAL_MEMBER_REMOVED;
    shoal_cluster_view_free(&v);
    return s;
}

static void cross_site_browser(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        tsnode_opts_t o = {.seed = 0, .no_region = true};
        tsnode_start(i, &o);
    }
    tsnode_wait_up(0x7, DEADLINE_MS);
    int err = 0;
    endpoint = shoal_http_start(tsn[0].sys, "127.0.0.1:0", &err);
    assert_non_null(endpoint);

    char script[4200], cmd[8800];
    ttool_tree_file("test/cluster/cross_site_check.py", script, sizeof script);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %u '%s' '%s' --timeout %d 2>&1", script,
             (unsigned)shoal_metrics_port(endpoint), shoal_node_id(shoal_system_self(tsn[1].sys)),
             shoal_node_id(shoal_system_self(tsn[2].sys)), 30 * tscale());
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[4096];
    while (fgets(line, sizeof line, p))
        fputs(line, stdout);
    int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("cross_site_check.py failed (exit %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    thttp_resp_t m;
    if (thttp_get(shoal_metrics_port(endpoint), "/metrics", &m) && m.body)
        for (const char *q = strstr(m.body, "\nshoal_http_requests_refused_total{"); q;
             q = strstr(q + 1, "\nshoal_http_requests_refused_total{"))
            print_message("%.*s\n", (int)strcspn(q + 1, "\n"), q + 1);
    thttp_free(&m);
    /* each request has been answered: a down it caused is in node 0's own view already (the
       route downs the member on the node thread before it answers 202) */
    shoal_member_status_t s1 = status_of(1), s2 = status_of(2);
    if (s1 != SHOAL_MEMBER_UP || s2 != SHOAL_MEMBER_UP)
        fail_msg("a page from another origin downed members: fetch's victim %s, form's victim %s",
                 shoal_member_status_name(s1), shoal_member_status_name(s2));
}

/* ---------------------------------------------------------------------------------------------
 * foreign_host
 */
static int raw_status(uint16_t port, const char *req, thttp_resp_t *r)
{
    if (!thttp_raw(NULL, port, NULL, req, strlen(req), r))
        return -1;
    return r->status;
}

static void foreign_host(void **state)
{
    (void)state;
    uint16_t port = lone_endpoint();
    const char *self = shoal_node_id(shoal_system_self(tsn[0].sys));
    char req[1024];
    thttp_resp_t r;

    /* what a probe, Prometheus and curl send: answered */
    snprintf(req, sizeof req,
             "GET /cluster/members HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
             "Connection: close\r\n\r\n",
             (unsigned)port);
    assert_int_equal(raw_status(port, req, &r), 200);
    thttp_free(&r);
    snprintf(req, sizeof req, "GET /metrics HTTP/1.0\r\nHost: localhost:%u\r\n\r\n",
             (unsigned)port);
    assert_int_equal(raw_status(port, req, &r), 200);
    thttp_free(&r);
    snprintf(req, sizeof req, "GET /health/alive HTTP/1.0\r\n\r\n"); /* HTTP/1.0: no Host */
    assert_int_equal(raw_status(port, req, &r), 200);
    thttp_free(&r);

    /* a rebound page reading the members: foreign Host */
    snprintf(req, sizeof req,
             "GET /cluster/members HTTP/1.1\r\nHost: evil.example:%u\r\n"
             "Connection: close\r\n\r\n",
             (unsigned)port);
    int st = raw_status(port, req, &r);
    if (st != 403 && st != 421)
        fail_msg("GET with Host: evil.example: %d %s", st, r.body ? r.body : "");
    thttp_free(&r);

    /* a cross-site form: text/plain body, foreign Origin, and the rebinding Host */
    static const char *const attacks[][3] = {
        {"evil.example", "http://evil.example", "text/plain"},
        {"127.0.0.1", "http://evil.example", "text/plain"},
        {"127.0.0.1", NULL, "application/x-www-form-urlencoded"},
        {"127.0.0.1", "http://evil.example", "application/json"},
        {"127.0.0.1", "null", "application/json"},
        {"evil.example", NULL, "application/json"},
    };
    for (size_t k = 0; k < sizeof attacks / sizeof *attacks; k++) {
        char origin[128] = "";
        if (attacks[k][1])
            snprintf(origin, sizeof origin, "Origin: %s\r\n", attacks[k][1]);
        snprintf(req, sizeof req,
                 "POST /cluster/members/%s?action=leave HTTP/1.1\r\nHost: %s:%u\r\n%s"
                 "Content-Type: %s\r\nContent-Length: 5\r\nConnection: close\r\n\r\nleave",
                 self, attacks[k][0], (unsigned)port, origin, attacks[k][2]);
        st = raw_status(port, req, &r);
        if (st < 400 || st >= 500)
            fail_msg("POST with Host %s, Origin %s, Content-Type %s: %d %s", attacks[k][0],
                     attacks[k][1] ? attacks[k][1] : "(none)", attacks[k][2], st,
                     r.body ? r.body : "");
        thttp_free(&r);
    }
}

/* ---------------------------------------------------------------------------------------------
 * slowloris
 */
#define SLOW_CONNS 70

typedef struct {
    uint16_t port;
    atomic_bool stop;
    atomic_int connected; /* slots connected at least once */
    atomic_int reconnects;
    pthread_t thread;
} loris_t;

static const char slow_head[] = "GET /health/alive HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";

static void *loris_run(void *arg)
{
    loris_t *l = arg;
    int fd[SLOW_CONNS];
    size_t sent[SLOW_CONNS];
    for (int i = 0; i < SLOW_CONNS; i++) {
        fd[i] = dial(l->port, 1000);
        sent[i] = 0;
        if (fd[i] >= 0)
            atomic_fetch_add(&l->connected, 1);
    }
    while (!atomic_load(&l->stop)) {
        int64_t round = now_ms();
        for (int i = 0; i < SLOW_CONNS && !atomic_load(&l->stop); i++) {
            char c = sent[i] < sizeof slow_head - 1 ? slow_head[sent[i]] : 'a';
            char junk[64];
            /* cut by the server (EOF, or an answer): connect again, as an attacker would */
            if (fd[i] < 0 || recv(fd[i], junk, sizeof junk, MSG_DONTWAIT) >= 0 ||
                send(fd[i], &c, 1, MSG_NOSIGNAL) != 1) {
                if (fd[i] >= 0)
                    close(fd[i]);
                fd[i] = dial(l->port, 1000);
                sent[i] = 0;
                atomic_fetch_add(&l->reconnects, 1);
                continue;
            }
            sent[i]++;
        }
        while (!atomic_load(&l->stop) && now_ms() < round + 1000)
            usleep(20000);
    }
    for (int i = 0; i < SLOW_CONNS; i++)
        if (fd[i] >= 0)
            close(fd[i]);
    return NULL;
}

/* Threads and resident memory of this process, for the figures of docs/security.md. */
static const char *proc_status(void)
{
    static char out[128];
    char line[256], threads[32] = "?", rss[32] = "?";
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "Threads:", 8) == 0)
            sscanf(line + 8, "%31s", threads);
        else if (strncmp(line, "VmRSS:", 6) == 0)
            sscanf(line + 6, "%31s", rss);
    }
    if (f)
        fclose(f);
    snprintf(out, sizeof out, "%s threads, %s kB resident", threads, rss);
    return out;
}

static void slowloris(void **state)
{
    (void)state;
    uint16_t port = lone_endpoint();
    print_message("slowloris: before the attack: %s\n", proc_status());
    assert_true(probe(port, 1000 * tscale()));

    loris_t l = {.port = port};
    assert_int_equal(pthread_create(&l.thread, NULL, loris_run, &l), 0);
    while (atomic_load(&l.connected) < 64)
        usleep(10000);
    usleep(300000); /* their first bytes are in */
    int failed = 0;
    for (int k = 0; k < 6; k++) {
        int64_t t0 = now_ms();
        if (!probe(port, 1000 * tscale()))
            failed++;
        while (now_ms() < t0 + 1000)
            usleep(20000);
    }
    print_message("slowloris: %d of 6 probes failed under %d slow connections (%d reconnects); "
                  "the process: %s\n",
                  failed, SLOW_CONNS, atomic_load(&l.reconnects), proc_status());

    atomic_store(&l.stop, true);
    pthread_join(l.thread, NULL);

    /* one slow request alone: cut within the whole-request deadline (5 s) plus a margin */
    int fd = dial(port, 1000);
    assert_true(fd >= 0);
    int64_t t0 = now_ms();
    bool cut = false;
    size_t i = 0;
    while (!cut && now_ms() < t0 + 9000) {
        char c = i < sizeof slow_head - 1 ? slow_head[i] : 'a';
        i++;
        char junk[64];
        cut = recv(fd, junk, sizeof junk, MSG_DONTWAIT) >= 0 || send(fd, &c, 1, MSG_NOSIGNAL) != 1;
        if (!cut)
            usleep(500000);
    }
    int64_t held = now_ms() - t0;
    close(fd);
    print_message("slowloris: one request at a byte each 0.5 s %s after %lld ms\n",
                  cut ? "was cut" : "still open", (long long)held);
    assert_int_equal(failed, 0);
    assert_true(cut);
    assert_true(held >= 4500 && held <= 7500);
}

/* ---------------------------------------------------------------------------------------------
 * descriptor_flood
 */
#define FLOOD 1100

static void descriptor_flood(void **state)
{
    (void)state;
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < FLOOD + 512) {
        rl.rlim_cur = rl.rlim_max < FLOOD + 512 ? rl.rlim_max : FLOOD + 512;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < FLOOD + 256) {
        print_message("RLIMIT_NOFILE %llu: too low for the flood, skipped\n",
                      (unsigned long long)rl.rlim_cur);
        skip();
    }
    uint16_t port = lone_endpoint();
    assert_true(probe(port, 1000 * tscale()));
    static int fds[FLOOD];
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = open("/dev/null", O_RDONLY);
        assert_true(fds[i] >= 0);
    }
    int failed = 0;
    for (int k = 0; k < 5; k++)
        if (!probe(port, 1000 * tscale()))
            failed++;
    /* the other routes too, on a descriptor above FD_SETSIZE */
    int metrics = thttp_status(port, "/metrics");
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    print_message("descriptor_flood: %d of 5 probes failed with %d descriptors open; /metrics %d\n",
                  failed, FLOOD, metrics);
    assert_int_equal(failed, 0);
    assert_int_equal(metrics, 200);
}

/* ---------------------------------------------------------------------------------------------
 * token_names_tls: the options (ddata.h, HARDENING)
 */
static char scratch[] = "/tmp/shoal-http-XXXXXX";

static void write_file(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", scratch, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int req_status(uint16_t port, const char *method, const char *path, const char *host,
                      const char *extra)
{
    char req[1024];
    snprintf(req, sizeof req,
             "%s %s HTTP/1.1\r\nHost: %s:%u\r\n%sContent-Type: application/json\r\n"
             "Content-Length: 6\r\nConnection: close\r\n\r\nreboot",
             method, path, host, (unsigned)port, extra ? extra : "");
    thttp_resp_t r;
    int st = raw_status(port, req, &r);
    thttp_free(&r);
    return st;
}

static void token_names_tls(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(scratch));
    tsnode_opts_t o = {.no_join = true, .no_region = true};
    tsnode_start(0, &o);
    char token[4200], bad[4200];
    write_file("token", "s3cret-token\n", token, sizeof token);
    write_file("empty", "\n", bad, sizeof bad);
    shoal_http_settings_t s;
    shoal_http_settings_default(&s);
    s.token_file = bad;
    int err = 0;
    assert_null(shoal_http_start_with(tsn[0].sys, "127.0.0.1:0", &s, &err));
    assert_int_equal(err, SHOAL_EINVAL);

    /* the configuration keys */
    shoal_config_t *cfg = shoal_config_parse("shoal\n    management\n        http\n"
                                             "            hosts = \"a.example, b.example\"\n"
                                             "            token-for-reads = on\n"
                                             "            request-timeout = 2 s\n"
                                             "            max-connections-per-address = 4\n",
                                             &err);
    assert_non_null(cfg);
    shoal_http_settings_default(&s);
    char msg[200];
    assert_int_equal(shoal_config_http(cfg, &s, msg, sizeof msg), 0);
    assert_int_equal(s.n_hosts, 2);
    assert_string_equal(s.hosts[1], "b.example");
    assert_true(s.token_for_reads);
    assert_int_equal(s.request_timeout_ms, 2000);
    assert_int_equal(s.max_per_address, 4);
    assert_int_equal(s.max_connections, 64);
    shoal_config_destroy(&cfg);

    /* the flags as a program parses them */
    char *argv[] = {"prog", "--http-host",        "shoal.example", "--http-token-file",
                    token,  "--http-token-reads", "--http-host",   NULL};
    shoal_http_settings_default(&s);
    int i = 1, argc = 7;
    for (; i < argc - 1; i++)
        assert_int_equal(shoal_http_flag(&s, argc, argv, &i, msg, sizeof msg), 1);
    assert_true(shoal_http_flag(&s, argc, argv, &i, msg, sizeof msg) < 0); /* no value */
    assert_int_equal(s.n_hosts, 1);
    assert_true(s.token_for_reads);
    endpoint = shoal_http_start_with(tsn[0].sys, "127.0.0.1:0", &s, &err);
    assert_non_null(endpoint);
    uint16_t port = shoal_metrics_port(endpoint);
    const char *auth = "Authorization: Bearer s3cret-token\r\n";
    /* probes need no token; other reads do */
    assert_int_equal(req_status(port, "GET", "/health/alive", "127.0.0.1", NULL), 200);
    assert_int_equal(req_status(port, "GET", "/metrics", "127.0.0.1", NULL), 401);
    assert_int_equal(
        req_status(port, "GET", "/metrics", "127.0.0.1", "Authorization: Bearer s3cret-tokem\r\n"),
        401);
    assert_int_equal(req_status(port, "GET", "/metrics", "shoal.example", auth), 200);
    assert_int_equal(req_status(port, "GET", "/metrics", "other.example", auth), 403);
    /* a POST with the token gets through to the route (which refuses the word: 400) */
    char path[200];
    snprintf(path, sizeof path, "/cluster/members/%s",
             shoal_node_id(shoal_system_self(tsn[0].sys)));
    assert_int_equal(req_status(port, "POST", path, "127.0.0.1", NULL), 401);
    assert_int_equal(req_status(port, "POST", path, "SHOAL.example", auth), 400);
    char origin[300];
    snprintf(origin, sizeof origin, "%sOrigin: http://127.0.0.1:%u\r\n", auth, (unsigned)port);
    assert_int_equal(req_status(port, "POST", path, "127.0.0.1", origin), 400);
    /* the refusals are counted */
    char req[512];
    snprintf(req, sizeof req, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n%s\r\n", auth);
    thttp_resp_t r;
    assert_int_equal(raw_status(port, req, &r), 200);
    assert_non_null(strstr(r.body, "shoal_http_requests_refused_total{reason=\"token\"} 3"));
    assert_non_null(strstr(r.body, "shoal_http_requests_refused_total{reason=\"host\"} 1"));
    assert_null(thttp_promtool(r.body));
    thttp_free(&r);
    shoal_metrics_stop(&endpoint);

    /* TLS: HTTPS answered, plain HTTP not */
    char cert[4200], key[4200], cmd[9000];
    snprintf(cert, sizeof cert, "%s/cert.pem", scratch);
    snprintf(key, sizeof key, "%s/key.pem", scratch);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
             "-keyout '%s' -out '%s' >/dev/null 2>&1",
             key, cert);
    if (system(cmd) != 0) {
        print_message("openssl cannot make a certificate here: TLS not checked\n");
    } else {
        shoal_http_settings_default(&s);
        s.tls_cert_file = cert;
        s.tls_key_file = key;
        endpoint = shoal_http_start_with(tsn[0].sys, "127.0.0.1:0", &s, &err);
        assert_non_null(endpoint);
        port = shoal_metrics_port(endpoint);
        snprintf(cmd, sizeof cmd,
                 "curl -s -k --max-time 5 -o /dev/null -w '%%{http_code}' "
                 "https://127.0.0.1:%u/health/alive",
                 (unsigned)port);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        char out[64] = "";
        if (!fgets(out, sizeof out, p))
            out[0] = 0;
        pclose(p);
        assert_string_equal(out, "200");
        assert_int_not_equal(thttp_status(port, "/health/alive"), 200);
        shoal_metrics_stop(&endpoint);
        unlink(cert);
        unlink(key);
    }
    unlink(token);
    unlink(bad);
    rmdir(scratch);
}

/* ---------------------------------------------------------------------------------------------
 * wildcard_bind: a probe or Prometheus dialling the pod's address is answered
 */

static void wildcard_bind(void **state)
{
    (void)state;
    tsnode_opts_t o = {.no_join = true, .no_region = true};
    tsnode_start(0, &o);
    int err = 0;
    endpoint = shoal_http_start(tsn[0].sys, "0.0.0.0:0", &err);
    assert_non_null(endpoint);
    uint16_t port = shoal_metrics_port(endpoint);
    char addr[64];
    if (!thttp_outside_address(addr, sizeof addr)) {
        print_message("no address off loopback here: loopback only\n");
        strcpy(addr, "127.0.0.1");
    }
    char req[256];
    thttp_resp_t r;
    snprintf(req, sizeof req, "GET /metrics HTTP/1.1\r\nHost: %s:%u\r\nConnection: close\r\n\r\n",
             addr, (unsigned)port);
    assert_true(thttp_raw(addr, port, NULL, req, strlen(req), &r));
    if (r.status != 200)
        fail_msg("GET /metrics with Host %s on a wildcard bind: %d %s", addr, r.status, r.body);
    thttp_free(&r);
    snprintf(req, sizeof req,
             "GET /health/ready HTTP/1.1\r\nHost: evil.example:%u\r\nConnection: close\r\n\r\n",
             (unsigned)port);
    assert_true(thttp_raw(addr, port, NULL, req, strlen(req), &r));
    assert_int_equal(r.status, 403);
    thttp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(cross_site_browser, teardown),
        cmocka_unit_test_teardown(foreign_host, teardown),
        cmocka_unit_test_teardown(slowloris, teardown),
        cmocka_unit_test_teardown(descriptor_flood, teardown),
        cmocka_unit_test_teardown(token_names_tls, teardown),
        cmocka_unit_test_teardown(wildcard_bind, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
