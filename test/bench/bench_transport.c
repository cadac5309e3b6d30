/*  bench_transport.c — the node transport: one-way 64-byte messages between two nodes.

    transport_tell_64b: node A sends 64-byte messages to node B through shoal_system_send (two
    systems in this process, tcp loopback); B counts them in its handler. A sends in bursts from a
    posted function that posts itself again, and on SHOAL_EAGAIN waits for a 1 ms timer before
    retrying, as an upper layer would. The rate is messages received per second.

    Baseline, in the same run: raw libzmq, a DEALER sending one zmq_msg_t per 64-byte message to a
    ROUTER read by another thread — what a transport without batching costs. Target (issue):
    ratio >= 0.5; batching should make Shoal faster than one ZeroMQ message per message.
*/
#include "bench.h"
#include "ddata.h"

#include <czmq.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define KIND_TELL 100
#define MSG_BYTES 64
#define BURST     8192

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Shoal
 */
typedef struct {
    shoal_system_t *a, *b;
    const shoal_node_t *to;
    atomic_bool up;
    /* receiver side (B's thread writes, the main thread reads) */
    uint64_t got_local;
    _Atomic uint64_t got;
    /* sender side (A's thread only) */
    uint64_t to_send, sent, eagains;
    uint8_t payload[MSG_BYTES];
} tell_t;

static void on_tell(shoal_system_t *sys, const shoal_node_t *from, uint16_t kind,
                    const uint8_t *data, size_t len, void *arg)
{
    (void)sys;
    (void)from;
    (void)kind;
    (void)data;
    (void)len;
    tell_t *t = arg;
    atomic_store_explicit(&t->got, ++t->got_local, memory_order_relaxed);
}

static void on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
                    const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)sys;
    (void)node;
    (void)old;
    (void)count;
    if (ev == SHOAL_PEER_UP)
        atomic_store(&((tell_t *)arg)->up, true);
}

static int burst(shoal_system_t *sys, void *arg);

static void retry_timer(shoal_system_t *sys, void *arg)
{
    burst(sys, arg);
}

static int burst(shoal_system_t *sys, void *arg)
{
    tell_t *t = arg;
    uint64_t end = t->sent + BURST < t->to_send ? t->sent + BURST : t->to_send;
    while (t->sent < end) {
        int rc = shoal_system_send(sys, t->to, KIND_TELL, t->payload, MSG_BYTES);
        if (rc == SHOAL_EAGAIN) {
            t->eagains++;
            shoal_system_timer(sys, 1, false, retry_timer, t);
            return 0;
        }
        if (rc != 0) {
            fprintf(stderr, "send failed: %s\n", shoal_strerror(rc));
            exit(1);
        }
        t->sent++;
    }
    if (t->sent < t->to_send)
        shoal_system_post(sys, burst, t); /* next loop turn: the batch is flushed between */
    return 0;
}

static int setup_b(shoal_system_t *sys, void *arg)
{
    return shoal_system_register(sys, KIND_TELL, on_tell, arg);
}

static int setup_a(shoal_system_t *sys, void *arg)
{
    tell_t *t = arg;
    int rc = shoal_system_on_peer(sys, on_peer, t);
    return rc ? rc : shoal_system_connect(sys, shoal_system_endpoint(t->b));
}

static int start_run(shoal_system_t *sys, void *arg)
{
    return burst(sys, arg);
}

static void shoal_tell(void *arg, size_t n)
{
    tell_t *t = arg;
    uint64_t base = atomic_load(&t->got);
    t->to_send = t->sent + n; /* A's thread is idle between runs: the call orders this write */
    if (shoal_system_call(t->a, start_run, t) != 0)
        exit(1);
    while (atomic_load_explicit(&t->got, memory_order_relaxed) < base + n)
        pause_us(200);
}

/* ---------------------------------------------------------------------------------------------
 * Raw libzmq: DEALER -> ROUTER, one message per 64 bytes
 */
typedef struct {
    void *ctx, *router, *dealer;
    size_t n;
} raw_t;

static void *raw_receiver(void *arg)
{
    raw_t *r = arg;
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    for (size_t i = 0; i < r->n; i++) {
        if (zmq_msg_recv(&id, r->router, 0) < 0 || zmq_msg_recv(&body, r->router, 0) < 0)
            exit(1);
        bench_sink(zmq_msg_size(&body));
    }
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    return NULL;
}

static void raw_tell(void *arg, size_t n)
{
    raw_t *r = arg;
    r->n = n;
    pthread_t th;
    pthread_create(&th, NULL, raw_receiver, r);
    static const uint8_t payload[MSG_BYTES];
    for (size_t i = 0; i < n; i++) {
        zmq_msg_t m;
        zmq_msg_init_size(&m, MSG_BYTES);
        memcpy(zmq_msg_data(&m), payload, MSG_BYTES);
        if (zmq_msg_send(&m, r->dealer, 0) < 0)
            exit(1);
    }
    pthread_join(th, NULL);
}

typedef struct {
    const char *cert, *allow;
} curve_t;

/* Two nodes, A telling B 64-byte messages: their rate (reported against `baseline`). */
static double shoal_rate(const curve_t *cv, double baseline)
{
    tell_t *t = calloc(1, sizeof *t);
    shoal_system_settings_t s;
    shoal_system_settings_default(&s);
    s.endpoint = "tcp://127.0.0.1:0";
    s.peer_send_hwm = 64;
    s.curve_cert = cv ? cv->cert : NULL;
    s.curve_allow_dir = cv ? cv->allow : NULL;
    int err;
    t->b = shoal_system_new(&s, &err);
    t->a = t->b ? shoal_system_new(&s, &err) : NULL;
    if (cv && t->a)
        shoal_system_learn_key(t->a, shoal_system_endpoint(t->b), shoal_system_public_key(t->b));
    if (!t->a || shoal_system_call(t->b, setup_b, t) != 0 ||
        shoal_system_call(t->a, setup_a, t) != 0) {
        fprintf(stderr, "cannot start nodes: %s\n", shoal_strerror(err));
        exit(1);
    }
    t->to = shoal_system_self(t->b);
    double deadline = bench_now() + 10;
    while (!atomic_load(&t->up)) {
        if (bench_now() > deadline)
            exit(1);
        pause_us(1000);
    }
    double rate = bench_rate(shoal_tell, t, 1.0, 3);
    shoal_system_stats_t sa;
    shoal_system_stats(t->a, &sa);
    if (!cv) {
        bench_report("transport_tell_64b", rate, "ops/s", baseline);
        bench_note("raw libzmq DEALER->ROUTER, one zmq message per 64-byte message: %.0f msgs/s",
                   baseline);
    } else {
        bench_report("transport_tell_64b_curve", rate, "ops/s", baseline);
    }
    bench_note("shoal%s: %" PRIu64 " messages in %" PRIu64 " frames (%.0f per frame), %" PRIu64
               " EAGAIN retries; target ratio >= 0.5",
               cv ? " (CURVE)" : "", sa.messages_out, sa.frames_out,
               sa.frames_out ? (double)sa.messages_out / (double)sa.frames_out : 0.0,
               sa.send_eagain);
    shoal_system_destroy(&t->a);
    shoal_system_destroy(&t->b);
    free(t);
    return rate;
}

int main(void)
{
    zsys_init();
    zsys_set_logstream(stderr); /* stdout carries the BENCH lines */

    /* baseline */
    raw_t r = {0};
    r.ctx = zmq_ctx_new();
    r.router = zmq_socket(r.ctx, ZMQ_ROUTER);
    r.dealer = zmq_socket(r.ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(r.router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r.dealer, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(r.router, "tcp://127.0.0.1:*") != 0)
        return 1;
    char ep[128];
    size_t eplen = sizeof ep;
    zmq_getsockopt(r.router, ZMQ_LAST_ENDPOINT, ep, &eplen);
    zmq_connect(r.dealer, ep);
    double raw = bench_rate(raw_tell, &r, 1.0, 3);
    zmq_close(r.dealer);
    zmq_close(r.router);
    zmq_ctx_term(r.ctx);

    double plain = shoal_rate(NULL, raw);
    /* the same over CURVE: the cost of encryption and authentication per message */
    char dir[] = "/tmp/shoal-bench-curve-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char cert[128], allow[128], cmd[200];
    snprintf(cert, sizeof cert, "%s/node.cert", dir);
    snprintf(allow, sizeof allow, "%s/allow", dir);
    mkdir(allow, 0700);
    zcert_t *c = zcert_new();
    zcert_save(c, cert);
    char pub[200];
    snprintf(pub, sizeof pub, "%s/node.cert", allow);
    zcert_save_public(c, pub);
    zcert_destroy(&c);
    curve_t cv = {cert, allow};
    double curve = shoal_rate(&cv, plain);
    bench_note("CURVE: both nodes one key pair on the allow-list; baseline = the same run without "
               "CURVE (%.0f msgs/s)", plain);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)curve;
    return system(cmd) == 0 ? 0 : 1;
}
