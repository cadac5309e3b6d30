/*  outbox.c — what leaves a region, and the asks waiting for an answer: control messages to the
    coordinator and to other regions (to this node's own through a post, see below), replies to
    asks (remote ones on the wire, this node's own completed here), dead letters and shard moves
    told to the region's subscribers.

    Every file that acts for a region (its shards and entities, the coordinator it may run, the
    queries, the entity-state and remember-entities stores) sends through here, so these calls
    sit below all of them. Node thread only.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sharding_internal.h"

/* ---------------------------------------------------------------------------------------------
 * Control messages
 */
void region_control_init(shoal_region_t *r, Shoal__Sharding__Control *m,
                         Shoal__Sharding__Control__Kind kind)
{
    shoal__sharding__control__init(m);
    m->kind = kind;
    m->type_name = r->name;
}

/* A control message about one shard (homes[0]); the coordinator adds its term and, for a
   HandOff, the regions whose fences the owner waits for. */
int region_send_home(shoal_region_t *r, const shoal_node_t *to, Shoal__Sharding__Control__Kind kind,
                     const char *shard, const shoal_node_t *region, uint64_t epoch, uint64_t term,
                     const shoal_node_t *const *fences, size_t n_fences)
{
    Shoal__Sharding__Control m;
    region_control_init(r, &m, kind);
    m.term = term;
    Shoal__Sharding__ShardHome h = SHOAL__SHARDING__SHARD_HOME__INIT;
    Shoal__Sharding__ShardHome *hp = &h;
    h.shard = (char *)shard;
    h.region = (char *)(region ? shoal_node_id(region) : "");
    h.epoch = epoch;
    m.homes = &hp;
    m.n_homes = 1;
    char *stackfs[16];
    char **fs = n_fences <= 16 ? stackfs : calloc(n_fences, sizeof *fs);
    if (!fs)
        abort();
    for (size_t i = 0; i < n_fences; i++)
        fs[i] = (char *)shoal_node_id(fences[i]);
    m.fences = fs;
    m.n_fences = n_fences;
    int rc = region_send_control(r, to, &m);
    if (fs != stackfs)
        free(fs);
    return rc;
}

/* The same with no term and no fences: what a region sends. */
int region_send_one(shoal_region_t *r, const shoal_node_t *to, Shoal__Sharding__Control__Kind kind,
                    const char *shard, const shoal_node_t *region, uint64_t epoch)
{
    return region_send_home(r, to, kind, shard, region, epoch, 0, NULL, 0);
}

/* To this node's own coordinator or region, a post to sharding.c's deliver_self (the node's
   dispatcher of control messages) rather than a call: a region and its own node's coordinator
   talk the same way as remote ones (no re-entrancy, the decoder on every path). */
int region_send_control(shoal_region_t *r, const shoal_node_t *to, Shoal__Sharding__Control *m)
{
    if (r->stopped)
        return SHOAL_ESTOPPED;
    size_t n = shoal__sharding__control__get_packed_size(m);
    if (to == r->self) {
        self_msg_t *x = malloc(sizeof *x + n);
        if (!x)
            abort();
        x->sh = r->sh;
        x->from = r->self;
        x->len = n;
        shoal__sharding__control__pack(m, x->data);
        int rc = shoal_system_post(r->sys, r->sh->deliver_self, x);
        if (rc < 0)
            free(x);
        return rc;
    }
    uint8_t stackbuf[512];
    uint8_t *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf)
        abort();
    shoal__sharding__control__pack(m, buf);
    int rc = shoal_system_send(r->sys, to, K_SH_CONTROL, buf, n);
    if (buf != stackbuf)
        free(buf);
    if (rc < 0 && rc != SHOAL_ENOTCONN)
        shoal_debug("%s: sharding %s: control %d to %s: %s", shoal_node_id(r->self), r->name,
                   (int)m->kind, shoal_node_id(to), shoal_strerror(rc));
    return rc;
}

void region_report_fenced(shoal_region_t *r, const char *shard, uint64_t epoch,
                          uint64_t fenced_at)
{
    if (!r->registered || !r->coord_node)
        return; /* the next failed fence tells it */
    Shoal__Sharding__Control m;
    region_control_init(r, &m, SHOAL__SHARDING__CONTROL__KIND__SHARD_FENCED);
    Shoal__Sharding__ShardHome h = SHOAL__SHARDING__SHARD_HOME__INIT;
    Shoal__Sharding__ShardHome *hp = &h;
    h.shard = (char *)shard;
    h.region = (char *)shoal_node_id(r->self);
    h.epoch = epoch;
    m.homes = &hp;
    m.n_homes = 1;
    m.fenced_at = fenced_at;
    region_send_control(r, r->coord_node, &m);
}

/* ---------------------------------------------------------------------------------------------
 * Asks of this node
 */
uint64_t region_ask_hash(const void *key)
{
    uint64_t x = (uint64_t)(uintptr_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    return (size_t)(x ^ (x >> 33));
}

int region_ask_cmp(const void *a, const void *b)
{
    return a == b ? 0 : (a < b ? -1 : 1);
}

ask_t *region_ask_new(shoal_region_t *r, uint32_t timeout_ms, shoal_ask_done_fn *done, void *arg)
{
    ask_t *a = calloc(1, sizeof *a);
    if (!a)
        abort();
    a->id = ++r->next_ask_id;
    a->deadline = shoal_now_ms() + (timeout_ms ? timeout_ms : 1);
    a->started_us = shoal_hist_now_us();
    a->done = done;
    a->arg = arg;
    /* keep the list ordered by deadline: asks mostly share a timeout, so this walks ~0 steps */
    ask_t *after = r->asks_newest;
    while (after && after->deadline > a->deadline)
        after = after->prev_by_time;
    a->prev_by_time = after;
    a->next_by_time = after ? after->next_by_time : r->asks_oldest;
    if (a->next_by_time)
        a->next_by_time->prev_by_time = a;
    else
        r->asks_newest = a;
    if (after)
        after->next_by_time = a;
    else
        r->asks_oldest = a;
    zhashx_insert(r->asks, (void *)(uintptr_t)a->id, a);
    r->stats.asks++;
    return a;
}

static void ask_unlink(shoal_region_t *r, ask_t *a)
{
    if (a->prev_by_time)
        a->prev_by_time->next_by_time = a->next_by_time;
    else
        r->asks_oldest = a->next_by_time;
    if (a->next_by_time)
        a->next_by_time->prev_by_time = a->prev_by_time;
    else
        r->asks_newest = a->prev_by_time;
    zhashx_delete(r->asks, (void *)(uintptr_t)a->id);
}

void region_ask_complete(shoal_region_t *r, uint64_t id, int status, const void *reply, size_t len)
{
    ask_t *a = zhashx_lookup(r->asks, (void *)(uintptr_t)id);
    if (!a)
        return; /* timed out already, or a duplicate */
    ask_unlink(r, a);
    if (status == SHOAL_ETIMEOUT)
        r->stats.asks_timed_out++;
    else if (status == 0)
        r->stats.replies++;
    shoal_hist_record_since(&r->lat->ask, a->started_us); /* timeouts too: they are the tail */
    /* no depth raise: asks and tells from a completion go out at once (an entity that replied
       to a local ask from its own callback has raised it already) */
    a->done(r, status, reply, len, a->arg);
    free(a);
}

void region_asks_expire(shoal_region_t *r, int64_t now)
{
    while (r->asks_oldest && r->asks_oldest->deadline <= now)
        region_ask_complete(r, r->asks_oldest->id, SHOAL_ETIMEOUT, NULL, 0);
}

/* ---------------------------------------------------------------------------------------------
 * Replies and dead letters
 */
const char *shoal_dead_letter_name(shoal_dead_letter_t reason)
{
    switch (reason) {
    case SHOAL_DL_BUFFER_FULL: return "buffer-full";
    case SHOAL_DL_REGION_STOPPING: return "region-stopping";
    case SHOAL_DL_ENTITY_STOPPED: return "entity-stopped";
    case SHOAL_DL_SHARD_FAILED: return "shard-failed";
    case SHOAL_DL_SEND_FAILED: return "send-failed";
    case SHOAL_DL_UNKNOWN_TYPE: return "unknown-type";
    case SHOAL_DL_MALFORMED: return "malformed";
    default: return "unknown";
    }
}

static int dl_status(shoal_dead_letter_t why)
{
    switch (why) {
    case SHOAL_DL_BUFFER_FULL: return SHOAL_EBUFFER;
    case SHOAL_DL_REGION_STOPPING: return SHOAL_ESTOPPED;
    case SHOAL_DL_UNKNOWN_TYPE: return SHOAL_ENOTYPE;
    case SHOAL_DL_SEND_FAILED: return SHOAL_ENOTCONN;
    default: return SHOAL_ESTOPPED;
    }
}

void region_reply_to(shoal_region_t *r, const shoal_node_t *to, uint64_t ask_id, int status,
                       const void *data, size_t len)
{
    if (!to || to == r->self) {
        region_ask_complete(r, ask_id, status, data, len);
        return;
    }
    shoal_buf_t *b = &r->sh->scratch;
    shoal_buf_reset(b);
    wire_reply(b, r->type_hash, ask_id, status, data, len);
    int rc = shoal_system_send(r->sys, to, K_SH_REPLY, b->data, b->len);
    if (rc < 0)
        shoal_debug("%s: sharding %s: reply to %s lost: %s", shoal_node_id(r->self), r->name,
                   shoal_node_id(to), shoal_strerror(rc));
}

void region_send_reply(shoal_region_t *r, const shoal_node_t *to, uint64_t ask_id, int status,
                       const void *data, size_t len)
{
    if (ask_id)
        region_reply_to(r, to, ask_id, status, data, len);
}

void region_dead_letter(shoal_region_t *r, shoal_dead_letter_t why, const char *eid,
                        const void *msg, size_t len, const shoal_node_t *origin, uint64_t ask_id)
{
    r->stats.dead_letters[why]++;
    int64_t now = shoal_now_ms();
    if (now - r->dl_logged_at >= 1000) {
        r->dl_logged_at = now;
        shoal_info("%s: sharding %s: dead letter for entity %s: %s (%llu of this reason so far)",
                  shoal_node_id(r->self), r->name, eid ? eid : "?", shoal_dead_letter_name(why),
                  (unsigned long long)r->stats.dead_letters[why]);
    }
    for (size_t i = 0; i < r->n_dl_subs; i++)
        r->dl_subs[i].fn(r, why, eid, msg, len, r->dl_subs[i].arg);
    if (ask_id)
        region_reply_to(r, origin, ask_id, dl_status(why), NULL, 0);
}

/* ---------------------------------------------------------------------------------------------
 * Shard moves
 */
void region_moved_event(shoal_region_t *r, const char *shard, const shoal_node_t *from,
                        const shoal_node_t *to)
{
    shoal_info("%s: sharding %s: shard %s moved %s -> %s", shoal_node_id(r->self), r->name, shard,
              from ? shoal_node_id(from) : "-", to ? shoal_node_id(to) : "-");
    for (size_t i = 0; i < r->n_moved_subs; i++)
        r->moved_subs[i].fn(r, shard, from, to, r->moved_subs[i].arg);
}
