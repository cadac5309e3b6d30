/*  test_alert_rules.c — docs/alerts/shoal-rules.yml (docs/operations.md, "Alerts and runbooks")
    against promtool and a live node.

    rules_against_live_node: a counter-service node (membership, two sharded entity types, a
      durable store, the management endpoint) is started; its GET /metrics is saved, and
      test/cluster/alert_rules_check.py runs `promtool check rules` and `promtool test rules`
      (docs/alerts/shoal-rules.test.yml: each alert firing and quiet on synthetic series), and
      checks that every metric name of every alert's expr is a family of that /metrics, that each
      alert's runbook_url is a "Runbook: NAME" heading of docs/operations.md, and that each alert
      fires in at least one test.
    check_catches_a_missing_metric: the same check against that /metrics with the durable store's
      families removed fails, naming shoal_durable_used_bytes (the check can fail).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "http.h"
#include "procs.h"
#include "tools.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 30000

static char tmp[] = "/tmp/shoal-alerts-XXXXXX";
static char metrics_path[PATH_MAX];
static char *metrics; /* the live node's GET /metrics */

typedef struct {
    uint16_t port;
} node_http_t;

/* /metrics has what the rules need once the node runs its store and both regions */
static bool metrics_ready(void *arg)
{
    node_http_t *n = arg;
    thttp_resp_t r = {0};
    bool ok = thttp_get(n->port, "/metrics", &r) && r.status == 200 &&
              strstr(r.body, "\nshoal_durable_used_bytes ") &&
              strstr(r.body, "\nshoal_sharding_buffered{type=\"account\"}") &&
              strstr(r.body, "\nshoal_cluster_members{status=\"up\"} 1\n");
    if (ok) {
        free(metrics);
        metrics = strdup(r.body);
    }
    thttp_free(&r);
    return ok;
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(tmp))
        return -1;
    char tool[PATH_MAX];
    if (!ttool_find("counter-service", tool, sizeof tool)) {
        fprintf(stderr, "counter-service is not built (build/bin/counter-service)\n");
        return -1;
    }
    int port = tfree_port(), http = tfree_port();
    while (http == port)
        http = tfree_port();
    char bind[64], dir[PATH_MAX + 8], hp[16], log[PATH_MAX + 16];
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(dir, sizeof dir, "%s/data", tmp);
    snprintf(hp, sizeof hp, "%d", http);
    snprintf(log, sizeof log, "%s/node.log", tmp);
    char *argv[] = {tool,         "node", "--bind", bind, "--seed", bind,
                    "--data-dir", dir,    "--http", hp,   NULL};
    int pid = ttool_spawn(tool, argv, log);
    if (pid <= 0)
        return -1;
    node_http_t n = {(uint16_t)http};
    bool up = wait_until(metrics_ready, &n, DEADLINE_MS);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    if (!up) {
        fprintf(stderr,
                "counter-service node: /metrics never showed the store, the regions and "
                "one member Up (log: %s)\n",
                log);
        return -1;
    }
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.txt", tmp);
    FILE *f = fopen(metrics_path, "w");
    if (!f)
        return -1;
    fputs(metrics, f);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(metrics);
    metrics = NULL;
    trm_tree(tmp);
    return 0;
}

/* python3 alert_rules_check.py RULES METRICS OPERATIONS: its exit code, its output in out */
static int check(const char *metrics_file, char *out, size_t cap)
{
    char script[PATH_MAX], rules[PATH_MAX], ops[PATH_MAX];
    ttool_tree_file("test/cluster/alert_rules_check.py", script, sizeof script);
    ttool_tree_file("docs/alerts/shoal-rules.yml", rules, sizeof rules);
    ttool_tree_file("docs/operations.md", ops, sizeof ops);
    return ttool_runf("python3", out, cap, "%s %s %s %s", script, rules, metrics_file, ops);
}

static void rules_against_live_node(void **state)
{
    (void)state;
    static char out[1 << 16];
    int ex = check(metrics_path, out, sizeof out);
    print_message("%s", out);
    if (ex != 0)
        fail_msg("docs/alerts/shoal-rules.yml: exit %d", ex);
    assert_non_null(strstr(out, "SUCCESS: 12 rules found"));
    assert_non_null(strstr(out, "Unit Testing:"));
    assert_non_null(strstr(out, "12 alerts, "));
}

static void check_catches_a_missing_metric(void **state)
{
    (void)state;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/no-durable.txt", tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (const char *p = metrics; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) + 1 : strlen(p);
        if (!strstr(p, "shoal_durable_") || (eol && strstr(p, "shoal_durable_") > eol))
            fwrite(p, 1, len, f);
        p += len;
    }
    fclose(f);
    static char out[1 << 16];
    int ex = check(path, out, sizeof out);
    if (ex != 1 || !strstr(out, "ShoalStoreNearFull: shoal_durable_used_bytes is not in /metrics"))
        fail_msg("without the store's families: exit %d, and\n%s", ex, out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rules_against_live_node),
        cmocka_unit_test(check_catches_a_missing_metric),
    };
    return cmocka_run_group_tests_name("alert_rules", tests, setup, teardown);
}
