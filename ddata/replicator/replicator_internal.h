/*  replicator_internal.h — private to the replicator (replicator.c: keys, local operations,
    subscriptions, expiry, storage; replicator_net.c: the protocol with peers).
*/
#ifndef SHOAL_REPLICATOR_INTERNAL_H
#define SHOAL_REPLICATOR_INTERNAL_H

#include "histogram.h"
#include "internal.h"
#include "replicator.pb-c.h"

#include <stdatomic.h>

/* Message kinds of the replicator on the node's transport. */
enum {
    K_READ = 32,
    K_READ_RESULT,
    K_WRITE,
    K_WRITE_ACK,
    K_DELTA,
    K_DELTA_NACK,
    K_STATUS,
    K_BUCKETS,
    K_KEY_DIGESTS,
    K_GOSSIP,
    K_CHUNK,
    K_LAST = K_CHUNK
};

/* A failed write of a durable key is retried after STORE_RETRY_MIN_MS, doubling up to
   STORE_RETRY_MAX_MS while the store keeps failing: a full disk or a failing device gets a few
   attempts a second at first and one every 10 s during a long outage, never a busy loop. */
#define STORE_RETRY_MIN_MS 100
#define STORE_RETRY_MAX_MS 10000

/* Akka's durable.pruning-marker-time-to-live: markers of durable keys must outlive a node that
   is down with its store for a while, so they live 10 days rather than 6 hours. A store whose
   newest write is older than this may hold state whose markers have expired everywhere else. */
#define DURABLE_PRUNING_MARKER_TTL_MS (10ull * 24 * 3600 * 1000)

/* Stored envelopes carry the wall-clock time of the write as this field of DataEnvelope (a
   varint; it is only ever in the store, never on the wire to peers): the replicator appends it
   when it writes and reads it back when it loads, to tell how old a store is. */
#define STORED_AT_FIELD 6

/* Anti-entropy folds key digests into this many buckets: with 100,000 keys a differing key costs
   one bucket's key list (~400 keys), and the bucket vector is 4 KiB. */
#define N_BUCKETS 256

typedef struct {
    const shoal_node_t *removed;
    const shoal_node_t *owner;
    const shoal_node_t **seen; /* ascending by node id */
    size_t n_seen;
    bool performed;
    int64_t obsolete_at_ms; /* wall clock */
    /* performed: the owner's plan (shoal_prune_plan_t, into = owner) that every replica applies
       to state and deltas still holding the removed node; span 0 for markers from before plans
       and for values without dots, whose leftovers are dropped */
    uint64_t plan_base, plan_span;
} pruning_t;

typedef struct {
    uint64_t seq;
    shoal_crdt_t *delta;
} retained_delta_t;

typedef struct {
    const shoal_node_t *node;
    uint64_t seq;
} peer_seq_t;

typedef struct entry {
    char *key;
    size_t klen;
    const shoal_type_t *type; /* kept after deletion */
    shoal_crdt_t *value;      /* NULL when deleted */
    bool deleted;
    int64_t deleted_at_ms;             /* monotonic */
    const shoal_node_t **tomb_seen;    /* peers seen holding the tombstone */
    size_t n_tomb_seen;
    pruning_t *pruning;
    size_t n_pruning;
    shoal_nodemap_t dv; /* delta versions: origin -> last delta number applied */

    /* digest and cached encoding of the envelope's digested part, valid when !dirty */
    bool dirty;
    uint8_t digest[16];
    uint8_t contrib[16]; /* this key's contribution to its bucket (XOR) */
    bool in_bucket;
    uint32_t bucket;

    /* deltas made here (origin = this node) */
    uint64_t delta_seq;  /* last number given */
    uint64_t base_seq;   /* every peer has been sent up to this */
    retained_delta_t *deltas;
    size_t n_deltas, cap_deltas;
    peer_seq_t *sent; /* per peer, when above base_seq */
    size_t n_sent, cap_sent;
    bool in_delta_set;

    /* subscriptions */
    bool changed;
    bool notified;
    uint8_t notified_digest[16];

    uint64_t bytes;         /* the value's encoded size, as last measured (LIMITS, ddata.h) */
    int64_t last_access_ms; /* repl_entry_touch: kept only when some key expires */
    bool durable;
    uint64_t store_seq; /* the last write of this key to the store (r->store_seq numbering) */
} entry_t;

typedef struct {
    const shoal_node_t *node;
    bool counted;
    bool voter; /* its durable identity is in the kept membership (see shoal_replicator_set_voters) */
    uint64_t age;
    /* Pushes' age as this node's clock minus the sender's stamp: the smallest seen (the clocks'
       offset plus the fastest delivery) is the baseline a push's lateness is measured against,
       so that a sender whose wall clock is a minute behind is not taken for a minute late. */
    int64_t push_lag_min;
    bool push_lag_known;
    uint8_t push_stale_run; /* stale pushes in a row: past a few, the baseline is reset (a clock
                               stepped) */
    /* The clock offset estimate (shoal_node_clock_skew_seconds, repl_clock_skew_ms): the
       smallest push lag (as push_lag_min) in the current window of r->skew_window_ms and in the
       last completed one. Not push_lag_min itself: a running minimum never rises, so a sender
       whose clock falls behind would keep showing its old offset; a windowed one follows it
       within two windows. */
    int64_t skew_window_start_ms; /* monotonic (shoal_now_ms): the current window's start */
    int64_t skew_cur_ms, skew_last_ms;
    bool skew_cur_known, skew_last_known;
    int64_t skew_probe_ms; /* monotonic: the last stamped message sent to it (or when it was
                              added): a probe push is due half a window later (skew_probe) */
} peer_t;

typedef struct sub {
    int id;
    char *pattern;
    size_t plen;
    bool prefix;
    bool initial; /* new: to be told the current values at the next flush */
    shoal_changed_fn *fn;
    void *arg;
    struct sub *next;
} sub_t;

typedef enum { OP_READ = 1, OP_WRITE = 2 } op_kind_t;

typedef struct op {
    struct shoal_replicator *r;
    uint64_t req;
    op_kind_t kind;
    char *key;
    const shoal_type_t *type; /* read: expected type or NULL */
    int needed;               /* answers still needed from peers */
    int voters_needed;        /* of those, answers still needed from voters (kept membership) */
    int catch_up_extra; /* read: of those, asked beyond the usual while this replica caught up */
    int timer;       /* repeating: resends, and the deadline on its last tick */
    uint32_t ticks_left;
    const shoal_node_t **targets; /* who was asked (primaries first) */
    size_t n_targets, n_sent;
    bool *answered;
    /* read: the merged answer */
    struct entry *result;
    uint8_t (*reply_digest)[16]; /* read: digest of each answer's value */
    /* write: what to send (full state encoding, and the delta if any) */
    shoal_buf_t full;
    shoal_buf_t delta;
    uint64_t delta_seq;
    bool is_delete;
    bool local_stored; /* the local store has it (durable keys) */
    int local_status;
    bool peers_done;
    shoal_get_done_fn *get_done;
    shoal_update_done_fn *update_done;
    void *arg;
    /* kept across uses in the replicator's pool of finished ops (op_new, op_unlink_free) */
    size_t targets_cap; /* room in targets and answered */
    size_t key_cap;     /* room in key (0: key not ours to reuse) */
    struct op *next_free;
    int64_t started_us; /* for the latency histograms (r->lat) */
    shoal_level_t level;
} op_t;

typedef struct {
    uint64_t transfer;
    const shoal_node_t *from;
    uint32_t total, got, kind;
    bool compressed;
    uint64_t size;
    shoal_buf_t data;
    int64_t started_ms;
} reassembly_t;

/* Latency of reads and writes by consistency level (shoal_level_t, LOCAL..ALL), for the
   shoal_replicator_{read,write}_seconds histograms of /metrics. */
typedef struct {
    shoal_hist_t read[4], write[4];
} repl_latency_t;

struct shoal_replicator {
    shoal_system_t *sys;
    shoal_replicator_settings_t s;
    char *role;
    const shoal_node_t *self;
    int64_t skew_window_ms; /* the clock offset estimate's window (REPL_SKEW_WINDOW_MS; tests
                               shorten it) */

    shoal_hmap_t entries; /* key -> entry_t */
    shoal_hmap_t delta_keys; /* key -> entry_t, entries with deltas not yet sent to everyone */
    shoal_hmap_t changed_keys; /* key -> entry_t, waiting for notification */
    uint8_t buckets[N_BUCKETS][16];
    size_t n_dirty;

    peer_t *peers;
    size_t n_peers, cap_peers;
    size_t delta_cursor;

    /* removed nodes, for pruning */
    struct removed_node {
        const shoal_node_t *node;
        int64_t at_ms;
    } *removed;
    size_t n_removed, cap_removed;

    /* names of collected tombstones: refused until the time given */
    shoal_hmap_t collected; /* key -> (void *)(intptr_t) refuse_until_ms */

    sub_t *subs;
    int next_sub_id;

    shoal_hmap_t ops_by_req; /* request id (8 bytes) -> op_t */
    op_t *op_pool;          /* finished ops kept with their buffers, for the next ones */
    size_t n_op_pool;
    uint64_t next_req;
    size_t n_ops;

    reassembly_t *reasm;
    size_t n_reasm, cap_reasm;
    uint64_t next_transfer;

    bool loading;
    /* The store's load failed (corrupt, unreadable): the replicator is stopped, as Akka stops
       one whose load fails. `loading` stays true, so it answers no peer and sends no gossip
       (serving as if empty would lose the data it could not read, and gossip would spread the
       loss); every operation on it fails with SHOAL_ESTORE, counted in stats.store_failures. */
    bool load_failed;
    bool gated;      /* a cluster decides whether MAJORITY/ALL may run (quorum gate) */
    size_t n_voters; /* the kept membership's size (0: no voters, majorities as before) */
    bool self_votes; /* this node's identity is one of them */
    bool quorum_ok;  /* gated: the node is a full member */
    struct pending_call {
        void (*fn)(struct shoal_replicator *r, void *arg);
        void *arg;
        struct pending_call *next;
    } *pending_head, *pending_tail;

    /* durable keys whose last write to the store failed (key -> (void *)1), rewritten with
       their current state by the retry timer until the store takes them */
    shoal_hmap_t unstored;
    uint64_t store_seq;        /* numbers every write to the store */
    uint32_t retry_backoff_ms; /* the next retry's delay */
    bool retrying;             /* a retry pass runs: it reschedules itself */
    bool store_outage;         /* a key has failed since the store last held everything */
    uint64_t outage_retries;   /* retries in this outage, for the recovery log */

    /* Loaded from a store older than the durable marker TTL: its values may hold removed
       nodes' parts whose pruning markers have expired on every other node, so nothing of them
       is sent to peers until this node has synced (received a peer's side of an anti-entropy
       exchange, see repl_synced). */
    bool unsynced;
    /* CATCHING UP (the rule and its argument: CATCHING UP in ddata.h). The gate just opened (the
       node became a full member: a new node, or a restarted one): this replica may lack writes a
       majority acknowledged before it counted, e.g. while the cluster was smaller. Until it has
       synced with enough of its older counted peers (caught_from; see repl_catch_up_done) its
       own copy does not count toward MAJORITY reads, and it does not answer peers' reads. */
    bool catching_up;
    uint64_t self_age; /* this node's up-number (shoal_replicator_set_age); 0: unknown */
    const shoal_node_t **caught_from;
    size_t n_caught_from;
    struct deferred_read {
        const shoal_node_t *from;
        uint64_t req;
        char *key;
    } *deferred; /* peers' reads that arrived while catching up, answered after */
    size_t n_deferred;
    int t_catch_up; /* the first catch-up round, on the loop turn after the gate opened */
    bool admitting; /* the merge in progress is a write to acknowledge: run the type's admit */
    uint64_t durable_marker_ttl_ms;

    int t_gossip, t_delta, t_notify, t_prune, t_expire, t_load, t_retry;
    int64_t notify_epoch; /* the notify timer's grid: armed only while there is news (repl_notify_arm) */
    /* operations refused by the quorum gate, completed on the next loop turn (t_refused): a
       caller that retries from its completion must not recurse inside its own call */
    struct refusal {
        struct refusal *next;
        char *key;
        shoal_get_done_fn *get_done;
        shoal_update_done_fn *update_done;
        void *arg;
    } *refused_head;
    int t_refused;
    uint64_t prng;
    shoal_replicator_stats_t stats;
    /* LIMITS (ddata.h): caps set from any thread, the bytes measured, refusals */
    _Atomic uint64_t max_keys, max_bytes;
    uint64_t bytes;
    uint64_t limit_refused_keys, limit_refused_bytes;
    bool destroying;
    struct client_watch *watches; /* clients' subscriptions (replicator_client.c) */
    repl_latency_t *lat;          /* one block allocated with the replicator (untouched pages cost
                                     nothing), recorded on the node thread */
};

/* replicator.c */
entry_t *repl_entry(shoal_replicator_t *r, const char *key, size_t klen);
entry_t *repl_entry_create(shoal_replicator_t *r, const char *key, size_t klen,
                           const shoal_type_t *type);
void repl_notify_arm(shoal_replicator_t *r);
void repl_entry_changed(shoal_replicator_t *r, entry_t *e);
/* Marks a key used now, for expiry (expire-keys-after-inactivity). Only expiry reads the mark,
   so without expiring keys the clock is not read: an update then costs no clock call. */
static inline void repl_entry_touch(const shoal_replicator_t *r, entry_t *e)
{
    if (r->s.n_expire_keys)
        e->last_access_ms = shoal_now_ms();
}
void repl_entry_drop(shoal_replicator_t *r, entry_t *e);
/* Stores a durable entry (no-op for others); done(arg, status) when stored. A failure is
   counted and the key retried with backoff (its current state) until the store takes it. */
void repl_store_entry(shoal_replicator_t *r, entry_t *e, shoal_store_done_fn *done, void *arg);
/* Decodes one stored entry (the load path; also what the fuzz target feeds): merges it into the
   replicator and reports its write time (*stored_at_ms, 0 when it carries none). 0, or an error
   with nothing changed. */
int repl_load_entry(shoal_replicator_t *r, const char *key, size_t klen, const uint8_t *data,
                    size_t len, int64_t *stored_at_ms);
/* The write time a stored envelope carries: 1 and *ms when present, 0 when absent,
   SHOAL_EDECODE when the bytes are not a well-formed protobuf message. */
int repl_stored_at(const uint8_t *data, size_t len, int64_t *ms);
/* The node has received a peer's side of an anti-entropy exchange: an unsynced replicator
   (see `unsynced`) may share its data again. */
void repl_synced(shoal_replicator_t *r, const shoal_node_t *peer);
/* THE CATCH-UP RULE (CATCHING UP in ddata.h): true once the peers synced with (caught_from)
   include a majority, floor(p/2) + 1, of every age-prefix of p of the counted peers older than
   this node (all counted peers when its age is unknown). */
bool repl_catch_up_done(const shoal_replicator_t *r);
/* How many answers a MAJORITY read needs from peers that are not catching up while this replica
   is: N - (N/2 + 1) + 1 of N counted nodes (itself included), the reader's own copy not counting,
   so that they meet every majority acknowledged before, even one that counted this node's
   previous life and whose copy is gone. */
size_t repl_catch_up_need(const shoal_replicator_t *r);
void repl_catch_up_check(shoal_replicator_t *r);
void repl_catch_up_round(shoal_replicator_t *r);
/* This replica has caught up: its own reads under way need no more answers than usual (their
   merged value holds its own copy, which now counts); those that have enough complete. */
void repl_catch_up_relieve_reads(shoal_replicator_t *r);
/* Answers (answer = true, once caught up) or drops the reads held while catching up. */
void repl_answer_deferred_reads(shoal_replicator_t *r, bool answer);
void repl_refresh_digest(shoal_replicator_t *r, entry_t *e);
void repl_refresh_all_digests(shoal_replicator_t *r);
void repl_root_digest(shoal_replicator_t *r, uint8_t out[16]);
bool repl_is_durable(const shoal_replicator_t *r, const char *key, size_t klen);
uint64_t repl_random(shoal_replicator_t *r);
size_t repl_counted_nodes(const shoal_replicator_t *r);
peer_t *repl_peer(shoal_replicator_t *r, const shoal_node_t *node);
/* Voters' answers that MAJORITY and ALL need beside this node's own (0 without voters). */
int repl_voters_needed(const shoal_replicator_t *r, const shoal_consistency_t *c);
/* Counted peers that are voters: how many voter answers can be had at most. */
size_t repl_voter_peers(const shoal_replicator_t *r);

/* Envelopes: encode an entry's envelope (full state) into a protobuf message whose byte fields
   point into `scratch` / the entry; free with repl_envelope_pb_free. */
void repl_envelope_to_pb(shoal_replicator_t *r, entry_t *e, Shoal__Replicator__DataEnvelope *pb,
                         shoal_buf_t *scratch);
void repl_envelope_pb_free(Shoal__Replicator__DataEnvelope *pb);
pruning_t *repl_pruning_add(entry_t *e, const shoal_node_t *removed);
void repl_tomb_seen_add(entry_t *e, const shoal_node_t *n);
/* Digest of a value (or of a tombstone when v is NULL). */
void repl_value_digest(const shoal_crdt_t *v, uint8_t out[16]);
/* Merges a received envelope into entry e (created by the caller if missing, with the value's
   type). Returns 0, or an error (malformed, wrong type) with nothing changed. */
int repl_merge_envelope(shoal_replicator_t *r, const char *key, size_t klen,
                        const Shoal__Replicator__DataEnvelope *pb, const shoal_node_t *from);
/* Applies a delta (or full value) of key from origin. Returns 0, SHOAL_EAGAIN for a causal gap
   (full state needed), or an error. */
int repl_apply_delta(shoal_replicator_t *r, const shoal_node_t *origin,
                     const Shoal__Replicator__DeltaEntry *d);

/* replicator_client.c */
void repl_client_register(shoal_system_t *sys);
/* Ends every client watch of r (its destruction). */
void repl_client_watches_free(shoal_replicator_t *r);
/* Handles one client request (also what the fuzz target feeds). */
void repl_client_dispatch(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                          const uint8_t *data, size_t len);

/* replicator_net.c */
void repl_net_register(shoal_system_t *sys);
/* Handles one replicator message (also what the fuzz target feeds). */
void repl_dispatch(shoal_replicator_t *r, const shoal_node_t *from, uint16_t kind,
                   const uint8_t *data, size_t len);
int repl_send(shoal_replicator_t *r, const shoal_node_t *to, uint16_t kind,
              const ProtobufCMessage *msg);
void repl_gossip_tick(shoal_system_t *sys, void *arg);
void repl_delta_tick(shoal_system_t *sys, void *arg);
void repl_prune_tick(shoal_system_t *sys, void *arg);
int repl_start_read(shoal_replicator_t *r, const char *key, const shoal_type_t *type,
                    const shoal_consistency_t *c, shoal_get_done_fn *done, void *arg);
/* Starts the remote part of a write whose local part is done; completes through done. */
void repl_start_write(shoal_replicator_t *r, entry_t *e, const shoal_crdt_t *delta,
                      uint64_t delta_seq, const shoal_consistency_t *c, bool is_delete,
                      int local_status, shoal_update_done_fn *done, void *arg);
/* Frees the pool of finished ops (the replicator's end). */
void repl_op_pool_free(shoal_replicator_t *r);
void repl_ops_fail_all(shoal_replicator_t *r, int status);
void repl_reassembly_free(shoal_replicator_t *r);
/* Peers needed (besides this node) for a consistency, or -1 when it cannot be met. */
int repl_peers_needed(const shoal_replicator_t *r, const shoal_consistency_t *c);

/* Wall-clock milliseconds, for pruning markers (they outlive a process). */
int64_t repl_wall_ms(void);

/* system.c, for metrics.c (which includes this header; the declaration belongs with the node's
   other internals in internal.h): messages and payload bytes by kind class (kind >> 8), [0]
   handed to handlers, [1] accepted by send or reply. Node thread (SHOAL_ETHREAD otherwise). */
int shoal_system_class_stats(shoal_system_t *sys, uint64_t msgs[2][256], uint64_t bytes[2][256]);

/* The replicator of a role on a node (NULL if none). */
shoal_replicator_t *repl_find(shoal_system_t *sys, const char *role);
/* The replicators of a node (for metrics): *out is a shoal_malloc'ed array (free it), NULL when
   none; returns the count. Call on the node thread: replicators are destroyed there, so the
   pointers stay valid while the caller runs. */
size_t repl_all(shoal_system_t *sys, shoal_replicator_t ***out);
/* metrics.c: /health/ready's built-in check, every replicator of the node would take a MAJORITY
   read or write now (false: why, in reason). Node thread. Also asked by shoal-member for its
   supervisor's READY=1 (tools/shoal_member.c), which means what /health/ready means. */
bool http_majority_served(shoal_system_t *sys, shoal_buf_t *reason);

/* Set by metrics.c (a layer above) at load: appends what the node's /metrics serves (the whole
   of it when the node has an endpoint, else the built-in part). The client's metrics request
   (Stats with exposition) answers with it; NULL (metrics.c not linked): SHOAL_ENOTSUP. */
extern int (*repl_exposition_hook)(shoal_system_t *sys, shoal_buf_t *out);

/* The clock offset estimate's window: the smallest push lag seen in it is a peer's clock offset
   plus the quickest one-way delivery of the window. 30 s holds 30 membership gossip rounds (1 s
   gossip interval), enough for one delivery with no queueing in it, and the estimate follows a
   changed offset within two windows (a minute). */
#define REPL_SKEW_WINDOW_MS 30000
/* A pushed message (sent_unix_ms set) from `from` came in: a sample of its clock offset. */
void repl_skew_sample(shoal_replicator_t *r, const shoal_node_t *from, uint64_t sent_unix_ms);
/* Peer p's estimated clock offset in ms (positive: its wall clock is behind this node's) from
   the pushes of the current window and the last completed one; false when none came in them.
   now_ms is shoal_now_ms(). Node thread. */
bool repl_peer_clock_offset(shoal_replicator_t *r, peer_t *p, int64_t now_ms, int64_t *offset_ms);
/* The largest absolute estimated offset of any peer of these replicators (ms); false when no
   peer was heard from (metrics.c: shoal_node_clock_skew_seconds). Node thread. */
bool repl_clock_skew_ms(shoal_replicator_t *const *reps, size_t n, int64_t *skew_ms);

/* The limit metrics of these replicators (metrics.c, after the replicators' families). */
void repl_limits_metrics(shoal_replicator_t *const *reps, size_t n, shoal_buf_t *out);
/* Sets e's measured size, keeping the replicator's sum. */
void repl_entry_bytes(shoal_replicator_t *r, entry_t *e, uint64_t bytes);

#endif
