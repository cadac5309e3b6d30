/*  membership.c — the face of membership/: the cluster object's life (shoal_cluster_new,
    shoal_cluster_destroy), what it starts and stops (timers, message handlers, the heartbeat
    actor, seed discovery, admin requests, the management endpoint's routes) and the dispatch of
    membership's peer messages to the files that handle them. cluster_internal.h lists the files
    below it, bottom first.

    The local state (c->state) is the join of every state this node has merged and every change
    it made. A change is applied to it first (cluster_change, cluster.c) and then handed to the
    system replicator (a LOCAL update that merges it in), so the two always agree; states arriving
    by gossip reach us through a subscription to the key and are merged in (on_state). After
    either, react() (react.c) runs: mark the state seen, emit events, re-feed the replicators and
    the heartbeat ring, quarantine removed incarnations, move singletons, and notice being downed.
*/
#include "cluster_internal.h"
#include "cluster.pb-c.h"

static char *own(shoal_cluster_t *c, const char *str)
{
    if (!str)
        return NULL;
    char *d = strdup(str);
    if (!d)
        abort();
    c->own_strings = realloc(c->own_strings, (c->n_own_strings + 1) * sizeof *c->own_strings);
    if (!c->own_strings)
        abort();
    c->own_strings[c->n_own_strings++] = d;
    return d;
}

static const char *const *own_list(shoal_cluster_t *c, const char *const *list, size_t n)
{
    if (!n)
        return NULL;
    const char **out = calloc(n, sizeof *out);
    if (!out)
        abort();
    for (size_t i = 0; i < n; i++)
        out[i] = own(c, list[i]);
    c->own_strings = realloc(c->own_strings, (c->n_own_strings + 1) * sizeof *c->own_strings);
    if (!c->own_strings)
        abort();
    c->own_strings[c->n_own_strings++] = (char *)out;
    return out;
}

static void on_message(shoal_system_t *sys, const shoal_node_t *from, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    if (c->terminated)
        return;
    switch (kind) {
    case K_INIT_JOIN: {
        Shoal__Cluster__InitJoin *m = shoal__cluster__init_join__unpack(NULL, len, data);
        if (m)
            on_init_join(c, from, m);
        shoal__cluster__init_join__free_unpacked(m, NULL);
        break;
    }
    case K_FORGET: {
        Shoal__Cluster__AdminRequest *m = shoal__cluster__admin_request__unpack(NULL, len, data);
        if (m && m->target && *m->target && cstate_member(c->state, from))
            cluster_do_forget(c, m->target, false); /* from a member only; not passed on */
        shoal__cluster__admin_request__free_unpacked(m, NULL);
        break;
    }
    case K_INIT_JOIN_ACK:
    case K_INIT_JOIN_NACK: {
        Shoal__Cluster__InitJoinAck *m = shoal__cluster__init_join_ack__unpack(NULL, len, data);
        if (m && kind == K_INIT_JOIN_ACK)
            on_init_join_ack(c, from, m);
        else if (m)
            on_init_join_nack(c, from);
        shoal__cluster__init_join_ack__free_unpacked(m, NULL);
        break;
    }
    case K_JOIN: {
        Shoal__Cluster__Join *m = shoal__cluster__join__unpack(NULL, len, data);
        if (m)
            on_join(c, from, m);
        else
            shoal_warning("membership: malformed join from %s dropped", shoal_node_id(from));
        shoal__cluster__join__free_unpacked(m, NULL);
        break;
    }
    case K_EXITING_CONFIRMED: {
        const cmember_t *m = cstate_member(c->state, from);
        if (m && m->status == SHOAL_MEMBER_EXITING &&
            !zhash_lookup(c->exiting_confirmed, shoal_node_id(from))) {
            zhash_insert(c->exiting_confirmed, shoal_node_id(from), (void *)from);
            leader_soon(c);
        }
        break;
    }
#ifdef SHOAL_PROTOCOL_NEXT
    case K_GOSSIP_STATUS_V2:
#endif
    case K_GOSSIP_STATUS: {
        c->pstats.status_received[kind == K_GOSSIP_STATUS ? 1 : 2]++;
        Shoal__Cluster__GossipStatus *m = shoal__cluster__gossip_status__unpack(NULL, len, data);
        on_gossip_status(c, from, m);
        shoal__cluster__gossip_status__free_unpacked(m, NULL);
        break;
    }
    case K_HANDOVER_DONE: {
        Shoal__Cluster__HandOverDone *m = shoal__cluster__hand_over_done__unpack(NULL, len, data);
        if (m && m->name)
            singletons_on_handover(c, from, m->name);
        shoal__cluster__hand_over_done__free_unpacked(m, NULL);
        break;
    }
    default:
        break;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle
 */
/* The message kinds membership handles: registered at start and every one of them withdrawn at
   stop (a kind left registered hands a message to a freed cluster). */
static const uint16_t cluster_kinds[] = {
    K_INIT_JOIN,        K_INIT_JOIN_ACK,     K_INIT_JOIN_NACK, K_FORGET, K_JOIN,
    K_HANDOVER_DONE,    K_EXITING_CONFIRMED, K_GOSSIP_STATUS,
#ifdef SHOAL_PROTOCOL_NEXT
    K_GOSSIP_STATUS_V2,
#endif
};

static int do_start(shoal_system_t *sys, void *arg)
{
    shoal_cluster_t *c = arg;
    for (size_t i = 0; i < sizeof cluster_kinds / sizeof *cluster_kinds; i++)
        shoal_system_register(sys, cluster_kinds[i], on_message, c);
    shoal_system_on_peer(sys, on_peer, c);
    c->sub_id = shoal_replicator_subscribe(c->sysrepl, CLUSTER_KEY, on_state, c);
    c->last_tick = shoal_now_ms(); /* the loop's liveness counts from now, not from a first tick */
    c->outside_since_wall = wall_ms();
    c->t_tick = shoal_system_timer(sys, node_tick_ms(&c->s), true, node_tick, c);
    uint32_t g = c->s.gossip_interval_ms / 3 ? c->s.gossip_interval_ms / 3 : 1;
    c->t_gossip = shoal_system_timer(sys, g, true, gossip_tick, c);
    c->t_leader = shoal_system_timer(sys, c->s.leader_actions_interval_ms, true, leader_tick, c);
    admin_register(c);
    if (c->disc) {
        c->joining = true;
        join_retry_arm(c);
        c->discovering = true;
        c->join_started = c->disc_changed = shoal_now_ms();
        snprintf(c->disc_status, sizeof c->disc_status, "resolving %s", c->s.discovery);
        shoal_info("%s: joining a cluster through the contact points of %s (%u needed, "
                   "stable-margin %u ms)",
                   shoal_node_id(c->self), c->s.discovery, c->s.required_contact_point_nr,
                   c->s.stable_margin_ms);
        return 0;
    }
    if (!c->n_seeds)
        return 0;
    return cluster_do_join(c, c->s.seed_nodes, c->s.n_seed_nodes);
}

shoal_cluster_t *shoal_cluster_new(shoal_system_t *sys, const shoal_cluster_settings_t *s, int *err)
{
    shoal_error_detail_clear();
    int dummy;
    if (!err)
        err = &dummy;
    *err = SHOAL_EINVAL;
    shoal_cluster_settings_t defaults;
    if (!s) {
        shoal_cluster_settings_default(&defaults);
        s = &defaults;
    }
    if (!sys || !s->gossip_interval_ms || !s->heartbeat_interval_ms || !(s->threshold > 0) ||
        !s->max_sample_size || !s->monitored_by_nr_of_members || !s->leader_actions_interval_ms ||
        (s->n_seed_nodes && !s->seed_nodes) || (s->n_roles && !s->roles) ||
        (s->sbr_strategy == SHOAL_SBR_STATIC_QUORUM && !s->static_quorum_size)) {
        shoal_error_detail_set(SHOAL_EINVAL, "shoal_cluster_new: %s",
                               !sys ? "no node"
                                    : "settings not from shoal_cluster_settings_default (an "
                                      "interval, threshold or count of 0, a list without its "
                                      "items, or static-quorum without quorum-size)");
        return NULL;
    }
    const char *resolver =
        s->discovery_resolver ? s->discovery_resolver : getenv("SHOAL_DNS_RESOLVER");
    if (resolver && !*resolver)
        resolver = NULL;
    if (s->discovery) {
        char why[300];
        int bad = shoal_discovery_check(s->discovery, resolver, why, sizeof why);
        if (!bad && s->n_seed_nodes) {
            snprintf(why, sizeof why, "seed nodes and discovery %s: give one of them",
                     s->discovery);
            bad = SHOAL_EINVAL;
        }
        if (bad) {
            shoal_error_detail_log("membership: %s", why);
            return NULL;
        }
    }
    if (cstate_register() < 0)
        return NULL;
    shoal_cluster_t *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    pthread_mutex_init(&c->term_mu, NULL);
    pthread_cond_init(&c->term_cv, NULL);
    c->sys = sys;
    c->leader_converged_logged = -1;
    /* the hooks by which the core reaches react.c and shutdown.c (cluster_internal.h) */
    react_attach(c);
    shutdown_attach(c);
    c->self = shoal_system_self(sys);
    c->rng = shoal_node_uid(c->self) ^ (uint64_t)shoal_now_ms() ^ UINT64_C(0x9e3779b97f4a7c15);
    if (!c->rng)
        c->rng = 1;
    c->self_endpoint = strdup(shoal_system_endpoint(sys));
    c->s = *s;
    c->s.app_version = own(c, s->app_version ? s->app_version : "0.0.0");
    c->protocol = SHOAL_PROTOCOL_MIN; /* until this node is in a cluster */
    c->s.roles = own_list(c, s->roles, s->n_roles);
    c->s.seed_nodes = own_list(c, s->seed_nodes, s->n_seed_nodes);
    for (size_t i = 0; i < s->n_seed_nodes; i++) { /* host names resolved here, not on the loop */
        char resolved[300];
        seed_resolve(c->s.seed_nodes[i], resolved, sizeof resolved);
        if (strcmp(resolved, c->s.seed_nodes[i]) != 0)
            ((const char **)c->s.seed_nodes)[i] = own(c, resolved);
    }
    c->s.sbr_role = own(c, s->sbr_role);
    c->s.heartbeat_endpoint = own(c, s->heartbeat_endpoint);
    c->s.durable_id = own(c, s->durable_id);
    c->s.discovery = own(c, s->discovery);
    c->s.discovery_resolver = own(c, resolver);
    if (s->n_role_min) {
        shoal_role_min_t *rm = calloc(s->n_role_min, sizeof *rm);
        if (!rm)
            abort();
        for (size_t i = 0; i < s->n_role_min; i++)
            rm[i] = (shoal_role_min_t){own(c, s->role_min[i].role), s->role_min[i].min};
        c->s.role_min = rm;
    }
    c->state = cstate_new();
    c->my_unreachable = zhash_new();
    c->exiting_confirmed = zhash_new();
    c->joining_since = zhash_new();
    c->voters = zhash_new();
    c->down_seen = zhash_new();
    c->peer_at = zhash_new();
    voters_load(c); /* before any thread can reach c: the store is read from the caller's */
    c->seeds = calloc(s->n_seed_nodes + 1, sizeof *c->seeds);
    c->seed_known = calloc(s->n_seed_nodes + 1, sizeof *c->seed_known);
    c->seed_nacked = calloc(s->n_seed_nodes + 1, sizeof *c->seed_nacked);
    if (!c->seeds || !c->seed_known || !c->seed_nacked)
        abort();
    for (size_t i = 0; i < s->n_seed_nodes; i++)
        if (!(c->seeds[c->n_seeds++] = strdup(c->s.seed_nodes[i])))
            abort();

    shoal_replicator_settings_t rs;
    shoal_replicator_settings_default(&rs);
    rs.role = SYSTEM_ROLE;
    rs.gossip_interval_ms = s->gossip_interval_ms;
    rs.delta_interval_ms = s->gossip_interval_ms;
    rs.notify_subscribers_interval_ms = s->system_notify_interval_ms;
    rs.pruning_interval_ms = 0;
    rs.gossip_ttl_ms = s->gossip_time_to_live_ms;
    rs.gossip_choose = anti_entropy_peer;
    rs.gossip_choose_arg = c;
    c->sysrepl = shoal_replicator_new(sys, &rs, err);
    if (!c->sysrepl) {
        shoal_cluster_destroy(&c);
        return NULL;
    }
    /* the heartbeat actor binds on the node's host */
    char host[256] = "127.0.0.1";
    snprintf(host, sizeof host, "%s", shoal_node_host(c->self));
    char bind[300];
    if (s->heartbeat_endpoint)
        snprintf(bind, sizeof bind, "%s", s->heartbeat_endpoint);
    else
        snprintf(bind, sizeof bind, "tcp://%s:*", host);
    hb_settings_t hs = {
        .sys = sys,
        .bind_endpoint = bind,
        .heartbeat_interval_ms = s->heartbeat_interval_ms,
        .expected_response_after_ms = s->expected_response_after_ms,
        .indirect_probes = s->indirect_probes,
        .loop_stall_bound_ms = s->loop_stall_bound_ms,
        .phi = {s->threshold, s->max_sample_size, s->min_std_deviation_ms,
                s->acceptable_heartbeat_pause_ms, s->heartbeat_interval_ms},
    };
    c->hb = hb_actor_new(&hs, err);
    if (!c->hb) {
        shoal_cluster_destroy(&c);
        return NULL;
    }
    c->hb_endpoint = strdup(hb_actor_endpoint(c->hb));
    if (c->s.discovery) {
        c->disc =
            disc_new(c->s.discovery, c->s.discovery_resolver, c->s.discovery_interval_ms, err);
        if (!c->disc) {
            shoal_cluster_destroy(&c);
            return NULL;
        }
    }
    int rc = cluster_call(c, do_start, c);
    if (rc < 0) {
        *err = rc;
        shoal_cluster_destroy(&c);
        return NULL;
    }
    *err = 0;
    cluster_http_provide(c);
    return c;
}

static int do_stop(shoal_system_t *sys, void *arg)
{
    shoal_cluster_t *c = arg;
    cluster_mark_terminated(c);
    disc_stop(c->disc);
    singletons_stop_all(c);
    int *timers[] = {&c->t_tick,  &c->t_gossip,      &c->t_leader,  &c->t_retry,
                     &c->t_phase, &c->t_leader_soon, &c->t_confirm, &c->t_grace};
    for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++)
        if (*timers[i] > 0) {
            shoal_system_timer_cancel(sys, *timers[i]);
            *timers[i] = 0;
        }
    for (size_t i = 0; i < sizeof cluster_kinds / sizeof *cluster_kinds; i++)
        shoal_system_register(sys, cluster_kinds[i], NULL, NULL);
    admin_withdraw(c);
    if (c->sub_id > 0)
        shoal_replicator_unsubscribe(c->sysrepl, c->sub_id);
    shoal_system_off_peer(sys, on_peer, c);
    /* the heartbeat actor is destroyed by the caller once this returns: nothing on the node
       thread may reach it after this point */
    c->hb_detached = c->hb;
    c->hb = NULL;
    return 0;
}

void shoal_cluster_destroy(shoal_cluster_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_cluster_t *c = *self_p;
    *self_p = NULL;
    cluster_http_withdraw(c); /* no request may reach c from here on */
    /* first the node thread lets go of everything (timers, handlers, listeners, the heartbeat
       actor), then the actor stops (its thread reads the node's faults: the node outlives it) */
    if (c->sysrepl)
        cluster_call(c, do_stop, c);
    else
        c->hb_detached = c->hb;
    c->hb = NULL;
    hb_actor_destroy(&c->hb_detached);
    disc_destroy(&c->disc);
    shoal_replicator_destroy(&c->sysrepl);
    shutdown_free(c);
    for (size_t i = 0; i < c->n_followers; i++) {
        free(c->followers[i].role);
        zhash_destroy(&c->followers[i].told);
    }
    free(c->followers);
    free(c->subs);
    for (size_t i = 0; i < c->n_pending; i++)
        free(c->pending[i].data);
    free(c->pending);
    free(c->on_up);
    free(c->on_removed);
    free(c->singletons);
    cstate_destroy(&c->state);
    cstate_destroy(&c->prev);
    zhash_destroy(&c->my_unreachable);
    zhash_destroy(&c->exiting_confirmed);
    zhash_destroy(&c->joining_since);
    zhash_destroy(&c->voters);
    zhash_destroy(&c->down_seen);
    zhash_destroy(&c->peer_at);
    for (size_t i = 0; i < c->n_seeds; i++)
        free(c->seeds[i]);
    free(c->seeds);
    free(c->seed_known);
    free(c->seed_nacked);
    free(c->sbr_unreachable);
    free((void *)c->s.role_min);
    for (size_t i = 0; i < c->n_own_strings; i++)
        free(c->own_strings[i]);
    free(c->own_strings);
    free(c->hb_endpoint);
    free(c->self_endpoint);
    pthread_cond_destroy(&c->term_cv);
    pthread_mutex_destroy(&c->term_mu);
    free(c);
}
