/*  bench.h — measurement helpers for `scons bench`.

    Every figure is printed as one line that scripts read (DESIGN.md):
      BENCH name=<id> value=<n> unit=<unit> baseline=<n> ratio=<n>
    with a baseline measured in the same run on the same machine, so the ratio (shoal / baseline)
    holds on a noisy machine. Rates are ops/s, times ms.
*/
#ifndef SHOAL_BENCH_H
#define SHOAL_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "membership.h"

/* Monotonic time in seconds. */
double bench_now(void);

/* True when each of the n in-process members sees all n Up and converged. */
bool bench_all_up(shoal_cluster_t *const *cl, int n);

/* Runs fn(arg, n) with growing n until one run lasts at least min_seconds; returns the rate in
   operations per second of the best of `reps` such runs. fn performs n operations. */
double bench_rate(void (*fn)(void *arg, size_t n), void *arg, double min_seconds, int reps);

/* Best (lowest) time in milliseconds of `reps` runs of fn(arg). */
double bench_time_ms(void (*fn)(void *arg), void *arg, int reps);

/* Prints a BENCH line; baseline <= 0 means none. For a rate, ratio = value / baseline; for a
   time or a size, ratio = value / baseline too (lower is better there). */
void bench_report(const char *name, double value, const char *unit, double baseline);

/* Prints a comment line (starts with '#'), for context such as per-op latency and targets. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Keeps the compiler from optimizing a result away. */
void bench_sink(uintptr_t v);

#endif
