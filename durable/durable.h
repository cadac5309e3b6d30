/*  durable.h — Shoal's durable store: the replicator's store interface (shoal_store_t, see
    "STORAGE" in ddata.h) kept in LMDB, so durable keys survive a restart of the node.

    LAYOUT. One LMDB environment per node, in a directory (data.mdb + lock.mdb, and shoal.lock:
    see ONE PROCESS PER DIRECTORY), holding named databases:
      "meta"            key "format" = "shoal-durable 1" (exactly these bytes). Written when the
                        environment is created; an environment without it is not ours and is
                        refused, one with a higher number was written by a newer build and is
                        refused too (never guessed at, never rewritten).
      "ddata:" + role   one per replicator ("ddata:" for the default role ""): key = the ddata key
                        bytes, value = the bytes the replicator hands over (a packed
                        shoal.replicator.DataEnvelope). This module treats values as opaque bytes.
    Tools (ddata-dump) read the same layout; a change of it bumps the format number.

    WRITES. Immediate (default): every store() is one write transaction, committed (and synced,
    unless settings.nosync) before done(arg, 0) runs — on the caller's (node) thread, before
    store() returns. A failed commit gives done(arg, SHOAL_ESTORE) and a log line.
    Write-behind (settings.write_behind_ms > 0): store() records the change in memory and calls
    done(arg, 0) at once; a background thread commits everything pending every write_behind_ms in
    one transaction. This is a WINDOW OF LOSS: changes acknowledged in the last write_behind_ms
    are lost if the process dies (shoal_durable_close flushes them; a crash does not). A batch
    whose commit fails (disk full, the map at map_max, an I/O error) stays in memory and is
    committed again, with the changes queued since, after 100 ms doubling up to 10 s (never
    sooner than write_behind_ms): the window of loss lasts as long as the outage. Pending changes
    are kept one per key (a later change of a key replaces the pending one), so during an outage
    the memory they hold is bounded by the keys written, not by the number of writes. Only the
    last flush, in shoal_durable_close, drops what still fails (logged, counted in failures).
    load() and compact() flush first, so they see every acknowledged change the store could
    take. In immediate mode a failed write is reported (done(arg, SHOAL_ESTORE)), and the
    replicator writes the key again with backoff until the store takes it.

    SIZE. The map starts at settings.map_size and doubles whenever a write finds it full, up to
    settings.map_max; a write that does not fit even then fails with SHOAL_ESTORE and a message
    saying so (raise map_max, with shoal_durable_set_map_max on a running node, or free space:
    deleted keys' pages are reused). Keys are 1 to 511 bytes (LMDB's limit); others fail
    with SHOAL_ESTORE.
    ACCESS. A directory that cannot be created or opened (no permission for the user running
    the node, a read-only file system, a path that is not a directory) makes open fail with a
    message saying which of these it is; nothing is served from it.

    ONE PROCESS PER DIRECTORY. An open environment holds an exclusive lock on <dir>/shoal.lock
    (an open file description lock, F_OFD_SETLK), which holds the opener's pid. A second open of
    the directory, from another process or from this one, fails with "the data directory is in
    use by process <pid> (lock file <dir>/shoal.lock)": two nodes writing one map would mix
    their clusters' keys. The lock goes with shoal_durable_close, or with the process however it
    dies (a restart after SIGKILL opens at once). Readers that do not write take no lock:
    shoal_durable_check and ddata-dump read beside a running node.

    CORRUPTION. LMDB keeps no checksums, and reading a mangled file can kill the process with
    SIGBUS or SIGSEGV. shoal_durable_check therefore reads the whole environment in a forked
    child process (format, every database, every entry) and reports what it found; open runs it
    first unless settings.check_on_open is false. A data.mdb too short to hold LMDB's two meta
    pages (8 KiB; an empty one included) is corrupt too, checked or not. On corruption open
    either refuses (default) or, with SHOAL_DURABLE_RESYNC, renames the directory to
    <dir>.corrupt-<unix time> and starts empty: the node then gets its values back from its
    peers by gossip (values written only here are lost; the old directory is kept for salvage
    with ddata-dump --salvage). A foreign or newer environment is never moved aside: it is
    refused whatever on_corruption says.

    THREADS: the rule of ddata.h (THE THREAD RULE). Every call here is any-thread: open, close,
    shoal_durable_store, check, compact, stats, set_map_max, metrics, last_error. The store's own
    store() and load() are the replicator's, called on its node thread; done(arg, status) runs
    there, inside store() (write-behind calls it at once).
    shoal_durable_open returns NULL with *err and the words in shoal_last_error_detail(). The
   write-behind thread shares the environment under a mutex; every LMDB transaction of this process
   is taken under it, so the map can grow safely. Close an environment only after destroying the
   replicators that use its stores.

    Usage:
        shoal_durable_settings_t ds;
        shoal_durable_settings_default(&ds);
        ds.dir = "/var/lib/app/ddata";
        int err;
        shoal_durable_t *d = shoal_durable_open(&ds, &err);
        if (!d)   // the code, and in words why (the directory, LMDB's message, the way out)
            fprintf(stderr, "%s: %s\n", shoal_strerror(err), shoal_last_error_detail());
        rs.store = shoal_durable_store(d, rs.role);   // rs: shoal_replicator_settings_t
        ... shoal_replicator_new(sys, &rs, &e) ... shoal_replicator_destroy(&r) ...
        shoal_durable_close(&d);
*/
#ifndef SHOAL_DURABLE_H
#define SHOAL_DURABLE_H

#include "ddata.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* exported from libshoal.so: see "The public ABI" in ddata.h */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* The format this build writes and reads: the exact bytes of meta/format. */
#define SHOAL_DURABLE_FORMAT         "shoal-durable 1"
#define SHOAL_DURABLE_FORMAT_VERSION 1

typedef enum {
    SHOAL_DURABLE_REFUSE = 0, /* open fails, naming the way out (move aside, ddata-dump --salvage) */
    SHOAL_DURABLE_RESYNC = 1, /* move the directory aside, start empty, resync from peers */
} shoal_durable_on_corruption_t;

typedef struct {
    const char *dir;          /* the environment's directory; created if missing (required) */
    size_t map_size;          /* initial map size, 100 MiB */
    size_t map_max;           /* the map doubles on demand up to this, 8 GiB */
    uint32_t write_behind_ms; /* 0: immediate writes (default); > 0: write-behind interval */
    bool nosync;              /* MDB_NOSYNC: commits are not fsynced (tests, benchmarks), false */
    bool check_on_open;       /* run shoal_durable_check before opening, true */
    uint32_t check_timeout_ms; /* the check gives up (corrupt: loops) after this, 60 s */
    shoal_durable_on_corruption_t on_corruption; /* REFUSE */
} shoal_durable_settings_t;

void shoal_durable_settings_default(shoal_durable_settings_t *s);
/* From a configuration file (see ddata.h, CONFIGURATION FILES): dir, map_size and
   write_behind_ms from shoal/cluster/distributed-data/durable/lmdb/{dir, map-size,
   write-behind-interval} (off = immediate writes). Overwrites only what the file sets: initialize
   *out first (shoal_durable_settings_default). The directory is used as written (Akka's suffix
   for a dir ending in "ddata" is not added: one environment serves every role of the node); an
   empty one is refused. The dir string is owned by cfg. 0, or SHOAL_EINVAL with a message naming
   the key in err (*out unchanged). */
int shoal_config_durable(const shoal_config_t *cfg, shoal_durable_settings_t *out, char *err,
                         size_t errlen);

typedef struct shoal_durable shoal_durable_t;

/* Opens (creating it if needed) the environment in s->dir, locking the directory until close
   (see ONE PROCESS PER DIRECTORY: an open of a directory that is already open, in any process,
   fails naming the holder's pid). NULL on failure with *err (err may be NULL):
     SHOAL_EINVAL    no directory, map_size 0, a name too long;
     SHOAL_EBUSY     the directory is in use (by another process, or already open in this one);
     SHOAL_EIO       it cannot be created, opened or locked (permissions, a read-only file
                     system, not a directory), or moving a corrupt one aside failed;
     SHOAL_EDECODE   corrupt, or not a Shoal store (foreign LMDB file);
     SHOAL_EVERSION  written by a newer build;
     SHOAL_ESTORE    LMDB failed otherwise.
   and shoal_last_error_detail() naming the directory, what LMDB or the check said, and the way
   out ("move it aside, or open it with on_corruption = SHOAL_DURABLE_RESYNC ..."). Any thread. */
shoal_durable_t *shoal_durable_open(const shoal_durable_settings_t *s, int *err);
/* Flushes pending write-behind changes, stops the write-behind thread, closes. NULL-safe. */
void shoal_durable_close(shoal_durable_t **self_p);

/* The identity of the node that owns this directory: 32 hex digits, made at the first open and
   kept in meta/node-id (a format 1 directory from before gets one when it is opened). Give it to
   membership (shoal_cluster_settings_t.durable_id) so that the cluster knows this node across
   restarts by its data, not by its address; an emptied or replaced directory is a new node.
   Valid until d is closed. */
#define SHOAL_DURABLE_NODE_ID_LEN 32
const char *shoal_durable_node_id(shoal_durable_t *d);

/* The store of a replicator role ("" = the default replicator; NULL is taken as ""), to put in
   shoal_replicator_settings_t.store. Owned by d, valid until d is closed; the same role gives
   the same store. NULL (logged) when the database cannot be opened. */
shoal_store_t *shoal_durable_store(shoal_durable_t *d, const char *role);

/* Validates the environment in dir in a forked child process, so a corrupt file cannot kill the
   caller: opens it read-only, reads meta/format, reads every database and every entry. Returns 0
   (also for a directory without an environment yet), SHOAL_EVERSION (a newer format) or
   SHOAL_EDECODE (foreign or corrupt) with the reason in err; SHOAL_EINVAL for bad arguments,
   SHOAL_ESTORE when the check could not be run (fork or pipe failed). */
int shoal_durable_check(const char *dir, char *err, size_t errlen);

/* Raises (or lowers, not below the current map size) the cap the map grows to; takes effect
   at the next write, so failed writes the replicator retries succeed once there is room.
   0, or SHOAL_EINVAL. Any thread. */
int shoal_durable_set_map_max(shoal_durable_t *d, size_t map_max);

/* Writes a compacted copy (free pages omitted) of the environment into out_dir (created if
   missing; must not already hold a data.mdb). Pending write-behind changes are flushed first.
   Writes block meanwhile. 0 or SHOAL_ESTORE (logged; see shoal_durable_last_error). */
int shoal_durable_compact(shoal_durable_t *d, const char *out_dir);

typedef struct {
    uint64_t puts, deletes;       /* changes written (committed) */
    uint64_t commits;             /* write transactions committed */
    uint64_t failures;            /* changes that failed (SHOAL_ESTORE, or dropped write-behind) */
    uint64_t map_grows;           /* times the map doubled */
    size_t map_size;              /* current map size */
    size_t pending;               /* write-behind changes not yet committed */
    uint64_t retries;             /* write-behind commits that failed, kept to retry */
} shoal_durable_stats_t;

void shoal_durable_stats(shoal_durable_t *d, shoal_durable_stats_t *out);

/* How full the store is, to see a full map coming (shoal_durable_stats_t cannot grow: its size is
   part of the 0.2.0 ABI). A write needs pages from the free list or below the map's end; when
   neither has room at map_max it fails (SIZE above). */
typedef struct {
    size_t map_size;   /* the map's current size (it doubles on demand) */
    size_t map_max;    /* the most it may grow to (settings.map_max, shoal_durable_set_map_max) */
    size_t page_size;  /* LMDB's page size */
    size_t used_bytes; /* pages holding data: (last page used + 1 - free pages) x page size */
    size_t free_pages; /* pages freed by deletions and updates, reused before the map grows */
    size_t high_water_bytes; /* (last page used + 1) x page size: the part of the map touched */
} shoal_durable_space_t;

/* Fills *out, reading LMDB's free list in a read transaction (cost grows with the free list,
   not with the data). 0, SHOAL_EINVAL, or SHOAL_ESTORE (logged). Any thread. */
int shoal_durable_space(shoal_durable_t *d, shoal_durable_space_t *out);
/* The last failure's message ("" when none), copied into buf. */
void shoal_durable_last_error(shoal_durable_t *d, char *buf, size_t len);

/* Adds the store to a node's metrics endpoint (see ddata.h, METRICS): shoal_durable_puts_total,
   _deletes_total, _commits_total, _commit_seconds_total (time in write transactions, so
   rate(seconds)/rate(commits) is the mean commit latency), _failures_total, _map_grows_total,
   _commit_retries_total and the shoal_durable_map_size_bytes and shoal_durable_pending_writes
   gauges; and from shoal_durable_space, the gauges shoal_durable_map_max_bytes,
   shoal_durable_used_bytes, shoal_durable_high_water_bytes and shoal_durable_free_pages (alert
   on used / map_max before writes fail). Also adds /health/ready's "durable" check: not ready
   while the last write transaction failed because the map reached map_max and none has
   committed since (the reason names the role and the bytes used of map_max). Stop the endpoint
   before closing d. */
int shoal_durable_metrics(shoal_durable_t *d, shoal_metrics_t *m);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
