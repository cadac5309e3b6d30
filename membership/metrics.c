/*  metrics.c — membership's part of the management endpoint (see ddata.h, METRICS AND THE
    MANAGEMENT ENDPOINT): its metric families, GET /cluster/members, POST /cluster/members/<member>
    (leave or down) and the "cluster" readiness check. shoal_cluster_new provides them to the node;
    shoal_cluster_destroy withdraws them.

    Everything here runs on the node thread, where shoal_cluster_view, shoal_cluster_stats, leave
    and down act on the state directly (cluster_call does not hop threads there), so a scrape or a
    probe sees one consistent state and costs the cluster no extra round trip.
*/
#include "cluster_internal.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    shoal_member_status_t status;
    const char *label;
} statuses[] = {
    {SHOAL_MEMBER_JOINING, "joining"}, {SHOAL_MEMBER_WEAKLY_UP, "weakly_up"},
    {SHOAL_MEMBER_UP, "up"},           {SHOAL_MEMBER_LEAVING, "leaving"},
    {SHOAL_MEMBER_EXITING, "exiting"}, {SHOAL_MEMBER_DOWN, "down"},
};

#define CS(f) offsetof(shoal_cluster_stats_t, f)
static const struct {
    const char *name, *help;
    size_t off;
} counters[] = {
    {"shoal_cluster_gossip_sent_total", "Gossip messages sent.", CS(gossip_sent)},
    {"shoal_cluster_gossip_received_total", "Gossip messages received.", CS(gossip_received)},
    {"shoal_cluster_gossip_dropped_stale_total", "Gossip dropped as older than its time to live.",
     CS(gossip_dropped_stale)},
    {"shoal_cluster_status_sent_total", "Gossip digest status messages sent.", CS(status_sent)},
    {"shoal_cluster_seen_status_sent_total",
     "Digest-only gossip (clock digest and seen set) sent instead of the whole state.",
     CS(seen_status_sent)},
    {"shoal_cluster_seen_status_received_total", "Digest-only gossip received.",
     CS(seen_status_received)},
    {"shoal_cluster_seen_reports_sent_total",
     "Digest-only statuses sent to the leader on seeing a new clock.", CS(seen_reports_sent)},
    {"shoal_cluster_convergence_announced_total",
     "Digest-only statuses the leader sent to announce a converged clock.",
     CS(convergence_announced)},
    {"shoal_cluster_moves_pushed_to_all_total",
     "Leader moves on convergence pushed whole to every member at once.", CS(moves_pushed_to_all)},
    {"shoal_cluster_seen_status_other_clock_total",
     "Digest-only gossip received with another clock (answered with the whole state).",
     CS(seen_status_other_clock)},
    {"shoal_cluster_seen_status_malformed_total", "Malformed digest-only gossip dropped.",
     CS(seen_status_malformed)},
    {"shoal_cluster_joins_received_total", "Join requests received.", CS(joins_received)},
    {"shoal_cluster_heartbeats_sent_total", "Heartbeats sent.", CS(heartbeats_sent)},
    {"shoal_cluster_heartbeats_received_total", "Heartbeat responses received.",
     CS(heartbeats_received)},
    {"shoal_cluster_indirect_probes_total", "Indirect probes sent.", CS(indirect_probes)},
    {"shoal_cluster_unreachable_marked_total", "Members this node marked unreachable.",
     CS(unreachable_marked)},
    {"shoal_cluster_reachable_marked_total", "Members this node marked reachable again.",
     CS(reachable_marked)},
    {"shoal_cluster_downed_by_sbr_total", "Members downed by the split brain resolver.",
     CS(downed_by_sbr)},
    {"shoal_cluster_leader_actions_total", "Leader actions performed.", CS(leader_actions)},
    {"shoal_cluster_clock_gaps_total", "Clock gaps detected (this node froze).", CS(clock_gaps)},
    {"shoal_cluster_fenced_total",
     "Times this node fenced itself: no heartbeat reply from the side the resolver keeps.",
     CS(fenced)},
    {"shoal_cluster_quarantined_by_peer_total",
     "Times a member said it quarantined this incarnation (this node then stopped).",
     CS(quarantined_by_peer)},
    {"shoal_cluster_loop_stalls_total", "Heartbeats refused because the node loop stalled.",
     CS(loop_stalls)},
    {"shoal_cluster_heartbeat_redials_total",
     "Heartbeat connections replaced after their requests went unanswered (a refused CURVE "
     "handshake is never retried by ZeroMQ).",
     CS(heartbeat_redials)},
    {"shoal_cluster_heartbeat_connections_refused_total",
     "Connections the heartbeat socket closed at once: max_inbound_connections were open.",
     CS(heartbeat_connections_refused)},
    {"shoal_cluster_heartbeat_handshakes_failed_total",
     "ZeroMQ handshakes that failed on the heartbeat socket.", CS(heartbeat_handshakes_failed)},
    {"shoal_cluster_heartbeat_handshakes_mismatched_total",
     "Heartbeat handshakes that asked for another security mechanism (CURVE vs plain).",
     CS(heartbeat_handshakes_mismatched)},
    {"shoal_cluster_heartbeat_handshakes_incomplete_total",
     "Heartbeat connections closed or timed out before completing the ZeroMQ handshake.",
     CS(heartbeat_handshakes_incomplete)},
};

static void gauge(shoal_buf_t *out, const char *name, const char *help, uint64_t v)
{
    shoal_metrics_family(out, name, "gauge", help);
    shoal_buf_printf(out, "%s %" PRIu64 "\n", name, v);
}

static void collect(shoal_system_t *sys, shoal_buf_t *out, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    shoal_cluster_view_t v;
    if (shoal_cluster_view(c, &v) == 0) {
        shoal_metrics_family(out, "shoal_cluster_members", "gauge",
                             "Members by status, as this node sees them.");
        for (size_t s = 0; s < sizeof statuses / sizeof *statuses; s++) {
            uint64_t n = 0;
            for (size_t i = 0; i < v.n_members; i++)
                n += v.members[i].status == statuses[s].status;
            shoal_buf_printf(out, "shoal_cluster_members{status=\"%s\"} %" PRIu64 "\n",
                             statuses[s].label, n);
        }
        uint64_t unreachable = 0;
        for (size_t i = 0; i < v.n_members; i++)
            unreachable += !v.members[i].reachable;
        gauge(out, "shoal_cluster_unreachable_members",
              "Members some live observer reports unreachable.", unreachable);
        gauge(out, "shoal_cluster_converged", "1 when every reachable member has seen the state.",
              v.converged);
        gauge(out, "shoal_cluster_is_leader", "1 when this node is the leader.",
              v.leader && v.leader == v.self);
        gauge(out, "shoal_cluster_may_act", "1 when this node may act for the cluster.", v.may_act);
        shoal_cluster_view_free(&v);
    }
    /* the protocol negotiation (docs/protocol-versions.md); collect runs on the node thread */
    gauge(out, "shoal_cluster_protocol_version",
          "The cluster's protocol version: the highest every member speaks (and the pin allows).",
          c->protocol);
    shoal_metrics_family(out, "shoal_cluster_members_by_protocol", "gauge",
                         "Members not Removed by the highest protocol version they speak.");
    for (uint32_t p = SHOAL_PROTOCOL_MIN; p <= SHOAL_PROTOCOL_MAX + 1; p++) {
        uint64_t n = 0;
        for (size_t i = 0; i < c->state->n_members; i++)
            n += c->state->members[i].status != SHOAL_MEMBER_REMOVED &&
                 cmember_protocol(&c->state->members[i]) == p;
        shoal_buf_printf(out, "shoal_cluster_members_by_protocol{protocol=\"%u\"} %" PRIu64 "\n",
                         (unsigned)p, n);
    }
    shoal_metrics_family(out, "shoal_cluster_protocol_joins_refused_total", "counter",
                         "InitJoins and Joins this node refused: the joiner does not speak the "
                         "cluster's protocol version.");
    shoal_buf_printf(out, "shoal_cluster_protocol_joins_refused_total %" PRIu64 "\n",
                     c->pstats.joins_refused);
    shoal_metrics_family(out, "shoal_cluster_joins_refused_identity_total", "counter",
                         "Joins this node refused: a live, reachable member at another address "
                         "has the joiner's durable identity (a restored or copied data "
                         "directory).");
    shoal_buf_printf(out, "shoal_cluster_joins_refused_identity_total %" PRIu64 "\n",
                     c->joins_refused_identity);
    shoal_metrics_family(out, "shoal_cluster_gossip_status_format_total", "counter",
                         "Digest-only gossip by protocol format (2: the SHOAL_PROTOCOL_NEXT "
                         "variant's changed format) and direction.");
    for (int f = 1; f <= 2; f++)
        shoal_buf_printf(out,
                         "shoal_cluster_gossip_status_format_total{format=\"%d\",dir=\"sent\"} "
                         "%" PRIu64 "\n"
                         "shoal_cluster_gossip_status_format_total{format=\"%d\",dir=\"received\"} "
                         "%" PRIu64 "\n",
                         f, c->pstats.status_sent[f], f, c->pstats.status_received[f]);
    shoal_cluster_stats_t st;
    if (shoal_cluster_stats(c, &st) == 0)
        for (size_t i = 0; i < sizeof counters / sizeof *counters; i++) {
            uint64_t val;
            memcpy(&val, (const char *)&st + counters[i].off, sizeof val);
            shoal_metrics_family(out, counters[i].name, "counter", counters[i].help);
            shoal_buf_printf(out, "%s %" PRIu64 "\n", counters[i].name, val);
        }
}

int shoal_cluster_metrics(shoal_cluster_t *c, shoal_metrics_t *m)
{
    if (!c || !m)
        return SHOAL_EINVAL;
    return shoal_metrics_add(m, collect, c);
}

/* ---------------------------------------------------------------------------------------------
 * Routes
 */
static void route_members(shoal_system_t *sys, const shoal_http_request_t *req,
                          shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    (void)req;
    shoal_cluster_view_t v;
    int rc = shoal_cluster_view(arg, &v);
    if (rc < 0) {
        shoal_http_error(rep, 503, "no view of the cluster: %s", shoal_strerror(rc));
        return;
    }
    cluster_view_json(arg, &v, &rep->body);
    shoal_buf_append(&rep->body, "\n", 1);
    shoal_cluster_view_free(&v);
}

/* POST /cluster/members/<node id or host:port>, the action in the body or ?action=: "leave" or
   "down" (as `shoal-cluster leave|down`). */
static void route_member_action(shoal_system_t *sys, const shoal_http_request_t *req,
                                shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    const char *action = shoal_http_param(req, "action");
    char word[16] = "";
    if (!action) { /* the body, trimmed: `curl -d down` */
        const char *b = req->body;
        b += strspn(b, " \t\r\n");
        size_t n = strcspn(b, " \t\r\n");
        if (n < sizeof word)
            memcpy(word, b, n), word[n] = 0;
        action = word;
    }
    bool down = strcmp(action, "down") == 0;
    if (!down && strcmp(action, "leave") != 0) {
        shoal_http_error(rep, 400,
                         "say what to do with the member: leave or down (the body, or "
                         "?action=), not '%.32s'",
                         action);
        return;
    }
    if (!req->rest[0]) {
        shoal_http_error(rep, 400, "name the member: POST /cluster/members/<host:port or node id>");
        return;
    }
    const shoal_node_t *node = shoal_cluster_find(c, req->rest);
    if (!node) {
        shoal_http_error(rep, 404, "no member %.200s", req->rest);
        return;
    }
    int rc = down ? shoal_cluster_down(c, node) : shoal_cluster_leave(c, node);
    if (rc < 0) {
        shoal_http_error(rep, rc == SHOAL_ENOTMEMBER ? 404 : 409, "%s %s: %s", action,
                         shoal_node_id(node), shoal_strerror(rc));
        return;
    }
    rep->status = 202; /* accepted: the cluster carries it out through gossip */
    shoal_buf_printf(&rep->body, "{\"member\":");
    shoal_buf_json_string(&rep->body, shoal_node_id(node));
    shoal_buf_printf(&rep->body, ",\"action\":\"%s\"}\n", down ? "down" : "leave");
}

/* Ready: Up, allowed to act, and a majority of the Up members reachable (so this node's side of
   a partition can still decide anything). */
bool cluster_ready(shoal_cluster_t *c, shoal_buf_t *reason)
{
    shoal_cluster_view_t v;
    if (shoal_cluster_view(c, &v) < 0) {
        shoal_buf_printf(reason, "membership is stopping");
        return false;
    }
    bool ok = false;
    const shoal_member_t *me = v.self ? shoal_cluster_view_member(&v, v.self) : NULL;
    size_t up = 0, reachable = 0;
    for (size_t i = 0; i < v.n_members; i++) {
        const shoal_member_t *m = &v.members[i];
        if (m->status != SHOAL_MEMBER_UP && m->status != SHOAL_MEMBER_LEAVING)
            continue;
        up++;
        reachable += m->reachable;
    }
    if (!me && v.discovery) /* seed discovery says what it waits for */
        shoal_buf_printf(reason, "in no cluster (%s)", v.discovery);
    else if (!me)
        shoal_buf_printf(reason, "in no cluster%s",
                         v.joining ? " (asking the seeds to join)"
                                   : " (no seeds: waiting to be joined)");
    else if (me->status != SHOAL_MEMBER_UP)
        shoal_buf_printf(reason, "member status %s, not up", shoal_member_status_name(me->status));
    else if (!v.may_act)
        shoal_buf_printf(reason, "not allowed to act (downed, or frozen by a clock gap)");
    else if (reachable * 2 <= up)
        shoal_buf_printf(reason, "no quorum: %zu of %zu up members reachable", reachable, up);
    else
        ok = true;
    shoal_cluster_view_free(&v);
    return ok;
}

static bool ready(shoal_system_t *sys, shoal_buf_t *reason, void *arg)
{
    (void)sys;
    return cluster_ready(arg, reason);
}

static void route_events(shoal_system_t *sys, const shoal_http_request_t *req,
                         shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    const char *since = shoal_http_param(req, "since");
    char *end = NULL;
    unsigned long long s = since ? strtoull(since, &end, 10) : 0;
    if (since && (!*since || *end)) {
        shoal_http_error(rep, 400, "since takes a sequence number, not '%.100s'", since);
        return;
    }
    cluster_events_json(arg, s, &rep->body);
    shoal_buf_append(&rep->body, "\n", 1);
}

static void provide(shoal_metrics_t *m, void *arg)
{
    shoal_metrics_add(m, collect, arg);
    cluster_http_dashboard(m, arg);
    shoal_http_route(m, "/cluster/events", SHOAL_HTTP_GET, route_events, arg);
    shoal_http_route(m, "/cluster/members", SHOAL_HTTP_GET, route_members, arg);
    shoal_http_route(m, "/cluster/members/", SHOAL_HTTP_POST, route_member_action, arg);
    shoal_http_ready_check(m, "cluster", ready, arg);
}

int cluster_http_provide(shoal_cluster_t *c)
{
    /* events are kept from the start, so an endpoint started later still shows how the node
       got where it is */
    cluster_events_start(c);
    return shoal_http_provide(shoal_cluster_system(c), provide, c);
}

void cluster_http_withdraw(shoal_cluster_t *c)
{
    shoal_http_withdraw(shoal_cluster_system(c), c);
    cluster_events_stop(c);
}
