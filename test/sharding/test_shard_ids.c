/*  test_shard_ids.c — a move names a shard the type can have (issue 36, item 7): with the default
    shard ids (the decimal numbers 0 .. number-of-shards - 1), `move TYPE 999 MEMBER` on a type of
    20 shards is refused with the valid range, through every path a move arrives by: the C API
    (shoal_region_move_shard), shoal-cluster (the client protocol, sharding/admin.c), and the
    coordinator itself when the asking region believes in more shards than the coordinator's type
    has (a proxy with another number-of-shards). An id the default function never writes ("007",
    "-1", "20") is refused too; unpin still takes any id, as the way to drop such a pin. And
    `shoal-cluster check` reports a pin to a shard that does not exist (left in the coordinator's
    state by an older build or a changed number-of-shards, written here as such a build would) as
    a finding, exit 1.

    On 5826d3d: move 999 answered 0 ("shard 999 pinned to ...") and check said [OK].
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "members.h"
#include "shards.h"
#include "tools.h"

#define NSHARDS 20

static char out[1 << 16];

static bool registered(void *arg)
{
    const char *names[] = {TSHARD_TYPE};
    return shoal_sharding_healthy(tsn[*(int *)arg].sh, names, 1);
}

static bool terminated(void *arg)
{
    return shoal_cluster_terminated(arg);
}

typedef struct {
    const char *tool, *ep, *args;
    int code;
} tool_cond_t;

/* shoal-cluster --node ep args exits with code (its output in `out`) */
static bool tool_gives(void *arg)
{
    tool_cond_t *c = arg;
    return ttool_runf(c->tool, out, sizeof out, "--timeout %d --node %s %s", 3000 * tscale(), c->ep,
                      c->args) == c->code;
}

typedef struct {
    shoal_region_t *r;
    const char *shard, *member;
    char msg[1024];
    int rc;
} move_cond_t;

static bool move_ok(void *arg)
{
    move_cond_t *c = arg;
    return shoal_region_move_shard(c->r, c->shard, c->member, 0, c->msg, sizeof c->msg) == 0;
}

/* the coordinator answered a move (no coordinator known, or still reading: not yet) */
static bool move_answered(void *arg)
{
    move_cond_t *c = arg;
    c->rc = shoal_region_move_shard(c->r, c->shard, c->member, 0, c->msg, sizeof c->msg);
    return c->rc != SHOAL_ESTATE && c->rc != SHOAL_ETIMEOUT;
}

static void test_impossible_shard_refused(void **state)
{
    (void)state;
    char tool[4096];
    assert_true(ttool_find("shoal-cluster", tool, sizeof tool));
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.number_of_shards = NSHARDS;
    tsnode_opts_t o = {.sharding = &s, .seed = 0};
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    int zero = 0;
    assert_true(wait_until(registered, &zero, 15000));
    char self[SHOAL_NODE_ID_MAX + 1], ep[SHOAL_NODE_ID_MAX + 16];
    snprintf(self, sizeof self, "%s", shoal_node_id(shoal_system_self(tsn[0].sys)));
    *strrchr(self, ':') = 0; /* host:port */
    snprintf(ep, sizeof ep, "tcp://%s", self);

    /* the coordinator ready (it answers a move of shard 19, a shard the type has) */
    move_cond_t ok19 = {tsn[0].r, "19", self};
    if (!wait_until(move_ok, &ok19, 15000))
        fail_msg("move 19: %s", ok19.msg);
    assert_non_null(strstr(ok19.msg, "pinned"));
    char msg[1024];
    assert_int_equal(shoal_region_unpin_shard(tsn[0].r, "19", 0, msg, sizeof msg), 0);

    /* the C API: refused with the range, nothing pinned */
    const char *bad[] = {"999", "20", "007", "-1", "1x", " 3"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        int rc = shoal_region_move_shard(tsn[0].r, bad[k], self, 0, msg, sizeof msg);
        if (rc != SHOAL_EINVAL || !strstr(msg, "0 to 19"))
            fail_msg("move %s: %d (%s), want SHOAL_EINVAL naming 0 to 19", bad[k], rc, msg);
    }

    /* shoal-cluster, through the client protocol */
    int rc = ttool_runf(tool, out, sizeof out, "--timeout %d --node %s move %s 999 %s",
                        3000 * tscale(), ep, TSHARD_TYPE, self);
    if (rc != 1 || !strstr(out, "0 to 19") || !strstr(out, "999"))
        fail_msg("shoal-cluster move counter 999: exit %d, want 1 naming 0 to 19:\n%s", rc, out);
    assert_int_equal(ttool_runf(tool, out, sizeof out, "--timeout %d --node %s --json shards",
                                3000 * tscale(), ep),
                     0);
    assert_null(strstr(out, "\"pinned\""));
    assert_non_null(strstr(out, "\"number_of_shards\":20"));
    rc = ttool_runf(tool, out, sizeof out, "--timeout %d --node %s check", 3000 * tscale(), ep);
    if (rc != 0)
        fail_msg("check of a clean cluster: exit %d:\n%s", rc, out);

    /* a second member, a region of the same type */
    tsnode_opts_t o1 = {.sharding = &s, .seed = 0};
    tsnode_start(1, &o1);
    tsnode_wait_up(3u, 20000);
    int one = 1;
    assert_true(wait_until(registered, &one, 15000));

    /* a pin to shard 999 in the coordinator's state, as an older build (or the type when it had
       more shards) left it, on every replica: check reports it */
    shoal_client_t *cl = shoal_client_new(ep, 3000 * (uint32_t)tscale(), &rc);
    assert_non_null(cl);
    shoal_client_op_t op = {.type = "LWWMap",
                            .op = "put",
                            .key2 = "p/999",
                            .key2_len = 5,
                            .value = self,
                            .value_len = strlen(self)};
    shoal_consistency_t all = {.level = SHOAL_ALL, .timeout_ms = 3000 * (uint32_t)tscale()};
    assert_int_equal(shoal_client_update(cl, "", "coord-" TSHARD_TYPE, &all, &op), 0);
    shoal_client_destroy(&cl);
    rc = ttool_runf(tool, out, sizeof out, "--timeout %d --node %s check", 3000 * tscale(), ep);
    if (rc != 1 || !strstr(out, "shard 999") || !strstr(out, "0 to 19"))
        fail_msg("check with a pin to shard 999 of 20: exit %d, want 1 naming it:\n%s", rc, out);

    /* the next coordinator reads the state with the pin (node 0 leaves; node 1 is the oldest
       then): unpin drops it, and check is clean again */
    assert_int_equal(shoal_cluster_leave(tsn[0].cl, NULL), 0);
    assert_true(wait_until(terminated, tsn[0].cl, 20000));
    char ep1[SHOAL_NODE_ID_MAX + 16];
    snprintf(ep1, sizeof ep1, "tcp://%s", shoal_node_id(shoal_system_self(tsn[1].sys)));
    *strrchr(ep1, ':') = 0;
    tool_cond_t unpinned = {tool, ep1, "unpin " TSHARD_TYPE " 999", 0};
    if (!wait_until(tool_gives, &unpinned, 20000))
        fail_msg("unpin of the stale pin through node 1:\n%s", out);
    tool_cond_t clean = {tool, ep1, "check", 0};
    if (!wait_until(tool_gives, &clean, 20000))
        fail_msg("check after the unpin:\n%s", out);

    /* a proxy that believes in 1000 shards (node 2): the coordinator (now on node 1) refuses its
       registration, as ever, and its move of 999 (which the proxy's own check lets through) */
    tsnode_opts_t po = {.seed = 1, .no_region = true};
    tsnode_start(2, &po);
    tsnode_wait_up(6u, 20000);
    shoal_sharding_settings_t ps = s;
    ps.number_of_shards = 1000;
    shoal_region_t *proxy = tsnode_region(2, TSHARD_TYPE, &ps, true);
    assert_non_null(proxy);
    tsn[2].r = proxy;
    /* the coordinator refuses that proxy's registration (number-of-shards differs) but answers
       its actions */
    move_cond_t m999 = {proxy, "999", ep1 + 6};
    if (!wait_until(move_answered, &m999, 15000))
        fail_msg("move 999 through a proxy of 1000 shards: no coordinator's answer: %s", m999.msg);
    if (m999.rc != SHOAL_EINVAL || !strstr(m999.msg, "0 to 19"))
        fail_msg("move 999 through a proxy of 1000 shards: %d (%s), want the coordinator's "
                 "SHOAL_EINVAL naming 0 to 19",
                 m999.rc, m999.msg);

    rc = ttool_runf(tool, out, sizeof out, "--timeout %d --node %s check", 3000 * tscale(), ep1);
    if (rc != 1 || !strstr(out, "counter: number-of-shards is ") || !strstr(out, " 1000 on "))
        fail_msg("check with a member of another number-of-shards: exit %d:\n%s", rc, out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_impossible_shard_refused, tsnode_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
