/*  region.c — a region: routes the messages of one entity type to the shards that host them
    (the shards hosted here and their entities are shard.c's), and takes part in handoffs
    (sharding.h tells the protocol).

    Everything here runs on the node thread. Messages for a shard whose home is unknown, moving
    or unreachable wait in that shard's buffer (home_t.buffer), in arrival order; once a buffer is
    not empty every later message for the shard queues behind it, so per-sender order holds while
    the buffer drains. Tells and asks made from inside an entity callback are deferred until the
    outermost callback returns, so an entity is never re-entered by a message it sent.
*/
#include <stddef.h>
#include <string.h>
#include <xxhash.h>

#include "sharding_internal.h"
#include "allocation.h"

#define TICK_SLOW_MS 100

/* ---------------------------------------------------------------------------------------------
 * Small helpers
 */
void shoal_sharding_default_shard_id(const char *entity_id, uint32_t number_of_shards, char *out)
{
    uint64_t h = XXH3_64bits(entity_id, strlen(entity_id));
    uint64_t v = h % (number_of_shards ? number_of_shards : 1);
    /* decimal by hand: this runs for every message, and snprintf showed in profiles */
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = 0;
}

static void shard_of(const shoal_region_t *r, const char *eid, char *out)
{
    if (r->s.shard_id)
        r->s.shard_id(eid, r->s.number_of_shards, out, r->s.shard_id_arg);
    else
        shoal_sharding_default_shard_id(eid, r->s.number_of_shards, out);
    out[SHOAL_SHARD_ID_MAX] = 0;
}

void shoal_region_shard_of(const shoal_region_t *r, const char *entity_id, char *out)
{
    shard_of(r, entity_id, out);
}

/* The length of a well-formed entity id (printable, 1..SHOAL_ENTITY_ID_MAX bytes), else 0. */
static size_t eid_len(const char *eid)
{
    if (!eid)
        return 0;
    size_t n = strnlen(eid, SHOAL_ENTITY_ID_MAX + 1);
    if (n == 0 || n > SHOAL_ENTITY_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)eid[i] < 0x20 || eid[i] == 0x7f)
            return 0;
    return n;
}

static bool eid_ok(const char *eid)
{
    return eid_len(eid) != 0;
}

static home_t *home_get(shoal_region_t *r, const char *shard)
{
    home_t *h = zhashx_lookup(r->homes, shard);
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h)
            abort();
        snprintf(h->id, sizeof h->id, "%s", shard);
        zhashx_insert(r->homes, h->id, h);
    }
    return h;
}

static void home_destroy(void **item)
{
    home_t *h = *item;
    if (!h)
        return;
    bmsg_t *m;
    while ((m = bq_pop(&h->buffer)))
        free(m);
    free(h);
    *item = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Dead letters
 */
static void dead_letter_bmsg(shoal_region_t *r, shoal_dead_letter_t why, bmsg_t *m)
{
    region_dead_letter(r, why, m->eid, m->data, m->len, m->origin, m->ask_id);
    free(m);
}

/* ---------------------------------------------------------------------------------------------
 * Routing
 */
static void buffer_note(shoal_region_t *r)
{
    if (r->buffered > r->stats.buffer_peak)
        r->stats.buffer_peak = r->buffered;
    size_t tenth = r->s.buffer_size >= 10 ? r->s.buffer_size / 10 : 1;
    size_t level = r->buffered / tenth;
    if (level > r->buffer_logged) {
        r->buffer_logged = level;
        shoal_warning("%s: sharding %s: %zu messages buffered (%zu%% of buffer-size %u)",
                     shoal_node_id(r->self), r->name, r->buffered,
                     r->buffered * 100 / (r->s.buffer_size ? r->s.buffer_size : 1),
                     r->s.buffer_size);
    } else if (level + 1 < r->buffer_logged) {
        r->buffer_logged = level;
    }
}

/* Queues a message in a shard's buffer; false (and a dead letter) when the buffer is full. */
static bool buffer(shoal_region_t *r, home_t *h, bmsg_t *m)
{
    if (r->buffered >= r->s.buffer_size) {
        dead_letter_bmsg(r, SHOAL_DL_BUFFER_FULL, m);
        return false;
    }
    bq_push(&h->buffer, m);
    r->buffered++;
    r->stats.buffered++;
    buffer_note(r);
    return true;
}

static int send_envelope(shoal_region_t *r, const shoal_node_t *to, const char *shard,
                         const bmsg_t *m)
{
    shoal_buf_t *b = &r->sh->scratch;
    shoal_buf_reset(b);
    const shoal_node_t *origin = m->origin && m->origin != r->self ? m->origin : NULL;
    wire_envelope(b, m->flags, r->type_hash, shard, m->eid, m->ask_id, origin, m->data, m->len);
    return shoal_system_send(r->sys, to, K_SH_DELIVER, b->data, b->len);
}

static void ask_home(shoal_region_t *r, home_t *h)
{
    int64_t now = shoal_now_ms();
    if (!r->registered || !r->coord_node)
        return; /* asked once registered (the tick) */
    if (h->asked_at && now - h->asked_at < (int64_t)r->s.retry_interval_ms)
        return;
    h->asked_at = now;
    r->stats.home_requests++;
    Shoal__Sharding__Control m;
    region_control_init(r, &m, SHOAL__SHARDING__CONTROL__KIND__GET_SHARD_HOME);
    m.shard = h->id;
    region_send_control(r, r->coord_node, &m);
}

/* Sends what a shard's buffer holds to its home, in order, while it can. */
static void flush(shoal_region_t *r, home_t *h)
{
    while (h->buffer.head) {
        if (!h->node || h->handing_off)
            return;
        bmsg_t *m = h->buffer.head;
        if (h->node == r->self) {
            shard_t *s = zhashx_lookup(r->shards, h->id);
            if (!s || s->status != SH_ACTIVE)
                return;
            bq_pop(&h->buffer);
            r->buffered--;
            deliver_local(r, s, m->eid, m->flags, m->origin, m->ask_id, m->data, m->len);
            free(m);
            continue;
        }
        if (!sharding_reachable(r->sh, h->node))
            return;
        int rc = send_envelope(r, h->node, h->id, m);
        if (rc == SHOAL_EAGAIN || rc == SHOAL_ENOTCONN)
            return; /* stays first in line; the tick tries again */
        bq_pop(&h->buffer);
        r->buffered--;
        if (rc < 0)
            dead_letter_bmsg(r, SHOAL_DL_SEND_FAILED, m);
        else {
            r->stats.forwarded++;
            free(m);
        }
    }
}

/* Routes one message (takes m). */
/* The direct path: delivers or sends a message when nothing waits ahead of it for the shard and
   its home is known and usable. 1 = done, 0 = it must wait in the buffer, -1 = the transport
   refused it for good (a dead letter). No allocation: the hot path of every tell. */
static int try_direct(shoal_region_t *r, home_t *h, const char *eid, uint8_t flags,
                      const shoal_node_t *origin, uint64_t ask_id, const void *data, size_t len)
{
    if (h->buffer.head || !h->node || h->handing_off)
        return 0;
    if (h->node == r->self) {
        shard_t *s = zhashx_lookup(r->shards, h->id);
        if (!s || s->status != SH_ACTIVE)
            return 0;
        deliver_local(r, s, eid, flags, origin, ask_id, data, len);
        return 1;
    }
    if (!sharding_reachable(r->sh, h->node))
        return 0;
    shoal_buf_t *b = &r->sh->scratch;
    shoal_buf_reset(b);
    wire_envelope(b, flags, r->type_hash, h->id, eid, ask_id,
                  origin && origin != r->self ? origin : NULL, data, len);
    int rc = shoal_system_send(r->sys, h->node, K_SH_DELIVER, b->data, b->len);
    if (rc == 0) {
        r->stats.forwarded++;
        return 1;
    }
    return rc == SHOAL_EAGAIN || rc == SHOAL_ENOTCONN ? 0 : -1;
}

/* Queues m behind the shard's buffer and asks for the home when nobody knows it. */
static void route_buffer(shoal_region_t *r, home_t *h, bmsg_t *m)
{
    if (!buffer(r, h, m))
        return;
    if (!h->node && !h->handing_off)
        ask_home(r, h);
}

/* Routes one message (takes m). */
static void route(shoal_region_t *r, bmsg_t *m, const char *shard)
{
    if (r->stopped) {
        dead_letter_bmsg(r, SHOAL_DL_REGION_STOPPING, m);
        return;
    }
    home_t *h = home_get(r, shard);
    int d = try_direct(r, h, m->eid, m->flags, m->origin, m->ask_id, m->data, m->len);
    if (d > 0)
        free(m);
    else if (d < 0)
        dead_letter_bmsg(r, SHOAL_DL_SEND_FAILED, m);
    else
        route_buffer(r, h, m);
}

/* The home of an entity's shard. With the default shard ids an array indexed by shard number
   finds it without formatting and hashing a string per message (homes are never freed before
   the region). */
static home_t *home_of(shoal_region_t *r, const char *eid)
{
    char shard[SHOAL_SHARD_ID_MAX + 1];
    if (r->s.shard_id) {
        shard_of(r, eid, shard);
        return home_get(r, shard);
    }
    uint32_t n = r->s.number_of_shards ? r->s.number_of_shards : 1;
    uint64_t idx = XXH3_64bits(eid, strlen(eid)) % n;
    if (!r->home_by_num) {
        r->home_by_num = calloc(n, sizeof *r->home_by_num);
        if (!r->home_by_num)
            abort();
    }
    home_t *h = r->home_by_num[idx];
    if (!h) {
        shoal_sharding_default_shard_id(eid, n, shard);
        h = r->home_by_num[idx] = home_get(r, shard);
    }
    return h;
}

/* Entry for messages made here (API, inbound queue, deferred): 0 or SHOAL_EBUFFER. */
static int route_new(shoal_region_t *r, const char *eid, uint8_t flags, uint64_t ask_id,
                     const void *data, size_t len)
{
    home_t *h = home_of(r, eid);
    int d = r->stopped ? 0 : try_direct(r, h, eid, flags, NULL, ask_id, data, len);
    if (d > 0)
        return 0;
    bmsg_t *m = bmsg_new(eid, flags, NULL, ask_id, data, len);
    if (r->stopped) {
        dead_letter_bmsg(r, SHOAL_DL_REGION_STOPPING, m);
        return SHOAL_ESTOPPED;
    }
    if (d < 0) {
        dead_letter_bmsg(r, SHOAL_DL_SEND_FAILED, m);
        return SHOAL_ENOTCONN;
    }
    size_t before = r->stats.dead_letters[SHOAL_DL_BUFFER_FULL];
    route_buffer(r, h, m);
    return r->stats.dead_letters[SHOAL_DL_BUFFER_FULL] != before ? SHOAL_EBUFFER : 0;
}

/* Tells and asks made inside entity callbacks wait for the outermost callback to return. */
static void defer(shoal_region_t *r, const char *eid, uint8_t flags, uint64_t ask_id,
                  const void *data, size_t len)
{
    bq_push(&r->deferred, bmsg_new(eid, flags, NULL, ask_id, data, len));
}

static void drain_deferred(shoal_region_t *r)
{
    if (r->draining)
        return;
    r->draining = true;
    bmsg_t *m;
    while (r->sh->depth == 0 && (m = bq_pop(&r->deferred))) {
        route_new(r, m->eid, m->flags, m->ask_id, m->data, m->len);
        free(m);
    }
    r->draining = false;
}

/* ---------------------------------------------------------------------------------------------
 * Messages from other regions
 */
void region_on_deliver(shoal_sharding_t *sh, const shoal_node_t *from, const uint8_t *data,
                       size_t len)
{
    envelope_t env;
    if (wire_parse_envelope(data, len, &env) != 0) {
        static uint64_t n;
        if (n++ % 1000 == 0)
            shoal_warning("%s: sharding: malformed entity message from %s dropped",
                         shoal_node_id(sh->self), shoal_node_id(from));
        return;
    }
    char shard[SHOAL_SHARD_ID_MAX + 1], eid[SHOAL_ENTITY_ID_MAX + 1];
    memcpy(shard, env.shard, env.shard_len);
    shard[env.shard_len] = 0;
    memcpy(eid, env.eid, env.eid_len);
    eid[env.eid_len] = 0;
    const shoal_node_t *origin = from;
    if (env.origin) {
        origin = shoal_node_intern_n(env.origin, env.origin_len);
        if (!origin)
            return;
    }
    shoal_region_t *r = sharding_region_by_hash(sh, env.type_hash);
    if (!r) {
        static uint64_t n;
        if (n++ % 1000 == 0)
            shoal_warning("%s: sharding: message for an entity type not started here, from %s",
                         shoal_node_id(sh->self), shoal_node_id(from));
        if (env.ask_id) {
            shoal_buf_t b = {0};
            wire_reply(&b, env.type_hash, env.ask_id, SHOAL_ENOTYPE, NULL, 0);
            shoal_system_send(sh->sys, origin, K_SH_REPLY, b.data, b.len);
            shoal_buf_free(&b);
        }
        return;
    }
    r->stats.received_remote++;
    shard_t *s = zhashx_lookup(r->shards, shard);
    if (s && (s->status == SH_ACTIVE || s->status == SH_FENCING)) {
        /* sent before the sender's fence: the old incarnation still takes it */
        deliver_local(r, s, eid, env.flags, origin, env.ask_id, env.payload, env.len);
        drain_deferred(r);
        return;
    }
    /* not hosted here (any more): route it on like one of ours, keeping who asked */
    route(r, bmsg_new(eid, env.flags, origin == r->self ? NULL : origin, env.ask_id, env.payload,
                      env.len),
          shard);
    drain_deferred(r);
}

void region_on_reply(shoal_sharding_t *sh, const shoal_node_t *from, const uint8_t *data,
                     size_t len)
{
    uint32_t th;
    uint64_t id;
    int32_t status;
    const uint8_t *p;
    size_t plen;
    if (wire_parse_reply(data, len, &th, &id, &status, &p, &plen) != 0) {
        shoal_debug("%s: sharding: malformed reply from %s", shoal_node_id(sh->self),
                   shoal_node_id(from));
        return;
    }
    shoal_region_t *r = sharding_region_by_hash(sh, th);
    if (r) {
        region_ask_complete(r, id, status, p, plen);
        drain_deferred(r);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Homes learned from the coordinator
 */
static void learn_home(shoal_region_t *r, const char *shard, const shoal_node_t *node,
                       uint64_t epoch)
{
    home_t *h = home_get(r, shard);
    if (epoch < h->epoch) {
        r->stats.shards_refused_stale++;
        return;
    }
    h->epoch = epoch;
    h->node = node;
    if (h->handing_off) { /* ms resolution: a handoff takes milliseconds at the least */
        int64_t ms = shoal_now_ms() - h->handoff_since;
        shoal_hist_record(&r->lat->handoff, ms > 0 ? (uint64_t)ms * 1000 : 0);
    }
    h->handing_off = false;
    h->asked_at = 0;
    r->stats.homes_learned++;
    shard_t *s = zhashx_lookup(r->shards, shard);
    if (node == r->self && !r->proxy && !shoal_cluster_may_host(r->sh->c)) {
        /* fenced (or not allowed to act): host nothing; the messages wait, and the home is
           asked again once the fence is lifted, so the coordinator's allocation then decides */
        h->node = NULL;
        h->refused_here = true;
        return;
    }
    h->refused_here = false;
    if (node == r->self && !r->proxy) {
        if (!s || s->status == SH_ACTIVE)
            shard_host(r, shard, epoch);
    } else if (s && s->epoch < epoch && s->status != SH_STOPPING) {
        shoal_info("%s: sharding %s: shard %s is now at %s (epoch %llx): stopping the copy here",
                  shoal_node_id(r->self), r->name, shard, node ? shoal_node_id(node) : "-",
                  (unsigned long long)epoch);
        shard_stop_now(s);
    }
    flush(r, h);
}

/* The handoffs a coordinator began and did not finish are void once another coordinator (a new
   node, or a new term on the same node) decides: the regions that buffer for them ask it where
   the shards are. Without this a region kept buffering for ever (chaos seed 1827442800: the
   coordinator fenced itself mid-handoff and came back as a new term on the same node; the shard's
   messages timed out for minutes on every region that had seen the BeginHandOff). */
static void void_handoffs(shoal_region_t *r)
{
    for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes))
        if (h->handing_off) {
            h->handing_off = false;
            h->asked_at = 0;
        }
}

void region_on_control(shoal_region_t *r, const shoal_node_t *from,
                       const Shoal__Sharding__Control *m)
{
    const Shoal__Sharding__ShardHome *h0 = m->n_homes ? m->homes[0] : NULL;
    if (m->kind >= SHOAL__SHARDING__CONTROL__KIND__REGISTER_ACK &&
        m->kind <= SHOAL__SHARDING__CONTROL__KIND__SHUTDOWN_DONE && from == r->coord_node &&
        m->term > r->coord_term) {
        /* a coordinator term this region has not registered with: the singleton restarted on
           the same node (a new node is seen by check_coordinator) */
        if (r->coord_term && m->kind != SHOAL__SHARDING__CONTROL__KIND__REGISTER_ACK) {
            r->registered = false;
            r->register_sent_at = 0;
        }
        r->coord_term = m->term;
        void_handoffs(r);
    } else if (m->kind == SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES && m->n_homes == 0 &&
               from == r->coord_node && m->term && m->term == r->coord_term && r->registered) {
        /* the announcement a coordinator sends once it has read its state, at the term this
           region registered with: a new incarnation on the same node with the same term (the
           term is the host's up-number), as when the host fenced itself (its singleton stopped)
           and the fence was lifted. It knows none of the registrations of the one before and
           allocates only to regions registered with it: without registering again, no new
           shard, nor one of a downed region, got a home any more. It sends this before any
           REGISTER_ACK (it ignores registrations until its state is read, and one sender's
           messages keep their order), so it never undoes a registration with itself. */
        shoal_info("%s: sharding %s: the coordinator at %s started again (term %llu): "
                   "registering again",
                   shoal_node_id(r->self), r->name, shoal_node_id(from),
                   (unsigned long long)m->term);
        r->registered = false;
        r->register_sent_at = 0;
        void_handoffs(r);
    }
    switch (m->kind) {
    case SHOAL__SHARDING__CONTROL__KIND__REGISTER_ACK:
        if (from != r->coord_node)
            break;
        for (size_t i = 0; i < m->n_homes; i++) {
            const shoal_node_t *n = *m->homes[i]->region ? shoal_node_intern(m->homes[i]->region)
                                                         : NULL;
            if (n)
                learn_home(r, m->homes[i]->shard, n, m->homes[i]->epoch);
        }
        if (m->last && !r->registered) {
            r->registered = true;
            shoal_debug("%s: sharding %s: registered with the coordinator at %s",
                       shoal_node_id(r->self), r->name, shoal_node_id(from));
            /* ask again for every shard still waiting: the new coordinator never heard */
            for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes))
                if (h->buffer.head && !h->node && !h->handing_off) {
                    h->asked_at = 0;
                    ask_home(r, h);
                }
        }
        break;
    case SHOAL__SHARDING__CONTROL__KIND__REGISTER_NACK:
        if (!r->nack_logged) {
            r->nack_logged = true;
            shoal_error("%s: sharding %s: the coordinator refused this region: "
                       "number-of-shards %u differs from the cluster's",
                       shoal_node_id(r->self), r->name, r->s.number_of_shards);
        }
        break;
    case SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES:
        for (size_t i = 0; i < m->n_homes; i++) {
            const shoal_node_t *n = *m->homes[i]->region ? shoal_node_intern(m->homes[i]->region)
                                                         : NULL;
            learn_home(r, m->homes[i]->shard, n, m->homes[i]->epoch);
        }
        break;
    case SHOAL__SHARDING__CONTROL__KIND__HOST_SHARD: {
        if (r->proxy)
            break;
        home_t *h = home_get(r, h0->shard);
        if (h0->epoch < h->epoch) {
            r->stats.shards_refused_stale++;
            shoal_warning("%s: sharding %s: refused to host shard %s for a stale allocation",
                         shoal_node_id(r->self), r->name, h0->shard);
            break;
        }
        learn_home(r, h0->shard, r->self, h0->epoch);
        region_send_one(r, from, SHOAL__SHARDING__CONTROL__KIND__SHARD_STARTED, h0->shard, r->self,
                        h0->epoch);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__BEGIN_HANDOFF: {
        if (m->term && m->term < r->coord_term)
            break; /* from a coordinator term that is gone: its handoff will never finish */
        home_t *h = home_get(r, h0->shard);
        shoal_debug("%s: sharding %s: BeginHandOff of shard %s (coordinator %s): its messages "
                    "are buffered until the new home is known",
                    shoal_node_id(r->self), r->name, h0->shard, shoal_node_id(from));
        h->handing_off = true;
        h->handoff_since = shoal_now_ms();
        h->node = NULL;
        const shoal_node_t *owner = *h0->region ? shoal_node_intern(h0->region) : NULL;
        if (owner && owner != r->self) {
            r->stats.fences_sent++;
            region_send_one(r, owner, SHOAL__SHARDING__CONTROL__KIND__FENCE, h0->shard, r->self,
                            h0->epoch);
        }
        region_send_one(r, from, SHOAL__SHARDING__CONTROL__KIND__BEGIN_HANDOFF_ACK, h0->shard,
                        r->self, h0->epoch);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__FENCE: {
        shard_t *s = zhashx_lookup(r->shards, h0->shard);
        if (!s)
            break;
        for (size_t i = 0; i < s->n_fences; i++)
            if (s->fences[i] == from) {
                s->fences[i] = s->fences[--s->n_fences];
                break;
            }
        s->fenced = realloc(s->fenced, (s->n_fenced + 1) * sizeof *s->fenced);
        if (!s->fenced)
            abort();
        s->fenced[s->n_fenced++] = from;
        if (s->status == SH_FENCING && s->n_fences == 0)
            shard_begin_stop(s, true);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__HANDOFF: {
        shard_t *s = zhashx_lookup(r->shards, h0->shard);
        if (!s) {
            region_send_one(r, from, SHOAL__SHARDING__CONTROL__KIND__SHARD_STOPPED, h0->shard,
                            r->self, h0->epoch);
            break;
        }
        s->by_coordinator = true;
        s->handoff_to = from;
        if (s->status != SH_ACTIVE)
            break; /* a repeated HandOff: already on its way */
        shoal_debug("%s: sharding %s: HandOff of shard %s: fencing, then stopping its entities",
                    shoal_node_id(r->self), r->name, h0->shard);
        s->status = SH_FENCING;
        s->handoff_deadline = shoal_now_ms() + r->s.handoff_timeout_ms;
        free(s->fences);
        s->fences = calloc(m->n_fences + 1, sizeof *s->fences);
        s->n_fences = 0;
        for (size_t i = 0; i < m->n_fences; i++) {
            const shoal_node_t *n = shoal_node_intern(m->fences[i]);
            bool seen = n == r->self;
            for (size_t k = 0; k < s->n_fenced && !seen; k++)
                seen = s->fenced[k] == n;
            if (!seen && n && !sharding_removed(r->sh, n))
                s->fences[s->n_fences++] = n;
        }
        if (s->n_fences == 0)
            shard_begin_stop(s, true);
        break;
    }
    case SHOAL__SHARDING__CONTROL__KIND__SHUTDOWN_DONE:
        /* only from the coordinator of now: a late one from a term that moved away must not stop
           shards here that can still be handed off */
        if (from == r->coord_node && r->shutting_down && !r->shutdown_done) {
            /* nothing of this region to move, or nowhere to move it (every other region leaves
               too, or there is none): what is still here stops here, the graceful way, and the
               shutdown ends when it has, not at handoff-timeout */
            shards_stop_here(r);
            r->shutdown_done = true;
        }
        break;
    default:
        region_query_control(r, from, m);
        break;
    }
    drain_deferred(r);
}

/* ---------------------------------------------------------------------------------------------
 * The coordinator, found through the singleton
 */
static void singleton_start(shoal_singleton_t *s, uint64_t term, void *arg)
{
    (void)s;
    shoal_region_t *r = arg;
    if (!r->coord)
        r->coord = coordinator_new(r, term);
}

static void singleton_stop(shoal_singleton_t *s, void *arg)
{
    (void)s;
    shoal_region_t *r = arg;
    coordinator_free(&r->coord);
}

static void send_register(shoal_region_t *r)
{
    r->register_sent_at = shoal_now_ms();
    /* the shards hosted here, so a new coordinator learns allocations its read may have missed;
       chunked under the frame limit (10,000 shards do not fit one message) */
    size_t budget = shoal_system_max_message_bytes(r->sys) / 2;
    size_t n = zhashx_size(r->shards);
    Shoal__Sharding__ShardHome *hs = calloc(n + 1, sizeof *hs);
    Shoal__Sharding__ShardHome **hp = calloc(n + 1, sizeof *hp);
    if (!hs || !hp)
        abort();
    size_t i = 0, first = 0, bytes = 0;
    Shoal__Sharding__Control m;
    for (shard_t *s = zhashx_first(r->shards); s && i < n; s = zhashx_next(r->shards)) {
        shoal__sharding__shard_home__init(&hs[i]);
        hs[i].shard = s->id;
        hs[i].region = (char *)"";
        hs[i].epoch = s->epoch;
        hp[i] = &hs[i];
        bytes += strlen(s->id) + 16;
        i++;
        if (bytes >= budget) {
            region_control_init(r, &m, SHOAL__SHARDING__CONTROL__KIND__REGISTER);
            m.proxy = r->proxy;
            m.number_of_shards = r->s.number_of_shards;
            m.homes = hp + first;
            m.n_homes = i - first;
            m.last = false;
            region_send_control(r, r->coord_node, &m);
            first = i;
            bytes = 0;
        }
    }
    region_control_init(r, &m, SHOAL__SHARDING__CONTROL__KIND__REGISTER);
    m.proxy = r->proxy;
    m.number_of_shards = r->s.number_of_shards;
    m.homes = hp + first;
    m.n_homes = i - first;
    m.last = true;
    region_send_control(r, r->coord_node, &m);
    free(hs);
    free(hp);
}

static void check_coordinator(shoal_region_t *r, int64_t now)
{
    const shoal_node_t *host = shoal_singleton_host(r->singleton);
    if (host != r->coord_node) {
        r->coord_node = host;
        r->coord_term = 0; /* the new coordinator's term, whatever it is, comes with its ack */
        r->registered = false;
        r->register_sent_at = 0;
        /* requests to the old coordinator are void: ask the new one */
        for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes))
            h->asked_at = 0;
    }
    if (host && !r->registered &&
        (!r->register_sent_at || now - r->register_sent_at >= (int64_t)r->s.retry_interval_ms))
        send_register(r);
}

/* ---------------------------------------------------------------------------------------------
 * The tick
 */
static void pending_tick(shoal_region_t *r, int64_t now)
{
    int may = -1; /* shoal_cluster_may_host, asked once and only when a home needs it */
    for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes)) {
        if (h->handing_off && now - h->handoff_since > 2 * (int64_t)r->s.handoff_timeout_ms) {
            /* the coordinator gives a handoff handoff-timeout; one still open after twice that
               was abandoned (its coordinator went away before finishing): ask where it is */
            shoal_info("%s: sharding %s: shard %s: its handoff never finished: asking the "
                      "coordinator where it is", shoal_node_id(r->self), r->name, h->id);
            h->handing_off = false;
            h->asked_at = 0;
        }
        if (h->refused_here && !h->buffer.head && !h->node && !h->handing_off) {
            /* offered while this node could not host: ask where it is once it can (the
               coordinator may have moved it meanwhile; if not, the answer hosts it here) */
            if (may < 0)
                may = r->proxy ? 0 : shoal_cluster_may_host(r->sh->c);
            if (may)
                ask_home(r, h);
            continue;
        }
        if (!h->buffer.head)
            continue;
        if (h->node == r->self && !zhashx_lookup(r->shards, h->id) && !r->proxy &&
            !shoal_cluster_may_host(r->sh->c))
            h->node = NULL; /* fenced: ask the coordinator again once the fence is lifted */
        if (h->node && !h->handing_off) {
            if (h->node == r->self && !zhashx_lookup(r->shards, h->id) && !r->proxy)
                shard_host(r, h->id, h->epoch);
            flush(r, h);
        } else if (!h->handing_off) {
            ask_home(r, h);
        }
    }
}

static void graceful_tick(shoal_region_t *r, int64_t now);
static void region_stop_all(shoal_region_t *r, shoal_dead_letter_t why);

/* Times this node fenced itself (THE FENCE in membership.h), 0 when unknown. */
static uint64_t fences_so_far(shoal_region_t *r)
{
    shoal_cluster_stats_t st;
    return shoal_cluster_stats(r->sh->c, &st) == 0 ? st.fenced : 0;
}

/* A graceful leave hands its shards off while this member is Exiting: the leader moves a
   Leaving member to Exiting as soon as that has converged, which can be before the handoff has
   ended (at once when the leaver is the leader, and always when the coordinator moved away with
   the leave: the region registers with the new one first), and removes it only once it has
   confirmed its shutdown steps, the handoff among them. Stopping the shards at Exiting lost what
   waited in them and what the other regions had sent before their fences (they went on sending
   to this node until the coordinator, told the shards had stopped, moved them). Not when this
   node fenced itself since its shutdown began, or stalls: then the other side may reallocate its
   shards, and they stop here as for any node that may not host. */
/* Whether a member other than this node could take this region's shards: Up, of the region's
   role. Without one (the last member leaving, or every other one leaving too) no handoff can end:
   the coordinator singleton has nowhere to go and stops with the leave, so no ShutdownDone comes. */
static bool someone_to_hand_to(shoal_region_t *r)
{
    if (!r->sh->have_view)
        return true; /* unknown yet: keep them; handoff-timeout still bounds the wait */
    for (size_t i = 0; i < r->sh->view.n_members; i++) {
        const shoal_member_t *m = &r->sh->view.members[i];
        if (m->node != r->self && m->status == SHOAL_MEMBER_UP &&
            shoal_member_has_role(m, r->s.role))
            return true;
    }
    return false;
}

static bool exiting_handoff(shoal_region_t *r)
{
    return r->shutting_down && !r->shutdown_done && !r->proxy &&
           r->sh->self_status == SHOAL_MEMBER_EXITING && !shoal_cluster_paused(r->sh->c) &&
           fences_so_far(r) == r->fences_at_shutdown && someone_to_hand_to(r);
}

static void region_tick(shoal_region_t *r, int64_t now)
{
    if (r->stopped)
        return;
    region_asks_expire(r, now);
    if (now - r->slow_tick_at < TICK_SLOW_MS)
        return;
    r->slow_tick_at = now;
    check_coordinator(r, now);
    /* a node that may not act for the cluster (downed, frozen, shut out) hosts nothing: its
       shards are about to be, or already are, allocated elsewhere. Not a leaver that is
       Exiting in the middle of its handoff: see exiting_handoff */
    bool handing_over = zhashx_size(r->shards) && exiting_handoff(r);
    if (zhashx_size(r->shards) && r->sh->self_status >= SHOAL_MEMBER_EXITING &&
        r->sh->self_status != 0 && !handing_over) {
        shoal_warning("%s: sharding %s: this node is %s: stopping its %zu shards",
                     shoal_node_id(r->self), r->name, shoal_member_status_name(r->sh->self_status),
                     zhashx_size(r->shards));
        region_stop_all(r, SHOAL_DL_ENTITY_STOPPED);
    } else if (zhashx_size(r->shards) && !handing_over && !shoal_cluster_may_host(r->sh->c) &&
               r->sh->self_status != SHOAL_MEMBER_LEAVING) {
        shoal_warning("%s: sharding %s: this node may not act for the cluster (or is fenced): "
                     "stopping its %zu shards",
                     shoal_node_id(r->self), r->name, zhashx_size(r->shards));
        region_stop_all(r, SHOAL_DL_ENTITY_STOPPED);
    }
    shards_tick(r, now);
    pending_tick(r, now);
    graceful_tick(r, now);
    region_queries_tick(r, now);
    if (r->daemon_tick)
        r->daemon_tick(r, now);
    if (r->coord)
        coordinator_tick(r->coord);
    if (r->producers_tick)
        r->producers_tick(r, now);
    drain_deferred(r);
}

void region_tick_all(shoal_sharding_t *sh)
{
    int64_t now = shoal_now_ms();
    sh->self_status = shoal_cluster_self_status(sh->c);
    for (size_t i = 0; i < sh->n_regions; i++)
        region_tick(sh->regions[i], now);
}

void region_cluster_changed(shoal_region_t *r)
{
    if (r->stopped)
        return;
    check_coordinator(r, shoal_now_ms());
    if (r->coord)
        coordinator_cluster_changed(r->coord);
    pending_tick(r, shoal_now_ms());
}

void region_node_removed(shoal_region_t *r, const shoal_node_t *node)
{
    /* a removed node hosts nothing: forget homes there and ask again when needed */
    for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes))
        if (h->node == node) {
            h->node = NULL;
            h->asked_at = 0;
        }
    for (shard_t *s = zhashx_first(r->shards); s; s = zhashx_next(r->shards))
        for (size_t i = 0; i < s->n_fences; i++)
            if (s->fences[i] == node) {
                s->fences[i] = s->fences[--s->n_fences];
                if (s->status == SH_FENCING && s->n_fences == 0)
                    shard_begin_stop(s, true);
                break;
            }
}

/* Stops every hosted shard here at once (downed, destroyed), dead-lettering what waits. */
static void region_stop_all(shoal_region_t *r, shoal_dead_letter_t why)
{
    (void)why;
    size_t n = zhashx_size(r->shards);
    if (!n)
        return;
    shard_t **all = calloc(n, sizeof *all);
    if (!all)
        abort();
    size_t i = 0;
    for (shard_t *s = zhashx_first(r->shards); s && i < n; s = zhashx_next(r->shards))
        all[i++] = s;
    for (size_t k = 0; k < i; k++) {
        /* nobody hosts it from here on as far as this region knows */
        home_t *h = zhashx_lookup(r->homes, all[k]->id);
        if (h && h->node == r->self)
            h->node = NULL;
        shard_stop_now(all[k]);
    }
    free(all);
}

/* ---------------------------------------------------------------------------------------------
 * Graceful shutdown of the region
 */
typedef struct waiter {
    struct waiter *next;
    shoal_task_done_fn *done;
    void *done_arg;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    bool *flag;
} waiter_t;

static void graceful_finish(shoal_region_t *r, bool timed_out)
{
    if (timed_out)
        shoal_warning("%s: sharding %s: graceful shutdown timed out with %zu shards still here; "
                     "stopping them here",
                     shoal_node_id(r->self), r->name, zhashx_size(r->shards));
    region_stop_all(r, SHOAL_DL_REGION_STOPPING);
    r->shutdown_done = true;
    r->shutdown_timed_out = timed_out;
    pthread_mutex_lock(&r->qlock);
    r->closed = true;
    pthread_mutex_unlock(&r->qlock);
    waiter_t *w = r->waiters;
    r->waiters = NULL;
    while (w) {
        waiter_t *next = w->next;
        if (w->done) {
            w->done(w->done_arg);
        } else {
            pthread_mutex_lock(w->mu);
            *w->flag = true;
            pthread_cond_broadcast(w->cv);
            pthread_mutex_unlock(w->mu);
        }
        free(w);
        w = next;
    }
}

static void graceful_tick(shoal_region_t *r, int64_t now)
{
    if (!r->shutting_down || !r->waiters)
        return;
    if (r->proxy) {
        graceful_finish(r, false);
        return;
    }
    if (r->shutdown_done && zhashx_size(r->shards) == 0) {
        graceful_finish(r, false);
        return;
    }
    if (now >= r->shutdown_deadline) {
        graceful_finish(r, true);
        return;
    }
    if (r->coord_node && r->registered &&
        now - r->shutdown_sent_at >= (int64_t)r->s.retry_interval_ms) {
        r->shutdown_sent_at = now;
        Shoal__Sharding__Control m;
        region_control_init(r, &m, SHOAL__SHARDING__CONTROL__KIND__GRACEFUL_SHUTDOWN);
        region_send_control(r, r->coord_node, &m);
    }
}

static void graceful_start(shoal_region_t *r, waiter_t *w)
{
    w->next = r->waiters;
    r->waiters = w;
    if (!r->shutting_down) {
        r->shutting_down = true;
        r->shutdown_done = false;
        r->shutdown_deadline = shoal_now_ms() + r->s.handoff_timeout_ms;
        r->shutdown_sent_at = 0;
        r->fences_at_shutdown = fences_so_far(r);
        shoal_info("%s: sharding %s: graceful shutdown: handing off %zu shards",
                  shoal_node_id(r->self), r->name, zhashx_size(r->shards));
    } else if (r->shutdown_done && !r->waiters->next) {
        /* already finished earlier: answer at the next tick */
        r->shutdown_done = zhashx_size(r->shards) == 0;
    }
    graceful_tick(r, shoal_now_ms());
}

static void phase_task(shoal_cluster_t *c, shoal_shutdown_reason_t why, shoal_task_done_fn *done,
                       void *done_arg, void *arg)
{
    (void)c;
    shoal_region_t *r = arg;
    if (why == SHOAL_SHUTDOWN_DOWNED || r->stopped) {
        /* downed: the others take the shards over; nothing to hand to them */
        region_stop_all(r, SHOAL_DL_REGION_STOPPING);
        done(done_arg);
        return;
    }
    waiter_t *w = calloc(1, sizeof *w);
    if (!w)
        abort();
    w->done = done;
    w->done_arg = done_arg;
    graceful_start(r, w);
}

typedef struct {
    shoal_region_t *r;
    waiter_t *w;
} shutdown_ctx_t;

static int shutdown_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shutdown_ctx_t *x = arg;
    graceful_start(x->r, x->w);
    return 0;
}

typedef struct {
    shoal_region_t *r;
    const char *const *shards;
    size_t n;
} stop_shards_t;

static int stop_shards_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    stop_shards_t *x = arg;
    shoal_region_t *r = x->r;
    if (!r->coord_node)
        return SHOAL_ENOTCONN;
    Shoal__Sharding__Control m;
    region_control_init(r, &m, SHOAL__SHARDING__CONTROL__KIND__STOP_SHARDS);
    m.shard_ids = (char **)x->shards;
    m.n_shard_ids = x->n;
    int rc = region_send_control(r, r->coord_node, &m);
    return rc < 0 ? rc : 0;
}

int shoal_region_stop_shards(shoal_region_t *r, const char *const *shards, size_t n)
{
    if (!r || (n && !shards))
        return SHOAL_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!shards[i] || !*shards[i] || strlen(shards[i]) > SHOAL_SHARD_ID_MAX)
            return SHOAL_EINVAL;
    stop_shards_t x = {r, shards, n};
    return shoal_system_on_thread(r->sys) ? stop_shards_on_node(r->sys, &x)
                                          : shoal_system_call(r->sys, stop_shards_on_node, &x);
}

int shoal_region_shutdown(shoal_region_t *r)
{
    if (!r)
        return SHOAL_EINVAL;
    if (shoal_system_on_thread(r->sys))
        return SHOAL_EDEADLK;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    bool flag = false;
    waiter_t *w = calloc(1, sizeof *w);
    if (!w)
        abort();
    w->mu = &mu;
    w->cv = &cv;
    w->flag = &flag;
    shutdown_ctx_t x = {r, w};
    int rc = shoal_system_call(r->sys, shutdown_on_node, &x);
    if (rc < 0) {
        free(w);
        return rc;
    }
    pthread_mutex_lock(&mu);
    while (!flag)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return r->shutdown_timed_out ? SHOAL_ETIMEOUT : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Tells and asks
 */
typedef struct {
    uint8_t op; /* 1 tell, 2 ask, 3 start entity */
    uint8_t eid_len;
    uint32_t len;
    uint32_t timeout_ms;
    shoal_ask_done_fn *done;
    void *arg;
} inrec_t;

static int submit(shoal_region_t *r, const char *eid, uint8_t flags, const void *msg, size_t len,
                  uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg)
{
    if (r->stopped || r->shutdown_done)
        return SHOAL_ESTOPPED;
    uint64_t ask_id = 0;
    if (done)
        ask_id = region_ask_new(r, timeout_ms, done, arg)->id;
    else
        r->stats.tells++;
    if (r->sh->depth > 0) {
        defer(r, eid, flags, ask_id, msg, len);
        return 0;
    }
    int rc = route_new(r, eid, flags, ask_id, msg, len);
    if (rc < 0 && ask_id) {
        /* the dead letter already failed the ask through its done: report it once only */
        return 0;
    }
    drain_deferred(r);
    return rc;
}

static int drain_inbound(shoal_system_t *sys, void *arg)
{
    (void)sys;
    shoal_region_t *r = arg;
    pthread_mutex_lock(&r->qlock);
    shoal_buf_t q = r->inq;
    shoal_buf_init(&r->inq);
    r->inq_posted = false;
    /* still counted against buffer-size until routed: otherwise a producer could queue a second
       buffer's worth while this batch is being sent, and the surplus would become dead letters
       after it was accepted */
    __atomic_store_n(&r->inq_draining, r->inq_count, __ATOMIC_RELAXED);
    r->inq_count = 0;
    pthread_mutex_unlock(&r->qlock);
    size_t at = 0;
    while (at + sizeof(inrec_t) <= q.len) {
        inrec_t h;
        memcpy(&h, q.data + at, sizeof h);
        at += sizeof h;
        char eid[SHOAL_ENTITY_ID_MAX + 1];
        memcpy(eid, q.data + at, h.eid_len);
        eid[h.eid_len] = 0;
        at += h.eid_len;
        const uint8_t *data = q.data + at;
        at += h.len;
        __atomic_fetch_sub(&r->inq_draining, 1, __ATOMIC_RELAXED);
        if (h.op == 4) {
            r->stats.tells++;
            region_dead_letter(r, SHOAL_DL_BUFFER_FULL, eid, data, h.len, NULL, 0);
            continue;
        }
        uint8_t flags = h.op == 3 ? ENV_START : h.op == 5 ? ENV_RELIABLE : 0;
        bool asks = h.op == 2 || h.op == 5;
        int rc = submit(r, eid, flags, data, h.len, h.timeout_ms, asks ? h.done : NULL, h.arg);
        if (rc < 0 && asks && h.done)
            h.done(r, rc, NULL, 0, h.arg);
    }
    shoal_buf_free(&q);
    return 0;
}

static int enqueue_inbound(shoal_region_t *r, uint8_t op, const char *eid, const void *msg,
                           size_t len, uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg)
{
    inrec_t h = {op, (uint8_t)strlen(eid), (uint32_t)len, timeout_ms, done, arg};
    pthread_mutex_lock(&r->qlock);
    if (r->closed) {
        pthread_mutex_unlock(&r->qlock);
        return SHOAL_ESTOPPED;
    }
    /* what waits here and what the region already buffers share buffer-size */
    size_t buffered = __atomic_load_n(&r->buffered, __ATOMIC_RELAXED) +
                      __atomic_load_n(&r->inq_draining, __ATOMIC_RELAXED);
    bool full = r->inq_count + buffered >= r->s.buffer_size;
    if (full && (op != 1 || r->inq_count >= 2 * (size_t)r->s.buffer_size)) {
        pthread_mutex_unlock(&r->qlock);
        if (op == 1)
            __atomic_fetch_add(&r->refused_uncounted, 1, __ATOMIC_RELAXED);
        return SHOAL_EBUFFER;
    }
    if (full)
        h.op = 4; /* refused: the node thread raises its dead letter (subscribers run there) */
    shoal_buf_reserve(&r->inq, sizeof h + h.eid_len + len);
    shoal_buf_append(&r->inq, &h, sizeof h);
    shoal_buf_append(&r->inq, eid, h.eid_len);
    if (len)
        shoal_buf_append(&r->inq, msg, len);
    r->inq_count++;
    bool post = !r->inq_posted;
    int result = h.op == 4 ? SHOAL_EBUFFER : 0;
    r->inq_posted = true;
    pthread_mutex_unlock(&r->qlock);
    if (post) {
        int rc = shoal_system_post(r->sys, drain_inbound, r);
        if (rc < 0) {
            /* the node is stopping (or swamped by other calls): take back what we queued so
               the caller hears of it */
            pthread_mutex_lock(&r->qlock);
            r->inq_posted = false;
            pthread_mutex_unlock(&r->qlock);
            return rc;
        }
    }
    return result;
}

static int resolve_eid(shoal_region_t *r, const char *entity_id, const void *msg, size_t len,
                       char *out)
{
    if (!entity_id) {
        if (!r->s.entity_id || r->s.entity_id(msg, len, out, r->s.entity_id_arg) != 0)
            return SHOAL_EINVAL;
        out[SHOAL_ENTITY_ID_MAX] = 0;
        return eid_ok(out) ? 0 : SHOAL_EINVAL;
    }
    size_t n = eid_len(entity_id);
    if (!n)
        return SHOAL_EINVAL;
    memcpy(out, entity_id, n + 1);
    return 0;
}

static bool msg_fits(shoal_region_t *r, size_t len)
{
    return len + SHOAL_ENTITY_ID_MAX + SHOAL_SHARD_ID_MAX + 300 <=
           shoal_system_max_message_bytes(r->sys);
}

int shoal_region_tell(shoal_region_t *r, const char *entity_id, const void *msg, size_t len)
{
    char eid[SHOAL_ENTITY_ID_MAX + 1];
    if (!r || (len && !msg) || resolve_eid(r, entity_id, msg, len, eid) != 0)
        return SHOAL_EINVAL;
    if (!msg_fits(r, len))
        return SHOAL_ETOOBIG;
    if (shoal_system_on_thread(r->sys))
        return submit(r, eid, 0, msg, len, 0, NULL, NULL);
    return enqueue_inbound(r, 1, eid, msg, len, 0, NULL, NULL);
}

int shoal_region_ask(shoal_region_t *r, const char *entity_id, const void *msg, size_t len,
                     uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg)
{
    char eid[SHOAL_ENTITY_ID_MAX + 1];
    if (!r || !done || (len && !msg) || resolve_eid(r, entity_id, msg, len, eid) != 0)
        return SHOAL_EINVAL;
    return region_ask_flags(r, eid, 0, msg, len, timeout_ms, done, arg);
}

int region_ask_flags(shoal_region_t *r, const char *eid, uint8_t flags, const void *msg,
                     size_t len, uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg)
{
    if (!r || !done || !eid_ok(eid) || (len && !msg))
        return SHOAL_EINVAL;
    if (!msg_fits(r, len))
        return SHOAL_ETOOBIG;
    if (shoal_system_on_thread(r->sys))
        return submit(r, eid, flags, msg, len, timeout_ms, done, arg);
    return enqueue_inbound(r, flags & ENV_RELIABLE ? 5 : 2, eid, msg, len, timeout_ms, done, arg);
}

int shoal_region_start_entity(shoal_region_t *r, const char *entity_id)
{
    if (!r || !eid_ok(entity_id))
        return SHOAL_EINVAL;
    if (shoal_system_on_thread(r->sys))
        return submit(r, entity_id, ENV_START, NULL, 0, 0, NULL, NULL);
    return enqueue_inbound(r, 3, entity_id, NULL, 0, 0, NULL, NULL);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int status;
    shoal_buf_t *reply;
} sync_ask_t;

static void sync_ask_done(shoal_region_t *r, int status, const void *reply, size_t len, void *arg)
{
    (void)r;
    sync_ask_t *x = arg;
    pthread_mutex_lock(&x->mu);
    x->status = status;
    if (x->reply) {
        shoal_buf_reset(x->reply);
        if (len)
            shoal_buf_append(x->reply, reply, len);
    }
    x->done = true;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

int shoal_region_ask_sync(shoal_region_t *r, const char *entity_id, const void *msg, size_t len,
                          uint32_t timeout_ms, shoal_buf_t *reply)
{
    if (!r)
        return SHOAL_EINVAL;
    if (shoal_system_on_thread(r->sys))
        return SHOAL_EDEADLK;
    sync_ask_t x = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, reply};
    int rc = shoal_region_ask(r, entity_id, msg, len, timeout_ms, sync_ask_done, &x);
    if (rc < 0)
        return rc;
    /* done runs exactly once (the ask's own timeout bounds it), unless the node stops first */
    pthread_mutex_lock(&x.mu);
    while (!x.done)
        pthread_cond_wait(&x.cv, &x.mu);
    pthread_mutex_unlock(&x.mu);
    return x.status;
}

/* ---------------------------------------------------------------------------------------------
 * Subscriptions, stats, state
 */
typedef struct {
    shoal_region_t *r;
    shoal_dead_letter_fn *fn;
    shoal_shard_moved_fn *mfn;
    void *arg;
} sub_ctx_t;

static int sub_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    sub_ctx_t *x = arg;
    shoal_region_t *r = x->r;
    if (x->fn) {
        r->dl_subs = realloc(r->dl_subs, (r->n_dl_subs + 1) * sizeof *r->dl_subs);
        if (!r->dl_subs)
            abort();
        r->dl_subs[r->n_dl_subs].id = ++r->next_sub_id;
        r->dl_subs[r->n_dl_subs].fn = x->fn;
        r->dl_subs[r->n_dl_subs].arg = x->arg;
        r->n_dl_subs++;
    } else {
        r->moved_subs = realloc(r->moved_subs, (r->n_moved_subs + 1) * sizeof *r->moved_subs);
        if (!r->moved_subs)
            abort();
        r->moved_subs[r->n_moved_subs].fn = x->mfn;
        r->moved_subs[r->n_moved_subs].arg = x->arg;
        r->n_moved_subs++;
        ++r->next_sub_id;
    }
    return r->next_sub_id;
}

static int on_node(shoal_region_t *r, shoal_call_fn *fn, void *arg)
{
    return shoal_system_on_thread(r->sys) ? fn(r->sys, arg) : shoal_system_call(r->sys, fn, arg);
}

int shoal_region_on_dead_letter(shoal_region_t *r, shoal_dead_letter_fn *fn, void *arg)
{
    if (!r || !fn)
        return SHOAL_EINVAL;
    sub_ctx_t x = {r, fn, NULL, arg};
    return on_node(r, sub_on_node, &x);
}

int shoal_region_on_shard_moved(shoal_region_t *r, shoal_shard_moved_fn *fn, void *arg)
{
    if (!r || !fn)
        return SHOAL_EINVAL;
    sub_ctx_t x = {r, NULL, fn, arg};
    return on_node(r, sub_on_node, &x);
}

typedef struct {
    shoal_region_t *r;
    shoal_region_stats_t *out;
} stats_ctx_t;

static int stats_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    stats_ctx_t *x = arg;
    shoal_region_t *r = x->r;
    *x->out = r->stats;
    x->out->dead_letters[SHOAL_DL_BUFFER_FULL] +=
        __atomic_load_n(&r->refused_uncounted, __ATOMIC_RELAXED);
    x->out->buffered = r->buffered;
    x->out->shards = zhashx_size(r->shards);
    uint64_t ne = 0;
    for (shard_t *s = zhashx_first(r->shards); s; s = zhashx_next(r->shards))
        ne += shard_n_entities(s);
    x->out->entities = ne;
    if (r->coord)
        coordinator_stats(r->coord, x->out);
    return 0;
}

int shoal_region_stats(shoal_region_t *r, shoal_region_stats_t *out)
{
    if (!r || !out)
        return SHOAL_EINVAL;
    stats_ctx_t x = {r, out};
    return on_node(r, stats_on_node, &x);
}

typedef struct {
    shoal_region_t *r;
    bool with_entities;
    shoal_region_state_t *out;
} state_ctx_t;

static int state_on_node(shoal_system_t *sys, void *arg)
{
    (void)sys;
    state_ctx_t *x = arg;
    region_fill_state(x->r, x->with_entities, x->out);
    return 0;
}

int shoal_region_state(shoal_region_t *r, bool with_entities, shoal_region_state_t *out)
{
    if (!r || !out)
        return SHOAL_EINVAL;
    memset(out, 0, sizeof *out);
    state_ctx_t x = {r, with_entities, out};
    return on_node(r, state_on_node, &x);
}

const char *shoal_region_type_name(const shoal_region_t *r)
{
    return r ? r->name : NULL;
}

bool shoal_region_is_proxy(const shoal_region_t *r)
{
    return r && r->proxy;
}

/* ---------------------------------------------------------------------------------------------
 * Creating and stopping
 */
static void shard_destroy_fn(void **item)
{
    shard_t *s = *item;
    if (s)
        shard_free(s);
    *item = NULL;
}

shoal_region_t *region_new(shoal_sharding_t *sh, const char *name,
                           const shoal_sharding_settings_t *s, const shoal_entity_fns_t *fns,
                           void *arg, bool proxy, int *err)
{
    if (!s->number_of_shards || !s->buffer_size || !s->retry_interval_ms ||
        !s->handoff_timeout_ms || !s->rebalance_interval_ms || (s->stop_message_len && !s->stop_message)) {
        *err = SHOAL_EINVAL;
        return NULL;
    }
    shoal_region_t *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->lat = calloc(1, sizeof *r->lat);
    if (!r->lat)
        abort();
    r->sh = sh;
    r->sys = sh->sys;
    r->self = sh->self;
    r->name = strdup(name);
    r->type_hash = wire_type_hash(name);
    r->lifecycle = &entity_lifecycle;
    r->route = route;
    r->s = *s;
    r->s.role = strdup(s->role ? s->role : "");
    if (s->stop_message) {
        void *copy = malloc(s->stop_message_len ? s->stop_message_len : 1);
        if (!copy)
            abort();
        memcpy(copy, s->stop_message, s->stop_message_len);
        r->s.stop_message = copy;
    }
    if (fns)
        r->fns = *fns;
    r->arg = arg;
    r->active_entity_limit = s->passivation.active_entity_limit;
    /* a node without the type's role routes only (Akka: a proxy) */
    const shoal_cluster_settings_t *cs = shoal_cluster_settings(sh->c);
    bool has_role = !*r->s.role;
    for (size_t i = 0; cs && i < cs->n_roles && !has_role; i++)
        has_role = strcmp(cs->roles[i], r->s.role) == 0;
    r->proxy = proxy || !has_role;
    r->homes = zhashx_new();
    zhashx_set_destructor(r->homes, home_destroy);
    r->shards = zhashx_new();
    zhashx_set_destructor(r->shards, shard_destroy_fn);
    r->asks = zhashx_new();
    zhashx_set_key_hasher(r->asks, (zhashx_hash_fn *)region_ask_hash);
    zhashx_set_key_comparator(r->asks, region_ask_cmp);
    zhashx_set_key_duplicator(r->asks, NULL);
    zhashx_set_key_destructor(r->asks, NULL);
    pthread_mutex_init(&r->qlock, NULL);
    r->rep = s->replicator;
    /* one replicator per role on a node: a type of a role that already has one shares it */
    for (size_t i = 0; !r->rep && i < sh->n_regions; i++)
        if (strcmp(sh->regions[i]->s.role, r->s.role) == 0)
            r->rep = sh->regions[i]->rep;
    if (!r->rep) {
        /* the role's replicator with sharding's overrides of distributed-data (or the file's) */
        shoal_replicator_settings_t rs;
        if (r->s.replicator_settings)
            rs = *r->s.replicator_settings;
        else
            shoal_sharding_replicator_settings_default(&rs);
        r->s.replicator_settings = NULL; /* the caller's memory: read only here */
        rs.role = r->s.role;
        if (!rs.gossip_interval_ms)
            rs.gossip_interval_ms = cs ? cs->gossip_interval_ms : 2000; /* ddata's default */
        if (!rs.delta_interval_ms)
            rs.delta_interval_ms = rs.gossip_interval_ms / 5 ? rs.gossip_interval_ms / 5 : 1;
        int e = 0;
        r->rep = shoal_replicator_new(sh->sys, &rs, &e);
        if (!r->rep) {
            shoal_error("%s: sharding %s: cannot start the replicator of role '%s': %s (pass the "
                       "role's replicator in the settings)",
                       shoal_node_id(r->self), name, r->s.role, shoal_strerror(e));
            *err = e;
            region_free(r);
            return NULL;
        }
        /* owned by the node's sharding, which outlives every region sharing it; capped as
           shoal_sharding_set_replicator_limits said (under lock: it may run on another thread) */
        pthread_mutex_lock(&sh->lock);
        sh->owned_reps = realloc(sh->owned_reps, (sh->n_owned_reps + 1) * sizeof *sh->owned_reps);
        if (!sh->owned_reps)
            abort();
        sh->owned_reps[sh->n_owned_reps++] = r->rep;
        shoal_replicator_limits_t lim = sh->rep_limits;
        pthread_mutex_unlock(&sh->lock);
        if (lim.max_keys || lim.max_bytes)
            shoal_replicator_set_limits(r->rep, &lim);
        shoal_cluster_follow(sh->c, r->rep);
    }
    char sname[256];
    snprintf(sname, sizeof sname, "sharding-coordinator-%s", name);
    r->singleton = shoal_singleton_new(sh->c, sname, r->s.role, singleton_start, singleton_stop, r);
    shoal_cluster_add_task(sh->c, SHOAL_PHASE_SHARDING, sname, phase_task, r);
    shoal_info("%s: sharding %s started (%s, role '%s', %u shards)", shoal_node_id(r->self), name,
              r->proxy ? "proxy" : "region", r->s.role, r->s.number_of_shards);
    check_coordinator(r, shoal_now_ms());
    *err = 0;
    return r;
}

/* Node thread: stop serving (entities stopped, buffers dead-lettered, asks failed). */
void region_stop(shoal_region_t *r)
{
    if (r->stopped)
        return;
    region_stop_all(r, SHOAL_DL_REGION_STOPPING);
    if (r->producers_stopped)
        r->producers_stopped(r);
    r->stopped = true;
    pthread_mutex_lock(&r->qlock);
    r->closed = true;
    pthread_mutex_unlock(&r->qlock);
    for (home_t *h = zhashx_first(r->homes); h; h = zhashx_next(r->homes)) {
        bmsg_t *m;
        while ((m = bq_pop(&h->buffer))) {
            r->buffered--;
            dead_letter_bmsg(r, SHOAL_DL_REGION_STOPPING, m);
        }
    }
    bmsg_t *m;
    while ((m = bq_pop(&r->deferred)))
        dead_letter_bmsg(r, SHOAL_DL_REGION_STOPPING, m);
    while (r->asks_oldest)
        region_ask_complete(r, r->asks_oldest->id, SHOAL_ESTOPPED, NULL, 0);
    if (r->waiters)
        graceful_finish(r, false);
    coordinator_free(&r->coord);
    shoal_singleton_destroy(&r->singleton);
    shoal_cluster_remove_task(r->sh->c, phase_task, r);
}

void region_free(shoal_region_t *r)
{
    if (!r)
        return;
    coordinator_free(&r->coord);
    life_end(&r->life);
    region_queries_free(r);
    free(r->home_by_num);
    zhashx_destroy(&r->homes);
    zhashx_destroy(&r->shards);
    for (ask_t *a = r->asks_oldest; a;) {
        ask_t *next = a->next_by_time;
        free(a);
        a = next;
    }
    zhashx_destroy(&r->asks);
    bmsg_t *m;
    while ((m = bq_pop(&r->deferred)))
        free(m);
    shoal_buf_free(&r->inq);
    pthread_mutex_destroy(&r->qlock);
    free(r->dl_subs);
    free(r->moved_subs);
    free((void *)r->s.role);
    free((void *)r->s.stop_message);
    free(r->name);
    free(r->lat);
    free(r);
}
