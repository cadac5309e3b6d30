/*  sharding.h — Shoal Cluster Sharding: stateful entities spread over the members of a role,
    addressed by entity id, never by node, and moved when the cluster changes.

    This header is the whole public API of sharding/. Sharding is a client of the replicator (the
    coordinator's state is a ddata key of the role's replicator) and of membership (the coordinator
    is a cluster singleton; regions follow the members).

    THE PIECES
      entity type  a name, the entity callbacks, settings. Started on a node it gives a REGION.
      region       one per node per type: routes messages for the type's entities, hosts the
                   shards allocated to it. A PROXY region (shoal_region_start_proxy, or a node
                   without the type's role) routes and hosts nothing.
      shard        a group of entities (shard id = hash of the entity id mod number-of-shards by
                   default); the unit of allocation and of moves.
      entity       created on its first message (or by shoal_region_start_entity), one instance
                   in the cluster at a time; its callbacks run on the node thread.
      coordinator  a cluster singleton per type (on the oldest Up member of the role) that decides
                   which region hosts which shard and moves shards to balance the load.

    ROUTING (seeds 000/001, scenarios 1 and 2). A region that does not know a shard's home asks
    the coordinator (once per shard) and buffers the shard's messages; when the home is itself
    it starts the shard and delivers; when the home is another region it forwards the buffered
    messages there, and later ones go straight there, without the coordinator.

    THE DEFAULT SHARD ID is decimal(XXH3_64(entity id bytes, seed 0) mod number-of-shards): the
    same on every platform and every release (xxHash's XXH3 output is specified and stable).

    THE COORDINATOR'S STATE is one LWWMap of the role's replicator, key "coord-<type>": an entry
    "s/<shard>" per allocated shard, whose value is the hosting region's node id and whose
    timestamp is the ALLOCATION EPOCH (the coordinator's term << 32 | a counter), and an entry
    "r/<node id>" per registered region ("region" or "proxy"). One allocation ships as a
    one-entry delta; the newest epoch wins, never a wall clock. Written with WriteMajority plus
    write-majority-plus (min-cap majority-min-cap), read with ReadMajority plus read-majority-plus
    when a new coordinator takes over; retried on timeout. Not durable (a full stop forgets it,
    as in Akka). A new coordinator also collects the shards every region reports hosting when it
    registers, and allocates no new shard until the live regions have registered (or
    handoff-timeout passed), so an allocation its read missed is not handed out twice.

    AT MOST ONE OWNER PER SHARD. Every allocation carries an epoch; epochs grow across coordinator
    failover (terms are up-numbers, which only grow). A region hosts a shard only for the newest
    allocation it has been told of: it refuses an older one, and stops its own copy when it learns
    of a newer allocation elsewhere. The shards of a downed region are reallocated only after the
    removal margin (down-removal-margin, default: the split-brain resolver's stable-after), within
    which a downed node stops its own shards (it learns it was downed, or may not act).

    A PARTITION ONE SIDE NOTICES LATER. The side cut off does not wait for its own failure
    detector (whose indirect probes can delay its verdict past the other side's reallocation): it
    is fenced by time since contact (THE FENCE in membership.h). The timing argument: let T be
    the last heartbeat reply the cut-off node had from the kept side. The kept side cannot mark it
    unreachable before T + acceptable-heartbeat-pause, nor down it before stable-after more, and
    it reallocates only after that (and after the removal margin); the cut-off node is fenced
    within one membership tick of T + fence-after (a tick is at most a quarter of fence-margin)
    and stops every shard within one region tick (20 ms) of that. So fence-after + fence-margin
    <= acceptable-heartbeat-pause + stable-after keeps the two apart by at least three quarters
    of fence-margin less a region tick; shoal_sharding_new refuses settings that break it (naming
   the keys). While fenced a region hosts nothing, even if told to; once contact returns it asks the
    coordinator again and hosts a shard only if the current allocation still names it.

    HANDOFF (rebalance, graceful shutdown, StopShards) keeps every message and per-sender order:
      1. the coordinator sends BeginHandOff(shard, epoch) to every region and proxy;
      2. each region stops sending to the owner, buffers the shard's messages, sends a FENCE to
         the owner on the same connection as its earlier messages, and acknowledges;
      3. the coordinator sends HandOff to the owner with the regions that acknowledged; the owner
         waits for their fences (so every message already on its way has arrived and been
         delivered), runs the hand-over step (each entity may yield a snapshot for its next home),
         sends each entity the stop message (or stops it directly when the type has none), waits
         for them to stop (stopping stragglers by force after max(handoff-timeout - 5 s, 1 s)),
         and reports ShardStopped;
      4. the coordinator allocates the shard anew (new epoch) and tells every region, whose
         buffers then flush to the new home. A message that still reaches the old owner (a sender
         that missed step 1) is routed on from there like any other, never dropped.
    A region that dies or restarts during any step ends the handoff within two handoff-timeouts.

    DELIVERY. Tells are at-most-once, as in Akka: nothing is retried across a lost connection.
    Messages from one sender (one thread, or the node thread) through one region keep their order,
    across rebalances too. Every message that cannot be delivered becomes a DEAD LETTER with its
    reason: counted per reason, logged (rate-limited) and passed to subscribers. Messages for a
    shard whose home is unreachable wait in the buffer until it is reachable again or the shard
    moves. Buffers are bounded (buffer-size messages per region, in total); a message that does not
    fit is refused to the caller (tell returns SHOAL_EBUFFER, an ask fails at once with it), and a
    line is logged at every tenth of the capacity used.

    THREADS: the rule of ddata.h (THE THREAD RULE). tell, ask and the queries work from any
    thread. From the node thread they act at once; from another thread a tell is queued in the
    region's inbound queue (one mutex, one wake-up per batch, no allocation per message) and sent
    in order by the node thread. Callbacks (entity callbacks, ask completions, dead-letter and
    shard-moved subscribers, save completions, producers' delivered callbacks) run on the node
    thread and must not block. The shoal_entity_* calls are an entity's own, made from its
    callbacks; from another thread they fail with SHOAL_ETHREAD, naming the way in (a message:
    shoal_region_tell or shoal_region_ask). shoal_region_reply is for the node thread,
    shoal_region_reply_sync for the others. Start and destroy from any thread but the node's; a
    region before the cluster's shutdown (shoal_cluster_shutdown_wait hands off the shards).
    shoal_sharding_new returns NULL with *err and the words in shoal_last_error_detail().
*/
#ifndef SHOAL_SHARDING_H
#define SHOAL_SHARDING_H

#include "membership.h"

#ifdef __cplusplus
extern "C" {
#endif

/* exported from libshoal.so: see "The public ABI" in ddata.h */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define SHOAL_EBUFFER  -50 /* the region's buffer is full: the message was not accepted */
#define SHOAL_ENOTYPE  -51 /* no such entity type on this node */
#define SHOAL_ESHARDS  -52 /* number-of-shards differs from the coordinator's */

/* Largest entity id and shard id, in bytes (C strings, no NUL inside). */
#define SHOAL_ENTITY_ID_MAX 255
#define SHOAL_SHARD_ID_MAX 64

typedef struct shoal_sharding shoal_sharding_t; /* sharding on one node */
typedef struct shoal_region shoal_region_t;     /* one entity type on one node */
typedef struct shoal_entity shoal_entity_t;     /* a running entity (valid while it runs) */

/* ---------------------------------------------------------------------------------------------
 * Allocation strategies
 */
typedef enum {
    SHOAL_ALLOC_LEAST_SHARDS = 1,   /* least-shard-allocation-strategy (default) */
    SHOAL_ALLOC_CONSISTENT_HASHING, /* rendezvous hashing of shard ids over member addresses */
    SHOAL_ALLOC_EXTERNAL,           /* locations written by a client (shoal_external_allocate) */
    SHOAL_ALLOC_CUSTOM,             /* the callbacks below */
} shoal_alloc_kind_t;

/* A region as a strategy sees it. Strategies get the candidate regions in preference order:
   members not leaving first, then the newest app version, then fewest shards, then address. */
typedef struct {
    const shoal_node_t *node;
    const char *const *shards; /* the shards it hosts now */
    size_t n_shards;
    bool leaving;              /* Leaving/Exiting (or shutting down its region) */
    const char *app_version;
} shoal_alloc_region_t;

/* Custom strategy. allocate: the index of the region (< n) for a new shard; `requester` is the
   index of the region that asked (-1: a proxy asked). rebalance: writes up to `cap` shard ids to
   move into out (borrowed from the regions' lists) and returns how many; `in_progress` are the
   shards moving now. */
typedef struct {
    int (*allocate)(const char *shard, int requester, const shoal_alloc_region_t *regions,
                    size_t n, void *arg);
    size_t (*rebalance)(const shoal_alloc_region_t *regions, size_t n,
                        const char *const *in_progress, size_t n_in_progress, const char **out,
                        size_t cap, void *arg);
    void *arg;
} shoal_alloc_custom_t;

typedef struct {
    shoal_alloc_kind_t kind;
    /* least-shard-allocation-strategy: absolute-limit > 0 selects the newer algorithm (at most
       min(absolute, max(1, relative * total shards)) moves per round); 0 the older one
       (rebalance when most - least > threshold, at most max-simultaneous at once). */
    uint32_t rebalance_absolute_limit;  /* 0 in Akka; Shoal's default 20 */
    double rebalance_relative_limit;    /* 0.1 */
    uint32_t rebalance_threshold;       /* 1 */
    uint32_t max_simultaneous_rebalance;/* 3 */
    /* consistent hashing: at most this many moves per round (0 = no limit) */
    uint32_t hashing_rebalance_limit;
    shoal_alloc_custom_t custom;
} shoal_alloc_settings_t;

/* ---------------------------------------------------------------------------------------------
 * Passivation: idle entities go away (sharding/passivation.c)
 */
typedef enum {
    SHOAL_PASSIVATE_NONE = 0, /* no automatic passivation (explicit only) */
    SHOAL_PASSIVATE_IDLE,     /* idle timeout only: Akka's default-idle-strategy (the default) */
    SHOAL_PASSIVATE_LRU,      /* least recently used (segmented when slru_levels > 1) */
    SHOAL_PASSIVATE_MRU,      /* most recently used */
    SHOAL_PASSIVATE_LFU,      /* least frequently used (optionally with dynamic aging) */
    SHOAL_PASSIVATE_TINYLFU,  /* W-TinyLFU composite: LRU admission window, count-min frequency
                                 sketch as admission filter, segmented LRU main area, window size
                                 adapted by hill climbing (Akka's default-strategy) */
} shoal_passivation_policy_t;

typedef struct {
    shoal_passivation_policy_t policy;
    uint32_t idle_timeout_ms;      /* idle-entity.timeout, 120 s (0 = none); applies with any
                                      policy; only messages sent through sharding count */
    uint32_t idle_interval_ms;     /* idle-entity.interval, 0 = half the timeout */
    uint32_t active_entity_limit;  /* active-entity-limit per region, split evenly among its
                                      active shards (0 = none); changeable at run time */
    uint32_t slru_levels;          /* replacement.least-recently-used.segmented.levels (0/1 =
                                      plain LRU) */
    double slru_proportions[4];    /* ...segmented.proportions (zeros = equal segments) */
    bool lfu_dynamic_aging;        /* least-frequently-used.dynamic-aging, off */
    double window_proportion;      /* admission.window.proportion, 0.01 */
    double window_min_proportion;  /* admission.window.minimum-proportion, 0.01 */
    double window_max_proportion;  /* admission.window.maximum-proportion, 1.0 */
    bool hill_climbing;            /* admission.window.optimizer = hill-climbing */
    double adjust_multiplier;      /* hill-climbing.adjust-multiplier, 10.0 */
    double initial_step;           /* hill-climbing.initial-step, 0.0625 */
    double restart_threshold;      /* hill-climbing.restart-threshold, 0.05 */
    double step_decay;             /* hill-climbing.step-decay, 0.98 */
    uint32_t stop_timeout_ms;      /* passivation.stop-timeout: an entity that does not stop
                                      after its stop message is stopped by force, 10 s */
} shoal_passivation_settings_t;

/* Akka's defaults (idle strategy, 120 s). */
void shoal_passivation_settings_default(shoal_passivation_settings_t *p);

/* ---------------------------------------------------------------------------------------------
 * Settings of an entity type: shoal/cluster/sharding/... (see shoal_config_sharding)
 */
typedef struct {
    const char *role;                      /* role, "" = every member */
    uint32_t number_of_shards;             /* number-of-shards, 1000 (checked at registration) */
    uint32_t buffer_size;                  /* buffer-size, 100000 messages per region */
    uint32_t retry_interval_ms;            /* retry-interval, 2 s */
    uint32_t handoff_timeout_ms;           /* handoff-timeout, 60 s */
    uint32_t shard_start_timeout_ms;       /* shard-start-timeout, 10 s */
    uint32_t rebalance_interval_ms;        /* rebalance-interval, 10 s (and at once when a member
                                              comes Up, and again at once after a round that
                                              moved shards while still unbalanced) */
    uint32_t waiting_for_state_timeout_ms; /* waiting-for-state-timeout, 2 s */
    uint32_t updating_state_timeout_ms;    /* updating-state-timeout, 5 s */
    uint32_t shard_region_query_timeout_ms;/* shard-region-query-timeout, 3 s */
    uint32_t write_majority_plus;          /* coordinator-state.write-majority-plus, 3
                                              (UINT32_MAX = all) */
    uint32_t read_majority_plus;           /* coordinator-state.read-majority-plus, 5 */
    uint32_t majority_min_cap;             /* distributed-data.majority-min-cap, 5 */
    uint32_t down_removal_margin_ms;       /* shoal/cluster/down-removal-margin; 0 = the
                                              split-brain resolver's stable-after */
    shoal_alloc_settings_t allocation;
    /* The message an entity gets when it must stop (handoff, passivation); it then calls
       shoal_entity_stop. NULL: entities are stopped directly. */
    const void *stop_message;
    size_t stop_message_len;
    /* Shard id of an entity id, written into out (at most SHOAL_SHARD_ID_MAX bytes + NUL);
       NULL = the default hash. Must give the same answer on every node. */
    void (*shard_id)(const char *entity_id, uint32_t number_of_shards, char *out, void *arg);
    void *shard_id_arg;
    /* Entity id of a message, for shoal_region_tell/ask with a NULL entity id (Akka's message
       extractor); writes at most SHOAL_ENTITY_ID_MAX bytes + NUL into out, nonzero = no id. */
    int (*entity_id)(const void *msg, size_t len, char *out, void *arg);
    void *entity_id_arg;
    shoal_passivation_settings_t passivation; /* off while remember_entities is on */
    /* remember-entities: the entity ids of every shard are kept in durable ddata keys and their
       entities started again after a rebalance, a crash or a restart of the whole cluster */
    bool remember_entities;                /* remember-entities, off */
    bool recovery_constant_rate;           /* entity-recovery-strategy = constant (else all) */
    uint32_t recovery_frequency_ms;        /* entity-recovery-constant-rate-strategy.frequency,
                                              100 ms */
    uint32_t recovery_number_of_entities;  /* ...number-of-entities, 5 */
    uint32_t shard_failure_backoff_ms;     /* shard-failure-backoff, 10 s */
    uint32_t entity_restart_backoff_ms;    /* entity-restart-backoff, 10 s */
    /* entity-state: each entity may keep its state as bytes in the role's replicator (one
       EntityStateMap key per shard, "shard-<type>-estate:<shard>", durable with the "shard-*"
       keys), read before the entity's start, written with shoal_entity_save. Also needed by
       reminders and at-least-once delivery (shoal_producer_*). */
    bool entity_state;                     /* entity-state.enabled, off */
    uint32_t state_write_timeout_ms;       /* entity-state.write-timeout, 5 s */
    uint32_t state_write_majority_plus;    /* entity-state.write-majority-plus, 0: a save is
                                              acknowledged by a majority (min-cap
                                              majority-min-cap); the recovery read takes
                                              read-majority-plus (5) more, i.e. every member
                                              up to 11 nodes */
    bool state_write_all;                  /* entity-state.write-all: WriteAll instead */
    uint32_t state_tombstone_ttl_ms;       /* entity-state.tombstone-ttl: a deleted state is
                                              forgotten at a shard's next move after this, 10 d */
    /* The replicator of the role to keep the coordinator's state in; NULL = sharding starts one
       (role `role`, Akka's sharding overrides: durable keys "shard-*", max-delta-elements 5,
       prefer-oldest) that follows the cluster. */
    shoal_replicator_t *replicator;
    /* Settings of the replicator sharding starts when `replicator` is NULL (Akka's
       cluster.sharding.distributed-data); NULL = shoal_sharding_replicator_settings_default.
       Read when the first type of the role starts (later types of the role share that
       replicator). Its role is not used (the type's role is); gossip_interval_ms 0 is the
       cluster's gossip interval, delta_interval_ms 0 a fifth of the gossip interval. What it
       points to (durable_keys, expire_keys) must outlive the sharding: the replicator keeps
       those. shoal_config_sharding points it into cfg when the file changes it. */
    const shoal_replicator_settings_t *replicator_settings;
} shoal_sharding_settings_t;

/* The settings of sharding's own replicator: ddata's defaults with Akka's sharding overrides
   (durable keys "shard-*", max-delta-elements 5, prefer-oldest on) and Shoal's
   (notify-subscribers-interval 50 ms, so regions hear of the coordinator's state quickly; gossip
   at the cluster's gossip interval and deltas at a fifth of it: gossip_interval_ms and
   delta_interval_ms 0). */
void shoal_sharding_replicator_settings_default(shoal_replicator_settings_t *rs);

void shoal_sharding_settings_default(shoal_sharding_settings_t *s);
/* Shortened timings for tests and the benchmarks: retry 200 ms, handoff 5 s, shard start 2 s,
   rebalance 1 s, state timeouts 1 s. */
void shoal_sharding_settings_fast(shoal_sharding_settings_t *s);
/* From a configuration file (see ddata.h, CONFIGURATION FILES): shoal/cluster/sharding/...;
   overwrites only what the file sets. Strings stay owned by cfg.
   PASSIVATION follows Akka: passivation/strategy names a section under passivation (or
   default-idle-strategy, default-strategy, off/none); the section's keys, over
   strategy-defaults, make out->passivation anew (stop-timeout is kept). Without a strategy key, a
   default-idle-strategy or strategy-defaults section of the file applies (Akka's default
   strategy); the deprecated passivate-idle-entity-after, when set, wins (with a warning if a
   strategy is named too): idle strategy with that timeout, off = none. What Shoal's passivator
   cannot do is refused naming the key: a window or filter other than W-TinyLFU's (LRU window,
   frequency-sketch filter, segmented-LRU main area), frequency-sketch parameters other than the
   built-in ones (depth 4, counter-bits 4, width-multiplier 4, reset-multiplier 10), more than 4
   LRU segments, an active-entity-limit without a replacement policy.
   SHARDING'S REPLICATOR (out->replicator_settings): as Akka's sharding.distributed-data falls
   back to distributed-data, the keys of shoal/cluster/distributed-data/ apply too, except the
   ones sharding overrides (shoal_sharding_replicator_settings_default: durable keys,
   max-delta-elements, prefer-oldest, notify-subscribers-interval, gossip and delta intervals);
   the keys of shoal/cluster/sharding/distributed-data/ apply over both. role is not used (the
   type's role is). Set only when the result differs from what out had. */
int shoal_config_sharding(const shoal_config_t *cfg, shoal_sharding_settings_t *out, char *err,
                          size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * Entities
 */
typedef struct {
    /* A new incarnation of the entity; returns its state (may be NULL). */
    void *(*start)(shoal_entity_t *e, void *type_arg);
    /* A message for it. In here it may reply (shoal_entity_reply), keep the sender for later
       (shoal_entity_sender), tell other entities, passivate or stop itself. */
    void (*receive)(shoal_entity_t *e, void *state, const void *msg, size_t len, void *type_arg);
    /* It is gone (stopped, passivated, handed off, its shard or region stopped): free state. */
    void (*stop)(shoal_entity_t *e, void *state, void *type_arg);
    /* Hand-over before a handoff stops it: may append a snapshot for its next home to out
       (delivered to the next incarnation by the entity-state layer). NULL = none. */
    void (*hand_over)(shoal_entity_t *e, void *state, shoal_buf_t *out, void *type_arg);
} shoal_entity_fns_t;

const char *shoal_entity_id(const shoal_entity_t *e);
const char *shoal_entity_shard(const shoal_entity_t *e);
shoal_region_t *shoal_entity_region(const shoal_entity_t *e);
/* Replies to the sender of the message being received (an ask); SHOAL_EINVAL outside receive or
   for a tell. Like every shoal_entity_* call: from the entity's callbacks (node thread). */
int shoal_entity_reply(shoal_entity_t *e, const void *data, size_t len);

/* Where a reply goes, kept to answer later. */
typedef struct {
    const shoal_node_t *node; /* the asking region's node */
    uint64_t ask_id;          /* 0 = a tell: nothing to answer */
} shoal_sender_t;
/* The sender of the message being received ({NULL, 0} for a tell). */
shoal_sender_t shoal_entity_sender(const shoal_entity_t *e);
/* Answers a kept sender. Node thread; from other threads the _sync twin (which waits until the
   node thread has sent it). */
int shoal_region_reply(shoal_region_t *r, const shoal_sender_t *to, const void *data, size_t len);
int shoal_region_reply_sync(shoal_region_t *r, const shoal_sender_t *to, const void *data,
                            size_t len);
/* Asks to be passivated: the stop message comes back to the entity (or it stops at once without
   one); messages that arrive until it has stopped wait and go to its next incarnation. */
int shoal_entity_passivate(shoal_entity_t *e);
/* Stops the entity now (after a stop message, or on its own); its stop callback runs when the
   current callback returns. */
int shoal_entity_stop(shoal_entity_t *e);

/* ---------------------------------------------------------------------------------------------
 * Entity state (settings.entity_state; sharding/state.c)
 *
 * An entity keeps its state as bytes in the role's replicator, grouped per shard in one key
 * ("shard-<type>-estate:<shard>", an EntityStateMap: entity id -> (epoch, seq, bytes)), so a
 * million entities are a thousand keys, updated by one-entry deltas. When a shard starts, its
 * new owner (allocation epoch E) first raises the key's FENCE to E (WriteMajority plus), then
 * reads it (ReadMajority plus, prefer-oldest), then adopts what it read: every entry is
 * re-stamped (E, 0), so whatever an older owner writes later loses the merge, and a replica that
 * has seen the fence refuses an older owner's write outright (its save fails with SHOAL_ESTALE).
 * The shard's messages wait until this is done; each entity then starts with its stored state.
 *
 * Overlap: a save is acknowledged by w = N/2 + 1 (+ write-majority-plus) of the role's N
 * members; a shard's recovery read asks r = min(N', N'/2 + 1 + read-majority-plus) of the N'
 * members at that time: all of them up to 11 nodes with the default plus of 5. The two meet as
 * long as one member that acknowledged the save is still there, so up to w - 1 = N/2 members
 * may leave (crash, be downed and removed) between a save and the recovery read (for N <= 11;
 * larger clusters: while w + r > N). The save does not wait for min-cap: in a small cluster
 * that would make every save a WriteAll, stalled by any unreachable member.
 */
/* Registers sharding's replicated types (the EntityStateMap) with ddata, so that a program that
   reads sharding's keys without running sharding (ddata-dump, a test) decodes them. Idempotent;
   shoal_sharding_new calls it. */
int shoal_sharding_register_types(void);
/* The stored state of the entity (in start, and afterwards: it follows shoal_entity_save);
   NULL with *len 0 when it has none. Valid until the next save or the end of the callback. */
const void *shoal_entity_stored(const shoal_entity_t *e, size_t *len);
/* How the state came: 0 none, 1 read from the replicator, 2 a hand-over snapshot. */
int shoal_entity_state_origin(const shoal_entity_t *e);
/* A save (or a delete, a reminder) is acknowledged (status 0) or failed (SHOAL_ETIMEOUT,
   SHOAL_ESTALE: this node no longer owns the shard, SHOAL_ESTORE, SHOAL_ESTOPPED). Runs on the
   node thread while the entity still runs: an entity does not stop while a save of it is in
   flight. After a failed save the entity is restarted from its stored state (its in-memory
   state may hold what was not stored) unless the callback saved again.
   EXACTLY ONCE: every save whose call returned 0 gets exactly one callback, whatever happens
   to the shard, the node and the network; a call that returns an error gets none. The saves
   still in flight when the entity restarts after a failed save report to the restarted
   incarnation (`state` is its state; their failures do not restart it again). An entity
   stopped by force (a stale copy whose shard moved, a downed or fenced node, a straggler past
   handoff-timeout) does not wait: its saves complete with SHOAL_ESTOPPED before its stop
   callback, meaning "not known to be stored" (the write may still land, like after
   SHOAL_ETIMEOUT), and a save_reply's ask is failed so. */
typedef void (shoal_save_done_fn)(shoal_entity_t *e, void *state, int status, void *arg);
/* Stores the entity's new state (whole, at most 16 MiB). Saves of one entity are applied in
   order. From the entity's callbacks (node thread). */
int shoal_entity_save(shoal_entity_t *e, const void *data, size_t len, shoal_save_done_fn *done,
                      void *arg);
/* Saves, then replies `reply` to the current sender once the save is acknowledged (or fails the
   ask with the save's error). In receive. */
int shoal_entity_save_reply(shoal_entity_t *e, const void *data, size_t len, const void *reply,
                            size_t rlen);
/* Deletes the entity's state for good (and its reminders): the next message starts it fresh. */
int shoal_entity_delete_state(shoal_entity_t *e, shoal_save_done_fn *done, void *arg);

/* Reminders: durable timers. `msg` comes back to the entity in receive about delay_ms from now,
   at least once, even if it was passivated or its node died in between (its shard is started
   where it now lives); shoal_entity_reminder tells the id then. Scheduling an id again replaces
   it. Kept in the shard's state key (the type needs entity_state). */
#define SHOAL_REMINDER_ID_MAX 64
int shoal_entity_remind(shoal_entity_t *e, const char *reminder_id, uint64_t delay_ms,
                        const void *msg, size_t len, shoal_save_done_fn *done, void *arg);
int shoal_entity_cancel_reminder(shoal_entity_t *e, const char *reminder_id);
/* In receive: the id of the reminder (or timer) being delivered, else NULL. */
const char *shoal_entity_reminder(const shoal_entity_t *e);
/* Timers that need not survive (Akka's timers): `msg` comes back to this incarnation after
   delay_ms (shoal_entity_reminder names it in receive); they are gone when it stops (passivated,
   moved, crashed). Starting an id again replaces it. Any entity type. */
int shoal_entity_start_timer(shoal_entity_t *e, const char *timer_id, uint32_t delay_ms,
                             const void *msg, size_t len);
int shoal_entity_cancel_timer(shoal_entity_t *e, const char *timer_id);

/* At-least-once delivery (Akka's reliable delivery for sharding). A producer numbers its
   messages per entity (1, 2, ...) and resends every message not yet confirmed, in order, until
   the entity confirms it; the entity's stored state keeps, per producer, the last number it
   processed, so a repeat is confirmed without being processed again (with durable entity state:
   effectively once). A message is confirmed once the entity's save that follows it is
   acknowledged (when receive saves nothing, the layer saves the numbers alone); the entity's
   reply (shoal_entity_reply) goes back with the confirmation. Per entity at most `window`
   messages are unconfirmed: send refuses more (SHOAL_EBUFFER), so a slow entity slows its
   producers. The entity keeps the last numbers of its 64 most recent producers: a producer
   gone quiet for longer than 64 others sends anew (use a fresh producer id per producer
   incarnation, as the producer id names one sequence). */
typedef struct shoal_producer shoal_producer_t;
/* A message is confirmed (status 0, the entity's reply) or given up (SHOAL_ESTOPPED when the
   producer is destroyed). Node thread. */
typedef void (shoal_delivered_fn)(shoal_producer_t *p, const char *entity_id, uint64_t seq,
                                  int status, const void *reply, size_t len, void *arg);
typedef struct {
    uint32_t window;           /* unconfirmed messages per entity, 100 */
    uint32_t resend_ms;        /* resend when unconfirmed this long, 1 s */
    size_t max_bytes;          /* all unconfirmed payloads of the producer, 64 MiB */
} shoal_producer_settings_t;
void shoal_producer_settings_default(shoal_producer_settings_t *s);
#define SHOAL_PRODUCER_ID_MAX 64
/* A producer for the entities of r's type; producer_id at most SHOAL_PRODUCER_ID_MAX bytes. Any
   thread. */
shoal_producer_t *shoal_producer_new(shoal_region_t *r, const char *producer_id,
                                     const shoal_producer_settings_t *s, shoal_delivered_fn *fn,
                                     void *arg, int *err);
/* Sends; *seq gets the message's number. 0, SHOAL_EBUFFER (window or bytes full: try after a
   confirmation), SHOAL_EINVAL. Any thread. */
int shoal_producer_send(shoal_producer_t *p, const char *entity_id, const void *msg, size_t len,
                        uint64_t *seq);
/* Messages sent and not yet confirmed. Any thread. */
size_t shoal_producer_pending(shoal_producer_t *p);
/* Gives up what is unconfirmed (delivered fn with SHOAL_ESTOPPED) and frees. Any thread but the
   node's. NULL-safe. */
void shoal_producer_destroy(shoal_producer_t **p);

/* ---------------------------------------------------------------------------------------------
 * Sharding on a node, and regions
 */
/* Sharding on a node that runs membership. Any thread but the node's. */
shoal_sharding_t *shoal_sharding_new(shoal_cluster_t *c, int *err);
/* Stops every region (without handing off: use the cluster's orderly shutdown for that) and
   frees. Any thread but the node's. NULL-safe. */
void shoal_sharding_destroy(shoal_sharding_t **self_p);
shoal_cluster_t *shoal_sharding_cluster(shoal_sharding_t *sh);

/* Starts an entity type on this node (a proxy when the node lacks the role). arg is passed to the
   entity callbacks. NULL with *err: SHOAL_EINVAL (bad settings, the name is taken). */
shoal_region_t *shoal_region_start(shoal_sharding_t *sh, const char *type_name,
                                   const shoal_sharding_settings_t *s,
                                   const shoal_entity_fns_t *fns, void *arg, int *err);
/* A region that routes and hosts nothing. */
shoal_region_t *shoal_region_start_proxy(shoal_sharding_t *sh, const char *type_name,
                                         const shoal_sharding_settings_t *s, int *err);
/* Graceful shutdown of a region: hands all its shards off to other regions, then stops (it runs
   by itself in the cluster's SHOAL_PHASE_SHARDING, so leaving the cluster does it first). When no
   other region can take them (the last member, or all others leaving too) the shards stop here
   at once, gracefully (hand-over step, stop message). Any thread but the node's; returns once the
   region has stopped, or SHOAL_ETIMEOUT after handoff-timeout with the shards that could not
   move stopped here. */
int shoal_region_shutdown(shoal_region_t *r);
/* StopShards: the shards hand their entities off (as in a rebalance) and are deallocated; the
   next message for one of them allocates it again. Any thread; returns once the coordinator has
   been asked (SHOAL_ENOTCONN: no coordinator known yet). */
int shoal_region_stop_shards(shoal_region_t *r, const char *const *shards, size_t n);
/* The region of a type on this node, or NULL. Thread-safe. */
shoal_region_t *shoal_region_find(shoal_sharding_t *sh, const char *type_name);
const char *shoal_region_type_name(const shoal_region_t *r);
bool shoal_region_is_proxy(const shoal_region_t *r);
/* The shard id of an entity id under the type's settings (out holds SHOAL_SHARD_ID_MAX + 1). */
void shoal_region_shard_of(const shoal_region_t *r, const char *entity_id, char *out);
/* The default shard id function. */
void shoal_sharding_default_shard_id(const char *entity_id, uint32_t number_of_shards, char *out);

/* Changes the region's active-entity limit at run time (0 = none); shards over their new share
   passivate their surplus at once. Any thread. */
int shoal_region_set_active_entity_limit(shoal_region_t *r, uint32_t limit);

/* One-way message to an entity (entity_id NULL: taken from the message by the type's entity_id
   function). 0 when accepted; SHOAL_EBUFFER (full), SHOAL_ESTOPPED (region stopping),
   SHOAL_EINVAL (bad id). Any thread. */
int shoal_region_tell(shoal_region_t *r, const char *entity_id, const void *msg, size_t len);
/* A request with a reply: done(status, reply) runs on the node thread exactly once, with
   SHOAL_OK and the reply, SHOAL_ETIMEOUT, SHOAL_EBUFFER or SHOAL_ESTOPPED. Any thread; returns
   0 when the ask was accepted (done will run) or an error (done will not run). */
typedef void (shoal_ask_done_fn)(shoal_region_t *r, int status, const void *reply, size_t len,
                                 void *arg);
int shoal_region_ask(shoal_region_t *r, const char *entity_id, const void *msg, size_t len,
                     uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg);
/* Blocking ask for other threads (SHOAL_EDEADLK on the node thread): the reply in *reply. */
int shoal_region_ask_sync(shoal_region_t *r, const char *entity_id, const void *msg, size_t len,
                          uint32_t timeout_ms, shoal_buf_t *reply);
/* Starts an entity without a message (Akka's StartEntity). Any thread. */
int shoal_region_start_entity(shoal_region_t *r, const char *entity_id);

/* Sharded daemon process: n workers with entity ids "0".."n-1" kept alive across the cluster,
   one per shard so they spread over the members, started again elsewhere when their node goes
   (every node pings them all every keep_alive_ms with StartEntity, as Akka's keep-alive pinger),
   and rescalable at run time. The workers are the entities of type name (fns as for any type;
   tell them through the returned region). Any thread but the node's. */
#define SHOAL_DAEMON_MAX_WORKERS 1000
shoal_region_t *shoal_daemon_start(shoal_sharding_t *sh, const char *name, uint32_t n,
                                   const shoal_sharding_settings_t *s,
                                   const shoal_entity_fns_t *fns, void *arg,
                                   uint32_t keep_alive_ms, int *err);
/* Changes the number of workers everywhere (an LWWRegister "daemon-<name>-workers" of the role's
   replicator, written with WriteMajority): new ones start at the next keep-alive, workers with an
   id >= n stop. Any thread but the node's. */
int shoal_daemon_rescale(shoal_region_t *daemon, uint32_t n);
/* The number of workers as this node knows it. */
uint32_t shoal_daemon_workers(shoal_region_t *daemon);

/* Dead letters. */
typedef enum {
    SHOAL_DL_BUFFER_FULL = 1, /* refused: the region's buffer is full */
    SHOAL_DL_REGION_STOPPING, /* the region was stopping or stopped with it buffered */
    SHOAL_DL_ENTITY_STOPPED,  /* for an entity stopping by force, or a stopped shard's entity */
    SHOAL_DL_SHARD_FAILED,    /* the shard could not start or was stopped as stale */
    SHOAL_DL_SEND_FAILED,     /* the transport refused it (no connection, queue full) */
    SHOAL_DL_UNKNOWN_TYPE,    /* arrived for a type this node does not run */
    SHOAL_DL_MALFORMED,       /* arrived malformed */
    SHOAL_DL_REASONS
} shoal_dead_letter_t;
const char *shoal_dead_letter_name(shoal_dead_letter_t reason);
typedef void (shoal_dead_letter_fn)(shoal_region_t *r, shoal_dead_letter_t reason,
                                    const char *entity_id, const void *msg, size_t len, void *arg);
/* Node thread or any thread. Returns an id > 0. */
int shoal_region_on_dead_letter(shoal_region_t *r, shoal_dead_letter_fn *fn, void *arg);

/* Events of shard moves (node thread, on the coordinator's node). */
typedef void (shoal_shard_moved_fn)(shoal_region_t *r, const char *shard, const shoal_node_t *from,
                                    const shoal_node_t *to, void *arg);
int shoal_region_on_shard_moved(shoal_region_t *r, shoal_shard_moved_fn *fn, void *arg);

/* ---------------------------------------------------------------------------------------------
 * Queries (any thread; free what they return)
 */
typedef struct {
    char *id;
    size_t n_entities;
    char **entities; /* NULL unless asked for */
} shoal_shard_state_t;
typedef struct {
    const shoal_node_t *region;
    bool failed; /* did not answer in time (cluster-wide queries) */
    size_t n_shards;
    shoal_shard_state_t *shards; /* by shard id */
} shoal_region_state_t;
/* This region's shards and (with_entities) their entity ids (Akka's GetShardRegionState). */
int shoal_region_state(shoal_region_t *r, bool with_entities, shoal_region_state_t *out);
void shoal_region_state_free(shoal_region_state_t *s);

/* Every region of the type (as the coordinator knows them) with its shards and entity counts;
   regions that do not answer within timeout_ms are listed failed (GetClusterShardingStats). */
typedef struct {
    size_t n_regions;
    shoal_region_state_t *regions;
} shoal_sharding_stats_t;
int shoal_region_cluster_stats(shoal_region_t *r, uint32_t timeout_ms, shoal_sharding_stats_t *out);
void shoal_sharding_stats_free(shoal_sharding_stats_t *s);

/* The regions (not proxies) the coordinator knows (GetCurrentRegions), node ids in *nodes
   (malloc'd array of interned pointers). */
int shoal_region_current_regions(shoal_region_t *r, uint32_t timeout_ms,
                                 const shoal_node_t ***nodes, size_t *n);

/* Counters of this region (and of the coordinator, when it runs here). */
typedef struct {
    uint64_t tells, asks, delivered_local, forwarded, received_remote, replies;
    uint64_t asks_timed_out, buffered, buffer_peak, home_requests, homes_learned;
    uint64_t shards_started, shards_stopped, shards_refused_stale, entities_started,
        entities_stopped, entities_forced;
    uint64_t handoffs, fences_sent;
    uint64_t remember_writes, remember_failures, entities_recovered;
    uint64_t passivations; /* automatic (idle, limit); explicit ones are the entities' own */
    /* entity state */
    uint64_t state_saves, state_save_failures, state_stale_refused, state_loads,
        state_load_failures, handover_snapshots, handover_bytes, reminders_fired,
        reliable_processed, reliable_duplicates, reliable_out_of_order;
    uint64_t dead_letters[SHOAL_DL_REASONS];
    /* coordinator */
    uint64_t allocations, rebalance_rounds, shards_moved, state_writes, state_write_retries,
        state_reads;
    uint64_t fences_passed; /* shards allocated again past a stored entity-state fence that
                               outlived the coordinator's state (a restart of every node) */
    uint64_t shards, entities; /* now */
} shoal_region_stats_t;
int shoal_region_stats(shoal_region_t *r, shoal_region_stats_t *out);

/* The entity type names started on this node, in start order (malloc'd array; the strings stay
   owned by the regions). */
size_t shoal_sharding_type_names(shoal_sharding_t *sh, const char ***names);
/* Health check: true once every named type (all types when n == 0) has registered with its
   coordinator. */
bool shoal_sharding_healthy(shoal_sharding_t *sh, const char *const *names, size_t n);

/* External allocation: records that `shard` should live on the member at `address`
   ("host:port"), in the LWWMap "external-shard-allocation-<type>" of the role's replicator
   (WriteMajority); the coordinator moves it there at its next rebalance. Any thread. */
int shoal_external_allocate(shoal_region_t *r, const char *shard, const char *address,
                            uint32_t timeout_ms);

/* PINNED SHARDS: an operator's actions, through the type's coordinator (shoal-cluster rebalance,
   move, unpin). Any thread but the node's, from any region or proxy of the type; each waits up to
   timeout_ms (0: shard-region-query-timeout) for the coordinator's answer and puts its words (or
   why none came) in msg. 0, or: SHOAL_ESTATE (no coordinator known yet, or it is still reading its
   state, or a rebalance may not run now: a member joining or unreachable), SHOAL_ENOTMEMBER (no
   region of the type registered at `member`), SHOAL_ENOTFOUND (unpin: not pinned), SHOAL_ETIMEOUT.
   - rebalance: a rebalance round now, as at rebalance-interval.
   - move: pins `shard` to `member` (host:port, or host:port:uid for that incarnation; the pin keeps
     the address) and hands the shard off to it with the ordered HANDOFF above. The pin is an entry
     "p/<shard>" of THE COORDINATOR'S STATE, written with WriteMajority plus before the answer, so a
     new coordinator reads it with the allocations. A pinned shard is allocated to its member and
     rebalances leave it there; while its member is not Up and reachable (or leaves) it is hosted
     elsewhere, and the first rebalance round after the member is back brings it home (as Akka's
     external shard allocation waits for a location).
     SHOAL_EINVAL, with the valid range in msg, for a shard the type cannot have: with the default
     shard ids (shard_id NULL), anything but the decimal numbers 0 .. number_of_shards - 1 as
     shoal_sharding_default_shard_id writes them; checked by this region and again by the
     coordinator with its settings. With a custom shard_id function every id of 1 to 64 bytes is
     taken (its ids cannot be known).
   - unpin: drops the pin; the shard stays where it is until a rebalance moves it. Any id, so a pin
     to a shard that does not exist (from an older build, or a larger number_of_shards) can go. */
int shoal_region_rebalance(shoal_region_t *r, uint32_t timeout_ms, char *msg, size_t msglen);
int shoal_region_move_shard(shoal_region_t *r, const char *shard, const char *member,
                            uint32_t timeout_ms, char *msg, size_t msglen);
int shoal_region_unpin_shard(shoal_region_t *r, const char *shard, uint32_t timeout_ms, char *msg,
                             size_t msglen);

/* Sharding's requests over a client connection (the shoal-cluster tool), served by every node
   that runs sharding. Each answers with a status and text (membership.h's admin reply):
   SHARDS: the shard map as JSON (GET /cluster/shards[/<type>]: "" for every type);
   REBALANCE, MOVE, UNPIN: the calls above, on the serving node's region of the type. */
#define SHOAL_KIND_SHARDING_SHARDS    0x8201u /* type or "" -> JSON */
#define SHOAL_KIND_SHARDING_REBALANCE 0x8202u /* type */
#define SHOAL_KIND_SHARDING_MOVE      0x8203u /* type, shard, member */
#define SHOAL_KIND_SHARDING_UNPIN     0x8204u /* type, shard */
/* The node's answer (JSON or words) in text, also on error. SHOAL_EKIND: the node runs no
   sharding; SHOAL_ENOTYPE: no such entity type on that node. */
int shoal_client_sharding_shards(shoal_client_t *cl, const char *type, shoal_buf_t *text);
int shoal_client_sharding_rebalance(shoal_client_t *cl, const char *type, shoal_buf_t *text);
int shoal_client_sharding_move(shoal_client_t *cl, const char *type, const char *shard,
                               const char *member, shoal_buf_t *text);
int shoal_client_sharding_unpin(shoal_client_t *cl, const char *type, const char *shard,
                                shoal_buf_t *text);

/* PLACEMENT, as this node knows it: the coordinator's state in this node's replica of the role's
   replicator (THE COORDINATOR'S STATE), else what the region learned from the coordinator. The
   node hosting a shard of r's type, or the shard of an entity id (NULL: not allocated, or not
   known here yet); the node running the type's coordinator (NULL: none yet). Interned node ids.
   Thread-safe. The management endpoint's /cluster/shards/<type> gives the same answers. */
const shoal_node_t *shoal_region_shard_home(shoal_region_t *r, const char *shard);
const shoal_node_t *shoal_region_entity_home(shoal_region_t *r, const char *entity_id);
const shoal_node_t *shoal_region_coordinator(shoal_region_t *r);

/* Adds sharding's counters to a node's metrics endpoint (see ddata.h, METRICS AND THE MANAGEMENT
   ENDPOINT). Sharding provides them, with GET /cluster/shards[/<type>] and the "sharding"
   readiness check (every type registered with its coordinator), to every endpoint of its node by
   itself: this call is for an endpoint's collector list alone. */
int shoal_sharding_metrics(shoal_sharding_t *sh, shoal_metrics_t *m);

/* LIMITS (off by default): at most max_entities entities (of every type, remembered ones
   included) run on this node at once. A message that would start one more is refused: an ask
   (and a reliable or StartEntity message that asks) is answered SHOAL_ELIMIT, a tell is dropped;
   both are counted (shoal_sharding_entities_refused_total) and logged at the 1st, 2nd, 4th...
   refusal; entities already running keep their messages. Entities started again by
   remember-entities after a move are not refused (they were admitted before). 0 = no cap. Any
   thread. Config: shoal/cluster/sharding/max-entities-per-node. */
int shoal_sharding_set_max_entities(shoal_sharding_t *sh, uint64_t max_entities);
/* The caps on keys and bytes (ddata.h, shoal_replicator_set_limits) of the replicators sharding
   starts itself, one per role (shoal_sharding_settings_t.replicator NULL): those running now and
   those a later type starts. They hold the coordinator's state, the remembered entities and the
   entities' saved states, so a cap hit refuses those writes: a save is answered SHOAL_ELIMIT, a
   new entity whose remembering is refused is not started (its asks answered SHOAL_ELIMIT, its
   tells dropped), a coordinator's write fails as on a timeout: give room. A replicator passed in the settings is the caller's to cap.
   NULL limits = no cap. Any thread. Config: shoal/cluster/distributed-data/max-keys, max-bytes
   (shoal_config_replicator_limits). */
int shoal_sharding_set_replicator_limits(shoal_sharding_t *sh,
                                         const shoal_replicator_limits_t *limits);
/* shoal/cluster/sharding/max-entities-per-node (unset: 0). 0 or SHOAL_EINVAL, err says why. */
int shoal_config_sharding_limits(const shoal_config_t *cfg, uint64_t *max_entities, char *err,
                                 size_t errlen);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
