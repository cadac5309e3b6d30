/*  bench_cluster_state.c — the cluster state at sizes this machine cannot run as processes.

    The membership state (membership/state.h) is what gossip carries and every node merges; its
    size and its merge cost decide how far a cluster grows. This program builds real states, with
    the real code, as a cluster of N members would hold them once converged:
      - every member joined by writing its own record (so the vector clock has N entries), was
        moved Up by the leader, and has seen the current version (all N in the seen set);
      - each record carries what a deployment's does: a heartbeat endpoint, a durable id, one role
        (test/bench/common/gossip_model.c builds it).
    and a second state that differs from it as gossip makes states differ: one observer's
    reachability row changed (a new clock) and a few members have seen that one.

    Figures (N = 10, 100, 1000):
      cluster_state_bytes_N       the encoded state (what one full-state gossip message carries);
                                  baseline: the same members' bare records (address, status,
                                  up-number, endpoint, id, role) packed back to back, the least any
                                  full state could be.
      cluster_state_merge_N_us    merging the differing state into a copy of the converged one;
                                  baseline: making that copy (shoal_crdt_clone), the least a
                                  merge that rebuilds could cost.
      gossip_state_wire_bytes_N   the whole state as a push carries it on loopback (zlib level 1
                                  above 32 KiB, framing and TCP headers included).
      gossip_status_wire_bytes_N  the digest-only GossipStatus; baseline the whole state.
      gossip_bytes_per_change_N   (N = 100, 1000) bytes each member sends to spread one change
                                  until every member holds it seen by all, from a simulation of
                                  membership's gossip policy with those message sizes (the median
                                  of 3 seeds); baseline one whole state. gossip_change_spread_N_ms
                                  is how long it took (2 ms a message, 5 ms a whole state).
      `bench_cluster_state --policies` prints the simulation for the policies membership could
      have chosen (see push_on_change in membership/gossip.c).
    The targets at 1,000 members: a merge <= 1 ms, <= 10 KB/s of gossip per member.
*/
#include "bench.h"
#include "ddata.h"
#include "gossip_model.h"
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define member_node gossip_model_node

static void member_endpoint(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "tcp://10.%d.%d.%d:2553", 1 + i / 65536, (i / 256) % 256, i % 256);
}

static void member_durable_id(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%016llx%016llx", (unsigned long long)i * 0x2545F4914F6CDD1DULL,
             (unsigned long long)i * 0x9E3779B97F4A7C15ULL);
}

/* The converged state of n members, as the leader (member 0) holds it. */
static cstate_t *converged_state(int n)
{
    return gossip_model_state(n);
}

/* A state as another member holds it a moment later: one observer could not reach one member
   for a while (its row changed), and that observer and a few others have seen the change. */
static cstate_t *gossiped_state(const cstate_t *base, int n)
{
    cstate_t *s = cstate_clone(base);
    const shoal_node_t *observer = member_node(n / 2), *subject = member_node(n / 2 + 1);
    cstate_set_unreachable(s, observer, &subject, 1);
    for (int i = 0; i < 5 && i < n; i++)
        cstate_mark_seen(s, member_node((n / 2 + i) % n));
    return s;
}

/* What the same members would be as bare records, packed back to back. */
static size_t bare_records_bytes(int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        char ep[64], did[40];
        member_endpoint(i, ep, sizeof ep);
        member_durable_id(i, did, sizeof did);
        total += strlen(shoal_node_id(member_node(i))) + 1 /* status */ + 4 /* up-number */ +
                 strlen(ep) + strlen(did) + strlen("backend");
    }
    return total;
}

/* ---------------------------------------------------------------------------------------------
 * One change spread through n members: membership's gossip policy (membership/gossip.c: push_on_change,
 * gossip_tick, choose_peer, gossip_to and the GossipStatus answers; the replicator's push-pull
 * and its digest anti-entropy) run over an abstract state, counting the bytes each member sends
 * with the real messages' sizes (gossip_model.h). A member's state is its clock (old or new: one
 * change) and the seen set of that clock; merges follow state.c's rules. Every message is ACKed
 * by one bare TCP segment. Timers start at random phases; a message takes 2 ms, 5 ms for a whole
 * state (decode and merge). The result: bytes per member for the change, and how long until
 * every member holds the new clock seen by all.
 */
#define SIM_WORDS ((1000 + 63) / 64)
typedef struct {
    uint64_t w[SIM_WORDS];
} simset_t;

typedef struct {
    int v;         /* 0: the old clock, 1: the new one */
    simset_t seen; /* who has seen v */
    int round;     /* gossip_tick's counter */
    uint64_t sent;
    int full_received;
} simnode_t;

enum { EV_TICK, EV_AE, EV_FULL, EV_STATUS, EV_AE_STATUS, EV_BUCKETS, EV_KEYS, EV_WANT, EV_GOSSIP };

typedef struct {
    double t;
    int kind, from, to, v, flag;
    simset_t seen;
} simev_t;

typedef struct {
    int n;
    simnode_t *node;
    simev_t *heap;
    size_t nh, caph;
    uint64_t rng;
    double now;
    size_t full, status, ae_status, buckets, keys; /* wire bytes of each message */
    double p_unseen;                               /* choose_peer's different-view probability */
    uint64_t messages;
    /* the policy: seen_push 0 = a change of the seen set alone is not pushed (the rounds spread
       it), 1 = pushed as digest-only statuses, 2 = pushed as whole states; status_first: the
       rounds send a digest-only status to every peer (with the clock's order, so that the newer
       side sends its whole state); ae_skip: the replicator's anti-entropy waits while the
       members' own rounds run (not everyone has seen the clock) */
    int seen_push;
    bool status_first, ae_skip;
} sim_t;

/* -1: membership's (1 up to reduce-gossip-different-view-probability members, else 0) */
static int sim_policy_seen_push = -1;
static bool sim_policy_status_first = true, sim_policy_ae_skip = true;

static bool sbit(const simset_t *s, int i)
{
    return (s->w[i / 64] >> (i % 64)) & 1u;
}

static void sset(simset_t *s, int i)
{
    s->w[i / 64] |= UINT64_C(1) << (i % 64);
}

static int scount(const simset_t *s)
{
    int c = 0;
    for (int k = 0; k < SIM_WORDS; k++)
        c += __builtin_popcountll(s->w[k]);
    return c;
}

static uint64_t sim_rand(sim_t *S)
{
    uint64_t x = S->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    S->rng = x;
    return x * UINT64_C(2685821657736338717);
}

static double sim_rnd(sim_t *S)
{
    return (double)(sim_rand(S) >> 11) / 9007199254740992.0;
}

static void sim_push(sim_t *S, simev_t e)
{
    if (S->nh == S->caph) {
        S->caph = S->caph ? 2 * S->caph : 4096;
        S->heap = realloc(S->heap, S->caph * sizeof *S->heap);
        if (!S->heap)
            abort();
    }
    size_t i = S->nh++;
    while (i && S->heap[(i - 1) / 2].t > e.t) {
        S->heap[i] = S->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S->heap[i] = e;
}

static simev_t sim_pop(sim_t *S)
{
    simev_t top = S->heap[0], last = S->heap[--S->nh];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= S->nh)
            break;
        if (c + 1 < S->nh && S->heap[c + 1].t < S->heap[c].t)
            c++;
        if (S->heap[c].t >= last.t)
            break;
        S->heap[i] = S->heap[c];
        i = c;
    }
    if (S->nh)
        S->heap[i] = last;
    return top;
}

/* A message from `from` (carrying its state now) to `to`. */
static void sim_send(sim_t *S, int kind, int from, int to, int flag)
{
    size_t bytes = kind == EV_FULL || kind == EV_WANT || kind == EV_GOSSIP ? S->full
                   : kind == EV_STATUS                                     ? S->status
                   : kind == EV_AE_STATUS                                  ? S->ae_status
                   : kind == EV_BUCKETS                                    ? S->buckets
                                                                           : S->keys;
    S->node[from].sent += bytes;
    S->node[to].sent += GOSSIP_MODEL_SEGMENT_HEADERS; /* its ACK */
    S->messages++;
    simev_t e = {.t = S->now + (bytes > 1000 ? 5.0 : 2.0),
                 .kind = kind,
                 .from = from,
                 .to = to,
                 .v = S->node[from].v,
                 .flag = flag,
                 .seen = S->node[from].seen};
    sim_push(S, e);
}

static bool sim_same(const simnode_t *a, int v, const simset_t *seen)
{
    return a->v == v && memcmp(&a->seen, seen, sizeof *seen) == 0;
}

/* state.c's merge of (clock, seen): true if the node's state changed */
static bool sim_merge(simnode_t *a, int v, const simset_t *seen)
{
    if (v < a->v)
        return false;
    if (v > a->v) {
        a->v = v;
        a->seen = *seen;
        return true;
    }
    bool changed = false;
    for (int k = 0; k < SIM_WORDS; k++) {
        uint64_t m = a->seen.w[k] | seen->w[k];
        changed |= m != a->seen.w[k];
        a->seen.w[k] = m;
    }
    return changed;
}

/* gossip_to: a member that has seen our clock gets the digest-only status (in rounds with
   status_first, every member does) */
static void sim_gossip_to(sim_t *S, int i, int j, bool round)
{
    bool status = sbit(&S->node[i].seen, j) || (round && S->status_first);
    sim_send(S, status ? EV_STATUS : EV_FULL, i, j, 0);
}

/* choose_peer over every other member */
static int sim_choose(sim_t *S, int i)
{
    if (sim_rnd(S) < S->p_unseen) {
        int unseen[64], k = 0;
        for (int j = 0; j < S->n && k < 64; j++)
            if (j != i && !sbit(&S->node[i].seen, j))
                unseen[k++] = j;
        if (k)
            return unseen[sim_rand(S) % (uint64_t)k];
    }
    int j = (int)(sim_rand(S) % (uint64_t)(S->n - 1));
    return j >= i ? j + 1 : j;
}

/* react: mark seen, then (a new clock only) push_on_change to two members, ones that have not
   seen first */
static void sim_react(sim_t *S, int i, bool new_clock)
{
    simnode_t *a = &S->node[i];
    sset(&a->seen, i);
    if (!new_clock && S->seen_push == 0)
        return;
    int cand[1000], k = 0;
    bool to_seers = !new_clock && S->seen_push == 3; /* members that hold the clock */
    for (int j = 0; j < S->n; j++)
        if (j != i && sbit(&a->seen, j) == to_seers)
            cand[k++] = j;
    if (!k)
        for (int j = 0; j < S->n; j++)
            if (j != i)
                cand[k++] = j;
    for (int f = 0; f < 2 && k; f++) {
        int x = (int)(sim_rand(S) % (uint64_t)k);
        if (!new_clock && (S->seen_push == 1 || S->seen_push == 3))
            sim_send(S, EV_STATUS, i, cand[x], 0);
        else
            sim_gossip_to(S, i, cand[x], false);
        cand[x] = cand[--k];
    }
}

static bool sim_done(const sim_t *S)
{
    for (int i = 0; i < S->n; i++)
        if (S->node[i].v != 1 || scount(&S->node[i].seen) != S->n)
            return false;
    return true;
}

static void sim_event(sim_t *S, const simev_t *e)
{
    simnode_t *a = &S->node[e->to];
    switch (e->kind) {
    case EV_TICK: { /* gossip_tick, three times per gossip interval */
        a->round++;
        sim_push(S, (simev_t){.t = S->now + 1000.0 / 3, .kind = EV_TICK, .to = e->to});
        int seen = scount(&a->seen);
        if (seen >= S->n)
            return; /* converged on seen: the replicator's digest status is enough */
        sim_gossip_to(S, e->to, sim_choose(S, e->to), true);
        return;
    }
    case EV_AE: /* the system replicator's anti-entropy round */
        sim_push(S, (simev_t){.t = S->now + 1000.0, .kind = EV_AE, .to = e->to});
        if (S->ae_skip && scount(&a->seen) < S->n)
            return;
        sim_send(S, EV_AE_STATUS, e->to, sim_choose(S, e->to), 0);
        return;
    case EV_AE_STATUS:
        if (!sim_same(a, e->v, &e->seen))
            sim_send(S, EV_BUCKETS, e->to, e->from, 0);
        return;
    case EV_BUCKETS:
        if (!sim_same(a, e->v, &e->seen))
            sim_send(S, EV_KEYS, e->to, e->from, 0);
        return;
    case EV_KEYS:
        if (!sim_same(a, e->v, &e->seen))
            sim_send(S, EV_WANT, e->to, e->from, 0); /* our state, and we want theirs */
        return;
    case EV_WANT:
    case EV_GOSSIP:
    case EV_FULL: {
        a->full_received++;
        int v0 = a->v;
        bool changed = sim_merge(a, e->v, &e->seen);
        if (e->kind == EV_WANT)
            sim_send(S, EV_GOSSIP, e->to, e->from, 0);
        else if (e->kind == EV_FULL && !sim_same(a, e->v, &e->seen))
            sim_send(S, EV_FULL, e->to, e->from, 0); /* push-pull: it lacked something */
        if (changed)
            sim_react(S, e->to, a->v != v0);
        return;
    }
    case EV_STATUS:
        if (a->v != e->v) {
            /* another clock: the newer side sends its whole state (the clock's sum tells which
               one may be newer); without status_first the receiver always does */
            if (!S->status_first || a->v > e->v)
                sim_send(S, EV_FULL, e->to, e->from, 0);
            else if (!e->flag)
                sim_send(S, EV_STATUS, e->to, e->from, 1);
            return;
        }
        bool missing = false;
        for (int k = 0; k < SIM_WORDS; k++)
            missing |= (a->seen.w[k] & ~e->seen.w[k]) != 0;
        if (missing && !e->flag)
            sim_send(S, EV_STATUS, e->to, e->from, 1);
        if (sim_merge(a, e->v, &e->seen))
            sim_react(S, e->to, false);
        return;
    }
}

typedef struct {
    double bytes_per_member, converge_ms, full_per_member, messages_per_member;
} sim_result_t;

static sim_result_t simulate_change(int n, uint64_t seed)
{
    cstate_t *st = converged_state(n);
    sim_t S = {.n = n, .rng = seed | 1};
    gossip_model_change_bytes(st, &S.full, &S.status);
    cstate_destroy(&st);
    gossip_model_idle_t idle = gossip_model_idle(n, 0);
    S.ae_status = idle.status_bytes;
    S.buckets = gossip_model_wire_bytes(38 /* K_BUCKETS */, 256 * 16 + 16);
    S.keys = gossip_model_wire_bytes(39 /* K_KEY_DIGESTS */, 48);
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_default(&cs);
    S.p_unseen = cs.gossip_different_view_probability;
    if (n > (int)cs.reduce_gossip_different_view_probability)
        S.p_unseen = S.p_unseen * cs.reduce_gossip_different_view_probability / n;
    S.seen_push = sim_policy_seen_push >= 0                              ? sim_policy_seen_push
                  : n > (int)cs.reduce_gossip_different_view_probability ? 0
                                                                         : 1;
    S.status_first = sim_policy_status_first;
    S.ae_skip = sim_policy_ae_skip;
    S.node = calloc((size_t)n, sizeof *S.node);
    if (!S.node)
        abort();
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            sset(&S.node[i].seen, j); /* converged on the old clock */
        sim_push(&S, (simev_t){.t = sim_rnd(&S) * 1000.0 / 3, .kind = EV_TICK, .to = i});
        sim_push(&S, (simev_t){.t = sim_rnd(&S) * 1000.0, .kind = EV_AE, .to = i});
    }
    /* the change, at member 0 (the leader moves someone Up, say) */
    S.node[0].v = 1;
    memset(&S.node[0].seen, 0, sizeof S.node[0].seen);
    sim_react(&S, 0, true);
    uint64_t quiet_messages = 0;
    while (S.nh && S.now < 600000.0) {
        simev_t e = sim_pop(&S);
        S.now = e.t;
        sim_event(&S, &e);
        if (sim_done(&S)) {
            quiet_messages = S.messages;
            break;
        }
    }
    sim_result_t r = {0};
    r.converge_ms = S.now;
    uint64_t total = 0, full = 0;
    for (int i = 0; i < n; i++) {
        total += S.node[i].sent;
        full += (uint64_t)S.node[i].full_received;
    }
    r.bytes_per_member = (double)total / n;
    r.full_per_member = (double)full / n;
    r.messages_per_member = (double)quiet_messages / n;
    free(S.node);
    free(S.heap);
    return r;
}

typedef struct {
    const cstate_t *base, *other;
} merge_arg_t;

static void do_clone(void *arg)
{
    merge_arg_t *m = arg;
    shoal_crdt_t *c = shoal_crdt_clone(&m->base->base);
    bench_sink((uintptr_t)c);
    shoal_crdt_destroy(&c);
}

static void do_clone_merge(void *arg)
{
    merge_arg_t *m = arg;
    shoal_crdt_t *c = shoal_crdt_clone(&m->base->base);
    if (shoal_crdt_merge(c, &m->other->base) != 0) {
        fprintf(stderr, "bench_cluster_state: merge failed\n");
        exit(1);
    }
    bench_sink((uintptr_t)c);
    shoal_crdt_destroy(&c);
}

int main(int argc, char **argv)
{
    cstate_register();
    if (argc == 2 && strcmp(argv[1], "--policies") == 0) {
        /* diagnosis: every policy of the simulation at 10, 25, 100, 1000 members */
        static const int ns[] = {10, 25, 100, 1000};
        for (int sp = 0; sp < 4; sp++)
            for (int sf = 1; sf < 2; sf++)
                for (int ae = 0; ae < 2; ae++) {
                    if (sp == 2)
                        continue;
                    sim_policy_seen_push = sp;
                    sim_policy_status_first = sf;
                    sim_policy_ae_skip = ae;
                    printf("seen_push=%d status_first=%d ae_skip=%d:", sp, sf, ae);
                    for (size_t k = 0; k < 4; k++) {
                        sim_result_t r = {0};
                        for (int sd = 0; sd < 3; sd++) {
                            sim_result_t x =
                                simulate_change(ns[k], 0x5eed + (uint64_t)(k * 3 + sd));
                            r.bytes_per_member += x.bytes_per_member / 3;
                            r.converge_ms += x.converge_ms / 3;
                            r.full_per_member += x.full_per_member / 3;
                        }
                        printf("  n=%d %.0f B %.0f ms %.1f full", ns[k], r.bytes_per_member,
                               r.converge_ms, r.full_per_member);
                    }
                    printf("\n");
                    fflush(stdout);
                }
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: bench_cluster_state [--policies]\n");
        return 2;
    }
    static const int sizes[] = {10, 100, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int n = sizes[k];
        cstate_t *a = converged_state(n), *b = gossiped_state(a, n);
        shoal_buf_t enc = {0};
        if (shoal_crdt_encode(&a->base, &enc) != 0) {
            fprintf(stderr, "bench_cluster_state: encode failed\n");
            return 1;
        }
        char name[64];
        snprintf(name, sizeof name, "cluster_state_bytes_%d", n);
        bench_report(name, (double)enc.len, "B", (double)bare_records_bytes(n));
        shoal_buf_free(&enc);

        merge_arg_t m = {a, b};
        int reps = n >= 1000 ? 5 : 20;
        double clone_ms = bench_time_ms(do_clone, &m, reps);
        double both_ms = bench_time_ms(do_clone_merge, &m, reps);
        double merge_us = (both_ms - clone_ms) * 1000.0;
        if (merge_us < 0)
            merge_us = 0;
        snprintf(name, sizeof name, "cluster_state_merge_%d_us", n);
        bench_report(name, merge_us, "us", clone_ms * 1000.0);
        cstate_destroy(&a);
        cstate_destroy(&b);
    }
    /* one change through 100 and 1,000 members (median of 3 seeds) */
    static const int sim_n[] = {100, 1000};
    for (size_t k = 0; k < sizeof sim_n / sizeof sim_n[0]; k++) {
        int n = sim_n[k];
        sim_result_t r[3];
        for (int s = 0; s < 3; s++)
            r[s] = simulate_change(n, 0x5eed0000u + (uint64_t)s * 7919u + (uint64_t)n);
        for (int a = 1; a < 3; a++)
            for (int b = a; b > 0 && r[b - 1].bytes_per_member > r[b].bytes_per_member; b--) {
                sim_result_t t = r[b];
                r[b] = r[b - 1];
                r[b - 1] = t;
            }
        cstate_t *st = converged_state(n);
        size_t full = 0, status = 0;
        gossip_model_change_bytes(st, &full, &status);
        cstate_destroy(&st);
        char name[64];
        snprintf(name, sizeof name, "gossip_state_wire_bytes_%d", n);
        bench_report(name, (double)full, "B", 0);
        snprintf(name, sizeof name, "gossip_status_wire_bytes_%d", n);
        bench_report(name, (double)status, "B", (double)full);
        snprintf(name, sizeof name, "gossip_bytes_per_change_%d", n);
        bench_report(name, r[1].bytes_per_member, "B", (double)full);
        snprintf(name, sizeof name, "gossip_change_spread_%d_ms", n);
        bench_report(name, r[1].converge_ms, "ms", 0);
        bench_note("gossip_bytes_per_change_%d: bytes each member sends (ACKs included) to spread "
                   "one change until all %d hold it seen by all, simulated with the real message "
                   "sizes and membership's policy; baseline one whole state on the wire "
                   "(zlib level 1); %.1f whole states received and %.0f messages per member",
                   n, n, r[1].full_per_member, r[1].messages_per_member);
    }
    bench_note("cluster_state_bytes_N: baseline the members' bare records back to back; "
               "cluster_state_merge_N_us: baseline a copy of the state (shoal_crdt_clone); "
               "targets at 1000: merge <= 1000 us");
    return 0;
}
