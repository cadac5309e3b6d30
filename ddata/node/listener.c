/*  listener.c — the guard on every socket a node binds (see LISTENERS in ddata.h).

    WHAT LIBZMQ BOUNDS AND WHAT IT DOES NOT
    - ZMQ_MAXMSGSIZE bounds one frame: the decoder refuses a frame whose header announces more,
      before it allocates, and resets the connection. Without it, a greeting and a header
      announcing 2^31 bytes made libzmq allocate the whole message and fill it as bytes came.
    - ZMQ_RCVHWM bounds the complete messages queued per connection, not the parts of a message
      still incomplete (libzmq 4.3 keeps them until the last part): stated in ddata.h, not fixable
      from outside libzmq.
    - There is no per-socket connection cap (ZMQ_MAX_SOCKETS counts sockets of a context, not
      connections). The guard builds one from the socket monitor: ZMQ_EVENT_ACCEPTED and
      ZMQ_EVENT_DISCONNECTED carry the connection's file descriptor, so the guard keeps the set
      of descriptors open on this listener and shuts down (shutdown(2), which libzmq sees as the
      peer leaving) one accepted while the set is full.

    WHY A SET OF DESCRIPTORS, CHECKED BEFORE USE
    Monitor events arrive late, and the monitor drops events when its queue is full (a flood of
    connections), so a descriptor in the set may have been closed, and its number reused, by
    the time the guard acts. Two checks keep the guard from touching another socket: before
    shutting a descriptor down it must still be a connected socket whose local port (or ipc
    path) is this listener's, which no outbound connection of the process has; and when the set
    is full it is first pruned (at most once a second) of descriptors that no longer pass that
    check, so missed DISCONNECTED events cannot fill it with ghosts.

    WHAT THE MONITOR TELLS ABOUT FAILURES (libzmq 4.3)
    - HANDSHAKE_FAILED_PROTOCOL with ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: the other side
      asked for another security mechanism (a CURVE client on a plain node, or the reverse);
      other protocol errors: malformed ZMTP.
    - HANDSHAKE_FAILED_AUTH: ZAP (the allow-list) refused the key.
    - HANDSHAKE_FAILED_NO_DETAIL: the connection closed, or the handshake interval ran out,
      before the handshake was complete — most often something that connected and sent nothing.
      libzmq sends it right before the connection's DISCONNECTED, so the guard holds it until
      then and does not count it when the guard itself closed that connection.
    - A connection reset for an oversized frame gives only DISCONNECTED (libzmq reports protocol
      errors of its decoder no further), the same as a peer leaving: counted in `closed` only.
*/
#include "transport.h"

#include <czmq.h>
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define EVENTS_PER_DRAIN 1024 /* monitor events handled per call: the owner's loop goes on */
/* Events the monitor may queue before libzmq drops more (a flood of connections): 2 frames
   each, about 200 bytes */
#define MONITOR_HWM     20000
#define PRUNE_MS        1000 /* the descriptor set is re-checked at most this often */
#define LOG_INTERVAL_MS 1000 /* at most one line per cause per second */

enum { R_REFUSED, R_MISMATCH, R_AUTH, R_PROTOCOL, R_INCOMPLETE, R_EVICTED, R_COUNT };

/* Connections not yet seen to send a message (issue 36): their own cap, and a short ZMTP
   handshake interval (libzmq's default is 30 s) */
#define HANDSHAKE_IVL_MS 5000
#define MIN_PENDING      64

#define EVENTS                                                                                     \
    (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |          \
     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

struct shoal_listener {
    void *sock;    /* the guarded socket (the caller's) */
    void *monitor; /* PAIR receiving its events */
    const shoal_system_t *sys;
    char what[32];
    char who[320]; /* "<node id>: <what>", for logs (named when bound: the id has the port) */
    bool curve;    /* the node speaks CURVE (what a mechanism mismatch means) */
    uint32_t max_conns;
    char endpoint[300]; /* as bound */
    int family;         /* AF_INET, AF_INET6 or AF_UNIX; 0 before bound */
    uint16_t port;
    bool have_addr; /* the bound address was read: compared as well as the port */
    struct in_addr addr4;
    struct in6_addr addr6;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    /* descriptors open on this listener, and those the guard shut down itself (bitsets) */
    uint64_t *open_fds, *refused_fds;
    /* connections a message came from (shoal_listener_seen): past the ZMTP handshake, so with
       CURVE or allow-from authenticated; the others are pending */
    uint64_t *seen_fds;
    size_t words;
    uint32_t max_pending;
    uint64_t pending, established; /* open connections not seen / seen (not refused) */
    int *fifo;                     /* pending descriptors in accept order (a ring, may be stale) */
    size_t fifo_cap, fifo_head, fifo_len;
    int64_t last_prune_ms;
    bool held; /* a HANDSHAKE_FAILED_NO_DETAIL waiting for its DISCONNECTED */
    shoal_ratelimit_t log_rl[R_COUNT];
    shoal_listener_stats_t st;
};

/* ---------------------------------------------------------------------------------------------
 * Descriptor sets
 */
static bool fd_has(const uint64_t *set, size_t words, int fd)
{
    return fd >= 0 && (size_t)fd / 64 < words && (set[fd / 64] >> (fd % 64)) & 1;
}

/* fd must have room (fd_room) */
static void fd_put(uint64_t *set, int fd)
{
    set[fd / 64] |= UINT64_C(1) << (fd % 64);
}

static void fd_clear(uint64_t *set, size_t words, int fd)
{
    if (fd >= 0 && (size_t)fd / 64 < words)
        set[fd / 64] &= ~(UINT64_C(1) << (fd % 64));
}

/* Room for descriptor fd in both sets. */
static void fd_room(shoal_listener_t *l, int fd)
{
    size_t need = (size_t)fd / 64 + 1;
    if (need <= l->words)
        return;
    size_t words = l->words ? l->words : 16;
    while (words < need)
        words *= 2;
    l->open_fds = shoal_realloc(l->open_fds, words * sizeof *l->open_fds);
    l->refused_fds = shoal_realloc(l->refused_fds, words * sizeof *l->refused_fds);
    l->seen_fds = shoal_realloc(l->seen_fds, words * sizeof *l->seen_fds);
    memset(l->open_fds + l->words, 0, (words - l->words) * sizeof *l->open_fds);
    memset(l->refused_fds + l->words, 0, (words - l->words) * sizeof *l->refused_fds);
    memset(l->seen_fds + l->words, 0, (words - l->words) * sizeof *l->seen_fds);
    l->words = words;
}

/* True when fd is, right now, a connection accepted on this listener: connected, and local to
   its address and port (or ipc path). An outbound connection of the process has an ephemeral
   local port, and the listening socket itself has no peer. */
static bool fd_is_ours(const shoal_listener_t *l, int fd)
{
    if (fd < 0 || !l->family)
        return false;
    struct sockaddr_storage local, peer;
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&local, &ll) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
        return false;
    if (local.ss_family == AF_UNIX)
        return l->family == AF_UNIX &&
               strncmp(((struct sockaddr_un *)&local)->sun_path, l->path, sizeof l->path) == 0;
    if (l->family == AF_UNIX)
        return false;
    if (l->have_addr && local.ss_family != l->family)
        return false;
    if (local.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&local;
        return ntohs(a->sin_port) == l->port &&
               (!l->have_addr || a->sin_addr.s_addr == l->addr4.s_addr);
    }
    if (local.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&local;
        return ntohs(a->sin6_port) == l->port &&
               (!l->have_addr || memcmp(&a->sin6_addr, &l->addr6, sizeof l->addr6) == 0);
    }
    return false;
}

/* Drops from the open set the descriptors that are no longer connections of this listener
   (their DISCONNECTED was lost, or is still on its way). */
static void prune(shoal_listener_t *l, int64_t now)
{
    if (now - l->last_prune_ms < PRUNE_MS)
        return;
    l->last_prune_ms = now;
    uint64_t open = 0, pending = 0, established = 0;
    for (size_t w = 0; w < l->words; w++)
        for (uint64_t bits = l->open_fds[w]; bits; bits &= bits - 1) {
            int fd = (int)(w * 64 + (size_t)__builtin_ctzll(bits));
            if (fd_is_ours(l, fd)) {
                open++;
                if (fd_has(l->refused_fds, l->words, fd))
                    continue;
                if (fd_has(l->seen_fds, l->words, fd))
                    established++;
                else
                    pending++;
            } else {
                fd_clear(l->open_fds, l->words, fd);
                fd_clear(l->refused_fds, l->words, fd);
                fd_clear(l->seen_fds, l->words, fd);
            }
        }
    l->st.open = open;
    l->pending = pending;
    l->established = established;
}

/* ---------------------------------------------------------------------------------------------
 * Logging
 */
static void log_limited(shoal_listener_t *l, int reason, bool warn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* One line per cause per second: a flood of connections must not become a flood of lines. The
   next line says how many were suppressed. */
static void log_limited(shoal_listener_t *l, int reason, bool warn, const char *fmt, ...)
{
    uint64_t suppressed;
    if (!shoal_ratelimit_pass(&l->log_rl[reason], LOG_INTERVAL_MS, &suppressed))
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char sup[64] = "";
    if (suppressed)
        snprintf(sup, sizeof sup, " (%" PRIu64 " similar suppressed)", suppressed);
    if (warn)
        shoal_warning("%s at %s: %s%s", l->who, l->endpoint, msg, sup);
    else
        shoal_info("%s at %s: %s%s", l->who, l->endpoint, msg, sup);
}

/* ---------------------------------------------------------------------------------------------
 * Events
 */
static void count_incomplete(shoal_listener_t *l)
{
    l->st.handshakes_failed++;
    l->st.handshakes_incomplete++;
    log_limited(l, R_INCOMPLETE, false,
                "a connection closed or timed out before completing the ZeroMQ handshake (it "
                "sent nothing, or too little: a port scan, a health check, not a ZeroMQ peer; "
                "%" PRIu64 " so far)",
                l->st.handshakes_incomplete);
}

/* Shuts down a connection libzmq has taken already: it sees the peer leave, drops the
   connection and reports DISCONNECTED, which takes the descriptor out. False when fd is no
   longer a connection of this listener (its number perhaps reused elsewhere). */
static bool refuse(shoal_listener_t *l, int fd)
{
    if (!fd_is_ours(l, fd) || shutdown(fd, SHUT_RDWR) != 0)
        return false;
    fd_put(l->refused_fds, fd);
    l->st.refused++;
    return true;
}

static void fifo_push(shoal_listener_t *l, int fd)
{
    if (l->fifo_len == l->fifo_cap) { /* the oldest entry makes room (stale, or evicted next) */
        l->fifo_head = (l->fifo_head + 1) % l->fifo_cap;
        l->fifo_len--;
    }
    l->fifo[(l->fifo_head + l->fifo_len) % l->fifo_cap] = fd;
    l->fifo_len++;
}

/* Closes the oldest connection still pending: strangers that open connections and say nothing
   (or never get past the handshake) take one another's places, not the members'. */
static void evict_oldest_pending(shoal_listener_t *l)
{
    while (l->fifo_len) {
        int fd = l->fifo[l->fifo_head];
        l->fifo_head = (l->fifo_head + 1) % l->fifo_cap;
        l->fifo_len--;
        if (!fd_has(l->open_fds, l->words, fd) || fd_has(l->seen_fds, l->words, fd) ||
            fd_has(l->refused_fds, l->words, fd))
            continue; /* stale: gone, seen or refused since */
        if (refuse(l, fd)) {
            l->pending--;
            l->st.evicted++;
            log_limited(l, R_EVICTED, true,
                        "closed the oldest of %" PRIu64 " connections that have sent nothing "
                        "(the most it keeps: %" PRIu32 "; %" PRIu64 " closed so far)",
                        l->pending + 1, l->max_pending, l->st.evicted);
            return;
        }
        /* gone already (its DISCONNECTED is on its way) */
        fd_clear(l->open_fds, l->words, fd);
        if (l->st.open)
            l->st.open--;
        l->pending--;
    }
}

static void on_accepted(shoal_listener_t *l, int fd)
{
    l->st.accepted++;
    if (fd < 0)
        return;
    fd_room(l, fd);
    if (fd_has(l->open_fds, l->words, fd) && fd_has(l->seen_fds, l->words, fd) &&
        !fd_has(l->refused_fds, l->words, fd))
        return; /* its first message was handled before this event */
    if (!fd_has(l->open_fds, l->words, fd)) {
        fd_put(l->open_fds, fd);
        l->st.open++;
    }
    fd_clear(l->refused_fds, l->words, fd); /* a new connection on a reused number */
    fd_clear(l->seen_fds, l->words, fd);
    l->pending++;
    fifo_push(l, fd);
    if (l->pending <= l->max_pending)
        return;
    prune(l, shoal_now_ms());
    while (l->pending > l->max_pending && l->fifo_len)
        evict_oldest_pending(l);
}

void shoal_listener_seen(shoal_listener_t *l, int fd)
{
    if (!l || fd < 0)
        return;
    if (fd_has(l->seen_fds, l->words, fd) || fd_has(l->refused_fds, l->words, fd))
        return; /* the common case: one bit test per message */
    fd_room(l, fd);
    fd_put(l->seen_fds, fd);
    if (fd_has(l->open_fds, l->words, fd)) {
        if (l->pending)
            l->pending--;
    } else { /* before its ACCEPTED event */
        fd_put(l->open_fds, fd);
        l->st.open++;
    }
    l->established++;
    if (l->established <= l->max_conns)
        return;
    prune(l, shoal_now_ms());
    if (l->established <= l->max_conns || !fd_has(l->open_fds, l->words, fd))
        return;
    if (refuse(l, fd)) {
        l->established--;
        log_limited(l, R_REFUSED, true,
                    "refused a connection: %" PRIu64 " are open, the most it takes "
                    "(max_inbound_connections %" PRIu32 "; %" PRIu64 " refused so far)",
                    l->established, l->max_conns, l->st.refused);
    }
}

static void on_disconnected(shoal_listener_t *l, int fd)
{
    bool ours = fd_has(l->refused_fds, l->words, fd);
    if (l->held && !ours)
        count_incomplete(l);
    l->held = false;
    l->st.closed++;
    if (fd_has(l->open_fds, l->words, fd)) {
        fd_clear(l->open_fds, l->words, fd);
        if (l->st.open)
            l->st.open--;
        if (!ours) { /* a refused one left the counts when it was refused */
            if (fd_has(l->seen_fds, l->words, fd)) {
                if (l->established)
                    l->established--;
            } else if (l->pending) {
                l->pending--;
            }
        }
    }
    fd_clear(l->refused_fds, l->words, fd);
    fd_clear(l->seen_fds, l->words, fd);
}

static void on_event(shoal_listener_t *l, uint16_t event, uint32_t value)
{
    if (l->held && event != ZMQ_EVENT_DISCONNECTED) {
        /* its DISCONNECTED did not follow (another I/O thread's event came between): count it
           now, as libzmq reported it */
        l->held = false;
        count_incomplete(l);
    }
    switch (event) {
    case ZMQ_EVENT_ACCEPTED:
        on_accepted(l, (int)value);
        break;
    case ZMQ_EVENT_DISCONNECTED:
        on_disconnected(l, (int)value);
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        l->held = true;
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        l->st.handshakes_failed++;
        l->st.handshakes_auth++;
        log_limited(l, R_AUTH, true, "refused a connection: %s (%" PRIu64 " so far)",
                    l->curve ? "its CURVE key or its address is not allowed"
                             : "its address is not in allow-from",
                    l->st.handshakes_auth);
        break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        l->st.handshakes_failed++;
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            l->st.handshakes_mismatched++;
            log_limited(l, R_MISMATCH, true,
                        "refused a connection: it asked for another security mechanism (%s; "
                        "%" PRIu64 " so far)",
                        l->curve ? "this node requires CURVE: a plain client or node?"
                                 : "this node is plain: a CURVE client or node?",
                        l->st.handshakes_mismatched);
        } else {
            l->st.handshakes_protocol++;
            log_limited(l, R_PROTOCOL, true,
                        "refused a connection: ZeroMQ protocol error 0x%" PRIx32
                        " in its handshake (not a ZeroMQ peer, or a broken one; %" PRIu64
                        " so far)",
                        value, l->st.handshakes_protocol);
        }
        break;
    default:
        break;
    }
}

/* One event (libzmq sends the event and its address as two frames; the first holds a 16-bit
   event and a 32-bit value). False when none is waiting. */
static bool next_event(void *monitor, uint16_t *event, uint32_t *value)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return false;
    }
    *event = 0;
    *value = 0;
    if (zmq_msg_size(&m) >= 6) {
        memcpy(event, zmq_msg_data(&m), 2);
        memcpy(value, (uint8_t *)zmq_msg_data(&m) + 2, 4);
    }
    while (zmq_msg_more(&m)) {
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0)
            break;
    }
    zmq_msg_close(&m);
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Public
 */
shoal_listener_t *shoal_listener_new(shoal_system_t *sys, void *zmq_sock, const char *what,
                                     int64_t max_msg_bytes, int recv_hwm, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    *err = SHOAL_EINVAL;
    if (!zmq_sock || !what || max_msg_bytes <= 0 || recv_hwm <= 0)
        return NULL;
    static atomic_uint_fast64_t monitors; /* unique names: see monitor_name in system.c */
    char name[64];
    snprintf(name, sizeof name, "inproc://shoal-listener-%" PRIu64,
             (uint64_t)atomic_fetch_add(&monitors, 1));
    shoal_listener_t *l = shoal_calloc(1, sizeof *l);
    l->sock = zmq_sock;
    l->curve = sys && shoal_system_secure(sys);
    l->max_conns = shoal_system_max_inbound_connections(sys);
    l->max_pending = l->max_conns / 4 > MIN_PENDING ? l->max_conns / 4 : MIN_PENDING;
    l->fifo_cap = (size_t)l->max_pending * 4;
    l->fifo = shoal_calloc(l->fifo_cap, sizeof *l->fifo);
    l->sys = sys;
    snprintf(l->what, sizeof l->what, "%s", what);
    snprintf(l->who, sizeof l->who, "shoal %s", what);
    snprintf(l->endpoint, sizeof l->endpoint, "?");
    l->last_prune_ms = INT64_MIN / 2;
    int hwm = MONITOR_HWM, ivl = HANDSHAKE_IVL_MS;
    if (zmq_setsockopt(zmq_sock, ZMQ_MAXMSGSIZE, &max_msg_bytes, sizeof max_msg_bytes) != 0 ||
        zmq_setsockopt(zmq_sock, ZMQ_HANDSHAKE_IVL, &ivl, sizeof ivl) != 0 ||
        zmq_setsockopt(zmq_sock, ZMQ_RCVHWM, &recv_hwm, sizeof recv_hwm) != 0 ||
        zmq_socket_monitor(zmq_sock, name, EVENTS) != 0 ||
        !(l->monitor = zmq_socket(shoal_zmq_context(), ZMQ_PAIR)) ||
        zmq_setsockopt(l->monitor, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0 ||
        zmq_connect(l->monitor, name) != 0) {
        shoal_error("%s: cannot watch its socket: %s", l->who, zmq_strerror(errno));
        *err = SHOAL_EIO;
        shoal_listener_destroy(&l);
        return NULL;
    }
    int zero = 0;
    zmq_setsockopt(l->monitor, ZMQ_LINGER, &zero, sizeof zero);
    *err = 0;
    return l;
}

int shoal_listener_bound(shoal_listener_t *l)
{
    if (!l)
        return SHOAL_EINVAL;
    size_t len = sizeof l->endpoint;
    if (zmq_getsockopt(l->sock, ZMQ_LAST_ENDPOINT, l->endpoint, &len) != 0)
        return SHOAL_EIO;
    const shoal_node_t *self = l->sys ? shoal_system_self(l->sys) : NULL;
    if (self)
        snprintf(l->who, sizeof l->who, "%s: %s", shoal_node_id(self), l->what);
    if (strncmp(l->endpoint, "ipc://", 6) == 0) {
        l->family = AF_UNIX;
        snprintf(l->path, sizeof l->path, "%s", l->endpoint + 6);
        return 0;
    }
    const char *colon = strrchr(l->endpoint, ':');
    char *end = NULL;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    if (strncmp(l->endpoint, "tcp://", 6) != 0 || !colon || !end || *end || port == 0 ||
        port > 65535)
        return SHOAL_EINVAL;
    l->port = (uint16_t)port;
    /* the address libzmq bound ("tcp://10.0.0.1:2552", "tcp://[::1]:2552") */
    char host[64] = "";
    size_t hl = (size_t)(colon - (l->endpoint + 6));
    if (hl >= 2 && l->endpoint[6] == '[' && hl - 2 < sizeof host) {
        memcpy(host, l->endpoint + 7, hl - 2);
        host[hl - 2] = 0;
    } else if (hl < sizeof host) {
        memcpy(host, l->endpoint + 6, hl);
        host[hl] = 0;
    }
    if (inet_pton(AF_INET, host, &l->addr4) == 1) {
        l->family = AF_INET;
        l->have_addr = true;
    } else if (inet_pton(AF_INET6, host, &l->addr6) == 1) {
        l->family = AF_INET6;
        l->have_addr = true;
    } else {
        l->family = AF_INET; /* unknown: the port alone is compared */
    }
    /* the address the socket actually took, whatever spelling of the endpoint led there: a
       listener on "any" takes connections on every interface under an address peers cannot
       dial (shoal_endpoint_check_bind refuses the spellings it knows before the bind) */
    if (l->have_addr && (l->family == AF_INET ? l->addr4.s_addr == htonl(INADDR_ANY)
                                              : shoal_in6_is_any(&l->addr6))) {
        shoal_error("%s: bound %s, a wildcard address: refused (bind the address peers reach "
                    "this node at)",
                    l->who, l->endpoint);
        return SHOAL_EINVAL;
    }
    return 0;
}

void *shoal_listener_socket(shoal_listener_t *l)
{
    return l ? l->monitor : NULL;
}

void shoal_listener_drain(shoal_listener_t *l)
{
    if (!l || !l->monitor)
        return;
    uint16_t event;
    uint32_t value;
    for (int n = 0; n < EVENTS_PER_DRAIN && next_event(l->monitor, &event, &value); n++)
        on_event(l, event, value);
}

void shoal_listener_stats(const shoal_listener_t *l, shoal_listener_stats_t *out)
{
    if (!out)
        return;
    if (!l) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = l->st;
}

void shoal_listener_destroy(shoal_listener_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_listener_t *l = *self_p;
    if (l->sock)
        zmq_socket_monitor(l->sock, NULL, 0);
    if (l->monitor)
        zmq_close(l->monitor);
    free(l->open_fds);
    free(l->refused_fds);
    free(l->seen_fds);
    free(l->fifo);
    free(l);
    *self_p = NULL;
}
