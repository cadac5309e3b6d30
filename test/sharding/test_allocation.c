/*  test_allocation.c — the shard allocation strategies (sharding/allocation.h) on tables of regions
    and shards with outcomes worked out by hand: both least-shard algorithms and their limits,
    preference order and app versions, leaving regions, rendezvous hashing (spread, stability when
    a member joins or restarts, the exact score bytes), external locations, a misbehaving custom
    strategy; then random tables (seed printed) checked against the invariants every strategy
    promises, and rebalancing repeated with its moves applied until it settles. */
#include "allocation.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "prop.h"

/* ---------------------------------------------------------------------------------------------
 * Tables
 */
#define MAX_REGIONS 12
#define MAX_SHARDS  2048

static char shard_names[MAX_SHARDS][16];

/* "s0000".."s2047": sorted by id is numeric order, which keeps expected outcomes readable. */
static const char *sid(int i)
{
    if (!shard_names[i][0])
        snprintf(shard_names[i], sizeof shard_names[i], "s%04d", i);
    return shard_names[i];
}

typedef struct {
    shoal_alloc_region_t r[MAX_REGIONS];
    const char *list[MAX_REGIONS][MAX_SHARDS];
    size_t n;
} table_t;

static table_t *table_new(void)
{
    table_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    return t;
}

static int table_add(table_t *t, uint16_t port, uint64_t uid, bool leaving, const char *version)
{
    assert_true(t->n < MAX_REGIONS);
    int i = (int)t->n++;
    t->r[i].node = shoal_node_make("127.0.0.1", port, uid);
    assert_non_null(t->r[i].node);
    t->r[i].shards = t->list[i];
    t->r[i].n_shards = 0;
    t->r[i].leaving = leaving;
    t->r[i].app_version = version;
    return i;
}

static void table_put(table_t *t, int region, const char *shard)
{
    assert_true(t->r[region].n_shards < MAX_SHARDS);
    t->list[region][t->r[region].n_shards++] = shard;
}

/* Shards from..to-1, in descending order so that any "sorted by id" has to be the code's doing. */
static void table_give(table_t *t, int region, int from, int to)
{
    for (int i = to - 1; i >= from; i--)
        table_put(t, region, sid(i));
}

/* The region hosting shard (by id), or -1. */
static int table_where(const table_t *t, const char *shard)
{
    for (size_t i = 0; i < t->n; i++)
        for (size_t j = 0; j < t->r[i].n_shards; j++)
            if (strcmp(t->list[i][j], shard) == 0)
                return (int)i;
    return -1;
}

static void table_remove(table_t *t, const char *shard)
{
    int i = table_where(t, shard);
    assert_true(i >= 0);
    for (size_t j = 0; j < t->r[i].n_shards; j++)
        if (strcmp(t->list[i][j], shard) == 0) {
            t->list[i][j] = t->list[i][--t->r[i].n_shards];
            return;
        }
}

/* Applies a round: every shard leaves its region, then each is allocated anew (as the coordinator
   does after handoff). Returns how many moved to another region. */
static size_t table_apply(table_t *t, const alloc_ctx_t *ctx, const char **moves, size_t k)
{
    int from[MAX_SHARDS];
    for (size_t i = 0; i < k; i++) {
        from[i] = table_where(t, moves[i]);
        table_remove(t, moves[i]);
    }
    size_t changed = 0;
    for (size_t i = 0; i < k; i++) {
        int to = alloc_allocate(ctx, moves[i], -1, t->r, t->n);
        assert_true(to >= 0 && (size_t)to < t->n);
        table_put(t, to, moves[i]);
        changed += to != from[i];
    }
    return changed;
}

static shoal_alloc_settings_t least_settings(uint32_t absolute, double relative)
{
    shoal_alloc_settings_t s = {.kind = SHOAL_ALLOC_LEAST_SHARDS,
                                .rebalance_absolute_limit = absolute,
                                .rebalance_relative_limit = relative,
                                .rebalance_threshold = 1,
                                .max_simultaneous_rebalance = 3};
    return s;
}

static shoal_alloc_settings_t old_settings(uint32_t threshold, uint32_t max_simultaneous)
{
    shoal_alloc_settings_t s = least_settings(0, 0.1);
    s.rebalance_threshold = threshold;
    s.max_simultaneous_rebalance = max_simultaneous;
    return s;
}

static size_t count_from(const table_t *t, const char **out, size_t k, int region)
{
    size_t c = 0;
    for (size_t i = 0; i < k; i++)
        c += table_where(t, out[i]) == region;
    return c;
}

/* ---------------------------------------------------------------------------------------------
 * Versions and preference order
 */
static void versions_compare_like_akka(void **state)
{
    (void)state;
    static const struct {
        const char *a, *b;
        int want;
    } cases[] = {
        {"1.10.0", "1.9.3", 1}, /* numbers, not text */
        {"1.2", "1.2.0", 0},    /* missing parts are 0 */
        {"2", "1.99.99", 1},
        {"1.0.0-RC1", "1.0.0", -1},     /* a qualifier comes before the release */
        {"1.0.0-M1", "1.0.0-RC1", -1},  /* qualifiers compare as bytes */
        {"1.0.0+3-abcdef", "1.0.0", 1}, /* dynver: commits after the tag */
        {"1.0.0+3-abcdef", "1.0.0+10-0123", -1},
        {"1.0.1", "1.0.0+99-ff", 1},
        {NULL, "0.0.0", 0},
        {"", "0", 0},
        {"1.2.3", "1.2.3", 0},
        {"1.2.3.4", "1.2.3", 1},
        {"99999999999999999999", "4294967295", 0}, /* saturates, never wraps to small */
        {"alpha", "0.0.1", -1},                    /* text is a qualifier of 0.0.0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int c = alloc_version_cmp(cases[i].a, cases[i].b);
        int r = alloc_version_cmp(cases[i].b, cases[i].a);
        if (c != cases[i].want || r != -cases[i].want)
            fail_msg("version_cmp(%s, %s) = %d / reverse %d, want %d",
                     cases[i].a ? cases[i].a : "NULL", cases[i].b ? cases[i].b : "NULL", c, r,
                     cases[i].want);
    }
}

static void regions_sort_into_preference_order(void **state)
{
    (void)state;
    table_t *t = table_new();
    int a = table_add(t, 2551, 1, true, "2.0.0"); /* leaving, newest, empty: still last */
    int b = table_add(t, 2552, 1, false, "1.9.3");
    int c = table_add(t, 2553, 1, false, "1.10.0");
    int d = table_add(t, 2554, 1, false, "1.10.0");
    int e = table_add(t, 2550, 1, false, "1.10.0");
    int f = table_add(t, 2555, 1, false, "1.10.0-RC1");
    table_give(t, c, 0, 5);
    table_give(t, d, 5, 7);
    table_give(t, e, 7, 9);
    const shoal_node_t *want[] = {t->r[e].node, t->r[d].node, t->r[c].node,
                                  t->r[f].node, t->r[b].node, t->r[a].node};

    /* least shards allocates to the first in that order: during a rolling update that is a
       new-version member even with more shards than an old-version one (b has none) */
    shoal_alloc_settings_t s = least_settings(20, 0.1);
    alloc_ctx_t ctx = {.s = &s};
    assert_int_equal(alloc_allocate(&ctx, "new", -1, t->r, t->n), e);
    assert_int_equal(alloc_least_shards(t->r, t->n), e);

    shoal_alloc_region_t sorted[MAX_REGIONS];
    memcpy(sorted, t->r, t->n * sizeof *sorted);
    alloc_sort_regions(sorted, t->n);
    for (size_t i = 0; i < t->n; i++)
        assert_ptr_equal(sorted[i].node, want[i]);
    /* sorting again, from the other end, gives the same order */
    for (size_t i = 0; i < t->n / 2; i++) {
        shoal_alloc_region_t x = sorted[i];
        sorted[i] = sorted[t->n - 1 - i];
        sorted[t->n - 1 - i] = x;
    }
    alloc_sort_regions(sorted, t->n);
    for (size_t i = 0; i < t->n; i++)
        assert_ptr_equal(sorted[i].node, want[i]);
    alloc_sort_regions(NULL, 3);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * Least shards: allocation
 */
static void least_allocates_to_fewest_never_leaving(void **state)
{
    (void)state;
    table_t *t = table_new();
    shoal_alloc_settings_t s = least_settings(20, 0.1);
    alloc_ctx_t ctx = {.s = &s};
    assert_int_equal(alloc_allocate(&ctx, "x", -1, t->r, 0), -1);

    int gone = table_add(t, 2551, 1, true, "1.0.0"); /* empty but leaving */
    int busy = table_add(t, 2552, 1, false, "1.0.0");
    int quiet = table_add(t, 2553, 1, false, "1.0.0");
    table_give(t, busy, 0, 7);
    table_give(t, quiet, 7, 12);
    assert_int_equal(alloc_allocate(&ctx, "x", busy, t->r, t->n), quiet);
    /* ties go to the requester, else to the lower node id */
    table_give(t, quiet, 12, 14);
    assert_int_equal(alloc_allocate(&ctx, "x", -1, t->r, t->n), busy);
    assert_int_equal(alloc_allocate(&ctx, "x", quiet, t->r, t->n), quiet);
    assert_int_equal(alloc_allocate(&ctx, "x", busy, t->r, t->n), busy);
    assert_int_equal(alloc_allocate(&ctx, "x", gone, t->r, t->n), busy); /* leaving: no tie */
    /* when every region is leaving, one of them still gets it (better than no home) */
    t->r[busy].leaving = t->r[quiet].leaving = true;
    assert_int_equal(alloc_allocate(&ctx, "x", -1, t->r, t->n), gone);
    /* a region without a node is never chosen */
    t->r[gone].node = NULL;
    int r = alloc_allocate(&ctx, "x", -1, t->r, t->n);
    assert_true(r == busy || r == quiet);
    assert_int_equal(alloc_allocate(NULL, "x", -1, t->r, t->n), -1);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * Least shards: the newer rebalance (absolute limit > 0)
 */
typedef struct {
    const char *name;
    int counts[6]; /* -1 ends; a count of 1000 + c is a leaving region with c shards */
    uint32_t absolute;
    double relative;
    size_t want;
    int from[6]; /* shards expected from each region, or -1 = not checked */
} least_case_t;

static void least_new_rebalance_table(void **state)
{
    (void)state;
    static const least_case_t cases[] = {
        {"one full, one empty: 10% of 100", {100, 0, -1}, 20, 0.1, 10, {10, 0, -1}},
        {"absolute limit is lower", {100, 0, -1}, 3, 0.1, 3, {3, 0, -1}},
        {"relative limit of 50% capped by absolute", {100, 0, -1}, 20, 0.5, 20, {20, 0, -1}},
        {"relative limit 0: still one", {100, 0, -1}, 20, 0.0, 1, {1, 0, -1}},
        {"relative limit rounds 1.5 to 2", {15, 0, -1}, 20, 0.1, 2, {2, 0, -1}},
        {"most loaded gives first", {20, 12, 0, -1}, 3, 1.0, 3, {3, 0, 0, -1}},
        {"every region above optimal gives", {20, 12, 0, -1}, 20, 1.0, 10, {9, 1, 0, -1}},
        {"two full, two empty", {10, 10, 0, 0, -1}, 20, 1.0, 10, {5, 5, 0, 0, -1}},
        {"phase 2: one region two below", {5, 5, 3, -1}, 20, 0.1, 1, {-1, -1, 0, -1}},
        {"phase 2: one below optimal is balanced", {4, 4, 3, -1}, 20, 1.0, 0, {0, 0, 0, -1}},
        {"phase 2: optimal 3, one at 1", {3, 3, 3, 3, 1, -1}, 20, 1.0, 1, {-1, -1, -1, -1, 0}},
        {"phase 2: capped by shortfall", {2, 2, 2, 2, 0, -1}, 20, 1.0, 1, {-1, -1, -1, -1, 0}},
        {"balanced", {7, 7, 7, -1}, 20, 1.0, 0, {0, 0, 0, -1}},
        {"leaving: not counted, not drained", {1050, 0, 10, -1}, 20, 1.0, 5, {0, 0, 5, -1}},
        {"only leaving regions hold shards", {1050, 0, -1}, 20, 1.0, 0, {0, 0, -1}},
        {"no shards", {0, 0, -1}, 20, 1.0, 0, {0, 0, -1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const least_case_t *lc = &cases[c];
        table_t *t = table_new();
        int next = 0;
        for (int i = 0; lc->counts[i] >= 0; i++) {
            bool leaving = lc->counts[i] >= 1000;
            int count = leaving ? lc->counts[i] - 1000 : lc->counts[i];
            int r = table_add(t, (uint16_t)(2551 + i), 1, leaving, "1.0.0");
            table_give(t, r, next, next + count);
            next += count;
        }
        shoal_alloc_settings_t s = least_settings(lc->absolute, lc->relative);
        alloc_ctx_t ctx = {.s = &s};
        const char *out[MAX_SHARDS];
        size_t k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS);
        if (k != lc->want)
            fail_msg("%s: %zu shards, want %zu", lc->name, k, lc->want);
        for (size_t i = 0; i < t->n; i++)
            if (lc->from[i] >= 0 && count_from(t, out, k, (int)i) != (size_t)lc->from[i])
                fail_msg("%s: %zu from region %zu, want %d", lc->name,
                         count_from(t, out, k, (int)i), i, lc->from[i]);
        free(t);
    }
}

static void least_new_picks_sorted_ids_and_waits_for_moves(void **state)
{
    (void)state;
    table_t *t = table_new();
    int full = table_add(t, 2551, 1, false, "1.0.0");
    table_add(t, 2552, 1, false, "1.0.0");
    table_give(t, full, 0, 100); /* listed s0099 first */
    shoal_alloc_settings_t s = least_settings(20, 0.1);
    alloc_ctx_t ctx = {.s = &s};
    const char *out[64];
    size_t k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 64);
    assert_int_equal(k, 10);
    for (size_t i = 0; i < k; i++) {
        assert_string_equal(out[i], sid((int)i));
        assert_int_equal(table_where(t, out[i]), full);
    }
    /* the results are the table's own pointers */
    assert_ptr_equal(out[0], sid(0));
    /* cap bounds the round */
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 4), 4);
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 0), 0);
    /* one round at a time */
    const char *moving[] = {sid(0)};
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, moving, 1, out, 64), 0);
    /* no rebalance during a rolling update */
    t->r[1].app_version = "1.1.0";
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 64), 0);
    t->r[1].app_version = "1.0"; /* the same version written differently */
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 64), 10);
    free(t);
}

/* 100 shards from one member to two, as akka-pain-points #8 measures: the newer algorithm with
   Shoal's defaults needs a handful of rounds, and each round's moves are balanced at the end. */
static void least_new_settles_one_to_two(void **state)
{
    (void)state;
    table_t *t = table_new();
    table_add(t, 2551, 1, false, "1.0.0");
    table_add(t, 2552, 1, false, "1.0.0");
    table_give(t, 0, 0, 100);
    shoal_alloc_settings_t s = least_settings(20, 0.1);
    alloc_ctx_t ctx = {.s = &s};
    const char *out[MAX_SHARDS];
    int rounds = 0;
    size_t k;
    while ((k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS)) > 0) {
        assert_int_equal(table_apply(t, &ctx, out, k), k); /* every move lands on the other */
        assert_true(++rounds <= 10);
    }
    assert_int_equal(rounds, 5);
    assert_int_equal(t->r[0].n_shards, 50);
    assert_int_equal(t->r[1].n_shards, 50);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * Least shards: the older rebalance (absolute limit 0)
 */
static void least_old_rebalance_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int counts[2];
        uint32_t threshold, max_sim;
        int n_moving; /* the first n shards of region 0 are moving */
        size_t want;
    } cases[] = {
        {"threshold 1: min(min(9, 1), 3)", {10, 0}, 1, 3, 0, 1},
        {"threshold 3: min(min(7, 3), 3)", {10, 0}, 3, 3, 0, 3},
        {"threshold 5, max 5: min(min(5, 5), 5)", {10, 0}, 5, 5, 0, 5},
        {"room for one more: min(min(5, 3), 3 - 2)", {10, 0}, 3, 3, 2, 1},
        {"max simultaneous reached", {10, 0}, 3, 3, 3, 0},
        {"difference equal to threshold", {4, 3}, 1, 3, 0, 0},
        {"difference just above", {5, 3}, 1, 3, 0, 1},
        {"difference equal to a large threshold", {10, 0}, 10, 3, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        table_t *t = table_new();
        table_add(t, 2551, 1, false, "1.0.0");
        table_add(t, 2552, 1, false, "1.0.0");
        table_give(t, 0, 0, cases[c].counts[0]);
        table_give(t, 1, 100, 100 + cases[c].counts[1]);
        const char *moving[8];
        for (int i = 0; i < cases[c].n_moving; i++)
            moving[i] = sid(i);
        shoal_alloc_settings_t s = old_settings(cases[c].threshold, cases[c].max_sim);
        alloc_ctx_t ctx = {.s = &s};
        const char *out[64];
        size_t k = alloc_rebalance(&ctx, t->r, t->n, moving, (size_t)cases[c].n_moving, out, 64);
        if (k != cases[c].want)
            fail_msg("%s: %zu shards, want %zu", cases[c].name, k, cases[c].want);
        /* from the most loaded, in id order, skipping the moving ones */
        for (size_t i = 0; i < k; i++)
            assert_string_equal(out[i], sid(cases[c].n_moving + (int)i));
        free(t);
    }
}

static void least_old_skips_leaving_and_rolling_updates(void **state)
{
    (void)state;
    table_t *t = table_new();
    table_add(t, 2551, 1, true, "1.0.0");
    table_add(t, 2552, 1, false, "1.0.0");
    table_add(t, 2553, 1, false, "1.0.0");
    table_give(t, 0, 0, 10);
    table_give(t, 1, 10, 12);
    shoal_alloc_settings_t s = old_settings(1, 3);
    alloc_ctx_t ctx = {.s = &s};
    const char *out[16];
    /* the leaving region's 10 do not count: 2 against 0 */
    size_t k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 16);
    assert_int_equal(k, 1);
    assert_int_equal(table_where(t, out[0]), 1);
    /* the most loaded is judged without its moving shards */
    const char *moving[] = {sid(10)};
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, moving, 1, out, 16), 0);
    t->r[2].app_version = "2.0.0";
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 16), 0);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * Consistent hashing
 */
static shoal_alloc_settings_t hashing_settings(uint32_t limit)
{
    shoal_alloc_settings_t s = least_settings(20, 0.1);
    s.kind = SHOAL_ALLOC_CONSISTENT_HASHING;
    s.hashing_rebalance_limit = limit;
    return s;
}

static void hashing_score_is_xxh3_of_shard_and_address(void **state)
{
    (void)state;
    /* pinned: the bytes hashed are part of where shards live, across releases */
    static const char bytes[] = "s0001\000127.0.0.1:2551";
    const shoal_node_t *a = shoal_node_make("127.0.0.1", 2551, 1);
    const shoal_node_t *a2 = shoal_node_make("127.0.0.1", 2551, 77);
    const shoal_node_t *b = shoal_node_make("127.0.0.1", 2552, 1);
    assert_true(alloc_hrw_score("s0001", a) == XXH3_64bits(bytes, sizeof bytes - 1));
    assert_true(alloc_hrw_score("s0001", a) == alloc_hrw_score("s0001", a2)); /* uid not hashed */
    assert_true(alloc_hrw_score("s0001", a) != alloc_hrw_score("s0001", b));
    /* the separator keeps shard and address apart */
    const shoal_node_t *h1 = shoal_node_make("bc", 1, 1), *h2 = shoal_node_make("c", 1, 1);
    assert_true(alloc_hrw_score("a", h1) != alloc_hrw_score("ab", h2));
    /* an over-long shard id (refused before it gets here) still hashes safely */
    char long_id[600];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = 0;
    assert_true(alloc_hrw_score(long_id, a) != alloc_hrw_score(long_id, b));

    assert_int_equal(alloc_address_len(a), strlen("127.0.0.1:2551"));
    assert_true(alloc_address_is(a2, "127.0.0.1:2551"));
    assert_false(alloc_address_is(a2, "127.0.0.1:255"));
    assert_false(alloc_address_is(a2, "127.0.0.1:2551:77"));
    assert_false(alloc_address_is(a2, NULL));
    const shoal_node_t *v6 = shoal_node_intern("[::1]:2551:3");
    assert_non_null(v6);
    assert_true(alloc_address_is(v6, "[::1]:2551"));
}

static int preferred_of(const alloc_ctx_t *ctx, const table_t *t, int shard)
{
    return alloc_preferred(ctx, sid(shard), t->r, t->n);
}

static void hashing_spreads_and_moves_little(void **state)
{
    (void)state;
    enum { SHARDS = 1000 };
    table_t *t = table_new();
    for (int i = 0; i < 4; i++)
        table_add(t, (uint16_t)(2551 + i), 1, false, "1.0.0");
    shoal_alloc_settings_t s = hashing_settings(0);
    alloc_ctx_t ctx = {.s = &s};
    int before[SHARDS];
    size_t per[MAX_REGIONS] = {0};
    for (int i = 0; i < SHARDS; i++) {
        before[i] = preferred_of(&ctx, t, i);
        assert_true(before[i] >= 0 && before[i] < 4);
        assert_int_equal(alloc_allocate(&ctx, sid(i), 0, t->r, t->n), before[i]);
        per[before[i]]++;
    }
    for (int r = 0; r < 4; r++) /* 250 each, sd 13.7: 5 sd either side */
        assert_true(per[r] > 180 && per[r] < 320);

    /* a fifth member takes about a fifth, from every other, and nothing else moves */
    int fifth = table_add(t, 2555, 1, false, "1.0.0");
    size_t moved = 0;
    for (int i = 0; i < SHARDS; i++) {
        int now = preferred_of(&ctx, t, i);
        if (now != before[i]) {
            assert_int_equal(now, fifth);
            moved++;
        }
    }
    assert_true(moved > 140 && moved < 260); /* 200, sd 12.6 */

    /* a leaving member gives up only its own shards */
    t->r[1].leaving = true;
    for (int i = 0; i < SHARDS; i++) {
        int now = preferred_of(&ctx, t, i);
        t->r[1].leaving = false;
        int with = preferred_of(&ctx, t, i);
        t->r[1].leaving = true;
        if (with != 1)
            assert_int_equal(now, with);
        else
            assert_true(now >= 0 && now != 1);
    }
    t->r[1].leaving = false;

    /* a restarted member (same host:port, new uid) gets exactly its shards back */
    for (int i = 0; i < SHARDS; i++)
        before[i] = preferred_of(&ctx, t, i);
    t->r[2].node = shoal_node_make("127.0.0.1", 2553, 999);
    for (int i = 0; i < SHARDS; i++)
        assert_int_equal(preferred_of(&ctx, t, i), before[i]);
    /* alloc_preferred means nothing to least shards */
    shoal_alloc_settings_t ls = least_settings(20, 0.1);
    alloc_ctx_t lctx = {.s = &ls};
    assert_int_equal(alloc_preferred(&lctx, sid(0), t->r, t->n), -1);
    free(t);
}

static void hashing_rebalance_moves_misplaced_shards(void **state)
{
    (void)state;
    enum { SHARDS = 600 };
    table_t *t = table_new();
    for (int i = 0; i < 4; i++)
        table_add(t, (uint16_t)(2551 + i), 1, false, "1.0.0");
    shoal_alloc_settings_t s = hashing_settings(0);
    alloc_ctx_t ctx = {.s = &s};
    for (int i = 0; i < SHARDS; i++)
        table_put(t, preferred_of(&ctx, t, i), sid(i));
    const char *out[MAX_SHARDS];
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS), 0);

    int fifth = table_add(t, 2555, 1, false, "1.0.0");
    size_t want = 0;
    for (int i = 0; i < SHARDS; i++)
        want += preferred_of(&ctx, t, i) == fifth;
    size_t k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS);
    assert_int_equal(k, want);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(alloc_preferred(&ctx, out[i], t->r, t->n), fifth);
    /* moves in progress are skipped, the others still go */
    const char *moving[] = {out[0], out[1], "not-hosted"};
    const char *out2[MAX_SHARDS];
    size_t k2 = alloc_rebalance(&ctx, t->r, t->n, moving, 3, out2, MAX_SHARDS);
    assert_int_equal(k2, k - 2);
    for (size_t i = 0; i < k2; i++)
        assert_true(strcmp(out2[i], out[0]) != 0 && strcmp(out2[i], out[1]) != 0);
    /* the limit */
    s.hashing_rebalance_limit = 25;
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS), 25);
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 7), 7);
    /* rounds with the moves applied end with every shard at home */
    int rounds = 0;
    while ((k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS)) > 0) {
        assert_int_equal(table_apply(t, &ctx, out, k), k);
        assert_true(++rounds <= (int)(want / 25) + 1);
    }
    for (int i = 0; i < SHARDS; i++)
        assert_int_equal(table_where(t, sid(i)), preferred_of(&ctx, t, i));
    /* a leaving member's shards are graceful shutdown's, not the rebalance's */
    t->r[0].leaving = true;
    s.hashing_rebalance_limit = 0;
    k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS);
    assert_int_equal(k, 0);
    /* nor during a rolling update */
    t->r[0].leaving = false;
    table_remove(t, sid(0));
    table_put(t, (preferred_of(&ctx, t, 0) + 1) % 5, sid(0));
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS), 1);
    t->r[3].app_version = "1.0.1";
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS), 0);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * External
 */
static const char *const external_map[][2] = {
    {"a", "127.0.0.1:2552"}, {"b", "127.0.0.1:2553"}, {"c", "10.0.0.9:1"},
    {"e", "127.0.0.1:2552"}, {"f", "127.0.0.1:2552"}, {"g", "127.0.0.1:2551"},
};

static const char *external_lookup(const char *shard, void *arg)
{
    int *calls = arg;
    (*calls)++;
    for (size_t i = 0; i < sizeof external_map / sizeof external_map[0]; i++)
        if (strcmp(external_map[i][0], shard) == 0)
            return external_map[i][1];
    return NULL;
}

static void external_follows_locations(void **state)
{
    (void)state;
    table_t *t = table_new();
    int r0 = table_add(t, 2551, 1, false, "1.0.0");
    int r1 = table_add(t, 2552, 1, false, "1.0.0");
    int r2 = table_add(t, 2553, 1, true, "1.0.0");
    table_give(t, r1, 0, 3); /* r0 is the least loaded */
    shoal_alloc_settings_t s = least_settings(20, 0.1);
    s.kind = SHOAL_ALLOC_EXTERNAL;
    int calls = 0;
    alloc_ctx_t ctx = {.s = &s, .external = external_lookup, .external_arg = &calls};

    assert_int_equal(alloc_allocate(&ctx, "a", r0, t->r, t->n), r1); /* its location */
    assert_int_equal(alloc_allocate(&ctx, "b", r1, t->r, t->n), r1); /* location leaving */
    assert_int_equal(alloc_allocate(&ctx, "c", r1, t->r, t->n), r1); /* location unknown */
    assert_int_equal(alloc_allocate(&ctx, "d", r1, t->r, t->n), r1); /* no location */
    assert_int_equal(alloc_allocate(&ctx, "d", r2, t->r, t->n), r0); /* requester leaving */
    assert_int_equal(alloc_allocate(&ctx, "d", -1, t->r, t->n), r0); /* a proxy asked */
    assert_int_equal(alloc_allocate(&ctx, "d", 99, t->r, t->n), r0); /* bad requester */
    assert_true(calls > 0);
    assert_int_equal(alloc_preferred(&ctx, "a", t->r, t->n), r1);
    assert_int_equal(alloc_preferred(&ctx, "b", t->r, t->n), -1);
    assert_int_equal(alloc_preferred(&ctx, "d", t->r, t->n), -1);
    /* a restarted member at the location is the location */
    t->r[r1].node = shoal_node_make("127.0.0.1", 2552, 5);
    assert_int_equal(alloc_allocate(&ctx, "a", r0, t->r, t->n), r1);
    alloc_ctx_t none = {.s = &s};
    assert_int_equal(alloc_allocate(&none, "a", r1, t->r, t->n), r1);
    assert_int_equal(alloc_allocate(&none, "a", -1, t->r, t->n), r0);

    /* rebalance: r0 hosts a (wants r1), b (wants a leaving member), c (unknown), d (no
       location), e (wants r1); r1 hosts f (at home); leaving r2 hosts g (wants r0: shutdown's) */
    t->r[r1].n_shards = 0;
    table_put(t, r0, "e");
    table_put(t, r0, "d");
    table_put(t, r0, "c");
    table_put(t, r0, "b");
    table_put(t, r0, "a");
    table_put(t, r1, "f");
    table_put(t, r2, "g");
    const char *out[8];
    size_t k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 8);
    assert_int_equal(k, 2);
    assert_string_equal(out[0], "a");
    assert_string_equal(out[1], "e");
    const char *moving[] = {"e"};
    k = alloc_rebalance(&ctx, t->r, t->n, moving, 1, out, 8);
    assert_int_equal(k, 1);
    assert_string_equal(out[0], "a");
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 1), 1);
    assert_int_equal(alloc_rebalance(&none, t->r, t->n, NULL, 0, out, 8), 0);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * Custom
 */
typedef struct {
    int answer;
    int seen_requester;
    const char *moves[8];
    size_t n_moves;
    size_t claim; /* what rebalance returns (may exceed what it wrote, or cap) */
} custom_state_t;

static int custom_allocate_cb(const char *shard, int requester, const shoal_alloc_region_t *regions,
                              size_t n, void *arg)
{
    (void)shard;
    (void)regions;
    (void)n;
    custom_state_t *cs = arg;
    cs->seen_requester = requester;
    return cs->answer;
}

static size_t custom_rebalance_cb(const shoal_alloc_region_t *regions, size_t n,
                                  const char *const *in_progress, size_t n_in_progress,
                                  const char **out, size_t cap, void *arg)
{
    (void)regions;
    (void)n;
    (void)in_progress;
    (void)n_in_progress;
    custom_state_t *cs = arg;
    for (size_t i = 0; i < cs->n_moves && i < cap; i++)
        out[i] = cs->moves[i];
    return cs->claim;
}

static void custom_answers_are_checked(void **state)
{
    (void)state;
    table_t *t = table_new();
    int r0 = table_add(t, 2551, 1, false, "1.0.0");
    int r1 = table_add(t, 2552, 1, false, "1.0.0");
    int r2 = table_add(t, 2553, 1, true, "1.0.0");
    table_give(t, r0, 0, 4);
    table_give(t, r2, 10, 12);
    custom_state_t cs = {0};
    shoal_alloc_settings_t s = least_settings(20, 0.1);
    s.kind = SHOAL_ALLOC_CUSTOM;
    s.custom = (shoal_alloc_custom_t){custom_allocate_cb, custom_rebalance_cb, &cs};
    alloc_ctx_t ctx = {.s = &s};

    cs.answer = r0; /* a valid answer is kept, even if least shards would differ */
    assert_int_equal(alloc_allocate(&ctx, "x", r1, t->r, t->n), r0);
    assert_int_equal(cs.seen_requester, r1);
    cs.answer = 99; /* out of range: least shards */
    assert_int_equal(alloc_allocate(&ctx, "x", -1, t->r, t->n), r1);
    cs.answer = -3;
    assert_int_equal(alloc_allocate(&ctx, "x", 7, t->r, t->n), r1);
    assert_int_equal(cs.seen_requester, -1); /* a bad requester is passed on as a proxy */
    cs.answer = r2;                          /* leaving while others could take it */
    assert_int_equal(alloc_allocate(&ctx, "x", -1, t->r, t->n), r1);

    /* rebalance: hosted ids written from the strategy's own copies, unknown, repeated, in
       progress, NULL; only the valid ones come back, as the table's pointers */
    char copy1[8], copy3[8], copy11[8];
    strcpy(copy1, sid(1));
    strcpy(copy3, sid(3));
    strcpy(copy11, sid(11));
    const char *in_progress[] = {sid(2)};
    cs.moves[0] = copy1;
    cs.moves[1] = "nope";
    cs.moves[2] = sid(1);
    cs.moves[3] = sid(2);
    cs.moves[4] = NULL;
    cs.moves[5] = copy3;
    cs.moves[6] = copy11; /* on a leaving region: still hosted, the strategy's choice */
    cs.n_moves = 7;
    cs.claim = 7;
    const char *out[8];
    size_t k = alloc_rebalance(&ctx, t->r, t->n, in_progress, 1, out, 8);
    assert_int_equal(k, 3);
    assert_ptr_equal(out[0], sid(1));
    assert_ptr_equal(out[1], sid(3));
    assert_ptr_equal(out[2], sid(11));
    /* a count beyond cap is cut to cap */
    cs.claim = 1000;
    k = alloc_rebalance(&ctx, t->r, t->n, in_progress, 1, out, 2);
    assert_int_equal(k, 1); /* copy1 and "nope" in the cap, one valid */
    assert_ptr_equal(out[0], sid(1));

    /* no callbacks: least shards, no rebalance */
    s.custom = (shoal_alloc_custom_t){NULL, NULL, NULL};
    assert_int_equal(alloc_allocate(&ctx, "x", -1, t->r, t->n), r1);
    assert_int_equal(alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, 8), 0);
    free(t);
}

/* ---------------------------------------------------------------------------------------------
 * Random tables
 */
typedef struct {
    prop_rng_t *rng;
    const table_t *t;
    uint64_t salt;
} garbage_t;

static int garbage_allocate(const char *shard, int requester, const shoal_alloc_region_t *regions,
                            size_t n, void *arg)
{
    (void)shard;
    (void)requester;
    (void)regions;
    garbage_t *g = arg;
    return (int)prop_below(g->rng, n + 5) - 2;
}

static size_t garbage_rebalance(const shoal_alloc_region_t *regions, size_t n,
                                const char *const *in_progress, size_t n_in_progress,
                                const char **out, size_t cap, void *arg)
{
    garbage_t *g = arg;
    size_t k = prop_below(g->rng, cap + 1);
    for (size_t i = 0; i < k; i++) {
        uint64_t pick = prop_below(g->rng, 4);
        const shoal_alloc_region_t *r = &regions[prop_below(g->rng, n)];
        if (pick == 0 && r->n_shards)
            out[i] = r->shards[prop_below(g->rng, r->n_shards)];
        else if (pick == 1 && n_in_progress)
            out[i] = in_progress[prop_below(g->rng, n_in_progress)];
        else if (pick == 2)
            out[i] = "not-a-shard";
        else
            out[i] = i ? out[i - 1] : NULL;
    }
    return prop_chance(g->rng, 1, 8) ? cap + 3 : k;
}

/* Locations: a shard's address chosen by hashing it with a per-case salt (so a shard asks the
   same every time within a case), sometimes nothing, sometimes a stranger. */
static const char *garbage_external(const char *shard, void *arg)
{
    static char addr[MAX_REGIONS + 1][32];
    garbage_t *g = arg;
    uint64_t h = XXH3_64bits_withSeed(shard, strlen(shard), g->salt);
    size_t pick = (size_t)(h % (g->t->n + 2));
    if (pick == g->t->n)
        return NULL;
    if (pick > g->t->n)
        return "10.1.2.3:4";
    size_t len = alloc_address_len(g->t->r[pick].node);
    memcpy(addr[pick], shoal_node_id(g->t->r[pick].node), len);
    addr[pick][len] = 0;
    return addr[pick];
}

static bool in_list(const char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] && strcmp(list[i], s) == 0)
            return true;
    return false;
}

static size_t distinct_count(const char *const *list, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        if (list[i] && !in_list(list, i, list[i]))
            d++;
    return d;
}

static bool any_eligible_in(const table_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        if (!t->r[i].leaving)
            return true;
    return false;
}

static void spread_of(const table_t *t, size_t *min, size_t *max)
{
    *min = SIZE_MAX;
    *max = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->r[i].leaving)
            continue;
        if (t->r[i].n_shards < *min)
            *min = t->r[i].n_shards;
        if (t->r[i].n_shards > *max)
            *max = t->r[i].n_shards;
    }
}

static void random_table(prop_rng_t *rng, table_t *t, bool same_version)
{
    memset(t, 0, sizeof *t);
    size_t regions = 1 + prop_below(rng, 8);
    for (size_t i = 0; i < regions; i++) {
        const char *v = same_version || prop_chance(rng, 3, 4) ? "1.0.0" : "1.1.0";
        table_add(t, (uint16_t)(3000 + i), 1 + prop_below(rng, 1000), prop_chance(rng, 1, 5), v);
    }
    size_t shards = prop_below(rng, 300);
    bool lumped = prop_chance(rng, 1, 2); /* everything on one region, as after a cold start */
    size_t lump = prop_below(rng, regions);
    for (size_t i = 0; i < shards; i++)
        table_put(t, (int)(lumped ? lump : prop_below(rng, regions)), sid((int)i));
}

static void check_round(const char *what, uint64_t seed, const table_t *t,
                        const shoal_alloc_settings_t *s, const alloc_ctx_t *ctx,
                        const char *const *moving, size_t n_moving, const char **out, size_t k,
                        size_t cap)
{
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_msg("%s: %s (case seed %llu; replay with SHOAL_SEED=%llu)", what, #cond,          \
                     (unsigned long long)seed, (unsigned long long)prop_seed());                   \
    } while (0)
    CHECK(k <= cap);
    size_t total = 0;
    for (size_t i = 0; i < t->n; i++)
        if (!t->r[i].leaving)
            total += t->r[i].n_shards;
    for (size_t i = 0; i < k; i++) {
        int where = table_where(t, out[i]);
        CHECK(where >= 0);
        bool borrowed = false;
        for (size_t j = 0; j < t->r[where].n_shards; j++)
            borrowed |= t->r[where].shards[j] == out[i];
        CHECK(borrowed);
        CHECK(!in_list(out, i, out[i]));
        CHECK(!in_list(moving, n_moving, out[i]));
        if (s->kind != SHOAL_ALLOC_CUSTOM)
            CHECK(!t->r[where].leaving);
        if (s->kind == SHOAL_ALLOC_CONSISTENT_HASHING)
            CHECK(alloc_preferred(ctx, out[i], t->r, t->n) != where);
        if (s->kind == SHOAL_ALLOC_EXTERNAL) {
            int home = alloc_preferred(ctx, out[i], t->r, t->n);
            CHECK(home >= 0 && home != where && !t->r[home].leaving);
        }
    }
    if (s->kind == SHOAL_ALLOC_LEAST_SHARDS && s->rebalance_absolute_limit > 0) {
        if (n_moving)
            CHECK(k == 0);
        double rel = floor(s->rebalance_relative_limit * (double)total + 0.5);
        size_t limit = rel < 1 ? 1 : (size_t)rel;
        if (limit > s->rebalance_absolute_limit)
            limit = s->rebalance_absolute_limit;
        CHECK(k <= limit);
    }
    if (s->kind == SHOAL_ALLOC_LEAST_SHARDS && s->rebalance_absolute_limit == 0) {
        size_t busy = distinct_count(moving, n_moving);
        CHECK(k <= s->rebalance_threshold);
        CHECK(busy >= s->max_simultaneous_rebalance ? k == 0
                                                    : k <= s->max_simultaneous_rebalance - busy);
    }
    if (s->kind == SHOAL_ALLOC_CONSISTENT_HASHING && s->hashing_rebalance_limit > 0)
        CHECK(k <= s->hashing_rebalance_limit);
#undef CHECK
}

static void random_tables_keep_the_invariants(void **state)
{
    (void)state;
    uint64_t base = prop_seed();
    int cases = prop_cases(400);
    table_t *t = table_new();
    const char *out[MAX_SHARDS];
    for (int c = 0; c < cases; c++) {
        uint64_t seed = base + (uint64_t)c;
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        random_table(&rng, t, false);
        garbage_t g = {&rng, t, seed};
        shoal_alloc_settings_t s = {
            .kind = (shoal_alloc_kind_t)(SHOAL_ALLOC_LEAST_SHARDS + prop_below(&rng, 4)),
            .rebalance_absolute_limit =
                prop_chance(&rng, 1, 3) ? 0 : (uint32_t)prop_below(&rng, 30) + 1,
            .rebalance_relative_limit = (double)prop_below(&rng, 11) / 10.0,
            .rebalance_threshold = (uint32_t)prop_below(&rng, 4),
            .max_simultaneous_rebalance = (uint32_t)prop_below(&rng, 5) + 1,
            .hashing_rebalance_limit = (uint32_t)prop_below(&rng, 20),
            .custom = {garbage_allocate, garbage_rebalance, &g},
        };
        alloc_ctx_t ctx = {.s = &s, .external = garbage_external, .external_arg = &g};
        const char *moving[8];
        size_t n_moving = 0;
        if (prop_chance(&rng, 1, 2)) {
            size_t want = prop_below(&rng, 6);
            for (size_t i = 0; i < want; i++) {
                const shoal_alloc_region_t *r = &t->r[prop_below(&rng, t->n)];
                moving[n_moving++] =
                    r->n_shards ? r->shards[prop_below(&rng, r->n_shards)] : "gone";
            }
        }
        size_t cap = prop_below(&rng, 60);
        size_t k = alloc_rebalance(&ctx, t->r, t->n, moving, n_moving, out, cap);
        check_round("rebalance", seed, t, &s, &ctx, moving, n_moving, out, k, cap);

        int requester = (int)prop_below(&rng, t->n + 2) - 1;
        int to =
            alloc_allocate(&ctx, sid((int)prop_below(&rng, MAX_SHARDS)), requester, t->r, t->n);
        if (to < 0 || (size_t)to >= t->n || (any_eligible_in(t) && t->r[to].leaving))
            fail_msg("allocate gave %d of %zu (case seed %llu; replay with SHOAL_SEED=%llu)", to,
                     t->n, (unsigned long long)seed, (unsigned long long)base);
    }
    free(t);
}

static void random_tables_settle(void **state)
{
    (void)state;
    uint64_t base = prop_seed();
    int cases = prop_cases(150);
    table_t *t = table_new();
    const char *out[MAX_SHARDS];
    for (int c = 0; c < cases; c++) {
        uint64_t seed = base ^ 0x5e771eull ^ ((uint64_t)c << 20);
        prop_rng_t rng;
        prop_rng_init(&rng, seed);
        random_table(&rng, t, true);
        bool hashing = prop_chance(&rng, 1, 3);
        shoal_alloc_settings_t s =
            least_settings((uint32_t)prop_below(&rng, 30) + 1, (double)prop_below(&rng, 11) / 10.0);
        if (hashing) {
            s.kind = SHOAL_ALLOC_CONSISTENT_HASHING;
            s.hashing_rebalance_limit = (uint32_t)prop_below(&rng, 20);
        }
        alloc_ctx_t ctx = {.s = &s};
        int rounds = 0;
        size_t k;
        while ((k = alloc_rebalance(&ctx, t->r, t->n, NULL, 0, out, MAX_SHARDS)) > 0) {
            check_round(hashing ? "hashing round" : "least round", seed, t, &s, &ctx, NULL, 0, out,
                        k, MAX_SHARDS);
            table_apply(t, &ctx, out, k);
            if (++rounds > 2000)
                fail_msg("no end after %d rounds (case seed %llu; replay with SHOAL_SEED=%llu)",
                         rounds, (unsigned long long)seed, (unsigned long long)base);
        }
        if (hashing) {
            for (size_t i = 0; i < t->n; i++)
                for (size_t j = 0; !t->r[i].leaving && j < t->r[i].n_shards; j++)
                    if (alloc_preferred(&ctx, t->r[i].shards[j], t->r, t->n) != (int)i)
                        fail_msg("%s not at home after %d rounds (case seed %llu; replay with "
                                 "SHOAL_SEED=%llu)",
                                 t->r[i].shards[j], rounds, (unsigned long long)seed,
                                 (unsigned long long)base);
        } else if (any_eligible_in(t)) {
            size_t min, max;
            spread_of(t, &min, &max);
            if (max - min > 1)
                fail_msg("settled at %zu..%zu after %d rounds (case seed %llu; replay with "
                         "SHOAL_SEED=%llu)",
                         min, max, rounds, (unsigned long long)seed, (unsigned long long)base);
        }
    }
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(versions_compare_like_akka),
        cmocka_unit_test(regions_sort_into_preference_order),
        cmocka_unit_test(least_allocates_to_fewest_never_leaving),
        cmocka_unit_test(least_new_rebalance_table),
        cmocka_unit_test(least_new_picks_sorted_ids_and_waits_for_moves),
        cmocka_unit_test(least_new_settles_one_to_two),
        cmocka_unit_test(least_old_rebalance_table),
        cmocka_unit_test(least_old_skips_leaving_and_rolling_updates),
        cmocka_unit_test(hashing_score_is_xxh3_of_shard_and_address),
        cmocka_unit_test(hashing_spreads_and_moves_little),
        cmocka_unit_test(hashing_rebalance_moves_misplaced_shards),
        cmocka_unit_test(external_follows_locations),
        cmocka_unit_test(custom_answers_are_checked),
        cmocka_unit_test(random_tables_keep_the_invariants),
        cmocka_unit_test(random_tables_settle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
