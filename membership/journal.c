/*  journal.c — the node's recent cluster events, kept for GET /cluster/events (metrics.c) and the
    client request behind `shoal-cluster events` (admin.c), with what upper layers note
    (shoal_cluster_note_event). Kept from cluster_http_provide to cluster_http_withdraw.
*/
#include "cluster_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------------
 * Recent events: GET /cluster/events, the last EVENTS_KEPT cluster events this node saw (oldest
 * first), for the dashboard and for an operator asking "what just happened", and the client
 * request behind `shoal-cluster events`, which asks for those after the last sequence number it
 * saw. Upper layers add theirs (sharding's shard allocations and moves) with
 * shoal_cluster_note_event. A ring of fixed entries filled on the node thread: nothing allocated
 * per event.
 */
#define EVENTS_KEPT 256

typedef struct {
    uint64_t seq;                    /* 1, 2, ... on this node */
    int64_t at_ms;                   /* wall clock */
    shoal_cluster_event_kind_t kind; /* 0: an upper layer's event, named in name */
    char name[32];
    char node[SHOAL_NODE_ID_MAX + 1]; /* the member, or the new leader ("" when none) */
    char role[64];                    /* ROLE_LEADER_CHANGED */
    bool converged;                   /* CONVERGENCE */
    char fields[512];                 /* an upper layer's fields, as JSON members ("" none) */
} event_t;

struct cluster_events {
    int sub;
    bool in_snapshot; /* the state as events at subscription: not news */
    event_t ring[EVENTS_KEPT];
    size_t next, n;
    uint64_t seq; /* of the newest */
};

static event_t *event_add(struct cluster_events *e)
{
    event_t *x = &e->ring[e->next];
    e->next = (e->next + 1) % EVENTS_KEPT;
    e->n += e->n < EVENTS_KEPT;
    memset(x, 0, sizeof *x);
    x->seq = ++e->seq;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x->at_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return x;
}

static void on_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    struct cluster_events *e = arg;
    if (ev->kind == SHOAL_EV_SNAPSHOT_BEGIN || ev->kind == SHOAL_EV_SNAPSHOT_END) {
        e->in_snapshot = ev->kind == SHOAL_EV_SNAPSHOT_BEGIN;
        return;
    }
    if (e->in_snapshot)
        return;
    event_t *x = event_add(e);
    x->kind = ev->kind;
    snprintf(x->name, sizeof x->name, "%s", shoal_cluster_event_name(ev->kind));
    const shoal_node_t *n = ev->member ? ev->member->node : ev->leader;
    snprintf(x->node, sizeof x->node, "%s", n ? shoal_node_id(n) : "");
    snprintf(x->role, sizeof x->role, "%s", ev->role ? ev->role : "");
    x->converged = ev->converged;
}

void shoal_cluster_note_event(shoal_cluster_t *c, const char *event, const shoal_node_t *node,
                              const char *const *fields, size_t n_fields)
{
    if (!c || !c->events || !event)
        return;
    if (!shoal_system_on_thread(c->sys)) {
        shoal_wrong_thread(__func__, "shoal_system_call");
        return;
    }
    event_t *x = event_add(c->events);
    snprintf(x->name, sizeof x->name, "%s", event);
    snprintf(x->node, sizeof x->node, "%s", node ? shoal_node_id(node) : "");
    shoal_buf_t f = {0};
    for (size_t i = 0; i + 1 < n_fields; i += 2) {
        shoal_buf_append(&f, ",", 1);
        shoal_buf_json_string(&f, fields[i]);
        shoal_buf_append(&f, ":", 1);
        shoal_buf_json_string(&f, fields[i + 1] ? fields[i + 1] : "");
    }
    if (f.len < sizeof x->fields) /* a field too long for the ring: the event without them */
        memcpy(x->fields, shoal_buf_cstr(&f), f.len + 1);
    shoal_buf_free(&f);
}

/* The events after `since` (all kept: 0) as {"seq":newest,"missed":n,"events":[...]}: missed
   counts those after since that the ring no longer holds. Node thread. */
void cluster_events_json(shoal_cluster_t *c, uint64_t since, shoal_buf_t *out)
{
    struct cluster_events *e = c->events;
    uint64_t oldest = e && e->n ? e->seq - e->n + 1 : 0;
    uint64_t missed = e && since && since + 1 < oldest ? oldest - since - 1 : 0;
    shoal_buf_printf(out, "{\"seq\":%llu,\"missed\":%llu,\"events\":[",
                     (unsigned long long)(e ? e->seq : 0), (unsigned long long)missed);
    bool first = true;
    for (size_t i = 0; e && i < e->n; i++) {
        const event_t *x = &e->ring[(e->next + EVENTS_KEPT - e->n + i) % EVENTS_KEPT];
        if (x->seq <= since)
            continue;
        time_t t = (time_t)(x->at_ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        char when[40];
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        shoal_buf_printf(out, "%s{\"seq\":%llu,\"at\":\"%s.%03dZ\",\"event\":", first ? "" : ",",
                         (unsigned long long)x->seq, when, (int)(x->at_ms % 1000));
        first = false;
        shoal_buf_json_string(out, x->name);
        if (x->node[0]) {
            shoal_buf_printf(out, ",\"node\":");
            shoal_buf_json_string(out, x->node);
        }
        if (x->kind == SHOAL_EV_ROLE_LEADER_CHANGED) {
            shoal_buf_printf(out, ",\"role\":");
            shoal_buf_json_string(out, x->role);
        }
        if (x->kind == SHOAL_EV_CONVERGENCE)
            shoal_buf_printf(out, ",\"converged\":%s", x->converged ? "true" : "false");
        if (x->fields[0])
            shoal_buf_append(out, x->fields, strlen(x->fields));
        shoal_buf_printf(out, "}");
    }
    shoal_buf_printf(out, "]}");
}

static int events_start(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    int id = shoal_cluster_subscribe(c, on_event, c->events);
    if (id < 0)
        return id;
    c->events->sub = id;
    return 0;
}

static int events_stop(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_cluster_t *c = arg;
    shoal_cluster_unsubscribe(c, c->events->sub);
    return 0;
}

void cluster_events_start(shoal_cluster_t *c)
{
    c->events = calloc(1, sizeof *c->events);
    if (!c->events)
        abort();
    if (cluster_call(c, events_start, c) < 0) {
        free(c->events);
        c->events = NULL;
    }
}

void cluster_events_stop(shoal_cluster_t *c)
{
    if (c->events && c->sysrepl)
        cluster_call(c, events_stop, c);
    free(c->events);
    c->events = NULL;
}
