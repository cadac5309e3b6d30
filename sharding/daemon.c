/*  daemon.c — sharded daemon process: N workers kept alive across the cluster.

    The workers are the entities "0".."N-1" of an ordinary entity type whose shard id is the
    worker id itself, so each worker is a shard of its own and the allocation strategy spreads
    them over the members. Every node pings every worker with StartEntity each keep-alive
    interval (Akka's keep-alive pinger): a worker whose node went is started again on its new
    home by the first ping after the reallocation. N lives in an LWWRegister of the role's
    replicator so a rescale on one node reaches all; workers at or above N stop where they run.
*/
#include <string.h>

#include "sharding_internal.h"

static void worker_shard(const char *entity_id, uint32_t number_of_shards, char *out, void *arg)
{
    (void)number_of_shards;
    (void)arg;
    snprintf(out, SHOAL_SHARD_ID_MAX + 1, "%s", entity_id);
}

static void key_of(const shoal_region_t *r, char *out, size_t cap)
{
    snprintf(out, cap, "daemon-%s-workers", r->name);
}

/* Stops the workers hosted here whose id is no longer below N. */
static void stop_excess(shoal_region_t *r)
{
    for (shard_t *s = zhashx_first(r->shards); s; s = zhashx_next(r->shards)) {
        if ((uint32_t)strtoul(s->id, NULL, 10) < r->daemon_workers)
            continue;
        shoal_entity_t *e;
        for (size_t pos = 0; (e = shard_entity_next(s, &pos));)
            if (e->status == E_RUNNING && !e->depth) {
                e->passivating = true;
                e->stop_now = true;
                e->status = E_STOPPING;
                s->maybe_stopping = true;
            }
    }
    /* finished outside the iteration: entity_finish changes the tables */
    bool again = true;
    while (again) {
        again = false;
        shoal_entity_t *e;
        for (shard_t *s = zhashx_first(r->shards); s && !again; s = zhashx_next(r->shards))
            for (size_t pos = 0; (e = shard_entity_next(s, &pos)) != NULL;)
                if (e->stop_now && !e->depth) {
                    shoal_entity_stop(e);
                    again = true;
                    break;
                }
    }
}

static void ping(shoal_region_t *r)
{
    for (uint32_t i = 0; i < r->daemon_workers; i++) {
        char id[16];
        snprintf(id, sizeof id, "%u", i);
        shoal_region_start_entity(r, id);
    }
    stop_excess(r);
}

typedef struct {
    life_t *life;
} read_ctx_t;

static void read_done(shoal_replicator_t *rep, int status, const char *key,
                      const shoal_crdt_t *value, void *arg)
{
    (void)rep;
    (void)key;
    read_ctx_t *x = arg;
    shoal_region_t *r = x->life->obj;
    life_release(x->life);
    free(x);
    if (!r || r->stopped)
        return;
    r->daemon_reading = false;
    if (status == 0 && value && shoal_crdt_type(value) == shoal_type_by_name("LWWRegister")) {
        size_t len = 0;
        const char *v = shoal_lwwreg_value(value, &len);
        char buf[16];
        if (len > 0 && len < sizeof buf) {
            memcpy(buf, v, len);
            buf[len] = 0;
            unsigned long n = strtoul(buf, NULL, 10);
            if (n <= SHOAL_DAEMON_MAX_WORKERS && n != r->daemon_workers) {
                shoal_info("%s: daemon %s: %u -> %lu workers", shoal_node_id(r->self), r->name,
                          r->daemon_workers, n);
                r->daemon_workers = (uint32_t)n;
            }
        }
    }
    ping(r);
}

/* The region's tick (shoal_region_t.daemon_tick): keeps the workers alive, every keep-alive. */
static void daemon_tick(shoal_region_t *r, int64_t now)
{
    if (now < r->daemon_next || r->daemon_reading || !r->registered)
        return;
    r->daemon_next = now + r->keep_alive_ms;
    char key[256];
    key_of(r, key, sizeof key);
    read_ctx_t *x = calloc(1, sizeof *x);
    if (!x)
        abort();
    if (!r->life)
        r->life = life_new(r);
    x->life = life_ref(r->life);
    r->daemon_reading = true;
    shoal_consistency_t local = {SHOAL_LOCAL, 0, 0, 0, 0, false};
    int rc = shoal_replicator_get(r->rep, key, shoal_type_by_name("LWWRegister"), &local,
                                  read_done, x);
    if (rc < 0)
        read_done(r->rep, rc, key, NULL, x);
}

typedef struct {
    shoal_region_t *r;
    uint32_t n;
    uint32_t keep_alive_ms;
} daemon_ctx_t;

static int setup_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    daemon_ctx_t *x = arg;
    x->r->daemon = true;
    x->r->daemon_tick = daemon_tick;
    x->r->daemon_workers = x->n;
    x->r->keep_alive_ms = x->keep_alive_ms ? x->keep_alive_ms : 10000;
    x->r->daemon_next = 0;
    return 0;
}

shoal_region_t *shoal_daemon_start(shoal_sharding_t *sh, const char *name, uint32_t n,
                                   const shoal_sharding_settings_t *s,
                                   const shoal_entity_fns_t *fns, void *arg,
                                   uint32_t keep_alive_ms, int *err)
{
    int e = 0;
    if (!err)
        err = &e;
    if (!sh || n > SHOAL_DAEMON_MAX_WORKERS) {
        *err = SHOAL_EINVAL;
        return NULL;
    }
    shoal_sharding_settings_t ds;
    if (s)
        ds = *s;
    else
        shoal_sharding_settings_default(&ds);
    ds.number_of_shards = SHOAL_DAEMON_MAX_WORKERS;
    ds.shard_id = worker_shard;
    ds.shard_id_arg = NULL;
    ds.passivation.policy = SHOAL_PASSIVATE_NONE;
    ds.passivation.idle_timeout_ms = 0;
    shoal_region_t *r = shoal_region_start(sh, name, &ds, fns, arg, err);
    if (!r)
        return NULL;
    daemon_ctx_t x = {r, n, keep_alive_ms};
    shoal_system_call(r->sys, setup_on_node, &x);
    return r;
}

static int put_count(shoal_crdt_t *value, void *arg)
{
    const char *v = arg;
    return shoal_lwwreg_set(value, shoal_node_intern(v + strlen(v) + 1), v, strlen(v), NULL, NULL);
}

int shoal_daemon_rescale(shoal_region_t *r, uint32_t n)
{
    if (!r || !r->daemon || n > SHOAL_DAEMON_MAX_WORKERS)
        return SHOAL_EINVAL;
    /* the value, then the writer's node id, in one buffer for the modify function */
    char buf[16 + SHOAL_NODE_ID_MAX + 2];
    int k = snprintf(buf, 16, "%u", n);
    snprintf(buf + k + 1, sizeof buf - (size_t)k - 1, "%s", shoal_node_id(r->self));
    char key[256];
    key_of(r, key, sizeof key);
    shoal_consistency_t c = {SHOAL_MAJORITY, 0, r->s.updating_state_timeout_ms, 0, 0, false};
    int rc = shoal_replicator_update_sync(r->rep, key, shoal_lwwreg_new(), &c, put_count, buf);
    if (rc == 0 || rc == SHOAL_ETIMEOUT) {
        /* applied here either way; the next keep-alive acts on it at once */
        daemon_ctx_t x = {r, n, r->keep_alive_ms};
        shoal_system_call(r->sys, setup_on_node, &x);
    }
    return rc;
}

typedef struct {
    shoal_region_t *r;
    uint32_t n;
} count_ctx_t;

static int count_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    count_ctx_t *x = arg;
    x->n = x->r->daemon_workers;
    return 0;
}

uint32_t shoal_daemon_workers(shoal_region_t *r)
{
    if (!r)
        return 0;
    count_ctx_t x = {r, 0};
    if (shoal_system_on_thread(r->sys))
        count_on_node(r->sys, &x);
    else
        shoal_system_call(r->sys, count_on_node, &x);
    return x.n;
}
