/*  test_latency_metrics.c — the replicator's latency histograms on /metrics (issue 37 item 3,
    issue 40): shoal_replicator_write_seconds and shoal_replicator_read_seconds, one label set
    per role and consistency level, count exactly the operations of that level, their +Inf
    bucket equals the count, their buckets never decrease, and a level nothing used has no
    samples. Three nodes on loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster.h"
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double value_of(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

/* The cumulative buckets of one label set, in order: each at least the one before, the last
   (+Inf) equal to count. */
static void buckets_cumulative(const char *text, const char *name, const char *labels, double count)
{
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s_bucket{%s,le=\"", name, labels);
    double last = 0;
    int n = 0;
    for (const char *l = strstr(text, prefix); l; l = strstr(l + 1, prefix)) {
        const char *v = strchr(l, ' ');
        assert_non_null(v);
        double x = strtod(v + 1, NULL);
        assert_true(x >= last);
        last = x;
        n++;
    }
    assert_true(n >= 2);
    assert_true(last == count);
}

static void write_and_read_latency_by_level(void **state)
{
    (void)state;
    static tcluster_t c; /* static: the teardown reaches it after a failed assertion */
    tcluster_start(&c, 3, NULL);
    int err = 0;
    shoal_metrics_t *m = shoal_metrics_start(c.sys[0], NULL, 0, &err);
    assert_non_null(m);
    shoal_consistency_t maj = c_majority(3000), all = c_all(3000), local = c_local();
    for (int i = 0; i < 7; i++)
        assert_int_equal(t_incr(&c, 0, "lat", 1, &maj), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(t_incr(&c, 0, "lat", 1, &local), 0);
    for (int i = 0; i < 4; i++) {
        uint64_t v = 0;
        assert_int_equal(t_gcounter(&c, 0, "lat", &all, &v), 0);
        assert_int_equal(v, 9);
    }
    /* on another node: not counted by node 0's histograms */
    assert_int_equal(t_incr(&c, 1, "lat", 1, &maj), 0);

    thttp_resp_t r;
    assert_true(thttp_get(shoal_metrics_port(m), "/metrics", &r));
    assert_int_equal(r.status, 200);
    const char *w = "shoal_replicator_write_seconds", *rd = "shoal_replicator_read_seconds";
    assert_non_null(strstr(r.body, "# TYPE shoal_replicator_write_seconds histogram\n"));
    assert_non_null(strstr(r.body, "# TYPE shoal_replicator_read_seconds histogram\n"));
    assert_true(value_of(r.body, "shoal_replicator_write_seconds_count{role=\"\","
                                 "consistency=\"majority\"}") == 7);
    assert_true(value_of(r.body, "shoal_replicator_write_seconds_count{role=\"\","
                                 "consistency=\"local\"}") == 2);
    assert_true(value_of(r.body, "shoal_replicator_read_seconds_count{role=\"\","
                                 "consistency=\"all\"}") == 4);
    /* nothing read with majority or written with all: no samples for them */
    assert_true(value_of(r.body, "shoal_replicator_read_seconds_count{role=\"\","
                                 "consistency=\"majority\"}") < 0);
    assert_true(value_of(r.body, "shoal_replicator_write_seconds_count{role=\"\","
                                 "consistency=\"all\"}") < 0);
    buckets_cumulative(r.body, w, "role=\"\",consistency=\"majority\"", 7);
    buckets_cumulative(r.body, rd, "role=\"\",consistency=\"all\"", 4);
    /* a quorum over loopback takes more than nothing and less than the timeout */
    double sum = value_of(r.body, "shoal_replicator_write_seconds_sum{role=\"\","
                                  "consistency=\"majority\"}");
    assert_true(sum > 0 && sum < 7 * 3.0);
    const char *bad = thttp_promtool(r.body);
    if (bad && !strstr(bad, "did not run"))
        fail_msg("promtool: %s", bad);
    thttp_free(&r);
    shoal_metrics_stop(&m);
    tcluster_stop(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(write_and_read_latency_by_level, tcluster_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
