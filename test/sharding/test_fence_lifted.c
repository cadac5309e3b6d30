/*  test_fence_lifted.c — after the fence is lifted (THE FENCE in membership.h), the shards it
    stopped come back: the entities answer again, on the member the coordinator's allocation
    names, within a deadline.

    Three members (keep-majority) host 30 entities. One member is cut off from the others, both
    ways, until it has fenced itself and stopped its shards; the link is healed before the others
    can down it (fence-after is set well below acceptable-heartbeat-pause + stable-after), so it
    stays a member, the coordinator's allocation still names it, and its fence is lifted on
    contact again. Every entity must then answer, asked through each member, and so must 10 new
    entities (of shards not allocated yet: the coordinator must be able to allocate again).
    Cut off: member 2, or member 0, the coordinator's host, whose singleton stops with the fence
    and starts again, on the same node and so with the same term, when it is lifted. Found by
    the conformance suite (SplitBrainResolverIntegrationSpec, docs/conformance.md): a kept side
    whose fence was lifted never answered again (the regions did not register with the
    coordinator's new incarnation, which then had nowhere to allocate a shard).
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

#define NIDS 30
#define NNEW 10

static char ids[NIDS + NNEW][32]; /* the first NIDS before the cut, the others after the heal */

static int teardown(void **state)
{
    return tsnode_teardown(state);
}

/* The node index that answers "whoami" for ids[k] asked through `via` (-1: no answer). */
static int whoami(int via, int k, uint32_t timeout_ms)
{
    shoal_buf_t b = {0};
    int rc = shoal_region_ask_sync(tsn[via].r, ids[k], "whoami", 6, timeout_ms, &b);
    int node = rc == 0 ? atoi(shoal_buf_cstr(&b)) : -1;
    shoal_buf_free(&b);
    return node;
}

/* every entity answers through every member, each ask within a second (scaled) */
static bool all_answer(void *arg)
{
    (void)arg;
    for (int via = 0; via < 3; via++)
        for (int k = 0; k < NIDS + NNEW; k++)
            if (whoami(via, k, 1000u * (uint32_t)tscale()) < 0)
                return false;
    return true;
}

static bool has_fenced(void *arg)
{
    shoal_cluster_stats_t st;
    return shoal_cluster_stats(tsn[*(int *)arg].cl, &st) == 0 && st.fenced > 0;
}

static bool hosts_none(void *arg)
{
    return tsnode_shard_count(*(int *)arg) == 0;
}

static bool lifted(void *arg)
{
    return shoal_cluster_may_host(tsn[*(int *)arg].cl);
}

static void run_case(int cut_member)
{
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.sbr_strategy = SHOAL_SBR_KEEP_MAJORITY;
    /* fenced 1 s (scaled) after the pause begins, downed no earlier than pause + stable-after:
       the heal comes between the two */
    cs.fence_after_ms = cs.acceptable_heartbeat_pause_ms + 1000u * (uint32_t)tscale();
    tsnode_opts_t o = {.cluster = &cs, .seed = 0};
    tsnode_start(0, &o); /* the oldest: the coordinator's host, on the kept side */
    tsnode_wait_up(1u, 15000);
    tsnode_start(1, &o);
    tsnode_start(2, &o);
    tsnode_wait_up(0x7, 20000);
    tsnode_wait_registered(0x7, 0, 3, 15000);

    shoal_sharding_settings_t ss;
    tshard_settings(&ss);
    tshard_pick_ids("l", ss.number_of_shards, NIDS + NNEW, ids);
    int via = cut_member == 0 ? 1 : 0, on_cut = 0;
    for (int k = 0; k < NIDS; k++) {
        int home = -1;
        for (int64_t end = shoal_now_ms() + 10000 * tscale(); home < 0 && shoal_now_ms() < end;)
            home = whoami(cut_member, k, 2000u * (uint32_t)tscale());
        assert_true(home >= 0);
        on_cut += home == cut_member;
    }
    if (on_cut == 0)
        fail_msg("member %d hosts none of the %d entities: nothing for the fence to stop",
                 cut_member, NIDS);

    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    for (int i = 0; i < 3; i++)
        if (i != cut_member)
            assert_int_equal(
                shoal_system_fault(tsn[cut_member].sys, shoal_system_endpoint(tsn[i].sys), &cut),
                0);
    if (!wait_until(has_fenced, &cut_member, 10000) || !wait_until(hosts_none, &cut_member, 5000))
        fail_msg("member %d did not fence itself and stop its shards", cut_member);
    assert_int_equal(shoal_system_heal(tsn[cut_member].sys), 0);
    int64_t t0 = shoal_now_ms();
    if (!wait_until(lifted, &cut_member, 10000))
        fail_msg("member %d's fence was not lifted after the heal", cut_member);
    tsnode_wait_up(0x7, 10000); /* still a member: healed before the resolver decided */

    bool ok = wait_until(all_answer, NULL, 10000);
    int back = 0;
    for (int k = 0; k < NIDS && ok; k++)
        back += whoami(via, k, 1000u * (uint32_t)tscale()) == cut_member;
    print_message("%d of %d entities were on member %d; after the heal every entity, and %d new "
                  "ones, answer: %s (%lld ms), %d of them on member %d again\n",
                  on_cut, NIDS, cut_member, NNEW, ok ? "yes" : "no",
                  (long long)(shoal_now_ms() - t0), back, cut_member);
    assert_true(ok);
    ttotals_t t = trec_totals();
    if (t.double_entity || t.double_shard)
        fail_msg("%d entities and %d shards were alive on two members at once", t.double_entity,
                 t.double_shard);
}

static void test_member_fenced_and_lifted(void **state)
{
    (void)state;
    run_case(2);
}

static void test_coordinator_host_fenced_and_lifted(void **state)
{
    (void)state;
    run_case(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_member_fenced_and_lifted, teardown),
        cmocka_unit_test_teardown(test_coordinator_host_fenced_and_lifted, teardown),
    };
    if (getenv("TEST_FILTER")) /* run one test by name while debugging */
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
