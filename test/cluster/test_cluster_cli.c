/*  test_cluster_cli.c — shoal-cluster's machine-readable check, its store finding and its member
    filters (issue 37 item 7, issue 38 "limits you can see"), as an operator runs the release
    build/bin/shoal-cluster against a live node: one in-process node with the role "backend", a
    durable store whose map_max is 1 MiB (filled over 80% by the test) and its
    metrics on the management endpoint (what shoal_client_metrics sends).

    check_store_and_json: `check` prints the node's store line and the finding "the durable store
      of ... is N% full" and exits 1; `--json check` prints one JSON object (python3 reads it)
      with ok false, that finding, members_up 1 and the store's used and max bytes from the
      node's own metrics; both exit 1. Once map_max is raised (shoal_durable_set_map_max), both
      exit 0 and --json says ok true with no finding.
    members_filters: `members --status up` lists the node, `--status WeaklyUp` and `--role nosuch`
      none ("(0 of 1 members"), `--role backend` the node; --json filters the members array;
      `--status bogus` and `--status` without a value exit 2 naming what is wrong.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "durable.h"
#include "members.h"
#include "procs.h"
#include "shards.h"
#include "tools.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEADLINE_MS 20000
#define SMALL_MAP   (1024 * 1024) /* filled over 80% by the test */

static shoal_metrics_t *ep;
static shoal_durable_t *store;
static char dir[] = "/tmp/shoal-cli-XXXXXX";
static char tool[PATH_MAX], node[128];
static char out[1 << 16];

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir) || !ttool_find("shoal-cluster", tool, sizeof tool))
        return -1;
    static shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    static const char *const roles[] = {"backend"};
    cs.roles = roles;
    cs.n_roles = 1;
    tsnode_opts_t o = {.no_region = true, .cluster = &cs};
    tsnode_start(0, &o);
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = dir;
    ds.map_size = SMALL_MAP;
    ds.map_max = SMALL_MAP;
    ds.nosync = true;
    int err = 0;
    store = shoal_durable_open(&ds, &err);
    if (!store)
        return -1;
    ep = shoal_http_start(tsn[0].sys, "127.0.0.1:0", &err);
    if (!ep || shoal_durable_metrics(store, ep) != 0)
        return -1;
    tsnode_wait_up(0x1, DEADLINE_MS);
    snprintf(node, sizeof node, "%s", shoal_system_endpoint(tsn[0].sys));
    return 0;
}

static int teardown(void **state)
{
    shoal_metrics_stop(&ep);
    shoal_sharding_destroy(&tsn[0].sh);
    shoal_cluster_destroy(&tsn[0].cl);
    shoal_durable_close(&store);
    tsnode_teardown(state);
    trm_tree(dir);
    return 0;
}

static int sc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sc(const char *fmt, ...)
{
    char args[512], all[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(all, sizeof all, "--node %s %s", node, args);
    return ttool_run(tool, all, out, sizeof out);
}

static void need(const char *what)
{
    if (!strstr(out, what))
        fail_msg("no '%s' in:\n%s", what, out);
}

/* python3 reads --json check's output: "ok findings used max" on one line */
static void read_json(char *line, size_t cap)
{
    char path[] = "/tmp/shoal-cli-json-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(out);
    assert_true(write(fd, out, len) == (ssize_t)len);
    close(fd);
    int rc = ttool_runf("python3", line, cap,
                        "-c 'import json,sys; o=json.load(open(sys.argv[1])); "
                        "s=o[\"stores\"]; "
                        "print(o[\"ok\"], len(o[\"findings\"]), o[\"members_up\"], len(s), "
                        "s[0][\"used_bytes\"] if s else -1, s[0][\"map_max_bytes\"] if s else -1)' "
                        "%s",
                        path);
    unlink(path);
    if (rc != 0)
        fail_msg("--json check is not one JSON object with stores: %s\n%s", line, out);
}

static void stored(void *arg, int status)
{
    *(int *)arg = status;
}

static void check_store_and_json(void **state)
{
    (void)state;
    /* values written straight into a store of the environment until it is over 80% full (no
       replicator uses it: nothing else writes) */
    shoal_store_t *st = shoal_durable_store(store, "fill");
    assert_non_null(st);
    static char value[1500];
    memset(value, 'v', sizeof value);
    shoal_durable_space_t sp;
    assert_int_equal(shoal_durable_space(store, &sp), 0);
    for (int k = 0; k < 2000 && sp.used_bytes * 100 <= sp.map_max * 81; k++) {
        char key[32];
        snprintf(key, sizeof key, "fill-%d", k);
        int status = 1;
        st->store(st->ctx, key, strlen(key), value, sizeof value, stored, &status);
        assert_int_equal(shoal_durable_space(store, &sp), 0);
        if (status != 0)
            break; /* full (SHOAL_ESTORE): over 80% all the same, checked below */
    }
    if (sp.used_bytes * 10 <= sp.map_max * 8) /* the premise: over 80% */
        fail_msg("the store uses %zu of %zu bytes (map %zu)", sp.used_bytes, sp.map_max,
                 sp.map_size);

    int rc = sc("check");
    if (rc != 1)
        fail_msg("check of a store over 80%%: exit %d\n%s", rc, out);
    char want[256];
    snprintf(want, sizeof want, "[STORE] %s: %zu of %zu bytes used", node + strlen("tcp://"),
             sp.used_bytes, sp.map_max);
    need(want);
    snprintf(want, sizeof want, "[ERR] the durable store of %s is ", node + strlen("tcp://"));
    need(want);
    need("% full");
    need("1 finding");

    rc = sc("--json check");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "the durable store of "));
    char line[512], expect[128];
    read_json(line, sizeof line);
    snprintf(expect, sizeof expect, "False 1 1 1 %zu %zu\n", sp.used_bytes, sp.map_max);
    assert_string_equal(line, expect);

    /* room again: no finding, exit 0, ok true */
    assert_int_equal(shoal_durable_set_map_max(store, (size_t)64 << 20), 0);
    rc = sc("check");
    if (rc != 0)
        fail_msg("check with map_max raised: exit %d\n%s", rc, out);
    need("[OK] 1 members Up");
    need("of 67108864 bytes used");
    assert_int_equal(sc("--json check"), 0);
    read_json(line, sizeof line);
    snprintf(expect, sizeof expect, "True 0 1 1 %zu 67108864\n", sp.used_bytes);
    assert_string_equal(line, expect);
}

static void members_filters(void **state)
{
    (void)state;
    const char *addr = node + strlen("tcp://");
    assert_int_equal(sc("members --status up"), 0);
    need(addr);
    need("(1 of 1 members: status up)");
    assert_int_equal(sc("members --status WeaklyUp"), 0);
    need("(0 of 1 members: status WeaklyUp)");
    assert_int_equal(sc("members --role nosuch"), 0);
    need("(0 of 1 members: role nosuch)");
    assert_int_equal(sc("members --status UP --role backend"), 0);
    need("(1 of 1 members: status UP role backend)");
    need("backend");
    assert_int_equal(sc("--json members --role backend"), 0);
    need("\"members\":[{");
    assert_int_equal(sc("--json members --status down"), 0);
    need("\"members\":[]");
    assert_int_equal(sc("members --status bogus"), 2);
    need("members --status takes up, weakly-up, joining, leaving, exiting, down or removed, not "
         "'bogus'");
    assert_int_equal(sc("members --status"), 2);
    need("missing value for '--status'");
    assert_int_equal(sc("members extra"), 2);
    need("members takes no argument but --status S and --role R");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(check_store_and_json),
        cmocka_unit_test(members_filters),
    };
    return cmocka_run_group_tests_name("cluster_cli", tests, setup, teardown);
}
