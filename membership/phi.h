/*  phi.h — private to membership/: the phi-accrual failure detector (Hayashibara et al.), as
    Akka computes it.

    A window of the last max_sample_size heartbeat intervals gives a mean and a standard
    deviation (never below min_std_deviation); phi(now) = -log10(1 - F(now - last)) where F is the
    normal CDF of mean + acceptable_pause and that deviation, from the logistic approximation
    1 / (1 + e^(-y * (1.5976 + 0.070566 y^2))). Before the first heartbeat nothing is known; the
    first heartbeat seeds the window with first_heartbeat_estimate (mean) and a quarter of it
    (deviation), as Akka does. Not thread-safe: one owner (the heartbeat actor).
*/
#ifndef SHOAL_MEMBERSHIP_PHI_H
#define SHOAL_MEMBERSHIP_PHI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double threshold;                /* 8.0 */
    uint32_t max_sample_size;        /* 1000 */
    double min_std_deviation_ms;     /* 100 */
    double acceptable_pause_ms;      /* 3000 */
    double first_heartbeat_estimate_ms; /* 1000 (the heartbeat interval) */
} phi_settings_t;

typedef struct phi phi_t;

phi_t *phi_new(const phi_settings_t *s);
void phi_destroy(phi_t **self_p);
/* Records a heartbeat at now_ms (monotonic). */
void phi_heartbeat(phi_t *d, int64_t now_ms);
/* phi at now_ms; 0 before the first heartbeat. */
double phi_value(const phi_t *d, int64_t now_ms);
/* phi_value < threshold (true before the first heartbeat). */
bool phi_available(const phi_t *d, int64_t now_ms);
/* True once a heartbeat has been recorded. */
bool phi_monitoring(const phi_t *d);
/* Scales the acceptable pause (Lifeguard: a struggling monitor widens its own bound; >= 1). */
void phi_set_pause_factor(phi_t *d, double factor);
/* Forgets the time of the last heartbeat as if one arrived now, keeping the window (used after
   the monitor itself was frozen: its silence is not the subject's). */
void phi_restart_clock(phi_t *d, int64_t now_ms);
/* Mean interval plus the (scaled) acceptable pause: the silence phi is centred on; 0 before the
   first heartbeat. */
double phi_expected_silence(const phi_t *d);
/* Milliseconds since the last heartbeat (0 before the first). */
double phi_silence(const phi_t *d, int64_t now_ms);
/* The pure formula, for tests: phi of `elapsed` ms given a mean and a deviation. */
double phi_of(double elapsed_ms, double mean_ms, double std_dev_ms);
/* Mean and standard deviation of the window (tests, stats). */
double phi_mean(const phi_t *d);
double phi_std_dev(const phi_t *d);

#endif
