/*  log.c — Shoal's logger (ddata.h, Logs): a level, one handler, and the default handler's
    line format. zsys's fixed format ("I: 26-11-25 17:09:00 ...": a two-digit year, no time zone)
    has no hook for an application's own logging, so Shoal formats its own lines.

    The level is an atomic read on every call (a disabled line costs that and nothing else). The
    handler and its argument change under a mutex, which each line also holds while it is handed
    over: a handler replaced in the middle of another thread's line is not called after
    shoal_log_set_handler returns, and the default handler's lines reach stderr whole.

    The default handler writes text or JSON (shoal_log_set_format). JSON's node and module come
    from the convention library lines follow, "NODE: MODULE ...: message" (a node id is
    host:port:uid; MODULE one of `modules` below) or membership's "NODE (leader): ...": a line
    without a node has node "" and all of it as msg; one without a known module, module "".
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
/* set by shoal_log_set_level: a configuration file's level (shoal_log_level_default) then yields */
static atomic_bool level_chosen;
static atomic_int format = SHOAL_LOG_TEXT;
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
    atomic_store(&level_chosen, true);
}

void shoal_log_level_default(shoal_log_level_t l)
{
    if (atomic_load(&level_chosen) || l < SHOAL_LOG_ERROR || l > SHOAL_LOG_DEBUG)
        return;
    atomic_store(&level, (int)l);
}

int shoal_log_set_format(shoal_log_format_t f)
{
    if (f != SHOAL_LOG_TEXT && f != SHOAL_LOG_JSON)
        return SHOAL_EINVAL;
    atomic_store(&format, (int)f);
    return 0;
}

shoal_log_format_t shoal_log_get_format(void)
{
    return (shoal_log_format_t)atomic_load(&format);
}

int shoal_log_format_parse(const char *name, shoal_log_format_t *out)
{
    if (!name || !out)
        return SHOAL_EINVAL;
    if (strcasecmp(name, "text") == 0)
        *out = SHOAL_LOG_TEXT;
    else if (strcasecmp(name, "json") == 0)
        *out = SHOAL_LOG_JSON;
    else
        return SHOAL_EINVAL;
    return 0;
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

/* A node id's shape: host:port:uid, no spaces (shoal_node_make). */
static bool node_like(const char *s, size_t len)
{
    int colons = 0;
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)s[i] <= ' ' || s[i] == '"' || s[i] == '\\')
            return false;
        colons += s[i] == ':';
    }
    return len > 0 && colons >= 2 && s[len - 1] >= '0' && s[len - 1] <= '9';
}

/* The first words of Shoal's lines that name the part of the library speaking. */
static const char *const modules[] = {"replicator", "sharding",  "daemon",     "singleton",
                                      "durable",    "heartbeat", "membership", "cluster",
                                      "resolver",   "gossip",    "peer",       "node"};

/* Splits "NODE: MODULE ...: rest" (or "NODE (MODULE): rest", membership's leader lines) into
   its node, its module (one of `modules`) and the rest; node and module may come back empty. */
static void split_line(const char *msg, const char **node, size_t *node_len, const char **module,
                       size_t *module_len, const char **rest)
{
    *node = *module = *rest = msg;
    *node_len = *module_len = 0;
    size_t id = strcspn(msg, " ");
    const char *m;
    if (id > 1 && msg[id - 1] == ':' && node_like(msg, id - 1)) {
        *node_len = id - 1; /* "NODE: ..." */
        m = msg + id + 1;
        *rest = m;
    } else if (msg[id] == ' ' && msg[id + 1] == '(' && node_like(msg, id)) {
        *node_len = id; /* "NODE (leader): ..." */
        m = msg + id + 2;
        size_t w = strcspn(m, ")");
        if (m[w] == ')' && m[w + 1] == ':' && m[w + 2] == ' ') {
            *module = m;
            *module_len = w;
            *rest = m + w + 3;
        }
        return;
    } else {
        return;
    }
    size_t n = strcspn(m, " :'");
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++)
        if (strlen(modules[i]) == n && strncmp(m, modules[i], n) == 0) {
            *module = m;
            *module_len = n;
        }
}

/* JSON string contents of s[0..len) into out (escaped; control bytes as \u00XX). */
static void json_text(char *out, size_t cap, size_t *at, const char *s, size_t len)
{
    for (size_t i = 0; i < len && *at + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            out[(*at)++] = '\\';
            out[(*at)++] = (char)c;
        } else if (c == '\n') {
            out[(*at)++] = '\\';
            out[(*at)++] = 'n';
        } else if (c < 0x20) {
            *at += (size_t)snprintf(out + *at, cap - *at, "\\u%04x", c);
        } else {
            out[(*at)++] = (char)c;
        }
    }
}

static int format_json(char *line, size_t cap, shoal_log_level_t l, const char *when,
                       const char *msg)
{
    const char *node, *module, *rest;
    size_t node_len, module_len;
    split_line(msg, &node, &node_len, &module, &module_len, &rest);
    size_t at = 0;
    at +=
        (size_t)snprintf(line, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"node\":\"", when, names[l]);
    json_text(line, cap, &at, node, node_len);
    at += (size_t)snprintf(line + at, cap - at, "\",\"module\":\"");
    json_text(line, cap, &at, module, module_len);
    at += (size_t)snprintf(line + at, cap - at, "\",\"msg\":\"");
    /* msg: the rest after "NODE: " (the module stays in the sentence) */
    json_text(line, cap - 4, &at, rest, strlen(rest));
    at += (size_t)snprintf(line + at, cap - at, "\"}\n");
    return (int)at;
}

static void write_default(shoal_log_level_t l, const char *msg)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char when[40];
    shoal_log_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, when, sizeof when);
    /* JSON: a byte of msg may become \u00XX (6), node and module are parts of msg */
    char line[LOG_LINE_MAX * 8 + 256];
    int n;
    if (atomic_load(&format) == SHOAL_LOG_JSON)
        n = format_json(line, sizeof line, l, when, msg);
    else
        n = snprintf(line, sizeof line, "%c: %s %s\n", "EWID"[l], when, msg);
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
