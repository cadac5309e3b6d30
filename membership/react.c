/*  react.c — the reaction to a new state, after a change made here or a state merged from gossip
    (on_state): mark it seen, the cluster's protocol version, the replicators and the heartbeat
    ring fed, removed incarnations quarantined, events, on-up callbacks, being downed or leaving
    noticed (shutdown.c, through its hooks), singletons moved, the news pushed and the leader's
    move made soon. The files below reach it through the react hook (react_attach).
*/
#include "cluster_internal.h"

/* ---------------------------------------------------------------------------------------------
 * React to a new state
 */

static int set_own_protocol(cstate_t *st, const shoal_node_t *self, void *arg)
{
    return cstate_set_protocol_max(st, self, self, cluster_own_protocol(arg));
}

/* The cluster's protocol version (docs/protocol-versions.md), computed on every change of the
   state: the lowest any member not Removed speaks, capped by this node's own announcement. A
   node outside any cluster stays at the lowest. The system sends at it from now on. */
static void update_protocol(shoal_cluster_t *c)
{
    const cmember_t *me = cstate_member(c->state, c->self);
    if (me && me->status < SHOAL_MEMBER_DOWN && cmember_protocol(me) < cluster_own_protocol(c) &&
        !c->protocol_rewritten) {
        /* it joined through a seed of an older release, which dropped the field: write it
           again (once; the merge keeps the higher, so it sticks) */
        c->protocol_rewritten = true;
        c->pstats.rewrites++;
        shoal_info("%s: own member record lacks protocol %u (joined through an older seed): "
                   "writing it again",
                   shoal_node_id(c->self), cluster_own_protocol(c));
        cluster_change(c, set_own_protocol, c);
    }
    uint32_t v = me ? cstate_protocol(c->state, SHOAL_PROTOCOL_MAX, cluster_own_protocol(c))
                    : SHOAL_PROTOCOL_MIN;
    if (v == c->protocol)
        return;
    if (v > c->protocol)
        shoal_info("%s: cluster protocol version %u -> %u: every member speaks it",
                   shoal_node_id(c->self), c->protocol, v);
    else
        shoal_info("%s: cluster protocol version %u -> %u: a member (or the pin "
                   "shoal/cluster/protocol-version) speaks no higher",
                   shoal_node_id(c->self), c->protocol, v);
    c->protocol = v;
    shoal_system_set_protocol(c->sys, v);
}

static void react(shoal_cluster_t *c)
{
    if (c->notifying)
        return; /* a change made by a reaction is handled by the outer pass */
    c->notifying = true;
    const cmember_t *me = cstate_member(c->state, c->self);
    bool newly_seen = false;
    if (me && me->status != SHOAL_MEMBER_REMOVED && !cstate_seen_by(c->state, c->self)) {
        cstate_mark_seen(c->state, c->self);
        cluster_publish(c);
        newly_seen = true;
    }
    if (me && me->status < SHOAL_MEMBER_DOWN)
        c->outside_since_wall = 0;
    else if (!c->outside_since_wall)
        c->outside_since_wall = wall_ms(); /* downed or removed: out of the cluster from now */
    if (me) {
        c->was_member = true;
        if (c->joining) {
            c->joining = false;
            zhash_destroy(&c->peer_at); /* only joining needs it */
            c->peer_at = zhash_new();
            shoal_info("%s: joined (%s)", shoal_node_id(c->self),
                       shoal_member_status_name(me->status));
        }
        if (c->discovering) {
            c->discovering = false;
            disc_stop(c->disc); /* Akka's bootstrap ends once the node is in a cluster */
        }
    }
    update_protocol(c);
    feed_replicators(c);
    feed_heartbeats(c);
    /* removed incarnations are never heard again */
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        const cmember_t *o = c->prev ? cstate_member(c->prev, m->node) : NULL;
        if (m->status == SHOAL_MEMBER_REMOVED && m->node != c->self &&
            (!o || o->status != SHOAL_MEMBER_REMOVED))
            shoal_system_quarantine(c->sys, m->node);
    }
    emit_diff(c, c->prev, c->state, 0);
    cstate_destroy(&c->prev);
    c->prev = cstate_clone(c->state);
    me = cstate_member(c->state, c->self);
    if (me && !c->up_called &&
        (me->status == SHOAL_MEMBER_UP || me->status == SHOAL_MEMBER_LEAVING)) {
        c->up_called = true;
        for (size_t i = 0; i < c->n_on_up; i++)
            c->on_up[i].fn(c, c->on_up[i].arg);
    }
    if (me && (me->status == SHOAL_MEMBER_DOWN || me->status == SHOAL_MEMBER_REMOVED) &&
        !c->shutting_down) {
        shoal_warning("%s: this node is %s: stopping its cluster part", shoal_node_id(c->self),
                      shoal_member_status_name(me->status));
        cluster_shutdown_start(c, SHOAL_SHUTDOWN_DOWNED);
    }
    if (me && me->status == SHOAL_MEMBER_LEAVING && !c->shutting_down)
        cluster_shutdown_start(c, SHOAL_SHUTDOWN_LEAVE);
    cluster_singletons_react(c);
    cluster_shutdown_react(c);
    c->notifying = false;
    /* news travels at once (the rounds of gossip_tick then finish the job), and a leader with
       something to do on convergence does not wait for its next tick */
    push_on_change(c);
    if (newly_seen)
        tell_leader_seen(c);
    announce_convergence(c);
    leader_soon(c);
}

void on_state(shoal_replicator_t *r, shoal_change_t change, const char *key,
              const shoal_crdt_t *value, void *arg)
{
    (void)r;
    (void)key;
    shoal_cluster_t *c = arg;
    if (change != SHOAL_CHANGED || !value || value->type != &cstate_type || c->terminated)
        return;
    uint8_t before[16], after[16];
    shoal_crdt_digest(&c->state->base, before);
    shoal_crdt_merge(&c->state->base, value);
    shoal_crdt_digest(&c->state->base, after);
    c->stats.gossip_received++;
    if (memcmp(before, after, 16) != 0)
        react(c);
}

void react_attach(shoal_cluster_t *c)
{
    c->hooks.react = react;
}
