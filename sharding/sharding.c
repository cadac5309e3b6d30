/*  sharding.c — sharding on one node: the regions of its entity types, the message kinds they
    share, and what they need to know of the cluster (who is reachable, removed, this node's own
    status), kept from membership's events.
*/
#include <stddef.h>
#include <string.h>

#include "sharding_internal.h"

/* ---------------------------------------------------------------------------------------------
 * What the regions know of the cluster (the lookups are view.c's)
 */
static void refresh_view(shoal_sharding_t *sh)
{
    if (sh->have_view)
        shoal_cluster_view_free(&sh->view);
    sh->have_view = shoal_cluster_view(sh->c, &sh->view) == 0;
    sh->view_at = shoal_now_ms();
}

static void on_cluster_event(shoal_cluster_t *c, const shoal_cluster_event_t *ev, void *arg)
{
    (void)c;
    shoal_sharding_t *sh = arg;
    const shoal_node_t *n = ev->member ? ev->member->node : NULL;
    switch (ev->kind) {
    case SHOAL_EV_UNREACHABLE:
        zhashx_update(sh->unreachable, shoal_node_id(n), (void *)n);
        break;
    case SHOAL_EV_REACHABLE:
        zhashx_delete(sh->unreachable, shoal_node_id(n));
        break;
    case SHOAL_EV_MEMBER_REMOVED:
        zhashx_delete(sh->unreachable, shoal_node_id(n));
        if (!sharding_removed(sh, n)) {
            zhashx_insert(sh->removed_set, shoal_node_id(n), (void *)n);
            sh->n_removed++;
        }
        for (size_t i = 0; i < sh->n_regions; i++)
            region_node_removed(sh->regions[i], n);
        break;
    default:
        break;
    }
    if (ev->kind == SHOAL_EV_SNAPSHOT_BEGIN)
        return;
    refresh_view(sh);
    for (size_t i = 0; i < sh->n_regions; i++)
        region_cluster_changed(sh->regions[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Messages
 */
static uint64_t malformed_count;

/* A control message, from a peer or from this node itself, to its type's coordinator (kinds
   below 20) or region. */
static void dispatch_control(shoal_sharding_t *sh, const shoal_node_t *from,
                             const Shoal__Sharding__Control *m)
{
    shoal_region_t *r = sharding_region_by_name(sh, m->type_name);
    if (!r) {
        shoal_debug("%s: sharding: control message for unknown type %s from %s",
                   shoal_node_id(sh->self), m->type_name, shoal_node_id(from));
    } else if (m->kind < 20 && m->kind != SHOAL__SHARDING__CONTROL__KIND__UNKNOWN) {
        if (r->coord)
            coordinator_on_control(r->coord, from, m);
        else
            shoal_debug("%s: sharding %s: %d for a coordinator not here",
                       shoal_node_id(sh->self), r->name, (int)m->kind);
    } else {
        region_on_control(r, from, m);
    }
}

static void on_message(shoal_system_t *sys, const shoal_node_t *from, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    (void)sys;
    shoal_sharding_t *sh = arg;
    if (kind == K_SH_DELIVER) {
        region_on_deliver(sh, from, data, len);
    } else if (kind == K_SH_REPLY) {
        region_on_reply(sh, from, data, len);
    } else if (kind == K_SH_CONTROL) {
        Shoal__Sharding__Control *m = wire_parse_control(data, len);
        if (!m) {
            if (malformed_count++ % 1000 == 0)
                shoal_warning("%s: sharding: malformed control message from %s dropped (%llu so "
                             "far)",
                             shoal_node_id(sh->self), shoal_node_id(from),
                             (unsigned long long)malformed_count);
            return;
        }
        dispatch_control(sh, from, m);
        wire_control_free(m);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Control messages to self go through a post, so a region and its own node's coordinator talk
 * the same way as remote ones (no re-entrancy, the decoder on every path). region_send_control
 * (outbox.c) posts them to self_deliver through shoal_sharding_t.deliver_self.
 */
static int self_deliver(shoal_system_t *sys, void *arg)
{
    self_msg_t *x = arg;
    shoal_sharding_t *sh = x->sh;
    (void)sys;
    Shoal__Sharding__Control *m = sh->stopping ? NULL : wire_parse_control(x->data, x->len);
    if (m) {
        dispatch_control(sh, x->from, m);
        wire_control_free(m);
    }
    free(x);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Life cycle
 */
typedef struct {
    shoal_sharding_t *sh;
    shoal_cluster_t *c;
} new_ctx_t;

static void tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_sharding_t *sh = arg;
    /* membership's view changes by events, but reachability of a member can change without a
       membership event reaching us in some orders; a cheap periodic refresh bounds staleness */
    if (shoal_now_ms() - sh->view_at > 1000)
        refresh_view(sh);
    region_tick_all(sh);
}

/* start_on_node failed (no timer): nothing of it may stay registered */
static int stop_on_node_early(shoal_system_t *sys, void *arg)
{
    shoal_sharding_t *sh = arg;
    if (sh->cluster_sub > 0)
        shoal_cluster_unsubscribe(sh->c, sh->cluster_sub);
    sharding_admin_unregister(sh);
    shoal_system_register(sys, K_SH_DELIVER, NULL, NULL);
    shoal_system_register(sys, K_SH_REPLY, NULL, NULL);
    shoal_system_register(sys, K_SH_CONTROL, NULL, NULL);
    return 0;
}

static int start_on_node(shoal_system_t *sys, void *arg)
{
    shoal_sharding_t *sh = arg;
    shoal_system_register(sys, K_SH_DELIVER, on_message, sh);
    shoal_system_register(sys, K_SH_REPLY, on_message, sh);
    shoal_system_register(sys, K_SH_CONTROL, on_message, sh);
    refresh_view(sh);
    sh->cluster_sub = shoal_cluster_subscribe(sh->c, on_cluster_event, sh);
    sharding_admin_register(sh);
    sh->t_tick = shoal_system_timer(sys, 20, true, tick, sh);
    return sh->t_tick > 0 ? 0 : sh->t_tick;
}

shoal_sharding_t *shoal_sharding_new(shoal_cluster_t *c, int *err)
{
    int e = 0;
    if (!err)
        err = &e;
    shoal_error_detail_clear();
    if (!c) {
        *err = shoal_error_detail_set(SHOAL_EINVAL, "shoal_sharding_new: no cluster");
        return NULL;
    }
    /* at most one live entity: a node cut off must be fenced before the other side can
       reallocate its shards (THE FENCE in membership.h) */
    char why[512];
    if (shoal_cluster_fence_check(shoal_cluster_settings(c), why, sizeof why) < 0) {
        shoal_error_detail_log("sharding: refused to start: %s", why);
        *err = SHOAL_EINVAL;
        return NULL;
    }
    /* its replicas decode wherever they arrive: every node registers sharding's types */
    shoal_sharding_register_types();
    shoal_sharding_t *sh = calloc(1, sizeof *sh);
    if (!sh)
        abort();
    sh->c = c;
    sh->deliver_self = self_deliver;
    sh->sys = shoal_cluster_system(c);
    sh->self = shoal_system_self(sh->sys);
    sh->unreachable = zhashx_new();
    sh->removed_set = zhashx_new();
    pthread_mutex_init(&sh->lock, NULL);
    pthread_mutex_init(&sh->admin_mu, NULL);
    pthread_cond_init(&sh->admin_cv, NULL);
    int rc = shoal_system_call(sh->sys, start_on_node, sh);
    if (rc < 0) {
        shoal_system_call(sh->sys, stop_on_node_early, sh);
        zhashx_destroy(&sh->unreachable);
        zhashx_destroy(&sh->removed_set);
        pthread_mutex_destroy(&sh->admin_mu);
        pthread_cond_destroy(&sh->admin_cv);
        pthread_mutex_destroy(&sh->lock);
        free(sh);
        *err = rc;
        return NULL;
    }
    *err = 0;
    sharding_http_provide(sh);
    return sh;
}

static int stop_on_node(shoal_system_t *sys, void *arg)
{
    shoal_sharding_t *sh = arg;
    sh->stopping = true;
    sharding_admin_unregister(sh);
    for (size_t i = 0; i < sh->n_regions; i++) {
        sharding_events_stop(sh->regions[i]);
        region_stop(sh->regions[i]);
    }
    if (sh->cluster_sub > 0)
        shoal_cluster_unsubscribe(sh->c, sh->cluster_sub);
    if (sh->t_tick > 0)
        shoal_system_timer_cancel(sys, sh->t_tick);
    shoal_system_register(sys, K_SH_DELIVER, NULL, NULL);
    shoal_system_register(sys, K_SH_REPLY, NULL, NULL);
    shoal_system_register(sys, K_SH_CONTROL, NULL, NULL);
    return 0;
}

static int barrier(shoal_system_t *sys, void *arg)
{
    (void)sys;
    (void)arg;
    return 0;
}

void shoal_sharding_destroy(shoal_sharding_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    shoal_sharding_t *sh = *self_p;
    *self_p = NULL;
    if (shoal_system_on_thread(sh->sys)) {
        shoal_error("shoal_sharding_destroy called from the node thread: refused");
        return;
    }
    sharding_http_withdraw(sh); /* no request may reach sh from here on */
    sharding_admin_close(sh);   /* nor a client's: those being answered end first */
    int rc = shoal_system_call(sh->sys, stop_on_node, sh);
    if (rc == SHOAL_EDEADLK) {
        shoal_error("shoal_sharding_destroy called from the node thread: refused");
        return;
    }
    /* posts queued before the stop (messages to self, inbound tells) run before this barrier
       and find the regions stopped */
    shoal_system_call(sh->sys, barrier, NULL);
    /* a stopped node runs no more posts or timers, so the regions can go; a running node had
       its handlers and timers removed above */
    for (size_t i = 0; i < sh->n_regions; i++)
        region_free(sh->regions[i]);
    free(sh->regions);
    for (size_t i = 0; i < sh->n_owned_reps; i++) {
        shoal_cluster_unfollow(sh->c, sh->owned_reps[i]);
        shoal_replicator_destroy(&sh->owned_reps[i]);
    }
    free(sh->owned_reps);
    zhashx_destroy(&sh->removed_set);
    zhashx_destroy(&sh->unreachable);
    if (sh->have_view)
        shoal_cluster_view_free(&sh->view);
    shoal_buf_free(&sh->scratch);
    zhashx_destroy(&sh->event_homes);
    pthread_mutex_destroy(&sh->admin_mu);
    pthread_cond_destroy(&sh->admin_cv);
    pthread_mutex_destroy(&sh->lock);
    free(sh);
}

shoal_cluster_t *shoal_sharding_cluster(shoal_sharding_t *sh)
{
    return sh ? sh->c : NULL;
}

typedef struct {
    shoal_sharding_t *sh;
    const char *name;
    const shoal_sharding_settings_t *s;
    const shoal_entity_fns_t *fns;
    void *arg;
    bool proxy;
    int err;
    shoal_region_t *out;
} start_ctx_t;

static int start_region(shoal_system_t *sys, void *arg)
{
    (void)sys;
    start_ctx_t *x = arg;
    if (sharding_region_by_name(x->sh, x->name)) {
        x->err = SHOAL_EINVAL;
        return 0;
    }
    x->out = region_new(x->sh, x->name, x->s, x->fns, x->arg, x->proxy, &x->err);
    if (x->out) {
        sharding_events_start(x->out);
        pthread_mutex_lock(&x->sh->lock);
        x->sh->regions = realloc(x->sh->regions, (x->sh->n_regions + 1) * sizeof *x->sh->regions);
        if (!x->sh->regions)
            abort();
        x->sh->regions[x->sh->n_regions++] = x->out;
        pthread_mutex_unlock(&x->sh->lock);
    }
    return 0;
}

static shoal_region_t *start(shoal_sharding_t *sh, const char *name,
                             const shoal_sharding_settings_t *s, const shoal_entity_fns_t *fns,
                             void *arg, bool proxy, int *err)
{
    int e = 0;
    if (!err)
        err = &e;
    if (!sh || !name || !*name || strlen(name) > 200 || (!proxy && (!fns || !fns->receive))) {
        *err = SHOAL_EINVAL;
        return NULL;
    }
    shoal_sharding_settings_t def;
    if (!s) {
        shoal_sharding_settings_default(&def);
        s = &def;
    }
    start_ctx_t x = {sh, name, s, fns, arg, proxy, 0, NULL};
    int rc = shoal_system_call(sh->sys, start_region, &x);
    *err = rc < 0 ? rc : x.err;
    return rc < 0 ? NULL : x.out;
}

shoal_region_t *shoal_region_start(shoal_sharding_t *sh, const char *type_name,
                                   const shoal_sharding_settings_t *s,
                                   const shoal_entity_fns_t *fns, void *arg, int *err)
{
    return start(sh, type_name, s, fns, arg, false, err);
}

shoal_region_t *shoal_region_start_proxy(shoal_sharding_t *sh, const char *type_name,
                                         const shoal_sharding_settings_t *s, int *err)
{
    return start(sh, type_name, s, NULL, NULL, true, err);
}

typedef struct {
    shoal_sharding_t *sh;
    const char *const *names;
    size_t n;
} healthy_ctx_t;

static int healthy_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    healthy_ctx_t *x = arg;
    if (x->n == 0) {
        for (size_t i = 0; i < x->sh->n_regions; i++)
            if (!x->sh->regions[i]->registered)
                return 0;
        return 1;
    }
    for (size_t i = 0; i < x->n; i++) {
        shoal_region_t *r = sharding_region_by_name(x->sh, x->names[i]);
        if (!r || !r->registered)
            return 0;
    }
    return 1;
}

bool shoal_sharding_healthy(shoal_sharding_t *sh, const char *const *names, size_t n)
{
    if (!sh)
        return false;
    healthy_ctx_t x = {sh, names, n};
    int rc = shoal_system_on_thread(sh->sys) ? healthy_on_node(sh->sys, &x)
                                             : shoal_system_call(sh->sys, healthy_on_node, &x);
    return rc == 1;
}

int shoal_sharding_set_max_entities(shoal_sharding_t *sh, uint64_t max_entities)
{
    if (!sh)
        return SHOAL_EINVAL;
    atomic_store(&sh->max_entities, max_entities);
    return 0;
}

int shoal_sharding_set_replicator_limits(shoal_sharding_t *sh,
                                         const shoal_replicator_limits_t *limits)
{
    if (!sh)
        return SHOAL_EINVAL;
    shoal_replicator_limits_t lim = {0};
    if (limits)
        lim = *limits;
    /* under lock: a type starting meanwhile (region_new) reads them for its new replicator */
    pthread_mutex_lock(&sh->lock);
    sh->rep_limits = lim;
    int rc = 0;
    for (size_t i = 0; i < sh->n_owned_reps && rc == 0; i++)
        rc = shoal_replicator_set_limits(sh->owned_reps[i], &lim);
    pthread_mutex_unlock(&sh->lock);
    return rc;
}
