/*  membership.h — Shoal cluster membership: who is in the cluster, carried by the replicator.

    This header is the whole public API of membership/.

    THREADS: the rule of ddata.h (THE THREAD RULE). Calls said "Thread-safe" or "Any thread"
    work from any thread (join, leave, down, view, shutdown, shutdown_wait, stats, may_act,
    self_status, find, forget, follow, add_task); the node-thread ones (subscribe, unsubscribe,
    on_up, on_removed) have _sync twins and refuse other threads with SHOAL_ETHREAD, naming the
    twin; shoal_cluster_paused and shoal_cluster_note_event are for the node thread only (the
    layers above call them from their handlers). Every callback (events, on_up, on_removed,
    shutdown tasks, singleton start/stop) runs on the node thread. shoal_cluster_new returns
    NULL with *err and the words in shoal_last_error_detail().

    STARTING AND STOPPING A NODE, in this order:
        sys = shoal_system_new(&ss, &err);                 // the node: its thread and socket
        c   = shoal_cluster_new(sys, &cs, &err);           // membership (joins the seeds)
        r   = shoal_replicator_new(sys, &rs, &err);        // data replicators ...
        shoal_cluster_follow(c, r);                        // ... that follow the members
        ... work: shoal_replicator_*_sync from main, or node-thread calls in callbacks ...
        shoal_cluster_shutdown_wait(c, 30000);             // leave; the others see it Removed
        shoal_cluster_unfollow(c, r); shoal_replicator_destroy(&r);
        shoal_cluster_destroy(&c);
        shoal_system_destroy(&sys);

    THE CLUSTER STATE is one replicated value (a custom ddata type, "ClusterState") kept under
    the key "cluster" of the node's SYSTEM REPLICATOR (role "__system", whose peers are every
    member not Removed). It holds
      - the members: node id (host:port:uid), status, roles, up-number (age order: lower is
        older), app version, heartbeat endpoint, public key;
      - reachability: for each observer, the members it cannot reach, with a version only that
        observer raises;
      - a vector clock, raised by whichever node changes the state;
      - the seen set: the members that have seen this clock (Akka's Gossip.seen). A change
        empties it (the writer then marks itself); "seen the current version" = in the set.
    Merge is a join (status by precedence Joining < WeaklyUp < Up < Leaving < Exiting < Down <
    Removed, up-number the lowest assigned, reachability rows by their observer's version, the
    clock pointwise max; the seen sets of equal clocks are united, a newer clock's set wins, and
    concurrent clocks merge to a clock nobody has seen yet), so gossip in any order, any number
    of times, converges. Reachability rows exist only while their observer cannot reach someone
    (the clock remembers a row dropped since). The state of 1,000 members is about 120 KB
    (format 2; format 1, a clock per member in the seen table, was 3 MB) and merges in about
    0.3 ms.
    Removed members stay as tombstones so they cannot come back.

    CONVERGENCE: every member that is Up or Leaving, and every unreachable member that is not
    Down or Exiting, has seen the current version. The LEADER is the first member in address
    order (shoal_node_cmp: the byte order of "host:port:uid") among the reachable ones that are Up
   or Leaving (else among the reachable ones not Down); every node computes the same. Role leaders
   likewise within a role. The leader, only on convergence: Joining/WeaklyUp -> Up (once
   min-nr-of-members, global and per role, is reached; up-numbers in address order), Leaving ->
   Exiting, Exiting -> Removed, Down -> Removed. Without convergence it moves a Joining member that
   has waited weakly-up-after to WeaklyUp. Downing needs no convergence.

    GOSSIP (the system replicator's policy): a new clock is pushed at once, whole, to two members
    (ones that have not seen it first); pushes are push-pull (a receiver that knew more answers
    with its state). A change of the seen set alone is pushed as a GossipStatus (below) to two
    members while the cluster has at most reduce-gossip-different-view-probability (400)
    members; above, the rounds spread it (each member would otherwise pass on every mark it
    learns). Rounds then finish the job: every gossip interval a node sends one member a
    GossipStatus, three times per interval while its view has not converged (Akka: while fewer
    than half have seen the version); the peer is one that has not seen it with probability 0.8
    (lowered above 400 members). A GossipStatus (Akka's) is the clock's digest, the sum of its
    counters, and the seen set as one bit per member (about 220 bytes on the wire at 1,000
    members, against about 48 KB for the whole state compressed): a receiver with the same clock
    merges the seen set (and answers with its own if the sender lacks part of it); with another
    clock, the side whose sum is higher or equal sends its whole state, the other asks for it. So
    the whole state crosses only where a clock is behind. Marks flow to the leader at once: a
    member whose mark convergence waits for (Up or Leaving) sends the leader a GossipStatus when
    it has seen a new clock, and the leader, once the clock has converged and it has no move to
    make, announces it with a GossipStatus to every member; its move on convergence is pushed
    whole to every member at once rather than to two (all three up to
    reduce-gossip-different-view-probability members). A push's answer (push-pull) is not
    answered again. While some member has not seen the
    current clock the replicator's own anti-entropy waits (it would ship whole states because
    the seen sets differ); once all have, only its small digest status goes out. Pushes older
    than gossip-time-to-live are dropped by the receiver.

    JOINING. A node with seed nodes asks them to let it in (InitJoin); the first that answers gets
    the Join; the first seed (its own address first in the list) forms the cluster alone when no
    other seed answers within seed-node-timeout. Joins are retried every
    retry-unsuccessful-join-after until one succeeds (or the node gives up after
    shutdown-after-unsuccessful-join-seed-nodes, if set). A new incarnation (same host:port, new
    uid) joining downs the old one and is let in once the old one is Removed.

    FAILURE DETECTION. Each member is watched by monitored-by-nr-of-members others, picked from a
    ring ordered by a hash of the node ids (every node computes the same ring). Heartbeats are
    sent and answered by a small actor with its own socket (the member's heartbeat endpoint), not
    by the node loop, so a node busy in callbacks is not taken for dead; that actor stops
    answering when the node loop has not ticked for loop-stall-bound, so a wedged node is caught.
    Its socket is a listener bounded like the node's own (ddata.h, LISTENERS): frames over 4 KiB
    reset the connection, at most the node's max_inbound_connections connections, so what
    connections that have not completed the ZeroMQ handshake can make it hold is at most
    max_inbound_connections x (4 KiB + about 40 KiB of libzmq buffers): 44 MiB (46,137,344
    bytes) with the default 1024, and a heartbeat endpoint is refused (SHOAL_EINVAL) if peers
    could not dial it (a wildcard host).
    A phi-accrual detector (Akka's: window of intervals, min-std-deviation, acceptable pause,
    threshold) decides; before a monitor reports a member unreachable it asks indirect-probes other
    members to reach it, and a monitor that is itself late widens its own bounds (Lifeguard). A
    node that finds a gap in its own clock longer than stable-after (SIGSTOP, a VM pause) stops
    acting (leader, singletons, shards: shoal_cluster_may_act is false) until fresh gossip keeps
    it a member.

    SPLIT-BRAIN RESOLVER, on by default with keep-majority (Akka has no automatic downing by
    default): once the set of unreachable members has been stable for stable-after, the leader of
    each side decides. keep-majority (ties keep the side holding the lowest address), keep-oldest
    (down-if-alone), static-quorum, down-all; each optionally limited to a role. Members that are
    unreachable only to some observers (indirectly connected) are downed on their own, never the
    whole cluster. When unreachability keeps changing for down-all-when-unstable (after
    stable-after), Akka downs everyone; here that last resort is kept for a clean cut whose picture
    keeps changing: when every live unreachable member is indirectly connected (flapping links, a
    member with a bad view) only a cover of those links is downed, as when stable, since there is
    no second side that could keep itself. A downed or removed node stops itself, only
    itself, and its uid is quarantined: it must restart (new uid) to join again.

    DATA REPLICATORS follow the members: shoal_cluster_follow(r) makes a replicator of role R
    track the members having role R ("" = every member): Up and Leaving members are counted peers,
    Joining and WeaklyUp members receive data uncounted, removed members are pruned. A followed
    replicator serves MAJORITY and ALL only while this node is Up, Leaving or Exiting (its quorum
    gate, see ddata.h): before the node joins, while it is Joining or WeaklyUp, after it is downed
    or removed, they complete with SHOAL_ENOQUORUM; LOCAL and FROM_N run as always.

    KEPT MEMBERSHIP. A majority counted over whoever is in the cluster now is not enough across a
    restart of every node: the first node back forms a cluster of one, and its "majority" is
    itself. With durable_id and store set, each member carries the identity of its data
    directory, and every node keeps, in its store, the identities of the members that were Up
    (its kept membership). A member leaves the kept membership only when the cluster removes it
    (a graceful leave, a down agreed by the cluster or by the split-brain resolver, all seen as
    Removed in the converged state) and no live incarnation carries its identity; never because
    one node restarted and does not see it. The followed replicators count MAJORITY and ALL over
    it as well (shoal_replicator_set_voters): they need answers from a majority of the kept
    identities. Hence the guarantee: for durable keys in a store with synced writes, a
    WriteMajority acknowledged before a restart of every node and a ReadMajority after it
    intersect, because both majorities are majorities of the same kept set (a node restarted from
    its directory answers for its identity with what it stored). A joiner whose identity a
    reachable member at another address already has (neither Down nor Removed: a copy of its
    directory) is refused until that member is gone (counted:
    shoal_cluster_joins_refused_identity_total), so two live members never answer for one
    identity. A store with write-behind or nosync leaves a window: what was acknowledged in the last write-behind interval (or since the
    last OS flush) may be lost by a node that dies, and that node may be the only one of the
    intersection. A node whose directory is emptied or replaced has a new identity: it joins as a
    new member and never answers for the old one. An identity that will never return (a disk
    lost for good) is dropped with shoal_cluster_forget (shoal-cluster forget ID), which tells
    every member it reaches; until then majorities need the others. The kept membership also
    decides when the first seed may form a cluster after seed-node-timeout: only once enough
    seeds answered that they are in no cluster to make, with it, a majority of the kept
    identities. A first seed restarted behind a partition then waits and joins the cluster it
    finds when the partition heals, instead of forming a second one; after a restart of every
    node (or a resolver that downed everyone) it forms the one cluster the others join.

    SEED DISCOVERY (Akka Management's Cluster Bootstrap), instead of a written seed list: the node
    resolves one DNS name (discovery "dns:NAME:PORT" for A/AAAA records and a fixed port, or
    "srv:_shoal._tcp.NAME" for SRV records with theirs; a Kubernetes headless service) every
    discovery interval, on a helper thread (the node loop never waits for DNS), and the addresses
    found are its CONTACT POINTS. It asks each whether it is in a cluster (the seeds' InitJoin):
    the first that is lets it in. Only when at least required-contact-point-nr contact points were
    found, every other one answered that it is in no cluster, and the set has not changed for
    stable-margin, does the contact point with the lowest address (address bytes, then port) form
    the cluster, if that is this node; the others join it. The kept-membership rule of the first
    seed holds here too: a node with kept membership forms a cluster only when a majority of the
    kept identities answered that they are in no cluster, so a restarted node never forms a second
    one. A name that resolves to nothing, or to this node alone, is logged (at once, then every
    10 s) and the view says so (shoal_cluster_view_t.discovery, shown by shoal-cluster members).
    This node's own contact point is found only if it is bound on the address the name gives (bind
    on the pod IP, not on a wildcard). Discovery stops once the node is a member; an explicit
    shoal_cluster_join replaces it. Seed nodes and discovery together are refused (SHOAL_EINVAL).

    SHUTDOWN runs in phases (like Akka's coordinated shutdown): tasks registered per phase, each
    phase with a timeout; it runs on leave, on being downed or removed, and on
    shoal_cluster_shutdown. Sharding hands off its shards in SHOAL_PHASE_SHARDING.

    SINGLETONS run on the oldest Up member having their role, are handed over when it leaves and
    started elsewhere after it is downed and removed; each incarnation has a term that only grows.

    THREADS. Everything runs on the node thread, except the functions marked thread-safe (they go
    through shoal_system_call). Callbacks run on the node thread and must not block.
*/
#ifndef SHOAL_MEMBERSHIP_H
#define SHOAL_MEMBERSHIP_H

#include "ddata.h"

#ifdef __cplusplus
extern "C" {
#endif

/* exported from libshoal.so: see "The public ABI" in ddata.h */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define SHOAL_ENOTMEMBER -40 /* no such member, or this node is not (or no longer) a member */
#define SHOAL_ESTATE     -41 /* not allowed in the member's current status */

typedef enum {
    SHOAL_MEMBER_JOINING = 1,
    SHOAL_MEMBER_WEAKLY_UP = 2,
    SHOAL_MEMBER_UP = 3,
    SHOAL_MEMBER_LEAVING = 4,
    SHOAL_MEMBER_EXITING = 5,
    SHOAL_MEMBER_DOWN = 6,
    SHOAL_MEMBER_REMOVED = 7,
} shoal_member_status_t;

const char *shoal_member_status_name(shoal_member_status_t s);

/* A member as the API shows it (borrowed: valid during the callback, or until the view that
   holds it is freed). */
typedef struct {
    const shoal_node_t *node;
    shoal_member_status_t status;
    uint64_t up_number; /* 0 until Up; lower = older */
    const char *const *roles;
    size_t n_roles;
    const char *app_version;
    const char *heartbeat_endpoint;
    const char *durable_id; /* the identity of its data directory, "" without one */
    bool reachable; /* no live observer reports it unreachable */
} shoal_member_t;

bool shoal_member_has_role(const shoal_member_t *m, const char *role);

typedef enum {
    SHOAL_SBR_KEEP_MAJORITY = 1,
    SHOAL_SBR_KEEP_OLDEST = 2,
    SHOAL_SBR_STATIC_QUORUM = 3,
    SHOAL_SBR_DOWN_ALL = 4,
    SHOAL_SBR_OFF = 5, /* no automatic downing (tests, or an external downing provider) */
} shoal_sbr_strategy_t;

typedef struct {
    const char *role;
    uint32_t min;
} shoal_role_min_t;

typedef struct {
    /* shoal/cluster */
    /* endpoints "tcp://host:port"; none: wait for a join call. A host name is resolved when the
       list is taken (here and by shoal_cluster_join) to its first IPv4 address, else its first
       IPv6 one, the address its node binds and its node id records (ddata.h, endpoint), so that
       the seed is recognised as that member; a name that does not resolve is dialled as given. */
    const char *const *seed_nodes;
    size_t n_seed_nodes;
    const char *const *roles;
    size_t n_roles;
    const char *app_version;                    /* app-version, "0.0.0" */
    uint32_t seed_node_timeout_ms;              /* seed-node-timeout, 5 s */
    uint32_t retry_unsuccessful_join_after_ms;  /* retry-unsuccessful-join-after, 10 s */
    uint32_t shutdown_after_unsuccessful_join_ms; /* shutdown-after-unsuccessful-join-seed-nodes,
                                                     0 = off */
    uint32_t min_nr_of_members;                 /* min-nr-of-members, 1 */
    const shoal_role_min_t *role_min;           /* role.<name>.min-nr-of-members */
    size_t n_role_min;
    uint32_t gossip_interval_ms;                /* gossip-interval, 1 s */
    double gossip_different_view_probability;   /* 0.8 */
    uint32_t reduce_gossip_different_view_probability; /* 400 members */
    uint32_t gossip_time_to_live_ms;            /* gossip-time-to-live, 2 s */
    uint32_t leader_actions_interval_ms;        /* leader-actions-interval, 1 s */
    bool allow_weakly_up_members;               /* allow-weakly-up-members, on */
    uint32_t weakly_up_after_ms;                /* ... = 7 s */
    /* shoal/cluster/failure-detector */
    uint32_t heartbeat_interval_ms;             /* heartbeat-interval, 1 s */
    double threshold;                           /* threshold, 8.0 */
    uint32_t max_sample_size;                   /* max-sample-size, 1000 */
    uint32_t min_std_deviation_ms;              /* min-std-deviation, 100 ms */
    uint32_t acceptable_heartbeat_pause_ms;     /* acceptable-heartbeat-pause, 3 s */
    uint32_t expected_response_after_ms;        /* expected-response-after, 1 s */
    uint32_t monitored_by_nr_of_members;        /* monitored-by-nr-of-members, 5 */
    uint32_t indirect_probes;                   /* indirect-probes, 3 */
    uint32_t loop_stall_bound_ms;               /* loop-stall-bound: the heartbeat actor stops
                                                   answering when the node loop has not ticked for
                                                   this long, 20 s */
    const char *heartbeat_endpoint;             /* NULL: the node's host, an ephemeral port */
    /* shoal/cluster/split-brain-resolver */
    shoal_sbr_strategy_t sbr_strategy;          /* active-strategy, keep-majority */
    const char *sbr_role;                       /* <strategy>.role, NULL = all members */
    uint32_t stable_after_ms;                   /* stable-after, 20 s */
    int64_t down_all_when_unstable_ms;          /* down-all-when-unstable: -1 = on (3/4 of
                                                   stable-after, at least 4 s), 0 = off */
    uint32_t static_quorum_size;                /* static-quorum.quorum-size */
    bool keep_oldest_down_if_alone;             /* keep-oldest.down-if-alone, on */
    uint32_t fence_after_ms;                    /* fence-after (Shoal's own): a node that has had
                                                   no heartbeat reply from the side the strategy
                                                   keeps for this long stops hosting shards and
                                                   singletons; 0 = acceptable-heartbeat-pause +
                                                   stable-after / 2 */
    uint32_t fence_margin_ms;                   /* fence-margin: fence-after + this must end
                                                   before the other side can reallocate, 1 s */
    /* shoal/management/cluster/bootstrap/contact-point-discovery (see SEED DISCOVERY) */
    const char *discovery;                      /* discover (Shoal's own spelling of Akka's
                                                   service-name and method): "dns:NAME:PORT" or
                                                   "srv:NAME"; NULL = off (seed nodes instead) */
    uint32_t required_contact_point_nr;         /* required-contact-point-nr, 2 */
    uint32_t stable_margin_ms;                  /* stable-margin, 5 s */
    uint32_t discovery_interval_ms;             /* interval: how often the name is resolved, 1 s */
    const char *discovery_resolver;             /* resolver (Shoal's own): the nameserver as
                                                   "IPv4:port"; NULL = the environment variable
                                                   SHOAL_DNS_RESOLVER if set, else the system's
                                                   (/etc/resolv.conf). Tests use a dnsmasq. */
    /* shoal/coordinated-shutdown */
    uint32_t phase_timeout_ms;                  /* default-phase-timeout, 5 s */
    /* the system replicator (role "__system"); its gossip interval is gossip_interval_ms */
    uint32_t system_notify_interval_ms;         /* how soon membership sees a merged state, 20 ms */
    /* KEPT MEMBERSHIP (Shoal's own, beyond Akka): the identity of this node's data directory
       (shoal_durable_node_id), and the store where the node keeps the identities of the
       cluster's members (shoal_durable_store(d, SHOAL_CLUSTER_STORE_ROLE)). Both NULL: off. */
    const char *durable_id;
    shoal_store_t *store;
} shoal_cluster_settings_t;

/* The store role under which membership keeps its kept membership (one key, "voters"). */
#define SHOAL_CLUSTER_STORE_ROLE "__membership"

/* Akka's defaults (with keep-majority on and 5 monitors). */
void shoal_cluster_settings_default(shoal_cluster_settings_t *s);
/* THE FENCE. The side a partition leaves out learns of it through its own failure detector, whose
   indirect probes can delay its verdict by seconds, while the other side marks it unreachable,
   downs it after stable-after and reallocates its shards. So a node does not wait for a verdict:
   it judges by time since contact. The members it monitors that gave no heartbeat reply for
   fence-after (and, above six members, those it does not monitor that a member it still hears
   from lists unreachable) are the other side; once the active strategy, by the resolver's own
   rule, would not keep its side (keep-majority: not more than the other side, a tie going to
   the side of the lowest address; keep-oldest: the oldest over there, unless it is alone there
   against two or more here with down-if-alone, or the oldest here alone against two or more;
   static-quorum: fewer than quorum-size here, or more than 2 * quorum-size - 1 in all; down-all:
   anyone over there), it is fenced: shoal_cluster_may_host is false, and sharding stops its
   shards and singletons stop. Contact again lifts the fence; a shard then comes back here only
   if the coordinator's allocation still names this node (the region asks it again, and
   registers again with a coordinator that restarted).
   The timing: the other side cannot reallocate before its detector gave up on this node
   (acceptable-heartbeat-pause after the last heartbeat) and its resolver waited stable-after;
   this node is fenced at most fence-after after its last reply. So fence-after + fence-margin <=
   acceptable-heartbeat-pause + stable-after is required (shoal_cluster_fence_check; sharding
   refuses to start otherwise). With downing off, the leader removes a Down member only
   fence-after + fence-margin after it saw it Down, so a manual down cannot reallocate earlier.
   The judgement is exact up to 6 members (monitored-by-nr-of-members, 5: every member monitors
   every other); above that it also reads the unreachability records its side's detectors
   gossip (roles are not looked at). */
/* The fence-after in force (the derived default when 0). */
uint32_t shoal_cluster_fence_after_ms(const shoal_cluster_settings_t *s);
/* 0, or SHOAL_EINVAL with the keys that break the timing above named in err. */
int shoal_cluster_fence_check(const shoal_cluster_settings_t *s, char *err, size_t errlen);
/* Shortened timings for tests and the `_fast` benchmarks: gossip and heartbeats 200 ms,
   acceptable pause 1 s, stable-after 2 s, seed-node-timeout 1 s, weakly-up-after 2 s,
   stable-margin 1 s and the discovery interval 500 ms. */
void shoal_cluster_settings_fast(shoal_cluster_settings_t *s);

typedef struct shoal_cluster shoal_cluster_t;

/* Starts membership on a running node (from any thread): creates the system replicator, starts
   the heartbeat actor and, with seed nodes, joins. NULL with *err on failure. */
shoal_cluster_t *shoal_cluster_new(shoal_system_t *sys, const shoal_cluster_settings_t *s,
                                   int *err);
/* Stops membership (any thread but the node's) without leaving: the others will see this node
   unreachable. Use shoal_cluster_shutdown first for an orderly exit. Destroy the singletons
   first; followed replicators and the node must outlive it. NULL-safe. */
void shoal_cluster_destroy(shoal_cluster_t **self_p);
shoal_system_t *shoal_cluster_system(shoal_cluster_t *c);
/* The settings membership runs with (read-only; valid for the life of c). Thread-safe. */
const shoal_cluster_settings_t *shoal_cluster_settings(const shoal_cluster_t *c);
shoal_replicator_t *shoal_cluster_system_replicator(shoal_cluster_t *c);

/* Drops a durable identity from the kept membership (see KEPT MEMBERSHIP) on this node and on
   every member it can reach now. SHOAL_ENOTFOUND when this node does not keep it. Thread-safe. */
int shoal_cluster_forget(shoal_cluster_t *c, const char *durable_id);

/* Makes a data replicator follow the members of its role (see DATA REPLICATORS). Node thread or
   any thread (thread-safe). The replicator must outlive the cluster or be unfollowed first. */
int shoal_cluster_follow(shoal_cluster_t *c, shoal_replicator_t *r);
int shoal_cluster_unfollow(shoal_cluster_t *c, shoal_replicator_t *r);

/* Joins through these seed endpoints (replacing the configured ones); an empty list or this
   node's own endpoint alone forms a new cluster. Thread-safe. SHOAL_ESTATE: already a member. */
int shoal_cluster_join(shoal_cluster_t *c, const char *const *seeds, size_t n);
/* Asks that `node` (NULL = this node) leave gracefully. Thread-safe. */
int shoal_cluster_leave(shoal_cluster_t *c, const shoal_node_t *node);
/* Marks `node` Down. Thread-safe. SHOAL_ENOTMEMBER for an unknown node. */
int shoal_cluster_down(shoal_cluster_t *c, const shoal_node_t *node);
/* Finds a member by node id, or by "host:port" (the live incarnation there). Thread-safe. */
const shoal_node_t *shoal_cluster_find(shoal_cluster_t *c, const char *id_or_address);

/* This node's status (0 before it is a member). Thread-safe. */
shoal_member_status_t shoal_cluster_self_status(shoal_cluster_t *c);
/* False while this node must not act for the cluster: not Up/Leaving, downed, frozen (a clock gap)
   and not yet reassured by fresh gossip. Leaders, singletons and shard hosts check it. */
bool shoal_cluster_may_act(shoal_cluster_t *c);
/* May act, and not fenced (see THE FENCE): shard hosts and singletons check this. Thread-safe. */
bool shoal_cluster_may_host(shoal_cluster_t *c);

/* True while this node's loop has been stalled longer than stable-after (SIGSTOP, swap, a
   debugger) and fresh gossip has not yet confirmed it is still a member: it may have been downed
   and replaced meanwhile, so it must process nothing for the cluster. Read against the clock, so it
   holds from the first message after the stall, before any timer ran. Node thread; cheap (one
   clock read): sharding asks it for every message it delivers. */
bool shoal_cluster_paused(shoal_cluster_t *c);

/* A snapshot of the cluster as this node sees it. Thread-safe; free with shoal_cluster_view_free. */
typedef struct {
    shoal_member_t *members; /* in address order, Removed members left out */
    size_t n_members;
    const shoal_node_t *self;
    const shoal_node_t *leader; /* NULL when there is none */
    bool converged;
    bool may_act;
    uint64_t state_version;     /* sum of the vector clock, for display */
    /* this node is in no cluster (not joined yet, or no longer): since when (wall-clock ms since
       the epoch) and whether it is asking seeds; 0 and false once it is a member */
    int64_t outside_since_ms;
    bool joining;
    /* with seed discovery, while in no cluster: what it is waiting for ("waiting for contact
       points: ...", "3 contact points, ..."); NULL otherwise */
    const char *discovery;
    /* the kept membership (see KEPT MEMBERSHIP): the durable identities majorities count */
    const char *const *kept;
    size_t n_kept;
    void *priv;
} shoal_cluster_view_t;
int shoal_cluster_view(shoal_cluster_t *c, shoal_cluster_view_t *out);
void shoal_cluster_view_free(shoal_cluster_view_t *v);
const shoal_member_t *shoal_cluster_view_member(const shoal_cluster_view_t *v,
                                                const shoal_node_t *node);
/* The role leader in a view (role NULL or "" = the leader). */
const shoal_node_t *shoal_cluster_view_role_leader(const shoal_cluster_view_t *v, const char *role);
/* Renders a view as JSON ({"self":..,"leader":..,"converged":..,"members":[...]}; a node in no
   cluster adds "in_cluster":false, "joining", "outside_since" (ISO 8601 UTC) and, with seed
   discovery, "discovery" (what it waits for); "kept" lists the
   kept membership, and each member its "id"). */
void shoal_cluster_view_json(const shoal_cluster_view_t *v, shoal_buf_t *out);

/* Events. A new subscriber first receives the current state as events (SHOAL_EV_SNAPSHOT_BEGIN,
   one MEMBER_* per member for its status, UNREACHABLE for each unreachable one, LEADER_CHANGED,
   CONVERGENCE, SHOAL_EV_SNAPSHOT_END), then every change. fn runs on the node thread (the
   snapshot inside the call). Node thread; from other threads the _sync twins below. Returns an
   id > 0. */
typedef enum {
    SHOAL_EV_SNAPSHOT_BEGIN = 1,
    SHOAL_EV_SNAPSHOT_END,
    SHOAL_EV_MEMBER_JOINED,
    SHOAL_EV_MEMBER_WEAKLY_UP,
    SHOAL_EV_MEMBER_UP,
    SHOAL_EV_MEMBER_LEFT,    /* -> Leaving */
    SHOAL_EV_MEMBER_EXITED,  /* -> Exiting */
    SHOAL_EV_MEMBER_DOWNED,
    SHOAL_EV_MEMBER_REMOVED,
    SHOAL_EV_UNREACHABLE,
    SHOAL_EV_REACHABLE,
    SHOAL_EV_LEADER_CHANGED,      /* leader may be NULL */
    SHOAL_EV_ROLE_LEADER_CHANGED, /* role, leader */
    SHOAL_EV_CONVERGENCE,         /* converged true/false */
} shoal_cluster_event_kind_t;
typedef struct {
    shoal_cluster_event_kind_t kind;
    const shoal_member_t *member; /* MEMBER_*, (UN)REACHABLE */
    const shoal_node_t *leader;   /* LEADER_CHANGED, ROLE_LEADER_CHANGED */
    const char *role;             /* ROLE_LEADER_CHANGED */
    bool converged;               /* CONVERGENCE */
} shoal_cluster_event_t;
const char *shoal_cluster_event_name(shoal_cluster_event_kind_t k);
typedef void (shoal_cluster_event_fn)(shoal_cluster_t *c, const shoal_cluster_event_t *ev,
                                      void *arg);
int shoal_cluster_subscribe(shoal_cluster_t *c, shoal_cluster_event_fn *fn, void *arg);
int shoal_cluster_unsubscribe(shoal_cluster_t *c, int id);
/* The same from any other thread (SHOAL_EDEADLK on the node thread). Once unsubscribe_sync
   returns, fn is not running and is never called again for that id. */
int shoal_cluster_subscribe_sync(shoal_cluster_t *c, shoal_cluster_event_fn *fn, void *arg);
int shoal_cluster_unsubscribe_sync(shoal_cluster_t *c, int id);

/* Orderly shutdown, in phases run in this order. */
typedef enum {
    SHOAL_PHASE_BEFORE_SERVICE_UNBIND = 0,
    SHOAL_PHASE_SERVICE_UNBIND,
    SHOAL_PHASE_SERVICE_REQUESTS_DONE,
    SHOAL_PHASE_SERVICE_STOP,
    SHOAL_PHASE_BEFORE_CLUSTER_SHUTDOWN,
    SHOAL_PHASE_SHARDING,         /* cluster-sharding-shutdown-region: hand off shards */
    SHOAL_PHASE_CLUSTER_LEAVE,    /* leave, wait until Exiting (or Removed/Down) */
    SHOAL_PHASE_CLUSTER_EXITING,  /* singletons stop here */
    SHOAL_PHASE_CLUSTER_EXITING_DONE, /* wait until Removed (bounded) */
    SHOAL_PHASE_CLUSTER_SHUTDOWN, /* stop heartbeats and gossip */
    SHOAL_PHASE_BEFORE_TERMINATE,
    SHOAL_PHASE_COUNT,
} shoal_phase_t;
typedef enum {
    SHOAL_SHUTDOWN_LEAVE = 1,   /* shoal_cluster_leave of this node */
    SHOAL_SHUTDOWN_DOWNED = 2,  /* this node was downed or removed by others */
    SHOAL_SHUTDOWN_REQUEST = 3, /* shoal_cluster_shutdown */
    SHOAL_SHUTDOWN_JOIN_FAILED = 4,
} shoal_shutdown_reason_t;
const char *shoal_phase_name(shoal_phase_t p);
/* A task calls done(done_arg) when finished (possibly before returning); a task not done within
   the phase timeout is abandoned and the phase goes on. */
typedef void (shoal_task_done_fn)(void *done_arg);
typedef void (shoal_task_fn)(shoal_cluster_t *c, shoal_shutdown_reason_t why,
                             shoal_task_done_fn *done, void *done_arg, void *arg);
int shoal_cluster_add_task(shoal_cluster_t *c, shoal_phase_t phase, const char *name,
                           shoal_task_fn *fn, void *arg);
/* Removes the tasks registered with fn and arg (an upper layer that stops before the cluster
   does); returns how many. A task already running must still call its done. */
int shoal_cluster_remove_task(shoal_cluster_t *c, shoal_task_fn *fn, void *arg);
/* Starts the shutdown (idempotent; thread-safe) and returns at once. */
int shoal_cluster_shutdown(shoal_cluster_t *c);
/* True once every phase has run. Thread-safe. */
bool shoal_cluster_terminated(shoal_cluster_t *c);
/* THE BLOCKING SHUTDOWN, for main and other threads: starts the shutdown (as
   shoal_cluster_shutdown) and waits until every phase has run (shoal_cluster_terminated) or
   timeout_ms has passed. 0 when terminated, SHOAL_ETIMEOUT (the shutdown goes on; wait again, or
   destroy anyway), SHOAL_EDEADLK from the node thread (the phases run there: use
   shoal_cluster_shutdown with shoal_cluster_on_removed instead). The phases' own timeouts bound
   the whole: the defaults allow about 10 s + 5 s per phase that has tasks; 30000 is a good bound.
   The order to stop a node:
       shoal_cluster_shutdown_wait(c, 30000);   // leave: the others see this node Removed
       ... stop what uses the node (regions: shoal_sharding_destroy; singletons) ...
       shoal_cluster_destroy(&c);
       ... shoal_replicator_destroy(&r) for your replicators; shoal_durable_close(&d) ...
       shoal_system_destroy(&sys);
   Any thread but the node's. */
int shoal_cluster_shutdown_wait(shoal_cluster_t *c, uint32_t timeout_ms);
/* Called once, on the node thread: when this member is Up, and when it is Removed (or shut
   down); at once, inside the call, when that has happened already. Node thread; from other
   threads the _sync twins. */
typedef void (shoal_cluster_fn)(shoal_cluster_t *c, void *arg);
int shoal_cluster_on_up(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg);
int shoal_cluster_on_removed(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg);
int shoal_cluster_on_up_sync(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg);
int shoal_cluster_on_removed_sync(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg);

/* Singletons. start(term) runs on the host when it takes the singleton; stop() when it gives it
   up (hand-over, leaving, downed, shutdown); both on the node thread. `role` NULL or "" = any
   member. new and destroy: any thread. */
typedef struct shoal_singleton shoal_singleton_t;
typedef void (shoal_singleton_start_fn)(shoal_singleton_t *s, uint64_t term, void *arg);
typedef void (shoal_singleton_stop_fn)(shoal_singleton_t *s, void *arg);
shoal_singleton_t *shoal_singleton_new(shoal_cluster_t *c, const char *name, const char *role,
                                       shoal_singleton_start_fn *start,
                                       shoal_singleton_stop_fn *stop, void *arg);
void shoal_singleton_destroy(shoal_singleton_t **self_p);
/* The queries are thread-safe. */
bool shoal_singleton_running(const shoal_singleton_t *s); /* running here */
uint64_t shoal_singleton_term(const shoal_singleton_t *s); /* term of the incarnation here */
/* Where the singleton should run now, as this node sees it (NULL: nowhere yet). */
const shoal_node_t *shoal_singleton_host(const shoal_singleton_t *s);

/* Counters. */
typedef struct {
    uint64_t gossip_sent, gossip_received, gossip_dropped_stale, status_sent;
    uint64_t joins_received, heartbeats_sent, heartbeats_received, indirect_probes;
    uint64_t unreachable_marked, reachable_marked, downed_by_sbr, leader_actions;
    uint64_t clock_gaps, loop_stalls;
    uint64_t quarantined_by_peer; /* times a member said it quarantined this incarnation */
    uint64_t heartbeat_redials;   /* heartbeat connections replaced after going unanswered */
    uint64_t fenced;              /* times this node fenced itself (THE FENCE) */
    /* the heartbeat socket's connections (shoal_listener_stats_t): refused past
       max_inbound_connections, and failed ZeroMQ handshakes, of which those of another security
       mechanism and those closed or timed out before they were complete */
    uint64_t heartbeat_connections_refused, heartbeat_handshakes_failed;
    uint64_t heartbeat_handshakes_mismatched, heartbeat_handshakes_incomplete;
    /* digest-only gossip (GossipStatus: the clock's digest and the seen set, sent instead of the
       whole state to a member that has seen this node's clock): sent, received, received with
       another clock (answered with the whole state), malformed (dropped) */
    uint64_t seen_status_sent, seen_status_received, seen_status_other_clock;
    uint64_t seen_status_malformed;
    /* of the statuses sent: a member's report to the leader that it has seen a new clock, and
       the leader's announcements of a converged clock (one per member each) */
    uint64_t seen_reports_sent, convergence_announced;
    uint64_t moves_pushed_to_all; /* the leader's moves on convergence pushed to every member */
} shoal_cluster_stats_t;
int shoal_cluster_stats(shoal_cluster_t *c, shoal_cluster_stats_t *out);

/* Settings from a configuration file (see ddata.h, CONFIGURATION FILES): shoal/cluster/...,
   shoal/cluster/failure-detector/..., shoal/cluster/split-brain-resolver/...,
   shoal/coordinated-shutdown/..., and seed discovery's
   shoal/management/cluster/bootstrap/contact-point-discovery/{discover,
   required-contact-point-nr, stable-margin, interval, resolver}. Strings stay owned by cfg. */
int shoal_config_cluster(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                         size_t errlen);

/* Checks a discovery name (SEED DISCOVERY: "dns:NAME:PORT" or "srv:NAME") and a resolver
   ("IPv4:port"), each when not NULL, without resolving anything: 0, or SHOAL_EINVAL with the reason in err.
   For programs that take them as flags. */
int shoal_discovery_check(const char *discovery, const char *resolver, char *err, size_t errlen);

/* Admin requests over a client connection (the shoal-cluster tool). */
#define SHOAL_KIND_CLUSTER_VIEW  0x8101u /* -> JSON view */
#define SHOAL_KIND_CLUSTER_JOIN  0x8102u /* seed endpoint */
#define SHOAL_KIND_CLUSTER_LEAVE 0x8103u /* node id or host:port; empty = the serving node */
#define SHOAL_KIND_CLUSTER_DOWN  0x8104u /* node id or host:port */
#define SHOAL_KIND_CLUSTER_FORGET 0x8105u /* a durable identity */
#define SHOAL_KIND_CLUSTER_EVENTS 0x8106u /* the last sequence number seen -> JSON */
int shoal_client_cluster_view(shoal_client_t *cl, shoal_buf_t *json);
int shoal_client_cluster_join(shoal_client_t *cl, const char *seed_endpoint);
int shoal_client_cluster_leave(shoal_client_t *cl, const char *member);
int shoal_client_cluster_down(shoal_client_t *cl, const char *member);
/* shoal_cluster_forget on the serving node; the node's answer (or error) in text if not NULL. */
int shoal_client_cluster_forget(shoal_client_t *cl, const char *durable_id, shoal_buf_t *text);
/* The node's recent events after sequence number `since` (0: all it keeps), as JSON:
   {"seq":newest,"missed":n,"events":[{"seq","at","event","node",...}]}, "missed" counting those
   after since the node no longer keeps (it keeps the last 256). `shoal-cluster events` asks again
   with the newest seq it saw, so it sees every event once. The same JSON as GET /cluster/events
   (?since=N). */
int shoal_client_cluster_events(shoal_client_t *cl, uint64_t since, shoal_buf_t *json);

/* Adds an upper layer's event to the node's recent events (GET /cluster/events, shoal-cluster
   events): its name ("shard-moved"), the node it concerns (may be NULL), and n_fields/2 pairs of
   field name and value, shown as JSON strings. Node thread. */
void shoal_cluster_note_event(shoal_cluster_t *c, const char *event, const shoal_node_t *node,
                              const char *const *fields, size_t n_fields);

/* Adds membership to a node's metrics endpoint (see ddata.h, METRICS): shoal_cluster_members
   {status=...}, shoal_cluster_unreachable_members, shoal_cluster_converged, shoal_cluster_is_leader
   gauges and the counters above as shoal_cluster_..._total. Stop the endpoint before destroying c. */
int shoal_cluster_metrics(shoal_cluster_t *c, shoal_metrics_t *m);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
