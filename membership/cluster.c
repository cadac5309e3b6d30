/*  cluster.c — the cluster object's base, which every other file of membership/ stands on: the
    calls that read the state (self status, member views, lookups, may-act and may-host), sending
    to a peer (with the messages that wait for a handshake), running on the node thread, and
    cluster_change: a change applied to the local state, handed to the system replicator, then
    reacted to (react.c, through the react hook: react.c is above every file that makes changes).
*/
#include "cluster_internal.h"

#define PENDING_TTL_MS 5000

shoal_member_status_t cluster_self_status(shoal_cluster_t *c)
{
    const cmember_t *m = cstate_member(c->state, c->self);
    return m ? (shoal_member_status_t)m->status : 0;
}

void cluster_member_view(const cstate_t *st, const cmember_t *m, shoal_member_t *out)
{
    memset(out, 0, sizeof *out);
    out->node = m->node;
    out->status = (shoal_member_status_t)m->status;
    out->up_number = m->up_number;
    out->roles = (const char *const *)m->roles;
    out->n_roles = m->n_roles;
    out->app_version = m->app_version ? m->app_version : "";
    out->heartbeat_endpoint = m->hb_endpoint ? m->hb_endpoint : "";
    out->durable_id = m->durable_id ? m->durable_id : "";
    out->reachable = !cstate_is_unreachable(st, m->node);
}

const shoal_node_t *cluster_find_in(const cstate_t *st, const char *id)
{
    if (!id || !*id)
        return NULL;
    const char *addr = strncmp(id, "tcp://", 6) == 0 ? id + 6 : id;
    const shoal_node_t *best = NULL;
    for (size_t i = 0; i < st->n_members; i++) {
        const cmember_t *m = &st->members[i];
        if (strcmp(shoal_node_id(m->node), addr) == 0)
            return m->node;
        char hp[300];
        snprintf(hp, sizeof hp, "%s:%u", shoal_node_host(m->node),
                 (unsigned)shoal_node_port(m->node));
        if (strcmp(hp, addr) == 0 && m->status != SHOAL_MEMBER_REMOVED &&
            (!best || cstate_member(st, best)->status > m->status))
            best = m->node;
    }
    return best;
}

/* A loop stalled past stable-after (SIGSTOP, a swapped-out process, a debugger) may have been
   downed meanwhile. The node tick notices it and freezes the node until fresh gossip says it is
   still a member; but after a resume the loop reads its sockets before its timers run, so the
   clock is read here as well: from the first message after the pause, nothing acts. */
static bool stalled(const shoal_cluster_t *c)
{
    return c->frozen ||
           (c->last_tick && shoal_now_ms() - c->last_tick > (int64_t)c->s.stable_after_ms &&
            cstate_member(c->state, c->self));
}

bool shoal_cluster_paused(shoal_cluster_t *c)
{
    if (c && !shoal_system_on_thread(c->sys)) {
        shoal_wrong_thread(__func__, "shoal_cluster_may_act");
        return false;
    }
    return c && stalled(c);
}

bool cluster_may_act(shoal_cluster_t *c)
{
    shoal_member_status_t st = cluster_self_status(c);
    return !stalled(c) && !c->terminated && (st == SHOAL_MEMBER_UP || st == SHOAL_MEMBER_LEAVING);
}

bool cluster_may_host(shoal_cluster_t *c)
{
    return !c->fenced && cluster_may_act(c);
}

/* Sends now, or after the handshake with `to` (joining nodes are not connected yet). */
int cluster_send(shoal_cluster_t *c, const shoal_node_t *to, uint16_t kind,
                 const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        abort();
    protobuf_c_message_pack(msg, buf);
    int rc = shoal_system_send(c->sys, to, kind, buf, len);
    if (rc == SHOAL_ENOTCONN) {
        char ep[300];
        endpoint_of(to, ep, sizeof ep);
        shoal_system_connect(c->sys, ep);
        c->pending = realloc(c->pending, (c->n_pending + 1) * sizeof *c->pending);
        if (!c->pending)
            abort();
        c->pending[c->n_pending++] =
            (pending_msg_t){to, kind, buf, len, shoal_now_ms() + PENDING_TTL_MS};
        return 0;
    }
    free(buf);
    return rc;
}

void pending_flush(shoal_cluster_t *c, const shoal_node_t *up)
{
    int64_t now = shoal_now_ms();
    size_t j = 0;
    for (size_t i = 0; i < c->n_pending; i++) {
        pending_msg_t *p = &c->pending[i];
        bool keep = p->expires > now;
        if (keep && up && p->to == up) {
            shoal_system_send(c->sys, p->to, p->kind, p->data, p->len);
            keep = false;
        }
        if (keep)
            c->pending[j++] = *p;
        else
            free(p->data);
    }
    c->n_pending = j;
}

/* ---------------------------------------------------------------------------------------------
 * Changes and merges
 */
static int merge_into(shoal_crdt_t *value, void *arg)
{
    return shoal_crdt_merge(value, arg);
}

static void update_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    (void)arg;
    if (status < 0)
        shoal_warning("membership: storing the cluster state failed: %s", shoal_strerror(status));
}

/* Hands the local state to the system replicator (which merges it into its copy). */
void cluster_publish(shoal_cluster_t *c)
{
    cstate_t *empty = cstate_new(); /* the update owns it */
    shoal_consistency_t local = {.level = SHOAL_LOCAL};
    shoal_replicator_update(c->sysrepl, CLUSTER_KEY, &empty->base, &local, merge_into,
                            &c->state->base, update_done, c);
}

int cluster_change(shoal_cluster_t *c, cstate_change_fn *fn, void *arg)
{
    uint8_t before[16], after[16];
    shoal_crdt_digest(&c->state->base, before);
    int rc = fn(c->state, c->self, arg);
    if (rc < 0)
        return rc;
    shoal_crdt_digest(&c->state->base, after);
    if (memcmp(before, after, 16) == 0)
        return rc; /* nothing changed: nothing to tell anyone */
    cluster_publish(c);
    cluster_react(c);
    return rc;
}

int cluster_call(shoal_cluster_t *c, shoal_call_fn *fn, void *arg)
{
    if (shoal_system_on_thread(c->sys))
        return fn(c->sys, arg);
    return shoal_system_call(c->sys, fn, arg);
}

uint32_t cluster_own_protocol(const shoal_cluster_t *c)
{
    return shoal_system_protocol_pin(c->sys);
}
