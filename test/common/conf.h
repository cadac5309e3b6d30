/*  conf.h — members in this process for the conformance suite (test/conformance/): the nodes of a
    multi-node spec, each a system, membership and a data replicator following it, started and
    joined one by one as the spec does; blackholes between two nodes (the transport's cut, both
    ways, heartbeats included); the replicator operations the specs use, synchronously; and a
    subscriber that records what it is told.
*/
#ifndef SHOAL_TEST_CONF_H
#define SHOAL_TEST_CONF_H

#include <pthread.h>

#include "ddata.h"
#include "membership.h"

#define CM_MAX   9
#define CM_EVMAX 64

typedef struct {
    shoal_system_t *sys;
    shoal_cluster_t *cl;
    shoal_replicator_t *rep;  /* the default data replicator ("" role) */
    shoal_replicator_t *rep2; /* a second replicator (cm_opts_t.rep2), or NULL */
    shoal_store_t *store;     /* rep's memory store (shared with rep2) */
} cmem_t;
extern cmem_t cm[CM_MAX];

/* tmember_settings with the split-brain resolver off: the ddata specs run without a downing
   provider, so an unreachable node stays a member (as in Akka's specs). */
void cm_cluster_settings(shoal_cluster_settings_t *s);

typedef struct {
    const shoal_cluster_settings_t *cluster; /* NULL: cm_cluster_settings */
    const shoal_replicator_settings_t *rep;  /* NULL: tmember_data_settings */
    const shoal_replicator_settings_t *rep2; /* NULL: none */
    shoal_store_t *store; /* NULL: a fresh memory store (destroyed with the node); else borrowed */
    const char *endpoint; /* NULL: tcp://127.0.0.1:0 */
    size_t max_frame_bytes; /* 0: the system's default */
} cm_opts_t;

/* Starts node i (not joined yet). Fails the test on error. */
void cm_start(int i, const cm_opts_t *o);
/* Node i joins through node `seed` (seed == i: forms a cluster of its own). */
void cm_join(int i, int seed);
/* Stops node i at once (no leave). NULL-safe. */
void cm_stop(int i);
/* cmocka teardown (test or group): stops every node. */
int cm_teardown(void **state);

/* Waits until every node in `mask` sees exactly the members in `mask`, Up, reachable, converged;
   fails the test (printing the views) after timeout_ms (scaled). */
void cm_wait_up(unsigned mask, int timeout_ms);
/* Waits until node i's view of node j has `status` (0: gone) and reachable as `reachable`
   (reachable is ignored when status is 0). */
bool cm_wait_member(int i, int j, shoal_member_status_t status, bool reachable, int timeout_ms);
/* Waits until every node in `mask` has replica count n on its default replicator. */
void cm_wait_replicas(unsigned mask, int n, int timeout_ms);

/* The delta specs' cluster (ReplicatorDeltaSpec, ReplicatorMapDeltaSpec): nodes 0..n-1 with role
   "full", each with its default (delta) replicator and a second one, rep2, for role "full" with
   deltas off; joined through node 0, all Up, and both replicators counting every node. */
void cm_start_delta_and_full(int n);

/* Blackhole between nodes a and b both ways (every socket, heartbeats too), and its end. */
void cm_cut(int a, int b);
void cm_pass(int a, int b);

/* Replicator operations (default replicator of node i unless r is given). */
int cm_incr(shoal_replicator_t *r, const char *key, uint64_t n, shoal_consistency_t c);
int cm_gcounter(shoal_replicator_t *r, const char *key, shoal_consistency_t c, uint64_t *v);
int cm_pncounter_add(shoal_replicator_t *r, const char *key, int64_t n, shoal_consistency_t c);
int cm_pncounter(shoal_replicator_t *r, const char *key, shoal_consistency_t c, int64_t *v);
/* Adds (or with remove, removes) the comma-separated elements to a GSet or ORSet key. */
int cm_set_add(shoal_replicator_t *r, const char *key, shoal_type_tag_t type, const char *elems,
               shoal_consistency_t c);
int cm_set_remove(shoal_replicator_t *r, const char *key, const char *elems, shoal_consistency_t c);
/* The elements of a GSet/ORSet key, sorted and comma-separated, into out ("" when empty). */
int cm_set_get(shoal_replicator_t *r, const char *key, shoal_consistency_t c, char *out,
               size_t cap);
/* Waits until cm_set_get(LOCAL) of node i's key gives `want`. */
bool cm_wait_set(shoal_replicator_t *r, const char *key, const char *want, int timeout_ms);
/* Waits until the GCounter key of r reads `want` locally. */
bool cm_wait_gcounter(shoal_replicator_t *r, const char *key, uint64_t want, int timeout_ms);
bool cm_wait_pncounter(shoal_replicator_t *r, const char *key, int64_t want, int timeout_ms);
/* Waits until the key of r is deleted locally (get answers SHOAL_EDELETED). */
bool cm_wait_deleted(shoal_replicator_t *r, const char *key, int timeout_ms);

/* A subscriber that records every notification (change, key, a copy of the value). */
typedef struct {
    pthread_mutex_t mu;
    int n;
    struct {
        shoal_change_t change;
        char key[64];
        shoal_crdt_t *value; /* NULL for DELETED and EXPIRED */
    } ev[CM_EVMAX];
    int id;
} cm_sub_t;
/* Subscribes s (zeroed by the call) to key_or_prefix on r; returns the subscription id. */
int cm_subscribe(shoal_replicator_t *r, const char *key_or_prefix, cm_sub_t *s);
void cm_unsubscribe(shoal_replicator_t *r, cm_sub_t *s);
int cm_sub_count(cm_sub_t *s);
/* Waits until s has at least n notifications. */
bool cm_sub_wait(cm_sub_t *s, int n, int timeout_ms);
/* Notification k (copied out): change, key; the GCounter value in *v when v and a value. */
shoal_change_t cm_sub_event(cm_sub_t *s, int k, char *key, size_t cap, uint64_t *v);
/* Renders notification k's value (shoal_crdt_render) into out. */
void cm_sub_render(cm_sub_t *s, int k, char *out, size_t cap);
/* Frees the recorded values (after unsubscribing or stopping the node). */
void cm_sub_free(cm_sub_t *s);

/* Membership events of one node about one subject: counts per kind (snapshot events included:
   a subject already Exiting when subscribing counts as MEMBER_EXITED). */
typedef struct {
    pthread_mutex_t mu;
    const shoal_node_t *subject;
    int count[SHOAL_EV_CONVERGENCE + 1];
    int id;
} cm_events_t;
void cm_events_subscribe(int i, const shoal_node_t *subject, cm_events_t *ev);
int cm_events_count(cm_events_t *ev, shoal_cluster_event_kind_t kind);
bool cm_events_wait(cm_events_t *ev, shoal_cluster_event_kind_t kind, int timeout_ms);

/* Node i's view: the leader (NULL when none), status of node j (0: not a member), the number of
   members and of unreachable ones, and whether it is converged. */
typedef struct {
    const shoal_node_t *leader;
    int n_members, n_unreachable;
    bool converged;
} cm_view_t;
bool cm_view(int i, cm_view_t *out);
shoal_member_status_t cm_status_of(int i, const shoal_node_t *node);

#endif
