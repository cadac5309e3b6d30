/*  histogram.h — latency histograms, internal to the library (not installed, not exported: the
    library is built with -fvisibility=hidden and this header has no visibility push). Shared by
    the metrics of the replicator and of sharding, and by the latency benches (test/bench/), so
    that a bench's p99 and an operator's p99 are read from the same buckets.

    HdrHistogram's log-linear layout over whole microseconds: the values 0..255 each have a bucket
    of their own; above, every power of two [2^k, 2^(k+1)) (k = 8..31) is cut into 128 buckets of
    width 2^(k-7). A bucket is at most 1/128 of its values wide, so any percentile read back is
    within 0.8% of the true one (HdrHistogram's "2 significant digits"). The top bucket ends at
    2^32 us (71 minutes); longer values are counted in it (max keeps the true value). The counts
    are a fixed array inside the struct: recording is a few instructions and never allocates,
    so a histogram can be embedded in a node's state and fed on the node thread.

    One writer at a time (the node thread, or one bench thread); a reader on another thread needs
    its own synchronization (the benches read after the writers are done; /metrics reads on the
    node thread).
*/
#ifndef SHOAL_HISTOGRAM_H
#define SHOAL_HISTOGRAM_H

#include "ddata.h"

#include <stdint.h>

#define SHOAL_HIST_LINEAR  256 /* values below this have a bucket each */
#define SHOAL_HIST_SUB     128 /* buckets per power of two above it */
#define SHOAL_HIST_OCTAVES 24  /* powers of two 2^8 .. 2^31 */
#define SHOAL_HIST_BUCKETS (SHOAL_HIST_LINEAR + SHOAL_HIST_SUB * SHOAL_HIST_OCTAVES)

typedef struct {
    uint64_t counts[SHOAL_HIST_BUCKETS];
    uint64_t count;  /* values recorded */
    uint64_t sum_us; /* their sum (exact, in us) */
    uint64_t max_us; /* the largest (exact, not clamped) */
} shoal_hist_t;

/* Monotonic clock in microseconds, the time base the callers record against. */
int64_t shoal_hist_now_us(void);

/* Empties h (also the way to initialize one). */
void shoal_hist_reset(shoal_hist_t *h);

/* Counts one value of `us` microseconds. */
void shoal_hist_record(shoal_hist_t *h, uint64_t us);

/* Records the time from start_us (a shoal_hist_now_us reading) to now; a start in the future
   (a caller's clock mix-up) records 0. */
void shoal_hist_record_since(shoal_hist_t *h, int64_t start_us);

/* Adds from's counts to into's. */
void shoal_hist_merge(shoal_hist_t *into, const shoal_hist_t *from);

/* The value at percentile p (0..100) in microseconds: the highest value of the bucket that holds
   the ceil(p/100 * count)-th smallest value (at least the first), capped at max, so it is never
   below the true percentile and at most 1/128 above it. 0 when h is empty. */
uint64_t shoal_hist_percentile(const shoal_hist_t *h, double p);

/* Index of the bucket that counts `us`, and the bucket's first value and width (for tests and
   for the exposition below). */
size_t shoal_hist_bucket(uint64_t us);
uint64_t shoal_hist_bucket_low(size_t i);
uint64_t shoal_hist_bucket_width(size_t i);

/* Appends h as a Prometheus histogram sample set (exposition format 0.0.4): NAME_bucket with
   `le` in seconds at SHOAL_HIST_LE's boundaries and +Inf, NAME_sum in seconds, NAME_count.
   `labels` is NULL or the escaped label pairs to put first in every sample (`role="x"`). The
   caller writes the family's HELP/TYPE line (shoal_metrics_family, type "histogram") once before
   the samples of all its label sets. A boundary that falls inside a bucket counts that whole
   bucket (so a value at most 0.8% above a boundary may be counted under it: the histogram's own
   precision). */
void shoal_hist_prometheus(shoal_buf_t *out, const char *name, const char *labels,
                           const shoal_hist_t *h);

/* The `le` boundaries, in microseconds: Prometheus's default ladder (5 ms .. 10 s) extended down
   to 100 us, since a quorum over a LAN takes hundreds of microseconds, not milliseconds. */
#define SHOAL_HIST_N_LE 16
extern const uint64_t shoal_hist_le_us[SHOAL_HIST_N_LE];

#endif
