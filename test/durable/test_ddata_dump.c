/*  test_ddata_dump.c — the RELEASE build/bin/ddata-dump run as a separate program: over a store
    built here with raw LMDB calls (a GCounter, an ORSet, a tombstone, a key with a quote, an
    envelope whose value does not decode and a record that is no envelope at all), and against
    two in-process nodes (--node, --metrics, --compare). Checks the listing, --key, --json,
    --salvage (garbage gone, the rest kept), --compact (same listing), the refusals (foreign,
    newer, missing, truncated: exit 2, no crash) and the node exit codes (differences: 1,
    unreachable: 3). The tool is a release program (`scons check` builds it); without it the tests
    are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "tools.h"
#include "ddata.h"
#include "replicator.pb-c.h"

#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tool[4200];
static char tmp[256];

static bool find_tool(void)
{
    return ttool_find("ddata-dump", tool, sizeof tool);
}

#define NEED_TOOL()                                                                               \
    do {                                                                                          \
        if (!*tool) {                                                                             \
            print_message("build/bin/ddata-dump is missing (run `scons` or `scons check`): "      \
                          "skipped\n");                                                           \
            skip();                                                                               \
        }                                                                                         \
    } while (0)

/* Runs the tool with `args`; returns its exit code (-signal if it died) and its output. */
static int run_tool(const char *args, char *out, size_t cap)
{
    int rc = ttool_run(tool, args, out, cap);
    assert_true(rc >= 0); /* the shell exits; the tool must not have crashed it */
    return rc;
}

static void must_contain(const char *out, const char *what)
{
    if (!strstr(out, what)) {
        print_message("expected \"%s\" in:\n%s\n", what, out);
        fail();
    }
}

static void must_not_contain(const char *out, const char *what)
{
    if (strstr(out, what)) {
        print_message("did not expect \"%s\" in:\n%s\n", what, out);
        fail();
    }
}

/* ---------------------------------------------------------------------------------------------
 * Building stores with raw LMDB
 */
static void put_raw(MDB_txn *txn, MDB_dbi dbi, const char *key, const void *data, size_t len)
{
    MDB_val k = {strlen(key), (void *)key}, v = {len, (void *)data};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
}

static void put_envelope(MDB_txn *txn, MDB_dbi dbi, const char *key, const void *value,
                         size_t len, bool deleted)
{
    Shoal__Replicator__DataEnvelope e = SHOAL__REPLICATOR__DATA_ENVELOPE__INIT;
    e.value.data = (uint8_t *)value;
    e.value.len = len;
    e.deleted = deleted;
    size_t n = shoal__replicator__data_envelope__get_packed_size(&e);
    uint8_t *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    shoal__replicator__data_envelope__pack(&e, buf);
    put_raw(txn, dbi, key, buf, n);
    free(buf);
}

static void put_value(MDB_txn *txn, MDB_dbi dbi, const char *key, shoal_crdt_t *v)
{
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(v, &b), 0);
    put_envelope(txn, dbi, key, b.data, b.len, false);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&v);
}

/* A store at dir with format `format` (NULL: no meta database) and, when `entries`, the test's
   replicator database "ddata:". */
static void make_store(const char *dir, const char *format, bool entries)
{
    mkdir(dir, 0755);
    MDB_env *env;
    assert_int_equal(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 8);
    mdb_env_set_mapsize(env, 16u << 20);
    assert_int_equal(mdb_env_open(env, dir, 0, 0644), 0);
    MDB_txn *txn;
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    MDB_dbi dbi;
    if (format) {
        assert_int_equal(mdb_dbi_open(txn, "meta", MDB_CREATE, &dbi), 0);
        put_raw(txn, dbi, "format", format, strlen(format));
    }
    assert_int_equal(mdb_dbi_open(txn, entries ? "ddata:" : "other", MDB_CREATE, &dbi), 0);
    if (entries) {
        const shoal_node_t *me = shoal_node_intern("127.0.0.1:2552:7");
        shoal_crdt_t *c = shoal_gcounter_new();
        assert_int_equal(shoal_gcounter_increment(c, me, 42), 0);
        put_value(txn, dbi, "counter", c);
        shoal_crdt_t *s = shoal_orset_new();
        assert_int_equal(shoal_orset_add(s, me, "apple", 5), 0);
        assert_int_equal(shoal_orset_add(s, me, "pear", 4), 0);
        put_value(txn, dbi, "fruit", s);
        c = shoal_gcounter_new();
        assert_int_equal(shoal_gcounter_increment(c, me, 3), 0);
        put_value(txn, dbi, "q\"uote", c);
        put_envelope(txn, dbi, "gone", NULL, 0, true);
        put_envelope(txn, dbi, "junk", "\x08\x99\x01garbage", 10, false);
        put_raw(txn, dbi, "noise", "\xff\xff\xff", 3);
    } else {
        put_raw(txn, dbi, "x", "y", 1);
    }
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static char out[1 << 16];

static void path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmp, name);
}

static void test_listing(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], args[700];
    path(dir, sizeof dir, "store");
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "replicator \"\": 6 keys");
    must_contain(out, "counter  GCounter");
    must_contain(out, "42");
    must_contain(out, "fruit  ORSet");
    must_contain(out, "apple");
    must_contain(out, "pear");
    must_contain(out, "gone  -  0 bytes  deleted");
    must_contain(out, "junk  -  10 bytes  UNDECODABLE (");
    must_contain(out, "noise  -  3 bytes  UNDECODABLE (malformed envelope)");
}

static void test_key(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], args[700];
    path(dir, sizeof dir, "store");
    snprintf(args, sizeof args, "'%s' --key fruit", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "key: fruit\ntype: ORSet\n");
    must_contain(out, "deleted: no");
    must_contain(out, "pruning markers: 0");
    must_contain(out, "digest: ");
    must_contain(out, "\"apple\"");
    must_not_contain(out, "counter");
    /* the digest printed is the value's digest */
    char *d = strstr(out, "digest: ");
    assert_non_null(d);
    size_t hexlen = strspn(d + 8, "0123456789abcdef");
    assert_int_equal(hexlen, 32);

    snprintf(args, sizeof args, "'%s' --key gone", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "deleted: yes");
    snprintf(args, sizeof args, "'%s' --key nothing-here", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    must_contain(out, "no key \"nothing-here\"");
}

static void test_json(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], args[700];
    path(dir, sizeof dir, "store");
    snprintf(args, sizeof args, "'%s' --json", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "{\"format\":\"shoal-durable 1\",\"replicators\":[{\"role\":\"\",\"keys\":[");
    must_contain(out, "{\"key\":\"counter\",\"type\":\"GCounter\",");
    must_contain(out, "{\"key\":\"gone\",\"type\":null,\"bytes\":0,\"deleted\":true,\"value\":null}");
    must_contain(out, "{\"key\":\"q\\\"uote\",\"type\":\"GCounter\"");
    must_contain(out, "\"key\":\"junk\",\"type\":null,\"bytes\":10,\"deleted\":false,\"value\":null,"
                      "\"error\":");
    /* rendered values hold quotes: they must come out escaped */
    must_contain(out, "\\\"apple\\\"");
    assert_true(strlen(out) > 2 && strcmp(out + strlen(out) - 3, "]}\n") == 0);
}

static void test_salvage_and_compact(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], copy[300], comp[300], args[900], listing[1 << 14];
    path(dir, sizeof dir, "store");
    path(copy, sizeof copy, "salvaged");
    path(comp, sizeof comp, "compacted");
    snprintf(args, sizeof args, "'%s' --salvage '%s'", dir, copy);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "salvaged 4 entries");
    must_contain(out, "skipped 2");
    /* salvaging into a store that exists is refused */
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "already holds a store");

    snprintf(args, sizeof args, "'%s'", copy);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "replicator \"\": 4 keys");
    must_contain(out, "counter  GCounter");
    must_contain(out, "fruit  ORSet");
    must_contain(out, "deleted");
    must_not_contain(out, "junk");
    must_not_contain(out, "noise");
    must_not_contain(out, "UNDECODABLE");

    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, listing, sizeof listing), 0);
    snprintf(args, sizeof args, "'%s' --compact '%s'", dir, comp);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "compacted copy written");
    snprintf(args, sizeof args, "'%s'", comp);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    assert_string_equal(out, listing);
}

static void test_refusals(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], args[900];
    path(dir, sizeof dir, "foreign");
    make_store(dir, "someone-else 3", false);
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "not a Shoal store");

    path(dir, sizeof dir, "nometa");
    make_store(dir, NULL, false);
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "not a Shoal store");

    path(dir, sizeof dir, "newer");
    make_store(dir, "shoal-durable 2", true);
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "newer format");

    path(dir, sizeof dir, "empty"); /* a directory without an environment */
    mkdir(dir, 0755);
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "not a Shoal store");

    path(dir, sizeof dir, "does-not-exist");
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "no such directory");

    assert_int_equal(run_tool("", out, sizeof out), 2);
    must_contain(out, "usage:");
    assert_int_equal(run_tool("--compare tcp://127.0.0.1:1", out, sizeof out), 2);
    assert_int_equal(run_tool("--bogus", out, sizeof out), 2);
    assert_int_equal(run_tool("--help", out, sizeof out), 0);
    must_contain(out, "usage:");
}

/* A data.mdb cut short: the tool reports a corrupt store (exit 2) whether LMDB notices (too short
   for its meta pages) or faults on the missing pages (the forked reader dies; the tool does not). */
static void test_truncated(void **state)
{
    (void)state;
    NEED_TOOL();
    static const off_t sizes[] = {100, 8192, 12288};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char dir[300], file[400], args[900];
        snprintf(dir, sizeof dir, "%s/trunc%zu", tmp, i);
        make_store(dir, "shoal-durable 1", true);
        snprintf(file, sizeof file, "%s/data.mdb", dir);
        assert_int_equal(truncate(file, sizes[i]), 0);
        snprintf(args, sizeof args, "'%s'", dir);
        assert_int_equal(run_tool(args, out, sizeof out), 2);
        must_contain(out, "corrupt");
    }
}

/* ---------------------------------------------------------------------------------------------
 * Running nodes
 */
/* The table row of `key`, its cells joined by single spaces, must be `want`. */
static void check_row(const char *text, const char *key, const char *want)
{
    char line[256];
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, key, kl) != 0 || p[kl] != ' ')
            continue;
        size_t n = 0;
        bool space = false;
        for (const char *c = p; *c && *c != '\n' && n + 2 < sizeof line; c++) {
            if (*c == ' ') {
                space = true;
                continue;
            }
            if (space && n)
                line[n++] = ' ';
            space = false;
            line[n++] = *c;
        }
        line[n] = 0;
        if (strcmp(line, want) != 0) {
            print_message("row \"%s\", expected \"%s\" in:\n%s\n", line, want, text);
            fail();
        }
        return;
    }
    print_message("no row for %s in:\n%s\n", key, text);
    fail();
}

static tcluster_t cl;

static bool both_have(void *arg)
{
    (void)arg;
    return t_converged(&cl, "hits") && t_converged(&cl, "visits");
}

static void test_nodes(void **state)
{
    (void)state;
    NEED_TOOL();
    tcluster_start(&cl, 2, NULL);
    shoal_consistency_t all = c_all(3000);
    assert_int_equal(t_incr(&cl, 0, "hits", 5, &all), 0);
    assert_int_equal(t_incr(&cl, 1, "visits", 2, &all), 0);
    assert_true(wait_until(both_have, NULL, 5000));

    char args[1200];
    const char *e0 = shoal_system_endpoint(cl.sys[0]), *e1 = shoal_system_endpoint(cl.sys[1]);
    snprintf(args, sizeof args, "--compare %s %s", e0, e1);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "all 2 keys agree on 2 nodes");

    snprintf(args, sizeof args, "--node %s", e0);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "2 keys");
    must_contain(out, "hits  GCounter");
    must_contain(out, "visits  GCounter");
    must_contain(out, "counters:");
    must_contain(out, "replicator_keys 2");
    must_contain(out, "no membership on this node");

    snprintf(args, sizeof args, "--node %s --metrics", e1);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "# TYPE shoal_replicator_gets_total counter\n");
    must_contain(out, "shoal_replicator_gets_total ");
    must_contain(out, "# TYPE shoal_replicator_keys gauge\nshoal_replicator_keys 2\n");
    must_contain(out, "# TYPE shoal_node_peers gauge\n");

    snprintf(args, sizeof args, "--node %s --role nosuchrole", e0);
    assert_int_equal(run_tool(args, out, sizeof out), 1);

    /* cut the nodes apart (clients are not subject to faults), then diverge node 0 */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(cl.sys[0], NULL, &cut), 0);
    assert_int_equal(shoal_system_fault(cl.sys[1], NULL, &cut), 0);
    shoal_consistency_t local = c_local();
    assert_int_equal(t_incr(&cl, 0, "only0", 1, &local), 0);
    assert_int_equal(t_incr(&cl, 0, "hits", 1, &local), 0);
    snprintf(args, sizeof args, "--compare %s %s", e0, e1);
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    must_contain(out, "2 of 3 keys differ");
    check_row(out, "only0", "only0 = -");
    check_row(out, "hits", "hits = !=");
    check_row(out, "visits", "visits = =");
    shoal_system_heal(cl.sys[0]);
    shoal_system_heal(cl.sys[1]);
    tcluster_stop(&cl);
}

static void test_unreachable(void **state)
{
    (void)state;
    NEED_TOOL();
    char args[200];
    snprintf(args, sizeof args, "--node tcp://127.0.0.1:%d", tfree_port());
    assert_int_equal(run_tool(args, out, sizeof out), 3);
    must_contain(out, "cannot reach node at tcp://127.0.0.1:");
    assert_int_equal(run_tool("--node not-an-endpoint", out, sizeof out), 2);
}

static int group_setup(void **state)
{
    (void)state;
    if (!find_tool())
        *tool = 0;
    snprintf(tmp, sizeof tmp, "/tmp/test_ddata_dump.XXXXXX");
    if (!mkdtemp(tmp))
        return -1;
    char dir[300];
    path(dir, sizeof dir, "store");
    make_store(dir, "shoal-durable 1", true);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (getenv("SHOAL_KEEP_TMP")) /* debugging: keep the stores */
        return 0;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_salvage_and_compact),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test_teardown(test_nodes, tcluster_teardown),
        cmocka_unit_test(test_unreachable),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
