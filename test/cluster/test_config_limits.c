/*  test_config_limits.c — the caps of --config reach the node programs (tools/cli.h,
    cli_config_limits; docs/configuration.md): a counter-service node started with a file setting
    shoal/cluster/sharding/max-entities-per-node = 2 runs two entities, and an ask to a third is
    refused with the limit's error (exit 1, "limit"), while the first two still answer; and
    shoal/cluster/distributed-data/max-keys reaches the replicator sharding starts itself (the
    entities' saved states, shoal_sharding_set_replicator_limits): with max-keys = 8, entities
    spread over 50 shards are refused with the limit's error once their shards' keys fill it,
    and the node's metrics count the refusals.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "http.h"
#include "procs.h"
#include "tools.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_MS 30000

static char tmp[] = "/tmp/shoal-limits-XXXXXX";
static pid_t node = -1;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_max_entities_from_config(void **state)
{
    (void)state;
    char tool[PATH_MAX];
    assert_true(ttool_find("counter-service", tool, sizeof tool));
    assert_non_null(mkdtemp(tmp));
    char conf[PATH_MAX], log[PATH_MAX], bind[64];
    snprintf(conf, sizeof conf, "%s/node.zpl", tmp);
    snprintf(log, sizeof log, "%s/node.log", tmp);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs("shoal\n    cluster\n        sharding\n            max-entities-per-node = 2\n", f);
    fclose(f);
    int port = tfree_port();
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    char *argv[] = {tool, "node", "--bind", bind, "--config", conf, "--shards", "10", NULL};
    node = ttool_spawn(tool, argv, log);
    assert_true(node > 0);

    /* the first entity answers once the node is up and its regions registered */
    static char out[4096];
    int rc = -1;
    for (int64_t end = now_ms() + DEADLINE_MS; rc != 0 && now_ms() < end;) {
        rc = ttool_runf(tool, out, sizeof out, "--node %s ask counter a add 1", bind);
        if (rc != 0)
            usleep(200 * 1000);
    }
    if (rc != 0)
        fail_msg("the first entity never answered (%d): %s (log: %s)", rc, out, log);
    rc = ttool_runf(tool, out, sizeof out, "--node %s ask counter b add 1", bind);
    if (rc != 0)
        fail_msg("the second entity: %d %s", rc, out);
    rc = ttool_runf(tool, out, sizeof out, "--node %s ask counter c add 1", bind);
    print_message("third entity: exit %d: %s", rc, out);
    assert_int_equal(rc, 1);
    if (!strstr(out, "limit"))
        fail_msg("the refusal does not name the limit: %s", out);
    /* the two admitted still answer */
    rc = ttool_runf(tool, out, sizeof out, "--node %s ask counter a get", bind);
    assert_int_equal(rc, 0);
}

/* The whole of a small file (a node's log), NUL-terminated; NULL when it does not read. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static void test_sharding_replicator_max_keys_from_config(void **state)
{
    (void)state;
    char tool[PATH_MAX];
    assert_true(ttool_find("counter-service", tool, sizeof tool));
    assert_non_null(mkdtemp(tmp));
    char conf[PATH_MAX], log[PATH_MAX], bind[64], http[32];
    snprintf(conf, sizeof conf, "%s/node.zpl", tmp);
    snprintf(log, sizeof log, "%s/node.log", tmp);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fputs("shoal\n    cluster\n        distributed-data\n            max-keys = 8\n", f);
    fclose(f);
    int port = tfree_port(), hport = tfree_port();
    snprintf(bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf(http, sizeof http, "%d", hport);
    char *argv[] = {tool,       "node", "--bind", bind, "--config", conf,
                    "--shards", "50",   "--http", http, NULL};
    node = ttool_spawn(tool, argv, log);
    assert_true(node > 0);

    static char out[4096];
    int rc = -1;
    for (int64_t end = now_ms() + DEADLINE_MS; rc != 0 && now_ms() < end;) {
        rc = ttool_runf(tool, out, sizeof out, "--node %s ask counter e0 add 1", bind);
        if (rc != 0)
            usleep(200 * 1000);
    }
    if (rc != 0)
        fail_msg("the first entity never answered (%d): %s (log: %s)", rc, out, log);
    /* each new shard of a saved entity is a key (its states) beside the coordinator's: the cap
       is reached well before 40 entities over 50 shards */
    int answered = 1, refused = -1;
    for (int e = 1; e < 40 && refused < 0; e++) {
        rc = ttool_runf(tool, out, sizeof out, "--node %s ask counter e%d add 1", bind, e);
        if (rc == 0)
            answered++;
        else
            refused = e;
    }
    if (refused < 0)
        fail_msg("40 entities over 50 shards saved their states under max-keys = 8: the cap "
                 "does not reach sharding's replicator");
    print_message("entity e%d refused after %d answered: exit %d: %s", refused, answered, rc, out);
    /* a save refused, or the entity's remembering refused, answers the limit's error (never a
       timeout: retrying would only be refused again) */
    if (rc != 1 || !strstr(out, "limit"))
        fail_msg("the refusal is not the limit's error: exit %d: %s", rc, out);
    const char *text = read_text(log);
    assert_non_null(text);
    if (!strstr(text, "refused with SHOAL_ELIMIT") || !strstr(text, "(max-keys)"))
        fail_msg("the node's log does not name the cap:\n%s", text);
    /* counted on the node's metrics, with the cap shown */
    thttp_resp_t r;
    assert_true(thttp_get((uint16_t)hport, "/metrics", &r));
    const char *m = r.body;
    bool counted = false, cap = false;
    for (const char *p = m; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        long long v = 0;
        if (!strncmp(p, "shoal_replicator_limit_refused_total{", 37) &&
            strstr(p, "limit=\"keys\"") && strstr(p, "limit=\"keys\"") < strchr(p, '\n') &&
            sscanf(strchr(p, '}') + 1, "%lld", &v) == 1 && v > 0)
            counted = true;
        if (!strncmp(p, "shoal_replicator_max_keys{", 26) &&
            sscanf(strchr(p, '}') + 1, "%lld", &v) == 1 && v == 8)
            cap = true;
    }
    if (!counted || !cap)
        fail_msg("metrics: refusals counted %d, cap shown %d:\n%s", counted, cap, m);
    thttp_free(&r);
    /* the entities admitted still answer */
    rc = ttool_runf(tool, out, sizeof out, "--node %s ask counter e0 get", bind);
    assert_int_equal(rc, 0);
}

static int teardown(void **state)
{
    (void)state;
    if (node > 0) {
        kill(node, SIGKILL);
        waitpid(node, NULL, 0);
        node = -1;
    }
    if (!getenv("KEEP_TMP"))
        trm_tree(tmp);
    strcpy(tmp, "/tmp/shoal-limits-XXXXXX"); /* mkdtemp's template again, for the next test */
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_max_entities_from_config, teardown),
        cmocka_unit_test_teardown(test_sharding_replicator_max_keys_from_config, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
