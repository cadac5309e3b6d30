/*  replicator_client.c — the replicator's client/admin class of requests (proto/client.proto):
    get, update by a named operation, delete, and key listing, for tools, examples and tests that
    talk to a node without being cluster members; and the client-side calls that send them.

    An update names an operation of the key's type; the serving node applies it with its own node
    id as the writer, exactly as a program on that node would.
*/
#include "replicator_internal.h"
#include "client.pb-c.h"

enum { K_CLIENT_GET = 0x8001, K_CLIENT_UPDATE, K_CLIENT_DELETE, K_CLIENT_KEYS, K_CLIENT_STATS };

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
                if (shoal_replicator_replica_count(r) == 0)
                    rc = SHOAL_EBUSY;
                else
                    rc = shoal_replicator_update(r, m->key, init, &c, apply_op, &oc, update_done, p);
                if (rc < 0)
                    free(p);
                shoal_crdt_destroy(&init);
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
        }
        shoal__client__delete__free_unpacked(m, NULL);
        break;
    }
    case K_CLIENT_KEYS: {
        Shoal__Client__Keys *m = shoal__client__keys__unpack(NULL, len, data);
        shoal_replicator_t *r = m ? repl_find(sys, m->role) : NULL;
        rc = m ? (r ? 0 : SHOAL_ENOTFOUND) : SHOAL_EDECODE;
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
    case K_CLIENT_STATS: {
        Shoal__Client__Stats *m = shoal__client__stats__unpack(NULL, len, data);
        shoal_replicator_t *r = m ? repl_find(sys, m->role) : NULL;
        rc = m ? (r ? 0 : SHOAL_ENOTFOUND) : SHOAL_EDECODE;
        if (r) {
            shoal_buf_t txt = {0}, out = {0};
            stats_text(r, &txt);
            Shoal__Client__Reply rep = SHOAL__CLIENT__REPLY__INIT;
            rep.text = (char *)shoal_buf_cstr(&txt);
            shoal_pb_pack(&rep.base, &out);
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
    for (uint16_t k = K_CLIENT_GET; k <= K_CLIENT_STATS; k++)
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
