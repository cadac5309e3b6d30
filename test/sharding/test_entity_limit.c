/*  test_entity_limit.c — max-entities-per-node (sharding.h, LIMITS): with the cap at 3 the third
    entity starts, the fourth is refused (an ask gets SHOAL_ELIMIT, a tell is dropped), both
    counted in /metrics; the entities already running keep answering; one passivated makes room;
    the configuration key loads.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "http.h"
#include "members.h"
#include "shards.h"

#define T TSHARD_TYPE

static int ask(const char *id, const char *msg)
{
    shoal_buf_t b = {0};
    int rc = shoal_region_ask_sync(tsn[0].r, id, msg, strlen(msg), 5000u * (uint32_t)tscale(), &b);
    shoal_buf_free(&b);
    return rc;
}

/* The value of a sample of node 0's /metrics ("name value" line), -1 when absent. */
static long long metric(uint16_t port, const char *name)
{
    thttp_resp_t r = {0};
    if (!thttp_get(port, "/metrics", &r))
        return -1;
    long long v = -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = r.body ? strstr(r.body, key) : NULL;
    if (p)
        v = atoll(p + strlen(key));
    thttp_free(&r);
    return v;
}

static void test_entities_capped_per_node(void **state)
{
    (void)state;
    tsnode_opts_t o = {.seed = 0};
    tsnode_start(0, &o);
    tsnode_wait_up(1u, 15000);
    tsnode_wait_registered(1u, 0, 1, 15000);
    int err = 0;
    shoal_metrics_t *m = shoal_http_start_with(tsn[0].sys, "127.0.0.1:0", NULL, &err);
    assert_non_null(m);
    uint16_t port = shoal_metrics_port(m);
    assert_int_equal(shoal_sharding_set_max_entities(tsn[0].sh, 3), 0);

    assert_int_equal(ask("e1", "get"), 0);
    assert_int_equal(ask("e2", "get"), 0);
    assert_int_equal(ask("e3", "get"), 0); /* the third: at the cap, started */
    assert_int_equal(ask("e4", "get"), SHOAL_ELIMIT);
    assert_int_equal(trec_get(T, "e4").starts, 0);
    assert_int_equal(shoal_region_tell(tsn[0].r, "e5", "1:1", 3), 0); /* accepted by the region */
    assert_int_equal(ask("e1", "get"), 0); /* running entities keep answering */
    assert_int_equal(trec_get(T, "e5").starts, 0);
    assert_int_equal(metric(port, "shoal_sharding_entities_refused_total"), 2);
    assert_int_equal(metric(port, "shoal_sharding_node_entities"), 3);
    assert_int_equal(metric(port, "shoal_sharding_max_entities"), 3);

    /* one passivated: room for one more */
    assert_int_equal(shoal_region_tell(tsn[0].r, "e2", "passivate", 9), 0);
    for (int i = 0; i < 100 && trec_get(T, "e2").live; i++)
        usleep(50000);
    assert_int_equal(trec_get(T, "e2").live, 0);
    for (int i = 0; i < 100 && metric(port, "shoal_sharding_node_entities") != 2; i++)
        usleep(50000);
    assert_int_equal(ask("e4", "get"), 0);
    assert_int_equal(ask("e6", "get"), SHOAL_ELIMIT);

    /* off: no cap */
    assert_int_equal(shoal_sharding_set_max_entities(tsn[0].sh, 0), 0);
    assert_int_equal(ask("e6", "get"), 0);
    shoal_metrics_stop(&m);
}

static void test_cap_from_config(void **state)
{
    (void)state;
    int perr = 0;
    char err[256];
    uint64_t max = 7;
    shoal_config_t *cfg = shoal_config_parse(
        "shoal\n    cluster\n        sharding\n            max-entities-per-node = 50000\n", &perr);
    assert_non_null(cfg);
    assert_int_equal(shoal_config_sharding_limits(cfg, &max, err, sizeof err), 0);
    assert_int_equal(max, 50000);
    shoal_config_destroy(&cfg);
    cfg = shoal_config_parse("shoal\n    cluster\n        sharding\n            buffer-size = 10\n",
                             &perr);
    assert_non_null(cfg);
    assert_int_equal(shoal_config_sharding_limits(cfg, &max, err, sizeof err), 0);
    assert_int_equal(max, 0); /* unset: no cap */
    shoal_config_destroy(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_entities_capped_per_node, tsnode_teardown),
        cmocka_unit_test(test_cap_from_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
