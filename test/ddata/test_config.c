/*  test_config.c — configuration files: every key, value forms, errors that name the key.

    The settings structs are initialized here by hand (not with shoal_*_settings_default) so that
    the test checks exactly what the file overwrites and what it leaves alone.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>

#include "ddata.h"
#include "prop.h"
#include "config_words.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DD "shoal/cluster/distributed-data/"

static char err[512];

/* A replicator settings struct with recognizable "defaults". */
static void rep_init(shoal_replicator_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->role = "default-role";
    s->gossip_interval_ms = 2000;
    s->delta_interval_ms = 400;
    s->notify_subscribers_interval_ms = 500;
    s->max_delta_elements = 500;
    s->max_delta_size = 50;
    s->delta_enabled = true;
    s->pruning_interval_ms = 120000;
    s->max_pruning_dissemination_ms = 300000;
    s->pruning_marker_ttl_ms = 6ull * 3600 * 1000;
    s->tombstone_ttl_ms = 86400000;
    s->compress_above_bytes = 32 * 1024;
    s->max_reassembly_bytes = 64 * 1024 * 1024;
    s->max_pending_ops = 100000;
}

static void sys_init(shoal_system_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->endpoint = "tcp://10.1.2.3:7000";
    s->max_frame_bytes = 256 * 1024;
    s->peer_send_hwm = 1000;
    s->ack_interval_ms = 100;
}

/* Parses `text`, which must fail, and checks the message contains every given fragment. */
static void expect_error(const char *text, const char *frag1, const char *frag2)
{
    memset(err, 0, sizeof err);
    shoal_config_t *cfg = parse_words(text, err, sizeof err);
    if (cfg) {
        shoal_config_destroy(&cfg);
        fail_msg("accepted:\n%s", text);
    }
    if (!strstr(err, frag1) || (frag2 && !strstr(err, frag2)))
        fail_msg("error '%s' lacks '%s' / '%s' for:\n%s", err, frag1, frag2 ? frag2 : "", text);
}

/* The config behind rep_with's result: its strings live until the next rep_with or the end of
   the test. */
static shoal_config_t *held;

static int release_held(void **state)
{
    (void)state;
    shoal_config_destroy(&held);
    return 0;
}

/* One replicator key set to `value` in a file; returns the filled settings (asserts success). */
static shoal_replicator_settings_t rep_with(const char *key, const char *value)
{
    shoal_config_destroy(&held);
    char text[1024];
    snprintf(text, sizeof text,
             "shoal\n    cluster\n        distributed-data\n"
             "            %s = %s\n",
             key, value);
    shoal_config_t *cfg = parse_words(text, err, sizeof err);
    if (!cfg)
        fail_msg("%s = %s: %s", key, value, err);
    shoal_replicator_settings_t s;
    rep_init(&s);
    assert_int_equal(shoal_config_replicator(cfg, &s, err, sizeof err), 0);
    held = cfg;
    return s;
}

static void rep_error(const char *key, const char *value, const char *frag2)
{
    char text[1024], frag[256];
    snprintf(text, sizeof text,
             "shoal\n    cluster\n        distributed-data\n"
             "            %s = %s\n",
             key, value);
    snprintf(frag, sizeof frag, DD "%s", key);
    expect_error(text, frag, frag2);
}

static const char full_file[] =
    "#   Every key Shoal reads, set to something other than the defaults\n"
    "shoal\n"
    "    remote\n"
    "        artery\n"
    "            canonical\n"
    "                hostname = \"192.168.1.20\"\n"
    "                port = 2553\n"
    "            advanced\n"
    "                maximum-frame-size = 512 KiB\n"
    "                outbound-message-queue-size = 3072\n"
    "            max-inbound-connections = 200\n"
    "    cluster\n"
    "        distributed-data\n"
    "            name = ddataReplicator           # ignored\n"
    "            role = \"backend\"\n"
    "            gossip-interval = 3 s\n"
    "            notify-subscribers-interval = 250ms\n"
    "            log-data-size-exceeding = 10 KiB\n"
    "            max-delta-elements = 5\n"
    "            use-dispatcher = \"pekko.actor.internal-dispatcher\"\n"
    "            pruning-interval = 90 s\n"
    "            max-pruning-dissemination = 10 minutes\n"
    "            pruning-marker-time-to-live = 12 h\n"
    "            serializer-cache-time-to-live = 10s\n"
    "            prefer-oldest = on\n"
    "            delta-crdt\n"
    "                enabled = off\n"
    "                max-delta-size = 40\n"
    "            expire-keys-after-inactivity\n"
    "                key-1 = 10 minutes\n"
    "                session = 1 h\n"
    "            durable\n"
    "                keys = \"shard-*, counters\"\n"
    "                pruning-marker-time-to-live = 10 d\n"
    "                store-actor-class = org.apache.pekko.cluster.ddata.LmdbDurableStore\n"
    "                use-dispatcher = pekko.cluster.distributed-data.durable.pinned-store\n"
    "                pinned-store\n"
    "                    executor = thread-pool-executor\n"
    "                    type = PinnedDispatcher\n"
    "                lmdb\n"
    "                    dir = \"ddata\"\n"
    "                    map-size = 100 MiB\n"
    "                    write-behind-interval = off\n"
    "            delta-interval = 200 ms\n"
    "            tombstone-time-to-live = 2 d\n"
    "            compress-above = 64 KiB\n"
    "            max-reassembly-size = 16 MiB\n"
    "            max-pending-operations = 5000\n";

static void test_full_file_sets_every_field(void **state)
{
    (void)state;
    shoal_config_t *cfg = parse_words(full_file, err, sizeof err);
    if (!cfg)
        fail_msg("%s", err);
    assert_string_equal(err, "");

    shoal_replicator_settings_t r;
    rep_init(&r);
    shoal_store_t *store = (shoal_store_t *)&r; /* any pointer: must survive untouched */
    r.store = store;
    assert_int_equal(shoal_config_replicator(cfg, &r, err, sizeof err), 0);
    assert_string_equal(r.role, "backend");
    assert_int_equal(r.gossip_interval_ms, 3000);
    assert_int_equal(r.delta_interval_ms, 200);
    assert_int_equal(r.notify_subscribers_interval_ms, 250);
    assert_int_equal(r.max_delta_elements, 5);
    assert_int_equal(r.max_delta_size, 40);
    assert_false(r.delta_enabled);
    assert_int_equal(r.pruning_interval_ms, 90000);
    assert_int_equal(r.max_pruning_dissemination_ms, 600000);
    assert_int_equal(r.pruning_marker_ttl_ms, 12ull * 3600 * 1000);
    assert_int_equal(r.tombstone_ttl_ms, 2ull * 86400000);
    assert_int_equal(r.compress_above_bytes, 64 * 1024);
    assert_int_equal(r.max_reassembly_bytes, 16 * 1024 * 1024);
    assert_true(r.prefer_oldest);
    assert_int_equal(r.max_pending_ops, 5000);
    assert_int_equal(r.n_durable_keys, 2);
    assert_string_equal(r.durable_keys[0], "shard-*");
    assert_string_equal(r.durable_keys[1], "counters");
    assert_int_equal(r.n_expire_keys, 2);
    assert_string_equal(r.expire_keys[0].pattern, "key-1");
    assert_int_equal(r.expire_keys[0].after_ms, 600000);
    assert_string_equal(r.expire_keys[1].pattern, "session");
    assert_int_equal(r.expire_keys[1].after_ms, 3600000);
    assert_ptr_equal(r.store, store);
    assert_null(r.gossip_choose);

    shoal_system_settings_t s;
    sys_init(&s);
    assert_int_equal(shoal_config_system(cfg, &s, err, sizeof err), 0);
    assert_string_equal(s.endpoint, "tcp://192.168.1.20:2553");
    assert_int_equal(s.max_frame_bytes, 512 * 1024);
    assert_int_equal(s.peer_send_hwm, 3072);
    assert_int_equal(s.max_inbound_connections, 200);
    assert_int_equal(s.ack_interval_ms, 100); /* not in the file */

    /* filling twice gives the same strings, owned by cfg */
    shoal_system_settings_t s2;
    sys_init(&s2);
    assert_int_equal(shoal_config_system(cfg, &s2, NULL, 0), 0);
    assert_ptr_equal(s.endpoint, s2.endpoint);
    shoal_config_destroy(&cfg);
    assert_null(cfg);
    shoal_config_destroy(&cfg); /* NULL-safe */
    shoal_config_destroy(NULL);
}

static void test_unset_fields_keep_caller_values(void **state)
{
    (void)state;
    shoal_config_t *cfg = parse_words("shoal\n    cluster\n        distributed-data\n"
                                      "            gossip-interval = 5 s\n",
                                      err, sizeof err);
    assert_non_null(cfg);
    shoal_replicator_settings_t r, expect;
    rep_init(&r);
    rep_init(&expect);
    assert_int_equal(shoal_config_replicator(cfg, &r, err, sizeof err), 0);
    expect.gossip_interval_ms = 5000;
    expect.delta_interval_ms = 1000; /* follows gossip-interval, as in Akka, unless set */
    assert_memory_equal(&r, &expect, sizeof r);
    shoal_system_settings_t s, sexp;
    sys_init(&s);
    sys_init(&sexp);
    assert_int_equal(shoal_config_system(cfg, &s, err, sizeof err), 0);
    assert_memory_equal(&s, &sexp, sizeof s);
    shoal_config_destroy(&cfg);

    /* an empty file, or only comments, changes nothing */
    static const char *const empties[] = {"", "\n\n", "# nothing\n", "shoal\n",
                                          "shoal\n    cluster\n        # later\n"};
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        cfg = parse_words(empties[i], err, sizeof err);
        assert_non_null(cfg);
        rep_init(&r);
        assert_int_equal(shoal_config_replicator(cfg, &r, err, sizeof err), 0);
        rep_init(&expect);
        assert_memory_equal(&r, &expect, sizeof r);
        shoal_config_destroy(&cfg);
    }
}

static void test_unknown_keys_name_the_path(void **state)
{
    (void)state;
    rep_error("gossip-intervall", "2 s", "unknown setting " DD "gossip-intervall");
    expect_error("shoal\n    clustr\n        x = 1\n", "unknown setting shoal/clustr", NULL);
    expect_error("shoal\n    cluster\n        distributed-data\n            durable\n"
                 "                lmdb\n                    size = 1\n",
                 "unknown setting " DD "durable/lmdb/size", NULL);
    /* Akka's dotted names get a hint */
    rep_error("delta-crdt.enabled", "on", "(nest sections or use '/', not '.')");
    /* the top level is shoal only */
    expect_error("pekko\n    cluster\n", "'pekko' at the top level", "shoal");
    expect_error("shoalx = 1\n", "'shoalx' at the top level", NULL);
    expect_error("shoal\n    cluster\nakka = 1\n", "'akka' at the top level", NULL);
    /* a setting used as a section and the reverse */
    expect_error("shoal\n    cluster\n        distributed-data\n            gossip-interval\n"
                 "                x = 1\n",
                 DD "gossip-interval is a setting, not a section", NULL);
    expect_error("shoal\n    cluster\n        distributed-data = 2 s\n",
                 "shoal/cluster/distributed-data is a section", "'2 s'");
    expect_error("shoal = on\n", "shoal is a section", NULL);
    /* the same key twice: which one was meant? */
    expect_error("shoal\n    cluster\n        distributed-data\n            gossip-interval = 1 s\n"
                 "            gossip-interval = 2 s\n",
                 DD "gossip-interval is set twice", NULL);
}

static void test_slash_paths_and_repeated_sections(void **state)
{
    (void)state;
    /* ZPL names may hold '/': a path may be written on one line; sections may repeat */
    shoal_config_t *cfg =
        parse_words("shoal/cluster/distributed-data/gossip-interval = 7 s\n"
                    "shoal\n    cluster/distributed-data\n        delta-crdt/max-delta-size = 9\n"
                    "shoal\n    cluster\n        distributed-data\n"
                    "            expire-keys-after-inactivity/cache-a = 1 m\n",
                    err, sizeof err);
    if (!cfg)
        fail_msg("%s", err);
    shoal_replicator_settings_t r;
    rep_init(&r);
    shoal_config_replicator(cfg, &r, NULL, 0);
    assert_int_equal(r.gossip_interval_ms, 7000);
    assert_int_equal(r.max_delta_size, 9);
    assert_int_equal(r.n_expire_keys, 1);
    assert_string_equal(r.expire_keys[0].pattern, "cache-a");
    assert_int_equal(r.expire_keys[0].after_ms, 60000);
    shoal_config_destroy(&cfg);
}

static void test_durations_in_every_form(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint32_t ms;
    } cases[] = {
        {"2 s", 2000},
        {"2s", 2000},
        {"2 seconds", 2000},
        {"1 second", 1000},
        {"500 ms", 500},
        {"500ms", 500},
        {"500 millis", 500},
        {"1 millisecond", 1},
        {"7 milliseconds", 7},
        {"10 minutes", 600000},
        {"10 m", 600000},
        {"10m", 600000},
        {"1 minute", 60000},
        {"1 h", 3600000},
        {"24h", 86400000},
        {"2 hours", 7200000},
        {"1 d", 86400000},
        {"10 d", 864000000},
        {"7 days", 604800000},
        {"1 day", 86400000},
        {"1500", 1500},
        {"0.5 s", 500},
        {"1.25 s", 1250},
        {"1.5 h", 5400000},
        {"3000 us", 3},
        {"2000000 ns", 2},
        {"\"3 s\"", 3000},
        {"'4 s'", 4000},
        {"4294967295", 4294967295u},
        {"49 d", 49u * 86400000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shoal_replicator_settings_t r = rep_with("gossip-interval", cases[i].text);
        if (r.gossip_interval_ms != cases[i].ms)
            fail_msg("'%s' gave %u, expected %u", cases[i].text, r.gossip_interval_ms, cases[i].ms);
    }
    /* delta-interval follows gossip-interval unless the file sets it */
    assert_int_equal(rep_with("gossip-interval", "4 ms").delta_interval_ms, 1);
    assert_int_equal(rep_with("delta-interval", "30 ms").delta_interval_ms, 30);
    assert_int_equal(rep_with("delta-interval", "30 ms").gossip_interval_ms, 2000);
    /* 64-bit fields take longer durations */
    shoal_replicator_settings_t r = rep_with("tombstone-time-to-live", "365 d");
    assert_int_equal(r.tombstone_ttl_ms, 365ull * 86400000);
    r = rep_with("pruning-marker-time-to-live", "60 d");
    assert_int_equal(r.pruning_marker_ttl_ms, 60ull * 86400000);
}

static void test_bad_values_name_key_and_value(void **state)
{
    (void)state;
    rep_error("gossip-interval", "2 parsecs", "'2 parsecs' is not a duration");
    rep_error("gossip-interval", "s", "'s' is not a duration");
    rep_error("gossip-interval", "-1 s", "'-1 s' is not a duration");
    rep_error("gossip-interval", "2 S", "is not a duration"); /* units are case-sensitive */
    rep_error("gossip-interval", "1.s", "is not a duration");
    rep_error("gossip-interval", "", "'' is not a duration");
    rep_error("gossip-interval", "off", "'off' is not a duration"); /* off only where allowed */
    rep_error("gossip-interval", "0 s", "'0 s' must be more than zero");
    rep_error("gossip-interval", "50 d", "'50 d' is too large (at most 4294967295 ms)");
    rep_error("gossip-interval", "99999999999999999999999 ms", "is too large");
    rep_error("tombstone-time-to-live", "9999999999999 d", "is too large");
    rep_error("gossip-interval", "1500 us", "is not a whole number of milliseconds");
    rep_error("gossip-interval", "0.0001 s", "is not a whole number of milliseconds");
    rep_error("prefer-oldest", "maybe", "'maybe' is not a boolean");
    rep_error("delta-crdt/enabled", "1", "'1' is not a boolean");
    rep_error("max-delta-elements", "five", "'five' is not a whole number");
    rep_error("max-delta-elements", "4294967296", "is too large (at most 4294967295)");
    rep_error("max-delta-elements", "0", "must be more than zero");
    rep_error("max-delta-elements", "+5", "is not a whole number");
    rep_error("compress-above", "lots", "'lots' is not a size");
    rep_error("compress-above", "256k", "'256k' is not a size"); /* only unambiguous units */
    rep_error("compress-above", "99999999999 GiB", "is too large");
    rep_error("compress-above", "0.5 B", "is not a whole number of bytes");
    rep_error("max-reassembly-size", "0 MiB", "must be more than zero");
    /* kept Akka keys are still checked */
    rep_error("serializer-cache-time-to-live", "soon", "'soon' is not a duration");
    rep_error("log-data-size-exceeding", "big", "'big' is not a size nor off");
    rep_error("durable/lmdb/map-size", "huge", "'huge' is not a size");
    rep_error("durable/lmdb/write-behind-interval", "later", "not a duration nor off");
    /* values with control characters are shown escaped */
    rep_error("gossip-interval", "'2\x01s'", "'2\\x01s' is not a duration");
    /* the node */
    expect_error("shoal\n    remote\n        artery\n            canonical\n"
                 "                port = 70000\n",
                 "shoal/remote/artery/canonical/port: '70000' is too large", NULL);
    expect_error("shoal\n    remote\n        artery\n            canonical\n"
                 "                hostname = \"a b\"\n",
                 "shoal/remote/artery/canonical/hostname: 'a b' is not a host", NULL);
    expect_error("shoal\n    remote\n        artery\n            canonical\n"
                 "                hostname = \"\"\n",
                 "shoal/remote/artery/canonical/hostname: the host name is empty", NULL);
    expect_error("shoal\n    remote\n        artery\n            advanced\n"
                 "                outbound-message-queue-size = 3000000000\n",
                 "outbound-message-queue-size: '3000000000' is too large", NULL);
}

static void test_sizes(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t bytes;
    } cases[] = {
        {"4096", 4096},        {"10 B", 10},
        {"10 bytes", 10},      {"1 byte", 1},
        {"10 KiB", 10240},     {"256KiB", 262144},
        {"1 kB", 1000},        {"100 MiB", 104857600},
        {"2 MB", 2000000},     {"1 GiB", 1073741824},
        {"3 GB", 3000000000u}, {"1.5 MiB", 1572864},
        {"2 kibibytes", 2048}, {"0", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shoal_replicator_settings_t r = rep_with("compress-above", cases[i].text);
        if (r.compress_above_bytes != cases[i].bytes)
            fail_msg("'%s' gave %zu, expected %zu", cases[i].text, r.compress_above_bytes,
                     cases[i].bytes);
    }
}

static void test_off_where_akka_allows_it(void **state)
{
    (void)state;
    shoal_replicator_settings_t r = rep_with("pruning-interval", "off");
    assert_int_equal(r.pruning_interval_ms, 0);
    r = rep_with("pruning-interval", "\"off\"");
    assert_int_equal(r.pruning_interval_ms, 0);
    rep_error("pruning-interval", "0", "must be more than zero (off disables it)");
    /* booleans take on/off and their synonyms */
    static const char *const yes[] = {"on", "true", "yes", "'on'"};
    static const char *const no[] = {"off", "false", "no", "\"off\""};
    for (size_t i = 0; i < 4; i++) {
        assert_true(rep_with("prefer-oldest", yes[i]).prefer_oldest);
        assert_false(rep_with("delta-crdt/enabled", no[i]).delta_enabled);
    }
    /* kept keys with off */
    shoal_config_t *cfg = parse_words(
        "shoal\n    cluster\n        distributed-data\n            log-data-size-exceeding = off\n"
        "            durable\n                lmdb\n"
        "                    write-behind-interval = 200 ms\n",
        err, sizeof err);
    if (!cfg)
        fail_msg("%s", err);
    shoal_config_destroy(&cfg);
}

static void test_expiry_map(void **state)
{
    (void)state;
    /* the section form (names as ZPL allows them) and the inline form (any key, prefixes) */
    shoal_config_t *cfg = parse_words(
        "shoal\n    cluster\n        distributed-data\n"
        "            expire-keys-after-inactivity = \"cache-* = 2 minutes, 'odd key' = 30 s\"\n"
        "                key-1 = 10 minutes\n"
        "                a.b@c = 1 d\n",
        err, sizeof err);
    if (!cfg)
        fail_msg("%s", err);
    shoal_replicator_settings_t r;
    rep_init(&r);
    shoal_config_replicator(cfg, &r, err, sizeof err);
    assert_int_equal(r.n_expire_keys, 4);
    assert_string_equal(r.expire_keys[0].pattern, "cache-*");
    assert_int_equal(r.expire_keys[0].after_ms, 120000);
    assert_string_equal(r.expire_keys[1].pattern, "odd key");
    assert_int_equal(r.expire_keys[1].after_ms, 30000);
    assert_string_equal(r.expire_keys[2].pattern, "key-1");
    assert_int_equal(r.expire_keys[2].after_ms, 600000);
    assert_string_equal(r.expire_keys[3].pattern, "a.b@c");
    assert_int_equal(r.expire_keys[3].after_ms, 86400000);
    shoal_config_destroy(&cfg);

    /* HOCON braces are accepted; an empty map clears the caller's */
    shoal_expiry_t mine = {"x", 5};
    r = rep_with("expire-keys-after-inactivity", "'{ \"k\" = 1 s }'");
    assert_int_equal(r.n_expire_keys, 1);
    assert_string_equal(r.expire_keys[0].pattern, "k");
    cfg = parse_words("shoal\n    cluster\n        distributed-data\n"
                      "            expire-keys-after-inactivity\n",
                      err, sizeof err);
    assert_non_null(cfg);
    rep_init(&r);
    r.expire_keys = &mine;
    r.n_expire_keys = 1;
    shoal_config_replicator(cfg, &r, err, sizeof err);
    assert_int_equal(r.n_expire_keys, 0);
    shoal_config_destroy(&cfg);

    /* errors name the entry */
    expect_error("shoal\n    cluster\n        distributed-data\n"
                 "            expire-keys-after-inactivity\n                key-1 = soon\n",
                 DD "expire-keys-after-inactivity/key-1: 'soon' is not a duration", NULL);
    rep_error("expire-keys-after-inactivity", "'a* = 1 s, b = never'",
              "expire-keys-after-inactivity/b: 'never' is not a duration");
    rep_error("expire-keys-after-inactivity", "'a = 1 s, a = 2 s'", "'a' is given twice");
    rep_error("expire-keys-after-inactivity", "'a*b = 1 s'", "'*' may only end a key");
    rep_error("expire-keys-after-inactivity", "'cache-*'", "is not 'key = duration'");
    rep_error("expire-keys-after-inactivity", "'= 1 s'", "empty key name");
    rep_error("expire-keys-after-inactivity", "'k = 0 s'", "must be more than zero");
    expect_error("shoal\n    cluster\n        distributed-data\n"
                 "            expire-keys-after-inactivity\n                key-1\n"
                 "                    x = 1\n",
                 "expire-keys-after-inactivity/key-1 takes a duration, not a section", NULL);
    /* ZPL itself cannot name a key with '*': the message says where, and the inline form works */
    expect_error("shoal\n    cluster\n        distributed-data\n"
                 "            expire-keys-after-inactivity\n                cache-* = 1 m\n",
                 "line 5: invalid syntax", "cache-* = 1 m");
}

static void test_durable_keys_list(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t n;
        const char *first, *last;
    } cases[] = {
        {"\"shard-*,counters\"", 2, "shard-*", "counters"},
        {"\"shard-*, counters , x\"", 3, "shard-*", "x"},
        {"only-one", 1, "only-one", "only-one"},
        {"[\"shard-*\", \"counters\"]", 2, "shard-*", "counters"},
        {"['a', b]", 2, "a", "b"},
        {"\"*\"", 1, "*", "*"},
        {"\"\"", 0, NULL, NULL},
        {"[]", 0, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        shoal_replicator_settings_t r = rep_with("durable/keys", cases[i].text);
        if (r.n_durable_keys != cases[i].n)
            fail_msg("'%s': %zu keys", cases[i].text, r.n_durable_keys);
        if (cases[i].n) {
            assert_string_equal(r.durable_keys[0], cases[i].first);
            assert_string_equal(r.durable_keys[cases[i].n - 1], cases[i].last);
        }
    }
    rep_error("durable/keys", "\"a,,b\"", "empty key name");
    rep_error("durable/keys", "\"a*b\"", "'a*b': '*' may only end a key");
    rep_error("durable/keys", "\"a, \"", "empty key name");

    /* the strings stay valid, owned by the config, after the file text is gone */
    char *text = strdup("shoal\n    cluster\n        distributed-data\n            durable\n"
                        "                keys = \"k1,k2\"\n            role = r\n");
    shoal_config_t *cfg = parse_words(text, err, sizeof err);
    memset(text, 'x', strlen(text));
    free(text);
    shoal_replicator_settings_t r;
    rep_init(&r);
    shoal_config_replicator(cfg, &r, err, sizeof err);
    assert_string_equal(r.durable_keys[1], "k2");
    assert_string_equal(r.role, "r");
    shoal_config_destroy(&cfg);
}

static const char *endpoint_of(const char *artery, const char *caller_endpoint)
{
    static char out[128];
    char text[512];
    snprintf(text, sizeof text, "shoal\n    remote\n        artery\n%s", artery);
    shoal_config_t *cfg = parse_words(text, err, sizeof err);
    if (!cfg)
        fail_msg("%s", err);
    shoal_system_settings_t s;
    sys_init(&s);
    s.endpoint = caller_endpoint;
    assert_int_equal(shoal_config_system(cfg, &s, err, sizeof err), 0);
    snprintf(out, sizeof out, "%s", s.endpoint ? s.endpoint : "(null)");
    shoal_config_destroy(&cfg);
    return out;
}

static void test_endpoint_from_hostname_and_port(void **state)
{
    (void)state;
    const char *both = "            canonical\n                hostname = node-a.example\n"
                       "                port = 2552\n";
    const char *port = "            canonical\n                port = 2600\n";
    const char *host = "            canonical\n                hostname = 10.0.0.9\n";
    const char *v6 = "            canonical\n                hostname = \"::1\"\n"
                     "                port = 0\n";
    const char *v6b = "            canonical\n                hostname = \"[fe80::1]\"\n";
    assert_string_equal(endpoint_of(both, "tcp://1.2.3.4:1"), "tcp://node-a.example:2552");
    /* the part the file leaves out comes from the caller's endpoint */
    assert_string_equal(endpoint_of(port, "tcp://1.2.3.4:1"), "tcp://1.2.3.4:2600");
    assert_string_equal(endpoint_of(host, "tcp://1.2.3.4:17"), "tcp://10.0.0.9:17");
    assert_string_equal(endpoint_of(v6b, "tcp://[::1]:9"), "tcp://[fe80::1]:9");
    assert_string_equal(endpoint_of(port, "tcp://[::1]:9"), "tcp://[::1]:2600");
    /* ... or from Akka's defaults when it is not tcp://host:port */
    assert_string_equal(endpoint_of(port, NULL), "tcp://127.0.0.1:2600");
    assert_string_equal(endpoint_of(host, "ipc:///tmp/x"), "tcp://10.0.0.9:2552");
    assert_string_equal(endpoint_of(host, "tcp://nohost"), "tcp://10.0.0.9:2552");
    /* IPv6 goes in brackets; port 0 is an ephemeral port */
    assert_string_equal(endpoint_of(v6, NULL), "tcp://[::1]:0");
    /* no hostname nor port: the caller's endpoint stays */
    assert_string_equal(endpoint_of("            advanced\n                maximum-frame-size"
                                    " = 1 MiB\n",
                                    "ipc:///tmp/x"),
                        "ipc:///tmp/x");
    expect_error("shoal\n    remote\n        artery\n            canonical\n"
                 "                hostname = \"[::1\"\n",
                 "is not a host name or address", NULL);
    expect_error("shoal\n    remote\n        artery\n            canonical\n"
                 "                hostname = \"*\"\n",
                 "is not a host name or address", NULL);
}

static void *read_detail(void *arg)
{
    snprintf(arg, 64, "%s", shoal_last_error_detail());
    return NULL;
}

static void test_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/shoal-config-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/node.zpl", dir);

    /* THE ERROR CONVENTION: NULL, the code in *err, the words in shoal_last_error_detail() */
    int code = 0;
    /* a missing file: the name and the reason */
    shoal_config_t *cfg = shoal_config_load(path, &code);
    assert_null(cfg);
    assert_int_equal(code, SHOAL_EIO);
    assert_non_null(strstr(shoal_last_error_detail(), path));
    assert_non_null(strstr(shoal_last_error_detail(), "No such file or directory"));

    /* a good file: code 0, and no detail left over from the failure before */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(full_file, f);
    fclose(f);
    code = 1;
    cfg = shoal_config_load(path, &code);
    if (!cfg)
        fail_msg("%s", shoal_last_error_detail());
    assert_int_equal(code, 0);
    assert_string_equal(shoal_last_error_detail(), "");
    shoal_replicator_settings_t r;
    rep_init(&r);
    assert_int_equal(shoal_config_replicator(cfg, &r, err, sizeof err), 0);
    assert_int_equal(r.max_pending_ops, 5000);
    shoal_config_destroy(&cfg);

    /* a broken file: file, line and reason */
    f = fopen(path, "w");
    fputs("shoal\n    cluster\n      distributed-data\n", f);
    fclose(f);
    cfg = shoal_config_load(path, &code);
    assert_null(cfg);
    assert_int_equal(code, SHOAL_EINVAL);
    assert_non_null(strstr(shoal_last_error_detail(), path));
    assert_non_null(strstr(shoal_last_error_detail(), "line 3: indent by multiples of 4 spaces"));

    /* a bad value in a file: the key and the value */
    f = fopen(path, "w");
    fputs("shoal\n    cluster\n        distributed-data\n            gossip-interval = 2 parsecs\n",
          f);
    fclose(f);
    cfg = shoal_config_load(path, &code);
    assert_null(cfg);
    assert_int_equal(code, SHOAL_EINVAL);
    assert_non_null(
        strstr(shoal_last_error_detail(), DD "gossip-interval: '2 parsecs' is not a duration"));
    /* the detail is the calling thread's own: another thread sees its own (nothing yet) */
    pthread_t t;
    char other[64] = "unset";
    assert_int_equal(pthread_create(&t, NULL, read_detail, other), 0);
    pthread_join(t, NULL);
    assert_string_equal(other, "");
    /* err may be NULL */
    assert_null(shoal_config_load(path, NULL));
    assert_non_null(strstr(shoal_last_error_detail(), "2 parsecs"));

    /* binary junk */
    f = fopen(path, "wb");
    fwrite("shoal\0\x01\x02", 1, 8, f);
    fclose(f);
    assert_null(shoal_config_load(path, &code));
    assert_int_equal(code, SHOAL_EDECODE);
    assert_non_null(strstr(shoal_last_error_detail(), "NUL"));

    /* a directory */
    assert_null(load_words(dir, err, sizeof err));
    assert_non_null(strstr(err, dir));

    unlink(path);
    rmdir(dir);
}

static void test_broken_syntax(void **state)
{
    (void)state;
    expect_error("shoal\n   cluster\n", "line 2: indent by multiples of 4 spaces", NULL);
    expect_error("shoal\n\tcluster\n", "line 2: indent with spaces, not tabs", NULL);
    expect_error("shoal\n        cluster\n", "line 2: indented deeper", NULL);
    expect_error("    shoal\n", "line 1: indented deeper", NULL);
    expect_error("shoal\n    cluster\n        distributed-data\n            role = \"abc\n",
                 "line 4: missing closing \"", NULL);
    expect_error("shoal\n    cluster\n        distributed-data\n            role = 'a' b\n",
                 "line 4: text after the closing quote", NULL);
    expect_error("shoal\n    cluster name\n", "line 2: invalid syntax", "cluster name");
    expect_error("/shoal\n", "line 1: a name cannot start or end with '/'", NULL);
    expect_error("shoal/\n", "line 1: a name cannot start or end with '/'", NULL);
    expect_error("shoal\n    = 1\n", "line 2: invalid syntax", NULL);
    /* lines zconfig cannot hold */
    char *longline = malloc(3000);
    memset(longline, 'a', 2999);
    longline[2999] = '\0';
    expect_error(longline, "line 1: longer than 1024 characters", NULL);
    free(longline);
    /* too many entries */
    size_t n = 5000;
    char *many = malloc(n * 8 + 1);
    for (size_t i = 0; i < n; i++)
        memcpy(many + i * 8, "shoal  \n", 8);
    many[n * 8] = '\0';
    expect_error(many, "more than 4096 entries", NULL);
    free(many);
    /* comments, blank lines and CRLF are fine */
    shoal_config_t *cfg =
        parse_words("# head\r\n\r\nshoal   # trailing\r\n    # inside\r\n    cluster\r\n"
                    "        distributed-data\r\n            role = \"a # b\"   # comment\r\n",
                    err, sizeof err);
    if (!cfg)
        fail_msg("%s", err);
    shoal_replicator_settings_t r;
    rep_init(&r);
    shoal_config_replicator(cfg, &r, err, sizeof err);
    assert_string_equal(r.role, "a # b");
    shoal_config_destroy(&cfg);
}

static void test_null_arguments(void **state)
{
    (void)state;
    assert_null(parse_words(NULL, err, sizeof err));
    assert_null(load_words(NULL, err, sizeof err));
    assert_null(shoal_config_parse("junk junk", NULL)); /* err may be NULL */
    int code = 0;
    assert_null(shoal_config_parse(NULL, &code));
    assert_int_equal(code, SHOAL_EINVAL);
    char tiny[8];
    assert_null(parse_words("shoal\n    nonsense-key-that-is-long = 1\n", tiny, sizeof tiny));
    assert_int_equal(strlen(tiny), 7);
    shoal_config_t *cfg = shoal_config_parse("", NULL);
    assert_non_null(cfg);
    shoal_replicator_settings_t r;
    shoal_system_settings_t s;
    assert_int_equal(shoal_config_replicator(NULL, &r, err, sizeof err), SHOAL_EINVAL);
    assert_int_equal(shoal_config_replicator(cfg, NULL, err, sizeof err), SHOAL_EINVAL);
    assert_int_equal(shoal_config_system(NULL, &s, err, sizeof err), SHOAL_EINVAL);
    assert_int_equal(shoal_config_system(cfg, NULL, NULL, 0), SHOAL_EINVAL);
    shoal_config_destroy(&cfg);
}

/* Random edits of a valid file: every outcome is a config or a message, never a crash or leak. */
static void test_mutated_files_never_crash(void **state)
{
    (void)state;
    static const char alphabet[] = " \n\t=#\"'/*,.[]{}-0123456789sdmhKiBoffnabc\x01\xff";
    prop_rng_t rng;
    prop_rng_init(&rng, prop_seed());
    size_t base = strlen(full_file), accepted = 0;
    char *buf = malloc(base + 64);
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(buf, full_file, base + 1);
        size_t len = base;
        int edits = 1 + (int)prop_below(&rng, 4);
        for (int e = 0; e < edits; e++) {
            size_t at = prop_below(&rng, len);
            char c = alphabet[prop_below(&rng, sizeof alphabet - 1)];
            switch (prop_below(&rng, 3)) {
            case 0:
                buf[at] = c;
                break;
            case 1: /* delete */
                memmove(buf + at, buf + at + 1, len - at);
                len--;
                break;
            default: /* insert */
                if (len + 1 < base + 63) {
                    memmove(buf + at + 1, buf + at, len - at + 1);
                    buf[at] = c;
                    len++;
                }
            }
        }
        err[0] = '\0';
        shoal_config_t *cfg = parse_words(buf, err, sizeof err);
        if (cfg) {
            accepted++;
            shoal_replicator_settings_t r;
            shoal_system_settings_t s;
            rep_init(&r);
            sys_init(&s);
            assert_int_equal(shoal_config_replicator(cfg, &r, NULL, 0), 0);
            assert_int_equal(shoal_config_system(cfg, &s, NULL, 0), 0);
            shoal_config_destroy(&cfg);
        } else {
            assert_true(err[0] != '\0');
        }
    }
    free(buf);
    /* some edits (inside comments, values that stay valid) keep the file acceptable */
    assert_true(accepted > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_full_file_sets_every_field, release_held),
        cmocka_unit_test_teardown(test_unset_fields_keep_caller_values, release_held),
        cmocka_unit_test_teardown(test_unknown_keys_name_the_path, release_held),
        cmocka_unit_test_teardown(test_slash_paths_and_repeated_sections, release_held),
        cmocka_unit_test_teardown(test_durations_in_every_form, release_held),
        cmocka_unit_test_teardown(test_bad_values_name_key_and_value, release_held),
        cmocka_unit_test_teardown(test_sizes, release_held),
        cmocka_unit_test_teardown(test_off_where_akka_allows_it, release_held),
        cmocka_unit_test_teardown(test_expiry_map, release_held),
        cmocka_unit_test_teardown(test_durable_keys_list, release_held),
        cmocka_unit_test_teardown(test_endpoint_from_hostname_and_port, release_held),
        cmocka_unit_test_teardown(test_files, release_held),
        cmocka_unit_test_teardown(test_broken_syntax, release_held),
        cmocka_unit_test_teardown(test_null_arguments, release_held),
        cmocka_unit_test_teardown(test_mutated_files_never_crash, release_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
