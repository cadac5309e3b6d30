/*  test_fence.c — at most one live entity when one side of a partition learns of it later (THE
    FENCE in membership.h), with real member nodes on loopback in this process and fast timings.

    Three members host 30 shards' entities, told without pause from a member that stays on the
    kept side. One member is cut off by the transport's fault injection (both ways, only its
    sends, only its receipts; the coordinator's host or another; keep-majority and keep-oldest).
    The kept side downs and removes it and reallocates its shards; the cut-off member must have
    stopped them first. The shared table of the counter type (test/common/shards.c) checks at every
    entity start that no other incarnation is alive (same process, one clock): a breach fails the
    test. The cut-off member must also have fenced itself (its `fenced` counter) — not merely been
    lucky — and every entity must be alive again on the kept side. And the settings check: timings
    under which the fence cannot come before the reallocation are refused, naming the keys.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "members.h"
#include "shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NIDS 30

static tsender_t *sender;

static int teardown(void **state)
{
    tsender_free(&sender);
    return tsnode_teardown(state);
}

typedef struct {
    int cut;               /* the member cut off */
    shoal_fault_dir_t dir; /* BOTH, OUT (only its sends), IN (only its receipts) */
    shoal_sbr_strategy_t strategy;
    uint32_t quorum; /* static-quorum's quorum-size */
} fence_case_t;

/* every entity has a live incarnation on a member other than `cut` */
typedef struct {
    char (*ids)[32];
    int cut;
} moved_t;

static bool all_moved(void *arg)
{
    moved_t *m = arg;
    for (int k = 0; k < NIDS; k++) {
        trec_t r = trec_get(TSHARD_TYPE, m->ids[k]);
        if (!r.live || r.node == m->cut)
            return false;
    }
    return true;
}

static bool hosts_shards(void *arg)
{
    return tsnode_shard_count(*(int *)arg) > 0;
}

static bool has_fenced(void *arg)
{
    int i = *(int *)arg;
    shoal_cluster_stats_t st;
    return shoal_cluster_stats(tsn[i].cl, &st) == 0 && st.fenced > 0;
}

static void run_case(const fence_case_t *fc)
{
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.sbr_strategy = fc->strategy;
    if (fc->quorum)
        cs.static_quorum_size = fc->quorum;
    tsnode_opts_t o = {.cluster = &cs, .seed = 0};
    tsnode_start(0, &o); /* node 0 first: the oldest, the coordinator's host */
    tsnode_wait_up(1u, 15000);
    tsnode_start(1, &o);
    tsnode_start(2, &o);
    tsnode_wait_up(0x7, 20000);
    tsnode_wait_registered(0x7, 0, 3, 15000);
    assert_int_equal(tsnode_oldest(1), 0);

    shoal_sharding_settings_t ss;
    tshard_settings(&ss);
    char ids[NIDS][32];
    tshard_pick_ids("f", ss.number_of_shards, NIDS, ids);
    int from = fc->cut == 1 ? 2 : 1; /* the sender stays on the kept side */
    sender = tsender_start(tsn[from].r, "s", ids, NIDS, 2000);
    assert_true(tsender_wait_rounds(sender, 5, 20000));
    int host = fc->cut;
    if (!wait_until(hosts_shards, &host, 20000)) /* it hosts entities that will move */
        fail_msg("member %d hosts no shard", host);

    /* the cut: between the member and each other member, in the direction asked */
    shoal_fault_t f = {.dir = fc->dir, .cut = true};
    for (int i = 0; i < 3; i++)
        if (i != fc->cut)
            assert_int_equal(
                shoal_system_fault(tsn[fc->cut].sys, shoal_system_endpoint(tsn[i].sys), &f), 0);
    int64_t t0 = shoal_now_ms();

    /* the kept side removes it and starts its entities */
    unsigned kept = 0x7 & ~(1u << fc->cut);
    tsnode_wait_up(kept, 30000);
    moved_t m = {ids, fc->cut};
    if (!wait_until(all_moved, &m, 30000))
        fail_msg("the cut-off member's entities did not all start on the kept side");
    int cut = fc->cut;
    /* the cut-off member fenced itself (its counter outlives a later stop by its resolver) */
    bool fenced = has_fenced(&cut);
    print_message("cut %d (dir %d, strategy %d): kept side converged, entities moved %lld ms "
                  "after the cut; fenced %d\n",
                  fc->cut, (int)fc->dir, (int)fc->strategy, (long long)(shoal_now_ms() - t0),
                  fenced);
    assert_true(fenced);
    ttotals_t t = trec_totals();
    if (t.double_entity || t.double_shard)
        fail_msg("%d entities and %d shards were alive on two members at once", t.double_entity,
                 t.double_shard);
}

static void test_two_way_cut(void **state)
{
    (void)state;
    run_case(&(fence_case_t){2, SHOAL_FAULT_BOTH, SHOAL_SBR_KEEP_MAJORITY});
}

static void test_two_way_cut_coordinator(void **state)
{
    (void)state;
    run_case(&(fence_case_t){0, SHOAL_FAULT_BOTH, SHOAL_SBR_KEEP_MAJORITY});
}

static void test_one_way_out(void **state)
{
    (void)state;
    run_case(&(fence_case_t){2, SHOAL_FAULT_OUT, SHOAL_SBR_KEEP_MAJORITY});
}

static void test_one_way_in_coordinator(void **state)
{
    (void)state;
    run_case(&(fence_case_t){0, SHOAL_FAULT_IN, SHOAL_SBR_KEEP_MAJORITY});
}

static void test_keep_oldest_cut(void **state)
{
    (void)state;
    run_case(&(fence_case_t){2, SHOAL_FAULT_BOTH, SHOAL_SBR_KEEP_OLDEST});
}

static void test_keep_oldest_cut_oldest(void **state)
{
    (void)state;
    /* the oldest cut off alone: down-if-alone, so the other two are kept and it must fence */
    run_case(&(fence_case_t){0, SHOAL_FAULT_BOTH, SHOAL_SBR_KEEP_OLDEST});
}

static void test_static_quorum_cut_coordinator(void **state)
{
    (void)state;
    /* quorum 2 of 3: the two others keep themselves; the coordinator's host, alone, must fence */
    run_case(&(fence_case_t){0, SHOAL_FAULT_BOTH, SHOAL_SBR_STATIC_QUORUM, 2});
}

static bool is_terminated(void *arg)
{
    return shoal_cluster_terminated(tsn[*(int *)arg].cl);
}

/* The fence judges by the resolver's own rule: keep-oldest (down-if-alone) with two members cut
   apart keeps the oldest (down-if-alone needs two or more against it), so the oldest must not
   fence itself (its shards stopped for nothing), while the other, which its resolver downs, must.
   Found by the conformance suite (SplitBrainResolverIntegrationSpec, keep-oldest 1+1). */
static void test_keep_oldest_one_against_one(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.sbr_strategy = SHOAL_SBR_KEEP_OLDEST;
    assert_true(cs.keep_oldest_down_if_alone);
    tsnode_opts_t o = {.cluster = &cs, .seed = 0};
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    tsnode_start(1, &o);
    tsnode_wait_up(0x3, 20000);
    tsnode_wait_registered(0x3, 0, 2, 15000);
    shoal_sharding_settings_t ss;
    tshard_settings(&ss);
    char ids[NIDS][32];
    tshard_pick_ids("o", ss.number_of_shards, NIDS, ids);
    sender = tsender_start(tsn[0].r, "s", ids, NIDS, 2000);
    assert_true(tsender_wait_rounds(sender, 5, 20000));

    shoal_fault_t f = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(tsn[1].sys, shoal_system_endpoint(tsn[0].sys), &f), 0);
    int one = 1, zero = 0;
    if (!wait_until(is_terminated, &one, 30000))
        fail_msg("member 1 was not downed");
    moved_t m = {ids, 1};
    if (!wait_until(all_moved, &m, 30000))
        fail_msg("member 1's entities did not all start on member 0");
    bool fenced0 = has_fenced(&zero), fenced1 = has_fenced(&one);
    print_message("keep-oldest 1+1: the oldest fenced itself: %d (must not); the other: %d\n",
                  fenced0, fenced1);
    assert_false(fenced0);
    assert_true(fenced1);
    ttotals_t t = trec_totals();
    if (t.double_entity || t.double_shard)
        fail_msg("%d entities and %d shards were alive on two members at once", t.double_entity,
                 t.double_shard);
}

/* Timings under which a cut-off member could still host its shards when the other side
   reallocates them are refused when sharding starts, naming the keys. */
static void test_settings_check(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    shoal_cluster_settings_default(&cs);
    char err[512] = "";
    assert_int_equal(shoal_cluster_fence_check(&cs, err, sizeof err), 0);
    shoal_cluster_settings_fast(&cs);
    assert_int_equal(shoal_cluster_fence_check(&cs, err, sizeof err), 0);
    assert_int_equal(shoal_cluster_fence_after_ms(&cs),
                     cs.acceptable_heartbeat_pause_ms + cs.stable_after_ms / 2);
    cs.fence_after_ms = cs.acceptable_heartbeat_pause_ms + cs.stable_after_ms; /* no margin */
    assert_int_equal(shoal_cluster_fence_check(&cs, err, sizeof err), SHOAL_EINVAL);
    assert_non_null(strstr(err, "fence-after"));
    assert_non_null(strstr(err, "fence-margin"));
    assert_non_null(strstr(err, "acceptable-heartbeat-pause"));
    assert_non_null(strstr(err, "stable-after"));
    cs.sbr_strategy = SHOAL_SBR_OFF; /* downing off: the leader waits out the fence instead */
    assert_int_equal(shoal_cluster_fence_check(&cs, err, sizeof err), 0);

    /* sharding refuses to start on such a member */
    shoal_cluster_settings_t bad;
    tmember_settings(&bad);
    bad.fence_margin_ms = bad.acceptable_heartbeat_pause_ms + bad.stable_after_ms;
    shoal_system_settings_t sys_s;
    shoal_system_settings_default(&sys_s);
    sys_s.endpoint = "tcp://127.0.0.1:0";
    int e = 0;
    tsn[0].sys = shoal_system_new(&sys_s, &e);
    assert_non_null(tsn[0].sys);
    tsn[0].cl = shoal_cluster_new(tsn[0].sys, &bad, &e);
    assert_non_null(tsn[0].cl);
    assert_null(shoal_sharding_new(tsn[0].cl, &e));
    assert_int_equal(e, SHOAL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_settings_check, teardown),
        cmocka_unit_test_teardown(test_two_way_cut, teardown),
        cmocka_unit_test_teardown(test_two_way_cut_coordinator, teardown),
        cmocka_unit_test_teardown(test_one_way_out, teardown),
        cmocka_unit_test_teardown(test_one_way_in_coordinator, teardown),
        cmocka_unit_test_teardown(test_keep_oldest_cut, teardown),
        cmocka_unit_test_teardown(test_keep_oldest_cut_oldest, teardown),
        cmocka_unit_test_teardown(test_static_quorum_cut_coordinator, teardown),
        cmocka_unit_test_teardown(test_keep_oldest_one_against_one, teardown),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
