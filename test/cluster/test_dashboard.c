/*  test_dashboard.c — the dashboard page (GET / of the management endpoint) in a real browser:
    three members with sharding in this process, each with its management endpoint, under load (a
    client writing to node 0's replicator and sharded tells through every node, from a thread of
    their own), a shard pinned to node 1; test/cluster/dashboard_check.py (Debian's
    /usr/bin/python3, where python3-selenium lives) loads node 0's page in headless Chromium
    (Selenium, chromedriver) and checks what it shows against the members' own /metrics (the
    values the charts plot, read back from the SVG), the member and type pages, the pin row, the
    grouped events and GET /cluster/members/<member>; when it prints KILL, node 2 crashes here,
    and the same page (no reload) must stop its series, mark it unreachable, then drop it once it
    is removed.

    Screenshots for a person to look at: build/test-artifacts/dashboard.png (before the crash) and
    dashboard-killed.png (after); SHOAL_DASHBOARD_SCREENSHOT=PATH saves the first there instead
    (docs/dashboard.png comes from it).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "shards.h"
#include "tools.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 20000

static shoal_metrics_t *endpoints[3];
static atomic_bool loading;
static pthread_t loader;
static bool loader_started;
static char node0_endpoint[128];

/* The load the charts must show: a client writing to node 0's replicator and sharded tells
   through every live node, about 100 of each a second. */
static void *load(void *arg)
{
    (void)arg;
    int err = 0;
    shoal_client_t *cl = shoal_client_new(node0_endpoint, 2000, &err);
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    shoal_client_op_t inc = {.type = "GCounter", .op = "increment", .n = 1};
    for (unsigned n = 0; atomic_load(&loading); n++) {
        if (cl)
            shoal_client_update(cl, "", "dashboard-load", &local, &inc);
        char id[16];
        snprintf(id, sizeof id, "e%u", n % 12);
        shoal_region_t *r = tsn[n % 2].r; /* nodes 0 and 1: node 2 is the one killed */
        if (r)
            shoal_region_tell(r, id, "t:1", 3);
        usleep(10000);
    }
    shoal_client_destroy(&cl);
    return NULL;
}

static int teardown(void **state)
{
    atomic_store(&loading, false);
    if (loader_started)
        pthread_join(loader, NULL);
    loader_started = false;
    for (int i = 0; i < 3; i++)
        shoal_metrics_stop(&endpoints[i]);
    return tsnode_teardown(state);
}

static void dashboard_in_a_browser(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        tsnode_opts_t o = {.seed = 0};
        tsnode_start(i, &o);
    }
    tsnode_wait_up(0x7, DEADLINE_MS);
    tsnode_wait_registered(0x7, 0, 3, DEADLINE_MS);
    int err = 0;
    for (int i = 0; i < 3; i++) {
        endpoints[i] = shoal_http_start(tsn[i].sys, "127.0.0.1:0", &err);
        assert_non_null(endpoints[i]);
    }
    for (int k = 0; k < 12; k++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", k);
        assert_int_equal(shoal_region_tell(tsn[k % 3].r, id, "t:1", 3), 0);
    }
    /* a pin the page must show as a row naming the type and the shard */
    char member1[128], msg[512];
    snprintf(member1, sizeof member1, "%s:%u", shoal_node_host(shoal_system_self(tsn[1].sys)),
             (unsigned)shoal_node_port(shoal_system_self(tsn[1].sys)));
    int rc = SHOAL_ESTATE;
    for (int tries = 0; tries < 50 && rc == SHOAL_ESTATE; tries++)
        if ((rc = shoal_region_move_shard(tsn[0].r, "1", member1, 0, msg, sizeof msg)) ==
            SHOAL_ESTATE)
            usleep(100000);
    if (rc != 0)
        fail_msg("move shard 1 to %s: %s (%s)", member1, shoal_strerror(rc), msg);

    snprintf(node0_endpoint, sizeof node0_endpoint, "%s", shoal_system_endpoint(tsn[0].sys));
    atomic_store(&loading, true);
    assert_int_equal(pthread_create(&loader, NULL, load, NULL), 0);
    loader_started = true;

    char script[4200], page[4200], artifacts[4200], cmd[16384];
    ttool_tree_file("test/cluster/dashboard_check.py", script, sizeof script);
    ttool_tree_file("membership/dashboard.html", page, sizeof page);
    ttool_tree_file("build/test-artifacts", artifacts, sizeof artifacts);
    const char *shot = getenv("SHOAL_DASHBOARD_SCREENSHOT");
    char shot_arg[4400] = "";
    if (shot)
        snprintf(shot_arg, sizeof shot_arg, " --screenshot '%s'", shot);
    int n = snprintf(cmd, sizeof cmd,
                     "/usr/bin/python3 '%s' http://127.0.0.1:%u/ '%s' %s 3 --timeout %d"
                     " --page '%s' --artifacts '%s' --pinned 1=%s%s",
                     script, (unsigned)shoal_metrics_port(endpoints[0]),
                     shoal_node_id(shoal_system_self(tsn[2].sys)), TSHARD_TYPE, 30 * tscale(), page,
                     artifacts, member1, shot_arg);
    for (int i = 0; i < 3; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --member '%s=http://127.0.0.1:%u/'",
                      shoal_node_id(shoal_system_self(tsn[i].sys)),
                      (unsigned)shoal_metrics_port(endpoints[i]));
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>&1");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[4096];
    bool killed = false;
    while (fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        if (strcmp(line, "KILL\n") == 0 && !killed) {
            shoal_metrics_stop(&endpoints[2]); /* before the node it reads goes */
            tsnode_crash(2);
            killed = true;
        }
    }
    int status = pclose(p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("dashboard_check.py failed (exit %d): the page did not show what it must",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    assert_true(killed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(dashboard_in_a_browser, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
