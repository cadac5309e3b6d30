/*  test_passivation.c — the passivation replacement policies (sharding/passivation.h) on access
    sequences whose evictions are worked out by hand: LRU, segmented LRU promotion and demotion,
    MRU, LFU with recency ties and with dynamic aging, the W-TinyLFU composite admitting a frequent
    newcomer and rejecting one-hit wonders, its hill climber's steps; run-time limit changes, the
    idle timeout, removal, bad input and callbacks that call back in; then random access sequences
    (seed printed) checked against a model of the active set under every policy. */
#include "passivation.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prop.h"

/* ---------------------------------------------------------------------------------------------
 * Recording evictions
 */
#define MAX_LOG 64

typedef struct {
    char ids[MAX_LOG][32];
    size_t n;
} evlog_t;

static void record(const char *id, void *arg)
{
    evlog_t *log = arg;
    assert_true(log->n < MAX_LOG);
    snprintf(log->ids[log->n++], sizeof log->ids[0], "%s", id);
}

/* The log as one space-separated string, for readable assertions. */
static const char *joined(evlog_t *log)
{
    static char buf[MAX_LOG * 33];
    buf[0] = '\0';
    for (size_t i = 0; i < log->n; i++) {
        if (i)
            strcat(buf, " ");
        strcat(buf, log->ids[i]);
    }
    return buf;
}

static void reset(evlog_t *log)
{
    log->n = 0;
}

static shoal_passivation_settings_t settings(shoal_passivation_policy_t policy)
{
    shoal_passivation_settings_t s;
    shoal_passivation_settings_default(&s);
    s.policy = policy;
    s.idle_timeout_ms = 0;
    return s;
}

/* Accesses the space-separated ids in order, one ms apart from *now. */
static void run(passivator_t *p, const char *seq, int64_t *now, evlog_t *log)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", seq);
    for (char *save = NULL, *id = strtok_r(buf, " ", &save); id; id = strtok_r(NULL, " ", &save))
        passivator_access(p, id, (*now)++, record, log);
    assert_int_equal(passivator_check(p), 0);
}

/* ---------------------------------------------------------------------------------------------
 * One policy at a time
 */
static void lru_evicts_least_recent(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_LRU);
    passivator_t *p = passivator_new(&s, 3);
    evlog_t log = {0};
    int64_t now = 0;
    run(p, "a b c", &now, &log);
    assert_true(passivator_access(p, "a", now++, record, &log));
    assert_false(passivator_access(p, "d", now++, record, &log));
    assert_string_equal(joined(&log), "b");
    run(p, "e", &now, &log);
    assert_string_equal(joined(&log), "b c");
    assert_int_equal(passivator_size(p), 3);
    assert_true(passivator_contains(p, "a") && passivator_contains(p, "d"));
    assert_false(passivator_contains(p, "b"));
    /* an evicted entity comes back as a new one */
    assert_false(passivator_access(p, "b", now++, record, &log));
    assert_string_equal(joined(&log), "b c a");
    passivator_stats_t st;
    passivator_stats(p, &st);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 6);
    assert_int_equal(st.evicted, 3);
    passivator_destroy(&p);
    assert_null(p);
}

static void slru_protects_repeated_entities(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_LRU);
    s.slru_levels = 2;
    s.slru_proportions[0] = 0.5;
    s.slru_proportions[1] = 0.5;
    passivator_t *p = passivator_new(&s, 4); /* probation 2, protected 2 */
    evlog_t log = {0};
    int64_t now = 0;
    /* a is promoted by its second access; plain LRU would evict it for e, SLRU evicts the
       least recent of probation */
    run(p, "a a b c d e", &now, &log);
    assert_string_equal(joined(&log), "b");
    run(p, "f g", &now, &log);
    assert_string_equal(joined(&log), "b c d");
    assert_true(passivator_access(p, "a", now++, record, &log));
    passivator_destroy(&p);

    /* the same trace under plain LRU, for contrast */
    s.slru_levels = 0;
    p = passivator_new(&s, 4);
    reset(&log);
    run(p, "a a b c d e", &now, &log);
    assert_string_equal(joined(&log), "a");
    passivator_destroy(&p);
}

static void slru_demotes_protected_overflow(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_LRU);
    s.slru_levels = 2; /* zero proportions: equal levels */
    passivator_t *p = passivator_new(&s, 4);
    evlog_t log = {0};
    int64_t now = 0;
    /* c's promotion overfills protected (2): its least recent, a, goes back to probation, at the
       most recent end; d and e then fill probation and a is the oldest there */
    run(p, "a a b b c c d", &now, &log);
    assert_int_equal(log.n, 0);
    run(p, "e", &now, &log);
    assert_string_equal(joined(&log), "a");
    run(p, "f", &now, &log);
    assert_string_equal(joined(&log), "a d");
    assert_true(passivator_contains(p, "b") && passivator_contains(p, "c"));
    passivator_destroy(&p);

    /* three levels: an entity climbs one level per access */
    s.slru_levels = 3;
    p = passivator_new(&s, 3); /* one entity per level */
    reset(&log);
    run(p, "a a a b b c", &now, &log); /* a top, b middle, c probation */
    run(p, "d", &now, &log);
    assert_string_equal(joined(&log), "c");
    run(p, "d", &now, &log); /* d promoted: b (middle) demoted to probation */
    run(p, "e", &now, &log);
    assert_string_equal(joined(&log), "c b");
    assert_true(passivator_contains(p, "a"));
    passivator_destroy(&p);
}

static void mru_evicts_most_recent_other(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_MRU);
    passivator_t *p = passivator_new(&s, 3);
    evlog_t log = {0};
    int64_t now = 0;
    run(p, "a b c d", &now, &log);
    assert_string_equal(joined(&log), "c");
    run(p, "a e", &now, &log);
    assert_string_equal(joined(&log), "c a");
    assert_true(passivator_contains(p, "b") && passivator_contains(p, "d") &&
                passivator_contains(p, "e"));
    /* a lower limit passivates the most recent ones */
    passivator_set_limit(p, 1, record, &log);
    assert_string_equal(joined(&log), "c a e d");
    assert_true(passivator_contains(p, "b"));
    passivator_destroy(&p);
}

static void lfu_evicts_least_frequent_then_least_recent(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_LFU);
    passivator_t *p = passivator_new(&s, 3);
    evlog_t log = {0};
    int64_t now = 0;
    run(p, "a a b c b d", &now, &log); /* a 2, b 2, c 1 */
    assert_string_equal(joined(&log), "c");
    run(p, "e", &now, &log); /* d is the only one at 1 */
    assert_string_equal(joined(&log), "c d");
    /* a tie at 2: a reached 2 before b did, so a is the least recent of the two */
    run(p, "e f", &now, &log);
    assert_string_equal(joined(&log), "c d a");
    passivator_destroy(&p);
}

static void lfu_dynamic_aging_lets_old_favourites_go(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_LFU);
    passivator_t *p = passivator_new(&s, 2);
    evlog_t log = {0};
    int64_t now = 0;
    /* without aging a's three early accesses keep it forever: every newcomer evicts the last */
    run(p, "a a a b c d e", &now, &log);
    assert_string_equal(joined(&log), "b c d");
    passivator_destroy(&p);

    /* with aging: c evicts b (age 1, c at 2), d evicts c (age 2, d at 3), and now d ties with
       a at 3 and a is the less recent, so e evicts a */
    s.lfu_dynamic_aging = true;
    p = passivator_new(&s, 2);
    reset(&log);
    run(p, "a a a b c d e", &now, &log);
    assert_string_equal(joined(&log), "b c a");
    assert_true(passivator_contains(p, "d") && passivator_contains(p, "e"));
    passivator_destroy(&p);
}

/* limit 10, window 1, main 9: the window's victim competes with the main area's on frequency */
static void tinylfu_admits_frequent_and_rejects_one_hit_wonders(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_TINYLFU);
    s.window_proportion = 0.1;
    passivator_t *p = passivator_new(&s, 10);
    evlog_t log = {0};
    int64_t now = 0;
    run(p, "m0 m1 m2 m3 m4 m5 m6 m7 m8 m9", &now, &log); /* fills the main area as they pass */
    assert_int_equal(log.n, 0);
    passivator_stats_t st;
    passivator_stats(p, &st);
    assert_int_equal(st.window_limit, 1);
    assert_int_equal(st.window_size, 1);
    /* the sketch estimates below are what the contest sees (no collision in these ids) */
    assert_int_equal(passivator_frequency(p, "m0"), 1);
    assert_int_equal(passivator_frequency(p, "m9"), 1);
    assert_int_equal(passivator_frequency(p, "hot"), 0);

    /* m9 leaves the window for hot: 1 against m0's 1 is not more, m9 is refused */
    run(p, "hot hot hot", &now, &log);
    assert_string_equal(joined(&log), "m9");
    assert_int_equal(passivator_frequency(p, "hot"), 3);
    /* hot leaves the window with 3 against m0's 1: admitted, m0 goes */
    run(p, "x", &now, &log);
    assert_string_equal(joined(&log), "m9 m0");
    /* x, seen once, does not displace m1 */
    run(p, "y", &now, &log);
    assert_string_equal(joined(&log), "m9 m0 x");
    assert_true(passivator_access(p, "hot", now++, record, &log));
    passivator_stats(p, &st);
    assert_int_equal(st.rejected, 2);
    assert_int_equal(st.evicted, 3);
    passivator_destroy(&p);

    /* plain LRU on the same trace keeps the one-hit wonders and loses the older entities */
    s = settings(SHOAL_PASSIVATE_LRU);
    p = passivator_new(&s, 10);
    reset(&log);
    run(p, "m0 m1 m2 m3 m4 m5 m6 m7 m8 m9 hot hot hot x y", &now, &log);
    assert_string_equal(joined(&log), "m0 m1 m2");
    passivator_destroy(&p);
}

/* 4-bit counters stop at 15; after 10 * limit additions every counter is halved. */
static void tinylfu_sketch_saturates_and_halves(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_TINYLFU);
    passivator_t *p = passivator_new(&s, 10); /* halves at 100 additions */
    char id[16];
    for (int i = 0; i < 20; i++)
        passivator_access(p, "a", i, NULL, NULL);
    assert_int_equal(passivator_frequency(p, "a"), 15); /* 15 additions: then saturated */
    for (int i = 0; i < 84; i++) {
        snprintf(id, sizeof id, "f%d", i);
        passivator_access(p, id, 100 + i, NULL, NULL);
    }
    assert_int_equal(passivator_frequency(p, "a"), 15);
    passivator_access(p, "f84", 200, NULL, NULL); /* the 100th */
    assert_int_equal(passivator_frequency(p, "a"), 7);
    passivator_destroy(&p);
}

/* A hot set, then a scan of 1000 entities seen once, then the hot set again: LRU has lost every
   hot entity to the scan, the composite keeps all of them in its protected segment (p pushes the
   last hot entity out of the window, so that its next accesses promote it like the others; the
   scan's candidates then only ever compete with probation, where scanned entities are). */
static size_t hot_hits_after_scan(shoal_passivation_policy_t policy)
{
    shoal_passivation_settings_t s = settings(policy);
    passivator_t *p = passivator_new(&s, 100);
    char id[16];
    int64_t now = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 50; i++) {
            snprintf(id, sizeof id, "h%d", i);
            passivator_access(p, id, now++, NULL, NULL);
        }
        if (round == 0)
            passivator_access(p, "p", now++, NULL, NULL);
    }
    for (int i = 0; i < 1000; i++) {
        snprintf(id, sizeof id, "s%d", i);
        passivator_access(p, id, now++, NULL, NULL);
    }
    size_t hits = 0;
    for (int i = 0; i < 50; i++) {
        snprintf(id, sizeof id, "h%d", i);
        hits += passivator_access(p, id, now++, NULL, NULL);
    }
    assert_int_equal(passivator_check(p), 0);
    passivator_destroy(&p);
    return hits;
}

static void tinylfu_resists_a_scan(void **state)
{
    (void)state;
    assert_int_equal(hot_hits_after_scan(SHOAL_PASSIVATE_LRU), 0);
    assert_int_equal(hot_hits_after_scan(SHOAL_PASSIVATE_TINYLFU), 50);
}

/* Periods of 100 accesses (adjust multiplier 1, limit 100), each all misses or all hits, so
   every hit rate and step is known: start at 0.5, step 0.0625, decay 0.98, restart 0.05. */
static void tinylfu_hill_climbing_steps(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_TINYLFU);
    s.hill_climbing = true;
    s.window_proportion = 0.5;
    s.window_max_proportion = 0.55;
    s.adjust_multiplier = 1.0;
    passivator_t *p = passivator_new(&s, 100);
    int64_t now = 0;
    char id[32];
    int fresh = 0;
    passivator_stats_t st;
    passivator_stats(p, &st);
    assert_int_equal(st.window_limit, 50);

    /* period 1, hit rate 0 (delta 0): the first step shrinks the window, 0.4375 */
    for (int i = 0; i < 99; i++) {
        snprintf(id, sizeof id, "n%d", fresh++);
        passivator_access(p, id, now++, NULL, NULL);
    }
    passivator_access(p, "h", now++, NULL, NULL);
    passivator_stats(p, &st);
    assert_int_equal(st.window_limit, 43);
    assert_int_equal(passivator_check(p), 0);

    /* period 2, hit rate 1 (delta +1, better): same direction, decayed step 0.06125 → 0.37625;
       the change is past the restart threshold, so the next step is -0.0625 again */
    for (int i = 0; i < 100; i++)
        assert_true(passivator_access(p, "h", now++, NULL, NULL));
    passivator_stats(p, &st);
    assert_int_equal(st.window_limit, 37);
    assert_int_equal(passivator_check(p), 0);

    /* period 3, hit rate 0 (worse): turn around, +0.0625 → 0.43875, restart at +0.0625 */
    for (int i = 0; i < 100; i++) {
        snprintf(id, sizeof id, "n%d", fresh++);
        passivator_access(p, id, now++, NULL, NULL);
    }
    passivator_stats(p, &st);
    assert_int_equal(st.window_limit, 43);

    /* period 4, hit rate 0 (no change): keep going up, 0.50125 */
    for (int i = 0; i < 100; i++) {
        snprintf(id, sizeof id, "n%d", fresh++);
        passivator_access(p, id, now++, NULL, NULL);
    }
    passivator_stats(p, &st);
    assert_int_equal(st.window_limit, 50);
    assert_int_equal(st.window_size, 50);
    assert_int_equal(passivator_size(p), 100);
    assert_int_equal(passivator_check(p), 0);

    /* period 5, hit rate 0: up by 0.06125 would be 0.5625, the maximum stops it at 0.55 */
    for (int i = 0; i < 100; i++) {
        snprintf(id, sizeof id, "n%d", fresh++);
        passivator_access(p, id, now++, NULL, NULL);
    }
    passivator_stats(p, &st);
    assert_int_equal(st.window_limit, 55);
    assert_int_equal(passivator_check(p), 0);
    passivator_destroy(&p);

    /* bounded by the minimum proportion: a long run of misses cannot empty the window */
    s.window_proportion = 0.05;
    s.window_min_proportion = 0.03;
    s.window_max_proportion = 1.0;
    p = passivator_new(&s, 100);
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof id, "m%d", i % 300);
        passivator_access(p, id, now++, NULL, NULL);
        passivator_stats(p, &st);
        assert_true(st.window_limit >= 3);
    }
    assert_int_equal(passivator_check(p), 0);
    passivator_destroy(&p);
}

/* ---------------------------------------------------------------------------------------------
 * Limits, idle timeout, removal
 */
static void limit_change_evicts_down(void **state)
{
    (void)state;
    evlog_t log = {0};
    int64_t now = 0;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_LRU);
    passivator_t *p = passivator_new(&s, 5);
    run(p, "a b c d e", &now, &log);
    passivator_set_limit(p, 2, record, &log);
    assert_string_equal(joined(&log), "a b c");
    assert_int_equal(passivator_size(p), 2);
    /* 0 = no limit: nothing evicted, entities pile up */
    passivator_set_limit(p, 0, record, &log);
    run(p, "f g h i", &now, &log);
    assert_int_equal(log.n, 3);
    assert_int_equal(passivator_size(p), 6);
    passivator_set_limit(p, 4, record, &log);
    assert_string_equal(joined(&log), "a b c d e");
    passivator_destroy(&p);

    /* every limit-based policy ends at or under the new limit */
    shoal_passivation_policy_t policies[] = {SHOAL_PASSIVATE_LRU, SHOAL_PASSIVATE_MRU,
                                             SHOAL_PASSIVATE_LFU, SHOAL_PASSIVATE_TINYLFU};
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        for (int levels = 0; levels <= 3; levels += 3) {
            s = settings(policies[k]);
            s.slru_levels = (uint32_t)levels;
            s.lfu_dynamic_aging = levels > 0;
            p = passivator_new(&s, 40);
            char id[16];
            for (int i = 0; i < 200; i++) {
                snprintf(id, sizeof id, "e%d", (i * 7) % 60);
                passivator_access(p, id, now++, NULL, NULL);
            }
            assert_int_equal(passivator_size(p), 40);
            reset(&log);
            passivator_set_limit(p, 25, record, &log);
            assert_int_equal(passivator_size(p), 25);
            assert_int_equal(log.n, 15);
            assert_int_equal(passivator_check(p), 0);
            for (size_t i = 0; i < log.n; i++)
                assert_false(passivator_contains(p, log.ids[i]));
            passivator_destroy(&p);
        }
    }

    /* the idle policy has no limit to enforce */
    s = settings(SHOAL_PASSIVATE_IDLE);
    p = passivator_new(&s, 2);
    reset(&log);
    run(p, "a b c d", &now, &log);
    passivator_set_limit(p, 1, record, &log);
    assert_int_equal(log.n, 0);
    assert_int_equal(passivator_size(p), 4);
    passivator_destroy(&p);
}

static void idle_timeout_evicts_the_idle(void **state)
{
    (void)state;
    shoal_passivation_policy_t policies[] = {SHOAL_PASSIVATE_IDLE, SHOAL_PASSIVATE_LRU,
                                             SHOAL_PASSIVATE_MRU, SHOAL_PASSIVATE_LFU,
                                             SHOAL_PASSIVATE_TINYLFU};
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        for (int levels = 0; levels <= 2; levels += 2) {
            shoal_passivation_settings_t s = settings(policies[k]);
            s.idle_timeout_ms = 1000;
            s.slru_levels = (uint32_t)levels;
            passivator_t *p = passivator_new(&s, 10);
            evlog_t log = {0};
            passivator_access(p, "a", 0, record, &log);
            passivator_access(p, "b", 500, record, &log);
            passivator_access(p, "c", 900, record, &log);
            passivator_access(p, "a", 1000, record, &log);
            passivator_idle(p, 1499, record, &log);
            assert_int_equal(log.n, 0); /* b at 500 is not before 499 */
            passivator_idle(p, 1501, record, &log);
            assert_string_equal(joined(&log), "b");
            passivator_idle(p, 2500, record, &log);
            assert_string_equal(joined(&log), "b c a");
            assert_int_equal(passivator_size(p), 0);
            passivator_stats_t st;
            passivator_stats(p, &st);
            assert_int_equal(st.idle_evicted, 3);
            assert_int_equal(st.evicted, 0);
            assert_int_equal(passivator_check(p), 0);
            /* usable after being emptied */
            assert_false(passivator_access(p, "a", 3000, record, &log));
            assert_int_equal(passivator_check(p), 0);
            passivator_destroy(&p);
        }
    }

    /* no timeout, or no passivation at all: idle ticks do nothing */
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_LRU);
    passivator_t *p = passivator_new(&s, 10);
    evlog_t log = {0};
    passivator_access(p, "a", 0, record, &log);
    passivator_idle(p, 1000000, record, &log);
    assert_int_equal(log.n, 0);
    passivator_destroy(&p);
    s = settings(SHOAL_PASSIVATE_NONE);
    s.idle_timeout_ms = 10;
    p = passivator_new(&s, 1);
    passivator_access(p, "a", 0, record, &log);
    passivator_access(p, "b", 0, record, &log);
    passivator_idle(p, 1000000, record, &log);
    assert_int_equal(log.n, 0);
    assert_int_equal(passivator_size(p), 2);
    passivator_destroy(&p);
}

/* A clock that steps back must not make anything idle early: b's access, stamped 500 after
   one at 1000, counts as at 1000. */
static void idle_survives_a_clock_going_back(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_IDLE);
    s.idle_timeout_ms = 100;
    passivator_t *p = passivator_new(&s, 0);
    evlog_t log = {0};
    passivator_access(p, "a", 1000, record, &log);
    passivator_access(p, "b", 500, record, &log);
    passivator_access(p, "a", 1020, record, &log);
    assert_int_equal(passivator_check(p), 0);
    passivator_idle(p, 1050, record, &log);
    assert_int_equal(log.n, 0);
    passivator_idle(p, 1101, record, &log);
    assert_string_equal(joined(&log), "b");
    passivator_idle(p, 1121, record, &log);
    assert_string_equal(joined(&log), "b a");
    passivator_destroy(&p);
}

static void remove_forgets_without_callback(void **state)
{
    (void)state;
    shoal_passivation_policy_t policies[] = {SHOAL_PASSIVATE_LRU, SHOAL_PASSIVATE_MRU,
                                             SHOAL_PASSIVATE_LFU, SHOAL_PASSIVATE_TINYLFU,
                                             SHOAL_PASSIVATE_IDLE};
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        shoal_passivation_settings_t s = settings(policies[k]);
        s.slru_levels = 2;
        passivator_t *p = passivator_new(&s, 3);
        evlog_t log = {0};
        int64_t now = 0;
        run(p, "a b b c", &now, &log);
        passivator_remove(p, "b");
        passivator_remove(p, "zz"); /* unknown: ignored */
        assert_int_equal(log.n, 0);
        assert_int_equal(passivator_size(p), 2);
        assert_false(passivator_contains(p, "b"));
        assert_int_equal(passivator_check(p), 0);
        /* room for one more without an eviction, and b is new again */
        assert_false(passivator_access(p, "b", now++, record, &log));
        assert_int_equal(log.n, 0);
        passivator_remove(p, "a");
        passivator_remove(p, "b");
        passivator_remove(p, "c");
        assert_int_equal(passivator_size(p), 0);
        assert_int_equal(passivator_check(p), 0);
        passivator_destroy(&p);
    }
}

static void bad_input_is_ignored_and_counted(void **state)
{
    (void)state;
    shoal_passivation_settings_t s = settings(SHOAL_PASSIVATE_TINYLFU);
    assert_null(passivator_new(NULL, 10));
    s.policy = (shoal_passivation_policy_t)99;
    assert_null(passivator_new(&s, 10));

    /* nonsense numbers fall back to Akka's defaults instead of breaking the structure */
    s = settings(SHOAL_PASSIVATE_TINYLFU);
    s.window_proportion = -3;
    s.window_min_proportion = 2;
    s.adjust_multiplier = 0;
    s.step_decay = 7;
    s.slru_levels = 9;
    s.slru_proportions[0] = -1;
    s.hill_climbing = true;
    passivator_t *p = passivator_new(&s, 50);
    assert_non_null(p);
    char id[16];
    for (int i = 0; i < 3000; i++) {
        snprintf(id, sizeof id, "e%d", (i * 13) % 97);
        passivator_access(p, id, i, NULL, NULL); /* no callback: evictions still happen */
    }
    assert_int_equal(passivator_size(p), 50);
    assert_int_equal(passivator_check(p), 0);

    assert_false(passivator_access(p, NULL, 0, NULL, NULL));
    passivator_remove(p, NULL);
    passivator_stats_t st;
    passivator_stats(p, &st);
    assert_int_equal(st.bad_input, 2);
    assert_false(passivator_contains(p, NULL));
    passivator_destroy(&p);

    /* a NULL passivator is a no-op everywhere */
    assert_false(passivator_access(NULL, "a", 0, NULL, NULL));
    passivator_remove(NULL, "a");
    passivator_idle(NULL, 0, NULL, NULL);
    passivator_set_limit(NULL, 1, NULL, NULL);
    assert_int_equal(passivator_size(NULL), 0);
    passivator_stats(NULL, &st);
    assert_int_equal(st.hits, 0);
    passivator_destroy(NULL);
    passivator_destroy(&p);

    /* an empty id is an id like any other; so is a long one */
    s = settings(SHOAL_PASSIVATE_LRU);
    p = passivator_new(&s, 2);
    char longid[1000];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_false(passivator_access(p, "", 0, NULL, NULL));
    assert_true(passivator_access(p, "", 1, NULL, NULL));
    assert_false(passivator_access(p, longid, 2, NULL, NULL));
    assert_true(passivator_access(p, longid, 3, NULL, NULL));
    passivator_destroy(&p);
}

/* The callback runs once the passivator is consistent: it may remove or access entities. */
typedef struct {
    passivator_t *p;
    evlog_t log;
    int64_t now;
    bool nested;
} reenter_t;

static void reenter(const char *id, void *arg)
{
    reenter_t *r = arg;
    record(id, &r->log);
    assert_int_equal(passivator_check(r->p), 0);
    assert_false(passivator_contains(r->p, id));
    /* the region stops the entity at once and reports it stopped: a no-op now */
    passivator_remove(r->p, id);
    if (!r->nested) {
        r->nested = true;
        passivator_access(r->p, "z", r->now++, reenter, r);
    }
}

static void callbacks_may_call_back(void **state)
{
    (void)state;
    shoal_passivation_policy_t policies[] = {SHOAL_PASSIVATE_LRU, SHOAL_PASSIVATE_LFU,
                                             SHOAL_PASSIVATE_TINYLFU};
    for (size_t k = 0; k < sizeof policies / sizeof policies[0]; k++) {
        shoal_passivation_settings_t s = settings(policies[k]);
        s.window_proportion = 0.5;
        reenter_t r = {.now = 0};
        r.p = passivator_new(&s, 2);
        passivator_access(r.p, "a", r.now++, reenter, &r);
        passivator_access(r.p, "b", r.now++, reenter, &r);
        /* c pushes one out, whose callback brings z, which pushes out another */
        passivator_access(r.p, "c", r.now++, reenter, &r);
        assert_int_equal(r.log.n, 2);
        assert_true(passivator_contains(r.p, "z"));
        assert_int_equal(passivator_size(r.p), 2);
        assert_int_equal(passivator_check(r.p), 0);
        passivator_destroy(&r.p);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Random access sequences against a model of the active set
 */
#define UNIVERSE 200

typedef struct {
    bool active[UNIVERSE];
    int64_t last[UNIVERSE];
    size_t n;
    int accessed;        /* the id being accessed, -1 otherwise */
    int64_t idle_before; /* during passivator_idle: evicted entities were accessed before this */
    uint64_t seed;
    int evictions;
} model_t;

static int id_index(const char *id)
{
    if (id[0] != 'e')
        fail_msg("unknown id %s", id);
    return atoi(id + 1);
}

static void model_evicted(const char *id, void *arg)
{
    model_t *m = arg;
    int i = id_index(id);
    if (i < 0 || i >= UNIVERSE || !m->active[i])
        fail_msg("evicted %s which was not active (case seed %llu; replay with SHOAL_SEED=%llu)",
                 id, (unsigned long long)m->seed, (unsigned long long)prop_seed());
    if (i == m->accessed)
        fail_msg("evicted %s on its own access (case seed %llu)", id, (unsigned long long)m->seed);
    if (m->idle_before != INT64_MIN && m->last[i] >= m->idle_before)
        fail_msg("idle timeout evicted %s, accessed at %lld, not before %lld (case seed %llu)", id,
                 (long long)m->last[i], (long long)m->idle_before, (unsigned long long)m->seed);
    m->active[i] = false;
    m->n--;
    m->evictions++;
}

static shoal_passivation_settings_t random_settings(prop_rng_t *rng)
{
    static const shoal_passivation_policy_t policies[] = {
        SHOAL_PASSIVATE_NONE, SHOAL_PASSIVATE_IDLE, SHOAL_PASSIVATE_LRU,
        SHOAL_PASSIVATE_MRU,  SHOAL_PASSIVATE_LFU,  SHOAL_PASSIVATE_TINYLFU,
    };
    shoal_passivation_settings_t s = settings(policies[prop_below(rng, 6)]);
    s.idle_timeout_ms = prop_chance(rng, 1, 2) ? (uint32_t)prop_below(rng, 400) + 1 : 0;
    s.slru_levels = (uint32_t)prop_below(rng, 5);
    for (int l = 0; l < 4; l++)
        s.slru_proportions[l] = prop_chance(rng, 1, 3) ? 0 : (double)prop_below(rng, 10) / 10;
    s.lfu_dynamic_aging = prop_chance(rng, 1, 2);
    s.window_proportion = (double)prop_below(rng, 101) / 100;
    s.window_min_proportion = (double)prop_below(rng, 30) / 100;
    s.window_max_proportion = 0.3 + (double)prop_below(rng, 71) / 100;
    s.hill_climbing = prop_chance(rng, 2, 3);
    s.adjust_multiplier = 0.2 + (double)prop_below(rng, 30) / 10;
    return s;
}

static void check_model(const passivator_t *p, const model_t *m, const char *what)
{
    int rc = passivator_check(p);
    if (rc || passivator_size(p) != m->n)
        fail_msg("after %s: check %d, size %zu, model %zu (case seed %llu; replay with "
                 "SHOAL_SEED=%llu)",
                 what, rc, passivator_size(p), m->n, (unsigned long long)m->seed,
                 (unsigned long long)prop_seed());
}

static void random_sequences_keep_the_invariants(void **state)
{
    (void)state;
    uint64_t base = prop_seed();
    int cases = prop_cases(300);
    for (int c = 0; c < cases; c++) {
        uint64_t seed = base + (uint64_t)c;
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        shoal_passivation_settings_t s = random_settings(&rng);
        size_t limit = prop_chance(&rng, 1, 8) ? 0 : (size_t)prop_below(&rng, 60) + 1;
        passivator_t *p = passivator_new(&s, limit);
        assert_non_null(p);
        bool limited = s.policy != SHOAL_PASSIVATE_NONE && s.policy != SHOAL_PASSIVATE_IDLE;
        model_t m = {.accessed = -1, .idle_before = INT64_MIN, .seed = seed};
        int64_t now = 0;
        /* a few hot ids and a long tail, so that frequency and recency both matter */
        uint64_t spread = prop_below(&rng, UNIVERSE) + 1;
        int ops = 1500;
        char id[16];
        for (int op = 0; op < ops; op++) {
            uint64_t r = prop_below(&rng, 100);
            now += (int64_t)prop_below(&rng, 20);
            if (r < 85) {
                int i = (int)prop_below(&rng, prop_below(&rng, spread) + 1);
                snprintf(id, sizeof id, "e%d", i);
                bool was = m.active[i];
                m.accessed = i;
                bool hit = passivator_access(p, id, now, model_evicted, &m);
                m.accessed = -1;
                if (hit != was)
                    fail_msg("access to %s: hit %d, model %d (case seed %llu)", id, hit, was,
                             (unsigned long long)seed);
                if (!was) {
                    m.active[i] = true;
                    m.n++;
                }
                m.last[i] = now;
                if (!passivator_contains(p, id))
                    fail_msg("%s not active after its access (case seed %llu)", id,
                             (unsigned long long)seed);
                if (limited && limit && passivator_size(p) > limit)
                    fail_msg("size %zu over limit %zu (case seed %llu)", passivator_size(p), limit,
                             (unsigned long long)seed);
            } else if (r < 91) {
                int i = (int)prop_below(&rng, UNIVERSE);
                snprintf(id, sizeof id, "e%d", i);
                passivator_remove(p, id);
                if (m.active[i]) {
                    m.active[i] = false;
                    m.n--;
                }
            } else if (r < 97) {
                m.idle_before = s.idle_timeout_ms ? now - (int64_t)s.idle_timeout_ms : INT64_MIN;
                if (s.policy == SHOAL_PASSIVATE_NONE)
                    m.idle_before = INT64_MIN;
                passivator_idle(p, now, model_evicted, &m);
                if (m.idle_before != INT64_MIN)
                    for (int i = 0; i < UNIVERSE; i++)
                        if (m.active[i] && m.last[i] < m.idle_before)
                            fail_msg("e%d idle since %lld survived the idle timeout at %lld "
                                     "(case seed %llu)",
                                     i, (long long)m.last[i], (long long)now,
                                     (unsigned long long)seed);
                m.idle_before = INT64_MIN;
            } else {
                limit = prop_chance(&rng, 1, 6) ? 0 : (size_t)prop_below(&rng, 60) + 1;
                size_t before = m.n;
                passivator_set_limit(p, limit, model_evicted, &m);
                if (limited && limit) {
                    size_t want = before > limit ? before - limit : 0;
                    if (passivator_size(p) > limit || before - m.n != want)
                        fail_msg("set_limit %zu from %zu: size %zu (case seed %llu)", limit, before,
                                 passivator_size(p), (unsigned long long)seed);
                } else if (m.n != before) {
                    fail_msg("set_limit %zu evicted without a limit (case seed %llu)", limit,
                             (unsigned long long)seed);
                }
            }
            if (op % 16 == 0)
                check_model(p, &m, "an operation");
        }
        check_model(p, &m, "the last operation");
        passivator_stats_t st;
        passivator_stats(p, &st);
        if (!limited && st.evicted)
            fail_msg("policy %d evicted for a limit (case seed %llu)", (int)s.policy,
                     (unsigned long long)seed);
        passivator_destroy(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lru_evicts_least_recent),
        cmocka_unit_test(slru_protects_repeated_entities),
        cmocka_unit_test(slru_demotes_protected_overflow),
        cmocka_unit_test(mru_evicts_most_recent_other),
        cmocka_unit_test(lfu_evicts_least_frequent_then_least_recent),
        cmocka_unit_test(lfu_dynamic_aging_lets_old_favourites_go),
        cmocka_unit_test(tinylfu_admits_frequent_and_rejects_one_hit_wonders),
        cmocka_unit_test(tinylfu_sketch_saturates_and_halves),
        cmocka_unit_test(tinylfu_resists_a_scan),
        cmocka_unit_test(tinylfu_hill_climbing_steps),
        cmocka_unit_test(limit_change_evicts_down),
        cmocka_unit_test(idle_timeout_evicts_the_idle),
        cmocka_unit_test(idle_survives_a_clock_going_back),
        cmocka_unit_test(remove_forgets_without_callback),
        cmocka_unit_test(bad_input_is_ignored_and_counted),
        cmocka_unit_test(callbacks_may_call_back),
        cmocka_unit_test(random_sequences_keep_the_invariants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
