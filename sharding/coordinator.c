/*  coordinator.c — the shard coordinator of one entity type: a cluster singleton that decides
    which region hosts which shard, keeps that in the role's replicator, and moves shards.

    State (sharding.h, THE COORDINATOR'S STATE): the LWWMap "coord-<type>" with "s/<shard>" ->
    hosting node id at timestamp = allocation epoch, "r/<node>" -> "region" / "proxy" / "" (gone),
    and "p/<shard>" -> the address (host:port) an operator pinned the shard to ("" = unpinned),
    at an epoch too, so the newest pin or unpin wins and a new coordinator reads the pins with the
    allocations (PINNED SHARDS in sharding.h).
    Nothing is handed out before the write that records it succeeded (WriteMajority plus), so a
    successor that reads with ReadMajority plus sees it; what a successor's read still misses it
    learns from the regions, which report the shards they host when they register, and it
    allocates no new shard until the live regions have registered.
*/
#include <stdarg.h>
#include <string.h>

#include "sharding_internal.h"
#include "allocation.h"

typedef struct {
    const shoal_node_t *node; /* NULL: not allocated */
    uint64_t epoch;
    bool writing;     /* the write that records it has not succeeded yet */
    bool started;     /* the region said ShardStarted */
    int64_t host_sent_at;
} alloc_t;

typedef struct {
    const shoal_node_t *node;
    bool proxy;
    bool registered;
    bool shutting_down;
    bool in_state;     /* recorded under "r/<node>" */
    int64_t gone_since; /* Down/Removed seen (0: alive) */
    size_t n_shards;
} creg_t;

/* An operator's pin of a shard to a member (shoal-cluster move): its address, so the pin
   outlives a restart of the member, and the epoch it was written at. */
typedef struct {
    char address[SHOAL_NODE_ID_MAX + 1]; /* "" = unpinned */
    uint64_t ts;
} pin_t;

typedef enum { RB_BEGIN = 1, RB_HANDOFF } rb_phase_t;

typedef struct {
    char shard[SHOAL_SHARD_ID_MAX + 1];
    const shoal_node_t *from;
    uint64_t epoch;
    rb_phase_t phase;
    const shoal_node_t **waiting; /* BeginHandOff not acknowledged yet */
    size_t n_waiting;
    const shoal_node_t **acked;
    size_t n_acked;
    int64_t deadline;
    bool deallocate; /* StopShards: no new home afterwards */
} rb_t;

/* Requesters waiting for a shard's home. */
typedef struct {
    const shoal_node_t **nodes;
    size_t n;
} waiters_t;

struct coordinator {
    shoal_region_t *r;
    life_t *life;
    uint64_t term;
    uint32_t counter;
    char key[256];
    char ext_key[256];
    zhashx_t *allocs;      /* shard -> alloc_t */
    zhashx_t *regions;     /* node id -> creg_t */
    zhashx_t *rebalancing; /* shard -> rb_t */
    zhashx_t *waiting;     /* shard -> waiters_t */
    zhashx_t *external;    /* shard -> "host:port" (external allocation) */
    zhashx_t *pins;        /* shard -> pin_t (operator pins, "p/<shard>") */
    int ext_sub;
    bool ready, reading, recovered;
    int64_t read_failed_logged; /* rate limit of the read-failed line */
    int64_t recover_until;
    int64_t next_rebalance;
    bool rebalance_soon;
    size_t unstarted;
    void *batch;      /* write_t: allocations of this loop turn */
    bool flush_posted;
    bool warned_term;
    int64_t nack_logged_at;
    shoal_region_stats_t stats;
};

static uint64_t next_epoch(coordinator_t *co)
{
    return co->term << 32 | ++co->counter;
}

/* The epochs handed out from now on are past `epoch`. */
static void pass_epoch(coordinator_t *co, uint64_t epoch)
{
    if (epoch >> 32 > co->term) {
        co->term = epoch >> 32;
        co->counter = (uint32_t)epoch;
    } else if (epoch >> 32 == co->term && (uint32_t)epoch > co->counter) {
        co->counter = (uint32_t)epoch;
    }
}

/* An epoch seen in the state or reported by a region: a coordinator that runs again in the same
   term (its node froze and came back as the oldest) must not hand out epochs it used before. */
static void note_epoch(coordinator_t *co, uint64_t epoch)
{
    if (epoch >> 32 > co->term && !co->warned_term) {
        co->warned_term = true;
        shoal_warning("%s: sharding %s: epoch %llx is from a term newer than this coordinator's "
                     "(%llu): another coordinator was running, or this one passed a fence from "
                     "before a full restart",
                     shoal_node_id(co->r->self), co->r->name, (unsigned long long)epoch,
                     (unsigned long long)co->term);
    }
    /* stay ahead anyway: the newest allocation must keep winning */
    pass_epoch(co, epoch);
}

static void send_one(coordinator_t *co, const shoal_node_t *to,
                     Shoal__Sharding__Control__Kind kind, const char *shard,
                     const shoal_node_t *region, uint64_t epoch,
                     const shoal_node_t *const *fences, size_t n_fences)
{
    region_send_home(co->r, to, kind, shard, region, epoch, co->term, fences, n_fences);
}

/* Sends homes (shard -> region) to `to`, chunked under the frame limit. kind REGISTER_ACK marks
   the last chunk. */
static void send_homes(coordinator_t *co, const shoal_node_t *to,
                       Shoal__Sharding__Control__Kind kind, const char *const *shards,
                       size_t n)
{
    size_t budget = shoal_system_max_message_bytes(co->r->sys) / 2;
    Shoal__Sharding__ShardHome *hs = calloc(n + 1, sizeof *hs);
    Shoal__Sharding__ShardHome **hp = calloc(n + 1, sizeof *hp);
    if (!hs || !hp)
        abort();
    size_t first = 0, bytes = 0, k = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            alloc_t *a = zhashx_lookup(co->allocs, shards[i]);
            shoal__sharding__shard_home__init(&hs[k]);
            hs[k].shard = (char *)shards[i];
            hs[k].region = (char *)(a && a->node && !a->writing ? shoal_node_id(a->node) : "");
            hs[k].epoch = a ? a->epoch : 0;
            if (!hs[k].epoch)
                continue;
            hp[k] = &hs[k];
            bytes += strlen(shards[i]) + strlen(hs[k].region) + 20;
            k++;
        }
        if ((i == n || bytes >= budget) && (k > first || (i == n && kind ==
                                            SHOAL__SHARDING__CONTROL__KIND__REGISTER_ACK))) {
            Shoal__Sharding__Control m = SHOAL__SHARDING__CONTROL__INIT;
            m.kind = kind;
            m.type_name = co->r->name;
            m.term = co->term;
            m.homes = hp + first;
            m.n_homes = k - first;
            m.last = i == n;
            region_send_control(co->r, to, &m);
            first = k;
            bytes = 0;
        }
    }
    free(hs);
    free(hp);
}

static void free_item(void **item)
{
    free(*item);
    *item = NULL;
}

static creg_t *creg_get(coordinator_t *co, const shoal_node_t *node)
{
    creg_t *c = zhashx_lookup(co->regions, shoal_node_id(node));
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            abort();
        c->node = node;
        zhashx_insert(co->regions, shoal_node_id(node), c);
    }
    return c;
}

static void set_alloc(coordinator_t *co, alloc_t *a, const shoal_node_t *node, uint64_t epoch)
{
    if (a->node) {
        creg_t *old = zhashx_lookup(co->regions, shoal_node_id(a->node));
        if (old && old->n_shards)
            old->n_shards--;
    }
    a->node = node;
    a->epoch = epoch;
    if (node)
        creg_get(co, node)->n_shards++;
}

static alloc_t *alloc_get(coordinator_t *co, const char *shard)
{
    alloc_t *a = zhashx_lookup(co->allocs, shard);
    if (!a) {
        a = calloc(1, sizeof *a);
        if (!a)
            abort();
        zhashx_insert(co->allocs, shard, a);
    }
    return a;
}

/* ---------------------------------------------------------------------------------------------
 * The state in the replicator
 */
typedef struct {
    char key[SHOAL_SHARD_ID_MAX + SHOAL_NODE_ID_MAX + 4];
    char value[SHOAL_NODE_ID_MAX + 1];
    int64_t ts;
} entry_t;

typedef struct {
    life_t *life;
    entry_t *entries;
    size_t n, cap;
    int attempts;
    /* an operator's action (ADMIN_REQ) answered once this write is on a majority */
    uint32_t admin_op;
    const shoal_node_t *reply_to;
    uint64_t req_id;
} write_t;

static int64_t fixed_clock(int64_t current, const void *v, size_t len, void *arg)
{
    (void)current;
    (void)v;
    (void)len;
    return *(const int64_t *)arg;
}

static int write_modify(shoal_crdt_t *value, void *arg)
{
    write_t *w = arg;
    const shoal_node_t *self = w->life->obj ? ((coordinator_t *)w->life->obj)->r->self : NULL;
    if (!self)
        return SHOAL_EINVAL;
    for (size_t i = 0; i < w->n; i++) {
        int rc = shoal_lwwmap_put(value, self, w->entries[i].key, strlen(w->entries[i].key),
                                  w->entries[i].value, strlen(w->entries[i].value), fixed_clock,
                                  &w->entries[i].ts);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void write_done(shoal_replicator_t *rep, int status, const char *key, void *arg);

static shoal_consistency_t write_consistency(const coordinator_t *co)
{
    const shoal_sharding_settings_t *s = &co->r->s;
    shoal_consistency_t c = {SHOAL_MAJORITY, 0, s->updating_state_timeout_ms, s->majority_min_cap,
                             s->write_majority_plus, true};
    if (s->write_majority_plus == UINT32_MAX)
        c.level = SHOAL_ALL;
    return c;
}

static void write_issue(coordinator_t *co, write_t *w)
{
    shoal_consistency_t c = write_consistency(co);
    co->stats.state_writes++;
    int rc = shoal_replicator_update(co->r->rep, co->key, shoal_lwwmap_new(), &c, write_modify, w,
                                     write_done, w);
    if (rc < 0)
        write_done(co->r->rep, rc, co->key, w);
}

static void after_write(coordinator_t *co, const write_t *w);

/* A write refused at once (no quorum: this node is not a full member, or too few of the kept
   membership are up) is tried again after a pause, not in the same turn: the refusal comes
   before the update call returns, and an immediate retry would recurse without end. */
static void write_retry_tick(shoal_system_t *sys, void *arg)
{
    (void)sys;
    write_t *w = arg;
    coordinator_t *co = w->life->obj;
    if (!co) {
        life_release(w->life);
        free(w->entries);
        free(w);
        return;
    }
    write_issue(co, w);
}

static void write_done(shoal_replicator_t *rep, int status, const char *key, void *arg)
{
    (void)rep;
    (void)key;
    write_t *w = arg;
    coordinator_t *co = w->life->obj;
    if (co && status != 0) {
        /* Akka retries coordinator writes until they succeed: the allocation must be on a
           majority before anyone acts on it */
        co->stats.state_write_retries++;
        if (w->attempts++ % 10 == 0)
            shoal_warning("%s: sharding %s: coordinator state write failed (%s); retrying",
                         shoal_node_id(co->r->self), co->r->name, shoal_strerror(status));
        if (status == SHOAL_ETIMEOUT) {
            write_issue(co, w); /* it waited its timeout already */
            return;
        }
        uint32_t pause = 100u << (w->attempts < 4 ? w->attempts : 4); /* up to 1.6 s */
        if (shoal_system_timer(co->r->sys, pause, false, write_retry_tick, w) < 0)
            write_issue(co, w);
        return;
    }
    if (co)
        after_write(co, w);
    life_release(w->life);
    free(w->entries);
    free(w);
}

static write_t *write_new(coordinator_t *co)
{
    write_t *w = calloc(1, sizeof *w);
    if (!w)
        abort();
    w->life = life_ref(co->life);
    return w;
}

static void write_add(write_t *w, const char *prefix, const char *name, const char *value,
                      int64_t ts)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 4;
        w->entries = realloc(w->entries, w->cap * sizeof *w->entries);
        if (!w->entries)
            abort();
    }
    entry_t *e = &w->entries[w->n++];
    snprintf(e->key, sizeof e->key, "%s%s", prefix, name);
    snprintf(e->value, sizeof e->value, "%s", value);
    e->ts = ts;
}

/* Allocations made in one turn of the node loop go out as one write (a burst of first messages
   to 10,000 shards is a handful of writes, not 10,000 updates of a growing map). */
static int flush_batch(shoal_system_t *sys, void *arg)
{
    (void)sys;
    life_t *l = arg;
    coordinator_t *co = l->obj;
    if (co) {
        co->flush_posted = false;
        write_t *w = co->batch;
        co->batch = NULL;
        if (w)
            write_issue(co, w);
    }
    life_release(l);
    return 0;
}

static void batch_add(coordinator_t *co, const char *prefix, const char *name, const char *value,
                      int64_t ts)
{
    if (!co->batch)
        co->batch = write_new(co);
    write_add(co->batch, prefix, name, value, ts);
    if (co->flush_posted)
        return;
    life_t *l = life_ref(co->life);
    if (shoal_system_post(co->r->sys, flush_batch, l) == 0) {
        co->flush_posted = true;
    } else {
        life_release(l);
        write_t *w = co->batch;
        co->batch = NULL;
        write_issue(co, w);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Allocation
 */
static void waiter_add(coordinator_t *co, const char *shard, const shoal_node_t *node)
{
    waiters_t *w = zhashx_lookup(co->waiting, shard);
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w)
            abort();
        zhashx_insert(co->waiting, shard, w);
    }
    for (size_t i = 0; i < w->n; i++)
        if (w->nodes[i] == node)
            return;
    w->nodes = realloc(w->nodes, (w->n + 1) * sizeof *w->nodes);
    if (!w->nodes)
        abort();
    w->nodes[w->n++] = node;
}

static void waiters_free(void **item)
{
    waiters_t *w = *item;
    if (w) {
        free(w->nodes);
        free(w);
    }
    *item = NULL;
}

static void answer_waiters(coordinator_t *co, const char *shard)
{
    waiters_t *w = zhashx_lookup(co->waiting, shard);
    alloc_t *a = zhashx_lookup(co->allocs, shard);
    if (!w || !a || !a->node || a->writing)
        return;
    for (size_t i = 0; i < w->n; i++)
        if (w->nodes[i] != a->node || true)
            send_one(co, w->nodes[i], SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES, shard,
                     a->node, a->epoch, NULL, 0);
    zhashx_delete(co->waiting, shard);
}

static void admin_written(coordinator_t *co, const write_t *w);

static void after_write(coordinator_t *co, const write_t *w)
{
    int64_t now = shoal_now_ms();
    if (w->admin_op)
        admin_written(co, w);
    for (size_t i = 0; i < w->n; i++) {
        const entry_t *e = &w->entries[i];
        if (strncmp(e->key, "s/", 2) != 0)
            continue;
        const char *shard = e->key + 2;
        alloc_t *a = zhashx_lookup(co->allocs, shard);
        if (!a || (uint64_t)e->ts != a->epoch || !a->writing)
            continue; /* superseded meanwhile */
        a->writing = false;
        if (!a->node)
            continue;
        a->host_sent_at = now;
        send_one(co, a->node, SHOAL__SHARDING__CONTROL__KIND__HOST_SHARD, shard, a->node,
                 a->epoch, NULL, 0);
        answer_waiters(co, shard);
    }
}

static bool member_up(coordinator_t *co, const shoal_node_t *node, bool *leaving)
{
    const shoal_member_t *m = sharding_member(co->r->sh, node);
    if (!m)
        return false;
    *leaving = m->status == SHOAL_MEMBER_LEAVING || m->status == SHOAL_MEMBER_EXITING;
    return m->status == SHOAL_MEMBER_UP || m->status == SHOAL_MEMBER_LEAVING;
}

/* The regions that may get shards, in preference order; with_shards fills their shard lists
   (rebalance and custom strategies need them). */
typedef struct {
    shoal_alloc_region_t *regions;
    size_t n;
    const char ***lists;
} candidates_t;

static void candidates_free(candidates_t *c)
{
    for (size_t i = 0; c->lists && i < c->n; i++)
        free(c->lists[i]);
    free(c->lists);
    free(c->regions);
    memset(c, 0, sizeof *c);
}

static void candidates(coordinator_t *co, bool with_shards, candidates_t *out)
{
    memset(out, 0, sizeof *out);
    size_t cap = zhashx_size(co->regions);
    out->regions = calloc(cap + 1, sizeof *out->regions);
    if (!out->regions)
        abort();
    for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions)) {
        bool leaving = false;
        if (!c->registered || c->proxy || c->gone_since || !member_up(co, c->node, &leaving) ||
            !sharding_reachable(co->r->sh, c->node))
            continue;
        const shoal_member_t *m = sharding_member(co->r->sh, c->node);
        shoal_alloc_region_t *ar = &out->regions[out->n++];
        ar->node = c->node;
        ar->n_shards = c->n_shards;
        ar->leaving = leaving || c->shutting_down;
        ar->app_version = m && m->app_version ? m->app_version : "0.0.0";
    }
    if (with_shards && out->n) {
        out->lists = calloc(out->n, sizeof *out->lists);
        size_t *fill = calloc(out->n, sizeof *fill);
        if (!out->lists || !fill)
            abort();
        for (size_t i = 0; i < out->n; i++) {
            out->lists[i] = calloc(out->regions[i].n_shards + 1, sizeof **out->lists);
            if (!out->lists[i])
                abort();
        }
        for (alloc_t *a = zhashx_first(co->allocs); a; a = zhashx_next(co->allocs)) {
            if (!a->node || a->writing)
                continue;
            const char *shard = zhashx_cursor(co->allocs);
            for (size_t i = 0; i < out->n; i++)
                if (out->regions[i].node == a->node && fill[i] < out->regions[i].n_shards) {
                    out->lists[i][fill[i]++] = shard;
                    break;
                }
        }
        for (size_t i = 0; i < out->n; i++) {
            out->regions[i].shards = out->lists[i];
            out->regions[i].n_shards = fill[i];
        }
        free(fill);
    }
    alloc_sort_regions(out->regions, out->n);
}

static const char *external_location(const char *shard, void *arg)
{
    coordinator_t *co = arg;
    return co->external ? zhashx_lookup(co->external, shard) : NULL;
}

static alloc_ctx_t strategy(coordinator_t *co)
{
    alloc_ctx_t ctx = {&co->r->s.allocation, external_location, co};
    return ctx;
}

/* The pin of a shard, NULL when none. */
static const char *pin_of(coordinator_t *co, const char *shard)
{
    const pin_t *p = zhashx_lookup(co->pins, shard);
    return p && p->address[0] ? p->address : NULL;
}

/* The candidate a pinned shard must go to, -1 when unpinned or when its member is no candidate
   now (not Up, unreachable, leaving: the shard lives elsewhere until the member is back, and the
   rebalance then brings it home). */
static int pin_index(const char *pin, const shoal_alloc_region_t *regions, size_t n)
{
    for (size_t i = 0; pin && i < n; i++)
        if (!regions[i].leaving && alloc_address_is(regions[i].node, pin))
            return (int)i;
    return -1;
}

static int pinned_index(coordinator_t *co, const char *shard, const shoal_alloc_region_t *regions,
                        size_t n)
{
    return pin_index(pin_of(co, shard), regions, n);
}

/* Regions registered, hosting, counted against min-nr-of-members (global and the role's). */
static bool enough_regions(coordinator_t *co, size_t n_candidates)
{
    const shoal_cluster_settings_t *cs = shoal_cluster_settings(co->r->sh->c);
    size_t need = cs ? cs->min_nr_of_members : 1;
    for (size_t i = 0; cs && i < cs->n_role_min; i++)
        if (strcmp(cs->role_min[i].role, co->r->s.role) == 0 && cs->role_min[i].min > need)
            need = cs->role_min[i].min;
    return n_candidates >= need && n_candidates > 0;
}

/* Allocates a shard now (requester may be NULL). False when no region can take it yet. */
static bool allocate(coordinator_t *co, const char *shard, const shoal_node_t *requester)
{
    candidates_t c;
    bool custom = co->r->s.allocation.kind == SHOAL_ALLOC_CUSTOM;
    candidates(co, custom, &c);
    if (!enough_regions(co, c.n)) {
        candidates_free(&c);
        return false;
    }
    int req = -1;
    for (size_t i = 0; i < c.n; i++)
        if (c.regions[i].node == requester)
            req = (int)i;
    int idx = pinned_index(co, shard, c.regions, c.n);
    if (idx < 0) {
        alloc_ctx_t ctx = strategy(co);
        idx = alloc_allocate(&ctx, shard, req, c.regions, c.n);
    }
    if (idx < 0 || (size_t)idx >= c.n) {
        candidates_free(&c);
        return false;
    }
    const shoal_node_t *node = c.regions[idx].node;
    shoal_debug("%s: sharding %s: shard %s -> %s (%zu candidates)", shoal_node_id(co->r->self),
               co->r->name, shard, shoal_node_id(node), c.n);
    candidates_free(&c);
    alloc_t *a = alloc_get(co, shard);
    set_alloc(co, a, node, next_epoch(co));
    a->writing = true;
    a->started = false;
    co->unstarted++;
    co->stats.allocations++;
    batch_add(co, "s/", shard, shoal_node_id(node), (int64_t)a->epoch);
    return true;
}

static void try_waiting(coordinator_t *co)
{
    if (!co->recovered || !zhashx_size(co->waiting))
        return;
    zlistx_t *keys = zhashx_keys(co->waiting);
    for (const char *shard = zlistx_first(keys); shard; shard = zlistx_next(keys)) {
        alloc_t *a = zhashx_lookup(co->allocs, shard);
        if (zhashx_lookup(co->rebalancing, shard) || (a && a->writing))
            continue;
        if (a && a->node) {
            creg_t *host = zhashx_lookup(co->regions, shoal_node_id(a->node));
            if (!host || !host->gone_since)
                answer_waiters(co, shard);
            continue;
        }
        waiters_t *w = zhashx_lookup(co->waiting, shard);
        if (!allocate(co, shard, w && w->n ? w->nodes[0] : NULL))
            break; /* no region can take shards yet */
    }
    zlistx_destroy(&keys);
}

/* ---------------------------------------------------------------------------------------------
 * Handoff
 */
static void remembered_shard(const char *shard, void *arg);

static void rb_free(void **item)
{
    rb_t *rb = *item;
    if (rb) {
        free(rb->waiting);
        free(rb->acked);
        free(rb);
    }
    *item = NULL;
}

static void rb_handoff(coordinator_t *co, rb_t *rb)
{
    rb->phase = RB_HANDOFF;
    rb->deadline = shoal_now_ms() + co->r->s.handoff_timeout_ms;
    shoal_debug("%s: sharding %s: handoff of shard %s: HandOff to its owner %s (%zu regions "
                "acknowledged BeginHandOff, %zu did not)",
                shoal_node_id(co->r->self), co->r->name, rb->shard, shoal_node_id(rb->from),
                rb->n_acked, rb->n_waiting);
    send_one(co, rb->from, SHOAL__SHARDING__CONTROL__KIND__HANDOFF, rb->shard, rb->from,
             rb->epoch, rb->acked, rb->n_acked);
}

static void start_handoff(coordinator_t *co, const char *shard)
{
    alloc_t *a = zhashx_lookup(co->allocs, shard);
    if (!a || !a->node || a->writing || zhashx_lookup(co->rebalancing, shard))
        return;
    rb_t *rb = calloc(1, sizeof *rb);
    if (!rb)
        abort();
    snprintf(rb->shard, sizeof rb->shard, "%s", shard);
    rb->from = a->node;
    rb->epoch = a->epoch;
    rb->phase = RB_BEGIN;
    rb->deadline = shoal_now_ms() + co->r->s.handoff_timeout_ms;
    size_t n = zhashx_size(co->regions);
    rb->waiting = calloc(n + 1, sizeof *rb->waiting);
    rb->acked = calloc(n + 1, sizeof *rb->acked);
    if (!rb->waiting || !rb->acked)
        abort();
    /* a region whose member was removed since the last tick (a graceful leave just ended) has
       no gone_since yet, and would never answer */
    for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions))
        if (c->registered && !c->gone_since && !sharding_removed(co->r->sh, c->node))
            rb->waiting[rb->n_waiting++] = c->node;
    zhashx_insert(co->rebalancing, rb->shard, rb);
    shoal_debug("%s: sharding %s: handoff of shard %s from %s begins: BeginHandOff to %zu regions",
                shoal_node_id(co->r->self), co->r->name, shard, shoal_node_id(rb->from),
                rb->n_waiting);
    for (size_t i = 0; i < rb->n_waiting; i++)
        send_one(co, rb->waiting[i], SHOAL__SHARDING__CONTROL__KIND__BEGIN_HANDOFF, shard,
                 rb->from, rb->epoch, NULL, 0);
    if (!rb->n_waiting)
        rb_handoff(co, rb);
}

/* Tells every registered region where a shard is now (they buffer it since BeginHandOff). */
static void broadcast_home(coordinator_t *co, const char *shard)
{
    alloc_t *a = zhashx_lookup(co->allocs, shard);
    for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions))
        if (c->registered && !c->gone_since)
            send_one(co, c->node, SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES, shard,
                     a && !a->writing ? a->node : NULL, a ? a->epoch : next_epoch(co), NULL, 0);
}

/* Tells a region that shuts down gracefully that none of its shards is left to move (or that
   there is nowhere to move them): it stops what it still has and ends its shutdown. */
static void send_shutdown_done(coordinator_t *co, const shoal_node_t *node)
{
    Shoal__Sharding__Control done = SHOAL__SHARDING__CONTROL__INIT;
    done.kind = SHOAL__SHARDING__CONTROL__KIND__SHUTDOWN_DONE;
    done.type_name = co->r->name;
    region_send_control(co->r, node, &done);
}

/* The old owner stopped the shard (or is gone): allocate it anew and let the buffers go. */
static void finish_handoff(coordinator_t *co, const char *shard_in)
{
    char shard[SHOAL_SHARD_ID_MAX + 1];
    snprintf(shard, sizeof shard, "%s", shard_in);
    rb_t *rb = zhashx_lookup(co->rebalancing, shard);
    const shoal_node_t *from = rb ? rb->from : NULL;
    bool deallocate = rb && rb->deallocate;
    shoal_debug("%s: sharding %s: handoff of shard %s: stopped at %s; %s",
                shoal_node_id(co->r->self), co->r->name, shard, from ? shoal_node_id(from) : "-",
                deallocate ? "deallocating it" : "allocating it anew");
    zhashx_delete(co->rebalancing, shard);
    alloc_t *a = alloc_get(co, shard);
    set_alloc(co, a, NULL, a->epoch);
    /* the last shard of a region shutting down has moved: it hears so now, not at its next
       retry (retry-interval later) */
    creg_t *owner = from ? zhashx_lookup(co->regions, shoal_node_id(from)) : NULL;
    if (owner && owner->shutting_down && owner->n_shards == 0)
        send_shutdown_done(co, from);
    if (deallocate) {
        uint64_t e = next_epoch(co);
        a->epoch = e;
        write_t *w = write_new(co);
        write_add(w, "s/", shard, "", (int64_t)e);
        write_issue(co, w);
        broadcast_home(co, shard);
        shoal_info("%s: sharding %s: shard %s stopped and deallocated", shoal_node_id(co->r->self),
                  co->r->name, shard);
        region_moved_event(co->r, shard, from, NULL);
        return;
    }
    /* every region was told BeginHandOff and buffers: they all need the new home */
    for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions))
        if (c->registered && !c->gone_since)
            waiter_add(co, shard, c->node);
    if (allocate(co, shard, NULL)) {
        co->stats.shards_moved++;
        region_moved_event(co->r, shard, from, a->node);
    } else {
        /* nowhere to go now: unallocated, and the regions ask again when they need it */
        uint64_t e = next_epoch(co);
        a->epoch = e;
        write_t *w = write_new(co);
        write_add(w, "s/", shard, "", (int64_t)e);
        write_issue(co, w);
        broadcast_home(co, shard);
        zhashx_delete(co->waiting, shard);
        region_moved_event(co->r, shard, from, NULL);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Regions coming and going
 */
/* Handoffs waiting on node's BeginHandOffAck stop waiting: it will not come (the region is
   terminated, or its member was removed). The removal is seen once it reaches the view. */
static void forget_acks_of(coordinator_t *co, const shoal_node_t *node)
{
    for (rb_t *rb = zhashx_first(co->rebalancing); rb; rb = zhashx_next(co->rebalancing))
        for (size_t i = 0; i < rb->n_waiting; i++)
            if (rb->waiting[i] == node) {
                rb->waiting[i] = rb->waiting[--rb->n_waiting];
                break;
            }
}

static void region_terminated(coordinator_t *co, creg_t *c)
{
    const shoal_node_t *node = c->node;
    shoal_info("%s: sharding %s: region %s terminated: reallocating its %zu shards",
              shoal_node_id(co->r->self), co->r->name, shoal_node_id(node), c->n_shards);
    write_t *w = write_new(co);
    zlistx_t *moved = zlistx_new();
    zlistx_set_destructor(moved, (zlistx_destructor_fn *)zstr_free);
    zlistx_set_duplicator(moved, (zlistx_duplicator_fn *)strdup);
    for (alloc_t *a = zhashx_first(co->allocs); a; a = zhashx_next(co->allocs)) {
        if (a->node != node)
            continue;
        const char *shard = zhashx_cursor(co->allocs);
        if (!a->started && co->unstarted)
            co->unstarted--;
        a->node = NULL;
        a->writing = false;
        a->epoch = next_epoch(co);
        write_add(w, "s/", shard, "", (int64_t)a->epoch);
        zlistx_add_end(moved, (void *)shard);
    }
    write_add(w, "r/", shoal_node_id(node), "", (int64_t)next_epoch(co));
    write_issue(co, w);
    forget_acks_of(co, node);
    zhashx_delete(co->regions, shoal_node_id(node));
    for (const char *shard = zlistx_first(moved); shard; shard = zlistx_next(moved)) {
        if (zhashx_lookup(co->rebalancing, shard)) {
            finish_handoff(co, shard);
        } else {
            broadcast_home(co, shard);
            region_moved_event(co->r, shard, node, NULL);
            if (co->r->s.remember_entities || state_eager(co->r))
                remembered_shard(shard, co); /* its entities (reminders) come back unasked */
        }
    }
    zlistx_destroy(&moved);
}

static void on_register(coordinator_t *co, const shoal_node_t *from,
                        const Shoal__Sharding__Control *m)
{
    if (m->number_of_shards != co->r->s.number_of_shards) {
        Shoal__Sharding__Control nack = SHOAL__SHARDING__CONTROL__INIT;
        nack.kind = SHOAL__SHARDING__CONTROL__KIND__REGISTER_NACK;
        nack.type_name = co->r->name;
        nack.error = SHOAL_ESHARDS;
        region_send_control(co->r, from, &nack);
        if (shoal_now_ms() - co->nack_logged_at >= 10000) {
            co->nack_logged_at = shoal_now_ms();
            shoal_error("%s: sharding %s: refused region %s: number-of-shards %u, here %u",
                       shoal_node_id(co->r->self), co->r->name, shoal_node_id(from),
                       m->number_of_shards, co->r->s.number_of_shards);
        }
        return;
    }
    creg_t *c = creg_get(co, from);
    c->proxy = m->proxy;
    c->gone_since = 0;
    /* the shards it hosts: an allocation this coordinator's read missed is newer than what it
       knows; an older one is a stale copy to stop */
    write_t *w = NULL;
    for (size_t i = 0; i < m->n_homes; i++) {
        const char *shard = m->homes[i]->shard;
        uint64_t epoch = m->homes[i]->epoch;
        note_epoch(co, epoch);
        alloc_t *a = alloc_get(co, shard);
        if (a->node == from && a->epoch == epoch)
            continue;
        if (epoch > a->epoch && !zhashx_lookup(co->rebalancing, shard)) {
            set_alloc(co, a, from, epoch);
            a->writing = false;
            a->started = true;
            if (!w)
                w = write_new(co);
            write_add(w, "s/", shard, shoal_node_id(from), (int64_t)epoch);
        } else if (a->node != from) {
            send_one(co, from, SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES, shard,
                     a->writing ? NULL : a->node, a->epoch, NULL, 0);
        }
    }
    if (!m->last) {
        if (w)
            write_issue(co, w);
        return;
    }
    if (!c->in_state) {
        if (!w)
            w = write_new(co);
        write_add(w, "r/", shoal_node_id(from), c->proxy ? "proxy" : "region",
                  (int64_t)next_epoch(co));
        c->in_state = true;
    }
    if (w)
        write_issue(co, w);
    bool was = c->registered;
    c->registered = true;
    if (!was && !c->proxy)
        co->rebalance_soon = true;
    size_t n = zhashx_size(co->allocs);
    const char **shards = calloc(n + 1, sizeof *shards);
    if (!shards)
        abort();
    size_t k = 0;
    for (alloc_t *a = zhashx_first(co->allocs); a && k < n; a = zhashx_next(co->allocs))
        if (a->node && !a->writing && !zhashx_lookup(co->rebalancing, zhashx_cursor(co->allocs)))
            shards[k++] = zhashx_cursor(co->allocs);
    send_homes(co, from, SHOAL__SHARDING__CONTROL__KIND__REGISTER_ACK, shards, k);
    free(shards);
    try_waiting(co);
}

/* A region cannot fence the entity state of a shard it hosts: the stored fence is newer than the
   allocation. If the coordinator's allocation is another, the region's copy is stale and learns
   the home. If it is this very one, the fence outlived the coordinator's memory: the coordinator
   state is not durable, so after every node was restarted epochs begin again at term 1 while the
   durable entity states keep their fences. The shard is then allocated again to the same region
   past the fence (a WriteMajority like any allocation, so a coordinator cut off from the majority
   cannot do it). */
static void on_shard_fenced(coordinator_t *co, const shoal_node_t *from,
                            const Shoal__Sharding__ShardHome *h, uint64_t fenced_at)
{
    alloc_t *a = zhashx_lookup(co->allocs, h->shard);
    if (!a || a->writing || zhashx_lookup(co->rebalancing, h->shard))
        return; /* a new allocation is on its way */
    if (a->node != from || a->epoch != h->epoch) {
        if (a->node && a->epoch > h->epoch)
            send_one(co, from, SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES, h->shard, a->node,
                     a->epoch, NULL, 0);
        return;
    }
    /* here fenced_at > a->epoch: the message is refused at parse otherwise (wire.c) */
    shoal_info("%s: sharding %s: shard %s: its entity state is fenced at epoch %llx, past its "
              "allocation %llx (a fence from before every node restarted): allocating it again "
              "to %s",
              shoal_node_id(co->r->self), co->r->name, h->shard, (unsigned long long)fenced_at,
              (unsigned long long)a->epoch, shoal_node_id(from));
    pass_epoch(co, fenced_at);
    set_alloc(co, a, from, next_epoch(co));
    a->writing = true;
    if (a->started)
        co->unstarted++;
    a->started = false;
    co->stats.allocations++;
    co->stats.fences_passed++;
    batch_add(co, "s/", h->shard, shoal_node_id(from), (int64_t)a->epoch);
}

/* ---------------------------------------------------------------------------------------------
 * An operator's actions (shoal-cluster rebalance|move|unpin, through ADMIN_REQ): answered with
 * ADMIN_REPLY once what they change is on a majority, so an answered pin survives a move of the
 * coordinator.
 */
enum { ADMIN_REBALANCE = 1, ADMIN_MOVE = 2, ADMIN_UNPIN = 3 };

static size_t rebalance(coordinator_t *co, int64_t now, const char **why);

static void admin_reply(coordinator_t *co, const shoal_node_t *to, uint64_t req_id, int err,
                        const char *fmt, ...)
{
    char text[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    Shoal__Sharding__Control rep = SHOAL__SHARDING__CONTROL__INIT;
    rep.kind = SHOAL__SHARDING__CONTROL__KIND__ADMIN_REPLY;
    rep.type_name = co->r->name;
    rep.req_id = req_id;
    rep.error = err;
    rep.text = text;
    region_send_control(co->r, to, &rep);
}

/* The registered region an operator names (a node id, or host:port for its live incarnation). */
static creg_t *admin_region(coordinator_t *co, const char *member)
{
    creg_t *best = NULL;
    for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions)) {
        if (!c->registered || c->proxy || c->gone_since)
            continue;
        if (strcmp(shoal_node_id(c->node), member) == 0)
            return c;
        if (alloc_address_is(c->node, member))
            best = c;
    }
    return best;
}

static void admin_written(coordinator_t *co, const write_t *w)
{
    const char *shard = w->entries[0].key + 2;
    if (w->admin_op == ADMIN_UNPIN) {
        shoal_info("%s: sharding %s: shard %s unpinned", shoal_node_id(co->r->self), co->r->name,
                  shard);
        admin_reply(co, w->reply_to, w->req_id, 0,
                    "shard %s unpinned; it stays where it is until a rebalance moves it", shard);
        return;
    }
    const char *pin = w->entries[0].value;
    alloc_t *a = zhashx_lookup(co->allocs, shard);
    shoal_info("%s: sharding %s: shard %s pinned to %s", shoal_node_id(co->r->self), co->r->name,
              shard, pin);
    if (zhashx_lookup(co->rebalancing, shard)) {
        admin_reply(co, w->reply_to, w->req_id, 0,
                    "shard %s pinned to %s; its handoff under way ends there", shard, pin);
    } else if (a && a->node && alloc_address_is(a->node, pin)) {
        admin_reply(co, w->reply_to, w->req_id, 0, "shard %s is on %s already; pinned there",
                    shard, shoal_node_id(a->node));
    } else if (a && a->node && !a->writing) {
        char from[SHOAL_NODE_ID_MAX + 1];
        snprintf(from, sizeof from, "%s", shoal_node_id(a->node));
        start_handoff(co, shard);
        admin_reply(co, w->reply_to, w->req_id, 0,
                    "shard %s handed off from %s to %s; pinned there", shard, from, pin);
    } else {
        /* unallocated (or an allocation being written): the next allocation, or the next
           rebalance round, takes it to the pin */
        co->rebalance_soon = true;
        admin_reply(co, w->reply_to, w->req_id, 0,
                    "shard %s pinned to %s; it is hosted there from its next allocation", shard,
                    pin);
    }
}

static void on_admin(coordinator_t *co, const shoal_node_t *from,
                     const Shoal__Sharding__Control *m)
{
    if (!co->ready || !co->recovered) {
        admin_reply(co, from, m->req_id, SHOAL_ESTATE,
                    "the coordinator of %s is still reading its state; try again", co->r->name);
        return;
    }
    if (m->admin_op == ADMIN_REBALANCE) {
        const char *why = NULL;
        size_t n = rebalance(co, shoal_now_ms(), &why);
        if (why)
            admin_reply(co, from, m->req_id, SHOAL_ESTATE, "rebalance of %s %s", co->r->name, why);
        else
            admin_reply(co, from, m->req_id, 0, "rebalance of %s: %zu shard%s moving", co->r->name,
                        n, n == 1 ? "" : "s");
        return;
    }
    const char *shard = m->shard;
    const pin_t *old = zhashx_lookup(co->pins, shard);
    write_t *w = write_new(co);
    w->admin_op = m->admin_op;
    w->reply_to = from;
    w->req_id = m->req_id;
    if (m->admin_op == ADMIN_UNPIN) {
        if (!old || !old->address[0]) {
            admin_reply(co, from, m->req_id, SHOAL_ENOTFOUND, "shard %s of %s is not pinned",
                        shard, co->r->name);
            goto cancel;
        }
        write_add(w, "p/", shard, "", (int64_t)next_epoch(co));
    } else {
        char why[256];
        if (!sharding_shard_possible(&co->r->s, co->r->name, shard, why, sizeof why)) {
            /* the asking region believes in other shards than this coordinator's type has
               (different settings, or an older build that does not check) */
            admin_reply(co, from, m->req_id, SHOAL_EINVAL, "%s", why);
            goto cancel;
        }
        creg_t *c = admin_region(co, m->target);
        bool leaving = false;
        if (!c) {
            admin_reply(co, from, m->req_id, SHOAL_ENOTMEMBER,
                        "no region of %s registered at %s (a member hosting the type: see "
                        "shoal-cluster shards %s)",
                        co->r->name, m->target, co->r->name);
            goto cancel;
        }
        if (!member_up(co, c->node, &leaving) || leaving || c->shutting_down ||
            !sharding_reachable(co->r->sh, c->node)) {
            admin_reply(co, from, m->req_id, SHOAL_ESTATE, "%s is not Up and reachable",
                        shoal_node_id(c->node));
            goto cancel;
        }
        char address[SHOAL_NODE_ID_MAX + 1];
        snprintf(address, sizeof address, "%.*s", (int)alloc_address_len(c->node),
                 shoal_node_id(c->node));
        write_add(w, "p/", shard, address, (int64_t)next_epoch(co));
    }
    /* the pin holds in memory at once (an allocation meanwhile honours it); the answer waits
       for the write */
    pin_t *p = zhashx_lookup(co->pins, shard);
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p)
            abort();
        zhashx_insert(co->pins, shard, p);
    }
    p->ts = (uint64_t)w->entries[0].ts;
    snprintf(p->address, sizeof p->address, "%s", w->entries[0].value);
    write_issue(co, w);
    return;
cancel:
    life_release(w->life);
    free(w->entries);
    free(w);
}

/* ---------------------------------------------------------------------------------------------
 * Messages
 */
void coordinator_on_control(coordinator_t *co, const shoal_node_t *from,
                            const Shoal__Sharding__Control *m)
{
    const Shoal__Sharding__ShardHome *h0 = m->n_homes ? m->homes[0] : NULL;
    switch (m->kind) {
    case SHOAL__SHARDING__CONTROL__KIND__REGISTER:
        if (!co->ready)
            return; /* the region retries; answered once the state is read */
        on_register(co, from, m);
        break;
    case SHOAL__SHARDING__CONTROL__KIND__GET_SHARD_HOME: {
        alloc_t *a = zhashx_lookup(co->allocs, m->shard);
        creg_t *host = a && a->node ? zhashx_lookup(co->regions, shoal_node_id(a->node)) : NULL;
        /* a home on a region that is going away is not worth telling: the shard is reallocated
           once the region is terminated, and the asker waits for that */
        if (co->ready && a && a->node && !a->writing && !(host && host->gone_since) &&
            !zhashx_lookup(co->rebalancing, m->shard)) {
            send_one(co, from, SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES, m->shard, a->node,
                     a->epoch, NULL, 0);
            break;
        }
        waiter_add(co, m->shard, from);
        if (co->ready && co->recovered && !zhashx_lookup(co->rebalancing, m->shard) &&
            !(a && (a->writing || a->node)))
            allocate(co, m->shard, from);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__SHARD_FENCED:
        if (h0 && co->ready)
            on_shard_fenced(co, from, h0, m->fenced_at);
        break;
    case SHOAL__SHARDING__CONTROL__KIND__SHARD_STARTED: {
        alloc_t *a = zhashx_lookup(co->allocs, h0->shard);
        if (a && a->node == from && a->epoch == h0->epoch && !a->started) {
            a->started = true;
            if (co->unstarted)
                co->unstarted--;
        }
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__BEGIN_HANDOFF_ACK: {
        rb_t *rb = zhashx_lookup(co->rebalancing, h0->shard);
        if (!rb || rb->phase != RB_BEGIN || rb->epoch != h0->epoch)
            break;
        for (size_t i = 0; i < rb->n_waiting; i++)
            if (rb->waiting[i] == from) {
                rb->waiting[i] = rb->waiting[--rb->n_waiting];
                if (from != rb->from)
                    rb->acked[rb->n_acked++] = from;
                break;
            }
        if (!rb->n_waiting)
            rb_handoff(co, rb);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__SHARD_STOPPED: {
        rb_t *rb = zhashx_lookup(co->rebalancing, h0->shard);
        if (rb && rb->from == from && rb->phase == RB_HANDOFF)
            finish_handoff(co, h0->shard);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__GRACEFUL_SHUTDOWN: {
        creg_t *c = zhashx_lookup(co->regions, shoal_node_id(from));
        if (!c)
            break;
        if (!c->shutting_down)
            shoal_info("%s: sharding %s: region %s shuts down: moving its %zu shards",
                      shoal_node_id(co->r->self), co->r->name, shoal_node_id(from), c->n_shards);
        c->shutting_down = true;
        if (c->n_shards == 0) {
            send_shutdown_done(co, from);
            break;
        }
        /* "nowhere to move them" stops the shards where they are (the region acts on it), so
           only a coordinator that knows every region may say it: a new term (the singleton
           moves with the very leave of its node) hears the leaver, which registers first,
           before the regions that stay; told "nowhere" then, the leaver stopped its shards
           without a handoff and the tells on their way to them were lost. Until recovered
           (every live region the state names registered, or handoff-timeout) the region asks
           again at its next retry. */
        if (!co->ready || !co->recovered)
            break;
        candidates_t cand;
        candidates(co, false, &cand);
        bool elsewhere = false;
        for (size_t i = 0; i < cand.n; i++)
            elsewhere |= !cand.regions[i].leaving;
        candidates_free(&cand);
        if (!elsewhere) {
            send_shutdown_done(co, from);
            break;
        }
        zlistx_t *mine = zlistx_new();
        for (alloc_t *a = zhashx_first(co->allocs); a; a = zhashx_next(co->allocs))
            if (a->node == from && !a->writing)
                zlistx_add_end(mine, (void *)zhashx_cursor(co->allocs));
        for (const char *s = zlistx_first(mine); s; s = zlistx_next(mine))
            start_handoff(co, s);
        zlistx_destroy(&mine);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__ADMIN_REQ:
        on_admin(co, from, m);
        break;
    case SHOAL__SHARDING__CONTROL__KIND__STOP_SHARDS:
        for (size_t i = 0; i < m->n_shard_ids; i++) {
            const char *shard = m->shard_ids[i];
            start_handoff(co, shard);
            rb_t *rb = zhashx_lookup(co->rebalancing, shard);
            if (rb)
                rb->deallocate = true;
        }
        break;
    case SHOAL__SHARDING__CONTROL__KIND__REGIONS_REQ: {
        Shoal__Sharding__Control rep = SHOAL__SHARDING__CONTROL__INIT;
        rep.kind = SHOAL__SHARDING__CONTROL__KIND__REGIONS_REPLY;
        rep.type_name = co->r->name;
        rep.req_id = m->req_id;
        size_t n = zhashx_size(co->regions), k = 0;
        char **ids = calloc(n + 1, sizeof *ids);
        if (!ids)
            abort();
        for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions))
            if (c->registered && !c->proxy && !c->gone_since)
                ids[k++] = (char *)shoal_node_id(c->node);
        rep.regions = ids;
        rep.n_regions = k;
        region_send_control(co->r, from, &rep);
        free(ids);
        break;
    }
    default:
        break;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Startup: read the state
 */
typedef struct {
    life_t *life;
} read_t;

static int parse_entry(const void *key, size_t klen, const shoal_crdt_t *value, void *arg)
{
    coordinator_t *co = arg;
    size_t vlen = 0;
    const char *v = shoal_lwwreg_value(value, &vlen);
    int64_t ts = shoal_lwwreg_timestamp(value);
    char k[SHOAL_SHARD_ID_MAX + SHOAL_NODE_ID_MAX + 4], val[SHOAL_NODE_ID_MAX + 1];
    if (klen < 3 || klen >= sizeof k || vlen >= sizeof val || ts <= 0)
        return 0;
    memcpy(k, key, klen);
    k[klen] = 0;
    memcpy(val, v, vlen);
    val[vlen] = 0;
    const shoal_node_t *node = vlen ? shoal_node_intern(val) : NULL;
    note_epoch(co, (uint64_t)ts);
    if (strncmp(k, "s/", 2) == 0 && klen - 2 <= SHOAL_SHARD_ID_MAX) {
        alloc_t *a = alloc_get(co, k + 2);
        if ((uint64_t)ts >= a->epoch) {
            set_alloc(co, a, node, (uint64_t)ts);
            a->started = true;
        }
    } else if (strncmp(k, "p/", 2) == 0 && klen - 2 <= SHOAL_SHARD_ID_MAX) {
        pin_t *p = zhashx_lookup(co->pins, k + 2);
        if (!p) {
            p = calloc(1, sizeof *p);
            if (!p)
                abort();
            zhashx_insert(co->pins, k + 2, p);
        }
        if ((uint64_t)ts >= p->ts) {
            p->ts = (uint64_t)ts;
            snprintf(p->address, sizeof p->address, "%s", val);
        }
    } else if (strncmp(k, "r/", 2) == 0 && node) {
        creg_t *c = creg_get(co, node);
        c->in_state = true;
        c->proxy = strcmp(val, "proxy") == 0;
        if (!vlen)
            zhashx_delete(co->regions, shoal_node_id(node));
    } else if (strncmp(k, "r/", 2) == 0 && !vlen) {
        const shoal_node_t *gone = shoal_node_intern(k + 2);
        if (gone)
            zhashx_delete(co->regions, shoal_node_id(gone));
    }
    return 0;
}

static void read_state(coordinator_t *co);

static void read_done(shoal_replicator_t *rep, int status, const char *key,
                      const shoal_crdt_t *value, void *arg)
{
    (void)rep;
    (void)key;
    read_t *rd = arg;
    coordinator_t *co = rd->life->obj;
    life_release(rd->life);
    free(rd);
    if (!co)
        return;
    co->reading = false;
    if (status != 0 && status != SHOAL_ENOTFOUND) {
        /* timed out, or refused (no quorum): an empty state here would hand out shards that
           are allocated elsewhere */
        int64_t now = shoal_now_ms();
        if (now - co->read_failed_logged >= 5000) {
            co->read_failed_logged = now;
            shoal_info("%s: sharding %s: coordinator state read failed (%s); retrying",
                      shoal_node_id(co->r->self), co->r->name, shoal_strerror(status));
        }
        return; /* the tick reads again */
    }
    if (status == 0 && value)
        shoal_ormap_foreach(value, parse_entry, co);
    co->ready = true;
    co->recover_until = shoal_now_ms() + co->r->s.handoff_timeout_ms;
    shoal_info("%s: sharding %s: coordinator (term %llu) has its state: %zu shards, %zu regions",
              shoal_node_id(co->r->self), co->r->name, (unsigned long long)co->term,
              zhashx_size(co->allocs), zhashx_size(co->regions));
    /* A new term on the node of the previous one is invisible to the regions (the singleton's
       host did not change): tell them, so that they register again and drop the handoffs the
       previous term began (region_on_control). */
    for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions)) {
        Shoal__Sharding__Control m = SHOAL__SHARDING__CONTROL__INIT;
        m.kind = SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES;
        m.type_name = co->r->name;
        m.term = co->term;
        region_send_control(co->r, c->node, &m);
    }
}

static void read_state(coordinator_t *co)
{
    const shoal_sharding_settings_t *s = &co->r->s;
    shoal_consistency_t c = {SHOAL_MAJORITY, 0, s->waiting_for_state_timeout_ms,
                             s->majority_min_cap, s->read_majority_plus, true};
    if (s->read_majority_plus == UINT32_MAX)
        c.level = SHOAL_ALL;
    read_t *rd = calloc(1, sizeof *rd);
    if (!rd)
        abort();
    rd->life = life_ref(co->life);
    co->reading = true;
    co->stats.state_reads++;
    int rc = shoal_replicator_get(co->r->rep, co->key, shoal_type_by_name("LWWMap"), &c,
                                  read_done, rd);
    if (rc < 0)
        read_done(co->r->rep, rc == SHOAL_ENOTFOUND ? rc : SHOAL_ETIMEOUT, co->key, NULL, rd);
}

static void remembered_shard(const char *shard, void *arg)
{
    coordinator_t *co = arg;
    alloc_t *a = zhashx_lookup(co->allocs, shard);
    if (a && (a->node || a->writing))
        return;
    if (!zhashx_lookup(co->waiting, shard)) {
        waiters_t *w = calloc(1, sizeof *w);
        if (!w)
            abort();
        zhashx_insert(co->waiting, shard, w);
    }
    try_waiting(co);
}

/* The regions the state names that are live members must register before new shards are
   handed out (an allocation the read missed is known to them). */
static void check_recovered(coordinator_t *co, int64_t now)
{
    if (co->recovered || !co->ready)
        return;
    bool all = true;
    for (creg_t *c = zhashx_first(co->regions); c && all; c = zhashx_next(co->regions)) {
        bool leaving;
        if (!c->registered && member_up(co, c->node, &leaving) &&
            sharding_reachable(co->r->sh, c->node))
            all = false;
    }
    if (all || now >= co->recover_until) {
        co->recovered = true;
        co->rebalance_soon = true;
        /* remembered entities come back by themselves: their shards are allocated eagerly */
        if (co->r->s.remember_entities || state_eager(co->r))
            remember_all_shards(co->r, remembered_shard, co, co->life);
        try_waiting(co);
    }
}

static void external_changed(shoal_replicator_t *rep, shoal_change_t change, const char *key,
                             const shoal_crdt_t *value, void *arg);

coordinator_t *coordinator_new(shoal_region_t *r, uint64_t term)
{
    coordinator_t *co = calloc(1, sizeof *co);
    if (!co)
        abort();
    co->r = r;
    co->term = term;
    co->life = life_new(co);
    snprintf(co->key, sizeof co->key, "coord-%s", r->name);
    snprintf(co->ext_key, sizeof co->ext_key, "external-shard-allocation-%s", r->name);
    co->allocs = zhashx_new();
    co->regions = zhashx_new();
    zhashx_set_destructor(co->regions, free_item);
    co->rebalancing = zhashx_new();
    zhashx_set_destructor(co->rebalancing, rb_free);
    co->waiting = zhashx_new();
    zhashx_set_destructor(co->waiting, waiters_free);
    co->pins = zhashx_new();
    zhashx_set_destructor(co->pins, free_item);
    co->next_rebalance = shoal_now_ms() + r->s.rebalance_interval_ms;
    if (r->s.allocation.kind == SHOAL_ALLOC_EXTERNAL) {
        co->external = zhashx_new();
        co->ext_sub = shoal_replicator_subscribe(r->rep, co->ext_key, external_changed, co);
    }
    shoal_info("%s: sharding %s: coordinator starting (term %llu)", shoal_node_id(r->self),
              r->name, (unsigned long long)term);
    read_state(co);
    return co;
}

void coordinator_free(coordinator_t **self_p)
{
    coordinator_t *co = *self_p;
    if (!co)
        return;
    *self_p = NULL;
    if (co->ext_sub > 0)
        shoal_replicator_unsubscribe(co->r->rep, co->ext_sub);
    if (co->batch) {
        write_t *w = co->batch;
        life_release(w->life);
        free(w->entries);
        free(w);
        co->batch = NULL;
    }
    life_end(&co->life);
    zhashx_t *allocs = co->allocs;
    for (alloc_t *a = zhashx_first(allocs); a; a = zhashx_next(allocs))
        free(a);
    zhashx_destroy(&co->allocs);
    zhashx_destroy(&co->regions);
    zhashx_destroy(&co->rebalancing);
    zhashx_destroy(&co->waiting);
    zhashx_destroy(&co->pins);
    zhashx_destroy(&co->external);
    free(co);
}

static int ext_entry(const void *key, size_t klen, const shoal_crdt_t *value, void *arg)
{
    coordinator_t *co = arg;
    size_t vlen = 0;
    const char *v = shoal_lwwreg_value(value, &vlen);
    if (klen == 0 || klen > SHOAL_SHARD_ID_MAX || vlen == 0 || vlen > 300)
        return 0;
    char k[SHOAL_SHARD_ID_MAX + 1];
    memcpy(k, key, klen);
    k[klen] = 0;
    char *addr = malloc(vlen + 1);
    if (!addr)
        abort();
    memcpy(addr, v, vlen);
    addr[vlen] = 0;
    zhashx_update(co->external, k, addr);
    return 0;
}

static void external_changed(shoal_replicator_t *rep, shoal_change_t change, const char *key,
                             const shoal_crdt_t *value, void *arg)
{
    (void)rep;
    (void)key;
    coordinator_t *co = arg;
    zhashx_purge(co->external);
    zhashx_set_destructor(co->external, (zhashx_destructor_fn *)zstr_free);
    if (change == SHOAL_CHANGED && value && shoal_crdt_type(value) == shoal_type_by_name("LWWMap"))
        shoal_ormap_foreach(value, ext_entry, co);
}

/* ---------------------------------------------------------------------------------------------
 * The tick
 */
static bool good_time_to_rebalance(coordinator_t *co)
{
    shoal_sharding_t *sh = co->r->sh;
    if (!sh->have_view || zhashx_size(sh->unreachable))
        return false;
    const char *version = NULL;
    for (size_t i = 0; i < sh->view.n_members; i++) {
        const shoal_member_t *m = &sh->view.members[i];
        if (m->status == SHOAL_MEMBER_JOINING || m->status == SHOAL_MEMBER_WEAKLY_UP ||
            !m->reachable)
            return false;
        if (*co->r->s.role && !shoal_member_has_role(m, co->r->s.role))
            continue;
        if (version && m->app_version && strcmp(version, m->app_version) != 0)
            return false;
        if (m->app_version)
            version = m->app_version;
    }
    return true;
}

/* A rebalance round: the strategy's moves, less the pinned shards it picked, plus the pinned
   shards away from their member while that member can take them. The number of shards whose
   handoff began; *why says why none could when the round did not run. */
static size_t rebalance(coordinator_t *co, int64_t now, const char **why)
{
    co->next_rebalance = now + co->r->s.rebalance_interval_ms;
    co->rebalance_soon = false;
    if (why)
        *why = NULL;
    if (!good_time_to_rebalance(co)) {
        if (why)
            *why = "not now: a member is joining or unreachable, or the members run different "
                   "app versions";
        return 0;
    }
    candidates_t c;
    candidates(co, true, &c);
    if (c.n < 2) {
        candidates_free(&c);
        if (why)
            *why = "fewer than two regions can host shards";
        return 0;
    }
    size_t n_in = zhashx_size(co->rebalancing), k = 0;
    const char **in = calloc(n_in + 1, sizeof *in);
    if (!in)
        abort();
    for (rb_t *rb = zhashx_first(co->rebalancing); rb && k < n_in;
         rb = zhashx_next(co->rebalancing))
        in[k++] = rb->shard;
    size_t cap = zhashx_size(co->allocs) + 1;
    const char **out = calloc(cap, sizeof *out);
    if (!out)
        abort();
    alloc_ctx_t ctx = strategy(co);
    size_t n = alloc_rebalance(&ctx, c.regions, c.n, in, k, out, cap);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (!pin_of(co, out[i]))
            out[kept++] = out[i];
    n = kept;
    /* nothing in this loop may look co->pins up: zhashx_lookup moves the table's cursor to the
       item it finds, and zhashx_next then returns that item again, for ever (test_pin_away: a
       pinned shard living away from its member hung the coordinator's node thread) */
    for (pin_t *p = zhashx_first(co->pins); p && n < cap; p = zhashx_next(co->pins)) {
        const char *shard = zhashx_cursor(co->pins);
        alloc_t *a = zhashx_lookup(co->allocs, shard);
        if (p->address[0] && a && a->node && !a->writing &&
            !alloc_address_is(a->node, p->address) && !zhashx_lookup(co->rebalancing, shard) &&
            pin_index(p->address, c.regions, c.n) >= 0)
            out[n++] = shard;
    }
    if (n) {
        co->stats.rebalance_rounds++;
        shoal_info("%s: sharding %s: rebalance: moving %zu shards (%zu regions, %zu shards)",
                  shoal_node_id(co->r->self), co->r->name, n, c.n, zhashx_size(co->allocs));
        /* copy: the ids are borrowed from the candidate lists, freed below */
        char **ids = calloc(n, sizeof *ids);
        if (!ids)
            abort();
        for (size_t i = 0; i < n; i++)
            ids[i] = strdup(out[i]);
        candidates_free(&c);
        for (size_t i = 0; i < n; i++) {
            start_handoff(co, ids[i]);
            free(ids[i]);
        }
        free(ids);
        co->rebalance_soon = true; /* go on once this round is done, while unbalanced */
    } else {
        candidates_free(&c);
    }
    free(in);
    free(out);
    return n;
}

void coordinator_tick(coordinator_t *co)
{
    int64_t now = shoal_now_ms();
    if (!co->ready) {
        if (!co->reading)
            read_state(co);
        return;
    }
    check_recovered(co, now);
    /* regions whose member is down or gone are terminated after the removal margin, within
       which a downed node stops its own shards */
    const shoal_cluster_settings_t *cs = shoal_cluster_settings(co->r->sh->c);
    int64_t margin = co->r->s.down_removal_margin_ms
                         ? co->r->s.down_removal_margin_ms
                         : (cs && cs->sbr_strategy != SHOAL_SBR_OFF ? cs->stable_after_ms : 0);
    creg_t *dead = NULL;
    for (creg_t *c = zhashx_first(co->regions); c; c = zhashx_next(co->regions)) {
        const shoal_member_t *m = sharding_member(co->r->sh, c->node);
        /* a member not in the view yet (a joiner whose news has not reached us) is not gone:
           only Down, or removed for good */
        bool gone = sharding_removed(co->r->sh, c->node) ||
                    (m && m->status == SHOAL_MEMBER_DOWN);
        if (!gone) {
            c->gone_since = 0;
            continue;
        }
        if (!c->gone_since)
            c->gone_since = now;
        /* removed (also after being Down first): no acknowledgement will come from it */
        if (sharding_removed(co->r->sh, c->node))
            forget_acks_of(co, c->node);
        /* a region that left gracefully (Removed after Exiting) handed its shards off */
        if (now - c->gone_since >= margin && !dead)
            dead = c;
    }
    if (dead)
        region_terminated(co, dead);
    /* shards whose host never said ShardStarted */
    if (co->unstarted) {
        for (alloc_t *a = zhashx_first(co->allocs); a; a = zhashx_next(co->allocs))
            if (a->node && !a->writing && !a->started &&
                now - a->host_sent_at >= (int64_t)co->r->s.shard_start_timeout_ms) {
                a->host_sent_at = now;
                send_one(co, a->node, SHOAL__SHARDING__CONTROL__KIND__HOST_SHARD,
                         zhashx_cursor(co->allocs), a->node, a->epoch, NULL, 0);
            }
    }
    /* handoffs */
    zlistx_t *next = NULL;
    for (rb_t *rb = zhashx_first(co->rebalancing); rb; rb = zhashx_next(co->rebalancing)) {
        if (rb->phase == RB_BEGIN && (rb->n_waiting == 0 || now >= rb->deadline)) {
            if (rb->n_waiting)
                shoal_warning("%s: sharding %s: shard %s: %zu regions did not acknowledge "
                             "BeginHandOff; handing off without them",
                             shoal_node_id(co->r->self), co->r->name, rb->shard, rb->n_waiting);
            rb->n_waiting = 0;
            rb_handoff(co, rb);
        } else if (rb->phase == RB_HANDOFF && now >= rb->deadline) {
            /* the owner answers within its own timeouts; ask again in case the message was
               lost (a dead owner ends it through region_terminated) */
            rb_handoff(co, rb);
        }
    }
    zlistx_destroy(&next);
    try_waiting(co);
    if (co->recovered && (now >= co->next_rebalance ||
                          (co->rebalance_soon && zhashx_size(co->rebalancing) == 0)))
        rebalance(co, now, NULL);
}

void coordinator_cluster_changed(coordinator_t *co)
{
    /* a member came Up (or a blocker of rebalancing went away): look again soon */
    co->rebalance_soon = true;
}

void coordinator_stats(coordinator_t *co, shoal_region_stats_t *out)
{
    out->allocations = co->stats.allocations;
    out->rebalance_rounds = co->stats.rebalance_rounds;
    out->shards_moved = co->stats.shards_moved;
    out->state_writes = co->stats.state_writes;
    out->state_write_retries = co->stats.state_write_retries;
    out->state_reads = co->stats.state_reads;
    out->fences_passed = co->stats.fences_passed;
}
