/*  gossip.c — the gossip of the cluster state: digest-only statuses (the seen set), the system
    replicator's partners, the push of every change, the marks members tell the leader, the
    leader's announcement of convergence, and the gossip rounds (gossip_tick).
*/
#include "cluster_internal.h"
#include "cluster.pb-c.h"

#define PUSH_FANOUT 2

/* Digest-only gossip: our clock's digest and seen set (see GOSSIP in membership.h). */
static int send_seen_status(shoal_cluster_t *c, const shoal_node_t *to, bool reply)
{
    uint8_t digest[16];
    cstate_clock_digest(c->state, digest);
    uint8_t bits[(CSTATE_MAX_MEMBERS + 7) / 8]; /* members are bounded: no allocation */
    size_t nb = cstate_seen_bits(c->state, bits, sizeof bits);
    Shoal__Cluster__GossipStatus m = SHOAL__CLUSTER__GOSSIP_STATUS__INIT;
    m.clock_digest.data = digest;
    m.clock_digest.len = sizeof digest;
    m.seen.data = bits;
    m.seen.len = nb;
    m.reply = reply;
    m.clock_sum = cstate_version_sum(c->state);
    uint16_t kind = K_GOSSIP_STATUS;
#ifdef SHOAL_PROTOCOL_NEXT
    /* the changed format of protocol 2: only once every member speaks it (the system's
       version), and only to a peer that said so in its handshake */
    if (shoal_system_protocol(c->sys) >= 2 && shoal_system_peer_protocol(c->sys, to) >= 2)
        kind = K_GOSSIP_STATUS_V2;
#endif
    int rc = cluster_send(c, to, kind, &m.base);
    if (rc == 0) {
        c->stats.seen_status_sent++;
        c->pstats.status_sent[kind == K_GOSSIP_STATUS ? 1 : 2]++;
    }
    return rc;
}

void on_gossip_status(shoal_cluster_t *c, const shoal_node_t *from,
                      const Shoal__Cluster__GossipStatus *m)
{
    c->stats.seen_status_received++;
    if (!m || m->clock_digest.len != 16) {
        c->stats.seen_status_malformed++;
        shoal_warning("%s: malformed gossip status from %s dropped", shoal_node_id(c->self),
                      shoal_node_id(from));
        return;
    }
    uint8_t mine[16];
    cstate_clock_digest(c->state, mine);
    bool member = cstate_member(c->state, c->self) != NULL;
    if (!member || memcmp(mine, m->clock_digest.data, 16) != 0) {
        /* another clock. A clock that dominates another has the higher sum, so the side with
           the higher (or an equal: concurrent) sum sends its whole state, and push-pull brings
           the other's back if it knows more; the side with the lower sum (or no state yet: a
           joining node) asks for it with its own status. */
        c->stats.seen_status_other_clock++;
        if (member && cstate_version_sum(c->state) >= m->clock_sum) {
            if (cstate_member(c->state, from) &&
                shoal_replicator_push(c->sysrepl, CLUSTER_KEY, from) == 0)
                c->stats.gossip_sent++;
        } else if (!m->reply) {
            send_seen_status(c, from, true);
        }
        return;
    }
    size_t added = 0, missing = 0;
    int rc = cstate_merge_seen_bits(c->state, m->seen.data, m->seen.len, &added, &missing);
    if (rc < 0) {
        c->stats.seen_status_malformed++;
        shoal_warning("%s: gossip status from %s dropped: %s", shoal_node_id(c->self),
                      shoal_node_id(from), shoal_strerror(rc));
        return;
    }
    if (missing && !m->reply)
        send_seen_status(c, from, true);
    if (added) {
        cluster_publish(c);
        cluster_react(c);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Gossip policy of the system replicator
 */
/* xorshift64* per cluster, seeded from the uid: every node draws its own gossip partners (an
   unseeded random() would give every process the same sequence). Node thread only. */
static uint64_t next_random(shoal_cluster_t *c)
{
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return x * UINT64_C(2685821657736338717);
}

/* Uniform in [0, 1). */
static double rnd(shoal_cluster_t *c)
{
    return (double)(next_random(c) >> 11) / 9007199254740992.0;
}

static size_t choose_peer(shoal_replicator_t *r, const shoal_node_t *const *peers, size_t n,
                          void *arg)
{
    (void)r;
    shoal_cluster_t *c = arg;
    if (!n)
        return 0;
    /* prefer members that have not seen the current version (different view) */
    double p = c->s.gossip_different_view_probability;
    size_t members = c->state->n_members;
    if (members > c->s.reduce_gossip_different_view_probability && members)
        p = p * c->s.reduce_gossip_different_view_probability / (double)members;
    if (rnd(c) < p) {
        size_t unseen[64], k = 0;
        for (size_t i = 0; i < n && k < 64; i++)
            if (!cstate_seen_by(c->state, peers[i]))
                unseen[k++] = i;
        if (k)
            return unseen[next_random(c) % k];
    }
    return (size_t)(next_random(c) % n);
}

/* Whether every member (not Removed) has seen the current clock, as this node knows. */
static bool all_seen(shoal_cluster_t *c)
{
    size_t alive = 0;
    for (size_t i = 0; i < c->state->n_members; i++)
        if (c->state->members[i].status != SHOAL_MEMBER_REMOVED)
            alive++;
    return cstate_seen_count(c->state) >= alive;
}

/* The system replicator's anti-entropy partner. While some member has not seen the current
   clock, membership's own rounds run (gossip_tick, three a second) and settle what differs with
   digest-only statuses; the replicator's round would find the digests different (the seen sets
   differ) and ship whole states both ways, so it waits (an index past the peers skips the
   round). Once all have seen, it is the safety net again. */
size_t anti_entropy_peer(shoal_replicator_t *r, const shoal_node_t *const *peers, size_t n,
                         void *arg)
{
    shoal_cluster_t *c = arg;
    if (cstate_member(c->state, c->self) && !all_seen(c))
        return n;
    return choose_peer(r, peers, n, c);
}

/* Members (other than this one, not Removed, not unreachable from here) in `out`; with `unseen`
   only those that have not seen the current version. */
static size_t gossip_targets(shoal_cluster_t *c, bool unseen, const shoal_node_t **out)
{
    size_t n = 0;
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        if (m->node != c->self && m->status != SHOAL_MEMBER_REMOVED &&
            !zhash_lookup(c->my_unreachable, shoal_node_id(m->node)) &&
            (!unseen || !cstate_seen_by(c->state, m->node)))
            out[n++] = m->node;
    }
    return n;
}

void cluster_confirm_exiting(shoal_cluster_t *c)
{
    /* to every member, not only the leader: whoever leads when it arrives, or later, knows */
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        if (m->node != c->self && m->status != SHOAL_MEMBER_REMOVED &&
            m->status != SHOAL_MEMBER_DOWN)
            shoal_system_send(c->sys, m->node, K_EXITING_CONFIRMED, "", 0);
    }
    if (cstate_member(c->state, c->self) &&
        cstate_member(c->state, c->self)->status == SHOAL_MEMBER_EXITING)
        zhash_insert(c->exiting_confirmed, shoal_node_id(c->self), (void *)c->self);
}

void cluster_tell_everyone(shoal_cluster_t *c)
{
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        if (m->node != c->self && m->status != SHOAL_MEMBER_REMOVED)
            shoal_replicator_push(c->sysrepl, CLUSTER_KEY, m->node);
    }
}

/* One gossip message to `to`: the whole state, or only the clock's digest and the seen set when
   `to` has seen our clock (Akka's GossipStatus): what can still differ then is the seen set. A
   gossip round (`round`) always starts with the status: most members it picks already hold the
   clock (the push reached them) and only the seen set differs; one that does not answers by
   the clocks' order (on_gossip_status), so the whole state crosses only where a clock is
   behind. */
static int gossip_to(shoal_cluster_t *c, const shoal_node_t *to, bool round)
{
    if (round || cstate_seen_by(c->state, to))
        return send_seen_status(c, to, false);
    int rc = shoal_replicator_push(c->sysrepl, CLUSTER_KEY, to);
    if (rc == 0)
        c->stats.gossip_sent++;
    return rc;
}

/* Every change of the state goes at once to PUSH_FANOUT members: ones that have not seen the
   current version if there are, else any. A new clock goes whole (to the members that have not
   seen it); a change of the seen set alone (how members learn the state converged) goes as a
   digest-only status, and only while the cluster has at most
   reduce-gossip-different-view-probability members: above, every member would pass on every
   mark it learns (O(N) messages per member per change), and the rounds of gossip_tick spread
   it instead. A receiver that learns nothing does not pass it on, and pushes are push-pull, so
   the rumour dies out once everyone has it. bench_cluster_state simulates this policy at 100 and
   1,000 members (gossip_bytes_per_change_N; --policies compares the alternatives). */
void push_on_change(shoal_cluster_t *c)
{
    if (c->terminated || !cstate_member(c->state, c->self))
        return;
    uint8_t clock[16];
    cstate_clock_digest(c->state, clock);
    bool new_clock = memcmp(clock, c->pushed_clock, sizeof clock) != 0;
    memcpy(c->pushed_clock, clock, sizeof clock);
    if (!new_clock && c->state->n_members > c->s.reduce_gossip_different_view_probability)
        return;
    const shoal_node_t **peers = calloc(c->state->n_members + 1, sizeof *peers);
    if (!peers)
        abort();
    size_t n = gossip_targets(c, true, peers);
    if (!n)
        n = gossip_targets(c, false, peers);
    /* two distinct members (Serf's LAN fan-out is three): with one, the rumour sometimes dies
       before the last member hears it and the next gossip round has to find it. The leader's
       move on convergence (members Up, Exiting, Removed) is what every member waits for, and
       rare: it goes to every member at once (up to reduce-gossip-different-view-probability
       members), one hop instead of the epidemic's six or more (about 0.6 s of a cold start of
       50 members on two busy cores) */
    size_t fanout = PUSH_FANOUT;
    if (c->leader_moving && new_clock &&
        c->state->n_members <= c->s.reduce_gossip_different_view_probability) {
        fanout = n;
        c->stats.moves_pushed_to_all++;
    }
    for (size_t k = 0; k < fanout && n; k++) {
        size_t i = (size_t)(next_random(c) % n);
        if (new_clock)
            gossip_to(c, peers[i], false);
        else
            send_seen_status(c, peers[i], false);
        peers[i] = peers[--n];
    }
    free(peers);
}

/* Seen marks flow away from the members that hold them (a push goes to members that have not
   seen the clock), and the leader has seen every clock it made: it would hear of the others'
   marks only from the rounds, a few a second, while it is the one that acts on convergence. So a
   member whose mark convergence waits for (Up or Leaving) tells the leader at once when it has
   seen a new clock: one digest-only status per member per change, which the leader answers with
   its own when the member lacks marks (on_gossip_status). Akka's leader learns the marks by
   gossip alone; this is how a cold start of 50 members no longer waits about 0.7 s after its last
   join for the leader to move the joiners Up. Only up to reduce-gossip-different-view-probability
   members, as for the seen-only pushes: above, the leader would take N statuses per change. */
void tell_leader_seen(shoal_cluster_t *c)
{
    const cmember_t *me = cstate_member(c->state, c->self);
    if (c->terminated || !me ||
        (me->status != SHOAL_MEMBER_UP && me->status != SHOAL_MEMBER_LEAVING) ||
        c->state->n_members > c->s.reduce_gossip_different_view_probability)
        return;
    const shoal_node_t *leader = cstate_leader(c->state, NULL, c->self);
    if (leader && leader != c->self && !zhash_lookup(c->my_unreachable, shoal_node_id(leader)) &&
        send_seen_status(c, leader, false) == 0)
        c->stats.seen_reports_sent++;
}

/* The leader, the first to hold every mark (tell_leader_seen), tells every member once when the
   current clock has converged and it has nothing left to do on it: a digest-only status each, so
   every member's view converges within one message instead of waiting for the seen set to
   trickle through pushes and rounds (the tail of that epidemic took about half a second at 50
   members). With work waiting, the leader's own move makes the next clock, and it announces that
   one. Up to reduce-gossip-different-view-probability members, as above. */
void announce_convergence(shoal_cluster_t *c)
{
    if (c->terminated || !cstate_member(c->state, c->self) ||
        c->state->n_members > c->s.reduce_gossip_different_view_probability ||
        cstate_leader(c->state, NULL, c->self) != c->self || !cstate_converged(c->state) ||
        leader_has_work(c))
        return;
    uint8_t clock[16];
    cstate_clock_digest(c->state, clock);
    if (memcmp(clock, c->announced_clock, sizeof clock) == 0)
        return;
    memcpy(c->announced_clock, clock, sizeof clock);
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        if (m->node != c->self && m->status != SHOAL_MEMBER_REMOVED &&
            !zhash_lookup(c->my_unreachable, shoal_node_id(m->node)) &&
            send_seen_status(c, m->node, false) == 0)
            c->stats.convergence_announced++;
    }
}

void gossip_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    if (c->terminated || !cstate_member(c->state, c->self))
        return;
    c->gossip_round++;
    size_t alive = 0, seen = cstate_seen_count(c->state);
    for (size_t i = 0; i < c->state->n_members; i++)
        if (c->state->members[i].status != SHOAL_MEMBER_REMOVED)
            alive++;
    if (alive <= 1 || seen >= alive)
        return; /* converged on seen: the replicator's digest status is enough */
    /* Akka gossips three times per interval while fewer than half have seen the current
       version, else once. Here news is pushed when it happens (push_on_change), so rounds are
       what remains: a node whose view has not converged (someone, as far as it knows, has not
       seen the version) keeps the fast rate and pulls through push-pull; a rumour that missed it
       then costs a third of an interval, not a whole one. */
    (void)seen;
    if (c->gossip_round % 3 != 0 && cstate_converged(c->state))
        return;
    const shoal_node_t **peers = calloc(alive, sizeof *peers);
    if (!peers)
        abort();
    size_t n = gossip_targets(c, false, peers);
    if (n) {
        size_t i = choose_peer(c->sysrepl, peers, n, c);
        gossip_to(c, peers[i], true);
    }
    free(peers);
}
