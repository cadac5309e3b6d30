/*  test_config_limits.c — the caps of --config reach the node programs (tools/cli.h,
    cli_config_limits; docs/configuration.md): a counter-service node started with a file setting
    shoal/cluster/sharding/max-entities-per-node = 2 runs two entities, and an ask to a third is
    refused with the limit's error (exit 1, "limit"), while the first two still answer.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

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

static int teardown(void **state)
{
    (void)state;
    if (node > 0) {
        kill(node, SIGKILL);
        waitpid(node, NULL, 0);
        node = -1;
    }
    trm_tree(tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_max_entities_from_config, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
