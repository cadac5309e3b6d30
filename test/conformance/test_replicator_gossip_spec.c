/*  test_replicator_gossip_spec.c — conformance: Akka/Pekko's ReplicatorGossipSpec, see
    docs/conformance.md. The first node alone writes 500 small and 15 large ORSets (deltas off,
    gossip every second, at most 400 keys a delta message, a 50,000-byte frame limit as the spec
    sets); a second node joins and catches up with every key by full-state gossip, and no message
    is dropped for its size.
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
#include <stdlib.h>
#include <string.h>

#define SMALL      500
#define LARGE      15
#define SMALL_SIZE 100
/* the spec's large payload is 4,000 random UTF-16 characters: about 12,000 bytes in UTF-8 */
#define LARGE_SIZE 12000

typedef struct {
    const shoal_node_t *self;
    char *payload;
    size_t len;
} add_t;

static int add_payload(shoal_crdt_t *v, void *arg)
{
    add_t *a = arg;
    return shoal_orset_add(v, a->self, a->payload, a->len);
}

static void payload(char *buf, size_t len, unsigned *rnd)
{
    for (size_t k = 0; k < len; k++)
        buf[k] = (char)('!' + rand_r(rnd) % 90);
}

typedef struct {
    size_t len;
} len_t;

static int first_len(const void *elem, size_t len, void *arg)
{
    (void)elem;
    ((len_t *)arg)->len = len;
    return 1;
}

static bool caught_up(void *arg)
{
    (void)arg;
    shoal_consistency_t l = c_local();
    char key[32];
    for (int k = 0; k < SMALL + LARGE; k++) {
        bool small = k < SMALL;
        snprintf(key, sizeof key, small ? "small-%03d" : "large-%03d", small ? k : k - SMALL);
        shoal_crdt_t *v = NULL;
        if (shoal_replicator_get_sync(cm[1].rep, key, NULL, &l, &v) != 0)
            return false;
        len_t n = {0};
        shoal_orset_foreach(v, first_len, &n);
        shoal_crdt_destroy(&v);
        if (n.len != (small ? SMALL_SIZE : LARGE_SIZE))
            return false;
    }
    return true;
}

/* "catch up when adding node" */
static void catch_up_when_adding_node(void **state)
{
    (void)state;
    shoal_replicator_settings_t rs;
    tmember_data_settings(&rs);
    rs.delta_enabled = false;
    rs.gossip_interval_ms = 1000;
    rs.max_delta_elements = 400;
    cm_opts_t o = {.rep = &rs, .max_frame_bytes = 50000};
    cm_start(0, &o);
    cm_join(0, 0);
    cm_wait_up(1u, 10000);
    unsigned rnd = 7;
    char *buf = malloc(LARGE_SIZE);
    shoal_consistency_t l = c_local();
    char key[32];
    for (int k = 0; k < SMALL + LARGE; k++) {
        bool small = k < SMALL;
        snprintf(key, sizeof key, small ? "small-%03d" : "large-%03d", small ? k : k - SMALL);
        add_t a = {shoal_system_self(cm[0].sys), buf, small ? SMALL_SIZE : LARGE_SIZE};
        payload(buf, a.len, &rnd);
        assert_int_equal(
            shoal_replicator_update_sync(cm[0].rep, key, shoal_orset_new(), &l, add_payload, &a),
            0);
    }
    free(buf);
    cm_start(1, &o);
    cm_join(1, 0);
    cm_wait_replicas(3u, 2, 10000);
    assert_true(wait_until(caught_up, NULL, 10000));
    for (int i = 0; i < 2; i++) {
        shoal_system_stats_t st;
        assert_int_equal(shoal_system_stats(cm[i].sys, &st), 0);
        assert_int_equal(st.dropped_oversized, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(catch_up_when_adding_node),
    };
    return cmocka_run_group_tests_name("ReplicatorGossipSpec", tests, NULL, cm_teardown);
}
