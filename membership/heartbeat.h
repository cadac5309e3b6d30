/*  heartbeat.h — private to membership/: the heartbeat actor.

    A small czmq actor with its own thread and its own ROUTER socket (the member's heartbeat
    endpoint). It pings the members this node monitors (its targets, given by the node thread) every
    heartbeat interval through one DEALER per target, answers the pings of others, keeps one
    phi-accrual detector per target, and tells the node thread when a target becomes unreachable
    or reachable again. It does not use the node loop, so a node whose loop is busy in callbacks
    keeps answering; but it stops answering when the node loop has not ticked (hb_actor_tick) for
    loop_stall_bound_ms, so a wedged node is still detected.

    Before reporting a target unreachable it asks up to `indirect_probes` helpers (other members'
    heartbeat actors) to ping it (SWIM's indirect probe); one good answer keeps it reachable for
    now. A monitor whose own timer fires late (its thread starved, the process paused) widens its
    acceptable pause (Lifeguard's local health) and, after a gap longer than the acceptable pause,
    restarts its detectors' clocks instead of accusing everyone.

    Wire (all little-endian, fixed layout, decoded by hb_decode which validates every length):
      byte 0 = version (1), byte 1 = type, then per type:
      PING      seq u64, sender node endpoint (u8 len + bytes)
      PONG      seq u64, the responder's node id (u8 len + bytes): a pong from another incarnation
                than the one pinged (a port taken over) does not count
      PROBE_REQ req u64, target hb endpoint, target node endpoint, target node id (u8 len + bytes
                each)
      PROBE_ACK req u64, ok u8
    Faults: the node's fault injection (shoal_system_fault_get) is applied to this socket too, keyed
    by the peer's NODE endpoint (a ping carries its sender's), so a test's cut or drop between two
    nodes reaches their heartbeats.
*/
#ifndef SHOAL_MEMBERSHIP_HEARTBEAT_H
#define SHOAL_MEMBERSHIP_HEARTBEAT_H

#include "membership.h"
#include "phi.h"

typedef struct hb_actor hb_actor_t;

typedef struct {
    shoal_system_t *sys;       /* for fault injection and the node's own endpoint */
    const char *bind_endpoint; /* "tcp://127.0.0.1:*" or a fixed port */
    uint32_t heartbeat_interval_ms;
    uint32_t expected_response_after_ms;
    uint32_t indirect_probes;
    uint32_t loop_stall_bound_ms;
    phi_settings_t phi;
} hb_settings_t;

typedef struct {
    const char *node_id;       /* host:port:uid */
    const char *node_endpoint; /* tcp://host:port (the node's ROUTER: faults are keyed by it) */
    const char *hb_endpoint;   /* the member's heartbeat endpoint */
} hb_peer_t;

typedef struct {
    char node_id[300];
    bool reachable; /* false: became unreachable; true: reachable again */
} hb_event_t;

typedef struct {
    uint64_t pings_sent, pings_received, pongs_received, probes_sent, probes_answered,
        probes_saved, unreachable, reachable, stalls_refused, faults_dropped, malformed,
        clock_gaps, redials;
    double local_health; /* current pause factor, >= 1 */
    shoal_listener_stats_t listener; /* the ROUTER's connections (ddata.h, LISTENERS) */
} hb_stats_t;

/* Starts the actor and binds. NULL with *err (SHOAL_EIO on bind failure; SHOAL_EINVAL, logged,
   for an endpoint peers could not dial: a wildcard host, a port not 0..65535 or *). The ROUTER
   takes frames of ROUTER_MAX_MSG (4 KiB) at most and the node's max_inbound_connections
   (ddata.h, LISTENERS). */
hb_actor_t *hb_actor_new(const hb_settings_t *s, int *err);
void hb_actor_destroy(hb_actor_t **self_p);
/* The endpoint actually bound ("tcp://127.0.0.1:41234"). */
const char *hb_actor_endpoint(const hb_actor_t *a);
/* The node loop is alive (call from a node timer, e.g. every 100 ms). Thread-safe (atomic). */
void hb_actor_tick(hb_actor_t *a);
/* Replaces the set of targets (members this node monitors) and of helpers (members that may be
   asked for indirect probes). A target kept across calls keeps its detector; a removed one is
   forgotten. Thread-safe (copies everything). */
int hb_actor_set_peers(hb_actor_t *a, const hb_peer_t *targets, size_t n_targets,
                       const hb_peer_t *helpers, size_t n_helpers);
/* Takes up to `cap` pending events, oldest first. Thread-safe. */
size_t hb_actor_drain(hb_actor_t *a, hb_event_t *out, size_t cap);
/* Thread-safe. */
void hb_actor_stats(hb_actor_t *a, hb_stats_t *out);
/* When each target last answered a ping (shoal_now_ms; when it became a target if it never has):
   time since contact, which indirect probes do not stretch, unlike the detector's verdict.
   Copies up to cap; returns how many targets there are. Thread-safe. */
typedef struct {
    char node_id[300];
    int64_t last_contact;
} hb_contact_t;
size_t hb_actor_contacts(hb_actor_t *a, hb_contact_t *out, size_t cap);
/* Test hook: the actor stops (true) or resumes (false) everything, as if its process were
   paused. Thread-safe. */
void hb_actor_pause(hb_actor_t *a, bool paused);

/* The wire decoder (also the fuzz target's entry). 0 or SHOAL_EDECODE. Strings point into data
   and are not NUL-terminated. */
enum { HB_PING = 1, HB_PONG = 2, HB_PROBE_REQ = 3, HB_PROBE_ACK = 4 };
typedef struct {
    uint8_t type;
    uint64_t seq; /* seq or req */
    const char *a;
    size_t a_len; /* PING: sender node endpoint; PONG: responder node id; PROBE_REQ: target hb
                     endpoint */
    const char *b;
    size_t b_len; /* PROBE_REQ: target node endpoint */
    const char *c;
    size_t c_len; /* PROBE_REQ: target node id */
    uint8_t ok;   /* PROBE_ACK */
} hb_msg_t;
int hb_decode(const uint8_t *data, size_t len, hb_msg_t *out);
/* Encodes into buf (cap >= 600 always suffices); returns the length. */
size_t hb_encode(const hb_msg_t *m, uint8_t *buf, size_t cap);

#endif
