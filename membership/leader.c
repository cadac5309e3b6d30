/*  leader.c — the leader's actions: on convergence (Joining and WeaklyUp to Up, Leaving to
    Exiting, Exiting and Down to Removed), WeaklyUp without it, and the tick that runs them and the
    split-brain resolver's (reach.c's sbr_tick); leader_soon runs them right after a change.
*/
#include "cluster_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Leader actions (on convergence; the split-brain resolver's timing is reach.c's sbr_tick)
 */
typedef struct {
    shoal_cluster_t *c;
    int64_t now;
    int changed;
} leader_arg_t;

static uint32_t role_min(shoal_cluster_t *c, const char *role)
{
    for (size_t i = 0; i < c->s.n_role_min; i++)
        if (strcmp(c->s.role_min[i].role, role) == 0)
            return c->s.role_min[i].min;
    return 0;
}

static bool min_members_reached(shoal_cluster_t *c, const cstate_t *st)
{
    size_t n = 0;
    for (size_t i = 0; i < st->n_members; i++)
        if (st->members[i].status <= SHOAL_MEMBER_LEAVING)
            n++;
    if (n < c->s.min_nr_of_members)
        return false;
    for (size_t r = 0; r < c->s.n_role_min; r++) {
        size_t k = 0;
        for (size_t i = 0; i < st->n_members; i++)
            if (st->members[i].status <= SHOAL_MEMBER_LEAVING &&
                cmember_has_role(&st->members[i], c->s.role_min[r].role))
                k++;
        if (k < role_min(c, c->s.role_min[r].role))
            return false;
    }
    return true;
}

static int leader_converged(cstate_t *st, const shoal_node_t *self, void *arg)
{
    leader_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    uint64_t max_up = 0;
    for (size_t i = 0; i < st->n_members; i++)
        if (st->members[i].up_number > max_up)
            max_up = st->members[i].up_number;
    bool may_up = min_members_reached(c, st);
    /* members are in address order: up-numbers follow it */
    const shoal_node_t *todo[256];
    uint8_t to[256];
    size_t n = 0;
    for (size_t i = 0; i < st->n_members && n < 256; i++) {
        const cmember_t *m = &st->members[i];
        switch (m->status) {
        case SHOAL_MEMBER_JOINING:
        case SHOAL_MEMBER_WEAKLY_UP:
            if (may_up && !cstate_is_unreachable(st, m->node)) {
                todo[n] = m->node;
                to[n++] = SHOAL_MEMBER_UP;
            }
            break;
        case SHOAL_MEMBER_LEAVING:
            todo[n] = m->node;
            to[n++] = SHOAL_MEMBER_EXITING;
            break;
        case SHOAL_MEMBER_EXITING:
            /* the exiting member must have seen it is Exiting and confirmed it finished its
               shutdown steps (sharding's handoff runs before: removing it earlier would
               quarantine it mid-handoff), unless it cannot be reached any more */
            if ((cstate_seen_by(st, m->node) &&
                 zhash_lookup(a->c->exiting_confirmed, shoal_node_id(m->node))) ||
                cstate_is_unreachable(st, m->node)) {
                todo[n] = m->node;
                to[n++] = SHOAL_MEMBER_REMOVED;
            }
            break;
        case SHOAL_MEMBER_DOWN:
            if (a->c->s.sbr_strategy == SHOAL_SBR_OFF) {
                /* downing off, so this is a manual down: the member may be alive behind a
                   partition and host shards until its fence; wait that out before removing it
                   (removal is what lets its shards be reallocated) */
                const char *id = shoal_node_id(m->node);
                intptr_t seen = (intptr_t)zhash_lookup(a->c->down_seen, id);
                if (!seen)
                    zhash_update(a->c->down_seen, id, (void *)(seen = (intptr_t)a->now));
                if (a->now - (int64_t)seen < (int64_t)shoal_cluster_fence_after_ms(&a->c->s) +
                                                 (int64_t)a->c->s.fence_margin_ms)
                    break;
            }
            todo[n] = m->node;
            to[n++] = SHOAL_MEMBER_REMOVED;
            break;
        default:
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        cstate_set_status(st, self, todo[i], to[i]);
        if (to[i] == SHOAL_MEMBER_UP) /* an age only for a member that is Up */
            cstate_set_up_number(st, self, todo[i], ++max_up);
        shoal_info("%s (leader): %s -> %s", shoal_node_id(self), shoal_node_id(todo[i]),
                   shoal_member_status_name(to[i]));
        a->changed++;
    }
    return 0;
}

static int leader_weakly_up(cstate_t *st, const shoal_node_t *self, void *arg)
{
    leader_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (m->status != SHOAL_MEMBER_JOINING || cstate_is_unreachable(st, m->node))
            continue;
        int64_t *since = zhash_lookup(c->joining_since, shoal_node_id(m->node));
        if (since && a->now - *since >= (int64_t)c->s.weakly_up_after_ms) {
            cstate_set_status(st, self, m->node, SHOAL_MEMBER_WEAKLY_UP);
            shoal_info("%s (leader): %s -> WeaklyUp (no convergence for %u ms)",
                       shoal_node_id(self), shoal_node_id(m->node), c->s.weakly_up_after_ms);
            a->changed++;
        }
    }
    return 0;
}

static void track_joining(shoal_cluster_t *c, int64_t now)
{
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        const char *id = shoal_node_id(m->node);
        if (m->status == SHOAL_MEMBER_JOINING) {
            if (!zhash_lookup(c->joining_since, id)) {
                int64_t *t = malloc(sizeof *t);
                if (!t)
                    abort();
                *t = now;
                zhash_insert(c->joining_since, id, t);
                zhash_freefn(c->joining_since, id, free);
            }
        } else if (zhash_lookup(c->joining_since, id))
            zhash_delete(c->joining_since, id);
    }
}

/* Whether the leader has a move to make once the state converges. */
bool leader_has_work(const shoal_cluster_t *c)
{
    for (size_t i = 0; i < c->state->n_members; i++) {
        uint8_t st = c->state->members[i].status;
        if (st == SHOAL_MEMBER_JOINING || st == SHOAL_MEMBER_WEAKLY_UP ||
            st == SHOAL_MEMBER_LEAVING || st == SHOAL_MEMBER_EXITING || st == SHOAL_MEMBER_DOWN)
            return true;
    }
    return false;
}

static void leader_now(shoal_system_t *sys, void *arg)
{
    shoal_cluster_t *c = arg;
    c->t_leader_soon = 0;
    leader_tick(sys, arg);
}

/* Runs the leader's actions right after this turn when this node leads, the state converged and
   some member waits for a move (the periodic tick stays for WeaklyUp and the resolver). */
void leader_soon(shoal_cluster_t *c)
{
    if (c->t_leader_soon > 0 || c->terminated || c->frozen ||
        cstate_leader(c->state, NULL, c->self) != c->self || !cstate_converged(c->state) ||
        cstate_is_unreachable(c->state, c->self))
        return;
    if (leader_has_work(c))
        c->t_leader_soon = shoal_system_timer(c->sys, 1, false, leader_now, c);
}

void leader_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    if (c->terminated || !cstate_member(c->state, c->self))
        return;
    int64_t now = shoal_now_ms();
    track_joining(c, now);
    bool leader = cstate_leader(c->state, NULL, c->self) == c->self;
    sbr_tick(c, now, leader);
    /* a node that others cannot reach leads only its own side's downing decisions: it may see
       itself as leader while the reachable majority has another one (the state reached it
       through a member that still talks to both), and two leaders must not both move members */
    if (!leader || c->frozen || cstate_is_unreachable(c->state, c->self))
        return;
    leader_arg_t a = {c, now, 0};
    int converged = cstate_converged(c->state);
    if (converged != c->leader_converged_logged) {
        /* why a leader moves nobody: the members that have not seen the current state or are
           unreachable hold convergence (Akka's rule) */
        shoal_debug("%s (leader): %s", shoal_node_id(c->self),
                    converged ? "converged: leader actions run"
                              : "no convergence (a member has not seen the current state, or one "
                                "is unreachable): no leader actions");
        c->leader_converged_logged = converged;
    }
    if (converged) {
        c->leader_moving = true;
        cluster_change(c, leader_converged, &a);
        c->leader_moving = false;
    } else if (c->s.allow_weakly_up_members)
        cluster_change(c, leader_weakly_up, &a);
    c->stats.leader_actions += (uint64_t)a.changed;
}
