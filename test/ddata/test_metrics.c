/*  test_metrics.c — the Prometheus endpoint (ddata.h, METRICS): a running node with a data
    replicator on an LMDB store and a one-node cluster is scraped over a raw TCP socket, as
    Prometheus would; the answer must be valid exposition text naming every part's counters.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "ddata.h"
#include "durable.h"
#include "http.h"
#include "membership.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define DEADLINE_MS 10000

static bool scrape(uint16_t port, thttp_resp_t *out)
{
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    return thttp_raw(NULL, port, NULL, req, sizeof req - 1, out);
}

/* ---------------------------------------------------------------------------------------------
 * The exposition syntax checker (text format 0.0.4): every sample line is
 * name{label="value",...} value, its family declared once by a # TYPE line before it, counters
 * end in _total, and a family's samples are contiguous.
 */
static bool name_ok(const char **p, bool metric)
{
    const char *s = *p;
    if (!(isalpha((unsigned char)*s) || *s == '_' || (metric && *s == ':')))
        return false;
    while (isalnum((unsigned char)*s) || *s == '_' || (metric && *s == ':'))
        s++;
    *p = s;
    return true;
}

/* NULL when text is valid, else the offending line (static buffer). */
static const char *check_exposition(const char *text)
{
    static char bad[256];
    char types[256][96];
    size_t n_types = 0;
    char current[96] = "";
    bool histogram = false; /* the current family's samples are NAME_bucket, _sum and _count */
    const char *line = text;
    while (*line) {
        const char *eol = strchr(line, '\n');
        if (!eol)
            goto fail; /* the format ends every line with \n */
        size_t len = (size_t)(eol - line);
        char l[1024];
        if (len >= sizeof l)
            goto fail;
        memcpy(l, line, len);
        l[len] = 0;
        if (len == 0) {
        } else if (l[0] == '#') {
            char kw[8], name[96], rest[64];
            if (sscanf(l, "# %7s %95s %63s", kw, name, rest) < 2)
                goto fail;
            if (strcmp(kw, "TYPE") == 0) {
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "summary") &&
                    strcmp(rest, "histogram") && strcmp(rest, "untyped"))
                    goto fail;
                for (size_t i = 0; i < n_types; i++)
                    if (strcmp(types[i], name) == 0)
                        goto fail; /* declared twice: the family is split */
                if (strcmp(rest, "counter") == 0 &&
                    (strlen(name) < 6 || strcmp(name + strlen(name) - 6, "_total") != 0))
                    goto fail;
                assert_true(n_types < 256);
                snprintf(types[n_types++], sizeof types[0], "%s", name);
                snprintf(current, sizeof current, "%s", name);
                histogram = strcmp(rest, "histogram") == 0;
            } else if (strcmp(kw, "HELP") != 0) {
                goto fail;
            }
        } else {
            const char *p = l;
            if (!name_ok(&p, true))
                goto fail;
            size_t cl = strlen(current), sl = (size_t)(p - l);
            if (sl < cl || strncmp(l, current, cl) != 0)
                goto fail; /* not of the family just declared */
            if (sl != cl && !(histogram && ((sl == cl + 7 && !strncmp(l + cl, "_bucket", 7)) ||
                                            (sl == cl + 4 && !strncmp(l + cl, "_sum", 4)) ||
                                            (sl == cl + 6 && !strncmp(l + cl, "_count", 6)))))
                goto fail;
            if (*p == '{') {
                p++;
                while (*p != '}') {
                    if (!name_ok(&p, false) || *p++ != '=' || *p++ != '"')
                        goto fail;
                    while (*p != '"') {
                        if (!*p)
                            goto fail;
                        if (*p == '\\') {
                            p++;
                            if (*p != '\\' && *p != '"' && *p != 'n')
                                goto fail;
                        }
                        p++;
                    }
                    p++;
                    if (*p == ',')
                        p++;
                    else if (*p != '}')
                        goto fail;
                }
                p++;
            }
            if (*p++ != ' ')
                goto fail;
            char *end;
            strtod(p, &end);
            if (end == p || *end != 0)
                goto fail;
        }
        line = eol + 1;
        continue;
    fail:
        snprintf(bad, sizeof bad, "%.*s", (int)(strchr(line, '\n') ? strchr(line, '\n') - line
                                                                   : (long)strlen(line)),
                 line);
        return bad;
    }
    return NULL;
}

/* The value of the sample line starting with `prefix` (name and labels), or -1. */
static double value_of(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * The node under test
 */
typedef struct {
    char dir[64];
    shoal_system_t *sys;
    shoal_durable_t *d;
    shoal_replicator_t *rep;
    shoal_cluster_t *cl;
    shoal_metrics_t *m;
    uint16_t port;
} node_t;

static void node_start(node_t *n)
{
    memset(n, 0, sizeof *n);
    snprintf(n->dir, sizeof n->dir, "/tmp/shoal-metrics-XXXXXX");
    assert_non_null(mkdtemp(n->dir));
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    n->sys = shoal_system_new(&ss, &err);
    assert_non_null(n->sys);

    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = n->dir;
    ds.nosync = true;
    char msg[256];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    n->d = shoal_durable_open(&ds, &open_err);
    if (open_err)
        snprintf(msg, sizeof msg, "%s", shoal_last_error_detail());
    assert_non_null(n->d);

    static const char *const durable[] = {"d-*"};
    shoal_replicator_settings_t rs;
    tcluster_fast_settings(&rs);
    rs.durable_keys = durable;
    rs.n_durable_keys = 1;
    rs.store = shoal_durable_store(n->d, "");
    assert_non_null(rs.store);
    n->rep = shoal_replicator_new(n->sys, &rs, &err);
    assert_non_null(n->rep);

    shoal_cluster_settings_t cs;
    shoal_cluster_settings_fast(&cs);
    n->cl = shoal_cluster_new(n->sys, &cs, &err);
    assert_non_null(n->cl);
    assert_int_equal(shoal_cluster_follow(n->cl, n->rep), 0);
    assert_int_equal(shoal_cluster_join(n->cl, NULL, 0), 0);

    n->m = shoal_metrics_start(n->sys, NULL, 0, &err);
    assert_non_null(n->m);
    assert_int_equal(err, 0);
    n->port = shoal_metrics_port(n->m);
    assert_int_not_equal(n->port, 0);
    assert_int_equal(shoal_cluster_metrics(n->cl, n->m), 0);
    assert_int_equal(shoal_durable_metrics(n->d, n->m), 0);
}

static void node_stop(node_t *n)
{
    shoal_metrics_stop(&n->m);
    assert_null(n->m);
    shoal_cluster_destroy(&n->cl);
    shoal_replicator_destroy(&n->rep);
    shoal_system_destroy(&n->sys);
    shoal_durable_close(&n->d);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", n->dir);
    assert_int_equal(system(cmd), 0);
}

typedef struct {
    node_t *n;
    const char *prefix;
    double at_least;
} wait_metric_t;

static bool metric_reaches(void *arg)
{
    wait_metric_t *w = arg;
    thttp_resp_t r;
    bool ok = scrape(w->n->port, &r) && r.status == 200 && value_of(r.body, w->prefix) >= w->at_least;
    thttp_free(&r);
    return ok;
}

/* ---------------------------------------------------------------------------------------------
 * Tests
 */
static void scrape_running_node(void **state)
{
    (void)state;
    node_t n;
    node_start(&n);

    wait_metric_t up = {&n, "shoal_cluster_members{status=\"up\"}", 1};
    assert_true(wait_until(metric_reaches, &up, DEADLINE_MS));

    /* a durable write shows in the store's counters and the replicator's */
    tcluster_t tc = {.n = 1};
    tc.sys[0] = n.sys;
    tc.rep[0] = n.rep;
    shoal_consistency_t local = c_local();
    assert_int_equal(t_incr(&tc, 0, "d-visits", 3, &local), 0);
    wait_metric_t puts = {&n, "shoal_durable_puts_total", 1};
    assert_true(wait_until(metric_reaches, &puts, DEADLINE_MS));

    thttp_resp_t r;
    assert_true(scrape(n.port, &r));
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
    if (getenv("SHOAL_METRICS_DUMP")) /* to read what a scrape looks like */
        fputs(r.body, stdout);
    const char *bad = check_exposition(r.body);
    if (bad)
        fail_msg("not exposition syntax: '%s'", bad);
    static const char *const families[] = {
        "# TYPE shoal_node_bytes_sent_total counter\n",
        "# TYPE shoal_node_bytes_received_total counter\n",
        "# TYPE shoal_node_messages_sent_total counter\n",
        "# TYPE shoal_node_frames_dropped_total counter\n",
        "# TYPE shoal_node_peers gauge\n",
        "# TYPE shoal_replicator_keys gauge\n",
        "# TYPE shoal_replicator_gossip_rounds_total counter\n",
        "# TYPE shoal_replicator_digests_compared_total counter\n",
        "# TYPE shoal_cluster_members gauge\n",
        "# TYPE shoal_cluster_unreachable_members gauge\n",
        "# TYPE shoal_cluster_gossip_sent_total counter\n",
        "# TYPE shoal_cluster_heartbeats_sent_total counter\n",
        "# TYPE shoal_durable_commit_seconds_total counter\n",
        "# TYPE shoal_durable_map_size_bytes gauge\n",
        "# TYPE shoal_replicator_store_retries_total counter\n",
        "# TYPE shoal_durable_commit_retries_total counter\n",
        "# TYPE shoal_node_messages_total counter\n",
        "# TYPE shoal_node_message_bytes_total counter\n",
        "# TYPE shoal_node_clock_skew_seconds gauge\n",
    };
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (!strstr(r.body, families[i]))
            fail_msg("missing: %s", families[i]);
    assert_true(value_of(r.body, "shoal_node_frames_dropped_total{reason=\"oversized\"}") == 0);
    assert_true(value_of(r.body, "shoal_replicator_keys{role=\"\"}") >= 1);
    assert_true(value_of(r.body, "shoal_replicator_updates_total{role=\"\"}") >= 1);
    /* membership's own replicator is on the node too */
    assert_true(value_of(r.body, "shoal_replicator_keys{role=\"__system\"}") >= 1);
    assert_true(value_of(r.body, "shoal_cluster_members{status=\"up\"}") == 1);
    assert_true(value_of(r.body, "shoal_cluster_members{status=\"joining\"}") == 0);
    assert_true(value_of(r.body, "shoal_cluster_unreachable_members") == 0);
    assert_true(value_of(r.body, "shoal_cluster_is_leader") == 1);
    assert_true(value_of(r.body, "shoal_durable_commits_total") >= 1);
    assert_true(value_of(r.body, "shoal_durable_commit_seconds_total") > 0);
    assert_true(value_of(r.body, "shoal_durable_map_size_bytes") > 0);
    thttp_free(&r);

    /* other paths and methods */
    static const char other[] = "GET /other HTTP/1.0\r\n\r\n";
    assert_true(thttp_raw(NULL, n.port, NULL, other, sizeof other - 1, &r));
    assert_int_equal(r.status, 404);
    thttp_free(&r);
    static const char post[] = "POST /metrics HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello";
    assert_true(thttp_raw(NULL, n.port, NULL, post, sizeof post - 1, &r));
    assert_int_equal(r.status, 405);
    assert_non_null(strstr(r.raw, "Allow: GET"));
    thttp_free(&r);

    /* hostile input: garbage, a request cut short, an absurd header; the next scrape works */
    static const char garbage[] = "B\xffGUS\x01 /\x02 HTTP/9.9\r\nno colon\r\n\r\n";
    thttp_raw(NULL, n.port, NULL, garbage, sizeof garbage - 1, &r);
    assert_true(r.status == 0 || r.status >= 400);
    thttp_free(&r);
    /* sent and dropped at once: a request cut short, and NUL-laden bytes (a NUL reads as an empty
       line, so the server would wait for a request line until its connection timeout) */
    static const char cut[] = "GET /metr";
    static const char nul[] = "\x00\xff\xfe garbage \x01\x02\r\n\r\n";
    const char *drops[] = {cut, nul};
    size_t drop_len[] = {sizeof cut - 1, sizeof nul - 1};
    for (int i = 0; i < 2; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(n.port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        assert_true(send(fd, drops[i], drop_len[i], MSG_NOSIGNAL) > 0);
        close(fd);
    }
    size_t big_len = 200000;
    char *big = malloc(big_len + 64);
    int hl = snprintf(big, 64, "GET /metrics HTTP/1.0\r\nX-Big: ");
    memset(big + hl, 'a', big_len - (size_t)hl - 4);
    memcpy(big + big_len - 4, "\r\n\r\n", 4);
    thttp_raw(NULL, n.port, NULL, big, big_len, &r);
    assert_true(r.status == 0 || r.status >= 400);
    thttp_free(&r);
    free(big);

    assert_true(scrape(n.port, &r));
    assert_int_equal(r.status, 200);
    assert_null(check_exposition(r.body));
    thttp_free(&r);

    node_stop(&n);
}

/* The sum of the values of every sample line that starts with `prefix`. */
static double sum_of(const char *text, const char *prefix)
{
    double sum = 0;
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, n) == 0) {
            const char *sp = strchr(l, ' ');
            if (sp)
                sum += strtod(sp + 1, NULL);
        }
    return sum;
}

/* Messages and bytes by kind class, on a node that talks to a peer: the replicator's page
   (0x00xx) both ways, and the classes add up to the node's totals. */
static void messages_by_kind_class(void **state)
{
    (void)state;
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 2, NULL);
    int err = 0;
    shoal_metrics_t *m = shoal_metrics_start(c.sys[0], NULL, 0, &err);
    assert_non_null(m);
    shoal_consistency_t all = c_all(3000);
    assert_int_equal(t_incr(&c, 0, "hits", 2, &all), 0);
    assert_int_equal(t_incr(&c, 1, "hits", 3, &all), 0);
    thttp_resp_t r;
    assert_true(scrape(shoal_metrics_port(m), &r));
    assert_int_equal(r.status, 200);
    const char *bad = check_exposition(r.body);
    if (bad)
        fail_msg("not exposition syntax: '%s'", bad);
#define MSGS(dir, kind)  "shoal_node_messages_total{direction=\"" dir "\",kind=\"" kind "\"}"
#define BYTES(dir, kind) "shoal_node_message_bytes_total{direction=\"" dir "\",kind=\"" kind "\"}"
    assert_true(value_of(r.body, MSGS("sent", "0x00xx")) >= 1);
    assert_true(value_of(r.body, MSGS("received", "0x00xx")) >= 1);
    assert_true(value_of(r.body, BYTES("sent", "0x00xx")) > 0);
    assert_true(value_of(r.body, BYTES("received", "0x00xx")) > 0);
    /* no membership on these nodes: no class of its own */
    assert_true(value_of(r.body, MSGS("sent", "0x04xx")) < 0);
#undef MSGS
#undef BYTES
    double sent = sum_of(r.body, "shoal_node_messages_total{direction=\"sent\"");
    double received = sum_of(r.body, "shoal_node_messages_total{direction=\"received\"");
    assert_true(sent >= 1);
    assert_true(sent == value_of(r.body, "shoal_node_messages_sent_total"));
    assert_true(received >= 1);
    assert_true(received == value_of(r.body, "shoal_node_messages_received_total"));
    thttp_free(&r);
    shoal_metrics_stop(&m);
    tcluster_stop(&c);
}

static void label_values_are_escaped(void **state)
{
    (void)state;
    shoal_buf_t b = {0};
    shoal_metrics_label_value(&b, "a\"b\\c\nd");
    assert_string_equal(shoal_buf_cstr(&b), "a\\\"b\\\\c\\nd");
    shoal_buf_reset(&b);
    shoal_metrics_family(&b, "x_total", "counter", "line\\one\ntwo");
    assert_string_equal(shoal_buf_cstr(&b), "# HELP x_total line\\\\one\\ntwo\n# TYPE x_total counter\n");
    shoal_buf_free(&b);
    /* the checker itself refuses what it should */
    assert_non_null(check_exposition("# TYPE a counter\na 1\n"));          /* no _total */
    assert_non_null(check_exposition("# TYPE a_total counter\nb_total 1\n")); /* undeclared */
    assert_non_null(check_exposition("# TYPE a gauge\na{x=\"q} 1\n"));
    assert_non_null(check_exposition("# TYPE a gauge\na one\n"));
    assert_null(check_exposition("# TYPE a gauge\na{x=\"q\\\"\",y=\"\"} 1.5\n"));
}

static void bad_arguments(void **state)
{
    (void)state;
    int err = 0;
    assert_null(shoal_metrics_start(NULL, NULL, 0, &err));
    assert_int_equal(err, SHOAL_EINVAL);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    assert_non_null(sys);
    assert_null(shoal_metrics_start(sys, "not-an-address", 0, &err));
    assert_int_equal(err, SHOAL_EINVAL);
    shoal_metrics_t *m = shoal_metrics_start(sys, "127.0.0.1", 0, &err);
    assert_non_null(m);
    /* the port is taken: a second endpoint on it cannot bind */
    assert_null(shoal_metrics_start(sys, "127.0.0.1", shoal_metrics_port(m), &err));
    assert_int_equal(err, SHOAL_EIO);
    assert_int_equal(shoal_metrics_add(m, NULL, NULL), SHOAL_EINVAL);
    /* collect is for the node thread */
    shoal_buf_t b = {0};
    assert_int_equal(shoal_metrics_collect(sys, &b), SHOAL_ETHREAD);
    /* a node without replicators still answers */
    thttp_resp_t r;
    assert_true(scrape(shoal_metrics_port(m), &r));
    assert_int_equal(r.status, 200);
    assert_null(check_exposition(r.body));
    assert_non_null(strstr(r.body, "shoal_node_peers 0\n"));
    thttp_free(&r);
    shoal_metrics_stop(&m);
    shoal_metrics_stop(&m); /* NULL-safe */
    shoal_system_destroy(&sys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(label_values_are_escaped),
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(scrape_running_node),
        cmocka_unit_test_teardown(messages_by_kind_class, tcluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
