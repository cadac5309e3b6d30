/*  query.c — what a region can be asked about itself and the cluster: its shards and entities,
    the regions the coordinator knows, every region's shards (cluster-wide stats), external
    allocation writes, and an operator's actions through the coordinator (rebalance, move, unpin:
    ADMIN_REQ, answered by ADMIN_REPLY).

    Cluster-wide queries are asynchronous on the node thread (REGIONS_REQ to the coordinator, then
    STATS_REQ to every region) and complete by their deadline at the latest, so the thread that
    waits for them always wakes.
*/
#include <errno.h>
#include <string.h>
#include <time.h>

#include "sharding_internal.h"

typedef struct {
    uint64_t id;
    int kind; /* 1 current regions, 2 cluster stats, 3 an operator's action */
    bool with_entities;
    int64_t deadline;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, abandoned;
    int status;
    bool have_regions;
    const shoal_node_t **regions;
    size_t n_regions;
    shoal_region_state_t *states; /* per region (kind 2) */
    bool *answered;
    /* kind 3: the action (coordinator.c's ADMIN_*), its shard and member, the answer's text */
    uint32_t admin_op;
    const char *shard, *target; /* the caller's, valid while it waits */
    char *text;
} query_t;

static void query_free(query_t *q)
{
    if (!q)
        return;
    free(q->regions);
    free(q->answered);
    free(q->text);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

/* Node thread: the query is finished; its waiter takes it from here. */
static void query_complete(shoal_region_t *r, query_t *q, int status)
{
    void *handle = zlistx_find(r->queries, q);
    if (handle)
        zlistx_detach(r->queries, handle);
    pthread_mutex_lock(&q->mu);
    q->status = status;
    q->done = true;
    bool abandoned = q->abandoned;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (abandoned) {
        if (q->states) {
            shoal_sharding_stats_t s = {q->n_regions, q->states};
            shoal_sharding_stats_free(&s);
        }
        query_free(q);
    }
}

void region_fill_state(shoal_region_t *r, bool with_entities, shoal_region_state_t *out)
{
    memset(out, 0, sizeof *out);
    out->region = r->self;
    size_t n = zhashx_size(r->shards);
    out->shards = calloc(n + 1, sizeof *out->shards);
    if (!out->shards)
        abort();
    for (shard_t *s = zhashx_first(r->shards); s && out->n_shards < n; s = zhashx_next(r->shards)) {
        shoal_shard_state_t *st = &out->shards[out->n_shards++];
        st->id = strdup(s->id);
        st->n_entities = shard_n_entities(s);
        if (with_entities) {
            st->entities = calloc(st->n_entities + 1, sizeof *st->entities);
            if (!st->entities)
                abort();
            size_t k = 0;
            shoal_entity_t *e;
            for (size_t pos = 0; k < st->n_entities && (e = shard_entity_next(s, &pos));)
                st->entities[k++] = strdup(e->id);
        }
    }
}

static void state_clear(shoal_region_state_t *s)
{
    for (size_t i = 0; i < s->n_shards; i++) {
        for (size_t k = 0; s->shards[i].entities && k < s->shards[i].n_entities; k++)
            free(s->shards[i].entities[k]);
        free(s->shards[i].entities);
        free(s->shards[i].id);
    }
    free(s->shards);
    s->shards = NULL;
    s->n_shards = 0;
}

void shoal_region_state_free(shoal_region_state_t *s)
{
    if (s)
        state_clear(s);
}

void shoal_sharding_stats_free(shoal_sharding_stats_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_regions; i++)
        state_clear(&s->regions[i]);
    free(s->regions);
    s->regions = NULL;
    s->n_regions = 0;
}

static query_t *query_find(shoal_region_t *r, uint64_t id)
{
    for (query_t *q = zlistx_first(r->queries); q; q = zlistx_next(r->queries))
        if (q->id == id)
            return q;
    return NULL;
}

static void maybe_done_stats(shoal_region_t *r, query_t *q)
{
    for (size_t i = 0; i < q->n_regions; i++)
        if (!q->answered[i])
            return;
    query_complete(r, q, 0);
}

static void send_stats_reply(shoal_region_t *r, const shoal_node_t *to, uint64_t req_id,
                             bool with_entities)
{
    shoal_region_state_t st;
    region_fill_state(r, with_entities, &st);
    Shoal__Sharding__Control m = SHOAL__SHARDING__CONTROL__INIT;
    m.kind = SHOAL__SHARDING__CONTROL__KIND__STATS_REPLY;
    m.type_name = r->name;
    m.req_id = req_id;
    Shoal__Sharding__ShardStats *ss = calloc(st.n_shards + 1, sizeof *ss);
    Shoal__Sharding__ShardStats **sp = calloc(st.n_shards + 1, sizeof *sp);
    if (!ss || !sp)
        abort();
    /* entity lists are cut to keep the reply under the frame limit; counts are always exact */
    size_t budget = shoal_system_max_message_bytes(r->sys) / 2, bytes = 0;
    for (size_t i = 0; i < st.n_shards; i++) {
        shoal__sharding__shard_stats__init(&ss[i]);
        ss[i].shard = st.shards[i].id;
        ss[i].entity_count = (uint32_t)st.shards[i].n_entities;
        bytes += strlen(st.shards[i].id) + 8;
        if (with_entities && bytes < budget) {
            size_t k = 0;
            while (k < st.shards[i].n_entities && bytes < budget)
                bytes += strlen(st.shards[i].entities[k++]) + 2;
            ss[i].entities = st.shards[i].entities;
            ss[i].n_entities = k;
        }
        sp[i] = &ss[i];
    }
    m.shards = sp;
    m.n_shards = st.n_shards;
    region_send_control(r, to, &m);
    free(ss);
    free(sp);
    state_clear(&st);
}

void region_query_control(shoal_region_t *r, const shoal_node_t *from,
                          const Shoal__Sharding__Control *m)
{
    switch (m->kind) {
    case SHOAL__SHARDING__CONTROL__KIND__STATS_REQ:
        send_stats_reply(r, from, m->req_id, m->with_entities);
        break;
    case SHOAL__SHARDING__CONTROL__KIND__REGIONS_REPLY: {
        query_t *q = query_find(r, m->req_id);
        if (!q || q->have_regions)
            break;
        q->have_regions = true;
        q->regions = calloc(m->n_regions + 1, sizeof *q->regions);
        q->answered = calloc(m->n_regions + 1, sizeof *q->answered);
        if (!q->regions || !q->answered)
            abort();
        for (size_t i = 0; i < m->n_regions; i++)
            q->regions[q->n_regions++] = shoal_node_intern(m->regions[i]);
        if (q->kind == 1) {
            query_complete(r, q, 0);
            break;
        }
        q->states = calloc(q->n_regions + 1, sizeof *q->states);
        if (!q->states)
            abort();
        for (size_t i = 0; i < q->n_regions; i++) {
            q->states[i].region = q->regions[i];
            q->states[i].failed = true;
            if (q->regions[i] == r->self) {
                region_fill_state(r, q->with_entities, &q->states[i]);
                q->answered[i] = true;
            } else {
                Shoal__Sharding__Control req = SHOAL__SHARDING__CONTROL__INIT;
                req.kind = SHOAL__SHARDING__CONTROL__KIND__STATS_REQ;
                req.type_name = r->name;
                req.req_id = q->id;
                req.with_entities = q->with_entities;
                region_send_control(r, q->regions[i], &req);
            }
        }
        maybe_done_stats(r, q);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__ADMIN_REPLY: {
        query_t *q = query_find(r, m->req_id);
        if (!q || q->kind != 3 || from != r->coord_node)
            break;
        q->text = strdup(m->text ? m->text : "");
        if (!q->text)
            abort();
        query_complete(r, q, m->error);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__STATS_REPLY: {
        query_t *q = query_find(r, m->req_id);
        if (!q || q->kind != 2 || !q->states)
            break;
        for (size_t i = 0; i < q->n_regions; i++) {
            if (q->regions[i] != from || q->answered[i])
                continue;
            shoal_region_state_t *st = &q->states[i];
            st->failed = false;
            st->shards = calloc(m->n_shards + 1, sizeof *st->shards);
            if (!st->shards)
                abort();
            for (size_t k = 0; k < m->n_shards; k++) {
                shoal_shard_state_t *ss = &st->shards[st->n_shards++];
                ss->id = strdup(m->shards[k]->shard);
                ss->n_entities = m->shards[k]->entity_count;
                if (q->with_entities) {
                    ss->entities = calloc(m->shards[k]->n_entities + 1, sizeof *ss->entities);
                    if (!ss->entities)
                        abort();
                    for (size_t e = 0; e < m->shards[k]->n_entities; e++)
                        ss->entities[e] = strdup(m->shards[k]->entities[e]);
                    ss->n_entities = m->shards[k]->n_entities;
                }
            }
            q->answered[i] = true;
        }
        maybe_done_stats(r, q);
        break;
    }
    default:
        break;
    }
}

void region_queries_tick(shoal_region_t *r, int64_t now)
{
    if (!r->queries)
        return;
    query_t *q = zlistx_first(r->queries);
    while (q) {
        query_t *next = zlistx_next(r->queries);
        if (now >= q->deadline) {
            /* regions that did not answer stay listed as failed */
            query_complete(r, q, q->have_regions ? 0 : SHOAL_ETIMEOUT);
            q = next ? zlistx_first(r->queries) : NULL;
            continue;
        }
        q = next;
    }
}

void region_queries_free(shoal_region_t *r)
{
    if (!r->queries)
        return;
    query_t *q;
    while ((q = zlistx_first(r->queries)))
        query_complete(r, q, SHOAL_ESTOPPED);
    zlistx_destroy(&r->queries);
}

typedef struct {
    shoal_region_t *r;
    query_t *q;
} start_ctx_t;

static int start_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    start_ctx_t *x = arg;
    shoal_region_t *r = x->r;
    query_t *q = x->q;
    if (r->stopped)
        return SHOAL_ESTOPPED;
    if (q->kind == 3 && !r->coord_node)
        return SHOAL_ESTATE; /* an action is not worth keeping for a coordinator not known yet */
    if (!r->queries)
        r->queries = zlistx_new();
    q->id = ++r->next_req_id;
    zlistx_add_end(r->queries, q);
    if (!r->coord_node)
        return 0; /* no coordinator known: completes at its deadline */
    Shoal__Sharding__Control m = SHOAL__SHARDING__CONTROL__INIT;
    if (q->kind == 3) {
        m.kind = SHOAL__SHARDING__CONTROL__KIND__ADMIN_REQ;
        m.type_name = r->name;
        m.req_id = q->id;
        m.admin_op = q->admin_op;
        m.shard = (char *)(q->shard ? q->shard : "");
        m.target = (char *)(q->target ? q->target : "");
        region_send_control(r, r->coord_node, &m);
        return 0;
    }
    m.kind = SHOAL__SHARDING__CONTROL__KIND__REGIONS_REQ;
    m.type_name = r->name;
    m.req_id = q->id;
    region_send_control(r, r->coord_node, &m);
    return 0;
}

/* Runs a query and waits for it (other threads only). */
static int run_query(shoal_region_t *r, query_t *q, uint32_t timeout_ms)
{
    if (shoal_system_on_thread(r->sys))
        return SHOAL_EDEADLK;
    q->deadline = shoal_now_ms() + (timeout_ms ? timeout_ms : r->s.shard_region_query_timeout_ms);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    start_ctx_t x = {r, q};
    int rc = shoal_system_call(r->sys, start_on_node, &x);
    if (rc < 0)
        return rc;
    uint64_t wait_ms = (timeout_ms ? timeout_ms : r->s.shard_region_query_timeout_ms) + 5000;
    struct timespec until = shoal_deadline_in(wait_ms);
    pthread_mutex_lock(&q->mu);
    int w = 0;
    while (!q->done && w != ETIMEDOUT)
        w = pthread_cond_timedwait(&q->cv, &q->mu, &until);
    bool done = q->done;
    if (!done)
        q->abandoned = true; /* the node thread frees it when (if) it completes */
    pthread_mutex_unlock(&q->mu);
    return done ? q->status : SHOAL_ETIMEOUT;
}

int shoal_region_current_regions(shoal_region_t *r, uint32_t timeout_ms,
                                 const shoal_node_t ***nodes, size_t *n)
{
    if (!r || !nodes || !n)
        return SHOAL_EINVAL;
    *nodes = NULL;
    *n = 0;
    query_t *q = calloc(1, sizeof *q);
    if (!q)
        abort();
    q->kind = 1;
    int rc = run_query(r, q, timeout_ms);
    if (rc == SHOAL_ETIMEOUT && !q->done)
        return rc;
    if (rc == 0) {
        *nodes = q->regions;
        *n = q->n_regions;
        q->regions = NULL;
    }
    query_free(q);
    return rc;
}

int shoal_region_cluster_stats(shoal_region_t *r, uint32_t timeout_ms, shoal_sharding_stats_t *out)
{
    if (!r || !out)
        return SHOAL_EINVAL;
    memset(out, 0, sizeof *out);
    query_t *q = calloc(1, sizeof *q);
    if (!q)
        abort();
    q->kind = 2;
    int rc = run_query(r, q, timeout_ms);
    if (rc == SHOAL_ETIMEOUT && !q->done)
        return rc;
    if (rc == 0) {
        out->regions = q->states;
        out->n_regions = q->n_regions;
        q->states = NULL;
    } else if (q->states) {
        shoal_sharding_stats_t s = {q->n_regions, q->states};
        shoal_sharding_stats_free(&s);
    }
    query_free(q);
    return rc;
}

/* An operator's action through the coordinator; its answer (or why none came) in msg. */
static int admin_action(shoal_region_t *r, uint32_t op, const char *shard, const char *member,
                        uint32_t timeout_ms, char *msg, size_t msglen)
{
    if (msg && msglen)
        *msg = 0;
    if (!r || (op != 1 && (!shard || !*shard || strlen(shard) > SHOAL_SHARD_ID_MAX)) ||
        (op == 2 && (!member || !*member || strlen(member) > SHOAL_NODE_ID_MAX)))
        return SHOAL_EINVAL;
    /* a pin only to a shard the type can have (the coordinator checks again, with its own
       settings); an unpin takes any id, so a pin left by an older build or a larger
       number-of-shards can be dropped */
    if (op == 2 && !sharding_shard_possible(&r->s, r->name, shard, msg, msglen))
        return SHOAL_EINVAL;
    query_t *q = calloc(1, sizeof *q);
    if (!q)
        abort();
    q->kind = 3;
    q->admin_op = op;
    q->shard = shard;
    q->target = member;
    int rc = run_query(r, q, timeout_ms);
    if (rc == SHOAL_ETIMEOUT && !q->done) { /* abandoned: the node thread frees it */
        if (msg && msglen)
            snprintf(msg, msglen, "the coordinator of %s did not answer in time", r->name);
        return rc;
    }
    if (msg && msglen) {
        if (q->text)
            snprintf(msg, msglen, "%s", q->text);
        else if (rc == SHOAL_ESTATE)
            snprintf(msg, msglen, "no coordinator of %s known to this node yet", r->name);
        else if (rc == SHOAL_ETIMEOUT)
            snprintf(msg, msglen, "the coordinator of %s did not answer in time", r->name);
        else if (rc < 0)
            snprintf(msg, msglen, "%s", shoal_strerror(rc));
    }
    query_free(q);
    return rc;
}

int shoal_region_rebalance(shoal_region_t *r, uint32_t timeout_ms, char *msg, size_t msglen)
{
    return admin_action(r, 1, NULL, NULL, timeout_ms, msg, msglen);
}

int shoal_region_move_shard(shoal_region_t *r, const char *shard, const char *member,
                            uint32_t timeout_ms, char *msg, size_t msglen)
{
    return admin_action(r, 2, shard, member, timeout_ms, msg, msglen);
}

int shoal_region_unpin_shard(shoal_region_t *r, const char *shard, uint32_t timeout_ms, char *msg,
                             size_t msglen)
{
    return admin_action(r, 3, shard, NULL, timeout_ms, msg, msglen);
}

/* ---------------------------------------------------------------------------------------------
 * External allocation
 */
typedef struct {
    const shoal_node_t *self;
    const char *shard;
    const char *address;
} ext_put_t;

static int ext_modify(shoal_crdt_t *value, void *arg)
{
    ext_put_t *x = arg;
    return shoal_lwwmap_put(value, x->self, x->shard, strlen(x->shard), x->address,
                            strlen(x->address), NULL, NULL);
}

int shoal_external_allocate(shoal_region_t *r, const char *shard, const char *address,
                            uint32_t timeout_ms)
{
    if (!r || !shard || !*shard || strlen(shard) > SHOAL_SHARD_ID_MAX || !address ||
        !strchr(address, ':') || strlen(address) > 300)
        return SHOAL_EINVAL;
    char key[256];
    snprintf(key, sizeof key, "external-shard-allocation-%s", r->name);
    shoal_consistency_t c = {SHOAL_MAJORITY, 0, timeout_ms ? timeout_ms : 5000, 0, 0, false};
    ext_put_t x = {r->self, shard, address};
    int rc = shoal_replicator_update_sync(r->rep, key, shoal_lwwmap_new(), &c, ext_modify, &x);
    return rc;
}
