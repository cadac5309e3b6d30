/*  test_ddata_dump.c — the RELEASE build/bin/ddata-dump run as a separate program: over a store
    built here with raw LMDB calls (a GCounter, an ORSet, a tombstone, a key with a quote, an
    envelope whose value does not decode and a record that is no envelope at all), and against
    two in-process nodes (--node, --metrics, --compare, a key over the frame limit). Checks the
    listing, --key, --json, --salvage (garbage gone, the rest kept), --compact (same listing),
    the refusals (foreign, newer, missing, truncated or empty: exit 2, no crash), a store read
    while a durable store holds it open (and its lock), and the node exit codes (differences: 1,
    unreachable: 3). --sharding: over a store holding the keys sharding writes (built with the
    ddata API as coordinator.c, remember.c and daemon.c build them), and against a live node
    running sharding with remembered entities. The tool is a release program (`scons check`
    builds it); without it the tests are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "shards.h"
#include "tools.h"
#include "ddata.h"
#include "durable.h"
#include "membership.h"
#include "replicator.pb-c.h"
#include "../../sharding/estate.h"

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

#define NEED_TOOL()                                                                                \
    do {                                                                                           \
        if (!*tool) {                                                                              \
            fail_msg("build/bin/ddata-dump is missing: the target that runs this test must "       \
                     "build it");                                                                  \
        }                                                                                          \
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

static void put_envelope(MDB_txn *txn, MDB_dbi dbi, const char *key, const void *value, size_t len,
                         bool deleted)
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

/* A new LMDB store at dir, a write transaction open in it, and its meta database with `format`
   (NULL: none). */
static void begin_store(const char *dir, const char *format, MDB_env **env, MDB_txn **txn)
{
    mkdir(dir, 0755);
    assert_int_equal(mdb_env_create(env), 0);
    mdb_env_set_maxdbs(*env, 8);
    mdb_env_set_mapsize(*env, 16u << 20);
    assert_int_equal(mdb_env_open(*env, dir, 0, 0644), 0);
    assert_int_equal(mdb_txn_begin(*env, NULL, 0, txn), 0);
    if (format) {
        MDB_dbi dbi;
        assert_int_equal(mdb_dbi_open(*txn, "meta", MDB_CREATE, &dbi), 0);
        put_raw(*txn, dbi, "format", format, strlen(format));
    }
}

/* A store at dir with format `format` (NULL: no meta database) and, when `entries`, the test's
   replicator database "ddata:". */
static void make_store(const char *dir, const char *format, bool entries)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    begin_store(dir, format, &env, &txn);
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
    /* two records are damaged: listed, and the exit says so */
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "2 records are UNDECODABLE: the store is damaged");
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
    assert_int_equal(ttool_run_stream(tool, args, 1, out, sizeof out), 2); /* two damaged */
    must_contain(out, "{\"format\":\"shoal-durable 1\",\"replicators\":[{\"role\":\"\",\"keys\":[");
    must_contain(out, "{\"key\":\"counter\",\"type\":\"GCounter\",");
    must_contain(out,
                 "{\"key\":\"gone\",\"type\":null,\"bytes\":0,\"deleted\":true,\"value\":null}");
    must_contain(out, "{\"key\":\"q\\\"uote\",\"type\":\"GCounter\"");
    must_contain(out,
                 "\"key\":\"junk\",\"type\":null,\"bytes\":10,\"deleted\":false,\"value\":null,"
                 "\"error\":");
    /* values as structured JSON (jq can query them): a counter a number, a set an array */
    must_contain(out, "\"deleted\":false,\"value\":42}");
    must_contain(out, "\"value\":[\"apple\",\"pear\"]}");
    assert_true(strlen(out) > 2 && strcmp(out + strlen(out) - 3, "]}\n") == 0);
    /* one key: the same shape, that key alone (it printed the text form inside the JSON) */
    snprintf(args, sizeof args, "'%s' --key counter --json", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "{\"format\":\"shoal-durable 1\",\"replicators\":[{\"role\":\"\",\"keys\":"
                      "[{\"key\":\"counter\",\"type\":\"GCounter\",");
    assert_null(strstr(out, "\"key\":\"gone\""));
    assert_null(strstr(out, "\ntype: "));
    assert_true(strlen(out) > 6 && strcmp(out + strlen(out) - 6, "}]}]}\n") == 0);
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
    assert_int_equal(run_tool(args, listing, sizeof listing), 2); /* junk and noise */
    snprintf(args, sizeof args, "'%s' --compact '%s'", dir, comp);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "compacted copy written");
    snprintf(args, sizeof args, "'%s'", comp);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    /* the same listing, but for the directory named in the damage line */
    char *a = strstr(listing, "ddata-dump: "), *b = strstr(out, "ddata-dump: ");
    assert_non_null(a);
    assert_non_null(b);
    *a = *b = 0;
    assert_string_equal(out, listing);
}

/* The kept membership (membership.h, KEPT MEMBERSHIP) as membership/membership.c writes it:
   replicator "__membership", key "voters", "shoal-voters 1\n" then one identity a line. It is
   no DataEnvelope, and must be shown as what it is, not as damage (issue 37: every demo store
   showed "UNDECODABLE (malformed envelope)"); a mangled one is damage. */
static void make_kept_store(const char *dir, const char *voters)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    begin_store(dir, "shoal-durable 1", &env, &txn);
    assert_int_equal(mdb_dbi_open(txn, "ddata:", MDB_CREATE, &dbi), 0);
    shoal_crdt_t *c = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(c, shoal_node_intern("127.0.0.1:2552:7"), 5), 0);
    put_value(txn, dbi, "counter", c);
    assert_int_equal(mdb_dbi_open(txn, "ddata:" SHOAL_CLUSTER_STORE_ROLE, MDB_CREATE, &dbi), 0);
    put_raw(txn, dbi, "voters", voters, strlen(voters));
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

#define ID_A "0123456789abcdef0123456789abcdef"
#define ID_B "fedcba9876543210fedcba9876543210"

static void test_kept_membership(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], bad[300], copy[300], args[900];
    path(dir, sizeof dir, "kept");
    make_kept_store(dir, "shoal-voters 1\n" ID_A "\n" ID_B "\n");
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "replicator \"__membership\": 1 keys");
    must_contain(out, "voters  kept-membership  81 bytes  2 identities: " ID_A ", " ID_B "\n");
    must_not_contain(out, "UNDECODABLE");

    snprintf(args, sizeof args, "'%s' --json", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out,
                 "{\"role\":\"__membership\",\"keys\":[{\"key\":\"voters\",\"type\":"
                 "\"kept-membership\",\"bytes\":81,\"deleted\":false,\"value\":"
                 "{\"format\":\"shoal-voters 1\",\"identities\":[\"" ID_A "\",\"" ID_B "\"]}}]}");
    must_not_contain(out, "\"error\"");

    snprintf(args, sizeof args, "'%s' --key voters", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "type: kept-membership\n");
    must_contain(out, "value: 2 identities: " ID_A ", " ID_B "\n");

    /* salvage keeps it (it is valid), and the copy lists it the same way */
    path(copy, sizeof copy, "kept-salvaged");
    snprintf(args, sizeof args, "'%s' --salvage '%s'", dir, copy);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "salvaged 2 entries");
    snprintf(args, sizeof args, "'%s'", copy);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "2 identities: " ID_A);

    /* no identities yet: still the record, not damage */
    path(bad, sizeof bad, "kept-empty");
    make_kept_store(bad, "shoal-voters 1\n");
    snprintf(args, sizeof args, "'%s'", bad);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "voters  kept-membership  15 bytes  0 identities\n");

    /* real damage stays UNDECODABLE, and the exit code says so */
    static const char *const damaged[] = {"shoal-voters 9\n" ID_A "\n", "\xff\xfe\x01",
                                          "shoal-voters 1\n" ID_A, "shoal-voters 1\n\x01\x02\n"};
    for (size_t i = 0; i < sizeof damaged / sizeof *damaged; i++) {
        snprintf(bad, sizeof bad, "%s/kept-bad%zu", tmp, i);
        make_kept_store(bad, damaged[i]);
        snprintf(args, sizeof args, "'%s'", bad);
        assert_int_equal(run_tool(args, out, sizeof out), 2);
        must_contain(out, "voters  -  ");
        must_contain(out, "UNDECODABLE (malformed kept membership");
        must_contain(out, "1 record is UNDECODABLE: the store is damaged");
        must_contain(out, "counter  GCounter"); /* the rest is listed all the same */
        snprintf(args, sizeof args, "'%s' --json", bad);
        assert_int_equal(ttool_run_stream(tool, args, 1, out, sizeof out), 2);
        must_contain(out, "\"key\":\"voters\",\"type\":null,");
        must_contain(out, "\"error\":\"malformed kept membership");
    }
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

/* A data.mdb cut short: the tool reports a corrupt store (exit 2) whether it is too short for
   LMDB's meta pages (empty: LMDB's read-only open failed with "Bad file descriptor") or faults on
   the missing pages (the forked reader dies; the tool does not). */
static void test_truncated(void **state)
{
    (void)state;
    NEED_TOOL();
    static const off_t sizes[] = {0, 100, 8192, 12288};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char dir[300], file[400], args[900];
        snprintf(dir, sizeof dir, "%s/trunc%zu", tmp, i);
        make_store(dir, "shoal-durable 1", true);
        snprintf(file, sizeof file, "%s/data.mdb", dir);
        assert_int_equal(truncate(file, sizes[i]), 0);
        snprintf(args, sizeof args, "'%s'", dir);
        assert_int_equal(run_tool(args, out, sizeof out), 2);
        must_contain(out, "corrupt");
        if (sizes[i] < 8192)
            must_contain(out, "too short to hold LMDB's two meta pages");
    }
}

/* The tool reads a store a node holds open: it opens read-only and takes no lock, so the lock
   that keeps a second node out (durable.h, ONE PROCESS PER DIRECTORY) does not keep it out. */
static void test_beside_an_open_store(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], args[900], comp[300];
    path(dir, sizeof dir, "held");
    make_store(dir, "shoal-durable 1", true);
    shoal_durable_settings_t s;
    shoal_durable_settings_default(&s);
    s.dir = dir;
    s.nosync = true;
    char err[512];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    shoal_durable_t *d = shoal_durable_open(&s, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!d)
        fail_msg("open %s: %s", dir, err);
    snprintf(args, sizeof args, "'%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2); /* its junk and noise */
    must_contain(out, "replicator \"\": 6 keys");
    snprintf(args, sizeof args, "'%s' --key fruit", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "\"apple\"");
    path(comp, sizeof comp, "held-compacted");
    snprintf(args, sizeof args, "'%s' --compact '%s'", dir, comp);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "compacted copy written");
    /* the store is still held: a second open is refused, naming this process */
    char want[64];
    snprintf(want, sizeof want, "in use by process %ld", (long)getpid());
    assert_null(shoal_durable_open(&s, &open_err));
    assert_int_equal(open_err, SHOAL_EBUSY);
    must_contain(shoal_last_error_detail(), want);
    shoal_durable_close(&d);
}

/* ---------------------------------------------------------------------------------------------
 * Sharding's keys
 */
#define NODE_A               "127.0.0.1:2552:7"
#define NODE_B               "127.0.0.1:2553:9"
#define NODE_GONE            "127.0.0.1:2554:1"
#define EPOCH(term, counter) ((int64_t)((uint64_t)(term) << 32 | (counter)))

static int64_t fixed_clock(int64_t current, const void *v, size_t len, void *arg)
{
    (void)current;
    (void)v;
    (void)len;
    return *(const int64_t *)arg;
}

/* One LWWMap entry at the coordinator's epoch, as coordinator.c writes it. */
static void coord_put(shoal_crdt_t *m, const char *key, const char *value, int64_t epoch)
{
    const shoal_node_t *me = shoal_node_intern(NODE_A);
    assert_int_equal(
        shoal_lwwmap_put(m, me, key, strlen(key), value, strlen(value), fixed_clock, &epoch), 0);
}

static shoal_crdt_t *orset_of(const char *const *ids, size_t n)
{
    const shoal_node_t *me = shoal_node_intern(NODE_A);
    shoal_crdt_t *s = shoal_orset_new();
    for (size_t i = 0; i < n; i++)
        assert_int_equal(shoal_orset_add(s, me, ids[i], strlen(ids[i])), 0);
    return s;
}

static shoal_crdt_t *gset_of(const char *const *elems, size_t n)
{
    shoal_crdt_t *s = shoal_gset_new();
    for (size_t i = 0; i < n; i++)
        assert_int_equal(shoal_gset_add(s, elems[i], strlen(elems[i])), 0);
    return s;
}

/* Type "counter": coordinator state (shards 1 and 12 allocated, 4 unallocated; a region, a proxy
   and a gone region), remembered entities in shards 1 (over two of its keys) and 12, the
   all-shards set, a daemon worker count. Type "counter-x" (a name that extends "counter"): only
   remembered entities, so it has no coordinator state, as in any real store. Type "broken": an
   all-shards key of the wrong type. Role "blue": a daemon of its own. */
static void make_sharding_store(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    begin_store(dir, "shoal-durable 1", &env, &txn);
    assert_int_equal(mdb_dbi_open(txn, "ddata:", MDB_CREATE, &dbi), 0);

    shoal_crdt_t *m = shoal_lwwmap_new();
    coord_put(m, "r/" NODE_A, "region", EPOCH(5, 1));
    coord_put(m, "r/" NODE_B, "proxy", EPOCH(5, 2));
    coord_put(m, "s/1", NODE_A, EPOCH(5, 3));
    coord_put(m, "s/12", NODE_A, EPOCH(5, 4));
    coord_put(m, "s/4", NODE_A, EPOCH(5, 5));
    coord_put(m, "s/4", "", EPOCH(6, 1)); /* its region went: unallocated at a newer epoch */
    coord_put(m, "r/" NODE_GONE, "region", EPOCH(5, 6));
    coord_put(m, "r/" NODE_GONE, "", EPOCH(6, 2));
    put_value(txn, dbi, "coord-counter", m);

    static const char *const s1a[] = {"alice", "bob"}, *const s1b[] = {"carol"},
                             *const s12[] = {"dave"}, *const x7[] = {"zed"},
                             *const all[] = {"1", "12"}, *const xall[] = {"7"};
    put_value(txn, dbi, "shard-counter-1-0", orset_of(s1a, 2));
    put_value(txn, dbi, "shard-counter-1-3", orset_of(s1b, 1));
    put_value(txn, dbi, "shard-counter-12-2", orset_of(s12, 1));
    put_value(txn, dbi, "shard-counter-all-shards", gset_of(all, 2));
    put_value(txn, dbi, "shard-counter-x-7-0", orset_of(x7, 1));
    put_value(txn, dbi, "shard-counter-x-all-shards", gset_of(xall, 1));
    /* entity state of shard 12: two entities, one reminder, one deleted */
    shoal_sharding_register_types();
    shoal_crdt_t *es = estate_new();
    estate_raise_fence(es, EPOCH(5, 4));
    assert_int_equal(estate_put(es, "dave", 4, EPOCH(5, 4), 2, "state-of-dave", 13), 0);
    assert_int_equal(estate_put(es, "erin", 4, EPOCH(5, 4), 3, "e", 1), 0);
    assert_int_equal(estate_put(es,
                                "\x01"
                                "dave\0r1",
                                8, EPOCH(5, 4), 4, "12345678m", 9),
                     0);
    assert_int_equal(estate_delete(es, "fred", 4, EPOCH(5, 4), 5, 1000), 0);
    put_value(txn, dbi, "shard-counter-estate:12", es);
    shoal_crdt_t *w = shoal_lwwreg_new();
    assert_int_equal(shoal_lwwreg_set(w, shoal_node_intern(NODE_A), "4", 1, NULL, NULL), 0);
    put_value(txn, dbi, "daemon-counter-workers", w);
    shoal_crdt_t *c = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(c, shoal_node_intern(NODE_A), 1), 0);
    put_value(txn, dbi, "shard-broken-all-shards", c);
    c = shoal_gcounter_new();
    assert_int_equal(shoal_gcounter_increment(c, shoal_node_intern(NODE_A), 1), 0);
    put_value(txn, dbi, "hits", c); /* not sharding's */

    assert_int_equal(mdb_dbi_open(txn, "ddata:blue", MDB_CREATE, &dbi), 0);
    w = shoal_lwwreg_new();
    assert_int_equal(shoal_lwwreg_set(w, shoal_node_intern(NODE_A), "9", 1, NULL, NULL), 0);
    put_value(txn, dbi, "daemon-pinger-workers", w);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

/* The line at p with its runs of spaces made single and leading ones dropped, into line. */
static void squeeze_line(const char *p, char *line, size_t cap)
{
    size_t n = 0;
    bool space = false;
    for (const char *c = p; *c && *c != '\n' && n + 2 < cap; c++) {
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
}

/* A line of text that, squeezed, starts with `want` (is `want`, when that ends in a newline). */
static bool has_row(const char *text, const char *want)
{
    char line[1024];
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        squeeze_line(p, line, sizeof line);
        size_t wl = strlen(want);
        bool whole = wl && want[wl - 1] == '\n';
        if (strncmp(line, want, wl - whole) == 0 && (!whole || line[wl - 1] == 0))
            return true;
    }
    return false;
}

static void must_have_row(const char *text, const char *want)
{
    if (!has_row(text, want)) {
        print_message("expected a row \"%s\" in:\n%s\n", want, text);
        fail();
    }
}

static void test_sharding_store(void **state)
{
    (void)state;
    NEED_TOOL();
    char dir[300], args[700];
    path(dir, sizeof dir, "shards");
    make_sharding_store(dir);

    snprintf(args, sizeof args, "'%s' --sharding counter", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "sharding \"counter\", replicator \"\":\n");
    must_contain(out, "coordinator (coord-counter): 3 shards, 2 regions\n");
    must_have_row(out, "SHARD HOME EPOCH");
    must_have_row(out, "1 " NODE_A " 5.3");
    must_have_row(out, "12 " NODE_A " 5.4");
    must_have_row(out, "4 (unallocated) 6.1");
    /* numeric order of shard ids: 1, 4, 12 */
    char *r1 = strstr(out, "  1  "), *r4 = strstr(out, "  4  "), *r12 = strstr(out, "  12  ");
    assert_true(r1 && r4 && r12 && r1 < r4 && r4 < r12);
    must_have_row(out, NODE_A " region 5.1");
    must_have_row(out, NODE_B " proxy 5.2");
    must_have_row(out, NODE_GONE " gone 6.2");
    must_contain(out, "remembered entities: 4 in 2 shards\n");
    must_have_row(out, "1 3\n");
    must_have_row(out, "12 1\n");
    must_contain(out, "all-shards (shard-counter-all-shards): 2 shards: 1 12\n");
    {
        /* --json: a map as an object, each register with its value, timestamp and writer */
        char jargs[700];
        static char jout[1 << 16];
        snprintf(jargs, sizeof jargs, "'%s' --json", dir);
        assert_int_equal(run_tool(jargs, jout, sizeof jout), 0);
        char want[200];
        snprintf(want, sizeof want, "\"s/1\":{\"value\":\"" NODE_A "\",\"timestamp\":%lld,",
                 (long long)EPOCH(5, 3));
        must_contain(jout, "{\"key\":\"coord-counter\",\"type\":\"LWWMap\",");
        must_contain(jout, want);
    }
    must_contain(out, "daemon workers (daemon-counter-workers): 4\n");
    must_contain(out, "entity state (shard-counter-estate:<shard>): 2 entities, 1 reminders, ");
    must_have_row(out, "12 2 1 1 ");
    must_not_contain(out, "state-of");
    must_not_contain(out, "alice"); /* ids only with --entities */
    must_not_contain(out, "zed");   /* counter-x's, not counter's */
    must_not_contain(out, "x-7");

    snprintf(args, sizeof args, "'%s' --sharding counter --entities", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_have_row(out, "1 3 alice bob carol");
    must_have_row(out, "12 1 dave");
    must_have_row(out, "dave 13 bytes at 5.4/2");
    must_have_row(out, "erin 1 bytes at 5.4/3");

    snprintf(args, sizeof args, "'%s' --sharding counter --json --entities", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "{\"role\":\"\",\"type\":\"counter\",\"coordinator\":{\"shards\":[");
    must_contain(out, "{\"shard\":\"1\",\"home\":\"" NODE_A "\",\"epoch\":\"5.3\",\"timestamp\":");
    char ts[64];
    snprintf(ts, sizeof ts, "\"epoch\":\"6.1\",\"timestamp\":%lld}", (long long)EPOCH(6, 1));
    must_contain(out, ts);
    must_contain(out, "{\"shard\":\"4\",\"home\":null,");
    must_contain(out, "{\"node\":\"" NODE_B "\",\"kind\":\"proxy\",\"epoch\":\"5.2\"");
    must_contain(out, "{\"node\":\"" NODE_GONE "\",\"kind\":\"gone\"");
    must_contain(out, "\"remembered\":{\"entities\":4,\"shards\":[{\"shard\":\"1\",\"entities\":3,"
                      "\"ids\":[\"alice\",\"bob\",\"carol\"]},{\"shard\":\"12\",\"entities\":1,"
                      "\"ids\":[\"dave\"]}]}");
    must_contain(out, "\"entity_state\":{\"entities\":2,\"reminders\":1,");
    must_contain(out, "{\"id\":\"dave\",\"bytes\":13,\"seq\":2,\"epoch\":\"5.4\"");
    must_contain(out, "\"all_shards\":[\"1\",\"12\"],\"daemon_workers\":4,\"problems\":[]}\n");

    /* a type with remembered entities only: the coordinator's state is not durable */
    snprintf(args, sizeof args, "'%s' --sharding counter-x", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "no coordinator state: coord-counter-x is not stored here (it is not "
                      "durable; ask a live node with --node)");
    must_contain(out, "remembered entities: 1 in 1 shards\n");
    must_have_row(out, "7 1\n");
    snprintf(args, sizeof args, "'%s' --sharding counter-x --json", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "\"coordinator\":null,");
    must_contain(out, "\"daemon_workers\":null");

    /* a key of the wrong type is reported, not misread */
    snprintf(args, sizeof args, "'%s' --sharding broken", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "shard-broken-all-shards: a GCounter, not the GSet sharding writes");

    /* the types found */
    snprintf(args, sizeof args, "'%s' --sharding", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "sharding types in replicator \"\": 3\n");
    must_have_row(out, "broken - - -");
    must_have_row(out, "counter 3 shards, 2 regions 4 in 2 shards 4");
    must_have_row(out, "counter-x - 1 in 1 shards -");
    snprintf(args, sizeof args, "'%s' --sharding --json", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "{\"type\":\"counter\",\"coordinator\":true,\"shards\":3,\"regions\":2,"
                      "\"remembered_entities\":4,\"remembered_shards\":2,\"daemon_workers\":4}");

    /* another role's replicator */
    snprintf(args, sizeof args, "'%s' --role blue --sharding pinger", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "sharding \"pinger\", replicator \"blue\":\n");
    must_contain(out, "daemon workers (daemon-pinger-workers): 9\n");

    /* nothing of the type, no such role: exit 1 */
    snprintf(args, sizeof args, "'%s' --sharding nosuch", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    must_contain(out, "no sharding state of type \"nosuch\"");
    must_contain(out, "(types found: broken, counter, counter-x)");
    snprintf(args, sizeof args, "'%s' --role red --sharding counter", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    must_contain(out, "no replicator \"red\"");
    path(dir, sizeof dir, "store"); /* the other tests' store: no sharding keys */
    snprintf(args, sizeof args, "'%s' --sharding", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    must_contain(out, "no sharding keys in replicator \"\"");

    /* usage: the type taken for the store, --sharding with modes it does not go with */
    snprintf(args, sizeof args, "--sharding '%s'", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    must_contain(out, "name the store first");
    snprintf(args, sizeof args, "'%s' --sharding counter --key x", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    snprintf(args, sizeof args, "'%s' --entities", dir);
    assert_int_equal(run_tool(args, out, sizeof out), 2);
    assert_int_equal(
        run_tool("--compare tcp://127.0.0.1:1 tcp://127.0.0.1:2 --sharding", out, sizeof out), 2);
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
        squeeze_line(p, line, sizeof line);
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
    /* a node that cannot be reached is reported and left out; the others are still compared */
    snprintf(args, sizeof args, "--compare %s tcp://127.0.0.1:%d %s", e0, tfree_port(), e1);
    assert_int_equal(run_tool(args, out, sizeof out), 3);
    must_contain(out, "cannot reach node at tcp://127.0.0.1:");
    must_contain(out, "(unreachable: left out)");
    must_contain(out, "all 2 keys agree on 2 nodes; 1 of 3 nodes unreachable (x)");

    snprintf(args, sizeof args, "--node %s", e0);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "2 keys");
    must_contain(out, "hits  GCounter");
    must_contain(out, "visits  GCounter");
    must_contain(out, "counters:");
    must_contain(out, "replicator_keys 2");
    must_contain(out, "no membership on this node");

    /* the node's own exposition: the names of /metrics, with HELP (test_observability runs
       promtool on it beside a live /metrics) */
    snprintf(args, sizeof args, "--node %s --metrics", e1);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "# HELP shoal_replicator_gets_total ");
    must_contain(out, "# TYPE shoal_replicator_gets_total counter\n");
    must_contain(out, "shoal_replicator_gets_total{role=\"\"} ");
    must_contain(out, "# TYPE shoal_replicator_keys gauge\nshoal_replicator_keys{role=\"\"} 2\n");
    must_contain(out, "# TYPE shoal_node_peers gauge\n");
    must_contain(out, "# TYPE shoal_node_connections_open gauge\n");
    must_contain(out, "# TYPE process_resident_memory_bytes gauge\n");
    /* 0.2's names, deprecated: --metrics-legacy */
    snprintf(args, sizeof args, "--node %s --metrics-legacy", e1);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "# TYPE shoal_replicator_keys gauge\nshoal_replicator_keys 2\n");
    must_contain(out, "# TYPE shoal_node_bytes_in_total counter\n");

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

/* An LWWMap of 4,000 keys of 64-byte values, written by the node's own modify function. */
static int fill_map(shoal_crdt_t *map, void *arg)
{
    const shoal_node_t *self = arg;
    for (int i = 0; i < 4000; i++) {
        char key[16], value[65];
        snprintf(key, sizeof key, "k%04d", i);
        snprintf(value, sizeof value, "%-64d", i * 7919);
        int rc = shoal_lwwmap_put(map, self, key, strlen(key), value, 64, NULL, NULL);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* A key over the node's 256 KiB frame limit: --node shows it (its reply comes in parts, where it
   used to be dropped and the row said the read timed out) and --compare finds it on both nodes
   (it used to exit 3, "cannot reach node", on that key). */
static void test_node_with_a_large_map(void **state)
{
    (void)state;
    NEED_TOOL();
    tcluster_start(&cl, 2, NULL);
    shoal_consistency_t all = c_all(5000);
    assert_int_equal(shoal_replicator_update_sync(cl.rep[0], "kv", shoal_lwwmap_new(), &all,
                                                  fill_map, (void *)shoal_system_self(cl.sys[0])),
                     0);
    shoal_crdt_t *v = NULL;
    shoal_consistency_t local = c_local();
    assert_int_equal(shoal_replicator_get_sync(cl.rep[1], "kv", NULL, &local, &v), 0);
    shoal_buf_t enc = {0};
    assert_int_equal(shoal_crdt_encode(v, &enc), 0);
    assert_true(enc.len > 256 * 1024);
    char args[1200], row[200];
    const char *e0 = shoal_system_endpoint(cl.sys[0]), *e1 = shoal_system_endpoint(cl.sys[1]);
    snprintf(args, sizeof args, "--node %s", e1);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "1 keys");
    snprintf(row, sizeof row, "  kv  LWWMap  %zu bytes  ", enc.len);
    must_contain(out, row);
    must_not_contain(out, "timed out");
    snprintf(args, sizeof args, "--compare %s %s", e0, e1);
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "all 1 keys agree on 2 nodes");
    shoal_system_stats_t st;
    assert_int_equal(shoal_system_stats(cl.sys[1], &st), 0);
    assert_int_equal(st.replies_in_parts, 2); /* --node's get, and --compare's */
    shoal_buf_free(&enc);
    shoal_crdt_destroy(&v);
    tcluster_stop(&cl);
}

static char live_ids[3][32];

static bool all_live(void *arg)
{
    (void)arg;
    for (int k = 0; k < 3; k++)
        if (trec_get(TSHARD_TYPE, live_ids[k]).live != 1)
            return false;
    return true;
}

/* A live node with sharding and remembered entities: the coordinator's state (in no store: it is
   not durable) shows each entity's shard with this node as its home. */
static void test_sharding_node(void **state)
{
    (void)state;
    NEED_TOOL();
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    s.remember_entities = true;
    tsnode_opts_t o = {.sharding = &s, .seed = -1};
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    tsnode_wait_registered(1u, 0, 1, 15000);
    tshard_pick_ids("dump", 10, 3, live_ids);
    for (int k = 0; k < 3; k++)
        assert_int_equal(shoal_region_start_entity(tsn[0].r, live_ids[k]), 0);
    /* an entity starts only after its shard's allocation and its id are written */
    assert_true(wait_until(all_live, NULL, 15000));

    const char *self = shoal_node_id(shoal_system_self(tsn[0].sys));
    char args[1200], row[600];
    snprintf(args, sizeof args, "--node %s --sharding " TSHARD_TYPE,
             shoal_system_endpoint(tsn[0].sys));
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_contain(out, "sharding \"" TSHARD_TYPE "\", replicator \"\":\n");
    must_contain(out, "coordinator (coord-" TSHARD_TYPE "): 3 shards, 1 regions\n");
    snprintf(row, sizeof row, "%s region ", self);
    must_have_row(out, row);
    must_contain(out, "remembered entities: 3 in 3 shards\n");
    for (int k = 0; k < 3; k++) {
        char shard[SHOAL_SHARD_ID_MAX + 1];
        shoal_region_shard_of(tsn[0].r, live_ids[k], shard);
        snprintf(row, sizeof row, "%s %s ", shard, self); /* shard, home, epoch */
        must_have_row(out, row);
        snprintf(row, sizeof row, "%s 1\n", shard); /* shard, remembered entities */
        must_have_row(out, row);
    }
    must_contain(out, "all-shards (shard-" TSHARD_TYPE "-all-shards): 3 shards");

    snprintf(args, sizeof args, "--node %s --sharding " TSHARD_TYPE " --json --entities",
             shoal_system_endpoint(tsn[0].sys));
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    snprintf(row, sizeof row, "\"home\":\"%s\"", self);
    must_contain(out, row);
    for (int k = 0; k < 3; k++) {
        snprintf(row, sizeof row, "\"ids\":[\"%s\"]", live_ids[k]);
        must_contain(out, row);
    }

    snprintf(args, sizeof args, "--node %s --sharding", shoal_system_endpoint(tsn[0].sys));
    assert_int_equal(run_tool(args, out, sizeof out), 0);
    must_have_row(out, TSHARD_TYPE " 3 shards, 1 regions 3 in 3 shards -");
    snprintf(args, sizeof args, "--node %s --sharding nosuch", shoal_system_endpoint(tsn[0].sys));
    assert_int_equal(run_tool(args, out, sizeof out), 1);
    must_contain(out, "(types found: " TSHARD_TYPE ")");
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
        cmocka_unit_test(test_kept_membership),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_beside_an_open_store),
        cmocka_unit_test(test_sharding_store),
        cmocka_unit_test_teardown(test_nodes, tcluster_teardown),
        cmocka_unit_test_teardown(test_node_with_a_large_map, tcluster_teardown),
        cmocka_unit_test_teardown(test_sharding_node, tsnode_teardown),
        cmocka_unit_test(test_unreachable),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
