/*  bench_cluster_state.c — the cluster state at sizes this machine cannot run as processes.

    The membership state (membership/state.h) is what gossip carries and every node merges; its
    size and its merge cost decide how far a cluster grows. This program builds real states, with
    the real code, as a cluster of N members would hold them once converged:
      - every member joined by writing its own record (so the vector clock has N entries), was
        moved Up by the leader, and has seen the current version (the seen table holds N clocks);
      - each record carries what a deployment's does: a heartbeat endpoint, a durable id, one role.
    and a second state that differs from it as gossip makes states differ: one observer's
    reachability row changed and a few members marked seen on one side only.

    Figures (N = 10, 100, 1000):
      cluster_state_bytes_N       the encoded state (what one full-state gossip message carries);
                                  baseline: the same members' bare records (address, status,
                                  up-number, endpoint, id, role) packed back to back, the least any
                                  full state could be.
      cluster_state_merge_N_us    merging the differing state into a copy of the converged one;
                                  baseline: making that copy (shoal_crdt_clone), the least a
                                  merge that rebuilds could cost.
    The targets at 1,000 members: a merge <= 1 ms, <= 10 KB/s of gossip per member.
*/
#include "bench.h"
#include "ddata.h"
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const shoal_node_t *member_node(int i)
{
    char id[96];
    snprintf(id, sizeof id, "10.%d.%d.%d:2552:%llu", 1 + i / 65536, (i / 256) % 256, i % 256,
             (unsigned long long)(0x9e3779b97f4a7c15ULL * (unsigned long long)(i + 1)));
    return shoal_node_intern(id);
}

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
    cstate_t *s = cstate_new();
    const shoal_node_t *leader = member_node(0);
    const char *roles[] = {"backend"};
    for (int i = 0; i < n; i++) {
        char ep[64], did[40];
        member_endpoint(i, ep, sizeof ep);
        member_durable_id(i, did, sizeof did);
        const shoal_node_t *m = member_node(i);
        if (cstate_add_member(s, m, m, roles, 1, "1.0.0", ep, NULL, 0, did) != 0) {
            fprintf(stderr, "bench_cluster_state: cannot add member %d\n", i);
            exit(1);
        }
    }
    for (int i = 0; i < n; i++) {
        cstate_set_status(s, leader, member_node(i), SHOAL_MEMBER_UP);
        cstate_set_up_number(s, leader, member_node(i), (uint64_t)i + 1);
    }
    for (int i = 0; i < n; i++)
        cstate_mark_seen(s, member_node(i));
    return s;
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

int main(void)
{
    cstate_register();
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
    bench_note("cluster_state_bytes_N: baseline the members' bare records back to back; "
               "cluster_state_merge_N_us: baseline a copy of the state (shoal_crdt_clone); "
               "targets at 1000: merge <= 1000 us");
    return 0;
}
