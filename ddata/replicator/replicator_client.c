/*  replicator_client.c — the replicator's client/admin class of requests (proto/client.proto):
    get, update by a named operation, delete, and key listing, for tools, examples and tests that
    talk to a node without being cluster members; and the client-side calls that send them.

    An update names an operation of the key's type; the serving node applies it with its own node
    id as the writer, exactly as a program on that node would.

    WATCH (kvstore watch): a client subscribes to a key without being a peer. The first Watch opens
    a session on the serving node, subscribed to the key; the replicator's notifications queue in
    the session (bounded: past WATCH_QUEUE_MAX the oldest go and are counted as missed), and each
    Watch collects what queued since, or waits (a long poll, up to wait_ms) for the next one. A
    client's own writes through a node that has watches are notified at once (the replicator is
    flushed after each), so a put followed by a delete through that node are two events; changes
    that reach the node merged (both within one delta interval of another node) are one, as for
    any subscriber. A session nobody asked for in WATCH_IDLE_MS is dropped, and at most
    WATCH_MAX sessions live per replicator (the least recently asked goes first).
*/
#include "replicator_internal.h"
#include "client.pb-c.h"

#include <time.h>

enum {
    K_CLIENT_GET = 0x8001,
    K_CLIENT_UPDATE,
    K_CLIENT_DELETE,
    K_CLIENT_KEYS,
    K_CLIENT_STATS,
    K_CLIENT_WATCH
};

#define WATCH_QUEUE_MAX 1024
#define WATCH_IDLE_MS   60000
#define WATCH_MAX       64
#define WATCH_WAIT_MAX  30000 /* the longest poll: under any client's patience */

typedef struct {
    uint32_t change;
    shoal_buf_t value;
} watch_event_t;

struct client_watch {
    struct client_watch *next;
    shoal_replicator_t *r;
    uint64_t id;
    char *key;
    int sub;
    int64_t asked_at;
    watch_event_t *q; /* ring of WATCH_QUEUE_MAX */
    size_t head, n;
    uint64_t missed;
    bool waiting; /* a Watch is held until an event or its timer */
    shoal_reply_to_t to;
    int timer;
};

typedef struct {
    shoal_system_t *sys;
    shoal_reply_to_t to;
} pending_reply_t;

static void reply(shoal_system_t *sys, const shoal_reply_to_t *to, int status,
                  const shoal_crdt_t *value)
{
    Shoal__Client__Reply r = SHOAL__CLIENT__REPLY__INIT;
    r.status = status;
    shoal_buf_t v = {0}, out = {0};
    if (value && shoal_crdt_encode(value, &v) == 0) {
        r.value.data = v.data;
        r.value.len = v.len;
    }
    shoal_pb_pack(&r.base, &out);
    shoal_system_reply(sys, to, K_CLIENT_GET, out.data ? out.data : (uint8_t *)"", out.len);
    shoal_buf_free(&v);
    shoal_buf_free(&out);
}

static shoal_consistency_t consistency_from(const Shoal__Client__Consistency *c)
{
    shoal_consistency_t k = {0};
    if (!c)
        return k;
    k.level = c->level <= SHOAL_ALL ? (shoal_level_t)c->level : SHOAL_LOCAL;
    k.n = c->n;
    k.timeout_ms = c->timeout_ms;
    k.min_cap = c->min_cap;
    k.plus = c->plus;
    k.prefer_oldest = c->prefer_oldest;
    return k;
}

static void get_done(shoal_replicator_t *r, int status, const char *key, const shoal_crdt_t *value,
                     void *arg)
{
    (void)r;
    (void)key;
    pending_reply_t *p = arg;
    reply(p->sys, &p->to, status, value);
    free(p);
}

static void update_done(shoal_replicator_t *r, int status, const char *key, void *arg)
{
    (void)r;
    (void)key;
    pending_reply_t *p = arg;
    reply(p->sys, &p->to, status, NULL);
    free(p);
}

static pending_reply_t *pending(shoal_system_t *sys, const shoal_reply_to_t *to)
{
    pending_reply_t *p = shoal_malloc(sizeof *p);
    p->sys = sys;
    p->to = *to;
    return p;
}

/* The empty value of a type by name, for an update of a missing key. */
static shoal_crdt_t *empty_of(const char *type)
{
    const shoal_type_t *t = shoal_type_by_name(type);
    if (!t)
        return NULL;
    switch (shoal_type_tag(t)) {
    case SHOAL_LWWMAP:
        return shoal_lwwmap_new();
    case SHOAL_PNCOUNTERMAP:
        return shoal_pncountermap_new();
    case SHOAL_ORMULTIMAP:
        return shoal_ormultimap_new(true);
    default:
        return shoal_crdt_new(t);
    }
}

typedef struct {
    const Shoal__Client__Update *u;
    const shoal_node_t *self;
} op_ctx_t;

static int apply_op(shoal_crdt_t *v, void *arg)
{
    op_ctx_t *c = arg;
    const Shoal__Client__Update *u = c->u;
    const char *op = u->op ? u->op : "";
    const shoal_node_t *me = c->self;
    uint32_t tag = shoal_type_tag(shoal_crdt_type(v));
    if (strcmp(op, "merge") == 0) {
        shoal_crdt_t *in = NULL;
        int rc = shoal_crdt_decode(u->value.data, u->value.len, &in);
        if (rc == 0)
            rc = shoal_crdt_merge(v, in);
        shoal_crdt_destroy(&in);
        return rc;
    }
    switch (tag) {
    case SHOAL_GCOUNTER:
        if (strcmp(op, "increment") == 0 && u->n >= 0)
            return shoal_gcounter_increment(v, me, (uint64_t)u->n);
        break;
    case SHOAL_PNCOUNTER:
        if (strcmp(op, "add") == 0)
            return shoal_pncounter_add(v, me, u->n);
        break;
    case SHOAL_FLAG:
        if (strcmp(op, "switch-on") == 0)
            return shoal_flag_switch_on(v);
        break;
    case SHOAL_GSET:
        if (strcmp(op, "add") == 0)
            return shoal_gset_add(v, u->elem.data, u->elem.len);
        break;
    case SHOAL_ORSET:
        if (strcmp(op, "add") == 0)
            return shoal_orset_add(v, me, u->elem.data, u->elem.len);
        if (strcmp(op, "remove") == 0)
            return shoal_orset_remove(v, me, u->elem.data, u->elem.len);
        if (strcmp(op, "clear") == 0)
            return shoal_orset_clear(v, me);
        break;
    case SHOAL_LWWREGISTER:
        if (strcmp(op, "set") == 0)
            return shoal_lwwreg_set(v, me, u->value.data, u->value.len, NULL, NULL);
        break;
    case SHOAL_LWWMAP:
        if (strcmp(op, "put") == 0)
            return shoal_lwwmap_put(v, me, u->key2.data, u->key2.len, u->value.data,
                                    u->value.len, NULL, NULL);
        if (strcmp(op, "remove") == 0)
            return shoal_ormap_remove(v, me, u->key2.data, u->key2.len);
        break;
    case SHOAL_PNCOUNTERMAP:
        if (strcmp(op, "add") == 0)
            return shoal_pncountermap_add(v, me, u->key2.data, u->key2.len, u->n);
        if (strcmp(op, "remove") == 0)
            return shoal_ormap_remove(v, me, u->key2.data, u->key2.len);
        break;
    case SHOAL_ORMULTIMAP:
        if (strcmp(op, "add") == 0)
            return shoal_ormultimap_add(v, me, u->key2.data, u->key2.len, u->elem.data,
                                        u->elem.len);
        if (strcmp(op, "remove") == 0)
            return shoal_ormultimap_remove_binding(v, me, u->key2.data, u->key2.len, u->elem.data,
                                                   u->elem.len);
        if (strcmp(op, "remove-key") == 0)
            return shoal_ormap_remove(v, me, u->key2.data, u->key2.len);
        break;
    default:
        break;
    }
    return SHOAL_EINVAL; /* no such operation for this type */
}

int (*repl_exposition_hook)(shoal_system_t *sys, shoal_buf_t *out);

/* One "name value" line per counter, replicator first, then its node. */
static void stats_text(shoal_replicator_t *r, shoal_buf_t *out)
{
    shoal_replicator_stats_t s = r->stats;
#define LINE(f) shoal_buf_printf(out, "replicator_" #f " %llu\n", (unsigned long long)s.f)
    LINE(keys); LINE(tombstones); LINE(gets); LINE(updates); LINE(deletes); LINE(deltas_sent);
    LINE(deltas_received); LINE(delta_gaps); LINE(full_state_sent); LINE(full_state_received);
    LINE(gossip_rounds); LINE(status_sent); LINE(digests_compared); LINE(chunks_sent);
    LINE(chunks_received); LINE(write_timeouts); LINE(read_timeouts); LINE(store_failures);
    LINE(pruning_performed); LINE(tombstones_collected); LINE(dropped_malformed);
    LINE(dropped_wrong_type); LINE(dropped_collected_key); LINE(dropped_stale);
    LINE(store_retries); LINE(writes_refused); LINE(no_quorum); LINE(catch_ups);
    LINE(reads_deferred); LINE(reads_deferred_dropped);
#undef LINE
    shoal_system_stats_t n;
    if (shoal_system_stats(r->sys, &n) == 0) {
#define LINE(f) shoal_buf_printf(out, "node_" #f " %llu\n", (unsigned long long)n.f)
        LINE(frames_in); LINE(frames_out); LINE(bytes_in); LINE(bytes_out); LINE(messages_in);
        LINE(messages_out); LINE(dropped_oversized); LINE(dropped_malformed);
        LINE(dropped_unknown_kind); LINE(dropped_quarantined); LINE(dropped_wrong_incarnation);
        LINE(dropped_not_handshaken); LINE(dropped_fault); LINE(send_eagain); LINE(send_notconn);
        LINE(gaps); LINE(lost_unacked); LINE(duplicates); LINE(handshakes); LINE(peers);
        LINE(handshakes_refused); LINE(auth_admitted); LINE(auth_refused);
        LINE(handshakes_failed); LINE(allow_keys); LINE(connections_refused);
        LINE(connections_open); LINE(handshakes_mismatched); LINE(handshakes_incomplete);
        LINE(replies_in_parts); LINE(reply_parts); LINE(replies_dropped_gone);
        LINE(replies_dropped_full); LINE(replies_too_big);
#undef LINE
    }
}

/* ---------------------------------------------------------------------------------------------
 * Watch sessions (node thread)
 */
static uint64_t next_watch_id(void)
{
    static _Atomic uint64_t ids;
    /* unique per process and unlikely to repeat across restarts: a client that asks a restarted
       node for its old session is told it is gone */
    uint64_t n = ++ids;
    return ((uint64_t)time(NULL) << 20) ^ n;
}

static void watch_free(struct client_watch *w)
{
    if (w->sub > 0)
        shoal_replicator_unsubscribe(w->r, w->sub);
    if (w->timer > 0)
        shoal_system_timer_cancel(w->r->sys, w->timer);
    for (size_t i = 0; i < w->n; i++)
        shoal_buf_free(&w->q[(w->head + i) % WATCH_QUEUE_MAX].value);
    free(w->q);
    free(w->key);
    free(w);
}

/* Answers a Watch with every queued event (the queue empties). */
static void watch_answer(struct client_watch *w, const shoal_reply_to_t *to)
{
    Shoal__Client__Reply rep = SHOAL__CLIENT__REPLY__INIT;
    rep.session = w->id;
    rep.missed = w->missed;
    Shoal__Client__WatchEvent *evs = shoal_malloc((w->n ? w->n : 1) * sizeof *evs);
    Shoal__Client__WatchEvent **ptrs = shoal_malloc((w->n ? w->n : 1) * sizeof *ptrs);
    for (size_t i = 0; i < w->n; i++) {
        watch_event_t *e = &w->q[(w->head + i) % WATCH_QUEUE_MAX];
        shoal__client__watch_event__init(&evs[i]);
        evs[i].change = e->change;
        evs[i].value.data = e->value.data;
        evs[i].value.len = e->value.len;
        ptrs[i] = &evs[i];
    }
    rep.events = ptrs;
    rep.n_events = w->n;
    shoal_buf_t out = {0};
    shoal_pb_pack(&rep.base, &out);
    shoal_system_reply(w->r->sys, to, K_CLIENT_WATCH, out.data ? out.data : (uint8_t *)"",
                       out.len);
    shoal_buf_free(&out);
    free(evs);
    free(ptrs);
    for (size_t i = 0; i < w->n; i++)
        shoal_buf_free(&w->q[(w->head + i) % WATCH_QUEUE_MAX].value);
    w->head = 0;
    w->n = 0;
    w->missed = 0;
    w->waiting = false;
    w->asked_at = shoal_now_ms();
}

static void watch_timeout(shoal_system_t *sys, void *arg)
{
    (void)sys;
    struct client_watch *w = arg;
    w->timer = 0;
    if (w->waiting)
        watch_answer(w, &w->to);
}

static void watch_changed(shoal_replicator_t *r, shoal_change_t change, const char *key,
                          const shoal_crdt_t *value, void *arg)
{
    (void)r;
    (void)key;
    struct client_watch *w = arg;
    if (w->n == WATCH_QUEUE_MAX) { /* the client stopped asking: the oldest go */
        shoal_buf_free(&w->q[w->head].value);
        w->head = (w->head + 1) % WATCH_QUEUE_MAX;
        w->n--;
        w->missed++;
    }
    watch_event_t *e = &w->q[(w->head + w->n++) % WATCH_QUEUE_MAX];
    memset(e, 0, sizeof *e);
    e->change = (uint32_t)change;
    if (value && change == SHOAL_CHANGED)
        shoal_crdt_encode(value, &e->value);
    if (w->waiting) {
        if (w->timer > 0)
            shoal_system_timer_cancel(w->r->sys, w->timer);
        w->timer = 0;
        watch_answer(w, &w->to);
    }
}

/* Sessions nobody asked for lately go; past WATCH_MAX the least recently asked goes too (one
   that waits is answered first): a client opening sessions in a loop cannot grow the node. */
static void watch_sweep(shoal_replicator_t *r, int64_t now)
{
    size_t n = 0;
    struct client_watch **pp = &r->watches, *victim = NULL;
    while (*pp) {
        struct client_watch *w = *pp;
        if (!w->waiting && now - w->asked_at > WATCH_IDLE_MS) {
            *pp = w->next;
            watch_free(w);
            continue;
        }
        if (!victim || (victim->waiting && !w->waiting) ||
            (victim->waiting == w->waiting && w->asked_at < victim->asked_at))
            victim = w;
        n++;
        pp = &w->next;
    }
    if (n >= WATCH_MAX && victim) {
        for (pp = &r->watches; *pp != victim; pp = &(*pp)->next)
            ;
        *pp = victim->next;
        if (victim->waiting)
            watch_answer(victim, &victim->to);
        watch_free(victim);
    }
}

static int on_watch(shoal_system_t *sys, const shoal_reply_to_t *to, const uint8_t *data,
                    size_t len)
{
    Shoal__Client__Watch *m = shoal__client__watch__unpack(NULL, len, data);
    if (!m)
        return SHOAL_EDECODE;
    shoal_replicator_t *r = repl_find(sys, m->role);
    int rc = 0;
    if (!r || !m->key || !*m->key || strlen(m->key) > 1024) {
        rc = r ? SHOAL_EINVAL : SHOAL_ENOTFOUND;
        goto done;
    }
    int64_t now = shoal_now_ms();
    watch_sweep(r, now);
    struct client_watch *w = NULL;
    if (m->session) {
        for (w = r->watches; w && w->id != m->session; w = w->next)
            ;
        if (!w || strcmp(w->key, m->key) != 0) {
            rc = SHOAL_ENOTFOUND; /* gone (idle, or the node restarted): open a new one */
            goto done;
        }
        if (w->waiting) { /* a poll whose client gave up on it: it ends empty (a waiting
                             session has no events: the first one answers at once) */
            if (w->timer > 0)
                shoal_system_timer_cancel(sys, w->timer);
            w->timer = 0;
            shoal_reply_to_t old = w->to;
            watch_answer(w, &old);
        }
    } else {
        w = shoal_calloc(1, sizeof *w);
        w->r = r;
        w->id = next_watch_id();
        w->key = strdup(m->key);
        if (!w->key)
            abort();
        w->q = shoal_calloc(WATCH_QUEUE_MAX, sizeof *w->q);
        w->sub = shoal_replicator_subscribe(r, m->key, watch_changed, w);
        if (w->sub <= 0) {
            rc = w->sub < 0 ? w->sub : SHOAL_EINVAL;
            w->sub = 0;
            watch_free(w);
            goto done;
        }
        w->next = r->watches;
        r->watches = w;
        shoal_replicator_flush(r); /* the current value, now */
    }
    w->asked_at = now;
    uint32_t wait = m->wait_ms < WATCH_WAIT_MAX ? m->wait_ms : WATCH_WAIT_MAX;
    if (w->n || wait == 0) {
        watch_answer(w, to);
    } else {
        w->waiting = true;
        w->to = *to;
        w->timer = shoal_system_timer(sys, wait, false, watch_timeout, w);
        if (w->timer <= 0) {
            w->timer = 0;
            watch_answer(w, to);
        }
    }
done:
    shoal__client__watch__free_unpacked(m, NULL);
    return rc;
}

void repl_client_watches_free(shoal_replicator_t *r)
{
    while (r->watches) {
        struct client_watch *w = r->watches;
        r->watches = w->next;
        if (w->waiting)
            watch_answer(w, &w->to); /* what queued, before the replicator goes */
        watch_free(w);
    }
}

static void on_request(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                       const uint8_t *data, size_t len, void *arg)
{
    (void)arg;
    int rc = SHOAL_EDECODE;
    switch (kind) {
    case K_CLIENT_GET: {
        Shoal__Client__Get *m = shoal__client__get__unpack(NULL, len, data);
        shoal_replicator_t *r = m ? repl_find(sys, m->role) : NULL;
        rc = m ? (r ? 0 : SHOAL_ENOTFOUND) : SHOAL_EDECODE;
        if (r) {
            shoal_consistency_t c = consistency_from(m->read);
            pending_reply_t *p = pending(sys, to);
            rc = shoal_replicator_get(r, m->key, NULL, &c, get_done, p);
            if (rc < 0)
                free(p); /* refused: get_done will not run */
        }
        shoal__client__get__free_unpacked(m, NULL);
        break;
    }
    case K_CLIENT_UPDATE: {
        Shoal__Client__Update *m = shoal__client__update__unpack(NULL, len, data);
        shoal_replicator_t *r = m ? repl_find(sys, m->role) : NULL;
        rc = m ? (r ? 0 : SHOAL_ENOTFOUND) : SHOAL_EDECODE;
        if (r) {
            shoal_crdt_t *init = empty_of(m->type);
            if (!init) {
                rc = SHOAL_ETYPE;
            } else {
                shoal_consistency_t c = consistency_from(m->write);
                op_ctx_t oc = {m, shoal_system_self(sys)};
                pending_reply_t *p = pending(sys, to);
                /* the modify function runs inside the update call, while m is alive — unless the
                   replicator is still loading, which client requests wait out by refusal */
                if (r->load_failed) { /* stopped for good, not busy: the client must not wait */
                    rc = SHOAL_ESTORE;
                    r->stats.store_failures++;
                    shoal_crdt_destroy(&init);
                } else if (shoal_replicator_replica_count(r) == 0) {
                    rc = SHOAL_EBUSY;
                    shoal_crdt_destroy(&init);
                } else { /* the update owns init */
                    rc = shoal_replicator_update(r, m->key, init, &c, apply_op, &oc, update_done, p);
                }
                if (rc < 0)
                    free(p);
                else if (r->watches)
                    shoal_replicator_flush(r); /* each client write is an event for watchers */
            }
        }
        shoal__client__update__free_unpacked(m, NULL);
        break;
    }
    case K_CLIENT_DELETE: {
        Shoal__Client__Delete *m = shoal__client__delete__unpack(NULL, len, data);
        shoal_replicator_t *r = m ? repl_find(sys, m->role) : NULL;
        rc = m ? (r ? 0 : SHOAL_ENOTFOUND) : SHOAL_EDECODE;
        if (r) {
            shoal_consistency_t c = consistency_from(m->write);
            pending_reply_t *p = pending(sys, to);
            rc = shoal_replicator_delete(r, m->key, &c, update_done, p);
            if (rc < 0)
                free(p);
            else if (r->watches)
                shoal_replicator_flush(r);
        }
        shoal__client__delete__free_unpacked(m, NULL);
        break;
    }
    case K_CLIENT_KEYS: {
        Shoal__Client__Keys *m = shoal__client__keys__unpack(NULL, len, data);
        shoal_replicator_t *r = m ? repl_find(sys, m->role) : NULL;
        rc = m ? (r ? 0 : SHOAL_ENOTFOUND) : SHOAL_EDECODE;
        if (r && r->load_failed) { /* its store failed to load: it lists nothing as if empty */
            rc = SHOAL_ESTORE;
            r->stats.store_failures++;
            r = NULL;
        }
        if (r) {
            Shoal__Client__Reply rep = SHOAL__CLIENT__REPLY__INIT;
            repl_refresh_all_digests(r);
            size_t n = 0, cap = r->entries.n ? r->entries.n : 1;
            char **keys = shoal_malloc(cap * sizeof *keys);
            char **types = shoal_malloc(cap * sizeof *types);
            shoal_buf_t dig = {0}, out = {0};
            for (size_t i = 0; i < r->entries.cap; i++) {
                shoal_hslot_t *s = &r->entries.slots[i];
                if (!SHOAL_HSLOT_LIVE(s))
                    continue;
                entry_t *e = s->value;
                keys[n] = e->key;
                types[n] = (char *)(e->deleted ? "(deleted)" : shoal_type_name(e->type));
                shoal_buf_append(&dig, e->digest, 16);
                n++;
            }
            rep.keys = keys;
            rep.n_keys = n;
            rep.types = types;
            rep.n_types = n;
            rep.digests.data = dig.data;
            rep.digests.len = dig.len;
            shoal_pb_pack(&rep.base, &out);
            /* answered, or the failure counted and logged (a reply over the client's limit
               answered with SHOAL_ETOOBIG): nothing more to say */
            shoal_system_reply(sys, to, K_CLIENT_KEYS, out.data, out.len);
            free(keys);
            free(types);
            shoal_buf_free(&dig);
            shoal_buf_free(&out);
        }
        shoal__client__keys__free_unpacked(m, NULL);
        if (rc == 0)
            return;
        break; /* no such role, or malformed: answer with the error (the client would wait) */
    }
    case K_CLIENT_WATCH:
        rc = on_watch(sys, to, data, len);
        if (rc == 0)
            return;
        break;
    case K_CLIENT_STATS: {
        Shoal__Client__Stats *m = shoal__client__stats__unpack(NULL, len, data);
        shoal_replicator_t *r = m ? repl_find(sys, m->role) : NULL;
        bool expo = m && m->exposition;
        rc = m ? (r || expo ? 0 : SHOAL_ENOTFOUND) : SHOAL_EDECODE;
        if (expo && !repl_exposition_hook)
            rc = SHOAL_EKIND;
        if (rc == 0) {
            shoal_buf_t txt = {0}, out = {0};
            if (expo)
                rc = repl_exposition_hook(sys, &txt);
            else
                stats_text(r, &txt);
            Shoal__Client__Reply rep = SHOAL__CLIENT__REPLY__INIT;
            rep.text = (char *)shoal_buf_cstr(&txt);
            shoal_pb_pack(&rep.base, &out);
            if (rc == 0)
                shoal_system_reply(sys, to, K_CLIENT_STATS, out.data, out.len);
            shoal_buf_free(&txt);
            shoal_buf_free(&out);
        }
        shoal__client__stats__free_unpacked(m, NULL);
        if (rc == 0)
            return;
        break;
    }
    }
    if (rc < 0)
        reply(sys, to, rc, NULL);
}

void repl_client_dispatch(shoal_system_t *sys, const shoal_reply_to_t *to, uint16_t kind,
                          const uint8_t *data, size_t len)
{
    on_request(sys, to, kind, data, len, NULL);
}

void repl_client_register(shoal_system_t *sys)
{
    for (uint16_t k = K_CLIENT_GET; k <= K_CLIENT_WATCH; k++)
        shoal_system_register_request(sys, k, on_request, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Client side
 */
static void consistency_to(const shoal_consistency_t *k, Shoal__Client__Consistency *c)
{
    shoal__client__consistency__init(c);
    if (!k)
        return;
    c->level = (uint32_t)k->level;
    c->n = k->n;
    c->timeout_ms = k->timeout_ms;
    c->min_cap = k->min_cap;
    c->plus = k->plus;
    c->prefer_oldest = k->prefer_oldest;
}

static int request(shoal_client_t *c, uint16_t kind, const ProtobufCMessage *msg,
                   uint32_t timeout_ms, Shoal__Client__Reply **out)
{
    shoal_buf_t req = {0}, rep = {0};
    shoal_pb_pack(msg, &req);
    uint16_t rkind = 0;
    int rc = shoal_client_request(c, kind, req.data ? req.data : (uint8_t *)"", req.len, &rkind,
                                  &rep, timeout_ms);
    shoal_buf_free(&req);
    if (rc < 0) {
        shoal_buf_free(&rep);
        return rc;
    }
    *out = shoal__client__reply__unpack(NULL, rep.len, rep.data ? rep.data : (uint8_t *)"");
    shoal_buf_free(&rep);
    if (!*out)
        return SHOAL_EDECODE;
    return (*out)->status;
}

static uint32_t wait_for(const shoal_consistency_t *k)
{
    return (k && k->level != SHOAL_LOCAL ? k->timeout_ms : 0) + 5000;
}

int shoal_client_get(shoal_client_t *c, const char *role, const char *key,
                     const shoal_consistency_t *rc, shoal_crdt_t **out)
{
    if (out)
        *out = NULL;
    if (!c || !key)
        return SHOAL_EINVAL;
    Shoal__Client__Get g = SHOAL__CLIENT__GET__INIT;
    Shoal__Client__Consistency cons;
    consistency_to(rc, &cons);
    g.role = (char *)(role ? role : "");
    g.key = (char *)key;
    g.read = &cons;
    Shoal__Client__Reply *r = NULL;
    int st = request(c, K_CLIENT_GET, &g.base, wait_for(rc), &r);
    if (st == 0 && out && r->value.len)
        st = shoal_crdt_decode(r->value.data, r->value.len, out);
    if (r)
        shoal__client__reply__free_unpacked(r, NULL);
    return st;
}

int shoal_client_update(shoal_client_t *c, const char *role, const char *key,
                        const shoal_consistency_t *wc, const shoal_client_op_t *op)
{
    if (!c || !key || !op || !op->type || !op->op)
        return SHOAL_EINVAL;
    Shoal__Client__Update u = SHOAL__CLIENT__UPDATE__INIT;
    Shoal__Client__Consistency cons;
    consistency_to(wc, &cons);
    u.role = (char *)(role ? role : "");
    u.key = (char *)key;
    u.write = &cons;
    u.type = (char *)op->type;
    u.op = (char *)op->op;
    u.n = op->n;
    u.elem.data = (uint8_t *)op->elem;
    u.elem.len = op->elem_len;
    u.key2.data = (uint8_t *)op->key2;
    u.key2.len = op->key2_len;
    u.value.data = (uint8_t *)op->value;
    u.value.len = op->value_len;
    Shoal__Client__Reply *r = NULL;
    int st = request(c, K_CLIENT_UPDATE, &u.base, wait_for(wc), &r);
    if (r)
        shoal__client__reply__free_unpacked(r, NULL);
    return st;
}

int shoal_client_delete(shoal_client_t *c, const char *role, const char *key,
                        const shoal_consistency_t *wc)
{
    if (!c || !key)
        return SHOAL_EINVAL;
    Shoal__Client__Delete d = SHOAL__CLIENT__DELETE__INIT;
    Shoal__Client__Consistency cons;
    consistency_to(wc, &cons);
    d.role = (char *)(role ? role : "");
    d.key = (char *)key;
    d.write = &cons;
    Shoal__Client__Reply *r = NULL;
    int st = request(c, K_CLIENT_DELETE, &d.base, wait_for(wc), &r);
    if (r)
        shoal__client__reply__free_unpacked(r, NULL);
    return st;
}

int shoal_client_stats(shoal_client_t *c, const char *role, shoal_buf_t *text)
{
    if (!c || !text)
        return SHOAL_EINVAL;
    Shoal__Client__Stats s = SHOAL__CLIENT__STATS__INIT;
    s.role = (char *)(role ? role : "");
    Shoal__Client__Reply *r = NULL;
    int st = request(c, K_CLIENT_STATS, &s.base, 5000, &r);
    if (st == 0 && r->text) {
        shoal_buf_reset(text);
        shoal_buf_append(text, r->text, strlen(r->text));
    }
    if (r)
        shoal__client__reply__free_unpacked(r, NULL);
    return st;
}

int shoal_client_metrics(shoal_client_t *c, shoal_buf_t *text)
{
    if (!c || !text)
        return SHOAL_EINVAL;
    Shoal__Client__Stats s = SHOAL__CLIENT__STATS__INIT;
    s.role = (char *)"";
    s.exposition = true;
    Shoal__Client__Reply *r = NULL;
    int st = request(c, K_CLIENT_STATS, &s.base, 5000, &r);
    if (st == 0) {
        const char *t = r->text ? r->text : "";
        /* a node before 0.3 ignores exposition and answers its "name value" lines */
        if (strncmp(t, "# HELP ", 7) != 0)
            st = SHOAL_EVERSION;
        else {
            shoal_buf_reset(text);
            shoal_buf_append(text, t, strlen(t));
        }
    }
    if (r)
        shoal__client__reply__free_unpacked(r, NULL);
    return st;
}

int shoal_client_watch(shoal_client_t *c, const char *role, const char *key, uint64_t *session,
                       uint32_t wait_ms, shoal_client_watch_fn *fn, void *arg, uint64_t *missed)
{
    if (!c || !key || !*key || !session || !fn)
        return SHOAL_EINVAL;
    Shoal__Client__Watch w = SHOAL__CLIENT__WATCH__INIT;
    w.role = (char *)(role ? role : "");
    w.key = (char *)key;
    w.session = *session;
    w.wait_ms = wait_ms;
    Shoal__Client__Reply *r = NULL;
    /* the node holds the poll up to wait_ms (at most 30 s): the client waits that and more */
    uint32_t wait = wait_ms < 30000 ? wait_ms : 30000;
    int st = request(c, K_CLIENT_WATCH, &w.base, wait + 5000, &r);
    if (st == 0) {
        *session = r->session;
        if (missed)
            *missed += r->missed;
        for (size_t i = 0; i < r->n_events; i++) {
            const Shoal__Client__WatchEvent *e = r->events[i];
            shoal_crdt_t *v = NULL;
            if (e->change == SHOAL_CHANGED &&
                shoal_crdt_decode(e->value.data, e->value.len, &v) != 0) {
                st = SHOAL_EDECODE;
                break;
            }
            fn((shoal_change_t)e->change, v, arg);
            shoal_crdt_destroy(&v);
        }
    }
    if (r)
        shoal__client__reply__free_unpacked(r, NULL);
    return st;
}
