/*  shard.c — the shards hosted here and their entities: an entity's lifecycle (created, started,
    receiving, stopping at its own request or the region's, finished), delivery into a hosted
    shard (what waits while the shard loads or an entity starts or stops), automatic passivation,
    and a shard's own lifecycle (hosted, stopped for a handoff or at once, released).

    Below region.c, which routes messages here and stops shards when the coordinator says so;
    above the stores it tells of each step (remember.c, state.c). Those stores move entities on
    when their reads and writes complete through entity_lifecycle (the region's `lifecycle`
    hook); a stopping shard's messages go back to the region's routing through its `route`
    hook, to follow the shard to its next home. Everything here runs on the node thread.
*/
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sharding_internal.h"
#include "passivation.h"

/* ---------------------------------------------------------------------------------------------
 * Buffered messages
 */
bmsg_t *bmsg_new(const char *eid, uint8_t flags, const shoal_node_t *origin, uint64_t ask_id,
                 const void *data, size_t len)
{
    size_t el = strnlen(eid, SHOAL_ENTITY_ID_MAX); /* cut there, as the array it was */
    bmsg_t *m = malloc(sizeof *m + len + el + 1);
    if (!m)
        abort();
    m->next = NULL;
    m->origin = origin;
    m->ask_id = ask_id;
    m->flags = flags;
    m->len = len;
    if (len)
        memcpy(m->data, data, len);
    m->eid = (char *)m->data + len;
    memcpy(m->eid, eid, el);
    m->eid[el] = 0;
    return m;
}

void bq_push(bqueue_t *q, bmsg_t *m)
{
    m->next = NULL;
    if (q->tail)
        q->tail->next = m;
    else
        q->head = m;
    q->tail = m;
    q->n++;
}

bmsg_t *bq_pop(bqueue_t *q)
{
    bmsg_t *m = q->head;
    if (m) {
        q->head = m->next;
        if (!q->head)
            q->tail = NULL;
        q->n--;
        m->next = NULL;
    }
    return m;
}

/* An entity's waiting messages (see struct shoal_entity). */
static void entity_wait(shoal_entity_t *e, bmsg_t *m)
{
    m->next = NULL;
    if (e->waiting_tail)
        e->waiting_tail->next = m;
    else
        e->waiting = m;
    e->waiting_tail = m;
}

/* Takes all of them, as a queue of the caller's. */
static bqueue_t entity_take_waiting(shoal_entity_t *e)
{
    bqueue_t q = {e->waiting, e->waiting_tail, 0};
    for (const bmsg_t *m = q.head; m; m = m->next)
        q.n++;
    e->waiting = e->waiting_tail = NULL;
    return q;
}

/* ---------------------------------------------------------------------------------------------
 * Entities
 */
static void shard_maybe_done(shard_t *s);
static void passivate_cb(const char *entity_id, void *arg);

static shoal_entity_t *entity_create(shard_t *s, const char *eid, entity_status_t status)
{
    size_t n = strlen(eid);
    /* the id starts inside the struct's tail padding: a million idle entities are a million of
       these, and the bytes decide their malloc chunk size */
    size_t size = offsetof(shoal_entity_t, id) + n + 1;
    shoal_entity_t *e = calloc(1, size > sizeof *e ? size : sizeof *e);
    if (!e)
        abort();
    e->shard = s;
    memcpy(e->id, eid, n + 1);
    e->status = status;
    bool inserted;
    shoal_hmap_upsert(&s->entities, e->id, n + 1, &inserted)->value = e;
    s->r->sh->n_entities += inserted;
    state_entity_created(e);
    return e;
}

static void entity_run_start(shoal_entity_t *e)
{
    shoal_region_t *r = e->shard->r;
    e->status = E_RUNNING;
    e->started = true;
    r->stats.entities_started++;
    state_entity_starting(e);
    if (r->fns.start) {
        e->depth++;
        r->sh->depth++;
        e->state = r->fns.start(e, r->arg);
        r->sh->depth--;
        e->depth--;
    }
}

static shoal_entity_t *entity_start(shard_t *s, const char *eid)
{
    shoal_entity_t *e = entity_create(s, eid, E_RUNNING);
    entity_run_start(e);
    return e;
}

/* LIMITS (sharding.h): whether one more entity may start on this node; when not, the start is
   counted, logged (1st, 2nd, 4th...) and an ask answered SHOAL_ELIMIT. */
static bool entity_admitted(shard_t *s, const char *eid, const shoal_node_t *origin,
                            uint64_t ask_id)
{
    shoal_sharding_t *sh = s->r->sh;
    uint64_t max = atomic_load(&sh->max_entities);
    if (!max || sh->n_entities < max)
        return true;
    uint64_t k = ++sh->entities_refused;
    if ((k & (k - 1)) == 0)
        shoal_warning("sharding: %s: entity '%.100s' not started: this node runs %llu entities, "
                      "at most %llu (max-entities-per-node); %llu refused so far",
                      s->r->name, eid, (unsigned long long)sh->n_entities, (unsigned long long)max,
                      (unsigned long long)k);
    if (ask_id)
        region_reply_to(s->r, origin, ask_id, SHOAL_ELIMIT, NULL, 0);
    return false;
}

/* For reminders: the running entity, started when absent (NULL while it starts or stops). */
static shoal_entity_t *entity_get_or_start(shard_t *s, const char *eid)
{
    shoal_entity_t *e = shard_entity(s, eid);
    if (e)
        return e->status == E_RUNNING ? e : NULL;
    if (!entity_admitted(s, eid, NULL, 0))
        return NULL;
    if (remember_on(s->r) && !remember_known(s, eid)) {
        e = entity_create(s, eid, E_STARTING);
        remember_add(s, eid);
        return NULL;
    }
    return entity_start(s, eid);
}

/* The entity is gone: its stop callback, then what waited for it goes on (to a new incarnation
   while the shard is active, else wherever the shard is going). */
static void entity_finish_now(shoal_entity_t *e);

static void entity_finish(shoal_entity_t *e)
{
    if (state_entity_hold(e))
        return; /* its saves are in flight: it finishes when they are in */
    entity_finish_now(e);
}

static void entity_finish_now(shoal_entity_t *e)
{
    shard_t *s = e->shard;
    shoal_region_t *r = s->r;
    if (s->n_timers)
        timers_entity_gone(e); /* its in-memory timers die with it */
    shoal_hmap_remove(&s->entities, e->id, strlen(e->id) + 1);
    if (r->sh->n_entities)
        r->sh->n_entities--;
    if (s->pass)
        passivator_remove(s->pass, e->id);
    if (e->started) {
        r->stats.entities_stopped++;
        if (r->fns.stop) {
            r->sh->depth++;
            r->fns.stop(e, e->state, r->arg);
            r->sh->depth--;
        }
    }
    if (remember_on(r) && e->started) {
        if (e->passivating)
            remember_remove(s, e->id);
        else if (s->status == SH_ACTIVE)
            remember_schedule_restart(s, e->id); /* stopped on its own: it comes back */
    }
    bqueue_t waiting = entity_take_waiting(e);
    state_entity_free(e);
    free(e);
    bmsg_t *m;
    while ((m = bq_pop(&waiting))) {
        if (s->status == SH_ACTIVE) {
            deliver_local(r, s, m->eid, m->flags, m->origin, m->ask_id, m->data, m->len);
            free(m);
        } else {
            r->route(r, m, s->id);
        }
    }
    if (!s->batch)
        shard_maybe_done(s);
}

/* Runs after a callback of e returned: a stop asked for inside it takes effect now. */
static void entity_after_callback(shoal_entity_t *e)
{
    if (e->depth == 0 && e->stop_now)
        entity_finish(e);
}

static void entity_receive_msg(shoal_entity_t *e, const void *data, size_t len,
                               const shoal_node_t *origin, uint64_t ask_id)
{
    shoal_region_t *r = e->shard->r;
    shoal_sender_t saved = e->sender;
    e->sender.node = ask_id ? (origin ? origin : r->self) : NULL;
    e->sender.ask_id = ask_id;
    e->depth++;
    r->sh->depth++;
    r->fns.receive(e, e->state, data, len, r->arg);
    r->sh->depth--;
    e->depth--;
    e->sender = saved;
    entity_after_callback(e);
}

/* Asks the entity to stop: the stop message when the type has one, else at once. */
static void entity_begin_stop(shoal_entity_t *e, bool passivating)
{
    shoal_region_t *r = e->shard->r;
    if (e->status == E_STOPPING)
        return;
    e->status = E_STOPPING;
    e->shard->maybe_stopping = true;
    e->passivating = passivating;
    e->stopping_since = shoal_now_ms();
    if (r->s.stop_message) {
        entity_receive_msg(e, r->s.stop_message, r->s.stop_message_len, NULL, 0);
    } else {
        e->stop_now = true;
        entity_after_callback(e);
    }
}

void deliver_local(shoal_region_t *r, shard_t *s, const char *eid, uint8_t flags,
                   const shoal_node_t *origin, uint64_t ask_id, const void *data, size_t len)
{
    if (s->recovering || state_shard_waiting(s) || shoal_cluster_paused(r->sh->c)) {
        /* the remembered entities or the stored states are being read, or this node was stalled
           and does not know yet whether it is still a member (its shards may run elsewhere
           now): everything waits, in order */
        bq_push(&s->pending, bmsg_new(eid, flags, origin, ask_id, data, len));
        return;
    }
    shoal_entity_t *e = shard_entity(s, eid);
    if (e && (e->status == E_STOPPING || e->status == E_STARTING)) {
        /* passivating: the message goes to the next incarnation; handing off: to the next home;
           being remembered: to this one once the write is done */
        entity_wait(e, bmsg_new(eid, flags, origin, ask_id, data, len));
        return;
    }
    if (!e && !entity_admitted(s, eid, origin, ask_id))
        return;
    if (!e && remember_on(r) && !remember_known(s, eid)) {
        e = entity_create(s, eid, E_STARTING);
        entity_wait(e, bmsg_new(eid, flags, origin, ask_id, data, len));
        remember_add(s, eid);
        return;
    }
    if (!e)
        e = entity_start(s, eid);
    r->stats.delivered_local++;
    if (s->pass) /* only messages through sharding count as activity */
        passivator_access(s->pass, eid, shoal_now_ms(), passivate_cb, s);
    if (flags & ENV_START) {
        if (ask_id)
            region_reply_to(r, origin, ask_id, 0, NULL, 0);
        return;
    }
    if (flags & ENV_RELIABLE) {
        state_reliable_deliver(e, data, len, origin, ask_id);
        return;
    }
    entity_receive_msg(e, data, len, origin, ask_id);
}

static void entity_deliver_waiting(shoal_entity_t *e)
{
    shard_t *s = e->shard;
    bqueue_t waiting = entity_take_waiting(e);
    bmsg_t *m;
    while ((m = bq_pop(&waiting))) {
        /* the entity may stop while these run: deliver_local sends the rest where it goes */
        deliver_local(s->r, s, m->eid, m->flags, m->origin, m->ask_id, m->data, m->len);
        free(m);
    }
}

static void shard_deliver_pending(shard_t *s)
{
    bmsg_t *m;
    while (!s->recovering && !state_shard_waiting(s) && s->status == SH_ACTIVE &&
           (m = bq_pop(&s->pending))) {
        deliver_local(s->r, s, m->eid, m->flags, m->origin, m->ask_id, m->data, m->len);
        free(m);
    }
}

static void entities_refuse(shard_t *s, char *const *ids, size_t n, int status)
{
    s->batch = true; /* the shard is released only after the loop, if at all */
    for (size_t i = 0; i < n; i++) {
        shoal_entity_t *e = shard_entity(s, ids[i]);
        if (!e || e->status != E_STARTING)
            continue; /* started some other way meanwhile, or gone */
        bqueue_t waiting = entity_take_waiting(e);
        bmsg_t *m;
        while ((m = bq_pop(&waiting))) {
            if (m->ask_id)
                region_reply_to(s->r, m->origin, m->ask_id, status, NULL, 0);
            free(m);
        }
        entity_finish_now(e); /* never started: no stop callback, nothing to forget */
    }
    s->batch = false;
    shard_maybe_done(s);
}

/* What remember.c and state.c reach through the region's `lifecycle` (region_new sets it). */
const entity_lifecycle_t entity_lifecycle = {
    .create = entity_create,
    .run_start = entity_run_start,
    .deliver_waiting = entity_deliver_waiting,
    .deliver_pending = shard_deliver_pending,
    .get_or_start = entity_get_or_start,
    .receive = entity_receive_msg,
    .finish_now = entity_finish_now,
    .refuse = entities_refuse,
};

const char *shoal_entity_id(const shoal_entity_t *e)
{
    return e ? e->id : NULL;
}

const char *shoal_entity_shard(const shoal_entity_t *e)
{
    return e ? e->shard->id : NULL;
}

shoal_region_t *shoal_entity_region(const shoal_entity_t *e)
{
    return e ? e->shard->r : NULL;
}

shoal_sender_t shoal_entity_sender(const shoal_entity_t *e)
{
    shoal_sender_t none = {NULL, 0};
    return e ? e->sender : none;
}

int shoal_entity_reply(shoal_entity_t *e, const void *data, size_t len)
{
    if (entity_wrong_thread(e, __func__))
        return SHOAL_ETHREAD;
    /* a reliable message's reply goes with its confirmation, once its save is in */
    if (e && e->depth && (!len || data) && state_capture_reply(e, data, len))
        return 0;
    if (!e || !e->depth || !e->sender.ask_id)
        return SHOAL_EINVAL;
    shoal_sender_t to = e->sender;
    e->sender.ask_id = 0; /* one reply per ask */
    return shoal_region_reply(e->shard->r, &to, data, len);
}

int shoal_region_reply(shoal_region_t *r, const shoal_sender_t *to, const void *data, size_t len)
{
    if (!r || !to || !to->ask_id || (len && !data))
        return SHOAL_EINVAL;
    if (!shoal_system_on_thread(r->sys))
        return shoal_wrong_thread(__func__, "shoal_region_reply_sync");
    if (len + 64 > shoal_system_max_message_bytes(r->sys))
        return SHOAL_ETOOBIG;
    region_reply_to(r, to->node, to->ask_id, 0, data, len);
    return 0;
}

typedef struct {
    shoal_region_t *r;
    const shoal_sender_t *to;
    const void *data;
    size_t len;
} reply_twin_t;

static int reply_twin(shoal_system_t *sys, void *arg)
{
    (void)sys;
    reply_twin_t *t = arg;
    return shoal_region_reply(t->r, t->to, t->data, t->len);
}

int shoal_region_reply_sync(shoal_region_t *r, const shoal_sender_t *to, const void *data,
                            size_t len)
{
    if (!r || !to)
        return SHOAL_EINVAL;
    reply_twin_t t = {r, to, data, len};
    return shoal_system_call(r->sys, reply_twin, &t);
}

int shoal_entity_passivate(shoal_entity_t *e)
{
    if (!e)
        return SHOAL_EINVAL;
    if (entity_wrong_thread(e, __func__))
        return SHOAL_ETHREAD;
    entity_begin_stop(e, true);
    return 0;
}

int shoal_entity_stop(shoal_entity_t *e)
{
    if (!e)
        return SHOAL_EINVAL;
    if (entity_wrong_thread(e, __func__))
        return SHOAL_ETHREAD;
    e->stop_now = true;
    if (e->status != E_STOPPING) {
        e->status = E_STOPPING;
        e->shard->maybe_stopping = true;
        e->stopping_since = shoal_now_ms();
    }
    entity_after_callback(e);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Hosted shards
 */
/* ---------------------------------------------------------------------------------------------
 * Automatic passivation (the policies are passivation.c's)
 */
static bool auto_passivation(const shoal_region_t *r)
{
    /* Akka: automatic passivation is off when remember-entities is on */
    return !r->proxy && !remember_on(r) && !r->daemon &&
           r->s.passivation.policy != SHOAL_PASSIVATE_NONE;
}

/* The region's limit split evenly among its active shards, at least 1 each (0 = no limit). */
static size_t shard_limit(const shoal_region_t *r)
{
    size_t n = zhashx_size(r->shards);
    if (!r->active_entity_limit)
        return 0;
    size_t per = n ? (r->active_entity_limit + n - 1) / n : r->active_entity_limit;
    return per ? per : 1;
}

static void passivate_cb(const char *entity_id, void *arg)
{
    shard_t *s = arg;
    shoal_entity_t *e = shard_entity(s, entity_id);
    if (e && e->status == E_RUNNING && !e->depth) {
        s->r->stats.passivations++;
        entity_begin_stop(e, true);
    }
}

static void relimit(shoal_region_t *r)
{
    size_t limit = shard_limit(r);
    for (shard_t *s = zhashx_first(r->shards); s; s = zhashx_next(r->shards))
        if (s->pass)
            passivator_set_limit(s->pass, limit, passivate_cb, s);
}

typedef struct {
    shoal_region_t *r;
    uint32_t limit;
} limit_ctx_t;

static int limit_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    limit_ctx_t *x = arg;
    x->r->active_entity_limit = x->limit;
    relimit(x->r);
    return 0;
}

int shoal_region_set_active_entity_limit(shoal_region_t *r, uint32_t limit)
{
    if (!r)
        return SHOAL_EINVAL;
    limit_ctx_t x = {r, limit};
    return shoal_system_on_thread(r->sys) ? limit_on_node(r->sys, &x)
                                          : shoal_system_call(r->sys, limit_on_node, &x);
}

shard_t *shard_host(shoal_region_t *r, const char *id, uint64_t epoch)
{
    shard_t *s = zhashx_lookup(r->shards, id);
    if (s) {
        if (epoch > s->epoch)
            s->epoch = epoch;
        return s;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->r = r;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->epoch = epoch;
    s->status = SH_ACTIVE;
    zhashx_insert(r->shards, s->id, s);
    r->stats.shards_started++;
    remember_shard_started(s);
    state_shard_started(s);
    if (auto_passivation(r)) {
        s->pass = passivator_new(&r->s.passivation, shard_limit(r));
        relimit(r);
    }
    shoal_debug("%s: sharding %s: shard %s started here (epoch %llx)", shoal_node_id(r->self),
               r->name, id, (unsigned long long)epoch);
    return s;
}

void shard_free(shard_t *s)
{
    bmsg_t *m;
    while ((m = bq_pop(&s->pending))) {
        s->r->stats.dead_letters[SHOAL_DL_SHARD_FAILED]++;
        free(m);
    }
    state_shard_free(s);
    remember_shard_free(s);
    passivator_destroy(&s->pass);
    size_t left = shard_n_entities(s);
    s->r->sh->n_entities -= left < s->r->sh->n_entities ? left : s->r->sh->n_entities;
    shoal_hmap_free(&s->entities);
    free(s->fences);
    free(s->fenced);
    free(s);
}

/* The shard's last entity is gone: a handoff is acknowledged, the shard forgotten. */
static void shard_maybe_done(shard_t *s)
{
    if (s->status != SH_STOPPING || shard_n_entities(s) > 0)
        return;
    shoal_region_t *r = s->r;
    if (zhashx_lookup(r->shards, s->id) != s)
        return;
    if (s->by_coordinator && s->handoff_to) {
        r->stats.handoffs++;
        shoal_debug("%s: sharding %s: HandOff of shard %s: its entities stopped; ShardStopped to "
                    "the coordinator at %s",
                    shoal_node_id(r->self), r->name, s->id, shoal_node_id(s->handoff_to));
        region_send_one(r, s->handoff_to, SHOAL__SHARDING__CONTROL__KIND__SHARD_STOPPED, s->id,
                        r->self, s->epoch);
    }
    r->stats.shards_stopped++;
    bool passivating = s->pass != NULL;
    zhashx_delete(r->shards, s->id); /* the table's destructor frees s */
    if (passivating)
        relimit(r); /* the other shards get this one's share */
}

/* Stops every entity of the shard: the hand-over step and the stop message for a handoff or
   passivation-like stop (graceful), directly otherwise. */
void shard_begin_stop(shard_t *s, bool graceful)
{
    shoal_region_t *r = s->r;
    s->status = SH_STOPPING;
    /* what waited for recovery follows the shard to its next home */
    s->recovering = false;
    bmsg_t *pm;
    while ((pm = bq_pop(&s->pending)))
        r->route(r, pm, s->id);
    s->handoff_deadline = shoal_now_ms() + (r->s.handoff_timeout_ms > 6000
                                                ? r->s.handoff_timeout_ms - 5000
                                                : (r->s.handoff_timeout_ms > 1000
                                                       ? r->s.handoff_timeout_ms / 2
                                                       : 1000));
    size_t n = shard_n_entities(s);
    shoal_entity_t **all = n ? calloc(n, sizeof *all) : NULL;
    if (n && !all)
        abort();
    size_t i = 0;
    shoal_entity_t *e0;
    for (size_t pos = 0; i < n && (e0 = shard_entity_next(s, &pos));)
        all[i++] = e0;
    shoal_buf_t snap = {0};
    for (size_t k = 0; k < i; k++) {
        shoal_entity_t *e = all[k];
        if (graceful && r->fns.hand_over && e->status == E_RUNNING) {
            shoal_buf_reset(&snap);
            e->depth++;
            r->sh->depth++;
            r->fns.hand_over(e, e->state, &snap, r->arg);
            r->sh->depth--;
            e->depth--;
            /* the snapshot is saved as its state: the next home's read finds it */
            state_handover(e, snap.data, snap.len);
        }
    }
    shoal_buf_free(&snap);
    /* the pointers stay valid: an entity is freed only by entity_finish, which each runs once;
       the shard itself is released only after the loop (batch) */
    s->batch = true;
    for (size_t k = 0; k < i; k++) {
        shoal_entity_t *e = all[k];
        if (shard_entity(s, all[k]->id) != e)
            continue;
        if (graceful) {
            entity_begin_stop(e, false);
        } else {
            e->status = E_STOPPING;
            e->shard->maybe_stopping = true;
            e->stop_now = true;
            e->forced = true;
            if (e->depth == 0)
                entity_finish(e);
        }
    }
    free(all);
    s->batch = false;
    shard_maybe_done(s);
}

/* Stops a stale copy (a newer allocation elsewhere) or everything (downed): entities stop at
   once; what waited for them follows the shard. */
void shard_stop_now(shard_t *s)
{
    s->by_coordinator = false;
    shard_begin_stop(s, false);
}

/* Stops every hosted shard that is not stopping yet, gracefully (hand-over, stop message): a
   region shutting down with nowhere to hand them. A stop may free its shard at once, so the
   shards are looked up again by id. */
void shards_stop_here(shoal_region_t *r)
{
    zlistx_t *ids = zlistx_new();
    if (!ids)
        abort();
    zlistx_set_destructor(ids, (zlistx_destructor_fn *)zstr_free);
    for (shard_t *s = zhashx_first(r->shards); s; s = zhashx_next(r->shards)) {
        char *id = s->status != SH_STOPPING ? strdup(s->id) : NULL;
        if (s->status != SH_STOPPING && (!id || !zlistx_add_end(ids, id)))
            abort();
    }
    for (char *id = zlistx_first(ids); id; id = zlistx_next(ids)) {
        shard_t *s = zhashx_lookup(r->shards, id);
        if (s && s->status != SH_STOPPING)
            shard_begin_stop(s, true);
    }
    zlistx_destroy(&ids);
}

/* ---------------------------------------------------------------------------------------------
 * The tick of the hosted shards (from region.c's slow tick)
 */
void shards_tick(shoal_region_t *r, int64_t now)
{
    size_t n = zhashx_size(r->shards);
    if (!n)
        return;
    bool idle_sweep = now >= r->idle_next;
    bool paused = shoal_cluster_paused(r->sh->c);
    shard_t **all = calloc(n, sizeof *all);
    if (!all)
        abort();
    size_t i = 0;
    for (shard_t *s = zhashx_first(r->shards); s && i < n; s = zhashx_next(r->shards))
        all[i++] = s;
    for (size_t k = 0; k < i; k++) {
        shard_t *s = all[k];
        if (s->status == SH_FENCING && now >= s->handoff_deadline) {
            shoal_warning("%s: sharding %s: shard %s: %zu fences missing after handoff-timeout; "
                         "stopping anyway",
                         shoal_node_id(r->self), r->name, s->id, s->n_fences);
            shard_begin_stop(s, true);
        } else if (s->status == SH_STOPPING && now >= s->handoff_deadline) {
            /* stragglers that ignore the stop message are stopped by force */
            size_t ne = shard_n_entities(s);
            shoal_entity_t **es = calloc(ne + 1, sizeof *es);
            if (!es)
                abort();
            size_t j = 0;
            shoal_entity_t *e0;
            for (size_t pos = 0; j < ne && (e0 = shard_entity_next(s, &pos));)
                es[j++] = e0;
            s->batch = true;
            for (size_t q = 0; q < j; q++) {
                if (shard_entity(s, es[q]->id) != es[q] || es[q]->depth)
                    continue;
                r->stats.entities_forced++;
                es[q]->passivating = false;
                es[q]->forced = true;
                entity_finish(es[q]);
            }
            s->batch = false;
            free(es);
            shard_maybe_done(s);
        } else if (s->status == SH_ACTIVE) {
            remember_tick(s, now);
            if (s->pass && r->s.passivation.idle_timeout_ms && now >= r->idle_next)
                passivator_idle(s->pass, now, passivate_cb, s);
            /* passivating entities that ignore their stop message are stopped by force too */
            shoal_entity_t *late[16];
            size_t nl = 0;
            uint32_t stop_timeout = r->s.passivation.stop_timeout_ms
                                        ? r->s.passivation.stop_timeout_ms
                                        : r->s.handoff_timeout_ms;
            /* the walk only while some entity is stopping: a shard of 100,000 idle entities
               costs nothing here */
            bool any = false;
            shoal_entity_t *e;
            for (size_t pos = 0;
                 s->maybe_stopping && nl < 16 && (e = shard_entity_next(s, &pos));) {
                if (e->status != E_STOPPING)
                    continue;
                any = true;
                if (!e->depth && now - e->stopping_since > (int64_t)stop_timeout)
                    late[nl++] = e;
            }
            s->maybe_stopping = any || nl == 16;
            for (size_t q = 0; q < nl; q++) {
                r->stats.entities_forced++;
                late[q]->forced = true;
                entity_finish(late[q]);
            }
            if (paused)
                continue; /* no timer or reminder fires before the node knows it is a member */
            if (s->status == SH_ACTIVE)
                state_tick(s, now);
            if (s->status == SH_ACTIVE && s->n_timers)
                timers_tick(s, now);
            if (s->status == SH_ACTIVE && s->pending.n)
                shard_deliver_pending(s); /* held while the node was paused */
        }
    }
    free(all);
    if (idle_sweep) {
        const shoal_passivation_settings_t *p = &r->s.passivation;
        uint32_t every = p->idle_interval_ms ? p->idle_interval_ms : p->idle_timeout_ms / 2;
        r->idle_next = now + (every ? every : 1000);
    }
}
