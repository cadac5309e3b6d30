/*  config.c — sharding settings from a configuration file (shoal_config_sharding).

    ddata's loader knows every key under shoal/cluster/sharding/ (its table in ddata/config.c) and
    has checked each value's form and range when the file loaded: durations, "off", zero, the
    uint32_t bound, number-of-shards and buffer-size >= 1, rebalance-relative-limit in (0, 1],
    and the words of the choices. What is left here is what the loader cannot know: "all" as a
    majority plus, the allocation strategy's word as an enum, the passivation strategy's name
    against the sections the file gives, and what Shoal cannot honour (leases).

    The passivation, remember-entities and entity-recovery keys have no settings fields yet; they
    are checked here so that a file that will not work later fails now, and are read by the code
    that uses them with the same getters.

    Like the other fillers, this overwrites only what the file sets: the caller starts from
    shoal_sharding_settings_default (or _fast) and the file changes what it names. A file that
    fails leaves *out as it was.
*/
#include "sharding.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CLUSTER "shoal/cluster/"
#define SH      CLUSTER "sharding/"
#define LSA     SH "least-shard-allocation-strategy/"
#define PASS    SH "passivation/"

/* The plain settings: ddata reads each row straight into the field (of the row's type). */
typedef shoal_sharding_settings_t settings_t;
#define MS32(path, f)   SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_MS32, f, uint32_t)
#define U32(path, f)    SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_U32, f, uint32_t)
#define DOUBLE(path, f) SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_DOUBLE, f, double)
#define BOOL(path, f)   SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_BOOL, f, bool)

static const shoal_cfg_field_t fields[] = {
    U32(SH "number-of-shards", number_of_shards),
    U32(SH "buffer-size", buffer_size),
    MS32(SH "retry-interval", retry_interval_ms),
    MS32(SH "handoff-timeout", handoff_timeout_ms),
    MS32(SH "shard-start-timeout", shard_start_timeout_ms),
    MS32(SH "rebalance-interval", rebalance_interval_ms),
    MS32(SH "waiting-for-state-timeout", waiting_for_state_timeout_ms),
    MS32(SH "updating-state-timeout", updating_state_timeout_ms),
    MS32(SH "shard-region-query-timeout", shard_region_query_timeout_ms),
    U32(SH "distributed-data/majority-min-cap", majority_min_cap),
    MS32(CLUSTER "down-removal-margin", down_removal_margin_ms),
    U32(LSA "rebalance-absolute-limit", allocation.rebalance_absolute_limit),
    DOUBLE(LSA "rebalance-relative-limit", allocation.rebalance_relative_limit),
    U32(LSA "rebalance-threshold", allocation.rebalance_threshold),
    U32(LSA "max-simultaneous-rebalance", allocation.max_simultaneous_rebalance),
    U32(SH "consistent-hashing-allocation-strategy/rebalance-limit",
        allocation.hashing_rebalance_limit),
    BOOL(SH "entity-state/enabled", entity_state),
    MS32(SH "entity-state/write-timeout", state_write_timeout_ms),
    BOOL(SH "entity-state/write-all", state_write_all),
    U32(SH "entity-state/write-majority-plus", state_write_majority_plus),
    MS32(SH "entity-state/tombstone-ttl", state_tombstone_ttl_ms),
};

/* coordinator-state/{write,read}-majority-plus: a whole number, or "all" (Akka's Int.MaxValue)
   read as UINT32_MAX, which is therefore not a number one may write. */
static int read_majority_plus(const shoal_config_t *cfg, const char *path, uint32_t *out, char *err,
                              size_t errlen)
{
    const char *v = shoal_config_get(cfg, path);
    if (!v)
        return 0;
    if (strcmp(v, "all") == 0) {
        *out = UINT32_MAX;
        return 0;
    }
    uint64_t n = 0;
    const char *d = v;
    for (; *d >= '0' && *d <= '9' && n < UINT32_MAX; d++)
        n = n * 10 + (uint64_t)(*d - '0');
    if (d == v || (*d && (*d < '0' || *d > '9')))
        return shoal_config_error(err, errlen, "%s: '%s' is not a whole number nor all", path, v);
    if (*d || n >= UINT32_MAX)
        return shoal_config_error(err, errlen, "%s: '%s' is too large (at most %u, or all)", path,
                                  v, UINT32_MAX - 1);
    *out = (uint32_t)n;
    return 0;
}

static const struct {
    const char *word;
    shoal_alloc_kind_t kind;
} allocators[] = {
    {"least-shards", SHOAL_ALLOC_LEAST_SHARDS},
    {"consistent-hashing", SHOAL_ALLOC_CONSISTENT_HASHING},
    {"external", SHOAL_ALLOC_EXTERNAL},
};
#define N_ALLOCATORS (sizeof allocators / sizeof allocators[0])

static int read_allocation_kind(const shoal_config_t *cfg, settings_t *out, char *err,
                                size_t errlen)
{
    const char *path = SH "allocation-strategy";
    const char *word = shoal_config_get(cfg, path);
    if (!word)
        return 0;
    for (size_t i = 0; i < N_ALLOCATORS; i++)
        if (strcmp(allocators[i].word, word) == 0) {
            out->allocation.kind = allocators[i].kind;
            return 0;
        }
    /* the loader checks the word; kept in step with its table */
    return shoal_config_error(err, errlen, "%s: '%s' is not a known strategy", path, word);
}

/* A lease would make a shard (or the coordinator) wait for a lock Shoal has no way to take, so
   a file that asks for one is refused rather than run without it. */
static int check_no_lease(const shoal_config_t *cfg, const char *path, char *err, size_t errlen)
{
    const char *v = shoal_config_get(cfg, path);
    if (v && v[0])
        return shoal_config_error(err, errlen,
                                  "%s: '%s': leases are not supported (leave it empty)", path, v);
    return 0;
}

/* A segment proportion: a decimal in [0, 1] ("0.2", "1", "1.0"). */
static bool is_fraction(const char *s)
{
    const char *p = s;
    bool one = *p == '1';
    if (*p != '0' && *p != '1')
        return false;
    p++;
    if (*p == '.') {
        p++;
        if (!*p)
            return false;
        for (; *p; p++)
            if (*p < '0' || *p > '9' || (one && *p != '0'))
                return false;
    }
    return *p == '\0';
}

static int check_proportions(const shoal_config_t *cfg, const char *strategy, const char *under,
                             char *err, size_t errlen)
{
    char path[512];
    int len = snprintf(path, sizeof path, PASS "%s/%sleast-recently-used/segmented/proportions",
                       strategy, under);
    if (len < 0 || (size_t)len >= sizeof path)
        return shoal_config_error(err, errlen, PASS "%s: strategy name too long", strategy);
    const char *const *items = NULL;
    size_t n = 0;
    int rc = shoal_config_list(cfg, path, &items, &n, err, errlen);
    if (rc < 0)
        return rc;
    for (size_t i = 0; rc == 1 && i < n; i++)
        if (!is_fraction(items[i]))
            return shoal_config_error(err, errlen, "%s: '%s' is not a proportion between 0 and 1",
                                      path, items[i]);
    return 0;
}

/* passivation/strategy names off, none, a built-in strategy or a section of the file; every
   strategy section's proportion lists hold fractions. */
static int check_passivation(const shoal_config_t *cfg, char *err, size_t errlen)
{
    const char *const *names = NULL;
    size_t n = shoal_config_sections(cfg, SH "passivation", &names);
    const char *path = PASS "strategy";
    const char *strategy = shoal_config_get(cfg, path);
    if (strategy && strcmp(strategy, "off") != 0 && strcmp(strategy, "none") != 0 &&
        strcmp(strategy, "default-idle-strategy") != 0 &&
        strcmp(strategy, "default-strategy") != 0) {
        size_t i = 0;
        while (i < n && strcmp(names[i], strategy) != 0)
            i++;
        if (i == n)
            return shoal_config_error(
                err, errlen,
                "%s: '%s' is not off, none, default-idle-strategy, default-strategy nor a "
                "section of %s",
                path, strategy, SH "passivation");
    }
    for (size_t i = 0; i < n; i++) {
        int rc = check_proportions(cfg, names[i], "replacement/", err, errlen);
        if (rc == 0)
            rc = check_proportions(cfg, names[i], "admission/window/", err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

int shoal_config_sharding(const shoal_config_t *cfg, shoal_sharding_settings_t *out, char *err,
                          size_t errlen)
{
    if (!cfg || !out)
        return shoal_config_error(err, errlen, "shoal_config_sharding: NULL argument");
    settings_t s = *out;
    int rc = shoal_config_fields(cfg, fields, sizeof fields / sizeof fields[0], &s, err, errlen);
    if (rc == 0) {
        const char *role = shoal_config_get(cfg, SH "role");
        if (role)
            s.role = role; /* "" = every member, as the field means */
    }
    if (rc == 0)
        rc = read_majority_plus(cfg, SH "coordinator-state/write-majority-plus",
                                &s.write_majority_plus, err, errlen);
    if (rc == 0)
        rc = read_majority_plus(cfg, SH "coordinator-state/read-majority-plus",
                                &s.read_majority_plus, err, errlen);
    if (rc == 0)
        rc = read_allocation_kind(cfg, &s, err, errlen);
    if (rc == 0)
        rc = check_no_lease(cfg, SH "use-lease", err, errlen);
    if (rc == 0)
        rc = check_no_lease(cfg, SH "coordinator-singleton/use-lease", err, errlen);
    if (rc == 0)
        rc = check_passivation(cfg, err, errlen);
    if (rc < 0)
        return rc;
    *out = s;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}
