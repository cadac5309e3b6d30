/*  remember.c — remembered entities: the ids of each shard's entities kept in durable ddata
    keys, so that after a rebalance, a crash or a restart of the whole cluster they run again.

    Keys (the role's replicator; their "shard-" prefix is durable by sharding's default):
      shard-<type>-<shard>-<k>   ORSet of entity ids, k = XXH32(id) mod REMEMBER_KEYS (as Akka
                                 splits a shard's ids over five keys, so each value stays small)
      shard-<type>-all-shards    GSet of the shards that ever had remembered entities; the
                                 coordinator allocates them eagerly when it takes over
    Writes use the coordinator's consistency (WriteMajority plus) and are batched per shard: while
    one write is in flight, later starts and stops collect and go out together when it completes.
    A new entity waits for the write that remembers it (its messages with it); the other
    entities of the shard keep receiving meanwhile (Akka stalls the whole shard). A failed write
    is retried after shard-failure-backoff with the waiting messages kept, but one refused by a
    configured limit of the replicator (SHOAL_ELIMIT: max-keys, max-bytes) would only be refused
    again: its new entities are refused at once instead, their asks answered SHOAL_ELIMIT, as
    max-entities-per-node does.
*/
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "sharding_internal.h"

bool remember_on(const shoal_region_t *r)
{
    return r->s.remember_entities && !r->proxy;
}

static void key_of(const shoal_region_t *r, const char *shard, int k, char *out, size_t cap)
{
    snprintf(out, cap, "shard-%s-%s-%d", r->name, shard, k);
}

static int slot_of(const char *eid)
{
    return (int)(XXH32(eid, strlen(eid), 0) % REMEMBER_KEYS);
}

static shoal_consistency_t write_level(const shoal_region_t *r)
{
    shoal_consistency_t c = {SHOAL_MAJORITY, 0, r->s.updating_state_timeout_ms,
                             r->s.majority_min_cap, 0, true};
    return c;
}

static shoal_consistency_t read_level(const shoal_region_t *r)
{
    shoal_consistency_t c = {SHOAL_MAJORITY, 0, r->s.waiting_for_state_timeout_ms,
                             r->s.majority_min_cap, 0, true};
    return c;
}

/* The id sets: keys stored with their NUL (so a key is the C string itself), value (void *)1. */
static bool set_has(const shoal_hmap_t *h, const char *id)
{
    return h->n && shoal_hmap_get(h, id, strlen(id) + 1) != NULL;
}

static void set_add(shoal_hmap_t *h, const char *id)
{
    bool inserted;
    shoal_hmap_upsert(h, id, strlen(id) + 1, &inserted)->value = (void *)1;
}

static void set_del(shoal_hmap_t *h, const char *id)
{
    if (h->n)
        shoal_hmap_remove(h, id, strlen(id) + 1);
}

bool remember_known(const shard_t *s, const char *eid)
{
    return s->remember_maps && set_has(&s->remembered, eid);
}

/* ---------------------------------------------------------------------------------------------
 * Recovery: read the shard's ids, then start them at a bounded rate
 */
typedef struct {
    life_t *life;
} read_ctx_t;

static void start_read(shard_t *s);

static int collect(const void *elem, size_t len, void *arg)
{
    shard_t *s = arg;
    if (len == 0 || len > SHOAL_ENTITY_ID_MAX)
        return 0;
    char id[SHOAL_ENTITY_ID_MAX + 1];
    memcpy(id, elem, len);
    id[len] = 0;
    if (strlen(id) != len)
        return 0; /* an id with a NUL inside is not one of ours */
    if (!set_has(&s->remembered, id)) {
        set_add(&s->remembered, id);
        zlistx_add_end(s->to_start, id);
    }
    return 0;
}

static void read_done(shoal_replicator_t *rep, int status, const char *key,
                      const shoal_crdt_t *value, void *arg)
{
    (void)rep;
    (void)key;
    read_ctx_t *x = arg;
    shard_t *s = x->life->obj;
    life_release(x->life);
    free(x);
    if (!s)
        return;
    s->writes_in_flight--; /* reads count here too: one thing in flight at a time per shard */
    if (status == 0 && value && shoal_crdt_type(value) == shoal_type_by_name("ORSet"))
        shoal_orset_foreach(value, collect, s);
    else if (status != 0 && status != SHOAL_ENOTFOUND)
        s->retry_at = -1; /* marks a failed read; the last reply decides */
    if (s->writes_in_flight > 0)
        return;
    if (s->retry_at == -1) {
        s->r->stats.remember_failures++;
        shoal_warning("%s: sharding %s: shard %s: reading its remembered entities failed; "
                     "retrying after shard-failure-backoff",
                     shoal_node_id(s->r->self), s->r->name, s->id);
        s->retry_at = shoal_now_ms() + s->r->s.shard_failure_backoff_ms;
        return;
    }
    s->retry_at = 0;
    s->recovering = false;
    if (zlistx_size(s->to_start))
        s->noted_here = true; /* it had remembered entities: it is in the all-shards set */
    shoal_debug("%s: sharding %s: shard %s recovered %zu remembered entities",
               shoal_node_id(s->r->self), s->r->name, s->id, zlistx_size(s->to_start));
    s->r->lifecycle->deliver_pending(s);
}

static void start_read(shard_t *s)
{
    shoal_region_t *r = s->r;
    shoal_consistency_t c = read_level(r);
    s->retry_at = 0;
    for (int k = 0; k < REMEMBER_KEYS; k++) {
        char key[SHOAL_SHARD_ID_MAX + 300];
        key_of(r, s->id, k, key, sizeof key);
        read_ctx_t *x = calloc(1, sizeof *x);
        if (!x)
            abort();
        x->life = life_ref(s->life);
        s->writes_in_flight++;
        int rc = shoal_replicator_get(r->rep, key, shoal_type_by_name("ORSet"), &c, read_done, x);
        if (rc < 0)
            read_done(r->rep, rc, key, NULL, x);
    }
}

void remember_shard_started(shard_t *s)
{
    if (!remember_on(s->r))
        return;
    s->life = life_new(s);
    s->remember_maps = true;
    s->to_start = zlistx_new();
    zlistx_set_duplicator(s->to_start, (zlistx_duplicator_fn *)strdup);
    zlistx_set_destructor(s->to_start, (zlistx_destructor_fn *)zstr_free);
    s->restart_at = zhashx_new();
    zhashx_set_destructor(s->restart_at, (zhashx_destructor_fn *)zstr_free);
    s->recovering = true;
    start_read(s);
}

void remember_shard_free(shard_t *s)
{
    life_end(&s->life);
    for (size_t i = 0; i < s->n_awaiting; i++)
        free(s->awaiting[i]);
    free(s->awaiting);
    s->awaiting = NULL;
    s->n_awaiting = s->cap_awaiting = 0;
    shoal_hmap_free(&s->remembered);
    zlistx_destroy(&s->to_start);
    shoal_hmap_free(&s->adds);
    shoal_hmap_free(&s->removes);
    s->remember_maps = false;
    zhashx_destroy(&s->restart_at);
}

/* ---------------------------------------------------------------------------------------------
 * Writes
 */
typedef struct {
    life_t *life;
    int slot;
    char **adds, **removes;
    size_t n_adds, n_removes;
    const shoal_node_t *self;
} write_ctx_t;

static int write_modify(shoal_crdt_t *value, void *arg)
{
    write_ctx_t *w = arg;
    for (size_t i = 0; i < w->n_adds; i++) {
        int rc = shoal_orset_add(value, w->self, w->adds[i], strlen(w->adds[i]));
        if (rc < 0)
            return rc;
    }
    for (size_t i = 0; i < w->n_removes; i++) {
        int rc = shoal_orset_remove(value, w->self, w->removes[i], strlen(w->removes[i]));
        if (rc < 0 && rc != SHOAL_ENOTFOUND)
            return rc;
    }
    return 0;
}

static void write_ctx_free(write_ctx_t *w)
{
    for (size_t i = 0; i < w->n_adds; i++)
        free(w->adds[i]);
    for (size_t i = 0; i < w->n_removes; i++)
        free(w->removes[i]);
    free(w->adds);
    free(w->removes);
    life_release(w->life);
    free(w);
}

static void flush_writes(shard_t *s);
static void note_shard(shard_t *s);

/* Every write of a batch is in, the shard's entry in the all-shards set included (so a full stop
   right now still brings the shard back): the entities they remember start. */
static void activate(shard_t *s)
{
    if (!s->noted_here)
        return; /* the all-shards write failed: retried with the next flush */
    /* the entities waiting to be remembered, not every entity of the shard: with a batch of
       writes completing for each few hundred new ids, walking all of a shard's thousands of
       entities each time was most of the cost of remembering them */
    if (!s->n_awaiting)
        return;
    shoal_entity_t **ready = malloc(s->n_awaiting * sizeof *ready);
    if (!ready)
        abort();
    size_t keep = 0, n_ready = 0;
    for (size_t i = 0; i < s->n_awaiting; i++) {
        char *id = s->awaiting[i];
        shoal_entity_t *e = shard_entity(s, id);
        if (e && e->status == E_STARTING && !remember_known(s, id)) {
            s->awaiting[keep++] = id; /* its write is still to come */
            continue;
        }
        if (e && e->status == E_STARTING)
            ready[n_ready++] = e;
        free(id); /* started now, or gone, or started some other way */
    }
    s->n_awaiting = keep;
    for (size_t i = 0; i < n_ready; i++) {
        shoal_entity_t *e = ready[i];
        if (e->status != E_STARTING)
            continue; /* listed twice (its id was remembered for an earlier incarnation too) */
        s->r->lifecycle->run_start(e);
        s->r->lifecycle->deliver_waiting(e);
    }
    free(ready);
}

static void write_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    (void)rep;
    (void)key;
    write_ctx_t *w = arg;
    shard_t *s = w->life->obj;
    if (!s) {
        write_ctx_free(w);
        return;
    }
    s->writes_in_flight--;
    bool refuse = status == SHOAL_ELIMIT && w->n_adds > 0;
    if (status == 0) {
        s->write_attempts = 0;
        for (size_t i = 0; i < w->n_adds; i++)
            set_add(&s->remembered, w->adds[i]);
    } else {
        /* keep what waits; write it again at once a few times (Akka's max-updates-attempts),
           then after the backoff; new entities refused by a cap go (below) */
        for (size_t i = 0; i < w->n_adds && !refuse; i++)
            set_add(&s->adds, w->adds[i]);
        for (size_t i = 0; i < w->n_removes; i++)
            set_add(&s->removes, w->removes[i]);
        if (++s->write_attempts >= 3) {
            s->write_attempts = 0;
            s->retry_at = shoal_now_ms() + s->r->s.shard_failure_backoff_ms;
        }
        s->r->stats.remember_failures++;
        if (refuse)
            shoal_warning("%s: sharding %s: shard %s: remembering %zu new entities refused (%s): "
                          "they are not started, their asks answered with it",
                          shoal_node_id(s->r->self), s->r->name, s->id, w->n_adds,
                          shoal_strerror(status));
        else
            shoal_warning("%s: sharding %s: shard %s: remembering %zu entities failed (%s); "
                         "retrying after shard-failure-backoff with their messages kept",
                         shoal_node_id(s->r->self), s->r->name, s->id, w->n_adds,
                         shoal_strerror(status));
    }
    if (s->writes_in_flight == 0)
        activate(s);
    if (s->writes_in_flight == 0 && shoal_now_ms() >= s->retry_at)
        flush_writes(s);
    if (refuse) /* last: the shard may be released */
        s->r->lifecycle->refuse(s, w->adds, w->n_adds, status);
    write_ctx_free(w);
}

/* Moves the ids of a set into the writes of their key slots and empties the set: the keys
   themselves change hands (each is a C string, its NUL stored), not copies of them. */
static void take_ids(shoal_hmap_t *h, write_ctx_t **w, bool removes)
{
    for (size_t i = 0; i < h->cap; i++) {
        shoal_hslot_t *sl = &h->slots[i];
        if (!SHOAL_HSLOT_LIVE(sl))
            continue;
        char *id = (char *)sl->key;
        sl->key = NULL; /* now the write's; the map is freed below without it */
        write_ctx_t *x = w[slot_of(id)];
        if (removes)
            x->removes[x->n_removes++] = id;
        else
            x->adds[x->n_adds++] = id;
    }
    shoal_hmap_free(h);
}

/* One update per key slot with everything collected for it. */
static void flush_writes(shard_t *s)
{
    if (s->writes_in_flight > 0 || s->recovering || (s->adds.n == 0 && s->removes.n == 0))
        return;
    shoal_region_t *r = s->r;
    write_ctx_t *w[REMEMBER_KEYS] = {0};
    for (int k = 0; k < REMEMBER_KEYS; k++) {
        w[k] = calloc(1, sizeof *w[k]);
        if (!w[k])
            abort();
        w[k]->slot = k;
        w[k]->self = r->self;
        w[k]->adds = calloc(s->adds.n + 1, sizeof(char *));
        w[k]->removes = calloc(s->removes.n + 1, sizeof(char *));
        if (!w[k]->adds || !w[k]->removes)
            abort();
    }
    bool had_adds = s->adds.n > 0;
    take_ids(&s->adds, w, false);
    take_ids(&s->removes, w, true);
    shoal_consistency_t c = write_level(r);
    if (had_adds && !s->noted_here)
        note_shard(s);
    for (int k = 0; k < REMEMBER_KEYS; k++) {
        if (!w[k]->n_adds && !w[k]->n_removes) {
            free(w[k]->adds);
            free(w[k]->removes);
            free(w[k]);
            continue;
        }
        w[k]->life = life_ref(s->life);
        char key[SHOAL_SHARD_ID_MAX + 300];
        key_of(r, s->id, k, key, sizeof key);
        s->writes_in_flight++;
        r->stats.remember_writes++;
        int rc = shoal_replicator_update(r->rep, key, shoal_orset_new(), &c, write_modify, w[k],
                                         write_done, w[k]);
        if (rc < 0)
            write_done(r->rep, rc, key, w[k]);
    }
}

void remember_add(shard_t *s, const char *eid)
{
    shoal_entity_t *e = shard_entity(s, eid);
    if (e && e->status == E_STARTING) {
        if (s->n_awaiting == s->cap_awaiting) {
            s->cap_awaiting = s->cap_awaiting ? 2 * s->cap_awaiting : 16;
            s->awaiting = realloc(s->awaiting, s->cap_awaiting * sizeof *s->awaiting);
            if (!s->awaiting)
                abort();
        }
        s->awaiting[s->n_awaiting] = strdup(eid);
        if (!s->awaiting[s->n_awaiting])
            abort();
        s->n_awaiting++;
    }
    set_del(&s->removes, eid);
    set_add(&s->adds, eid);
    if (shoal_now_ms() >= s->retry_at)
        flush_writes(s);
}

void remember_remove(shard_t *s, const char *eid)
{
    set_del(&s->remembered, eid);
    set_del(&s->adds, eid);
    set_add(&s->removes, eid);
    if (shoal_now_ms() >= s->retry_at)
        flush_writes(s);
}

void remember_schedule_restart(shard_t *s, const char *eid)
{
    char *when = malloc(32);
    if (!when)
        abort();
    snprintf(when, 32, "%lld", (long long)(shoal_now_ms() + s->r->s.entity_restart_backoff_ms));
    zhashx_update(s->restart_at, eid, when);
}

void remember_tick(shard_t *s, int64_t now)
{
    if (!s->remember_maps) /* remember-entities off (s->life may be entity state's) */
        return;
    if (s->recovering) {
        if (s->writes_in_flight == 0 && s->retry_at > 0 && now >= s->retry_at)
            start_read(s);
        return;
    }
    if (s->status != SH_ACTIVE)
        return;
    /* recovered ids start at a bounded rate: "all" for up to 40 ms of each 100 ms tick, so a
       100,000-entity shard comes back in about a second without stalling the node;
       "constant" as configured */
    size_t batch = SIZE_MAX;
    int64_t until = shoal_now_ms() + 40;
    if (s->r->s.recovery_constant_rate) {
        if (now < s->recover_next)
            batch = 0;
        else {
            batch = s->r->s.recovery_number_of_entities;
            s->recover_next = now + s->r->s.recovery_frequency_ms;
        }
    }
    for (size_t done = 0; batch > 0 && zlistx_size(s->to_start) > 0; done++) {
        if ((done & 255) == 255 && shoal_now_ms() >= until)
            break;
        char *id = zlistx_first(s->to_start);
        if (!shard_entity(s, id) && remember_known(s, id)) {
            shoal_entity_t *e = s->r->lifecycle->create(s, id, E_RUNNING);
            s->r->lifecycle->run_start(e);
            s->r->stats.entities_recovered++;
            batch--;
        }
        zlistx_delete(s->to_start, zlistx_cursor(s->to_start));
    }
    if (zhashx_size(s->restart_at)) {
        zlistx_t *due = zlistx_new();
        for (char *when = zhashx_first(s->restart_at); when; when = zhashx_next(s->restart_at))
            if (atoll(when) <= now)
                zlistx_add_end(due, (void *)zhashx_cursor(s->restart_at));
        for (const char *id = zlistx_first(due); id; id = zlistx_next(due)) {
            char copy[SHOAL_ENTITY_ID_MAX + 1];
            snprintf(copy, sizeof copy, "%s", id);
            zhashx_delete(s->restart_at, copy);
            if (!shard_entity(s, copy) && remember_known(s, copy))
                s->r->lifecycle->run_start(s->r->lifecycle->create(s, copy, E_RUNNING));
        }
        zlistx_destroy(&due);
    }
    if (s->writes_in_flight == 0 && s->retry_at && now >= s->retry_at) {
        s->retry_at = 0;
        if (!s->noted_here && !s->adds.n) {
            /* only the all-shards write failed: its entities still wait for it */
            note_shard(s);
        }
        flush_writes(s);
    }
}

/* ---------------------------------------------------------------------------------------------
 * The shards that have remembered entities
 */
static int all_shards_add(shoal_crdt_t *value, void *arg)
{
    return shoal_gset_add(value, arg, strlen(arg));
}

typedef struct {
    life_t *life;
    char shard[SHOAL_SHARD_ID_MAX + 1];
} note_ctx_t;

static void note_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    (void)rep;
    (void)key;
    note_ctx_t *x = arg;
    shard_t *s = x->life->obj;
    life_release(x->life);
    free(x);
    if (!s)
        return;
    s->writes_in_flight--;
    if (status == 0) {
        s->noted_here = true;
    } else {
        s->r->stats.remember_failures++;
        s->retry_at = shoal_now_ms() + s->r->s.shard_failure_backoff_ms;
    }
    if (s->writes_in_flight == 0)
        activate(s);
}

/* Records the shard in shard-<type>-all-shards, as one more write of the batch in flight. */
static void note_shard(shard_t *s)
{
    shoal_region_t *r = s->r;
    char key[256];
    snprintf(key, sizeof key, "shard-%s-all-shards", r->name);
    note_ctx_t *x = calloc(1, sizeof *x);
    if (!x)
        abort();
    x->life = life_ref(s->life);
    snprintf(x->shard, sizeof x->shard, "%s", s->id);
    shoal_consistency_t c = write_level(r);
    s->writes_in_flight++;
    int rc = shoal_replicator_update(r->rep, key, shoal_gset_new(), &c, all_shards_add, x->shard,
                                     note_done, x);
    if (rc < 0)
        note_done(r->rep, rc, key, x);
}

typedef struct {
    life_t *life;
    void (*fn)(const char *shard, void *arg);
    void *arg;
    shoal_region_t *r;
    uint32_t attempts;
} all_ctx_t;

static void all_read(all_ctx_t *x);

static int each_shard(const void *elem, size_t len, void *arg)
{
    all_ctx_t *x = arg;
    if (!x->life->obj || len == 0 || len > SHOAL_SHARD_ID_MAX)
        return 0;
    char id[SHOAL_SHARD_ID_MAX + 1];
    memcpy(id, elem, len);
    id[len] = 0;
    if (strlen(id) == len)
        x->fn(id, x->arg);
    return 0;
}

static void all_retry_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    all_ctx_t *x = arg;
    if (!x->life->obj) {
        life_release(x->life);
        free(x);
        return;
    }
    all_read(x);
}

static void all_done(shoal_replicator_t *rep, int status, const char *key,
                     const shoal_crdt_t *value, void *arg)
{
    (void)rep;
    all_ctx_t *x = arg;
    if (status == 0 && value && x->life->obj && shoal_crdt_type(value) == shoal_type_by_name("GSet"))
        shoal_gset_foreach(value, each_shard, x);
    /* A read that reached no majority (refused while this node is not yet Up, or timed out while
       the others still load their stores after a full restart) is not "no shards": without
       asking again, remembered entities would wait for their first message. Asked again with a
       backoff (0.2 s doubling to 3.2 s) for as long as the coordinator lives; not found is an
       answer. */
    if (status != 0 && status != SHOAL_ENOTFOUND && x->life->obj) {
        if (x->attempts++ % 10 == 0)
            shoal_warning("%s: sharding %s: reading %s failed (%s); retrying",
                         shoal_node_id(x->r->self), x->r->name, key, shoal_strerror(status));
        uint32_t pause = 200u << (x->attempts < 4 ? x->attempts : 4);
        if (shoal_system_timer(x->r->sys, pause, false, all_retry_tick, x) > 0)
            return;
    }
    life_release(x->life);
    free(x);
}

void remember_all_shards(shoal_region_t *r, void (*fn)(const char *shard, void *arg), void *arg,
                         life_t *life)
{
    all_ctx_t *x = calloc(1, sizeof *x);
    if (!x)
        abort();
    x->life = life_ref(life);
    x->fn = fn;
    x->arg = arg;
    x->r = r;
    all_read(x);
}

static void all_read(all_ctx_t *x)
{
    char key[256];
    snprintf(key, sizeof key, "shard-%s-all-shards", x->r->name);
    shoal_consistency_t c = read_level(x->r);
    int rc = shoal_replicator_get(x->r->rep, key, shoal_type_by_name("GSet"), &c, all_done, x);
    if (rc < 0)
        all_done(x->r->rep, rc, key, NULL, x);
}
