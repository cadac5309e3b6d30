/*  heartbeat.c — the heartbeat actor; see heartbeat.h.

    Threads. Everything below `actor_fn` runs on the actor's own thread and owns its sockets,
    detectors and peer tables. The node thread (and tests) reach it only through the shared part
    of hb_actor_t: an atomic tick stamp, an atomic pause flag, and, under one mutex, the pending
    peer set, the event queue and a snapshot of the stats. The actor never calls into the node.

    Sockets. One ROUTER (bound at the member's heartbeat endpoint) receives pings and probe
    requests. Outgoing traffic goes through a pool of DEALERs keyed by the peer's heartbeat
    endpoint, shared by the roles a peer plays here (target, helper, subject of a probe run on
    someone's behalf): one connection per peer, and a requester's probe requests come from the same
    socket as its pings, so the helper knows who asks. Every DEALER has linger 0, ZMQ_IMMEDIATE and
    a small send HWM and is written with ZMQ_DONTWAIT: a dead peer costs a dropped ping, never a
    blocked actor. The ROUTER is guarded like the node's (ddata.h, LISTENERS): frames of 4 KiB at
    most, 64 messages queued per connection, the node's max_inbound_connections; its guard's
    monitor is polled by this thread too.

    Probes. A regular ping has a sequence number below 2^63; a ping sent for an indirect probe
    has bit 63 set, so its pong is matched to the probe and never taken for a regular heartbeat
    (which would put a foreign interval into the subject's window).
*/
#include "heartbeat.h"

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_BIT (UINT64_C(1) << 63)
#define EP_MAX 255          /* endpoints travel with a one-byte length */
#define EVENTS_MAX 4096     /* undrained events beyond this drop the oldest */
#define OBO_MAX 256         /* probes run on behalf of others at once */
#define RID_MAX 64          /* routing ids of requesters remembered with their node endpoint */
#define HEALTH_SCORE_MAX 6  /* pause factor 1 + score/2: at most 4 */
#define HEALTHY_TICKS 10    /* on-time ticks that earn back one step of local health */
#define CONN_IDLE_MS 10000  /* an unreferenced DEALER is closed after this long unused */
#define REDIAL_MIN_MS 3000  /* a DEALER unanswered this long is replaced, the wait doubling to: */
#define REDIAL_MAX_MS 30000
#define DRAIN_MAX 256       /* messages taken from one socket per loop turn (fairness) */
/* What the heartbeat ROUTER takes (ddata.h, LISTENERS): its largest message, a probe request
   with three endpoints of at most 255 bytes, is 778 bytes; a frame announcing more than this is
   refused by libzmq before it stores a byte of it (2 GiB were allocated for one connection
   without it). */
#define ROUTER_MAX_MSG 4096
/* Complete messages queued per connection: a member sends one ping per interval and a few probe
   requests (its DEALER queues 16 at most), and the actor drains DRAIN_MAX per turn */
#define ROUTER_RCVHWM 64

/* ---------------------------------------------------------------------------------------------
   Wire */

int hb_decode(const uint8_t *data, size_t len, hb_msg_t *out)
{
    if (!data || !out)
        return SHOAL_EDECODE;
    memset(out, 0, sizeof *out);
    if (len < 10 || data[0] != 1)
        return SHOAL_EDECODE;
    uint8_t type = data[1];
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++)
        seq |= (uint64_t)data[2 + i] << (8 * i);
    size_t p = 10;
    switch (type) {
    case HB_PING:
        if (len < p + 1 || len != p + 1 + data[p])
            return SHOAL_EDECODE;
        out->a = (const char *)data + p + 1;
        out->a_len = data[p];
        break;
    case HB_PONG:
        if (len < p + 1 || len != p + 1 + data[p])
            return SHOAL_EDECODE;
        out->a = (const char *)data + p + 1;
        out->a_len = data[p];
        break;
    case HB_PROBE_REQ: {
        if (len < p + 1)
            return SHOAL_EDECODE;
        size_t al = data[p];
        if (len < p + 1 + al + 1)
            return SHOAL_EDECODE;
        size_t bl = data[p + 1 + al];
        if (len < p + 1 + al + 1 + bl + 1)
            return SHOAL_EDECODE;
        size_t cl = data[p + 1 + al + 1 + bl];
        if (len != p + 1 + al + 1 + bl + 1 + cl)
            return SHOAL_EDECODE;
        out->a = (const char *)data + p + 1;
        out->a_len = al;
        out->b = (const char *)data + p + 1 + al + 1;
        out->b_len = bl;
        out->c = (const char *)data + p + 1 + al + 1 + bl + 1;
        out->c_len = cl;
        break;
    }
    case HB_PROBE_ACK:
        if (len != p + 1 || data[p] > 1)
            return SHOAL_EDECODE;
        out->ok = data[p];
        break;
    default:
        return SHOAL_EDECODE;
    }
    out->type = type;
    out->seq = seq;
    return 0;
}

size_t hb_encode(const hb_msg_t *m, uint8_t *buf, size_t cap)
{
    if (!m || !buf || m->a_len > EP_MAX || m->b_len > EP_MAX || m->c_len > EP_MAX)
        return 0;
    size_t need;
    switch (m->type) {
    case HB_PING: need = 10 + 1 + m->a_len; break;
    case HB_PONG: need = 10 + 1 + m->a_len; break;
    case HB_PROBE_REQ: need = 10 + 1 + m->a_len + 1 + m->b_len + 1 + m->c_len; break;
    case HB_PROBE_ACK: need = 11; break;
    default: return 0;
    }
    if (cap < need)
        return 0;
    buf[0] = 1;
    buf[1] = m->type;
    for (int i = 0; i < 8; i++)
        buf[2 + i] = (uint8_t)(m->seq >> (8 * i));
    size_t p = 10;
    if (m->type == HB_PING || m->type == HB_PONG || m->type == HB_PROBE_REQ) {
        buf[p++] = (uint8_t)m->a_len;
        if (m->a_len)
            memcpy(buf + p, m->a, m->a_len);
        p += m->a_len;
    }
    if (m->type == HB_PROBE_REQ) {
        buf[p++] = (uint8_t)m->b_len;
        if (m->b_len)
            memcpy(buf + p, m->b, m->b_len);
        p += m->b_len;
        buf[p++] = (uint8_t)m->c_len;
        if (m->c_len)
            memcpy(buf + p, m->c, m->c_len);
        p += m->c_len;
    }
    if (m->type == HB_PROBE_ACK)
        buf[p++] = m->ok ? 1 : 0;
    return p;
}

/* ---------------------------------------------------------------------------------------------
   State */

typedef struct {
    char node_id[300];
    char node_ep[EP_MAX + 1];
    char hb_ep[EP_MAX + 1];
} peer_t;

typedef struct {
    char hb_ep[EP_MAX + 1];
    char node_ep[EP_MAX + 1]; /* the key of this peer's faults */
    zsock_t *sock;
    int64_t last_used;
    /* ZeroMQ gives up on a connection whose handshake failed (our CURVE key refused by a peer
       whose allow-list left it out) and never dials again; a peer restarted on the same endpoint
       with such a list would stay unreachable after the key is back. So a DEALER whose requests
       go unanswered is replaced with a new one, with a backoff. */
    int64_t waiting_since; /* the first request sent since the last reply or the last dial; 0:
                              none waiting */
    uint32_t redial_after_ms;
    bool check; /* its ZMQ_EVENTS to be read this turn (the actor's loop: THE LOOP in system.c) */
} conn_t;

typedef struct {
    peer_t p;
    conn_t *c;       /* NULL while the connect failed; retried each tick */
    phi_t *phi;
    uint64_t seq_sent, seq_pong;
    int64_t first_ping_at; /* 0: not pinged yet */
    int64_t last_contact;  /* its last pong (or when it became a target): what the fence reads */
    bool reachable;
    /* the indirect probe in flight before accusing it */
    bool probing;
    uint64_t probe_req;
    int64_t probe_deadline;
    uint32_t probe_nacks;
    bool probe_failed; /* the last probe (or none possible) did not reach it */
} target_t;

typedef struct {
    peer_t p;
    conn_t *c;
} helper_t;

/* a probe this node runs because another monitor asked */
typedef struct {
    uint8_t rid[256];
    size_t rid_len;
    uint64_t req, ping_seq;
    conn_t *c;
    int64_t deadline;
    char requester_ep[EP_MAX + 1]; /* "" when unknown: no fault applies */
    char target_id[EP_MAX + 1];    /* the incarnation asked about */
} obo_t;

typedef struct {
    uint8_t rid[256];
    size_t rid_len;
    char node_ep[EP_MAX + 1];
} rid_ep_t;

struct hb_actor {
    /* immutable after new */
    hb_settings_t s;
    shoal_system_t *sys;
    char endpoint[EP_MAX + 1];
    char self_node_ep[EP_MAX + 1];
    char self_node_id[EP_MAX + 1]; /* named in our pongs */
    zactor_t *actor;
    zsock_t *router; /* handed to the actor thread, which owns and closes it */
    shoal_listener_t *guard; /* the router's connections; the actor thread's too */

    _Atomic int64_t last_tick;
    atomic_bool paused;

    pthread_mutex_t lock;
    bool peers_pending;
    peer_t *pend_targets, *pend_helpers;
    size_t pend_nt, pend_nh;
    hb_event_t *events; /* ring */
    size_t ev_head, ev_n;
    hb_stats_t stats_snapshot;
    hb_contact_t *contacts; /* the targets' last contact, published by the actor thread */
    size_t n_contacts, contacts_cap;
};

/* The actor thread's own state. */
typedef struct {
    hb_actor_t *a;
    zsock_t *pipe;
    void *router;
    target_t **targets;
    size_t nt;
    helper_t *helpers;
    size_t nh;
    conn_t **conns;
    size_t nc;
    obo_t *obo;
    size_t nobo;
    rid_ep_t rids[RID_MAX];
    size_t nrids, rid_next;
    hb_stats_t st;
    int64_t next_tick;
    int64_t next_check; /* detectors and probe deadlines, between ticks */
    int health_score;
    int on_time;
    uint64_t next_req, probe_seq;
    uint64_t rng;
    /* readiness hints, as the node's loop (ddata.h, shoal_zmq_events) */
    int epfd;
    bool pipe_check, router_check, guard_check, conns_check;
    int64_t next_recheck;
} loop_t;

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p)
        abort();
    return p;
}

static void *xrealloc(void *p, size_t sz)
{
    p = realloc(p, sz ? sz : 1);
    if (!p)
        abort();
    return p;
}

static double rnd01(loop_t *l)
{
    /* xorshift64*: fault drops and helper choice need no more */
    l->rng ^= l->rng >> 12;
    l->rng ^= l->rng << 25;
    l->rng ^= l->rng >> 27;
    return (double)((l->rng * UINT64_C(2685821657736338717)) >> 11) / 9007199254740992.0;
}

static void copy_str(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = 0;
}

/* An endpoint this actor will connect to: tcp://, printable, bounded. Input from the network
   and from the caller is checked here before it reaches zmq_connect. */
static bool endpoint_ok(const char *ep, size_t len)
{
    if (len < 7 || len > EP_MAX || memcmp(ep, "tcp://", 6) != 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)ep[i] <= 0x20 || (unsigned char)ep[i] >= 0x7f)
            return false;
    return true;
}

static void count_malformed(loop_t *l, const char *what)
{
    l->st.malformed++;
    uint64_t n = l->st.malformed;
    if ((n & (n - 1)) == 0) /* log the 1st, 2nd, 4th...: visible but never a flood */
        shoal_warning("heartbeat %s: dropped malformed %s (%llu so far)", l->a->endpoint, what,
                     (unsigned long long)n);
}

/* True when the node's fault injection drops this message. */
static bool fault_drops(loop_t *l, const char *node_ep, shoal_fault_dir_t dir)
{
    if (!l->a->sys || !node_ep || !node_ep[0])
        return false;
    shoal_fault_t f;
    if (shoal_system_fault_get(l->a->sys, node_ep, dir, &f) != 0)
        return false;
    if (f.cut || (f.drop > 0 && rnd01(l) < f.drop)) {
        l->st.faults_dropped++;
        return true;
    }
    return false;
}

static double health_factor(const loop_t *l)
{
    return 1.0 + l->health_score / 2.0;
}

static void apply_health(loop_t *l)
{
    for (size_t i = 0; i < l->nt; i++)
        phi_set_pause_factor(l->targets[i]->phi, health_factor(l));
}

static void health_worse(loop_t *l)
{
    l->on_time = 0;
    if (l->health_score < HEALTH_SCORE_MAX) {
        l->health_score++;
        apply_health(l);
    }
}

static void health_better(loop_t *l)
{
    if (l->health_score > 0) {
        l->health_score--;
        apply_health(l);
    }
}

static void push_event(loop_t *l, const char *node_id, bool reachable)
{
    hb_actor_t *a = l->a;
    pthread_mutex_lock(&a->lock);
    if (a->ev_n == EVENTS_MAX) {
        a->ev_head = (a->ev_head + 1) % EVENTS_MAX;
        a->ev_n--;
        shoal_warning("heartbeat %s: event queue full, oldest event dropped", a->endpoint);
    }
    hb_event_t *e = &a->events[(a->ev_head + a->ev_n) % EVENTS_MAX];
    snprintf(e->node_id, sizeof e->node_id, "%s", node_id);
    e->reachable = reachable;
    a->ev_n++;
    pthread_mutex_unlock(&a->lock);
    if (reachable)
        l->st.reachable++;
    else
        l->st.unreachable++;
}

/* ---------------------------------------------------------------------------------------------
   Connections */

enum { TAG_PIPE = 1, TAG_ROUTER, TAG_GUARD }; /* a connection's tag is its address */
#define RECHECK_MS 2000

static void watch(loop_t *l, void *zsock, uint64_t tag)
{
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = tag};
    int fd = shoal_zmq_fd(zsock);
    if (l->epfd >= 0 && fd >= 0)
        (void)epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &e);
}

static void unwatch(loop_t *l, void *zsock)
{
    int fd = shoal_zmq_fd(zsock);
    if (l->epfd >= 0 && fd >= 0)
        (void)epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* A connection's socket came or went, or was sent on: read its EVENTS this turn. */
static void conn_recheck(loop_t *l, conn_t *c)
{
    c->check = true;
    l->conns_check = true;
}

static conn_t *conn_find(loop_t *l, const char *hb_ep)
{
    for (size_t i = 0; i < l->nc; i++)
        if (strcmp(l->conns[i]->hb_ep, hb_ep) == 0)
            return l->conns[i];
    return NULL;
}

/* A DEALER to a peer's heartbeat endpoint, with CURVE when the node has a key: the server key is
   the member's, found by its node endpoint. */
static zsock_t *conn_dial(loop_t *l, const char *hb_ep, const char *node_ep)
{
    zsock_t *s = zsock_new(ZMQ_DEALER);
    if (!s)
        return NULL;
    zsock_set_linger(s, 0);
    zsock_set_immediate(s, 1);
    zsock_set_sndhwm(s, 16);
    zsock_set_rcvhwm(s, 256);
    zsock_set_reconnect_ivl(s, 100);
    zsock_set_reconnect_ivl_max(s, 1000);
    if (l->a->sys && shoal_system_secure_socket(l->a->sys, zsock_resolve(s), false,
                                                node_ep[0] ? node_ep : hb_ep) != 0) {
        zsock_destroy(&s);
        return NULL;
    }
    if (zsock_connect(s, "%s", hb_ep) != 0) {
        shoal_warning("heartbeat %s: cannot connect to %s", l->a->endpoint, hb_ep);
        zsock_destroy(&s);
        return NULL;
    }
    return s;
}

static conn_t *conn_get(loop_t *l, const char *hb_ep, const char *node_ep, int64_t now)
{
    conn_t *c = conn_find(l, hb_ep);
    if (c) {
        if (node_ep[0] && strcmp(c->node_ep, node_ep) != 0)
            snprintf(c->node_ep, sizeof c->node_ep, "%s", node_ep);
        c->last_used = now;
        return c;
    }
    zsock_t *s = conn_dial(l, hb_ep, node_ep);
    if (!s)
        return NULL;
    c = xcalloc(1, sizeof *c);
    snprintf(c->hb_ep, sizeof c->hb_ep, "%s", hb_ep);
    snprintf(c->node_ep, sizeof c->node_ep, "%s", node_ep);
    c->sock = s;
    watch(l, zsock_resolve(s), (uint64_t)(uintptr_t)c);
    conn_recheck(l, c);
    c->last_used = now;
    c->redial_after_ms = REDIAL_MIN_MS;
    l->conns = xrealloc(l->conns, (l->nc + 1) * sizeof *l->conns);
    l->conns[l->nc++] = c;
    return c;
}

static void conn_send(loop_t *l, conn_t *c, const hb_msg_t *m, int64_t now)
{
    uint8_t buf[600];
    size_t n = hb_encode(m, buf, sizeof buf);
    if (!n)
        return;
    c->last_used = now;
    if (!c->waiting_since)
        c->waiting_since = now;
    /* EAGAIN (not connected yet, or the peer stopped reading): the message is lost, as a ping
       to a dead peer should be */
    (void)zmq_send(zsock_resolve(c->sock), buf, n, ZMQ_DONTWAIT);
    conn_recheck(l, c);
}

static bool conn_referenced(const loop_t *l, const conn_t *c)
{
    for (size_t i = 0; i < l->nt; i++)
        if (l->targets[i]->c == c)
            return true;
    for (size_t i = 0; i < l->nh; i++)
        if (l->helpers[i].c == c)
            return true;
    for (size_t i = 0; i < l->nobo; i++)
        if (l->obo[i].c == c)
            return true;
    return false;
}

/* Replaces the DEALERs whose requests have gone unanswered for their wait (see conn_t). A peer
   that is down costs a new socket every 30 s at most, until it is no longer monitored. */
static void conns_redial(loop_t *l, int64_t now)
{
    for (size_t i = 0; i < l->nc; i++) {
        conn_t *c = l->conns[i];
        if (!c->waiting_since || now - c->waiting_since < (int64_t)c->redial_after_ms)
            continue;
        zsock_t *s = conn_dial(l, c->hb_ep, c->node_ep);
        if (!s)
            continue; /* tried again next tick */
        unwatch(l, zsock_resolve(c->sock));
        zsock_destroy(&c->sock);
        c->sock = s;
        watch(l, zsock_resolve(s), (uint64_t)(uintptr_t)c);
        conn_recheck(l, c);
        c->waiting_since = 0; /* the new socket's wait starts with its first request */
        l->st.redials++;
        c->redial_after_ms = c->redial_after_ms >= REDIAL_MAX_MS / 2 ? REDIAL_MAX_MS
                                                                     : c->redial_after_ms * 2;
    }
}

static void conns_gc(loop_t *l, int64_t now, bool all_idle)
{
    for (size_t i = 0; i < l->nc;) {
        conn_t *c = l->conns[i];
        if (!conn_referenced(l, c) && (all_idle || now - c->last_used > CONN_IDLE_MS)) {
            unwatch(l, zsock_resolve(c->sock));
            zsock_destroy(&c->sock);
            free(c);
            l->conns[i] = l->conns[--l->nc];
        } else {
            i++;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
   Peers */

static void target_free(target_t *t)
{
    phi_destroy(&t->phi);
    free(t);
}

static void apply_peers(loop_t *l, int64_t now)
{
    hb_actor_t *a = l->a;
    pthread_mutex_lock(&a->lock);
    if (!a->peers_pending) {
        pthread_mutex_unlock(&a->lock);
        return;
    }
    peer_t *nt = a->pend_targets, *nh = a->pend_helpers;
    size_t n_t = a->pend_nt, n_h = a->pend_nh;
    a->pend_targets = a->pend_helpers = NULL;
    a->pend_nt = a->pend_nh = 0;
    a->peers_pending = false;
    pthread_mutex_unlock(&a->lock);

    target_t **targets = xcalloc(n_t, sizeof *targets);
    for (size_t i = 0; i < n_t; i++) {
        /* a target kept (same node, same heartbeat endpoint) keeps its detector */
        for (size_t j = 0; j < l->nt; j++) {
            target_t *old = l->targets[j];
            if (old && strcmp(old->p.node_id, nt[i].node_id) == 0 &&
                strcmp(old->p.hb_ep, nt[i].hb_ep) == 0) {
                targets[i] = old;
                snprintf(old->p.node_ep, sizeof old->p.node_ep, "%s", nt[i].node_ep);
                l->targets[j] = NULL;
                break;
            }
        }
        if (!targets[i]) {
            target_t *t = xcalloc(1, sizeof *t);
            t->p = nt[i];
            t->phi = phi_new(&a->s.phi);
            if (!t->phi)
                abort(); /* settings were validated by hb_actor_new */
            phi_set_pause_factor(t->phi, health_factor(l));
            t->reachable = true;
            t->last_contact = now; /* a new target is not silent before it was asked */
            targets[i] = t;
        }
        targets[i]->c = conn_get(l, targets[i]->p.hb_ep, targets[i]->p.node_ep, now);
    }
    for (size_t j = 0; j < l->nt; j++)
        if (l->targets[j])
            target_free(l->targets[j]);
    free(l->targets);
    l->targets = targets;
    l->nt = n_t;

    free(l->helpers);
    l->helpers = xcalloc(n_h, sizeof *l->helpers);
    l->nh = n_h;
    for (size_t i = 0; i < n_h; i++) {
        l->helpers[i].p = nh[i];
        l->helpers[i].c = conn_get(l, nh[i].hb_ep, nh[i].node_ep, now);
    }
    free(nt);
    free(nh);
    conns_gc(l, now, false);
}

/* ---------------------------------------------------------------------------------------------
   Detection */

/* How long a helper tries to reach the subject for a requester: one heartbeat interval (a live
   subject answers in milliseconds; SWIM uses the probe interval too). */
static uint32_t helper_wait_ms(const loop_t *l)
{
    uint32_t w = l->a->s.heartbeat_interval_ms;
    return w < 100 ? 100 : w;
}

/* The helper waits helper_wait for the subject; its answer gets an interval to come back, widened
   like everything else when this monitor is struggling. */
static double probe_duration_ms(const loop_t *l)
{
    return (helper_wait_ms(l) + 1.0 * l->a->s.heartbeat_interval_ms) * health_factor(l);
}

static void mark_unreachable(loop_t *l, target_t *t)
{
    t->probing = false;
    t->probe_failed = false;
    if (!t->reachable)
        return;
    t->reachable = false;
    shoal_info("heartbeat %s: %s unreachable", l->a->endpoint, t->p.node_id);
    push_event(l, t->p.node_id, false);
}

static void start_probe(loop_t *l, target_t *t, int64_t now)
{
    /* helpers other than the subject, asked in a random order */
    size_t idx[64], n = 0;
    for (size_t i = 0; i < l->nh && n < 64; i++)
        if (l->helpers[i].c && strcmp(l->helpers[i].p.node_id, t->p.node_id) != 0 &&
            strcmp(l->helpers[i].p.hb_ep, t->p.hb_ep) != 0)
            idx[n++] = i;
    uint32_t k = l->a->s.indirect_probes;
    if (k == 0 || n == 0) {
        t->probe_failed = true; /* nobody to ask: the detector alone decides */
        return;
    }
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(rnd01(l) * i);
        if (j >= i)
            j = i - 1;
        size_t tmp = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = tmp;
    }
    t->probing = true;
    t->probe_req = ++l->next_req;
    t->probe_nacks = 0;
    double wait = probe_duration_ms(l);
    t->probe_deadline = now + (int64_t)wait;
    hb_msg_t m = {.type = HB_PROBE_REQ,
                  .seq = t->probe_req,
                  .a = t->p.hb_ep,
                  .a_len = strlen(t->p.hb_ep),
                  .b = t->p.node_ep,
                  .b_len = strlen(t->p.node_ep),
                  .c = t->p.node_id,
                  .c_len = strlen(t->p.node_id)};
    for (size_t i = 0; i < n && i < k; i++) {
        helper_t *h = &l->helpers[idx[i]];
        l->st.probes_sent++;
        if (fault_drops(l, h->p.node_ep, SHOAL_FAULT_OUT))
            continue;
        conn_send(l, h->c, &m, now);
    }
}

/* Suspicion starts early: once the silence leaves less than a probe's duration before the
   detector's expected silence (or phi reaches half the threshold), the indirect probe runs while
   the acceptable pause is still running out, so when phi crosses the threshold its answer is
   already known. A member is accused only when both the detector and the probe say so; heartbeats
   that come back clear the suspicion. */
static void evaluate(loop_t *l, target_t *t, int64_t now)
{
    if (!phi_monitoring(t->phi))
        return; /* nothing heard and the first-response grace is not over: nothing to judge */
    double threshold = l->a->s.phi.threshold;
    double phi = phi_value(t->phi, now);
    bool suspect = phi >= threshold / 2 ||
                   phi_silence(t->phi, now) >=
                       phi_expected_silence(t->phi) - probe_duration_ms(l);
    if (!t->reachable) {
        if (phi < threshold) {
            t->reachable = true;
            t->probe_failed = false;
            shoal_info("heartbeat %s: %s reachable again", l->a->endpoint, t->p.node_id);
            push_event(l, t->p.node_id, true);
        }
        return;
    }
    if (!suspect) {
        t->probing = false; /* direct heartbeats came back */
        t->probe_failed = false;
        return;
    }
    if (!t->probing && !t->probe_failed) {
        start_probe(l, t, now);
    } else if (t->probing && now >= t->probe_deadline) {
        /* no helper reached it. If not one even answered, the trouble may be ours (Lifeguard):
           widen our own bounds for what follows, but the subject is still not heard from */
        t->probing = false;
        t->probe_failed = true;
        if (t->probe_nacks == 0)
            health_worse(l);
    }
    if (phi >= threshold && t->probe_failed)
        mark_unreachable(l, t);
}

/* Between heartbeats: detectors and probe deadlines are checked often, so a verdict does not
   wait for the next heartbeat round. */
static void send_ack(loop_t *l, const uint8_t *rid, size_t rid_len, uint64_t req, bool ok,
                     const char *requester_ep);
static void obo_remove(loop_t *l, size_t i);

/* Between ticks the detectors are evaluated every quarter of a heartbeat interval (250 ms by
   default; Akka reaps unreachable members every second): prompt verdicts, few idle wake-ups. */
static int64_t check_interval(const loop_t *l)
{
    int64_t c = l->a->s.heartbeat_interval_ms / 4;
    return c < 10 ? 10 : c;
}

static void check(loop_t *l, int64_t now)
{
    for (size_t i = 0; i < l->nt; i++)
        evaluate(l, l->targets[i], now);
    for (size_t i = l->nobo; i-- > 0;)
        if (now >= l->obo[i].deadline) {
            obo_t *o = &l->obo[i];
            send_ack(l, o->rid, o->rid_len, o->req, false, o->requester_ep);
            obo_remove(l, i);
        }
}

static void send_ping(loop_t *l, conn_t *c, uint64_t seq, const char *node_ep, int64_t now)
{
    l->st.pings_sent++;
    if (fault_drops(l, node_ep, SHOAL_FAULT_OUT))
        return;
    hb_msg_t m = {.type = HB_PING,
                  .seq = seq,
                  .a = l->a->self_node_ep,
                  .a_len = strlen(l->a->self_node_ep)};
    conn_send(l, c, &m, now);
}

static void send_ack(loop_t *l, const uint8_t *rid, size_t rid_len, uint64_t req, bool ok,
                     const char *requester_ep)
{
    if (fault_drops(l, requester_ep, SHOAL_FAULT_OUT))
        return;
    hb_msg_t m = {.type = HB_PROBE_ACK, .seq = req, .ok = ok};
    uint8_t buf[32];
    size_t n = hb_encode(&m, buf, sizeof buf);
    l->st.probes_answered++;
    /* a ROUTER drops what it cannot route or queue: never blocks */
    l->router_check = true;
    if (zmq_send(l->router, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int)rid_len)
        (void)zmq_send(l->router, buf, n, ZMQ_DONTWAIT);
}

static void obo_remove(loop_t *l, size_t i)
{
    l->obo[i] = l->obo[--l->nobo];
}

static void tick(loop_t *l, int64_t now)
{
    const hb_settings_t *s = &l->a->s;
    int64_t late = now - l->next_tick;
    if (late > (int64_t)(s->phi.acceptable_pause_ms / 2)) {
        /* this thread was frozen (SIGSTOP, a VM pause, starvation): the silence we saw is ours,
           not our targets'. Restart their clocks instead of accusing all of them. */
        l->st.clock_gaps++;
        shoal_warning("heartbeat %s: timer %lld ms late, restarting failure detectors",
                     l->a->endpoint, (long long)late);
        for (size_t i = 0; i < l->nt; i++) {
            target_t *t = l->targets[i];
            phi_restart_clock(t->phi, now);
            if (t->first_ping_at)
                t->first_ping_at = now;
            t->probing = false;
        }
        for (size_t i = l->nobo; i-- > 0;)
            if (l->obo[i].deadline < now)
                obo_remove(l, i);
        health_worse(l);
    } else if (late > (int64_t)(s->heartbeat_interval_ms / 2)) {
        health_worse(l);
    } else if (++l->on_time >= HEALTHY_TICKS) {
        l->on_time = 0;
        health_better(l);
    }
    l->next_tick = now + s->heartbeat_interval_ms;

    for (size_t i = 0; i < l->nt; i++) {
        target_t *t = l->targets[i];
        if (!t->c)
            t->c = conn_get(l, t->p.hb_ep, t->p.node_ep, now);
        if (t->c) {
            t->seq_sent = (t->seq_sent + 1) & ~PROBE_BIT;
            send_ping(l, t->c, t->seq_sent, t->p.node_ep, now);
        }
        if (!t->first_ping_at)
            t->first_ping_at = now;
        /* Akka: no answer within expected-response-after of the first ping starts the detector
           as if one had arrived, so a target that never answers still becomes unreachable */
        if (!phi_monitoring(t->phi) && now - t->first_ping_at >= s->expected_response_after_ms)
            phi_heartbeat(t->phi, now);
        evaluate(l, t, now);
    }

    /* probes run for others: re-ping until the deadline, then say no */
    for (size_t i = l->nobo; i-- > 0;) {
        obo_t *o = &l->obo[i];
        if (now >= o->deadline) {
            send_ack(l, o->rid, o->rid_len, o->req, false, o->requester_ep);
            obo_remove(l, i);
        } else {
            send_ping(l, o->c, o->ping_seq, o->c->node_ep, now);
        }
    }
    conns_redial(l, now);
    conns_gc(l, now, false);
}

/* ---------------------------------------------------------------------------------------------
   Incoming */

static const char *rid_lookup(loop_t *l, const uint8_t *rid, size_t len)
{
    for (size_t i = 0; i < l->nrids; i++)
        if (l->rids[i].rid_len == len && memcmp(l->rids[i].rid, rid, len) == 0)
            return l->rids[i].node_ep;
    return "";
}

static void rid_learn(loop_t *l, const uint8_t *rid, size_t len, const char *ep, size_t ep_len)
{
    for (size_t i = 0; i < l->nrids; i++)
        if (l->rids[i].rid_len == len && memcmp(l->rids[i].rid, rid, len) == 0) {
            copy_str(l->rids[i].node_ep, sizeof l->rids[i].node_ep, ep, ep_len);
            return;
        }
    rid_ep_t *r;
    if (l->nrids < RID_MAX) {
        r = &l->rids[l->nrids++];
    } else {
        r = &l->rids[l->rid_next];
        l->rid_next = (l->rid_next + 1) % RID_MAX;
    }
    memcpy(r->rid, rid, len);
    r->rid_len = len;
    copy_str(r->node_ep, sizeof r->node_ep, ep, ep_len);
}

static bool node_stalled(const loop_t *l, int64_t now)
{
    uint32_t bound = l->a->s.loop_stall_bound_ms;
    return bound && now - atomic_load(&l->a->last_tick) > (int64_t)bound;
}

static void on_router_msg(loop_t *l, const uint8_t *rid, size_t rid_len, const uint8_t *data,
                          size_t len, int64_t now)
{
    hb_msg_t m;
    if (hb_decode(data, len, &m) != 0) {
        count_malformed(l, "message on the heartbeat socket");
        return;
    }
    if (m.type == HB_PING) {
        char from[EP_MAX + 1];
        copy_str(from, sizeof from, m.a, m.a_len);
        if (fault_drops(l, from, SHOAL_FAULT_IN))
            return;
        l->st.pings_received++;
        rid_learn(l, rid, rid_len, m.a, m.a_len);
        if (node_stalled(l, now)) {
            /* the node loop is wedged: let the monitors see it */
            l->st.stalls_refused++;
            return;
        }
        if (fault_drops(l, from, SHOAL_FAULT_OUT))
            return;
        /* the pong names this incarnation: a monitor still pinging an endpoint that a new
           process (or another node) took over must not count it as its target's heartbeat */
        hb_msg_t pong = {.type = HB_PONG,
                         .seq = m.seq,
                         .a = l->a->self_node_id,
                         .a_len = strlen(l->a->self_node_id)};
        uint8_t buf[EP_MAX + 32];
        size_t n = hb_encode(&pong, buf, sizeof buf);
        l->router_check = true;
        if (zmq_send(l->router, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int)rid_len)
            (void)zmq_send(l->router, buf, n, ZMQ_DONTWAIT);
    } else if (m.type == HB_PROBE_REQ) {
        const char *requester = rid_lookup(l, rid, rid_len);
        if (fault_drops(l, requester, SHOAL_FAULT_IN))
            return;
        if (!endpoint_ok(m.a, m.a_len) || (m.b_len && !endpoint_ok(m.b, m.b_len))) {
            count_malformed(l, "probe request (bad endpoint)");
            return;
        }
        if (node_stalled(l, now)) {
            l->st.stalls_refused++;
            return;
        }
        for (size_t i = 0; i < l->nobo; i++)
            if (l->obo[i].req == m.seq && l->obo[i].rid_len == rid_len &&
                memcmp(l->obo[i].rid, rid, rid_len) == 0)
                return; /* a duplicate */
        if (l->nobo >= OBO_MAX) {
            shoal_warning("heartbeat %s: too many probes on behalf of others, one refused",
                         l->a->endpoint);
            return;
        }
        char hb_ep[EP_MAX + 1], node_ep[EP_MAX + 1];
        copy_str(hb_ep, sizeof hb_ep, m.a, m.a_len);
        copy_str(node_ep, sizeof node_ep, m.b, m.b_len);
        conn_t *c = conn_get(l, hb_ep, node_ep, now);
        if (!c)
            return;
        obo_t *o = &l->obo[l->nobo++];
        memcpy(o->rid, rid, rid_len);
        o->rid_len = rid_len;
        o->req = m.seq;
        o->c = c;
        o->ping_seq = PROBE_BIT | (++l->probe_seq & ~PROBE_BIT);
        o->deadline = now + helper_wait_ms(l);
        snprintf(o->requester_ep, sizeof o->requester_ep, "%s", requester);
        copy_str(o->target_id, sizeof o->target_id, m.c, m.c_len);
        send_ping(l, c, o->ping_seq, c->node_ep, now);
    } else {
        count_malformed(l, "pong or ack on the heartbeat socket");
    }
}

static void on_conn_msg(loop_t *l, conn_t *c, const uint8_t *data, size_t len, int64_t now)
{
    hb_msg_t m;
    if (hb_decode(data, len, &m) != 0) {
        count_malformed(l, "reply");
        return;
    }
    if (fault_drops(l, c->node_ep, SHOAL_FAULT_IN))
        return;
    c->waiting_since = 0; /* the connection works: no redial due */
    c->redial_after_ms = REDIAL_MIN_MS;
    if (m.type == HB_PONG) {
        l->st.pongs_received++;
        char who[EP_MAX + 1];
        copy_str(who, sizeof who, m.a, m.a_len);
        if (m.seq & PROBE_BIT) {
            for (size_t i = 0; i < l->nobo; i++)
                if (l->obo[i].c == c && l->obo[i].ping_seq == m.seq &&
                    strcmp(l->obo[i].target_id, who) == 0) {
                    obo_t *o = &l->obo[i];
                    send_ack(l, o->rid, o->rid_len, o->req, true, o->requester_ep);
                    obo_remove(l, i);
                    break;
                }
            return;
        }
        for (size_t i = 0; i < l->nt; i++) {
            target_t *t = l->targets[i];
            /* only a pong newer than the last one and for a ping sent: no replays, no pongs
               for pings of an earlier incarnation of this table */
            if (t->c == c && m.seq > t->seq_pong && m.seq <= t->seq_sent &&
                strcmp(t->p.node_id, who) == 0) {
                t->seq_pong = m.seq;
                t->last_contact = now;
                phi_heartbeat(t->phi, now);
                evaluate(l, t, now);
            }
        }
    } else if (m.type == HB_PROBE_ACK) {
        for (size_t i = 0; i < l->nt; i++) {
            target_t *t = l->targets[i];
            if (!t->probing || t->probe_req != m.seq)
                continue;
            if (m.ok) {
                /* someone else reaches it: one bad link does not cost a member. Give it a
                   fresh pause before suspecting again (the window is kept). */
                t->probing = false;
                l->st.probes_saved++;
                phi_restart_clock(t->phi, now);
                health_better(l);
            } else {
                t->probe_nacks++;
            }
        }
    } else {
        count_malformed(l, "ping or probe request on a reply socket");
    }
}

/* Receives one multipart message; false when none is waiting. Parts beyond what we expect are
   drained. */
static bool recv_parts(void *sock, zmq_msg_t *parts, int want, int *got)
{
    *got = 0;
    for (;;) {
        zmq_msg_t tmp;
        zmq_msg_t *p = *got < want ? &parts[*got] : &tmp;
        zmq_msg_init(p);
        int flags = *got == 0 ? ZMQ_DONTWAIT : 0;
        if (zmq_msg_recv(p, sock, flags) < 0) {
            zmq_msg_close(p);
            return *got > 0;
        }
        bool more = zmq_msg_more(p);
        if (p == &tmp)
            zmq_msg_close(&tmp);
        (*got)++;
        if (!more)
            return true;
    }
}

static void close_parts(zmq_msg_t *parts, int got, int want)
{
    for (int i = 0; i < got && i < want; i++)
        zmq_msg_close(&parts[i]);
}

static void drain_router(loop_t *l, bool ignore, int64_t now)
{
    for (int k = 0; k < DRAIN_MAX; k++) {
        zmq_msg_t parts[2];
        int got;
        if (!recv_parts(l->router, parts, 2, &got))
            return;
        /* past the handshake: counts toward the member cap, not the strangers' (listener.c) */
        shoal_listener_seen(l->a->guard, zmq_msg_get(&parts[got > 1 ? 1 : 0], ZMQ_SRCFD));
        if (!ignore) {
            if (got != 2 || zmq_msg_size(&parts[0]) == 0 || zmq_msg_size(&parts[0]) > 255)
                count_malformed(l, "frame layout");
            else
                on_router_msg(l, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]),
                              zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), now);
        }
        close_parts(parts, got, 2);
    }
}

static void drain_conn(loop_t *l, conn_t *c, bool ignore, int64_t now)
{
    for (int k = 0; k < DRAIN_MAX; k++) {
        zmq_msg_t part;
        int got;
        if (!recv_parts(zsock_resolve(c->sock), &part, 1, &got))
            return;
        if (!ignore) {
            if (got != 1)
                count_malformed(l, "reply layout");
            else
                on_conn_msg(l, c, zmq_msg_data(&part), zmq_msg_size(&part), now);
        }
        close_parts(&part, got, 1);
    }
}

/* ---------------------------------------------------------------------------------------------
   The actor */

static void publish_stats(loop_t *l)
{
    l->st.local_health = health_factor(l);
    shoal_listener_stats(l->a->guard, &l->st.listener);
    hb_actor_t *a = l->a;
    pthread_mutex_lock(&a->lock);
    a->stats_snapshot = l->st;
    if (l->nt > a->contacts_cap) {
        a->contacts_cap = l->nt;
        a->contacts = xrealloc(a->contacts, a->contacts_cap * sizeof *a->contacts);
    }
    a->n_contacts = l->nt;
    for (size_t i = 0; i < l->nt; i++) {
        memcpy(a->contacts[i].node_id, l->targets[i]->p.node_id, sizeof a->contacts[i].node_id);
        a->contacts[i].last_contact = l->targets[i]->last_contact;
    }
    pthread_mutex_unlock(&a->lock);
}

size_t hb_actor_contacts(hb_actor_t *a, hb_contact_t *out, size_t cap)
{
    pthread_mutex_lock(&a->lock);
    size_t n = a->n_contacts < cap ? a->n_contacts : cap;
    if (n)
        memcpy(out, a->contacts, n * sizeof *out);
    size_t all = a->n_contacts;
    pthread_mutex_unlock(&a->lock);
    return all;
}

static void actor_fn(zsock_t *pipe, void *arg)
{
    hb_actor_t *a = arg;
    loop_t l = {.a = a, .pipe = pipe, .router = zsock_resolve(a->router)};
    l.rng = (uint64_t)shoal_now_ms() ^ (uint64_t)(uintptr_t)a ^ UINT64_C(0x9e3779b97f4a7c15);
    if (!l.rng)
        l.rng = 1;
    l.obo = xcalloc(OBO_MAX, sizeof *l.obo);
    l.next_tick = shoal_now_ms() + a->s.heartbeat_interval_ms;
    zsock_signal(pipe, 0);

    l.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l.epfd < 0)
        shoal_error("heartbeat %s: epoll_create1: %s", a->endpoint, strerror(errno));
    void *guard = shoal_listener_socket(a->guard);
    watch(&l, zsock_resolve(pipe), TAG_PIPE);
    watch(&l, l.router, TAG_ROUTER);
    watch(&l, guard, TAG_GUARD);
    l.pipe_check = l.router_check = l.guard_check = true;
    conn_t **turn = NULL;
    size_t turn_cap = 0;
    bool running = l.epfd >= 0;
    while (running) {
        bool paused = atomic_load(&a->paused);
        int64_t now = shoal_now_ms();
        /* paused: no ticks, but wake up now and then to see the resume */
        int64_t wake = l.next_tick < l.next_check ? l.next_tick : l.next_check;
        if (l.next_recheck < wake)
            wake = l.next_recheck;
        long timeout = paused ? 10 : (long)(wake - now);
        if (timeout < 0 || l.pipe_check || l.router_check || l.guard_check || l.conns_check)
            timeout = 0;
        struct epoll_event evs[32];
        int n = epoll_wait(l.epfd, evs, 32, (int)timeout);
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_PIPE)
                l.pipe_check = true;
            else if (tag == TAG_ROUTER)
                l.router_check = true;
            else if (tag == TAG_GUARD)
                l.guard_check = true;
            else
                conn_recheck(&l, (conn_t *)(uintptr_t)tag);
        }
        now = shoal_now_ms();
        if (now >= l.next_recheck) { /* a missed hint costs a second at most */
            l.next_recheck = now + RECHECK_MS;
            l.pipe_check = l.router_check = l.guard_check = l.conns_check = true;
            for (size_t i = 0; i < l.nc; i++)
                l.conns[i]->check = true;
        }
        if (l.pipe_check) {
            l.pipe_check = false;
            if (shoal_zmq_events(zsock_resolve(pipe)) & ZMQ_POLLIN) {
                char *cmd = zstr_recv(pipe);
                if (!cmd || strcmp(cmd, "$TERM") == 0)
                    running = false;
                zstr_free(&cmd);
                l.pipe_check = true;
            }
        }
        if (!running)
            break;
        if (l.router_check) {
            l.router_check = false;
            if (shoal_zmq_events(l.router) & ZMQ_POLLIN)
                drain_router(&l, paused, now);
            if (shoal_zmq_events(l.router) & ZMQ_POLLIN)
                l.router_check = true;
        }
        if (l.guard_check) {
            l.guard_check = false;
            if (shoal_zmq_events(guard) & ZMQ_POLLIN)
                shoal_listener_drain(a->guard);
            if (shoal_zmq_events(guard) & ZMQ_POLLIN)
                l.guard_check = true;
        }
        if (l.conns_check) {
            l.conns_check = false;
            /* the connections as the turn began: a reply may open or drop one */
            size_t nturn = l.nc;
            if (nturn > turn_cap) {
                turn_cap = nturn * 2;
                turn = xrealloc(turn, turn_cap * sizeof *turn);
            }
            for (size_t i = 0; i < nturn; i++)
                turn[i] = l.conns[i];
            for (size_t i = 0; i < nturn; i++) {
                conn_t *c = turn[i];
                if (!c->check)
                    continue;
                c->check = false;
                void *sock = zsock_resolve(c->sock);
                if (shoal_zmq_events(sock) & ZMQ_POLLIN)
                    drain_conn(&l, c, paused, now);
                if (shoal_zmq_events(zsock_resolve(c->sock)) & ZMQ_POLLIN)
                    conn_recheck(&l, c);
            }
        }
        if (!paused) {
            apply_peers(&l, now);
            if (now >= l.next_tick)
                tick(&l, now);
            if (now >= l.next_check) {
                check(&l, now);
                l.next_check = now + check_interval(&l);
            }
        }
        publish_stats(&l);
    }

    free(turn);
    for (size_t i = 0; i < l.nt; i++)
        target_free(l.targets[i]);
    free(l.targets);
    l.nt = 0;
    free(l.helpers);
    l.nh = 0;
    l.nobo = 0;
    conns_gc(&l, 0, true);
    free(l.conns);
    free(l.obo);
    if (l.epfd >= 0)
        close(l.epfd);
    shoal_listener_destroy(&a->guard);
    zsock_destroy(&a->router);
}

/* ---------------------------------------------------------------------------------------------
   Public */

hb_actor_t *hb_actor_new(const hb_settings_t *s, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = SHOAL_EINVAL;
    if (!s || !s->bind_endpoint || s->heartbeat_interval_ms == 0)
        return NULL;
    /* its endpoint travels in the member record: peers must be able to dial it */
    char why[256];
    if (shoal_endpoint_check_bind(s->bind_endpoint, true, why, sizeof why) != 0 ||
        strncmp(s->bind_endpoint, "tcp://", 6) != 0) {
        shoal_error("heartbeat: cannot listen at %s: %s", s->bind_endpoint,
                   why[0] ? why : "a heartbeat endpoint is tcp://host:port");
        return NULL;
    }
    phi_t *probe = phi_new(&s->phi);
    if (!probe)
        return NULL;
    phi_destroy(&probe);

    hb_actor_t *a = xcalloc(1, sizeof *a);
    a->s = *s;
    a->s.bind_endpoint = NULL; /* not kept: the caller's string */
    a->sys = s->sys;
    if (s->sys) {
        const char *ep = shoal_system_endpoint(s->sys);
        snprintf(a->self_node_ep, sizeof a->self_node_ep, "%s", ep ? ep : "");
        snprintf(a->self_node_id, sizeof a->self_node_id, "%s",
                 shoal_node_id(shoal_system_self(s->sys)));
    }
    a->router = zsock_new(ZMQ_ROUTER);
    if (!a->router) {
        free(a);
        *err = SHOAL_EIO;
        return NULL;
    }
    zsock_set_linger(a->router, 0);
    zsock_set_sndhwm(a->router, 1000);
    /* the heartbeat socket admits the node's allow-list, like the node's own ROUTER */
    if (s->sys && shoal_system_secure_socket(s->sys, zsock_resolve(a->router), true, NULL) != 0) {
        zsock_destroy(&a->router);
        free(a);
        *err = SHOAL_EKEY;
        return NULL;
    }
    /* bounded like every listener of the node: frame size, queue, connections */
    a->guard = shoal_listener_new(s->sys, zsock_resolve(a->router), "heartbeat", ROUTER_MAX_MSG,
                                  ROUTER_RCVHWM, err);
    if (!a->guard) {
        zsock_destroy(&a->router);
        free(a);
        return NULL;
    }
    /* libzmq's wildcard (port 0 to the kernel) rather than czmq's '*', which scans upwards from
       49152 and so hands a just-freed port to the next actor at once */
    if (zmq_bind(zsock_resolve(a->router), s->bind_endpoint) != 0 ||
        shoal_listener_bound(a->guard) != 0) {
        shoal_warning("heartbeat: cannot bind %s", s->bind_endpoint);
        shoal_listener_destroy(&a->guard);
        zsock_destroy(&a->router);
        free(a);
        *err = SHOAL_EIO;
        return NULL;
    }
    char last[EP_MAX + 1] = "";
    size_t last_len = sizeof last;
    if (zmq_getsockopt(zsock_resolve(a->router), ZMQ_LAST_ENDPOINT, last, &last_len) != 0)
        last[0] = 0;
    snprintf(a->endpoint, sizeof a->endpoint, "%s", last[0] ? last : s->bind_endpoint);

    pthread_mutex_init(&a->lock, NULL);
    a->events = xcalloc(EVENTS_MAX, sizeof *a->events);
    atomic_store(&a->last_tick, shoal_now_ms());
    atomic_store(&a->paused, false);
    a->actor = zactor_new(actor_fn, a);
    if (!a->actor) {
        shoal_listener_destroy(&a->guard);
        zsock_destroy(&a->router);
        pthread_mutex_destroy(&a->lock);
        free(a->events);
        free(a);
        *err = SHOAL_EIO;
        return NULL;
    }
    *err = 0;
    return a;
}

void hb_actor_destroy(hb_actor_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    hb_actor_t *a = *self_p;
    zactor_destroy(&a->actor); /* $TERM: the actor closes every socket before it returns */
    free(a->pend_targets);
    free(a->pend_helpers);
    free(a->events);
    free(a->contacts);
    pthread_mutex_destroy(&a->lock);
    free(a);
    *self_p = NULL;
}

const char *hb_actor_endpoint(const hb_actor_t *a)
{
    return a ? a->endpoint : NULL;
}

void hb_actor_tick(hb_actor_t *a)
{
    if (a)
        atomic_store(&a->last_tick, shoal_now_ms());
}

static bool peer_copy(peer_t *dst, const hb_peer_t *src)
{
    if (!src->node_id || !src->hb_endpoint || strlen(src->node_id) >= sizeof dst->node_id ||
        !endpoint_ok(src->hb_endpoint, strlen(src->hb_endpoint)))
        return false;
    const char *nep = src->node_endpoint ? src->node_endpoint : "";
    if (strlen(nep) > EP_MAX)
        return false;
    snprintf(dst->node_id, sizeof dst->node_id, "%s", src->node_id);
    snprintf(dst->node_ep, sizeof dst->node_ep, "%s", nep);
    snprintf(dst->hb_ep, sizeof dst->hb_ep, "%s", src->hb_endpoint);
    return true;
}

int hb_actor_set_peers(hb_actor_t *a, const hb_peer_t *targets, size_t n_targets,
                       const hb_peer_t *helpers, size_t n_helpers)
{
    if (!a || (n_targets && !targets) || (n_helpers && !helpers))
        return SHOAL_EINVAL;
    peer_t *t = xcalloc(n_targets, sizeof *t), *h = xcalloc(n_helpers, sizeof *h);
    for (size_t i = 0; i < n_targets; i++)
        if (!peer_copy(&t[i], &targets[i]))
            goto invalid;
    for (size_t i = 0; i < n_helpers; i++)
        if (!peer_copy(&h[i], &helpers[i]))
            goto invalid;
    pthread_mutex_lock(&a->lock);
    free(a->pend_targets);
    free(a->pend_helpers);
    a->pend_targets = t;
    a->pend_helpers = h;
    a->pend_nt = n_targets;
    a->pend_nh = n_helpers;
    a->peers_pending = true; /* the actor takes it at its next wake-up (within an interval) */
    pthread_mutex_unlock(&a->lock);
    return 0;
invalid:
    free(t);
    free(h);
    return SHOAL_EINVAL;
}

size_t hb_actor_drain(hb_actor_t *a, hb_event_t *out, size_t cap)
{
    if (!a || !out)
        return 0;
    pthread_mutex_lock(&a->lock);
    size_t n = 0;
    while (n < cap && a->ev_n) {
        out[n++] = a->events[a->ev_head];
        a->ev_head = (a->ev_head + 1) % EVENTS_MAX;
        a->ev_n--;
    }
    pthread_mutex_unlock(&a->lock);
    return n;
}

void hb_actor_stats(hb_actor_t *a, hb_stats_t *out)
{
    if (!a || !out)
        return;
    pthread_mutex_lock(&a->lock);
    *out = a->stats_snapshot;
    pthread_mutex_unlock(&a->lock);
    if (out->local_health < 1)
        out->local_health = 1;
}

void hb_actor_pause(hb_actor_t *a, bool paused)
{
    if (a)
        atomic_store(&a->paused, paused);
}
