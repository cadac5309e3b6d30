/*  client.c — shoal_client_t: a tool's connection to a node (a DEALER that handshakes with the
    client role and sends requests of the client class, kinds >= SHOAL_KIND_CLIENT).

    A client is not a peer: the node answers it through its ROUTER and never connects back, so a
    tool on any machine can ask a node something without joining the cluster. Requests carry an
    id so a reply that comes after its request timed out is recognized and skipped. A node that
    forgot the client (restart, idle sweep) answers WHO: the client handshakes again and sends
    the request once more.
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

struct shoal_client {
    void *dealer;
    void *monitor; /* CURVE: the DEALER's failed handshakes (ZeroMQ would wait silently) */
    char *endpoint;
    uint32_t timeout_ms;
    const shoal_node_t *node;
    uint8_t version;
    uint64_t max_frame;
    uint64_t next_request_id;
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

/* Reads the monitor's events: true when a handshake failed. */
static bool handshake_failed(shoal_client_t *c)
{
    bool failed = false;
    zmq_msg_t ev;
    zmq_msg_init(&ev);
    while (zmq_msg_recv(&ev, c->monitor, ZMQ_DONTWAIT) >= 0) {
        uint16_t event = 0;
        if (zmq_msg_size(&ev) >= 2)
            memcpy(&event, zmq_msg_data(&ev), 2);
        failed |= (event & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                            ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)) != 0;
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
            return SHOAL_EREFUSED; /* the node did not admit our key: it will not change */
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
    char host[SHOAL_ENDPOINT_MAX + 1];
    uint16_t port;
    if (!endpoint || strlen(endpoint) > SHOAL_ENDPOINT_MAX ||
        shoal_endpoint_split(endpoint, host, sizeof host, &port) != 0) {
        *err = SHOAL_EINVAL;
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
    if (cert_file || allow_dir) {
        /* the keys are copied into the socket: the certificate is not kept */
        shoal_curve_t *curve = NULL;
        int rc = shoal_curve_new("client", cert_file, allow_dir, false, &curve);
        if (rc == 0)
            rc = shoal_curve_client(curve, dealer, endpoint);
        shoal_curve_destroy(&curve);
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
    }
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
    c->endpoint = strdup(endpoint);
    c->timeout_ms = timeout_ms ? timeout_ms : CLIENT_DEFAULT_TIMEOUT_MS;
    c->next_request_id = 1;
    int rc = handshake(c, shoal_now_ms() + c->timeout_ms);
    if (rc != 0) {
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

int shoal_client_request(shoal_client_t *c, uint16_t kind, const void *data, size_t len,
                         uint16_t *reply_kind, shoal_buf_t *reply, uint32_t timeout_ms)
{
    if (!c || (!data && len) || kind < SHOAL_KIND_CLIENT)
        return SHOAL_EINVAL;
    if (len > c->max_frame || SHOAL_REQUEST_HEADER_MAX + len > c->max_frame)
        return SHOAL_ETOOBIG;
    int64_t deadline = shoal_now_ms() + (timeout_ms ? timeout_ms : c->timeout_ms);
    uint64_t id = c->next_request_id++;
    shoal_buf_reset(&c->out);
    shoal_request_write(&c->out, c->version, id, kind, data, len);
    int rc = send_until(c, c->out.data, c->out.len, deadline);
    if (rc != 0)
        return rc;
    zmq_msg_t m;
    zmq_msg_init(&m);
    int got;
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
            continue;
        }
        uint64_t rid;
        uint16_t rk;
        int status;
        const uint8_t *d;
        size_t dl;
        if (shoal_reply_parse(&f, &rid, &rk, &status, &d, &dl) != 0 || rid != id)
            continue; /* a late reply to an earlier request */
        if (reply_kind)
            *reply_kind = rk;
        if (reply) {
            shoal_buf_reset(reply);
            shoal_buf_append(reply, d, dl);
        }
        rc = status;
        break;
    }
    zmq_msg_close(&m);
    if (got < 0)
        rc = got;
    return rc;
}
