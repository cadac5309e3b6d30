/*  sbr.c — the split-brain resolver's decision (see sbr.h): which members this side downs, from
    the members and the unreachability records as this node sees them. A pure function: the
    caller (the leader of a side, once reachability has been stable for stable-after) applies it.

    WHO IS UNREACHABLE. A record says its observer cannot reach its subject. Records are used
    only when both ends are listed members neither Down nor Removed (a downed node's opinion is
    worth nothing, and its being unreachable changes nothing; ignoring such records also keeps a
    crashed member that watched a downed one from looking indirectly connected). A member is
    UNREACHABLE when some used record names it as subject (the union over observers, as Akka's
    reachability does). No
    unreachable member that could still be live (Joining, WeaklyUp, Up, Leaving) -> no decision:
    an unreachable Down or Exiting member is on its way out already.

    WHO IS COUNTED (toward a side's size, the oldest, the lowest address): members Up or Leaving,
    and with a role only those having it. Joining and WeaklyUp are not counted (they were never
    part of the converged cluster), nor are Exiting (already handed over, Removed soon on every
    side), Down or Removed — all as Akka's DowningStrategy. Counting is only for the decision:
    every member of the losing side that is not already Down or Removed is downed, whatever its
    status or roles (a Joining node left on a downed side would otherwise linger unreachable).

    INDIRECTLY CONNECTED. A link can fail while the rest of the network still carries gossip
    between its ends; a clean partition or a crash never produces that. An unreachable member is
    INDIRECTLY CONNECTED when
      - it is also an observer (a cycle in the unreachability graph: its gossip reaches us), or
      - it has seen the current state (the state changed when it was marked unreachable, yet it
        saw the change: it is reachable through someone), or
      - it is self (self has always seen its own state: a record naming self crossed the cut).
    A record whose subject is indirectly connected is a FLAKY LINK. Akka downs both ends of every
    flaky link, which downs everyone when the flaky links touch every member (a 2-node cluster
    with one flaky link, a triangle): the issue forbids ever downing the whole cluster for them.
    Here the resolver downs a VERTEX COVER of the flaky links instead, chosen greedily: the member
    on the most flaky links still uncovered goes first (ties: the younger — higher up-number, 0
    youngest — then the higher address, so the oldest, which hosts singletons, is kept), until
    no flaky link is left. A member whose NIC is bad sits on many flaky links and goes first; a
    single bad link downs one of its ends; at least one member always remains, since the last
    one standing has no uncovered link. Every remaining pair of members can then reach each
    other, except across a clean cut.
    If every live unreachable member is indirectly connected the decision is SBR_DOWN_INDIRECT:
    only the cover is downed. Otherwise the strategy decides between the cleanly cut-off members
    (unreachable and not indirectly connected: the other side) and everyone else (self's side,
    which holds the indirectly connected: they are connected to the cluster through someone, as
    Akka counts them once the records between them are dropped); its decision is reported and
    to_down holds the strategy's nodes plus the cover. Akka re-runs its strategy on filtered
    records and, when that still finds indirect connections, downs every node instead — which
    has taken whole clusters down during rolling updates; here the cleanly cut-off set is
    computed once (it cannot be indirectly connected by construction), so flaky links never
    cause more than the cover's downing. For the same reason the down-all strategy downs
    everyone only when there is a clean cut, and a strategy that finds no counted member at all
    (a role nobody has) downs only the cover when there are flaky links.

    STRATEGIES, as seen from self's side (S = counted members on self's side, O = counted members
    on the other side):
      keep-majority  |S| > |O| stays, |S| < |O| goes; a tie keeps the side holding the lowest
                     address (shoal_node_cmp) among the counted members of both sides.
      keep-oldest    the side holding the oldest counted member (lowest up-number; equal
                     up-numbers by address; 0 = never Up, youngest) stays; with down_if_alone, an
                     oldest alone (|its side| == 1) while the other side has two or more is downed
                     and the other side stays. 1 against 1 keeps the oldest: the other is no
                     better.
      static-quorum  more counted members than 2*quorum-1 (both sides could reach quorum: a
                     misconfiguration Akka also answers with down-all), or neither side at quorum
                     -> all are downed; else the side with quorum stays. quorum 0 is invalid: no
                     decision.
      down-all       all are downed.
    No counted member at all (with a role: nobody has it) -> all are downed (Akka), there being
    no ground to prefer a side.

    MEMBERSHIP CHANGING DURING THE PARTITION (Akka's edge case, kept). The other side's leader may
    have moved a Joining/WeaklyUp member to Up, or a Leaving member to Exiting, just before it
    lost us. So when keep-majority or keep-oldest would keep self's side, it decides again with
    the counts least favourable to self: Leaving not counted anywhere for the oldest and not on
    self's side; Joining/WeaklyUp counted on the other side (for keep-oldest only with
    down_if_alone, where they can flip the alone test). If the second answer differs, both sides
    might keep themselves: all are downed. Only the answer "this side stays" is checked — a side
    that goes can never cause two clusters.

    Outputs list members in the order of the `members` array. Cost: O(records * members) with
    pointer comparisons, a few kilobytes of flags; it runs once per stable reachability change.
*/
#include "sbr.h"

#include <stdlib.h>
#include <string.h>

/* Per-member facts derived from the records. */
enum {
    F_UNREACHABLE = 1, /* subject of a used record */
    F_OBSERVER = 2,    /* observer of a used record */
    F_INDIRECT = 4,    /* unreachable but indirectly connected */
    F_COVER = 8,       /* in the vertex cover of the flaky links: downed */
};

static bool is_live(shoal_member_status_t s)
{
    return s == SHOAL_MEMBER_JOINING || s == SHOAL_MEMBER_WEAKLY_UP || s == SHOAL_MEMBER_UP ||
           s == SHOAL_MEMBER_LEAVING;
}

/* May be downed: listed and not already Down or Removed (unknown statuses are left alone). */
static bool is_downable(shoal_member_status_t s)
{
    return is_live(s) || s == SHOAL_MEMBER_EXITING;
}

#define NONE SIZE_MAX

static size_t find_member(const sbr_member_t *members, size_t n, const shoal_node_t *node)
{
    for (size_t i = 0; i < n; i++)
        if (members[i].node == node)
            return i;
    return NONE;
}

/* Whether record r is used; its ends' indexes in *o and *s. */
static bool record_used(const sbr_member_t *members, size_t n, const sbr_record_t *r, size_t *o,
                        size_t *s)
{
    *o = find_member(members, n, r->observer);
    *s = find_member(members, n, r->subject);
    return *o != NONE && *s != NONE && *o != *s && is_downable(members[*o].status) &&
           is_downable(members[*s].status);
}

/* Which members count, in one of the three ways the decision needs. */
typedef enum {
    COUNT_PLAIN,        /* Up, Leaving */
    COUNT_NO_LEAVING,   /* Up: those the other side cannot have moved to Exiting */
    COUNT_WITH_JOINING, /* Up, Leaving, Joining, WeaklyUp: those the other side may have Up */
    COUNT_UP_JOINING,   /* Up, Joining, WeaklyUp */
} count_mode_t;

static bool counted(const sbr_member_t *m, count_mode_t mode)
{
    if (!m->has_role)
        return false;
    switch (m->status) {
    case SHOAL_MEMBER_UP:
        return true;
    case SHOAL_MEMBER_LEAVING:
        return mode == COUNT_PLAIN || mode == COUNT_WITH_JOINING;
    case SHOAL_MEMBER_JOINING:
    case SHOAL_MEMBER_WEAKLY_UP:
        return mode == COUNT_WITH_JOINING || mode == COUNT_UP_JOINING;
    default:
        return false;
    }
}

typedef struct {
    const sbr_member_t *members;
    size_t n;
    const uint8_t *flags;
} view_t;

/* On the other side: cleanly cut off (unreachable, not indirectly connected). */
static bool on_other_side(const view_t *v, size_t i)
{
    return (v->flags[i] & (F_UNREACHABLE | F_INDIRECT)) == F_UNREACHABLE;
}

static void count_sides(const view_t *v, count_mode_t self_mode, count_mode_t other_mode,
                        size_t *self_side, size_t *other_side)
{
    *self_side = *other_side = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (on_other_side(v, i)) {
            if (counted(&v->members[i], other_mode))
                (*other_side)++;
        } else if (counted(&v->members[i], self_mode)) {
            (*self_side)++;
        }
    }
}

/* Index of the counted member with the lowest address, or NONE. */
static size_t lowest_counted(const view_t *v, count_mode_t mode)
{
    size_t best = NONE;
    for (size_t i = 0; i < v->n; i++)
        if (counted(&v->members[i], mode) &&
            (best == NONE || shoal_node_cmp(v->members[i].node, v->members[best].node) < 0))
            best = i;
    return best;
}

/* Index of the oldest counted member, or NONE. Never-Up members (up-number 0) are the youngest. */
static size_t oldest_counted(const view_t *v, count_mode_t mode)
{
    size_t best = NONE;
    uint64_t best_age = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (!counted(&v->members[i], mode))
            continue;
        uint64_t age = v->members[i].up_number ? v->members[i].up_number : UINT64_MAX;
        if (best == NONE || age < best_age ||
            (age == best_age && shoal_node_cmp(v->members[i].node, v->members[best].node) < 0)) {
            best = i;
            best_age = age;
        }
    }
    return best;
}

static sbr_decision_t majority_of(const view_t *v, size_t self_side, size_t other_side,
                                  size_t lowest)
{
    if (self_side > other_side)
        return SBR_DOWN_UNREACHABLE;
    if (self_side < other_side)
        return SBR_DOWN_REACHABLE;
    return on_other_side(v, lowest) ? SBR_DOWN_REACHABLE : SBR_DOWN_UNREACHABLE;
}

static sbr_decision_t keep_majority(const view_t *v)
{
    size_t lowest = lowest_counted(v, COUNT_PLAIN);
    if (lowest == NONE)
        return SBR_DOWN_ALL;
    size_t s, o;
    count_sides(v, COUNT_PLAIN, COUNT_PLAIN, &s, &o);
    sbr_decision_t d = majority_of(v, s, o, lowest);
    if (d != SBR_DOWN_UNREACHABLE)
        return d;
    /* Staying: check with the other side counted as large, and self's as small, as they can be. */
    lowest = lowest_counted(v, COUNT_NO_LEAVING);
    if (lowest == NONE)
        return SBR_DOWN_ALL;
    count_sides(v, COUNT_NO_LEAVING, COUNT_WITH_JOINING, &s, &o);
    return majority_of(v, s, o, lowest) == SBR_DOWN_UNREACHABLE ? d : SBR_DOWN_ALL;
}

static sbr_decision_t oldest_of(bool oldest_here, size_t self_side, size_t other_side,
                                bool down_if_alone)
{
    if (oldest_here)
        return down_if_alone && self_side == 1 && other_side >= 2 ? SBR_DOWN_REACHABLE
                                                                  : SBR_DOWN_UNREACHABLE;
    return down_if_alone && other_side == 1 && self_side >= 2 ? SBR_DOWN_UNREACHABLE
                                                              : SBR_DOWN_REACHABLE;
}

static sbr_decision_t keep_oldest(const view_t *v, bool down_if_alone)
{
    size_t oldest = oldest_counted(v, COUNT_PLAIN);
    if (oldest == NONE)
        return SBR_DOWN_ALL;
    size_t s, o;
    count_sides(v, COUNT_PLAIN, COUNT_PLAIN, &s, &o);
    sbr_decision_t d = oldest_of(!on_other_side(v, oldest), s, o, down_if_alone);
    if (d != SBR_DOWN_UNREACHABLE)
        return d;
    /* Staying: the oldest may be Exiting over there (then the next oldest is theirs), and joiners
       may be Up over there and flip the alone test. */
    oldest = oldest_counted(v, COUNT_NO_LEAVING);
    if (oldest == NONE)
        return SBR_DOWN_ALL;
    count_mode_t mode = down_if_alone ? COUNT_UP_JOINING : COUNT_NO_LEAVING;
    count_sides(v, mode, mode, &s, &o);
    return oldest_of(!on_other_side(v, oldest), s, o, down_if_alone) == SBR_DOWN_UNREACHABLE
               ? d
               : SBR_DOWN_ALL;
}

static sbr_decision_t static_quorum(const view_t *v, uint32_t quorum)
{
    size_t s, o;
    count_sides(v, COUNT_PLAIN, COUNT_PLAIN, &s, &o);
    if (s + o == 0)
        return SBR_DOWN_ALL;
    if (s + o > 2 * (size_t)quorum - 1)
        return SBR_DOWN_ALL;
    if (s >= quorum)
        return SBR_DOWN_UNREACHABLE;
    if (o >= quorum)
        return SBR_DOWN_REACHABLE;
    return SBR_DOWN_ALL;
}

/* Whether member a should go before member b when both are on as many flaky links. */
static bool goes_first(const sbr_member_t *a, const sbr_member_t *b)
{
    uint64_t age_a = a->up_number ? a->up_number : UINT64_MAX;
    uint64_t age_b = b->up_number ? b->up_number : UINT64_MAX;
    if (age_a != age_b)
        return age_a > age_b;
    return shoal_node_cmp(a->node, b->node) > 0;
}

/* Marks F_COVER on a greedy vertex cover of the flaky links (records whose subject is
   F_INDIRECT). Duplicate and two-way records count once per record: a link reported both ways is
   stronger evidence against its ends. False when out of memory. */
static bool cover_flaky_links(const sbr_member_t *members, size_t n, const sbr_record_t *records,
                              size_t n_records, uint8_t *flags)
{
    size_t n_links = 0;
    for (size_t r = 0; r < n_records; r++) {
        size_t o, s;
        if (record_used(members, n, &records[r], &o, &s) && (flags[s] & F_INDIRECT))
            n_links++;
    }
    if (n_links == 0)
        return true;
    size_t *ends = malloc(2 * n_links * sizeof *ends);
    size_t *degree = malloc(n * sizeof *degree);
    if (!ends || !degree) {
        free(ends);
        free(degree);
        return false;
    }
    n_links = 0;
    for (size_t r = 0; r < n_records; r++) {
        size_t o, s;
        if (record_used(members, n, &records[r], &o, &s) && (flags[s] & F_INDIRECT)) {
            ends[2 * n_links] = o;
            ends[2 * n_links + 1] = s;
            n_links++;
        }
    }
    for (;;) {
        memset(degree, 0, n * sizeof *degree);
        for (size_t l = 0; l < n_links; l++)
            if (!(flags[ends[2 * l]] & F_COVER) && !(flags[ends[2 * l + 1]] & F_COVER)) {
                degree[ends[2 * l]]++;
                degree[ends[2 * l + 1]]++;
            }
        size_t pick = NONE;
        for (size_t i = 0; i < n; i++)
            if (degree[i] &&
                (pick == NONE || degree[i] > degree[pick] ||
                 (degree[i] == degree[pick] && goes_first(&members[i], &members[pick]))))
                pick = i;
        if (pick == NONE)
            break;
        flags[pick] |= F_COVER;
    }
    free(ends);
    free(degree);
    return true;
}

static bool any_counted(const view_t *v)
{
    for (size_t i = 0; i < v->n; i++)
        if (counted(&v->members[i], COUNT_PLAIN))
            return true;
    return false;
}

sbr_decision_t sbr_decide(const sbr_config_t *cfg, const sbr_member_t *members, size_t n_members,
                          const sbr_record_t *records, size_t n_records, const shoal_node_t *self,
                          const shoal_node_t **to_down, size_t *n_down)
{
    *n_down = 0;
    if (!cfg || !members || n_members == 0 || (n_records && !records))
        return SBR_NO_DECISION;
    switch (cfg->strategy) {
    case SHOAL_SBR_KEEP_MAJORITY:
    case SHOAL_SBR_KEEP_OLDEST:
    case SHOAL_SBR_DOWN_ALL:
        break;
    case SHOAL_SBR_STATIC_QUORUM:
        if (cfg->static_quorum_size == 0)
            return SBR_NO_DECISION;
        break;
    default:
        return SBR_NO_DECISION;
    }

    uint8_t *flags = calloc(n_members, 1);
    if (!flags)
        return SBR_NO_DECISION; /* tried again at the next tick */
    view_t v = {members, n_members, flags};

    /* Pass 1: who observes, who is unreachable. */
    size_t o, s;
    for (size_t r = 0; r < n_records; r++) {
        if (!record_used(members, n_members, &records[r], &o, &s))
            continue;
        flags[o] |= F_OBSERVER;
        flags[s] |= F_UNREACHABLE;
    }
    /* Pass 2: indirectly connected subjects (needs every observer flag from pass 1). */
    for (size_t r = 0; r < n_records; r++) {
        if (!record_used(members, n_members, &records[r], &o, &s))
            continue;
        if ((flags[s] & F_OBSERVER) || members[s].seen_current || members[s].node == self)
            flags[s] |= F_INDIRECT;
    }
    if (!cover_flaky_links(members, n_members, records, n_records, flags)) {
        free(flags);
        return SBR_NO_DECISION; /* out of memory: tried again at the next tick */
    }

    bool live_unreachable = false, any_indirect = false, clean_cut = false;
    for (size_t i = 0; i < n_members; i++) {
        if ((flags[i] & F_UNREACHABLE) && is_live(members[i].status)) {
            live_unreachable = true;
            if (!(flags[i] & F_INDIRECT))
                clean_cut = true;
        }
        if (flags[i] & F_COVER)
            any_indirect = true;
    }

    sbr_decision_t d;
    if (!live_unreachable)
        d = SBR_NO_DECISION;
    else if (!clean_cut)
        d = SBR_DOWN_INDIRECT;
    else if (any_indirect && !any_counted(&v))
        d = SBR_DOWN_INDIRECT; /* nobody to decide on; never everyone because of them */
    else if (cfg->strategy == SHOAL_SBR_KEEP_MAJORITY)
        d = keep_majority(&v);
    else if (cfg->strategy == SHOAL_SBR_KEEP_OLDEST)
        d = keep_oldest(&v, cfg->down_if_alone);
    else if (cfg->strategy == SHOAL_SBR_STATIC_QUORUM)
        d = static_quorum(&v, cfg->static_quorum_size);
    else
        d = SBR_DOWN_ALL;

    if (d != SBR_NO_DECISION) {
        for (size_t i = 0; i < n_members; i++) {
            if (!is_downable(members[i].status))
                continue;
            bool down = (flags[i] & F_COVER) || d == SBR_DOWN_ALL ||
                        (d == SBR_DOWN_UNREACHABLE && on_other_side(&v, i)) ||
                        (d == SBR_DOWN_REACHABLE && !on_other_side(&v, i));
            if (down)
                to_down[(*n_down)++] = members[i].node;
        }
    }
    free(flags);
    return d;
}

const char *sbr_decision_name(sbr_decision_t d)
{
    switch (d) {
    case SBR_NO_DECISION:
        return "no-decision";
    case SBR_DOWN_UNREACHABLE:
        return "down-unreachable";
    case SBR_DOWN_REACHABLE:
        return "down-reachable";
    case SBR_DOWN_INDIRECT:
        return "down-indirectly-connected";
    case SBR_DOWN_ALL:
        return "down-all";
    }
    return "unknown";
}
