/*  bench.c — measurement helpers (see bench.h). */
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static volatile uintptr_t sink;

void bench_sink(uintptr_t v)
{
    sink ^= v;
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double bench_rate(void (*fn)(void *arg, size_t n), void *arg, double min_seconds, int reps)
{
    size_t n = 1000;
    double best = 0;
    for (;;) {
        double t0 = bench_now();
        fn(arg, n);
        double dt = bench_now() - t0;
        if (dt >= min_seconds) {
            best = (double)n / dt;
            break;
        }
        n = dt > 0.001 ? (size_t)((double)n * min_seconds / dt * 1.2) + 1 : n * 10;
    }
    for (int r = 1; r < reps; r++) {
        double t0 = bench_now();
        fn(arg, n);
        double rate = (double)n / (bench_now() - t0);
        if (rate > best)
            best = rate;
    }
    return best;
}

double bench_time_ms(void (*fn)(void *arg), void *arg, int reps)
{
    double best = -1;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        fn(arg);
        double ms = (bench_now() - t0) * 1000.0;
        if (best < 0 || ms < best)
            best = ms;
    }
    return best;
}

void bench_report(const char *name, double value, const char *unit, double baseline)
{
    if (baseline > 0)
        printf("BENCH name=%s value=%.6g unit=%s baseline=%.6g ratio=%.4g\n", name, value, unit,
               baseline, value / baseline);
    else
        printf("BENCH name=%s value=%.6g unit=%s\n", name, value, unit);
    fflush(stdout);
}

void bench_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

bool bench_all_up(shoal_cluster_t *const *cl, int n)
{
    for (int i = 0; i < n; i++) {
        shoal_cluster_view_t v;
        if (shoal_cluster_view(cl[i], &v) != 0)
            return false;
        size_t up = 0;
        for (size_t k = 0; k < v.n_members; k++)
            up += v.members[k].status == SHOAL_MEMBER_UP;
        bool ok = up == (size_t)n && v.converged;
        shoal_cluster_view_free(&v);
        if (!ok)
            return false;
    }
    return true;
}
