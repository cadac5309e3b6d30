/*  cluster.h — real nodes on loopback for cluster tests: start, connect, wait for conditions.

    Nodes bind tcp://127.0.0.1:0 (an ephemeral port each), connect to each other, and get a
    replicator each with short timings. Tests wait for conditions with deadlines (wait_until),
    never fixed sleeps; deadlines are multiplied by tscale(), larger under sanitizers.
*/
#ifndef SHOAL_TEST_CLUSTER_H
#define SHOAL_TEST_CLUSTER_H

#include "ddata.h"
#include "procs.h" /* tfree_port */

#define TCLUSTER_MAX 8

typedef struct {
    int n;
    shoal_system_t *sys[TCLUSTER_MAX];
    shoal_replicator_t *rep[TCLUSTER_MAX];
    shoal_store_t *store[TCLUSTER_MAX];
    shoal_replicator_settings_t settings;
} tcluster_t;

/* How much slower this build runs than a release build (1, or 4 under sanitizers). */
int tscale(void);

/* Short timings for tests: gossip 200 ms, deltas 50 ms, notify 50 ms, pruning 300 ms. */
void tcluster_fast_settings(shoal_replicator_settings_t *s);

/* Starts n nodes, fully connected, each with a replicator of `s` (NULL: fast settings) and its
   own memory store; returns once every node has a handshake with every other. */
void tcluster_start(tcluster_t *c, int n, const shoal_replicator_settings_t *s);
/* Adds node i (i == c->n) to a running cluster, connected both ways, replicators peered. */
void tcluster_add(tcluster_t *c);
/* Stops node i (destroys its replicator and system); the others forget it as a peer. */
void tcluster_kill(tcluster_t *c, int i, bool removed_for_good);
void tcluster_stop(tcluster_t *c);
/* cmocka teardown: stops every cluster a test left running (a failed assertion jumps past the
   test's own tcluster_stop; running nodes would make the process hang at exit). */
int tcluster_teardown(void **state);
/* The wall clock in ms (CLOCK_REALTIME), what pushes are stamped with. */
int64_t tcluster_unix_ms(void);
/* Node `from` pushes to node 0, as shoal_replicator_push does, a GCounter of 5 under `key`
   stamped sent_unix_ms (a forged stamp: a sender's skewed or late clock); pull_reply: the push
   answers one of node 0's. 0, or the send's error. */
int tcluster_forge_push(tcluster_t *c, int from, const char *key, int64_t sent_unix_ms,
                        bool pull_reply);


/* Polls pred(arg) until it returns true or timeout_ms (scaled by tscale) pass. */
bool wait_until(bool (*pred)(void *arg), void *arg, int timeout_ms);

/* Runs fn(r, arg) on the node thread of c->rep[i] and returns its result. */
typedef int (tcluster_fn)(shoal_replicator_t *r, void *arg);
int on_node(tcluster_t *c, int i, tcluster_fn *fn, void *arg);

/* Synchronous helpers (through the replicator's _sync facade). */
int t_incr(tcluster_t *c, int i, const char *key, uint64_t n, const shoal_consistency_t *wc);
int t_gcounter(tcluster_t *c, int i, const char *key, const shoal_consistency_t *rc,
               uint64_t *value);
/* Digest of node i's local value of key (zeros when missing). */
void t_digest(tcluster_t *c, int i, const char *key, uint8_t out[16]);
/* True when every node's local value of key has the same digest and exists. */
bool t_converged(tcluster_t *c, const char *key);

shoal_consistency_t c_local(void);
shoal_consistency_t c_majority(uint32_t timeout_ms);
shoal_consistency_t c_all(uint32_t timeout_ms);
shoal_consistency_t c_n(uint32_t n, uint32_t timeout_ms);

#endif
