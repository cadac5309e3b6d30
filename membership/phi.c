/*  phi.c — the phi-accrual failure detector; see phi.h.

    The window is a ring of intervals with running sums, so mean and deviation cost O(1) per
    heartbeat even at 1000 samples. Intervals are whole milliseconds, so the sums of them and of
    their squares stay exact in doubles (below 2^53) and adding then removing a sample leaves no
    drift.
*/
#include "phi.h"

#include <math.h>
#include <stdlib.h>

struct phi {
    phi_settings_t s;
    double pause_factor;
    double *ring;       /* max_sample_size intervals, oldest at `head` once full */
    uint32_t cap, n, head;
    double sum, sum_sq;
    bool monitoring;
    /* after a restart the next heartbeat only sets the clock: the time since a restart is not an
       interval between two heartbeats of the subject */
    bool skip_next_interval;
    int64_t last_ms;
};

static void push(phi_t *d, double interval)
{
    if (d->n == d->cap) {
        double old = d->ring[d->head];
        d->sum -= old;
        d->sum_sq -= old * old;
        d->ring[d->head] = interval;
        d->head = (d->head + 1) % d->cap;
    } else {
        d->ring[(d->head + d->n) % d->cap] = interval;
        d->n++;
    }
    d->sum += interval;
    d->sum_sq += interval * interval;
}

phi_t *phi_new(const phi_settings_t *s)
{
    if (!s || s->max_sample_size < 2 || !(s->threshold > 0) || s->min_std_deviation_ms < 0 ||
        s->acceptable_pause_ms < 0 || !(s->first_heartbeat_estimate_ms > 0))
        return NULL;
    phi_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->ring = calloc(s->max_sample_size, sizeof *d->ring);
    if (!d->ring) {
        free(d);
        return NULL;
    }
    d->s = *s;
    d->cap = s->max_sample_size;
    d->pause_factor = 1.0;
    return d;
}

void phi_destroy(phi_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->ring);
    free(*self_p);
    *self_p = NULL;
}

double phi_mean(const phi_t *d)
{
    return d->n ? d->sum / d->n : 0.0;
}

double phi_std_dev(const phi_t *d)
{
    if (!d->n)
        return 0.0;
    double mean = d->sum / d->n;
    double var = d->sum_sq / d->n - mean * mean;
    return var > 0 ? sqrt(var) : 0.0; /* rounding can make a zero variance slightly negative */
}

double phi_of(double elapsed_ms, double mean_ms, double std_dev_ms)
{
    double y = (elapsed_ms - mean_ms) / std_dev_ms;
    double e = exp(-y * (1.5976 + 0.070566 * y * y));
    /* two forms of -log10(1 - F) so neither side loses its precision: past the mean 1 - F is
       e / (1 + e) with e small; before it, 1 - 1/(1 + e) with e large */
    if (elapsed_ms > mean_ms)
        return -log10(e / (1.0 + e));
    return -log10(1.0 - 1.0 / (1.0 + e));
}

double phi_value(const phi_t *d, int64_t now_ms)
{
    if (!d->monitoring)
        return 0.0;
    double std = phi_std_dev(d);
    if (std < d->s.min_std_deviation_ms)
        std = d->s.min_std_deviation_ms;
    if (!(std > 0))
        std = 1.0; /* min_std_deviation 0 and a constant window: avoid dividing by zero */
    double elapsed = (double)(now_ms - d->last_ms);
    return phi_of(elapsed, phi_mean(d) + d->s.acceptable_pause_ms * d->pause_factor, std);
}

bool phi_available(const phi_t *d, int64_t now_ms)
{
    return phi_value(d, now_ms) < d->s.threshold;
}

bool phi_monitoring(const phi_t *d)
{
    return d->monitoring;
}

void phi_heartbeat(phi_t *d, int64_t now_ms)
{
    if (!d->monitoring) {
        /* nothing is known yet: seed the window around the estimate so the first real intervals
           do not make phi spike (Akka's firstHeartbeat) */
        double mean = d->s.first_heartbeat_estimate_ms, dev = mean / 4;
        push(d, mean - dev);
        push(d, mean + dev);
        d->monitoring = true;
    } else if (!d->skip_next_interval && phi_available(d, now_ms) && now_ms >= d->last_ms) {
        /* the first heartbeat after an unreachable spell is not a sample of the normal rhythm */
        push(d, (double)(now_ms - d->last_ms));
    }
    d->skip_next_interval = false;
    d->last_ms = now_ms;
}

void phi_set_pause_factor(phi_t *d, double factor)
{
    d->pause_factor = factor >= 1.0 ? factor : 1.0;
}

void phi_restart_clock(phi_t *d, int64_t now_ms)
{
    if (!d->monitoring)
        return;
    d->last_ms = now_ms;
    d->skip_next_interval = true;
}

double phi_expected_silence(const phi_t *d)
{
    if (!d || !d->monitoring)
        return 0;
    return phi_mean(d) + d->s.acceptable_pause_ms * d->pause_factor;
}

double phi_silence(const phi_t *d, int64_t now_ms)
{
    if (!d || !d->monitoring)
        return 0;
    return (double)(now_ms - d->last_ms);
}
