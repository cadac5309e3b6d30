/*  test_pin_away.c — a shard pinned to a member that has left keeps the coordinator alive.

    The rebalance round walks the coordinator's pins and, for a pinned shard living away from its
    member, asked pinned_index(), which looks the shard up in the same pins table. czmq's
    zhashx_lookup moves the table's cursor to the item it finds, so zhashx_next returned that pin
    again, for ever: the coordinator's node thread spun at 100% CPU and every call into the node
    hung. The demo met it (examples/demo.sh, counter-service: shard 80 moved to a member with
    shoal-cluster, then the members stopped one at a time; the last never stopped, 6 of 6 runs of
    that part alone).

    Three members; shard 1 pinned to the third; the third leaves (its shard goes to one of the
    two others); rebalance rounds then run with the pin away from its member. The coordinator's
    node must go on answering: asks routed through it are answered, and it leaves the cluster. A
    hang ends the test through alarm() instead of leaving it stuck.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "members.h"
#include "shards.h"

typedef struct {
    shoal_region_t *r;
    const char *shard, *member;
    char msg[1024];
} move_cond_t;

static bool move_ok(void *arg)
{
    move_cond_t *c = arg;
    return shoal_region_move_shard(c->r, c->shard, c->member, 0, c->msg, sizeof c->msg) == 0;
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "test_pin_away: the coordinator's node hung (a pinned shard away "
                            "from its member)\n";
    if (write(2, m, sizeof m - 1) < 0) {
    }
    _exit(1);
}

/* every entity in shard "1" */
static void to_shard_1(const char *eid, uint32_t n, char *out, void *arg)
{
    (void)eid;
    (void)n;
    (void)arg;
    strcpy(out, "1");
}

static void ask_through(int i)
{
    shoal_buf_t b = {0};
    int rc = SHOAL_ETIMEOUT;
    for (int t = 0; t < 10 && rc != 0; t++)
        rc = shoal_region_ask_sync(tsn[i].r, "1", "get", 3, 3000u * (uint32_t)tscale(), &b);
    shoal_buf_free(&b);
    assert_int_equal(rc, 0);
}

static void pinned_shard_of_a_departed_member(void **state)
{
    (void)state;
    signal(SIGALRM, on_alarm);
    alarm(40u * (unsigned)tscale());
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.shard_id = to_shard_1;
    tsnode_start_cluster(3, &(tsnode_opts_t){.sharding = &s});
    tsnode_wait_registered(0x7, 0, 3, 15000);
    char third[SHOAL_NODE_ID_MAX + 1];
    snprintf(third, sizeof third, "%s", shoal_node_id(shoal_system_self(tsn[2].sys)));
    *strrchr(third, ':') = 0; /* host:port */
    move_cond_t mc = {tsn[0].r, "1", third};
    if (!wait_until(move_ok, &mc, 15000))
        fail_msg("move 1 to %s: %s", third, mc.msg);
    ask_through(0);
    assert_int_equal(trec_get(TSHARD_TYPE, "1").node, 2);

    assert_int_equal(shoal_cluster_leave(tsn[2].cl, NULL), 0);
    assert_true(wait_until(terminated, tsn[2].cl, 20000));
    tsnode_stop(2);
    /* the shard lives on one of the two others now, away from its pin; several rebalance
       rounds pass (shoal_sharding_settings_fast: one a second) while it is asked for */
    int64_t end = shoal_now_ms() + 4000;
    while (shoal_now_ms() < end) {
        ask_through(0);
        ask_through(1);
        usleep(200000);
    }
    trec_t r = trec_get(TSHARD_TYPE, "1");
    assert_true(r.live && (r.node == 0 || r.node == 1));
    assert_int_equal(shoal_cluster_leave(tsn[0].cl, NULL), 0);
    assert_true(wait_until(terminated, tsn[0].cl, 20000));
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(pinned_shard_of_a_departed_member, tsnode_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
