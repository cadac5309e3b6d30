/*  bench_durable.c — the LMDB durable store under a real replicator.

    durable_write_immediate: durable SHOAL_LOCAL GCounter updates per second through a replicator
    on one node (20,000 updates over 5,000 keys, issued on the node thread in batches of 1,000 as
    bench_replicator does), the store in immediate mode (one synced write transaction per update).
    Baseline: raw LMDB, one synced transaction per put of the same key and value sizes.

    durable_write_behind: the same with write_behind_ms = 100, timed until the last update is
    acknowledged AND flushed to LMDB (so the figure includes the commits). Baseline: raw LMDB
    puts of the same sizes, 1,000 per transaction.

    SHOAL_BENCH_QUICK=1 runs every figure on a few thousand keys: scons check runs it so in the
    sanitized build (with ASan's stack-use-after-return check), which is how the hang in
    durable_load_100k was found (see drive()).

    durable_load_100k: milliseconds from opening the store (with its check in a child process, the
    default) through starting a node and a replicator until a get_sync of a loaded key returns,
    with 100,000 durable GCounter keys stored. Baseline: raw LMDB, open the environment and copy
    every entry out with a cursor. Target < 1,000 ms.

    The stores live in a mkdtemp directory under /tmp (removed at the end). Every wait has a
    deadline; a failure prints a message on stderr and exits nonzero.
*/
#include "bench.h"
#include "ddata.h"
#include "durable.h"

#include <czmq.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <lmdb.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH      1000
/* SHOAL_BENCH_QUICK=1 (scons check runs the sanitized build so): the same paths, a few keys */
static int UPDATES = 20000, NKEYS = 5000, LOAD_KEYS = 100000;
#define BEHIND_MS  100
#define RAW_BATCH  1000

static char root[64];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup(void)
{
    if (root[0])
        nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_durable: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    cleanup();
    exit(1);
}

static char (*make_keys(size_t n, const char *prefix))[24]
{
    char (*keys)[24] = malloc(n * sizeof *keys);
    if (!keys)
        abort();
    for (size_t i = 0; i < n; i++)
        snprintf(keys[i], sizeof keys[i], "%s-%06zu", prefix, i);
    return keys;
}

/* ---------------------------------------------------------------------------------------------
 * A node with a durable replicator, driven on its thread
 */
typedef struct {
    shoal_durable_t *d;
    shoal_store_t *store;
    shoal_system_t *sys;
    shoal_replicator_t *rep;
} node_t;

static void node_start(node_t *n, const char *dir, uint32_t behind_ms)
{
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = dir;
    ds.write_behind_ms = behind_ms;
    char err[512];
    int open_err = 0; /* the code; the words in shoal_last_error_detail() */
    n->d = shoal_durable_open(&ds, &open_err);
    if (open_err)
        snprintf(err, sizeof err, "%s", shoal_last_error_detail());
    if (!n->d)
        fail("%s", err);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int rc = 0;
    n->sys = shoal_system_new(&ss, &rc);
    if (!n->sys)
        fail("system: %s", shoal_strerror(rc));
    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    static const char *const durable[] = {"*"};
    rs.durable_keys = durable;
    rs.n_durable_keys = 1;
    rs.max_pending_ops = 2 * BATCH + 100;
    n->store = rs.store = shoal_durable_store(n->d, "");
    if (!rs.store)
        fail("no store");
    n->rep = shoal_replicator_new(n->sys, &rs, &rc);
    if (!n->rep)
        fail("replicator: %s", shoal_strerror(rc));
}

static void node_stop(node_t *n)
{
    shoal_replicator_destroy(&n->rep);
    shoal_system_destroy(&n->sys);
    shoal_durable_close(&n->d);
}

typedef struct {
    node_t *node;
    const shoal_node_t *self;
    shoal_crdt_t *initial;
    char (*keys)[24];
    size_t nkeys;
    uint64_t issued, done, todo, errors;
    int first_err;
    bool finished;
    sem_t sem;
} load_t;

static int modify_gcounter(shoal_crdt_t *value, void *arg)
{
    return shoal_gcounter_increment(value, arg, 1);
}

static void finish(load_t *l)
{
    if (!l->finished) {
        l->finished = true;
        sem_post(&l->sem);
    }
}

static void on_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    load_t *l = arg;
    l->done++;
    if (status != 0 && l->errors++ == 0)
        l->first_err = status;
    if (l->done == l->todo && l->issued == l->todo)
        finish(l);
}

static int batch(shoal_system_t *sys, void *arg)
{
    load_t *l = arg;
    static const shoal_consistency_t wc = {.level = SHOAL_LOCAL};
    uint64_t end = l->issued + BATCH < l->todo ? l->issued + BATCH : l->todo;
    while (l->issued < end) {
        uint64_t i = l->issued;
        int rc = shoal_replicator_update(l->node->rep, l->keys[i % l->nkeys],
                                         shoal_crdt_clone(l->initial), &wc, modify_gcounter,
                                         (void *)l->self, on_done, l);
        if (rc != 0) {
            if (l->errors++ == 0)
                l->first_err = rc;
            finish(l);
            return 0;
        }
        /* counted only after the call: a LOCAL update to a write-behind store is done before
           shoal_replicator_update returns, and on_done must not see the last one issued then,
           or it wakes drive() (whose stack holds l) while this function still reads l */
        l->issued++;
    }
    if (l->issued < l->todo) {
        if (shoal_system_post(sys, batch, l) != 0)
            finish(l);
    } else if (l->done == l->todo) {
        finish(l);
    }
    return 0;
}

/* Issues n updates over nkeys keys on the node thread and waits until every one is done. */
static void drive(node_t *n, char (*keys)[24], size_t nkeys, uint64_t count)
{
    load_t l;
    memset(&l, 0, sizeof l);
    l.node = n;
    l.self = shoal_system_self(n->sys);
    l.initial = shoal_gcounter_new();
    l.keys = keys;
    l.nkeys = nkeys;
    l.todo = count;
    sem_init(&l.sem, 0, 0);
    if (shoal_system_post(n->sys, batch, &l) != 0)
        fail("post failed");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 300;
    while (sem_timedwait(&l.sem, &ts) != 0)
        if (errno != EINTR)
            fail("updates: %" PRIu64 " of %" PRIu64 " done after 300 s", l.done, l.todo);
    if (l.errors)
        fail("updates failed (%" PRIu64 "): %s", l.errors, shoal_strerror(l.first_err));
    sem_destroy(&l.sem);
    shoal_crdt_destroy(&l.initial);
}

/* ---------------------------------------------------------------------------------------------
 * Raw LMDB baselines
 */
static size_t value_size; /* bytes the replicator stores per GCounter key, read back */

static void size_each(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    (void)arg;
    (void)key;
    (void)klen;
    (void)data;
    if (len > value_size)
        value_size = len;
}

static MDB_env *raw_open(const char *dir, MDB_dbi *dbi)
{
    mkdir(dir, 0700);
    MDB_env *env;
    MDB_txn *txn;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) ||
        mdb_env_set_mapsize(env, 100u * 1024 * 1024) || mdb_env_open(env, dir, 0, 0600) ||
        mdb_txn_begin(env, NULL, 0, &txn) || mdb_dbi_open(txn, "ddata:", MDB_CREATE, dbi) ||
        mdb_txn_commit(txn))
        fail("raw LMDB open of %s failed", dir);
    return env;
}

/* ops/s of `count` puts of value_size bytes over nkeys keys, per_txn puts per transaction. */
static double raw_puts(const char *dir, char (*keys)[24], size_t nkeys, size_t count, size_t per_txn)
{
    MDB_dbi dbi;
    MDB_env *env = raw_open(dir, &dbi);
    uint8_t *val = calloc(1, value_size + 1);
    double t0 = bench_now();
    for (size_t i = 0; i < count;) {
        MDB_txn *txn;
        if (mdb_txn_begin(env, NULL, 0, &txn))
            fail("raw txn");
        for (size_t j = 0; j < per_txn && i < count; j++, i++) {
            val[i % value_size] ^= 1; /* a changing value, as the counter's */
            MDB_val k = {strlen(keys[i % nkeys]), keys[i % nkeys]}, v = {value_size, val};
            if (mdb_put(txn, dbi, &k, &v, 0))
                fail("raw put");
        }
        if (mdb_txn_commit(txn))
            fail("raw commit");
    }
    double dt = bench_now() - t0;
    mdb_env_close(env);
    free(val);
    return (double)count / dt;
}

static double raw_load_ms(const char *dir)
{
    double t0 = bench_now();
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 64) || mdb_env_open(env, dir, 0, 0600) ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) || mdb_dbi_open(txn, "ddata:", 0, &dbi) ||
        mdb_cursor_open(txn, dbi, &cur))
        fail("raw load open of %s failed", dir);
    MDB_val k, v;
    size_t n = 0, bytes = 0;
    uint8_t *copy = malloc(65536);
    while (mdb_cursor_get(cur, &k, &v, MDB_NEXT) == 0) {
        if (v.mv_size <= 65536)
            memcpy(copy, v.mv_data, v.mv_size);
        bytes += v.mv_size + k.mv_size;
        n++;
    }
    bench_sink((uintptr_t)copy[0] + bytes);
    free(copy);
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    if (n != (size_t)LOAD_KEYS)
        fail("raw load read %zu entries, expected %d", n, LOAD_KEYS);
    return (bench_now() - t0) * 1000.0;
}

/* ---------------------------------------------------------------------------------------------
 * Figures
 */
static void bench_writes(void)
{
    char (*keys)[24] = make_keys(NKEYS, "w");
    for (int behind = 0; behind <= 1; behind++) {
        char dir[128], rawdir[128];
        snprintf(dir, sizeof dir, "%s/write-%d", root, behind);
        snprintf(rawdir, sizeof rawdir, "%s/raw-%d", root, behind);
        node_t n;
        node_start(&n, dir, behind ? BEHIND_MS : 0);
        drive(&n, keys, NKEYS, NKEYS); /* warm-up: every key exists, sizes settle */
        n.store->close(n.store->ctx);  /* flush */
        double t0 = bench_now();
        drive(&n, keys, NKEYS, UPDATES);
        n.store->close(n.store->ctx); /* write-behind: counted until it is in LMDB */
        double rate = UPDATES / (bench_now() - t0);
        value_size = 0;
        if (n.store->load(n.store->ctx, size_each, NULL) != 0 || value_size == 0)
            fail("cannot read back the stored values");
        shoal_durable_stats_t st;
        shoal_durable_stats(n.d, &st);
        node_stop(&n);
        double raw = raw_puts(rawdir, keys, NKEYS, UPDATES, behind ? RAW_BATCH : 1);
        bench_note("%s: %zu-byte values, %" PRIu64 " commits for %d updates",
                   behind ? "write-behind" : "immediate", value_size, st.commits,
                   UPDATES + NKEYS);
        bench_report(behind ? "durable_write_behind" : "durable_write_immediate", rate, "ops/s",
                     raw);
    }
    free(keys);
}

static void bench_load(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/load", root);
    char (*keys)[24] = make_keys(LOAD_KEYS, "load");
    node_t n;
    node_start(&n, dir, BEHIND_MS);
    drive(&n, keys, LOAD_KEYS, LOAD_KEYS);
    node_stop(&n);

    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bench_now();
        node_start(&n, dir, 0);
        shoal_consistency_t l = {.level = SHOAL_LOCAL};
        shoal_crdt_t *v = NULL;
        int rc = shoal_replicator_get_sync(n.rep, keys[LOAD_KEYS - 1], NULL, &l, &v);
        double ms = (bench_now() - t0) * 1000.0;
        if (rc != 0 || !v || shoal_gcounter_value(v) != 1)
            fail("the loaded key is missing or wrong (%s)", shoal_strerror(rc));
        shoal_crdt_destroy(&v);
        shoal_replicator_stats_t rs;
        shoal_replicator_stats(n.rep, &rs);
        if (rs.keys != (uint64_t)LOAD_KEYS)
            fail("loaded %" PRIu64 " keys, expected %d", rs.keys, LOAD_KEYS);
        node_stop(&n);
        if (ms < best)
            best = ms;
    }
    double raw = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double ms = raw_load_ms(dir);
        if (ms < raw)
            raw = ms;
    }
    bench_note("durable_load_100k: open (with its check) + node + replicator until a get_sync "
               "returns; target < 1000 ms");
    bench_report("durable_load_100k", best, "ms", raw);
    free(keys);
}

int main(void)
{
    zsys_init();
    zsys_set_logstream(stderr); /* stdout carries the BENCH lines */
    const char *quick = getenv("SHOAL_BENCH_QUICK");
    if (quick && *quick && strcmp(quick, "0") != 0) {
        UPDATES = 2000;
        NKEYS = 500;
        LOAD_KEYS = 3000;
    }
    snprintf(root, sizeof root, "/tmp/shoal-bench-durable-XXXXXX");
    if (!mkdtemp(root))
        fail("mkdtemp: %s", strerror(errno));
    double t0 = bench_now();
    bench_writes();
    bench_load();
    cleanup();
    bench_note("bench_durable: %.1f s", bench_now() - t0);
    return 0;
}
