/*  test_dashboard.c — the dashboard page (GET / of the management endpoint) in a real browser:
    three members with sharding in this process, entities on every one, an endpoint on node 0;
    test/cluster/dashboard_check.py (Debian's /usr/bin/python3, where python3-selenium lives) loads
    the page in headless Chromium (Selenium, chromedriver)
    and checks the members and the shard map it shows; when it prints KILL, node 2 crashes here,
    and the same page (no reload) must mark it unreachable, then drop it once it is removed.

    SHOAL_DASHBOARD_SCREENSHOT=PATH also saves what the page shows before the crash (the picture
    in docs/operations.md comes from it).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "shards.h"
#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEADLINE_MS 20000

static shoal_metrics_t *endpoint;

static int teardown(void **state)
{
    shoal_metrics_stop(&endpoint);
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
    endpoint = shoal_http_start(tsn[0].sys, "127.0.0.1:0", &err);
    assert_non_null(endpoint);
    for (int k = 0; k < 12; k++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", k);
        assert_int_equal(shoal_region_tell(tsn[k % 3].r, id, "t:1", 3), 0);
    }

    char script[4200], cmd[8600];
    ttool_tree_file("test/cluster/dashboard_check.py", script, sizeof script);
    const char *shot = getenv("SHOAL_DASHBOARD_SCREENSHOT");
    char shot_arg[4200] = "";
    if (shot)
        snprintf(shot_arg, sizeof shot_arg, " --screenshot '%s'", shot);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' http://127.0.0.1:%u/ '%s' %s 3 --timeout %d%s 2>&1",
             script, (unsigned)shoal_metrics_port(endpoint),
             shoal_node_id(shoal_system_self(tsn[2].sys)), TSHARD_TYPE, 60 * tscale(), shot_arg);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[4096];
    bool killed = false;
    while (fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        if (strcmp(line, "KILL\n") == 0 && !killed) {
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
