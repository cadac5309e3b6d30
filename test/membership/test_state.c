/*  test_state.c — the cluster state value: member records, reachability, seen, convergence,
    leader and oldest, merge rules, canonical encoding and strict decoding, and the property
    harness (merge laws, convergence under reordered/duplicated gossip, round trips, corruption). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.pb-c.h"
#include "membership.pb-c.h"
#include "prop.h"
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N(i) prop_node(i)

/* The descriptive fields node i always joins with (fixed, so concurrent adds agree). */
static const char *const ROLES[][2] = {{"backend", "dc-a"}, {"frontend", "dc-a"},
                                       {"backend", "dc-b"}, {"frontend", "dc-b"}};

static int add(cstate_t *s, const shoal_node_t *writer, int i)
{
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", 3551 + i);
    uint8_t key[32];
    memset(key, 0x40 + i, sizeof key);
    return cstate_add_member(s, writer, N(i), ROLES[i % 4], 2, "1.2.3", ep, key, sizeof key, NULL);
}

/* A state where members 0..n-1 are Up with up-numbers 1..n, written by node 0. */
static cstate_t *up_cluster(int n)
{
    cstate_t *s = cstate_new();
    for (int i = 0; i < n; i++) {
        assert_int_equal(add(s, N(0), i), 0);
        assert_int_equal(cstate_set_status(s, N(0), N(i), SHOAL_MEMBER_UP), 0);
        assert_int_equal(cstate_set_up_number(s, N(0), N(i), (uint64_t)i + 1), 0);
    }
    return s;
}

static void mark_all_seen(cstate_t *s, int n)
{
    for (int i = 0; i < n; i++)
        cstate_mark_seen(s, N(i));
}

static int setup(void **state)
{
    (void)state;
    return cstate_register();
}

/* --------------------------------------------------------------------------------------------- */

static void test_register_is_idempotent_and_type_is_known(void **state)
{
    (void)state;
    assert_int_equal(cstate_register(), 0);
    assert_int_equal(cstate_register(), 0);
    assert_ptr_equal(shoal_type_by_tag(CSTATE_TAG), &cstate_type);
    assert_ptr_equal(shoal_type_by_name("ClusterState"), &cstate_type);
    assert_false(shoal_type_has_delta(&cstate_type));
    assert_false(shoal_type_has_pruning(&cstate_type));
    shoal_crdt_t *v = shoal_crdt_new(&cstate_type);
    assert_non_null(v);
    assert_ptr_equal(shoal_crdt_type(v), &cstate_type);
    assert_null(shoal_crdt_delta(v));
    shoal_crdt_destroy(&v);
}

static void test_add_member_sorts_roles_and_raises_writer_clock(void **state)
{
    (void)state;
    cstate_t *s = cstate_new();
    const char *roles[] = {"web", "api", "web", "db"};
    uint8_t key[3] = {1, 2, 3};
    assert_int_equal(cstate_add_member(s, N(1), N(2), roles, 4, "2.0", "tcp://h:1", key, 3, NULL), 0);
    const cmember_t *m = cstate_member(s, N(2));
    assert_non_null(m);
    assert_int_equal(m->status, SHOAL_MEMBER_JOINING);
    assert_int_equal(m->up_number, 0);
    assert_int_equal(m->n_roles, 3);
    assert_string_equal(m->roles[0], "api");
    assert_string_equal(m->roles[1], "db");
    assert_string_equal(m->roles[2], "web");
    assert_string_equal(m->app_version, "2.0");
    assert_string_equal(m->hb_endpoint, "tcp://h:1");
    assert_int_equal(m->pubkey_len, 3);
    assert_memory_equal(m->pubkey, key, 3);
    assert_true(cmember_has_role(m, "db"));
    assert_true(cmember_has_role(m, NULL));
    assert_true(cmember_has_role(m, ""));
    assert_false(cmember_has_role(m, "cache"));
    /* the writer's entry is raised, not the new member's */
    assert_int_equal(shoal_vv_get(s->vclock, N(1)), 1);
    assert_int_equal(shoal_vv_get(s->vclock, N(2)), 0);
    /* adding again is a no-op: no clock raise, fields unchanged */
    assert_int_equal(cstate_add_member(s, N(1), N(2), NULL, 0, "9.9", NULL, NULL, 0, NULL), 0);
    assert_int_equal(cstate_version_sum(s), 1);
    assert_string_equal(cstate_member(s, N(2))->app_version, "2.0");
    /* members stay in address order */
    assert_int_equal(add(s, N(0), 5), 0);
    assert_int_equal(add(s, N(0), 0), 0);
    assert_int_equal(s->n_members, 3);
    assert_ptr_equal(s->members[0].node, N(0));
    assert_ptr_equal(s->members[1].node, N(2));
    assert_ptr_equal(s->members[2].node, N(5));
    assert_int_equal(cstate_version_sum(s), 3);
    /* bad arguments change nothing */
    const char *empty_role[] = {""};
    assert_int_equal(cstate_add_member(s, NULL, N(3), NULL, 0, NULL, NULL, NULL, 0, NULL), SHOAL_EINVAL);
    assert_int_equal(cstate_add_member(s, N(0), N(3), empty_role, 1, NULL, NULL, NULL, 0, NULL),
                     SHOAL_EINVAL);
    uint8_t big[65] = {0};
    assert_int_equal(cstate_add_member(s, N(0), N(3), NULL, 0, NULL, NULL, big, 65, NULL), SHOAL_ETOOBIG);
    assert_null(cstate_member(s, N(3)));
    assert_int_equal(cstate_version_sum(s), 3);
    cstate_destroy(&s);
    assert_null(s);
}

static void test_set_status_only_forward(void **state)
{
    (void)state;
    cstate_t *s = cstate_new();
    assert_int_equal(add(s, N(0), 1), 0);
    assert_int_equal(cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_UP), 0);
    assert_int_equal(cstate_member(s, N(1))->status, SHOAL_MEMBER_UP);
    uint64_t v = cstate_version_sum(s);
    assert_int_equal(cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_JOINING), SHOAL_ESTATE);
    assert_int_equal(cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_WEAKLY_UP), SHOAL_ESTATE);
    assert_int_equal(cstate_member(s, N(1))->status, SHOAL_MEMBER_UP);
    /* the same status again changes nothing */
    assert_int_equal(cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_UP), 0);
    assert_int_equal(cstate_version_sum(s), v);
    /* jumping forward is allowed (Up -> Down), and then only Removed remains */
    assert_int_equal(cstate_set_status(s, N(2), N(1), SHOAL_MEMBER_DOWN), 0);
    assert_int_equal(shoal_vv_get(s->vclock, N(2)), 1);
    assert_int_equal(cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_EXITING), SHOAL_ESTATE);
    assert_int_equal(cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_REMOVED), 0);
    assert_int_equal(cstate_set_status(s, N(0), N(3), SHOAL_MEMBER_UP), SHOAL_ENOTMEMBER);
    assert_int_equal(cstate_set_status(s, N(0), N(1), (shoal_member_status_t)0), SHOAL_EINVAL);
    assert_int_equal(cstate_set_status(s, N(0), N(1), (shoal_member_status_t)8), SHOAL_EINVAL);
    cstate_destroy(&s);
}

static void test_set_up_number_once_and_only_when_up(void **state)
{
    (void)state;
    cstate_t *s = cstate_new();
    assert_int_equal(add(s, N(0), 1), 0);
    assert_int_equal(cstate_set_up_number(s, N(0), N(1), 4), SHOAL_ESTATE); /* still Joining */
    assert_int_equal(cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_UP), 0);
    uint64_t v = cstate_version_sum(s);
    assert_int_equal(cstate_set_up_number(s, N(0), N(1), 4), 0);
    assert_int_equal(cstate_version_sum(s), v + 1);
    assert_int_equal(cstate_set_up_number(s, N(0), N(1), 4), 0); /* same: no-op */
    assert_int_equal(cstate_version_sum(s), v + 1);
    assert_int_equal(cstate_set_up_number(s, N(0), N(1), 2), SHOAL_ESTATE);
    assert_int_equal(cstate_member(s, N(1))->up_number, 4);
    assert_int_equal(cstate_set_up_number(s, N(0), N(1), 0), SHOAL_EINVAL);
    assert_int_equal(cstate_set_up_number(s, N(0), N(2), 1), SHOAL_ENOTMEMBER);
    cstate_destroy(&s);
}

static void test_merge_takes_status_max_and_lowest_up_number(void **state)
{
    (void)state;
    cstate_t *a = cstate_new();
    assert_int_equal(add(a, N(0), 1), 0);
    assert_int_equal(add(a, N(0), 2), 0);
    cstate_t *b = cstate_clone(a);
    /* a: 1 Up #3, 2 Leaving #7; b: 1 Leaving #5, 2 Up #2, and b knows 3 */
    cstate_set_status(a, N(0), N(1), SHOAL_MEMBER_UP);
    cstate_set_up_number(a, N(0), N(1), 3);
    cstate_set_status(a, N(0), N(2), SHOAL_MEMBER_LEAVING);
    cstate_set_up_number(a, N(0), N(2), 7);
    cstate_set_status(b, N(1), N(1), SHOAL_MEMBER_LEAVING);
    cstate_set_up_number(b, N(1), N(1), 5);
    cstate_set_status(b, N(1), N(2), SHOAL_MEMBER_UP);
    cstate_set_up_number(b, N(1), N(2), 2);
    add(b, N(1), 3);
    cstate_t *ab = cstate_clone(a), *ba = cstate_clone(b);
    assert_int_equal(shoal_crdt_merge(&ab->base, &b->base), 0);
    assert_int_equal(shoal_crdt_merge(&ba->base, &a->base), 0);
    assert_true(shoal_crdt_equal(&ab->base, &ba->base));
    assert_int_equal(cstate_member(ab, N(1))->status, SHOAL_MEMBER_LEAVING);
    assert_int_equal(cstate_member(ab, N(1))->up_number, 3);
    assert_int_equal(cstate_member(ab, N(2))->status, SHOAL_MEMBER_LEAVING);
    assert_int_equal(cstate_member(ab, N(2))->up_number, 2);
    assert_non_null(cstate_member(ab, N(3)));
    /* clocks pointwise max */
    assert_int_equal(shoal_vv_get(ab->vclock, N(0)), 6);
    assert_int_equal(shoal_vv_get(ab->vclock, N(1)), 5);
    /* a lowest non-zero up-number: 0 (none) never wins over an assigned one */
    cstate_t *c = cstate_new();
    add(c, N(0), 1);
    cstate_set_status(c, N(0), N(1), SHOAL_MEMBER_DOWN);
    shoal_crdt_merge(&c->base, &a->base);
    assert_int_equal(cstate_member(c, N(1))->up_number, 3);
    assert_int_equal(cstate_member(c, N(1))->status, SHOAL_MEMBER_DOWN);
    cstate_destroy(&a);
    cstate_destroy(&b);
    cstate_destroy(&ab);
    cstate_destroy(&ba);
    cstate_destroy(&c);
}

static void test_merge_descriptive_conflict_is_deterministic(void **state)
{
    (void)state;
    cstate_t *a = cstate_new(), *b = cstate_new();
    const char *ra[] = {"x"}, *rb[] = {"w"};
    assert_int_equal(cstate_add_member(a, N(0), N(4), ra, 1, "1.0", "tcp://a:1", NULL, 0, NULL), 0);
    assert_int_equal(cstate_add_member(b, N(1), N(4), rb, 1, "9.0", "tcp://b:1", NULL, 0, NULL), 0);
    cstate_t *ab = cstate_clone(a), *ba = cstate_clone(b);
    shoal_crdt_merge(&ab->base, &b->base);
    shoal_crdt_merge(&ba->base, &a->base);
    assert_true(shoal_crdt_equal(&ab->base, &ba->base));
    /* the lower record wins as a whole (roles compare first): b's, not a mix */
    const cmember_t *m = cstate_member(ab, N(4));
    assert_int_equal(m->n_roles, 1);
    assert_string_equal(m->roles[0], "w");
    assert_string_equal(m->app_version, "9.0");
    assert_string_equal(m->hb_endpoint, "tcp://b:1");
    cstate_destroy(&a);
    cstate_destroy(&b);
    cstate_destroy(&ab);
    cstate_destroy(&ba);
}

static void test_reachability_rows(void **state)
{
    (void)state;
    cstate_t *s = up_cluster(4);
    const shoal_node_t *subj[] = {N(3), N(2), N(3)};
    uint64_t v0 = shoal_vv_get(s->vclock, N(1));
    assert_int_equal(cstate_set_unreachable(s, N(1), subj, 3), 0);
    const creach_row_t *r = cstate_row(s, N(1));
    assert_non_null(r);
    assert_int_equal(r->version, v0 + 1); /* the row's version is the clock entry it raised */
    assert_int_equal(r->n, 2);
    assert_ptr_equal(r->unreachable[0], N(2));
    assert_ptr_equal(r->unreachable[1], N(3));
    assert_int_equal(shoal_vv_get(s->vclock, N(1)), v0 + 1);
    /* the same set in another order: nothing raised */
    const shoal_node_t *same[] = {N(2), N(3)};
    assert_int_equal(cstate_set_unreachable(s, N(1), same, 2), 0);
    assert_int_equal(cstate_row(s, N(1))->version, v0 + 1);
    assert_int_equal(shoal_vv_get(s->vclock, N(1)), v0 + 1);
    /* clearing an absent row is a no-op too */
    assert_int_equal(cstate_set_unreachable(s, N(0), NULL, 0), 0);
    assert_null(cstate_row(s, N(0)));

    assert_true(cstate_is_unreachable(s, N(2)));
    assert_true(cstate_is_unreachable(s, N(3)));
    assert_false(cstate_is_unreachable(s, N(0)));
    const shoal_node_t *obs[4];
    assert_int_equal(cstate_observers_of(s, N(2), obs, 4), 1);
    assert_ptr_equal(obs[0], N(1));
    assert_int_equal(cstate_set_unreachable(s, N(0), &same[0], 1), 0);
    assert_int_equal(cstate_observers_of(s, N(2), obs, 4), 2);
    assert_ptr_equal(obs[0], N(0));
    assert_ptr_equal(obs[1], N(1));
    assert_int_equal(cstate_observers_of(s, N(2), obs, 1), 1);

    /* an observer that is Down (or Exiting, or not a member) no longer counts */
    cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_DOWN);
    assert_false(cstate_is_unreachable(s, N(3)));
    assert_true(cstate_is_unreachable(s, N(2))); /* N(0) still reports it */
    cstate_set_status(s, N(0), N(0), SHOAL_MEMBER_EXITING);
    assert_false(cstate_is_unreachable(s, N(2)));
    assert_int_equal(cstate_observers_of(s, N(2), obs, 4), 0);
    const shoal_node_t *one[] = {N(2)};
    cstate_set_unreachable(s, N(7), one, 1);
    assert_false(cstate_is_unreachable(s, N(2)));

    /* merge keeps the row with the higher version */
    cstate_t *a = up_cluster(3), *b = cstate_clone(a);
    const shoal_node_t *two[] = {N(1), N(2)};
    cstate_set_unreachable(a, N(0), one, 1); /* {2} */
    shoal_crdt_merge(&b->base, &a->base);
    cstate_set_unreachable(b, N(0), two, 2); /* {1, 2}: a newer row of the same observer */
    cstate_t *ab = cstate_clone(a);
    shoal_crdt_merge(&ab->base, &b->base);
    assert_int_equal(cstate_row(ab, N(0))->version, shoal_vv_get(b->vclock, N(0)));
    assert_int_equal(cstate_row(ab, N(0))->n, 2);
    assert_true(cstate_is_unreachable(ab, N(1)));
    shoal_crdt_merge(&b->base, &a->base);
    assert_true(shoal_crdt_equal(&ab->base, &b->base));

    /* reaching everyone again drops the row; a merge with a state that still holds the old row
       does not bring it back (that state's clock does not cover the drop), and a state that
       has not seen the row at all does not take it away */
    cstate_t *old = cstate_clone(b); /* holds {1, 2} */
    cstate_t *fresh = up_cluster(3); /* never saw N(0)'s row */
    uint64_t before = shoal_vv_get(b->vclock, N(0));
    assert_int_equal(cstate_set_unreachable(b, N(0), NULL, 0), 0);
    assert_null(cstate_row(b, N(0)));
    assert_int_equal(b->n_rows, 0);
    assert_int_equal(shoal_vv_get(b->vclock, N(0)), before + 1);
    shoal_crdt_merge(&b->base, &old->base);
    assert_null(cstate_row(b, N(0)));
    shoal_crdt_merge(&old->base, &b->base);
    assert_null(cstate_row(old, N(0)));
    assert_false(cstate_is_unreachable(old, N(2)));
    shoal_crdt_merge(&fresh->base, &ab->base); /* ab still has the row; fresh never saw it */
    assert_non_null(cstate_row(fresh, N(0)));
    shoal_crdt_merge(&fresh->base, &b->base); /* b saw it and dropped it */
    assert_null(cstate_row(fresh, N(0)));
    /* a new row after the drop wins over the old one everywhere */
    assert_int_equal(cstate_set_unreachable(b, N(0), one, 1), 0);
    shoal_crdt_merge(&ab->base, &b->base);
    assert_int_equal(cstate_row(ab, N(0))->n, 1);
    assert_int_equal(cstate_row(ab, N(0))->version, before + 2);
    cstate_destroy(&old);
    cstate_destroy(&fresh);
    cstate_destroy(&a);
    cstate_destroy(&b);
    cstate_destroy(&ab);
    cstate_destroy(&s);
}

static void test_seen_and_convergence(void **state)
{
    (void)state;
    cstate_t *s = cstate_new();
    assert_false(cstate_converged(s)); /* no members: nothing to agree on */
    cstate_destroy(&s);

    s = up_cluster(3);
    assert_false(cstate_converged(s));
    assert_int_equal(cstate_seen_count(s), 0);
    mark_all_seen(s, 3);
    assert_true(cstate_seen_by(s, N(2)));
    assert_int_equal(cstate_seen_count(s), 3);
    assert_true(cstate_converged(s));
    /* marking seen does not raise the clock */
    uint64_t v = cstate_version_sum(s);
    cstate_mark_seen(s, N(1));
    assert_int_equal(cstate_version_sum(s), v);

    /* a change is not converged until every Up member has seen it */
    cstate_set_status(s, N(0), N(2), SHOAL_MEMBER_LEAVING);
    assert_false(cstate_seen_by(s, N(0)));
    assert_false(cstate_converged(s));
    cstate_mark_seen(s, N(0));
    cstate_mark_seen(s, N(1));
    assert_false(cstate_converged(s)); /* Leaving members must see too */
    cstate_mark_seen(s, N(2));
    assert_true(cstate_converged(s));

    /* a Joining member that has not seen does not block */
    add(s, N(0), 3);
    mark_all_seen(s, 3);
    assert_false(cstate_seen_by(s, N(3)));
    assert_true(cstate_converged(s));
    assert_int_equal(cstate_seen_count(s), 3);
    /* ...unless it is unreachable: then it must have seen */
    const shoal_node_t *j[] = {N(3)};
    cstate_set_unreachable(s, N(0), j, 1);
    mark_all_seen(s, 3);
    assert_false(cstate_converged(s));
    cstate_mark_seen(s, N(3));
    assert_true(cstate_converged(s));
    cstate_destroy(&s);

    /* an unreachable Up member that has not seen blocks; once Down it does not */
    s = up_cluster(3);
    const shoal_node_t *u[] = {N(2)};
    cstate_set_unreachable(s, N(0), u, 1);
    cstate_mark_seen(s, N(0));
    cstate_mark_seen(s, N(1));
    assert_false(cstate_converged(s));
    cstate_set_status(s, N(0), N(2), SHOAL_MEMBER_DOWN);
    cstate_mark_seen(s, N(0));
    cstate_mark_seen(s, N(1));
    assert_true(cstate_is_unreachable(s, N(2)));
    assert_false(cstate_seen_by(s, N(2)));
    assert_true(cstate_converged(s));
    /* Removed members count for nothing */
    cstate_set_status(s, N(0), N(2), SHOAL_MEMBER_REMOVED);
    cstate_mark_seen(s, N(0));
    cstate_mark_seen(s, N(1));
    assert_true(cstate_converged(s));
    assert_int_equal(cstate_seen_count(s), 2);
    cstate_destroy(&s);

    /* an unreachable Exiting member does not block either */
    s = up_cluster(3);
    cstate_set_status(s, N(0), N(1), SHOAL_MEMBER_EXITING);
    const shoal_node_t *x[] = {N(1)};
    cstate_set_unreachable(s, N(0), x, 1);
    cstate_mark_seen(s, N(0));
    cstate_mark_seen(s, N(2));
    assert_true(cstate_converged(s));
    cstate_destroy(&s);
}

static void test_seen_survives_merge_ping_pong(void **state)
{
    (void)state;
    /* Two replicas that mark their own seen and gossip back and forth: a seen set reset on every
       version change must not let concurrent marks erase each other for ever (equal clocks
       union their sets; a merge of concurrent clocks is a new clock both then mark). */
    cstate_t *a = up_cluster(2);
    cstate_t *b = cstate_clone(a);
    cstate_mark_seen(a, N(0));
    cstate_mark_seen(b, N(1));
    for (int round = 0; round < 4; round++) {
        shoal_crdt_merge(&a->base, &b->base);
        cstate_mark_seen(a, N(0));
        shoal_crdt_merge(&b->base, &a->base);
        cstate_mark_seen(b, N(1));
        assert_true(cstate_seen_by(a, N(0)));
        assert_true(cstate_seen_by(b, N(0)));
        assert_true(cstate_seen_by(b, N(1)));
    }
    assert_true(cstate_converged(a));
    assert_true(cstate_converged(b));
    assert_true(shoal_crdt_equal(&a->base, &b->base));

    /* concurrent changes on both sides: each side's own mark is kept through the merges */
    cstate_set_status(a, N(0), N(0), SHOAL_MEMBER_LEAVING);
    const shoal_node_t *u[] = {N(0)};
    cstate_set_unreachable(b, N(1), u, 1);
    cstate_set_unreachable(b, N(1), NULL, 0);
    cstate_mark_seen(a, N(0));
    cstate_mark_seen(b, N(1));
    shoal_crdt_merge(&a->base, &b->base); /* a has not seen b's change yet... */
    assert_false(cstate_seen_by(a, N(0)));
    assert_non_null(cstate_member(a, N(0)));
    cstate_mark_seen(a, N(0)); /* ...now it has */
    shoal_crdt_merge(&b->base, &a->base);
    assert_true(cstate_seen_by(b, N(0))); /* a's mark survived the trip */
    assert_false(cstate_seen_by(b, N(1)));
    cstate_mark_seen(b, N(1));
    shoal_crdt_merge(&a->base, &b->base);
    assert_true(cstate_converged(a));
    assert_true(cstate_converged(b));
    assert_true(shoal_crdt_equal(&a->base, &b->base));
    cstate_destroy(&a);
    cstate_destroy(&b);
}

static void test_leader(void **state)
{
    (void)state;
    cstate_t *s = cstate_new();
    assert_null(cstate_leader(s, NULL, N(0)));
    /* only Joining members: the first in address order leads */
    add(s, N(0), 2);
    add(s, N(0), 4);
    assert_ptr_equal(cstate_leader(s, NULL, N(4)), N(2));
    /* an Up member is preferred over a lower Joining one */
    cstate_set_status(s, N(0), N(4), SHOAL_MEMBER_UP);
    assert_ptr_equal(cstate_leader(s, "", N(2)), N(4));
    add(s, N(0), 3);
    cstate_set_status(s, N(0), N(3), SHOAL_MEMBER_LEAVING);
    assert_ptr_equal(cstate_leader(s, NULL, N(2)), N(3));
    /* unreachable members are skipped, except by themselves */
    const shoal_node_t *u[] = {N(3)};
    cstate_set_unreachable(s, N(4), u, 1);
    assert_ptr_equal(cstate_leader(s, NULL, N(2)), N(4));
    assert_ptr_equal(cstate_leader(s, NULL, N(3)), N(3));
    /* role leaders (ROLES: 2 backend, 3 frontend, 4 backend) */
    assert_ptr_equal(cstate_leader(s, "backend", N(2)), N(4));
    assert_null(cstate_leader(s, "frontend", N(2))); /* its only member is unreachable */
    assert_ptr_equal(cstate_leader(s, "frontend", N(3)), N(3));
    assert_null(cstate_leader(s, "cache", N(2)));
    /* Down and Removed never lead; Exiting only when nothing else is left */
    cstate_set_status(s, N(0), N(3), SHOAL_MEMBER_DOWN);
    cstate_set_status(s, N(0), N(4), SHOAL_MEMBER_DOWN);
    assert_ptr_equal(cstate_leader(s, NULL, N(4)), N(2));
    cstate_set_status(s, N(0), N(2), SHOAL_MEMBER_EXITING);
    add(s, N(0), 6);
    assert_ptr_equal(cstate_leader(s, NULL, N(2)), N(6)); /* Joining over a lower Exiting */
    cstate_set_status(s, N(0), N(6), SHOAL_MEMBER_REMOVED);
    assert_ptr_equal(cstate_leader(s, NULL, N(6)), N(2));
    cstate_set_status(s, N(0), N(2), SHOAL_MEMBER_REMOVED);
    assert_null(cstate_leader(s, NULL, N(2)));
    cstate_destroy(&s);
}

static void test_oldest(void **state)
{
    (void)state;
    cstate_t *s = cstate_new();
    assert_null(cstate_oldest(s, NULL));
    for (int i = 0; i < 5; i++)
        add(s, N(0), i);
    assert_null(cstate_oldest(s, NULL)); /* only Up members count */
    int order[] = {3, 1, 4, 0};
    for (int k = 0; k < 4; k++) {
        cstate_set_status(s, N(0), N(order[k]), SHOAL_MEMBER_UP);
        cstate_set_up_number(s, N(0), N(order[k]), (uint64_t)k + 10);
    }
    assert_ptr_equal(cstate_oldest(s, NULL), N(3));
    assert_ptr_equal(cstate_oldest(s, "frontend"), N(3)); /* 1 #11 and 3 #10 are frontend */
    assert_ptr_equal(cstate_oldest(s, "backend"), N(4));  /* 0 #13, 4 #12 (2 is Joining) */
    cstate_set_status(s, N(0), N(3), SHOAL_MEMBER_LEAVING); /* only Up members count */
    assert_ptr_equal(cstate_oldest(s, NULL), N(1));
    assert_ptr_equal(cstate_oldest(s, "frontend"), N(1));
    assert_ptr_equal(cstate_oldest(s, "dc-a"), N(1)); /* 0 #13, 1 #11, 4 #12 */
    assert_null(cstate_oldest(s, "nope"));
    cstate_destroy(&s);
    /* equal up-numbers (two leaders of a healed split): the lower address */
    cstate_t *a = cstate_new();
    add(a, N(0), 5);
    add(a, N(0), 2);
    cstate_set_status(a, N(0), N(5), SHOAL_MEMBER_UP);
    cstate_set_up_number(a, N(0), N(5), 1);
    cstate_set_status(a, N(0), N(2), SHOAL_MEMBER_UP);
    cstate_set_up_number(a, N(0), N(2), 1);
    assert_ptr_equal(cstate_oldest(a, NULL), N(2));
    cstate_destroy(&a);
}

static void test_version_sum_and_render(void **state)
{
    (void)state;
    cstate_t *s = up_cluster(2);
    assert_int_equal(cstate_version_sum(s), 6);
    cstate_set_status(s, N(1), N(1), SHOAL_MEMBER_LEAVING);
    assert_int_equal(cstate_version_sum(s), 7);
    mark_all_seen(s, 2);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_render(&s->base, &b), 0);
    const char *r = shoal_buf_cstr(&b);
    assert_non_null(strstr(r, "ClusterState{"));
    assert_non_null(strstr(r, "127.0.0.1:2552:2 Leaving#2"));
    shoal_buf_free(&b);
    cstate_destroy(&s);
}

/* --------------------------------------------------------------------------------------------- */

static cstate_t *rich_state(void)
{
    cstate_t *s = up_cluster(4);
    add(s, N(1), 5);
    add(s, N(1), 6);
    cstate_set_status(s, N(1), N(6), SHOAL_MEMBER_DOWN);
    const shoal_node_t *u[] = {N(6), N(5)};
    cstate_set_unreachable(s, N(2), u, 2);
    mark_all_seen(s, 3);
    cstate_set_status(s, N(3), N(3), SHOAL_MEMBER_LEAVING);
    cstate_mark_seen(s, N(7)); /* a node that is not a member may have a seen entry */
    return s;
}

static void test_encoding_round_trips_canonically(void **state)
{
    (void)state;
    cstate_t *s = rich_state();
    shoal_crdt_t *back = prop_roundtrip(&s->base);
    prop_assert_same(&s->base, back, "decode(encode(x)) = x", 0);
    const cstate_t *d = (const cstate_t *)back;
    assert_int_equal(d->n_members, 6);
    assert_int_equal(cstate_member(d, N(3))->status, SHOAL_MEMBER_LEAVING);
    assert_int_equal(cstate_member(d, N(3))->up_number, 4);
    assert_string_equal(cstate_member(d, N(5))->hb_endpoint, "tcp://127.0.0.1:3556");
    assert_true(cstate_is_unreachable(d, N(5)));
    assert_true(cstate_seen_by(d, N(7)) == cstate_seen_by(s, N(7)));
    shoal_crdt_destroy(&back);
    /* the empty state too */
    cstate_t *e = cstate_new();
    back = prop_roundtrip(&e->base);
    prop_assert_same(&e->base, back, "empty round trip", 0);
    shoal_crdt_destroy(&back);
    cstate_destroy(&e);
    cstate_destroy(&s);
}

/* Packs a hand-made ClusterState message in an envelope and decodes it. */
static int decode_msg(const Shoal__Membership__ClusterState *msg)
{
    size_t n = shoal__membership__cluster_state__get_packed_size(msg);
    uint8_t *p = malloc(n ? n : 1);
    shoal__membership__cluster_state__pack(msg, p);
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = CSTATE_TAG;
    env.version = 1;
    env.payload.data = p;
    env.payload.len = n;
    size_t en = shoal__ddata__value__get_packed_size(&env);
    uint8_t *e = malloc(en);
    shoal__ddata__value__pack(&env, e);
    shoal_crdt_t *out = NULL;
    int rc = shoal_crdt_decode(e, en, &out);
    if (rc == 0) {
        assert_non_null(out);
        shoal_crdt_t *again = prop_roundtrip(out);
        shoal_crdt_destroy(&again);
    } else {
        assert_null(out);
    }
    shoal_crdt_destroy(&out);
    free(p);
    free(e);
    return rc;
}

typedef struct {
    Shoal__Membership__ClusterState msg;
    char *nodes[3];
    Shoal__Membership__Member m[2], *mp[2];
    char *roles[2];
    Shoal__Membership__Reachability r, *rp[1];
    uint32_t unr[2];
    Shoal__Membership__Clock clock;
    uint32_t cn[2];
    uint64_t cc[2];
} handmade_t;

/* A valid message: nodes 0,1 members (Up #1 and Joining), row of 0 listing 1, clock {0:2, 1:1}. */
static void handmade(handmade_t *h)
{
    memset(h, 0, sizeof *h);
    shoal__membership__cluster_state__init(&h->msg);
    h->nodes[0] = (char *)shoal_node_id(N(0));
    h->nodes[1] = (char *)shoal_node_id(N(1));
    h->msg.nodes = h->nodes;
    h->msg.n_nodes = 2;
    for (int i = 0; i < 2; i++) {
        shoal__membership__member__init(&h->m[i]);
        h->m[i].node = (uint32_t)i;
        h->mp[i] = &h->m[i];
    }
    h->m[0].status = SHOAL_MEMBER_UP;
    h->m[0].up_number = 1;
    h->m[1].status = SHOAL_MEMBER_JOINING;
    h->roles[0] = "a";
    h->roles[1] = "b";
    h->m[0].roles = h->roles;
    h->m[0].n_roles = 2;
    h->msg.members = h->mp;
    h->msg.n_members = 2;
    shoal__membership__reachability__init(&h->r);
    h->r.observer = 0;
    h->r.version = 1;
    h->unr[0] = 1;
    h->r.unreachable = h->unr;
    h->r.n_unreachable = 1;
    h->rp[0] = &h->r;
    h->msg.reachability = h->rp;
    h->msg.n_reachability = 1;
    shoal__membership__clock__init(&h->clock);
    h->cn[0] = 0;
    h->cn[1] = 1;
    h->cc[0] = 2;
    h->cc[1] = 1;
    h->clock.nodes = h->cn;
    h->clock.counters = h->cc;
    h->clock.n_nodes = h->clock.n_counters = 2;
    h->msg.clock = &h->clock;
}

static void test_decode_rejects_invalid_input(void **state)
{
    (void)state;
    handmade_t h;
    handmade(&h);
    assert_int_equal(decode_msg(&h.msg), 0);

    handmade(&h);
    h.nodes[0] = "not-a-node";
    assert_int_equal(decode_msg(&h.msg), SHOAL_ENODE);
    handmade(&h);
    h.nodes[0] = (char *)shoal_node_id(N(1));
    h.nodes[1] = (char *)shoal_node_id(N(0)); /* table not ascending */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.nodes[2] = (char *)shoal_node_id(N(2)); /* unused table entry: not canonical */
    h.msg.n_nodes = 3;
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.m[1].node = 0; /* duplicate member */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.m[1].node = 5; /* index out of the table */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.m[0].node = 1;
    h.m[1].node = 0; /* members out of order */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    for (uint32_t st = 0; st < 10; st += 8) {
        handmade(&h);
        h.m[1].status = st;
        assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    }
    handmade(&h);
    h.m[1].up_number = 3; /* a Joining member with an age */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.roles[0] = "b"; /* roles not strictly ascending */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.roles[0] = ""; /* empty role */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    char longs[300];
    memset(longs, 'v', sizeof longs - 1);
    longs[sizeof longs - 1] = 0;
    handmade(&h);
    h.m[0].app_version = longs;
    assert_int_equal(decode_msg(&h.msg), SHOAL_ETOOBIG);
    handmade(&h);
    h.m[0].heartbeat_endpoint = longs;
    assert_int_equal(decode_msg(&h.msg), SHOAL_ETOOBIG);
    handmade(&h);
    h.m[0].public_key.data = (uint8_t *)longs;
    h.m[0].public_key.len = 65;
    assert_int_equal(decode_msg(&h.msg), SHOAL_ETOOBIG);
    handmade(&h);
    h.r.version = 0;
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.unr[0] = 1;
    h.unr[1] = 1; /* duplicate subject */
    h.r.n_unreachable = 2;
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.cc[1] = 0; /* zero counter */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.clock.n_counters = 1; /* lengths differ */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.cn[0] = 1;
    h.cn[1] = 0;
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);

    /* a newer format version is refused; garbage payloads are errors */
    static const uint8_t newer[] = {0x08, 0x64, 0x10, 0x03};
    shoal_crdt_t *out = NULL;
    assert_int_equal(shoal_crdt_decode(newer, sizeof newer, &out), SHOAL_EVERSION);
    /* every truncation of a real encoding is an error or a valid value, never a crash */
    cstate_t *s = rich_state();
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(&s->base, &b), 0);
    for (size_t n = 0; n < b.len; n++) {
        shoal_crdt_t *v = NULL;
        if (shoal_crdt_decode(b.data, n, &v) == 0)
            shoal_crdt_destroy(&v);
        assert_null(v);
    }
    shoal_buf_free(&b);
    prop_check_corruption(&s->base, 2000);
    cstate_destroy(&s);
}

/* --------------------------------------------------------------------------------------------- */

#define POOL 6

static shoal_crdt_t *prop_create(void)
{
    return &cstate_new()->base;
}

static void prop_op(shoal_crdt_t *value, const shoal_node_t *self, prop_rng_t *rng)
{
    cstate_t *s = (cstate_t *)value;
    int k = (int)prop_below(rng, POOL);
    const cmember_t *m = cstate_member(s, N(k));
    switch (prop_below(rng, 9)) {
    case 0:
    case 1:
        assert_int_equal(add(s, self, k), 0);
        break;
    case 2:
    case 3:
        if (m && m->status < SHOAL_MEMBER_REMOVED) {
            uint8_t to = (uint8_t)(m->status + 1 + prop_below(rng, 2));
            if (to > SHOAL_MEMBER_REMOVED)
                to = SHOAL_MEMBER_REMOVED;
            assert_int_equal(cstate_set_status(s, self, N(k), (shoal_member_status_t)to), 0);
        }
        break;
    case 4:
        if (m && m->status >= SHOAL_MEMBER_UP && !m->up_number)
            assert_int_equal(cstate_set_up_number(s, self, N(k), 1 + prop_below(rng, 4)), 0);
        break;
    case 5: {
        const shoal_node_t *subj[POOL];
        size_t n = 0;
        for (int i = 0; i < POOL; i++)
            if (prop_chance(rng, 1, 4))
                subj[n++] = N(i);
        assert_int_equal(cstate_set_unreachable(s, self, subj, n), 0);
        break;
    }
    default:
        cstate_mark_seen(s, self);
        break;
    }
}

static const prop_type_t prop_cstate = {
    .name = "ClusterState",
    .create = prop_create,
    .random_op = prop_op,
    .deltas_converge = false,
    .strict_assoc = true,
};

static void test_properties(void **state)
{
    (void)state;
    prop_check_all(&prop_cstate, 1500);
}

/* The decisions are functions of the value: replicas that converged decide the same. */
static void test_decisions_agree_after_convergence(void **state)
{
    (void)state;
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed() ^ 0x77);
    for (int c = 0; c < prop_cases(300); c++) {
        cstate_t *r[3];
        for (int i = 0; i < 3; i++)
            r[i] = cstate_new();
        int steps = 5 + (int)prop_below(&rng, 40);
        for (int st = 0; st < steps; st++) {
            int i = (int)prop_below(&rng, 3), j = (int)prop_below(&rng, 3);
            if (prop_chance(&rng, 1, 3))
                shoal_crdt_merge(&r[i]->base, &r[j]->base);
            else
                prop_op(&r[i]->base, N(i), &rng);
        }
        for (int round = 0; round < 2; round++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    shoal_crdt_merge(&r[i]->base, &r[j]->base);
        for (int i = 1; i < 3; i++) {
            assert_true(cstate_converged(r[0]) == cstate_converged(r[i]));
            assert_ptr_equal(cstate_leader(r[0], NULL, N(7)), cstate_leader(r[i], NULL, N(7)));
            assert_ptr_equal(cstate_leader(r[0], "backend", N(7)),
                             cstate_leader(r[i], "backend", N(7)));
            assert_ptr_equal(cstate_oldest(r[0], NULL), cstate_oldest(r[i], NULL));
            assert_int_equal(cstate_seen_count(r[0]), cstate_seen_count(r[i]));
        }
        /* invariant decode relies on: an age only once Up */
        for (size_t k = 0; k < r[0]->n_members; k++)
            assert_true(!r[0]->members[k].up_number ||
                        r[0]->members[k].status >= SHOAL_MEMBER_UP);
        for (int i = 0; i < 3; i++)
            cstate_destroy(&r[i]);
    }
}

/* --------------------------------------------------------------------------------------------- */
/* The seen set under gossip: replicas that change the state, send whole states and seen-only
   statuses to each other (delivered late, out of order, duplicated), and mark themselves seen
   after every merge as membership's react() does. Checked after every step:
     - soundness (what convergence relies on): a node in a replica's seen set really held a state
       with that replica's clock at some point;
     - convergence is only claimed when every Up or Leaving member held that clock;
     - a seen-only status merged into a replica gives what merging the whole state gives.
   At the end, after the queued messages and a few rounds of all-to-all gossip, every replica holds
   the same state, seen by every replica. The case seed is printed on failure. */
#define SEEN_R        4
#define SEEN_MAX_HIST 512

typedef struct {
    uint8_t d[SEEN_MAX_HIST][16]; /* clock digests this replica's state has had */
    size_t n;
} hist_t;

static void hist_note(hist_t *h, const cstate_t *s)
{
    uint8_t d[16];
    cstate_clock_digest(s, d);
    for (size_t i = 0; i < h->n; i++)
        if (memcmp(h->d[i], d, 16) == 0)
            return;
    if (h->n < SEEN_MAX_HIST)
        memcpy(h->d[h->n++], d, 16);
}

static bool hist_has(const hist_t *h, const uint8_t d[16])
{
    for (size_t i = 0; i < h->n; i++)
        if (memcmp(h->d[i], d, 16) == 0)
            return true;
    return false;
}

static int replica_of(const shoal_node_t *n)
{
    for (int i = 0; i < SEEN_R; i++)
        if (N(i) == n)
            return i;
    return -1;
}

#define SEEN_FAIL(seed, ...)                                                                       \
    do {                                                                                           \
        print_error("seen-set property (case seed %llu, run SHOAL_SEED=%llu): ",                   \
                    (unsigned long long)(seed), (unsigned long long)prop_seed());                  \
        fail_msg(__VA_ARGS__);                                                                     \
    } while (0)

static void seen_invariants(cstate_t *const *r, const hist_t *hist, uint64_t seed)
{
    for (int i = 0; i < SEEN_R; i++) {
        uint8_t d[16];
        cstate_clock_digest(r[i], d);
        for (size_t k = 0; k < r[i]->n_seen; k++) {
            int x = replica_of(r[i]->seen[k]);
            if (x < 0 || !hist_has(&hist[x], d))
                SEEN_FAIL(seed, "replica %d lists %s as having seen a clock it never held", i,
                          shoal_node_id(r[i]->seen[k]));
        }
        if (!cstate_converged(r[i]))
            continue;
        for (size_t k = 0; k < r[i]->n_members; k++) {
            const cmember_t *m = &r[i]->members[k];
            int x = replica_of(m->node);
            if ((m->status == SHOAL_MEMBER_UP || m->status == SHOAL_MEMBER_LEAVING) &&
                (x < 0 || !hist_has(&hist[x], d)))
                SEEN_FAIL(seed, "replica %d claims convergence but %s never held its clock", i,
                          shoal_node_id(m->node));
        }
    }
}

/* A change at replica i: a member's status forward, its own reachability row, or a new member. */
static void seen_change(cstate_t *s, int i, prop_rng_t *rng)
{
    int k = (int)prop_below(rng, SEEN_R + 2);
    const cmember_t *m = cstate_member(s, N(k));
    switch (prop_below(rng, 3)) {
    case 0:
        if (!m) {
            assert_int_equal(add(s, N(i), k), 0);
        } else if (m->status < SHOAL_MEMBER_LEAVING) {
            assert_int_equal(
                cstate_set_status(s, N(i), N(k), (shoal_member_status_t)(m->status + 1)), 0);
        }
        break;
    case 1: {
        const shoal_node_t *subj[SEEN_R + 2];
        size_t n = 0;
        for (int j = 0; j < SEEN_R + 2; j++)
            if (j != i && prop_chance(rng, 1, 4))
                subj[n++] = N(j);
        assert_int_equal(cstate_set_unreachable(s, N(i), subj, n), 0);
        break;
    }
    default:
        if (m && m->status >= SHOAL_MEMBER_UP && !m->up_number)
            assert_int_equal(cstate_set_up_number(s, N(i), N(k), 1 + prop_below(rng, 9)), 0);
        break;
    }
}

/* A message in flight: a whole state, or a seen-only status (clock digest and seen bits). */
typedef struct {
    int to;
    bool status;
    cstate_t *state; /* whole state, or the sender's state the status was cut from */
    uint8_t digest[16];
    uint8_t bits[8];
    size_t nbits;
} seen_msg_t;

static void seen_deliver(cstate_t **r, hist_t *hist, const seen_msg_t *m, uint64_t seed)
{
    cstate_t *dst = r[m->to];
    if (m->status) {
        uint8_t mine[16];
        cstate_clock_digest(dst, mine);
        if (memcmp(mine, m->digest, 16) != 0)
            return; /* membership answers a differing digest with its whole state: not here */
        cstate_t *full = cstate_clone(dst);
        shoal_crdt_merge(&full->base, &m->state->base);
        size_t added = 0, missing = 0;
        assert_int_equal(cstate_merge_seen_bits(dst, m->bits, m->nbits, &added, &missing), 0);
        if (!shoal_crdt_equal(&full->base, &dst->base))
            SEEN_FAIL(seed,
                      "a seen-only status merged into replica %d differs from its whole "
                      "state merged",
                      m->to);
        cstate_destroy(&full);
    } else {
        shoal_crdt_merge(&dst->base, &m->state->base);
    }
    hist_note(&hist[m->to], dst);
    if (cstate_member(dst, N(m->to)))
        cstate_mark_seen(dst, N(m->to)); /* react() */
}

static void test_seen_set_under_gossip(void **state)
{
    (void)state;
    uint64_t base = prop_seed() ^ 0x5ee5;
    for (int c = 0; c < prop_cases(300); c++) {
        uint64_t seed = base + (uint64_t)c;
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        cstate_t *r[SEEN_R];
        hist_t *hist = calloc(SEEN_R, sizeof *hist);
        assert_non_null(hist);
        r[0] = up_cluster(SEEN_R);
        for (int i = 1; i < SEEN_R; i++)
            r[i] = cstate_clone(r[0]);
        for (int i = 0; i < SEEN_R; i++) {
            hist_note(&hist[i], r[i]);
            cstate_mark_seen(r[i], N(i));
        }
        seen_msg_t q[64];
        size_t nq = 0;
        int steps = 20 + (int)prop_below(&rng, 80);
        for (int st = 0; st < steps; st++) {
            int i = (int)prop_below(&rng, SEEN_R);
            uint64_t what = prop_below(&rng, 10);
            if (what < 2) {
                seen_change(r[i], i, &rng);
                hist_note(&hist[i], r[i]);
                if (cstate_member(r[i], N(i)))
                    cstate_mark_seen(r[i], N(i));
            } else if (what < 6 && nq < 64) {
                seen_msg_t *m = &q[nq++];
                memset(m, 0, sizeof *m);
                m->to = (int)prop_below(&rng, SEEN_R);
                m->state = cstate_clone(r[i]);
                m->status = r[i]->n_members <= 64 && prop_chance(&rng, 1, 2);
                if (m->status) {
                    cstate_clock_digest(r[i], m->digest);
                    m->nbits = cstate_seen_bits(r[i], m->bits, sizeof m->bits);
                }
            } else if (nq) {
                size_t k = (size_t)prop_below(&rng, nq); /* any order */
                seen_deliver(r, hist, &q[k], seed);
                if (!prop_chance(&rng, 1, 4)) { /* else delivered again later: duplicated */
                    cstate_destroy(&q[k].state);
                    q[k] = q[--nq];
                }
            }
            seen_invariants(r, hist, seed);
        }
        while (nq) {
            seen_deliver(r, hist, &q[nq - 1], seed);
            cstate_destroy(&q[--nq].state);
            seen_invariants(r, hist, seed);
        }
        /* gossip until quiet: each round every replica sends its state to every other */
        for (int round = 0; round < 3; round++)
            for (int i = 0; i < SEEN_R; i++)
                for (int j = 0; j < SEEN_R; j++) {
                    seen_msg_t m = {.to = j, .state = r[i]};
                    seen_deliver(r, hist, &m, seed);
                    seen_invariants(r, hist, seed);
                }
        for (int i = 1; i < SEEN_R; i++)
            if (!shoal_crdt_equal(&r[0]->base, &r[i]->base))
                SEEN_FAIL(seed, "replicas 0 and %d differ after gossip went quiet", i);
        for (int i = 0; i < SEEN_R; i++)
            if (!cstate_seen_by(r[0], N(i)))
                SEEN_FAIL(seed, "replica %d has not seen the final state", i);
        for (int i = 0; i < SEEN_R; i++)
            cstate_destroy(&r[i]);
        free(hist);
    }
}

/* A format-1 state (a seen table of clocks, empty reachability rows) from an older member. */
static void test_format1_state_decodes(void **state)
{
    (void)state;
    handmade_t h;
    handmade(&h); /* clock {0:2, 1:1}; row of 0 lists 1 */
    /* node 0 saw {0:2, 1:1} (the current clock), node 1 saw {0:1} (older) */
    Shoal__Membership__Seen se[2], *sp[2];
    Shoal__Membership__Clock sc[2];
    uint32_t n0[] = {0, 1}, n1[] = {0};
    uint64_t c0[] = {2, 1}, c1[] = {1};
    for (int i = 0; i < 2; i++) {
        shoal__membership__seen__init(&se[i]);
        shoal__membership__clock__init(&sc[i]);
        se[i].node = (uint32_t)i;
        se[i].clock = &sc[i];
        sp[i] = &se[i];
    }
    sc[0].nodes = n0;
    sc[0].counters = c0;
    sc[0].n_nodes = sc[0].n_counters = 2;
    sc[1].nodes = n1;
    sc[1].counters = c1;
    sc[1].n_nodes = sc[1].n_counters = 1;
    h.msg.seen = sp;
    h.msg.n_seen = 2;
    assert_int_equal(decode_msg(&h.msg), 0);

    size_t n = shoal__membership__cluster_state__get_packed_size(&h.msg);
    uint8_t *p = malloc(n);
    shoal__membership__cluster_state__pack(&h.msg, p);
    Shoal__Ddata__Value env = SHOAL__DDATA__VALUE__INIT;
    env.type = CSTATE_TAG;
    env.version = 1;
    env.payload.data = p;
    env.payload.len = n;
    size_t en = shoal__ddata__value__get_packed_size(&env);
    uint8_t *e = malloc(en);
    shoal__ddata__value__pack(&env, e);
    shoal_crdt_t *out = NULL;
    assert_int_equal(shoal_crdt_decode(e, en, &out), 0);
    const cstate_t *d = (const cstate_t *)out;
    assert_true(cstate_seen_by(d, N(0)));
    assert_false(cstate_seen_by(d, N(1)));
    assert_int_equal(d->n_seen, 1);
    assert_true(cstate_is_unreachable(d, N(1)));
    /* written back as format 2: the seen set, not the table */
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(out, &b), 0);
    Shoal__Ddata__Value *env2 = shoal__ddata__value__unpack(NULL, b.len, b.data);
    assert_non_null(env2);
    assert_int_equal(env2->version, 2);
    Shoal__Membership__ClusterState *cs =
        shoal__membership__cluster_state__unpack(NULL, env2->payload.len, env2->payload.data);
    assert_non_null(cs);
    assert_int_equal(cs->n_seen, 0);
    assert_int_equal(cs->n_seen_by, 1);
    shoal__membership__cluster_state__free_unpacked(cs, NULL);
    shoal__ddata__value__free_unpacked(env2, NULL);
    shoal_buf_free(&b);
    shoal_crdt_destroy(&out);

    /* an empty row (format 1 kept them) is dropped; both seen forms at once are refused */
    handmade(&h);
    h.r.n_unreachable = 0;
    h.msg.seen = sp;
    h.msg.n_seen = 2;
    assert_int_equal(decode_msg(&h.msg), 0);
    uint32_t by[] = {0};
    h.msg.seen_by = by;
    h.msg.n_seen_by = 1;
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    free(p);
    free(e);
}

/* Format 2's own rules: the seen set names members only, ascending; a row's version is covered
   by its observer's clock entry. */
static void test_decode_rejects_bad_seen_set_and_rows(void **state)
{
    (void)state;
    handmade_t h;
    uint32_t by[2];
    handmade(&h);
    by[0] = 0;
    by[1] = 1;
    h.msg.seen_by = by;
    h.msg.n_seen_by = 2;
    assert_int_equal(decode_msg(&h.msg), 0);
    by[0] = 1;
    by[1] = 0; /* not ascending */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    by[0] = by[1] = 0; /* duplicate */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    by[1] = 7; /* past the table */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);
    handmade(&h);
    h.r.version = 3; /* observer 0's clock entry is 2 */
    assert_int_equal(decode_msg(&h.msg), SHOAL_EDECODE);

    /* seen bits: a length that does not match the members, or a bit past the last member */
    cstate_t *s = up_cluster(3);
    uint8_t bits[2] = {0x07, 0};
    assert_int_equal(cstate_merge_seen_bits(s, bits, 2, NULL, NULL), SHOAL_EDECODE);
    bits[0] = 0x0f;
    assert_int_equal(cstate_merge_seen_bits(s, bits, 1, NULL, NULL), SHOAL_EDECODE);
    assert_int_equal(s->n_seen, 0);
    bits[0] = 0x05;
    size_t added = 0, missing = 0;
    cstate_mark_seen(s, N(1));
    assert_int_equal(cstate_merge_seen_bits(s, bits, 1, &added, &missing), 0);
    assert_int_equal(added, 2);
    assert_int_equal(missing, 1);
    assert_int_equal(cstate_seen_count(s), 3);
    assert_int_equal(cstate_seen_bits(s, bits, sizeof bits), 1);
    assert_int_equal(bits[0], 0x07);
    cstate_destroy(&s);
}

/* --------------------------------------------------------------------------------------------- */
/* Protocol versions (docs/protocol-versions.md): the cluster's version is the lowest
   protocol_max of the members not Removed (not said = 1), capped by this build and the pin. */
static void test_protocol_version_rule(void **state)
{
    (void)state;
    cstate_t *empty = cstate_new();
    assert_int_equal(cstate_protocol(empty, 2, 0), 2); /* no member: only the caps */
    assert_int_equal(cstate_protocol(empty, 2, 1), 1);
    cstate_destroy(&empty);

    cstate_t *s = up_cluster(3);
    assert_int_equal(cstate_protocol(s, 2, 0), 1); /* nobody said: 1 */
    assert_int_equal(cstate_set_protocol_max(s, N(0), N(0), 2), 0);
    assert_int_equal(cstate_set_protocol_max(s, N(1), N(1), 2), 0);
    assert_int_equal(cstate_protocol(s, 2, 0), 1); /* node 2 still speaks only 1 */
    uint64_t sum = cstate_version_sum(s);
    assert_int_equal(cstate_set_protocol_max(s, N(2), N(2), 2), 0);
    assert_true(cstate_version_sum(s) > sum); /* a change raises the writer's entry */
    assert_int_equal(cstate_protocol(s, 2, 0), 2);
    assert_int_equal(cstate_protocol(s, 2, 1), 1); /* pinned */
    assert_int_equal(cstate_protocol(s, 1, 0), 1); /* this build speaks no higher */
    assert_int_equal(cstate_protocol(s, 3, 0), 2);
    /* lowering is a no-op: the merge would take the higher back */
    sum = cstate_version_sum(s);
    assert_int_equal(cstate_set_protocol_max(s, N(2), N(2), 1), 0);
    assert_int_equal(cstate_version_sum(s), sum);
    assert_int_equal(cmember_protocol(cstate_member(s, N(2))), 2);
    assert_int_equal(cstate_set_protocol_max(s, N(0), N(5), 2), SHOAL_ENOTMEMBER);

    /* a joiner that says nothing counts as 1 while Joining, Down..., until Removed */
    assert_int_equal(add(s, N(0), 3), 0);
    assert_int_equal(cstate_protocol(s, 2, 0), 1);
    assert_int_equal(cstate_set_status(s, N(0), N(3), SHOAL_MEMBER_DOWN), 0);
    assert_int_equal(cstate_protocol(s, 2, 0), 1);
    assert_int_equal(cstate_set_status(s, N(0), N(3), SHOAL_MEMBER_REMOVED), 0);
    assert_int_equal(cstate_protocol(s, 2, 0), 2);
    cstate_destroy(&s);
}

/* A 0.1.x node decodes the state without protocol_max and sends it back so: the merge keeps the
   field wherever it meets that copy, both ways, and a state of protocol 1 only is written without
   the field (0.1.x's bytes). */
static void test_merge_keeps_protocol_max(void **state)
{
    (void)state;
    cstate_t *s = up_cluster(2);
    assert_int_equal(cstate_set_protocol_max(s, N(1), N(1), 2), 0);

    /* round trip keeps it */
    shoal_buf_t b = {0};
    assert_int_equal(shoal_crdt_encode(&s->base, &b), 0);
    shoal_crdt_t *back = NULL;
    assert_int_equal(shoal_crdt_decode(b.data, b.len, &back), 0);
    assert_int_equal(cmember_protocol(cstate_member((cstate_t *)back, N(1))), 2);
    assert_true(shoal_crdt_equal(back, &s->base));
    shoal_crdt_destroy(&back);
    shoal_buf_free(&b);

    /* the old node's copy: the same state without the field */
    cstate_t *old = cstate_clone(s);
    for (size_t i = 0; i < old->n_members; i++)
        old->members[i].protocol_max = 0;
    cstate_t *x = cstate_clone(s), *y = cstate_clone(old);
    shoal_crdt_merge(&x->base, &old->base); /* new merges old's */
    shoal_crdt_merge(&y->base, &s->base);   /* old's copy merged by a new node */
    assert_int_equal(cmember_protocol(cstate_member(x, N(1))), 2);
    assert_int_equal(cmember_protocol(cstate_member(y, N(1))), 2);
    assert_true(shoal_crdt_equal(&x->base, &y->base));
    assert_int_equal(cstate_protocol(x, 2, 0), 1); /* node 0 said nothing */

    /* the field costs its 2 bytes where it is said; a record saying 1 is written as one saying
       nothing (0.1.x's bytes) */
    shoal_buf_t b1 = {0}, b2 = {0}, b3 = {0};
    assert_int_equal(shoal_crdt_encode(&s->base, &b1), 0);
    assert_int_equal(shoal_crdt_encode(&old->base, &b2), 0);
    assert_int_equal(b1.len, b2.len + 2);
    old->members[0].protocol_max = 1;
    assert_int_equal(shoal_crdt_encode(&old->base, &b3), 0);
    assert_int_equal(b3.len, b2.len);
    assert_memory_equal(b3.data, b2.data, b2.len);
    shoal_buf_free(&b1);
    shoal_buf_free(&b2);
    shoal_buf_free(&b3);
    cstate_destroy(&x);
    cstate_destroy(&y);
    cstate_destroy(&old);
    cstate_destroy(&s);
}

int main(void)
{
    prop_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_is_idempotent_and_type_is_known),
        cmocka_unit_test(test_add_member_sorts_roles_and_raises_writer_clock),
        cmocka_unit_test(test_set_status_only_forward),
        cmocka_unit_test(test_set_up_number_once_and_only_when_up),
        cmocka_unit_test(test_merge_takes_status_max_and_lowest_up_number),
        cmocka_unit_test(test_merge_descriptive_conflict_is_deterministic),
        cmocka_unit_test(test_reachability_rows),
        cmocka_unit_test(test_seen_and_convergence),
        cmocka_unit_test(test_seen_survives_merge_ping_pong),
        cmocka_unit_test(test_leader),
        cmocka_unit_test(test_oldest),
        cmocka_unit_test(test_version_sum_and_render),
        cmocka_unit_test(test_encoding_round_trips_canonically),
        cmocka_unit_test(test_decode_rejects_invalid_input),
        cmocka_unit_test(test_properties),
        cmocka_unit_test(test_decisions_agree_after_convergence),
        cmocka_unit_test(test_seen_set_under_gossip),
        cmocka_unit_test(test_format1_state_decodes),
        cmocka_unit_test(test_decode_rejects_bad_seen_set_and_rows),
        cmocka_unit_test(test_protocol_version_rule),
        cmocka_unit_test(test_merge_keeps_protocol_max),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
