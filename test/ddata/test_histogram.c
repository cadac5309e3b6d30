/*  test_histogram.c — the latency histogram (ddata/histogram.h): bucket edges, percentiles of
    random values against the exact percentile of the sorted values (within the buckets' 1/128),
    merge equal to recording both sets in one, reset, count/sum/max, and the Prometheus
    exposition's cumulative buckets. Seeded (SHOAL_SEED replays; the seed is printed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "histogram.h"
#include "prop.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The nearest-rank percentile of sorted v[0..n): the ceil(p/100 * n)-th smallest, at least the
   first (the same slack as the histogram for a product such as 99.9% of 1000). */
static uint64_t exact_percentile(const uint64_t *v, size_t n, double p)
{
    double r = p * (double)n / 100.0 - 1e-7;
    size_t rank = (size_t)ceil(r);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}

/* Every value falls in the bucket whose [low, low + width) holds it, the buckets tile the range
   without gaps, and a bucket is at most 1/128 of its values wide. */
static void test_buckets_tile(void **state)
{
    (void)state;
    for (size_t i = 0; i + 1 < SHOAL_HIST_BUCKETS; i++) {
        uint64_t lo = shoal_hist_bucket_low(i), w = shoal_hist_bucket_width(i);
        assert_int_equal(shoal_hist_bucket_low(i + 1), lo + w);
        assert_int_equal(shoal_hist_bucket(lo), i);
        assert_int_equal(shoal_hist_bucket(lo + w - 1), i);
        if (lo >= SHOAL_HIST_LINEAR)
            assert_true(w * 128 <= lo);
    }
    /* the top bucket ends at 2^32 us and takes everything above */
    size_t top = SHOAL_HIST_BUCKETS - 1;
    assert_int_equal(shoal_hist_bucket_low(top) + shoal_hist_bucket_width(top), UINT64_C(1) << 32);
    assert_int_equal(shoal_hist_bucket(UINT64_MAX), top);
    assert_true(shoal_hist_bucket(3600ull * 1000000) < top); /* an hour is still resolved */
}

/* Random values of several shapes (uniform small, log-uniform up to an hour, a few huge
   outliers): every percentile read back is >= the exact one and at most 1/128 above it. */
static void test_percentiles_match_sorted(void **state)
{
    (void)state;
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed());
    static const double ps[] = {0, 1, 10, 50, 90, 99, 99.9, 99.99, 100};
    int cases = prop_cases(200);
    for (int c = 0; c < cases; c++) {
        size_t n = 1 + (size_t)prop_below(&rng, 5000);
        uint64_t *v = malloc(n * sizeof *v);
        shoal_hist_t *h = malloc(sizeof *h);
        shoal_hist_reset(h);
        uint64_t sum = 0, max = 0;
        int shape = (int)prop_below(&rng, 3);
        for (size_t i = 0; i < n; i++) {
            uint64_t x;
            if (shape == 0)
                x = prop_below(&rng, 1000);
            else
                x = prop_next(&rng) >> (64 - 1 - prop_below(&rng, 32)); /* < 2^32: ~71 min */
            if (shape == 2 && prop_chance(&rng, 1, 100))
                x = prop_below(&rng, UINT64_C(1) << 31) + (UINT64_C(1) << 31);
            v[i] = x;
            sum += x;
            if (x > max)
                max = x;
            shoal_hist_record(h, x);
        }
        qsort(v, n, sizeof *v, cmp_u64);
        assert_int_equal(h->count, n);
        assert_int_equal(h->sum_us, sum);
        assert_int_equal(h->max_us, max);
        for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
            uint64_t want = exact_percentile(v, n, ps[k]);
            uint64_t got = shoal_hist_percentile(h, ps[k]);
            if (got < want || got - want > want / 128) {
                print_message("seed %" PRIu64 " case %d: n %zu p%g: got %" PRIu64 ", exact %" PRIu64
                              "\n",
                              prop_seed(), c, n, ps[k], got, want);
                fail();
            }
        }
        free(v);
        free(h);
    }
}

/* merge(a, b) equals one histogram that recorded both; reset empties. */
static void test_merge_and_reset(void **state)
{
    (void)state;
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed() + 1);
    shoal_hist_t *a = malloc(sizeof *a), *b = malloc(sizeof *b), *both = malloc(sizeof *both);
    shoal_hist_reset(a);
    shoal_hist_reset(b);
    shoal_hist_reset(both);
    for (int i = 0; i < 3000; i++) {
        uint64_t x = prop_below(&rng, 5000000);
        shoal_hist_record(i % 3 ? a : b, x);
        shoal_hist_record(both, x);
    }
    shoal_hist_merge(a, b);
    assert_memory_equal(a, both, sizeof *a);
    shoal_hist_reset(a);
    assert_int_equal(a->count, 0);
    assert_int_equal(shoal_hist_percentile(a, 99), 0);
    int64_t t0 = shoal_hist_now_us();
    shoal_hist_record_since(a, t0 + 1000000); /* a start in the future counts 0 */
    assert_int_equal(a->max_us, 0);
    free(a);
    free(b);
    free(both);
}

/* The exposition: cumulative counts under each le, +Inf = count, sum in seconds, labels first. */
static void test_prometheus(void **state)
{
    (void)state;
    shoal_hist_t *h = malloc(sizeof *h);
    shoal_hist_reset(h);
    shoal_hist_record(h, 50);  /* under 0.0001 */
    shoal_hist_record(h, 700); /* under 0.001 */
    shoal_hist_record(h, 700);
    shoal_hist_record(h, 3000000);        /* under 5 */
    shoal_hist_record(h, 20000000000ull); /* above every boundary */
    shoal_buf_t out = {0};
    shoal_hist_prometheus(&out, "x_seconds", "role=\"r\"", h);
    const char *s = shoal_buf_cstr(&out);
    assert_non_null(strstr(s, "x_seconds_bucket{role=\"r\",le=\"0.0001\"} 1\n"));
    assert_non_null(strstr(s, "x_seconds_bucket{role=\"r\",le=\"0.0005\"} 1\n"));
    assert_non_null(strstr(s, "x_seconds_bucket{role=\"r\",le=\"0.001\"} 3\n"));
    assert_non_null(strstr(s, "x_seconds_bucket{role=\"r\",le=\"2.5\"} 3\n"));
    assert_non_null(strstr(s, "x_seconds_bucket{role=\"r\",le=\"5\"} 4\n"));
    assert_non_null(strstr(s, "x_seconds_bucket{role=\"r\",le=\"10\"} 4\n"));
    assert_non_null(strstr(s, "x_seconds_bucket{role=\"r\",le=\"+Inf\"} 5\n"));
    assert_non_null(strstr(s, "x_seconds_sum{role=\"r\"} 20003.001450\n"));
    assert_non_null(strstr(s, "x_seconds_count{role=\"r\"} 5\n"));
    shoal_buf_reset(&out);
    shoal_hist_prometheus(&out, "y", NULL, h);
    assert_non_null(strstr(shoal_buf_cstr(&out), "y_bucket{le=\"0.00025\"} 1\ny_bucket"));
    assert_non_null(strstr(shoal_buf_cstr(&out), "\ny_count 5\n"));
    shoal_buf_free(&out);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_tile),
        cmocka_unit_test(test_percentiles_match_sorted),
        cmocka_unit_test(test_merge_and_reset),
        cmocka_unit_test(test_prometheus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
