/*  settings.c — the cluster's settings: their defaults (shoal_cluster_settings_default, _fast),
    the names of member statuses, the fence's timing and its check, and the discovery settings'
    check (shoal_discovery_check). Nothing here touches a cluster object.
*/
#include "cluster_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Settings
 */
void shoal_cluster_settings_default(shoal_cluster_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->app_version = "0.0.0";
    s->seed_node_timeout_ms = 5000;
    s->retry_unsuccessful_join_after_ms = 10000;
    s->min_nr_of_members = 1;
    s->gossip_interval_ms = 1000;
    s->gossip_different_view_probability = 0.8;
    s->reduce_gossip_different_view_probability = 400;
    s->gossip_time_to_live_ms = 2000;
    s->leader_actions_interval_ms = 1000;
    s->allow_weakly_up_members = true;
    s->weakly_up_after_ms = 7000;
    s->heartbeat_interval_ms = 1000;
    s->threshold = 8.0;
    s->max_sample_size = 1000;
    s->min_std_deviation_ms = 100;
    s->acceptable_heartbeat_pause_ms = 3000;
    s->expected_response_after_ms = 1000;
    s->monitored_by_nr_of_members = 5;
    s->indirect_probes = 3;
    s->loop_stall_bound_ms = 20000;
    s->sbr_strategy = SHOAL_SBR_KEEP_MAJORITY;
    s->stable_after_ms = 20000;
    s->down_all_when_unstable_ms = -1;
    s->keep_oldest_down_if_alone = true;
    s->fence_margin_ms = 1000;
    s->phase_timeout_ms = 5000;
    s->system_notify_interval_ms = 20;
    s->required_contact_point_nr = 2;
    s->stable_margin_ms = 5000;
    s->discovery_interval_ms = 1000;
}

void shoal_cluster_settings_fast(shoal_cluster_settings_t *s)
{
    shoal_cluster_settings_default(s);
    s->seed_node_timeout_ms = 1000;
    s->retry_unsuccessful_join_after_ms = 1000;
    s->gossip_interval_ms = 200;
    s->leader_actions_interval_ms = 200;
    s->weakly_up_after_ms = 2000;
    s->heartbeat_interval_ms = 200;
    s->acceptable_heartbeat_pause_ms = 1000;
    s->expected_response_after_ms = 200;
    s->stable_after_ms = 2000;
    s->loop_stall_bound_ms = 5000;
    s->phase_timeout_ms = 2000;
    s->system_notify_interval_ms = 10;
    s->stable_margin_ms = 1000;
    s->discovery_interval_ms = 500;
}

const char *shoal_member_status_name(shoal_member_status_t st)
{
    static const char *names[] = {"?",       "Joining", "WeaklyUp", "Up",
                                  "Leaving", "Exiting", "Down",     "Removed"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "?";
}

bool shoal_member_has_role(const shoal_member_t *m, const char *role)
{
    if (!m)
        return false;
    if (!role || !*role)
        return true;
    for (size_t i = 0; i < m->n_roles; i++)
        if (strcmp(m->roles[i], role) == 0)
            return true;
    return false;
}

uint32_t shoal_cluster_fence_after_ms(const shoal_cluster_settings_t *s)
{
    return s->fence_after_ms ? s->fence_after_ms
                             : s->acceptable_heartbeat_pause_ms + s->stable_after_ms / 2;
}

int shoal_cluster_fence_check(const shoal_cluster_settings_t *s, char *err, size_t errlen)
{
    uint64_t fence = shoal_cluster_fence_after_ms(s), margin = s->fence_margin_ms;
    uint64_t earliest = (uint64_t)s->acceptable_heartbeat_pause_ms + s->stable_after_ms;
    if (s->sbr_strategy == SHOAL_SBR_OFF || fence + margin <= earliest)
        return 0;
    if (err && errlen)
        snprintf(err, errlen,
                 "split-brain-resolver/fence-after (%llu ms) + fence-margin (%llu ms) must not "
                 "exceed failure-detector/acceptable-heartbeat-pause (%u ms) + "
                 "split-brain-resolver/stable-after (%u ms): a node cut off would still host its "
                 "shards when the other side reallocates them",
                 (unsigned long long)fence, (unsigned long long)margin,
                 s->acceptable_heartbeat_pause_ms, s->stable_after_ms);
    return SHOAL_EINVAL;
}

int shoal_discovery_check(const char *discovery, const char *resolver, char *err, size_t errlen)
{
    int rc = discovery ? disc_check(discovery, err, errlen) : 0;
    if (rc == 0 && resolver)
        rc = disc_check_resolver(resolver, err, errlen);
    return rc;
}
