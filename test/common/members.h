/*  members.h — membership settings shared by the cluster tests and the member program they start
    as a separate process: fast timings, stretched under sanitizers (tscale) so a slow build does
    not look like a dead node.
*/
#ifndef SHOAL_TEST_MEMBERS_H
#define SHOAL_TEST_MEMBERS_H

#include "membership.h"

/* Fast settings (gossip and heartbeats 200 ms) with the pauses and stable-after scaled. */
void tmember_settings(shoal_cluster_settings_t *s);
/* Data replicator settings for members: fast gossip, pruning every 300 ms with 1 s of
   dissemination, so a removed node's pruning shows within a test. */
void tmember_data_settings(shoal_replicator_settings_t *s);

/* A member in this process: a node bound at `endpoint` (tried again for up to 5 s: a restart on
   an address just left finds ZeroMQ still closing the old listener), membership with `s`, and a
   data replicator with fast settings that follows the members. 0, or the first error (what
   started is in *sys, *cl, *data for the caller to stop). */
int tmember_start(const char *endpoint, const shoal_cluster_settings_t *s, shoal_system_t **sys,
                  shoal_cluster_t **cl, shoal_replicator_t **data);

/* tmember_start, then a join: through `seed`, or forming a cluster alone when seed is NULL. */
int tmember_start_joined(const char *endpoint, const shoal_cluster_settings_t *s, const char *seed,
                         shoal_system_t **sys, shoal_cluster_t **cl, shoal_replicator_t **data);

/* The member's view has exactly `n` members, every one Up (reachable or not). */
bool tmember_all_up(shoal_cluster_t *cl, int n);

#endif
