/*  test_observability.c — what an operator reads off a node: metrics and logs (docs/operations.md,
    Metrics and Logs), against a live node with membership, sharding and a durable store.

    metrics_one_source: GET /metrics and `ddata-dump --node EP --metrics` both pass `promtool check
      metrics`, and name the same families in the same order (one source: the node's own
      exposition); process_* and shoal_build_info are there with sane values; 0.2's ddata-dump
      names are gone from --metrics and kept by --metrics-legacy (deprecated).
    grafana_names_exist: every metric name an expr of docs/grafana-shoal.json uses is a family of
      the live node's /metrics (test/cluster/observability_check.py).
    loglevel_at_run_time: a MAJORITY write refused by the closed quorum gate logs a debug line
      only after POST /loglevel {"level":"debug"}; the POST rules hold (a form body is refused,
      the level unchanged); GET /loglevel says the level.
    json_log_lines: shoal-member with --log-format json and shoal/loglevel = DEBUG in its --config
      file writes only JSON lines (ts, level, node, module, msg), and its GET /loglevel says debug
      (the file's level applied).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "durable.h"
#include "http.h"
#include "members.h"
#include "procs.h"
#include "shards.h"
#include "tools.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_MS 20000

static shoal_metrics_t *ep;
static shoal_durable_t *store;
static shoal_replicator_t *rep;
static char dir[] = "/tmp/shoal-obs-XXXXXX";

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    tsnode_opts_t o = {.no_region = true};
    tsnode_start(0, &o);
    rep = tsnode_durable_replicator(0, dir, &store);
    shoal_sharding_settings_t ss;
    tshard_settings(&ss);
    ss.replicator = rep;
    tsnode_region(0, TSHARD_TYPE, &ss, false);
    int err = 0;
    ep = shoal_http_start(tsn[0].sys, "127.0.0.1:0", &err);
    if (!ep)
        return -1;
    if (shoal_durable_metrics(store, ep) != 0)
        return -1;
    tsnode_wait_up(0x1, DEADLINE_MS);
    tsnode_wait_registered(0x1, 0, 1, DEADLINE_MS);
    return 0;
}

static int teardown(void **state)
{
    /* sharding, membership, then the replicator and its store, then the system */
    shoal_metrics_stop(&ep);
    shoal_sharding_destroy(&tsn[0].sh);
    shoal_cluster_destroy(&tsn[0].cl);
    shoal_replicator_destroy(&rep);
    shoal_durable_close(&store);
    tsnode_teardown(state);
    trm_tree(dir);
    return 0;
}

/* Runs a command line; its stdout into out (stderr into err when not NULL); the exit code. */
static int run(const char *cmd, char *out, size_t cap, char *err, size_t errcap)
{
    char errpath[] = "/tmp/shoal-obs-err-XXXXXX";
    int efd = mkstemp(errpath);
    assert_true(efd >= 0);
    close(efd);
    char full[8192];
    snprintf(full, sizeof full, "%s 2>%s", cmd, errpath);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    if (err) {
        FILE *f = fopen(errpath, "r");
        size_t m = f ? fread(err, 1, errcap - 1, f) : 0;
        err[m] = 0;
        if (f)
            fclose(f);
    }
    unlink(errpath);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The "# TYPE" lines of an exposition, in order, one a line. */
static void type_lines(const char *text, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = 0;
    for (const char *p = strstr(text, "# TYPE "); p; p = strstr(p + 1, "\n# TYPE ")) {
        if (*p == '\n')
            p++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);
        if (at + len + 1 >= cap)
            break;
        memcpy(out + at, p, len);
        at += len;
        out[at] = 0;
    }
}

static double sample_value(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    if (!p)
        fail_msg("no sample %s in:\n%.2000s", name, text);
    return strtod(p + strlen(key), NULL);
}

static void metrics_one_source(void **state)
{
    (void)state;
    uint16_t port = shoal_metrics_port(ep);
    thttp_resp_t r = {0};
    assert_true(thttp_get(port, "/metrics", &r));
    assert_int_equal(r.status, 200);
    const char *bad = thttp_promtool(r.body);
    if (bad)
        fail_msg("GET /metrics fails promtool: %s", bad);

    /* what every target has, with values that make sense */
    assert_true(sample_value(r.body, "process_resident_memory_bytes") > 1e6);
    assert_true(sample_value(r.body, "process_virtual_memory_bytes") > 1e6);
    assert_true(sample_value(r.body, "process_open_fds") >= 3);
    assert_true(sample_value(r.body, "process_max_fds") >= 64);
    assert_true(sample_value(r.body, "process_cpu_seconds_total") >= 0);
    double start = sample_value(r.body, "process_start_time_seconds"), now = (double)time(NULL);
    assert_true(start <= now + 1 && start > now - 3600);
    char build[160];
    snprintf(build, sizeof build,
             "\nshoal_build_info{version=\"%s\",protocol_min=\"%u\",protocol_max=\"%u\"} 1\n",
             SHOAL_VERSION, (unsigned)SHOAL_PROTOCOL_MIN, (unsigned)SHOAL_PROTOCOL_MAX);
    assert_non_null(strstr(r.body, build));

    /* ddata-dump --metrics: the same families, in the same order, and promtool passes */
    char tool[4200], cmd[4400];
    if (!ttool_find("ddata-dump", tool, sizeof tool))
        fail_msg("ddata-dump is not built (build/bin/ddata-dump)");
    static char out[1 << 18], err[4096], want[1 << 16], got[1 << 16];
    snprintf(cmd, sizeof cmd, "%s --node %s --metrics", tool, shoal_system_endpoint(tsn[0].sys));
    int ex = run(cmd, out, sizeof out, err, sizeof err);
    if (ex != 0)
        fail_msg("ddata-dump --metrics: exit %d: %s", ex, err);
    bad = thttp_promtool(out);
    if (bad)
        fail_msg("ddata-dump --metrics fails promtool: %s", bad);
    type_lines(r.body, want, sizeof want);
    type_lines(out, got, sizeof got);
    assert_true(strlen(want) > 1000); /* node, replicator, cluster, sharding, durable, http */
    assert_string_equal(got, want);
    /* 0.2's names of ddata-dump, now the names of /metrics */
    assert_null(strstr(out, "shoal_node_bytes_in_total"));
    assert_null(strstr(out, "shoal_node_connections_open_total"));
    assert_non_null(strstr(out, "\nshoal_node_bytes_received_total "));
    assert_non_null(strstr(out, "# TYPE shoal_node_connections_open gauge\n"));
    assert_non_null(strstr(out, "# TYPE shoal_sharding_shards gauge\n"));
    size_t families = 0;
    for (const char *p = want; (p = strchr(p, '\n')); p++)
        families++;
    print_message("/metrics and ddata-dump --metrics: %zu families alike, promtool passes both\n",
                  families);

    /* the deprecated alias: 0.2's names, and a warning saying what replaces them */
    snprintf(cmd, sizeof cmd, "%s --node %s --metrics-legacy", tool,
             shoal_system_endpoint(tsn[0].sys));
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "shoal_node_bytes_in_total "));
    assert_non_null(strstr(err, "deprecated"));
    thttp_free(&r);
}

static void grafana_names_exist(void **state)
{
    (void)state;
    thttp_resp_t r = {0};
    assert_true(thttp_get(shoal_metrics_port(ep), "/metrics", &r));
    assert_int_equal(r.status, 200);
    char path[] = "/tmp/shoal-obs-metrics-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(r.body);
    assert_true(write(fd, r.body, len) == (ssize_t)len);
    close(fd);
    thttp_free(&r);
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd,
             "python3 test/cluster/observability_check.py grafana docs/grafana-shoal.json %s",
             path);
    int ex = run(cmd, out, sizeof out, NULL, 0);
    unlink(path);
    print_message("%s", out);
    if (ex != 0)
        fail_msg("docs/grafana-shoal.json: %s", out);
}

/* ---------------------------------------------------------------------------------------------
 * loglevel_at_run_time
 */
static struct {
    pthread_mutex_t mu;
    int refusals;    /* debug lines of a refused MAJORITY write */
    int level_lines; /* the endpoint's "log level" line */
} seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void capture(shoal_log_level_t level, const char *msg, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&seen.mu);
    if (level == SHOAL_LOG_DEBUG && strstr(msg, "MAJORITY write of 'gated' refused") &&
        strstr(msg, "not a full member"))
        seen.refusals++;
    if (strstr(msg, "log level info -> debug (POST /loglevel)"))
        seen.level_lines++;
    pthread_mutex_unlock(&seen.mu);
}

static int close_gate(shoal_replicator_t *r, void *arg)
{
    (void)arg;
    return shoal_replicator_set_quorum_gate(r, false, "test: not a member");
}

static int refusals(void)
{
    pthread_mutex_lock(&seen.mu);
    int n = seen.refusals;
    pthread_mutex_unlock(&seen.mu);
    return n;
}

static void loglevel_at_run_time(void **state)
{
    (void)state;
    static tcluster_t c;
    tcluster_start(&c, 1, NULL);
    int err = 0;
    shoal_metrics_t *m = shoal_http_start(c.sys[0], "127.0.0.1:0", &err);
    assert_non_null(m);
    uint16_t port = shoal_metrics_port(m);
    assert_int_equal(on_node(&c, 0, close_gate, NULL), 0);
    shoal_log_set_level(SHOAL_LOG_INFO);
    shoal_log_set_handler(capture, NULL);

    shoal_consistency_t maj = c_majority(1000);
    assert_int_equal(t_incr(&c, 0, "gated", 1, &maj), SHOAL_ENOQUORUM);
    assert_int_equal(refusals(), 0); /* info: no debug line */

    /* the POST rules: a form body is refused and changes nothing */
    static const char form[] =
        "POST /loglevel HTTP/1.0\r\nHost: localhost\r\nContent-Type: "
        "application/x-www-form-urlencoded\r\nContent-Length: 5\r\n\r\ndebug";
    thttp_resp_t r = {0};
    assert_true(thttp_raw(NULL, port, NULL, form, sizeof form - 1, &r));
    assert_int_equal(r.status, 415);
    thttp_free(&r);
    assert_int_equal(shoal_log_get_level(), SHOAL_LOG_INFO);
    assert_true(thttp_post(NULL, port, NULL, "/loglevel", "{\"level\":\"loud\"}", &r));
    assert_int_equal(r.status, 400);
    thttp_free(&r);
    assert_int_equal(t_incr(&c, 0, "gated", 1, &maj), SHOAL_ENOQUORUM);
    assert_int_equal(refusals(), 0);

    assert_true(thttp_post(NULL, port, NULL, "/loglevel", "{\"level\":\"debug\"}", &r));
    assert_int_equal(r.status, 200);
    assert_true(thttp_json_ok(r.body));
    assert_non_null(strstr(r.body, "\"level\":\"debug\""));
    thttp_free(&r);
    assert_int_equal(shoal_log_get_level(), SHOAL_LOG_DEBUG);
    assert_int_equal(t_incr(&c, 0, "gated", 1, &maj), SHOAL_ENOQUORUM);
    assert_int_equal(refusals(), 1);
    pthread_mutex_lock(&seen.mu);
    assert_int_equal(seen.level_lines, 1);
    pthread_mutex_unlock(&seen.mu);
    assert_true(thttp_get(port, "/loglevel", &r));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"level\":\"debug\""));
    thttp_free(&r);

    /* and back: the lines stop */
    assert_true(thttp_post(NULL, port, NULL, "/loglevel", "{\"level\":\"info\"}", &r));
    assert_int_equal(r.status, 200);
    thttp_free(&r);
    assert_int_equal(t_incr(&c, 0, "gated", 1, &maj), SHOAL_ENOQUORUM);
    assert_int_equal(refusals(), 1);

    shoal_log_set_handler(NULL, NULL);
    shoal_metrics_stop(&m);
    tcluster_stop(&c);
}

/* ---------------------------------------------------------------------------------------------
 * json_log_lines
 */
typedef struct {
    uint16_t port;
} lv_t;

static bool says_debug(void *arg)
{
    lv_t *l = arg;
    thttp_resp_t r = {0};
    bool ok = thttp_get(l->port, "/loglevel", &r) && r.status == 200 &&
              strstr(r.body, "\"level\":\"debug\"") && strstr(r.body, "\"format\":\"json\"");
    thttp_free(&r);
    return ok;
}

static void json_log_lines(void **state)
{
    (void)state;
    char tmp[] = "/tmp/shoal-obs-json-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char path[4200], conf[4300], log[4300];
    if (!ttool_find("shoal-member", path, sizeof path))
        fail_msg("shoal-member is not built (build/bin/shoal-member)");
    snprintf(conf, sizeof conf, "%s/node.cfg", tmp);
    snprintf(log, sizeof log, "%s/node.log", tmp);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs("shoal\n    loglevel = DEBUG\n", f);
    fclose(f);
    int node_port = tfree_port(), http_port = tfree_port();
    while (http_port == node_port)
        http_port = tfree_port();
    char bind[64], seed[64], http[16];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", node_port);
    snprintf(seed, sizeof seed, "tcp://127.0.0.1:%d", node_port);
    snprintf(http, sizeof http, "%d", http_port);
    /* stderr alone: the log (stdout is the program's own output: its event lines) */
    char line[20000];
    snprintf(line, sizeof line,
             "exec %s --bind %s --seed %s --fast --config %s --http %s --log-format json "
             "2>%s >/dev/null",
             path, bind, seed, conf, http, log);
    char *argv[] = {"/bin/sh", "-c", line, NULL};
    unsetenv("SHOAL_LOG_LEVEL");
    unsetenv("SHOAL_LOG_FORMAT");
    int pid = ttool_spawn("/bin/sh", argv, NULL);
    assert_true(pid > 0);
    lv_t l = {(uint16_t)http_port};
    bool up = wait_until(says_debug, &l, DEADLINE_MS);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    if (!up)
        fail_msg("shoal-member --config (loglevel = DEBUG) --log-format json: GET /loglevel never "
                 "said debug/json (log in %s)",
                 log);
    char cmd[4400], out[4096];
    snprintf(cmd, sizeof cmd, "python3 test/cluster/observability_check.py jsonlog %s", log);
    int ex = run(cmd, out, sizeof out, NULL, 0);
    print_message("%s", out);
    if (ex != 0)
        fail_msg("%s", out);
    trm_tree(tmp);
}

int main(void)
{
    const struct CMUnitTest with_node[] = {
        cmocka_unit_test(metrics_one_source),
        cmocka_unit_test(grafana_names_exist),
    };
    const struct CMUnitTest alone[] = {
        cmocka_unit_test(loglevel_at_run_time),
        cmocka_unit_test(json_log_lines),
    };
    int failed = cmocka_run_group_tests_name("with_node", with_node, setup, teardown);
    return failed + cmocka_run_group_tests_name("alone", alone, NULL, NULL);
}
