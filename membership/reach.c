/*  reach.c — reachability and the node tick: the heartbeat ring fed to the heartbeat actor and
    its verdicts drained into this node's row of the state, THE FENCE (side_kept, fence_update),
    the split-brain resolver's timing (sbr_tick, which the leader's tick runs), and the node tick
    (the actor's watchdog, clock gaps and the freeze, the fence, pending messages).
*/
#include "cluster_internal.h"

#define TICK_MIN_MS 100 /* the node tick's bounds (node_tick_ms) */
#define TICK_MAX_MS 250

/* ---------------------------------------------------------------------------------------------
 * The heartbeat ring: each node monitors the next k members in an order of hashed ids.
 */
static uint64_t ring_hash(const shoal_node_t *n)
{
    const char *s = shoal_node_id(n);
    uint64_t h = 1469598103934665603ull; /* FNV-1a: the same on every node */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

typedef struct {
    uint64_t h;
    const cmember_t *m;
} ring_slot_t;

static int ring_cmp(const void *a, const void *b)
{
    const ring_slot_t *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return shoal_node_cmp(x->m->node, y->m->node);
}

void feed_heartbeats(shoal_cluster_t *c)
{
    if (!c->hb)
        return;
    const cstate_t *st = c->state;
    ring_slot_t *ring = calloc(st->n_members + 1, sizeof *ring);
    hb_peer_t *targets = calloc(st->n_members + 1, sizeof *targets);
    hb_peer_t *helpers = calloc(st->n_members + 1, sizeof *helpers);
    char(*eps)[300] = calloc(2 * (st->n_members + 1), sizeof *eps);
    if (!ring || !targets || !helpers || !eps)
        abort();
    size_t n = 0, self_at = 0;
    bool self_in = false;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (m->status == SHOAL_MEMBER_REMOVED || m->status == SHOAL_MEMBER_DOWN || !m->hb_endpoint)
            continue;
        ring[n].h = ring_hash(m->node);
        ring[n].m = m;
        n++;
    }
    qsort(ring, n, sizeof *ring, ring_cmp);
    for (size_t i = 0; i < n; i++)
        if (ring[i].m->node == c->self) {
            self_at = i;
            self_in = true;
        }
    size_t nt = 0, nh = 0;
    if (self_in && !c->terminated) {
        size_t k = c->s.monitored_by_nr_of_members;
        for (size_t step = 1; step < n && nt < k; step++) {
            const cmember_t *m = ring[(self_at + step) % n].m;
            endpoint_of(m->node, eps[nt], sizeof eps[nt]);
            targets[nt] = (hb_peer_t){shoal_node_id(m->node), eps[nt], m->hb_endpoint};
            nt++;
        }
        for (size_t i = 0; i < n; i++) {
            const cmember_t *m = ring[i].m;
            if (m->node == c->self)
                continue;
            char *ep = eps[st->n_members + 1 + nh]; /* the second half: targets use the first */
            endpoint_of(m->node, ep, 300);
            helpers[nh++] = (hb_peer_t){shoal_node_id(m->node), ep, m->hb_endpoint};
        }
    }
    hb_actor_set_peers(c->hb, targets, nt, helpers, nh);
    free(ring);
    free(targets);
    free(helpers);
    free(eps);
}

/* Reachability as this node observes it, from the heartbeat actor's events. */
static int set_my_row(cstate_t *st, const shoal_node_t *self, void *arg)
{
    shoal_cluster_t *c = arg;
    size_t n = zhash_size(c->my_unreachable);
    const shoal_node_t **subjects = calloc(n + 1, sizeof *subjects);
    if (!subjects)
        abort();
    size_t k = 0;
    for (void *v = zhash_first(c->my_unreachable); v; v = zhash_next(c->my_unreachable)) {
        const cmember_t *m = cstate_member(st, v);
        /* only members that are still alive in the state matter */
        if (m && m->status != SHOAL_MEMBER_REMOVED)
            subjects[k++] = v;
    }
    int rc = cstate_set_unreachable(st, self, subjects, k);
    free(subjects);
    return rc;
}

static void drain_heartbeats(shoal_cluster_t *c)
{
    hb_event_t evs[32];
    size_t n;
    bool changed = false;
    while ((n = hb_actor_drain(c->hb, evs, 32)) > 0) {
        for (size_t i = 0; i < n; i++) {
            const shoal_node_t *node = shoal_node_intern(evs[i].node_id);
            if (!node)
                continue;
            if (evs[i].reachable) {
                if (zhash_lookup(c->my_unreachable, evs[i].node_id)) {
                    zhash_delete(c->my_unreachable, evs[i].node_id);
                    c->stats.reachable_marked++;
                    changed = true;
                }
            } else if (!zhash_lookup(c->my_unreachable, evs[i].node_id)) {
                zhash_insert(c->my_unreachable, evs[i].node_id, (void *)node);
                c->stats.unreachable_marked++;
                shoal_info("%s: %s is unreachable", shoal_node_id(c->self), evs[i].node_id);
                changed = true;
            }
        }
    }
    /* forget subjects that are no longer targets' members */
    for (void *v = zhash_first(c->my_unreachable); v; v = zhash_next(c->my_unreachable)) {
        const cmember_t *m = cstate_member(c->state, v);
        if (!m || m->status == SHOAL_MEMBER_REMOVED) {
            zhash_delete(c->my_unreachable, zhash_cursor(c->my_unreachable));
            changed = true;
            break; /* the iteration is invalid now: the next drain finishes */
        }
    }
    if (changed && cstate_member(c->state, c->self))
        cluster_change(c, set_my_row, c);
}

/* ---------------------------------------------------------------------------------------------
 * The fence (THE FENCE in membership.h)
 */
/* Whether this node, judged by the monitored members it had a heartbeat reply from within
   fence-after, is on a side the active strategy keeps (see THE FENCE in membership.h). It takes
   the resolver's view of the sides and its rule (sbr.c): the counted members (Up, Leaving, of
   the strategy's role) split into this side and the other, and keep-majority (ties to the lowest
   address), keep-oldest (down-if-alone only against two or more), static-quorum or down-all
   decides between them, so a side the resolver keeps does not fence itself (its shards stopped
   for nothing). The other side: each monitored member silent for fence-after, and, above six
   members (the heartbeat ring monitors five), each member not monitored here that an observer
   not silent here lists unreachable (this side's detectors, whose records reach this node by
   gossip within the side well before fence-after); any other member is on this side. */
static bool side_kept(shoal_cluster_t *c, int64_t now)
{
    hb_contact_t ct[16];
    size_t n = hb_actor_contacts(c->hb, ct, 16);
    if (n > 16)
        n = 16;
    if (n == 0 || c->s.sbr_strategy == SHOAL_SBR_OFF)
        return true; /* alone, nobody monitored yet, or nobody downs automatically (the leader
                        waits out the fence instead) */
    int64_t fence = shoal_cluster_fence_after_ms(&c->s);
    const shoal_node_t *mon[16];
    bool silent[16];
    for (size_t i = 0; i < n; i++) {
        mon[i] = shoal_node_intern(ct[i].node_id);
        silent[i] = now - ct[i].last_contact > fence;
    }
    size_t mine = 0, other = 0;
    const cmember_t *oldest = NULL, *lowest = NULL;
    bool oldest_mine = false, lowest_mine = false;
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        if ((m->status != SHOAL_MEMBER_UP && m->status != SHOAL_MEMBER_LEAVING) ||
            (c->s.sbr_role && *c->s.sbr_role && !cmember_has_role(m, c->s.sbr_role)))
            continue; /* not counted by the resolver (status; the strategy's role) */
        bool away = false, monitored = false;
        for (size_t k = 0; m->node != c->self && k < n && !monitored; k++)
            if (mon[k] == m->node) {
                monitored = true;
                away = silent[k];
            }
        if (m->node != c->self && !monitored) {
            const shoal_node_t *obs[16];
            size_t no = cstate_observers_of(c->state, m->node, obs, 16);
            for (size_t j = 0; j < no && j < 16 && !away; j++) {
                bool obs_silent = false;
                for (size_t k = 0; k < n; k++)
                    obs_silent |= mon[k] == obs[j] && silent[k];
                away = !obs_silent;
            }
        }
        other += away;
        mine += !away;
        if (!oldest || m->up_number < oldest->up_number ||
            (m->up_number == oldest->up_number && shoal_node_cmp(m->node, oldest->node) < 0)) {
            oldest = m;
            oldest_mine = !away;
        }
        if (!lowest || shoal_node_cmp(m->node, lowest->node) < 0) {
            lowest = m;
            lowest_mine = !away;
        }
    }
    if (other == 0)
        return true; /* nobody on the other side: the resolver has nothing to decide */
    bool alone_goes = c->s.keep_oldest_down_if_alone;
    uint32_t quorum = c->s.static_quorum_size;
    switch (c->s.sbr_strategy) {
    case SHOAL_SBR_DOWN_ALL:
        return false;
    case SHOAL_SBR_STATIC_QUORUM:
        if (!quorum)
            break; /* no decision by the resolver: judge by the majority */
        /* more than 2*quorum-1 counted (both sides could reach quorum), or neither at quorum:
           the resolver downs everyone */
        return mine + other <= 2 * (size_t)quorum - 1 && mine >= quorum;
    case SHOAL_SBR_KEEP_OLDEST:
        if (oldest_mine) /* down-if-alone: the oldest alone against two or more goes */
            return !(alone_goes && mine == 1 && other >= 2);
        /* the oldest is over there: kept only if it is alone there, against two or more here */
        return alone_goes && other == 1 && mine >= 2;
    default:
        break;
    }
    return mine > other || (mine == other && lowest_mine);
}

/* Sets or lifts the fence; logs and tells the singletons when it changes. */
static void fence_update(shoal_cluster_t *c, int64_t now)
{
    const cmember_t *me = cstate_member(c->state, c->self);
    bool fenced = c->hb && me && me->status < SHOAL_MEMBER_DOWN && !side_kept(c, now);
    if (fenced == c->fenced)
        return;
    c->fenced = fenced;
    if (fenced) {
        c->stats.fenced++;
        shoal_warning("%s: no heartbeat reply from the side the split-brain resolver keeps for "
                      "%u ms: fenced (no shards, no singletons here until contact again)",
                      shoal_node_id(c->self), shoal_cluster_fence_after_ms(&c->s));
    } else {
        shoal_info("%s: contact again: the fence is lifted", shoal_node_id(c->self));
    }
    cluster_singletons_react(c);
}

/* ---------------------------------------------------------------------------------------------
 * The split-brain resolver's timing (the leader's tick runs it)
 */
typedef struct {
    const shoal_node_t **nodes;
    size_t n;
} down_list_t;

static int down_many(cstate_t *st, const shoal_node_t *self, void *arg)
{
    down_list_t *d = arg;
    for (size_t i = 0; i < d->n; i++) {
        const cmember_t *m = cstate_member(st, d->nodes[i]);
        if (m && m->status < SHOAL_MEMBER_DOWN)
            cstate_set_status(st, self, d->nodes[i], SHOAL_MEMBER_DOWN);
    }
    return 0;
}

void sbr_tick(shoal_cluster_t *c, int64_t now, bool leader)
{
    const cstate_t *st = c->state;
    const shoal_node_t **u = calloc(st->n_members + 1, sizeof *u);
    if (!u)
        abort();
    size_t nu = 0;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (m->status < SHOAL_MEMBER_DOWN && cstate_is_unreachable(st, m->node))
            u[nu++] = m->node;
    }
    bool same = nu == c->n_sbr_unreachable &&
                (nu == 0 || memcmp(u, c->sbr_unreachable, nu * sizeof *u) == 0);
    if (!same) {
        if (nu || c->n_sbr_unreachable) {
            char names[512];
            size_t off = 0;
            names[0] = 0;
            for (size_t i = 0; i < nu && off < sizeof names - 1; i++)
                off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
                                        shoal_node_id(u[i]));
            shoal_debug("%s: split-brain resolver: the unreachable members changed to %zu (%s): "
                        "a decision after %u ms without change",
                        shoal_node_id(c->self), nu, nu ? names : "none", c->s.stable_after_ms);
        }
        c->sbr_undecided_logged = false;
        free(c->sbr_unreachable);
        c->sbr_unreachable = u;
        c->n_sbr_unreachable = nu;
        c->sbr_stable_since = now;
        if (nu && !c->sbr_unstable_since)
            c->sbr_unstable_since = now;
        if (!nu)
            c->sbr_unstable_since = 0;
        return;
    }
    free(u);
    if (!nu || c->s.sbr_strategy == SHOAL_SBR_OFF || !leader || !cluster_may_act(c))
        return;
    int64_t unstable_limit = c->s.down_all_when_unstable_ms < 0
                                 ? (int64_t)c->s.stable_after_ms * 3 / 4
                                 : c->s.down_all_when_unstable_ms;
    if (c->s.down_all_when_unstable_ms < 0 && unstable_limit < 4000)
        unstable_limit = 4000;
    bool unstable = c->s.down_all_when_unstable_ms != 0 && c->sbr_unstable_since &&
                    now - c->sbr_unstable_since >= (int64_t)c->s.stable_after_ms + unstable_limit &&
                    now - c->sbr_stable_since < (int64_t)c->s.stable_after_ms;
    if (now - c->sbr_stable_since < (int64_t)c->s.stable_after_ms && !unstable)
        return;
    sbr_member_t *mem = calloc(st->n_members + 1, sizeof *mem);
    sbr_record_t *rec = NULL;
    size_t nrec = 0, caprec = 0;
    const shoal_node_t **to_down = calloc(st->n_members + 1, sizeof *to_down);
    if (!mem || !to_down)
        abort();
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        mem[i].node = m->node;
        mem[i].status = (shoal_member_status_t)m->status;
        mem[i].up_number = m->up_number;
        mem[i].has_role = !c->s.sbr_role || !*c->s.sbr_role || cmember_has_role(m, c->s.sbr_role);
        mem[i].seen_current = cstate_seen_by(st, m->node);
    }
    for (size_t i = 0; i < st->n_rows; i++) {
        const creach_row_t *row = &st->rows[i];
        const cmember_t *ob = cstate_member(st, row->observer);
        /* the observers cstate_is_unreachable trusts: not Exiting, Down or Removed */
        if (!ob || ob->status >= SHOAL_MEMBER_EXITING)
            continue;
        for (size_t j = 0; j < row->n; j++) {
            if (nrec == caprec) {
                caprec = caprec ? caprec * 2 : 16;
                rec = realloc(rec, caprec * sizeof *rec);
                if (!rec)
                    abort();
            }
            rec[nrec++] = (sbr_record_t){row->observer, row->unreachable[j]};
        }
    }
    size_t n_down = 0;
    sbr_config_t cfg = {c->s.sbr_strategy, c->s.static_quorum_size, c->s.keep_oldest_down_if_alone};
    sbr_decision_t d = sbr_decide(&cfg, mem, st->n_members, rec, nrec, c->self, to_down, &n_down);
    /* Unstable: Akka downs everyone, its last resort when no side can be trusted to be one. But
       when every live unreachable member is indirectly connected (flapping links, or one member
       whose own view is bad) there is no second side to fear: everyone still exchanges gossip
       through someone, and downing the links' cover ends the flapping. Only a clean cut whose
       picture keeps changing gets the last resort. */
    if (unstable && d != SBR_NO_DECISION && d != SBR_DOWN_INDIRECT) {
        d = SBR_DOWN_ALL;
        n_down = 0;
        for (size_t i = 0; i < st->n_members; i++)
            if (st->members[i].status < SHOAL_MEMBER_DOWN)
                to_down[n_down++] = st->members[i].node;
    }
    static const char *const strategy[] = {"?", "keep-majority", "keep-oldest", "static-quorum",
                                           "down-all", "off"};
    if (!c->sbr_undecided_logged || (d != SBR_NO_DECISION && n_down))
        shoal_debug("%s: split-brain resolver: inputs: %zu members, %zu unreachable, %zu "
                    "reachability records, %s%s; decision: %s, %zu to down",
                    shoal_node_id(c->self), st->n_members, nu, nrec,
                    strategy[c->s.sbr_strategy <= SHOAL_SBR_OFF ? c->s.sbr_strategy : 0],
                    unstable ? ", unstable" : "", sbr_decision_name(d), n_down);
    if (d == SBR_NO_DECISION || !n_down)
        c->sbr_undecided_logged = true;
    if (d != SBR_NO_DECISION && n_down) {
        shoal_warning("%s: split-brain resolver: %s, downing %zu member(s)%s",
                      shoal_node_id(c->self), sbr_decision_name(d), n_down,
                      unstable ? " (unreachability kept changing)" : "");
        c->stats.downed_by_sbr += n_down;
        down_list_t dl = {to_down, n_down};
        cluster_change(c, down_many, &dl);
        c->sbr_unstable_since = 0;
    }
    free(mem);
    free(rec);
    free(to_down);
}

/* ---------------------------------------------------------------------------------------------
 * The node tick: keeps the heartbeat actor's watchdog fed, notices clock gaps (frozen)
 */
static void unfreeze_done(shoal_replicator_t *r, int status, const char *key,
                          const shoal_crdt_t *value, void *arg)
{
    (void)r;
    (void)key;
    shoal_cluster_t *c = arg;
    c->reading_after_freeze = false;
    if (status != 0 || !value || value->type != &cstate_type)
        return; /* tried again at the next tick */
    shoal_crdt_merge(&c->state->base, value);
    const cmember_t *me = cstate_member(c->state, c->self);
    if (me && (me->status == SHOAL_MEMBER_UP || me->status == SHOAL_MEMBER_LEAVING ||
               me->status == SHOAL_MEMBER_WEAKLY_UP || me->status == SHOAL_MEMBER_JOINING)) {
        shoal_info("%s: fresh gossip keeps this node a member: acting again",
                   shoal_node_id(c->self));
        c->frozen = false;
    }
    cluster_react(c);
}

/* The node tick drains the heartbeat actor's verdicts, checks the fence and shows the actor the
   loop is alive. A quarter of the heartbeat interval (250 ms by default: Akka reaps verdicts
   every second) keeps verdicts prompt without waking an idle node more than a few times a
   second; the fence may act one tick late, so a tick stays within a quarter of its margin. */
uint32_t node_tick_ms(const shoal_cluster_settings_t *s)
{
    uint32_t t = s->heartbeat_interval_ms / 4;
    if (t < TICK_MIN_MS)
        t = TICK_MIN_MS;
    if (t > TICK_MAX_MS)
        t = TICK_MAX_MS;
    if (s->fence_margin_ms && t > s->fence_margin_ms / 4)
        t = s->fence_margin_ms / 4 ? s->fence_margin_ms / 4 : 1;
    return t;
}

void node_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    int64_t now = shoal_now_ms();
    if (c->hb)
        hb_actor_tick(c->hb);
    if (c->last_tick && now - c->last_tick > (int64_t)c->s.stable_after_ms &&
        cstate_member(c->state, c->self)) {
        c->stats.clock_gaps++;
        c->frozen = true;
        shoal_warning("%s: the node loop was frozen for %lld ms: not acting until fresh gossip "
                      "keeps it a member",
                      shoal_node_id(c->self), (long long)(now - c->last_tick));
        cluster_singletons_react(c);
    }
    c->last_tick = now;
    if (c->hb)
        drain_heartbeats(c);
    fence_update(c, now);
    pending_flush(c, NULL);
    if (c->frozen && !c->reading_after_freeze && !c->terminated) {
        size_t peers = 0;
        for (size_t i = 0; i < c->state->n_members; i++)
            if (c->state->members[i].status < SHOAL_MEMBER_DOWN)
                peers++;
        if (peers <= 1) {
            c->frozen = false; /* alone: nobody could have downed it */
            return;
        }
        shoal_consistency_t rc = {.level = SHOAL_MAJORITY,
                                  .timeout_ms = c->s.gossip_interval_ms * 3};
        c->reading_after_freeze = true;
        if (shoal_replicator_get(c->sysrepl, CLUSTER_KEY, &cstate_type, &rc, unfreeze_done, c) < 0)
            c->reading_after_freeze = false;
    }
}
