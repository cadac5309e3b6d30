/*  shards.h — sharding on real member nodes on loopback, in this process, for the sharding tests:
    start a member with sharding and a region of the counter type, stop it (orderly or as a
    crash), threads that keep telling, and a table of what every entity saw.

    THE COUNTER TYPE. Its entities record, in one table shared by every node of the process (a
    mutex: the callbacks run on the node threads), what they receive:
      "<sender>:<seq>"    a numbered message; per sender the seq must be the last one + 1 (a
                          gap, a duplicate or a reordering is counted as an order error);
      "<id>|<rest>"       the same, for types whose entity id is taken from the message;
      "get"               an ask: replies "<messages> <sender>:<last seq> ..." (senders in first
                          seen order);
      "whoami"            an ask: replies "<node index> <incarnation>";
      "hold"              an ask: keeps the sender (shoal_entity_sender), answers nothing;
      "release"           answers the held sender with "released" (shoal_region_reply);
      "tellreply"         records what shoal_entity_reply returns for a tell;
      "passivate"         shoal_entity_passivate;
      "stubborn"          from now on ignores the stop message (a handoff must stop it by force);
      "fwd:<id>:<msg>"    tells <msg> to entity <id> of the same type, from inside;
      "stop"              the stop message (TSHARD_STOP): counted, then shoal_entity_stop.
    At every start the table checks that no other incarnation of the entity is alive and that no
    other node has a live entity of the same shard (at most one owner per shard): a breach is
    counted, never asserted on the node thread.
*/
#ifndef SHOAL_TEST_SHARDS_H
#define SHOAL_TEST_SHARDS_H

#include <pthread.h>

#include "durable.h"
#include "sharding.h"

#define TS_MAX       10
#define TSHARD_TYPE  "counter"
#define TSHARD_STOP  "stop"
#define TREC_SENDERS 4
#define TREC_LOG     16

typedef struct {
    int node; /* index in tsn */
} tcounter_arg_t;

typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_sharding_t *sh;
    shoal_region_t *r; /* the counter type's region (or proxy); NULL when not started */
    tcounter_arg_t arg;
} tsnode_t;

extern tsnode_t tsn[TS_MAX];

/* Fast sharding settings (shoal_sharding_settings_fast) with the timeouts stretched by tscale()
   and TSHARD_STOP as the stop message. */
void tshard_settings(shoal_sharding_settings_t *s);

typedef struct {
    const shoal_cluster_settings_t *cluster;   /* NULL: tmember_settings */
    const shoal_sharding_settings_t *sharding; /* NULL: tshard_settings */
    bool proxy;                                /* shoal_region_start_proxy */
    bool no_region; /* membership and sharding only; start the region later */
    int seed;       /* join through node `seed`; -1 or i itself: form the cluster */
    bool no_join;   /* do not join yet (the test calls shoal_cluster_join) */
    int port;       /* bind 127.0.0.1:port (tfree_port: below the ephemeral range, so this node
                       sorts first by address); 0: an ephemeral port */
    const char *app_version;
} tsnode_opts_t;

/* Starts node i: a system on 127.0.0.1:0, membership joining through o->seed, sharding and
   (unless no_region) a region of TSHARD_TYPE. */
void tsnode_start(int i, const tsnode_opts_t *o);
/* Nodes 0..n-1 with o's options (seed 0; NULL: the defaults), node 0 first and alone, each
   node's arg.node set to its index; returns once all n are Up. */
void tsnode_start_cluster(int n, const tsnode_opts_t *o);
/* Starts a region of `type` with the counter callbacks on node i (s NULL: tshard_settings). */
shoal_region_t *tsnode_region(int i, const char *type, const shoal_sharding_settings_t *s,
                              bool proxy);
/* A crash: node i is cut from every peer (nothing more gets out, not even a goodbye), then its
   sharding, membership and system are destroyed without leaving. */
void tsnode_crash(int i);
/* Destroys node i (sharding, membership, system). NULL-safe per part. */
void tsnode_stop(int i);
/* cmocka teardown: stops sender threads, then every node; resets the table. */
int tsnode_teardown(void **state);
/* Index of the node whose id is `node`, or -1. */
int tsnode_index(const shoal_node_t *node);

/* Waits until the `n` nodes whose bit is set in `mask` each see exactly those members, all Up,
   converged; fails the test (printing the views) after timeout_ms (scaled). */
void tsnode_wait_up(unsigned mask, int timeout_ms);
/* Index of the oldest Up member (up-number lowest) as node `viewer` sees it: where singletons,
   the coordinator among them, run. */
int tsnode_oldest(int viewer);
/* Waits until every node in `mask` with a region reports healthy (registered with its
   coordinator) and node `asker`'s coordinator knows `regions` regions. */
void tsnode_wait_registered(unsigned mask, int asker, size_t regions, int timeout_ms);

/* A replicator for node i's regions (settings.replicator) on an LMDB store in `dir` (created;
   durable keys "shard-*": the shards' list, remembered entities and entity states outlive a
   restart of every node), following node i's cluster. *durable gets the store; close it after
   destroying the replicator. Fails the test on error. */
shoal_replicator_t *tsnode_durable_replicator(int i, const char *dir, shoal_durable_t **durable);

/* Shards hosted by node i's region now (-1 on error). */
int tsnode_shard_count(int i);

/* --- the table of entities -------------------------------------------------------------------- */
typedef struct {
    int starts, stops, live;
    int node;      /* node of the live incarnation (-1: none), else of the last one */
    int stop_msgs; /* stop messages received */
    int messages;  /* numbered messages received, every sender */
    int order_errors;
    int tell_reply_rc;     /* what shoal_entity_reply returned for a tell (1: not tried) */
    int release_rc;        /* what shoal_region_reply returned for the held sender (1: not tried) */
    int inc_log[TREC_LOG]; /* incarnation (1, 2, ...) that received each of the first messages */
    int n_log;
    int n_senders;
    struct {
        char name[16];
        long last, count;
    } senders[TREC_SENDERS];
} trec_t;

void trec_reset(void);
/* A copy of the record of entity `id` of `type` (zeros and node -1 when it never started). */
trec_t trec_get(const char *type, const char *id);
/* Seq of the last message from `sender` to entity id (0: none). */
long trec_last(const char *type, const char *id, const char *sender);
/* Breaches seen so far: two live incarnations of an entity, two nodes with live entities of one
   shard, order errors (gaps, duplicates, reorderings). */
typedef struct {
    int double_entity, double_shard, order_errors;
    int entities_started, entities_live;
    int paused_receipts; /* messages an entity received while its node was paused (stalled past
                            stable-after, not yet confirmed a member): must stay 0 */
} ttotals_t;
ttotals_t trec_totals(void);
/* Live entities of `type` on node i. */
int trec_live_on(const char *type, int node);
/* The counter type's callbacks (type_arg: a tcounter_arg_t). */
const shoal_entity_fns_t *tcounter_fns(void);
/* The saver's callbacks: each message is saved as the entity's state (shoal_entity_save_reply),
   the ask answered "saved" once the save is durable. */
const shoal_entity_fns_t *tsaver_fns(void);

/* Entity ids "<prefix><k>" that fall in n distinct shards of number_of_shards under the default
   shard id (ids[j] written into a caller array of n strings of 32 bytes). */
void tshard_pick_ids(const char *prefix, uint32_t number_of_shards, size_t n, char (*ids)[32]);

/* --- dead letters and moves ------------------------------------------------------------------- */
/* Counts the dead letters of node i's region (per reason, and the last entity id). */
void tdl_watch(int i);
int tdl_count(int node, shoal_dead_letter_t reason);
int tdl_total(void);
/* Counts shard moves reported on node i (to: per destination node index). */
void tmoves_watch(int i);
int tmoves_to(int node);

/* --- asks ------------------------------------------------------------------------------------- */
typedef struct {
    int calls; /* done ran this many times (must end at 1) */
    int status;
    char reply[128];
} task_t;
/* shoal_region_ask whose completion lands in *t (read with task_get). */
int task_ask(shoal_region_t *r, const char *id, const char *msg, uint32_t timeout_ms, task_t *t);
task_t task_get(const task_t *t);

/* --- senders: threads that keep telling numbered messages ------------------------------------- */
typedef struct {
    shoal_region_t *r;
    char name[16];   /* sender name in "<name>:<seq>" */
    char (*ids)[32]; /* entities, told in turn (a copy) */
    size_t n_ids;
    int pause_us; /* between rounds */
    /* results (read after tsender_stop) */
    long *sent;   /* per entity: last seq accepted */
    long refused; /* SHOAL_EBUFFER answers (the same seq is told again next round) */
    int errors, last_error;
    long rounds;
    /* private */
    pthread_t th;
    int stop;
    bool running;
} tsender_t;
/* Starts a thread telling "<name>:<seq>" to each of ids in turn through r, then pausing
   pause_us, until stopped. Heap-allocated so that the teardown can stop and free it after a
   failed assertion left the test's frame. */
tsender_t *tsender_start(shoal_region_t *r, const char *name, char (*ids)[32], size_t n_ids,
                         int pause_us);
/* Waits until the sender has done at least `rounds` more rounds (false after timeout_ms). */
bool tsender_wait_rounds(tsender_t *s, long rounds, int timeout_ms);
void tsender_stop(tsender_t *s);
/* Stops and frees; NULL-safe. */
void tsender_free(tsender_t **s_p);
/* Waits until every entity of s received every seq s sent (false after timeout_ms, scaled). */
bool tsender_all_received(const tsender_t *s, const char *type, int timeout_ms);

#endif
