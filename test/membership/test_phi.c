/*  test_phi.c — the phi-accrual failure detector against numbers computed here independently:
    the logistic formula, Akka's published table, window statistics, seeding, pause factor and
    clock restarts. */
#include "phi.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static phi_settings_t defaults(void)
{
    phi_settings_t s = {.threshold = 8.0,
                        .max_sample_size = 1000,
                        .min_std_deviation_ms = 100,
                        .acceptable_pause_ms = 3000,
                        .first_heartbeat_estimate_ms = 1000};
    return s;
}

/* -log10(1 - F(x)) with the logistic F written out directly (no two-branch trick), valid where
   1 - F is not lost to rounding (phi up to ~12). */
static double logistic_phi(double elapsed, double mean, double sd)
{
    double y = (elapsed - mean) / sd;
    double F = 1.0 / (1.0 + exp(-y * (1.5976 + 0.070566 * y * y)));
    return -log10(1.0 - F);
}

static void phi_of_matches_logistic_formula(void **state)
{
    (void)state;
    const double cases[][3] = {{0, 1000, 100},   {500, 1000, 100}, {1000, 1000, 100},
                               {1200, 1000, 100}, {1500, 1000, 100}, {1550, 1000, 100},
                               {3100, 3100, 100}, {3500, 3100, 250}, {250, 100, 100},
                               {120, 100, 20},    {90, 100, 20}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = phi_of(cases[i][0], cases[i][1], cases[i][2]);
        double want = logistic_phi(cases[i][0], cases[i][1], cases[i][2]);
        assert_true(fabs(got - want) < 1e-6 * (1 + want));
    }
    /* at the mean the CDF is 1/2: phi = log10(2) */
    assert_true(fabs(phi_of(1000, 1000, 100) - log10(2.0)) < 1e-12);
}

static void phi_of_akka_table(void **state)
{
    (void)state;
    /* Akka's PhiAccrualFailureDetectorSpec: mean 1000, deviation 100 */
    const double table[][2] = {{0, 0.0},    {500, 0.1},  {1000, 0.3}, {1200, 1.6},
                               {1400, 4.7}, {1600, 10.8}, {1700, 15.3}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        assert_true(fabs(phi_of(table[i][0], 1000, 100) - table[i][1]) < 0.1);
    /* a wider deviation makes the same lateness less suspicious */
    assert_true(phi_of(1100, 1000, 500) < phi_of(1100, 1000, 100));
    /* far past the mean phi is huge (or infinite), never NaN */
    double far = phi_of(100000, 1000, 100);
    assert_false(isnan(far));
    assert_true(far > 100);
    assert_false(isnan(phi_of(-100000, 1000, 100)));
}

static void phi_grows_with_elapsed_time(void **state)
{
    (void)state;
    double prev = -1;
    for (int t = 0; t <= 2000; t += 50) {
        double p = phi_of(t, 1000, 100);
        assert_true(p >= prev);
        prev = p;
    }
    phi_settings_t s = defaults();
    phi_t *d = phi_new(&s);
    phi_heartbeat(d, 0);
    prev = -1;
    for (int64_t t = 0; t <= 8000; t += 100) {
        double p = phi_value(d, t);
        assert_true(p >= prev);
        prev = p;
    }
    phi_destroy(&d);
    assert_null(d);
}

static void mean_and_std_dev_of_window(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    s.first_heartbeat_estimate_ms = 100; /* seeds 75 and 125 */
    phi_t *d = phi_new(&s);
    assert_false(phi_monitoring(d));
    assert_true(phi_mean(d) == 0.0);
    int64_t t = 1000;
    phi_heartbeat(d, t);
    assert_true(phi_monitoring(d));
    const int intervals[] = {90, 110, 100, 120, 80};
    for (size_t i = 0; i < 5; i++) {
        t += intervals[i];
        phi_heartbeat(d, t);
    }
    /* window = 75 125 90 110 100 120 80 */
    const double w[] = {75, 125, 90, 110, 100, 120, 80};
    double sum = 0, sq = 0;
    for (size_t i = 0; i < 7; i++)
        sum += w[i];
    double mean = sum / 7;
    for (size_t i = 0; i < 7; i++)
        sq += (w[i] - mean) * (w[i] - mean);
    double sd = sqrt(sq / 7);
    assert_true(fabs(phi_mean(d) - mean) < 1e-9);
    assert_true(fabs(phi_std_dev(d) - sd) < 1e-9);
    phi_destroy(&d);
}

static void min_std_deviation_applied(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    s.first_heartbeat_estimate_ms = 1000;
    s.acceptable_pause_ms = 0;
    s.min_std_deviation_ms = 100;
    s.max_sample_size = 10;
    phi_t *d = phi_new(&s);
    int64_t t = 0;
    phi_heartbeat(d, t);
    for (int i = 0; i < 10; i++) { /* the seeds leave the window: deviation 0 */
        t += 1000;
        phi_heartbeat(d, t);
    }
    assert_true(phi_std_dev(d) < 1e-9);
    assert_true(fabs(phi_mean(d) - 1000) < 1e-9);
    /* phi uses 100, not 0 */
    assert_true(fabs(phi_value(d, t + 1200) - phi_of(1200, 1000, 100)) < 1e-9);
    assert_true(fabs(phi_value(d, t + 1050) - phi_of(1050, 1000, 100)) < 1e-9);
    phi_destroy(&d);

    /* a real deviation above the minimum is used as it is */
    s.min_std_deviation_ms = 1;
    d = phi_new(&s);
    t = 0;
    phi_heartbeat(d, t);
    for (int i = 0; i < 10; i++) {
        t += (i % 2) ? 1200 : 800; /* mean 1000, deviation 200 */
        phi_heartbeat(d, t);
    }
    assert_true(fabs(phi_std_dev(d) - 200) < 1e-9);
    assert_true(fabs(phi_value(d, t + 1300) - phi_of(1300, 1000, 200)) < 1e-9);
    phi_destroy(&d);
}

static void acceptable_pause_shifts_the_curve(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    s.max_sample_size = 4;
    s.acceptable_pause_ms = 0;
    phi_t *a = phi_new(&s);
    s.acceptable_pause_ms = 3000;
    phi_t *b = phi_new(&s);
    int64_t t = 0;
    phi_heartbeat(a, t);
    phi_heartbeat(b, t);
    for (int i = 0; i < 4; i++) {
        t += 1000;
        phi_heartbeat(a, t);
        phi_heartbeat(b, t);
    }
    /* b at elapsed e+3000 is a at elapsed e */
    for (int e = 0; e <= 2000; e += 250)
        assert_true(fabs(phi_value(b, t + 3000 + e) - phi_value(a, t + e)) < 1e-9);
    assert_true(fabs(phi_value(b, t + 4000) - phi_of(4000, 4000, 100)) < 1e-9);
    phi_destroy(&a);
    phi_destroy(&b);
}

static void available_before_and_after_threshold(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    phi_t *d = phi_new(&s);
    /* nothing known yet: available, phi 0 */
    assert_true(phi_available(d, 123456));
    assert_true(phi_value(d, 123456) == 0.0);
    int64_t t = 0;
    phi_heartbeat(d, t);
    for (int i = 0; i < 20; i++) {
        t += 1000;
        phi_heartbeat(d, t);
    }
    /* mean ~1000 (seeds 750, 1250 + twenty 1000s), deviation ~ 77 -> min 100: threshold 8 is
       crossed about 5.22 deviations past mean + pause = 4000 */
    double m = phi_mean(d);
    assert_true(fabs(m - 1000) < 1e-9);
    assert_true(phi_available(d, t + 1000));
    assert_true(phi_available(d, t + 4000));
    assert_true(phi_available(d, t + 4500));
    assert_false(phi_available(d, t + 4600));
    assert_false(phi_available(d, t + 60000));
    /* find the crossing and check it against the formula */
    int64_t cross = 0;
    for (int64_t e = 4000; e < 6000; e++)
        if (!phi_available(d, t + e)) {
            cross = e;
            break;
        }
    assert_true(phi_of((double)cross, 4000, 100) >= 8.0);
    assert_true(phi_of((double)cross - 1, 4000, 100) < 8.0);
    assert_in_range(cross, 4510, 4530);
    /* a heartbeat makes it available again; that late interval is not recorded (it came while
       unavailable) */
    int64_t late = t + 10000;
    phi_heartbeat(d, late);
    assert_true(phi_available(d, late + 1));
    assert_true(fabs(phi_mean(d) - m) < 1e-9);
    phi_destroy(&d);
}

static void window_capped_at_max_sample_size(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    s.max_sample_size = 5;
    s.acceptable_pause_ms = 100000; /* keep every interval available */
    phi_t *d = phi_new(&s);
    int64_t t = 0;
    phi_heartbeat(d, t);
    const int iv[] = {10, 20, 30, 40, 50, 60, 70};
    for (size_t i = 0; i < 7; i++) {
        t += iv[i];
        phi_heartbeat(d, t);
    }
    /* only the last 5: 30 40 50 60 70 */
    assert_true(fabs(phi_mean(d) - 50) < 1e-9);
    assert_true(fabs(phi_std_dev(d) - sqrt(200.0)) < 1e-9);
    phi_destroy(&d);

    /* the default size keeps 1000 samples: 1000 of 500 then 1000 of 1500 replace everything */
    s = defaults();
    s.acceptable_pause_ms = 100000;
    d = phi_new(&s);
    t = 0;
    phi_heartbeat(d, t);
    for (int i = 0; i < 1000; i++) {
        t += 500;
        phi_heartbeat(d, t);
    }
    assert_true(fabs(phi_mean(d) - 500) < 1e-9); /* the two seeds are gone */
    for (int i = 0; i < 999; i++) {
        t += 1500;
        phi_heartbeat(d, t);
    }
    assert_true(fabs(phi_mean(d) - (500 + 999 * 1500) / 1000.0) < 1e-9);
    t += 1500;
    phi_heartbeat(d, t);
    assert_true(fabs(phi_mean(d) - 1500) < 1e-9);
    assert_true(phi_std_dev(d) < 1e-6);
    phi_destroy(&d);
}

static void first_heartbeat_seeds_estimate(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    s.first_heartbeat_estimate_ms = 1000;
    phi_t *d = phi_new(&s);
    phi_heartbeat(d, 5000);
    /* seeds 750 and 1250: mean 1000, deviation 250 */
    assert_true(fabs(phi_mean(d) - 1000) < 1e-9);
    assert_true(fabs(phi_std_dev(d) - 250) < 1e-9);
    assert_true(fabs(phi_value(d, 5000 + 4500) - phi_of(4500, 4000, 250)) < 1e-9);
    /* just after the first heartbeat phi is tiny */
    assert_true(phi_value(d, 5000) < 0.01);
    phi_destroy(&d);

    s.first_heartbeat_estimate_ms = 200;
    d = phi_new(&s);
    phi_heartbeat(d, 0);
    assert_true(fabs(phi_mean(d) - 200) < 1e-9);
    assert_true(fabs(phi_std_dev(d) - 50) < 1e-9);
    phi_destroy(&d);

    /* invalid settings are refused */
    s = defaults();
    s.max_sample_size = 0;
    assert_null(phi_new(&s));
    s = defaults();
    s.first_heartbeat_estimate_ms = 0;
    assert_null(phi_new(&s));
    assert_null(phi_new(NULL));
}

static void pause_factor_widens_bound(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    s.acceptable_pause_ms = 1000;
    phi_t *d = phi_new(&s);
    phi_heartbeat(d, 0);
    /* mean 1000, deviation 250 */
    assert_true(fabs(phi_value(d, 2500) - phi_of(2500, 2000, 250)) < 1e-9);
    phi_set_pause_factor(d, 3.0);
    assert_true(fabs(phi_value(d, 2500) - phi_of(2500, 4000, 250)) < 1e-9);
    assert_true(phi_available(d, 4500));
    phi_set_pause_factor(d, 1.0);
    assert_false(phi_available(d, 4500));
    /* below 1 is clamped: a monitor never narrows its bound */
    phi_set_pause_factor(d, 0.25);
    assert_true(fabs(phi_value(d, 2500) - phi_of(2500, 2000, 250)) < 1e-9);
    phi_destroy(&d);
}

static void restart_clock_forgets_silence(void **state)
{
    (void)state;
    phi_settings_t s = defaults();
    phi_t *d = phi_new(&s);
    /* before any heartbeat a restart starts nothing */
    phi_restart_clock(d, 100);
    assert_false(phi_monitoring(d));
    int64_t t = 0;
    phi_heartbeat(d, t);
    for (int i = 0; i < 10; i++) {
        t += 1000;
        phi_heartbeat(d, t);
    }
    double m = phi_mean(d), sd = phi_std_dev(d);
    int64_t frozen = t + 20000; /* the monitor was frozen for 20 s */
    assert_false(phi_available(d, frozen));
    phi_restart_clock(d, frozen);
    assert_true(phi_available(d, frozen));
    assert_true(phi_value(d, frozen) < 0.01);
    /* the window is kept */
    assert_true(fabs(phi_mean(d) - m) < 1e-9 && fabs(phi_std_dev(d) - sd) < 1e-9);
    /* it accuses again only after the subject's own silence since the restart */
    assert_true(phi_available(d, frozen + 4000));
    assert_false(phi_available(d, frozen + 5000));
    /* the next heartbeat is not a sample (the time since the restart is not an interval); the
       one after it is */
    phi_heartbeat(d, frozen + 300);
    assert_true(fabs(phi_mean(d) - m) < 1e-9);
    phi_heartbeat(d, frozen + 1500);
    assert_true(fabs(phi_mean(d) - (m * 12 + 1200) / 13) < 1e-9);
    phi_destroy(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(phi_of_matches_logistic_formula),
        cmocka_unit_test(phi_of_akka_table),
        cmocka_unit_test(phi_grows_with_elapsed_time),
        cmocka_unit_test(mean_and_std_dev_of_window),
        cmocka_unit_test(min_std_deviation_applied),
        cmocka_unit_test(acceptable_pause_shifts_the_curve),
        cmocka_unit_test(available_before_and_after_threshold),
        cmocka_unit_test(window_capped_at_max_sample_size),
        cmocka_unit_test(first_heartbeat_seeds_estimate),
        cmocka_unit_test(pause_factor_widens_bound),
        cmocka_unit_test(restart_clock_forgets_silence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
