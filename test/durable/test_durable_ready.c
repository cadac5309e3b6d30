/*  test_durable_ready.c — readiness sees a full store (docs/operations.md, Readiness; durable.h,
    shoal_durable_metrics): a store with a tiny map (64 KiB, growing to 256 KiB) on a node whose
    endpoint shows it is filled until a write fails at map_max. /health/ready answers 503 from
    the "durable" check, naming the role, the bytes used and map_max; once map_max is raised and a
    write commits again, it answers 200.
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VAL_LEN 4000

static char val[VAL_LEN + 1];
/* file scope so a failed assertion's teardown stops them (a live node hangs the exit) */
static shoal_system_t *sys;
static shoal_metrics_t *m;
static shoal_durable_t *d;

static int teardown(void **state)
{
    (void)state;
    shoal_metrics_stop(&m);
    shoal_system_destroy(&sys);
    shoal_durable_close(&d);
    return 0;
}

static void done_status(void *arg, int status)
{
    *(int *)arg = status;
}

static int put(shoal_store_t *st, const char *key, const char *v)
{
    int status = 1;
    st->store(st->ctx, key, strlen(key), v, strlen(v), done_status, &status);
    assert_int_not_equal(status, 1); /* immediate mode: done runs before store returns */
    return status;
}

static void test_full_store_not_ready(void **state)
{
    (void)state;
    char parent[64], dir[128];
    snprintf(parent, sizeof parent, "/tmp/shoal-ready-XXXXXX");
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
    d = shoal_durable_open(&ds, &err);
    if (!d)
        fail_msg("open: %s", shoal_last_error_detail());
    shoal_store_t *st = shoal_durable_store(d, "kv");
    assert_non_null(st);

    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    sys = shoal_system_new(&ss, &err);
    assert_non_null(sys);
    m = shoal_metrics_start(sys, NULL, 0, &err);
    assert_non_null(m);
    assert_int_equal(shoal_durable_metrics(d, m), 0);
    uint16_t port = shoal_metrics_port(m);

    thttp_resp_t r;
    assert_true(thttp_get(port, "/health/ready", &r));
    if (r.status != 200)
        fail_msg("ready before the store filled: %d %s", r.status, r.body);
    thttp_free(&r);

    char key[32];
    int rc = 0, n_ok = 0;
    for (int i = 0; i < 1000 && rc == 0; i++) {
        snprintf(key, sizeof key, "k%03d", i);
        rc = put(st, key, val);
        n_ok += rc == 0;
    }
    assert_int_equal(rc, SHOAL_ESTORE);
    print_message("full after %d values\n", n_ok);

    assert_true(thttp_get(port, "/health/ready", &r));
    print_message("%d %s", r.status, r.body);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "\"check\":\"durable\""));
    assert_non_null(strstr(r.body, "durable store for role 'kv' is full"));
    assert_non_null(strstr(r.body, "of 262144 bytes used"));
    assert_non_null(strstr(r.body, "SHOAL_ESTORE"));
    thttp_free(&r);

    /* room again: the next write commits and readiness comes back */
    assert_int_equal(shoal_durable_set_map_max(d, 1024 * 1024), 0);
    assert_true(thttp_get(port, "/health/ready", &r));
    assert_int_equal(r.status, 503); /* nothing committed yet: still full as far as we know */
    thttp_free(&r);
    assert_int_equal(put(st, "after", val), 0);
    assert_true(thttp_get(port, "/health/ready", &r));
    if (r.status != 200)
        fail_msg("not ready after a write committed: %d %s", r.status, r.body);
    thttp_free(&r);

    teardown(NULL);
    trm_tree(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_full_store_not_ready, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
