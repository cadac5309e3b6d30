/*  test_durable_space.c — the store's size as an operator sees it (durable.h, SIZE and
    shoal_durable_space; docs/operations.md, "Limits you can see"): a store with a tiny map
    (64 KiB, growing to 256 KiB) is filled with 4000-byte values until a write fails. The space
    figures follow (used bytes grow, deletions show as free pages, the map never passes map_max),
    the write that does not fit fails with SHOAL_ESTORE, counted, with a message naming map_max,
    and leaves nothing half written (every acknowledged value reads back whole after a reopen,
    the refused one is absent); the node's metrics endpoint shows the same figures as gauges.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"
#include "durable.h"
#include "http.h"
#include "procs.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAL_LEN 4000

static char val[VAL_LEN + 1];

static void done_status(void *arg, int status)
{
    *(int *)arg = status;
}

static int put(shoal_store_t *st, const char *key, const char *v)
{
    int status = 1;
    st->store(st->ctx, key, strlen(key), v, v ? strlen(v) : 0, done_status, &status);
    assert_int_not_equal(status, 1); /* immediate mode: done runs before store returns */
    return status;
}

typedef struct {
    int n, whole;
    bool has_refused;
} loaded_t;

static void count_each(void *arg, const char *key, size_t klen, const void *data, size_t len)
{
    loaded_t *l = arg;
    l->n++;
    if (len == VAL_LEN && memcmp(data, val, len) == 0)
        l->whole++;
    if (klen == 7 && memcmp(key, "refused", 7) == 0)
        l->has_refused = true;
}

static uint64_t gauge(const char *text, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof pat, "\n%s ", name);
    const char *p = strstr(text, pat);
    if (!p)
        fail_msg("no %s in the metrics:\n%s", name, text);
    return strtoull(p + strlen(pat), NULL, 10);
}

static void test_filled_to_map_max(void **state)
{
    (void)state;
    char parent[64], dir[128];
    snprintf(parent, sizeof parent, "/tmp/shoal-space-XXXXXX");
    assert_non_null(mkdtemp(parent));
    snprintf(dir, sizeof dir, "%s/env", parent);
    memset(val, 'v', VAL_LEN);
    shoal_durable_settings_t ds;
    shoal_durable_settings_default(&ds);
    ds.dir = dir;
    ds.nosync = true;
    ds.map_size = 64 * 1024;
    ds.map_max = 256 * 1024;
    int err = 0;
    shoal_durable_t *d = shoal_durable_open(&ds, &err);
    if (!d)
        fail_msg("open: %s", shoal_last_error_detail());
    shoal_store_t *st = shoal_durable_store(d, "");
    assert_non_null(st);

    shoal_durable_space_t sp0, sp;
    assert_int_equal(shoal_durable_space(d, &sp0), 0);
    assert_int_equal(sp0.map_size, 64 * 1024);
    assert_int_equal(sp0.map_max, 256 * 1024);
    assert_true(sp0.page_size >= 4096);
    assert_true(sp0.used_bytes > 0 && sp0.used_bytes <= sp0.high_water_bytes);
    assert_true(sp0.high_water_bytes <= sp0.map_size);
    assert_int_equal(shoal_durable_space(NULL, &sp), SHOAL_EINVAL);

    /* ten values: used grows by at least their size */
    char key[32];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        assert_int_equal(put(st, key, val), 0);
    }
    assert_int_equal(shoal_durable_space(d, &sp), 0);
    assert_true(sp.used_bytes >= sp0.used_bytes + 10 * VAL_LEN);
    /* five deleted: their pages go to the free list */
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        assert_int_equal(put(st, key, NULL), 0);
    }
    assert_int_equal(shoal_durable_space(d, &sp), 0);
    assert_true(sp.free_pages >= 5);
    print_message("after 10 puts and 5 deletes: used %zu, high water %zu, %zu free pages\n",
                  sp.used_bytes, sp.high_water_bytes, sp.free_pages);

    /* fill until a write fails: the map grows to map_max and no further */
    shoal_durable_stats_t before, after;
    shoal_durable_stats(d, &before);
    int n_ok = 5, rc = 0;
    for (int i = 10; i < 1000 && rc == 0; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        rc = put(st, key, val);
        n_ok += rc == 0;
    }
    assert_int_equal(rc, SHOAL_ESTORE);
    /* one more, under a name to look for: refused as well, and not written at all */
    assert_int_equal(put(st, "refused", val), SHOAL_ESTORE);
    shoal_durable_stats(d, &after);
    assert_int_equal(after.failures, before.failures + 2);
    assert_true(after.map_grows >= 2); /* 64 KiB -> 128 KiB -> 256 KiB */
    char msg[512];
    shoal_durable_last_error(d, msg, sizeof msg);
    if (!strstr(msg, "map_max"))
        fail_msg("the failure does not name map_max: %s", msg);
    assert_int_equal(shoal_durable_space(d, &sp), 0);
    print_message("full after %d values: map %zu of %zu, used %zu, high water %zu, %zu free "
                  "pages\n",
                  n_ok, sp.map_size, sp.map_max, sp.used_bytes, sp.high_water_bytes, sp.free_pages);
    assert_int_equal(sp.map_size, 256 * 1024);
    assert_true(sp.high_water_bytes <= sp.map_max);
    assert_true(sp.used_bytes > sp.map_max / 2); /* full is full: alerts on used/map_max work */

    /* the endpoint shows the same figures */
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    assert_non_null(sys);
    shoal_metrics_t *m = shoal_metrics_start(sys, NULL, 0, &err);
    assert_non_null(m);
    assert_int_equal(shoal_durable_metrics(d, m), 0);
    thttp_resp_t r;
    assert_true(thttp_get(shoal_metrics_port(m), "/metrics", &r));
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "# TYPE shoal_durable_used_bytes gauge\n"));
    assert_non_null(strstr(r.body, "# TYPE shoal_durable_free_pages gauge\n"));
    assert_int_equal(gauge(r.body, "shoal_durable_map_max_bytes"), 256 * 1024);
    assert_int_equal(gauge(r.body, "shoal_durable_map_size_bytes"), 256 * 1024);
    assert_int_equal(gauge(r.body, "shoal_durable_used_bytes"), sp.used_bytes);
    assert_int_equal(gauge(r.body, "shoal_durable_high_water_bytes"), sp.high_water_bytes);
    assert_int_equal(gauge(r.body, "shoal_durable_free_pages"), sp.free_pages);
    assert_int_equal(gauge(r.body, "shoal_durable_failures_total"), after.failures);
    thttp_free(&r);
    shoal_metrics_stop(&m);
    shoal_system_destroy(&sys);

    /* nothing half written: after a reopen every acknowledged value reads back whole */
    shoal_durable_close(&d);
    d = shoal_durable_open(&ds, &err);
    if (!d)
        fail_msg("reopen: %s", shoal_last_error_detail());
    st = shoal_durable_store(d, "");
    loaded_t l = {0};
    assert_int_equal(st->load(st->ctx, count_each, &l), 0);
    assert_int_equal(l.n, n_ok);
    assert_int_equal(l.whole, n_ok);
    assert_false(l.has_refused);
    shoal_durable_close(&d);
    trm_tree(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filled_to_map_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
