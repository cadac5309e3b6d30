/*  test_wildcard_subscribe_spec.c — conformance: Akka/Pekko's WildcardSubscribeSpec, see
    docs/conformance.md. Subscriptions to every key with a prefix ("counter-*"): told of each
    changed key, not of other prefixes, a new subscriber told the current values, nothing after
    unsubscribing; expiry of inactive keys notified; changes from another node notified to a
    subscription made before the node joined. Settings as the spec's: gossip 500 ms, notify 100
    ms, keys "expiry-*" expire after inactivity (1 s here instead of 2 s, to keep the suite fast).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "conf.h"
#include "members.h"

#include <stdio.h>
#include <string.h>

static shoal_replicator_settings_t settings(void)
{
    static const shoal_expiry_t expiry[] = {{"expiry-*", 1000}};
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    rs.gossip_interval_ms = 500;
    rs.notify_subscribers_interval_ms = 100;
    rs.expire_keys = expiry;
    rs.n_expire_keys = 1;
    return rs;
}

static void start(int i)
{
    shoal_replicator_settings_t rs = settings();
    cm_opts_t o = {.rep = &rs};
    cm_start(i, &o);
}

/* Waits for notification n (1-based) of s and checks it is a change of key to value v. */
static void expect_change(cm_sub_t *s, int n, const char *key, uint64_t v)
{
    assert_true(cm_sub_wait(s, n, 10000));
    char k[64];
    uint64_t got = 0;
    assert_int_equal(cm_sub_event(s, n - 1, k, sizeof k, &got), SHOAL_CHANGED);
    assert_string_equal(k, key);
    assert_int_equal(got, v);
}

static void flush(int i)
{
    assert_int_equal(shoal_replicator_flush_sync(cm[i].rep), 0);
}

/* "notify changed entry" */
static void notify_changed_entry(void **state)
{
    (void)state;
    start(0);
    cm_join(0, 0);
    cm_wait_up(1u, 10000);
    shoal_replicator_t *r = cm[0].rep;
    static cm_sub_t s1, s2, sa, so;
    shoal_consistency_t l = c_local();
    cm_subscribe(r, "counter-*", &s1);
    assert_int_equal(cm_incr(r, "counter-A", 1, l), 0);
    expect_change(&s1, 1, "counter-A", 1);
    assert_int_equal(cm_incr(r, "counter-A", 1, l), 0);
    expect_change(&s1, 2, "counter-A", 2);
    assert_int_equal(cm_incr(r, "counter-B", 1, l), 0);
    expect_change(&s1, 3, "counter-B", 1);
    assert_int_equal(cm_incr(r, "other-A", 17, l), 0);
    flush(0);
    assert_int_equal(cm_sub_count(&s1), 3);

    cm_subscribe(r, "counter-*", &s2);
    cm_subscribe(r, "counter-A", &sa);
    cm_subscribe(r, "other-*", &so);
    flush(0);
    assert_int_equal(cm_sub_count(&s1), 3);
    /* the new prefix subscriber is told each matching key once, with its value */
    assert_true(cm_sub_wait(&s2, 2, 5000));
    assert_int_equal(cm_sub_count(&s2), 2);
    uint64_t seen_a = 0, seen_b = 0;
    for (int k = 0; k < 2; k++) {
        char key[64];
        uint64_t v = 0;
        assert_int_equal(cm_sub_event(&s2, k, key, sizeof key, &v), SHOAL_CHANGED);
        if (strcmp(key, "counter-A") == 0)
            seen_a = v;
        else if (strcmp(key, "counter-B") == 0)
            seen_b = v;
        else
            fail_msg("unexpected change of %s", key);
    }
    assert_int_equal(seen_a, 2);
    assert_int_equal(seen_b, 1);
    expect_change(&sa, 1, "counter-A", 2);
    expect_change(&so, 1, "other-A", 17);

    assert_int_equal(cm_incr(r, "counter-B", 10, l), 0);
    expect_change(&s1, 4, "counter-B", 11);
    expect_change(&s2, 3, "counter-B", 11);
    cm_unsubscribe(r, &s1);
    assert_int_equal(cm_incr(r, "counter-B", 5, l), 0);
    expect_change(&s2, 4, "counter-B", 16);
    flush(0);
    assert_int_equal(cm_sub_count(&s1), 4);
    cm_unsubscribe(r, &s2);
    cm_unsubscribe(r, &sa);
    cm_unsubscribe(r, &so);
    cm_sub_free(&s1);
    cm_sub_free(&s2);
    cm_sub_free(&sa);
    cm_sub_free(&so);
}

static bool expiry_gone(void *arg)
{
    (void)arg;
    uint64_t v = 0;
    return cm_gcounter(cm[0].rep, "expiry-A", c_local(), &v) == SHOAL_ENOTFOUND;
}

/* "notify expired entry" */
static void notify_expired_entry(void **state)
{
    (void)state;
    shoal_replicator_t *r = cm[0].rep;
    static cm_sub_t s;
    cm_subscribe(r, "expiry-*", &s);
    assert_int_equal(cm_incr(r, "expiry-A", 1, c_local()), 0);
    expect_change(&s, 1, "expiry-A", 1);
    uint64_t v = 0;
    assert_int_equal(cm_gcounter(r, "expiry-A", c_local(), &v), 0);
    assert_int_equal(v, 1);
    /* a read is an access too (as in Akka): wait for the notification, not by polling */
    assert_true(cm_sub_wait(&s, 2, 10000));
    char key[64];
    assert_int_equal(cm_sub_event(&s, 1, key, sizeof key, NULL), SHOAL_EXPIRED);
    assert_string_equal(key, "expiry-A");
    assert_true(expiry_gone(NULL));
    /* the key can be used again */
    assert_int_equal(cm_incr(r, "expiry-A", 2, c_local()), 0);
    expect_change(&s, 3, "expiry-A", 2);
    assert_int_equal(cm_gcounter(r, "expiry-A", c_local(), &v), 0);
    assert_int_equal(v, 2);
    cm_unsubscribe(r, &s);
    cm_sub_free(&s);
}

/* "notify when changed from another node": the second subscribes before it joins. */
static void notify_when_changed_from_another_node(void **state)
{
    (void)state;
    assert_int_equal(cm_incr(cm[0].rep, "other-A", 1, c_local()), 0);
    start(1);
    static cm_sub_t s;
    cm_subscribe(cm[1].rep, "other-*", &s);
    cm_join(1, 0);
    expect_change(&s, 1, "other-A", 18);
    assert_int_equal(cm_incr(cm[0].rep, "other-A", 1, c_local()), 0);
    expect_change(&s, 2, "other-A", 19);
    cm_unsubscribe(cm[1].rep, &s);
    cm_sub_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(notify_changed_entry),
        cmocka_unit_test(notify_expired_entry),
        cmocka_unit_test(notify_when_changed_from_another_node),
    };
    return cmocka_run_group_tests_name("WildcardSubscribeSpec", tests, NULL, cm_teardown);
}
