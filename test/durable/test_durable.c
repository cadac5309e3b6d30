/*  test_durable.c — the LMDB store: the store interface round trip, a real replicator restarted
    on the same directory (both write modes), foreign / newer / corrupt environments (checked in a
    child process, so a SIGBUS does not kill this one), map growth and its cap, a full store that
    recovers (space freed, cap raised) while the replicator serves, compaction, and one process
    per data directory (a second open, here or in a forked child, refused naming the holder's
    pid; the lock gone with close or with a SIGKILLed holder).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cluster.h"
#include "durable.h"

#include <dirent.h>
#include <fcntl.h>
#include <lmdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */
typedef struct {
    char parent[64]; /* mkdtemp'd; the environment and anything moved aside live under it */
    char dir[128];
} tdir_t;

static void tdir_make(tdir_t *t)
{
    snprintf(t->parent, sizeof t->parent, "/tmp/shoal-durable-XXXXXX");
    assert_non_null(mkdtemp(t->parent));
    snprintf(t->dir, sizeof t->dir, "%s/env", t->parent);
}


static void tdir_remove(tdir_t *t)
{
    trm_tree(t->parent);
}

static shoal_durable_settings_t settings(const char *dir, uint32_t write_behind_ms)
{
    shoal_durable_settings_t s;
    shoal_durable_settings_default(&s);
    s.dir = dir;
    s.write_behind_ms = write_behind_ms;
    s.nosync = true; /* tests do not need fsync; the commit path is the same */
    return s;
}

static shoal_durable_t *open_ok(const shoal_durable_settings_t *s)
{
    char err[512];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    shoal_durable_t *d = shoal_durable_open(s, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!d)
        fail_msg("open failed: %s", err);
    return d;
}

#define MAXSEEN 64
typedef struct {
    int n;
    char key[MAXSEEN][600];
    size_t klen[MAXSEEN];
    char val[MAXSEEN][64];
    size_t len[MAXSEEN];
} seen_t;

static void collect(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    seen_t *s = arg;
    if (s->n >= MAXSEEN)
        return;
    memcpy(s->key[s->n], key, klen < 600 ? klen : 599);
    s->key[s->n][klen < 600 ? klen : 599] = 0;
    s->klen[s->n] = klen;
    memcpy(s->val[s->n], data, len < 63 ? len : 63);
    s->val[s->n][len < 63 ? len : 63] = 0;
    s->len[s->n] = len;
    s->n++;
}

static void done_status(void *arg, int status)
{
    *(int *)arg = status;
}

static int put(shoal_store_t *st, const char *key, const char *val)
{
    int status = 1;
    st->store(st->ctx, key, strlen(key), val, val ? strlen(val) : 0, done_status, &status);
    assert_int_not_equal(status, 1); /* done runs before store returns */
    return status;
}

/* ---------------------------------------------------------------------------------------------
 * 1. The interface alone
 */
static void round_trip(uint32_t write_behind_ms)
{
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, write_behind_ms);
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    assert_non_null(st);
    assert_ptr_equal(shoal_durable_store(d, ""), st);
    assert_ptr_equal(shoal_durable_store(d, NULL), st);
    shoal_store_t *other = shoal_durable_store(d, "cart");
    assert_non_null(other);
    assert_ptr_not_equal(other, st);

    assert_int_equal(put(st, "a", "alpha"), 0);
    assert_int_equal(put(st, "b", "beta"), 0);
    assert_int_equal(put(st, "c", "gamma"), 0);
    assert_int_equal(put(st, "b", "beta2"), 0);
    assert_int_equal(put(st, "c", NULL), 0);       /* delete */
    assert_int_equal(put(st, "nothere", NULL), 0); /* deleting a missing key is fine */
    assert_int_equal(put(other, "a", "other-a"), 0);
    /* keys LMDB cannot hold fail cleanly */
    char big[600];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(put(st, big, "v"), SHOAL_ESTORE);
    assert_int_equal(put(st, "", "v"), SHOAL_ESTORE);
    /* an empty value is a value */
    assert_int_equal(put(st, "e", ""), 0);

    /* load sees pending write-behind changes too */
    seen_t seen = {0};
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 3);
    shoal_durable_close(&d);
    assert_null(d);

    d = open_ok(&s);
    st = shoal_durable_store(d, "");
    memset(&seen, 0, sizeof seen);
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 3); /* in key order */
    assert_string_equal(seen.key[0], "a");
    assert_string_equal(seen.val[0], "alpha");
    assert_string_equal(seen.key[1], "b");
    assert_string_equal(seen.val[1], "beta2");
    assert_string_equal(seen.key[2], "e");
    assert_int_equal(seen.len[2], 0);
    other = shoal_durable_store(d, "cart");
    memset(&seen, 0, sizeof seen);
    assert_int_equal(other->load(other->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.val[0], "other-a");
    shoal_durable_stats_t stats;
    shoal_durable_stats(d, &stats);
    assert_int_equal(stats.pending, 0);
    shoal_durable_close(&d);
    tdir_remove(&t);
}

static void test_round_trip_immediate(void **state)
{
    (void)state;
    round_trip(0);
}

static void test_round_trip_write_behind(void **state)
{
    (void)state;
    round_trip(50);
}

/* Loads larger than one copy-out chunk continue where the previous chunk ended. */
static void count_each(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    (void)key;
    (void)klen;
    (void)data;
    size_t *n = arg;
    if (len == 3000)
        (*n)++;
}

static void test_load_in_chunks(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 1000);
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    static char val[3000];
    memset(val, 'v', sizeof val);
    for (int i = 0; i < 3000; i++) { /* ~9 MB: three chunks */
        char key[32];
        snprintf(key, sizeof key, "k%05d", i);
        int status = 1;
        st->store(st->ctx, key, strlen(key), val, sizeof val, done_status, &status);
        assert_int_equal(status, 0);
    }
    size_t n = 0;
    assert_int_equal(st->load(st->ctx, count_each, &n), 0);
    assert_int_equal(n, 3000);
    shoal_durable_close(&d);
    tdir_remove(&t);
}

/* ---------------------------------------------------------------------------------------------
 * 2. A real replicator, restarted on the same directory
 */
typedef struct {
    shoal_system_t *sys;
    shoal_replicator_t *rep;
    shoal_durable_t *d;
} tnode_t;

static void node_start(tnode_t *n, const shoal_durable_settings_t *ds)
{
    n->d = open_ok(ds);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    n->sys = shoal_system_new(&ss, &err);
    assert_non_null(n->sys);
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    static const char *const durable[] = {"d-*"};
    rs.durable_keys = durable;
    rs.n_durable_keys = 1;
    rs.store = shoal_durable_store(n->d, "");
    assert_non_null(rs.store);
    n->rep = shoal_replicator_new(n->sys, &rs, &err);
    assert_non_null(n->rep);
}

static void node_stop(tnode_t *n)
{
    shoal_replicator_destroy(&n->rep);
    shoal_system_destroy(&n->sys);
    shoal_durable_close(&n->d);
}

typedef struct {
    const shoal_node_t *self;
    uint64_t n;
    const char *elem;
} upd_t;

static int incr(shoal_crdt_t *v, void *arg)
{
    upd_t *u = arg;
    return shoal_gcounter_increment(v, u->self, u->n);
}

static int add(shoal_crdt_t *v, void *arg)
{
    upd_t *u = arg;
    return shoal_orset_add(v, u->self, u->elem, strlen(u->elem));
}

static void restart_with_replicator(uint32_t write_behind_ms)
{
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t ds = settings(t.dir, write_behind_ms);
    shoal_consistency_t l = c_local();
    const shoal_type_t *gc = shoal_type_by_name("GCounter"), *os = shoal_type_by_name("ORSet");

    tnode_t n;
    node_start(&n, &ds);
    upd_t u = {shoal_system_self(n.sys), 7, NULL};
    assert_int_equal(shoal_replicator_update_sync(n.rep, "d-1", shoal_crdt_new(gc), &l, incr, &u),
                     0);
    u.n = 5;
    assert_int_equal(shoal_replicator_update_sync(n.rep, "d-1", shoal_crdt_new(gc), &l, incr, &u),
                     0);
    u.elem = "apple";
    assert_int_equal(shoal_replicator_update_sync(n.rep, "d-2", shoal_crdt_new(os), &l, add, &u),
                     0);
    u.elem = "pear";
    assert_int_equal(shoal_replicator_update_sync(n.rep, "d-2", shoal_crdt_new(os), &l, add, &u),
                     0);
    u.n = 3;
    assert_int_equal(shoal_replicator_update_sync(n.rep, "x", shoal_crdt_new(gc), &l, incr, &u), 0);
    node_stop(&n);

    node_start(&n, &ds);
    shoal_crdt_t *v = NULL;
    assert_int_equal(shoal_replicator_get_sync(n.rep, "d-1", gc, &l, &v), 0);
    assert_non_null(v);
    assert_int_equal(shoal_gcounter_value(v), 12);
    shoal_crdt_destroy(&v);
    assert_int_equal(shoal_replicator_get_sync(n.rep, "d-2", os, &l, &v), 0);
    assert_non_null(v);
    assert_int_equal(shoal_orset_size(v), 2);
    assert_true(shoal_orset_contains(v, "apple", 5));
    assert_true(shoal_orset_contains(v, "pear", 4));
    shoal_crdt_destroy(&v);
    assert_int_equal(shoal_replicator_get_sync(n.rep, "x", gc, &l, &v), SHOAL_ENOTFOUND);
    assert_null(v);
    /* the restarted node keeps writing on top of the loaded value */
    u.self = shoal_system_self(n.sys);
    u.n = 1;
    assert_int_equal(shoal_replicator_update_sync(n.rep, "d-1", shoal_crdt_new(gc), &l, incr, &u),
                     0);
    node_stop(&n);

    node_start(&n, &ds);
    assert_int_equal(shoal_replicator_get_sync(n.rep, "d-1", gc, &l, &v), 0);
    assert_int_equal(shoal_gcounter_value(v), 13);
    shoal_crdt_destroy(&v);
    node_stop(&n);
    tdir_remove(&t);
}

static void test_replicator_immediate(void **state)
{
    (void)state;
    restart_with_replicator(0);
}

static void test_replicator_write_behind(void **state)
{
    (void)state;
    /* an interval far longer than the test: only close's flush can have written the values */
    restart_with_replicator(60000);
}

/* ---------------------------------------------------------------------------------------------
 * 3. Foreign, newer and corrupt environments
 */
static void raw_env(const char *dir, const char *dbname, const char *key, const char *val)
{
    assert_int_equal(mkdir(dir, 0700), 0);
    MDB_env *env;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 4), 0);
    assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, dbname, MDB_CREATE, &dbi), 0);
    MDB_val k = {strlen(key), (void *)key}, v = {strlen(val), (void *)val};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static void expect_refused(const shoal_durable_settings_t *s, const char *needle)
{
    char err[512] = "";
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    shoal_durable_t *d = shoal_durable_open(s, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (d)
        fail_msg("open succeeded, expected a refusal with '%s'", needle);
    if (!strstr(err, needle))
        fail_msg("message '%s' lacks '%s'", err, needle);
    if (!strstr(err, s->dir))
        fail_msg("message '%s' does not name the directory", err);
}

static void test_foreign_and_newer(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    raw_env(t.dir, "stuff", "hello", "world");
    shoal_durable_settings_t s = settings(t.dir, 0);
    char err[512];
    assert_int_equal(shoal_durable_check(t.dir, err, sizeof err), SHOAL_EDECODE);
    assert_non_null(strstr(err, "not a Shoal store"));
    expect_refused(&s, "not a Shoal store");
    s.on_corruption = SHOAL_DURABLE_RESYNC; /* foreign is not corrupt: never moved aside */
    expect_refused(&s, "not a Shoal store");
    s.check_on_open = false; /* the in-process check of the format refuses too */
    expect_refused(&s, "not a Shoal store");
    tdir_remove(&t);

    tdir_make(&t);
    raw_env(t.dir, "meta", "format", "shoal-durable 9");
    s = settings(t.dir, 0);
    assert_int_equal(shoal_durable_check(t.dir, err, sizeof err), SHOAL_EVERSION);
    assert_non_null(strstr(err, "newer format 9, this build reads 1"));
    expect_refused(&s, "newer format 9");
    s.check_on_open = false;
    expect_refused(&s, "newer format 9");
    tdir_remove(&t);
}

/* A store with enough entries to span many pages. */
static void fill_store(const char *dir)
{
    shoal_durable_settings_t s = settings(dir, 0);
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    char val[1000];
    memset(val, 'v', sizeof val - 1);
    val[sizeof val - 1] = 0;
    for (int i = 0; i < 300; i++) {
        char key[32];
        snprintf(key, sizeof key, "key-%04d", i);
        assert_int_equal(put(st, key, val), 0);
    }
    shoal_durable_close(&d);
    char err[512];
    assert_int_equal(shoal_durable_check(dir, err, sizeof err), 0);
}

static void data_path(const char *dir, char *out, size_t len)
{
    snprintf(out, len, "%s/data.mdb", dir);
}

typedef enum { TRUNCATE, GARBAGE, ZEROES } damage_t;

static void damage(const char *dir, damage_t how)
{
    char path[256];
    data_path(dir, path, sizeof path);
    long ps = sysconf(_SC_PAGESIZE);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size > 20 * ps);
    if (how == TRUNCATE) {
        assert_int_equal(truncate(path, 3 * ps), 0);
        return;
    }
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    size_t n = (size_t)sb.st_size - 2 * (size_t)ps; /* everything after the two meta pages */
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    uint32_t x = 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = how == ZEROES ? 0 : (uint8_t)(x >> 16);
    }
    assert_int_equal(pwrite(fd, buf, n, 2 * ps), (ssize_t)n);
    free(buf);
    close(fd);
}

static int count_moved_aside(const tdir_t *t)
{
    DIR *dd = opendir(t->parent);
    assert_non_null(dd);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dd)))
        if (strncmp(e->d_name, "env.corrupt-", 12) == 0)
            n++;
    closedir(dd);
    return n;
}

static void corrupt_case(damage_t how)
{
    tdir_t t;
    tdir_make(&t);
    fill_store(t.dir);
    damage(t.dir, how);
    char err[512];
    int rc = shoal_durable_check(t.dir, err, sizeof err);
    print_message("check of damage %d: %d %s\n", (int)how, rc, err);
    assert_int_equal(rc, SHOAL_EDECODE);
    assert_non_null(strstr(err, "corrupt"));

    shoal_durable_settings_t s = settings(t.dir, 0);
    expect_refused(&s, "ddata-dump --salvage");
    assert_int_equal(count_moved_aside(&t), 0);

    s.on_corruption = SHOAL_DURABLE_RESYNC;
    shoal_durable_t *d = open_ok(&s);
    assert_int_equal(count_moved_aside(&t), 1);
    shoal_store_t *st = shoal_durable_store(d, "");
    seen_t seen = {0};
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 0);
    assert_int_equal(put(st, "fresh", "start"), 0);
    shoal_durable_close(&d);
    assert_int_equal(shoal_durable_check(t.dir, err, sizeof err), 0);
    tdir_remove(&t);
}

static void test_corrupt_truncated(void **state)
{
    (void)state;
    corrupt_case(TRUNCATE);
}

static void test_corrupt_garbage(void **state)
{
    (void)state;
    corrupt_case(GARBAGE);
}

static void test_corrupt_zeroes(void **state)
{
    (void)state;
    corrupt_case(ZEROES);
}

/* A data.mdb cut to nothing, or to less than LMDB's two meta pages: corrupt like the rest (LMDB
   would take an empty file for a new environment, and its read-only open, the check's, failed
   with "Bad file descriptor"), with the check and without it. */
static void test_corrupt_too_short(void **state)
{
    (void)state;
    static const off_t sizes[] = {0, 100, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        tdir_t t;
        tdir_make(&t);
        fill_store(t.dir);
        char path[256], err[512];
        data_path(t.dir, path, sizeof path);
        assert_int_equal(truncate(path, sizes[i]), 0);
        int rc = shoal_durable_check(t.dir, err, sizeof err);
        print_message("check of data.mdb cut to %lld bytes: %d %s\n", (long long)sizes[i], rc, err);
        assert_int_equal(rc, SHOAL_EDECODE);
        assert_non_null(strstr(err, "the store is corrupt"));

        shoal_durable_settings_t s = settings(t.dir, 0);
        expect_refused(&s, "the store is corrupt");
        expect_refused(&s, "ddata-dump --salvage");
        s.check_on_open = false; /* refused all the same, not taken for a new environment */
        expect_refused(&s, "the store is corrupt");
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(sb.st_size, sizes[i]); /* left as it was */
        assert_int_equal(count_moved_aside(&t), 0);

        s.check_on_open = true;
        s.on_corruption = SHOAL_DURABLE_RESYNC;
        shoal_durable_t *d = open_ok(&s);
        assert_int_equal(count_moved_aside(&t), 1);
        shoal_store_t *st = shoal_durable_store(d, "");
        assert_int_equal(put(st, "fresh", "start"), 0);
        shoal_durable_close(&d);
        tdir_remove(&t);
    }
}

/* ---------------------------------------------------------------------------------------------
 * 4. Map growth and its cap
 */
static void test_map_grows_then_caps(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 0);
    s.map_size = 64 * 1024;
    s.map_max = 1024 * 1024;
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    static char val[4000];
    memset(val, 'v', sizeof val - 1);
    int i, rc = 0;
    for (i = 0; i < 1000; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%04d", i);
        rc = put(st, key, val);
        if (rc != 0)
            break;
    }
    assert_int_equal(rc, SHOAL_ESTORE);
    assert_true(i > 64 * 1024 / 4000 * 2); /* well past the initial map */
    shoal_durable_stats_t stats;
    shoal_durable_stats(d, &stats);
    assert_true(stats.map_grows >= 4);
    assert_int_equal(stats.map_size, 1024 * 1024);
    assert_int_equal(stats.failures, 1);
    char msg[512];
    shoal_durable_last_error(d, msg, sizeof msg);
    assert_non_null(strstr(msg, "map_max"));
    /* deletes still work at the cap, and the data written is intact */
    char key[32];
    snprintf(key, sizeof key, "k%04d", 0);
    assert_int_equal(put(st, key, NULL), 0);
    shoal_durable_close(&d);

    d = open_ok(&s);
    st = shoal_durable_store(d, "");
    size_t n = 0;
    (void)n;
    seen_t seen = {0};
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, i - 1 < MAXSEEN ? i - 1 : MAXSEEN);
    shoal_durable_close(&d);
    tdir_remove(&t);
}

/* Write-behind: growth happens in the background commit too. */
static void test_map_grows_write_behind(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 20);
    s.map_size = 64 * 1024;
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    static char val[4000];
    memset(val, 'w', sizeof val - 1);
    for (int i = 0; i < 200; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%04d", i);
        assert_int_equal(put(st, key, val), 0);
    }
    shoal_durable_close(&d);
    d = open_ok(&s);
    shoal_durable_stats_t stats;
    shoal_durable_stats(d, &stats);
    assert_true(stats.map_size > 64 * 1024);
    st = shoal_durable_store(d, "");
    seen_t seen = {0};
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, MAXSEEN);
    shoal_durable_close(&d);
    tdir_remove(&t);
}

/* ---------------------------------------------------------------------------------------------
 * 5. A store that fills later: failed writes are retried until there is room again
 */
typedef struct {
    shoal_replicator_t *rep;
    shoal_replicator_stats_t st;
} rstats_t;

static int rstats_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    rstats_t *s = arg;
    return shoal_replicator_stats(s->rep, &s->st);
}

static shoal_replicator_stats_t rstats(tnode_t *n)
{
    rstats_t s = {n->rep, {0}};
    assert_int_equal(shoal_system_call(n->sys, rstats_on_node, &s), 0);
    return s.st;
}

typedef struct {
    tnode_t *n;
    uint64_t retries, puts;
} grow_wait_t;

static bool retried_more(void *arg)
{
    grow_wait_t *w = arg;
    return rstats(w->n).store_retries >= w->retries;
}

static bool stored_more(void *arg)
{
    grow_wait_t *w = arg;
    shoal_durable_stats_t ds;
    shoal_durable_stats(w->n->d, &ds);
    return ds.puts > w->puts;
}

/* Adds 1000-byte elements to the durable ORSet d-set (the value grows with each) until the store
   refuses one; returns how many were added, the refused one included (it is in memory). */
static int add_until_full(tnode_t *n, int first)
{
    const shoal_type_t *os = shoal_type_by_name("ORSet");
    shoal_consistency_t l = c_local();
    static char elem[1001];
    int i, rc = 0;
    for (i = first; i < first + 400 && rc == 0; i++) {
        snprintf(elem, sizeof elem, "%04d", i);
        memset(elem + 4, 'e', sizeof elem - 5);
        upd_t u = {shoal_system_self(n->sys), 0, elem};
        rc = shoal_replicator_update_sync(n->rep, "d-set", shoal_crdt_new(os), &l, add, &u);
    }
    assert_int_equal(rc, SHOAL_ESTORE);
    return i;
}

static size_t set_size(tnode_t *n)
{
    shoal_crdt_t *v = NULL;
    shoal_consistency_t l = c_local();
    assert_int_equal(shoal_replicator_get_sync(n->rep, "d-set", NULL, &l, &v), 0);
    size_t size = shoal_orset_size(v);
    shoal_crdt_destroy(&v);
    return size;
}

static void test_full_store_recovers(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t ds = settings(t.dir, 0);
    ds.map_size = 64 * 1024;
    ds.map_max = 256 * 1024;
    tnode_t n;
    node_start(&n, &ds);
    /* another role's data fills the map up to its cap */
    shoal_store_t *filler = shoal_durable_store(n.d, "filler");
    static char val[4000];
    memset(val, 'f', sizeof val - 1);
    int nf;
    for (nf = 0; nf < 1000; nf++) {
        char key[32];
        snprintf(key, sizeof key, "f%04d", nf);
        if (put(filler, key, val) != 0)
            break;
    }
    assert_true(nf < 1000);
    /* half of it goes (a map filled to the last page takes no deletion either: LMDB copies the
       pages it changes), and the replicator's value grows until its writes fail */
    for (int i = 0; i < nf / 2; i++) {
        char key[32];
        snprintf(key, sizeof key, "f%04d", i);
        assert_int_equal(put(filler, key, NULL), 0);
    }
    int added = add_until_full(&n, 0);
    print_message("full after %d filler values and %d elements\n", nf, added);
    assert_int_equal(set_size(&n), (size_t)added);
    shoal_consistency_t l = c_local();
    const shoal_type_t *gc = shoal_type_by_name("GCounter");
    upd_t u = {shoal_system_self(n.sys), 1, NULL};
    assert_int_equal(
        shoal_replicator_update_sync(n.rep, "volatile", shoal_crdt_new(gc), &l, incr, &u), 0);
    grow_wait_t w = {&n, rstats(&n).store_retries + 2, 0};
    assert_true(wait_until(retried_more, &w, 10000));

    /* space freed: the next retry stores the value */
    shoal_durable_stats_t dst;
    shoal_durable_stats(n.d, &dst);
    w.puts = dst.puts;
    for (int i = nf / 2; i < nf; i++) {
        char key[32];
        snprintf(key, sizeof key, "f%04d", i);
        assert_int_equal(put(filler, key, NULL), 0);
    }
    assert_true(wait_until(stored_more, &w, 15000));
    node_stop(&n);
    node_start(&n, &ds);
    assert_int_equal(set_size(&n), (size_t)added);

    /* full again; then the cap is raised */
    int added2 = add_until_full(&n, added);
    w.retries = rstats(&n).store_retries + 2;
    assert_true(wait_until(retried_more, &w, 10000));
    shoal_durable_stats(n.d, &dst);
    w.puts = dst.puts;
    assert_int_equal(shoal_durable_set_map_max(n.d, 1024), SHOAL_EINVAL); /* below the map */
    assert_int_equal(shoal_durable_set_map_max(n.d, 8u * 1024 * 1024), 0);
    assert_true(wait_until(stored_more, &w, 15000));
    node_stop(&n);
    node_start(&n, &ds);
    assert_int_equal(set_size(&n), (size_t)added2);
    node_stop(&n);
    tdir_remove(&t);
}

/* Write-behind: a batch that does not fit stays queued (nothing acknowledged is dropped) and
   commits once the cap is raised. */
typedef struct {
    shoal_durable_t *d;
    uint64_t retries;
    size_t pending;
} wb_wait_t;

static bool wb_retried(void *arg)
{
    wb_wait_t *w = arg;
    shoal_durable_stats_t st;
    shoal_durable_stats(w->d, &st);
    return st.retries >= w->retries && st.pending == w->pending;
}

static void count_4000(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    (void)key;
    (void)klen;
    (void)data;
    if (len == 4000)
        (*(size_t *)arg)++;
}

static void test_write_behind_full_batch_kept(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 20);
    s.map_size = 64 * 1024;
    s.map_max = 128 * 1024;
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    static char val[4000];
    memset(val, 'b', sizeof val);
    for (int i = 0; i < 100; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%04d", i);
        int status = 1;
        st->store(st->ctx, key, strlen(key), val, sizeof val, done_status, &status);
        assert_int_equal(status, 0); /* acknowledged at once */
    }
    wb_wait_t w = {d, 3, 100};
    assert_true(wait_until(wb_retried, &w, 10000));
    shoal_durable_stats_t stats;
    shoal_durable_stats(d, &stats);
    assert_int_equal(stats.failures, 0);
    assert_int_equal(stats.puts, 0);
    assert_int_equal(shoal_durable_set_map_max(d, 4u * 1024 * 1024), 0);
    w.pending = 0;
    assert_true(wait_until(wb_retried, &w, 15000)); /* the next retry, at most 10 s away */
    shoal_durable_stats(d, &stats);
    assert_int_equal(stats.puts, 100);
    assert_int_equal(stats.failures, 0);
    shoal_durable_close(&d);
    d = open_ok(&s);
    st = shoal_durable_store(d, "");
    size_t n = 0;
    assert_int_equal(st->load(st->ctx, count_4000, &n), 0);
    assert_int_equal(n, 100);
    shoal_durable_close(&d);
    tdir_remove(&t);
}

/* ---------------------------------------------------------------------------------------------
 * 6. Compaction
 */
static off_t file_size(const char *dir)
{
    char path[256];
    data_path(dir, path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return sb.st_size;
}

static void test_compact(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 0);
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    char val[2000];
    memset(val, 'c', sizeof val - 1);
    val[sizeof val - 1] = 0;
    for (int i = 0; i < 400; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%04d", i);
        assert_int_equal(put(st, key, val), 0);
    }
    for (int i = 0; i < 400; i++) { /* leaves free pages behind */
        if (i % 20 == 0)
            continue;
        char key[32];
        snprintf(key, sizeof key, "k%04d", i);
        assert_int_equal(put(st, key, NULL), 0);
    }
    char out[160];
    snprintf(out, sizeof out, "%s/compact", t.parent);
    assert_int_equal(shoal_durable_compact(d, out), 0);
    /* a second copy into the same place is refused, not overwritten */
    assert_int_equal(shoal_durable_compact(d, out), SHOAL_ESTORE);
    shoal_durable_close(&d);
    assert_true(file_size(out) <= file_size(t.dir));
    print_message("compact: %lld -> %lld bytes\n", (long long)file_size(t.dir),
                  (long long)file_size(out));

    shoal_durable_settings_t s2 = settings(out, 0);
    d = open_ok(&s2);
    st = shoal_durable_store(d, "");
    seen_t seen = {0};
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 20);
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%04d", i * 20);
        assert_string_equal(seen.key[i], key);
    }
    shoal_durable_close(&d);
    tdir_remove(&t);
}

/* ---------------------------------------------------------------------------------------------
 * 7. One process per data directory
 */
static void expect_in_use(const shoal_durable_settings_t *s, long pid)
{
    char want[64];
    snprintf(want, sizeof want, "in use by process %ld", pid);
    expect_refused(s, want);
    expect_refused(s, "/shoal.lock)");
}

static void test_lock_same_process(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 0);
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st = shoal_durable_store(d, "");
    assert_int_equal(put(st, "mine", "1"), 0);

    expect_in_use(&s, (long)getpid());
    expect_refused(&s, "this one");
    /* the same directory by another name; without the check; in write-behind mode */
    char other[160];
    snprintf(other, sizeof other, "%s/./env/", t.parent);
    shoal_durable_settings_t s2 = settings(other, 50);
    s2.check_on_open = false;
    expect_in_use(&s2, (long)getpid());

    /* the refused opens left the holder's lock and store alone (a POSIX record lock would
       have gone with the refused open's close of the file) */
    expect_in_use(&s, (long)getpid());
    assert_int_equal(put(st, "mine", "2"), 0);
    shoal_durable_close(&d);

    /* close let go: the next open (by the other name) succeeds and sees the holder's value */
    d = open_ok(&s2);
    st = shoal_durable_store(d, "");
    seen_t seen = {0};
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.val[0], "2");
    shoal_durable_close(&d);
    tdir_remove(&t);
}

/* A forked child that opens dir (writing `key` when it gets it) and reports on a pipe:
   "OPENED\n", or "REFUSED <message>\n". One that opened keeps the store until `hold` closes
   (then closes it and exits 0) or it is killed. */
typedef struct {
    pid_t pid;
    int said; /* read end: the child's report */
    int hold; /* write end: closing it lets a holder close its store */
    char line[600];
} opener_t;

static void opener_start(opener_t *o, const char *dir, const char *key)
{
    int said[2], hold[2];
    assert_int_equal(pipe(said), 0);
    assert_int_equal(pipe(hold), 0);
    fflush(NULL);
    o->pid = fork();
    assert_true(o->pid >= 0);
    if (o->pid == 0) {
        close(said[0]);
        close(hold[1]);
        shoal_durable_settings_t s = settings(dir, 0);
        char err[512] = "", line[600];
        int open_err = 0; /* the code; the words in shoal_last_error_detail() */
        shoal_durable_t *d = shoal_durable_open(&s, &open_err);
        if (open_err)
            snprintf(err, sizeof err, "%s", shoal_last_error_detail());
        if (d && key) {
            shoal_store_t *st = shoal_durable_store(d, "");
            int status = 1;
            st->store(st->ctx, key, strlen(key), "child", 5, done_status, &status);
            if (status != 0)
                snprintf(err, sizeof err, "the child's write failed: %d", status);
        }
        int n = d && !*err ? snprintf(line, sizeof line, "OPENED\n")
                           : snprintf(line, sizeof line, "REFUSED %s\n", err);
        ssize_t w = write(said[1], line, (size_t)n);
        (void)w;
        if (d) {
            char b;
            ssize_t r = read(hold[0], &b, 1); /* EOF: the parent let go */
            (void)r;
            shoal_durable_close(&d);
        }
        _exit(0);
    }
    close(said[1]);
    close(hold[0]);
    o->said = said[0];
    o->hold = hold[1];
    /* the report, with a deadline: an open runs the check in a child of its own */
    size_t n = 0;
    o->line[0] = 0;
    while (n < sizeof o->line - 1 && !strchr(o->line, '\n')) {
        struct pollfd p = {o->said, POLLIN, 0};
        if (poll(&p, 1, 30000 * tscale()) <= 0)
            fail_msg("the child opening %s did not report", dir);
        ssize_t r = read(o->said, o->line + n, sizeof o->line - 1 - n);
        if (r <= 0)
            fail_msg("the child opening %s died without a report", dir);
        n += (size_t)r;
        o->line[n] = 0;
    }
    print_message("child %ld: %s", (long)o->pid, o->line);
}

/* Ends the child: lets it close its store (sig 0) or kills it with sig. Returns its wait status
   (under scons valgrind a child that exits on its own exits 99: forked after czmq's context
   exists, it reports czmq's allocations as lost). */
static int opener_end(opener_t *o, int sig)
{
    if (sig)
        kill(o->pid, sig);
    close(o->hold);
    int st = 0;
    assert_int_equal(waitpid(o->pid, &st, 0), o->pid);
    close(o->said);
    return st;
}

static void test_lock_other_process(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 0);

    /* this process holds it: a child is refused, naming this process */
    shoal_durable_t *d = open_ok(&s);
    opener_t o;
    opener_start(&o, t.dir, "from-child");
    char want[200];
    snprintf(want, sizeof want, "REFUSED durable store %s: ", t.dir);
    assert_non_null(strstr(o.line, want));
    snprintf(want, sizeof want, "in use by process %ld (lock file ", (long)getpid());
    assert_non_null(strstr(o.line, want));
    assert_true(WIFEXITED(opener_end(&o, 0)));
    shoal_durable_close(&d);

    /* a child holds it: this process is refused, naming the child; the read-only check still
       reads the store beside it */
    opener_start(&o, t.dir, "from-child");
    assert_string_equal(o.line, "OPENED\n");
    expect_in_use(&s, (long)o.pid);
    char err[512];
    assert_int_equal(shoal_durable_check(t.dir, err, sizeof err), 0);
    /* the holder closes: the directory is free again */
    assert_true(WIFEXITED(opener_end(&o, 0)));
    d = open_ok(&s);
    shoal_durable_close(&d);
    tdir_remove(&t);
}

static void test_lock_gone_with_a_killed_holder(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    shoal_durable_settings_t s = settings(t.dir, 0);
    opener_t o;
    opener_start(&o, t.dir, "written-before-the-kill");
    assert_string_equal(o.line, "OPENED\n");
    expect_in_use(&s, (long)o.pid);
    int st = opener_end(&o, SIGKILL);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

    /* no close ran, the lock file still names the dead holder: the kernel dropped the lock */
    char lock[192], pid[32] = "";
    snprintf(lock, sizeof lock, "%s/shoal.lock", t.dir);
    FILE *f = fopen(lock, "r");
    assert_non_null(f);
    assert_non_null(fgets(pid, sizeof pid, f));
    fclose(f);
    assert_int_equal(atol(pid), (long)o.pid);
    shoal_durable_t *d = open_ok(&s);
    shoal_store_t *st2 = shoal_durable_store(d, "");
    seen_t seen = {0};
    assert_int_equal(st2->load(st2->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 1);
    assert_string_equal(seen.key[0], "written-before-the-kill");
    shoal_durable_close(&d);
    tdir_remove(&t);
}

/* THE ERROR CONVENTION (ddata.h): NULL, a SHOAL_E* code in *err, and the words (the directory,
   what went wrong, the way out) in shoal_last_error_detail(); a success leaves no detail. */
static void test_open_error_convention(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    char path[600];
    int code = 0;

    /* a directory that cannot be created: its parent is a file */
    snprintf(path, sizeof path, "%s/file", t.parent);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/file/store", t.parent);
    shoal_durable_settings_t s = settings(path, 0);
    assert_null(shoal_durable_open(&s, &code));
    assert_int_equal(code, SHOAL_EIO);
    assert_non_null(strstr(shoal_last_error_detail(), path));
    assert_non_null(strstr(shoal_last_error_detail(), "cannot create the directory"));

    /* a corrupt store: a data.mdb too short to hold LMDB's meta pages */
    snprintf(path, sizeof path, "%s/corrupt", t.parent);
    assert_int_equal(mkdir(path, 0700), 0);
    char file[700];
    snprintf(file, sizeof file, "%s/data.mdb", path);
    f = fopen(file, "w");
    assert_non_null(f);
    fputs("not an LMDB file", f);
    fclose(f);
    s = settings(path, 0);
    code = 0;
    assert_null(shoal_durable_open(&s, &code));
    assert_int_equal(code, SHOAL_EDECODE);
    assert_non_null(strstr(shoal_last_error_detail(), path));
    assert_non_null(strstr(shoal_last_error_detail(), "move it aside"));

    /* a good one: code 0, no detail; opened twice: SHOAL_EBUSY, naming this process */
    snprintf(path, sizeof path, "%s/good", t.parent);
    s = settings(path, 0);
    code = 1;
    shoal_durable_t *d = shoal_durable_open(&s, &code);
    assert_non_null(d);
    assert_int_equal(code, 0);
    assert_string_equal(shoal_last_error_detail(), "");
    assert_null(shoal_durable_open(&s, &code));
    assert_int_equal(code, SHOAL_EBUSY);
    char pid[64];
    snprintf(pid, sizeof pid, "in use by process %ld", (long)getpid());
    assert_non_null(strstr(shoal_last_error_detail(), pid));
    shoal_durable_close(&d);
    tdir_remove(&t);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char err[256];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    assert_null(shoal_durable_open(NULL, &open_err));
    assert_int_equal(open_err, SHOAL_EINVAL);
    assert_null(shoal_durable_open(NULL, NULL)); /* err may be NULL */
    shoal_durable_settings_t s;
    shoal_durable_settings_default(&s);
    assert_null(shoal_durable_open(&s, &open_err));
    assert_int_equal(open_err, SHOAL_EINVAL);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    assert_non_null(strstr(err, "directory"));
    assert_int_equal(shoal_durable_check(NULL, err, sizeof err), SHOAL_EINVAL);
    assert_int_equal(shoal_durable_check("/nonexistent/shoal-durable", err, sizeof err), 0);
    assert_null(shoal_durable_store(NULL, ""));
    shoal_durable_close(NULL);
    shoal_durable_t *d = NULL;
    shoal_durable_close(&d);
}

/* ---------------------------------------------------------------------------------------------
 * Settings from a configuration file (shoal_config_durable)
 */
/* A file whose .../durable/lmdb section holds `keys` (lines indented for it). */
static void lmdb_text(char *text, size_t cap, const char *keys)
{
    snprintf(text, cap,
             "shoal\n    cluster\n        distributed-data\n            durable\n"
             "                lmdb\n%s",
             keys);
}

static shoal_config_t *lmdb_config(const char *keys)
{
    char text[1024];
    lmdb_text(text, sizeof text, keys);
    int code = 0;
    shoal_config_t *cfg = shoal_config_parse(text, &code);
    if (!cfg)
        fail_msg("refused: %s\n%s", shoal_last_error_detail(), text);
    return cfg;
}

/* The text must be refused, at load or by the filler (which leaves the settings alone), with a
   message containing frag1 and frag2. */
static void lmdb_refused(const char *keys, const char *frag1, const char *frag2)
{
    char text[1024], err[512] = "";
    lmdb_text(text, sizeof text, keys);
    int code = 0;
    shoal_config_t *cfg = shoal_config_parse(text, &code);
    const char *msg = err;
    if (cfg) {
        shoal_durable_settings_t s = settings("/nowhere", 7), before = s;
        int rc = shoal_config_durable(cfg, &s, err, sizeof err);
        shoal_config_destroy(&cfg);
        if (rc == 0)
            fail_msg("accepted:\n%s", text);
        assert_int_equal(rc, SHOAL_EINVAL);
        assert_memory_equal(&s, &before, sizeof s);
    } else {
        assert_int_equal(code, SHOAL_EINVAL);
        msg = shoal_last_error_detail();
    }
    if (!strstr(msg, frag1) || (frag2 && !strstr(msg, frag2)))
        fail_msg("error '%s' lacks '%s' / '%s'", msg, frag1, frag2 ? frag2 : "");
}

/* dir, map-size and write-behind-interval from a file fill their fields, and a store opened
   with them runs with them: a small map, writes acknowledged before they are committed. */
static void test_settings_from_a_file(void **state)
{
    (void)state;
    tdir_t t;
    tdir_make(&t);
    char keys[512];
    snprintf(keys, sizeof keys,
             "                    dir = \"%s\"\n"
             "                    map-size = 1 MiB\n"
             "                    write-behind-interval = 10 s\n",
             t.dir);
    shoal_config_t *cfg = lmdb_config(keys);
    shoal_durable_settings_t s = settings("/nowhere", 0), dflt;
    shoal_durable_settings_default(&dflt);
    char err[512] = "x";
    assert_int_equal(shoal_config_durable(cfg, &s, err, sizeof err), 0);
    assert_string_equal(err, "");
    assert_string_equal(s.dir, t.dir);
    assert_int_equal(s.map_size, 1024 * 1024);
    assert_int_equal(s.write_behind_ms, 10000);
    assert_int_equal(s.map_max, dflt.map_max); /* not in the file: kept */
    assert_true(s.nosync);                      /* the caller's */

    shoal_durable_t *d = open_ok(&s);
    shoal_durable_stats_t stats;
    shoal_durable_stats(d, &stats);
    assert_true(stats.map_size >= 1024 * 1024 && stats.map_size < dflt.map_size);
    shoal_store_t *st = shoal_durable_store(d, "");
    shoal_durable_stats(d, &stats);
    uint64_t commits = stats.commits;
    assert_int_equal(put(st, "k", "v"), 0);
    shoal_durable_stats(d, &stats);
    assert_int_equal(stats.pending, 1); /* acknowledged, committed within 10 s or at close */
    assert_int_equal(stats.commits, commits);
    shoal_durable_close(&d);
    shoal_config_destroy(&cfg);

    /* off: immediate writes, over the caller's interval; unset keys stay */
    cfg = lmdb_config("                    write-behind-interval = off\n");
    s = settings(t.dir, 500);
    assert_int_equal(shoal_config_durable(cfg, &s, err, sizeof err), 0);
    assert_int_equal(s.write_behind_ms, 0);
    assert_string_equal(s.dir, t.dir);
    assert_int_equal(s.map_size, dflt.map_size);
    d = open_ok(&s);
    st = shoal_durable_store(d, "");
    shoal_durable_stats(d, &stats);
    commits = stats.commits;
    assert_int_equal(put(st, "k2", "v2"), 0);
    shoal_durable_stats(d, &stats);
    assert_int_equal(stats.pending, 0);
    assert_int_equal(stats.commits, commits + 1); /* committed before the acknowledgement */
    seen_t seen = {0};
    assert_int_equal(st->load(st->ctx, collect, &seen), 0);
    assert_int_equal(seen.n, 2); /* "k" was flushed when the first store closed */
    shoal_durable_close(&d);
    shoal_config_destroy(&cfg);

    /* a file without the keys changes nothing */
    int code = 0;
    cfg = shoal_config_parse("shoal\n    cluster\n        gossip-interval = 1 s\n", &code);
    assert_non_null(cfg);
    shoal_durable_settings_t before = settings("/kept", 3);
    s = before;
    assert_int_equal(shoal_config_durable(cfg, &s, err, sizeof err), 0);
    assert_memory_equal(&s, &before, sizeof s);
    assert_int_equal(shoal_config_durable(NULL, &s, err, sizeof err), SHOAL_EINVAL);
    assert_int_equal(shoal_config_durable(cfg, NULL, err, sizeof err), SHOAL_EINVAL);
    shoal_config_destroy(&cfg);

    /* bad values name the key */
    const char *lmdb = "shoal/cluster/distributed-data/durable/lmdb/";
    char path[128];
    snprintf(path, sizeof path, "%sdir", lmdb);
    lmdb_refused("                    dir = \"\"\n", path, "empty");
    snprintf(path, sizeof path, "%smap-size", lmdb);
    lmdb_refused("                    map-size = 0\n", path, "more than zero");
    lmdb_refused("                    map-size = lots\n", path, NULL);
    snprintf(path, sizeof path, "%swrite-behind-interval", lmdb);
    lmdb_refused("                    write-behind-interval = soon\n", path, "not a duration");
    lmdb_refused("                    write-behind-interval = 50 d\n", path, "too large");
    tdir_remove(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_immediate),
        cmocka_unit_test(test_settings_from_a_file),
        cmocka_unit_test(test_round_trip_write_behind),
        cmocka_unit_test(test_load_in_chunks),
        cmocka_unit_test(test_replicator_immediate),
        cmocka_unit_test(test_replicator_write_behind),
        cmocka_unit_test(test_foreign_and_newer),
        cmocka_unit_test(test_corrupt_truncated),
        cmocka_unit_test(test_corrupt_garbage),
        cmocka_unit_test(test_corrupt_zeroes),
        cmocka_unit_test(test_corrupt_too_short),
        cmocka_unit_test(test_map_grows_then_caps),
        cmocka_unit_test(test_map_grows_write_behind),
        cmocka_unit_test(test_full_store_recovers),
        cmocka_unit_test(test_write_behind_full_batch_kept),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_lock_same_process),
        cmocka_unit_test(test_lock_other_process),
        cmocka_unit_test(test_lock_gone_with_a_killed_holder),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_open_error_convention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
