/*  test_config_sharding.c — sharding settings from configuration files (shoal_config_sharding).

    The settings struct is initialized here by hand (not with shoal_sharding_settings_default)
    with recognizable values, none equal to what the files below set, so the test checks exactly
    what a file overwrites and what it leaves.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>

#include "sharding.h"
#include "config_words.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL   "shoal/cluster/"
#define SH   CL "sharding/"
#define PASS SH "passivation/"

static char err[512];

static void shard_id_fn(const char *entity_id, uint32_t n, char *out, void *arg)
{
    (void)entity_id, (void)n, (void)arg;
    out[0] = '\0';
}

static const char stop_msg[] = "stop";
static int alloc_arg, shard_id_arg;

static void init(shoal_sharding_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->role = "init-role";
    s->number_of_shards = 1001;
    s->buffer_size = 100001;
    s->retry_interval_ms = 2001;
    s->handoff_timeout_ms = 60001;
    s->shard_start_timeout_ms = 10001;
    s->rebalance_interval_ms = 10001;
    s->waiting_for_state_timeout_ms = 2001;
    s->updating_state_timeout_ms = 5001;
    s->shard_region_query_timeout_ms = 3001;
    s->write_majority_plus = 31;
    s->read_majority_plus = 51;
    s->majority_min_cap = 51;
    s->down_removal_margin_ms = 11;
    s->allocation.kind = SHOAL_ALLOC_CUSTOM;
    s->allocation.rebalance_absolute_limit = 21;
    s->allocation.rebalance_relative_limit = 0.11;
    s->allocation.rebalance_threshold = 11;
    s->allocation.max_simultaneous_rebalance = 31;
    s->allocation.hashing_rebalance_limit = 71;
    s->allocation.custom.arg = &alloc_arg;
    s->stop_message = stop_msg;
    s->stop_message_len = sizeof stop_msg;
    s->shard_id = shard_id_fn;
    s->shard_id_arg = &shard_id_arg;
    s->recovery_frequency_ms = 101;
    s->recovery_number_of_entities = 51;
    s->shard_failure_backoff_ms = 10001;
    s->entity_restart_backoff_ms = 10002;
    s->passivation.policy = SHOAL_PASSIVATE_MRU;
    s->passivation.idle_timeout_ms = 120001;
    s->passivation.idle_interval_ms = 7;
    s->passivation.active_entity_limit = 9;
    s->passivation.window_proportion = 0.5;
    s->passivation.stop_timeout_ms = 10003;
}

/* Every field of a and b equal (pointers by identity). */
static void assert_same(const shoal_sharding_settings_t *a, const shoal_sharding_settings_t *b)
{
#define SAME(f) assert_true(a->f == b->f)
    SAME(role), SAME(number_of_shards), SAME(buffer_size), SAME(retry_interval_ms);
    SAME(handoff_timeout_ms), SAME(shard_start_timeout_ms), SAME(rebalance_interval_ms);
    SAME(waiting_for_state_timeout_ms), SAME(updating_state_timeout_ms);
    SAME(shard_region_query_timeout_ms), SAME(write_majority_plus), SAME(read_majority_plus);
    SAME(majority_min_cap), SAME(down_removal_margin_ms), SAME(allocation.kind);
    SAME(allocation.rebalance_absolute_limit), SAME(allocation.rebalance_relative_limit);
    SAME(allocation.rebalance_threshold), SAME(allocation.max_simultaneous_rebalance);
    SAME(allocation.hashing_rebalance_limit), SAME(allocation.custom.allocate);
    SAME(allocation.custom.rebalance), SAME(allocation.custom.arg), SAME(stop_message);
    SAME(stop_message_len), SAME(shard_id), SAME(shard_id_arg), SAME(entity_id);
    SAME(entity_id_arg), SAME(replicator), SAME(entity_state), SAME(state_write_timeout_ms);
    SAME(state_write_all), SAME(state_write_majority_plus), SAME(state_tombstone_ttl_ms);
    SAME(remember_entities), SAME(recovery_constant_rate), SAME(recovery_frequency_ms);
    SAME(recovery_number_of_entities), SAME(shard_failure_backoff_ms);
    SAME(entity_restart_backoff_ms), SAME(replicator_settings);
    SAME(passivation.policy), SAME(passivation.idle_timeout_ms), SAME(passivation.idle_interval_ms);
    SAME(passivation.active_entity_limit), SAME(passivation.slru_levels);
    for (size_t i = 0; i < 4; i++)
        SAME(passivation.slru_proportions[i]);
    SAME(passivation.lfu_dynamic_aging), SAME(passivation.window_proportion);
    SAME(passivation.window_min_proportion), SAME(passivation.window_max_proportion);
    SAME(passivation.hill_climbing), SAME(passivation.adjust_multiplier);
    SAME(passivation.initial_step), SAME(passivation.restart_threshold);
    SAME(passivation.step_decay), SAME(passivation.stop_timeout_ms);
#undef SAME
}

/* The config behind the last `load`/`with` result; its strings live until the next one. */
static shoal_config_t *held;

static int release_held(void **state)
{
    (void)state;
    shoal_config_destroy(&held);
    return 0;
}

/* Loads `text` (which must load and fill) over init(). */
static shoal_sharding_settings_t load(const char *text)
{
    shoal_config_destroy(&held);
    held = parse_words(text, err, sizeof err);
    if (!held)
        fail_msg("refused: %s\n%s", err, text);
    shoal_sharding_settings_t s;
    init(&s);
    if (shoal_config_sharding(held, &s, err, sizeof err) != 0)
        fail_msg("fill failed: %s\n%s", err, text);
    assert_string_equal(err, "");
    return s;
}

/* One key under shoal/cluster/sharding written as a slash path, e.g. "coordinator-state/x". */
static void text_with(char *text, size_t cap, const char *key, const char *value)
{
    snprintf(text, cap, "shoal\n    cluster\n        sharding\n            %s = %s\n", key, value);
}

static shoal_sharding_settings_t with(const char *key, const char *value)
{
    char text[1024];
    text_with(text, sizeof text, key, value);
    return load(text);
}

/* The file must be refused at load, or (if it loads) by shoal_config_sharding, with a message
   containing frag1 and frag2; a refused fill must leave the settings alone. */
static void expect_error(const char *text, const char *frag1, const char *frag2)
{
    memset(err, 0, sizeof err);
    shoal_config_t *cfg = parse_words(text, err, sizeof err);
    if (cfg) {
        shoal_sharding_settings_t s, before;
        init(&s);
        init(&before);
        int rc = shoal_config_sharding(cfg, &s, err, sizeof err);
        shoal_config_destroy(&cfg);
        if (rc == 0)
            fail_msg("accepted:\n%s", text);
        assert_int_equal(rc, SHOAL_EINVAL);
        assert_same(&s, &before);
    }
    if (!strstr(err, frag1) || (frag2 && !strstr(err, frag2)))
        fail_msg("error '%s' lacks '%s' / '%s' for:\n%s", err, frag1, frag2 ? frag2 : "", text);
}

/* A bad value of a sharding key: the message names the full path (and frag2). */
static void error_with(const char *key, const char *value, const char *frag2)
{
    char text[1024], path[256];
    text_with(text, sizeof text, key, value);
    snprintf(path, sizeof path, SH "%s", key);
    expect_error(text, path, frag2);
}

static const char full_file[] =
    "#   Every key that has a settings field, none at its default or init() value\n"
    "shoal\n"
    "    cluster\n"
    "        down-removal-margin = 7 s\n"
    "        sharding\n"
    "            number-of-shards = 120\n"
    "            role = \"backend\"\n"
    "            retry-interval = 300 ms\n"
    "            buffer-size = 5000\n"
    "            handoff-timeout = 20 s\n"
    "            shard-start-timeout = 4s\n"
    "            rebalance-interval = 2 minutes\n"
    "            least-shard-allocation-strategy\n"
    "                rebalance-absolute-limit = 10\n"
    "                rebalance-relative-limit = 0.25\n"
    "                rebalance-threshold = 2\n"
    "                max-simultaneous-rebalance = 4\n"
    "            waiting-for-state-timeout = 1500ms\n"
    "            updating-state-timeout = 3 s\n"
    "            shard-region-query-timeout = 2 s\n"
    "            coordinator-state\n"
    "                write-majority-plus = 2\n"
    "                read-majority-plus = all\n"
    "            distributed-data\n"
    "                majority-min-cap = 3\n"
    "            allocation-strategy = consistent-hashing\n"
    "            consistent-hashing-allocation-strategy\n"
    "                rebalance-limit = 6\n"
    "            entity-state\n"
    "                enabled = on\n"
    "                write-timeout = 7 s\n"
    "                write-all = on\n"
    "                write-majority-plus = 2\n"
    "                tombstone-ttl = 2 d\n"
    "            remember-entities = on\n"
    "            shard-failure-backoff = 3 s\n"
    "            entity-restart-backoff = 4 s\n"
    "            entity-recovery-strategy = constant\n"
    "            entity-recovery-constant-rate-strategy\n"
    "                frequency = 250 ms\n"
    "                number-of-entities = 12\n"
    "            passivation\n"
    "                stop-timeout = 6 s\n";

static void test_full_file_fills_every_field(void **state)
{
    (void)state;
    shoal_sharding_settings_t s = load(full_file);
    shoal_sharding_settings_t expected;
    init(&expected);
    expected.role = s.role; /* owned by the config: compared as a string below */
    assert_string_equal(s.role, "backend");
    expected.number_of_shards = 120;
    expected.buffer_size = 5000;
    expected.retry_interval_ms = 300;
    expected.handoff_timeout_ms = 20000;
    expected.shard_start_timeout_ms = 4000;
    expected.rebalance_interval_ms = 120000;
    expected.waiting_for_state_timeout_ms = 1500;
    expected.updating_state_timeout_ms = 3000;
    expected.shard_region_query_timeout_ms = 2000;
    expected.write_majority_plus = 2;
    expected.read_majority_plus = UINT32_MAX;
    expected.majority_min_cap = 3;
    expected.down_removal_margin_ms = 7000;
    expected.allocation.kind = SHOAL_ALLOC_CONSISTENT_HASHING;
    expected.allocation.rebalance_absolute_limit = 10;
    expected.allocation.rebalance_relative_limit = 0.25;
    expected.allocation.rebalance_threshold = 2;
    expected.allocation.max_simultaneous_rebalance = 4;
    expected.allocation.hashing_rebalance_limit = 6;
    expected.entity_state = true;
    expected.state_write_timeout_ms = 7000;
    expected.state_write_all = true;
    expected.state_write_majority_plus = 2;
    expected.state_tombstone_ttl_ms = 2u * 24 * 3600 * 1000;
    expected.remember_entities = true;
    expected.shard_failure_backoff_ms = 3000;
    expected.entity_restart_backoff_ms = 4000;
    expected.recovery_constant_rate = true;
    expected.recovery_frequency_ms = 250;
    expected.recovery_number_of_entities = 12;
    expected.passivation.stop_timeout_ms = 6000; /* no strategy key: the rest is the caller's */
    assert_same(&s, &expected);

    /* the same file from disk; filling twice gives the same values */
    char path[] = "/tmp/shoal-sharding-XXXXXX";
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
    shoal_sharding_settings_t t;
    for (int i = 0; i < 2; i++) {
        init(&t);
        assert_int_equal(shoal_config_sharding(cfg, &t, err, sizeof err), 0);
        expected.role = t.role;
        assert_same(&t, &expected);
    }
    shoal_config_destroy(&cfg);
}

static void test_unset_settings_keep_the_callers_values(void **state)
{
    (void)state;
    shoal_sharding_settings_t expected;
    init(&expected);
    /* no sharding section, an empty one, and one with only keys that have no field */
    shoal_sharding_settings_t s = load("shoal\n    cluster\n        gossip-interval = 2 s\n");
    assert_same(&s, &expected);
    s = load("shoal\n    cluster\n        sharding\n");
    assert_same(&s, &expected);
    s = load("shoal\n"
             "    cluster\n"
             "        sharding\n"
             "            guardian-name = sharding\n"
             "            use-dispatcher = x\n"
             "            coordinator-failure-backoff = 3 s\n"
             "            distributed-data\n"
             "                name = repl\n"
             "                role = other\n"
             "                use-dispatcher = x\n"
             "                serializer-cache-time-to-live = 3 s\n"
             "                log-data-size-exceeding = 1 KiB\n"
             "                durable/lmdb/dir = elsewhere\n");
    assert_same(&s, &expected);
    /* distributed-data's keys that sharding overrides do not reach sharding's replicator */
    s = load("shoal\n"
             "    cluster\n"
             "        distributed-data\n"
             "            gossip-interval = 7 s\n"
             "            delta-interval = 1 s\n"
             "            notify-subscribers-interval = 1 s\n"
             "            max-delta-elements = 100\n"
             "            prefer-oldest = off\n"
             "            role = other\n"
             "            durable/keys = counters\n");
    assert_same(&s, &expected);
}

static void test_min_cap_is_sharding_only(void **state)
{
    (void)state;
    /* majority-min-cap belongs to sharding's replicator only: Akka's distributed-data section
       has no such key */
    expect_error("shoal\n    cluster\n        distributed-data\n            majority-min-cap = 9\n",
                 "unknown setting " CL "distributed-data/majority-min-cap", NULL);
}

static void test_one_key_changes_one_field(void **state)
{
    (void)state;
    shoal_sharding_settings_t expected;
    init(&expected);
    shoal_sharding_settings_t s = with("buffer-size", "7");
    expected.buffer_size = 7;
    assert_same(&s, &expected);
    init(&expected);
    s = with("role", "\"\"");
    assert_string_equal(s.role, ""); /* every member */
    expected.role = s.role;
    assert_same(&s, &expected);
    /* down-removal-margin: off is 0 (the split-brain resolver's stable-after) */
    init(&expected);
    s = load("shoal\n    cluster\n        down-removal-margin = off\n");
    expected.down_removal_margin_ms = 0;
    assert_same(&s, &expected);
    s = load("shoal\n    cluster\n        down-removal-margin = 30s\n");
    assert_int_equal(s.down_removal_margin_ms, 30000);
    /* each allocation strategy word */
    assert_int_equal(with("allocation-strategy", "least-shards").allocation.kind,
                     SHOAL_ALLOC_LEAST_SHARDS);
    assert_int_equal(with("allocation-strategy", "external").allocation.kind, SHOAL_ALLOC_EXTERNAL);
    assert_int_equal(with("allocation-strategy", "consistent-hashing").allocation.kind,
                     SHOAL_ALLOC_CONSISTENT_HASHING);
    /* the bounds themselves are accepted */
    assert_true(with("least-shard-allocation-strategy/rebalance-relative-limit", "1")
                    .allocation.rebalance_relative_limit == 1.0);
    assert_int_equal(with("number-of-shards", "1").number_of_shards, 1);
    assert_int_equal(with("number-of-shards", "4294967295").number_of_shards, UINT32_MAX);
    assert_int_equal(with("distributed-data/majority-min-cap", "0").majority_min_cap, 0);
    assert_int_equal(with("least-shard-allocation-strategy/rebalance-absolute-limit", "0")
                         .allocation.rebalance_absolute_limit,
                     0);
}

static void test_majority_plus_all(void **state)
{
    (void)state;
    shoal_sharding_settings_t s = with("coordinator-state/write-majority-plus", "all");
    assert_int_equal(s.write_majority_plus, UINT32_MAX);
    assert_int_equal(s.read_majority_plus, 51); /* untouched */
    s = with("coordinator-state/read-majority-plus", "\"all\"");
    assert_int_equal(s.read_majority_plus, UINT32_MAX);
    s = with("coordinator-state/read-majority-plus", "0");
    assert_int_equal(s.read_majority_plus, 0);
    s = with("coordinator-state/write-majority-plus", "4294967294");
    assert_int_equal(s.write_majority_plus, UINT32_MAX - 1);
    const char *key = "coordinator-state/write-majority-plus";
    error_with(key, "4294967295", "too large");
    error_with(key, "99999999999999999999999", "too large");
    error_with(key, "-1", "not a whole number nor all");
    error_with(key, "ALL", "not a whole number nor all");
    error_with(key, "3 nodes", "not a whole number nor all");
    error_with(key, "\"\"", "not a whole number nor all");
    error_with("coordinator-state/read-majority-plus", "most", "'most'");
}

static void test_bad_values_are_refused_by_key(void **state)
{
    (void)state;
    error_with("number-of-shards", "0", "more than zero");
    error_with("number-of-shards", "4294967296", "too large");
    error_with("number-of-shards", "-5", "not a whole number");
    error_with("buffer-size", "0", "more than zero");
    error_with("buffer-size", "lots", "not a whole number");
    error_with("retry-interval", "0", "more than zero");
    error_with("retry-interval", "fast", "not a duration");
    error_with("handoff-timeout", "off", "not a duration");
    error_with("rebalance-interval", "50 d", "too large"); /* above 2^32 ms */
    error_with("shard-region-query-timeout", "1.5 us", "whole number of milliseconds");
    error_with("least-shard-allocation-strategy/rebalance-relative-limit", "0", "more than zero");
    error_with("least-shard-allocation-strategy/rebalance-relative-limit", "1.5", "too large");
    error_with("least-shard-allocation-strategy/rebalance-relative-limit", "-0.1", "not a number");
    error_with("least-shard-allocation-strategy/rebalance-threshold", "0", "more than zero");
    error_with("least-shard-allocation-strategy/rebalance-absolute-limit", "ten", NULL);
    error_with("distributed-data/majority-min-cap", "-1", "not a whole number");
    error_with("allocation-strategy", "random",
               "not one of least-shards, consistent-hashing, external");
    error_with("consistent-hashing-allocation-strategy/rebalance-limit", "x", NULL);
    error_with("state-store-mode", "memory", "not one of ddata, persistence");
    error_with("remember-entities-store", "journal", "not one of ddata, eventsourced");
    error_with("remember-entities", "maybe", "not a boolean");
    error_with("entity-recovery-strategy", "some", "not one of all, constant");
    error_with("coordinator-singleton/hand-over-retry-interval", "0s", "more than zero");
    error_with("distributed-data/gossip-interval", "0", "more than zero");
    error_with("distributed-data/durable/keys", "\"a*b\"", "'*' may only end a key");
    error_with("distributed-data/max-delta-elements", "0", "more than zero");
    error_with("healthcheck/timeout", "soon", "not a duration");
    /* Shoal cannot take a lease: asking for one is refused, not ignored */
    error_with("use-lease", "\"pekko.coordination.lease.kubernetes\"", "leases are not supported");
    error_with("coordinator-singleton/use-lease", "my-lease", "leases are not supported");
    expect_error("shoal\n    cluster\n        down-removal-margin = soon\n",
                 CL "down-removal-margin", "not a duration nor off");
    /* passivation: the values' forms and the strategy's name */
    error_with("passivation/strategy", "lru-strategy", "not off, none, default-idle-strategy");
    error_with("passivation/strategy", "\"\"", "not off, none");
    error_with("passivation/default-strategy/active-entity-limit", "0", "off disables it");
    error_with("passivation/default-strategy/replacement/policy", "lru",
               "not one of least-recently-used, most-recently-used, least-frequently-used");
    error_with("passivation/default-strategy/admission/frequency-sketch/counter-bits", "3",
               "not one of 2, 4, 8, 16, 32, 64");
    error_with("passivation/default-strategy/admission/window/maximum-proportion", "1.1",
               "too large");
    error_with("passivation/default-idle-strategy/idle-entity/timeout", "0 s", "more than zero");
    error_with("passivation/default-strategy/replacement/least-recently-used/segmented/proportions",
               "[0.2, 1.5]", "'1.5' is not a proportion");
    error_with("passivation/my-strategy/admission/window/least-recently-used/segmented/proportions",
               "\"0.5, half\"", "'half' is not a proportion");
    /* Akka's "none" is written off here, and an interval of "default" is left out; both are
       refused with the key's name rather than read as something else */
    error_with("passivation/strategy-defaults/idle-entity/timeout", "none", "nor off");
    error_with("passivation/strategy-defaults/idle-entity/interval", "default", "not a duration");
}

static void test_unknown_sharding_keys_are_refused_by_name(void **state)
{
    (void)state;
    static const char *const keys[] = {
        "number-of-shard",
        "rebalance-limit",
        "least-shard-allocation-strategy/rebalance-limit",
        "coordinator-state/write-majority",
        "distributed-data/majority-min-caps",
        "distributed-data/durable/lmdb/size",
        "coordinator-singleton/buffer-size",
        "passivation/default-strategy/active-entity-limits",
        "passivation/default-strategy/replacement/least-recently-used/levels",
        "consistent-hashing-allocation-strategy/rebalance-absolute-limit",
        "healthcheck/name",
        "external-shard-allocation-strategy/timeout",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char text[1024], msg[256];
        text_with(text, sizeof text, keys[i], "1");
        snprintf(msg, sizeof msg, "unknown setting " SH "%s", keys[i]);
        expect_error(text, msg, NULL);
    }
    /* a setting written where a section is, and the other way round */
    expect_error("shoal\n    cluster\n        sharding\n            coordinator-state = 3\n",
                 SH "coordinator-state is a section", NULL);
    expect_error("shoal\n    cluster\n        sharding\n            buffer-size\n"
                 "                x = 1\n",
                 SH "buffer-size is a setting, not a section", NULL);
}

/* Akka's reference section, every key, as a ZPL file: the defaults Akka ships ("none" written
   off, the interval "default" left out). It loads, and fills Akka's values. */
static const char reference_file[] =
    "shoal\n"
    "    cluster\n"
    "        down-removal-margin = off\n"
    "        sharding\n"
    "            number-of-shards = 1000\n"
    "            guardian-name = sharding\n"
    "            role = \"\"\n"
    "            remember-entities = off\n"
    "            remember-entities-store = \"ddata\"\n"
    "            passivate-idle-entity-after = off\n"
    "            passivation\n"
    "                strategy = \"default-idle-strategy\"\n"
    "                stop-timeout = 10s\n"
    "                default-idle-strategy\n"
    "                    idle-entity/timeout = 120s\n"
    "                default-strategy\n"
    "                    active-entity-limit = 100000\n"
    "                    admission\n"
    "                        window\n"
    "                            policy = least-recently-used\n"
    "                            optimizer = hill-climbing\n"
    "                        filter = frequency-sketch\n"
    "                    replacement\n"
    "                        policy = least-recently-used\n"
    "                        least-recently-used\n"
    "                            segmented\n"
    "                                levels = 2\n"
    "                                proportions = [0.2, 0.8]\n"
    "                strategy-defaults\n"
    "                    idle-entity\n"
    "                        timeout = off\n"
    "                    active-entity-limit = off\n"
    "                    replacement\n"
    "                        policy = none\n"
    "                        least-recently-used\n"
    "                            segmented\n"
    "                                levels = off\n"
    "                                proportions = []\n"
    "                        most-recently-used\n"
    "                        least-frequently-used\n"
    "                            dynamic-aging = off\n"
    "                    admission\n"
    "                        window\n"
    "                            proportion = 0.01\n"
    "                            minimum-proportion = 0.01\n"
    "                            maximum-proportion = 1.0\n"
    "                            optimizer = off\n"
    "                            hill-climbing\n"
    "                                adjust-multiplier = 10.0\n"
    "                                initial-step = 0.0625\n"
    "                                restart-threshold = 0.05\n"
    "                                step-decay = 0.98\n"
    "                            policy = none\n"
    "                            least-recently-used\n"
    "                                segmented\n"
    "                                    levels = off\n"
    "                                    proportions = []\n"
    "                            most-recently-used = {}\n"
    "                            least-frequently-used\n"
    "                                dynamic-aging = off\n"
    "                        filter = none\n"
    "                        frequency-sketch\n"
    "                            depth = 4\n"
    "                            counter-bits = 4\n"
    "                            width-multiplier = 4\n"
    "                            reset-multiplier = 10.0\n"
    "            coordinator-failure-backoff = 5 s\n"
    "            retry-interval = 2 s\n"
    "            buffer-size = 100000\n"
    "            handoff-timeout = 60 s\n"
    "            shard-start-timeout = 10 s\n"
    "            shard-failure-backoff = 10 s\n"
    "            entity-restart-backoff = 10 s\n"
    "            rebalance-interval = 10 s\n"
    "            journal-plugin-id = \"\"\n"
    "            snapshot-plugin-id = \"\"\n"
    "            state-store-mode = \"ddata\"\n"
    "            snapshot-after = 1000\n"
    "            keep-nr-of-batches = 2\n"
    "            least-shard-allocation-strategy\n"
    "                rebalance-absolute-limit = 0\n"
    "                rebalance-relative-limit = 0.1\n"
    "                rebalance-threshold = 1\n"
    "                max-simultaneous-rebalance = 3\n"
    "            external-shard-allocation-strategy\n"
    "                client-timeout = 5s\n"
    "            waiting-for-state-timeout = 2 s\n"
    "            updating-state-timeout = 5 s\n"
    "            shard-region-query-timeout = 3 s\n"
    "            entity-recovery-strategy = \"all\"\n"
    "            entity-recovery-constant-rate-strategy\n"
    "                frequency = 100 ms\n"
    "                number-of-entities = 5\n"
    "            event-sourced-remember-entities-store\n"
    "                max-updates-per-write = 100\n"
    "            coordinator-singleton\n"
    "                singleton-name = \"singleton\"\n"
    "                role = \"\"\n"
    "                hand-over-retry-interval = 1s\n"
    "                min-number-of-hand-over-retries = 15\n"
    "                use-lease = \"\"\n"
    "                lease-retry-interval = 5s\n"
    "                lease-name = \"\"\n"
    "            coordinator-singleton-role-override = on\n"
    "            coordinator-state\n"
    "                write-majority-plus = 3\n"
    "                read-majority-plus = 5\n"
    "            distributed-data\n"
    "                name = ddataReplicator\n"
    "                role = \"\"\n"
    "                gossip-interval = 2 s\n"
    "                notify-subscribers-interval = 500 ms\n"
    "                log-data-size-exceeding = 10 KiB\n"
    "                max-delta-elements = 5\n"
    "                use-dispatcher = \"pekko.actor.internal-dispatcher\"\n"
    "                pruning-interval = 120 s\n"
    "                max-pruning-dissemination = 300 s\n"
    "                pruning-marker-time-to-live = 6 h\n"
    "                serializer-cache-time-to-live = 10s\n"
    "                prefer-oldest = on\n"
    "                delta-crdt\n"
    "                    enabled = on\n"
    "                    max-delta-size = 50\n"
    "                expire-keys-after-inactivity\n"
    "                    key-1 = 10 minutes\n"
    "                durable\n"
    "                    keys = [\"shard-*\"]\n"
    "                    pruning-marker-time-to-live = 10 d\n"
    "                    store-actor-class = org.apache.pekko.cluster.ddata.LmdbDurableStore\n"
    "                    use-dispatcher = pekko.cluster.distributed-data.durable.pinned-store\n"
    "                    pinned-store\n"
    "                        executor = thread-pool-executor\n"
    "                        type = PinnedDispatcher\n"
    "                    lmdb\n"
    "                        dir = \"ddata\"\n"
    "                        map-size = 100 MiB\n"
    "                        write-behind-interval = off\n"
    "                delta-interval = 400 ms\n"
    "                tombstone-time-to-live = 1 d\n"
    "                compress-above = 0\n"
    "                max-reassembly-size = 64 MiB\n"
    "                max-pending-operations = 10000\n"
    "                majority-min-cap = 5\n"
    "            use-dispatcher = \"pekko.actor.internal-dispatcher\"\n"
    "            use-lease = \"\"\n"
    "            lease-retry-interval = 5s\n"
    "            verbose-debug-logging = off\n"
    "            fail-on-invalid-entity-state-transition = off\n"
    "            healthcheck\n"
    "                names = []\n"
    "                timeout = 5s\n"
    "                disabled-after = 10s\n"
    "            allocation-strategy = least-shards\n"
    "            consistent-hashing-allocation-strategy\n"
    "                rebalance-limit = 0\n";

static void test_every_akka_key_loads_with_akka_defaults(void **state)
{
    (void)state;
    shoal_sharding_settings_t s = load(reference_file);
    assert_string_equal(s.role, "");
    assert_int_equal(s.number_of_shards, 1000);
    assert_int_equal(s.buffer_size, 100000);
    assert_int_equal(s.retry_interval_ms, 2000);
    assert_int_equal(s.handoff_timeout_ms, 60000);
    assert_int_equal(s.shard_start_timeout_ms, 10000);
    assert_int_equal(s.rebalance_interval_ms, 10000);
    assert_int_equal(s.waiting_for_state_timeout_ms, 2000);
    assert_int_equal(s.updating_state_timeout_ms, 5000);
    assert_int_equal(s.shard_region_query_timeout_ms, 3000);
    assert_int_equal(s.write_majority_plus, 3);
    assert_int_equal(s.read_majority_plus, 5);
    assert_int_equal(s.majority_min_cap, 5);
    assert_int_equal(s.down_removal_margin_ms, 0);
    assert_int_equal(s.allocation.kind, SHOAL_ALLOC_LEAST_SHARDS);
    assert_int_equal(s.allocation.rebalance_absolute_limit, 0); /* Akka's older algorithm */
    assert_true(s.allocation.rebalance_relative_limit == 0.1);
    assert_int_equal(s.allocation.rebalance_threshold, 1);
    assert_int_equal(s.allocation.max_simultaneous_rebalance, 3);
    assert_int_equal(s.allocation.hashing_rebalance_limit, 0);

    /* sharding's distributed-data section is sharding's: the application's replicator settings
       do not change with it */
    shoal_replicator_settings_t r, rd;
    shoal_replicator_settings_default(&r);
    shoal_replicator_settings_default(&rd);
    assert_int_equal(shoal_config_replicator(held, &r, err, sizeof err), 0);
    assert_int_equal(r.max_delta_elements, rd.max_delta_elements);
    assert_int_equal(r.n_durable_keys, rd.n_durable_keys);
    assert_int_equal(r.prefer_oldest, rd.prefer_oldest);
    assert_int_equal(r.gossip_interval_ms, rd.gossip_interval_ms);
    assert_int_equal(r.n_expire_keys, rd.n_expire_keys);
}

/* What an Akka user writes: a limit-based strategy tuned, a strategy of their own, remember
   entities, JVM keys. It loads, fills the settings, and every key stays readable through the
   getters. */
static const char akka_style_file[] =
    "shoal\n"
    "    cluster\n"
    "        down-removal-margin = 10 s\n"
    "        sharding\n"
    "            guardian-name = \"sharding\"\n"
    "            use-dispatcher = \"pekko.actor.internal-dispatcher\"\n"
    "            verbose-debug-logging = on\n"
    "            remember-entities = on\n"
    "            remember-entities-store = eventsourced\n"
    "            journal-plugin-id = \"pekko.persistence.journal.leveldb\"\n"
    "            event-sourced-remember-entities-store/max-updates-per-write = 50\n"
    "            entity-recovery-strategy = constant\n"
    "            entity-recovery-constant-rate-strategy/frequency = 50 ms\n"
    "            passivation\n"
    "                strategy = lru-with-idle\n"
    "                default-strategy/active-entity-limit = 1000000\n"
    "                default-idle-strategy/idle-entity/timeout = 3 minutes\n"
    "                lru-with-idle\n"
    "                    active-entity-limit = 20000\n"
    "                    idle-entity\n"
    "                        timeout = 10 minutes\n"
    "                        interval = 1 minute\n"
    "                    replacement\n"
    "                        policy = least-recently-used\n"
    "                        least-recently-used/segmented/levels = 3\n"
    "                        least-recently-used/segmented/proportions = \"0.1, 0.3, 0.6\"\n"
    "                    admission/frequency-sketch/counter-bits = 4\n"
    "            coordinator-singleton\n"
    "                singleton-name = coordinator\n"
    "                hand-over-retry-interval = 2s\n"
    "            healthcheck/names = [\"cart\", \"order\"]\n"
    "            distributed-data\n"
    "                durable/keys = [\"shard-*\"]\n"
    "                durable/lmdb/dir = \"/var/lib/app/sharding\"\n"
    "                prefer-oldest = on\n"
    "                majority-min-cap = 4\n";

static void test_akka_style_file_loads_and_keeps_its_keys(void **state)
{
    (void)state;
    shoal_sharding_settings_t s = load(akka_style_file);
    assert_int_equal(s.down_removal_margin_ms, 10000);
    assert_int_equal(s.majority_min_cap, 4);
    assert_int_equal(s.number_of_shards, 1001); /* untouched */
    assert_true(s.remember_entities);
    assert_true(s.recovery_constant_rate);
    assert_int_equal(s.recovery_frequency_ms, 50);
    assert_int_equal(s.recovery_number_of_entities, 51); /* untouched */
    /* lru-with-idle: a segmented LRU with its limit and idle timeout */
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_LRU);
    assert_int_equal(s.passivation.active_entity_limit, 20000);
    assert_int_equal(s.passivation.idle_timeout_ms, 600000);
    assert_int_equal(s.passivation.idle_interval_ms, 60000);
    assert_int_equal(s.passivation.slru_levels, 3);
    assert_true(s.passivation.slru_proportions[0] == 0.1);
    assert_true(s.passivation.slru_proportions[1] == 0.3);
    assert_true(s.passivation.slru_proportions[2] == 0.6);
    assert_int_equal(s.passivation.stop_timeout_ms, 10003); /* the caller's */
    /* sharding's replicator: the file restates sharding's overrides (its own list of keys) */
    assert_non_null(s.replicator_settings);
    assert_int_equal(s.replicator_settings->n_durable_keys, 1);
    assert_string_equal(s.replicator_settings->durable_keys[0], "shard-*");
    assert_true(s.replicator_settings->prefer_oldest);
    assert_int_equal(s.replicator_settings->max_delta_elements, 5);
    assert_int_equal(s.replicator_settings->gossip_interval_ms, 0); /* the cluster's */

    uint64_t v = 0;
    bool b = false;
    assert_int_equal(shoal_config_bool(held, SH "remember-entities", &b, err, sizeof err), 1);
    assert_true(b);
    assert_string_equal(shoal_config_get(held, SH "remember-entities-store"), "eventsourced");
    assert_string_equal(shoal_config_get(held, PASS "strategy"), "lru-with-idle");
    assert_int_equal(
        shoal_config_duration(held, PASS "lru-with-idle/idle-entity/timeout", &v, err, sizeof err),
        1);
    assert_int_equal(v, 600000);
    assert_int_equal(
        shoal_config_duration(held, PASS "lru-with-idle/idle-entity/interval", &v, err, sizeof err),
        1);
    assert_int_equal(v, 60000);
    assert_int_equal(
        shoal_config_uint(held, PASS "lru-with-idle/active-entity-limit", &v, err, sizeof err), 1);
    assert_int_equal(v, 20000);
    assert_int_equal(
        shoal_config_uint(held, PASS "default-strategy/active-entity-limit", &v, err, sizeof err),
        1);
    assert_int_equal(v, 1000000);
    assert_int_equal(shoal_config_duration(held, PASS "default-idle-strategy/idle-entity/timeout",
                                           &v, err, sizeof err),
                     1);
    assert_int_equal(v, 180000);
    assert_string_equal(shoal_config_get(held, PASS "lru-with-idle/admission/frequency-sketch/"
                                                    "counter-bits"),
                        "4");
    /* a key of a section the file does not give reads as unset */
    v = 77;
    assert_int_equal(shoal_config_uint(held, PASS "other/active-entity-limit", &v, err, sizeof err),
                     0);
    assert_int_equal(v, 77);
    const char *const *items = NULL;
    size_t n = 0;
    assert_int_equal(shoal_config_list(held,
                                       PASS "lru-with-idle/replacement/least-recently-used/"
                                            "segmented/proportions",
                                       &items, &n, err, sizeof err),
                     1);
    assert_int_equal(n, 3);
    assert_string_equal(items[2], "0.6");
    /* the strategy sections the file gives, in file order */
    const char *const *names = NULL;
    n = shoal_config_sections(held, SH "passivation", &names);
    assert_int_equal(n, 3);
    assert_string_equal(names[0], "default-strategy");
    assert_string_equal(names[1], "default-idle-strategy");
    assert_string_equal(names[2], "lru-with-idle");
    /* off and none switch passivation off */
    assert_int_equal(
        load("shoal\n    cluster\n        sharding\n            passivation/strategy = none\n")
            .passivation.policy,
        SHOAL_PASSIVATE_NONE);
    assert_int_equal(
        load("shoal\n    cluster\n        sharding\n            passivation/strategy = off\n")
            .passivation.policy,
        SHOAL_PASSIVATE_NONE);
    assert_int_equal(
        load("shoal\n    cluster\n        sharding\n            passivation/strategy = "
             "default-strategy\n")
            .passivation.policy,
        SHOAL_PASSIVATE_TINYLFU);
    /* asking for the wrong kind names the key */
    assert_int_equal(shoal_config_duration(held, PASS "strategy", &v, err, sizeof err),
                     SHOAL_EINVAL);
    assert_non_null(strstr(err, PASS "strategy: not a duration"));
}

/* remember-entities and the entity-recovery keys fill their fields; bad values name the key. */
static void test_remember_and_recovery_keys(void **state)
{
    (void)state;
    shoal_sharding_settings_t expected;
    init(&expected);
    shoal_sharding_settings_t s = with("remember-entities", "on");
    expected.remember_entities = true;
    assert_same(&s, &expected);
    assert_false(with("remember-entities", "off").remember_entities);
    assert_int_equal(with("shard-failure-backoff", "250 ms").shard_failure_backoff_ms, 250);
    assert_int_equal(with("entity-restart-backoff", "1 minute").entity_restart_backoff_ms, 60000);
    assert_int_equal(with("entity-restart-backoff", "0").entity_restart_backoff_ms, 0);
    assert_true(with("entity-recovery-strategy", "constant").recovery_constant_rate);
    init(&expected);
    s = with("entity-recovery-strategy", "all");
    assert_same(&s, &expected); /* all is what init() has (false) */
    /* and "all" does turn constant off, not merely leave the field alone */
    char text[256];
    text_with(text, sizeof text, "entity-recovery-strategy", "all");
    shoal_config_destroy(&held);
    held = parse_words(text, err, sizeof err);
    assert_non_null(held);
    init(&s);
    s.recovery_constant_rate = true;
    assert_int_equal(shoal_config_sharding(held, &s, err, sizeof err), 0);
    assert_false(s.recovery_constant_rate);
    expect_error("shoal\n    cluster\n        sharding\n"
                 "            entity-recovery-strategy = constant\n"
                 "            entity-recovery-strategy = all\n",
                 SH "entity-recovery-strategy is set twice", NULL);
    s = with("entity-recovery-constant-rate-strategy/frequency", "2 s");
    assert_int_equal(s.recovery_frequency_ms, 2000);
    assert_false(s.recovery_constant_rate); /* the rate alone does not choose the strategy */
    assert_int_equal(with("entity-recovery-constant-rate-strategy/number-of-entities", "40")
                         .recovery_number_of_entities,
                     40);

    error_with("remember-entities", "maybe", "not a boolean");
    error_with("entity-recovery-strategy", "some", "'some'");
    error_with("entity-recovery-constant-rate-strategy/frequency", "0", "more than zero");
    error_with("entity-recovery-constant-rate-strategy/number-of-entities", "0", "more than zero");
    error_with("entity-recovery-constant-rate-strategy/number-of-entities", "4294967296",
               "too large");
    error_with("shard-failure-backoff", "soon", "not a duration");
    error_with("entity-restart-backoff", "-1 s", NULL);
}

static shoal_sharding_settings_t passivation_file(const char *body)
{
    char text[4096];
    snprintf(text, sizeof text, "shoal\n    cluster\n        sharding\n            passivation\n%s",
             body);
    return load(text);
}

/* Akka's strategies: a named section over strategy-defaults, the built-in ones, off, the
   deprecated key; stop-timeout is not the strategy's. */
static void test_passivation_strategy_sections(void **state)
{
    (void)state;
    shoal_passivation_settings_t d;
    shoal_passivation_settings_default(&d);

    /* default-strategy: Akka's W-TinyLFU */
    shoal_sharding_settings_t s = passivation_file("                strategy = default-strategy\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_TINYLFU);
    assert_int_equal(s.passivation.active_entity_limit, 100000);
    assert_int_equal(s.passivation.idle_timeout_ms, 0);
    assert_int_equal(s.passivation.slru_levels, 2);
    assert_true(s.passivation.slru_proportions[0] == 0.2);
    assert_true(s.passivation.slru_proportions[1] == 0.8);
    assert_true(s.passivation.hill_climbing);
    assert_true(s.passivation.window_proportion == d.window_proportion);
    assert_int_equal(s.passivation.stop_timeout_ms, 10003); /* the caller's */

    /* default-idle-strategy, and its timeout changed without naming the strategy (Akka's
       default) */
    s = passivation_file("                strategy = default-idle-strategy\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_IDLE);
    assert_int_equal(s.passivation.idle_timeout_ms, 120000);
    assert_int_equal(s.passivation.idle_interval_ms, 0); /* half the timeout */
    assert_int_equal(s.passivation.active_entity_limit, 0);
    s = passivation_file("                default-idle-strategy/idle-entity/timeout = 30 s\n"
                         "                stop-timeout = 2 s\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_IDLE);
    assert_int_equal(s.passivation.idle_timeout_ms, 30000);
    assert_int_equal(s.passivation.stop_timeout_ms, 2000);
    /* the tuned default-strategy: the file's keys over the built-in section */
    s = passivation_file("                strategy = default-strategy\n"
                         "                default-strategy\n"
                         "                    active-entity-limit = 500\n"
                         "                    idle-entity/timeout = 5 minutes\n"
                         "                    admission/window/optimizer = off\n"
                         "                    admission/window/proportion = 0.2\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_TINYLFU);
    assert_int_equal(s.passivation.active_entity_limit, 500);
    assert_int_equal(s.passivation.idle_timeout_ms, 300000);
    assert_false(s.passivation.hill_climbing);
    assert_true(s.passivation.window_proportion == 0.2);
    assert_int_equal(s.passivation.slru_levels, 2);

    /* a section of the file's own, over strategy-defaults (the file's too) */
    s = passivation_file("                strategy = recent\n"
                         "                strategy-defaults/idle-entity/timeout = 4 minutes\n"
                         "                recent\n"
                         "                    active-entity-limit = 10\n"
                         "                    replacement/policy = most-recently-used\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_MRU);
    assert_int_equal(s.passivation.active_entity_limit, 10);
    assert_int_equal(s.passivation.idle_timeout_ms, 240000);
    s = passivation_file("                strategy = frequent\n"
                         "                frequent\n"
                         "                    active-entity-limit = 1000\n"
                         "                    idle-entity/timeout = off\n"
                         "                    replacement\n"
                         "                        policy = least-frequently-used\n"
                         "                        least-frequently-used/dynamic-aging = on\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_LFU);
    assert_true(s.passivation.lfu_dynamic_aging);
    assert_int_equal(s.passivation.idle_timeout_ms, 0);
    assert_int_equal(s.passivation.active_entity_limit, 1000);
    s = passivation_file("                strategy = plain-lru\n"
                         "                plain-lru\n"
                         "                    active-entity-limit = 3\n"
                         "                    replacement/policy = least-recently-used\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_LRU);
    assert_int_equal(s.passivation.slru_levels, 0);
    /* a composite of the file's own, every window key */
    s = passivation_file("                strategy = tiny\n"
                         "                tiny\n"
                         "                    active-entity-limit = 64\n"
                         "                    replacement\n"
                         "                        policy = least-recently-used\n"
                         "                        least-recently-used/segmented/levels = 3\n"
                         "                    admission\n"
                         "                        filter = frequency-sketch\n"
                         "                        window\n"
                         "                            policy = least-recently-used\n"
                         "                            proportion = 0.05\n"
                         "                            minimum-proportion = 0.02\n"
                         "                            maximum-proportion = 0.5\n"
                         "                            optimizer = hill-climbing\n"
                         "                            hill-climbing\n"
                         "                                adjust-multiplier = 5\n"
                         "                                initial-step = 0.1\n"
                         "                                restart-threshold = 0.2\n"
                         "                                step-decay = 0.9\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_TINYLFU);
    assert_int_equal(s.passivation.active_entity_limit, 64);
    assert_int_equal(s.passivation.slru_levels, 3);
    assert_true(s.passivation.slru_proportions[0] == 0); /* equal segments */
    assert_true(s.passivation.window_proportion == 0.05);
    assert_true(s.passivation.window_min_proportion == 0.02);
    assert_true(s.passivation.window_max_proportion == 0.5);
    assert_true(s.passivation.hill_climbing);
    assert_true(s.passivation.adjust_multiplier == 5);
    assert_true(s.passivation.initial_step == 0.1);
    assert_true(s.passivation.restart_threshold == 0.2);
    assert_true(s.passivation.step_decay == 0.9);
    /* idle timeout only, with its interval */
    s = passivation_file("                strategy = quick\n"
                         "                quick/idle-entity\n"
                         "                    timeout = 2 s\n"
                         "                    interval = 100 ms\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_IDLE);
    assert_int_equal(s.passivation.idle_timeout_ms, 2000);
    assert_int_equal(s.passivation.idle_interval_ms, 100);
    /* a section with nothing to do: none */
    s = passivation_file("                strategy = nothing\n"
                         "                nothing/replacement/policy = off\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_NONE);
    assert_int_equal(s.passivation.idle_timeout_ms, 0);
    /* without a limit the policy keys do nothing (Akka): the idle strategy */
    s = passivation_file("                strategy = unlimited\n"
                         "                unlimited\n"
                         "                    idle-entity/timeout = 1 minute\n"
                         "                    replacement/policy = most-recently-used\n"
                         "                    admission/window/policy = most-recently-used\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_IDLE);
    assert_int_equal(s.passivation.idle_timeout_ms, 60000);
    assert_int_equal(s.passivation.active_entity_limit, 0);

    /* off and none: explicit passivation only, whatever the caller had */
    s = passivation_file("                strategy = off\n                stop-timeout = 1 s\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_NONE);
    assert_int_equal(s.passivation.idle_timeout_ms, 0);
    assert_int_equal(s.passivation.active_entity_limit, 0);
    assert_int_equal(s.passivation.stop_timeout_ms, 1000);

    /* the deprecated key: the idle strategy with its timeout, off = none; it wins over a
       strategy (Akka's rule) */
    s = with("passivate-idle-entity-after", "45 s");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_IDLE);
    assert_int_equal(s.passivation.idle_timeout_ms, 45000);
    assert_int_equal(s.passivation.active_entity_limit, 0);
    assert_int_equal(s.passivation.stop_timeout_ms, 10003);
    s = with("passivate-idle-entity-after", "off");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_NONE);
    assert_int_equal(s.passivation.idle_timeout_ms, 0);
    s = load("shoal\n    cluster\n        sharding\n"
             "            passivate-idle-entity-after = 5 s\n"
             "            passivation/strategy = default-strategy\n");
    assert_int_equal(s.passivation.policy, SHOAL_PASSIVATE_IDLE);
    assert_int_equal(s.passivation.idle_timeout_ms, 5000);

    /* a section that strategy does not name changes nothing */
    shoal_sharding_settings_t expected;
    init(&expected);
    s = passivation_file("                unused/active-entity-limit = 5\n");
    assert_same(&s, &expected);
}

/* What Shoal's passivator cannot do, and bad values, are refused naming the key. */
static void test_passivation_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *body, *frag1, *frag2;
    } cases[] = {
        {"                strategy = mine\n", PASS "strategy: 'mine' is not off",
         "nor a section of"},
        {"                strategy = mine\n                other/active-entity-limit = 5\n",
         PASS "strategy: 'mine'", NULL},
        {"                x/idle-entity/timeout = soon\n", PASS "x/idle-entity/timeout",
         "not a duration"},
        {"                x/idle-entity/interval = 0\n", PASS "x/idle-entity/interval",
         "more than zero"},
        {"                x/active-entity-limit = -3\n", PASS "x/active-entity-limit", NULL},
        {"                x/replacement/policy = random\n", PASS "x/replacement/policy",
         "'random'"},
        {"                x/admission/frequency-sketch/counter-bits = 8\n",
         PASS "x/admission/frequency-sketch/counter-bits", "4-bit counters"},
        {"                x/admission/frequency-sketch/counter-bits = 3\n",
         PASS "x/admission/frequency-sketch/counter-bits", NULL},
        {"                x/admission/frequency-sketch/depth = 8\n",
         PASS "x/admission/frequency-sketch/depth", "built with 4"},
        {"                x/admission/frequency-sketch/width-multiplier = 2\n",
         PASS "x/admission/frequency-sketch/width-multiplier", "built with 4"},
        {"                x/admission/frequency-sketch/reset-multiplier = 12.5\n",
         PASS "x/admission/frequency-sketch/reset-multiplier", "built with 10"},
        {"                x/replacement/least-recently-used/segmented/levels = 5\n",
         PASS "x/replacement/least-recently-used/segmented/levels", "at most 4"},
        {"                x/replacement/least-recently-used/segmented/proportions = \"0.5, 1.5\"\n",
         PASS "x/replacement/least-recently-used/segmented/proportions", "'1.5'"},
        {"                x/admission/window/least-recently-used/segmented/proportions = 2\n",
         PASS "x/admission/window/least-recently-used/segmented/proportions", "'2'"},
        {"                x/replacement/least-recently-used/segmented/proportions = "
         "\"0.1,0.1,0.1,0.1,0.6\"\n",
         PASS "x/replacement/least-recently-used/segmented/proportions", "at most 4"},
        /* combinations, checked once the strategy is named */
        {"                strategy = x\n"
         "                x/active-entity-limit = 100\n",
         PASS "x/active-entity-limit", "needs a replacement policy"},
        {"                strategy = x\n"
         "                x/active-entity-limit = 100\n"
         "                x/replacement/policy = least-recently-used\n"
         "                x/replacement/least-recently-used/segmented/levels = 3\n"
         "                x/replacement/least-recently-used/segmented/proportions = \"0.5, 0.5\"\n",
         PASS "x/replacement/least-recently-used/segmented/proportions", "2 proportions for 3"},
        {"                strategy = x\n"
         "                x/active-entity-limit = 100\n"
         "                x/admission/window/policy = most-recently-used\n"
         "                x/admission/filter = frequency-sketch\n"
         "                x/replacement/policy = least-recently-used\n",
         PASS "x/admission/window/policy", "plain least-recently-used"},
        {"                strategy = x\n"
         "                x/active-entity-limit = 100\n"
         "                x/admission/filter = frequency-sketch\n"
         "                x/replacement/policy = least-recently-used\n",
         PASS "x/admission/window/policy", "a filter needs it"},
        {"                strategy = x\n"
         "                x/active-entity-limit = 100\n"
         "                x/admission/window/policy = least-recently-used\n"
         "                x/replacement/policy = least-recently-used\n",
         PASS "x/admission/filter", "frequency-sketch"},
        {"                strategy = x\n"
         "                x/active-entity-limit = 100\n"
         "                x/admission/window/policy = least-recently-used\n"
         "                x/admission/filter = frequency-sketch\n"
         "                x/replacement/policy = least-frequently-used\n",
         PASS "x/replacement", "segmented least-recently-used"},
        {"                strategy = default-strategy\n"
         "                default-strategy/admission/window/least-recently-used/segmented/levels"
         " = 2\n",
         PASS "default-strategy/admission/window/policy", "no other policy or segments"},
        {"                stop-timeout = 0\n", PASS "stop-timeout", "more than zero"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[4096];
        snprintf(text, sizeof text,
                 "shoal\n    cluster\n        sharding\n            passivation\n%s",
                 cases[i].body);
        expect_error(text, cases[i].frag1, cases[i].frag2);
    }
    error_with("passivate-idle-entity-after", "later", "not a duration");
}

/* Sharding's replicator: its own section over distributed-data's (minus sharding's overrides),
   over sharding's defaults or what the caller gave. */
static void test_sharding_replicator_settings(void **state)
{
    (void)state;
    shoal_replicator_settings_t dflt;
    shoal_sharding_replicator_settings_default(&dflt);
    assert_int_equal(dflt.gossip_interval_ms, 0);
    assert_int_equal(dflt.delta_interval_ms, 0);
    assert_int_equal(dflt.max_delta_elements, 5);
    assert_true(dflt.prefer_oldest);
    assert_int_equal(dflt.notify_subscribers_interval_ms, 50);
    assert_int_equal(dflt.n_durable_keys, 1);
    assert_string_equal(dflt.durable_keys[0], "shard-*");

    /* one key: one field, the rest sharding's defaults */
    shoal_sharding_settings_t s = with("distributed-data/gossip-interval", "3 s");
    assert_non_null(s.replicator_settings);
    shoal_replicator_settings_t want = dflt;
    want.gossip_interval_ms = 3000; /* deltas: a fifth of it, at start (0) */
    assert_memory_equal(s.replicator_settings, &want, sizeof want);

    /* every key of the section that has a field */
    s = load("shoal\n"
             "    cluster\n"
             "        sharding\n"
             "            distributed-data\n"
             "                gossip-interval = 4 s\n"
             "                notify-subscribers-interval = 200 ms\n"
             "                max-delta-elements = 50\n"
             "                pruning-interval = off\n"
             "                max-pruning-dissemination = 60 s\n"
             "                pruning-marker-time-to-live = 2 h\n"
             "                prefer-oldest = off\n"
             "                delta-crdt\n"
             "                    enabled = off\n"
             "                    max-delta-size = 20\n"
             "                expire-keys-after-inactivity = \"cache-* = 2 minutes\"\n"
             "                durable\n"
             "                    keys = [\"shard-*\", \"coord-*\"]\n"
             "                    pruning-marker-time-to-live = 3 d\n"
             "                delta-interval = 300 ms\n"
             "                tombstone-time-to-live = 2 d\n"
             "                compress-above = 64 KiB\n"
             "                max-reassembly-size = 8 MiB\n"
             "                max-pending-operations = 500\n");
    const shoal_replicator_settings_t *r = s.replicator_settings;
    assert_non_null(r);
    assert_int_equal(r->gossip_interval_ms, 4000);
    assert_int_equal(r->notify_subscribers_interval_ms, 200);
    assert_int_equal(r->max_delta_elements, 50);
    assert_int_equal(r->pruning_interval_ms, 0);
    assert_int_equal(r->max_pruning_dissemination_ms, 60000);
    assert_int_equal(r->pruning_marker_ttl_ms, 2u * 3600 * 1000);
    assert_false(r->prefer_oldest);
    assert_false(r->delta_enabled);
    assert_int_equal(r->max_delta_size, 20);
    assert_int_equal(r->n_expire_keys, 1);
    assert_string_equal(r->expire_keys[0].pattern, "cache-*");
    assert_int_equal(r->expire_keys[0].after_ms, 120000);
    assert_int_equal(r->n_durable_keys, 2);
    assert_string_equal(r->durable_keys[1], "coord-*");
    assert_int_equal(r->durable_pruning_marker_ttl_ms, 3ull * 24 * 3600 * 1000);
    assert_int_equal(r->delta_interval_ms, 300);
    assert_int_equal(r->tombstone_ttl_ms, 2ull * 24 * 3600 * 1000);
    assert_int_equal(r->compress_above_bytes, 64 * 1024);
    assert_int_equal(r->max_reassembly_bytes, 8 * 1024 * 1024);
    assert_int_equal(r->max_pending_ops, 500);
    assert_null(r->store);

    /* distributed-data's keys reach it where sharding does not override them (Akka's
       fallback); sharding's own section wins */
    s = load("shoal\n"
             "    cluster\n"
             "        distributed-data\n"
             "            pruning-interval = 30 s\n"
             "            max-pruning-dissemination = 90 s\n"
             "            max-delta-elements = 300\n"
             "            gossip-interval = 9 s\n"
             "        sharding\n"
             "            distributed-data\n"
             "                max-pruning-dissemination = 45 s\n");
    r = s.replicator_settings;
    assert_non_null(r);
    assert_int_equal(r->pruning_interval_ms, 30000);
    assert_int_equal(r->max_pruning_dissemination_ms, 45000);
    assert_int_equal(r->max_delta_elements, 5);
    assert_int_equal(r->gossip_interval_ms, 0);
    /* ... and the application's replicator is not changed by sharding's section */
    shoal_replicator_settings_t app;
    shoal_replicator_settings_default(&app);
    assert_int_equal(shoal_config_replicator(held, &app, err, sizeof err), 0);
    assert_int_equal(app.max_pruning_dissemination_ms, 90000);

    /* over the caller's settings */
    shoal_replicator_settings_t mine = dflt;
    mine.max_pending_ops = 7;
    mine.gossip_interval_ms = 1234;
    shoal_config_destroy(&held);
    held = parse_words("shoal\n    cluster\n        sharding\n            distributed-data\n"
                       "                prefer-oldest = off\n",
                       err, sizeof err);
    assert_non_null(held);
    init(&s);
    s.replicator_settings = &mine;
    assert_int_equal(shoal_config_sharding(held, &s, err, sizeof err), 0);
    assert_true(s.replicator_settings != &mine);
    assert_int_equal(s.replicator_settings->max_pending_ops, 7);
    assert_int_equal(s.replicator_settings->gossip_interval_ms, 1234);
    assert_false(s.replicator_settings->prefer_oldest);
    assert_true(mine.prefer_oldest); /* the caller's struct is not written */

    /* bad values name the key */
    error_with("distributed-data/gossip-interval", "0", "more than zero");
    error_with("distributed-data/max-delta-elements", "many", "not a whole number");
    error_with("distributed-data/prefer-oldest", "sometimes", "not a boolean");
    error_with("distributed-data/compress-above", "12 parsecs", NULL);
    error_with("distributed-data/durable/keys", "\"a*b\"", NULL);
    expect_error("shoal\n    cluster\n        distributed-data\n            pruning-interval = 0\n",
                 "shoal/cluster/distributed-data/pruning-interval", NULL);
}

static void test_null_arguments(void **state)
{
    (void)state;
    shoal_sharding_settings_t s;
    init(&s);
    assert_int_equal(shoal_config_sharding(NULL, &s, err, sizeof err), SHOAL_EINVAL);
    assert_non_null(strstr(err, "NULL"));
    load("shoal\n");
    assert_int_equal(shoal_config_sharding(held, NULL, NULL, 0), SHOAL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_full_file_fills_every_field, release_held),
        cmocka_unit_test_teardown(test_unset_settings_keep_the_callers_values, release_held),
        cmocka_unit_test_teardown(test_min_cap_is_sharding_only, release_held),
        cmocka_unit_test_teardown(test_one_key_changes_one_field, release_held),
        cmocka_unit_test_teardown(test_majority_plus_all, release_held),
        cmocka_unit_test_teardown(test_bad_values_are_refused_by_key, release_held),
        cmocka_unit_test_teardown(test_unknown_sharding_keys_are_refused_by_name, release_held),
        cmocka_unit_test_teardown(test_every_akka_key_loads_with_akka_defaults, release_held),
        cmocka_unit_test_teardown(test_akka_style_file_loads_and_keeps_its_keys, release_held),
        cmocka_unit_test_teardown(test_remember_and_recovery_keys, release_held),
        cmocka_unit_test_teardown(test_passivation_strategy_sections, release_held),
        cmocka_unit_test_teardown(test_passivation_refusals, release_held),
        cmocka_unit_test_teardown(test_sharding_replicator_settings, release_held),
        cmocka_unit_test_teardown(test_null_arguments, release_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
