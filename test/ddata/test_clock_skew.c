/*  test_clock_skew.c — shoal_node_clock_skew_seconds: the wall-clock offset between members,
    estimated from the send times replicator pushes carry (issue 38, ShoalClockSkew).

    unskewed_cluster_reads_near_zero: real pushes (shoal_replicator_push) between two nodes of
      one host: the gauge reads under 0.1 s, and 0 before any push.
    sender_behind_reads_its_skew: pushes forged with a stamp 60 s old (a sender whose clock is a
      minute behind): the gauge reads 60 s ± 1 s; once the sender is silent for two windows it
      reads 0 again (only peers heard from lately count).
    sender_ahead_then_fixed_follows_the_window: a sender a minute ahead, then on time: the
      estimate is a minimum over windows, so it holds the old offset for the window it was seen
      in (a window of 60 s: still 60 after an on-time push), and falls to near 0 once the window
      moves on (window shortened to 300 ms: within seconds). A running minimum (push_lag_min)
      would read 60 s for ever.
    quiet_cluster_keeps_measuring: no push but the replicator's own probes (a small key to the
      gossip round's peer when none was pushed to it for half a window): node 0 keeps an
      estimate of node 1 through 7 windows of 400 ms. Without the probes it lapses after two
      windows: a steady cluster (membership pushes only on a change) would read 0.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "ddata.h"

#include "replicator_internal.h" /* skew_window_ms */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SKEW "shoal_node_clock_skew_seconds"

/* a forged push stamped `offset_ms` off node 1's clock, and node 0 has received it */
static int get_stats(shoal_replicator_t *r, void *arg)
{
    return shoal_replicator_stats(r, arg);
}

static uint64_t received(tcluster_t *c)
{
    shoal_replicator_stats_t st;
    assert_int_equal(on_node(c, 0, get_stats, &st), 0);
    return st.full_state_received;
}

typedef struct {
    tcluster_t *c;
    uint64_t want;
} recv_wait_t;

static bool received_reaches(void *arg)
{
    recv_wait_t *w = arg;
    return received(w->c) >= w->want;
}

static void push_skewed(tcluster_t *c, int64_t offset_ms)
{
    recv_wait_t w = {c, received(c) + 1};
    assert_int_equal(tcluster_forge_push(c, 1, "skew", tcluster_unix_ms() - offset_ms, false), 0);
    assert_true(wait_until(received_reaches, &w, 5000));
}

typedef struct {
    shoal_buf_t text;
} collect_t;

static int collect(shoal_system_t *sys, void *arg)
{
    return shoal_metrics_collect(sys, &((collect_t *)arg)->text);
}

/* the gauge on node i's /metrics text (the same text GET /metrics serves); NAN when absent */
static double skew_of(tcluster_t *c, int i)
{
    collect_t k = {{0}};
    assert_int_equal(shoal_system_call(c->sys[i], collect, &k), 0);
    const char *t = shoal_buf_cstr(&k.text);
    double v = NAN;
    const char *p = strstr(t, "\n" SKEW " ");
    if (p)
        v = strtod(p + strlen("\n" SKEW " "), NULL);
    assert_non_null(strstr(t, "# TYPE " SKEW " gauge\n"));
    shoal_buf_free(&k.text);
    return v;
}

typedef struct {
    tcluster_t *c;
    double lo, hi;
    double last;
} skew_wait_t;

static bool skew_within(void *arg)
{
    skew_wait_t *w = arg;
    w->last = skew_of(w->c, 0);
    return w->last >= w->lo && w->last <= w->hi;
}

static int set_window(shoal_system_t *sys, void *arg)
{
    shoal_replicator_t *r = repl_find(sys, "");
    if (!r)
        return SHOAL_ENOTFOUND;
    r->skew_window_ms = *(int64_t *)arg;
    return 0;
}

static void window(tcluster_t *c, int64_t ms)
{
    assert_int_equal(shoal_system_call(c->sys[0], set_window, &ms), 0);
}

static void start(tcluster_t *c)
{
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    s.gossip_ttl_ms = 0;           /* no push dropped as stale: each one arrives and counts */
    s.gossip_interval_ms = 600000; /* only the test's pushes carry stamps */
    tcluster_start(c, 2, &s);
}

static int push_real(shoal_replicator_t *r, void *arg)
{
    tcluster_t *c = arg;
    return shoal_replicator_push(r, "real", shoal_system_self(c->sys[0]));
}

static void unskewed_cluster_reads_near_zero(void **state)
{
    (void)state;
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    start(&c);
    assert_true(skew_of(&c, 0) < 0.1); /* no push yet (0), or a startup exchange */
    shoal_consistency_t l = c_local();
    assert_int_equal(t_incr(&c, 1, "real", 3, &l), 0);
    for (int i = 0; i < 5; i++) {
        recv_wait_t w = {&c, received(&c) + 1};
        assert_int_equal(on_node(&c, 1, push_real, &c), 0);
        assert_true(wait_until(received_reaches, &w, 5000));
    }
    double v = skew_of(&c, 0);
    print_message("unskewed: %s %.3f\n", SKEW, v);
    assert_true(v >= 0 && v < 0.1);
    tcluster_stop(&c);
}

static void sender_behind_reads_its_skew(void **state)
{
    (void)state;
    static tcluster_t c;
    start(&c);
    window(&c, 300);
    push_skewed(&c, 60000);
    skew_wait_t w = {&c, 59.0, 61.0, 0};
    assert_true(wait_until(skew_within, &w, 2000));
    print_message("a minute behind: %s %.3f\n", SKEW, w.last);
    /* silent for two windows: no peer heard from lately, 0 */
    skew_wait_t zero = {&c, 0.0, 0.0, 0};
    if (!wait_until(skew_within, &zero, 5000))
        fail_msg("still %.3f s after the sender went silent", zero.last);
    tcluster_stop(&c);
}

static void sender_ahead_then_fixed_follows_the_window(void **state)
{
    (void)state;
    static tcluster_t c;
    start(&c);
    window(&c, 60000); /* long: nothing rolls before the next reading */
    push_skewed(&c, -60000);
    skew_wait_t w = {&c, 59.0, 61.0, 0};
    assert_true(wait_until(skew_within, &w, 2000));
    /* the clock is put right: the window's minimum still holds the minute ahead */
    push_skewed(&c, 0);
    double held = skew_of(&c, 0);
    print_message("a minute ahead, then on time (same window): %s %.3f\n", SKEW, held);
    assert_true(held >= 59.0 && held <= 61.0);
    /* the window moves on (300 ms from now on) while the sender keeps pushing on time */
    window(&c, 300);
    skew_wait_t near0 = {&c, 0.0, 0.1, 0};
    bool fell = false;
    for (int i = 0; i < 40 && !fell; i++) {
        push_skewed(&c, 0);
        fell = wait_until(skew_within, &near0, 100);
    }
    if (!fell)
        fail_msg("still %.3f s after the sender's clock was put right", near0.last);
    print_message("after the window moved on: %s %.3f\n", SKEW, near0.last);
    tcluster_stop(&c);
}

typedef struct {
    tcluster_t *c;
    int64_t window_ms;
} quiet_t;

static int set_window_all(shoal_system_t *sys, void *arg)
{
    return set_window(sys, &((quiet_t *)arg)->window_ms);
}

/* node 0 has an estimate of node 1's offset (heard from it in the current or last window) */
static int heard(shoal_system_t *sys, void *arg)
{
    tcluster_t *c = arg;
    shoal_replicator_t *r = repl_find(sys, "");
    peer_t *p = r ? repl_peer(r, shoal_system_self(c->sys[1])) : NULL;
    int64_t off;
    return p && repl_peer_clock_offset(r, p, shoal_now_ms(), &off) ? 1 : 0;
}

static bool node0_heard(void *arg)
{
    return shoal_system_call(((tcluster_t *)arg)->sys[0], heard, arg) == 1;
}

static void quiet_cluster_keeps_measuring(void **state)
{
    (void)state;
    static tcluster_t c;
    shoal_replicator_settings_t s;
    tcluster_fast_settings(&s);
    s.gossip_ttl_ms = 0;
    s.gossip_interval_ms = 100;
    tcluster_start(&c, 2, &s);
    quiet_t q = {&c, 400};
    for (int i = 0; i < 2; i++)
        assert_int_equal(shoal_system_call(c.sys[i], set_window_all, &q), 0);
    /* a small key, spread by deltas and anti-entropy (neither carries a clock), then quiet */
    shoal_consistency_t l = c_local();
    assert_int_equal(t_incr(&c, 1, "small", 1, &l), 0);
    assert_true(wait_until(node0_heard, &c, 5000)); /* the first probe */
    /* 3 s = 7 windows with no push by anyone but the probes: heard from in every one */
    int64_t end = shoal_now_ms() + 3000;
    int checks = 0;
    while (shoal_now_ms() < end) {
        if (!node0_heard(&c))
            fail_msg("node 1 not heard from after %d checks: the estimate lapsed", checks);
        checks++;
        struct timespec ts = {0, 50 * 1000000}; /* a sampling period, not a wait for a condition */
        nanosleep(&ts, NULL);
    }
    print_message("quiet: heard from node 1 at each of %d checks over 3 s\n", checks);
    tcluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(unskewed_cluster_reads_near_zero, tcluster_teardown),
        cmocka_unit_test_teardown(sender_behind_reads_its_skew, tcluster_teardown),
        cmocka_unit_test_teardown(sender_ahead_then_fixed_follows_the_window, tcluster_teardown),
        cmocka_unit_test_teardown(quiet_cluster_keeps_measuring, tcluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
