/*  wire.c — sharding's messages on the node's transport.

    Entity messages are the hot path, so their envelope is hand-coded and parsed in place (no
    allocation, no copy):
        u8 flags | u32 type hash (LE) | u8 shard len | shard | u8 entity id len | entity id
        | [u64 ask id (LE), if ENV_ASK] | [u8 origin len | origin node id, if ENV_ORIGIN]
        | payload (the rest)
    A reply: u32 type hash | u64 ask id | i32 status | payload (the rest).
    Control messages (registration, homes, handoff) are protobuf (proto/sharding.proto); they
    are rare and carry lists.
*/
#include <string.h>
#include <xxhash.h>

#include "sharding_internal.h"

static void put_u32(shoal_buf_t *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    shoal_buf_append(b, x, 4);
}

static void put_u64(shoal_buf_t *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

void wire_put_u64(shoal_buf_t *b, uint64_t v)
{
    put_u64(b, v);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

uint64_t wire_get_u64(const uint8_t *p)
{
    return get_u64(p);
}

void wire_reliable(shoal_buf_t *out, const char *producer, size_t plen, uint64_t seq,
                   const void *msg, size_t len)
{
    uint8_t l = (uint8_t)plen;
    shoal_buf_append(out, &l, 1);
    shoal_buf_append(out, producer, plen);
    put_u64(out, seq);
    if (len)
        shoal_buf_append(out, msg, len);
}

int wire_parse_reliable(const uint8_t *data, size_t len, reliable_t *out)
{
    if (len < 1 || data[0] == 0 || data[0] > SHOAL_PRODUCER_ID_MAX || len < 1u + data[0] + 8u)
        return SHOAL_EDECODE;
    out->producer = (const char *)data + 1;
    out->plen = data[0];
    out->seq = get_u64(data + 1 + out->plen);
    out->msg = data + 1 + out->plen + 8;
    out->len = len - 1 - out->plen - 8;
    return 0;
}

uint32_t wire_type_hash(const char *type_name)
{
    return XXH32(type_name, strlen(type_name), 0x5ea1u);
}

void wire_envelope(shoal_buf_t *out, uint8_t flags, uint32_t type_hash, const char *shard,
                   const char *eid, uint64_t ask_id, const shoal_node_t *origin,
                   const void *payload, size_t len)
{
    size_t sl = strlen(shard), el = strlen(eid);
    /* the origin is where a reply goes: a tell has none, and the parser refuses an origin
       without an ask (a tell routed on by a shard's old owner was dropped as malformed) */
    const char *o = origin && ask_id ? shoal_node_id(origin) : NULL;
    size_t ol = o ? strlen(o) : 0;
    flags &= (uint8_t)~(ENV_ASK | ENV_ORIGIN);
    if (ask_id)
        flags |= ENV_ASK;
    if (o)
        flags |= ENV_ORIGIN;
    shoal_buf_reserve(out, 16 + sl + el + ol + len);
    uint8_t f = flags;
    shoal_buf_append(out, &f, 1);
    put_u32(out, type_hash);
    uint8_t l = (uint8_t)sl;
    shoal_buf_append(out, &l, 1);
    shoal_buf_append(out, shard, sl);
    l = (uint8_t)el;
    shoal_buf_append(out, &l, 1);
    shoal_buf_append(out, eid, el);
    if (ask_id)
        put_u64(out, ask_id);
    if (o) {
        l = (uint8_t)ol;
        shoal_buf_append(out, &l, 1);
        shoal_buf_append(out, o, ol);
    }
    if (len)
        shoal_buf_append(out, payload, len);
}

/* An id is printable, without NUL, and not empty. */
static bool id_ok(const char *p, size_t n, size_t max)
{
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
            return false;
    return true;
}

int wire_parse_envelope(const uint8_t *data, size_t len, envelope_t *out)
{
    memset(out, 0, sizeof *out);
    size_t at = 0;
    if (len < 1 + 4 + 1)
        return SHOAL_EDECODE;
    out->flags = data[at++];
    if (out->flags & ~(ENV_ASK | ENV_ORIGIN | ENV_START | ENV_RELIABLE))
        return SHOAL_EDECODE;
    out->type_hash = get_u32(data + at);
    at += 4;
    out->shard_len = data[at++];
    if (len - at < out->shard_len + 1)
        return SHOAL_EDECODE;
    out->shard = (const char *)data + at;
    at += out->shard_len;
    out->eid_len = data[at++];
    if (len - at < out->eid_len)
        return SHOAL_EDECODE;
    out->eid = (const char *)data + at;
    at += out->eid_len;
    if (!id_ok(out->shard, out->shard_len, SHOAL_SHARD_ID_MAX) ||
        !id_ok(out->eid, out->eid_len, SHOAL_ENTITY_ID_MAX))
        return SHOAL_EDECODE;
    if (out->flags & ENV_ASK) {
        if (len - at < 8)
            return SHOAL_EDECODE;
        out->ask_id = get_u64(data + at);
        at += 8;
        if (!out->ask_id)
            return SHOAL_EDECODE;
    }
    if (out->flags & ENV_ORIGIN) {
        if (len - at < 1)
            return SHOAL_EDECODE;
        out->origin_len = data[at++];
        if (len - at < out->origin_len || !out->origin_len)
            return SHOAL_EDECODE;
        out->origin = (const char *)data + at;
        at += out->origin_len;
        if (!id_ok(out->origin, out->origin_len, 255))
            return SHOAL_EDECODE; /* a node id is printable (a NUL would cut it short) */
        if (!(out->flags & ENV_ASK))
            return SHOAL_EDECODE; /* an origin only matters for a reply */
    }
    out->payload = data + at;
    out->len = len - at;
    if ((out->flags & ENV_START) && out->len)
        return SHOAL_EDECODE;
    return 0;
}

void wire_reply(shoal_buf_t *out, uint32_t type_hash, uint64_t ask_id, int32_t status,
                const void *payload, size_t len)
{
    shoal_buf_reserve(out, 16 + len);
    put_u32(out, type_hash);
    put_u64(out, ask_id);
    put_u32(out, (uint32_t)status);
    if (len)
        shoal_buf_append(out, payload, len);
}

int wire_parse_reply(const uint8_t *data, size_t len, uint32_t *type_hash, uint64_t *ask_id,
                     int32_t *status, const uint8_t **payload, size_t *plen)
{
    if (len < 16)
        return SHOAL_EDECODE;
    *type_hash = get_u32(data);
    *ask_id = get_u64(data + 4);
    *status = (int32_t)get_u32(data + 12);
    if (!*ask_id || *status > 0)
        return SHOAL_EDECODE;
    *payload = data + 16;
    *plen = len - 16;
    return 0;
}

static bool shard_ok(const char *s)
{
    return s && id_ok(s, strlen(s), SHOAL_SHARD_ID_MAX);
}

static bool node_ok(const char *s, bool empty_ok)
{
    if (!s)
        return false;
    if (!*s)
        return empty_ok;
    return shoal_node_intern(s) != NULL;
}

static bool homes_ok(const Shoal__Sharding__Control *m, size_t min)
{
    if (m->n_homes < min)
        return false;
    for (size_t i = 0; i < m->n_homes; i++)
        if (!m->homes[i] || !shard_ok(m->homes[i]->shard) || !node_ok(m->homes[i]->region, true))
            return false;
    return true;
}

Shoal__Sharding__Control *wire_parse_control(const uint8_t *data, size_t len)
{
    Shoal__Sharding__Control *m = shoal__sharding__control__unpack(NULL, len, data);
    if (!m)
        return NULL;
    bool ok = m->type_name && *m->type_name && strlen(m->type_name) <= 255;
    for (size_t i = 0; ok && i < m->n_fences; i++)
        ok = node_ok(m->fences[i], false);
    for (size_t i = 0; ok && i < m->n_regions; i++)
        ok = node_ok(m->regions[i], false);
    for (size_t i = 0; ok && i < m->n_shard_ids; i++)
        ok = shard_ok(m->shard_ids[i]);
    for (size_t i = 0; ok && i < m->n_shards; i++) {
        const Shoal__Sharding__ShardStats *st = m->shards[i];
        ok = st && shard_ok(st->shard);
        for (size_t j = 0; ok && j < st->n_entities; j++)
            ok = st->entities[j] && id_ok(st->entities[j], strlen(st->entities[j]),
                                          SHOAL_ENTITY_ID_MAX);
    }
    if (ok) {
        switch (m->kind) {
        case SHOAL__SHARDING__CONTROL__KIND__REGISTER:
        case SHOAL__SHARDING__CONTROL__KIND__REGISTER_ACK:
        case SHOAL__SHARDING__CONTROL__KIND__SHARD_HOMES:
            ok = homes_ok(m, 0);
            break;
        case SHOAL__SHARDING__CONTROL__KIND__GET_SHARD_HOME:
            ok = shard_ok(m->shard);
            break;
        case SHOAL__SHARDING__CONTROL__KIND__ADMIN_REQ:
            ok = m->admin_op >= 1 && m->admin_op <= 3 && m->req_id &&
                 (m->admin_op == 1 || shard_ok(m->shard)) &&
                 (m->admin_op != 2 || (m->target && *m->target &&
                                       strlen(m->target) <= SHOAL_NODE_ID_MAX));
            break;
        case SHOAL__SHARDING__CONTROL__KIND__ADMIN_REPLY:
            ok = m->req_id && m->text && strlen(m->text) <= 1024;
            break;
        case SHOAL__SHARDING__CONTROL__KIND__SHARD_STARTED:
        case SHOAL__SHARDING__CONTROL__KIND__BEGIN_HANDOFF_ACK:
        case SHOAL__SHARDING__CONTROL__KIND__SHARD_STOPPED:
        case SHOAL__SHARDING__CONTROL__KIND__HOST_SHARD:
        case SHOAL__SHARDING__CONTROL__KIND__BEGIN_HANDOFF:
        case SHOAL__SHARDING__CONTROL__KIND__HANDOFF:
        case SHOAL__SHARDING__CONTROL__KIND__FENCE:
            ok = homes_ok(m, 1) && m->homes[0]->epoch != 0;
            break;
        case SHOAL__SHARDING__CONTROL__KIND__SHARD_FENCED:
            ok = homes_ok(m, 1) && m->homes[0]->epoch != 0 && m->fenced_at > m->homes[0]->epoch;
            break;
        case SHOAL__SHARDING__CONTROL__KIND__STOP_SHARDS:
        case SHOAL__SHARDING__CONTROL__KIND__GRACEFUL_SHUTDOWN:
        case SHOAL__SHARDING__CONTROL__KIND__REGIONS_REQ:
        case SHOAL__SHARDING__CONTROL__KIND__REGIONS_REPLY:
        case SHOAL__SHARDING__CONTROL__KIND__REGISTER_NACK:
        case SHOAL__SHARDING__CONTROL__KIND__SHUTDOWN_DONE:
        case SHOAL__SHARDING__CONTROL__KIND__STATS_REQ:
        case SHOAL__SHARDING__CONTROL__KIND__STATS_REPLY:
            break;
        default:
            ok = false;
        }
    }
    if (!ok) {
        shoal__sharding__control__free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

void wire_control_free(Shoal__Sharding__Control *m)
{
    if (m)
        shoal__sharding__control__free_unpacked(m, NULL);
}
