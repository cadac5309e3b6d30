/*  gossip_model.h — what a member of an N-member cluster sends per second, from the real encoded
    sizes of its messages and the gossip schedule of the default settings (Akka's timings).

    Sizes come from the code that sends them: heartbeat pings and pongs (hb_encode), the
    replicators' digest status (the replicator's Status message), the cluster state and its
    digest-only GossipStatus (membership/state.c on a real state of N members built as a cluster
    holds it, see gossip_model_state), each wrapped in the node's DATA frame (shoal_batch_*), a
    ZMTP frame, and one TCP segment on loopback (66 bytes of Ethernet, IPv4 and TCP headers with
    timestamps), which is what bench_membership's gossip_bytes_per_s_N counts.

    THE IDLE SCHEDULE (a converged cluster, nothing changing), per member and second:
      - heartbeats: it pings the min(monitored-by, N-1) members it monitors and answers as many
        pings, every heartbeat interval; a pong carries the ACK of its ping, the ping's sender
        ACKs the pong alone (the next ping is a heartbeat interval away, past the delayed-ACK
        timer): per pair 3 segments;
      - the replicators' anti-entropy: each of them (the system replicator every gossip interval,
        a data replicator every its own) sends one Status to one peer; the peer, holding the same
        digest, answers nothing (its ACK only);
      - membership itself sends nothing: its rounds stop once every member has seen the current
        clock, and the state goes only where something changed.
    THE COST OF ONE CHANGE (a member joins, leaves, is marked unreachable...): every member must
    receive the whole new state once, and learn that the others have seen it (the seen set, by
    digest-only status while the clocks agree). gossip_model_change_bytes() gives the bytes of
    those two messages at N; how many of each a member sends for one change is measured, not
    assumed, by bench_cluster_state's gossip simulation.
*/
#ifndef SHOAL_BENCH_GOSSIP_MODEL_H
#define SHOAL_BENCH_GOSSIP_MODEL_H

#include "state.h"

#include <stddef.h>

/* Loopback bytes of one TCP segment's headers (Ethernet 14, IPv4 20, TCP 20 + timestamps 12). */
#define GOSSIP_MODEL_SEGMENT_HEADERS 66

typedef struct {
    double heartbeat_b_per_s; /* pings, pongs and their ACKs */
    double status_b_per_s;    /* the replicators' digest status and its ACK */
    double total_b_per_s;
    size_t ping_bytes, pong_bytes, status_bytes; /* on the wire, each with its headers */
    int monitored;                               /* members each one pings */
} gossip_model_idle_t;

/* Member i of a synthetic cluster: "10.a.b.c:2552:<uid>", as deployments name them. */
const shoal_node_t *gossip_model_node(int i);
/* The converged state of n such members as the leader holds it: each joined with a heartbeat
   endpoint, a durable id and one role, was moved Up, and has seen the current clock. */
cstate_t *gossip_model_state(int n);

/* Bytes of one node message (kind, payload of len bytes) on loopback: DATA frame, ZMTP frame,
   TCP segment headers. */
size_t gossip_model_wire_bytes(uint16_t kind, size_t len);
/* The same for a message that travels in its own ZMQ frame without the node's DATA framing
   (the heartbeat actor's). */
size_t gossip_model_raw_wire_bytes(size_t len);

/* Idle bytes per member per second at n members, with Shoal's default settings and
   `data_replicators` data replicators beside the system one (shoal-member runs one). */
gossip_model_idle_t gossip_model_idle(int n, int data_replicators);

/* The two messages a change is spread with at n members, on the wire: the whole state (as the
   replicator sends it: zlib level 1 above its compress-above size) and the digest-only
   GossipStatus. */
void gossip_model_change_bytes(const cstate_t *state, size_t *full, size_t *status);

#endif
