/*  bench_entity_state.c — entity state kept in the replicator (issue 9, "Benchmarks").

    Three nodes in this process (each its own node thread; release build), fast membership
    settings, two entity types of 100 shards each whose shard id is the text of the entity id
    before its first '.' (so a figure puts its entities where it needs them), rebalancing slowed
    to 10 min so nothing moves unasked:
      "st"     entity-state on: "save" stores the message as the state and answers once the save
               is acknowledged (shoal_entity_save_reply: WriteMajority, 2 of 3 nodes);
               "get" answers "<state bytes> <origin>"; hand_over yields the state as snapshot;
      "plain"  no state: "save" keeps the message in memory and answers at once, "get" the same.

    entity_state_write_majority: saves of 100-byte states acknowledged per second, 256 asks in
      flight from node 0's main thread to 1,000 entities over 100 shards on the three nodes, for
      3 s. Baseline: the raw quorum loop as ZeroMQ gives it at best — requests of the same size
      echoed by a ROUTER with 256 in flight (baseline_zmq_reqrep_window): one round trip per
      write, which is what a majority of 3 costs (self + one peer).
    handoff_1000_entities_ms: shard "h" with 1,000 entities holding 1 KiB of state each, then
      StopShards("h") from node 0 and at once a "get" to each of them; ms until every one has
      answered from its next incarnation started from its hand-over snapshot (origin 2).
      Baseline: the same with "plain" entities (nothing stored, nothing handed over).
    handoff_1000_entities_bytes: bytes the old owner's node sent from StopShards until then
      (snapshots through the replicator, with their deltas to two peers, and the handoff's
      control messages). Baseline: the state itself, 1,000 x 1 KiB (ratio = overhead).
*/
#include "baseline.h"
#include "bench.h"
#include "sharding.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODES 3
#define STATE_KB 1024

static shoal_system_t *sys[NODES];
static shoal_cluster_t *cl[NODES];
static shoal_sharding_t *sh[NODES];
static shoal_region_t *st[NODES], *plain[NODES];

static void die(const char *what)
{
    fprintf(stderr, "bench_entity_state: %s\n", what);
    exit(1);
}

/* --- the types -------------------------------------------------------------------------------- */
typedef struct {
    shoal_buf_t mem;    /* "plain" keeps its state here */
    double started;     /* bench_now() at its start: which incarnation answers */
} ent_t;

static void *ent_start(shoal_entity_t *e, void *arg)
{
    (void)e;
    (void)arg;
    ent_t *x = calloc(1, sizeof(ent_t));
    x->started = bench_now();
    return x;
}

static void ent_receive(shoal_entity_t *e, void *state, const void *msg, size_t len, void *arg)
{
    bool stored = arg != NULL;
    ent_t *x = state;
    if (len >= 4 && memcmp(msg, "save", 4) == 0) {
        if (stored) {
            shoal_entity_save_reply(e, msg, len, "ok", 2);
        } else {
            shoal_buf_reset(&x->mem);
            shoal_buf_append(&x->mem, msg, len);
            shoal_entity_reply(e, "ok", 2);
        }
        return;
    }
    if (len == 3 && memcmp(msg, "get", 3) == 0) {
        size_t n = 0;
        if (stored)
            shoal_entity_stored(e, &n);
        else
            n = x->mem.len;
        char r[96];
        int k = snprintf(r, sizeof r, "%zu %d %.6f", n, shoal_entity_state_origin(e), x->started);
        shoal_entity_reply(e, r, (size_t)k);
    }
}

static void ent_stop(shoal_entity_t *e, void *state, void *arg)
{
    (void)e;
    (void)arg;
    ent_t *x = state;
    shoal_buf_free(&x->mem);
    free(x);
}

static void ent_hand_over(shoal_entity_t *e, void *state, shoal_buf_t *out, void *arg)
{
    (void)state;
    if (!arg)
        return;
    size_t n = 0;
    const void *d = shoal_entity_stored(e, &n);
    if (d && n)
        shoal_buf_append(out, d, n);
}

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

static const shoal_entity_fns_t fns = {ent_start, ent_receive, ent_stop, ent_hand_over};
static int stored_flag = 1;

static void settings(shoal_sharding_settings_t *s, bool stored)
{
    shoal_sharding_settings_fast(s);
    s->number_of_shards = 100;
    s->rebalance_interval_ms = 600000;
    s->shard_id = shard_by_prefix;
    s->entity_state = stored;
    s->passivation.policy = SHOAL_PASSIVATE_NONE;
    s->passivation.idle_timeout_ms = 0;
}

/* --- the cluster ------------------------------------------------------------------------------ */
static bool all_up(void)
{
    return bench_all_up(cl, NODES);
}

static void wait_for(bool (*pred)(void), double seconds, const char *what)
{
    double until = bench_now() + seconds;
    while (!pred()) {
        if (bench_now() > until)
            die(what);
        usleep(20000);
    }
}

static bool all_healthy(void)
{
    for (int i = 0; i < NODES; i++)
        if (!shoal_sharding_healthy(sh[i], NULL, 0))
            return false;
    return true;
}

static void cluster_start(void)
{
    for (int i = 0; i < NODES; i++) {
        shoal_system_settings_t ss;
        shoal_system_settings_default(&ss);
        ss.endpoint = "tcp://127.0.0.1:0";
        int err = 0;
        sys[i] = shoal_system_new(&ss, &err);
        if (!sys[i])
            die("system");
        shoal_cluster_settings_t cs;
        shoal_cluster_settings_fast(&cs);
        cl[i] = shoal_cluster_new(sys[i], &cs, &err);
        sh[i] = cl[i] ? shoal_sharding_new(cl[i], &err) : NULL;
        if (!sh[i])
            die("cluster or sharding");
        const char *seed = shoal_system_endpoint(sys[0]);
        if (shoal_cluster_join(cl[i], i ? &seed : NULL, i ? 1 : 0) != 0)
            die("join");
        if (i == 0) {
            double until = bench_now() + 20;
            while (shoal_cluster_self_status(cl[0]) != SHOAL_MEMBER_UP && bench_now() < until)
                usleep(20000);
        }
    }
    wait_for(all_up, 60, "the nodes did not come up");
    for (int i = 0; i < NODES; i++) {
        shoal_sharding_settings_t s;
        settings(&s, true);
        int err = 0;
        st[i] = shoal_region_start(sh[i], "st", &s, &fns, &stored_flag, &err);
        settings(&s, false);
        plain[i] = shoal_region_start(sh[i], "plain", &s, &fns, NULL, &err);
        if (!st[i] || !plain[i])
            die("regions");
    }
    wait_for(all_healthy, 30, "the regions did not register");
}

static void cluster_stop(void)
{
    for (int i = NODES - 1; i >= 0; i--) {
        shoal_sharding_destroy(&sh[i]);
        shoal_cluster_destroy(&cl[i]);
        shoal_system_destroy(&sys[i]);
    }
}

/* --- asks with a window ----------------------------------------------------------------------- */
typedef struct {
    int inflight, done, failed, origin2;
    double since;      /* a "get" answered by an incarnation started after this counts as new */
    char fresh[1000];  /* entity k answered from a new incarnation */
} window_t;

static window_t win;

static void on_reply(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    if (status == 0) {
        __atomic_add_fetch(&win.done, 1, __ATOMIC_SEQ_CST);
        char b[96];
        size_t n = len < sizeof b - 1 ? len : sizeof b - 1;
        memcpy(b, reply, n);
        b[n] = 0;
        size_t sz;
        int origin;
        double started;
        intptr_t k = (intptr_t)arg;
        if (k > 0 && sscanf(b, "%zu %d %lf", &sz, &origin, &started) == 3 &&
            started >= win.since && !win.fresh[k - 1]) {
            win.fresh[k - 1] = 1;
            if (origin == 2)
                __atomic_add_fetch(&win.origin2, 1, __ATOMIC_SEQ_CST);
        }
    } else {
        __atomic_add_fetch(&win.failed, 1, __ATOMIC_SEQ_CST);
    }
    __atomic_sub_fetch(&win.inflight, 1, __ATOMIC_SEQ_CST);
}

static void ask_windowed_k(shoal_region_t *r, const char *id, const void *msg, size_t len,
                           int window, intptr_t k)
{
    while (__atomic_load_n(&win.inflight, __ATOMIC_SEQ_CST) >= window)
        sched_yield();
    __atomic_add_fetch(&win.inflight, 1, __ATOMIC_SEQ_CST);
    int rc;
    while ((rc = shoal_region_ask(r, id, msg, len, 30000, on_reply, (void *)k)) == SHOAL_EBUFFER)
        sched_yield();
    if (rc != 0) {
        __atomic_sub_fetch(&win.inflight, 1, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&win.failed, 1, __ATOMIC_SEQ_CST);
    }
}

static void ask_windowed(shoal_region_t *r, const char *id, const void *msg, size_t len, int window)
{
    ask_windowed_k(r, id, msg, len, window, 0);
}

static void drain(double seconds)
{
    double until = bench_now() + seconds;
    while (__atomic_load_n(&win.inflight, __ATOMIC_SEQ_CST) > 0 && bench_now() < until)
        usleep(1000);
}

/* --- figures ---------------------------------------------------------------------------------- */
static double write_rate(void)
{
    char msg[100];
    memset(msg, 'x', sizeof msg);
    memcpy(msg, "save", 4);
    char id[32];
    /* every entity once first: the figure is about saves, not about starting entities */
    memset(&win, 0, sizeof win);
    for (int k = 0; k < 1000; k++) {
        snprintf(id, sizeof id, "w%d.%d", k % 100, k);
        ask_windowed(st[0], id, msg, sizeof msg, 256);
    }
    drain(60);
    memset(&win, 0, sizeof win);
    double t0 = bench_now();
    long k = 0;
    while (bench_now() - t0 < 3.0) {
        snprintf(id, sizeof id, "w%ld.%ld", k % 100, k % 1000);
        ask_windowed(st[0], id, msg, sizeof msg, 256);
        k++;
    }
    drain(60);
    double t = bench_now() - t0;
    if (win.failed)
        bench_note("entity_state_write_majority: %d saves failed", win.failed);
    return win.done / t;
}

static int owner_of(shoal_region_t **rs, const char *shard)
{
    for (int i = 0; i < NODES; i++) {
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

static double handoff(shoal_region_t **rs, const char *shard, uint64_t *bytes)
{
    char *msg = malloc(STATE_KB);
    memset(msg, 'y', STATE_KB);
    memcpy(msg, "save", 4);
    char id[32];
    memset(&win, 0, sizeof win);
    for (int k = 0; k < 1000; k++) {
        snprintf(id, sizeof id, "%s.%d", shard, k);
        ask_windowed(rs[0], id, msg, STATE_KB, 256);
    }
    drain(60);
    free(msg);
    if (win.failed)
        bench_note("handoff: %d of the 1000 saves failed", win.failed);
    int owner = owner_of(rs, shard);
    if (owner < 0)
        die("the shard has no owner");
    shoal_system_stats_t before, after;
    shoal_system_stats(sys[owner], &before);
    memset(&win, 0, sizeof win);
    double t0 = bench_now();
    win.since = t0;
    const char *one[] = {shard};
    if (shoal_region_stop_shards(rs[0], one, 1) != 0)
        die("StopShards");
    /* until every entity has answered from its next incarnation (gets that reach the old one
       before the handoff starts are asked again) */
    int fresh = 0;
    while (fresh < 1000 && bench_now() - t0 < 60) {
        for (int k = 0; k < 1000; k++) {
            if (win.fresh[k])
                continue;
            snprintf(id, sizeof id, "%s.%d", shard, k);
            ask_windowed_k(rs[0], id, "get", 3, 1000, k + 1);
        }
        drain(60);
        fresh = 0;
        for (int k = 0; k < 1000; k++)
            fresh += win.fresh[k];
    }
    double ms = (bench_now() - t0) * 1000;
    shoal_system_stats(sys[owner], &after);
    *bytes = after.bytes_out - before.bytes_out;
    if (win.failed)
        bench_note("handoff of %s: %d gets failed", shard, win.failed);
    if (rs == st && win.origin2 != 1000)
        bench_note("handoff: %d of 1000 entities started from their snapshot", win.origin2);
    return ms;
}

int main(void)
{
    cluster_start();
    double base_rr = baseline_zmq_reqrep_window(256, 100, 2.0);
    double w = write_rate();
    bench_report("entity_state_write_majority", w, "ops/s", base_rr);
    bench_note("saves acknowledged by 2 of 3 nodes, 256 in flight; baseline: raw ZeroMQ "
               "request/reply, 256 in flight");
    uint64_t bytes_plain = 0, bytes = 0;
    double plain_ms = handoff(plain, "hp", &bytes_plain);
    double ms = handoff(st, "hs", &bytes);
    bench_report("handoff_1000_entities_ms", ms, "ms", plain_ms);
    bench_note("baseline: the same StopShards and gets with entities without state");
    bench_report("handoff_1000_entities_bytes", (double)bytes, "bytes", 1000.0 * STATE_KB);
    bench_note("bytes sent by the old owner's node; baseline: the state itself (the plain handoff "
               "sent %llu bytes)",
               (unsigned long long)bytes_plain);
    cluster_stop();
    return 0;
}
