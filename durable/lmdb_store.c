/*  lmdb_store.c — the durable store in LMDB (see durable.h for the layout and the contract).

    Every LMDB transaction of this process is taken under d->txn_lock: LMDB lets the map grow
    (mdb_env_set_mapsize) only while no transaction of the process is open, and the write-behind
    thread and the node thread would otherwise race there. Write-behind changes queue under a
    second mutex (d->pend_lock) so the node thread never waits for a commit's fsync.

    One process per data directory: open holds a lock on <dir>/shoal.lock (see lock_dir) from
    before the check until close, so a second node on the same directory, in this process or
    another, is refused instead of writing its cluster's keys into the first one's map (LMDB
    serializes the two writers' transactions and nothing more).
*/
#include "durable.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_DBS     64
#define META_DB     "meta"
#define FORMAT_KEY  "format"
#define NODE_ID_KEY "node-id" /* the identity of the node that owns this directory */
#define ROLE_PREFIX "ddata:"
#define FORMAT_STEM "shoal-durable "
#define LOAD_CHUNK  (4u * 1024 * 1024) /* bytes copied out of LMDB per load round */
#define WAY_OUT     "move it aside or salvage it with ddata-dump --salvage"
#define LOCK_FILE   "shoal.lock"
/* LMDB creates data.mdb with its two meta pages, each of the OS page size (4 KiB at least on
   Linux), and never shrinks it: a shorter file was cut (a full disk, a copy that stopped). LMDB
   would take an empty one for a new environment (and fail with EBADF writing its meta pages
   when opened read-only, as the check does), so such a file is called corrupt before LMDB sees
   it. */
#define MIN_DATA_BYTES (2 * 4096)
/* A write-behind batch whose commit fails (disk full, map at its cap, I/O error) is kept and
   committed again after 100 ms, doubling up to 10 s while it keeps failing (but never sooner
   than the write-behind interval): the acknowledged changes wait in memory rather than being
   dropped, and a long outage costs one attempt every 10 s. */
#define RETRY_MIN_MS 100u
#define RETRY_MAX_MS 10000u

typedef struct durable_store durable_store_t;

/* A change waiting for the write-behind thread. */
typedef struct {
    durable_store_t *store;
    uint8_t *key; /* key bytes followed by value bytes, one allocation */
    size_t klen;
    size_t len;
    bool del;
} pending_t;

struct durable_store {
    shoal_store_t base;
    shoal_durable_t *d;
    char *role;
    MDB_dbi dbi;
    durable_store_t *next;
};

struct shoal_durable {
    shoal_durable_settings_t s;
    char *dir;
    int lock_fd; /* <dir>/shoal.lock, locked while the environment is open (lock_dir) */
    MDB_env *env;
    size_t map_size;
    size_t max_key;
    pthread_mutex_t txn_lock; /* every transaction; the store list; stats; last error */
    durable_store_t *stores;
    shoal_durable_stats_t stats;
    uint64_t commit_ns; /* time spent in committed write transactions (metrics) */
    char last_error[512];
    /* The last write transaction failed because the map is at map_max, and none has committed
       since: /health/ready's "durable" check fails (shoal_durable_metrics). full_role names the
       role of the change that did not fit (the first of a write-behind batch). */
    bool full;
    char full_role[64];
    char node_id[SHOAL_DURABLE_NODE_ID_LEN + 1]; /* meta/node-id, made at the first open */

    /* write-behind */
    pthread_mutex_t pend_lock;
    pthread_cond_t pend_cond;
    pending_t *pend;
    size_t npend, pend_cap;
    /* pend indexed by (store, key): slot = index + 1, 0 empty; open addressing, power-of-two
       size, at most half full. A change of a key already pending replaces it in place, so the
       queue holds at most one change per key: during a store outage (map at map_max, disk full)
       it is bounded by the number of distinct keys written, not by the number of writes. */
    size_t *pend_idx;
    size_t pend_idx_cap;
    uint32_t retry_ms; /* delay before committing a failed batch again, 0 after a success
                          (under pend_lock: the write-behind thread reads it while waiting) */
    bool stopping;
    bool thread_started;
    pthread_t thread;
};

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p)
        abort();
    return p;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        abort();
    return p;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_with(int *code, int value, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void set_err_v(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
}

/* An open's failure: its code (shoal_durable_open's *err) and its message. */
static void fail_with(int *code, int value, char *err, size_t errlen, const char *fmt, ...)
{
    *code = value;
    va_list ap;
    va_start(ap, fmt);
    set_err_v(err, errlen, fmt, ap);
    va_end(ap);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_err_v(err, errlen, fmt, ap);
    va_end(ap);
}

/* Records and logs a failure (caller holds txn_lock). */
static void fail_locked(shoal_durable_t *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail_locked(shoal_durable_t *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->last_error, sizeof d->last_error, fmt, ap);
    va_end(ap);
    shoal_error("durable %s: %s", d->dir, d->last_error);
}

void shoal_durable_settings_default(shoal_durable_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->map_size = 100u * 1024 * 1024;
    s->map_max = (size_t)8 * 1024 * 1024 * 1024;
    s->check_on_open = true;
    s->check_timeout_ms = 60000;
    s->on_corruption = SHOAL_DURABLE_REFUSE;
}

static size_t round_pages(size_t n)
{
    long ps = sysconf(_SC_PAGESIZE);
    size_t p = ps > 0 ? (size_t)ps : 4096;
    if (n < 16 * p)
        n = 16 * p;
    return (n + p - 1) / p * p;
}

/* ---------------------------------------------------------------------------------------------
 * Transactions, with the map grown on demand
 */

/* Begins a transaction (caller holds txn_lock); adopts a map grown by another process. */
static int txn_begin(shoal_durable_t *d, unsigned flags, MDB_txn **txn)
{
    int rc = mdb_txn_begin(d->env, NULL, flags, txn);
    if (rc == MDB_MAP_RESIZED) {
        mdb_env_set_mapsize(d->env, 0);
        MDB_envinfo info;
        if (mdb_env_info(d->env, &info) == 0)
            d->map_size = info.me_mapsize;
        rc = mdb_txn_begin(d->env, NULL, flags, txn);
    }
    return rc;
}

/* Doubles the map after MDB_MAP_FULL (caller holds txn_lock, no transaction open). */
static int grow_map(shoal_durable_t *d)
{
    if (d->map_size >= d->s.map_max) {
        fail_locked(d,
                    "the store is full: the map reached map_max (%zu bytes); raise map_max "
                    "or compact the store",
                    d->s.map_max);
        d->full = true;
        return SHOAL_ESTORE;
    }
    size_t next = d->map_size > d->s.map_max / 2 ? d->s.map_max : d->map_size * 2;
    int rc = mdb_env_set_mapsize(d->env, next);
    if (rc != 0) {
        fail_locked(d, "cannot grow the map to %zu bytes: %s", next, mdb_strerror(rc));
        return SHOAL_ESTORE;
    }
    MDB_envinfo info;
    d->map_size = mdb_env_info(d->env, &info) == 0 ? info.me_mapsize : next;
    d->stats.map_grows++;
    d->stats.map_size = d->map_size;
    shoal_info("durable %s: map grown to %zu bytes", d->dir, d->map_size);
    return 0;
}

typedef int(txn_body_fn)(shoal_durable_t *d, MDB_txn *txn, void *arg);

/* Runs body in a write transaction and commits, growing the map and retrying while it is full.
   Caller holds txn_lock. Returns 0, or SHOAL_ESTORE (logged). */
static int write_txn(shoal_durable_t *d, txn_body_fn *body, void *arg, const char *what)
{
    for (;;) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        MDB_txn *txn;
        int rc = txn_begin(d, 0, &txn);
        if (rc != 0) {
            fail_locked(d, "%s: cannot begin a write transaction: %s", what, mdb_strerror(rc));
            return SHOAL_ESTORE;
        }
        rc = body(d, txn, arg);
        if (rc == 0)
            rc = mdb_txn_commit(txn);
        else
            mdb_txn_abort(txn);
        if (rc == 0) {
            d->stats.commits++;
            d->full = false;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            d->commit_ns +=
                (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
            return 0;
        }
        if (rc == MDB_MAP_FULL) {
            if (grow_map(d) < 0)
                return SHOAL_ESTORE;
            continue;
        }
        if (rc < 0 && rc > -1000) /* a SHOAL_E* code from the body: already reported */
            return SHOAL_ESTORE;
        fail_locked(d, "%s: %s", what, mdb_strerror(rc));
        return SHOAL_ESTORE;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Writes
 */
typedef struct {
    durable_store_t *st;
    const void *key;
    size_t klen;
    const void *data;
    size_t len;
} one_write_t;

static int put_or_del(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t klen, const void *data,
                      size_t len, bool del)
{
    MDB_val k = {klen, (void *)key};
    if (del) {
        int rc = mdb_del(txn, dbi, &k, NULL);
        return rc == MDB_NOTFOUND ? 0 : rc;
    }
    MDB_val v = {len, (void *)data};
    return mdb_put(txn, dbi, &k, &v, 0);
}

static int one_write_body(shoal_durable_t *d, MDB_txn *txn, void *arg)
{
    (void)d;
    one_write_t *w = arg;
    return put_or_del(txn, w->st->dbi, w->key, w->klen, w->data, w->len, w->data == NULL);
}

static bool key_ok(shoal_durable_t *d, size_t klen)
{
    return klen >= 1 && klen <= d->max_key;
}

static void pending_free(pending_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(p[i].key);
    free(p);
}

static uint64_t pend_hash(const durable_store_t *st, const uint8_t *key, size_t klen)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)st;
    for (size_t i = 0; i < klen; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The slot of (st, key) in the index: the one naming it, or the empty one to use. Caller holds
   pend_lock; the index has room (pend_reserve). */
static size_t *pend_slot(shoal_durable_t *d, const durable_store_t *st, const uint8_t *key,
                         size_t klen)
{
    size_t mask = d->pend_idx_cap - 1;
    for (size_t i = (size_t)pend_hash(st, key, klen) & mask;; i = (i + 1) & mask) {
        size_t *slot = &d->pend_idx[i];
        if (*slot == 0)
            return slot;
        const pending_t *p = &d->pend[*slot - 1];
        if (p->store == st && p->klen == klen && memcmp(p->key, key, klen) == 0)
            return slot;
    }
}

/* Room in the index and the array for one more change. */
static void pend_reserve(shoal_durable_t *d)
{
    if ((d->npend + 1) * 2 > d->pend_idx_cap) {
        size_t cap = d->pend_idx_cap ? d->pend_idx_cap * 2 : 512;
        free(d->pend_idx);
        d->pend_idx = calloc(cap, sizeof *d->pend_idx);
        if (!d->pend_idx)
            abort();
        d->pend_idx_cap = cap;
        for (size_t i = 0; i < d->npend; i++)
            *pend_slot(d, d->pend[i].store, d->pend[i].key, d->pend[i].klen) = i + 1;
    }
    if (d->npend == d->pend_cap) {
        size_t cap = d->pend_cap ? d->pend_cap * 2 : 256;
        pending_t *np = realloc(d->pend, cap * sizeof *np);
        if (!np)
            abort();
        d->pend = np;
        d->pend_cap = cap;
    }
}

/* Queues a change (caller holds pend_lock); one already pending for the key is replaced: only
   the last change of a key reaches LMDB anyway. Takes p.key. */
static void pend_add_locked(shoal_durable_t *d, pending_t p)
{
    pend_reserve(d);
    size_t *slot = pend_slot(d, p.store, p.key, p.klen);
    if (*slot) {
        free(d->pend[*slot - 1].key);
        d->pend[*slot - 1] = p;
    } else {
        d->pend[d->npend++] = p;
        *slot = d->npend;
    }
}

/* Empties the queue and its index without freeing the changes (caller holds pend_lock). */
static void pend_reset_locked(shoal_durable_t *d)
{
    d->pend = NULL;
    d->npend = d->pend_cap = 0;
    free(d->pend_idx);
    d->pend_idx = NULL;
    d->pend_idx_cap = 0;
}

typedef struct {
    pending_t *p;
    size_t n;
} batch_t;

static int batch_body(shoal_durable_t *d, MDB_txn *txn, void *arg)
{
    (void)d;
    batch_t *b = arg;
    for (size_t i = 0; i < b->n; i++) {
        pending_t *p = &b->p[i];
        int rc = put_or_del(txn, p->store->dbi, p->key, p->klen, p->key + p->klen, p->len, p->del);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Puts a batch that failed back in front of the changes queued since (caller holds txn_lock):
   they commit together, a change queued since replacing the batch's change of the same key, so
   a later change of a key still wins and the queue keeps one change per key. Returns the delay
   before the next attempt. */
static uint32_t requeue_locked(shoal_durable_t *d, batch_t *b)
{
    pthread_mutex_lock(&d->pend_lock);
    d->retry_ms = !d->retry_ms                     ? RETRY_MIN_MS
                  : d->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS
                                                   : d->retry_ms * 2;
    uint32_t wait_ms = d->retry_ms > d->s.write_behind_ms ? d->retry_ms : d->s.write_behind_ms;
    pending_t *since = d->pend;
    size_t n_since = d->npend;
    pend_reset_locked(d);
    for (size_t i = 0; i < b->n; i++)
        pend_add_locked(d, b->p[i]);
    for (size_t i = 0; i < n_since; i++)
        pend_add_locked(d, since[i]);
    free(b->p);
    free(since);
    b->p = NULL;
    b->n = 0;
    pthread_mutex_unlock(&d->pend_lock);
    return wait_ms;
}

/* Commits every pending write-behind change in one transaction. Caller holds txn_lock, which
   also keeps a batch from being between the queue and LMDB while someone else flushes. A batch
   that fails is kept for a retry (see RETRY_MIN_MS) unless this is the last flush (`final`,
   on close), where it is lost and counted. */
static void flush_locked(shoal_durable_t *d, bool final)
{
    pthread_mutex_lock(&d->pend_lock);
    batch_t b = {d->pend, d->npend};
    pend_reset_locked(d);
    pthread_mutex_unlock(&d->pend_lock);
    if (b.n == 0) {
        free(b.p);
        return;
    }
    if (write_txn(d, batch_body, &b, "write-behind commit") < 0) {
        if (d->full)
            snprintf(d->full_role, sizeof d->full_role, "%s", b.p[0].store->role);
        if (!final) {
            d->stats.retries++;
            size_t n = b.n;
            uint32_t wait_ms = requeue_locked(d, &b);
            shoal_warning("durable %s: %zu write-behind changes kept in memory, committing them "
                          "again in %u ms",
                          d->dir, n, wait_ms);
            return;
        }
        d->stats.failures += b.n;
        shoal_error("durable %s: %zu acknowledged write-behind changes were lost", d->dir, b.n);
    } else {
        pthread_mutex_lock(&d->pend_lock);
        if (d->retry_ms)
            shoal_info("durable %s: write-behind commits work again (%zu changes committed)",
                       d->dir, b.n);
        d->retry_ms = 0;
        pthread_mutex_unlock(&d->pend_lock);
        for (size_t i = 0; i < b.n; i++) {
            if (b.p[i].del)
                d->stats.deletes++;
            else
                d->stats.puts++;
        }
    }
    pending_free(b.p, b.n);
}

static void *write_behind_thread(void *arg)
{
    shoal_durable_t *d = arg;
    pthread_mutex_lock(&d->pend_lock);
    while (!d->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint32_t wait_ms = d->retry_ms;
        if (wait_ms < d->s.write_behind_ms)
            wait_ms = d->s.write_behind_ms;
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)wait_ms * 1000000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&d->pend_cond, &d->pend_lock, &ts);
        if (d->stopping)
            break;
        if (d->npend == 0)
            continue;
        pthread_mutex_unlock(&d->pend_lock);
        pthread_mutex_lock(&d->txn_lock);
        flush_locked(d, false);
        pthread_mutex_unlock(&d->txn_lock);
        pthread_mutex_lock(&d->pend_lock);
    }
    pthread_mutex_unlock(&d->pend_lock);
    return NULL;
}

static void st_store(void *ctx, const char *key, size_t klen, const void *data, size_t len,
                     shoal_store_done_fn *done, void *done_arg)
{
    durable_store_t *st = ctx;
    shoal_durable_t *d = st->d;
    int status = 0;
    if (!key || !key_ok(d, klen)) {
        pthread_mutex_lock(&d->txn_lock);
        fail_locked(d, "role '%s': a key of %zu bytes cannot be stored (1 to %zu bytes)", st->role,
                    klen, d->max_key);
        d->stats.failures++;
        pthread_mutex_unlock(&d->txn_lock);
        status = SHOAL_ESTORE;
    } else if (d->s.write_behind_ms > 0) {
        pending_t p = {st, malloc(klen + (data ? len : 0) + 1), klen, data ? len : 0, !data};
        if (!p.key)
            abort();
        memcpy(p.key, key, klen);
        if (data && len)
            memcpy(p.key + klen, data, len);
        pthread_mutex_lock(&d->pend_lock);
        pend_add_locked(d, p);
        pthread_mutex_unlock(&d->pend_lock);
    } else {
        one_write_t w = {st, key, klen, data ? data : NULL, data ? len : 0};
        pthread_mutex_lock(&d->txn_lock);
        status = write_txn(d, one_write_body, &w, "write");
        if (status < 0 && d->full)
            snprintf(d->full_role, sizeof d->full_role, "%s", st->role);
        if (status < 0)
            d->stats.failures++;
        else if (data)
            d->stats.puts++;
        else
            d->stats.deletes++;
        pthread_mutex_unlock(&d->txn_lock);
    }
    if (done)
        done(done_arg, status);
}

/* ---------------------------------------------------------------------------------------------
 * Load: entries are copied out in chunks, so each() runs with no transaction open (it may call
   store(), which takes the lock) and memory stays bounded for large stores.
 */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
} chunk_t;

static void chunk_add(chunk_t *c, const MDB_val *k, const MDB_val *v)
{
    size_t need = 2 * sizeof(size_t) + k->mv_size + v->mv_size;
    if (c->len + need > c->cap) {
        size_t cap = c->cap ? c->cap : 64 * 1024;
        while (cap < c->len + need)
            cap *= 2;
        uint8_t *nb = realloc(c->buf, cap);
        if (!nb)
            abort();
        c->buf = nb;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, &k->mv_size, sizeof(size_t));
    memcpy(c->buf + c->len + sizeof(size_t), &v->mv_size, sizeof(size_t));
    c->len += 2 * sizeof(size_t);
    memcpy(c->buf + c->len, k->mv_data, k->mv_size);
    c->len += k->mv_size;
    if (v->mv_size)
        memcpy(c->buf + c->len, v->mv_data, v->mv_size);
    c->len += v->mv_size;
}

static int st_load(void *ctx, shoal_store_each_fn *each, void *each_arg)
{
    durable_store_t *st = ctx;
    shoal_durable_t *d = st->d;
    chunk_t c = {0};
    uint8_t *last = NULL;
    size_t last_len = 0;
    int status = 0;
    for (;;) {
        c.len = 0;
        bool more = false;
        pthread_mutex_lock(&d->txn_lock);
        flush_locked(d, false);
        MDB_txn *txn;
        MDB_cursor *cur;
        int rc = txn_begin(d, MDB_RDONLY, &txn);
        if (rc == 0) {
            rc = mdb_cursor_open(txn, st->dbi, &cur);
            if (rc != 0)
                mdb_txn_abort(txn);
        }
        if (rc != 0) {
            fail_locked(d, "role '%s': load: %s", st->role, mdb_strerror(rc));
            pthread_mutex_unlock(&d->txn_lock);
            status = SHOAL_ESTORE;
            break;
        }
        MDB_val k = {last_len, last}, v;
        rc = last ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE)
                  : mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        if (rc == 0 && last && k.mv_size == last_len && memcmp(k.mv_data, last, last_len) == 0)
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        while (rc == 0) {
            chunk_add(&c, &k, &v);
            if (c.len >= LOAD_CHUNK) {
                more = true;
                break;
            }
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
        mdb_cursor_close(cur);
        mdb_txn_abort(txn);
        if (rc != 0 && rc != MDB_NOTFOUND) {
            fail_locked(d, "role '%s': load: %s", st->role, mdb_strerror(rc));
            status = SHOAL_ESTORE;
        }
        pthread_mutex_unlock(&d->txn_lock);
        /* hand the chunk over, remembering its last key to continue after it */
        size_t off = 0;
        const uint8_t *lastk = NULL;
        size_t lastk_len = 0;
        while (off < c.len) {
            size_t kl, vl;
            memcpy(&kl, c.buf + off, sizeof kl);
            memcpy(&vl, c.buf + off + sizeof kl, sizeof vl);
            off += 2 * sizeof(size_t);
            const uint8_t *kp = c.buf + off;
            each(each_arg, (const char *)kp, kl, kp + kl, vl);
            lastk = kp;
            lastk_len = kl;
            off += kl + vl;
        }
        if (status < 0 || !more || !lastk)
            break;
        uint8_t *nl = realloc(last, lastk_len);
        if (!nl)
            abort();
        last = nl;
        memcpy(last, lastk, lastk_len);
        last_len = lastk_len;
    }
    free(last);
    free(c.buf);
    return status;
}

static void st_close(void *ctx)
{
    /* the store belongs to the environment; a replicator letting go of it only flushes */
    durable_store_t *st = ctx;
    pthread_mutex_lock(&st->d->txn_lock);
    flush_locked(st->d, false);
    pthread_mutex_unlock(&st->d->txn_lock);
}

/* ---------------------------------------------------------------------------------------------
 * Format
 */
typedef enum { FMT_OK = 0, FMT_FOREIGN, FMT_NEWER, FMT_BAD } fmt_t;

/* Reads meta/format; *version gets the number for FMT_NEWER. */
static fmt_t read_format(MDB_txn *txn, int *version, int *lmdb_rc)
{
    MDB_dbi meta;
    *lmdb_rc = mdb_dbi_open(txn, META_DB, 0, &meta);
    if (*lmdb_rc == MDB_NOTFOUND || *lmdb_rc == MDB_INCOMPATIBLE) {
        *lmdb_rc = 0;
        return FMT_FOREIGN;
    }
    if (*lmdb_rc != 0)
        return FMT_BAD;
    MDB_val k = {strlen(FORMAT_KEY), FORMAT_KEY}, v;
    *lmdb_rc = mdb_get(txn, meta, &k, &v);
    if (*lmdb_rc == MDB_NOTFOUND) {
        *lmdb_rc = 0;
        return FMT_FOREIGN;
    }
    if (*lmdb_rc != 0)
        return FMT_BAD;
    size_t stem = strlen(FORMAT_STEM);
    if (v.mv_size <= stem || v.mv_size > stem + 9 || memcmp(v.mv_data, FORMAT_STEM, stem) != 0)
        return FMT_FOREIGN;
    int n = 0;
    for (size_t i = stem; i < v.mv_size; i++) {
        char ch = ((const char *)v.mv_data)[i];
        if (ch < '0' || ch > '9')
            return FMT_FOREIGN;
        n = n * 10 + (ch - '0');
    }
    *version = n;
    if (n > SHOAL_DURABLE_FORMAT_VERSION)
        return FMT_NEWER;
    if (n != SHOAL_DURABLE_FORMAT_VERSION)
        return FMT_FOREIGN;
    return FMT_OK;
}

static bool env_exists(const char *dir)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    return stat(path, &st) == 0;
}

/* True, with the reason in msg, when dir's data.mdb is too short to be an environment (see
   MIN_DATA_BYTES); false when it is long enough or absent. */
static bool data_too_short(const char *dir, char *msg, size_t msglen)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size >= MIN_DATA_BYTES)
        return false;
    snprintf(msg, msglen,
             "the store is corrupt (data.mdb is %lld bytes, too short to hold "
             "LMDB's two meta pages)",
             (long long)st.st_size);
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * The check, in a child process
 */
typedef enum { CHK_OK = 0, CHK_FOREIGN, CHK_NEWER, CHK_CORRUPT, CHK_FAILED } chk_t;

/* What to do when the directory cannot be created or opened for a reason other than its
   content (errno values; LMDB passes them through). NULL when the files may be at fault. */
static const char *access_hint(int rc)
{
    switch (rc) {
    case EACCES:
    case EPERM:
        return "no permission: the user running the node must be able to enter, read and write "
               "the directory and its files";
    case EROFS:
        return "the file system is read-only: the node needs a writable directory";
    case ENOTDIR:
    case EEXIST:
        return "the path (or a parent) is not a directory: give a directory, created if missing";
    case ENOSPC:
    case EDQUOT:
        return "no space left: free some, or use another file system";
    default:
        return NULL;
    }
}

static void child_report(int fd, chk_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void child_report(int fd, chk_t kind, const char *fmt, ...)
{
    char msg[600];
    msg[0] = (char)('0' + kind);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg + 1, sizeof msg - 1, fmt, ap);
    va_end(ap);
    size_t len = 1 + (n < 0 ? 0 : (size_t)n >= sizeof msg - 1 ? sizeof msg - 2 : (size_t)n);
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, msg + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

static volatile uint64_t check_sink;

/* Child: reads everything. A corrupt file may kill it; the parent sees the signal. */
static void check_child(const char *dir, int fd)
{
    /* die of the signal itself, not through a sanitizer's or an application's handler, so the
       parent can tell corruption from other failures */
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    MDB_env *env;
    int rc = mdb_env_create(&env);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(env, MAX_DBS);
    if (rc == 0)
        rc = mdb_env_open(env, dir, MDB_RDONLY | MDB_NOTLS, 0600);
    if (rc != 0) {
        const char *hint = access_hint(rc);
        child_report(fd,
                     rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
                             rc == MDB_PAGE_NOTFOUND || rc == ENOENT
                         ? CHK_CORRUPT
                         : CHK_FAILED,
                     "LMDB cannot open it: %s%s%s", mdb_strerror(rc), hint ? "; " : "",
                     hint ? hint : "");
        return;
    }
    MDB_txn *txn;
    rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        child_report(fd, CHK_CORRUPT, "cannot read it: %s", mdb_strerror(rc));
        return;
    }
    int version = 0, lrc = 0;
    fmt_t f = read_format(txn, &version, &lrc);
    if (f == FMT_FOREIGN) {
        child_report(fd, CHK_FOREIGN, "not a Shoal store (foreign LMDB file)");
        return;
    }
    if (f == FMT_NEWER) {
        child_report(fd, CHK_NEWER, "newer format %d, this build reads %d", version,
                     SHOAL_DURABLE_FORMAT_VERSION);
        return;
    }
    if (f == FMT_BAD) {
        child_report(fd, CHK_CORRUPT, "the format record does not read: %s", mdb_strerror(lrc));
        return;
    }
    MDB_cursor *names;
    MDB_dbi main_db;
    rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc == 0)
        rc = mdb_cursor_open(txn, main_db, &names);
    if (rc != 0) {
        child_report(fd, CHK_CORRUPT, "the main database does not read: %s", mdb_strerror(rc));
        return;
    }
    MDB_val nk, nv;
    uint64_t sum = 0, entries = 0;
    while ((rc = mdb_cursor_get(names, &nk, &nv, MDB_NEXT)) == 0) {
        char name[512];
        if (nk.mv_size == 0 || nk.mv_size >= sizeof name || memchr(nk.mv_data, 0, nk.mv_size)) {
            child_report(fd, CHK_CORRUPT, "a database has a malformed name (%zu bytes)",
                         nk.mv_size);
            return;
        }
        memcpy(name, nk.mv_data, nk.mv_size);
        name[nk.mv_size] = 0;
        MDB_dbi dbi;
        rc = mdb_dbi_open(txn, name, 0, &dbi);
        if (rc != 0) {
            child_report(fd, CHK_CORRUPT, "database '%s' does not open: %s", name,
                         mdb_strerror(rc));
            return;
        }
        MDB_cursor *cur;
        rc = mdb_cursor_open(txn, dbi, &cur);
        MDB_val k, v;
        while (rc == 0 && (rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
            const uint8_t *p = v.mv_data;
            for (size_t i = 0; i < v.mv_size; i += 512) /* touch every page of the value */
                sum += p[i];
            if (v.mv_size)
                sum += p[v.mv_size - 1];
            if (k.mv_size)
                sum += ((const uint8_t *)k.mv_data)[k.mv_size - 1];
            entries++;
        }
        if (rc != MDB_NOTFOUND) {
            child_report(fd, CHK_CORRUPT, "database '%s' does not read: %s", name,
                         mdb_strerror(rc));
            return;
        }
        mdb_cursor_close(cur);
    }
    if (rc != MDB_NOTFOUND) {
        child_report(fd, CHK_CORRUPT, "the main database does not read: %s", mdb_strerror(rc));
        return;
    }
    check_sink = sum;
    child_report(fd, CHK_OK, "%" PRIu64 " entries read", entries);
    /* no cleanup: the process ends */
}

/* Runs the check; msg gets the reason. */
static chk_t check_run(const char *dir, uint32_t timeout_ms, char *msg, size_t msglen)
{
    msg[0] = 0;
    if (!env_exists(dir))
        return CHK_OK;
    if (data_too_short(dir, msg, msglen))
        return CHK_CORRUPT;
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(msg, msglen, "cannot run the check: pipe: %s", strerror(errno));
        return CHK_FAILED;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(msg, msglen, "cannot run the check: fork: %s", strerror(errno));
        return CHK_FAILED;
    }
    if (pid == 0) {
        close(fds[0]);
        check_child(dir, fds[1]);
        _exit(0);
    }
    close(fds[1]);
    char buf[600];
    size_t got = 0;
    bool timed_out = false;
    int64_t deadline = zclock_mono() + (timeout_ms ? timeout_ms : 60000);
    for (;;) {
        int64_t left = deadline - zclock_mono();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int pr = poll(&pfd, 1, (int)(left > 1000 ? 1000 : left));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            continue;
        ssize_t r = read(fds[0], buf + got, sizeof buf - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got >= sizeof buf - 1)
            break;
    }
    close(fds[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
    }
    buf[got] = 0;
    if (timed_out) {
        snprintf(msg, msglen, "the store is corrupt (the check did not finish in %u ms)",
                 timeout_ms);
        return CHK_CORRUPT;
    }
    if (WIFSIGNALED(wst)) {
        snprintf(msg, msglen, "the store is corrupt (the check died of signal %d)", WTERMSIG(wst));
        return CHK_CORRUPT;
    }
    if (got < 1 || buf[0] < '0' || buf[0] > '0' + CHK_FAILED) {
        snprintf(msg, msglen, "the store is corrupt (the check exited with status %d)",
                 WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
        return CHK_CORRUPT;
    }
    chk_t kind = (chk_t)(buf[0] - '0');
    if (kind == CHK_CORRUPT)
        snprintf(msg, msglen, "the store is corrupt (%s)", buf + 1);
    else
        snprintf(msg, msglen, "%s", buf + 1);
    return kind;
}

int shoal_durable_check(const char *dir, char *err, size_t errlen)
{
    if (!dir || !*dir) {
        set_err(err, errlen, "durable check: no directory given");
        return SHOAL_EINVAL;
    }
    char msg[700];
    chk_t k = check_run(dir, 60000, msg, sizeof msg);
    set_err(err, errlen, "%s: %s", dir, msg);
    switch (k) {
    case CHK_OK:
        return 0;
    case CHK_NEWER:
        return SHOAL_EVERSION;
    case CHK_FAILED:
        return SHOAL_ESTORE;
    default:
        return SHOAL_EDECODE;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Open and close
 */
static int mkdir_p(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return ENAMETOOLONG;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return errno;
        *p = '/';
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return errno;
    return 0;
}

/* Moves a corrupt directory aside to <dir>.corrupt-<unix time>[-n]. */
static int move_aside(const char *dir, char *to, size_t tolen)
{
    long now = (long)time(NULL);
    for (int n = 0; n < 100; n++) {
        if (n == 0)
            snprintf(to, tolen, "%s.corrupt-%ld", dir, now);
        else
            snprintf(to, tolen, "%s.corrupt-%ld-%d", dir, now, n);
        struct stat st;
        if (stat(to, &st) == 0)
            continue;
        return rename(dir, to) == 0 ? 0 : errno;
    }
    return EEXIST;
}

/* The pid the lock's holder wrote into the lock file; 0 when there is none (yet). */
static long lock_holder(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *end;
    long pid = strtol(buf, &end, 10);
    return pid > 0 && (*end == '\n' || *end == 0) ? pid : 0;
}

/* Creates dir if missing and locks it for this open: an exclusive open file description lock
   (F_OFD_SETLK) on the whole of <dir>/shoal.lock. Such a lock belongs to this open of the file,
   not to the process, so it refuses a second open in this process as well as in another (tests
   and embedders run several nodes in one process), and the kernel releases it when the process
   dies however it dies: a node restarted after SIGKILL finds nothing stale. Kernels before 3.15
   lack OFD locks; flock has the same scope there. The file then gets the holder's pid, for the
   message the next opener prints; it is never removed (unlinking a lock file races with the
   next opener taking it). O_CLOEXEC: a program the application execs must not keep the lock
   after this process dies (a child forked without exec, such as the check's, shares it until it
   exits). Returns the descriptor, or -1 with the reason in err. */
static int lock_dir(const char *dir, int *code, char *err, size_t errlen)
{
    int rc = mkdir_p(dir);
    if (rc != 0) {
        const char *hint = access_hint(rc);
        fail_with(code, SHOAL_EIO, err, errlen,
                  "durable store %s: cannot create the directory: %s%s%s", dir, strerror(rc),
                  hint ? "; " : "", hint ? hint : "");
        return -1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/" LOCK_FILE, dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        const char *hint = access_hint(e);
        fail_with(code, SHOAL_EIO, err, errlen,
                  "durable store %s: cannot open the lock file %s: %s%s%s", dir, path, strerror(e),
                  hint ? "; " : "", hint ? hint : "");
        return -1;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    rc = fcntl(fd, F_OFD_SETLK, &fl);
    if (rc != 0 && errno == EINVAL)
        rc = flock(fd, LOCK_EX | LOCK_NB);
    if (rc != 0) {
        int e = errno;
        long pid = e == EAGAIN || e == EACCES || e == EWOULDBLOCK ? lock_holder(fd) : -1;
        if (pid == (long)getpid())
            fail_with(code, SHOAL_EBUSY, err, errlen,
                      "durable store %s: the data directory is in use by process %ld, "
                      "this one (lock file %s): it is already open here; close it first, or give "
                      "this node a directory of its own",
                      dir, pid, path);
        else if (pid > 0)
            fail_with(code, SHOAL_EBUSY, err, errlen,
                      "durable store %s: the data directory is in use by process %ld "
                      "(lock file %s); one node per data directory: stop that process, or give "
                      "this node a directory of its own",
                      dir, pid, path);
        else if (pid == 0)
            fail_with(code, SHOAL_EBUSY, err, errlen,
                      "durable store %s: the data directory is in use (lock file "
                      "%s, no pid in it yet); one node per data directory",
                      dir, path);
        else
            fail_with(code, SHOAL_EIO, err, errlen, "durable store %s: cannot lock %s: %s", dir,
                      path, strerror(e));
        close(fd);
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        shoal_warning("durable store %s: cannot write this process's pid into %s: %s (the lock "
                      "holds all the same)",
                      dir, path, strerror(errno));
    return fd;
}

/* Releases lock_dir's lock (nothing for -1), emptying the file first: a pid left in it is that
   of a holder that died without closing. */
static void unlock_dir(int fd)
{
    if (fd < 0)
        return;
    if (ftruncate(fd, 0) != 0) {
        /* the old pid stays; harmless, it is read only while someone holds the lock */
    }
    close(fd);
}

static void free_durable(shoal_durable_t *d)
{
    if (d->env)
        mdb_env_close(d->env);
    unlock_dir(d->lock_fd);
    durable_store_t *st = d->stores;
    while (st) {
        durable_store_t *next = st->next;
        free(st->role);
        free(st);
        st = next;
    }
    pending_free(d->pend, d->npend);
    free(d->pend_idx);
    pthread_mutex_destroy(&d->txn_lock);
    pthread_mutex_destroy(&d->pend_lock);
    pthread_cond_destroy(&d->pend_cond);
    free(d->dir);
    free(d);
}

/* meta/node-id: read it, or make it (a new directory, or one from before identities: format 1
   stores are upgraded in place, the key is new and older builds ignore it). 32 hex digits drawn
   from getrandom: the directory's data and its identity live and die together, so a node whose
   directory is emptied or replaced joins as a new member and never answers for the old one. */
static int node_id_body(shoal_durable_t *d, MDB_txn *txn)
{
    MDB_dbi meta;
    int rc = mdb_dbi_open(txn, META_DB, MDB_CREATE, &meta);
    if (rc != 0)
        return rc;
    MDB_val k = {strlen(NODE_ID_KEY), NODE_ID_KEY}, v;
    rc = mdb_get(txn, meta, &k, &v);
    if (rc == 0 && v.mv_size == SHOAL_DURABLE_NODE_ID_LEN) {
        memcpy(d->node_id, v.mv_data, v.mv_size);
        d->node_id[v.mv_size] = 0;
        return 0;
    }
    if (rc != 0 && rc != MDB_NOTFOUND)
        return rc;
    uint8_t raw[SHOAL_DURABLE_NODE_ID_LEN / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return EIO;
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(d->node_id + 2 * i, 3, "%02x", raw[i]);
    v.mv_size = SHOAL_DURABLE_NODE_ID_LEN;
    v.mv_data = d->node_id;
    return mdb_put(txn, meta, &k, &v, 0);
}

static int init_format_body(shoal_durable_t *d, MDB_txn *txn, void *arg)
{
    int *out = arg; /* 0 ok, 1 foreign, 2 newer (version in out[1]), 3 bad (rc in out[1]) */
    int version = 0, lrc = 0;
    fmt_t f = read_format(txn, &version, &lrc);
    if (f == FMT_OK)
        return node_id_body(d, txn);
    if (f == FMT_NEWER) {
        out[0] = 2;
        out[1] = version;
        return SHOAL_EVERSION;
    }
    if (f == FMT_BAD) {
        out[0] = 3;
        out[1] = lrc;
        return SHOAL_EDECODE;
    }
    /* no format: only an empty environment (just created) is ours to initialize */
    MDB_cursor *cur;
    MDB_val k, v;
    MDB_dbi main_db;
    int rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc == 0)
        rc = mdb_cursor_open(txn, main_db, &cur);
    if (rc != 0)
        return rc;
    rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    mdb_cursor_close(cur);
    if (rc == 0) {
        out[0] = 1;
        return SHOAL_EDECODE;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    MDB_dbi meta;
    rc = mdb_dbi_open(txn, META_DB, MDB_CREATE, &meta);
    if (rc != 0)
        return rc;
    MDB_val fk = {strlen(FORMAT_KEY), FORMAT_KEY};
    MDB_val fv = {strlen(SHOAL_DURABLE_FORMAT), SHOAL_DURABLE_FORMAT};
    rc = mdb_put(txn, meta, &fk, &fv, 0);
    return rc != 0 ? rc : node_id_body(d, txn);
}

const char *shoal_durable_node_id(shoal_durable_t *d)
{
    return d && d->node_id[0] ? d->node_id : NULL;
}

/* Opens the environment in dir, whose lock (lock_fd, from lock_dir) it takes over: released by
   free_durable, on failure here too. */
static shoal_durable_t *open_env(const shoal_durable_settings_t *s, const char *dir, int lock_fd,
                                 int *code, char *err, size_t errlen)
{
    shoal_durable_t *d = xcalloc(1, sizeof *d);
    d->s = *s;
    d->s.dir = NULL;
    d->dir = xstrdup(dir);
    d->lock_fd = lock_fd;
    pthread_mutex_init(&d->txn_lock, NULL);
    pthread_mutex_init(&d->pend_lock, NULL);
    pthread_cond_init(&d->pend_cond, NULL);
    d->map_size = round_pages(s->map_size);
    if (d->s.map_max < d->map_size)
        d->s.map_max = d->map_size;
    char why[200];
    if (data_too_short(dir, why, sizeof why)) { /* also when check_on_open is false */
        fail_with(code, SHOAL_EDECODE, err, errlen, "durable store %s: %s; " WAY_OUT, dir, why);
        free_durable(d);
        return NULL;
    }
    int rc = mdb_env_create(&d->env);
    if (rc != 0) {
        d->env = NULL;
        fail_with(code, SHOAL_ESTORE, err, errlen, "durable store %s: %s", dir, mdb_strerror(rc));
        free_durable(d);
        return NULL;
    }
    mdb_env_set_maxdbs(d->env, MAX_DBS);
    mdb_env_set_mapsize(d->env, d->map_size);
    rc = mdb_env_open(d->env, dir, MDB_NOTLS | (s->nosync ? MDB_NOSYNC : 0), 0600);
    if (rc != 0) {
        if (access_hint(rc))
            fail_with(code, SHOAL_EIO, err, errlen, "durable store %s: LMDB cannot open it: %s; %s",
                      dir, mdb_strerror(rc), access_hint(rc));
        else
            fail_with(code, SHOAL_ESTORE, err, errlen,
                      "durable store %s: LMDB cannot open it: %s; if the files are "
                      "damaged, " WAY_OUT,
                      dir, mdb_strerror(rc));
        free_durable(d);
        return NULL;
    }
    MDB_envinfo info;
    if (mdb_env_info(d->env, &info) == 0)
        d->map_size = info.me_mapsize; /* an existing environment may be larger */
    d->stats.map_size = d->map_size;
    d->max_key = (size_t)mdb_env_get_maxkeysize(d->env);
    int out[2] = {0, 0};
    pthread_mutex_lock(&d->txn_lock);
    rc = write_txn(d, init_format_body, out, "initializing the format");
    pthread_mutex_unlock(&d->txn_lock);
    if (rc < 0) {
        if (out[0] == 1)
            fail_with(code, SHOAL_EDECODE, err, errlen,
                      "durable store %s: not a Shoal store (foreign LMDB file); use "
                      "another directory, or move it aside",
                      dir);
        else if (out[0] == 2)
            fail_with(code, SHOAL_EVERSION, err, errlen,
                      "durable store %s: newer format %d, this build reads %d; run a "
                      "newer build, or move it aside",
                      dir, out[1], SHOAL_DURABLE_FORMAT_VERSION);
        else if (out[0] == 3)
            fail_with(code, SHOAL_EDECODE, err, errlen,
                      "durable store %s: the format record does not read (%s); " WAY_OUT, dir,
                      mdb_strerror(out[1]));
        else
            fail_with(code, SHOAL_ESTORE, err, errlen, "durable store %s: %s", dir, d->last_error);
        free_durable(d);
        return NULL;
    }
    if (s->write_behind_ms > 0) {
        if (pthread_create(&d->thread, NULL, write_behind_thread, d) != 0) {
            fail_with(code, SHOAL_ESTORE, err, errlen,
                      "durable store %s: cannot start the write-behind thread", dir);
            free_durable(d);
            return NULL;
        }
        d->thread_started = true;
    }
    return d;
}

static shoal_durable_t *open_durable(const shoal_durable_settings_t *s, int *code, char *err,
                                     size_t errlen)
{
    set_err(err, errlen, "%s", "");
    if (!s || !s->dir || !*s->dir) {
        fail_with(code, SHOAL_EINVAL, err, errlen,
                  "durable store: no directory given (settings.dir)");
        return NULL;
    }
    if (s->map_size == 0) {
        fail_with(code, SHOAL_EINVAL, err, errlen, "durable store %s: map_size is 0", s->dir);
        return NULL;
    }
    /* without trailing slashes, so <dir>.corrupt-<time> is a sibling */
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", s->dir) >= (int)sizeof dir) {
        fail_with(code, SHOAL_EINVAL, err, errlen, "durable store: directory name too long");
        return NULL;
    }
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = 0;
    /* the lock before the check: a second opener must not read (or, resyncing, move aside) a
       directory a running node writes */
    int lock_fd = lock_dir(dir, code, err, errlen);
    if (lock_fd < 0)
        return NULL;
    if (s->check_on_open) {
        char msg[700];
        chk_t k = check_run(dir, s->check_timeout_ms, msg, sizeof msg);
        switch (k) {
        case CHK_OK:
            break;
        case CHK_FOREIGN:
            fail_with(code, SHOAL_EDECODE, err, errlen,
                      "durable store %s: %s; use another directory, or move it aside", dir, msg);
            goto refused;
        case CHK_NEWER:
            fail_with(code, SHOAL_EVERSION, err, errlen,
                      "durable store %s: %s; run a newer build, or move it aside", dir, msg);
            goto refused;
        case CHK_FAILED:
            fail_with(code, SHOAL_ESTORE, err, errlen, "durable store %s: %s", dir, msg);
            goto refused;
        case CHK_CORRUPT:
            if (s->on_corruption != SHOAL_DURABLE_RESYNC) {
                fail_with(code, SHOAL_EDECODE, err, errlen, "durable store %s: %s; " WAY_OUT, dir,
                          msg);
                goto refused;
            }
            char to[4200];
            int rc = move_aside(dir, to, sizeof to);
            if (rc != 0) {
                fail_with(code, SHOAL_EIO, err, errlen,
                          "durable store %s: %s; moving it aside failed: %s; " WAY_OUT, dir, msg,
                          strerror(rc));
                goto refused;
            }
            shoal_error("durable store %s: %s; moved to %s, starting empty (values come back from "
                        "peers)",
                        dir, msg, to);
            /* the lock file went with the directory: lock the new one before letting go */
            int fresh = lock_dir(dir, code, err, errlen);
            unlock_dir(lock_fd);
            if (fresh < 0)
                return NULL;
            lock_fd = fresh;
            break;
        }
    }
    return open_env(s, dir, lock_fd, code, err, errlen);
refused:
    unlock_dir(lock_fd);
    return NULL;
}

shoal_durable_t *shoal_durable_open(const shoal_durable_settings_t *s, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = 0;
    char why[1024] = "";
    shoal_durable_t *d = open_durable(s, err, why, sizeof why);
    if (d) {
        shoal_error_detail_clear();
        return d;
    }
    if (*err == 0) /* every failure above names its code; a forgotten one is still a failure */
        *err = SHOAL_ESTORE;
    shoal_error_detail_set(*err, "%s", why);
    return NULL;
}

void shoal_durable_close(shoal_durable_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_durable_t *d = *self_p;
    if (d->thread_started) {
        pthread_mutex_lock(&d->pend_lock);
        d->stopping = true;
        pthread_cond_signal(&d->pend_cond);
        pthread_mutex_unlock(&d->pend_lock);
        pthread_join(d->thread, NULL);
    }
    pthread_mutex_lock(&d->txn_lock);
    flush_locked(d, true);
    pthread_mutex_unlock(&d->txn_lock);
    free_durable(d);
    *self_p = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Stores, compaction, stats
 */
static int open_dbi_body(shoal_durable_t *d, MDB_txn *txn, void *arg)
{
    (void)d;
    durable_store_t *st = arg;
    char name[600];
    snprintf(name, sizeof name, ROLE_PREFIX "%s", st->role);
    return mdb_dbi_open(txn, name, MDB_CREATE, &st->dbi);
}

shoal_store_t *shoal_durable_store(shoal_durable_t *d, const char *role)
{
    if (!d)
        return NULL;
    if (!role)
        role = "";
    pthread_mutex_lock(&d->txn_lock);
    for (durable_store_t *st = d->stores; st; st = st->next)
        if (strcmp(st->role, role) == 0) {
            pthread_mutex_unlock(&d->txn_lock);
            return &st->base;
        }
    if (strlen(role) > 500) {
        fail_locked(d, "role name too long (%zu bytes)", strlen(role));
        pthread_mutex_unlock(&d->txn_lock);
        return NULL;
    }
    durable_store_t *st = xcalloc(1, sizeof *st);
    st->d = d;
    st->role = xstrdup(role);
    if (write_txn(d, open_dbi_body, st, "opening the database of a role") < 0) {
        pthread_mutex_unlock(&d->txn_lock);
        free(st->role);
        free(st);
        return NULL;
    }
    st->base.load = st_load;
    st->base.store = st_store;
    st->base.close = st_close;
    st->base.ctx = st;
    st->next = d->stores;
    d->stores = st;
    pthread_mutex_unlock(&d->txn_lock);
    return &st->base;
}

int shoal_durable_compact(shoal_durable_t *d, const char *out_dir)
{
    if (!d || !out_dir || !*out_dir)
        return SHOAL_EINVAL;
    int rc = mkdir_p(out_dir);
    pthread_mutex_lock(&d->txn_lock);
    if (rc != 0) {
        fail_locked(d, "compact: cannot create %s: %s", out_dir, strerror(rc));
        pthread_mutex_unlock(&d->txn_lock);
        return SHOAL_ESTORE;
    }
    flush_locked(d, false);
    rc = mdb_env_copy2(d->env, out_dir, MDB_CP_COMPACT);
    if (rc != 0)
        fail_locked(d, "compact into %s: %s", out_dir, mdb_strerror(rc));
    pthread_mutex_unlock(&d->txn_lock);
    return rc == 0 ? 0 : SHOAL_ESTORE;
}

int shoal_durable_set_map_max(shoal_durable_t *d, size_t map_max)
{
    if (!d)
        return SHOAL_EINVAL;
    pthread_mutex_lock(&d->txn_lock);
    int rc = 0;
    if (map_max < d->map_size) {
        rc = SHOAL_EINVAL;
    } else {
        d->s.map_max = map_max;
        shoal_info("durable %s: map_max set to %zu bytes", d->dir, map_max);
    }
    pthread_mutex_unlock(&d->txn_lock);
    return rc;
}

void shoal_durable_stats(shoal_durable_t *d, shoal_durable_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (!d)
        return;
    pthread_mutex_lock(&d->txn_lock);
    *out = d->stats;
    out->map_size = d->map_size;
    pthread_mutex_unlock(&d->txn_lock);
    pthread_mutex_lock(&d->pend_lock);
    out->pending = d->npend;
    pthread_mutex_unlock(&d->pend_lock);
}

int shoal_durable_space(shoal_durable_t *d, shoal_durable_space_t *out)
{
    if (!d || !out)
        return SHOAL_EINVAL;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&d->txn_lock);
    out->map_size = d->map_size;
    out->map_max = d->s.map_max;
    MDB_stat st;
    MDB_envinfo info;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    int rc = mdb_env_stat(d->env, &st);
    if (rc == 0)
        rc = mdb_env_info(d->env, &info);
    if (rc == 0)
        rc = txn_begin(d, MDB_RDONLY, &txn);
    /* the free list is LMDB's database 0: each entry an array of page numbers, its count
       first (what mdb_stat -f adds up) */
    if (rc == 0)
        rc = mdb_cursor_open(txn, 0, &cur);
    size_t free_pages = 0;
    MDB_val k, v;
    int crc = rc ? MDB_NOTFOUND : mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; crc == 0; crc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (v.mv_size >= sizeof(size_t))
            free_pages += *(const size_t *)v.mv_data;
    if (rc == 0 && crc != MDB_NOTFOUND)
        rc = crc;
    if (cur)
        mdb_cursor_close(cur);
    if (txn)
        mdb_txn_abort(txn);
    if (rc == 0) {
        size_t pages = (size_t)info.me_last_pgno + 1;
        out->page_size = st.ms_psize;
        out->free_pages = free_pages;
        out->high_water_bytes = pages * st.ms_psize;
        out->used_bytes = (pages > free_pages ? pages - free_pages : 0) * st.ms_psize;
    } else {
        fail_locked(d, "cannot read the store's space: %s", mdb_strerror(rc));
    }
    pthread_mutex_unlock(&d->txn_lock);
    return rc == 0 ? 0 : SHOAL_ESTORE;
}

void shoal_durable_last_error(shoal_durable_t *d, char *buf, size_t len)
{
    if (!buf || !len)
        return;
    buf[0] = 0;
    if (!d)
        return;
    pthread_mutex_lock(&d->txn_lock);
    snprintf(buf, len, "%s", d->last_error);
    pthread_mutex_unlock(&d->txn_lock);
}

/* ---------------------------------------------------------------------------------------------
 * Metrics (see ddata.h, METRICS). Read under the locks of shoal_durable_stats, so a scrape on the
 * node thread waits at most for one transaction.
 */
static void metric(shoal_buf_t *out, const char *name, const char *type, const char *help,
                   uint64_t v)
{
    shoal_metrics_family(out, name, type, help);
    shoal_buf_printf(out, "%s %" PRIu64 "\n", name, v);
}

static void durable_collect(shoal_system_t *sys, shoal_buf_t *out, void *arg)
{
    (void)sys;
    shoal_durable_t *d = arg;
    shoal_durable_stats_t st;
    shoal_durable_stats(d, &st);
    pthread_mutex_lock(&d->txn_lock);
    uint64_t ns = d->commit_ns;
    pthread_mutex_unlock(&d->txn_lock);
    metric(out, "shoal_durable_puts_total", "counter", "Changes written (committed).", st.puts);
    metric(out, "shoal_durable_deletes_total", "counter", "Deletions written (committed).",
           st.deletes);
    metric(out, "shoal_durable_commits_total", "counter", "Write transactions committed.",
           st.commits);
    shoal_metrics_family(out, "shoal_durable_commit_seconds_total", "counter",
                         "Seconds spent in committed write transactions.");
    shoal_buf_printf(out, "shoal_durable_commit_seconds_total %.9f\n", (double)ns / 1e9);
    metric(out, "shoal_durable_failures_total", "counter",
           "Changes that failed to be written or were dropped.", st.failures);
    metric(out, "shoal_durable_map_grows_total", "counter", "Times the map size doubled.",
           st.map_grows);
    metric(out, "shoal_durable_commit_retries_total", "counter",
           "Write-behind commits that failed and were kept to be committed again.", st.retries);
    metric(out, "shoal_durable_map_size_bytes", "gauge", "Current LMDB map size.",
           (uint64_t)st.map_size);
    metric(out, "shoal_durable_pending_writes", "gauge", "Write-behind changes not yet committed.",
           (uint64_t)st.pending);
    shoal_durable_space_t sp;
    if (shoal_durable_space(d, &sp) == 0) {
        metric(out, "shoal_durable_map_max_bytes", "gauge",
               "The most the LMDB map may grow to (map_max).", (uint64_t)sp.map_max);
        metric(out, "shoal_durable_used_bytes", "gauge",
               "Bytes of LMDB pages holding data (free pages not counted).",
               (uint64_t)sp.used_bytes);
        metric(out, "shoal_durable_high_water_bytes", "gauge",
               "Bytes of the LMDB map touched so far (up to the last page used).",
               (uint64_t)sp.high_water_bytes);
        metric(out, "shoal_durable_free_pages", "gauge",
               "LMDB pages freed by deletions, reused before the map grows.",
               (uint64_t)sp.free_pages);
    }
}

/* /health/ready's "durable" check (docs/operations.md, Readiness): a store whose writes fail for
   want of room cannot take a MAJORITY write of a durable key, so the node does not serve MAJORITY.
   Full means the last write transaction failed at map_max and none has committed since; it
   clears with the first write that commits (after shoal_durable_set_map_max, or deletions). */
static bool durable_ready(shoal_system_t *sys, shoal_buf_t *reason, void *arg)
{
    (void)sys;
    shoal_durable_t *d = arg;
    pthread_mutex_lock(&d->txn_lock);
    bool full = d->full;
    char role[sizeof d->full_role];
    snprintf(role, sizeof role, "%s", d->full_role);
    pthread_mutex_unlock(&d->txn_lock);
    if (!full)
        return true;
    shoal_durable_space_t sp;
    if (shoal_durable_space(d, &sp) < 0)
        memset(&sp, 0, sizeof sp);
    shoal_buf_printf(reason,
                     "durable store for role '%s' is full: %zu of %zu bytes used (map_max "
                     "reached; writes fail with SHOAL_ESTORE): raise map_max or compact the "
                     "store (%s)",
                     role, sp.used_bytes, sp.map_max, d->dir);
    return false;
}

int shoal_durable_metrics(shoal_durable_t *d, shoal_metrics_t *m)
{
    if (!d || !m)
        return SHOAL_EINVAL;
    int rc = shoal_metrics_add(m, durable_collect, d);
    return rc < 0 ? rc : shoal_http_ready_check(m, "durable", durable_ready, d);
}
