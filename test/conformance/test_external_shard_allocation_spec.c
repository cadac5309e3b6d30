/*  test_external_shard_allocation_spec.c — conformance: Akka/Pekko's ExternalShardAllocationSpec,
    see docs/conformance.md. The external allocation strategy (shard = entity id here, as the
    spec's extractor): a shard with no location goes to the region that asked; a location written
    through ddata (shoal_external_allocate) moves the shard there; a location may name a member
    that has not joined yet (the shard goes there once it has); a location can be moved again.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "shard_conf.h"

#include <stdio.h>
#include <string.h>

static void id_is_shard(const char *entity_id, uint32_t number_of_shards, char *out, void *arg)
{
    (void)number_of_shards;
    (void)arg;
    snprintf(out, SHOAL_SHARD_ID_MAX + 1, "%s", entity_id);
}

static shoal_sharding_settings_t settings(void)
{
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.allocation.kind = SHOAL_ALLOC_EXTERNAL;
    s.shard_id = id_is_shard;
    return s;
}

static char forth_ep[64];

/* "form cluster" */
static void form_cluster(void **state)
{
    (void)state;
    shoal_sharding_settings_t s = settings();
    tsnode_opts_t o = {.sharding = &s, .no_region = true};
    sc_start_nodes(3, &o);
}

/* "start cluster sharding" */
static void start_cluster_sharding(void **state)
{
    (void)state;
    shoal_sharding_settings_t s = settings();
    for (int i = 0; i < 3; i++)
        assert_non_null(tsnode_region(i, TSHARD_TYPE, &s, false));
    tsnode_wait_registered(0x7, 0, 3, 15000);
}

static uint32_t ask_ms(void)
{
    return 3000u * (uint32_t)tscale();
}

/* "default to allocating a shard to the local shard region" */
static void default_to_local_region(void **state)
{
    (void)state;
    const char *names[] = {"first", "second", "third"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(sc_home(i, TSHARD_TYPE, names[i], 20000u * (uint32_t)tscale()), i);
}

typedef struct {
    int via_mask;
    const char *id;
    int home;
} home_t;

static bool homes_are(void *arg)
{
    home_t *h = arg;
    for (int i = 0; i < TS_MAX; i++)
        if (((h->via_mask >> i) & 1) && sc_home(i, TSHARD_TYPE, h->id, ask_ms()) != h->home)
            return false;
    return true;
}

static const char *addr_of(int i)
{
    static char a[TS_MAX][64];
    const shoal_node_t *n = shoal_system_self(tsn[i].sys);
    snprintf(a[i], sizeof a[i], "%s:%u", shoal_node_host(n), shoal_node_port(n));
    return a[i];
}

/* "move shard via distributed data" */
static void move_shard_via_ddata(void **state)
{
    (void)state;
    assert_int_equal(shoal_external_allocate(tsn[0].r, "cats", addr_of(0), ask_ms()), 0);
    home_t h = {0x6, "cats", 0};
    assert_true(wait_until(homes_are, &h, 10000));
}

/* "allocate to a node that does not exist yet" */
static void allocate_to_node_not_yet_there(void **state)
{
    (void)state;
    int port = tfree_port();
    snprintf(forth_ep, sizeof forth_ep, "127.0.0.1:%d", port);
    assert_int_equal(shoal_external_allocate(tsn[1].r, "on-forth", forth_ep, ask_ms()), 0);
    shoal_sharding_settings_t s = settings();
    tsnode_opts_t o = {.sharding = &s, .seed = 0, .port = port};
    tsnode_start(3, &o);
    tsnode_wait_up(0xf, 20000);
    tsnode_wait_registered(0xf, 0, 4, 15000);
    home_t h = {0x7, "on-forth", 3};
    assert_true(wait_until(homes_are, &h, 10000));
}

/* "move allocation" */
static void move_allocation(void **state)
{
    (void)state;
    assert_int_equal(shoal_external_allocate(tsn[2].r, "on-forth", addr_of(0), ask_ms()), 0);
    home_t h = {0xf, "on-forth", 0};
    assert_true(wait_until(homes_are, &h, 10000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(form_cluster),
        cmocka_unit_test(start_cluster_sharding),
        cmocka_unit_test(default_to_local_region),
        cmocka_unit_test(move_shard_via_ddata),
        cmocka_unit_test(allocate_to_node_not_yet_there),
        cmocka_unit_test(move_allocation),
    };
    return cmocka_run_group_tests_name("ExternalShardAllocationSpec", tests, NULL, tsnode_teardown);
}
