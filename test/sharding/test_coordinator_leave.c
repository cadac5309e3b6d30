/*  test_coordinator_leave.c — a graceful leave loses no tell and reorders none, whichever node
    leaves: the one that hosts the shard coordinator (the coordinator singleton moves to another
    node during the very leave that hands the shards off) and one that does not.

    Three member nodes (fast cluster and sharding settings, the split-brain resolver on), one
    entity type with 30 shards and one entity in each, spread over the three nodes. Two sender
    threads, on the two nodes that stay, tell every entity "<sender>:<seq>" (per entity seq from
    1) every 1.5 ms. After about a second of that the leaver calls shoal_cluster_leave; the senders
    go on until it has terminated and a while after. Every entity checks, per sender, that each
    seq is the last one + 1 (test/common/shards.h counts a gap, a duplicate or a reordering as an
    order error): docs/guarantees.md promises every message, in per-sender order, across a
    handoff, so a total alone would not do (the last message of each sender arrived even when six
    in the middle were lost).

    Two rounds per case by default (LEAVE_ROUNDS=n for more), each a fresh cluster: the loss
    depends on timing. On 672634c the coordinator's node leaving lost or reordered tells in 15 of
    15 rounds (5 runs of 3), the other node's leave in none.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "members.h"
#include "shards.h"

#define T        TSHARD_TYPE
#define N_IDS    30
#define PAUSE_US 1500

static bool is_terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

static void wait_all_init(char (*ids)[32])
{
    for (int64_t end = shoal_now_ms() + 10000 * tscale(); shoal_now_ms() < end;) {
        int k = 0;
        while (k < N_IDS && trec_last(T, ids[k], "init") == 1)
            k++;
        if (k == N_IDS)
            return;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fail_msg("the entities did not all start");
}

/* One round: a fresh cluster of three, node `leaver` leaves while the other two keep telling.
   Returns the order errors seen (gaps, duplicates, reorderings), after checking what must hold
   whatever the round's timing. */
static int leave_round(int leaver, int round)
{
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = N_IDS;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.phase_timeout_ms = 10000u * (uint32_t)tscale(); /* the handoff must not be cut short */
    tsnode_opts_t o = {.sharding = &s, .cluster = &cs, .seed = 0};
    /* node 0 first and alone, so it is the oldest member: the coordinator's host */
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    for (int i = 1; i < 3; i++)
        tsnode_start(i, &o);
    tsnode_wait_up(0x7, 20000);
    tsnode_wait_registered(0x7, 0, 3, 15000);
    assert_int_equal(tsnode_oldest(1), 0);
    for (int i = 0; i < 3; i++)
        tdl_watch(i);

    char ids[N_IDS][32];
    tshard_pick_ids("cl", N_IDS, N_IDS, ids);
    for (int k = 0; k < N_IDS; k++)
        assert_int_equal(shoal_region_tell(tsn[0].r, ids[k], "init:1", 6), 0);
    wait_all_init(ids);
    int hosted = tsnode_shard_count(leaver);
    assert_true(hosted > 0);
    assert_int_equal(trec_live_on(T, leaver), hosted);

    int stay[2], k2 = 0;
    for (int i = 0; i < 3; i++)
        if (i != leaver)
            stay[k2++] = i;
    tsender_t *a = tsender_start(tsn[stay[0]].r, "a", ids, N_IDS, PAUSE_US);
    tsender_t *b = tsender_start(tsn[stay[1]].r, "b", ids, N_IDS, PAUSE_US);
    /* about a second of telling (a round is 30 tells and a 1.5 ms pause) */
    assert_true(tsender_wait_rounds(a, 400, 15000));
    int64_t t0 = shoal_now_ms();
    assert_int_equal(shoal_cluster_leave(tsn[leaver].cl, NULL), 0);
    assert_true(wait_until(is_terminated, tsn[leaver].cl, 40000));
    int64_t took = shoal_now_ms() - t0;
    /* every shard was handed off before the node's cluster part finished */
    assert_int_equal(trec_live_on(T, leaver), 0);
    assert_true(tsender_wait_rounds(a, 200, 15000));
    assert_true(tsender_wait_rounds(b, 200, 15000));
    tsender_stop(a);
    tsender_stop(b);
    assert_int_equal(a->errors, 0);
    assert_int_equal(b->errors, 0);
    /* the last seq of each sender reaches each entity (a total check: passes with gaps); a
       round whose last tells never arrive counts as failed, the per-seq check below says how */
    int gaps = 0, moved = 0;
    if (!tsender_all_received(a, T, 3000) || !tsender_all_received(b, T, 3000)) {
        fprintf(stderr, "round %d (node %d leaves): the last tells did not all arrive\n", round,
                leaver);
        gaps++;
    }

    for (int k = 0; k < N_IDS; k++) {
        trec_t r = trec_get(T, ids[k]);
        if (r.starts > 1)
            moved++;
        if (r.order_errors) {
            gaps += r.order_errors;
            fprintf(stderr,
                    "round %d (node %d leaves): %s: %d order errors, started %d times, "
                    "now on node %d\n",
                    round, leaver, ids[k], r.order_errors, r.starts, r.node);
        }
        /* nothing lost nor doubled: every seq of each sender exactly once (seq 1.. sent) */
        for (int j = 0; j < r.n_senders; j++) {
            const tsender_t *snd = strcmp(r.senders[j].name, "a") == 0   ? a
                                   : strcmp(r.senders[j].name, "b") == 0 ? b
                                                                         : NULL;
            if (snd && r.senders[j].count != snd->sent[k]) {
                fprintf(stderr, "round %d: %s: %ld messages from %s, %ld sent\n", round, ids[k],
                        r.senders[j].count, r.senders[j].name, snd->sent[k]);
                gaps++;
            }
        }
    }
    ttotals_t t = trec_totals();
    printf("round %d: node %d (%s) left with %d shards in %lld ms; %d entities moved; %ld/%ld "
           "rounds sent; %d order errors\n",
           round, leaver, leaver == 0 ? "the coordinator's" : "not the coordinator's", hosted,
           (long long)took, moved, a->rounds, b->rounds, gaps);
    fflush(stdout);
    assert_true(moved >= hosted);
    assert_int_equal(t.double_entity, 0);
    assert_int_equal(t.double_shard, 0);
    assert_int_equal(tdl_total(), 0);
    /* the leave ended by itself, not at handoff-timeout */
    assert_true(took < (int64_t)s.handoff_timeout_ms);
    tsender_free(&a);
    tsender_free(&b);
    tsnode_teardown(NULL);
    return gaps;
}

static int rounds(void)
{
    const char *e = getenv("LEAVE_ROUNDS");
    int n = e ? atoi(e) : 2;
    return n > 0 ? n : 2;
}

static void run_rounds(int leaver)
{
    int failed = 0, n = rounds();
    for (int i = 0; i < n; i++)
        failed += leave_round(leaver, i) > 0;
    printf("node %d leaving: %d of %d rounds lost or reordered tells\n", leaver, failed, n);
    assert_int_equal(failed, 0);
}

/* The node that hosts the coordinator leaves: its shards and the coordinator move at once. */
static void test_coordinator_node_leaves(void **state)
{
    (void)state;
    run_rounds(0);
}

/* A node that does not host the coordinator leaves (as on 2026-11-25: nothing lost). */
static void test_other_node_leaves(void **state)
{
    (void)state;
    run_rounds(2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_coordinator_node_leaves, tsnode_teardown),
        cmocka_unit_test_teardown(test_other_node_leaves, tsnode_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
