/*  calls.c — the public calls of membership.h that act on a running cluster from any thread
    (join, leave, down, forget, find, status, may-act, may-host, stats, on-up and on-removed
    callbacks, the accessors) and the _sync twins of the node-thread calls.
*/
#include "cluster_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Public calls
 */
typedef struct {
    shoal_cluster_t *c;
    const shoal_node_t *node;
    const char *const *seeds;
    size_t n;
    const char *text;
} api_arg_t;

static int do_join(shoal_system_t *sys, void *arg)
{
    (void)sys;
    api_arg_t *a = arg;
    return cluster_do_join(a->c, a->seeds, a->n);
}

static int do_forget(shoal_system_t *sys, void *arg)
{
    (void)sys;
    api_arg_t *a = arg;
    return cluster_do_forget(a->c, a->text, true);
}

int shoal_cluster_forget(shoal_cluster_t *c, const char *durable_id)
{
    if (!c || !durable_id || !*durable_id)
        return SHOAL_EINVAL;
    api_arg_t a = {c, NULL, NULL, 0, durable_id};
    return cluster_call(c, do_forget, &a);
}

int shoal_cluster_join(shoal_cluster_t *c, const char *const *seeds, size_t n)
{
    if (!c || (n && !seeds))
        return SHOAL_EINVAL;
    api_arg_t a = {c, NULL, seeds, n, NULL};
    return cluster_call(c, do_join, &a);
}

static int do_leave(shoal_system_t *sys, void *arg)
{
    (void)sys;
    api_arg_t *a = arg;
    return cluster_do_leave(a->c, a->node);
}

int shoal_cluster_leave(shoal_cluster_t *c, const shoal_node_t *node)
{
    if (!c)
        return SHOAL_EINVAL;
    api_arg_t a = {c, node, NULL, 0, NULL};
    return cluster_call(c, do_leave, &a);
}

static int do_down(shoal_system_t *sys, void *arg)
{
    (void)sys;
    api_arg_t *a = arg;
    return cluster_do_down(a->c, a->node);
}

int shoal_cluster_down(shoal_cluster_t *c, const shoal_node_t *node)
{
    if (!c || !node)
        return SHOAL_EINVAL;
    api_arg_t a = {c, node, NULL, 0, NULL};
    return cluster_call(c, do_down, &a);
}

static int do_find(shoal_system_t *sys, void *arg)
{
    (void)sys;
    api_arg_t *a = arg;
    a->node = cluster_find_in(a->c->state, a->text);
    return 0;
}

const shoal_node_t *shoal_cluster_find(shoal_cluster_t *c, const char *id_or_address)
{
    if (!c || !id_or_address)
        return NULL;
    api_arg_t a = {c, NULL, NULL, 0, id_or_address};
    if (cluster_call(c, do_find, &a) < 0)
        return NULL;
    return a.node;
}

static int do_self_status(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return (int)cluster_self_status(arg);
}

shoal_member_status_t shoal_cluster_self_status(shoal_cluster_t *c)
{
    if (!c)
        return 0;
    int rc = cluster_call(c, do_self_status, c);
    return rc > 0 ? (shoal_member_status_t)rc : 0;
}

static int do_may_act(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return cluster_may_act(arg) ? 1 : 0;
}

static int do_may_host(shoal_system_t *sys, void *arg)
{
    (void)sys;
    return cluster_may_host(arg) ? 1 : 0;
}

bool shoal_cluster_may_host(shoal_cluster_t *c)
{
    return c && cluster_call(c, do_may_host, c) == 1;
}

bool shoal_cluster_may_act(shoal_cluster_t *c)
{
    return c && cluster_call(c, do_may_act, c) == 1;
}

shoal_system_t *shoal_cluster_system(shoal_cluster_t *c)
{
    return c ? c->sys : NULL;
}

const shoal_cluster_settings_t *shoal_cluster_settings(const shoal_cluster_t *c)
{
    return c ? &c->s : NULL;
}

shoal_replicator_t *shoal_cluster_system_replicator(shoal_cluster_t *c)
{
    return c ? c->sysrepl : NULL;
}

static int add_cb(callback_t **arr, size_t *n, shoal_cluster_fn *fn, void *arg)
{
    *arr = realloc(*arr, (*n + 1) * sizeof **arr);
    if (!*arr)
        abort();
    (*arr)[(*n)++] = (callback_t){fn, arg};
    return 0;
}

int shoal_cluster_on_up(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg)
{
    if (!c || !fn)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(c->sys))
        return shoal_wrong_thread(__func__, "shoal_cluster_on_up_sync");
    if (c->up_called) {
        fn(c, arg);
        return 0;
    }
    return add_cb(&c->on_up, &c->n_on_up, fn, arg);
}

int shoal_cluster_on_removed(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg)
{
    if (!c || !fn)
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(c->sys))
        return shoal_wrong_thread(__func__, "shoal_cluster_on_removed_sync");
    if (c->removed_called) {
        fn(c, arg);
        return 0;
    }
    return add_cb(&c->on_removed, &c->n_on_removed, fn, arg);
}

typedef struct {
    shoal_cluster_t *c;
    shoal_cluster_stats_t *out;
} stats_arg_t;

static int do_stats(shoal_system_t *sys, void *arg)
{
    (void)sys;
    stats_arg_t *a = arg;
    shoal_cluster_t *c = a->c;
    shoal_cluster_stats_t *out = a->out;
    *out = c->stats;
    shoal_replicator_stats_t rs;
    if (shoal_replicator_stats(c->sysrepl, &rs) == 0) {
        out->gossip_dropped_stale = rs.dropped_stale;
        out->status_sent = rs.status_sent;
    }
    if (c->hb) {
        hb_stats_t h;
        hb_actor_stats(c->hb, &h);
        out->heartbeats_sent = h.pings_sent;
        out->heartbeats_received = h.pongs_received;
        out->indirect_probes = h.probes_sent;
        out->loop_stalls = h.stalls_refused;
        out->heartbeat_redials = h.redials;
        out->heartbeat_connections_refused = h.listener.refused;
        out->heartbeat_handshakes_failed = h.listener.handshakes_failed;
        out->heartbeat_handshakes_mismatched = h.listener.handshakes_mismatched;
        out->heartbeat_handshakes_incomplete = h.listener.handshakes_incomplete;
    }
    return 0;
}

int shoal_cluster_stats(shoal_cluster_t *c, shoal_cluster_stats_t *out)
{
    if (!c || !out)
        return SHOAL_EINVAL;
    stats_arg_t a = {c, out};
    return cluster_call(c, do_stats, &a);
}

/* The _sync twins of the node-thread calls (THREADS in membership.h). */
typedef struct {
    shoal_cluster_t *c;
    shoal_cluster_event_fn *efn;
    shoal_cluster_fn *cfn;
    void *arg;
    int id;
} twin_t;

static int twin_subscribe(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_cluster_subscribe(t->c, t->efn, t->arg);
}

int shoal_cluster_subscribe_sync(shoal_cluster_t *c, shoal_cluster_event_fn *fn, void *arg)
{
    if (!c || !fn)
        return SHOAL_EINVAL;
    twin_t t = {.c = c, .efn = fn, .arg = arg};
    return shoal_system_call(c->sys, twin_subscribe, &t);
}

static int twin_unsubscribe(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_cluster_unsubscribe(t->c, t->id);
}

int shoal_cluster_unsubscribe_sync(shoal_cluster_t *c, int id)
{
    if (!c)
        return SHOAL_EINVAL;
    twin_t t = {.c = c, .id = id};
    return shoal_system_call(c->sys, twin_unsubscribe, &t);
}

static int twin_on_up(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_cluster_on_up(t->c, t->cfn, t->arg);
}

int shoal_cluster_on_up_sync(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg)
{
    if (!c || !fn)
        return SHOAL_EINVAL;
    twin_t t = {.c = c, .cfn = fn, .arg = arg};
    return shoal_system_call(c->sys, twin_on_up, &t);
}

static int twin_on_removed(shoal_system_t *sys, void *arg)
{
    (void)sys;
    twin_t *t = arg;
    return shoal_cluster_on_removed(t->c, t->cfn, t->arg);
}

int shoal_cluster_on_removed_sync(shoal_cluster_t *c, shoal_cluster_fn *fn, void *arg)
{
    if (!c || !fn)
        return SHOAL_EINVAL;
    twin_t t = {.c = c, .cfn = fn, .arg = arg};
    return shoal_system_call(c->sys, twin_on_removed, &t);
}
