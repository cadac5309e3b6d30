/*  bench_passivation.c — hit rates of the passivation policies (sharding/passivation.h) on one
    skewed trace, and what an access costs.

    The trace (fixed seed, 1,000,000 accesses, limit 1000 active entities) is Zipf-distributed
    (s = 0.9 over 100,000 entity ids, the popular ids spread over the id space) with two segments
    from Caffeine's synthetic traces in the middle, where frequency matters more than recency:
      - a loop: 2,000 other ids accessed in order 25 times over (50,000 accesses), twice the
        limit, which LRU never hits;
      - a scan: 100,000 ids accessed once each, which flushes an LRU of everything popular.
    Layout: Zipf 300,000 | loop 50,000 | Zipf 300,000 | scan 100,000 | Zipf 250,000.

    Figures: passivation_hit_rate_tinylfu (value in %, baseline = the LRU hit rate on the same
    trace, so ratio = tinylfu / lru, to be above 1 as the issue asks), passivation_hit_rate_lru
    (no baseline), and the access rates of both over the whole trace (the composite's against
    LRU's). The other policies' hit rates are printed as notes.
*/
#include "bench.h"
#include "passivation.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT      1000
#define ZIPF_IDS   100000
#define ZIPF_S     0.9
#define LOOP_IDS   2000
#define LOOP_TIMES 25
#define SCAN_IDS   100000
#define ACCESSES   1000000
#define ID_LEN     24

typedef struct {
    uint64_t s;
} rng_t;

/* splitmix64: fixed seed, same trace on every run and machine */
static uint64_t rng_next(rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_unit(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
    char (*ids)[ID_LEN]; /* the access sequence, as the region would see it */
    size_t n;
} trace_t;

static void trace_add(trace_t *t, const char *prefix, uint64_t k)
{
    snprintf(t->ids[t->n++], ID_LEN, "%s-%08llu", prefix, (unsigned long long)k);
}

static void zipf_segment(trace_t *t, rng_t *r, const double *cdf, const uint32_t *perm, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double u = rng_unit(r);
        size_t lo = 0, hi = ZIPF_IDS - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        trace_add(t, "entity", perm[lo]);
    }
}

static trace_t make_trace(void)
{
    trace_t t = {calloc(ACCESSES, ID_LEN), 0};
    double *cdf = malloc(ZIPF_IDS * sizeof *cdf);
    uint32_t *perm = malloc(ZIPF_IDS * sizeof *perm);
    if (!t.ids || !cdf || !perm)
        abort();
    double sum = 0;
    for (size_t k = 0; k < ZIPF_IDS; k++)
        sum += 1.0 / pow((double)(k + 1), ZIPF_S);
    double acc = 0;
    for (size_t k = 0; k < ZIPF_IDS; k++) {
        acc += 1.0 / pow((double)(k + 1), ZIPF_S) / sum;
        cdf[k] = acc;
    }
    cdf[ZIPF_IDS - 1] = 1.0;
    rng_t r = {20240801};
    /* rank -> id: popularity is not in id order (ids would hash alike otherwise anyway) */
    for (uint32_t k = 0; k < ZIPF_IDS; k++)
        perm[k] = k;
    for (size_t k = ZIPF_IDS - 1; k > 0; k--) {
        size_t j = (size_t)(rng_next(&r) % (k + 1));
        uint32_t tmp = perm[k];
        perm[k] = perm[j];
        perm[j] = tmp;
    }
    zipf_segment(&t, &r, cdf, perm, 300000);
    for (int round = 0; round < LOOP_TIMES; round++)
        for (uint64_t k = 0; k < LOOP_IDS; k++)
            trace_add(&t, "loop", k);
    zipf_segment(&t, &r, cdf, perm, 300000);
    for (uint64_t k = 0; k < SCAN_IDS; k++)
        trace_add(&t, "scan", k);
    zipf_segment(&t, &r, cdf, perm, ACCESSES - t.n);
    free(cdf);
    free(perm);
    return t;
}

static void count_eviction(const char *id, void *arg)
{
    (void)id;
    (*(uint64_t *)arg)++;
}

typedef struct {
    double hit_rate; /* % */
    double rate;     /* accesses per second, best of the runs */
    uint64_t evicted;
    size_t window; /* composite: window size at the end */
} result_t;

static result_t replay(const trace_t *t, const shoal_passivation_settings_t *s, int runs)
{
    result_t res = {0};
    double best = 1e30;
    for (int run = 0; run < runs; run++) {
        passivator_t *p = passivator_new(s, LIMIT);
        uint64_t hits = 0, evicted = 0;
        double t0 = bench_now();
        for (size_t i = 0; i < t->n; i++)
            hits += passivator_access(p, t->ids[i], (int64_t)i, count_eviction, &evicted);
        double dt = bench_now() - t0;
        if (dt < best)
            best = dt;
        res.hit_rate = 100.0 * (double)hits / (double)t->n;
        res.evicted = evicted;
        passivator_stats_t st;
        passivator_stats(p, &st);
        res.window = st.window_limit;
        bench_sink((uintptr_t)hits);
        passivator_destroy(&p);
    }
    res.rate = (double)t->n / best;
    return res;
}

static shoal_passivation_settings_t policy(shoal_passivation_policy_t pol)
{
    shoal_passivation_settings_t s;
    shoal_passivation_settings_default(&s);
    s.policy = pol;
    s.idle_timeout_ms = 0;
    return s;
}

int main(void)
{
    trace_t t = make_trace();

    shoal_passivation_settings_t lru_s = policy(SHOAL_PASSIVATE_LRU);
    shoal_passivation_settings_t tiny_s = policy(SHOAL_PASSIVATE_TINYLFU);
    tiny_s.hill_climbing = true; /* Akka's default-strategy */
    result_t lru = replay(&t, &lru_s, 3);
    result_t tiny = replay(&t, &tiny_s, 3);

    bench_report("passivation_hit_rate_tinylfu", tiny.hit_rate, "%", lru.hit_rate);
    bench_report("passivation_hit_rate_lru", lru.hit_rate, "%", 0);
    bench_report("passivation_access_tinylfu", tiny.rate, "ops/s", lru.rate);
    bench_report("passivation_access_lru", lru.rate, "ops/s", 0);
    bench_note("trace: Zipf s=%.2f over %d ids + a %dx%d loop + a %d-id scan, %zu accesses, "
               "limit %d",
               ZIPF_S, ZIPF_IDS, LOOP_TIMES, LOOP_IDS, SCAN_IDS, t.n, LIMIT);
    bench_note("per access (hash of the id included): lru %.0f ns, tinylfu %.0f ns; tinylfu "
               "window at the end %zu of %d",
               1e9 / lru.rate, 1e9 / tiny.rate, tiny.window, LIMIT);

    struct {
        const char *name;
        shoal_passivation_settings_t s;
    } others[] = {
        {"tinylfu, fixed 1% window", policy(SHOAL_PASSIVATE_TINYLFU)},
        {"slru 20/80", policy(SHOAL_PASSIVATE_LRU)},
        {"lfu", policy(SHOAL_PASSIVATE_LFU)},
        {"lfu, dynamic aging", policy(SHOAL_PASSIVATE_LFU)},
        {"mru", policy(SHOAL_PASSIVATE_MRU)},
    };
    others[1].s.slru_levels = 2;
    others[1].s.slru_proportions[0] = 0.2;
    others[1].s.slru_proportions[1] = 0.8;
    others[3].s.lfu_dynamic_aging = true;
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        result_t r = replay(&t, &others[i].s, 1);
        bench_note("hit rate %-26s %6.2f %% (%.0f ns per access)", others[i].name, r.hit_rate,
                   1e9 / r.rate);
    }
    free(t.ids);
    return 0;
}
