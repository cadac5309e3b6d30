/*  test_sharding_latency_metrics.c — sharding's latency histograms on /metrics (issue 37 item 3,
    issue 40): shoal_sharding_ask_seconds counts the asks of the node, shoal_sharding_entity_save_
    seconds the entity-state saves of the entities the node hosts, shoal_sharding_handoff_seconds
    the handoffs its region saw; each a histogram per entity type (type="..."), whose +Inf bucket
    is its count. Three members on loopback, a plain type and one with entity state; the counts
    are read as differences between two scrapes, so the cluster's own start-up asks do not
    matter. */
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

#define NODES 3
#define ASKS  10
#define SAVES 6

static shoal_region_t *st[NODES];
static shoal_metrics_t *m[NODES];

static double value_of(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

/* A sample of node i's /metrics (-1: absent). */
static double sample(int i, const char *name)
{
    thttp_resp_t r;
    assert_true(thttp_get(shoal_metrics_port(m[i]), "/metrics", &r));
    assert_int_equal(r.status, 200);
    double v = value_of(r.body, name);
    thttp_free(&r);
    return v;
}

static double sum3(const char *name)
{
    double s = 0;
    for (int i = 0; i < NODES; i++)
        s += sample(i, name);
    return s;
}

static bool handed_off(void *arg)
{
    const char *id = arg;
    /* asking moves the region on: it learns the shard's next home when it asks for it */
    shoal_buf_t b = {0};
    shoal_region_ask_sync(tsn[0].r, id, "whoami", 6, 2000, &b);
    shoal_buf_free(&b);
    return sum3("shoal_sharding_handoff_seconds_count{type=\"" TSHARD_TYPE "\"}") >= 1;
}

#define ASK_COUNT(t)  "shoal_sharding_ask_seconds_count{type=\"" t "\"}"
#define SAVE_COUNT(t) "shoal_sharding_entity_save_seconds_count{type=\"" t "\"}"
#define SAVE_INF(t)   "shoal_sharding_entity_save_seconds_bucket{type=\"" t "\",le=\"+Inf\"}"

static void latency_histograms_count_operations(void **state)
{
    (void)state;
    tsnode_start_cluster(NODES, NULL);
    for (int i = 0; i < NODES; i++) {
        shoal_sharding_settings_t s;
        tshard_settings(&s);
        s.stop_message = NULL;
        s.stop_message_len = 0;
        s.entity_state = true;
        int err = 0;
        st[i] = shoal_region_start(tsn[i].sh, "st", &s, tsaver_fns(), NULL, &err);
        assert_non_null(st[i]);
        m[i] = shoal_metrics_start(tsn[i].sys, NULL, 0, &err);
        assert_non_null(m[i]);
        assert_int_equal(shoal_sharding_metrics(tsn[i].sh, m[i]), 0);
    }
    tsnode_wait_registered(0x7, 0, NODES, 20000);
    /* every type answers before the counting starts */
    shoal_sharding_settings_t ts;
    tshard_settings(&ts);
    char ids[ASKS][32];
    tshard_pick_ids("lat", ts.number_of_shards, ASKS, ids);
    shoal_buf_t b = {0};
    assert_int_equal(shoal_region_ask_sync(tsn[0].r, ids[0], "whoami", 6, 10000, &b), 0);
    assert_int_equal(shoal_region_ask_sync(st[0], "warm", "x", 1, 10000, &b), 0);

    double asks0 = sample(0, ASK_COUNT(TSHARD_TYPE)), st_asks0 = sample(0, ASK_COUNT("st"));
    double saves0 = sum3(SAVE_COUNT("st"));
    assert_true(asks0 >= 1 && st_asks0 >= 1 && saves0 >= 1);
    for (int k = 0; k < ASKS; k++)
        assert_int_equal(shoal_region_ask_sync(tsn[0].r, ids[k], "whoami", 6, 10000, &b), 0);
    for (int k = 0; k < SAVES; k++) {
        char id[16];
        snprintf(id, sizeof id, "s%d", k);
        assert_int_equal(shoal_region_ask_sync(st[0], id, "state", 5, 10000, &b), 0);
        assert_int_equal(b.len, 5);
    }
    shoal_buf_free(&b);
    assert_true(sample(0, ASK_COUNT(TSHARD_TYPE)) == asks0 + ASKS);
    assert_true(sample(0, ASK_COUNT("st")) == st_asks0 + SAVES);
    assert_true(sum3(SAVE_COUNT("st")) == saves0 + SAVES);
    assert_true(sum3(SAVE_INF("st")) == saves0 + SAVES);
    /* the plain type saves nothing; no handoff yet */
    assert_true(sum3(SAVE_COUNT(TSHARD_TYPE)) == 0);
    assert_true(sum3("shoal_sharding_handoff_seconds_count{type=\"" TSHARD_TYPE "\"}") == 0);

    /* a handoff of the first entity's shard: counted by the regions that saw it */
    char shard[SHOAL_SHARD_ID_MAX + 1];
    shoal_sharding_default_shard_id(ids[0], ts.number_of_shards, shard);
    const char *one[] = {shard};
    assert_int_equal(shoal_region_stop_shards(tsn[0].r, one, 1), 0);
    if (!wait_until(handed_off, ids[0], 20000))
        fail_msg("no handoff counted");
    thttp_resp_t r;
    assert_true(thttp_get(shoal_metrics_port(m[0]), "/metrics", &r));
    const char *bad = thttp_promtool(r.body); /* the histograms are valid exposition */
    if (bad && !strstr(bad, "did not run"))
        fail_msg("promtool: %s", bad);
    thttp_free(&r);

    for (int i = 0; i < NODES; i++)
        shoal_metrics_stop(&m[i]);
}

static int teardown(void **state)
{
    for (int i = 0; i < NODES; i++)
        shoal_metrics_stop(&m[i]);
    return tsnode_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(latency_histograms_count_operations, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
