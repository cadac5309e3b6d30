/*  test_heartbeat.c — heartbeat actors over loopback: no false alarm while a peer answers; a
    paused, destroyed, wedged, cut-off or never-answering peer becomes unreachable, and reachable
    again when it answers; an indirect probe through a helper keeps a member reachable across one
    bad link; a monitor frozen itself restarts its clocks instead of accusing; the wire codec; what
    a stranger can make the heartbeat socket hold (a frame announcing 2 GiB, too many
    connections) and endpoints peers could not dial.

    Each test starts three nodes (a shoal_system_t each, only for its endpoint and its fault
    injection) and a heartbeat actor per node. A background thread plays the node loops, ticking
    every actor whose `ticking` flag is set. */
#include "cluster.h"
#include "heartbeat.h"
#include "hostile.h"

#include <czmq.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define N 3
#define LOG_MAX 64

typedef struct {
    shoal_system_t *sys[N];
    hb_actor_t *hb[N];
    char node_id[N][300];
    char node_ep[N][256];
    char hb_ep[N][256];
    atomic_bool ticking[N];
    atomic_bool stop;
    pthread_t ticker;
    pthread_mutex_t lock; /* guards hb[] against the ticker while a test destroys one */
    hb_event_t log[N][LOG_MAX];
    size_t nlog[N];
} fixture_t;

static fixture_t F;

static void settings(hb_settings_t *s, shoal_system_t *sys)
{
    memset(s, 0, sizeof *s);
    s->sys = sys;
    s->bind_endpoint = "tcp://127.0.0.1:*";
    s->heartbeat_interval_ms = 100;
    s->expected_response_after_ms = 500;
    s->indirect_probes = 3;
    s->loop_stall_bound_ms = 1000;
    s->phi.threshold = 8.0;
    s->phi.max_sample_size = 1000;
    s->phi.min_std_deviation_ms = 100;
    s->phi.acceptable_pause_ms = 500;
    s->phi.first_heartbeat_estimate_ms = 100;
}

static void *ticker(void *arg)
{
    (void)arg;
    while (!atomic_load(&F.stop)) {
        pthread_mutex_lock(&F.lock);
        for (int i = 0; i < N; i++)
            if (F.hb[i] && atomic_load(&F.ticking[i]))
                hb_actor_tick(F.hb[i]);
        pthread_mutex_unlock(&F.lock);
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof F);
    pthread_mutex_init(&F.lock, NULL);
    for (int i = 0; i < N; i++) {
        shoal_system_settings_t ss;
        shoal_system_settings_default(&ss);
        ss.endpoint = "tcp://127.0.0.1:0";
        int err = 0;
        F.sys[i] = shoal_system_new(&ss, &err);
        assert_non_null(F.sys[i]);
        hb_settings_t hs;
        settings(&hs, F.sys[i]);
        F.hb[i] = hb_actor_new(&hs, &err);
        assert_non_null(F.hb[i]);
        assert_int_equal(err, 0);
        snprintf(F.node_id[i], sizeof F.node_id[i], "%s",
                 shoal_node_id(shoal_system_self(F.sys[i])));
        snprintf(F.node_ep[i], sizeof F.node_ep[i], "%s", shoal_system_endpoint(F.sys[i]));
        snprintf(F.hb_ep[i], sizeof F.hb_ep[i], "%s", hb_actor_endpoint(F.hb[i]));
        assert_true(strncmp(F.hb_ep[i], "tcp://127.0.0.1:", 16) == 0);
        atomic_store(&F.ticking[i], true);
    }
    assert_int_equal(pthread_create(&F.ticker, NULL, ticker, NULL), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    atomic_store(&F.stop, true);
    pthread_join(F.ticker, NULL);
    for (int i = 0; i < N; i++) {
        hb_actor_destroy(&F.hb[i]);
        shoal_system_destroy(&F.sys[i]);
    }
    pthread_mutex_destroy(&F.lock);
    return 0;
}

static void kill_actor(int i)
{
    pthread_mutex_lock(&F.lock);
    hb_actor_t *a = F.hb[i];
    F.hb[i] = NULL;
    pthread_mutex_unlock(&F.lock);
    hb_actor_destroy(&a);
}

static hb_peer_t peer(int i)
{
    hb_peer_t p = {.node_id = F.node_id[i], .node_endpoint = F.node_ep[i], .hb_endpoint = F.hb_ep[i]};
    return p;
}

/* monitor m watches target t, with helper h (-1: none) */
static void watch(int m, int t, int h)
{
    hb_peer_t tp = peer(t), hp;
    if (h >= 0)
        hp = peer(h);
    assert_int_equal(hb_actor_set_peers(F.hb[m], &tp, 1, h >= 0 ? &hp : NULL, h >= 0 ? 1 : 0), 0);
}

static hb_stats_t stats(int i)
{
    hb_stats_t s;
    hb_actor_stats(F.hb[i], &s);
    return s;
}

static void collect(int i)
{
    if (!F.hb[i])
        return;
    F.nlog[i] += hb_actor_drain(F.hb[i], F.log[i] + F.nlog[i], LOG_MAX - F.nlog[i]);
}

/* the number of events of monitor m about node `id` with that reachability */
static size_t count_events_id(int m, const char *id, bool reachable)
{
    collect(m);
    size_t n = 0;
    for (size_t i = 0; i < F.nlog[m]; i++)
        if (strcmp(F.log[m][i].node_id, id) == 0 && F.log[m][i].reachable == reachable)
            n++;
    return n;
}

static size_t count_events(int m, int t, bool reachable)
{
    return count_events_id(m, F.node_id[t], reachable);
}

static bool ghost_accused(void *arg)
{
    return count_events_id(0, arg, false) >= 1;
}

typedef struct {
    int m, t;
    bool reachable;
    size_t n;
} ev_wait_t;

static bool has_events(void *arg)
{
    ev_wait_t *w = arg;
    return count_events(w->m, w->t, w->reachable) >= w->n;
}

static bool wait_event(int m, int t, bool reachable, size_t n, int timeout_ms)
{
    ev_wait_t w = {m, t, reachable, n};
    return wait_until(has_events, &w, timeout_ms);
}

typedef struct {
    int i;
    size_t off; /* offsetof a counter in hb_stats_t */
    uint64_t at_least;
} stat_wait_t;

static bool stat_reached(void *arg)
{
    stat_wait_t *w = arg;
    hb_stats_t s = stats(w->i);
    uint64_t v;
    memcpy(&v, (const char *)&s + w->off, sizeof v);
    return v >= w->at_least;
}

#define WAIT_STAT(i_, field, n_, ms)                                                               \
    do {                                                                                           \
        stat_wait_t w_ = {(i_), offsetof(hb_stats_t, field), (n_)};                                \
        assert_true(wait_until(stat_reached, &w_, (ms)));                                          \
    } while (0)

static bool time_passed(void *arg)
{
    return shoal_now_ms() >= *(int64_t *)arg;
}

/* ------------------------------------------------------------------------------------------- */

static void steady_peer_stays_reachable(void **state)
{
    (void)state;
    watch(0, 1, 2);
    WAIT_STAT(0, pongs_received, 12, 5000);
    collect(0);
    assert_int_equal(F.nlog[0], 0);
    hb_stats_t a = stats(0), b = stats(1);
    assert_true(a.pings_sent >= 12);
    assert_true(b.pings_received >= 12);
    assert_int_equal(a.unreachable, 0);
    assert_int_equal(a.probes_sent, 0);
    assert_int_equal(b.stalls_refused, 0);
    assert_true(a.local_health >= 1.0 && a.local_health <= 4.0);
}

static void paused_peer_unreachable_then_back(void **state)
{
    (void)state;
    watch(0, 1, 2);
    WAIT_STAT(0, pongs_received, 5, 5000);
    int64_t t0 = shoal_now_ms();
    hb_actor_pause(F.hb[1], true);
    assert_true(wait_event(0, 1, false, 1, 5000));
    int64_t took = shoal_now_ms() - t0;
    /* never before the acceptable pause; about pause + a few deviations + the probe */
    assert_true(took >= 500);
    print_message("paused peer unreachable after %lld ms\n", (long long)took);
    assert_true(stats(0).probes_sent >= 1); /* C was asked first */
    assert_int_equal(count_events(0, 1, true), 0);
    hb_actor_pause(F.hb[1], false);
    assert_true(wait_event(0, 1, true, 1, 3000));
    assert_int_equal(count_events(0, 1, false), 1);
    hb_stats_t a = stats(0);
    assert_int_equal(a.unreachable, 1);
    assert_int_equal(a.reachable, 1);
}

static void destroyed_peer_unreachable(void **state)
{
    (void)state;
    watch(0, 1, -1);
    WAIT_STAT(0, pongs_received, 5, 5000);
    int64_t t0 = shoal_now_ms();
    kill_actor(1);
    assert_true(wait_event(0, 1, false, 1, 5000));
    print_message("destroyed peer unreachable after %lld ms\n", (long long)(shoal_now_ms() - t0));
    assert_int_equal(stats(0).probes_sent, 0); /* no helpers: nobody to ask */
}

static void wedged_node_loop_detected(void **state)
{
    (void)state;
    watch(0, 1, 2);
    WAIT_STAT(0, pongs_received, 5, 5000);
    /* B's actor runs, but its node loop stops ticking: past the stall bound it stops answering */
    int64_t t0 = shoal_now_ms();
    atomic_store(&F.ticking[1], false);
    assert_true(wait_event(0, 1, false, 1, 6000));
    int64_t took = shoal_now_ms() - t0;
    print_message("wedged node unreachable after %lld ms\n", (long long)took);
    assert_true(took >= 1000); /* it answered until the stall bound */
    assert_true(stats(1).stalls_refused > 0);
    atomic_store(&F.ticking[1], true);
    assert_true(wait_event(0, 1, true, 1, 3000));
}

static void fault_cut_then_heal(void **state)
{
    (void)state;
    watch(0, 1, -1);
    WAIT_STAT(0, pongs_received, 5, 5000);
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(F.sys[0], F.node_ep[1], &f), 0);
    assert_true(wait_event(0, 1, false, 1, 5000));
    assert_true(stats(0).faults_dropped > 0);
    assert_int_equal(shoal_system_heal(F.sys[0]), 0);
    assert_true(wait_event(0, 1, true, 1, 3000));

    /* the receiving side's fault reaches it too: B drops what comes from A */
    f.dir = SHOAL_FAULT_IN;
    assert_int_equal(shoal_system_fault(F.sys[1], F.node_ep[0], &f), 0);
    assert_true(wait_event(0, 1, false, 2, 5000));
    assert_true(stats(1).faults_dropped > 0);
    assert_int_equal(shoal_system_heal(F.sys[1]), 0);
    assert_true(wait_event(0, 1, true, 2, 3000));
}

static void indirect_probe_keeps_member(void **state)
{
    (void)state;
    /* C watches B too, like a second monitor of the ring */
    watch(0, 1, 2);
    watch(2, 1, -1);
    WAIT_STAT(0, pongs_received, 5, 5000);
    /* only the A-B link fails; C still reaches B */
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(F.sys[0], F.node_ep[1], &f), 0);
    WAIT_STAT(0, probes_saved, 2, 8000);
    assert_int_equal(count_events(0, 1, false), 0);
    assert_true(stats(2).probes_answered >= 2);
    assert_int_equal(stats(0).unreachable, 0);
    assert_int_equal(count_events(2, 1, false), 0);

    /* now A cannot reach C either: nobody vouches for B */
    assert_int_equal(shoal_system_fault(F.sys[0], F.node_ep[2], &f), 0);
    assert_true(wait_event(0, 1, false, 1, 6000));
    assert_int_equal(shoal_system_heal(F.sys[0]), 0);
    assert_true(wait_event(0, 1, true, 1, 3000));
}

static void indirect_probe_with_helper_down(void **state)
{
    (void)state;
    watch(0, 1, 2);
    WAIT_STAT(0, pongs_received, 5, 5000);
    kill_actor(2);
    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(F.sys[0], F.node_ep[1], &f), 0);
    assert_true(wait_event(0, 1, false, 1, 6000));
    hb_stats_t a = stats(0);
    assert_true(a.probes_sent >= 1);
    assert_int_equal(a.probes_saved, 0);
    /* the helper never answered: Lifeguard says the trouble may be ours */
    assert_true(a.local_health > 1.0);
}

static void never_answering_target(void **state)
{
    (void)state;
    /* an endpoint where nothing listens (port 1: not an ephemeral port another test process
       could bind meanwhile): the first heartbeat never comes; after expected-response-after the
       detector starts anyway and the target is accused */
    hb_peer_t ghost = {.node_id = "127.0.0.1:1:7", .node_endpoint = "tcp://127.0.0.1:1",
                       .hb_endpoint = "tcp://127.0.0.1:1"};
    assert_int_equal(hb_actor_set_peers(F.hb[0], &ghost, 1, NULL, 0), 0);
    int64_t t0 = shoal_now_ms();
    assert_true(wait_until(ghost_accused, (void *)ghost.node_id, 5000));
    int64_t took = shoal_now_ms() - t0;
    print_message("never-answering target unreachable after %lld ms\n", (long long)took);
    assert_true(took >= 500 + 500); /* expected-response-after, then the acceptable pause */
    assert_int_equal(stats(0).pongs_received, 0);
}

static void frozen_monitor_restarts_clocks(void **state)
{
    (void)state;
    watch(0, 1, -1);
    WAIT_STAT(0, pongs_received, 5, 5000);
    uint64_t pongs = stats(0).pongs_received;
    /* A itself freezes for longer than it takes to accuse a silent peer (~1.1 s) */
    hb_actor_pause(F.hb[0], true);
    atomic_store(&F.ticking[0], false);
    int64_t until = shoal_now_ms() + 1800;
    assert_true(wait_until(time_passed, &until, 5000));
    atomic_store(&F.ticking[0], true);
    hb_actor_pause(F.hb[0], false);
    WAIT_STAT(0, clock_gaps, 1, 3000);
    assert_true(stats(0).local_health > 1.0); /* widened its own bound */
    WAIT_STAT(0, pongs_received, pongs + 10, 5000);
    assert_int_equal(count_events(0, 1, false), 0);
}

static void peers_replaced_and_validated(void **state)
{
    (void)state;
    watch(0, 1, -1);
    WAIT_STAT(0, pongs_received, 3, 5000);
    /* bad endpoints are refused */
    hb_peer_t bad = {.node_id = "x:1:1", .node_endpoint = "tcp://127.0.0.1:1", .hb_endpoint = "udp://x"};
    assert_int_equal(hb_actor_set_peers(F.hb[0], &bad, 1, NULL, 0), SHOAL_EINVAL);
    bad.hb_endpoint = NULL;
    assert_int_equal(hb_actor_set_peers(F.hb[0], &bad, 1, NULL, 0), SHOAL_EINVAL);
    /* a target removed is forgotten: killing it then reports nothing */
    assert_int_equal(hb_actor_set_peers(F.hb[0], NULL, 0, NULL, 0), 0);
    uint64_t sent = stats(0).pings_sent;
    watch(0, 2, -1); /* now only C */
    WAIT_STAT(0, pongs_received, stats(0).pongs_received + 5, 5000);
    assert_true(stats(0).pings_sent >= sent + 5);
    kill_actor(1);
    WAIT_STAT(0, pongs_received, stats(0).pongs_received + 15, 5000);
    assert_int_equal(count_events(0, 1, false), 0);
    assert_int_equal(count_events(0, 2, false), 0);
}

static void wire_round_trip_and_rejects(void **state)
{
    (void)state;
    uint8_t buf[600];
    const char *ep = "tcp://127.0.0.1:2552", *ep2 = "tcp://10.0.0.1:41000";
    const char *id = "127.0.0.1:2552:77"; /* 17 bytes */
    hb_msg_t in[] = {
        {.type = HB_PING, .seq = 42, .a = ep, .a_len = strlen(ep)},
        {.type = HB_PONG, .seq = UINT64_MAX, .a = id, .a_len = strlen(id)},
        {.type = HB_PONG, .seq = 3},
        {.type = HB_PROBE_REQ, .seq = 7, .a = ep2, .a_len = strlen(ep2), .b = ep, .b_len = strlen(ep),
         .c = id, .c_len = strlen(id)},
        {.type = HB_PROBE_ACK, .seq = 7, .ok = 1},
        {.type = HB_PROBE_ACK, .seq = 8, .ok = 0},
    };
    const size_t lens[] = {11 + 20, 11 + 17, 11, 13 + 20 + 20 + 17, 11, 11};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        size_t n = hb_encode(&in[i], buf, sizeof buf);
        assert_int_equal(n, lens[i]);
        assert_int_equal(buf[0], 1);
        hb_msg_t out;
        assert_int_equal(hb_decode(buf, n, &out), 0);
        assert_int_equal(out.type, in[i].type);
        assert_true(out.seq == in[i].seq);
        assert_int_equal(out.ok, in[i].ok);
        assert_int_equal(out.a_len, in[i].a_len);
        assert_int_equal(out.b_len, in[i].b_len);
        if (in[i].a_len)
            assert_memory_equal(out.a, in[i].a, in[i].a_len);
        if (in[i].b_len)
            assert_memory_equal(out.b, in[i].b, in[i].b_len);
        assert_int_equal(out.c_len, in[i].c_len);
        if (in[i].c_len)
            assert_memory_equal(out.c, in[i].c, in[i].c_len);
        /* every truncation and one trailing byte are refused */
        for (size_t k = 0; k < n; k++)
            assert_int_equal(hb_decode(buf, k, &out), SHOAL_EDECODE);
        buf[n] = 0;
        assert_int_equal(hb_decode(buf, n + 1, &out), SHOAL_EDECODE);
        /* a buffer too small is refused */
        assert_int_equal(hb_encode(&in[i], buf, n - 1), 0);
    }
    /* little-endian seq */
    hb_msg_t pong = {.type = HB_PONG, .seq = 0x0102030405060708ULL};
    assert_int_equal(hb_encode(&pong, buf, sizeof buf), 11);
    assert_int_equal(buf[1], HB_PONG);
    assert_int_equal(buf[2], 0x08);
    assert_int_equal(buf[9], 0x01);
    /* wrong version, unknown type, ack with ok 2 */
    hb_msg_t out;
    buf[0] = 2;
    assert_int_equal(hb_decode(buf, 11, &out), SHOAL_EDECODE);
    buf[0] = 1;
    buf[1] = 9;
    assert_int_equal(hb_decode(buf, 11, &out), SHOAL_EDECODE);
    hb_msg_t ack = {.type = HB_PROBE_ACK, .seq = 1, .ok = 1};
    size_t n = hb_encode(&ack, buf, sizeof buf);
    buf[n - 1] = 2;
    assert_int_equal(hb_decode(buf, n, &out), SHOAL_EDECODE);
    /* a length byte pointing past the end */
    hb_msg_t ping = {.type = HB_PING, .seq = 1, .a = ep, .a_len = strlen(ep)};
    n = hb_encode(&ping, buf, sizeof buf);
    buf[10] = 200;
    assert_int_equal(hb_decode(buf, n, &out), SHOAL_EDECODE);
    /* strings over 255 bytes cannot be encoded */
    char big[300];
    memset(big, 'x', sizeof big);
    ping.a = big;
    ping.a_len = 256;
    assert_int_equal(hb_encode(&ping, buf, sizeof buf), 0);
    assert_int_equal(hb_decode(NULL, 0, &out), SHOAL_EDECODE);
}

/* A stranger at the heartbeat port: a ZMTP greeting, then a frame header announcing 2^31 bytes
   and a stream of it. Without a size limit libzmq allocated the whole frame and filled it as
   bytes came (538 MB for one connection); now it refuses the frame at its header: the connection
   is closed, the process does not grow, and the actor keeps answering its monitors. */
static void huge_frame_is_refused(void **state)
{
    (void)state;
    watch(0, 1, 2);
    WAIT_STAT(0, pongs_received, 3, 5000);
    for (int round = 0; round < 2; round++) {
        thostile_t h;
        thostile_huge_frame(F.hb_ep[1], 32u << 20, 5000 * tscale(), &h);
        print_message("huge frame to the heartbeat port: %zu bytes taken, closed %d, RSS +%ld "
                      "bytes\n",
                      h.sent, h.closed, h.rss_growth);
        assert_true(h.connected);
        assert_true(h.closed);
        assert_true(h.rss_growth < (8l << 20));
    }
    WAIT_STAT(1, listener.closed, 2, 5000);
    assert_true(stats(1).listener.accepted >= 2);
    uint64_t pongs = stats(0).pongs_received;
    WAIT_STAT(0, pongs_received, pongs + 3, 5000);
    assert_int_equal(count_events(0, 1, false), 0);
}

static bool refused_six(void *arg)
{
    hb_stats_t st;
    hb_actor_stats(arg, &st);
    return st.listener.refused >= 6;
}

static bool all_gone(void *arg)
{
    hb_stats_t st;
    hb_actor_stats(arg, &st);
    return st.listener.handshakes_incomplete >= 64 && st.listener.open == 0;
}

/* The heartbeat socket's guard is the node's (listener.c): connections that have sent nothing
   get a cap of their own, max(64, max_inbound_connections / 4), the oldest closed first and
   counted (refused, evicted), and they never take the slots max_inbound_connections keeps for
   peers that talk; a connection that sends nothing and leaves is counted as an incomplete
   handshake, not taken for a CURVE client. */
static void heartbeat_connections_capped(void **state)
{
    (void)state;
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    ss.max_inbound_connections = 2;
    int err = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    assert_non_null(sys);
    hb_settings_t hs;
    settings(&hs, sys);
    hb_actor_t *hb = hb_actor_new(&hs, &err);
    assert_non_null(hb);
    const char *ep = hb_actor_endpoint(hb);
    int fds[70];
    for (int i = 0; i < 70; i++) {
        fds[i] = thostile_open(ep, "NULL");
        assert_true(fds[i] >= 0);
    }
    assert_true(wait_until(refused_six, hb, 5000));
    hb_stats_t st;
    hb_actor_stats(hb, &st);
    assert_int_equal(st.listener.refused, 6);
    assert_int_equal(st.listener.evicted, 6);
    for (int i = 0; i < 6; i++)
        assert_true(thostile_wait_closed(fds[i], 5000 * tscale()));
    for (int i = 6; i < 70; i++)
        assert_false(thostile_wait_closed(fds[i], 0));
    for (int i = 0; i < 70; i++)
        close(fds[i]);
    /* the 64 it kept leave before their handshake: incomplete, and nothing else */
    assert_true(wait_until(all_gone, hb, 5000));
    hb_actor_stats(hb, &st);
    assert_true(st.listener.handshakes_incomplete >= 64);
    assert_int_equal(st.listener.handshakes_mismatched, 0);
    assert_int_equal(st.listener.open, 0);
    hb_actor_destroy(&hb);
    shoal_system_destroy(&sys);
}

/* A heartbeat endpoint travels in the member record: one peers cannot dial is refused. */
static void heartbeat_endpoint_checked(void **state)
{
    (void)state;
    static const char *bad[] = {"tcp://*:*", "tcp://0.0.0.0:*", "tcp://127.0.0.1:99999",
                                "tcp://127.0.0.1:-1", "ipc:///tmp/shoal-hb"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hb_settings_t hs;
        settings(&hs, NULL);
        hs.bind_endpoint = bad[i];
        int err = 0;
        hb_actor_t *hb = hb_actor_new(&hs, &err);
        assert_null(hb);
        assert_int_equal(err, SHOAL_EINVAL);
    }
}

int main(void)
{
    zsys_handler_set(NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wire_round_trip_and_rejects),
        cmocka_unit_test_setup_teardown(steady_peer_stays_reachable, setup, teardown),
        cmocka_unit_test_setup_teardown(paused_peer_unreachable_then_back, setup, teardown),
        cmocka_unit_test_setup_teardown(destroyed_peer_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(wedged_node_loop_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(fault_cut_then_heal, setup, teardown),
        cmocka_unit_test_setup_teardown(indirect_probe_keeps_member, setup, teardown),
        cmocka_unit_test_setup_teardown(indirect_probe_with_helper_down, setup, teardown),
        cmocka_unit_test_setup_teardown(never_answering_target, setup, teardown),
        cmocka_unit_test_setup_teardown(frozen_monitor_restarts_clocks, setup, teardown),
        cmocka_unit_test_setup_teardown(peers_replaced_and_validated, setup, teardown),
        cmocka_unit_test_setup_teardown(huge_frame_is_refused, setup, teardown),
        cmocka_unit_test(heartbeat_connections_capped),
        cmocka_unit_test(heartbeat_endpoint_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
