/*  events.c — the cluster events a subscriber is told: their names, the differences between two
    states as events (emit_diff, which react.c calls), subscribe and unsubscribe.
*/
#include "cluster_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Events
 */
const char *shoal_cluster_event_name(shoal_cluster_event_kind_t k)
{
    static const char *names[] = {"?",
                                  "snapshot-begin",
                                  "snapshot-end",
                                  "member-joined",
                                  "member-weakly-up",
                                  "member-up",
                                  "member-left",
                                  "member-exited",
                                  "member-downed",
                                  "member-removed",
                                  "unreachable",
                                  "reachable",
                                  "leader-changed",
                                  "role-leader-changed",
                                  "convergence"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static shoal_cluster_event_kind_t status_event(uint8_t st)
{
    switch (st) {
    case SHOAL_MEMBER_JOINING:
        return SHOAL_EV_MEMBER_JOINED;
    case SHOAL_MEMBER_WEAKLY_UP:
        return SHOAL_EV_MEMBER_WEAKLY_UP;
    case SHOAL_MEMBER_UP:
        return SHOAL_EV_MEMBER_UP;
    case SHOAL_MEMBER_LEAVING:
        return SHOAL_EV_MEMBER_LEFT;
    case SHOAL_MEMBER_EXITING:
        return SHOAL_EV_MEMBER_EXITED;
    case SHOAL_MEMBER_DOWN:
        return SHOAL_EV_MEMBER_DOWNED;
    default:
        return SHOAL_EV_MEMBER_REMOVED;
    }
}

static void emit(shoal_cluster_t *c, const shoal_cluster_event_t *ev, int only_sub)
{
    for (size_t i = 0; i < c->n_subs; i++)
        if (!only_sub || c->subs[i].id == only_sub)
            c->subs[i].fn(c, ev, c->subs[i].arg);
}

/* Distinct roles of the members of st (and of old), for role-leader events. */
static size_t collect_roles(const cstate_t *a, const cstate_t *b, const char **out, size_t cap)
{
    size_t n = 0;
    const cstate_t *sts[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        if (!sts[k])
            continue;
        for (size_t i = 0; i < sts[k]->n_members; i++)
            for (size_t j = 0; j < sts[k]->members[i].n_roles; j++) {
                const char *role = sts[k]->members[i].roles[j];
                bool dup = false;
                for (size_t x = 0; x < n && !dup; x++)
                    dup = strcmp(out[x], role) == 0;
                if (!dup && n < cap)
                    out[n++] = role;
            }
    }
    return n;
}

/* Emits the differences between `old` (NULL = nothing) and `cur`. */
void emit_diff(shoal_cluster_t *c, const cstate_t *old, const cstate_t *cur, int only_sub)
{
    shoal_cluster_event_t ev;
    shoal_member_t mv;
    for (size_t i = 0; i < cur->n_members; i++) {
        const cmember_t *m = &cur->members[i];
        const cmember_t *o = old ? cstate_member(old, m->node) : NULL;
        cluster_member_view(cur, m, &mv);
        if (!o || o->status != m->status) {
            if (!o && m->status == SHOAL_MEMBER_REMOVED)
                continue; /* a tombstone we never knew alive */
            memset(&ev, 0, sizeof ev);
            ev.kind = status_event(m->status);
            ev.member = &mv;
            emit(c, &ev, only_sub);
        }
        if (m->status == SHOAL_MEMBER_REMOVED)
            continue;
        bool was_unreach = o ? cstate_is_unreachable(old, m->node) : false;
        bool unreach = !mv.reachable;
        if (was_unreach != unreach) {
            memset(&ev, 0, sizeof ev);
            ev.kind = unreach ? SHOAL_EV_UNREACHABLE : SHOAL_EV_REACHABLE;
            ev.member = &mv;
            emit(c, &ev, only_sub);
        }
    }
    const shoal_node_t *ol = old ? cstate_leader(old, NULL, c->self) : NULL;
    const shoal_node_t *nl = cstate_leader(cur, NULL, c->self);
    if (!old || ol != nl) {
        memset(&ev, 0, sizeof ev);
        ev.kind = SHOAL_EV_LEADER_CHANGED;
        ev.leader = nl;
        emit(c, &ev, only_sub);
    }
    const char *roles[64];
    size_t nr = collect_roles(old, cur, roles, 64);
    for (size_t i = 0; i < nr; i++) {
        const shoal_node_t *a = old ? cstate_leader(old, roles[i], c->self) : NULL;
        const shoal_node_t *b = cstate_leader(cur, roles[i], c->self);
        if (a != b || (!old && b)) {
            memset(&ev, 0, sizeof ev);
            ev.kind = SHOAL_EV_ROLE_LEADER_CHANGED;
            ev.role = roles[i];
            ev.leader = b;
            emit(c, &ev, only_sub);
        }
    }
    bool oc = old ? cstate_converged(old) : false, nc = cstate_converged(cur);
    if (!old || oc != nc) {
        memset(&ev, 0, sizeof ev);
        ev.kind = SHOAL_EV_CONVERGENCE;
        ev.converged = nc;
        emit(c, &ev, only_sub);
    }
}

int shoal_cluster_subscribe(shoal_cluster_t *c, shoal_cluster_event_fn *fn, void *arg)
{
    if (!c || !fn)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(c->sys))
        return shoal_wrong_thread(__func__, "shoal_cluster_subscribe_sync");
    c->subs = realloc(c->subs, (c->n_subs + 1) * sizeof *c->subs);
    if (!c->subs)
        abort();
    int id = ++c->next_sub_id;
    c->subs[c->n_subs++] = (subscriber_t){id, fn, arg};
    shoal_cluster_event_t ev = {.kind = SHOAL_EV_SNAPSHOT_BEGIN};
    emit(c, &ev, id);
    emit_diff(c, NULL, c->prev ? c->prev : c->state, id);
    ev.kind = SHOAL_EV_SNAPSHOT_END;
    emit(c, &ev, id);
    return id;
}

int shoal_cluster_unsubscribe(shoal_cluster_t *c, int id)
{
    if (!c)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(c->sys))
        return shoal_wrong_thread(__func__, "shoal_cluster_unsubscribe_sync");
    for (size_t i = 0; i < c->n_subs; i++)
        if (c->subs[i].id == id) {
            memmove(&c->subs[i], &c->subs[i + 1], (c->n_subs - i - 1) * sizeof *c->subs);
            c->n_subs--;
            return 0;
        }
    return SHOAL_ENOTFOUND;
}
