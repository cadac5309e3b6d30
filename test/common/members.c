/*  members.c — see members.h. */
#include "members.h"

#include "cluster.h"

#include <time.h>

void tmember_settings(shoal_cluster_settings_t *s)
{
    shoal_cluster_settings_fast(s);
    uint32_t k = (uint32_t)tscale();
    s->acceptable_heartbeat_pause_ms *= k;
    s->stable_after_ms *= k;
    s->loop_stall_bound_ms *= k;
    s->phase_timeout_ms *= k;
    s->seed_node_timeout_ms *= k;
}

void tmember_data_settings(shoal_replicator_settings_t *s)
{
    tcluster_fast_settings(s);
    s->max_pruning_dissemination_ms = 1000;
}

int tmember_start(const char *endpoint, const shoal_cluster_settings_t *s, shoal_system_t **sys,
                  shoal_cluster_t **cl, shoal_replicator_t **data)
{
    shoal_system_settings_t ss;
    shoal_system_settings_default(&ss);
    ss.endpoint = endpoint;
    int err = 0;
    for (int64_t end = shoal_now_ms() + 5000;
         !(*sys = shoal_system_new(&ss, &err)) && shoal_now_ms() < end;) {
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    if (!*sys)
        return err;
    if (!(*cl = shoal_cluster_new(*sys, s, &err)))
        return err ? err : SHOAL_EINVAL;
    shoal_replicator_settings_t rs;
    tcluster_fast_settings(&rs);
    if (!(*data = shoal_replicator_new(*sys, &rs, &err)))
        return err;
    return shoal_cluster_follow(*cl, *data);
}

int tmember_start_joined(const char *endpoint, const shoal_cluster_settings_t *s, const char *seed,
                         shoal_system_t **sys, shoal_cluster_t **cl, shoal_replicator_t **data)
{
    int rc = tmember_start(endpoint, s, sys, cl, data);
    if (rc == 0)
        rc = seed ? shoal_cluster_join(*cl, &seed, 1) : shoal_cluster_join(*cl, NULL, 0);
    return rc;
}

bool tmember_all_up(shoal_cluster_t *cl, int n)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(cl, &v) != 0)
        return false;
    int up = 0;
    for (size_t k = 0; k < v.n_members; k++)
        up += v.members[k].status == SHOAL_MEMBER_UP;
    bool ok = (int)v.n_members == n && up == n;
    shoal_cluster_view_free(&v);
    return ok;
}
