/*  log.c — Shoal's logger (ddata.h, Logs): a level, one handler, and the default handler's
    line format. zsys's fixed format ("I: 26-11-25 17:09:00 ...": a two-digit year, no time zone)
    has no hook for an application's own logging, so Shoal formats its own lines.

    The level is an atomic read on every call (a disabled line costs that and nothing else). The
    handler and its argument change under a mutex, which each line also holds while it is handed
    over: a handler replaced in the middle of another thread's line is not called after
    shoal_log_set_handler returns, and the default handler's lines reach stderr whole.
*/
#include "ddata.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Longest message handed over; longer ones are cut (with "...") rather than allocated. */
#define LOG_LINE_MAX 2048

static atomic_int level = SHOAL_LOG_INFO;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static shoal_log_fn *handler;
static void *handler_arg;

void shoal_log_set_level(shoal_log_level_t l)
{
    if (l < SHOAL_LOG_ERROR)
        l = SHOAL_LOG_ERROR;
    if (l > SHOAL_LOG_DEBUG)
        l = SHOAL_LOG_DEBUG;
    atomic_store(&level, (int)l);
}

shoal_log_level_t shoal_log_get_level(void)
{
    return (shoal_log_level_t)atomic_load_explicit(&level, memory_order_relaxed);
}

void shoal_log_set_handler(shoal_log_fn *fn, void *arg)
{
    pthread_mutex_lock(&mu);
    handler = fn;
    handler_arg = arg;
    pthread_mutex_unlock(&mu);
}

static const char *names[] = {"error", "warning", "info", "debug"};

const char *shoal_log_level_name(shoal_log_level_t l)
{
    return l >= SHOAL_LOG_ERROR && l <= SHOAL_LOG_DEBUG ? names[l] : "?";
}

int shoal_log_level_parse(const char *name, shoal_log_level_t *out)
{
    if (!name || !out)
        return SHOAL_EINVAL;
    for (int i = 0; i <= SHOAL_LOG_DEBUG; i++)
        if (strcasecmp(name, names[i]) == 0) {
            *out = (shoal_log_level_t)i;
            return 0;
        }
    if (strcasecmp(name, "warn") == 0) {
        *out = SHOAL_LOG_WARNING;
        return 0;
    }
    return SHOAL_EINVAL;
}

void shoal_log_time(int64_t ms, char *out, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    char date[32], zone[8];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    strftime(zone, sizeof zone, "%z", &tm); /* +0100: ISO 8601 extended form wants +01:00 */
    if (strlen(zone) == 5)
        snprintf(out, cap, "%s.%03d%.3s:%.2s", date, (int)(ms % 1000), zone, zone + 3);
    else
        snprintf(out, cap, "%s.%03dZ", date, (int)(ms % 1000));
}

static void write_default(shoal_log_level_t l, const char *msg)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char when[40];
    shoal_log_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, when, sizeof when);
    char line[LOG_LINE_MAX + 64];
    int n = snprintf(line, sizeof line, "%c: %s %s\n", "EWID"[l], when, msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line) {
        n = (int)sizeof line - 1;
        line[n - 1] = '\n';
    }
    /* one write: the line stays whole beside other processes writing to the same stderr */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void shoal_log(shoal_log_level_t l, const char *fmt, ...)
{
    if (l < SHOAL_LOG_ERROR || l > SHOAL_LOG_DEBUG || (int)l > atomic_load(&level) || !fmt)
        return;
    char msg[LOG_LINE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof msg)
        memcpy(msg + sizeof msg - 4, "...", 4);
    pthread_mutex_lock(&mu);
    if (handler)
        handler(l, msg, handler_arg);
    else
        write_default(l, msg);
    pthread_mutex_unlock(&mu);
}

/* ---------------------------------------------------------------------------------------------
 * The detail of the last failure on this thread (shoal_last_error_detail). Thread-local, so a
 * failing call of one thread never overwrites what another thread is about to read.
 */
static _Thread_local char detail[512];

const char *shoal_last_error_detail(void)
{
    return detail;
}

void shoal_error_detail_clear(void)
{
    detail[0] = 0;
}

/* Formats into detail, "..." marking a cut; formatted aside first: the arguments may point into
   detail itself. */
static void detail_vset(const char *fmt, va_list ap)
{
    char text[sizeof detail];
    int n = vsnprintf(text, sizeof text, fmt, ap);
    if (n >= (int)sizeof text)
        memcpy(text + sizeof text - 4, "...", 4);
    memcpy(detail, text, sizeof detail);
}

int shoal_error_detail_set(int code, const char *fmt, ...)
{
    if (!fmt) {
        detail[0] = 0;
        return code;
    }
    va_list ap;
    va_start(ap, fmt);
    detail_vset(fmt, ap);
    va_end(ap);
    return code;
}

int shoal_wrong_thread(const char *call, const char *way_in)
{
    shoal_error_detail_set(SHOAL_ETHREAD, "%s: node thread only; from other threads use %s",
                           call ? call : "?", way_in ? way_in : "shoal_system_call");
    shoal_warning("%s", detail);
    return SHOAL_ETHREAD;
}

void shoal_error_detail_log(const char *fmt, ...)
{
    if (!fmt)
        return;
    va_list ap;
    va_start(ap, fmt);
    detail_vset(fmt, ap);
    va_end(ap);
    shoal_error("%s", detail);
}
