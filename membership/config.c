/*  config.c — cluster settings from a configuration file (shoal_config_cluster).

    ddata's loader knows every membership key (its table in ddata/config.c) and has already
    checked each value's form and range when the file loaded: durations, "off", zero, the uint32_t
    bound, probability within [0, 1], threshold > 0, monitored-by and max-sample-size >= 1, and the
    split-brain strategy's word. What is left here is what ddata cannot know: the meaning of "on"
    for the two keys that take it, seed endpoints, which strategy's role applies, and the checks
    that involve two keys (a quorum size for an active static-quorum).

    Like the other fillers, this overwrites only what the file sets: the caller starts from
    shoal_cluster_settings_default (or _fast) and the file changes what it names.
*/
#include "membership.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CLUSTER "shoal/cluster/"
#define FD      CLUSTER "failure-detector/"
#define SBR     CLUSTER "split-brain-resolver/"
#define CS      "shoal/coordinated-shutdown/"
#define BOOT    "shoal/management/cluster/bootstrap/contact-point-discovery/"

/* Akka's ClusterSettings: allow-weakly-up-members = on means 7 s. */
#define WEAKLY_UP_ON_MS 7000
/* down-all-when-unstable = on: the field's marker for "derive it from stable-after". */
#define DOWN_ALL_ON -1

/* The plain settings: ddata reads each row straight into the field (of the row's type). */
typedef shoal_cluster_settings_t settings_t;
#define MS32(path, f)   SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_MS32, f, uint32_t)
#define U32(path, f)    SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_U32, f, uint32_t)
#define DOUBLE(path, f) SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_DOUBLE, f, double)
#define BOOL(path, f)   SHOAL_CFG_FIELD(settings_t, path, SHOAL_CFG_BOOL, f, bool)

static const shoal_cfg_field_t fields[] = {
    MS32(CLUSTER "seed-node-timeout", seed_node_timeout_ms),
    MS32(CLUSTER "retry-unsuccessful-join-after", retry_unsuccessful_join_after_ms),
    MS32(CLUSTER "shutdown-after-unsuccessful-join-seed-nodes",
         shutdown_after_unsuccessful_join_ms),
    U32(CLUSTER "min-nr-of-members", min_nr_of_members),
    MS32(CLUSTER "gossip-interval", gossip_interval_ms),
    DOUBLE(CLUSTER "gossip-different-view-probability", gossip_different_view_probability),
    U32(CLUSTER "reduce-gossip-different-view-probability",
        reduce_gossip_different_view_probability),
    MS32(CLUSTER "gossip-time-to-live", gossip_time_to_live_ms),
    MS32(CLUSTER "leader-actions-interval", leader_actions_interval_ms),
    MS32(FD "heartbeat-interval", heartbeat_interval_ms),
    DOUBLE(FD "threshold", threshold),
    U32(FD "max-sample-size", max_sample_size),
    MS32(FD "min-std-deviation", min_std_deviation_ms),
    MS32(FD "acceptable-heartbeat-pause", acceptable_heartbeat_pause_ms),
    MS32(FD "expected-response-after", expected_response_after_ms),
    U32(FD "monitored-by-nr-of-members", monitored_by_nr_of_members),
    U32(FD "indirect-probes", indirect_probes),
    MS32(FD "loop-stall-bound", loop_stall_bound_ms),
    MS32(SBR "stable-after", stable_after_ms),
    U32(SBR "static-quorum/quorum-size", static_quorum_size),
    BOOL(SBR "keep-oldest/down-if-alone", keep_oldest_down_if_alone),
    MS32(SBR "fence-after", fence_after_ms),
    MS32(SBR "fence-margin", fence_margin_ms),
    MS32(CS "default-phase-timeout", phase_timeout_ms),
    U32(BOOT "required-contact-point-nr", required_contact_point_nr),
    MS32(BOOT "stable-margin", stable_margin_ms),
    MS32(BOOT "interval", discovery_interval_ms),
};

/* A seed is an endpoint Shoal can dial and name a member by: tcp://host:port, port 1..65535. */
static bool is_tcp_endpoint(const char *s)
{
    if (strncmp(s, "tcp://", 6) != 0)
        return false;
    const char *host = s + 6, *colon = strrchr(host, ':');
    if (!colon || colon == host || !colon[1] || strlen(colon + 1) > 5)
        return false;
    unsigned port = 0;
    for (const char *d = colon + 1; *d; d++) {
        if (*d < '0' || *d > '9')
            return false;
        port = port * 10 + (unsigned)(*d - '0');
    }
    return port >= 1 && port <= 65535;
}

static int read_lists(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                      size_t errlen)
{
    const char *const *items = NULL;
    size_t n = 0;
    int rc = shoal_config_list(cfg, CLUSTER "seed-nodes", &items, &n, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        for (size_t i = 0; i < n; i++)
            if (!is_tcp_endpoint(items[i]))
                return shoal_config_error(err, errlen,
                                          "%s: '%s' is not an endpoint tcp://host:port",
                                          CLUSTER "seed-nodes", items[i]);
        out->seed_nodes = n ? items : NULL;
        out->n_seed_nodes = n;
    }
    rc = shoal_config_list(cfg, CLUSTER "roles", &items, &n, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        out->roles = n ? items : NULL;
        out->n_roles = n;
    }
    return 0;
}

/* role/<name>/min-nr-of-members sections: the array lives as long as cfg. */
static int read_role_min(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                         size_t errlen)
{
    const char *const *names = NULL;
    size_t n = shoal_config_sections(cfg, CLUSTER "role", &names);
    if (n == 0)
        return 0;
    shoal_role_min_t *mins = shoal_config_alloc(cfg, n * sizeof *mins);
    for (size_t i = 0; i < n; i++) {
        char path[512];
        int len = snprintf(path, sizeof path, CLUSTER "role/%s/min-nr-of-members", names[i]);
        if (len < 0 || (size_t)len >= sizeof path)
            return shoal_config_error(err, errlen, "%s/%s: role name too long", CLUSTER "role",
                                      names[i]);
        /* a section without the key reads as 0: mins comes zeroed */
        const shoal_cfg_field_t row =
            SHOAL_CFG_FIELD(shoal_role_min_t, path, SHOAL_CFG_U32, min, uint32_t);
        int rc = shoal_config_fields(cfg, &row, 1, &mins[i], err, errlen);
        if (rc < 0)
            return rc;
        mins[i].role = names[i];
    }
    out->role_min = mins;
    out->n_role_min = n;
    return 0;
}

/* allow-weakly-up-members and down-all-when-unstable: on, off, or a duration. */
static int read_weakly_up(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                          size_t errlen)
{
    const char *path = CLUSTER "allow-weakly-up-members";
    const char *raw = shoal_config_get(cfg, path);
    if (!raw)
        return 0;
    if (strcmp(raw, "on") == 0) {
        out->allow_weakly_up_members = true;
        out->weakly_up_after_ms = WEAKLY_UP_ON_MS;
        return 0;
    }
    uint64_t ms = 0;
    int rc = shoal_config_duration(cfg, path, &ms, err, errlen);
    if (rc < 0)
        return rc;
    out->allow_weakly_up_members = ms != 0; /* "off" reads as 0 */
    if (ms)
        out->weakly_up_after_ms = (uint32_t)ms;
    return 0;
}

static int read_down_all(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                         size_t errlen)
{
    const char *path = SBR "down-all-when-unstable";
    const char *raw = shoal_config_get(cfg, path);
    if (!raw)
        return 0;
    if (strcmp(raw, "on") == 0) {
        out->down_all_when_unstable_ms = DOWN_ALL_ON;
        return 0;
    }
    uint64_t ms = 0;
    int rc = shoal_config_duration(cfg, path, &ms, err, errlen);
    if (rc < 0)
        return rc;
    out->down_all_when_unstable_ms = (int64_t)ms; /* off = 0 */
    return 0;
}

static const struct {
    const char *name;
    shoal_sbr_strategy_t strategy;
    const char *role_path; /* NULL: the strategy takes no role */
} strategies[] = {
    {"keep-majority", SHOAL_SBR_KEEP_MAJORITY, SBR "keep-majority/role"},
    {"keep-oldest", SHOAL_SBR_KEEP_OLDEST, SBR "keep-oldest/role"},
    {"static-quorum", SHOAL_SBR_STATIC_QUORUM, SBR "static-quorum/role"},
    {"down-all", SHOAL_SBR_DOWN_ALL, NULL},
    {"off", SHOAL_SBR_OFF, NULL},
};
#define N_STRATEGIES (sizeof strategies / sizeof strategies[0])

/* active-strategy, then the role of whichever strategy is active (the file's, else the
   caller's): Akka reads <strategy>.role of the active one only. "" means every member. */
static int read_sbr(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                    size_t errlen)
{
    const char *path = SBR "active-strategy";
    const char *word = shoal_config_get(cfg, path);
    if (word) {
        size_t i = 0;
        while (i < N_STRATEGIES && strcmp(strategies[i].name, word) != 0)
            i++;
        if (i == N_STRATEGIES) /* the loader checks the word; kept in step with its table */
            return shoal_config_error(err, errlen, "%s: '%s' is not a known strategy", path, word);
        out->sbr_strategy = strategies[i].strategy;
    }
    for (size_t i = 0; i < N_STRATEGIES; i++) {
        if (strategies[i].strategy != out->sbr_strategy || !strategies[i].role_path)
            continue;
        const char *role = shoal_config_get(cfg, strategies[i].role_path);
        if (role)
            out->sbr_role = role[0] ? role : NULL;
    }
    /* checked when the file is involved: the caller's own settings are the caller's business */
    bool involved = word || shoal_config_get(cfg, SBR "static-quorum/quorum-size");
    if (involved && out->sbr_strategy == SHOAL_SBR_STATIC_QUORUM && out->static_quorum_size < 1)
        return shoal_config_error(err, errlen,
                                  "%s: must be set to at least 1 when %s is static-quorum",
                                  SBR "static-quorum/quorum-size", path);
    return 0;
}

/* Seed discovery's name and resolver: their form is checked here, so a bad one names its key at
   start instead of failing when the node starts resolving. "" = off (the default). */
static int read_discovery(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                          size_t errlen)
{
    const char *paths[] = {BOOT "discover", BOOT "resolver"};
    const char **dst[] = {&out->discovery, &out->discovery_resolver};
    for (size_t i = 0; i < 2; i++) {
        const char *v = shoal_config_get(cfg, paths[i]);
        if (!v)
            continue;
        char why[300];
        if (v[0] && shoal_discovery_check(i ? NULL : v, i ? v : NULL, why, sizeof why) < 0)
            return shoal_config_error(err, errlen, "%s: %s", paths[i], why);
        *dst[i] = v[0] ? v : NULL;
    }
    if (out->discovery && out->n_seed_nodes)
        return shoal_config_error(err, errlen, "%s and %s: give one of them", BOOT "discover",
                                  CLUSTER "seed-nodes");
    return 0;
}

int shoal_config_cluster(const shoal_config_t *cfg, shoal_cluster_settings_t *out, char *err,
                         size_t errlen)
{
    if (!cfg || !out)
        return shoal_config_error(err, errlen, "shoal_config_cluster: NULL argument");
    /* Fill a copy: a file that fails leaves *out as it was. */
    shoal_cluster_settings_t s = *out;
    int rc = shoal_config_fields(cfg, fields, sizeof fields / sizeof fields[0], &s, err, errlen);
    if (rc == 0)
        rc = read_lists(cfg, &s, err, errlen);
    if (rc == 0)
        rc = read_role_min(cfg, &s, err, errlen);
    if (rc == 0)
        rc = read_weakly_up(cfg, &s, err, errlen);
    if (rc == 0)
        rc = read_down_all(cfg, &s, err, errlen);
    if (rc == 0) {
        const char *v = shoal_config_get(cfg, CLUSTER "app-version");
        if (v && !v[0])
            rc = shoal_config_error(err, errlen, "%s: the version is empty", CLUSTER "app-version");
        else if (v)
            s.app_version = v;
    }
    if (rc == 0) {
        const char *path = FD "heartbeat-endpoint";
        const char *v = shoal_config_get(cfg, path);
        if (v && v[0] && strncmp(v, "tcp://", 6) != 0)
            rc = shoal_config_error(err, errlen, "%s: '%s' is not a tcp:// endpoint", path, v);
        else if (v)
            s.heartbeat_endpoint = v[0] ? v : NULL; /* "" = the default: an ephemeral port */
    }
    if (rc == 0)
        rc = read_sbr(cfg, &s, err, errlen);
    if (rc == 0)
        rc = read_discovery(cfg, &s, err, errlen);
    if (rc < 0)
        return rc;
    *out = s;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}
