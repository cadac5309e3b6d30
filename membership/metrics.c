/*  metrics.c — membership's part of the Prometheus endpoint (see ddata.h, METRICS).

    The collector runs on the node thread, where shoal_cluster_view and shoal_cluster_stats read
    the state directly (cluster_call does not hop threads there), so a scrape sees one consistent
    state and costs the cluster no extra round trip.
*/
#include "membership.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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
        gauge(out, "shoal_cluster_may_act", "1 when this node may act for the cluster.",
              v.may_act);
        shoal_cluster_view_free(&v);
    }
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
