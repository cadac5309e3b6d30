/*  test_sharding_alert_metrics.c — the sharding figures the alert rules of docs/alerts/
    shoal-rules.yml watch (issue 38's stand-ins replaced), on a node's GET /metrics:

    entity_save_failures_counted: two members, sbr off, an entity-state type whose saves are
      acknowledged by a majority (2 of 2). A save on the entity's home succeeds
      (shoal_sharding_entity_saves_total); with the home cut from the other member the next one
      times out, and shoal_sharding_entity_save_failures_total{type} counts it on the home.
    shards_without_home_counted: one member; a type whose role no member has (so no coordinator
      can run and nobody may host): messages to three entities of three shards wait in the proxy,
      and shoal_sharding_shards_without_home{type} is 3 (0 for the hosted counter type).
    handoff_in_progress_aged: one member; a shard whose entity ignores the stop message is
      stopped (a coordinator handoff); while the entity holds it, shoal_sharding_handoff_oldest_
      seconds{type} grows past 1 s, and is back to 0 once the shard has been stopped by force.
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
#include "http.h"
#include "members.h"
#include "shards.h"

#define ST "st"

static shoal_metrics_t *m[2];

static void metrics_on(int i)
{
    int err = 0;
    m[i] = shoal_metrics_start(tsn[i].sys, NULL, 0, &err);
    assert_non_null(m[i]);
    assert_int_equal(shoal_sharding_metrics(tsn[i].sh, m[i]), 0);
}

/* The value of the sample `name` (with its labels) in node i's /metrics; -1: absent. */
static double sample(int i, const char *name)
{
    thttp_resp_t r;
    assert_true(thttp_get(shoal_metrics_port(m[i]), "/metrics", &r));
    assert_int_equal(r.status, 200);
    double v = -1;
    size_t n = strlen(name);
    for (const char *l = r.body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, name, n) == 0 && l[n] == ' ') {
            v = strtod(l + n + 1, NULL);
            break;
        }
    thttp_free(&r);
    return v;
}

typedef struct {
    int node;
    const char *name;
    double at_least;
} want_t;

static bool reaches(void *arg)
{
    want_t *w = arg;
    return sample(w->node, w->name) >= w->at_least;
}

static int teardown(void **state)
{
    for (int i = 0; i < 2; i++)
        shoal_metrics_stop(&m[i]);
    return tsnode_teardown(state);
}

#define SAVES(t)    "shoal_sharding_entity_saves_total{type=\"" t "\"}"
#define FAILURES(t) "shoal_sharding_entity_save_failures_total{type=\"" t "\"}"

static void entity_save_failures_counted(void **state)
{
    (void)state;
    shoal_cluster_settings_t cs;
    tmember_settings(&cs);
    cs.sbr_strategy = SHOAL_SBR_OFF; /* the cut must not move the shard: its saves must fail */
    shoal_region_t *st[2];
    for (int i = 0; i < 2; i++) {
        tsnode_opts_t o = {.seed = 0, .cluster = &cs};
        tsnode_start(i, &o);
        if (i == 0)
            tsnode_wait_up(1u, 15000);
    }
    tsnode_wait_up(0x3, 20000);
    for (int i = 0; i < 2; i++) {
        shoal_sharding_settings_t s;
        tshard_settings(&s);
        s.stop_message = NULL;
        s.stop_message_len = 0;
        s.entity_state = true;
        s.state_write_timeout_ms = 1000; /* a failed save is known in a second */
        int err = 0;
        st[i] = shoal_region_start(tsn[i].sh, ST, &s, tsaver_fns(), NULL, &err);
        assert_non_null(st[i]);
        metrics_on(i);
    }
    tsnode_wait_registered(0x3, 0, 2, 20000);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_region_ask_sync(st[0], "e1", "one", 3, 10000, &b), 0);
    int home = tsnode_index(shoal_region_entity_home(st[0], "e1"));
    assert_true(home == 0 || home == 1);
    int other = 1 - home;
    assert_true(sample(home, SAVES(ST)) >= 1);
    assert_true(sample(home, FAILURES(ST)) == 0);
    assert_true(sample(home, FAILURES(TSHARD_TYPE)) == 0);

    /* the home alone: a majority of two is two, so the save times out */
    shoal_fault_t cut = {.dir = SHOAL_FAULT_BOTH, .cut = true};
    assert_int_equal(shoal_system_fault(tsn[home].sys, shoal_system_endpoint(tsn[other].sys), &cut),
                     0);
    int rc = shoal_region_ask_sync(st[home], "e1", "two", 3, 10000, &b);
    assert_int_not_equal(rc, 0);
    want_t w = {home, FAILURES(ST), 1};
    if (!wait_until(reaches, &w, 5000))
        fail_msg("a failed save (ask: %s) not counted: %s = %g", shoal_strerror(rc), w.name,
                 sample(home, w.name));
    assert_true(sample(home, FAILURES(TSHARD_TYPE)) == 0);
    shoal_fault_t heal = {.dir = SHOAL_FAULT_BOTH};
    assert_int_equal(
        shoal_system_fault(tsn[home].sys, shoal_system_endpoint(tsn[other].sys), &heal), 0);
    shoal_buf_free(&b);
}

#define HOMELESS(t) "shoal_sharding_shards_without_home{type=\"" t "\"}"

static void shards_without_home_counted(void **state)
{
    (void)state;
    tsnode_opts_t o = {.seed = 0};
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    tsnode_wait_registered(1u, 0, 1, 20000);
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.role = "absent"; /* no member has it: a proxy, and no coordinator anywhere */
    shoal_region_t *nowhere = tsnode_region(0, "nowhere", &s, false);
    metrics_on(0);
    assert_true(sample(0, HOMELESS("nowhere")) == 0);
    char ids[3][32];
    tshard_pick_ids("n", s.number_of_shards, 3, ids);
    for (int k = 0; k < 3; k++)
        assert_int_equal(shoal_region_tell(nowhere, ids[k], "x", 1), 0);
    /* a second message to a shard that already waits counts the shard once */
    assert_int_equal(shoal_region_tell(nowhere, ids[0], "y", 1), 0);
    want_t w = {0, HOMELESS("nowhere"), 3};
    if (!wait_until(reaches, &w, 5000))
        fail_msg("%s = %g, not 3", w.name, sample(0, w.name));
    assert_true(sample(0, HOMELESS("nowhere")) == 3);
    /* the hosted type: a message finds its home */
    shoal_buf_t b = {0};
    assert_int_equal(shoal_region_ask_sync(tsn[0].r, "c1", "whoami", 6, 10000, &b), 0);
    shoal_buf_free(&b);
    assert_true(sample(0, HOMELESS(TSHARD_TYPE)) == 0);
}

#define OLDEST(t) "shoal_sharding_handoff_oldest_seconds{type=\"" t "\"}"

static bool handoff_over(void *arg)
{
    (void)arg;
    return sample(0, OLDEST(TSHARD_TYPE)) == 0 && tsnode_shard_count(0) == 0;
}

static void handoff_in_progress_aged(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    tshard_settings(&s);
    s.handoff_timeout_ms = 12000; /* the stubborn entity is stopped by force after 7 s */
    tsnode_opts_t o = {.seed = 0, .sharding = &s};
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    tsnode_wait_registered(1u, 0, 1, 20000);
    metrics_on(0);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_region_ask_sync(tsn[0].r, "h1", "whoami", 6, 10000, &b), 0);
    shoal_buf_free(&b);
    assert_int_equal(shoal_region_tell(tsn[0].r, "h1", "stubborn", 8), 0);
    assert_true(sample(0, OLDEST(TSHARD_TYPE)) == 0);
    char shard[SHOAL_SHARD_ID_MAX + 1];
    shoal_sharding_default_shard_id("h1", s.number_of_shards, shard);
    const char *one[] = {shard};
    assert_int_equal(shoal_region_stop_shards(tsn[0].r, one, 1), 0);
    want_t w = {0, OLDEST(TSHARD_TYPE), 1.0};
    if (!wait_until(reaches, &w, 6000))
        fail_msg("a handoff held by a stubborn entity: %s = %g", w.name, sample(0, w.name));
    if (!wait_until(handoff_over, NULL, 20000))
        fail_msg("after the forced stop: %s = %g, %d shards", w.name, sample(0, w.name),
                 tsnode_shard_count(0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(entity_save_failures_counted, teardown),
        cmocka_unit_test_teardown(shards_without_home_counted, teardown),
        cmocka_unit_test_teardown(handoff_in_progress_aged, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
