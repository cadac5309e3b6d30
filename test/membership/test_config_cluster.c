/*  test_config_cluster.c — cluster settings from configuration files (shoal_config_cluster).

    The settings struct is initialized here by hand (not with shoal_cluster_settings_default) with
    recognizable values, so the test checks exactly what a file overwrites and what it leaves.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "membership.h"
#include "config_words.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL  "shoal/cluster/"
#define FD  CL "failure-detector/"
#define SBR CL "split-brain-resolver/"

static char err[512];

static const char *const init_seeds[] = {"tcp://10.0.0.1:2552"};
static const char *const init_roles[] = {"init-role"};
static const shoal_role_min_t init_role_min[] = {{"init-role", 9}};

/* Recognizable "defaults", none equal to what the files below set. */
/* Akka's defaults, plus lists the file may replace (their pointers show whether it did). */
static void init(shoal_cluster_settings_t *s)
{
    shoal_cluster_settings_default(s);
    s->seed_nodes = init_seeds;
    s->n_seed_nodes = 1;
    s->roles = init_roles;
    s->n_roles = 1;
    s->role_min = init_role_min;
    s->n_role_min = 1;
}

/* Every field of a and b equal (pointers by identity). */
static void assert_same(const shoal_cluster_settings_t *a, const shoal_cluster_settings_t *b)
{
#define SAME(f) assert_true(a->f == b->f)
    SAME(seed_nodes), SAME(n_seed_nodes), SAME(roles), SAME(n_roles), SAME(app_version);
    SAME(seed_node_timeout_ms), SAME(retry_unsuccessful_join_after_ms);
    SAME(shutdown_after_unsuccessful_join_ms), SAME(min_nr_of_members), SAME(role_min);
    SAME(n_role_min), SAME(gossip_interval_ms), SAME(gossip_different_view_probability);
    SAME(reduce_gossip_different_view_probability), SAME(gossip_time_to_live_ms);
    SAME(leader_actions_interval_ms), SAME(allow_weakly_up_members), SAME(weakly_up_after_ms);
    SAME(heartbeat_interval_ms), SAME(threshold), SAME(max_sample_size);
    SAME(min_std_deviation_ms), SAME(acceptable_heartbeat_pause_ms);
    SAME(expected_response_after_ms), SAME(monitored_by_nr_of_members), SAME(indirect_probes);
    SAME(loop_stall_bound_ms), SAME(heartbeat_endpoint), SAME(sbr_strategy), SAME(sbr_role);
    SAME(stable_after_ms), SAME(down_all_when_unstable_ms), SAME(static_quorum_size);
    SAME(keep_oldest_down_if_alone), SAME(phase_timeout_ms), SAME(system_notify_interval_ms);
    SAME(fence_after_ms), SAME(fence_margin_ms);
#undef SAME
}

/* The config behind the last `with`/`load` result; its strings live until the next one. */
static shoal_config_t *held;

static int release_held(void **state)
{
    (void)state;
    shoal_config_destroy(&held);
    return 0;
}

/* Loads `text` (which must load and fill) over init(). */
static shoal_cluster_settings_t load(const char *text)
{
    shoal_config_destroy(&held);
    held = parse_words(text, err, sizeof err);
    if (!held)
        fail_msg("refused: %s\n%s", err, text);
    shoal_cluster_settings_t s;
    init(&s);
    if (shoal_config_cluster(held, &s, err, sizeof err) != 0)
        fail_msg("fill failed: %s\n%s", err, text);
    assert_string_equal(err, "");
    return s;
}

/* One key under shoal/cluster written as a slash path, e.g. "failure-detector/threshold". */
static void text_with(char *text, size_t cap, const char *key, const char *value)
{
    snprintf(text, cap, "shoal\n    cluster\n        %s = %s\n", key, value);
}

static shoal_cluster_settings_t with(const char *key, const char *value)
{
    char text[1024];
    text_with(text, sizeof text, key, value);
    return load(text);
}

/* The file must be refused at load, or (if it loads) by shoal_config_cluster, with a message
   containing frag1 and frag2; a refused fill must leave the settings alone. */
static void expect_error(const char *text, const char *frag1, const char *frag2)
{
    memset(err, 0, sizeof err);
    shoal_config_t *cfg = parse_words(text, err, sizeof err);
    if (cfg) {
        shoal_cluster_settings_t s, before;
        init(&s);
        init(&before);
        int rc = shoal_config_cluster(cfg, &s, err, sizeof err);
        shoal_config_destroy(&cfg);
        if (rc == 0)
            fail_msg("accepted:\n%s", text);
        assert_int_equal(rc, SHOAL_EINVAL);
        assert_same(&s, &before);
    }
    if (!strstr(err, frag1) || (frag2 && !strstr(err, frag2)))
        fail_msg("error '%s' lacks '%s' / '%s' for:\n%s", err, frag1, frag2 ? frag2 : "", text);
}

static void error_with(const char *key, const char *value, const char *frag2)
{
    char text[1024];
    text_with(text, sizeof text, key, value);
    expect_error(text, key, frag2);
}

static const char full_file[] =
    "#   Every cluster key, none at its default\n"
    "shoal\n"
    "    cluster\n"
    "        seed-nodes = [\"tcp://10.0.0.1:2552\", \"tcp://10.0.0.2:2553\"]\n"
    "        seed-node-timeout = 3 s\n"
    "        retry-unsuccessful-join-after = 4s\n"
    "        shutdown-after-unsuccessful-join-seed-nodes = 30 s\n"
    "        downing-provider-class = org.apache.pekko.cluster.sbr.SplitBrainResolverProvider\n"
    "        allow-weakly-up-members = 9 s\n"
    "        roles = \"backend, frontend\"\n"
    "        role\n"
    "            backend\n"
    "                min-nr-of-members = 2\n"
    "            frontend\n"
    "                min-nr-of-members = 3\n"
    "        app-version = \"1.2.3\"\n"
    "        min-nr-of-members = 4\n"
    "        gossip-interval = 500 ms\n"
    "        gossip-time-to-live = 5 s\n"
    "        leader-actions-interval = 750ms\n"
    "        gossip-different-view-probability = 0.5\n"
    "        reduce-gossip-different-view-probability = 200\n"
    "        failure-detector\n"
    "            implementation-class = org.apache.pekko.remote.PhiAccrualFailureDetector\n"
    "            heartbeat-interval = 2 s\n"
    "            threshold = 12.5\n"
    "            max-sample-size = 200\n"
    "            min-std-deviation = 150 ms\n"
    "            acceptable-heartbeat-pause = 6 s\n"
    "            monitored-by-nr-of-members = 7\n"
    "            expected-response-after = 3 s\n"
    "            indirect-probes = 2\n"
    "            loop-stall-bound = 1 minute\n"
    "            heartbeat-endpoint = \"tcp://10.0.0.1:3000\"\n"
    "        split-brain-resolver\n"
    "            active-strategy = static-quorum\n"
    "            stable-after = 30 s\n"
    "            down-all-when-unstable = 12 s\n"
    "            fence-after = 9 s\n"
    "            fence-margin = 4 s\n"
    "            static-quorum\n"
    "                quorum-size = 3\n"
    "                role = \"backend\"\n"
    "            keep-majority\n"
    "                role = \"km-role\"\n"
    "            keep-oldest\n"
    "                down-if-alone = off\n"
    "                role = \"ko-role\"\n"
    "    coordinated-shutdown\n"
    "        default-phase-timeout = 8 s\n";

static void test_full_file_fills_every_field(void **state)
{
    (void)state;
    shoal_cluster_settings_t s = load(full_file);
    assert_int_equal(s.n_seed_nodes, 2);
    assert_string_equal(s.seed_nodes[0], "tcp://10.0.0.1:2552");
    assert_string_equal(s.seed_nodes[1], "tcp://10.0.0.2:2553");
    assert_int_equal(s.n_roles, 2);
    assert_string_equal(s.roles[0], "backend");
    assert_string_equal(s.roles[1], "frontend");
    assert_string_equal(s.app_version, "1.2.3");
    assert_int_equal(s.seed_node_timeout_ms, 3000);
    assert_int_equal(s.retry_unsuccessful_join_after_ms, 4000);
    assert_int_equal(s.shutdown_after_unsuccessful_join_ms, 30000);
    assert_int_equal(s.min_nr_of_members, 4);
    assert_int_equal(s.n_role_min, 2);
    assert_string_equal(s.role_min[0].role, "backend");
    assert_int_equal(s.role_min[0].min, 2);
    assert_string_equal(s.role_min[1].role, "frontend");
    assert_int_equal(s.role_min[1].min, 3);
    assert_int_equal(s.gossip_interval_ms, 500);
    assert_true(s.gossip_different_view_probability == 0.5);
    assert_int_equal(s.reduce_gossip_different_view_probability, 200);
    assert_int_equal(s.gossip_time_to_live_ms, 5000);
    assert_int_equal(s.leader_actions_interval_ms, 750);
    assert_true(s.allow_weakly_up_members);
    assert_int_equal(s.weakly_up_after_ms, 9000);
    assert_int_equal(s.heartbeat_interval_ms, 2000);
    assert_true(s.threshold == 12.5);
    assert_int_equal(s.max_sample_size, 200);
    assert_int_equal(s.min_std_deviation_ms, 150);
    assert_int_equal(s.acceptable_heartbeat_pause_ms, 6000);
    assert_int_equal(s.expected_response_after_ms, 3000);
    assert_int_equal(s.monitored_by_nr_of_members, 7);
    assert_int_equal(s.indirect_probes, 2);
    assert_int_equal(s.loop_stall_bound_ms, 60000);
    assert_string_equal(s.heartbeat_endpoint, "tcp://10.0.0.1:3000");
    assert_int_equal(s.sbr_strategy, SHOAL_SBR_STATIC_QUORUM);
    assert_string_equal(s.sbr_role, "backend"); /* the active strategy's role */
    assert_int_equal(s.stable_after_ms, 30000);
    assert_int_equal(s.down_all_when_unstable_ms, 12000);
    assert_int_equal(s.fence_after_ms, 9000);
    assert_int_equal(s.fence_margin_ms, 4000);
    assert_int_equal(s.static_quorum_size, 3);
    assert_false(s.keep_oldest_down_if_alone);
    assert_int_equal(s.phase_timeout_ms, 8000);
    assert_int_equal(s.system_notify_interval_ms, 20); /* no key: left alone */
}

/* The same file also loads from disk, and the strings outlive nothing but the config. */
static void test_full_file_from_disk(void **state)
{
    (void)state;
    char path[] = "/tmp/shoal-cluster-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(full_file, f);
    fclose(f);
    shoal_config_t *cfg = load_words(path, err, sizeof err);
    remove(path);
    if (!cfg)
        fail_msg("%s", err);
    shoal_cluster_settings_t s;
    init(&s);
    assert_int_equal(shoal_config_cluster(cfg, &s, err, sizeof err), 0);
    assert_int_equal(s.monitored_by_nr_of_members, 7);
    assert_string_equal(s.role_min[1].role, "frontend");
    /* filling twice gives the same values */
    shoal_cluster_settings_t t;
    init(&t);
    assert_int_equal(shoal_config_cluster(cfg, &t, err, sizeof err), 0);
    assert_int_equal(t.n_role_min, 2);
    assert_int_equal(t.role_min[0].min, 2);
    assert_ptr_equal(t.seed_nodes, s.seed_nodes);
    shoal_config_destroy(&cfg);
}

static void test_durations_in_akka_forms(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint32_t ms;
    } cases[] = {
        {"1 s", 1000},           {"1s", 1000},      {"2 seconds", 2000}, {"500 ms", 500},
        {"500ms", 500},          {"250", 250},      {"1.5 s", 1500},     {"2 minutes", 120000},
        {"1 m", 60000},          {"1 h", 3600000},  {"1 d", 86400000},   {"3000000 us", 3000},
        {"\"750 millis\"", 750}, {"  4 s  ", 4000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shoal_cluster_settings_t s = with("gossip-interval", cases[i].text);
        if (s.gossip_interval_ms != cases[i].ms)
            fail_msg("'%s' gave %u, expected %u", cases[i].text, s.gossip_interval_ms, cases[i].ms);
        s = with("failure-detector/acceptable-heartbeat-pause", cases[i].text);
        assert_int_equal(s.acceptable_heartbeat_pause_ms, cases[i].ms);
    }
    /* off where Akka allows it */
    shoal_cluster_settings_t s = with("shutdown-after-unsuccessful-join-seed-nodes", "off");
    assert_int_equal(s.shutdown_after_unsuccessful_join_ms, 0);
    s = with("shutdown-after-unsuccessful-join-seed-nodes", "20 s");
    assert_int_equal(s.shutdown_after_unsuccessful_join_ms, 20000);
    /* 0 is a legal stable-after (decide at once), a legal pause */
    assert_int_equal(with("split-brain-resolver/stable-after", "0 s").stable_after_ms, 0);
}

/* on / off / a duration, with Akka's meanings. */
static void test_on_off_durations(void **state)
{
    (void)state;
    shoal_cluster_settings_t s = with("allow-weakly-up-members", "off");
    assert_false(s.allow_weakly_up_members);
    assert_int_equal(s.weakly_up_after_ms, 7000); /* untouched */
    s = with("allow-weakly-up-members", "on");
    assert_true(s.allow_weakly_up_members);
    assert_int_equal(s.weakly_up_after_ms, 7000); /* Akka: on = 7 s */
    s = with("allow-weakly-up-members", "15 s");
    assert_true(s.allow_weakly_up_members);
    assert_int_equal(s.weakly_up_after_ms, 15000);
    /* from a caller's off (e.g. fast settings edited), "on" means 7 s again */
    s = with("allow-weakly-up-members", "\"on\"");
    assert_int_equal(s.weakly_up_after_ms, 7000);

    s = with("split-brain-resolver/down-all-when-unstable", "off");
    assert_int_equal(s.down_all_when_unstable_ms, 0);
    s = with("split-brain-resolver/down-all-when-unstable", "on");
    assert_int_equal(s.down_all_when_unstable_ms, -1);
    s = with("split-brain-resolver/down-all-when-unstable", "9 s");
    assert_int_equal(s.down_all_when_unstable_ms, 9000);
}

static void test_unset_settings_keep_the_callers_values(void **state)
{
    (void)state;
    shoal_cluster_settings_t expected;
    init(&expected);
    /* an empty cluster section, and one with only a ddata key, change nothing */
    shoal_cluster_settings_t s = load("shoal\n    cluster\n");
    assert_same(&s, &expected);
    s = load("shoal\n    cluster\n        distributed-data\n            gossip-interval = 3 s\n");
    assert_same(&s, &expected);
    /* one key changes one field */
    s = with("failure-detector/threshold", "10");
    expected.threshold = 10.0;
    assert_same(&s, &expected);
    init(&expected);
    s = with("min-nr-of-members", "3");
    expected.min_nr_of_members = 3;
    assert_same(&s, &expected);
    /* a role for an inactive strategy is not applied */
    init(&expected);
    s = with("split-brain-resolver/keep-oldest/role", "\"x\"");
    assert_same(&s, &expected);
}

static void test_unknown_cluster_keys_are_refused_by_name(void **state)
{
    (void)state;
    error_with("gossip-intervall", "1 s", "unknown setting " CL "gossip-intervall");
    error_with("failure-detector/treshold", "8", "unknown setting " FD "treshold");
    error_with("split-brain-resolver/keep-majority/quorum-size", "2",
               "unknown setting " SBR "keep-majority/quorum-size");
    error_with("role/backend/max-nr-of-members", "2",
               "unknown setting " CL "role/backend/max-nr-of-members");
    error_with("split-brain-resolver/lease-majority/lease-name", "x", "unknown setting");
    expect_error("shoal\n    coordinated-shutdown\n        exit-jvm = on\n",
                 "unknown setting shoal/coordinated-shutdown/exit-jvm", NULL);
    /* Akka's dotted form inside a role section: say how to write it */
    expect_error("shoal\n    cluster\n        role\n            backend.min-nr-of-members = 2\n",
                 CL "role/backend.min-nr-of-members", "not '.'");
    /* a role section is a section */
    error_with("role/backend", "2", "is a section");
    error_with("failure-detector", "2", "is a section");
}

static void test_bad_values_are_refused_by_key(void **state)
{
    (void)state;
    error_with("failure-detector/threshold", "0", "more than zero");
    error_with("failure-detector/threshold", "abc", "not a number");
    error_with("failure-detector/threshold", "-1", "not a number");
    error_with("failure-detector/threshold", "8.", "not a number");
    error_with("gossip-different-view-probability", "1.5", "at most 1");
    error_with("gossip-different-view-probability", "2", "at most 1");
    error_with("failure-detector/monitored-by-nr-of-members", "0", "more than zero");
    error_with("failure-detector/max-sample-size", "0", "more than zero");
    error_with("failure-detector/max-sample-size", "4294967296", "too large");
    error_with("min-nr-of-members", "0", "more than zero");
    error_with("min-nr-of-members", "two", "whole number");
    error_with("gossip-interval", "0 s", "more than zero");
    error_with("gossip-interval", "off", "not a duration");
    error_with("gossip-interval", "2 fortnights", "not a duration");
    error_with("gossip-interval", "50 days", "too large");
    error_with("retry-unsuccessful-join-after", "0", "more than zero");
    error_with("allow-weakly-up-members", "maybe", "on nor off");
    error_with("allow-weakly-up-members", "0 s", "more than zero");
    error_with("split-brain-resolver/down-all-when-unstable", "yes please", "on nor off");
    error_with("split-brain-resolver/active-strategy", "lease-majority",
               "keep-majority, keep-oldest, static-quorum, down-all, off");
    error_with("split-brain-resolver/keep-oldest/down-if-alone", "maybe", "not a boolean");
    error_with("seed-nodes", "\"pekko://sys@host:2552\"", "not an endpoint");
    error_with("seed-nodes", "\"tcp://host\"", "not an endpoint");
    error_with("seed-nodes", "\"tcp://host:0\"", "not an endpoint");
    error_with("seed-nodes", "\"tcp://a:1,,tcp://b:2\"", "empty");
    error_with("failure-detector/heartbeat-endpoint", "\"udp://x:1\"", "not a tcp:// endpoint");
    error_with("app-version", "\"\"", "empty");
    error_with("role/backend/min-nr-of-members", "-1", "whole number");
    error_with("gossip-interval", "1 s\n        gossip-interval = 2 s", "set twice");
    /* static-quorum needs a quorum size */
    error_with("split-brain-resolver/active-strategy", "static-quorum",
               SBR "static-quorum/quorum-size");
    error_with("split-brain-resolver/active-strategy",
               "static-quorum\n        split-brain-resolver/static-quorum/quorum-size = 0",
               "at least 1");
}

static void test_role_sections(void **state)
{
    (void)state;
    /* nested and slash forms, several roles, a name with dashes and digits */
    shoal_cluster_settings_t s = load("shoal\n"
                                      "    cluster\n"
                                      "        role\n"
                                      "            backend\n"
                                      "                min-nr-of-members = 2\n"
                                      "            web-2\n"
                                      "                min-nr-of-members = 0\n"
                                      "        role/analytics/min-nr-of-members = 5\n");
    assert_int_equal(s.n_role_min, 3);
    assert_string_equal(s.role_min[0].role, "backend");
    assert_int_equal(s.role_min[0].min, 2);
    assert_string_equal(s.role_min[1].role, "web-2");
    assert_int_equal(s.role_min[1].min, 0);
    assert_string_equal(s.role_min[2].role, "analytics");
    assert_int_equal(s.role_min[2].min, 5);
    /* no role section: the caller's array stays */
    s = with("min-nr-of-members", "2");
    assert_ptr_equal(s.role_min, init_role_min);
    assert_int_equal(s.n_role_min, 1);
    /* the same role twice is refused */
    expect_error("shoal\n    cluster\n        role/a/min-nr-of-members = 1\n"
                 "        role\n            a\n                min-nr-of-members = 2\n",
                 CL "role/a/min-nr-of-members", "set twice");
    /* the getters see the names and values */
    const char *const *names = NULL;
    assert_int_equal(shoal_config_sections(held, CL "role", &names), 0);
    assert_null(names);
    load("shoal\n    cluster\n        role/x/min-nr-of-members = 4\n"
         "        role/y/min-nr-of-members = 6\n");
    assert_int_equal(shoal_config_sections(held, CL "role", &names), 2);
    assert_string_equal(names[0], "x");
    assert_string_equal(names[1], "y");
    uint64_t v = 0;
    assert_int_equal(shoal_config_uint(held, CL "role/y/min-nr-of-members", &v, err, sizeof err),
                     1);
    assert_int_equal(v, 6);
    assert_int_equal(shoal_config_uint(held, CL "role/z/min-nr-of-members", &v, err, sizeof err),
                     0);
    assert_int_equal(v, 6);
}

static void test_seed_nodes_and_roles_lists(void **state)
{
    (void)state;
    shoal_cluster_settings_t s =
        with("seed-nodes", "\"tcp://a:1, tcp://[::1]:2, tcp://b.c:65535\"");
    assert_int_equal(s.n_seed_nodes, 3);
    assert_string_equal(s.seed_nodes[0], "tcp://a:1");
    assert_string_equal(s.seed_nodes[1], "tcp://[::1]:2");
    assert_string_equal(s.seed_nodes[2], "tcp://b.c:65535");
    s = with("seed-nodes", "[\"tcp://127.0.0.1:2551\"]");
    assert_int_equal(s.n_seed_nodes, 1);
    assert_string_equal(s.seed_nodes[0], "tcp://127.0.0.1:2551");
    /* an empty list overrides the caller's seeds: wait for a join call */
    s = with("seed-nodes", "[]");
    assert_int_equal(s.n_seed_nodes, 0);
    assert_null(s.seed_nodes);
    s = with("roles", "[\"a\", 'b', c]");
    assert_int_equal(s.n_roles, 3);
    assert_string_equal(s.roles[0], "a");
    assert_string_equal(s.roles[1], "b");
    assert_string_equal(s.roles[2], "c");
    s = with("roles", "\"\"");
    assert_int_equal(s.n_roles, 0);
    assert_null(s.roles);
}

static void test_strategy_and_its_role(void **state)
{
    (void)state;
    static const struct {
        const char *word;
        shoal_sbr_strategy_t strategy;
    } cases[] = {
        {"keep-majority", SHOAL_SBR_KEEP_MAJORITY},
        {"keep-oldest", SHOAL_SBR_KEEP_OLDEST},
        {"down-all", SHOAL_SBR_DOWN_ALL},
        {"off", SHOAL_SBR_OFF},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(with("split-brain-resolver/active-strategy", cases[i].word).sbr_strategy,
                         cases[i].strategy);
    shoal_cluster_settings_t s = load("shoal\n    cluster\n        split-brain-resolver\n"
                                      "            active-strategy = keep-oldest\n"
                                      "            keep-majority/role = km\n"
                                      "            keep-oldest/role = ko\n");
    assert_int_equal(s.sbr_strategy, SHOAL_SBR_KEEP_OLDEST);
    assert_string_equal(s.sbr_role, "ko");
    /* no active-strategy in the file: the caller's (keep-majority) picks the role */
    s = with("split-brain-resolver/keep-majority/role", "km");
    assert_string_equal(s.sbr_role, "km");
    /* an empty role means every member */
    s = with("split-brain-resolver/keep-majority/role", "\"\"");
    assert_null(s.sbr_role);
    /* down-all takes no role */
    s = load("shoal\n    cluster\n        split-brain-resolver\n"
             "            active-strategy = down-all\n"
             "            keep-majority/role = km\n");
    assert_null(s.sbr_role);
}

static void test_generic_getters(void **state)
{
    (void)state;
    load(full_file);
    assert_string_equal(shoal_config_get(held, SBR "active-strategy"), "static-quorum");
    assert_string_equal(shoal_config_get(held, CL "gossip-interval"), "500 ms");
    assert_string_equal(shoal_config_get(held, CL "app-version"), "1.2.3");
    assert_null(shoal_config_get(held, CL "distributed-data/gossip-interval")); /* not set */
    assert_null(shoal_config_get(held, CL "no-such-key"));
    uint64_t v = 7;
    double d = 0;
    bool b = true;
    assert_int_equal(shoal_config_duration(held, CL "gossip-interval", &v, err, sizeof err), 1);
    assert_int_equal(v, 500);
    assert_int_equal(shoal_config_double(held, FD "threshold", &d, err, sizeof err), 1);
    assert_true(d == 12.5);
    assert_int_equal(shoal_config_bool(held, SBR "keep-oldest/down-if-alone", &b, err, sizeof err),
                     1);
    assert_false(b);
    const char *const *items = NULL;
    size_t n = 0;
    assert_int_equal(shoal_config_list(held, CL "roles", &items, &n, err, sizeof err), 1);
    assert_int_equal(n, 2);
    /* asking for the wrong kind, or a path that is no key, names the key */
    v = 7;
    assert_int_equal(shoal_config_duration(held, FD "threshold", &v, err, sizeof err),
                     SHOAL_EINVAL);
    assert_non_null(strstr(err, FD "threshold: not a duration"));
    assert_int_equal(v, 7);
    assert_int_equal(shoal_config_uint(held, CL "nope", &v, err, sizeof err), SHOAL_EINVAL);
    assert_non_null(strstr(err, CL "nope: no such setting"));
    /* "on" is not a duration: the caller checks shoal_config_get first */
    load("shoal\n    cluster\n        allow-weakly-up-members = on\n");
    assert_int_equal(shoal_config_duration(held, CL "allow-weakly-up-members", &v, err, sizeof err),
                     SHOAL_EINVAL);
    /* allocations live with the config (ASan reports a leak otherwise) */
    char *p = shoal_config_alloc(held, 100);
    assert_non_null(p);
    assert_int_equal(p[99], 0);
    assert_int_equal(shoal_config_cluster(NULL, NULL, err, sizeof err), SHOAL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_full_file_fills_every_field, release_held),
        cmocka_unit_test_teardown(test_full_file_from_disk, release_held),
        cmocka_unit_test_teardown(test_durations_in_akka_forms, release_held),
        cmocka_unit_test_teardown(test_on_off_durations, release_held),
        cmocka_unit_test_teardown(test_unset_settings_keep_the_callers_values, release_held),
        cmocka_unit_test_teardown(test_unknown_cluster_keys_are_refused_by_name, release_held),
        cmocka_unit_test_teardown(test_bad_values_are_refused_by_key, release_held),
        cmocka_unit_test_teardown(test_role_sections, release_held),
        cmocka_unit_test_teardown(test_seed_nodes_and_roles_lists, release_held),
        cmocka_unit_test_teardown(test_strategy_and_its_role, release_held),
        cmocka_unit_test_teardown(test_generic_getters, release_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
