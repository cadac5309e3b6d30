/*  bench_latency.c — tail latency at a stated offered load (issue 40, section 1).

    Every path is loaded OPEN-LOOP: request i is due at t0 + i / rate whatever became of the
    earlier ones, and its latency runs from that intended time, not from when the generator got
    round to sending it, so a stall of the generator or of the node counts against every request
    it delayed (coordinated omission avoided, as HdrHistogram's wrk2 does it). The latencies go
    into ddata/histogram.h's histograms (the same buckets as the /metrics latency families).

    A path's load levels are fractions of its own maximum, measured first closed-loop (WINDOW
    requests in flight for MAX_SECONDS). At each level the raw baseline runs first at the same
    offered rate, then the path (alternating, so drift of the machine touches both): raw ZeroMQ
    request/reply, 64 bytes, a DEALER on this generator thread to a ROUTER on another thread of
    this process that sends each request straight back; the generator waits on the DEALER's fd
    with a nanosecond timeout between sends, so the baseline's own pacing is as good as the
    paths'. All nodes run in this process, each on its own node thread (release build).

    Paths (3 nodes with fast membership settings and sharding unless stated):
      ask        an ask from node 0 to an entity whose shard lives on node 1 or 2, answered at once
      tell       a tell from node 0 to such an entity, timed from intended send to the entity's
                 receive (on the receiving node's thread)
      save       an ask to an entity with entity state (remote shard) that answers after
                 shoal_entity_save_reply's WriteMajority is acknowledged
      new_shard  the first message to a shard never used before (coordinator allocation with its
                 WriteMajority, shard start, entity start, answer); every request a new shard
      handoff    asks to the entities of one shard in the 200 ms after StopShards of that shard
                 (the shards take turns), so most wait through the handoff and the restart
      wmaj3 / rmaj3, wmaj5 / rmaj5
                 WriteMajority GCounter increments and ReadMajority gets over 1,000 keys, on
                 replicators over a static peer list of 3 and of 5 nodes (no membership), issued
                 on node 0's thread (shoal_system_post from the generator)

    Output, per path and per load of 50% and 90% (times in microseconds; LOWER IS BETTER, the
    ratio is shoal / raw):
      BENCH name=lat_<path>_<load>_p50_us value=<us> unit=us baseline=<raw us> ratio=<n>
    and the same for _p99_us and _p999_us; a note per level gives the offered rate, the path's
    maximum and any failed request. Loads of 25% and 75% are measured for the plot only. Every
    level goes to a data file (SHOAL_BENCH_LATENCY_DAT, default build/bench/latency.dat) that
    test/bench/latency.gp turns into docs/images/latency.png.

    SHOAL_BENCH_LATENCY_SECONDS scales the measuring time (default 1.5 s a level at 50% and 90%,
    half that at 25% and 75%); SHOAL_BENCH_LATENCY_PATHS=ask,wmaj3 runs only those paths. The
    whole program takes about 2-3 minutes. Exits nonzero if a cluster does not form or a path
    fails every request.
*/
#include "bench.h"
#include "histogram.h"
#include "replicator_internal.h" /* the latency histograms of /metrics */
#include "sharding_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define NODES_MAX         5
#define SH_NODES          3
#define WINDOW            64 /* closed-loop window of the maximum's measurement */
#define MAX_SECONDS       1.0
#define RING              (1 << 18) /* request slots: more than any level keeps in flight */
#define ASK_TIMEOUT       10000
#define N_SHARDS          30 /* shards of the ask/tell/save paths; the remote ones are used */
#define PER_SHARD         50 /* entities per shard */
#define HANDOFF_PERIOD_US 200000
#define HANDOFF_SHARDS    8
#define NKEYS             1000
#define RAW_BYTES         64

static const double loads[] = {0.25, 0.5, 0.75, 0.9};
#define N_LOADS (sizeof loads / sizeof *loads)

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_latency: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* --- the load engine ------------------------------------------------------------------------ */
typedef struct path path_t;

typedef struct {
    path_t *p;
    int64_t intended_us;
    uint64_t i;
} slot_t;

struct path {
    const char *name;
    const char *what; /* one line for the notes */
    /* issues request i due at intended_us from the generator thread; 0, or an error (the request
       then counts as failed and will not complete) */
    int (*issue)(path_t *p, slot_t *s);
    shoal_hist_t hist[NODES_MAX]; /* one per recording thread (node index) */
    _Atomic int64_t inflight;
    _Atomic uint64_t done, failed;
    /* path state */
    shoal_region_t *region;
    char (*ids)[40]; /* entity ids cycled through (ask, tell, save) */
    size_t n_ids;
    int64_t t_start; /* handoff: the run's start, for its periods */
    int64_t period;
    uint64_t serial; /* new_shard: a number no shard has used */
    int repl_nodes;  /* wmaj/rmaj: which replicator cluster */
    bool read;
    /* the tail's profile: the same requests as Shoal's own /metrics histograms see them, from
       their acceptance on the node thread to completion */
    void (*inner)(path_t *p, bool reset, shoal_hist_t *out);
};

static slot_t *ring;

/* A request finished (any thread): its latency from its intended time into the thread's
   histogram. */
static void complete(slot_t *s, int node, int status)
{
    path_t *p = s->p;
    if (status == 0) {
        shoal_hist_record_since(&p->hist[node], s->intended_us);
        atomic_fetch_add(&p->done, 1);
    } else {
        atomic_fetch_add(&p->failed, 1);
    }
    atomic_fetch_sub(&p->inflight, 1);
}

static void sleep_until_us(int64_t t)
{
    struct timespec ts = {.tv_sec = t / 1000000, .tv_nsec = (t % 1000000) * 1000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void reset(path_t *p)
{
    for (int i = 0; i < NODES_MAX; i++)
        shoal_hist_reset(&p->hist[i]);
    atomic_store(&p->done, 0);
    atomic_store(&p->failed, 0);
}

static bool issue_one(path_t *p, uint64_t i, int64_t intended)
{
    if (atomic_load(&p->inflight) >= RING - 1)
        return false; /* hopelessly behind: counted as failed */
    slot_t *s = &ring[i % RING];
    s->p = p;
    s->intended_us = intended;
    s->i = i;
    atomic_fetch_add(&p->inflight, 1);
    if (p->issue(p, s) != 0) {
        atomic_fetch_sub(&p->inflight, 1);
        return false;
    }
    return true;
}

static void drain(path_t *p, double seconds)
{
    double until = bench_now() + seconds;
    while (atomic_load(&p->inflight) > 0 && bench_now() < until)
        usleep(500);
    if (atomic_load(&p->inflight) > 0)
        bench_note("%s: %" PRId64 " requests still in flight after %.0f s", p->name,
                   (int64_t)atomic_load(&p->inflight), seconds);
    atomic_store(&p->inflight, 0);
}

static uint64_t serial; /* request numbers run on across levels: slots and ids never repeat */

/* Completions per second with WINDOW in flight. */
static double run_max(path_t *p, double seconds)
{
    reset(p);
    p->t_start = shoal_hist_now_us();
    p->period = -1;
    double t0 = bench_now();
    while (bench_now() - t0 < seconds) {
        while (atomic_load(&p->inflight) >= WINDOW)
            usleep(20);
        if (!issue_one(p, serial++, shoal_hist_now_us()))
            atomic_fetch_add(&p->failed, 1);
    }
    drain(p, ASK_TIMEOUT / 1000.0 + 2);
    double t = bench_now() - t0;
    return (double)atomic_load(&p->done) / t;
}

/* Open loop at `rate` for `seconds`; the merged histogram in *out (NULL: none). Returns the
   requests still in flight 20 ms after the last one was due (a path that keeps up has only
   those of the last few milliseconds left), or INT64_MAX when issuing them (the path's own
   call, on the generator thread) made the generator more than 10 ms late. */
static int64_t run_open(path_t *p, double rate, double seconds, shoal_hist_t *out)
{
    reset(p);
    uint64_t n = (uint64_t)(rate * seconds);
    int64_t t0 = shoal_hist_now_us() + 1000;
    p->t_start = t0;
    p->period = -1;
    int64_t t = t0;
    for (uint64_t i = 0; i < n; i++) {
        t = t0 + (int64_t)((double)i * 1e6 / rate);
        sleep_until_us(t);
        if (!issue_one(p, serial++, t))
            atomic_fetch_add(&p->failed, 1);
    }
    bool late = shoal_hist_now_us() > t + 10000;
    sleep_until_us(t + 20000);
    int64_t backlog = late ? INT64_MAX : atomic_load(&p->inflight);
    drain(p, ASK_TIMEOUT / 1000.0 + 2);
    if (out) {
        shoal_hist_reset(out);
        for (int i = 0; i < NODES_MAX; i++)
            shoal_hist_merge(out, &p->hist[i]);
    }
    return backlog;
}

/* The highest rate the path sustains open-loop: a 0.4 s run at it ends on time and leaves at
   most 10 ms of its work (and a few requests) in flight. Searched (bisection on a log scale, 6
   steps: within 7%) below `hi`, the closed-loop maximum, which a path that batches what arrives
   together can exceed by far when the same requests arrive one at a time. */
static double sustained_max(path_t *p, double hi)
{
    double lo = hi / 64;
    for (int step = 0; step < 7; step++) {
        double r = step == 0 ? hi : sqrt(lo * hi);
        int64_t backlog = run_open(p, r, 0.4, NULL);
        bool ok = backlog != INT64_MAX && backlog <= (int64_t)(r * 0.010) + 8 &&
                  atomic_load(&p->failed) == 0;
        if (step == 0 && ok)
            return hi;
        if (ok)
            lo = r;
        else
            hi = r;
    }
    return lo;
}

/* --- raw ZeroMQ request/reply at an offered rate ------------------------------------------- */
static void *zctx;

static void *echo_main(void *arg)
{
    void *router = arg;
    for (;;) {
        zmq_msg_t id, body;
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&id, router, 0) < 0 || zmq_msg_recv(&body, router, 0) < 0) {
            zmq_msg_close(&id);
            zmq_msg_close(&body);
            break; /* the context was terminated */
        }
        if (zmq_msg_size(&body) == 1 && *(char *)zmq_msg_data(&body) == 'q') {
            zmq_msg_close(&id);
            zmq_msg_close(&body);
            break;
        }
        zmq_msg_send(&id, router, ZMQ_SNDMORE);
        zmq_msg_send(&body, router, 0);
    }
    zmq_close(router);
    return NULL;
}

static void *raw_dealer;
static pthread_t raw_echo;

static void raw_start(void)
{
    zctx = zmq_ctx_new();
    void *router = zmq_socket(zctx, ZMQ_ROUTER);
    int hwm = 0;
    zmq_setsockopt(router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(router, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_bind(router, "tcp://127.0.0.1:*") != 0)
        die("raw: bind: %s", zmq_strerror(errno));
    char ep[128];
    size_t eplen = sizeof ep;
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &eplen);
    raw_dealer = zmq_socket(zctx, ZMQ_DEALER);
    zmq_setsockopt(raw_dealer, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(raw_dealer, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(raw_dealer, ep) != 0)
        die("raw: connect: %s", zmq_strerror(errno));
    pthread_create(&raw_echo, NULL, echo_main, router);
}

static void raw_stop(void)
{
    zmq_send(raw_dealer, "q", 1, 0);
    pthread_join(raw_echo, NULL);
    zmq_close(raw_dealer);
    zmq_ctx_term(zctx);
}

static shoal_hist_t raw_hist;

/* Receives whatever replies are there, without waiting. */
static uint64_t raw_take(void)
{
    uint64_t got = 0;
    for (;;) {
        char b[RAW_BYTES];
        int n = zmq_recv(raw_dealer, b, sizeof b, ZMQ_DONTWAIT);
        if (n < 0)
            return got;
        int64_t t;
        memcpy(&t, b, sizeof t);
        shoal_hist_record_since(&raw_hist, t);
        got++;
    }
}

static void raw_open(double rate, double seconds, shoal_hist_t *out)
{
    shoal_hist_reset(&raw_hist);
    uint64_t n = (uint64_t)(rate * seconds), sent = 0, got = 0;
    int64_t t0 = shoal_hist_now_us() + 1000;
    int64_t give_up = t0 + (int64_t)(seconds * 1e6) + 10000000;
    int fd;
    size_t fdlen = sizeof fd;
    zmq_getsockopt(raw_dealer, ZMQ_FD, &fd, &fdlen);
    while (got < n && shoal_hist_now_us() < give_up) {
        int64_t now = shoal_hist_now_us();
        for (; sent < n; sent++) {
            int64_t t = t0 + (int64_t)((double)sent * 1e6 / rate);
            if (t > now)
                break;
            char b[RAW_BYTES] = {0};
            memcpy(b, &t, sizeof t);
            zmq_send(raw_dealer, b, sizeof b, 0);
        }
        got += raw_take();
        /* ZMQ_FD is edge-triggered and a send may consume its edge: poll only when ZMQ_EVENTS
           says nothing is waiting */
        int ev = 0;
        size_t evlen = sizeof ev;
        zmq_getsockopt(raw_dealer, ZMQ_EVENTS, &ev, &evlen);
        if (ev & ZMQ_POLLIN)
            continue;
        int64_t wait =
            sent < n ? t0 + (int64_t)((double)sent * 1e6 / rate) - shoal_hist_now_us() : 100000;
        if (wait <= 0)
            continue;
        struct timespec ts = {.tv_sec = wait / 1000000, .tv_nsec = (wait % 1000000) * 1000};
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ppoll(&pfd, 1, &ts, NULL);
    }
    if (got < n)
        bench_note("raw: %" PRIu64 " of %" PRIu64 " replies lost", n - got, n);
    *out = raw_hist;
}

/* --- the sharding cluster ------------------------------------------------------------------ */
static shoal_system_t *sys[NODES_MAX];
static shoal_cluster_t *cl[SH_NODES];
static shoal_sharding_t *sh[SH_NODES];
static shoal_region_t *lt[SH_NODES], *st[SH_NODES];
static int node_index[NODES_MAX] = {0, 1, 2, 3, 4};
static const shoal_type_t *gcounter_type;

static void *ent_start(shoal_entity_t *e, void *arg)
{
    (void)e;
    return arg; /* the node's index: any non-NULL state */
}

static void ent_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    (void)state;
    int node = *(int *)arg;
    const char *m = msg;
    if (len >= 1 + sizeof(uint64_t) && m[0] == 't') {
        uint64_t i;
        memcpy(&i, m + 1, sizeof i);
        complete(&ring[i % RING], node, 0);
        return;
    }
    if (len >= 4 && memcmp(m, "save", 4) == 0) {
        shoal_entity_save_reply(e, msg, len, "ok", 2);
        return;
    }
    shoal_entity_reply(e, "ok", 2);
}

static void ent_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)state;
    (void)arg;
}

static const shoal_entity_fns_t fns = {ent_start, ent_receive, ent_stop, NULL};

static void shard_by_prefix(const char *eid, uint32_t n, char *out, void *arg)
{
    (void)n;
    (void)arg;
    size_t k = strcspn(eid, ".");
    if (k > SHOAL_SHARD_ID_MAX)
        k = SHOAL_SHARD_ID_MAX;
    memcpy(out, eid, k);
    out[k] = 0;
}

static void region_settings(shoal_sharding_settings_t *s, bool stored)
{
    shoal_sharding_settings_fast(s);
    s->number_of_shards = 100;
    s->rebalance_interval_ms = 600000;
    s->shard_id = shard_by_prefix;
    s->entity_state = stored;
    s->passivation.policy = SHOAL_PASSIVATE_NONE;
    s->passivation.idle_timeout_ms = 0;
}

static bool sh_ready(void)
{
    if (!bench_all_up(cl, SH_NODES))
        return false;
    for (int i = 0; i < SH_NODES; i++)
        if (lt[i] && !shoal_sharding_healthy(sh[i], NULL, 0))
            return false;
    return true;
}

static void wait_for(bool (*pred)(void), double seconds, const char *what)
{
    double until = bench_now() + seconds;
    while (!pred()) {
        if (bench_now() > until)
            die("%s", what);
        usleep(20000);
    }
}

static shoal_system_t *node_new(void)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    shoal_system_t *s = shoal_system_new(&ss, &err);
    if (!s)
        die("system: %s", shoal_strerror(err));
    return s;
}

static void sh_start(void)
{
    for (int i = 0; i < SH_NODES; i++) {
        sys[i] = node_new();
        shoal_cluster_settings_t cs;
        shoal_cluster_settings_fast(&cs);
        int err = 0;
        cl[i] = shoal_cluster_new(sys[i], &cs, &err);
        sh[i] = cl[i] ? shoal_sharding_new(cl[i], &err) : NULL;
        if (!sh[i])
            die("cluster or sharding: %s", shoal_strerror(err));
        const char *seed = shoal_system_endpoint(sys[0]);
        if (shoal_cluster_join(cl[i], i ? &seed : NULL, i ? 1 : 0) != 0)
            die("join");
        if (i == 0) {
            double until = bench_now() + 20;
            while (shoal_cluster_self_status(cl[0]) != SHOAL_MEMBER_UP && bench_now() < until)
                usleep(20000);
        }
    }
    wait_for(sh_ready, 60, "the nodes did not come up");
    for (int i = 0; i < SH_NODES; i++) {
        shoal_sharding_settings_t s;
        int err = 0;
        region_settings(&s, false);
        lt[i] = shoal_region_start(sh[i], "lt", &s, &fns, &node_index[i], &err);
        region_settings(&s, true);
        st[i] = shoal_region_start(sh[i], "st", &s, &fns, &node_index[i], &err);
        if (!lt[i] || !st[i])
            die("regions: %s", shoal_strerror(err));
    }
    wait_for(sh_ready, 30, "the regions did not register");
}

static void sh_stop(void)
{
    for (int i = SH_NODES - 1; i >= 0; i--) {
        shoal_sharding_destroy(&sh[i]);
        shoal_cluster_destroy(&cl[i]);
        shoal_system_destroy(&sys[i]);
        lt[i] = st[i] = NULL;
    }
}

static int owner_of(shoal_region_t **rs, const char *shard)
{
    for (int i = 0; i < SH_NODES; i++) {
        shoal_region_state_t s;
        if (shoal_region_state(rs[i], false, &s) != 0)
            continue;
        bool here = false;
        for (size_t k = 0; k < s.n_shards; k++)
            here |= strcmp(s.shards[k].id, shard) == 0;
        shoal_region_state_free(&s);
        if (here)
            return i;
    }
    return -1;
}

/* Entity ids of the shards <prefix>0..N_SHARDS-1 that live on node 1 or 2, each started (and
   for "st" saved once) before any measurement. */
static void remote_ids(path_t *p, shoal_region_t **rs, const char *prefix, const char *msg)
{
    p->ids = calloc((size_t)N_SHARDS * PER_SHARD, sizeof *p->ids);
    p->n_ids = 0;
    for (int s = 0; s < N_SHARDS; s++) {
        char id[40];
        snprintf(id, sizeof id, "%s%d.0", prefix, s);
        shoal_buf_t reply = {0};
        if (shoal_region_ask_sync(rs[0], id, msg, strlen(msg), ASK_TIMEOUT, &reply) != 0)
            die("warm-up ask to %s failed", id);
        shoal_buf_free(&reply);
        snprintf(id, sizeof id, "%s%d", prefix, s);
        int owner = owner_of(rs, id);
        if (owner <= 0)
            continue;
        for (int k = 0; k < PER_SHARD; k++)
            snprintf(p->ids[p->n_ids++], sizeof *p->ids, "%s%d.%d", prefix, s, k);
    }
    if (p->n_ids == 0)
        die("%s: no shard landed on node 1 or 2", prefix);
}

static void on_ask(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    (void)reply;
    (void)len;
    complete(arg, 0, status);
}

static const char save_msg[100] = "save: a 100-byte state, the size bench_entity_state saves";

static int issue_ask(path_t *p, slot_t *s)
{
    const char *id = p->ids[s->i % p->n_ids];
    bool save = p->region == st[0];
    return shoal_region_ask(p->region, id, save ? save_msg : "ask", save ? sizeof save_msg : 3,
                            ASK_TIMEOUT, on_ask, s);
}

static int issue_tell(path_t *p, slot_t *s)
{
    char m[1 + sizeof(uint64_t)];
    m[0] = 't';
    memcpy(m + 1, &s->i, sizeof s->i);
    return shoal_region_tell(p->region, p->ids[s->i % p->n_ids], m, sizeof m);
}

static int issue_new_shard(path_t *p, slot_t *s)
{
    char id[40];
    snprintf(id, sizeof id, "n%" PRIu64 ".x", p->serial++);
    return shoal_region_ask(p->region, id, "ask", 3, ASK_TIMEOUT, on_ask, s);
}

static int issue_handoff(path_t *p, slot_t *s)
{
    int64_t period = (s->intended_us - p->t_start) / HANDOFF_PERIOD_US;
    char shard[16];
    snprintf(shard, sizeof shard, "h%d", (int)(period % HANDOFF_SHARDS));
    if (period != p->period) {
        p->period = period;
        const char *one[] = {shard};
        shoal_region_stop_shards(p->region, one, 1);
    }
    char id[40];
    snprintf(id, sizeof id, "%s.%d", shard, (int)(s->i % PER_SHARD));
    return shoal_region_ask(p->region, id, "ask", 3, ASK_TIMEOUT, on_ask, s);
}

/* --- replicators over a static peer list --------------------------------------------------- */
typedef struct {
    shoal_system_t *sys;
    shoal_replicator_t *rep;
    _Atomic int peers_up;
} rnode_t;

static rnode_t rn[NODES_MAX];
static char keys[NKEYS][16];

static void rnode_on_peer(shoal_system_t *s, shoal_peer_event_t ev, const shoal_node_t *node,
                          const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)s;
    (void)count;
    rnode_t *n = arg;
    if (ev == SHOAL_PEER_RESTARTED && old)
        shoal_replicator_remove_peer(n->rep, old);
    if (ev == SHOAL_PEER_UP || ev == SHOAL_PEER_RESTARTED) {
        shoal_replicator_add_peer(n->rep, node, true, shoal_node_port(node));
        atomic_fetch_add(&n->peers_up, 1);
    }
}

static int rnode_listen(shoal_system_t *s, void *arg)
{
    return shoal_system_on_peer(s, rnode_on_peer, arg);
}

static int rnode_connect(shoal_system_t *s, void *arg)
{
    return shoal_system_connect(s, arg);
}

static void repl_start(int n)
{
    for (int i = 0; i < n; i++) {
        rn[i].sys = sys[i] = node_new();
        atomic_store(&rn[i].peers_up, 0);
        shoal_replicator_settings_t rs;
        shoal_replicator_settings_default(&rs);
        int err = 0;
        rn[i].rep = shoal_replicator_new(sys[i], &rs, &err);
        if (!rn[i].rep || shoal_system_call(sys[i], rnode_listen, &rn[i]) != 0)
            die("replicator: %s", shoal_strerror(err));
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j && shoal_system_call(sys[i], rnode_connect,
                                            (void *)shoal_system_endpoint(sys[j])) != 0)
                die("connect");
    double until = bench_now() + 20;
    for (int i = 0; i < n; i++)
        while (atomic_load(&rn[i].peers_up) < n - 1)
            if (bench_now() > until)
                die("the replicators did not meet");
            else
                usleep(10000);
}

static void repl_stop(int n)
{
    for (int i = n - 1; i >= 0; i--) {
        shoal_replicator_destroy(&rn[i].rep);
        shoal_system_destroy(&rn[i].sys);
        sys[i] = NULL;
    }
}

static int incr(shoal_crdt_t *v, void *arg)
{
    return shoal_gcounter_increment(v, arg, 1);
}

static void on_update(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    complete(arg, 0, status);
}

static void on_get(shoal_replicator_t *r, int status, const char *key, const shoal_crdt_t *v,
                   void *arg)
{
    (void)r;
    (void)key;
    (void)v;
    complete(arg, 0, status == SHOAL_ENOTFOUND ? 0 : status);
}

static int repl_op(shoal_system_t *s, void *arg)
{
    (void)s;
    slot_t *sl = arg;
    path_t *p = sl->p;
    shoal_consistency_t c = {.level = SHOAL_MAJORITY, .timeout_ms = ASK_TIMEOUT};
    const char *key = keys[sl->i % NKEYS];
    int rc = p->read ? shoal_replicator_get(rn[0].rep, key, NULL, &c, on_get, sl)
                     : shoal_replicator_update_typed(rn[0].rep, key, gcounter_type, &c, incr,
                                                     (void *)shoal_system_self(rn[0].sys),
                                                     on_update, sl);
    if (rc != 0)
        complete(sl, 0, rc);
    return 0;
}

static int issue_repl(path_t *p, slot_t *s)
{
    (void)p;
    return shoal_system_post(rn[0].sys, repl_op, s);
}

/* --- the tail's profile ---------------------------------------------------------------------- */
/* Shoal's own histograms (the /metrics families) are node-thread state: reset and copied on the
   node thread. */
typedef struct {
    shoal_hist_t *h;
    shoal_hist_t *out; /* NULL: reset */
} hist_call_t;

static int hist_call(shoal_system_t *s, void *arg)
{
    (void)s;
    hist_call_t *c = arg;
    if (c->out)
        shoal_hist_merge(c->out, c->h);
    else
        shoal_hist_reset(c->h);
    return 0;
}

static void node_hist(shoal_system_t *s, shoal_hist_t *h, bool reset, shoal_hist_t *out)
{
    hist_call_t c = {h, reset ? NULL : out};
    shoal_system_call(s, hist_call, &c);
}

/* asks of node 0's region: from acceptance on its node thread to the reply */
static void inner_ask(path_t *p, bool reset, shoal_hist_t *out)
{
    node_hist(sys[0], &p->region->lat->ask, reset, out);
}

/* saves: from issue to acknowledgement, on the nodes hosting the entities */
static void inner_save(path_t *p, bool reset, shoal_hist_t *out)
{
    (void)p;
    for (int i = 0; i < SH_NODES; i++)
        node_hist(sys[i], &st[i]->lat->save, reset, out);
}

/* majority reads and writes of node 0's replicator: from the start of the round to completion */
static void inner_repl(path_t *p, bool reset, shoal_hist_t *out)
{
    repl_latency_t *l = rn[0].rep->lat;
    node_hist(sys[0], p->read ? &l->read[SHOAL_MAJORITY] : &l->write[SHOAL_MAJORITY], reset, out);
}

/* --- measuring and reporting --------------------------------------------------------------- */
static double seconds_scale = 1.0;
static FILE *dat;

static void report(const char *path, int pct, const char *q, uint64_t v, uint64_t base)
{
    char name[96];
    snprintf(name, sizeof name, "lat_%s_%d_%s_us", path, pct, q);
    bench_report(name, (double)v, "us", base ? (double)base : 1);
}

typedef struct {
    uint64_t p[3], raw[3];
} level_t;

static void measure(path_t *p, level_t out[N_LOADS])
{
    static shoal_hist_t h, rh;
    double closed = run_max(p, MAX_SECONDS);
    if (closed <= 0)
        die("%s: no request completed (%" PRIu64 " failed)", p->name, atomic_load(&p->failed));
    double max = sustained_max(p, closed);
    const char *force = getenv("SHOAL_BENCH_LATENCY_MAX"); /* experiments: a maximum given */
    if (force && atof(force) > 0)
        max = atof(force);
    bench_note("%s: %s; maximum %.0f/s sustained open-loop (%.0f/s closed-loop with %d in flight)",
               p->name, p->what, max, closed, WINDOW);
    for (size_t l = 0; l < N_LOADS; l++) {
        double rate = max * loads[l];
        double secs = seconds_scale * (loads[l] == 0.5 || loads[l] == 0.9 ? 1.5 : 0.75);
        raw_open(rate, secs, &rh);
        if (p->inner)
            p->inner(p, true, NULL);
        run_open(p, rate, secs, &h);
        static shoal_hist_t in;
        shoal_hist_reset(&in);
        if (p->inner)
            p->inner(p, false, &in);
        static const double q[3] = {50, 99, 99.9};
        for (int k = 0; k < 3; k++) {
            out[l].p[k] = shoal_hist_percentile(&h, q[k]);
            out[l].raw[k] = shoal_hist_percentile(&rh, q[k]);
        }
        int pct = (int)(loads[l] * 100 + 0.5);
        uint64_t failed = atomic_load(&p->failed);
        bench_note("%s at %d%%: %.0f/s offered, %" PRIu64 " done, %" PRIu64
                   " failed; p50/p99/p99.9/max %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64
                   " us, raw %" PRIu64 "/%" PRIu64 "/%" PRIu64 "/%" PRIu64 " us",
                   p->name, pct, rate, h.count, failed, out[l].p[0], out[l].p[1], out[l].p[2],
                   h.max_us, out[l].raw[0], out[l].raw[1], out[l].raw[2], rh.max_us);
        if (p->inner && in.count)
            /* what the slow requests waited for: inside Shoal on the node thread (the /metrics
               histogram), or before it, to reach the node thread (the rest of the latency) */
            bench_note("%s at %d%% profile: on the node thread p50/p99/p99.9 %" PRIu64 "/%" PRIu64
                       "/%" PRIu64 " us of %" PRIu64 " requests; the rest of each is the wait "
                       "to reach it",
                       p->name, pct, shoal_hist_percentile(&in, 50), shoal_hist_percentile(&in, 99),
                       shoal_hist_percentile(&in, 99.9), in.count);
        if (pct == 50 || pct == 90) {
            static const char *const qn[3] = {"p50", "p99", "p999"};
            for (int k = 0; k < 3; k++)
                report(p->name, pct, qn[k], out[l].p[k], out[l].raw[k]);
        }
        if (dat)
            fprintf(dat,
                    "%s %d %.0f %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
                    " %" PRIu64 "\n",
                    p->name, pct, rate, out[l].p[0], out[l].p[1], out[l].p[2], out[l].raw[0],
                    out[l].raw[1], out[l].raw[2]);
    }
    if (dat) {
        fprintf(dat, "\n\n"); /* one gnuplot data block per path */
        fflush(dat);
    }
}

/* The issue's targets, as notes (the figures themselves are the BENCH lines). */
static void targets(const path_t *p, const level_t lv[N_LOADS], bool p99_target)
{
    const level_t *l50 = &lv[1], *l90 = &lv[3];
    double r99 = l50->raw[1] ? (double)l50->p[1] / (double)l50->raw[1] : 0;
    double r999 = l50->raw[2] ? (double)l50->p[2] / (double)l50->raw[2] : 0;
    double grow = l50->p[1] ? (double)l90->p[1] / (double)l50->p[1] : 0;
    if (p99_target)
        bench_note("target %s: p99 <= 3x raw at 50%%: %.2fx, %s", p->name, r99,
                   r99 <= 3 ? "met" : "MISSED");
    bench_note("target %s: p99.9 <= 10x raw at 50%%: %.2fx, %s", p->name, r999,
               r999 <= 10 ? "met" : "MISSED");
    bench_note("target %s: p99 at 90%% <= 2x p99 at 50%%: %.2fx, %s", p->name, grow,
               grow <= 2 ? "met" : "MISSED");
}

static bool wanted(const char *name)
{
    const char *only = getenv("SHOAL_BENCH_LATENCY_PATHS");
    if (!only || !*only)
        return true;
    size_t n = strlen(name);
    for (const char *s = only; (s = strstr(s, name)); s += n)
        if ((s == only || s[-1] == ',') && (s[n] == 0 || s[n] == ','))
            return true;
    return false;
}

static void run_path(path_t *p, bool p99_target)
{
    if (!wanted(p->name))
        return;
    level_t lv[N_LOADS];
    measure(p, lv);
    targets(p, lv, p99_target);
}

static path_t paths[9];

int main(void)
{
    /* the generator sleeps to the microsecond: no timer slack */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    const char *sc = getenv("SHOAL_BENCH_LATENCY_SECONDS");
    if (sc && atof(sc) > 0)
        seconds_scale = atof(sc) / 1.5;
    const char *datp = getenv("SHOAL_BENCH_LATENCY_DAT");
    if (!datp || !*datp) {
        mkdir("build", 0755);
        mkdir("build/bench", 0755);
        datp = "build/bench/latency.dat";
    }
    dat = fopen(datp, "w");
    if (!dat)
        bench_note("cannot write %s: %s (no plot data)", datp, strerror(errno));
    else
        fprintf(dat, "# path load_pct offered_per_s p50_us p99_us p999_us raw_p50_us raw_p99_us "
                     "raw_p999_us\n");
    ring = calloc(RING, sizeof *ring);
    shoal_crdt_t *g = shoal_gcounter_new();
    gcounter_type = shoal_crdt_type(g);
    shoal_crdt_destroy(&g);
    for (int k = 0; k < NKEYS; k++)
        snprintf(keys[k], sizeof keys[k], "k%04d", k);
    bench_note("latency: microseconds from each request's intended send time (open loop); lower "
               "is better; baseline = raw ZeroMQ request/reply, same offered rate, same "
               "percentile; ratio = shoal / raw");
    raw_start();

    bool need_sh = false;
    static const char *const sh_paths[] = {"ask", "tell", "save", "new_shard", "handoff"};
    for (size_t i = 0; i < 5; i++)
        need_sh |= wanted(sh_paths[i]);
    if (need_sh) {
        sh_start();
        path_t *ask = &paths[0], *tell = &paths[1], *save = &paths[2], *fresh = &paths[3],
               *hand = &paths[4];
        *ask = (path_t){.name = "ask",
                        .what = "sharded ask to an entity on another node",
                        .issue = issue_ask,
                        .region = lt[0]};
        remote_ids(ask, lt, "r", "ask");
        *tell = (path_t){.name = "tell",
                         .what = "sharded tell, send to receive on another node",
                         .issue = issue_tell,
                         .region = lt[0],
                         .ids = ask->ids,
                         .n_ids = ask->n_ids};
        *save = (path_t){.name = "save",
                         .what = "ask answered after the entity's 100-byte state is saved "
                                 "(WriteMajority, 2 of 3)",
                         .issue = issue_ask,
                         .region = st[0]};
        remote_ids(save, st, "s", save_msg);
        *fresh = (path_t){.name = "new_shard",
                          .what = "first message to a new shard (allocation, start, answer)",
                          .issue = issue_new_shard,
                          .region = lt[0]};
        *hand = (path_t){.name = "handoff",
                         .what = "asks to a shard in the 200 ms after its StopShards",
                         .issue = issue_handoff,
                         .region = lt[0]};
        ask->inner = fresh->inner = hand->inner = inner_ask;
        save->inner = inner_save;
        run_path(ask, true);
        run_path(tell, false);
        run_path(save, false);
        run_path(fresh, false);
        run_path(hand, false);
        free(ask->ids);
        free(save->ids);
        sh_stop();
    }
    static const int sizes[2] = {3, 5};
    for (int z = 0; z < 2; z++) {
        int n = sizes[z];
        path_t *w = &paths[5 + 2 * z], *r = &paths[6 + 2 * z];
        static char wn[2][8], rnm[2][8], ww[2][64], rw[2][64];
        snprintf(wn[z], sizeof wn[z], "wmaj%d", n);
        snprintf(rnm[z], sizeof rnm[z], "rmaj%d", n);
        snprintf(ww[z], sizeof ww[z], "WriteMajority GCounter increment, %d nodes", n);
        snprintf(rw[z], sizeof rw[z], "ReadMajority get, %d nodes", n);
        if (!wanted(wn[z]) && !wanted(rnm[z]))
            continue;
        repl_start(n);
        *w = (path_t){.name = wn[z], .what = ww[z], .issue = issue_repl, .repl_nodes = n};
        *r = (path_t){
            .name = rnm[z], .what = rw[z], .issue = issue_repl, .repl_nodes = n, .read = true};
        w->inner = r->inner = inner_repl;
        run_path(w, true);
        run_path(r, false);
        repl_stop(n);
    }
    raw_stop();
    if (dat)
        fclose(dat);
    free(ring);
    return 0;
}
