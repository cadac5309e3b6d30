/*  config.c — sharding settings from a configuration file (shoal_config_sharding).

    ddata's loader knows every key under shoal/cluster/sharding/ (its table in ddata/config.c) and
    has checked each value's form and range when the file loaded: durations, "off", zero, the
    uint32_t bound, number-of-shards and buffer-size >= 1, rebalance-relative-limit in (0, 1],
    and the words of the choices. What is left here is what the loader cannot know: "all" as a
    majority plus, the allocation strategy's word as an enum, the passivation strategy's name
    against the sections the file gives, what a strategy's keys make together (Akka's
    PassivationStrategySettings), the layering of sharding's own replicator over
    distributed-data, and what Shoal cannot honour (leases, passivation parts its passivator lacks).

    Like the other fillers, this overwrites only what the file sets: the caller starts from
    shoal_sharding_settings_default (or _fast) and the file changes what it names. A file that
    fails leaves *out as it was.
*/
#include "sharding.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLUSTER "shoal/cluster/"
#define SH      CLUSTER "sharding/"
#define LSA     SH "least-shard-allocation-strategy/"
#define PASS    SH "passivation/"
#define SH_DD   SH "distributed-data/"
#define DD      CLUSTER "distributed-data/"

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
    BOOL(SH "remember-entities", remember_entities),
    MS32(SH "shard-failure-backoff", shard_failure_backoff_ms),
    MS32(SH "entity-restart-backoff", entity_restart_backoff_ms),
    MS32(SH "entity-recovery-constant-rate-strategy/frequency", recovery_frequency_ms),
    U32(SH "entity-recovery-constant-rate-strategy/number-of-entities",
        recovery_number_of_entities),
    /* not part of a strategy: kept when the strategy's section makes the passivation anew */
    MS32(PASS "stop-timeout", passivation.stop_timeout_ms),
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

/* entity-recovery-strategy: all (at once) or constant (recovery_frequency_ms,
   recovery_number_of_entities). */
static int read_recovery(const shoal_config_t *cfg, settings_t *out, char *err, size_t errlen)
{
    const char *path = SH "entity-recovery-strategy";
    const char *word = shoal_config_get(cfg, path);
    if (!word)
        return 0;
    if (strcmp(word, "all") == 0 || strcmp(word, "constant") == 0) {
        out->recovery_constant_rate = word[0] == 'c';
        return 0;
    }
    /* the loader checks the word; kept in step with its table */
    return shoal_config_error(err, errlen, "%s: '%s' is not all nor constant", path, word);
}

/* ---------------------------------------------------------------------------------------------
 * Passivation: Akka's strategy sections (ClusterShardingSettings.PassivationStrategySettings)
 */

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

#define SEGMENTS_MAX (sizeof((shoal_passivation_settings_t *)0)->slru_proportions / sizeof(double))

/* A key and where its value goes in a struct of this file (for the kinds the field table of
   ddata.h, shoal_cfg_field_t, does not have). */
typedef struct {
    const char *key;
    size_t off;
} key_at_t;

typedef enum { POL_NONE = 0, POL_LRU, POL_MRU, POL_LFU } policy_word_t;

/* One replacement policy of a strategy (the main area's, or the admission window's). */
typedef struct {
    policy_word_t policy;
    uint32_t levels;            /* least-recently-used.segmented.levels, 0 = none */
    double props[SEGMENTS_MAX]; /* ...segmented.proportions */
    size_t n_props;
    bool aging; /* least-frequently-used.dynamic-aging */
} policy_t;

/* What a strategy's keys say, before it becomes shoal_passivation_settings_t: Akka's
   strategy-defaults, then the file's strategy-defaults section, then the built-in section of
   that name (default-idle-strategy, default-strategy), then the file's section. */
typedef struct {
    uint32_t idle_timeout_ms; /* 0 = none */
    uint32_t idle_interval_ms;
    uint32_t limit; /* 0 = none */
    policy_t main, window;
    bool filter; /* frequency-sketch */
    bool hill_climbing;
    double window_proportion, window_min, window_max;
    double adjust_multiplier, initial_step, restart_threshold, step_decay;
} strategy_t;

static void strategy_defaults(strategy_t *t)
{
    shoal_passivation_settings_t d;
    shoal_passivation_settings_default(&d);
    memset(t, 0, sizeof *t);
    t->window_proportion = d.window_proportion;
    t->window_min = d.window_min_proportion;
    t->window_max = d.window_max_proportion;
    t->adjust_multiplier = d.adjust_multiplier;
    t->initial_step = d.initial_step;
    t->restart_threshold = d.restart_threshold;
    t->step_decay = d.step_decay;
}

/* Akka's reference sections. */
static void builtin_section(const char *name, strategy_t *t)
{
    if (strcmp(name, "default-idle-strategy") == 0) {
        t->idle_timeout_ms = 120000;
    } else if (strcmp(name, "default-strategy") == 0) {
        t->limit = 100000;
        t->window.policy = POL_LRU;
        t->hill_climbing = true;
        t->filter = true;
        t->main.policy = POL_LRU;
        t->main.levels = 2;
        t->main.props[0] = 0.2, t->main.props[1] = 0.8;
        t->main.n_props = 2;
    }
}

/* "<PASS><name>/<key>" into path; SHOAL_EINVAL when it does not fit. */
static int key_path(char *path, size_t cap, const char *name, const char *key, char *err,
                    size_t errlen)
{
    int len = snprintf(path, cap, PASS "%s/%s", name, key);
    if (len < 0 || (size_t)len >= cap)
        return shoal_config_error(err, errlen, PASS "%s: strategy name too long", name);
    return 0;
}

static int read_ms(const shoal_config_t *cfg, const char *name, const char *key, uint32_t *out,
                   char *err, size_t errlen)
{
    char path[512];
    uint64_t v = 0;
    int rc = key_path(path, sizeof path, name, key, err, errlen);
    if (rc == 0 && (rc = shoal_config_duration(cfg, path, &v, err, errlen)) == 1)
        *out = (uint32_t)v; /* the loader bounds these rows to uint32_t */
    return rc;
}

static int read_double(const shoal_config_t *cfg, const char *name, const char *key, double *out,
                       char *err, size_t errlen)
{
    char path[512];
    int rc = key_path(path, sizeof path, name, key, err, errlen);
    if (rc == 0)
        rc = shoal_config_double(cfg, path, out, err, errlen);
    return rc;
}

/* A choice of a section: its word in *word (NULL when not set), its path in path. */
static int read_word(const shoal_config_t *cfg, const char *name, const char *key, char *path,
                     size_t cap, const char **word, char *err, size_t errlen)
{
    int rc = key_path(path, cap, name, key, err, errlen);
    *word = rc == 0 ? shoal_config_get(cfg, path) : NULL;
    return rc;
}

/* The keys of one replacement policy under `under` ("replacement/" or "admission/window/"). */
static int read_policy(const shoal_config_t *cfg, const char *name, const char *under,
                       policy_t *pol, char *err, size_t errlen)
{
    char key[128], path[512];
    const char *word = NULL;
    snprintf(key, sizeof key, "%spolicy", under);
    int rc = read_word(cfg, name, key, path, sizeof path, &word, err, errlen);
    if (rc)
        return rc;
    if (word) {
        policy_word_t p = POL_NONE;
        if (strcmp(word, "least-recently-used") == 0)
            p = POL_LRU;
        else if (strcmp(word, "most-recently-used") == 0)
            p = POL_MRU;
        else if (strcmp(word, "least-frequently-used") == 0)
            p = POL_LFU;
        else if (strcmp(word, "off") != 0 && strcmp(word, "none") != 0)
            return shoal_config_error(err, errlen, "%s: '%s' is not a replacement policy", path,
                                      word);
        pol->policy = p;
    }
    uint64_t levels = 0;
    snprintf(key, sizeof key, "%sleast-recently-used/segmented/levels", under);
    if ((rc = key_path(path, sizeof path, name, key, err, errlen)) != 0)
        return rc;
    rc = shoal_config_uint(cfg, path, &levels, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (levels > SEGMENTS_MAX)
            return shoal_config_error(err, errlen, "%s: %llu segments: at most %zu", path,
                                      (unsigned long long)levels, (size_t)SEGMENTS_MAX);
        pol->levels = (uint32_t)levels; /* off (0) and 1: plain LRU */
    }
    snprintf(key, sizeof key, "%sleast-recently-used/segmented/proportions", under);
    if ((rc = key_path(path, sizeof path, name, key, err, errlen)) != 0)
        return rc;
    const char *const *items = NULL;
    size_t n = 0;
    rc = shoal_config_list(cfg, path, &items, &n, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (n > SEGMENTS_MAX)
            return shoal_config_error(err, errlen, "%s: %zu proportions: at most %zu", path, n,
                                      (size_t)SEGMENTS_MAX);
        for (size_t i = 0; i < n; i++) {
            if (!is_fraction(items[i]))
                return shoal_config_error(
                    err, errlen, "%s: '%s' is not a proportion between 0 and 1", path, items[i]);
            pol->props[i] = strtod(items[i], NULL);
        }
        pol->n_props = n;
    }
    snprintf(key, sizeof key, "%sleast-frequently-used/dynamic-aging", under);
    if ((rc = key_path(path, sizeof path, name, key, err, errlen)) != 0)
        return rc;
    rc = shoal_config_bool(cfg, path, &pol->aging, err, errlen);
    return rc < 0 ? rc : 0;
}

/* The count-min sketch of Shoal's W-TinyLFU is built with Akka's defaults; another value would
   be silently different, so it is refused. */
static int check_sketch(const shoal_config_t *cfg, const char *name, char *err, size_t errlen)
{
    static const struct {
        const char *key;
        double built_in;
        bool decimal; /* read as a decimal, else as an unsigned integer */
    } fixed[] = {
        {"admission/frequency-sketch/depth", 4, false},
        {"admission/frequency-sketch/width-multiplier", 4, false},
        {"admission/frequency-sketch/reset-multiplier", 10, true},
    };
    char path[512];
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        int rc = key_path(path, sizeof path, name, fixed[i].key, err, errlen);
        if (rc)
            return rc;
        double v = fixed[i].built_in;
        uint64_t u = 0;
        if (fixed[i].decimal)
            rc = shoal_config_double(cfg, path, &v, err, errlen);
        else if ((rc = shoal_config_uint(cfg, path, &u, err, errlen)) == 1)
            v = (double)u;
        if (rc < 0)
            return rc;
        if (v != fixed[i].built_in)
            return shoal_config_error(err, errlen,
                                      "%s: '%s': Shoal's frequency sketch is built with %g (Akka's "
                                      "default) and takes no other value",
                                      path, shoal_config_get(cfg, path), fixed[i].built_in);
    }
    const char *word = NULL;
    int rc = read_word(cfg, name, "admission/frequency-sketch/counter-bits", path, sizeof path,
                       &word, err, errlen);
    if (rc == 0 && word && strcmp(word, "4") != 0)
        return shoal_config_error(err, errlen,
                                  "%s: '%s': Shoal's frequency sketch has 4-bit counters (Akka's "
                                  "default) and takes no other width",
                                  path, word);
    return rc;
}

/* The file's keys of section `name` over *t. */
static int read_section(const shoal_config_t *cfg, const char *name, strategy_t *t, char *err,
                        size_t errlen)
{
    char path[512];
    uint64_t limit = 0;
    int rc = read_ms(cfg, name, "idle-entity/timeout", &t->idle_timeout_ms, err, errlen);
    if (rc >= 0)
        rc = read_ms(cfg, name, "idle-entity/interval", &t->idle_interval_ms, err, errlen);
    if (rc >= 0 &&
        (rc = key_path(path, sizeof path, name, "active-entity-limit", err, errlen)) == 0 &&
        (rc = shoal_config_uint(cfg, path, &limit, err, errlen)) == 1) {
        t->limit = (uint32_t)limit; /* off = 0 = none; the loader bounds the row to uint32_t */
    }
    if (rc >= 0)
        rc = read_policy(cfg, name, "replacement/", &t->main, err, errlen);
    if (rc >= 0)
        rc = read_policy(cfg, name, "admission/window/", &t->window, err, errlen);
    const char *word = NULL;
    if (rc >= 0)
        rc = read_word(cfg, name, "admission/window/optimizer", path, sizeof path, &word, err,
                       errlen);
    if (rc >= 0 && word)
        t->hill_climbing = strcmp(word, "hill-climbing") == 0;
    if (rc >= 0)
        rc = read_word(cfg, name, "admission/filter", path, sizeof path, &word, err, errlen);
    if (rc >= 0 && word)
        t->filter = strcmp(word, "frequency-sketch") == 0;
    static const key_at_t decimals[] = {
        {"admission/window/proportion", offsetof(strategy_t, window_proportion)},
        {"admission/window/minimum-proportion", offsetof(strategy_t, window_min)},
        {"admission/window/maximum-proportion", offsetof(strategy_t, window_max)},
        {"admission/window/hill-climbing/adjust-multiplier",
         offsetof(strategy_t, adjust_multiplier)},
        {"admission/window/hill-climbing/initial-step", offsetof(strategy_t, initial_step)},
        {"admission/window/hill-climbing/restart-threshold",
         offsetof(strategy_t, restart_threshold)},
        {"admission/window/hill-climbing/step-decay", offsetof(strategy_t, step_decay)},
    };
    for (size_t i = 0; rc >= 0 && i < sizeof decimals / sizeof decimals[0]; i++)
        rc = read_double(cfg, name, decimals[i].key,
                         (double *)(void *)((char *)t + decimals[i].off), err, errlen);
    if (rc >= 0)
        rc = check_sketch(cfg, name, err, errlen);
    return rc < 0 ? rc : 0;
}

/* The segments of a segmented LRU into p (levels 0/1: plain); the proportions, when given, one
   per segment. */
static int segments_of(const policy_t *pol, const char *name, shoal_passivation_settings_t *p,
                       char *err, size_t errlen)
{
    if (pol->n_props && pol->n_props != (pol->levels > 1 ? pol->levels : 1))
        return shoal_config_error(err, errlen,
                                  PASS "%s/replacement/least-recently-used/segmented/proportions: "
                                       "%zu proportions for %u segments",
                                  name, pol->n_props, pol->levels);
    p->slru_levels = pol->levels;
    memset(p->slru_proportions, 0, sizeof p->slru_proportions);
    for (size_t i = 0; i < pol->n_props && pol->levels > 1; i++)
        p->slru_proportions[i] = pol->props[i];
    return 0;
}

/* Akka's defaults, keeping p's stop-timeout (passivation.stop-timeout is not a strategy's). */
static void fresh_passivation(shoal_passivation_settings_t *p)
{
    uint32_t stop_timeout_ms = p->stop_timeout_ms;
    shoal_passivation_settings_default(p);
    p->stop_timeout_ms = stop_timeout_ms;
}

/* What strategy t makes, in Shoal's passivator's terms (passivation.h, POLICIES). */
static int strategy_settings(const strategy_t *t, const char *name, shoal_passivation_settings_t *p,
                             char *err, size_t errlen)
{
    fresh_passivation(p);
    p->idle_timeout_ms = t->idle_timeout_ms;
    p->idle_interval_ms = t->idle_interval_ms;
    p->active_entity_limit = t->limit;
    bool admission = t->window.policy != POL_NONE || t->filter;
    if (!t->limit) {
        /* Akka: without a limit the replacement and admission keys do nothing; the idle
           strategy, or none without an idle timeout */
        p->policy = t->idle_timeout_ms ? SHOAL_PASSIVATE_IDLE : SHOAL_PASSIVATE_NONE;
        return 0;
    }
    if (admission) {
        /* Akka's composite: Shoal has the one of its default-strategy, W-TinyLFU */
        if (t->window.policy != POL_LRU || t->window.levels > 1)
            return shoal_config_error(
                err, errlen,
                PASS "%s/admission/window/policy: the admission window is a plain "
                     "least-recently-used one in Shoal (W-TinyLFU); %s",
                name,
                t->window.policy == POL_NONE ? "a filter needs it" : "no other policy or segments");
        if (!t->filter)
            return shoal_config_error(err, errlen,
                                      PASS "%s/admission/filter: a window needs the "
                                           "frequency-sketch filter in Shoal (W-TinyLFU)",
                                      name);
        if (t->main.policy != POL_LRU || t->main.levels < 2)
            return shoal_config_error(err, errlen,
                                      PASS
                                      "%s/replacement: with an admission window the main "
                                      "area is a segmented least-recently-used one in Shoal "
                                      "(W-TinyLFU): policy least-recently-used, segmented levels "
                                      "2 to %zu",
                                      name, (size_t)SEGMENTS_MAX);
        p->policy = SHOAL_PASSIVATE_TINYLFU;
        p->hill_climbing = t->hill_climbing;
        p->window_proportion = t->window_proportion;
        p->window_min_proportion = t->window_min;
        p->window_max_proportion = t->window_max;
        p->adjust_multiplier = t->adjust_multiplier;
        p->initial_step = t->initial_step;
        p->restart_threshold = t->restart_threshold;
        p->step_decay = t->step_decay;
        return segments_of(&t->main, name, p, err, errlen);
    }
    switch (t->main.policy) {
    case POL_LRU:
        p->policy = SHOAL_PASSIVATE_LRU;
        return segments_of(&t->main, name, p, err, errlen);
    case POL_MRU:
        p->policy = SHOAL_PASSIVATE_MRU;
        return 0;
    case POL_LFU:
        p->policy = SHOAL_PASSIVATE_LFU;
        p->lfu_dynamic_aging = t->main.aging;
        return 0;
    case POL_NONE:
        break;
    }
    /* Akka ignores a limit without a replacement policy; a limit that nothing enforces would
       be lost without a word, so it is refused */
    return shoal_config_error(err, errlen,
                              PASS "%s/active-entity-limit: a limit needs a replacement policy "
                                   "(set replacement/policy in the section)",
                              name);
}

/* passivation/strategy names off, none, a built-in strategy or a section of the file; every
   strategy section's proportion lists hold fractions. Then the strategy in force makes
   out->passivation (see shoal_config_sharding in sharding.h). */
static int read_passivation(const shoal_config_t *cfg, shoal_passivation_settings_t *out, char *err,
                            size_t errlen)
{
    const char *const *names = NULL;
    size_t n = shoal_config_sections(cfg, SH "passivation", &names);
    const char *path = PASS "strategy";
    const char *strategy = shoal_config_get(cfg, path);
    bool builtin = strategy && (strcmp(strategy, "default-idle-strategy") == 0 ||
                                strcmp(strategy, "default-strategy") == 0);
    bool off = strategy && (strcmp(strategy, "off") == 0 || strcmp(strategy, "none") == 0);
    bool in_file = false, has_defaults = false, has_idle_section = false;
    for (size_t i = 0; i < n; i++) {
        in_file = in_file || (strategy && strcmp(names[i], strategy) == 0);
        has_defaults = has_defaults || strcmp(names[i], "strategy-defaults") == 0;
        has_idle_section = has_idle_section || strcmp(names[i], "default-idle-strategy") == 0;
    }
    if (strategy && !off && !builtin && !in_file)
        return shoal_config_error(
            err, errlen,
            "%s: '%s' is not off, none, default-idle-strategy, default-strategy nor a "
            "section of %s",
            path, strategy, SH "passivation");
    /* every section is read, used or not, so that a bad one fails now and not when it is
       named later */
    strategy_t t;
    for (size_t i = 0; i < n; i++) {
        strategy_defaults(&t);
        int rc = read_section(cfg, names[i], &t, err, errlen);
        if (rc)
            return rc;
    }

    shoal_passivation_settings_t p = *out;
    uint64_t old_ms = 0;
    const char *old = SH "passivate-idle-entity-after";
    int rc = shoal_config_duration(cfg, old, &old_ms, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        /* Akka's deprecated key wins over the strategy (ClusterShardingSettings) */
        if (strategy)
            shoal_warning("configuration: %s is set, so %s ('%s') is not used (Akka's rule for "
                          "the deprecated key)",
                          old, path, strategy);
        fresh_passivation(&p);
        p.idle_timeout_ms = (uint32_t)old_ms; /* off = 0; the loader bounds it to uint32_t */
        p.policy = old_ms ? SHOAL_PASSIVATE_IDLE : SHOAL_PASSIVATE_NONE;
    } else if (off) {
        fresh_passivation(&p);
        p.policy = SHOAL_PASSIVATE_NONE;
        p.idle_timeout_ms = 0;
    } else if (strategy || has_defaults || has_idle_section) {
        /* no strategy key: Akka's default strategy, default-idle-strategy, over what the file
           gives for it */
        const char *name = strategy ? strategy : "default-idle-strategy";
        strategy_defaults(&t);
        if (has_defaults && (rc = read_section(cfg, "strategy-defaults", &t, err, errlen)) != 0)
            return rc;
        builtin_section(name, &t);
        bool section = strategy ? in_file : has_idle_section;
        if (section && strcmp(name, "strategy-defaults") != 0 &&
            (rc = read_section(cfg, name, &t, err, errlen)) != 0)
            return rc;
        if ((rc = strategy_settings(&t, name, &p, err, errlen)) != 0)
            return rc;
    }
    *out = p;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Sharding's own replicator
 */
typedef shoal_replicator_settings_t rep_t;
#define RMS32(key, f) SHOAL_CFG_FIELD(rep_t, SH_DD key, SHOAL_CFG_MS32, f, uint32_t)
#define RU32(key, f)  SHOAL_CFG_FIELD(rep_t, SH_DD key, SHOAL_CFG_U32, f, uint32_t)
#define RBOOL(key, f) SHOAL_CFG_FIELD(rep_t, SH_DD key, SHOAL_CFG_BOOL, f, bool)

static const shoal_cfg_field_t rep_fields[] = {
    RMS32("gossip-interval", gossip_interval_ms),
    RMS32("notify-subscribers-interval", notify_subscribers_interval_ms),
    RU32("max-delta-elements", max_delta_elements),
    RMS32("pruning-interval", pruning_interval_ms),
    RMS32("max-pruning-dissemination", max_pruning_dissemination_ms),
    RBOOL("prefer-oldest", prefer_oldest),
    RBOOL("delta-crdt/enabled", delta_enabled),
    RU32("delta-crdt/max-delta-size", max_delta_size),
    RMS32("delta-interval", delta_interval_ms),
    RU32("max-pending-operations", max_pending_ops),
};

/* The uint64_t durations of the section. */
static const key_at_t rep_ms64[] = {
    {SH_DD "pruning-marker-time-to-live", offsetof(rep_t, pruning_marker_ttl_ms)},
    {SH_DD "durable/pruning-marker-time-to-live", offsetof(rep_t, durable_pruning_marker_ttl_ms)},
    {SH_DD "tombstone-time-to-live", offsetof(rep_t, tombstone_ttl_ms)},
};

static const key_at_t rep_sizes[] = {
    {SH_DD "compress-above", offsetof(rep_t, compress_above_bytes)},
    {SH_DD "max-reassembly-size", offsetof(rep_t, max_reassembly_bytes)},
};

/* shoal/cluster/sharding/distributed-data/... over rs. */
static int read_sharding_section(const shoal_config_t *cfg, rep_t *rs, char *err, size_t errlen)
{
    int rc = shoal_config_fields(cfg, rep_fields, sizeof rep_fields / sizeof rep_fields[0], rs, err,
                                 errlen);
    for (size_t i = 0; rc >= 0 && i < sizeof rep_ms64 / sizeof rep_ms64[0]; i++) {
        uint64_t v = 0;
        if ((rc = shoal_config_duration(cfg, rep_ms64[i].key, &v, err, errlen)) == 1)
            memcpy((char *)rs + rep_ms64[i].off, &v, sizeof v);
    }
    for (size_t i = 0; rc >= 0 && i < sizeof rep_sizes / sizeof rep_sizes[0]; i++) {
        size_t v = 0;
        if ((rc = shoal_config_size(cfg, rep_sizes[i].key, &v, err, errlen)) == 1)
            memcpy((char *)rs + rep_sizes[i].off, &v, sizeof v);
    }
    const char *const *keys = NULL;
    size_t n = 0;
    if (rc >= 0 && (rc = shoal_config_list(cfg, SH_DD "durable/keys", &keys, &n, err, errlen)) == 1)
        rs->durable_keys = keys, rs->n_durable_keys = n;
    const shoal_expiry_t *expiry = NULL;
    if (rc >= 0 && (rc = shoal_config_expiry(cfg, SH_DD "expire-keys-after-inactivity", &expiry, &n,
                                             err, errlen)) == 1)
        rs->expire_keys = expiry, rs->n_expire_keys = n;
    if (rc < 0)
        return rc;
    /* a gossip interval without a delta interval: deltas at a fifth of it, as Akka derives */
    if (shoal_config_get(cfg, SH_DD "gossip-interval") &&
        !shoal_config_get(cfg, SH_DD "delta-interval"))
        rs->delta_interval_ms = 0;
    return 0;
}

/* Akka: sharding.distributed-data = ${distributed-data} with sharding's overrides, then the
   file's sharding.distributed-data. out->replicator_settings points to the result (kept in cfg)
   when it differs from what it was. */
static int read_replicator(const shoal_config_t *cfg, settings_t *out, char *err, size_t errlen)
{
    rep_t rs, before;
    if (out->replicator_settings)
        memcpy(&rs, out->replicator_settings, sizeof rs);
    else
        shoal_sharding_replicator_settings_default(&rs);
    memcpy(&before, &rs, sizeof rs);
    /* distributed-data's keys, except what sharding overrides */
    int rc = shoal_config_replicator(cfg, &rs, err, errlen);
    if (rc < 0)
        return rc;
    rs.role = before.role; /* the type's role is used */
    rs.gossip_interval_ms = before.gossip_interval_ms;
    rs.delta_interval_ms = before.delta_interval_ms;
    rs.notify_subscribers_interval_ms = before.notify_subscribers_interval_ms;
    rs.max_delta_elements = before.max_delta_elements;
    rs.prefer_oldest = before.prefer_oldest;
    rs.durable_keys = before.durable_keys;
    rs.n_durable_keys = before.n_durable_keys;
    if ((rc = read_sharding_section(cfg, &rs, err, errlen)) != 0)
        return rc;
    if (memcmp(&rs, &before, sizeof rs) != 0) {
        rep_t *kept = shoal_config_alloc(cfg, sizeof *kept);
        memcpy(kept, &rs, sizeof rs);
        out->replicator_settings = kept;
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
        rc = read_recovery(cfg, &s, err, errlen);
    if (rc == 0)
        rc = read_passivation(cfg, &s.passivation, err, errlen);
    if (rc == 0)
        rc = read_replicator(cfg, &s, err, errlen);
    if (rc < 0)
        return rc;
    *out = s;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}

int shoal_config_sharding_limits(const shoal_config_t *cfg, uint64_t *max_entities, char *err,
                                 size_t errlen)
{
    if (!cfg || !max_entities)
        return shoal_config_error(err, errlen, "shoal_config_sharding_limits: NULL argument");
    *max_entities = 0;
    int rc = shoal_config_uint(cfg, SH "max-entities-per-node", max_entities, err, errlen);
    if (rc < 0)
        return rc;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}
