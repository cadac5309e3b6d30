/*  members.c — see members.h. */
#include "members.h"

#include "cluster.h"

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
