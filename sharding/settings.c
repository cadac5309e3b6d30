/*  settings.c — the defaults of sharding's settings: an entity type's (Akka's reference values,
    and a fast variant for tests and demos), its passivation's, and sharding's own replicator's.
    At the bottom of sharding/, so that the configuration fillers and the regions start from the
    same values.
*/
#include <stddef.h>
#include <string.h>

#include "sharding_internal.h"

void shoal_passivation_settings_default(shoal_passivation_settings_t *p)
{
    memset(p, 0, sizeof *p);
    p->policy = SHOAL_PASSIVATE_IDLE;
    p->idle_timeout_ms = 120000;
    p->window_proportion = 0.01;
    p->window_min_proportion = 0.01;
    p->window_max_proportion = 1.0;
    p->adjust_multiplier = 10.0;
    p->initial_step = 0.0625;
    p->restart_threshold = 0.05;
    p->step_decay = 0.98;
    p->stop_timeout_ms = 10000;
}

void shoal_sharding_settings_default(shoal_sharding_settings_t *s)
{
    memset(s, 0, sizeof *s);
    s->role = "";
    s->number_of_shards = 1000;
    s->buffer_size = 100000;
    s->retry_interval_ms = 2000;
    s->handoff_timeout_ms = 60000;
    s->shard_start_timeout_ms = 10000;
    s->rebalance_interval_ms = 10000;
    s->waiting_for_state_timeout_ms = 2000;
    s->updating_state_timeout_ms = 5000;
    s->shard_region_query_timeout_ms = 3000;
    s->write_majority_plus = 3;
    s->read_majority_plus = 5;
    s->majority_min_cap = 5;
    s->down_removal_margin_ms = 0;
    s->allocation.kind = SHOAL_ALLOC_LEAST_SHARDS;
    /* Akka's 0 selects its older algorithm (3 shards per 10 s round); Shoal's default is the
       newer one with Akka's recommended limit, which is what makes a rebalance take seconds */
    s->allocation.rebalance_absolute_limit = 20;
    s->allocation.rebalance_relative_limit = 0.1;
    s->allocation.rebalance_threshold = 1;
    s->allocation.max_simultaneous_rebalance = 3;
    s->allocation.hashing_rebalance_limit = 0;
    shoal_passivation_settings_default(&s->passivation);
    s->recovery_frequency_ms = 100;
    s->recovery_number_of_entities = 5;
    s->shard_failure_backoff_ms = 10000;
    s->entity_restart_backoff_ms = 10000;
    s->state_write_timeout_ms = 5000;
    s->state_tombstone_ttl_ms = 10u * 24 * 3600 * 1000;
}

void shoal_sharding_settings_fast(shoal_sharding_settings_t *s)
{
    shoal_sharding_settings_default(s);
    s->retry_interval_ms = 200;
    s->handoff_timeout_ms = 5000;
    s->shard_start_timeout_ms = 2000;
    s->rebalance_interval_ms = 1000;
    s->waiting_for_state_timeout_ms = 1000;
    s->updating_state_timeout_ms = 1000;
    s->shard_region_query_timeout_ms = 1000;
}

void shoal_sharding_replicator_settings_default(shoal_replicator_settings_t *rs)
{
    static const char *const durable[] = {"shard-*"}; /* remembered entities, entity state */
    shoal_replicator_settings_default(rs);
    rs->gossip_interval_ms = 0; /* the cluster's */
    rs->delta_interval_ms = 0;  /* a fifth of the gossip interval */
    rs->notify_subscribers_interval_ms = 50;
    rs->max_delta_elements = 5;
    rs->prefer_oldest = true;
    rs->durable_keys = durable;
    rs->n_durable_keys = 1;
}
