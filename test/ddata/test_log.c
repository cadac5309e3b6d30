/*  test_log.c — Shoal's logger (ddata.h, Logs): info by default (debug lines off), the level
    filter, a handler that receives the lines at and above the level (a node's own lines among
    them), the default handler's line on stderr with an ISO 8601 timestamp and UTC offset, and the
    level names.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ddata.h"

#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pthread_mutex_t mu;
    char lines[64][256];
    shoal_log_level_t levels[64];
    int n;
} sink_t;

static sink_t sink = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void collect(shoal_log_level_t level, const char *message, void *arg)
{
    sink_t *s = arg;
    pthread_mutex_lock(&s->mu);
    if (s->n < 64) {
        snprintf(s->lines[s->n], sizeof s->lines[s->n], "%s", message);
        s->levels[s->n++] = level;
    }
    pthread_mutex_unlock(&s->mu);
}

static bool sink_has(const char *what, shoal_log_level_t *level)
{
    pthread_mutex_lock(&sink.mu);
    bool found = false;
    for (int i = 0; i < sink.n && !found; i++)
        if (strstr(sink.lines[i], what)) {
            found = true;
            if (level)
                *level = sink.levels[i];
        }
    pthread_mutex_unlock(&sink.mu);
    return found;
}

static void sink_reset(void)
{
    pthread_mutex_lock(&sink.mu);
    sink.n = 0;
    pthread_mutex_unlock(&sink.mu);
}

/* Runs before any other test changes the level: the default, with SHOAL_LOG_LEVEL unset. */
static void test_default_is_info(void **state)
{
    (void)state;
    assert_int_equal(shoal_log_get_level(), SHOAL_LOG_INFO);
    shoal_log_set_handler(collect, &sink);
    sink_reset();
    shoal_debug("debug line %d", 1);
    shoal_info("info line %d", 2);
    assert_false(sink_has("debug line 1", NULL));
    assert_true(sink_has("info line 2", NULL));
    shoal_log_set_handler(NULL, NULL);
}

static void test_level_filter(void **state)
{
    (void)state;
    shoal_log_set_handler(collect, &sink);
    sink_reset();
    shoal_log_set_level(SHOAL_LOG_WARNING);
    shoal_debug("d-%s", "a");
    shoal_info("i-%s", "a");
    shoal_warning("w-%s", "a");
    shoal_error("e-%s", "a");
    assert_false(sink_has("d-a", NULL));
    assert_false(sink_has("i-a", NULL));
    shoal_log_level_t l;
    assert_true(sink_has("w-a", &l));
    assert_int_equal(l, SHOAL_LOG_WARNING);
    assert_true(sink_has("e-a", &l));
    assert_int_equal(l, SHOAL_LOG_ERROR);
    shoal_log_set_level(SHOAL_LOG_ERROR);
    shoal_warning("w-%s", "b");
    assert_false(sink_has("w-b", NULL));
    shoal_log_set_level(SHOAL_LOG_DEBUG);
    shoal_debug("d-%s", "c");
    assert_true(sink_has("d-c", &l));
    assert_int_equal(l, SHOAL_LOG_DEBUG);
    shoal_log_set_level(SHOAL_LOG_INFO);
    shoal_log_set_handler(NULL, NULL);
}

static bool started(void *arg)
{
    (void)arg;
    return sink_has("node started at", NULL);
}

/* A node's own lines reach the application's handler. */
static void test_node_lines_reach_handler(void **state)
{
    (void)state;
    shoal_log_set_handler(collect, &sink);
    sink_reset();
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = "tcp://127.0.0.1:0";
    int err = 0;
    shoal_system_t *sys = shoal_system_new(&ss, &err);
    assert_non_null(sys);
    assert_true(started(NULL)); /* logged before shoal_system_new returns */
    shoal_system_destroy(&sys);
    shoal_log_set_handler(NULL, NULL);
}

static void test_timestamp_format(void **state)
{
    (void)state;
    char when[40];
    setenv("TZ", "Europe/Paris", 1);
    tzset();
    shoal_log_time(1795622940123LL, when, sizeof when); /* 2026-11-25T16:09:00.123Z */
    assert_string_equal(when, "2026-11-25T17:09:00.123+01:00");
    setenv("TZ", "America/St_Johns", 1); /* a half-hour offset */
    tzset();
    shoal_log_time(1795622940123LL, when, sizeof when);
    assert_string_equal(when, "2026-11-25T12:39:00.123-03:30");
    setenv("TZ", "UTC", 1);
    tzset();
    shoal_log_time(1795622940123LL, when, sizeof when);
    assert_string_equal(when, "2026-11-25T16:09:00.123+00:00");

    /* the default handler's line on stderr */
    char path[] = "/tmp/shoal-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    dup2(fd, 2);
    shoal_warning("the %s line %d", "default", 7);
    shoal_debug("not this one");
    dup2(saved, 2);
    close(saved);
    char buf[512] = {0};
    assert_true(pread(fd, buf, sizeof buf - 1, 0) > 0);
    close(fd);
    unlink(path);
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^W: [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}"
                             "[+-][0-9]{2}:[0-9]{2} the default line 7\n$",
                             REG_EXTENDED),
                     0);
    if (regexec(&re, buf, 0, NULL, 0) != 0)
        fail_msg("default line not as expected: '%s'", buf);
    regfree(&re);
}

/* --log-format json: one object a line, node and module read off the line's start, quotes,
   backslashes and control bytes escaped. */
static void test_json_format(void **state)
{
    (void)state;
    char path[] = "/tmp/shoal-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    dup2(fd, 2);
    assert_int_equal(shoal_log_set_format(SHOAL_LOG_JSON), 0);
    shoal_warning("127.0.0.1:2552:42: replicator 'r': a \"quoted\" \\ and\ttab");
    shoal_warning("127.0.0.1:2552:42 (leader): 127.0.0.1:2553:7 -> Up");
    shoal_warning("no node here: %d", 3);
    assert_int_equal(shoal_log_set_format(SHOAL_LOG_TEXT), 0);
    dup2(saved, 2);
    close(saved);
    char buf[2048] = {0};
    assert_true(pread(fd, buf, sizeof buf - 1, 0) > 0);
    close(fd);
    unlink(path);
    regex_t re;
    assert_int_equal(
        regcomp(
            &re,
            "^\\{\"ts\":\"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}[+-][0-9]{2}:[0-9]{2}\","
            "\"level\":\"warning\",\"node\":\"127\\.0\\.0\\.1:2552:42\",\"module\":\"replicator\","
            "\"msg\":\"replicator 'r': a \\\\\"quoted\\\\\" \\\\\\\\ and\\\\u0009tab\"\\}\n"
            "\\{[^\n]*\"node\":\"127\\.0\\.0\\.1:2552:42\",\"module\":\"leader\","
            "\"msg\":\"127\\.0\\.0\\.1:2553:7 -> Up\"\\}\n"
            "\\{[^\n]*\"node\":\"\",\"module\":\"\",\"msg\":\"no node here: 3\"\\}\n$",
            REG_EXTENDED),
        0);
    if (regexec(&re, buf, 0, NULL, 0) != 0)
        fail_msg("JSON lines not as expected: '%s'", buf);
    regfree(&re);
    shoal_log_format_t f;
    assert_int_equal(shoal_log_format_parse("JSON", &f), 0);
    assert_int_equal(f, SHOAL_LOG_JSON);
    assert_int_equal(shoal_log_format_parse("xml", &f), SHOAL_EINVAL);
    assert_int_equal(shoal_log_set_format((shoal_log_format_t)7), SHOAL_EINVAL);
}

/* A configuration file's level (shoal/loglevel) applies unless a level was chosen. */
static void test_config_level(void **state)
{
    (void)state;
    int err = 0;
    shoal_config_t *cfg = shoal_config_parse("shoal\n    loglevel = DEBUG\n", &err);
    assert_non_null(cfg);
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    shoal_log_set_level(SHOAL_LOG_WARNING); /* as --log-level warning does */
    assert_int_equal(shoal_config_system(cfg, &ss, NULL, 0), 0);
    assert_int_equal(shoal_log_get_level(), SHOAL_LOG_WARNING); /* the flag wins */
    shoal_config_destroy(&cfg);
    shoal_log_set_level(SHOAL_LOG_INFO);
    assert_null(shoal_config_parse("shoal\n    loglevel = LOUD\n", &err));
    assert_int_equal(err, SHOAL_EINVAL);
}

static void test_level_names(void **state)
{
    (void)state;
    shoal_log_level_t l;
    assert_int_equal(shoal_log_level_parse("debug", &l), 0);
    assert_int_equal(l, SHOAL_LOG_DEBUG);
    assert_int_equal(shoal_log_level_parse("WARN", &l), 0);
    assert_int_equal(l, SHOAL_LOG_WARNING);
    assert_int_equal(shoal_log_level_parse("error", &l), 0);
    assert_int_equal(l, SHOAL_LOG_ERROR);
    assert_int_equal(shoal_log_level_parse("loud", &l), SHOAL_EINVAL);
    assert_int_equal(shoal_log_level_parse(NULL, &l), SHOAL_EINVAL);
    assert_string_equal(shoal_log_level_name(SHOAL_LOG_INFO), "info");
}

int main(void)
{
    unsetenv("SHOAL_LOG_LEVEL");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_is_info),
        cmocka_unit_test(test_level_filter),
        cmocka_unit_test(test_node_lines_reach_handler),
        cmocka_unit_test(test_timestamp_format),
        cmocka_unit_test(test_level_names),
        cmocka_unit_test(test_json_format),
        cmocka_unit_test(test_config_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
