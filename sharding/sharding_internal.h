/*  sharding_internal.h — what sharding/'s files share: the node's sharding, regions, hosted shards,
    entities, buffered messages, the coordinator, and the wire.

    The files, bottom first: each calls only files listed before it (tools/layers.txt has exactly
    which, and test_docs holds the objects to it), so a reader can start at the top of this list.
      settings.c     the defaults of the settings (an entity type's, passivation's, the replicator's)
      wire.c         the bytes on the node's transport: entity envelopes, replies, control messages
      allocation.c   the shard allocation strategies (allocation.h)
      passivation.c  the automatic passivation policies (passivation.h)
      estate.c       EntityStateMap, the replicated type of a shard's entity states (estate.h)
      config.c       sharding settings from a configuration file (shoal_config_sharding)
      events.c       shard allocations and moves in the node's recent cluster events
      life.c         life_t, the token replicator callbacks hold instead of the object they concern
      view.c         lookups: who is reachable or removed, a node's member record, the regions
      outbox.c       what leaves a region: control messages, replies and the asks waiting for them,
                     dead letters, shard moves
      remember.c     remember-entities: each shard's entity ids in durable ddata keys
      state.c        entity state, reminders, in-memory timers, the entity side of at-least-once
      shard.c        the shards hosted here and their entities: the entity lifecycle, delivery into
                     a shard, automatic passivation, a shard's start, stop and tick
      query.c        what a region is asked about itself and the cluster, and the operator's actions
      coordinator.c  the shard coordinator of an entity type (a singleton): allocation, rebalance,
                     handoff
      region.c       a region: routing, shard homes and buffers, its coordinator found through
                     the singleton, handoffs, tells and asks, its shutdown
      http.c         sharding's routes, readiness check and metrics on the management endpoint
      admin.c        sharding's requests over a client connection (shoal-cluster)
      sharding.c     sharding on a node: its regions, the dispatch of sharding's messages, what it
                     keeps of membership's events
      daemon.c       sharded daemon process, a client of the region API
      producer.c     the producer side of at-least-once delivery, a client of the region API
    Where a lower file must reach a higher one, the higher one sets a hook: the region's
    `lifecycle` (shard.c's entity lifecycle, for remember.c and state.c), its `route` (region.c's
    routing, for shard.c), its daemon_tick, producers_tick and producers_stopped (set by daemon.c
    and producer.c, driven by region.c's tick and stop), and shoal_sharding_t.deliver_self
    (sharding.c's dispatcher, for control messages outbox.c sends to this node itself).
*/
#ifndef SHOAL_SHARDING_INTERNAL_H
#define SHOAL_SHARDING_INTERNAL_H

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "histogram.h"
#include "internal.h" /* shoal_hmap_t: the remembered-entity maps */
#include "sharding.h"
#include "sharding.pb-c.h"

/* Peer message kinds of sharding (the replicator's are 32..63, membership's 0x0400..). */
enum {
    K_SH_DELIVER = 0x0500, /* an entity message (hand-coded envelope) */
    K_SH_REPLY,            /* the reply to an ask */
    K_SH_CONTROL,          /* Shoal__Sharding__Control */
};

/* ---------------------------------------------------------------------------------------------
 * Wire (wire.c)
 */
#define ENV_ASK       0x01u /* carries an ask id */
#define ENV_ORIGIN    0x02u /* carries the asking node (forwarded by a region that is not it) */
#define ENV_START     0x04u /* StartEntity: no payload */
#define ENV_RELIABLE  0x08u /* at-least-once: payload = u8 producer id len | id | u64 seq (LE) | msg */

typedef struct {
    uint8_t flags;
    uint32_t type_hash;
    const char *shard; /* not NUL-terminated: shard_len */
    size_t shard_len;
    const char *eid;
    size_t eid_len;
    uint64_t ask_id;
    const char *origin;
    size_t origin_len;
    const uint8_t *payload;
    size_t len;
} envelope_t;

/* Appends an envelope to out (origin NULL: none). */
void wire_envelope(shoal_buf_t *out, uint8_t flags, uint32_t type_hash, const char *shard,
                   const char *eid, uint64_t ask_id, const shoal_node_t *origin,
                   const void *payload, size_t len);
/* 0 or SHOAL_EDECODE. The fields point into data. */
int wire_parse_envelope(const uint8_t *data, size_t len, envelope_t *out);
void wire_reply(shoal_buf_t *out, uint32_t type_hash, uint64_t ask_id, int32_t status,
                const void *payload, size_t len);
int wire_parse_reply(const uint8_t *data, size_t len, uint32_t *type_hash, uint64_t *ask_id,
                     int32_t *status, const uint8_t **payload, size_t *plen);
/* Decodes a control message and checks what every kind needs (shard ids and node ids well
   formed); NULL when malformed. Free with wire_control_free. */
Shoal__Sharding__Control *wire_parse_control(const uint8_t *data, size_t len);
void wire_control_free(Shoal__Sharding__Control *m);
/* The stable hash naming a type in envelopes. */
uint32_t wire_type_hash(const char *type_name);
/* Little-endian u64, as every hand-coded field of sharding's bytes. */
void wire_put_u64(shoal_buf_t *b, uint64_t v);
uint64_t wire_get_u64(const uint8_t *p);
/* The payload of an ENV_RELIABLE message: u8 producer id len | id | u64 seq | msg. */
typedef struct {
    const char *producer; /* not NUL-terminated: plen */
    size_t plen;
    uint64_t seq;
    const uint8_t *msg;
    size_t len;
} reliable_t;
void wire_reliable(shoal_buf_t *out, const char *producer, size_t plen, uint64_t seq,
                   const void *msg, size_t len);
int wire_parse_reliable(const uint8_t *data, size_t len, reliable_t *out);

/* ---------------------------------------------------------------------------------------------
 * Buffered messages
 */
typedef struct bmsg {
    struct bmsg *next;
    const shoal_node_t *origin; /* who asked (NULL: a tell, or our own ask) */
    uint64_t ask_id;
    uint8_t flags;
    size_t len;
    /* NUL-terminated, in the same allocation after the data: as an array of
       SHOAL_ENTITY_ID_MAX + 1 bytes it made each message ~300 bytes, and the messages of
       entities waiting for their remember write were most of the memory such a batch touched */
    char *eid;
    uint8_t data[]; /* len bytes */
} bmsg_t;

typedef struct {
    bmsg_t *head, *tail;
    size_t n;
} bqueue_t;

/* ---------------------------------------------------------------------------------------------
 * Entities and hosted shards
 */
typedef enum {
    E_RUNNING = 1,
    E_STOPPING, /* the stop message was sent; waiting for shoal_entity_stop */
    E_STARTING, /* remember-entities: waiting for the write that remembers it */
} entity_status_t;

/* life.c: outlives an object while replicator callbacks about it may still arrive. */
typedef struct {
    void *obj; /* NULL once the object is gone */
    int refs;
} life_t;

life_t *life_new(void *obj);
life_t *life_ref(life_t *l);
void life_release(life_t *l);
/* The object is gone: callbacks that still come find obj NULL. */
void life_end(life_t **l);

/* Remember-entities: the ids of a shard's entities in this many ORSets (as Akka splits them). */
#define REMEMBER_KEYS 5

typedef struct shard shard_t;

struct ent_state; /* state.c: an entity's saves, producers seen, reliable message in hand */

/* Kept small: an idle entity costs this, its table entry and its id (entities_per_gib). */
struct shoal_entity {
    shard_t *shard;
    void *state;
    struct ent_state *st;  /* entity-state types only */
    shoal_sender_t sender; /* of the message being received */
    /* messages that arrived while it was stopping or starting, oldest first: a queue of two
       pointers, not a bqueue_t (its count is not needed here, and an entity's size decides how
       many idle ones fit in memory: without it the entity and a ~10-byte id fit malloc's 96-byte
       chunks instead of 112) */
    bmsg_t *waiting, *waiting_tail;
    int64_t stopping_since;
    uint8_t status;        /* entity_status_t */
    bool started;          /* its start callback ran (so its stop callback is due) */
    bool passivating;      /* stopping at its own request: what waits goes to a new incarnation */
    bool stop_now;         /* shoal_entity_stop was called: stop when the callback returns */
    bool forced;           /* stopping by force: no waiting for its saves */
    int depth;             /* callbacks of this entity on the stack */
    char id[];             /* NUL-terminated; the key of the shard's table (not copied) */
};

typedef enum {
    SH_ACTIVE = 1,
    SH_FENCING,   /* HandOff received: waiting for the regions' fences */
    SH_STOPPING,  /* entities were told to stop */
} shard_status_t;

struct shard {
    shoal_region_t *r;
    char id[SHOAL_SHARD_ID_MAX + 1];
    uint64_t epoch;
    shoal_hmap_t entities; /* id (its NUL stored) -> shoal_entity_t: see shard_entity() */
    shard_status_t status;
    /* handoff */
    const shoal_node_t **fences; /* regions whose fence has not arrived yet */
    size_t n_fences;
    const shoal_node_t **fenced; /* regions whose fence arrived (possibly before HandOff) */
    size_t n_fenced;
    int64_t handoff_deadline;    /* fences, then entities, by force after this */
    const shoal_node_t *handoff_to; /* the coordinator to answer */
    bool by_coordinator;         /* a handoff (answer ShardStopped), else a local stop */
    bool batch;                  /* stopping many entities: release the shard after the loop */
    struct passivator *pass;     /* automatic passivation (NULL: off) */
    /* remember-entities (remember.c) */
    life_t *life;
    bool recovering;             /* reading the remembered ids; messages wait in `pending` */
    bqueue_t pending;
    /* the id sets are shoal_hmap (open addressing, one allocation per id, no strcmp chains);
       keys are stored with their NUL, values are (void *)1 */
    bool remember_maps;          /* the maps below are in use (remember-entities on) */
    shoal_hmap_t remembered;     /* ids written (or read) as remembered */
    zlistx_t *to_start;          /* recovered ids not started yet (started at a bounded rate) */
    shoal_hmap_t adds, removes;  /* ids waiting for the next write */
    char **awaiting;             /* ids of entities created to wait for the write that
                                    remembers them, oldest first (owned): activation looks at
                                    these, not at every entity of the shard */
    size_t n_awaiting, cap_awaiting;
    int writes_in_flight;
    int64_t retry_at;            /* after a failed write or read (shard-failure-backoff) */
    int64_t recover_next;        /* constant-rate recovery: the next batch */
    bool noted_here;             /* this shard is in shard-<type>-all-shards (written or read) */
    int write_attempts;          /* failed remember writes in a row */
    bool maybe_stopping;         /* some entity may be E_STOPPING (the tick looks for laggards) */
    zhashx_t *restart_at;        /* id -> int64_t*: stopped without passivating, restart then */
    /* entity state (state.c) */
    bool state_loading;          /* fence, read, adopt: messages wait in `pending` */
    uint64_t state_seq;          /* the last seq of this owner's writes (epoch, seq) */
    int64_t state_retry_at;
    uint8_t state_phase;
    bool state_noted;            /* in shard-<type>-all-shards (so it starts after a full stop) */
    int state_writes;            /* writes of the key in flight (state.c: group commit) */
    struct save *state_queued, *state_queued_tail; /* saves waiting for the next write */
    struct reminder *reminders;  /* pending reminders of the shard's entities */
    size_t n_reminders, cap_reminders;
    struct mtimer *timers;       /* in-memory timers of its running entities */
    size_t n_timers, cap_timers;
};

/* The shard's entities (an open-addressing map: a zhashx lookup, its chain of strcmp and its
   allocation per entity were a fifth of the cost of creating an entity). */
static inline shoal_entity_t *shard_entity(const shard_t *s, const char *id)
{
    return s->entities.n ? shoal_hmap_get(&s->entities, id, strlen(id) + 1) : NULL;
}

static inline size_t shard_n_entities(const shard_t *s)
{
    return s->entities.n;
}

/* Iteration: for (size_t pos = 0; (e = shard_entity_next(s, &pos));) ...; removing entities
   meanwhile is fine, adding some is not. */
static inline shoal_entity_t *shard_entity_next(const shard_t *s, size_t *pos)
{
    while (*pos < s->entities.cap) {
        const shoal_hslot_t *sl = &s->entities.slots[(*pos)++];
        if (SHOAL_HSLOT_LIVE(sl))
            return sl->value;
    }
    return NULL;
}

/* The region's view of a shard's home. */
typedef struct {
    char id[SHOAL_SHARD_ID_MAX + 1];
    const shoal_node_t *node; /* NULL: unknown, or moving */
    uint64_t epoch;           /* newest allocation heard of */
    bool handing_off;         /* BeginHandOff seen, no new home yet: buffer */
    int64_t handoff_since;    /* when BeginHandOff came (a handoff never finished is void) */
    int64_t asked_at;         /* GetShardHome sent (0: not asked) */
    /* offered to this node while it could not host (not yet Up, fenced): asked again once it
       can, messages or not (a remembered shard allocated eagerly has none to wake it) */
    bool refused_here;
    bqueue_t buffer;
} home_t;

/* An ask of this node waiting for its reply. */
typedef struct ask {
    uint64_t id;
    int64_t deadline;
    int64_t started_us; /* for the region's ask latency histogram */
    shoal_ask_done_fn *done;
    void *arg;
    struct ask *next_by_time, *prev_by_time;
} ask_t;

typedef struct coordinator coordinator_t;

/* The entity lifecycle (shard.c), for the stores below shard.c whose reads and writes move
   entities on when they complete: remember.c (an entity remembered or recovered starts, with what
   waited for it) and state.c (a reminder or a timer reaches its entity, starting it if need be;
   an entity whose saves are in finishes); both let a shard's messages that waited for a load go
   on. region_new points each region's `lifecycle` at shard.c's entity_lifecycle: a hook rather
   than a call, so that the stores sit below the shards that drive them. */
typedef struct {
    shoal_entity_t *(*create)(shard_t *s, const char *eid, entity_status_t status);
    void (*run_start)(shoal_entity_t *e);
    void (*deliver_waiting)(shoal_entity_t *e);
    void (*deliver_pending)(shard_t *s);
    /* the running entity, started when absent (NULL while it starts or stops) */
    shoal_entity_t *(*get_or_start)(shard_t *s, const char *eid);
    void (*receive)(shoal_entity_t *e, const void *data, size_t len, const shoal_node_t *origin,
                    uint64_t ask_id);
    void (*finish_now)(shoal_entity_t *e);
    /* new entities that may not start (remembering them was refused by a configured limit of
       the replicator: SHOAL_ELIMIT): the asks that waited for each are answered with status,
       the tells dropped, and each goes; the shard may be released after (do not use s) */
    void (*refuse)(shard_t *s, char *const *ids, size_t n, int status);
} entity_lifecycle_t;

typedef struct {
    int id;
    shoal_dead_letter_fn *fn;
    void *arg;
} dl_sub_t;

/* The latency histograms of a region's /metrics (ddata/histogram.h): asks of this node from
   acceptance to reply (outbox.c), entity-state saves from issue to acknowledgement (state.c), and
   handoffs as this region saw them, from BeginHandOff to the shard's next home (region.c). */
typedef struct {
    shoal_hist_t ask, save, handoff;
} region_latency_t;

struct shoal_region {
    shoal_sharding_t *sh;
    shoal_system_t *sys;
    const shoal_node_t *self;
    char *name;
    uint32_t type_hash;
    shoal_sharding_settings_t s; /* strings copied */
    shoal_entity_fns_t fns;
    void *arg;
    const entity_lifecycle_t *lifecycle; /* shard.c's, for remember.c and state.c */
    /* region.c's routing, for shard.c: a stopping shard's messages follow it to its next home */
    void (*route)(shoal_region_t *r, bmsg_t *m, const char *shard);
    bool proxy;
    shoal_replicator_t *rep; /* the role's: the user's, or one the node's sharding owns */

    zhashx_t *homes;  /* shard id -> home_t */
    home_t **home_by_num; /* default shard ids: shard number -> home (same objects) */
    zhashx_t *shards; /* shard id -> shard_t (hosted here) */
    size_t buffered;
    size_t buffer_logged; /* tenths of the buffer already reported */
    bqueue_t deferred;    /* made inside entity callbacks, routed when they return */
    bool draining;

    /* the coordinator */
    shoal_singleton_t *singleton;
    coordinator_t *coord;          /* when the singleton runs here */
    const shoal_node_t *coord_node; /* where we registered (or try to) */
    uint64_t coord_term; /* the coordinator's newest term heard of: a newer one registers again */
    bool registered;
    int64_t register_sent_at;
    bool nack_logged;

    /* asks */
    zhashx_t *asks; /* id -> ask_t */
    ask_t *asks_oldest, *asks_newest;
    uint64_t next_ask_id;
    /* queries in flight (cluster stats, regions) */
    zlistx_t *queries;
    uint64_t next_req_id;

    /* tells and asks from other threads */
    pthread_mutex_t qlock;
    shoal_buf_t inq;
    bool inq_posted;
    size_t inq_count;
    size_t inq_draining; /* (atomic) taken by the node thread, not routed yet */
    bool closed; /* under qlock: no more tells/asks from other threads (stopped, shut down) */
    uint64_t refused_uncounted; /* refusals past twice the buffer (atomic): counted, not itemized */

    /* shard events (events.c): the subscription to the coordinator's state, and whether its
       first notification (the baseline, not news) came */
    int events_sub;
    bool events_baseline;

    dl_sub_t *dl_subs;
    size_t n_dl_subs;
    int next_sub_id;
    struct {
        shoal_shard_moved_fn *fn;
        void *arg;
    } *moved_subs;
    size_t n_moved_subs;
    int64_t dl_logged_at;

    int64_t slow_tick_at;
    int64_t idle_next;          /* next idle-passivation sweep */
    uint32_t active_entity_limit; /* the region's, split among its shards (changeable) */
    /* sharded daemon process (daemon.c) */
    bool daemon;
    uint32_t daemon_workers;
    uint32_t keep_alive_ms;
    int64_t daemon_next;
    bool daemon_reading;
    life_t *life; /* for replicator callbacks about the region */
    bool shutting_down; /* graceful shutdown asked */
    bool shutdown_done;  /* the coordinator moved everything (or we gave up) */
    bool shutdown_timed_out;
    int64_t shutdown_deadline, shutdown_sent_at;
    uint64_t fences_at_shutdown; /* this node's fence count when the shutdown began */
    struct waiter *waiters; /* shoal_region_shutdown callers and the shutdown phase */
    bool stopped;
    const char *timer_firing; /* id of the in-memory timer being delivered */
    struct shoal_producer *producers; /* producers of this type on this node (node thread) */
    /* What the region's tick and stop drive for the clients of its public API that sit above
       region.c (daemon.c, producer.c): set by them when they attach, NULL until then. */
    void (*daemon_tick)(shoal_region_t *r, int64_t now);
    void (*producers_tick)(shoal_region_t *r, int64_t now);
    void (*producers_stopped)(shoal_region_t *r);
    shoal_region_stats_t stats;
    region_latency_t *lat; /* allocated with the region, recorded on the node thread */
};

struct shoal_sharding {
    shoal_cluster_t *c;
    shoal_system_t *sys;
    const shoal_node_t *self;
    shoal_region_t **regions;
    size_t n_regions;
    pthread_mutex_t lock; /* regions array (find from other threads) */
    int cluster_sub;
    int t_tick;
    shoal_replicator_t **owned_reps; /* replicators sharding started (one per role) */
    size_t n_owned_reps;
    zhashx_t *unreachable; /* node id -> node */
    zhashx_t *removed_set; /* node id -> node: members seen removed (homes there dropped) */
    size_t n_removed;
    shoal_member_status_t self_status;
    bool stopping;
    shoal_cluster_view_t view; /* the cluster as of the last event (node thread) */
    bool have_view;
    int64_t view_at;
    int depth;                 /* entity callbacks on the stack (tells from them are deferred) */
    shoal_buf_t scratch;
    /* client requests being answered on worker threads (admin.c): destroy waits for them */
    pthread_mutex_t admin_mu;
    pthread_cond_t admin_cv;
    size_t admin_jobs;
    bool admin_closed;
    /* shard events (events.c): each type's last known homes, to tell moves apart */
    zhashx_t *event_homes; /* "<type>\n<shard>" -> node id (interned) */
    /* control messages to this node's own regions and coordinators (sharding.c's dispatcher,
       posted by outbox.c: the file that sends sits below the ones that receive) */
    shoal_call_fn *deliver_self;
    /* LIMITS (sharding.h): the cap (any thread), the entities of every region here (shard.c
       counts them), the starts refused */
    _Atomic uint64_t max_entities;
    uint64_t n_entities, entities_refused;
    /* the caps of the replicators sharding starts (owned_reps), under lock: region_new applies
       them to the one it starts */
    shoal_replicator_limits_t rep_limits;
};

/* A control message to this node itself, posted to shoal_sharding_t.deliver_self. */
typedef struct {
    shoal_sharding_t *sh;
    const shoal_node_t *from;
    size_t len;
    uint8_t data[];
} self_msg_t;

/* =============================================================================================
 * The files' calls to each other, bottom first (the order at the top of this header)
 */

/* view.c: the cluster as sharding.c keeps it, and the node's regions (node thread) */
/* The member of a node in the cached view, or NULL. */
const shoal_member_t *sharding_member(shoal_sharding_t *sh, const shoal_node_t *node);
bool sharding_reachable(shoal_sharding_t *sh, const shoal_node_t *node);
bool sharding_removed(shoal_sharding_t *sh, const shoal_node_t *node);
shoal_region_t *sharding_region_by_hash(shoal_sharding_t *sh, uint32_t type_hash);
shoal_region_t *sharding_region_by_name(shoal_sharding_t *sh, const char *name);

/* outbox.c: what leaves a region (control messages, replies, dead letters, shard moves) and
   the asks of this node waiting for their replies */
void region_control_init(shoal_region_t *r, Shoal__Sharding__Control *m,
                         Shoal__Sharding__Control__Kind kind);
int region_send_control(shoal_region_t *r, const shoal_node_t *to, Shoal__Sharding__Control *m);
int region_send_home(shoal_region_t *r, const shoal_node_t *to, Shoal__Sharding__Control__Kind kind,
                     const char *shard, const shoal_node_t *region, uint64_t epoch, uint64_t term,
                     const shoal_node_t *const *fences, size_t n_fences);
/* The same with no term and no fences: what a region sends. */
int region_send_one(shoal_region_t *r, const shoal_node_t *to, Shoal__Sharding__Control__Kind kind,
                    const char *shard, const shoal_node_t *region, uint64_t epoch);
/* The shard's stored entity state is fenced at an epoch newer than its allocation here: tells
   the coordinator, which either reallocates it past the fence or answers with its newer home. */
void region_report_fenced(shoal_region_t *r, const char *shard, uint64_t epoch,
                          uint64_t fenced_at);
/* The asks table (r->asks: id -> ask_t, and a list by deadline). */
uint64_t region_ask_hash(const void *key);
int region_ask_cmp(const void *a, const void *b);
ask_t *region_ask_new(shoal_region_t *r, uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg);
/* Completes (and frees) an ask of this node, if it still waits. */
void region_ask_complete(shoal_region_t *r, uint64_t id, int status, const void *reply,
                         size_t len);
void region_asks_expire(shoal_region_t *r, int64_t now);
/* A reply to `to`'s ask (NULL or self: completes this node's own ask). */
void region_reply_to(shoal_region_t *r, const shoal_node_t *to, uint64_t ask_id, int status,
                     const void *data, size_t len);
/* The same, when there is an ask (ask_id not 0). */
void region_send_reply(shoal_region_t *r, const shoal_node_t *to, uint64_t ask_id, int status,
                       const void *data, size_t len);
void region_dead_letter(shoal_region_t *r, shoal_dead_letter_t why, const char *eid,
                        const void *msg, size_t len, const shoal_node_t *origin, uint64_t ask_id);
void region_moved_event(shoal_region_t *r, const char *shard, const shoal_node_t *from,
                        const shoal_node_t *to);

/* remember.c */
bool remember_on(const shoal_region_t *r);
void remember_shard_started(shard_t *s);
void remember_shard_free(shard_t *s);
/* A new entity that is not remembered yet: remember it (batched); it starts once written. */
void remember_add(shard_t *s, const char *eid);
/* It passivated: forget it (batched). */
void remember_remove(shard_t *s, const char *eid);
bool remember_known(const shard_t *s, const char *eid);
/* Stopped without passivating: started again after entity-restart-backoff. */
void remember_schedule_restart(shard_t *s, const char *eid);
void remember_tick(shard_t *s, int64_t now);
/* The coordinator: the shards that have remembered entities, allocated eagerly. */
void remember_all_shards(shoal_region_t *r, void (*fn)(const char *shard, void *arg), void *arg,
                         life_t *life);

/* state.c: entity state, reminders, the entity side of at-least-once delivery */
bool state_on(const shoal_region_t *r);
/* A shard starts here: fence, read, adopt (messages wait meanwhile). */
void state_shard_started(shard_t *s);
void state_shard_free(shard_t *s);
bool state_shard_waiting(const shard_t *s); /* messages must wait (loading) */
void state_entity_created(shoal_entity_t *e);
/* Before the start callback: the stored state and producers seen. */
void state_entity_starting(shoal_entity_t *e);
/* entity_finish asks: true = not yet (saves in flight; it finishes when they are in). */
bool state_entity_hold(shoal_entity_t *e);
void state_entity_free(shoal_entity_t *e);
/* The hand-over snapshot of an entity stopping for a handoff: saved as its state. */
void state_handover(shoal_entity_t *e, const void *snap, size_t len);
/* An ENV_RELIABLE message for a running entity. */
void state_reliable_deliver(shoal_entity_t *e, const void *data, size_t len,
                            const shoal_node_t *origin, uint64_t ask_id);
/* A reply inside receive of a reliable message: kept until its save is in. True = taken. */
bool state_capture_reply(shoal_entity_t *e, const void *data, size_t len);
void state_tick(shard_t *s, int64_t now);
/* In-memory timers: fired from the shard's tick (any type), dropped with their entity. */
void timers_tick(shard_t *s, int64_t now);
void timers_entity_gone(shoal_entity_t *e);
/* The coordinator allocates shards with state eagerly (reminders must fire). */
bool state_eager(const shoal_region_t *r);
/* 0 on the entity's node thread; else the refusal of `call` (logged, SHOAL_ETHREAD): an
   entity's calls belong to its callbacks, and other threads reach it with a message. Here, not
   in a file, because shard.c's entity calls and state.c's both check it. */
#define ENTITY_WAY_IN "shoal_region_tell or shoal_region_ask (an entity acts in its callbacks)"
static inline int entity_wrong_thread(const shoal_entity_t *e, const char *call)
{
    if (!e || shoal_system_on_thread(e->shard->r->sys))
        return 0;
    return shoal_wrong_thread(call, ENTITY_WAY_IN);
}

/* shard.c: buffered messages, the hosted shards and their entities, for region.c */
bmsg_t *bmsg_new(const char *eid, uint8_t flags, const shoal_node_t *origin, uint64_t ask_id,
                 const void *data, size_t len);
void bq_push(bqueue_t *q, bmsg_t *m);
bmsg_t *bq_pop(bqueue_t *q);
/* A message for shard s, hosted here: to its entity, started if need be, or waiting. */
void deliver_local(shoal_region_t *r, shard_t *s, const char *eid, uint8_t flags,
                   const shoal_node_t *origin, uint64_t ask_id, const void *data, size_t len);
/* Hosts shard `id` here (or raises its epoch when hosted already). */
shard_t *shard_host(shoal_region_t *r, const char *id, uint64_t epoch);
void shard_free(shard_t *s);
void shard_begin_stop(shard_t *s, bool graceful);
void shard_stop_now(shard_t *s);
/* Every hosted shard not stopping yet stops gracefully (a shutdown with nowhere to hand them). */
void shards_stop_here(shoal_region_t *r);
/* The hosted shards' share of the region's slow tick: handoff deadlines, stragglers stopped by
   force, idle passivation, remember-entities, entity state, timers. */
void shards_tick(shoal_region_t *r, int64_t now);
/* The entity lifecycle, for the region's `lifecycle` hook. */
extern const entity_lifecycle_t entity_lifecycle;

/* query.c: cluster-wide queries (regions, stats) and their control messages */
void region_query_control(shoal_region_t *r, const shoal_node_t *from,
                          const Shoal__Sharding__Control *m);
void region_queries_tick(shoal_region_t *r, int64_t now);
void region_queries_free(shoal_region_t *r);
void region_fill_state(shoal_region_t *r, bool with_entities, shoal_region_state_t *out);
/* Whether `shard` can be a shard of a type with settings s: with the default shard ids, the
   decimal numbers 0 .. number-of-shards - 1 as shoal_sharding_default_shard_id writes them; a
   custom shard_id function's ids are unknown, so any id can be. When not, why (naming the valid
   range) in msg. Here (inline) because the region (query.c) and the coordinator both check, and
   neither may call the other (tools/layers.txt). */
static inline bool sharding_shard_possible(const shoal_sharding_settings_t *s, const char *type,
                                           const char *shard, char *msg, size_t msglen)
{
    if (s->shard_id)
        return true; /* a custom function's ids: any id may be one */
    uint32_t n = s->number_of_shards ? s->number_of_shards : 1;
    /* exactly what shoal_sharding_default_shard_id writes: digits, no leading zero, below n */
    size_t len = strlen(shard);
    bool ok = len > 0 && len <= 10 && strspn(shard, "0123456789") == len &&
              (shard[0] != '0' || len == 1) && strtoull(shard, NULL, 10) < n;
    if (!ok && msg && msglen)
        snprintf(msg, msglen,
                 "%s has no shard '%s': its shards are 0 to %u (number-of-shards %u, the default "
                 "shard ids)",
                 type, shard, n - 1, n);
    return ok;
}

/* coordinator.c */
coordinator_t *coordinator_new(shoal_region_t *r, uint64_t term);
void coordinator_free(coordinator_t **self_p);
void coordinator_on_control(coordinator_t *co, const shoal_node_t *from,
                            const Shoal__Sharding__Control *m);
void coordinator_tick(coordinator_t *co);
void coordinator_cluster_changed(coordinator_t *co);
void coordinator_stats(coordinator_t *co, shoal_region_stats_t *out);

/* region.c: creating and stopping */
shoal_region_t *region_new(shoal_sharding_t *sh, const char *name,
                           const shoal_sharding_settings_t *s, const shoal_entity_fns_t *fns,
                           void *arg, bool proxy, int *err);
void region_stop(shoal_region_t *r);
void region_free(shoal_region_t *r);
/* region.c: what sharding.c hands it (node thread) */
void region_tick_all(shoal_sharding_t *sh);
void region_on_deliver(shoal_sharding_t *sh, const shoal_node_t *from, const uint8_t *data,
                       size_t len);
void region_on_reply(shoal_sharding_t *sh, const shoal_node_t *from, const uint8_t *data,
                     size_t len);
void region_on_control(shoal_region_t *r, const shoal_node_t *from,
                       const Shoal__Sharding__Control *m);
/* The cluster changed (node thread). */
void region_cluster_changed(shoal_region_t *r);
void region_node_removed(shoal_region_t *r, const shoal_node_t *node);
/* region.c, for producer.c: an ask with extra envelope flags (ENV_RELIABLE), from any thread. */
int region_ask_flags(shoal_region_t *r, const char *eid, uint8_t flags, const void *msg,
                     size_t len, uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg);

/* events.c: shard allocations and moves into the node's recent cluster events */
void sharding_events_start(shoal_region_t *r);
void sharding_events_stop(shoal_region_t *r);

/* http.c: sharding's routes, check and collector on the node's management endpoints: provided
   once sharding runs, withdrawn first thing at destroy */
int sharding_http_provide(shoal_sharding_t *sh);
void sharding_http_withdraw(shoal_sharding_t *sh);
/* The shard map as JSON (GET /cluster/shards[/<type>], shoal-cluster shards); other threads. */
int sharding_type_json(shoal_region_t *r, shoal_buf_t *out);
int sharding_shards_json(shoal_sharding_t *sh, const char *type, shoal_buf_t *out);

/* admin.c: sharding's client requests (shoal-cluster shards|rebalance|move|unpin); register on
   the node thread, close (waiting for answers in progress) before the regions stop. */
void sharding_admin_register(shoal_sharding_t *sh);
void sharding_admin_close(shoal_sharding_t *sh);
void sharding_admin_unregister(shoal_sharding_t *sh);

#endif
