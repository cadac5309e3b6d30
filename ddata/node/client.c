/*  client.c — shoal_client_t: a tool's connection to a node (a DEALER that handshakes with the
    client role and sends requests of the client class, kinds >= SHOAL_KIND_CLIENT).

    A client is not a peer: the node answers it through its ROUTER and never connects back, so a
    tool on any machine can ask a node something without joining the cluster. Requests carry an
    id so a reply that comes after its request timed out is recognized and skipped. A node that
    forgot the client (restart, idle sweep) answers WHO: the client handshakes again and sends
    the request once more.

    A reply larger than the node's frame limit comes in REPLY_PART frames (transport.h), which
    the client puts back together in the caller's buffer, up to the size it said in its Hello
    (max_reply, 64 MiB unless shoal_client_set_max_reply says otherwise). A reply over that size
    is refused by the node with SHOAL_ETOOBIG (and by the client too, should the node send it
    anyway), so the caller gets an error with a reason (shoal_client_error), never a timeout.
*/
#include "curve.h"
#include "transport.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>

#define CLIENT_DEFAULT_TIMEOUT_MS 5000
#define CLIENT_HELLO_RETRY_MS     200
#define CLIENT_MAX_FRAME          (64u << 20)
/* Connections a node may close in the ZeroMQ handshake, in a row, before a plain client takes
   it for a refusal (ZeroMQ redials every 100 ms: about 300 ms). */
#define HANDSHAKE_CUTS            3

struct shoal_client {
    void *dealer;
    void *monitor; /* the DEALER's failed handshakes (ZeroMQ would retry them silently) */
    bool curve;    /* this client authenticates with CURVE */
    int cut_in_handshake; /* plain: connections the node closed in the ZeroMQ handshake */
    char *endpoint;
    uint32_t timeout_ms;
    const shoal_node_t *node;
    uint8_t version;
    uint64_t max_frame;
    uint64_t next_request_id;
    uint64_t max_reply; /* largest reply reassembled from parts */
    uint64_t announced; /* the max_reply the node was told in the last handshake */
    char error[256];    /* why the last request failed, when there is more to say than a code */
    shoal_buf_t out;
};

/* Waits for one frame until `deadline`; 1 with a frame in *m, 0 on timeout, <0 on error. */
static int recv_until(shoal_client_t *c, zmq_msg_t *m, int64_t deadline)
{
    for (;;) {
        int64_t now = shoal_now_ms();
        if (now >= deadline)
            return 0;
        zmq_pollitem_t it = {c->dealer, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, (long)(deadline - now));
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return SHOAL_EIO;
        }
        if (rc == 0)
            continue;
        if (zmq_msg_recv(m, c->dealer, ZMQ_DONTWAIT) < 0)
            continue;
        if (zmq_msg_more(m)) {
            /* not ours: drop every part */
            while (zmq_msg_more(m) && zmq_msg_recv(m, c->dealer, ZMQ_DONTWAIT) >= 0)
                ;
            continue;
        }
        return 1;
    }
}

/* Reads the monitor's events: true when a handshake failed, with why in c->error. A refused
   ZeroMQ handshake does not change by waiting (ZeroMQ would retry it until the timeout), so it
   ends the attempt at once: the node runs CURVE and this client does not (or the other way
   round), or the node's ZAP handler did not admit this client's key. */
static bool handshake_failed(shoal_client_t *c)
{
    bool failed = false;
    zmq_msg_t ev;
    zmq_msg_init(&ev);
    while (zmq_msg_recv(&ev, c->monitor, ZMQ_DONTWAIT) >= 0) {
        uint16_t event = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&value, (const uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            snprintf(c->error, sizeof c->error,
                     "the node refused this client's CURVE key: key not on the allow-list "
                     "(ZAP status %u)",
                     (unsigned)value);
            failed = true;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                   value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            snprintf(c->error, sizeof c->error, "%s",
                     c->curve ? "the node does not run CURVE, this client does"
                              : "the node runs CURVE: not a CURVE client (set SHOAL_CURVE_CERT "
                                "and SHOAL_CURVE_ALLOW)");
            failed = true;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
            snprintf(c->error, sizeof c->error,
                     "the ZeroMQ handshake failed (protocol error 0x%x): not a Shoal node, or a "
                     "%s one",
                     (unsigned)value, c->curve ? "plain" : "CURVE");
            failed = true;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && !c->curve) {
            /* A CURVE node closes a plain client's connection as soon as it reads the client's
               mechanism, often before its own greeting (which names CURVE) has left: the client
               then sees only a connection cut in the handshake, not the mismatch. Once is a node
               going away; HANDSHAKE_CUTS times in a row, is a node that will not talk to us. */
            if (++c->cut_in_handshake >= HANDSHAKE_CUTS) {
                snprintf(c->error, sizeof c->error,
                         "the node closed the connection in the ZeroMQ handshake %d times: it "
                         "runs CURVE: not a CURVE client (set SHOAL_CURVE_CERT and "
                         "SHOAL_CURVE_ALLOW), or it refuses connections (too many open)",
                         c->cut_in_handshake);
                failed = true;
            }
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            snprintf(c->error, sizeof c->error, "the ZeroMQ handshake failed (errno %u: %s)",
                     (unsigned)value, strerror((int)value));
            failed = true;
        }
        while (zmq_msg_more(&ev) && zmq_msg_recv(&ev, c->monitor, ZMQ_DONTWAIT) >= 0)
            ;
    }
    zmq_msg_close(&ev);
    return failed;
}

/* Sends a frame, retrying while ZeroMQ has no connection yet (ZMQ_IMMEDIATE). */
static int send_until(shoal_client_t *c, const void *data, size_t len, int64_t deadline)
{
    while (zmq_send(c->dealer, data, len, ZMQ_DONTWAIT) < 0) {
        if (errno != EAGAIN)
            return SHOAL_EIO;
        if (shoal_now_ms() >= deadline)
            return SHOAL_ETIMEOUT;
        zmq_pollitem_t it[2] = {{c->dealer, 0, ZMQ_POLLOUT, 0}, {c->monitor, 0, ZMQ_POLLIN, 0}};
        zmq_poll(it, c->monitor ? 2 : 1, 5);
        if (c->monitor && (it[1].revents & ZMQ_POLLIN) && handshake_failed(c))
            return SHOAL_EREFUSED; /* the node refused the handshake: it will not change */
    }
    return 0;
}

static int handshake(shoal_client_t *c, int64_t deadline)
{
    shoal_hello_t h = {0};
    h.version_min = SHOAL_WIRE_VERSION_MIN;
    h.version_max = SHOAL_WIRE_VERSION_MAX;
    h.client = true;
    h.first_seq = 1;
    h.max_reply_bytes = c->max_reply;
    snprintf(h.to, sizeof h.to, "%s", c->endpoint);
    shoal_buf_t hello = {0};
    shoal_hello_write(&hello, &h);
    int rc = SHOAL_ETIMEOUT;
    while (shoal_now_ms() < deadline) {
        rc = send_until(c, hello.data, hello.len, deadline);
        if (rc != 0)
            break;
        int64_t resend = shoal_now_ms() + CLIENT_HELLO_RETRY_MS;
        zmq_msg_t m;
        zmq_msg_init(&m);
        int got;
        rc = SHOAL_ETIMEOUT;
        while ((got = recv_until(c, &m, resend < deadline ? resend : deadline)) == 1) {
            shoal_frame_t f;
            shoal_hello_reply_t r;
            if (zmq_msg_size(&m) > CLIENT_MAX_FRAME ||
                shoal_frame_parse(zmq_msg_data(&m), zmq_msg_size(&m), &f) != 0 ||
                f.type != SHOAL_FT_HELLO_REPLY || shoal_hello_reply_parse(&f, &r) != 0)
                continue; /* a stale reply or WHO of an earlier connection */
            if (r.status == SHOAL_HELLO_OK) {
                c->node = shoal_node_intern(r.node);
                c->version = (uint8_t)r.version;
                c->max_frame = r.max_frame_bytes ? r.max_frame_bytes : 256 * 1024;
                c->announced = c->max_reply;
                c->cut_in_handshake = 0;
                rc = 0;
            } else {
                rc = r.status == SHOAL_HELLO_NO_COMMON_VERSION ? SHOAL_EVERSION : SHOAL_EREFUSED;
            }
            break;
        }
        zmq_msg_close(&m);
        if (got < 0)
            rc = got;
        if (rc != SHOAL_ETIMEOUT)
            break;
    }
    shoal_buf_free(&hello);
    return rc;
}

shoal_client_t *shoal_client_new(const char *endpoint, uint32_t timeout_ms, int *err)
{
    const char *cert = getenv("SHOAL_CURVE_CERT"), *allow = getenv("SHOAL_CURVE_ALLOW");
    if (cert && cert[0] && allow && allow[0])
        return shoal_client_new_curve(endpoint, timeout_ms, cert, allow, err);
    return shoal_client_new_curve(endpoint, timeout_ms, NULL, NULL, err);
}

shoal_client_t *shoal_client_new_curve(const char *endpoint, uint32_t timeout_ms,
                                       const char *cert_file, const char *allow_dir, int *err)
{
    int dummy;
    if (!err)
        err = &dummy;
    shoal_error_detail_clear();
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port;
    if (!endpoint || strlen(endpoint) > SHOAL_ENDPOINT_MAX ||
        shoal_endpoint_split(endpoint, host, sizeof host, &port) != 0) {
        *err = shoal_error_detail_set(SHOAL_EINVAL, "'%s' is no endpoint (tcp://host:port)",
                                      endpoint ? endpoint : "(null)");
        return NULL;
    }
    void *ctx = shoal_zmq_context();
    void *dealer = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    if (!dealer) {
        *err = SHOAL_EIO;
        return NULL;
    }
    int v = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &v, sizeof v);
    v = 1;
    zmq_setsockopt(dealer, ZMQ_IMMEDIATE, &v, sizeof v);
    if (strchr(endpoint, '['))
        zmq_setsockopt(dealer, ZMQ_IPV6, &v, sizeof v);
    int64_t maxmsg = (int64_t)CLIENT_MAX_FRAME;
    zmq_setsockopt(dealer, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    void *monitor = NULL;
    shoal_error_detail_clear();
    int rc = 0;
    if (cert_file || allow_dir) {
        /* the keys are copied into the socket: the certificate is not kept */
        shoal_curve_t *curve = NULL;
        rc = shoal_curve_new("client", cert_file, allow_dir, false, &curve);
        if (rc == 0)
            rc = shoal_curve_client(curve, dealer, endpoint);
        shoal_curve_destroy(&curve);
    }
    /* plain clients too: a plain client of a CURVE node learns it from the handshake */
    static atomic_uint_fast64_t monitors; /* unique names: see system.c */
    char mon[64];
    snprintf(mon, sizeof mon, "inproc://shoal-client-monitor-%" PRIu64,
             (uint64_t)atomic_fetch_add(&monitors, 1));
    if (rc == 0 && (zmq_socket_monitor(dealer, mon,
                                       ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0 ||
                    !(monitor = zmq_socket(ctx, ZMQ_PAIR)) || zmq_connect(monitor, mon) != 0))
        rc = SHOAL_EIO;
    if (rc != 0) {
        if (monitor)
            zmq_close(monitor);
        zmq_socket_monitor(dealer, NULL, 0);
        zmq_close(dealer);
        *err = rc;
        return NULL;
    }
    v = 0;
    zmq_setsockopt(monitor, ZMQ_LINGER, &v, sizeof v);
    if (zmq_connect(dealer, endpoint) != 0) {
        if (monitor) {
            zmq_socket_monitor(dealer, NULL, 0);
            zmq_close(monitor);
        }
        zmq_close(dealer);
        *err = SHOAL_EIO;
        return NULL;
    }
    shoal_client_t *c = shoal_calloc(1, sizeof *c);
    c->dealer = dealer;
    c->monitor = monitor;
    c->curve = cert_file || allow_dir;
    c->endpoint = strdup(endpoint);
    c->timeout_ms = timeout_ms ? timeout_ms : CLIENT_DEFAULT_TIMEOUT_MS;
    c->next_request_id = 1;
    c->max_reply = SHOAL_REPLY_MAX_DEFAULT;
    rc = handshake(c, shoal_now_ms() + c->timeout_ms);
    if (rc != 0) {
        shoal_error_detail_set(rc, "%s", c->error);
        shoal_client_destroy(&c);
        *err = rc;
        return NULL;
    }
    *err = 0;
    return c;
}

void shoal_client_destroy(shoal_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_client_t *c = *self_p;
    if (c->monitor) {
        zmq_socket_monitor(c->dealer, NULL, 0);
        zmq_close(c->monitor);
    }
    zmq_close(c->dealer);
    free(c->endpoint);
    shoal_buf_free(&c->out);
    free(c);
    *self_p = NULL;
}

void shoal_client_set_timeout(shoal_client_t *c, uint32_t timeout_ms)
{
    if (c)
        c->timeout_ms = timeout_ms ? timeout_ms : CLIENT_DEFAULT_TIMEOUT_MS;
}

int shoal_client_set_max_reply(shoal_client_t *c, size_t bytes)
{
    if (!c || bytes == 0 || (uint64_t)bytes > SHOAL_REPLY_MAX_LIMIT)
        return SHOAL_EINVAL;
    c->max_reply = bytes; /* the node is told at the next request's handshake */
    return 0;
}

const char *shoal_client_error(const shoal_client_t *c)
{
    return c ? c->error : "";
}

/* A reply being put back together from REPLY_PART frames. */
typedef struct {
    bool started;
    uint64_t total, got;
} parts_t;

/* Takes one REPLY_PART frame of the current request: 1 when the reply is whole (in *reply),
   0 when more is to come, <0 when the reply cannot be taken (c->error says why). */
static int take_part(shoal_client_t *c, parts_t *ps, uint64_t total, uint64_t offset,
                     const uint8_t *d, size_t dl, shoal_buf_t *reply)
{
    if (total > c->max_reply) {
        snprintf(c->error, sizeof c->error,
                 "the reply of %" PRIu64 " bytes is over this client's limit of %" PRIu64
                 " bytes (shoal_client_set_max_reply)",
                 total, c->max_reply);
        return SHOAL_ETOOBIG;
    }
    if (!ps->started ? offset != 0 : (total != ps->total || offset != ps->got)) {
        snprintf(c->error, sizeof c->error,
                 "a part of the reply is missing (bytes %" PRIu64 " to %" PRIu64 " of %" PRIu64
                 " came after %" PRIu64 ")",
                 offset, offset + dl, total, ps->got);
        return SHOAL_EDECODE;
    }
    if (!ps->started) {
        ps->started = true;
        ps->total = total;
        if (reply) {
            shoal_buf_reset(reply);
            shoal_buf_reserve(reply, (size_t)total);
        }
    }
    if (reply)
        shoal_buf_append(reply, d, dl);
    ps->got += dl;
    return ps->got == ps->total;
}

int shoal_client_request(shoal_client_t *c, uint16_t kind, const void *data, size_t len,
                         uint16_t *reply_kind, shoal_buf_t *reply, uint32_t timeout_ms)
{
    if (!c || (!data && len) || kind < SHOAL_KIND_CLIENT)
        return SHOAL_EINVAL;
    c->error[0] = 0;
    if (len > c->max_frame || SHOAL_REQUEST_HEADER_MAX + len > c->max_frame) {
        snprintf(c->error, sizeof c->error,
                 "the request of %zu bytes is over the node's frame limit of %" PRIu64 " bytes",
                 len, c->max_frame);
        return SHOAL_ETOOBIG;
    }
    int64_t deadline = shoal_now_ms() + (timeout_ms ? timeout_ms : c->timeout_ms);
    int rc;
    if (c->announced != c->max_reply && (rc = handshake(c, deadline)) != 0)
        return rc; /* the node learns the new limit before it answers */
    uint64_t id = c->next_request_id++;
    shoal_buf_reset(&c->out);
    shoal_request_write(&c->out, c->version, id, kind, data, len);
    rc = send_until(c, c->out.data, c->out.len, deadline);
    if (rc != 0)
        return rc;
    zmq_msg_t m;
    zmq_msg_init(&m);
    int got;
    parts_t ps = {0};
    rc = SHOAL_ETIMEOUT;
    while ((got = recv_until(c, &m, deadline)) == 1) {
        shoal_frame_t f;
        if (zmq_msg_size(&m) > CLIENT_MAX_FRAME ||
            shoal_frame_parse(zmq_msg_data(&m), zmq_msg_size(&m), &f) != 0)
            continue;
        if (f.type == SHOAL_FT_WHO) {
            /* the node forgot us: handshake again and repeat the request */
            rc = handshake(c, deadline);
            if (rc == 0)
                rc = send_until(c, c->out.data, c->out.len, deadline);
            if (rc != 0)
                break;
            rc = SHOAL_ETIMEOUT;
            ps = (parts_t){0}; /* the node answers the repeated request from its start */
            continue;
        }
        uint64_t rid, total, offset;
        uint16_t rk;
        int status;
        const uint8_t *d;
        size_t dl;
        if (f.type == SHOAL_FT_REPLY_PART) {
            if (shoal_reply_part_parse(&f, &rid, &rk, &total, &offset, &d, &dl) != 0 || rid != id)
                continue; /* a part of a reply to an earlier request */
            int done = take_part(c, &ps, total, offset, d, dl, reply);
            if (done == 0)
                continue;
            if (done == 1 && reply_kind)
                *reply_kind = rk;
            rc = done == 1 ? 0 : done;
            break;
        }
        if (shoal_reply_parse(&f, &rid, &rk, &status, &d, &dl) != 0 || rid != id)
            continue; /* a late reply to an earlier request */
        if (reply_kind)
            *reply_kind = rk;
        if (reply) {
            shoal_buf_reset(reply);
            shoal_buf_append(reply, d, dl);
        }
        if (status == SHOAL_ETOOBIG && !dl) /* the transport's refusal (a handler's has a body) */
            snprintf(c->error, sizeof c->error,
                     "the node refused to send a reply over this client's limit of %" PRIu64
                     " bytes (shoal_client_set_max_reply)",
                     c->announced);
        rc = status;
        break;
    }
    zmq_msg_close(&m);
    if (got < 0)
        rc = got;
    if (rc == SHOAL_ETIMEOUT && ps.started && !c->error[0])
        snprintf(c->error, sizeof c->error,
                 "%" PRIu64 " of the reply's %" PRIu64 " bytes came before the deadline", ps.got,
                 ps.total);
    return rc;
}
