/*  cluster_internal.h — private to membership/: the cluster object its files share, and what each
    of them offers the others.

    The files, bottom first: each calls only files listed before it (tools/layers.txt has exactly
    which, and test_docs holds the objects to it), so a reader can start at the top of this list.
    The helpers know nothing of the cluster object:
      phi.c          the phi accrual failure detector (phi.h)
      heartbeat.c    the heartbeat actor: its thread, listener, pings, probes, verdicts
   (heartbeat.h) state.c        the cluster state, the replicated type membership gossips (state.h)
      sbr.c          the split-brain resolver's decisions, a table of cases (sbr.h)
      discovery.c    seed discovery's resolver thread: contact points from DNS (discovery.h)
      settings.c     the settings' defaults, status names, the fence's timing and checks
      config.c       cluster settings from a configuration file (shoal_config_cluster)
    The core, the cluster on a node:
      cluster.c      the object's base: state lookups, may-act and may-host, sending (and what waits
                     for a handshake), cluster_call, cluster_change (then the react hook)
      events.c       cluster events: names, the differences between two states, subscribers
      kept.c         the kept membership: durable identities majorities count, loaded and saved
      follow.c       the replicators that follow the members, the system replicator's peers,
                     forgetting an identity
      reach.c        reachability: the heartbeat ring and its verdicts, THE FENCE (side_kept,
                     fence_update), the split-brain resolver's tick, the node tick and the freeze
      leader.c       the leader's actions on convergence and WeaklyUp, the leader tick
      gossip.c       gossip of the state: digest-only statuses and the seen set, partners, pushes
                     of every change, marks told to the leader, convergence announced, rounds
      join.c         joining's messages (InitJoin, its Ack and Nack, Join), handshakes, forming
                     alone, leaving and downing a member
      seeds.c        the join process: the seed list's and seed discovery's rules, the retry timer
      react.c        the reaction to every new state (the react hook's target), on_state
      calls.c        the public calls on a running cluster from any thread, the _sync twins
    What attaches to the core, each calling down into it:
      singleton.c    cluster singletons (shoal_singleton_new)
      shutdown.c     the coordinated shutdown's phases and tasks
      journal.c      the recent events (GET /cluster/events, `shoal-cluster events`)
      admin.c        views of the cluster and the operator's requests over a client connection
      dashboard.c    the dashboard page at / of the management endpoint
      metrics.c      membership's metrics, routes and readiness check on the management endpoint
      membership.c   the face: the cluster object's life (new, destroy, start, stop) and the
                     dispatch of membership's peer messages
    Where a lower file must reach a higher one, the higher one sets a hook (cluster_hooks_t, in
    the cluster object; each is called through its cluster_* wrapper below, a no-op while unset):
    `react` (react.c's reaction, for cluster.c's cluster_change, gossip.c and reach.c; set by
    react_attach), `shutdown_start` and `shutdown_react` (shutdown.c's, for react.c, join.c and
    seeds.c; set by shutdown_attach), both attached by shoal_cluster_new before the cluster
    starts, and `singletons_react` (singleton.c's, for react.c and reach.c; set when the first
    singleton attaches: with none, there is nothing to tell).
*/
#ifndef SHOAL_MEMBERSHIP_CLUSTER_INTERNAL_H
#define SHOAL_MEMBERSHIP_CLUSTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include "discovery.h"
#include "heartbeat.h"
#include "membership.h"
#include "sbr.h"
#include "state.h"

#include "cluster.pb-c.h"

#include <czmq.h>
#include <protobuf-c/protobuf-c.h>

#define CLUSTER_KEY "cluster"
#define SYSTEM_ROLE "__system"

/* peer message kinds of membership (the replicator's are 32..63) */
enum {
    K_INIT_JOIN = 0x0400,
    K_INIT_JOIN_ACK,
    K_JOIN,
    K_HANDOVER_DONE,
    K_EXITING_CONFIRMED, /* an exiting member finished its shutdown steps: it may be removed */
    K_INIT_JOIN_NACK,    /* an InitJoin's answer from a node in no cluster (Akka's InitJoinNack);
                            the body is an InitJoinAck with status 0 */
    K_FORGET,            /* drop a durable identity from the kept membership (an AdminRequest) */
    K_GOSSIP_STATUS,     /* digest-only gossip: clock digest and seen set (a GossipStatus) */
    /* protocol 2 of the SHOAL_PROTOCOL_NEXT test variant only (docs/protocol-versions.md): the
       same GossipStatus under a kind of its own, sent only while the cluster runs at 2 and to a
       peer that said it speaks 2. A normal build (protocol 1..1) neither sends nor registers it. */
    K_GOSSIP_STATUS_V2,
};

/* The protocol negotiation's own numbers (docs/protocol-versions.md), beside the public stats
   (kept out of shoal_cluster_stats_t, whose layout is part of the ABI). */
typedef struct {
    uint64_t joins_refused;      /* InitJoins and Joins refused: the joiner's range lacks ours */
    uint64_t refused_here;       /* this node's joins refused by a member for its protocol */
    uint64_t status_sent[3];     /* GossipStatus sent, by format (index 1, 2) */
    uint64_t status_received[3]; /* GossipStatus received, by format */
    uint64_t rewrites;           /* own record written again with its protocol_max */
} cluster_protocol_stats_t;

/* A data replicator that follows the members of its role, with what it was last told. */
typedef struct {
    shoal_replicator_t *r;
    char *role;
    /* node -> 1 + (counted ? 1 : 0) + age << 2, what add_peer was last called with; 0 = not a
       peer */
    zhash_t *told;
} follower_t;

typedef struct {
    int id;
    shoal_cluster_event_fn *fn;
    void *arg;
} subscriber_t;

typedef struct {
    shoal_phase_t phase;
    char *name;
    shoal_task_fn *fn;
    void *arg;
} task_t;

typedef struct {
    shoal_cluster_fn *fn;
    void *arg;
} callback_t;

/* A message waiting for the handshake with its receiver. */
typedef struct {
    const shoal_node_t *to;
    uint16_t kind;
    uint8_t *data;
    size_t len;
    int64_t expires;
} pending_msg_t;

/* How a file of the core reaches one above it (the top of this header); NULL until attached. */
typedef struct {
    void (*react)(shoal_cluster_t *c); /* react.c: the state changed (react_attach) */
    /* shutdown.c (shutdown_attach): stop this node's cluster part; a waiting phase may be done */
    void (*shutdown_start)(shoal_cluster_t *c, shoal_shutdown_reason_t why);
    void (*shutdown_react)(shoal_cluster_t *c);
    void (*singletons_react)(shoal_cluster_t *c); /* singleton.c: re-evaluate every singleton */
} cluster_hooks_t;

struct shoal_cluster {
    shoal_system_t *sys;
    struct cluster_events *events; /* recent events for the management endpoint (metrics.c) */
    const shoal_node_t *self;
    char *self_endpoint;
    shoal_cluster_settings_t s; /* strings deep-copied, owned */
    char **own_strings;
    size_t n_own_strings;

    shoal_replicator_t *sysrepl;
    int sub_id;
    cstate_t *state;    /* the join of everything seen and done here */
    cstate_t *prev;     /* what subscribers were last told about */
    bool was_member;    /* self has appeared in the state */
    zhash_t *voters;    /* the kept membership: durable id -> (void *)1 */
    bool fenced;        /* THE FENCE (membership.h): no shards, no singletons here */
    zhash_t *down_seen; /* downing off: node id -> int64 ms the leader first saw it Down */

    hb_actor_t *hb;
    hb_actor_t *hb_detached; /* handed from the node thread to the destroyer */
    char *hb_endpoint;
    zhash_t *my_unreachable; /* node id -> node: targets the heartbeat actor reports unreachable */

    /* joining */
    char **seeds;
    const shoal_node_t **seed_known; /* the incarnation answering at each seed, once known */
    bool *seed_nacked;               /* that seed answered: it is in no cluster either */
    size_t n_seeds;
    bool joining;
    int64_t join_started, join_last_try, join_logged;
    int64_t outside_since_wall; /* wall-clock ms since this node is in no cluster (view) */
    const shoal_node_t *join_contact;
    zhash_t *peer_at; /* while joining: endpoint -> the incarnation last handshaken there, for a
                         seed that became one after its connection was up (discovery) */
    /* seed discovery (membership.h, SEED DISCOVERY): the seeds above are then the contact points
       found, sorted (the lowest address first) */
    disc_t *disc;
    bool discovering;      /* joining through discovered contact points */
    uint64_t disc_gen;     /* the resolver's last result taken */
    int64_t disc_changed;  /* when the set of contact points last changed */
    int64_t disc_logged;   /* the last "waiting for contact points" line (rate limit) */
    char disc_why[200];    /* why the last resolution found nothing ("" when it found some) */
    char disc_status[400]; /* what the view says while discovering */

    /* timers */
    int t_tick, t_gossip, t_leader, t_retry, t_leader_soon;
    int64_t last_tick;
    uint32_t gossip_round;
    uint8_t pushed_clock[16];    /* digest of the clock push_on_change last spread */
    uint8_t announced_clock[16]; /* the leader's: digest of the clock it last announced converged */
    bool leader_moving;          /* the change being made is the leader's move on convergence */

    /* frozen after a clock gap until fresh gossip keeps it a member */
    bool frozen;
    bool reading_after_freeze;

    /* leader bookkeeping */
    zhash_t *joining_since; /* node id -> int64 ms first seen Joining */
    const shoal_node_t **sbr_unreachable;
    size_t n_sbr_unreachable;
    int64_t sbr_stable_since, sbr_unstable_since;
    bool sbr_undecided_logged; /* the debug line "no decision" once per picture */
    int leader_converged_logged; /* -1 unknown, 0 no, 1 yes: the debug line on each change */

    follower_t *followers;
    size_t n_followers;
    subscriber_t *subs;
    size_t n_subs;
    int next_sub_id;
    bool notifying;

    pending_msg_t *pending;
    size_t n_pending;

    /* shutdown */
    task_t *tasks;
    size_t n_tasks;
    bool shutting_down, terminated;
    /* terminated, for other threads: shoal_cluster_terminated is polled by mains (a node
       call each time would wake the node thread for nothing) */
    atomic_bool terminated_seen;
    /* shoal_cluster_shutdown_wait waits on this for terminated_seen (cluster_mark_terminated) */
    pthread_mutex_t term_mu;
    pthread_cond_t term_cv;
    int64_t downed_grace_until; /* a downed node gossips until then before it goes quiet */
    zhash_t *exiting_confirmed; /* node id -> node: Exiting members that confirmed (Akka's
                                   ExitingConfirmed); the leader removes only those */
    int t_confirm, t_grace;
    shoal_shutdown_reason_t shutdown_reason;
    int phase; /* current phase while shutting down */
    int phase_outstanding;
    bool own_waiting; /* membership's own step of the phase is not done yet */
    uint64_t phase_gen;
    int t_phase;
    void **tokens; /* done tokens handed to tasks, freed at the end */
    size_t n_tokens;
    callback_t *on_up, *on_removed;
    size_t n_on_up, n_on_removed;
    bool up_called, removed_called;

    /* singletons */
    shoal_singleton_t **singletons;
    size_t n_singletons;

    shoal_cluster_stats_t stats;
    uint32_t protocol;       /* the cluster's protocol version as this node computes it (react) */
    bool protocol_rewritten; /* own record written again with its protocol_max (once) */
    cluster_protocol_stats_t pstats;
    /* joins refused because a live, reachable member already has the joiner's durable identity
       (join.c, identity_in_use) */
    uint64_t joins_refused_identity;
    uint64_t rng; /* gossip partners (xorshift64*) */
    cluster_hooks_t hooks;
};

/* The hooks' calls (cluster_hooks_t). */
static inline void cluster_react(shoal_cluster_t *c)
{
    if (c->hooks.react)
        c->hooks.react(c);
}

static inline void cluster_shutdown_start(shoal_cluster_t *c, shoal_shutdown_reason_t why)
{
    if (c->hooks.shutdown_start)
        c->hooks.shutdown_start(c, why);
}

static inline void cluster_shutdown_react(shoal_cluster_t *c)
{
    if (c->hooks.shutdown_react)
        c->hooks.shutdown_react(c);
}

static inline void cluster_singletons_react(shoal_cluster_t *c)
{
    if (c->hooks.singletons_react)
        c->hooks.singletons_react(c);
}

/* Small helpers */
static inline int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void endpoint_of(const shoal_node_t *n, char *buf, size_t cap)
{
    snprintf(buf, cap, "tcp://%s:%u", shoal_node_host(n), (unsigned)shoal_node_port(n));
}

/* cluster.c */
/* Runs fn on the node thread (directly when already there). */
int cluster_call(shoal_cluster_t *c, shoal_call_fn *fn, void *arg);
shoal_member_status_t cluster_self_status(shoal_cluster_t *c);
/* /health/ready's "cluster" check (metrics.c): this node Up, allowed to act, a quorum of the Up
   members reachable; false with why in reason. Any thread (it reads a view). shoal-member asks it
   too, for its supervisor's READY=1. */
bool cluster_ready(shoal_cluster_t *c, shoal_buf_t *reason);
/* Applies fn to the local state (a change by this node), hands the result to the system
   replicator and reacts. */
typedef int(cstate_change_fn)(cstate_t *st, const shoal_node_t *self, void *arg);
int cluster_change(shoal_cluster_t *c, cstate_change_fn *fn, void *arg);
/* Hands the local state to the system replicator (which merges it into its copy). */
void cluster_publish(shoal_cluster_t *c);
int cluster_send(shoal_cluster_t *c, const shoal_node_t *to, uint16_t kind,
                 const ProtobufCMessage *msg);
/* Sends what waits for the handshake with `up` (NULL: none), drops what expired. */
void pending_flush(shoal_cluster_t *c, const shoal_node_t *up);
void cluster_member_view(const cstate_t *st, const cmember_t *m, shoal_member_t *out);
const shoal_node_t *cluster_find_in(const cstate_t *st, const char *id_or_address);
bool cluster_may_act(shoal_cluster_t *c);
bool cluster_may_host(shoal_cluster_t *c); /* may act and not fenced */
/* The highest protocol version this node announces: its build's, capped by the pin
   (shoal/cluster/protocol-version). */
uint32_t cluster_own_protocol(const shoal_cluster_t *c);

/* events.c */
/* Emits the differences between `old` (NULL = nothing) and `cur` (to every subscriber, or only
   to only_sub). */
void emit_diff(shoal_cluster_t *c, const cstate_t *old, const cstate_t *cur, int only_sub);

/* kept.c */
void voters_load(shoal_cluster_t *c); /* from the store (shoal_cluster_new, before the start) */
void voters_save(shoal_cluster_t *c);
void voters_update(shoal_cluster_t *c); /* from the state */

/* follow.c */
/* Drops a durable identity from the kept membership here (and tells the members when `tell`). */
int cluster_do_forget(shoal_cluster_t *c, const char *durable_id, bool tell);
/* The system replicator's and the followers' peers, from the state. */
void feed_replicators(shoal_cluster_t *c);

/* reach.c */
void feed_heartbeats(shoal_cluster_t *c); /* the heartbeat ring, from the state */
void sbr_tick(shoal_cluster_t *c, int64_t now, bool leader);
uint32_t node_tick_ms(const shoal_cluster_settings_t *s);
void node_tick(shoal_system_t *sys, void *arg);

/* leader.c */
bool leader_has_work(const shoal_cluster_t *c);
void leader_soon(shoal_cluster_t *c);
void leader_tick(shoal_system_t *sys, void *arg);

/* gossip.c */
size_t anti_entropy_peer(shoal_replicator_t *r, const shoal_node_t *const *peers, size_t n,
                         void *arg);
/* Tells every member this exiting node is done with its shutdown steps (repeated until
   Removed). */
void cluster_confirm_exiting(shoal_cluster_t *c);
/* Pushes the state to every member now (a downed node's last words). */
void cluster_tell_everyone(shoal_cluster_t *c);
void on_gossip_status(shoal_cluster_t *c, const shoal_node_t *from,
                      const Shoal__Cluster__GossipStatus *m);
void push_on_change(shoal_cluster_t *c);
void tell_leader_seen(shoal_cluster_t *c);
void announce_convergence(shoal_cluster_t *c);
void gossip_tick(shoal_system_t *sys, void *arg);

/* join.c */
bool is_seed_self(const shoal_cluster_t *c, const char *seed);
void send_init_join(shoal_cluster_t *c);
void form_alone(shoal_cluster_t *c, const char *why);
void seed_resolve(const char *seed, char *out, size_t cap);
void set_seeds(shoal_cluster_t *c, const char *const *seeds, size_t n, bool keep_answers);
void on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
             const shoal_node_t *old, uint64_t count, void *arg);
void on_init_join(shoal_cluster_t *c, const shoal_node_t *from, const Shoal__Cluster__InitJoin *m);
void on_init_join_ack(shoal_cluster_t *c, const shoal_node_t *from,
                      const Shoal__Cluster__InitJoinAck *m);
void on_init_join_nack(shoal_cluster_t *c, const shoal_node_t *from);
void on_join(shoal_cluster_t *c, const shoal_node_t *from, const Shoal__Cluster__Join *j);
int cluster_do_leave(shoal_cluster_t *c, const shoal_node_t *node);
int cluster_do_down(shoal_cluster_t *c, const shoal_node_t *node);

/* seeds.c */
int cluster_do_join(shoal_cluster_t *c, const char *const *seeds, size_t n);
void join_retry_arm(shoal_cluster_t *c);

/* react.c */
void react_attach(shoal_cluster_t *c); /* sets the react hook */
void on_state(shoal_replicator_t *r, shoal_change_t change, const char *key,
              const shoal_crdt_t *value, void *arg);

/* singleton.c */
void singletons_react(shoal_cluster_t *c);
void singletons_on_handover(shoal_cluster_t *c, const shoal_node_t *from, const char *name);
void singletons_stop_all(shoal_cluster_t *c);

/* shutdown.c */
void shutdown_attach(shoal_cluster_t *c); /* sets the shutdown hooks */
void shutdown_start(shoal_cluster_t *c, shoal_shutdown_reason_t why);
void shutdown_react(shoal_cluster_t *c); /* the state changed: a waiting phase may be done */
void shutdown_free(shoal_cluster_t *c);
/* Sets terminated (node thread) and wakes shoal_cluster_shutdown_wait. */
void cluster_mark_terminated(shoal_cluster_t *c);

/* journal.c */
/* Starts keeping the recent events (cluster_http_provide); stops and frees them. */
void cluster_events_start(shoal_cluster_t *c);
void cluster_events_stop(shoal_cluster_t *c);
/* The recent events after `since` as JSON (metrics.c, admin.c; node thread). */
void cluster_events_json(shoal_cluster_t *c, uint64_t since, shoal_buf_t *out);

/* admin.c */
void admin_register(shoal_cluster_t *c);
void admin_withdraw(shoal_cluster_t *c);
int cluster_view_fill(shoal_cluster_t *c, shoal_cluster_view_t *out);
/* shoal_cluster_view_json with the protocol versions: the cluster's ("protocol_version") and
   each member's ("protocol"), from the state (node thread). */
void cluster_view_json(shoal_cluster_t *c, const shoal_cluster_view_t *v, shoal_buf_t *out);
/* GET /cluster/members/<member> (node thread; arg is the cluster): one member's record as
   cluster_view_json gives it, 404 for a name no member has. */
void cluster_member_route(shoal_system_t *sys, const shoal_http_request_t *req,
                          shoal_http_reply_t *rep, void *arg);

/* dashboard.c: the dashboard page at / */
void cluster_http_dashboard(shoal_metrics_t *m, shoal_cluster_t *c);

/* metrics.c */
/* membership's routes, check and collector on the node's management endpoints: provided once
   the cluster runs, withdrawn first thing at destroy */
int cluster_http_provide(shoal_cluster_t *c);
void cluster_http_withdraw(shoal_cluster_t *c);

#endif
