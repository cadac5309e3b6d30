/*  join.c — joining's messages and leaving: the seed list, InitJoin and its answers (Ack, Nack),
    a member letting a joiner in (Join), handshakes (on_peer), forming a cluster alone, and a
    member's leave or down (cluster_do_leave, cluster_do_down).
*/
#include "cluster_internal.h"
#include "cluster.pb-c.h"
#include "internal.h" /* shoal_endpoint_resolve_host */

/* ---------------------------------------------------------------------------------------------
 * Joining
 */
bool is_seed_self(const shoal_cluster_t *c, const char *seed)
{
    return strcmp(seed, c->self_endpoint) == 0;
}

static int seed_index(shoal_cluster_t *c, const shoal_node_t *n);

/* Connects to every seed; those already handshaken get an InitJoin now, the others when their
   handshake completes (on_peer). */
/* InitJoin to one seed: "who are you, may I join?" (its answer: on_init_join_ack/_nack) */
static void init_join_to(shoal_cluster_t *c, const shoal_node_t *seed, const char *when)
{
    Shoal__Cluster__InitJoin m = SHOAL__CLUSTER__INIT_JOIN__INIT;
    m.app_version = (char *)c->s.app_version;
    if (SHOAL_PROTOCOL_MAX > 1) { /* at 1 nothing is written: 0.1.x's bytes */
        m.protocol_min = SHOAL_PROTOCOL_MIN;
        m.protocol_max = SHOAL_PROTOCOL_MAX;
    }
    shoal_debug("%s: InitJoin to seed %s (%s)", shoal_node_id(c->self), shoal_node_id(seed), when);
    cluster_send(c, seed, K_INIT_JOIN, &m.base);
}

void send_init_join(shoal_cluster_t *c)
{
    for (size_t i = 0; i < c->n_seeds; i++) {
        if (is_seed_self(c, c->seeds[i]))
            continue;
        shoal_system_connect(c->sys, c->seeds[i]);
        /* connected before it was a seed (a contact point found after it dialled us): its
           handshake is done and no PEER_UP will come again */
        const shoal_node_t *up = c->seed_known[i] ? NULL : zhash_lookup(c->peer_at, c->seeds[i]);
        if (up)
            seed_index(c, up);
        if (c->seed_known[i]) {
            init_join_to(c, c->seed_known[i], "a round of the join");
        } else {
            shoal_debug("%s: seed %s not connected yet: InitJoin when its handshake is done",
                        shoal_node_id(c->self), c->seeds[i]);
        }
    }
    c->join_last_try = shoal_now_ms();
}

/* The node's CURVE public key (32 bytes) for its member record: how members it has never met
   find the server key to reach it. false when the node runs plain. */
static bool own_public_key(const shoal_cluster_t *c, uint8_t key[32])
{
    const char *z85 = shoal_system_public_key(c->sys);
    return z85 && zmq_z85_decode(key, z85) != NULL;
}

static int add_self(cstate_t *st, const shoal_node_t *self, void *arg)
{
    shoal_cluster_t *c = arg;
    uint8_t key[32];
    bool secure = own_public_key(c, key);
    int rc =
        cstate_add_member(st, self, self, c->s.roles, c->s.n_roles, c->s.app_version,
                          c->hb_endpoint, secure ? key : NULL, secure ? 32 : 0, c->s.durable_id);
    return rc < 0 ? rc : cstate_set_protocol_max(st, self, self, cluster_own_protocol(c));
}

void form_alone(shoal_cluster_t *c, const char *why)
{
    shoal_info("%s: %s: forming a new cluster", shoal_node_id(c->self), why);
    c->joining = false;
    cluster_change(c, add_self, c);
}

/* The first seed forms the cluster without waiting out seed-node-timeout when every other seed
   answered that it is in no cluster (Akka's InitJoinNack): a cold start of the whole seed list. */
static bool every_other_seed_nacked(const shoal_cluster_t *c)
{
    size_t others = 0;
    for (size_t i = 0; i < c->n_seeds; i++) {
        if (is_seed_self(c, c->seeds[i]))
            continue;
        if (!c->seed_nacked[i])
            return false;
        others++;
    }
    return others > 0;
}

/* A seed named by a host name ("tcp://localhost:2552", from seed-nodes in a configuration file or
   a join call) becomes "tcp://ADDRESS:PORT", the name's first IPv4 address (else its first IPv6
   one, in brackets), as shoal_system_new does for a bind and cli_node_address (tools/cli.h) for
   the programs' flags: a member's node id records the address it bound, so a seed kept as a name
   would never be recognised as that member (the first seed would not see itself and form the
   cluster, an answering seed would not count as one). An address literal, an ipc:// endpoint and
   a name that does not resolve are kept as they are (libzmq dials a name itself; the node id
   does not match it, so only its answer as a contact is lost). Resolved once, when the seed list
   is set. */
void seed_resolve(const char *seed, char *out, size_t cap)
{
    snprintf(out, cap, "%s", seed);
    char buf[300];
    int r = shoal_endpoint_resolve_host(seed, buf, sizeof buf);
    if (r < 0)
        shoal_warning("membership: seed %s: the host name does not resolve; dialled as it is",
                      seed);
    if (r == 1) {
        snprintf(out, cap, "%s", buf);
        shoal_debug("membership: seed %s is %s", seed, out);
    }
}

/* Replaces the seed list (host names resolved: seed_resolve). keep_answers: a seed still in the
   list keeps its known incarnation and its answer (discovery's contact points, resolved again and
   again). */
void set_seeds(shoal_cluster_t *c, const char *const *seeds, size_t n, bool keep_answers)
{
    char **s = calloc(n + 1, sizeof *s);
    const shoal_node_t **known = calloc(n + 1, sizeof *known);
    bool *nacked = calloc(n + 1, sizeof *nacked);
    if (!s || !known || !nacked)
        abort();
    for (size_t i = 0; i < n; i++) {
        char resolved[300];
        seed_resolve(seeds[i], resolved, sizeof resolved);
        if (!(s[i] = strdup(resolved)))
            abort();
        for (size_t j = 0; keep_answers && j < c->n_seeds; j++)
            if (strcmp(c->seeds[j], s[i]) == 0) {
                known[i] = c->seed_known[j];
                nacked[i] = c->seed_nacked[j];
            }
    }
    for (size_t i = 0; i < c->n_seeds; i++)
        free(c->seeds[i]);
    free(c->seeds);
    free(c->seed_known);
    free(c->seed_nacked);
    c->seeds = s;
    c->seed_known = known;
    c->seed_nacked = nacked;
    c->n_seeds = n;
}

/* Records the incarnation answering at a seed's endpoint; its index, or -1 when `n` is no seed. */
static int seed_index(shoal_cluster_t *c, const shoal_node_t *n)
{
    char ep[300];
    endpoint_of(n, ep, sizeof ep);
    for (size_t i = 0; i < c->n_seeds; i++)
        if (strcmp(c->seeds[i], ep) == 0) {
            if (c->seed_known[i] != n)
                c->seed_nacked[i] = false; /* a new incarnation: its old answer no longer holds */
            c->seed_known[i] = n;
            return (int)i;
        }
    return -1;
}

static bool is_seed_node(shoal_cluster_t *c, const shoal_node_t *n)
{
    return seed_index(c, n) >= 0;
}

void on_peer(shoal_system_t *sys, shoal_peer_event_t ev, const shoal_node_t *node,
             const shoal_node_t *old, uint64_t count, void *arg)
{
    (void)sys;
    (void)old;
    (void)count;
    shoal_cluster_t *c = arg;
    if (ev == SHOAL_PEER_QUARANTINED) {
        /* a member refuses this incarnation: the cluster removed it (downed while cut off, say)
           and this node never saw it happen. Running on would make it a zombie whose entities
           run beside their new owners: it stops like a downed node. */
        const cmember_t *m = cstate_member(c->state, node);
        if (m && m->status < SHOAL_MEMBER_DOWN && cstate_member(c->state, c->self) &&
            !c->shutting_down) {
            shoal_warning("%s: %s has quarantined this incarnation (the cluster removed it): "
                          "stopping its cluster part",
                          shoal_node_id(c->self), shoal_node_id(node));
            c->stats.quarantined_by_peer++;
            cluster_shutdown_start(c, SHOAL_SHUTDOWN_DOWNED);
        }
        return;
    }
    if (ev != SHOAL_PEER_UP && ev != SHOAL_PEER_RESTARTED)
        return;
    pending_flush(c, node);
    if (c->joining) {
        char ep[300];
        endpoint_of(node, ep, sizeof ep);
        zhash_update(c->peer_at, ep, (void *)node);
    }
    if (c->joining && is_seed_node(c, node))
        init_join_to(c, node, "its handshake just completed");
    /* a member that connects and has not seen the current state gets it now (a cold start of
       50 members sends about 1,200 of these whole; a digest-only status instead saved the bytes
       but added a round trip per connection and was not faster on two busy cores) */
    const cmember_t *m = cstate_member(c->state, node);
    if (m && m->status != SHOAL_MEMBER_REMOVED && cstate_member(c->state, c->self) &&
        !cstate_seen_by(c->state, node))
        shoal_replicator_push(c->sysrepl, CLUSTER_KEY, node);
}

/* A joiner's protocol range as its InitJoin or Join says it (nothing said: 1..1). */
static void joiner_range(uint32_t min, uint32_t max, uint32_t *omin, uint32_t *omax)
{
    *omin = min ? min : 1;
    *omax = max > *omin ? max : *omin;
}

/* True (after logging and counting the refusal) when a joiner of this range cannot speak the
   cluster's version: never let in, never downed, its messages never dropped (none is sent to
   it at a version it lacks). */
static bool refuse_protocol(shoal_cluster_t *c, const shoal_node_t *from, uint32_t min,
                            uint32_t max, const char *step, char *why, size_t why_len)
{
    if (c->protocol >= min && c->protocol <= max)
        return false;
    c->pstats.joins_refused++;
    snprintf(why, why_len,
             "refused: this node speaks protocol %u..%u, the cluster runs at %u; pin "
             "shoal/cluster/protocol-version = %u on the members before a rollback",
             min, max, c->protocol, max);
    shoal_warning("%s: %s of %s refused: it speaks protocol %u..%u, the cluster runs at %u",
                  shoal_node_id(c->self), step, shoal_node_id(from), min, max, c->protocol);
    return true;
}

void on_init_join(shoal_cluster_t *c, const shoal_node_t *from, const Shoal__Cluster__InitJoin *m)
{
    shoal_member_status_t st = cluster_self_status(c);
    if (!st && c->joining && !c->shutting_down) {
        /* in no cluster either: say so, so that the first seed of a cold start need not wait out
           seed-node-timeout */
        Shoal__Cluster__InitJoinAck n = SHOAL__CLUSTER__INIT_JOIN_ACK__INIT;
        shoal_debug("%s: InitJoin from %s: Nack (this node is in no cluster either)",
                    shoal_node_id(c->self), shoal_node_id(from));
        cluster_send(c, from, K_INIT_JOIN_NACK, &n.base);
        return;
    }
    if (!st || st >= SHOAL_MEMBER_EXITING || c->shutting_down) {
        shoal_debug("%s: InitJoin from %s not answered: %s", shoal_node_id(c->self),
                    shoal_node_id(from), st ? "this node is leaving" : "not a member yet");
        return; /* leaving: the joiner asks another seed */
    }
    Shoal__Cluster__InitJoinAck a = SHOAL__CLUSTER__INIT_JOIN_ACK__INIT;
    a.status = st;
    uint32_t min, max;
    char why[300];
    joiner_range(m->protocol_min, m->protocol_max, &min, &max);
    if (refuse_protocol(c, from, min, max, "InitJoin", why, sizeof why)) {
        /* a joiner of this release reads why; an older one ignores the fields, sends its Join
           and is refused there */
        a.cluster_protocol = c->protocol;
        a.refused = why;
    }
    shoal_debug("%s: InitJoin from %s: Ack (%s, this node %s)", shoal_node_id(c->self),
                shoal_node_id(from), a.refused && *a.refused ? a.refused : "welcome",
                shoal_member_status_name(st));
    cluster_send(c, from, K_INIT_JOIN_ACK, &a.base);
}

void on_init_join_ack(shoal_cluster_t *c, const shoal_node_t *from,
                      const Shoal__Cluster__InitJoinAck *m)
{
    if (!c->joining || cstate_member(c->state, c->self))
        return;
    if (m->cluster_protocol || (m->refused && *m->refused)) {
        c->pstats.refused_here++;
        shoal_warning("%s: join through %s %s", shoal_node_id(c->self), shoal_node_id(from),
                      m->refused && *m->refused ? m->refused : "refused: protocol versions");
        return; /* asked again on the next retry: an operator may pin the cluster meanwhile */
    }
    if (c->join_contact && shoal_now_ms() - c->join_last_try < (int64_t)c->s.seed_node_timeout_ms) {
        shoal_debug("%s: InitJoin Ack from %s ignored: joining through %s in this round",
                    shoal_node_id(c->self), shoal_node_id(from), shoal_node_id(c->join_contact));
        return; /* already asked another seed in this round */
    }
    c->join_contact = from;
    c->join_last_try = shoal_now_ms();
    Shoal__Cluster__Join j = SHOAL__CLUSTER__JOIN__INIT;
    j.roles = (char **)c->s.roles;
    j.n_roles = c->s.n_roles;
    j.app_version = (char *)c->s.app_version;
    j.heartbeat_endpoint = c->hb_endpoint;
    j.durable_id = (char *)(c->s.durable_id ? c->s.durable_id : "");
    if (SHOAL_PROTOCOL_MAX > 1) {
        /* what it decodes (the seed's check) and what it announces (its record: the pin caps it) */
        j.protocol_min = SHOAL_PROTOCOL_MIN;
        j.protocol_max = SHOAL_PROTOCOL_MAX;
        j.member_protocol = cluster_own_protocol(c) > 1 ? cluster_own_protocol(c) : 0;
    }
    uint8_t key[32];
    if (own_public_key(c, key)) {
        j.public_key.data = key;
        j.public_key.len = 32;
    }
    shoal_replicator_add_peer(c->sysrepl, from, true, 0);
    cluster_send(c, from, K_JOIN, &j.base);
    shoal_info("%s: joining through %s", shoal_node_id(c->self), shoal_node_id(from));
}

void on_init_join_nack(shoal_cluster_t *c, const shoal_node_t *from)
{
    if (!c->joining || cstate_member(c->state, c->self))
        return;
    int i = seed_index(c, from);
    if (i < 0)
        return;
    shoal_debug("%s: InitJoin Nack from seed %s: it is in no cluster", shoal_node_id(c->self),
                shoal_node_id(from));
    c->seed_nacked[i] = true;
    /* discovery forms only after stable-margin (discovery_tick), never on the last answer */
    if (!c->discovering && c->n_seeds && is_seed_self(c, c->seeds[0]) && !c->join_contact &&
        every_other_seed_nacked(c))
        form_alone(c, "every other seed answered that it is in no cluster");
}

typedef struct {
    const shoal_node_t *node;
    const Shoal__Cluster__Join *j;
} join_arg_t;

static int add_joiner(cstate_t *st, const shoal_node_t *self, void *arg)
{
    join_arg_t *a = arg;
    int rc = cstate_add_member(st, self, a->node, (const char *const *)a->j->roles, a->j->n_roles,
                               a->j->app_version, a->j->heartbeat_endpoint, a->j->public_key.data,
                               a->j->public_key.len, a->j->durable_id);
    return rc < 0 ? rc : cstate_set_protocol_max(st, self, a->node, a->j->member_protocol);
}

static int down_node(cstate_t *st, const shoal_node_t *self, void *arg)
{
    const cmember_t *m = cstate_member(st, arg);
    if (!m)
        return SHOAL_ENOTMEMBER;
    if (m->status >= SHOAL_MEMBER_DOWN)
        return 0;
    return cstate_set_status(st, self, arg, SHOAL_MEMBER_DOWN);
}

/* One identity, one live member (KEPT MEMBERSHIP; docs/operations.md, "Backup, restore"): a
   joiner whose data directory is a copy of a live member's (a backup restored with its identity
   beside the original, a directory copied by hand) would answer for that identity as well, and
   majorities would count one voter twice. While a member at another address with that identity
   is neither Down nor Removed and is reachable, the join is refused: counted, logged (1st, 2nd,
   4th...) and told to the joiner as an InitJoinAck whose `refused` it logs. An unreachable one
   (the node crashed, and was restarted elsewhere on its directory) does not hold the joiner off:
   the split-brain resolver downs it. A restart at the same address is the loop above's case. */
static bool identity_in_use(shoal_cluster_t *c, const shoal_node_t *from, const char *id)
{
    if (!id || !*id)
        return false;
    const cmember_t *twin = NULL;
    for (size_t i = 0; i < c->state->n_members && !twin; i++) {
        const cmember_t *m = &c->state->members[i];
        if (m->node != from && m->status < SHOAL_MEMBER_DOWN && m->durable_id &&
            strcmp(m->durable_id, id) == 0 && !cstate_is_unreachable(c->state, m->node))
            twin = m;
    }
    if (!twin)
        return false;
    uint64_t k = ++c->joins_refused_identity;
    char why[400];
    snprintf(why, sizeof why,
             "refused: identity %.64s (its data directory's meta/node-id) is live in the cluster "
             "as %s, %s: never two live members with one identity; stop that node, or restore "
             "with --new-identity",
             id, shoal_node_id(twin->node),
             shoal_member_status_name((shoal_member_status_t)twin->status));
    if ((k & (k - 1)) == 0)
        shoal_warning("%s: join of %s %s (%llu refused so far)", shoal_node_id(c->self),
                      shoal_node_id(from), why, (unsigned long long)k);
    Shoal__Cluster__InitJoinAck a = SHOAL__CLUSTER__INIT_JOIN_ACK__INIT;
    a.status = cluster_self_status(c);
    a.refused = why;
    cluster_send(c, from, K_INIT_JOIN_ACK, &a.base);
    return true;
}

void on_join(shoal_cluster_t *c, const shoal_node_t *from, const Shoal__Cluster__Join *j)
{
    shoal_member_status_t st = cluster_self_status(c);
    if (!st || st >= SHOAL_MEMBER_EXITING || c->shutting_down)
        return;
    c->stats.joins_received++;
    if (j->n_roles > CSTATE_MAX_ROLES || !j->heartbeat_endpoint || !*j->heartbeat_endpoint) {
        shoal_warning("membership: malformed join from %s dropped", shoal_node_id(from));
        return;
    }
    /* another incarnation at the same address: down it; the new one gets in once it is gone */
    for (size_t i = 0; i < c->state->n_members; i++) {
        const cmember_t *m = &c->state->members[i];
        if (m->node != from && m->status != SHOAL_MEMBER_REMOVED &&
            shoal_node_port(m->node) == shoal_node_port(from) &&
            strcmp(shoal_node_host(m->node), shoal_node_host(from)) == 0) {
            if (m->status != SHOAL_MEMBER_DOWN) {
                shoal_info("%s: %s restarted as %s: downing the old incarnation",
                           shoal_node_id(c->self), shoal_node_id(m->node), shoal_node_id(from));
                cluster_change(c, down_node, (void *)m->node);
            }
            return;
        }
    }
    const cmember_t *known = cstate_member(c->state, from);
    if (known && known->status == SHOAL_MEMBER_REMOVED)
        return; /* a removed incarnation never comes back */
    uint32_t pmin, pmax;
    char why[300];
    joiner_range(j->protocol_min, j->protocol_max, &pmin, &pmax);
    if (!known && refuse_protocol(c, from, pmin, pmax, "join", why, sizeof why))
        return;
    if (!known && identity_in_use(c, from, j->durable_id))
        return;
    join_arg_t a = {from, j};
    if (!known) {
        int rc = cluster_change(c, add_joiner, &a);
        if (rc < 0) {
            shoal_warning("membership: join of %s refused: %s", shoal_node_id(from),
                          shoal_strerror(rc));
            return;
        }
        shoal_info("%s: %s is joining", shoal_node_id(c->self), shoal_node_id(from));
    }
    shoal_replicator_push(c->sysrepl, CLUSTER_KEY, from); /* the welcome */
}

static int leave_node(cstate_t *st, const shoal_node_t *self, void *arg)
{
    const cmember_t *m = cstate_member(st, arg);
    if (!m)
        return SHOAL_ENOTMEMBER;
    if (m->status >= SHOAL_MEMBER_LEAVING)
        return 0; /* already leaving (or gone) */
    return cstate_set_status(st, self, arg, SHOAL_MEMBER_LEAVING);
}

int cluster_do_leave(shoal_cluster_t *c, const shoal_node_t *node)
{
    if (!node)
        node = c->self;
    if (!cstate_member(c->state, c->self))
        return node == c->self && c->joining ? (cluster_shutdown_start(c, SHOAL_SHUTDOWN_LEAVE), 0)
                                             : SHOAL_ENOTMEMBER;
    const cmember_t *m = cstate_member(c->state, node);
    if (!m || m->status == SHOAL_MEMBER_REMOVED)
        return SHOAL_ENOTMEMBER;
    return cluster_change(c, leave_node, (void *)node);
}

int cluster_do_down(shoal_cluster_t *c, const shoal_node_t *node)
{
    const cmember_t *m = node ? cstate_member(c->state, node) : NULL;
    if (!m || m->status == SHOAL_MEMBER_REMOVED)
        return SHOAL_ENOTMEMBER;
    if (!cstate_member(c->state, c->self))
        return SHOAL_ENOTMEMBER;
    return cluster_change(c, down_node, (void *)node);
}
