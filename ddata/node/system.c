/*  system.c — THE NODE: one event-loop thread (a czmq actor) owning a ROUTER, a DEALER per peer,
    the timers and every handler (see "THE NODE" in ddata.h for the contract).

    WHY IT IS BUILT THIS WAY
    - One thread owns everything, so nothing on the hot path locks. Other threads reach it only
      through a mutex-guarded queue of calls woken by an eventfd (czmq's actor pipe is a socket,
      which is not thread-safe, so it only carries $TERM from shoal_system_destroy).
    - Raw libzmq (zmq_msg_t, zmq_poll): czmq's frame objects cost about 4x a raw message.
    - The poll timeout is the time to the next due thing (timer, held frame, handshake retry, ack),
      so an idle node sleeps.
    - Messages are appended to the peer's batch by send() and flushed once per loop turn, after all
      ready input and timers ran: one frame carries many messages (Artery, Redis pipelining). A
      batch that reaches the frame limit is sealed at once. When ZeroMQ refuses a sealed frame
      (EAGAIN: the peer's queue is at its HWM, or it is not connected) the frame is kept in the
      peer's single "blocked" slot and retried when the DEALER is writable; while that slot and the
      batch are both full, send() returns SHOAL_EAGAIN. So the memory held per peer is bounded by
      two frames and nothing a send() accepted is dropped in silence.
    - Sequence numbers count messages (transport.h): the receiver reports exactly how many it
      missed (SHOAL_PEER_GAP), the sender exactly how many were never acknowledged
      (SHOAL_PEER_LOST) when a peer's incarnation changes, it is quarantined or disconnected.
    - A ROUTER that gets data from a routing id it has no handshake for answers WHO; the DEALER
      handshakes again and so learns whether the same incarnation (resume: the ROUTER moves the
      sequence state of that node to the new routing id) or a new one (PEER_RESTARTED) answers.
    - Faults are applied where frames enter and leave the node's sockets, so one node's fault can
      partition it from a peer both ways even when both live in one process.
*/
#include "curve.h"
#include "transport.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define ROUTER_BUDGET   1024  /* frames read from the ROUTER per turn: timers and flushes run too */
/* ... and bytes: a frame batches up to a frame limit's worth of messages, so 1024 full frames
   were millions of messages in one turn (a flooded node looked frozen to its own clock-gap
   check and starved its timers) */
#define ROUTER_BYTE_BUDGET (1u << 20)
#define DEALER_BUDGET   256   /* control frames read from one DEALER per turn */
#define REDIAL_MIN_MS   250   /* first redial after a failed handshake, doubling up to: */
#define REDIAL_MAX_MS   4000
#define HOUSEKEEPING_MS 10000 /* how often idle client connections are swept */
#define CLIENT_IDLE_MS  60000 /* a client silent this long is forgotten (it re-handshakes) */
#define LOG_INTERVAL_MS 1000  /* at most one log line per reason per second */
#define MAX_FRAME_LIMIT (64u << 20)
/* ZMQ_MAXMSGSIZE is the frame limit plus this: peers and clients learn the limit in the handshake
   and never send more, so a frame over it is a bug or an attack. Up to the margin it is dropped,
   counted and logged by the node's own check; past it libzmq resets the connection as soon as
   the frame's header arrives. The margin is also what a stranger can make the node hold per
   connection beyond the frame limit (ddata.h, LISTENERS). */
#define MAX_MSG_MARGIN  (64u << 10)
#define MIN_FRAME_LIMIT 1024u

/* ---------------------------------------------------------------------------------------------
 * State
 */
typedef struct {
    bool active, cut;
    double drop, duplicate;
    uint32_t delay_ms;
} fault_eff_t;

typedef struct {
    char *endpoint; /* NULL: every peer */
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port;
    shoal_fault_t f;
} fault_rule_t;

/* An outbound link: our DEALER connected to a peer's ROUTER. */
typedef struct peer {
    char *endpoint;
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port;
    void *dealer;
    void *monitor;            /* PAIR receiving the DEALER's connection events */
    const shoal_node_t *node; /* the incarnation we send to; NULL before the first handshake */
    bool up;                  /* the current connection's handshake is done */
    bool quarantined;         /* node is quarantined: nothing is sent until a new incarnation */
    bool dead;                /* disconnected; freed at the end of the loop turn */
    bool dirty;               /* in the flush list */
    bool check;               /* its sockets' ZMQ_EVENTS to be read this loop turn (THE LOOP) */
    uint8_t version;
    uint64_t peer_max_frame; /* the peer's limit, from its HelloReply (0: unknown) */
    uint32_t peer_protocol;  /* the peer's highest protocol version, from its HelloReply */
    uint64_t next_seq;       /* sequence number of the next message */
    uint64_t acked;          /* every message up to this one is acknowledged */
    shoal_batch_t batch;     /* messages not yet framed */
    shoal_buf_t blocked;     /* one sealed frame ZeroMQ refused; sent before anything else */
    int64_t next_hello_ms, last_hello_ms;
    uint32_t hello_backoff_ms;
    /* ZeroMQ gives up on a connection whose handshake failed (a CURVE key refused): the node
       dials again itself, with a backoff, so a key put back on the list is admitted */
    int64_t redial_ms;          /* 0: none due */
    uint32_t redial_backoff_ms;
    fault_eff_t fout, fin;
} peer_t;

/* An inbound connection: one routing id on our ROUTER that completed a handshake. */
typedef struct {
    uint8_t rid[256];
    size_t rid_len;
    bool client;
    bool quarantined;
    const shoal_node_t *node; /* the sender (peers only) */
    uint8_t version;
    uint32_t protocol_min, protocol_max; /* the sender's protocol range, from its Hello */
    uint64_t expected;   /* next sequence number expected */
    uint64_t acked_sent; /* highest sequence number acknowledged to the sender */
    int64_t last_seen_ms;
    int64_t told_quarantined_ms; /* when the sender was last told it is quarantined here */
    uint64_t max_reply; /* client: largest reply it reassembles from parts (0: none, one frame) */
    char user[41]; /* the CURVE key it authenticated with (Z85); "" on a plain transport */
    fault_eff_t fin, fout;
} inconn_t;

/* A frame held by a delay fault. */
typedef struct held {
    struct held *next;
    int64_t due;
    peer_t *peer;     /* outgoing: the peer to send to; NULL for incoming */
    uint8_t rid[256]; /* incoming: the routing id it came from */
    size_t rid_len;
    uint8_t *data;
    size_t len;
} held_t;

typedef struct {
    int id;
    int64_t due;
    uint32_t interval;
    bool repeat, cancelled;
    shoal_timer_fn *fn;
    void *arg;
} stimer_t;

typedef struct {
    shoal_recv_fn *recv;
    shoal_request_fn *request;
    void *arg;
} handler_t;

typedef struct {
    shoal_peer_fn *fn;
    void *arg;
} listener_t;

typedef struct call {
    struct call *next;
    shoal_call_fn *fn;
    void *arg;
    bool sync;
    bool done;
    int result;
} call_t;

enum {
    LOG_OVERSIZED,
    LOG_MALFORMED,
    LOG_NOT_HANDSHAKEN,
    LOG_QUARANTINED,
    LOG_REFUSED,
    LOG_UNKNOWN_KIND,
    LOG_SEND,
    LOG_HANDSHAKE,
    LOG_REPLY,
    LOG_REASONS
};

struct shoal_system {
    shoal_system_settings_t set;
    char *endpoint; /* as bound */
    const shoal_node_t *self;
    zactor_t *actor;
    pthread_t thread;
    void *router;
    shoal_listener_t *guard; /* the ROUTER's connections: cap, failed handshakes (listener.c) */
    shoal_curve_t *curve; /* NULL: plain transport */
    shoal_curve_t *zap_plain; /* a plain node's network rules (allow_from), or NULL */
    const char *hello_user; /* CURVE: the key (Z85) of the connection a HELLO being read came on */
    int wake_fd;
    int64_t max_msg; /* ZMQ_MAXMSGSIZE backstop: max_frame_bytes + MAX_MSG_MARGIN */
    /* the protocol version messages are sent at (ddata.h, PROTOCOL VERSION): written on the
       node thread by membership, read by senders and by tools' threads (views) */
    _Atomic uint32_t protocol;
    /* shoal/cluster/protocol-version: the highest version this node announces (0: its build's) */
    _Atomic uint32_t protocol_pin;

    /* the call queue: the only state other threads touch */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    call_t *calls_head, *calls_tail;
    size_t calls_n;
    size_t waiters; /* threads inside shoal_system_call: destroy waits for them to leave */
    bool stopping;

    /* everything below belongs to the node thread */
    bool terminated;
    peer_t **peers;
    size_t npeers, peers_cap;
    peer_t **graveyard;
    size_t ngrave, grave_cap;
    peer_t **dirty;
    size_t ndirty, dirty_cap;
    shoal_hmap_t peer_by_node; /* node pointer -> peer */
    shoal_hmap_t inconns;      /* routing id -> inconn */
    shoal_hmap_t quarantine;   /* node pointer -> (void *)1 */
    handler_t *handlers[256];  /* two-level table by kind: 256 pages of 256 */
    listener_t *listeners;
    size_t nlisteners, listeners_cap;
    stimer_t **timers;
    size_t ntimers, timers_cap;
    int next_timer_id;
    fault_rule_t *faults;
    size_t nfaults, faults_cap;
    /* guards `faults` against readers on other threads (membership's heartbeat actor); the
       node thread, the only writer, reads without it */
    pthread_mutex_t faults_lock;
    held_t *held_head, *held_tail;
    int64_t held_last_due;
    /* THE LOOP's readiness hints: an epoll set over the sockets' ZMQ_FDs */
    int epfd;
    bool router_check, guard_check, peers_check;
    int64_t next_recheck_ms;
    peer_t **turn_peers; /* the peers as the turn began (processing may add or drop some) */
    size_t turn_cap;
    shoal_buf_t scratch;
    bool ack_pending;
    uint64_t curve_gen; /* the allow-list load the open connections were last checked against */
    int64_t next_ack_ms, next_sweep_ms;
    uint64_t rng;
    shoal_ratelimit_t log_rl[LOG_REASONS];
    shoal_system_stats_t stats;
    /* messages and their payload bytes by kind class (kind >> 8: each module numbers its kinds
       in a page of its own), [0] handed to handlers, [1] accepted by send or reply; 8 KiB, one
       increment per message */
    uint64_t class_msgs[2][256], class_bytes[2][256];
};

/* ---------------------------------------------------------------------------------------------
 * Small helpers
 */
static uint64_t rng_next(shoal_system_t *sys)
{
    /* xorshift64*: faults need cheap, not cryptographic, randomness */
    uint64_t x = sys->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    sys->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static bool rng_chance(shoal_system_t *sys, double p)
{
    if (p <= 0)
        return false;
    if (p >= 1)
        return true;
    return (double)(rng_next(sys) >> 11) * 0x1.0p-53 < p;
}

static uint64_t random_uid(void)
{
    uint64_t u = 0;
    while (u == 0) {
        if (getrandom(&u, sizeof u, 0) != (ssize_t)sizeof u) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            u = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^
                ((uint64_t)getpid() << 32);
        }
    }
    return u;
}

static void log_limited(shoal_system_t *sys, int reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One line per reason per second at most: a flood of bad frames must not become a flood of
   log lines. The next line says how many were suppressed. */
static void log_limited(shoal_system_t *sys, int reason, const char *fmt, ...)
{
    uint64_t suppressed;
    if (!shoal_ratelimit_pass(&sys->log_rl[reason], LOG_INTERVAL_MS, &suppressed))
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (suppressed)
        shoal_warning("%s: %s (%" PRIu64 " similar suppressed)", shoal_node_id(sys->self), msg,
                     suppressed);
    else
        shoal_warning("%s: %s", shoal_node_id(sys->self), msg);
}

bool shoal_system_on_thread(const shoal_system_t *sys)
{
    return sys && pthread_equal(pthread_self(), sys->thread);
}

const shoal_node_t *shoal_system_self(const shoal_system_t *sys)
{
    return sys ? sys->self : NULL;
}

size_t shoal_system_max_message_bytes(const shoal_system_t *sys)
{
    /* the frame header, and the record's kind and length varints */
    size_t overhead = SHOAL_FRAME_HEADER_MAX + 3 + 10;
    return sys && sys->set.max_frame_bytes > overhead ? sys->set.max_frame_bytes - overhead : 0;
}

const char *shoal_system_endpoint(const shoal_system_t *sys)
{
    return sys ? sys->endpoint : NULL;
}

void shoal_system_settings_default(shoal_system_settings_t *s)
{
    if (!s)
        return;
    s->endpoint = "tcp://127.0.0.1:2552";
    s->uid = 0;
    s->max_frame_bytes = 256 * 1024;
    s->peer_send_hwm = 1000;
    s->ack_interval_ms = 100;
    s->handshake_retry_ms = 250;
    s->max_pending_calls = 10000;
    s->curve_cert = getenv("SHOAL_CURVE_CERT");
    s->curve_allow_dir = getenv("SHOAL_CURVE_ALLOW");
    s->max_inbound_connections = SHOAL_MAX_INBOUND_CONNECTIONS;
    s->allow_from = NULL;
    s->n_allow_from = 0;
    s->insecure = false;
}

static void emit(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                 const shoal_node_t *old, uint64_t count)
{
    /* by index: a listener may register another one */
    for (size_t i = 0; i < sys->nlisteners; i++)
        sys->listeners[i].fn(sys, ev, node, old, count, sys->listeners[i].arg);
}

static bool is_quarantined(const shoal_system_t *sys, const shoal_node_t *node)
{
    return node && shoal_hmap_get(&sys->quarantine, &node, sizeof node) != NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Faults
 */
static fault_eff_t fault_resolve(const shoal_system_t *sys, const char *host, uint16_t port,
                                 int dir)
{
    const fault_rule_t *specific = NULL, *any = NULL;
    for (size_t i = 0; i < sys->nfaults; i++) {
        const fault_rule_t *r = &sys->faults[i];
        if (!((int)r->f.dir & dir))
            continue;
        if (!r->endpoint)
            any = r;
        else if (host && r->port == port && strcmp(r->host, host) == 0)
            specific = r;
    }
    const fault_rule_t *r = specific ? specific : any;
    fault_eff_t e = {0};
    if (r) {
        e.cut = r->f.cut;
        e.drop = r->f.drop;
        e.duplicate = r->f.duplicate;
        e.delay_ms = r->f.delay_ms;
        e.active = e.cut || e.drop > 0 || e.duplicate > 0 || e.delay_ms > 0;
    }
    return e;
}

static void inconn_faults(const shoal_system_t *sys, inconn_t *c)
{
    if (c->client || !c->node) {
        /* clients are not peers: faults never apply to them */
        memset(&c->fin, 0, sizeof c->fin);
        memset(&c->fout, 0, sizeof c->fout);
        return;
    }
    c->fin = fault_resolve(sys, shoal_node_host(c->node), shoal_node_port(c->node), SHOAL_FAULT_IN);
    c->fout =
        fault_resolve(sys, shoal_node_host(c->node), shoal_node_port(c->node), SHOAL_FAULT_OUT);
}

static void peer_faults(const shoal_system_t *sys, peer_t *p)
{
    p->fin = fault_resolve(sys, p->host, p->port, SHOAL_FAULT_IN);
    p->fout = fault_resolve(sys, p->host, p->port, SHOAL_FAULT_OUT);
}

static void refresh_faults(shoal_system_t *sys)
{
    for (size_t i = 0; i < sys->npeers; i++)
        peer_faults(sys, sys->peers[i]);
    for (size_t i = 0; i < sys->inconns.cap; i++) {
        shoal_hslot_t *s = &sys->inconns.slots[i];
        if (SHOAL_HSLOT_LIVE(s))
            inconn_faults(sys, s->value);
    }
}

static void hold(shoal_system_t *sys, uint32_t delay_ms, peer_t *p, const uint8_t *rid,
                 size_t rid_len, const void *data, size_t len)
{
    held_t *h = shoal_calloc(1, sizeof *h);
    /* FIFO: a frame is never released before one held earlier, so a constant delay keeps order */
    int64_t due = shoal_now_ms() + delay_ms;
    if (due < sys->held_last_due)
        due = sys->held_last_due;
    sys->held_last_due = due;
    h->due = due;
    h->peer = p;
    if (rid) {
        memcpy(h->rid, rid, rid_len);
        h->rid_len = rid_len;
    }
    h->data = shoal_memdup(data, len);
    h->len = len;
    if (sys->held_tail)
        sys->held_tail->next = h;
    else
        sys->held_head = h;
    sys->held_tail = h;
}

static void held_free_all(shoal_system_t *sys, const peer_t *only)
{
    held_t **pp = &sys->held_head, *last = NULL;
    while (*pp) {
        held_t *h = *pp;
        if (!only || h->peer == only) {
            *pp = h->next;
            free(h->data);
            free(h);
        } else {
            last = h;
            pp = &h->next;
        }
    }
    sys->held_tail = last;
}

/* ---------------------------------------------------------------------------------------------
 * Sending
 */
static int zmq_send_raw(shoal_system_t *sys, void *sock, const void *data, size_t len)
{
    if (zmq_send(sock, data, len, ZMQ_DONTWAIT) < 0)
        return errno == EAGAIN ? SHOAL_EAGAIN : SHOAL_EIO;
    sys->stats.frames_out++;
    sys->stats.bytes_out += len;
    return 0;
}

/* A control frame to an inbound connection's routing id (ROUTER side). */
static int router_send(shoal_system_t *sys, const uint8_t *rid, size_t rid_len, const void *data,
                       size_t len)
{
    sys->router_check = true; /* a send may take the signal of an arrival: read EVENTS again */
    if (zmq_send(sys->router, rid, rid_len, ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0)
        return errno == EAGAIN ? SHOAL_EAGAIN : SHOAL_ENOTCONN; /* EHOSTUNREACH: gone */
    if (zmq_send(sys->router, data, len, ZMQ_DONTWAIT) < 0)
        return SHOAL_EAGAIN;
    sys->stats.frames_out++;
    sys->stats.bytes_out += len;
    return 0;
}

/* A reply that does not reach its client whole is counted by reason and logged, never silent:
   the client would otherwise wait for its timeout with nothing to say why. */
static void reply_dropped(shoal_system_t *sys, uint64_t *counter, int rc, uint64_t request_id,
                          uint16_t kind, size_t len, const char *why)
{
    (*counter)++;
    if (rc == SHOAL_EAGAIN)
        sys->stats.send_eagain++;
    else if (rc == SHOAL_ENOTCONN)
        sys->stats.send_notconn++;
    log_limited(sys, LOG_REPLY, "reply of %zu bytes (kind 0x%04x, request %" PRIu64 ") dropped: %s",
                len, kind, request_id, why);
}

/* Every send to a peer's DEALER: a send may process the commands whose signal announced an
   arrival, so the peer's EVENTS are read again before the loop sleeps (THE LOOP). */
static int dealer_send(shoal_system_t *sys, peer_t *p, const void *data, size_t len)
{
    p->check = true;
    sys->peers_check = true;
    return zmq_send_raw(sys, p->dealer, data, len);
}

/* A DATA frame through the peer's out fault, then to ZeroMQ. 0 also when a fault took it. */
static int send_data_frame(shoal_system_t *sys, peer_t *p, const uint8_t *data, size_t len)
{
    if (p->fout.active) {
        if (p->fout.cut || rng_chance(sys, p->fout.drop)) {
            sys->stats.dropped_fault++;
            return 0;
        }
        int copies = rng_chance(sys, p->fout.duplicate) ? 2 : 1;
        if (p->fout.delay_ms) {
            for (int i = 0; i < copies; i++)
                hold(sys, p->fout.delay_ms, p, NULL, 0, data, len);
            return 0;
        }
        int rc = dealer_send(sys, p, data, len);
        if (rc == 0 && copies == 2)
            dealer_send(sys, p, data, len);
        return rc;
    }
    return dealer_send(sys, p, data, len);
}

static size_t frame_limit(const shoal_system_t *sys, const peer_t *p)
{
    size_t lim = sys->set.max_frame_bytes;
    if (p->peer_max_frame && p->peer_max_frame < lim)
        lim = (size_t)p->peer_max_frame;
    return lim;
}

static void mark_dirty(shoal_system_t *sys, peer_t *p)
{
    if (p->dirty)
        return;
    p->dirty = true;
    SHOAL_GROW(sys->dirty, sys->dirty_cap, sys->ndirty + 1);
    sys->dirty[sys->ndirty++] = p;
}

/* Sends the blocked frame if there is one. 0 when the slot is free afterwards. */
static int flush_blocked(shoal_system_t *sys, peer_t *p)
{
    if (!p->blocked.len)
        return 0;
    if (!p->up)
        return SHOAL_EAGAIN;
    int rc = send_data_frame(sys, p, p->blocked.data, p->blocked.len);
    if (rc == SHOAL_EAGAIN)
        return rc;
    if (rc != 0)
        log_limited(sys, LOG_SEND, "send to %s failed: %s", p->endpoint, zmq_strerror(errno));
    p->blocked.len = 0;
    return 0;
}

/* Seals the batch into a frame and sends it, or parks it in the (free) blocked slot. */
static void flush_batch(shoal_system_t *sys, peer_t *p)
{
    if (!p->batch.count)
        return;
    size_t len;
    const uint8_t *frame = shoal_batch_seal(&p->batch, p->version, &len);
    int rc = p->up ? send_data_frame(sys, p, frame, len) : SHOAL_EAGAIN;
    if (rc == SHOAL_EAGAIN) {
        shoal_buf_reset(&p->blocked);
        shoal_buf_append(&p->blocked, frame, len);
    } else if (rc != 0) {
        log_limited(sys, LOG_SEND, "send to %s failed: %s", p->endpoint, zmq_strerror(errno));
    }
    shoal_batch_reset(&p->batch);
}

static void flush_peer(shoal_system_t *sys, peer_t *p)
{
    if (p->dead || !p->up)
        return;
    if (flush_blocked(sys, p) == 0)
        flush_batch(sys, p);
}

static void flush_dirty(shoal_system_t *sys)
{
    /* by index: nothing here runs user code, but keep the list stable anyway */
    for (size_t i = 0; i < sys->ndirty; i++) {
        peer_t *p = sys->dirty[i];
        p->dirty = false;
        flush_peer(sys, p);
    }
    sys->ndirty = 0;
}

/* Forgets what was queued for the current incarnation; returns how many messages were never
   acknowledged (sent, parked or batched). */
static uint64_t reset_link(peer_t *p)
{
    uint64_t lost = p->next_seq - 1 - p->acked;
    shoal_batch_reset(&p->batch);
    p->blocked.len = 0;
    p->next_seq = 1;
    p->acked = 0;
    return lost;
}

static void send_hello(shoal_system_t *sys, peer_t *p, int64_t now)
{
    if (p->fout.cut) {
        sys->stats.dropped_fault++;
        p->next_hello_ms = now + sys->set.handshake_retry_ms;
        return;
    }
    shoal_hello_t h = {0};
    h.version_min = SHOAL_WIRE_VERSION_MIN;
    h.version_max = SHOAL_WIRE_VERSION_MAX;
    snprintf(h.from, sizeof h.from, "%s", shoal_node_id(sys->self));
    if (p->node)
        snprintf(h.to_node, sizeof h.to_node, "%s", shoal_node_id(p->node));
    snprintf(h.to, sizeof h.to, "%s", p->endpoint);
    h.first_seq = p->node ? p->acked + 1 : 1;
    h.protocol_min = SHOAL_PROTOCOL_MIN;
    h.protocol_max = SHOAL_PROTOCOL_MAX;
    shoal_buf_reset(&sys->scratch);
    shoal_hello_write(&sys->scratch, &h);
    int rc = dealer_send(sys, p, sys->scratch.data, sys->scratch.len);
    if (rc == 0) {
        p->last_hello_ms = now;
        p->next_hello_ms = now + sys->set.handshake_retry_ms;
        p->hello_backoff_ms = 1;
    } else {
        /* not connected yet (ZMQ_IMMEDIATE): try again soon, backing off to the retry interval */
        p->next_hello_ms = now + p->hello_backoff_ms;
        p->hello_backoff_ms *= 2;
        if (p->hello_backoff_ms > sys->set.handshake_retry_ms)
            p->hello_backoff_ms = sys->set.handshake_retry_ms;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Receiving on the ROUTER: handshakes, data, client requests
 */
static void inconn_free(shoal_system_t *sys, inconn_t *c)
{
    shoal_hmap_remove(&sys->inconns, c->rid, c->rid_len);
    free(c);
}

static void reply_hello(shoal_system_t *sys, const uint8_t *rid, size_t rid_len, int status,
                        uint32_t version)
{
    shoal_hello_reply_t r = {
        status, "", version, sys->set.max_frame_bytes, SHOAL_PROTOCOL_MIN, SHOAL_PROTOCOL_MAX};
    snprintf(r.node, sizeof r.node, "%s", shoal_node_id(sys->self));
    shoal_buf_reset(&sys->scratch);
    shoal_hello_reply_write(&sys->scratch, &r);
    router_send(sys, rid, rid_len, sys->scratch.data, sys->scratch.len);
}

/* A peer that handshakes over CURVE uses its node's one key pair, so the key ZeroMQ
   authenticated for the connection is also the server key of the node it names: remembered, a
   seed can answer a joining node it has never met. */
static void learn_hello_key(shoal_system_t *sys, const char *node_id, const char *z85)
{
    const char *last = strrchr(node_id, ':'); /* host:port:uid -> tcp://host:port */
    uint8_t key[32];
    if (!last || strlen(z85) != 40 || !zmq_z85_decode(key, z85))
        return;
    char ep[SHOAL_NODE_ID_MAX + 8];
    snprintf(ep, sizeof ep, "tcp://%.*s", (int)(last - node_id), node_id);
    shoal_curve_learn(sys->curve, ep, key);
}

static void on_hello(shoal_system_t *sys, const uint8_t *rid, size_t rid_len,
                     const shoal_frame_t *f)
{
    shoal_hello_t h;
    if (shoal_hello_parse(f, &h) != 0) {
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "malformed handshake dropped");
        return;
    }
    if (h.from[0]) {
        /* "host:port:uid", validated by the parser: a cut silences even the refusal */
        char host[SHOAL_NODE_ID_MAX + 1];
        const char *c2 = strrchr(h.from, ':');
        const char *c1 = c2;
        while (c1 > h.from && *--c1 != ':')
            ;
        memcpy(host, h.from, (size_t)(c1 - h.from));
        host[c1 - h.from] = 0;
        uint16_t port = (uint16_t)strtoul(c1 + 1, NULL, 10);
        if (fault_resolve(sys, host, port, SHOAL_FAULT_IN).cut ||
            fault_resolve(sys, host, port, SHOAL_FAULT_OUT).cut) {
            sys->stats.dropped_fault++;
            return;
        }
    }
    uint32_t version = shoal_wire_version_pick(h.version_min, h.version_max);
    int status = SHOAL_HELLO_OK;
    const shoal_node_t *from = NULL;
    if (!version)
        status = SHOAL_HELLO_NO_COMMON_VERSION;
    else if (!shoal_endpoint_matches(sys->endpoint, h.to))
        status = SHOAL_HELLO_WRONG_ADDRESS;
    else if (h.from[0] && is_quarantined(sys, (from = shoal_node_intern(h.from))))
        status = SHOAL_HELLO_QUARANTINED; /* interned only once the address is ours */
    else if (h.client && rid_len > sizeof(((shoal_reply_to_t *)0)->routing_id))
        status = SHOAL_HELLO_MALFORMED; /* could not be replied to */
    else if (sys->hello_user && !shoal_curve_allows_z85(sys->curve, sys->hello_user))
        status = SHOAL_HELLO_NOT_ALLOWED; /* admitted once, its key has left the list since */
    if (status != SHOAL_HELLO_OK) {
        sys->stats.handshakes_refused++;
        if (status == SHOAL_HELLO_QUARANTINED)
            sys->stats.dropped_quarantined++;
        if (status == SHOAL_HELLO_NOT_ALLOWED)
            shoal_curve_count_refused(sys->curve);
        log_limited(sys, LOG_REFUSED, "handshake from %s (to %s) refused: %s",
                    h.from[0] ? h.from : "a client", h.to,
                    status == SHOAL_HELLO_NO_COMMON_VERSION ? "no common wire version"
                    : status == SHOAL_HELLO_WRONG_ADDRESS   ? "wrong address"
                    : status == SHOAL_HELLO_QUARANTINED     ? "quarantined"
                    : status == SHOAL_HELLO_NOT_ALLOWED     ? "its key is no longer on the allow-list"
                                                            : "unusable routing id");
        reply_hello(sys, rid, rid_len, status, 0);
        return;
    }
    if (sys->hello_user && !h.client)
        learn_hello_key(sys, h.from, sys->hello_user);
    int64_t now = shoal_now_ms();
    inconn_t *c = shoal_hmap_get(&sys->inconns, rid, rid_len);
    bool resuming = strcmp(h.to_node, shoal_node_id(sys->self)) == 0;
    if (c && (c->client != h.client || c->node != from)) {
        inconn_free(sys, c); /* the routing id now speaks for someone else */
        c = NULL;
    }
    if (!c) {
        c = shoal_calloc(1, sizeof *c);
        memcpy(c->rid, rid, rid_len);
        c->rid_len = rid_len;
        c->client = h.client;
        c->node = from;
        c->expected = 1;
        /* the key this connection authenticated with, checked again when the list changes */
        snprintf(c->user, sizeof c->user, "%s", sys->hello_user ? sys->hello_user : "");
        if (!h.client) {
            /* Same incarnation on another routing id (its TCP connection was re-established):
               take over its sequence state so nothing is counted twice or missed. Older
               incarnations at the same address are gone: forget them. */
            bool resumed = false;
            inconn_t **gone = NULL;
            size_t ngone = 0, gone_cap = 0;
            for (size_t i = 0; i < sys->inconns.cap; i++) {
                shoal_hslot_t *s = &sys->inconns.slots[i];
                if (!SHOAL_HSLOT_LIVE(s))
                    continue;
                inconn_t *o = s->value;
                if (o->client || !o->node)
                    continue;
                if (o->node == from) {
                    /* resumed only if the sender continues its numbering to us; a new DEALER
                       of the same incarnation (disconnect, connect) starts again at 1 */
                    if (resuming) {
                        c->expected = o->expected;
                        c->acked_sent = o->acked_sent;
                        resumed = true;
                    }
                } else if (shoal_node_port(o->node) == shoal_node_port(from) &&
                           strcmp(shoal_node_host(o->node), shoal_node_host(from)) == 0) {
                    /* another incarnation of that address */
                } else {
                    continue;
                }
                SHOAL_GROW(gone, gone_cap, ngone + 1);
                gone[ngone++] = o;
            }
            for (size_t i = 0; i < ngone; i++)
                inconn_free(sys, gone[i]);
            free(gone);
            if (!resumed && resuming) {
                c->expected = h.first_seq; /* it resumes a connection to us we have forgotten */
                c->acked_sent = h.first_seq - 1;
            }
        }
        bool inserted;
        shoal_hslot_t *s = shoal_hmap_upsert(&sys->inconns, rid, rid_len, &inserted);
        s->value = c;
        inconn_faults(sys, c);
    }
    c->version = (uint8_t)version;
    c->protocol_min = h.protocol_min;
    c->protocol_max = h.protocol_max;
    c->quarantined = false;
    c->last_seen_ms = now;
    /* said again at every handshake: a client that changed its limit handshakes again */
    c->max_reply =
        h.max_reply_bytes < SHOAL_REPLY_MAX_LIMIT ? h.max_reply_bytes : SHOAL_REPLY_MAX_LIMIT;
    sys->stats.handshakes++;
    if (c->fout.cut)
        sys->stats.dropped_fault++;
    else
        reply_hello(sys, rid, rid_len, SHOAL_HELLO_OK, version);
}

static void send_who(shoal_system_t *sys, const uint8_t *rid, size_t rid_len)
{
    shoal_buf_reset(&sys->scratch);
    shoal_frame_write_empty(&sys->scratch, SHOAL_WIRE_VERSION_MIN, SHOAL_FT_WHO);
    router_send(sys, rid, rid_len, sys->scratch.data, sys->scratch.len);
}

static handler_t *handler_get(const shoal_system_t *sys, uint16_t kind)
{
    handler_t *page = sys->handlers[kind >> 8];
    return page ? &page[kind & 0xff] : NULL;
}

static void process_frame(shoal_system_t *sys, const uint8_t *rid, size_t rid_len,
                          const uint8_t *data, size_t len, bool released);

static void on_data(shoal_system_t *sys, const uint8_t *rid, size_t rid_len, const shoal_frame_t *f,
                    const uint8_t *raw, size_t raw_len, bool released)
{
    inconn_t *c = shoal_hmap_get(&sys->inconns, rid, rid_len);
    if (!c) {
        sys->stats.dropped_not_handshaken++;
        log_limited(sys, LOG_NOT_HANDSHAKEN,
                    "data from a connection without handshake dropped (asked who it is)");
        send_who(sys, rid, rid_len);
        return;
    }
    if (c->client) {
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "data frame from a client dropped");
        return;
    }
    if (c->quarantined) {
        sys->stats.dropped_quarantined++;
        log_limited(sys, LOG_QUARANTINED, "frame from quarantined %s dropped",
                    shoal_node_id(c->node));
        /* tell it (once a second): a removed incarnation that kept its connection through a
           partition would otherwise run on as a zombie, never learning it was removed */
        int64_t now = shoal_now_ms();
        if (now - c->told_quarantined_ms >= 1000) {
            c->told_quarantined_ms = now;
            reply_hello(sys, rid, rid_len, SHOAL_HELLO_QUARANTINED, 0);
        }
        return;
    }
    if (!released && c->fin.active) {
        if (c->fin.cut || rng_chance(sys, c->fin.drop)) {
            sys->stats.dropped_fault++;
            return;
        }
        int copies = rng_chance(sys, c->fin.duplicate) ? 2 : 1;
        if (c->fin.delay_ms) {
            for (int i = 0; i < copies; i++)
                hold(sys, c->fin.delay_ms, NULL, rid, rid_len, raw, raw_len);
            return;
        }
        if (copies == 2) {
            process_frame(sys, rid, rid_len, raw, raw_len, true);
            c = shoal_hmap_get(&sys->inconns, rid, rid_len); /* handlers ran */
            if (!c)
                return;
        }
    }
    shoal_data_reader_t r;
    if (shoal_data_open(f, &r) != 0) {
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "malformed data frame from %s dropped",
                    shoal_node_id(c->node));
        return;
    }
    c->last_seen_ms = shoal_now_ms();
    const shoal_node_t *from = c->node;
    shoal_seq_verdict_t v = shoal_seq_accept(&c->expected, r.first_seq, (uint64_t)r.count);
    if (c->expected - 1 > c->acked_sent)
        sys->ack_pending = true;
    if (v.skip)
        sys->stats.duplicates += v.skip;
    if (v.missed) {
        sys->stats.gaps += v.missed;
        emit(sys, SHOAL_PEER_GAP, from, NULL, v.missed);
    }
    uint16_t kind;
    const uint8_t *d;
    size_t dl;
    for (uint64_t i = 0; shoal_data_next(&r, &kind, &d, &dl) == 1; i++) {
        if (i < v.skip)
            continue;
        handler_t *hd = kind < SHOAL_KIND_CLIENT ? handler_get(sys, kind) : NULL;
        if (!hd || !hd->recv) {
            sys->stats.dropped_unknown_kind++;
            /* No module of the kind's range (a page of 256 kinds: the replicator's, membership's,
               sharding's) is attached: a node starts listening before its modules attach (loading
               a durable store takes a while) and a peer's InitJoin or gossip arrives in between,
               or this node runs without that module. Every sender retries, so this is no fault:
               a debug line, not a warning. A kind inside an attached module's range that nobody
               handles is a real mismatch and stays a warning. */
            if (!sys->handlers[kind >> 8])
                shoal_debug("%s: message of kind %u from %s dropped: no module of its range is "
                            "attached on this node (yet)",
                            shoal_node_id(sys->self), kind, shoal_node_id(from));
            else
                log_limited(sys, LOG_UNKNOWN_KIND, "message of unknown kind %u from %s dropped",
                            kind, shoal_node_id(from));
            continue;
        }
        sys->stats.messages_in++;
        sys->class_msgs[0][kind >> 8]++;
        sys->class_bytes[0][kind >> 8] += dl;
        hd->recv(sys, from, kind, d, dl, hd->arg);
    }
}

static void on_request(shoal_system_t *sys, const uint8_t *rid, size_t rid_len,
                       const shoal_frame_t *f)
{
    inconn_t *c = shoal_hmap_get(&sys->inconns, rid, rid_len);
    if (!c) {
        sys->stats.dropped_not_handshaken++;
        log_limited(sys, LOG_NOT_HANDSHAKEN,
                    "request from a connection without handshake dropped (asked who it is)");
        send_who(sys, rid, rid_len);
        return;
    }
    uint64_t request_id;
    uint16_t kind;
    const uint8_t *d;
    size_t dl;
    if (!c->client || shoal_request_parse(f, &request_id, &kind, &d, &dl) != 0) {
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "malformed or misdirected request dropped");
        return;
    }
    c->last_seen_ms = shoal_now_ms();
    handler_t *hd = kind >= SHOAL_KIND_CLIENT ? handler_get(sys, kind) : NULL;
    if (!hd || !hd->request) {
        /* answer, so the client does not wait for its timeout */
        sys->stats.dropped_unknown_kind++;
        log_limited(sys, LOG_UNKNOWN_KIND, "client request of unknown kind %u refused", kind);
        shoal_buf_reset(&sys->scratch);
        shoal_reply_write(&sys->scratch, c->version, request_id, kind, SHOAL_EKIND, NULL, 0);
        int rc = router_send(sys, rid, rid_len, sys->scratch.data, sys->scratch.len);
        if (rc != 0)
            reply_dropped(sys,
                          rc == SHOAL_EAGAIN ? &sys->stats.replies_dropped_full
                                             : &sys->stats.replies_dropped_gone,
                          rc, request_id, kind, 0, "the refusal of an unknown kind did not go out");
        return;
    }
    shoal_reply_to_t rt;
    memcpy(rt.routing_id, rid, rid_len);
    rt.routing_id_len = rid_len;
    rt.request_id = request_id;
    sys->stats.messages_in++;
    sys->class_msgs[0][kind >> 8]++;
    sys->class_bytes[0][kind >> 8] += dl;
    hd->request(sys, &rt, kind, d, dl, hd->arg);
}

/* One frame that arrived on the ROUTER (or was released by a delay fault). */
static void process_frame(shoal_system_t *sys, const uint8_t *rid, size_t rid_len,
                          const uint8_t *data, size_t len, bool released)
{
    if (len > sys->set.max_frame_bytes) {
        sys->stats.dropped_oversized++;
        log_limited(sys, LOG_OVERSIZED, "frame of %zu bytes over the %zu-byte limit dropped", len,
                    sys->set.max_frame_bytes);
        return;
    }
    shoal_frame_t f;
    if (shoal_frame_parse(data, len, &f) != 0) {
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "malformed frame of %zu bytes dropped", len);
        return;
    }
    switch (f.type) {
    case SHOAL_FT_HELLO:
        on_hello(sys, rid, rid_len, &f);
        break;
    case SHOAL_FT_DATA:
        on_data(sys, rid, rid_len, &f, data, len, released);
        break;
    case SHOAL_FT_REQUEST:
        on_request(sys, rid, rid_len, &f);
        break;
    default:
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "frame of type %u does not go to a ROUTER", f.type);
        break;
    }
}

static void drain_router(shoal_system_t *sys)
{
    size_t bytes = 0;
    for (int n = 0; n < ROUTER_BUDGET && bytes < ROUTER_BYTE_BUDGET && !sys->terminated; n++) {
        zmq_msg_t rid, body;
        zmq_msg_init(&rid);
        if (zmq_msg_recv(&rid, sys->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&rid);
            return;
        }
        zmq_msg_init(&body);
        bool ok = zmq_msg_more(&rid) && zmq_msg_recv(&body, sys->router, ZMQ_DONTWAIT) >= 0;
        size_t parts = 2;
        while (ok && zmq_msg_more(&body)) {
            /* a multipart message is not ours: read it all, drop it */
            zmq_msg_close(&body);
            zmq_msg_init(&body);
            if (zmq_msg_recv(&body, sys->router, ZMQ_DONTWAIT) < 0)
                break;
            parts++;
        }
        if (ok) {
            /* past the handshake: counts toward the member cap, not the strangers' (listener.c) */
            shoal_listener_seen(sys->guard, zmq_msg_get(&body, ZMQ_SRCFD));
            size_t len = zmq_msg_size(&body);
            bytes += len;
            sys->stats.frames_in++;
            sys->stats.bytes_in += len;
            if (parts != 2 || zmq_msg_size(&rid) > 255) {
                sys->stats.dropped_malformed++;
                log_limited(sys, LOG_MALFORMED, "multipart message of %zu parts dropped", parts);
            } else {
                const uint8_t *d = zmq_msg_data(&body);
                sys->hello_user = sys->curve && len >= 2 && d[1] == SHOAL_FT_HELLO
                                      ? zmq_msg_gets(&body, "User-Id")
                                      : NULL;
                process_frame(sys, zmq_msg_data(&rid), zmq_msg_size(&rid), d, len, false);
                sys->hello_user = NULL;
            }
        }
        zmq_msg_close(&body);
        zmq_msg_close(&rid);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Receiving on a DEALER: handshake replies, acks, WHO
 */
static void on_hello_reply(shoal_system_t *sys, peer_t *p, const shoal_hello_reply_t *r)
{
    /* the peer we chose to connect to names itself: interning its id is fine */
    const shoal_node_t *node = r->node[0] ? shoal_node_intern(r->node) : NULL;
    if (r->status != SHOAL_HELLO_OK) {
        log_limited(sys, LOG_REFUSED, "handshake with %s refused by %s: %s", p->endpoint,
                    r->node[0] ? r->node : "(unnamed)",
                    r->status == SHOAL_HELLO_NO_COMMON_VERSION ? "no common wire version"
                    : r->status == SHOAL_HELLO_WRONG_ADDRESS   ? "wrong address"
                    : r->status == SHOAL_HELLO_QUARANTINED     ? "we are quarantined there"
                    : r->status == SHOAL_HELLO_NOT_ALLOWED     ? "our key is not on its allow-list"
                                                               : "malformed handshake");
        p->up = false;
        p->next_hello_ms = shoal_now_ms() + sys->set.handshake_retry_ms;
        if (r->status == SHOAL_HELLO_QUARANTINED && node)
            emit(sys, SHOAL_PEER_QUARANTINED, node, NULL, 0);
        return;
    }
    if (is_quarantined(sys, node)) {
        p->up = false;
        p->next_hello_ms = shoal_now_ms() + sys->set.handshake_retry_ms;
        return;
    }
    if (p->up && p->node == node)
        return; /* an answer to a repeated Hello */
    const shoal_node_t *old = p->node;
    p->version = (uint8_t)r->version;
    p->peer_max_frame = r->max_frame_bytes;
    p->peer_protocol = r->protocol_max;
    p->up = true;
    sys->stats.handshakes++;
    if (old == node && !p->quarantined) {
        /* the same incarnation: resume, flush what waited for the handshake */
        if (p->batch.count || p->blocked.len)
            mark_dirty(sys, p);
        return;
    }
    uint64_t lost = p->quarantined ? 0 : reset_link(p);
    p->quarantined = false;
    if (old) {
        peer_t *mapped = shoal_hmap_get(&sys->peer_by_node, &old, sizeof old);
        if (mapped == p)
            shoal_hmap_remove(&sys->peer_by_node, &old, sizeof old);
    }
    p->node = node;
    bool inserted;
    shoal_hslot_t *s = shoal_hmap_upsert(&sys->peer_by_node, &p->node, sizeof p->node, &inserted);
    s->value = p;
    if (!old) {
        shoal_info("%s: peer %s up at %s", shoal_node_id(sys->self), shoal_node_id(p->node),
                  p->endpoint);
        emit(sys, SHOAL_PEER_UP, p->node, NULL, 0);
        return;
    }
    shoal_info("%s: peer at %s restarted: %s replaces %s (%" PRIu64 " messages unacknowledged)",
              shoal_node_id(sys->self), p->endpoint, shoal_node_id(p->node), shoal_node_id(old),
              lost);
    emit(sys, SHOAL_PEER_RESTARTED, p->node, old, 0);
    if (lost) {
        sys->stats.lost_unacked += lost;
        emit(sys, SHOAL_PEER_LOST, old, NULL, lost);
    }
}

static void process_dealer_frame(shoal_system_t *sys, peer_t *p, const uint8_t *data, size_t len)
{
    sys->stats.frames_in++;
    sys->stats.bytes_in += len;
    if (len > sys->set.max_frame_bytes) {
        sys->stats.dropped_oversized++;
        log_limited(sys, LOG_OVERSIZED, "frame of %zu bytes from %s over the limit dropped", len,
                    p->endpoint);
        return;
    }
    shoal_frame_t f;
    if (shoal_frame_parse(data, len, &f) != 0) {
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "malformed frame from %s dropped", p->endpoint);
        return;
    }
    if (p->fin.cut) {
        sys->stats.dropped_fault++;
        return;
    }
    switch (f.type) {
    case SHOAL_FT_HELLO_REPLY: {
        shoal_hello_reply_t r;
        if (shoal_hello_reply_parse(&f, &r) != 0) {
            sys->stats.dropped_malformed++;
            log_limited(sys, LOG_MALFORMED, "malformed handshake reply from %s", p->endpoint);
            return;
        }
        on_hello_reply(sys, p, &r);
        break;
    }
    case SHOAL_FT_ACK: {
        uint64_t seq;
        if (shoal_ack_parse(&f, &seq) != 0 || !p->node) {
            sys->stats.dropped_malformed++;
            return;
        }
        /* an ack past what we sent belongs to an older numbering (a reset link): ignore */
        if (seq > p->acked && seq < p->next_seq)
            p->acked = seq;
        break;
    }
    case SHOAL_FT_WHO:
        if (p->up) {
            /* the ROUTER does not know this connection: a reconnect, or a new incarnation */
            p->up = false;
            send_hello(sys, p, shoal_now_ms());
        }
        break;
    default:
        sys->stats.dropped_malformed++;
        log_limited(sys, LOG_MALFORMED, "frame of type %u does not go to a DEALER", f.type);
        break;
    }
}

static void drain_dealer(shoal_system_t *sys, peer_t *p)
{
    for (int n = 0; n < DEALER_BUDGET && !p->dead; n++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        if (zmq_msg_more(&m)) {
            sys->stats.dropped_malformed++;
            while (zmq_msg_more(&m)) {
                zmq_msg_close(&m);
                zmq_msg_init(&m);
                if (zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) < 0)
                    break;
            }
        } else {
            process_dealer_frame(sys, p, zmq_msg_data(&m), zmq_msg_size(&m));
        }
        zmq_msg_close(&m);
    }
}

/* Reads one event of a socket monitor (ZeroMQ sends the event and its value, then its address,
   as two frames): false when none is waiting. `where` (may be NULL) gets the address. */
static bool monitor_event(void *monitor, uint16_t *event, uint32_t *value, char *where,
                          size_t cap)
{
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&ev);
        return false;
    }
    *event = 0;
    *value = 0;
    if (zmq_msg_size(&ev) >= 2)
        memcpy(event, zmq_msg_data(&ev), 2);
    if (zmq_msg_size(&ev) >= 6)
        memcpy(value, (uint8_t *)zmq_msg_data(&ev) + 2, 4);
    zmq_msg_init(&addr);
    if (where && cap)
        snprintf(where, cap, "?");
    if (zmq_msg_more(&ev) && zmq_msg_recv(&addr, monitor, ZMQ_DONTWAIT) >= 0 && where && cap) {
        size_t l = zmq_msg_size(&addr) < cap - 1 ? zmq_msg_size(&addr) : cap - 1;
        memcpy(where, zmq_msg_data(&addr), l);
        where[l] = 0;
    }
    zmq_msg_close(&addr);
    zmq_msg_close(&ev);
    return true;
}

/* Connection events of a DEALER. A new connection (first, or after the peer's ROUTER went away)
   is a new routing id on the peer's side, so the DEALER handshakes again at once: that is how a
   restarted peer is found even when nothing is being sent to it. While disconnected the peer is
   not up, so sends wait in the batch (and then fail with SHOAL_EAGAIN) instead of going into a
   pipe ZeroMQ is about to drop. */
static void drain_monitor(shoal_system_t *sys, peer_t *p)
{
    uint16_t event;
    uint32_t value;
    for (int n = 0; n < DEALER_BUDGET && monitor_event(p->monitor, &event, &value, NULL, 0);
         n++) {
        int64_t now = shoal_now_ms();
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            p->redial_backoff_ms = 0;
            p->up = false;
            p->hello_backoff_ms = 1;
            send_hello(sys, p, now);
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            p->up = false;
            p->hello_backoff_ms = 1;
            p->next_hello_ms = now + sys->set.handshake_retry_ms;
        } else {
            p->up = false;
            /* ZeroMQ retries by itself meanwhile (every 100 ms or so): a redial already due
               stays due, or those failures would push it out for ever */
            if (!p->redial_ms) {
                p->redial_backoff_ms =
                    p->redial_backoff_ms ? p->redial_backoff_ms * 2 : REDIAL_MIN_MS;
                if (p->redial_backoff_ms > REDIAL_MAX_MS)
                    p->redial_backoff_ms = REDIAL_MAX_MS;
                p->redial_ms = now + p->redial_backoff_ms;
            }
            const char *why;
            if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
                why = sys->curve ? "it does not speak CURVE (a plain node?)"
                                 : "it asked for another security mechanism (does it require "
                                   "CURVE?)";
            else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
                why = "it refused this node's key: is the key on its allow-list?";
            else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
                why = "ZeroMQ protocol error (is it a Shoal node?)";
            else
                why = sys->curve ? "the connection closed before the handshake was complete "
                                   "(is this node's key on its allow-list, and its key on ours?)"
                                 : "the connection closed before the handshake was complete "
                                   "(is it a Shoal node? does it require CURVE?)";
            log_limited(sys, LOG_HANDSHAKE,
                        "cannot %s with %s (ZeroMQ handshake failed, event 0x%x, 0x%x): %s",
                        sys->curve ? "authenticate" : "connect", p->endpoint, event, value, why);
        }
    }
}

#define HANDSHAKE_FAILED_EVENTS                                                                    \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                  \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

/* The ROUTER's connections (listener.c counts, caps and logs them): its counts go into the
   node's. */
static void drain_router_guard(shoal_system_t *sys)
{
    shoal_listener_drain(sys->guard);
    shoal_listener_stats_t g;
    shoal_listener_stats(sys->guard, &g);
    sys->stats.handshakes_failed = g.handshakes_failed;
    sys->stats.handshakes_mismatched = g.handshakes_mismatched;
    sys->stats.handshakes_incomplete = g.handshakes_incomplete;
    sys->stats.connections_refused = g.refused;
    sys->stats.connections_open = g.open;
}

/* ---------------------------------------------------------------------------------------------
 * Periodic work: timers, held frames, handshakes, acks, sweeps
 */
static void run_timers(shoal_system_t *sys, int64_t now)
{
    size_t n = sys->ntimers; /* timers added by callbacks wait for the next turn */
    for (size_t i = 0; i < n; i++) {
        stimer_t *t = sys->timers[i];
        if (t->cancelled || t->due > now)
            continue;
        t->fn(sys, t->arg);
        t = sys->timers[i]; /* the array may have grown */
        if (t->cancelled)
            continue;
        if (t->repeat) {
            t->due += t->interval;
            if (t->due <= now)
                t->due = now + t->interval; /* fell behind: do not fire in a burst */
        } else {
            t->cancelled = true;
        }
    }
    size_t w = 0;
    for (size_t i = 0; i < sys->ntimers; i++) {
        if (sys->timers[i]->cancelled)
            free(sys->timers[i]);
        else
            sys->timers[w++] = sys->timers[i];
    }
    sys->ntimers = w;
}

static void release_held(shoal_system_t *sys, int64_t now)
{
    while (sys->held_head && sys->held_head->due <= now && !sys->terminated) {
        held_t *h = sys->held_head;
        sys->held_head = h->next;
        if (!sys->held_head)
            sys->held_tail = NULL;
        if (h->peer) {
            int rc =
                h->peer->up ? zmq_send_raw(sys, h->peer->dealer, h->data, h->len) : SHOAL_ENOTCONN;
            if (rc != 0) {
                /* a test facility: the frame is lost and the receiver will see the gap */
                sys->stats.dropped_fault++;
            }
        } else {
            process_frame(sys, h->rid, h->rid_len, h->data, h->len, true);
        }
        free(h->data);
        free(h);
    }
}

static void send_acks(shoal_system_t *sys)
{
    sys->ack_pending = false;
    for (size_t i = 0; i < sys->inconns.cap; i++) {
        shoal_hslot_t *s = &sys->inconns.slots[i];
        if (!SHOAL_HSLOT_LIVE(s))
            continue;
        inconn_t *c = s->value;
        if (c->client || c->expected - 1 <= c->acked_sent)
            continue;
        if (c->fout.cut) {
            sys->stats.dropped_fault++;
            sys->ack_pending = true; /* acked when the cut heals */
            continue;
        }
        shoal_buf_reset(&sys->scratch);
        shoal_ack_write(&sys->scratch, c->version, c->expected - 1);
        int rc = router_send(sys, c->rid, c->rid_len, sys->scratch.data, sys->scratch.len);
        if (rc == SHOAL_EAGAIN)
            sys->ack_pending = true; /* the next interval tries again */
        else
            c->acked_sent = c->expected - 1; /* sent, or the connection is gone */
    }
}

/* Frees the inbound connections `drop` picks (collected first: freeing edits the map). */
static void inconns_drop_where(shoal_system_t *sys,
                               bool (*drop)(shoal_system_t *, const inconn_t *, int64_t),
                               int64_t now)
{
    inconn_t **gone = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < sys->inconns.cap; i++) {
        shoal_hslot_t *s = &sys->inconns.slots[i];
        if (SHOAL_HSLOT_LIVE(s) && drop(sys, s->value, now)) {
            SHOAL_GROW(gone, cap, n + 1);
            gone[n++] = s->value;
        }
    }
    for (size_t i = 0; i < n; i++)
        inconn_free(sys, gone[i]);
    free(gone);
}

static bool client_idle(shoal_system_t *sys, const inconn_t *c, int64_t now)
{
    (void)sys;
    return c->client && now - c->last_seen_ms > CLIENT_IDLE_MS;
}

/* A key taken off the allow-list is refused at its next connection by the ZAP handler, but an
   open connection was admitted before and ZeroMQ keeps it. So, after every load of the list,
   the connections whose key is no longer on it are forgotten: their next frame is answered WHO,
   and the handshake that follows is refused (SHOAL_HELLO_NOT_ALLOWED). */
static bool key_revoked(shoal_system_t *sys, const inconn_t *c, int64_t now)
{
    (void)now;
    if (!c->user[0] || shoal_curve_allows_z85(sys->curve, c->user))
        return false;
    shoal_warning("%s: key %s left the allow-list: the open connection of %s is refused from now on",
                 shoal_node_id(sys->self), c->user, c->node ? shoal_node_id(c->node) : "a client");
    shoal_curve_count_refused(sys->curve);
    return true;
}

/* After a load of the allow-list: the open connections with keys no longer on it are refused,
   and this node stops talking to such members (what it sends they could read). */
static void recheck_keys(shoal_system_t *sys, int64_t now)
{
    inconns_drop_where(sys, key_revoked, now);
    for (size_t i = sys->npeers; i-- > 0;) {
        peer_t *p = sys->peers[i];
        if (!shoal_curve_server_revoked(sys->curve, p->endpoint))
            continue;
        shoal_warning("%s: the key of %s left the allow-list: closing the connection to it",
                     shoal_node_id(sys->self), p->endpoint);
        shoal_curve_count_refused(sys->curve);
        shoal_system_disconnect(sys, p->endpoint);
    }
}

static void periodic(shoal_system_t *sys)
{
    int64_t now = shoal_now_ms();
    run_timers(sys, now);
    release_held(sys, now);
    now = shoal_now_ms();
    for (size_t i = 0; i < sys->npeers; i++) {
        peer_t *p = sys->peers[i];
        if (p->redial_ms && now >= p->redial_ms && !p->dead) {
            p->redial_ms = 0;
            zmq_disconnect(p->dealer, p->endpoint);
            /* the server key again: a peer that restarted with a new key (a rotation) is
               reached with the one it now runs (curve.c, server_key); options apply to the
               connections opened after them */
            if (sys->curve)
                shoal_curve_client(sys->curve, p->dealer, p->endpoint);
            zmq_connect(p->dealer, p->endpoint);
            p->check = true;
            sys->peers_check = true;
        }
        if (!p->up && !p->dead && now >= p->next_hello_ms)
            send_hello(sys, p, now);
    }
    if (sys->ack_pending && now >= sys->next_ack_ms) {
        send_acks(sys);
        sys->next_ack_ms = now + sys->set.ack_interval_ms;
    }
    shoal_curve_tick(sys->curve, now);
    uint64_t gen = shoal_curve_generation(sys->curve);
    if (gen != sys->curve_gen) {
        sys->curve_gen = gen;
        recheck_keys(sys, now);
    }
    if (now >= sys->next_sweep_ms) {
        inconns_drop_where(sys, client_idle, now);
        sys->next_sweep_ms = now + HOUSEKEEPING_MS;
    }
}

/* Milliseconds until the next due thing, or -1 for none. */
static long next_timeout(shoal_system_t *sys)
{
    int64_t now = shoal_now_ms();
    int64_t due = now + HOUSEKEEPING_MS;
    if (sys->next_sweep_ms < due)
        due = sys->next_sweep_ms;
    for (size_t i = 0; i < sys->ntimers; i++)
        if (!sys->timers[i]->cancelled && sys->timers[i]->due < due)
            due = sys->timers[i]->due;
    if (sys->held_head && sys->held_head->due < due)
        due = sys->held_head->due;
    for (size_t i = 0; i < sys->npeers; i++) {
        if (!sys->peers[i]->up && sys->peers[i]->next_hello_ms < due)
            due = sys->peers[i]->next_hello_ms;
        if (sys->peers[i]->redial_ms && sys->peers[i]->redial_ms < due)
            due = sys->peers[i]->redial_ms;
    }
    if (sys->ack_pending && sys->next_ack_ms < due)
        due = sys->next_ack_ms;
    return due <= now ? 0 : (long)(due - now);
}

/* ---------------------------------------------------------------------------------------------
 * The call queue
 */
static void run_calls(shoal_system_t *sys)
{
    uint64_t v;
    ssize_t rd = read(sys->wake_fd, &v, sizeof v); /* reset the eventfd before taking the queue */
    (void)rd;
    pthread_mutex_lock(&sys->lock);
    call_t *c = sys->calls_head;
    sys->calls_head = sys->calls_tail = NULL;
    sys->calls_n = 0;
    pthread_mutex_unlock(&sys->lock);
    while (c) {
        call_t *next = c->next;
        int r = c->fn(sys, c->arg);
        if (c->sync) {
            pthread_mutex_lock(&sys->lock);
            c->result = r;
            c->done = true; /* c lives on the caller's stack: not touched after this */
            pthread_cond_broadcast(&sys->cond);
            pthread_mutex_unlock(&sys->lock);
        } else {
            free(c);
        }
        c = next;
    }
}

static void fail_calls(shoal_system_t *sys)
{
    pthread_mutex_lock(&sys->lock);
    call_t *c = sys->calls_head;
    sys->calls_head = sys->calls_tail = NULL;
    sys->calls_n = 0;
    while (c) {
        call_t *next = c->next;
        if (c->sync) {
            c->result = SHOAL_ESTOPPED;
            c->done = true;
        } else {
            free(c); /* a post that never ran */
        }
        c = next;
    }
    pthread_cond_broadcast(&sys->cond);
    pthread_mutex_unlock(&sys->lock);
}

static int enqueue(shoal_system_t *sys, call_t *c)
{
    if (sys->stopping)
        return SHOAL_ESTOPPED;
    if (sys->calls_n >= sys->set.max_pending_calls)
        return SHOAL_EBUSY;
    if (sys->calls_tail)
        sys->calls_tail->next = c;
    else
        sys->calls_head = c;
    sys->calls_tail = c;
    if (sys->calls_n++ == 0) {
        uint64_t one = 1;
        ssize_t wr = write(sys->wake_fd, &one, sizeof one);
        (void)wr;
    }
    return 0;
}

int shoal_system_call(shoal_system_t *sys, shoal_call_fn *fn, void *arg)
{
    if (!sys || !fn)
        return SHOAL_EINVAL;
    if (shoal_system_on_thread(sys))
        return SHOAL_EDEADLK;
    call_t c = {NULL, fn, arg, true, false, 0};
    pthread_mutex_lock(&sys->lock);
    int rc = enqueue(sys, &c);
    if (rc == 0) {
        sys->waiters++;
        while (!c.done)
            pthread_cond_wait(&sys->cond, &sys->lock);
        rc = c.result;
        if (--sys->waiters == 0 && sys->stopping)
            pthread_cond_broadcast(&sys->cond); /* destroy may be waiting for us to leave */
    }
    pthread_mutex_unlock(&sys->lock);
    return rc;
}

int shoal_system_post(shoal_system_t *sys, shoal_call_fn *fn, void *arg)
{
    if (!sys || !fn)
        return SHOAL_EINVAL;
    call_t *c = shoal_calloc(1, sizeof *c);
    c->fn = fn;
    c->arg = arg;
    pthread_mutex_lock(&sys->lock);
    int rc = enqueue(sys, c);
    pthread_mutex_unlock(&sys->lock);
    if (rc != 0)
        free(c);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The loop

    THE LOOP waits on an epoll set over each socket's ZMQ_FD, not on zmq_poll: zmq_poll reads
    ZMQ_EVENTS of every socket it is given at every wake-up (two system calls each), and a node
    has a DEALER and a monitor per peer, so an idle node of a 50-member cluster made some 2,300
    calls a second for the dozen wake-ups it needed. A ZMQ_FD is only a hint: it is readable when
    commands wait for its socket, not while messages do, and a send or receive may process the
    command that announced an arrival. So a socket's ZMQ_EVENTS is read when its fd was readable,
    after every send to it (dealer_send, router_send), after a drain that stopped at its budget,
    and every RECHECK_MS for every socket whatever the hints say, which bounds the cost of a
    missed hint (none is expected: the rules above are libzmq's, and the cluster, sharding and
    replicator tests passed unchanged with this sweep turned off). The loop does not sleep while
    any socket is to be read again.
 */
#define RECHECK_MS 2000
/* epoll tags: the fixed sockets by small numbers, a peer's DEALER by its address and its monitor
   by its address + 1 (peer_t is aligned to 8) */
enum { TAG_PIPE = 1, TAG_WAKE, TAG_ROUTER, TAG_GUARD };

int shoal_zmq_fd(void *sock)
{
    int fd = -1;
    size_t sz = sizeof fd;
    return sock && zmq_getsockopt(sock, ZMQ_FD, &fd, &sz) == 0 ? fd : -1;
}

int shoal_zmq_events(void *sock)
{
    int ev = 0;
    size_t sz = sizeof ev;
    return sock && zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &sz) == 0 ? ev : 0;
}

static void watch_fd(shoal_system_t *sys, int fd, uint64_t tag)
{
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = tag};
    if (fd >= 0 && epoll_ctl(sys->epfd, EPOLL_CTL_ADD, fd, &e) != 0)
        shoal_error("%s: epoll_ctl: %s", shoal_node_id(sys->self), strerror(errno));
}

static void peer_watch(shoal_system_t *sys, peer_t *p)
{
    if (sys->epfd < 0)
        return;
    watch_fd(sys, shoal_zmq_fd(p->dealer), (uint64_t)(uintptr_t)p);
    watch_fd(sys, shoal_zmq_fd(p->monitor), (uint64_t)(uintptr_t)p + 1);
    p->check = true;
    sys->peers_check = true;
}

static void peer_close(shoal_system_t *sys, peer_t *p)
{
    if (p->dealer) {
        if (sys->epfd >= 0) {
            epoll_ctl(sys->epfd, EPOLL_CTL_DEL, shoal_zmq_fd(p->dealer), NULL);
            epoll_ctl(sys->epfd, EPOLL_CTL_DEL, shoal_zmq_fd(p->monitor), NULL);
        }
        zmq_socket_monitor(p->dealer, NULL, 0);
        zmq_close(p->monitor);
        zmq_close(p->dealer);
        p->dealer = p->monitor = NULL;
    }
    p->check = false;
    held_free_all(sys, p);
}

static void peer_free(peer_t *p)
{
    shoal_batch_free(&p->batch);
    shoal_buf_free(&p->blocked);
    free(p->endpoint);
    free(p);
}

static void reap(shoal_system_t *sys)
{
    for (size_t i = 0; i < sys->ngrave; i++)
        peer_free(sys->graveyard[i]);
    sys->ngrave = 0;
}

/* A peer's sockets: connection events, arrivals, room again for a blocked frame. */
static void serve_peer(shoal_system_t *sys, peer_t *p)
{
    p->check = false;
    if (shoal_zmq_events(p->monitor) & ZMQ_POLLIN)
        drain_monitor(sys, p);
    if (p->dead)
        return;
    int ev = shoal_zmq_events(p->dealer);
    if (ev & ZMQ_POLLIN)
        drain_dealer(sys, p);
    if (!p->dead && (ev & ZMQ_POLLOUT) && p->up && p->blocked.len)
        mark_dirty(sys, p); /* room again in the peer's queue */
    /* what a budget left, or what arrived meanwhile, is served next turn */
    if (!p->dead &&
        ((shoal_zmq_events(p->dealer) & ZMQ_POLLIN) || (shoal_zmq_events(p->monitor) & ZMQ_POLLIN))) {
        p->check = true;
        sys->peers_check = true;
    }
}

static void loop(shoal_system_t *sys, zsock_t *pipe)
{
    void *pipe_sock = zsock_resolve(pipe);
    sys->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sys->epfd < 0) {
        shoal_error("%s: epoll_create1: %s", shoal_node_id(sys->self), strerror(errno));
        return;
    }
    watch_fd(sys, shoal_zmq_fd(pipe_sock), TAG_PIPE);
    watch_fd(sys, sys->wake_fd, TAG_WAKE);
    watch_fd(sys, shoal_zmq_fd(sys->router), TAG_ROUTER);
    watch_fd(sys, shoal_zmq_fd(shoal_listener_socket(sys->guard)), TAG_GUARD);
    for (size_t i = 0; i < sys->npeers; i++)
        peer_watch(sys, sys->peers[i]);
    bool pipe_check = true, wake_check = true;
    sys->router_check = sys->guard_check = true;
    struct epoll_event evs[64];
    while (!sys->terminated) {
        int64_t now = shoal_now_ms();
        long timeout = next_timeout(sys);
        if (sys->next_recheck_ms - now < timeout)
            timeout = sys->next_recheck_ms <= now ? 0 : (long)(sys->next_recheck_ms - now);
        if (pipe_check || wake_check || sys->router_check || sys->guard_check || sys->peers_check)
            timeout = 0;
        int n = epoll_wait(sys->epfd, evs, (int)(sizeof evs / sizeof evs[0]), (int)timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            shoal_error("%s: epoll_wait failed: %s", shoal_node_id(sys->self), strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_PIPE)
                pipe_check = true;
            else if (tag == TAG_WAKE)
                wake_check = true;
            else if (tag == TAG_ROUTER)
                sys->router_check = true;
            else if (tag == TAG_GUARD)
                sys->guard_check = true;
            else {
                ((peer_t *)(uintptr_t)(tag & ~(uint64_t)1))->check = true;
                sys->peers_check = true;
            }
        }
        now = shoal_now_ms();
        if (now >= sys->next_recheck_ms) {
            sys->next_recheck_ms = now + RECHECK_MS;
            pipe_check = sys->router_check = sys->guard_check = sys->peers_check = true;
            for (size_t i = 0; i < sys->npeers; i++)
                sys->peers[i]->check = true;
        }
        if (pipe_check) {
            pipe_check = false;
            if (shoal_zmq_events(pipe_sock) & ZMQ_POLLIN) {
                char *cmd = zstr_recv(pipe);
                if (!cmd || strcmp(cmd, "$TERM") == 0)
                    sys->terminated = true;
                zstr_free(&cmd);
                if (sys->terminated)
                    break;
                pipe_check = true;
            }
        }
        if (wake_check) {
            wake_check = false;
            run_calls(sys);
        }
        if (sys->router_check) {
            sys->router_check = false;
            if (shoal_zmq_events(sys->router) & ZMQ_POLLIN)
                drain_router(sys);
            if (shoal_zmq_events(sys->router) & ZMQ_POLLIN)
                sys->router_check = true;
        }
        if (sys->guard_check) {
            sys->guard_check = false;
            void *g = shoal_listener_socket(sys->guard);
            if (shoal_zmq_events(g) & ZMQ_POLLIN)
                drain_router_guard(sys);
            if (shoal_zmq_events(g) & ZMQ_POLLIN)
                sys->guard_check = true;
        }
        if (sys->peers_check) {
            sys->peers_check = false;
            size_t np = sys->npeers;
            if (np > sys->turn_cap) {
                sys->turn_peers = shoal_realloc(sys->turn_peers, np * sizeof *sys->turn_peers);
                sys->turn_cap = np;
            }
            if (np)
                memcpy(sys->turn_peers, sys->peers, np * sizeof *sys->peers);
            for (size_t i = 0; i < np; i++) {
                peer_t *p = sys->turn_peers[i];
                if (!p->dead && p->check)
                    serve_peer(sys, p);
            }
        }
        periodic(sys);
        flush_dirty(sys);
        reap(sys);
    }
}

static void actor_fn(zsock_t *pipe, void *arg)
{
    shoal_system_t *sys = arg;
    sys->thread = pthread_self();
    zsock_signal(pipe, 0);
    loop(sys, pipe);
    /* the sockets belong to this thread: close them here, with linger 0 set on each */
    for (size_t i = 0; i < sys->npeers; i++) {
        peer_close(sys, sys->peers[i]);
        peer_free(sys->peers[i]);
    }
    sys->npeers = 0;
    reap(sys);
    held_free_all(sys, NULL);
    if (sys->epfd >= 0)
        close(sys->epfd);
    sys->epfd = -1;
    shoal_listener_destroy(&sys->guard);
    zmq_close(sys->router);
    sys->router = NULL;
    pthread_mutex_lock(&sys->lock);
    sys->stopping = true;
    pthread_mutex_unlock(&sys->lock);
    fail_calls(sys);
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle
 */
static pthread_once_t zmq_once = PTHREAD_ONCE_INIT;
static void *zmq_ctx;

static void zmq_ctx_init(void)
{
    /* A library does not take the process's signals (czmq would install its own SIGINT and SIGTERM
       handlers): the application decides what they do. Logs go to stderr, leaving stdout to the
       program. */
    zsys_handler_set(NULL);
    zmq_ctx = zsys_init(); /* not safe to race on its first call: pthread_once guards it */
    zsys_set_logstream(stderr);
}

void *shoal_zmq_context(void)
{
    pthread_once(&zmq_once, zmq_ctx_init);
    return zmq_ctx;
}

/* A process-wide counter names monitors, not a node's address: a node made where a destroyed
   one was would find the old inproc names still bound (ZeroMQ unbinds asynchronously). */
static void monitor_name(char *out, size_t cap)
{
    static atomic_uint_fast64_t monitors;
    snprintf(out, cap, "inproc://shoal-monitor-%" PRIu64,
             (uint64_t)atomic_fetch_add(&monitors, 1));
}

static void set_int(void *sock, int opt, int v)
{
    zmq_setsockopt(sock, opt, &v, sizeof v);
}

uint32_t shoal_system_max_inbound_connections(const shoal_system_t *sys)
{
    return sys ? sys->set.max_inbound_connections : SHOAL_MAX_INBOUND_CONNECTIONS;
}

static void common_opts(shoal_system_t *sys, void *sock)
{
    set_int(sock, ZMQ_LINGER, 0);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &sys->max_msg, sizeof sys->max_msg);
    if (strchr(sys->set.endpoint, '['))
        set_int(sock, ZMQ_IPV6, 1);
}

/* Whether the address a socket bound (ZMQ_LAST_ENDPOINT) is loopback or a local path: what a
   plain node may bind without allow_from or insecure (PROTECTED MODE in ddata.h). */
static bool bound_is_loopback(const char *bound)
{
    if (strncmp(bound, "ipc://", 6) == 0)
        return true;
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port;
    if (shoal_endpoint_split(bound, host, sizeof host, &port) != 0)
        return false;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

/* A bind endpoint whose host is a name ("tcp://localhost:2552"): libzmq reads a name in a bind as
   a network interface and fails with "No such device". The name's first IPv4 address (else its
   first IPv6 one, in brackets) is bound instead, and the node id records that address, the one
   peers dial. True with the endpoint in out; false for an address literal, an ipc:// path, or a
   name that does not resolve (libzmq's, as before: an interface name such as "lo"). */
static bool resolve_bind_host(const char *endpoint, char *out, size_t cap)
{
    return shoal_endpoint_resolve_host(endpoint, out, cap) == 1;
}

shoal_system_t *shoal_system_new(const shoal_system_settings_t *s, int *err)
{
    shoal_error_detail_clear();
    int dummy;
    if (!err)
        err = &dummy;
    *err = SHOAL_EINVAL;
    if (!s || !s->endpoint || s->max_frame_bytes < MIN_FRAME_LIMIT ||
        s->max_frame_bytes > MAX_FRAME_LIMIT || s->peer_send_hwm <= 0 || s->ack_interval_ms == 0 ||
        s->handshake_retry_ms == 0 || s->max_pending_calls == 0 || s->max_inbound_connections == 0)
        return NULL;
    /* before libzmq sees it: it binds "tcp://h:99999" somewhere else, and a wildcard host under a
       node id peers cannot dial, without a word */
    char why[256];
    if (shoal_endpoint_check_bind(s->endpoint, false, why, sizeof why) != 0) {
        shoal_error_detail_log("shoal: cannot start a node at %s: %s", s->endpoint, why);
        return NULL;
    }
    char resolved[SHOAL_ENDPOINT_MAX + 64];
    const char *bind_ep = s->endpoint;
    if (resolve_bind_host(s->endpoint, resolved, sizeof resolved)) {
        /* what the name gave is checked as a literal would be (a wildcard, a v4-mapped any) */
        if (shoal_endpoint_check_bind(resolved, false, why, sizeof why) != 0) {
            shoal_error_detail_log("shoal: cannot start a node at %s (%s): %s", s->endpoint,
                                   resolved, why);
            return NULL;
        }
        bind_ep = resolved;
    }
    bool has_cert = s->curve_cert && s->curve_cert[0];
    bool has_allow = s->curve_allow_dir && s->curve_allow_dir[0];
    if (has_cert != has_allow) {
        shoal_error_detail_log(
            "shoal %s: CURVE needs both a certificate and an allow-list directory (%s "
            "is missing)",
            s->endpoint, has_cert ? "the allow-list" : "the certificate");
        return NULL;
    }
    if (s->n_allow_from && !s->allow_from) {
        shoal_error_detail_log("shoal %s: n_allow_from without allow_from", s->endpoint);
        return NULL;
    }
    for (size_t i = 0; i < s->n_allow_from; i++) {
        shoal_cidr_t net;
        if (shoal_cidr_parse(s->allow_from[i], &net) != 0) {
            shoal_error_detail_log("shoal: cannot start a node at %s: allow-from '%s' is not a "
                                   "network (10.0.0.0/8, 192.168.1.7, fd00::/8)",
                                   s->endpoint, s->allow_from[i] ? s->allow_from[i] : "(null)");
            return NULL;
        }
    }
    void *ctx = shoal_zmq_context();
    if (!ctx) {
        *err = SHOAL_EIO;
        return NULL;
    }
    shoal_curve_t *curve = NULL, *zap_plain = NULL;
    if (has_cert) {
        int rc = shoal_curve_new(s->endpoint, s->curve_cert, s->curve_allow_dir, true, &curve);
        if (rc != 0) {
            *err = rc;
            return NULL;
        }
    } else if (s->n_allow_from) {
        int rc = shoal_curve_plain_new(s->endpoint, &zap_plain);
        if (rc != 0) {
            *err = rc;
            return NULL;
        }
    }
    if (s->n_allow_from) /* parsed above: cannot fail */
        shoal_curve_allow_from(curve ? curve : zap_plain, s->allow_from, s->n_allow_from);
    shoal_system_t *sys = shoal_calloc(1, sizeof *sys);
    sys->set = *s;
    sys->set.endpoint = bind_ep; /* common_opts reads it: "[" asks for IPv6 */
    sys->set.curve_cert = sys->set.curve_allow_dir = NULL; /* the caller's strings: not kept */
    sys->curve = curve;
    sys->zap_plain = zap_plain;
    sys->set.allow_from = NULL; /* the caller's strings: not kept */
    sys->set.n_allow_from = 0;
    sys->max_msg = (int64_t)s->max_frame_bytes + MAX_MSG_MARGIN;
    atomic_init(&sys->protocol, SHOAL_PROTOCOL_MIN);
    atomic_init(&sys->protocol_pin, 0);
    sys->router = zmq_socket(ctx, ZMQ_ROUTER);
    if (!sys->router ||
        ((curve || zap_plain) && shoal_curve_server(curve ? curve : zap_plain, sys->router) != 0)) {
        shoal_error_detail_log("shoal: cannot make the node's ROUTER at %s: %s", s->endpoint,
                               zmq_strerror(errno));
        *err = SHOAL_EIO;
        goto fail;
    }
    common_opts(sys, sys->router);
    /* ZMQ_MAXMSGSIZE again (common_opts set it) and libzmq's default receive HWM, now written
       down: the node drains its ROUTER every loop turn (ddata.h, LISTENERS) */
    sys->guard = shoal_listener_new(sys, sys->router, "node", sys->max_msg, 1000, err);
    if (!sys->guard)
        goto fail;
    set_int(sys->router, ZMQ_ROUTER_MANDATORY, 1); /* a reply to a gone client fails visibly */
    /* the ROUTER sends control frames and replies: room for the parts of the largest reply a
       client may ask for (4,097 with a 256 KiB frame limit), and ZeroMQ's 1,000 besides, so only
       a client that stops reading sees its reply cut short */
    size_t piece = s->max_frame_bytes - SHOAL_REPLY_PART_HEADER_MAX;
    set_int(sys->router, ZMQ_SNDHWM, (int)(SHOAL_REPLY_MAX_LIMIT / piece) + 1001);
    if (zmq_bind(sys->router, bind_ep) != 0) {
        shoal_error_detail_log("shoal: cannot bind %s: %s", bind_ep, zmq_strerror(errno));
        *err = SHOAL_EIO;
        goto fail;
    }
    char bound[SHOAL_ENDPOINT_MAX + 64];
    size_t blen = sizeof bound;
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port = 0;
    if (zmq_getsockopt(sys->router, ZMQ_LAST_ENDPOINT, bound, &blen) != 0 ||
        shoal_endpoint_split(bound, host, sizeof host, &port) != 0 ||
        !(sys->self = shoal_node_make(host, port, s->uid ? s->uid : random_uid()))) {
        shoal_error_detail_log("shoal: bound %s but cannot name the node after it", s->endpoint);
        goto fail;
    }
    int brc = shoal_listener_bound(sys->guard);
    if (brc != 0) {
        shoal_error_detail_log(brc == SHOAL_EINVAL
                                   ? "shoal: cannot start a node at %s: it bound %s, a wildcard"
                                   : "shoal: bound %s but cannot tell its port (%s)",
                               s->endpoint, bound);
        *err = brc == SHOAL_EINVAL ? SHOAL_EINVAL : SHOAL_EIO;
        goto fail;
    }
    if (!curve && !zap_plain && !s->insecure && !bound_is_loopback(bound)) {
        shoal_error_detail_log(
            "shoal: refusing to start a node at %s (bound %s): a plain transport on a "
            "non-loopback address takes cluster commands (down, leave, move) from any host. "
            "Use CURVE (curve_cert and curve_allow_dir; shoal-keygen), or name the networks "
            "that may connect (--allow-from CIDR, shoal/remote/artery/allow-from), or accept "
            "an open node (--insecure)",
            s->endpoint, bound);
        *err = SHOAL_EINVAL;
        goto fail;
    }
    sys->endpoint = strdup(bound);
    sys->set.endpoint = sys->endpoint; /* the caller's string need not outlive the call */
    sys->epfd = -1; /* the node thread makes it (THE LOOP) */
    sys->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sys->wake_fd < 0) {
        *err = SHOAL_EIO;
        goto fail;
    }
    shoal_curve_rename(curve, shoal_node_id(sys->self));
    shoal_curve_rename(zap_plain, shoal_node_id(sys->self));
    pthread_mutex_init(&sys->lock, NULL);
    pthread_mutex_init(&sys->faults_lock, NULL);
    pthread_cond_init(&sys->cond, NULL);
    sys->rng = shoal_node_uid(sys->self) ^ (uint64_t)shoal_now_ms() ^ 0x9E3779B97F4A7C15ULL;
    if (!sys->rng)
        sys->rng = 1;
    sys->next_timer_id = 1;
    sys->next_sweep_ms = shoal_now_ms() + HOUSEKEEPING_MS;
    /* the ROUTER was made here; the actor thread takes it over (thread creation is the barrier
       ZeroMQ asks for when a socket changes threads) */
    sys->actor = zactor_new(actor_fn, sys);
    if (!sys->actor) {
        close(sys->wake_fd);
        pthread_mutex_destroy(&sys->lock);
        pthread_mutex_destroy(&sys->faults_lock);
        pthread_cond_destroy(&sys->cond);
        *err = SHOAL_EIO;
        goto fail;
    }
    if (curve)
        shoal_info("%s: node started at %s (CURVE, key %s, allow-list %s)",
                  shoal_node_id(sys->self), sys->endpoint, shoal_curve_public_txt(curve),
                  s->curve_allow_dir);
    else
        shoal_warning("%s: node started at %s with a PLAIN transport: traffic is neither "
                     "encrypted nor authenticated (development only; see curve_cert)",
                     shoal_node_id(sys->self), sys->endpoint);
    *err = 0;
    return sys;
fail:
    shoal_listener_destroy(&sys->guard);
    if (sys->router)
        zmq_close(sys->router);
    shoal_curve_destroy(&sys->curve);
    shoal_curve_destroy(&sys->zap_plain);
    free(sys->endpoint);
    free(sys);
    return NULL;
}

void shoal_system_destroy(shoal_system_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_system_t *sys = *self_p;
    if (shoal_system_on_thread(sys)) {
        shoal_error("%s: shoal_system_destroy called from the node's own thread: refused",
                   shoal_node_id(sys->self));
        return;
    }
    pthread_mutex_lock(&sys->lock);
    sys->stopping = true;
    pthread_mutex_unlock(&sys->lock);
    zactor_destroy(&sys->actor); /* $TERM; the loop closes its sockets and fails pending calls */
    fail_calls(sys);
    pthread_mutex_lock(&sys->lock);
    while (sys->waiters > 0) /* callers woken with SHOAL_ESTOPPED still hold &sys->cond */
        pthread_cond_wait(&sys->cond, &sys->lock);
    pthread_mutex_unlock(&sys->lock);
    close(sys->wake_fd);
    for (size_t i = 0; i < sys->inconns.cap; i++) {
        shoal_hslot_t *s = &sys->inconns.slots[i];
        if (SHOAL_HSLOT_LIVE(s))
            free(s->value);
    }
    shoal_hmap_free(&sys->inconns);
    shoal_hmap_free(&sys->peer_by_node);
    shoal_hmap_free(&sys->quarantine);
    for (int i = 0; i < 256; i++)
        free(sys->handlers[i]);
    for (size_t i = 0; i < sys->ntimers; i++)
        free(sys->timers[i]);
    for (size_t i = 0; i < sys->nfaults; i++)
        free(sys->faults[i].endpoint);
    free(sys->faults);
    free(sys->timers);
    free(sys->listeners);
    free(sys->peers);
    free(sys->graveyard);
    free(sys->dirty);
    free(sys->turn_peers);
    shoal_buf_free(&sys->scratch);
    pthread_mutex_destroy(&sys->lock);
    pthread_mutex_destroy(&sys->faults_lock);
    pthread_cond_destroy(&sys->cond);
    shoal_info("%s: node stopped", shoal_node_id(sys->self));
    shoal_curve_destroy(&sys->curve);
    shoal_curve_destroy(&sys->zap_plain);
    free(sys->endpoint);
    free(sys);
    *self_p = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Node-thread API
 */
#define ON_THREAD_OR(sys, way_in)                                                                  \
    do {                                                                                           \
        if (!(sys))                                                                                \
            return SHOAL_EINVAL;                                                                   \
        if (!shoal_system_on_thread(sys))                                                          \
            return shoal_wrong_thread(__func__, way_in);                                           \
    } while (0)
#define ON_THREAD(sys)                                                                             \
    do {                                                                                           \
        if (!(sys))                                                                                \
            return SHOAL_EINVAL;                                                                   \
        if (!shoal_system_on_thread(sys))                                                          \
            return shoal_wrong_thread(__func__, "shoal_system_call or shoal_system_post");         \
    } while (0)

static handler_t *handler_slot(shoal_system_t *sys, uint16_t kind)
{
    handler_t **page = &sys->handlers[kind >> 8];
    if (!*page)
        *page = shoal_calloc(256, sizeof **page);
    return &(*page)[kind & 0xff];
}

int shoal_system_register(shoal_system_t *sys, uint16_t kind, shoal_recv_fn *fn, void *arg)
{
    ON_THREAD(sys);
    if (kind < 16 || kind >= SHOAL_KIND_CLIENT)
        return SHOAL_EINVAL;
    handler_t *h = handler_slot(sys, kind);
    h->recv = fn;
    h->arg = fn ? arg : NULL;
    return 0;
}

int shoal_system_register_request(shoal_system_t *sys, uint16_t kind, shoal_request_fn *fn,
                                  void *arg)
{
    ON_THREAD(sys);
    if (kind < SHOAL_KIND_CLIENT)
        return SHOAL_EINVAL;
    handler_t *h = handler_slot(sys, kind);
    h->request = fn;
    h->arg = fn ? arg : NULL;
    return 0;
}

int shoal_system_on_peer(shoal_system_t *sys, shoal_peer_fn *fn, void *arg)
{
    ON_THREAD(sys);
    if (!fn)
        return SHOAL_EINVAL;
    for (size_t i = 0; i < sys->nlisteners; i++)
        if (sys->listeners[i].fn == fn && sys->listeners[i].arg == arg)
            return 0;
    SHOAL_GROW(sys->listeners, sys->listeners_cap, sys->nlisteners + 1);
    sys->listeners[sys->nlisteners++] = (listener_t){fn, arg};
    return 0;
}

int shoal_system_off_peer(shoal_system_t *sys, shoal_peer_fn *fn, void *arg)
{
    ON_THREAD(sys);
    for (size_t i = 0; i < sys->nlisteners; i++)
        if (sys->listeners[i].fn == fn && sys->listeners[i].arg == arg) {
            memmove(&sys->listeners[i], &sys->listeners[i + 1],
                    (sys->nlisteners - i - 1) * sizeof *sys->listeners);
            sys->nlisteners--;
            return 0;
        }
    return SHOAL_ENOTFOUND;
}

static peer_t *peer_by_endpoint(const shoal_system_t *sys, const char *endpoint)
{
    for (size_t i = 0; i < sys->npeers; i++)
        if (strcmp(sys->peers[i]->endpoint, endpoint) == 0)
            return sys->peers[i];
    return NULL;
}

int shoal_system_connect(shoal_system_t *sys, const char *endpoint)
{
    ON_THREAD_OR(sys, "shoal_system_connect_sync");
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port;
    if (!endpoint || strlen(endpoint) > SHOAL_ENDPOINT_MAX ||
        shoal_endpoint_split(endpoint, host, sizeof host, &port) != 0)
        return SHOAL_EINVAL;
    if (peer_by_endpoint(sys, endpoint))
        return 0;
    void *dealer = zmq_socket(shoal_zmq_context(), ZMQ_DEALER);
    if (!dealer)
        return SHOAL_EIO;
    common_opts(sys, dealer);
    set_int(dealer, ZMQ_IMMEDIATE, 1);
    set_int(dealer, ZMQ_SNDTIMEO, 0);
    set_int(dealer, ZMQ_SNDHWM, sys->set.peer_send_hwm);
    if (strchr(endpoint, '['))
        set_int(dealer, ZMQ_IPV6, 1);
    if (sys->curve) {
        int rc = shoal_curve_client(sys->curve, dealer, endpoint);
        if (rc != 0) {
            zmq_close(dealer);
            return rc;
        }
    }
    /* the monitor is connected before the DEALER so that no connection event is missed */
    char mon[64];
    monitor_name(mon, sizeof mon);
    void *monitor = NULL;
    if (zmq_socket_monitor(dealer, mon,
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                               HANDSHAKE_FAILED_EVENTS) != 0 ||
        !(monitor = zmq_socket(shoal_zmq_context(), ZMQ_PAIR)) || zmq_connect(monitor, mon) != 0 ||
        zmq_connect(dealer, endpoint) != 0) {
        shoal_warning("%s: cannot connect to %s: %s", shoal_node_id(sys->self), endpoint,
                     zmq_strerror(errno));
        zmq_socket_monitor(dealer, NULL, 0);
        if (monitor)
            zmq_close(monitor);
        zmq_close(dealer);
        return SHOAL_EIO;
    }
    set_int(monitor, ZMQ_LINGER, 0);
    peer_t *p = shoal_calloc(1, sizeof *p);
    p->endpoint = strdup(endpoint);
    memcpy(p->host, host, strlen(host) + 1);
    p->port = port;
    p->dealer = dealer;
    p->monitor = monitor;
    peer_watch(sys, p);
    p->next_seq = 1;
    p->hello_backoff_ms = 1;
    p->next_hello_ms = shoal_now_ms();
    peer_faults(sys, p);
    SHOAL_GROW(sys->peers, sys->peers_cap, sys->npeers + 1);
    sys->peers[sys->npeers++] = p;
    send_hello(sys, p, shoal_now_ms());
    return 0;
}

int shoal_system_disconnect(shoal_system_t *sys, const char *endpoint)
{
    ON_THREAD_OR(sys, "shoal_system_disconnect_sync");
    if (!endpoint)
        return SHOAL_EINVAL;
    size_t i;
    for (i = 0; i < sys->npeers; i++)
        if (strcmp(sys->peers[i]->endpoint, endpoint) == 0)
            break;
    if (i == sys->npeers)
        return SHOAL_ENOTFOUND;
    peer_t *p = sys->peers[i];
    memmove(&sys->peers[i], &sys->peers[i + 1], (sys->npeers - i - 1) * sizeof *sys->peers);
    sys->npeers--;
    p->dead = true;
    p->up = false;
    uint64_t lost = p->node && !p->quarantined ? reset_link(p) : 0;
    if (p->node && shoal_hmap_get(&sys->peer_by_node, &p->node, sizeof p->node) == p)
        shoal_hmap_remove(&sys->peer_by_node, &p->node, sizeof p->node);
    peer_close(sys, p);
    SHOAL_GROW(sys->graveyard, sys->grave_cap, sys->ngrave + 1);
    sys->graveyard[sys->ngrave++] = p; /* may still be referenced in this loop turn */
    if (lost) {
        sys->stats.lost_unacked += lost;
        emit(sys, SHOAL_PEER_LOST, p->node, NULL, lost);
    }
    return 0;
}

int shoal_system_quarantine(shoal_system_t *sys, const shoal_node_t *node)
{
    ON_THREAD(sys);
    if (!node)
        return SHOAL_EINVAL;
    if (node == sys->self)
        return SHOAL_EINVAL;
    bool inserted;
    shoal_hslot_t *s = shoal_hmap_upsert(&sys->quarantine, &node, sizeof node, &inserted);
    s->value = (void *)1;
    if (!inserted)
        return 0;
    shoal_info("%s: %s quarantined", shoal_node_id(sys->self), shoal_node_id(node));
    for (size_t i = 0; i < sys->inconns.cap; i++) {
        shoal_hslot_t *is = &sys->inconns.slots[i];
        if (SHOAL_HSLOT_LIVE(is) && ((inconn_t *)is->value)->node == node)
            ((inconn_t *)is->value)->quarantined = true;
    }
    for (size_t i = 0; i < sys->npeers; i++) {
        peer_t *p = sys->peers[i];
        if (p->node != node || p->quarantined)
            continue;
        uint64_t lost = reset_link(p);
        p->quarantined = true;
        p->up = false; /* keep asking: a new incarnation at the address will be accepted */
        p->next_hello_ms = shoal_now_ms() + sys->set.handshake_retry_ms;
        if (lost) {
            sys->stats.lost_unacked += lost;
            emit(sys, SHOAL_PEER_LOST, node, NULL, lost);
        }
    }
    return 0;
}

int shoal_system_send(shoal_system_t *sys, const shoal_node_t *to, uint16_t kind, const void *data,
                      size_t len)
{
    ON_THREAD(sys);
    if (!to || (!data && len) || kind < 16 || kind >= SHOAL_KIND_CLIENT)
        return SHOAL_EINVAL;
    peer_t *p = shoal_hmap_get(&sys->peer_by_node, &to, sizeof to);
    if (!p || p->quarantined) {
        /* another incarnation of a peer we know, or no peer at all */
        bool other_incarnation = false;
        for (size_t i = 0; i < sys->npeers && !p; i++) {
            const shoal_node_t *n = sys->peers[i]->node;
            if (n && shoal_node_port(n) == shoal_node_port(to) &&
                strcmp(shoal_node_host(n), shoal_node_host(to)) == 0)
                other_incarnation = true;
        }
        if (other_incarnation)
            sys->stats.dropped_wrong_incarnation++;
        else
            sys->stats.send_notconn++;
        return SHOAL_ENOTCONN;
    }
    size_t rs = shoal_record_size(kind, len);
    size_t limit = frame_limit(sys, p);
    if (len > limit || SHOAL_FRAME_HEADER_MAX + rs > limit)
        return SHOAL_ETOOBIG;
    if (p->batch.count && SHOAL_FRAME_HEADER_MAX + shoal_batch_records(&p->batch) + rs > limit) {
        /* the batch is a full frame: send it now, or park it if the blocked slot is free */
        if (flush_blocked(sys, p) != 0) {
            sys->stats.send_eagain++;
            return SHOAL_EAGAIN;
        }
        flush_batch(sys, p);
    }
    shoal_batch_append(&p->batch, p->next_seq++, kind, data, len);
    sys->stats.messages_out++;
    sys->class_msgs[1][kind >> 8]++;
    sys->class_bytes[1][kind >> 8] += len;
    mark_dirty(sys, p);
    return 0;
}

/* The reply in REPLY_PART frames under the frame limit, in order. The ROUTER's send high-water
   mark holds the parts of the largest reply a client may ask for, so only a client that stops
   reading fills it; then the rest is not sent (the client sees its reply stop short). */
static int send_reply_parts(shoal_system_t *sys, const inconn_t *c, const shoal_reply_to_t *to,
                            uint16_t kind, const uint8_t *data, size_t len)
{
    size_t piece = sys->set.max_frame_bytes - SHOAL_REPLY_PART_HEADER_MAX;
    for (size_t off = 0; off < len; off += piece) {
        size_t n = len - off < piece ? len - off : piece;
        shoal_buf_reset(&sys->scratch);
        shoal_reply_part_write(&sys->scratch, c->version, to->request_id, kind, len, off,
                               data + off, n);
        int rc = router_send(sys, to->routing_id, to->routing_id_len, sys->scratch.data,
                             sys->scratch.len);
        if (rc != 0)
            return rc;
        sys->stats.reply_parts++;
    }
    return 0;
}

int shoal_system_reply(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                       const void *data, size_t len)
{
    ON_THREAD(sys);
    if (!to || (!data && len) || to->routing_id_len == 0 ||
        to->routing_id_len > sizeof to->routing_id)
        return SHOAL_EINVAL;
    inconn_t *c = shoal_hmap_get(&sys->inconns, to->routing_id, to->routing_id_len);
    if (!c || !c->client) {
        reply_dropped(sys, &sys->stats.replies_dropped_gone, SHOAL_ENOTCONN, to->request_id, kind,
                      len, "the client is gone (its connection was forgotten)");
        return SHOAL_ENOTCONN;
    }
    int rc;
    if (len <= sys->set.max_frame_bytes &&
        SHOAL_REQUEST_HEADER_MAX + len <= sys->set.max_frame_bytes) {
        shoal_buf_reset(&sys->scratch);
        shoal_reply_write(&sys->scratch, c->version, to->request_id, kind, 0, data, len);
        rc = router_send(sys, to->routing_id, to->routing_id_len, sys->scratch.data,
                         sys->scratch.len);
    } else if (len > c->max_reply) {
        /* the client could not take it whole: it is told so at once instead of waiting */
        char why[160];
        if (c->max_reply)
            snprintf(why, sizeof why,
                     "over the client's reassembly limit of %" PRIu64
                     " bytes (answered SHOAL_ETOOBIG)",
                     c->max_reply);
        else
            snprintf(why, sizeof why,
                     "over the %zu-byte frame limit, to a client that does not reassemble parts "
                     "(answered SHOAL_ETOOBIG)",
                     sys->set.max_frame_bytes);
        reply_dropped(sys, &sys->stats.replies_too_big, 0, to->request_id, kind, len, why);
        shoal_buf_reset(&sys->scratch);
        shoal_reply_write(&sys->scratch, c->version, to->request_id, kind, SHOAL_ETOOBIG, NULL, 0);
        router_send(sys, to->routing_id, to->routing_id_len, sys->scratch.data, sys->scratch.len);
        return SHOAL_ETOOBIG;
    } else {
        rc = send_reply_parts(sys, c, to, kind, data, len);
        if (rc == 0)
            sys->stats.replies_in_parts++;
    }
    if (rc == SHOAL_EAGAIN) {
        reply_dropped(sys, &sys->stats.replies_dropped_full, rc, to->request_id, kind, len,
                      "the client's queue is full (it does not read)");
    } else if (rc == SHOAL_ENOTCONN) {
        reply_dropped(sys, &sys->stats.replies_dropped_gone, rc, to->request_id, kind, len,
                      "the client is gone (disconnected)");
    } else {
        sys->stats.messages_out++;
        sys->class_msgs[1][kind >> 8]++;
        sys->class_bytes[1][kind >> 8] += len;
    }
    return rc;
}

int shoal_system_timer(shoal_system_t *sys, uint32_t interval_ms, bool repeat, shoal_timer_fn *fn,
                       void *arg)
{
    ON_THREAD(sys);
    if (!fn || (repeat && interval_ms == 0))
        return SHOAL_EINVAL;
    stimer_t *t = shoal_calloc(1, sizeof *t);
    t->id = sys->next_timer_id;
    sys->next_timer_id = sys->next_timer_id == INT32_MAX ? 1 : sys->next_timer_id + 1;
    t->due = shoal_now_ms() + interval_ms;
    t->interval = interval_ms;
    t->repeat = repeat;
    t->fn = fn;
    t->arg = arg;
    SHOAL_GROW(sys->timers, sys->timers_cap, sys->ntimers + 1);
    sys->timers[sys->ntimers++] = t;
    return t->id;
}

int shoal_system_timer_cancel(shoal_system_t *sys, int timer_id)
{
    ON_THREAD(sys);
    for (size_t i = 0; i < sys->ntimers; i++) {
        if (sys->timers[i]->id == timer_id && !sys->timers[i]->cancelled) {
            sys->timers[i]->cancelled = true; /* freed by run_timers: safe inside its callback */
            return 0;
        }
    }
    return SHOAL_ENOTFOUND;
}

/* ---------------------------------------------------------------------------------------------
 * Thread-safe entry points that run on the node thread
 */
typedef struct {
    const char *endpoint;
    const shoal_fault_t *f;
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port;
} fault_cmd_t;

static int do_fault(shoal_system_t *sys, void *arg)
{
    fault_cmd_t *cmd = arg;
    fault_rule_t *r = NULL;
    pthread_mutex_lock(&sys->faults_lock);
    for (size_t i = 0; i < sys->nfaults && !r; i++) {
        fault_rule_t *x = &sys->faults[i];
        if ((!x->endpoint && !cmd->endpoint) ||
            (x->endpoint && cmd->endpoint && x->port == cmd->port &&
             strcmp(x->host, cmd->host) == 0))
            r = x;
    }
    if (!r) {
        SHOAL_GROW(sys->faults, sys->faults_cap, sys->nfaults + 1);
        r = &sys->faults[sys->nfaults++];
        memset(r, 0, sizeof *r);
        if (cmd->endpoint) {
            r->endpoint = strdup(cmd->endpoint);
            memcpy(r->host, cmd->host, sizeof r->host);
            r->port = cmd->port;
        }
    }
    r->f = *cmd->f;
    pthread_mutex_unlock(&sys->faults_lock);
    refresh_faults(sys);
    shoal_info("%s: fault on %s: dir=%d cut=%d drop=%.2f duplicate=%.2f delay=%ums",
              shoal_node_id(sys->self), cmd->endpoint ? cmd->endpoint : "every peer", cmd->f->dir,
              cmd->f->cut, cmd->f->drop, cmd->f->duplicate, cmd->f->delay_ms);
    return 0;
}

/* The _sync twins of connect and disconnect, for other threads (SHOAL_EDEADLK on the node's). */
static int twin_connect(shoal_system_t *sys, void *arg)
{
    return shoal_system_connect(sys, arg);
}

int shoal_system_connect_sync(shoal_system_t *sys, const char *endpoint)
{
    if (!sys || !endpoint)
        return SHOAL_EINVAL;
    return shoal_system_call(sys, twin_connect, (void *)endpoint);
}

static int twin_disconnect(shoal_system_t *sys, void *arg)
{
    return shoal_system_disconnect(sys, arg);
}

int shoal_system_disconnect_sync(shoal_system_t *sys, const char *endpoint)
{
    if (!sys || !endpoint)
        return SHOAL_EINVAL;
    return shoal_system_call(sys, twin_disconnect, (void *)endpoint);
}

static int run_here_or_call(shoal_system_t *sys, shoal_call_fn *fn, void *arg)
{
    return shoal_system_on_thread(sys) ? fn(sys, arg) : shoal_system_call(sys, fn, arg);
}

int shoal_system_fault(shoal_system_t *sys, const char *peer_endpoint, const shoal_fault_t *f)
{
    if (!sys || !f || f->dir < SHOAL_FAULT_IN || f->dir > SHOAL_FAULT_BOTH || !(f->drop >= 0) ||
        !(f->drop <= 1) || !(f->duplicate >= 0) || !(f->duplicate <= 1))
        return SHOAL_EINVAL;
    fault_cmd_t cmd = {peer_endpoint, f, {0}, 0};
    if (peer_endpoint &&
        shoal_endpoint_split(peer_endpoint, cmd.host, sizeof cmd.host, &cmd.port) != 0)
        return SHOAL_EINVAL;
    return run_here_or_call(sys, do_fault, &cmd);
}

static int do_heal(shoal_system_t *sys, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&sys->faults_lock);
    for (size_t i = 0; i < sys->nfaults; i++)
        free(sys->faults[i].endpoint);
    sys->nfaults = 0;
    pthread_mutex_unlock(&sys->faults_lock);
    refresh_faults(sys);
    sys->ack_pending = true; /* acks held back by a cut go out now */
    shoal_info("%s: faults healed", shoal_node_id(sys->self));
    return 0;
}

int shoal_system_heal(shoal_system_t *sys)
{
    if (!sys)
        return SHOAL_EINVAL;
    return run_here_or_call(sys, do_heal, NULL);
}

int shoal_system_fault_get(shoal_system_t *sys, const char *peer_endpoint, shoal_fault_dir_t dir,
                           shoal_fault_t *out)
{
    char host[256];
    uint16_t port = 0;
    if (!sys || !out || dir < SHOAL_FAULT_IN || dir > SHOAL_FAULT_OUT ||
        (peer_endpoint && shoal_endpoint_split(peer_endpoint, host, sizeof host, &port) != 0))
        return SHOAL_EINVAL;
    pthread_mutex_lock(&sys->faults_lock);
    fault_eff_t e = fault_resolve(sys, peer_endpoint ? host : NULL, port, (int)dir);
    pthread_mutex_unlock(&sys->faults_lock);
    memset(out, 0, sizeof *out);
    out->dir = dir;
    out->cut = e.cut;
    out->drop = e.drop;
    out->duplicate = e.duplicate;
    out->delay_ms = e.delay_ms;
    return 0;
}

static int do_stats(shoal_system_t *sys, void *arg)
{
    shoal_system_stats_t *out = arg;
    *out = sys->stats;
    if (sys->curve || sys->zap_plain)
        shoal_curve_counts(sys->curve ? sys->curve : sys->zap_plain, &out->auth_admitted,
                           &out->auth_refused, &out->allow_keys);
    out->peers = 0;
    for (size_t i = 0; i < sys->npeers; i++)
        if (sys->peers[i]->up)
            out->peers++;
    return 0;
}

int shoal_system_class_stats(shoal_system_t *sys, uint64_t msgs[2][256], uint64_t bytes[2][256])
{
    ON_THREAD(sys);
    memcpy(msgs, sys->class_msgs, sizeof sys->class_msgs);
    memcpy(bytes, sys->class_bytes, sizeof sys->class_bytes);
    return 0;
}

int shoal_system_set_protocol(shoal_system_t *sys, uint32_t version)
{
    if (!sys || version < SHOAL_PROTOCOL_MIN || version > SHOAL_PROTOCOL_MAX)
        return SHOAL_EINVAL;
    atomic_store_explicit(&sys->protocol, version, memory_order_relaxed);
    return 0;
}

void shoal_system_pin_protocol(shoal_system_t *sys, uint32_t version)
{
    if (sys)
        atomic_store_explicit(&sys->protocol_pin, version, memory_order_relaxed);
}

uint32_t shoal_system_protocol_pin(const shoal_system_t *sys)
{
    uint32_t pin = sys ? atomic_load_explicit(&sys->protocol_pin, memory_order_relaxed) : 0;
    return pin && pin < SHOAL_PROTOCOL_MAX ? (pin < SHOAL_PROTOCOL_MIN ? SHOAL_PROTOCOL_MIN : pin)
                                           : SHOAL_PROTOCOL_MAX;
}

uint32_t shoal_system_protocol(const shoal_system_t *sys)
{
    return sys ? atomic_load_explicit(&sys->protocol, memory_order_relaxed) : SHOAL_PROTOCOL_MIN;
}

uint32_t shoal_system_peer_protocol(shoal_system_t *sys, const shoal_node_t *node)
{
    if (!sys || !node)
        return 0;
    peer_t *p = shoal_hmap_get(&sys->peer_by_node, &node, sizeof node);
    return p && p->up && !p->quarantined ? p->peer_protocol : 0;
}

int shoal_system_stats(shoal_system_t *sys, shoal_system_stats_t *out)
{
    if (!sys || !out)
        return SHOAL_EINVAL;
    return run_here_or_call(sys, do_stats, out);
}

/* ---------------------------------------------------------------------------------------------
 * CURVE (curve.c does the work)
 */
int shoal_system_secure_socket(shoal_system_t *sys, void *zmq_sock, bool server,
                               const char *peer_node_endpoint)
{
    if (!sys || !zmq_sock || (!server && !peer_node_endpoint))
        return SHOAL_EINVAL;
    if (!sys->curve)
        return server && sys->zap_plain ? shoal_curve_server(sys->zap_plain, zmq_sock) : 0;
    return server ? shoal_curve_server(sys->curve, zmq_sock)
                  : shoal_curve_client(sys->curve, zmq_sock, peer_node_endpoint);
}

bool shoal_system_secure(const shoal_system_t *sys)
{
    return sys && sys->curve;
}

const char *shoal_system_public_key(const shoal_system_t *sys)
{
    return sys && sys->curve ? shoal_curve_public_txt(sys->curve) : NULL;
}

int shoal_system_learn_key(shoal_system_t *sys, const char *endpoint, const char *public_z85)
{
    uint8_t key[32];
    if (!sys || !endpoint || !public_z85 || strlen(public_z85) != 40 ||
        !zmq_z85_decode(key, public_z85))
        return SHOAL_EINVAL;
    if (!sys->curve)
        return 0;
    return shoal_curve_learn(sys->curve, endpoint, key);
}

int shoal_system_allow_reload(shoal_system_t *sys)
{
    if (!sys)
        return SHOAL_EINVAL;
    if (!sys->curve)
        return 0;
    return shoal_curve_reload(sys->curve);
}
