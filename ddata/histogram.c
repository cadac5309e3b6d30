/*  histogram.c — log-linear latency histograms (see histogram.h for the layout and its error). */
#include "histogram.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

const uint64_t shoal_hist_le_us[SHOAL_HIST_N_LE] = {
    100,   250,    500,    1000,   2500,    5000,    10000,   25000,
    50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};

int64_t shoal_hist_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void shoal_hist_reset(shoal_hist_t *h)
{
    memset(h, 0, sizeof *h);
}

size_t shoal_hist_bucket(uint64_t us)
{
    if (us < SHOAL_HIST_LINEAR)
        return (size_t)us;
    int k = 63 - __builtin_clzll(us); /* us in [2^k, 2^(k+1)), k >= 8 */
    if (k >= 8 + SHOAL_HIST_OCTAVES)
        return SHOAL_HIST_BUCKETS - 1;
    /* the top 8 bits of us: 128..255, of which the low 7 pick the bucket in the octave */
    uint64_t sub = us >> (k - 7);
    return SHOAL_HIST_LINEAR + (size_t)(k - 8) * SHOAL_HIST_SUB + (size_t)(sub - SHOAL_HIST_SUB);
}

uint64_t shoal_hist_bucket_low(size_t i)
{
    if (i < SHOAL_HIST_LINEAR)
        return i;
    size_t o = (i - SHOAL_HIST_LINEAR) / SHOAL_HIST_SUB;
    uint64_t sub = (i - SHOAL_HIST_LINEAR) % SHOAL_HIST_SUB + SHOAL_HIST_SUB;
    return sub << (o + 1); /* k = o + 8, shift k - 7 */
}

uint64_t shoal_hist_bucket_width(size_t i)
{
    if (i < SHOAL_HIST_LINEAR)
        return 1;
    return (uint64_t)1 << ((i - SHOAL_HIST_LINEAR) / SHOAL_HIST_SUB + 1);
}

void shoal_hist_record(shoal_hist_t *h, uint64_t us)
{
    h->counts[shoal_hist_bucket(us)]++;
    h->count++;
    h->sum_us += us;
    if (us > h->max_us)
        h->max_us = us;
}

void shoal_hist_record_since(shoal_hist_t *h, int64_t start_us)
{
    int64_t d = shoal_hist_now_us() - start_us;
    shoal_hist_record(h, d > 0 ? (uint64_t)d : 0);
}

void shoal_hist_merge(shoal_hist_t *into, const shoal_hist_t *from)
{
    for (size_t i = 0; i < SHOAL_HIST_BUCKETS; i++)
        into->counts[i] += from->counts[i];
    into->count += from->count;
    into->sum_us += from->sum_us;
    if (from->max_us > into->max_us)
        into->max_us = from->max_us;
}

uint64_t shoal_hist_percentile(const shoal_hist_t *h, double p)
{
    if (h->count == 0)
        return 0;
    if (p < 0)
        p = 0;
    if (p > 100)
        p = 100;
    /* the rank of the value asked for, 1-based (nearest rank); the small slack keeps a product
       such as 99.9% of 1000 from landing a hair above 999 by rounding and taking rank 1000 */
    double r = p * (double)h->count / 100.0 - 1e-7;
    uint64_t rank = (uint64_t)r;
    if ((double)rank < r)
        rank++;
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < SHOAL_HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t top = shoal_hist_bucket_low(i) + shoal_hist_bucket_width(i) - 1;
            return top < h->max_us ? top : h->max_us;
        }
    }
    return h->max_us;
}

void shoal_hist_prometheus(shoal_buf_t *out, const char *name, const char *labels,
                           const shoal_hist_t *h)
{
    const char *sep = labels && *labels ? "," : "";
    const char *lab = labels ? labels : "";
    /* one pass over the buckets: each boundary takes the buckets that start below it */
    uint64_t cum = 0;
    size_t i = 0;
    for (int b = 0; b < SHOAL_HIST_N_LE; b++) {
        uint64_t le = shoal_hist_le_us[b];
        for (; i < SHOAL_HIST_BUCKETS && shoal_hist_bucket_low(i) < le; i++)
            cum += h->counts[i];
        shoal_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, lab, sep,
                         (double)le / 1e6, cum);
    }
    shoal_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, lab, sep, h->count);
    if (*lab)
        shoal_buf_printf(out, "%s_sum{%s} %.6f\n%s_count{%s} %" PRIu64 "\n", name, lab,
                         (double)h->sum_us / 1e6, name, lab, h->count);
    else
        shoal_buf_printf(out, "%s_sum %.6f\n%s_count %" PRIu64 "\n", name, (double)h->sum_us / 1e6,
                         name, h->count);
}
