/*  test_sharding.c — cluster sharding end to end, with real member nodes over loopback in this
    process (each a system, membership and sharding): routing through the coordinator (seeds'
    scenarios 1 and 2), asks, rebalancing to a node that joins and a graceful leave with
    messages flowing (nothing lost, per-sender order), proxies, bounded buffers, min-nr-of-members,
    the entity API (StartEntity, replies, passivation, handoff with a stop message), 10,000 shards
    under the frame limit, coordinator failover and the queries.

    Every entity records what it receives in one table (test/common/shards.h), which also checks
    at every start that no entity and no shard is alive twice. Deadlines are scaled by tscale().
    The process-level kills (SIGKILL of a node) are in test/cluster/.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "cluster.h"
#include "members.h"
#include "shards.h"

#define T TSHARD_TYPE

/* --- helpers ---------------------------------------------------------------------------------- */

/* Starts nodes 0..n-1 with the same options: node 0 first, alone and Up, so that it is the
   oldest member (the coordinator's host), then the others through it. */
static void start_nodes(int n, const tsnode_opts_t *o)
{
    tsnode_opts_t oi = o ? *o : (tsnode_opts_t){0};
    oi.seed = 0;
    tsnode_start(0, &oi);
    tsnode_wait_up(1u, 15000);
    for (int i = 1; i < n; i++)
        tsnode_start(i, &oi);
    tsnode_wait_up((1u << n) - 1, 20000);
}

static shoal_region_stats_t stats_of(int i)
{
    shoal_region_stats_t st;
    assert_int_equal(shoal_region_stats(tsn[i].r, &st), 0);
    return st;
}

static int tell(int i, const char *id, const char *msg)
{
    return shoal_region_tell(tsn[i].r, id, msg, strlen(msg));
}

typedef struct {
    const char *type;
    char (*ids)[32];
    size_t n;
    const char *sender;
    long seq;
} last_arg_t;

/* every entity ids[0..n) got seq from sender, as its last message from that sender */
static bool all_last(void *arg)
{
    last_arg_t *a = arg;
    for (size_t k = 0; k < a->n; k++)
        if (trec_last(a->type, a->ids[k], a->sender) != a->seq)
            return false;
    return true;
}

static void wait_last(const char *type, char (*ids)[32], size_t n, const char *sender, long seq,
                      int timeout_ms)
{
    last_arg_t a = {type, ids, n, sender, seq};
    if (!wait_until(all_last, &a, timeout_ms)) {
        for (size_t k = 0; k < n; k++)
            fprintf(stderr, "%s/%s: last %s:%ld (want %ld), node %d\n", type, ids[k], sender,
                    trec_last(type, ids[k], sender), seq, trec_get(type, ids[k]).node);
        fail_msg("messages from %s did not all arrive", sender);
    }
}

static void wait_one(const char *type, const char *id, const char *sender, long seq, int timeout_ms)
{
    char ids[1][32];
    snprintf(ids[0], 32, "%s", id);
    wait_last(type, ids, 1, sender, seq, timeout_ms);
}

static void assert_no_breach(void)
{
    ttotals_t t = trec_totals();
    assert_int_equal(t.double_entity, 0);
    assert_int_equal(t.double_shard, 0);
    assert_int_equal(t.order_errors, 0);
}

/* The node hosting `shard` according to the regions' own states (-1: none, -2: several). */
static int host_of_shard(int n, const char *shard)
{
    int host = -1;
    for (int i = 0; i < n; i++) {
        shoal_region_state_t st;
        if (!tsn[i].r || shoal_region_state(tsn[i].r, false, &st) != 0)
            continue;
        for (size_t k = 0; k < st.n_shards; k++)
            if (strcmp(st.shards[k].id, shard) == 0)
                host = host == -1 ? i : -2;
        shoal_region_state_free(&st);
    }
    return host;
}

static char *ask_sync(int i, const char *id, const char *msg)
{
    shoal_buf_t b = {0};
    int rc = shoal_region_ask_sync(tsn[i].r, id, msg, strlen(msg), 5000u * (uint32_t)tscale(), &b);
    if (rc != 0)
        fail_msg("ask %s of %s from node %d: %s", msg, id, i, shoal_strerror(rc));
    char *s = strdup(shoal_buf_cstr(&b));
    shoal_buf_free(&b);
    return s;
}

/* True when the "get" reply names `sender` with last seq `seq` ("n s1:l1 s2:l2 ..."). */
static bool reply_has(const char *reply, const char *sender, long seq)
{
    char want[64];
    snprintf(want, sizeof want, " %s:%ld", sender, seq);
    const char *p = strstr(reply, want);
    return p && (p[strlen(want)] == ' ' || p[strlen(want)] == 0);
}

/* --- 1: the seeds' scenarios 1 and 2 ---------------------------------------------------------- */

/* Scenario 1: the first message to a shard asks the coordinator; the home is local, the entity
   is created. Scenario 2: the home is the other region; the buffered messages are forwarded and
   later ones go straight there, without the coordinator. Checked through the queries: which
   region hosts which shard, the coordinator asked once per shard. */
static void test_routing_scenarios(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 100;
    /* a GetShardHome is retried after retry-interval: Akka's 2 s (stretched), far above the
       coordinator's answer time, so that "asked once per shard" is exact */
    s.retry_interval_ms = 2000u * (uint32_t)tscale();
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(2, &o);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    assert_int_equal(tsnode_oldest(1), 0);
    tdl_watch(0);
    tdl_watch(1);

    shoal_region_stats_t a0 = stats_of(0), b0 = stats_of(1);
    char ids[10][32];
    tshard_pick_ids("e", 100, 10, ids);
    for (int k = 0; k < 10; k++) {
        /* three messages per shard, all sent before any home is known */
        assert_int_equal(tell(0, ids[k], "a:1"), 0);
        assert_int_equal(tell(0, ids[k], "a:2"), 0);
        assert_int_equal(tell(0, ids[k], "a:3"), 0);
    }
    wait_last(T, ids, 10, "a", 3, 10000);
    shoal_region_stats_t a1 = stats_of(0), b1 = stats_of(1);
    assert_int_equal(a1.home_requests - a0.home_requests, 10);
    assert_int_equal(b1.home_requests - b0.home_requests, 0);
    assert_int_equal(a1.allocations + b1.allocations - a0.allocations - b0.allocations, 10);

    /* the regions' states: every shard on exactly one region, the one its entity runs on */
    int on[2] = {0, 0};
    int b_idx = -1, a_idx = -1;
    for (int k = 0; k < 10; k++) {
        char shard[SHOAL_SHARD_ID_MAX + 1];
        shoal_region_shard_of(tsn[0].r, ids[k], shard);
        int host = host_of_shard(2, shard);
        assert_true(host >= 0);
        trec_t r = trec_get(T, ids[k]);
        assert_int_equal(r.node, host);
        assert_int_equal(r.starts, 1);
        assert_int_equal(r.messages, 3);
        on[host]++;
        if (host == 1 && b_idx < 0)
            b_idx = k;
        if (host == 0 && a_idx < 0)
            a_idx = k;
        /* and the entity is listed in its shard */
        shoal_region_state_t st;
        assert_int_equal(shoal_region_state(tsn[host].r, true, &st), 0);
        bool listed = false;
        for (size_t j = 0; j < st.n_shards; j++)
            if (strcmp(st.shards[j].id, shard) == 0) {
                assert_int_equal(st.shards[j].n_entities, 1);
                assert_non_null(st.shards[j].entities);
                listed = strcmp(st.shards[j].entities[0], ids[k]) == 0;
            }
        shoal_region_state_free(&st);
        assert_true(listed);
    }
    /* least-shards: spread evenly over the two regions */
    assert_int_equal(on[0] + on[1], 10);
    assert_true(abs(on[0] - on[1]) <= 1);
    assert_int_equal(tsnode_shard_count(0), on[0]);
    assert_int_equal(tsnode_shard_count(1), on[1]);
    assert_int_equal(a1.shards, (uint64_t)on[0]);
    assert_int_equal(b1.shards, (uint64_t)on[1]);
    /* the messages for B's shards were buffered on A, then forwarded */
    assert_true(a1.forwarded - a0.forwarded >= (uint64_t)(3 * on[1]));
    assert_true(b1.received_remote - b0.received_remote >= (uint64_t)(3 * on[1]));

    /* scenario 2, later messages: straight to B, the coordinator not asked */
    assert_true(b_idx >= 0 && a_idx >= 0);
    for (int q = 4; q <= 8; q++) {
        char m[16];
        snprintf(m, sizeof m, "a:%d", q);
        assert_int_equal(tell(0, ids[b_idx], m), 0);
    }
    wait_one(T, ids[b_idx], "a", 8, 5000);
    shoal_region_stats_t a2 = stats_of(0), b2 = stats_of(1);
    assert_int_equal(a2.home_requests, a1.home_requests);
    assert_int_equal(a2.forwarded - a1.forwarded, 5);
    assert_int_equal(b2.received_remote - b1.received_remote, 5);
    /* scenario 1, later messages: delivered locally */
    assert_int_equal(tell(0, ids[a_idx], "a:4"), 0);
    wait_one(T, ids[a_idx], "a", 4, 5000);
    shoal_region_stats_t a3 = stats_of(0);
    assert_int_equal(a3.home_requests, a1.home_requests);
    assert_true(a3.delivered_local > a2.delivered_local);
    assert_int_equal(a3.forwarded, a2.forwarded);

    /* B sends to every shard: it asks at most for the ones it does not host */
    for (int k = 0; k < 10; k++)
        assert_int_equal(tell(1, ids[k], "b:1"), 0);
    wait_last(T, ids, 10, "b", 1, 10000);
    shoal_region_stats_t b3 = stats_of(1);
    assert_true(b3.home_requests - b2.home_requests <= (uint64_t)on[0]);
    assert_int_equal(stats_of(0).allocations + b3.allocations, 10);
    assert_int_equal(tdl_total(), 0);
    assert_no_breach();
}

/* --- 2: asks ---------------------------------------------------------------------------------- */
#define N_ASKS 1000

typedef struct {
    shoal_region_t *r;
    char (*ids)[32];
    task_t *tasks;
    int n;
    int sync_rc;
} node_asks_t;

/* on the node thread: asks go out without blocking; a blocking ask is refused */
static int asks_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    node_asks_t *a = arg;
    for (int k = 0; k < a->n; k++)
        if (task_ask(a->r, a->ids[k % 10], "get", 10000u * (uint32_t)tscale(), &a->tasks[k]) != 0)
            return -1;
    shoal_buf_t b = {0};
    a->sync_rc = shoal_region_ask_sync(a->r, a->ids[0], "get", 3, 1000, &b);
    shoal_buf_free(&b);
    return 0;
}

typedef struct {
    task_t *tasks;
    int n;
} tasks_arg_t;

static bool tasks_done(void *arg)
{
    tasks_arg_t *a = arg;
    for (int k = 0; k < a->n; k++)
        if (task_get(&a->tasks[k]).calls == 0)
            return false;
    return true;
}

static bool task_called(void *arg)
{
    return task_get(arg).calls > 0;
}

static bool release_tried(void *arg)
{
    return trec_get(T, arg).release_rc != 1;
}

static void test_asks(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 100;
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(2, &o);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    char ids[10][32];
    tshard_pick_ids("q", 100, 10, ids);

    /* a blocking ask from this thread: the first message creates the entity */
    char *who = ask_sync(0, ids[0], "whoami");
    int node = -1, inc = -1;
    assert_int_equal(sscanf(who, "%d %d", &node, &inc), 2);
    free(who);
    assert_int_equal(node, trec_get(T, ids[0]).node);
    assert_int_equal(inc, 1);
    /* a tell and then an ask from one thread keep their order */
    assert_int_equal(tell(0, ids[0], "a:1"), 0);
    char *got = ask_sync(0, ids[0], "get");
    assert_string_equal(got, "1 a:1");
    free(got);

    /* many asks in flight, from both nodes, all answered exactly once */
    task_t *tasks = calloc(N_ASKS, sizeof *tasks);
    for (int k = 0; k < N_ASKS; k++)
        assert_int_equal(
            task_ask(tsn[k % 2].r, ids[k % 10], "get", 10000u * (uint32_t)tscale(), &tasks[k]), 0);
    tasks_arg_t ta = {tasks, N_ASKS};
    assert_true(wait_until(tasks_done, &ta, 20000));
    for (int k = 0; k < N_ASKS; k++) {
        task_t t = task_get(&tasks[k]);
        assert_int_equal(t.calls, 1);
        assert_int_equal(t.status, SHOAL_OK);
        assert_string_equal(t.reply, k % 10 == 0 ? "1 a:1" : "0");
    }
    /* from the node thread: asks without blocking; ask_sync refused there */
    task_t *mine = calloc(100, sizeof *mine);
    node_asks_t na = {tsn[1].r, ids, mine, 100, 0};
    assert_int_equal(shoal_system_call(tsn[1].sys, asks_on_node, &na), 0);
    assert_int_equal(na.sync_rc, SHOAL_EDEADLK);
    tasks_arg_t tm = {mine, 100};
    assert_true(wait_until(tasks_done, &tm, 20000));
    for (int k = 0; k < 100; k++) {
        task_t t = task_get(&mine[k]);
        assert_int_equal(t.calls, 1);
        assert_int_equal(t.status, SHOAL_OK);
    }

    /* an entity that does not answer: the ask times out, once; a late answer changes nothing */
    uint64_t timed_out0 = stats_of(0).asks_timed_out;
    static task_t slow; /* static: a late completion must not land in a dead frame */
    int64_t t0 = shoal_now_ms();
    assert_int_equal(task_ask(tsn[0].r, ids[1], "hold", 100, &slow), 0);
    assert_true(wait_until(task_called, &slow, 5000));
    assert_int_equal(task_get(&slow).status, SHOAL_ETIMEOUT);
    assert_true(shoal_now_ms() - t0 >= 100);
    assert_int_equal(tell(0, ids[1], "release"), 0);
    assert_true(wait_until(release_tried, ids[1], 5000));
    got = ask_sync(0, ids[1], "get"); /* after the late reply on the same path */
    free(got);
    assert_int_equal(task_get(&slow).calls, 1);
    assert_int_equal(stats_of(0).asks_timed_out - timed_out0, 1);

    /* bad ids are refused at once, done not called */
    static task_t bad;
    assert_int_equal(task_ask(tsn[0].r, "", "get", 1000, &bad), SHOAL_EINVAL);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_region_ask_sync(tsn[0].r, "", "get", 3, 1000, &b), SHOAL_EINVAL);
    shoal_buf_free(&b);
    assert_int_equal(task_get(&bad).calls, 0);
    free(tasks);
    free(mine);
    assert_no_breach();
}

/* --- 3: rebalance to a node that joins, with messages flowing --------------------------------- */

typedef struct {
    int n;      /* nodes 0..n-1 */
    int total;  /* shards */
    int target; /* node that must reach its share */
} balance_arg_t;

static bool balanced(void *arg)
{
    balance_arg_t *a = arg;
    int lo = a->total, hi = 0, sum = 0;
    for (int i = 0; i < a->n; i++) {
        int c = tsnode_shard_count(i);
        if (c < 0)
            return false;
        lo = c < lo ? c : lo;
        hi = c > hi ? c : hi;
        sum += c;
    }
    return sum == a->total && hi - lo <= 1 && tsnode_shard_count(a->target) >= a->total / a->n;
}

/* Checks through asks that every entity got every seq of every sender, and only those. */
static void check_by_asks(int asker, tsender_t *const *senders, size_t n_senders, char (*ids)[32],
                          size_t n_ids, long extra)
{
    for (size_t k = 0; k < n_ids; k++) {
        char *reply = ask_sync(asker, ids[k], "get");
        long total = extra;
        for (size_t j = 0; j < n_senders; j++) {
            total += senders[j]->sent[k];
            if (!reply_has(reply, senders[j]->name, senders[j]->sent[k]))
                fail_msg("%s: %s (sender %s sent %ld)", ids[k], reply, senders[j]->name,
                         senders[j]->sent[k]);
        }
        assert_int_equal(strtol(reply, NULL, 10), total);
        free(reply);
    }
}

static void test_rebalance_on_join(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 20;
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(2, &o);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    for (int i = 0; i < 2; i++) {
        tdl_watch(i);
        tmoves_watch(i);
    }
    char ids[20][32];
    tshard_pick_ids("r", 20, 20, ids);
    for (int k = 0; k < 20; k++)
        assert_int_equal(tell(0, ids[k], "init:1"), 0);
    wait_last(T, ids, 20, "init", 1, 10000);
    assert_int_equal(tsnode_shard_count(0), 10);
    assert_int_equal(tsnode_shard_count(1), 10);

    tsender_t *a = tsender_start(tsn[0].r, "a", ids, 20, 2000);
    tsender_t *b = tsender_start(tsn[1].r, "b", ids, 20, 2000);
    assert_true(tsender_wait_rounds(a, 20, 10000));
    tsnode_start(2, &o);
    tdl_watch(2);
    tmoves_watch(2);
    tsnode_wait_up(0x7, 20000);
    balance_arg_t ba = {3, 20, 2};
    int64_t t0 = shoal_now_ms();
    assert_true(wait_until(balanced, &ba, 30000));
    printf("rebalanced 20 shards over 3 nodes in %lld ms\n", (long long)(shoal_now_ms() - t0));
    assert_true(tsender_wait_rounds(a, 50, 10000));
    assert_true(tsender_wait_rounds(b, 50, 10000));
    tsender_stop(a);
    tsender_stop(b);
    printf("sent %ld rounds from a, %ld from b (refused %ld/%ld)\n", a->rounds, b->rounds,
           a->refused, b->refused);
    assert_int_equal(a->errors, 0);
    assert_int_equal(b->errors, 0);
    assert_true(tsender_all_received(a, T, 15000));
    assert_true(tsender_all_received(b, T, 15000));
    assert_no_breach();
    assert_int_equal(tdl_total(), 0);
    /* the shards that moved: the coordinator's events, and their entities restarted there after
       taking the stop message on the old node */
    assert_true(tmoves_to(2) >= 6);
    int moved = 0;
    for (int k = 0; k < 20; k++) {
        trec_t r = trec_get(T, ids[k]);
        if (r.node == 2) {
            moved++;
            assert_int_equal(r.starts, 2);
            assert_int_equal(r.stops, 1);
            assert_int_equal(r.stop_msgs, 1);
        }
    }
    assert_true(moved >= 6);
    tsender_t *senders[2] = {a, b};
    check_by_asks(2, senders, 2, ids, 20, 1);
    tsender_free(&a);
    tsender_free(&b);
}

/* --- 4: graceful leave ------------------------------------------------------------------------ */

static bool is_terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

static void test_graceful_leave_hands_off(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 30;
    s.stop_message = NULL; /* entities stopped directly (the other path of a handoff) */
    s.stop_message_len = 0;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.phase_timeout_ms = 10000u * (uint32_t)tscale(); /* the handoff must not be cut short */
    tsnode_opts_t o = {.sharding = &s, .cluster = &cs};
    start_nodes(3, &o);
    tsnode_wait_registered(0x7, 0, 3, 15000);
    for (int i = 0; i < 3; i++)
        tdl_watch(i);
    char ids[30][32];
    tshard_pick_ids("g", 30, 30, ids);
    for (int k = 0; k < 30; k++)
        assert_int_equal(tell(0, ids[k], "init:1"), 0);
    wait_last(T, ids, 30, "init", 1, 10000);
    int leaving_shards = tsnode_shard_count(2);
    assert_true(leaving_shards >= 9);
    assert_true(trec_live_on(T, 2) == leaving_shards);

    tsender_t *a = tsender_start(tsn[0].r, "a", ids, 30, 2000);
    tsender_t *b = tsender_start(tsn[1].r, "b", ids, 30, 2000);
    assert_true(tsender_wait_rounds(a, 20, 10000));
    int64_t t0 = shoal_now_ms();
    assert_int_equal(shoal_cluster_leave(tsn[2].cl, NULL), 0);
    assert_true(wait_until(is_terminated, tsn[2].cl, 40000));
    int64_t took = shoal_now_ms() - t0;
    printf("graceful leave with %d shards took %lld ms\n", leaving_shards, (long long)took);
    /* every shard was handed off before the node's cluster part finished */
    assert_int_equal(trec_live_on(T, 2), 0);
    int left = tsnode_shard_count(2);
    assert_true(left <= 0); /* none, or the region is gone */
    assert_true(tsender_wait_rounds(a, 30, 10000));
    assert_true(tsender_wait_rounds(b, 30, 10000));
    tsender_stop(a);
    tsender_stop(b);
    assert_int_equal(a->errors, 0);
    assert_int_equal(b->errors, 0);
    assert_true(tsender_all_received(a, T, 15000));
    assert_true(tsender_all_received(b, T, 15000));
    assert_no_breach();
    assert_int_equal(tdl_total(), 0);
    assert_int_equal(tsnode_shard_count(0) + tsnode_shard_count(1), 30);
    tsender_t *senders[2] = {a, b};
    check_by_asks(1, senders, 2, ids, 30, 1);
    /* the handoff finished by itself: the region did not wait out handoff-timeout (its last
       acknowledgements must reach the coordinator before the leaver is removed) */
    assert_true(took < (int64_t)s.handoff_timeout_ms);
    tsender_free(&a);
    tsender_free(&b);
}

/* n nodes, every region registered, and one entity started in each of n_ids shards (the
   number of shards of the settings) with an "init:1" told from node 0. */
static void start_with_entities(int n, const tsnode_opts_t *o, const char *prefix,
                                char (*ids)[32], int n_ids)
{
    start_nodes(n, o);
    tsnode_wait_registered((1u << n) - 1, 0, n, 15000);
    tshard_pick_ids(prefix, o->sharding->number_of_shards, (size_t)n_ids, ids);
    for (int k = 0; k < n_ids; k++)
        assert_int_equal(tell(0, ids[k], "init:1"), 0);
    wait_last(T, ids, (size_t)n_ids, "init", 1, 10000);
}

/* The last member: nowhere to hand its shards to. The coordinator says so (ShutdownDone) and the
   region stops them here, the graceful way (every entity gets its stop message), at once: it must
   not wait out handoff-timeout and report a timeout. */
static void test_last_member_stops_its_shards_here(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 10;
    s.handoff_timeout_ms = 8000u * (uint32_t)tscale();
    tsnode_opts_t o = {.sharding = &s};
    char ids[10][32];
    start_with_entities(1, &o, "last", ids, 10);
    assert_int_equal(trec_live_on(T, 0), 10);

    int64_t t0 = shoal_now_ms();
    int rc = shoal_region_shutdown(tsn[0].r);
    int64_t took = shoal_now_ms() - t0;
    printf("the last member's region shut down in %lld ms (handoff-timeout %u ms)\n",
           (long long)took, s.handoff_timeout_ms);
    assert_int_equal(rc, 0); /* SHOAL_ETIMEOUT: it waited for a handoff that cannot happen */
    assert_true(took < (int64_t)s.handoff_timeout_ms / 2);
    assert_int_equal(trec_live_on(T, 0), 0);
    for (int k = 0; k < 10; k++)
        assert_int_equal(trec_get(T, ids[k]).stop_msgs, 1); /* stopped gracefully, not killed */
    assert_no_breach();
}

/* A cluster stopped one node after the other, newest first, each as soon as the one before has
   finished (the examples' way): the next leaver's handoff must not wait for an acknowledgement
   from the member just removed (its removal reaches the coordinator at the same moment), and
   the last member stops its shards at once. No shutdown may reach a phase timeout. */
static void test_nodes_leave_one_after_another(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 12;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    tsnode_opts_t o = {.sharding = &s, .cluster = &cs};
    char ids[12][32];
    start_with_entities(3, &o, "seq", ids, 12);
    for (int i = 2; i >= 0; i--) {
        int64_t t0 = shoal_now_ms();
        assert_int_equal(shoal_cluster_shutdown_wait(tsn[i].cl, 60000u * (uint32_t)tscale()), 0);
        int64_t took = shoal_now_ms() - t0;
        printf("node %d shut down in %lld ms (phase timeout %u ms)\n", i, (long long)took,
               cs.phase_timeout_ms);
        assert_true(took < (int64_t)cs.phase_timeout_ms / 2);
    }
    assert_int_equal(trec_totals().entities_live, 0);
    assert_no_breach();
}

/* --- 5: proxy-only region --------------------------------------------------------------------- */

static void test_proxy_routes_hosts_nothing(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 50;
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(2, &o);
    tsnode_opts_t p = {.sharding = &s, .proxy = true, .seed = 0};
    tsnode_start(2, &p);
    tsnode_wait_up(0x7, 20000);
    tsnode_wait_registered(0x7, 2, 2, 15000); /* the proxy is not a region */
    assert_true(shoal_region_is_proxy(tsn[2].r));
    assert_false(shoal_region_is_proxy(tsn[0].r));
    for (int i = 0; i < 3; i++)
        tdl_watch(i);
    char ids[10][32];
    tshard_pick_ids("p", 50, 10, ids);
    for (int q = 1; q <= 3; q++)
        for (int k = 0; k < 10; k++) {
            char m[16];
            snprintf(m, sizeof m, "p:%d", q);
            assert_int_equal(tell(2, ids[k], m), 0);
        }
    wait_last(T, ids, 10, "p", 3, 10000);
    for (int k = 0; k < 10; k++) {
        char *r = ask_sync(2, ids[k], "get");
        assert_string_equal(r, "3 p:3");
        free(r);
        assert_true(trec_get(T, ids[k]).node == 0 || trec_get(T, ids[k]).node == 1);
    }
    /* StartEntity through the proxy starts it on a region */
    assert_int_equal(shoal_region_start_entity(tsn[2].r, "from-proxy"), 0);
    trec_t fp;
    int64_t end = shoal_now_ms() + 5000L * tscale();
    while ((fp = trec_get(T, "from-proxy")).starts == 0 && shoal_now_ms() < end) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(fp.starts, 1);
    assert_true(fp.node == 0 || fp.node == 1);
    assert_int_equal(trec_live_on(T, 2), 0);
    shoal_region_stats_t ps = stats_of(2);
    assert_int_equal(ps.shards, 0);
    assert_int_equal(ps.entities, 0);
    assert_int_equal(ps.entities_started, 0);
    assert_int_equal(ps.shards_started, 0);
    assert_true(ps.forwarded >= 30);
    assert_int_equal(tsnode_shard_count(2), 0);
    assert_int_equal(tdl_total(), 0);
    assert_no_breach();
}

/* --- 6: bounded buffer ------------------------------------------------------------------------ */

static bool both_joining(void *arg)
{
    (void)arg;
    return shoal_cluster_self_status(tsn[0].cl) == SHOAL_MEMBER_JOINING &&
           shoal_cluster_self_status(tsn[1].cl) == SHOAL_MEMBER_JOINING;
}

static bool buffered_10(void *arg)
{
    (void)arg;
    return stats_of(0).buffered >= 10;
}

static bool buffer_full_seen(void *arg)
{
    return tdl_count(0, SHOAL_DL_BUFFER_FULL) >= (int)(intptr_t)arg;
}

typedef struct {
    shoal_region_t *r;
    const char *id, *msg;
} tell_arg_t;

static int tell_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    tell_arg_t *t = arg;
    return shoal_region_tell(t->r, t->id, t->msg, strlen(t->msg));
}

/* The cluster is not formed (min-nr-of-members 3, two members): nothing has a home, messages
   wait in the buffer of 10; the 11th is refused to the caller and reported as a dead letter; the
   10 go out once the third member comes. */
static void test_buffer_overflow_reported(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 100;
    s.buffer_size = 10;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.min_nr_of_members = 3;
    /* all become Up at once, up-numbers in address order: node 0 sorts first, so it is the
       oldest and runs the coordinator */
    tsnode_opts_t o0 = {.sharding = &s, .cluster = &cs, .seed = 0, .port = tfree_port()};
    tsnode_opts_t o = {.sharding = &s, .cluster = &cs, .seed = 0};
    tsnode_start(0, &o0);
    tsnode_start(1, &o);
    assert_true(wait_until(both_joining, NULL, 10000));
    tdl_watch(0);
    char ids[11][32];
    tshard_pick_ids("o", 100, 11, ids);
    for (int k = 0; k < 10; k++)
        assert_int_equal(tell(0, ids[k], "o:1"), 0);
    assert_true(wait_until(buffered_10, NULL, 5000));
    /* the 11th, from the node thread and from this one: refused, and a dead letter each */
    tell_arg_t ta = {tsn[0].r, ids[10], "o:1"};
    assert_int_equal(shoal_system_call(tsn[0].sys, tell_on_node, &ta), SHOAL_EBUFFER);
    assert_true(wait_until(buffer_full_seen, (void *)(intptr_t)1, 5000));
    assert_int_equal(tell(0, ids[10], "o:1"), SHOAL_EBUFFER);
    assert_true(wait_until(buffer_full_seen, (void *)(intptr_t)2, 5000));
    /* an ask that does not fit fails at once */
    static task_t t;
    int rc = task_ask(tsn[0].r, ids[10], "get", 60000, &t);
    if (rc == 0) {
        assert_true(wait_until(task_called, &t, 2000));
        rc = task_get(&t).status;
    }
    assert_int_equal(rc, SHOAL_EBUFFER);
    shoal_region_stats_t st = stats_of(0);
    assert_true(st.dead_letters[SHOAL_DL_BUFFER_FULL] >= 1);
    assert_true(st.buffer_peak >= 10);
    assert_int_equal(trec_totals().entities_started, 0);

    tsnode_start(2, &o);
    tsnode_wait_up(0x7, 20000);
    wait_last(T, ids, 10, "o", 1, 15000);
    for (int k = 0; k < 10; k++)
        assert_int_equal(trec_get(T, ids[k]).messages, 1);
    assert_int_equal(trec_get(T, ids[10]).starts, 0);
    char *r = ask_sync(0, ids[0], "get");
    assert_string_equal(r, "1 o:1");
    free(r);
    assert_no_breach();
}

/* --- 7: min-nr-of-members --------------------------------------------------------------------- */

/* Nothing is allocated during `ms`: no entity starts, no coordinator allocates. */
static void assert_nothing_allocated_for(int ms, int n)
{
    int64_t end = shoal_now_ms() + ms;
    while (shoal_now_ms() < end) {
        assert_int_equal(trec_totals().entities_started, 0);
        for (int i = 0; i < n; i++)
            if (tsn[i].r)
                assert_int_equal(stats_of(i).allocations, 0);
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
}

/* min-nr-of-members 3: with two members nothing is Up and nothing allocated; with three members
   Up but two regions registered the coordinator still holds allocation; the third region
   registers and the waiting messages are delivered. */
static void test_min_nr_of_members(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 100;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.min_nr_of_members = 3;
    /* all become Up at once, up-numbers in address order: node 0 sorts first, so it is the
       oldest and runs the coordinator */
    tsnode_opts_t o0 = {.sharding = &s, .cluster = &cs, .seed = 0, .port = tfree_port()};
    tsnode_opts_t o = {.sharding = &s, .cluster = &cs, .seed = 0};
    tsnode_start(0, &o0);
    tsnode_start(1, &o);
    assert_true(wait_until(both_joining, NULL, 10000));
    char ids[5][32];
    tshard_pick_ids("m", 100, 5, ids);
    for (int k = 0; k < 5; k++)
        assert_int_equal(tell(0, ids[k], "m:1"), 0);
    assert_nothing_allocated_for(500 * tscale(), 2);

    tsnode_opts_t bare = o;
    bare.no_region = true;
    tsnode_start(2, &bare);
    tsnode_wait_up(0x7, 20000);
    assert_int_equal(tsnode_oldest(1), 0);
    assert_nothing_allocated_for(500 * tscale(), 3);
    assert_false(shoal_sharding_healthy(tsn[2].sh, (const char *const[]){T}, 1));

    tsnode_region(2, T, &s, false);
    wait_last(T, ids, 5, "m", 1, 15000);
    assert_no_breach();
}

/* --- 8: the entity API ------------------------------------------------------------------------ */

static int keyed_id(const void *msg, size_t len, char *out, void *arg)
{
    (void)arg;
    const char *bar = memchr(msg, '|', len);
    if (!bar || bar == msg || (size_t)(bar - (const char *)msg) > SHOAL_ENTITY_ID_MAX)
        return -1;
    size_t n = (size_t)(bar - (const char *)msg);
    memcpy(out, msg, n);
    out[n] = 0;
    return 0;
}

static bool started(void *arg)
{
    return trec_get(T, arg).starts > 0;
}

static bool tell_reply_tried(void *arg)
{
    return trec_get(T, arg).tell_reply_rc != 1;
}

static void test_entity_api(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 100;
    /* stragglers are stopped by force after max(handoff-timeout - 5 s, 1 s) */
    s.handoff_timeout_ms = 6000;
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(3, &o);
    shoal_sharding_settings_t ks = s;
    ks.entity_id = keyed_id;
    shoal_region_t *keyed[3];
    for (int i = 0; i < 3; i++)
        keyed[i] = tsnode_region(i, "keyed", &ks, false);
    tsnode_wait_registered(0x7, 0, 3, 15000);
    for (int i = 0; i < 3; i++)
        tdl_watch(i);

    /* StartEntity: started without a message, once */
    assert_int_equal(shoal_region_start_entity(tsn[0].r, "se"), 0);
    assert_true(wait_until(started, "se", 5000));
    assert_int_equal(shoal_region_start_entity(tsn[0].r, "se"), 0);
    char *who = ask_sync(0, "se", "whoami");
    int node, inc;
    assert_int_equal(sscanf(who, "%d %d", &node, &inc), 2);
    free(who);
    assert_int_equal(inc, 1);
    trec_t r = trec_get(T, "se");
    assert_int_equal(r.starts, 1);
    assert_int_equal(r.messages, 0);

    /* a reply kept for later (shoal_entity_sender, then shoal_region_reply) */
    static task_t later;
    assert_int_equal(task_ask(tsn[1].r, "rl", "hold", 10000u * (uint32_t)tscale(), &later), 0);
    assert_int_equal(tell(1, "rl", "release"), 0);
    assert_true(wait_until(task_called, &later, 10000));
    task_t lt = task_get(&later);
    assert_int_equal(lt.status, SHOAL_OK);
    assert_string_equal(lt.reply, "released");
    assert_int_equal(trec_get(T, "rl").release_rc, 0);

    /* shoal_entity_reply to a tell: nothing to answer */
    assert_int_equal(tell(0, "tr", "tellreply"), 0);
    assert_true(wait_until(tell_reply_tried, "tr", 5000));
    assert_int_equal(trec_get(T, "tr").tell_reply_rc, SHOAL_EINVAL);

    /* passivation: the stop message comes back; what follows reaches a new incarnation */
    assert_int_equal(tell(0, "pv", "x:1"), 0);
    assert_int_equal(tell(0, "pv", "passivate"), 0);
    assert_int_equal(tell(0, "pv", "x:2"), 0);
    assert_int_equal(tell(0, "pv", "x:3"), 0);
    wait_one(T, "pv", "x", 3, 5000);
    r = trec_get(T, "pv");
    assert_int_equal(r.starts, 2);
    assert_int_equal(r.stops, 1);
    assert_int_equal(r.stop_msgs, 1);
    assert_int_equal(r.live, 1);
    assert_int_equal(r.n_log, 3);
    assert_int_equal(r.inc_log[0], 1);
    assert_int_equal(r.inc_log[1], 2);
    assert_int_equal(r.inc_log[2], 2);

    /* an entity tells another from inside */
    assert_int_equal(tell(0, "fa", "fwd:fb:f:1"), 0);
    wait_one(T, "fb", "f", 1, 5000);

    /* the entity id taken from the message */
    assert_int_equal(shoal_region_tell(keyed[1], NULL, "k1|a:1", 6), 0);
    wait_one("keyed", "k1", "a", 1, 5000);
    assert_int_equal(shoal_region_tell(keyed[1], NULL, "no id", 5), SHOAL_EINVAL);
    /* bad ids: refused, never a crash */
    assert_int_equal(tell(0, NULL, "a:1"), SHOAL_EINVAL); /* the type has no entity_id */
    assert_int_equal(tell(0, "", "a:1"), SHOAL_EINVAL);
    char longid[SHOAL_ENTITY_ID_MAX + 2];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    assert_int_equal(tell(0, longid, "a:1"), SHOAL_EINVAL);
    assert_int_equal(shoal_region_start_entity(tsn[0].r, longid), SHOAL_EINVAL);

    /* handoff with the stop message: two entities on node 1 (not the coordinator's node), one
       of them ignoring the stop message; node 1's region shuts down gracefully */
    assert_int_equal(tsnode_oldest(0), 0);
    char ho[32] = "", st[32] = "";
    for (int k = 0; k < 40 && !st[0]; k++) {
        char id[32];
        snprintf(id, sizeof id, "h%d", k);
        assert_int_equal(tell(0, id, "w:1"), 0);
        wait_one(T, id, "w", 1, 5000);
        if (trec_get(T, id).node != 1)
            continue;
        if (!ho[0])
            snprintf(ho, sizeof ho, "%s", id);
        else
            snprintf(st, sizeof st, "%s", id);
    }
    assert_true(ho[0] && st[0]);
    assert_int_equal(tell(0, st, "stubborn"), 0);
    free(ask_sync(0, st, "get")); /* "stubborn" has been received */
    int64_t t0 = shoal_now_ms();
    assert_int_equal(shoal_region_shutdown(tsn[1].r), 0);
    printf("region shutdown with a stubborn entity took %lld ms\n",
           (long long)(shoal_now_ms() - t0));
    r = trec_get(T, ho);
    assert_int_equal(r.stop_msgs, 1);
    assert_int_equal(r.stops, 1);
    assert_int_equal(r.live, 0);
    r = trec_get(T, st);
    assert_int_equal(r.stop_msgs, 1);
    assert_int_equal(r.stops, 1); /* by force */
    assert_int_equal(r.live, 0);
    assert_int_equal(trec_live_on(T, 1), 0);
    shoal_region_stats_t s1;
    if (shoal_region_stats(tsn[1].r, &s1) == 0)
        assert_true(s1.entities_forced >= 1);
    assert_int_equal(tell(1, ho, "w:2"), SHOAL_ESTOPPED);
    /* the next messages reach new incarnations elsewhere */
    assert_int_equal(tell(0, ho, "w:2"), 0);
    assert_int_equal(tell(2, st, "w:2"), 0);
    wait_one(T, ho, "w", 2, 10000);
    wait_one(T, st, "w", 2, 10000);
    assert_int_equal(trec_get(T, ho).starts, 2);
    assert_true(trec_get(T, ho).node != 1);
    assert_true(trec_get(T, st).node != 1);
    assert_int_equal(tdl_count(0, SHOAL_DL_BUFFER_FULL), 0);
    assert_no_breach();
}

/* --- 9: 10,000 shards ------------------------------------------------------------------------- */

/* entity "<k>" lives in shard "<k>": 10,000 entities fill 10,000 shards */
static void id_is_shard(const char *entity_id, uint32_t number_of_shards, char *out, void *arg)
{
    (void)number_of_shards;
    (void)arg;
    snprintf(out, SHOAL_SHARD_ID_MAX + 1, "%s", entity_id);
}

#define MANY 10000

static bool all_started(void *arg)
{
    return trec_totals().entities_started >= *(int *)arg;
}

static void assert_no_oversized(int n)
{
    for (int i = 0; i < n; i++) {
        if (!tsn[i].sys)
            continue;
        shoal_system_stats_t ss;
        assert_int_equal(shoal_system_stats(tsn[i].sys, &ss), 0);
        assert_int_equal(ss.dropped_oversized, 0);
        if (tsn[i].r) {
            shoal_region_stats_t st = stats_of(i);
            assert_int_equal(st.dead_letters[SHOAL_DL_SEND_FAILED], 0);
        }
    }
}

static void test_ten_thousand_shards(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = MANY;
    s.shard_id = id_is_shard;
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(2, &o);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    tdl_watch(0);
    tdl_watch(1);
    int64_t t0 = shoal_now_ms();
    /* in rounds of 1,000 with a deadline each: a coordinator that slows down as its state grows
       fails here, without a backlog of thousands of allocations for the teardown to wait out */
    for (int k = 0; k < MANY; k++) {
        char id[16];
        snprintf(id, sizeof id, "%d", k);
        assert_int_equal(shoal_region_start_entity(tsn[k % 2].r, id), 0);
        int want = k + 1;
        if (want % 1000 == 0 && !wait_until(all_started, &want, 5000))
            fail_msg("shards %d..%d did not all start within 5 s (x%d); %d started so far, "
                     "%lld ms since the first",
                     want - 1000, want - 1, tscale(), trec_totals().entities_started,
                     (long long)(shoal_now_ms() - t0));
    }
    printf("%d shards allocated and started in %lld ms\n", MANY, (long long)(shoal_now_ms() - t0));
    assert_int_equal(tsnode_shard_count(0) + tsnode_shard_count(1), MANY);
    assert_no_oversized(2);

    /* a third region registers: the coordinator sends it the 10,000 homes it knows */
    tsnode_start(2, &o);
    tdl_watch(2);
    tsnode_wait_up(0x7, 20000);
    tsnode_wait_registered(0x7, 2, 3, 20000);
    /* every shard has a home, as the cluster-wide query sees it */
    shoal_sharding_stats_t cst;
    assert_int_equal(shoal_region_cluster_stats(tsn[2].r, 10000u * (uint32_t)tscale(), &cst), 0);
    assert_int_equal(cst.n_regions, 3);
    size_t shards = 0, entities = 0;
    for (size_t k = 0; k < cst.n_regions; k++) {
        assert_false(cst.regions[k].failed);
        shards += cst.regions[k].n_shards;
        for (size_t j = 0; j < cst.regions[k].n_shards; j++)
            entities += cst.regions[k].shards[j].n_entities;
    }
    shoal_sharding_stats_free(&cst);
    /* shards moving to the new region are counted on neither side for a moment; entities of a
       moved shard start again at their next message */
    assert_true(shards <= MANY && shards >= MANY - 40);
    /* the new node reaches entities in shards it never asked for */
    char(*some)[32] = calloc(100, sizeof *some);
    for (int k = 0; k < 100; k++) {
        snprintf(some[k], 32, "%d", k * 97);
        assert_int_equal(tell(2, some[k], "z:1"), 0);
    }
    wait_last(T, some, 100, "z", 1, 20000);
    free(some);
    assert_no_oversized(3);
    assert_int_equal(tdl_total(), 0);
    assert_no_breach();
}

/* --- 10: coordinator failover ----------------------------------------------------------------- */

typedef struct {
    int viewer;
    const shoal_node_t *subject;
} seen_arg_t;

static bool unreachable_or_gone(void *arg)
{
    seen_arg_t *a = arg;
    shoal_cluster_view_t v;
    if (shoal_cluster_view(tsn[a->viewer].cl, &v) != 0)
        return false;
    const shoal_member_t *m = shoal_cluster_view_member(&v, a->subject);
    bool ok = !m || !m->reachable;
    shoal_cluster_view_free(&v);
    return ok;
}

static bool still_member(int viewer, const shoal_node_t *subject)
{
    shoal_cluster_view_t v;
    assert_int_equal(shoal_cluster_view(tsn[viewer].cl, &v), 0);
    bool in = shoal_cluster_view_member(&v, subject) != NULL;
    shoal_cluster_view_free(&v);
    return in;
}

/* The coordinator's node (the oldest) crashes: known shards keep working while it is down; once
   it is downed (keep-majority) and removed, a new coordinator recovers the state from the
   replicator, new shards get homes, and the crashed node's shards move. */
static void test_coordinator_failover(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 100;
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(3, &o);
    tsnode_wait_registered(0x7, 0, 3, 15000);
    assert_int_equal(tsnode_oldest(1), 0);
    tdl_watch(1);
    tdl_watch(2);
    char ids[13][32];
    tshard_pick_ids("c", 100, 13, ids); /* 12 now, the 13th once the coordinator is gone */
    for (int k = 0; k < 12; k++)
        assert_int_equal(tell(1, ids[k], "c:1"), 0);
    wait_last(T, ids, 12, "c", 1, 10000);
    char known[12][32], lost[12][32];
    size_t n_known = 0, n_lost = 0;
    for (int k = 0; k < 12; k++) {
        if (trec_get(T, ids[k]).node == 0)
            memcpy(lost[n_lost++], ids[k], sizeof ids[k]);
        else
            memcpy(known[n_known++], ids[k], sizeof ids[k]);
    }
    assert_true(n_known >= 6 && n_lost >= 3);
    const shoal_node_t *victim = shoal_system_self(tsn[0].sys);

    tsnode_crash(0);
    int64_t t0 = shoal_now_ms();
    /* known homes keep working without the coordinator */
    for (size_t k = 0; k < n_known; k++)
        assert_int_equal(tell(1, known[k], "c:2"), 0);
    wait_last(T, known, n_known, "c", 2, 3000);
    assert_true(still_member(1, victim));
    /* a new shard waits for the new coordinator */
    assert_int_equal(tell(1, ids[12], "c:1"), 0);
    /* the crashed node's shards: once it is unreachable, messages wait for their next home */
    seen_arg_t sa = {1, victim};
    assert_true(wait_until(unreachable_or_gone, &sa, 10000));
    for (size_t k = 0; k < n_lost; k++)
        assert_int_equal(tell(1, lost[k], "c:2"), 0);
    wait_one(T, ids[12], "c", 1, 40000);
    printf("new shard got its home %lld ms after the crash\n", (long long)(shoal_now_ms() - t0));
    wait_last(T, lost, n_lost, "c", 2, 40000);
    printf("the crashed node's shards moved %lld ms after the crash\n",
           (long long)(shoal_now_ms() - t0));
    for (size_t k = 0; k < n_lost; k++) {
        trec_t r = trec_get(T, lost[k]);
        assert_true(r.node == 1 || r.node == 2);
        assert_int_equal(r.starts, 2);
        assert_int_equal(r.messages, 2);
    }
    assert_true(tsnode_oldest(1) == 1 || tsnode_oldest(1) == 2);
    /* and the new coordinator serves both regions */
    tsnode_wait_registered(0x6, 2, 2, 10000);
    assert_int_equal(tdl_total(), 0);
    assert_no_breach();
}

/* --- 11: queries ------------------------------------------------------------------------------ */

static bool stats_failed_region(shoal_sharding_stats_t *st, const shoal_node_t *node)
{
    for (size_t k = 0; k < st->n_regions; k++)
        if (st->regions[k].region == node)
            return st->regions[k].failed;
    fail_msg("region %s not listed", shoal_node_id(node));
    return false;
}

static bool healthy_both(void *arg)
{
    (void)arg;
    const char *names[2] = {T, "other"};
    return shoal_sharding_healthy(tsn[0].sh, names, 2);
}

static void test_queries(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = 100;
    tsnode_opts_t o = {.sharding = &s};
    start_nodes(3, &o);
    shoal_region_t *other0 = tsnode_region(0, "other", &s, false);
    tsnode_region(1, "other", &s, false);
    tsnode_wait_registered(0x7, 0, 3, 15000);
    assert_true(wait_until(healthy_both, NULL, 10000));
    assert_true(shoal_sharding_healthy(tsn[0].sh, NULL, 0));
    assert_false(shoal_sharding_healthy(tsn[2].sh, (const char *const[]){"other"}, 1));

    /* names, lookups */
    const char **names = NULL;
    assert_int_equal(shoal_sharding_type_names(tsn[0].sh, &names), 2);
    assert_string_equal(names[0], T);
    assert_string_equal(names[1], "other");
    free(names);
    assert_int_equal(shoal_sharding_type_names(tsn[2].sh, &names), 1);
    free(names);
    assert_ptr_equal(shoal_region_find(tsn[0].sh, "other"), other0);
    assert_ptr_equal(shoal_region_find(tsn[0].sh, T), tsn[0].r);
    assert_null(shoal_region_find(tsn[0].sh, "nope"));
    assert_string_equal(shoal_region_type_name(other0), "other");
    /* a second start of a type is refused */
    int err = 0;
    assert_null(shoal_region_start(tsn[0].sh, "other", &s, tcounter_fns(), &tsn[0].arg, &err));
    assert_int_equal(err, SHOAL_EINVAL);

    /* the default shard id is documented: decimal(XXH3_64(id, seed 0) mod n) */
    const char *probe[] = {"abc", "", "user-42", "\xc3\xa9t\xc3\xa9"};
    for (size_t k = 0; k < sizeof probe / sizeof probe[0]; k++) {
        char got[SHOAL_SHARD_ID_MAX + 1], want[32], via_region[SHOAL_SHARD_ID_MAX + 1];
        shoal_sharding_default_shard_id(probe[k], 1000, got);
        snprintf(want, sizeof want, "%llu",
                 (unsigned long long)(XXH3_64bits(probe[k], strlen(probe[k])) % 1000));
        assert_string_equal(got, want);
        if (probe[k][0]) {
            shoal_sharding_default_shard_id(probe[k], 100, got);
            shoal_region_shard_of(tsn[1].r, probe[k], via_region);
            assert_string_equal(got, via_region);
        }
    }

    char ids[12][32];
    tshard_pick_ids("s", 100, 12, ids);
    for (int k = 0; k < 12; k++)
        assert_int_equal(tell(0, ids[k], "q:1"), 0);
    wait_last(T, ids, 12, "q", 1, 10000);

    /* current regions, from every node */
    for (int i = 0; i < 3; i++) {
        const shoal_node_t **nodes = NULL;
        size_t n = 0;
        assert_int_equal(
            shoal_region_current_regions(tsn[i].r, 3000u * (uint32_t)tscale(), &nodes, &n), 0);
        assert_int_equal(n, 3);
        unsigned seen = 0;
        for (size_t k = 0; k < n; k++)
            seen |= 1u << tsnode_index(nodes[k]);
        free(nodes);
        assert_int_equal(seen, 0x7);
    }
    /* per-region stats agree with the states and with the cluster-wide query */
    shoal_sharding_stats_t cst;
    assert_int_equal(shoal_region_cluster_stats(tsn[1].r, 3000u * (uint32_t)tscale(), &cst), 0);
    assert_int_equal(cst.n_regions, 3);
    size_t shards = 0, entities = 0;
    for (size_t k = 0; k < cst.n_regions; k++) {
        int i = tsnode_index(cst.regions[k].region);
        assert_true(i >= 0);
        assert_false(cst.regions[k].failed);
        assert_int_equal(cst.regions[k].n_shards, tsnode_shard_count(i));
        shoal_region_stats_t st = stats_of(i);
        assert_int_equal(st.shards, cst.regions[k].n_shards);
        size_t e = 0;
        for (size_t j = 0; j < cst.regions[k].n_shards; j++)
            e += cst.regions[k].shards[j].n_entities;
        assert_int_equal(st.entities, e);
        shards += cst.regions[k].n_shards;
        entities += e;
    }
    shoal_sharding_stats_free(&cst);
    assert_int_equal(shards, 12);
    assert_int_equal(entities, 12);
    /* each region hosts its share (least-shards) */
    for (int i = 0; i < 3; i++)
        assert_int_equal(tsnode_shard_count(i), 4);

    /* a region that does not answer in time is listed as failed */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(tsn[1].sys, shoal_system_endpoint(tsn[2].sys), &cut), 0);
    assert_int_equal(shoal_system_fault(tsn[2].sys, shoal_system_endpoint(tsn[1].sys), &cut), 0);
    int64_t t0 = shoal_now_ms();
    uint32_t short_ms = 500u * (uint32_t)tscale();
    assert_int_equal(shoal_region_cluster_stats(tsn[1].r, short_ms, &cst), 0);
    int64_t took = shoal_now_ms() - t0;
    shoal_system_heal(tsn[1].sys);
    shoal_system_heal(tsn[2].sys);
    assert_int_equal(cst.n_regions, 3);
    assert_true(stats_failed_region(&cst, shoal_system_self(tsn[2].sys)));
    assert_false(stats_failed_region(&cst, shoal_system_self(tsn[0].sys)));
    assert_false(stats_failed_region(&cst, shoal_system_self(tsn[1].sys)));
    shoal_sharding_stats_free(&cst);
    assert_true(took < (int64_t)short_ms + 2000L * tscale());

    /* a region whose number of shards differs from the coordinator's never registers */
    shoal_sharding_settings_t bad = s;
    bad.number_of_shards = 50;
    tsnode_region(2, "other", &bad, false);
    int64_t end = shoal_now_ms() + 1000L * tscale();
    while (shoal_now_ms() < end) {
        assert_false(shoal_sharding_healthy(tsn[2].sh, (const char *const[]){"other"}, 1));
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    assert_true(shoal_sharding_healthy(tsn[0].sh, (const char *const[]){"other"}, 1));
    assert_no_breach();
}

/* --- a node paused past stable-after processes nothing until it is confirmed a member -------- */

static int busy_ms;
static bool paused_at_resume;
static int busy_loop(shoal_system_t *sys, void *arg)
{
    (void)sys;
    for (int64_t end = shoal_now_ms() + busy_ms; shoal_now_ms() < end;) {
    }
    /* resumed, before any timer ran (the node tick has not seen the gap yet): a message read
       now must already find the node paused */
    paused_at_resume = shoal_cluster_paused(arg);
    return 0;
}

/* The host of an entity stalls (its loop busy, as after SIGSTOP or swap) past stable-after while
   messages for the entity arrive in its sockets. Resumed, its loop reads them before any timer
   runs; they must wait until fresh gossip confirms the node is still a member (it may have been
   downed and its shards started elsewhere), and then arrive, none lost. */
static void test_paused_node_processes_nothing(void **state)
{
    (void)state;
    start_nodes(3, NULL);
    tsnode_wait_registered(0x7, 0, 3, 15000);
    char id[32] = "";
    int host = -1;
    for (int k = 0; k < 64 && host < 1; k++) {
        snprintf(id, sizeof id, "paused%d", k);
        char *who = ask_sync(0, id, "whoami");
        assert_int_equal(sscanf(who, "%d", &host), 1);
        free(who);
    }
    assert_true(host >= 1); /* not node 0, which sends */
    shoal_cluster_settings_t cs = *shoal_cluster_settings(tsn[host].cl);
    busy_ms = (int)cs.stable_after_ms + 1500;
    shoal_cluster_stats_t before;
    assert_int_equal(shoal_cluster_stats(tsn[host].cl, &before), 0);
    paused_at_resume = false;
    assert_int_equal(shoal_system_post(tsn[host].sys, busy_loop, tsn[host].cl), 0);
    /* once the host's loop is surely busy, the messages go out: they wait in its socket */
    struct timespec ts = {0, 200 * 1000000};
    nanosleep(&ts, NULL);
    char msg[32];
    for (int k = 1; k <= 5; k++) {
        snprintf(msg, sizeof msg, "p:%d", k);
        assert_int_equal(tell(0, id, msg), 0);
    }
    wait_one(T, id, "p", 5, busy_ms + 30000);
    shoal_cluster_stats_t after;
    assert_int_equal(shoal_cluster_stats(tsn[host].cl, &after), 0);
    assert_true(after.clock_gaps > before.clock_gaps); /* the stall was seen as one */
    assert_true(paused_at_resume);
    assert_int_equal(trec_totals().paused_receipts, 0);
    assert_no_breach();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_routing_scenarios, tsnode_teardown),
        cmocka_unit_test_teardown(test_asks, tsnode_teardown),
        cmocka_unit_test_teardown(test_rebalance_on_join, tsnode_teardown),
        cmocka_unit_test_teardown(test_graceful_leave_hands_off, tsnode_teardown),
        cmocka_unit_test_teardown(test_last_member_stops_its_shards_here, tsnode_teardown),
        cmocka_unit_test_teardown(test_nodes_leave_one_after_another, tsnode_teardown),
        cmocka_unit_test_teardown(test_proxy_routes_hosts_nothing, tsnode_teardown),
        cmocka_unit_test_teardown(test_buffer_overflow_reported, tsnode_teardown),
        cmocka_unit_test_teardown(test_min_nr_of_members, tsnode_teardown),
        cmocka_unit_test_teardown(test_entity_api, tsnode_teardown),
        cmocka_unit_test_teardown(test_paused_node_processes_nothing, tsnode_teardown),
        cmocka_unit_test_teardown(test_ten_thousand_shards, tsnode_teardown),
        cmocka_unit_test_teardown(test_coordinator_failover, tsnode_teardown),
        cmocka_unit_test_teardown(test_queries, tsnode_teardown),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
