/*  http.c — sharding's part of the management endpoint (see ddata.h, METRICS AND THE MANAGEMENT
    ENDPOINT) and the placement calls (sharding.h, PLACEMENT).

    GET /cluster/shards and /cluster/shards/<type> show, per entity type, each shard's home (the
    coordinator's state as this node's replica holds it: the same answer the placement calls
    give), the entities each hosting region reports for it, and the node running the coordinator.
    The entity counts come from the cluster-wide stats query, which waits for the other regions
    (with its own deadline), so those routes run on the connection's thread and read the node
    only through thread-safe calls. The "sharding" readiness check and the metric families run on
    the node thread. shoal_sharding_new provides them to the node; shoal_sharding_destroy withdraws
    them.
*/
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sharding_internal.h"

/* How long /cluster/shards waits for the other regions' counts: a region that has not answered
   by then is listed as not answering, so a dead node costs the request this much, not a hang. */
#define STATS_TIMEOUT_MS 3000

/* ---------------------------------------------------------------------------------------------
 * Placement (node thread)
 */
/* The coordinator's allocation of `shard` in this node's replica of "coord-<type>", else what
   the region learned from the coordinator; NULL when unallocated or unknown here. */
static const shoal_node_t *home_on_node(shoal_region_t *r, const char *shard)
{
    char key[SHOAL_SHARD_ID_MAX + 64];
    snprintf(key, sizeof key, "coord-%s", r->name);
    const shoal_crdt_t *state = r->rep ? shoal_replicator_peek(r->rep, key) : NULL;
    if (state) {
        char k[SHOAL_SHARD_ID_MAX + 3];
        int kl = snprintf(k, sizeof k, "s/%s", shard);
        size_t vlen = 0;
        const char *v = shoal_lwwmap_get(state, k, (size_t)kl, &vlen);
        if (v)
            return vlen ? shoal_node_intern_n(v, vlen) : NULL; /* "" = deallocated */
    }
    home_t *h = zhashx_lookup(r->homes, shard);
    return h ? h->node : NULL;
}

static const shoal_node_t *coordinator_on_node(shoal_region_t *r)
{
    const shoal_node_t *n = r->singleton ? shoal_singleton_host(r->singleton) : NULL;
    return n ? n : r->coord_node;
}

typedef struct {
    shoal_region_t *r;
    const char *shard;
    const shoal_node_t *out;
} place_t;

static int place_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    place_t *p = arg;
    p->out = p->shard ? home_on_node(p->r, p->shard) : coordinator_on_node(p->r);
    return 0;
}

static const shoal_node_t *place(shoal_region_t *r, const char *shard)
{
    place_t p = {r, shard, NULL};
    if (shoal_system_on_thread(r->sys))
        place_on_node(r->sys, &p);
    else if (shoal_system_call(r->sys, place_on_node, &p) < 0)
        return NULL;
    return p.out;
}

const shoal_node_t *shoal_region_shard_home(shoal_region_t *r, const char *shard)
{
    if (!r || !shard || strlen(shard) > SHOAL_SHARD_ID_MAX)
        return NULL;
    return place(r, shard);
}

const shoal_node_t *shoal_region_entity_home(shoal_region_t *r, const char *entity_id)
{
    if (!r || !entity_id || strlen(entity_id) > SHOAL_ENTITY_ID_MAX)
        return NULL;
    char shard[SHOAL_SHARD_ID_MAX + 1];
    shoal_region_shard_of(r, entity_id, shard);
    return place(r, shard);
}

const shoal_node_t *shoal_region_coordinator(shoal_region_t *r)
{
    return r ? place(r, NULL) : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The shard map of a type
 */
typedef struct {
    char *id;
    const shoal_node_t *home;
    long entities; /* -1: its home did not report it */
    char *pinned;  /* the address an operator pinned it to (NULL: none) */
} shard_row_t;

typedef struct {
    shoal_region_t *r;
    const shoal_node_t *coordinator;
    bool registered; /* this node's region, with the coordinator */
    shard_row_t *rows;
    size_t n, cap;
} map_t;

static void map_add(map_t *m, const char *id, size_t len, const shoal_node_t *home)
{
    for (size_t i = 0; i < m->n; i++)
        if (strlen(m->rows[i].id) == len && memcmp(m->rows[i].id, id, len) == 0) {
            if (!m->rows[i].home) /* a row a pin made */
                m->rows[i].home = home;
            return;
        }
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 16;
        m->rows = realloc(m->rows, m->cap * sizeof *m->rows);
        if (!m->rows)
            abort();
    }
    char *copy = malloc(len + 1); /* id may be a map key: not NUL-terminated */
    if (!copy)
        abort();
    memcpy(copy, id, len);
    copy[len] = 0;
    m->rows[m->n++] = (shard_row_t){copy, home, -1, NULL};
}

/* A pin ("p/<shard>" -> address) of the coordinator's state: the row, made if need be. */
static void map_pin(map_t *m, const char *id, size_t len, const char *address, size_t alen)
{
    map_add(m, id, len, NULL);
    for (size_t i = 0; i < m->n; i++)
        if (strlen(m->rows[i].id) == len && memcmp(m->rows[i].id, id, len) == 0) {
            free(m->rows[i].pinned);
            m->rows[i].pinned = malloc(alen + 1);
            if (!m->rows[i].pinned)
                abort();
            memcpy(m->rows[i].pinned, address, alen);
            m->rows[i].pinned[alen] = 0;
        }
}

static int alloc_entry(const void *key, size_t klen, const shoal_crdt_t *value, void *arg)
{
    map_t *m = arg;
    size_t vlen = 0;
    const char *v = shoal_lwwreg_value(value, &vlen);
    if (klen > 2 && klen - 2 <= SHOAL_SHARD_ID_MAX && memcmp(key, "s/", 2) == 0 && v && vlen)
        map_add(m, (const char *)key + 2, klen - 2, shoal_node_intern_n(v, vlen));
    else if (klen > 2 && klen - 2 <= SHOAL_SHARD_ID_MAX && memcmp(key, "p/", 2) == 0 && v && vlen)
        map_pin(m, (const char *)key + 2, klen - 2, v, vlen);
    return 0;
}

static int map_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    map_t *m = arg;
    shoal_region_t *r = m->r;
    m->coordinator = coordinator_on_node(r);
    m->registered = r->registered;
    char key[SHOAL_SHARD_ID_MAX + 64];
    snprintf(key, sizeof key, "coord-%s", r->name);
    const shoal_crdt_t *state = r->rep ? shoal_replicator_peek(r->rep, key) : NULL;
    if (state)
        shoal_ormap_foreach(state, alloc_entry, m);
    /* what the region knows that this replica does not have yet */
    for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes))
        if (h->node)
            map_add(m, h->id, strlen(h->id), h->node);
    return 0;
}

/* Shard ids in numeric order when both are numbers (the default ids), else byte order. */
static int by_shard(const void *a, const void *b)
{
    const char *x = ((const shard_row_t *)a)->id, *y = ((const shard_row_t *)b)->id;
    bool nx = x[strspn(x, "0123456789")] == 0, ny = y[strspn(y, "0123456789")] == 0;
    if (nx && ny && strlen(x) != strlen(y))
        return strlen(x) < strlen(y) ? -1 : 1;
    return strcmp(x, y);
}

static void node_json(shoal_buf_t *out, const shoal_node_t *n)
{
    if (n)
        shoal_buf_json_string(out, shoal_node_id(n));
    else
        shoal_buf_printf(out, "null");
}

/* Appends the type's map as JSON (other threads than the node's); 0, or the error of the node
   call (the node is stopping). */
int sharding_type_json(shoal_region_t *r, shoal_buf_t *out)
{
    map_t m = {.r = r};
    int rc = shoal_system_call(r->sys, map_on_node, &m);
    if (rc < 0)
        return rc;
    shoal_sharding_stats_t st = {0};
    int src = shoal_region_cluster_stats(r, STATS_TIMEOUT_MS, &st);
    for (size_t i = 0; src == 0 && i < st.n_regions; i++)
        for (size_t k = 0; k < st.regions[i].n_shards; k++) {
            const shoal_shard_state_t *s = &st.regions[i].shards[k];
            map_add(&m, s->id, strlen(s->id), st.regions[i].region);
            for (size_t j = 0; j < m.n; j++)
                if (strcmp(m.rows[j].id, s->id) == 0 && m.rows[j].home == st.regions[i].region)
                    m.rows[j].entities = (long)s->n_entities;
        }
    if (m.n)
        qsort(m.rows, m.n, sizeof *m.rows, by_shard);

    shoal_buf_printf(out, "{\"type\":");
    shoal_buf_json_string(out, r->name);
    shoal_buf_printf(out, ",\"proxy\":%s,\"registered\":%s,\"coordinator\":",
                     r->proxy ? "true" : "false", m.registered ? "true" : "false");
    node_json(out, m.coordinator);
    /* the shard ids the type can have (shoal-cluster check reports pins to others): 0 to
       number_of_shards - 1 with the default ids; a custom shard_id function's are unknown */
    shoal_buf_printf(out, ",\"number_of_shards\":%u,\"shard_ids\":\"%s\"", r->s.number_of_shards,
                     r->s.shard_id ? "custom" : "default");
    shoal_buf_printf(out, ",\"shards\":[");
    for (size_t i = 0; i < m.n; i++) {
        shoal_buf_printf(out, "%s{\"id\":", i ? "," : "");
        shoal_buf_json_string(out, m.rows[i].id);
        shoal_buf_printf(out, ",\"home\":");
        node_json(out, m.rows[i].home);
        if (m.rows[i].pinned) {
            shoal_buf_printf(out, ",\"pinned\":");
            shoal_buf_json_string(out, m.rows[i].pinned);
        }
        if (m.rows[i].entities >= 0)
            shoal_buf_printf(out, ",\"entities\":%ld}", m.rows[i].entities);
        else
            shoal_buf_printf(out, ",\"entities\":null}");
    }
    shoal_buf_printf(out, "],\"regions\":[");
    for (size_t i = 0; src == 0 && i < st.n_regions; i++) {
        const shoal_region_state_t *g = &st.regions[i];
        size_t entities = 0;
        for (size_t k = 0; k < g->n_shards; k++)
            entities += g->shards[k].n_entities;
        shoal_buf_printf(out, "%s{\"node\":", i ? "," : "");
        node_json(out, g->region);
        shoal_buf_printf(out, ",\"answered\":%s,\"shards\":%zu,\"entities\":%zu,\"hosted\":[",
                         g->failed ? "false" : "true", g->n_shards, entities);
        for (size_t k = 0; k < g->n_shards; k++) {
            if (k)
                shoal_buf_append(out, ",", 1);
            shoal_buf_json_string(out, g->shards[k].id);
        }
        shoal_buf_printf(out, "]}");
    }
    shoal_buf_printf(out, "]");
    if (src < 0) /* the map stands; only the counts are missing */
        shoal_buf_printf(out, ",\"stats_error\":\"%s\"", shoal_strerror(src));
    shoal_buf_printf(out, "}");
    shoal_sharding_stats_free(&st);
    for (size_t i = 0; i < m.n; i++) {
        free(m.rows[i].id);
        free(m.rows[i].pinned);
    }
    free(m.rows);
    return 0;
}

/* The map of one type ("" or NULL: every type, {"types":[...]}) as JSON. 0, SHOAL_ENOTYPE, or
   the error of a node call. */
int sharding_shards_json(shoal_sharding_t *sh, const char *type, shoal_buf_t *out)
{
    if (type && *type) {
        shoal_region_t *r = shoal_region_find(sh, type);
        if (!r)
            return SHOAL_ENOTYPE;
        return sharding_type_json(r, out);
    }
    const char **names = NULL;
    size_t n = shoal_sharding_type_names(sh, &names);
    shoal_buf_printf(out, "{\"types\":[");
    size_t start = out->len;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        shoal_region_t *r = shoal_region_find(sh, names[i]);
        if (!r)
            continue; /* stopped meanwhile */
        if (out->len > start)
            shoal_buf_append(out, ",", 1);
        rc = sharding_type_json(r, out);
    }
    shoal_buf_printf(out, "]}");
    free(names);
    return rc;
}

static void route_shards(shoal_system_t *sys, const shoal_http_request_t *req,
                         shoal_http_reply_t *rep, void *arg)
{
    (void)sys;
    shoal_sharding_t *sh = arg;
    /* /cluster/shards/<type>, or every type */
    int rc = sharding_shards_json(sh, req->rest, &rep->body);
    if (rc == SHOAL_ENOTYPE)
        shoal_http_error(rep, 404, "no entity type %.200s on this node", req->rest);
    else if (rc < 0)
        shoal_http_error(rep, 503, "node unavailable: %s", shoal_strerror(rc));
    else
        shoal_buf_append(&rep->body, "\n", 1);
}

/* Ready: every entity type on this node has registered with its coordinator (so its messages
   are routed, not buffered). */
static bool ready(shoal_system_t *sys, shoal_buf_t *reason, void *arg)
{
    (void)sys;
    shoal_sharding_t *sh = arg;
    for (size_t i = 0; i < sh->n_regions; i++) {
        shoal_region_t *r = sh->regions[i];
        if (r->stopped || r->registered)
            continue;
        const shoal_node_t *co = coordinator_on_node(r);
        shoal_buf_printf(reason, "entity type %s not registered with its coordinator (%s%s)",
                         r->name, co ? "at " : "none known yet", co ? shoal_node_id(co) : "");
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Metrics (node thread)
 */
static void collect(shoal_system_t *sys, shoal_buf_t *out, void *arg)
{
    (void)sys;
    shoal_sharding_t *sh = arg;
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } fams[] = {
#define F(field, type, help)                                                                       \
    {"shoal_sharding_" #field, type, help, offsetof(shoal_region_stats_t, field)}
        F(tells, "counter", "Tells accepted by the region"),
        F(asks, "counter", "Asks accepted by the region"),
        F(delivered_local, "counter", "Messages delivered to entities hosted here"),
        F(forwarded, "counter", "Messages sent on to another region"),
        F(received_remote, "counter", "Messages received from other regions"),
        F(asks_timed_out, "counter", "Asks that timed out"),
        F(home_requests, "counter", "Shard home requests sent to the coordinator"),
        F(shards_started, "counter", "Shards started here"),
        F(shards_stopped, "counter", "Shards stopped here"),
        F(handoffs, "counter", "Shards handed off from here"),
        F(allocations, "counter", "Shard allocations by the coordinator here"),
        F(shards_moved, "counter", "Shards moved by the coordinator here"),
        F(fences_passed, "counter",
          "Shards allocated again past an entity-state fence older than the coordinator's state"),
        {"shoal_sharding_entity_saves", "counter",
         "Entity-state saves acknowledged (their write-consistency reached)",
         offsetof(shoal_region_stats_t, state_saves)},
        {"shoal_sharding_entity_save_failures", "counter",
         "Entity-state saves that failed (write timed out, refused by a newer owner's fence, "
         "store error): the entity's caller saw an error and the entity restarts",
         offsetof(shoal_region_stats_t, state_save_failures)},
        F(buffered, "gauge", "Messages buffered now"),
        F(shards, "gauge", "Shards hosted here now"),
        F(entities, "gauge", "Entities running here now"),
#undef F
    };
    shoal_region_stats_t *st = calloc(sh->n_regions ? sh->n_regions : 1, sizeof *st);
    if (!st)
        abort();
    for (size_t i = 0; i < sh->n_regions; i++)
        shoal_region_stats(sh->regions[i], &st[i]);
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        shoal_buf_t name = {0};
        shoal_buf_printf(&name, "%s%s", fams[f].name,
                         strcmp(fams[f].type, "counter") == 0 ? "_total" : "");
        shoal_metrics_family(out, shoal_buf_cstr(&name), fams[f].type, fams[f].help);
        for (size_t i = 0; i < sh->n_regions; i++) {
            uint64_t v;
            memcpy(&v, (const char *)&st[i] + fams[f].off, sizeof v);
            shoal_buf_printf(out, "%s{type=\"", shoal_buf_cstr(&name));
            shoal_metrics_label_value(out, sh->regions[i]->name);
            shoal_buf_printf(out, "\"} %llu\n", (unsigned long long)v);
        }
        shoal_buf_free(&name);
    }
    /* what this region's messages wait for (its shard homes, region.c's home_t) */
    shoal_metrics_family(out, "shoal_sharding_shards_without_home", "gauge",
                         "Shards whose messages this region holds because no home is known and "
                         "no handoff is in progress: it is asking the coordinator (or has none "
                         "yet) and the coordinator has not allocated them");
    int64_t now = shoal_now_ms();
    size_t *handoff_ms = calloc(sh->n_regions ? sh->n_regions : 1, sizeof *handoff_ms);
    if (!handoff_ms)
        abort();
    for (size_t i = 0; i < sh->n_regions; i++) {
        shoal_region_t *r = sh->regions[i];
        size_t homeless = 0;
        for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes)) {
            if (h->handing_off && now > h->handoff_since &&
                (size_t)(now - h->handoff_since) > handoff_ms[i])
                handoff_ms[i] = (size_t)(now - h->handoff_since);
            else if (!h->handing_off && !h->node && h->buffer.head)
                homeless++;
        }
        shoal_buf_printf(out, "shoal_sharding_shards_without_home{type=\"");
        shoal_metrics_label_value(out, r->name);
        shoal_buf_printf(out, "\"} %zu\n", homeless);
    }
    shoal_metrics_family(out, "shoal_sharding_handoff_oldest_seconds", "gauge",
                         "Age of the oldest handoff in progress as this region sees it (from "
                         "BeginHandOff to the shard's next home; 0: none). The coordinator gives "
                         "a handoff handoff-timeout; the region stops waiting after twice that");
    for (size_t i = 0; i < sh->n_regions; i++) {
        shoal_buf_printf(out, "shoal_sharding_handoff_oldest_seconds{type=\"");
        shoal_metrics_label_value(out, sh->regions[i]->name);
        shoal_buf_printf(out, "\"} %.3f\n", (double)handoff_ms[i] / 1000.0);
    }
    free(handoff_ms);
    shoal_metrics_family(out, "shoal_sharding_dead_letters_total", "counter",
                         "Messages that could not be delivered, by reason");
    for (size_t i = 0; i < sh->n_regions; i++)
        for (int d = 1; d < SHOAL_DL_REASONS; d++) {
            shoal_buf_printf(out, "shoal_sharding_dead_letters_total{type=\"");
            shoal_metrics_label_value(out, sh->regions[i]->name);
            shoal_buf_printf(out, "\",reason=\"%s\"} %llu\n",
                             shoal_dead_letter_name((shoal_dead_letter_t)d),
                             (unsigned long long)st[i].dead_letters[d]);
        }
    /* latency histograms (issue 40; ddata/histogram.h), a label set per entity type */
    static const struct {
        const char *name, *help;
        size_t off;
    } lat[] = {
        {"shoal_sharding_ask_seconds",
         "Asks of this node from acceptance on the node thread to their reply, timeouts included",
         offsetof(region_latency_t, ask)},
        {"shoal_sharding_entity_save_seconds",
         "Entity-state saves from issue to acknowledgement (the write-consistency of the entity "
         "state), failures included",
         offsetof(region_latency_t, save)},
        {"shoal_sharding_handoff_seconds",
         "Handoffs as this region saw them: from BeginHandOff to the shard's next home (the "
         "time its messages for the shard were held)",
         offsetof(region_latency_t, handoff)},
    };
    shoal_buf_t labels = {0};
    for (size_t f = 0; f < sizeof lat / sizeof lat[0]; f++) {
        shoal_metrics_family(out, lat[f].name, "histogram", lat[f].help);
        for (size_t i = 0; i < sh->n_regions; i++) {
            shoal_buf_reset(&labels);
            shoal_buf_printf(&labels, "type=\"");
            shoal_metrics_label_value(&labels, sh->regions[i]->name);
            shoal_buf_printf(&labels, "\"");
            shoal_hist_prometheus(
                out, lat[f].name, shoal_buf_cstr(&labels),
                (const shoal_hist_t *)((const char *)sh->regions[i]->lat + lat[f].off));
        }
    }
    shoal_buf_free(&labels);
    free(st);
    /* LIMITS (sharding.h): node-wide */
    shoal_metrics_family(out, "shoal_sharding_entities_refused_total", "counter",
                         "Entity starts refused: the node ran max-entities-per-node entities");
    shoal_buf_printf(out, "shoal_sharding_entities_refused_total %llu\n",
                     (unsigned long long)sh->entities_refused);
    shoal_metrics_family(out, "shoal_sharding_node_entities", "gauge",
                         "Entities of every type running on this node now");
    shoal_buf_printf(out, "shoal_sharding_node_entities %llu\n",
                     (unsigned long long)sh->n_entities);
    shoal_metrics_family(out, "shoal_sharding_max_entities", "gauge",
                         "The node's max-entities-per-node (0: no cap)");
    shoal_buf_printf(out, "shoal_sharding_max_entities %llu\n",
                     (unsigned long long)atomic_load(&sh->max_entities));
}

int shoal_sharding_metrics(shoal_sharding_t *sh, shoal_metrics_t *m)
{
    if (!sh || !m)
        return SHOAL_EINVAL;
    return shoal_metrics_add(m, collect, sh);
}

static void provide(shoal_metrics_t *m, void *arg)
{
    shoal_sharding_metrics(arg, m);
    shoal_http_route(m, "/cluster/shards", SHOAL_HTTP_GET | SHOAL_HTTP_ANY_THREAD, route_shards,
                     arg);
    shoal_http_route(m, "/cluster/shards/", SHOAL_HTTP_GET | SHOAL_HTTP_ANY_THREAD, route_shards,
                     arg);
    shoal_http_ready_check(m, "sharding", ready, arg);
}

int sharding_http_provide(shoal_sharding_t *sh)
{
    return shoal_http_provide(sh->sys, provide, sh);
}

void sharding_http_withdraw(shoal_sharding_t *sh)
{
    shoal_http_withdraw(sh->sys, sh);
}
