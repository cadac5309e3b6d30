/*  test_limits.c — the caps on a replicator (ddata.h, LIMITS): max-keys and max-bytes refuse the
    local write that would pass them with SHOAL_ELIMIT, change nothing, and count it; a write that
    reaches a cap exactly is accepted; a delete makes room; the metrics show the refusals; the
    configuration keys load.
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

typedef struct {
    size_t len;
    char fill;
} elem_t;

static int add_elem(shoal_crdt_t *v, void *arg)
{
    const elem_t *e = arg;
    char buf[4096];
    memset(buf, e->fill, e->len);
    return shoal_gset_add(v, buf, e->len);
}

static int put(tcluster_t *c, const char *key, size_t len, char fill)
{
    shoal_consistency_t lc = c_local();
    elem_t e = {len, fill};
    return shoal_replicator_update_typed_sync(c->rep[0], key, shoal_type_by_tag(SHOAL_GSET), &lc,
                                              add_elem, &e);
}

typedef struct {
    tcluster_t *c;
    uint64_t keys, bytes;
    shoal_buf_t text;
} usage_t;

static int read_usage(shoal_replicator_t *r, void *arg)
{
    usage_t *u = arg;
    int rc = shoal_replicator_usage(r, &u->keys, &u->bytes);
    shoal_buf_reset(&u->text);
    if (rc == 0)
        rc = shoal_metrics_collect(u->c->sys[0], &u->text);
    return rc;
}

static void usage(tcluster_t *c, usage_t *u)
{
    u->c = c;
    assert_int_equal(on_node(c, 0, read_usage, u), 0);
}

static bool has(const usage_t *u, const char *line)
{
    return strstr(shoal_buf_cstr((shoal_buf_t *)&u->text), line) != NULL;
}

static void test_max_keys(void **state)
{
    static tcluster_t cl;
    tcluster_t *c = &cl;
    (void)state;
    tcluster_start(c, 1, NULL);
    shoal_replicator_limits_t l = {.max_keys = 3};
    assert_int_equal(shoal_replicator_set_limits(c->rep[0], &l), 0);
    usage_t u = {0};

    assert_int_equal(put(c, "a", 8, 'a'), 0);
    assert_int_equal(put(c, "b", 8, 'b'), 0);
    assert_int_equal(put(c, "c", 8, 'c'), 0);            /* the third key: at the cap, accepted */
    assert_int_equal(put(c, "d", 8, 'd'), SHOAL_ELIMIT); /* one past it */
    assert_int_equal(put(c, "a", 9, 'a'), 0);            /* an existing key still takes writes */
    usage(c, &u);
    assert_int_equal(u.keys, 3);
    assert_true(has(&u, "shoal_replicator_limit_refused_total{role=\"\",limit=\"keys\"} 1\n"));
    assert_true(has(&u, "shoal_replicator_max_keys{role=\"\"} 3\n"));
    shoal_crdt_t *v = NULL;
    shoal_consistency_t lc = c_local();
    assert_int_equal(
        shoal_replicator_get_sync(c->rep[0], "d", shoal_type_by_tag(SHOAL_GSET), &lc, &v),
        SHOAL_ENOTFOUND); /* nothing of the refused write */

    /* a delete makes room at once (the tombstone does not count) */
    assert_int_equal(shoal_replicator_delete_sync(c->rep[0], "b", &lc), 0);
    assert_int_equal(put(c, "d", 8, 'd'), 0);
    assert_int_equal(put(c, "e", 8, 'e'), SHOAL_ELIMIT);
    usage(c, &u);
    assert_int_equal(u.keys, 3);
    assert_true(has(&u, "shoal_replicator_limit_refused_total{role=\"\",limit=\"keys\"} 2\n"));

    /* off again: no cap */
    l.max_keys = 0;
    assert_int_equal(shoal_replicator_set_limits(c->rep[0], &l), 0);
    assert_int_equal(put(c, "e", 8, 'e'), 0);
    shoal_buf_free(&u.text);
}

static void test_max_bytes(void **state)
{
    static tcluster_t cl;
    tcluster_t *c = &cl;
    (void)state;
    tcluster_start(c, 1, NULL);
    /* a cap far away first, so that writes are measured */
    shoal_replicator_limits_t l = {.max_bytes = UINT64_MAX / 2};
    assert_int_equal(shoal_replicator_set_limits(c->rep[0], &l), 0);
    usage_t u = {0};
    assert_int_equal(put(c, "k1", 1000, '1'), 0);
    usage(c, &u);
    uint64_t one = u.bytes; /* one value of a 1000-byte element */
    assert_true(one >= 1000 && one < 1100);
    assert_int_equal(put(c, "k2", 1000, '2'), 0);
    usage(c, &u);
    assert_int_equal(u.bytes, 2 * one);

    /* the cap is exactly three such values: the third reaches it, accepted */
    l.max_bytes = 3 * one;
    assert_int_equal(shoal_replicator_set_limits(c->rep[0], &l), 0);
    assert_int_equal(put(c, "k3", 1000, '3'), 0);
    usage(c, &u);
    assert_int_equal(u.bytes, 3 * one);
    /* one element more, in a new key or an existing one: past it, refused, nothing changed */
    assert_int_equal(put(c, "k4", 1, '4'), SHOAL_ELIMIT);
    assert_int_equal(put(c, "k1", 1, 'x'), SHOAL_ELIMIT);
    usage(c, &u);
    assert_int_equal(u.bytes, 3 * one);
    assert_int_equal(u.keys, 3);
    assert_true(has(&u, "shoal_replicator_limit_refused_total{role=\"\",limit=\"bytes\"} 2\n"));
    char line[128];
    snprintf(line, sizeof line, "shoal_replicator_bytes{role=\"\"} %llu\n",
             (unsigned long long)(3 * one));
    assert_true(has(&u, line));

    /* a delete gives its bytes back */
    shoal_consistency_t lc = c_local();
    assert_int_equal(shoal_replicator_delete_sync(c->rep[0], "k2", &lc), 0);
    usage(c, &u);
    assert_int_equal(u.bytes, 2 * one);
    assert_int_equal(put(c, "k4", 1, '4'), 0);
    shoal_buf_free(&u.text);
}

static void test_limits_from_config(void **state)
{
    (void)state;
    char err[256];
    int perr = 0;
    shoal_config_t *cfg =
        shoal_config_parse("shoal\n    cluster\n        distributed-data\n"
                           "            max-keys = 1000\n            max-bytes = 64 MiB\n",
                           &perr);
    assert_non_null(cfg);
    shoal_replicator_limits_t l;
    assert_int_equal(shoal_config_replicator_limits(cfg, &l, err, sizeof err), 0);
    assert_int_equal(l.max_keys, 1000);
    assert_int_equal(l.max_bytes, 64ull << 20);
    shoal_config_destroy(&cfg);
    /* unset: no caps (the default changes nothing) */
    cfg = shoal_config_parse("shoal\n    cluster\n        distributed-data\n"
                             "            gossip-interval = 2 s\n",
                             &perr);
    assert_non_null(cfg);
    assert_int_equal(shoal_config_replicator_limits(cfg, &l, err, sizeof err), 0);
    assert_int_equal(l.max_keys, 0);
    assert_int_equal(l.max_bytes, 0);
    shoal_config_destroy(&cfg);
    assert_string_equal(shoal_strerror(SHOAL_ELIMIT),
                        "a configured limit is reached (keys or bytes of the replicator, entities "
                        "of the node)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_max_keys, tcluster_teardown),
        cmocka_unit_test_teardown(test_max_bytes, tcluster_teardown),
        cmocka_unit_test(test_limits_from_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
